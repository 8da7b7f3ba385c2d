"""Per-element policy and value losses for Part II (PPO, CISPO, KL penalty) and the entropy bonus.

Every ``*_loss`` returns the UNREDUCED per-element loss to be minimised; reducing (mean over
tokens, over sequences, ...) is a separate, named choice made by the caller. Quantities that are
data (``old_log_probs``, ``advantages``, ``returns``, ``old_values``) are detached inside.
"""

from __future__ import annotations

import torch

from rlbook import _checks
from rlbook.importance import importance_ratio

__all__ = [
    "clipped_surrogate_loss",
    "clipped_surrogate_loss_masked",
    "clip_region",
    "cispo_loss",
    "kl_penalty_loss",
    "adaptive_kl_coef",
    "value_loss",
    "entropy_from_logits",
]


def _check_clip_eps(name: str, value) -> None:
    """Raise ValueError naming ``name`` unless ``value`` is a finite number ≥ 0 (any width is legal)."""
    _checks.check_in_range(name, value, 0.0, float("inf"), high_inclusive=False)


def _clip_bounds(clip_eps_low, clip_eps_high) -> tuple[float, float]:
    """Validate (ε_low, ε_high) and return the ratio band (1 − ε_low, 1 + ε_high).

    Both must be finite and ≥ 0. ε_low ≥ 1 puts the lower end at or below 0, where no ratio
    ρ = π_θ/π_old ≥ 0 can fall: no lower clip at all (one-sided clipping); a wide ε_high is a
    legitimate clip-higher band.
    """
    if clip_eps_high is None:
        clip_eps_high = clip_eps_low
    _check_clip_eps("clip_eps_low", clip_eps_low)
    _check_clip_eps("clip_eps_high", clip_eps_high)
    return 1.0 - float(clip_eps_low), 1.0 + float(clip_eps_high)


def _check_broadcasts_to(name: str, x: torch.Tensor, shape: torch.Size, target: str = "log_probs") -> None:
    """Raise ValueError unless ``x`` broadcasts to ``shape`` without enlarging it."""
    if not _checks.broadcasts_to(x.shape, shape):
        raise ValueError(f"`{name}` must broadcast to the shape of `{target}` {tuple(shape)}; got {tuple(x.shape)}")


def _ratio_and_advantages(log_probs, old_log_probs, advantages):
    """ρ (grad through log_probs) and detached advantages broadcast-checked against ρ."""
    ratio = importance_ratio(log_probs, old_log_probs)
    advantages = _checks.as_float_tensor("advantages", advantages, dtype=ratio.dtype).detach()
    _check_broadcasts_to("advantages", advantages, ratio.shape)
    return ratio, advantages.to(ratio.device)


def clipped_surrogate_loss(
    log_probs, old_log_probs, advantages, clip_eps_low: float = 0.2, clip_eps_high: float | None = None
) -> torch.Tensor:
    """Per-element PPO clipped surrogate loss (minimise).

    ρ = exp(log_probs − old_log_probs);  loss = −min(ρ·Â, clip(ρ, 1−ε_low, 1+ε_high)·Â)

    With ε_high > ε_low this is DAPO's "clip-higher" (asymmetric band).

    Source: book eq. (ppo-clip); Schulman et al. 2017, arXiv:1707.06347, eq. 7 (negated);
    Yu et al. 2025 (DAPO), arXiv:2503.14476, "Clip-Higher", for ε_high ≠ ε_low.

    Args:
        log_probs: (..., T) log π_θ of the sampled actions/tokens, nats.
        old_log_probs: (..., T) log π_θold of the same actions, nats.
        advantages: broadcastable to (..., T).
        clip_eps_low: ε_low ≥ 0, finite, dimensionless; ε_low ≥ 1 means no lower clip (the band's
            lower end 1 − ε_low ≤ 0 is below every ratio).
        clip_eps_high: ε_high ≥ 0, finite; None means ε_high = ε_low (symmetric PPO).
    Returns:
        (..., T) unreduced loss.
    Gradient:
        through ``log_probs`` only: −ρ·Â·∇log π inside the band and wherever clipping would help
        the objective; exactly 0 where Â > 0 and ρ > 1+ε_high, or Â < 0 and ρ < 1−ε_low.
    Raises:
        ValueError: shapes do not match/broadcast, ε_low or ε_high negative, NaN or infinite
            (the argument is named).
    See also:
        rlbook.clipped_surrogate_loss_masked, rlbook.clip_region, rlbook.reference.clipped_surrogate_loss_loop
    Example:
        >>> lp, old = torch.tensor([0.012]).log(), torch.tensor([0.01]).log()
        >>> round(float(clipped_surrogate_loss(lp, old, torch.tensor([1.0]))), 4)  # ρ = 1.2: on the edge
        -1.2
    """
    low, high = _clip_bounds(clip_eps_low, clip_eps_high)
    ratio, advantages = _ratio_and_advantages(log_probs, old_log_probs, advantages)
    unclipped = ratio * advantages
    clipped = torch.clamp(ratio, low, high) * advantages
    return -torch.minimum(unclipped, clipped)


