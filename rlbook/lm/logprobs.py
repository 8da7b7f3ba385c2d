"""Scoring completions: per-token log-probabilities (and entropies) of a causal language model.

The logits at position t predict token t + 1, so the log-probability of completion token j is read
from the logits one column to its left. Log-softmax runs in float32 (bf16 logits lose ~3 digits).
"""

from __future__ import annotations

import torch

from rlbook import _checks
from rlbook.losses import entropy_from_logits

__all__ = ["token_log_probs", "completion_log_probs", "position_ids_from_mask"]


def token_log_probs(logits, tokens) -> torch.Tensor:
    """Log-probability of each chosen token under softmax(logits), in float32.

    log π(a_t) = log_softmax(logits_t)[a_t] = logits_t[a_t] − logsumexp(logits_t)

    Source: book eq. (lm-logprob); the softmax policy of seed 000 ("Vanilla Policy Gradients").

    Args:
        logits: (..., T, V) unnormalised scores.
        tokens: (..., T) integer ids in [0, V).
    Returns:
        (..., T) log-probabilities in nats, float32 (float64 if the logits are float64).
    Gradient:
        through ``logits``: ∂/∂logits_t = onehot(a_t) − softmax(logits_t).
    Raises:
        ValueError: shapes do not match, tokens not integers or out of [0, V).
    See also:
        rlbook.losses.entropy_from_logits, completion_log_probs
    Example:
        >>> token_log_probs(torch.zeros(1, 2, 4), torch.tensor([[0, 3]]))
        tensor([[-1.3863, -1.3863]])
    """
    if not isinstance(logits, torch.Tensor) or not torch.is_floating_point(logits):
        raise ValueError("`logits` must be a floating tensor of shape (..., T, V)")
    _checks.check_min_ndim("logits", logits, 2, "(..., T, V)")
    tokens = torch.as_tensor(tokens, device=logits.device)
    if tokens.dtype.is_floating_point or tokens.dtype == torch.bool:
        raise ValueError(f"`tokens` must hold integer ids; got dtype {tokens.dtype}")
    if tuple(tokens.shape) != tuple(logits.shape[:-1]):
        raise ValueError(f"`tokens` must have shape {tuple(logits.shape[:-1])} (logits without V); got {tuple(tokens.shape)}")
    vocab = logits.shape[-1]
    if tokens.numel() and (tokens.min() < 0 or tokens.max() >= vocab):
        raise ValueError(f"`tokens` must be ids in [0, {vocab}); got min {int(tokens.min())}, max {int(tokens.max())}")
    if logits.dtype != torch.float64:
        logits = logits.float()
    log_p = torch.log_softmax(logits, dim=-1)
    return log_p.gather(-1, tokens.long().unsqueeze(-1)).squeeze(-1)


def position_ids_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """Position ids that start at 0 on each row's first real (unpadded) token.

    position_t = (Σ_{s≤t} mask_s) − 1, clamped at 0 on left padding.

    Args:
        attention_mask: (B, L) bool or 0/1.
    Returns:
        (B, L) long.
    """
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def completion_log_probs(
    model,
    prompt_ids: torch.Tensor,
    completion_ids: torch.Tensor,
    prompt_mask: torch.Tensor | None = None,
    temperature: float = 1.0,
    forbidden_ids=(),
    completion_mask: torch.Tensor | None = None,
    with_entropy: bool = False,
):
    """One forward pass over prompt + completion; log π of each completion token (and entropy).

    The policy is softmax(logits / temperature) over the allowed tokens (``forbidden_ids`` get
    logit −∞), the same distribution :func:`rlbook.lm.sample_completions` draws from.

    Args:
        model: a causal LM returning ``.logits`` of shape (B, L, V).
        prompt_ids: (B, P) long, left-padded if widths differ.
        completion_ids: (B, T) long (positions after EOS hold padding; mask them in the loss).
        prompt_mask: (B, P) bool, False on left padding; None means no padding.
        temperature: τ > 0.
        forbidden_ids: token ids the sampler never emits (removed from the softmax here too).
        completion_mask: (B, T) bool; where False the outputs are exactly 0 (and padding is fed to
            the model as EOS, never as the pad id). None = every token counts.
        with_entropy: also return the per-token entropy of the policy.
    Returns:
        log_probs (B, T) float32, and entropy (B, T) float32 when ``with_entropy``.
    Gradient:
        through the model's parameters (run under ``torch.no_grad()`` for old/reference models).
    Raises:
        ValueError: batch sizes differ, a shape is wrong (``completion_mask`` must match
            ``completion_ids``), or temperature ≤ 0.
    """
    _checks.check_positive("temperature", temperature)
    for name, x in (("prompt_ids", prompt_ids), ("completion_ids", completion_ids)):
        if not isinstance(x, torch.Tensor) or x.dim() != 2:
            raise ValueError(f"`{name}` must be a 2-D tensor (B, L) of token ids")
    if completion_ids.shape[0] != prompt_ids.shape[0]:
        raise ValueError(f"`completion_ids` must have batch size {prompt_ids.shape[0]} (as `prompt_ids`); got {completion_ids.shape[0]}")
    if completion_ids.shape[1] == 0:
        raise ValueError("`completion_ids` is empty (T = 0); nothing to score")
    if completion_mask is not None:
        completion_mask = _checks.check_bool_like("completion_mask", completion_mask, completion_ids.shape)
        completion_mask = completion_mask.to(completion_ids.device)
        eos = getattr(getattr(model, "config", None), "eos_token_id", None)
        if isinstance(eos, int):
            completion_ids = torch.where(completion_mask, completion_ids, torch.full_like(completion_ids, eos))
    input_ids = torch.cat([prompt_ids, completion_ids], dim=1)  # (B, P+T)
    kwargs = {}
    if prompt_mask is not None and not bool(prompt_mask.all()):
        _checks.check_bool_like("prompt_mask", prompt_mask, prompt_ids.shape)
        full = torch.cat([prompt_mask.bool(), torch.ones_like(completion_ids, dtype=torch.bool)], dim=1)
        kwargs = {"attention_mask": full.long(), "position_ids": position_ids_from_mask(full)}
    logits = model(input_ids=input_ids, use_cache=False, **kwargs).logits  # (B, P+T, V)
    P = prompt_ids.shape[1]
    logits = logits[:, P - 1 : -1, :]  # (B, T, V): column t predicts completion token t
    forbidden = sorted({int(i) for i in forbidden_ids})
    if temperature != 1.0 or forbidden:
        logits = logits.float() / temperature
        if forbidden:
            # a large finite number, not -inf: the entropy 0·log 0 would be NaN
            logits = logits.index_fill(-1, torch.tensor(forbidden, device=logits.device), -1e9)
    log_probs = token_log_probs(logits, completion_ids)
    entropy = entropy_from_logits(logits) if with_entropy else None
    if completion_mask is not None:
        log_probs = torch.where(completion_mask, log_probs, torch.zeros_like(log_probs))
        entropy = None if entropy is None else torch.where(completion_mask, entropy, torch.zeros_like(entropy))
    return (log_probs, entropy) if with_entropy else log_probs
