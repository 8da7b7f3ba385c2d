"""Advantage explorer: one prompt's group of G completions → advantages → per-token push.

Pick the rewards and lengths of G completions, an advantage estimator and a loss aggregation, and
see how hard each completion's tokens are pushed up (or down). The push on token t of completion i
is the coefficient of ∇log π(o_{i,t}) in the gradient of the aggregated loss (on-policy, ρ = 1):

    push_{i,t} = Â_i · w_{i,t}      (w from :func:`rlbook.per_token_weights`)

The pure functions below do the computing (and are tested); :func:`advantage_explorer` only wires
ipywidgets controls to :func:`plot_advantages`. ipywidgets is imported when the widget is built.
"""

from __future__ import annotations

import functools

import numpy as np
import torch

from rlbook.advantages import group_relative_advantages, leave_one_out_advantages, maxrl_advantages
from rlbook.aggregation import AGGREGATIONS, per_token_weights

__all__ = ["ESTIMATORS", "ESTIMATOR_LABELS", "AGGREGATION_LABELS", "advantage_table", "per_token_weights_for_group", "plot_advantages", "advantage_readout", "advantage_explorer"]

ESTIMATORS = {
    "grpo": functools.partial(group_relative_advantages, scale="std"),
    "grpo_no_std": functools.partial(group_relative_advantages, scale="none"),
    "rloo": leave_one_out_advantages,
    "maxrl": maxrl_advantages,
}
# names for people (figure titles, legends, the widget's menus); the keys are the code names
ESTIMATOR_LABELS = {"grpo": "GRPO (÷ group std)", "grpo_no_std": "Dr. GRPO (no std)", "rloo": "RLOO (leave-one-out)",
                    "maxrl": "MaxRL (÷ success rate)"}
AGGREGATION_LABELS = {"seq_mean_token_mean": "GRPO: mean over answers of token means",
                      "token_mean": "DAPO: mean over all tokens",
                      "fixed_length_mean": "Dr. GRPO: sum ÷ (B · L_max)"}


def advantage_table(rewards, estimator: str = "grpo", std: str = "population") -> np.ndarray:
    """Advantages of one group of completions under a named estimator.

    Source: rlbook.group_relative_advantages (GRPO, "grpo"; Dr. GRPO, "grpo_no_std"),
    rlbook.leave_one_out_advantages ("rloo"), rlbook.maxrl_advantages ("maxrl").

    Args:
        rewards: (G,) the rewards of one prompt's G completions.
        estimator: "grpo", "grpo_no_std", "rloo" or "maxrl".
        std: "population" or "sample", for "grpo" only.
    Returns:
        (G,) float64 NumPy array.
    Gradient:
        none (NumPy out).
    Raises:
        ValueError: unknown estimator; the estimator's own errors (e.g. G < 2 for "rloo").
    See also:
        per_token_weights_for_group, plot_advantages
    Example:
        >>> advantage_table([1, 1, 0, 1, 0], "grpo").round(4).tolist()
        [0.8165, 0.8165, -1.2247, 0.8165, -1.2247]
    """
    if estimator not in ESTIMATORS:
        raise ValueError(f"`estimator` must be one of {sorted(ESTIMATORS)}; got {estimator!r}")
    rewards = torch.as_tensor(np.asarray(rewards, dtype=np.float64))
    if rewards.dim() != 1:
        raise ValueError(f"`rewards` must have shape (G,) (one group); got {tuple(rewards.shape)}")
    kwargs = {"std": std} if estimator == "grpo" else {}
    return ESTIMATORS[estimator](rewards, len(rewards), **kwargs).numpy()


def _mask_from_lengths(lengths, max_length=None) -> torch.Tensor:
    lengths = np.asarray(lengths)
    if lengths.ndim != 1 or np.any(lengths < 1) or np.any(lengths != np.round(lengths)):
        raise ValueError(f"`lengths` must be (G,) positive whole token counts; got {lengths.tolist()}")
    width = int(lengths.max()) if max_length is None else int(max_length)
    if width < lengths.max():
        raise ValueError(f"`max_length` ({max_length}) must be ≥ the longest completion ({int(lengths.max())})")
    return torch.arange(width)[None, :] < torch.as_tensor(lengths, dtype=torch.long)[:, None]


