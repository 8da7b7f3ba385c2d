# %% [markdown] nbgrader={"grade": false, "grade_id": "intro", "locked": true, "schema_version": 3, "solution": false, "task": false}
# # Assignment 5 (Part V): learning from preferences, from Bradley–Terry to DPO
#
# Read chapters 12 and 13 of the book first (Bradley–Terry, the KL-regularised optimum, best-of-N,
# DPO). In this assignment you build the chain of ideas of Part V on bandits small enough to check
# every number exactly, and then carry DPO over to a language model:
#
# 1. the **Bradley–Terry loss** of a reward model (Bradley & Terry 1952; Ouyang et al. 2022,
#    arXiv:2203.02155, eq. 1) (3 points);
# 2. the **KL-regularised optimum** π* ∝ π_ref·exp(r/β) (Rafailov et al. 2023, arXiv:2305.18290,
#    eq. 4) (3 points);
# 3. the **DPO loss**, derived from π*: its implicit reward, the loss, the weight of its gradient, and a
#    check that minimising it over every pair of a bandit gives π* back (Rafailov et al. 2023, eq. 7
#    and §4) (8 points, and 3 for a written derivation);
# 4. **best-of-N**'s exact distribution and its KL from π_ref, against the formula log N − (N−1)/N
#    (Beirami et al. 2024, arXiv:2401.01879) (4 points);
# 5. a **reward model** fitted to comparisons, and best-of-N by it measured against the gold reward:
#    over-optimisation (Gao, Schulman & Hilton 2022, arXiv:2210.10760) (4 points, and 4 for a written
#    answer);
# 6. a short **DPO run** on a tabular policy (3 points);
# 7. **DPO on a language model**: the sequence log-probability of a response under a causal transformer,
#    and the DPO loss of one pair of strings with the signature of Stanford CS336's alignment assignment
#    (4 points).
#
# **36 points** in all: 29 autograded (some tests are hidden and run only when your notebook is
# graded), 7 for the written answers, graded by hand. The visible tests compare your functions with
# stored values of the `rlbook` library's implementations, or check properties; most test cells also
# hold hidden tests that do the same on inputs drawn when your notebook is graded, so make your
# functions correct in general, not just on the examples. Write your code where it says
# `YOUR CODE HERE` (delete the `raise NotImplementedError()` line) and do not change the test cells.
# Use only PyTorch operations and your own functions (and, in section 7, the library's
# `rl.lm.encode_preference_pairs`, a layout helper that is not graded).
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
import math

import torch

import rlbook as rl

rl.seed_everything(0)
torch.set_num_threads(1)
torch.set_default_dtype(torch.float64)  # exact comparisons with the library

# The bandit of chapter 12: five answers, their gold rewards, a reference policy that prefers the
# middling ones, and the KL coefficient β.
GOLD = torch.tensor([1.5, 1.0, 0.5, 0.0, -1.0])
REF = torch.tensor([0.10, 0.15, 0.30, 0.30, 0.15])
BETA = 0.5


def random_pairs(seed, size=6):
    """``size`` random preference pairs: rewards (logit units) and sequence log-probabilities (nats)."""
    g = torch.Generator().manual_seed(seed)
    return {"chosen_rewards": 3 * torch.randn(size, generator=g), "rejected_rewards": 3 * torch.randn(size, generator=g),
            "policy_chosen": -20 * torch.rand(size, generator=g), "policy_rejected": -20 * torch.rand(size, generator=g),
            "ref_chosen": -20 * torch.rand(size, generator=g), "ref_rejected": -20 * torch.rand(size, generator=g)}


def random_bandit(seed, num_answers=6, ties=False):
    """A reference policy over ``num_answers`` answers (every probability > 0) and their rewards;
    with ``ties`` the rewards are rounded to halves, so that some are equal."""
    g = torch.Generator().manual_seed(seed)
    ref_probs = torch.softmax(1.5 * torch.randn(num_answers, generator=g), 0)
    rewards = torch.randn(num_answers, generator=g)
    return ref_probs, (torch.round(2 * rewards) / 2 if ties else rewards)


def draw_comparisons(ref_probs, gold, n, seed):
    """n comparisons: two answers drawn independently from π_ref, the first chosen with the
    Bradley–Terry probability σ(gold[first] − gold[second]). Returns (chosen, rejected) indices (n,)."""
    g = torch.Generator().manual_seed(seed)
    cdf = ref_probs.cumsum(0)
    first = torch.searchsorted(cdf, torch.rand(n, generator=g)).clamp_max(len(cdf) - 1)  # inverse-CDF draws
    second = torch.searchsorted(cdf, torch.rand(n, generator=g)).clamp_max(len(cdf) - 1)
    first_wins = torch.rand(n, generator=g) < torch.sigmoid(gold[first] - gold[second])
    return torch.where(first_wins, first, second), torch.where(first_wins, second, first)

# %% build_only=true
# Run when the assignment is built, then removed: the visible tests' inputs and the library's values.
VISIBLE_PAIRS = [random_pairs(seed) for seed in range(3)]
VISIBLE_BANDITS = [random_bandit(seed) for seed in range(3)] + [(REF, GOLD)]
TIED_BANDITS = [random_bandit(10 + seed, ties=True) for seed in range(3)] + [(REF, torch.tensor([1.5, 1.0, 1.0, 0.0, -1.0]))]


def _bradley_terry_fit(chosen_features, rejected_features):
    """The library's maximum-likelihood w of r_w(y) = w·φ(y) (L-BFGS on the mean rl.bradley_terry_loss)."""
    w = torch.zeros(chosen_features.shape[-1], requires_grad=True)
    optimizer = torch.optim.LBFGS([w], max_iter=500, tolerance_grad=1e-14, tolerance_change=1e-16,
                                  line_search_fn="strong_wolfe")

    def closure():
        optimizer.zero_grad()
        loss = rl.bradley_terry_loss(chosen_features @ w, rejected_features @ w).mean()
        loss.backward()
        return loss

    optimizer.step(closure)
    return w.detach()

# %% nbgrader={"grade": false, "grade_id": "inputs", "locked": true, "schema_version": 3, "solution": false, "task": false}
# The visible tests' inputs, stored as numbers: three sets of 6 random pairs, four bandits with
# distinct rewards and four with ties (the last of each is the chapter's bandit). The hidden tests
# draw others.
PAIRS = snapshot(VISIBLE_PAIRS)
BANDITS = snapshot(VISIBLE_BANDITS)
TIED = snapshot(TIED_BANDITS)

# %% [markdown] nbgrader={"grade": false, "grade_id": "task_bradley_terry", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## 1. The Bradley–Terry loss (3 points)
#
# A labeller prefers answer $y_c$ ("chosen") to $y_r$ ("rejected") with probability
# $P(y_c \succ y_r) = \sigma(r(y_c) - r(y_r))$. The negative log-likelihood of one observed preference,
# the reward model's training loss, is
#
# $$\ell_{\text{BT}} = -\log\sigma\bigl(r_c - r_r\bigr).$$
#
# Return one value per pair, the shape of the inputs (no mean). Raise a `ValueError` when the two
# inputs' shapes differ. It must stay finite and exact for reward gaps of hundreds of logits
# (`-torch.log(torch.sigmoid(...))` does not: find a form that does).

# %% nbgrader={"grade": false, "grade_id": "bradley_terry_loss", "locked": false, "schema_version": 3, "solution": true, "task": false}
def bradley_terry_loss(chosen_rewards, rejected_rewards):
    """(B,) rewards of the chosen and the rejected answers -> (B,) per-pair loss, nats."""
    ### BEGIN SOLUTION
    if chosen_rewards.shape != rejected_rewards.shape:
        raise ValueError(f"the rewards' shapes differ: {chosen_rewards.shape} and {rejected_rewards.shape}")
    return torch.nn.functional.softplus(rejected_rewards - chosen_rewards)
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_bradley_terry_loss", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# the library's loss on the visible pairs (stored numbers)
EXPECTED = snapshot([rl.bradley_terry_loss(p["chosen_rewards"], p["rejected_rewards"]) for p in VISIBLE_PAIRS])
for p, expected in zip(PAIRS, EXPECTED):
    torch.testing.assert_close(bradley_terry_loss(p["chosen_rewards"], p["rejected_rewards"]), expected)
torch.testing.assert_close(bradley_terry_loss(torch.zeros(2), torch.zeros(2)), torch.full((2,), math.log(2)))
try:
    bradley_terry_loss(torch.zeros(3), torch.zeros(4))
    raise AssertionError("rewards of shapes (3,) and (4,) should raise ValueError")
