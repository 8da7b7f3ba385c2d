"""Reducing per-token losses to one number: masked means and the GRPO / DAPO / Dr. GRPO aggregations.

Every loss in :mod:`rlbook.losses` returns *unreduced* per-token values ``(B, T)``; a boolean
``completion_mask`` ``(B, T)`` marks the real completion tokens (padding is False). This module is
the only place where those values are reduced. The three aggregations differ only in the
normaliser, and each is named after it:

================================  =======================================  ======================
function                          normaliser of Σ_{i,t} loss_{i,t}         used by
================================  =======================================  ======================
``seq_mean_token_mean``           B · |o_i|  (per sequence, then mean)     GRPO (DeepSeekMath)
``token_mean``                    Σ_i |o_i|  (all tokens of the batch)     DAPO
``fixed_length_mean``             B · L_max  (a constant)                  Dr. GRPO
``prompt_mean``                   P · N_p  (per prompt group, then mean)   ScaleRL
================================  =======================================  ======================

:func:`per_token_weights` returns the weight w_{i,t} with ``aggregate = Σ w_{i,t} · loss_{i,t}``,
which is what the book plots to show *which tokens* each choice emphasises.

The masked reductions underneath: :func:`masked_sum`, :func:`masked_mean` (NaN on a slice with no
element, as ``torch.mean`` of nothing), :func:`masked_normalize` (masked sum / a constant, the
course-standard name; see :mod:`rlbook.steps`) and :func:`masked_whiten` (subtract the mean, divide
by the std; TRL's name).
"""

from __future__ import annotations

import torch

from rlbook import _checks

__all__ = [
    "masked_sum",
    "masked_mean",
    "masked_normalize",
    "masked_whiten",
    "seq_mean_token_mean",
    "token_mean",
    "fixed_length_mean",
    "prompt_mean",
    "per_token_weights",
    "AGGREGATIONS",
]


def _masked_inputs(x, mask, x_name: str = "x", mask_name: str = "mask", allow_empty: bool = False):
    """Return ``x`` as a float tensor and ``mask`` as a bool tensor of the same shape."""
    if not isinstance(x, torch.Tensor):
        x = _checks.as_float_tensor(x_name, x)
    elif not torch.is_floating_point(x):
        x = x.to(torch.get_default_dtype())
    mask = _checks.check_bool_like(mask_name, mask)
    if tuple(mask.shape) != tuple(x.shape):
        raise ValueError(f"`{mask_name}` must have the same shape as `{x_name}` {tuple(x.shape)}; got {tuple(mask.shape)}")
    if not allow_empty and not mask.any():
        raise ValueError(f"`{mask_name}` selects no element (all False); expected at least one True")
    return x, mask.to(x.device)


def _loss_and_mask(loss, completion_mask):
    """Validate a per-token ``loss`` (B, T) and its ``completion_mask`` (B, T)."""
    loss, completion_mask = _masked_inputs(loss, completion_mask, "loss", "completion_mask")
    if loss.dim() != 2:
        raise ValueError(f"`loss` must have shape (B, T) (per-token, unreduced); got {tuple(loss.shape)}")
    return loss, completion_mask


def masked_sum(x, mask, dim=None) -> torch.Tensor:
    """Sum of the elements of ``x`` where ``mask`` is True.

    Σ x·m   (over all elements, or along ``dim``)

    Masked-out entries are replaced by 0 with ``torch.where``, so NaN or inf in padding never leaks
    into the result or its gradient. A slice (or a whole tensor) with no True element sums to 0,
    like ``torch.sum`` of an empty set.

    Source: book eq. (masked-mean); standard.

    Args:
        x: (...) values.
        mask: (...) bool (or 0/1), same shape as x.
        dim: None (all elements) or an int / tuple of dims.
    Returns:
        a 0-d tensor, or x reduced along ``dim``.
    Gradient:
        through x, 1 where mask is True and 0 elsewhere.
    Raises:
        ValueError: mask shape differs from x's, or mask is not boolean (or 0/1).
    See also:
        masked_mean, masked_normalize
    Example:
        >>> masked_sum(torch.tensor([1., 2., 3.]), torch.tensor([True, False, True]))
        tensor(4.)
    """
    x, mask = _masked_inputs(x, mask, allow_empty=True)
    kept = torch.where(mask, x, torch.zeros_like(x))
    return kept.sum() if dim is None else kept.sum(dim=dim)


