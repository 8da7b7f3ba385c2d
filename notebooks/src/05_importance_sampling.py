# %% [markdown]
# # 5. Importance sampling: reusing samples from another policy
#
# **Goals.** By the end of this chapter you can
# * derive the importance-sampling identity $\mathbb E_p[f] = \mathbb E_q[(p/q)\,f]$ and compute the ratio
#   $\rho = \pi_\theta/\pi_{\theta_\text{old}}$ safely from log-probabilities;
# * show that the estimate is unbiased, and say exactly what its variance depends on: $\mathbb E_q[\rho^2]$,
#   which grows at least like $e^{\mathrm{KL}}$;
# * compute and interpret the *effective sample size* (ESS) of a batch of weights;
# * explain, with measurements, why reweighting whole trajectories fails and why PPO-style methods
#   reweight single steps (tokens) and keep the new policy close to the old one;
# * write the *surrogate objective* $\mathbb E_{\text{old}}[\rho\,\hat A]$ and check that its gradient at
#   $\theta = \theta_\text{old}$ is the policy gradient.
#
# **Prerequisites.** Chapter 2 (score function), chapter 4 (advantages). Some familiarity with KL
# divergence helps; we define what we use.
#
# **The problem.** Sampling is the expensive part of RL — for a language model, generating completions
# costs far more than a gradient step. We would like to take *several* gradient steps on one batch. But
# after the first step the batch was drawn from $\pi_{\theta_\text{old}}$, not from the current
# $\pi_\theta$, and the policy-gradient formula is an expectation under $\pi_\theta$. Importance sampling
# corrects the mismatch — at a price that this chapter measures.

# %%
import inspect

import matplotlib.pyplot as plt
import numpy as np
import torch
from tqdm.auto import tqdm

import rlbook as rl

rl.seed_everything(0)
torch.set_num_threads(1)
torch.set_default_dtype(torch.float64)  # exact checks in this chapter
SIZE = rl.get_size()

# %% [markdown]
# ## 5.1 The identity
#
# Let $p$ be the distribution we care about (the *target*, e.g. the current policy) and $q$ the one we
# sampled from (the *proposal* or *behaviour* policy). Wherever $q(x) > 0$ whenever $p(x)f(x) \ne 0$,
#
# $$\mathbb E_{x\sim p}[f(x)] = \sum_x p(x) f(x) = \sum_x q(x)\,\frac{p(x)}{q(x)}\,f(x)
#   = \mathbb E_{x\sim q}\big[w(x)\,f(x)\big], \qquad w(x) = \frac{p(x)}{q(x)}. \tag{5.1}$$
#
# So the estimator $\hat\mu_\text{IS} = \frac1n\sum_i w(x_i) f(x_i)$, $x_i\sim q$, is **unbiased** for
# $\mathbb E_p[f]$. For a policy and one action, $w$ is the **ratio**
#
# $$\rho = \frac{\pi_\theta(a\mid s)}{\pi_{\theta_\text{old}}(a\mid s)}
#   = \exp\big(\log\pi_\theta(a\mid s) - \log\pi_{\theta_\text{old}}(a\mid s)\big). \tag{5.2}$$
#
# We always form it from log-probabilities: a language model's token probabilities can be $10^{-30}$,
# and their difference of logs is a perfectly ordinary number. Two worked numbers: a token whose
# probability moved from $0.01$ to $0.012$ has $\rho = 1.2$, $\log\rho = 0.182$; an action going from
# $0.4$ to $0.6$ has $\rho = 1.5$. Note that $\rho$ measures *relative* change — the first token's
# probability barely moved in absolute terms.
#
# ## 5.2 The price: variance
#
# Unbiased is not enough. The variance of one term is
#
# $$\mathrm{Var}_q[w f] = \mathbb E_q[w^2 f^2] - \mu^2 = \mathbb E_p[w f^2] - \mu^2, \tag{5.3}$$
#
# and for $f \equiv 1$ it is $\mathbb E_q[w^2] - 1$. That second moment has a name:
# $\mathbb E_q[w^2] = \sum_x p(x)^2/q(x) = \exp D_2(p\,\|\,q)$, the exponential of the Rényi divergence of
# order 2. Since Rényi divergences increase with the order and $D_1$ is the KL divergence,
#
# $$\mathbb E_q[w^2] = e^{D_2(p\|q)} \;\ge\; e^{\mathrm{KL}(p\|q)}. \tag{5.4}$$
#
# **The variance of importance sampling grows at least exponentially in the KL between the two
# distributions.** A few samples with huge weights dominate the sum, and most samples contribute nothing.
#
# ## 5.3 Effective sample size
#
# How many on-target samples is a weighted batch worth? Kish's effective sample size compares the
# weights' sum with their spread:
#
# $$\mathrm{ESS} = \frac{\big(\sum_i w_i\big)^2}{\sum_i w_i^2} \in [1, n], \qquad
#   \frac{\mathrm{ESS}}{n} \xrightarrow{n\to\infty} \frac{(\mathbb E_q w)^2}{\mathbb E_q[w^2]} = e^{-D_2(p\|q)}. \tag{5.5}$$
#
# Equal weights give $n$; one dominant weight gives $1$. The library computes it from log-weights with
# `logsumexp`, so weights like $e^{800}$ cause no overflow. A close cousin is the **self-normalised**
# estimator $\sum_i w_i f_i/\sum_i w_i$: slightly biased, but it cannot exceed the range of $f$, and it
# works when $p$ is known only up to a constant.

