"""Train–inference mismatch: the sampler's distribution, its distance from the trainer's, and what it
does to the policy gradient.

In a real GRPO run the tokens are drawn by an inference engine, not by the trainer: its logits are
rounded to another precision, it may apply a temperature, top-k or top-p that the trainer does not,
so the sampler μ is not the trainer's π. Three pieces, each exact:

* :func:`sampler_log_probs`: μ from the trainer's logits (precision rounding, temperature, top-k,
  top-p, renormalised);
* :func:`log_ratio_stats` and :func:`mismatch_kls`: the per-token log-ratio log π − log μ of the
  sampled tokens (mean, quantiles, the share a cap would touch) and the exact KL in both directions;
* :func:`off_policy_gradient_moments`: on K enumerable tokens, the expectation and variance of the
  policy-gradient estimator from n draws of μ, uncorrected, importance-weighted, truncated (TIS) or
  masked (MIS), against the on-policy gradient (sums over the K tokens, no sampling).

Sources: Yao et al. 2025, "Your efficient RL framework secretly brings you off-policy RL training"
(fengyao.notion.site/off-policy-rl; TIS); Ring-1T / IcePop, arXiv:2510.18855 (masking outside a band);
Qi et al. 2025, "Defeating the training-inference mismatch via FP16", arXiv:2510.26788; Holtzman et
al. 2019, arXiv:1904.09751 (top-p); TRL's ``vllm_importance_sampling_mode`` (token_truncate, token_mask).
"""

from __future__ import annotations

import collections
import copy
import functools
import math
import numbers

import torch

from rlbook import _checks
from rlbook.is_corrections import importance_correction
from rlbook.kl import categorical_kl

__all__ = ["SAMPLER_PRECISIONS", "MismatchedSampler", "sampler_log_probs", "log_ratio_stats", "mismatch_kls", "GRADIENT_CORRECTIONS",
           "off_policy_gradient_moments"]

# the precisions a sampler may round its logits to (names as engines and configs spell them)
SAMPLER_PRECISIONS = {"fp32": torch.float32, "float32": torch.float32, "bf16": torch.bfloat16, "bfloat16": torch.bfloat16,
              "fp16": torch.float16, "float16": torch.float16}
# the estimators :func:`off_policy_gradient_moments` knows; "tis" and "mis" are
# :func:`rlbook.importance_correction`'s "token_truncate" and "token_mask" (TRL's names)
GRADIENT_CORRECTIONS = ("none", "is", "tis", "mis")


def _precision(dtype, name: str = "dtype") -> torch.dtype | None:
    if dtype is None:
        return None
    if isinstance(dtype, torch.dtype) and dtype in SAMPLER_PRECISIONS.values():
        return dtype
    if isinstance(dtype, str) and dtype.lower() in SAMPLER_PRECISIONS:
        return SAMPLER_PRECISIONS[dtype.lower()]
    raise ValueError(f"`{name}` must be None or one of {', '.join(SAMPLER_PRECISIONS)} (or the torch dtype); got {dtype!r}")


def _check_logits(logits) -> torch.Tensor:
    if not isinstance(logits, torch.Tensor):
        try:
            logits = torch.as_tensor(logits, dtype=torch.get_default_dtype())
        except (TypeError, ValueError, RuntimeError) as err:
            raise ValueError(f"`logits` must be numeric, shape (..., V): {err}") from None
    if not torch.is_floating_point(logits):
        logits = logits.to(torch.get_default_dtype())
    _checks.check_min_ndim("logits", logits, 1, "(..., V)")
    _checks.check_nonempty("logits", logits)
    if torch.isnan(logits).any() or (logits == math.inf).any():
        raise ValueError("`logits` contains NaN or +inf (−inf marks a token the model never emits)")
    if not torch.isfinite(logits).any(dim=-1).all():
        raise ValueError("`logits`: every row needs at least one finite logit")
    return logits


