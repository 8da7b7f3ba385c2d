"""The on-policy distillation trainer (rlbook.algos.distillation) on a tiny model, against hand-written references.

Each step test rebuilds the step's batch from a copy of its generator, computes the loss another way
(log-probs from ``rl.lm.completion_log_probs``, every next-token distribution by its own forward pass of the
prefix, reward-to-go by a loop), and checks one SGD step of the trainer moves every weight by exactly
−η·∇(that loss), starting from gradients filled with junk: a step that skips ``zero_grad`` or ``step``, flips
the sign, lets the gradient flow through the k1 reward, or averages over the wrong tokens fails.
"""

import copy
import math

import pytest
import torch

import rlbook as rl

ETA = 0.05


@pytest.fixture(scope="module")
def setup():
    task = rl.lm.AdditionTask(num_digits=1, held_out_fraction=0.2, seed=0)
    tok = rl.lm.build_char_tokenizer(task.alphabet)
    cfg = rl.lm.policy_config(tok, size="small", n_layer=1, n_embd=16, n_head=2)
    student = rl.lm.build_policy(cfg, seed=1, device="cpu").double()
    teacher = rl.lm.build_policy(cfg, seed=2, device="cpu").double().requires_grad_(False)
    return task, tok, student, teacher, rl.lm.forbidden_token_ids(tok)


def _config(**kw):
    base = dict(max_new_tokens=3, prompts_per_step=3, samples_per_prompt=2, lr=ETA, num_steps=1, max_grad_norm=1e9)
    return rl.DistillationConfig(**{**base, **kw})


def _batch(task, tok, model, config, generator, forbidden):
    problems = task.sample_problems(config.prompts_per_step, generator)
    prompt_ids, prompt_mask = rl.lm.encode_prompts(tok, [p.prompt for p in problems])
    batch = rl.lm.sample_completions(model, prompt_ids, prompt_mask, num_samples=config.samples_per_prompt,
                                     max_new_tokens=config.max_new_tokens, eos_token_id=tok.eos_token_id,
                                     pad_token_id=tok.pad_token_id or 0, forbidden_ids=forbidden,
                                     temperature=config.temperature, generator=generator, tokenizer=tok)
    prompts = [p.prompt for p in problems for _ in range(config.samples_per_prompt)]
    return batch, prompts


def _next_token_log_probs(model, prompt_ids, completion_ids, mask, forbidden, tau):
    """(B, T, V) log π(· | q, x_<t) by one forward pass per (row, position), forbidden tokens at −inf."""
    B, T = completion_ids.shape
    out = torch.zeros(B, T, model.config.vocab_size, dtype=torch.float64)
    for b in range(B):
        for t in range(T):
            if not mask[b, t]:
                continue
            ids = torch.cat([prompt_ids[b], completion_ids[b, :t]])[None]
            logits = model(input_ids=ids).logits[0, -1].double() / tau
            logits[list(forbidden)] = -math.inf
            out[b, t] = torch.log_softmax(logits, -1)
    return out


def _chosen(log_p, completion_ids, mask):
    """log π of the chosen tokens, 0 where masked (positions after EOS may hold the pad id)."""
    return log_p.gather(-1, (completion_ids * mask)[..., None]).squeeze(-1) * mask


def _reference_loss(model, teacher, batch, prompts, task, config, forbidden, detach_reward=True):
    mask = batch.completion_mask
    tau = config.temperature
    log_p = _next_token_log_probs(model, batch.prompt_ids, batch.completion_ids, mask, forbidden, tau)
    log_probs = _chosen(log_p, batch.completion_ids, mask)
    per_token = torch.zeros_like(log_probs)
    if config.distill_coef:
        with torch.no_grad():
            log_q = _next_token_log_probs(teacher, batch.prompt_ids, batch.completion_ids, mask, forbidden, tau)
        if config.reward == "sampled":
            teacher_lp = _chosen(log_q, batch.completion_ids, mask)
            r = (teacher_lp - (log_probs.detach() if detach_reward else log_probs)) * mask
            to_go = torch.zeros_like(r)
            for b in range(r.shape[0]):
                running = 0.0
                for t in reversed(range(int(mask[b].sum()))):
                    running = r[b, t] + config.gamma * running
                    to_go[b, t] = running
            per_token = per_token - config.distill_coef * to_go * log_probs
        else:
            allowed = [i for i in range(log_p.shape[-1]) if i not in set(forbidden)]
            lp, lq = log_p[..., allowed], log_q[..., allowed]
            kl = (lp.exp() * (lp - lq)).sum(-1)
            per_token = per_token + config.distill_coef * kl
    if config.verifier_coef:
        rewards = torch.tensor([task.reward(q, o) for q, o in zip(prompts, batch.texts)], dtype=torch.float64)
        grouped = rewards.view(-1, config.samples_per_prompt)
        adv = ((grouped - grouped.mean(1, keepdim=True)) / (grouped.std(1, unbiased=False, keepdim=True) + 1e-6)).view(-1)
        per_token = per_token - config.verifier_coef * adv[:, None] * log_probs
    return (per_token * mask).sum() / mask.sum()


