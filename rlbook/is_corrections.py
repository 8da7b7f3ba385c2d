"""Importance-sampling corrections for a sampler that is not the policy (train–inference mismatch).

The tokens of a GRPO batch are drawn by a *sampler* π_s (an inference engine, a rounded or stale copy
of the policy), while the loss is built from the *trainer's* log-probabilities π_old of the same
tokens. Where the two differ, the batch is off-policy, and the per-token surrogate is reweighted by

    ρ_t = π_old(o_t | q, o_<t) / π_s(o_t | q, o_<t) = exp(log π_old − log π_s)      (per token)

before aggregation. Each correction bounds ρ by a cap C ≥ 1, per token or per sequence:

======================  ============================================================================
mode (TRL's name)       weight w_t of the per-token surrogate
======================  ============================================================================
"none"                  1 (no correction; the identity)
"token_truncate"        min(ρ_t, C)                       truncated IS, TIS (Yao et al. 2025)
"token_mask"            ρ_t · 1[1/C ≤ ρ_t ≤ C]            masked IS, MIS (IcePop, arXiv:2510.18855)
"sequence_truncate"     min(ρ_seq, C),  ρ_seq = exp(Σ_t log ρ_t)        TRL's sequence ratio
"sequence_mask"         ρ_seq · 1[1/C ≤ ρ_seq ≤ C]                        (a product over tokens)
"geometric_truncate"    min(ρ_geo, C),  ρ_geo = exp(mean_t log ρ_t)     the geometric mean, as
"geometric_mask"        ρ_geo · 1[1/C ≤ ρ_geo ≤ C]                        GSPO's length-normalised ratio
======================  ============================================================================

The four middle names and their semantics are TRL's (``trl.GRPOConfig.vllm_importance_sampling_mode``,
TRL 1.16, ``GRPOTrainer._generate_and_score_completions``): TRL's sequence ratio is the *product*
of the token ratios, exp(Σ_t log ρ_t), not their geometric mean; its mask modes keep ρ (not 1)
where the ratio is in range. TRL bounds the ratio by [C_min, C_max]; here the band is [1/C, C]
for the mask modes (``vllm_importance_sampling_clip_min = 1/C``, ``clip_max = C``) and only the
upper bound C for the truncate modes (``clip_min = None``, as Yao et al.'s min(ρ, C)). The
geometric-mean modes have no TRL counterpart: their ratio does not grow with the sequence length
(Zheng et al. 2025, GSPO, arXiv:2507.18071, eq. 7, uses the same normalisation for π_θ/π_old).

The weights are data (detached): they change how much each token's gradient counts, never carry a
gradient themselves. Masked tokens get weight 0 and stay in the aggregation's normaliser, as in TRL
(slime and verl instead take them out of the loss mask; the two differ by the share dropped).
With π_s = π_old every ρ_t is exactly 1, every mode returns weights of exactly 1 and keeps every
token, so a corrected loss equals the uncorrected one bit for bit.

Sources: Yao, Liu, Zhang, Lu, Wang, Wang & Gao 2025, "Your efficient RL framework secretly brings you
off-policy RL training", fengyao.notion.site blog, Aug 2025 (TIS, min(ρ, C)); Ling Team 2025, Ring-1T
(IcePop), arXiv:2510.18855 (masking tokens whose ratio leaves a band); TRL 1.16
``vllm_importance_sampling_*`` options (names, the product sequence ratio, mask semantics).
"""

from __future__ import annotations

import torch

from rlbook import _checks

__all__ = ["IS_CORRECTION_MODES", "sampler_log_ratio", "importance_correction"]

IS_CORRECTION_MODES = ("none", "token_truncate", "token_mask", "sequence_truncate", "sequence_mask",
                       "geometric_truncate", "geometric_mask")


def _inputs(trainer_old_log_probs, sampler_log_probs, response_mask):
    old = _checks.as_float_tensor("trainer_old_log_probs", trainer_old_log_probs)
    sampler = _checks.as_float_tensor("sampler_log_probs", sampler_log_probs, dtype=old.dtype)
    _checks.check_min_ndim("trainer_old_log_probs", old, 2, "(B, T)")
    if old.dim() != 2:
        raise ValueError(f"`trainer_old_log_probs` must be (B, T); got shape {tuple(old.shape)}")
    _checks.check_same_shape(trainer_old_log_probs=old, sampler_log_probs=sampler)
    mask = _checks.check_bool_like("response_mask", response_mask, shape=tuple(old.shape))
    for name, x in (("trainer_old_log_probs", old), ("sampler_log_probs", sampler)):
        if (x[mask] > 1e-6).any():
            raise ValueError(f"`{name}` must be log-probabilities (≤ 0) on the response tokens; got a maximum of "
                             f"{float(x[mask].max()):.3g}")
    return old.detach(), sampler.detach(), mask


def sampler_log_ratio(trainer_old_log_probs, sampler_log_probs, response_mask) -> torch.Tensor:
    """Per-token log ratio of the trainer's π_old to the sampler's π_s, 0 off the response.

    log ρ_t = (log π_old(o_t) − log π_s(o_t)) · m_t

    Source: Yao et al. 2025, "Your efficient RL framework secretly brings you off-policy RL
    training" (fengyao.notion.site blog, Aug 2025); TRL 1.16 ``per_token_logps_diff``.

    Args:
        trainer_old_log_probs: (B, T) log π_old of the sampled tokens by the trainer, nats.
        sampler_log_probs: (B, T) log π_s of the same tokens as the sampler reported them, nats.
        response_mask: (B, T) bool (or 0/1), True on response tokens.
    Returns:
        (B, T) log ρ, nats, detached; exactly 0 where the mask is False.
    Raises:
        ValueError: shapes differ or are not (B, T) (naming the argument); a NaN or infinite value
            anywhere; a log-prob > 0 on a response token.
    """
    old, sampler, mask = _inputs(trainer_old_log_probs, sampler_log_probs, response_mask)
    return torch.where(mask, old - sampler, torch.zeros_like(old))


