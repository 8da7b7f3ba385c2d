"""DPPO: a trust region on an estimate of the policy divergence instead of on the ratio (Part III).

PPO clips the ratio ρ = π_θ(y_t)/π_old(y_t) of the sampled token: a single-sample estimate of how far
the policy moved, which over-reacts for rare tokens (ρ = 2 for a move 0.001 → 0.002) and
under-reacts for frequent ones (ρ = 1.1 for 0.9 → 0.99). DPPO keeps PPO's structure (stop the
gradient of tokens that already moved too far in the direction the update pushes) but measures
"too far" by a divergence between the two *binary* distributions {sampled token, any other token}:

    binary TV:  |p − q|,      binary KL:  KL(Bern(q) ‖ Bern(p)),     p = π_θ(y_t), q = π_old(y_t)

which needs only the two log-probabilities already at hand (no full-vocabulary softmax).
"""

from __future__ import annotations

import torch

from rlbook import _checks
from rlbook.importance import _log_prob_pair
from rlbook.losses import _ratio_and_advantages

__all__ = ["binary_tv", "binary_kl", "dppo_mask", "dppo_loss", "DPPO_DIVERGENCES"]


def binary_tv(log_probs, old_log_probs) -> torch.Tensor:
    """Total variation between the binary distributions {sampled token, other} of π_θ and π_old.

    TV = ½(|p − q| + |(1−p) − (1−q)|) = |p − q|,   p = exp(log_probs), q = exp(old_log_probs)

    A change of probability mass, in [0, 1]: a rare token's move 0.001 → 0.002 counts 0.001,
    however large its ratio (2). The total variation of the full next-token distributions is at
    least this (merging outcomes never increases TV).

    Source: book eq. (dppo-binary); Qi et al. 2026, "Rethinking the Trust Region in LLM
    Reinforcement Learning" (DPPO), arXiv:2602.04879, the Binary approximation (Binary-TV).

    Args:
        log_probs: (..., T) log π_θ of the sampled tokens, nats.
        old_log_probs: (..., T) log π_old of the same tokens (the sampling policy), nats.
    Returns:
        (..., T) binary TV, dimensionless, in [0, 1].
    Gradient:
        through ``log_probs``: sign(p − q)·p per element (0 where p = q); ``old_log_probs`` detached.
    Raises:
        ValueError: shapes differ, or an input holds NaN or inf.
    See also:
        binary_kl, dppo_mask, rlbook.reference.binary_tv_loop
    Example:
        >>> binary_tv(torch.tensor([0.002, 0.99]).log(), torch.tensor([0.001, 0.9]).log())
        tensor([0.0010, 0.0900])
    """
    log_probs, old_log_probs = _log_prob_pair(log_probs, old_log_probs)
    return (log_probs.exp() - old_log_probs.detach().exp()).abs()


def _log1mexp(x: torch.Tensor) -> torch.Tensor:
    """log(1 − eˣ) for x ≤ 0, accurate near 0 (expm1) and for very negative x (log1p)."""
    return torch.where(x > -0.6931471805599453, torch.log(-torch.expm1(x)), torch.log1p(-torch.exp(x)))


def binary_kl(log_probs, old_log_probs) -> torch.Tensor:
    """KL(Bern(q) ‖ Bern(p)) between the binary distributions {sampled token, other}.

    KL = q·log(q/p) + (1−q)·log((1−q)/(1−p)),   p = π_θ(y_t) = exp(log_probs), q = π_old(y_t)

    Direction: the expectation is under q, the sampling (old / rollout) policy, as in
    KL(π_old ‖ π_θ) of TRPO. Computed from log-probabilities with log(1 − eˣ) evaluated stably, so
    p or q close to 1 keeps full precision; q = 1 gives the first term only (0·log 0 = 0, never
    NaN); q < 1 with p = 1 gives +inf (π_θ has put all mass on the token: the KL is infinite).

    Source: book eq. (dppo-binary); Qi et al. 2026, "Rethinking the Trust Region in LLM
    Reinforcement Learning" (DPPO), arXiv:2602.04879, the Binary approximation (Binary-KL).

    Args:
        log_probs: (..., T) log π_θ of the sampled tokens, nats, ≤ 0.
        old_log_probs: (..., T) log π_old of the same tokens, nats, ≤ 0.
    Returns:
        (..., T) KL in nats, ≥ 0 (up to rounding), +inf where p = 1 > q.
    Gradient:
        through ``log_probs``, finite everywhere (0 at the +inf entries); ``old_log_probs`` detached.
    Raises:
        ValueError: shapes differ, an input holds NaN or inf, or a log-probability is > 0.
    See also:
        binary_tv, rlbook.kl_k3, rlbook.reference.binary_kl_loop
    Example:
        >>> round(float(binary_kl(torch.tensor(0.5).log(), torch.tensor(0.25).log())), 4)
        0.1308
    """
    log_probs, old_log_probs = _log_prob_pair(log_probs, old_log_probs)
    old_log_probs = old_log_probs.detach()
    for name, x in (("log_probs", log_probs), ("old_log_probs", old_log_probs)):
        if x.numel() and (x > 0).any():
            raise ValueError(f"`{name}` must be log-probabilities (≤ 0); got a maximum of {float(x.max())}")
    q_is_one, p_is_one = old_log_probs == 0, log_probs == 0
    unused = q_is_one | p_is_one  # the "other" term is 0 (q = 1) or +inf (p = 1 > q): no log(0) evaluated
    safe_lp = torch.where(unused, torch.full_like(log_probs, -1.0), log_probs)
    safe_old = torch.where(unused, torch.full_like(old_log_probs, -1.0), old_log_probs)
    other = -torch.expm1(old_log_probs) * (_log1mexp(safe_old) - _log1mexp(safe_lp))  # (1 − q)·log((1−q)/(1−p))
    other = torch.where(q_is_one, torch.zeros_like(other), torch.where(p_is_one, torch.full_like(other, float("inf")), other))
    return old_log_probs.exp() * (old_log_probs - log_probs) + other


