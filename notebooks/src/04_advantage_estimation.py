# %% [markdown]
# # 4. Advantage estimation: TD errors, n-step returns and GAE
#
# **Goals.** By the end of this chapter you can
# * say why a policy gradient wants the *advantage* $A^\pi(s,a) = Q^\pi(s,a) - V^\pi(s)$ and why we can
#   only ever *estimate* it from one trajectory;
# * write the TD error $\delta_t$, the $n$-step advantage and generalized advantage estimation (GAE) as
#   sums of TD errors, and derive the backward recursion $\hat A_t = \delta_t + \gamma\lambda\hat A_{t+1}$;
# * treat the two ways an episode can stop — *terminated* and *truncated* — correctly, and see the bias
#   when they are confused;
# * measure, on a small MDP where every true value is known exactly, how $\lambda$ and $n$ trade bias
#   against variance.
#
# **Prerequisites.** Returns, the value functions $V^\pi$, $Q^\pi$, $A^\pi$, the Bellman equations and
# TD(0) (§1.6–§1.8); chapters 2–3 (the policy gradient and baselines).
#
# **The problem.** The policy gradient $\nabla J = \mathbb E\big[\sum_t \gamma^t A^\pi(s_t,a_t)\,\nabla\log\pi(a_t|s_t)\big]$
# needs, for each action taken, a number saying *how much better than usual* that action was. The true
# $A^\pi$ is an expectation over all futures; a rollout gives us one future. Whatever we plug in is an
# estimator, and its bias and variance become the bias and variance of the gradient.

# %%
import inspect

import matplotlib.pyplot as plt
import numpy as np
import torch
from tqdm.auto import tqdm

import rlbook as rl

rl.seed_everything(0)
# figures at twice the pixel density (sharp when zoomed)
# %config InlineBackend.figure_formats = ["retina"]
torch.set_num_threads(1)
torch.set_default_dtype(torch.float64)  # exact checks in this chapter
SIZE = rl.get_size()

# %% [markdown]
# ## 4.1 One-step: the TD error
#
# Write $r_t$ for the reward received after taking $a_t$ in $s_t$, and $V$ for some state-value
# function (a *critic*). The **TD error** is
#
# $$\delta_t = r_t + \gamma\,V(s_{t+1}) - V(s_t). \tag{4.1}$$
#
# If $V = V^\pi$ exactly, then $\mathbb E[r_t + \gamma V^\pi(s_{t+1}) \mid s_t, a_t] = Q^\pi(s_t,a_t)$, so
#
# $$\mathbb E[\delta_t \mid s_t, a_t] = Q^\pi(s_t,a_t) - V^\pi(s_t) = A^\pi(s_t,a_t). \tag{4.2}$$
#
# One reward of randomness: low variance. But a real critic is wrong, and then $\delta_t$ inherits the
# critic's error through $V(s_{t+1})$ — bias.
#
# ## 4.2 n steps: trade the critic for rewards
#
# Use $n$ real rewards before trusting the critic:
#
# $$\hat A^{(n)}_t = \sum_{l=0}^{n-1}\gamma^l r_{t+l} + \gamma^n V(s_{t+n}) - V(s_t)
#   = \sum_{l=0}^{n-1}\gamma^l\,\delta_{t+l}. \tag{4.3}$$
#
# The second form follows by *telescoping*: in $\sum_l \gamma^l(r_{t+l} + \gamma V(s_{t+l+1}) - V(s_{t+l}))$
# every intermediate $V$ appears once with $+$ and once with $-$. Larger $n$: the critic's error is
# discounted by $\gamma^n$ (less bias), but $n$ random rewards add up (more variance). $n=\infty$ is the
# Monte Carlo return minus the baseline $V(s_t)$: unbiased for any critic, noisiest.
#
# ## 4.3 GAE: average over every n
#
# Rather than choosing one $n$, take an exponentially weighted average with weights $(1-\lambda)\lambda^{n-1}$:
#
# $$\hat A^{\mathrm{GAE}(\gamma,\lambda)}_t = (1-\lambda)\sum_{n\ge1}\lambda^{n-1}\hat A^{(n)}_t
#   = \sum_{l\ge 0}(\gamma\lambda)^l\,\delta_{t+l}. \tag{4.4}$$
#
# (Substitute (4.3) and swap the sums: $\delta_{t+l}$ appears in every $\hat A^{(n)}$ with $n>l$, with total
# weight $(1-\lambda)\sum_{n>l}\lambda^{n-1}\gamma^l = (\gamma\lambda)^l$.) Two limits: $\lambda=0$ gives
# $\delta_t$; $\lambda=1$ gives $\sum_l\gamma^l\delta_{t+l}$ = Monte Carlo return $- V(s_t)$. Splitting off
# the first term of (4.4) gives a **backward recursion** that computes all $T$ advantages in one pass:
#
# $$\hat A_t = \delta_t + \gamma\lambda\,\hat A_{t+1}, \qquad \hat A_T = 0. \tag{4.5}$$
#
# The value-function target is $\hat R_t = \hat A_t + V(s_t)$ (the "TD($\lambda$) return").
#
# ## 4.4 Where episodes end: terminated vs truncated
#
# A rollout of $T$ steps crosses episode boundaries, and they come in two kinds:
#
# | the episode... | `terminated` | `truncated` | next value in $\delta_t$ | recursion (4.5) |
# |---|---|---|---|---|
# | reached a terminal state (the pole fell) | True | – | $0$: nothing follows | cut |
# | was stopped by a time limit (or the rollout ended) | False | True | $V(\text{final obs})$ — the future still exists | cut |
# | continues | False | False | $V(s_{t+1})$ | continues |
#
# So with $\text{done}_t = \text{terminated}_t \lor \text{truncated}_t$:
# $\delta_t = r_t + \gamma(1-\text{terminated}_t)V(s_{t+1}) - V(s_t)$ and
# $\hat A_t = \delta_t + \gamma\lambda(1-\text{done}_t)\hat A_{t+1}$. `next_values[t]` holds $V(s_{t+1})$, and
# at a truncation the value of the *final observation* (not of the reset state that a vector environment
# already returned). Treating a truncation as a termination pretends the future is worth 0 — a bias we
# will measure in §4.7.

