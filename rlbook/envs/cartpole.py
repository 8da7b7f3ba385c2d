"""CartPole-v1 helpers for Part I: seeded batches of whole episodes, and episode statistics.

REINFORCE needs *complete* episodes collected by *one* policy. :class:`EpisodeBatcher` keeps
``num_envs`` gymnasium ``CartPole-v1`` environments, runs them in lock-step (one batched policy
forward per time step) until each has finished one episode, and steps only the environments that
are still running, so the env-step count is exact: no step is taken and thrown away, and there is
no autoreset to get wrong (gymnasium 1.x vector envs autoreset on the step after termination by
default, a frequent source of mixed-up episodes).

Seeding: environment ``i`` is reset with ``seed + i`` the first time and continues its own RNG
afterwards, so a run is reproducible from one integer.

Reward convention: ``rewards[:, t]`` follows ``actions[:, t]`` (CartPole pays +1 per step taken).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import gymnasium as gym
import numpy as np
import torch

from rlbook import _checks

__all__ = ["EpisodeBatch", "EpisodeBatcher", "make_cartpole", "random_policy_returns", "episode_statistics"]

CARTPOLE_MAX_STEPS = 500


def make_cartpole(seed: int | None = None, render_mode: str | None = None) -> gym.Env:
    """Create ``CartPole-v1`` (500-step time limit) and, if ``seed`` is given, reset it with it.

    Source: Barto, Sutton & Anderson 1983; gymnasium's ``CartPole-v1``.
    """
    env = gym.make("CartPole-v1", render_mode=render_mode)
    if seed is not None:
        env.reset(seed=int(seed))
        env.action_space.seed(int(seed))
    return env


@dataclass
class EpisodeBatch:
    """A batch of N complete episodes, padded to the longest one (length T).

    Attributes:
        obs: (N, T, 4) float32 observations s_t (zeros after the episode ends).
        actions: (N, T) int64 actions a_t.
        rewards: (N, T) float32 rewards r_t (reward following a_t).
        mask: (N, T) bool, True on the steps that belong to the episode.
        terminated: (N, T) bool, True on the last step if the pole fell / cart left (no bootstrap).
        truncated: (N, T) bool, True on the last step if the 500-step limit cut the episode.
        lengths: (N,) int64 episode lengths.
    """

    obs: torch.Tensor
    actions: torch.Tensor
    rewards: torch.Tensor
    mask: torch.Tensor
    terminated: torch.Tensor
    truncated: torch.Tensor
    lengths: torch.Tensor

    @property
    def episode_returns(self) -> torch.Tensor:
        """(N,) undiscounted return of each episode."""
        return (self.rewards * self.mask).sum(-1)

    @property
    def num_steps(self) -> int:
        """Total env steps in the batch (sum of lengths)."""
        return int(self.lengths.sum())

    def to(self, device: torch.device | str) -> "EpisodeBatch":
        """Move every tensor to ``device``."""
        return EpisodeBatch(**{k: getattr(self, k).to(device) for k in self.__dataclass_fields__})


class EpisodeBatcher:
    """Collects batches of complete CartPole-v1 episodes with one policy, in lock-step.

    Args:
        num_envs: N, episodes per batch (≥ 1).
        seed: base seed; env i is first reset with ``seed + i``.
        max_steps: optional cap below the env's own 500-step limit (for quick tests).
    Raises:
        ValueError: ``num_envs`` < 1 or ``max_steps`` < 1.

    Example:
        >>> batcher = EpisodeBatcher(num_envs=4, seed=0)
        >>> batch = batcher.collect(lambda obs: torch.zeros(len(obs), dtype=torch.long))
        >>> batch.obs.shape[0], batch.mask.dtype
        (4, torch.bool)
    """

    def __init__(self, num_envs: int, seed: int = 0, max_steps: int | None = None):
        if int(num_envs) < 1:
            raise ValueError(f"`num_envs` must be a positive integer; got {num_envs}")
        if max_steps is not None and int(max_steps) < 1:
            raise ValueError(f"`max_steps` must be a positive integer or None; got {max_steps}")
        self.num_envs = int(num_envs)
        self.max_steps = CARTPOLE_MAX_STEPS if max_steps is None else int(max_steps)
        self.envs = [gym.make("CartPole-v1") for _ in range(self.num_envs)]
        self._seeds: list[int | None] = [int(seed) + i for i in range(self.num_envs)]
        self.total_steps = 0

    def collect(self, policy: Callable[[torch.Tensor], torch.Tensor]) -> EpisodeBatch:
        """Run one episode in every env with ``policy`` and return the padded batch.

        Args:
            policy: maps observations (n, 4) float32 to actions (n,) int; called once per time
                step on the envs still running. Wrap it in ``torch.no_grad()`` yourself or not:
                the observations are plain tensors either way.
        Returns:
            :class:`EpisodeBatch` with N = ``num_envs`` episodes.
        """
        n, cap = self.num_envs, self.max_steps
        obs_buf = np.zeros((n, cap, 4), dtype=np.float32)
        act_buf = np.zeros((n, cap), dtype=np.int64)
        term_buf = np.zeros((n, cap), dtype=bool)
        trunc_buf = np.zeros((n, cap), dtype=bool)
        lengths = np.zeros(n, dtype=np.int64)
        current = np.stack([self._reset(i) for i in range(n)]).astype(np.float32)
        active = np.ones(n, dtype=bool)
        for t in range(cap):
            idx = np.flatnonzero(active)
            if idx.size == 0:
                break
            actions = policy(torch.as_tensor(current[idx]))
            actions = np.asarray(torch.as_tensor(actions).detach().cpu(), dtype=np.int64).reshape(-1)
            for j, i in enumerate(idx):
                obs_buf[i, t] = current[i]
                act_buf[i, t] = actions[j]
                next_obs, _, terminated, truncated, _ = self.envs[i].step(int(actions[j]))
                truncated = truncated or (t + 1 >= cap and not terminated)
                lengths[i] += 1
                if terminated or truncated:
                    term_buf[i, t], trunc_buf[i, t] = terminated, truncated
                    active[i] = False
                else:
                    current[i] = next_obs
        self.total_steps += int(lengths.sum())
        T = int(lengths.max())
        mask = np.arange(T)[None, :] < lengths[:, None]
        return EpisodeBatch(
            obs=torch.from_numpy(obs_buf[:, :T].copy()),
            actions=torch.from_numpy(act_buf[:, :T].copy()),
            rewards=torch.from_numpy(mask.astype(np.float32)),
            mask=torch.from_numpy(mask),
            terminated=torch.from_numpy(term_buf[:, :T].copy()),
            truncated=torch.from_numpy(trunc_buf[:, :T].copy()),
            lengths=torch.from_numpy(lengths),
        )

    def _reset(self, i: int) -> np.ndarray:
        obs, _ = self.envs[i].reset(seed=self._seeds[i])
        self._seeds[i] = None  # seed once; later resets continue the env's own RNG
        return obs

    def close(self) -> None:
        """Close every environment."""
        for env in self.envs:
            env.close()


def random_policy_returns(num_episodes: int, seed: int = 0) -> np.ndarray:
    """Returns of ``num_episodes`` CartPole-v1 episodes under the uniform random policy.

    Args:
        num_episodes: ≥ 1.
        seed: seeds the environments and the action sampler.
    Returns:
        (num_episodes,) float array of undiscounted returns (= episode lengths).
    Raises:
        ValueError: ``num_episodes`` < 1.
    """
    if int(num_episodes) < 1:
        raise ValueError(f"`num_episodes` must be a positive integer; got {num_episodes}")
    gen = torch.Generator().manual_seed(int(seed))
    batcher = EpisodeBatcher(int(num_episodes), seed=int(seed))
    batch = batcher.collect(lambda obs: torch.randint(0, 2, (len(obs),), generator=gen))
    batcher.close()
    return batch.episode_returns.numpy().astype(float)


def episode_statistics(returns) -> dict[str, float]:
    """Mean, standard deviation, standard error, min, median and max of episode returns.

    Args:
        returns: (N,) episode returns, N ≥ 1.
    Returns:
        dict with keys ``mean, std, sem, min, median, max, n``.
    Raises:
        ValueError: ``returns`` is empty.
    """
    r = _checks.as_float_tensor("returns", returns, torch.float64).reshape(-1)
    _checks.check_nonempty("returns", r)
    n = r.numel()
    std = float(r.std(unbiased=True)) if n > 1 else 0.0
    return {
        "mean": float(r.mean()),
        "std": std,
        "sem": std / n**0.5,
        "min": float(r.min()),
        "median": float(r.median()),
        "max": float(r.max()),
        "n": n,
    }
