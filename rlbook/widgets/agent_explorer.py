"""Agent explorer: one multi-turn tool-use episode, token by token, and the credit each scheme gives it.

A group of four episodes of one key-value lookup problem (:class:`rlbook.envs.text.KeyValueLookupEnv`,
two hops: the prompt ``<s>74:2=`` asks for the key reached from 74 after two links; the tool answers
``(74)`` with ``[71]``, ``(71)`` with ``[42]``) is rolled out token in, token out by four scripted
policies (:data:`PLANS`; no model, nothing downloaded):

    A  follows both links and answers 42: 3 turns, reward 1;
    B  stops one link short and answers 71: 2 turns, reward 0;
    C  repeats its first call, then follows both links: 4 turns, reward 1;
    D  answers the start key without the tool: 1 turn, reward 0.

The reward comes at the last turn only. :func:`rlbook.envs.text.collate_trajectories` pads them into
the (B, T) and (B, K) tensors of :mod:`rlbook.credit`, and each credit scheme turns the rewards into
per-token advantages Â (B, T), exactly 0 on every token the model did not generate:

* ``broadcast``: GRPO's trajectory advantage (R − mean_group R) / std_group R, the same on every model
  token of the episode (:func:`rlbook.credit.broadcast_to_tokens`; Shao et al. 2024, arXiv:2402.03300);
* ``returns``: each turn's discounted return G_k = Σ_{j≥k} γ^{j−k} r_j on its own model tokens, no
  baseline (:func:`rlbook.credit.discounted_turn_returns`, :func:`rlbook.credit.turn_values_to_tokens`);
* ``rebn``: those returns z-scored over every turn of the batch, Return Batch Normalisation
  (:func:`rlbook.credit.return_batch_normalisation`; GEM, Liu et al. 2025, arXiv:2510.01051);
* ``gigpo``: GRPO's episode advantage plus ω times a step advantage that compares the returns of turns
  taken from the same *anchor state* (:func:`rlbook.credit.gigpo_advantages`; GiGPO, Feng et al. 2025,
  arXiv:2505.10978). A turn's anchor state here is the last thing the environment said before it (the
  prompt at turn 0, the tool's answer after): A, B and C all read ``[71]``, and C reads it twice.

The loss then weighs token t by Â_t·m_t / N (DAPO's token mean, :func:`rlbook.token_mean`): N is the
batch's model tokens Σ m, or, the slip chapter 16 measures, all its completion tokens (the tool's output
counted too), which shrinks every push by the model tokens' share. ipywidgets is imported when the
widget is built.
"""

from __future__ import annotations

import copy
import functools

import numpy as np
import torch

from rlbook import _checks
from rlbook.advantages import group_relative_advantages
from rlbook.credit import (broadcast_to_tokens, discounted_turn_returns, gigpo_advantages,
                           return_batch_normalisation, turn_values_to_tokens)

__all__ = ["PLANS", "SCHEMES", "NORMALISERS", "SEGMENTS", "FIGSIZE", "agent_group", "agent_credit",
           "plot_agent", "agent_readout", "agent_frame", "agent_explorer"]

# the problem: env seed and reset seed 0 give the start key 74, its link 71 and the answer 42
TASK = {"hops": 2, "num_keys": 16, "max_turns": 4, "seed": 0}
# name → each turn's action: ("call" | "answer", "start" | "last"): call or answer the start key or
# the key the tool answered last
PLANS = {
    "A: follows both links, right (3 turns)": (("call", "start"), ("call", "last"), ("answer", "last")),
    "B: stops one link short, wrong (2 turns)": (("call", "start"), ("answer", "last")),
    "C: repeats a call, then right (4 turns)": (("call", "start"), ("call", "start"), ("call", "last"),
                                                ("answer", "last")),
    "D: answers without the tool, wrong (1 turn)": (("answer", "start"),),
}
GROUP_SIZE = len(PLANS)
SCHEMES = {
    "gigpo": "GiGPO: episode + ω · anchor-state step advantage",
    "broadcast": "GRPO: one trajectory advantage, broadcast",
    "returns": "per-turn discounted returns G_k (no baseline)",
    "rebn": "ReBN: returns z-scored over the batch (GEM)",
}
SHORT = {"gigpo": "GiGPO", "broadcast": "GRPO, broadcast", "returns": "G_k, no baseline", "rebn": "ReBN"}
NORMALISERS = {"model": "model tokens (Σ mask)", "all": "all completion tokens (the slip)"}
# segment name → cell colour
SEGMENTS = {"prompt": "0.82", "model": "#8fb8e0", "tool": "#f3b77a", "pad": "white"}
FIGSIZE = (8.4, 5.2)  # inches: shown at 80 dpi, 672 px wide
FONT = 9  # points: 10 px at 80 dpi
_DT = torch.float64