# %% [markdown]
# ## 4.5 The code
#
# | symbol | code | shape |
# |---|---|---|
# | $r_t$ | `rewards` | `(..., T)` |
# | $V(s_t)$, $V(s_{t+1})$ | `values`, `next_values` | `(..., T)` |
# | terminated / truncated | `terminated`, `truncated` | `(..., T)` bool |
# | $\gamma$, $\lambda$, $n$ | `gamma`, `gae_lambda`, `n` | floats / int |
# | $\delta_t$, $\hat A_t$, $\hat R_t$ | `td_errors(...)`, `gae(...)[0]`, `gae(...)[1]` | `(..., T)` |

# %%
print(inspect.getsource(rl.td_errors).split('"""')[0] + "...docstring...\n" + inspect.getsource(rl.td_errors).split('"""')[2])

# %%
src = inspect.getsource(rl.gae)
print(src.split('"""')[0] + "...docstring...\n" + src.split('"""')[2])

# %% [markdown]
# The loop runs backwards over time and is vectorised over every leading (batch) dimension. `carry`
# is $\gamma\lambda(1-\text{done}_t)$. The library's `n_step_returns` sums (4.3) directly, stopping at the
# first episode end. Now a check: a hand-worked trajectory of four steps with one termination and one
# truncation, computed three ways — the library's recursion (4.5), a naive explicit sum (4.4) written
# below, and the loop oracle in `rl.reference`.
#
# Steps 0–1 are one episode, terminated after step 1; step 2 is an episode cut by a time limit whose
# final observation has $V = 10$; step 3 is still running when the rollout ends, $V(s_4) = 2$.
# With $\gamma = \lambda = 0.5$ and $V(s_t) = 0.5$ everywhere:
# $\delta = [1 + 0.25 - 0.5,\; 2 + 0 - 0.5,\; 3 + 5 - 0.5,\; 4 + 1 - 0.5] = [0.75, 1.5, 7.5, 4.5]$ and
# $\hat A_0 = 0.75 + 0.25\cdot1.5 = 1.125$; the other three have nothing after them in their episode.

# %%
# NBVAL_CHECK_OUTPUT
def naive_gae_explicit_sum(rewards, values, next_values, terminated, truncated, gamma, gae_lambda):
    """Eq. (4.4) literally: for each t, sum (γλ)^l δ_{t+l} until the step that ends the episode."""
    deltas = rewards + gamma * (~terminated) * next_values - values
    out = []
    for t in range(len(rewards)):
        total = 0.0
        for l, k in enumerate(range(t, len(rewards))):
            total += (gamma * gae_lambda) ** l * float(deltas[k])
            if terminated[k] or truncated[k]:
                break
        out.append(total)
    return torch.tensor(out)