def _check_temperature(temperature) -> float:
    if isinstance(temperature, bool) or not isinstance(temperature, numbers.Real) or not math.isfinite(temperature) \
            or temperature <= 0:
        raise ValueError(f"`temperature` must be a finite number > 0; got {temperature!r}")
    return float(temperature)


def _check_top_p(top_p) -> float:
    if isinstance(top_p, bool) or not isinstance(top_p, numbers.Real) or not (0 < top_p <= 1):
        raise ValueError(f"`top_p` must be in (0, 1]; got {top_p!r}")
    return float(top_p)


def _check_top_k(top_k) -> int | None:
    if top_k is None:
        return None
    if isinstance(top_k, bool) or not isinstance(top_k, numbers.Integral) or top_k < 1:
        raise ValueError(f"`top_k` must be None or an integer ≥ 1; got {top_k!r}")
    return int(top_k)


def sampler_log_probs(logits, temperature: float = 1.0, top_p: float = 1.0, top_k: int | None = None,
                      dtype=None) -> torch.Tensor:
    """Log-probabilities of the distribution an inference engine samples from, given the trainer's logits.

    In the order engines apply them (vLLM's sampler; transformers' ``generate``: temperature, top-k, top-p):

        z̃ = round_dtype(z)                         precision: the logits rounded to bf16 / fp16 / fp32
        z̃ ← z̃ / T                                   temperature T > 0, in float32 (float64 for float64 input)
        top-k: keep the tokens with z̃ ≥ the k-th largest z̃ (ties kept)
        top-p: keep the smallest set of most probable tokens whose probability (after the steps above)
               sums to ≥ p; a token is kept when the mass strictly before it, in descending order, is < p
        log μ = log_softmax over the kept tokens; −inf elsewhere

    Rounding only the logits models the last step of a lower-precision forward pass, not the rounding
    inside the network (which the fp16 paper measures); softmax is shift-invariant but rounding is
    not, so the error grows with |z|: bf16 keeps 8 significant bits (relative step 2^-8), fp16 11
    (2^-11, range ±65504).

    Source: Holtzman et al. 2019, arXiv:1904.09751, §3.1 (top-p, eq. 2–3); Fan et al. 2018,
    arXiv:1805.04833 (top-k); Qi et al. 2025, arXiv:2510.26788 (bf16 vs fp16 mismatch).

    Args:
        logits: (..., V) the trainer's logits, nats up to a constant; −inf allowed (token never emitted),
            at least one finite entry per row.
        temperature: T > 0; T = 1 leaves the logits as they are.
        top_p: p ∈ (0, 1]; 1 keeps every token.
        top_k: None (no truncation) or an integer k ≥ 1; k ≥ V keeps every token.
        dtype: None (no rounding) or "fp32" / "bf16" / "fp16" (also "float32", "bfloat16", "float16"
            or the torch dtype): the precision the sampler's logits are rounded to.
    Returns:
        (..., V) log μ, float32 (float64 for float64 logits); −inf on truncated tokens; each row's
        exp sums to 1.
    Gradient:
        none intended (the sampler's probabilities are data); rounding has zero gradient.
    Raises:
        ValueError: ``logits`` empty, 0-dim, NaN or +inf, or a row all −inf; ``temperature`` ≤ 0 or not
        finite; ``top_p`` outside (0, 1]; ``top_k`` not None or an integer ≥ 1; an unknown ``dtype``;
        logits beyond fp16's range when ``dtype`` is fp16 (``logits``).
    Example:
        >>> lp = sampler_log_probs(torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64).log(), top_p=0.6)
        >>> [round(x, 4) for x in lp.exp().tolist()]
        [0.625, 0.375, 0.0]
    """
    logits = _check_logits(logits)
    temperature, top_p, top_k = _check_temperature(temperature), _check_top_p(top_p), _check_top_k(top_k)
    precision = _precision(dtype)
    work = torch.float64 if logits.dtype == torch.float64 else torch.float32
    z = logits.detach()
    if precision is not None:
        rounded = z.to(precision)
        if (torch.isinf(rounded) & torch.isfinite(z)).any():
            raise ValueError(f"`logits` exceed the range of {precision} (fp16: |z| ≤ 65504)")
        z = rounded
    z = z.to(work) / temperature
    if top_k is not None and top_k < z.shape[-1]:
        kth = torch.topk(z, top_k, dim=-1).values[..., -1:]
        z = z.masked_fill(z < kth, -math.inf)
    if top_p < 1.0:
        probs = torch.softmax(z, dim=-1)
        sorted_probs, order = torch.sort(probs, dim=-1, descending=True)
        before = torch.cumsum(sorted_probs, dim=-1) - sorted_probs  # mass strictly ahead of each token
        keep_sorted = before < top_p
        keep_sorted[..., 0] = True  # the most probable token always stays
        keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
        z = z.masked_fill(~keep, -math.inf)
    return torch.log_softmax(z, dim=-1)


