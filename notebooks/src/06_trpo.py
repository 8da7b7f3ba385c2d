# %% [markdown]
# # 6. Trust regions: TRPO
#
# **Goals.** By the end of this chapter you can
# * state and check the *performance-difference lemma*, which measures the gain of a new policy with
#   the *old* policy's advantages;
# * explain why the *surrogate* objective, which freezes the state distribution, agrees with the true
#   return to first order and no further, and how far a KL penalty makes it a guaranteed lower bound;
# * derive TRPO's update: maximise the linearised surrogate inside a ball of average KL, whose
#   quadratic model is the Fisher information, giving the natural gradient scaled by
#   $\alpha = \sqrt{2\delta / g^\top F^{-1} g}$;
# * compute $F^{-1}g$ with conjugate gradient from Fisher-vector products only, and guard the step with
#   a backtracking line search;
# * train TRPO on CartPole and read its diagnostics.
#
# **Prerequisites.** Returns and the value functions $V^\pi$, $Q^\pi$, $A^\pi$ (§1.6–§1.8), chapter 3
# (REINFORCE), chapter 4 (GAE), chapter 5 (importance sampling).
#
# **The problem.** A policy gradient tells us a *direction*. It says nothing about *how far* to go: a
# step that is tiny in parameter space can change the policy a lot (a logit moving from 5 to 7 barely
# matters; from 0 to 2 it matters a great deal), and a policy that has stepped too far collects bad
# data, from which it may never recover. TRPO measures step length in the currency that matters —
# how much the *distribution over actions* changes — and refuses steps that move it more than $\delta$.

# %%
import inspect
import math

import matplotlib.pyplot as plt
import numpy as np
import torch

import rlbook as rl

rl.seed_everything(0)
# figures at twice the pixel density (sharp when zoomed)
# %config InlineBackend.figure_formats = ["retina"]
torch.set_num_threads(1)
SIZE = rl.get_size()
DEVICE = rl.get_device("cpu")  # CartPole-sized networks are fastest on the CPU

# %% [markdown]
# ## 6.1 The performance-difference lemma
#
# Write $J(\pi) = \mathbb E_{s_0\sim p_0}[V^\pi(s_0)]$ for the expected discounted return and
# $\rho_\pi(s) = \sum_{t\ge0}\gamma^t\,\mathbb P_\pi(s_t = s)$ for the (unnormalised) discounted state
# occupancy. For any two policies $\pi$ (old) and $\pi'$ (new),
#
# $$\begin{aligned}J(\pi') - J(\pi) &= \mathbb E_{\tau\sim\pi'}\Big[\sum_{t\ge0}\gamma^t A^{\pi}(s_t, a_t)\Big]\cr
#   &= \sum_s \rho_{\pi'}(s)\sum_a \pi'(a\mid s)\,A^\pi(s,a).\end{aligned} \tag{6.1}$$
#
# *Proof.* $A^\pi(s,a) = \mathbb E[r + \gamma V^\pi(s') - V^\pi(s)]$, so inside the expectation over a
# trajectory of $\pi'$ the sum telescopes:
# $\sum_t\gamma^t\big(r_t + \gamma V^\pi(s_{t+1}) - V^\pi(s_t)\big) = \sum_t\gamma^t r_t - V^\pi(s_0)$,
# whose expectation is $J(\pi') - J(\pi)$ because both policies start from the same $p_0$. Grouping the
# terms by state gives the second form. $\square$
#
# Read (6.1) carefully: the advantages are the **old** policy's (we can estimate them from old data),
# but the states are visited by the **new** policy, $\rho_{\pi'}$ — which we cannot know before we
# have run $\pi'$. That single obstacle shapes everything that follows.
#
# We check (6.1) exactly on a small random MDP, where `rl.TabularMDP` computes $J$, $A^\pi$ and
# $\rho_\pi$ by linear algebra.

# %%
# NBVAL_CHECK_OUTPUT
mdp = rl.TabularMDP.random(num_states=6, num_actions=3, gamma=0.9, seed=0)
g = torch.Generator().manual_seed(0)
logits_old = torch.randn(6, 3, generator=g, dtype=torch.float64)
logits_new = logits_old + torch.randn(6, 3, generator=g, dtype=torch.float64)
pi_old, pi_new = mdp.policy_probs(logits_old), mdp.policy_probs(logits_new)

lhs = mdp.expected_return(logits_new) - mdp.expected_return(logits_old)
rhs = (mdp.occupancy(pi_new) * (pi_new * mdp.advantages(pi_old)).sum(-1)).sum()
print(f"J(new) - J(old)                       = {float(lhs):.6f}")
print(f"sum_s rho_new(s) sum_a pi_new A_old   = {float(rhs):.6f}")
print("sum_a pi_old A_old = 0 in every state:", bool((pi_old * mdp.advantages(pi_old)).sum(-1).abs().max() < 1e-12))

# %% [markdown]
# ## 6.2 The surrogate: freeze the state distribution
#
# Replace $\rho_{\pi'}$ by $\rho_\pi$ in (6.1) — states from the data we already have:
#
# $$\begin{aligned}L_\pi(\pi') &= J(\pi) + \sum_s \rho_\pi(s)\sum_a \pi'(a\mid s)\,A^\pi(s,a)\cr
#   &= J(\pi) + \frac{1}{1-\gamma}\,\mathbb E_{s\sim d_\pi,\,a\sim\pi}\Big[\frac{\pi'(a\mid s)}{\pi(a\mid s)}A^\pi(s,a)\Big].\end{aligned} \tag{6.2}$$
#
# ($d_\pi = (1-\gamma)\rho_\pi$ is the normalised occupancy; the ratio is chapter 5's importance weight,
# which lets us evaluate $L_\pi(\pi')$ for any candidate $\pi'$ from samples of $\pi$.) With
# $\pi' = \pi_{\theta}$ and $\pi = \pi_{\theta_{\text{old}}}$:
#
# $$L(\theta_{\text{old}}) = J(\theta_{\text{old}}), \qquad
#   \nabla_\theta L(\theta)\big|_{\theta_{\text{old}}} = \nabla_\theta J(\theta)\big|_{\theta_{\text{old}}}. \tag{6.3}$$
#
# The first because $\sum_a\pi(a|s)A^\pi(s,a) = 0$; the second because changing $\rho$ is a
# second-order effect: $J - L = \sum_s(\rho_{\pi'} - \rho_\pi)(s)\sum_a\pi'(a|s)A^\pi(s,a)$ is a product
# of two factors that both vanish at $\pi' = \pi$. So a *small enough* step that improves $L$ improves
# $J$ — but (6.3) does not say how small. Below, $J$ and $L$ along a line through $\theta_{\text{old}}$:
# tangent at $t = 0$, apart further out.

