# %% [markdown] nbgrader={"grade": false, "grade_id": "intro", "locked": true, "schema_version": 3, "solution": false, "task": false}
# # Assignment 1 (Part I): the score function and baselines
#
# Read chapters 2 (the score function) and 3 (REINFORCE and baselines) of the book first. The setting
# is the simplest policy-gradient problem there is: a **bandit** with K = 5 arms whose rewards are
# Bernoulli with means 0.1, 0.3, 0.5, 0.7, 0.9, and a softmax policy π_θ = softmax(θ) over the arms.
# You will write:
#
# 1. the **softmax score** ∇_θ log π_θ(a) in closed form (3 points);
# 2. the **variance-optimal constant baseline** (Greensmith et al. 2004, JMLR 5, "Variance Reduction
#    Techniques for Gradient Estimates in Reinforcement Learning", §3; chapter 3 of the book) (3 points);
# 3. the per-sample **score-function gradient estimates**, and measure their variance with no
#    baseline, the mean baseline and the optimal one (4 points);
# 4. a short **REINFORCE** run on the bandit that must lift the expected reward from 0.5 to 0.8 (3 points);
# 5. a **written answer** on why a baseline does not bias the gradient (3 points).
#
# **16 points** in all: 13 autograded (some tests are hidden and run only when your notebook is
# graded), 3 for the written answer, graded by hand. The visible tests compare your functions with
# stored values of the `rlbook` library's implementations; most test cells also hold hidden tests
# that do the same on inputs drawn when your notebook is graded, so make your functions correct in
# general, not just on the examples. Write your code where it says `YOUR CODE HERE`
# (delete the `raise NotImplementedError()` line) and do not change the test cells.
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
bandit = rl.SoftmaxBandit(torch.tensor([0.1, 0.3, 0.5, 0.7, 0.9]), bernoulli=True)
K = bandit.num_arms

# %% build_only=true
# Run when the assignment is built, then removed: the visible tests' inputs (stored as numbers).
SCORE_CASES = []
_g = torch.Generator().manual_seed(0)
for _B, _A in [(1, 2), (4, 5), (6, 3)]:
    SCORE_CASES.append((torch.randn(_B, _A, generator=_g, dtype=torch.float64),
                        torch.randint(0, _A, (_B,), generator=_g)))
BASELINE_CASES = []
_g = torch.Generator().manual_seed(1)
for _n in (3, 8, 20):
    BASELINE_CASES.append((torch.randn(_n, generator=_g, dtype=torch.float64) + 2.0,
                           torch.rand(_n, generator=_g, dtype=torch.float64) * 2 + 0.01))

# %% [markdown] nbgrader={"grade": false, "grade_id": "task_score", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## 1. The softmax score (3 points)
#
# For logits θ and π = softmax(θ), the score of action a is
# $\nabla_\theta \log\pi_\theta(a) = \mathrm{onehot}(a) - \pi$. `logits` is `(B, K)` (one row per
# sample) and `actions` is `(B,)` of integers in `[0, K)`; return the scores, `(B, K)`. Do not use
# autograd: this closed form is what makes the estimator cheap.

# %% nbgrader={"grade": false, "grade_id": "softmax_score", "locked": false, "schema_version": 3, "solution": true, "task": false}
def softmax_score(logits, actions):
    """(B, K) logits, (B,) int actions -> (B, K) scores ∇_logits log softmax(logits)[action]."""
    ### BEGIN SOLUTION
    onehot = torch.nn.functional.one_hot(actions, logits.shape[-1]).to(logits.dtype)
    return onehot - torch.softmax(logits, dim=-1)
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_softmax_score", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# (logits, actions) pairs, and the scores the library's implementation gives on them (stored numbers)
CASES = snapshot(SCORE_CASES)
EXPECTED = snapshot([rl.softmax_score(logits, actions) for logits, actions in SCORE_CASES])
for (logits, actions), expected in zip(CASES, EXPECTED):
    torch.testing.assert_close(softmax_score(logits, actions), expected)
### BEGIN HIDDEN TESTS
g = torch.Generator().manual_seed(GRADING_SEED)
for B, A in [(3, 4), (9, 6), (40, 2)]:
    logits = 3 * torch.randn(B, A, generator=g, dtype=torch.float64)
    actions = torch.randint(0, A, (B,), generator=g)
    torch.testing.assert_close(softmax_score(logits, actions), rl.softmax_score(logits, actions))
### END HIDDEN TESTS
print("softmax score: OK")