def _log_prob_pair(trainer_log_probs, sampler_log_probs_):
    t = _checks.as_float_tensor("trainer_log_probs", trainer_log_probs)
    s = _checks.as_float_tensor("sampler_log_probs", sampler_log_probs_, dtype=t.dtype)
    _checks.check_same_shape(trainer_log_probs=t, sampler_log_probs=s)
    _checks.check_nonempty("trainer_log_probs", t)
    if (t > 0).any() or (s > 0).any():
        raise ValueError("`trainer_log_probs` and `sampler_log_probs` must be log-probabilities (≤ 0)")
    return t, s


def _weighted_quantile(x: torch.Tensor, w: torch.Tensor, q: float) -> float:
    # inverse CDF: the smallest x whose cumulative weight reaches q of the total (numpy's "inverted_cdf")
    order = torch.argsort(x, stable=True)
    cum = torch.cumsum(w[order], 0)
    i = int(torch.searchsorted(cum, (q * cum[-1]).reshape(1)))
    return float(x[order][min(i, len(x) - 1)])


def log_ratio_stats(trainer_log_probs, sampler_log_probs, weights=None, quantiles=(0.01, 0.5, 0.99),
                    cap: float | None = None) -> dict:
    """Summary of the per-token log-ratio log ρ = log π − log μ over the sampled tokens.

    The tokens were drawn by the sampler μ, so with unit weights the means are Monte Carlo estimates
    under μ; with ``weights`` = μ itself over an enumerated vocabulary they are exact expectations:

        mean = E_μ[log ρ] = −KL(μ‖π)                      (k1: ``kl_k1`` = −mean)
        kl_k3 = E_μ[ρ − 1 − log ρ] = KL(μ‖π) − m          (Schulman 2020, joschu.net/blog/kl-approx.html)
        ratio_mean = E_μ[ρ] = 1 − m                        (TRL logs it as importance_sampling_ratio/mean)

    where m = Σ_{μ(a)=0} π(a) is the trainer's mass on tokens the sampler cut (top-p, top-k): 0 without
    truncation, and then k3 is unbiased for KL(μ‖π) and E_μ[ρ] = 1.

    Source: Yao et al. 2025 (TIS), their "log-prob diff" diagnostic; Schulman 2020 (k1, k3).

    Args:
        trainer_log_probs: (..., T) log π of the sampled tokens under the trainer, nats.
        sampler_log_probs: (..., T) log μ of the same tokens under the sampler, nats (finite: a sampled
            token has μ > 0).
        weights: None (each token counts 1), a bool mask (padding False) or non-negative weights of
            the same shape, e.g. μ over an enumerated vocabulary.
        quantiles: levels in [0, 1] of the (weighted) log-ratio's inverse CDF (numpy's "inverted_cdf").
        cap: None, or C ≥ 1: also the share of weight with ρ > C (truncated by TIS) and outside
            [1/C, C] (masked by MIS).
    Returns:
        a dict of floats: ``mean``, ``mean_abs``, ``min``, ``max`` (of log ρ, over tokens with weight > 0),
        ``kl_k1``, ``kl_k3`` (estimates of KL(μ‖π), nats), ``ratio_mean``, ``count`` (total weight), and
        ``quantiles`` (dict level → log ρ); with ``cap`` also ``frac_truncated`` and ``frac_masked``.
    Raises:
        ValueError: shapes differ, NaN/inf, positive log-probabilities; ``weights`` negative, of another
        shape or all zero; a quantile outside [0, 1]; ``cap`` < 1.
    """
    t, s = _log_prob_pair(trainer_log_probs, sampler_log_probs)
    if weights is None:
        w = torch.ones_like(t)
    else:
        w = _checks.as_float_tensor("weights", weights, dtype=t.dtype)
        _checks.check_same_shape(trainer_log_probs=t, weights=w)
        if (w < 0).any() or w.sum() <= 0:
            raise ValueError("`weights` must be non-negative with a positive total")
    qs = [float(q) for q in quantiles]
    for q in qs:
        _checks.check_in_range("quantiles", q, 0.0, 1.0)
    if cap is not None:
        _checks.check_in_range("cap", cap, 1.0, math.inf)
    keep = w.flatten() > 0
    x, w = (t - s).flatten()[keep], w.flatten()[keep]
    total = w.sum()

    def avg(v):
        return float((w * v).sum() / total)

    ratio = torch.exp(x)
    out = {"mean": avg(x), "mean_abs": avg(x.abs()), "min": float(x.min()), "max": float(x.max()),
           "kl_k1": -avg(x), "kl_k3": avg(torch.expm1(x) - x), "ratio_mean": avg(ratio), "count": float(total),
           "quantiles": {q: _weighted_quantile(x, w, q) for q in qs}}
    if cap is not None:
        out["frac_truncated"] = avg((ratio > cap).to(w.dtype))
        out["frac_masked"] = avg(((ratio > cap) | (ratio < 1.0 / cap)).to(w.dtype))
    return out


