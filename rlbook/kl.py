"""KL divergence: sample estimators k1, k2, k3 of KL(π_θ ‖ π_ref) and the exact categorical KL.

Naming: KL(π_θ ‖ π_ref) (the trained policy first) is the *reverse* KL; KL(π_ref ‖ π_θ) is the
*forward* KL. The sample estimators take log-probabilities of tokens SAMPLED FROM π_θ and return
one number per token. With r = π_ref(a)/π_θ(a), log r = log π_ref(a) − log π_θ(a):

    k1 = −log r              unbiased for KL(π_θ‖π_ref), high variance, can be negative
    k2 = ½ (log r)²          biased (low bias when the policies are close), ≥ 0
    k3 = (r − 1) − log r     unbiased (E_θ[r] = 1), ≥ 0, low variance when close

What their gradients estimate when they are used as a LOSS on fixed samples, the gradient
flowing through log π_θ of the samples only (exact on a categorical distribution, see
tests/test_kl.py and book §5.8):

    E_θ[∇k1] = E_θ[∇log π_θ] = 0                        (no signal at all)
    E_θ[∇k2] = E_θ[(log π_θ − log π_ref)∇log π_θ] = ∇KL(π_θ ‖ π_ref)   (the reverse KL)
    E_θ[∇k3] = E_θ[(1 − r)∇log π_θ] = ∇KL(π_ref ‖ π_θ)  (the FORWARD KL)

So k3 is a good *value* estimator of the reverse KL KL(π_θ‖π_ref) while its gradient is that of
the forward KL; both KLs vanish with zero gradient at π_θ = π_ref and agree to second order near
it. For sequences, a sum of per-token estimators differentiated token by token misses the effect
of a token on later tokens' distributions and gives only a partial gradient (Tang & Munos 2025,
"On a few pitfalls in KL divergence gradient estimation for RL", arXiv:2506.09477).
"""

from __future__ import annotations

import torch

from rlbook import _checks

__all__ = ["kl_k1", "kl_k2", "kl_k3", "categorical_kl"]


def _log_r(log_probs, ref_log_probs) -> torch.Tensor:
    """log r = ref_log_probs − log_probs after validation (same shape, finite)."""
    log_probs = _checks.as_float_tensor("log_probs", log_probs)
    ref_log_probs = _checks.as_float_tensor("ref_log_probs", ref_log_probs, dtype=log_probs.dtype)
    _checks.check_same_shape(log_probs=log_probs, ref_log_probs=ref_log_probs)
    return ref_log_probs - log_probs


def kl_k1(log_probs, ref_log_probs) -> torch.Tensor:
    """k1 estimator of KL(π_θ ‖ π_ref), per sample: k1 = log π_θ(a) − log π_ref(a), a ∼ π_θ.

    Source: book §5.8, eq. (5.8); J. Schulman, "Approximating KL divergence" (blog, 2020,
    http://joschu.net/blog/kl-approx.html).

    Args:
        log_probs: (..., T) log π_θ of tokens sampled from π_θ, nats.
        ref_log_probs: (..., T) log π_ref of the same tokens, nats.
    Returns:
        (..., T) per-element estimate (nats); unbiased, may be negative.
    Gradient:
        through both inputs as given; as a loss on samples from π_θ (gradient through
        ``log_probs``, samples held fixed) its expected gradient is 0 (E_θ[∇log π_θ] = 0), so k1
        penalises nothing unless used as a reward with a score term.
    Raises:
        ValueError: shapes differ or NaN/inf present.
    See also:
        rlbook.kl_k3, rlbook.categorical_kl
    Example:
        >>> round(float(kl_k1(torch.tensor(-1.0), torch.tensor(-2.0))), 4)
        1.0
    """
    return -_log_r(log_probs, ref_log_probs)


def kl_k2(log_probs, ref_log_probs) -> torch.Tensor:
    """k2 estimator of KL(π_θ ‖ π_ref), per sample: k2 = ½(log π_ref(a) − log π_θ(a))², a ∼ π_θ.

    Biased, but ≥ 0; its expectation is an f-divergence that matches the KL to second order.

    Source: book §5.8, eq. (5.8); J. Schulman, "Approximating KL divergence" (blog, 2020,
    http://joschu.net/blog/kl-approx.html).

    Args:
        log_probs: (..., T) log π_θ of tokens sampled from π_θ, nats.
        ref_log_probs: (..., T) log π_ref of the same tokens, nats.
    Returns:
        (..., T) per-element estimate ≥ 0.
    Gradient:
        as a loss on samples from π_θ (gradient through ``log_probs``, samples held fixed),
        E_θ[∇k2] = ∇KL(π_θ ‖ π_ref), the gradient of the reverse KL, exactly (single-step case).
    Raises:
        ValueError: shapes differ or NaN/inf present.
    See also:
        rlbook.kl_k1, rlbook.kl_k3
    Example:
        >>> round(float(kl_k2(torch.tensor(-1.0), torch.tensor(-2.0))), 4)
        0.5
    """
    return 0.5 * _log_r(log_probs, ref_log_probs) ** 2


