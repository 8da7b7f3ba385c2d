"""TRPO machinery: flat parameter vectors, Fisher-vector products, conjugate gradient, the natural
step and the backtracking line search (book chapter 6).

TRPO (Schulman et al. 2015, arXiv:1502.05477) solves, at every update,

    maximise_θ  L(θ) = E[ ρ_θ · Â ]   subject to   KL̄(π_θold ‖ π_θ) ≤ max_kl          (trpo)

by a linear model of L (gradient g) and a quadratic model of the mean KL (Fisher F):
the step s = α·F⁻¹g with α = √(2·max_kl / gᵀF⁻¹g) puts ½ sᵀ F s exactly on the boundary; a
backtracking line search then checks the real surrogate and the real KL. F⁻¹g is found by
conjugate gradient using only products F·v (never the P×P matrix).

Everything here is a pure function of tensors and closures; the trainer
(:func:`rlbook.algos.trpo.train_trpo`) only wires them together.
"""

from __future__ import annotations

import math
from typing import Callable, Iterable, Sequence

import torch
from torch import nn

from rlbook import _checks

__all__ = [
    "flat_params",
    "set_flat_params",
    "flat_grad",
    "per_sample_grads",
    "fisher_vector_product",
    "score_fisher_vector_product",
    "conjugate_gradient",
    "natural_gradient_step",
    "backtracking_line_search",
    "trpo_surrogate",
]


def _param_list(params) -> list[torch.Tensor]:
    if isinstance(params, nn.Module):
        return list(params.parameters())
    if isinstance(params, torch.Tensor):
        return [params]
    out = list(params)
    if not out or not all(isinstance(p, torch.Tensor) for p in out):
        raise ValueError("`params` must be an nn.Module, a tensor, or a non-empty iterable of tensors")
    return out


def _check_flat(name: str, x, size: int) -> torch.Tensor:
    x = _checks.as_float_tensor(name, x)
    if x.dim() != 1 or x.numel() != size:
        raise ValueError(f"`{name}` must have shape (P,) = ({size},); got {tuple(x.shape)}")
    return x


def flat_params(params) -> torch.Tensor:
    """Concatenate parameters into one detached vector θ.

    θ = concat(vec(p₁), vec(p₂), ...) in ``module.parameters()`` order.

    Source: book ch. 6 ("parameters as one vector"); the standard TRPO bookkeeping.

    Args:
        params: an ``nn.Module``, a tensor or an iterable of tensors.
    Returns:
        (P,) detached copy, P = total number of parameters.
    Gradient:
        none (detached).
    Raises:
        ValueError: ``params`` is empty or not tensors.
    See also:
        set_flat_params
    """
    return torch.cat([p.detach().reshape(-1) for p in _param_list(params)]).clone()


def set_flat_params(params, flat) -> None:
    """Write the vector θ back into the parameters, in place (inverse of :func:`flat_params`).

    Args:
        params: an ``nn.Module``, a tensor or an iterable of tensors.
        flat: (P,) values, P = total number of parameters.
    Returns:
        None.
    Gradient:
        none (a ``no_grad`` copy).
    Raises:
        ValueError: ``flat`` is not 1-D of length P.
    """
    plist = _param_list(params)
    total = sum(p.numel() for p in plist)
    flat = _check_flat("flat", flat, total)
    offset = 0
    with torch.no_grad():
        for p in plist:
            p.copy_(flat[offset: offset + p.numel()].view_as(p))
            offset += p.numel()


