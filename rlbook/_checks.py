"""Input validation shared by every public function.

Each helper raises ``ValueError`` whose message names the offending argument and states what was
expected, so a learner sees *which* input is wrong instead of a silent wrong number or a deep
broadcasting error. No ``assert`` is used for user errors (asserts vanish under ``python -O``).
"""

from __future__ import annotations

import math
from typing import Sequence

import torch

__all__ = [
    "as_float_tensor",
    "check_nonempty",
    "check_min_ndim",
    "check_same_shape",
    "check_last_dim",
    "check_in_range",
    "check_positive",
    "check_probabilities",
    "check_bool_like",
]


def as_float_tensor(name: str, x, dtype: torch.dtype | None = None) -> torch.Tensor:
    """Convert ``x`` to a floating tensor (default dtype kept if already floating).

    Raises:
        ValueError: ``x`` cannot be converted to a numeric tensor, or it holds NaN/inf.
    """
    if not isinstance(x, torch.Tensor):
        try:
            x = torch.as_tensor(x, dtype=dtype or torch.get_default_dtype())
        except (TypeError, ValueError, RuntimeError) as err:
            raise ValueError(f"`{name}` must be numeric (a tensor, array or list of numbers): {err}") from None
    elif not torch.is_floating_point(x):
        x = x.to(dtype or torch.get_default_dtype())
    elif dtype is not None:
        x = x.to(dtype)
    if x.numel() and not torch.isfinite(x).all():
        raise ValueError(f"`{name}` contains NaN or infinite values")
    return x


def broadcasts_to(shape, target_shape) -> bool:
    """True if a tensor of ``shape`` broadcasts to ``target_shape`` without enlarging it."""
    try:
        return tuple(torch.broadcast_shapes(tuple(shape), tuple(target_shape))) == tuple(target_shape)
    except RuntimeError:
        return False


def check_nonempty(name: str, x: torch.Tensor) -> None:
    """Raise ``ValueError`` if ``x`` has no elements."""
    if x.numel() == 0:
        raise ValueError(f"`{name}` is empty (shape {tuple(x.shape)}); expected at least one element")


def check_min_ndim(name: str, x: torch.Tensor, ndim: int, layout: str = "(..., T)") -> None:
    """Raise ``ValueError`` if ``x`` has fewer than ``ndim`` dimensions."""
    if x.dim() < ndim:
        raise ValueError(f"`{name}` must have shape {layout} with at least {ndim} dim(s); got {tuple(x.shape)}")


def check_same_shape(**named: torch.Tensor) -> None:
    """Raise ``ValueError`` unless every tensor passed by keyword has the same shape.

    Example:
        >>> check_same_shape(rewards=torch.zeros(2, 3), terminated=torch.zeros(2, 4))
        Traceback (most recent call last):
        ValueError: `terminated` must have the same shape as `rewards` (2, 3); got (2, 4)
    """
    items = [(k, v) for k, v in named.items() if v is not None]
    if not items:
        return
    ref_name, ref = items[0]
    for name, x in items[1:]:
        if tuple(x.shape) != tuple(ref.shape):
            raise ValueError(
                f"`{name}` must have the same shape as `{ref_name}` {tuple(ref.shape)}; got {tuple(x.shape)}"
            )


def check_last_dim(name: str, x: torch.Tensor, size: int, layout: str) -> None:
    """Raise ``ValueError`` unless ``x.shape[-1] == size``."""
    if x.dim() == 0 or x.shape[-1] != size:
        raise ValueError(f"`{name}` must have shape {layout} with last dim {size}; got {tuple(x.shape)}")


def check_in_range(
    name: str,
    value: float,
    low: float = -math.inf,
    high: float = math.inf,
    low_inclusive: bool = True,
    high_inclusive: bool = True,
) -> None:
    """Raise ``ValueError`` unless ``low <= value <= high`` (bounds inclusive by default).

    Example:
        >>> check_in_range("gamma", -0.1, 0.0, 1.0)
        Traceback (most recent call last):
        ValueError: `gamma` must be in [0.0, 1.0]; got -0.1
    """
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"`{name}` must be a number; got {value!r}") from None
    ok_low = v >= low if low_inclusive else v > low
    ok_high = v <= high if high_inclusive else v < high
    if math.isnan(v) or not (ok_low and ok_high):
        lb = "[" if low_inclusive else "("
        rb = "]" if high_inclusive else ")"
        raise ValueError(f"`{name}` must be in {lb}{low}, {high}{rb}; got {value}")


def check_positive(name: str, value: float) -> None:
    """Raise ``ValueError`` unless ``value > 0``."""
    check_in_range(name, value, 0.0, math.inf, low_inclusive=False)


def check_probabilities(name: str, probs: torch.Tensor, dim: int = -1, atol: float = 1e-6) -> None:
    """Raise ``ValueError`` unless ``probs`` is non-negative and sums to 1 along ``dim``."""
    if probs.numel() == 0:
        raise ValueError(f"`{name}` is empty; expected a probability vector")
    if (probs < 0).any():
        raise ValueError(f"`{name}` must be non-negative probabilities")
    sums = probs.sum(dim=dim)
    if not torch.allclose(sums, torch.ones_like(sums), atol=atol):
        raise ValueError(f"`{name}` must sum to 1 along dim {dim}; got sums {sums.flatten()[:4].tolist()}")


def check_bool_like(name: str, x, shape: Sequence[int] | None = None) -> torch.Tensor:
    """Return ``x`` as a bool tensor; raise ``ValueError`` if its shape differs from ``shape``."""
    x = torch.as_tensor(x)
    if x.dtype != torch.bool:
        if x.numel() and not ((x == 0) | (x == 1)).all():
            raise ValueError(f"`{name}` must hold booleans (0/1); got other values")
        x = x.bool()
    if shape is not None and tuple(x.shape) != tuple(shape):
        raise ValueError(f"`{name}` must have shape {tuple(shape)}; got {tuple(x.shape)}")
    return x