# %%
# NBVAL_CHECK_OUTPUT
def surrogate_J(mdp, logits_old, logits):
    """L_{π_old}(π_θ) of (6.2), computed exactly on the tabular MDP (differentiable in `logits`)."""
    pi_o = mdp.policy_probs(logits_old)
    pi = mdp.policy_probs(logits)
    return mdp.expected_return(logits_old) + (mdp.occupancy(pi_o) * (pi * mdp.advantages(pi_o)).sum(-1)).sum()


theta = logits_old.clone().requires_grad_(True)
grad_J = torch.autograd.grad(mdp.expected_return(theta), theta)[0]
grad_L = torch.autograd.grad(surrogate_J(mdp, logits_old, theta), theta)[0]
print("L(old) == J(old):          ", bool(abs(surrogate_J(mdp, logits_old, logits_old) - mdp.expected_return(logits_old)) < 1e-12))
print("grad L == grad J at old:   ", bool((grad_L - grad_J).abs().max() < 1e-12))
print("|grad J| =", round(float(grad_J.norm()), 4))

direction = grad_J / grad_J.norm()
ts = np.linspace(-10, 20, 61)
J_line = [float(mdp.expected_return(logits_old + t * direction)) for t in ts]
L_line = [float(surrogate_J(mdp, logits_old, logits_old + t * direction)) for t in ts]
for t in (0.5, 2.0, 8.0, 20.0):
    J_t = float(mdp.expected_return(logits_old + t * direction))
    L_t = float(surrogate_J(mdp, logits_old, logits_old + t * direction))
    print(f"t = {t:4.1f}: J = {J_t:.4f}, L = {L_t:.4f}, J - L = {J_t - L_t:+.4f}")

# %%
fig, ax = plt.subplots(figsize=(5, 3), dpi=80)
ax.plot(ts, J_line, label="true return J")
ax.plot(ts, L_line, "--", label="surrogate L (old states)")
ax.axvline(0, color="gray", lw=0.5)
ax.set_xlabel("step t along the normalised gradient")
ax.set_ylabel("expected return")
ax.set_title("the surrogate is tangent to J at t = 0", fontsize=9)
ax.legend()
fig.tight_layout();

# %% [markdown]
# ## 6.3 How far can we trust $L$? A lower bound
#
# Kakade and Langford (2002) bounded $J - L$ for mixture policies; Schulman et al. (2015, Theorem 1)
# extended it to any pair of policies. With $\varepsilon = \max_{s,a}|A^\pi(s,a)|$ and the largest
# per-state KL, $D^{\max}_{\mathrm{KL}}(\pi,\pi') = \max_s \mathrm{KL}\big(\pi(\cdot|s)\,\|\,\pi'(\cdot|s)\big)$,
#
# $$J(\pi') \;\ge\; L_\pi(\pi') - C\,D^{\max}_{\mathrm{KL}}(\pi,\pi'), \qquad C = \frac{4\varepsilon\gamma}{(1-\gamma)^2}. \tag{6.4}$$
#
# The right side equals $J(\pi)$ at $\pi' = \pi$ and lies below $J$ everywhere, so *maximising it never
# decreases $J$*: a minorise–maximise scheme with a monotone-improvement guarantee. We check (6.4)
# on 300 random new policies at several distances from the old one.

# %%
# NBVAL_CHECK_OUTPUT
eps = float(mdp.advantages(pi_old).abs().max())
C = 4 * eps * mdp.gamma / (1 - mdp.gamma) ** 2
gaps, kls = [], []
for k in range(300):
    scale = [0.03, 0.1, 0.3, 1.0, 3.0][k % 5]
    cand = logits_old + scale * torch.randn(6, 3, generator=g, dtype=torch.float64)
    kl_max = float(rl.categorical_kl(logits_old, cand).max())
    J_new = float(mdp.expected_return(cand))
    L_new = float(surrogate_J(mdp, logits_old, cand))
    gaps.append(J_new - (L_new - C * kl_max))
    kls.append(kl_max)
gaps = np.array(gaps)
print(f"C = 4 eps gamma / (1-gamma)^2 = {C:.1f}")
print(f"bound (6.4) violated in {(gaps < -1e-12).sum()} of {len(gaps)} random policies")
print(f"smallest slack J - bound = {gaps.min():.4f};  median slack = {np.median(gaps):.3f}")

# %% [markdown]
# The bound always holds — and is very loose: with $\gamma = 0.9$ the penalty coefficient is
# $C = 4\gamma/(1-\gamma)^2\cdot\varepsilon = 360\,\varepsilon$ (here $\varepsilon$ is the largest
# $|A^\pi|$, so $C$ is the number printed above), and any KL worth talking about makes the bound useless. Steps that
# maximise $L - C\,D^{\max}_{\mathrm{KL}}$ would be minuscule. TRPO keeps the *shape* of the idea and
# changes two things:
#
# 1. the penalty becomes a **constraint**, $\mathrm{KL} \le \delta$, with $\delta$ a tunable step size
#    in nats (e.g. $0.01$);
# 2. the **maximum** over states becomes the **average** over visited states, which samples can estimate:
#
# $$\begin{aligned}&\max_\theta\; \mathbb E_{s,a\sim\pi_{\text{old}}}\Big[\tfrac{\pi_\theta(a|s)}{\pi_{\text{old}}(a|s)}\hat A(s,a)\Big]\cr
#   &\text{s.t.}\quad \overline{\mathrm{KL}}(\theta) = \mathbb E_{s\sim\pi_{\text{old}}}\big[\mathrm{KL}(\pi_{\text{old}}(\cdot|s)\,\|\,\pi_\theta(\cdot|s))\big] \le \delta.\end{aligned} \tag{6.5}$$
#
# ## 6.4 The average KL is locally a quadratic: the Fisher information
#
# At $\theta = \theta_{\text{old}}$ the average KL is 0 and minimal, so its gradient is 0, and its
# second-order Taylor expansion is
#
# $$\begin{gathered}\overline{\mathrm{KL}}(\theta) \approx \tfrac12(\theta-\theta_{\text{old}})^\top F\,(\theta-\theta_{\text{old}}),\cr
#   F = \nabla^2_\theta\overline{\mathrm{KL}}\big|_{\theta_{\text{old}}}
#   = \mathbb E_{s}\,\mathbb E_{a\sim\pi_{\text{old}}}\big[\nabla\log\pi(a|s)\,\nabla\log\pi(a|s)^\top\big].\end{gathered} \tag{6.6}$$
#
# The second equality — Hessian of the KL equals the Fisher information — follows from differentiating
# $\mathrm{KL} = \sum_a p_a(\log p_a - \log q_a(\theta))$ twice in $\theta$: the term
# $-\sum_a p_a \nabla^2\log q_a$ equals $\sum_a p_a \nabla\log q_a\nabla\log q_a^\top - \nabla^2\sum_a q_a$
# at $q = p$, and $\sum_a q_a = 1$. We check it on a small neural policy three ways: an explicit
# Fisher by enumerating actions, the autograd Hessian of the mean KL (both oracles in `rl.reference`),
# and the library's **Fisher-vector product**, which never forms $F$: it differentiates
# $(\nabla\overline{\mathrm{KL}})^\top v$ once more (Pearlmutter's trick), at the cost of two backward passes.