def _script(plan, tok):
    """A policy for :func:`rlbook.envs.text.rollout` that plays ``plan`` turn by turn."""
    def policy(context):
        seen = tok.decode(context[1:])  # after <s>: "74:2=", then "(74)[71]" per call
        turn = seen.count("[")
        kind, which = plan[min(turn, len(plan) - 1)]
        key = seen[:2] if which == "start" or turn == 0 else seen[seen.rindex("[") + 1: seen.rindex("]")]
        text = f"({key})" if kind == "call" else key
        return tok(text, add_special_tokens=False).input_ids + ([] if kind == "call" else [tok.eos_token_id])
    return policy


def _anchor(traj, k: int) -> tuple:
    """The ids of the last thing the environment said before turn k: the prompt, or a tool's answer."""
    if k == 0:
        return tuple(traj.contexts[0])
    return tuple(i for i, t, m in zip(traj.input_ids, traj.turn_ids, traj.loss_mask) if t == k - 1 and m == 0)


@functools.lru_cache(maxsize=1)
def _group():
    from rlbook.envs.text import TOOL_ALPHABET, KeyValueLookupEnv, collate_trajectories, rollout
    from rlbook.lm.tokenizer import build_char_tokenizer

    tok = build_char_tokenizer(TOOL_ALPHABET)
    env = KeyValueLookupEnv(tok, hops=TASK["hops"], num_keys=TASK["num_keys"], max_turns=TASK["max_turns"],
                            seed=TASK["seed"])
    trajs = [rollout(env, _script(plan, tok), seed=TASK["seed"]) for plan in PLANS.values()]
    batch = collate_trajectories(trajs, pad_token_id=tok.pad_token_id)
    B, K = batch["turn_mask"].shape
    states: dict[tuple, int] = {}
    anchors = torch.full((B, K), -1, dtype=torch.long)  # −1 on turns an episode does not have
    for b, traj in enumerate(trajs):
        for k in range(traj.num_turns):
            anchors[b, k] = states.setdefault(_anchor(traj, k), len(states))
    names = {i: ("prompt" if i == 0 else tok.decode(list(s))) for s, i in states.items()}
    labels = [["" if i == tok.pad_token_id else {"<s>": "S", "</s>": "E"}.get(t, t)
               for i, t in zip(row, tok.convert_ids_to_tokens(row))] for row in batch["input_ids"].tolist()]
    return {**{k: v.clone() for k, v in batch.items()}, "turn_rewards": batch["turn_rewards"].to(_DT),
            "rewards": batch["rewards"].to(_DT), "anchor_states": anchors, "anchor_names": names,
            "labels": labels, "problem": tok.decode(trajs[0].contexts[0][1:]), "answer": env.answer}


def agent_group() -> dict:
    """The explorer's group of four episodes, collated (a fresh copy each call).

    Returns:
        a dict: ``input_ids``, ``attention_mask``, ``loss_mask``, ``turn_ids`` (B, T) with B = 4 episodes
        in the order of :data:`PLANS` and T = 33 tokens (right-padded; see
        :func:`rlbook.envs.text.collate_trajectories`); ``turn_rewards`` (B, K) float64 (reward units,
        K = 4 turns), ``turn_mask`` (B, K) bool, ``rewards`` (B,) float64 the episodes' total rewards;
        ``anchor_states`` (B, K) long, the id of the state each turn was taken from (−1 on missing
        turns) and ``anchor_names`` (id → text); ``labels`` (B, T) the tokens as cell labels ("S" for
        ``<s>``, "E" for ``</s>``, "" for padding); ``problem`` (the prompt's text) and ``answer``.
    """
    return copy.deepcopy(_group())