# %% [markdown]
# ## 5.4 The code
#
# | symbol | code | shape |
# |---|---|---|
# | $\log\pi_\theta(a|s)$, $\log\pi_{\theta_\text{old}}(a|s)$ | `log_probs`, `old_log_probs` | `(..., T)` |
# | $\log\rho$, $\rho$ | `log_ratio(...)`, `importance_ratio(...)` | `(..., T)` |
# | $f(x_i)$, $\log p(x_i)$, $\log q(x_i)$ | `f_values`, `log_p`, `log_q` | `(..., n)` |
# | $\log w_i$, ESS | `log_weights`, `effective_sample_size(...)` | `(..., n)` → `(...)` |


# %%
def show(fn):
    """Print a library function's code without its docstring."""
    src = inspect.getsource(fn)
    print(src.split('"""')[0] + "...docstring...\n" + src.split('"""')[2])


show(rl.importance_ratio)
show(rl.importance_sampling_estimate)
show(rl.effective_sample_size)

# %% [markdown]
# **Checks.** The worked ratios above; exact unbiasedness by enumeration (evaluate the one-sample
# estimator at every $x$ and average with the weights $q(x)$); the two limits of the ESS; and (5.4) on a
# random pair of distributions.

# %%
# NBVAL_CHECK_OUTPUT
lp_old, lp_new = torch.tensor([0.01, 0.4]).log(), torch.tensor([0.012, 0.6]).log()
print("ρ for 0.01→0.012 and 0.4→0.6:", [round(x, 4) for x in rl.importance_ratio(lp_new, lp_old).tolist()])
print("log ρ:", [round(x, 4) for x in rl.log_ratio(lp_new, lp_old).tolist()])

gen = torch.Generator().manual_seed(0)
K = 20  # actions
z_q, direction, f = torch.randn(K, generator=gen), torch.randn(K, generator=gen), torch.rand(K, generator=gen)
q = torch.softmax(z_q, 0)
p = torch.softmax(z_q + 1.0 * direction, 0)
one_sample = torch.stack([rl.importance_sampling_estimate(f[i : i + 1], p.log()[i : i + 1], q.log()[i : i + 1]) for i in range(K)])
print("E_q[one-sample IS estimate] =", round(float((q * one_sample).sum()), 10), " E_p[f] =", round(float((p * f).sum()), 10))
print("ESS of equal weights (n=8):", round(float(rl.effective_sample_size(torch.zeros(8))), 6),
      "| one dominant weight:", round(float(rl.effective_sample_size(torch.tensor([800.0, 0, 0, 0, 0, 0, 0, 0]))), 6))
second_moment = float((p * p / q).sum())
kl_pq = float(rl.categorical_kl(z_q + 1.0 * direction, z_q))
print(f"E_q[w²] = {second_moment:.4f} ≥ exp(KL(p‖q)) = {np.exp(kl_pq):.4f}: {second_moment >= np.exp(kl_pq)}")

