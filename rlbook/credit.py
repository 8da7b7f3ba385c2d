"""Credit assignment for multi-turn (agentic) episodes: which tokens get which advantage.

An agentic episode alternates model turns (tokens the policy generated) with environment turns
(tool output, observations). The per-turn quantities here are turned into per-token advantages,
and only the model's tokens are ever credited.

Layout conventions (every function of this module):

* ``B`` episodes (trajectories). When a function groups them (GiGPO), the ``group_size`` episodes
  of one prompt / task instance are consecutive (group-contiguous): episodes 0..G−1 are group 0,
  G..2G−1 group 1, and so on.
* ``K`` = the maximum number of turns, ``T`` = the maximum number of tokens.
* Per-turn tensors ``turn_rewards``, ``turn_returns``, ``turn_values`` have shape (B, K), with
  ``turn_mask`` (B, K) bool/0-1: 1 on the turns an episode actually has. A turn mask must be a
  prefix in every row (ones, then zeros): episode b has turns 0..K_b−1.
* Token tensors: ``loss_mask`` (B, T) 0/1 is 1 on the tokens the model generated (actions) and 0 on
  prompt, environment/tool-observation and padding tokens. ``turn_ids`` (B, T) long holds the turn
  index k (0-based) of every token of turn k (the model's tokens of turn k and the observation that
  follows them) and −1 on prompt and padding tokens.

Advantages are constants of the policy-gradient loss: every function returns a detached tensor.
"""

from __future__ import annotations

import torch

from rlbook import _checks
from rlbook.advantages import group_relative_advantages
from rlbook.aggregation import _check_group_size

__all__ = [
    "broadcast_to_tokens",
    "discounted_turn_returns",
    "gigpo_advantages",
    "return_batch_normalisation",
    "turn_values_to_tokens",
]


# ----------------------------------------------------------------------------- validation helpers


def _turn_tensor(name: str, x, dtype: torch.dtype | None = None) -> torch.Tensor:
    """A finite floating (B, K) tensor, detached; ``ValueError`` naming ``name`` otherwise."""
    x = _checks.as_float_tensor(name, x, dtype=dtype).detach()
    if x.dim() != 2:
        raise ValueError(f"`{name}` must have shape (B, K) (episodes × turns); got {tuple(x.shape)}")
    _checks.check_nonempty(name, x)
    return x


def _turn_mask(turn_mask, like: torch.Tensor) -> torch.Tensor:
    """``turn_mask`` as a bool (B, K) tensor on ``like``'s device; each row must be a prefix (1…1 0…0)."""
    mask = _checks.check_bool_like("turn_mask", turn_mask, shape=like.shape).to(like.device)
    if mask.shape[1] > 1 and (mask[:, 1:] & ~mask[:, :-1]).any():
        rows = torch.nonzero((mask[:, 1:] & ~mask[:, :-1]).any(dim=1)).flatten()[:4].tolist()
        raise ValueError(
            f"`turn_mask` must be a prefix in every row (ones on turns 0..K_b−1, then zeros); "
            f"rows {rows} have a valid turn after a masked one"
        )
    return mask


def _integer_tensor(name: str, x, shape) -> torch.Tensor:
    """``x`` as a long tensor of ``shape``; ``ValueError`` if it is not integer-valued or shaped so."""
    x = torch.as_tensor(x).detach()
    if x.dtype == torch.bool or torch.is_complex(x):
        raise ValueError(f"`{name}` must hold integers; got dtype {x.dtype}")
    if torch.is_floating_point(x) and x.numel() and not (torch.isfinite(x).all() and (x == x.round()).all()):
        raise ValueError(f"`{name}` must hold integers; got non-integer values")
    x = x.long()
    if tuple(x.shape) != tuple(shape):
        raise ValueError(f"`{name}` must have shape {tuple(shape)}; got {tuple(x.shape)}")
    return x


def _loss_mask(loss_mask, batch: int | None = None) -> torch.Tensor:
    """``loss_mask`` as a bool (B, T) tensor (B checked against ``batch`` when given)."""
    mask = _checks.check_bool_like("loss_mask", loss_mask)
    if mask.dim() != 2 or (batch is not None and mask.shape[0] != batch):
        expected = "(B, T)" if batch is None else f"(B, T) with B = {batch}"
        raise ValueError(f"`loss_mask` must have shape {expected}; got {tuple(mask.shape)}")
    return mask


# ----------------------------------------------------------------------------- turns -> tokens


