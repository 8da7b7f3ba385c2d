"""Preference explorer: β tilts π_ref into π*, best-of-N's distribution and KL, DPO's gradient weight.

Over a handful of answers y₁ … y_K with a fixed reference policy π_ref and fixed rewards r (a preset),
the explorer draws three things that chapter 12 derives (the third is where DPO starts):

    the KL-regularised optimum   π*(y) = π_ref(y)·exp(r(y)/β) / Z,   max_π E_π[r] − β·KL(π‖π_ref) = β·log Z
                                 (Rafailov et al. 2023, arXiv:2305.18290, eq. 4 and App. A.1);
    best-of-N                    π_N exactly, and KL(π_N‖π_ref) ≤ log N − (N−1)/N
                                 (Beirami et al. 2024, arXiv:2401.01879, Lemma 1 and Theorem 1);
    DPO's gradient weight        w = σ(r̂_r − r̂_c), r̂ = β·log(π/π_ref), against the log-ratio margin
                                 h = log(π/π_ref)(y_c) − log(π/π_ref)(y_r), so that r̂_c − r̂_r = β·h
                                 (Rafailov et al. 2023, §4).

At π = π* the implicit rewards are r − β·log Z, so every pair's implicit-reward margin is its true
reward margin and its weight is σ(r_r − r_c), whatever β: a smaller β only moves the pairs further out
in log-ratio. Every number is computed by the library (:mod:`rlbook.kl_regularised`,
:func:`rlbook.preferences.implicit_rewards`, :func:`rlbook.preferences.dpo_gradient_weight`,
:func:`rlbook.kl.categorical_kl`); the pure functions here only arrange and draw them, and
:func:`preference_explorer` wires ipywidgets (imported lazily) to :func:`plot_preference` and
:func:`preference_readout`.
"""

from __future__ import annotations

import functools
import itertools
import math

import numpy as np
import torch

from rlbook.kl import categorical_kl
from rlbook.kl_regularised import (best_of_n_kl, best_of_n_kl_bound, best_of_n_probs, kl_regularised_optimum,
                                   kl_regularised_value)
from rlbook.plotting import get_ax
from rlbook.preferences import dpo_gradient_weight, implicit_rewards

__all__ = ["PRESETS", "FIGSIZE", "preference_setting", "preference_numbers", "best_of_n_kl_curve", "dpo_weight_curve",
           "plot_preference", "preference_readout", "preference_frame", "preference_explorer"]

# name → (π_ref, rewards): K = 6 answers. "graded": π_ref prefers the low-reward answers; "rare best":
# the best answer has 1 % of π_ref's mass; "tied best": two answers share the top reward.
PRESETS = {
    "graded": ((0.30, 0.25, 0.20, 0.12, 0.08, 0.05), (0.0, 0.5, 1.0, 1.5, 2.0, 3.0)),
    "rare best": ((0.40, 0.30, 0.15, 0.10, 0.04, 0.01), (0.0, 1.0, 1.2, 1.5, 2.0, 4.0)),
    "tied best": ((0.30, 0.25, 0.20, 0.12, 0.08, 0.05), (0.0, 0.5, 2.0, 1.0, 2.0, 1.5)),
}
N_MAX = 64  # the best-of-N curve is drawn for N = 1 … max(N_MAX, N)
H_RANGE = (-4.0, 16.0)  # the DPO panel's log-ratio margins, nats
_BETAS_FAINT = (0.1, 1.0, 10.0)  # reference curves in the DPO panel
FIGSIZE = (8.4, 6.6)  # inches: three panels in a 2 × 2 grid, shown at 80 dpi, 672 px wide


def preference_setting(preset: str = "graded") -> tuple[torch.Tensor, torch.Tensor]:
    """The preset's reference policy and rewards, float64.

    Returns:
        ``(ref_probs, rewards)``, each of shape ``(K,)``: π_ref (sums to 1) and r (reward units).
    Raises:
        ValueError: ``preset`` is not a key of ``PRESETS`` (the valid names are listed).
    """
    if preset not in PRESETS:
        raise ValueError(f"preset: unknown preset {preset!r}; choose from: {', '.join(PRESETS)}")
    ref_probs, rewards = PRESETS[preset]
    return torch.tensor(ref_probs, dtype=torch.float64), torch.tensor(rewards, dtype=torch.float64)


