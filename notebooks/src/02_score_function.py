# %% [markdown]
# # 2. The score function and the policy-gradient theorem
#
# **Goals.** By the end of this chapter you can
# * derive the *log-derivative trick* and say why it turns a gradient of an expectation into an
#   expectation we can sample;
# * write the softmax score $\nabla_z \log\pi = \mathbf{1}_a - \pi$ from memory, and know it is right
#   because we check it against autograd;
# * prove (and check by exact enumeration) that the score has mean zero — the fact behind every baseline;
# * state the policy-gradient theorem, and watch it hold *exactly* on a small MDP where $\nabla J$ can be
#   computed by enumerating every trajectory;
# * predict how the error of a Monte Carlo gradient shrinks with the number of samples: like $1/\sqrt N$.
#
# **Prerequisites.** Chapter 1 (policy, trajectory, $J(\theta)$; for §2.5 also the advantage $A^\pi$ of §1.6);
# the chain rule; expectations.
#
# **The problem.** $J(\theta) = \mathbb E_{\tau\sim p_\theta}[R(\tau)]$. The parameters sit *inside the
# sampling distribution*, and the reward is a black box (a physics simulator, a unit test, a human). We
# cannot backpropagate through "the pole fell" or "the answer was 4". We need a gradient that only asks
# for samples and rewards.

# %%
import inspect

import matplotlib.pyplot as plt
import numpy as np
import torch

import rlbook as rl

rl.seed_everything(0)
# figures at twice the pixel density (sharp when zoomed)
# %config InlineBackend.figure_formats = ["retina"]
torch.set_default_dtype(torch.float64)  # exact checks in this chapter
SIZE = rl.get_size()

# %% [markdown]
# ## 2.1 The log-derivative trick
#
# For any distribution $p_\theta(x)$ and any function $f$ that does not depend on $\theta$,
#
# $$\begin{aligned}\nabla_\theta\, \mathbb E_{x\sim p_\theta}[f(x)]
#   &= \sum_x f(x)\,\nabla_\theta p_\theta(x)
#   = \sum_x f(x)\,p_\theta(x)\,\nabla_\theta \log p_\theta(x)\cr
#   &= \mathbb E_{x\sim p_\theta}\big[f(x)\,\nabla_\theta \log p_\theta(x)\big].\end{aligned} \tag{2.1}$$
#
# The middle step is just $\nabla p = p\,\nabla\log p$ (the derivative of $\log$). The result is an
# expectation under the *same* distribution we sample from, so we can estimate it by averaging
# $f(x_i)\,\nabla_\theta\log p_\theta(x_i)$ over samples $x_i \sim p_\theta$. We never differentiate $f$.
#
# The vector $\nabla_\theta \log p_\theta(x)$ is called the **score function**. Intuitively it is the
# direction in parameter space that makes $x$ more likely; (2.1) says: *move towards the samples in
# proportion to how much reward they got.*
#
# ## 2.2 The softmax score in closed form
#
# Our policies end in a softmax over logits $z$: $\pi(a) = e^{z_a}/\sum_b e^{z_b}$, so
# $\log \pi(a) = z_a - \log\sum_b e^{z_b}$ and
#
# $$\frac{\partial \log\pi(a)}{\partial z_k} = \mathbf 1[k=a] - \pi(k), \qquad
#   \nabla_z \log\pi(a) = \mathbf{1}_a - \pi. \tag{2.2}$$
#
# Pushing up the sampled token's logit by $1-\pi(a)$ and every other logit down by its probability.
# The library's version (the code name is `softmax_score`):

# %%
print(inspect.getsource(rl.softmax_score))

# %% [markdown]
# **Check against autograd.** For a batch of random logits and actions, the closed form must equal the
# gradient PyTorch computes by differentiating `log_softmax`.