def clip_region(ratio, advantages, clip_eps_low: float = 0.2, clip_eps_high: float | None = None) -> torch.Tensor:
    """Boolean mask of the elements where PPO's clip is active (zero gradient).

    clipped = (Â > 0 ∧ ρ > 1+ε_high) ∨ (Â < 0 ∧ ρ < 1−ε_low)

    Outside the band on the *other* side (e.g. Â > 0, ρ < 1−ε_low) the min picks the unclipped
    term, so the gradient is not zero there: PPO only stops moves that already helped.

    Source: book eq. (ppo-clip-mask); Schulman et al. 2017, arXiv:1707.06347, Fig. 1.

    Args:
        ratio: (..., T) ρ ≥ 0.
        advantages: broadcastable to (..., T).
        clip_eps_low, clip_eps_high: as in :func:`clipped_surrogate_loss`.
    Returns:
        bool tensor of the broadcast shape.
    Gradient:
        none (a mask).
    Raises:
        ValueError: ε_low or ε_high negative, NaN or infinite, or shapes do not broadcast.
    See also:
        rlbook.clip_fraction
    """
    low, high = _clip_bounds(clip_eps_low, clip_eps_high)
    ratio = _checks.as_float_tensor("ratio", ratio)
    advantages = _checks.as_float_tensor("advantages", advantages, dtype=ratio.dtype)
    _check_broadcasts_to("advantages", advantages, ratio.shape, target="ratio")
    return ((advantages > 0) & (ratio > high)) | ((advantages < 0) & (ratio < low))


def clipped_surrogate_loss_masked(
    log_probs, old_log_probs, advantages, clip_eps_low: float = 0.2, clip_eps_high: float | None = None
) -> torch.Tensor:
    """PPO clipped loss written as a mask: same values and gradients as :func:`clipped_surrogate_loss`.

    loss = −ρ·Â            where the clip is inactive,
    loss = −sg(clip(ρ))·Â   where it is active (a constant: zero gradient),

    i.e. the gradient is −Â·ρ·∇log π·1[not clipped]. Written this way the "min" is seen to be a
    per-token switch that turns the policy-gradient term off.

    Source: book eq. (ppo-clip-mask); Schulman et al. 2017, arXiv:1707.06347, eq. 7 and Fig. 1.

    Args / Returns / Raises:
        as :func:`clipped_surrogate_loss`.
    Gradient:
        through ``log_probs`` where ``clip_region`` is false; exactly 0 elsewhere.
    See also:
        rlbook.clipped_surrogate_loss, rlbook.clip_region
    """
    low, high = _clip_bounds(clip_eps_low, clip_eps_high)
    ratio, advantages = _ratio_and_advantages(log_probs, old_log_probs, advantages)
    active = clip_region(ratio.detach(), advantages, clip_eps_low, clip_eps_high)
    constant = torch.clamp(ratio.detach(), low, high) * advantages
    return -torch.where(active, constant, ratio * advantages)


