"""The distillation explorer: the divergences against explicit sums over the vocabulary, the grid search's
optimum against every grid point and a finer local search, mode-covering (β = 0) against mode-seeking
(β = 1), the drawn bars and curves equal to the numbers, bad values named, a legible figure, and the widget
rebuilt by every control."""

import math

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pytest
import torch
from scipy.optimize import minimize

from rlbook.widgets import EXPLORERS, build_explorer
from rlbook.widgets.distill_explorer import (FIGSIZE, MU_GRID, SEPARATION_MAX, SIGMA_GRID, VOCAB_SIZE, distill_explorer,
                                             distill_fits, distill_frame, distill_readout, divergences, fit_student,
                                             mass_against_beta, mode_masses, plot_distill, student_logits,
                                             teacher_logits)
from rlbook.widgets._live import SCREEN_DPI, figure_png, png_size

V = VOCAB_SIZE
I = np.arange(V, dtype=float)
SETTINGS = [(6.0, 0.6, 0.0, 1.0), (6.0, 0.6, 0.3, 1.0), (6.0, 0.6, 1.0, 1.0), (8.0, 0.5, 0.45, 1.0),
            (4.0, 0.7, 0.5, 0.5), (5.0, 0.6, 0.8, 2.0), (2.5, 0.3, 0.1, 0.2)]


# ---- an independent computation: numpy, explicit sums over the V tokens ------------------------------------

def _softmax(z):
    e = np.exp(z - z.max())
    return e / e.sum()


def _teacher(d, w, tau):
    """π_T at τ: the two-bump mixture's logits written out token by token, divided by τ."""
    c1, c2 = 7 - d / 2, 7 + d / 2
    z = np.array([math.log(w * math.exp(-(i - c1) ** 2 / (2 * 0.8 ** 2)) + (1 - w) * math.exp(-(i - c2) ** 2 / (2 * 0.8 ** 2)))
                  for i in range(V)])
    return _softmax(z / tau)


def _student(mu, sigma, tau):
    return _softmax(np.array([-(i - mu) ** 2 / (2 * sigma ** 2) for i in range(V)]) / tau)


def _kl(p, q):
    return sum(p[i] * math.log(p[i] / q[i]) for i in range(V))


def _jsd(p, q, beta):
    """TRL's JSD_β with p = π_θ, q = π_T: m = β q + (1 − β) p; the end points are the two KLs."""
    if beta == 0:
        return _kl(q, p)
    if beta == 1:
        return _kl(p, q)
    m = beta * q + (1 - beta) * p
    return beta * _kl(q, m) + (1 - beta) * _kl(p, m)


def _objective(x, d, w, beta, tau):
    mu, log_sigma = x
    return _jsd(_student(mu, math.exp(log_sigma), tau), _teacher(d, w, tau), beta)


# ---- the numbers ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("d, w, beta, tau", SETTINGS)
def test_divergences_are_the_sums_over_the_vocabulary(d, w, beta, tau):
    teacher = teacher_logits(d, w)
    np.testing.assert_allclose(torch.softmax(teacher / tau, 0).numpy(), _teacher(d, w, tau), rtol=1e-12, atol=1e-15)
    for mu, sigma in ((3.0, 0.7), (7.4, 2.5), (11.0, 6.0)):
        p, q = _student(mu, sigma, tau), _teacher(d, w, tau)
        div = divergences(student_logits(mu, sigma), teacher, beta, tau)
        assert float(div["forward"]) == pytest.approx(_kl(q, p), rel=1e-10)
        assert float(div["reverse"]) == pytest.approx(_kl(p, q), rel=1e-10)
        assert float(div["jsd"]) == pytest.approx(_jsd(p, q, beta), rel=1e-9, abs=1e-14)
    # rows at once: (N, V) → (N,), each row its own
    mu, sigma = torch.tensor([3.0, 7.4], dtype=torch.float64), torch.tensor([0.7, 2.5], dtype=torch.float64)
    rows = divergences(student_logits(mu, sigma), teacher, beta, tau)
    assert rows["jsd"].shape == (2,)
    assert float(rows["jsd"][1]) == pytest.approx(_jsd(_student(7.4, 2.5, tau), _teacher(d, w, tau), beta), rel=1e-9)


