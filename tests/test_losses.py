"""Part II losses: PPO clip (min and mask forms), CISPO, KL penalty, adaptive β, value loss, entropy."""

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import rlbook as rl
from rlbook import reference as ref

DT = torch.float64
eps_pairs = st.tuples(st.sampled_from([0.0, 0.1, 0.2, 0.5]), st.sampled_from([None, 0.0, 0.28, 1.0]))


def _batch(seed, shape=(3, 5), scale=0.5):
    g = torch.Generator().manual_seed(seed)
    old = torch.randn(shape, generator=g, dtype=DT) - 1.0
    lp = old + scale * torch.randn(shape, generator=g, dtype=DT)
    adv = torch.randn(shape, generator=g, dtype=DT)
    return lp, old, adv


@given(st.integers(0, 10_000), eps_pairs)
def test_clipped_matches_loop(seed, eps):
    lp, old, adv = _batch(seed)
    got = rl.clipped_surrogate_loss(lp, old, adv, *eps)
    want = ref.clipped_surrogate_loss_loop(lp.flatten(), old.flatten(), adv.flatten(), *eps)
    torch.testing.assert_close(got.flatten(), torch.tensor(want, dtype=DT))


def test_seed_table_values():
    # ε = 0.2, A = ±1 at ρ ∈ {0.5, 1.0, 1.5}: min picks the pessimistic term
    ratio = torch.tensor([0.5, 1.0, 1.5], dtype=DT)
    lp, old = ratio.log(), torch.zeros(3, dtype=DT)
    pos = rl.clipped_surrogate_loss(lp, old, torch.ones(3, dtype=DT))
    neg = rl.clipped_surrogate_loss(lp, old, -torch.ones(3, dtype=DT))
    torch.testing.assert_close(pos, torch.tensor([-0.5, -1.0, -1.2], dtype=DT))
    torch.testing.assert_close(neg, torch.tensor([0.8, 1.0, 1.5], dtype=DT))


@given(st.integers(0, 10_000), eps_pairs)
def test_clipped_equals_unclipped_inside_band(seed, eps):
    lp, old, adv = _batch(seed, scale=0.05)
    low, high = eps[0], eps[0] if eps[1] is None else eps[1]
    ratio = (lp - old).exp()
    inside = (ratio >= 1 - low) & (ratio <= 1 + high)
    loss = rl.clipped_surrogate_loss(lp, old, adv, *eps)
    torch.testing.assert_close(loss[inside], -(ratio * adv)[inside])


@given(st.integers(0, 10_000), eps_pairs)
def test_min_form_equals_mask_form_values_and_grads(seed, eps):
    lp, old, adv = _batch(seed, scale=1.0)
    lp1, lp2 = lp.clone().requires_grad_(), lp.clone().requires_grad_()
    a = rl.clipped_surrogate_loss(lp1, old, adv, *eps)
    b = rl.clipped_surrogate_loss_masked(lp2, old, adv, *eps)
    torch.testing.assert_close(a, b)
    a.sum().backward()
    b.sum().backward()
    torch.testing.assert_close(lp1.grad, lp2.grad)


@given(st.integers(0, 10_000), eps_pairs)
def test_gradient_exactly_zero_where_clip_active_else_minus_ratio_adv(seed, eps):
    lp, old, adv = _batch(seed, scale=1.0)
    lp.requires_grad_()
    rl.clipped_surrogate_loss(lp, old, adv, *eps).sum().backward()
    ratio = (lp - old).exp().detach()
    active = rl.clip_region(ratio, adv, *eps)
    assert (lp.grad[active] == 0).all()
    torch.testing.assert_close(lp.grad[~active], -(ratio * adv)[~active])


def test_clip_region_hand_cases():
    ratio = torch.tensor([0.5, 0.5, 1.5, 1.5, 1.0])
    adv = torch.tensor([1.0, -1.0, 1.0, -1.0, 1.0])
    assert rl.clip_region(ratio, adv, 0.2).tolist() == [False, True, True, False, False]