except ValueError:
    pass
### BEGIN HIDDEN TESTS
for i in range(5):
    p = random_pairs(GRADING_SEED + i, size=3 + i)
    torch.testing.assert_close(bradley_terry_loss(p["chosen_rewards"], p["rejected_rewards"]),
                               rl.bradley_terry_loss(p["chosen_rewards"], p["rejected_rewards"]))
    grid = p["chosen_rewards"][:, None] - p["rejected_rewards"][None, :]  # any shape
    torch.testing.assert_close(bradley_terry_loss(grid, -grid), rl.bradley_terry_loss(grid, -grid))
### END HIDDEN TESTS
print("Bradley–Terry loss: OK")

# %% nbgrader={"grade": true, "grade_id": "test_bradley_terry_stable", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
# reward gaps of hundreds of logits: the loss is (almost exactly) max(0, r_r − r_c), and finite
gaps = torch.tensor([-800.0, -300.0, 300.0, 800.0])
out = bradley_terry_loss(torch.zeros(4), gaps)
assert torch.isfinite(out).all(), out
torch.testing.assert_close(out, gaps.clamp_min(0), atol=1e-12, rtol=1e-12)
### BEGIN HIDDEN TESTS
g = torch.Generator().manual_seed(GRADING_SEED)
big = 200 + 600 * torch.rand(8, generator=g)
sign = torch.where(torch.rand(8, generator=g) < 0.5, -1.0, 1.0)
shift = 50 * torch.randn(8, generator=g)
out = bradley_terry_loss(shift, shift + sign * big)
assert torch.isfinite(out).all()
torch.testing.assert_close(out, (sign * big).clamp_min(0), atol=1e-12, rtol=1e-12)
c = torch.randn(8, generator=g, requires_grad=True)
(grad,) = torch.autograd.grad(bradley_terry_loss(c * 400, torch.zeros(8)).sum(), c)
assert torch.isfinite(grad).all()
### END HIDDEN TESTS
print("Bradley–Terry loss, large gaps: OK")

# %% [markdown] nbgrader={"grade": false, "grade_id": "task_optimum", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## 2. The KL-regularised optimum (3 points)
#
# Over a finite set of $K$ answers, the maximiser of $J(\pi) = \mathbb E_{y\sim\pi}[r(y)] - \beta\,\mathrm{KL}(\pi\,\|\,\pi_{\text{ref}})$ is
#
# $$\pi^*(y) = \frac{\pi_{\text{ref}}(y)\,e^{r(y)/\beta}}{Z}, \qquad Z = \sum_{y} \pi_{\text{ref}}(y)\,e^{r(y)/\beta},$$
#
# because $J(\pi) = \beta\log Z - \beta\,\mathrm{KL}(\pi\,\|\,\pi^*)$ (chapter 12, eq. 12.7). Write it for
# inputs of shape `(..., K)` (the answers in the last dimension; every π_ref(y) > 0). It must not
# overflow when $r/\beta$ is in the thousands.

# %% nbgrader={"grade": false, "grade_id": "kl_regularised_optimum", "locked": false, "schema_version": 3, "solution": true, "task": false}
def kl_regularised_optimum(ref_probs, rewards, beta):
    """(..., K) π_ref and rewards, β > 0 -> (..., K) π*."""
    ### BEGIN SOLUTION
    return torch.softmax(ref_probs.log() + rewards / beta, dim=-1)
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_kl_optimum", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# the library's π* on the visible bandits, for three values of β (stored numbers)
EXPECTED = snapshot([[rl.kl_regularised_optimum(ref, r, beta) for beta in (0.1, 0.5, 3.0)] for ref, r in VISIBLE_BANDITS])
for (ref, r), expected in zip(BANDITS, EXPECTED):
    for beta, pi in zip((0.1, 0.5, 3.0), expected):
        torch.testing.assert_close(kl_regularised_optimum(ref, r, beta), pi, atol=1e-10, rtol=0)
# a batch of bandits at once, and a reward scale that overflows exp(r/β)
batch = torch.stack([BANDITS[0][0], BANDITS[1][0]]), torch.stack([BANDITS[0][1], BANDITS[1][1]])
torch.testing.assert_close(kl_regularised_optimum(*batch, 0.5), torch.stack([EXPECTED[0][1], EXPECTED[1][1]]), atol=1e-10, rtol=0)
huge = kl_regularised_optimum(REF, 1000 * GOLD, 0.01)
assert torch.isfinite(huge).all() and abs(huge[0].item() - 1) < 1e-12, huge
### BEGIN HIDDEN TESTS
for i in range(5):
    ref, r = random_bandit(GRADING_SEED + i, num_answers=3 + i)
    beta = 0.05 + 2 * torch.rand(1, generator=torch.Generator().manual_seed(GRADING_SEED + i)).item()
    torch.testing.assert_close(kl_regularised_optimum(ref, r, beta), rl.kl_regularised_optimum(ref, r, beta),
                               atol=1e-10, rtol=0)
refs, rs = zip(*(random_bandit(GRADING_SEED + 10 + j) for j in range(4)))
ref, r = torch.stack(refs).reshape(2, 2, -1), torch.stack(rs).reshape(2, 2, -1)
torch.testing.assert_close(kl_regularised_optimum(ref, r, 0.3), rl.kl_regularised_optimum(ref, r, 0.3), atol=1e-10, rtol=0)
torch.testing.assert_close(kl_regularised_optimum(refs[0], 3000 * rs[0], 0.1), rl.kl_regularised_optimum(refs[0], 3000 * rs[0], 0.1),
                           atol=1e-10, rtol=0)
### END HIDDEN TESTS
print("π*: OK")

# %% nbgrader={"grade": true, "grade_id": "test_kl_optimum_maximises", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
# J(π) = E_π[r] − β·KL(π‖π_ref) at 2,000 random policies is below J(π*), by exactly β·KL(π‖π*)
def objective(probs, ref, r, beta):
    return (probs * r).sum(-1) - beta * (probs * torch.log(probs / ref)).sum(-1)


policies = torch.softmax(2 * torch.randn(2000, len(REF), generator=torch.Generator().manual_seed(0)), -1)
pi_star = kl_regularised_optimum(REF, GOLD, BETA)
gap = objective(pi_star, REF, GOLD, BETA) - objective(policies, REF, GOLD, BETA)
assert gap.min() > 0, gap.min()
torch.testing.assert_close(gap, BETA * (policies * torch.log(policies / pi_star)).sum(-1), atol=1e-10, rtol=0)
print(f"π* = {pi_star.numpy().round(4)}, J(π*) = {objective(pi_star, REF, GOLD, BETA).item():.4f}")
### BEGIN HIDDEN TESTS
for i in range(3):
    ref, r = random_bandit(GRADING_SEED + 20 + i, num_answers=4 + i)
    beta = 0.2 + i
    policies = torch.softmax(2 * torch.randn(500, len(ref), generator=torch.Generator().manual_seed(GRADING_SEED + i)), -1)
    pi_star = kl_regularised_optimum(ref, r, beta)
    gap = objective(pi_star, ref, r, beta) - objective(policies, ref, r, beta)
    assert gap.min() > 0
    torch.testing.assert_close(gap, beta * (policies * torch.log(policies / pi_star)).sum(-1), atol=1e-10, rtol=0)
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "task_dpo", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## 3. The DPO loss, from the optimum (8 points)
#
# Read the optimum of section 2 backwards: $r(y) = \beta\log\frac{\pi^*(y)}{\pi_{\text{ref}}(y)} + \beta\log Z$.
# DPO (Rafailov et al. 2023) replaces π* by the policy π_θ being trained and calls
#
# $$\hat r_\theta(y) = \beta\,\bigl(\log\pi_\theta(y) - \log\pi_{\text{ref}}(y)\bigr)$$
#
# its **implicit reward**. Put it into the Bradley–Terry loss of section 1 and you have the DPO loss of
# one pair, in terms of sequence log-probabilities only:
#
# $$\ell_{\text{DPO}} = -\log\sigma\bigl(\hat r_\theta(y_c) - \hat r_\theta(y_r)\bigr).$$
#
# Write, each in its cell:
#
# * `implicit_rewards(log_probs, ref_log_probs, beta)`: $\hat r$, the shape of the inputs (1 point);
# * `dpo_loss(policy_chosen_log_probs, policy_rejected_log_probs, ref_chosen_log_probs, ref_rejected_log_probs, beta)`:
#   the per-pair loss, shape `(B,)`, with your `implicit_rewards` and `bradley_terry_loss`; raise a
#   `ValueError` when β ≤ 0 (3 points);
# * `dpo_gradient_weight(chosen_rewards, rejected_rewards)`: how hard DPO pushes on a pair. Differentiate
#   $\ell_{\text{DPO}}$: $\partial\ell/\partial\log\pi_\theta(y_c) = -\beta\,w$ and $\partial\ell/\partial\log\pi_\theta(y_r) = +\beta\,w$,
#   with $w = \sigma(\hat r(y_r) - \hat r(y_c))$, large when the implicit reward orders the pair wrongly.
#   Return $w$ from the implicit rewards (2 points; the test checks it against autograd of your loss);
#
# and then a test (2 points) minimises your loss over **every** pair of the chapter's bandit, each
# pair weighted by how often it is drawn from π_ref and labelled by Bradley–Terry on the gold reward, and
# checks that the minimiser is π*: the population loss of DPO has the KL-regularised optimum as its
# minimiser. Why that must be so is the written question after the tests.

