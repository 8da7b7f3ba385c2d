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
#   $\theta = \theta_\text{old}$ is the policy gradient;
# * estimate a KL divergence from samples with $k_1$, $k_2$, $k_3$, say which are unbiased, and say which
#   KL each one's gradient follows when it is used as a loss.
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
# figures at twice the pixel density (sharp when zoomed)
# %config InlineBackend.figure_formats = ["retina"]
torch.set_num_threads(1)
torch.set_default_dtype(torch.float64)  # exact checks in this chapter
SIZE = rl.get_size()

# %% [markdown]
# ## 5.1 The identity
#
# Let $p$ be the distribution we care about (the *target*, e.g. the current policy) and $q$ the one we
# sampled from (the *proposal* or *behaviour* policy). Wherever $q(x) > 0$ whenever $p(x)f(x) \ne 0$,
#
# $$\begin{aligned}\mathbb E_{x\sim p}[f(x)] &= \sum_x p(x) f(x) = \sum_x q(x)\,\frac{p(x)}{q(x)}\,f(x)\cr
#   &= \mathbb E_{x\sim q}\big[w(x)\,f(x)\big], \qquad w(x) = \frac{p(x)}{q(x)}.\end{aligned} \tag{5.1}$$
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
# | $\log\pi_\theta(a\mid s)$, $\log\pi_{\theta_\text{old}}(a\mid s)$ | `log_probs`, `old_log_probs` | `(..., T)` |
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
fig, axes = plt.subplots(1, 2, figsize=(8.4, 3.6), dpi=80)
ax = axes[0]
ax.semilogy(kl, [r["var_ordinary"] for r in rows], "o", label="ordinary IS (measured)")
ax.semilogy(kl, [r["exact_var"] for r in rows], "-", color="C0", label="ordinary IS (exact, 5.3)")
ax.semilogy(kl, [r["var_self_norm"] for r in rows], "s", label="self-normalised (measured)")
ax.set_xlabel("KL(p‖q)")
ax.set_ylabel("n · Var[estimate]")
ax.legend(fontsize=9)
ax.set_title("variance of the estimate of E_p[f]", fontsize=9)
ax = axes[1]
ax.plot(kl, [r["ess"] for r in rows], "o", label="ESS / n (batches of 100)")
ax.plot(kl, [1 / r["second_moment"] for r in rows], "-", label="1 / E_q[w²] = exp(−D₂)")
ax.plot(kl, np.exp(-kl), "k--", lw=1, label="exp(−KL): an upper bound")
ax.set_xlabel("KL(p‖q)")
ax.set_ylabel("ESS / n")
ax.set_ylim(0, 1.05)
ax.legend(fontsize=9)
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
# $$\begin{gathered}w(\tau) = \frac{p_{\theta}(\tau)}{p_{\theta_\text{old}}(\tau)} = \prod_{t=0}^{H-1}\rho_t,\cr
#   \mathrm{KL}\big(p_\theta(\tau)\,\|\,p_{\theta_\text{old}}(\tau)\big) = \mathbb E_{\tau\sim p_\theta}\Big[\sum_t \mathrm{KL}_t\Big].\end{gathered} \tag{5.6}$$
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
fig, axes = plt.subplots(1, 2, figsize=(8.4, 4.0), dpi=80)
for k, alpha in enumerate((0.1, 0.3, 0.6)):
    sel = [r for r in seq_rows if r["alpha"] == alpha]
    axes[0].plot([r["H"] for r in sel], [r["ess_traj"] for r in sel], "o", color=f"C{k}", label=f"α={alpha}: trajectory")
    axes[0].plot([r["H"] for r in sel], [r["ess_exact"] for r in sel], "-", color=f"C{k}")
    axes[0].plot([r["H"] for r in sel], [r["ess_step"] for r in sel], "x--", color=f"C{k}", label=f"α={alpha}: per step")
axes[0].set_xscale("log")
axes[0].set_xlabel("horizon H")
axes[0].set_ylabel("ESS / n")
axes[0].legend(fontsize=8.5, loc="lower left")
axes[0].set_title("trajectory weights collapse; per-step ratios do not", fontsize=9)
kls = np.array([r["kl"] for r in seq_rows])
axes[1].plot(kls, [r["ess_traj"] for r in seq_rows], "o", label="trajectory ESS / n (measured)")
grid = np.linspace(0, kls.max(), 100)
axes[1].plot(grid, np.exp(-grid), "k--", lw=1, label="exp(−KL)")
axes[1].set_xlabel("trajectory KL(π_new ‖ π_old)")
axes[1].set_ylabel("ESS / n")
axes[1].legend(fontsize=9)
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

# %%
last = seq_rows[-1]  # H = 40, α = 0.6
rl.claim("the measured ESS/n (0.02)", last["ess_traj"], 0.02)  # the words allow ±0.005
rl.claim("is several times the exact value", last["ess_traj"] / last["ess_exact"], low=3);

