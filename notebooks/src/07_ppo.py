# %% [markdown]
# # 7. Proximal policy optimisation: PPO
#
# **Goals.** By the end of this chapter you can
# * turn TRPO's KL *constraint* into a KL *penalty* and adapt its coefficient $\beta$;
# * write PPO's clipped objective, show that its $\min$ is a per-sample switch that zeroes the gradient
#   once a sample's ratio has moved far enough in the helpful direction, and check that by autograd;
# * explain *clip-higher* (decoupled $\varepsilon_{\text{low}}$, $\varepsilon_{\text{high}}$) with the
#   $0.01 \to 0.012$ example;
# * read a PPO training loop (rollout → GAE → epochs of minibatch SGD) and its diagnostics
#   (`approx_kl`, `clip_fraction`, `explained_variance`);
# * compare REINFORCE, TRPO and PPO on CartPole by env steps to a rolling-20 return of 475.
#
# **Prerequisites.** Chapter 4 (GAE), chapter 5 (importance ratios), chapter 6 (TRPO).
#
# **The problem.** TRPO takes *one* carefully sized step per batch of data, computed with second-order
# machinery (Fisher-vector products, conjugate gradient, a line search). Data is expensive; we would
# like to take *many* cheap first-order steps (Adam, minibatches) on the same batch, without the policy
# running away from the one that collected it. PPO gets most of TRPO's safety with a loss you can hand
# to any optimiser.

# %%
import inspect

import matplotlib.pyplot as plt
import numpy as np
import torch

import rlbook as rl
from rlbook.widgets.clip_explorer import plot_clip_objective

rl.seed_everything(0)
torch.set_num_threads(1)
SIZE = rl.get_size()
DEVICE = rl.get_device("cpu")  # CartPole-sized networks are fastest on the CPU

# %% [markdown]
# ## 7.1 From a constraint to a penalty
#
# TRPO solves $\max_\theta L(\theta)$ subject to $\overline{\mathrm{KL}}(\theta) \le \delta$, with
# $L(\theta) = \mathbb E\big[\rho_\theta\,\hat A\big]$ and $\rho_\theta = \pi_\theta(a|s)/\pi_{\theta_{\text{old}}}(a|s)$.
# Lagrangian duality says that for the right multiplier $\beta$ the same $\theta$ maximises the
# *penalised* objective
#
# $$L^{\mathrm{KLPEN}}(\theta) = \mathbb E\big[\rho_\theta\,\hat A - \beta\,\mathrm{KL}\big(\pi_{\theta_{\text{old}}}(\cdot|s)\,\|\,\pi_\theta(\cdot|s)\big)\big], \tag{7.1}$$
#
# which is unconstrained: any gradient method, many steps, minibatches. The catch is that the right
# $\beta$ is unknown and changes during training. PPO's first variant adapts it after every update
# from the measured KL $d$:
#
# $$\beta \leftarrow \beta/2 \ \text{ if } d < d_{\text{targ}}/1.5, \qquad \beta \leftarrow 2\beta \ \text{ if } d > 1.5\,d_{\text{targ}}. \tag{7.2}$$
#
# A small experiment: one state, four actions, fixed advantages; each "update" maximises (7.1) exactly
# (every action enumerated) by 100 Adam steps, then (7.2) adjusts $\beta$, with $d_{\text{targ}} = 0.01$.
# Starting from $\beta = 0.5$, the first update overshoots badly (a KL of about 0.5 nats, fifty times
# the target); $\beta$ doubles twice and the KL then stays within a factor of about two of the target,
# while $\beta$ drifts down again as the policy becomes confident and each update moves it less.

# %%
# NBVAL_CHECK_OUTPUT
advantages4 = torch.tensor([1.0, 0.5, -0.5, -1.0], dtype=torch.float64)
logits = torch.zeros(4, dtype=torch.float64)
beta, target_kl = 0.5, 0.01
for update in range(8):
    old_logits = logits.clone()
    theta = logits.clone().requires_grad_(True)
    opt = torch.optim.Adam([theta], lr=0.05)
    old_lp = torch.log_softmax(old_logits, -1)
    for _ in range(100):
        lp = torch.log_softmax(theta, -1)
        kl = rl.categorical_kl(old_logits, theta)
        # E_{a~π_old}[loss] with every action enumerated: weights π_old(a).
        loss = (old_lp.exp() * rl.kl_penalty_loss(lp, old_lp, advantages4, kl, beta)).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
    logits = theta.detach()
    d = float(rl.categorical_kl(old_logits, logits))
    print(f"update {update}: beta = {beta:6.3f}  KL = {d:.4f}  pi = {np.round(torch.softmax(logits, -1).numpy(), 3)}")
    beta = rl.adaptive_kl_coef(beta, d, target_kl)

