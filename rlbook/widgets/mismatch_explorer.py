"""Mismatch explorer: a sampler that is not the trainer, the ratio π/μ, and what TIS and MIS do to the gradient.

The trainer's policy π = softmax(z) over ten tokens is fixed; the sampler μ is built from the same
logits by :func:`rlbook.mismatch.sampler_log_probs`: rounded to fp32 / bf16 / fp16 after a common
offset (softmax ignores the offset, rounding does not: real logits sit far from 0), divided by a
temperature T the trainer does not apply, and cut to its top-p nucleus. One token a ∼ μ gives the
policy-gradient estimate w(a)·A(a)·(e_a − π) (A: fixed advantages, r − E_π[r]); with ρ = π/μ,

    uncorrected w = 1,   IS w = ρ,   TIS w = min(ρ, C)  (Yao et al. 2025),
    MIS w = ρ·1[1/C ≤ ρ ≤ C]  (IcePop, arXiv:2510.18855; TRL's token_mask),

and :func:`rlbook.mismatch.off_policy_gradient_moments` gives each one's bias against the on-policy
gradient Σ π·A·(e_a − π) and its variance, exactly (sums over the ten tokens, no sampling). The
explorer draws the two distributions, the ratio with the band [1/C, C], and bias and variance against
C; every number is the library's. ipywidgets is imported when the widget is built.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import torch

from rlbook.mismatch import log_ratio_stats, mismatch_kls, off_policy_gradient_moments, sampler_log_probs
from rlbook.plotting import get_ax

__all__ = ["TRAINER_LOGITS", "REWARDS", "PRECISIONS", "CAP_RANGE", "FIGSIZE", "mismatch_setting", "mismatch_numbers",
           "cap_curves", "plot_mismatch", "mismatch_readout", "mismatch_frame", "mismatch_explorer"]

# ten tokens, most to least likely; rewards on the second token and on two tail tokens, which a
# narrow top-p nucleus cuts
TRAINER_LOGITS = (3.0, 2.4, 1.8, 1.3, 0.9, 0.5, 0.1, -0.3, -0.8, -1.4)
REWARDS = (0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 1.0, 0.0)
PRECISIONS = ("fp32", "bf16", "fp16")
CAP_RANGE = (1.0, 16.0)  # the C axis of the bias and variance panels
ESTIMATORS = {"uncorrected": ("none", "0.45", "-"), "IS": ("is", "k", ":"), "TIS": ("tis", "C0", "-"), "MIS": ("mis", "C3", "-")}
FIGSIZE = (8.4, 6.4)  # inches: 2 × 2 panels, shown at 80 dpi, 672 px wide


def mismatch_setting(offset: float = 0.0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The trainer's logits (shifted by ``offset``), its probabilities π and the advantages A, float64.

    Returns:
        ``(logits, trainer_probs, advantages)``, each (10,): z + offset; π = softmax(z); A = r − E_π[r].
    Raises:
        ValueError: ``offset`` not a finite number.
    """
    if isinstance(offset, bool) or not isinstance(offset, (int, float, np.integer, np.floating)) \
            or not math.isfinite(offset):
        raise ValueError(f"`offset` must be a finite number; got {offset!r}")
    z = torch.tensor(TRAINER_LOGITS, dtype=torch.float64)
    pi = torch.softmax(z, -1)
    r = torch.tensor(REWARDS, dtype=torch.float64)
    return z + float(offset), pi, r - pi @ r


def _check_precision(precision) -> str:
    if precision not in PRECISIONS:
        raise ValueError(f"`precision` must be one of {', '.join(PRECISIONS)}; got {precision!r}")
    return precision


def _sampler(temperature, top_p, precision, offset):
    logits, pi, adv = mismatch_setting(offset)
    mu = sampler_log_probs(logits, temperature=temperature, top_p=top_p, dtype=_check_precision(precision)).exp()
    return pi, mu, adv