# %% [markdown]
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
# $\nabla L(\theta_\text{old}) = \mathbb E[\hat A\,\nabla\log\pi_\theta]$, the policy gradient. TRPO
# (chapter 6) and PPO (chapter 7) build on this: maximise (5.7) while keeping $\pi_\theta$ close to $\pi_{\theta_\text{old}}$,
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
# ## 5.8 Estimating a KL from samples: $k_1$, $k_2$, $k_3$
#
# Every method from here on watches a KL divergence between two policies: TRPO (chapter 6) constrains
# it, PPO (chapter 7) monitors it after each update, and GRPO (chapter 9) adds it to the loss as a
# penalty that keeps the trained model near a frozen reference model. In this chapter we could sum
# over 20 actions; a language model has a vocabulary of tens of thousands of tokens and sequences of
# hundreds, so the KL can only be *estimated* from the tokens that were sampled and their
# log-probabilities. This section builds the three estimators in use and, just as important, says
# what their *gradients* do when they are used as a loss.
#
# **Setting.** Samples $x \sim q$ come from the policy being trained, $q = \pi_\theta$; the other
# distribution is a reference $p = \pi_{\text{ref}}$ whose log-probability we can evaluate on those
# samples. Write
#
# $$r(x) = \frac{p(x)}{q(x)} = \exp\big(\log\pi_{\text{ref}}(x) - \log\pi_\theta(x)\big),$$
#
# which is exactly the importance weight $w$ of (5.1) with $q$ the sampler. The target is
# $\mathrm{KL}(q\,\|\,p) = \mathbb E_{x\sim q}[\log q(x) - \log p(x)] = \mathbb E_q[-\log r]$.
# **Naming.** $\mathrm{KL}(\pi_\theta\,\|\,\pi_{\text{ref}})$, with the trained policy first, is called the
# *reverse* KL; $\mathrm{KL}(\pi_{\text{ref}}\,\|\,\pi_\theta)$ is the *forward* KL. They are different
# functions of $\theta$ (KL is not symmetric), and the difference will matter for gradients.
#
# Following Schulman's note "Approximating KL Divergence" (2020, http://joschu.net/blog/kl-approx.html),
#
# $$k_1 = -\log r, \qquad k_2 = \tfrac12(\log r)^2, \qquad k_3 = (r - 1) - \log r. \tag{5.8}$$
#
# * $k_1$ is the definition itself, so $\mathbb E_q[k_1] = \mathrm{KL}(q\|p)$: **unbiased**. But it is
#   negative whenever $p(x) > q(x)$, and its spread is of the order of $|\log r|$ even when the KL is
#   tiny, because the positive and negative values only cancel on average.
# * $k_2$ is never negative. It is **biased**: its mean is an $f$-divergence, not the KL. Near $r = 1$,
#   write $r = 1 + \delta$; then $-\log r = -\delta + \tfrac12\delta^2 + O(\delta^3)$ and
#   $\tfrac12(\log r)^2 = \tfrac12\delta^2 + O(\delta^3)$, and since $\mathbb E_q[\delta] = \mathbb E_q[r] - 1 = 0$
#   both means equal $\tfrac12\mathbb E_q[\delta^2]$ up to third order: small bias while the two
#   distributions are close.
# * $k_3$ adds $r - 1$ to $k_1$. That term has mean zero, $\mathbb E_q[r] = \sum_x q(x)\,p(x)/q(x) = 1$
#   ((5.1) with $f \equiv 1$), so $k_3$ is **unbiased** too. It is a *control variate*: $r - 1$ and
#   $\log r$ agree to first order, so adding it cancels $k_1$'s first-order fluctuation and leaves
#   $k_3 \approx \tfrac12\delta^2$, as small as $k_2$. And $k_3 \ge 0$ for every sample, because the
#   concave $\log$ lies below its tangent at 1: $\log r \le r - 1$.
#
# The library's `kl_k1`, `kl_k2`, `kl_k3` take `log_probs` ($\log\pi_\theta$ of the sampled tokens) and
# `ref_log_probs` ($\log\pi_{\text{ref}}$ of the same tokens) and return one value per token.
# We measure all three on the family of §5.5: the sampler is $q = \mathrm{softmax}(z)$ over $K = 20$
# actions and the reference is $p_\alpha = \mathrm{softmax}(z + \alpha u)$, moving away as $\alpha$ grows.
# Means and standard deviations are exact sums over the 20 actions; a Monte Carlo run of 4000 samples
# per $\alpha$ confirms them.

# %%
print(inspect.getsource(rl.kl_k3).split('"""')[2])

