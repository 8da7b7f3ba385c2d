"""Mutation check of the trainer configs: does some fast test fail when a config field is ignored,
inverted or mis-wired?

Each entry of ``MUTATIONS`` is one realistic single-line bug in the code that reads a field of
``GRPOConfig``, ``PPOConfig``, ``TRPOConfig``, ``ReinforceConfig``, ``SFTConfig``, ``DPOConfig`` or
``RewardModelConfig`` (the field replaced by its default, a comparison flipped at its boundary, two
sibling fields swapped), with the tests meant to catch it (``TARGETS``; ``--broad`` runs the
config's whole group of tests in ``tests/test_config_fields.py`` instead). The script copies the
repository, applies the mutations one at a time, runs the tests with ``pytest -x`` and reports which
test caught each one. The repository itself is never modified.

    python tools/mutate_config_fields.py                 # every mutation
    python tools/mutate_config_fields.py g45 p08         # these ids only
    python tools/mutate_config_fields.py --broad GRPO    # the GRPO mutations, broad selection

A mutation whose source line is no longer found is reported as "pattern not found" (update the
table when the code moves). Each run is a fork (POSIX only) of a parent that has imported torch and
transformers, which saves the start-up time of a fresh interpreter per mutation.

Measured when written (November 2026): all 144 mutations caught by their targeted tests, about 10 s
each on an idle 2-core machine; the unmutated copy passes every selection. g70-g81 (the entropy
switches, added later): 12 of 12 caught by ``tests/test_entropy_switches.py``, about 4 s each.
d01-d22 (``DPOConfig``, with the loss formulas of ``rlbook/preferences.py`` its fields feed) and
m01-m09 (``RewardModelConfig``), added later: 31 of 31 caught by their targeted tests in
``tests/test_config_fields.py``, about 6 s each (3.2 min in all) on the 2-core machine while two
other jobs ran. g82-g93 (``GRPOConfig``'s ``sampler_*`` switches and ``eval_steps``) and t24-t25
(``TRPOConfig.stop_at_return``), added later: 14 of 14 caught by their targeted tests, about 6 s each on
the 2-core machine while a CI rehearsal ran; three (g85, g87, t25: the top-p and top-k boundaries of
:func:`rlbook.sampler_log_probs` and the ≥ of the stop) needed a boundary case or a test of the
closed form added to the targets first. The table now holds 208 mutations.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

F = "tests/test_config_fields.py"
G, R, C, P, T, RE, S, D = ("rlbook/algos/grpo.py", "rlbook/algos/grpo_rollouts.py", "rlbook/algos/grpo_config.py",
                           "rlbook/algos/ppo.py", "rlbook/algos/trpo.py", "rlbook/algos/reinforce.py", "rlbook/lm/sft.py",
                           "rlbook/dppo.py")
TV = "tests/test_grpo_variants.py"
TU = "tests/test_train_updates.py"
TPT = "tests/test_ppo_trpo_train.py"
TRM = "tests/test_grpo_reward_model.py"
TIC = "tests/test_is_corrections.py"
TES = "tests/test_entropy_switches.py"
TMS, TM, TGT = "tests/test_mismatched_sampler.py", "tests/test_mismatch.py", "tests/test_grpo_train.py"
MS, H = "rlbook/mismatch.py", "rlbook/history.py"
DP, RM, PREF = "rlbook/algos/dpo.py", "rlbook/lm/reward_model.py", "rlbook/preferences.py"

# the broad selection of each config (--broad)
grpo = [F, "-k", "grpo or dppo"]
grpo_entropy = [F, TES, "-k", "grpo or dppo or entropy or cov"]  # the entropy switches' tests name no "grpo"
# nor do the sampler switches' tests and the sampler's closed forms
grpo_sampler = [F, TMS, TM, "-k", "grpo or dppo or mismatched_sampler or closed_form"]
ppo = [F, "-k", "ppo or every_trainer"]
trpo = [F, "-k", "trpo or every_trainer"]
rein = [F, "-k", "reinforce or every_trainer"]
sft = [F, "-k", "sft or every_trainer"]
dpo = [F, "-k", "dpo or every_trainer"]
rmodel = [F, "-k", "reward_model or every_trainer"]

# (id, config, field, kind, file, the line(s) as written, the mutant, broad selection)
MUTATIONS = [
    # ---------------------------------------------------------------- GRPOConfig
    ("g01", "GRPO", "group_size/prompts_per_step", "swap", R, "G, N = config.group_size, config.prompts_per_step",
     "G, N = config.prompts_per_step, config.group_size", grpo),
    ("g02", "GRPO", "group_size", "mis-wire (advantages)", G, "    G = config.group_size\n    advantages",
     "    G = config.prompts_per_step\n    advantages", grpo),
    ("g03", "GRPO", "group_size", "mis-wire (prompt_mean)", G, "partial(prompt_mean, group_size=config.group_size)",
     "partial(prompt_mean, group_size=config.prompts_per_step)", grpo),
    ("g04", "GRPO", "prompts_per_step", "ignore", R, "G, N = config.group_size, config.prompts_per_step",
     "G, N = config.group_size, 4", grpo),
    ("g05", "GRPO", "num_steps", "off by one", G, "range(config.num_steps)", "range(config.num_steps + 1)", grpo),
    ("g06", "GRPO", "lr", "ignore", G, "lr=config.lr, weight_decay=0.0", "lr=2e-4, weight_decay=0.0", grpo),
    ("g07", "GRPO", "clip_eps_low/high", "swap", G, "(config.clip_eps_low, high), agg", "(high, config.clip_eps_low), agg", grpo),
    ("g08", "GRPO", "clip_eps_high", "ignore", G, "high = config.clip_eps_low if config.clip_eps_high is None else config.clip_eps_high",
     "high = config.clip_eps_low", grpo),
    ("g09", "GRPO", "clip_eps_low", "ignore", G, "(config.clip_eps_low, high), agg", "(0.2, high), agg", grpo),
    ("g10", "GRPO", "kl_coef", "ignore", G, "kl_coef=config.kl_coef,", "kl_coef=0.0,", grpo + [TU]),
    ("g11", "GRPO", "kl_coef", "invert", G, "kl_coef=config.kl_coef,", "kl_coef=-config.kl_coef,", grpo + [TU]),
    ("g12", "GRPO", "num_inner_epochs", "ignore", G, "range(config.num_inner_epochs)", "range(1)", grpo + [TV, "-k", "epochs"]),
    ("g13", "GRPO", "num_minibatches", "ignore", G, "_minibatches(batch.num_groups, config.num_minibatches, config.group_size)",
     "_minibatches(batch.num_groups, 1, config.group_size)", grpo + [TV, "-k", "epochs or magistral"]),
    ("g14", "GRPO", "max_new_tokens", "ignore (sampler)", R, "**sample_kwargs(tokenizer, forbidden_ids, config.max_new_tokens, config.temperature)",
     "**sample_kwargs(tokenizer, forbidden_ids, 8, config.temperature)", grpo),
    ("g15", "GRPO", "max_new_tokens", "ignore (fixed_length_mean)", G, "max_length=config.max_new_tokens", "max_length=8", grpo),
    ("g16", "GRPO", "temperature", "ignore (sampler)", R, "forbidden_ids, config.max_new_tokens, config.temperature)",
     "forbidden_ids, config.max_new_tokens, 1.0)", grpo),
    ("g17", "GRPO", "temperature", "ignore (scorer)", G, "scoring = dict(temperature=config.temperature,", "scoring = dict(temperature=1.0,", grpo),
    ("g18", "GRPO", "loss_aggregation", "ignore", G, "    agg = config.loss_aggregation\n", "    agg = 'seq_mean_token_mean'\n", grpo),
    ("g19", "GRPO", "advantage_estimator", "mis-wire (dr_grpo scaled)", C, '"dr_grpo": functools.partial(group_relative_advantages, scale="none")',
     '"dr_grpo": functools.partial(group_relative_advantages, scale="std")', grpo),
    ("g20", "GRPO", "advantage_estimator", "mis-wire (rloo→maxrl)", C, '"rloo": leave_one_out_advantages,', '"rloo": maxrl_advantages,', grpo),
    ("g21", "GRPO", "advantage_estimator", "mis-wire (magistral whole batch)", G,
     "torch.cat([adv_fn(batch.rewards[rows], G) for _, rows in minibatches])", "adv_fn(batch.rewards, G)", grpo + [TV, "-k", "magistral"]),
    ("g22", "GRPO", "advantage_std", "ignore", G, "adv = functools.partial(adv, std=config.advantage_std)",
     "adv = functools.partial(adv, std='population')", grpo),
    ("g23", "GRPO", "per_token_loss", "mis-wire (cispo)", C, '"cispo": "cispo"', '"cispo": "grpo_clip"', grpo),
    ("g24", "GRPO", "per_token_loss", "mis-wire (dppo)", C, '"dppo": "dppo"}', '"dppo": "grpo_clip"}', grpo),
    ("g25", "GRPO", "divergence", "ignore", G, "divergence=config.divergence)", "divergence='binary_tv')", grpo),
    ("g26", "GRPO", "divergence_threshold", "ignore", G, "divergence_threshold=config.divergence_threshold,",
     "divergence_threshold=0.15,", grpo),
    ("g27", "GRPO", "divergence_threshold", "invert (≥ at the boundary)", D, "old_log_probs) > threshold", "old_log_probs) >= threshold", grpo),
    ("g28", "GRPO", "gamma/gae_lambda", "swap", G, "config.gamma,\n                              config.gae_lambda)",
     "config.gae_lambda,\n                              config.gamma)", grpo),
    ("g29", "GRPO", "gamma", "ignore", G, "config.gamma,\n                              config.gae_lambda)",
     "1.0,\n                              config.gae_lambda)", grpo),
    ("g30", "GRPO", "gae_lambda", "ignore", G, "config.gamma,\n                              config.gae_lambda)",
     "config.gamma,\n                              0.95)", grpo),
    ("g31", "GRPO", "critic_lr", "ignore", G, "lr=config.critic_lr,", "lr=1e-3,", grpo),
    ("g32", "GRPO", "format_coef", "invert", R, "rewards += config.format_coef *", "rewards -= config.format_coef *", grpo),
    ("g33", "GRPO", "overlong_cache_length", "invert (sign)", R, "rewards += overlong_penalty(", "rewards -= overlong_penalty(", grpo),
    ("g34", "GRPO", "overlong_cache_length", "ignore", R, "    if config.overlong_cache_length:\n", "    if False:\n", grpo),
    ("g35", "GRPO", "overlong_cache_length", "mis-wire (fixed zone)", R,
     "config.max_new_tokens, config.overlong_cache_length).float()", "config.max_new_tokens, 1).float()", grpo),
    ("g36", "GRPO", "overlong_filter", "ignore", G, "if config.overlong_filter else mask", "if False else mask", grpo + [TV, "-k", "overlong"]),
    ("g37", "GRPO", "dynamic_sampling", "ignore", R, "rounds = config.max_sampling_rounds if config.dynamic_sampling else 1",
     "rounds = 1", grpo + [TV, "-k", "dynamic"]),
    ("g38", "GRPO", "max_sampling_rounds", "ignore", R, "rounds = config.max_sampling_rounds if config.dynamic_sampling else 1",
     "rounds = 4 if config.dynamic_sampling else 1", grpo + [TV, "-k", "dynamic"]),
    ("g39", "GRPO", "zero_variance_filter", "ignore", R, "if config.dynamic_sampling or config.zero_variance_filter:",
     "if config.dynamic_sampling:", grpo + [TV, "-k", "zero_variance"]),
    ("g40", "GRPO", "retire_pass_rate", "invert (≥ at the boundary)", R, "if rate > config.retire_pass_rate)",
     "if rate >= config.retire_pass_rate)", grpo + [TV, "-k", "retired"]),
    ("g41", "GRPO", "retire_pass_rate", "ignore", R, "if retired is not None and config.retire_pass_rate is not None:",
     "if False:", grpo + [TV, "-k", "retired"]),
    ("g42", "GRPO", "ref_reset_every", "ignore", G,
     "reset = config.ref_reset_every is not None and step > 0 and step % config.ref_reset_every == 0", "reset = False",
     grpo + [TV, "-k", "prorl"]),
    ("g43", "GRPO", "fp32_lm_head", "ignore", G, "    if config.fp32_lm_head:\n", "    if False:\n", grpo),
    ("g44", "GRPO", "max_completions", "invert (> at the boundary)", G, "generated >= config.max_completions",
     "generated > config.max_completions", grpo),
    ("g45", "GRPO", "max_grad_norm", "ignore (policy)", G, "clip_grad_norm_(policy.parameters(), config.max_grad_norm)",
     "clip_grad_norm_(policy.parameters(), 1.0)", grpo),
    ("g46", "GRPO", "max_grad_norm", "ignore (critic)", G, "clip_grad_norm_(critic.parameters(), config.max_grad_norm)",
     "clip_grad_norm_(critic.parameters(), 1.0)", grpo),
    ("g47", "GRPO", "log_ref_kl", "ignore", G, "need_ref = config.kl_coef > 0 or config.log_ref_kl or", "need_ref = config.kl_coef > 0 or True or", grpo),
    ("g48", "GRPO", "eval_every", "ignore", G, "(config.eval_every and step % config.eval_every == 0)",
     "(config.eval_every and step % 5 == 0)", grpo),
    ("g49", "GRPO", "eval_num_problems", "ignore", G, "task.held_out_problems(config.eval_num_problems)", "task.held_out_problems(200)", grpo),
    ("g50", "GRPO", "seed", "ignore", G, "generator = torch.Generator().manual_seed(config.seed)", "generator = torch.Generator().manual_seed(0)", grpo),
    ("g51", "GRPO", "device", "ignore", G, "device = get_device(config.device)", "device = get_device(None)", grpo),
    ("g52", "GRPO", "recipe dapo", "token_mean → seq_mean", C, '_DAPO = dict(clip_eps_high=0.28, loss_aggregation="token_mean"',
     '_DAPO = dict(clip_eps_high=0.28, loss_aggregation="seq_mean_token_mean"', grpo),
    ("g53", "GRPO", "recipe magistral", "ε_high", C, '"clip_eps_high": 0.25', '"clip_eps_high": 0.28', grpo),
    ("g54", "GRPO", "recipe gspo", "ε_high", C, "clip_eps_low=3e-4, clip_eps_high=4e-4", "clip_eps_low=3e-4, clip_eps_high=3e-4", grpo),
    ("g55", "GRPO", "recipe grpo", "β", C, '"grpo": dict(kl_coef=0.04)', '"grpo": dict(kl_coef=0.0)', grpo),
    ("g56", "GRPO", "recipe dapo", "overlong zone", C, "overlong_cache_length=4, dynamic_sampling=True)",
     "overlong_cache_length=2, dynamic_sampling=True)", grpo),
    ("g57", "GRPO", "dynamic_sampling", "invert (> at the boundary)", R, "if num_kept >= N:", "if num_kept > N:", grpo),
    ("g58", "GRPO", "log_ref_kl", "mis-wire (β ≥ 0 keeps a reference)", G, "need_ref = config.kl_coef > 0 or",
     "need_ref = config.kl_coef >= 0 or", grpo),
    ("g59", "GRPO", "reward_source", "ignore", G, '    if config.reward_source == "reward_model":\n        from',
     "    if False:\n        from", grpo + [TRM]),
    ("g60", "GRPO", "reward_source", "mis-wire (evaluation on the proxy)", G,
     "eval_problems, task, config)\n        reset", "eval_problems, train_task, config)\n        reset", grpo + [TRM]),
    ("g61", "GRPO", "is_correction", "ignore", G, "is_correction=config.is_correction, is_cap",
     'is_correction="none", is_cap', grpo + [TIC]),
    ("g62", "GRPO", "is_cap", "ignore", G, "is_cap=config.is_cap)", "is_cap=2.0)", grpo + [TIC]),
    ("g63", "GRPO", "is_correction", "mis-wire (π_old as the sampler)", G,
     "sampler_log_probs = batch.sampler_log_probs.to(device) if correcting",
     "sampler_log_probs = batch.log_probs.to(device) if correcting", grpo + [TIC]),
    ("g64", "GRPO", "is_correction", "mis-wire (the sampler's log-probs as π_old)", R,
     "    if sampler is not None:  # the trainer scores", "    if False:  # the trainer scores", grpo + [TIC]),
    ("g65", "GRPO", "is_cap", "invert (C < 1 accepted)", C, 'check_in_range("is_cap", self.is_cap, 1.0,',
     'check_in_range("is_cap", self.is_cap, 0.0,', grpo + [TIC]),
    ("g70", "GRPO", "entropy_coef", "ignore", G, "out.update(entropy=entropy, entropy_coef=config.entropy_coef,",
     "out.update(entropy=entropy, entropy_coef=0.0,", grpo_entropy),
    ("g71", "GRPO", "entropy_coef", "invert (a penalty, not a bonus)", "rlbook/steps.py",
     "loss = loss - entropy_coef * (entropy", "loss = loss + entropy_coef * (entropy", grpo_entropy),
    ("g72", "GRPO", "entropy_coef", "mis-wire (entropy detached)", G, "out.update(entropy=entropy,",
     "out.update(entropy=entropy.detach(),", grpo_entropy),
    ("g73", "GRPO", "top_entropy_quantile", "ignore", G, "top_entropy_quantile=config.top_entropy_quantile)",
     "top_entropy_quantile=1.0)", grpo_entropy),
    ("g74", "GRPO", "top_entropy_quantile", "invert (the lowest-entropy tokens)", "rlbook/steps.py",
     "high_entropy_mask(entropy, mask, top_entropy_quantile)", "high_entropy_mask(-entropy, mask, top_entropy_quantile)",
     grpo_entropy),
    ("g75", "GRPO", "top_entropy_quantile", "range (0 and > 1 accepted)", C,
     'for name in ("top_entropy_quantile", "clip_cov_ratio", "kl_cov_ratio"):',
     'for name in ("clip_cov_ratio", "kl_cov_ratio"):', grpo_entropy),
    ("g76", "GRPO", "entropy_control", "ignore", G, 'if config.entropy_control == "clip_cov":', "if False:", grpo_entropy),
    ("g77", "GRPO", "clip_cov_ratio", "ignore", G, "clip_cov_ratio=config.clip_cov_ratio,", "clip_cov_ratio=2e-4,",
     grpo_entropy),
    ("g78", "GRPO", "clip_cov_lb", "ignore", G, "clip_cov_lb=config.clip_cov_lb,", "clip_cov_lb=1.0,", grpo_entropy),
    ("g79", "GRPO", "clip_cov_ub", "ignore", G, "clip_cov_ub=config.clip_cov_ub,", "clip_cov_ub=5.0,", grpo_entropy),
    ("g80", "GRPO", "kl_cov_ratio", "ignore", G, "kl_cov_ratio=config.kl_cov_ratio,", "kl_cov_ratio=2e-3,", grpo_entropy),
    ("g81", "GRPO", "kl_cov_coef", "ignore", G, "kl_cov_coef=config.kl_cov_coef)", "kl_cov_coef=1.0)", grpo_entropy),
    ("g82", "GRPO", "sampler_temperature", "ignore", C, "fields = dict(temperature=self.sampler_temperature,",
     "fields = dict(temperature=None,", grpo_sampler),
    ("g83", "GRPO", "sampler_temperature", "mis-wire (the trainer's temperature samples)", MS,
     "tempered = _check_temperature(temperature) if self.temperature is None else self.temperature",
     "tempered = _check_temperature(temperature)", grpo_sampler),
    ("g84", "GRPO", "sampler_top_p", "ignore", C, "top_p=self.sampler_top_p,", "top_p=1.0,", grpo_sampler),
    ("g85", "GRPO", "sampler_top_p", "invert (≤ at the boundary: one token too many)", MS, "keep_sorted = before < top_p",
     "keep_sorted = before <= top_p", grpo_sampler),
    ("g86", "GRPO", "sampler_top_k", "ignore", C, "top_k=self.sampler_top_k,", "top_k=None,", grpo_sampler),
    ("g87", "GRPO", "sampler_top_k", "off by one (≤ drops the k-th token)", MS, "z = z.masked_fill(z < kth, -math.inf)",
     "z = z.masked_fill(z <= kth, -math.inf)", grpo_sampler),
    ("g88", "GRPO", "sampler_precision", "ignore", C, "precision=self.sampler_precision, lag=", "precision=None, lag=",
     grpo_sampler),
    ("g89", "GRPO", "sampler_precision", "the weight cast skipped", MS,
     "        if self.precision is not None:\n            with torch.no_grad():",
     "        if False:\n            with torch.no_grad():", grpo_sampler),
    ("g90", "GRPO", "sampler_lag", "ignore", C, "lag=self.sampler_lag)", "lag=0)", grpo_sampler),
    ("g91", "GRPO", "sampler_lag", "off by one (k − 1 versions back)", MS, "collections.deque(maxlen=self.lag + 1)",
     "collections.deque(maxlen=max(self.lag, 1))", grpo_sampler),
    ("g92", "GRPO", "eval_steps", "ignore", G, "or step in config.eval_steps)", "or False)", grpo + [TGT]),
    ("g93", "GRPO", "eval_steps", "ignore (no evaluation without eval_every)", G,
     "evaluating = bool(config.eval_every or config.eval_steps)", "evaluating = bool(config.eval_every)", grpo + [TGT]),
    # ---------------------------------------------------------------- PPOConfig
    ("p01", "PPO", "gamma/gae_lambda", "swap", P, "rollout.truncated, cfg.gamma, cfg.gae_lambda)", "rollout.truncated, cfg.gae_lambda, cfg.gamma)", ppo),
    ("p02", "PPO", "gamma", "ignore", P, "rollout.truncated, cfg.gamma, cfg.gae_lambda)", "rollout.truncated, 0.98, cfg.gae_lambda)", ppo),
    ("p03", "PPO", "gae_lambda", "ignore", P, "rollout.truncated, cfg.gamma, cfg.gae_lambda)", "rollout.truncated, cfg.gamma, 0.8)", ppo),
    ("p04", "PPO", "clip_eps_low/high", "swap", P, 'mb["old_log_probs"], adv, cfg.clip_eps_low, cfg.clip_eps_high)',
     'mb["old_log_probs"], adv, cfg.clip_eps_high or cfg.clip_eps_low, cfg.clip_eps_low)', ppo),
    ("p05", "PPO", "clip_eps_high", "ignore", P, 'mb["old_log_probs"], adv, cfg.clip_eps_low, cfg.clip_eps_high)',
     'mb["old_log_probs"], adv, cfg.clip_eps_low, None)', ppo),
    ("p06", "PPO", "clip_eps_low", "ignore", P, 'mb["old_log_probs"], adv, cfg.clip_eps_low, cfg.clip_eps_high)',
     'mb["old_log_probs"], adv, 0.2, cfg.clip_eps_high)', ppo),
    ("p07", "PPO", "clip_eps_high", "ignore (clip fraction)", P,
     "cfg.clip_eps_low if cfg.clip_eps_high is None else cfg.clip_eps_high)", "cfg.clip_eps_low)", ppo),
    ("p08", "PPO", "clip_value_eps", "ignore", P, 'mb["old_values"], cfg.clip_value_eps)', 'mb["old_values"], None)', ppo),
    ("p09", "PPO", "lr", "ignore", P, "lr = cfg.lr * (1.0 - update", "lr = 1e-3 * (1.0 - update", ppo),
    ("p10", "PPO", "lr_schedule", "invert", P, 'if cfg.lr_schedule == "linear" else 1.0', 'if cfg.lr_schedule != "linear" else 1.0', ppo),
    ("p11", "PPO", "lr", "logged, not applied", P, 'group["lr"] = lr', 'group["lr"] = cfg.lr', ppo),
    ("p12", "PPO", "num_steps", "ignore", P, "collect_rollout(state, policy_fn, model.value, cfg.num_steps)",
     "collect_rollout(state, policy_fn, model.value, 16)", ppo),
    ("p13", "PPO", "num_envs/seed", "swap", P, "make_cartpole_vector_env(cfg.num_envs, cfg.seed)", "make_cartpole_vector_env(cfg.seed, cfg.num_envs)", ppo),
    ("p14", "PPO", "num_epochs", "ignore", P, "range(config.num_epochs)", "range(1)", ppo + [TPT, "-k", "target_kl"]),
    ("p15", "PPO", "minibatch_size", "ignore", P, "range(0, batch_size, config.minibatch_size)", "range(0, batch_size, 64)",
     ppo + [TU, "-k", "ppo_update"]),
    ("p16", "PPO", "ent_coef", "invert", P, "- cfg.ent_coef * entropy", "+ cfg.ent_coef * entropy", ppo + [TU, "-k", "ppo"]),
    ("p17", "PPO", "vf_coef", "ignore", P, "cfg.vf_coef * v_loss", "0.5 * v_loss", ppo + [TU, "-k", "ppo"]),
    ("p18", "PPO", "max_grad_norm", "ignore", P,
     'max_norm = config.max_grad_norm if config.max_grad_norm is not None else float("inf")', 'max_norm = float("inf")',
     ppo + [TU, "-k", "ppo"]),
    ("p19", "PPO", "target_kl", "invert", P, "> config.target_kl:", "< config.target_kl:", ppo + [TPT, "-k", "target_kl"]),
    ("p20", "PPO", "norm_advantages", "ignore", P, "if cfg.norm_advantages and adv.numel() > 1:", "if adv.numel() > 1:",
     ppo + [TU, "-k", "ppo"]),
    ("p21", "PPO", "hidden_sizes", "ignore", P, "ActorCritic(4, 2, cfg.hidden_sizes, cfg.activation)", "ActorCritic(4, 2, (64, 64), cfg.activation)", ppo),
    ("p22", "PPO", "activation", "ignore", P, "ActorCritic(4, 2, cfg.hidden_sizes, cfg.activation)", "ActorCritic(4, 2, cfg.hidden_sizes, 'tanh')", ppo),
    ("p23", "PPO", "stop_window", "ignore", P, "steps_to_threshold(cfg.stop_at_return, cfg.stop_window) is not None",
     "steps_to_threshold(cfg.stop_at_return, 20) is not None", ppo),
    ("p24", "PPO", "stop_at_return", "ignore", P, "if cfg.stop_at_return is not None and hist.steps_to_threshold", "if False and hist.steps_to_threshold", ppo),
    ("p25", "PPO", "stop_after_env_steps", "invert (> at the boundary)", P, "state.env_steps >= cfg.stop_after_env_steps",
     "state.env_steps > cfg.stop_after_env_steps", ppo + [TPT, "-k", "stop_after"]),
    ("p26", "PPO", "total_env_steps", "off by one", P, "num_updates = math.ceil(cfg.total_env_steps / batch_size)",
     "num_updates = math.ceil(cfg.total_env_steps / batch_size) + 1", ppo + [TPT, "-k", "tiny"]),
    ("p27", "PPO", "seed", "ignore (torch)", P, "    torch.manual_seed(cfg.seed)\n", "    torch.manual_seed(0)\n", ppo),
    ("p28", "PPO", "seed", "ignore (generator)", P, "gen = torch.Generator().manual_seed(cfg.seed)", "gen = torch.Generator().manual_seed(0)", ppo),
    ("p29", "PPO", "seed", "ignore (envs)", P, "envs = make_cartpole_vector_env(cfg.num_envs, cfg.seed)", "envs = make_cartpole_vector_env(cfg.num_envs, 0)", ppo),
    ("p30", "PPO", "device", "ignore", P, "device = get_device(cfg.device)", "device = get_device(None)", ppo),
    ("p31", "PPO", "lr_schedule", "invert (1 − x ↔ x)", P, "(1.0 - update / num_updates", "(update / num_updates", ppo),
    # ---------------------------------------------------------------- TRPOConfig
    ("t01", "TRPO", "gamma/gae_lambda", "swap", T, "rollout.truncated, cfg.gamma, cfg.gae_lambda)", "rollout.truncated, cfg.gae_lambda, cfg.gamma)", trpo),
    ("t02", "TRPO", "gamma", "ignore", T, "rollout.truncated, cfg.gamma, cfg.gae_lambda)", "rollout.truncated, 0.99, cfg.gae_lambda)", trpo),
    ("t03", "TRPO", "gae_lambda", "ignore", T, "rollout.truncated, cfg.gamma, cfg.gae_lambda)", "rollout.truncated, cfg.gamma, 0.95)", trpo),
    ("t04", "TRPO", "max_kl", "ignore (step)", T, "cfg.max_kl, cfg.cg_iters)", "0.02, cfg.cg_iters)", trpo),
    ("t05", "TRPO", "max_kl", "ignore (line search)", T, "theta0, step, cfg.max_kl, expected,", "theta0, step, 0.02, expected,", trpo),
    ("t06", "TRPO", "damping", "ignore", T, "v, cfg.damping)", "v, 0.1)", trpo),
    ("t07", "TRPO", "cg_iters", "ignore", T, "cfg.max_kl, cfg.cg_iters)", "cfg.max_kl, 10)", trpo),
    ("t08", "TRPO", "backtrack_coef", "ignore", T, "cfg.backtrack_coef, cfg.max_backtracks, cfg.accept_ratio)",
     "0.8, cfg.max_backtracks, cfg.accept_ratio)", trpo),
    ("t09", "TRPO", "max_backtracks", "ignore", T, "cfg.backtrack_coef, cfg.max_backtracks, cfg.accept_ratio)",
     "cfg.backtrack_coef, 10, cfg.accept_ratio)", trpo),
    ("t10", "TRPO", "accept_ratio", "ignore", T, "cfg.backtrack_coef, cfg.max_backtracks, cfg.accept_ratio)",
     "cfg.backtrack_coef, cfg.max_backtracks, 0.1)", trpo),
    ("t11", "TRPO", "max_backtracks", "off by one", "rlbook/trpo.py", "for k in range(int(max_backtracks)):",
     "for k in range(int(max_backtracks) + 1):", trpo),
    ("t12", "TRPO", "critic_lr", "ignore", T, "lr=cfg.critic_lr)", "lr=1e-3)", trpo),
    ("t13", "TRPO", "critic_epochs", "ignore", T, "range(cfg.critic_epochs)", "range(10)", trpo),
    ("t14", "TRPO", "critic_minibatch_size", "ignore", T, "range(0, n, cfg.critic_minibatch_size)", "range(0, n, 128)", trpo),
    ("t15", "TRPO", "norm_advantages", "ignore", T, "        if cfg.norm_advantages:\n", "        if True:\n", trpo),
    ("t16", "TRPO", "hidden_sizes", "ignore", T, "ActorCritic(4, 2, cfg.hidden_sizes, cfg.activation)", "ActorCritic(4, 2, (64, 64), cfg.activation)", trpo),
    ("t17", "TRPO", "activation", "ignore", T, "ActorCritic(4, 2, cfg.hidden_sizes, cfg.activation)", "ActorCritic(4, 2, cfg.hidden_sizes, 'tanh')", trpo),
    ("t18", "TRPO", "stop_window", "ignore", T, "steps_to_threshold(cfg.stop_at_return, cfg.stop_window) is not None",
     "steps_to_threshold(cfg.stop_at_return, 20) is not None", trpo),
    ("t19", "TRPO", "num_steps", "ignore", T, "collect_rollout(state, policy_fn, model.value, cfg.num_steps)",
     "collect_rollout(state, policy_fn, model.value, 128)", trpo),
    ("t20", "TRPO", "num_envs", "ignore", T, "envs = make_cartpole_vector_env(cfg.num_envs, cfg.seed)", "envs = make_cartpole_vector_env(8, cfg.seed)", trpo),
    ("t21", "TRPO", "seed", "ignore (generator)", T, "gen = torch.Generator().manual_seed(cfg.seed)", "gen = torch.Generator().manual_seed(0)", trpo),
    ("t22", "TRPO", "total_env_steps", "off by one", T, "num_updates = math.ceil(cfg.total_env_steps / batch_size)",
     "num_updates = math.ceil(cfg.total_env_steps / batch_size) + 1", trpo),
    ("t23", "TRPO", "device", "ignore", T, "device = get_device(cfg.device)", "device = get_device(None)", trpo),
    ("t24", "TRPO", "stop_at_return", "ignore", T, "if cfg.stop_at_return is not None and hist.steps_to_threshold",
     "if False and hist.steps_to_threshold", trpo),
    ("t25", "TRPO", "stop_at_return", "invert (> at the boundary)", H, "            if r[i] >= threshold:",
     "            if r[i] > threshold:", trpo),
    # ---------------------------------------------------------------- ReinforceConfig
    ("r01", "REINFORCE", "return_kind", "invert", RE, 'fn = discounted_returns if return_kind == "total" else rewards_to_go',
     'fn = discounted_returns if return_kind != "total" else rewards_to_go', rein),
    ("r02", "REINFORCE", "gamma", "ignore (weights)", RE, "reinforce_weights(batch, cfg.return_kind, cfg.gamma)",
     "reinforce_weights(batch, cfg.return_kind, 0.99)", rein),
    ("r03", "REINFORCE", "gamma", "ignore (value targets)", RE, "rtg = rewards_to_go(batch.rewards, cfg.gamma,", "rtg = rewards_to_go(batch.rewards, 1.0,", rein),
    ("r04", "REINFORCE", "baseline", "ignore", RE, "b = baseline_values(cfg.baseline, weights,", "b = baseline_values('none', weights,", rein),
    ("r05", "REINFORCE", "normalize_advantages", "ignore", RE, "        if cfg.normalize_advantages:\n", "        if False:\n", rein),
    ("r06", "REINFORCE", "max_grad_norm", "ignore", RE, 'max_norm = cfg.max_grad_norm if cfg.max_grad_norm is not None else float("inf")',
     'max_norm = float("inf")', rein),
    ("r07", "REINFORCE", "lr", "ignore", RE, "torch.optim.Adam(policy.parameters(), lr=cfg.lr)", "torch.optim.Adam(policy.parameters(), lr=2e-2)", rein),
    ("r08", "REINFORCE", "value_lr/lr", "swap", RE, "torch.optim.Adam(value_fn.parameters(), lr=cfg.value_lr)",
     "torch.optim.Adam(value_fn.parameters(), lr=cfg.lr)", rein),
    ("r09", "REINFORCE", "value_epochs", "ignore", RE, "rtg, cfg.value_epochs)", "rtg, 20)", rein),
    ("r10", "REINFORCE", "hidden_sizes", "ignore", RE, "CategoricalMLPPolicy(hidden_sizes=tuple(cfg.hidden_sizes))",
     "CategoricalMLPPolicy(hidden_sizes=(64,))", rein),
    ("r11", "REINFORCE", "episodes_per_batch", "ignore", RE, "EpisodeBatcher(cfg.episodes_per_batch, seed=cfg.seed)",
     "EpisodeBatcher(8, seed=cfg.seed)", rein),
    ("r12", "REINFORCE", "total_env_steps", "invert (≤)", RE, "while batcher.total_steps < cfg.total_env_steps:",
     "while batcher.total_steps <= cfg.total_env_steps:", rein),
    ("r13", "REINFORCE", "stop_at_return", "window", RE, "len(hist.episode_returns) >= 20", "len(hist.episode_returns) >= 8", rein),
    ("r14", "REINFORCE", "stop_at_return", "ignore", RE, "if cfg.stop_at_return is not None and len(hist.episode_returns) >= 20",
     "if False and len(hist.episode_returns) >= 20", rein),
    ("r15", "REINFORCE", "seed", "ignore (torch)", RE, "    torch.manual_seed(cfg.seed)\n", "    torch.manual_seed(0)\n", rein),
    ("r16", "REINFORCE", "seed", "ignore (generator)", RE, "gen = torch.Generator().manual_seed(cfg.seed)", "gen = torch.Generator().manual_seed(0)", rein),
    ("r17", "REINFORCE", "seed", "ignore (envs)", RE, "EpisodeBatcher(cfg.episodes_per_batch, seed=cfg.seed)",
     "EpisodeBatcher(cfg.episodes_per_batch, seed=0)", rein),
    ("r18", "REINFORCE", "device", "ignore", RE, "device = get_device(cfg.device)", "device = get_device(None)", rein),
    ("r19", "REINFORCE", "baseline", "mis-wire (value → mean)", "rlbook/algos/reinforce.py", '    if kind == "value":\n        if value_fn is None:',
     '    if kind == "valuex":\n        if value_fn is None:', rein),
    # ---------------------------------------------------------------- SFTConfig
    ("s01", "SFT", "lr", "ignore", S, "lr=config.lr, weight_decay=config.weight_decay)", "lr=3e-3, weight_decay=config.weight_decay)", sft),
    ("s02", "SFT", "weight_decay", "ignore", S, "lr=config.lr, weight_decay=config.weight_decay)", "lr=config.lr, weight_decay=0.01)", sft),
    ("s03", "SFT", "warmup_steps", "ignore", S, "_lr_factor(s, config.warmup_steps, config.num_steps)", "_lr_factor(s, 30, config.num_steps)", sft),
    ("s04", "SFT", "warmup_steps", "off by one", S, "return (step + 1) / warmup", "return step / warmup", sft),
    ("s05", "SFT", "label_noise/carry_noise", "swap", S, "config.batch_size, config.label_noise, generator, config.carry_noise",
     "config.batch_size, config.carry_noise, generator, config.label_noise", sft),
    ("s06", "SFT", "carry_noise", "ignore", S, "config.batch_size, config.label_noise, generator, config.carry_noise",
     "config.batch_size, config.label_noise, generator, 0.0", sft),
    ("s07", "SFT", "label_noise", "ignore", S, "config.batch_size, config.label_noise, generator, config.carry_noise",
     "config.batch_size, 0.6, generator, config.carry_noise", sft),
    ("s08", "SFT", "batch_size", "ignore", S, "config.batch_size, config.label_noise, generator, config.carry_noise",
     "128, config.label_noise, generator, config.carry_noise", sft),
    ("s09", "SFT", "max_grad_norm", "ignore", S, "clip_grad_norm_(policy.parameters(), config.max_grad_norm)",
     "clip_grad_norm_(policy.parameters(), 1.0)", sft),
    ("s10", "SFT", "seed", "ignore", S, "generator = torch.Generator().manual_seed(config.seed)", "generator = torch.Generator().manual_seed(0)", sft),
    ("s11", "SFT", "num_steps", "off by one", S, "range(config.num_steps)", "range(config.num_steps + 1)", sft),
    ("s12", "SFT", "num_steps", "ignore (schedule horizon)", S, "_lr_factor(s, config.warmup_steps, config.num_steps)",
     "_lr_factor(s, config.warmup_steps, 550)", sft),
    ("s13", "SFT", "device", "ignore", S, "    device = get_device(config.device)\n    policy.to(device).eval()", "    device = get_device(None)\n    policy.to(device).eval()", sft),
    # ---------------------------------------------------------------- DPOConfig
    ("d01", "DPO", "loss_type", "ignore", DP, "loss_fn, needs_ref = DPO_LOSSES[config.loss_type]",
     'loss_fn, needs_ref = DPO_LOSSES["sigmoid"]', dpo),
    ("d02", "DPO", "beta", "ignore (sigmoid)", DP, "dpo_loss(c, r, ref_c, ref_r, cfg.beta, cfg.label_smoothing)",
     "dpo_loss(c, r, ref_c, ref_r, 0.1, cfg.label_smoothing)", dpo),
    ("d03", "DPO", "label_smoothing", "ignore", DP, "dpo_loss(c, r, ref_c, ref_r, cfg.beta, cfg.label_smoothing)",
     "dpo_loss(c, r, ref_c, ref_r, cfg.beta, 0.0)", dpo),
    ("d04", "DPO", "label_smoothing", "invert (sign of the ε term)", PREF, "- label_smoothing * F.logsigmoid(-logits)",
     "+ label_smoothing * F.logsigmoid(-logits)", dpo),
    ("d05", "DPO", "beta", "ignore (ipo)", DP, "ref_r / len_r, cfg.beta)", "ref_r / len_r, 0.1)", dpo),
    ("d06", "DPO", "loss_type", "mis-wire (ipo on sums)", DP, "ipo_loss(c / len_c, r / len_r, ref_c / len_c, ref_r / len_r, cfg.beta)",
     "ipo_loss(c, r, ref_c, ref_r, cfg.beta)", dpo),
    ("d07", "DPO", "beta", "mis-wire (ipo target 1/β)", PREF, "(h - 1.0 / (2.0 * beta)) ** 2", "(h - 1.0 / beta) ** 2", dpo),
    ("d08", "DPO", "beta/simpo_gamma", "swap", DP, "simpo_loss(c, r, cfg.beta, cfg.simpo_gamma, len_c, len_r)",
     "simpo_loss(c, r, cfg.simpo_gamma, cfg.beta, len_c, len_r)", dpo),
    ("d09", "DPO", "simpo_gamma", "ignore", DP, "simpo_loss(c, r, cfg.beta, cfg.simpo_gamma, len_c, len_r)",
     "simpo_loss(c, r, cfg.beta, 0.5, len_c, len_r)", dpo),
    ("d10", "DPO", "simpo_gamma", "invert", PREF, "beta * (chosen - rejected) - gamma)", "beta * (chosen - rejected) + gamma)", dpo),
    ("d11", "DPO", "loss_type", "mis-wire (simpo on sums)", DP, "simpo_loss(c, r, cfg.beta, cfg.simpo_gamma, len_c, len_r)",
     "simpo_loss(c, r, cfg.beta, cfg.simpo_gamma)", dpo),
    ("d12", "DPO", "orpo_lambda", "ignore", DP, "orpo_loss(c, r, cfg.orpo_lambda, len_c, len_r)",
     "orpo_loss(c, r, 0.1, len_c, len_r)", dpo),
    ("d13", "DPO", "orpo_lambda", "invert", PREF, "return -chosen - lam * F.logsigmoid", "return -chosen + lam * F.logsigmoid", dpo),
    ("d14", "DPO", "beta", "ignore (logged implicit reward)", DP, "implicit = config.beta * (", "implicit = 0.1 * (", dpo),
    ("d15", "DPO", "num_steps", "off by one", DP, "    for _ in range(config.num_steps):\n",
     "    for _ in range(config.num_steps + 1):\n", dpo),
    ("d16", "DPO", "batch_size", "ignore", DP, "pick = torch.randint(0, n, (config.batch_size,), generator=generator)",
     "pick = torch.randint(0, n, (32,), generator=generator)", dpo),
    ("d17", "DPO", "seed", "ignore", DP, "generator = torch.Generator().manual_seed(config.seed)",
     "generator = torch.Generator().manual_seed(0)", dpo),
    ("d18", "DPO", "lr", "ignore", DP, "lr=config.lr, weight_decay=config.weight_decay)",
     "lr=1e-4, weight_decay=config.weight_decay)", dpo),
    ("d19", "DPO", "weight_decay", "ignore", DP, "lr=config.lr, weight_decay=config.weight_decay)",
     "lr=config.lr, weight_decay=0.0)", dpo),
    ("d20", "DPO", "weight_decay", "mis-wire (L2 in Adam, not decoupled)", DP, "torch.optim.AdamW(policy.parameters()",
     "torch.optim.Adam(policy.parameters()", dpo),
    ("d21", "DPO", "max_grad_norm", "ignore", DP, "clip_grad_norm_(policy.parameters(), config.max_grad_norm)",
     "clip_grad_norm_(policy.parameters(), 1.0)", dpo),
    ("d22", "DPO", "device", "ignore", DP, "device = get_device(config.device)", "device = get_device(None)", dpo),
    # ---------------------------------------------------------------- RewardModelConfig
    ("m01", "RM", "num_steps", "off by one", RM, "range(config.num_steps), desc", "range(config.num_steps + 1), desc", rmodel),
    ("m02", "RM", "batch_size", "ignore", RM, "(config.batch_size,), generator=generator)", "(32,), generator=generator)",
     rmodel),
    ("m03", "RM", "seed", "ignore", RM, "generator = torch.Generator().manual_seed(config.seed)",
     "generator = torch.Generator().manual_seed(0)", rmodel),
    ("m04", "RM", "lr", "ignore", RM, "lr=config.lr, weight_decay=config.weight_decay)",
     "lr=1e-3, weight_decay=config.weight_decay)", rmodel),
    ("m05", "RM", "weight_decay", "ignore", RM, "lr=config.lr, weight_decay=config.weight_decay)",
     "lr=config.lr, weight_decay=0.0)", rmodel),
    ("m06", "RM", "weight_decay", "mis-wire (L2 in Adam, not decoupled)", RM, "torch.optim.AdamW(reward_model.parameters()",
     "torch.optim.Adam(reward_model.parameters()", rmodel),
    ("m07", "RM", "max_grad_norm", "ignore (the step's default: no clip)", RM,
     "reward_model_step(reward_model, optimizer, batch, config.max_grad_norm)", "reward_model_step(reward_model, optimizer, batch)",
     rmodel),
    ("m08", "RM", "max_grad_norm", "ignore (the config's default)", RM,
     "reward_model_step(reward_model, optimizer, batch, config.max_grad_norm)",
     "reward_model_step(reward_model, optimizer, batch, 1.0)", rmodel),
    ("m09", "RM", "device", "ignore", RM, "device = get_device(config.device)", "device = get_device(None)", rmodel),
]


def k(expr, *extra):
    return [F, "-k", expr, *extra]


# the tests meant to catch each mutation (run with -x)
TARGETS = {
    "g01": k("on_policy"), "g02": k("on_policy"), "g03": k("on_policy and prompt_mean"), "g04": k("on_policy"),
    "g05": k("eval_every"), "g06": k("adams_first_step"), "g07": k("off_policy"), "g08": k("off_policy"), "g09": k("off_policy"),
    "g10": [TU, "-k", "grpo_step_is_minus_lr"], "g11": [TU, "-k", "grpo_step_is_minus_lr"], "g12": k("off_policy"),
    "g13": [TV, "-k", "epochs"], "g14": k("max_new_tokens_is_the_budget"), "g15": k("on_policy and fixed_length"),
    "g16": k("temperature"), "g17": k("on_policy and temperature"), "g18": k("on_policy"), "g19": k("on_policy and dr_grpo"),
    "g20": k("on_policy and rloo"), "g21": [TV, "-k", "magistral_advantages_are_normalised"],
    "g22": k("on_policy and advantage_std"), "g23": k("off_policy and cispo"), "g24": k("off_policy and dppo"),
    "g25": k("off_policy and dppo"), "g26": k("off_policy and dppo"), "g27": k("dppo_threshold_is_strict"),
    "g28": k("ppo_critic_gae"), "g29": k("ppo_critic_gae"), "g30": k("ppo_critic_gae"), "g31": k("critic_lr"),
    "g32": k("format_reward"), "g33": k("overlong_penalty"), "g34": k("overlong_penalty"), "g35": k("overlong_penalty"),
    "g36": [TV, "-k", "overlong_filter"], "g37": [TV, "-k", "dynamic_sampling"], "g38": [TV, "-k", "dynamic_sampling"],
    "g39": [TV, "-k", "zero_variance"], "g40": k("retire_pass_rate_is_a_strict"), "g41": k("retire_pass_rate"),
    "g42": [TV, "-k", "prorl"], "g43": k("fp32_lm_head_is_applied"), "g44": k("max_completions_stops"),
    "g45": k("max_grad_norm_clips"), "g46": k("ppo_critic_gae"), "g47": k("log_ref_kl"), "g48": k("eval_every"),
    "g49": k("eval_every"), "g59": [TRM, "-k", "reward_source"], "g60": [TRM, "-k", "reward_source"],
    **{f"g{i}": [TIC, "-k", "tis_weighted_loss"] for i in (61, 62, 63, 64)}, "g65": [TIC, "-k", "config_validates"], **{f"g{i}": [TES] for i in range(70, 82)}, "g57": k("first_round_that_fills"), "g58": k("log_ref_kl"), "p31": k("train_ppo_gae"), "g50": k("seed_seeds"), "g51": k("every_trainer and grpo"),
    **{f"g{i}": k("recipes_are_the_published") for i in range(52, 57)},
    **{f"g{i}": [TMS, "-k", "config_switches_train_exactly"] for i in (82, 84, 88, 90)},
    "g83": [TMS, "-k", "reported_log_probs"], "g86": [TMS, "-k", "at_the_defaults"],
    # the sampler's own tests compare with rl.sampler_log_probs, so its boundaries are pinned by its closed forms
    "g85": [TM, "-k", "top_p_closed_form"], "g87": [TM, "-k", "closed_form_and_top_k"],
    "g89": [TMS, "-k", "precision_rounds"], "g91": [TMS, "-k", "lag_samples"],
    **{f"g{i}": [TGT, "-k", "eval_steps_add"] for i in (92, 93)},
    **{f"p{i:02d}": k("train_ppo_gae") for i in (1, 2, 3, 7, 9, 10, 11, 12, 13, 21, 22, 27, 28, 29)},
    **{f"p{i:02d}": k("ppo_minibatch_step_with_an_asymmetric") for i in (4, 5, 6, 8)},
    "p14": [TPT, "-k", "target_kl"], "p15": [TU, "-k", "ppo_update_zeroes"],
    **{f"p{i:02d}": [TU, "-k", "ppo_minibatch_loss_decomposes or clips_the_gradient"] for i in (16, 17, 18, 20)},
    "p19": [TPT, "-k", "target_kl"], "p23": k("stop_at_return_over"), "p24": k("stop_at_return_over"),
    "p25": [TPT, "-k", "stop_after"], "p26": [TPT, "-k", "ppo_tiny"], "p30": k("every_trainer and ppo"),
    **{f"t{i:02d}": k("train_trpo_gae") for i in (1, 2, 3, 12, 13, 14, 15, 16, 17, 19, 20, 21)},
    **{f"t{i:02d}": k("trpo_policy_update_is") for i in range(4, 12)},
    **{f"t{i}": k("stop_at_return_over") for i in (18, 24, 25)}, "t22": [TPT, "-k", "trpo_tiny"],
    "t23": k("every_trainer and trpo"),
    **{f"r{i:02d}": k("configured_estimator") for i in (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 15, 19)},
    "r11": k("episodes_per_batch"), "r12": k("reached_not_passed or episodes_per_batch"),
    "r13": k("full_window or stop_at_return_is_the_rolling"), "r14": k("stop_at_return_is_the_rolling"), "r16": k("seed_changes or configured_estimator"),
    "r17": k("seed_changes or configured_estimator"), "r18": k("every_trainer and reinforce"),
    **{f"s{i:02d}": k("train_sft_replays or weight_decay") for i in range(1, 13)}, "s13": k("every_trainer and sft"),
    **{f"d{i:02d}": k("preference_loss_is_the_closed_form") for i in range(1, 14)}, "d14": k("implicit_reward_margin"),
    **{f"d{i:02d}": k("draw_batch_size") for i in (15, 16, 17)},
    **{f"d{i:02d}": k("weight_decay_are_adamws") for i in (18, 19, 20)},
    "d21": k("dpo_and_reward_model_max_grad_norm"), "d22": k("every_trainer and dpo"),
    **{f"m{i:02d}": k("draw_batch_size") for i in (1, 2, 3)},
    **{f"m{i:02d}": k("weight_decay_are_adamws") for i in (4, 5, 6)},
    **{f"m{i:02d}": k("dpo_and_reward_model_max_grad_norm") for i in (7, 8)}, "m09": k("every_trainer and reward_model"),
}


def _run_forked(tests: list[str]) -> tuple[int, list[str]]:
    """pytest.main(tests) in a forked child (fresh rlbook import); its exit code and failing ids."""
    import pytest

    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        os.close(read)
        import io

        buf = io.StringIO()
        sys.stdout = sys.stderr = buf
        code = pytest.main(["-x", "-q", "-p", "no:cacheprovider", "-W", "ignore::UserWarning", *tests])
        failed = re.findall(r"^(?:FAILED|ERROR) (\S+)", buf.getvalue(), re.M)
        os.write(write, json.dumps([int(code), failed[:1]]).encode())
        os._exit(0)
    os.close(write)
    data = b""
    while chunk := os.read(read, 65536):
        data += chunk
    os.close(read)
    os.waitpid(pid, 0)
    return tuple(json.loads(data or b'[99, []]'))


def main(argv: list[str]) -> int:
    broad = "--broad" in argv
    wanted = {a for a in argv if a != "--broad"}
    chosen = [m for m in MUTATIONS if not wanted or m[0] in wanted or m[1] in wanted]
    copy = Path(tempfile.mkdtemp(prefix="rlbook-mutants-")) / "repo"
    shutil.copytree(ROOT, copy, ignore=shutil.ignore_patterns(".git", "runs", "__pycache__", ".ipynb_checkpoints"))
    os.chdir(copy)
    sys.path.insert(0, str(copy))
    sys.dont_write_bytecode = True
    import torch  # noqa: F401  (imported once, shared by the forked children)
    import transformers  # noqa: F401

    assert "rlbook" not in sys.modules  # each child imports the mutated copy
    rows = []
    for mid, config, field, kind, path, old, new, group in chosen:
        file = copy / path
        text = file.read_text()
        if text.count(old) != 1:
            rows.append(dict(id=mid, config=config, field=field, kind=kind, status="pattern not found", by="", seconds=0))
            print(json.dumps(rows[-1], ensure_ascii=False), flush=True)
            continue
        file.write_text(text.replace(old, new))
        start = time.time()
        try:
            code, failed = _run_forked(group if broad else TARGETS.get(mid, group))
        finally:
            file.write_text(text)
        rows.append(dict(id=mid, config=config, field=field, kind=kind, status="caught" if code else "NOT CAUGHT",
                         by=failed[0] if failed else (f"(exit {code})" if code else ""), seconds=round(time.time() - start, 1)))
        print(json.dumps(rows[-1], ensure_ascii=False), flush=True)
    shutil.rmtree(copy.parent, ignore_errors=True)
    run = [r for r in rows if r["status"] != "pattern not found"]
    print(f"\n{sum(r['status'] == 'caught' for r in run)} of {len(run)} mutations caught; "
          f"{len(rows) - len(run)} patterns not found")
    return 0 if all(r["status"] == "caught" for r in run) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
