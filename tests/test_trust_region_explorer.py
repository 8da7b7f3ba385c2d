"""The trust-region explorer's numbers against autograd, enumeration and closed forms."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlbook.kl import categorical_kl
from rlbook.widgets.trust_region_explorer import (DEFAULT_REWARDS, plot_trust_region, policy_logits,
                                                  trust_region_explorer, trust_region_geometry,
                                                  trust_region_readout)

POINTS = [((-1.0, 1.0), 1.0), ((0.0, 0.0), 1.0), ((0.7, -2.0), 0.5), ((-0.3, 1.5), 3.0), ((2.0, 2.5), 1.7)]
R = np.array(DEFAULT_REWARDS)


def _kl_at(theta_old, scale):
    """θ ↦ KL(π_old ‖ π_θ), built here from the logits (independent of the module's closures)."""
    old = policy_logits(torch.tensor(theta_old, dtype=torch.float64), scale).detach()
    return lambda theta: categorical_kl(old, policy_logits(theta, scale))


def _probs(theta, scale):
    z = np.array([scale * theta[0], theta[1], 0.0])
    e = np.exp(z - z.max())
    return e / e.sum()


@pytest.mark.parametrize("theta_old, scale", POINTS)
def test_fisher_is_kl_hessian_and_score_outer_product(theta_old, scale):
    geo = trust_region_geometry(theta_old, 0.1, scale)
    th0 = torch.tensor(theta_old, dtype=torch.float64)
    hess = torch.autograd.functional.hessian(_kl_at(theta_old, scale), th0)
    np.testing.assert_allclose(geo["fisher"], hess.numpy(), atol=1e-12)
    # E_{a∼π_old}[∇log π(a) ∇log π(a)ᵀ] by enumerating the three actions, scores by autograd
    theta = th0.clone().requires_grad_(True)
    log_probs = torch.log_softmax(policy_logits(theta, scale), -1)
    scores = torch.stack([torch.autograd.grad(log_probs[a], theta, retain_graph=True)[0] for a in range(3)])
    p = log_probs.exp().detach()
    enumerated = (p[:, None, None] * scores[:, :, None] * scores[:, None, :]).sum(0)
    np.testing.assert_allclose(geo["fisher"], enumerated.numpy(), atol=1e-12)
    # closed form: F = Cᵀ(diag π − ππᵀ)C with C = ∂z/∂θ
    pn = _probs(theta_old, scale)
    C = np.array([[scale, 0.0], [0.0, 1.0], [0.0, 0.0]])
    np.testing.assert_allclose(geo["fisher"], C.T @ (np.diag(pn) - np.outer(pn, pn)) @ C, atol=1e-12)
    np.testing.assert_allclose(geo["probs_old"], pn, atol=1e-14)


@pytest.mark.parametrize("theta_old, scale", POINTS)
def test_gradient_is_policy_gradient(theta_old, scale):
    """On a bandit ∇L(θ_old) = ∇J(θ_old) = Cᵀ(π ⊙ (r − J))."""
    geo = trust_region_geometry(theta_old, 0.1, scale)
    p = _probs(theta_old, scale)
    C = np.array([[scale, 0.0], [0.0, 1.0], [0.0, 0.0]])
    np.testing.assert_allclose(geo["g"], C.T @ (p * (R - p @ R)), atol=1e-14)
    np.testing.assert_allclose(geo["advantages"], R - p @ R, atol=1e-14)


@pytest.mark.parametrize("theta_old, scale", POINTS)
@pytest.mark.parametrize("max_kl", [0.01, 0.2, 0.9])
def test_steps_on_the_ellipse_and_natural_direction(theta_old, scale, max_kl):
    geo = trust_region_geometry(theta_old, max_kl, scale)
    F, g, nat, van = geo["fisher"], geo["g"], geo["natural"], geo["vanilla"]
    np.testing.assert_allclose(0.5 * nat @ F @ nat, max_kl, rtol=1e-10)
    np.testing.assert_allclose(0.5 * van @ F @ van, max_kl, rtol=1e-10)
    np.testing.assert_allclose(geo["quad_kl"], [max_kl, max_kl], rtol=1e-10)
    (a, b), (c, d) = F
    f_inv_g = np.array([d * g[0] - b * g[1], -c * g[0] + a * g[1]]) / (a * d - b * c)  # 2×2 inverse
    np.testing.assert_allclose(nat, math.sqrt(2 * max_kl / (g @ f_inv_g)) * f_inv_g, rtol=1e-9)
    # vanilla: parallel to g with positive factor
    assert abs(van[0] * g[1] - van[1] * g[0]) < 1e-12 and van @ g > 0
    # the natural step maximises gᵀs on the ellipse: never below the vanilla one
    assert geo["predicted"][0] >= geo["predicted"][1] - 1e-12
    np.testing.assert_allclose(geo["predicted"], [g @ nat, g @ van], rtol=1e-12)


@pytest.mark.parametrize("scale", [0.25, 1.0, 4.0])
def test_natural_step_is_reparameterisation_invariant(scale):
    """In logits the natural direction is (r₁ − r₃, r₂ − r₃) whatever π_old and κ; the vanilla one
    is not."""
    z_old = np.array([-1.0, 1.0])
    geo = trust_region_geometry((z_old[0] / scale, z_old[1]), 0.2, scale)
    dz = geo["natural"] * [scale, 1.0]
    expected = R[:2] - R[2]
    np.testing.assert_allclose(dz / np.linalg.norm(dz), expected / np.linalg.norm(expected), atol=1e-10)
    ref = trust_region_geometry(tuple(z_old), 0.2, 1.0)
    np.testing.assert_allclose(dz, ref["natural"], atol=1e-10)
    np.testing.assert_allclose(geo["exact_kl"][0], ref["exact_kl"][0], atol=1e-12)
    if scale != 1.0:
        assert np.abs(geo["vanilla"] * [scale, 1.0] - ref["vanilla"]).max() > 0.1


@pytest.mark.parametrize("theta_old, scale", POINTS)
def test_exact_kl_approaches_delta_for_small_delta(theta_old, scale):
    errors = []
    for max_kl in (1e-2, 1e-4, 1e-6):
        geo = trust_region_geometry(theta_old, max_kl, scale)
        errors.append(np.abs(geo["exact_kl"] / max_kl - 1).max())
    assert errors[1] < 0.02 and errors[2] < 2e-3
    assert errors[2] < errors[1] < errors[0]  # the cubic term fades like √δ
    # steps shrink like √δ
    small, smaller = trust_region_geometry(theta_old, 1e-4, scale), trust_region_geometry(theta_old, 1e-6, scale)
    np.testing.assert_allclose(smaller["natural"], small["natural"] / 10, rtol=1e-9)


@pytest.mark.parametrize("theta_old, scale", POINTS)
@pytest.mark.parametrize("max_kl", [0.05, 0.2, 1.0])
def test_line_search_accepts_a_safe_improving_point(theta_old, scale, max_kl):
    geo = trust_region_geometry(theta_old, max_kl, scale)
    frac = float(geo["accepted_fraction"])
    assert frac > 0
    np.testing.assert_allclose(geo["accepted"], geo["theta_old"] + frac * geo["natural"], atol=1e-12)
    assert geo["accepted_kl"] <= max_kl and geo["accepted_improvement"] > 0
    # the tried points are the full step, then halvings, up to the accepted one
    k = round(math.log(frac, 0.5))
    assert len(geo["tried"]) == k + 1
    np.testing.assert_allclose(geo["tried"], geo["theta_old"] + geo["tried_fractions"][:, None] * geo["natural"])
    # every rejected try broke the true KL (on a bandit the surrogate is J − J_old: a natural step improves it)
    kl = _kl_at(tuple(geo["theta_old"]), scale)
    for point in geo["tried"][:-1]:
        assert float(kl(torch.tensor(point))) > max_kl
    # the accepted KL and improvement are the true ones
    np.testing.assert_allclose(geo["accepted_kl"], float(kl(torch.tensor(geo["accepted"]))), atol=1e-14)
    p_new = _probs(geo["accepted"], scale)
    np.testing.assert_allclose(geo["accepted_improvement"], p_new @ R - geo["probs_old"] @ R, atol=1e-12)


@settings(max_examples=30, deadline=None)
@given(z1=st.floats(-4, 4), z2=st.floats(-4, 4), scale=st.floats(0.25, 4), max_kl=st.floats(0.001, 1.0))
def test_properties_over_the_slider_ranges(z1, z2, scale, max_kl):
    geo = trust_region_geometry((z1 / scale, z2), max_kl, scale)
    np.testing.assert_allclose(geo["quad_kl"], max_kl, rtol=1e-8)
    assert geo["accepted_kl"] <= max_kl + 1e-15
    assert geo["accepted_fraction"] == 0 or geo["accepted_improvement"] > 0
    improvement = [_probs(geo["theta_old"] + s, scale) @ R - geo["probs_old"] @ R
                   for s in (geo["natural"], geo["vanilla"])]
    np.testing.assert_allclose(geo["improvement"], improvement, atol=1e-12)


def test_equal_rewards_give_no_step():
    geo = trust_region_geometry((0.3, -0.2), 0.1, 1.0, rewards=(1.0, 1.0, 1.0))
    assert not geo["g"].any() and not geo["natural"].any() and not geo["vanilla"].any()
    assert geo["accepted_fraction"] == 0 and np.all(geo["accepted"] == geo["theta_old"])
    _, warnings = trust_region_readout((0.3, -0.2), 0.1, 1.0, rewards=(1.0, 1.0, 1.0))
    assert len(warnings) == 1 and "g = 0" in warnings[0]


@pytest.mark.parametrize("kw, name", [
    (dict(theta_old=(1.0, 2.0, 3.0)), "theta_old"), (dict(theta_old=(np.nan, 0.0)), "theta_old"),
    (dict(max_kl=0.0), "max_kl"), (dict(max_kl=-0.1), "max_kl"), (dict(max_kl=math.inf), "max_kl"),
    (dict(scale=0.0), "scale"), (dict(scale=-1.0), "scale"), (dict(rewards=(1.0, 0.0)), "rewards"),
    (dict(backtrack_coef=1.0), "backtrack_coef"), (dict(max_backtracks=0), "max_backtracks"),
    (dict(accept_ratio=-0.5), "accept_ratio"),
])
def test_errors_name_argument(kw, name):
    args = dict(theta_old=(0.0, 0.0), max_kl=0.1) | kw
    with pytest.raises(ValueError, match=f"`{name}`"):
        trust_region_geometry(**args)


def test_delta_zero_explains_itself():
    with pytest.raises(ValueError, match="δ = 0.*no step is possible"):
        trust_region_readout((0.0, 0.0), 0.0)
    with pytest.raises(ValueError, match="`theta`"):
        policy_logits(torch.zeros(3))


def test_readout_numbers():
    readout, warnings = trust_region_readout((-1.0, 1.0), 0.2, 1.0)
    geo = trust_region_geometry((-1.0, 1.0), 0.2, 1.0)
    p = _probs((-1.0, 1.0), 1.0)
    assert f"π_old = ({p[0]:.3f}, {p[1]:.3f}, {p[2]:.3f})" in readout
    assert f"F = [[{geo['fisher'][0, 0]:.4f}, " in readout
    assert "½sᵀFs = 0.2000" in readout and f"exact KL = {geo['exact_kl'][0]:.4f}" in readout
    # here the full natural step overshoots (exact KL ≈ 0.25 > δ): the line search halves it once
    assert 0.24 < geo["exact_kl"][0] < 0.26
    assert "tried fractions 1, 0.5: accepted fraction 0.5" in readout
    assert warnings == []
    _, warnings = trust_region_readout((4.0, -4.0), 0.2, 1.0)  # π_old(a₂) ≈ 6e-6: nearly deterministic
    assert len(warnings) == 1 and "nearly deterministic" in warnings[0] and "action 2" in warnings[0]


def test_plot_and_widget_construct():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ax = plot_trust_region((-1.0, 1.0), 0.2, 2.0)
    assert ax.get_xlabel() == "θ₁" and "δ = 0.2" in ax.get_title()
    plt.close("all")
    with pytest.raises(ValueError, match="`num`"):
        plot_trust_region(num=3)
    pytest.importorskip("ipywidgets")
    box = trust_region_explorer()
    assert set(box.controls) == {"max_kl", "scale", "z1", "z2"}
    assert "½sᵀFs = 0.2000" in box.readout.value and box.error.value == ""
    first = box.readout.value
    box.controls["max_kl"].value = 0.23  # the first slider changes the numbers
    assert "½sᵀFs = 0.2300" in box.readout.value and box.readout.value != first
    box.controls["scale"].value = 2.0  # a new parameterisation: θ_old = (z₁/κ, z₂), same policy
    assert "θ_old = (-0.500, +1.000)" in box.readout.value and "π_old = (0.090, 0.665, 0.245)" in box.readout.value
    before = box.readout.value
    box.controls["max_kl"].value = 0.0  # the nonsense value: a message, the last figure stays
    assert box.error.value.count("⚠") == 1 and "δ = 0" in box.error.value and box.readout.value == before
    box.controls["max_kl"].value = 0.2
    assert box.error.value == ""
    plt.close("all")
