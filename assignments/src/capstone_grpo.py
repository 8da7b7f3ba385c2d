# %% [markdown] nbgrader={"grade": false, "grade_id": "intro", "locked": true, "schema_version": 3, "solution": false, "task": false}
# # Capstone: GRPO from scratch on the book's addition task
#
# Read chapter 9 of the book first (and assignment 3, whose loss you will reuse). In this capstone you
# write the **whole GRPO loop** yourself, piece by piece, train the book's tiny transformer with it, and
# run a small ablation. The model starts from a fixed supervised start (chapter 9's recipe: 800 steps
# of SFT on labels with deliberate mistakes, seed 0, shipped with `rlbook`): it adds correctly when
# decoding greedily, but a sampled answer is right well under half the time. GRPO on the verifier's
# reward should move the probability onto the right answers.
#
# 1. **score** the sampled completions with the task's verifier (1 point);
# 2. **group-relative advantages** (Shao et al. 2024, arXiv:2402.03300, §4.1.2) (2 points);
# 3. the **log-probabilities** of the completion tokens under a policy (3 points);
# 4. the **GRPO loss**: clipped surrogate, k3 penalty, per-sequence mean (2 points);
# 5. one **optimiser step with gradient accumulation** over microbatches (3 points);
# 6. the **training loop**, graded by the held-out pass@1 it reaches (4 points);
# 7. an **ablation** over at least 4 seeds (3 points) and a **report** (7 points), graded by hand.
#
# **25 points** in all: 15 autograded (some tests are hidden and run only when your notebook is
# graded), 10 graded by hand. The visible tests compare your functions with stored values of the
# `rlbook` library's implementations or check properties; most test cells also hold hidden tests that
# do the same on inputs drawn when your notebook is graded (the training test trains with a seed drawn
# then), so make your functions correct in general, not just on the examples. Write your code where it
# says `YOUR CODE HERE` (delete the `raise NotImplementedError()` line) and do not change the test
# cells. The training test takes about half a minute; the ablation a few minutes.
#
# **How your notebook is graded.** It runs in a fresh kernel in a sandbox (no network, no files but its
# own). Of your code cells, only function and class definitions, imports and constant assignments
# (`EPS = 1e-8`) run at grading: calls and prints you add to try things out are left out (so the
# ablation's runs are not repeated at grading: the grader reads your code and your report). You may
# import `torch`, `numpy`, `math`, `random`, `itertools`, `functools`, `collections`, `typing`,
# `dataclasses`, `statistics`, `warnings` and `matplotlib`, and use what the setup cell defines
# (`sample`, `clip_gradients`, `load_start`, ...). Your code may not call the `rlbook` library's
# implementations of the functions you write (`rl.group_relative_advantages`, `rl.kl_k3`,
# `rl.clipped_surrogate_loss`, `rl.seq_mean_token_mean`, `rl.lm.completion_log_probs`,
# `rl.lm.token_log_probs`, `rl.grpo_microbatch_train_step`, `rl.train_grpo`, ...), and may not reach
# IPython, files, the operating system or the tests' tools; a cell that does is not run, and the
# instructor sees why. Two rules cost points with no trick in sight: a constant computed from other
# names (`N = len(x)`, `SCALE = 1 / K`) is left out like a call, so a function that reads it fails with
# a `NameError`; and a decorator (`@torch.no_grad()`) makes its whole cell not run. Compute such values
# inside your functions. A test fails when it raises: a failed assertion, an error, or running longer
# than the time limit per cell. What you print, and warnings (stderr), never fail a test.

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false, "task": false}
import copy
from importlib.resources import files

import torch

import rlbook as rl

rl.seed_everything(0)
torch.set_num_threads(1)

TASK = rl.lm.AdditionTask(num_digits=2, held_out_fraction=0.1, seed=0)  # "07+45=" -> "052</s>"
TOKENIZER = rl.lm.build_char_tokenizer()
FORBIDDEN = rl.lm.forbidden_token_ids(TOKENIZER)  # special tokens the sampler never draws (EOS excepted)
HELD_OUT = TASK.held_out_problems(200)  # never trained on
START = str(files("rlbook") / "data" / "grpo_start")


def load_start():
    """A fresh copy of the fixed supervised start (the book's small GPT-2 after chapter 9's SFT, seed 0)."""
    return rl.lm.load_policy(START)


def sample(policy, prompts, group_size, generator, max_new_tokens=8):
    """Sample ``group_size`` completions of every prompt with the book's sampler (the "inference engine").

    Temperature 1, special tokens other than EOS never drawn, no gradient. Returns a dict:
    ``prompt_ids`` (N, P), one row per prompt; ``completion_ids`` (N·G, T) and ``completion_mask``
    (N·G, T) bool (True up to and including EOS), row ``i·G + g`` answering prompt i; ``texts``, the
    N·G decoded completions (e.g. ``"052</s>"``), which the verifier scores."""
    prompt_ids, prompt_mask = rl.lm.encode_prompts(TOKENIZER, list(prompts))
    out = rl.lm.sample_completions(policy, prompt_ids, prompt_mask, num_samples=group_size,
                                   max_new_tokens=max_new_tokens, eos_token_id=TOKENIZER.eos_token_id,
                                   pad_token_id=TOKENIZER.pad_token_id, forbidden_ids=FORBIDDEN,
                                   generator=generator, tokenizer=TOKENIZER)
    return {"prompt_ids": prompt_ids, "completion_ids": out.completion_ids,
            "completion_mask": out.completion_mask, "texts": out.texts}


