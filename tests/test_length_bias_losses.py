"""Length and preference training: R-DPO (Park et al. 2024), SimPO's length normalisation (Meng et al.
2024) and KTO (Ethayarajh et al. 2024), checked against hand formulas, autograd and hand-computed values."""

import math

import pytest
import torch

import rlbook as rl

DT = torch.float64


def _rows(seed, n=6):
    g = torch.Generator().manual_seed(seed)
    return [-8 * torch.rand(n, dtype=DT, generator=g) for _ in range(4)]


def test_rdpo_with_alpha_zero_is_dpo_and_otherwise_its_formula():
    pc, pr, rc, rr = _rows(0)
    lc = torch.tensor([3.0, 9, 5, 1, 7, 4], dtype=DT)
    lr = torch.tensor([6.0, 2, 5, 8, 1, 4], dtype=DT)
    beta = 0.3
    assert torch.equal(rl.rdpo_loss(pc, pr, rc, rr, lc, lr, beta, 0.0), rl.dpo_loss(pc, pr, rc, rr, beta))
    alpha = 0.05
    h = (pc - rc) - (pr - rr)
    want = torch.tensor([math.log1p(math.exp(-(beta * float(h[i]) + alpha * float(lc[i] - lr[i])))) for i in range(6)],
                        dtype=DT)
    got = rl.rdpo_loss(pc, pr, rc, rr, lc, lr, beta, alpha)
    assert torch.allclose(got, want, rtol=1e-12, atol=1e-14)
    # power: the length term changes every pair whose lengths differ, and only those
    differ = lc != lr
    assert (got - rl.dpo_loss(pc, pr, rc, rr, beta)).abs()[differ].min() > 1e-4
    assert torch.allclose(got[~differ], rl.dpo_loss(pc, pr, rc, rr, beta)[~differ])
    # a longer chosen answer is credited with part of the preference (a smaller loss), a shorter one not
    assert (got[lc > lr] < rl.dpo_loss(pc, pr, rc, rr, beta)[lc > lr]).all()
    assert (got[lc < lr] > rl.dpo_loss(pc, pr, rc, rr, beta)[lc < lr]).all()


def test_rdpo_gradient_is_dpo_weight_shifted_by_the_length_gap():
    pc, pr, rc, rr = _rows(1)
    pc.requires_grad_(True)
    pr.requires_grad_(True)
    lc, lr = torch.tensor([2.0, 5, 9, 3, 3, 7], dtype=DT), torch.tensor([4.0, 5, 1, 8, 2, 7], dtype=DT)
    beta, alpha = 0.2, 0.1
    rl.rdpo_loss(pc, pr, rc, rr, lc, lr, beta, alpha).sum().backward()
    h = ((pc - rc) - (pr - rr)).detach()
    weight = torch.sigmoid(-beta * h - alpha * (lc - lr))
    assert torch.allclose(pc.grad, -beta * weight, atol=1e-15)
    assert torch.allclose(pr.grad, beta * weight, atol=1e-15)


def test_rdpo_errors_name_the_argument():
    z, one = torch.zeros(2, dtype=DT), torch.ones(2, dtype=DT)
    with pytest.raises(ValueError, match="alpha"):
        rl.rdpo_loss(z, z, z, z, one, one, 0.1, -0.01)
    with pytest.raises(ValueError, match="beta"):
        rl.rdpo_loss(z, z, z, z, one, one, 0.0, 0.1)
    with pytest.raises(ValueError, match="chosen_lengths"):
        rl.rdpo_loss(z, z, z, z, torch.tensor([1.0, 0.0]), one, 0.1, 0.1)
    with pytest.raises(ValueError, match="rejected_lengths"):
        rl.rdpo_loss(z, z, z, z, one, torch.ones(3), 0.1, 0.1)
    with pytest.raises(ValueError, match="ref_rejected_log_probs"):
        rl.rdpo_loss(z, z, z, torch.zeros(3), one, one, 0.1, 0.1)


def test_simpo_gradient_by_autograd_equals_the_hand_formula():
    """∂/∂(log π_c) of −log σ(β·(c/|y_c| − r/|y_r|) − γ) is −(β/|y_c|)·σ(−m), m the argument; +(β/|y_r|)·σ(−m) for r."""
    c, r, _, _ = _rows(2)
    c.requires_grad_(True)
    r.requires_grad_(True)
    lc, lr = torch.tensor([3.0, 4, 5, 6, 7, 2], dtype=DT), torch.tensor([2.0, 8, 5, 1, 3, 9], dtype=DT)
    beta, gamma = 2.5, 0.7
    rl.simpo_loss(c, r, beta, gamma, lc, lr).sum().backward()
    m = (beta * (c / lc - r / lr) - gamma).detach()
    assert torch.allclose(c.grad, -(beta / lc) * torch.sigmoid(-m), atol=1e-15)
    assert torch.allclose(r.grad, (beta / lr) * torch.sigmoid(-m), atol=1e-15)


