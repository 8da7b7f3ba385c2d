"""Tensor-only training steps with the names of university course assignments and TRL/verl.

Each function takes per-token log-probabilities that already carry a gradient (from
:func:`rlbook.lm.get_response_log_probs` or :func:`rlbook.lm.completion_log_probs`), builds the
loss, scales it for gradient accumulation and calls ``backward()``; the caller steps the optimiser
after every ``gradient_accumulation_steps`` calls. They are the single code path of the book's own
loops: :func:`rlbook.lm.train_sft` calls :func:`sft_microbatch_train_step` and
:func:`rlbook.algos.grpo.grpo_step` calls :func:`grpo_microbatch_train_step`.

==============================  ============================================================
function                        loss of one micro-batch (before ``/ gradient_accumulation_steps``)
==============================  ============================================================
``sft_loss``                    −1/B Σ_i (Σ_t m_{i,t} log π_{i,t}) / c
``policy_gradient_loss``        per-token −A·log π, or the clipped surrogate (unreduced)
``grpo_microbatch_train_step``  aggregate(policy_gradient_loss [+ β·k3]) [− c·mean entropy]
                                (GRPO: per-sequence masked mean, then the batch mean)
==============================  ============================================================

Gradient accumulation. Dividing each micro-batch loss by k and summing the gradients of k
micro-batches of B/k sequences gives the gradient of one batch of B sequences whenever the loss is
a mean over sequences (``sft_loss``, GRPO's ``seq_mean_token_mean``), because the mean of k equal-
sized means is the mean. (DAPO's ``token_mean`` needs the global token count: pass
``functools.partial(rl.token_mean, num_tokens=N)`` as ``aggregation`` and k = 1.)

Source: Stanford CS336 (Spring 2025) assignment 5 (the function names and signatures); Shao et
al. 2024 (DeepSeekMath), arXiv:2402.03300, eq. 21 (GRPO); Williams 1992 (REINFORCE).
"""

from __future__ import annotations

import torch

from rlbook import _checks
from rlbook.aggregation import AGGREGATIONS, fixed_length_mean, masked_normalize, seq_mean_token_mean
from rlbook.kl import kl_k3
from rlbook.dppo import dppo_loss, dppo_mask
from rlbook.entropy_control import (CLIP_COV_BOUNDS, CLIP_COV_RATIO, KL_COV_COEF, KL_COV_RATIO, clip_cov_mask,
                                    high_entropy_mask, kl_cov_loss, token_covariance)
from rlbook.is_corrections import IS_CORRECTION_MODES, importance_correction
from rlbook.losses import cispo_loss, clip_region, clipped_surrogate_loss
from rlbook.sequence_losses import gspo_loss, gspo_sequence_log_ratio
from rlbook.policy_gradient import reinforce_loss

__all__ = [
    "POLICY_GRADIENT_LOSS_TYPES",
    "sft_loss",
    "sft_microbatch_train_step",
    "policy_gradient_loss",
    "grpo_microbatch_train_step",
]

# loss_type -> the arguments it needs besides policy_log_probs
POLICY_GRADIENT_LOSS_TYPES = {
    "no_baseline": ("raw_rewards",),
    "reinforce_with_baseline": ("advantages",),
    "grpo_clip": ("advantages", "old_log_probs", "cliprange"),
    "cispo": ("advantages", "old_log_probs", "cliprange"),
    "gspo": ("advantages", "old_log_probs", "cliprange", "response_mask"),
    "gspo_token": ("advantages", "old_log_probs", "cliprange", "response_mask"),
    "dppo": ("advantages", "old_log_probs", "divergence_threshold"),
}


def _check_log_probs(policy_log_probs) -> None:
    if not isinstance(policy_log_probs, torch.Tensor) or not torch.is_floating_point(policy_log_probs):
        raise ValueError("`policy_log_probs` must be a floating tensor of shape (B, T)")
    if policy_log_probs.dim() != 2:
        raise ValueError(f"`policy_log_probs` must have shape (B, T); got {tuple(policy_log_probs.shape)}")


