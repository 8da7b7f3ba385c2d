# %% [markdown] nbgrader={"grade": false, "grade_id": "intro", "locked": true, "schema_version": 3, "solution": false, "task": false}
# # Assignment 3 (Part III): the GRPO loss, piece by piece
#
# Read chapter 9 of the book first (GRPO: group-relative advantages, the k3 KL penalty, loss
# aggregation). In this assignment you write the four pieces of GRPO's loss yourself and put them
# together:
#
# 1. **group-relative advantages** (Shao et al. 2024, arXiv:2402.03300, §4.1.2): each completion's
#    reward compared with the other completions of the same prompt (4 points);
# 2. the **k3 estimator** of KL(π_θ ‖ π_ref) (Schulman 2020, "Approximating KL Divergence") (3 points);
# 3. the **three loss aggregations** in use: GRPO's per-sequence mean, DAPO's token mean
#    (Yu et al. 2025, arXiv:2503.14476) and Dr. GRPO's fixed-length mean (Liu et al. 2025,
#    arXiv:2503.20783) (3 points);
# 4. the **GRPO loss** itself, and a question about its value at the first step (3 + 1 points, and
#    3 points for the written answer).
#
# **17 points** in all: 14 autograded (some tests are hidden and run only when your notebook is
# graded), 3 for the written answer, graded by hand. The visible tests compare your functions with
# stored values of the `rlbook` library's implementations; most test cells also hold hidden tests
# that do the same on inputs drawn when your notebook is graded, so make your functions correct in
# general, not just on the examples. Write your code where it says `YOUR CODE HERE` (delete the
# `raise NotImplementedError()` line) and do not change the test cells. Use only PyTorch operations.
#
# **How your notebook is graded.** It runs in a fresh kernel in a sandbox (no network, no files but its
# own). Of your code cells, only function and class definitions, imports and constant assignments
# (`EPS = 1e-8`) run at grading: calls and prints you add to try things out are left out. You may
# import `torch`, `numpy`, `math`, `random`, `itertools`, `functools`, `collections`, `typing`,
# `dataclasses`, `statistics`, `warnings` and `matplotlib`. Your code may not call the `rlbook`
# library's implementations of the functions you write (nor the notebook's reference functions), and
# may not reach IPython, files, the operating system or the tests' tools; a cell that does is not run,
# and the instructor sees why. Two rules cost points with no trick in sight: a constant computed from
# other names (`N = len(x)`, `SCALE = 1 / K`) is left out like a call, so a function that reads it fails
# with a `NameError`; and a decorator (`@torch.no_grad()`) makes its whole cell not run. Compute such
# values inside your functions. A test fails when it raises: a failed assertion, an error, or running
# longer than the time limit per cell. What you print, and warnings (stderr), never fail a test.

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false, "task": false}
import torch

import rlbook as rl

rl.seed_everything(0)
torch.set_default_dtype(torch.float64)  # exact comparisons with the library


def random_batch(seed, num_prompts=3, group_size=4, max_length=7):
    """A random batch: rewards (B,), log-probs (B, T) and a completion mask (B, T), B = prompts × G."""
    g = torch.Generator().manual_seed(seed)
    B = num_prompts * group_size
    lengths = torch.randint(1, max_length + 1, (B,), generator=g)
    mask = torch.arange(max_length)[None, :] < lengths[:, None]
    log_probs = -torch.rand(B, max_length, generator=g) * 3
    return {"rewards": torch.randint(0, 3, (B,), generator=g).double() / 2,
            "log_probs": log_probs,
            "old_log_probs": log_probs + 0.3 * torch.randn(B, max_length, generator=g),
            "ref_log_probs": log_probs + 0.5 * torch.randn(B, max_length, generator=g),
            "mask": mask, "group_size": group_size, "max_length": max_length}

# %% build_only=true
# Run when the assignment is built, then removed: the visible tests' inputs and the library's values.
VISIBLE_BATCHES = [random_batch(seed, num_prompts=2, group_size=3, max_length=4) for seed in range(3)]
VISIBLE_LOSSES = [torch.randn(b["mask"].shape, generator=torch.Generator().manual_seed(seed))
                  for seed, b in enumerate(VISIBLE_BATCHES)]
