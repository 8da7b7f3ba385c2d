"""What a GRPO step trains on: sampled groups, their rewards, and the sampling rules of DAPO and ScaleRL.

:func:`rlbook.algos.grpo.grpo_step` calls :func:`collect_rollouts` once per step. With the default
config it draws ``prompts_per_step`` prompts, samples G completions for each and scores them; three
config switches change *which groups* reach the loss, never the loss itself:

=========================  ===============================================================================
``GRPOConfig`` field       rule
=========================  ===============================================================================
``dynamic_sampling``       DAPO (Yu et al. 2025, arXiv:2503.14476, §3.2 eq. 11): keep only groups whose
                           rewards are not all equal; sample more prompts until ``prompts_per_step``
                           such groups are found, at most ``max_sampling_rounds`` rounds
``zero_variance_filter``   ScaleRL (Khatri et al. 2025, arXiv:2510.13786, §3): drop the all-equal groups
                           and train on the smaller batch (no resampling)
``retire_pass_rate``       ScaleRL's "no-positive-resampling": a prompt whose group pass rate exceeds
                           this value never returns to the training pool
=========================  ===============================================================================

The counts the book plots (completions generated per kept completion, sampling rounds, groups
kept) come back with the batch.

The sampler. By default the policy samples its own completions, so the log-probs it reports are the
trainer's π_old and ``Rollouts.sampler_log_probs`` is the same tensor as ``Rollouts.log_probs``.
A *sampler that is not the policy* (an inference engine, a rounded, tempered or stale copy) plugs
in as ``train_grpo(..., sampler=fn)``: ``fn`` draws the completions and reports its own per-token
log-probs (``sampler_log_probs``), and the trainer scores the same tokens with the policy
(``log_probs`` = its π_old, one no-grad forward), so that ``GRPOConfig.is_correction`` can
reweight the loss by π_old/π_s (:func:`rlbook.importance_correction`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import torch

from rlbook.lm.sampling import sample_completions
from rlbook.rewards import overlong_penalty

__all__ = ["Rollouts", "truncated_rows", "mixed_groups", "task_rewards", "collect_rollouts"]


@dataclass
class Rollouts:
    """A group-contiguous batch: N prompts, G completions each (row i·G + g answers prompt i).

    Attributes:
        problems: the N problems (``.prompt``, ``.answer``).
        prompt_ids, prompt_mask: (N, P) long / bool (left padding False), one row per prompt.
        completion_ids, completion_mask: (B, T) long / bool, B = N·G (True up to and including EOS).
        log_probs: (B, T) float32 log π_old of the sampled tokens by the trainer (0 where masked).
        texts: B decoded completions.
        rewards: (B,) float32 shaped reward; correct: (B,) float32 correctness (0/1).
        truncated: (B,) bool, the completion hit the token budget without an EOS.
        group_size: G.
        stats: counts of the sampling that produced the batch (see :func:`collect_rollouts`).
        sampler_log_probs: (B, T) float32 log π_s of the sampled tokens as the sampler reported
            them (0 where masked); the same tensor as ``log_probs`` when the policy sampled them.
    """

    problems: list
    prompt_ids: torch.Tensor
    prompt_mask: torch.Tensor
    completion_ids: torch.Tensor
    completion_mask: torch.Tensor
    log_probs: torch.Tensor
    texts: list
    rewards: torch.Tensor
    correct: torch.Tensor
    truncated: torch.Tensor
    group_size: int
    stats: dict = field(default_factory=dict)
    sampler_log_probs: torch.Tensor | None = None

    def __post_init__(self):
        if self.sampler_log_probs is None:  # the policy sampled: its log-probs are the sampler's
            self.sampler_log_probs = self.log_probs

    @property
    def num_groups(self) -> int:
        return len(self.problems)

    @property
    def lengths(self) -> torch.Tensor:
        """(B,) completion lengths in tokens, EOS included."""
        return self.completion_mask.sum(dim=-1)

    def select_groups(self, groups) -> "Rollouts":
        """The sub-batch of the listed group indices (rows follow their groups)."""
        groups = torch.as_tensor(groups, dtype=torch.long).reshape(-1)
        G = self.group_size
        rows = (groups[:, None] * G + torch.arange(G)).reshape(-1)
        pick = rows.tolist()
        return replace(
            self, problems=[self.problems[g] for g in groups.tolist()], prompt_ids=self.prompt_ids[groups],
            prompt_mask=self.prompt_mask[groups], completion_ids=self.completion_ids[rows],
            completion_mask=self.completion_mask[rows], log_probs=self.log_probs[rows], texts=[self.texts[i] for i in pick],
            rewards=self.rewards[rows], correct=self.correct[rows], truncated=self.truncated[rows],
            sampler_log_probs=None if self.sampler_log_probs is self.log_probs else self.sampler_log_probs[rows])


def truncated_rows(completion_ids, completion_mask, eos_token_id: int, max_new_tokens: int | None = None) -> torch.Tensor:
    """Which completions were cut off by the token budget: no EOS anywhere in the row.

    truncated_i = ¬∃t: completion_ids[i, t] = EOS ∧ completion_mask[i, t]

    Source: DAPO (Yu et al. 2025, arXiv:2503.14476), §3.4 "overlong filtering": these rows are the
    ones masked out of the loss.

    Args:
        completion_ids: (B, T) long.
        completion_mask: (B, T) bool, True up to and including the first EOS.
        eos_token_id: the end-of-sequence id.
        max_new_tokens: the token budget the completions were sampled with (checked if given).
    Returns:
        (B,) bool.
    Raises:
        ValueError: shapes differ or are not 2-D; a completion longer than ``max_new_tokens``
            (the budget the truncation is measured against).
    """
    ids, mask = torch.as_tensor(completion_ids), torch.as_tensor(completion_mask, dtype=torch.bool)
    if ids.dim() != 2 or ids.shape != mask.shape:
        raise ValueError(f"`completion_ids` and `completion_mask` must both be (B, T); got {tuple(ids.shape)} and {tuple(mask.shape)}")
    if max_new_tokens is not None and mask.shape[-1] > int(max_new_tokens) and bool(mask[:, int(max_new_tokens):].any()):
        raise ValueError(f"`completion_mask` has a completion of {int(mask.sum(dim=-1).max())} tokens, beyond the budget "
                         f"`max_new_tokens`={max_new_tokens}")
    return ~((ids == int(eos_token_id)) & mask).any(dim=-1)


def mixed_groups(rewards, group_size: int) -> torch.Tensor:
    """(N,) bool: the groups whose G rewards are not all equal (they carry a learning signal).

    Raises:
        ValueError: ``rewards`` is not 1-D with a length divisible by ``group_size`` ≥ 1.
    """
    r = torch.as_tensor(rewards)
    if r.dim() != 1 or int(group_size) < 1 or r.numel() % int(group_size):
        raise ValueError(f"`rewards` must be 1-D with length divisible by `group_size`={group_size}; got shape {tuple(r.shape)}")
    grouped = r.reshape(-1, int(group_size))
    return ~(grouped == grouped[:, :1]).all(dim=1)


def _draw_problems(task, num: int, generator, retired: set | None, max_tries: int = 8) -> list:
    """``num`` training problems; prompts in ``retired`` are redrawn (up to ``max_tries`` times each)."""
    problems = task.sample_problems(num, generator)
    if not retired:
        return problems
    for _ in range(max_tries):
        stale = [i for i, p in enumerate(problems) if p.prompt in retired]
        if not stale:
            break
        fresh = task.sample_problems(len(stale), generator)
        for i, p in zip(stale, fresh):
            problems[i] = p
    return problems


def task_rewards(task, prompts, completions) -> torch.Tensor:
    """The task's reward of B completions: ``task.reward_batch`` if the task has one, else ``task.reward`` per completion.

    A task whose reward is a model's forward pass (:class:`rlbook.lm.ProxyRewardTask`) scores a
    batch far faster than one completion at a time; a task that defines ``reward_batch(prompts,
    completions)`` must return what ``reward`` returns for each pair (the GRPO tests check it for
    the proxy task: equal training histories and weights either way). Values are rounded to
    float32 the same way on both paths.

    Args:
        task: has ``reward(prompt, completion) -> float`` and optionally ``reward_batch(prompts,
            completions) -> (B,)`` floats (a list, array or tensor).
        prompts, completions: B strings each, row i scored as (prompts[i], completions[i]).
    Returns:
        (B,) float32 tensor, reward units of the task.
    Raises:
        ValueError: ``reward_batch`` returned a number of values other than B.
    """
    batch = getattr(task, "reward_batch", None)
    if batch is None:
        return torch.tensor([task.reward(p, o) for p, o in zip(prompts, completions)], dtype=torch.float32)
    values = batch(list(prompts), list(completions))
    values = np.asarray(values.detach().cpu() if isinstance(values, torch.Tensor) else values, dtype=np.float64)
    if values.shape != (len(prompts),):
        raise ValueError(f"`task.reward_batch` must return one value per completion, shape ({len(prompts)},); "
                         f"got shape {values.shape}")
    return torch.tensor(values, dtype=torch.float32)


def _score(task, prompts, texts, lengths, config):
    """Rewards (B,) float32 = correctness (+ format, + soft overlong punishment), and correctness (B,)."""
    correct = task_rewards(task, prompts, texts)
    rewards = correct.clone()
    if config.format_coef:
        rewards += config.format_coef * torch.tensor([task.format_reward(p, o) for p, o in zip(prompts, texts)])
    if config.overlong_cache_length:
        rewards += overlong_penalty(lengths.cpu(), config.max_new_tokens, config.overlong_cache_length).float()
    return rewards, correct


def sample_kwargs(tokenizer, forbidden_ids, max_new_tokens, temperature) -> dict:
    """The keyword arguments of :func:`rlbook.lm.sample_completions` for this tokenizer and budget."""
    return dict(
        max_new_tokens=max_new_tokens, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id or 0,
        forbidden_ids=forbidden_ids, temperature=temperature, tokenizer=tokenizer,
    )


def sample_groups(policy, tokenizer, task, problems, config, generator, forbidden_ids, sampler=None) -> Rollouts:
    """Sample G = ``config.group_size`` completions for each problem and score them.

    ``sampler`` None: the current policy samples (:func:`rlbook.lm.sample_completions`), and its
    log-probs are both ``log_probs`` and ``sampler_log_probs``. Otherwise ``sampler`` is called
    like :func:`rlbook.lm.sample_completions` (``sampler(policy, prompt_ids, prompt_mask,
    num_samples=G, generator=..., max_new_tokens=..., eos_token_id=..., pad_token_id=...,
    forbidden_ids=..., temperature=..., tokenizer=...)``) and must return the same fields
    (``completion_ids``, ``completion_mask``, ``log_probs``, ``texts``, ``lengths``); its
    ``log_probs`` become ``sampler_log_probs`` and the trainer's π_old is recomputed with
    :func:`rlbook.lm.completion_log_probs` (no grad, at ``config.temperature``).

    Raises:
        ValueError: the sampler's ``log_probs`` do not have the shape of its ``completion_ids``.
    """
    from rlbook.lm.logprobs import completion_log_probs
    from rlbook.lm.tokenizer import encode_prompts

    G = config.group_size
    prompt_ids, prompt_mask = encode_prompts(tokenizer, [p.prompt for p in problems])
    draw = sample_completions if sampler is None else sampler
    batch = draw(policy, prompt_ids, prompt_mask, num_samples=G, generator=generator,
                 **sample_kwargs(tokenizer, forbidden_ids, config.max_new_tokens, config.temperature))
    log_probs = sampler_log_probs = batch.log_probs
    if sampler is not None:  # the trainer scores the sampler's tokens itself: π_old
        if tuple(sampler_log_probs.shape) != tuple(batch.completion_ids.shape):
            raise ValueError(f"`sampler` must return log_probs of shape {tuple(batch.completion_ids.shape)} (its "
                             f"completion_ids); got {tuple(sampler_log_probs.shape)}")
        device = next(policy.parameters()).device
        with torch.no_grad():
            log_probs = completion_log_probs(policy, prompt_ids.to(device), batch.completion_ids.to(device),
                                             prompt_mask.to(device), completion_mask=batch.completion_mask.to(device),
                                             temperature=config.temperature, forbidden_ids=forbidden_ids)
        log_probs = log_probs.to(sampler_log_probs.device, sampler_log_probs.dtype)
    prompts = [p.prompt for p in problems for _ in range(G)]
    rewards, correct = _score(task, prompts, batch.texts, batch.lengths, config)
    truncated = truncated_rows(batch.completion_ids, batch.completion_mask, tokenizer.eos_token_id, config.max_new_tokens).cpu()
    return Rollouts(list(problems), prompt_ids, prompt_mask, batch.completion_ids, batch.completion_mask,
                    log_probs, batch.texts, rewards, correct, truncated, G,
                    sampler_log_probs=None if sampler is None else sampler_log_probs)


def _pad_right(x: torch.Tensor, width: int, value) -> torch.Tensor:
    return x if x.shape[1] == width else torch.nn.functional.pad(x, (0, width - x.shape[1]), value=value)


def _concat(parts: list, tokenizer) -> Rollouts:
    """Join batches of several sampling rounds (completions right-padded to the longest)."""
    from rlbook.lm.tokenizer import encode_prompts

    if len(parts) == 1:
        return parts[0]
    problems = [p for r in parts for p in r.problems]
    prompt_ids, prompt_mask = encode_prompts(tokenizer, [p.prompt for p in problems])
    width = max(r.completion_ids.shape[1] for r in parts)
    pad = tokenizer.pad_token_id or 0
    cat = lambda name, value: torch.cat([_pad_right(getattr(r, name), width, value) for r in parts])  # noqa: E731
    own = all(r.sampler_log_probs is r.log_probs for r in parts)  # the policy sampled every part
    return Rollouts(problems, prompt_ids, prompt_mask, cat("completion_ids", pad), cat("completion_mask", False),
                    cat("log_probs", 0.0), [t for r in parts for t in r.texts], torch.cat([r.rewards for r in parts]),
                    torch.cat([r.correct for r in parts]), torch.cat([r.truncated for r in parts]), parts[0].group_size,
                    sampler_log_probs=None if own else cat("sampler_log_probs", 0.0))


def collect_rollouts(policy, tokenizer, task, config, generator, forbidden_ids, retired: set | None = None,
                     sampler=None) -> Rollouts:
    """The batch one GRPO step trains on, after DAPO's / ScaleRL's sampling rules (module docstring).

    Round k draws ``prompts_per_step`` prompts (retired ones redrawn) and samples G completions
    each. Without ``dynamic_sampling`` one round is the batch (``zero_variance_filter`` then drops
    its all-equal groups). With it, only mixed groups are kept, rounds repeat until
    ``prompts_per_step`` mixed groups are found or ``max_sampling_rounds`` rounds are spent, and
    the batch is the first ``prompts_per_step`` mixed groups (fewer if the cap was hit; possibly
    none, in which case the step makes no update).

    Args:
        policy, tokenizer, task, config: as :func:`rlbook.train_grpo`.
        generator: torch.Generator for the prompt draws and the samples.
        forbidden_ids: token ids the sampler never emits.
        retired: prompts excluded from the pool; updated in place with the prompts whose group
            pass rate exceeds ``config.retire_pass_rate``.
        sampler: None (the policy samples) or a sampler that is not the policy (:func:`sample_groups`).
    Returns:
        :class:`Rollouts`; ``stats`` holds ``sampled`` (a :class:`Rollouts` of everything
        sampled in the first round, for the step's reward and length metrics), ``generated``
        (completions sampled in all rounds), ``rounds`` and ``kept_groups``.
    """
    G, N = config.group_size, config.prompts_per_step
    kept, num_kept, generated, first = [], 0, 0, None
    rounds = config.max_sampling_rounds if config.dynamic_sampling else 1
    for round_index in range(rounds):
        batch = sample_groups(policy, tokenizer, task, _draw_problems(task, N, generator, retired), config, generator,
                              forbidden_ids, sampler=sampler)
        generated += batch.num_groups * G
        first = batch if first is None else first
        if retired is not None and config.retire_pass_rate is not None:
            pass_rate = batch.correct.reshape(-1, G).mean(dim=1)
            retired.update(p.prompt for p, rate in zip(batch.problems, pass_rate.tolist()) if rate > config.retire_pass_rate)
        if config.dynamic_sampling or config.zero_variance_filter:
            batch = batch.select_groups(torch.nonzero(mixed_groups(batch.rewards, G)).reshape(-1))
        kept.append(batch)
        num_kept += batch.num_groups
        if num_kept >= N:
            break
    out = _concat([b for b in kept if b.num_groups], tokenizer) if num_kept else kept[0]
    if out.num_groups > N:
        out = out.select_groups(range(N))
    out.stats = {"sampled": first, "generated": generated, "rounds": round_index + 1, "kept_groups": out.num_groups}
    return out