hand = dict(
    rewards=torch.tensor([1.0, 2.0, 3.0, 4.0]),
    values=torch.full((4,), 0.5),
    next_values=torch.tensor([0.5, 99.0, 10.0, 2.0]),  # 99 after a termination must be ignored
    terminated=torch.tensor([False, True, False, False]),
    truncated=torch.tensor([False, False, True, False]),
)
adv, ret = rl.gae(**hand, gamma=0.5, gae_lambda=0.5)
print("library recursion (4.5):", adv.tolist())
print("naive explicit sum (4.4):", naive_gae_explicit_sum(**hand, gamma=0.5, gae_lambda=0.5).tolist())
print("reference loop oracle:  ", rl.reference.gae_loop(*hand.values(), 0.5, 0.5)[0])
print("returns = A + V:        ", ret.tolist())
print("λ=0 equals TD errors:   ", torch.equal(rl.gae(**hand, gamma=0.5, gae_lambda=0.0)[0],
                                              rl.td_errors(*list(hand.values())[:4], gamma=0.5)))
print("n-step with n ≥ T equals the λ=1 return:",
      torch.allclose(rl.n_step_returns(**hand, gamma=0.5, n=10), rl.gae(**hand, gamma=0.5, gae_lambda=1.0)[1]))
assert torch.allclose(adv, torch.tensor([1.125, 1.5, 7.5, 4.5]))

# %% [markdown]
# ## 4.6 Bias and variance on an MDP we can solve exactly
#
# To *measure* bias we need the truth. `rl.TabularMDP` computes $V^\pi$ and $Q^\pi$ exactly by solving
# the Bellman equations. We build a random 6-state, 3-action MDP with $\gamma = 0.95$ and add a terminal
# state that every step reaches with probability 3% — so a rollout of $T = 40$ steps sees both
# terminations (about 70% of episodes) and truncations at $T$.
#
# The estimators all estimate $Q^\pi(s_0,a_0)$ through the return $\hat R_0 = \hat A_0 + V(s_0)$ (the
# advantage is that minus a fixed number, so it has the same bias and variance). For each
# $(s_0, a_0)$ pair we compute the sample mean and variance of $\hat R_0$ across rollouts, then
#
# $$\text{bias}^2 = \sum_{s,a} w_{s,a}\Big(\big(\overline{R}_{s,a} - Q^\pi(s,a)\big)^2 - \tfrac{\widehat{\mathrm{Var}}_{s,a}}{n_{s,a}}\Big),
#   \qquad \text{variance} = \sum_{s,a} w_{s,a}\widehat{\mathrm{Var}}_{s,a},$$
#
# with $w$ the share of rollouts starting with that pair. (Subtracting $\widehat{\mathrm{Var}}/n$ removes the
# part of the squared error of a sample mean that is just its own noise.)

# %%
base = rl.TabularMDP.random(6, 3, gamma=0.95, horizon=None, seed=0)
S, A = 7, 3
P = torch.zeros(S, A, S)
P[:6, :, :6] = 0.97 * base.transitions  # keep going...
P[:6, :, 6] = 0.03  # ...or end the episode
P[6, :, 6] = 1.0
R = torch.zeros(S, A)
R[:6] = base.rewards
mdp = rl.TabularMDP(P, R, torch.cat([base.initial_dist, torch.zeros(1)]), gamma=0.95, horizon=None,
                    terminal=torch.arange(S) == 6)
gen = torch.Generator().manual_seed(1)
probs = torch.softmax(torch.randn(S, A, generator=gen), -1)  # the policy we evaluate
V_true, Q_true = mdp.state_values(probs), mdp.action_values(probs)

T = 40
N = rl.by_size(small=20_000, full=200_000)
traj = mdp.sample_trajectories(probs, N, horizon=T + 1, generator=2)  # one extra step to see s_T
states, actions = traj.states, traj.actions[:, :T]
rewards, terminated, alive = traj.rewards[:, :T], traj.terminated[:, :T], traj.mask[:, :T]
truncated = torch.zeros_like(terminated)
truncated[:, -1] = True  # the rollout stops at T: bootstrap from V(s_T)


def rollout_values(critic):
    """values (N, T) = critic(s_t) and next_values (N, T) = critic(s_{t+1}) for the sampled rollouts."""
    return critic[states[:, :T]], critic[states[:, 1 : T + 1]]


