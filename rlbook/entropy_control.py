"""Entropy and what RL does to it: the covariance that drives entropy down, and the losses that manage it.

For a softmax policy updated by a policy-gradient step, the change of entropy is, to first order,
minus the covariance between a token's log-probability and its advantage (Cui et al. 2025,
arXiv:2505.22617, Lemma 1 / Theorem 1): confident tokens with positive advantage lower the entropy.
Their two remedies act on the few tokens of highest covariance:

* **Clip-Cov** (their eq. 10): among the tokens the PPO clip has not already clipped, whose
  centred covariance lies in (ω_low, ω_high), a random ``clip_fraction`` of all response tokens is
  chosen and its gradient removed (the loss is multiplied by 0);
* **KL-Cov** (their eq. 11): the top ``kl_fraction`` of response tokens by covariance get the
  penalty κ·|log π_θ − log π_old| added to the unclipped surrogate −A·ρ.

Wang et al. 2025 (arXiv:2506.01939) train on the high-entropy "forking" tokens only (the top 20 %
of each batch by entropy), and Cui et al. fit the empirical relation R = −a·exp(H) + b between a
run's reward R and its entropy H.

Token tensors are (B, T) with a (B, T) bool ``completion_mask``; ``advantages`` broadcast from
(B, 1) or (B,) to (B, T). Losses are returned per token (B, T) (zero off the mask), to be
aggregated as chapter 9 does (``rl.seq_mean_token_mean`` etc.).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from rlbook import _checks

__all__ = ["token_covariance", "clip_cov_mask", "clip_cov_loss", "kl_cov_loss", "high_entropy_mask",
           "entropy_performance_fit", "CLIP_COV_RATIO", "CLIP_COV_BOUNDS", "KL_COV_RATIO", "KL_COV_COEF"]

# Cui et al. 2025, arXiv:2505.22617, §5 (experimental settings), and their verl recipes (field names
# clip_cov_ratio, clip_cov_lb, clip_cov_ub, kl_cov_ratio, ppo_kl_coef): the one source of these
# defaults (the functions below and ``rlbook.GRPOConfig`` read them from here).
CLIP_COV_RATIO = 2e-4  # r: the share of response tokens whose gradient Clip-Cov removes
CLIP_COV_BOUNDS = (1.0, 5.0)  # (ω_low, ω_high): the covariance band of the eligible tokens
KL_COV_RATIO = 2e-3  # k: the share of response tokens KL-Cov penalises (Qwen2.5-7B; 2e-4 for 32B)
KL_COV_COEF = 1.0  # β of KL-Cov's |log π_θ − log π_old| penalty (κ here)


def _token_tensors(log_probs, advantages, completion_mask, old_log_probs=None):
    if not isinstance(log_probs, torch.Tensor) or log_probs.dim() != 2:
        raise ValueError("`log_probs` must be a (B, T) tensor of per-token log-probabilities")
    if not isinstance(completion_mask, torch.Tensor) or completion_mask.shape != log_probs.shape:
        raise ValueError(f"`completion_mask` must be a (B, T) tensor like `log_probs` {tuple(log_probs.shape)}")
    advantages = torch.as_tensor(advantages, dtype=log_probs.dtype, device=log_probs.device)
    if advantages.dim() == 1:
        advantages = advantages[:, None]
    if advantages.dim() != 2 or advantages.shape[0] != log_probs.shape[0] or advantages.shape[1] not in (1, log_probs.shape[1]):
        raise ValueError(f"`advantages` must be (B,), (B, 1) or (B, T) with B = {log_probs.shape[0]}; got {tuple(advantages.shape)}")
    if old_log_probs is not None and (not isinstance(old_log_probs, torch.Tensor) or old_log_probs.shape != log_probs.shape):
        raise ValueError(f"`old_log_probs` must be a (B, T) tensor like `log_probs` {tuple(log_probs.shape)}")
    mask = completion_mask.bool()
    if not mask.any():
        raise ValueError("`completion_mask` selects no token")
    return advantages.expand_as(log_probs), mask


def token_covariance(log_probs, advantages, completion_mask) -> torch.Tensor:
    """The centred per-token product whose mean is Cov(log π, A) over the batch's response tokens.

    c_{i,t} = (A_{i,t} − Ā)·(log π_{i,t} − mean log π),   means over the masked tokens,

    detached (it selects tokens; it is not a loss). Source: Cui et al. 2025, arXiv:2505.22617, eq. 9.

    Args:
        log_probs: (B, T) log π_θ of the sampled tokens, nats.
        advantages: (B,), (B, 1) or (B, T).
        completion_mask: (B, T) bool.
    Returns:
        (B, T) float, 0 off the mask.
    Raises:
        ValueError: shapes, or an empty mask.
    """
    advantages, mask = _token_tensors(log_probs, advantages, completion_mask)
    lp = log_probs.detach()
    a_bar = advantages[mask].mean()
    lp_bar = lp[mask].mean()
    return torch.where(mask, (advantages - a_bar) * (lp - lp_bar), torch.zeros_like(lp))


def clip_cov_mask(covariance, completion_mask, clip_fraction: float, cov_low: float, cov_high: float,
                  generator: torch.Generator, already_clipped=None) -> torch.Tensor:
    """Clip-Cov's selection: which tokens lose their gradient.

    Eligible: on the mask, not ``already_clipped`` by the PPO clip, covariance in (cov_low, cov_high).
    Chosen: max(1, ⌊clip_fraction · #mask⌋) of the eligible tokens, uniformly at random without
    replacement (all of them if fewer are eligible).

    Source: Cui et al. 2025, arXiv:2505.22617, eq. 10 (their settings: clip_fraction r = 2e-4,
    (ω_low, ω_high) = (1, 5); ``CLIP_COV_RATIO``, ``CLIP_COV_BOUNDS``).

    Args:
        covariance: (B, T) from :func:`token_covariance`.
        completion_mask: (B, T) bool.
        clip_fraction: in (0, 1].
        cov_low, cov_high: the band, cov_low < cov_high.
        generator: torch.Generator for the random choice.
        already_clipped: (B, T) bool or None.
    Returns:
        (B, T) bool, True where the token's loss is removed.
    Raises:
        ValueError: shapes, a fraction outside (0, 1], or cov_low ≥ cov_high.
    """
    if not isinstance(covariance, torch.Tensor) or covariance.dim() != 2 or completion_mask.shape != covariance.shape:
        raise ValueError("`covariance` and `completion_mask` must be (B, T) tensors of one shape")
    _checks.check_in_range("clip_fraction", clip_fraction, 0.0, 1.0, low_inclusive=False)
    if not cov_low < cov_high:
        raise ValueError(f"`cov_low` must be below `cov_high`; got {cov_low} and {cov_high}")
    mask = completion_mask.bool()
    eligible = mask & (covariance > cov_low) & (covariance < cov_high)
    if already_clipped is not None:
        eligible &= ~already_clipped.bool()
    index = torch.nonzero(eligible.flatten()).flatten()
    count = max(1, int(clip_fraction * int(mask.sum())))
    chosen = index[torch.randperm(index.numel(), generator=generator)[:count].to(index.device)]
    out = torch.zeros(covariance.numel(), dtype=torch.bool, device=covariance.device)
    out[chosen] = True
    return out.view_as(covariance)


def clip_cov_loss(log_probs, old_log_probs, advantages, completion_mask, clip_eps: float = 0.2,
                  clip_fraction: float = CLIP_COV_RATIO, cov_low: float = CLIP_COV_BOUNDS[0],
                  cov_high: float = CLIP_COV_BOUNDS[1],
                  generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Clip-Cov: PPO's clipped surrogate with a few high-covariance tokens' gradients removed.

    ℓ_{i,t} = max(−A ρ, −A clip(ρ, 1 − ε, 1 + ε)) · (1 − m_{i,t}),   ρ = exp(log π_θ − log π_old),
    m from :func:`clip_cov_mask` on :func:`token_covariance` (tokens the clip already clipped are
    not eligible).

    Source: Cui et al. 2025, arXiv:2505.22617, eq. 10.

    Args:
        log_probs: (B, T) log π_θ (with gradient). old_log_probs: (B, T) log π_old.
        advantages: (B,), (B, 1) or (B, T). completion_mask: (B, T) bool.
        clip_eps: ε > 0. clip_fraction, cov_low, cov_high: as :func:`clip_cov_mask`.
        generator: for the random choice (default: a fresh one seeded 0).
    Returns:
        ``(loss (B, T), removed (B, T) bool)``; loss is 0 off the mask and on removed tokens.
    Raises:
        ValueError: as :func:`clip_cov_mask`, or ε ≤ 0.
    """
    advantages, mask = _token_tensors(log_probs, advantages, completion_mask, old_log_probs)
    _checks.check_positive("clip_eps", clip_eps)
    ratio = torch.exp(log_probs - old_log_probs.detach())
    unclipped, clipped = -advantages * ratio, -advantages * ratio.clamp(1 - clip_eps, 1 + clip_eps)
    already = (clipped > unclipped) & mask
    removed = clip_cov_mask(token_covariance(log_probs, advantages, mask), mask, clip_fraction, cov_low, cov_high,
                            generator if generator is not None else torch.Generator().manual_seed(0), already)
    loss = torch.maximum(unclipped, clipped) * (~removed).to(log_probs.dtype)
    return torch.where(mask, loss, torch.zeros_like(loss)), removed


def kl_cov_loss(log_probs, old_log_probs, advantages, completion_mask, kl_fraction: float = KL_COV_RATIO,
                kl_coef: float = KL_COV_COEF) -> tuple[torch.Tensor, torch.Tensor]:
    """KL-Cov: the unclipped surrogate, with |log π_θ − log π_old| penalised on the top-covariance tokens.

    ℓ_{i,t} = −A ρ + κ·|log π_θ − log π_old|·1[(i, t) ∈ top-k by covariance],
    k = max(1, ⌊kl_fraction · #mask⌋), ρ = exp(log π_θ − log π_old).

    Source: Cui et al. 2025, arXiv:2505.22617, eq. 11 (their settings: k = 2e-3 for Qwen2.5-7B and
    2e-4 for Qwen2.5-32B, κ = 1; the defaults are the 7B ones, ``KL_COV_RATIO``, ``KL_COV_COEF``).

    Args:
        log_probs: (B, T) log π_θ (with gradient). old_log_probs: (B, T) log π_old.
        advantages: (B,), (B, 1) or (B, T). completion_mask: (B, T) bool.
        kl_fraction: in (0, 1]. kl_coef: κ ≥ 0.
    Returns:
        ``(loss (B, T), penalised (B, T) bool)``; loss is 0 off the mask.
    Raises:
        ValueError: shapes, a fraction outside (0, 1], κ < 0.
    """
    advantages, mask = _token_tensors(log_probs, advantages, completion_mask, old_log_probs)
    _checks.check_in_range("kl_fraction", kl_fraction, 0.0, 1.0, low_inclusive=False)
    _checks.check_in_range("kl_coef", kl_coef, 0.0)
    covariance = token_covariance(log_probs, advantages, mask)
    count = max(1, int(kl_fraction * int(mask.sum())))
    scores = torch.where(mask, covariance, torch.full_like(covariance, -math.inf)).flatten()
    top = torch.topk(scores, min(count, int(mask.sum()))).indices
    penalised = torch.zeros(scores.numel(), dtype=torch.bool, device=scores.device)
    penalised[top] = True
    penalised = penalised.view_as(covariance)
    log_ratio = log_probs - old_log_probs.detach()
    loss = -advantages * torch.exp(log_ratio) + kl_coef * log_ratio.abs() * penalised.to(log_probs.dtype)
    return torch.where(mask, loss, torch.zeros_like(loss)), penalised


def high_entropy_mask(entropy, completion_mask, top_fraction: float = 0.2) -> torch.Tensor:
    """The "forking" tokens: the top ``top_fraction`` of the batch's response tokens by entropy.

    Keeps ⌈top_fraction · #mask⌉ tokens (ties broken by position); training on these only is
    Wang et al.'s recipe. Source: Wang et al. 2025, arXiv:2506.01939, §4 (top 20 %).

    Args:
        entropy: (B, T) per-token entropy of π_θ(·|context), nats (e.g. ``rl.entropy_from_logits``).
        completion_mask: (B, T) bool.
        top_fraction: in (0, 1].
    Returns:
        (B, T) bool, a subset of the mask.
    Raises:
        ValueError: shapes, an empty mask, a fraction outside (0, 1].
    """
    if not isinstance(entropy, torch.Tensor) or entropy.dim() != 2 or completion_mask.shape != entropy.shape:
        raise ValueError("`entropy` and `completion_mask` must be (B, T) tensors of one shape")
    _checks.check_in_range("top_fraction", top_fraction, 0.0, 1.0, low_inclusive=False)
    mask = completion_mask.bool()
    n = int(mask.sum())
    if n == 0:
        raise ValueError("`completion_mask` selects no token")
    keep = math.ceil(top_fraction * n - 1e-9)
    scores = torch.where(mask, entropy.detach(), torch.full_like(entropy, -math.inf)).flatten()
    order = torch.sort(scores, descending=True, stable=True).indices[:keep]
    out = torch.zeros(scores.numel(), dtype=torch.bool, device=scores.device)
    out[order] = True
    return out.view_as(mask)


def entropy_performance_fit(entropies, rewards, confidence: float = 0.95) -> dict:
    """Fit R = −a·exp(H) + b by least squares (linear in x = exp(H)), with confidence intervals.

    Least squares of R on x = e^H (``scipy.stats.linregress``): slope −a, intercept b; their
    intervals from the t distribution with n − 2 degrees of freedom. b − a is the reward the fit
    predicts at H = 0 (e^0 = 1: the policy fully collapsed), Cui et al.'s ceiling of a run; b itself
    is the intercept at x = e^H = 0, which no entropy reaches.

    Source: Cui et al. 2025, arXiv:2505.22617, eq. 1.

    Args:
        entropies: (n,) mean token entropies along a run (or across runs), nats.
        rewards: (n,) the matching rewards (any unit).
        confidence: interval level in (0, 1).
    Returns:
        dict with ``a``, ``b``, ``a_ci``, ``b_ci`` (tuples), ``r2`` and ``n``.
    Raises:
        ValueError: fewer than 3 points, unequal lengths, non-finite values, constant entropies.
    """
    from scipy import stats

    h = np.asarray(entropies, dtype=float)
    r = np.asarray(rewards, dtype=float)
    if h.ndim != 1 or r.shape != h.shape or h.size < 3:
        raise ValueError(f"`entropies` and `rewards` must be 1-d of one length ≥ 3; got {h.shape} and {r.shape}")
    if not (np.isfinite(h).all() and np.isfinite(r).all()):
        raise ValueError("`entropies` and `rewards` must be finite")
    if np.ptp(h) == 0:
        raise ValueError("`entropies` are all equal: the slope is not identified")
    if not 0 < confidence < 1:
        raise ValueError(f"`confidence` must be in (0, 1); got {confidence}")
    fit = stats.linregress(np.exp(h), r)
    t = stats.t.ppf((1 + confidence) / 2, h.size - 2)
    a, b = -fit.slope, fit.intercept
    return {"a": float(a), "b": float(b), "a_ci": (float(a - t * fit.stderr), float(a + t * fit.stderr)),
            "b_ci": (float(b - t * fit.intercept_stderr), float(b + t * fit.intercept_stderr)),
            "r2": float(fit.rvalue ** 2), "n": int(h.size)}
