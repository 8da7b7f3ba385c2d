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

Variants are configs, not code paths (STYLE rule 5). Each config field names one orthogonal part:

=================  ===========================================================================
part               choices (``GRPOConfig`` field = value)
=================  ===========================================================================
advantage          ``advantage_estimator`` = "grpo" (r−mean)/std | "dr_grpo" r−mean | "rloo" |
                   "maxrl" | any callable(rewards (B,), group_size) -> (B,)
per-token loss     ``per_token_loss`` = "clipped_surrogate" (PPO/GRPO/DAPO) | "cispo"
clip band          ``clip_eps_low``, ``clip_eps_high`` (None = symmetric; DAPO: 0.2 / 0.28)
aggregation        ``loss_aggregation`` = "seq_mean_token_mean" (GRPO) | "token_mean" (DAPO) |
                   "fixed_length_mean" (Dr. GRPO, L_max = max_new_tokens) | callable(loss, mask)
KL penalty         ``kl_coef`` β ≥ 0: + β·k3(π_θ, π_ref) per token (GRPO); 0 = none (DAPO, Dr. GRPO)
reward shaping     ``format_coef`` (adds β_f·format_reward), ``overlong_cache_length`` (DAPO)
=================  ===========================================================================

For example DAPO's loss is ``GRPOConfig(clip_eps_high=0.28, loss_aggregation="token_mean",
kl_coef=0.0)`` and Dr. GRPO's is ``GRPOConfig(advantage_estimator="dr_grpo",
loss_aggregation="fixed_length_mean")``.

One step (the loop body of :func:`train_grpo`):
    1. draw ``prompts_per_step`` training prompts; sample G = ``group_size`` completions each with
       π_old (the current weights) → B = prompts_per_step·G completions;
    2. score them with the verifier: r_i = task.reward (+ shaping); Â_i from the group's rewards;
    3. μ = ``num_inner_epochs`` passes over the batch: per-token loss with ρ = π_θ/π_old, plus
       β·k3 to the frozen initial policy π_ref, aggregated, one AdamW step per pass.

Measured (defaults, small size: SFT ``SFTConfig()`` 550 steps then GRPO ``GRPOConfig()`` 150 steps
of 64 prompts × 8; ``evaluate`` on ``task.held_out_problems(500)``, 16 samples at τ = 1):

    seed   pass@1 before → after   greedy before → after   pass@8 before → after
    0      0.349 → 0.806 (+46)     0.854 → 0.956           0.933 → 0.989
    1      0.414 → 0.909 (+50)     0.972 → 0.992           0.972 → 0.996
    2      0.314 → 0.750 (+44)     0.944 → 0.974           0.936 → 0.997

The GRPO phase takes ~60 s on one CPU core (torch 1 thread; chapter 9 prints it). Per step, the
sampler and the scorer encode each prompt once for its G completions and a plain GPT-2 runs through
``rl.lm.gpt2_forward``; ``benchmarks/grpo_throughput.py`` compares the step with TRL's.

Tuning notes: lr 1e-3 collapsed greedy accuracy (0.998 → 0.82); lr 3e-4 with 32 prompts/step was
unstable for seed 0 after ~150 steps; 32 prompts at lr 2e-4 gave +40/+46/+37. Doubling the prompts
per step (less noisy gradient) fixed both.