# %%
# NBVAL_CHECK_OUTPUT
gen = torch.Generator().manual_seed(0)
logits = torch.randn(6, 5, generator=gen, requires_grad=True)
actions = torch.randint(0, 5, (6,), generator=gen)
log_probs = torch.log_softmax(logits, -1).gather(-1, actions[:, None]).squeeze(-1)
autograd_score = torch.stack([torch.autograd.grad(log_probs[i], logits, retain_graph=True)[0][i] for i in range(6)])
closed_form = rl.softmax_score(logits.detach(), actions)
print("closed form == autograd (to 1e-12):", torch.allclose(closed_form, autograd_score, atol=1e-12))
assert torch.allclose(closed_form, autograd_score, atol=1e-12)

# %% [markdown]
# ## 2.3 The score has mean zero
#
# Take (2.1) with $f \equiv 1$: the left side is $\nabla_\theta 1 = 0$, so
#
# $$\mathbb E_{a\sim\pi_\theta}\big[\nabla_\theta \log\pi_\theta(a)\big] = 0. \tag{2.3}$$
#
# For the softmax, $\sum_a \pi(a)(\mathbf 1_a - \pi) = \pi - \pi = 0$. Let's see it on three tokens
# A, B, C with probabilities $[0.5, 0.3, 0.2]$, enumerating all three outcomes:

# %%
# NBVAL_CHECK_OUTPUT
pi = torch.tensor([0.5, 0.3, 0.2])
z = rl.SoftmaxBandit.logits_from_probs(pi)
total = torch.zeros(3)
for a, name in enumerate("ABC"):
    score = rl.softmax_score(z, torch.tensor(a))
    total += pi[a] * score
    print(f"token {name}: score {score.numpy().round(2)}   π·score {(pi[a] * score).numpy().round(2)}")
print("Σ_a π(a)·score(a) =", total.numpy().round(12))
assert torch.allclose(total, torch.zeros(3), atol=1e-12)

# %% [markdown]
# Each column cancels: the "make me more likely" push of a token is exactly balanced, on average, by the
# "make me less likely" pushes it receives when the *other* tokens are sampled.
#
# Why it matters: for any constant $b$ (or anything that does not depend on the sampled action),
# $\mathbb E[\nabla\log\pi\cdot b] = b\,\mathbb E[\nabla\log\pi] = 0$. So we may subtract a **baseline**
# from the reward without changing the expected gradient — only its variance. Chapter 3 exploits this.
#
# ## 2.4 A bandit: the exact gradient and its estimator
#
# A bandit is the one-step case: pick an arm $a\sim\pi_\theta$, receive a reward with mean $\bar r(a)$.
# Then $J(\theta)=\sum_a \pi_\theta(a)\bar r(a)$, and with (2.1)–(2.2)
#
# $$\nabla_\theta J = \sum_a \pi(a)\,\bar r(a)\,(\mathbf 1_a - \pi) = \pi \odot (\bar r - J). \tag{2.4}$$
#
# The arms that pay more than average get pushed up, weighted by how often they are played.
# Three ways to get the same vector: the closed form (2.4), autograd on $J$, and the score-function
# estimator $\frac1N\sum_i (\mathbf 1_{a_i}-\pi)\,r_i$ from samples. The first two agree to machine
# precision; the third agrees within its statistical error.

# %%
# NBVAL_CHECK_OUTPUT
bandit = rl.SoftmaxBandit(reward_means=[1.0, 0.0, 0.5], reward_std=0.5)
theta = z.clone().requires_grad_(True)
J = bandit.expected_return(theta)
(grad_autograd,) = torch.autograd.grad(J, theta)
grad_exact = bandit.exact_gradient(z)
N = rl.by_size(small=20_000, full=200_000)
samples = bandit.score_function_samples(z, N, generator=torch.Generator().manual_seed(1))
estimate, sem = samples.mean(0), samples.std(0) / N**0.5
print("J(θ)                 =", round(J.detach().item(), 4))
print("∇J closed form (2.4) =", grad_exact.numpy().round(4))
print("∇J autograd          =", grad_autograd.numpy().round(4))
print(f"∇J estimate, N={N}  =", estimate.numpy().round(3), "± s.e.", sem.numpy().round(3))
assert torch.allclose(grad_exact, grad_autograd, atol=1e-12)
assert ((estimate - grad_exact).abs() < 4 * sem).all()

