"""Evaluation metrics for verifiable tasks: the unbiased pass@k estimator."""

from __future__ import annotations

import numpy as np

__all__ = ["pass_at_k"]


def _as_counts(name: str, x) -> np.ndarray:
    """``x`` as an int64 array; raise ``ValueError`` naming ``x`` if it is not integer-valued."""
    arr = np.asarray(x)
    if arr.dtype == bool or not np.issubdtype(arr.dtype, np.number):
        raise ValueError(f"`{name}` must hold integers; got dtype {arr.dtype}")
    if not np.all(np.isfinite(arr)) or not np.all(arr == np.round(arr)):
        raise ValueError(f"`{name}` must hold whole numbers; got {arr.ravel()[:4].tolist()}")
    return arr.astype(np.int64)


def _pass_at_k_one(n: int, c: int, k: int) -> float:
    """1 − C(n−c, k)/C(n, k) as a product of k factors (no huge binomials)."""
    if n - c < k:
        return 1.0
    factors = 1.0 - k / np.arange(n - c + 1, n + 1, dtype=np.float64)
    return float(1.0 - np.prod(factors))


def pass_at_k(num_samples, num_correct, k):
    """Unbiased pass@k: the chance that at least one of k samples, drawn without replacement
    from n generated ones of which c are correct, is correct.

    pass@k = 1 − C(n−c, k) / C(n, k) = 1 − Π_{i=n−c+1}^{n} (1 − k/i)

    The product form avoids the huge binomial coefficients. It is 1 when n − c < k (every
    k-subset holds a correct sample). With k = 1 it reduces to c/n, the sampled accuracy.
    Averaging over problems estimates the expected pass@k without the bias of the naive
    1 − (1 − c/n)^k.

    Source: book eq. (pass-at-k); Chen et al. 2021 (Codex), arXiv:2107.03374, eq. 1 and Fig. 3
    (the numerically stable product).

    Args:
        num_samples: n ≥ 1, samples generated per problem; int or integer array.
        num_correct: c with 0 ≤ c ≤ n; int or integer array.
        k: 1 ≤ k ≤ n; int or integer array. The three arguments broadcast together.
    Returns:
        float for scalar inputs, else a float64 array of the broadcast shape, in [0, 1].
    Gradient:
        none (NumPy).
    Raises:
        ValueError: non-integer inputs, n < 1, c outside [0, n], k outside [1, n], or shapes that
            do not broadcast.
    See also:
        rlbook.reference.pass_at_k_enumeration
    Example:
        >>> pass_at_k(5, 2, 2)
        0.7
        >>> pass_at_k([10, 10], [0, 10], 3).tolist()
        [0.0, 1.0]
    """
    n, c, kk = (_as_counts(name, v) for name, v in (("num_samples", num_samples), ("num_correct", num_correct), ("k", k)))
    try:
        n, c, kk = np.broadcast_arrays(n, c, kk)
    except ValueError:
        raise ValueError(
            f"`num_samples` {np.shape(n)}, `num_correct` {np.shape(c)} and `k` {np.shape(kk)} must broadcast"
        ) from None
    if np.any(n < 1):
        raise ValueError(f"`num_samples` must be ≥ 1; got {n.ravel().tolist()[:4]}")
    if np.any((c < 0) | (c > n)):
        raise ValueError("`num_correct` must satisfy 0 ≤ num_correct ≤ num_samples")
    if np.any((kk < 1) | (kk > n)):
        raise ValueError("`k` must satisfy 1 ≤ k ≤ num_samples")
    out = np.array([_pass_at_k_one(*triple) for triple in zip(n.ravel(), c.ravel(), kk.ravel())], dtype=np.float64)
    out = out.reshape(n.shape)
    return float(out) if out.ndim == 0 else out