def mismatch_kls(trainer_log_probs, sampler_log_probs) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact KL(μ‖π) and KL(π‖μ) between the trainer's and the sampler's categoricals over the last dim.

    KL(μ‖π) = Σ_a μ(a)(log μ(a) − log π(a))   (finite whenever π > 0 where μ > 0)
    KL(π‖μ) = Σ_a π(a)(log π(a) − log μ(a))   (+inf when top-p / top-k cut a token π can emit)

    Source: Cover & Thomas, *Elements of Information Theory*, eq. 2.26; via :func:`rlbook.categorical_kl`.

    Args:
        trainer_log_probs: (..., V) log π over the whole vocabulary, nats (−inf allowed).
        sampler_log_probs: (..., V) log μ, e.g. from :func:`sampler_log_probs` (−inf on cut tokens).
    Returns:
        (kl_sampler_trainer, kl_trainer_sampler), each (...), nats, float32 (float64 for float64 input).
    Raises:
        ValueError: shapes differ, 0-dim or empty, not tensors.
    """
    return categorical_kl(sampler_log_probs, trainer_log_probs), categorical_kl(trainer_log_probs, sampler_log_probs)


def _check_cap(correction: str, cap) -> float | None:
    if correction not in GRADIENT_CORRECTIONS:
        raise ValueError(f"`correction` must be one of {', '.join(GRADIENT_CORRECTIONS)}; got {correction!r}")
    if correction in ("none", "is"):
        return None
    if isinstance(cap, bool) or not isinstance(cap, numbers.Real) or not math.isfinite(cap) or cap < 1:
        raise ValueError(f"`cap`: {correction!r} needs a finite cap C ≥ 1; got {cap!r}")
    return float(cap)


def _token_weights(log_pi: torch.Tensor, log_mu: torch.Tensor, correction: str, cap: float | None):
    """(w(a), changed(a)) for tokens with π, μ > 0; TIS and MIS from :func:`rlbook.importance_correction`
    itself; changed: the cap truncated or masked the token's weight."""
    ratio = torch.exp(log_pi - log_mu)
    if correction in ("none", "is"):
        return (torch.ones_like(ratio) if correction == "none" else ratio), torch.zeros_like(ratio, dtype=torch.bool)
    mode = {"tis": "token_truncate", "mis": "token_mask"}[correction]
    weights, kept, _ = importance_correction(log_pi[None], log_mu[None], torch.ones(1, len(log_pi), dtype=torch.bool, device=log_pi.device),
                                             mode, cap)
    return weights[0], (ratio > cap) if correction == "tis" else ~kept[0]