# %% [markdown]
# It works, but it is a feedback controller wrapped around the optimiser: $\beta$ lags, and while it is
# wrong the updates are too big or too small. The PPO paper found a simpler device that does better.
#
# ## 7.2 The clipped objective
#
# Instead of penalising distance, remove the *incentive* to move a sample's ratio beyond
# $[1-\varepsilon, 1+\varepsilon]$:
#
# $$L^{\mathrm{CLIP}}(\theta) = \mathbb E\Big[\min\big(\rho_\theta\hat A,\ \mathrm{clip}(\rho_\theta, 1-\varepsilon, 1+\varepsilon)\,\hat A\big)\Big]. \tag{7.3}$$
#
# Take $\varepsilon = 0.2$. If $\hat A > 0$ we want $\rho$ to grow; once $\rho > 1.2$ the clipped term
# ($1.2\hat A$) is the smaller one, a constant, so pushing further gains nothing. If $\hat A < 0$ we want
# $\rho$ to shrink; below $0.8$ the clipped term $0.8\hat A$ is the smaller one. In the other two
# directions — a ratio that moved the *wrong* way — the unclipped term is the minimum and the gradient
# stays on, pulling it back. So the $\min$ is a **switch**:
#
# $$\nabla_\theta L^{\mathrm{CLIP}} = \mathbb E\big[\hat A\,\rho_\theta\,\nabla_\theta\log\pi_\theta(a|s)\cdot
#   \mathbb 1\{\text{not }(\hat A>0 \wedge \rho>1+\varepsilon)\ \text{and not }(\hat A<0\wedge\rho<1-\varepsilon)\}\big]. \tag{7.4}$$
#
# At $\theta = \theta_{\text{old}}$ ($\rho = 1$) every sample is inside the band, so the first PPO step is
# exactly the policy gradient; clipping only acts on later epochs over the same batch. Two worked rows
# (as in the seed tables): $\rho = 1.5$, $\hat A = +1$: $\min(1.5, 1.2) = 1.2$; $\rho = 0.5$,
# $\hat A = -1$: $\min(-0.5, -0.8) = -0.8$.
#
# The library's `clipped_surrogate_loss` is (7.3) negated and unreduced; `clipped_surrogate_loss_masked`
# is (7.4) written as a mask. We check them against each other, against the worked rows, and check that
# the gradient is exactly zero in the clipped region.

# %%
print(inspect.getsource(rl.clipped_surrogate_loss).split('"""')[2])

# %%
# NBVAL_CHECK_OUTPUT
ratios = torch.tensor([1.5, 0.5, 1.1, 0.5, 1.5], dtype=torch.float64)
advs = torch.tensor([1.0, -1.0, 1.0, 1.0, -1.0], dtype=torch.float64)
log_probs = ratios.log().requires_grad_(True)  # log π_old = 0, so ρ = exp(log_probs)
loss = rl.clipped_surrogate_loss(log_probs, torch.zeros(5, dtype=torch.float64), advs)
(grad,) = torch.autograd.grad(loss.sum(), log_probs)
print("objective  min(ρA, clip(ρ)A):", (-loss).detach().numpy().round(3).tolist())
print("d loss / d log π            :", grad.numpy().round(3).tolist())
print("clip active (zero gradient) :", rl.clip_region(ratios, advs).tolist())

