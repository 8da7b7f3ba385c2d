"""On-policy distillation of the book's language models: the student samples, the teacher grades (chapter 18).

One step of :func:`distill_step` (the formulas of :mod:`rlbook.distill`, on a real model):

1. draw P = ``prompts_per_step`` training problems, sample G = ``samples_per_prompt`` completions of
   each from the **student** π_θ (temperature τ);
2. one forward pass of the student (with gradient) and one of the teacher π_T (without) over the same
   tokens give both models' logits at every completion position;
3. the per-token loss, averaged over the batch's completion tokens (the token mean), is

       ℓ_t = c_d · d_t  −  c_v · Â_i · log π_θ(x_t | q, x_<t)

   with the distillation term d_t either

   * ``reward="sampled"``: −G^γ_t · log π_θ(x_t | ·), G^γ_t = Σ_{t' ≥ t} γ^{t'−t} r_{t'} the discounted
     reward-to-go of the k1 reward r_t = log π_T(x_t | ·) − log π_θ(x_t | ·) (held constant), or
   * ``reward="full"``: GKD's JSD_β between the two next-token distributions at that position
     (β = 1 the reverse KL(π_θ ‖ π_T), summed over the whole vocabulary);

   and Â_i GRPO's group-relative advantage of the verifier's reward (the task's 0/1 correctness),
   c_d = ``distill_coef``, c_v = ``verifier_coef`` (c_d = 0, c_v = 1 is plain on-policy GRPO with one
   update per batch; c_d = 1, c_v = 0 pure distillation; both: GRPO + c_d·distillation);
4. zero the gradients, backward, clip the gradient norm, one AdamW step.

Every update is on fresh samples of the current student, so the importance ratio is 1 and there is no
clipping: one update per batch.

Several teachers: a :class:`RoutedTeacher` grades each completion with the teacher of its prompt's task family
(multi-teacher distillation); :func:`sequence_kd_step` is the off-policy baseline (the teacher writes, the student
imitates), and :func:`prefix_divergence` measures exposure bias.

Sources: Agarwal et al. 2023 (GKD), arXiv:2306.13649, Algorithm 1 with λ = 1; Gu et al. 2023
(MiniLLM), arXiv:2306.08543 (reward-to-go, γ = 1); K. Lu and Thinking Machines Lab, "On-Policy
Distillation" (Connectionism blog, Oct. 2025; the per-token reward, γ = 0); Shao et al. 2024,
arXiv:2402.03300 (GRPO's advantage).
"""

from __future__ import annotations

import time

import torch

from rlbook.advantages import group_relative_advantages
from rlbook.aggregation import masked_mean
from rlbook.distill import DistillationConfig, distillation_rewards, generalized_jsd
from rlbook.history import History
from rlbook.lm.logprobs import padding_kwargs
from rlbook.lm.sampling import sample_completions
from rlbook.lm.tokenizer import encode_prompts
from rlbook.returns import rewards_to_go

__all__ = ["completion_logits", "distill_step", "train_distillation", "sequence_kd_step", "prefix_divergence",
           "RoutedTeacher"]


def _allowed_ids(vocab_size: int, forbidden_ids, device) -> torch.Tensor:
    forbidden = {int(i) for i in forbidden_ids}
    return torch.tensor([i for i in range(vocab_size) if i not in forbidden], dtype=torch.long, device=device)


