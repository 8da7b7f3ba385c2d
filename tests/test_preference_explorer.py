"""The preference explorer: its numbers are the library's, and agree with closed forms and enumeration."""

import itertools
import math

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from rlbook.kl_regularised import (best_of_n_kl, best_of_n_kl_bound, best_of_n_probs, kl_regularised_optimum,
                                   kl_regularised_value)
from rlbook.preferences import dpo_gradient_weight, implicit_rewards
from rlbook.widgets.preference_explorer import (PRESETS, best_of_n_kl_curve, dpo_weight_curve, plot_preference,
                                                preference_explorer, preference_frame, preference_numbers,
                                                preference_readout, preference_setting)

SETTINGS = [(0.5, 4, "graded"), (0.05, 64, "rare best"), (10.0, 1, "tied best"), (1.0, 7, "tied best")]


@pytest.mark.parametrize("beta, n, preset", SETTINGS)
def test_numbers_are_the_library_values_exactly(beta, n, preset):
    s = preference_numbers(beta, n, preset)
    ref, r = preference_setting(preset)
    assert np.array_equal(s["optimum"], kl_regularised_optimum(ref, r, beta).numpy())
    assert np.array_equal(s["best_of_n"], best_of_n_probs(ref, r, n).numpy())
    assert s["value"] == float(kl_regularised_value(ref, r, beta))
    assert s["best_of_n_kl"] == float(best_of_n_kl(ref, r, n))
    assert s["kl_bound"] == best_of_n_kl_bound(n)
    log_ratio = torch.tensor(s["optimum"]).log() - ref.log()
    c, rj = torch.tensor(s["chosen"]), torch.tensor(s["rejected"])
    zeros = torch.zeros(len(c), dtype=torch.float64)
    chosen_r, rejected_r = implicit_rewards(log_ratio[c], zeros, beta), implicit_rewards(log_ratio[rj], zeros, beta)
    assert np.array_equal(s["weight"], dpo_gradient_weight(chosen_r, rejected_r).numpy())


@pytest.mark.parametrize("beta, n, preset", SETTINGS)
def test_optimum_and_its_value_match_the_closed_form_in_numpy(beta, n, preset):
    s = preference_numbers(beta, n, preset)
    ref, r = np.array(PRESETS[preset][0]), np.array(PRESETS[preset][1])
    w = ref * np.exp(r / beta)
    optimum = w / w.sum()
    np.testing.assert_allclose(s["optimum"], optimum, rtol=1e-12)
    kl = float((optimum * np.log(optimum / ref)).sum())
    assert s["optimum_kl"] == pytest.approx(kl, rel=1e-10, abs=1e-15)
    assert s["value"] == pytest.approx(beta * math.log(w.sum()), rel=1e-12)
    # the optimum's value is its expected reward less β times its KL (Gibbs' variational principle)
    assert s["value"] == pytest.approx(s["optimum_reward"] - beta * s["optimum_kl"], rel=1e-10, abs=1e-12)
    assert s["ref_reward"] == pytest.approx(float(ref @ r), rel=1e-12)


def _best_of_n_by_enumeration(ref, r, n):
    """Enumerate every ordered N-tuple of draws; keep the first drawn among the highest rewards."""
    out = np.zeros(len(ref))
    for draws in itertools.product(range(len(ref)), repeat=n):
        best = max(r[d] for d in draws)
        out[next(d for d in draws if r[d] == best)] += np.prod(ref[list(draws)])
    return out


@pytest.mark.parametrize("preset", list(PRESETS))
@pytest.mark.parametrize("n", [1, 2, 3])
def test_best_of_n_matches_enumeration_and_stays_under_the_bound(preset, n):
    s = preference_numbers(1.0, n, preset)
    ref, r = np.array(PRESETS[preset][0]), np.array(PRESETS[preset][1])
    exact = _best_of_n_by_enumeration(ref, r, n)
    np.testing.assert_allclose(s["best_of_n"], exact, rtol=1e-12, atol=1e-15)
    kl = float((exact * np.log(exact / ref)).sum())
    assert s["best_of_n_kl"] == pytest.approx(kl, abs=1e-12)
    assert s["kl_bound"] == pytest.approx(math.log(n) - (n - 1) / n, abs=1e-15)
    assert s["best_of_n_kl"] <= s["kl_bound"] + 1e-12
    assert s["best_of_n_reward"] == pytest.approx(float(exact @ r), rel=1e-12)


def test_at_the_optimum_each_pair_is_weighted_by_its_flip_probability():
    """At π*, r̂ = r − β·log Z: the implicit-reward margin is the true margin whatever β, the
    log-ratio margin is that over β, and DPO's weight is σ(r_r − r_c)."""
    for beta in (0.05, 0.5, 10.0):
        s = preference_numbers(beta, 4, "graded")
        r = s["rewards"]
        true_margin = r[s["chosen"]] - r[s["rejected"]]
        assert np.all(true_margin > 0) and len(true_margin) == 15
        np.testing.assert_allclose(s["implicit_margin"], true_margin, rtol=1e-10)
        np.testing.assert_allclose(s["margin"], true_margin / beta, rtol=1e-10)
        np.testing.assert_allclose(s["weight"], 1.0 / (1.0 + np.exp(true_margin)), rtol=1e-10)
    # tied rewards make no preference pair: 15 − 1 pairs in "tied best"
    assert len(preference_numbers(1.0, 2, "tied best")["chosen"]) == 14


def test_dpo_weight_curve_is_a_logistic_in_beta_h():
    h = np.array([-2.0, 0.0, 0.5, 3.0])
    for beta in (0.1, 1.0, 4.0):
        np.testing.assert_allclose(dpo_weight_curve(beta, h), 1.0 / (1.0 + np.exp(beta * h)), rtol=1e-14)
    assert dpo_weight_curve(2.0, [0.0])[0] == 0.5