def masked_mean(x, mask, dim=None) -> torch.Tensor:
    """Mean of the elements of ``x`` where ``mask`` is True.

    Σ x·m / Σ m   (over all elements, or along ``dim``)

    Empty slices. Along ``dim``, a slice with no True element (an empty completion, say) gets
    NaN = 0/0, as ``torch.mean`` of an empty tensor does; the other slices are unaffected, so one
    empty row never stops a batch (drop it with ``torch.nanmean`` or a row mask). Its gradient is
    still 0 on every element of ``x`` (all its elements are masked out). With ``dim=None`` an
    all-False mask raises instead: a single undefined number is almost always a bug upstream.

    Source: book eq. (masked-mean); standard (CS336 assignment 5 and TRL's ``masked_mean``).

    Args:
        x: (...) values.
        mask: (...) bool (or 0/1), same shape as x.
        dim: None (all elements) or an int / tuple of dims.
    Returns:
        a 0-d tensor, or x reduced along ``dim`` (NaN where a slice is empty).
    Gradient:
        through x, 1/Σm at each selected element; 0 elsewhere (also in empty slices).
    Raises:
        ValueError: shape mismatch, non-boolean mask, or (``dim=None``) mask all False.
    See also:
        masked_sum, masked_normalize, seq_mean_token_mean, token_mean
    Example:
        >>> masked_mean(torch.tensor([1., 2., 3.]), torch.tensor([True, False, True]))
        tensor(2.)
        >>> masked_mean(torch.tensor([[1., 3.], [5., 7.]]), torch.tensor([[True, True], [False, False]]), dim=-1)
        tensor([2., nan])
    """
    x, mask = _masked_inputs(x, mask, allow_empty=dim is not None)
    counts = mask.sum() if dim is None else mask.sum(dim=dim)
    return masked_sum(x, mask, dim=dim) / counts.to(x.dtype)  # 0/0 = NaN on an empty slice


def masked_normalize(tensor, mask, normalize_constant=1.0, dim=None) -> torch.Tensor:
    """Masked sum divided by a constant: the course-standard normaliser of an SFT or GRPO loss.

    Σ tensor·m / c   (over all elements, or along ``dim``),  c = ``normalize_constant``

    Unlike :func:`masked_mean` the divisor does not depend on the mask, so every selected element
    weighs 1/c whatever the length of its row (the Dr. GRPO choice, with c = the generation
    budget). An all-False slice gives 0. Not to be confused with :func:`masked_whiten`, which
    standardises (this function had that name in earlier versions of the library).

    Source: book eq. (masked-mean); Stanford CS336 (2025) assignment 5, ``masked_normalize``;
    Liu et al. 2025 (Dr. GRPO), arXiv:2503.20783, Sec. 3.2 (a constant normaliser).

    Args:
        tensor: (...) values, e.g. per-token log-probabilities or losses.
        mask: (...) bool (or 0/1), same shape as ``tensor``.
        normalize_constant: c > 0 (a number or a 0-d tensor, treated as a constant), in tokens.
        dim: None (all elements) or an int / tuple of dims.
    Returns:
        a 0-d tensor, or ``tensor`` reduced along ``dim``.
    Gradient:
        through ``tensor``: 1/c at selected elements, 0 elsewhere; none into ``normalize_constant``.
    Raises:
        ValueError: mask shape differs or mask not boolean; normalize_constant ≤ 0 or not finite.
    See also:
        masked_sum, masked_mean, rlbook.sft_microbatch_train_step
    Example:
        >>> masked_normalize(torch.tensor([[1., 2.], [3., 4.]]), torch.tensor([[True, False], [True, True]]), 2.0, dim=-1)
        tensor([0.5000, 3.5000])
    """
    if isinstance(normalize_constant, torch.Tensor):
        if normalize_constant.numel() != 1:
            raise ValueError(f"`normalize_constant` must be a number or a 0-d tensor; got shape {tuple(normalize_constant.shape)}")
        normalize_constant = normalize_constant.detach()
    value = float(normalize_constant)
    if not (value > 0 and value != float("inf")):
        raise ValueError(f"`normalize_constant` must be a finite number > 0; got {value}")
    return masked_sum(tensor, mask, dim=dim) / normalize_constant