def _check_episode(episode) -> int:
    if isinstance(episode, np.integer):
        episode = int(episode)
    if isinstance(episode, bool) or not isinstance(episode, int) or not 0 <= episode < GROUP_SIZE:
        raise ValueError(f"`episode` must be an integer in [0, {GROUP_SIZE - 1}]; got {episode!r}")
    return episode


def _check_setting(episode, scheme, gamma, step_weight, normaliser):
    _check_episode(episode)
    if scheme not in SCHEMES:
        raise ValueError(f"`scheme` must be one of: {', '.join(SCHEMES)}; got {scheme!r}")
    _checks.check_in_range("gamma", gamma, 0.0, 1.0)
    _checks.check_in_range("step_weight", step_weight, 0.0, float("inf"), high_inclusive=False)
    if normaliser not in NORMALISERS:
        raise ValueError(f"`normaliser` must be one of: {', '.join(NORMALISERS)}; got {normaliser!r}")


def agent_credit(scheme: str = "gigpo", gamma: float = 0.9, step_weight: float = 1.0, normaliser: str = "model",
                 episode: int = 0) -> dict:
    """Every episode's credit under ``scheme``: per turn, per token, and the push in the loss.

    Args:
        scheme: a key of :data:`SCHEMES`: "broadcast" (GRPO, population std), "returns" (G_k), "rebn"
            (ReBN, GEM) or "gigpo" (GiGPO, F_norm = population std at both levels).
        gamma: γ in [0, 1], the discount per turn (not per token); unused by "broadcast".
        step_weight: ω ≥ 0, finite, GiGPO's weight of the step level; used by "gigpo" only.
        normaliser: "model" (N = Σ m, the batch's model tokens) or "all" (N = the batch's completion
            tokens: model tokens and tool output).
        episode: the episode shown (0 to 3, the order of :data:`PLANS`); checked, and returned.
    Returns:
        a dict of float64 tensors: ``turn_values`` (B, K) the per-turn advantage (0 on missing turns;
        for "broadcast" the episode's advantage on each of its turns); ``returns`` (B, K) G_k at γ;
        ``advantages`` (B, T) Â, exactly +0.0 where ``loss_mask`` is 0; ``push`` (B, T) = Â / N, the
        coefficient of −∇log π(token) in the token-mean loss; ``num_tokens`` N, with ``num_model``
        and ``num_completion``; and the inputs.
    Raises:
        ValueError: an unknown ``scheme`` or ``normaliser``; ``gamma`` outside [0, 1]; ``step_weight``
            negative or not finite; ``episode`` not an integer in [0, 3] (each argument named).
    """
    _check_setting(episode, scheme, gamma, step_weight, normaliser)
    g = _group()
    mask, turn_mask = g["loss_mask"], g["turn_mask"]
    returns = discounted_turn_returns(g["turn_rewards"], turn_mask, float(gamma))
    if scheme == "broadcast":
        episode_adv = group_relative_advantages(g["rewards"], GROUP_SIZE)
        advantages = broadcast_to_tokens(episode_adv, mask)
        turn_values = torch.where(turn_mask, episode_adv[:, None], torch.zeros_like(returns))
    else:
        if scheme == "returns":
            turn_values = returns
        elif scheme == "rebn":
            turn_values = return_batch_normalisation(returns, turn_mask)
        else:
            turn_values = gigpo_advantages(g["rewards"], returns, g["anchor_states"], turn_mask, GROUP_SIZE,
                                           step_weight=float(step_weight))
        advantages = turn_values_to_tokens(turn_values, g["turn_ids"], mask)
    num_model = int(mask.sum())
    num_completion = int((g["attention_mask"] & (g["turn_ids"] >= 0)).sum())
    num_tokens = num_model if normaliser == "model" else num_completion
    return {"turn_values": turn_values, "returns": returns, "advantages": advantages,
            "push": advantages / num_tokens, "num_tokens": num_tokens, "num_model": num_model,
            "num_completion": num_completion, "scheme": scheme, "gamma": float(gamma),
            "step_weight": float(step_weight), "normaliser": normaliser, "episode": int(episode)}


def _segments(g, b: int) -> list[str]:
    att, mask, turns = g["attention_mask"][b], g["loss_mask"][b], g["turn_ids"][b]
    return ["pad" if not a else "model" if m else "prompt" if t < 0 else "tool"
            for a, m, t in zip(att.tolist(), mask.tolist(), turns.tolist())]