# %% nbgrader={"grade": true, "grade_id": "test_softmax_score_autograd", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
# each row is the gradient of log π(a) with respect to that row's logits
logits = torch.tensor([[0.3, -1.2, 2.0], [5.0, 5.0, -5.0]], dtype=torch.float64, requires_grad=True)
actions = torch.tensor([2, 1])
torch.log_softmax(logits, -1)[torch.arange(2), actions].sum().backward()
torch.testing.assert_close(softmax_score(logits.detach(), actions), logits.grad)
### BEGIN HIDDEN TESTS
big = torch.tensor([[800.0, 0.0, -800.0]], dtype=torch.float64)  # no overflow
torch.testing.assert_close(softmax_score(big, torch.tensor([0])), torch.zeros(1, 3, dtype=torch.float64))
g = torch.Generator().manual_seed(GRADING_SEED + 1)
logits = (2 * torch.randn(7, 4, generator=g, dtype=torch.float64)).requires_grad_(True)
actions = torch.randint(0, 4, (7,), generator=g)
torch.log_softmax(logits, -1)[torch.arange(7), actions].sum().backward()
torch.testing.assert_close(softmax_score(logits.detach(), actions), logits.grad)
### END HIDDEN TESTS
print("score = autograd: OK")

# %% [markdown] nbgrader={"grade": false, "grade_id": "task_baseline", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## 2. The variance-optimal baseline (3 points)
#
# The one-sample estimate $g = (R - b)\,\nabla\log\pi(a)$ is unbiased for every constant $b$. The $b$
# that minimises its total variance $\mathbb E\|g\|^2 - \|\nabla J\|^2$ is
#
# $$b^* = \frac{\mathbb E\big[\|\nabla\log\pi(a)\|^2\,R\big]}{\mathbb E\big[\|\nabla\log\pi(a)\|^2\big]},$$
#
# the average reward *weighted by the squared length of the score*: not the plain mean reward. Write
# its sample version: `returns` is `(n,)` and `score_sq_norms` is `(n,)` (the $\|\nabla\log\pi(a_i)\|^2$
# of the same samples); return a 0-dimensional tensor.

# %% nbgrader={"grade": false, "grade_id": "optimal_baseline", "locked": false, "schema_version": 3, "solution": true, "task": false}
def optimal_baseline(returns, score_sq_norms):
    """(n,) returns and (n,) squared score norms -> () the variance-minimising constant baseline."""
    ### BEGIN SOLUTION
    return (score_sq_norms * returns).sum() / score_sq_norms.sum()
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_optimal_baseline", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# (returns, squared norms) pairs, and the library's baseline on them (stored numbers)
CASES = snapshot(BASELINE_CASES)
EXPECTED = snapshot([rl.optimal_baseline(returns, sq) for returns, sq in BASELINE_CASES])
for (returns, sq), expected in zip(CASES, EXPECTED):
    torch.testing.assert_close(optimal_baseline(returns, sq), expected)
### BEGIN HIDDEN TESTS
g = torch.Generator().manual_seed(GRADING_SEED)
for n in (3, 50, 1000):
    returns = torch.randn(n, generator=g, dtype=torch.float64) + 2.0
    sq = torch.rand(n, generator=g, dtype=torch.float64) * 2 + 0.01
    torch.testing.assert_close(optimal_baseline(returns, sq), rl.optimal_baseline(returns, sq))
### END HIDDEN TESTS
print("optimal baseline: OK")

# %% nbgrader={"grade": true, "grade_id": "test_optimal_baseline_minimises", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
# On the bandit the expectations are exact sums over the arms: the weights π(a)‖s_a‖² go where the
# squared norms go, and the result must be the exact optimum, which no other constant beats.
logits = torch.tensor([1.5, 0.0, -0.5, 0.5, -1.0])
pi = torch.softmax(logits, 0)
# ‖s_a‖² for each arm a, and the exact optimum (stored numbers)
SQ_NORMS = snapshot((rl.softmax_score(logits.expand(K, K), torch.arange(K)) ** 2).sum(-1))
EXACT = snapshot(bandit.exact_optimal_baseline(logits))
b = optimal_baseline(bandit.reward_means, pi * SQ_NORMS)
torch.testing.assert_close(b, EXACT)
### BEGIN HIDDEN TESTS
for shift in (-0.05, 0.05):
    assert bandit.estimator_variance(logits, float(b)) < bandit.estimator_variance(logits, float(b) + shift)
g = torch.Generator().manual_seed(GRADING_SEED + 2)
other = 1.5 * torch.randn(K, generator=g)
sq_other = (rl.softmax_score(other.expand(K, K), torch.arange(K)) ** 2).sum(-1)
torch.testing.assert_close(optimal_baseline(bandit.reward_means, torch.softmax(other, 0) * sq_other),
                           bandit.exact_optimal_baseline(other))
### END HIDDEN TESTS
print("optimal baseline on the bandit: OK")