def bias2_and_variance(estimates, t=0):
    """Occupancy-weighted squared bias (noise-corrected) and variance of estimates[:, t] of Q(s_t, a_t)."""
    keep = alive[:, t]
    key, x = (states[:, t] * A + actions[:, t])[keep], estimates[keep, t]
    count = torch.bincount(key, minlength=S * A).double()
    mean = torch.zeros(S * A).scatter_add(0, key, x) / count.clamp(min=1)
    var = torch.zeros(S * A).scatter_add(0, key, x * x) / count.clamp(min=1) - mean**2
    w, ok = count / count.sum(), count > 1
    bias2 = (w * ((mean - Q_true.flatten()) ** 2 - var / count.clamp(min=1)))[ok].sum()
    return float(bias2), float((w * var)[ok].sum()), mean, var, count


print(f"episodes terminated within T: {float(terminated.any(1).double().mean()):.2f}, "
      f"mean length {float(alive.sum(1).double().mean()):.1f} steps; V^π ranges {V_true[:6].min():.2f}..{V_true[:6].max():.2f}")
rl.claim("about 70% of episodes", terminated.any(1).double().mean(), 0.7, abs=0.03)

# %% [markdown]
# **With the exact critic every estimator is unbiased** — (4.2) for $\lambda = 0$, and (4.4) is a sum of
# such terms, each with conditional mean $\gamma^l\,\mathbb E[A^\pi(s_{t+l},a_{t+l})] = 0$ for $l \ge 1$. We check it:
# for every $\lambda$, every $(s_0,a_0)$ pair's mean return lies within 4 standard errors of $Q^\pi$. We
# test only pairs seen at least 300 times: among a few dozen rollouts the 3% chance of terminating
# may never occur, and then the sample variance misses exactly the outcome that moves the mean.

# %%
# NBVAL_CHECK_OUTPUT
values, next_values = rollout_values(V_true)
worst_z = {}
for lam in [0.0, 0.5, 0.9, 1.0]:
    _, ret = rl.gae(rewards, values, next_values, terminated, truncated, 0.95, lam)
    _, _, mean, var, count = bias2_and_variance(ret)
    ok = count >= 300
    z = (mean - Q_true.flatten())[ok] / (var[ok] / count[ok]).sqrt()
    worst_z[lam] = float(z.abs().max())
print("largest |z| over (s0, a0) pairs, per λ, below 4:", {k: bool(v < 4) for k, v in worst_z.items()})
assert max(worst_z.values()) < 4

# %% [markdown]
# Now give the critic an error: $V = V^\pi + \sigma\,\varepsilon$ with a fixed $\varepsilon(s)\sim\mathcal N(0,1)$ per
# state and $\sigma = 2$ (about 40% of $V^\pi$). This is the realistic case — a learned critic is never
# exact. We sweep $\lambda$ for GAE and $n$ for $n$-step returns.

# %%
sigma = 2.0
critic = V_true + sigma * torch.randn(S, generator=torch.Generator().manual_seed(3))
rl.claim("about 40% of $V^\\pi$", sigma / V_true[:6].mean(), 0.4, rel=0.15)
values, next_values = rollout_values(critic)
lambdas = [0.0, 0.2, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.98, 1.0]
ns = [1, 2, 3, 5, 8, 12, 20, 40]
gae_stats = {lam: bias2_and_variance(rl.gae(rewards, values, next_values, terminated, truncated, 0.95, lam)[1])[:2]
             for lam in tqdm(lambdas, desc="GAE λ")}
nstep_stats = {n: bias2_and_variance(rl.n_step_returns(rewards, values, next_values, terminated, truncated, 0.95, n))[:2]
               for n in tqdm(ns, desc="n-step")}

# %%
# NBVAL_CHECK_OUTPUT
print(" λ     bias²   var     MSE")
for lam, (b2, v) in gae_stats.items():
    print(f"{lam:4.2f}  {b2:6.3f}  {v:6.3f}  {b2 + v:6.3f}")
print(" n     bias²   var     MSE")
for n, (b2, v) in nstep_stats.items():
    print(f"{n:4d}  {b2:6.3f}  {v:6.3f}  {b2 + v:6.3f}")
best_lam = min(gae_stats, key=lambda k: sum(gae_stats[k]))
best_n = min(nstep_stats, key=lambda k: sum(nstep_stats[k]))
print(f"lowest MSE: GAE λ={best_lam}, n-step n={best_n}")

# %%
fig, axes = plt.subplots(1, 2, figsize=(8.4, 3.6), dpi=80)
ax = axes[0]
b2, v = np.array([gae_stats[k] for k in lambdas]).T
ax.plot(b2, v, "o-", label="GAE: λ = 0 (right) ... 1 (left)")
for lam, x, y in zip(lambdas, b2, v):
    if lam in (0.0, 0.5, 0.9, 1.0):
        ax.annotate(f"λ={lam:g}", (x, y), textcoords="offset points", xytext=(5, 4), fontsize=9)
