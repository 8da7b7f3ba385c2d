"""Learning from preferences, pair by pair: Bradley–Terry, DPO and its family (IPO, R-DPO, SimPO, ORPO, KTO).

Every function here is one equation on tensors: sequence log-probabilities (summed over a
response's tokens, nats) or rewards in, unreduced per-pair losses or probabilities out. The
networks that produce those numbers live in :mod:`rlbook.lm`; a loop reduces the losses (usually
by the mean over pairs).

=============================  ====================================================================
function                       equation
=============================  ====================================================================
bradley_terry_probability      P(y_c ≻ y_r) = σ(r_c − r_r)
bradley_terry_loss             −log σ(r_c − r_r)
implicit_rewards               r̂ = β·(log π − log π_ref)
dpo_loss                       −(1−ε)·log σ(r̂_c − r̂_r) − ε·log σ(r̂_r − r̂_c)
dpo_gradient_weight            σ(r̂_r − r̂_c) − ε
ipo_loss                       (h − 1/(2β))²,  h = (log π_c − log π_ref,c) − (log π_r − log π_ref,r)
rdpo_loss                      −log σ(β·h + α·(|y_c| − |y_r|))   (length-regularised DPO)
simpo_loss                     −log σ(β·log π_c/|y_c| − β·log π_r/|y_r| − γ)
orpo_loss                      −log π_c/|y_c| − λ·log σ(log odds_c − log odds_r)
kto_loss                       λ_y − v(y), v = λ_D·σ(β(ρ − z₀)) if desirable, λ_U·σ(β(z₀ − ρ)) if not
=============================  ====================================================================

The exact, enumerated side (the KL-regularised optimum π*, best-of-N, DPO's population loss) is
in :mod:`rlbook.kl_regularised`.

Conventions: "chosen" (c, y_w) is the preferred response, "rejected" (r, y_l) the other; log
probabilities are in nats; β > 0 is the KL coefficient (τ in Azar et al.).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from rlbook import _checks

__all__ = [
    "bradley_terry_probability",
    "bradley_terry_loss",
    "implicit_rewards",
    "dpo_loss",
    "dpo_gradient_weight",
    "ipo_loss",
    "rdpo_loss",
    "simpo_loss",
    "orpo_loss",
    "kto_loss",
]


def _same_shape(**named) -> list[torch.Tensor]:
    """Float tensors of one shape (non-tensors converted); ValueError names the odd one out."""
    tensors = {name: _checks.as_float_tensor(name, x) for name, x in named.items()}
    _checks.check_same_shape(**tensors)
    return list(tensors.values())


def bradley_terry_probability(chosen_rewards, rejected_rewards) -> torch.Tensor:
    """Bradley–Terry probability that the chosen response is preferred: σ(r_c − r_r).

    P(y_c ≻ y_r | x) = exp r_c / (exp r_c + exp r_r) = σ(r_c − r_r)

    Source: Bradley & Terry 1952, Biometrika 39(3/4); Ouyang et al. 2022, arXiv:2203.02155, eq. 1.

    Args:
        chosen_rewards, rejected_rewards: (B,) (any same shape) rewards, in logit units.
    Returns:
        (B,) probabilities in (0, 1).
    Gradient:
        through both rewards.
    Raises:
        ValueError: shapes differ, or a value is NaN/inf.
    Example:
        >>> bradley_terry_probability(torch.tensor([1.0]), torch.tensor([1.0]))
        tensor([0.5000])
    """
    chosen, rejected = _same_shape(chosen_rewards=chosen_rewards, rejected_rewards=rejected_rewards)
    return torch.sigmoid(chosen - rejected)


def bradley_terry_loss(chosen_rewards, rejected_rewards) -> torch.Tensor:
    """Negative log-likelihood of the observed preference under Bradley–Terry (minimise).

    loss = −log σ(r_c − r_r) = softplus(r_r − r_c)

    A logistic regression on reward differences; the reward model's training loss.

    Source: Ouyang et al. 2022, arXiv:2203.02155, eq. 1 (one pair; the paper averages over K-choose-2
    pairs); Stiennon et al. 2020, arXiv:2009.01325, §3.4.

    Args:
        chosen_rewards, rejected_rewards: (B,) (any same shape) scalar rewards of the preferred and
            the other response, logit units.
    Returns:
        (B,) unreduced loss in nats, ≥ 0.
    Gradient:
        ∂loss/∂r_c = −σ(r_r − r_c) = −∂loss/∂r_r.
    Raises:
        ValueError: shapes differ, or a value is NaN/inf.
    See also:
        bradley_terry_probability, dpo_loss (the same loss with implicit rewards)
    Example:
        >>> round(float(bradley_terry_loss(torch.tensor([0.0]), torch.tensor([0.0]))[0]), 4)  # log 2
        0.6931
    """
    chosen, rejected = _same_shape(chosen_rewards=chosen_rewards, rejected_rewards=rejected_rewards)
    return F.softplus(rejected - chosen)


def implicit_rewards(log_probs, ref_log_probs, beta: float) -> torch.Tensor:
    """DPO's implicit reward of a response: r̂ = β·(log π_θ(y|x) − log π_ref(y|x)).

    From π* ∝ π_ref·exp(r/β): r = β·log(π*/π_ref) + β·log Z(x), and Z cancels in every comparison.

    Source: Rafailov et al. 2023, arXiv:2305.18290, eq. 5.

    Args:
        log_probs: (B,) sequence log π_θ(y|x), nats (summed over the response tokens).
        ref_log_probs: (B,) sequence log π_ref(y|x), nats.
        beta: β > 0, the KL coefficient.
    Returns:
        (B,) implicit rewards, in reward units.
    Gradient:
        through both (pass ``ref_log_probs`` detached, as it comes from a frozen model).
    Raises:
        ValueError: shapes differ, a value is NaN/inf, or β ≤ 0.
    """
    _checks.check_positive("beta", beta)
    log_probs, ref_log_probs = _same_shape(log_probs=log_probs, ref_log_probs=ref_log_probs)
    return beta * (log_probs - ref_log_probs)


def _check_smoothing(label_smoothing: float) -> None:
    _checks.check_in_range("label_smoothing", label_smoothing, 0.0, 0.5, high_inclusive=False)


def dpo_loss(policy_chosen_log_probs, policy_rejected_log_probs, ref_chosen_log_probs, ref_rejected_log_probs,
             beta: float, label_smoothing: float = 0.0) -> torch.Tensor:
    """Per-pair DPO loss (minimise): Bradley–Terry's loss with DPO's implicit rewards.

    h = (log π_θ(y_c) − log π_ref(y_c)) − (log π_θ(y_r) − log π_ref(y_r))
    loss = −(1 − ε)·log σ(β·h) − ε·log σ(−β·h)

    With ε = 0 this is eq. 7 of the DPO paper; ε > 0 is conservative DPO (cDPO), the expected loss
    when each label is flipped with probability ε.

    Source: Rafailov et al. 2023, arXiv:2305.18290, eq. 7; cDPO: Mitchell 2023, "A note on DPO with
    noisy preferences and relationship to IPO".

    Args:
        policy_chosen_log_probs, policy_rejected_log_probs: (B,) sequence log π_θ, nats.
        ref_chosen_log_probs, ref_rejected_log_probs: (B,) sequence log π_ref, nats (constants).
        beta: β > 0.
        label_smoothing: ε in [0, 0.5), the assumed label-flip probability.
    Returns:
        (B,) unreduced loss in nats.
    Gradient:
        ∇loss = −β·(σ(−β·h) − ε)·(∇log π_θ(y_c) − ∇log π_θ(y_r)); see :func:`dpo_gradient_weight`.
    Raises:
        ValueError: shapes differ, a value is NaN/inf, β ≤ 0, or ε outside [0, 0.5).
    See also:
        rlbook.reference.dpo_loss_loop
    Example:
        >>> z = torch.zeros(1)
        >>> round(float(dpo_loss(z, z, z, z, beta=0.1)[0]), 4)
        0.6931
    """
    _checks.check_positive("beta", beta)
    _check_smoothing(label_smoothing)
    pc, pr, rc, rr = _same_shape(policy_chosen_log_probs=policy_chosen_log_probs,
                                 policy_rejected_log_probs=policy_rejected_log_probs,
                                 ref_chosen_log_probs=ref_chosen_log_probs, ref_rejected_log_probs=ref_rejected_log_probs)
    logits = beta * ((pc - rc) - (pr - rr))  # β·h = r̂_c − r̂_r
    return -(1.0 - label_smoothing) * F.logsigmoid(logits) - label_smoothing * F.logsigmoid(-logits)


def dpo_gradient_weight(chosen_rewards, rejected_rewards, label_smoothing: float = 0.0) -> torch.Tensor:
    """How hard DPO pushes on a pair: w = σ(r̂_r − r̂_c) − ε.

    ∇_θ dpo_loss = −β·w·(∇log π_θ(y_c) − ∇log π_θ(y_r)): the weight is large when the implicit
    reward model orders the pair wrongly and vanishes once it orders it confidently.

    Source: Rafailov et al. 2023, arXiv:2305.18290, §4 "What does the DPO update do?".

    Args:
        chosen_rewards, rejected_rewards: (B,) implicit rewards r̂ (:func:`implicit_rewards`).
        label_smoothing: ε in [0, 0.5), as in :func:`dpo_loss`.
    Returns:
        (B,) weights in (−ε, 1 − ε), dimensionless.
    Gradient:
        through both (it is usually read as a diagnostic, detached).
    Raises:
        ValueError: shapes differ, a value is NaN/inf, or ε outside [0, 0.5).
    """
    _check_smoothing(label_smoothing)
    chosen, rejected = _same_shape(chosen_rewards=chosen_rewards, rejected_rewards=rejected_rewards)
    return torch.sigmoid(rejected - chosen) - label_smoothing


def ipo_loss(policy_chosen_log_probs, policy_rejected_log_probs, ref_chosen_log_probs, ref_rejected_log_probs,
             beta: float) -> torch.Tensor:
    """Per-pair IPO loss (minimise): the squared distance of the log-ratio margin from 1/(2β).

    h = (log π_θ(y_c) − log π_ref(y_c)) − (log π_θ(y_r) − log π_ref(y_r));  loss = (h − 1/(2β))²

    Unlike DPO the target margin is finite, so a deterministic preference cannot drive h to ∞.
    TRL's ``loss_type="ipo"`` feeds per-token *averages* of the log-probabilities (sum / length);
    pass those to reproduce it.

    Source: Azar et al. 2023, arXiv:2310.12036, eq. 17 (β here is the paper's τ).

    Args:
        policy_chosen_log_probs, policy_rejected_log_probs: (B,) log π_θ, nats (sums or averages).
        ref_chosen_log_probs, ref_rejected_log_probs: (B,) log π_ref, nats, same reduction.
        beta: β > 0.
    Returns:
        (B,) unreduced loss, nats².
    Gradient:
        ∂loss/∂h = 2·(h − 1/(2β)).
    Raises:
        ValueError: shapes differ, a value is NaN/inf, or β ≤ 0.
    """
    _checks.check_positive("beta", beta)
    pc, pr, rc, rr = _same_shape(policy_chosen_log_probs=policy_chosen_log_probs,
                                 policy_rejected_log_probs=policy_rejected_log_probs,
                                 ref_chosen_log_probs=ref_chosen_log_probs, ref_rejected_log_probs=ref_rejected_log_probs)
    h = (pc - rc) - (pr - rr)
    return (h - 1.0 / (2.0 * beta)) ** 2


def _lengths(name: str, lengths, like: torch.Tensor) -> torch.Tensor:
    """Token counts as a float tensor of ``like``'s shape; ValueError names ``name`` if not positive."""
    lengths = _checks.as_float_tensor(name, lengths, dtype=like.dtype).to(like.device)
    _checks.check_same_shape(**{name.replace("lengths", "log_probs"): like, name: lengths})
    if (lengths <= 0).any():
        raise ValueError(f"`{name}` must be positive token counts; got min {float(lengths.min())}")
    return lengths


def rdpo_loss(policy_chosen_log_probs, policy_rejected_log_probs, ref_chosen_log_probs, ref_rejected_log_probs,
              chosen_lengths, rejected_lengths, beta: float, alpha: float) -> torch.Tensor:
    """Per-pair R-DPO loss (minimise): DPO with the length difference added inside the sigmoid.

    h = (log π_θ(y_c) − log π_ref(y_c)) − (log π_θ(y_r) − log π_ref(y_r))
    loss = −log σ(β·h + α·(|y_c| − |y_r|))

    Derivation: penalise length in the KL-regularised objective, max E[r − α·|y|] − β·KL(π ‖ π_ref).
    Its optimum gives r(x, y) = β·log(π*/π_ref) + α·|y| + β·log Z(x), and Bradley–Terry on that r is
    the loss above. The length gap is credited to the pair: when the chosen answer is the longer,
    part of the preference is explained by length alone, the policy's own margin β·h is pushed less,
    and the policy is no longer paid for making the answers it prefers longer (symmetrically when
    the chosen answer is the shorter). With α = 0 it is :func:`dpo_loss` (ε = 0).

    Source: Park, Rafailov, Ermon & Finn 2024, "Disentangling length from quality in direct
    preference optimization", arXiv:2403.19159 (the R-DPO objective, §4).

    Args:
        policy_chosen_log_probs, policy_rejected_log_probs: (B,) sequence log π_θ, nats (sums over
            the answer's tokens).
        ref_chosen_log_probs, ref_rejected_log_probs: (B,) sequence log π_ref, nats (constants).
        chosen_lengths, rejected_lengths: (B,) token counts |y| > 0.
        beta: β > 0.
        alpha: α ≥ 0, logit units per token of length difference (a hyperparameter Park et al. tune
            together with β).
    Returns:
        (B,) unreduced loss in nats.
    Gradient:
        ∇loss = −β·σ(−β·h − α·Δ|y|)·(∇log π_θ(y_c) − ∇log π_θ(y_r)), Δ|y| = |y_c| − |y_r|: DPO's,
        with each pair's weight shifted by its length gap (smaller where the chosen answer is longer).
    Raises:
        ValueError: shapes differ, a value is NaN/inf, β ≤ 0, α < 0, or a length ≤ 0 (the message
            names the argument).
    See also:
        dpo_loss (α = 0), simpo_loss (length normalisation instead of a length term)
    Example:
        >>> z, one = torch.zeros(1), torch.ones(1)
        >>> round(float(rdpo_loss(z, z, z, z, 3 * one, one, beta=0.1, alpha=0.0)[0]), 4)  # log 2, as DPO
        0.6931
    """
    _checks.check_positive("beta", beta)
    _checks.check_in_range("alpha", alpha, 0.0)
    pc, pr, rc, rr = _same_shape(policy_chosen_log_probs=policy_chosen_log_probs,
                                 policy_rejected_log_probs=policy_rejected_log_probs,
                                 ref_chosen_log_probs=ref_chosen_log_probs, ref_rejected_log_probs=ref_rejected_log_probs)
    lc = _lengths("chosen_lengths", chosen_lengths, pc)
    lr = _lengths("rejected_lengths", rejected_lengths, pr)
    return -F.logsigmoid(beta * ((pc - rc) - (pr - rr)) + alpha * (lc - lr))


def _average(name: str, log_probs: torch.Tensor, lengths) -> torch.Tensor:
    if lengths is None:
        return log_probs
    return log_probs / _lengths(name, lengths, log_probs)


def simpo_loss(chosen_log_probs, rejected_log_probs, beta: float, gamma: float, chosen_lengths=None,
               rejected_lengths=None) -> torch.Tensor:
    """Per-pair SimPO loss (minimise): reference-free, length-normalised, with a target margin γ.

    loss = −log σ(β/|y_c|·log π_θ(y_c) − β/|y_r|·log π_θ(y_r) − γ)

    No π_ref appears: the implicit reward is the policy's average per-token log-probability.

    Source: Meng, Xia & Chen 2024, arXiv:2405.14734, eq. 6.

    Args:
        chosen_log_probs, rejected_log_probs: (B,) log π_θ, nats: per-token *averages*, or sequence
            sums when the lengths are given.
        beta: β > 0 (the paper uses 2–10).
        gamma: γ ≥ 0, the target reward margin.
        chosen_lengths, rejected_lengths: (B,) token counts |y| > 0, or None (inputs are averages).
    Returns:
        (B,) unreduced loss in nats.
    Gradient:
        through both log-probabilities.
    Raises:
        ValueError: shapes differ, a value is NaN/inf, β ≤ 0, γ < 0, or a length ≤ 0.
    """
    _checks.check_positive("beta", beta)
    _checks.check_in_range("gamma", gamma, 0.0)
    chosen, rejected = _same_shape(chosen_log_probs=chosen_log_probs, rejected_log_probs=rejected_log_probs)
    chosen = _average("chosen_lengths", chosen, chosen_lengths)
    rejected = _average("rejected_lengths", rejected, rejected_lengths)
    return -F.logsigmoid(beta * (chosen - rejected) - gamma)


def _log_odds(mean_log_probs: torch.Tensor) -> torch.Tensor:
    """log(P/(1 − P)) for P = exp(mean_log_probs) < 1, computed as m − log(−expm1(m))."""
    return mean_log_probs - torch.log(-torch.expm1(mean_log_probs))


def orpo_loss(chosen_log_probs, rejected_log_probs, lam: float, chosen_lengths=None, rejected_lengths=None) -> torch.Tensor:
    """Per-pair ORPO loss (minimise): supervised NLL of the chosen response plus an odds-ratio term.

    P(y) = exp(log π_θ(y)/|y|);  odds(y) = P/(1 − P)
    loss = −log π_θ(y_c)/|y_c| − λ·log σ(log odds(y_c) − log odds(y_r))

    Reference-free and single-stage: the NLL term is supervised fine-tuning on the chosen answers.

    Source: Hong, Lee & Thorne 2024, arXiv:2403.07691, eqs. 4–7.

    Args:
        chosen_log_probs, rejected_log_probs: (B,) log π_θ, nats: per-token averages (< 0), or sums
            when the lengths are given.
        lam: λ ≥ 0, the weight of the odds-ratio term (the paper uses 0.1–1).
        chosen_lengths, rejected_lengths: (B,) token counts > 0, or None (inputs are averages).
    Returns:
        (B,) unreduced loss in nats.
    Gradient:
        through both log-probabilities.
    Raises:
        ValueError: shapes differ, a value is NaN/inf, λ < 0, a length ≤ 0, or an average log-prob
            is not < 0 (odds of a certain answer are infinite).
    """
    _checks.check_in_range("lam", lam, 0.0)
    chosen, rejected = _same_shape(chosen_log_probs=chosen_log_probs, rejected_log_probs=rejected_log_probs)
    chosen = _average("chosen_lengths", chosen, chosen_lengths)
    rejected = _average("rejected_lengths", rejected, rejected_lengths)
    for name, x in (("chosen_log_probs", chosen), ("rejected_log_probs", rejected)):
        if (x >= 0).any():
            raise ValueError(f"`{name}` must be < 0 per token (a probability below 1); got max {float(x.max())}")
    return -chosen - lam * F.logsigmoid(_log_odds(chosen) - _log_odds(rejected))



def kto_loss(policy_log_probs, ref_log_probs, desirable, kl_estimate, beta: float, desirable_weight: float = 1.0,
             undesirable_weight: float = 1.0) -> torch.Tensor:
    """Per-example KTO loss (minimise): one answer at a time, labelled desirable or undesirable, no pairs.

    ρ = log π_θ(y|x) − log π_ref(y|x)                           (the implicit reward, over β)
    v = λ_D·σ(β·(ρ − z₀))  if y is desirable,   λ_U·σ(β·(z₀ − ρ))  if not
    loss = λ_y − v          (λ_y = λ_D or λ_U, the example's own weight)

    z₀ is the reference point, an estimate of KL(π_θ ‖ π_ref) on the batch, treated as a constant
    (no gradient). Ethayarajh et al. estimate it from mismatched pairs (answers scored under other
    prompts of the batch), as max(0, mean of β·ρ)/β in their code; pass it already estimated.
    A desirable answer lowers its loss by raising ρ above z₀, an undesirable one by pushing ρ below.

    Source: Ethayarajh, Xu, Muennighoff, Jurafsky & Kiela 2024, "KTO: Model alignment as prospect
    theoretic optimization", arXiv:2402.01306, §4.1 (the loss L_KTO with weights λ_D, λ_U).

    Args:
        policy_log_probs: (B,) sequence log π_θ(y|x), nats.
        ref_log_probs: (B,) sequence log π_ref(y|x), nats (constants).
        desirable: (B,) bools (or 0/1), True where the answer is labelled desirable.
        kl_estimate: z₀ ≥ 0, nats: a float or a 0-dim tensor (detached here).
        beta: β > 0.
        desirable_weight, undesirable_weight: λ_D > 0 and λ_U > 0 (the paper sets
            λ_D·n_D / (λ_U·n_U) between 1 and 4/3 when the classes are unbalanced).
    Returns:
        (B,) unreduced loss, dimensionless, in [0, λ_y].
    Gradient:
        ∂loss/∂ρ = −β·λ_D·σ'(β(ρ − z₀)) if desirable, +β·λ_U·σ'(β(z₀ − ρ)) if not, σ' = σ(1 − σ);
        none through z₀.
    Raises:
        ValueError: shapes differ, a value is NaN/inf, ``desirable`` not boolean, β ≤ 0, a weight
            ≤ 0, or ``kl_estimate`` negative or not a scalar (the message names the argument).
    Example:
        >>> z = torch.zeros(2)
        >>> kto_loss(z, z, torch.tensor([True, False]), 0.0, beta=0.1)  # ρ = z₀: half of each weight
        tensor([0.5000, 0.5000])
    """
    _checks.check_positive("beta", beta)
    _checks.check_positive("desirable_weight", desirable_weight)
    _checks.check_positive("undesirable_weight", undesirable_weight)
    policy, ref = _same_shape(policy_log_probs=policy_log_probs, ref_log_probs=ref_log_probs)
    desirable = _checks.check_bool_like("desirable", desirable, tuple(policy.shape)).to(policy.device)
    z0 = _checks.as_float_tensor("kl_estimate", kl_estimate, dtype=policy.dtype).detach().to(policy.device)
    if z0.numel() != 1:
        raise ValueError(f"`kl_estimate` must be one number (z₀, nats); got shape {tuple(z0.shape)}")
    if float(z0) < 0:
        raise ValueError(f"`kl_estimate` must be ≥ 0 (a KL; clamp the estimate at 0, as Ethayarajh et al. do); got {float(z0)}")
    z0 = z0.reshape(())
    rho = policy - ref
    value = torch.where(desirable, desirable_weight * torch.sigmoid(beta * (rho - z0)),
                        undesirable_weight * torch.sigmoid(beta * (z0 - rho)))
    weight = torch.where(desirable, torch.full_like(rho, desirable_weight), torch.full_like(rho, undesirable_weight))
    return weight - value
