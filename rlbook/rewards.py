"""Reward shaping for verifiable tasks: DAPO's soft overlong punishment."""

from __future__ import annotations

import torch

from rlbook import _checks

__all__ = ["overlong_penalty"]


def overlong_penalty(lengths, max_length: int, cache_length: int) -> torch.Tensor:
    """DAPO's soft overlong punishment, a length-dependent reward added to the task reward.

    R_len(L) = 0                                   if L ≤ L_max − L_cache
             = ((L_max − L_cache) − L) / L_cache   if L_max − L_cache < L ≤ L_max
             = −1                                  if L > L_max

    The penalty ramps linearly from 0 to −1 over the last ``cache_length`` tokens of the budget,
    so a slightly long answer is nudged rather than punished as hard as a truncated one.

    Source: book eq. (overlong); Yu et al. 2025 (DAPO), arXiv:2503.14476, eq. 13
    (soft overlong punishment).

    Args:
        lengths: (...) completion lengths L ≥ 0, in tokens (int or float tensor, array or list).
        max_length: L_max > 0, in tokens.
        cache_length: L_cache with 0 < L_cache ≤ L_max, in tokens.
    Returns:
        (...) float tensor (default dtype, or lengths' float dtype) of penalties in [−1, 0].
    Gradient:
        none intended (a reward; piecewise linear in lengths if they are a float tensor).
    Raises:
        ValueError: negative or non-finite lengths; max_length ≤ 0; cache_length outside (0, L_max].
    See also:
        rlbook.reference.overlong_penalty_loop
    Example:
        >>> overlong_penalty(torch.tensor([10, 16, 18, 20, 21]), max_length=20, cache_length=4)
        tensor([ 0.0000,  0.0000, -0.5000, -1.0000, -1.0000])
    """
    lengths = _checks.as_float_tensor("lengths", lengths)
    if lengths.numel() and (lengths < 0).any():
        raise ValueError("`lengths` must be non-negative token counts")
    _checks.check_positive("max_length", max_length)
    _checks.check_in_range("cache_length", cache_length, 0.0, float(max_length), low_inclusive=False)
    soft_start = max_length - cache_length
    ramp = (soft_start - lengths) / cache_length
    penalty = torch.where(lengths <= soft_start, torch.zeros_like(lengths), ramp)
    return torch.where(lengths > max_length, torch.full_like(lengths, -1.0), penalty)