b2n, vn = np.array([nstep_stats[k] for k in ns]).T
ax.plot(b2n, vn, "s--", label="n-step: n = 1 (right) ... 40 (left)")
for n, x, y in zip(ns, b2n, vn):
    if n in (1, 3, 40):
        ax.annotate(f"n={n}", (x, y), textcoords="offset points", xytext=(5, -10), fontsize=9)
ax.set_xlabel("squared bias")
ax.set_ylabel("variance")
ax.set_title("estimating Q(s0, a0) with a noisy critic", fontsize=9)
ax.legend(fontsize=9)
ax = axes[1]
ax.plot(lambdas, b2, label="squared bias")
ax.plot(lambdas, v, label="variance")
ax.plot(lambdas, b2 + v, "k", lw=2, label="mean squared error")
ax.set_xlabel("GAE λ")
ax.set_ylabel("squared error of the estimate")
ax.set_title(f"GAE, γ = 0.95, critic error σ = {sigma:g}", fontsize=9)
ax.legend(fontsize=9)
fig.tight_layout();

# %% [markdown]
# Reading the plots: at $\lambda=0$ the estimate leans entirely on the critic at $s_1$, so it carries
# most of the critic's error as bias. As $\lambda \to 1$ the critic is consulted later and later, its
# error is discounted away, and the random rewards pile up: at $\lambda=1$ the bias is gone (up to the
# $\gamma^T$ bootstrap at the truncation) and the variance is largest. One surprise: the variance is
# *not* smallest at $\lambda = 0$. A critic that is wrong by different amounts in different states turns
# the randomness of $s_1$ into extra variance; mixing in later steps averages that out. For every
# level of bias, GAE reaches a lower variance than the $n$-step family — averaging over all horizons
# beats committing to one. The best $\lambda$ depends on how wrong the critic is: with the exact critic
# (previous check) $\lambda = 0$ would win outright, as it is unbiased and least noisy. PPO's usual
# $\lambda = 0.95$ reflects critics that are far from exact early in training and policy gradients that
# tolerate variance better than bias.

# %% [markdown]
# ### Explore: the trade-off without sampling noise
#
# On a tabular MDP the table above need not be simulated. The λ-return obeys its own Bellman
# equation, $R^\lambda_t = r_t + \gamma\big[(1-\lambda)V(s_{t+1}) + \lambda R^\lambda_{t+1}\big]$ (a
# rearrangement of (4.4)), so its mean given $(s_0, a_0)$ solves one linear system and its second moment
# another; bias² and variance follow exactly, for episodes that run until they terminate. The explorer
# below draws them for any $\lambda$, $\gamma$ and critic error $\sigma$ (the same MDP, policy and error
# direction $\varepsilon$ as above). Things to try: set $\sigma = 0$ and watch the bias vanish for every
# $\lambda$; raise $\sigma$ and watch the best $\lambda$ move toward 1; lower $\gamma$, which shortens the
# horizon and shrinks both curves; at $\gamma = 0$ it tells you why there is nothing left to trade. The
# static figure is the setting of the table above ($\gamma = 0.95$, $\sigma = 2$): the exact curves agree
# with the simulated table to within a few percent, and the lowest error again sits near $\lambda = 0.6$.

# %%
from rlbook.widgets.gae_explorer import gae_explorer, gae_readout, gae_tradeoff, plot_gae_tradeoff

plot_gae_tradeoff(0.9, 0.95, sigma)
print(gae_readout(0.9, 0.95, sigma)[0])
exact = gae_tradeoff(0.95, sigma, num_points=101)
exact_at = {lam: (float(np.interp(lam, exact["lambda"], exact["bias2"])),
                  float(np.interp(lam, exact["lambda"], exact["variance"]))) for lam in lambdas}
worst_gap = max(abs(sum(exact_at[lam]) - sum(gae_stats[lam])) / sum(gae_stats[lam]) for lam in lambdas)
print(f"largest gap between the exact MSE and the simulated table: {worst_gap:.1%}")
rl.claim("to within a few percent", worst_gap, high=0.05)
rl.claim("the lowest error again sits near $\\lambda = 0.6$", exact["lambda"][np.argmin(exact["mse"])], 0.6, abs=0.05);

