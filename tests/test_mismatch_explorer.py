"""The mismatch explorer: its numbers are the library's, its figure has its four panels, bad values give "⚠"."""

import math

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pytest
import torch

from rlbook.mismatch import log_ratio_stats, mismatch_kls, off_policy_gradient_moments, sampler_log_probs
from rlbook.widgets.mismatch_explorer import (CAP_RANGE, REWARDS, TRAINER_LOGITS, cap_curves, mismatch_explorer,
                                              mismatch_frame, mismatch_numbers, mismatch_readout, mismatch_setting,
                                              plot_mismatch)

SETTINGS = [(1.0, 1.0, "fp32", 2.0, 0.0), (0.8, 1.0, "fp32", 2.0, 0.0), (1.0, 0.7, "bf16", 1.5, 100.0),
            (1.3, 0.95, "fp16", 4.0, 200.0), (0.6, 0.8, "bf16", 16.0, 50.0)]


def test_setting():
    logits, pi, adv = mismatch_setting(7.0)
    z = np.array(TRAINER_LOGITS)
    np.testing.assert_allclose(logits.numpy(), z + 7.0, rtol=0, atol=1e-15)
    p = np.exp(z) / np.exp(z).sum()
    np.testing.assert_allclose(pi.numpy(), p, rtol=1e-13)
    np.testing.assert_allclose(adv.numpy(), np.array(REWARDS) - p @ np.array(REWARDS), rtol=1e-13)


@pytest.mark.parametrize("temperature, top_p, precision, cap, offset", SETTINGS)
def test_numbers_are_the_library_values_exactly(temperature, top_p, precision, cap, offset):
    s = mismatch_numbers(temperature, top_p, precision, cap, offset)
    logits, pi, adv = mismatch_setting(offset)
    mu = sampler_log_probs(logits, temperature=temperature, top_p=top_p, dtype=precision).exp()
    assert np.array_equal(s["sampler"], mu.numpy()) and np.array_equal(s["trainer"], pi.numpy())
    kl = mismatch_kls(pi.log(), mu.log())
    assert (s["kl_sampler_trainer"], s["kl_trainer_sampler"]) == (float(kl[0]), float(kl[1]))
    drawn = mu > 0
    assert s["stats"] == log_ratio_stats(pi.log()[drawn], mu.log()[drawn], weights=mu[drawn], cap=cap)
    for name, correction in (("uncorrected", "none"), ("IS", "is"), ("TIS", "tis"), ("MIS", "mis")):
        m = off_policy_gradient_moments(pi, mu, adv, correction, cap if correction in ("tis", "mis") else None)
        for key in ("bias_norm", "variance", "mse", "changed"):
            assert s["moments"][name][key] == float(m[key]), (name, key)
    assert np.array_equal(s["cut"], (mu == 0).numpy())
    assert np.isinf(s["ratio"][s["cut"]]).all() and np.isfinite(s["ratio"][~s["cut"]]).all()


def test_the_sampler_that_is_the_trainer_has_no_bias():
    """T = 1, top-p = 1, fp32 at offset 0: μ = π to float32 rounding; every estimator's bias is then
    rounding-small, and the IS weights are 1."""
    s = mismatch_numbers(1.0, 1.0, "fp32", 2.0, 0.0)
    np.testing.assert_allclose(s["sampler"], s["trainer"], rtol=1e-6)
    assert all(m["bias_norm"] < 1e-6 for m in s["moments"].values())
    assert s["kl_sampler_trainer"] < 1e-12 and s["stats"]["frac_masked"] == 0.0


def test_top_p_cut_leaves_a_bias_no_correction_removes():
    s = mismatch_numbers(1.0, 0.7, "fp32", 2.0, 0.0)
    assert s["cut"].sum() == 7 and s["kl_trainer_sampler"] == math.inf
    # the tail tokens carry reward; IS is unbiased on what μ draws, so its bias is exactly the cut part
    pi, adv = torch.tensor(s["trainer"]), torch.tensor(s["advantages"])
    cut = torch.tensor(s["cut"])
    expected = ((pi * adv * cut) @ (torch.eye(10, dtype=torch.float64) - pi)).norm()
    assert s["moments"]["IS"]["bias_norm"] == pytest.approx(float(expected), rel=1e-12)
    assert s["moments"]["TIS"]["bias_norm"] >= s["moments"]["IS"]["bias_norm"] - 1e-15


def test_cap_curves():
    c = cap_curves(0.8, 1.0, "fp32", 0.0, points=9)
    np.testing.assert_allclose(c["cap"], np.geomspace(*CAP_RANGE, 9))
    _, pi, adv = mismatch_setting(0.0)
    mu = sampler_log_probs(mismatch_setting(0.0)[0], temperature=0.8, dtype="fp32").exp()
    for i in (0, 4, 8):
        for name, correction in (("TIS", "tis"), ("MIS", "mis")):
            m = off_policy_gradient_moments(pi, mu, adv, correction, float(c["cap"][i]))
            assert c[name][0][i] == float(m["bias_norm"]) and c[name][1][i] == float(m["variance"])
    # IS is unbiased without truncation; at C = 16 > every ratio (max 2.53 here) TIS and MIS are IS
    assert c["IS"][0][0] < 1e-12
    for name in ("TIS", "MIS"):
        assert c[name][0][-1] == pytest.approx(c["IS"][0][-1], abs=1e-14)
        assert c[name][1][-1] == pytest.approx(c["IS"][1][-1], rel=1e-12)
    # MIS at C = 1 masks every token whose ratio is not exactly 1: no gradient, bias = the target's norm
    target = off_policy_gradient_moments(pi, mu, adv, "is")["target"].norm()
    assert c["MIS"][0][0] == pytest.approx(float(target), rel=1e-12) and c["MIS"][1][0] == 0.0