# %% nbgrader={"grade": false, "grade_id": "implicit_rewards", "locked": false, "schema_version": 3, "solution": true, "task": false}
def implicit_rewards(log_probs, ref_log_probs, beta):
    """(B,) log π_θ(y) and log π_ref(y), nats; β > 0 -> (B,) implicit rewards."""
    ### BEGIN SOLUTION
    return beta * (log_probs - ref_log_probs)
    ### END SOLUTION

# %% nbgrader={"grade": false, "grade_id": "dpo_loss", "locked": false, "schema_version": 3, "solution": true, "task": false}
def dpo_loss(policy_chosen_log_probs, policy_rejected_log_probs, ref_chosen_log_probs, ref_rejected_log_probs, beta):
    """(B,) sequence log-probabilities of the chosen and rejected answers under π_θ and π_ref -> (B,) loss."""
    ### BEGIN SOLUTION
    if not beta > 0:
        raise ValueError(f"beta must be > 0, got {beta}")
    chosen = implicit_rewards(policy_chosen_log_probs, ref_chosen_log_probs, beta)
    rejected = implicit_rewards(policy_rejected_log_probs, ref_rejected_log_probs, beta)
    return bradley_terry_loss(chosen, rejected)
    ### END SOLUTION

# %% nbgrader={"grade": false, "grade_id": "dpo_gradient_weight", "locked": false, "schema_version": 3, "solution": true, "task": false}
def dpo_gradient_weight(chosen_rewards, rejected_rewards):
    """(B,) implicit rewards of the chosen and rejected answers -> (B,) weights w in (0, 1)."""
    ### BEGIN SOLUTION
    return torch.sigmoid(rejected_rewards - chosen_rewards)
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_implicit_rewards", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
# the library's implicit rewards on the visible pairs (stored numbers)
EXPECTED = snapshot([rl.implicit_rewards(p["policy_chosen"], p["ref_chosen"], 0.3) for p in VISIBLE_PAIRS])
for p, expected in zip(PAIRS, EXPECTED):
    torch.testing.assert_close(implicit_rewards(p["policy_chosen"], p["ref_chosen"], 0.3), expected)
### BEGIN HIDDEN TESTS
for i in range(4):
    p = random_pairs(GRADING_SEED + i)
    beta = 0.05 + i
    torch.testing.assert_close(implicit_rewards(p["policy_rejected"], p["ref_rejected"], beta),
                               rl.implicit_rewards(p["policy_rejected"], p["ref_rejected"], beta))
### END HIDDEN TESTS
print("implicit rewards: OK")

# %% nbgrader={"grade": true, "grade_id": "test_dpo_loss", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
LOG_PROBS = ["policy_chosen", "policy_rejected", "ref_chosen", "ref_rejected"]
# the library's DPO loss on the visible pairs, for β = 0.1, 0.5 and 2 (stored numbers)
EXPECTED = snapshot([rl.dpo_loss(*[p[k] for k in LOG_PROBS], beta) for p in VISIBLE_PAIRS for beta in (0.1, 0.5, 2.0)])
for (p, beta), expected in zip([(p, beta) for p in PAIRS for beta in (0.1, 0.5, 2.0)], EXPECTED):
    torch.testing.assert_close(dpo_loss(*[p[k] for k in LOG_PROBS], beta), expected)
z = torch.zeros(3)
torch.testing.assert_close(dpo_loss(z, z, z, z, 0.1), torch.full((3,), math.log(2)))  # π_θ = π_ref: log 2
for bad in (0.0, -0.1):
    try:
        dpo_loss(z, z, z, z, bad)
        raise AssertionError(f"beta = {bad} should raise ValueError")
    except ValueError:
        pass
### BEGIN HIDDEN TESTS
for i in range(6):
    p = random_pairs(GRADING_SEED + i, size=4 + i)
    beta = [0.01, 0.1, 0.3, 1.0, 2.5, 5.0][i]
    torch.testing.assert_close(dpo_loss(*[p[k] for k in LOG_PROBS], beta), rl.dpo_loss(*[p[k] for k in LOG_PROBS], beta))
    # the same log-ratios from other sequence log-probabilities: the same loss
    torch.testing.assert_close(dpo_loss(*[p[k] - 7.0 for k in LOG_PROBS], beta), rl.dpo_loss(*[p[k] for k in LOG_PROBS], beta))
### END HIDDEN TESTS
print("DPO loss: OK")

# %% nbgrader={"grade": true, "grade_id": "test_dpo_gradient_weight", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# the library's implicit rewards and weights on the visible pairs at β = 0.5 (stored numbers); then
# autograd of your loss: ∂ℓ/∂log π_θ(y_c) = −β·w and ∂ℓ/∂log π_θ(y_r) = +β·w
REWARDS = snapshot([(rl.implicit_rewards(p["policy_chosen"], p["ref_chosen"], 0.5),
                     rl.implicit_rewards(p["policy_rejected"], p["ref_rejected"], 0.5)) for p in VISIBLE_PAIRS])
WEIGHTS = snapshot([rl.dpo_gradient_weight(rl.implicit_rewards(p["policy_chosen"], p["ref_chosen"], 0.5),
                                           rl.implicit_rewards(p["policy_rejected"], p["ref_rejected"], 0.5))
                    for p in VISIBLE_PAIRS])
for p, (chosen, rejected), w in zip(PAIRS, REWARDS, WEIGHTS):
    torch.testing.assert_close(dpo_gradient_weight(chosen, rejected), w)
    assert ((w > 0) & (w < 1)).all()
    pc, pr = p["policy_chosen"].clone().requires_grad_(True), p["policy_rejected"].clone().requires_grad_(True)
    grad_c, grad_r = torch.autograd.grad(dpo_loss(pc, pr, p["ref_chosen"], p["ref_rejected"], 0.5).sum(), (pc, pr))
    torch.testing.assert_close(grad_c, -0.5 * w)
    torch.testing.assert_close(grad_r, 0.5 * w)
### BEGIN HIDDEN TESTS
for i in range(4):
    p = random_pairs(GRADING_SEED + 30 + i, size=5)
    beta = [0.1, 0.5, 1.0, 3.0][i]
    chosen = rl.implicit_rewards(p["policy_chosen"], p["ref_chosen"], beta)
    rejected = rl.implicit_rewards(p["policy_rejected"], p["ref_rejected"], beta)
    w = rl.dpo_gradient_weight(chosen, rejected)
    torch.testing.assert_close(dpo_gradient_weight(chosen, rejected), w)
    pc, pr = p["policy_chosen"].clone().requires_grad_(True), p["policy_rejected"].clone().requires_grad_(True)
    grad_c, grad_r = torch.autograd.grad(dpo_loss(pc, pr, p["ref_chosen"], p["ref_rejected"], beta).sum(), (pc, pr))
    torch.testing.assert_close(grad_c, -beta * w)
    torch.testing.assert_close(grad_r, beta * w)
### END HIDDEN TESTS
print("DPO gradient weight: OK")