def test_clip_higher_asymmetry():
    # ε_low = 0.2, ε_high = 0.28: ρ = 1.25 with A > 0 is inside, still learning
    lp, old = torch.tensor([1.25], dtype=DT).log().requires_grad_(), torch.zeros(1, dtype=DT)
    rl.clipped_surrogate_loss(lp, old, torch.ones(1, dtype=DT), 0.2, 0.28).sum().backward()
    assert float(lp.grad) == pytest.approx(-1.25)
    lp.grad = None
    rl.clipped_surrogate_loss(lp, old, torch.ones(1, dtype=DT), 0.2).sum().backward()
    assert float(lp.grad) == 0.0


def test_gradcheck_losses():
    lp, old, adv = _batch(0, shape=(6,), scale=0.15)
    lp.requires_grad_()
    for fn in (rl.clipped_surrogate_loss, rl.clipped_surrogate_loss_masked):
        assert torch.autograd.gradcheck(lambda x: fn(x, old, adv, 0.2, 0.28), (lp,))
    # cispo_loss is deliberately NOT gradcheck-able: its stop-gradient makes the analytic gradient
    # differ from finite differences; test_cispo_gradient_is_clipped_weight_times_advantage covers it.
    kl = torch.rand(6, dtype=DT, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, k: rl.kl_penalty_loss(x, old, adv, k, 0.3), (lp, kl))
    values = torch.randn(6, dtype=DT, requires_grad=True)
    ret, old_v = torch.randn(6, dtype=DT), torch.randn(6, dtype=DT)
    assert torch.autograd.gradcheck(lambda v: rl.value_loss(v, ret, old_v, clip_eps=0.3), (values,))
    logits = torch.randn(2, 5, dtype=DT, requires_grad=True)
    assert torch.autograd.gradcheck(rl.entropy_from_logits, (logits,))


@given(st.integers(0, 10_000), st.sampled_from([(0.2, 0.28), (0.9, 0.2), (0.0, 0.0)]))
def test_cispo_gradient_is_clipped_weight_times_advantage(seed, eps):
    lp, old, adv = _batch(seed, scale=1.0)
    lp.requires_grad_()
    rl.cispo_loss(lp, old, adv, *eps).sum().backward()
    weight = torch.tensor(ref.cispo_weight_loop(lp.detach().flatten(), old.flatten(), *eps), dtype=DT).reshape(lp.shape)
    torch.testing.assert_close(lp.grad, -weight * adv)
    assert (lp.grad != 0).all()  # never masked, unlike PPO


def test_cispo_equals_ppo_gradient_inside_band():
    lp, old, adv = _batch(5, scale=0.02)
    lp1, lp2 = lp.clone().requires_grad_(), lp.clone().requires_grad_()
    rl.cispo_loss(lp1, old, adv, 0.2, 0.2).sum().backward()
    rl.clipped_surrogate_loss(lp2, old, adv, 0.2, 0.2).sum().backward()
    torch.testing.assert_close(lp1.grad, lp2.grad)


def test_kl_penalty_loss_value():
    lp, old = torch.tensor([0.0], dtype=DT), torch.tensor([0.0], dtype=DT)
    got = rl.kl_penalty_loss(lp, old, torch.tensor([2.0], dtype=DT), torch.tensor([0.5], dtype=DT), 3.0)
    assert float(got) == pytest.approx(-(1 * 2.0 - 3.0 * 0.5))


@pytest.mark.parametrize("kl, want", [(0.001, 0.5), (0.0066, 0.5), (0.0067, 1.0), (0.01, 1.0), (0.015, 1.0),
                                      (0.0151, 2.0), (1.0, 2.0), (0.0, 0.5)])
def test_adaptive_kl_coef_rule(kl, want):
    assert rl.adaptive_kl_coef(1.0, kl, target_kl=0.01) == want


def test_adaptive_kl_coef_accepts_tensor_and_validates():
    assert rl.adaptive_kl_coef(0.4, torch.tensor(0.1), 0.01) == pytest.approx(0.8)
    for kw, name in [(dict(kl_coef=0.0, kl=0.1, target_kl=0.1), "kl_coef"),
                     (dict(kl_coef=1.0, kl=-0.1, target_kl=0.1), "kl"),
                     (dict(kl_coef=1.0, kl=0.1, target_kl=0.0), "target_kl")]:
        with pytest.raises(ValueError, match=f"`{name}`"):
            rl.adaptive_kl_coef(**kw)