gen = torch.Generator().manual_seed(0)
lp = (0.4 * torch.randn(1000, generator=gen, dtype=torch.float64)).requires_grad_(True)
old = torch.zeros(1000, dtype=torch.float64)
A = torch.randn(1000, generator=gen, dtype=torch.float64)
l_min, l_mask = rl.clipped_surrogate_loss(lp, old, A), rl.clipped_surrogate_loss_masked(lp, old, A)
g_min = torch.autograd.grad(l_min.sum(), lp)[0]
g_mask = torch.autograd.grad(l_mask.sum(), lp)[0]
active = rl.clip_region(lp.detach().exp(), A)
print("min form == mask form (values, gradients):", bool(torch.equal(l_min, l_mask)), bool(torch.allclose(g_min, g_mask)))
print(f"{int(active.sum())} of 1000 samples clipped; their gradient is exactly 0:", bool((g_min[active] == 0).all()))

# %% [markdown]
# The objective and its gradient as functions of $\rho$ for one sample (the widget of §7.5 lets you
# move $\varepsilon_{\text{low}}$, $\varepsilon_{\text{high}}$ and $\hat A$):

# %%
fig, axes = plt.subplots(1, 2, figsize=(10, 3.2), dpi=80)
plot_clip_objective(advantage=1.0, clip_eps_low=0.2, ax=axes[0])
plot_clip_objective(advantage=-1.0, clip_eps_low=0.2, ax=axes[1])
fig.tight_layout();

# %% [markdown]
# ## 7.3 Clip-higher: $0.01 \to 0.012$
#
# The band is *relative*. A token (or action) with probability $0.01$ under $\pi_{\text{old}}$ and a
# positive advantage can only be pushed to $0.01 \times 1.2 = 0.012$ before its gradient switches off —
# barely more likely to be sampled next time — while a token at $0.5$ may rise to $0.6$. Rare but good
# continuations are learned slowly, and the policy's entropy tends to collapse onto what it already
# prefers. DAPO (Yu et al. 2025) decouples the two edges, $[1-\varepsilon_{\text{low}}, 1+\varepsilon_{\text{high}}]$
# with $\varepsilon_{\text{low}} = 0.2$, $\varepsilon_{\text{high}} = 0.28$: the same token may now reach
# $0.0128$ (and the lower edge, which protects against collapsing a probability, is unchanged).

# %%
# NBVAL_CHECK_OUTPUT
old_p = torch.tensor([0.01, 0.5], dtype=torch.float64)
for eps_high in (0.2, 0.28):
    for p_new in (0.0119, 0.0121, 0.0127, 0.0129):
        lp = torch.tensor([p_new], dtype=torch.float64).log().requires_grad_(True)
        l = rl.clipped_surrogate_loss(lp, old_p[:1].log(), torch.ones(1, dtype=torch.float64), 0.2, eps_high)
        (gr,) = torch.autograd.grad(l.sum(), lp)
        print(f"eps_high {eps_high:4.2f}: p_old 0.01 -> p {p_new:.4f}: gradient {'on ' if gr.item() != 0 else 'off'}")
print("largest probability reachable with a live gradient, eps 0.2 :", (old_p * 1.2).numpy().round(4).tolist())
print("                                           eps_high 0.28     :", (old_p * 1.28).numpy().round(4).tolist())

# %% [markdown]
# ## 7.4 The PPO loop, and PPO on CartPole
#
# `rl.train_ppo` (CleanRL-style, one readable function) repeats:
#
# 1. **rollout**: `num_envs` CartPole copies × `num_steps` steps with $\pi_{\theta_{\text{old}}}$, storing
#    $\log\pi_{\theta_{\text{old}}}(a|s)$ and $V(s)$ (`rl.collect_rollout`; truncations bootstrap from the final observation);
# 2. **advantages**: GAE($\gamma$, $\lambda$) and value targets $\hat R = \hat A + V$ (chapter 4);
# 3. **epochs**: `num_epochs` passes over the batch in shuffled minibatches, each step minimising
#
# $$\underbrace{-\min(\rho\hat A, \mathrm{clip}(\rho)\hat A)}_{\text{policy}} + c_v\,\underbrace{\tfrac12(V_\phi(s)-\hat R)^2}_{\text{value}} - c_e\,\underbrace{H[\pi_\theta(\cdot|s)]}_{\text{entropy}}, \tag{7.5}$$
#
#    with advantages standardised per minibatch, the gradient norm clipped, and the learning rate annealed
#    linearly to 0.
#
# The minibatch step, in full:

# %%
from rlbook.algos import ppo as ppo_module  # noqa: E402

print(inspect.getsource(ppo_module._minibatch_loss))