# %% nbgrader={"grade": true, "grade_id": "test_dpo_population_minimiser", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Every ordered pair (y, y') of the bandit, drawn from π_ref × π_ref and labelled by Bradley–Terry on the
# gold reward: y is "chosen" with probability σ(r(y) − r(y')). DPO's expected loss over them, as a
# function of a tabular policy's logits, minimised with L-BFGS from π_ref.
def population_minimiser(ref, gold, beta):
    K = len(ref)
    first, second = torch.arange(K).repeat_interleave(K), torch.arange(K).repeat(K)
    weights = ref[first] * ref[second] * torch.sigmoid(gold[first] - gold[second])
    ref_first, ref_second = ref.log()[first], ref.log()[second]
    logits = ref.log().clone().requires_grad_(True)
    optimizer = torch.optim.LBFGS([logits], max_iter=500, tolerance_grad=1e-13, tolerance_change=1e-16,
                                  line_search_fn="strong_wolfe")

    def population_loss():
        optimizer.zero_grad()
        log_probs = torch.log_softmax(logits, -1)
        log_first, log_second = log_probs[first], log_probs[second]
        loss = (weights * dpo_loss(log_first, log_second, ref_first, ref_second, beta)).sum()
        loss.backward()
        return loss

    optimizer.step(population_loss)
    return torch.softmax(logits.detach(), -1)


PI_STAR = snapshot(rl.kl_regularised_optimum(REF, GOLD, BETA))  # the library's π* (stored)
minimiser = population_minimiser(REF, GOLD, BETA)
print(f"DPO's population minimiser {minimiser.numpy().round(6)}\nπ*                         {PI_STAR.numpy().round(6)}")
torch.testing.assert_close(minimiser, PI_STAR, atol=1e-6, rtol=0)
### BEGIN HIDDEN TESTS
for i in range(2):
    ref, r = random_bandit(GRADING_SEED + 40 + i, num_answers=4 + i)
    beta = [0.4, 1.5][i]
    torch.testing.assert_close(population_minimiser(ref, r, beta), rl.kl_regularised_optimum(ref, r, beta), atol=1e-6, rtol=0)
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "question_derivation", "locked": true, "schema_version": 3, "solution": false, "task": false}
# **Written answer (3 points, graded by hand).** In a few lines, in the cell below: (a) starting from
# π* of section 2, show that the Bradley–Terry probability of the *gold* reward, $\sigma(r(y_c) - r(y_r))$,
# can be written with π* and π_ref alone: where did the partition function $Z$ go, and why does that
# matter for a language model? (b) Why is π* the minimiser of DPO's population loss that the test above
# found (what is the population loss minimised over, pair by pair)?

# %% [markdown] nbgrader={"grade": true, "grade_id": "answer_derivation", "locked": false, "points": 3, "schema_version": 3, "solution": true, "task": false}
# (a) From $\pi^*(y) = \pi_{\text{ref}}(y)e^{r(y)/\beta}/Z$, $r(y) = \beta\log\frac{\pi^*(y)}{\pi_{\text{ref}}(y)} + \beta\log Z$
# for every answer of the same prompt. In a difference of two answers' rewards the $\beta\log Z$ terms are
# equal and cancel: $\sigma(r(y_c) - r(y_r)) = \sigma\bigl(\beta\log\frac{\pi^*(y_c)}{\pi_{\text{ref}}(y_c)} - \beta\log\frac{\pi^*(y_r)}{\pi_{\text{ref}}(y_r)}\bigr)$.
# Bradley–Terry only ever looks at reward differences, so it never needs $Z$. That matters because for a
# language model $Z$ is a sum over every possible response, which cannot be computed; the log-ratios need
# only the sequence log-probabilities of the two responses under π_θ and π_ref. Replacing π* by π_θ and
# maximising the likelihood of the observed preferences gives the DPO loss.
#
# (b) The population loss is, for every pair, the cross-entropy between the true preference probability
# $\sigma(r(y) - r(y'))$ and the model's $\sigma(\hat r(y) - \hat r(y'))$. A cross-entropy is minimised exactly
# when the two probabilities agree, i.e. when $\hat r(y) - \hat r(y') = r(y) - r(y')$ for every pair with
# positive weight (π_ref has full support, so every pair). Then $\hat r = r + c$ for a constant $c$:
# $\beta\log\frac{\pi_\theta}{\pi_{\text{ref}}} = r + c$, $\pi_\theta \propto \pi_{\text{ref}}e^{r/\beta}$, which is π* once normalised.
# The tabular policy can represent it, so the minimiser over the logits is π* (up to the optimiser's tolerance).
#
# *Marking: 1 point for the β log Z terms cancelling in a difference; 1 for why that matters (Z is a sum over
# all responses; DPO needs only log-probabilities of the two); 1 for (b): the per-pair cross-entropy is
# minimised when the implicit reward differences equal the gold ones, which makes π_θ ∝ π_ref·exp(r/β).*

# %% [markdown] nbgrader={"grade": false, "grade_id": "task_best_of_n", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## 4. Best-of-N, exactly (4 points)
#
# Best-of-N draws $N$ answers independently from π_ref and returns one of highest reward. With
# $F(v) = P_{\pi_{\text{ref}}}(r(Y) \le v)$ and $F^-(v) = P_{\pi_{\text{ref}}}(r(Y) < v)$, the best reward among the
# $N$ draws is exactly $v$ with probability $F(v)^N - F^-(v)^N$; answers that share a reward share that
# probability in proportion to π_ref:
#
# $$\pi_N(y) = \frac{\pi_{\text{ref}}(y)}{\pi_{\text{ref}}(L_y)}\Bigl(F(r(y))^N - F^-(r(y))^N\Bigr), \qquad L_y = \{y' : r(y') = r(y)\}.$$
#
# * `best_of_n_probs(ref_probs, rewards, n)`: π_N, shape `(K,)` (every π_ref(y) > 0; rewards equal as
#   floats are tied). Raise a `ValueError` when `n` is not an integer ≥ 1 (2 points).
# * `best_of_n_kl(ref_probs, rewards, n)`: $\mathrm{KL}(\pi_N\,\|\,\pi_{\text{ref}})$ in nats, a 0-dimensional tensor,
#   with your `best_of_n_probs` (2 points). The test compares it with the formula $\log N - (N-1)/N$
#   found in the literature, which is exact only when no answer carries probability of its own.

# %% nbgrader={"grade": false, "grade_id": "best_of_n_probs", "locked": false, "schema_version": 3, "solution": true, "task": false}
def best_of_n_probs(ref_probs, rewards, n):
    """(K,) π_ref and rewards, N ≥ 1 -> (K,) the exact distribution of best-of-N."""
    ### BEGIN SOLUTION
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be an integer >= 1, got {n!r}")
    others, this = rewards[None, :], rewards[:, None]  # [y, y'] compares r(y') with r(y)
    below = (ref_probs[None, :] * (others < this)).sum(-1)  # F⁻(r(y))
    level = (ref_probs[None, :] * (others == this)).sum(-1)  # π_ref(L_y)
    return ref_probs / level * ((below + level) ** n - below ** n)
    ### END SOLUTION

# %% nbgrader={"grade": false, "grade_id": "best_of_n_kl", "locked": false, "schema_version": 3, "solution": true, "task": false}
def best_of_n_kl(ref_probs, rewards, n):
    """(K,) π_ref and rewards, N ≥ 1 -> KL(π_N ‖ π_ref), nats (0-dim tensor)."""
    ### BEGIN SOLUTION
    probs = best_of_n_probs(ref_probs, rewards, n)
    return torch.xlogy(probs, probs / ref_probs).sum()
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_best_of_n_probs", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
NS = [1, 2, 3, 8, 50]
# the library's π_N on the visible bandits, without and with tied rewards (stored numbers)
EXPECTED = snapshot([[rl.best_of_n_probs(ref, r, n) for n in NS] for ref, r in VISIBLE_BANDITS + TIED_BANDITS])
for (ref, r), expected in zip(BANDITS + TIED, EXPECTED):
    for n, pi_n in zip(NS, expected):
        out = best_of_n_probs(ref, r, n)
        torch.testing.assert_close(out, pi_n, atol=1e-12, rtol=0)
        assert abs(out.sum().item() - 1) < 1e-12
    torch.testing.assert_close(best_of_n_probs(ref, r, 1), ref)  # N = 1 is π_ref
for bad in (0, -2, 2.5):
    try:
        best_of_n_probs(REF, GOLD, bad)
        raise AssertionError(f"n = {bad} should raise ValueError")
    except ValueError:
        pass
### BEGIN HIDDEN TESTS
import itertools