# %%
try:
    display(gae_explorer())  # needs ipywidgets; move the sliders in a live notebook
except ImportError:
    print("ipywidgets is not installed: the static figure above shows the explorer at λ = 0.9")

# %% [markdown]
# ## 4.7 The truncation pitfall
#
# Use the exact critic and $\lambda = 0.95$, and look at every time step $t$ of the rollout instead of
# only $t = 0$. Handled correctly, $\hat R_t$ is unbiased at every $t$. If the rollout's end (a time
# limit, not a real ending) is marked as a termination, the last steps lose their bootstrap value
# $\gamma V(s_T)$ and are biased downward — by almost the full $V^\pi\approx 5$ at $t = T-1$, decaying with
# $(\gamma\lambda)^{T-1-t}$ before it.

# %%
values, next_values = rollout_values(V_true)
no_trunc = torch.zeros_like(truncated)
_, ret_right = rl.gae(rewards, values, next_values, terminated, truncated, 0.95, 0.95)
_, ret_wrong = rl.gae(rewards, values, next_values, terminated | truncated, no_trunc, 0.95, 0.95)


def mean_error_per_step(ret):
    """E[R̂_t − Q(s_t, a_t)] over live rollouts at each t."""
    err = (ret - Q_true[states[:, :T], actions]) * alive
    return (err.sum(0) / alive.sum(0)).numpy()


err_right, err_wrong = mean_error_per_step(ret_right), mean_error_per_step(ret_wrong)
fig, ax = plt.subplots(figsize=(5.5, 3.2), dpi=80)
ax.plot(err_right, label="truncated: bootstrap V(s_T)")
ax.plot(err_wrong, label="truncated treated as terminated")
ax.axhline(0, color="k", lw=0.5)
ax.set_xlabel("time step t in the rollout")
ax.set_ylabel("mean error of the return estimate R̂_t")
ax.set_title("GAE λ = 0.95 with the exact critic", fontsize=9)
ax.legend(fontsize=9);

# %%
# NBVAL_CHECK_OUTPUT
print(f"mean error at t = T-1: correct {err_right[-1]:+.2f}, truncation-as-termination {err_wrong[-1]:+.2f}")
print(f"max |mean error| over t, correct handling < 0.1: {bool(np.abs(err_right).max() < 0.1)}")
assert np.abs(err_right).max() < 0.1 and err_wrong[-1] < -3

# %%
rl.claim("by almost the full $V^\\pi\\approx 5$", -err_wrong[-1], float(V_true[:6].mean()), rel=0.15)
rl.claim("$V^\\pi\\approx 5$", V_true[:6].mean(), 5.0, rel=0.15);

# %%
mse = {k: sum(v) for k, v in gae_stats.items()}
rl.report_headline(f"noisy critic: GAE λ={best_lam} MSE {mse[best_lam]:.2f} vs TD(λ=0) {mse[0.0]:.2f} and MC(λ=1) {mse[1.0]:.2f}");

# %% [markdown]
# ## Summary
#
# * The advantage tells the policy gradient how much better an action was than the policy's average;
#   with an exact critic the TD error $\delta_t$ is already an unbiased estimate of it (4.2).
# * $n$-step advantages and GAE are discounted sums of TD errors, (4.3)–(4.4). GAE's weights
#   $(\gamma\lambda)^l$ give a one-pass backward recursion (4.5); `rl.gae` implements it and is tested
#   against the explicit sum.
# * $\lambda$ (or $n$) moves weight from the critic to the sampled rewards: less bias from a wrong
#   critic, more variance. With a realistic critic the mean squared error is smallest in between; GAE
#   dominates $n$-step returns at equal bias.
# * Only `terminated` removes the bootstrap. A time limit or the end of a rollout is a truncation: cut
#   the sum, but keep $\gamma V(\text{final obs})$ — otherwise the last steps are biased by about $V$.
#
# ## Exercises
#
# 1. Show that $(1-\lambda)\sum_{n\ge1}\lambda^{n-1}\hat A^{(n)}_t = \sum_l (\gamma\lambda)^l\delta_{t+l}$ for an
#    infinite trajectory, and find the weights for a trajectory that ends (terminated) after $k$ steps.
# 2. Rerun §4.6 with $\sigma = 0.5$ and $\sigma = 5$. How does the best $\lambda$ move? Explain with the
#    bias and variance curves.
# 3. Replace the critic's error by a *systematic* one, $V = 0.8\,V^\pi$. Is the bias at $\lambda=0$ larger or
#    smaller than with random noise of the same size, and why?
# 4. GAE with $\lambda = 1$ and a constant critic $V \equiv c$: what is $\hat A_t$? Check that the policy
#    gradient it gives has the same expectation for every $c$ (chapter 3's baseline argument).
# 5. Implement `my_gae` with a Python loop over $t$ that carries `terminated` and `truncated` separately,
#    and compare it with `rl.gae` on the rollouts of §4.6 (use `torch.testing.assert_close`).