def completion_logits(model, prompt_ids: torch.Tensor, completion_ids: torch.Tensor, prompt_mask=None,
                      allowed_ids=None) -> torch.Tensor:
    """The model's next-token logits at every completion position, over the allowed tokens only.

    Row b, position t holds the logits of π(· | q_b, x_{b,<t}), the distribution the completion's token
    x_{b,t} was drawn from: one forward pass over prompt + completion, logits at positions P − 1 … P + T − 2.

    Args:
        model: a causal LM returning ``.logits`` (B, L, V).
        prompt_ids: (B, P) long, one prompt per completion row, left-padded if widths differ.
        completion_ids: (B, T) long.
        prompt_mask: (B, P) bool, False on left padding; None = no padding.
        allowed_ids: (V',) long ids to keep (the sampler's allowed tokens, in order); None = all V.
    Returns:
        (B, T, V') logits (float32; float64 from a float64 model), with gradient when the model has one; column j is token ``allowed_ids[j]``.
    Raises:
        ValueError: ids not 2-D, or batch sizes that differ.
    """
    if prompt_ids.dim() != 2 or completion_ids.dim() != 2:
        raise ValueError(f"`prompt_ids` and `completion_ids` must be 2-D (B, P) and (B, T); got "
                         f"{tuple(prompt_ids.shape)} and {tuple(completion_ids.shape)}")
    if prompt_ids.shape[0] != completion_ids.shape[0]:
        raise ValueError(f"`prompt_ids` and `completion_ids` must have the same batch size; got "
                         f"{prompt_ids.shape[0]} and {completion_ids.shape[0]}")
    device = next(model.parameters()).device
    prompt_ids, completion_ids = prompt_ids.to(device), completion_ids.to(device)
    if prompt_mask is None:
        prompt_mask = torch.ones_like(prompt_ids, dtype=torch.bool)
    mask = torch.cat([prompt_mask.to(device).bool(), torch.ones_like(completion_ids, dtype=torch.bool)], dim=1)
    ids = torch.cat([prompt_ids, completion_ids], dim=1)
    logits = model(input_ids=ids, **padding_kwargs(mask)).logits
    if logits.dtype != torch.float64:
        logits = logits.float()
    P, T = prompt_ids.shape[1], completion_ids.shape[1]
    logits = logits[:, P - 1: P + T - 1]
    return logits if allowed_ids is None else logits.index_select(-1, allowed_ids.to(device))


class RoutedTeacher:
    """Several teachers, one per task family: each completion is graded by the teacher of its prompt's family.

    Multi-teacher distillation (chapter 18): specialists trained on different task families teach one student;
    :func:`distill_step` scores each row with ``teachers[route(prompt)]``. All teachers share the student's
    tokenizer (the reward compares their probabilities token by token).

    Args:
        teachers: dict family name -> frozen causal LM.
        route: callable prompt (str) -> family name (a key of ``teachers``), e.g.
            :meth:`rlbook.lm.AdditionTask.family_of`.
    Raises:
        ValueError: ``teachers`` empty or not a dict, or ``route`` not callable.
    """

    def __init__(self, teachers: dict, route):
        if not isinstance(teachers, dict) or not teachers:
            raise ValueError(f"`teachers` must be a non-empty dict family -> model; got {type(teachers).__name__}")
        if not callable(route):
            raise ValueError("`route` must be a callable prompt -> family name")
        self.teachers = dict(teachers)
        self.route = route

    def logits(self, prompts, prompt_ids, completion_ids, prompt_mask, allowed_ids) -> torch.Tensor:
        """(B, T, V') teacher logits, row b from ``teachers[route(prompts[b])]`` (no gradient).

        Raises:
            ValueError: a prompt routed to a family with no teacher.
        """
        families = [self.route(p) for p in prompts]
        unknown = sorted(set(families) - set(self.teachers))
        if unknown:
            raise ValueError(f"`route` sent prompts to families with no teacher: {unknown} (teachers: {sorted(self.teachers)})")
        out = None
        for family, model in self.teachers.items():
            rows = [i for i, f in enumerate(families) if f == family]
            if not rows:
                continue
            index = torch.tensor(rows, device=prompt_ids.device)
            part = completion_logits(model, prompt_ids[index], completion_ids[index],
                                     None if prompt_mask is None else prompt_mask[index], allowed_ids)
            if out is None:
                out = part.new_zeros((prompt_ids.shape[0], *part.shape[1:]))
            out[index.to(out.device)] = part
        return out


def _teacher_logits(teacher, prompts, batch, allowed) -> torch.Tensor:
    if isinstance(teacher, RoutedTeacher):
        return teacher.logits(prompts, batch.prompt_ids, batch.completion_ids, batch.prompt_mask, allowed)
    return completion_logits(teacher, batch.prompt_ids, batch.completion_ids, batch.prompt_mask, allowed)


