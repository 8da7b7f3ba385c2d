"""Importance sampling: the probability ratio and estimates of E_p[f] from samples of q.

The ratio ρ = π_θ(a|s) / π_θold(a|s) is always formed from log-probabilities (a difference of
logs, then one ``exp``), never by dividing probabilities that may underflow.
"""

from __future__ import annotations

import torch

from rlbook import _checks

__all__ = ["log_ratio", "importance_ratio", "importance_sampling_estimate"]


def _log_prob_pair(log_probs, old_log_probs, names=("log_probs", "old_log_probs")):
    """Convert two log-probability tensors and check they have the same shape."""
    log_probs = _checks.as_float_tensor(names[0], log_probs)
    old_log_probs = _checks.as_float_tensor(names[1], old_log_probs, dtype=log_probs.dtype)
    _checks.check_same_shape(**{names[0]: log_probs, names[1]: old_log_probs})
    return log_probs, old_log_probs


def log_ratio(log_probs, old_log_probs) -> torch.Tensor:
    """Log importance ratio, elementwise.

    log ρ = log π_θ(a|s) − log π_θold(a|s)

    Source: book eq. (is-ratio); Schulman et al. 2017, arXiv:1707.06347, sec. 3 (r_t(θ)).

    Args:
        log_probs: (..., T) log π_θ of the sampled actions or tokens, nats.
        old_log_probs: (..., T) log π_θold of the same actions (the behaviour policy), nats.
    Returns:
        (..., T) log ρ.
    Gradient:
        through ``log_probs``; ``old_log_probs`` is detached (it is data).
    Raises:
        ValueError: shapes differ, or an input holds NaN/inf.
    See also:
        rlbook.importance_ratio
    Example:
        >>> round(float(log_ratio(torch.tensor(0.012).log(), torch.tensor(0.01).log())), 4)
        0.1823
    """
    log_probs, old_log_probs = _log_prob_pair(log_probs, old_log_probs)
    return log_probs - old_log_probs.detach()


def importance_ratio(log_probs, old_log_probs) -> torch.Tensor:
    """Importance ratio ρ = π_θ / π_θold = exp(log_probs − old_log_probs), elementwise.

    Source: book eq. (is-ratio); Schulman et al. 2017, arXiv:1707.06347, sec. 3.

    Args:
        log_probs: (..., T) log π_θ, nats.
        old_log_probs: (..., T) log π_θold, nats.
    Returns:
        (..., T) ρ ≥ 0; ρ = 1 when the policies agree on that sample.
    Gradient:
        ∂ρ/∂log_probs = ρ; ``old_log_probs`` detached.
    Raises:
        ValueError: shapes differ, or an input holds NaN/inf.
    See also:
        rlbook.log_ratio, rlbook.clipped_surrogate_loss
    Example:
        >>> round(float(importance_ratio(torch.tensor(0.012).log(), torch.tensor(0.01).log())), 4)
        1.2
    """
    return torch.exp(log_ratio(log_probs, old_log_probs))


def importance_sampling_estimate(f_values, log_p, log_q, self_normalized: bool = False) -> torch.Tensor:
    """Estimate E_{x∼p}[f(x)] from samples x_i ∼ q, reducing over the last dim.

    ordinary:        (1/n) Σ_i w_i f(x_i),        w_i = p(x_i)/q(x_i)    (unbiased)
    self-normalised: Σ_i w_i f(x_i) / Σ_i w_i                            (biased, consistent;
                                                  p and q may then be unnormalised)

    Source: book eq. (is-estimate); Owen 2013, *Monte Carlo theory, methods and examples*, ch. 9
    (eqs. 9.3 and 9.21).

    Args:
        f_values: (..., n) f(x_i) at n samples drawn from q.
        log_p: (..., n) log p(x_i) (target), nats.
        log_q: (..., n) log q(x_i) (proposal that generated the samples), nats.
        self_normalized: use the self-normalised estimator (weights from a stable softmax).
    Returns:
        (...) the estimate.
    Gradient:
        through all inputs (differentiable estimator).
    Raises:
        ValueError: shapes differ, inputs empty or 0-dim, or NaN/inf present.
    See also:
        rlbook.effective_sample_size, rlbook.reference.importance_sampling_estimate_loop
    Example:
        >>> f = torch.tensor([1.0, 0.0]); lq = torch.tensor([0.5, 0.5]).log(); lp = torch.tensor([0.9, 0.1]).log()
        >>> round(float(importance_sampling_estimate(f, lp, lq)), 4)
        0.9
    """
    f_values = _checks.as_float_tensor("f_values", f_values)
    _checks.check_min_ndim("f_values", f_values, 1, "(..., n)")
    _checks.check_nonempty("f_values", f_values)
    log_p, log_q = _log_prob_pair(log_p, log_q, names=("log_p", "log_q"))
    _checks.check_same_shape(f_values=f_values, log_p=log_p)
    log_w = log_p - log_q
    if self_normalized:
        return (torch.softmax(log_w, dim=-1) * f_values).sum(dim=-1)
    return (torch.exp(log_w) * f_values).mean(dim=-1)
