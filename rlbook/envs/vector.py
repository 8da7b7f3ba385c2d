"""Vectorised CartPole and fixed-length rollouts for actor-critic training (PPO, TRPO).

Autoreset, chosen deliberately: gymnasium 1.x vector envs reset a finished sub-environment
automatically, and *when* they do it changes the bookkeeping. We use ``AutoresetMode.SAME_STEP``:
the ``step`` that ends an episode already returns the first observation of the next episode, and
the last observation of the finished episode arrives in ``info["final_obs"][i]`` (with mask
``info["_final_obs"]``). So every ``step`` is a real transition of some episode (no dummy steps, as
in the default NEXT_STEP mode), and the final observation is there for the truncation bootstrap.

Bookkeeping of one rollout, per env i and step t (shapes ``(num_envs, num_steps)``, time last):

* ``obs[i, t]`` is s_t, ``actions[i, t]`` a_t ~ π(·∣s_t), ``rewards[i, t]`` the reward that follows a_t;
* ``terminated[i, t]``: s_{t+1} is terminal (pole fell / cart left): V(s_{t+1}) = 0, no bootstrap;
* ``truncated[i, t]``: the 500-step time limit cut the episode: bootstrap from V(final obs);
* ``next_values[i, t]``: V(final obs) on truncation, 0 on termination, V(s_{t+1}) otherwise
  (for the last step of the rollout, V of the observation the next rollout starts from).

Finished episodes are recorded as ``(return, length, env_step)`` in the order they finish (envs in
index order within one vector step), ``env_step`` being the global count of env steps taken so far
by all envs together, the x-axis of every learning curve in the book.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, NamedTuple

import gymnasium as gym
import numpy as np
import torch

from rlbook import _checks

__all__ = ["make_cartpole_vector_env", "EpisodeRecord", "Rollout", "RolloutState", "collect_rollout"]


class EpisodeRecord(NamedTuple):
    """A finished episode: undiscounted return, length, global env step at its end, which env."""

    episode_return: float
    length: int
    env_step: int
    env_index: int


def make_cartpole_vector_env(num_envs: int, seed: int, max_episode_steps: int = 500) -> gym.vector.SyncVectorEnv:
    """``num_envs`` CartPole-v1 copies in one ``SyncVectorEnv`` with SAME_STEP autoreset.

    Env i is reset with seed ``seed + i`` on the first reset (gymnasium's convention for a list of
    seeds), so env i replays exactly a single ``gym.make("CartPole-v1")`` reset with ``seed + i``
    and then autoreset without a seed.

    Args:
        num_envs: number of sub-environments, ≥ 1.
        seed: non-negative integer; the vector env is reset here with it.
        max_episode_steps: time limit (truncation), 500 for CartPole-v1.
    Returns:
        The vector env, reset with ``seed`` (``RolloutState.start(envs, seed)`` starts collecting).
    Raises:
        ValueError: ``num_envs`` < 1, ``seed`` < 0, ``max_episode_steps`` < 1.
    See also:
        RolloutState, collect_rollout
    """
    if int(num_envs) != num_envs or num_envs < 1:
        raise ValueError(f"`num_envs` must be a positive integer; got {num_envs}")
    if int(seed) != seed or seed < 0:
        raise ValueError(f"`seed` must be a non-negative integer; got {seed}")
    if int(max_episode_steps) != max_episode_steps or max_episode_steps < 1:
        raise ValueError(f"`max_episode_steps` must be a positive integer; got {max_episode_steps}")
    fns = [lambda: gym.make("CartPole-v1", max_episode_steps=int(max_episode_steps)) for _ in range(int(num_envs))]
    envs = gym.vector.SyncVectorEnv(fns, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    envs.reset(seed=int(seed))
    return envs


@dataclass
class RolloutState:
    """What carries over from one rollout to the next: the live envs and the open episodes.

    Create it with ``RolloutState.start(envs, seed)`` (a seeded reset) and pass it to every
    :func:`collect_rollout` call; it carries open episodes across rollouts.

    Attributes:
        envs: the vector env (SAME_STEP autoreset).
        obs: (num_envs, obs_dim) float32 current observations.
        episode_returns: (num_envs,) running undiscounted return of each open episode.
        episode_lengths: (num_envs,) running length of each open episode.
        env_steps: total env steps taken so far by all envs.
    """

    envs: gym.vector.VectorEnv
    obs: torch.Tensor
    episode_returns: np.ndarray = None
    episode_lengths: np.ndarray = None
    env_steps: int = 0

    def __post_init__(self):
        n = self.obs.shape[0]
        if self.episode_returns is None:
            self.episode_returns = np.zeros(n)
        if self.episode_lengths is None:
            self.episode_lengths = np.zeros(n, dtype=np.int64)

    @classmethod
    def start(cls, envs: gym.vector.VectorEnv, seed: int) -> "RolloutState":
        """Reset ``envs`` with ``seed`` and return a fresh state."""
        obs, _ = envs.reset(seed=int(seed))
        return cls(envs, torch.as_tensor(obs, dtype=torch.float32))


@dataclass
class Rollout:
    """One fixed-length rollout of a vector env (the rollout buffer), time last.

    Attributes:
        obs: (N, T, obs_dim) s_t.
        actions: (N, T) int64 a_t.
        log_probs: (N, T) log π_θold(a_t∣s_t) at collection time.
        rewards: (N, T) r_t (follows a_t).
        terminated, truncated: (N, T) bool, how the episode ended at step t (if it did).
        values: (N, T) V(s_t) at collection time.
        next_values: (N, T) V(final obs) on truncation, 0 on termination, V(s_{t+1}) otherwise.
        episodes: :class:`EpisodeRecord` of each episode finished in this rollout, in finishing
            order (``history.add_episode(e.episode_return, e.length, e.env_step)``).
    """

    obs: torch.Tensor
    actions: torch.Tensor
    log_probs: torch.Tensor
    rewards: torch.Tensor
    terminated: torch.Tensor
    truncated: torch.Tensor
    values: torch.Tensor
    next_values: torch.Tensor
    episodes: list[EpisodeRecord] = field(default_factory=list)

    @property
    def num_envs(self) -> int:
        return self.actions.shape[0]

    @property
    def num_steps(self) -> int:
        return self.actions.shape[1]


PolicyFn = Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor, torch.Tensor]]


def collect_rollout(state: RolloutState, policy_fn: PolicyFn, value_fn: Callable[[torch.Tensor], torch.Tensor],
                    num_steps: int) -> Rollout:
    """Run every env for ``num_steps`` steps and return the (num_envs, num_steps) rollout.

    Advances ``state`` in place (observations, open episodes, global env-step count). Policy and
    value calls run under ``torch.no_grad``.

    Source: book ch. 7 ("collecting a rollout"); the same loop as CleanRL's ppo.py, with SAME_STEP
    autoreset and the truncation bootstrap of Pardo et al. 2018 (arXiv:1712.00378).

    Args:
        state: a :class:`RolloutState` (mutated).
        policy_fn: obs (N, obs_dim) -> (actions (N,), log_probs (N,), values (N,)); samples a ~ π(·∣s).
        value_fn: obs (M, obs_dim) -> values (M,); used for the bootstrap observations.
        num_steps: steps per env, ≥ 1.
    Returns:
        A :class:`Rollout`.
    Raises:
        ValueError: ``num_steps`` < 1, or ``policy_fn`` returns tensors of the wrong shape.
    See also:
        rlbook.advantages.gae (consumes rewards, values, next_values, terminated, truncated)
    """
    if int(num_steps) != num_steps or num_steps < 1:
        raise ValueError(f"`num_steps` must be a positive integer; got {num_steps}")
    n, steps = state.obs.shape[0], int(num_steps)
    obs_buf = torch.zeros((n, steps, *state.obs.shape[1:]), dtype=torch.float32)
    act_buf = torch.zeros((n, steps), dtype=torch.int64)
    logp_buf, rew_buf, val_buf, next_val_buf = (torch.zeros((n, steps)) for _ in range(4))
    term_buf = torch.zeros((n, steps), dtype=torch.bool)
    trunc_buf = torch.zeros((n, steps), dtype=torch.bool)
    episodes: list[EpisodeRecord] = []
    with torch.no_grad():
        for t in range(steps):
            actions, log_probs, values = policy_fn(state.obs)
            if actions.shape != (n,) or log_probs.shape != (n,) or values.shape != (n,):
                raise ValueError(f"`policy_fn` must return (actions, log_probs, values) each of shape ({n},)")
            obs_buf[:, t], act_buf[:, t] = state.obs, actions
            logp_buf[:, t], val_buf[:, t] = log_probs, values
            next_obs, rewards, terminated, truncated, info = state.envs.step(actions.numpy())
            rew_buf[:, t] = torch.as_tensor(rewards, dtype=torch.float32)
            term_buf[:, t] = torch.as_tensor(terminated)
            trunc_buf[:, t] = torch.as_tensor(truncated)
            state.env_steps += n
            state.episode_returns += rewards
            state.episode_lengths += 1
            done = np.logical_or(terminated, truncated)
            cut = np.flatnonzero(truncated & ~terminated)
            if cut.size:  # bootstrap from the true last observation, not the reset one
                final = np.stack([info["final_obs"][i] for i in cut])
                next_val_buf[cut, t] = value_fn(torch.as_tensor(final, dtype=torch.float32))
            for i in np.flatnonzero(done):
                episodes.append(EpisodeRecord(float(state.episode_returns[i]), int(state.episode_lengths[i]),
                                              state.env_steps, int(i)))
                state.episode_returns[i], state.episode_lengths[i] = 0.0, 0
            state.obs = torch.as_tensor(next_obs, dtype=torch.float32)
        # V(s_{t+1}) for non-final steps: the value of the next stored observation.
        last_values = value_fn(state.obs)
        following = torch.cat([val_buf[:, 1:], last_values[:, None]], dim=1)
        ended = term_buf | trunc_buf
        next_val_buf = torch.where(ended, next_val_buf, following)
    return Rollout(obs_buf, act_buf, logp_buf, rew_buf, term_buf, trunc_buf, val_buf, next_val_buf, episodes)
