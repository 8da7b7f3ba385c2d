"""Diagnostics: approx_kl, clip_fraction, explained_variance, effective_sample_size."""

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import rlbook as rl
from rlbook import reference as ref

DT = torch.float64


def test_approx_kl_is_mean_k3_of_old_vs_new_and_estimates_kl_old_new():
    g = torch.Generator().manual_seed(0)
    logits_old, logits_new = torch.randn(6, generator=g, dtype=DT), torch.randn(6, generator=g, dtype=DT) * 0.5
    lp_old, lp_new = torch.log_softmax(logits_old, 0), torch.log_softmax(logits_new, 0)
    # exact expectation under π_old equals KL(π_old ‖ π_new)
    p_old = lp_old.exp()
    per_action = torch.stack([rl.approx_kl(lp_new[i : i + 1], lp_old[i : i + 1]) for i in range(6)])
    assert float((p_old * per_action).sum()) == pytest.approx(float(rl.categorical_kl(logits_old, logits_new)))
    # and it is the mean of k3 with the roles (π_θ samples -> π_old samples) swapped
    a = torch.multinomial(p_old, 50, replacement=True, generator=g)
    torch.testing.assert_close(rl.approx_kl(lp_new[a], lp_old[a]), rl.kl_k3(lp_old[a], lp_new[a]).mean())


def test_approx_kl_no_grad_and_mask():
    lp = torch.tensor([[0.1, -0.2], [5.0, 0.0]], dtype=DT, requires_grad=True)
    old = torch.zeros(2, 2, dtype=DT)
    mask = torch.tensor([[True, True], [False, True]])
    out = rl.approx_kl(lp, old, mask=mask)
    assert not out.requires_grad
    want = sum(math.exp(x) - 1 - x for x in (0.1, -0.2, 0.0)) / 3
    assert float(out) == pytest.approx(want)


def test_clip_fraction():
    ratio = torch.tensor([0.7, 0.85, 1.0, 1.25, 1.3, 2.0])
    assert float(rl.clip_fraction(ratio, 0.2)) == pytest.approx(4 / 6)
    assert float(rl.clip_fraction(ratio, 0.2, 0.28)) == pytest.approx(3 / 6)
    assert float(rl.clip_fraction(ratio, 0.2, mask=torch.tensor([0, 1, 1, 0, 0, 0]))) == 0.0
    # never smaller than the fraction whose gradient is actually zero
    adv = torch.tensor([1.0, -1.0, 1.0, -1.0, 1.0, -1.0])
    assert float(rl.clip_region(ratio, adv, 0.2).float().mean()) <= float(rl.clip_fraction(ratio, 0.2))


@given(st.integers(0, 10_000), st.integers(2, 10))
def test_explained_variance_matches_oracle(seed, n):
    g = torch.Generator().manual_seed(seed)
    returns, values = torch.randn(n, generator=g, dtype=DT), torch.randn(n, generator=g, dtype=DT)
    want = ref.explained_variance_loop(values.tolist(), returns.tolist())
    assert float(rl.explained_variance(values, returns)) == pytest.approx(want, rel=1e-9, abs=1e-12)


def test_explained_variance_limits():
    returns = torch.tensor([1.0, 2.0, 4.0], dtype=DT)
    assert float(rl.explained_variance(returns, returns)) == 1.0
    assert float(rl.explained_variance(torch.full((3,), 7.0, dtype=DT), returns)) == pytest.approx(0.0)
    assert float(rl.explained_variance(torch.zeros(3, dtype=DT), returns)) == pytest.approx(0.0 + 1 - 1)
    assert float(rl.explained_variance(-returns, returns)) < 0
    assert math.isnan(float(rl.explained_variance(torch.zeros(3), torch.ones(3))))
    assert math.isnan(float(rl.explained_variance(torch.zeros(1), torch.ones(1))))


@given(st.integers(0, 10_000), st.integers(1, 12), st.floats(0.1, 5.0))
def test_ess_matches_oracle_and_bounds(seed, n, scale):
    g = torch.Generator().manual_seed(seed)
    log_w = scale * torch.randn(n, generator=g, dtype=DT)
    ess = float(rl.effective_sample_size(log_w))
    assert ess == pytest.approx(ref.effective_sample_size_loop(log_w.exp().tolist()), rel=1e-9)
    assert 1 - 1e-9 <= ess <= n + 1e-9
    assert float(rl.effective_sample_size(log_w, normalized=True)) == pytest.approx(ess / n)
    assert float(rl.effective_sample_size(log_w + 123.0)) == pytest.approx(ess, rel=1e-9)


def test_ess_limits_and_stability():
    assert float(rl.effective_sample_size(torch.zeros(10, dtype=DT))) == pytest.approx(10.0)
    dominant = torch.tensor([800.0, 0.0, 0.0, -800.0], dtype=DT)  # e^800 overflows as a plain weight
    assert float(rl.effective_sample_size(dominant)) == pytest.approx(1.0)
    assert rl.effective_sample_size(torch.zeros(3, 7)).shape == (3,)


def test_errors_name_argument():
    with pytest.raises(ValueError, match="`old_log_probs`"):
        rl.approx_kl(torch.zeros(3), torch.zeros(2))
    with pytest.raises(ValueError, match="`mask`"):
        rl.approx_kl(torch.zeros(3), torch.zeros(3), mask=torch.zeros(3, dtype=torch.bool))
    with pytest.raises(ValueError, match="`clip_eps_low`"):
        rl.clip_fraction(torch.ones(3), -0.2)
    with pytest.raises(ValueError, match="`returns`"):
        rl.explained_variance(torch.zeros(3), torch.zeros(2))
    with pytest.raises(ValueError, match="`log_weights`"):
        rl.effective_sample_size(torch.tensor(0.0))
    with pytest.raises(ValueError, match="`log_weights`"):
        rl.effective_sample_size(torch.tensor([math.inf, 0.0]))


def test_ess_of_nothing_is_refused():
    for empty in (torch.zeros(0), torch.zeros(3, 0)):
        with pytest.raises(ValueError, match="log_weights"):
            rl.effective_sample_size(empty)