# %% [markdown]
# ## 5.5 Watching the estimate degrade as two policies drift apart
#
# A policy over $K = 20$ actions, $q = \mathrm{softmax}(z)$, and a family of targets
# $p_\alpha = \mathrm{softmax}(z + \alpha u)$ for a fixed random direction $u$: $\alpha = 0$ is on-policy and
# the KL grows with $\alpha$. For each $\alpha$ we draw many batches of $n = 100$ actions from $q$, estimate
# $\mathbb E_{p_\alpha}[f]$ for a reward $f \in [0, 1]$ with both estimators, and record the spread of the
# estimates and the ESS of each batch. The exact quantities — KL, $\mathbb E_q[w^2]$, the variance (5.3) —
# come from summing over the 20 actions.

# %%
n = 100
repeats = rl.by_size(small=400, full=4000)
alphas = np.linspace(0.0, 6.0, 13)
rows = []
for alpha in tqdm(alphas, desc="α"):
    logits_p = z_q + alpha * direction
    p = torch.softmax(logits_p, 0)
    mu = float((p * f).sum())
    x = torch.multinomial(q.expand(repeats, K), n, replacement=True, generator=gen)  # (repeats, n)
    log_p, log_q = p.log()[x], q.log()[x]
    ordinary = rl.importance_sampling_estimate(f[x], log_p, log_q)
    self_norm = rl.importance_sampling_estimate(f[x], log_p, log_q, self_normalized=True)
    rows.append(dict(
        alpha=alpha, kl=float(rl.categorical_kl(logits_p, z_q)), second_moment=float((p * p / q).sum()),
        exact_var=float((q * (p / q * f) ** 2).sum()) - mu**2,  # (5.3), one sample
        var_ordinary=float(ordinary.var()) * n, var_self_norm=float(self_norm.var()) * n,
        z_ordinary=(float(ordinary.mean()) - mu) / float(ordinary.std() / np.sqrt(repeats)),
        ess=float(rl.effective_sample_size(log_p - log_q, normalized=True).mean()),
    ))

# %%
# NBVAL_CHECK_OUTPUT
print("  α    KL     E[w²]   ESS/n  1/E[w²]  n·Var(IS) exact  n·Var(SNIS)")
for r in rows[::2]:
    print(f"{r['alpha']:4.1f} {r['kl']:6.3f} {r['second_moment']:7.2f} {r['ess']:6.3f} {1 / r['second_moment']:7.3f} "
          f"{r['var_ordinary']:8.3f} {r['exact_var']:6.3f} {r['var_self_norm']:9.3f}")
print("ordinary IS unbiased at every α (|z| < 4):", all(abs(r["z_ordinary"]) < 4 for r in rows))
assert all(abs(r["z_ordinary"]) < 4 for r in rows)

# %%
kl = np.array([r["kl"] for r in rows])
fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), dpi=80)
ax = axes[0]
ax.semilogy(kl, [r["var_ordinary"] for r in rows], "o", label="ordinary IS (measured)")
ax.semilogy(kl, [r["exact_var"] for r in rows], "-", color="C0", label="ordinary IS (exact, 5.3)")
ax.semilogy(kl, [r["var_self_norm"] for r in rows], "s", label="self-normalised (measured)")
ax.set_xlabel("KL(p‖q)")
ax.set_ylabel("n · Var[estimate]")
ax.legend(fontsize=8)
ax.set_title("variance of the estimate of E_p[f]", fontsize=9)
ax = axes[1]
ax.plot(kl, [r["ess"] for r in rows], "o", label="ESS / n (batches of 100)")
ax.plot(kl, [1 / r["second_moment"] for r in rows], "-", label="1 / E_q[w²] = exp(−D₂)")
ax.plot(kl, np.exp(-kl), "k--", lw=1, label="exp(−KL): an upper bound")
ax.set_xlabel("KL(p‖q)")
ax.set_ylabel("ESS / n")
ax.set_ylim(0, 1.05)
ax.legend(fontsize=8)
ax.set_title("effective sample size", fontsize=9)
fig.tight_layout();