def masked_whiten(x, mask, eps: float = 1e-8) -> torch.Tensor:
    """Whiten ``x`` over its masked elements: subtract their mean, divide by their std.

    x̃ = (x − μ_m) / (σ_m + eps),  μ_m, σ_m the mean and population std over elements with m = 1

    Masked-out positions of the result are 0. A constant selection gives exact zeros.

    Source: book eq. (masked-mean); the "advantage whitening" of PPO implementations
    (TRL's ``masked_whiten``, whose name this takes), here with the population std.

    Args:
        x: (...) values.
        mask: (...) bool (or 0/1), same shape as x.
        eps: ≥ 0, added to the std, in x's units.
    Returns:
        (...) same shape as x.
    Gradient:
        through x, including through μ_m and σ_m.
    Raises:
        ValueError: shape mismatch, mask all False, or eps < 0.
    See also:
        rlbook.group_relative_advantages (the per-group version), masked_normalize (a masked sum / c)
    Example:
        >>> masked_whiten(torch.tensor([1., 3., 100.]), torch.tensor([True, True, False]))
        tensor([-1.,  1.,  0.])
    """
    x, mask = _masked_inputs(x, mask)
    _checks.check_in_range("eps", eps, 0.0)
    mean = masked_mean(x, mask)
    var = masked_mean((x - mean) ** 2, mask)
    if var.item() == 0.0:
        return torch.zeros_like(x)
    whitened = (x - mean) / (var.sqrt() + eps)
    return torch.where(mask, whitened, torch.zeros_like(x))


def seq_mean_token_mean(loss, completion_mask) -> torch.Tensor:
    """GRPO's sample-level aggregation: average each sequence over its tokens, then over sequences.

    L = 1/B Σ_i  1/|o_i| Σ_t m_{i,t} ℓ_{i,t}

    Every completion weighs the same, so a token of a long completion weighs less than a token of
    a short one (weight 1/(B·|o_i|)). Dr. GRPO shows this favours short correct and long wrong
    answers. A row with no token contributes 0 (but still counts in B).

    Source: book eq. (agg-grpo); Shao et al. 2024 (DeepSeekMath), arXiv:2402.03300, eq. 21
    (the 1/G Σ_i 1/|o_i| Σ_t of the GRPO objective).

    Args:
        loss: (B, T) per-token loss, unreduced.
        completion_mask: (B, T) bool, True on completion tokens.
    Returns:
        0-d tensor.
    Gradient:
        through loss; ∂L/∂ℓ_{i,t} = m_{i,t} / (B·|o_i|).
    Raises:
        ValueError: loss not 2-D, mask shape differs, or mask all False.
    See also:
        token_mean, fixed_length_mean, per_token_weights, rlbook.reference.seq_mean_token_mean_loop
    Example:
        >>> loss = torch.tensor([[1., 1., 1., 1.], [4., 0., 0., 0.]])
        >>> mask = torch.tensor([[True, True, True, True], [True, False, False, False]])
        >>> seq_mean_token_mean(loss, mask)
        tensor(2.5000)
    """
    loss, completion_mask = _loss_and_mask(loss, completion_mask)
    lengths = completion_mask.sum(dim=-1).clamp(min=1).to(loss.dtype)
    per_sequence = masked_sum(loss, completion_mask, dim=-1) / lengths
    return per_sequence.mean()


def token_mean(loss, completion_mask, num_tokens=None) -> torch.Tensor:
    """DAPO's token-level aggregation: every completion token of the batch weighs the same.

    L = Σ_{i,t} m_{i,t} ℓ_{i,t} / N,   N = Σ_{i,t} m_{i,t} (or the given ``num_tokens``)

    For gradient accumulation over micro-batches pass ``num_tokens`` = the token count of the
    *whole* batch: the micro-batch values then add up to the full-batch value exactly. (Dividing
    each micro-batch by its own count and averaging does not.)

    Source: book eq. (agg-dapo); Yu et al. 2025 (DAPO), arXiv:2503.14476, eq. 12 (token-level
    policy gradient loss).

    Args:
        loss: (B, T) per-token loss, unreduced.
        completion_mask: (B, T) bool, True on completion tokens.
        num_tokens: None (count this batch's mask) or N > 0, the global token count.
    Returns:
        0-d tensor.
    Gradient:
        through loss; ∂L/∂ℓ_{i,t} = m_{i,t} / N.
    Raises:
        ValueError: loss not 2-D, mask shape differs, mask all False, or num_tokens ≤ 0.
    See also:
        seq_mean_token_mean, fixed_length_mean, rlbook.reference.token_mean_loop
    Example:
        >>> loss = torch.tensor([[1., 1., 1., 1.], [4., 0., 0., 0.]])
        >>> mask = torch.tensor([[True, True, True, True], [True, False, False, False]])
        >>> token_mean(loss, mask)
        tensor(1.6000)
    """
    loss, completion_mask = _loss_and_mask(loss, completion_mask)
    if num_tokens is None:
        num_tokens = completion_mask.sum()
    else:
        _checks.check_positive("num_tokens", float(num_tokens))
    return masked_sum(loss, completion_mask) / num_tokens