# %% [markdown] nbgrader={"grade": false, "grade_id": "task_samples", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## 3. Gradient estimates and their variance (4 points)
#
# One pull $a_i \sim \pi_\theta$ with reward $r_i$ gives the estimate $g_i = (r_i - b)\,\nabla\log\pi_\theta(a_i)$
# of $\nabla_\theta J$. `logits` is `(K,)` (one policy for every pull), `actions` and `rewards` are
# `(n,)`, `baseline` is a number; return the `(n, K)` estimates. Use your `softmax_score`.

# %% nbgrader={"grade": false, "grade_id": "gradient_samples", "locked": false, "schema_version": 3, "solution": true, "task": false}
def gradient_samples(logits, actions, rewards, baseline):
    """(K,) logits, (n,) actions and rewards, a constant baseline -> (n, K) per-pull gradient estimates."""
    ### BEGIN SOLUTION
    scores = softmax_score(logits.expand(len(actions), -1), actions)
    return (rewards - baseline)[:, None] * scores
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_gradient_samples", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
logits = torch.tensor([1.5, 0.0, -0.5, 0.5, -1.0])
# 12 pulls (actions, rewards), and for each baseline the estimates the library's functions give (stored numbers)
PULLS = snapshot(bandit.sample(logits, 12, torch.Generator().manual_seed(2)))
EXPECTED = snapshot({b: (PULLS[1] - b)[:, None] * rl.softmax_score(logits.expand(12, K), PULLS[0])
                     for b in (0.0, 0.3, 0.9)})
actions, rewards = PULLS
for b, expected in EXPECTED.items():
    torch.testing.assert_close(gradient_samples(logits, actions, rewards, b), expected)
### BEGIN HIDDEN TESTS
g = torch.Generator().manual_seed(GRADING_SEED + 3)
other = 1.5 * torch.randn(K, generator=g)
pulled, paid = bandit.sample(other, 40, g)
for b in torch.rand(3, generator=g).tolist():
    torch.testing.assert_close(gradient_samples(other, pulled, paid, b),
                               (paid - b)[:, None] * rl.softmax_score(other.expand(40, K), pulled))
### END HIDDEN TESTS
print("gradient samples: OK")

# %% [markdown] nbgrader={"grade": false, "grade_id": "task_variance", "locked": true, "schema_version": 3, "solution": false, "task": false}
# The cell below draws 20 000 pulls from the policy with the logits above and measures the total
# variance (the sum over the K coordinates of the sample variance) of your estimates with no
# baseline, with the mean reward as the baseline, and with your optimal baseline; the library's exact
# variance (a sum over the arms) is printed beside each. The measured values must be within 5% of the
# exact ones, and the ordering must be the one chapter 3 predicts.

# %% nbgrader={"grade": true, "grade_id": "test_variance", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
actions, rewards = bandit.sample(logits, 20_000, torch.Generator().manual_seed(3))
sq = (softmax_score(logits.expand(len(actions), K), actions) ** 2).sum(-1)
baselines = {"none": 0.0, "mean": float(rewards.mean()), "optimal": float(optimal_baseline(rewards, sq))}
measured = {}
for name, b in baselines.items():
    measured[name] = float(gradient_samples(logits, actions, rewards, b).var(0).sum())
    exact = float(bandit.estimator_variance(logits, b))
    print(f"baseline {name:8s} b = {b:.3f}: total variance {measured[name]:.4f} (exact {exact:.4f})")
    assert abs(measured[name] - exact) < 0.05 * exact
assert measured["optimal"] < measured["mean"] < measured["none"]
### BEGIN HIDDEN TESTS
pulled, paid = bandit.sample(logits, 20_000, torch.Generator().manual_seed(GRADING_SEED + 4))
sq = (softmax_score(logits.expand(len(pulled), K), pulled) ** 2).sum(-1)
for b in (0.0, float(paid.mean()), float(optimal_baseline(paid, sq))):
    assert abs(float(gradient_samples(logits, pulled, paid, b).var(0).sum())
               - float(bandit.estimator_variance(logits, b))) < 0.05 * float(bandit.estimator_variance(logits, b))
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "task_reinforce", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## 4. REINFORCE on the bandit (3 points)
#
# Write the training loop: start from θ = 0 (every arm equally likely, expected reward 0.5); at each of
# `num_steps` steps draw `batch_size` pulls with `bandit.sample(logits, batch_size, generator)`,
# estimate the gradient as the mean of your `gradient_samples` with your optimal baseline (computed
# from the same batch), and take a step of **gradient ascent**, θ ← θ + lr · ĝ. Return the final logits
# and the list of the exact expected rewards `float(bandit.expected_return(logits))` after each step.
# The test asks for an expected reward of at least 0.8 after 200 steps of 16 pulls (the best arm pays 0.9).