def _check_n(n, name: str = "n") -> int:
    # NumPy integers (a slider's value may be one) are integers too; the message says what N is
    if isinstance(n, np.integer):
        n = int(n)
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"`{name}`: best-of-N needs an integer number of draws N ≥ 1; got {n!r}")
    return n


def _check_beta(beta) -> float:
    # the library refuses β ≤ 0 and NaN; β = inf (π* = π_ref, β·log Z = inf·0) and non-numbers stop here
    if isinstance(beta, bool) or not isinstance(beta, (int, float, np.integer, np.floating)) or math.isinf(beta):
        raise ValueError(f"`beta` must be a finite number > 0; got {beta!r}")
    return float(beta)


def preference_numbers(beta: float, n: int, preset: str = "graded") -> dict:
    """Every number the explorer shows at one setting, from the library.

    Args:
        beta: β > 0, the KL coefficient (reward units per nat).
        n: N ≥ 1 (an integer), best-of-N's number of draws.
        preset: a key of ``PRESETS``.
    Returns:
        a dict with, as float64 NumPy arrays of shape ``(K,)``: ``ref_probs`` (π_ref), ``rewards``,
        ``optimum`` (π*, :func:`rlbook.kl_regularised_optimum`), ``best_of_n`` (π_N,
        :func:`rlbook.best_of_n_probs`); as floats: ``beta``, ``n``, ``ref_reward`` (E_π_ref[r]),
        ``optimum_reward`` (E_π*[r]), ``optimum_kl`` (KL(π*‖π_ref), nats, :func:`rlbook.kl.categorical_kl`),
        ``value`` (β·log Z, :func:`rlbook.kl_regularised_value`), ``best_of_n_reward`` (E_π_N[r]),
        ``best_of_n_kl`` (:func:`rlbook.best_of_n_kl`), ``kl_bound`` (log N − (N−1)/N,
        :func:`rlbook.best_of_n_kl_bound`); and for the K(K−1)/2 pairs with r_c > r_r (ties skipped),
        arrays of shape ``(P,)``: ``chosen``, ``rejected`` (answer indices), ``margin`` (the
        log-ratio margin h at π*, nats), ``implicit_margin`` (r̂_c − r̂_r at π*, reward units, from
        :func:`rlbook.preferences.implicit_rewards`) and ``weight`` (DPO's weight at π*,
        :func:`rlbook.preferences.dpo_gradient_weight`).
    Raises:
        ValueError: β ≤ 0 or not finite (``beta``); N not an integer ≥ 1 (``n``); an unknown ``preset``.
    """
    ref_probs, rewards = preference_setting(preset)
    beta, n = _check_beta(beta), _check_n(n)
    optimum = kl_regularised_optimum(ref_probs, rewards, beta)
    best = best_of_n_probs(ref_probs, rewards, n)
    log_ratio = optimum.log() - ref_probs.log()  # log π*/π_ref at every answer, nats
    pairs = [(c, r) for c, r in itertools.permutations(range(len(rewards)), 2) if rewards[c] > rewards[r]]
    chosen = torch.tensor([c for c, _ in pairs])
    rejected = torch.tensor([r for _, r in pairs])
    zeros = torch.zeros(len(pairs), dtype=torch.float64)
    chosen_r = implicit_rewards(log_ratio[chosen], zeros, beta)
    rejected_r = implicit_rewards(log_ratio[rejected], zeros, beta)
    return {
        "beta": float(beta), "n": int(n), "preset": preset,
        "ref_probs": ref_probs.numpy(), "rewards": rewards.numpy(),
        "optimum": optimum.numpy(), "best_of_n": best.numpy(),
        "ref_reward": float(ref_probs @ rewards),
        "optimum_reward": float(optimum @ rewards),
        "optimum_kl": float(categorical_kl(optimum.log(), ref_probs.log())),
        "value": float(kl_regularised_value(ref_probs, rewards, beta)),
        "best_of_n_reward": float(best @ rewards),
        "best_of_n_kl": float(best_of_n_kl(ref_probs, rewards, n)),
        "kl_bound": best_of_n_kl_bound(n),
        "chosen": chosen.numpy(), "rejected": rejected.numpy(),
        "margin": (log_ratio[chosen] - log_ratio[rejected]).numpy(),
        "implicit_margin": (chosen_r - rejected_r).numpy(),
        "weight": dpo_gradient_weight(chosen_r, rejected_r).numpy(),
    }