def flat_grad(output: torch.Tensor, params, retain_graph: bool = False, create_graph: bool = False) -> torch.Tensor:
    """Gradient of a scalar with respect to ``params``, as one (P,) vector.

    ∇_θ output, with zeros for parameters ``output`` does not depend on.

    Args:
        output: scalar tensor.
        params: an ``nn.Module``, a tensor or an iterable of tensors (requiring grad).
        retain_graph: keep the graph for another backward pass.
        create_graph: build a graph of the gradient itself (for double backprop, e.g. F·v).
    Returns:
        (P,) gradient vector.
    Gradient:
        differentiable when ``create_graph=True``.
    Raises:
        ValueError: ``output`` is not a scalar.
    """
    if not isinstance(output, torch.Tensor) or output.numel() != 1:
        raise ValueError(f"`output` must be a scalar tensor; got shape {tuple(getattr(output, 'shape', ()))}")
    plist = _param_list(params)
    grads = torch.autograd.grad(output.reshape(()), plist, retain_graph=retain_graph or create_graph,
                                create_graph=create_graph, allow_unused=True)
    return torch.cat([(torch.zeros_like(p) if g is None else g).reshape(-1) for g, p in zip(grads, plist)])


def per_sample_grads(outputs: torch.Tensor, params) -> torch.Tensor:
    """Stack the gradients of each entry of ``outputs``: row i is ∇_θ outputs[i].

    With ``outputs = log_probs`` the rows are the score vectors ∇_θ log π_θ(aᵢ∣sᵢ), the input of
    :func:`score_fisher_vector_product`. One backward pass per entry: for small models only.

    Args:
        outputs: (N,) tensor built from ``params``.
        params: an ``nn.Module``, a tensor or an iterable of tensors.
    Returns:
        (N, P) detached matrix of per-sample gradients.
    Gradient:
        none (detached).
    Raises:
        ValueError: ``outputs`` is not 1-D and non-empty.
    """
    if not isinstance(outputs, torch.Tensor) or outputs.dim() != 1 or outputs.numel() == 0:
        raise ValueError(f"`outputs` must have shape (N,) with N >= 1; got {tuple(getattr(outputs, 'shape', ()))}")
    rows = [flat_grad(outputs[i], params, retain_graph=True) for i in range(outputs.numel())]
    return torch.stack(rows).detach()


def fisher_vector_product(mean_kl_fn: Callable[[], torch.Tensor], params, v, damping: float = 0.0) -> torch.Tensor:
    """Fisher-vector product F·v as the Hessian of the mean KL times v (Pearlmutter's trick).

    F v = ∇_θ( (∇_θ KL̄(π_θold ‖ π_θ))ᵀ v ) |_{θ=θold}  (+ damping·v)

    At θ = θold the mean KL is 0 and has zero gradient; its Hessian equals the Fisher information
    E_s E_{a∼π}[∇log π ∇log πᵀ]. Two backward passes, no P×P matrix.

    Source: book eq. (fisher-kl-hessian); Schulman et al. 2015, arXiv:1502.05477, Appendix C;
    Pearlmutter 1994 (fast exact Hessian-vector products).

    Args:
        mean_kl_fn: no-argument callable returning the scalar mean KL(π_θold ‖ π_θ) with the old
            distribution detached and the new one built from ``params`` (so its value is 0 at θold).
        params: an ``nn.Module`` or iterable of tensors (the policy parameters θ).
        v: (P,) direction.
        damping: λ ≥ 0; returns (F + λI)v, which keeps conjugate gradient well posed when F is
            singular (it always is for over-parameterised nets).
    Returns:
        (P,) vector F v (+ λ v), detached.
    Gradient:
        none (detached).
    Raises:
        ValueError: ``v`` is not (P,), or ``damping`` < 0.
    See also:
        rlbook.reference.kl_hessian, rlbook.reference.fisher_matrix_enumerated, score_fisher_vector_product
    """
    plist = _param_list(params)
    v = _check_flat("v", v, sum(p.numel() for p in plist))
    _checks.check_in_range("damping", damping, 0.0)
    kl = mean_kl_fn()
    grad_kl = flat_grad(kl, plist, create_graph=True)
    hv = flat_grad((grad_kl * v.to(grad_kl)).sum(), plist)
    return (hv + damping * v.to(hv)).detach()


