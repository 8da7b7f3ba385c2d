"""The clip explorer's pure function reproduces PPO/CISPO facts from the library losses."""

import numpy as np
import pytest

from rlbook.widgets.clip_explorer import clip_explorer, clip_objective_curves, clip_readout, plot_clip_objective


@pytest.mark.parametrize("advantage", [1.5, -0.7])
@pytest.mark.parametrize("eps", [(0.2, None), (0.2, 0.28), (0.1, 0.5)])
def test_ppo_curves(advantage, eps):
    c = clip_objective_curves(advantage, *eps, ratio_min=0.0, ratio_max=2.5, num=251)
    r, low, high = c["ratio"], c["low"], c["high"]
    inside = (r >= low) & (r <= high)
    np.testing.assert_allclose(c["objective"][inside], r[inside] * advantage, rtol=1e-12)
    assert np.all(c["grad_log_prob"][c["clipped"]] == 0.0)  # exactly zero where the clip is active
    free = ~c["clipped"]
    np.testing.assert_allclose(c["grad_log_prob"][free][1:], (r * advantage)[free][1:], rtol=1e-10)
    side = r > high if advantage > 0 else r < low
    np.testing.assert_array_equal(c["clipped"], side)
    assert np.all(c["objective"] <= c["unclipped"] + 1e-12)  # pessimistic bound


def test_ppo_gradient_agrees_with_finite_differences_of_objective():
    c = clip_objective_curves(1.0, 0.2, 0.3, ratio_min=0.5, ratio_max=1.6, num=1101)
    fd = np.gradient(c["objective"], np.log(c["ratio"]))
    away = np.all(np.abs(c["ratio"][:, None] - np.array([0.8, 1.3])[None, :]) > 0.01, axis=1)
    np.testing.assert_allclose(fd[away][1:-1], c["grad_log_prob"][away][1:-1], atol=1e-3)


@pytest.mark.parametrize("advantage", [1.0, -2.0])
def test_cispo_weight_clipped_but_gradient_nonzero(advantage):
    c = clip_objective_curves(advantage, 0.2, 0.28, ratio_min=0.0, ratio_max=3.0, num=301, kind="cispo")
    r, low, high = c["ratio"], c["low"], c["high"]
    np.testing.assert_allclose(c["weight"], np.clip(np.maximum(r, 1e-8), low, high))
    np.testing.assert_allclose(c["grad_log_prob"], c["weight"] * advantage, rtol=1e-12)
    assert np.all(c["grad_log_prob"] != 0)
    assert c["clipped"].any() and np.all(c["clipped"] == ((r < low) | (r > high)))
    inside = (r >= low) & (r <= high)
    np.testing.assert_allclose(c["objective"][inside], r[inside] * advantage, rtol=1e-12)
    # the implied objective's derivative in log ρ is the library's gradient
    sel = r > 0.05
    fd = np.gradient(c["objective"][sel], np.log(r[sel]))
    np.testing.assert_allclose(fd[1:-1], c["grad_log_prob"][sel][1:-1], atol=2e-2)


def test_cispo_and_ppo_gradients_agree_inside_band():
    ppo = clip_objective_curves(0.8, 0.2, 0.2, num=201)
    cispo = clip_objective_curves(0.8, 0.2, 0.2, num=201, kind="cispo")
    inside = (ppo["ratio"] > 0.8) & (ppo["ratio"] < 1.2)
    np.testing.assert_allclose(ppo["grad_log_prob"][inside], cispo["grad_log_prob"][inside], rtol=1e-12)


@pytest.mark.parametrize("kw, name", [
    (dict(kind="trpo"), "kind"), (dict(clip_eps_low=-0.1), "clip_eps_low"), (dict(clip_eps_high=-1.0), "clip_eps_high"),
    (dict(ratio_min=1.0, ratio_max=0.5), "ratio_max"), (dict(ratio_min=-1.0), "ratio_min"), (dict(num=1), "num"),
])
def test_errors_name_argument(kw, name):
    with pytest.raises(ValueError, match=f"`{name}`"):
        clip_objective_curves(1.0, **kw)


def test_plot_and_widget_construct():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ax = plot_clip_objective(-1.0, 0.2, 0.28, kind="cispo")
    assert ax.get_xlabel().startswith("ratio")
    plt.close("all")
    pytest.importorskip("ipywidgets")
    box = clip_explorer()
    assert set(box.controls) == {"clip_eps_low", "clip_eps_high", "advantage", "ratios", "kind"}
    assert "band [1−ε_low, 1+ε_high] = [0.80, 1.20]" in box.readout.value and box.error.value == ""
    box.controls["clip_eps_high"].value = 0.5  # a move changes the numbers
    assert "[0.80, 1.50]" in box.readout.value
    box.controls["clip_eps_low"].value = 0.0  # the nonsense value: drawn, and explained
    assert box.error.value.count("⚠") == 1 and "ε_low = 0" in box.error.value
    box.controls["ratios"].value = (1.0, 1.0)  # an empty range: a message, the last figure stays
    assert "⚠" in box.error.value and "empty" in box.error.value and "[1.00, 1.50]" in box.readout.value
    plt.close("all")


def test_clip_readout_numbers():
    readout, warnings = clip_readout(1.0, 0.2, 0.2, 0.0, 2.0, "ppo")
    # PPO with Â > 0: the gradient is zero only above 1 + ε_high = 1.2: the grid's 160 points
    # 1.205, ..., 2.0 out of 401 (39.9%)
    assert f"zero gradient on {100 * 160 / 401:.1f}% of ρ" in readout, readout
    assert "at ρ = 0.5: +0.500" in readout and "at ρ = 1.5: +0.000" in readout  # ρÂ inside, 0 clipped
    assert warnings == []
    readout, _ = clip_readout(-1.0, 0.2, 0.2, 0.0, 2.0, "cispo")
    assert "at ρ = 1.5: -1.200" in readout  # CISPO keeps the clipped weight 1.2·Â
    assert len(clip_readout(0.0, 0.0, 0.0, 0.0, 2.0)[1]) == 3
