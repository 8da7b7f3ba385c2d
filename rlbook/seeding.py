"""One place that seeds every random number generator the book uses."""

from __future__ import annotations

import random

import numpy as np
import torch

__all__ = ["seed_everything"]


def seed_everything(seed: int = 0, deterministic: bool = True) -> torch.Generator:
    """Seed Python's ``random``, NumPy's global RNG and torch (CPU and CUDA).

    Gymnasium environments are *not* seeded here: pass ``seed=`` to ``env.reset`` (the CartPole
    helpers in :mod:`rlbook.envs.cartpole` do this for you).

    Args:
        seed: a non-negative integer.
        deterministic: also ask torch for deterministic kernels where it has them (a warning, not
            an error, where it has none).
    Returns:
        A ``torch.Generator`` seeded with ``seed``, for library samplers that take one.
    Raises:
        ValueError: ``seed`` is negative or not an integer.
    """
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"`seed` must be a non-negative integer; got {seed!r}")
    seed = int(seed)
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    if deterministic:
        torch.use_deterministic_algorithms(True, warn_only=True)
    return torch.Generator().manual_seed(seed)