# %% [markdown]
# ## 2.5 From actions to trajectories: the policy-gradient theorem
#
# Apply (2.1) with $x = \tau$ and $f = R$. By (1.2), $\log p_\theta(\tau) = \log\rho_0(s_0) + \sum_t \log\pi_\theta(a_t\mid s_t) + \sum_t \log P(s_{t+1}\mid s_t,a_t)$,
# and only the middle sum depends on $\theta$. The dynamics — which we do not know — **drop out**:
#
# $$\nabla_\theta J(\theta) = \mathbb E_{\tau\sim p_\theta}\Big[\sum_{t=0}^{T-1}\nabla_\theta\log\pi_\theta(a_t\mid s_t)\; R(\tau)\Big]. \tag{2.5}$$
#
# This is the **policy-gradient theorem** in its REINFORCE form (Williams, 1992). Every term is
# computable from a sampled episode: the log-probabilities of the actions we took, and the return we got.
# An equivalent form (Sutton et al., 2000) sums over states and actions with the discounted state
# occupancy $\rho_\pi(s) = \sum_t \gamma^t\,\Pr(s_t = s)$ and the advantage $A^\pi$ of §1.6:
# $\nabla_\theta J = \sum_s \rho_\pi(s)\sum_a \pi(a\mid s)\,\nabla_\theta\log\pi(a\mid s)\,A^\pi(s,a)$. With tabular softmax
# logits $\theta_{s,a}$ that is $\partial J/\partial\theta_{s,a} = \rho_\pi(s)\,\pi(a\mid s)\,A^\pi(s,a)$ (for an infinite horizon).
#
# **An exact check.** On a small MDP we can enumerate *every* trajectory with its probability and compute
# the expectation (2.5) as an exact sum. `rl.TabularMDP.chain` is a 4-state corridor: start on the left,
# the goal at the right end pays 1 and ends the episode, and pressing "left" at the start pays a small sure
# reward of 0.05 — a tempting local optimum. We use horizon $H = 6$ and $\gamma = 0.9$, and compare four
# computations of $\nabla J$:
#
# 1. autograd through the exact $J(\theta)$ (dynamic programming);
# 2. the enumeration sum $\sum_\tau p_\theta(\tau)\sum_t\nabla\log\pi(a_t|s_t)R(\tau)$ (2.5);
# 3. the same with rewards-to-go instead of $R(\tau)$ (Chapter 3 shows why that is allowed);
# 4. the occupancy × advantage form.

# %%
mdp = rl.TabularMDP.chain(length=4, gamma=0.9, horizon=6)
logits_mdp = torch.randn(4, 2, generator=torch.Generator().manual_seed(3))
print(inspect.getsource(rl.TabularMDP.exact_policy_gradient))

# %%
# NBVAL_CHECK_OUTPUT
theta = logits_mdp.clone().requires_grad_(True)
J_mdp = mdp.expected_return(theta)
(g_autograd,) = torch.autograd.grad(J_mdp, theta)
trajs, probs_tau = mdp.enumerate_trajectories(mdp.policy_probs(logits_mdp))
g_enum_total = mdp.exact_policy_gradient(logits_mdp, kind="total")
g_enum_rtg = mdp.exact_policy_gradient(logits_mdp, kind="rewards_to_go")
g_occupancy = mdp.policy_gradient_theorem(logits_mdp)
print(f"J(θ) = {J_mdp.detach().item():.6f};  {len(probs_tau)} trajectories, Σ p(τ) = {float(probs_tau.sum()):.12f}")
print("∇J (autograd):\n", g_autograd.numpy().round(6))
for name, g in [("enumeration, R(τ)", g_enum_total), ("enumeration, rewards-to-go", g_enum_rtg),
                ("occupancy × advantage", g_occupancy)]:
    print(f"{name:>26} == autograd (to 1e-12): {torch.allclose(g, g_autograd, atol=1e-12)}")
    assert torch.allclose(g, g_autograd, atol=1e-12)