# %%
# NBVAL_CHECK_OUTPUT
log_q = torch.log_softmax(z_q, 0)  # the sampler q = π_θ
kl_estimators = {"k1": rl.kl_k1, "k2": rl.kl_k2, "k3": rl.kl_k3}
mc_gen = torch.Generator().manual_seed(5)
n_mc = 4000
kl_alphas = [0.0, 0.1, 0.2, 0.4, 0.7, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]
kl_rows = []
for alpha in kl_alphas:
    log_p = torch.log_softmax(z_q + alpha * direction, 0)  # the reference p_α = π_ref
    row = dict(alpha=alpha, kl=float(rl.categorical_kl(z_q, z_q + alpha * direction)))  # KL(q ‖ p_α)
    x = torch.multinomial(q, n_mc, replacement=True, generator=mc_gen)
    for name, estimator in kl_estimators.items():
        k_all = estimator(log_q, log_p)  # the estimator's value at each of the 20 actions
        mean = float((q * k_all).sum())
        row[name] = mean
        row[name + "_std"] = float((q * (k_all - mean) ** 2).sum()) ** 0.5
        row[name + "_mc"] = float(estimator(log_q[x], log_p[x]).mean())
        row[name + "_min"] = float(k_all.min())
    kl_rows.append(row)

print("  α   KL(q‖p)  E[k1]  E[k2]  E[k3]  | std k1  std k2  std k3  | min k1   min k3")
for r in kl_rows:
    print(f"{r['alpha']:4.1f}  {r['kl']:6.3f}  {r['k1']:6.3f} {r['k2']:6.3f} {r['k3']:6.3f}  | {r['k1_std']:6.3f}  "
          f"{r['k2_std']:6.3f}  {r['k3_std']:6.3f}  | {r['k1_min'] + 0.0:+6.3f}  {r['k3_min'] + 0.0:+6.3f}")
print("E[k1] = E[k3] = KL at every α:", all(abs(r["k1"] - r["kl"]) < 1e-9 and abs(r["k3"] - r["kl"]) < 1e-9 for r in kl_rows))
print("k3 ≥ 0 on every action at every α:", all(r["k3_min"] >= 0 for r in kl_rows))
assert all(abs(r["k1"] - r["kl"]) < 1e-9 and abs(r["k3"] - r["kl"]) < 1e-9 and r["k3_min"] >= 0 for r in kl_rows)

# %%
moving = kl_rows[1:]  # α > 0, so that KL > 0
kl_x = np.array([r["kl"] for r in moving])
fig, axes = plt.subplots(1, 2, figsize=(8.4, 4.0), dpi=80)
for k, name in enumerate(kl_estimators):
    axes[0].plot(kl_x, [r[name] / r["kl"] for r in moving], "--" if name == "k1" else "-", color=f"C{k}",
                 label=f"{name}: exact")
    axes[0].plot(kl_x, [r[name + "_mc"] / r["kl"] for r in moving], "o", ms=4, color=f"C{k}",
                 label=f"{name}: 4000 samples")
    axes[1].loglog(kl_x, [r[name + "_std"] / r["kl"] for r in moving], "-o", ms=4, color=f"C{k}", label=name)
axes[0].set_xscale("log")
axes[0].axhline(1.0, color="k", ls=":", lw=1)
axes[0].set_xlabel("true KL(q‖p), nats")
axes[0].set_ylabel("mean of the estimator / true KL")
axes[0].set_title("bias: k1 and k3 stay at 1, k2 drifts above it", fontsize=9)
axes[0].legend(fontsize=8.5, ncol=2)
axes[1].set_xlabel("true KL(q‖p), nats")
axes[1].set_ylabel("std of one sample / true KL")
axes[1].set_title("relative spread of a single-sample estimate", fontsize=9)
axes[1].legend(fontsize=9)
fig.tight_layout();

# %% [markdown]
# Read the table and the plots from small $\alpha$ to large. While the two distributions are close
# ($\alpha = 0.1$, a KL of 0.004 nats), $k_1$'s standard deviation is more than ten times the KL it
# estimates, and it takes negative values (the second-last column); $k_2$ and $k_3$ have a spread of two
# to three times the KL and nearly equal means.

# %%
close = kl_rows[1]  # α = 0.1
rl.claim("more than ten times the KL", close["k1_std"] / close["kl"], low=10)
rl.claim("a spread of two to three times the KL", close["k3_std"] / close["kl"], low=2, high=3)
rl.claim("a spread of two to three times the KL", close["k2_std"] / close["kl"], low=2, high=3);