def _check_log_probs_and_mask(policy_log_probs, response_mask) -> torch.Tensor:
    """Validate ``policy_log_probs`` (B, T) float and ``response_mask`` (B, T); return the mask as bool."""
    _check_log_probs(policy_log_probs)
    return _checks.check_bool_like("response_mask", response_mask, policy_log_probs.shape).to(policy_log_probs.device)


def _check_accumulation(gradient_accumulation_steps) -> int:
    k = gradient_accumulation_steps
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"`gradient_accumulation_steps` must be a positive integer; got {k!r}")
    return k


def sft_loss(policy_log_probs, response_mask, normalize_constant=1.0) -> torch.Tensor:
    """Supervised fine-tuning loss: negative log-likelihood of the response tokens (minimise).

    L = −1/B Σ_i masked_normalize(log π_i, m_i, c) = −1/B Σ_i Σ_t m_{i,t} log π_θ(y_{i,t}|x_i, y_{i,<t}) / c

    With c = 1 this is the summed NLL per sequence, averaged over sequences; with c = N/B (the mean
    number of response tokens per sequence in the batch) it equals the token mean −Σ m·log π / N.

    Source: book eq. (sft); CS336 (2025) assignment 5, ``sft_microbatch_train_step``.

    Args:
        policy_log_probs: (B, T) log π_θ of the label tokens, nats, with grad.
        response_mask: (B, T) bool, True on response (output) tokens; padding and prompt False.
        normalize_constant: c > 0, in tokens (number or 0-d tensor, treated as a constant).
    Returns:
        0-d tensor, nats per c tokens.
    Gradient:
        through ``policy_log_probs``: −m_{i,t}/(B·c).
    Raises:
        ValueError: log-probs not a floating (B, T) tensor, mask shape differs, c ≤ 0.
    Example:
        >>> sft_loss(torch.tensor([[-1., -2.], [-3., -4.]]), torch.tensor([[True, True], [True, False]]), 2.0)
        tensor(1.5000)
    """
    mask = _check_log_probs_and_mask(policy_log_probs, response_mask)
    if policy_log_probs.shape[0] == 0:
        raise ValueError("`policy_log_probs` has no rows (B = 0); expected shape (B, T) with B ≥ 1")
    if isinstance(normalize_constant, torch.Tensor) and normalize_constant.numel() != 1:
        raise ValueError(f"`normalize_constant` must be a number or a 0-d tensor; got shape {tuple(normalize_constant.shape)}")
    if not 0 < float(normalize_constant) < float("inf"):
        raise ValueError(f"`normalize_constant` must be a finite number > 0; got {float(normalize_constant)}")
    # 1/B Σ_i (s_i / c) written as one masked sum over the batch divided by B·c: the same number,
    # one rounding fewer, and with c = N/B exactly the token mean −Σ m·log π / N
    return -masked_normalize(policy_log_probs, mask, normalize_constant * policy_log_probs.shape[0])


def sft_microbatch_train_step(policy_log_probs, response_mask, gradient_accumulation_steps: int,
                              normalize_constant=1.0) -> tuple[torch.Tensor, dict]:
    """One SFT micro-batch: ``sft_loss / gradient_accumulation_steps``, then ``backward()``.

    loss = −1/(k·B) Σ_i Σ_t m_{i,t} log π_{i,t} / c,   k = ``gradient_accumulation_steps``

    k calls on micro-batches of B/k sequences (same c) leave the same ``.grad`` as one call with
    k = 1 on the B sequences. The caller zeroes the gradients and steps the optimiser.

    Source: CS336 (2025) assignment 5, ``sft_microbatch_train_step``; book eq. (sft).

    Args:
        policy_log_probs: (B, T) log π_θ of the label tokens, nats, with grad.
        response_mask: (B, T) bool, True on response tokens.
        gradient_accumulation_steps: k ≥ 1, micro-batches per optimiser step.
        normalize_constant: c > 0, in tokens (see :func:`sft_loss`).
    Returns:
        ``(loss, metadata)``: the scaled 0-d loss (still attached to the graph; log it with
        ``.item()``) and ``{"unscaled_loss": 0-d detached, "num_response_tokens": 0-d long}``.
    Gradient:
        accumulated into the leaves of ``policy_log_probs``' graph: −m_{i,t}/(k·B·c) per log-prob.
    Raises:
        ValueError: bad shapes (named), k not a positive integer, c ≤ 0.
    """
    k = _check_accumulation(gradient_accumulation_steps)
    unscaled = sft_loss(policy_log_probs, response_mask, normalize_constant)
    loss = unscaled / k
    loss.backward()
    mask = _checks.check_bool_like("response_mask", response_mask)
    return loss, {"unscaled_loss": unscaled.detach(), "num_response_tokens": mask.sum()}