def fixed_length_mean(loss, completion_mask, max_length: int, num_sequences=None) -> torch.Tensor:
    """Dr. GRPO's aggregation: sum every token's loss and divide by a constant, B · L_max.

    L = Σ_{i,t} m_{i,t} ℓ_{i,t} / (B · L_max)

    The normaliser depends on neither the lengths nor the padding, so every token weighs the same
    and the weight does not change from batch to batch. With micro-batches, pass the global
    ``num_sequences`` so the micro-batch values add up to the full-batch value.

    Source: book eq. (agg-drgrpo); Liu et al. 2025 (Dr. GRPO, "Understanding R1-Zero-Like
    Training"), arXiv:2503.20783, eq. 3 and §3.2 (divide by the generation budget MAX_TOKENS).

    Args:
        loss: (B, T) per-token loss, unreduced.
        completion_mask: (B, T) bool, True on completion tokens.
        max_length: L_max ≥ the longest completion, in tokens (the generation budget).
        num_sequences: None (this batch's B) or the global number of sequences.
    Returns:
        0-d tensor.
    Gradient:
        through loss; ∂L/∂ℓ_{i,t} = m_{i,t} / (B·L_max).
    Raises:
        ValueError: loss not 2-D, mask shape differs or all False, max_length shorter than a
            completion, or num_sequences ≤ 0.
    See also:
        seq_mean_token_mean, token_mean, rlbook.reference.fixed_length_mean_loop
    Example:
        >>> loss = torch.tensor([[1., 1., 1., 1.], [4., 0., 0., 0.]])
        >>> mask = torch.tensor([[True, True, True, True], [True, False, False, False]])
        >>> fixed_length_mean(loss, mask, max_length=4)
        tensor(1.)
    """
    loss, completion_mask = _loss_and_mask(loss, completion_mask)
    longest = int(completion_mask.sum(dim=-1).max())
    _checks.check_in_range("max_length", max_length, max(longest, 1))
    if num_sequences is None:
        num_sequences = loss.shape[0]
    else:
        _checks.check_positive("num_sequences", float(num_sequences))
    return masked_sum(loss, completion_mask) / (num_sequences * max_length)


def _check_group_size(group_size, batch: int) -> int:
    """Raise ValueError unless ``group_size`` is a positive integer dividing ``batch``."""
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1:
        raise ValueError(f"`group_size` must be a positive integer; got {group_size!r}")
    if batch % group_size:
        raise ValueError(
            f"`group_size` ({group_size}) must divide the number of rows B = {batch}; "
            "lay completions out as num_prompts × group_size"
        )
    return group_size


def prompt_mean(loss, completion_mask, group_size: int) -> torch.Tensor:
    """ScaleRL's prompt-level aggregation: a token mean within each prompt's group, then a mean over prompts.

    L = 1/P Σ_p  1/N_p Σ_{i∈p} Σ_t m_{i,t} ℓ_{i,t},   N_p = Σ_{i∈p} Σ_t m_{i,t},   P = B / G

    The rows are P groups of G consecutive completions of the same prompt. Inside a prompt every
    token weighs the same (as in DAPO's token mean, so long answers are not down-weighted against
    their siblings); across prompts every prompt weighs the same (as GRPO weighs sequences), so a
    prompt with long answers does not dominate the batch. G = 1 gives :func:`seq_mean_token_mean`;
    P = 1 gives :func:`token_mean`. A prompt with no token contributes 0 (but counts in P).

    Source: book eq. (agg-prompt); Khatri et al. 2025, "The Art of Scaling Reinforcement Learning
    Compute for LLMs" (ScaleRL), arXiv:2510.13786, loss aggregation ("prompt average").

    Args:
        loss: (B, T) per-token loss, unreduced.
        completion_mask: (B, T) bool, True on completion tokens.
        group_size: G ≥ 1 completions per prompt, group-contiguous rows; must divide B.
    Returns:
        0-d tensor.
    Gradient:
        through loss; ∂L/∂ℓ_{i,t} = m_{i,t} / (P·N_p), p the prompt of row i.
    Raises:
        ValueError: loss not 2-D, mask shape differs or all False, group_size not a positive
            integer dividing B.
    See also:
        seq_mean_token_mean, token_mean, per_token_weights, rlbook.reference.prompt_mean_loop
    Example:
        >>> loss = torch.tensor([[1., 1., 1., 1.], [4., 0., 0., 0.], [2., 2., 0., 0.], [6., 0., 0., 0.]])
        >>> mask = torch.tensor([[1, 1, 1, 1], [1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 0, 0]]).bool()
        >>> prompt_mean(loss, mask, group_size=2)  # (8/5 + 10/3) / 2
        tensor(2.4667)
    """
    loss, completion_mask = _loss_and_mask(loss, completion_mask)
    group_size = _check_group_size(group_size, loss.shape[0])
    per_prompt_sum = masked_sum(loss, completion_mask, dim=-1).reshape(-1, group_size).sum(dim=-1)  # (P,)
    per_prompt_count = completion_mask.sum(dim=-1).reshape(-1, group_size).sum(dim=-1)  # (P,)
    return (per_prompt_sum / per_prompt_count.clamp(min=1).to(loss.dtype)).mean()


