"""GAE-λ explorer: squared bias and variance of the λ-return against the exact Q^π, as λ, γ and the critic's error move.

The MDP is chapter 4's (§4.6): a random 6-state, 3-action ``TabularMDP`` whose every step ends the
episode with probability 3%, a fixed softmax policy, and a critic V = V^π + σ·ε with a fixed
ε(s) ∼ N(0, 1). GAE's return R̂^λ_0 = Â^λ_0 + V(s_0) (Schulman et al. 2016, arXiv:1506.02438, eq. 16)
estimates Q^π(s_0, a_0). Here its bias and variance are *exact*, not simulated: the λ-return obeys

    R^λ_t = r_t + γ[(1 − λ) V(s_{t+1}) + λ R^λ_{t+1}]      (0 after a terminal state)

so, with rewards r(s, a) deterministic, its conditional mean M(s, a) and second moment M₂(s, a)
solve two linear systems (one Bellman equation each):

    M  = r + γ P[(1 − λ)V + λ Π M]
    M₂ = P[c²] + 2γλ P[c · Π M] + γ²λ² P[Π M₂],   c(s, a, s') = r(s, a) + γ(1 − λ)V(s')

(P averages over s' ∼ P(·|s, a), Π over a' ∼ π(·|s')). Episodes run until they terminate (no
truncation). Bias² and variance are averaged over the first pair (s_0, a_0) ∼ d₀·π. The test suite
checks all of it against Monte Carlo rollouts scored by the library's ``rl.gae``.

The pure functions do the computing (and are tested); :func:`gae_explorer` only wires sliders to
:func:`plot_gae_tradeoff` and :func:`gae_readout`. ipywidgets is imported when the widget is built.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
import torch

from rlbook.envs.tabular import TabularMDP
from rlbook.plotting import get_ax

__all__ = ["GAEProblem", "chapter4_problem", "gae_moments", "gae_tradeoff", "plot_gae_tradeoff", "gae_readout",
           "gae_explorer"]


@dataclass(frozen=True)
class GAEProblem:
    """One evaluation problem: the MDP (with its γ), the policy, the exact values and a critic.

    Attributes:
        mdp: the ``TabularMDP`` (S states, the last one terminal).
        probs: (S, A) policy probabilities.
        q_true: (S, A) exact Q^π (0 at the terminal state).
        v_true: (S,) exact V^π.
        critic: (S,) the critic's values, V^π + σ·ε (0 at the terminal state).
        weights: (S, A) the distribution of the first pair, d₀(s)·π(a|s).
    """

    mdp: TabularMDP
    probs: torch.Tensor
    q_true: torch.Tensor
    v_true: torch.Tensor
    critic: torch.Tensor
    weights: torch.Tensor


def _check_unit(value, name: str, low: float, high: float, *, open_high: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{name}: expected a number, got {value!r}")
    if not (low <= value < high if open_high else low <= value <= high):
        raise ValueError(f"{name}: expected {low} ≤ {name} {'<' if open_high else '≤'} {high}, got {value}")
    return float(value)


@functools.lru_cache(maxsize=32)
def chapter4_problem(gamma: float = 0.95, critic_error: float = 2.0) -> GAEProblem:
    """Chapter 4's MDP (§4.6) at discount ``gamma``, its policy, and a critic off by ``critic_error``·ε.

    Built exactly as in §4.6: ``TabularMDP.random(6, 3, seed=0)``, every step moving to a terminal
    seventh state with probability 0.03; policy softmax of a seeded (7, 3) float64 normal draw; ε from
    a seeded float64 normal draw (seed 3), ε = 0 at the terminal state. Cached (do not mutate the result).

    Raises:
        ValueError: ``gamma`` outside [0, 1); ``critic_error`` outside [0, 100].
    """
    gamma = _check_unit(gamma, "gamma", 0.0, 1.0, open_high=True)
    critic_error = _check_unit(critic_error, "critic_error", 0.0, 100.0)
    base = TabularMDP.random(6, 3, gamma=0.95, horizon=None, seed=0)
    S, A = 7, 3
    P = torch.zeros(S, A, S, dtype=torch.float64)
    P[:6, :, :6] = 0.97 * base.transitions
    P[:6, :, 6] = 0.03
    P[6, :, 6] = 1.0
    R = torch.zeros(S, A, dtype=torch.float64)
    R[:6] = base.rewards
    mdp = TabularMDP(P, R, torch.cat([base.initial_dist, torch.zeros(1, dtype=base.initial_dist.dtype)]),
                     gamma=gamma, horizon=None, terminal=torch.arange(S) == 6)
    probs = torch.softmax(torch.randn(S, A, generator=torch.Generator().manual_seed(1), dtype=torch.float64), -1)
    v_true, q_true = mdp.state_values(probs), mdp.action_values(probs)
    eps = torch.randn(S, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    eps[6] = 0.0
    critic = v_true + critic_error * eps
    weights = mdp.initial_dist[:, None] * probs
    return GAEProblem(mdp, probs, q_true, v_true, critic, weights)


def gae_moments(problem: GAEProblem, gae_lambda: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact conditional mean and variance of the λ-return R̂^λ_0 given the first pair (s_0, a_0).

    The λ-return of Schulman et al. (2016), "High-Dimensional Continuous Control Using Generalized
    Advantage Estimation", arXiv:1506.02438, eq. 16 (as a Bellman recursion: Sutton & Barto 2018, §12.1).

    Returns:
        ``(mean, variance)``, each (S, A) float64; 0 at the terminal state. The estimate of the
        advantage, Â^λ_0 = R̂^λ_0 − V(s_0), has the same variance and a mean shifted by V(s_0).
    Raises:
        ValueError: ``gae_lambda`` outside [0, 1].
    """
    lam = _check_unit(gae_lambda, "gae_lambda", 0.0, 1.0)
    mdp, pi, V = problem.mdp, problem.probs, problem.critic
    gamma = mdp.gamma
    live = (~mdp.terminal).double()
    P = mdp.transitions * live[:, None, None] * live[None, None, :]  # (S, A, S'), into live states only
    R = mdp.rewards * live[:, None]
    S, A = R.shape
    V = V * live
    # T maps M (S, A) to P[Π M] (S, A): a (SA, SA) matrix
    T = (P[:, :, :, None] * pi[None, None, :, :]).reshape(S * A, S * A)
    eye = torch.eye(S * A, dtype=torch.float64)
    # M = r + γ(1−λ) P V + γλ T M; the transitions into the terminal state carry nothing
    mean = torch.linalg.solve(eye - gamma * lam * T, (R + gamma * (1 - lam) * (P @ V)).reshape(-1)).reshape(S, A)
    c = R[:, :, None] + gamma * (1 - lam) * V[None, None, :]  # (S, A, S')
    p_term = 1.0 - P.sum(-1)  # probability of ending (reward r and nothing after)
    m_next = (pi * mean).sum(-1)  # (S',)
    rhs = (P * c ** 2).sum(-1) + p_term * R ** 2 + 2 * gamma * lam * (P * c * m_next[None, None, :]).sum(-1)
    second = torch.linalg.solve(eye - gamma ** 2 * lam ** 2 * T, rhs.reshape(-1)).reshape(S, A)
    variance = (second - mean ** 2).clamp_min(0.0) * live[:, None]
    return mean * live[:, None], variance


