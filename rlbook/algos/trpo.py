"""TRPO with GAE on CartPole-v1: one readable training loop (book chapter 6).

One update:

1. collect a rollout with π_θold (:func:`rlbook.envs.vector.collect_rollout`);
2. advantages and value targets by GAE (:func:`rlbook.gae`), advantages standardised;
3. the policy step: g = ∇_θ mean(ρ·Â) at θold; x ≈ F⁻¹g by conjugate gradient on Fisher-vector
   products of the mean KL; s = √(2·max_kl / xᵀFx)·x; a backtracking line search on the real
   surrogate and the real mean KL(π_θold ‖ π_θ) (:mod:`rlbook.trpo`);
4. the critic: a few epochs of Adam on the value loss (the policy never sees its gradient).

Source: Schulman et al. 2015, arXiv:1502.05477 (single-path TRPO, Appendix C); GAE critic as in
Schulman et al. 2016, arXiv:1506.02438 (they fit it by a trust region too; Adam is the common
modern choice, e.g. Spinning Up's ``trpo``).
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass

import torch
from tqdm.auto import tqdm

from rlbook.advantages import gae
from rlbook.algos._progress import close_progress
from rlbook.algos.ppo import categorical_policy_fn
from rlbook.config import get_device
from rlbook.diagnostics import explained_variance
from rlbook.envs.vector import RolloutState, collect_rollout, make_cartpole_vector_env
from rlbook.history import History
from rlbook.kl import categorical_kl
from rlbook.losses import entropy_from_logits, value_loss
from rlbook.nets import ActorCritic
from rlbook.trpo import (backtracking_line_search, fisher_vector_product, flat_grad, flat_params,
                         natural_gradient_step, set_flat_params, trpo_surrogate)

__all__ = ["TRPOConfig", "train_trpo", "trpo_policy_update"]


@dataclass
class TRPOConfig:
    """Settings of :func:`train_trpo`. The defaults are the book's CartPole settings.

    Attributes:
        seed: seeds the network init, action sampling, critic minibatches and env i (seed + i).
        total_env_steps: budget of env steps (all envs together).
        num_envs, num_steps: rollout shape; batch = num_envs · num_steps transitions.
        gamma, gae_lambda: discount and GAE λ.
        max_kl: trust-region radius δ on the mean KL(π_θold ‖ π_θ), nats.
        cg_iters: conjugate-gradient iterations for F⁻¹g.
        damping: λ in (F + λI)v.
        backtrack_coef, max_backtracks, accept_ratio: line-search settings
            (:func:`rlbook.trpo.backtracking_line_search`).
        critic_lr, critic_epochs, critic_minibatch_size: the critic's Adam regression.
        norm_advantages: standardise the advantages over the batch.
        hidden_sizes, activation: of the actor and of the critic (separate MLPs).
        stop_at_return, stop_window: stop once the rolling mean return reaches ``stop_at_return``.
        device: ``None`` for :func:`rlbook.get_device`.
    """

    seed: int = 0
    total_env_steps: int = 200_000
    num_envs: int = 8
    num_steps: int = 128
    gamma: float = 0.99
    gae_lambda: float = 0.95
    max_kl: float = 0.02
    cg_iters: int = 10
    damping: float = 0.1
    backtrack_coef: float = 0.8
    max_backtracks: int = 10
    accept_ratio: float = 0.1
    critic_lr: float = 1e-3
    critic_epochs: int = 10
    critic_minibatch_size: int = 128
    norm_advantages: bool = True
    hidden_sizes: tuple[int, ...] = (64, 64)
    activation: str = "tanh"
    stop_at_return: float | None = None
    stop_window: int = 20
    device: str | None = "cpu"

    def validate(self) -> None:
        """Raise ``ValueError`` naming the first invalid field."""
        for name in ("total_env_steps", "num_envs", "num_steps", "cg_iters", "max_backtracks", "critic_epochs",
                     "critic_minibatch_size", "stop_window"):
            value = getattr(self, name)
            if int(value) != value or value < 1:
                raise ValueError(f"`{name}` must be a positive integer; got {value}")
        for name in ("gamma", "gae_lambda"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"`{name}` must be in [0, 1]; got {getattr(self, name)}")
        for name in ("max_kl", "critic_lr"):
            if getattr(self, name) <= 0:
                raise ValueError(f"`{name}` must be > 0; got {getattr(self, name)}")
        if self.damping < 0:
            raise ValueError(f"`damping` must be >= 0; got {self.damping}")


def trpo_policy_update(actor: torch.nn.Module, obs: torch.Tensor, actions: torch.Tensor, advantages: torch.Tensor,
                       cfg: TRPOConfig) -> dict[str, float]:
    """One TRPO step of ``actor`` (in place) on a batch; returns the step's diagnostics.

    Args:
        actor: module obs (B, obs_dim) -> logits (B, A).
        obs: (B, obs_dim); actions: (B,) int64; advantages: (B,) (constants).
        cfg: the :class:`TRPOConfig` (max_kl, damping, cg_iters, line-search settings).
    Returns:
        dict with ``surrogate_improvement`` (realised, accepted step), ``expected_improvement``
        (gᵀs of the full step), ``kl`` (mean KL after the step), ``step_accepted`` (0/1),
        ``backtracks``, ``policy_grad_norm`` (‖g‖), ``step_norm`` (‖s‖).
    """
    params = list(actor.parameters())
    with torch.no_grad():
        old_logits = actor(obs)
        old_log_probs = torch.log_softmax(old_logits, -1).gather(-1, actions[:, None]).squeeze(-1)

    def surrogate() -> torch.Tensor:
        log_probs = torch.log_softmax(actor(obs), -1).gather(-1, actions[:, None]).squeeze(-1)
        return trpo_surrogate(log_probs, old_log_probs, advantages).mean()

    def mean_kl() -> torch.Tensor:
        return categorical_kl(old_logits, actor(obs)).mean()

    g = flat_grad(surrogate(), params)
    step = natural_gradient_step(g, lambda v: fisher_vector_product(mean_kl, params, v, cfg.damping),
                                 cfg.max_kl, cfg.cg_iters)
    expected = float(g @ step)
    theta0 = flat_params(params)

    def at(theta, fn):
        set_flat_params(params, theta)
        return fn()

    with torch.no_grad():
        f0 = float(surrogate())
    new, accepted, backtracks = backtracking_line_search(
        lambda th: at(th, surrogate), lambda th: at(th, mean_kl), theta0, step, cfg.max_kl, expected,
        cfg.backtrack_coef, cfg.max_backtracks, cfg.accept_ratio)
    set_flat_params(params, new)
    with torch.no_grad():
        improvement, kl = float(surrogate()) - f0, float(mean_kl())
    return dict(surrogate_improvement=improvement, expected_improvement=expected, kl=kl,
                step_accepted=float(accepted), backtracks=backtracks, policy_grad_norm=float(g.norm()),
                step_norm=float(step.norm()))


def _fit_critic(model: ActorCritic, opt, obs, returns, cfg: TRPOConfig, gen: torch.Generator) -> float:
    """``critic_epochs`` shuffled passes of Adam on ½(V − R̂)²; returns the last full-batch loss."""
    n = obs.shape[0]
    for _ in range(cfg.critic_epochs):
        perm = torch.randperm(n, generator=gen)
        for lo in range(0, n, cfg.critic_minibatch_size):
            idx = perm[lo: lo + cfg.critic_minibatch_size]
            loss = value_loss(model.value(obs[idx]), returns[idx]).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    with torch.no_grad():
        return float(value_loss(model.value(obs), returns).mean())


def train_trpo(config: TRPOConfig | None = None, progress: bool = True) -> History:
    """Train a categorical actor-critic on CartPole-v1 with TRPO (natural step + line search) and GAE.

    Args:
        config: a :class:`TRPOConfig` (defaults: the book's settings).
        progress: show a tqdm progress bar over env steps.
    Returns:
        :class:`~rlbook.history.History`: every finished episode (return, length, global env
        step) and per update ``surrogate_improvement``, ``expected_improvement``, ``kl``,
        ``step_accepted``, ``backtracks``, ``policy_grad_norm``, ``step_norm``, ``value_loss``,
        ``explained_variance``, ``entropy``, ``env_steps``. ``history.model`` holds the trained
        :class:`ActorCritic`.
    Raises:
        ValueError: an invalid config field (named).
    """
    cfg = config or TRPOConfig()
    cfg.validate()
    device = get_device(cfg.device)
    torch.manual_seed(cfg.seed)
    gen = torch.Generator().manual_seed(cfg.seed)
    envs = make_cartpole_vector_env(cfg.num_envs, cfg.seed)
    state = RolloutState.start(envs, cfg.seed)
    model = ActorCritic(4, 2, cfg.hidden_sizes, cfg.activation).to(device)
    critic_opt = torch.optim.Adam(model.critic.parameters(), lr=cfg.critic_lr)
    policy_fn = categorical_policy_fn(model, gen)
    batch_size = cfg.num_envs * cfg.num_steps
    num_updates = math.ceil(cfg.total_env_steps / batch_size)
    hist = History(config=asdict(cfg))
    start = time.perf_counter()
    bar = tqdm(total=num_updates * batch_size, desc="TRPO", unit="step", disable=not progress)
    stopped = None
    for _ in range(num_updates):
        rollout = collect_rollout(state, policy_fn, model.value, cfg.num_steps)
        for ep in rollout.episodes:
            hist.add_episode(ep.episode_return, ep.length, ep.env_step)
        advantages, returns = gae(rollout.rewards, rollout.values, rollout.next_values, rollout.terminated,
                                  rollout.truncated, cfg.gamma, cfg.gae_lambda)
        obs = rollout.obs.reshape(batch_size, -1).to(device)
        actions = rollout.actions.reshape(batch_size).to(device)
        adv, ret = advantages.reshape(batch_size).to(device), returns.reshape(batch_size).to(device)
        if cfg.norm_advantages:
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        stats = trpo_policy_update(model.actor, obs, actions, adv, cfg)
        ev = explained_variance(rollout.values.reshape(batch_size), returns.reshape(batch_size))
        v_loss = _fit_critic(model, critic_opt, obs, ret, cfg, gen)
        with torch.no_grad():
            entropy = entropy_from_logits(model.logits(obs)).mean()
        hist.log(**stats, value_loss=v_loss, explained_variance=ev, entropy=entropy, env_steps=state.env_steps)
        bar.update(batch_size)
        bar.set_postfix(rolling20=f"{hist.final_rolling_return(cfg.stop_window):.0f}")
        if cfg.stop_at_return is not None and hist.steps_to_threshold(cfg.stop_at_return, cfg.stop_window) is not None:
            stopped = f"stopped at {cfg.stop_at_return:g}"
            break
    close_progress(bar, stopped)
    envs.close()
    hist.wall_seconds = time.perf_counter() - start
    hist.model = model
    return hist