# %% [markdown]
# As $\alpha$ grows, $k_2$'s bias becomes visible and then large (the column $E[k_2]$), while $k_3$ stays unbiased and never negative; its spread grows in absolute terms, because
# $r$ is unbounded when $p(x) \gg q(x)$ on a sampled $x$, but stays the smallest of the three. That is
# why $k_3$ is the default in practice: CleanRL's `approx_kl` (chapter 7) and the GRPO penalty
# (chapter 9) both use it.
#
# ### Their gradients, used as a loss
#
# In GRPO the estimator is not only reported; it is *added to the loss*, $\beta\,k(x)$ per sampled
# token, and differentiated. Autograd then differentiates through $\log\pi_\theta(x)$ of the *fixed*
# samples $x$; it does not see that the samples were drawn from $\pi_\theta$. What does the average of
# that gradient estimate? With $\nabla$ acting on $\log q = \log\pi_\theta$ only and $\nabla\log r = -\nabla\log q$:
#
# * $\nabla k_1 = \nabla\log q$, so $\mathbb E_q[\nabla k_1] = \sum_x \nabla q(x) = \nabla 1 = 0$: as a loss,
#   $k_1$ does nothing on average.
# * $\nabla k_2 = -\log r\,\nabla\log q = (\log q - \log p)\,\nabla\log q$, so
#   $\mathbb E_q[\nabla k_2] = \sum_x \nabla q\,(\log q - \log p)$. Differentiating
#   $\mathrm{KL}(q\|p) = \sum_x q(\log q - \log p)$ gives the same sum plus $\sum_x q\,\nabla\log q = 0$.
# * $\nabla k_3 = \nabla r - \nabla\log r = (1 - r)\,\nabla\log q$, so
#   $\mathbb E_q[\nabla k_3] = \sum_x \nabla q - \sum_x p\,\nabla\log q = -\sum_x p\,\nabla\log q$, which is
#   the gradient of $\mathrm{KL}(p\|q) = \sum_x p\log p - \sum_x p\log q$.
#
# $$\begin{gathered}\mathbb E_{\pi_\theta}[\nabla k_1] = 0, \qquad
#   \mathbb E_{\pi_\theta}[\nabla k_2] = \nabla\,\mathrm{KL}(\pi_\theta\,\|\,\pi_{\text{ref}}),\cr
#   \mathbb E_{\pi_\theta}[\nabla k_3] = \nabla\,\mathrm{KL}(\pi_{\text{ref}}\,\|\,\pi_\theta).\end{gathered} \tag{5.9}$$
#
# So the two unbiased *value* estimators are the wrong choice for a *gradient* of the reverse KL:
# $k_1$ gives nothing, and $k_3$, the GRPO penalty, follows the **forward** KL. The biased $k_2$ is the
# one whose gradient is the reverse KL's. Near $\pi_\theta = \pi_{\text{ref}}$ the two KLs agree to
# second order, so their gradients agree to first order and the distinction is small; far apart,
# the forward KL pushes hardest on tokens the reference likes and $\pi_\theta$ has nearly ruled out
# ($r \gg 1$), the reverse KL on tokens $\pi_\theta$ likes and the reference does not. (For sequences
# there is a further catch: a per-token sum misses how a token changes the distributions of later
# tokens; Tang & Munos 2025, arXiv:2506.09477, work through it.)
#
# The check: on a categorical distribution over 5 actions we take the expectation in (5.9) exactly,
# $\sum_a \pi_\theta(a)\,\nabla k(a)$ with the weights $\pi_\theta(a)$ held fixed, and compare with
# autograd of the exact KLs.

# %%
# NBVAL_CHECK_OUTPUT
theta_logits = torch.tensor([1.0, 0.5, 0.0, -0.5, -1.0])  # π_θ over 5 actions
ref_logits = torch.tensor([-1.0, 0.0, 1.0, 0.0, 0.5])  # π_ref


def expected_loss_gradient(estimator, logits=theta_logits, reference=ref_logits):
    """Σ_a π_θ(a) ∇_θ k(a): the mean gradient of k used as a loss, with the samples a held fixed."""
    theta = logits.clone().requires_grad_(True)
    log_probs = torch.log_softmax(theta, 0)
    sample_weights = log_probs.exp().detach()  # how often each a is drawn: no gradient through sampling
    (sample_weights * estimator(log_probs, torch.log_softmax(reference, 0))).sum().backward()
    return theta.grad


def gradient_of(kl_of_theta):
    theta = theta_logits.clone().requires_grad_(True)
    kl_of_theta(theta).backward()
    return theta.grad


grad_reverse = gradient_of(lambda th: rl.categorical_kl(th, ref_logits))  # ∇ KL(π_θ ‖ π_ref)
grad_forward = gradient_of(lambda th: rl.categorical_kl(ref_logits, th))  # ∇ KL(π_ref ‖ π_θ)
rounded = lambda v: [round(x, 4) + 0.0 for x in v.tolist()]  # + 0.0 turns −0.0 into 0.0
print("E[∇k1]              :", rounded(expected_loss_gradient(rl.kl_k1)))
print("E[∇k2]              :", rounded(expected_loss_gradient(rl.kl_k2)))
print("∇KL(π_θ ‖ π_ref)    :", rounded(grad_reverse), " (reverse)")
print("E[∇k3]              :", rounded(expected_loss_gradient(rl.kl_k3)))
print("∇KL(π_ref ‖ π_θ)    :", rounded(grad_forward), " (forward)")
identities = {
    "E[∇k1] = 0": torch.allclose(expected_loss_gradient(rl.kl_k1), torch.zeros(5), atol=1e-12),
    "E[∇k2] = ∇ reverse KL": torch.allclose(expected_loss_gradient(rl.kl_k2), grad_reverse, atol=1e-12),
    "E[∇k3] = ∇ forward KL": torch.allclose(expected_loss_gradient(rl.kl_k3), grad_forward, atol=1e-12),
    "E[∇k3] ≠ ∇ reverse KL": not torch.allclose(expected_loss_gradient(rl.kl_k3), grad_reverse, atol=1e-3),
}
print(identities)
assert all(identities.values())