def reference_best_of_n(ref, r, n):
    """Every one of the K^n ordered draws, the first draw of highest reward kept."""
    out = torch.zeros(len(ref))
    for draw in itertools.product(range(len(ref)), repeat=n):
        kept = max(draw, key=lambda y: (r[y].item(), -draw.index(y)))
        out[kept] += math.prod(ref[y].item() for y in draw)
    return out


for i in range(4):
    ref, r = random_bandit(GRADING_SEED + i, num_answers=4, ties=True)
    for n in (2, 3):
        torch.testing.assert_close(best_of_n_probs(ref, r, n), reference_best_of_n(ref, r, n), atol=1e-12, rtol=0)
for i in range(4):
    ref, r = random_bandit(GRADING_SEED + 50 + i, num_answers=20, ties=i % 2 == 0)
    for n in (1, 4, 16, 1000):
        torch.testing.assert_close(best_of_n_probs(ref, r, n), rl.best_of_n_probs(ref, r, n), atol=1e-12, rtol=0)
### END HIDDEN TESTS
print("best-of-N: OK")

# %% nbgrader={"grade": true, "grade_id": "test_best_of_n_kl", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
def bound(n):
    return math.log(n) - (n - 1) / n


NS = [1, 2, 4, 16, 256]
# the library's KL on the visible bandits (distinct rewards; stored numbers)
EXPECTED = snapshot([[rl.best_of_n_kl(ref, r, n) for n in NS] for ref, r in VISIBLE_BANDITS])
for (ref, r), expected in zip(BANDITS, EXPECTED):
    for n, kl in zip(NS, expected):
        out = best_of_n_kl(ref, r, n)
        assert out.dim() == 0, out.shape
        torch.testing.assert_close(out, kl, atol=1e-10, rtol=0)
        assert out <= bound(n) + 1e-12, (n, out.item(), bound(n))
# 1,000 equally likely answers with distinct rewards: close to the continuous case, where the formula is exact
uniform = torch.full((1000,), 1e-3)
near = best_of_n_kl(uniform, torch.arange(1000.0), 16).item()
print(f"N = 16, 1000 equally likely answers: exact KL {near:.4f}, log N − (N−1)/N = {bound(16):.4f}")
assert 0.99 * bound(16) < near <= bound(16)
# 10 equally likely answers: the KL stops at log 10, where the formula keeps growing
ten = best_of_n_kl(torch.full((10,), 0.1), torch.arange(10.0), 1024).item()
print(f"N = 1024, 10 equally likely answers: exact KL {ten:.4f}, log 10 = {math.log(10):.4f}, the formula {bound(1024):.4f}")
assert abs(ten - math.log(10)) < 1e-6
### BEGIN HIDDEN TESTS
for i in range(4):
    ref, r = random_bandit(GRADING_SEED + 60 + i, num_answers=8 + 4 * i)
    for n in (2, 7, 64):
        out = best_of_n_kl(ref, r, n)
        torch.testing.assert_close(out, rl.best_of_n_kl(ref, r, n), atol=1e-10, rtol=0)
        assert out <= bound(n) + 1e-12
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "task_reward_model", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## 5. A reward model, and best-of-N against the gold reward (4 points)
#
# A new bandit: 101 answers of growing length $x = 0, 0.01, \dots, 1$ (a fraction of the longest
# answer). The reference model mostly writes short answers, $\pi_{\text{ref}}(x) \propto e^{-6x}$. The gold
# reward, which the labellers' preferences follow, is $3x(1-x)$: detail helps up to half the length,
# padding hurts after. The reward model is linear in the answer's features,
# $r_w(y) = w^\top\varphi(y)$; here $\varphi(y) = (x)$, so it can say "longer is better" or "shorter is
# better", nothing else. It is fitted to 2,000 comparisons of answers drawn from π_ref.
#
# Write `train_reward_model(chosen_features, rejected_features)`: the features `(n, D)` of the chosen
# and the rejected answer of each comparison, returning the maximum-likelihood `w` `(D,)`: the minimiser
# of the mean of your `bradley_terry_loss` over the comparisons, to 4 decimals (the loss is convex;
# `torch.optim.LBFGS` with `line_search_fn="strong_wolfe"` gets there in a few dozen iterations, plain
# gradient descent needs thousands of steps) (2 points).
#
# The test after it scores every answer with your reward model, runs best-of-N by it with your
# `best_of_n_probs` for N = 1, 2, 4, …, 1024, and measures what the selection bought by the gold reward
# (2 points).

# %% nbgrader={"grade": false, "grade_id": "setup_lengths", "locked": true, "schema_version": 3, "solution": false, "task": false}
LENGTHS = torch.linspace(0, 1, 101)
LENGTH_REF = torch.softmax(-6 * LENGTHS, 0)
LENGTH_GOLD = 3 * LENGTHS * (1 - LENGTHS)
FEATURES = LENGTHS[:, None]  # φ(y) = (x), shape (101, 1)
CHOSEN, REJECTED = draw_comparisons(LENGTH_REF, LENGTH_GOLD, 2000, seed=0)
compared = LENGTHS[torch.cat([CHOSEN, REJECTED])]
print(f"{len(CHOSEN)} comparisons; {100 * (compared > 0.5).double().mean().item():.1f} % of the compared answers are "
      f"longer than x = 0.5, {100 * (compared > 0.8).double().mean().item():.1f} % longer than x = 0.8")

# %% nbgrader={"grade": false, "grade_id": "train_reward_model", "locked": false, "schema_version": 3, "solution": true, "task": false}
def train_reward_model(chosen_features, rejected_features):
    """(n, D) features of the chosen and rejected answers -> (D,) maximum-likelihood weights w."""
    ### BEGIN SOLUTION
    w = torch.zeros(chosen_features.shape[-1], requires_grad=True)
    optimizer = torch.optim.LBFGS([w], max_iter=200, tolerance_grad=1e-12, tolerance_change=1e-15,
                                  line_search_fn="strong_wolfe")

    def closure():
        optimizer.zero_grad()
        loss = bradley_terry_loss(chosen_features @ w, rejected_features @ w).mean()
        loss.backward()
        return loss

    optimizer.step(closure)
    return w.detach()
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_reward_model", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
### BEGIN HIDDEN TESTS
def reference_reward_model(chosen_features, rejected_features):
    """The library's Bradley–Terry maximum-likelihood weights, by L-BFGS to a tight tolerance."""
    weights = torch.zeros(chosen_features.shape[1]).requires_grad_()
    lbfgs = torch.optim.LBFGS([weights], max_iter=500, tolerance_grad=1e-14, tolerance_change=1e-16, line_search_fn="strong_wolfe")

    def negative_log_likelihood():
        lbfgs.zero_grad()
        nll = rl.bradley_terry_loss(chosen_features @ weights, rejected_features @ weights).mean()
        nll.backward()
        return nll

    lbfgs.step(negative_log_likelihood)
    return weights.detach()
### END HIDDEN TESTS
# a random data set with 3 features: 300 comparisons labelled by Bradley–Terry with the reward w·φ
g = torch.Generator().manual_seed(7)
first, second = torch.randn(300, 3, generator=g), torch.randn(300, 3, generator=g)
first_wins = torch.rand(300, generator=g) < torch.sigmoid((first - second) @ torch.tensor([1.0, -2.0, 0.5]))
random_chosen = torch.where(first_wins[:, None], first, second)
random_rejected = torch.where(first_wins[:, None], second, first)
# the library's maximum-likelihood weights on the length comparisons and on the random data set (stored numbers)
EXPECTED = snapshot([_bradley_terry_fit(FEATURES[CHOSEN], FEATURES[REJECTED]), _bradley_terry_fit(random_chosen, random_rejected)])
W = train_reward_model(FEATURES[CHOSEN], FEATURES[REJECTED])
print(f"the reward model: r_w(x) = {W.item():.4f}·x")
torch.testing.assert_close(W, EXPECTED[0], atol=1e-4, rtol=0)
torch.testing.assert_close(train_reward_model(random_chosen, random_rejected), EXPECTED[1], atol=1e-4, rtol=0)
### BEGIN HIDDEN TESTS
for i in range(2):
    g = torch.Generator().manual_seed(GRADING_SEED + i)
    D = 2 + i
    first, second = torch.randn(400, D, generator=g), torch.randn(400, D, generator=g)
    w_true = torch.randn(D, generator=g)
    wins = torch.rand(400, generator=g) < torch.sigmoid((first - second) @ w_true)
    c, r = torch.where(wins[:, None], first, second), torch.where(wins[:, None], second, first)
    torch.testing.assert_close(train_reward_model(c, r), reference_reward_model(c, r), atol=1e-4, rtol=0)
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_overoptimisation", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
NS = [2 ** k for k in range(11)]