def _rollout(sampler, student, tokenizer, task, config: DistillationConfig, generator, forbidden_ids) -> dict:
    """Draw P problems, sample G completions of each from ``sampler``, and score them with the student (with
    gradient) over the allowed tokens; also the verifier's rewards. The first half of every step."""
    device = next(student.parameters()).device
    prompts = [p.prompt for p in task.sample_problems(config.prompts_per_step, generator)]
    prompt_ids, prompt_mask = encode_prompts(tokenizer, prompts)
    with torch.no_grad():
        batch = sample_completions(sampler, prompt_ids.to(device), prompt_mask.to(device),
                                   num_samples=config.samples_per_prompt, max_new_tokens=config.max_new_tokens,
                                   eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id or 0,
                                   forbidden_ids=forbidden_ids, temperature=config.temperature, generator=generator,
                                   tokenizer=tokenizer)
    allowed = _allowed_ids(len(tokenizer), forbidden_ids, device)
    column = torch.full((len(tokenizer),), -1, dtype=torch.long, device=device)
    column[allowed] = torch.arange(len(allowed), device=device)
    row_prompts = [q for q in prompts for _ in range(config.samples_per_prompt)]
    return {"batch": batch, "mask": batch.completion_mask.to(device), "allowed": allowed, "row_prompts": row_prompts,
            "tokens": column[batch.completion_ids.to(device)].clamp(min=0),  # positions after EOS may hold padding
            "logits": completion_logits(student, batch.prompt_ids, batch.completion_ids, batch.prompt_mask, allowed),
            "rewards": [task.reward(q, o) for q, o in zip(row_prompts, batch.texts)]}


def _check_step_config(config: DistillationConfig, teacher) -> None:
    if not isinstance(config, DistillationConfig):
        raise ValueError(f"`config` must be an rlbook.DistillationConfig; got {type(config).__name__}")
    if config.lmbda != 1.0:
        raise ValueError(f"`config.lmbda` must be 1.0 here (the book's trainer samples every completion from the "
                         f"student; for completions sampled by the teacher use sequence_kd_step); got {config.lmbda!r}")
    if teacher is None and config.distill_coef:
        raise ValueError("`teacher` is required when `config.distill_coef` is not 0")


def distill_step(student, teacher, optimizer, tokenizer, task, config: DistillationConfig, generator,
                 forbidden_ids=()) -> dict:
    """One step of on-policy distillation (and/or GRPO on the verifier): sample, score, one update.

    The loss is in the module docstring; the token mean runs over every completion token up to and
    including its EOS.

    Args:
        student: the causal LM being trained (in place; its weights at call time sample).
        teacher: the frozen teacher LM (same tokenizer), a :class:`RoutedTeacher` (one teacher per task
            family), or None when ``config.distill_coef`` is 0.
        optimizer: a torch optimiser over the student's parameters.
        tokenizer: the shared tokenizer (eos and pad ids set).
        task: ``sample_problems(n, generator)`` and ``reward(prompt, completion)`` (0/1 correctness).
        config: :class:`rlbook.DistillationConfig` (``lmbda`` must be 1).
        generator: torch.Generator for the problem draws and the samples.
        forbidden_ids: token ids the sampler never emits; dropped from both models' softmax too.
    Returns:
        dict of floats: ``loss``; ``reward`` (the samples' mean correctness); ``reverse_kl`` (token mean of
        the full-vocabulary KL(π_θ ‖ π_T), nats/token, before the update); ``k1_reward`` (token mean of
        r_t) and ``k1_reward_p01`` (its 1st percentile over tokens); ``length`` (mean tokens per
        completion, EOS included); ``grad_norm`` (before clipping).
    Raises:
        ValueError: ``config`` is not an :class:`rlbook.DistillationConfig`, ``config.lmbda`` ≠ 1, or ``teacher``
            is None while ``config.distill_coef`` ≠ 0.
    """
    _check_step_config(config, teacher)
    roll = _rollout(student, student, tokenizer, task, config, generator, forbidden_ids)
    batch, mask, allowed, logits, row_prompts = roll["batch"], roll["mask"], roll["allowed"], roll["logits"], roll["row_prompts"]
    tau = config.temperature
    log_p = torch.log_softmax(logits / tau, dim=-1)
    log_probs = log_p.gather(-1, roll["tokens"][..., None]).squeeze(-1)  # (B, T), with gradient
    rewards = torch.tensor(roll["rewards"], dtype=log_probs.dtype, device=log_probs.device)
    per_token = torch.zeros_like(log_probs)
    metrics = {}
    if teacher is not None:
        with torch.no_grad():
            teacher_logits = _teacher_logits(teacher, row_prompts, batch, allowed)
            log_q = torch.log_softmax(teacher_logits / tau, dim=-1)
            teacher_log_probs = log_q.gather(-1, roll["tokens"][..., None]).squeeze(-1)
            r = distillation_rewards(log_probs.detach(), teacher_log_probs, mask)
            kl = (log_p.exp() * (log_p - log_q)).sum(-1)
        metrics.update(reverse_kl=float(masked_mean(kl, mask)), k1_reward=float(masked_mean(r, mask)),
                       k1_reward_p01=float(torch.quantile(r[mask].double(), 0.01)))
        if config.distill_coef:
            if config.reward == "sampled":
                done = torch.zeros_like(mask)
                done[torch.arange(mask.shape[0]), mask.sum(-1).clamp(min=1) - 1] = True
                to_go = rewards_to_go(r, gamma=config.gamma, terminated=done) * mask
                per_token = per_token - config.distill_coef * to_go * log_probs
            else:
                per_token = per_token + config.distill_coef * generalized_jsd(
                    logits, teacher_logits, beta=config.beta, temperature=tau, mask=mask, reduction="none")
    if config.verifier_coef:
        advantages = group_relative_advantages(rewards, config.samples_per_prompt)
        per_token = per_token - config.verifier_coef * advantages[:, None] * log_probs
    loss = masked_mean(per_token, mask)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(student.parameters(), config.max_grad_norm)
    optimizer.step()
    metrics.update(loss=float(loss.detach()), reward=float(rewards.mean()), length=float(mask.sum(-1).float().mean()),
                   grad_norm=float(grad_norm))
    return metrics


