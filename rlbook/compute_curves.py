"""Reward against training compute: ScaleRL's sigmoidal curve and a least-squares fit of it.

ScaleRL fits the validation pass rate R of an RL run against its compute C (e.g. GPU-hours) with

    R(C) = R0 + (A − R0) / (1 + (C_mid / C)^B)

A is the asymptote (the best reward the recipe reaches with unlimited compute), B > 0 the
steepness (compute efficiency), C_mid the compute at which half of the gain A − R0 is reached, and
R0 the initial reward. Two recipes are compared by A first and B, C_mid second: extrapolating from
a few small runs is the point. NumPy in, NumPy out; the fit needs SciPy.
"""

from __future__ import annotations

import numpy as np

__all__ = ["sigmoid_compute_curve", "fit_compute_curve"]


def _as_array(name: str, x, ndim: int | None = None) -> np.ndarray:
    """``x`` as a finite float64 array; ValueError naming ``x`` otherwise."""
    try:
        arr = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"`{name}` must be numeric; got {x!r}") from None
    if ndim is not None and arr.ndim != ndim:
        raise ValueError(f"`{name}` must be {ndim}-D; got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"`{name}` must be finite (no NaN or inf)")
    return arr


def _check_positive(name: str, value) -> float:
    value = float(value)
    if not (np.isfinite(value) and value > 0):
        raise ValueError(f"`{name}` must be a finite number > 0; got {value}")
    return value


def sigmoid_compute_curve(compute, r0: float, asymptote: float, c_mid: float, exponent: float) -> np.ndarray:
    """ScaleRL's sigmoidal compute-performance curve.

    R(C) = R0 + (A − R0) / (1 + (C_mid / C)^B)

    R(0) = R0, R(C_mid) = (R0 + A)/2, R(C) → A as C → ∞; B sets how sharply it rises around C_mid
    (on a log-compute axis the curve is a logistic in log C with slope B). Evaluated as
    1/(1 + exp(B·(log C_mid − log C))) so that huge or tiny ratios do not overflow.

    Source: book eq. (scalerl-curve); Khatri et al. 2025, "The Art of Scaling Reinforcement
    Learning Compute for LLMs" (ScaleRL), arXiv:2510.13786, eq. 1.

    Args:
        compute: C ≥ 0, any shape (...), in any compute unit (GPU-hours, FLOPs, steps).
        r0: R0, the initial reward (reward units).
        asymptote: A, the reward as C → ∞.
        c_mid: C_mid > 0, in the units of ``compute``.
        exponent: B > 0, dimensionless.
    Returns:
        float64 array of the shape of ``compute`` (a 0-d array for a scalar).
    Gradient:
        none (NumPy).
    Raises:
        ValueError: compute negative or not finite; c_mid or exponent ≤ 0; r0 or asymptote not finite.
    See also:
        fit_compute_curve
    Example:
        >>> sigmoid_compute_curve([0.0, 100.0, 1e12], r0=0.2, asymptote=0.6, c_mid=100.0, exponent=1.5).round(4).tolist()
        [0.2, 0.4, 0.6]
    """
    compute = _as_array("compute", compute)
    if np.any(compute < 0):
        raise ValueError("`compute` must be ≥ 0")
    c_mid, exponent = _check_positive("c_mid", c_mid), _check_positive("exponent", exponent)
    r0, asymptote = float(_as_array("r0", r0)), float(_as_array("asymptote", asymptote))
    with np.errstate(divide="ignore", over="ignore"):
        gap = exponent * (np.log(c_mid) - np.log(compute))  # +inf at C = 0
        return r0 + (asymptote - r0) / (1.0 + np.exp(gap))


def _parameter_bounds(asymptote_bounds, c_mid_bounds, exponent_bounds) -> tuple[np.ndarray, np.ndarray]:
    """Validated (lower, upper) arrays for the fitted (A, log C_mid, B); ValueError naming the bound."""
    bounds = []
    for name, pair, positive in (
        ("asymptote_bounds", asymptote_bounds, False),
        ("c_mid_bounds", c_mid_bounds, True),
        ("exponent_bounds", exponent_bounds, True),
    ):
        try:
            low, high = (float(v) for v in pair)
        except (TypeError, ValueError):
            raise ValueError(f"`{name}` must be a pair (low, high) of numbers; got {pair!r}") from None
        if not (np.isfinite(low) and np.isfinite(high) and low < high) or (positive and low <= 0):
            extra = " and low > 0" if positive else ""
            raise ValueError(f"`{name}` must be (low, high) with low < high{extra}, finite; got {(low, high)}")
        bounds.append((np.log(low), np.log(high)) if name == "c_mid_bounds" else (low, high))
    return np.array([b[0] for b in bounds]), np.array([b[1] for b in bounds])


def fit_compute_curve(
    compute,
    reward,
    r0: float | None = None,
    asymptote_bounds: tuple[float, float] = (0.0, 1.0),
    exponent_bounds: tuple[float, float] = (1e-3, 20.0),
    c_mid_bounds: tuple[float, float] | None = None,
) -> dict:
    """Least-squares fit of :func:`sigmoid_compute_curve` to (compute, reward) points, R0 held fixed.

    minimise over (A, C_mid, B):  Σ_j (R(C_j; R0, A, C_mid, B) − reward_j)²

    As in ScaleRL, R0 is not fitted: it is the initial performance. ``r0=None`` takes the reward
    at the smallest compute as R0, a good proxy when that point is early (C ≪ C_mid); pass the
    true initial reward (the model before RL) when it is known. C_mid is fitted as log C_mid (the
    natural scale of compute) with SciPy's bounded trust-region least squares; the defaults
    suit rewards in [0, 1] (pass rates).

    Source: book eq. (scalerl-curve); Khatri et al. 2025, "The Art of Scaling Reinforcement
    Learning Compute for LLMs" (ScaleRL), arXiv:2510.13786, eq. 1 and its fitting procedure.

    Args:
        compute: (N,) C_j > 0, N ≥ 4 points (three fitted parameters), any compute unit.
        reward: (N,) rewards R_j at those compute values.
        r0: the initial reward R0, or None (the reward at the smallest compute).
        asymptote_bounds: (low, high) for A; default (0, 1), for pass rates.
        exponent_bounds: (low, high) for B, with low > 0.
        c_mid_bounds: (low, high) for C_mid, with low > 0; None means
            (min C / 1000, max C · 1000).
    Returns:
        dict with float values: ``asymptote`` (A), ``c_mid``, ``exponent`` (B), ``r0`` (R0, as
        used) and ``rmse`` (root mean squared residual, reward units).
    Gradient:
        none (NumPy / SciPy).
    Raises:
        ValueError: fewer than 4 points; compute not positive; reward not the same length as
            compute; non-finite inputs; bounds with low ≥ high (or ≤ 0 for exponent and c_mid).
        ImportError: SciPy is not installed.
    See also:
        sigmoid_compute_curve
    Example:
        >>> c = np.geomspace(10, 1e5, 12)
        >>> fit = fit_compute_curve(c, sigmoid_compute_curve(c, 0.1, 0.7, 500.0, 1.2), r0=0.1)
        >>> round(fit["asymptote"], 3), round(fit["c_mid"]), round(fit["exponent"], 3)
        (0.7, 500, 1.2)
    """
    try:
        from scipy.optimize import curve_fit
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError("fit_compute_curve needs SciPy: pip install 'scipy>=1.10'") from err
    compute, reward = _as_array("compute", compute, ndim=1), _as_array("reward", reward, ndim=1)
    if compute.size < 4:
        raise ValueError(f"`compute` needs at least 4 points to fit 3 parameters; got {compute.size}")
    if reward.shape != compute.shape:
        raise ValueError(f"`reward` must have the same length as `compute` ({compute.size}); got {reward.size}")
    if np.any(compute <= 0):
        raise ValueError("`compute` must be > 0 at every point (the curve is fitted in log compute)")
    r0 = float(reward[np.argmin(compute)]) if r0 is None else float(_as_array("r0", r0))
    if c_mid_bounds is None:
        c_mid_bounds = (compute.min() / 1e3, compute.max() * 1e3)
    lower, upper = _parameter_bounds(asymptote_bounds, c_mid_bounds, exponent_bounds)

    def model(c, asymptote, log_c_mid, exponent):
        return sigmoid_compute_curve(c, r0, asymptote, np.exp(log_c_mid), exponent)

    start = np.array([reward.max(), np.log(np.median(compute)), 1.0])
    start = np.clip(start, lower + 1e-9 * (upper - lower), upper - 1e-9 * (upper - lower))
    params, _ = curve_fit(model, compute, reward, p0=start, bounds=(lower, upper), method="trf", maxfev=20_000)
    asymptote, log_c_mid, exponent = (float(v) for v in params)
    rmse = float(np.sqrt(np.mean((model(compute, *params) - reward) ** 2)))
    return {"asymptote": asymptote, "c_mid": float(np.exp(log_c_mid)), "exponent": exponent, "r0": r0, "rmse": rmse}