def best_of_n_curves(w):
    """Mean gold reward and mean reward-model score of best-of-N by the reward model r_w, for each N."""
    proxy = FEATURES @ w
    gold, scores = [], []
    for n in NS:
        probs = best_of_n_probs(LENGTH_REF, proxy, n)
        gold.append((probs * LENGTH_GOLD).sum().item())
        scores.append((probs * proxy).sum().item())
    return gold, scores


# the library's curve: best-of-N by the library's fitted reward model (stored numbers)
EXPECTED = snapshot([(rl.best_of_n_probs(LENGTH_REF, FEATURES @ _bradley_terry_fit(FEATURES[CHOSEN], FEATURES[REJECTED]), n)
                      * LENGTH_GOLD).sum().item() for n in [2 ** k for k in range(11)]])
gold, scores = best_of_n_curves(W)
print("    N   gold reward   reward model's score")
for n, g_, s in zip(NS, gold, scores):
    print(f"{n:>5}   {g_:>11.4f}   {s:>20.4f}")
peak = max(range(len(NS)), key=lambda k: gold[k])
print(f"the gold reward peaks at N = {NS[peak]} ({gold[peak]:.3f}) and is {gold[-1]:.3f} at N = 1024, "
      f"below π_ref's {gold[0]:.3f}; the reward model's own score rises at every N")
torch.testing.assert_close(torch.tensor(gold), torch.tensor(EXPECTED), atol=1e-6, rtol=0)
assert all(b > a for a, b in zip(scores, scores[1:]))  # by its own measure, selection keeps paying
assert 2 <= NS[peak] <= 256 and gold[-1] < gold[0]  # the gold reward rises, peaks and falls below the start
### BEGIN HIDDEN TESTS
for i in range(2):
    c, r = draw_comparisons(LENGTH_REF, LENGTH_GOLD, 2000, seed=GRADING_SEED + i)
    w_lib = reference_reward_model(FEATURES[c], FEATURES[r])
    gold, scores = best_of_n_curves(train_reward_model(FEATURES[c], FEATURES[r]))
    expected = [(rl.best_of_n_probs(LENGTH_REF, FEATURES @ w_lib, n) * LENGTH_GOLD).sum().item() for n in NS]
    torch.testing.assert_close(torch.tensor(gold), torch.tensor(expected), atol=1e-6, rtol=0)
    assert all(b > a for a, b in zip(scores, scores[1:]))
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "task_kl_penalty", "locked": true, "schema_version": 3, "solution": false, "task": false}
# **The KL penalty against the same reward model.** The cell below (not graded) optimises the reward
# model's score with the KL penalty instead of selecting: π*_β ∝ π_ref·exp(r_w/β), your
# `kl_regularised_optimum`, for a range of β, and prints its KL from π_ref and its gold reward beside
# best-of-N's. Use it for the written answer after it.

# %% nbgrader={"grade": false, "grade_id": "explore_kl_penalty", "locked": true, "schema_version": 3, "solution": false, "task": false}
proxy = FEATURES @ W
print("     β   KL(π*_β ‖ π_ref)   gold reward   reward model's score")
for beta in (4.0, 1.0, 0.5, 0.3, 0.2, 0.15, 0.1, 0.05, 0.01):
    pi_beta = kl_regularised_optimum(LENGTH_REF, proxy, beta)
    kl = (pi_beta * torch.log(pi_beta / LENGTH_REF)).sum().item()
    print(f"{beta:>6}   {kl:>16.3f}   {(pi_beta * LENGTH_GOLD).sum().item():>11.4f}   {(pi_beta * proxy).sum().item():>20.4f}")

# %% [markdown] nbgrader={"grade": false, "grade_id": "question_overoptimisation", "locked": true, "schema_version": 3, "solution": false, "task": false}
# **Written answer (4 points, graded by hand).** In a few sentences, in the cell below: (a) why does the
# gold reward of best-of-N fall at large N while the reward model's score keeps rising? Point to what the
# reward model was trained on and what best-of-N selects at large N. (b) What does the KL penalty of the
# objective of section 2 do about it, and what does it not do (is there a β that makes the problem go
# away, and how would you choose β in practice)?

# %% [markdown] nbgrader={"grade": true, "grade_id": "answer_overoptimisation", "locked": false, "points": 4, "schema_version": 3, "solution": true, "task": false}
# (a) The reward model was fitted to comparisons of answers drawn from π_ref, which are mostly short
# (about 95 % of them shorter than x = 0.5). Over that range the gold reward rises with length, so the
# best straight line says "longer is better", and on pairs like its data it orders answers well. It
# cannot represent the turn of the gold reward past x = 0.5, and the few long answers in its data weigh
# little in the fit. Best-of-N ranks by the reward model only, and at large N it searches the tail of
# π_ref for the reward model's maximum: the longest answers, where the line keeps rising and the gold
# reward falls. So the selected answers score ever higher by the proxy (it is what is maximised) and
# ever lower by the gold reward: proxy and gold agree near π_ref and disagree far from it, and more
# optimisation (the KL from π_ref grows like log N) moves the policy to exactly where they disagree.
# That is reward over-optimisation (Goodhart's law), the peak-then-fall of Gao, Schulman & Hilton 2022.
#
# (b) The KL penalty limits how far the policy may move from π_ref: π*_β ∝ π_ref·exp(r_w/β) only
# reweights π_ref, and a larger β keeps it closer to the answers the reward model was trained on, where
# its scores are trustworthy. In the table, a moderate β (about 0.2–0.3, a KL near 1 nat) buys gold
# reward, a small β drifts into the long tail and the gold reward falls below π_ref's, as with large N.
# The penalty does not repair the reward model: with a small enough β the KL-regularised optimum
# over-optimises just as best-of-N does, and with a large β it gives up the gains. No β is right in
# general; β (or a KL budget) is chosen by measuring a gold signal (held-out human or verifier
# judgements) against the KL and keeping the policy near the peak. Better reward models (more data where
# the policy goes, ensembles) are the cure; the KL penalty is a leash.
#
# *Marking: 1 point for the training distribution (short answers from π_ref) and what the fit learned
# there; 1 for large N selecting the tail where the linear model extrapolates wrongly (proxy up, gold
# down); 1 for the KL penalty keeping the policy near π_ref / the trusted region; 1 for "no β removes the
# problem; β is tuned against a gold measure or a KL budget".*

# %% [markdown] nbgrader={"grade": false, "grade_id": "task_dpo_run", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## 6. A short DPO run (3 points)
#
# Back to the chapter's five-answer bandit. A data set of 1,000 comparisons is drawn from π_ref and
# labelled by Bradley–Terry on the gold reward (no reward model this time). Write
# `train_dpo_bandit(ref_probs, chosen, rejected, beta, num_steps=200, lr=0.1)`: a tabular softmax policy
# (one logit per answer, starting at log π_ref), trained with Adam (`lr`) for `num_steps` full-batch
# steps on the mean of your `dpo_loss` over the data set (`chosen`, `rejected`: `(n,)` answer indices).
# Return the trained policy's probabilities `(K,)`.
#
# The test compares it with the minimiser of the data set's DPO loss, π_ref·exp(θ̂/β)/Z where θ̂ is the
# Bradley–Terry maximum-likelihood reward of each answer on these comparisons (section 2's optimum with
# the fitted reward: DPO on a finite data set fits the same reward a reward model would), and checks
# what the run bought by the gold reward.

# %% nbgrader={"grade": false, "grade_id": "train_dpo_bandit", "locked": false, "schema_version": 3, "solution": true, "task": false}
def train_dpo_bandit(ref_probs, chosen, rejected, beta, num_steps=200, lr=0.1):
    """(K,) π_ref, (n,) chosen and rejected answer indices, β -> (K,) the DPO-trained policy."""
    ### BEGIN SOLUTION
    ref_log_probs = torch.log(ref_probs)
    logits = ref_log_probs.clone()
    logits.requires_grad_(True)
    optimizer = torch.optim.Adam([logits], lr=lr)
    for _ in range(num_steps):
        log_probs = torch.log_softmax(logits, -1)
        losses = dpo_loss(log_probs[chosen], log_probs[rejected], ref_log_probs[chosen], ref_log_probs[rejected], beta)
        optimizer.zero_grad()
        losses.mean().backward()
        optimizer.step()
    return torch.softmax(logits, -1).detach()
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_dpo_training", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
DPO_CHOSEN, DPO_REJECTED = draw_comparisons(REF, GOLD, 1000, seed=1)
# the minimiser of the data set's DPO loss, from the library's Bradley–Terry fit of one reward per answer
# (stored numbers)
TARGET = snapshot(torch.softmax(REF.log() + _bradley_terry_fit(torch.eye(5)[DPO_CHOSEN], torch.eye(5)[DPO_REJECTED]) / BETA, -1))
policy = train_dpo_bandit(REF, DPO_CHOSEN, DPO_REJECTED, BETA)
distance = 0.5 * (policy - TARGET).abs().sum().item()
print(f"DPO policy  {policy.numpy().round(4)}\nits target  {TARGET.numpy().round(4)}   (total variation {distance:.1e})\n"
      f"π*          {PI_STAR.numpy().round(4)}")