VISIBLE_ADVANTAGES = [torch.randn(b["rewards"].shape, generator=torch.Generator().manual_seed(10 + seed))
                      for seed, b in enumerate(VISIBLE_BATCHES)]


def _library_grpo_loss(b, advantages, clip_eps, kl_coef, aggregation):
    lp = b["log_probs"].clone().requires_grad_(True)
    per_token = (rl.clipped_surrogate_loss(lp, b["old_log_probs"], advantages[:, None], clip_eps)
                 + kl_coef * rl.kl_k3(lp, b["ref_log_probs"]))
    if aggregation == "fixed_length_mean":
        loss = rl.fixed_length_mean(per_token, b["mask"], b["max_length"])
    else:
        loss = getattr(rl, aggregation)(per_token, b["mask"])
    (grad,) = torch.autograd.grad(loss, lp)
    return loss.detach(), grad

# %% nbgrader={"grade": false, "grade_id": "inputs", "locked": true, "schema_version": 3, "solution": false, "task": false}
# The visible tests' inputs, stored as numbers: three small batches (2 prompts × 3 completions, up to
# 4 tokens) and a per-token loss for each. The hidden tests draw others.
BATCHES = snapshot(VISIBLE_BATCHES)
LOSSES = snapshot(VISIBLE_LOSSES)

# %% [markdown] nbgrader={"grade": false, "grade_id": "task_advantages", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## 1. Group-relative advantages (4 points)
#
# The batch holds `B = num_prompts × group_size` completions, the `group_size` completions of each
# prompt next to each other: rows `0 … G−1` belong to the first prompt, and so on. For completion `i`
# of a group with rewards $r_1, \dots, r_G$,
#
# $$\hat A_i = \frac{r_i - \operatorname{mean}(r_1, \dots, r_G)}{\operatorname{std}(r_1, \dots, r_G) + \varepsilon},$$
#
# with the **population** standard deviation (divide by $G$, not $G - 1$) and $\varepsilon = 10^{-6}$.
# Return a tensor of shape `(B,)`. Raise a `ValueError` when `B` is not a multiple of `group_size`.

# %% nbgrader={"grade": false, "grade_id": "group_advantages", "locked": false, "schema_version": 3, "solution": true, "task": false}
def group_advantages(rewards, group_size, eps=1e-6):
    """(B,) rewards, B = num_prompts * group_size -> (B,) group-normalised advantages."""
    ### BEGIN SOLUTION
    if rewards.numel() % group_size != 0:
        raise ValueError(f"rewards: {rewards.numel()} is not a multiple of group_size {group_size}")
    grouped = rewards.reshape(-1, group_size)
    centred = grouped - grouped.mean(dim=1, keepdim=True)
    spread = grouped.std(dim=1, unbiased=False, keepdim=True)
    return (centred / (spread + eps)).reshape(-1)
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_group_advantages", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# the library's advantages on the visible batches (stored numbers)
EXPECTED = snapshot([rl.group_relative_advantages(b["rewards"], b["group_size"], scale="std", std="population")
                     for b in VISIBLE_BATCHES])
for b, expected in zip(BATCHES, EXPECTED):
    torch.testing.assert_close(group_advantages(b["rewards"], b["group_size"]), expected, atol=1e-6, rtol=1e-6)
### BEGIN HIDDEN TESTS
for i in range(5):
    b = random_batch(GRADING_SEED + i, num_prompts=2 + i, group_size=2 + i)
    expected = rl.group_relative_advantages(b["rewards"], b["group_size"], scale="std", std="population")
    torch.testing.assert_close(group_advantages(b["rewards"], b["group_size"]), expected, atol=1e-6, rtol=1e-6)
### END HIDDEN TESTS
try:
    group_advantages(torch.ones(7), 4)
    raise AssertionError("a batch of 7 rewards in groups of 4 should raise ValueError")
except ValueError:
    pass
print("group advantages: OK")

