"""rl.compare, rl.mean_ci, rl.bootstrap_ci, rl.seeds_needed and rl.claim_comparison: checked against
closed forms written out by hand, published sample sizes, and simulation."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats as sps

import rlbook as rl


def _t_interval(d, confidence=0.95):
    """Student's interval for the mean of d, written out (no scipy.stats.ttest_* involved)."""
    d = np.asarray(d, float)
    n = d.size
    half = sps.t.ppf(0.5 + confidence / 2, n - 1) * np.std(d, ddof=1) / math.sqrt(n)
    return d.mean() - half, d.mean() + half


def test_paired_interval_is_students_interval_of_the_differences():
    a = np.array([0.91, 0.95, 0.88, 0.97, 0.93])
    b = np.array([0.89, 0.92, 0.86, 0.94, 0.91])
    c = rl.compare(a, b, names=("CISPO", "GRPO"))
    low, high = _t_interval(a - b)
    assert c.mean_diff == pytest.approx(np.mean(a - b), abs=1e-12)
    assert (c.ci_low, c.ci_high) == (pytest.approx(low, abs=1e-12), pytest.approx(high, abs=1e-12))
    assert c.n == 5 and c.paired and c.sd_diff == pytest.approx(np.std(a - b, ddof=1))
    assert c.verdict == "CISPO > GRPO" and c.detected
    assert "CISPO − GRPO = +0.024" in str(c) and "n = 5 paired seeds" in str(c)


def test_verdicts_follow_the_interval():
    rng = np.random.default_rng(0)
    base = rng.normal(0.5, 0.1, 10)
    noise = rng.normal(0, 0.01, 10)
    assert rl.compare(base + 0.05 + noise, base).verdict == "A > B"
    assert rl.compare(base - 0.05 + noise, base).verdict == "A < B"
    small = rl.compare(base + noise, base)
    assert small.verdict == "no difference detected" and small.ci_low <= 0 <= small.ci_high and not small.detected


def test_pairing_removes_shared_luck():
    """Seeds that are good for both methods cancel in the paired interval, not in the unpaired one."""
    rng = np.random.default_rng(1)
    seed_luck = rng.normal(0, 0.1, 10)
    a = 0.80 + 0.02 + seed_luck + rng.normal(0, 0.005, 10)
    b = 0.80 + seed_luck + rng.normal(0, 0.005, 10)
    paired, unpaired = rl.compare(a, b), rl.compare(a, b, paired=False)
    assert paired.verdict == "A > B"
    assert unpaired.verdict == "no difference detected"
    assert (paired.ci_high - paired.ci_low) < 0.2 * (unpaired.ci_high - unpaired.ci_low)


def test_unpaired_interval_is_welchs():
    a, b = np.array([1.0, 2.0, 4.0, 7.0]), np.array([0.0, 0.5, 0.7, 1.0, 1.2, 3.0])
    c = rl.compare(a, b, paired=False)
    va, vb = a.var(ddof=1) / a.size, b.var(ddof=1) / b.size
    df = (va + vb) ** 2 / (va ** 2 / (a.size - 1) + vb ** 2 / (b.size - 1))  # Welch–Satterthwaite
    half = sps.t.ppf(0.975, df) * math.sqrt(va + vb)
    diff = a.mean() - b.mean()
    assert (c.ci_low, c.ci_high) == (pytest.approx(diff - half), pytest.approx(diff + half))
    pooled = math.sqrt(((a.size - 1) * a.var(ddof=1) + (b.size - 1) * b.var(ddof=1)) / (a.size + b.size - 2))
    assert c.sd_diff == pytest.approx(pooled, rel=1e-12) and c.n == 4  # the documented pooled std, the smaller n
    assert c.n == 4 and not c.paired and "seeds per method" in str(c)
    per_question = rl.compare(a, a - 1.0 + np.array([0.1, -0.1, 0.2, 0.0]), unit="questions")
    assert "n = 4 paired questions" in str(per_question)
    with pytest.raises(ValueError, match="unit"):
        rl.compare(a, a, unit="")


def test_constant_differences_give_a_zero_width_interval():
    c = rl.compare([1.0, 2.0, 3.0], [0.5, 1.5, 2.5])
    assert (c.mean_diff, c.ci_low, c.ci_high) == (0.5, 0.5, 0.5) and c.verdict == "A > B"


def test_coverage_of_the_paired_interval_by_simulation():
    """About 95 % of 95 % intervals contain the true difference (normal per-seed noise)."""
    rng = np.random.default_rng(2)
    true = 0.03
    hits = 0
    trials = 2000
    for _ in range(trials):
        luck = rng.normal(0, 0.1, 5)
        a, b = luck + true + rng.normal(0, 0.02, 5), luck + rng.normal(0, 0.02, 5)
        c = rl.compare(a, b)
        hits += c.ci_low <= true <= c.ci_high
    assert abs(hits / trials - 0.95) < 3 * math.sqrt(0.95 * 0.05 / trials)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(-1e3, 1e3, allow_nan=False), min_size=2, max_size=12), st.floats(-10, 10))
