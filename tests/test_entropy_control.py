"""Entropy management (rlbook.entropy_control): each piece against a closed form, autograd or a loop.

* the covariance whose mean is Cov(log π, A), and the mechanism behind it (Cui et al. 2025): for a
  softmax whose logits move by Δz, the entropy changes by −Cov_{a∼π}(log π(a), Δz(a)) to first
  order, checked by autograd on a tabular softmax after one policy-gradient step;
* Clip-Cov: the removed tokens are eligible ones, their count is the stated one, and their gradient is
  exactly zero while every other token's equals PPO's;
* KL-Cov: the penalised tokens are the top-k by covariance, and the gradient is the surrogate's plus
  κ·sign(log-ratio) on them;
* the forking-token mask keeps the stated share of the highest-entropy tokens;
* the R = −a·exp(H) + b fit recovers a and b from noiseless data and covers them in its interval.
"""

import math

import numpy as np
import pytest
import torch

from rlbook import entropy_control as ec

DT = torch.float64


def _batch(seed=0, B=4, T=6):
    g = torch.Generator().manual_seed(seed)
    log_probs = torch.log_softmax(torch.randn(B, T, 5, generator=g, dtype=DT), -1)[..., 0]
    old = log_probs + 0.3 * torch.randn(B, T, generator=g, dtype=DT)
    adv = torch.randn(B, generator=g, dtype=DT)
    mask = torch.ones(B, T, dtype=torch.bool)
    mask[0, 4:] = False
    mask[2, 5:] = False
    return log_probs, old, adv, mask


def test_token_covariance_is_the_centred_product_and_its_mean_is_the_covariance():
    lp, _, adv, mask = _batch()
    cov = ec.token_covariance(lp, adv, mask)
    pairs = [(float(lp[i, t]), float(adv[i])) for i in range(4) for t in range(6) if mask[i, t]]
    mean_lp = sum(p for p, _ in pairs) / len(pairs)
    mean_a = sum(a for _, a in pairs) / len(pairs)
    k = 0
    for i in range(4):
        for t in range(6):
            want = (float(adv[i]) - mean_a) * (float(lp[i, t]) - mean_lp) if mask[i, t] else 0.0
            assert abs(float(cov[i, t]) - want) < 1e-14
            k += bool(mask[i, t])
    population_cov = np.cov([p for p, _ in pairs], [a for _, a in pairs], ddof=0)[0, 1]
    assert abs(cov[mask].mean().item() - population_cov) < 1e-14
    assert not cov.requires_grad


def test_positive_covariance_lowers_a_softmax_policys_entropy_to_first_order():
    """Cui et al.'s mechanism on a 6-arm softmax: one exact policy-gradient step on E_π[A] changes the entropy by
    −η·Cov_{a∼π}(log π(a), π(a)(A(a) − E_π A)) + O(η²) (their Lemma 1 for softmax logits updated by the
    gradient); checked by autograd at a small step, for advantages that favour the likely arms (entropy falls)
    and the unlikely ones (it rises)."""
    logits = torch.tensor([2.0, 1.0, 0.5, 0.0, -0.5, -1.0], dtype=DT)
    for advantages, sign in ((torch.tensor([1.0, 0.5, 0.0, 0.0, -0.5, -1.0], dtype=DT), -1),
                             (torch.tensor([-1.0, -0.5, 0.0, 0.0, 0.5, 1.0], dtype=DT), +1)):
        theta = logits.clone().requires_grad_(True)
        pi = torch.softmax(theta, -1)
        (grad,) = torch.autograd.grad((pi * advantages).sum(), theta)
        eta = 1e-4
        entropy = lambda z: -(torch.softmax(z, -1) * torch.log_softmax(z, -1)).sum()  # noqa: E731
        change = (entropy(logits + eta * grad) - entropy(logits)).item()
        p = pi.detach()
        centred_a = advantages - (p * advantages).sum()
        x, y = p.log(), p * centred_a
        cov = (p * (x - (p * x).sum()) * (y - (p * y).sum())).sum().item()
        assert abs(change / eta + cov) < 1e-3 * abs(cov) + 1e-8
        assert math.copysign(1, change) == sign


