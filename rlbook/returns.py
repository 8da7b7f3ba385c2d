"""Monte-Carlo returns: rewards-to-go G_t and whole-episode returns R(τ).

Conventions (book notation page): tensors are ``(..., T)``, time last, and ``rewards[..., t]`` is the
reward that follows ``actions[..., t]``. Several episodes may be laid end to end along T: an episode
ends at step t when ``terminated[..., t] | truncated[..., t]`` (``done``), and the recursion is cut
there. Only ``terminated`` means "the future is worth 0"; on ``truncated`` (a time limit, a full
buffer) the future is unknown, and if ``next_values`` is given it is estimated by V(final obs).
The last step of the arrays is treated as the end of the data: nothing is carried in from beyond it
except that bootstrap.
"""

from __future__ import annotations

import torch

from rlbook import _checks

__all__ = ["rewards_to_go", "discounted_returns"]


def _episode_inputs(rewards, gamma, terminated, truncated, next_values=None):
    """Validate and convert the shared inputs; return (rewards, terminated, truncated, next_values)."""
    rewards = _checks.as_float_tensor("rewards", rewards)
    _checks.check_min_ndim("rewards", rewards, 1)
    _checks.check_nonempty("rewards", rewards)
    _checks.check_in_range("gamma", gamma, 0.0, 1.0)
    flags = []
    for name, flag in (("terminated", terminated), ("truncated", truncated)):
        if flag is None:
            flag = torch.zeros(rewards.shape, dtype=torch.bool, device=rewards.device)
        else:
            flag = _checks.check_bool_like(name, flag, rewards.shape).to(rewards.device)
        flags.append(flag)
    if next_values is not None:
        next_values = _checks.as_float_tensor("next_values", next_values, dtype=rewards.dtype)
        _checks.check_same_shape(rewards=rewards, next_values=next_values)
        next_values = next_values.to(rewards.device)
    return rewards, flags[0], flags[1], next_values


def rewards_to_go(rewards, gamma=1.0, terminated=None, truncated=None, next_values=None) -> torch.Tensor:
    """Discounted reward-to-go of every step, cut at episode boundaries.

    G_t = r_t + γ·(1 − done_t)·G_{t+1} + γ·[truncated_t ∧ ¬terminated_t]·V(s_{t+1}^final),
    done_t = terminated_t ∨ truncated_t,  G_T := 0 (the end of the arrays).

    The bootstrap term is present only where ``next_values`` is given. G_t is the Monte-Carlo target
    for V(s_t) and, multiplied by ∇log π(a_t|s_t), the "reward-to-go" policy-gradient estimator
    (causality: an action cannot change rewards received before it).

    Source: book eq. (rewards-to-go); Sutton & Barto 2018, eq. 3.9 (G_t = R_{t+1} + γG_{t+1});
    Williams 1992, "Simple statistical gradient-following algorithms", Machine Learning 8.

    Args:
        rewards: (..., T) rewards, r_t following a_t.
        gamma: discount γ in [0, 1], dimensionless.
        terminated: optional (..., T) bool; True where the episode reached a terminal state after
            step t (future worth 0).
        truncated: optional (..., T) bool; True where the episode was cut after step t without
            reaching a terminal state.
        next_values: optional (..., T) V of the observation reached after step t; read only where
            ``truncated & ~terminated``.
    Returns:
        (..., T) rewards-to-go G_t, same dtype and device as ``rewards``.
    Gradient:
        differentiable in ``rewards`` and ``next_values`` (no gradient is needed in practice).
    Raises:
        ValueError: ``rewards`` empty or 0-d; ``gamma`` outside [0, 1]; ``terminated``,
            ``truncated`` or ``next_values`` of a shape other than that of ``rewards``.
    See also:
        rlbook.reference.rewards_to_go_loop, discounted_returns
    Example:
        >>> rewards_to_go(torch.tensor([1.0, 1.0, 1.0]), gamma=0.5)
        tensor([1.7500, 1.5000, 1.0000])
    """
    rewards, terminated, truncated, next_values = _episode_inputs(
        rewards, gamma, terminated, truncated, next_values
    )
    keep = (~(terminated | truncated)).to(rewards.dtype)  # (..., T) 1 where the episode goes on
    if next_values is None:
        bootstrap = torch.zeros_like(rewards)
    else:
        bootstrap = torch.where(truncated & ~terminated, next_values, torch.zeros_like(next_values))
    out = []
    g = torch.zeros_like(rewards[..., 0])  # (...,) G_{t+1}
    for t in reversed(range(rewards.shape[-1])):
        g = rewards[..., t] + gamma * (keep[..., t] * g + bootstrap[..., t])
        out.append(g)
    return torch.stack(out[::-1], dim=-1)


def discounted_returns(rewards, gamma=1.0, terminated=None, truncated=None) -> torch.Tensor:
    """The whole discounted return R(τ) of its episode, written at every step of that episode.

    R(τ) = Σ_{k=0}^{L−1} γ^k r_k  (k counted from the episode's first step);  out_t = R(τ(t)).

    This is the weight of "vanilla" REINFORCE, ∇J = E[Σ_t ∇log π(a_t|s_t)·R(τ)]. It equals
    ``rewards_to_go`` read at the first step of each episode. Episodes end where
    ``terminated | truncated`` (no bootstrap here) and at the end of the arrays.

    Source: book eq. (reinforce-total); Williams 1992 (vanilla REINFORCE, eq. 11).

    Args:
        rewards: (..., T) rewards, r_t following a_t.
        gamma: discount γ in [0, 1].
        terminated, truncated: optional (..., T) bool episode ends (see ``rewards_to_go``).
    Returns:
        (..., T) R(τ) of the episode each step belongs to; same dtype and device as ``rewards``.
    Gradient:
        differentiable in ``rewards`` (not needed in practice).
    Raises:
        ValueError: as ``rewards_to_go``.
    See also:
        rlbook.reference.discounted_returns_loop, rewards_to_go
    Example:
        >>> discounted_returns(torch.tensor([1.0, 1.0, 1.0, 2.0]), 0.5, terminated=[0, 1, 0, 0])
        tensor([1.5000, 1.5000, 2.0000, 2.0000])
    """
    rewards, terminated, truncated, _ = _episode_inputs(rewards, gamma, terminated, truncated)
    g = rewards_to_go(rewards, gamma, terminated, truncated)  # G_t; R(τ) = G at the episode start
    done = terminated | truncated
    out = [g[..., 0]]
    for t in range(1, rewards.shape[-1]):
        out.append(torch.where(done[..., t - 1], g[..., t], out[-1]))
    return torch.stack(out, dim=-1)