@pytest.mark.parametrize("d, w, beta, tau", SETTINGS)
def test_the_fit_reports_its_own_numbers(d, w, beta, tau):
    f = fit_student(d, w, beta, tau)
    p, q = _student(f["mu"], f["sigma"], tau), _teacher(d, w, tau)
    np.testing.assert_allclose(f["probs"].numpy(), p, rtol=1e-10, atol=1e-15)
    np.testing.assert_allclose(f["teacher_probs"].numpy(), q, rtol=1e-12, atol=1e-15)
    assert f["forward"] == pytest.approx(_kl(q, p), rel=1e-10)
    assert f["reverse"] == pytest.approx(_kl(p, q), rel=1e-10)
    assert f["jsd"] == pytest.approx(_jsd(p, q, beta), rel=1e-9)
    left, right = p[I < 7].sum(), p[I > 7].sum()  # d > 0: tokens 0 … 6 are nearer c₁, 8 … 14 nearer c₂
    assert f["masses"] == pytest.approx({"left": left, "right": right, "centre": p[7]}, rel=1e-10, abs=1e-15)
    assert f["off_teacher"] == pytest.approx(p[q < 0.01].sum(), rel=1e-10, abs=1e-15)
    # the three fits of the explorer, each with its JSD at the chosen β
    fits = distill_fits(d, w, beta, tau)
    for name, b in (("chosen", beta), ("forward", 0.0), ("reverse", 1.0)):
        g = fits[name]
        assert (g["mu"], g["sigma"]) == tuple(fit_student(d, w, b, tau)[k] for k in ("mu", "sigma"))
        assert g["jsd_chosen"] == pytest.approx(_jsd(_student(g["mu"], g["sigma"], tau), q, beta), rel=1e-9)
    assert fits["teacher"]["modes"] == (7 - d / 2, 7 + d / 2)


def test_the_end_points_of_the_jsd_are_the_two_kls_and_the_middle_is_bounded_by_log_2():
    teacher = teacher_logits(6.0, 0.6)
    logits = student_logits(torch.tensor([2.0, 7.0, 12.0]), torch.tensor([0.5, 3.0, 1.0]))
    for tau in (0.5, 1.0, 2.0):
        assert torch.equal(divergences(logits, teacher, 0.0, tau)["jsd"], divergences(logits, teacher, 0.5, tau)["forward"])
        assert torch.equal(divergences(logits, teacher, 1.0, tau)["jsd"], divergences(logits, teacher, 0.5, tau)["reverse"])
        assert (divergences(logits, teacher, 0.5, tau)["jsd"] <= math.log(2)).all()


def test_mode_masses_by_hand():
    p = torch.arange(1.0, V + 1, dtype=torch.float64)
    p = p / p.sum()  # 1/120 … 15/120
    assert mode_masses(p, 6.0) == pytest.approx({"left": 28 / 120, "centre": 8 / 120, "right": 84 / 120})
    assert mode_masses(p, 0.5) == mode_masses(p, SEPARATION_MAX)  # any d > 0: the same split at token 7
    assert mode_masses(p, 0.0) == pytest.approx({"left": 0.0, "centre": 1.0, "right": 0.0})  # one mode


def test_one_mode_is_fitted_exactly_by_every_divergence():
    """d = 0: the teacher is one discretised Gaussian of width 0.8 at token 7, a member of the student's family."""
    for beta in (0.0, 0.5, 1.0):
        for tau in (0.5, 1.0, 2.0):
            f = fit_student(0.0, 0.6, beta, tau)
            assert f["mu"] == pytest.approx(7.0, abs=1e-9) and f["sigma"] == pytest.approx(0.8, abs=2e-3)
            assert f["forward"] < 1e-5 and f["reverse"] < 1e-5  # σ on a grid 0.3 % apart


