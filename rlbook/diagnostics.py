"""Training diagnostics logged by PPO/GRPO loops: approx KL, clip fraction, explained variance, ESS.

These are monitoring numbers, not losses: they are computed without gradient and returned as
0-dim tensors (``float(x)`` to log them). Each takes an optional boolean ``mask`` (for padded
language-model batches) selecting the elements that count.
"""

from __future__ import annotations

import torch

from rlbook import _checks
from rlbook.importance import log_ratio

__all__ = ["approx_kl", "clip_fraction", "explained_variance", "effective_sample_size"]


def _masked_mean(x: torch.Tensor, mask) -> torch.Tensor:
    """Mean of ``x`` over the elements where ``mask`` is true (all elements if mask is None)."""
    if mask is None:
        return x.mean()
    mask = _checks.check_bool_like("mask", mask, shape=x.shape).to(x.device)
    if not mask.any():
        raise ValueError("`mask` selects no element; expected at least one true entry")
    return x[mask].mean()


@torch.no_grad()
def approx_kl(log_probs, old_log_probs, mask=None) -> torch.Tensor:
    """Mean k3 estimate of KL(π_old ‖ π_θ) from samples of π_old (the rollout policy).

    approx_kl = mean[(ρ − 1) − log ρ],   ρ = exp(log_probs − old_log_probs)

    The samples come from π_old, so this estimates KL(π_old ‖ π_θ) — the direction TRPO
    constrains. It is ≥ 0 per element and unbiased; CleanRL logs it as ``approx_kl`` (and the
    k1 form mean(−log ρ) as ``old_approx_kl``) and may stop an epoch early when it exceeds a target.

    Source: book eq. (approx-kl); J. Schulman, "Approximating KL divergence" (blog, 2020);
    CleanRL ``ppo.py`` (Huang et al. 2022, JMLR 23(274)).

    Args:
        log_probs: (..., T) log π_θ of the rollout actions, nats.
        old_log_probs: (..., T) log π_old of the same actions, nats.
        mask: optional (..., T) bool, elements to average over.
    Returns:
        0-dim tensor, nats, ≥ 0.
    Gradient:
        none (computed under ``torch.no_grad``).
    Raises:
        ValueError: shapes differ, or mask selects nothing.
    See also:
        rlbook.kl_k3, rlbook.clip_fraction
    Example:
        >>> round(float(approx_kl(torch.tensor([0.0, 0.0]), torch.tensor([0.0, 0.0]))), 4)
        0.0
    """
    lr = log_ratio(log_probs, old_log_probs)
    return _masked_mean(torch.expm1(lr) - lr, mask)


@torch.no_grad()
def clip_fraction(ratio, clip_eps_low: float, clip_eps_high: float | None = None, mask=None) -> torch.Tensor:
    """Fraction of elements whose ratio lies outside the band [1 − ε_low, 1 + ε_high].

    clip_fraction = mean 1[ρ < 1 − ε_low ∨ ρ > 1 + ε_high]

    This is CleanRL's ``clipfrac`` (which counts |ρ − 1| > ε regardless of the advantage's sign);
    the fraction whose gradient is actually zeroed is ``rlbook.clip_region(...).mean()``, which
    is never larger.

    Source: book eq. (clip-fraction); CleanRL ``ppo.py`` (``clipfracs``).

    Args:
        ratio: (..., T) ρ ≥ 0.
        clip_eps_low: ε_low in [0, 1].
        clip_eps_high: ε_high ≥ 0; None means ε_low.
        mask: optional (..., T) bool.
    Returns:
        0-dim tensor in [0, 1].
    Gradient:
        none.
    Raises:
        ValueError: ε out of range, empty ratio, or mask selects nothing.
    See also:
        rlbook.clip_region, rlbook.approx_kl
    Example:
        >>> float(clip_fraction(torch.tensor([0.5, 1.0, 1.1, 1.5]), 0.2))
        0.5
    """
    if clip_eps_high is None:
        clip_eps_high = clip_eps_low
    _checks.check_in_range("clip_eps_low", clip_eps_low, 0.0, 1.0)
    _checks.check_in_range("clip_eps_high", clip_eps_high, 0.0)
    ratio = _checks.as_float_tensor("ratio", ratio)
    _checks.check_nonempty("ratio", ratio)
    outside = (ratio < 1.0 - clip_eps_low) | (ratio > 1.0 + clip_eps_high)
    return _masked_mean(outside.to(ratio.dtype), mask)


