"""Sequence-level importance ratios: GSPO and its GSPO-token variant (Part III).

PPO and GRPO weight every token by its own ratio π_θ(y_t)/π_old(y_t). GSPO argues that with one
reward per *sequence* the importance weight should be a sequence quantity too, and uses the
length-normalised sequence likelihood ratio (the geometric mean of the token ratios)

    s_i = (π_θ(y_i|x) / π_old(y_i|x))^{1/|y_i|} = exp( (1/|y_i|) Σ_t log π_θ(y_{i,t}) − log π_old(y_{i,t}) ),

clipped once per sequence. The loss below is still returned per token (zero on padding) so that it
composes with :mod:`rlbook.aggregation`: :func:`rlbook.seq_mean_token_mean` of it is GSPO's
objective, negated.
"""

from __future__ import annotations

import torch

from rlbook import _checks
from rlbook.losses import _check_broadcasts_to, _clip_bounds

__all__ = ["gspo_sequence_log_ratio", "gspo_loss"]


def _sequence_inputs(log_probs, old_log_probs, completion_mask):
    """Validate (B, T) log-probabilities and mask; return them with ``old_log_probs`` detached."""
    log_probs = _checks.as_float_tensor("log_probs", log_probs)
    if log_probs.dim() != 2:
        raise ValueError(f"`log_probs` must have shape (B, T) (one row per completion); got {tuple(log_probs.shape)}")
    old_log_probs = _checks.as_float_tensor("old_log_probs", old_log_probs, dtype=log_probs.dtype).detach()
    _checks.check_same_shape(log_probs=log_probs, old_log_probs=old_log_probs)
    mask = _checks.check_bool_like("completion_mask", completion_mask, shape=log_probs.shape).to(log_probs.device)
    empty = ~mask.any(dim=-1)
    if empty.any():
        rows = empty.nonzero().flatten()[:4].tolist()
        raise ValueError(
            f"`completion_mask` must select at least one token in every row (|y_i| ≥ 1); rows {rows} are empty"
        )
    return log_probs, old_log_probs.to(log_probs.device), mask


def gspo_sequence_log_ratio(log_probs, old_log_probs, completion_mask) -> torch.Tensor:
    """GSPO's length-normalised sequence log-ratio, log s_i (one number per completion).

    log s_i = (1/|y_i|) Σ_t m_{i,t} (log π_θ(y_{i,t}) − log π_old(y_{i,t})),   |y_i| = Σ_t m_{i,t}

    s_i = exp(log s_i) is the geometric mean of the token ratios ρ_{i,t}, i.e. the |y_i|-th root of
    the sequence likelihood ratio π_θ(y_i|x)/π_old(y_i|x): it does not grow with the length.

    Source: book eq. (gspo-ratio); Zheng et al. 2025, "Group Sequence Policy Optimization",
    arXiv:2507.18071, §4.1, eq. 7.

    Args:
        log_probs: (B, T) log π_θ of the sampled tokens, nats.
        old_log_probs: (B, T) log π_old of the same tokens, nats (detached).
        completion_mask: (B, T) bool, True on completion tokens; every row needs one.
    Returns:
        (B,) log s_i, nats per token.
    Gradient:
        through ``log_probs`` only: ∂ log s_i / ∂ log π_θ(y_{i,t}) = m_{i,t}/|y_i|; padding gets 0.
    Raises:
        ValueError: log_probs not 2-D; shapes differ; mask not boolean; a row with no valid token
            (``completion_mask`` is named); NaN or inf in an input.
    See also:
        gspo_loss, rlbook.log_ratio, rlbook.reference.gspo_sequence_log_ratio_loop
    Example:
        >>> lp = torch.tensor([[0.2, 0.4, 9.0]]).log()
        >>> old = torch.tensor([[0.1, 0.1, 1.0]]).log()
        >>> gspo_sequence_log_ratio(lp, old, torch.tensor([[True, True, False]])).exp()  # √(2·4)
        tensor([2.8284])
    """
    log_probs, old_log_probs, mask = _sequence_inputs(log_probs, old_log_probs, completion_mask)
    token_log_ratio = torch.where(mask, log_probs - old_log_probs, torch.zeros_like(log_probs))
    return token_log_ratio.sum(dim=-1) / mask.sum(dim=-1).to(log_probs.dtype)


def _gspo_advantages(advantages, shape: torch.Size, token_level: bool, dtype, device) -> torch.Tensor:
    """Detached advantages: (B, 1) for the sequence form, broadcastable to (B, T) for GSPO-token."""
    advantages = _checks.as_float_tensor("advantages", advantages, dtype=dtype).detach().to(device)
    if token_level:
        _check_broadcasts_to("advantages", advantages, shape)
        return advantages
    if advantages.shape not in (torch.Size([shape[0]]), torch.Size([shape[0], 1])):
        raise ValueError(
            f"`advantages` must have shape (B,) or (B, 1) = ({shape[0]},) for sequence-level GSPO "
            f"(pass token_level=True for per-token advantages); got {tuple(advantages.shape)}"
        )
    return advantages.reshape(-1, 1)