def test_clip_cov_removes_the_stated_number_of_eligible_tokens_and_only_their_gradient():
    torch.manual_seed(0)
    lp, old, adv, mask = _batch(seed=1, B=16, T=12)
    adv = adv * 20  # covariances of order 1–10, so the band (1, 5) holds tokens
    lp = lp.clone().requires_grad_(True)
    loss, removed = ec.clip_cov_loss(lp, old, adv, mask, clip_eps=0.2, clip_fraction=0.05, generator=torch.Generator().manual_seed(3))
    cov = ec.token_covariance(lp, adv, mask)
    ratio = torch.exp(lp - old).detach()
    a = adv[:, None].expand_as(lp)
    already = (-a * ratio.clamp(0.8, 1.2) > -a * ratio) & mask
    eligible = mask & (cov > 1) & (cov < 5) & ~already
    assert int(removed.sum()) == min(int(eligible.sum()), max(1, int(0.05 * int(mask.sum()))))
    assert int(removed.sum()) >= 2 and bool((removed <= eligible).all())
    (grad,) = torch.autograd.grad(loss.sum(), lp)
    ppo_grad = torch.where(already, torch.zeros_like(ratio), -a * ratio)  # d/dlp of max(−Aρ, −A clip ρ)
    want = torch.where(removed | ~mask, torch.zeros_like(ppo_grad), ppo_grad)
    assert torch.allclose(grad, want, atol=1e-12)


def test_kl_cov_penalises_the_top_covariance_tokens_with_the_absolute_log_ratio():
    lp, old, adv, mask = _batch(seed=2, B=8, T=10)
    lp = lp.clone().requires_grad_(True)
    loss, penalised = ec.kl_cov_loss(lp, old, adv, mask, kl_fraction=0.1, kl_coef=0.7)
    cov = ec.token_covariance(lp, adv, mask)
    k = max(1, int(0.1 * int(mask.sum())))
    assert int(penalised.sum()) == k
    assert cov[penalised].min() >= cov[mask & ~penalised].max()
    (grad,) = torch.autograd.grad(loss.sum(), lp)
    ratio = torch.exp(lp - old).detach()
    a = adv[:, None].expand_as(lp)
    want = -a * ratio + 0.7 * torch.sign(lp - old).detach() * penalised
    assert torch.allclose(grad, torch.where(mask, want, torch.zeros_like(want)), atol=1e-12)


def test_high_entropy_mask_keeps_the_top_share_of_masked_tokens():
    g = torch.Generator().manual_seed(0)
    entropy = torch.rand(5, 8, generator=g, dtype=DT)
    mask = torch.rand(5, 8, generator=g) < 0.8
    keep = ec.high_entropy_mask(entropy, mask, 0.2)
    n = int(mask.sum())
    assert int(keep.sum()) == math.ceil(0.2 * n) and bool((keep <= mask).all())
    assert entropy[keep].min() >= entropy[mask & ~keep].max()
    assert bool((ec.high_entropy_mask(entropy, mask, 1.0) == mask).all())


def test_entropy_performance_fit_recovers_a_and_b_and_covers_them():
    h = np.linspace(0.1, 1.5, 12)
    exact = ec.entropy_performance_fit(h, -0.3 * np.exp(h) + 0.9)
    assert abs(exact["a"] - 0.3) < 1e-12 and abs(exact["b"] - 0.9) < 1e-12 and exact["r2"] > 1 - 1e-12
    rng = np.random.default_rng(0)
    covered = 0
    for _ in range(200):
        fit = ec.entropy_performance_fit(h, -0.3 * np.exp(h) + 0.9 + 0.05 * rng.standard_normal(h.size))
        covered += fit["a_ci"][0] <= 0.3 <= fit["a_ci"][1]
    assert 180 <= covered <= 199  # 95 % of 200 is 190 (binomial sd ≈ 3); measured 183 here, 94.9 % over 4,000 fits


def test_bad_inputs_name_the_argument():
    lp, old, adv, mask = _batch()
    with pytest.raises(ValueError, match="log_probs"):
        ec.token_covariance(lp[0], adv, mask)
    with pytest.raises(ValueError, match="advantages"):
        ec.token_covariance(lp, torch.zeros(3, dtype=DT), mask)
    with pytest.raises(ValueError, match="completion_mask"):
        ec.token_covariance(lp, adv, torch.zeros_like(mask))
    with pytest.raises(ValueError, match="clip_fraction"):
        ec.clip_cov_loss(lp, old, adv, mask, clip_fraction=0.0)
    with pytest.raises(ValueError, match="cov_low"):
        ec.clip_cov_loss(lp, old, adv, mask, cov_low=5.0, cov_high=1.0)
    with pytest.raises(ValueError, match="old_log_probs"):
        ec.kl_cov_loss(lp, old[:2], adv, mask)
    with pytest.raises(ValueError, match="kl_coef"):
        ec.kl_cov_loss(lp, old, adv, mask, kl_coef=-1.0)
    with pytest.raises(ValueError, match="top_fraction"):
        ec.high_entropy_mask(lp.exp(), mask, 1.5)
    with pytest.raises(ValueError, match="entropies"):
        ec.entropy_performance_fit([0.1, 0.2], [1.0, 2.0])
    with pytest.raises(ValueError, match="not identified"):
        ec.entropy_performance_fit([0.5, 0.5, 0.5], [1.0, 2.0, 3.0])