def clip_gradients(parameters, max_norm):
    """``torch.nn.utils.clip_grad_norm_`` (your cells may not reach ``torch.nn.utils`` themselves)."""
    return torch.nn.utils.clip_grad_norm_(parameters, max_norm)


def held_out_pass_at_1(policy, seed):
    """Sampled pass@1 on the 200 held-out problems, 8 samples each (``rl.evaluate``, sampling seed ``seed``)."""
    return rl.evaluate(policy, TOKENIZER, HELD_OUT, num_samples=8, k=8, seed=seed)["pass@1"]


def tiny_policy(seed):
    """A tiny GPT-2 (1 layer, 16 wide) with random weights, for the unit tests."""
    return rl.lm.build_policy(rl.lm.policy_config(TOKENIZER, n_layer=1, n_embd=16, n_head=2), seed=seed)


def tiny_rollout(seed, num_prompts=3, group_size=4):
    """A rollout of ``tiny_policy(seed)`` for the unit tests, with random advantages and perturbed
    "old" and "reference" log-probabilities (so that ratios differ from 1 and the clip matters)."""
    g = torch.Generator().manual_seed(seed)
    policy = tiny_policy(seed)
    prompts = [q.prompt for q in TASK.sample_problems(num_prompts, g)]
    rollout = sample(policy, prompts, group_size, g)
    mask = rollout["completion_mask"]
    noise = torch.randn(2, *mask.shape, generator=g) * mask
    base = torch.log_softmax(torch.randn(*mask.shape, 4, generator=g), -1)[..., 0] * mask  # random log-probs
    return policy, dict(rollout, prompts=prompts, advantages=torch.randn(len(mask), generator=g),
                        old_log_probs=base + 0.3 * noise[0], ref_log_probs=base + 0.3 * noise[1])


def flat_parameters(policy):
    """All parameters of ``policy`` as one vector (a copy)."""
    return torch.cat([p.detach().reshape(-1) for p in policy.parameters()])


def flat_gradients(policy):
    """All gradients of ``policy`` as one vector (zeros where a parameter has none)."""
    return torch.cat([torch.zeros(p.numel()) if p.grad is None else p.grad.reshape(-1) for p in policy.parameters()])


def projections(vector, seed=0):
    """Four fixed random projections of ``vector`` (a fingerprint that is cheap to store)."""
    return torch.randn(4, vector.numel(), generator=torch.Generator().manual_seed(seed)) @ vector

# %% build_only=true
# Run when the assignment is built, then removed: the library's values on the visible tests' inputs.
def _library_log_probs(policy, r):
    return rl.lm.completion_log_probs(policy, r["prompt_ids"], r["completion_ids"], completion_mask=r["completion_mask"],
                                      forbidden_ids=FORBIDDEN)


def _library_loss(lp, r, rows, clip_eps, kl_coef):
    per_token = rl.clipped_surrogate_loss(lp, r["old_log_probs"][rows], r["advantages"][rows][:, None], clip_eps)
    if kl_coef > 0:
        per_token = per_token + kl_coef * rl.kl_k3(lp, r["ref_log_probs"][rows])
    return rl.seq_mean_token_mean(per_token, r["completion_mask"][rows])


def _library_step(policy, optimizer, r, num_microbatches, clip_eps, kl_coef, max_grad_norm):
    N = r["prompt_ids"].shape[0]
    G = r["completion_ids"].shape[0] // N
    per = N // num_microbatches
    optimizer.zero_grad()
    for k in range(num_microbatches):
        groups, rows = slice(k * per, (k + 1) * per), slice(k * per * G, (k + 1) * per * G)
        lp = rl.lm.completion_log_probs(policy, r["prompt_ids"][groups], r["completion_ids"][rows],
                                        completion_mask=r["completion_mask"][rows], forbidden_ids=FORBIDDEN)
        rl.grpo_microbatch_train_step(lp, r["completion_mask"][rows], num_microbatches, "grpo_clip",
                                      advantages=r["advantages"][rows], old_log_probs=r["old_log_probs"][rows],
                                      cliprange=clip_eps, ref_log_probs=r["ref_log_probs"][rows], kl_coef=kl_coef)
    torch.nn.utils.clip_grad_norm_(policy.parameters(), max_grad_norm)
    optimizer.step()


_policy, _r = tiny_rollout(0)
VISIBLE_LOG_PROBS = _library_log_probs(_policy, _r)
_lp = _library_log_probs(_policy, _r)
(_lp * torch.linspace(-1, 1, _lp.numel()).reshape(_lp.shape)).sum().backward()
VISIBLE_LOG_PROB_GRADIENT = projections(flat_gradients(_policy))
_lp = VISIBLE_LOG_PROBS.clone().requires_grad_(True)
_loss = _library_loss(_lp, _r, slice(None), 0.2, 0.05)
VISIBLE_LOSS = (_loss.detach(), torch.autograd.grad(_loss, _lp)[0])
_lp = VISIBLE_LOG_PROBS.clone().requires_grad_(True)
_loss = _library_loss(_lp, _r, slice(None), 0.2, 0.0)
VISIBLE_LOSS_NO_KL = (_loss.detach(), torch.autograd.grad(_loss, _lp)[0])
_policy, _r = tiny_rollout(1, num_prompts=4)
_before = flat_parameters(_policy)
_opt = torch.optim.SGD(_policy.parameters(), lr=0.5)
VISIBLE_STEPS = []
for _ in range(2):  # two steps on the same batch: the second starts from the first's parameters
    _library_step(_policy, _opt, _r, 2, 0.2, 0.05, 0.05)
    _after = flat_parameters(_policy)
    VISIBLE_STEPS.append(projections(_after - _before))
    _before = _after