def test_duplicating_every_token_doubles_dpo_reward_but_not_simpo_reward():
    """Per-token log-probs of one answer, and the same answer with every token written twice (same
    per-token log-probs): DPO's implicit reward (a sum of per-token log-ratios) doubles; SimPO's
    (the per-token average log-prob, times β) and its loss are unchanged."""
    g = torch.Generator().manual_seed(3)
    tokens, ref_tokens = -3 * torch.rand(7, dtype=DT, generator=g), -3 * torch.rand(7, dtype=DT, generator=g)
    doubled, ref_doubled = tokens.repeat_interleave(2), ref_tokens.repeat_interleave(2)
    beta = 0.1
    once = rl.implicit_rewards(tokens.sum()[None], ref_tokens.sum()[None], beta)
    twice = rl.implicit_rewards(doubled.sum()[None], ref_doubled.sum()[None], beta)
    assert abs(float(once)) > 1e-3  # power: a non-zero reward to double
    assert torch.allclose(twice, 2 * once, rtol=1e-14)
    simpo_once, simpo_twice = beta * tokens.sum() / 7, beta * doubled.sum() / 14
    assert torch.allclose(simpo_once, simpo_twice, rtol=1e-14)
    other = torch.tensor([-9.0], dtype=DT)
    assert torch.allclose(rl.simpo_loss(tokens.sum()[None], other, 2.0, 0.5, torch.tensor([7.0]), torch.tensor([4.0])),
                          rl.simpo_loss(doubled.sum()[None], other, 2.0, 0.5, torch.tensor([14.0]), torch.tensor([4.0])),
                          rtol=1e-14)
    # while DPO's pair loss does change when the chosen answer is doubled
    z = torch.zeros(1, dtype=DT)
    assert abs(float(rl.dpo_loss(tokens.sum()[None], z, ref_tokens.sum()[None], z, 1.0)
                     - rl.dpo_loss(doubled.sum()[None], z, ref_doubled.sum()[None], z, 1.0))) > 1e-3


def test_kto_value_on_a_hand_computed_example():
    """β = 0.5, z₀ = 0.4, λ_D = 1, λ_U = 1.5. Desirable, ρ = 2.4: 1 − σ(1) = 0.2689414213699951.
    Undesirable, ρ = −1.6: 1.5 − 1.5·σ(1) = 0.4034121320549926. Undesirable, ρ = 2.4: 1.5 − 1.5·σ(−1)
    = 1.5·σ(1) = 1.0965878679450074."""
    policy = torch.tensor([-1.0, -5.0, -2.0], dtype=DT)
    ref = torch.tensor([-3.4, -3.4, -4.4], dtype=DT)  # ρ = 2.4, −1.6, 2.4
    got = rl.kto_loss(policy, ref, torch.tensor([True, False, False]), 0.4, 0.5, desirable_weight=1.0, undesirable_weight=1.5)
    want = torch.tensor([0.2689414213699951, 0.4034121320549927, 1.0965878679450073], dtype=DT)
    assert torch.allclose(got, want, rtol=1e-12)
    # the reference point matters: at z₀ = 0 the first example's loss is 1 − σ(1.2)
    assert float(rl.kto_loss(policy, ref, torch.tensor([True, False, False]), 0.0, 0.5)[0]) == pytest.approx(
        1 - 1 / (1 + math.exp(-1.2)), rel=1e-12)


def test_kto_gradient_and_no_gradient_through_the_reference_point():
    policy = torch.tensor([-1.0, -5.0], dtype=DT, requires_grad=True)
    ref = torch.tensor([-3.0, -4.0], dtype=DT)
    z0 = torch.tensor(0.3, dtype=DT, requires_grad=True)
    beta, lam_d, lam_u = 0.7, 2.0, 0.5
    rl.kto_loss(policy, ref, torch.tensor([True, False]), z0, beta, lam_d, lam_u).sum().backward()
    rho = (policy - ref).detach()
    s_d, s_u = torch.sigmoid(beta * (rho[0] - 0.3)), torch.sigmoid(beta * (0.3 - rho[1]))
    assert float(policy.grad[0]) == pytest.approx(float(-beta * lam_d * s_d * (1 - s_d)), rel=1e-12)
    assert float(policy.grad[1]) == pytest.approx(float(beta * lam_u * s_u * (1 - s_u)), rel=1e-12)
    assert z0.grad is None


def test_kto_errors_name_the_argument():
    z = torch.zeros(2, dtype=DT)
    d = torch.tensor([True, False])
    with pytest.raises(ValueError, match="kl_estimate"):
        rl.kto_loss(z, z, d, -0.1, 0.1)
    with pytest.raises(ValueError, match="kl_estimate"):
        rl.kto_loss(z, z, d, torch.zeros(2), 0.1)
    with pytest.raises(ValueError, match="desirable_weight"):
        rl.kto_loss(z, z, d, 0.0, 0.1, desirable_weight=0.0)
    with pytest.raises(ValueError, match="undesirable_weight"):
        rl.kto_loss(z, z, d, 0.0, 0.1, undesirable_weight=-1.0)
    with pytest.raises(ValueError, match="desirable"):
        rl.kto_loss(z, z, torch.tensor([True]), 0.0, 0.1)
    with pytest.raises(ValueError, match="desirable"):
        rl.kto_loss(z, z, torch.tensor([2, 0]), 0.0, 0.1)
    with pytest.raises(ValueError, match="ref_log_probs"):
        rl.kto_loss(z, torch.zeros(3), d, 0.0, 0.1)
    with pytest.raises(ValueError, match="beta"):
        rl.kto_loss(z, z, d, 0.0, 0.0)