# %% nbgrader={"grade": true, "grade_id": "test_group_advantages_scale", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# within every group whose rewards are not all equal, the advantages have mean 0 and population std 1
rewards = torch.tensor([0.0, 1.0, 1.0, 1.0, 0.2, 0.4, 0.6, 0.8, 5.0, 5.0, 5.0, 5.0])
adv = group_advantages(rewards, 4).reshape(3, 4)
torch.testing.assert_close(adv.mean(1), torch.zeros(3), atol=1e-6, rtol=0)
torch.testing.assert_close(adv[:2].std(1, unbiased=False), torch.ones(2), atol=1e-4, rtol=0)
assert torch.all(adv[2] == 0), "a group whose rewards are all equal has advantage 0"
### BEGIN HIDDEN TESTS
big = torch.tensor([0.0, 100.0, 0.0, 100.0])
torch.testing.assert_close(group_advantages(big, 2), torch.tensor([-1.0, 1.0, -1.0, 1.0]), atol=1e-6, rtol=0)
torch.testing.assert_close(group_advantages(big, 4), torch.tensor([-1.0, 1.0, -1.0, 1.0]), atol=1e-6, rtol=0)
spread = 0.1 + torch.rand(5, 6, generator=torch.Generator().manual_seed(GRADING_SEED)) * 10
adv = group_advantages(spread.reshape(-1), 6).reshape(5, 6)
torch.testing.assert_close(adv.mean(1), torch.zeros(5), atol=1e-6, rtol=0)
torch.testing.assert_close(adv.std(1, unbiased=False), torch.ones(5), atol=1e-4, rtol=0)
### END HIDDEN TESTS
print("scale: OK")

# %% [markdown] nbgrader={"grade": false, "grade_id": "task_k3", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## 2. The k3 estimator (3 points)
#
# For a token sampled from π_θ, with $\log r = \log\pi_{\text{ref}} - \log\pi_\theta$,
# $k_3 = e^{\log r} - 1 - \log r$. It is an unbiased estimate of KL(π_θ ‖ π_ref) and never negative.
# Return one value per token, the shape of the inputs.

# %% nbgrader={"grade": false, "grade_id": "k3", "locked": false, "schema_version": 3, "solution": true, "task": false}
def k3(log_probs, ref_log_probs):
    """(..., T) log π_θ and log π_ref of the sampled tokens -> (..., T) per-token k3."""
    ### BEGIN SOLUTION
    log_r = ref_log_probs - log_probs
    return torch.expm1(log_r) - log_r
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_k3", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# the library's k3 on the visible batches (stored numbers)
EXPECTED = snapshot([rl.kl_k3(b["log_probs"], b["ref_log_probs"]) for b in VISIBLE_BATCHES])
for b, expected in zip(BATCHES, EXPECTED):
    out = k3(b["log_probs"], b["ref_log_probs"])
    torch.testing.assert_close(out, expected, atol=1e-8, rtol=1e-8)
    assert torch.all(out >= 0), "k3 is never negative"
### BEGIN HIDDEN TESTS
for i in range(5):
    b = random_batch(GRADING_SEED + i)
    out = k3(b["log_probs"], b["ref_log_probs"])
    torch.testing.assert_close(out, rl.kl_k3(b["log_probs"], b["ref_log_probs"]), atol=1e-8, rtol=1e-8)
    assert torch.all(out >= 0), "k3 is never negative"
### END HIDDEN TESTS
print("k3: OK")

# %% nbgrader={"grade": true, "grade_id": "test_k3_hidden", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
# the same log-probabilities give exactly 0
lp = torch.tensor([-0.1, -2.0, -7.5])
assert torch.all(k3(lp, lp) == 0)
### BEGIN HIDDEN TESTS
# tiny differences: no cancellation to a negative number, and the second-order value ½(log r)²
d = torch.tensor([1e-6, -1e-6, 1e-4])
out = k3(lp, lp + d)
assert torch.all(out >= 0)
torch.testing.assert_close(out, 0.5 * d ** 2, rtol=1e-3, atol=1e-18)
### END HIDDEN TESTS
print("k3 edge cases: OK")