print(f"gold reward: π_ref {(REF * GOLD).sum().item():.3f}, DPO {(policy * GOLD).sum().item():.3f}, "
      f"π* {(PI_STAR * GOLD).sum().item():.3f}")
assert distance < 1e-3, distance
assert (policy * GOLD).sum() > (REF * GOLD).sum() + 0.5  # the run bought gold reward
### BEGIN HIDDEN TESTS
for i in range(2):
    ref, r = random_bandit(GRADING_SEED + 70 + i, num_answers=4)
    ref = 0.5 * ref + 0.5 / 4  # every answer in the data set
    c, rej = draw_comparisons(ref, r, 1500, seed=GRADING_SEED + i)
    theta = reference_reward_model(torch.eye(4)[c], torch.eye(4)[rej])
    target = torch.softmax(ref.log() + theta / 0.7, -1)
    policy = train_dpo_bandit(ref, c, rej, 0.7, num_steps=300)
    assert 0.5 * (policy - target).abs().sum().item() < 1e-3
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "task_dpo_lm", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## 7. DPO on a language model (4 points)
#
# Sections 3 and 6 fed the DPO loss with the log-probabilities of whole answers of a bandit. On a
# language model an answer is a sequence of tokens, and its log-probability given the prompt is a sum:
#
# $$\log\pi(y \mid x) = \sum_{t=1}^{|y|} \log\pi(y_t \mid x, y_{<t}),$$
#
# one term per **response** token, each read from one forward pass of the causal model over $x \| y$:
# the logits at position $t - 1$ give the distribution of the token at position $t$. The prompt's tokens
# are context, not scored (their log-probability $\log\pi(x)$ would be the same for the chosen and the
# rejected response of a pair and cancel in the loss; they still do not belong to $\log\pi(y \mid x)$).
#
# The model here is the book's tiny GPT-2 (chapters 8–13: 1 layer, 32 wide, 2 heads, float64, on the
# CPU) with its character tokenizer, freshly initialised: the loss is defined for any model, and π_θ
# (`LM`) and π_ref (`LM_REF`) have different random weights, so that the loss is not log 2. A batch
# of preference pairs is laid out by `rl.lm.encode_preference_pairs(tokenizer, prompts, chosen,
# rejected)` (TRL's layout; a helper of the library you may call, it is not graded): a dict of `(2B, L)`
# tensors, rows 0 … B−1 holding BOS + prompt + chosen response + EOS and rows B … 2B−1 the same with
# the rejected response, right-padded with the pad id; `attention_mask` is True on real tokens,
# `completion_mask` True on the response tokens (EOS included), False on BOS, the prompt and the padding.
#
# Write, each in its cell:
#
# * `sequence_log_probs(model, input_ids, attention_mask, completion_mask)`: for each row, the sum of
#   $\log\pi(\text{token}_t \mid \text{tokens}_{<t})$ over the positions $t$ where `completion_mask` is
#   True (any such positions, not only one contiguous response; never column 0), shape `(N,)`, carrying
#   the gradient with respect to the model's parameters. Call the model as
#   `model(input_ids=input_ids, attention_mask=attention_mask).logits` (`(N, L, V)`); shift by one, take
#   the log-softmax over the vocabulary, pick each token's entry, and sum under the mask. Padding (and any
#   token outside the mask) must not count (2 points);
# * `per_instance_dpo_loss(lm, lm_ref, tokenizer, beta, prompt, response_chosen, response_rejected)`:
#   the DPO loss of one pair of strings, with the signature of Stanford CS336's alignment assignment
#   (`compute_per_instance_dpo_loss`), a 0-dimensional tensor: lay the pair out with
#   `rl.lm.encode_preference_pairs`, score both rows with your `sequence_log_probs` under `lm` and under
#   `lm_ref`, and finish with your `dpo_loss` of section 3. π_ref is frozen: no gradient may reach
#   `lm_ref`'s parameters (score it under `torch.no_grad()`), while the loss's gradient flows into `lm`'s
#   (1 point for the value, 1 for the gradient).

# %% nbgrader={"grade": false, "grade_id": "setup_lm", "locked": true, "schema_version": 3, "solution": false, "task": false}
LM_TOKENIZER = rl.lm.build_char_tokenizer()  # "0123456789+=" and <pad>, <s> (BOS), </s> (EOS), <unk>
LM_CONFIG = rl.lm.policy_config(LM_TOKENIZER, n_layer=1, n_embd=32, n_head=2)


def tiny_lm(seed):
    """The book's tiny GPT-2 (1 layer, 32 wide, 2 heads) with random weights from ``seed``, float64, CPU."""
    return rl.lm.build_policy(LM_CONFIG, seed=seed, device="cpu").double()


LM, LM_REF = tiny_lm(0), tiny_lm(1)  # π_θ and π_ref


def random_preference_texts(seed, size=3):
    """``size`` random (prompt, chosen, rejected) strings in the addition task's format: a prompt
    "ab+cd=" and two responses of 1 to 4 digits each (any text is a response)."""
    g = torch.Generator().manual_seed(seed)

    def digits(n):
        return "".join(str(d) for d in torch.randint(0, 10, (n,), generator=g).tolist())

    def length():
        return int(torch.randint(1, 5, (1,), generator=g))

    return [(f"{digits(2)}+{digits(2)}=", digits(length()), digits(length())) for _ in range(size)]


def flat_gradients(model):
    """All gradients of ``model``'s parameters as one vector (zeros where a parameter has none)."""
    return torch.cat([torch.zeros(p.numel()) if p.grad is None else p.grad.reshape(-1) for p in model.parameters()])


def projections(vector, seed=0):
    """Four fixed random projections of ``vector`` (a fingerprint that is cheap to store)."""
    return torch.randn(4, vector.numel(), generator=torch.Generator().manual_seed(seed)) @ vector


# the visible tests' pairs: responses of different lengths, so that the rows are padded
LM_PAIRS = [("07+42=", "49", "48"), ("13+08=", "21", "2100"), ("55+55=", "110", "11"), ("90+09=", "99", "9")]

# %% build_only=true
# Run when the assignment is built, then removed: the library's gradient of its per-instance loss.
def _library_dpo_gradient(prompt, chosen, rejected, beta):
    """Four projections of the gradient of rl.lm.compute_per_instance_dpo_loss with respect to LM's parameters."""
    params = list(LM.parameters())
    grads = torch.autograd.grad(rl.lm.compute_per_instance_dpo_loss(LM, LM_REF, LM_TOKENIZER, beta, prompt, chosen, rejected),
                                params, allow_unused=True)
    return projections(torch.cat([torch.zeros(p.numel()) if g is None else g.reshape(-1) for p, g in zip(params, grads)]))

# %% nbgrader={"grade": false, "grade_id": "sequence_log_probs", "locked": false, "schema_version": 3, "solution": true, "task": false}
def sequence_log_probs(model, input_ids, attention_mask, completion_mask):
    """(N, L) token ids, attention mask and completion mask (bool) -> (N,) log π(response | prompt), nats."""
    ### BEGIN SOLUTION
    logits = model(input_ids=input_ids, attention_mask=attention_mask).logits  # (N, L, V)
    log_probs = torch.log_softmax(logits[:, :-1], dim=-1)  # position t − 1 predicts the token at t
    per_token = log_probs.gather(-1, input_ids[:, 1:, None]).squeeze(-1)  # (N, L − 1)
    return torch.where(completion_mask[:, 1:], per_token, torch.zeros_like(per_token)).sum(-1)
    ### END SOLUTION

