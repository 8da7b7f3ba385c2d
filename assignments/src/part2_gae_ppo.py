# %% [markdown] nbgrader={"grade": false, "grade_id": "intro", "locked": true, "schema_version": 3, "solution": false, "task": false}
# # Assignment 2 (Part II): GAE and the clipped surrogate, then PPO on CartPole
#
# Read chapters 4 (advantage estimation) and 7 (PPO) of the book first. You write the two functions
# at the heart of PPO and then train with them:
#
# 1. **generalised advantage estimation**, GAE(λ) (Schulman et al. 2016, arXiv:1506.02438, eq. 16),
#    with episode ends inside the batch handled correctly (5 points);
# 2. PPO's **clipped surrogate loss** (Schulman et al. 2017, arXiv:1707.06347, eq. 7), with
#    separate lower and upper clip ranges as in DAPO's "clip-higher" (5 points);
# 3. a **PPO run on CartPole** that uses your GAE and must reach an average return of 300 within
#    40 000 environment steps (3 points);
# 4. a **written answer** on what the clip does to the gradient (3 points).
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
torch.set_num_threads(1)  # small networks: one thread is fastest and repeatable


def random_rollout(seed, B=3, T=12):
    """Random (B, T) rewards, values, next_values and episode-end flags (about 15% of steps end)."""
    g = torch.Generator().manual_seed(seed)
    ends = torch.rand(B, T, generator=g) < 0.15
    truncated = ends & (torch.rand(B, T, generator=g) < 0.3)
    return {"rewards": torch.randn(B, T, generator=g, dtype=torch.float64),
            "values": torch.randn(B, T, generator=g, dtype=torch.float64),
            "next_values": torch.randn(B, T, generator=g, dtype=torch.float64),
            "terminated": ends & ~truncated, "truncated": truncated}

# %% build_only=true
# Run when the assignment is built, then removed: the visible tests' inputs (stored as numbers).
GAE_CASES = [(random_rollout(seed, B=2, T=8), 0.9 + 0.01 * seed, 0.5 + 0.1 * seed) for seed in range(3)]
CLIP_CASES = []
_g = torch.Generator().manual_seed(0)
for _low, _high in [(0.2, 0.2), (0.2, 0.28), (0.1, 0.5)]:
    CLIP_CASES.append((0.5 * torch.randn(12, generator=_g, dtype=torch.float64), torch.zeros(12, dtype=torch.float64),
                       torch.randn(12, generator=_g, dtype=torch.float64), _low, _high))

# %% [markdown] nbgrader={"grade": false, "grade_id": "task_gae", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## 1. GAE(λ) (5 points)
#
# All tensors are `(B, T)`: `B` parallel environments, `T` consecutive steps each. `values[b, t]` is
# $V(s_t)$ and `next_values[b, t]` is $V(s_{t+1})$, where $s_{t+1}$ is the state the step led to (for a
# truncated step, the last observation before the reset). With
# $\delta_t = r_t + \gamma(1 - \text{terminated}_t)\,V(s_{t+1}) - V(s_t)$, compute, backwards in time,
#
# $$\hat A_t = \delta_t + \gamma\lambda\,(1 - \text{done}_t)\,\hat A_{t+1}, \qquad \text{done}_t = \text{terminated}_t \lor \text{truncated}_t,$$
#
# with $\hat A_T = 0$ after the last step of the batch. A terminated step has no future (no bootstrap);
# a truncated step keeps the bootstrap $V(s_{t+1})$ but nothing flows back across it from the next
# episode. Return the advantages, `(B, T)`.

# %% nbgrader={"grade": false, "grade_id": "gae", "locked": false, "schema_version": 3, "solution": true, "task": false}
def gae(rewards, values, next_values, terminated, truncated, gamma, gae_lambda):
    """(B, T) tensors, floats gamma and gae_lambda -> (B, T) advantages."""
    ### BEGIN SOLUTION
    not_terminated = 1.0 - terminated.to(rewards.dtype)
    not_done = 1.0 - (terminated | truncated).to(rewards.dtype)
    deltas = rewards + gamma * not_terminated * next_values - values
    advantages = torch.zeros_like(rewards)
    running = torch.zeros_like(rewards[..., 0])
    for t in reversed(range(rewards.shape[-1])):
        running = deltas[..., t] + gamma * gae_lambda * not_done[..., t] * running
        advantages[..., t] = running
    return advantages
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_gae", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
# (rollout, γ, λ) triples, and the library's advantages on them (stored numbers)
CASES = snapshot(GAE_CASES)
EXPECTED = snapshot([rl.gae(r["rewards"], r["values"], r["next_values"], r["terminated"], r["truncated"], gamma, lam)[0]
                     for r, gamma, lam in GAE_CASES])
for (r, gamma, lam), expected in zip(CASES, EXPECTED):
    mine = gae(r["rewards"], r["values"], r["next_values"], r["terminated"], r["truncated"], gamma, lam)
    torch.testing.assert_close(mine, expected)