# %%
print(inspect.getsource(rl.fisher_vector_product).split('"""')[0] + '"""..."""' + inspect.getsource(rl.fisher_vector_product).split('"""')[2])

# %%
# NBVAL_CHECK_OUTPUT
torch.manual_seed(0)
policy = rl.mlp([3, 8, 3]).double()
obs = torch.randn(16, 3, dtype=torch.float64)
old_logits = policy(obs).detach()
mean_kl = lambda: rl.categorical_kl(old_logits, policy(obs)).mean()  # KL(π_old ‖ π_θ), 0 at θ_old

F_enum = rl.reference.fisher_matrix_enumerated(policy, obs)
F_hess = rl.reference.mean_kl_hessian(policy, obs)
v = torch.randn(F_enum.shape[0], generator=g, dtype=torch.float64)
Fv = rl.fisher_vector_product(mean_kl, policy, v)
eig = torch.linalg.eigvalsh(F_enum)
print(f"P = {F_enum.shape[0]} parameters")
print("F_enum == Hessian of mean KL:", bool((F_enum - F_hess).abs().max() < 1e-12))
print("fvp(v) == F_enum @ v:        ", bool((Fv - F_enum @ v).abs().max() < 1e-12))
print(f"largest eigenvalue {float(eig.max()):.4f}; rank of F = {int((eig > 1e-10 * eig.max()).sum())} "
      f"(at most N(A-1) = {16 * 2}); PSD: {bool(eig.min() > -1e-12)}")

# %% [markdown]
# $F$ is positive semi-definite but singular: it has rank at most $N(A-1)$ and many more parameters
# than that. Directions in its null space do not change the policy on these states at second order.
# That is why TRPO adds a little **damping**, solving with $F + \lambda I$.
#
# ## 6.5 The natural gradient and the size of the step
#
# Linearise the objective of (6.5) ($L \approx L(\theta_{\text{old}}) + g^\top s$, $g = \nabla L = \nabla J$) and use
# the quadratic KL (6.6):
#
# $$\max_s\; g^\top s \quad\text{s.t.}\quad \tfrac12 s^\top F s \le \delta. \tag{6.7}$$
#
# The Lagrangian $g^\top s - \tfrac{\mu}{2}(s^\top F s - 2\delta)$ is stationary at $s = \mu^{-1}F^{-1}g$;
# putting it on the boundary $\tfrac12 s^\top F s = \delta$ fixes $\mu$:
#
# $$s^\star = \alpha\,F^{-1}g, \qquad \alpha = \sqrt{\frac{2\delta}{g^\top F^{-1} g}}, \qquad
#   g^\top s^\star = \sqrt{2\delta\, g^\top F^{-1} g}. \tag{6.8}$$
#
# $F^{-1}g$ is Amari's **natural gradient** (Kakade 2001 for policies): the steepest-ascent direction
# when distance is measured by KL rather than by Euclidean length. It does not care how the policy is
# parameterised. On the tabular MDP, with softmax logits and exact gradients, we start from a
# confident but poor policy and compare plain gradient ascent $\theta \leftarrow \theta + \eta g$ (two
# learning rates) with natural steps of fixed size $\delta = 0.01$, recording $J$ and the KL each step
# actually takes.

# %%
# NBVAL_CHECK_OUTPUT
def tabular_step(logits, natural, lr=1.0, max_kl=0.01):
    """One exact-gradient step on the tabular MDP; returns the new logits and the step's mean KL."""
    theta = logits.clone().requires_grad_(True)
    grad = torch.autograd.grad(mdp.expected_return(theta), theta)[0].reshape(-1)
    d = mdp.occupancy(mdp.policy_probs(logits), normalize=True).detach()  # states weighted by d_π

    def mean_kl():
        return (d * rl.categorical_kl(logits.detach(), theta)).sum()

    if natural:
        fvp = lambda v: rl.fisher_vector_product(mean_kl, [theta], v, damping=1e-3)
        step = rl.natural_gradient_step(grad, fvp, max_kl, cg_iters=18)
    else:
        step = lr * grad
    new = (logits + step.reshape(logits.shape)).detach()
    return new, float((d * rl.categorical_kl(logits, new)).sum())


start = 3 * torch.randn(6, 3, generator=g, dtype=torch.float64)  # a confident, poor policy
curves, largest_kl = {}, {}
for name, natural, lr in (("vanilla lr 1", False, 1.0), ("vanilla lr 10", False, 10.0), ("natural δ=0.01", True, 0.0)):
    logits, J_curve, kl_steps = start.clone(), [], []
    for _ in range(40):
        J_curve.append(float(mdp.expected_return(logits)))
        logits, kl = tabular_step(logits, natural, lr)
        kl_steps.append(kl)
    curves[name] = J_curve
    largest_kl[name] = max(kl_steps)
    print(f"{name:15s}: J after 0/10/20/40 steps = {J_curve[0]:.3f} / {J_curve[10]:.3f} / {J_curve[20]:.3f} / "
          f"{J_curve[-1]:.3f};  largest KL of a step {max(kl_steps):.3f}")