def gae_tradeoff(gamma: float = 0.95, critic_error: float = 2.0, num_points: int = 51) -> dict:
    """Squared bias, variance and MSE of R̂^λ_0 as estimates of Q^π(s_0, a_0), on a grid of λ.

    bias² = Σ w (M − Q^π)², variance = Σ w Var, w = d₀(s)·π(a|s) (the bias–variance trade-off of
    Schulman et al. 2016, arXiv:1506.02438, §3, computed exactly by :func:`gae_moments`).

    Returns:
        a dict of arrays of shape ``(num_points,)``: ``lambda`` (0 … 1), ``bias2``, ``variance``,
        ``mse`` (cached; do not mutate).
    Raises:
        ValueError: as :func:`chapter4_problem`; ``num_points`` < 2.
    """
    if isinstance(num_points, bool) or not isinstance(num_points, int) or num_points < 2:
        raise ValueError(f"num_points: expected an integer ≥ 2, got {num_points!r}")
    gamma = _check_unit(gamma, "gamma", 0.0, 1.0, open_high=True)
    critic_error = _check_unit(critic_error, "critic_error", 0.0, 100.0)
    return _tradeoff(gamma, critic_error, num_points)


@functools.lru_cache(maxsize=64)
def _tradeoff(gamma: float, critic_error: float, num_points: int) -> dict:
    problem = chapter4_problem(gamma, critic_error)
    lambdas = np.linspace(0.0, 1.0, num_points)
    bias2, variance = [], []
    for lam in lambdas:
        mean, var = gae_moments(problem, float(lam))
        bias2.append(float((problem.weights * (mean - problem.q_true) ** 2).sum()))
        variance.append(float((problem.weights * var).sum()))
    bias2, variance = np.array(bias2), np.array(variance)
    return {"lambda": lambdas, "bias2": bias2, "variance": variance, "mse": bias2 + variance}


def _at(curves: dict, gae_lambda: float) -> tuple[float, float, float]:
    lam = curves["lambda"]
    return tuple(float(np.interp(gae_lambda, lam, curves[k])) for k in ("bias2", "variance", "mse"))