def sequence_kd_step(student, teacher, optimizer, tokenizer, task, config: DistillationConfig, generator,
                     forbidden_ids=()) -> dict:
    """One step of supervised training on the teacher's own samples (sequence-level KD, the off-policy baseline).

    The **teacher** samples G completions of each of P training problems (temperature τ); the student
    minimises their negative log-likelihood, token mean over completion tokens (EOS included):
    L = −Σ_{i,t} m_{i,t} log π_θ(y_{i,t} | q_i, y_{i,<t}) / Σ m. Same sample count per step as
    :func:`distill_step`; the student never sees its own prefixes.

    Source: Kim & Rush 2016, "Sequence-Level Knowledge Distillation", arXiv:1606.07947.

    Returns:
        dict of floats: ``loss``, ``reward`` (the teacher samples' mean correctness), ``length``,
        ``grad_norm``.
    Raises:
        ValueError: ``teacher`` is None or ``config`` is not a DistillationConfig.
    """
    if teacher is None or isinstance(teacher, RoutedTeacher):
        raise ValueError("`teacher` must be one model: sequence-level KD trains on that teacher's samples")
    if not isinstance(config, DistillationConfig):
        raise ValueError(f"`config` must be an rlbook.DistillationConfig; got {type(config).__name__}")
    roll = _rollout(teacher, student, tokenizer, task, config, generator, forbidden_ids)
    mask = roll["mask"]
    log_probs = torch.log_softmax(roll["logits"] / config.temperature, dim=-1).gather(
        -1, roll["tokens"][..., None]).squeeze(-1)
    loss = -masked_mean(log_probs, mask)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(student.parameters(), config.max_grad_norm)
    optimizer.step()
    rewards = roll["rewards"]
    return dict(loss=float(loss.detach()), reward=sum(rewards) / len(rewards),
                length=float(mask.sum(-1).float().mean()), grad_norm=float(grad_norm))


def train_distillation(student, teacher, tokenizer, task, config: DistillationConfig, method: str = "on_policy",
                       forbidden_ids=(), progress: bool = True, callback=None) -> History:
    """Train ``student`` in place for ``config.num_steps`` steps of :func:`distill_step` or :func:`sequence_kd_step`.

    AdamW (``config.lr``, no weight decay, constant rate), one generator seeded with ``config.seed``.

    Args:
        student, teacher, tokenizer, task, config, forbidden_ids: as :func:`distill_step`.
        method: "on_policy" (:func:`distill_step`) or "sequence_kd" (:func:`sequence_kd_step`).
        progress: show a tqdm progress bar.
        callback: None or ``callback(step, student, metrics)`` after each step.
    Returns:
        a :class:`rlbook.History` with one value per step of every metric the step returns.
    Raises:
        ValueError: an unknown ``method``, or as the step.
    """
    from tqdm.auto import tqdm

    steps = {"on_policy": distill_step, "sequence_kd": sequence_kd_step}
    if method not in steps:
        raise ValueError(f"`method` must be one of {sorted(steps)}; got {method!r}")
    step_fn = steps[method]
    generator = torch.Generator().manual_seed(config.seed)
    optimizer = torch.optim.AdamW(student.parameters(), lr=config.lr, weight_decay=0.0)
    history = History(config=config)
    start = time.perf_counter()
    for step in tqdm(range(config.num_steps), desc="distillation" if method == "on_policy" else "sequence KD",
                     disable=not progress):
        metrics = step_fn(student, teacher, optimizer, tokenizer, task, config, generator, forbidden_ids)
        history.log(**metrics)
        if callback is not None and callback(step, student, metrics):
            break
    history.wall_seconds = time.perf_counter() - start
    return history