def test_best_of_n_curve():
    c = best_of_n_kl_curve("graded", 16)
    assert [a.shape for a in c.values()] == [(16,)] * 3
    ref, r = preference_setting("graded")
    assert abs(c["kl"][0]) < 1e-15 and c["bound"][0] == 0.0  # best-of-1 is π_ref
    for k in (2, 5, 16):
        assert c["kl"][k - 1] == float(best_of_n_kl(ref, r, k)) and c["bound"][k - 1] == best_of_n_kl_bound(k)
    assert np.all(np.diff(c["kl"]) > 0) and np.all(c["kl"] <= c["bound"] + 1e-12)


@given(st.floats(-2.0, 1.5), st.integers(1, 64), st.sampled_from(list(PRESETS)))
def test_invariants_over_the_sliders(log10_beta, n, preset):
    beta = 10.0 ** log10_beta
    s = preference_numbers(beta, n, preset)
    r = s["rewards"]
    assert s["optimum"].sum() == pytest.approx(1.0, abs=1e-12) and s["best_of_n"].sum() == pytest.approx(1.0, abs=1e-12)
    assert s["best_of_n_kl"] <= s["kl_bound"] + 1e-12
    # β·log Z lies between π_ref's expected reward and the best reward, and no policy beats it
    assert s["ref_reward"] - 1e-9 <= s["value"] <= r.max() + 1e-9
    assert s["value"] >= s["best_of_n_reward"] - beta * s["best_of_n_kl"] - 1e-9
    assert np.all((s["weight"] > 0) & (s["weight"] < 0.5))


@pytest.mark.parametrize("call, match", [
    (lambda: preference_numbers(0.0, 4), "beta"),
    (lambda: preference_numbers(-1.0, 4), "beta"),
    (lambda: preference_numbers(float("nan"), 4), "beta"),
    (lambda: preference_numbers(float("inf"), 4), "beta"),
    (lambda: preference_numbers("1", 4), "beta"),
    (lambda: preference_numbers(1.0, 0), "`n`"),
    (lambda: preference_numbers(1.0, -3), "`n`"),
    (lambda: preference_numbers(1.0, 2.5), "`n`"),
    (lambda: preference_numbers(1.0, 4, "nope"), "preset"),
    (lambda: preference_readout(0.0, 4), "beta"),
    (lambda: preference_readout(1.0, 0), "`n`"),
    (lambda: plot_preference(1.0, 1.5), "`n`"),
    (lambda: best_of_n_kl_curve("graded", 0), "n_max"),
    (lambda: dpo_weight_curve(0.0, [1.0]), "beta"),
])
def test_bad_input_names_the_argument(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_numpy_integers_are_integers():
    assert preference_numbers(1.0, np.int64(3))["n"] == 3


def test_readout_numbers():
    text, warnings = preference_readout(0.5, 4)
    s = preference_numbers(0.5, 4)
    for x in (s["optimum_reward"], s["optimum_kl"], s["value"], s["best_of_n_reward"], s["best_of_n_kl"], s["kl_bound"]):
        assert f"{x:.3f}" in text
    assert f"{s['optimum'][-1]:.3f}" in text and f"{s['best_of_n'][2]:.3f}" in text
    assert warnings == []
    # N = 1: best-of-1 is π_ref, and its KL prints as 0.000 (never −0.000)
    text1, _ = preference_readout(0.5, 1)
    assert "KL(π_N‖π_ref) = 0.000" in text1 and "-0.000" not in text1


def test_plot_and_widget():
    import matplotlib.pyplot as plt

    axes = plot_preference(0.5, 4)
    assert len(axes[0].patches) == 3 * 6 and len(axes[1].lines) >= 4 and len(axes[2].lines) >= 5
    plt.close("all")
    frame = preference_frame(0.05, 64, "rare best")  # pairs beyond the DPO panel's axis are drawn at its edge
    assert any(line.get_marker() == ">" for line in frame.figure.axes[2].lines)
    plt.close("all")
    pytest.importorskip("ipywidgets")
    box = preference_explorer()
    beta, n, preset = (box.controls[k] for k in ("beta", "n", "preset"))
    before = box.readout.value
    beta.value = 2.0
    assert box.readout.value != before and "⚠" not in box.error.value
    after_beta = box.readout.value
    n.value = 0
    assert "⚠" in box.error.value and "`n`" in box.error.value and "Traceback" not in box.error.value
    assert box.readout.value == after_beta  # the last good numbers stay
    n.value = 8
    assert "⚠" not in box.error.value and "N = 8" in box.readout.value
    preset.value = "rare best"
    assert "4.000" in box.readout.value  # the rare answer's reward
    plt.close("all")


def test_beta_at_or_below_zero_gives_a_warning_line_not_a_traceback():
    """The β slider is logarithmic and cannot reach 0: a text box wired to the same render function can."""
    import matplotlib.pyplot as plt

    widgets = pytest.importorskip("ipywidgets")
    from rlbook.widgets._live import live_explorer

    controls = {"beta": widgets.FloatText(value=0.5), "n": widgets.IntText(value=4),
                "preset": widgets.Dropdown(options=list(PRESETS), value="graded")}
    box = live_explorer(controls, [["beta", "n", "preset"]], preference_frame)
    assert box.error.value == ""
    for bad in (0.0, -1.0):
        controls["beta"].value = bad
        assert "⚠" in box.error.value and "beta" in box.error.value and "Traceback" not in box.error.value
    plt.close("all")