DPPO_DIVERGENCES = {"binary_tv": binary_tv, "binary_kl": binary_kl}


def dppo_mask(log_probs, old_log_probs, advantages, threshold: float, divergence: str = "binary_tv") -> torch.Tensor:
    """DPPO's trust-region mask: True where the token keeps its policy-gradient term.

    blocked = D > τ  ∧  ((Â > 0 ∧ ρ > 1) ∨ (Â < 0 ∧ ρ < 1)),     keep = ¬blocked

    with D = :func:`binary_tv` or :func:`binary_kl` and ρ = π_θ/π_old. PPO's directional structure:
    a token outside the trust region is stopped only if the update would push it further out
    (raise an already raised probability, lower an already lowered one); moving back is allowed.
    Â = 0 is never blocked. The public implementations allow two thresholds, one per direction;
    call this twice, or combine two masks, for that.

    Source: book eq. (dppo-mask); Qi et al. 2026, "Rethinking the Trust Region in LLM
    Reinforcement Learning" (DPPO), arXiv:2602.04879 (the DPPO mask with the Binary-TV / Binary-KL
    approximations).

    Args:
        log_probs: (..., T) log π_θ, nats.
        old_log_probs: (..., T) log π_old (sampling policy), nats.
        advantages: broadcastable to (..., T).
        threshold: τ > 0, in the units of the divergence (probability mass for TV, nats for KL).
        divergence: "binary_tv" or "binary_kl".
    Returns:
        (..., T) bool, True = keep the gradient.
    Gradient:
        none (a mask; computed from detached values).
    Raises:
        ValueError: threshold ≤ 0 or not finite; unknown divergence; shapes; NaN or inf.
    See also:
        dppo_loss, rlbook.clip_region (PPO's mask), rlbook.reference.dppo_mask_loop
    Example:
        >>> lp, old = torch.tensor([0.5, 0.5, 0.002]).log(), torch.tensor([0.3, 0.3, 0.001]).log()
        >>> dppo_mask(lp, old, torch.tensor([1.0, -1.0, 1.0]), threshold=0.1)
        tensor([False,  True,  True])
    """
    _checks.check_in_range("threshold", threshold, 0.0, float("inf"), low_inclusive=False, high_inclusive=False)
    if divergence not in DPPO_DIVERGENCES:
        raise ValueError(f"`divergence` must be one of {sorted(DPPO_DIVERGENCES)}; got {divergence!r}")
    log_probs, old_log_probs = _log_prob_pair(log_probs, old_log_probs)
    _, advantages = _ratio_and_advantages(log_probs.detach(), old_log_probs, advantages)
    log_probs, old_log_probs = log_probs.detach(), old_log_probs.detach()
    outside = DPPO_DIVERGENCES[divergence](log_probs, old_log_probs) > threshold
    pushing_out = ((advantages > 0) & (log_probs > old_log_probs)) | ((advantages < 0) & (log_probs < old_log_probs))
    return ~(outside & pushing_out)


def dppo_loss(log_probs, old_log_probs, advantages, threshold: float, divergence: str = "binary_tv") -> torch.Tensor:
    """Per-element DPPO loss (minimise): the importance-weighted policy gradient, masked.

    loss = −M·ρ·Â,   ρ = exp(log_probs − old_log_probs),   M = :func:`dppo_mask` (a constant)

    Where M = 1 this is PPO's unclipped term (gradient −ρ·Â·∇log π, the importance-sampled
    policy gradient); only the rule that switches it off differs from PPO's. At blocked tokens the
    loss and its gradient are exactly 0.

    Source: book eq. (dppo); Qi et al. 2026, "Rethinking the Trust Region in LLM Reinforcement
    Learning" (DPPO), arXiv:2602.04879 (the masked DPPO surrogate, negated).

    Args:
        log_probs: (..., T) log π_θ, nats.
        old_log_probs: (..., T) log π_old (sampling policy), nats.
        advantages: broadcastable to (..., T).
        threshold: τ > 0 (see :func:`dppo_mask`).
        divergence: "binary_tv" or "binary_kl".
    Returns:
        (..., T) unreduced loss; reduce with :mod:`rlbook.aggregation`.
    Gradient:
        through ``log_probs`` only: −M·ρ·Â·∇log π; none through M, ``old_log_probs``, ``advantages``.
    Raises:
        ValueError: as :func:`dppo_mask`.
    See also:
        dppo_mask, rlbook.clipped_surrogate_loss_masked
    Example:
        >>> lp, old = torch.tensor([0.5, 0.5]).log(), torch.tensor([0.3, 0.3]).log()
        >>> dppo_loss(lp, old, torch.tensor([1.0, -1.0]), threshold=0.1)
        tensor([-0.0000, 1.6667])
    """
    keep = dppo_mask(log_probs, old_log_probs, advantages, threshold, divergence)
    ratio, advantages = _ratio_and_advantages(log_probs, old_log_probs, advantages)
    return -keep.to(ratio.dtype) * ratio * advantages
