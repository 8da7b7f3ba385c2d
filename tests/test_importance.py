"""Importance ratio and importance-sampling estimates: hand numbers, oracle, unbiasedness."""

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import rlbook as rl
from rlbook import reference as ref

DT = torch.float64


def test_ratio_hand_worked_seed_example():
    # a token's probability moves 0.01 -> 0.012: ρ = 1.2, log ρ = log 1.2
    lp, old = torch.tensor(0.012, dtype=DT).log(), torch.tensor(0.01, dtype=DT).log()
    assert float(rl.importance_ratio(lp, old)) == pytest.approx(1.2, rel=1e-12)
    assert float(rl.log_ratio(lp, old)) == pytest.approx(math.log(1.2), rel=1e-12)


def test_ratio_gradient_and_detached_old():
    lp = torch.tensor([-1.0, -2.0], dtype=DT, requires_grad=True)
    old = torch.tensor([-1.5, -1.0], dtype=DT, requires_grad=True)
    ratio = rl.importance_ratio(lp, old)
    ratio.sum().backward()
    torch.testing.assert_close(lp.grad, ratio.detach())  # dρ/dlog π = ρ
    assert old.grad is None


def _random_pair(seed, n, shift):
    g = torch.Generator().manual_seed(seed)
    logits_q = torch.randn(n, generator=g, dtype=DT)
    logits_p = logits_q + shift * torch.randn(n, generator=g, dtype=DT)
    return torch.softmax(logits_p, 0), torch.softmax(logits_q, 0), torch.randn(n, generator=g, dtype=DT)


@given(st.integers(0, 10_000), st.integers(1, 8), st.booleans())
def test_estimate_matches_oracle(seed, n, self_normalized):
    p, q, f = _random_pair(seed, n, 1.0)
    got = rl.importance_sampling_estimate(f, p.log(), q.log(), self_normalized=self_normalized)
    want = ref.importance_sampling_estimate_loop(f.tolist(), p.tolist(), q.tolist(), self_normalized)
    assert float(got) == pytest.approx(want, rel=1e-10, abs=1e-12)


def test_ordinary_estimate_is_exactly_unbiased_by_enumeration():
    # E_q[w f] = Σ_x q(x) p(x)/q(x) f(x) = E_p[f]: evaluate the single-sample estimator at every x
    p, q, f = _random_pair(1, 6, 1.5)
    per_x = torch.stack([rl.importance_sampling_estimate(f[i : i + 1], p[i : i + 1].log(), q[i : i + 1].log())
                         for i in range(6)])
    assert float((q * per_x).sum()) == pytest.approx(float((p * f).sum()), rel=1e-12)


def test_monte_carlo_within_four_standard_errors():
    p, q, f = _random_pair(2, 5, 0.7)
    g = torch.Generator().manual_seed(0)
    n = 20_000
    x = torch.multinomial(q, n, replacement=True, generator=g)
    estimate = rl.importance_sampling_estimate(f[x], p.log()[x], q.log()[x])
    w_f = (p / q * f)[x]
    se = float(w_f.std() / math.sqrt(n))
    assert abs(float(estimate) - float((p * f).sum())) < 4 * se
    sn = rl.importance_sampling_estimate(f[x], p.log()[x], q.log()[x], self_normalized=True)
    assert abs(float(sn) - float((p * f).sum())) < 0.05


def test_self_normalized_ignores_constant_offsets_and_batches():
    p, q, f = _random_pair(3, 7, 1.0)
    a = rl.importance_sampling_estimate(f, p.log(), q.log(), self_normalized=True)
    b = rl.importance_sampling_estimate(f, p.log() + 5.0, q.log() - 3.0, self_normalized=True)
    torch.testing.assert_close(a, b)
    batch = rl.importance_sampling_estimate(torch.stack([f, f]), torch.stack([p.log()] * 2), torch.stack([q.log()] * 2))
    assert batch.shape == (2,)


def test_errors_name_argument():
    with pytest.raises(ValueError, match="`old_log_probs`"):
        rl.importance_ratio(torch.zeros(3), torch.zeros(2))
    with pytest.raises(ValueError, match="`log_probs`"):
        rl.log_ratio(torch.tensor([math.inf]), torch.zeros(1))
    with pytest.raises(ValueError, match="`log_p`"):
        rl.importance_sampling_estimate(torch.zeros(3), torch.zeros(2), torch.zeros(3))
    with pytest.raises(ValueError, match="`log_q`"):
        rl.importance_sampling_estimate(torch.zeros(3), torch.zeros(3), torch.zeros(2))
    with pytest.raises(ValueError, match="`f_values`"):
        rl.importance_sampling_estimate(torch.tensor(1.0), torch.zeros(()), torch.zeros(()))


@pytest.mark.parametrize("self_normalized", [False, True])
def test_estimate_of_a_batch_is_the_estimate_of_each_row(self_normalized):
    # (..., n): the weights are normalised over the samples (the last dim), never across rows
    g = torch.Generator().manual_seed(3)
    f, lp, lq = (torch.randn(3, 5, generator=g, dtype=DT) for _ in range(3))
    batch = rl.importance_sampling_estimate(f, lp, lq, self_normalized=self_normalized)
    rows = torch.stack([rl.importance_sampling_estimate(f[i], lp[i], lq[i], self_normalized=self_normalized)
                        for i in range(3)])
    torch.testing.assert_close(batch, rows, rtol=1e-12, atol=1e-12)
    w = (lp - lq).exp()
    expected = (w * f).sum(-1) / w.sum(-1) if self_normalized else (w * f).mean(-1)
    torch.testing.assert_close(batch, expected, rtol=1e-12, atol=1e-12)