class _FirstCharacterTask:
    """The addition prompts with a reward a random tiny model earns about half the time: 1 iff the completion
    starts with an even digit (so GRPO's groups have mixed rewards and its term a gradient)."""

    def __init__(self, task):
        self.task = task

    def sample_problems(self, num, generator, split="train"):
        return self.task.sample_problems(num, generator, split)

    def reward(self, prompt, completion):
        return 1.0 if completion[:1] in "02468" and completion[:1] != "" else 0.0


def _junk_grads(model):
    for p in model.parameters():
        p.grad = torch.full_like(p, 7.0)


def _check_update(setup, config, method="on_policy", detach_reward=True):
    task, tok, student, teacher, forbidden = setup
    if config.verifier_coef:
        task = _FirstCharacterTask(task)
    model = copy.deepcopy(student)
    reference = copy.deepcopy(student)
    g = torch.Generator().manual_seed(11)
    g_ref = torch.Generator().set_state(g.get_state())
    optimizer = torch.optim.SGD(model.parameters(), lr=ETA)
    _junk_grads(model)
    step = rl.distill_step if method == "on_policy" else rl.sequence_kd_step
    metrics = step(model, teacher, optimizer, tok, task, config, g, forbidden)
    if method == "on_policy":
        batch, prompts = _batch(task, tok, reference, config, g_ref, forbidden)
        loss = _reference_loss(reference, teacher, batch, prompts, task, config, forbidden, detach_reward)
    else:
        batch, prompts = _batch(task, tok, teacher, config, g_ref, forbidden)
        mask = batch.completion_mask
        lp = _chosen(_next_token_log_probs(reference, batch.prompt_ids, batch.completion_ids, mask, forbidden,
                                           config.temperature), batch.completion_ids, mask)
        loss = -(lp * batch.completion_mask).sum() / batch.completion_mask.sum()
    grads = torch.autograd.grad(loss, list(reference.parameters()), allow_unused=True)
    moved = 0.0
    for p0, p1, grad in zip(reference.parameters(), model.parameters(), grads):
        want = p0.detach() - ETA * (torch.zeros_like(p0) if grad is None else grad)
        torch.testing.assert_close(p1.detach(), want, atol=1e-10, rtol=1e-8)
        moved += float((p1 - p0).detach().abs().sum())
    assert moved > 1e-4  # the step did move the weights
    assert metrics["loss"] == pytest.approx(float(loss.detach()), rel=1e-6, abs=1e-9)
    return metrics, loss


@pytest.mark.parametrize("kw", [
    dict(reward="sampled"),
    dict(reward="sampled", gamma=1.0),
    dict(reward="sampled", gamma=0.5, temperature=0.8),
    dict(reward="full"),
    dict(reward="full", temperature=0.7),
    dict(distill_coef=0.0, verifier_coef=1.0),
    dict(reward="sampled", distill_coef=0.3, verifier_coef=1.0),
], ids=["k1", "k1-reward-to-go", "k1-gamma-half", "full-kl", "full-kl-tau", "grpo", "grpo+k1"])
def test_one_step_is_exactly_minus_eta_times_the_reference_gradient(setup, kw):
    _check_update(setup, _config(**kw))