def cispo_loss(
    log_probs, old_log_probs, advantages, clip_eps_low: float, clip_eps_high: float
) -> torch.Tensor:
    """Per-element CISPO loss: clip the importance weight, not the update (minimise).

    loss = −sg(clip(ρ, 1−ε_low, 1+ε_high))·Â·log π_θ

    The gradient −clip(ρ)·Â·∇log π is never zero for a token with Â ≠ 0: a token far outside
    the band still contributes, with a bounded weight, instead of being dropped as in PPO.
    The loss VALUE is not a surrogate objective (only its gradient matters).

    Source: book eq. (cispo); MiniMax 2025, *MiniMax-M1* report, arXiv:2506.13585, CISPO section
    (they tune only ε_high and set ε_low large enough to be inactive).

    Args:
        log_probs: (..., T) log π_θ, nats.
        old_log_probs: (..., T) log π_θold, nats.
        advantages: broadcastable to (..., T).
        clip_eps_low: ε_low ≥ 0, finite (≥ 1: no lower bound on the weight, as MiniMax-M1 uses).
        clip_eps_high: ε_high ≥ 0, finite.
    Returns:
        (..., T) unreduced loss.
    Gradient:
        −sg(clip(ρ))·Â w.r.t. ``log_probs``; the weight carries no gradient.
    Raises:
        ValueError: shapes do not match/broadcast, ε_low or ε_high negative, NaN or infinite.
    See also:
        rlbook.clipped_surrogate_loss, rlbook.reference.cispo_loss_loop
    """
    low, high = _clip_bounds(clip_eps_low, clip_eps_high)
    ratio, advantages = _ratio_and_advantages(log_probs, old_log_probs, advantages)
    weight = torch.clamp(ratio, low, high).detach()
    log_probs = _checks.as_float_tensor("log_probs", log_probs)
    return -weight * advantages * log_probs


def kl_penalty_loss(log_probs, old_log_probs, advantages, kl, kl_coef: float) -> torch.Tensor:
    """Per-element loss of PPO's KL-penalised surrogate (minimise).

    loss = −(ρ·Â − β·kl),   ρ = exp(log_probs − old_log_probs)

    ``kl`` is a per-element KL estimate between π_θold and π_θ (e.g. :func:`rlbook.categorical_kl`
    of the two distributions at each state, or a sample estimator such as ``kl_k3``).

    Source: book eq. (ppo-kl-penalty); Schulman et al. 2017, arXiv:1707.06347, eq. 8 (negated).

    Args:
        log_probs, old_log_probs: (..., T) log-probabilities, nats.
        advantages: broadcastable to (..., T).
        kl: broadcastable to (..., T), nats per element.
        kl_coef: β ≥ 0.
    Returns:
        (..., T) unreduced loss.
    Gradient:
        through ``log_probs`` and through ``kl`` (the penalty must be differentiated).
    Raises:
        ValueError: shapes do not match/broadcast, kl_coef < 0.
    See also:
        rlbook.adaptive_kl_coef
    """
    _checks.check_in_range("kl_coef", kl_coef, 0.0)
    ratio, advantages = _ratio_and_advantages(log_probs, old_log_probs, advantages)
    kl = _checks.as_float_tensor("kl", kl, dtype=ratio.dtype)
    _check_broadcasts_to("kl", kl, ratio.shape)
    return -(ratio * advantages - kl_coef * kl)


def adaptive_kl_coef(kl_coef: float, kl: float, target_kl: float) -> float:
    """PPO's adaptive KL coefficient update, applied once per policy update.

    β ← β/2 if d < d_targ/1.5;   β ← 2β if d > 1.5·d_targ;   β unchanged otherwise.

    Source: book eq. (adaptive-kl); Schulman et al. 2017, arXiv:1707.06347, sec. 4.

    Args:
        kl_coef: current β > 0.
        kl: measured mean KL d of the last update (a float or a 0-dim tensor), ≥ 0.
        target_kl: d_targ > 0.
    Returns:
        float, the new β.
    Raises:
        ValueError: kl_coef ≤ 0, kl < 0 or NaN, target_kl ≤ 0.
    Example:
        >>> adaptive_kl_coef(1.0, 0.001, 0.01), adaptive_kl_coef(1.0, 0.02, 0.01), adaptive_kl_coef(1.0, 0.01, 0.01)
        (0.5, 2.0, 1.0)
    """
    _checks.check_positive("kl_coef", kl_coef)
    _checks.check_in_range("kl", float(kl), 0.0)
    _checks.check_positive("target_kl", target_kl)
    kl, kl_coef = float(kl), float(kl_coef)
    if kl < target_kl / 1.5:
        return kl_coef / 2.0
    if kl > target_kl * 1.5:
        return kl_coef * 2.0
    return kl_coef