@torch.no_grad()
def explained_variance(values, returns, mask=None) -> torch.Tensor:
    """Fraction of the variance of the returns explained by the value predictions.

    EV = 1 − Var[R̂ − V] / Var[R̂]

    EV = 1: perfect predictions; EV = 0: no better than predicting the mean return (e.g. V
    constant); EV < 0: worse than that. If Var[R̂] = 0 (all returns equal, or one element) the
    ratio is undefined and NaN is returned — the convention of OpenAI baselines and CleanRL —
    so a logger shows a gap instead of a misleading number. Population variances (ddof = 0).

    Source: book eq. (explained-variance); OpenAI baselines ``common/math_util.py``; CleanRL ``ppo.py``.

    Args:
        values: (..., T) value predictions V(s_t).
        returns: (..., T) value targets R̂_t.
        mask: optional (..., T) bool.
    Returns:
        0-dim tensor, ≤ 1, or NaN when Var[R̂] = 0.
    Gradient:
        none.
    Raises:
        ValueError: shapes differ, empty input, or mask selects nothing.
    See also:
        rlbook.value_loss
    Example:
        >>> float(explained_variance(torch.tensor([1.0, 2.0, 3.0]), torch.tensor([1.0, 2.0, 3.0])))
        1.0
    """
    values = _checks.as_float_tensor("values", values)
    returns = _checks.as_float_tensor("returns", returns, dtype=values.dtype)
    _checks.check_same_shape(values=values, returns=returns)
    _checks.check_nonempty("values", values)
    if mask is not None:
        mask = _checks.check_bool_like("mask", mask, shape=values.shape).to(values.device)
        if not mask.any():
            raise ValueError("`mask` selects no element; expected at least one true entry")
        values, returns = values[mask], returns[mask]
    var_returns = returns.var(unbiased=False)
    if var_returns == 0:
        return torch.tensor(float("nan"), dtype=values.dtype)
    return 1.0 - (returns - values).var(unbiased=False) / var_returns


@torch.no_grad()
def effective_sample_size(log_weights, normalized: bool = False) -> torch.Tensor:
    """Kish's effective sample size of importance weights, from log-weights, over the last dim.

    ESS = (Σ_i w_i)² / Σ_i w_i² = exp(2·logsumexp(log w) − logsumexp(2·log w))

    ESS = n for equal weights and → 1 when one weight dominates; ``normalized=True`` returns
    ESS/n ∈ [1/n, 1]. Invariant to rescaling the weights, so unnormalised log-weights are fine.
    Computed in log space: weights e^{±800} neither overflow nor underflow.

    Source: book eq. (ess); Kish 1965, *Survey Sampling*; Owen 2013, *Monte Carlo theory*, eq. 9.13.

    Args:
        log_weights: (..., n) log importance weights, e.g. log p(x_i) − log q(x_i).
        normalized: divide by n.
    Returns:
        (...) ESS in [1, n] (or [1/n, 1] if normalized).
    Gradient:
        none.
    Raises:
        ValueError: 0-dim or empty input, NaN/inf present.
    See also:
        rlbook.importance_sampling_estimate, rlbook.reference.effective_sample_size_loop
    Example:
        >>> float(effective_sample_size(torch.zeros(5)))
        5.0
    """
    log_weights = _checks.as_float_tensor("log_weights", log_weights)
    _checks.check_min_ndim("log_weights", log_weights, 1, "(..., n)")
    _checks.check_nonempty("log_weights", log_weights)
    log_ess = 2 * torch.logsumexp(log_weights, dim=-1) - torch.logsumexp(2 * log_weights, dim=-1)
    ess = torch.exp(log_ess)
    return ess / log_weights.shape[-1] if normalized else ess
