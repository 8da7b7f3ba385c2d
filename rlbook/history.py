"""``History``: what every ``train_*`` function returns.

Two kinds of record live side by side:

* per-update metrics (``loss``, ``grad_norm``, ``approx_kl``, ``reward``, ...), logged once per
  optimiser update with :meth:`History.log`;
* per-episode records for environment tasks (``episode_returns``, ``episode_lengths`` and
  ``episode_end_steps``, the cumulative env steps at which each episode finished), added with
  :meth:`History.add_episode`.

"Steps to 475" in the book is :meth:`History.steps_to_threshold`: the env step at which the mean of
the last ``window`` finished episodes first reaches the threshold (the convention of the book's
CartPole benchmarks; rl-zoo reports SB3 results the same way).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rlbook._checks import check_positive

__all__ = ["History", "rolling_mean"]


def rolling_mean(values, window: int) -> np.ndarray:
    """Trailing mean over the last ``window`` values (fewer at the start).

    Args:
        values: (N,) sequence of numbers.
        window: positive integer.
    Returns:
        (N,) float array; entry i is mean(values[max(0, i-window+1) : i+1]).
    Raises:
        ValueError: ``window`` < 1.
    """
    if int(window) < 1:
        raise ValueError(f"`window` must be a positive integer; got {window}")
    x = np.asarray(values, dtype=float)
    if x.size == 0:
        return x
    c = np.concatenate([[0.0], np.cumsum(x)])
    idx = np.arange(1, x.size + 1)
    lo = np.maximum(0, idx - int(window))
    return (c[idx] - c[lo]) / (idx - lo)


@dataclass
class History:
    """Training record returned by every ``train_*`` function.

    Attributes:
        metrics: name -> list of per-update values (floats).
        episode_returns: undiscounted return of each finished episode, in finishing order.
        episode_lengths: length (env steps) of each finished episode.
        episode_end_steps: cumulative env steps (all envs) when each episode finished.
        config: the config object the run used (for the record).
        wall_seconds: wall-clock time of the run, set by the trainer.
        series: name -> list of per-update 1-D arrays (a distribution per update, e.g.
            ``entropy_by_position``), logged with :meth:`log_series`; ``history[name]`` stacks them.
    """

    metrics: dict[str, list[float]] = field(default_factory=dict)
    episode_returns: list[float] = field(default_factory=list)
    episode_lengths: list[int] = field(default_factory=list)
    episode_end_steps: list[int] = field(default_factory=list)
    config: Any = None
    wall_seconds: float = 0.0
    series: dict[str, list[np.ndarray]] = field(default_factory=dict)

    def log_series(self, **values) -> None:
        """Append one 1-D array per series name (tensors are converted to float arrays on the CPU).

        Raises:
            ValueError: a value is not one-dimensional.
        """
        for key, value in values.items():
            if hasattr(value, "detach"):
                value = value.detach().cpu()
            arr = np.asarray(value, dtype=float)
            if arr.ndim != 1:
                raise ValueError(f"series `{key}` takes one-dimensional values; got shape {arr.shape}")
            self.series.setdefault(key, []).append(arr)

    def log(self, **values: float) -> None:
        """Append one value per metric name (floats; tensors are converted with ``float``)."""
        for key, value in values.items():
            self.metrics.setdefault(key, []).append(float(value))

    def add_episode(self, episode_return: float, length: int, env_step: int) -> None:
        """Record a finished episode (its return, its length, the global env step it ended at)."""
        self.episode_returns.append(float(episode_return))
        self.episode_lengths.append(int(length))
        self.episode_end_steps.append(int(env_step))

    def __getitem__(self, key: str) -> np.ndarray:
        if key in self.metrics:
            return np.asarray(self.metrics[key], dtype=float)
        if key in self.series:  # (updates, width), NaN-padded to the widest entry
            rows = self.series[key]
            out = np.full((len(rows), max((r.size for r in rows), default=0)), np.nan)
            for i, r in enumerate(rows):
                out[i, : r.size] = r
            return out
        if key in ("episode_returns", "episode_lengths", "episode_end_steps"):
            return np.asarray(getattr(self, key), dtype=float)
        raise KeyError(f"no metric {key!r}; logged metrics: {sorted(self.metrics)}, series: {sorted(self.series)}")

    def __contains__(self, key: str) -> bool:
        return key in self.metrics or key in self.series

    @property
    def num_updates(self) -> int:
        """Number of logged updates (length of the longest metric list)."""
        return max((len(v) for v in self.metrics.values()), default=0)

    @property
    def env_steps(self) -> int:
        """Total env steps seen by the last recorded episode (0 if none)."""
        return self.episode_end_steps[-1] if self.episode_end_steps else 0

    def rolling_returns(self, window: int = 20) -> np.ndarray:
        """(num_episodes,) trailing mean of the last ``window`` episode returns."""
        return rolling_mean(self.episode_returns, window)

    def steps_to_threshold(self, threshold: float = 475.0, window: int = 20) -> int | None:
        """Env steps at which the rolling-``window`` mean return first reaches ``threshold``.

        Only windows holding ``window`` full episodes count. Returns ``None`` if never reached.

        Raises:
            ValueError: ``window`` < 1.
        """
        check_positive("window", window)
        r = self.rolling_returns(window)
        for i in range(int(window) - 1, len(r)):
            if r[i] >= threshold:
                return self.episode_end_steps[i]
        return None

    def final_rolling_return(self, window: int = 20) -> float:
        """Mean return of the last ``window`` episodes (NaN if no episode finished)."""
        if not self.episode_returns:
            return float("nan")
        return float(np.mean(self.episode_returns[-int(window):]))

    def summary(self) -> dict[str, float]:
        """Last value of every metric, plus episode statistics when there are episodes."""
        out = {k: v[-1] for k, v in self.metrics.items() if v}
        if self.episode_returns:
            out["episodes"] = len(self.episode_returns)
            out["env_steps"] = self.env_steps
            out["final_rolling20_return"] = self.final_rolling_return(20)
        return out