def _per_sequence(name, x, log_probs):
    """``x`` as a float tensor on log_probs' device; a 1-D (B,) vector becomes (B, 1)."""
    x = _checks.as_float_tensor(name, x, dtype=log_probs.dtype).to(log_probs.device)
    if x.dim() == 1 and x.shape[0] == log_probs.shape[0]:
        x = x[:, None]
    if not _checks.broadcasts_to(x.shape, log_probs.shape):
        raise ValueError(f"`{name}` must have shape (B, 1) (or (B,) or (B, T)) for `policy_log_probs` "
                         f"{tuple(log_probs.shape)}; got {tuple(x.shape)}")
    return x


def _clip_band(cliprange) -> tuple[float, float]:
    """``cliprange`` ε or (ε_low, ε_high) -> (ε_low, ε_high)."""
    if isinstance(cliprange, (tuple, list)):
        if len(cliprange) != 2:
            raise ValueError(f"`cliprange` must be ε or a pair (ε_low, ε_high); got {cliprange!r}")
        return float(cliprange[0]), float(cliprange[1])
    return float(cliprange), float(cliprange)


def policy_gradient_loss(policy_log_probs, loss_type: str, raw_rewards=None, advantages=None,
                         old_log_probs=None, cliprange=None, *, response_mask=None, divergence_threshold=None,
                         divergence: str = "binary_tv") -> tuple[torch.Tensor, dict]:
    """Per-token policy-gradient loss of one of the standard kinds (minimise; unreduced).

    no_baseline:              ℓ_t = −R · log π_θ(o_t)            (REINFORCE, raw reward)
    reinforce_with_baseline:  ℓ_t = −Â · log π_θ(o_t)            (e.g. Â = group-normalised reward)
    grpo_clip:                ℓ_t = −min(ρ_t Â, clip(ρ_t, 1−ε_low, 1+ε_high) Â),  ρ_t = π_θ/π_old
    cispo:                    ℓ_t = −sg(clip(ρ_t, 1−ε_low, 1+ε_high)) Â log π_θ(o_t)
    gspo:                     ℓ_{i,t} = −min(s_i Â_i, clip(s_i, 1−ε_low, 1+ε_high) Â_i),
                              s_i = exp(mean_t log ρ_{i,t})  (sequence ratio; every token of row i)
    gspo_token:               GSPO-token: s_{i,t} = sg(s_i)·π_θ(o_t)/sg(π_θ(o_t)), same value and gradient
                              as "gspo" for sequence-level Â
    dppo:                     ℓ_t = −M_t ρ_t Â,  M_t = 0 where the estimated divergence D̂(π_θ, π_old) at
                              the sampled token exceeds τ and the update pushes it further (DPPO)

    The first two are :func:`rlbook.reinforce_loss`, "grpo_clip" is
    :func:`rlbook.clipped_surrogate_loss`, "cispo" :func:`rlbook.cispo_loss`, "gspo" and
    "gspo_token" :func:`rlbook.gspo_loss` and "dppo" :func:`rlbook.dppo_loss`; this function only
    dispatches and checks that the arguments a type needs are there.

    Source: CS336 (2025) assignment 5, ``compute_policy_gradient_loss``; Williams 1992, eq. 11;
    Schulman et al. 2017, arXiv:1707.06347, eq. 7; Shao et al. 2024, arXiv:2402.03300, eq. 21;
    MiniMax 2025, arXiv:2506.13585 (CISPO); Zheng et al. 2025, arXiv:2507.18071 (GSPO, eq. 5-7
    and 11-13); Qi et al. 2026 (DPPO), arXiv:2602.04879 (the binary TV / KL trust region).

    Args:
        policy_log_probs: (B, T) log π_θ of the sampled tokens, nats, with grad.
        loss_type: a key of ``POLICY_GRADIENT_LOSS_TYPES``.
        raw_rewards: (B, 1) or (B,) rewards; needed for "no_baseline".
        advantages: (B, 1), (B,) or (B, T); needed by every other type.
        old_log_probs: (B, T) log π_old, nats; needed for "grpo_clip" and "cispo".
        cliprange: ε, or (ε_low, ε_high) for an asymmetric band; needed for "grpo_clip", "cispo",
            "gspo", "gspo_token" (GSPO's band is on the sequence ratio: ε ≈ 3e-4).
        response_mask: (B, T) bool, the completion tokens; needed for "gspo", "gspo_token" (the
            sequence ratio averages over them).
        divergence_threshold: τ > 0; needed for "dppo".
        divergence: "binary_tv" or "binary_kl", DPPO's estimate (:func:`rlbook.dppo_mask`).
    Returns:
        ``(per_token_loss (B, T), metadata)``; for "grpo_clip" metadata holds ``ratio`` (B, T) and
        ``clipped`` (B, T) bool (the clip zeroes that token's gradient, :func:`rlbook.clip_region`);
        for "cispo" ``ratio`` and ``weight_clipped`` (ρ outside the band); for "gspo"/"gspo_token"
        ``ratio`` (token ρ), ``sequence_ratio`` (B,) and ``clipped`` (every token of a row whose
        sequence ratio left the band in its advantage's direction); for "dppo" ``ratio`` and
        ``clipped`` (the tokens the divergence mask blocks). Detached.
    Gradient:
        through ``policy_log_probs`` only; rewards, advantages and old log-probs are constants.
    Raises:
        ValueError: unknown ``loss_type``; a needed argument is None (named); a shape that does
            not fit (B, T); ε out of range.
    """
    if loss_type not in POLICY_GRADIENT_LOSS_TYPES:
        raise ValueError(f"`loss_type` must be one of {sorted(POLICY_GRADIENT_LOSS_TYPES)}; got {loss_type!r}")
    given = {"raw_rewards": raw_rewards, "advantages": advantages, "old_log_probs": old_log_probs, "cliprange": cliprange,
             "response_mask": response_mask, "divergence_threshold": divergence_threshold}
    for name in POLICY_GRADIENT_LOSS_TYPES[loss_type]:
        if given[name] is None:
            raise ValueError(f"`{name}` is required for loss_type={loss_type!r}")
    _check_log_probs(policy_log_probs)
    if loss_type == "no_baseline":
        return reinforce_loss(policy_log_probs, _per_sequence("raw_rewards", raw_rewards, policy_log_probs)), {}
    advantages = _per_sequence("advantages", advantages, policy_log_probs)
    if loss_type == "reinforce_with_baseline":
        return reinforce_loss(policy_log_probs, advantages), {}
    if not isinstance(old_log_probs, torch.Tensor) or tuple(old_log_probs.shape) != tuple(policy_log_probs.shape):
        shape = tuple(old_log_probs.shape) if isinstance(old_log_probs, torch.Tensor) else type(old_log_probs).__name__
        raise ValueError(f"`old_log_probs` must be a tensor of the shape of `policy_log_probs` "
                         f"{tuple(policy_log_probs.shape)}; got {shape}")
    if loss_type == "dppo":
        return _dppo(policy_log_probs, old_log_probs, advantages, divergence_threshold, divergence)
    low, high = _clip_band(cliprange)
    if loss_type in ("gspo", "gspo_token"):
        return _gspo(policy_log_probs, old_log_probs, advantages, response_mask, low, high, loss_type == "gspo_token")
    loss_fn = clipped_surrogate_loss if loss_type == "grpo_clip" else cispo_loss
    per_token = loss_fn(policy_log_probs, old_log_probs, advantages, clip_eps_low=low, clip_eps_high=high)
    with torch.no_grad():
        ratio = torch.exp(policy_log_probs.detach() - old_log_probs)
        if loss_type == "grpo_clip":
            metadata = {"ratio": ratio, "clipped": clip_region(ratio, advantages.expand_as(ratio), low, high)}
        else:
            metadata = {"ratio": ratio, "weight_clipped": (ratio < 1.0 - low) | (ratio > 1.0 + high)}
    return per_token, metadata