def importance_correction(trainer_old_log_probs, sampler_log_probs, response_mask, mode: str = "none",
                          cap: float = 2.0) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """Weights (and the tokens kept) that correct a per-token surrogate for sampling by π_s ≠ π_old.

    ρ_t = exp(log π_old − log π_s) per token; ρ_seq = exp(Σ_t m_t log ρ_t) (TRL's sequence
    ratio, a product); ρ_geo = exp(Σ_t m_t log ρ_t / Σ_t m_t) (geometric mean). Then

        truncate:  w = min(ρ, C)                 kept = m
        mask:      w = ρ · 1[1/C ≤ ρ ≤ C] · m     kept = m ∧ 1/C ≤ ρ ≤ C
        none:      w = 1                         kept = m

    with ρ the token, sequence or geometric ratio (the last two broadcast over the sequence's
    tokens). The loss then uses w_t · ℓ_t with the usual aggregation over ``response_mask``.

    Source: token TIS: Yao et al. 2025, "Your efficient RL framework secretly brings you off-policy
    RL training", fengyao.notion.site blog, Aug 2025; token masking outside a band: IcePop,
    Ling Team 2025 (Ring-1T), arXiv:2510.18855; the mode names and the sequence ratio: TRL 1.16,
    ``GRPOConfig.vllm_importance_sampling_mode``; the geometric mean: GSPO, arXiv:2507.18071 eq. 7.

    Args:
        trainer_old_log_probs: (B, T) log π_old of the sampled tokens by the trainer, nats.
        sampler_log_probs: (B, T) log π_s of the same tokens by the sampler, nats.
        response_mask: (B, T) bool (or 0/1), True on response tokens.
        mode: one of ``IS_CORRECTION_MODES`` (table in the module docstring).
        cap: C ≥ 1 (dimensionless): the upper bound of the truncate modes and the band [1/C, C]
            of the mask modes.
    Returns:
        ``(weights, kept, stats)``: weights (B, T) float (dtype of ``trainer_old_log_probs``),
        detached, 0 off the response; kept (B, T) bool, the response tokens whose weight is not
        masked to 0; stats, a dict of 0-d float tensors over the response tokens: "log_ratio_mean"
        (mean log ρ_t, nats), "log_ratio_abs_max", "ratio_mean" (mean ρ of the chosen level before
        bounding, over tokens), "weight_mean" (mean w_t), "truncated_fraction" (share with ρ > C,
        truncate modes; 0 otherwise), "masked_fraction" (share dropped, mask modes; 0 otherwise).
        A batch with no response token gives NaN means and 0 fractions.
    Gradient:
        none: everything returned is detached (the weights are data).
    Raises:
        ValueError: ``mode`` unknown (the message lists the modes); ``cap`` < 1 or not finite;
            shapes, non-finite values or positive log-probs, as :func:`sampler_log_ratio`.
    """
    if not isinstance(mode, str) or mode not in IS_CORRECTION_MODES:
        raise ValueError(f"`mode` must be one of {list(IS_CORRECTION_MODES)}; got {mode!r}")
    if isinstance(cap, (bool, str)):
        raise ValueError(f"`cap` must be a number C ≥ 1; got {cap!r}")
    _checks.check_in_range("cap", cap, 1.0, float("inf"), high_inclusive=False)
    cap = float(cap)
    log_rho = sampler_log_ratio(trainer_old_log_probs, sampler_log_probs, response_mask)
    mask = _checks.check_bool_like("response_mask", response_mask, shape=tuple(log_rho.shape))
    m = mask.to(log_rho.dtype)
    level, _, bound = mode.partition("_")
    if level == "token" or level == "none":
        log_level = log_rho
    elif level == "sequence":
        log_level = log_rho.sum(dim=-1, keepdim=True).expand_as(log_rho)
    else:  # geometric
        log_level = (log_rho.sum(dim=-1, keepdim=True) / m.sum(dim=-1, keepdim=True).clamp(min=1.0)).expand_as(log_rho)
    ratio = torch.exp(log_level)
    zero = torch.zeros_like(ratio)
    if bound == "truncate":
        weights, kept = torch.where(mask, ratio.clamp(max=cap), zero), mask
        over = mask & (ratio > cap)
    elif bound == "mask":
        kept = mask & (ratio >= 1.0 / cap) & (ratio <= cap)
        weights, over = torch.where(kept, ratio, zero), torch.zeros_like(mask)
    else:
        weights, kept, over = m.clone(), mask.clone(), torch.zeros_like(mask)
    count = mask.sum()
    share = (lambda b: (b & mask).sum().to(log_rho.dtype) / count) if count else (lambda b: log_rho.new_zeros(()))
    nan = log_rho.new_full((), float("nan"))
    stats = {
        "log_ratio_mean": log_rho[mask].mean() if count else nan,
        "log_ratio_abs_max": log_rho[mask].abs().max() if count else nan,
        "ratio_mean": ratio[mask].mean() if count else nan,
        "weight_mean": weights[mask].mean() if count else nan,
        "truncated_fraction": share(over),
        "masked_fraction": share(mask & ~kept),
    }
    return weights.detach(), kept, stats