def value_loss(values, returns, old_values=None, clip_eps: float | None = None) -> torch.Tensor:
    """Per-element squared-error value loss, optionally clipped as in OpenAI baselines' PPO2.

    plain:   ½(V − R̂)²
    clipped: ½·max((V − R̂)², (V_clip − R̂)²),  V_clip = V_old + clip(V − V_old, −ε, ε)

    The clipped form (PPO2 / CleanRL ``clip_vloss``) is not in the PPO paper; it keeps the value
    function near its previous prediction, and its ε is in the units of the return, so it should
    be chosen with the reward scale in mind (Andrychowicz et al. 2021 found it does not help).

    Source: book eq. (value-loss); Schulman et al. 2017, arXiv:1707.06347, eq. 9 (L^VF);
    openai/baselines ``ppo2/model.py`` for the clipped form.

    Args:
        values: (..., T) V_θ(s_t).
        returns: (..., T) regression targets R̂_t (e.g. from :func:`rlbook.gae`).
        old_values: (..., T) V_θold(s_t) at rollout time; required iff ``clip_eps`` is given.
        clip_eps: ε > 0 in return units, or None for the plain loss.
    Returns:
        (..., T) unreduced loss.
    Gradient:
        through ``values`` only; ``returns`` and ``old_values`` detached.
    Raises:
        ValueError: shapes differ, clip_eps ≤ 0, or clip_eps given without old_values.
    See also:
        rlbook.explained_variance
    """
    values = _checks.as_float_tensor("values", values)
    returns = _checks.as_float_tensor("returns", returns, dtype=values.dtype).detach()
    _checks.check_same_shape(values=values, returns=returns)
    loss = 0.5 * (values - returns) ** 2
    if clip_eps is None:
        return loss
    _checks.check_positive("clip_eps", clip_eps)
    if old_values is None:
        raise ValueError("`old_values` is required when `clip_eps` is given (clipping is around V_old)")
    old_values = _checks.as_float_tensor("old_values", old_values, dtype=values.dtype).detach()
    _checks.check_same_shape(values=values, old_values=old_values)
    values_clipped = old_values + torch.clamp(values - old_values, -clip_eps, clip_eps)
    return torch.maximum(loss, 0.5 * (values_clipped - returns) ** 2)


def entropy_from_logits(logits) -> torch.Tensor:
    """Entropy of the categorical distribution softmax(logits), over the last dim, in float32.

    H = −Σ_a π(a)·log π(a),  log π = log_softmax(logits)

    Computed from ``log_softmax`` (no log of a probability that underflowed) and in float32
    even for bfloat16/float16 logits; float64 logits stay float64.

    Source: book eq. (entropy); Williams & Peng 1991 / Mnih et al. 2016 (A3C) entropy bonus.

    Args:
        logits: (..., A) unnormalised log-probabilities (A actions or V vocabulary entries).
    Returns:
        (...) entropy in nats, in [0, log A].
    Gradient:
        through ``logits``.
    Raises:
        ValueError: logits is 0-dim or empty.
    Example:
        >>> round(float(entropy_from_logits(torch.zeros(4))), 4)  # log 4
        1.3863
    """
    if not isinstance(logits, torch.Tensor):
        logits = _checks.as_float_tensor("logits", logits)
    _checks.check_min_ndim("logits", logits, 1, "(..., A)")
    _checks.check_nonempty("logits", logits)
    if logits.dtype != torch.float64:
        logits = logits.float()
    log_p = torch.log_softmax(logits, dim=-1)
    return -(log_p.exp() * log_p).sum(dim=-1)