# %% [markdown]
# How different are the two gradients? Along the family of §5.5 (now with $\pi_\theta = q$ and
# $\pi_{\text{ref}} = p_\alpha$), the angle between $\mathbb E[\nabla k_3]$ (forward) and
# $\mathbb E[\nabla k_2]$ (reverse) is small while the policies are close and opens up as they separate;
# on this family the forward-KL gradient is also the shorter of the two:

# %%
grad_rows = []
for alpha in kl_alphas[1:]:
    g_reverse = expected_loss_gradient(rl.kl_k2, z_q, z_q + alpha * direction)  # = ∇ KL(π_θ ‖ π_ref)
    g_forward = expected_loss_gradient(rl.kl_k3, z_q, z_q + alpha * direction)  # = ∇ KL(π_ref ‖ π_θ)
    cosine = float(g_reverse @ g_forward / (g_reverse.norm() * g_forward.norm()))
    grad_rows.append(dict(kl=float(rl.categorical_kl(z_q, z_q + alpha * direction)),
                          angle=np.degrees(np.arccos(np.clip(cosine, -1.0, 1.0))),
                          norm_ratio=float(g_forward.norm() / g_reverse.norm())))
fig, axes = plt.subplots(1, 2, figsize=(8.4, 3.4), dpi=80)
axes[0].semilogx([r["kl"] for r in grad_rows], [r["angle"] for r in grad_rows], "o-")
axes[0].set_xlabel("KL(π_θ‖π_ref), nats")
axes[0].set_ylabel("angle, degrees")
axes[0].set_title("angle between the forward- and reverse-KL gradients", fontsize=9)
axes[1].semilogx([r["kl"] for r in grad_rows], [r["norm_ratio"] for r in grad_rows], "o-", color="C1")
axes[1].axhline(1.0, color="gray", ls=":")
axes[1].set_xlabel("KL(π_θ‖π_ref), nats")
axes[1].set_ylabel("length ratio, forward / reverse")
axes[1].set_title("length of the k3 gradient relative to the k2 gradient", fontsize=9)
fig.tight_layout();

# %% [markdown]
# For a KL penalty that only has to keep $\pi_\theta$ from wandering off, either gradient does the job
# near the reference; the difference matters when the policy has moved far, and when a paper's
# analysis assumes one KL while its code differentiates the other. Exercise 6 asks you to write $k_3$
# yourself.

# %% [markdown]
# ### Explore: the three estimators as the distributions move apart
#
# The explorer below puts the table of this section under sliders. On the left, the exact KL and the
# mean of each estimator against the separation $\alpha$ of the same family ($K = 20$ actions), with a
# band of one standard deviation of an $n$-sample average around $k_1$ and $k_3$; on the right, each
# estimator as a function of $\log r$ with the $K$ actions as dots whose area is $q(x)$, so you can see
# which actions make $k_1$ negative and why $k_3$ cannot be. Every number is an exact sum over the
# actions, not a simulation. Things to try: slide $\alpha$ to 0 (the explorer explains why nothing is
# left to estimate); watch $k_2$'s curve leave the KL; raise $n$ and see every band shrink as
# $1/\sqrt n$ while the means stay put. The static figure is the explorer at $\alpha = 1$ with
# $n = 16$: there $k_1$ is negative on more than half of the samples (by probability), $k_2$ overstates
# the KL by about 60%, and $k_3$'s spread is about half of $k_1$'s.

# %%
from rlbook.widgets.kl_explorer import kl_estimator_stats, kl_explorer, kl_readout, plot_kl_estimators

fig, axes = plt.subplots(1, 2, figsize=(8.4, 3.6), dpi=80)
plot_kl_estimators(1.0, num_samples=16, axes=axes)
fig.tight_layout()
print(kl_readout(1.0, num_samples=16)[0])
kl_at_1 = kl_estimator_stats(1.0, num_samples=16)
assert abs(kl_at_1["kl"] - kl_rows[5]["kl"]) < 1e-9  # the explorer's family is this section's (α = 1.0)
rl.claim("negative on more than half of the samples", kl_at_1["k1"]["p_negative"], low=0.5)
rl.claim("overstates the KL by about 60%", kl_at_1["k2"]["bias"] / kl_at_1["kl"], 0.6, abs=0.05)
rl.claim("about half of $k_1$'s", kl_at_1["k3"]["std"] / kl_at_1["k1"]["std"], 0.5, abs=0.05);

# %%
try:
    display(kl_explorer())  # needs ipywidgets; move the sliders in a live notebook