# %%
fig, ax = plt.subplots(figsize=(5, 3), dpi=80)
for name, c in curves.items():
    ax.plot(c, label=name)
ax.set_xlabel("update")
ax.set_ylabel("expected return J")
ax.set_title("exact-gradient steps on the tabular MDP", fontsize=9)
ax.legend()
fig.tight_layout();

# %% [markdown]
# A fixed learning rate is wrong twice: early on, where the gradient is large, its steps move the
# policy a lot (the largest step of $\eta = 10$ moves it by about half a nat, fifty times $\delta$); on
# the plateau of a saturated softmax the gradient is tiny and so are the steps. The natural step moves
# the policy by the same $\delta$ every time — large logit changes where the softmax is saturated, small
# ones where it is sensitive — and from this starting policy, after 40 updates, it has reached a higher
# $J$ than either fixed learning rate. (Exact gradients on one MDP from one start: a deterministic
# computation, not a sample, so there is no seed to vary; another start can order the curves differently.) (The true KL of a natural step is $\delta$ only to second order — up to 0.014 here —
# and the last steps are smaller than $\delta$: once the policy is nearly deterministic, $F$ is nearly
# zero and the damping $\lambda$ dominates.)

# %%
rl.claim("about half a nat", largest_kl["vanilla lr 10"], 0.5)  # the words allow ±1/12
rl.claim("up to 0.014 here", largest_kl["natural δ=0.01"], 0.014)  # the words allow ±0.0005
rl.claim("a higher $J$ than either fixed learning rate",
         curves["natural δ=0.01"][-1] - max(curves["vanilla lr 1"][-1], curves["vanilla lr 10"][-1]), low=0.0);

# %% [markdown]
#
#
# ## 6.6 Conjugate gradient: $F^{-1}g$ without $F$
#
# A neural policy has $P$ = thousands to billions of parameters: $F$ cannot be stored, let alone
# inverted. Conjugate gradient (CG) solves $Fx = g$ using only products $Fv$ — exactly what
# `fisher_vector_product` provides. Starting from $x_0 = 0$, $r_0 = p_0 = g$:
#
# $$\begin{gathered}\alpha_k = \frac{r_k^\top r_k}{p_k^\top F p_k},\quad x_{k+1} = x_k + \alpha_k p_k,\cr
#   r_{k+1} = r_k - \alpha_k F p_k,\quad p_{k+1} = r_{k+1} + \frac{r_{k+1}^\top r_{k+1}}{r_k^\top r_k}p_k.\end{gathered} \tag{6.9}$$
#
# The directions $p_k$ are $F$-conjugate ($p_i^\top F p_j = 0$), so CG minimises
# $\tfrac12 x^\top F x - g^\top x$ over a growing Krylov subspace and is exact after $n$ steps in exact
# arithmetic. TRPO stops after about 10 steps: the large-eigenvalue directions — the ones that matter
# for the KL — converge first.

# %%
print(inspect.getsource(rl.conjugate_gradient).split('"""')[2])

# %%
# NBVAL_CHECK_OUTPUT
damping = 0.1
F_damped = F_enum + damping * torch.eye(F_enum.shape[0], dtype=torch.float64)
grad_vec = torch.randn(F_enum.shape[0], generator=g, dtype=torch.float64)
exact = torch.linalg.solve(F_damped, grad_vec)
fvp_nn = lambda v: rl.fisher_vector_product(mean_kl, policy, v, damping=damping)
for iters in (1, 3, 10, 30, F_enum.shape[0]):
    x = rl.conjugate_gradient(fvp_nn, grad_vec, iters=iters, tol=0.0)
    err = float((x - exact).norm() / exact.norm())
    print(f"CG {iters:3d} iterations: relative error " + (f"{err:.1e}" if err > 1e-12 else "< 1e-12"))

# %% [markdown]
# ## 6.7 The step hits the boundary; the line search checks reality
#
# `natural_gradient_step` runs CG for $x \approx F^{-1}g$ and scales it by $\sqrt{2\delta/x^\top F x}$
# (using $x^\top F x$ rather than $g^\top x$ keeps $\tfrac12 s^\top F s = \delta$ exact even when CG stops early).
# But (6.7) is a *model*: the true average KL at $\theta_{\text{old}} + s$ differs from $\tfrac12 s^\top F s$
# at third order, and the true surrogate from $g^\top s$ at second order. So TRPO ends with a
# **backtracking line search**: try $\theta_{\text{old}} + \beta^k s$ for $k = 0, 1, \dots$ and accept the
# first point where the real KL is at most $\delta$ and the real surrogate improved by at least a
# fraction of the predicted $\beta^k g^\top s$.

# %%
# NBVAL_CHECK_OUTPUT
actions = torch.randint(0, 3, (16,), generator=g)
advs = torch.randn(16, generator=g, dtype=torch.float64)
theta_old = rl.flat_params(policy)
old_lp = torch.log_softmax(old_logits, -1).gather(-1, actions[:, None]).squeeze(-1)


def surrogate():
    lp = torch.log_softmax(policy(obs), -1).gather(-1, actions[:, None]).squeeze(-1)
    return rl.trpo_surrogate(lp, old_lp, advs).mean()


def at(theta, fn):
    rl.set_flat_params(policy, theta)
    with torch.no_grad():
        return fn()


grad_s = rl.flat_grad(surrogate(), policy)
fvp_ls = lambda v: rl.fisher_vector_product(mean_kl, policy, v, damping=1e-3)
underestimate = []  # true KL of the full step / its quadratic model
for max_kl in (0.01, 0.1, 1.0):
    rl.set_flat_params(policy, theta_old)  # F is the Hessian of the KL at θ_old: evaluate it there
    step = rl.natural_gradient_step(grad_s, fvp_ls, max_kl, cg_iters=10)
    quad = 0.5 * float(step @ fvp_ls(step))
    true_kl = float(at(theta_old + step, mean_kl))
    underestimate.append(true_kl / quad)
    new, accepted, backtracks = rl.backtracking_line_search(
        lambda th: at(th, surrogate), lambda th: at(th, mean_kl), theta_old, step, max_kl, float(grad_s @ step))
    print(f"max_kl {max_kl:4.2f}: quadratic model {quad:.3f}, true KL of the full step {true_kl:.3f} -> "
          f"accepted {accepted} after {backtracks} backtracks, KL {float(at(new, mean_kl)):.3f}")
