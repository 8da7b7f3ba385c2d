"""The KL-regularised objective on a finite answer set, exactly: π*, its value, best-of-N, DPO's population loss.

When the answers can be enumerated (a bandit; one prompt of the book's task with its few possible
answers scored by the model's own log-probabilities) every quantity of the preference chapters has
a closed form, and the sampled, trained versions can be checked against it.

=============================  ====================================================================
function                       equation
=============================  ====================================================================
dpo_population_loss            Σ_{y,y'} μ(y)μ(y')·σ(r(y) − r(y'))·−log σ(r̂(y) − r̂(y'))
kl_regularised_optimum         π*(y) = π_ref(y)·exp(r(y)/β) / Z
kl_regularised_value           β·log Z = max_π E_π[r] − β·KL(π ‖ π_ref)
kl_regularised_objective       E_π[r] − β·KL(π ‖ π_ref)
best_of_n_probs                π_N(y) = π_ref(y)/π_ref(L_y) · (F(r_y)^N − F⁻(r_y)^N)
best_of_n_kl                   KL(π_N ‖ π_ref), exact
best_of_n_kl_bound             log N − (N−1)/N
=============================  ====================================================================

Shapes: (..., K), K answers in the last dim; rewards in the units of the objective (Bradley–Terry
logit units where preferences are drawn from them).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from rlbook import _checks

__all__ = [
    "dpo_population_loss",
    "kl_regularised_optimum",
    "kl_regularised_value",
    "kl_regularised_objective",
    "best_of_n_probs",
    "best_of_n_kl",
    "best_of_n_kl_bound",
]


def _same_shape(**named) -> list[torch.Tensor]:
    """Float tensors of one shape (non-tensors converted); ValueError names the odd one out."""
    tensors = {name: _checks.as_float_tensor(name, x) for name, x in named.items()}
    _checks.check_same_shape(**tensors)
    return list(tensors.values())


def dpo_population_loss(log_probs, ref_log_probs, rewards, beta: float, sampling_probs=None) -> torch.Tensor:
    """DPO's loss in expectation over all pairs of a finite answer set labelled by Bradley–Terry.

    r̂(y) = β·(log π_θ(y) − log π_ref(y))
    L(θ) = Σ_{y, y'} μ(y)·μ(y')·σ(r(y) − r(y'))·(−log σ(r̂(y) − r̂(y')))

    Both answers of a pair are drawn from μ (default π_ref); the one labelled "chosen" is y with
    the Bradley–Terry probability of the gold reward r. The sum runs over ordered pairs, y = y'
    included (a constant μ(y)²·log 2 / 2 each). With μ of full support its minimiser is π*
    (:func:`kl_regularised_optimum`): β·(log π/π_ref)(y) − β·(log π/π_ref)(y') = r(y) − r(y').

    Source: Rafailov et al. 2023, arXiv:2305.18290, eq. 7 and Theorem 1 (expected over pairs).

    Args:
        log_probs: (..., K) log π_θ over all K answers (normalised), nats.
        ref_log_probs: (..., K) log π_ref, nats, finite.
        rewards: (..., K) gold rewards, logit units.
        beta: β > 0.
        sampling_probs: (..., K) μ, probabilities; None = exp(ref_log_probs).
    Returns:
        (...) expected loss per pair, nats.
    Gradient:
        through ``log_probs`` (and the others, if they require it).
    Raises:
        ValueError: shapes differ, a value is NaN/inf, β ≤ 0, or μ is not a distribution.
    See also:
        rlbook.reference.dpo_population_loss_loop
    """
    _checks.check_positive("beta", beta)
    log_probs, ref_log_probs, rewards = _same_shape(log_probs=log_probs, ref_log_probs=ref_log_probs, rewards=rewards)
    _checks.check_min_ndim("log_probs", log_probs, 1, "(..., K)")
    mu = ref_log_probs.exp() if sampling_probs is None else _same_shape(log_probs=log_probs, sampling_probs=sampling_probs)[1]
    _checks.check_probabilities("sampling_probs", mu)
    implicit = beta * (log_probs - ref_log_probs)
    pair_weight = mu[..., :, None] * mu[..., None, :] * torch.sigmoid(rewards[..., :, None] - rewards[..., None, :])
    return (pair_weight * -F.logsigmoid(implicit[..., :, None] - implicit[..., None, :])).sum((-2, -1))


def _ref_and_rewards(ref_probs, rewards) -> tuple[torch.Tensor, torch.Tensor]:
    ref_probs, rewards = _same_shape(ref_probs=ref_probs, rewards=rewards)
    _checks.check_min_ndim("ref_probs", ref_probs, 1, "(..., K)")
    _checks.check_probabilities("ref_probs", ref_probs)
    return ref_probs, rewards


def kl_regularised_optimum(ref_probs, rewards, beta: float) -> torch.Tensor:
    """The maximiser π* of E_π[r] − β·KL(π ‖ π_ref) over distributions on K answers.

    π*(y) = π_ref(y)·exp(r(y)/β) / Z,   Z = Σ_y π_ref(y)·exp(r(y)/β)

    Computed in log space (a log-softmax of log π_ref + r/β), so large r/β do not overflow.
    Answers with π_ref(y) = 0 get π*(y) = 0.

    Source: Rafailov et al. 2023, arXiv:2305.18290, eq. 4 (Appendix A.1); Korbak, Perez & Buckley
    2022, arXiv:2205.11275 (RL with a KL penalty as Bayesian inference).

    Args:
        ref_probs: (..., K) π_ref, non-negative, summing to 1.
        rewards: (..., K) r(y), reward units.
        beta: β > 0, the KL coefficient.
    Returns:
        (..., K) π*, summing to 1.
    Gradient:
        through both inputs.
    Raises:
        ValueError: shapes differ, a value is NaN/inf, ``ref_probs`` not a distribution, or β ≤ 0.
    See also:
        kl_regularised_value, rlbook.reference.kl_regularised_optimum_search
    Example:
        >>> kl_regularised_optimum(torch.tensor([0.5, 0.5]), torch.tensor([0.0, math.log(3.0)]), beta=1.0)
        tensor([0.2500, 0.7500])
    """
    _checks.check_positive("beta", beta)
    ref_probs, rewards = _ref_and_rewards(ref_probs, rewards)
    return torch.softmax(ref_probs.log() + rewards / beta, dim=-1)


def kl_regularised_value(ref_probs, rewards, beta: float) -> torch.Tensor:
    """The optimal value of the KL-regularised objective: β·log Z.

    max_π E_π[r] − β·KL(π ‖ π_ref) = β·log Σ_y π_ref(y)·exp(r(y)/β), attained at π*.

    It lies between E_{π_ref}[r] (β → ∞) and max_{y: π_ref(y) > 0} r(y) (β → 0).

    Source: Rafailov et al. 2023, arXiv:2305.18290, Appendix A.1 (the Gibbs variational principle;
    Donsker & Varadhan 1975).

    Args:
        ref_probs: (..., K) π_ref. rewards: (..., K). beta: β > 0.
    Returns:
        (...) the value, reward units.
    Gradient:
        through both inputs (∂/∂r = π*).
    Raises:
        ValueError: as :func:`kl_regularised_optimum`.
    """
    _checks.check_positive("beta", beta)
    ref_probs, rewards = _ref_and_rewards(ref_probs, rewards)
    return beta * torch.logsumexp(ref_probs.log() + rewards / beta, dim=-1)


def kl_regularised_objective(probs, ref_probs, rewards, beta: float) -> torch.Tensor:
    """The KL-regularised objective of a given policy: E_π[r] − β·KL(π ‖ π_ref) (maximise).

    J(π) = Σ_y π(y)·r(y) − β·Σ_y π(y)·log(π(y)/π_ref(y)),  0·log 0 = 0; −inf if π puts mass
    where π_ref has none.

    Source: Ziegler et al. 2019, arXiv:1909.08593, eq. 2; Rafailov et al. 2023, arXiv:2305.18290, eq. 3.

    Args:
        probs: (..., K) π. ref_probs: (..., K) π_ref. rewards: (..., K). beta: β ≥ 0.
    Returns:
        (...) J(π), reward units.
    Gradient:
        through all inputs.
    Raises:
        ValueError: shapes differ, a value is NaN/inf, a distribution does not sum to 1, or β < 0.
    """
    _checks.check_in_range("beta", beta, 0.0)
    ref_probs, rewards = _ref_and_rewards(ref_probs, rewards)
    probs = _same_shape(ref_probs=ref_probs, probs=probs)[1]
    _checks.check_probabilities("probs", probs)
    kl_terms = torch.where(probs > 0, probs * (probs.log() - ref_probs.log()), torch.zeros_like(probs))
    return (probs * rewards).sum(-1) - beta * kl_terms.sum(-1)


def _check_n(n) -> int:
    if isinstance(n, bool) or not isinstance(n, (int,)) and not (isinstance(n, float) and n.is_integer()):
        raise ValueError(f"`n` must be an integer ≥ 1; got {n!r}")
    if int(n) < 1:
        raise ValueError(f"`n` must be an integer ≥ 1; got {n!r}")
    return int(n)


def best_of_n_probs(ref_probs, rewards, n: int) -> torch.Tensor:
    """Exact distribution of best-of-N: draw N answers from π_ref, keep one of highest reward.

    F(v) = P_{π_ref}(r(Y) ≤ v),  F⁻(v) = P_{π_ref}(r(Y) < v),  L_y = {y' : r(y') = r(y)}
    π_N(y) = π_ref(y) / π_ref(L_y) · (F(r(y))^N − F⁻(r(y))^N)

    F(v)^N − F⁻(v)^N is the probability that the best reward among the N draws is v. Ties: when
    several draws share the best reward, the kept one is chosen by a rule that looks only at the
    rewards and the draw order (the first drawn, the last, or uniformly among them), never at which
    answer it is; each tied draw is then an independent π_ref-draw from L_y, hence the factor
    π_ref(y)/π_ref(L_y). Rewards are tied when equal as floats. With distinct rewards π_N(y) =
    F(r(y))^N − F⁻(r(y))^N.

    Source: Beirami et al. 2024, arXiv:2401.01879, Lemma 1 (distinct rewards); Stiennon et al.
    2020, arXiv:2009.01325, and Nakano et al. 2021, arXiv:2112.09332 (best-of-N as a policy).

    Args:
        ref_probs: (..., K) π_ref. rewards: (..., K) rewards (any real scale).
        n: N ≥ 1 samples.
    Returns:
        (..., K) π_N, summing to 1 (π_1 = π_ref).
    Gradient:
        through ``ref_probs`` (the rewards enter only through comparisons).
    Raises:
        ValueError: shapes differ, a value is NaN/inf, ``ref_probs`` not a distribution, or n is not
            an integer ≥ 1.
    See also:
        best_of_n_kl, rlbook.reference.best_of_n_probs_enumeration
    Example:
        >>> best_of_n_probs(torch.tensor([0.5, 0.5]), torch.tensor([0.0, 1.0]), n=2)
        tensor([0.2500, 0.7500])
    """
    n = _check_n(n)
    ref_probs, rewards = _ref_and_rewards(ref_probs, rewards)
    other, this = rewards[..., None, :], rewards[..., :, None]  # [..., i, j] compares r_j with r_i
    below = (ref_probs[..., None, :] * (other < this)).sum(-1)  # F⁻(r_i)
    level = (ref_probs[..., None, :] * (other == this)).sum(-1)  # π_ref(L_i)
    best_is_level = (below + level) ** n - below ** n  # P(max of N rewards = r_i)
    share = torch.where(level > 0, ref_probs / torch.where(level > 0, level, torch.ones_like(level)), torch.zeros_like(level))
    return share * best_is_level


def best_of_n_kl(ref_probs, rewards, n: int) -> torch.Tensor:
    """Exact KL(π_N ‖ π_ref) of best-of-N over a finite answer set.

    KL = Σ_y π_N(y)·log(π_N(y)/π_ref(y)), π_N from :func:`best_of_n_probs`. It never exceeds
    :func:`best_of_n_kl_bound`, and approaches it when no answer carries much probability.

    Source: Beirami et al. 2024, arXiv:2401.01879, Theorem 1.

    Args:
        ref_probs, rewards, n: as :func:`best_of_n_probs`.
    Returns:
        (...) KL in nats.
    Gradient:
        through ``ref_probs``.
    Raises:
        ValueError: as :func:`best_of_n_probs`.
    """
    from rlbook.kl import categorical_kl

    probs = best_of_n_probs(ref_probs, rewards, n)
    ref_probs = _checks.as_float_tensor("ref_probs", ref_probs)
    return categorical_kl(probs.log(), ref_probs.log())


def best_of_n_kl_bound(n: int) -> float:
    """The usual closed form for best-of-N's KL from π_ref, an upper bound: log N − (N−1)/N.

    Exact for a continuous reward with no ties; over a finite answer set the true KL
    (:func:`best_of_n_kl`) is smaller, with equality at N = 1.

    Source: Stiennon et al. 2020, arXiv:2009.01325, App. G.3 (the formula); Beirami et al. 2024,
    arXiv:2401.01879, Theorem 1 (it is an upper bound).

    Args:
        n: N ≥ 1.
    Returns:
        The bound in nats (0 at N = 1, ~ log N − 1 for large N).
    Raises:
        ValueError: n is not an integer ≥ 1.
    Example:
        >>> round(best_of_n_kl_bound(4), 4)
        0.6363
    """
    n = _check_n(n)
    return math.log(n) - (n - 1) / n