except ImportError:
    print("ipywidgets is not installed: the static figure above shows the explorer at α = 1")

# %% [markdown]
# ### Which way round? Forward and reverse KL
#
# A KL is not symmetric, and which way round it is taken decides what fitting a model to it does. Fit a
# model $\pi_\theta$ with too few degrees of freedom to a target $\pi_T$. The *forward* KL,
# $\mathrm{KL}(\pi_T\|\pi_\theta) = \sum_x \pi_T(x)\log\frac{\pi_T(x)}{\pi_\theta(x)}$, is large wherever the
# target has mass that the model lacks, so minimising it spreads the model over all of the target's mass:
# it is *mode-covering*. The *reverse* KL, $\mathrm{KL}(\pi_\theta\|\pi_T)$, is large wherever the model
# puts mass that the target lacks, so minimising it pulls the model onto one mode: it is *mode-seeking*.
# Supervised training on a teacher's samples minimises the forward KL (the cross-entropy, up to a
# constant); the KL penalty of RLHF (chapter 12) and on-policy distillation minimise the reverse one,
# each with the model's own samples, which is what the estimators of this section are for.
#
# The `distill` explorer fits a one-mode student (a location $\mu$ and a width $\sigma$ over 15 tokens)
# to a two-mode teacher, under GKD's generalised Jensen–Shannon divergence (Agarwal et al. 2023,
# arXiv:2306.13649; `rl.generalized_jsd`): $\beta = 0$ is the forward KL, $\beta = 1$ the reverse KL, and
# the values between mix the two. The static figure is the explorer at its defaults, modes 6 tokens apart
# with weights 0.6 and 0.4: the forward fit puts more than a quarter of its mass on each mode and about a
# third where the teacher has almost none (tokens under 1 %); the reverse fit puts more than 0.9 on the
# heavier mode. Things to try: move
# $\beta$ and find where the fit jumps from covering to seeking; set the weights equal; raise $\tau$.

# %%
from rlbook.widgets.distill_explorer import distill_explorer, distill_fits, distill_readout, plot_distill

fig, axes = plt.subplots(1, 2, figsize=(8.4, 3.7), dpi=80, gridspec_kw={"width_ratios": [1.55, 1.0]})
plot_distill(6.0, 0.6, 0.3, axes=axes)
fig.tight_layout()
print(distill_readout(6.0, 0.6, 0.3)[0])
fits = distill_fits(6.0, 0.6, 0.3)
rl.claim("more than a quarter of its mass on each mode", min(fits["forward"]["masses"]["left"],
                                                             fits["forward"]["masses"]["right"]), low=0.25)
rl.claim("about a third where the teacher has almost none", fits["forward"]["off_teacher"], 1 / 3, abs=0.02)
rl.claim("more than 0.9 on the heavier mode", fits["reverse"]["masses"]["left"], low=0.9);

# %%
try:
    display(distill_explorer())  # needs ipywidgets; move the sliders in a live notebook
except ImportError:
    print("ipywidgets is not installed: the static figure above shows the explorer at β = 0.3")

# %% [markdown]
# ## 5.9 Explore: what PPO does about large ratios
#
# PPO (chapter 7) limits the damage from large ratios by *clipping*: outside a band $[1-\varepsilon, 1+\varepsilon]$
# the surrogate stops rewarding further movement, so the gradient there is zero. CISPO instead clips
# the weight and keeps the gradient. The explorer below draws both from the library's own losses; the
# static figure shows PPO for a positive and a negative advantage, and CISPO.

# %%
from rlbook.widgets.clip_explorer import clip_explorer, plot_clip_objective

fig, axes = plt.subplots(2, 2, figsize=(8.4, 6.4), dpi=80)
fig.delaxes(axes[1, 1])
axes = axes.ravel()[:3]  # three panels in a 2 × 2 grid
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
#   enforce (chapters 6 and 7).
# * A KL is estimated from samples of $q = \pi_\theta$ with $r = \pi_{\text{ref}}/\pi_\theta$ by $k_1 = -\log r$
#   (unbiased, noisy, can be negative), $k_2 = \tfrac12(\log r)^2$ (biased, $\ge 0$) or $k_3 = r - 1 - \log r$
#   (unbiased, $\ge 0$, low variance while the policies are close) (5.8). Used as losses, their mean
#   gradients are $0$, $\nabla\mathrm{KL}(\pi_\theta\|\pi_{\text{ref}})$ (reverse) and
#   $\nabla\mathrm{KL}(\pi_{\text{ref}}\|\pi_\theta)$ (forward) (5.9).
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
# 6. Implement `my_kl_k3(log_probs, ref_log_probs)` from (5.8), working from
#    log-probabilities only, and check it with `rl.exercises.check("kl_k3", my_kl_k3)`. Why is
#    `torch.expm1(log_r) - log_r` better than `torch.exp(log_r) - 1 - log_r` when the policies are close?