_start = load_start()
START_PASS_AT_1 = [held_out_pass_at_1(_start, s) for s in (1, 2, 3, 4)]

# %% [markdown] nbgrader={"grade": false, "grade_id": "task_score", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## 1. Score with the verifier (1 point)
#
# `prompts` holds N prompts and `texts` the N·G completions sampled for them, the G completions of
# prompt i in rows `i·G … i·G + G − 1` (the layout `sample` returns). Return the `(N·G,)` float tensor
# of rewards `task.reward(prompt, completion)` (1.0 for exactly the right answer then EOS, else 0.0).
# Raise a `ValueError` when `len(texts)` is not `len(prompts) * group_size`.

# %% nbgrader={"grade": false, "grade_id": "score_completions", "locked": false, "schema_version": 3, "solution": true, "task": false}
def score_completions(task, prompts, texts, group_size):
    """N prompts, N·G completion texts (group-contiguous) -> (N·G,) float rewards from the verifier."""
    ### BEGIN SOLUTION
    if len(texts) != len(prompts) * group_size:
        raise ValueError(f"texts: {len(texts)} completions for {len(prompts)} prompts × {group_size}")
    return torch.tensor([task.reward(prompts[i // group_size], text) for i, text in enumerate(texts)])
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_score_completions", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
prompts = ["07+45=", "90+19="]
texts = ["052</s>", "052", "52</s>", "109</s>", "052</s>", "109</s>", "109</s></s>", "190</s>"]
rewards = score_completions(TASK, prompts, texts, 4)
assert rewards.shape == (8,) and rewards.dtype.is_floating_point
torch.testing.assert_close(rewards, torch.tensor([1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0]))
try:
    score_completions(TASK, prompts, texts, 3)
    raise AssertionError("8 completions for 2 prompts in groups of 3 should raise ValueError")
except ValueError:
    pass
### BEGIN HIDDEN TESTS
g = torch.Generator().manual_seed(GRADING_SEED)
problems = TASK.sample_problems(5, g)
texts = [q.answer + "</s>" if torch.rand(1, generator=g) < 0.5 else TASK.corrupt(q.answer, g) + "</s>"
         for q in problems for _ in range(3)]
expected = torch.tensor([TASK.reward(problems[i // 3].prompt, t) for i, t in enumerate(texts)])
torch.testing.assert_close(score_completions(TASK, [q.prompt for q in problems], texts, 3), expected)
### END HIDDEN TESTS
print("score_completions: OK")

# %% [markdown] nbgrader={"grade": false, "grade_id": "task_advantages", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## 2. Group-relative advantages (2 points)
#
# As in assignment 3: for completion i of a group with rewards $r_1, \dots, r_G$,
# $\hat A_i = (r_i - \operatorname{mean}(r)) / (\operatorname{std}(r) + \varepsilon)$ with the
# **population** standard deviation and $\varepsilon = 10^{-6}$; groups are consecutive rows. Return
# `(N·G,)`; raise a `ValueError` when the length is not a multiple of `group_size`.

# %% nbgrader={"grade": false, "grade_id": "group_advantages", "locked": false, "schema_version": 3, "solution": true, "task": false}
def group_advantages(rewards, group_size, eps=1e-6):
    """(N·G,) rewards -> (N·G,) group-normalised advantages."""
    ### BEGIN SOLUTION
    if rewards.numel() % group_size != 0:
        raise ValueError(f"rewards: {rewards.numel()} is not a multiple of group_size {group_size}")
    grouped = rewards.reshape(-1, group_size)
    centred = grouped - grouped.mean(dim=1, keepdim=True)
    return (centred / (grouped.std(dim=1, unbiased=False, keepdim=True) + eps)).reshape(-1)
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_group_advantages", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
rewards = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0])
EXPECTED = snapshot(rl.group_relative_advantages(torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0]), 4,
                                                 scale="std", std="population"))
torch.testing.assert_close(group_advantages(rewards, 4), EXPECTED, atol=1e-6, rtol=1e-6)
assert torch.all(group_advantages(rewards, 4)[8:] == 0), "a group whose rewards are all equal has advantage 0"
try:
    group_advantages(torch.ones(7), 4)
    raise AssertionError("7 rewards in groups of 4 should raise ValueError")
except ValueError:
    pass
### BEGIN HIDDEN TESTS
for i in range(4):
    g = torch.Generator().manual_seed(GRADING_SEED + i)
    r = (torch.rand((3 + i) * (2 + i), generator=g) < 0.5).float() * torch.rand(1, generator=g)
    expected = rl.group_relative_advantages(r, 2 + i, scale="std", std="population")
    torch.testing.assert_close(group_advantages(r, 2 + i), expected, atol=1e-6, rtol=1e-6)
### END HIDDEN TESTS
print("group_advantages: OK")

# %% [markdown] nbgrader={"grade": false, "grade_id": "task_log_probs", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## 3. The log-probabilities of the completions (3 points)
#
# `policy` is a causal LM (a `transformers` GPT-2): `policy(input_ids=ids, attention_mask=mask).logits`
# is `(B, L, V)`, and the logits at position t predict token t + 1. `prompt_ids` is `(N, P)`, one row
# per prompt (all prompts of this task have the same length, so there is no padding);
# `completion_ids` and `completion_mask` are `(N·G, T)`, G completions per prompt in consecutive rows.
# Return the `(N·G, T)` log-probabilities $\log\pi_\theta(o_t \mid q, o_{<t})$ of the completion tokens
# under the distribution the sampler draws from: the softmax of the logits **over the allowed tokens
# only** (the ids in `forbidden_ids` get probability 0, so leave them out of the normalisation, e.g. by
# setting their logits to −10⁹). Put exactly 0 where `completion_mask` is False. The result must carry
# the gradient with respect to the policy's parameters. (Tokens after a completion's EOS are padding;
# under causal attention they do not change the log-probabilities before them.)

# %% nbgrader={"grade": false, "grade_id": "response_log_probs", "locked": false, "schema_version": 3, "solution": true, "task": false}
def response_log_probs(policy, prompt_ids, completion_ids, completion_mask, forbidden_ids=()):
    """(N, P) prompts, (N·G, T) completions and mask -> (N·G, T) log π_θ of the completion tokens."""
    ### BEGIN SOLUTION
    group_size = completion_ids.shape[0] // prompt_ids.shape[0]
    input_ids = torch.cat([prompt_ids.repeat_interleave(group_size, dim=0), completion_ids], dim=1)
    logits = policy(input_ids=input_ids, attention_mask=torch.ones_like(input_ids)).logits
    logits = logits[:, prompt_ids.shape[1] - 1:-1, :].float()
    if len(forbidden_ids) > 0:
        logits = logits.index_fill(-1, torch.tensor(list(forbidden_ids)), -1e9)
    log_probs = torch.log_softmax(logits, dim=-1).gather(-1, completion_ids.unsqueeze(-1)).squeeze(-1)
    return torch.where(completion_mask, log_probs, torch.zeros_like(log_probs))
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_response_log_probs", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# a tiny random GPT-2 and 3 prompts × 4 completions it sampled; the library's log-probs (stored numbers)
policy, r = tiny_rollout(0)
EXPECTED = snapshot(VISIBLE_LOG_PROBS)
mine = response_log_probs(policy, r["prompt_ids"], r["completion_ids"], r["completion_mask"], FORBIDDEN)
assert mine.shape == r["completion_ids"].shape
torch.testing.assert_close(mine, EXPECTED, atol=1e-5, rtol=1e-5)
assert torch.all(mine[~r["completion_mask"]] == 0) and torch.all(mine <= 0)
### BEGIN HIDDEN TESTS
for i in range(2):
    policy, r = tiny_rollout(GRADING_SEED + i, num_prompts=2 + i, group_size=3 + i)
    expected = rl.lm.completion_log_probs(policy, r["prompt_ids"], r["completion_ids"],
                                          completion_mask=r["completion_mask"], forbidden_ids=FORBIDDEN)
    mine = response_log_probs(policy, r["prompt_ids"], r["completion_ids"], r["completion_mask"], FORBIDDEN)
    torch.testing.assert_close(mine, expected, atol=1e-5, rtol=1e-5)
### END HIDDEN TESTS
print("response_log_probs: OK")

# %% nbgrader={"grade": true, "grade_id": "test_response_log_probs_gradient", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
# the gradient of a weighted sum of your log-probs with respect to the policy's parameters
# (four random projections of it, against the library's, stored)
policy, r = tiny_rollout(0)
mine = response_log_probs(policy, r["prompt_ids"], r["completion_ids"], r["completion_mask"], FORBIDDEN)
assert mine.requires_grad, "the log-probs must carry the gradient with respect to the policy's parameters"
(mine * torch.linspace(-1, 1, mine.numel()).reshape(mine.shape)).sum().backward()
EXPECTED = snapshot(VISIBLE_LOG_PROB_GRADIENT)
torch.testing.assert_close(projections(flat_gradients(policy)), EXPECTED, atol=1e-5, rtol=1e-4)
### BEGIN HIDDEN TESTS
policy, r = tiny_rollout(GRADING_SEED + 5, num_prompts=2, group_size=5)
ref_policy = copy.deepcopy(policy)
weights = torch.randn(r["completion_ids"].shape, generator=torch.Generator().manual_seed(GRADING_SEED))
(response_log_probs(policy, r["prompt_ids"], r["completion_ids"], r["completion_mask"], FORBIDDEN) * weights).sum().backward()
(rl.lm.completion_log_probs(ref_policy, r["prompt_ids"], r["completion_ids"], completion_mask=r["completion_mask"],
                            forbidden_ids=FORBIDDEN) * weights).sum().backward()
torch.testing.assert_close(flat_gradients(policy), flat_gradients(ref_policy), atol=1e-5, rtol=1e-4)
### END HIDDEN TESTS
print("gradient: OK")

# %% [markdown] nbgrader={"grade": false, "grade_id": "task_loss", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## 4. The GRPO loss (2 points)
#
# Per token, with $\rho = \exp(\log\pi_\theta - \log\pi_{\theta_\text{old}})$, the sequence's advantage
# $\hat A$ and $\log r = \log\pi_\text{ref} - \log\pi_\theta$,
#
# $$\ell = -\min\big(\rho\hat A,\ \operatorname{clip}(\rho, 1-\varepsilon, 1+\varepsilon)\,\hat A\big)
#          + \beta\,(e^{\log r} - 1 - \log r),$$
#
# averaged over each completion's real tokens (the mask), then over the completions (GRPO's
# per-sequence mean). `log_probs`, `old_log_probs`, `ref_log_probs` and `mask` are `(B, T)`,
# `advantages` is `(B,)`; `clip_eps` is ε, `kl_coef` is β. When `kl_coef` is 0, `ref_log_probs` may be
# `None`. Return a scalar that autograd can differentiate with respect to `log_probs`.

# %% nbgrader={"grade": false, "grade_id": "grpo_loss", "locked": false, "schema_version": 3, "solution": true, "task": false}
def grpo_loss(log_probs, old_log_probs, ref_log_probs, advantages, mask, clip_eps=0.2, kl_coef=0.0):
    """(B, T) log-probs now, at sampling and under the reference, (B,) advantages, (B, T) mask -> scalar."""
    ### BEGIN SOLUTION
    ratio = torch.exp(log_probs - old_log_probs)
    adv = advantages[:, None]
    per_token = -torch.minimum(ratio * adv, ratio.clamp(1 - clip_eps, 1 + clip_eps) * adv)
    if kl_coef > 0:
        log_r = ref_log_probs - log_probs
        per_token = per_token + kl_coef * (torch.expm1(log_r) - log_r)
    m = mask.to(per_token.dtype)
    return ((per_token * m).sum(-1) / m.sum(-1)).mean()
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_grpo_loss", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# the library's loss and its gradient on the tiny model's rollout (stored numbers), with and without β
policy, r = tiny_rollout(0)
LOG_PROBS = snapshot(VISIBLE_LOG_PROBS)
EXPECTED = snapshot([VISIBLE_LOSS, VISIBLE_LOSS_NO_KL])
for kl_coef, (loss, loss_grad) in zip((0.05, 0.0), EXPECTED):
    lp = LOG_PROBS.clone().requires_grad_(True)
    mine = grpo_loss(lp, r["old_log_probs"], r["ref_log_probs"] if kl_coef else None, r["advantages"],
                     r["completion_mask"], 0.2, kl_coef)
    (grad,) = torch.autograd.grad(mine, lp)
    torch.testing.assert_close(mine, loss, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(grad, loss_grad, atol=1e-6, rtol=1e-5)
### BEGIN HIDDEN TESTS
for i in range(3):
    policy, r = tiny_rollout(GRADING_SEED + 10 + i, num_prompts=2 + i)
    base = rl.lm.completion_log_probs(policy, r["prompt_ids"], r["completion_ids"],
                                      completion_mask=r["completion_mask"], forbidden_ids=FORBIDDEN).detach()
    clip_eps, kl_coef = 0.1 + 0.1 * i, 0.02 * i
    lp = base.clone().requires_grad_(True)
    mine = grpo_loss(lp, r["old_log_probs"], r["ref_log_probs"], r["advantages"], r["completion_mask"], clip_eps, kl_coef)
    (grad,) = torch.autograd.grad(mine, lp)
    lp2 = base.clone().requires_grad_(True)
    per_token = (rl.clipped_surrogate_loss(lp2, r["old_log_probs"], r["advantages"][:, None], clip_eps)
                 + kl_coef * rl.kl_k3(lp2, r["ref_log_probs"]))
    theirs = rl.seq_mean_token_mean(per_token, r["completion_mask"])
    (grad2,) = torch.autograd.grad(theirs, lp2)
    torch.testing.assert_close(mine, theirs, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(grad, grad2, atol=1e-6, rtol=1e-5)
### END HIDDEN TESTS
print("grpo_loss: OK")

# %% [markdown] nbgrader={"grade": false, "grade_id": "task_step", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## 5. One optimiser step, with gradient accumulation (3 points)
#
# A batch may not fit in memory at once: split it into `num_microbatches` microbatches of **whole
# groups** (consecutive: the first N/M prompts and their completions, then the next, ...), run
# forward and backward on each, and accumulate the gradients, so that the step is the step on the
# whole batch. `batch` is a dict with `prompt_ids` (N, P), `completion_ids` and `completion_mask`
# (N·G, T), `advantages` (N·G,), `old_log_probs` (N·G, T) and `ref_log_probs` (N·G, T, or `None`
# when `kl_coef` is 0). One call:
#
# 1. clears the gradients left from before;
# 2. for each microbatch: its log-probs with your `response_log_probs`, its loss with your `grpo_loss`,
#    scaled so that the accumulated gradient is the gradient of the whole batch's loss, `backward()`;
# 3. clips the total gradient norm to `max_grad_norm` with `clip_gradients(policy.parameters(), ...)`;
# 4. takes one `optimizer.step()`.
#
# Return the whole batch's loss as a float. Raise a `ValueError` when `num_microbatches` does not
# divide N.

# %% nbgrader={"grade": false, "grade_id": "grpo_microbatch_step", "locked": false, "schema_version": 3, "solution": true, "task": false}
def grpo_microbatch_step(policy, optimizer, batch, num_microbatches=1, clip_eps=0.2, kl_coef=0.0, max_grad_norm=1.0,
                         forbidden_ids=()):
    """One optimiser step on ``batch``, accumulated over ``num_microbatches`` microbatches -> the batch loss."""
    ### BEGIN SOLUTION
    num_prompts = batch["prompt_ids"].shape[0]
    group_size = batch["completion_ids"].shape[0] // num_prompts
    if num_microbatches < 1 or num_prompts % num_microbatches:
        raise ValueError(f"num_microbatches: {num_microbatches} does not divide the {num_prompts} prompts")
    per = num_prompts // num_microbatches
    optimizer.zero_grad()
    total = 0.0
    for k in range(num_microbatches):
        groups = slice(k * per, (k + 1) * per)
        rows = slice(k * per * group_size, (k + 1) * per * group_size)
        log_probs = response_log_probs(policy, batch["prompt_ids"][groups], batch["completion_ids"][rows],
                                       batch["completion_mask"][rows], forbidden_ids)
        ref = None if batch["ref_log_probs"] is None else batch["ref_log_probs"][rows]
        loss = grpo_loss(log_probs, batch["old_log_probs"][rows], ref, batch["advantages"][rows],
                         batch["completion_mask"][rows], clip_eps, kl_coef) / num_microbatches
        loss.backward()
        total += loss.item()
    clip_gradients(policy.parameters(), max_grad_norm)
    optimizer.step()
    return total
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_microbatch_step", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# two steps (SGD, lr 0.5) on the same batch of the tiny model, 2 microbatches, β = 0.05, gradient norm
# clipped to 0.05: four random projections of each step's parameter change, against the library's
# (stored numbers). The second step starts where the first ended: its gradient is the gradient there,
# and nothing else.
policy, r = tiny_rollout(1, num_prompts=4)
optimizer = torch.optim.SGD(policy.parameters(), lr=0.5)
EXPECTED = snapshot(VISIBLE_STEPS)
before = flat_parameters(policy)
for expected in EXPECTED:
    grpo_microbatch_step(policy, optimizer, r, 2, 0.2, 0.05, 0.05, FORBIDDEN)
    after = flat_parameters(policy)
    torch.testing.assert_close(projections(after - before), expected, atol=1e-5, rtol=1e-4)
    before = after
### BEGIN HIDDEN TESTS
for i, (num_prompts, num_microbatches, kl_coef) in enumerate([(3, 3, 0.1), (4, 2, 0.0)]):
    policy, r = tiny_rollout(GRADING_SEED + 20 + i, num_prompts=num_prompts)
    if not kl_coef:
        r["ref_log_probs"] = None
    ref_policy = copy.deepcopy(policy)
    mine_opt = torch.optim.SGD(policy.parameters(), lr=0.5)
    ref_opt = torch.optim.SGD(ref_policy.parameters(), lr=0.5)
    for _ in range(2):
        grpo_microbatch_step(policy, mine_opt, r, num_microbatches, 0.2, kl_coef, 0.05, FORBIDDEN)
        N, G = r["prompt_ids"].shape[0], r["completion_ids"].shape[0] // r["prompt_ids"].shape[0]
        per = N // num_microbatches
        ref_opt.zero_grad()
        for part in range(num_microbatches):
            groups, rows = slice(part * per, (part + 1) * per), slice(part * per * G, (part + 1) * per * G)
            lp = rl.lm.completion_log_probs(ref_policy, r["prompt_ids"][groups], r["completion_ids"][rows],
                                            completion_mask=r["completion_mask"][rows], forbidden_ids=FORBIDDEN)
            rl.grpo_microbatch_train_step(
                lp, r["completion_mask"][rows], num_microbatches, "grpo_clip", advantages=r["advantages"][rows],
                old_log_probs=r["old_log_probs"][rows], cliprange=0.2, kl_coef=kl_coef,
                ref_log_probs=None if r["ref_log_probs"] is None else r["ref_log_probs"][rows])
        clip_gradients(ref_policy.parameters(), 0.05)
        ref_opt.step()
        torch.testing.assert_close(flat_parameters(policy), flat_parameters(ref_policy), atol=1e-5, rtol=1e-4)
### END HIDDEN TESTS
print("grpo_microbatch_step: OK")

# %% nbgrader={"grade": true, "grade_id": "test_gradient_accumulation", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
# the same batch in 1, 2 or 4 microbatches: the same step (no clipping here) and the same loss
policy, r = tiny_rollout(2, num_prompts=4)
results = []
for num_microbatches in (1, 2, 4):
    model = copy.deepcopy(policy)
    loss = grpo_microbatch_step(model, torch.optim.SGD(model.parameters(), lr=0.5), r, num_microbatches,
                                0.2, 0.05, 1e9, FORBIDDEN)
    results.append((float(loss), flat_parameters(model)))
for loss, parameters in results[1:]:
    assert abs(loss - results[0][0]) < 1e-5, f"the batch loss should not depend on the microbatches: {loss} vs {results[0][0]}"
    torch.testing.assert_close(parameters, results[0][1], atol=1e-6, rtol=1e-5)
try:
    grpo_microbatch_step(copy.deepcopy(policy), torch.optim.SGD(policy.parameters(), lr=0.5), r, 3, 0.2, 0.05, 1.0, FORBIDDEN)
    raise AssertionError("4 prompts in 3 microbatches should raise ValueError")
except ValueError:
    pass
### BEGIN HIDDEN TESTS
policy, r = tiny_rollout(GRADING_SEED + 30, num_prompts=6, group_size=3)
results = []
for num_microbatches in (1, 3, 6):
    model = copy.deepcopy(policy)
    loss = grpo_microbatch_step(model, torch.optim.SGD(model.parameters(), lr=0.5), r, num_microbatches,
                                0.3, 0.1, 1e9, FORBIDDEN)
    results.append((float(loss), flat_parameters(model)))
for loss, parameters in results[1:]:
    assert abs(loss - results[0][0]) < 1e-5
    torch.testing.assert_close(parameters, results[0][1], atol=1e-6, rtol=1e-5)
### END HIDDEN TESTS
print("gradient accumulation: OK")

# %% [markdown] nbgrader={"grade": false, "grade_id": "task_loop", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## 6. The training loop (4 points)
#
# Write `train_grpo_loop`: it trains `policy` in place with your pieces and returns the list of the
# batch's mean reward at each step. Every step:
#
# 1. draw `prompts_per_step` training problems with `task.sample_problems(prompts_per_step, generator)`
#    and sample `group_size` completions of each with `sample(policy, prompts, group_size, generator)`,
#    where `generator = torch.Generator().manual_seed(seed)` is made once, before the first step;
# 2. score them with `score_completions` and compute the advantages with `group_advantages`;
# 3. compute, without gradient, the log-probs of the completions under the current policy (π_old:
#    the policy that sampled them) and, when `kl_coef` > 0, under a frozen copy of the policy made
#    before the first step (π_ref; `copy.deepcopy`);
# 4. take one `grpo_microbatch_step` on the batch (`max_grad_norm` 1.0, `forbidden_ids=FORBIDDEN`),
#    with a `torch.optim.AdamW(policy.parameters(), lr=lr, weight_decay=0.0)` made once, before the
#    first step.
#
# The test below trains the supervised start for 40 steps of 32 prompts × 8 completions (lr 5·10⁻⁴,
# ε = 0.2, β = 0, 2 microbatches), about half a minute, then measures the held-out pass@1 (200
# problems never trained on, 8 samples each). The start's is about 0.40. A correct loop reaches at
# least **0.55**: the instructor's loop reached 0.61 to 0.68 over 7 seeds (mean 0.658, standard
# deviation 0.027), and 0.55 is that mean minus 4 standard deviations. A loop that does not learn
# stays near 0.40 (0.37 to 0.40 without the optimiser step) or falls (0.00 with the advantages' sign
# flipped). When your notebook is graded, the loop trains with a seed you have not seen.

# %% nbgrader={"grade": false, "grade_id": "train_grpo_loop", "locked": false, "schema_version": 3, "solution": true, "task": false}
def train_grpo_loop(policy, task, num_steps=40, prompts_per_step=32, group_size=8, lr=5e-4, clip_eps=0.2,
                    kl_coef=0.0, num_microbatches=2, seed=0):
    """Train ``policy`` in place with GRPO on ``task``'s verifier -> list of the mean reward at each step."""
    ### BEGIN SOLUTION
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.AdamW(policy.parameters(), lr=lr, weight_decay=0.0)
    ref_policy = copy.deepcopy(policy) if kl_coef > 0 else None
    mean_rewards = []
    for _ in range(num_steps):
        prompts = [q.prompt for q in task.sample_problems(prompts_per_step, generator)]
        batch = sample(policy, prompts, group_size, generator)
        rewards = score_completions(task, prompts, batch["texts"], group_size)
        batch["advantages"] = group_advantages(rewards, group_size)
        with torch.no_grad():
            scored = (batch["prompt_ids"], batch["completion_ids"], batch["completion_mask"], FORBIDDEN)
            batch["old_log_probs"] = response_log_probs(policy, *scored)
            batch["ref_log_probs"] = None if ref_policy is None else response_log_probs(ref_policy, *scored)
        grpo_microbatch_step(policy, optimizer, batch, num_microbatches, clip_eps, kl_coef, 1.0, FORBIDDEN)
        mean_rewards.append(float(rewards.mean()))
    return mean_rewards
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_training", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false} rlbook={"timeout": 600}
seed = 0
### BEGIN HIDDEN TESTS
seed = GRADING_SEED
### END HIDDEN TESTS
START_PASS_AT_1 = snapshot(START_PASS_AT_1)  # the start's held-out pass@1 at sampling seeds 1-4
policy = load_start()
mean_rewards = train_grpo_loop(policy, TASK, num_steps=40, prompts_per_step=32, group_size=8, lr=5e-4, clip_eps=0.2,
                               kl_coef=0.0, num_microbatches=2, seed=seed)
after = held_out_pass_at_1(policy, seed + 1)
print(f"batch reward: first step {mean_rewards[0]:.3f}, last 5 steps {sum(mean_rewards[-5:]) / 5:.3f}")
print(f"held-out pass@1: start {sum(START_PASS_AT_1) / 4:.3f}, after 40 steps {after:.3f} (needs ≥ 0.55)")
assert len(mean_rewards) == 40, "one mean reward per step"
assert after >= 0.55, f"held-out pass@1 after training is {after:.3f}; a correct loop reaches at least 0.55"

# %% [markdown] nbgrader={"grade": false, "grade_id": "task_ablation", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## 7. An ablation (3 points) and a report (7 points), graded by hand
#
# Pick **one** setting of the loop and compare two values of it, each trained from the supervised
# start on **at least 4 seeds**, measuring held-out pass@1 with `held_out_pass_at_1` (and anything else
# you find useful, e.g. the reward curves). Suggestions: the group size at a fixed budget of
# completions per step (G = 2 with 128 prompts against G = 8 with 32 prompts), `kl_coef` (0 against
# 0.1), `clip_eps`, or the learning rate. Write the code in the cell below and run it (a few minutes;
# it does not run again at grading, so keep its printed output in the notebook you hand in). Report a
# mean and a spread (e.g. a 95 % interval: `rl.mean_ci`) for each value.

# %% nbgrader={"grade": true, "grade_id": "ablation", "locked": false, "points": 3, "schema_version": 3, "solution": true, "task": false}
### BEGIN SOLUTION
def run_ablation(settings, seeds, num_steps=40):
    """Train from the start for every setting and seed -> {setting name: [held-out pass@1 per seed]}."""
    results = {}
    for name, kwargs in settings.items():
        results[name] = []
        for s in seeds:
            policy = load_start()
            train_grpo_loop(policy, TASK, num_steps=num_steps, seed=s, **kwargs)
            results[name].append(held_out_pass_at_1(policy, s + 1))
    return results


ABLATION = run_ablation({"G = 2, 128 prompts": dict(group_size=2, prompts_per_step=128),
                         "G = 8, 32 prompts": dict(group_size=8, prompts_per_step=32)}, seeds=[0, 1, 2, 3])
for name, values in ABLATION.items():
    mean, low, high = rl.mean_ci(values)
    print(f"{name}: held-out pass@1 per seed {[round(v, 3) for v in values]}, mean {mean:.3f} [{low:.3f}, {high:.3f}]")
### END SOLUTION

# %% [markdown] nbgrader={"grade": false, "grade_id": "task_report", "locked": true, "schema_version": 3, "solution": false, "task": false}
# **Report (7 points).** In the cell below, in 200–400 words: (a) what you varied and why you expected
# it to matter, in terms of the GRPO gradient (2 points); (b) the results with numbers from your runs:
# the mean and spread per value, and whether the difference is larger than the spread over seeds (3
# points); (c) one thing your loop does differently from `rl.train_grpo` or from the DeepSeekMath
# recipe (arXiv:2402.03300, Algorithm 1), and what you would change first with ten times the compute
# (2 points).

# %% [markdown] nbgrader={"grade": true, "grade_id": "report", "locked": false, "points": 7, "schema_version": 3, "solution": true, "task": false}
# (a) I varied the group size at a fixed budget of 256 completions per step: G = 2 with 128 prompts
# against G = 8 with 32 prompts. A group contributes a gradient only when its rewards differ. For a
# prompt the policy solves with probability p, that happens with probability 2p(1 − p) for G = 2
# (about 0.48 at the start's p ≈ 0.4) against 1 − p⁸ − (1 − p)⁸ ≈ 0.98 for G = 8; and with G = 2 the
# normalised advantages are always ±1, so every informative pair pushes equally hard whatever the
# prompt's difficulty. On the other hand G = 2 sees four times as many prompts per step, so its
# gradient averages over more problems. I expected G = 8 to win through its more informative groups.
#
# (b) Held-out pass@1 after 40 steps (start about 0.40), seeds 0–3: G = 2: 0.711, 0.670, 0.669, 0.734,
# mean 0.696 (95 % interval [0.645, 0.747]); G = 8: 0.682, 0.664, 0.655, 0.646, mean 0.662
# ([0.637, 0.686]). G = 2 came out ahead, the opposite of what I expected, but the intervals overlap.
# Paired by seed, G = 2 was ahead on all four (by 0.029, 0.006, 0.014, 0.088), yet the paired
# difference's 95 % interval, 0.034 ± 0.059, still contains 0: four seeds do not establish a
# difference, and the honest summary is "no difference resolved; if anything, more prompts per step
# helped more than larger groups at this budget".
#
# (c) My loop takes one optimiser step per batch, with π_old computed just before it, so the ratio ρ
# is exactly 1 in the loss and the clip never acts; DeepSeekMath's Algorithm 1 takes μ steps per batch
# (where ρ moves away from 1 and the clip matters) and keeps a β = 0.04 penalty to a reference model.
# `rl.train_grpo` also encodes each prompt once for its whole group (prefix sharing). With ten times
# the compute I would first make the comparison conclusive (10 seeds, and 150 steps, where chapter 9's
# recipe reaches pass@1 ≈ 0.9 and the two settings may separate or converge), before trying μ > 1.
#
# *Marking: (a) 2 points for a reason stated in terms of the gradient (which groups carry signal, how
# the advantages are scaled, what the penalty pulls towards); (b) 3 points for per-value means and
# spreads from at least 4 seeds, quoted from the printed output, and an honest comparison of the
# difference with the spread (a difference inside the seeds' spread is reported as such); (c) 2 points
# for a correct difference and a sensible first change.*