def _turn_starts(g, b: int) -> list[tuple[int, int, int]]:
    """(turn k, first token, last token) of each of episode b's turns."""
    turns = g["turn_ids"][b].tolist()
    return [(k, turns.index(k), len(turns) - 1 - turns[::-1].index(k)) for k in range(int(g["turn_mask"][b].sum()))]


def _plot_strip(ax, g, b):
    from matplotlib.patches import Rectangle

    segments, mask = _segments(g, b), g["loss_mask"][b].tolist()
    for t, (seg, label, m) in enumerate(zip(segments, g["labels"][b], mask)):
        ax.add_patch(Rectangle((t - 0.5, 1.05), 1, 0.9, facecolor=SEGMENTS[seg], edgecolor="0.55", lw=0.5,
                               hatch="///" if seg == "pad" else None))
        ax.text(t, 1.5, label, ha="center", va="center", fontsize=FONT, family="monospace")
        ax.add_patch(Rectangle((t - 0.5, 0.05), 1, 0.9, facecolor="0.25" if m else "white", edgecolor="0.55", lw=0.5))
        ax.text(t, 0.5, str(int(m)), ha="center", va="center", fontsize=FONT, color="white" if m else "0.45")
    T = len(mask)
    for k, first, last in _turn_starts(g, b):
        ax.plot([first - 0.5] * 2, [0.0, 2.0], color="0.2", lw=1.0)
        label = f"turn {k}: r = {float(g['turn_rewards'][b, k]):g}"
        x, ha = (first + last) / 2, "center"
        if x + 0.17 * len(label) > T - 0.5:  # about 0.34 cells a character: keep the label inside the axes
            x, ha = T - 0.5, "right"
        ax.text(x, 2.05, label, ha=ha, va="bottom", fontsize=FONT)
    ax.set_ylim(0, 2.55)
    ax.set_yticks([0.5, 1.5], ["loss mask", "token"], fontsize=FONT)
    ax.tick_params(axis="x", labelbottom=False, length=0)
    for side in ("top", "right", "left", "bottom"):
        ax.spines[side].set_visible(False)


def _plot_bars(ax, values, g, b, color_by_sign=True):
    t = np.arange(len(values))
    colors = np.where(values > 0, "#2a9d4b", np.where(values < 0, "#c0392b", "0.5")) if color_by_sign else "0.5"
    bars = ax.bar(t, values, 0.8, color=colors)
    ax.axhline(0.0, color="0.3", lw=0.8)
    for k, first, _ in _turn_starts(g, b):
        ax.axvline(first - 0.5, color="0.2", lw=1.0, ls=":")
    return bars


def _plot_advantages(ax, s, g, b):
    values = s["advantages"][b].numpy()
    _plot_bars(ax, values, g, b)
    top = max(float(s["advantages"].abs().max()), 0.1) * 1.35
    ax.set_ylim(-top, top)
    mask = g["loss_mask"][b].tolist()
    for k, first, last in _turn_starts(g, b):
        model = [t for t in range(first, last + 1) if mask[t]]
        value = float(s["turn_values"][b, k])
        ax.text(np.mean(model), value + (0.06 if value >= 0 else -0.06) * top, f"{value + 0.0:+.3f}", ha="center",
                va="bottom" if value >= 0 else "top", fontsize=FONT)
    ax.set_ylabel("Â_t", fontsize=FONT)
    params = {"broadcast": "", "returns": f", γ = {s['gamma']:g}", "rebn": f", γ = {s['gamma']:g}",
              "gigpo": f", γ = {s['gamma']:g}, ω = {s['step_weight']:g}"}[s["scheme"]]
    ax.set_title(f"{SCHEMES[s['scheme']]}{params}; 0 on every token the model did not write", fontsize=FONT)


def _plot_push(ax, s, g, b):
    _plot_bars(ax, s["push"][b].numpy(), g, b)
    other = s["num_completion"] if s["normaliser"] == "model" else s["num_model"]
    t = np.arange(s["push"].shape[1])
    ax.step(t, s["advantages"][b].numpy() / other, where="mid", color="0.15", lw=0.9)
    top = max(float(s["advantages"].abs().max()), 0.1) / s["num_model"] * 1.35
    ax.set_ylim(-top, top)
    ax.set_ylabel("push Â·m/N", fontsize=FONT)
    names = {s["num_model"]: "model tokens", s["num_completion"]: "all completion tokens"}
    ax.set_title(f"loss weight per token: bars N = {s['num_tokens']} ({names[s['num_tokens']]}), line N = {other} "
                 f"({names[other]}); model share {s['num_model'] / s['num_completion']:.2f}", fontsize=FONT)
    ax.set_xlabel("token position t", fontsize=FONT)