# ---- the grid search -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("d, w, beta, tau", SETTINGS)
def test_the_fit_is_no_worse_than_any_grid_point_nor_a_finer_local_search(d, w, beta, tau):
    f = fit_student(d, w, beta, tau)
    q = _teacher(d, w, tau)
    # every coarse grid point, scored independently (numpy, vectorised over the grid)
    mu, sigma = np.meshgrid(MU_GRID, SIGMA_GRID, indexing="ij")
    z = -(I - mu[..., None]) ** 2 / (2 * sigma[..., None] ** 2) / tau
    log_p = z - np.logaddexp.reduce(z, axis=-1, keepdims=True)  # in logs: p underflows at narrow σ
    p, log_q = np.exp(log_p), np.log(q)
    if beta == 0:
        grid = (q * (log_q - log_p)).sum(-1)
    elif beta == 1:
        grid = (p * (log_p - log_q)).sum(-1)
    else:
        log_m = np.logaddexp(math.log(beta) + log_q, math.log1p(-beta) + log_p)
        grid = beta * (q * (log_q - log_m)).sum(-1) + (1 - beta) * (p * (log_p - log_m)).sum(-1)
    assert np.isfinite(grid).all()
    assert f["jsd"] <= grid.min() + 1e-12
    # Nelder–Mead in (μ, log σ) from the fit finds less than 1e-5 nats more
    start = [f["mu"], math.log(f["sigma"])]
    local = minimize(_objective, start, args=(d, w, beta, tau), method="Nelder-Mead",
                     options={"xatol": 1e-9, "fatol": 1e-14, "maxiter": 4000})
    assert f["jsd"] - local.fun < 1e-5
    assert abs(local.x[0] - f["mu"]) < 0.05  # ... and stays beside it: the grid found the right basin


def test_the_fit_is_deterministic_and_ties_go_to_the_left_mode():
    from rlbook.widgets import distill_explorer as de

    first = fit_student(8.0, 0.5, 1.0, 1.0)
    de._fit.cache_clear()
    again = fit_student(8.0, 0.5, 1.0, 1.0)
    assert (first["mu"], first["sigma"]) == (again["mu"], again["sigma"])
    # w = ½: both modes fit equally well under the reverse KL; the smaller μ is taken, at every β that seeks
    assert first["mu"] == pytest.approx(3.0, abs=0.01) and first["masses"]["left"] > 0.99
    curve = mass_against_beta(8.0, 0.5, 1.0)
    assert (curve["right"][curve["beta"] > 0.6] < 0.01).all()


# ---- mode-covering against mode-seeking ------------------------------------------------------------------------

@pytest.mark.parametrize("d", [6.0, 7.0, 8.0])
@pytest.mark.parametrize("w", [0.4, 0.5, 0.6])
def test_reverse_kl_seeks_a_mode_and_forward_kl_covers_both(d, w):
    seek, cover = fit_student(d, w, 1.0, 1.0), fit_student(d, w, 0.0, 1.0)
    heavy = "left" if w >= 0.5 else "right"
    # β = 1 (reverse KL): more than 0.9 of the student on one mode, the heavier one, nothing off the teacher
    assert seek["masses"][heavy] > 0.9
    assert seek["off_teacher"] < 0.01
    c1, c2 = 7 - d / 2, 7 + d / 2
    assert seek["mu"] == pytest.approx(c1 if heavy == "left" else c2, abs=0.05)
    # β = 0 (forward KL): more than 0.25 on each mode, and mass in the valley where the teacher has almost none
    assert cover["masses"]["left"] > 0.25 and cover["masses"]["right"] > 0.25
    assert cover["off_teacher"] > 0.15
    assert c1 < cover["mu"] < c2 and cover["sigma"] > 2.5
    # each fit is best at its own divergence
    assert cover["forward"] < seek["forward"] and seek["reverse"] < cover["reverse"]


def test_the_fit_jumps_from_covering_to_seeking_once_as_beta_grows():
    curve = mass_against_beta(6.0, 0.6, 1.0)
    seeking = np.maximum(curve["left"], curve["right"]) > 0.9
    assert not seeking[0] and seeking[-1]
    k = int(np.argmax(seeking))
    assert seeking[k:].all() and not seeking[:k].any()  # one switch
    # at the switch the two basins tie: just before it the covering fit, just after it the seeking one
    assert 0.2 < curve["beta"][k] < 0.8
    for b, key in ((0.0, "left"), (1.0, "left"), (0.0, "right")):
        assert curve[key][int(b * (len(curve["beta"]) - 1))] == fit_student(6.0, 0.6, b, 1.0)["masses"][key]