def test_forward_kl_step_matches_the_library_divergence(setup):
    """β = 0 through the trainer equals the token mean of rl.forward_kl_per_token on the same logits."""
    task, tok, student, teacher, forbidden = setup
    config = _config(reward="full", beta=0.0)
    g = torch.Generator().manual_seed(3)
    batch, _ = _batch(task, tok, student, config, torch.Generator().set_state(g.get_state()), forbidden)
    allowed = torch.tensor([i for i in range(len(tok)) if i not in set(forbidden)])
    logits = rl.completion_logits(student, batch.prompt_ids, batch.completion_ids, batch.prompt_mask, allowed)
    t_logits = rl.completion_logits(teacher, batch.prompt_ids, batch.completion_ids, batch.prompt_mask, allowed)
    want = rl.forward_kl_per_token(logits, t_logits, mask=batch.completion_mask)
    want = float((want.detach() * batch.completion_mask).sum() / batch.completion_mask.sum())
    metrics = rl.distill_step(copy.deepcopy(student), teacher, torch.optim.SGD(student.parameters(), lr=0.0), tok, task,
                              config, g, forbidden)
    assert metrics["loss"] == pytest.approx(want, rel=1e-9)


def test_a_k1_reward_that_carries_gradient_would_be_caught(setup):
    """The test above is sensitive to the reward's detach: the undetached loss has another gradient."""
    task, tok, student, teacher, forbidden = setup
    config = _config(reward="sampled")
    batch, prompts = _batch(task, tok, student, config, torch.Generator().manual_seed(11), forbidden)
    grads = []
    for detach in (True, False):
        loss = _reference_loss(student, teacher, batch, prompts, task, config, forbidden, detach_reward=detach)
        grads.append(torch.cat([g.flatten() for g in torch.autograd.grad(loss, list(student.parameters()))]))
    assert float((grads[0] - grads[1]).abs().max()) > 1e-3


def test_sequence_kd_step_is_nll_on_the_teacher_samples(setup):
    _check_update(setup, _config(), method="sequence_kd")


def test_completion_logits_give_the_scorer_s_log_probs(setup):
    task, tok, student, teacher, forbidden = setup
    config = _config(samples_per_prompt=3, max_new_tokens=4)
    batch, _ = _batch(task, tok, student, config, torch.Generator().manual_seed(5), forbidden)
    allowed = torch.tensor([i for i in range(len(tok)) if i not in set(forbidden)])
    logits = rl.completion_logits(student, batch.prompt_ids, batch.completion_ids, batch.prompt_mask, allowed)
    assert logits.shape == (*batch.completion_ids.shape, len(allowed))
    column = {int(a): j for j, a in enumerate(allowed)}
    mask = batch.completion_mask
    tokens = torch.tensor([[column.get(int(x), 0) for x in row] for row in batch.completion_ids])
    got = torch.log_softmax(logits, -1).gather(-1, tokens[..., None]).squeeze(-1) * mask
    want = rl.lm.completion_log_probs(student, batch.prompt_ids, batch.completion_ids, batch.prompt_mask,
                                      forbidden_ids=forbidden, completion_mask=mask)
    torch.testing.assert_close(got.float(), want.float(), atol=1e-6, rtol=1e-6)
    with pytest.raises(ValueError, match="same batch size"):
        rl.completion_logits(student, batch.prompt_ids[:1], batch.completion_ids)
    with pytest.raises(ValueError, match="2-D"):
        rl.completion_logits(student, batch.prompt_ids[0], batch.completion_ids)


def test_train_distillation_leaves_the_teacher_alone_and_logs_every_step(setup):
    task, tok, student, teacher, forbidden = setup
    before = [p.clone() for p in teacher.parameters()]
    model = copy.deepcopy(student)
    config = _config(reward="full", num_steps=3, lr=1e-2)
    history = rl.train_distillation(model, teacher, tok, task, config, forbidden_ids=forbidden, progress=False)
    assert len(history["loss"]) == 3 and len(history["reverse_kl"]) == 3
    assert all(torch.equal(a, b) for a, b in zip(before, teacher.parameters()))
    assert history["reverse_kl"][0] > 0 and history["k1_reward_p01"][0] <= history["k1_reward"][0]
    again = rl.train_distillation(copy.deepcopy(student), teacher, tok, task, config, forbidden_ids=forbidden,
                                  progress=False)
    assert again["loss"].tolist() == history["loss"].tolist()  # one seed, one run
    with pytest.raises(ValueError, match="`method`"):
        rl.train_distillation(model, teacher, tok, task, config, method="dagger", progress=False)


