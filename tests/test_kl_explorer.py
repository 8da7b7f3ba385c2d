"""The KL-estimator explorer: exact statistics against closed forms, enumeration and sampling."""

import math

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from rlbook.widgets.kl_explorer import (kl_estimator_curves, kl_estimator_stats, kl_explorer, kl_family,
                                        kl_readout, plot_kl_estimators)


def _numpy_family(alpha, K=20, seed=0):
    gen = torch.Generator().manual_seed(seed)
    z = torch.randn(K, generator=gen, dtype=torch.float64).numpy()
    u = torch.randn(K, generator=gen, dtype=torch.float64).numpy()
    log_q = z - np.log(np.exp(z).sum())
    zp = z + alpha * u
    log_p = zp - np.log(np.exp(zp).sum())
    return log_q, log_p


@pytest.mark.parametrize("alpha", [0.3, 1.0, 2.5])
def test_exact_stats_match_an_independent_numpy_enumeration(alpha):
    s = kl_estimator_stats(alpha, num_samples=9)
    log_q, log_p = _numpy_family(alpha)
    q, log_r = np.exp(log_q), log_p - log_q
    kl = float((q * (log_q - log_p)).sum())
    assert s["kl"] == pytest.approx(kl, rel=1e-12)
    values = {"k1": -log_r, "k2": 0.5 * log_r ** 2, "k3": np.expm1(log_r) - log_r}
    for name, v in values.items():
        mean = float((q * v).sum())
        std = math.sqrt(float((q * (v - mean) ** 2).sum()))
        assert s[name]["mean"] == pytest.approx(mean, rel=1e-10)
        assert s[name]["std"] == pytest.approx(std, rel=1e-10)
        assert s[name]["std_mean"] == pytest.approx(std / 3.0, rel=1e-10)
        assert s[name]["p_negative"] == pytest.approx(float(q[v < 0].sum()), abs=1e-12)
    # k1 and k3 are unbiased for KL(q‖p); k2's mean is ½E[(log r)²], above the KL at this distance
    assert abs(s["k1"]["bias"]) < 1e-12 and abs(s["k3"]["bias"]) < 1e-12
    assert s["k2"]["bias"] > 0
    # k1 < 0 exactly where p > q
    assert s["k1"]["p_negative"] == pytest.approx(float(q[log_r > 0].sum()), abs=1e-12)


def test_alpha_zero_is_all_zero_and_warned():
    s = kl_estimator_stats(0.0)
    assert s["kl"] == 0.0
    for name in ("k1", "k2", "k3"):
        assert np.all(s[name]["values"] == 0.0) and s[name]["std"] == 0.0
    text, warnings = kl_readout(0.0)
    assert len(warnings) == 1 and "α = 0" in warnings[0]
    assert not kl_readout(0.5)[1]


def test_k2_matches_kl_to_second_order_near_zero_and_drifts_away():
    near, far = kl_estimator_stats(0.05), kl_estimator_stats(3.0)
    assert near["k2"]["bias"] / near["kl"] < 0.05
    assert far["k2"]["bias"] / far["kl"] > 0.3


def test_monte_carlo_agrees_with_the_exact_moments():
    alpha, n = 1.5, 40_000
    s = kl_estimator_stats(alpha)
    log_q, log_p = kl_family(alpha)
    x = torch.multinomial(log_q.exp(), n, replacement=True, generator=torch.Generator().manual_seed(3))
    log_r = (log_p - log_q)[x]
    samples = {"k1": -log_r, "k2": 0.5 * log_r ** 2, "k3": torch.expm1(log_r) - log_r}
    for name, v in samples.items():
        se = s[name]["std"] / math.sqrt(n)
        assert abs(float(v.mean()) - s[name]["mean"]) < 5 * se, name


@given(st.floats(-6, 6), st.integers(2, 40), st.integers(0, 1000))
def test_k3_is_never_negative(alpha, K, seed):
    s = kl_estimator_stats(alpha, num_actions=K, seed=seed)
    assert s["k3"]["min"] >= 0.0 and s["k2"]["min"] >= 0.0
    assert s["k3"]["p_negative"] == 0.0
    assert s["k1"]["mean"] == pytest.approx(s["kl"], abs=1e-9) and s["k3"]["mean"] == pytest.approx(s["kl"], abs=1e-9)


def test_the_family_is_chapter_5s():
    """Seed 0, K = 20: chapter 5's table (§5.8) reads KL = 0.289 at α = 1 and 0.873 at α = 2."""
    assert kl_estimator_stats(1.0)["kl"] == pytest.approx(0.289, abs=5e-4)
    assert kl_estimator_stats(2.0)["kl"] == pytest.approx(0.873, abs=5e-4)


def test_curves_shapes_and_values():
    c = kl_estimator_curves(2.0, num_points=5)
    assert set(c) == {"alpha", "kl", "mean_k1", "mean_k2", "mean_k3", "std_k1", "std_k2", "std_k3"}
    assert all(v.shape == (5,) for v in c.values())
    np.testing.assert_allclose(c["alpha"], [0, 0.5, 1.0, 1.5, 2.0])
    assert c["kl"][2] == pytest.approx(kl_estimator_stats(1.0)["kl"])
    assert np.all(np.diff(c["kl"]) > 0)  # the family moves apart monotonically on this grid


@pytest.mark.parametrize("call, match", [
    (lambda: kl_family(float("nan")), "alpha"),
    (lambda: kl_family(1.0, num_actions=1), "num_actions"),
    (lambda: kl_estimator_stats(1.0, num_samples=0), "num_samples"),
    (lambda: kl_estimator_curves(0.0), "alpha_max"),
    (lambda: kl_estimator_curves(1.0, num_points=1), "num_points"),
    (lambda: kl_readout("1"), "alpha"),
])
def test_bad_input_names_the_argument(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_readout_numbers():
    text, warnings = kl_readout(1.0, num_samples=4)
    s = kl_estimator_stats(1.0, num_samples=4)
    assert f"{s['kl']:.4f}" in text and f"{s['k2']['mean']:.4f}" in text and f"{s['k3']['std_mean']:.4f}" in text
    assert not warnings


def test_plot_and_widget():
    import matplotlib.pyplot as plt

    axes = plot_kl_estimators(1.0, num_samples=4)
    assert len(axes[0].lines) >= 4 and axes[1].collections
    plt.close("all")
    pytest.importorskip("ipywidgets")
    box = kl_explorer()
    alpha = box.controls["alpha"]
    before = box.readout.value
    alpha.value = 2.0
    assert box.readout.value != before and "⚠" not in box.error.value
    alpha.value = 0.0
    assert "⚠" in box.error.value and "α = 0" in box.error.value
    plt.close("all")