def gspo_loss(
    log_probs,
    old_log_probs,
    advantages,
    completion_mask,
    clip_eps_low: float = 3e-4,
    clip_eps_high: float | None = None,
    token_level: bool = False,
) -> torch.Tensor:
    """Per-token GSPO loss (minimise): one clipped sequence ratio for all tokens of a completion.

    sequence level:  loss_{i,t} = −m_{i,t} · min(s_i·Â_i, clip(s_i, 1−ε_low, 1+ε_high)·Â_i)
    GSPO-token:      s_{i,t} = sg[s_i]·π_θ(y_{i,t})/sg[π_θ(y_{i,t})],
                     loss_{i,t} = −m_{i,t} · min(s_{i,t}·Â_{i,t}, clip(s_{i,t}, 1−ε_low, 1+ε_high)·Â_{i,t})

    with s_i = exp(:func:`gspo_sequence_log_ratio`). Every valid token of row i carries the row's
    loss, so ``rlbook.seq_mean_token_mean(loss, completion_mask)`` =
    −(1/B) Σ_i min(s_i Â_i, clip(s_i) Â_i) = −J_GSPO. s_{i,t} has the value s_i; only its gradient
    differs: ∇s_{i,t} = s_i ∇log π_θ(y_{i,t}). With Â_{i,t} = Â_i in every row GSPO-token has the
    same value and gradient as the sequence form, and per-token advantages (multi-turn credit) are
    the reason it exists. The clip is decided per sequence: when s_i leaves the band in the
    direction Â pushes it, the whole row's gradient is exactly 0. The paper's ε are tiny because
    s_i is a per-token geometric mean (it used ε_low = 3e-4, ε_high = 4e-4).

    Source: book eq. (gspo); Zheng et al. 2025, "Group Sequence Policy Optimization",
    arXiv:2507.18071, §4.1 eq. 5–7 (GSPO, negated) and §4.3 (GSPO-token).

    Args:
        log_probs: (B, T) log π_θ of the sampled tokens, nats.
        old_log_probs: (B, T) log π_old, nats (detached).
        advantages: (B,) or (B, 1) sequence advantages Â_i; with ``token_level=True`` any shape
            broadcasting to (B, T), e.g. (B, T) per-token Â_{i,t}.
        completion_mask: (B, T) bool, True on completion tokens; every row needs one.
        clip_eps_low: ε_low ≥ 0, finite, dimensionless (on the scale of s_i, not of a token ratio).
        clip_eps_high: ε_high ≥ 0, finite; None means ε_high = ε_low.
        token_level: False for GSPO, True for GSPO-token.
    Returns:
        (B, T) unreduced loss, 0 at padding.
    Gradient:
        through ``log_probs`` only. Sequence form: ∂loss_{i,t'}/∂log π_θ(y_{i,t}) = −m·Â_i·s_i/|y_i|
        per valid pair (t', t) inside the band (so seq_mean_token_mean gives −Â_i s_i/(B|y_i|));
        GSPO-token: −Â_{i,t}·s_i at token t itself; exactly 0 for rows where the clip is active.
    Raises:
        ValueError: shapes (advantages (B,)/(B, 1) unless token_level), a row with no valid token,
            ε negative, NaN or infinite (each names its argument).
    See also:
        gspo_sequence_log_ratio, rlbook.clipped_surrogate_loss, rlbook.seq_mean_token_mean,
        rlbook.reference.gspo_sequence_loss_loop
    Example:
        >>> lp, old = torch.tensor([[-1.0, -2.0]]), torch.tensor([[-1.0, -2.0]])
        >>> gspo_loss(lp, old, torch.tensor([0.5]), torch.tensor([[True, False]]))
        tensor([[-0.5000,  0.0000]])
    """
    low, high = _clip_bounds(clip_eps_low, clip_eps_high)
    log_probs, old_log_probs, mask = _sequence_inputs(log_probs, old_log_probs, completion_mask)
    advantages = _gspo_advantages(advantages, log_probs.shape, token_level, log_probs.dtype, log_probs.device)
    seq_ratio = gspo_sequence_log_ratio(log_probs, old_log_probs, mask).exp()[:, None]  # (B, 1)
    if token_level:  # value s_i, gradient s_i·∇log π_θ(y_{i,t})
        ratio = seq_ratio.detach() * (log_probs - log_probs.detach()).exp()  # (B, T)
    else:
        ratio = seq_ratio  # (B, 1), broadcast over the row's tokens
    per_token = -torch.minimum(ratio * advantages, torch.clamp(ratio, low, high) * advantages)
    per_token = per_token.expand(log_probs.shape)
    return torch.where(mask, per_token, torch.zeros_like(per_token))