def test_step_errors_name_the_argument(setup):
    task, tok, student, teacher, forbidden = setup
    opt = torch.optim.SGD(student.parameters(), lr=0.0)
    g = torch.Generator().manual_seed(0)
    with pytest.raises(ValueError, match="`config.lmbda`"):
        rl.distill_step(student, teacher, opt, tok, task, _config(lmbda=0.5), g, forbidden)
    with pytest.raises(ValueError, match="`teacher`"):
        rl.distill_step(student, None, opt, tok, task, _config(), g, forbidden)
    with pytest.raises(ValueError, match="`teacher`"):
        rl.sequence_kd_step(student, None, opt, tok, task, _config(), g, forbidden)
    with pytest.raises(ValueError, match="`config`"):
        rl.distill_step(student, teacher, opt, tok, task, {"lr": 1.0}, g, forbidden)
    # GRPO alone needs no teacher
    rl.distill_step(student, None, opt, tok, task, _config(distill_coef=0.0, verifier_coef=1.0), g, forbidden)


def test_prefix_divergence_is_zero_for_the_teacher_itself_and_exact_at_one_token(setup):
    task, tok, student, teacher, forbidden = setup
    prompts = [p.prompt for p in task.held_out_problems(4)]
    same = rl.prefix_divergence(teacher, teacher, tok, prompts, teacher, num_samples=2, max_new_tokens=3,
                                generator=torch.Generator().manual_seed(0), forbidden_ids=forbidden)
    assert same["sequence_kl"] == pytest.approx(0.0, abs=1e-12)
    # one token: the divergence is the first position's KL, whatever was sampled
    one = rl.prefix_divergence(student, teacher, tok, prompts, student, num_samples=3, max_new_tokens=1,
                               generator=torch.Generator().manual_seed(0), forbidden_ids=forbidden)
    ids, mask = rl.lm.encode_prompts(tok, prompts)
    log_p = _next_token_log_probs(student, ids, torch.zeros(len(prompts), 1, dtype=torch.long),
                                  torch.ones(len(prompts), 1, dtype=torch.bool), forbidden, 1.0)[:, 0]
    log_q = _next_token_log_probs(teacher, ids, torch.zeros(len(prompts), 1, dtype=torch.long),
                                  torch.ones(len(prompts), 1, dtype=torch.bool), forbidden, 1.0)[:, 0]
    p = log_p.exp()
    want = float(torch.where(p > 0, p * (log_p - log_q), torch.zeros_like(p)).sum(-1).mean().detach())
    assert one["sequence_kl"] == pytest.approx(want, rel=1e-9)
    assert one["token_kl"] == pytest.approx(want, rel=1e-9) and one["reached"].tolist() == [1.0]


def test_prefix_divergence_sums_positions_weighted_by_the_rows_that_reach_them(setup):
    task, tok, student, teacher, forbidden = setup
    prompts = [p.prompt for p in task.held_out_problems(5)]
    out = rl.prefix_divergence(student, teacher, tok, prompts, student, num_samples=4, max_new_tokens=6,
                               generator=torch.Generator().manual_seed(1), forbidden_ids=forbidden)
    reached = out["reached"]
    ok = reached > 0
    assert out["sequence_kl"] == pytest.approx(float((out["by_position"][ok] * reached[ok]).sum()), rel=1e-9)
    assert torch.isnan(out["by_position"][~ok]).all() and reached[0] == 1.0
    assert (reached[1:] <= reached[:-1]).all()
    for bad, name in ((dict(num_samples=0), "num_samples"), (dict(max_new_tokens=True), "max_new_tokens")):
        kwargs = {**dict(num_samples=1, max_new_tokens=2), **bad}
        with pytest.raises(ValueError, match=f"`{name}`"):
            rl.prefix_divergence(student, teacher, tok, prompts, student, generator=torch.Generator(), **kwargs)


# ============================================================================= task families and routed teachers


