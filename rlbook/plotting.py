"""Plotting helpers used across chapters. Each takes ``ax=None`` and returns the axes it drew on."""

from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np

from rlbook.history import History, rolling_mean

__all__ = ["get_ax", "plot_learning_curves", "plot_metric", "plot_bars", "plot_mc_error"]


def get_ax(ax=None, figsize=(5.0, 3.2)):
    """Return ``ax``, or a new axes on a new figure of ``figsize`` (inches) when ``ax`` is None."""
    if ax is not None:
        return ax
    import matplotlib.pyplot as plt

    _, ax = plt.subplots(figsize=figsize, dpi=80)
    return ax


def plot_learning_curves(
    histories: dict[str, Sequence[History]] | Sequence[History],
    window: int = 20,
    threshold: float | None = 475.0,
    ax=None,
    title: str | None = None,
):
    """Rolling-``window`` mean episode return against env steps, one colour per label.

    Args:
        histories: ``{label: [History, ...]}`` (one line per run, thin; the label's median-of-runs
            crossing is not drawn) or a plain list of histories labelled by index.
        window: rolling window in episodes.
        threshold: draw a dashed horizontal line there (None: no line).
    Returns:
        The matplotlib axes.
    """
    ax = get_ax(ax)
    if not isinstance(histories, dict):
        histories = {f"run {i}": [h] for i, h in enumerate(histories)}
    for k, (label, runs) in enumerate(histories.items()):
        color = f"C{k}"
        for j, h in enumerate(runs):
            if not h.episode_returns:
                continue
            ax.plot(h.episode_end_steps, rolling_mean(h.episode_returns, window), color=color,
                    alpha=0.85, lw=1.2, label=label if j == 0 else None)
    if threshold is not None:
        ax.axhline(threshold, color="k", ls="--", lw=0.8)
    ax.set_xlabel("env steps")
    ax.set_ylabel(f"return (rolling {window})")
    if title:
        ax.set_title(title)
    ax.legend(fontsize=9)
    return ax


def plot_metric(history: History, key: str, ax=None, smooth: int = 1, label: str | None = None):
    """Plot one logged per-update metric (optionally smoothed with a trailing mean)."""
    ax = get_ax(ax)
    y = history[key]
    ax.plot(np.arange(len(y)), rolling_mean(y, smooth) if smooth > 1 else y, label=label or key)
    ax.set_xlabel("update")
    ax.set_ylabel(key)
    return ax


def plot_bars(values: dict[str, float], ax=None, log: bool = False, ylabel: str = "", errors: dict[str, float] | None = None):
    """Bar chart of ``{label: value}`` (optional error bars and log scale)."""
    ax = get_ax(ax)
    labels = list(values)
    yerr = [errors[k] for k in labels] if errors else None
    ax.bar(range(len(labels)), [values[k] for k in labels], yerr=yerr, color=[f"C{i}" for i in range(len(labels))])
    ax.set_xticks(range(len(labels)), labels, rotation=15, fontsize=9)
    if log:
        ax.set_yscale("log")
    ax.set_ylabel(ylabel)
    return ax


def plot_mc_error(sample_sizes: Iterable[int], errors: Iterable[float], ax=None, label: str = "measured"):
    """Log-log plot of a Monte Carlo error against sample size N, with a 1/√N reference line."""
    ax = get_ax(ax)
    n = np.asarray(list(sample_sizes), dtype=float)
    e = np.asarray(list(errors), dtype=float)
    ax.loglog(n, e, "o-", label=label)
    ax.loglog(n, e[0] * np.sqrt(n[0] / n), "k--", lw=0.8, label=r"$\propto 1/\sqrt{N}$")
    ax.set_xlabel("samples N")
    ax.set_ylabel("error")
    ax.legend(fontsize=9)
    return ax