# %% [markdown]
# The measured ESS follows $1/\mathbb E_q[w^2]$ closely and always sits below $e^{-\mathrm{KL}}$, as (5.4)
# predicts. The ordinary estimator's variance grows steeply; the self-normalised one pays a small bias
# (invisible at this $n$) for a much smaller variance, because its weights are normalised to sum to one.
#
# ## 5.6 Whole trajectories: the variance compounds
#
# For a trajectory $\tau = (s_0, a_0, \dots, s_{H-1}, a_{H-1})$ the environment's transition probabilities
# are the same under both policies and cancel, so the trajectory weight is a product of per-step ratios:
#
# $$w(\tau) = \frac{p_{\theta}(\tau)}{p_{\theta_\text{old}}(\tau)} = \prod_{t=0}^{H-1}\rho_t, \qquad
#   \mathrm{KL}\big(p_\theta(\tau)\,\|\,p_{\theta_\text{old}}(\tau)\big) = \mathbb E_{\tau\sim p_\theta}\Big[\sum_t \mathrm{KL}_t\Big]. \tag{5.6}$$
#
# Both the KL and $\log\mathbb E[w^2]$ add up over steps, so at a fixed per-step change the ESS decays
# *exponentially in the horizon*. We measure it on a random 5-state, 3-action MDP with horizon $H$, a
# behaviour policy $\pi_\text{old}$ and a slightly different $\pi_\text{new} = \mathrm{softmax}(z + \alpha u)$.
# The exact $\mathbb E_\text{old}[w(\tau)^2]$ is a product of $H$ matrices (written out below, as it is not a
# library function), and the exact trajectory KL uses the state occupancy of $\pi_\text{new}$.


# %%
def my_trajectory_second_moment(mdp, probs_new, probs_old, horizon):
    """E_old[Π_t ρ_t²] = d0ᵀ M^H 1 with M[s, s'] = Σ_a π_new(a|s)²/π_old(a|s) · P(s'|s, a) (no terminal states)."""
    M = torch.einsum("sa,sat->st", probs_new**2 / probs_old, mdp.transitions)
    d = mdp.initial_dist
    for _ in range(horizon):
        d = d @ M
    return float(d.sum())


S, A = 5, 3
logits_old = torch.randn(S, A, generator=torch.Generator().manual_seed(1))
step_direction = torch.randn(S, A, generator=torch.Generator().manual_seed(2))
num_traj = rl.by_size(small=4000, full=40_000)
horizons = [1, 2, 5, 10, 20, 40]
seq_rows = []
for H in tqdm(horizons, desc="horizon"):
    mdp = rl.TabularMDP.random(S, A, gamma=1.0, horizon=H, seed=0)
    for alpha in (0.1, 0.3, 0.6):
        logits_new = logits_old + alpha * step_direction
        probs_old, probs_new = torch.softmax(logits_old, -1), torch.softmax(logits_new, -1)
        traj = mdp.sample_trajectories(probs_old, num_traj, generator=H)
        step_log_ratio = rl.log_ratio(probs_new.log()[traj.states, traj.actions], probs_old.log()[traj.states, traj.actions])
        traj_log_w = (step_log_ratio * traj.mask).sum(-1)  # log of the product (5.6)
        returns = (traj.rewards * traj.mask).sum(-1)
        estimate = rl.importance_sampling_estimate(returns, traj_log_w, torch.zeros_like(traj_log_w))
        seq_rows.append(dict(
            H=H, alpha=alpha,
            kl=float(mdp.occupancy(probs_new) @ rl.categorical_kl(logits_new, logits_old)),
            ess_traj=float(rl.effective_sample_size(traj_log_w, normalized=True)),
            ess_exact=1 / my_trajectory_second_moment(mdp, probs_new, probs_old, H),
            ess_step=float(rl.effective_sample_size(step_log_ratio.flatten(), normalized=True)),
            rel_error=abs(float(estimate) / float(mdp.expected_return(logits_new)) - 1),
        ))

# %%
# NBVAL_CHECK_OUTPUT
print("  H    α    KL(τ)   ESS/n traj  exact  per-step  |rel. error of Ĵ|")
for r in seq_rows:
    print(f"{r['H']:3d}  {r['alpha']:.1f}  {r['kl']:6.3f}   {r['ess_traj']:7.3f}  {r['ess_exact']:6.3f}  {r['ess_step']:7.3f}  {r['rel_error']:8.4f}")
worst = min(seq_rows, key=lambda r: r["ess_traj"])
assert worst["ess_traj"] < 0.05 and all(r["ess_step"] > 0.7 for r in seq_rows)

