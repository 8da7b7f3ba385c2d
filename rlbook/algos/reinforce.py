"""REINFORCE on CartPole-v1, in the order the book teaches it.

One update = collect ``episodes_per_batch`` complete episodes with the current policy, weight each
log-probability by a return (``return_kind``) minus a baseline (``baseline``), and take one Adam
step on the surrogate  L(θ) = −(1/N) Σ_i Σ_t log π_θ(a_t|s_t) · (w_t − b_t).

Switches (orthogonal, as the chapter compares them):

* ``return_kind="total"``: w_t = R(τ) for every t (the score-function estimator as derived);
  ``"rewards_to_go"``: w_t = Σ_{t'≥t} γ^{t'−t} r_{t'} (causality: an action cannot change the past).
* ``baseline``: ``"none"``; ``"mean"`` (batch mean of the weights); ``"optimal"`` (the constant
  that minimises the estimator's variance, from per-episode gradients); ``"value"`` (a learned
  V_φ(s_t), fitted to the rewards-to-go by regression after each update).
* ``normalize_advantages``: divide (w − b) by its batch standard deviation (a per-batch step-size
  rescaling; common in practice, not part of the estimator's theory).

Source: Williams 1992 (REINFORCE); Achiam 2018, *Spinning Up in Deep RL* ("Vanilla Policy
Gradient"); Greensmith, Bartlett &
Baxter 2004 (variance-optimal baseline).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Literal

import torch
from torch import nn
from torch.func import functional_call, grad, vmap
from tqdm.auto import tqdm

from rlbook import _checks
from rlbook.algos._progress import close_progress
from rlbook.config import get_device
from rlbook.envs.cartpole import EpisodeBatch, EpisodeBatcher
from rlbook.history import History
from rlbook.nets import mlp
from rlbook.policy_gradient import mean_baseline, optimal_baseline, reinforce_loss
from rlbook.returns import discounted_returns, rewards_to_go

__all__ = [
    "ReinforceConfig",
    "CategoricalMLPPolicy",
    "train_reinforce",
    "reinforce_weights",
    "episode_gradients",
    "baseline_values",
    "fit_value_function",
    "gradient_variance",
]

RETURN_KINDS = ("total", "rewards_to_go")
BASELINES = ("none", "mean", "optimal", "value")


@dataclass
class ReinforceConfig:
    """Settings of :func:`train_reinforce`. The defaults are the book's default variant (chapter 3).

    Over seeds 0–9 (``benchmarks/cartpole_reinforce.py``), the defaults reach a rolling-20 return of
    475 after a median of 36.2k env steps; ``episodes_per_batch=1`` (picked on seeds 100–109 with
    ``benchmarks/cartpole_sweep.py``) after 19.8k, fewer on each of the ten seeds, with no difference
    detected in how far the return dips in the 30k steps after (lowest 239 against 374). Eight
    episodes stay the default: chapter 3 compares its estimators and baselines on batches of eight.

    Attributes:
        seed: seeds torch (network init, action sampling) and the environments.
        episodes_per_batch: N, complete episodes per policy update.
        total_env_steps: stop after this many env steps (summed over episodes).
        return_kind: ``"total"`` or ``"rewards_to_go"``.
        baseline: ``"none"``, ``"mean"``, ``"optimal"`` or ``"value"``.
        gamma: discount γ ∈ [0, 1] used in the weights (CartPole's score is undiscounted).
        lr: Adam learning rate of the policy.
        hidden_sizes: hidden widths of the policy MLP (tanh).
        value_lr, value_epochs: Adam learning rate and full-batch steps of the value baseline.
        normalize_advantages: divide the weights by their batch std after the baseline.
        max_grad_norm: clip the policy gradient norm (None: no clipping).
        stop_at_return: stop once the rolling-20 mean return reaches this (None: never).
        device: ``None`` picks CUDA when available.
    """

    seed: int = 0
    episodes_per_batch: int = 8
    total_env_steps: int = 100_000
    return_kind: Literal["total", "rewards_to_go"] = "rewards_to_go"
    baseline: Literal["none", "mean", "optimal", "value"] = "value"
    gamma: float = 0.99
    lr: float = 2e-2
    hidden_sizes: tuple[int, ...] = (64,)
    value_lr: float = 1e-2
    value_epochs: int = 20
    normalize_advantages: bool = True
    max_grad_norm: float | None = None
    stop_at_return: float | None = None
    device: str | None = None

    def __post_init__(self):
        if self.return_kind not in RETURN_KINDS:
            raise ValueError(f"`return_kind` must be one of {RETURN_KINDS}; got {self.return_kind!r}")
        if self.baseline not in BASELINES:
            raise ValueError(f"`baseline` must be one of {BASELINES}; got {self.baseline!r}")
        _checks.check_in_range("gamma", self.gamma, 0.0, 1.0)
        _checks.check_positive("lr", self.lr)
        _checks.check_positive("episodes_per_batch", self.episodes_per_batch)
        _checks.check_positive("total_env_steps", self.total_env_steps)


class CategoricalMLPPolicy(nn.Module):
    """π_θ(a|s) = softmax(MLP_θ(s)) over discrete actions.

    Args:
        obs_dim, num_actions: input size and number of actions.
        hidden_sizes: hidden widths (tanh activations).
    """

    def __init__(self, obs_dim: int = 4, num_actions: int = 2, hidden_sizes: tuple[int, ...] = (64,)):
        super().__init__()
        self.net = mlp((obs_dim, *hidden_sizes, num_actions))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Logits (..., A) for observations (..., obs_dim)."""
        return self.net(obs)

    def log_prob(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """log π_θ(a|s), shape (...,) for obs (..., obs_dim) and actions (...,)."""
        logp = torch.log_softmax(self.net(obs).float(), dim=-1)
        return logp.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)

    @torch.no_grad()
    def act(self, obs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """Sample actions (n,) for observations (n, obs_dim)."""
        probs = torch.softmax(self.net(obs.to(self._device)).float(), dim=-1)
        return torch.multinomial(probs.cpu(), 1, generator=generator).squeeze(-1)

    @property
    def _device(self) -> torch.device:
        return next(self.parameters()).device


def reinforce_weights(batch: EpisodeBatch, return_kind: str, gamma: float) -> torch.Tensor:
    """The per-step weights w_t before any baseline, shape (N, T), zero on padding.

    ``"total"``: R(τ) at every step (discounted with ``gamma`` from the episode start);
    ``"rewards_to_go"``: Σ_{t'≥t} γ^{t'−t} r_{t'}.

    Source: book eqs. (1.3), (1.5), (3.1); Williams 1992; Sutton & Barto 2018, §13.3.

    Args:
        batch: N padded episodes (:class:`~rlbook.envs.cartpole.EpisodeBatch`).
        return_kind: ``"total"`` or ``"rewards_to_go"``.
        gamma: discount in [0, 1].
    Returns:
        (N, T) weights, no gradient (rewards are data).
    Raises:
        ValueError: unknown ``return_kind``; ``gamma`` outside [0, 1].
    """
    if return_kind not in RETURN_KINDS:
        raise ValueError(f"`return_kind` must be one of {RETURN_KINDS}; got {return_kind!r}")
    fn = discounted_returns if return_kind == "total" else rewards_to_go
    done_kwargs = dict(terminated=batch.terminated, truncated=batch.truncated)
    return fn(batch.rewards, gamma, **done_kwargs) * batch.mask


def episode_gradients(policy: nn.Module, batch: EpisodeBatch, weights: torch.Tensor | None = None) -> torch.Tensor:
    """Per-episode policy-gradient estimates g_i = Σ_t ∇_θ log π_θ(a_t|s_t) · w_t, flattened.

    Args:
        policy: a :class:`CategoricalMLPPolicy` (any module with ``log_prob(obs, actions)``).
        batch: N episodes.
        weights: (N, T) weights (w_t − b_t); ``None`` gives the plain score Σ_t ∇ log π.
    Returns:
        (N, P) tensor, P = number of policy parameters, in ``named_parameters`` order, on the
        device of ``batch`` (computed on the policy's device: the batch and weights move there
        once). Computed with ``torch.func`` (vmap of grad); the policy's own ``.grad`` fields are
        untouched.
    Source: the single-episode score-function estimator, book eq. (2.5) / (3.4).
    """
    params = {k: v.detach() for k, v in policy.named_parameters()}
    out_device, device = batch.obs.device, next(iter(params.values())).device
    w = torch.ones_like(batch.rewards) if weights is None else weights.detach()
    batch, w = batch.to(device), w.to(device)  # no copy when already there (the CPU book)

    def episode_objective(p, obs, actions, mask, wt):
        logits = functional_call(policy, p, (obs,))
        logp = torch.log_softmax(logits, -1).gather(-1, actions.unsqueeze(-1)).squeeze(-1)
        return (logp * wt * mask).sum()

    grads = vmap(grad(episode_objective), in_dims=(None, 0, 0, 0, 0))(
        params, batch.obs, batch.actions, batch.mask.float(), w
    )
    return torch.cat([g.reshape(g.shape[0], -1) for g in grads.values()], dim=1).to(out_device)


def baseline_values(
    kind: str,
    weights: torch.Tensor,
    batch: EpisodeBatch,
    policy: nn.Module | None = None,
    value_fn: nn.Module | None = None,
) -> torch.Tensor:
    """The baseline b_t for each step, shape (N, T) (broadcast from a scalar where constant).

    ``"none"``: 0. ``"mean"``: the masked batch mean of the weights. ``"optimal"``: the constant
    b* = Σ_i u_i·v_i / Σ_i ‖u_i‖², with u_i = Σ_t ∇log π_t and v_i = Σ_t ∇log π_t w_t, which
    minimises E‖Σ_t ∇log π_t (w_t − b)‖² (for ``"total"`` weights it is E[‖u‖² R]/E[‖u‖²]).
    ``"value"``: V_φ(s_t) from ``value_fn``.

    Source: book eqs. (3.4), (3.5); Greensmith, Bartlett & Baxter 2004 (optimal baseline).

    Args:
        kind: ``"none" | "mean" | "optimal" | "value"``.
        weights: (N, T) weights w_t; batch: the episodes they belong to.
    Returns:
        (N, T) baseline values, no gradient, on the device of ``weights`` (``policy`` and
        ``value_fn`` may live elsewhere: their outputs move there).

    Raises:
        ValueError: unknown ``kind``, or the module it needs is missing.
    """
    if kind == "none":
        return torch.zeros_like(weights)
    if kind == "mean":
        return mean_baseline(weights, batch.mask).expand_as(weights)
    if kind == "optimal":
        if policy is None:
            raise ValueError("`policy` is required for the optimal baseline")
        u = episode_gradients(policy, batch)
        v = episode_gradients(policy, batch, weights)
        sq = (u * u).sum(-1)
        effective = (u * v).sum(-1) / sq.clamp_min(1e-12)  # R_eff_i with u_i·v_i = ‖u_i‖² R_eff_i
        return optimal_baseline(effective, sq).expand_as(weights)
    if kind == "value":
        if value_fn is None:
            raise ValueError("`value_fn` is required for the value baseline")
        with torch.no_grad():
            values = value_fn(batch.obs.to(next(value_fn.parameters()).device)).squeeze(-1)
            return values.to(weights.device) * batch.mask.to(weights.device)
    raise ValueError(f"`kind` must be one of {BASELINES}; got {kind!r}")


def gradient_variance(
    policy: nn.Module,
    batch: EpisodeBatch,
    return_kind: str,
    baseline: str,
    gamma: float = 1.0,
    value_fn: nn.Module | None = None,
) -> dict[str, float]:
    """Measure the single-episode gradient estimator: its mean norm and its total variance.

    For each episode i, g_i = Σ_t ∇log π(a_t|s_t)(w_t − b_t); returns
    ``variance`` = (1/(N−1)) Σ_i ‖g_i − ḡ‖² (trace of the covariance, per episode) and
    ``mean_sq_norm`` = ‖ḡ‖². The baseline is computed from the same batch (for "mean" and
    "optimal" this adds an O(1/N) bias the chapter discusses).

    Args:
        policy, batch: as in :func:`episode_gradients`; ``return_kind``, ``baseline`` and
            ``gamma`` as in :class:`ReinforceConfig`; ``value_fn`` for the value baseline.
    Returns:
        dict with ``variance`` and ``mean_sq_norm`` (units: squared gradient norm).
    Source: book section 3.5.

    Raises:
        ValueError: fewer than 2 episodes.
    """
    if batch.obs.shape[0] < 2:
        raise ValueError(f"`batch` must hold at least 2 episodes to measure a variance; got {batch.obs.shape[0]}")
    weights = reinforce_weights(batch, return_kind, gamma)
    b = baseline_values(baseline, weights, batch, policy=policy, value_fn=value_fn)
    g = episode_gradients(policy, batch, (weights - b) * batch.mask)
    g_bar = g.mean(0)
    var = ((g - g_bar) ** 2).sum(-1).sum() / (g.shape[0] - 1)
    return {"variance": float(var), "mean_sq_norm": float((g_bar**2).sum())}


def _fit_value(value_fn: nn.Module, opt: torch.optim.Optimizer, batch: EpisodeBatch, targets: torch.Tensor, epochs: int) -> float:
    """Regress V_φ(s_t) on the targets over the valid steps (full batch, ``epochs`` Adam steps)."""
    obs, tgt = batch.obs[batch.mask], targets[batch.mask]
    loss = torch.zeros((), device=obs.device)
    for _ in range(epochs):
        loss = 0.5 * (value_fn(obs).squeeze(-1) - tgt).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return float(loss.detach())


def fit_value_function(
    batch: EpisodeBatch,
    gamma: float = 1.0,
    epochs: int = 300,
    lr: float = 1e-2,
    hidden_sizes: tuple[int, ...] = (64,),
    seed: int = 0,
) -> nn.Module:
    """Fit a fresh V_φ(s) to the rewards-to-go of ``batch`` by full-batch regression.

    Args:
        batch: episodes of the policy whose value is wanted.
        gamma: discount of the rewards-to-go targets, in [0, 1].
        epochs: Adam steps (≥ 1); lr: learning rate; hidden_sizes: MLP widths (tanh).
        seed: seeds the network initialisation.
    Returns:
        A module mapping observations (..., 4) to values (..., 1), on the device of ``batch``
        (initialised on the CPU from ``seed``, then moved, so the same seed gives the same start).
    Raises:
        ValueError: ``gamma`` outside [0, 1] or ``epochs`` < 1.
    """
    _checks.check_in_range("gamma", gamma, 0.0, 1.0)
    _checks.check_positive("epochs", epochs)
    torch.manual_seed(seed)
    value_fn = mlp((batch.obs.shape[-1], *hidden_sizes, 1)).to(batch.obs.device)
    targets = rewards_to_go(batch.rewards, gamma, terminated=batch.terminated, truncated=batch.truncated)
    _fit_value(value_fn, torch.optim.Adam(value_fn.parameters(), lr=lr), batch, targets, int(epochs))
    return value_fn


def train_reinforce(config: ReinforceConfig | None = None, progress: bool = True) -> History:
    """Train a softmax MLP policy on CartPole-v1 with REINFORCE; see the module docstring.

    Args:
        config: :class:`ReinforceConfig` (defaults: the book's best variant).
        progress: show a tqdm progress bar over env steps.
    Returns:
        :class:`~rlbook.history.History` with one entry per episode (returns, lengths, the env step
        each ended at) and per update: ``loss``, ``grad_norm`` (before clipping), ``mean_return``,
        ``baseline_mean``, ``weight_std``, ``value_loss`` (value baseline only), ``env_steps``.
        ``history.policy`` holds the trained policy.
    Raises:
        ValueError: an invalid config value (named).
    """
    cfg = config or ReinforceConfig()
    device = get_device(cfg.device)
    torch.manual_seed(cfg.seed)
    policy = CategoricalMLPPolicy(hidden_sizes=tuple(cfg.hidden_sizes)).to(device)
    opt = torch.optim.Adam(policy.parameters(), lr=cfg.lr)
    value_fn = value_opt = None
    if cfg.baseline == "value":
        value_fn = mlp((4, *cfg.hidden_sizes, 1)).to(device)
        value_opt = torch.optim.Adam(value_fn.parameters(), lr=cfg.value_lr)
    gen = torch.Generator().manual_seed(cfg.seed)
    batcher = EpisodeBatcher(cfg.episodes_per_batch, seed=cfg.seed)
    hist = History(config=asdict(cfg))
    start = time.perf_counter()
    bar = tqdm(total=cfg.total_env_steps, desc="REINFORCE", unit="step", disable=not progress)
    stopped = None
    while batcher.total_steps < cfg.total_env_steps:
        batch = batcher.collect(lambda o: policy.act(o, gen)).to(device)
        for ret, length in zip(batch.episode_returns.tolist(), batch.lengths.tolist()):
            hist.add_episode(ret, length, hist.env_steps + length)
        weights = reinforce_weights(batch, cfg.return_kind, cfg.gamma)
        b = baseline_values(cfg.baseline, weights, batch, policy=policy, value_fn=value_fn)
        adv = (weights - b) * batch.mask
        if cfg.normalize_advantages:
            adv = adv / (adv[batch.mask].std() + 1e-8)
        loss = reinforce_loss(policy.log_prob(batch.obs, batch.actions), adv)
        loss = (loss * batch.mask).sum() / batch.obs.shape[0]  # Σ_t per episode, mean over episodes
        opt.zero_grad()
        loss.backward()
        max_norm = cfg.max_grad_norm if cfg.max_grad_norm is not None else float("inf")
        grad_norm = torch.nn.utils.clip_grad_norm_(policy.parameters(), max_norm)
        opt.step()
        metrics = dict(loss=loss.detach(), grad_norm=grad_norm, mean_return=batch.episode_returns.mean(),
                       baseline_mean=b[batch.mask].mean(), weight_std=weights[batch.mask].std(),
                       env_steps=batcher.total_steps)
        if value_fn is not None:
            rtg = rewards_to_go(batch.rewards, cfg.gamma, terminated=batch.terminated, truncated=batch.truncated)
            metrics["value_loss"] = _fit_value(value_fn, value_opt, batch, rtg, cfg.value_epochs)
        hist.log(**metrics)
        bar.update(batch.num_steps)
        bar.set_postfix(rolling20=f"{hist.final_rolling_return(20):.0f}")
        if cfg.stop_at_return is not None and len(hist.episode_returns) >= 20 \
                and hist.final_rolling_return(20) >= cfg.stop_at_return:
            stopped = f"stopped at {cfg.stop_at_return:g}"
            break
    close_progress(bar, stopped)
    batcher.close()
    hist.wall_seconds = time.perf_counter() - start
    hist.policy = policy
    hist.value_fn = value_fn
    return hist