def per_token_weights_for_group(
    rewards, lengths, estimator: str = "grpo", aggregation: str = "seq_mean_token_mean", max_length=None
) -> np.ndarray:
    """Per-token push Â_i · w_{i,t} for one group: advantage times aggregation weight.

    Source: book eq. (agg-weights); rlbook.per_token_weights.

    Args:
        rewards: (G,) rewards; lengths: (G,) completion lengths in tokens (≥ 1).
        estimator: see :func:`advantage_table`.
        aggregation: "seq_mean_token_mean", "token_mean" or "fixed_length_mean".
        max_length: L_max (columns of the result; Dr. GRPO's constant); default max(lengths).
    Returns:
        (G, L_max) float64 array, 0 beyond each completion's end.
    Gradient:
        none (NumPy out). On-policy (ρ = 1) the push equals −∂L/∂log π(o_{i,t}) for the
        aggregated surrogate L = agg(−Â·log π); the tests check this with autograd.
    Raises:
        ValueError: lengths not positive integers or not (G,); bad estimator or aggregation.
    See also:
        rlbook.per_token_weights, advantage_table
    Example:
        >>> per_token_weights_for_group([1, 0], [1, 2], "grpo_no_std", "token_mean").round(4).tolist()
        [[0.1667, 0.0], [-0.1667, -0.1667]]
    """
    advantages = advantage_table(rewards, estimator)
    mask = _mask_from_lengths(lengths, max_length)
    if len(mask) != len(advantages):
        raise ValueError(f"`lengths` must have one entry per reward ({len(advantages)}); got {len(mask)}")
    if aggregation not in AGGREGATIONS:
        raise ValueError(f"`aggregation` must be one of {sorted(AGGREGATIONS)}; got {aggregation!r}")
    weights = per_token_weights(mask, aggregation, max_length=mask.shape[1], dtype=torch.float64).numpy()
    return advantages[:, None] * weights


def plot_advantages(rewards, lengths, estimator: str = "grpo", aggregation: str = "seq_mean_token_mean", ax=None, max_length=None):
    """Bar chart of the push each completion's tokens get: Â_i · w_i (one bar per completion).

    A bar's height is the push on *each* of the completion's tokens, its label Â; the tick gives r and L.
    A group whose rewards are all equal is annotated: every advantage is 0, so it adds nothing
    to the gradient.

    Args:
        rewards, lengths, estimator, aggregation, max_length: as in per_token_weights_for_group.
        ax: matplotlib axes or None (a new small figure).
    Returns:
        the matplotlib axes.
    """
    from rlbook.plotting import get_ax

    push = per_token_weights_for_group(rewards, lengths, estimator, aggregation, max_length)
    advantages = advantage_table(rewards, estimator)
    per_token = push[:, 0]  # the push is the same on every token of a completion
    ax = get_ax(ax)
    colors = ["C2" if a > 0 else ("C3" if a < 0 else "0.6") for a in advantages]
    x = np.arange(len(per_token))
    bars = ax.bar(x, per_token, color=colors)
    ax.bar_label(bars, labels=[f"{a:+.2f}" for a in advantages], fontsize=8.5, padding=1)
    ax.axhline(0.0, color="k", lw=0.8)
    ax.set_xticks(x, [f"r={r:g}\nL={int(n)}" for r, n in zip(rewards, lengths)], fontsize=8.5)
    ax.set_ylabel("push per token  Â·w")
    ax.set_title(f"{ESTIMATOR_LABELS[estimator]}\n{AGGREGATION_LABELS[aggregation]}  (bar labels: Â)", fontsize=9)
    ax.margins(y=0.15)
    if np.all(np.asarray(rewards) == np.asarray(rewards)[0]):
        ax.text(0.5, 0.75, "all rewards equal:\nevery advantage is 0,\nno learning signal", transform=ax.transAxes,
                ha="center", va="center", fontsize=9, color="C3")
        ax.set_ylim(-1, 1)
    return ax