def broadcast_to_tokens(trajectory_advantages, loss_mask) -> torch.Tensor:
    """Give every model token of an episode the episode's one advantage; exactly 0 elsewhere.

    Â_{b,t} = A_b · loss_mask_{b,t}

    This is the default credit assignment of GRPO-style agent training (TRL, verl): every
    generated token of every turn is pushed by the same trajectory-level advantage, and the
    prompt, the tool/environment observations and the padding get nothing (they were not
    sampled from the policy, so they have no score function to weight).

    Source: GRPO's outcome supervision, Shao et al. 2024 (DeepSeekMath), arXiv:2402.03300, §4.1.2
    (every token of an output gets the output's normalised reward).

    Args:
        trajectory_advantages: (B,) one advantage per episode (return units, or dimensionless
            when normalised), e.g. from :func:`rlbook.group_relative_advantages`.
        loss_mask: (B, T) 0/1 or bool, 1 on the model's generated tokens.
    Returns:
        (B, T) token advantages in ``trajectory_advantages``' dtype; exactly +0.0 where
        ``loss_mask`` is 0.
    Gradient:
        none: the result is detached (advantages are constants of the loss).
    Raises:
        ValueError: ``trajectory_advantages`` not 1-D (B,), empty or non-finite; ``loss_mask`` not
            0/1 or not of shape (B, T) with the same B.
    See also:
        turn_values_to_tokens, rlbook.group_relative_advantages
    Example:
        >>> broadcast_to_tokens(torch.tensor([1.0, -1.0]), torch.tensor([[0, 1, 1], [0, 1, 0]]))
        tensor([[ 0.,  1.,  1.],
                [ 0., -1.,  0.]])
    """
    adv = _checks.as_float_tensor("trajectory_advantages", trajectory_advantages).detach()
    if adv.dim() != 1:
        raise ValueError(f"`trajectory_advantages` must have shape (B,) (one per episode); got {tuple(adv.shape)}")
    _checks.check_nonempty("trajectory_advantages", adv)
    mask = _loss_mask(loss_mask, adv.shape[0]).to(adv.device)
    values = adv[:, None].expand(mask.shape)
    return torch.where(mask, values, torch.zeros_like(values))


def turn_values_to_tokens(turn_values, turn_ids, loss_mask) -> torch.Tensor:
    """Give every model token the value of its own turn: Â_{b,t} = turn_values[b, turn_ids[b, t]].

    Â_{b,t} = V_{b, k(b,t)} · loss_mask_{b,t},    k(b,t) = turn_ids[b, t]

    Turn-level credit (a per-turn advantage, return or GiGPO advantage) is spread over the tokens
    the model generated in that turn, and only those: prompt, observation and padding tokens get
    exactly 0. The classic bug this replaces is broadcasting *one* turn's tensor over the whole
    episode (every token gets turn 0's value); ``tests/test_credit.py`` shows the difference.

    Source: the turn-level view of an agentic episode in GEM, Liu et al. 2025, arXiv:2510.01051
    (Fig. 3: the loss is taken on the action tokens of each turn).

    Args:
        turn_values: (B, K) one number per turn (advantage or return units); entries of turns no
            model token points at are ignored.
        turn_ids: (B, T) integers, the turn index k in [0, K) of every token of turn k, −1 on
            prompt and padding tokens.
        loss_mask: (B, T) 0/1 or bool, 1 on the model's generated tokens.
    Returns:
        (B, T) token values in ``turn_values``' dtype; exactly +0.0 where ``loss_mask`` is 0.
    Gradient:
        none: the result is detached.
    Raises:
        ValueError: ``turn_values`` not (B, K), empty or non-finite; ``turn_ids`` not integer or not
            (B, T); any ``turn_ids`` outside [−1, K); a model token (``loss_mask`` 1) whose
            ``turn_ids`` is −1; ``loss_mask`` not 0/1 or not (B, T).
    See also:
        broadcast_to_tokens, gigpo_advantages
    Example:
        >>> turn_values_to_tokens(torch.tensor([[10.0, 20.0]]),
        ...                       torch.tensor([[-1, 0, 0, 0, 1, 1, -1]]),
        ...                       torch.tensor([[0, 1, 1, 0, 1, 1, 0]]))
        tensor([[ 0., 10., 10.,  0., 20., 20.,  0.]])
    """
    values = _turn_tensor("turn_values", turn_values)
    B, K = values.shape
    mask = _loss_mask(loss_mask, B).to(values.device)
    ids = _integer_tensor("turn_ids", turn_ids, mask.shape).to(values.device)
    if ids.numel() and ((ids < -1) | (ids >= K)).any():
        raise ValueError(
            f"`turn_ids` must lie in [-1, K) = [-1, {K}) (K = turns in `turn_values`); "
            f"got values in [{int(ids.min())}, {int(ids.max())}]"
        )
    if (mask & (ids < 0)).any():
        b, t = torch.nonzero(mask & (ids < 0))[0].tolist()
        raise ValueError(
            f"`turn_ids` is -1 on a model token (loss_mask 1) at [{b}, {t}]; every model token must "
            "belong to a turn k in [0, K)"
        )
    gathered = values.gather(1, ids.clamp(min=0))
    return torch.where(mask, gathered, torch.zeros_like(gathered))