# %% [markdown] nbgrader={"grade": false, "grade_id": "task_aggregations", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## 3. Three ways to average a per-token loss (3 points)
#
# `loss` is `(B, T)`, one value per token, and `mask` is `(B, T)` boolean, True on the completion's
# tokens (padding after the end is False). Every sequence has at least one token.
#
# * `seq_mean_token_mean`: average each sequence over its own tokens, then average the sequences
#   (GRPO as published: a token of a short completion weighs more than a token of a long one);
# * `token_mean`: sum over every real token of the batch and divide by their number (DAPO);
# * `fixed_length_mean`: sum over every real token and divide by the constant `B * max_length` (Dr. GRPO).

# %% nbgrader={"grade": false, "grade_id": "aggregations", "locked": false, "schema_version": 3, "solution": true, "task": false}
def seq_mean_token_mean(loss, mask):
    ### BEGIN SOLUTION
    m = mask.to(loss.dtype)
    return ((loss * m).sum(-1) / m.sum(-1)).mean()
    ### END SOLUTION


def token_mean(loss, mask):
    ### BEGIN SOLUTION
    m = mask.to(loss.dtype)
    return (loss * m).sum() / m.sum()
    ### END SOLUTION


def fixed_length_mean(loss, mask, max_length):
    ### BEGIN SOLUTION
    m = mask.to(loss.dtype)
    return (loss * m).sum() / (loss.shape[0] * max_length)
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_seq_mean_token_mean", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
# the library's values on the visible batches and losses (stored numbers)
EXPECTED = snapshot([rl.seq_mean_token_mean(loss, b["mask"]) for b, loss in zip(VISIBLE_BATCHES, VISIBLE_LOSSES)])
for b, loss, expected in zip(BATCHES, LOSSES, EXPECTED):
    torch.testing.assert_close(seq_mean_token_mean(loss, b["mask"]), expected)
### BEGIN HIDDEN TESTS
for i in range(5):
    b = random_batch(GRADING_SEED + i)
    loss = torch.randn(b["mask"].shape, generator=torch.Generator().manual_seed(GRADING_SEED + i))
    torch.testing.assert_close(seq_mean_token_mean(loss, b["mask"]), rl.seq_mean_token_mean(loss, b["mask"]))
### END HIDDEN TESTS
print("seq_mean_token_mean: OK")

# %% nbgrader={"grade": true, "grade_id": "test_token_mean", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
# the library's values on the visible batches and losses (stored numbers)
EXPECTED = snapshot([rl.token_mean(loss, b["mask"]) for b, loss in zip(VISIBLE_BATCHES, VISIBLE_LOSSES)])
for b, loss, expected in zip(BATCHES, LOSSES, EXPECTED):
    torch.testing.assert_close(token_mean(loss, b["mask"]), expected)
### BEGIN HIDDEN TESTS
for i in range(5):
    b = random_batch(GRADING_SEED + i)
    loss = torch.randn(b["mask"].shape, generator=torch.Generator().manual_seed(GRADING_SEED + i))
    torch.testing.assert_close(token_mean(loss, b["mask"]), rl.token_mean(loss, b["mask"]))
### END HIDDEN TESTS
print("token_mean: OK")

# %% nbgrader={"grade": true, "grade_id": "test_fixed_length_mean", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
# the library's values on the visible batches and losses (stored numbers)
EXPECTED = snapshot([rl.fixed_length_mean(loss, b["mask"], b["max_length"])
                     for b, loss in zip(VISIBLE_BATCHES, VISIBLE_LOSSES)])
for b, loss, expected in zip(BATCHES, LOSSES, EXPECTED):
    torch.testing.assert_close(fixed_length_mean(loss, b["mask"], b["max_length"]), expected)
### BEGIN HIDDEN TESTS
for i in range(5):
    b = random_batch(GRADING_SEED + i)
    loss = torch.randn(b["mask"].shape, generator=torch.Generator().manual_seed(GRADING_SEED + i))
    torch.testing.assert_close(fixed_length_mean(loss, b["mask"], b["max_length"]),
                               rl.fixed_length_mean(loss, b["mask"], b["max_length"]))