# %% [markdown]
# All four agree to machine precision (the check allows $10^{-12}$; the largest difference is printed at the
# end of the chapter): the theorem is not an approximation. What *is* approximate is using a
# few sampled trajectories instead of all of them.
#
# ## 2.6 Monte Carlo error shrinks like $1/\sqrt N$
#
# The REINFORCE estimator averages the per-episode terms $g(\tau_i)=\sum_t\nabla\log\pi(a_t|s_t)R(\tau_i)$. They
# are i.i.d. with mean $\nabla J$ and some covariance $\Sigma$, so the average of $N$ of them has
# $\mathbb E\|\hat g_N - \nabla J\|^2 = \operatorname{tr}\Sigma / N$: the root-mean-square error falls like
# $1/\sqrt N$. Ten times more episodes buy only about three times more accuracy. We measure it: for each
# $N$, repeat the estimate many times and average the squared error against the exact gradient.
#
# For this experiment we use a random 3-state MDP that pays a reward at *every* step (the corridor pays
# only at the goal, where rewards-to-go and the full return are nearly the same thing). Its exact gradient
# comes from autograd through the exact $J$.

# %%
Ns = rl.by_size(small=[4, 16, 64, 256, 1024], full=[4, 16, 64, 256, 1024, 4096, 16384])
REPEATS = rl.by_size(small=64, full=256)
dense = rl.TabularMDP.random(num_states=3, num_actions=2, gamma=0.9, horizon=8, seed=4)
logits_dense = torch.randn(3, 2, generator=torch.Generator().manual_seed(5))
theta = logits_dense.clone().requires_grad_(True)
(g_dense,) = torch.autograd.grad(dense.expected_return(theta), theta)
gen = torch.Generator().manual_seed(7)
rmse = {"R(τ)": [], "rewards-to-go": []}
for kind, key in [("total", "R(τ)"), ("rewards_to_go", "rewards-to-go")]:
    for n in Ns:
        g_samples = dense.score_function_samples(logits_dense, n * REPEATS, generator=gen, kind=kind)
        estimates = g_samples.reshape(REPEATS, n, 3, 2).mean(1)
        rmse[key].append(float(((estimates - g_dense) ** 2).sum((1, 2)).mean().sqrt()))

# %%
# NBVAL_CHECK_OUTPUT
for key, errs in rmse.items():
    slope = np.polyfit(np.log(Ns), np.log(errs), 1)[0]
    print(f"{key:>14}: RMSE {np.round(errs, 4)}  log-log slope {slope:.2f}")
    assert -0.6 < slope < -0.4, "the error should fall like N^(-1/2)"
assert all(r < t for r, t in zip(rmse["rewards-to-go"], rmse["R(τ)"]))

# %%
fig, ax = plt.subplots(figsize=(5, 3.2), dpi=80)
rl.plot_mc_error(Ns, rmse["R(τ)"], ax=ax, label="REINFORCE with R(τ)")
ax.loglog(Ns, rmse["rewards-to-go"], "s-", label="with rewards-to-go")
ax.legend(fontsize=9)
ax.set_xlabel("episodes per estimate N")
ax.set_ylabel("root-mean-square error")
ax.set_title("error of the score-function gradient estimate");

# %% [markdown]
# Both lines have slope $-\tfrac12$ on the log-log plot. The rewards-to-go line sits lower at every $N$:
# same expectation, smaller variance. That gap — and how to widen it — is the subject of Chapter 3.
#
# ## 2.7 Baselines do not bias: an exact check
#
# (2.3) says any baseline $b$ that does not depend on the action leaves the expected gradient unchanged.
# On the MDP we can check this by enumeration for several values of $b$: the exact expectation of
# $\sum_t\nabla\log\pi(a_t|s_t)(R(\tau)-b)$ is the same for all of them.