def _check_probs(name: str, p) -> torch.Tensor:
    p = _checks.as_float_tensor(name, p, dtype=torch.float64)
    if p.dim() != 1:
        raise ValueError(f"`{name}` must have shape (K,); got {tuple(p.shape)}")
    _checks.check_probabilities(name, p, atol=1e-6)
    return p


def off_policy_gradient_moments(trainer_probs, sampler_probs, advantages, correction: str = "none",
                                cap: float | None = None, n: int = 1, scores=None) -> dict:
    """Expectation and variance of the policy-gradient estimator from n draws of the sampler, exactly.

    One token a is drawn from μ; the estimator is the mean over n independent draws of

        g(a) = w(a) · A(a) · s(a),   s(a) = ∇_z log π(a) = e_a − π  (softmax logits z; or given ``scores``)

    with ρ = π/μ and the weight w of each correction

        none: w = 1   (the sampler's tokens used as if the trainer drew them)
        is:   w = ρ   (ordinary importance sampling)
        tis:  w = min(ρ, C)             truncated IS (Yao et al. 2025; :func:`rlbook.importance_correction`'s
                                        "token_truncate", TRL's token_truncate)
        mis:  w = ρ·1[1/C ≤ ρ ≤ C]      masked IS (IcePop, arXiv:2510.18855; "token_mask"; TRL's token_mask
                                        with clip_min = 1/C)

    Its target is the on-policy gradient of
    E_π[A·log π] (π held fixed inside the expectation):

        target = Σ_a π(a) A(a) s(a)
        mean   = Σ_a μ(a) w(a) A(a) s(a)             (none: Σ μ A s; is: Σ_{μ>0} π A s; tis: Σ min(π, Cμ) A s)
        bias   = mean − target,  covariance = (Σ_a μ(a) g(a) g(a)ᵀ − mean meanᵀ) / n

    Ordinary IS is unbiased exactly when μ > 0 wherever π·A·s ≠ 0; a top-p/top-k sampler never draws
    the cut tokens, and no weight on the drawn ones recovers them (its bias is −Σ_{μ=0} π A s).

    Source: Owen 2013, *Monte Carlo theory, methods and examples*, ch. 9 (IS); Yao et al. 2025 (TIS);
    arXiv:2510.18855 (masking); Williams 1992 (the score function).

    Args:
        trainer_probs: (K,) π, non-negative, sums to 1.
        sampler_probs: (K,) μ, non-negative, sums to 1 (zeros allowed: truncated tokens).
        advantages: (K,) A(a), reward units.
        correction: "none", "is", "tis" or "mis".
        cap: C ≥ 1 for "tis" and "mis" (ignored otherwise).
        n: number of independent draws averaged (≥ 1).
        scores: None (softmax logits: s(a) = e_a − π, D = K) or (K, D) the score vectors ∇log π(a).
    Returns:
        a dict of float64 tensors: ``target``, ``mean``, ``bias`` (D,); ``covariance`` (D, D) of the
        n-draw estimator; scalars ``bias_norm`` (‖bias‖₂), ``variance`` (trace of the covariance),
        ``mse`` (‖bias‖² + variance), ``changed`` (μ-probability that w ≠ ρ: the share of draws a cap
        truncates or masks; 0 for none and is), and ``weights`` (K,) w(a) (0 where μ = 0: never drawn).
    Raises:
        ValueError: probabilities not (K,), negative or not summing to 1; ``advantages`` not (K,);
        ``scores`` not (K, D); ``n`` not an integer ≥ 1; an unknown ``correction``; ``cap`` missing,
        < 1 or not finite for "tis" and "mis"; NaN/inf anywhere.
    """
    pi, mu = _check_probs("trainer_probs", trainer_probs), _check_probs("sampler_probs", sampler_probs)
    _checks.check_same_shape(trainer_probs=pi, sampler_probs=mu)
    adv = _checks.as_float_tensor("advantages", advantages, dtype=torch.float64)
    _checks.check_same_shape(trainer_probs=pi, advantages=adv)
    if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 1:
        raise ValueError(f"`n` must be an integer ≥ 1; got {n!r}")
    k = pi.shape[0]
    if scores is None:
        s = torch.eye(k, dtype=torch.float64, device=pi.device) - pi
    else:
        s = _checks.as_float_tensor("scores", scores, dtype=torch.float64)
        if s.dim() != 2 or s.shape[0] != k:
            raise ValueError(f"`scores` must have shape (K, D) with K = {k}; got {tuple(s.shape)}")
    cap = _check_cap(correction, cap)
    drawn = mu > 0
    both = drawn & (pi > 0)  # where π = 0 < μ, ρ = 0 and every weight is 0 (MIS: masked)
    w = torch.zeros_like(pi)
    changed = (drawn & (pi == 0)) if correction == "mis" else torch.zeros_like(drawn)
    if both.any():
        w[both], changed[both] = _token_weights(pi[both].log(), mu[both].log(), correction, cap)
    g = (w * adv)[:, None] * s  # (K, D): the estimator's value at each token
    target = (pi * adv) @ s
    mean = mu @ g
    second = (mu[:, None] * g).T @ g
    cov = (second - torch.outer(mean, mean)) / n
    bias = mean - target
    variance = torch.diagonal(cov).sum().clamp(min=0.0)
    return {"target": target, "mean": mean, "bias": bias, "covariance": cov, "bias_norm": bias.norm(),
            "variance": variance, "mse": bias.pow(2).sum() + variance, "changed": (mu * changed).sum(), "weights": w}