def plot_gae_tradeoff(gae_lambda: float = 0.9, gamma: float = 0.95, critic_error: float = 2.0, ax=None):
    """Squared bias, variance and their sum (MSE) against λ, with markers at ``gae_lambda`` and at
    the λ of lowest MSE. Returns the axes.

    Raises:
        ValueError: as :func:`gae_tradeoff` and :func:`gae_moments`.
    """
    _check_unit(gae_lambda, "gae_lambda", 0.0, 1.0)
    curves = gae_tradeoff(gamma, critic_error)
    ax = get_ax(ax, figsize=(6.0, 3.6))
    lam = curves["lambda"]
    ax.plot(lam, curves["bias2"], color="C0", label="squared bias")
    ax.plot(lam, curves["variance"], color="C1", label="variance")
    ax.plot(lam, curves["mse"], color="k", lw=2, label="MSE = bias² + variance")
    b2, v, mse = _at(curves, gae_lambda)
    ax.plot([gae_lambda] * 3, [b2, v, mse], "o", color="C3", ms=6, label=f"λ = {gae_lambda:.2f}")
    best = int(np.argmin(curves["mse"]))
    ax.axvline(lam[best], color="gray", ls=":", lw=1, label=f"lowest MSE at λ = {lam[best]:.2f}")
    ax.set_xlabel("GAE λ")
    ax.set_ylabel("squared error of the estimate of Q(s₀, a₀)")
    ax.set_title(f"γ = {gamma:.3g}, critic error σ = {critic_error:.3g}: exact, not sampled", fontsize=9)
    ax.set_ylim(0.0, max(float(curves["mse"].max()), 1e-3) * 1.08)  # γ = 0: all 0, not float noise blown up
    ax.legend(fontsize=9)
    return ax


def gae_readout(gae_lambda: float = 0.9, gamma: float = 0.95, critic_error: float = 2.0) -> tuple[str, list[str]]:
    """The explorer's numbers and warnings at one setting (text; pure, tested).

    Returns:
        (readout, warnings): bias², variance and MSE at λ, at λ = 0 and λ = 1, and the λ of lowest MSE
        on the grid. Warnings for the degenerate settings: γ = 0 (every estimate is r₀ whatever λ:
        no bias, no variance, nothing to trade) and σ = 0 (the exact critic: every λ is unbiased).
    Raises:
        ValueError: as :func:`gae_tradeoff` and :func:`gae_moments`.
    """
    _check_unit(gae_lambda, "gae_lambda", 0.0, 1.0)
    curves = gae_tradeoff(gamma, critic_error)
    best = int(np.argmin(curves["mse"]))
    lines = ["          bias²    variance   MSE"]
    for label, lam in ((f"λ = {gae_lambda:.2f}", gae_lambda), ("λ = 0", 0.0), ("λ = 1", 1.0)):
        b2, v, mse = _at(curves, lam)
        lines.append(f"{label:9s} {b2:7.3f}  {v:8.3f}  {mse:7.3f}")
    lines.append(f"lowest MSE {curves['mse'][best]:.3f} at λ = {curves['lambda'][best]:.2f}")
    warnings = []
    if float(gamma) == 0.0:
        warnings.append("γ = 0: only the immediate reward counts, so every λ gives the same estimate r₀ of "
                        "Q(s₀, a₀) = r(s₀, a₀), exact and noiseless: there is no bias or variance to trade; raise γ")
    elif float(critic_error) == 0.0:
        warnings.append("σ = 0: the critic is exact, so every λ is unbiased and only the variance changes "
                        "(λ = 0 is then best); raise σ to see the trade-off")
    return "\n".join(lines), warnings


def gae_explorer():
    """Interactive explorer: sliders for λ (first), γ and the critic's error σ; redraws
    :func:`plot_gae_tradeoff` and prints :func:`gae_readout`. Needs ipywidgets (imported here).
    γ = 0 is allowed and explained with a "⚠" line.

    Returns:
        an ``ipywidgets.VBox`` (display it in a notebook); see :func:`rlbook.widgets._live.live_explorer`.
    """
    import ipywidgets as widgets
    import matplotlib.pyplot as plt

    from rlbook.widgets._live import Frame, live_explorer

    style = {"description_width": "initial"}
    controls = {
        "gae_lambda": widgets.FloatSlider(value=0.9, min=0.0, max=1.0, step=0.01, description="λ", style=style),
        "gamma": widgets.FloatSlider(value=0.95, min=0.0, max=0.99, step=0.01, description="γ", style=style),
        "critic_error": widgets.FloatSlider(value=2.0, min=0.0, max=5.0, step=0.1, description="σ (critic error)",
                                            style=style),
    }

    def render(gae_lambda, gamma, critic_error):
        readout, warnings = gae_readout(gae_lambda, gamma, critic_error)
        fig, ax = plt.subplots(figsize=(6.0, 3.6), dpi=80)
        plot_gae_tradeoff(gae_lambda, gamma, critic_error, ax=ax)
        fig.tight_layout()
        return Frame(fig, readout, warnings)

    box = live_explorer(controls, [["gae_lambda", "gamma", "critic_error"]], render)
    box.redraw()
    return box
