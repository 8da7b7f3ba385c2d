"""Clip explorer: PPO's clipped objective and CISPO's clipped weight as functions of the ratio ρ.

For one token with advantage Â and ratio ρ = π_θ/π_θold the explorer draws

    PPO:   objective min(ρÂ, clip(ρ, 1−ε_low, 1+ε_high)Â) and its gradient w.r.t. log π_θ,
           which is ρÂ where the clip is inactive and exactly 0 where it is active;
    CISPO: the weight clip(ρ)·Â that multiplies ∇log π_θ — never 0 — and the "implied objective"
           whose log-π gradient it is.

Every number comes from the library's own losses (:func:`rlbook.clipped_surrogate_loss`,
:func:`rlbook.cispo_loss`) differentiated by autograd, so the picture is what training uses.
:func:`clip_objective_curves` is pure and tested; :func:`clip_explorer` wires ipywidgets (imported
lazily) to :func:`plot_clip_objective`.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from rlbook import _checks
from rlbook.losses import cispo_loss, clip_region, clipped_surrogate_loss

__all__ = ["clip_objective_curves", "plot_clip_objective", "clip_readout", "clip_explorer"]

KINDS = ("ppo", "cispo")
_RATIO_FLOOR = 1e-8  # ρ = 0 means log π = −∞; evaluate at this tiny ratio instead


def _cispo_implied_objective(ratio: np.ndarray, advantage: float, low: float, high: float) -> np.ndarray:
    """J(ρ) with dJ/dlog ρ = clip(ρ, low, high)·Â and J = ρÂ inside the band (continuous at the edges)."""
    inside = np.clip(ratio, low, high)
    outside = inside * (1.0 + np.log(ratio / inside))  # = ratio where ratio is inside the band
    return advantage * outside


def clip_objective_curves(
    advantage: float,
    clip_eps_low: float = 0.2,
    clip_eps_high: float | None = None,
    ratio_min: float = 0.0,
    ratio_max: float = 2.0,
    num: int = 401,
    kind: str = "ppo",
) -> dict[str, np.ndarray]:
    """Per-token objective, gradient and clipped region on a grid of ratios, from the library losses.

    PPO:   objective = −clipped_surrogate_loss = min(ρÂ, clip(ρ)Â)
    CISPO: objective = Â·c·(1 + ln(ρ/c)), c = clip(ρ) (equals ρÂ inside the band), whose
           gradient w.r.t. log π is −∂cispo_loss/∂log π = clip(ρ)·Â
    Both:  grad_log_prob = ∂objective/∂log π_θ (autograd through the library loss, old_log_prob = 0),
           grad_ratio = grad_log_prob / ρ.

    Source: book eqs. (ppo-clip), (cispo); Schulman et al. 2017, arXiv:1707.06347, Fig. 1;
    MiniMax-M1, arXiv:2506.13585 (CISPO).

    Args:
        advantage: Â, any real number.
        clip_eps_low: ε_low in [0, 1].
        clip_eps_high: ε_high ≥ 0; None means ε_low (for "cispo" too).
        ratio_min, ratio_max: grid range, 0 ≤ ratio_min < ratio_max (ρ = 0 is evaluated at 1e-8).
        num: grid points, ≥ 2.
        kind: "ppo" or "cispo".
    Returns:
        dict of float64/bool NumPy arrays of shape (num,): ``ratio`` (the grid, 0 replaced by 1e-8), ``objective``, ``unclipped``
        (ρÂ), ``grad_log_prob``, ``grad_ratio``, ``weight`` (the coefficient of Â·∇log π: ρ·1[not
        clipped] for PPO, clip(ρ) for CISPO), ``clipped`` (PPO: the zero-gradient region; CISPO: the
        weight is clipped, i.e. ρ outside the band), and scalars ``low``/``high`` (the band edges).
    Raises:
        ValueError: bad kind, ε, range or num (the argument is named).
    See also:
        rlbook.clip_region, rlbook.widgets.clip_explorer.plot_clip_objective
    """
    if kind not in KINDS:
        raise ValueError(f"`kind` must be one of {KINDS}; got {kind!r}")
    clip_eps_high = clip_eps_low if clip_eps_high is None else clip_eps_high
    _checks.check_in_range("clip_eps_low", clip_eps_low, 0.0, 1.0)
    _checks.check_in_range("clip_eps_high", clip_eps_high, 0.0)
    _checks.check_in_range("advantage", advantage)
    _checks.check_in_range("ratio_min", ratio_min, 0.0)
    _checks.check_in_range("ratio_max", ratio_max, float(ratio_min), math.inf, low_inclusive=False)
    if isinstance(num, bool) or int(num) != num or num < 2:
        raise ValueError(f"`num` must be an integer >= 2; got {num!r}")
    low, high = 1.0 - clip_eps_low, 1.0 + clip_eps_high
    ratio = np.maximum(np.linspace(ratio_min, ratio_max, int(num)), _RATIO_FLOOR)
    ratio_eval = torch.tensor(ratio, dtype=torch.float64)
    log_probs = ratio_eval.log().requires_grad_()
    old_log_probs = torch.zeros_like(ratio_eval)
    adv = torch.full_like(ratio_eval, float(advantage))
    if kind == "ppo":
        loss = clipped_surrogate_loss(log_probs, old_log_probs, adv, clip_eps_low, clip_eps_high)
        objective = -loss.detach().numpy()
        clipped = clip_region(ratio_eval, adv, clip_eps_low, clip_eps_high).numpy()
        weight = np.where(clipped, 0.0, ratio_eval.numpy())
    else:
        loss = cispo_loss(log_probs, old_log_probs, adv, clip_eps_low, clip_eps_high)
        objective = _cispo_implied_objective(ratio_eval.numpy(), float(advantage), low, high)
        clipped = (ratio_eval.numpy() < low) | (ratio_eval.numpy() > high)
        weight = np.clip(ratio_eval.numpy(), low, high)
    (grad,) = torch.autograd.grad(loss.sum(), log_probs)
    grad_log_prob = -grad.numpy()
    return {
        "ratio": ratio,
        "objective": objective,
        "unclipped": ratio * float(advantage),
        "grad_log_prob": grad_log_prob,
        "grad_ratio": grad_log_prob / ratio_eval.numpy(),
        "weight": weight,
        "clipped": clipped,
        "low": np.float64(low),
        "high": np.float64(high),
    }


def plot_clip_objective(
    advantage: float = 1.0,
    clip_eps_low: float = 0.2,
    clip_eps_high: float | None = None,
    ratio_min: float = 0.0,
    ratio_max: float = 2.0,
    kind: str = "ppo",
    ax=None,
    num: int = 401,
):
    """Draw the objective, its gradient w.r.t. log π and the clipped region (shaded) against ρ.

    Solid: the objective (PPO) or implied objective (CISPO); dashed grey: the unclipped ρÂ;
    orange: ∂objective/∂log π (the coefficient of ∇log π in the policy gradient); shaded: where
    PPO's gradient is zero (PPO) or the weight is clipped (CISPO); dotted: the band edges.

    Args:
        as :func:`clip_objective_curves`; ax: matplotlib axes or None (a new small figure).
    Returns:
        the matplotlib axes.
    """
    from rlbook.plotting import get_ax

    c = clip_objective_curves(advantage, clip_eps_low, clip_eps_high, ratio_min, ratio_max, num, kind)
    ax = get_ax(ax)
    ratio = c["ratio"]
    ax.plot(ratio, c["unclipped"], color="0.6", ls="--", lw=1, label="ρÂ (unclipped)")
    label = "objective" if kind == "ppo" else "implied objective"
    ax.plot(ratio, c["objective"], color="C0", lw=2, label=label)
    ax.plot(ratio, c["grad_log_prob"], color="C1", lw=1.5, label="∂/∂log π")
    shade = "gradient = 0" if kind == "ppo" else "weight clipped"
    ax.fill_between(ratio, 0, 1, where=c["clipped"], color="C3", alpha=0.15, step="mid",
                    transform=ax.get_xaxis_transform(), label=shade)
    for edge in (c["low"], c["high"]):
        ax.axvline(edge, color="k", ls=":", lw=0.8)
    ax.axhline(0.0, color="k", lw=0.5)
    span = max(abs(advantage), 1e-3) * (max(ratio_max, c["high"]) + 0.4)
    ax.set_ylim(-span, span)
    ax.set_xlim(ratio[0], ratio[-1])
    ax.set_xlabel("ratio ρ = π_θ / π_θold")
    eps_high = clip_eps_low if clip_eps_high is None else clip_eps_high
    ax.set_title(f"{kind.upper()}: Â={advantage:+.2g}, ε_low={clip_eps_low:g}, ε_high={eps_high:g}", fontsize=9)
    ax.legend(fontsize=8.5, loc="best")
    return ax


def clip_readout(advantage: float, clip_eps_low: float, clip_eps_high: float | None, ratio_min: float,
                 ratio_max: float, kind: str = "ppo") -> tuple[str, list[str]]:
    """The explorer's numbers and warnings for these settings (text lines; pure, tested).

    Returns:
        (readout, warnings): the band, the share of the ρ range whose gradient is zero (PPO) or
        whose weight is clipped (CISPO), and ∂objective/∂log π at ρ = 1 ± 0.5 (inside the range);
        warnings for a band with no room on one side (ε = 0) or an advantage of 0.
    Raises:
        ValueError: as :func:`clip_objective_curves`.
    """
    c = clip_objective_curves(advantage, clip_eps_low, clip_eps_high, ratio_min, ratio_max, 401, kind)
    share = float(np.mean(c["clipped"]))
    what = "zero gradient" if kind == "ppo" else "clipped weight"
    lines = [f"band [1−ε_low, 1+ε_high] = [{c['low']:.2f}, {c['high']:.2f}]",
             f"{what} on {100 * share:.1f}% of ρ ∈ [{ratio_min:.2f}, {ratio_max:.2f}]"]
    for rho in (0.5, 1.5):
        i = int(np.argmin(np.abs(c["ratio"] - rho)))
        if abs(c["ratio"][i] - rho) < 0.01:
            lines.append(f"∂objective/∂log π at ρ = {rho:g}: {c['grad_log_prob'][i] + 0.0:+.3f}")
    eps_high = clip_eps_low if clip_eps_high is None else clip_eps_high
    warnings = []
    if clip_eps_low == 0:
        warnings.append("ε_low = 0 leaves no room below ρ = 1: once a token's probability has dropped, "
                        "a negative advantage cannot lower it further (PPO's gradient is 0 there)")
    if eps_high == 0:
        warnings.append("ε_high = 0 leaves no room above ρ = 1: a positive advantage cannot raise "
                        "a token's probability past where it was sampled")
    if advantage == 0:
        warnings.append("Â = 0: the token carries no learning signal whatever the ratio")
    return "\n".join(lines), warnings


def clip_explorer():
    """Interactive explorer: sliders for ε_low, ε_high, Â and the ratio range, and the kind
    (PPO or CISPO); redraws :func:`plot_clip_objective` and prints :func:`clip_readout`.
    Needs ipywidgets (imported here). A degenerate setting (ε = 0, an empty range) shows a "⚠" line.

    Returns:
        an ``ipywidgets.VBox`` (display it in a notebook); see :func:`rlbook.widgets._live.live_explorer`.
    """
    import ipywidgets as widgets
    import matplotlib.pyplot as plt

    from rlbook.widgets._live import Frame, live_explorer

    style = {"description_width": "70px"}
    controls = {
        "clip_eps_low": widgets.FloatSlider(value=0.2, min=0.0, max=0.9, step=0.01, description="ε_low", style=style),
        "clip_eps_high": widgets.FloatSlider(value=0.2, min=0.0, max=2.0, step=0.01, description="ε_high", style=style),
        "advantage": widgets.FloatSlider(value=1.0, min=-2.0, max=2.0, step=0.1, description="Â", style=style),
        "ratios": widgets.FloatRangeSlider(value=(0.0, 2.0), min=0.0, max=4.0, step=0.05, description="ρ range",
                                           style=style),
        "kind": widgets.ToggleButtons(options=list(KINDS), value="ppo", description="kind", style=style),
    }

    def render(clip_eps_low, clip_eps_high, advantage, ratios, kind):
        lo, hi = ratios
        if hi <= lo:
            raise ValueError(f"the ρ range is empty ({lo:g} to {hi:g}): widen it")
        readout, warnings = clip_readout(advantage, clip_eps_low, clip_eps_high, lo, hi, kind)
        fig, ax = plt.subplots(figsize=(5.5, 3.4), dpi=80)
        plot_clip_objective(advantage, clip_eps_low, clip_eps_high, lo, hi, kind, ax=ax)
        return Frame(fig, readout, warnings)

    return live_explorer(controls, [["clip_eps_low", "clip_eps_high"], ["advantage", "ratios"], ["kind"]], render)
