"""Evaluation metrics for verifiable tasks: the unbiased pass@k estimator, pass@k curves, and the
expansion of log p (the maximum-likelihood objective) in fail@k = (1 − p)^k that MaxRL truncates."""

from __future__ import annotations

import numpy as np
import torch

from rlbook import _checks

__all__ = ["pass_at_k", "pass_at_k_curve", "log_likelihood_pass_at_k_terms", "maxrl_truncated_objective"]


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


def pass_at_k_curve(num_samples, num_correct, ks) -> np.ndarray:
    """Mean unbiased pass@k over problems, for each k of a list: the curve of pass@k against k.

    curve[j] = (1/P) Σ_p pass@k_j(n_p, c_p),   pass@k from :func:`pass_at_k`

    Source: book eq. (pass-at-k); Chen et al. 2021 (Codex), arXiv:2107.03374, eq. 1 (averaged
    over problems).

    Args:
        num_samples: n_p ≥ 1 samples per problem: an int (the same n for all) or a (P,) integer array.
        num_correct: c_p correct samples per problem, 0 ≤ c_p ≤ n_p: an int or a (P,) integer array.
        ks: (K,) integers with 1 ≤ k ≤ min_p n_p.
    Returns:
        (K,) float64 array in [0, 1], non-decreasing in k.
    Gradient:
        none (NumPy).
    Raises:
        ValueError: ks empty, not 1-D, not integers or outside [1, min n]; num_samples and
            num_correct not broadcasting to (P,), or invalid as in :func:`pass_at_k`.
    See also:
        pass_at_k, rlbook.reference.pass_at_k_enumeration
    Example:
        >>> pass_at_k_curve([4, 4], [1, 3], [1, 2, 4]).tolist()
        [0.5, 0.75, 1.0]
    """
    ks = _as_counts("ks", ks)
    if ks.ndim != 1 or ks.size == 0:
        raise ValueError(f"`ks` must be a non-empty 1-D sequence of integers; got shape {ks.shape}")
    try:
        n, c = np.broadcast_arrays(np.atleast_1d(num_samples), np.atleast_1d(num_correct))
    except ValueError:
        raise ValueError(
            f"`num_samples` {np.shape(num_samples)} and `num_correct` {np.shape(num_correct)} must broadcast to (P,)"
        ) from None
    if n.ndim != 1:
        raise ValueError(
            f"`num_samples` and `num_correct` must be ints or (P,) arrays (one count per problem); got shape {n.shape}"
        )
    smallest = int(np.min(_as_counts("num_samples", n)))  # n < 1 is reported by pass_at_k
    if smallest >= 1 and np.any((ks < 1) | (ks > smallest)):
        raise ValueError(f"`ks` must lie in [1, min num_samples = {smallest}]; got {ks.tolist()}")
    return np.asarray(pass_at_k(n[None, :], c[None, :], ks[:, None]), dtype=np.float64).mean(axis=1)


def _success_probability(p) -> torch.Tensor:
    """``p`` as a float tensor with every element in (0, 1]; ValueError naming ``p`` otherwise."""
    p = _checks.as_float_tensor("p", p)
    if p.numel() and ((p <= 0) | (p > 1)).any():
        raise ValueError(f"`p` must lie in (0, 1] (a success probability; log 0 is −inf); got {p.flatten()[:4].tolist()}")
    return p


def _check_num_terms(num_terms) -> int:
    if isinstance(num_terms, bool) or not isinstance(num_terms, (int, np.integer)) or num_terms < 1:
        raise ValueError(f"`num_terms` must be a positive integer; got {num_terms!r}")
    return int(num_terms)


def log_likelihood_pass_at_k_terms(p, num_terms: int) -> torch.Tensor:
    """The terms of the expansion of log p in fail@k = (1 − p)^k, k = 1..T.

    log p = −Σ_{k≥1} (1 − p)^k / k,     term_k = −(1 − p)^k / k = −fail@k / k

    (the Maclaurin series of log(1 − u) at u = 1 − p). fail@k is the chance that k independent
    attempts all fail, so ∇term_k = ∇pass@k / k: the maximum-likelihood gradient ∇log p weighs
    pass@k by 1/k for every k, and REINFORCE's objective p is the first term plus 1. The tail after
    T terms is at most (1 − p)^{T+1} / ((T + 1) p): the series converges slowly for small p.

    Source: book eq. (maxrl-series); Maximum Likelihood Reinforcement Learning (MaxRL), 2026,
    arXiv:2602.02710 (the Maclaurin expansion of the likelihood in fail@k).

    Args:
        p: success probability in (0, 1]: a float or a tensor of any shape (...).
        num_terms: T ≥ 1.
    Returns:
        (..., T) tensor of terms, ≤ 0 (all 0 when p = 1); p's dtype (the default dtype for a float).
    Gradient:
        through ``p``: ∂term_k/∂p = (1 − p)^{k−1}.
    Raises:
        ValueError: p outside (0, 1] or not finite; num_terms not a positive integer.
    See also:
        maxrl_truncated_objective, rlbook.maxrl_advantages
    Example:
        >>> log_likelihood_pass_at_k_terms(torch.tensor(0.5, dtype=torch.float64), 3)
        tensor([-0.5000, -0.1250, -0.0417], dtype=torch.float64)
    """
    p = _success_probability(p)
    num_terms = _check_num_terms(num_terms)
    k = torch.arange(1, num_terms + 1, dtype=p.dtype, device=p.device)  # (T,)
    return -((1 - p)[..., None] ** k) / k


def maxrl_truncated_objective(p, num_terms: int) -> torch.Tensor:
    """MaxRL's truncated maximum-likelihood objective (maximise): the first T terms of log p.

    J^(T)(p) = −Σ_{k=1}^{T} (1 − p)^k / k,     dJ^(T)/dp = Σ_{k=1}^{T} (1 − p)^{k−1} = (1 − (1 − p)^T) / p

    T = 1 gives p − 1 (pass@1, REINFORCE's objective, up to a constant); T → ∞ gives log p. With N
    rollouts per prompt, MaxRL's estimator (1/K) Σ_i r_i ∇log π(y_i) (K ≥ 1 successes, 0 if K = 0)
    is unbiased for ∇J^(N). The centred form of :func:`rlbook.maxrl_advantages`, (1/N) Σ_i Â_i ∇log π(y_i),
    differs from it only on all-fail groups, and is exactly unbiased for ∇J^(N−1) (the tests check
    both by enumerating every outcome pattern).

    Source: book eq. (maxrl); Maximum Likelihood Reinforcement Learning (MaxRL), 2026,
    arXiv:2602.02710 (the compute-indexed objective family J^(T) and its estimator).

    Args:
        p: success probability in (0, 1]: a float or a tensor of any shape (...).
        num_terms: T ≥ 1, the truncation (the number of rollouts N for the estimator above).
    Returns:
        (...) tensor, ≤ 0, in nats like log p.
    Gradient:
        through ``p``: (1 − (1 − p)^T) / p.
    Raises:
        ValueError: as :func:`log_likelihood_pass_at_k_terms`.
    See also:
        log_likelihood_pass_at_k_terms, rlbook.maxrl_advantages
    Example:
        >>> round(float(maxrl_truncated_objective(0.5, 1)), 4), round(float(maxrl_truncated_objective(0.5, 60)), 4)
        (-0.5, -0.6931)
    """
    return log_likelihood_pass_at_k_terms(p, num_terms).sum(dim=-1)