rl.set_flat_params(policy, theta_old)

# %% [markdown]
# Here the quadratic model *underestimates* the true KL of the full step two- to four-fold, even at
# $\delta = 0.01$: with 16 states and 59 parameters $F$ has many tiny eigenvalues, the damping is small,
# and the natural step moves far along directions the second-order model considers cheap. The line
# search catches every one of these steps and halves it, after which the constraint holds. (In the
# CartPole run below, seed 0, with damping 0.1 and 1024 states per batch, the quadratic model does far
# better: the true KL of an accepted step lands a little below $\delta$, and the printout counts the
# updates whose line search had to backtrack.)

# %%
rl.claim("two- to four-fold", min(underestimate), low=2.0)
rl.claim("two- to four-fold", max(underestimate), high=4.5);

# %% [markdown]
# **The whole picture in two dimensions.** Everything in §6.4–§6.7 can be drawn when the policy has
# only two parameters. Take a softmax over three actions with logits $z(\theta) = (\kappa\theta_1, \theta_2, 0)$
# on a one-step bandit with rewards $r = (1, 0, 0.5)$. With a single state the surrogate (6.2) is
# exact, $L(\theta) - L(\theta_{\text{old}}) = J(\theta) - J(\theta_{\text{old}})$, so the only model
# left to check is the KL's. Around $\theta_{\text{old}}$ (black dot) the figure shows the surrogate
# (green where it improves, pink where it drops), the exact trust region
# $\mathrm{KL}(\pi_{\text{old}}\,\|\,\pi_\theta) \le \delta$ (red), its quadratic model, the ellipse
# $\tfrac12\Delta\theta^\top F\,\Delta\theta = \delta$ (dashed blue), the vanilla step $\alpha g$ scaled
# to the same ellipse ($\tfrac12\alpha^2 g^\top F g = \delta$, grey), the natural step (6.8) (purple),
# and the line search's tries (crosses) and accepted point (star). All three panels use the same
# policy, $\pi_{\text{old}} = \mathrm{softmax}(-1, 1, 0)$: on the left with $\kappa = 1$ and
# $\delta = 0.2$; in the middle with $\kappa = 3$, a different parameterisation of the same family;
# on the right with $\delta = 1$. Every number comes from the library functions TRPO trains with.

# %%
from rlbook.widgets.trust_region_explorer import plot_trust_region, trust_region_explorer, trust_region_geometry

tr_panels = {"κ = 1, δ = 0.2": (1.0, 0.2), "κ = 3, δ = 0.2": (3.0, 0.2), "κ = 1, δ = 1": (1.0, 1.0)}
tr_z_old = (-1.0, 1.0)  # logits of π_old for actions 1 and 2; θ_old = (z₁/κ, z₂)
fig, axes = plt.subplots(2, 2, figsize=(8.4, 7.6), dpi=80)
fig.delaxes(axes[1, 1])
axes = axes.ravel()[:3]  # three panels in a 2 × 2 grid
tr_geo = {}
for ax, (name, (tr_kappa, tr_delta)) in zip(axes, tr_panels.items()):
    tr_theta_old = (tr_z_old[0] / tr_kappa, tr_z_old[1])
    tr_geo[name] = trust_region_geometry(tr_theta_old, tr_delta, tr_kappa)
    plot_trust_region(tr_theta_old, tr_delta, tr_kappa, ax=ax)
    tr_d = tr_geo[name]
    tr_to_logits = np.array([tr_kappa, 1.0])  # Δz = (κΔθ₁, Δθ₂)
    print(f"{name}: natural Δz = {np.round(tr_d['natural'] * tr_to_logits, 3)}, exact KL {tr_d['exact_kl'][0]:.3f}, "
          f"ΔL {tr_d['improvement'][0]:.3f} | vanilla Δz = {np.round(tr_d['vanilla'] * tr_to_logits, 3)}, "
          f"exact KL {tr_d['exact_kl'][1]:.3f}, ΔL {tr_d['improvement'][1]:.3f} | accepted fraction "
          f"{float(tr_d['accepted_fraction']):g}, KL there {float(tr_d['accepted_kl']):.3f}")
fig.tight_layout();

# %% [markdown]
# Three things to read off the picture.
#
# * Both steps end on the ellipse, but the natural step goes further uphill: it maximises the linear
#   model $g^\top s$ on the ellipse. On the left it gains $\Delta L = 0.278$ against 0.246 for the
#   vanilla step.
# * The ellipse is only a model. The full natural step's exact KL is 0.25, a quarter above
#   $\delta = 0.2$, so the line search halves it once, to a KL of 0.057 (a backtracking factor of
#   $\beta = 0.5$ is coarse: halving a step roughly quarters its KL). At $\delta = 1$ (right) the red region
#   is visibly lopsided, and the full step overshoots it by about a third.
# * Rescaling $\theta_1$ (middle) squashes the ellipse and turns the vanilla step, whose exact KL
#   jumps to 0.33, far outside the trust region it was scaled to. The natural step changes the
#   logits by exactly the same $\Delta z$ as on the left. In logits its direction is
#   $(r_1 - r_3,\, r_2 - r_3)$ for *every* $\pi_{\text{old}}$, because
#   $(\mathrm{diag}\,\pi - \pi\pi^\top)(r - r_3) = \pi\odot(r - J)$ is the gradient in logits. The natural
#   gradient does not depend on how the policy is parameterised; the vanilla gradient does
#   (exercise 3 asks you to see this on the MDP).

# %%
tr_left, tr_mid, tr_right = tr_geo["κ = 1, δ = 0.2"], tr_geo["κ = 3, δ = 0.2"], tr_geo["κ = 1, δ = 1"]
rl.claim("it gains $\\Delta L = 0.278$", tr_left["improvement"][0], 0.278, abs=0.0005)
rl.claim("against 0.246 for the vanilla step", tr_left["improvement"][1], 0.246, abs=0.0005)
rl.claim("The full natural step's exact KL is 0.25", tr_left["exact_kl"][0], 0.25, abs=0.005)
rl.claim("the line search halves it once", float(tr_left["accepted_fraction"]), 0.5, abs=0.0)
rl.claim("to a KL of 0.057", float(tr_left["accepted_kl"]), 0.057, abs=0.0005)
rl.claim("the full step overshoots it by about a third", tr_right["exact_kl"][0] / 1.0 - 1.0, 1 / 3, abs=0.03)
rl.claim("whose exact KL jumps to 0.33", tr_mid["exact_kl"][1], 0.33, abs=0.005)
rl.claim("exactly the same $\\Delta z$ as on the left",
         np.abs(tr_mid["natural"] * [3.0, 1.0] - tr_left["natural"]).max(), high=1e-9);