@torch.no_grad()
def prefix_divergence(student, teacher, tokenizer, prompts, sampler, num_samples: int, max_new_tokens: int,
                      generator, forbidden_ids=(), temperature: float = 1.0) -> dict:
    """The student's reverse KL to the teacher, position by position, on prefixes written by ``sampler``.

    D_t = E_{x ∼ sampler}[ KL(π_θ(· | q, x_<t) ‖ π_T(· | q, x_<t)) ]   over the completions still running at t

    With ``sampler`` the student, Σ_t of the unnormalised per-position sums divided by the number of completions
    is the *sequence-level* reverse KL(π_θ ‖ π_T) (the chain rule of KL): what on-policy distillation
    minimises. With ``sampler`` the teacher it is the same divergence on the prefixes that supervised training
    on the teacher's samples sees. The gap between the two is exposure bias made visible: a student trained
    only on the teacher's prefixes meets its own at test time (Ross, Gordon & Bagnell 2011, "A Reduction of
    Imitation Learning and Structured Prediction to No-Regret Online Learning", AISTATS, Theorem 2.1).

    Args:
        student, teacher: causal LMs sharing ``tokenizer``.
        tokenizer: the shared tokenizer.
        prompts: N prompt strings.
        sampler: the model whose completions give the prefixes (``student`` or ``teacher``).
        num_samples: completions per prompt (≥ 1).
        max_new_tokens: completion budget T.
        generator: torch.Generator for the samples.
        forbidden_ids: token ids never sampled, dropped from both softmaxes.
        temperature: τ > 0 of the sampler and both softmaxes.
    Returns:
        dict: ``by_position`` (T,) float64 mean KL at each position (NaN where no completion reaches it),
        ``reached`` (T,) the share of completions still running at each position, ``sequence_kl`` (float,
        nats per completion: Σ_t of the per-position sums / number of completions), ``token_kl`` (float,
        nats per token).
    Raises:
        ValueError: ``num_samples`` < 1 or ``max_new_tokens`` < 1.
    """
    if isinstance(num_samples, bool) or not isinstance(num_samples, int) or num_samples < 1:
        raise ValueError(f"`num_samples` must be a positive integer; got {num_samples!r}")
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise ValueError(f"`max_new_tokens` must be a positive integer; got {max_new_tokens!r}")
    device = next(student.parameters()).device
    prompt_ids, prompt_mask = encode_prompts(tokenizer, list(prompts))
    batch = sample_completions(sampler, prompt_ids.to(device), prompt_mask.to(device), num_samples=num_samples,
                               max_new_tokens=max_new_tokens, eos_token_id=tokenizer.eos_token_id,
                               pad_token_id=tokenizer.pad_token_id or 0, forbidden_ids=forbidden_ids,
                               temperature=temperature, generator=generator)
    allowed = _allowed_ids(len(tokenizer), forbidden_ids, device)
    mask = batch.completion_mask.to(device)
    log_p = torch.log_softmax(completion_logits(student, batch.prompt_ids, batch.completion_ids, batch.prompt_mask,
                                                allowed).double() / temperature, dim=-1)
    log_q = torch.log_softmax(completion_logits(teacher, batch.prompt_ids, batch.completion_ids, batch.prompt_mask,
                                                allowed).double() / temperature, dim=-1)
    kl = (log_p.exp() * (log_p - log_q)).sum(-1) * mask  # (B, T)
    counts = mask.sum(0).double()
    by_position = torch.full((max_new_tokens,), float("nan"), dtype=torch.float64)
    reached = torch.zeros(max_new_tokens, dtype=torch.float64)
    T = mask.shape[1]
    by_position[:T] = torch.where(counts > 0, kl.sum(0) / counts.clamp(min=1), torch.nan).cpu()
    reached[:T] = (counts / mask.shape[0]).cpu()
    return {"by_position": by_position, "reached": reached, "sequence_kl": float(kl.sum() / mask.shape[0]),
            "token_kl": float(kl.sum() / mask.sum())}