### BEGIN HIDDEN TESTS
g = torch.Generator().manual_seed(GRADING_SEED)
for i in range(6):
    r = random_rollout(GRADING_SEED + i, B=3, T=12)
    gamma, lam = (0.8 + 0.2 * torch.rand(2, generator=g, dtype=torch.float64)).tolist()
    expected, _ = rl.gae(r["rewards"], r["values"], r["next_values"], r["terminated"], r["truncated"], gamma, lam)
    mine = gae(r["rewards"], r["values"], r["next_values"], r["terminated"], r["truncated"], gamma, lam)
    torch.testing.assert_close(mine, expected)
### END HIDDEN TESTS
print("GAE: OK")

# %% nbgrader={"grade": true, "grade_id": "test_gae_limits", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# λ = 0 is the TD error δ_t; λ = 1 with γ = 1 and no episode end is the plain sum of the δ's to go
r = random_rollout(11)
no_end = torch.zeros_like(r["terminated"])
td = r["rewards"] + 0.9 * (~r["terminated"]) * r["next_values"] - r["values"]
torch.testing.assert_close(gae(r["rewards"], r["values"], r["next_values"], r["terminated"], r["truncated"], 0.9, 0.0), td)
deltas = r["rewards"] + r["next_values"] - r["values"]
to_go = deltas.flip(-1).cumsum(-1).flip(-1)
torch.testing.assert_close(gae(r["rewards"], r["values"], r["next_values"], no_end, no_end, 1.0, 1.0), to_go)
### BEGIN HIDDEN TESTS
# a truncation in the middle: the advantage before it ignores everything after it
r = random_rollout(GRADING_SEED)
trunc = no_end.clone()
trunc[:, 5] = True
a = gae(r["rewards"], r["values"], r["next_values"], no_end, trunc, 0.95, 0.9)
b = gae(r["rewards"][:, :6], r["values"][:, :6], r["next_values"][:, :6], no_end[:, :6], no_end[:, :6], 0.95, 0.9)
torch.testing.assert_close(a[:, :6], b)
### END HIDDEN TESTS
print("GAE limits: OK")

# %% [markdown] nbgrader={"grade": false, "grade_id": "task_clip", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## 2. The clipped surrogate (5 points)
#
# With $\rho = \exp(\log\pi_\theta - \log\pi_{\theta_\text{old}})$, the per-element loss to *minimise* is
#
# $$\ell = -\min\big(\rho\hat A,\ \operatorname{clip}(\rho,\ 1-\varepsilon_\text{low},\ 1+\varepsilon_\text{high})\,\hat A\big).$$
#
# All inputs have the same shape; return the loss with that shape (no averaging). Keep it
# differentiable with respect to `log_probs`.

# %% nbgrader={"grade": false, "grade_id": "clipped_surrogate", "locked": false, "schema_version": 3, "solution": true, "task": false}
def clipped_surrogate(log_probs, old_log_probs, advantages, clip_eps_low=0.2, clip_eps_high=0.2):
    """Per-element PPO loss (minimise), the shape of the inputs."""
    ### BEGIN SOLUTION
    ratio = torch.exp(log_probs - old_log_probs)
    clipped = torch.clamp(ratio, 1.0 - clip_eps_low, 1.0 + clip_eps_high)
    return -torch.min(ratio * advantages, clipped * advantages)
    ### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test_clipped_surrogate", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
# (log_probs, old_log_probs, advantages, ε_low, ε_high), and the library's losses on them (stored numbers)
CASES = snapshot(CLIP_CASES)
EXPECTED = snapshot([rl.clipped_surrogate_loss(*case) for case in CLIP_CASES])
for (log_probs, old, adv, eps_low, eps_high), expected in zip(CASES, EXPECTED):
    torch.testing.assert_close(clipped_surrogate(log_probs, old, adv, eps_low, eps_high), expected)
### BEGIN HIDDEN TESTS
g = torch.Generator().manual_seed(GRADING_SEED)
for i in range(3):
    log_probs = 0.5 * torch.randn(200, generator=g, dtype=torch.float64)
    old = 0.2 * torch.randn(200, generator=g, dtype=torch.float64)
    adv = torch.randn(200, generator=g, dtype=torch.float64)
    eps_low, eps_high = (0.05 + 0.4 * torch.rand(2, generator=g, dtype=torch.float64)).tolist()
    torch.testing.assert_close(clipped_surrogate(log_probs, old, adv, eps_low, eps_high),
                               rl.clipped_surrogate_loss(log_probs, old, adv, eps_low, eps_high))
### END HIDDEN TESTS
print("clipped surrogate: OK")