# %% [markdown]
# The settings start from the CartPole ones of the RL Baselines3 Zoo (8 envs × 32 steps,
# $\gamma = 0.98$, $\lambda = 0.8$, one 256-sample minibatch, Adam $10^{-3}$ annealed linearly over
# 100k steps, $\varepsilon = 0.2$) with separate 64-64 tanh MLPs for actor and critic and orthogonal
# initialisation. A small sweep on seeds 0–2 raised the epochs from 20 to 30 (median steps to 475:
# 28.7k → 24.5k), but then two of the three seeds *collapsed* after solving the task (rolling-20 return
# down to 159 and 23 before recovering). Stopping an update's epochs once `approx_kl` exceeds
# `target_kl = 0.05` kept all three seeds at ≥ 475 after their first crossing, with a median of 26.3k
# steps. We train past the threshold to see whether PPO *stays* solved.
#
# Why would a solved CartPole policy fall apart? Once every episode lasts 500 steps, the true advantages
# are all nearly zero, but the minibatch-standardised advantages still have unit variance: the update is
# driven by noise at full strength, 30 epochs over the same batch. The KL early stop bounds how far such
# an update can go.

# %%
print(rl.PPOConfig())

# %%
# The lr schedule's horizon is always 100k steps; the small size stops after 50k (the same curve, cut short).
cfg = rl.PPOConfig(seed=0, device=str(DEVICE), stop_after_env_steps=rl.by_size(small=50_000, full=None))
hist_ppo = rl.train_ppo(cfg)
steps_ppo = hist_ppo.steps_to_threshold(475, 20)
rolling = hist_ppo.rolling_returns(20)
after = rolling[hist_ppo.episode_end_steps.index(steps_ppo):] if steps_ppo is not None else np.array([np.nan])
print(f"PPO reached a rolling-20 return of 475 after {steps_ppo} env steps; "
      f"afterwards the rolling-20 return stayed >= {after.min():.0f} (final {rolling[-1]:.0f})")
assert steps_ppo is not None and rolling.max() >= 475

# %%
fig, axes = plt.subplots(1, 3, figsize=(12, 3), dpi=80)
axes[0].plot(hist_ppo.episode_end_steps, hist_ppo.episode_returns, ".", alpha=0.3, label="episode")
axes[0].plot(hist_ppo.episode_end_steps, rolling, label="rolling 20")
axes[0].axhline(475, color="gray", ls=":")
axes[0].set_xlabel("env steps")
axes[0].set_ylabel("return")
axes[0].legend()
axes[1].plot(hist_ppo["env_steps"], hist_ppo["approx_kl"], label="approx KL")
axes[1].plot(hist_ppo["env_steps"], hist_ppo["clip_fraction"], label="clip fraction")
axes[1].set_xlabel("env steps")
axes[1].legend()
axes[2].plot(hist_ppo["env_steps"], hist_ppo["explained_variance"], label="explained variance")
axes[2].plot(hist_ppo["env_steps"], hist_ppo["entropy"], label="entropy")
axes[2].set_xlabel("env steps")
axes[2].legend()
fig.tight_layout();

# %% [markdown]
# **Reading the diagnostics.** `approx_kl` (the $k_3$ estimate of $\mathrm{KL}(\pi_{\text{old}}\,\|\,\pi_\theta)$
# after an update) stays around $10^{-2}$: PPO's epochs move the policy about as far as a TRPO step
# would, without being told a $\delta$. `clip_fraction` is the share of samples whose ratio left the band —
# the clip is doing real work. `explained_variance` $= 1 - \mathrm{Var}[\hat R - V]/\mathrm{Var}[\hat R]$
# rises towards 1 as the critic learns; the entropy falls as the policy becomes confident.
#
# ## 7.5 REINFORCE vs TRPO vs PPO
#
# All three on the same task and seed, each stopped when its rolling-20 return reaches 475, plotted
# against env steps (REINFORCE: the book's best variant from chapter 3; TRPO: chapter 6's settings).