def _gspo(log_probs, old_log_probs, advantages, response_mask, low, high, token_level):
    """GSPO's per-token loss and metadata (see :func:`policy_gradient_loss`)."""
    mask = _checks.check_bool_like("response_mask", response_mask, log_probs.shape).to(log_probs.device)
    if not token_level and advantages.shape[-1] != 1:
        raise ValueError(f"`advantages` must be sequence-level, (B, 1) or (B,), for loss_type='gspo' "
                         f"(use 'gspo_token' for per-token advantages); got {tuple(advantages.shape)}")
    per_token = gspo_loss(log_probs, old_log_probs, advantages if token_level else advantages[:, 0], mask,
                          clip_eps_low=low, clip_eps_high=high, token_level=token_level)
    with torch.no_grad():
        seq_ratio = torch.exp(gspo_sequence_log_ratio(log_probs.detach(), old_log_probs, mask))  # (B,)
        seq_adv = advantages.expand_as(log_probs)
        seq_adv = (seq_adv * mask).sum(-1) / mask.sum(-1).clamp(min=1)  # (B,) the row's (mean) advantage
        row_clipped = clip_region(seq_ratio, seq_adv, low, high)  # (B,)
        metadata = {"ratio": torch.exp(log_probs.detach() - old_log_probs), "sequence_ratio": seq_ratio,
                    "clipped": row_clipped[:, None] & mask}
    return per_token, metadata