@functools.lru_cache(maxsize=16)
def _kl_curve(preset: str, n_max: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    ref_probs, rewards = preference_setting(preset)
    ns = np.arange(1, n_max + 1)
    exact = np.array([float(best_of_n_kl(ref_probs, rewards, int(k))) for k in ns])
    bound = np.array([best_of_n_kl_bound(int(k)) for k in ns])
    for a in (ns, exact, bound):
        a.setflags(write=False)
    return ns, exact, bound


def best_of_n_kl_curve(preset: str = "graded", n_max: int = N_MAX) -> dict:
    """Best-of-N's exact KL from π_ref and the bound log N − (N−1)/N for N = 1 … ``n_max``.

    Returns:
        a dict of read-only arrays of shape ``(n_max,)``: ``n``, ``kl`` (:func:`rlbook.best_of_n_kl`,
        nats), ``bound`` (:func:`rlbook.best_of_n_kl_bound`, nats).
    Raises:
        ValueError: an unknown ``preset``; ``n_max`` not an integer ≥ 1.
    """
    n_max = _check_n(n_max, "n_max")
    preference_setting(preset)
    ns, exact, bound = _kl_curve(preset, n_max)
    return {"n": ns, "kl": exact, "bound": bound}


def dpo_weight_curve(beta: float, margins) -> np.ndarray:
    """DPO's per-pair gradient weight σ(r̂_r − r̂_c) at log-ratio margins h, with r̂_c − r̂_r = β·h.

    The chosen answer's log π/π_ref is h and the rejected one's 0; the implicit rewards come from
    :func:`rlbook.preferences.implicit_rewards` and the weight from
    :func:`rlbook.preferences.dpo_gradient_weight` (= σ(−β·h)).

    Args:
        beta: β > 0.
        margins: (M,) log-ratio margins h, nats.
    Returns:
        (M,) weights in (0, 1), float64.
    Raises:
        ValueError: β ≤ 0 or not finite; a margin not finite.
    """
    h = torch.as_tensor(np.asarray(margins, dtype=np.float64))
    zeros = torch.zeros_like(h)
    return dpo_gradient_weight(implicit_rewards(h, zeros, beta), implicit_rewards(zeros, zeros, beta)).numpy()


def _answer_labels(rewards: np.ndarray) -> list[str]:
    return [f"y{i + 1}\nr={r:g}" for i, r in enumerate(rewards)]


def _plot_policies(ax, s: dict) -> None:
    k = np.arange(len(s["rewards"]))
    width = 0.27
    ax.bar(k - width, s["ref_probs"], width, color="0.65", label="π_ref")
    ax.bar(k, s["optimum"], width, color="C0", label=f"π* (β = {s['beta']:.3g})")
    ax.bar(k + width, s["best_of_n"], width, color="C1", label=f"best-of-{s['n']}")
    ax.set_xticks(k, _answer_labels(s["rewards"]), fontsize=9)
    ax.set_ylim(0, 1.18)  # the band above 1 holds the legend, so no bar can run under it
    ax.set_yticks(np.linspace(0, 1, 6))
    ax.set_ylabel("probability")
    ax.set_title("π* ∝ π_ref·exp(r/β) and best-of-N", fontsize=9)
    ax.legend(fontsize=9, loc="upper center", ncol=3, frameon=False, handlelength=1.2, columnspacing=1.0)


def _plot_kl(ax, s: dict) -> None:
    c = best_of_n_kl_curve(s["preset"], max(N_MAX, s["n"]))
    ax.plot(c["n"], c["bound"], "--", color="k", lw=1.2, label="log N − (N−1)/N")
    ax.plot(c["n"], c["kl"], "-", color="C1", lw=2, label="KL(π_N‖π_ref), exact")
    ax.plot([s["n"]], [s["best_of_n_kl"]], "o", color="C1", ms=7, mec="k")
    ax.axhline(s["optimum_kl"], color="C0", ls=":", lw=1.5, label=f"KL(π*‖π_ref) at β = {s['beta']:.3g}")
    ax.set_xscale("log", base=2)
    ax.set_xlim(1, c["n"][-1])
    ticks = [2 ** i for i in range(int(math.log2(c["n"][-1])) + 1)]
    ax.set_xticks(ticks, [str(t) for t in ticks])
    # the top third is left free for the legend: every curve and the level stay below it
    ax.set_ylim(0, max(float(c["bound"][-1]), s["optimum_kl"]) * 1.5)
    ax.set_xlabel("N (draws from π_ref)")
    ax.set_ylabel("nats")
    ax.set_title(f"best-of-N's KL: {_nats(s['best_of_n_kl'])} ≤ {_nats(s['kl_bound'])} at N = {s['n']}", fontsize=9)
    ax.legend(fontsize=9, loc="upper left", frameon=False)


def _plot_dpo(ax, s: dict) -> None:
    beta = s["beta"]
    h = np.linspace(*H_RANGE, 401)
    faint = [b for b in _BETAS_FAINT if not math.isclose(b, beta, rel_tol=1e-6)]
    for i, b in enumerate(faint):
        ax.plot(h, dpo_weight_curve(b, h), color="0.75", lw=1,
                label=f"β = {', '.join(f'{x:g}' for x in faint)} (flat → steep)" if i == 0 else None)
    ax.plot(h, dpo_weight_curve(beta, h), color="C2", lw=2.2, label=f"σ(−β·h), β = {beta:.3g}")
    inside = s["margin"] <= H_RANGE[1]
    ax.plot(s["margin"][inside], s["weight"][inside], "o", color="C2", mec="k", ms=5,
            label="pairs at π* (w = σ(r_r − r_c))")
    if (~inside).any():
        ax.plot(np.full((~inside).sum(), H_RANGE[1]), s["weight"][~inside], ">", color="C2", mec="k", ms=6,
                clip_on=False, label=f"{int((~inside).sum())} pairs beyond h = {H_RANGE[1]:g}")
    ax.plot([0.0], [0.5], "*", color="k", ms=10, label="π = π_ref (w = ½)")
    ax.set_xlim(*H_RANGE)
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("log-ratio margin h (chosen − rejected), nats")
    ax.set_ylabel("DPO weight σ(r̂_r − r̂_c)")
    top = ax.secondary_xaxis("top", functions=(lambda x: beta * x, lambda m: m / beta))
    top.set_xlabel("implicit-reward margin r̂_c − r̂_r = β·h", fontsize=9)
    top.tick_params(labelsize=9)
    # for h > 0 every weight is below ½, so the upper right is free for the legend
    ax.legend(fontsize=9, loc="upper right", frameon=False)



def _three_axes(plt):
    """Three axes of a new ``FIGSIZE`` figure: a 2 × 2 grid less its last cell (the column is 688 px wide)."""
    fig, grid = plt.subplots(2, 2, figsize=FIGSIZE, dpi=80)
    fig.delaxes(grid[1, 1])
    return list(grid.ravel()[:3])


def plot_preference(beta: float = 0.5, n: int = 4, preset: str = "graded", axes=None):
    """Three panels at one setting: (left) π_ref, π* and best-of-N's π_N as bars over the answers;
    (middle) best-of-N's exact KL from π_ref against N (log scale), the bound log N − (N−1)/N, the
    current N marked and KL(π*‖π_ref) at the current β as a level; (right) DPO's weight σ(−β·h)
    against the log-ratio margin h (bold: the current β; grey: β = 0.1, 1, 10), the answer pairs at
    π* as dots (beyond the axis: arrows at its edge) and π = π_ref as a star; the top axis reads
    the implicit-reward margin β·h.

    Args:
        axes: three Matplotlib axes, or None for a new figure of ``FIGSIZE``.
    Returns:
        the three axes.
    Raises:
        ValueError: as :func:`preference_numbers`.
    """
    s = preference_numbers(beta, n, preset)
    if axes is None:
        import matplotlib.pyplot as plt

        axes = _three_axes(plt)
    left, middle, right = (get_ax(a) for a in axes)
    _plot_policies(left, s)
    _plot_kl(middle, s)
    _plot_dpo(right, s)
    return axes


def _nats(x: float) -> str:
    return f"{round(x, 3) + 0.0:.3f}"  # + 0.0: a rounding error of −1e-17 prints as 0.000, not −0.000


def _row(name: str, values) -> str:
    return f"{name:<6}" + "".join(f"{v:7.3f}" for v in values)


def preference_readout(beta: float = 0.5, n: int = 4, preset: str = "graded") -> tuple[str, list[str]]:
    """The explorer's numbers at one setting (text; pure, tested).

    Returns:
        (readout, warnings): a table of π_ref, π* and π_N over the answers; E[r], KL from π_ref and
        β·log Z (= E_π*[r] − β·KL) for π*; E[r], the exact KL and the bound for best-of-N; the range
        of DPO's weight on the answer pairs at π*. No warnings: every valid setting is meaningful.
    Raises:
        ValueError: as :func:`preference_numbers` (β ≤ 0, N < 1 or not an integer, an unknown preset).
    """
    s = preference_numbers(beta, n, preset)
    k = len(s["rewards"])
    lines = ["      " + "".join(f"{'y' + str(i + 1):>7}" for i in range(k)),
             _row("r", s["rewards"]), _row("π_ref", s["ref_probs"]), _row("π*", s["optimum"]),
             _row(f"π_{s['n']}", s["best_of_n"]),
             f"π_ref : E[r] = {s['ref_reward']:.3f}",
             f"π*    : E[r] = {s['optimum_reward']:.3f}   KL(π*‖π_ref) = {_nats(s['optimum_kl'])} nats   "
             f"β·log Z = {s['value']:.3f}   (β = {s['beta']:.3g})",
             f"π_{s['n']:<4}: E[r] = {s['best_of_n_reward']:.3f}   KL(π_N‖π_ref) = {_nats(s['best_of_n_kl'])} nats"
             f" ≤ log N − (N−1)/N = {_nats(s['kl_bound'])}   (N = {s['n']})",
             f"DPO at π*: h = (r_c − r_r)/β ∈ [{s['margin'].min():.2f}, {s['margin'].max():.2f}] nats, "
             f"weight σ(r_r − r_c) ∈ [{s['weight'].min():.3f}, {s['weight'].max():.3f}] over {len(s['weight'])} pairs"]
    return "\n".join(lines), []


def preference_frame(beta: float, n: int, preset: str):
    """The explorer's render function: :func:`plot_preference` on a new figure and :func:`preference_readout`.

    Returns:
        a :class:`rlbook.widgets._live.Frame`.
    Raises:
        ValueError: as :func:`preference_numbers` (checked before a figure is made).
    """
    import matplotlib.pyplot as plt

    from rlbook.widgets._live import Frame

    readout, warnings = preference_readout(beta, n, preset)
    axes = _three_axes(plt)
    fig = axes[0].figure
    plot_preference(beta, n, preset, axes=axes)
    fig.tight_layout()
    return Frame(fig, readout, warnings)


def preference_explorer(preset: str = "graded"):
    """Interactive explorer: a log slider for β, a slider for N and a preset dropdown; redraws
    :func:`plot_preference` and prints :func:`preference_readout`. Needs ipywidgets (imported here).
    N = 0 is on the slider and answered with a "⚠" line (best-of-N needs N ≥ 1).

    Returns:
        an ``ipywidgets.VBox`` (display it in a notebook); see :func:`rlbook.widgets._live.live_explorer`.
    Raises:
        ValueError: an unknown ``preset``.
    """
    import ipywidgets as widgets

    from rlbook.widgets._live import live_explorer

    preference_setting(preset)
    style = {"description_width": "initial"}
    controls = {
        # base 2, quarter steps: β = 2^-5 … 2^3.5 (0.031 … 11.3), with 0.5, 1, 2 exactly on the grid
        "beta": widgets.FloatLogSlider(value=0.5, base=2, min=-5.0, max=3.5, step=0.25, description="β",
                                       readout_format=".3g", style=style),
        "n": widgets.IntSlider(value=4, min=0, max=N_MAX, description="N", style=style),
        "preset": widgets.Dropdown(options=list(PRESETS), value=preset, description="answers",
                                   style=style, layout=widgets.Layout(width="200px")),
    }
    return live_explorer(controls, [["beta", "n", "preset"]], preference_frame)