class MismatchedSampler:
    """A sampler that is not the policy: a copy of it, possibly stale, rounded, tempered or truncated.

    What an inference engine does to the trainer's policy π_θ, one switch per source:

        weights  θ_s = round_precision(θ_{t−k})          ``lag`` k: the weights of k updates ago;
                                                           ``precision``: each weight rounded
        logits   z̃ = round_precision(z(θ_s))
        μ        = softmax(z̃ / T_s) truncated to top-k / top-p and renormalised (:func:`sampler_log_probs`)

    and the tokens are drawn from μ; the log μ of each drawn token is what the sampler reports
    (``Completions.log_probs``), the trainer scoring the same tokens with its own π (GRPO's
    :func:`rlbook.algos.grpo_rollouts.sample_groups`). Rounding the weights and the logits, with
    fp32 arithmetic in between, models the two ends of a low-precision forward pass; the rounding
    inside the network that the fp16 paper measures is smaller at this model's size. With every
    switch at its default the sampler draws from exactly the policy's distribution.

    The lag counts weight versions: each call compares the policy's weights with the last version it
    saw and keeps a new version when they changed, so in :func:`rlbook.train_grpo` one version is one
    step (μ·M optimiser steps; μ = M = 1 by default: one optimiser step). Until k updates have
    happened it samples with the oldest version it has (the starting weights), as an asynchronous
    pipeline does at start-up.

    Source: Yao et al. 2025, "Your efficient RL framework secretly brings you off-policy RL training"
    (fengyao.notion.site/off-policy-rl; precision and kernels); Qi et al. 2025, arXiv:2510.26788
    (bf16 vs fp16); Holtzman et al. 2019, arXiv:1904.09751 (top-p); Piché et al. 2025 (PipelineRL),
    arXiv:2509.19128, and Fu et al. 2025 (AReaL), arXiv:2505.24298 (stale rollouts from an
    asynchronous sampler).

    Args:
        temperature: T_s > 0 of the sampler, or None: the trainer's τ (``GRPOConfig.temperature``,
            passed to each call), so that temperature is not a source of mismatch.
        top_p: p ∈ (0, 1] of the sampler's nucleus; 1 keeps every token.
        top_k: None, or k ≥ 1 most probable tokens kept.
        precision: None (no rounding) or "fp32" / "bf16" / "fp16": the sampler's weights and logits
            rounded to that format.
        lag: k ≥ 0 weight versions of staleness.
    Call:
        like :func:`rlbook.lm.sample_completions` (``sampler(policy, prompt_ids, prompt_mask, *,
        num_samples, generator, temperature, ...)``), returning its :class:`rlbook.lm.Completions`
        with ``log_probs`` = log μ of the drawn tokens ((B, T) float32, 0 after EOS).
    Raises:
        ValueError: ``temperature`` ≤ 0, ``top_p`` outside (0, 1], ``top_k`` < 1, an unknown
        ``precision``, ``lag`` not an integer ≥ 0.
    Example:
        >>> s = MismatchedSampler(temperature=1.3, lag=2)
        >>> s.is_policy
        False
        >>> MismatchedSampler().is_policy
        True
    """

    def __init__(self, temperature: float | None = None, top_p: float = 1.0, top_k: int | None = None,
                 precision=None, lag: int = 0):
        self.temperature = None if temperature is None else _check_temperature(temperature)
        self.top_p, self.top_k = _check_top_p(top_p), _check_top_k(top_k)
        self.precision = _precision(precision, "precision")
        if isinstance(lag, bool) or not isinstance(lag, numbers.Integral) or lag < 0:
            raise ValueError(f"`lag` must be an integer ≥ 0 (weight versions of staleness); got {lag!r}")
        self.lag = int(lag)
        self._versions: collections.deque = collections.deque(maxlen=self.lag + 1)
        self._model = None

    @property
    def is_policy(self) -> bool:
        """True when every switch is at its default: the sampler's distribution is the policy's."""
        return (self.temperature is None and self.top_p == 1.0 and self.top_k is None and self.lag == 0
                and self.precision in (None, torch.float32))

    def __repr__(self) -> str:
        return (f"MismatchedSampler(temperature={self.temperature}, top_p={self.top_p}, top_k={self.top_k}, "
                f"precision={self.precision}, lag={self.lag})")

    def _observe(self, policy) -> dict:
        """Keep the policy's weights as a new version if they changed; return the version to sample with."""
        current = policy.state_dict()
        last = self._versions[-1] if self._versions else None
        if last is None or any(not torch.equal(last[name], value) for name, value in current.items()):
            self._versions.append({name: value.detach().clone() for name, value in current.items()})
        return self._versions[0]  # k versions back once k updates have happened; the oldest before

    def _sampler_model(self, policy, weights: dict):
        if self._model is None:
            self._model = copy.deepcopy(policy).requires_grad_(False).eval()
        self._model.load_state_dict(weights)
        if self.precision is not None:
            with torch.no_grad():
                for tensor in self._model.parameters():
                    if tensor.is_floating_point():
                        tensor.copy_(tensor.to(self.precision).to(tensor.dtype))
        return self._model

    def __call__(self, policy, prompt_ids, prompt_mask=None, *, temperature: float = 1.0, **kwargs):
        from rlbook.lm.sampling import sample_completions

        model = self._sampler_model(policy, self._observe(policy))
        tempered = _check_temperature(temperature) if self.temperature is None else self.temperature
        process = functools.partial(sampler_log_probs, temperature=tempered, top_p=self.top_p, top_k=self.top_k,
                                    dtype=self.precision)
        return sample_completions(model, prompt_ids, prompt_mask, temperature=1.0, logits_processor=process, **kwargs)