def kl_k3(log_probs, ref_log_probs) -> torch.Tensor:
    """k3 estimator of KL(π_θ ‖ π_ref), per sample: k3 = r − 1 − log r,  r = π_ref(a)/π_θ(a), a ∼ π_θ.

    Unbiased (k1 plus the zero-mean control variate r − 1) and ≥ 0 since log r ≤ r − 1.
    This is the per-token penalty of GRPO.

    Source: book §5.8, eq. (5.8); J. Schulman, "Approximating KL divergence" (blog, 2020,
    http://joschu.net/blog/kl-approx.html);
    Shao et al. 2024 (DeepSeekMath), arXiv:2402.03300, eq. 4.

    Args:
        log_probs: (..., T) log π_θ of tokens sampled from π_θ, nats.
        ref_log_probs: (..., T) log π_ref of the same tokens, nats.
    Returns:
        (..., T) per-element estimate ≥ 0.
    Gradient:
        as a loss on samples from π_θ (gradient through ``log_probs``, samples held fixed),
        E_θ[∇k3] = E_θ[(1 − r)∇log π_θ] = ∇KL(π_ref ‖ π_θ): the gradient of the FORWARD KL, not
        of the reverse KL KL(π_θ ‖ π_ref) whose value it estimates (the two gradients agree to
        first order near π_θ = π_ref). Large when π_ref ≫ π_θ on a sample (r unbounded).
    Raises:
        ValueError: shapes differ or NaN/inf present.
    See also:
        rlbook.kl_k1, rlbook.kl_k2, rlbook.approx_kl
    Example:
        >>> round(float(kl_k3(torch.tensor(-1.0), torch.tensor(-2.0))), 4)  # e^-1 − 1 + 1
        0.3679
    """
    log_r = _log_r(log_probs, ref_log_probs)
    return torch.expm1(log_r) - log_r


def categorical_kl(logits_p, logits_q) -> torch.Tensor:
    """Exact KL(p ‖ q) between categorical distributions over the last dim, in float32 (or float64).

    KL(p ‖ q) = Σ_a p(a)·(log p(a) − log q(a)),   p = softmax(logits_p), q = softmax(logits_q)

    Logits of lower precision are upcast to float32 before ``log_softmax``; entries where
    p(a) = 0 contribute 0 (no 0·(−∞)); entries with q(a) = 0 < p(a) give +inf.

    Source: book eq. (kl); Cover & Thomas, *Elements of Information Theory*, eq. 2.26.

    Args:
        logits_p: (..., A) logits of p (e.g. π_θ), any real numbers (−inf allowed for masked actions).
        logits_q: (..., A) logits of q (e.g. π_ref).
    Returns:
        (...) KL in nats, ≥ 0 up to rounding.
    Gradient:
        through both logits.
    Raises:
        ValueError: shapes differ, or inputs are 0-dim/empty.
    See also:
        rlbook.kl_k3, rlbook.reference.categorical_kl_loop
    Example:
        >>> round(float(categorical_kl(torch.tensor([0.0, 0.0]), torch.tensor([0.0, 0.0]))), 4)
        0.0
    """
    for name, x in (("logits_p", logits_p), ("logits_q", logits_q)):
        if not isinstance(x, torch.Tensor):
            raise ValueError(f"`{name}` must be a tensor of shape (..., A)")
        _checks.check_min_ndim(name, x, 1, "(..., A)")
        _checks.check_nonempty(name, x)
    _checks.check_same_shape(logits_p=logits_p, logits_q=logits_q)
    dtype = torch.float64 if torch.float64 in (logits_p.dtype, logits_q.dtype) else torch.float32
    log_p = torch.log_softmax(logits_p.to(dtype), dim=-1)
    log_q = torch.log_softmax(logits_q.to(dtype), dim=-1)
    p = log_p.exp()
    # select before multiplying, so masked actions (p = 0, log p = −inf) give no NaN gradient
    log_diff = torch.where(p > 0, log_p - log_q, torch.zeros_like(p))
    return (p * log_diff).sum(dim=-1)