def _dppo(log_probs, old_log_probs, advantages, threshold, divergence):
    """DPPO's per-token loss and metadata (see :func:`policy_gradient_loss`)."""
    per_token = dppo_loss(log_probs, old_log_probs, advantages, threshold=threshold, divergence=divergence)
    with torch.no_grad():
        keep = dppo_mask(log_probs.detach(), old_log_probs, advantages.expand_as(log_probs), threshold=threshold,
                         divergence=divergence)
        metadata = {"ratio": torch.exp(log_probs.detach() - old_log_probs), "clipped": ~keep}
    return per_token, metadata


def _aggregation_fn(aggregation):
    if callable(aggregation):
        return aggregation
    if aggregation not in AGGREGATIONS:
        raise ValueError(f"`aggregation` must be one of {sorted(AGGREGATIONS)} or a callable(loss, mask); got {aggregation!r}")
    if aggregation == "fixed_length_mean":
        return lambda loss, mask: fixed_length_mean(loss, mask, max_length=loss.shape[-1])
    return AGGREGATIONS[aggregation]


def grpo_microbatch_train_step(policy_log_probs, response_mask, gradient_accumulation_steps: int, loss_type: str,
                               raw_rewards=None, advantages=None, old_log_probs=None, cliprange=None, *,
                               aggregation=seq_mean_token_mean, ref_log_probs=None,
                               kl_coef: float = 0.0, divergence_threshold=None,
                               divergence: str = "binary_tv", sampler_log_probs=None,
                               is_correction: str = "none", is_cap: float = 2.0, entropy=None,
                               entropy_coef: float = 0.0, top_entropy_quantile: float = 1.0,
                               entropy_control: str = "none", clip_cov_ratio: float = CLIP_COV_RATIO,
                               clip_cov_lb: float = CLIP_COV_BOUNDS[0], clip_cov_ub: float = CLIP_COV_BOUNDS[1],
                               kl_cov_ratio: float = KL_COV_RATIO, kl_cov_coef: float = KL_COV_COEF,
                               generator: torch.Generator | None = None) -> tuple[torch.Tensor, dict]:
    """One policy-gradient micro-batch: per-token loss (+ β·k3), aggregate, ``/ k``, ``backward()``.

    L = [ agg_{i,t}( w_{i,t}·e_{i,t}·ℓ_{i,t} + β·k3_{i,t} ) − c·H̄ ] / k,   ℓ from :func:`policy_gradient_loss`

    w = 1 unless ``is_correction`` names a correction for tokens sampled by a sampler π_s that is
    not the trainer's π_old: then w are the detached weights of :func:`rlbook.importance_correction`
    (TRL's modes "token_truncate", "token_mask", "sequence_truncate", "sequence_mask", and
    "geometric_truncate" / "geometric_mask") from π_old (``old_log_probs``, or
    ``policy_log_probs`` detached when there is none) and ``sampler_log_probs``; masked tokens get
    w = 0 and stay in the aggregation's normaliser (as TRL). The KL term is not reweighted. With
    ``is_correction="none"`` (the default) the loss is computed exactly as without the argument.

    Entropy management (each off at its default, the loss then computed exactly as without it):

    * ``top_entropy_quantile`` ρ < 1: e_{i,t} = 1 on the top ρ share of the micro-batch's response
      tokens by ``entropy`` (:func:`rlbook.high_entropy_mask`; Wang et al. 2025,
      arXiv:2506.01939), 0 elsewhere; e ≡ 1 otherwise. The aggregation's normaliser is unchanged
      (TRL's ``top_entropy_quantile``).
    * ``entropy_coef`` c > 0: the bonus −c·H̄, H̄ the mean of ``entropy`` (with its gradient) over
      the response tokens with e = 1 (TRL's ``entropy_coef``: a token mean whatever the
      aggregation).
    * ``entropy_control`` (loss_type "grpo_clip" only; Cui et al. 2025, arXiv:2505.22617):
      "clip_cov" multiplies ℓ by 0 on the tokens of :func:`rlbook.clip_cov_mask` (ratio
      ``clip_cov_ratio``, band (``clip_cov_lb``, ``clip_cov_ub``), drawn with ``generator``, tokens
      the clip already clipped not eligible; eq. 10); "kl_cov" replaces ℓ by
      :func:`rlbook.kl_cov_loss`, −A·ρ + κ·|log ρ| on the top ``kl_cov_ratio`` tokens by covariance
      (κ = ``kl_cov_coef``; eq. 11). The covariance is taken over the micro-batch's response tokens.

    With the default ``aggregation`` (:func:`rlbook.seq_mean_token_mean`) this is GRPO's loss: the
    masked mean over each sequence's response tokens, then the mean over the B sequences. A row with
    no response token contributes 0 and still counts in B (the course's ``masked_mean(·, dim=-1)
    .mean()`` would return NaN there). k micro-batches of B/k sequences then leave the gradient of
    one batch of B. ``aggregation`` may be any callable(loss (B, T), mask (B, T)) -> 0-d, e.g. DAPO's
    token mean or Dr. GRPO's fixed-length mean; a name in ``rl.AGGREGATIONS`` also works
    ("fixed_length_mean" by name uses L_max = T).

    Source: CS336 (2025) assignment 5, ``grpo_microbatch_train_step``; Shao et al. 2024
    (DeepSeekMath), arXiv:2402.03300, eq. 21 (aggregation and the β·k3 term, their eq. 4).

    Args:
        policy_log_probs: (B, T) log π_θ, nats, with grad.
        response_mask: (B, T) bool, True on response tokens.
        gradient_accumulation_steps: k ≥ 1.
        loss_type, raw_rewards, advantages, old_log_probs, cliprange: as :func:`policy_gradient_loss`.
        aggregation: callable(loss, mask) -> 0-d tensor, or a name in ``rl.AGGREGATIONS``.
        ref_log_probs: (B, T) log π_ref, nats (no grad); needed when ``kl_coef`` > 0.
        kl_coef: β ≥ 0 of the per-token k3 penalty KL(π_θ ‖ π_ref).
        divergence_threshold, divergence: DPPO's τ and estimate (loss_type "dppo").
        sampler_log_probs: (B, T) log π_s of the sampled tokens by the sampler, nats; required
            when ``is_correction`` is not "none", ignored otherwise.
        is_correction: a mode of ``rl.IS_CORRECTION_MODES`` ("none" = no reweighting).
        is_cap: C ≥ 1 of the correction (truncate at C; mask outside [1/C, C]).
        entropy: (B, T) per-token entropy of π_θ, nats (``completion_log_probs(...,
            with_entropy=True)``), carrying its gradient when ``entropy_coef`` > 0; required when
            ``entropy_coef`` > 0 or ``top_entropy_quantile`` < 1.
        entropy_coef: c ≥ 0 of the entropy bonus.
        top_entropy_quantile: ρ in (0, 1].
        entropy_control: "none" | "clip_cov" | "kl_cov".
        clip_cov_ratio, clip_cov_lb, clip_cov_ub: Clip-Cov's r in (0, 1] and band.
        kl_cov_ratio, kl_cov_coef: KL-Cov's k in (0, 1] and κ ≥ 0.
        generator: torch.Generator (CPU) for Clip-Cov's random choice; required with "clip_cov".
    Returns:
        ``(loss, metadata)``: the scaled 0-d loss, and the metadata of
        :func:`policy_gradient_loss` plus ``per_token_loss`` (B, T) (detached, β·k3 included);
        with a correction also ``is_weights`` (B, T), ``is_kept`` (B, T) bool and ``is_stats``
        (the stats of :func:`rlbook.importance_correction`); with ``top_entropy_quantile`` < 1 also
        ``entropy_kept`` (B, T) bool (e); with an ``entropy_control`` also ``cov_selected`` (B, T)
        bool, the tokens Clip-Cov removed or KL-Cov penalised.
    Gradient:
        accumulated into the leaves of ``policy_log_probs``' graph (``backward()`` is called).
    Raises:
        ValueError: as :func:`policy_gradient_loss`; mask shape; k; kl_coef < 0 or > 0 without
            ``ref_log_probs``; an unknown aggregation name; a micro-batch whose mask has no True
            element at all (raised by the aggregation, naming ``completion_mask``); an unknown
            ``is_correction`` or ``is_cap`` < 1; ``sampler_log_probs`` missing with a correction;
            an entropy switch out of range, ``entropy`` missing (or without gradient for the bonus),
            an ``entropy_control`` with a loss_type other than "grpo_clip" or "clip_cov" without a
            ``generator`` (each named).
    """
    k = _check_accumulation(gradient_accumulation_steps)
    if not isinstance(is_correction, str) or is_correction not in IS_CORRECTION_MODES:
        raise ValueError(f"`is_correction` must be one of {list(IS_CORRECTION_MODES)}; got {is_correction!r}")
    _checks.check_in_range("is_cap", is_cap, 1.0, float("inf"), high_inclusive=False)
    if is_correction != "none" and sampler_log_probs is None:
        raise ValueError(f"`sampler_log_probs` is required with is_correction={is_correction!r}")
    mask = _check_log_probs_and_mask(policy_log_probs, response_mask)
    aggregate = _aggregation_fn(aggregation)
    _checks.check_in_range("kl_coef", kl_coef, 0.0)
    if kl_coef and ref_log_probs is None:
        raise ValueError("`ref_log_probs` is required when `kl_coef` > 0")
    _check_entropy_switches(loss_type, entropy, policy_log_probs, entropy_coef, top_entropy_quantile, entropy_control,
                            generator)
    per_token, metadata = policy_gradient_loss(policy_log_probs, loss_type, raw_rewards, advantages, old_log_probs, cliprange,
                                               response_mask=mask, divergence_threshold=divergence_threshold,
                                               divergence=divergence)
    if entropy_control != "none":  # Cui et al.: act on the few tokens of largest Cov(log π, A)
        per_token, metadata = _covariance_control(per_token, metadata, policy_log_probs, old_log_probs, advantages, mask,
                                                  entropy_control, clip_cov_ratio, clip_cov_lb, clip_cov_ub,
                                                  kl_cov_ratio, kl_cov_coef, generator)
    bonus_mask = mask
    if top_entropy_quantile < 1.0:  # Wang et al.: only the high-entropy "forking" tokens keep a gradient
        bonus_mask = high_entropy_mask(entropy, mask, top_entropy_quantile)
        per_token = per_token * bonus_mask.to(per_token.dtype)
        metadata = {**metadata, "entropy_kept": bonus_mask}
    if is_correction != "none":  # the sampler is not π_old: reweight each token's surrogate (detached)
        trainer_old = policy_log_probs.detach() if old_log_probs is None else old_log_probs
        weights, kept, is_stats = importance_correction(trainer_old, sampler_log_probs, mask, is_correction, is_cap)
        per_token = per_token * weights.to(per_token.dtype)
        metadata = {**metadata, "is_weights": weights, "is_kept": kept, "is_stats": is_stats}
    if kl_coef:
        per_token = per_token + kl_coef * kl_k3(policy_log_probs, ref_log_probs)
    loss = aggregate(per_token, mask)
    if entropy_coef:  # the entropy bonus: − c · (token mean of H over the tokens the policy term acts on)
        loss = loss - entropy_coef * (entropy * bonus_mask).sum() / bonus_mask.sum().clamp(min=1)
    loss = loss / k
    loss.backward()
    return loss, {**metadata, "per_token_loss": per_token.detach()}