# %% nbgrader={"grade": false, "grade_id": "reinforce_bandit", "locked": false, "schema_version": 3, "solution": true, "task": false}
def reinforce_bandit(num_steps=200, batch_size=16, lr=0.5, seed=0):
    """-> (final logits (K,), list of the expected reward after each step)."""
    generator = torch.Generator().manual_seed(seed)
    logits = torch.zeros(K)
    curve = []
    ### BEGIN SOLUTION
    for _ in range(num_steps):
        actions, rewards = bandit.sample(logits, batch_size, generator)
        sq = (softmax_score(logits.expand(batch_size, K), actions) ** 2).sum(-1)
        b = optimal_baseline(rewards, sq)
        logits = logits + lr * gradient_samples(logits, actions, rewards, b).mean(0)
        curve.append(float(bandit.expected_return(logits)))
    ### END SOLUTION
    return logits, curve

# %% nbgrader={"grade": true, "grade_id": "test_reinforce_bandit", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
finals = []
for seed in range(3):
    logits, curve = reinforce_bandit(seed=seed)
    assert len(curve) == 200, "one entry per step"
    finals.append(curve[-1])
print("expected reward after 200 steps, seeds 0-2:", [round(x, 3) for x in finals])
assert min(finals) >= 0.8, "REINFORCE should reach an expected reward of 0.8"
### BEGIN HIDDEN TESTS
# The loop is run on the grading seed with every pull recorded, and replayed step by step with the
# submission's own functions: each step's logits must be the previous step's plus lr times the mean
# estimate on the pulls drawn there, and each curve entry the exact expected reward after that step.
# A curve or logits that no training produced fail here.
seed = GRADING_SEED % 1_000_003
pulls = []
def recording_sample(logits, n, generator, sample=bandit.sample):
    actions, rewards = sample(logits, n, generator)
    pulls.append((logits.detach().clone(), n, generator.initial_seed(), actions.clone(), rewards.clone()))
    return actions, rewards
bandit.sample = recording_sample
try:
    final, curve = reinforce_bandit(num_steps=50, batch_size=8, lr=0.7, seed=seed)
finally:
    del bandit.sample
assert len(pulls) == 50 and len(curve) == 50, "one batch of pulls and one curve entry per step"
steps = [p[0] for p in pulls[1:]] + [final.detach()]
torch.testing.assert_close(pulls[0][0], torch.zeros(K))
for (theta, n, from_seed, actions, rewards), after, value in zip(pulls, steps, curve):
    assert n == 8 and from_seed == seed, "the pulls come from bandit.sample with the seeded generator"
    sq = (softmax_score(theta.expand(n, K), actions) ** 2).sum(-1)
    update = gradient_samples(theta, actions, rewards, optimal_baseline(rewards, sq)).mean(0)
    torch.testing.assert_close(after, theta + 0.7 * update, atol=1e-5, rtol=1e-5)
    assert abs(value - float(bandit.expected_return(after))) < 1e-5
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "question_baseline", "locked": true, "schema_version": 3, "solution": false, "task": false}
# **Written answer (3 points, graded by hand).** In the cell below: why does subtracting a constant
# baseline leave the gradient estimate unbiased, and why is the best constant a *weighted* mean of the
# rewards rather than their plain mean? When are the two the same?

# %% [markdown] nbgrader={"grade": true, "grade_id": "answer_baseline", "locked": false, "points": 3, "schema_version": 3, "solution": true, "task": false}
# The baseline's contribution to the mean is $-b\,\mathbb E_{a\sim\pi}[\nabla\log\pi(a)] =
# -b\sum_a \pi(a)\nabla\log\pi(a) = -b\,\nabla\sum_a\pi(a) = -b\,\nabla 1 = 0$: the score has mean zero, so
# any constant can be subtracted without changing the expectation. It does change the variance:
# $\mathbb E\|g\|^2 = \mathbb E[\|s\|^2 (R-b)^2]$, a quadratic in $b$ whose minimum is at
# $b^* = \mathbb E[\|s\|^2 R] / \mathbb E[\|s\|^2]$. Samples with a long score vector (unlikely actions:
# $\|s\|^2 = \|\mathrm{onehot}(a) - \pi\|^2$ is largest when $\pi(a)$ is small) contribute most to the
# variance, so their rewards count more. The two coincide when $\|s\|^2$ is the same for every action
# (for example a uniform policy) or when it is uncorrelated with the reward.
#
# *Marking: 1 point for the zero-mean score argument; 1 for the quadratic in b and its weighted
# minimiser; 1 for when the weighted and plain means coincide.*