def score_fisher_vector_product(scores, v, weights=None) -> torch.Tensor:
    """Fisher-vector product from explicit score vectors: F v = Σᵢ wᵢ sᵢ (sᵢᵀ v).

    F = E[∇log π ∇log πᵀ] estimated by the rows sᵢ = ∇_θ log π_θ(aᵢ∣sᵢ) of ``scores``; with
    ``weights=None`` the plain mean (the empirical Fisher of sampled actions), with weights
    π(a∣s)/N over every action of every state the exact Fisher of a categorical policy.

    Source: book eq. (fisher-score); Amari 1998 (natural gradient); Kakade 2001 (natural policy gradient).

    Args:
        scores: (N, P) per-sample score vectors (see :func:`per_sample_grads`).
        v: (P,) direction.
        weights: (N,) non-negative weights, or ``None`` for 1/N each.
    Returns:
        (P,) vector F v.
    Gradient:
        flows through ``scores``, ``v`` and ``weights`` if they require it.
    Raises:
        ValueError: ``scores`` not 2-D, ``v`` not (P,), ``weights`` not (N,) or negative.
    See also:
        fisher_vector_product
    """
    scores = _checks.as_float_tensor("scores", scores)
    if scores.dim() != 2 or scores.shape[0] == 0:
        raise ValueError(f"`scores` must have shape (N, P) with N >= 1; got {tuple(scores.shape)}")
    v = _check_flat("v", v, scores.shape[1]).to(scores)
    if weights is None:
        weights = torch.full((scores.shape[0],), 1.0 / scores.shape[0], dtype=scores.dtype)
    weights = _checks.as_float_tensor("weights", weights).to(scores)
    if tuple(weights.shape) != (scores.shape[0],):
        raise ValueError(f"`weights` must have shape (N,) = ({scores.shape[0]},); got {tuple(weights.shape)}")
    if (weights < 0).any():
        raise ValueError("`weights` must be non-negative")
    return scores.T @ (weights * (scores @ v))


def conjugate_gradient(fvp: Callable[[torch.Tensor], torch.Tensor], b, iters: int = 10, tol: float = 1e-10) -> torch.Tensor:
    """Approximately solve F x = b for symmetric positive-definite F, given only v ↦ F v.

    x₀ = 0, r₀ = p₀ = b;  αₖ = rₖᵀrₖ / pₖᵀFpₖ;  xₖ₊₁ = xₖ + αₖpₖ;  rₖ₊₁ = rₖ − αₖFpₖ;
    pₖ₊₁ = rₖ₊₁ + (rₖ₊₁ᵀrₖ₊₁ / rₖᵀrₖ) pₖ.   Exact (in exact arithmetic) after n = dim(b) iterations.

    Source: book eq. (cg); Hestenes & Stiefel 1952; Nocedal & Wright, Numerical Optimization,
    Algorithm 5.2; Schulman et al. 2015, Appendix C.

    Args:
        fvp: callable (P,) -> (P,), the product F v with F symmetric positive-definite.
        b: (P,) right-hand side (in TRPO the policy gradient g).
        iters: maximum number of iterations, ≥ 1 (TRPO uses ~10).
        tol: stop once the squared residual rᵀr < tol, ≥ 0.
    Returns:
        (P,) approximate solution x ≈ F⁻¹ b.
    Gradient:
        none (inputs and products are detached).
    Raises:
        ValueError: ``b`` not 1-D/non-empty, ``iters`` < 1, ``tol`` < 0, ``fvp`` returns a wrong
            shape, or F is found not positive-definite (pᵀFp ≤ 0).
    See also:
        natural_gradient_step
    """
    b = _checks.as_float_tensor("b", b)
    if b.dim() != 1 or b.numel() == 0:
        raise ValueError(f"`b` must have shape (P,) with P >= 1; got {tuple(b.shape)}")
    if int(iters) != iters or iters < 1:
        raise ValueError(f"`iters` must be a positive integer; got {iters}")
    _checks.check_in_range("tol", tol, 0.0)
    b = b.detach()
    x = torch.zeros_like(b)
    r, p = b.clone(), b.clone()
    rr = r @ r
    for _ in range(int(iters)):
        if rr < tol:
            break
        fp = fvp(p)  # may itself need autograd (double backprop), so no no_grad here
        if not isinstance(fp, torch.Tensor) or fp.shape != p.shape:
            raise ValueError(f"`fvp` must return a tensor of shape {tuple(p.shape)}")
        fp = fp.detach()
        pfp = p @ fp
        if pfp <= 0:
            raise ValueError(f"`fvp` is not positive-definite along a CG direction (pᵀFp = {float(pfp):.3g}); add damping")
        alpha = rr / pfp
        x = x + alpha * p
        r = r - alpha * fp
        rr_new = r @ r
        p = r + (rr_new / rr) * p
        rr = rr_new
    return x