# %% [markdown]
# In the explorer below, the sliders set $\delta$, $\kappa$ and the logits $z_1, z_2$ of
# $\pi_{\text{old}}$ (so $\theta_{\text{old}} = (z_1/\kappa, z_2)$), and the readout prints $g$, $F$,
# both steps with their quadratic and exact KL and their surrogate gain, and the line search's
# tries. Things to try: raise $\delta$ from 0.01 to 1 and watch the exact region part from the
# ellipse; move $z_1, z_2$ to a corner, where one action is nearly impossible, and watch the ellipse
# stretch along the direction that barely changes the policy ($F$ nearly singular); move $\kappa$ and
# check that the natural step's effect on the policy stays put. $\delta = 0$ is refused: the trust
# region is then the single point $\theta_{\text{old}}$, and no step is possible.

# %%
try:
    explorer = trust_region_explorer()  # needs ipywidgets; move the sliders in a live notebook
    display(explorer)
except ImportError:
    print("ipywidgets is not installed: the static figure above shows the same geometry")

# %% [markdown]
#
#
# ## 6.8 The algorithm, and TRPO on CartPole
#
# One TRPO update, as `rl.train_trpo` runs it (`rl.trpo_policy_update` is steps 3–6):
#
# 1. collect a rollout with $\pi_{\theta_{\text{old}}}$ (8 CartPole copies, `rl.collect_rollout`);
# 2. GAE advantages with the critic (chapter 4), standardised;
# 3. $g = \nabla_\theta \operatorname{mean}(\rho\hat A)$ at $\theta_{\text{old}}$;
# 4. $x \approx (F+\lambda I)^{-1}g$ by 10 CG iterations of Fisher-vector products;
# 5. $s = \sqrt{2\delta / x^\top F x}\;x$;
# 6. line search on the real surrogate and the real mean KL;
# 7. fit the critic by a few epochs of Adam on $\tfrac12(V - \hat R)^2$.

# %%
print(inspect.getsource(rl.trpo_policy_update))

# %%
cfg = rl.TRPOConfig(seed=0, total_env_steps=rl.by_size(100_000, 300_000),
                    stop_at_return=rl.by_size(475.0, None), device=str(DEVICE))
print(cfg)
hist_trpo = rl.train_trpo(cfg)
steps_trpo = hist_trpo.steps_to_threshold(475, 20)
print(f"rolling-20 return reached 475 after {steps_trpo} env steps ({len(hist_trpo.episode_returns)} episodes, "
      f"{hist_trpo.num_updates} updates)")
assert steps_trpo is not None and steps_trpo <= 100_000

# %%
fig, axes = plt.subplots(2, 2, figsize=(8.4, 5.6), dpi=80)
fig.delaxes(axes[1, 1])
axes = axes.ravel()[:3]  # three panels in a 2 × 2 grid
axes[0].plot(hist_trpo.episode_end_steps, hist_trpo.episode_returns, ".", alpha=0.3, label="one episode")
axes[0].plot(hist_trpo.episode_end_steps, hist_trpo.rolling_returns(20), label="mean of the last 20")
axes[0].axhline(475, color="gray", ls=":")
axes[0].set_xlabel("env steps")
axes[0].set_ylabel("episode return")
axes[0].set_title("return", fontsize=9)
axes[0].legend(fontsize=9)
axes[1].plot(hist_trpo["env_steps"], hist_trpo["kl"], label="mean KL after the step")
axes[1].axhline(cfg.max_kl, color="gray", ls=":", label="max_kl (δ)")
axes[1].set_xlabel("env steps")
axes[1].set_ylabel("KL(π_old‖π_θ), nats")
axes[1].set_title("size of each accepted step", fontsize=9)
axes[1].legend(fontsize=9)
axes[2].plot(hist_trpo["env_steps"], hist_trpo["expected_improvement"], label="predicted, gᵀs")
axes[2].plot(hist_trpo["env_steps"], hist_trpo["surrogate_improvement"], label="realised")
axes[2].set_xlabel("env steps")
axes[2].set_ylabel("surrogate improvement")
axes[2].set_title("predicted vs realised improvement", fontsize=9)
axes[2].legend(fontsize=9)
fig.tight_layout();

# %% [markdown]
# Every accepted step keeps the true KL under `max_kl` (middle), typically a little below: the
# quadratic model of the KL slightly overestimates the true KL along these directions. The realised
# improvement of the surrogate tracks the linear prediction $g^\top s$ (right).

# %%
accepted = hist_trpo["step_accepted"] > 0
print(f"updates: {hist_trpo.num_updates}; accepted: {int(accepted.sum())}; "
      f"accepted without backtracking: {int((hist_trpo['backtracks'] == 0).sum())}; "
      f"largest KL of an accepted step: {hist_trpo['kl'][accepted].max():.4f} (max_kl {cfg.max_kl})")
rl.claim("Every accepted step keeps the true KL under `max_kl`", hist_trpo["kl"][accepted].max(), high=cfg.max_kl)
kl_share = hist_trpo["kl"][accepted] / cfg.max_kl  # true KL of each accepted step, as a share of max_kl
print(f"true KL of an accepted step / max_kl: median {np.median(kl_share):.2f}, range {kl_share.min():.2f} to {kl_share.max():.2f}")
rl.claim("typically a little below", float(np.median(kl_share)), low=0.5, high=0.99);

# %%
rl.report_headline(f"TRPO (max_kl {cfg.max_kl}): CartPole rolling-20 return 475 after {steps_trpo:,} env steps (seed 0)")