### END HIDDEN TESTS
print("fixed_length_mean: OK")

# %% [markdown] nbgrader={"grade": false, "grade_id": "task_loss", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## 4. The GRPO loss (4 points)
#
# Per token, with $\rho = \exp(\log\pi_\theta - \log\pi_{\theta_\text{old}})$ and the sequence's
# advantage $\hat A$ (the same for all its tokens),
#
# $$\ell = -\min\big(\rho\hat A,\ \operatorname{clip}(\rho, 1-\varepsilon, 1+\varepsilon)\,\hat A\big) + \beta\,k_3,$$
#
# then aggregated over the batch with one of your three functions (`aggregation` is
# `"seq_mean_token_mean"`, `"token_mean"` or `"fixed_length_mean"`; `max_length` is the `T` of the
# batch). `advantages` is `(B,)`; `clip_eps` is ε, `kl_coef` is β. Use your `k3` and your
# aggregations. Return a scalar that autograd can differentiate with respect to `log_probs`.

# %% nbgrader={"grade": false, "grade_id": "grpo_loss", "locked": false, "schema_version": 3, "solution": true, "task": false}
def grpo_loss(log_probs, old_log_probs, ref_log_probs, advantages, mask, clip_eps=0.2, kl_coef=0.04,
              aggregation="seq_mean_token_mean"):
    ### BEGIN SOLUTION
    ratio = torch.exp(log_probs - old_log_probs)
    adv = advantages[:, None]
    surrogate = torch.minimum(ratio * adv, ratio.clamp(1 - clip_eps, 1 + clip_eps) * adv)
    per_token = -surrogate + kl_coef * k3(log_probs, ref_log_probs)
    if aggregation == "seq_mean_token_mean":
        return seq_mean_token_mean(per_token, mask)
    if aggregation == "token_mean":
        return token_mean(per_token, mask)
    if aggregation == "fixed_length_mean":
        return fixed_length_mean(per_token, mask, log_probs.shape[-1])
    raise ValueError(f"aggregation: unknown {aggregation!r}")
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_grpo_loss", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
AGGREGATIONS = ["seq_mean_token_mean", "token_mean", "fixed_length_mean"]
# advantages for the visible batches, and the library's loss and its gradient on them (stored numbers)
ADVANTAGES = snapshot(VISIBLE_ADVANTAGES)
EXPECTED = snapshot([_library_grpo_loss(b, adv, 0.2, 0.04, aggregation) for b, adv, aggregation
                     in zip(VISIBLE_BATCHES * 2, VISIBLE_ADVANTAGES * 2, AGGREGATIONS + AGGREGATIONS[::-1])])
for b, advantages, aggregation, (loss, loss_grad) in zip(BATCHES * 2, ADVANTAGES * 2,
                                                         AGGREGATIONS + AGGREGATIONS[::-1], EXPECTED):
    lp = b["log_probs"].clone().requires_grad_(True)
    mine = grpo_loss(lp, b["old_log_probs"], b["ref_log_probs"], advantages, b["mask"], 0.2, 0.04, aggregation)
    (grad,) = torch.autograd.grad(mine, lp)
    torch.testing.assert_close(mine, loss)
    torch.testing.assert_close(grad, loss_grad)  # same gradient, so the clip's zero-gradient region too
### BEGIN HIDDEN TESTS
def reference_grpo_loss(b, advantages, clip_eps, kl_coef, aggregation):
    per_token = (rl.clipped_surrogate_loss(b["log_probs"], b["old_log_probs"], advantages[:, None], clip_eps)
                 + kl_coef * rl.kl_k3(b["log_probs"], b["ref_log_probs"]))
    extra = (b["max_length"],) if aggregation.startswith("fixed") else ()
    return getattr(rl, aggregation)(per_token, b["mask"], *extra)