def mismatch_numbers(temperature: float = 1.0, top_p: float = 1.0, precision: str = "fp32", cap: float = 2.0,
                     offset: float = 0.0) -> dict:
    """Every number the explorer shows at one setting, from the library.

    Args:
        temperature: the sampler's T > 0 (the trainer uses 1).
        top_p: the sampler's nucleus p ∈ (0, 1].
        precision: "fp32", "bf16" or "fp16": the sampler's logits are rounded to it.
        cap: C ≥ 1 for TIS and MIS.
        offset: a common shift of the logits before rounding (nats; softmax ignores it, rounding does not).
    Returns:
        a dict with float64 NumPy arrays (10,): ``trainer`` (π), ``sampler`` (μ), ``ratio`` (π/μ, inf
        where μ = 0), ``advantages``, ``cut`` (bool, μ = 0); floats ``kl_sampler_trainer``,
        ``kl_trainer_sampler`` (:func:`rlbook.mismatch.mismatch_kls`, nats, may be inf), ``cut_mass``
        (π's mass on cut tokens); ``stats`` (:func:`rlbook.mismatch.log_ratio_stats` under μ, exact:
        weights μ on the drawn tokens, levels 0.01, 0.5, 0.99, with ``cap``); ``moments``: estimator
        name → :func:`rlbook.mismatch.off_policy_gradient_moments` (n = 1) as floats ``bias_norm``,
        ``variance``, ``mse``, ``changed``; and the inputs.
    Raises:
        ValueError: T ≤ 0 (``temperature``), p outside (0, 1] (``top_p``), an unknown ``precision``,
        C < 1 or not finite (``cap``), ``offset`` not finite.
    """
    pi, mu, adv = _sampler(temperature, top_p, precision, offset)
    drawn = mu > 0
    kl_mu_pi, kl_pi_mu = mismatch_kls(pi.log(), mu.log())
    stats = log_ratio_stats(pi.log()[drawn], mu.log()[drawn], weights=mu[drawn], cap=cap)
    moments = {}
    for name, (correction, _, _) in ESTIMATORS.items():
        m = off_policy_gradient_moments(pi, mu, adv, correction, cap if correction in ("tis", "mis") else None)
        moments[name] = {k: float(m[k]) for k in ("bias_norm", "variance", "mse", "changed")}
    ratio = torch.where(drawn, pi / torch.where(drawn, mu, torch.ones_like(mu)), torch.full_like(pi, math.inf))
    return {"temperature": float(temperature), "top_p": float(top_p), "precision": precision, "cap": float(cap),
            "offset": float(offset), "trainer": pi.numpy(), "sampler": mu.numpy(), "ratio": ratio.numpy(),
            "advantages": adv.numpy(), "cut": (~drawn).numpy(), "cut_mass": float(pi[~drawn].sum()),
            "kl_sampler_trainer": float(kl_mu_pi), "kl_trainer_sampler": float(kl_pi_mu),
            "stats": stats, "moments": moments}


@functools.lru_cache(maxsize=32)
def _curves(temperature, top_p, precision, offset, points):
    pi, mu, adv = _sampler(temperature, top_p, precision, offset)
    caps = np.geomspace(*CAP_RANGE, points)
    out = {"cap": caps}
    for name, (correction, _, _) in ESTIMATORS.items():
        if correction in ("none", "is"):
            m = off_policy_gradient_moments(pi, mu, adv, correction)
            out[name] = (np.full(points, float(m["bias_norm"])), np.full(points, float(m["variance"])))
        else:
            ms = [off_policy_gradient_moments(pi, mu, adv, correction, float(c)) for c in caps]
            out[name] = (np.array([float(m["bias_norm"]) for m in ms]), np.array([float(m["variance"]) for m in ms]))
    return out


def cap_curves(temperature: float = 1.0, top_p: float = 1.0, precision: str = "fp32", offset: float = 0.0,
               points: int = 121) -> dict:
    """‖bias‖ and variance (one draw) of each estimator at ``points`` caps C, log-spaced over ``CAP_RANGE``.

    Returns:
        a dict: ``cap`` (points,) and, per estimator name ("uncorrected", "IS", "TIS", "MIS"), a pair
        of (points,) arrays (‖bias‖₂, trace of the covariance), each from
        :func:`rlbook.mismatch.off_policy_gradient_moments`; uncorrected and IS do not depend on C.
    Raises:
        ValueError: as :func:`mismatch_numbers`; ``points`` not an integer ≥ 2.
    """
    if isinstance(points, bool) or not isinstance(points, int) or points < 2:
        raise ValueError(f"`points` must be an integer ≥ 2; got {points!r}")
    return _curves(float(temperature), float(top_p), _check_precision(precision), float(offset), points)


def _labels(adv) -> list[str]:
    return [f"t{i + 1}\n{a:+.2f}" for i, a in enumerate(adv)]


def _plot_distributions(ax, s):
    k = np.arange(len(s["trainer"]))
    ax.bar(k - 0.2, s["trainer"], 0.4, color="C0", label="trainer π")
    ax.bar(k + 0.2, s["sampler"], 0.4, color="C1", label="sampler μ")
    if s["cut"].any():
        ax.plot(k[s["cut"]] + 0.2, np.zeros(int(s["cut"].sum())), "x", color="C3", ms=8, mew=2,
                label="cut by top-p (μ = 0)")
    ax.set_xticks(k, _labels(s["advantages"]), fontsize=9)
    ax.set_ylim(0, max(s["trainer"].max(), s["sampler"].max()) * 1.3)
    ax.set_ylabel("probability")
    ax.set_xlabel("token (advantage A below)", fontsize=9)
    ax.set_title(f"T = {s['temperature']:g}, top-p = {s['top_p']:g}, {s['precision']}, offset {s['offset']:g}",
                 fontsize=9)
    ax.legend(fontsize=9, frameon=False, loc="upper right")