def test_value_loss_plain_and_clipped():
    values = torch.tensor([1.0, 3.0, 0.0, 2.0], dtype=DT, requires_grad=True)
    returns = torch.tensor([0.0, 0.0, 1.0, 2.5], dtype=DT)
    old = torch.tensor([0.0, 2.0, 0.0, 1.0], dtype=DT)
    torch.testing.assert_close(rl.value_loss(values, returns), 0.5 * (values - returns) ** 2)
    got = rl.value_loss(values, returns, old, clip_eps=0.5)
    # V_clip = [0.5, 2.5, 0.0, 1.5]; max of ½(V−R)² and ½(V_clip−R)²
    want = 0.5 * torch.tensor([max(1.0, 0.25), max(9.0, 6.25), max(1.0, 1.0), max(0.25, 1.0)], dtype=DT)
    torch.testing.assert_close(got, want)
    got.sum().backward()
    # the 4th element is governed by the clipped branch (V moved 1.0 > ε away from V_old): zero gradient
    assert float(values.grad[3]) == 0.0 and float(values.grad[0]) == pytest.approx(1.0)


def test_entropy_from_logits():
    assert float(rl.entropy_from_logits(torch.zeros(7))) == pytest.approx(math.log(7), rel=1e-6)
    logits = torch.randn(4, 6, dtype=DT)
    p = torch.softmax(logits, -1)
    torch.testing.assert_close(rl.entropy_from_logits(logits), -(p * p.log()).sum(-1))
    peaked = torch.tensor([0.0, -1e4, -1e4])
    assert float(rl.entropy_from_logits(peaked)) == 0.0
    half = rl.entropy_from_logits(torch.randn(2, 3).to(torch.bfloat16))
    assert half.dtype == torch.float32 and rl.entropy_from_logits(logits).dtype == DT


def test_errors_name_argument():
    lp = torch.zeros(4)
    with pytest.raises(ValueError, match="`clip_eps_low`"):
        rl.clipped_surrogate_loss(lp, lp, lp, clip_eps_low=-0.1)
    with pytest.raises(ValueError, match="`clip_eps_high`"):
        rl.clipped_surrogate_loss(lp, lp, lp, 0.2, clip_eps_high=-0.1)
    with pytest.raises(ValueError, match="`clip_eps_high`"):
        rl.cispo_loss(lp, lp, lp, 0.2, -1.0)
    with pytest.raises(ValueError, match="`old_log_probs`"):
        rl.clipped_surrogate_loss(lp, torch.zeros(3), lp)
    with pytest.raises(ValueError, match="`advantages`"):
        rl.clipped_surrogate_loss_masked(lp, lp, torch.zeros(3))
    with pytest.raises(ValueError, match="`advantages`"):  # would silently enlarge the output
        rl.clipped_surrogate_loss(lp, lp, torch.zeros(2, 4))
    assert rl.clipped_surrogate_loss(torch.zeros(2, 4), torch.zeros(2, 4), torch.ones(2, 1)).shape == (2, 4)
    with pytest.raises(ValueError, match="`kl_coef`"):
        rl.kl_penalty_loss(lp, lp, lp, lp, -1.0)
    with pytest.raises(ValueError, match="`kl`"):
        rl.kl_penalty_loss(lp, lp, lp, torch.zeros(3), 1.0)
    with pytest.raises(ValueError, match="`returns`"):
        rl.value_loss(lp, torch.zeros(3))
    with pytest.raises(ValueError, match="`old_values`"):
        rl.value_loss(lp, lp, clip_eps=0.2)
    with pytest.raises(ValueError, match="`clip_eps`"):
        rl.value_loss(lp, lp, lp, clip_eps=0.0)
    with pytest.raises(ValueError, match="`logits`"):
        rl.entropy_from_logits(torch.tensor(1.0))


# ---- any finite ε ≥ 0: ε_low ≥ 1 removes the lower clip, wide clip-higher bands are legal ----