def test_families_split_the_task_on_the_units_carry_and_keep_the_split():
    whole = rl.lm.ScratchpadAdditionTask(num_digits=2)
    carry = rl.lm.ScratchpadAdditionTask(num_digits=2, family="units_carry")
    plain = rl.lm.ScratchpadAdditionTask(num_digits=2, family="no_units_carry")
    assert carry.num_train + plain.num_train == whole.num_train
    assert carry.num_held_out + plain.num_held_out == whole.num_held_out
    held = {p.prompt for p in whole.held_out_problems()}
    for task, family in ((carry, "units_carry"), (plain, "no_units_carry")):
        problems = task.held_out_problems() + task.sample_problems(300, torch.Generator().manual_seed(0))
        assert all(whole.family_of(p.prompt) == family for p in problems)
        assert {p.prompt for p in task.held_out_problems()} <= held  # held out in the whole task too
        assert not any(task.is_held_out(p.prompt) for p in task.sample_problems(300, torch.Generator().manual_seed(1)))
    # enumeration: 45 of the 100 units pairs carry
    assert sum((a + b) >= 10 for a in range(10) for b in range(10)) == 45
    assert carry.num_train + carry.num_held_out == 45 * 100
    assert whole.family_of("07+45=") == "units_carry" and whole.family_of("07+42=") == "no_units_carry"
    with pytest.raises(ValueError, match="`family`"):
        rl.lm.ScratchpadAdditionTask(family="tens_carry")


def test_a_family_is_part_of_the_sft_fingerprint_and_the_whole_task_s_is_unchanged():
    from rlbook.lm.sft import _task_fingerprint

    whole = _task_fingerprint(rl.lm.ScratchpadAdditionTask())
    assert "family" not in whole  # checkpoints written before families existed stay valid
    assert _task_fingerprint(rl.lm.ScratchpadAdditionTask(family="units_carry"))["family"] == "units_carry"


def test_a_routed_teacher_grades_each_row_with_its_family_s_teacher(setup):
    task, tok, student, teacher, forbidden = setup
    other = rl.lm.build_policy(student.config, seed=3, device="cpu").double().requires_grad_(False)
    config = _config(reward="full", prompts_per_step=4)
    def route(prompt):
        return "even" if int(prompt[0]) % 2 == 0 else "odd"

    routed = rl.RoutedTeacher({"even": teacher, "odd": other}, route)
    g = torch.Generator().manual_seed(4)
    batch, prompts = _batch(task, tok, student, config, torch.Generator().set_state(g.get_state()), forbidden)
    assert len({route(p) for p in prompts}) == 2  # the batch holds both families
    metrics = rl.distill_step(copy.deepcopy(student), routed, torch.optim.SGD(student.parameters(), lr=0.0), tok, task,
                              config, g, forbidden)
    mask = batch.completion_mask
    log_p = _next_token_log_probs(student, batch.prompt_ids, batch.completion_ids, mask, forbidden, 1.0)
    log_q = torch.stack([_next_token_log_probs(teacher if route(p) == "even" else other, batch.prompt_ids[i:i + 1],
                                               batch.completion_ids[i:i + 1], mask[i:i + 1], forbidden, 1.0)[0]
                         for i, p in enumerate(prompts)])
    allowed = [i for i in range(log_p.shape[-1]) if i not in set(forbidden)]
    kl = (log_p[..., allowed].exp() * (log_p[..., allowed] - log_q[..., allowed])).sum(-1)
    assert metrics["loss"] == pytest.approx(float((kl.detach() * mask).sum() / mask.sum()), rel=1e-9)
    # one teacher under every name is that teacher, bit for bit
    same = rl.RoutedTeacher({"even": teacher, "odd": teacher}, route)
    runs = [rl.distill_step(copy.deepcopy(student), t, torch.optim.SGD(student.parameters(), lr=0.0), tok, task, config,
                            torch.Generator().manual_seed(4), forbidden)["loss"] for t in (same, teacher)]
    assert runs[0] == runs[1]
    with pytest.raises(ValueError, match="no teacher"):
        rl.distill_step(student, rl.RoutedTeacher({"even": teacher}, route), torch.optim.SGD(student.parameters(), lr=0.0),
                        tok, task, config, torch.Generator().manual_seed(4), forbidden)
    with pytest.raises(ValueError, match="`teachers`"):
        rl.RoutedTeacher({}, route)
    with pytest.raises(ValueError, match="`route`"):
        rl.RoutedTeacher({"a": teacher}, "a")
    with pytest.raises(ValueError, match="one model"):
        rl.sequence_kd_step(student, routed, torch.optim.SGD(student.parameters(), lr=0.0), tok, task, config,
                            torch.Generator(), forbidden)