# %% [markdown] tags=["solution"] jp-MarkdownHeadingCollapsed=true
# ## Solutions

# %% [markdown] tags=["solution"]
# ### Solution to exercise 1
#
# With $f \equiv c$ the self-normalised estimator is $\sum_i w_i c / \sum_i w_i = c$ for every batch:
# exact, zero variance. The ordinary one is $\frac cn\sum_i w_i$, which equals $c$ only on average; one
# sample has variance $c^2\,\mathrm{Var}_q[w] = c^2(\mathbb E_q[w^2] - 1) = c^2(e^{D_2(p\|q)} - 1)$, so for
# $f \equiv 1$ the batch of $n$ has variance $(\mathbb E_q[w^2] - 1)/n$: the price of §5.2 with nothing
# to estimate. On the pair $p, q$ of §5.4:

# %% tags=["solution"]
p1 = torch.softmax(z_q + 1.0 * direction, 0)
x1 = torch.multinomial(q.expand(2000, K), 50, replacement=True, generator=torch.Generator().manual_seed(7))
const = torch.full(x1.shape, 3.0)
snis = rl.importance_sampling_estimate(const, p1.log()[x1], q.log()[x1], self_normalized=True)
ordinary = rl.importance_sampling_estimate(const, p1.log()[x1], q.log()[x1])
print("self-normalised: every batch gives exactly 3:", bool(torch.allclose(snis, torch.full_like(snis, 3.0))))
print(f"ordinary: variance over batches of 50 = {float(ordinary.var()):.4f}, "
      f"formula 3²(E_q[w²] − 1)/50 = {9 * (float((p1 * p1 / q).sum()) - 1) / 50:.4f}")

# %% [markdown] tags=["solution"]
# ### Solution to exercise 2
#
# $w(x) = p(x)/q(x) = \exp(\mu x - \mu^2/2)$. Then
# $\mathbb E_q[w^2] = \int \mathcal N(x; 0, 1)\,e^{2\mu x - \mu^2}dx = e^{-\mu^2}e^{2\mu^2} = e^{\mu^2}$
# (the Gaussian moment generating function $\mathbb E[e^{tx}] = e^{t^2/2}$ with $t = 2\mu$), and
# $\mathrm{KL}(p\|q) = \mathbb E_p[\mu x - \mu^2/2] = \mu^2/2$. So $\mathrm{ESS}/n \to e^{-\mu^2} = e^{-2\,\mathrm{KL}}$,
# and $\mathrm{ESS}/n < 0.1$ once $\mu > \sqrt{\ln 10} \approx 1.52$, a KL of only $\ln 10 / 2 \approx 1.15$
# nats: two unit Gaussians whose means differ by one and a half standard deviations. A numerical
# integral confirms the closed forms:

# %% tags=["solution"]
grid_x = np.linspace(-30, 30, 200_001)
density_q = np.exp(-grid_x**2 / 2) / np.sqrt(2 * np.pi)
for mu in (0.5, 1.0, np.sqrt(np.log(10))):
    w = np.exp(mu * grid_x - mu**2 / 2)
    second = np.trapezoid(density_q * w**2, grid_x)
    kl_gauss = np.trapezoid(density_q * w * (mu * grid_x - mu**2 / 2), grid_x)  # E_p[log w] written under q
    print(f"μ = {mu:.3f}: E_q[w²] = {second:.4f} (e^μ² = {np.exp(mu**2):.4f}), KL = {kl_gauss:.4f} (μ²/2 = {mu**2 / 2:.4f}), "
          f"ESS/n → {1 / second:.3f}")

# %% [markdown] tags=["solution"]
# ### Solution to exercise 3
#
# Sampling from $p_\alpha$ and weighting by $q/p_\alpha$, the limit of $\mathrm{ESS}/n$ is
# $1/\mathbb E_{p_\alpha}[(q/p_\alpha)^2] = e^{-D_2(q\|p_\alpha)}$: the Rényi divergence with the roles
# swapped, which is bounded below by $\mathrm{KL}(q\|p_\alpha)$, not by $\mathrm{KL}(p_\alpha\|q)$. Neither
# divergence is symmetric, so the ESS is a different function of $\mathrm{KL}(p\|q)$. On this family the
# swapped direction is far less forgiving: as $\alpha$ grows, $p_\alpha$ piles its mass onto a few
# actions, so samples from it almost never visit the actions that $q$ still spreads its mass over, and
# the rare visits carry enormous weights $q/p_\alpha$. What hurts is the *sampler* missing places the
# *target* cares about.

# %% tags=["solution"]
print("  α   KL(p‖q)  ESS/n sampling q   ESS/n sampling p")
for alpha in (0.5, 1.0, 2.0, 4.0, 6.0):
    p_a = torch.softmax(z_q + alpha * direction, 0)
    print(f"{alpha:4.1f}  {float(rl.categorical_kl(z_q + alpha * direction, z_q)):6.3f}   "
          f"{1 / float((p_a**2 / q).sum()):10.3f}   {1 / float((q**2 / p_a).sum()):14.3f}")