def test_shifting_a_by_delta_shifts_the_interval_by_delta(b, delta):
    b = np.asarray(b)
    rng = np.random.default_rng(len(b))
    a = b + rng.normal(0, 1, b.size)
    c0, c1 = rl.compare(a, b), rl.compare(a + delta, b)
    assert c1.mean_diff == pytest.approx(c0.mean_diff + delta, abs=1e-6)
    assert c1.ci_low == pytest.approx(c0.ci_low + delta, abs=1e-6)
    assert c1.ci_high == pytest.approx(c0.ci_high + delta, abs=1e-6)
    swapped = rl.compare(b, a)
    assert swapped.ci_low == pytest.approx(-c0.ci_high, abs=1e-9) and swapped.ci_high == pytest.approx(-c0.ci_low, abs=1e-9)


@pytest.mark.parametrize("kwargs, match", [
    (dict(a=[1.0], b=[2.0]), "at least 2"),
    (dict(a=[1.0, 2.0], b=[1.0, 2.0, 3.0]), "equal lengths"),
    (dict(a=[[1.0, 2.0]], b=[1.0, 2.0]), "1-d"),
    (dict(a=[1.0, float("nan")], b=[1.0, 2.0]), "NaN"),
    (dict(a=[1.0, 2.0], b=[1.0, 3.0], confidence=1.5), "confidence"),
    (dict(a=[1.0, 2.0], b=[1.0, 3.0], names=("x",)), "names"),
    (dict(a=[1.0, 1.0, 1.0], b=[1.0, 1.0, 1.0]), "ceiling or a floor"),
    (dict(a=["x", 1.0], b=[1.0, 2.0]), "numbers"),
])
def test_compare_errors_name_the_argument(kwargs, match):
    a, b = kwargs.pop("a"), kwargs.pop("b")
    with pytest.raises(ValueError, match=match):
        rl.compare(a, b, **kwargs)


def test_mean_ci_is_students_interval():
    x = [0.2, 0.5, 0.3, 0.9]
    mean, low, high = rl.mean_ci(x, confidence=0.9)
    assert mean == pytest.approx(np.mean(x))
    assert (low, high) == tuple(pytest.approx(v) for v in _t_interval(x, 0.9))
    assert rl.mean_ci([2.0, 2.0]) == (2.0, 2.0, 2.0)
    with pytest.raises(ValueError, match="values"):
        rl.mean_ci([1.0])


def test_bootstrap_ci_brackets_the_statistic_and_repeats():
    rng = np.random.default_rng(3)
    x = rng.normal(10, 2, 12)
    point, low, high = rl.bootstrap_ci(x, np.median)
    assert point == pytest.approx(np.median(x)) and low < point < high
    assert rl.bootstrap_ci(x, np.median) == (point, low, high)  # seeded
    t_low, t_high = _t_interval(x)
    m, b_low, b_high = rl.bootstrap_ci(x)  # the mean: close to Student's interval for normal data
    assert abs(b_low - t_low) < 0.6 and abs(b_high - t_high) < 0.6
    assert rl.bootstrap_ci([3.0, 3.0, 3.0]) == (3.0, 3.0, 3.0)
    with pytest.raises(ValueError, match="at least 3"):
        rl.bootstrap_ci([1.0, 2.0])
    with pytest.raises(ValueError, match="n_resamples"):
        rl.bootstrap_ci(x, n_resamples=10)


@pytest.mark.parametrize("effect, n", [(0.5, 34), (1.0, 10), (0.8, 15)])
def test_seeds_needed_matches_published_sample_sizes(effect, n):
    """Paired t-test, two-sided α = 0.05, power 0.8 (Cohen 1988's power tables; G*Power gives the same n)."""
    assert rl.seeds_needed(effect, 1.0) == n
    assert rl.seeds_needed(effect * 0.03, 0.03) == n  # only the ratio δ/σ matters
    assert rl.paired_t_power(n, effect, 1.0) >= 0.8 > rl.paired_t_power(n - 1, effect, 1.0)


def test_power_by_simulation():
    rng = np.random.default_rng(4)
    n, delta, sd, trials = 8, 0.03, 0.03, 4000
    d = rng.normal(delta, sd, (trials, n))
    t = d.mean(1) / (d.std(1, ddof=1) / math.sqrt(n))
    simulated = np.mean(np.abs(t) > sps.t.ppf(0.975, n - 1))
    assert abs(simulated - rl.paired_t_power(n, delta, sd)) < 3 * math.sqrt(0.25 / trials)


