"""Comparing methods over seeds: paired differences, confidence intervals, and how many seeds to run.

A training run is one draw from a distribution of runs: change the seed and the final pass@1 moves.
So "method A beats method B" is a statement about two distributions, and the book backs it the way an
experimental paper should: run both methods on the *same* seeds (seed k of A and of B start from the
same supervised model, draw the same prompts first and sample with the same generator), take the
per-seed differences d_k = a_k − b_k, and report their mean with a 95 % confidence interval
(Student's t on the differences, the paired t-test of ``scipy.stats.ttest_rel``). The verdict reads
off the interval: entirely above zero → "A > B"; entirely below → "A < B"; straddling zero →
"no difference detected" (not "no difference": a larger experiment might find one).

Pairing matters because much of a run's luck is shared: a seed whose supervised model is weak is
weak under every method, and that shared part cancels in d_k. How many seeds an experiment needs
follows from the spread of d_k (:func:`seeds_needed`, the power of the paired t-test).

The statistics come from ``scipy.stats`` (``ttest_rel``, ``ttest_ind``, ``bootstrap``, the
non-central t); this module only names them in the book's terms.

Sources: Student (1908), "The probable error of a mean"; Welch (1947) for unpaired samples; Efron &
Tibshirani (1993), *An Introduction to the Bootstrap*, on BCa intervals; Cohen (1988),
*Statistical Power Analysis*, on the power of the t-test; and, on seeds in deep RL, Henderson et al.
2018, arXiv:1709.06560, and Agarwal et al. 2021, arXiv:2108.13264.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["Comparison", "compare", "mean_ci", "bootstrap_ci", "seeds_needed", "paired_t_power", "adjust_p_values"]

NO_DIFFERENCE = "no difference detected"


def _as_sample(name: str, values, min_size: int = 2) -> np.ndarray:
    try:
        x = np.asarray(values, dtype=float)
    except (TypeError, ValueError) as err:
        raise ValueError(f"`{name}` must be a 1-d sequence of numbers (one per seed): {err}") from None
    if x.ndim != 1:
        raise ValueError(f"`{name}` must be 1-d (one value per seed); got shape {x.shape}")
    if x.size < min_size:
        raise ValueError(f"`{name}` needs at least {min_size} values (seeds) for an interval; got {x.size}")
    if not np.all(np.isfinite(x)):
        raise ValueError(f"`{name}` contains NaN or infinite values")
    return x


def _check_confidence(confidence: float) -> None:
    if not (isinstance(confidence, (int, float)) and 0.0 < confidence < 1.0):
        raise ValueError(f"`confidence` must be in (0, 1), e.g. 0.95; got {confidence!r}")


@dataclass(frozen=True)
class Comparison:
    """The result of :func:`compare`: the mean difference A − B, its interval, and the verdict.

    Attributes:
        mean_diff: mean of a − b (paired: mean of the per-seed differences), in the values' units.
        ci_low, ci_high: the ``confidence`` interval of that mean difference.
        n: seeds (pairs when paired; the smaller sample otherwise).
        verdict: "A > B", "A < B" (with the names given) or "no difference detected".
        p_value: two-sided p-value of the same t-test (nan for a zero-spread sample).
        sd_diff: sample std (ddof = 1) of the per-seed differences (paired) — what
            :func:`seeds_needed` takes; for unpaired samples, the pooled std.
        confidence: the interval's level.
        names: the names of A and B used in ``verdict``.
        paired: whether the seeds were paired.
        unit: what was paired or sampled ("seeds"; "questions" for per-question pass rates).
    """

    mean_diff: float
    ci_low: float
    ci_high: float
    n: int
    verdict: str
    p_value: float
    sd_diff: float
    confidence: float
    names: tuple
    paired: bool
    unit: str = "seeds"

    @property
    def detected(self) -> bool:
        """True when the interval excludes zero (a difference was detected)."""
        return self.verdict != NO_DIFFERENCE

    def __str__(self) -> str:
        a, b = self.names
        level = f"{100 * self.confidence:g} %"
        kind = f"paired {self.unit}" if self.paired else f"{self.unit} per method"
        return (f"{a} − {b} = {self.mean_diff:+.3f} [{level} CI {self.ci_low:+.3f}, {self.ci_high:+.3f}], "
                f"n = {self.n} {kind}: {self.verdict}")


def compare(a, b, *, paired: bool = True, confidence: float = 0.95, names: tuple = ("A", "B"),
            unit: str = "seeds") -> Comparison:
    """Compare two methods' per-seed results: mean difference A − B, its confidence interval, a verdict.

    Paired (the default, the book's design): d_k = a_k − b_k for seed k, the interval is
    mean(d) ± t_{n−1, (1+c)/2} · sd(d)/√n (``scipy.stats.ttest_rel``). Unpaired: Welch's interval
    (``scipy.stats.ttest_ind(equal_var=False)``). When every difference is the same number the
    interval has zero width (the t-test is undefined there; the data leave no doubt).

    Args:
        a, b: 1-d sequences, one value per seed (paired: the same seeds in the same order, so equal
            lengths). Any unit; larger is not assumed better (the verdict only orders them).
        paired: whether seed k of ``a`` and of ``b`` share their randomness.
        confidence: level of the interval, in (0, 1).
        names: (name of A, name of B), used in the verdict and the printout.
        unit: what the values are per (the printout's "n = 10 paired seeds"); e.g. "questions".
    Returns:
        :class:`Comparison` (``str()`` gives one line for a chapter to print).
    Raises:
        ValueError: fewer than 2 values, NaN/inf, not 1-d, unequal lengths when paired, a
            ``confidence`` outside (0, 1), or both samples constant and equal (nothing was measured:
            e.g. two metrics pinned at their ceiling).
    """
    from scipy import stats

    a, b = _as_sample("a", a), _as_sample("b", b)
    _check_confidence(confidence)
    if not (isinstance(names, (tuple, list)) and len(names) == 2 and all(isinstance(s, str) for s in names)):
        raise ValueError(f"`names` must be two strings (A's and B's); got {names!r}")
    if not isinstance(unit, str) or not unit:
        raise ValueError(f"`unit` must be a non-empty string such as 'seeds'; got {unit!r}")
    if np.ptp(a) == 0 and np.ptp(b) == 0 and a[0] == b[0]:
        raise ValueError(f"`a` and `b` are both constant at {a[0]:g} (a ceiling or a floor?): a comparison there "
                         "measures nothing; compare where the metric can move")
    if paired:
        if a.size != b.size:
            raise ValueError(f"paired samples need equal lengths (one value per shared seed); got {a.size} and {b.size}")
        d = a - b
        n, mean, sd = d.size, float(np.mean(d)), float(np.std(d, ddof=1))
        if sd == 0.0:
            low = high = mean
            p = float("nan")
        else:
            res = stats.ttest_rel(a, b)
            ci = res.confidence_interval(confidence_level=confidence)
            low, high, p = float(ci.low), float(ci.high), float(res.pvalue)
    else:
        n, mean = min(a.size, b.size), float(np.mean(a) - np.mean(b))
        sd = float(math.sqrt((np.var(a, ddof=1) * (a.size - 1) + np.var(b, ddof=1) * (b.size - 1))
                             / (a.size + b.size - 2)))
        if sd == 0.0:
            low = high = mean
            p = float("nan")
        else:
            res = stats.ttest_ind(a, b, equal_var=False)
            ci = res.confidence_interval(confidence_level=confidence)
            low, high, p = float(ci.low), float(ci.high), float(res.pvalue)
    if low > 0:
        verdict = f"{names[0]} > {names[1]}"
    elif high < 0:
        verdict = f"{names[0]} < {names[1]}"
    else:
        verdict = NO_DIFFERENCE
    return Comparison(mean_diff=mean, ci_low=low, ci_high=high, n=int(n), verdict=verdict, p_value=p, sd_diff=sd,
                      confidence=float(confidence), names=tuple(names), paired=bool(paired), unit=unit)


def mean_ci(values, confidence: float = 0.95) -> tuple[float, float, float]:
    """Mean of per-seed values and its Student-t confidence interval.

    mean ± t_{n−1, (1+c)/2} · s/√n with s the sample std (ddof = 1); a constant sample gives a
    zero-width interval.

    Args:
        values: 1-d, one value per seed (≥ 2).
        confidence: level in (0, 1).
    Returns:
        (mean, low, high), in the values' units.
    Raises:
        ValueError: fewer than 2 values, NaN/inf, not 1-d, or ``confidence`` outside (0, 1).
    """
    from scipy import stats

    x = _as_sample("values", values)
    _check_confidence(confidence)
    mean, sd = float(np.mean(x)), float(np.std(x, ddof=1))
    if sd == 0.0:
        return mean, mean, mean
    low, high = stats.t.interval(confidence, df=x.size - 1, loc=mean, scale=sd / math.sqrt(x.size))
    return mean, float(low), float(high)


def bootstrap_ci(values, statistic=np.mean, confidence: float = 0.95, n_resamples: int = 9999,
                 seed: int = 0) -> tuple[float, float, float]:
    """A statistic of per-seed values with its bootstrap (BCa) confidence interval.

    For statistics without a t-interval (a median, a fitted curve's parameter averaged over seeds).
    ``scipy.stats.bootstrap`` with the bias-corrected and accelerated method (Efron & Tibshirani
    1993, the BCa interval); a constant sample gives a zero-width interval.

    Args:
        values: 1-d, one value per seed (≥ 3: BCa needs a jackknife).
        statistic: a function of a 1-d array (vectorised over ``axis=-1``, as NumPy's reductions are).
        confidence: level in (0, 1).
        n_resamples: bootstrap resamples (≥ 100).
        seed: seeds the resampling, so the interval repeats exactly.
    Returns:
        (statistic(values), low, high).
    Raises:
        ValueError: fewer than 3 values, NaN/inf, not 1-d, ``confidence`` outside (0, 1), or
            ``n_resamples`` < 100.
    """
    from scipy import stats

    x = _as_sample("values", values, min_size=3)
    _check_confidence(confidence)
    if isinstance(n_resamples, bool) or not isinstance(n_resamples, int) or n_resamples < 100:
        raise ValueError(f"`n_resamples` must be an integer ≥ 100; got {n_resamples!r}")
    point = float(statistic(x))
    if np.ptp(x) == 0:
        return point, point, point
    res = stats.bootstrap((x,), statistic, confidence_level=confidence, n_resamples=n_resamples, method="BCa",
                          vectorized=True, rng=np.random.default_rng(seed))
    return point, float(res.confidence_interval.low), float(res.confidence_interval.high)


def paired_t_power(n: int, delta: float, sd: float, alpha: float = 0.05) -> float:
    """Power of the two-sided paired t-test with ``n`` seeds to detect a true mean difference ``delta``.

    With effect size d = δ/σ, the statistic is non-central t with n − 1 degrees of freedom and
    non-centrality d·√n; power = P(|T| > t_{n−1, 1−α/2}) (Cohen 1988, on the t-test).

    Args:
        n: seeds (pairs), ≥ 2.
        delta: the true mean difference to detect (units of the metric; sign irrelevant).
        sd: the std of the per-seed differences (> 0), e.g. ``Comparison.sd_diff`` of a pilot.
        alpha: the test's level (two-sided), in (0, 1).
    Returns:
        the power, in [alpha, 1).
    Raises:
        ValueError: ``n`` < 2, ``sd`` ≤ 0, or ``alpha`` outside (0, 1).
    """
    from scipy import stats

    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 2:
        raise ValueError(f"`n` must be an integer ≥ 2 (seeds); got {n!r}")
    if not (isinstance(sd, (int, float)) and math.isfinite(sd) and sd > 0):
        raise ValueError(f"`sd` must be a positive number (std of the per-seed differences); got {sd!r}")
    if not (isinstance(delta, (int, float)) and math.isfinite(delta)):
        raise ValueError(f"`delta` must be a finite number; got {delta!r}")
    if not (isinstance(alpha, (int, float)) and 0.0 < alpha < 1.0):
        raise ValueError(f"`alpha` must be in (0, 1); got {alpha!r}")
    df, nc = n - 1, abs(delta) / sd * math.sqrt(n)
    crit = stats.t.ppf(1 - alpha / 2, df)
    return float(stats.nct.sf(crit, df, nc) + stats.nct.cdf(-crit, df, nc))


def seeds_needed(delta: float, sd: float, power: float = 0.8, alpha: float = 0.05, max_n: int = 100_000) -> int:
    """How many paired seeds detect a mean difference ``delta`` at spread ``sd`` with the given power.

    The smallest n ≥ 2 with :func:`paired_t_power` (n, δ, σ, α) ≥ power. Rule of thumb it refines:
    n ≈ ((z_{1−α/2} + z_{power}) · σ/δ)² + 1 ≈ 7.85 (σ/δ)² + 1 at α = 0.05, power 0.8.

    Args:
        delta: the difference worth detecting (units of the metric), ≠ 0.
        sd: std of the per-seed differences (> 0), from a pilot's ``Comparison.sd_diff``.
        power: the wanted probability of detecting it, in (0, 1).
        alpha: the test's level (two-sided), in (0, 1).
        max_n: give up above this many seeds.
    Returns:
        the number of seeds (≥ 2).
    Raises:
        ValueError: ``delta`` = 0, ``sd`` ≤ 0, ``power`` or ``alpha`` outside (0, 1), or more than
            ``max_n`` seeds needed.
    """
    if not (isinstance(delta, (int, float)) and math.isfinite(delta) and delta != 0):
        raise ValueError(f"`delta` must be a non-zero finite number (the difference to detect); got {delta!r}")
    if not (isinstance(power, (int, float)) and 0.0 < power < 1.0):
        raise ValueError(f"`power` must be in (0, 1), e.g. 0.8; got {power!r}")
    paired_t_power(2, delta, sd, alpha)  # validates sd and alpha
    lo, hi = 2, 2
    while paired_t_power(hi, delta, sd, alpha) < power:
        lo, hi = hi, hi * 2
        if hi > max_n:
            raise ValueError(f"more than `max_n`={max_n} seeds are needed to detect delta={delta} at sd={sd}")
    while lo < hi:  # power is increasing in n: bisect for the first n that reaches it
        mid = (lo + hi) // 2
        if paired_t_power(mid, delta, sd, alpha) >= power:
            hi = mid
        else:
            lo = mid + 1
    return int(hi)


def adjust_p_values(p_values, method: str = "holm") -> np.ndarray:
    """Adjust the p-values of a family of tests for their number (a chapter that makes many comparisons).

    A chapter that tests 24 pairs at the 95 % level expects about 1.2 false positives among them even when
    no method differs. Two standard controls:

    * ``"holm"`` (Holm 1979, "A simple sequentially rejective multiple test procedure", Scand. J. Statist.
      6:65–70): controls the family-wise error rate (the chance of *any* false positive). With the sorted
      p-values p₍₁₎ ≤ … ≤ p₍ₘ₎, p̃₍ᵢ₎ = max_{j ≤ i} min(1, (m − j + 1)·p₍ⱼ₎).
    * ``"bh"`` (Benjamini & Hochberg 1995, J. R. Statist. Soc. B 57:289–300): controls the false discovery
      rate (the expected share of false positives among the detected); ``scipy.stats.false_discovery_control``.

    A comparison is detected at level α after adjustment when its adjusted value is ≤ α.

    Args:
        p_values: 1-d sequence of m ≥ 1 p-values in [0, 1] (NaN not allowed: a zero-spread comparison has no
            p-value; leave it out of the family).
        method: "holm" or "bh".
    Returns:
        The adjusted p-values, shape (m,), in the input's order.
    Raises:
        ValueError: an empty or non-1-d input, a value outside [0, 1] or NaN, or an unknown ``method``.
    """
    from scipy import stats

    p = np.asarray(p_values, dtype=float)
    if p.ndim != 1 or p.size == 0:
        raise ValueError(f"`p_values` must be a non-empty 1-d sequence; got shape {p.shape}")
    if not np.all((p >= 0) & (p <= 1)):
        raise ValueError(f"`p_values` must lie in [0, 1] (no NaN); got {p.tolist()}")
    if method == "bh":
        return np.asarray(stats.false_discovery_control(p, method="bh"), dtype=float)
    if method != "holm":
        raise ValueError(f"`method` must be 'holm' or 'bh'; got {method!r}")
    m = p.size
    order = np.argsort(p, kind="stable")
    adjusted_sorted = np.maximum.accumulate(np.minimum(1.0, (m - np.arange(m)) * p[order]))
    out = np.empty(m)
    out[order] = adjusted_sorted
    return out