def test_a_high_temperature_merges_the_modes():
    """τ = 3 flattens the teacher's valley: the reverse KL's fit then covers both modes too."""
    hot = fit_student(6.0, 0.6, 1.0, 3.0)
    assert hot["masses"]["left"] > 0.25 and hot["masses"]["right"] > 0.25
    assert fit_student(6.0, 0.6, 1.0, 1.0)["masses"]["left"] > 0.99


# ---- the figure and the readout ---------------------------------------------------------------------------------

def test_the_bars_and_lines_drawn_are_the_numbers():
    import matplotlib.pyplot as plt

    for args in ((6.0, 0.6, 0.3, 1.0), (8.0, 0.5, 0.9, 0.7)):
        left, right = plot_distill(*args)
        fits = distill_fits(*args)
        heights = np.array([p.get_height() for p in left.patches[:2 * V]])
        np.testing.assert_array_equal(heights[:V], fits["teacher"]["probs"].numpy())
        np.testing.assert_array_equal(heights[V:], fits["chosen"]["probs"].numpy())
        np.testing.assert_array_equal(left.lines[0].get_ydata(), fits["forward"]["probs"].numpy())
        np.testing.assert_array_equal(left.lines[1].get_ydata(), fits["reverse"]["probs"].numpy())
        curve = mass_against_beta(args[0], args[1], args[3])
        for line, key in zip(right.lines[:3], ("left", "right", "off_teacher")):
            np.testing.assert_array_equal(line.get_ydata(), curve[key])
        assert right.lines[3].get_xdata()[0] == args[2]  # the chosen β, marked
        plt.close("all")


def test_readout_and_warnings():
    text, warnings = distill_readout(6.0, 0.6, 0.3, 1.0)
    fits = distill_fits(6.0, 0.6, 0.3, 1.0)
    assert warnings == []
    assert "modes at tokens 4 and 10 (weights 0.60, 0.40)" in text
    for name, label in (("chosen", "β = 0.30 (chosen)"), ("forward", "β = 0 (forward)"), ("reverse", "β = 1 (reverse)")):
        f = fits[name]
        row = next(line for line in text.splitlines() if line.startswith(label))
        assert f"{f['mu']:6.2f}{f['sigma']:7.2f}{f['forward']:9.4f}{f['reverse']:9.4f}{f['jsd_chosen']:9.4f}" in row
        assert f"{f['masses']['left']:8.3f}{f['masses']['centre']:7.3f}{f['masses']['right']:8.3f}" in row
    assert "KL(T‖θ)" in text and "KL(θ‖T)" in text and "JSD_β" in text
    lines = text.splitlines()
    assert len({len(line) for line in lines[2:]}) == 1  # the table's rows line up
    assert "-0.000" not in distill_readout(0.0, 0.6, 0.5, 1.0)[0]
    # the readout follows every input
    for other in ((6.0, 0.6, 0.7, 1.0), (7.0, 0.6, 0.3, 1.0), (6.0, 0.5, 0.3, 1.0), (6.0, 0.6, 0.3, 1.5)):
        assert distill_readout(*other)[0] != text, other
    _, warnings = distill_readout(0.0, 0.6, 0.3, 1.0)
    assert len(warnings) == 1 and "d = 0" in warnings[0]
    _, warnings = distill_readout(8.0, 0.5, 1.0, 1.0)
    assert len(warnings) == 1 and "w = ½" in warnings[0]
    assert distill_readout(8.0, 0.5, 0.0, 1.0)[1] == []  # covering both: nothing to choose between


BAD = [({"beta": -0.1}, "beta"), ({"beta": 1.5}, "beta"), ({"beta": float("nan")}, "beta"), ({"beta": True}, "beta"),
       ({"beta": "1"}, "beta"), ({"temperature": 0.0}, "temperature"), ({"temperature": -1.0}, "temperature"),
       ({"temperature": float("inf")}, "temperature"), ({"separation": -0.5}, "separation"),
       ({"separation": SEPARATION_MAX + 0.5}, "separation"), ({"separation": float("nan")}, "separation"),
       ({"weight": 0.0}, "weight"), ({"weight": 1.0}, "weight"), ({"weight": 1.2}, "weight")]