# %%
fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), dpi=80)
for k, alpha in enumerate((0.1, 0.3, 0.6)):
    sel = [r for r in seq_rows if r["alpha"] == alpha]
    axes[0].plot([r["H"] for r in sel], [r["ess_traj"] for r in sel], "o", color=f"C{k}", label=f"α={alpha}: trajectory")
    axes[0].plot([r["H"] for r in sel], [r["ess_exact"] for r in sel], "-", color=f"C{k}")
    axes[0].plot([r["H"] for r in sel], [r["ess_step"] for r in sel], "x--", color=f"C{k}", label=f"α={alpha}: per step")
axes[0].set_xscale("log")
axes[0].set_xlabel("horizon H")
axes[0].set_ylabel("ESS / n")
axes[0].legend(fontsize=7)
axes[0].set_title("trajectory weights collapse; per-step ratios do not", fontsize=9)
kls = np.array([r["kl"] for r in seq_rows])
axes[1].plot(kls, [r["ess_traj"] for r in seq_rows], "o", label="trajectory ESS / n (measured)")
grid = np.linspace(0, kls.max(), 100)
axes[1].plot(grid, np.exp(-grid), "k--", lw=1, label="exp(−KL)")
axes[1].set_xlabel("trajectory KL(π_new ‖ π_old)")
axes[1].set_ylabel("ESS / n")
axes[1].legend(fontsize=8)
fig.tight_layout();

# %% [markdown]
# Against the *trajectory* KL the points for every horizon and every $\alpha$ line up along one
# decreasing curve, below $e^{-\mathrm{KL}}$: what matters is the total divergence, and it grows linearly
# with $H$. Look also at the last row of the table ($H = 40$, $\alpha = 0.6$): the measured ESS/n (0.02)
# is several times the exact value. With heavy-tailed weights the rare, enormous weights that dominate
# $\mathbb E[w^2]$ are simply not in a batch of a few thousand, so a *measured* ESS is optimistic exactly
# when it matters — treat a low ESS as a red flag, and a high one as weak evidence. For a language model a "trajectory" is
# a completion of hundreds of tokens; a per-token KL of 0.01 is already a sequence KL of several nats,
# and a sequence-level weight would leave an effective batch of a handful of samples. The per-step
# ratios (crosses) stay near 1 at every horizon.
#
# ## 5.7 The surrogate objective: importance sampling per step
#
# Policy-gradient methods therefore weight each step by its own ratio and use an advantage for the rest
# of the trajectory — the **surrogate objective** of TRPO and PPO:
#
# $$L(\theta) = \mathbb E_{s,a\sim\pi_{\theta_\text{old}}}\big[\rho_\theta(a\mid s)\,\hat A(s,a)\big]. \tag{5.7}$$
#
# This is *not* an unbiased estimate of $J(\theta)$: it reweights the action but keeps the old policy's
# state distribution. It is, however, exact to first order: at $\theta = \theta_\text{old}$, $\rho = 1$ and
# $\nabla\rho = \rho\,\nabla\log\pi_\theta = \nabla\log\pi_\theta$, so
# $\nabla L(\theta_\text{old}) = \mathbb E[\hat A\,\nabla\log\pi_\theta]$, the policy gradient. Chapter 6
# builds TRPO and PPO on this: maximise (5.7) while keeping $\pi_\theta$ close to $\pi_{\theta_\text{old}}$,
# so that the ignored change of state distribution stays small — and, as §5.5–5.6 showed, so that the
# ratios keep a usable effective sample size. The check: on the MDP above, the gradient of (5.7) at
# $\theta_\text{old}$ equals the exact policy gradient (the advantage-weighted occupancy form of
# chapter 2), because for a tabular policy we can take the expectation exactly.

# %%
# NBVAL_CHECK_OUTPUT
mdp = rl.TabularMDP.random(S, A, gamma=0.9, horizon=None, seed=0)
theta = logits_old.clone().requires_grad_()
probs_fixed = torch.softmax(logits_old, -1)
advantage = mdp.advantages(probs_fixed)  # exact A^π_old, a constant
occupancy = mdp.occupancy(probs_fixed)  # discounted state visits of π_old, a constant
ratio = rl.importance_ratio(torch.log_softmax(theta, -1), probs_fixed.log())  # (S, A), all 1 at θ_old
surrogate = (occupancy[:, None] * probs_fixed * ratio * advantage).sum()  # (5.7), expectation taken exactly
(grad_surrogate,) = torch.autograd.grad(surrogate, theta)
(grad_exact,) = torch.autograd.grad(mdp.expected_return(theta), theta)  # autograd through the exact J(θ)
print("∇L(θ_old) == ∇J(θ_old):", torch.allclose(grad_surrogate, grad_exact, atol=1e-10))
assert torch.allclose(grad_surrogate, grad_exact, atol=1e-10)

