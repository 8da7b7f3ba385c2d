"""Learning from rankings of several answers: the Plackett–Luce model.

A labeller who ranks K answers to one prompt, best first, gives more than one comparison. The
Plackett–Luce model reads the ranking as K − 1 successive choices: the first answer is chosen from
all K with Bradley–Terry-style probabilities exp r / Σ exp r, the second from the remaining K − 1,
and so on. For K = 2 it is the Bradley–Terry model of :mod:`rlbook.preferences`.

==============================  ===================================================================
function                        equation
==============================  ===================================================================
plackett_luce_log_likelihood    log P(σ | r) = Σ_{i=1}^{K} [ r_σ(i) − log Σ_{j=i}^{K} exp r_σ(j) ]
ranking_pairs                   the K(K−1)/2 (better, worse) index pairs a ranking implies
==============================  ===================================================================

Conventions: rewards are in logit units (as in Bradley–Terry); a ranking is a permutation of the
indices 0 … K−1 of the last axis of the rewards, best first; log-likelihoods are in nats.
"""

from __future__ import annotations

import torch

from rlbook import _checks

__all__ = ["plackett_luce_log_likelihood", "ranking_pairs"]


def _as_ranking(ranking, shape: tuple[int, ...] | None = None) -> torch.Tensor:
    """``ranking`` as a long tensor whose rows along the last axis are permutations of 0 … K−1."""
    if not isinstance(ranking, torch.Tensor):
        try:
            ranking = torch.as_tensor(ranking)
        except (TypeError, ValueError, RuntimeError) as err:
            raise ValueError(f"`ranking` must be integer indices (a tensor, array or list): {err}") from None
    if ranking.is_floating_point() or ranking.is_complex() or ranking.dtype == torch.bool:
        raise ValueError(f"`ranking` must hold integer indices; got dtype {ranking.dtype}")
    _checks.check_min_ndim("ranking", ranking, 1, "(..., K)")
    _checks.check_nonempty("ranking", ranking)
    if shape is not None and tuple(ranking.shape) != shape:
        raise ValueError(f"`ranking` must have the same shape as `rewards` {shape}; got {tuple(ranking.shape)}")
    K = ranking.shape[-1]
    if not torch.equal(ranking.sort(-1).values, torch.arange(K, device=ranking.device).expand(ranking.shape)):
        raise ValueError(f"every row of `ranking` must be a permutation of 0 … {K - 1} (each index once); got {ranking.tolist()}"
                         if ranking.numel() <= 40 else f"every row of `ranking` must be a permutation of 0 … {K - 1}")
    return ranking.long()


def plackett_luce_log_likelihood(rewards, ranking) -> torch.Tensor:
    """Log-probability of a ranking of K answers under the Plackett–Luce model (maximise).

    P(σ | r) = Π_{i=1}^{K} exp r_σ(i) / Σ_{j=i}^{K} exp r_σ(j),  so
    log P(σ | r) = Σ_{i=1}^{K} [ r_σ(i) − logsumexp_{j ≥ i} r_σ(j) ],

    where σ(1) is the answer ranked first. It is the probability that drawing answers one at a time
    without replacement, each with probability ∝ exp r among those left, produces the ranking σ; the
    same as ranking by r + Gumbel noise. For K = 2 it is Bradley–Terry, log σ(r_first − r_second), and
    like Bradley–Terry it is unchanged by adding a constant to every reward of a row. The negative
    mean over rankings is the K-wise reward-model loss.

    Source: Plackett 1975, "The analysis of permutations", Applied Statistics 24(2); Luce 1959,
    *Individual Choice Behavior* (Wiley); for reward models, Zhu, Jordan & Jiao 2023,
    arXiv:2301.11270 (the K-wise maximum-likelihood estimator), and Rafailov et al. 2023,
    arXiv:2305.18290, App. A.3. (Ouyang et al. 2022, arXiv:2203.02155, eq. 1, instead train on all
    K(K−1)/2 pairs of a ranking with the Bradley–Terry loss: see ``ranking_pairs``.)

    Args:
        rewards: (..., K) rewards of the K answers of each ranking, logit units.
        ranking: (..., K) integer indices into the last axis of ``rewards``, best first; each row a
            permutation of 0 … K−1.
    Returns:
        (...,) log-likelihoods in nats, ≤ 0 (0 when K = 1).
    Gradient:
        through ``rewards``: ∂/∂r_σ(i) = 1 − Σ_{j ≤ i} softmax over {σ(j), …, σ(K)} of r, at σ(i).
    Raises:
        ValueError: ``rewards`` has no last axis, is empty or holds NaN/inf; ``ranking`` is not
            integer, has another shape, or a row is not a permutation of 0 … K−1.
    See also:
        rl.bradley_terry_loss (K = 2), ranking_pairs
    Example:
        >>> r = torch.tensor([1.0, 0.0])
        >>> round(float(plackett_luce_log_likelihood(r, torch.tensor([0, 1]))), 4)  # log σ(1)
        -0.3133
    """
    rewards = _checks.as_float_tensor("rewards", rewards)
    _checks.check_min_ndim("rewards", rewards, 1, "(..., K)")
    _checks.check_nonempty("rewards", rewards)
    ranking = _as_ranking(ranking, tuple(rewards.shape)).to(rewards.device)
    ordered = rewards.gather(-1, ranking)  # (..., K): the rewards in ranked order, best first
    # log Σ_{j ≥ i} exp r_σ(j) for every i: a log-cumulative-sum-exp taken from the end
    tail_log_normaliser = torch.logcumsumexp(ordered.flip(-1), dim=-1).flip(-1)
    return (ordered - tail_log_normaliser).sum(-1)


def ranking_pairs(ranking) -> torch.Tensor:
    """The K(K−1)/2 (better, worse) index pairs that one ranking of K answers implies.

    InstructGPT's reward model trains on all of them with the Bradley–Terry loss, the pairs of one
    prompt kept in one batch element (Ouyang et al. 2022, arXiv:2203.02155, §3.5 and eq. 1).

    Args:
        ranking: (K,) integer indices, best first; a permutation of 0 … K−1.
    Returns:
        (K(K−1)/2, 2) long tensor of (better, worse) indices, in the order (σ(1), σ(2)), (σ(1), σ(3)),
        …, (σ(K−1), σ(K)).
    Raises:
        ValueError: ``ranking`` is not one-dimensional integer indices forming a permutation of 0 … K−1.
    Example:
        >>> ranking_pairs(torch.tensor([2, 0, 1])).tolist()
        [[2, 0], [2, 1], [0, 1]]
    """
    ranking = _as_ranking(ranking)
    if ranking.dim() != 1:
        raise ValueError(f"`ranking` must have shape (K,); got {tuple(ranking.shape)}")
    first, second = torch.triu_indices(len(ranking), len(ranking), offset=1, device=ranking.device)
    return torch.stack([ranking[first], ranking[second]], dim=-1)