def natural_gradient_step(g, fvp: Callable[[torch.Tensor], torch.Tensor], max_kl: float, cg_iters: int = 10) -> torch.Tensor:
    """The TRPO step: the natural gradient F⁻¹g scaled so that the quadratic KL model equals max_kl.

    x = CG(F, g) ≈ F⁻¹g;  s = α x with α = √(2·max_kl / xᵀFx)  ⇒  ½ sᵀ F s = max_kl.

    (xᵀFx = gᵀF⁻¹g when CG is exact; using xᵀFx makes ½ sᵀFs = max_kl hold exactly even when CG
    stops early.) s maximises the linear model gᵀs subject to ½ sᵀFs ≤ max_kl.

    Source: book eq. (trpo-step); Schulman et al. 2015, arXiv:1502.05477, Appendix C;
    Kakade 2001, "A natural policy gradient" (NeurIPS).

    Args:
        g: (P,) gradient of the surrogate objective (to be maximised).
        fvp: callable (P,) -> (P,), F v (usually with a little damping).
        max_kl: trust-region radius δ > 0, nats.
        cg_iters: conjugate-gradient iterations, ≥ 1.
    Returns:
        (P,) step s; zeros if g = 0 (or gᵀg is below CG's tolerance).
    Gradient:
        none.
    Raises:
        ValueError: ``max_kl`` ≤ 0, ``g`` not 1-D, ``cg_iters`` < 1, F not positive-definite.
    See also:
        conjugate_gradient, backtracking_line_search
    """
    _checks.check_positive("max_kl", max_kl)
    g = _checks.as_float_tensor("g", g)
    if g.dim() != 1 or g.numel() == 0:
        raise ValueError(f"`g` must have shape (P,) with P >= 1; got {tuple(g.shape)}")
    if not bool(g.any()):
        return torch.zeros_like(g)
    x = conjugate_gradient(fvp, g, iters=cg_iters)
    if not bool(x.any()):  # g·g was already below CG's tolerance: no direction to step along
        return torch.zeros_like(g)
    xfx = x @ fvp(x).detach()
    if xfx <= 0:
        raise ValueError(f"`fvp` gave xᵀFx = {float(xfx):.3g} <= 0; F must be positive-definite (add damping)")
    return math.sqrt(2.0 * float(max_kl) / float(xfx)) * x