def _check_entropy_switches(loss_type, entropy, log_probs, entropy_coef, top_entropy_quantile, entropy_control,
                            generator):
    for name, value in (("entropy_coef", entropy_coef), ("top_entropy_quantile", top_entropy_quantile)):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"`{name}` must be a number; got {value!r}")
    _checks.check_in_range("entropy_coef", entropy_coef, 0.0, float("inf"), high_inclusive=False)
    _checks.check_in_range("top_entropy_quantile", top_entropy_quantile, 0.0, 1.0, low_inclusive=False)
    if entropy_control not in ("none", "clip_cov", "kl_cov"):
        raise ValueError(f"`entropy_control` must be 'none', 'clip_cov' or 'kl_cov'; got {entropy_control!r}")
    if entropy_control != "none" and loss_type != "grpo_clip":
        raise ValueError(f"`entropy_control`={entropy_control!r} needs loss_type='grpo_clip'; got {loss_type!r}")
    if entropy_control == "clip_cov" and generator is None:
        raise ValueError("`generator` is required with entropy_control='clip_cov' (its random choice of tokens)")
    if entropy_coef or top_entropy_quantile < 1.0:
        if not isinstance(entropy, torch.Tensor) or entropy.shape != log_probs.shape:
            raise ValueError(f"`entropy` must be a (B, T) tensor like `policy_log_probs` {tuple(log_probs.shape)} "
                             f"when entropy_coef > 0 or top_entropy_quantile < 1")
        if entropy_coef and not entropy.requires_grad:
            raise ValueError("`entropy` must carry its gradient for the entropy bonus (entropy_coef > 0); got a "
                             "tensor without grad (detached?)")


def _covariance_control(per_token, metadata, log_probs, old_log_probs, advantages, mask, mode, clip_cov_ratio,
                        clip_cov_lb, clip_cov_ub, kl_cov_ratio, kl_cov_coef, generator):
    """Clip-Cov (zero ℓ on a random few high-covariance tokens the clip left alone) or KL-Cov (the
    unclipped surrogate + κ|log ρ| on the top-covariance tokens): the per-token loss and metadata."""
    advantages = _per_sequence("advantages", advantages, log_probs)
    if mode == "clip_cov":
        covariance = token_covariance(log_probs, advantages, mask)
        removed = clip_cov_mask(covariance, mask, clip_cov_ratio, clip_cov_lb, clip_cov_ub, generator,
                                already_clipped=metadata["clipped"] & mask)
        return per_token * (~removed).to(per_token.dtype), {**metadata, "cov_selected": removed}
    per_token, penalised = kl_cov_loss(log_probs, old_log_probs, advantages, mask, kl_fraction=kl_cov_ratio,
                                       kl_coef=kl_cov_coef)
    # the surrogate is unclipped: no token is clipped
    return per_token, {**metadata, "clipped": torch.zeros_like(mask), "cov_selected": penalised}