Logged per step (``History.log``): reward, pass@1 (sampled accuracy of the batch), kl (mean k3 to
π_ref over completion tokens, logged even when β = 0), entropy (mean token entropy), clip_fraction
(share of tokens whose gradient the clip zeroed, last pass), completion_length (mean tokens, EOS
included), frac_zero_variance_groups (groups with all-equal rewards: no signal), loss, grad_norm
(before clipping). With ``eval_every > 0`` also eval_step, eval_greedy_accuracy, eval_pass@1.
"""

from __future__ import annotations

import copy
import functools
import time
from dataclasses import dataclass

import numpy as np
import torch
from tqdm.auto import tqdm

from rlbook import _checks
from rlbook.advantages import group_relative_advantages, leave_one_out_advantages, maxrl_advantages
from rlbook.aggregation import fixed_length_mean, masked_mean, seq_mean_token_mean, token_mean
from rlbook.config import get_device
from rlbook.evaluation import pass_at_k
from rlbook.history import History
from rlbook.kl import kl_k3
from rlbook.lm.logprobs import completion_log_probs
from rlbook.lm.sampling import sample_completions
from rlbook.losses import clip_region
from rlbook.rewards import overlong_penalty
from rlbook.steps import grpo_microbatch_train_step

__all__ = ["GRPOConfig", "train_grpo", "evaluate", "grpo_optimizer", "ADVANTAGE_ESTIMATORS", "PER_TOKEN_LOSSES", "LOSS_AGGREGATIONS"]

ADVANTAGE_ESTIMATORS = {
    "grpo": functools.partial(group_relative_advantages, scale="std"),
    "dr_grpo": functools.partial(group_relative_advantages, scale="none"),
    "rloo": leave_one_out_advantages,
    "maxrl": maxrl_advantages,
}
# config name -> ``loss_type`` of :func:`rlbook.policy_gradient_loss` (clipped_surrogate_loss / cispo_loss)
PER_TOKEN_LOSSES = {"clipped_surrogate": "grpo_clip", "cispo": "cispo"}
LOSS_AGGREGATIONS = {
    "seq_mean_token_mean": seq_mean_token_mean,
    "token_mean": token_mean,
    "fixed_length_mean": fixed_length_mean,
}


@dataclass
class GRPOConfig:
    """Settings of :func:`train_grpo` (defaults: the book's tuned small run; see the module docstring).

    Attributes:
        group_size: G, completions sampled per prompt (≥ 2).
        prompts_per_step: prompts per step; the batch holds B = prompts_per_step · G completions.
        num_steps: sampling + update rounds.
        lr: AdamW learning rate (constant).
        clip_eps_low: ε_low of the ratio band [1 − ε_low, 1 + ε_high].
        clip_eps_high: ε_high; None = ε_low (symmetric PPO/GRPO), 0.28 = DAPO's clip-higher.
        kl_coef: β of the per-token k3 penalty to the frozen initial policy π_ref (0 = none).
        num_inner_epochs: μ, optimiser passes over each batch (μ = 1: ρ ≡ 1, clip inactive).
        max_new_tokens: completion budget in tokens, EOS included.
        temperature: τ of the sampling distribution softmax(logits/τ) (also used in the loss).
        loss_aggregation: name in ``LOSS_AGGREGATIONS`` or a callable(loss, mask) -> 0-d tensor.
        advantage_estimator: name in ``ADVANTAGE_ESTIMATORS`` or a callable(rewards, group_size).
        advantage_std: the group std of the "grpo" estimator: "population" (÷G, the default) or
            "sample" (÷(G−1), ``torch.std``'s default, as in TRL); passed as ``std=`` to
            :func:`rlbook.group_relative_advantages`. Only "grpo" divides by a std, so any other
            estimator requires the default.
        per_token_loss: name in ``PER_TOKEN_LOSSES``: "clipped_surrogate" (:func:`rlbook.clipped_surrogate_loss`)
            or "cispo" (:func:`rlbook.cispo_loss`), both with the band (ε_low, ε_high).
        format_coef: weight of ``task.format_reward`` added to the correctness reward.
        overlong_cache_length: DAPO soft overlong punishment zone in tokens (0 = off); the
            budget L_max is ``max_new_tokens``.
        max_grad_norm: gradient-norm clip.
        log_ref_kl: keep a frozen copy π_ref of the initial policy and log the k3 KL to it even
            when ``kl_coef`` = 0 (one extra no-grad forward per step).
        eval_every: evaluate on ``task.held_out_problems(eval_num_problems)`` every this many
            steps (0 = never; costs time).
        eval_num_problems: held-out problems per evaluation.
        seed: seeds prompt draws and sampling (a private torch.Generator).
        device: None = ``rl.get_device()``.
    """

    group_size: int = 8
    prompts_per_step: int = 64
    num_steps: int = 150
    lr: float = 2e-4
    clip_eps_low: float = 0.2
    clip_eps_high: float | None = None
    kl_coef: float = 0.0
    num_inner_epochs: int = 1
    max_new_tokens: int = 8
    temperature: float = 1.0
    loss_aggregation: object = "seq_mean_token_mean"
    advantage_estimator: object = "grpo"
    advantage_std: str = "population"
    per_token_loss: str = "clipped_surrogate"
    format_coef: float = 0.0
    overlong_cache_length: int = 0
    max_grad_norm: float = 1.0
    log_ref_kl: bool = True
    eval_every: int = 0
    eval_num_problems: int = 200
    seed: int = 0
    device: str | None = None

    def __post_init__(self):
        for name in ("group_size", "prompts_per_step", "num_steps", "num_inner_epochs", "max_new_tokens"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"`{name}` must be a positive integer; got {value!r}")
        if self.group_size < 2:
            raise ValueError(f"`group_size` must be ≥ 2 (a group needs siblings to compare); got {self.group_size}")
        _checks.check_positive("lr", self.lr)
        _checks.check_positive("temperature", self.temperature)
        # any finite ε ≥ 0, as the per-token losses accept (ε_low ≥ 1: no lower clip)
        _checks.check_in_range("clip_eps_low", self.clip_eps_low, 0.0, float("inf"), high_inclusive=False)
        if self.clip_eps_high is not None:
            _checks.check_in_range("clip_eps_high", self.clip_eps_high, 0.0, float("inf"), high_inclusive=False)
        _checks.check_in_range("kl_coef", self.kl_coef, 0.0)
        _checks.check_in_range("overlong_cache_length", self.overlong_cache_length, 0, self.max_new_tokens)
        _checks.check_in_range("eval_every", self.eval_every, 0)
        if not callable(self.advantage_estimator) and self.advantage_estimator not in ADVANTAGE_ESTIMATORS:
            raise ValueError(f"`advantage_estimator` must be one of {sorted(ADVANTAGE_ESTIMATORS)} or a callable; got {self.advantage_estimator!r}")
        if self.advantage_std not in ("population", "sample"):
            raise ValueError(f"`advantage_std` must be 'population' (÷G) or 'sample' (÷(G−1)); got {self.advantage_std!r}")
        if self.advantage_std != "population" and self.advantage_estimator != "grpo":
            raise ValueError(f"`advantage_std` applies only to advantage_estimator='grpo' (the one that divides by a std); "
                             f"got advantage_std={self.advantage_std!r} with advantage_estimator={self.advantage_estimator!r}")
        if not callable(self.loss_aggregation) and self.loss_aggregation not in LOSS_AGGREGATIONS:
            raise ValueError(f"`loss_aggregation` must be one of {sorted(LOSS_AGGREGATIONS)} or a callable; got {self.loss_aggregation!r}")
        if self.per_token_loss not in PER_TOKEN_LOSSES:
            raise ValueError(f"`per_token_loss` must be one of {sorted(PER_TOKEN_LOSSES)}; got {self.per_token_loss!r}")


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
    elif isinstance(agg, str):
        agg = LOSS_AGGREGATIONS[agg]
    high = config.clip_eps_low if config.clip_eps_high is None else config.clip_eps_high
    return adv, PER_TOKEN_LOSSES[config.per_token_loss], (config.clip_eps_low, high), agg


def _score(task, prompts: list[str], texts: list[str], lengths: torch.Tensor, config: GRPOConfig):
    """Rewards (B,) float32 = correctness (+ format, + overlong shaping), and correctness (B,)."""
    correct = torch.tensor([task.reward(p, o) for p, o in zip(prompts, texts)], dtype=torch.float32)
    rewards = correct.clone()
    if config.format_coef:
        rewards += config.format_coef * torch.tensor([task.format_reward(p, o) for p, o in zip(prompts, texts)])
    if config.overlong_cache_length:
        rewards += overlong_penalty(lengths.cpu(), config.max_new_tokens, config.overlong_cache_length).float()
    return rewards, correct


def _sample_kwargs(tokenizer, forbidden_ids, max_new_tokens, temperature):
    return dict(
        max_new_tokens=max_new_tokens, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id or 0,
        forbidden_ids=forbidden_ids, temperature=temperature, tokenizer=tokenizer,
    )


def grpo_step(policy, ref_policy, optimizer, tokenizer, task, config: GRPOConfig, generator, forbidden_ids) -> dict:
    """One GRPO step: sample with π_old, score, group advantages, μ clipped-surrogate updates.

    Source: book eq. (grpo); Shao et al. 2024, arXiv:2402.03300, Algorithm 1 (one outer iteration).

    Args:
        policy: the causal LM being trained (its weights at call time are π_old).
        ref_policy: frozen π_ref for the k3 penalty / KL metric, or None (kl logged as 0).
        optimizer: a torch optimiser over ``policy``'s parameters.
        tokenizer, task, config: as :func:`train_grpo`.
        generator: torch.Generator for the prompt draws and the samples.
        forbidden_ids: token ids the sampler never emits (``rl.lm.forbidden_token_ids``).
    Returns:
        dict metric name -> 0-d tensor (the metrics listed in the module docstring).
    Raises:
        ValueError: from the parts (e.g. an advantage estimator rejecting the rewards).
    """
    from rlbook.lm.tokenizer import encode_prompts

    device = next(policy.parameters()).device
    adv_fn, loss_type, cliprange, aggregate = _parts(config)
    G = config.group_size
    # 1. sample G completions per prompt with π_old (the current weights)
    problems = task.sample_problems(config.prompts_per_step, generator)
    prompt_ids, prompt_mask = encode_prompts(tokenizer, [p.prompt for p in problems])
    batch = sample_completions(policy, prompt_ids, prompt_mask, num_samples=G, generator=generator,
                               **_sample_kwargs(tokenizer, forbidden_ids, config.max_new_tokens, config.temperature))
    mask = batch.completion_mask  # (B, T)
    # 2. score and compare within each group
    prompts = [p.prompt for p in problems for _ in range(G)]
    rewards, correct = _score(task, prompts, batch.texts, batch.lengths, config)
    advantages = adv_fn(rewards, G).to(device)  # (B,)
    old_log_probs = batch.log_probs  # (B, T) log π_old, from the sampler (no extra forward)
    # scoring takes the N distinct prompts: each is encoded once and shared by its G completions
    prompt_ids, prompt_mask = prompt_ids.to(device), prompt_mask.to(device)
    scoring = dict(temperature=config.temperature, forbidden_ids=forbidden_ids, completion_mask=mask)
    score = functools.partial(completion_log_probs, policy, prompt_ids, batch.completion_ids, prompt_mask, **scoring)
    ref_log_probs = None
    if ref_policy is not None:
        with torch.no_grad():
            ref_log_probs = completion_log_probs(ref_policy, prompt_ids, batch.completion_ids, prompt_mask, **scoring)
    # 3. μ passes of the clipped surrogate (+ β·k3) over the batch: per-token loss, aggregation,
    #    backward in one library call (rl.grpo_microbatch_train_step, the whole batch as one micro-batch)
    for epoch in range(config.num_inner_epochs):
        log_probs, entropy = score(with_entropy=True)  # (B, T) each
        if epoch == 0:
            kl = torch.zeros(()) if ref_log_probs is None else masked_mean(kl_k3(log_probs.detach(), ref_log_probs), mask)
            mean_entropy = masked_mean(entropy.detach(), mask)
        optimizer.zero_grad(set_to_none=True)
        loss, _ = grpo_microbatch_train_step(
            log_probs, mask, 1, loss_type, advantages=advantages[:, None], old_log_probs=old_log_probs,
            cliprange=cliprange, aggregation=aggregate, ref_log_probs=ref_log_probs, kl_coef=config.kl_coef)
        grad_norm = torch.nn.utils.clip_grad_norm_(policy.parameters(), config.max_grad_norm)
        optimizer.step()
    ratio = torch.exp(log_probs.detach() - old_log_probs)
    clipped = clip_region(ratio, advantages[:, None].expand_as(ratio), *cliprange)
    grouped = rewards.reshape(-1, G)
    return dict(
        reward=rewards.mean(), **{"pass@1": correct.mean()}, kl=kl, entropy=mean_entropy,
        clip_fraction=masked_mean(clipped.float(), mask), completion_length=batch.lengths.float().mean(),
        frac_zero_variance_groups=(grouped == grouped[:, :1]).all(dim=1).float().mean(), loss=loss.detach(),
        grad_norm=grad_norm,
    )


def train_grpo(policy, tokenizer, task, config: GRPOConfig | None = None, progress: bool = True) -> History:
    """Train ``policy`` in place with GRPO on ``task``'s verifiable reward.

    J(θ) = E_q E_{o_1..G ∼ π_old} [ agg_{i,t} min(ρ_{i,t} Â_i, clip(ρ_{i,t}, 1−ε_low, 1+ε_high) Â_i)
           − β k3_{i,t}(π_θ ‖ π_ref) ],   ρ_{i,t} = π_θ(o_{i,t}|q, o_{i,<t}) / π_old(o_{i,t}|q, o_{i,<t})

    Source: book eq. (grpo); Shao et al. 2024 (DeepSeekMath), arXiv:2402.03300, eq. 21 and
    Algorithm 1; Yu et al. 2025 (DAPO), arXiv:2503.14476; Liu et al. 2025 (Dr. GRPO),
    arXiv:2503.20783; MiniMax 2025 (CISPO), arXiv:2506.13585.

    Args:
        policy: a causal LM (ours from :func:`rlbook.lm.build_policy`, or any local checkpoint
            loaded with :func:`rlbook.lm.load_policy`); trained in place, kept in eval() mode.
        tokenizer: its tokenizer (eos and pad ids set).
        task: provides ``sample_problems(n, generator)``, ``reward(prompt, completion)``,
            ``format_reward(prompt, completion)`` and, for ``eval_every``, ``held_out_problems(n)``.
        config: :class:`GRPOConfig` (defaults if None).
        progress: show a tqdm progress bar.
    Returns:
        History: one entry per step for every metric listed in the module docstring;
        ``wall_seconds`` set.
    Raises:
        ValueError: invalid config (e.g. group_size < 2), or a tokenizer without an EOS id.
    """
    from rlbook.lm.tokenizer import forbidden_token_ids

    config = config or GRPOConfig()
    if getattr(tokenizer, "eos_token_id", None) is None:
        raise ValueError("`tokenizer` must define eos_token_id (completions end with it)")
    device = get_device(config.device)
    policy.to(device).eval()  # eval(): dropout off, so sampling and scoring agree; gradients flow
    need_ref = config.kl_coef > 0 or config.log_ref_kl
    ref_policy = copy.deepcopy(policy).requires_grad_(False) if need_ref else None  # frozen π_ref
    optimizer = grpo_optimizer(policy, config)
    generator = torch.Generator().manual_seed(config.seed)
    forbidden = forbidden_token_ids(tokenizer)
    history, start = History(config=config), time.perf_counter()
    eval_problems = task.held_out_problems(config.eval_num_problems) if config.eval_every else None
    bar = tqdm(range(config.num_steps), desc="GRPO", disable=not progress, mininterval=1.0)
    for step in bar:
        if eval_problems is not None and step % config.eval_every == 0:
            _log_eval(history, step, policy, tokenizer, eval_problems, task, config)
        metrics = grpo_step(policy, ref_policy, optimizer, tokenizer, task, config, generator, forbidden)
        history.log(**metrics)
        bar.set_postfix({"reward": f"{float(metrics['reward']):.3f}", "kl": f"{float(metrics['kl']):.4f}"}, refresh=False)
    if eval_problems is not None:
        _log_eval(history, config.num_steps, policy, tokenizer, eval_problems, task, config)
    history.wall_seconds = time.perf_counter() - start
    return history


def _log_eval(history, step, policy, tokenizer, problems, task, config):
    result = evaluate(policy, tokenizer, problems, reward_fn=task.reward, num_samples=8, k=8,
                      max_new_tokens=config.max_new_tokens, seed=config.seed + 1)
    history.log(eval_step=step, eval_greedy_accuracy=result["greedy_accuracy"], **{"eval_pass@1": result["pass@1"]})


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
        dict with "greedy_accuracy", "pass@1", f"pass@{k}" (floats in [0, 1]) and "num_correct"
        (np.ndarray (Q,) of correct samples per problem).
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

    kwargs = _sample_kwargs(tokenizer, forbidden_token_ids(tokenizer), max_new_tokens, temperature)
    generator = torch.Generator().manual_seed(int(seed))
    per_call = max(1, int(batch_size) // int(num_samples))
    greedy, counts = [], []
    for i in range(0, len(problems), per_call):
        chunk = problems[i : i + per_call]
        prompt_ids, prompt_mask = encode_prompts(tokenizer, [q.prompt for q in chunk])
        out = sample_completions(policy, prompt_ids, prompt_mask, num_samples=1, greedy=True, **kwargs)
        greedy += [reward_fn(q.prompt, o) for q, o in zip(chunk, out.texts)]
        out = sample_completions(policy, prompt_ids, prompt_mask, num_samples=num_samples, generator=generator, **kwargs)
        ok = [reward_fn(chunk[j // num_samples].prompt, o) for j, o in enumerate(out.texts)]
        counts += np.asarray(ok).reshape(len(chunk), num_samples).sum(axis=1).round().astype(int).tolist()
    counts = np.asarray(counts)
    return {
        "greedy_accuracy": float(np.mean(greedy)),
        "pass@1": float(np.mean(pass_at_k(num_samples, counts, 1))),
        f"pass@{k}": float(np.mean(pass_at_k(num_samples, counts, k))),
        "num_correct": counts,
    }
