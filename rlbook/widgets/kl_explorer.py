"""KL-estimator explorer: k1, k2, k3 against the exact KL as two distributions move apart.

The sampler is q = softmax(z) over K actions and the reference p_α = softmax(z + α·u), for fixed
random logits z and direction u (chapter 5's family, §5.5 and §5.8). With r = p(x)/q(x) and x ∼ q,

    k1 = −log r,   k2 = ½ (log r)²,   k3 = (r − 1) − log r          (Schulman 2020, "Approximating KL
                                                                    Divergence", joschu.net/blog/kl-approx.html)

estimate KL(q‖p) from one sample each. Every number here is exact: means, standard deviations and
P(k < 0) are sums over the K actions weighted by q (no sampling), computed with the library's
``kl_k1``, ``kl_k2``, ``kl_k3`` and ``categorical_kl``. The pure functions do the computing (and are
tested); :func:`kl_explorer` only wires ipywidgets sliders to :func:`plot_kl_estimators` and
:func:`kl_readout`. ipywidgets is imported when the widget is built.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import torch

from rlbook.kl import categorical_kl, kl_k1, kl_k2, kl_k3
from rlbook.plotting import get_ax

__all__ = ["ESTIMATORS", "kl_family", "kl_estimator_stats", "kl_estimator_curves", "plot_kl_estimators",
           "kl_readout", "kl_explorer"]

ESTIMATORS = {"k1": kl_k1, "k2": kl_k2, "k3": kl_k3}
_COLORS = {"k1": "C0", "k2": "C1", "k3": "C2"}


def _check_alpha(alpha) -> float:
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not math.isfinite(alpha):
        raise ValueError(f"alpha: the separation must be a finite number, got {alpha!r}")
    return float(alpha)


def _check_int(value, name: str, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise ValueError(f"{name}: expected an integer ≥ {low}, got {value!r}")
    return int(value)


@functools.lru_cache(maxsize=64)
def _logits(num_actions: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    z = torch.randn(num_actions, generator=gen, dtype=torch.float64)
    u = torch.randn(num_actions, generator=gen, dtype=torch.float64)
    return z, u


def kl_family(alpha: float, num_actions: int = 20, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """The pair of distributions at separation ``alpha``, as log-probabilities (float64).

    ``z`` and ``u`` are the first two float64 ``torch.randn(num_actions)`` draws of a generator seeded
    with ``seed`` (seed 0 and K = 20 give chapter 5's logits); q = softmax(z), p_α = softmax(z + α u).

    Returns:
        ``(log_q, log_p)``, each of shape ``(num_actions,)``; log_q is the sampler's (π_θ),
        log_p the reference's (π_ref).
    Raises:
        ValueError: ``alpha`` not finite; ``num_actions`` < 2 or not an integer.
    """
    alpha = _check_alpha(alpha)
    num_actions = _check_int(num_actions, "num_actions", 2)
    z, u = _logits(num_actions, int(seed))
    return torch.log_softmax(z, 0), torch.log_softmax(z + alpha * u, 0)


def kl_estimator_stats(alpha: float, num_samples: int = 1, num_actions: int = 20, seed: int = 0) -> dict:
    """Exact statistics of k1, k2, k3 at separation ``alpha`` (sums over the actions, weights q).

    Returns:
        a dict with ``kl`` (KL(q‖p), nats, from ``categorical_kl``), ``q`` and ``log_r`` (arrays of
        shape ``(num_actions,)``), and for each name in ``("k1", "k2", "k3")`` a dict with ``values``
        (the estimator at every action, shape ``(num_actions,)``), ``mean``, ``bias`` (mean − KL),
        ``std`` (of one sample), ``std_mean`` (of the average of ``num_samples`` independent samples,
        std/√n), ``p_negative`` (P(k < 0) under q) and ``min``.
    Raises:
        ValueError: as :func:`kl_family`; ``num_samples`` < 1.
    """
    num_samples = _check_int(num_samples, "num_samples", 1)
    log_q, log_p = kl_family(alpha, num_actions, seed)
    q = log_q.exp()
    out = {"alpha": float(alpha), "num_samples": num_samples,
           "kl": float(categorical_kl(log_q, log_p)), "q": q.numpy(), "log_r": (log_p - log_q).numpy()}
    for name, estimator in ESTIMATORS.items():
        values = estimator(log_q, log_p)
        mean = float((q * values).sum())
        std = float((q * (values - mean) ** 2).sum().clamp_min(0.0)) ** 0.5
        out[name] = {"values": values.numpy(), "mean": mean, "bias": mean - out["kl"], "std": std,
                     "std_mean": std / num_samples ** 0.5, "p_negative": float(q[values < 0].sum()),
                     "min": float(values.min())}
    return out


@functools.lru_cache(maxsize=64)
def _curves(alpha_max: float, num_points: int, num_actions: int, seed: int) -> dict:
    alphas = np.linspace(0.0, alpha_max, num_points)
    rows = [kl_estimator_stats(float(a), 1, num_actions, seed) for a in alphas]
    out = {"alpha": alphas, "kl": np.array([r["kl"] for r in rows])}
    for name in ESTIMATORS:
        out[f"mean_{name}"] = np.array([r[name]["mean"] for r in rows])
        out[f"std_{name}"] = np.array([r[name]["std"] for r in rows])
    return out


def kl_estimator_curves(alpha_max: float = 4.0, num_points: int = 81, num_actions: int = 20, seed: int = 0) -> dict:
    """The exact KL and each estimator's mean and one-sample std on a grid of separations.

    Returns:
        a dict of arrays of shape ``(num_points,)``: ``alpha`` (0 … ``alpha_max``), ``kl``, and
        ``mean_k1``, ``mean_k2``, ``mean_k3``, ``std_k1``, ``std_k2``, ``std_k3`` (cached; do not mutate).
    Raises:
        ValueError: ``alpha_max`` ≤ 0 or not finite; ``num_points`` < 2; as :func:`kl_family`.
    """
    alpha_max = _check_alpha(alpha_max)
    if alpha_max <= 0:
        raise ValueError(f"alpha_max: expected > 0, got {alpha_max}")
    num_points = _check_int(num_points, "num_points", 2)
    return _curves(alpha_max, num_points, _check_int(num_actions, "num_actions", 2), int(seed))


def plot_kl_estimators(alpha: float, num_samples: int = 16, num_actions: int = 20, seed: int = 0,
                       alpha_max: float = 4.0, axes=None):
    """Two panels at separation ``alpha``: (left) the exact KL and the mean of k1, k2, k3 against α,
    with a band of ± one std of an ``num_samples``-sample average around k1's and k3's means and a
    marker at ``alpha``; (right) each estimator as a function of log r, with the K actions as dots
    (area ∝ q(x)): k1 goes negative where p > q, k3 never does.

    Args:
        axes: two Matplotlib axes, or None for a new figure.
    Returns:
        the two axes.
    Raises:
        ValueError: as :func:`kl_estimator_stats` and :func:`kl_estimator_curves`.
    """
    stats = kl_estimator_stats(alpha, num_samples, num_actions, seed)
    curves = kl_estimator_curves(max(alpha_max, abs(float(alpha))), 81, num_actions, seed)
    if axes is None:
        import matplotlib.pyplot as plt

        _, axes = plt.subplots(1, 2, figsize=(8.4, 3.6), dpi=80)
    left, right = get_ax(axes[0]), get_ax(axes[1])
    a = curves["alpha"]
    left.plot(a, curves["kl"], color="k", lw=2.5, label="exact KL(q‖p)")
    for name in ESTIMATORS:
        mean = curves[f"mean_{name}"]
        left.plot(a, mean, "--" if name == "k1" else "-", color=_COLORS[name], label=f"E[{name}]")
        if name != "k2":
            band = curves[f"std_{name}"] / num_samples ** 0.5
            left.fill_between(a, mean - band, mean + band, color=_COLORS[name], alpha=0.12, lw=0)
    left.axvline(stats["alpha"], color="gray", ls=":", lw=1)
    left.plot([stats["alpha"]], [stats["kl"]], "o", color="k", ms=6)
    left.set_xlabel("separation α")
    left.set_ylabel("nats")
    left.set_title(f"means; bands: ± std of a {num_samples}-sample average", fontsize=9)
    left.legend(fontsize=9, loc="upper left")

    log_r = stats["log_r"]
    span = max(1.0, float(np.abs(log_r).max()) * 1.1)
    grid = np.linspace(-span, span, 200)
    lines = {"k1": -grid, "k2": 0.5 * grid ** 2, "k3": np.expm1(grid) - grid}
    sizes = 400 * stats["q"]
    for name in ESTIMATORS:
        right.plot(grid, lines[name], color=_COLORS[name], lw=1, alpha=0.6)
        right.scatter(log_r, stats[name]["values"], s=sizes, color=_COLORS[name], alpha=0.7,
                      label=f"{name} (P<0: {stats[name]['p_negative']:.2f})")
    right.axhline(0.0, color="k", lw=0.8)
    top = float(max(stats[n]["values"].max() for n in ESTIMATORS))
    right.set_ylim(min(-span, float(stats["k1"]["values"].min())) * 1.05, max(1.0, top) * 1.1)
    right.set_xlabel("log r = log p(x) − log q(x)")
    right.set_ylabel("one-sample estimate")
    right.set_title(f"α = {stats['alpha']:.2f}: each action's value (dot area ∝ q)", fontsize=9)
    right.legend(fontsize=9, loc="upper center")
    return axes


def kl_readout(alpha: float, num_samples: int = 16, num_actions: int = 20, seed: int = 0) -> tuple[str, list[str]]:
    """The explorer's numbers and warnings at one setting (text; pure, tested).

    Returns:
        (readout, warnings): the exact KL; per estimator its mean, bias, one-sample std, the std of
        an ``num_samples``-sample average and P(k < 0). A warning when α = 0 (p = q: every estimator
        is exactly 0 at every sample, so there is nothing to estimate).
    Raises:
        ValueError: as :func:`kl_estimator_stats`.
    """
    s = kl_estimator_stats(alpha, num_samples, num_actions, seed)
    lines = [f"KL(q‖p) = {s['kl']:.4f} nats   (α = {s['alpha']:.2f}, K = {num_actions}, n = {num_samples})",
             "       mean     bias   std(1)  std(mean of n)  P(k<0)"]
    for name in ESTIMATORS:
        e = s[name]
        lines.append(f"{name}  {e['mean']:7.4f}  {round(e['bias'], 4) + 0.0:+7.4f}  {e['std']:7.4f}  {e['std_mean']:14.4f}  "
                     f"{e['p_negative']:6.3f}")
    warnings = []
    if s["alpha"] == 0.0:
        warnings.append("α = 0: p and q are the same distribution, so log r = 0 at every action and k1, k2, k3 "
                        "are all exactly 0 with no spread: there is no divergence to estimate; move α above 0")
    return "\n".join(lines), warnings


def kl_explorer(num_actions: int = 20):
    """Interactive explorer: sliders for the separation α (first), the number of samples n averaged
    per estimate, and the number of actions K; redraws :func:`plot_kl_estimators` and prints
    :func:`kl_readout`. Needs ipywidgets (imported here). α = 0 is allowed and explained with a "⚠" line.

    Returns:
        an ``ipywidgets.VBox`` (display it in a notebook); see :func:`rlbook.widgets._live.live_explorer`.
    """
    import ipywidgets as widgets
    import matplotlib.pyplot as plt

    from rlbook.widgets._live import Frame, live_explorer

    style = {"description_width": "initial"}
    controls = {
        "alpha": widgets.FloatSlider(value=1.0, min=0.0, max=4.0, step=0.05, description="α", style=style),
        "num_samples": widgets.IntSlider(value=16, min=1, max=256, description="n", style=style),
        "num_actions": widgets.IntSlider(value=num_actions, min=2, max=50, description="K", style=style),
    }

    def render(alpha, num_samples, num_actions):
        readout, warnings = kl_readout(alpha, num_samples, num_actions)
        fig, axes = plt.subplots(1, 2, figsize=(8.4, 3.6), dpi=80)
        plot_kl_estimators(alpha, num_samples, num_actions, axes=axes)
        fig.tight_layout()
        return Frame(fig, readout, warnings)

    box = live_explorer(controls, [["alpha", "num_samples", "num_actions"]], render)
    box.redraw()
    return box