# %% [markdown]
# ## 5.8 Explore: what PPO does about large ratios
#
# Chapter 6 limits the damage from large ratios by *clipping*: outside a band $[1-\varepsilon, 1+\varepsilon]$
# the surrogate stops rewarding further movement, so the gradient there is zero. CISPO instead clips
# the weight and keeps the gradient. The explorer below draws both from the library's own losses; the
# static figure shows PPO for a positive and a negative advantage, and CISPO.

# %%
from rlbook.widgets.clip_explorer import clip_explorer, plot_clip_objective

fig, axes = plt.subplots(1, 3, figsize=(13, 3.4), dpi=80)
plot_clip_objective(1.0, 0.2, ax=axes[0])
plot_clip_objective(-1.0, 0.2, ax=axes[1])
plot_clip_objective(1.0, 0.2, 0.28, kind="cispo", ax=axes[2])
fig.tight_layout();

# %%
try:
    explorer = clip_explorer()  # needs ipywidgets; move the sliders in a live notebook
    display(explorer)
except ImportError:
    print("ipywidgets is not installed: the static figure above shows the same curves")

# %%
r20 = [r for r in seq_rows if r["H"] == 40 and r["alpha"] == 0.3][0]
mid = min(rows, key=lambda r: abs(r["kl"] - 1.0))
rl.report_headline(f"ESS/n {mid['ess']:.2f} at KL {mid['kl']:.2f} (one step); trajectory weights H=40: ESS/n {r20['ess_traj']:.3f} vs per-step {r20['ess_step']:.2f}");

# %% [markdown]
# ## Summary
#
# * Importance sampling turns samples from $q$ into an unbiased estimate of an expectation under $p$ by
#   weighting each with $w = p/q$; for policies the weight is the ratio $\rho = \exp(\log\pi_\theta - \log\pi_{\theta_\text{old}})$.
# * Its variance is governed by $\mathbb E_q[w^2] = e^{D_2(p\|q)} \ge e^{\mathrm{KL}(p\|q)}$: it explodes as the
#   policies drift apart. The effective sample size $(\sum w)^2/\sum w^2$ makes this visible in one number
#   per batch; $\mathrm{ESS}/n \approx 1/\mathbb E_q[w^2]$.
# * Trajectory weights multiply per-step ratios, so their divergence adds over the horizon and the ESS
#   collapses exponentially; per-step ratios do not.
# * The surrogate $\mathbb E_\text{old}[\rho\hat A]$ uses per-step ratios. It has the right gradient at
#   $\theta_\text{old}$ and is trustworthy only near it — which is what TRPO's constraint and PPO's clip
#   enforce (chapter 6).
#
# ## Exercises
#
# 1. Show that the self-normalised estimator is exact for $f \equiv c$ and that the ordinary one is not.
#    What is the variance of the ordinary estimator for $f \equiv 1$?
# 2. For two Gaussians $p = \mathcal N(\mu, 1)$ and $q = \mathcal N(0, 1)$ compute $\mathbb E_q[w^2]$ and
#    $\mathrm{KL}(p\|q)$ in closed form. How large can $\mu$ be before $\mathrm{ESS}/n < 0.1$?
# 3. In §5.5, swap the roles: sample from $p_\alpha$ and estimate $\mathbb E_q[f]$. Is the ESS the same
#    function of $\mathrm{KL}(p\|q)$? Which divergence governs it now?
# 4. Replace the trajectory weight by the *per-decision* estimator
#    $\sum_t \gamma^t\big(\prod_{k\le t}\rho_k\big) r_t$ and measure its ESS-equivalent variance against $H$.
#    Why does it help, and why is it still not enough for long horizons?
# 5. Show that the gradient of $\mathbb E_\text{old}[\rho\hat A]$ at $\theta \ne \theta_\text{old}$ is
#    $\mathbb E_\text{old}[\rho\,\hat A\,\nabla\log\pi_\theta]$, and explain what goes wrong when some $\rho$ are large.