# ----------------------------------------------------------------------------- per-turn returns


def discounted_turn_returns(turn_rewards, turn_mask, gamma: float) -> torch.Tensor:
    """Per-turn discounted returns over each episode's own turns.

    G_{b,k} = Σ_{j=k}^{K_b−1} γ^{j−k} r_{b,j}     for k < K_b;     G_{b,k} = 0 for k ≥ K_b

    computed by the backward recursion G_k = r_k + γ G_{k+1}, G_{K_b} = 0. Rewards on masked
    turns (k ≥ K_b) are ignored, whatever they hold. γ discounts per *turn* (not per token), as in
    GEM's turn-level MDP and GiGPO's step returns; γ = 1 makes G_{b,0} the episode's total reward.

    Source: Sutton & Barto 2018, eq. 3.8 (the return); per turn: GEM, Liu et al. 2025,
    arXiv:2510.01051 (REINFORCE with per-turn returns and any γ); GiGPO, Feng et al. 2025,
    arXiv:2505.10978, §4.2, eq. 5 (the discounted step return R_t).

    Args:
        turn_rewards: (B, K) reward r_{b,k} received after turn k (reward units).
        turn_mask: (B, K) 0/1 or bool prefix mask, 1 on the turns episode b has.
        gamma: discount γ in [0, 1] per turn.
    Returns:
        (B, K) returns (reward units), same dtype as ``turn_rewards``; exactly 0 on masked turns.
    Gradient:
        none: the result is detached (returns are targets/constants).
    Raises:
        ValueError: ``turn_rewards`` not (B, K), empty or non-finite; ``turn_mask`` not 0/1, of
            another shape or not a prefix; ``gamma`` outside [0, 1].
    See also:
        return_batch_normalisation, gigpo_advantages, rlbook.rewards_to_go
    Example:
        >>> discounted_turn_returns(torch.tensor([[1.0, 0.0, 4.0], [0.0, 2.0, 9.0]]),
        ...                         torch.tensor([[1, 1, 1], [1, 1, 0]]), gamma=0.5)
        tensor([[2., 2., 4.],
                [1., 2., 0.]])
    """
    rewards = _turn_tensor("turn_rewards", turn_rewards)
    mask = _turn_mask(turn_mask, rewards)
    _checks.check_in_range("gamma", gamma, 0.0, 1.0)
    rewards = torch.where(mask, rewards, torch.zeros_like(rewards))
    out = torch.zeros_like(rewards)
    running = torch.zeros_like(rewards[:, 0])
    for k in range(rewards.shape[1] - 1, -1, -1):
        running = rewards[:, k] + gamma * running
        out[:, k] = running
    return out  # masked turns come after the valid ones and carry zeroed rewards: their G is exactly 0