def test_readout_shows_the_library_numbers():
    text, warnings = mismatch_readout(1.0, 0.7, "bf16", 1.5, 100.0)
    s = mismatch_numbers(1.0, 0.7, "bf16", 1.5, 100.0)
    assert warnings == []
    assert "KL(π‖μ) = ∞ nats" in text and f"{s['kl_sampler_trainer']:.5f}" in text
    assert f"{s['stats']['mean']:+.5f}" in text and f"{s['stats']['quantiles'][0.99]:+.4f}" in text
    for name, m in s["moments"].items():
        assert f"{name:<12}{m['bias_norm']:9.4f}{m['variance']:10.4f}{m['mse']:11.4f}" in text
    assert f"{s['sampler'][0]:7.3f}" in text and text.count("∞") >= 7
    text, _ = mismatch_readout(1.0, 1.0, "fp32", 2.0, 0.0)
    assert "-0.00000" not in text.split("\n")[5]  # KL at μ = π prints as 0.00000


@pytest.mark.parametrize("kwargs, name", [
    ({"temperature": 0.0}, "temperature"), ({"temperature": -0.5}, "temperature"),
    ({"top_p": 0.0}, "top_p"), ({"top_p": 1.2}, "top_p"), ({"precision": "int8"}, "precision"),
    ({"cap": 0.5}, "cap"), ({"cap": float("nan")}, "cap"), ({"offset": float("inf")}, "offset"),
])
def test_bad_values_name_the_argument(kwargs, name):
    for fn in (mismatch_numbers, mismatch_readout, plot_mismatch):
        with pytest.raises(ValueError, match=name):
            fn(**kwargs)
    if "cap" not in kwargs:
        with pytest.raises(ValueError, match=name):
            cap_curves(**kwargs)


def test_plot_and_widget():
    import matplotlib.pyplot as plt

    axes = plot_mismatch(0.8, 0.8, "bf16", 2.0, 50.0)
    assert len(axes) == 4
    assert len(axes[0].patches) == 20  # π and μ over ten tokens
    assert any(line.get_marker() == "x" for line in axes[0].lines)  # cut tokens marked
    assert any(line.get_marker() == "^" for line in axes[1].lines)  # their ratio is ∞
    assert len(axes[2].lines) >= 8 and len(axes[3].lines) >= 8  # four curves and four current-C dots each
    plt.close("all")
    frame = mismatch_frame(1.0, 1.0, "fp32", 2.0, 0.0)
    assert len(frame.figure.axes) == 4 and frame.warnings == []
    assert not any(line.get_marker() == "^" for line in frame.figure.axes[1].lines)
    plt.close("all")
    pytest.importorskip("ipywidgets")
    box = mismatch_explorer()
    c = box.controls
    before = box.readout.value
    c["cap"].value = 4.0
    assert box.readout.value != before and "⚠" not in box.error.value
    good = box.readout.value
    for control, bad, name in (("temperature", 0.0, "temperature"), ("top_p", 0.0, "top_p")):
        c[control].value = bad
        assert "⚠" in box.error.value and name in box.error.value and "Traceback" not in box.error.value
        assert box.readout.value == good  # the last good numbers stay
        c[control].value = 0.9
        assert "⚠" not in box.error.value
        good = box.readout.value
    c["precision"].value = "bf16"
    c["offset"].value = 100.0
    assert "bf16" not in good and box.readout.value != good
    plt.close("all")


def test_top_p_above_one_gives_a_warning_line():
    """The top-p slider stops at 1: a text box wired to the same render function goes beyond it."""
    import matplotlib.pyplot as plt

    widgets = pytest.importorskip("ipywidgets")
    from rlbook.widgets._live import live_explorer

    controls = {"temperature": widgets.FloatText(value=1.0), "top_p": widgets.FloatText(value=1.0),
                "precision": widgets.Dropdown(options=["fp32", "bf16", "fp16"], value="fp32"),
                "cap": widgets.FloatText(value=2.0), "offset": widgets.FloatText(value=0.0)}
    box = live_explorer(controls, [list(controls)], mismatch_frame)
    assert box.error.value == ""
    for bad in (1.5, -0.2):
        controls["top_p"].value = bad
        assert "⚠" in box.error.value and "top_p" in box.error.value
    controls["top_p"].value = 1.0
    controls["temperature"].value = -1.0
    assert "⚠" in box.error.value and "temperature" in box.error.value
    plt.close("all")
