"""GRPO on a language model, written to read top to bottom; plus held-out evaluation.

How to call it (chapter 9)::

    import rlbook as rl
    task, tok = rl.lm.AdditionTask(), rl.lm.build_char_tokenizer()
    policy = rl.lm.build_policy(rl.lm.policy_config(tok))
    rl.lm.train_sft(policy, tok, task, rl.lm.SFTConfig())            # leaves room for RL
    held_out = task.held_out_problems(500)
    before = rl.evaluate(policy, tok, held_out)                     # greedy_accuracy, pass@1, pass@8
    hist = rl.train_grpo(policy, tok, task, rl.GRPOConfig())       # trains `policy` in place
    after = rl.evaluate(policy, tok, held_out)
    hist["reward"], hist["kl"], hist["clip_fraction"]               # per-step curves (np arrays)

Variants are configs, not code paths (STYLE rule 5). Each config field names one orthogonal part
(chapters 10 and 11 take them one at a time):

=================  ===========================================================================
part               choices (``GRPOConfig`` field = value)
=================  ===========================================================================
advantage          ``advantage_estimator`` = "grpo" (r−mean)/std | "dr_grpo" r−mean | "rloo" |
                   "maxrl" | "magistral" (r−group mean)/minibatch std | "gae" (PPO: a critic,
                   GAE over tokens) | any callable(rewards (B,), group_size) -> (B,)
per-token loss     ``per_token_loss`` = "clipped_surrogate" (PPO/GRPO/DAPO) | "cispo" | "gspo"
                   (sequence ratio, sequence clip) | "gspo_token" | "dppo" (divergence mask,
                   ``divergence`` = "binary_tv" | "binary_kl", threshold ``divergence_threshold``)
clip band          ``clip_eps_low``, ``clip_eps_high`` (None = symmetric; DAPO: 0.2 / 0.28)
aggregation        ``loss_aggregation`` = "seq_mean_token_mean" (GRPO) | "token_mean" (DAPO) |
                   "fixed_length_mean" (Dr. GRPO, L_max = max_new_tokens) | "prompt_mean"
                   (ScaleRL) | callable(loss, mask)
KL penalty         ``kl_coef`` β ≥ 0: + β·k3(π_θ, π_ref) per token (GRPO); 0 = none (DAPO, Dr. GRPO);
                   ``ref_reset_every`` K: π_ref ← π_θ and a fresh optimiser every K steps (ProRL)
reward             ``reward_source`` = "task" (the verifier) | "reward_model" (a learned r_φ, passed
                   as ``train_grpo(..., reward_model=rm)``)
reward shaping     ``format_coef`` (adds β_f·format_reward), ``overlong_cache_length`` (DAPO)
which rows learn   ``overlong_filter`` (DAPO: truncated completions masked out of the loss)
which groups       ``dynamic_sampling`` + ``max_sampling_rounds`` (DAPO), ``zero_variance_filter``,
                   ``retire_pass_rate`` (ScaleRL) — see :mod:`rlbook.algos.grpo_rollouts`
updates per batch  ``num_inner_epochs`` μ × ``num_minibatches`` M optimiser steps per generation
precision          ``fp32_lm_head`` (MiniMax/ScaleRL: the LM head in float32 for bf16 weights)
sampler mismatch   ``is_correction`` = "none" | "token_truncate" (TIS) | "token_mask" (MIS, IcePop) |
                   "sequence_truncate" | "sequence_mask" (TRL's names) | "geometric_truncate" |
                   "geometric_mask", cap ``is_cap`` C: reweight each token by π_old/π_s when a
                   sampler that is not the policy drew the tokens (``train_grpo(..., sampler=)``,
                   :func:`rlbook.importance_correction`); the sampler itself as switches
                   ``sampler_temperature``, ``sampler_top_p``, ``sampler_top_k``,
                   ``sampler_precision``, ``sampler_lag`` (:class:`rlbook.MismatchedSampler`)
entropy            ``entropy_coef`` c: − c·(mean token entropy), the entropy bonus (TRL's name);
                   ``top_entropy_quantile`` ρ: only the top-ρ tokens by entropy get a policy
                   gradient (Wang et al.: 0.2); ``entropy_control`` = "none" | "clip_cov" |
                   "kl_cov" (Cui et al.; ``clip_cov_ratio``, ``clip_cov_lb``, ``clip_cov_ub``,
                   ``kl_cov_ratio``, ``kl_cov_coef``) — :mod:`rlbook.entropy_control`
budget             ``max_completions``: stop once this many completions were generated
=================  ===========================================================================

Named recipes (``GRPOConfig.recipe(name, **overrides)``, table ``GRPO_RECIPES``) spell out the
published methods as settings of these parts: "grpo", "dr_grpo", "dapo", "rloo", "cispo",
"gspo", "maxrl", "dppo", "prorl", "magistral", "scalerl", "ppo".

One step (the loop body of :func:`train_grpo`):
    1. draw ``prompts_per_step`` training prompts; sample G = ``group_size`` completions each with
       π_old (the current weights) → B = prompts_per_step·G completions (the sampling rules of
       DAPO and ScaleRL may resample or drop groups: :func:`rlbook.algos.grpo_rollouts.collect_rollouts`);
    2. score them with the verifier, r_i = task.reward (``task.reward_batch`` if the task has
       one), or with a reward model (``reward_source``), + shaping; Â_i from the group's rewards;
    3. μ = ``num_inner_epochs`` passes over the batch (in M minibatches of whole groups): per-token
       loss with ρ = π_θ/π_old, plus β·k3 to the frozen reference π_ref, aggregated, one AdamW
       step per minibatch.

Measured (chapter 9's recipe, small size: SFT ``SFTConfig(num_steps=800, seed=s)`` with model seed
s, then GRPO ``GRPOConfig(seed=s)``, 150 steps of 64 prompts × 8; ``evaluate`` on
``task.held_out_problems(500)``, 16 samples at τ = 1; ``benchmarks/grpo_seeds.py``, whose table for
seeds 0-9 is in the README): held-out pass@1 rose by 0.438 to 0.502 on every one of ten seeds (mean
+0.479 [95 % CI +0.461, +0.496]), e.g. seed 0: 0.380 → 0.817, greedy 0.902 → 0.918. With the
library's default of 550 supervised steps two of the ten seeds started from a model that could not
yet add (seed 4: greedy 0.168) and gained only 0.266 and 0.331: the supervised stage, not GRPO, was
the fragile part.

The GRPO phase takes ~60 s on one CPU core (torch 1 thread; chapter 9 prints it). Per step, the
sampler and the scorer encode each prompt once for its G completions and a plain GPT-2 runs through
``rl.lm.gpt2_forward``; ``benchmarks/grpo_throughput.py`` compares the step with TRL's.

Tuning notes: lr 1e-3 collapsed greedy accuracy (0.998 → 0.82); lr 3e-4 with 32 prompts/step was
unstable for seed 0 after ~150 steps; 32 prompts at lr 2e-4 gave +40/+46/+37. Doubling the prompts
per step (less noisy gradient) fixed both.

Logged per step (``History.log``): reward, pass@1 (sampled accuracy of the batch), kl (mean k3 to
π_ref over completion tokens, logged even when β = 0), entropy (mean token entropy), clip_fraction
(share of tokens whose gradient the trust region zeroed — clip, GSPO's sequence clip or DPPO's
mask — or, for CISPO, whose weight was clipped; last pass), ratio_std (spread of ρ over tokens, last
pass), completion_length (mean tokens, EOS included), length_correct / length_wrong (the same over
right / wrong completions; NaN if none), truncated_fraction (no EOS within the budget),
frac_zero_variance_groups (sampled groups with all-equal rewards: no signal), kept_groups (groups in
the update), completions_generated (this step, all sampling rounds), sampling_rounds, loss,
grad_norm (before clipping), value_loss (PPO's critic; NaN otherwise), ref_reset (1 on the steps
where ProRL reset π_ref), with a sampler that is not the policy also sampler_log_ratio_mean,
sampler_kl and sampler_out_of_band_fraction (:func:`_mismatch_metrics`), with ``top_entropy_quantile``
< 1 entropy_kept_fraction (share of the loss tokens that kept a policy gradient, last pass), with an
``entropy_control`` cov_selected_fraction (share of the loss tokens Clip-Cov removed or KL-Cov
penalised, last pass), retired_prompts (ScaleRL's pool exclusions so far). Logged per step as a series
(``History.log_series``; ``history["entropy_by_position"]`` is a (steps, max_new_tokens) array):
entropy_by_position, the mean token entropy at each completion position t over the completions that
reach t (NaN where none does, and on a step without an update), scored as ``entropy`` is (first pass,
each minibatch by the policy as it is then). With
``eval_every > 0`` also eval_step, eval_completions (completions generated before that
evaluation), eval_greedy_accuracy, eval_pass@1, eval_pass@8.
"""