@pytest.mark.parametrize("eps_low", [1.0, 5.0])
def test_eps_low_at_least_one_means_no_lower_clip(eps_low):
    # ratios far below 1 with negative advantages: PPO (ε = 0.2) would clip them (zero gradient);
    # with ε_low ≥ 1 the loss and its gradient are the unclipped −ρ·Â
    ratio = torch.tensor([1e-3, 0.1, 0.5, 0.79, 0.99], dtype=DT)
    adv = torch.tensor([-1.0, -2.0, -0.5, -3.0, -1.0], dtype=DT)
    old = torch.zeros(5, dtype=DT)
    for fn in (rl.clipped_surrogate_loss, rl.clipped_surrogate_loss_masked):
        lp = ratio.log().requires_grad_()
        loss = fn(lp, old, adv, eps_low, 0.2)
        torch.testing.assert_close(loss, -ratio * adv)
        loss.sum().backward()
        torch.testing.assert_close(lp.grad, -ratio * adv)
    assert not rl.clip_region(ratio, adv, eps_low, 0.2).any()
    assert rl.clip_region(ratio, adv, 0.2).tolist() == [True, True, True, True, False]  # the usual band does clip
    # CISPO's weight has no lower bound either: weight = ρ
    lp = ratio.log().requires_grad_()
    rl.cispo_loss(lp, old, adv, eps_low, 0.2).sum().backward()
    torch.testing.assert_close(lp.grad, -ratio * adv)
    # the loop oracle agrees (its band also starts at 1 − ε_low ≤ 0)
    want = ref.clipped_surrogate_loss_loop(ratio.log(), old, adv, eps_low, 0.2)
    torch.testing.assert_close(rl.clipped_surrogate_loss(ratio.log(), old, adv, eps_low, 0.2), torch.tensor(want, dtype=DT))


def test_wide_clip_higher_band():
    # ε_high = 3: the band is [0.8, 4]; ρ = 3.5 with Â > 0 still learns, ρ = 4.5 is clipped at 4
    ratio = torch.tensor([3.5, 4.5, 0.5], dtype=DT)
    adv = torch.tensor([1.0, 1.0, -1.0], dtype=DT)
    lp = ratio.log().requires_grad_()
    loss = rl.clipped_surrogate_loss(lp, torch.zeros(3, dtype=DT), adv, 0.2, 3.0)
    torch.testing.assert_close(loss, torch.tensor([-3.5, -4.0, 0.8], dtype=DT))
    loss.sum().backward()
    torch.testing.assert_close(lp.grad, torch.tensor([-3.5, 0.0, 0.0], dtype=DT))
    assert rl.clip_region(ratio, adv, 0.2, 3.0).tolist() == [False, True, True]
    weight = ref.cispo_weight_loop(ratio.log(), torch.zeros(3), 0.2, 3.0)
    assert weight == pytest.approx([3.5, 4.0, 0.8])


@pytest.mark.parametrize("bad", [-0.1, -1e-12, math.inf, -math.inf, math.nan, "wide"])
@pytest.mark.parametrize("name", ["clip_eps_low", "clip_eps_high"])
def test_clip_eps_rejects_negative_and_non_finite(bad, name):
    lp = torch.zeros(3)
    eps = dict(clip_eps_low=0.2, clip_eps_high=0.2)
    eps[name] = bad
    for fn in (rl.clipped_surrogate_loss, rl.clipped_surrogate_loss_masked, rl.cispo_loss):
        with pytest.raises(ValueError, match=f"`{name}` must be"):
            fn(lp, lp, lp, **eps)
    with pytest.raises(ValueError, match=f"`{name}` must be"):
        rl.clip_region(lp.exp(), lp, **eps)
    with pytest.raises(ValueError, match=f"`{name}` must be"):
        rl.GRPOConfig(**eps)
    with pytest.raises(ValueError, match=f"`{name}` must be"):
        rl.PPOConfig(**eps).validate()


def test_configs_accept_what_the_loss_accepts():
    for low, high in ((1.0, 0.28), (5.0, 3.0), (0.0, 0.0), (0.2, None)):
        config = rl.GRPOConfig(clip_eps_low=low, clip_eps_high=high)
        assert (config.clip_eps_low, config.clip_eps_high) == (low, high)
        rl.PPOConfig(clip_eps_low=low, clip_eps_high=high).validate()
        loss = rl.clipped_surrogate_loss(torch.zeros(2), torch.zeros(2), torch.ones(2), low, high)
        assert torch.equal(loss, -torch.ones(2))  # ρ = 1 sits inside every band: the loss is −Â