# %%
# NBVAL_CHECK_OUTPUT
pi_mdp = mdp.policy_probs(logits_mdp)
for b in [0.0, 0.5, 10.0]:
    g_b = torch.einsum("n,nsa->sa", probs_tau, mdp.trajectory_gradients(logits_mdp, trajs, "total", baseline=b))
    print(f"b = {b:5.1f}: E[g_b] == ∇J (to 1e-12): {torch.allclose(g_b, g_autograd, atol=1e-12)}")
    assert torch.allclose(g_b, g_autograd, atol=1e-12)

# %% [markdown]
# ## 2.8 Continuous actions: the Gaussian score
#
# For a continuous action $a\sim\mathcal N(\mu, \sigma^2)$ per dimension (a diagonal Gaussian policy, with
# $\mu$ and $\log\sigma$ output by a network), the score has a closed form too:
#
# $$\frac{\partial\log\pi}{\partial\mu} = \frac{a-\mu}{\sigma^2}, \qquad
#   \frac{\partial\log\pi}{\partial\log\sigma} = \frac{(a-\mu)^2}{\sigma^2} - 1. \tag{2.6}$$
#
# Samples above the mean pull $\mu$ up; samples far from the mean (in units of $\sigma$) widen the policy.
# Again we check against autograd.

# %%
# NBVAL_CHECK_OUTPUT
gen = torch.Generator().manual_seed(2)
mean = torch.randn(5, 3, generator=gen, requires_grad=True)
log_std = (0.3 * torch.randn(5, 3, generator=gen)).requires_grad_(True)
a = mean.detach() + log_std.detach().exp() * torch.randn(5, 3, generator=gen)
logp = torch.distributions.Normal(mean, log_std.exp()).log_prob(a).sum()
d_mean, d_log_std = torch.autograd.grad(logp, (mean, log_std))
s_mean, s_log_std = rl.gaussian_score(mean.detach(), log_std.detach(), a)
print("∂/∂μ and ∂/∂logσ match autograd (to 1e-12):",
      torch.allclose(s_mean, d_mean, atol=1e-12) and torch.allclose(s_log_std, d_log_std, atol=1e-12))
assert torch.allclose(s_mean, d_mean, atol=1e-12) and torch.allclose(s_log_std, d_log_std, atol=1e-12)

# %%
rl.report_headline(f"policy-gradient theorem exact to {max((g - g_autograd).abs().max() for g in [g_enum_total, g_enum_rtg, g_occupancy]):.0e}; MC error slope {np.polyfit(np.log(Ns), np.log(rmse['R(τ)']), 1)[0]:.2f}")

# %% [markdown]
# ## Summary
#
# * The log-derivative trick (2.1) turns $\nabla\mathbb E_{p_\theta}[f]$ into $\mathbb E_{p_\theta}[f\,\nabla\log p_\theta]$:
#   a gradient we can estimate from samples, without differentiating the reward.
# * The softmax score is $\mathbf 1_a - \pi$ (2.2); the Gaussian score is (2.6). Both checked against autograd.
# * The score has mean zero (2.3) — checked on $[0.5, 0.3, 0.2]$ — so action-independent baselines add no bias.
# * The dynamics drop out of $\nabla\log p_\theta(\tau)$, giving the policy-gradient theorem (2.5). On a small MDP,
#   enumeration, rewards-to-go and the occupancy × advantage form all equal autograd's $\nabla J$ exactly.
# * Monte Carlo gradients have error $\propto 1/\sqrt N$; variance, not bias, is the practical enemy.
#
# ## Exercises
#
# 1. *(Coded.)* Write `my_softmax_score(logits, actions)` without autograd, then run
#    `rl.exercises.check("softmax_score", my_softmax_score)`.
# 2. *(Derivation.)* Derive (2.6). Then show that $\mathbb E[(a-\mu)^2/\sigma^2 - 1] = 0$ — the Gaussian score has mean
#    zero too.
# 3. *(Bandit.)* For the bandit above, which arm's logit has the largest gradient component, and why is it not
#    simply the best arm? Change the policy to $[0.05, 0.9, 0.05]$ and predict the gradient before computing it.
# 4. *(Variance.)* Using `bandit.estimator_variance(z, baseline=b)` over a grid of $b$, find the variance-minimising
#    baseline and compare with `bandit.exact_optimal_baseline(z)`. Is it the mean reward $J$?
# 5. *(Occupancy.)* Set `horizon=None` in the chain MDP (infinite horizon, $\gamma = 0.9$). Which of the four
#    gradient computations still work? Why does enumeration not?
# 6. *(Think.)* The estimator (2.5) multiplies *every* action's score by the *whole* return, including rewards
#    received before the action. Argue that the past rewards contribute zero in expectation, but not zero in
#    each sample.

