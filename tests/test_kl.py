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


@pytest.mark.parametrize("seed", [0, 4, 7])
def test_expected_gradients_by_enumeration(seed):
    """E_θ[∇k1] = 0, E_θ[∇k2] = ∇KL(π_θ‖π_ref), E_θ[∇k3] = ∇KL(π_ref‖π_θ) (exact, categorical)."""
    logits, ref_logits = _logits(seed, 5, scale=1.5)
    ref_lp = torch.log_softmax(ref_logits, 0)

    def expected_grad(estimator):
        x = logits.clone().requires_grad_()
        lp = torch.log_softmax(x, 0)
        (lp.exp().detach() * estimator(lp, ref_lp)).sum().backward()  # Σ_a π(a) ∇k(a), samples fixed
        return x.grad

    def grad_of(fn):
        x = logits.clone().requires_grad_()
        fn(x).backward()
        return x.grad

    torch.testing.assert_close(expected_grad(rl.kl_k1), torch.zeros(5, dtype=DT), atol=1e-12, rtol=0)
    torch.testing.assert_close(expected_grad(rl.kl_k2), grad_of(lambda x: rl.categorical_kl(x, ref_logits)))
    torch.testing.assert_close(expected_grad(rl.kl_k3), grad_of(lambda x: rl.categorical_kl(ref_logits, x)))
    assert not torch.allclose(expected_grad(rl.kl_k3), grad_of(lambda x: rl.categorical_kl(x, ref_logits)))


def test_errors_name_argument():
    with pytest.raises(ValueError, match="`ref_log_probs`"):
        rl.kl_k3(torch.zeros(3), torch.zeros(4))
    with pytest.raises(ValueError, match="`log_probs`"):
        rl.kl_k1(torch.tensor([math.nan]), torch.zeros(1))
    with pytest.raises(ValueError, match="`logits_q`"):
        rl.categorical_kl(torch.zeros(2, 3), torch.zeros(2, 4))
    with pytest.raises(ValueError, match="`logits_p`"):
        rl.categorical_kl(torch.tensor(0.0), torch.tensor(0.0))
