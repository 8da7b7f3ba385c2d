"""KL estimators k1, k2, k3 and the exact categorical KL: zeros, signs, Monte Carlo, gradients."""

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import rlbook as rl
from rlbook import reference as ref

DT = torch.float64
ESTIMATORS = [rl.kl_k1, rl.kl_k2, rl.kl_k3]


def _logits(seed, A=6, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(A, generator=g, dtype=DT) * scale, torch.randn(A, generator=g, dtype=DT) * scale


@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_zero_for_equal_policies(estimator):
    lp = torch.log_softmax(torch.randn(3, 5, dtype=DT), -1)
    assert (estimator(lp, lp) == 0).all()
    assert (rl.categorical_kl(lp, lp) == 0).all()


@given(st.lists(st.floats(-30, 0), min_size=1, max_size=8), st.lists(st.floats(-30, 0), min_size=8, max_size=8))
def test_k3_and_k2_nonnegative(lp, ref_lp):
    lp = torch.tensor(lp, dtype=DT)
    ref_lp = torch.tensor(ref_lp[: len(lp)], dtype=DT)
    assert (rl.kl_k3(lp, ref_lp) >= 0).all()
    assert (rl.kl_k2(lp, ref_lp) >= 0).all()


def test_hand_values():
    lp, ref_lp = torch.tensor(math.log(0.5), dtype=DT), torch.tensor(math.log(0.25), dtype=DT)
    # log r = log(0.25/0.5) = −log 2
    assert float(rl.kl_k1(lp, ref_lp)) == pytest.approx(math.log(2))
    assert float(rl.kl_k2(lp, ref_lp)) == pytest.approx(0.5 * math.log(2) ** 2)
    assert float(rl.kl_k3(lp, ref_lp)) == pytest.approx(0.5 - 1 + math.log(2))


@given(st.integers(0, 10_000), st.integers(1, 7))
def test_categorical_kl_matches_brute_force(seed, A):
    lp, lq = _logits(seed, A, scale=2.0)
    want = ref.categorical_kl_loop(torch.softmax(lp, 0).tolist(), torch.softmax(lq, 0).tolist())
    assert float(rl.categorical_kl(lp, lq)) == pytest.approx(want, rel=1e-9, abs=1e-12)


def test_categorical_kl_batched_masked_and_float32():
    lp, lq = torch.randn(4, 3, 5), torch.randn(4, 3, 5)
    out = rl.categorical_kl(lp, lq)
    assert out.shape == (4, 3) and out.dtype == torch.float32 and (out >= -1e-6).all()
    assert rl.categorical_kl(lp.to(torch.bfloat16), lq.to(torch.bfloat16)).dtype == torch.float32
    masked = torch.tensor([0.0, -math.inf, 1.0], dtype=DT, requires_grad=True)
    q = torch.tensor([0.0, 0.0, 0.0], dtype=DT)
    kl = rl.categorical_kl(masked, q)
    kl.backward()
    assert torch.isfinite(kl) and torch.isfinite(masked.grad).all()
    p = torch.softmax(masked.detach(), 0)
    want = ref.categorical_kl_loop(p.tolist(), [1 / 3] * 3)
    assert float(kl.detach()) == pytest.approx(want)


@pytest.mark.parametrize("estimator", [rl.kl_k1, rl.kl_k3])
@pytest.mark.parametrize("seed", [0, 1])
def test_unbiased_estimators_within_four_standard_errors(estimator, seed):
    logits, ref_logits = _logits(seed, 8, scale=1.0)
    exact = float(rl.categorical_kl(logits, ref_logits))
    g = torch.Generator().manual_seed(100 + seed)
    n = 20_000
    a = torch.multinomial(torch.softmax(logits, 0), n, replacement=True, generator=g)
    k = estimator(torch.log_softmax(logits, 0)[a], torch.log_softmax(ref_logits, 0)[a])
    se = float(k.std() / math.sqrt(n))
    assert abs(float(k.mean()) - exact) < 4 * se


def test_k3_has_lower_variance_than_k1_when_close():
    logits, ref_logits = _logits(3, 8, scale=0.3)
    lp, lr = torch.log_softmax(logits, 0), torch.log_softmax(ref_logits, 0)
    p = lp.exp()
    var = lambda k: float((p * k**2).sum() - (p * k).sum() ** 2)  # exact variance by enumeration
    assert var(rl.kl_k3(lp, lr)) < 0.2 * var(rl.kl_k1(lp, lr))


def _expected_grad_of_estimator(estimator, logits, ref_logits):
    """Σ_a π_θ(a) ∇_θ k(a): the expected gradient of k used as a loss, samples a held fixed (no grad
    through the sampling weights π_θ(a)), gradient flowing through log π_θ(a) only."""
    x = logits.clone().requires_grad_()
    lp = torch.log_softmax(x, -1)
    ref_lp = torch.log_softmax(ref_logits, -1)
    (lp.exp().detach() * estimator(lp, ref_lp)).sum().backward()
    return x.grad


def _grad_of(fn, logits):
    x = logits.clone().requires_grad_()
    fn(x).backward()
    return x.grad


@given(st.integers(0, 10_000), st.integers(2, 7), st.floats(0.1, 3.0))
def test_expected_gradients_by_enumeration(seed, A, scale):
    """E_θ[∇k1] = 0, E_θ[∇k2] = ∇KL(π_θ‖π_ref) (reverse), E_θ[∇k3] = ∇KL(π_ref‖π_θ) (forward): exact."""
    logits, ref_logits = _logits(seed, A, scale=scale)
    reverse = _grad_of(lambda x: rl.categorical_kl(x, ref_logits), logits)  # ∇ KL(π_θ ‖ π_ref)
    forward = _grad_of(lambda x: rl.categorical_kl(ref_logits, x), logits)  # ∇ KL(π_ref ‖ π_θ)
    torch.testing.assert_close(_expected_grad_of_estimator(rl.kl_k1, logits, ref_logits), torch.zeros(A, dtype=DT),
                               atol=1e-12, rtol=0)
    torch.testing.assert_close(_expected_grad_of_estimator(rl.kl_k2, logits, ref_logits), reverse, atol=1e-12, rtol=1e-9)
    torch.testing.assert_close(_expected_grad_of_estimator(rl.kl_k3, logits, ref_logits), forward, atol=1e-12, rtol=1e-9)


@pytest.mark.parametrize("seed", [0, 4, 7])
def test_k2_and_k3_gradients_differ_away_from_the_reference(seed):
    """The two identities are not the same statement: far from π_ref the reverse and forward gradients
    differ, and each estimator matches only its own (so the test above can fail for a swapped pair)."""
    logits, ref_logits = _logits(seed, 5, scale=1.5)
    reverse = _grad_of(lambda x: rl.categorical_kl(x, ref_logits), logits)
    forward = _grad_of(lambda x: rl.categorical_kl(ref_logits, x), logits)
    assert (reverse - forward).abs().max() > 1e-3
    assert not torch.allclose(_expected_grad_of_estimator(rl.kl_k3, logits, ref_logits), reverse)
    assert not torch.allclose(_expected_grad_of_estimator(rl.kl_k2, logits, ref_logits), forward)


def test_expected_gradients_through_a_network_by_enumeration():
    """The identities hold for any parameterisation: a tiny MLP over 4 states, weighted by a state
    distribution, against autograd of the exact state-averaged KLs w.r.t. every weight."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.Tanh(), torch.nn.Linear(8, 5)).double()
    obs = torch.randn(4, 3, dtype=DT)
    ref_logits = torch.randn(4, 5, dtype=DT)
    ref_lp = torch.log_softmax(ref_logits, -1)
    d = torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=DT)

    def grads(loss):
        return torch.cat([g.reshape(-1) for g in torch.autograd.grad(loss, list(net.parameters()))])

    weights = d[:, None] * torch.softmax(net(obs), -1).detach()  # P(s, a) = d(s) π_θ(a|s), fixed samples
    e_k1, e_k2, e_k3 = (grads((weights * k(torch.log_softmax(net(obs), -1), ref_lp)).sum())
                        for k in (rl.kl_k1, rl.kl_k2, rl.kl_k3))
    reverse = grads((d * rl.categorical_kl(net(obs), ref_logits)).sum())
    forward = grads((d * rl.categorical_kl(ref_logits, net(obs))).sum())
    torch.testing.assert_close(e_k1, torch.zeros_like(e_k1), atol=1e-12, rtol=0)
    torch.testing.assert_close(e_k2, reverse)
    torch.testing.assert_close(e_k3, forward)


@given(st.integers(0, 10_000), st.integers(2, 7), st.floats(0.1, 3.0))
def test_exact_expectations_by_enumeration(seed, A, scale):
    """E_θ[k1] = E_θ[k3] = KL(π_θ‖π_ref) exactly; E_θ[k2] ≥ 0 and differs from it in general."""
    logits, ref_logits = _logits(seed, A, scale=scale)
    lp, ref_lp = torch.log_softmax(logits, 0), torch.log_softmax(ref_logits, 0)
    p = lp.exp()
    kl = float(rl.categorical_kl(logits, ref_logits))
    assert float((p * rl.kl_k1(lp, ref_lp)).sum()) == pytest.approx(kl, rel=1e-9, abs=1e-12)
    assert float((p * rl.kl_k3(lp, ref_lp)).sum()) == pytest.approx(kl, rel=1e-9, abs=1e-12)
    assert float((p * (torch.exp(ref_lp - lp) - 1)).sum()) == pytest.approx(0.0, abs=1e-12)  # E_θ[r] = 1


def test_k2_bias_is_third_order_near_the_reference():
    """E[k2] − KL shrinks like α³ as π_ref = softmax(z + α u) approaches π_θ: halving α divides it by ≈ 8."""
    logits, direction = _logits(11, 6, scale=1.0)
    lp = torch.log_softmax(logits, 0)

    def bias(alpha):
        ref_logits = logits + alpha * direction
        return float((lp.exp() * rl.kl_k2(lp, torch.log_softmax(ref_logits, 0))).sum() - rl.categorical_kl(logits, ref_logits))

    assert abs(bias(0.5)) > 1e-4
    assert bias(0.02) / bias(0.01) == pytest.approx(8.0, rel=0.05)


def test_errors_name_argument():
    with pytest.raises(ValueError, match="`ref_log_probs`"):
        rl.kl_k3(torch.zeros(3), torch.zeros(4))
    with pytest.raises(ValueError, match="`log_probs`"):
        rl.kl_k1(torch.tensor([math.nan]), torch.zeros(1))
    with pytest.raises(ValueError, match="`logits_q`"):
        rl.categorical_kl(torch.zeros(2, 3), torch.zeros(2, 4))
    with pytest.raises(ValueError, match="`logits_p`"):
        rl.categorical_kl(torch.tensor(0.0), torch.tensor(0.0))