def plot_agent(episode: int = 0, scheme: str = "gigpo", gamma: float = 0.9, step_weight: float = 1.0,
               normaliser: str = "model", axes=None):
    """Three panels over one episode's tokens (positions 0 to T − 1 of the padded group):

    (top) the tokens as cells coloured by segment (:data:`SEGMENTS`: prompt, model, tool output,
    padding) with the loss mask underneath and each turn's reward above; (middle) the per-token
    advantage Â_t of ``scheme`` as bars, exactly 0 on non-model tokens, each turn's value printed over
    its model tokens, the y-scale fixed by the whole group; (bottom) the push Â_t·m_t/N under
    ``normaliser`` (bars) and under the other one (line).

    Args:
        as :func:`agent_credit`; axes: three Matplotlib axes (sharing x), or None for a new figure of
            ``FIGSIZE`` (8.4 × 5.2 in).
    Returns:
        the three axes. The middle panel's bars are its first ``T`` patches, in token order.
    Raises:
        ValueError: as :func:`agent_credit` (checked before anything is drawn); ``axes`` not three axes.
    """
    s = agent_credit(scheme, gamma, step_weight, normaliser, episode)
    if axes is None:
        import matplotlib.pyplot as plt

        _, axes = plt.subplots(3, 1, figsize=FIGSIZE, dpi=80, sharex=True, gridspec_kw={"height_ratios": [1.0, 1.6, 1.2]})
    axes = list(np.asarray(axes, dtype=object).flatten())
    if len(axes) != 3:
        raise ValueError(f"`axes` must hold three Matplotlib axes; got {len(axes)}")
    g, b = _group(), s["episode"]
    _plot_strip(axes[0], g, b)
    axes[0].set_title(f"{list(PLANS)[b]}  ·  {g['problem']} (answer {g['answer']}); S = <s>, E = </s>",
                      fontsize=FONT)
    _plot_advantages(axes[1], s, g, b)
    _plot_push(axes[2], s, g, b)
    T = s["advantages"].shape[1]
    for ax in axes:
        ax.set_xlim(-0.6, T - 0.4)
        ax.tick_params(labelsize=FONT)
    return axes


def _legend(fig):
    from matplotlib.patches import Patch

    names = {"prompt": "prompt", "model": "model (action)", "tool": "tool output", "pad": "padding"}
    handles = [Patch(facecolor=c, edgecolor="0.55", hatch="///" if k == "pad" else None, label=names[k])
               for k, c in SEGMENTS.items()]
    fig.legend(handles=handles, loc="lower center", ncol=4, fontsize=FONT, frameon=False, bbox_to_anchor=(0.5, 0.0))


def _cells(values, n: int) -> str:
    """One row of K turns, 8 characters each; "·" on the turns (k ≥ n) the episode does not have."""
    return "".join(f"{float(v) + 0.0:8.3f}" if k < n else f"{'·':>8}" for k, v in enumerate(values))


def _group_table(s, g) -> list[str]:
    """The readout's table: per episode its turns, R, the returns G_k and the per-turn values."""
    K = g["turn_mask"].shape[1]
    head = "".join(f"{'turn ' + str(k):>8}" for k in range(K))
    lines = [f"{g['problem']} (answer {g['answer']}): group of {GROUP_SIZE}, γ = {s['gamma']:g}",
             f"  {'episode':<9}{'R':>3}   G_k at γ{' ' * (8 * K - 8)}   Â per turn: {SHORT[s['scheme']]}",
             f"  {'':<12}{head}   {head}"]
    for b, name in enumerate(PLANS):
        n = int(g["turn_mask"][b].sum())
        mark = "▶" if b == s["episode"] else " "
        lines.append(f"{mark} {name[:1]} {n} turn{'s' if n > 1 else ' '}{float(g['rewards'][b]):3.0f}"
                     f"{_cells(s['returns'][b], n)}   {_cells(s['turn_values'][b], n)}")
    return lines