# %% [markdown] tags=["solution"] jp-MarkdownHeadingCollapsed=true
# ## Solutions

# %% [markdown] tags=["solution"]
# ### Solution to exercise 1
#
# (2.2) in code: a one-hot row for the sampled action minus the softmax probabilities.

# %% tags=["solution"]
def my_softmax_score(logits, actions):
    """(B, A): ∇_z log softmax(z)[a] = onehot(a) − softmax(z), row by row."""
    onehot = torch.nn.functional.one_hot(actions, logits.shape[-1]).to(logits.dtype)
    return onehot - torch.softmax(logits, dim=-1)


rl.exercises.check("softmax_score", my_softmax_score);

# %% [markdown] tags=["solution"]
# ### Solution to exercise 2
#
# Per dimension, $\log\pi(a) = -\frac{(a-\mu)^2}{2\sigma^2} - \log\sigma - \tfrac12\log 2\pi$. Differentiating in
# $\mu$ gives $(a-\mu)/\sigma^2$. Write $\ell = \log\sigma$, so $\sigma^{-2} = e^{-2\ell}$:
# $\frac{\partial}{\partial\ell}\big[-\tfrac12(a-\mu)^2e^{-2\ell} - \ell\big] = (a-\mu)^2e^{-2\ell} - 1 = \frac{(a-\mu)^2}{\sigma^2} - 1$,
# which is (2.6). Under $a\sim\mathcal N(\mu,\sigma^2)$, $(a-\mu)/\sigma$ is standard normal, so
# $\mathbb E[(a-\mu)^2/\sigma^2] = 1$ and the $\log\sigma$ score has mean $1 - 1 = 0$; the $\mu$ score has mean 0 by
# symmetry. The cell checks both by sampling.

# %% tags=["solution"]
gen_ex = torch.Generator().manual_seed(3)
mu_ex, log_std_ex = torch.tensor([0.5]), torch.tensor([-0.3])
a_ex = mu_ex + log_std_ex.exp() * torch.randn(100_000, 1, generator=gen_ex)
for name, sc in zip(["∂/∂μ", "∂/∂logσ"], rl.gaussian_score(mu_ex, log_std_ex, a_ex)):
    z_ex = float(sc.mean() / (sc.std() / len(sc) ** 0.5))
    print(f"mean of the {name} score: {float(sc.mean()):+.4f}  ({z_ex:+.2f} standard errors from 0)")
    assert abs(z_ex) < 4

# %% [markdown] tags=["solution"]
# ### Solution to exercise 3
#
# By (2.4) the component of arm $a$ is $\pi(a)\,(\bar r(a) - J)$: how much better than average the arm is,
# *times how often it is played*. With $\pi = [0.5, 0.3, 0.2]$ and $\bar r = [1, 0, 0.5]$, $J = 0.6$ and
# $\nabla J = [0.2, -0.18, -0.02]$: arm A has the largest component, and it is also the best arm, but arm B is
# close behind with a *negative* component. With $\pi = [0.05, 0.9, 0.05]$, $J = 0.075$ and
# $\nabla J = [0.04625, -0.0675, 0.02125]$: the largest component (in size) now belongs to the *worst* arm B,
# pushed down because it is played 90% of the time; the best arm A is rarely sampled, so its logit moves
# slowly. Policy gradients act on what the policy does, which is why a policy stuck on a bad action can be
# slow to discover a good one.