def return_batch_normalisation(turn_returns, turn_mask, eps: float = 1e-8) -> torch.Tensor:
    """Return Batch Normalisation (ReBN, GEM): per-turn returns z-scored over the whole batch.

    Â_{b,k} = (G_{b,k} − μ) / (σ + eps),     μ = mean_{valid (b,k)} G,
    σ = √( (1/N) Σ_{valid (b,k)} (G_{b,k} − μ)² ),     N = number of valid turns in the batch

    Every valid turn of every episode is one sample (one transition of the turn-level MDP); the
    mean and the *population* standard deviation are taken over all of them at once, not per
    episode or per prompt group. Unlike a group-relative advantage this needs no group of episodes
    that share a start state, and it works with dense per-turn rewards and any γ: that is why GEM
    proposes it as the baseline for multi-turn REINFORCE. If every valid return is equal (σ = 0,
    e.g. a single valid turn) the result is exactly 0; masked turns get exactly 0.

    Population vs sample std: GEM's reference implementation for Oat (``compute_monte_carlo_
    advantages``, examples/train_oat) divides by N (√(E[G²] − μ²)) and adds 1e-9 to σ; its Tinker
    example calls ``torch.std`` (÷(N−1)). This function uses ÷N, so with ``eps=0`` the result has
    mean 0 and standard deviation exactly 1 over the valid turns.

    Source: Liu et al. 2025, "GEM: A Gym for Agentic LLMs", arXiv:2510.01051, the REINFORCE with
    Return Batch Normalization baseline (the ReBN paragraph, p. 5 of v1); reference code
    github.com/axon-rl/gem.

    Args:
        turn_returns: (B, K) per-turn returns G_{b,k} (reward units), e.g. from
            :func:`discounted_turn_returns`.
        turn_mask: (B, K) 0/1 or bool prefix mask, 1 on the turns episode b has.
        eps: ≥ 0, added to σ (reward units) to keep a tiny spread finite.
    Returns:
        (B, K) normalised returns (dimensionless), same dtype as ``turn_returns``; 0 on masked turns.
    Gradient:
        none: the result is detached.
    Raises:
        ValueError: ``turn_returns`` not (B, K), empty or non-finite; ``turn_mask`` not 0/1, of
            another shape or not a prefix; ``eps`` < 0.
    See also:
        discounted_turn_returns, rlbook.magistral_advantages (batch-std scaling of group-centred rewards)
    Example:
        >>> return_batch_normalisation(torch.tensor([[1.0, 3.0], [2.0, 9.0]]),
        ...                            torch.tensor([[1, 1], [1, 0]]), eps=0.0)
        tensor([[-1.2247,  1.2247],
                [ 0.0000,  0.0000]])
    """
    returns = _turn_tensor("turn_returns", turn_returns)
    mask = _turn_mask(turn_mask, returns)
    _checks.check_in_range("eps", eps, 0.0)
    valid = returns[mask]
    zeros = torch.zeros_like(returns)
    if valid.numel() == 0 or (valid == valid[0]).all():
        return zeros
    mean = valid.mean()
    spread = (valid - mean).pow(2).mean().sqrt()  # population std (÷N) over the valid turns
    return torch.where(mask, (returns - mean) / (spread + eps), zeros)


# ----------------------------------------------------------------------------- GiGPO