# %% [markdown] tags=["solution"] jp-MarkdownHeadingCollapsed=true
# ## Solutions

# %% [markdown] tags=["solution"]
# ### Solution to exercise 1
#
# By (4.3), $\hat A^{(n)}_t = \sum_{l<n}\gamma^l\delta_{t+l}$. Substituting and exchanging the sums,
# $\delta_{t+l}$ appears in every $\hat A^{(n)}$ with $n > l$, so its total weight is
# $(1-\lambda)\sum_{n>l}\lambda^{n-1}\,\gamma^l = (1-\lambda)\frac{\lambda^l}{1-\lambda}\gamma^l = (\gamma\lambda)^l$.
#
# If the episode terminates after $k$ more steps ($s_{t+k}$ terminal), every $\hat A^{(n)}$ with $n \ge k$
# is the same Monte Carlo advantage $\hat A^{(k)}_t$, so the weights of all those $n$ pile up on it:
# $\hat A_t = \sum_{n=1}^{k-1}(1-\lambda)\lambda^{n-1}\hat A^{(n)}_t + \lambda^{k-1}\hat A^{(k)}_t$, which
# equals $\sum_{l<k}(\gamma\lambda)^l\delta_{t+l}$: the same formula with the sum cut at the end of the
# episode, which is what the recursion (4.5) computes when it stops at `terminated`. A numerical check
# on one episode of $k = 6$ steps:

# %% tags=["solution"]
gen_s = torch.Generator().manual_seed(0)
k, gamma_s, lam_s = 6, 0.9, 0.7
values_s = torch.randn(k + 1, generator=gen_s)  # V(s_0) ... V(s_k); V(s_k) is ignored: s_k is terminal
ep = dict(rewards=torch.randn(k, generator=gen_s), values=values_s[:-1], next_values=values_s[1:],
          terminated=torch.arange(k) == k - 1, truncated=torch.zeros(k, dtype=torch.bool))
n_step_adv = [rl.n_step_returns(**ep, gamma=gamma_s, n=n)[0] - ep["values"][0] for n in range(1, k + 1)]
mixture = sum((1 - lam_s) * lam_s ** (n - 1) * n_step_adv[n - 1] for n in range(1, k)) + lam_s ** (k - 1) * n_step_adv[k - 1]
print(f"weighted n-step mixture {float(mixture):.6f}  |  GAE recursion {float(rl.gae(**ep, gamma=gamma_s, gae_lambda=lam_s)[0][0]):.6f}")
assert torch.allclose(mixture, rl.gae(**ep, gamma=gamma_s, gae_lambda=lam_s)[0][0])

# %% [markdown] tags=["solution"]
# ### Solution to exercise 2
#
# A more accurate critic makes small $\lambda$ cheap (little bias to remove), so the best $\lambda$ moves
# down; a worse critic makes bias expensive and moves it up, towards Monte Carlo. The variance curve
# barely depends on $\sigma$ at large $\lambda$ (the critic is hardly consulted there), while the bias at
# small $\lambda$ grows like $\sigma^2$.

# %% tags=["solution"]
eps_state = torch.randn(S, generator=torch.Generator().manual_seed(3))  # the same error pattern, rescaled
for sigma_s in (0.5, 2.0, 5.0):
    vals, next_vals = rollout_values(V_true + sigma_s * eps_state)
    mse_s = {lam: sum(bias2_and_variance(rl.gae(rewards, vals, next_vals, terminated, truncated, 0.95, lam)[1])[:2])
             for lam in (0.0, 0.2, 0.4, 0.6, 0.8, 0.9, 0.95, 1.0)}
    best = min(mse_s, key=mse_s.get)
    print(f"σ = {sigma_s}: best λ = {best} (MSE {mse_s[best]:.2f}; at λ=0 {mse_s[0.0]:.2f}, at λ=1 {mse_s[1.0]:.2f})")