# %% [markdown] tags=["solution"]
# ### Solution to exercise 4
#
# The reward $r_t$ depends only on the actions up to $t$, so the ratios of later steps have conditional
# mean 1 given everything up to $t$ and can be dropped without bias: $\sum_t (\prod_{k\le t}\rho_k)\,r_t$
# (here $\gamma = 1$). That removes noise from early rewards, which no longer carry the weights of the
# whole future. But the weight of $r_t$ is still a product of $t$ ratios, so its variance still grows
# exponentially in $t$: late rewards are as badly weighted as before. Measured on the MDP of §5.6 with
# $\alpha = 0.3$ (variance of one trajectory's estimate):

# %% tags=["solution"]
probs_old = torch.softmax(logits_old, -1)
probs_new = torch.softmax(logits_old + 0.3 * step_direction, -1)
print("  H   Var(whole-trajectory IS)   Var(per-decision IS)")
for H in horizons:
    mdp_h = rl.TabularMDP.random(S, A, gamma=1.0, horizon=H, seed=0)
    traj = mdp_h.sample_trajectories(probs_old, num_traj, generator=H)
    log_rho = rl.log_ratio(probs_new.log()[traj.states, traj.actions], probs_old.log()[traj.states, traj.actions])
    weight_up_to_t = (log_rho * traj.mask).cumsum(-1).exp()  # Π_{k ≤ t} ρ_k, (num_traj, H)
    rewards = traj.rewards * traj.mask
    whole = weight_up_to_t[:, -1] * rewards.sum(-1)
    per_decision = (weight_up_to_t * rewards).sum(-1)
    print(f"{H:3d}   {float(whole.var()):14.3f}   {float(per_decision.var()):18.3f}")

# %% [markdown] tags=["solution"]
# ### Solution to exercise 5
#
# $\hat A$ and the samples are fixed, so $\nabla_\theta(\rho_\theta\hat A) = \hat A\,\nabla\rho_\theta
# = \hat A\,\rho_\theta\,\nabla\log\pi_\theta(a\mid s)$, using $\nabla\rho = \rho\,\nabla\log\pi_\theta$ (the old
# policy does not depend on $\theta$). Averaging gives $\mathbb E_\text{old}[\rho\hat A\nabla\log\pi_\theta]$.
# Each sample's score is scaled by its ratio: one sample with $\rho = 50$ outweighs fifty ordinary ones,
# so the gradient has the variance problem of §5.2, and it pushes hardest on exactly the actions whose
# probability has already grown most, moving the policy further from the data, where the surrogate is
# least trustworthy. PPO's clip (chapter 7) switches such samples off. An autograd check:

# %% tags=["solution"]
gen5 = torch.Generator().manual_seed(3)
logits5, old_logits5 = torch.randn(6, 4, generator=gen5), torch.randn(6, 4, generator=gen5)
actions5, adv5 = torch.randint(0, 4, (6,), generator=gen5), torch.randn(6, generator=gen5)
theta5 = logits5.clone().requires_grad_(True)
lp5 = torch.log_softmax(theta5, -1).gather(-1, actions5[:, None]).squeeze(-1)
old_lp5 = torch.log_softmax(old_logits5, -1).gather(-1, actions5[:, None]).squeeze(-1)
ratio5 = rl.importance_ratio(lp5, old_lp5)
(grad_surrogate5,) = torch.autograd.grad((ratio5 * adv5).mean(), theta5, retain_graph=True)
score_form = sum(torch.autograd.grad(lp5[i], theta5, retain_graph=True)[0] * float(ratio5[i].detach() * adv5[i]) for i in range(6)) / 6
print("∇ mean(ρ Â) == mean(ρ Â ∇log π):", torch.allclose(grad_surrogate5, score_form, atol=1e-12))

# %% [markdown] tags=["solution"]
# ### Solution to exercise 6
#
# With $\log r = \log\pi_{\text{ref}} - \log\pi_\theta$, $k_3 = e^{\log r} - 1 - \log r$. Near
# $\pi_\theta = \pi_{\text{ref}}$, $\log r$ is tiny, $e^{\log r}$ rounds to a number next to 1, and
# subtracting 1 keeps only its few last digits: the result is mostly rounding error, exactly where the
# estimator should be $\approx\tfrac12(\log r)^2$. `expm1` computes $e^x - 1$ without forming $e^x$.

# %% tags=["solution"]
def my_kl_k3(log_probs, ref_log_probs):
    log_r = ref_log_probs - log_probs
    return torch.expm1(log_r) - log_r


rl.exercises.check("kl_k3", my_kl_k3)
tiny = torch.tensor([1e-6], dtype=torch.float32)
print("log r = 1e-6 in float32: exp − 1 form", float(torch.exp(tiny) - 1 - tiny),
      "| expm1 form", float(torch.expm1(tiny) - tiny), "| ½(log r)² =", 0.5e-12)