# %% nbgrader={"grade": true, "grade_id": "test_clipped_surrogate_gradient", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# the gradient: zero exactly where the clip is active, ρÂ's gradient elsewhere
ratio = torch.tensor([0.5, 0.9, 1.0, 1.1, 1.5, 0.5, 0.9, 1.1, 1.5], dtype=torch.float64)
adv = torch.tensor([1.0, 1.0, 1.0, 1.0, 1.0, -1.0, -1.0, -1.0, -1.0], dtype=torch.float64)
log_probs = ratio.log().requires_grad_(True)
clipped_surrogate(log_probs, torch.zeros(9, dtype=torch.float64), adv, 0.2, 0.2).sum().backward()
expected = -ratio * adv
expected[4] = 0.0  # ρ = 1.5 > 1.2 with Â > 0: no incentive to go further
expected[5] = 0.0  # ρ = 0.5 < 0.8 with Â < 0: no incentive to go further down
torch.testing.assert_close(log_probs.grad, expected)
### BEGIN HIDDEN TESTS
g = torch.Generator().manual_seed(GRADING_SEED + 1)
log_probs = (0.6 * torch.randn(300, generator=g, dtype=torch.float64)).requires_grad_(True)
old = 0.1 * torch.randn(300, generator=g, dtype=torch.float64)
adv = torch.randn(300, generator=g, dtype=torch.float64)
(grad,) = torch.autograd.grad(clipped_surrogate(log_probs, old, adv, 0.15, 0.3).sum(), log_probs)
lp2 = log_probs.detach().clone().requires_grad_(True)
(grad2,) = torch.autograd.grad(rl.clipped_surrogate_loss(lp2, old, adv, 0.15, 0.3).sum(), lp2)
torch.testing.assert_close(grad, grad2)
### END HIDDEN TESTS
print("clipped surrogate gradient: OK")

# %% [markdown] nbgrader={"grade": false, "grade_id": "question_clip", "locked": true, "schema_version": 3, "solution": false, "task": false}
# **Written answer (3 points, graded by hand).** In the cell below: for a positive advantage, what does
# the clipped loss's gradient do once ρ > 1 + ε_high, and for a negative advantage once ρ < 1 − ε_low?
# Why is the *minimum* (a pessimistic bound) the right choice, and what would taking the maximum do
# to a training run?

# %% [markdown] nbgrader={"grade": true, "grade_id": "answer_clip", "locked": false, "points": 3, "schema_version": 3, "solution": true, "task": false}
# Past those points the clipped term is the smaller one and it is constant in θ, so the gradient is
# exactly 0: the sample stops pulling the policy further in the direction its advantage favours. On the
# other side (ρ < 1 − ε_low with Â > 0, or ρ > 1 + ε_high with Â < 0) the unclipped term is the minimum
# and the gradient stays, so a step that made a good action less likely, or a bad one more likely, is
# always corrected. The minimum makes the surrogate a lower bound of the unclipped objective: the update
# can never gain by moving the ratio far from 1, which keeps the new policy near the one that collected
# the data, where the importance-weighted surrogate is trustworthy. The maximum would be an optimistic
# bound: it rewards pushing ratios ever further (the gradient never vanishes where it should), so
# several epochs on the same batch would drive the policy far from the data and the run would become
# unstable.
#
# *Marking: 1 point for the zero gradient in the clipped regions; 1 for the pessimistic bound keeping
# the policy near the data; 1 for what the maximum would do.*

# %% [markdown] nbgrader={"grade": false, "grade_id": "task_ppo", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## 3. PPO on CartPole with your GAE (3 points)
#
# The library's PPO (chapter 7) computes its advantages with `rlbook.algos.ppo.gae`. The cell below
# swaps in yours for the length of one run (the policy loss stays the library's, so that a mistake in
# section 2 does not also cost you this section) and trains with the book's CartPole settings, stopping
# as soon as the average return of the last 20 episodes reaches 300. It must get there within 40 000
# environment steps. On two CPU cores this takes under half a minute; with a correct GAE it reaches the
# goal in about half the budget.
#
# Your `gae` returns only the advantages; the library's also returns the value targets
# (returns = advantages + values), so the cell wraps it.

# %% nbgrader={"grade": true, "grade_id": "test_ppo_cartpole", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
from unittest import mock

import rlbook.algos.ppo


def student_gae(rewards, values, next_values, terminated, truncated, gamma, gae_lambda):
    advantages = gae(rewards, values, next_values, terminated, truncated, gamma, gae_lambda)
    return advantages, advantages + values


with mock.patch.object(rlbook.algos.ppo, "gae", student_gae):
    history = rl.train_ppo(rl.PPOConfig(seed=0, total_env_steps=40_000, stop_at_return=300.0, stop_window=20),
                           progress=False)
returns = history.episode_returns
last20 = sum(returns[-20:]) / len(returns[-20:])
print(f"{len(returns)} episodes, {history.episode_end_steps[-1]} environment steps, "
      f"last-20 average return {last20:.0f}")
assert last20 >= 300, f"PPO did not reach an average return of 300 within 40 000 steps (got {last20:.0f})"