def advantage_readout(rewards, lengths, estimator: str = "grpo", aggregation: str = "seq_mean_token_mean",
                      max_length=None) -> tuple[str, list[str]]:
    """The explorer's numbers and warnings for one group (text; pure, tested).

    Returns:
        (readout, warnings): the advantages Â_i, the push per token Â_i·w_i, the total push on the
        group's tokens; a warning when the group carries no signal (G = 1, or all rewards equal).
    Raises:
        ValueError: as :func:`per_token_weights_for_group` (e.g. G = 1 with "rloo").
    """
    rewards = np.asarray(rewards, dtype=np.float64)
    push = per_token_weights_for_group(rewards, lengths, estimator, aggregation, max_length)
    advantages = advantage_table(rewards, estimator)
    lines = ["Â      = " + "  ".join(f"{a:+.3f}" for a in advantages),
             "push/tok = " + "  ".join(f"{p:+.4f}" for p in push[:, 0]),
             f"total push on the group's tokens: {push.sum():+.4f}"]
    warnings = []
    if len(rewards) == 1:
        warnings.append("G = 1: a group of one has no other completion to compare with, so its advantage is 0 "
                        "and the prompt teaches nothing; use G ≥ 2")
    elif np.all(rewards == rewards[0]):
        warnings.append("all rewards are equal: every advantage is 0, the group adds nothing to the gradient")
    return "\n".join(lines), warnings


def advantage_explorer(max_group_size: int = 8):
    """Interactive explorer: sliders for G, each completion's reward and length, the estimator and
    the aggregation; redraws :func:`plot_advantages` and prints :func:`advantage_readout`.
    Needs ipywidgets (imported here). G = 1 (a group of one) is allowed and explained with a "⚠" line.

    Returns:
        an ``ipywidgets.VBox`` (display it in a notebook); see :func:`rlbook.widgets._live.live_explorer`.
    """
    import ipywidgets as widgets
    import matplotlib.pyplot as plt

    from rlbook.widgets._live import Frame, live_explorer

    controls = {"group_size": widgets.IntSlider(value=5, min=1, max=max_group_size, description="G"),
                "estimator": widgets.Dropdown(options=[(ESTIMATOR_LABELS[k], k) for k in ESTIMATORS], value="grpo",
                                              description="advantage"),
                "aggregation": widgets.Dropdown(options=[(AGGREGATION_LABELS.get(k, k), k) for k in AGGREGATIONS],
                                                value="seq_mean_token_mean", description="aggregation",
                                                layout=widgets.Layout(width="420px"))}  # its longest label whole
    for i in range(max_group_size):
        # labels "0", "0.5", "1" and a label column sized to "r0": the value is never cut to "1." or "0."
        controls[f"r{i}"] = widgets.Dropdown(options=[("0", 0.0), ("0.5", 0.5), ("1", 1.0)], value=float(i % 2 == 0),
                                             description=f"r{i}", style={"description_width": "2.2em"},
                                             layout=widgets.Layout(width="120px"))
        controls[f"L{i}"] = widgets.IntSlider(value=4 + 3 * i, min=1, max=32, description=f"L{i}",
                                              style={"description_width": "2.2em"}, layout=widgets.Layout(width="230px"))
    box = None
    header = [["group_size"], ["estimator", "aggregation"]]  # then one row per completion

    def render(group_size, estimator, aggregation, **per_completion):
        if box is not None:  # show the first G completions' controls only
            for i, row in enumerate(box.children[len(header):len(header) + max_group_size]):
                row.layout.display = None if i < group_size else "none"
        rewards = [per_completion[f"r{i}"] for i in range(group_size)]
        lengths = [per_completion[f"L{i}"] for i in range(group_size)]
        readout, warnings = advantage_readout(rewards, lengths, estimator, aggregation, max_length=32)
        fig, ax = plt.subplots(figsize=(5.5, 3.2), dpi=80)
        plot_advantages(rewards, lengths, estimator, aggregation, ax=ax, max_length=32)
        return Frame(fig, readout, warnings)

    layout = header + [[f"r{i}", f"L{i}"] for i in range(max_group_size)]
    box = live_explorer(controls, layout, render)
    box.redraw()
    return box