from __future__ import annotations

import copy
import functools
import time

import numpy as np
import torch
from tqdm.auto import tqdm

from rlbook.advantages import gae
from rlbook.aggregation import fixed_length_mean, masked_mean, masked_whiten, prompt_mean
from rlbook.algos._progress import close_progress
from rlbook.algos.grpo_config import (ADVANTAGE_ESTIMATORS, GRPO_RECIPES, LOSS_AGGREGATIONS, PER_TOKEN_LOSSES,
                                      GRPOConfig)
from rlbook.algos.grpo_rollouts import collect_rollouts, mixed_groups, sample_kwargs
from rlbook.config import get_device
from rlbook.evaluation import pass_at_k
from rlbook.history import History
from rlbook.kl import kl_k3
from rlbook.lm.logprobs import completion_log_probs
from rlbook.lm.sampling import sample_completions
from rlbook.losses import value_loss
from rlbook.steps import grpo_microbatch_train_step

__all__ = ["GRPOConfig", "train_grpo", "evaluate", "grpo_optimizer", "ADVANTAGE_ESTIMATORS", "PER_TOKEN_LOSSES",
           "LOSS_AGGREGATIONS", "GRPO_RECIPES"]  # the config names are re-exported from rlbook.algos.grpo_config

def grpo_optimizer(policy, config: GRPOConfig) -> torch.optim.Optimizer:
    """The AdamW optimiser :func:`train_grpo` uses: ``lr = config.lr``, no weight decay.

    The fused kernel (one call for all parameters) is used on CPU and CUDA; on a tiny model it
    halves the optimiser's time and gives the same update up to float rounding.

    Args:
        policy: the model whose parameters are optimised.
        config: supplies ``lr``.
    Returns:
        A ``torch.optim.AdamW``.
    """
    device = next(policy.parameters()).device
    fused = True if device.type in ("cpu", "cuda") else None
    return torch.optim.AdamW(policy.parameters(), lr=config.lr, weight_decay=0.0, fused=fused)