def _plot_ratio(ax, s):
    k = np.arange(len(s["trainer"]))
    c, ratio, cut = s["cap"], s["ratio"], s["cut"]
    finite = ratio[~cut]
    low = min(1 / c, finite.min()) / 1.5
    high = max(c, finite.max()) * 4  # the top band holds the legend (left) and the ▲ of cut tokens (right)
    ax.axhspan(1 / c, c, color="C2", alpha=0.12, label=f"MIS keeps [1/C, C], C = {c:.3g}")
    ax.axhline(c, color="C0", lw=1.2, ls="--", label="TIS cap C")
    ax.axhline(1.0, color="0.5", lw=0.8)
    outside = (finite > c) | (finite < 1 / c)
    ax.plot(k[~cut][~outside], finite[~outside], "o", color="C2", mec="k", label="ρ = π/μ")
    if outside.any():
        ax.plot(k[~cut][outside], finite[outside], "o", color="C3", mec="k", label="outside the band")
    if cut.any():
        ax.plot(k[cut], np.full(int(cut.sum()), high), "^", color="C3", mec="k", ms=8, clip_on=False,
                label="ρ = ∞ (never drawn)")
    ax.set_yscale("log")
    ax.set_ylim(low, high)
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))  # 0.5, 2 rather than 5×10⁻¹, 2×10⁰
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_xticks(k, [f"t{i + 1}" for i in k], fontsize=9)
    ax.set_ylabel("π / μ")
    ax.set_title(f"per-token ratio; KL(μ‖π) = {s['kl_sampler_trainer']:.4f} nats", fontsize=9)
    ax.legend(fontsize=8.5, frameon=False, loc="upper left", ncol=2)


def _plot_against_cap(ax, s, index, ylabel, title):
    curves = cap_curves(s["temperature"], s["top_p"], s["precision"], s["offset"])
    for name, (_, color, style) in ESTIMATORS.items():
        ax.plot(curves["cap"], curves[name][index], style, color=color, lw=1.8, label=name)
        key = "bias_norm" if index == 0 else "variance"
        ax.plot([s["cap"]], [s["moments"][name][key]], "o", color=color, mec="k", ms=5)
    ax.axvline(s["cap"], color="0.6", lw=0.8)
    ax.set_xscale("log", base=2)
    ax.set_xlim(*CAP_RANGE)
    ax.set_xticks([1, 2, 4, 8, 16], ["1", "2", "4", "8", "16"])
    ax.set_xlabel("cap C")
    ax.set_ylabel(ylabel)
    ax.set_ylim(bottom=0)
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=9, frameon=False)


def plot_mismatch(temperature: float = 1.0, top_p: float = 1.0, precision: str = "fp32", cap: float = 2.0,
                  offset: float = 0.0, axes=None):
    """Four panels at one setting: (top left) π and μ as bars over the tokens, cut tokens marked ×;
    (top right) the ratio π/μ per token on a log axis with the band [1/C, C] and the TIS cap, cut
    tokens as ▲ at the top (ρ = ∞); (bottom) ‖bias‖ and the one-draw variance of the uncorrected, IS,
    TIS and MIS gradient estimators against C, the current C marked.

    Args:
        axes: four Matplotlib axes (any shape that flattens to four), or None for a new figure of ``FIGSIZE``.
    Returns:
        the four axes, flattened.
    Raises:
        ValueError: as :func:`mismatch_numbers`.
    """
    s = mismatch_numbers(temperature, top_p, precision, cap, offset)
    if axes is None:
        import matplotlib.pyplot as plt

        _, axes = plt.subplots(2, 2, figsize=FIGSIZE, dpi=80)
    axes = [get_ax(a) for a in np.asarray(axes, dtype=object).flatten()]
    _plot_distributions(axes[0], s)
    _plot_ratio(axes[1], s)
    _plot_against_cap(axes[2], s, 0, "‖bias‖ (vs on-policy gradient)", "bias of the gradient estimate")
    _plot_against_cap(axes[3], s, 1, "variance (one draw, trace)", "variance: n draws divide it by n")
    return axes


def _cell(x: float) -> str:
    return f"{'∞':>7}" if math.isinf(x) else f"{x:7.3f}"