# %% [markdown]
# ## Summary
#
# * The performance-difference lemma (6.1) measures a new policy with the old policy's advantages but
#   the new policy's states. Freezing the states gives the surrogate $L$ (6.2), exact to first order (6.3).
# * A KL penalty turns $L$ into a lower bound on $J$ (6.4) — a monotone-improvement guarantee, far too
#   conservative to use as stated. TRPO instead constrains the *average* KL to $\delta$ (6.5).
# * The Hessian of the average KL is the Fisher information (6.6). Linear objective + quadratic
#   constraint gives the natural-gradient step $s = \sqrt{2\delta/g^\top F^{-1}g}\,F^{-1}g$ (6.8).
# * Conjugate gradient (6.9) finds $F^{-1}g$ from Fisher-vector products alone (two backward passes each);
#   a backtracking line search checks the real KL and the real surrogate.
# * TRPO solves CartPole with every accepted update inside the trust region.
#
# TRPO's machinery — double backprop, CG, a line search — is heavy, and it does not mix with shared
# actor–critic networks or with minibatch SGD. Chapter 7's PPO keeps the trust-region *idea* with a
# first-order, minibatch-friendly objective.
#
# ## Exercises
#
# 1. **PDL by sampling.** Estimate the right side of (6.1) by Monte Carlo: sample trajectories of
#    $\pi'$ with `mdp.sample_trajectories` and sum $\gamma^t A^\pi(s_t,a_t)$. Check it agrees with the
#    exact value within 4 standard errors.
# 2. **The bound's tightness.** For the random policies of §6.3, plot $J(\pi') - J(\pi)$ against
#    $L(\pi') - L(\pi)$. Where do they disagree most — at large KL, or where $\rho_{\pi'}$ differs most from $\rho_\pi$?
# 3. **Parameterisation invariance.** Replace the softmax logits of §6.5 by $\theta' = 3\theta$
#    (so $\pi = \mathrm{softmax}(\theta'/3)$). Show the vanilla-gradient curve changes and the natural one does not.
# 4. **Empirical vs true Fisher.** With `rl.per_sample_grads` and `rl.score_fisher_vector_product`,
#    build $F$ from 10, 100 and 1000 *sampled* actions per state and compare with `F_enum`.
# 5. **CG iterations.** Train TRPO on CartPole with `cg_iters` 1, 3 and 10. Which is slower to solve it? Why
#    is `cg_iters=1` (a Fisher-scaled vanilla gradient) still a trust-region method?
# 6. **No line search.** Set `max_backtracks=1` and `max_kl=0.2`. How often is the step rejected, and
#    what happens to learning?

# %% [markdown] tags=["solution"] jp-MarkdownHeadingCollapsed=true
# ## Solutions

# %% [markdown] tags=["solution"]
# ### Solution to exercise 1
#
# Sample trajectories of $\pi'$ (cut at 100 steps, where $\gamma^{100} \approx 3\cdot10^{-5}$ makes the
# rest negligible), weight the *old* advantages by $\gamma^t$ and average. The standard error comes from
# the spread across trajectories.

# %% tags=["solution"]
horizon = 100
traj = mdp.sample_trajectories(pi_new, 4000, horizon=horizon, generator=11)
discount = mdp.gamma ** torch.arange(horizon, dtype=torch.float64)
per_trajectory = (discount * mdp.advantages(pi_old)[traj.states, traj.actions] * traj.mask).sum(-1)
estimate, std_err = float(per_trajectory.mean()), float(per_trajectory.std()) / math.sqrt(len(per_trajectory))
print(f"Monte Carlo {estimate:.4f} ± {std_err:.4f} (1 s.e.); exact J(new) − J(old) = {float(lhs):.4f}; "
      f"within 4 s.e.: {abs(estimate - float(lhs)) < 4 * std_err}")
assert abs(estimate - float(lhs)) < 4 * std_err

# %% [markdown] tags=["solution"]
# ### Solution to exercise 2
#
# Near the old policy the two changes agree (the surrogate is exact to first order); they part as the
# KL grows. The disagreement $|(J - J_{\text{old}}) - (L - J_{\text{old}})| = |J - L|$ is
# $\sum_s(\rho_{\pi'} - \rho_\pi)(s)\sum_a\pi'(a|s)A^\pi(s,a)$: it needs *both* a changed state
# distribution and a new policy that prefers actions with non-zero old advantage, and both grow with the
# KL, so it is largest at large KL, and among policies of similar KL, largest where the occupancy moved
# most.

# %% tags=["solution"]
g2 = torch.Generator().manual_seed(21)
rows2 = []
for k in range(300):
    cand = logits_old + [0.03, 0.1, 0.3, 1.0, 3.0][k % 5] * torch.randn(6, 3, generator=g2, dtype=torch.float64)
    occupancy_shift = float((mdp.occupancy(mdp.policy_probs(cand)) - mdp.occupancy(pi_old)).abs().sum())
    rows2.append((float(rl.categorical_kl(logits_old, cand).max()), float(mdp.expected_return(cand) - mdp.expected_return(logits_old)),
                  float(surrogate_J(mdp, logits_old, cand) - mdp.expected_return(logits_old)), occupancy_shift))
kl2, dJ, dL, shift = map(np.array, zip(*rows2))
fig, axes = plt.subplots(1, 2, figsize=(8.4, 3.4), dpi=80)
points = axes[0].scatter(dL, dJ, c=np.log10(kl2), s=8, cmap="viridis")
lim = [min(dL.min(), dJ.min()), max(dL.max(), dJ.max())]
axes[0].plot(lim, lim, "k:", lw=1)
axes[0].set_xlabel("surrogate change L(π') − L(π)")
axes[0].set_ylabel("true change J(π') − J(π)")
axes[0].set_title("agreement along the diagonal", fontsize=9)
fig.colorbar(points, ax=axes[0], label="log10 of the largest per-state KL")
axes[1].loglog(shift, np.abs(dJ - dL) + 1e-12, ".", ms=4)
axes[1].set_xlabel("total change of the state occupancy, Σ|ρ_π' − ρ_π|")
axes[1].set_ylabel("|J − L|")
axes[1].set_title("the gap follows the occupancy shift", fontsize=9)
fig.tight_layout();
print("rank correlation of |J − L| with the KL:", round(float(np.corrcoef(np.argsort(np.argsort(kl2)), np.argsort(np.argsort(np.abs(dJ - dL))))[0, 1]), 2),
      "| with the occupancy shift:", round(float(np.corrcoef(np.argsort(np.argsort(shift)), np.argsort(np.argsort(np.abs(dJ - dL))))[0, 1]), 2))