def agent_readout(episode: int = 0, scheme: str = "gigpo", gamma: float = 0.9, step_weight: float = 1.0,
                  normaliser: str = "model") -> tuple[str, list[str]]:
    """The explorer's numbers at one setting (text; pure, tested).

    Returns:
        (readout, warnings): per episode of the group (the shown one marked ▶) its turns, reward R, the
        turns' returns G_k and per-turn values under ``scheme``; for GiGPO each turn's anchor state;
        the batch's model and completion token counts, N and the push per unit advantage. Warnings:
        γ = 0 with a scheme that uses it (the calls, rewarded 0, get a return of 0), ω = 0 under GiGPO
        (it is then GRPO's broadcast).
    Raises:
        ValueError: as :func:`agent_credit`.
    """
    s = agent_credit(scheme, gamma, step_weight, normaliser, episode)
    g = _group()
    lines = _group_table(s, g)
    if scheme == "gigpo":
        for b, name in enumerate(PLANS):
            states = g["anchor_states"][b, : int(g["turn_mask"][b].sum())]
            lines.append(f"  anchor states {name[:1]}: " + ", ".join(g["anchor_names"][int(a)] for a in states))
    share = s["num_model"] / s["num_completion"]
    lines.append(f"batch: {s['num_model']} model tokens of {s['num_completion']} completion tokens "
                 f"(share {share:.3f}); N = {s['num_tokens']}: push = Â × {1 / s['num_tokens']:.4f}")
    warnings = []
    if s["gamma"] == 0 and scheme != "broadcast":
        warnings.append("γ = 0: each turn's return is its own reward, so every tool call (reward 0) gets G = 0, "
                        "whether or not it led to the right answer")
    if scheme == "gigpo" and s["step_weight"] == 0:
        warnings.append("ω = 0: GiGPO's step level is off; it is GRPO's trajectory advantage, broadcast")
    return "\n".join(lines), warnings


def agent_frame(episode: int, scheme: str, gamma: float, step_weight: float, normaliser: str):
    """The explorer's render function: :func:`plot_agent` on a new figure and :func:`agent_readout`.

    Returns:
        a :class:`rlbook.widgets._live.Frame`.
    Raises:
        ValueError: as :func:`agent_credit` (checked before a figure is made).
    """
    import matplotlib.pyplot as plt

    from rlbook.widgets._live import Frame

    args = (episode, scheme, gamma, step_weight, normaliser)
    readout, warnings = agent_readout(*args)
    fig, axes = plt.subplots(3, 1, figsize=FIGSIZE, dpi=80, sharex=True, gridspec_kw={"height_ratios": [1.0, 1.6, 1.2]})
    plot_agent(*args, axes=axes)
    _legend(fig)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    return Frame(fig, readout, warnings)


def agent_explorer():
    """Interactive explorer: the episode shown and the credit scheme (dropdowns), sliders for γ and
    GiGPO's ω, and the loss's normaliser; redraws :func:`plot_agent` and prints :func:`agent_readout`.
    γ = 0 and ω = 0 are on their sliders and answered with a "⚠" line. Needs ipywidgets (imported here).

    Returns:
        an ``ipywidgets.VBox`` (display it in a notebook); see :func:`rlbook.widgets._live.live_explorer`.
    """
    import ipywidgets as widgets

    from rlbook.widgets._live import live_explorer

    style = {"description_width": "initial"}
    controls = {
        "episode": widgets.Dropdown(options=[(name, b) for b, name in enumerate(PLANS)], value=0,
                                    description="episode", style=style, layout=widgets.Layout(width="390px")),
        "scheme": widgets.Dropdown(options=[(label, key) for key, label in SCHEMES.items()], value="gigpo",
                                   description="credit", style=style, layout=widgets.Layout(width="440px")),
        "gamma": widgets.FloatSlider(value=0.9, min=0.0, max=1.0, step=0.05, description="γ", style=style),
        "step_weight": widgets.FloatSlider(value=1.0, min=0.0, max=2.0, step=0.1, description="ω", style=style),
        "normaliser": widgets.Dropdown(options=[(label, key) for key, label in NORMALISERS.items()], value="model",
                                       description="N counts", style=style, layout=widgets.Layout(width="330px")),
    }
    layout = [["episode", "scheme"], ["gamma", "step_weight", "normaliser"]]
    return live_explorer(controls, layout, agent_frame)