for i, aggregation in enumerate(AGGREGATIONS * 2):
    b = random_batch(GRADING_SEED + i)
    advantages = torch.randn(b["rewards"].shape, generator=torch.Generator().manual_seed(GRADING_SEED + i))
    clip_eps, kl_coef = 0.1 + 0.2 * (i % 2), 0.01 * (i + 1)
    lp = b["log_probs"].clone().requires_grad_(True)
    mine = grpo_loss(lp, b["old_log_probs"], b["ref_log_probs"], advantages, b["mask"], clip_eps, kl_coef, aggregation)
    (grad,) = torch.autograd.grad(mine, lp)
    lp2 = b["log_probs"].clone().requires_grad_(True)
    theirs = reference_grpo_loss(dict(b, log_probs=lp2), advantages, clip_eps, kl_coef, aggregation)
    (grad2,) = torch.autograd.grad(theirs, lp2)
    torch.testing.assert_close(mine, theirs)
    torch.testing.assert_close(grad, grad2)
### END HIDDEN TESTS
print("GRPO loss: OK")

# %% [markdown] nbgrader={"grade": false, "grade_id": "task_zero", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ### Why is the loss 0?
#
# At the first inner step of a GRPO update the policy has not moved yet: `log_probs == old_log_probs`,
# and at the very start of training the reference is the same model too. The cell below evaluates your
# loss there, with the advantages of section 1 (the library's, stored, so that this test only depends
# on your `grpo_loss`) and the per-sequence mean.

# %% nbgrader={"grade": true, "grade_id": "test_loss_is_zero", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
b = BATCHES[1]
ADV = snapshot(rl.group_relative_advantages(VISIBLE_BATCHES[1]["rewards"], 3, scale="std", std="population"))
lp = b["log_probs"].clone().requires_grad_(True)
loss = grpo_loss(lp, lp.detach(), lp.detach(), ADV, b["mask"], 0.2, 0.04, "seq_mean_token_mean")
(grad,) = torch.autograd.grad(loss, lp)
print(f"loss = {loss.item():.2e}, gradient norm = {grad.norm().item():.3f}")
assert abs(loss.item()) < 1e-6 and grad.norm().item() > 0.1
### BEGIN HIDDEN TESTS
b = random_batch(GRADING_SEED + 7)
lp = b["log_probs"].clone().requires_grad_(True)
adv = rl.group_relative_advantages(b["rewards"], b["group_size"], scale="std", std="population")
loss = grpo_loss(lp, lp.detach(), lp.detach(), adv, b["mask"], 0.2, 0.04, "seq_mean_token_mean")
(grad,) = torch.autograd.grad(loss, lp)
assert abs(loss.item()) < 1e-6 and (grad.norm().item() > 0.01 or adv.abs().max() == 0)
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "question_loss_zero", "locked": true, "schema_version": 3, "solution": false, "task": false}
# **Written answer (3 points, graded by hand).** In a few sentences, in the cell below: why is the loss
# exactly 0 there, and why is its gradient not 0? What does that tell you about reading GRPO's loss
# curve during training?

# %% [markdown] nbgrader={"grade": true, "grade_id": "answer_loss_zero", "locked": false, "points": 3, "schema_version": 3, "solution": true, "task": false}
# At that point ρ = 1 for every token, so nothing is clipped, and k3 = 0, because the reference equals
# the policy. Each token's loss is then −Â_i, the same for every token of sequence i, so averaging
# each sequence over its tokens gives −Â_i, and the group-normalised advantages of a group sum to 0:
# the loss is 0. Its gradient is not, because ∇ρ = ρ∇log π_θ = ∇log π_θ there: the gradient is
# −mean_i Â_i · mean_t ∇log π_θ(o_{i,t}), a REINFORCE gradient that raises the log-probability of the
# completions with positive advantage and lowers the others. The value of the loss says nothing about
# the size of that push. So GRPO's loss curve hovers around 0 by construction and is not a measure of
# progress: watch the rewards, the KL to the reference and the clip fraction instead.
#
# *Marking: 1 point for ρ = 1 and k3 = 0 with advantages that sum to 0 in each group; 1 for the
# gradient of ρ being ∇log π (a REINFORCE gradient); 1 for the consequence for the loss curve.*
