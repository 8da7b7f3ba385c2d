"""Supervised training (SFT) of the policy from scratch, leaving deliberate room for RL.

A randomly initialised model never produces a correct answer, so a policy-gradient method has no
signal to start from (every group's reward is 0). The book therefore first trains the model by
maximum likelihood on (prompt, answer) pairs, as pretraining and SFT do for real models.

Room for RL. Trained on clean labels the small model would become nearly deterministic and RL
would have little to add. Instead the labels carry deliberate mistakes:

* ``label_noise`` (default 0.6): that share of the labels is replaced by a random one-digit mistake
  (:func:`rlbook.lm.corrupt_answer`), spread over ~27 alternatives. Maximum likelihood fits this
  noisy distribution: the right answer stays the favourite (greedy decoding is right, pass@8 ≈ 1)
  but a sample at temperature 1 is right well under half the time (pass@1 low). Measured with the
  defaults (550 steps, seeds 0/1/2, 500 held-out problems): greedy 0.85/0.97/0.94, pass@1
  0.35/0.41/0.31, pass@8 0.93/0.97/0.94; but over seeds 0-9 two models could not yet add (seed 4:
  greedy 0.17, seed 8: 0.75), so chapters 8-9 train for 800 steps (greedy 0.90-1.00 on all ten). RL on the verifiable reward then moves the mass back onto
  the right answers (see :mod:`rlbook.algos.grpo` for the numbers after GRPO).
* ``carry_noise`` (default 0): that share of the labels forgets the carry out of the units column
  (``07+45=`` labelled ``042``; :meth:`AdditionTask.carry_slip`). Above 1/2 it is *systematic*: the
  slip becomes the favourite answer on every problem with such a carry, so greedy decoding is wrong
  there. Measured (seed 0, label_noise 0.5, carry_noise 0.6, 700 steps): greedy 0.53, pass@1 0.31,
  pass@8 0.84; GRPO then reached only pass@1 0.60 / greedy 0.64, because sharpening the policy
  also locks in the slip. An instructive ablation, not the default.

Usage:
    >>> task, tok = rl.lm.AdditionTask(), rl.lm.build_char_tokenizer()
    >>> policy = rl.lm.build_policy(rl.lm.policy_config(tok))
    >>> hist = rl.lm.train_sft(policy, tok, task, rl.lm.SFTConfig(num_steps=10))
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import torch
from tqdm.auto import tqdm

from rlbook import _checks
from rlbook.config import get_device
from rlbook.history import History
from rlbook.lm.logprobs import completion_log_probs
from rlbook.lm.task import corrupt_answer
from rlbook.lm.tokenizer import encode_prompts
from rlbook.steps import sft_microbatch_train_step

__all__ = ["SFTConfig", "sft_batch", "train_sft", "load_or_train_sft"]


@dataclass
class SFTConfig:
    """Settings of :func:`train_sft`.

    Attributes:
        num_steps: optimiser updates.
        batch_size: (prompt, answer) pairs per update.
        lr: peak AdamW learning rate (linear warm-up, then cosine decay to 10 %).
        warmup_steps: steps of linear warm-up.
        weight_decay: AdamW weight decay.
        label_noise: share of labels replaced by a random one-digit mistake, in [0, 1).
        carry_noise: share of labels that forget the units carry, in [0, 1) (applied first;
            affects only problems with such a carry).
        max_grad_norm: gradient-norm clip.
        seed: seeds the problem draws and the label noise.
        device: None = ``rl.get_device()``.
    """

    num_steps: int = 550
    batch_size: int = 128
    lr: float = 3e-3
    warmup_steps: int = 30
    weight_decay: float = 0.01
    label_noise: float = 0.6
    carry_noise: float = 0.0
    max_grad_norm: float = 1.0
    seed: int = 0
    device: str | None = None

    def __post_init__(self):
        for name in ("num_steps", "batch_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"`{name}` must be a positive integer; got {value!r}")
        _checks.check_positive("lr", self.lr)
        _checks.check_in_range("label_noise", self.label_noise, 0.0, 1.0, high_inclusive=False)
        _checks.check_in_range("carry_noise", self.carry_noise, 0.0, 1.0, high_inclusive=False)
        _checks.check_in_range("warmup_steps", self.warmup_steps, 0)
        _checks.check_positive("max_grad_norm", self.max_grad_norm)


def sft_batch(tokenizer, task, batch_size: int, label_noise: float, generator: torch.Generator,
              carry_noise: float = 0.0):
    """Draw a training batch: prompt ids, target ids (answer + EOS, maybe corrupted), target mask.

    Each label is first replaced by ``task.carry_slip`` with probability ``carry_noise``, then by
    a random one-digit mistake with probability ``label_noise`` (``task.corrupt`` when the task has
    it, e.g. :meth:`rlbook.lm.ScratchpadAdditionTask.corrupt` changes only the final answer;
    else :func:`rlbook.lm.corrupt_answer`). The target is the label then EOS, right-padded to the
    longest in the batch (labels of the scratchpad task differ in length).

    Returns:
        ``prompt_ids`` (B, P), ``prompt_mask`` (B, P) bool, ``target_ids`` (B, T),
        ``target_mask`` (B, T) bool (False on right padding), ``noisy`` (B,) bool (label differs
        from the true answer).
    """
    problems = task.sample_problems(batch_size, generator)
    slips = (torch.rand(batch_size, generator=generator) < carry_noise).tolist()
    digit = (torch.rand(batch_size, generator=generator) < label_noise).tolist()
    answers = [task.carry_slip(p) if s else p.answer for p, s in zip(problems, slips)]
    corrupt = getattr(task, "corrupt", corrupt_answer)
    answers = [corrupt(a, generator) if d else a for a, d in zip(answers, digit)]
    noisy = torch.tensor([a != p.answer for a, p in zip(answers, problems)])
    prompt_ids, prompt_mask = encode_prompts(tokenizer, [p.prompt for p in problems])
    rows = [tokenizer(a, add_special_tokens=False).input_ids + [tokenizer.eos_token_id] for a in answers]
    width = max(len(r) for r in rows)
    target_ids = torch.full((batch_size, width), tokenizer.eos_token_id, dtype=torch.long)
    target_mask = torch.zeros((batch_size, width), dtype=torch.bool)
    for i, r in enumerate(rows):
        target_ids[i, : len(r)] = torch.tensor(r)
        target_mask[i, : len(r)] = True
    return prompt_ids, prompt_mask, target_ids, target_mask, noisy


def _lr_factor(step: int, warmup: int, total: int) -> float:
    if step < warmup:
        return (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return 0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * progress))


def train_sft(policy, tokenizer, task, config: SFTConfig | None = None, progress: bool = True) -> History:
    """Maximum-likelihood training on the task's training split with noisy labels.

    L(θ) = −1/N Σ_{i,t} m_{i,t} log π_θ(y_{i,t} | q_i, y_{i,<t})     (token mean over answer+EOS)

    Each step is one call of :func:`rlbook.sft_microbatch_train_step` (−1/B Σ_i Σ_t m·log π / c)
    with the normaliser c = N/B, the mean number of target tokens per sequence in the batch, so
    the loss above is the token mean over the N = Σ m target tokens. Why this c and not the
    course's c = 1 (summed NLL per sequence): the loss stays in nats per token, comparable across
    batches and answer lengths, and it is the arithmetic the book's measured SFT results were
    produced with. For a power-of-two batch size (the default 128) B·c = N exactly, and the loss,
    its gradient and so every trained parameter are bit for bit those of the direct form
    −Σ m·log π / N.

    Source: book eq. (sft); standard next-token cross-entropy; CS336 (2025) assignment 5
    (``sft_microbatch_train_step``).

    Args:
        policy: a causal LM (e.g. :func:`rlbook.lm.build_policy`); trained in place.
        tokenizer: its tokenizer (pad/bos/eos set).
        task: an :class:`rlbook.lm.AdditionTask` (or any object with ``sample_problems``).
        config: :class:`SFTConfig` (default values if None).
        progress: show a tqdm progress bar.
    Returns:
        History with per-step ``loss``, ``lr``, ``grad_norm``; ``wall_seconds`` set.
    Raises:
        ValueError: an invalid config value.
    """
    config = config or SFTConfig()
    device = get_device(config.device)
    policy.to(device).eval()  # eval(): dropout off; gradients still flow
    generator = torch.Generator().manual_seed(config.seed)
    opt = torch.optim.AdamW(policy.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: _lr_factor(s, config.warmup_steps, config.num_steps))
    history, start = History(config=config), time.perf_counter()
    bar = tqdm(range(config.num_steps), desc="SFT", disable=not progress, mininterval=1.0)
    for _ in bar:
        prompt_ids, prompt_mask, target_ids, target_mask, _ = sft_batch(
            tokenizer, task, config.batch_size, config.label_noise, generator, config.carry_noise
        )
        prompt_ids, prompt_mask = prompt_ids.to(device), prompt_mask.to(device)
        target_ids, target_mask = target_ids.to(device), target_mask.to(device)
        opt.zero_grad(set_to_none=True)
        log_probs = completion_log_probs(policy, prompt_ids, target_ids, prompt_mask, completion_mask=target_mask)
        # normaliser c = target tokens per sequence in this batch (N/B), so the loss is the token mean
        loss, _ = sft_microbatch_train_step(log_probs, target_mask, 1, normalize_constant=target_mask.sum() / len(target_mask))
        grad_norm = torch.nn.utils.clip_grad_norm_(policy.parameters(), config.max_grad_norm)
        history.log(loss=loss.item(), lr=sched.get_last_lr()[0], grad_norm=grad_norm.item())
        opt.step()
        sched.step()
        bar.set_postfix(loss=f"{loss.item():.3f}", refresh=False)
    history.wall_seconds = time.perf_counter() - start
    return history


def _task_fingerprint(task) -> dict:
    """The task's settings; ``scratchpad_prob`` only for a task that has one (the plain task's dict is unchanged)."""
    settings = {"type": type(task).__name__, "num_digits": getattr(task, "num_digits", None),
                "held_out_fraction": getattr(task, "held_out_fraction", None), "seed": getattr(task, "seed", None)}
    if getattr(task, "scratchpad_prob", None) is not None:
        settings["scratchpad_prob"] = task.scratchpad_prob
    if getattr(task, "family", "all") != "all":  # the whole task's dict is unchanged
        settings["family"] = task.family
    return settings


def _sft_fingerprint(model_config, task, config: SFTConfig, device: torch.device) -> dict:
    """Everything that decides the weights :func:`train_sft` produces, as JSON-able values."""
    import dataclasses
    import hashlib
    import inspect
    import sys

    settings = dataclasses.asdict(config)
    settings.pop("device")
    code = "".join(inspect.getsource(sys.modules[name]) for name in
                   ("rlbook.lm.sft", "rlbook.lm.model", "rlbook.lm.logprobs", "rlbook.lm.gpt2_fast", "rlbook.steps"))
    return {
        "sft_config": settings,
        "model_config": model_config.to_json_string(use_diff=False),
        "task": _task_fingerprint(task),
        # float sums (and so the trained weights) depend on these too
        "torch": torch.__version__, "threads": torch.get_num_threads(), "device": device.type,
        "code": hashlib.sha256(code.encode()).hexdigest(),
    }


def load_or_train_sft(tokenizer, task, config: SFTConfig | None = None, checkpoint=None, model_seed: int = 0,
                      retrain: bool = False, progress: bool = True, num_threads: int | None = None):
    """The supervised starting model: loaded from ``checkpoint`` if it holds exactly this run, else trained.

    The model is ``build_policy(policy_config(tokenizer), seed=model_seed)`` trained by
    :func:`train_sft` with ``config``. The checkpoint is reused only when its recorded fingerprint
    matches this call's: the SFT settings, the model config, the task, the torch version, thread
    count and device type, and a hash of the training code. Those decide the weights, so a loaded
    model is the model this call would train, bit for bit. Otherwise the model is trained and then
    saved to ``checkpoint`` atomically (:func:`rlbook.lm.save_checkpoint`), so a crash mid-save
    never leaves a half-written checkpoint for the next reader. (The fingerprint does not name the
    CPU model, which also changes float order: keep checkpoints on the machine that wrote them, as
    the git-ignored ``runs/`` folder does.)

    Source: book §8.4 and §9.4 (chapter 9 starts from chapter 8's model); a convenience, not an
    algorithm.

    Args:
        tokenizer: the task's tokenizer (e.g. :func:`rlbook.lm.build_char_tokenizer`).
        task: an :class:`rlbook.lm.AdditionTask`.
        config: :class:`SFTConfig` (default values if None).
        checkpoint: a folder path, or None to always train and save nothing.
        model_seed: seed of the weight initialisation.
        retrain: train (and overwrite ``checkpoint``) even when it matches; chapter 8 does, since
            its subject is the training run itself.
        progress: show a progress bar while training.
        num_threads: torch threads for the training (and in the fingerprint), restored afterwards;
            None = the current setting. Chapters 10 and 11 train with 2 (about 1.4× faster than 1
            on two idle cores, measured) and keep 1 for everything else.
    Returns:
        ``(policy, history, loaded)``: the model (eval mode, on ``config.device``), the
        :class:`History` of the training run (None when loaded), and whether it was loaded.
    Raises:
        ValueError: an invalid config value, or ``num_threads`` not a positive integer.
    """
    config = config or SFTConfig()
    if num_threads is not None and (isinstance(num_threads, bool) or not isinstance(num_threads, int) or num_threads < 1):
        raise ValueError(f"`num_threads` must be None or a positive integer; got {num_threads!r}")
    threads = torch.get_num_threads()
    torch.set_num_threads(num_threads or threads)
    try:
        return _load_or_train_sft(tokenizer, task, config, checkpoint, model_seed, retrain, progress)
    finally:
        torch.set_num_threads(threads)


def _load_or_train_sft(tokenizer, task, config, checkpoint, model_seed, retrain, progress):
    from pathlib import Path

    from rlbook.lm.checkpoint import load_checkpoint, save_checkpoint
    from rlbook.lm.model import build_policy, policy_config

    device = get_device(config.device)
    model_config = policy_config(tokenizer)
    fingerprint = _sft_fingerprint(model_config, task, config, device)
    fingerprint["model_seed"] = int(model_seed)
    if checkpoint is not None and not retrain and Path(checkpoint).is_dir():
        try:
            policy, _, metadata = load_checkpoint(checkpoint, device=device)
        except Exception:  # unreadable or foreign folder: train instead
            metadata = {}
        if metadata.get("fingerprint") == fingerprint:
            return policy, None, True
    policy = build_policy(model_config, seed=model_seed, device=device)
    history = train_sft(policy, tokenizer, task, config, progress=progress)
    if checkpoint is not None:
        Path(checkpoint).parent.mkdir(parents=True, exist_ok=True)
        save_checkpoint(policy, tokenizer, checkpoint, metadata={"fingerprint": fingerprint})
    return policy, history, False
