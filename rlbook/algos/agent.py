"""Training a tool-using agent on multi-turn episodes: supervised warm-up and masked GRPO (Part VII).

An episode (:class:`rlbook.envs.text.Trajectory`) interleaves the model's turns with the
environment's answers. Both trainers here score the whole episode in one forward pass (the
environment's tokens are context) and put the loss on the model's tokens only (``loss_mask``): the
gradient at every prompt, tool-output and padding position is exactly zero, and the token mean
divides by the number of model tokens.

Source: GRPO, Shao et al. 2024 (DeepSeekMath), arXiv:2402.03300, eq. 21; multi-turn masking as
TRL 1.16's ``GRPOTrainer`` (``tool_mask``) and verl's AgentLoop (``response_mask``); DAPO's token mean,
Yu et al. 2025, arXiv:2503.14476, eq. 8.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

__all__ = [
    "CREDIT_SCHEMES",
    "AgentGRPOConfig",
    "episode_token_advantages",
    "agent_grpo_step",
    "episode_log_probs",
    "evaluate_agent",
    "filter_groups",
    "multiturn_sft",
    "train_agent_grpo",
]


def episode_log_probs(model, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                      temperature: float = 1.0, return_entropy: bool = False):
    """log π_θ of every token after the first, given all the tokens before it (one forward pass).

    log_probs[b, t] = log softmax(logits(input_ids[b, ≤ t]) / τ)[input_ids[b, t + 1]]

    Args:
        model: a causal LM; ``input_ids`` (B, T) right-padded (positions start at 0 in every row).
        input_ids: (B, T) long.
        attention_mask: (B, T) bool or 0/1, False on padding.
        temperature: τ > 0 the tokens were sampled at.
        return_entropy: also return the entropy of each position's next-token distribution at τ.
    Returns:
        (B, T − 1) float32 log-probabilities, nats, with grad (position t scores token t + 1); with
        ``return_entropy``, the pair (log-probabilities, (B, T − 1) entropies in nats, detached).
    Raises:
        ValueError: shapes that do not line up, T < 2, or τ ≤ 0.
    """
    from rlbook.lm.logprobs import token_log_probs

    if input_ids.dim() != 2 or tuple(attention_mask.shape) != tuple(input_ids.shape) or input_ids.shape[1] < 2:
        raise ValueError(f"`input_ids` and `attention_mask` must both be (B, T) with T ≥ 2; got "
                         f"{tuple(input_ids.shape)} and {tuple(attention_mask.shape)}")
    if not (isinstance(temperature, (int, float)) and math.isfinite(temperature) and temperature > 0):
        raise ValueError(f"`temperature` must be a finite number > 0; got {temperature!r}")
    device = next(model.parameters()).device
    logits = model(input_ids=input_ids.to(device), attention_mask=attention_mask.to(device).long()).logits
    scaled = logits[:, :-1].float() / temperature
    log_probs = token_log_probs(scaled, input_ids[:, 1:].to(device))
    if return_entropy:
        from rlbook.losses import entropy_from_logits

        return log_probs, entropy_from_logits(scaled.detach())
    return log_probs


def multiturn_sft(model, trajectories: Sequence, num_steps: int, batch_size: int = 32, lr: float = 3e-3,
                  generator: torch.Generator | None = None, progress: bool = False) -> list[float]:
    """Supervised warm-up on demonstration episodes: cross-entropy on the model's tokens only.

    L = − Σ_{b,t} m_{b,t} log π_θ(x_{b,t+1} | x_{b,≤t}) / Σ m,   m the loss mask (model tokens)

    The tool's answers are in the context and never a target: the model learns when and how to
    call the tool and what to do with its answer, not to predict the tool.

    Args:
        model: the causal LM (trained in place; AdamW, no weight decay).
        trajectories: demonstration :class:`rlbook.envs.text.Trajectory` objects (from :func:`rlbook.rollout`
            with a scripted policy).
        num_steps: optimiser steps (≥ 1); each takes ``batch_size`` episodes drawn with replacement.
        batch_size: episodes per step (≥ 1).
        lr: AdamW learning rate (> 0).
        generator: draws the batches.
        progress: show a progress bar.
    Returns:
        The loss of each step (nats per model token).
    Raises:
        ValueError: no trajectories, or a step count, batch size or learning rate out of range.
    """
    from rlbook.envs.text import collate_trajectories

    if not trajectories:
        raise ValueError("`trajectories` must hold at least one demonstration episode")
    for name, value in (("num_steps", num_steps), ("batch_size", batch_size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"`{name}` must be an integer ≥ 1; got {value!r}")
    if not (isinstance(lr, (int, float)) and math.isfinite(lr) and lr > 0):
        raise ValueError(f"`lr` must be a finite number > 0; got {lr!r}")
    from tqdm.auto import tqdm

    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    model.train()
    losses = []
    for _ in tqdm(range(num_steps), desc="SFT on demonstrations", disable=not progress):
        rows = torch.randint(0, len(trajectories), (batch_size,), generator=generator).tolist()
        batch = collate_trajectories([trajectories[i] for i in rows])  # right padding, masked out
        log_probs = episode_log_probs(model, batch["input_ids"], batch["attention_mask"])
        mask = batch["loss_mask"][:, 1:].to(log_probs.device)
        loss = -(log_probs * mask).sum() / mask.sum().clamp(min=1)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    model.eval()
    return losses


CREDIT_SCHEMES = ("broadcast", "rebn", "gigpo")


@dataclass
class AgentGRPOConfig:
    """Settings of :func:`train_agent_grpo` (masked GRPO on multi-turn episodes).

    Attributes:
        group_size: G episodes per problem (≥ 2).
        prompts_per_step: problems per step (≥ 1); a step has G × prompts_per_step episodes.
        num_steps: optimiser steps.
        lr: AdamW learning rate.
        clip_eps_low, clip_eps_high: the ratio's clip band (1 − ε_low, 1 + ε_high).
        epochs_per_batch: optimiser steps on each sampled batch (1: on-policy, ratio 1 at the first).
        max_new_tokens: each turn's token budget.
        temperature: sampling temperature τ (the log-probabilities are scored at τ too).
        loss_aggregation: "token_mean" (DAPO: over all the batch's model tokens) or "seq_mean_token_mean".
        credit: how the episodes' rewards become each model token's advantage (chapter 17):
            "broadcast" (GRPO: the episode's group-relative advantage on every model token; γ = 1),
            "rebn" (per-turn discounted returns with ``gamma``, z-scored over all the batch's turns: GEM's
            Return Batch Normalisation) or "gigpo" (the episode-level group advantage plus ``step_weight``
            times the step-level advantage of turns taken from identical contexts: GiGPO, with the
            per-turn returns discounted by ``gamma``). See :mod:`rlbook.credit`.
        gamma: γ in [0, 1], the per-turn discount of "rebn" and "gigpo" (ignored by "broadcast").
        step_weight: ω ≥ 0, GiGPO's weight of the step-level advantage (used by "gigpo" only).
        staleness: k ≥ 0, asynchronous rollouts with a fixed lag: the episodes of step s are sampled by the
            policy of step s − k (the starting weights while s < k), as a trainer whose rollout workers run k
            steps ahead: the worst case that a staleness bound of k allows (prime-rl's
            ``max_off_policy_steps``, SkyRL's ``max_staleness_steps``). 0: on-policy.
        is_correction: how the loss reweights the model tokens of episodes a stale policy sampled: a mode of
            ``rl.IS_CORRECTION_MODES`` ("none": uncorrected; "token_truncate": TIS, w = min(π_θ/π_sampler, C),
            chapter 14), applied to the model's tokens only (the tools' tokens have no ratio).
        is_cap: C ≥ 1 of the correction.
        rollout_filter_ratio: p in (0, 1], the share of each step's groups the loss keeps: the int(p × P)
            groups with the largest in-group reward standard deviation (ties: the earlier group), the others
            dropped from the batch before the loss (so ``token_mean`` counts the kept groups' tokens only):
            RAGEN's uncertainty-based rollout filter, part of StarPO-S (Wang et al. 2025, arXiv:2504.20073,
            §4.1; p = 0.25 there). 1: every group.
        seed: seeds the sampling generator and the problems.
    """

    group_size: int = 8
    prompts_per_step: int = 8
    num_steps: int = 50
    lr: float = 1e-3
    clip_eps_low: float = 0.2
    clip_eps_high: float = 0.2
    epochs_per_batch: int = 1
    max_new_tokens: int = 12
    temperature: float = 1.0
    loss_aggregation: str = "token_mean"
    credit: str = "broadcast"
    gamma: float = 1.0
    step_weight: float = 1.0
    staleness: int = 0
    is_correction: str = "none"
    is_cap: float = 2.0
    rollout_filter_ratio: float = 1.0
    seed: int = 0

    def __post_init__(self):
        for name in ("group_size", "prompts_per_step", "num_steps", "epochs_per_batch", "max_new_tokens"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < (2 if name == "group_size" else 1):
                raise ValueError(f"`{name}` must be an integer ≥ {2 if name == 'group_size' else 1}; got {value!r}")
        for name in ("lr", "temperature"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ValueError(f"`{name}` must be a finite number > 0; got {value!r}")
        low, high = self.clip_eps_low, self.clip_eps_high
        if isinstance(low, bool) or not isinstance(low, (int, float)) or not 0 < low <= 1:
            raise ValueError(f"`clip_eps_low` must be a number in (0, 1]; got {low!r}")
        if isinstance(high, bool) or not isinstance(high, (int, float)) or not (math.isfinite(high) and high > 0):
            raise ValueError(f"`clip_eps_high` must be a finite number > 0; got {high!r}")
        if self.loss_aggregation not in ("token_mean", "seq_mean_token_mean"):
            raise ValueError(f"`loss_aggregation` must be 'token_mean' or 'seq_mean_token_mean'; got "
                             f"{self.loss_aggregation!r}")
        if self.credit not in CREDIT_SCHEMES:
            raise ValueError(f"`credit` must be one of {CREDIT_SCHEMES}; got {self.credit!r}")
        from rlbook.is_corrections import IS_CORRECTION_MODES

        if isinstance(self.staleness, bool) or not isinstance(self.staleness, int) or self.staleness < 0:
            raise ValueError(f"`staleness` must be an integer ≥ 0 (steps the sampler lags); got {self.staleness!r}")
        if self.is_correction not in IS_CORRECTION_MODES:
            raise ValueError(f"`is_correction` must be one of {IS_CORRECTION_MODES}; got {self.is_correction!r}")
        for name, low, high in (("gamma", 0.0, 1.0), ("step_weight", 0.0, math.inf), ("is_cap", 1.0, math.inf)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
                    math.isfinite(value) and low <= value <= high):
                raise ValueError(f"`{name}` must be a number in [{low}, {high}]; got {value!r}")
        ratio = self.rollout_filter_ratio
        if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0 < ratio <= 1:
            raise ValueError(f"`rollout_filter_ratio` must be a number in (0, 1]; got {ratio!r}")
        if int(ratio * self.prompts_per_step) < 1:
            raise ValueError(f"`rollout_filter_ratio` × `prompts_per_step` must keep at least one group; got "
                             f"int({ratio!r} × {self.prompts_per_step}) = 0")


def episode_token_advantages(trajectories: Sequence, group_size: int, credit: str = "broadcast",
                             gamma: float = 1.0, step_weight: float = 1.0) -> torch.Tensor:
    """Each model token's advantage under a credit scheme, for a batch of groups of episodes.

    * "broadcast" (GRPO): Â_{b,t} = (R_b − mean_group R) / (std_group R + 1e-6) on every model token
      of episode b (:func:`rlbook.group_relative_advantages`, :func:`rlbook.credit.broadcast_to_tokens`);
    * "rebn": the per-turn returns G_{b,k} = Σ_{j≥k} γ^{j−k} r_{b,j} z-scored over every turn of the
      batch (:func:`rlbook.credit.return_batch_normalisation`), each turn's value on its model tokens;
    * "gigpo": A^E_b + ω A^S_{b,k} (:func:`rlbook.credit.gigpo_advantages`, population std), the
      anchor state of turn k being the exact ids the policy was given at turn k: two turns share
      a step group when their contexts are identical token for token.

    Args:
        trajectories: B :class:`rlbook.envs.text.Trajectory` objects, group-contiguous (the
            ``group_size`` episodes of one problem consecutive).
        group_size: G ≥ 1, dividing B.
        credit: one of :data:`CREDIT_SCHEMES`.
        gamma: the per-turn discount γ in [0, 1] ("rebn", "gigpo").
        step_weight: GiGPO's ω ≥ 0.
    Returns:
        (B, T) float32 advantages aligned with :func:`rlbook.envs.text.collate_trajectories`' ``input_ids``
        (dimensionless), exactly 0 on every prompt, observation and padding token; detached.
    Raises:
        ValueError: no trajectories, an unknown ``credit``, ``group_size`` not dividing B, ``gamma``
            outside [0, 1], ``step_weight`` < 0.

    Source: Shao et al. 2024, arXiv:2402.03300, §4.1.2 (broadcast); GEM, Liu et al. 2025,
    arXiv:2510.01051 (ReBN); GiGPO, Feng et al. 2025, arXiv:2505.10978, eqs. 3–8.
    """
    from rlbook.advantages import group_relative_advantages
    from rlbook.credit import (broadcast_to_tokens, discounted_turn_returns, gigpo_advantages,
                               return_batch_normalisation, turn_values_to_tokens)
    from rlbook.envs.text import collate_trajectories

    if credit not in CREDIT_SCHEMES:
        raise ValueError(f"`credit` must be one of {CREDIT_SCHEMES}; got {credit!r}")
    batch = collate_trajectories(trajectories)
    if credit == "broadcast":
        return broadcast_to_tokens(group_relative_advantages(batch["rewards"], group_size), batch["loss_mask"])
    returns = discounted_turn_returns(batch["turn_rewards"], batch["turn_mask"], gamma)
    if credit == "rebn":
        values = return_batch_normalisation(returns, batch["turn_mask"])
    else:
        index: dict[tuple[int, ...], int] = {}
        anchors = torch.full_like(batch["turn_ids"][:, :returns.shape[1]], -1)
        for b, traj in enumerate(trajectories):
            for k, context in enumerate(traj.contexts[: traj.num_turns]):
                anchors[b, k] = index.setdefault(tuple(context), len(index))
        values = gigpo_advantages(batch["rewards"], returns, anchors, batch["turn_mask"], group_size,
                                  step_weight=step_weight)
    return turn_values_to_tokens(values, batch["turn_ids"], batch["loss_mask"])


def _episode_metrics(trajs) -> dict[str, float]:
    n = len(trajs)
    calls = [sum(i["tool_call"] for i in t.infos) for t in trajs]
    return {
        "reward": sum(t.reward for t in trajs) / n,
        # the reward without the environment's shaping (rl.ShapedRewards' info["shaping"]; the reward itself if none)
        "outcome": sum(t.reward - sum(i.get("shaping", 0.0) for i in t.infos) for t in trajs) / n,
        "call_frequency": sum(c > 0 for c in calls) / n,  # episodes that called the tool at least once
        "calls_per_episode": sum(calls) / n,
        "failure_frequency": sum(any(i["tool_failed"] for i in t.infos) for t in trajs) / n,
        "malformed_frequency": sum(any(i["malformed"] for i in t.infos) for t in trajs) / n,
        "turns_per_episode": sum(t.num_turns for t in trajs) / n,
        "truncated_frequency": sum(t.truncated for t in trajs) / n,
    }


def agent_grpo_step(model, optimizer, make_env: Callable[[], object], problem_seeds: Sequence[int],
                    config: AgentGRPOConfig, generator: torch.Generator | None = None,
                    sampler=None) -> dict[str, float]:
    """One masked GRPO step on multi-turn episodes.

    G episodes of each problem (G environments reset with the problem's seed) are sampled together;
    each episode's reward (the sum of its turns') gets the group-relative advantage
    Â_b = (R_b − mean_group R) / (std_group R + 1e-6), broadcast to the episode's model tokens (or the
    token advantages of ``config.credit``: :func:`episode_token_advantages`); the
    clipped surrogate min(ρ Â, clip(ρ, 1 − ε_low, 1 + ε_high) Â) is averaged over the model tokens
    (``loss_mask``) and ``epochs_per_batch`` AdamW steps are taken on it.

    Args:
        model: the policy (trained in place).
        optimizer: its optimiser.
        make_env: a callable returning a fresh environment.
        problem_seeds: one reset seed per problem (``config.prompts_per_step`` of them).
        config: the :class:`AgentGRPOConfig`.
        generator: the sampling generator.
        sampler: the model that samples the episodes (a stale copy of ``model``, asynchronous rollouts);
            None: ``model`` itself. With a sampler, the loss reweights its model tokens by
            ``config.is_correction`` (the sampler's log-probabilities are those of the ids it produced).
    Returns:
        The step's metrics: reward, outcome (the reward less the environment's shaping, ``info["shaping"]``),
        call_frequency, calls_per_episode, failure_frequency,
        malformed_frequency, turns_per_episode, truncated_frequency (episode means), loss,
        clip_fraction, zero_variance_groups (share of groups with all-equal rewards), model_tokens (in the
        loss), reward_std (the mean over groups of the in-group reward standard deviation, unbiased),
        kept_groups and kept_reward_std (the groups ``config.rollout_filter_ratio`` keeps, and their mean
        standard deviation), entropy (the mean next-token entropy at τ, nats, over the model tokens of every
        sampled episode, under the weights that sampled them when on-policy) and grad_norm (the L2 norm of the
        first optimiser step's gradient, before the step).
    Raises:
        ValueError: no problem seeds.
    """
    from rlbook.envs.text import batch_rollouts, collate_trajectories
    from rlbook.steps import grpo_microbatch_train_step

    if not problem_seeds:
        raise ValueError("`problem_seeds` must hold at least one seed")
    G = config.group_size
    seeds = [int(s) for s in problem_seeds for _ in range(G)]
    envs = [make_env() for _ in seeds]
    model.eval()
    trajs = batch_rollouts(model if sampler is None else sampler, envs, seeds, max_new_tokens=config.max_new_tokens,
                           temperature=config.temperature, generator=generator)
    pad = envs[0].tokenizer.pad_token_id
    batch = collate_trajectories(trajs, pad_token_id=pad)
    rewards = batch["rewards"]
    advantages = episode_token_advantages(trajs, G, config.credit, config.gamma, config.step_weight)[:, 1:]
    full_mask = batch["loss_mask"][:, 1:]
    device = next(model.parameters()).device
    grouped = rewards.reshape(-1, G)
    group_std = grouped.std(dim=1) if G > 1 else torch.zeros(grouped.shape[0])
    keep = filter_groups(grouped, config.rollout_filter_ratio).repeat_interleave(G)  # rows of the kept groups
    mask, advantages = full_mask[keep].to(device), advantages[keep].to(device)
    sampler_log_probs = None
    if sampler is not None:
        with torch.no_grad():
            sampler.eval()
            sampler_log_probs = episode_log_probs(sampler, batch["input_ids"][keep], batch["attention_mask"][keep],
                                                  config.temperature).to(device)
    old = None
    clip_fraction = entropy = grad_norm = 0.0
    loss = torch.zeros(())
    model.train()
    for _ in range(config.epochs_per_batch):
        log_probs, token_entropy = episode_log_probs(model, batch["input_ids"], batch["attention_mask"],
                                                     config.temperature, return_entropy=True)
        log_probs = log_probs[keep]
        first_epoch = old is None
        if first_epoch:  # the policy that sampled (on-policy) scores every sampled episode
            old = log_probs.detach()
            full = full_mask.to(device)
            entropy = float((token_entropy * full).sum() / full.sum().clamp(min=1))
        optimizer.zero_grad(set_to_none=True)
        loss, _ = grpo_microbatch_train_step(log_probs, mask, 1, "grpo_clip", advantages=advantages,
                                                old_log_probs=old, cliprange=(config.clip_eps_low, config.clip_eps_high),
                                                aggregation=config.loss_aggregation, sampler_log_probs=sampler_log_probs,
                                                is_correction=config.is_correction if sampler is not None else "none",
                                                is_cap=config.is_cap)
        if first_epoch:
            grads = [p.grad.detach().norm() for p in model.parameters() if p.grad is not None]
            grad_norm = float(torch.stack(grads).norm()) if grads else 0.0
        optimizer.step()
        ratio = torch.exp(log_probs.detach() - old)
        clipped = ((ratio < 1 - config.clip_eps_low) & (advantages < 0)) | (
            (ratio > 1 + config.clip_eps_high) & (advantages > 0))
        clip_fraction = float((clipped & mask).sum() / mask.sum().clamp(min=1))
    model.eval()
    out = _episode_metrics(trajs)
    kept_groups = keep.reshape(-1, G)[:, 0]
    out.update(loss=float(loss.detach()), clip_fraction=clip_fraction, model_tokens=int(mask.sum()),
               zero_variance_groups=float((grouped == grouped[:, :1]).all(dim=1).float().mean()),
               reward_std=float(group_std.mean()), kept_reward_std=float(group_std[kept_groups].mean()),
               kept_groups=int(kept_groups.sum()), entropy=entropy, grad_norm=grad_norm)
    return out


def filter_groups(group_rewards: torch.Tensor, rollout_filter_ratio: float = 1.0) -> torch.Tensor:
    """Which groups an uncertainty-based rollout filter keeps: the int(p × P) with the largest reward spread.

    StarPO-S's filter (RAGEN): a group whose G episodes all earned the same reward has zero advantage under
    GRPO and teaches nothing; a group with a large in-group standard deviation is where the policy is still
    uncertain. The filter ranks the P groups by their in-group (unbiased) standard deviation and keeps the
    top int(p × P); ties go to the earlier group, so the choice repeats exactly.

    Args:
        group_rewards: (P, G) episode rewards, one row per group (G ≥ 1).
        rollout_filter_ratio: p in (0, 1]; 1 keeps every group.
    Returns:
        (P,) bool, True on the kept groups (exactly int(p × P) of them).
    Raises:
        ValueError: ``group_rewards`` not 2-d or empty, p outside (0, 1], or int(p × P) = 0.

    Source: Wang et al. 2025 (RAGEN), arXiv:2504.20073, §4.1 (StarPO-S, "uncertainty-based filtering");
    RAGEN's ``ragen/trainer/agent_trainer.py``, ``_filter_rollout`` (``in_group_std.topk``).
    """
    if not isinstance(group_rewards, torch.Tensor) or group_rewards.dim() != 2 or group_rewards.numel() == 0:
        raise ValueError(f"`group_rewards` must be a non-empty (P, G) tensor; got "
                         f"{getattr(group_rewards, 'shape', type(group_rewards).__name__)}")
    ratio = rollout_filter_ratio
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0 < ratio <= 1:
        raise ValueError(f"`rollout_filter_ratio` must be a number in (0, 1]; got {ratio!r}")
    P, G = group_rewards.shape
    n = int(ratio * P)
    if n < 1:
        raise ValueError(f"`rollout_filter_ratio` keeps int({ratio!r} × {P}) = 0 of the {P} groups")
    keep = torch.zeros(P, dtype=torch.bool)
    if n == P:
        return keep.fill_(True)
    spread = group_rewards.double().std(dim=1) if G > 1 else torch.zeros(P, dtype=torch.float64)
    order = torch.sort(-spread, stable=True).indices  # descending spread, the earlier group first on ties
    keep[order[:n]] = True
    return keep


def train_agent_grpo(model, make_env: Callable[[], object], config: AgentGRPOConfig, progress: bool = True,
                     first_problem: int = 1_000_000) -> list[dict[str, float]]:
    """Masked GRPO on multi-turn episodes for ``config.num_steps`` steps (:func:`agent_grpo_step`).

    With ``config.staleness`` k > 0 the episodes of step s are sampled by a copy of the policy as it was k
    steps earlier (the starting weights for s < k) and the loss corrects for it by ``config.is_correction``.

    Problems are drawn by seed: step s uses seeds ``first_problem + s·P`` to ``first_problem + (s + 1)·P − 1``
    (P = ``prompts_per_step``), away from the evaluation seeds a chapter uses (0, 1, 2, ...).

    Args:
        model: the policy (trained in place).
        make_env: a callable returning a fresh environment.
        config: the :class:`AgentGRPOConfig`.
        progress: show a progress bar.
        first_problem: the first training problem's seed.
    Returns:
        One metrics dict per step (:func:`agent_grpo_step`).
    """
    from tqdm.auto import tqdm

    generator = torch.Generator().manual_seed(config.seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=0.0)
    P = config.prompts_per_step
    k = config.staleness
    sampler = copy.deepcopy(model) if k else None
    snapshots = [copy.deepcopy(model.state_dict())] if k else []  # at step s: the weights of steps max(s − k, 0)..s
    history = []
    for step in tqdm(range(config.num_steps), desc="GRPO on episodes", disable=not progress):
        seeds = [first_problem + config.seed * 10_000_019 + step * P + j for j in range(P)]
        if k:
            sampler.load_state_dict(snapshots[0])  # the policy of step max(s − k, 0)
        history.append(agent_grpo_step(model, optimizer, make_env, seeds, config, generator, sampler))
        if k:
            snapshots.append(copy.deepcopy(model.state_dict()))
            if len(snapshots) > k + 1:
                snapshots.pop(0)
    return history


@torch.no_grad()
def evaluate_agent(model, make_env: Callable[[], object], seeds: Sequence[int], max_new_tokens: int = 12,
                   greedy: bool = True, temperature: float = 1.0,
                   generator: torch.Generator | None = None) -> dict[str, float]:
    """Accuracy and tool use on the problems of ``seeds`` (one episode each, greedy by default).

    Returns:
        ``accuracy`` (mean reward, the share solved) and the episode metrics of
        :func:`agent_grpo_step` (call_frequency, calls_per_episode, failure_frequency, ...).
    Raises:
        ValueError: no seeds.
    """
    from rlbook.envs.text import batch_rollouts

    if not seeds:
        raise ValueError("`seeds` must hold at least one problem seed")
    model.eval()
    trajs = batch_rollouts(model, [make_env() for _ in seeds], list(seeds), max_new_tokens=max_new_tokens,
                           greedy=greedy, temperature=temperature, generator=generator)
    out = _episode_metrics(trajs)
    out["accuracy"] = out.pop("reward")
    return out