# Callables (loss, completion_mask) -> 0-d tensor. ``prompt_mean`` is left out: it also needs group_size.
AGGREGATIONS = {
    "seq_mean_token_mean": seq_mean_token_mean,
    "token_mean": token_mean,
    "fixed_length_mean": fixed_length_mean,
}


def per_token_weights(completion_mask, mode: str, max_length=None, dtype=None, group_size=None) -> torch.Tensor:
    """The weight w_{i,t} each token's loss gets under an aggregation: ``L = Σ w_{i,t} ℓ_{i,t}``.

    seq_mean_token_mean: w = m_{i,t} / (B·|o_i|)      (GRPO)
    token_mean:          w = m_{i,t} / Σ m            (DAPO)
    fixed_length_mean:   w = m_{i,t} / (B·L_max)      (Dr. GRPO)
    prompt_mean:         w = m_{i,t} / (P·N_p)        (ScaleRL; needs ``group_size``)

    These are also the gradients ∂L/∂ℓ_{i,t}, i.e. how hard each token is pushed (the tests
    check them against autograd through the aggregation functions).

    Source: book eq. (agg-weights); the three aggregations above.

    Args:
        completion_mask: (B, T) bool.
        mode: "seq_mean_token_mean", "token_mean", "fixed_length_mean" or "prompt_mean".
        max_length: L_max, needed for "fixed_length_mean" (default T).
        dtype: floating dtype of the result (default: torch's default dtype).
        group_size: G, needed for "prompt_mean" (a positive integer dividing B).
    Returns:
        (B, T) float weights, 0 on padding.
    Gradient:
        none (depends on the mask only).
    Raises:
        ValueError: mask not 2-D or all False; unknown mode; max_length too short; group_size
            missing or not dividing B for "prompt_mean".
    See also:
        seq_mean_token_mean, token_mean, fixed_length_mean, prompt_mean
    Example:
        >>> per_token_weights(torch.tensor([[True, True], [True, False]]), "seq_mean_token_mean")
        tensor([[0.2500, 0.2500],
                [0.5000, 0.0000]])
    """
    if mode not in AGGREGATIONS and mode != "prompt_mean":
        raise ValueError(f"`mode` must be one of {sorted(AGGREGATIONS) + ['prompt_mean']}; got {mode!r}")
    mask = _checks.check_bool_like("completion_mask", completion_mask)
    if mask.dim() != 2:
        raise ValueError(f"`completion_mask` must have shape (B, T); got {tuple(mask.shape)}")
    if not mask.any():
        raise ValueError("`completion_mask` selects no token (all False); expected at least one True")
    m = mask.to(dtype or torch.get_default_dtype())
    batch = mask.shape[0]
    if mode == "seq_mean_token_mean":
        return m / (batch * m.sum(dim=-1, keepdim=True).clamp(min=1))
    if mode == "token_mean":
        return m / m.sum()
    if mode == "prompt_mean":
        if group_size is None:
            raise ValueError("`group_size` is required for mode='prompt_mean'")
        group_size = _check_group_size(group_size, batch)
        per_prompt = m.reshape(batch // group_size, -1).sum(dim=-1).clamp(min=1)  # N_p, (P,)
        return m / ((batch // group_size) * per_prompt.repeat_interleave(group_size)[:, None])
    max_length = mask.shape[-1] if max_length is None else max_length
    _checks.check_in_range("max_length", max_length, max(int(m.sum(dim=-1).max()), 1))
    return m / (batch * max_length)