def _parts(config: GRPOConfig):
    """Resolve the config's names: (advantage_fn, loss_type, (ε_low, ε_high), aggregate_fn)."""
    adv = config.advantage_estimator
    adv = ADVANTAGE_ESTIMATORS[adv] if isinstance(adv, str) else adv
    if config.advantage_estimator == "grpo":  # the group std: population (÷G) or sample (÷(G−1))
        adv = functools.partial(adv, std=config.advantage_std)
    agg = config.loss_aggregation
    if agg == "fixed_length_mean":
        agg = functools.partial(fixed_length_mean, max_length=config.max_new_tokens)
    elif agg == "prompt_mean":
        agg = functools.partial(prompt_mean, group_size=config.group_size)
    elif isinstance(agg, str):
        agg = LOSS_AGGREGATIONS[agg]
    high = config.clip_eps_low if config.clip_eps_high is None else config.clip_eps_high
    return adv, PER_TOKEN_LOSSES[config.per_token_loss], (config.clip_eps_low, high), agg


def _minibatches(num_groups: int, num_minibatches: int, group_size: int) -> list[tuple[slice, slice]]:
    """Contiguous (groups, rows) slices of M minibatches of whole groups (the last may be smaller)."""
    size = -(-num_groups // num_minibatches)
    return [(slice(g, min(g + size, num_groups)), slice(g * group_size, min(g + size, num_groups) * group_size))
            for g in range(0, num_groups, size)]


def _gae_advantages(critic, batch, prompt_ids, prompt_mask, mask, config):
    """PPO's token-level advantages: reward at the last token, V from the critic, GAE(γ, λ), whitened."""
    from rlbook.lm.critic import critic_values

    completion_ids = batch.completion_ids.to(mask.device)
    with torch.no_grad():
        values = critic_values(critic, prompt_ids, completion_ids, prompt_mask, mask)  # (B, T) V(s_t)
    last = (batch.lengths - 1).to(mask.device)[:, None]  # (B, 1) index of each completion's last token
    rewards = torch.zeros_like(values).scatter(1, last, batch.rewards.to(values)[:, None])  # r at the end only
    terminated = torch.zeros_like(mask).scatter(1, last, True)
    next_values = torch.cat([values[:, 1:], torch.zeros_like(values[:, :1])], dim=1)
    advantages, returns = gae(rewards, values, next_values, terminated, torch.zeros_like(mask), config.gamma,
                              config.gae_lambda)
    return masked_whiten(advantages, mask), returns


def _critic_update(critic, critic_optimizer, prompt_ids, batch, prompt_mask, mask, returns, config) -> torch.Tensor:
    """One regression step of the critic towards the GAE returns: ½(V − R̂)², token mean."""
    from rlbook.lm.critic import critic_values

    values = critic_values(critic, prompt_ids, batch.completion_ids.to(mask.device), prompt_mask, mask)
    loss = masked_mean(value_loss(values, returns), mask)
    critic_optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(critic.parameters(), config.max_grad_norm)
    critic_optimizer.step()
    return loss.detach()


def _advantages(config, batch, adv_fn, minibatches, critic, prompt_ids, prompt_mask, mask):
    """(B, 1) sequence-level advantages from the rewards (per minibatch, for Magistral's std), or
    (B, T) token-level GAE ones with the critic; plus the critic's returns (or None)."""
    if config.advantage_estimator == "gae":
        return _gae_advantages(critic, batch, prompt_ids, prompt_mask, mask, config)
    G = config.group_size
    advantages = torch.cat([adv_fn(batch.rewards[rows], G) for _, rows in minibatches])
    return advantages.to(mask.device)[:, None], None


def grpo_step(policy, ref_policy, optimizer, tokenizer, task, config: GRPOConfig, generator, forbidden_ids,
              critic=None, critic_optimizer=None, retired: set | None = None, sampler=None) -> dict:
    """One GRPO step: sample with π_old, score, advantages, μ·M clipped-surrogate updates.

    Source: book eq. (grpo); Shao et al. 2024, arXiv:2402.03300, Algorithm 1 (one outer iteration).

    Args:
        policy: the causal LM being trained (its weights at call time are π_old).
        ref_policy: frozen π_ref for the k3 penalty / KL metric, or None (kl logged as 0).
        optimizer: a torch optimiser over ``policy``'s parameters.
        tokenizer, task, config: as :func:`train_grpo`.
        generator: torch.Generator for the prompt draws and the samples.
        forbidden_ids: token ids the sampler never emits (``rl.lm.forbidden_token_ids``).
        critic, critic_optimizer: the value model and its optimiser (``advantage_estimator="gae"``).
        retired: prompts excluded from the pool (``retire_pass_rate``); updated in place.
        sampler: None (the policy samples) or a sampler that is not the policy
            (:func:`rlbook.algos.grpo_rollouts.sample_groups`).
    Returns:
        dict metric name -> 0-d tensor (the metrics listed in the module docstring).
    Raises:
        ValueError: from the parts (e.g. an advantage estimator rejecting the rewards), or
            ``advantage_estimator="gae"`` without a critic.
    """
    device = next(policy.parameters()).device
    adv_fn, loss_type, cliprange, aggregate = _parts(config)
    if config.advantage_estimator == "gae" and (critic is None or critic_optimizer is None):
        raise ValueError("`critic` and `critic_optimizer` are required with advantage_estimator='gae' (PPO)")
    # 1. sample G completions per prompt with π_old; DAPO / ScaleRL sampling rules pick the groups
    batch = collect_rollouts(policy, tokenizer, task, config, generator, forbidden_ids, retired, sampler=sampler)
    metrics = {**_sampling_metrics(batch, config), **_mismatch_metrics(batch, config, sampler)}
    if batch.num_groups == 0:  # no group with mixed rewards within the sampling cap: no update
        return metrics
    mask = batch.completion_mask.to(device)  # (B, T)
    loss_mask = mask & ~batch.truncated.to(device)[:, None] if config.overlong_filter else mask  # DAPO
    prompt_ids, prompt_mask = batch.prompt_ids.to(device), batch.prompt_mask.to(device)
    completion_ids, old_log_probs = batch.completion_ids.to(device), batch.log_probs  # log π_old (the trainer's)
    correcting = config.is_correction != "none"
    sampler_log_probs = batch.sampler_log_probs.to(device) if correcting else None  # log π_s (the sampler's)
    scoring = dict(temperature=config.temperature, forbidden_ids=forbidden_ids)
    ref_log_probs = None
    if ref_policy is not None:
        with torch.no_grad():
            ref_log_probs = completion_log_probs(ref_policy, prompt_ids, completion_ids, prompt_mask,
                                                 completion_mask=mask, **scoring)
    # 2. advantages: compare within each group (or, for PPO, GAE over tokens with the critic)
    minibatches = _minibatches(batch.num_groups, config.num_minibatches, config.group_size)
    advantages, returns = _advantages(config, batch, adv_fn, minibatches, critic, prompt_ids, prompt_mask, mask)
    # 3. μ passes over M minibatches of whole groups: per-token loss (+ β·k3), aggregation and
    #    backward in one library call (rl.grpo_microbatch_train_step), one AdamW step each
    kl, entropy, last = [], [], []
    entropy_sum, entropy_count = torch.zeros(mask.shape[1], dtype=torch.float64), torch.zeros(mask.shape[1])
    for epoch in range(config.num_inner_epochs):
        for groups, rows in minibatches:
            log_probs, ent = completion_log_probs(policy, prompt_ids[groups], completion_ids[rows], prompt_mask[groups],
                                                  completion_mask=mask[rows], with_entropy=True, **scoring)
            ref = None if ref_log_probs is None else ref_log_probs[rows]
            if epoch == 0:
                kl.append(log_probs.new_zeros(()) if ref is None else masked_mean(kl_k3(log_probs.detach(), ref), mask[rows]))
                entropy.append(masked_mean(ent.detach(), mask[rows]))
                entropy_sum += (ent.detach().double() * mask[rows]).sum(dim=0).cpu()
                entropy_count += mask[rows].sum(dim=0).cpu()
            optimizer.zero_grad(set_to_none=True)
            loss, meta = grpo_microbatch_train_step(
                log_probs, loss_mask[rows], 1, loss_type, advantages=advantages[rows], old_log_probs=old_log_probs[rows],
                cliprange=cliprange, aggregation=aggregate, ref_log_probs=ref, kl_coef=config.kl_coef,
                divergence_threshold=config.divergence_threshold, divergence=config.divergence,
                sampler_log_probs=None if sampler_log_probs is None else sampler_log_probs[rows],
                is_correction=config.is_correction, is_cap=config.is_cap, **_entropy_switches(config, ent, generator))
            grad_norm = torch.nn.utils.clip_grad_norm_(policy.parameters(), config.max_grad_norm)
            optimizer.step()
            if epoch == config.num_inner_epochs - 1:
                last.append((meta, loss_mask[rows]))
        if critic is not None:
            metrics["value_loss"] = _critic_update(critic, critic_optimizer, prompt_ids, batch, prompt_mask, mask,
                                                   returns, config)
    by_position = torch.full((config.max_new_tokens,), float("nan"))
    reached = entropy_count > 0
    by_position[: mask.shape[1]][reached] = (entropy_sum[reached] / entropy_count[reached]).float()
    return {**metrics, **_update_metrics(last), "kl": torch.stack(kl).mean(), "entropy": torch.stack(entropy).mean(),
            "loss": loss.detach(), "grad_norm": grad_norm, "entropy_by_position": by_position}


def _entropy_switches(config, entropy, generator) -> dict:
    """The entropy-management arguments of :func:`rlbook.grpo_microbatch_train_step` that are on
    (none at the defaults): ``entropy`` keeps its gradient for the bonus."""
    out = {}
    if config.entropy_coef or config.top_entropy_quantile < 1.0:
        out.update(entropy=entropy, entropy_coef=config.entropy_coef, top_entropy_quantile=config.top_entropy_quantile)
    if config.entropy_control == "clip_cov":
        out.update(entropy_control="clip_cov", clip_cov_ratio=config.clip_cov_ratio, clip_cov_lb=config.clip_cov_lb,
                   clip_cov_ub=config.clip_cov_ub, generator=generator)
    elif config.entropy_control == "kl_cov":
        out.update(entropy_control="kl_cov", kl_cov_ratio=config.kl_cov_ratio, kl_cov_coef=config.kl_cov_coef)
    return out


_ENTROPY_METRICS = {"entropy_kept_fraction": "entropy_kept", "cov_selected_fraction": "cov_selected"}


def _entropy_metric_names(config) -> tuple:
    """The entropy-management metrics this config logs: the share of loss tokens kept by
    ``top_entropy_quantile`` and the share Clip-Cov removed / KL-Cov penalised."""
    return (("entropy_kept_fraction",) if config.top_entropy_quantile < 1.0 else ()) + \
        (("cov_selected_fraction",) if config.entropy_control != "none" else ())


def _correction_metrics(last: list) -> dict:
    """The importance-sampling correction over the last pass's minibatches (tokens in the loss):
    mean log π_old/π_s, mean weight, and the shares truncated and masked (token-weighted)."""
    count = torch.stack([m.sum() for _, m in last]).sum().clamp(min=1)
    out = {}
    for name, key in (("is_log_ratio_mean", "log_ratio_mean"), ("is_weight_mean", "weight_mean"),
                      ("is_truncated_fraction", "truncated_fraction"), ("is_masked_fraction", "masked_fraction")):
        values = [meta["is_stats"][key].nan_to_num(0.0) * m.sum() for meta, m in last]
        out[name] = torch.stack(values).sum() / count
    return out


_MISMATCH_METRICS = ("sampler_log_ratio_mean", "sampler_kl", "sampler_out_of_band_fraction")


def _mismatch_metrics(batch, config, sampler) -> dict:
    """With a sampler that is not the policy: over the completion tokens of the batch, the mean log-ratio
    log π_old − log π_s, the k3 estimate of KL(π_s‖π_old) (E over the sampler's tokens of ρ − 1 − log ρ,
    ρ = π_old/π_s; Schulman 2020, "Approximating KL divergence"), and the share of tokens whose ratio
    lies outside [1/C, C] (C = ``is_cap``: what a mask would remove, a truncation would cap above)."""
    if sampler is None:
        return {}
    mask = batch.completion_mask
    if batch.num_groups == 0 or not mask.any():
        return {name: torch.tensor(float("nan")) for name in _MISMATCH_METRICS}
    log_ratio = (batch.log_probs - batch.sampler_log_probs.to(batch.log_probs))[mask].double()
    bound = float(np.log(config.is_cap))
    return {"sampler_log_ratio_mean": log_ratio.mean(), "sampler_kl": (torch.expm1(log_ratio) - log_ratio).mean(),
            "sampler_out_of_band_fraction": (log_ratio.abs() > bound).double().mean()}


def _sampling_metrics(batch, config) -> dict:
    """Reward, accuracy and length metrics of everything sampled (first round), and the counts."""
    sampled, nan = batch.stats["sampled"], torch.tensor(float("nan"))
    lengths, ok = sampled.lengths.float(), sampled.correct.bool()
    return {
        "reward": sampled.rewards.mean(), "pass@1": sampled.correct.mean(), "completion_length": lengths.mean(),
        "length_correct": lengths[ok].mean() if ok.any() else nan,
        "length_wrong": lengths[~ok].mean() if (~ok).any() else nan,
        "truncated_fraction": sampled.truncated.float().mean(),
        "frac_zero_variance_groups": (~mixed_groups(sampled.rewards, config.group_size)).float().mean(),
        "kept_groups": torch.tensor(float(batch.num_groups)),
        "completions_generated": torch.tensor(float(batch.stats["generated"])),
        "sampling_rounds": torch.tensor(float(batch.stats["rounds"])),
        "value_loss": nan, "kl": nan, "entropy": nan, "clip_fraction": nan, "ratio_std": nan, "loss": nan, "grad_norm": nan,
        **({name: nan for name in _CORRECTION_METRICS} if config.is_correction != "none" else {}),
        **{name: nan for name in _entropy_metric_names(config)},
        "entropy_by_position": torch.full((config.max_new_tokens,), float("nan")),
    }


_CORRECTION_METRICS = ("is_log_ratio_mean", "is_weight_mean", "is_truncated_fraction", "is_masked_fraction")


def _update_metrics(last: list) -> dict:
    """clip_fraction and ratio_std over the last pass's minibatches (tokens in the loss); with the
    entropy switches on also entropy_kept_fraction and cov_selected_fraction."""
    clipped = torch.cat([(meta.get("clipped", meta.get("weight_clipped")) & m).flatten() for meta, m in last])
    ratio = torch.cat([meta["ratio"][m] for meta, m in last])
    count = torch.cat([m.flatten() for _, m in last]).sum().clamp(min=1)
    out = {"clip_fraction": clipped.sum() / count, "ratio_std": ratio.std() if ratio.numel() > 1 else ratio.new_zeros(())}
    for name, key in _ENTROPY_METRICS.items():  # shares of the loss tokens (last pass), when the switch is on
        if key in last[0][0]:
            out[name] = torch.stack([(meta[key] & m).sum() for meta, m in last]).sum() / count
    return {**out, **_correction_metrics(last)} if "is_stats" in last[0][0] else out


def train_grpo(policy, tokenizer, task, config: GRPOConfig | None = None, progress: bool = True,
               reward_model=None, callback=None, sampler=None) -> History:
    """Train ``policy`` in place with GRPO (or any variant in ``GRPO_RECIPES``) on ``task``'s reward or a reward model's.

    J(θ) = E_q E_{o_1..G ∼ π_old} [ agg_{i,t} min(ρ_{i,t} Â_i, clip(ρ_{i,t}, 1−ε_low, 1+ε_high) Â_i)
           − β k3_{i,t}(π_θ ‖ π_ref) ],   ρ_{i,t} = π_θ(o_{i,t}|q, o_{i,<t}) / π_old(o_{i,t}|q, o_{i,<t})

    (the default parts; the other choices of each part are listed in the module docstring).

    Source: book eq. (grpo); Shao et al. 2024 (DeepSeekMath), arXiv:2402.03300, eq. 21 and
    Algorithm 1; the variants' papers are listed in :class:`GRPOConfig`; RL against a learned
    reward model: Ouyang et al. 2022, arXiv:2203.02155, §3.5.

    With ``config.reward_source="reward_model"`` the completions are scored by ``reward_model``
    (r_φ(q, o), :func:`rlbook.lm.proxy_rewards`) through :class:`rlbook.lm.ProxyRewardTask`,
    a batch at a time and memoised: the logged ``reward`` and ``pass@1`` are then mean proxy
    scores (logit units), not accuracies (and ``retire_pass_rate`` compares a prompt's mean
    score), while the held-out evaluation (``eval_every``) still uses ``task.reward``, the
    verifier. Measured (CPU, 1 thread, on a loaded 2-core machine; the
    supervised scratchpad model of ``benchmarks/overoptimisation.py``, seed 0, 403k parameters,
    and a reward model built on it; 32 prompts × 8 completions of up to 24 tokens, two
    minibatches; 10 steps, two runs each): a step took 0.51-0.52 s scoring one completion per
    forward pass and 0.27-0.29 s batched, with equal histories and weights; scoring one batch of
    256 completions alone (188 distinct), 0.245 s against 0.040 s.

    Args:
        policy: a causal LM (ours from :func:`rlbook.lm.build_policy`, or any local checkpoint
            loaded with :func:`rlbook.lm.load_policy`); trained in place, kept in eval() mode.
        tokenizer: its tokenizer (eos and pad ids set).
        task: provides ``sample_problems(n, generator)``, ``reward(prompt, completion)``,
            ``format_reward(prompt, completion)`` and, for ``eval_every``, ``held_out_problems(n)``;
            optionally ``reward_batch(prompts, completions)``, the same rewards for a batch
            (:func:`rlbook.algos.grpo_rollouts.task_rewards`).
        config: :class:`GRPOConfig` (defaults if None).
        progress: show a tqdm progress bar.
        reward_model: the learned reward model (from :func:`rlbook.lm.build_reward_model`, read
            only, on its own device), required with ``reward_source="reward_model"`` and refused
            otherwise; None with the default ``reward_source="task"``.
        callback: None, or ``callback(step, policy, metrics)`` called after every step: ``step``
            the 0-based index of the step just taken (its row in the history), ``policy`` the
            updated model, ``metrics`` a dict metric name -> float of what was logged for that
            step (``history[name][step]`` for each name). Returning True stops training after
            that step (the final evaluation, if any, still runs); None or False goes on.
        sampler: None (the policy samples its own completions: π_s = π_old, so every correction
            weight is exactly 1 and ``is_correction`` changes nothing, bit for bit), or a sampler
            that is not the policy, called like :func:`rlbook.lm.sample_completions` with the
            policy as its first argument and returning the same fields; its ``log_probs`` are
            π_s, and the trainer recomputes π_old on its tokens
            (:func:`rlbook.algos.grpo_rollouts.sample_groups`). ``config.is_correction``
            then reweights the loss by π_old/π_s.
    Returns:
        History: one entry per step for every metric listed in the module docstring;
        ``wall_seconds`` set; for PPO (``advantage_estimator="gae"``) the trained critic is
        ``history.critic``. With ``is_correction`` other than "none" also is_log_ratio_mean
        (mean log π_old/π_s over the loss's tokens, last pass), is_weight_mean, is_truncated_fraction
        and is_masked_fraction; with ``top_entropy_quantile`` < 1 entropy_kept_fraction, with an
        ``entropy_control`` cov_selected_fraction (module docstring).
    Raises:
        ValueError: invalid config (e.g. group_size < 2), a tokenizer without an EOS id,
            ``reward_model`` missing with ``reward_source="reward_model"`` or given with
            ``reward_source="task"``, a ``callback`` that is not callable or returns anything
            but None, False or True; a ``sampler`` that is not callable.
    """
    from rlbook.lm.tokenizer import forbidden_token_ids

    config = config or GRPOConfig()
    if getattr(tokenizer, "eos_token_id", None) is None:
        raise ValueError("`tokenizer` must define eos_token_id (completions end with it)")
    if config.reward_source == "reward_model" and reward_model is None:
        raise ValueError("`reward_model` is required with GRPOConfig(reward_source='reward_model'); got None")
    if config.reward_source != "reward_model" and reward_model is not None:
        raise ValueError(f"`reward_model` was given but GRPOConfig.reward_source={config.reward_source!r}: set "
                         "reward_source='reward_model' to train against it, or leave reward_model=None")
    if callback is not None and not callable(callback):
        raise ValueError(f"`callback` must be None or callable(step, policy, metrics); got {type(callback).__name__}")
    if sampler is not None and not callable(sampler):
        raise ValueError(f"`sampler` must be None or callable like rl.lm.sample_completions; got {type(sampler).__name__}")
    switched = config.mismatched_sampler()  # from the sampler_* switches, or None
    if switched is not None and sampler is not None:
        raise ValueError("`sampler` was given and GRPOConfig's sampler_* switches describe another one; use one of the two")
    sampler = sampler if switched is None else switched
    train_task = task
    if config.reward_source == "reward_model":
        from rlbook.lm.preference_task import ProxyRewardTask

        train_task = ProxyRewardTask(task, reward_model, tokenizer)
    device = get_device(config.device)
    policy.to(device).eval()  # eval(): dropout off, so sampling and scoring agree; gradients flow
    if config.fp32_lm_head:
        from rlbook.lm.critic import fp32_lm_head

        fp32_lm_head(policy)
    need_ref = config.kl_coef > 0 or config.log_ref_kl or config.ref_reset_every is not None
    ref_policy = copy.deepcopy(policy).requires_grad_(False) if need_ref else None  # frozen π_ref
    optimizer = grpo_optimizer(policy, config)
    critic = critic_optimizer = None
    if config.advantage_estimator == "gae":  # PPO: a value model initialised from the policy
        from rlbook.lm.critic import build_critic

        critic = build_critic(policy)
        critic_optimizer = torch.optim.AdamW(critic.parameters(), lr=config.critic_lr, weight_decay=0.0)
    generator = torch.Generator().manual_seed(config.seed)
    forbidden, retired = forbidden_token_ids(tokenizer), set()
    history, start, generated = History(config=config), time.perf_counter(), 0
    evaluating = bool(config.eval_every or config.eval_steps)
    eval_problems = task.held_out_problems(config.eval_num_problems) if evaluating else None
    bar, stopped = tqdm(total=config.num_steps, desc="GRPO", disable=not progress, mininterval=1.0), None
    for step in range(config.num_steps):
        if config.max_completions is not None and generated >= config.max_completions:
            stopped = f"stopped at {generated:,} completions"
            break
        if eval_problems is not None and ((config.eval_every and step % config.eval_every == 0)
                                          or step in config.eval_steps):
            _log_eval(history, step, generated, policy, tokenizer, eval_problems, task, config)
        reset = config.ref_reset_every is not None and step > 0 and step % config.ref_reset_every == 0
        if reset:  # ProRL: the reference moves to the current policy; the optimiser starts afresh
            ref_policy.load_state_dict(policy.state_dict())
            optimizer = grpo_optimizer(policy, config)
        metrics = grpo_step(policy, ref_policy, optimizer, tokenizer, train_task, config, generator, forbidden,
                            critic=critic, critic_optimizer=critic_optimizer, retired=retired, sampler=sampler)
        generated += int(metrics["completions_generated"])
        history.log_series(entropy_by_position=metrics.pop("entropy_by_position"))
        logged = {name: float(value) for name, value in metrics.items()}
        logged.update(ref_reset=float(reset), retired_prompts=float(len(retired)))
        history.log(**logged)
        bar.set_postfix({"reward": f"{logged['reward']:.3f}", "kl": f"{logged['kl']:.4f}"}, refresh=False)
        bar.update(1)
        if callback is not None:
            stop = callback(step, policy, dict(logged))
            if stop is not None and not isinstance(stop, (bool, np.bool_)):
                close_progress(bar, None)
                raise ValueError(f"`callback` must return None, False or True; got {stop!r}")
            if stop:
                stopped = f"stopped by the callback after step {step}"
                break
    close_progress(bar, stopped)
    if eval_problems is not None:
        _log_eval(history, len(history["reward"]), generated, policy, tokenizer, eval_problems, task, config)
    history.wall_seconds = time.perf_counter() - start
    if critic is not None:
        history.critic = critic
    return history


def _log_eval(history, step, generated, policy, tokenizer, problems, task, config):
    result = evaluate(policy, tokenizer, problems, reward_fn=task.reward, num_samples=8, k=8,
                      max_new_tokens=config.max_new_tokens, seed=config.seed + 1)
    history.log(eval_step=step, eval_completions=generated, eval_greedy_accuracy=result["greedy_accuracy"],
                **{"eval_pass@1": result["pass@1"], "eval_pass@8": result["pass@8"]})


@torch.no_grad()
def evaluate(policy, tokenizer, problems, reward_fn=None, num_samples: int = 16, k: int = 8,
             temperature: float = 1.0, max_new_tokens: int = 8, seed: int = 0, batch_size: int = 1024) -> dict:
    """Greedy accuracy, sampled pass@1 and unbiased pass@k on a list of problems.

    pass@k = mean_q [1 − C(n−c_q, k)/C(n, k)],  n = ``num_samples`` per problem, c_q correct.

    Source: book eq. (pass-at-k); Chen et al. 2021, arXiv:2107.03374, eq. 1.

    Args:
        policy: a causal LM.
        tokenizer: its tokenizer.
        problems: list of :class:`rlbook.lm.Problem` (``.prompt``, ``.answer``).
        reward_fn: callable(prompt, completion) -> 1.0/0.0; default: exact match with
            ``answer + tokenizer.eos_token``.
        num_samples: n ≥ k samples per problem at ``temperature``.
        k: the k of pass@k.
        temperature: τ of the sampled metrics (greedy ignores it).
        max_new_tokens: completion budget.
        seed: seeds the sampler (results are reproducible).
        batch_size: completions per sampler call.
    Returns:
        dict with "greedy_accuracy", "pass@1", f"pass@{k}" (floats in [0, 1]), "num_correct"
        (np.ndarray (Q,) of correct samples per problem), and "length_correct" / "length_wrong"
        (mean tokens, EOS included, of the sampled completions that are right / wrong; NaN if none).
    Raises:
        ValueError: ``problems`` empty, or k outside [1, num_samples].
    """
    from rlbook.lm.tokenizer import encode_prompts, forbidden_token_ids

    if len(problems) == 0:
        raise ValueError("`problems` must be a non-empty list of Problem")
    if not 1 <= int(k) <= int(num_samples):
        raise ValueError(f"`k` must be in [1, num_samples={num_samples}]; got {k}")
    if reward_fn is None:
        answers = {q.prompt: q.answer for q in problems}

        def reward_fn(prompt, completion):
            return float(completion == answers[prompt] + tokenizer.eos_token)

    kwargs = sample_kwargs(tokenizer, forbidden_token_ids(tokenizer), max_new_tokens, temperature)
    generator = torch.Generator().manual_seed(int(seed))
    per_call = max(1, int(batch_size) // int(num_samples))
    greedy, counts, right, lengths = [], [], [], []
    for i in range(0, len(problems), per_call):
        chunk = problems[i : i + per_call]
        prompt_ids, prompt_mask = encode_prompts(tokenizer, [q.prompt for q in chunk])
        out = sample_completions(policy, prompt_ids, prompt_mask, num_samples=1, greedy=True, **kwargs)
        greedy += [reward_fn(q.prompt, o) for q, o in zip(chunk, out.texts)]
        out = sample_completions(policy, prompt_ids, prompt_mask, num_samples=num_samples, generator=generator, **kwargs)
        ok = [reward_fn(chunk[j // num_samples].prompt, o) for j, o in enumerate(out.texts)]
        counts += np.asarray(ok).reshape(len(chunk), num_samples).sum(axis=1).round().astype(int).tolist()
        right += ok
        lengths += out.completion_mask.sum(dim=1).tolist()
    counts, right, lengths = np.asarray(counts), np.asarray(right) > 0.5, np.asarray(lengths, dtype=float)
    return {
        "greedy_accuracy": float(np.mean(greedy)),
        "pass@1": float(np.mean(pass_at_k(num_samples, counts, 1))),
        f"pass@{k}": float(np.mean(pass_at_k(num_samples, counts, k))),
        "num_correct": counts,
        "length_correct": float(lengths[right].mean()) if right.any() else float("nan"),
        "length_wrong": float(lengths[~right].mean()) if (~right).any() else float("nan"),
    }