# %% tags=["solution"]
# NBVAL_CHECK_OUTPUT
for pi_ex in ([0.5, 0.3, 0.2], [0.05, 0.9, 0.05]):
    z_ex = rl.SoftmaxBandit.logits_from_probs(torch.tensor(pi_ex))
    print(f"π = {pi_ex}: J = {float(bandit.expected_return(z_ex)):.4f}, ∇J = {bandit.exact_gradient(z_ex).numpy().round(5)}")

# %% [markdown] tags=["solution"]
# ### Solution to exercise 4
#
# The variance is a quadratic in $b$, and the grid minimum lands on `exact_optimal_baseline` (up to the grid
# spacing). It is *not* the mean reward $J$: the optimal constant weights each arm's reward by the squared
# norm of its score, $\|\mathbf 1_a - \pi\|^2$, which is largest for rarely played arms (the derivation is
# exercise 2 of Chapter 3).

# %% tags=["solution"]
# NBVAL_CHECK_OUTPUT
b_grid = torch.linspace(-1.0, 2.0, 3001)
variances = torch.stack([bandit.estimator_variance(z, baseline=float(b)) for b in b_grid])
b_best = float(b_grid[variances.argmin()])
b_star = float(bandit.exact_optimal_baseline(z))
print(f"grid minimum b = {b_best:.3f};  exact b* = {b_star:.3f};  J = {float(bandit.expected_return(z)):.3f}")
assert abs(b_best - b_star) < 2e-3

# %% [markdown] tags=["solution"]
# ### Solution to exercise 5
#
# With `horizon=None` the exact $J$ comes from the linear solve (1.15), so autograd through it still works, and
# so does the occupancy × advantage form (the occupancy is another linear solve). Enumeration does not:
# without a horizon, episodes that wander left and right have no maximum length, so there are infinitely many
# trajectories, and `enumerate_trajectories` refuses. (The rewards-to-go enumeration fails for the same
# reason.)

# %% tags=["solution"]
# NBVAL_CHECK_OUTPUT
mdp_inf = rl.TabularMDP.chain(length=4, gamma=0.9, horizon=None)
theta_inf = logits_mdp.clone().requires_grad_(True)
(g_inf,) = torch.autograd.grad(mdp_inf.expected_return(theta_inf), theta_inf)
print("autograd == occupancy × advantage (to 1e-12):",
      torch.allclose(g_inf, mdp_inf.policy_gradient_theorem(logits_mdp), atol=1e-12))
try:
    mdp_inf.exact_policy_gradient(logits_mdp)
except ValueError as err:
    print("enumeration:", err)

# %% [markdown] tags=["solution"]
# ### Solution to exercise 6
#
# Split $R(\tau) = \sum_{t'<t}\gamma^{t'}r_{t'} + \sum_{t'\ge t}\gamma^{t'}r_{t'}$ in the term of action $a_t$. The
# rewards before $t$ are fixed once we know the history up to $s_t$, and given that history
# $\mathbb E_{a_t}[\nabla\log\pi(a_t\mid s_t)] = 0$ by (2.3); so each past reward contributes zero in
# expectation (this is (3.3) in Chapter 3). In a single episode, though, the score of the sampled $a_t$ is not
# zero, and multiplying it by the past rewards adds a random term: pure noise. The cell computes this "past
# rewards" part of every trajectory's estimate on the corridor MDP of §2.5: its probability-weighted mean is
# 0, its mean squared norm is not.

# %% tags=["solution"]
# NBVAL_CHECK_OUTPUT
past = mdp.trajectory_gradients(logits_mdp, trajs, "total") - mdp.trajectory_gradients(logits_mdp, trajs, "rewards_to_go")
mean_past = torch.einsum("n,nsa->sa", probs_tau, past)
print(f"past-rewards term: E[·] == 0 (to 1e-12): {float(mean_past.abs().max()) < 1e-12};  "
      f"E‖·‖² = {float((probs_tau * (past ** 2).sum((1, 2))).sum()):.4f}")
assert float(mean_past.abs().max()) < 1e-12