def gigpo_advantages(
    episode_returns,
    turn_returns,
    anchor_states,
    turn_mask,
    group_size: int,
    step_weight: float = 1.0,
    scale: str = "std",
    eps: float = 1e-6,
) -> torch.Tensor:
    """GiGPO: an episode-level group-relative advantage plus a step-level one from anchor states.

    Episode level (over the G episodes of one group, i.e. one task instance):
        A^E_b = (R_b − mean_group R) / F_norm,
    Step level (anchor-state grouping): inside one episode group, the valid turns (b, k) whose
    ``anchor_states`` are equal were taken from the same environment state s̃; they form the step
    group S(s̃), and with G_{b,k} their (discounted) turn returns
        A^S_{b,k} = (G_{b,k} − mean_{S(s̃)} G) / F_norm,
    Combined, per valid turn:
        A_{b,k} = A^E_b + ω · A^S_{b,k}          (ω = ``step_weight``; 0 on masked turns)

    F_norm = population std + eps (``scale="std"``) or 1 (``scale="none"``), the same choice at
    both levels. A group (episode or step) whose values are all equal gets exactly 0; in
    particular a step group of one turn (a state no other episode of the group visited) gets
    A^S = 0, so with all anchor states distinct GiGPO reduces to the episode-level (GRPO)
    advantage, as it does with ω = 0. The episode level is
    :func:`rlbook.group_relative_advantages` (population std). Anchor states are compared only
    inside an episode group: equal ids in different groups are different states.

    Paper vs this function. The paper's normalisation factor F_norm is either the standard
    deviation (as in GRPO) or the constant 1 (a leave-one-out style, unbiased choice), and its
    returns are discounted per step (R_t = Σ_{k≥t} γ^{k−t} r_k; pass
    :func:`discounted_turn_returns`). The authors' verl-agent code (``gigpo/core_gigpo.py``)
    defaults to F_norm = 1 (``mode="mean_norm"``), uses ``torch.std`` (÷(n−1), the sample std)
    when normalising by std, and in its default episode step computes the episode-level mean and
    std over steps rather than episodes; this function follows the equations (one value per
    episode) with the population std of this library. Turn pairing by exact state equality
    matches the paper's exact-match grouping (the code's optional similarity matching is not done).

    Source: Feng, Xue, Liu & An 2025, "Group-in-Group Policy Optimization for LLM Agent
    Training", arXiv:2505.10978, §4.1 eq. 3 (episode relative advantage), §4.2 eq. 5 (discounted
    step return), eq. 6 (anchor-state step groups), eq. 7 (step relative advantage), eq. 8
    (A = A^E + ω A^S); equation numbers as cited by the authors' verl-agent code.

    Args:
        episode_returns: (B,) the episode's return R_b (reward units), group-contiguous.
        turn_returns: (B, K) per-turn returns G_{b,k} (reward units).
        anchor_states: (B, K) integer environment-state ids; equal id = identical state.
            Ignored on masked turns.
        turn_mask: (B, K) 0/1 or bool prefix mask, 1 on the turns episode b has.
        group_size: G ≥ 1 episodes per task instance; must divide B.
        step_weight: ω ≥ 0, weight of the step-level advantage.
        scale: "std" (F_norm = population std + eps) or "none" (F_norm = 1).
        eps: ≥ 0, added to the std (reward units).
    Returns:
        (B, K) per-turn advantages, same dtype as ``turn_returns``; dimensionless for
        ``scale="std"``, reward units for ``scale="none"``; exactly 0 on masked turns. Spread them
        over tokens with :func:`turn_values_to_tokens`.
    Gradient:
        none: the result is detached.
    Raises:
        ValueError: ``episode_returns`` not (B,) with the B of ``turn_returns``; ``turn_returns``
            not (B, K), empty or non-finite; ``anchor_states`` not integer or not (B, K);
            ``turn_mask`` not 0/1, another shape or not a prefix; ``group_size`` not a positive
            integer dividing B; ``step_weight`` < 0; unknown ``scale``; ``eps`` < 0.
    See also:
        rlbook.group_relative_advantages, discounted_turn_returns, turn_values_to_tokens
    Example:
        >>> gigpo_advantages(torch.tensor([1.0, 0.0]), torch.tensor([[1.0, 1.0], [0.0, 0.0]]),
        ...                  torch.tensor([[0, 1], [0, 2]]), torch.tensor([[1, 1], [1, 1]]),
        ...                  group_size=2, scale="none")
        tensor([[ 1.0000,  0.5000],
                [-1.0000, -0.5000]])
    """
    returns = _turn_tensor("turn_returns", turn_returns)
    B, K = returns.shape
    episode = _checks.as_float_tensor("episode_returns", episode_returns, dtype=returns.dtype).detach()
    if tuple(episode.shape) != (B,):
        raise ValueError(
            f"`episode_returns` must have shape (B,) = ({B},) (one per episode of `turn_returns`); "
            f"got {tuple(episode.shape)}"
        )
    episode = episode.to(returns.device)
    mask = _turn_mask(turn_mask, returns)
    anchors = _integer_tensor("anchor_states", anchor_states, returns.shape).to(returns.device)
    _check_group_size(group_size, B)  # a positive integer dividing B (episodes laid out group by group)
    _checks.check_in_range("step_weight", step_weight, 0.0)
    if scale not in ("std", "none"):
        raise ValueError(f"`scale` must be 'std' (F_norm = std) or 'none' (F_norm = 1); got {scale!r}")
    _checks.check_in_range("eps", eps, 0.0)

    episode_adv = group_relative_advantages(episode, group_size, scale=scale, eps=eps)  # (B,)

    step_adv = torch.zeros_like(returns)
    if mask.any():
        group_of = torch.arange(B, device=returns.device) // group_size
        keys = torch.stack([group_of[:, None].expand(B, K)[mask], anchors[mask]], dim=1)  # (N, 2)
        _, step_group = torch.unique(keys, dim=0, return_inverse=True)  # (N,) step-group index
        n_groups = int(step_group.max()) + 1
        g = returns[mask]
        count = torch.zeros(n_groups, dtype=g.dtype, device=g.device).index_add_(0, step_group, torch.ones_like(g))
        total = torch.zeros_like(count).index_add_(0, step_group, g)
        centred = g - (total / count)[step_group]
        high = torch.full_like(count, -torch.inf).scatter_reduce(0, step_group, g, "amax")
        low = torch.full_like(count, torch.inf).scatter_reduce(0, step_group, g, "amin")
        constant = (high == low)[step_group]  # includes every step group of one turn
        if scale == "std":
            var = torch.zeros_like(count).index_add_(0, step_group, centred.pow(2)) / count
            centred = centred / (var.sqrt()[step_group] + eps)
        step_adv[mask] = torch.where(constant, torch.zeros_like(centred), centred)

    combined = episode_adv[:, None] + step_weight * step_adv
    return torch.where(mask, combined, torch.zeros_like(combined))