# %% [markdown] tags=["solution"]
# ### Solution to exercise 3
#
# At $\lambda = 0$ the return estimate is $\hat R_0 = r_0 + \gamma V(s_1)$, so its bias for a pair
# $(s_0, a_0)$ is $\gamma\,\mathbb E[V(s_1) - V^\pi(s_1)]$ (on the 97% of steps that do not terminate): the
# critic's error *averaged over the next state*. The systematic error $V = 0.8V^\pi$ has the same sign
# everywhere, so nothing cancels, and the bias is $-0.2\gamma\cdot0.97\,\mathbb E[V^\pi(s_1)] \approx -1.0$
# for every pair. Random errors of the same root-mean-square size cancel only as far as each pair's
# next state is spread over several states. So the systematic bias is never the smaller one by
# cancellation; in this MDP, where random errors cancel little, the two come out about the same size
# (below). There is one difference in the systematic case's favour: because $V^\pi$ varies little
# across states, $V(s_0) = 0.8V^\pi(s_0)$ is too low by about the same amount, so in the *advantage*
# $\hat A_0 = \hat R_0 - V(s_0)$ the two errors nearly cancel.

# %% tags=["solution"]
def bias2_at_lambda0(critic_s):
    vals, next_vals = rollout_values(critic_s)
    return bias2_and_variance(rl.gae(rewards, vals, next_vals, terminated, truncated, 0.95, 0.0)[1])[0]


systematic = 0.8 * V_true
rms_error = float(((systematic - V_true)[:6] ** 2).mean().sqrt())
random_same_size = V_true + rms_error * eps_state / float((eps_state[:6] ** 2).mean().sqrt())
print(f"critic error (root mean square over states) {rms_error:.2f}: squared bias at λ=0 — "
      f"systematic {bias2_at_lambda0(systematic):.3f}, random {bias2_at_lambda0(random_same_size):.3f}")

# %% [markdown] tags=["solution"]
# ### Solution to exercise 4
#
# With $\lambda = 1$ and $V \equiv c$ the TD errors telescope: within an episode that terminates,
# $\hat A_t = \sum_l \gamma^l r_{t+l} - c = G_t - c$; at a truncation the bootstrap adds
# $\gamma^{m}c$ back ($m$ the steps to the cut). The policy gradient with this advantage is
# $\mathbb E[(G_t - c)\nabla\log\pi(a_t|s_t)]$, and the $c$ term vanishes in expectation because
# $\mathbb E_{a\sim\pi}[\nabla\log\pi(a|s)] = \sum_a \nabla\pi(a|s) = 0$ in every state: chapter 3's
# baseline argument, with the constant $c$ as the baseline. Both facts in code:

# %% tags=["solution"]
adv_c0 = rl.gae(rewards, torch.zeros_like(values), torch.zeros_like(values), terminated, truncated, 0.95, 1.0)[0]
adv_c10 = rl.gae(rewards, torch.full_like(values, 10.0), torch.full_like(values, 10.0), terminated, truncated, 0.95, 1.0)[0]
in_terminated_episode = terminated.any(-1, keepdim=True) & alive.bool()  # each rollout row is one episode
diff = (adv_c10 - adv_c0)[in_terminated_episode]
print("Â(c=10) − Â(c=0) on the steps of terminated episodes: min", round(float(diff.min()), 6), "max", round(float(diff.max()), 6))
expected_score = sum(probs[:, a:a + 1] * rl.softmax_score(probs.log(), torch.full((S,), a)) for a in range(A))
print("E_a[∇ log π(a|s)] = 0 in every state:", bool(expected_score.abs().max() < 1e-12))

# %% [markdown] tags=["solution"]
# ### Solution to exercise 5
#
# Walk backwards with one running sum. The bootstrap is dropped only at `terminated`; the running sum
# is reset at *either* end, since the next step belongs to another episode.

# %% tags=["solution"]
def my_gae(rewards, values, next_values, terminated, truncated, gamma, gae_lambda):
    advantages = torch.zeros_like(rewards)
    running = torch.zeros_like(rewards[..., 0])
    for t in reversed(range(rewards.shape[-1])):
        delta = rewards[..., t] + gamma * (~terminated[..., t]) * next_values[..., t] - values[..., t]
        running = delta + gamma * gae_lambda * (~(terminated[..., t] | truncated[..., t])) * running
        advantages[..., t] = running
    return advantages


rl.exercises.check("gae", my_gae)
values, next_values = rollout_values(critic)
torch.testing.assert_close(my_gae(rewards, values, next_values, terminated, truncated, 0.95, 0.95),
                           rl.gae(rewards, values, next_values, terminated, truncated, 0.95, 0.95)[0])
print("my_gae == rl.gae on the rollouts of §4.6")