# %% [markdown] tags=["solution"]
# ### Solution to exercise 3
#
# With $\theta' = 3\theta$ the chain rule gives $\nabla_{\theta'}J = \tfrac13\nabla_\theta J$, and a step
# $\eta\nabla_{\theta'}J$ in $\theta'$ is a step $\tfrac{\eta}{9}\nabla_\theta J$ in $\theta$: vanilla gradient
# ascent becomes nine times slower. The Fisher transforms as $F' = \tfrac19 F$, so
# $F'^{-1}\nabla_{\theta'}J = 3F^{-1}\nabla_\theta J$, which is the same change of policy, and the KL
# constraint fixes the same step length: the natural-gradient curve is nearly unchanged. The small
# difference left comes from the damping and from stopping CG after 18 iterations, neither of which is
# invariant to the parameterisation.

# %% tags=["solution"]
def my_step(phi, scale, natural, lr=1.0, max_kl=0.01):
    """One exact-gradient step in the parameters φ = scale·θ (policy softmax(φ / scale))."""
    phi = phi.clone().requires_grad_(True)
    grad = torch.autograd.grad(mdp.expected_return(phi / scale), phi)[0].reshape(-1)
    old = phi.detach() / scale
    d = mdp.occupancy(mdp.policy_probs(old), normalize=True).detach()
    if natural:
        fvp = lambda v: rl.fisher_vector_product(lambda: (d * rl.categorical_kl(old, phi / scale)).sum(), [phi], v, damping=1e-5)
        step = rl.natural_gradient_step(grad, fvp, max_kl, cg_iters=18)
    else:
        step = lr * grad
    return (phi + step.reshape(phi.shape)).detach()


for natural in (False, True):
    finals = []
    for scale in (1.0, 3.0):
        phi = scale * start
        for _ in range(20):
            phi = my_step(phi, scale, natural)
        finals.append(float(mdp.expected_return(phi / scale)))
    print(f"{'natural' if natural else 'vanilla'}: J after 20 steps with θ: {finals[0]:.4f}, with θ' = 3θ: {finals[1]:.4f}")

# %% [markdown] tags=["solution"]
# ### Solution to exercise 4
#
# The empirical Fisher averages $\nabla\log\pi\,\nabla\log\pi^\top$ over *sampled* actions instead of
# weighting every action by its probability. With 16 states and 3 actions there are only 48 distinct
# score vectors, so $N$ samples per state just set the weight of each: count$/(16N)$. The error falls
# as $N$ grows, at the Monte Carlo rate $1/\sqrt N$ on average (each $N$ here is one random draw, so the
# decrease is noisy). (The "empirical Fisher" of the literature that uses the
# *observed* actions of a data set, rather than actions sampled from the model, is a different and
# biased object.)

# %% tags=["solution"]
all_actions = torch.arange(3).repeat(16)  # every action of every state
all_states = torch.arange(16).repeat_interleave(3)
log_probs_all = torch.log_softmax(policy(obs), -1)[all_states, all_actions]  # (48,)
scores = rl.per_sample_grads(log_probs_all, policy)  # (48, P)
probs_all = torch.softmax(old_logits, -1)
for n_per_state in (10, 100, 1000):
    sampled = torch.multinomial(probs_all, n_per_state, replacement=True, generator=torch.Generator().manual_seed(n_per_state))
    counts = torch.stack([torch.bincount(row, minlength=3) for row in sampled]).reshape(-1).double()
    weights = counts / counts.sum()
    F_emp = scores.T @ (weights[:, None] * scores)
    check = torch.allclose(F_emp @ v, rl.score_fisher_vector_product(scores, v, weights=weights))
    print(f"N = {n_per_state:4d} per state: relative error ‖F_emp − F_enum‖ / ‖F_enum‖ = "
          f"{float((F_emp - F_enum).norm() / F_enum.norm()):.3f}  (library product agrees: {check})")

# %% [markdown] tags=["solution"]
# ### Solution to exercise 5
#
# `cg_iters=1` returns $x = \frac{g^\top g}{g^\top F g}\,g$: the plain gradient direction. It is still a
# trust-region method because `natural_gradient_step` scales $x$ so that the quadratic KL $\tfrac12 s^\top F s$
# equals $\delta$, and the line search then checks the real KL: every update moves the policy by the
# same amount, only in a worse direction. So it still learns, but each update should gain less (on one
# batch the cell below measures the predicted gain $g^\top s$ of each setting), and the reasoning predicts
# that it needs more updates than `cg_iters=10`, with `cg_iters=3` in between (the table of §6.6 shows how
# far one and three iterations are from $F^{-1}g$). Whether that shows in env steps to 475 is a question
# for paired seeds: chapter 7 (§7.5) shows how widely one algorithm's seeds spread on CartPole. On the
# small network of §6.7:

# %% tags=["solution"]
rl.set_flat_params(policy, theta_old)
exact_natural = torch.linalg.solve(F_enum + 1e-3 * torch.eye(F_enum.shape[0], dtype=torch.float64), grad_s)
for iters in (1, 3, 10):
    step = rl.natural_gradient_step(grad_s, fvp_ls, 0.01, cg_iters=iters)
    cosine = float(step @ exact_natural / (step.norm() * exact_natural.norm()))
    print(f"cg_iters {iters:2d}: quadratic KL ½sᵀFs = {0.5 * float(step @ fvp_ls(step)):.4f}, predicted gain gᵀs = "
          f"{float(grad_s @ step):.4f}, cosine with the exact natural gradient {cosine:.3f}")

# %% [markdown] tags=["solution"]
# ### Solution to exercise 6
#
# With one try the line search can only accept or reject the full step. At $\delta = 0.2$ the
# quadratic model is poor (§6.7: on the small network the true KL of the full step was several times
# the model's), so many full steps violate the constraint and are rejected outright: those updates
# leave the policy unchanged and waste their batch. The steps that are accepted are large, so expect
# learning to be erratic (a claim about training runs that needs paired seeds to test). On the network
# of §6.7:

# %% tags=["solution"]
rl.set_flat_params(policy, theta_old)
step = rl.natural_gradient_step(grad_s, fvp_ls, 0.2, cg_iters=10)
for tries in (1, 10):
    new, accepted, backtracks = rl.backtracking_line_search(
        lambda th: at(th, surrogate), lambda th: at(th, mean_kl), theta_old, step, 0.2, float(grad_s @ step),
        max_backtracks=tries)
    print(f"max_backtracks {tries:2d}: accepted {accepted} after {backtracks} backtracks, KL {float(at(new, mean_kl)):.3f}")
rl.set_flat_params(policy, theta_old)