@pytest.mark.parametrize("kwargs, name", BAD)
def test_bad_values_name_the_argument(kwargs, name):
    import matplotlib.pyplot as plt

    base = {"separation": 6.0, "weight": 0.6, "beta": 0.3, "temperature": 1.0}
    for fn in (fit_student, distill_fits, distill_readout, plot_distill, distill_frame):
        with pytest.raises(ValueError, match=f"`{name}`"):
            fn(**{**base, **kwargs})
    assert plt.get_fignums() == []  # checked before any figure is made
    if name in ("separation", "weight"):
        with pytest.raises(ValueError, match=f"`{name}`"):
            teacher_logits(**{"separation": 6.0, "weight": 0.6, **kwargs})
    if name in ("beta", "temperature"):
        with pytest.raises(ValueError, match=f"`{name}`"):
            divergences(student_logits(7.0, 1.0), teacher_logits(), **{"beta": 0.3, "temperature": 1.0, **kwargs})
    if name != "beta":
        with pytest.raises(ValueError, match=f"`{name}`"):
            mass_against_beta(**{k: v for k, v in {**base, **kwargs}.items() if k != "beta"})


def test_other_bad_inputs_name_the_argument():
    with pytest.raises(ValueError, match="`sigma`"):
        student_logits(7.0, 0.0)
    with pytest.raises(ValueError, match="`mu`"):
        student_logits(float("nan"), 1.0)
    with pytest.raises(ValueError, match="`probs`"):
        mode_masses(torch.ones(3) / 3, 6.0)
    with pytest.raises(ValueError, match="`separation`"):
        mode_masses(torch.ones(V) / V, 9.0)
    with pytest.raises(ValueError, match="`num`"):
        mass_against_beta(num=1)
    with pytest.raises(ValueError, match="`axes`"):
        plot_distill(axes=[None])
    # the message the widget shows names the slider's symbol too
    with pytest.raises(ValueError, match="`temperature` \\(τ\\)"):
        fit_student(temperature=0.0)


def test_the_figure_is_legible_at_screen_size():
    """At most 8.4 in (688 px) wide at 80 dpi, and no text under 9 pt."""
    from matplotlib.text import Text

    assert FIGSIZE[0] <= 8.4
    for args in ((6.0, 0.6, 0.3, 1.0), (0.0, 0.5, 1.0, 2.0), (8.0, 0.95, 0.5, 0.05)):
        fig = distill_frame(*args).figure
        fig.canvas.draw()
        small = [(t.get_text(), t.get_fontsize()) for t in fig.findobj(Text)
                 if t.get_text().strip() and t.get_visible() and t.get_fontsize() < 9]
        assert small == []
        width, _ = png_size(figure_png(fig, dpi=SCREEN_DPI))
        assert width <= 688


def test_the_widget_rebuilds_on_each_control(monkeypatch):
    """Every control redraws: new numbers and a new figure (the PNG bytes shown differ); τ = 0 is a "⚠" line."""
    import matplotlib.pyplot as plt

    pytest.importorskip("ipywidgets")
    from rlbook.widgets import _live

    assert EXPLORERS["distill"] == "rlbook.widgets.distill_explorer:distill_explorer"
    shown = []
    monkeypatch.setattr(_live, "shown_image", lambda png, dpi: shown.append(png) or "image")
    monkeypatch.setattr("IPython.display.display", lambda *a, **k: None)
    box = distill_explorer()
    c = box.controls
    assert set(c) == {"beta", "separation", "weight", "temperature"}
    assert [c[k].description for k in ("beta", "temperature")] == ["β (0 forward, 1 reverse KL)", "τ"]
    assert box.error.value == "" and "β = 0.30 (chosen)" in box.readout.value and len(shown) == 1
    for control, value in (("beta", 0.45), ("separation", 7.0), ("weight", 0.7), ("temperature", 0.8)):
        before, figures = box.readout.value, len(shown)
        c[control].value = value
        assert box.readout.value != before, control
        assert len(shown) == figures + 1 and shown[-1] != shown[-2], control
        assert "⚠" not in box.error.value, control
    before = box.readout.value
    c["temperature"].value = 0.0
    assert "⚠" in box.error.value and "temperature" in box.error.value and "Traceback" not in box.error.value
    assert box.readout.value == before  # the last good numbers stay
    c["temperature"].value = 1.0
    assert box.error.value == ""
    c["separation"].value = 0.0
    assert "⚠" in box.error.value and "d = 0" in box.error.value
    assert type(build_explorer("distill")).__name__ == "VBox"
    plt.close("all")