def _nats(x: float) -> str:
    return "∞" if math.isinf(x) else f"{round(x, 5) + 0.0:.5f}"


def mismatch_readout(temperature: float = 1.0, top_p: float = 1.0, precision: str = "fp32", cap: float = 2.0,
                     offset: float = 0.0) -> tuple[str, list[str]]:
    """The explorer's numbers at one setting (text; pure, tested).

    Returns:
        (readout, warnings): a table of A, π, μ and π/μ over the tokens; both KLs, E_μ[log ρ] and its
        1 % / 50 % / 99 % quantiles under μ, the share of draws TIS truncates and MIS masks; and per
        estimator ‖bias‖, the one-draw variance and their MSE. No warnings: every valid setting is meaningful.
    Raises:
        ValueError: as :func:`mismatch_numbers`.
    """
    s = mismatch_numbers(temperature, top_p, precision, cap, offset)
    st = s["stats"]
    k = len(s["trainer"])
    q = st["quantiles"]
    lines = ["      " + "".join(f"{'t' + str(i + 1):>7}" for i in range(k)),
             "A     " + "".join(_cell(x) for x in s["advantages"]),
             "π     " + "".join(_cell(x) for x in s["trainer"]),
             "μ     " + "".join(_cell(x) for x in s["sampler"]),
             "π/μ   " + "".join(_cell(x) for x in s["ratio"]),
             f"KL(μ‖π) = {_nats(s['kl_sampler_trainer'])} nats   KL(π‖μ) = {_nats(s['kl_trainer_sampler'])} nats   "
             f"π's mass on cut tokens = {s['cut_mass']:.4f}",
             f"log π/μ under μ: mean {st['mean']:+.5f}, quantiles 1% {q[0.01]:+.4f}  50% {q[0.5]:+.4f}  "
             f"99% {q[0.99]:+.4f}",
             f"C = {s['cap']:.3g}: TIS truncates {st['frac_truncated']:.3f} of draws, MIS masks {st['frac_masked']:.3f}",
             f"{'estimator':<12}{'‖bias‖':>9}{'variance':>10}{'MSE (n=1)':>11}"]
    for name, m in s["moments"].items():
        lines.append(f"{name:<12}{m['bias_norm']:9.4f}{m['variance']:10.4f}{m['mse']:11.4f}")
    return "\n".join(lines), []


def mismatch_frame(temperature: float, top_p: float, precision: str, cap: float, offset: float):
    """The explorer's render function: :func:`plot_mismatch` on a new figure and :func:`mismatch_readout`.

    Returns:
        a :class:`rlbook.widgets._live.Frame`.
    Raises:
        ValueError: as :func:`mismatch_numbers` (checked before a figure is made).
    """
    import matplotlib.pyplot as plt

    from rlbook.widgets._live import Frame

    readout, warnings = mismatch_readout(temperature, top_p, precision, cap, offset)
    fig, axes = plt.subplots(2, 2, figsize=FIGSIZE, dpi=80)
    plot_mismatch(temperature, top_p, precision, cap, offset, axes=axes)
    fig.tight_layout()
    return Frame(fig, readout, warnings)


def mismatch_explorer():
    """Interactive explorer: sliders for the sampler's temperature T and top-p, a precision dropdown,
    a logit-offset slider and a log slider for the cap C; redraws :func:`plot_mismatch` and prints
    :func:`mismatch_readout`. T = 0 and top-p = 0 are on the sliders and answered with a "⚠" line.
    Needs ipywidgets (imported here).

    Returns:
        an ``ipywidgets.VBox`` (display it in a notebook); see :func:`rlbook.widgets._live.live_explorer`.
    """
    import ipywidgets as widgets

    from rlbook.widgets._live import live_explorer

    style = {"description_width": "initial"}
    controls = {
        "temperature": widgets.FloatSlider(value=0.8, min=0.0, max=2.0, step=0.05, description="T", style=style),
        "top_p": widgets.FloatSlider(value=1.0, min=0.0, max=1.0, step=0.01, description="top-p", style=style),
        "precision": widgets.Dropdown(options=list(PRECISIONS), value="fp32", description="precision", style=style,
                                      layout=widgets.Layout(width="180px")),
        "offset": widgets.FloatSlider(value=0.0, min=0.0, max=200.0, step=5.0, description="logit offset",
                                      style=style),
        # base 2, quarter steps: C = 1 … 16 with 2, 4, 8 on the grid
        "cap": widgets.FloatLogSlider(value=2.0, base=2, min=0.0, max=4.0, step=0.25, description="C",
                                      readout_format=".3g", style=style),
    }
    return live_explorer(controls, [["temperature", "top_p", "precision"], ["offset", "cap"]], mismatch_frame)