# %%
hist_trpo = rl.train_trpo(rl.TRPOConfig(seed=0, total_env_steps=200_000, stop_at_return=475.0, device=str(DEVICE)))
hist_reinforce = rl.train_reinforce(rl.ReinforceConfig(seed=0, total_env_steps=300_000, stop_at_return=475.0))
results = {"REINFORCE": hist_reinforce, "TRPO": hist_trpo, "PPO": hist_ppo}
for name, h in results.items():
    print(f"{name:9s}: rolling-20 >= 475 after {h.steps_to_threshold(475, 20)} env steps")

# %%
fig, ax = plt.subplots(figsize=(6, 3.2), dpi=80)
for name, h in results.items():
    ax.plot(h.episode_end_steps, h.rolling_returns(20), label=name)
ax.axhline(475, color="gray", ls=":")
ax.set_xlabel("env steps")
ax.set_ylabel("rolling-20 return")
ax.legend()
fig.tight_layout();

# %% [markdown]
# PPO needs the fewest env steps: a critic with GAE and many epochs of clipped updates per batch use
# each sample many times. On an easy task like CartPole a well-tuned REINFORCE (chapter 3's best
# variant, with a learned value baseline) is not far behind, and TRPO's single, conservative step per
# batch of 1024 samples is no faster; what the trust region buys is robustness to the step size,
# which matters more as tasks and models grow. `python benchmarks/cartpole.py` reports the medians
# over seeds 0, 1, 2.

# %%
rl.report_headline(f"PPO: CartPole rolling-20 return 475 after {steps_ppo:,} env steps (seed 0)")

# %% [markdown]
# ## 7.6 Explore: the clip explorer
#
# Move $\varepsilon_{\text{low}}$, $\varepsilon_{\text{high}}$ and $\hat A$; the shaded region is where the
# gradient is exactly zero. Switch to CISPO (chapter 11) to see a clipped *weight* that never switches the
# gradient off. The static figure beside it shows the asymmetric band of §7.3.

# %%
try:
    from rlbook.widgets.clip_explorer import clip_explorer

    display(clip_explorer())  # noqa: F821  (display is a notebook builtin)
except ImportError as err:  # ipywidgets missing: the static figure below still works
    print("interactive widget unavailable:", err)

# %%
fig, ax = plt.subplots(figsize=(5, 3.2), dpi=80)
plot_clip_objective(advantage=1.0, clip_eps_low=0.2, clip_eps_high=0.28, ax=ax)
fig.tight_layout();

# %% [markdown]
# ## Summary
#
# * A KL penalty (7.1) makes TRPO's problem unconstrained; an adaptive $\beta$ (7.2) tracks a target KL, with lag.
# * PPO's clipped objective (7.3) is a per-sample switch (7.4): the policy-gradient term is turned off
#   once the ratio has moved beyond $1\pm\varepsilon$ in the direction the advantage wants, and only then.
#   At $\rho = 1$ it is the plain policy gradient.
# * The band is relative, so rare actions/tokens can barely grow ($0.01 \to 0.012$); clip-higher
#   ($\varepsilon_{\text{high}} > \varepsilon_{\text{low}}$) loosens the upper edge only.
# * PPO = rollout → GAE → several epochs of minibatch Adam on (7.5). Watch `approx_kl`, `clip_fraction`,
#   `explained_variance`.
# * On CartPole PPO needs the fewest env steps of the three algorithms.
#
# ## Exercises
#
# 1. **The adaptive penalty on CartPole.** Replace the clipped loss in a copy of `_minibatch_loss` by
#    `rl.kl_penalty_loss` with `rl.categorical_kl` and adapt $\beta$ after every update with
#    `rl.adaptive_kl_coef`. How many env steps to 475?
# 2. **No clipping.** Set `clip_eps_low=1.0, clip_eps_high=100.0` (effectively no clip) with 20 epochs.
#    What happens to `approx_kl` and to learning? Then try `num_epochs=1`.
# 3. **Epochs vs samples.** Plot steps-to-475 against `num_epochs` ∈ {1, 5, 10, 20, 40}. Why does it
#    stop improving?
# 4. **Clip-higher on CartPole.** Does `clip_eps_high=0.28` change the entropy curve? Why is CartPole
#    (two actions, neither rare) a poor test of clip-higher?
# 5. **Stability.** Run `benchmarks/cartpole.py --algos ppo --stability` and report the worst rolling-20
#    return after each seed first reaches 475. Which setting in `PPOConfig` most affects it?