def backtracking_line_search(
    surrogate_fn: Callable[[torch.Tensor], torch.Tensor],
    kl_fn: Callable[[torch.Tensor], torch.Tensor],
    params0,
    step,
    max_kl: float,
    expected_improve: float,
    backtrack_coef: float = 0.5,
    max_backtracks: int = 10,
    accept_ratio: float = 0.1,
) -> tuple[torch.Tensor, bool, int]:
    """Shrink the step until the real surrogate improves and the real mean KL is within max_kl.

    Try θ = θ₀ + βᵏ s for k = 0, 1, ..., max_backtracks − 1 and accept the first θ with
    KL̄(θ) ≤ max_kl,  ΔL = L(θ) − L(θ₀) > 0  and  ΔL ≥ accept_ratio · βᵏ · expected_improve.
    If none passes, keep θ₀.

    The quadratic KL model and the linear surrogate model are only approximations; this check on
    the true quantities is what makes TRPO's update safe.

    Source: book eq. (line-search); Schulman et al. 2015, arXiv:1502.05477, Appendix C
    ("we perform a line search ... exponentially decaying step size").

    Args:
        surrogate_fn: callable (P,) -> scalar, the surrogate L(θ) to maximise at flat params θ.
        kl_fn: callable (P,) -> scalar, the mean KL(π_θ₀ ‖ π_θ) at flat params θ, nats.
        params0: (P,) current flat parameters θ₀.
        step: (P,) full proposed step s.
        max_kl: δ > 0, nats.
        expected_improve: gᵀs, the improvement the linear model predicts for the full step.
        backtrack_coef: β in (0, 1).
        max_backtracks: number of step sizes tried, ≥ 1.
        accept_ratio: fraction of the predicted improvement that must be realised, ≥ 0.
    Returns:
        (new_params (P,), accepted, num_backtracks): ``num_backtracks`` is k of the accepted step
        (0 = full step), or ``max_backtracks`` when every try failed (then new_params = θ₀).
    Gradient:
        none (the closures are evaluated under no_grad).
    Raises:
        ValueError: ``max_kl`` ≤ 0, ``step`` shape differs from ``params0``, ``backtrack_coef``
            outside (0, 1), ``max_backtracks`` < 1, ``accept_ratio`` < 0.
    See also:
        natural_gradient_step
    """
    _checks.check_positive("max_kl", max_kl)
    params0 = _checks.as_float_tensor("params0", params0)
    step = _checks.as_float_tensor("step", step)
    if params0.dim() != 1:
        raise ValueError(f"`params0` must have shape (P,); got {tuple(params0.shape)}")
    _checks.check_same_shape(params0=params0, step=step)
    _checks.check_in_range("backtrack_coef", backtrack_coef, 0.0, 1.0, low_inclusive=False, high_inclusive=False)
    if int(max_backtracks) != max_backtracks or max_backtracks < 1:
        raise ValueError(f"`max_backtracks` must be a positive integer; got {max_backtracks}")
    _checks.check_in_range("accept_ratio", accept_ratio, 0.0)
    with torch.no_grad():
        f0 = float(surrogate_fn(params0))
        for k in range(int(max_backtracks)):
            frac = backtrack_coef ** k
            candidate = params0 + frac * step
            improve = float(surrogate_fn(candidate)) - f0
            kl = float(kl_fn(candidate))
            if kl <= max_kl and improve > 0 and improve >= accept_ratio * frac * float(expected_improve):
                return candidate, True, k
    return params0.clone(), False, int(max_backtracks)


def trpo_surrogate(log_probs, old_log_probs, advantages) -> torch.Tensor:
    """Per-sample importance-weighted surrogate ρ·Â (maximise; unreduced).

    ρ = exp(log_probs − old_log_probs);  surrogate = ρ · Â.  Its mean is L_θold(θ) − const, whose
    gradient at θ = θold is the policy gradient.

    Source: book eq. (surrogate); Schulman et al. 2015, arXiv:1502.05477, eq. 14
    (the importance-sampled surrogate).

    Args:
        log_probs: (..., T) log π_θ(a∣s), nats.
        old_log_probs: (..., T) log π_θold(a∣s), nats (treated as constants).
        advantages: (..., T) Â (treated as constants).
    Returns:
        (..., T) ρ·Â.
    Gradient:
        through ``log_probs`` only (``old_log_probs`` and ``advantages`` are detached).
    Raises:
        ValueError: shapes differ.
    See also:
        rlbook.losses.clipped_surrogate_loss (PPO's clipped version, negated)
    """
    log_probs = _checks.as_float_tensor("log_probs", log_probs)
    old_log_probs = _checks.as_float_tensor("old_log_probs", old_log_probs)
    advantages = _checks.as_float_tensor("advantages", advantages)
    _checks.check_same_shape(log_probs=log_probs, old_log_probs=old_log_probs, advantages=advantages)
    return torch.exp(log_probs - old_log_probs.detach()) * advantages.detach()