def test_seeds_needed_errors():
    with pytest.raises(ValueError, match="delta"):
        rl.seeds_needed(0.0, 1.0)
    with pytest.raises(ValueError, match="sd"):
        rl.seeds_needed(0.1, 0.0)
    with pytest.raises(ValueError, match="power"):
        rl.seeds_needed(0.1, 1.0, power=1.0)
    with pytest.raises(ValueError, match="alpha"):
        rl.seeds_needed(0.1, 1.0, alpha=0.0)
    with pytest.raises(ValueError, match="max_n"):
        rl.seeds_needed(1e-4, 1.0, max_n=1000)
    with pytest.raises(ValueError, match="`n`"):
        rl.paired_t_power(1, 0.1, 1.0)


def test_claim_comparison_asserts_the_side_of_the_interval(capsys):
    up = rl.compare([0.95, 0.96, 0.97, 0.95], [0.90, 0.90, 0.93, 0.91], names=("Dr. GRPO", "GRPO"))
    assert rl.claim_comparison("Dr. GRPO beats GRPO", up, ">") is None
    assert '✓ "Dr. GRPO beats GRPO": Dr. GRPO − GRPO' in capsys.readouterr().out
    with pytest.raises(AssertionError, match="no difference detected"):
        rl.claim_comparison("no difference detected at this scale", up, "none")
    with pytest.raises(AssertionError, match="A < B"):
        rl.claim_comparison("GRPO is worse", up, "<")
    flat = rl.compare([0.9, 0.95, 0.92], [0.93, 0.91, 0.93])
    rl.claim_comparison("no difference detected at this scale", flat, "none")
    with pytest.raises(AssertionError):
        rl.claim_comparison("A beats B", flat, ">")
    with pytest.raises(ValueError, match="expect"):
        rl.claim_comparison("A beats B", flat, "better")
    with pytest.raises(ValueError, match="comparison"):
        rl.claim_comparison("A beats B", (0.1, 0.0, 0.2), ">")


def test_claim_refuses_a_value_at_the_end_of_its_range():
    rl.claim("pass@16 is high", 0.97, low=0.9, bounds=(0, 1))
    with pytest.raises(ValueError, match="end of its range"):
        rl.claim("pass@16 is high", 1.0, low=0.9, bounds=(0, 1))
    with pytest.raises(ValueError, match="end of its range"):
        rl.claim("nothing truncated", 0.0, high=0.01, bounds=(0, 1))
    with pytest.raises(ValueError, match="bounds"):
        rl.claim("pass@16 is high", 0.5, low=0.1, bounds=(1, 0))


@pytest.mark.parametrize("confidence", [1.0, 1.5, 0.0, "0.9", True])
def test_confidence_outside_the_open_unit_interval_is_refused_even_where_scipy_is_not_called(confidence):
    # a constant sample returns before scipy sees the level: the check is ours alone
    with pytest.raises(ValueError, match="confidence"):
        rl.mean_ci([1.0, 1.0, 1.0], confidence=confidence)
    with pytest.raises(ValueError, match="confidence"):
        rl.bootstrap_ci([1.0, 1.0, 1.0], confidence=confidence)


def test_a_comparison_is_immutable():
    import dataclasses

    c = rl.compare([1.0, 2.0, 3.0], [0.0, 1.5, 2.0])
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.verdict = "A < B"


def test_unpaired_samples_without_spread_give_a_point_interval_and_no_p_value():
    c = rl.compare([2.0, 2.0, 2.0], [1.0, 1.0, 1.0], paired=False)
    assert (c.mean_diff, c.ci_low, c.ci_high, c.sd_diff) == (1.0, 1.0, 1.0, 0.0) and math.isnan(c.p_value)
    assert c.verdict == "A > B"


def test_claim_in_spread_takes_its_tolerance_from_the_seeds(capsys):
    seeds = [0.10, 0.12, 0.11, 0.09, 0.13]  # mean 0.11, sample sd 0.0158
    rl.claim_in_spread("a bias of about 0.11", 0.16, seeds)  # 0.05 from the mean: 3.2 sd
    assert "0.16" in capsys.readouterr().out
    with pytest.raises(AssertionError, match="0.11 ± 0.063"):
        rl.claim_in_spread("a bias of about 0.11", 0.18, seeds)  # 4.4 sd
    with pytest.raises(AssertionError):
        rl.claim_in_spread("a bias of about 0.11", 0.13, seeds, sds=1.0)


@pytest.mark.parametrize("over_seeds, sds, match", [([0.1, 0.2], 4.0, "≥ 3 finite"), ([0.1, float("nan"), 0.2], 4.0, "≥ 3 finite"),
                                                    ([0.1, 0.2, 0.3], 0.0, "`sds` must be a positive")])
def test_claim_in_spread_refuses_bad_arguments(over_seeds, sds, match):
    with pytest.raises(ValueError, match=match):
        rl.claim_in_spread("a bias of about 0.11", 0.1, over_seeds, sds=sds)