# %% nbgrader={"grade": false, "grade_id": "per_instance_dpo_loss", "locked": false, "schema_version": 3, "solution": true, "task": false}
def per_instance_dpo_loss(lm, lm_ref, tokenizer, beta, prompt, response_chosen, response_rejected):
    """π_θ, π_ref, their tokenizer, β and one pair of strings -> the pair's DPO loss (0-dim tensor)."""
    ### BEGIN SOLUTION
    batch = rl.lm.encode_preference_pairs(tokenizer, [prompt], [response_chosen], [response_rejected])
    policy = sequence_log_probs(lm, batch["input_ids"], batch["attention_mask"], batch["completion_mask"])
    with torch.no_grad():
        ref = sequence_log_probs(lm_ref, batch["input_ids"], batch["attention_mask"], batch["completion_mask"])
    return dpo_loss(policy[:1], policy[1:], ref[:1], ref[1:], beta)[0]
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_sequence_log_probs", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
batch = rl.lm.encode_preference_pairs(LM_TOKENIZER, *map(list, zip(*LM_PAIRS)))
ids, attention, completion = batch["input_ids"], batch["attention_mask"], batch["completion_mask"]
# the library's sequence log-probabilities of the 8 rows under π_θ and π_ref (stored numbers)
EXPECTED = snapshot([rl.lm.sequence_log_probs(model, ids, attention, completion).detach() for model in (LM, LM_REF)])
mine = sequence_log_probs(LM, ids, attention, completion)
assert mine.shape == (len(ids),), mine.shape
assert mine.requires_grad, "the log-probabilities must carry the gradient with respect to the model's parameters"
torch.testing.assert_close(mine, EXPECTED[0], atol=1e-10, rtol=0)
torch.testing.assert_close(sequence_log_probs(LM_REF, ids, attention, completion), EXPECTED[1], atol=1e-10, rtol=0)
print(f"log π_θ(y | x) of the chosen responses {mine[:4].detach().numpy().round(3)}, "
      f"the rejected {mine[4:].detach().numpy().round(3)}")
with torch.no_grad():
    # padding does not count: other token ids where attention_mask is False, and extra padding columns
    scrambled = torch.where(attention, ids, (ids * 7 + 5) % len(LM_TOKENIZER))
    torch.testing.assert_close(sequence_log_probs(LM, scrambled, attention, completion), mine, atol=1e-12, rtol=0)
    pads, nothing = torch.full((len(ids), 3), LM_TOKENIZER.pad_token_id), torch.zeros(len(ids), 3, dtype=torch.bool)
    wider = torch.cat([ids, pads], 1), torch.cat([attention, nothing], 1), torch.cat([completion, nothing], 1)
    torch.testing.assert_close(sequence_log_probs(LM, *wider), mine, atol=1e-12, rtol=0)
    # the prompt does not count, and the sum is over the masked positions: first response token + the rest
    first = completion & (completion.cumsum(-1) == 1)
    parts = sequence_log_probs(LM, ids, attention, first) + sequence_log_probs(LM, ids, attention, completion & ~first)
    torch.testing.assert_close(parts, mine, atol=1e-12, rtol=0)
    assert (sequence_log_probs(LM, ids, attention, torch.zeros_like(completion)) == 0).all()
    assert (parts < 0).all()
### BEGIN HIDDEN TESTS
for i in range(3):
    model = tiny_lm(GRADING_SEED + i)
    texts = random_preference_texts(GRADING_SEED + i, size=2 + i)
    b = rl.lm.encode_preference_pairs(LM_TOKENIZER, *map(list, zip(*texts)))
    g = torch.Generator().manual_seed(GRADING_SEED + i)
    # any mask of real tokens outside column 0, not only the responses
    random_mask = b["attention_mask"] & (torch.rand(b["input_ids"].shape, generator=g) < 0.5)
    random_mask[:, 0] = False
    with torch.no_grad():
        expected = rl.lm.sequence_log_probs(model, b["input_ids"], b["attention_mask"], b["completion_mask"])
        expected_random = rl.lm.sequence_log_probs(model, b["input_ids"], b["attention_mask"], random_mask)
    torch.testing.assert_close(sequence_log_probs(model, b["input_ids"], b["attention_mask"], b["completion_mask"]),
                               expected, atol=1e-10, rtol=0)
    torch.testing.assert_close(sequence_log_probs(model, b["input_ids"], b["attention_mask"], random_mask),
                               expected_random, atol=1e-10, rtol=0)
### END HIDDEN TESTS
print("sequence log-probabilities: OK")

# %% nbgrader={"grade": true, "grade_id": "test_per_instance_dpo_loss", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
# the library's per-instance loss on the visible pairs for β = 0.1 and 0.5 (stored numbers)
EXPECTED = snapshot([[rl.lm.compute_per_instance_dpo_loss(LM, LM_REF, LM_TOKENIZER, beta, *pair).detach() for beta in (0.1, 0.5)]
                     for pair in LM_PAIRS])
for pair, expected in zip(LM_PAIRS, EXPECTED):
    for beta, loss in zip((0.1, 0.5), expected):
        mine = per_instance_dpo_loss(LM, LM_REF, LM_TOKENIZER, beta, *pair)
        assert mine.dim() == 0, mine.shape
        torch.testing.assert_close(mine, loss, atol=1e-10, rtol=0)
print("per-instance DPO loss at β = 0.5:", [round(per_instance_dpo_loss(LM, LM_REF, LM_TOKENIZER, 0.5, *pair).item(), 4)
                                             for pair in LM_PAIRS])
# π_θ = π_ref: every implicit reward is 0 and the loss is log 2
torch.testing.assert_close(per_instance_dpo_loss(LM, LM, LM_TOKENIZER, 0.5, *LM_PAIRS[0]).detach(),
                           torch.tensor(math.log(2)), atol=1e-12, rtol=0)
### BEGIN HIDDEN TESTS
for i in range(2):
    lm, lm_ref = tiny_lm(GRADING_SEED + 10 + i), tiny_lm(GRADING_SEED + 20 + i)
    beta = [0.05, 0.3, 1.0, 2.0][i * 2 + GRADING_SEED % 2]
    for pair in random_preference_texts(GRADING_SEED + 10 + i, size=3):
        with torch.no_grad():
            expected = rl.lm.compute_per_instance_dpo_loss(lm, lm_ref, LM_TOKENIZER, beta, *pair)
        torch.testing.assert_close(per_instance_dpo_loss(lm, lm_ref, LM_TOKENIZER, beta, *pair).detach(), expected,
                                   atol=1e-10, rtol=0)
### END HIDDEN TESTS
print("per-instance DPO loss: OK")

# %% nbgrader={"grade": true, "grade_id": "test_per_instance_dpo_gradient", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
# loss.backward(): a gradient on π_θ's parameters, none on π_ref's; four random projections of π_θ's
# gradient against the library's (stored numbers)
EXPECTED = snapshot(_library_dpo_gradient(*LM_PAIRS[1], 0.5))
LM.zero_grad(set_to_none=True)
LM_REF.zero_grad(set_to_none=True)
per_instance_dpo_loss(LM, LM_REF, LM_TOKENIZER, 0.5, *LM_PAIRS[1]).backward()
assert all(p.grad is None for p in LM_REF.parameters()), "a gradient reached π_ref's parameters"
assert flat_gradients(LM).abs().sum() > 0, "no gradient reached π_θ's parameters"
torch.testing.assert_close(projections(flat_gradients(LM)), EXPECTED, atol=1e-10, rtol=1e-8)
LM.zero_grad(set_to_none=True)
### BEGIN HIDDEN TESTS
for i in range(2):
    lm, lm_ref = tiny_lm(GRADING_SEED + 30 + i), tiny_lm(GRADING_SEED + 40 + i)
    pair = random_preference_texts(GRADING_SEED + 30 + i, size=1)[0]
    beta = [0.2, 1.5][i]
    params = list(lm.parameters())
    grads = torch.autograd.grad(rl.lm.compute_per_instance_dpo_loss(lm, lm_ref, LM_TOKENIZER, beta, *pair), params,
                                allow_unused=True)
    expected = torch.cat([torch.zeros(p.numel()) if g is None else g.reshape(-1) for p, g in zip(params, grads)])
    per_instance_dpo_loss(lm, lm_ref, LM_TOKENIZER, beta, *pair).backward()
    assert all(p.grad is None for p in lm_ref.parameters())
    torch.testing.assert_close(flat_gradients(lm), expected, atol=1e-10, rtol=1e-8)
### END HIDDEN TESTS
print("gradient into π_θ only: OK")
