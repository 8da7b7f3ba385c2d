# %% [markdown]
# # 3. REINFORCE and baselines on CartPole
#
# **Goals.** By the end of this chapter you can
# * turn the policy-gradient theorem into a training loop (REINFORCE) with a *surrogate loss*;
# * explain, and measure, why rewards-to-go and baselines reduce the variance of the gradient without
#   biasing it;
# * derive the variance-optimal constant baseline and compare it with a learned value function;
# * read REINFORCE as *weighted supervised fine-tuning*, the bridge to language models;
# * train a policy that balances CartPole for the full 500 steps, on a CPU, in well under a minute.
#
# **Prerequisites.** Chapters 1–2 (returns and rewards-to-go, the score function, eq. (2.5)).

# %%
import inspect
import time

import matplotlib.pyplot as plt
import numpy as np
import torch

import rlbook as rl

rl.seed_everything(0)
torch.set_num_threads(1)  # CartPole-sized networks gain nothing from a second thread (FIELD-NOTES)
SIZE = rl.get_size()
print("size:", SIZE)

# %% [markdown]
# ## 3.1 From the theorem to an algorithm
#
# Eq. (2.5) gives $\nabla J$ as an expectation over episodes. REINFORCE (Williams, 1992) estimates it with
# $N$ episodes from the current policy and takes a gradient-ascent step:
#
# $$\hat g = \frac1N\sum_{i=1}^N\sum_{t}\nabla_\theta\log\pi_\theta(a^i_t\mid s^i_t)\,w^i_t,\qquad
#   \theta \leftarrow \theta + \alpha\,\hat g, \tag{3.1}$$
#
# where the weight $w_t$ is the return $R(\tau)$ in the plain version. In code we never write $\hat g$
# by hand: we build a **surrogate loss** whose autograd gradient *is* $-\hat g$,
#
# $$L(\theta) = -\frac1N\sum_i\sum_t \log\pi_\theta(a^i_t\mid s^i_t)\; \mathrm{sg}\big[w^i_t\big], \tag{3.2}$$
#
# with $\mathrm{sg}$ meaning "stop gradient": the weights are constants. Two warnings that trip everyone
# once. First, $L$ is *not* $-J$; its value says little about how well the policy does (it can even go up
# while the return improves). Second, the data must come from the *current* policy: after one step, the
# episodes are stale and are thrown away (on-policy learning; Part II relaxes this).

# %%
print(inspect.getsource(rl.reinforce_loss))

# %% [markdown]
# ## 3.2 Rewards-to-go: an action cannot change the past
#
# In (2.5) every action's score is multiplied by the *whole* return, including rewards that arrived before
# the action. Those past rewards cannot depend on $a_t$, so their contribution is zero in expectation —
# for $t' < t$, conditioning on the history up to $s_t$ and using (2.3),
#
# $$\mathbb E\big[\nabla\log\pi(a_t\mid s_t)\,r_{t'}\big]
#   = \mathbb E\big[r_{t'}\;\mathbb E_{a_t\sim\pi}[\nabla\log\pi(a_t\mid s_t)]\big] = 0. \tag{3.3}$$
#
# Zero in expectation, but not in each sample: they only add noise. Dropping them gives the
# **rewards-to-go** estimator, with $w_t = \hat R_t = \sum_{t'\ge t}\gamma^{t'-t}r_{t'}$ (eq. 1.5).
# Chapter 2 checked by enumeration that both give exactly $\nabla J$.
#
# *A note on $\gamma$.* CartPole is scored without discounting, yet we train with $\gamma = 0.99$ in the
# weights. A discount makes an action responsible mostly for the next ~100 steps rather than for
# everything until the end: it biases the gradient slightly (towards short-sighted behaviour) and removes a
# lot of variance. A deliberate bias–variance trade, which Chapter 4 studies properly.
#
# ## 3.3 Baselines
#
# By (2.3) we may subtract from $w_t$ any $b$ that does not depend on $a_t$, without bias:
#
# $$\hat g = \frac1N\sum_i\sum_t\nabla\log\pi(a_t\mid s_t)\,\big(w_t - b(s_t)\big). \tag{3.4}$$
#
# Intuition: CartPole pays $+1$ per step, so every weight is positive, and every sampled action gets
# pushed up — the good ones slightly more than the bad ones. The useful signal is the *difference*;
# subtracting a baseline makes the weights signed ("better than usual" / "worse than usual"). Three choices:
#
# * **Batch mean**: $b = $ the mean of the weights in the batch. Cheap and effective. (Using the same batch
#   adds an $O(1/N)$ bias, negligible in practice.)
# * **Variance-optimal constant.** Write one episode's estimate as $g = u\,(R - b)$ with $u=\sum_t\nabla\log\pi_t$.
#   Its second moment $\mathbb E\|u\|^2(R-b)^2$ is a quadratic in $b$; setting the derivative to zero,
#
# $$b^\star = \frac{\mathbb E\big[\|u\|^2 R\big]}{\mathbb E\big[\|u\|^2\big]}, \tag{3.5}$$
#
#   a mean of returns weighted by squared score norms (Greensmith et al., 2004). It needs per-episode
#   gradients, which `torch.func` computes in one vectorised call. For rewards-to-go weights the same
#   argument gives $b^\star=\mathbb E[u\cdot v]/\mathbb E\|u\|^2$ with $v=\sum_t\nabla\log\pi_t\,\hat R_t$.
# * **Learned value** $b(s_t) = V_\phi(s_t)\approx\mathbb E[\hat R_t\mid s_t]$: a second network regressed on
#   the rewards-to-go. It depends on the state, so it can tell "a good step in a bad state" from "a bad step
#   in a good state"; $\hat R_t - V(s_t)$ is an estimate of the **advantage**, the quantity at the heart of
#   Part II.

# %%
print(inspect.getsource(rl.optimal_baseline))

# %% [markdown]
# ## 3.4 REINFORCE is weighted supervised fine-tuning
#
# Supervised fine-tuning (SFT, behaviour cloning) minimises $-\sum\log\pi_\theta(a\mid s)$ over demonstrated
# pairs. The REINFORCE surrogate (3.2) is the same loss with a weight on each pair. With weights 1 for
# "good" episodes and 0 for the rest, REINFORCE *is* SFT on the good episodes (rejection-sampling
# fine-tuning); with signed advantages it also pushes *away* from bad ones. For language models this reading
# is literal: sample answers, score them, fine-tune on them with the scores as weights.
#
# Check: with weights $\mathbf 1[R(\tau)\ge \text{median}]$, the REINFORCE gradient equals the cross-entropy
# gradient on the selected episodes' state–action pairs, up to the normaliser.

# %%
# NBVAL_CHECK_OUTPUT
torch.manual_seed(0)
policy = rl.CategoricalMLPPolicy(hidden_sizes=(64,))
gen = torch.Generator().manual_seed(0)
batch = rl.EpisodeBatcher(16, seed=100).collect(lambda o: policy.act(o, gen))
keep = batch.episode_returns >= batch.episode_returns.median()  # the "good" half
weights = keep[:, None].float() * batch.mask  # (N, T): 1 on every step of a kept episode

surrogate = (rl.reinforce_loss(policy.log_prob(batch.obs, batch.actions), weights) * batch.mask).sum() / 16
g_reinforce = torch.autograd.grad(surrogate, list(policy.parameters()))

sel = weights.bool()  # the demonstrations: (s, a) pairs of the kept episodes
sft = torch.nn.functional.cross_entropy(policy(batch.obs[sel]), batch.actions[sel], reduction="sum") / 16
g_sft = torch.autograd.grad(sft, list(policy.parameters()))
same = all(torch.allclose(a, b, atol=1e-6) for a, b in zip(g_reinforce, g_sft))
print(f"kept {int(keep.sum())} of 16 episodes, {int(sel.sum())} state-action pairs")
print("REINFORCE gradient with 0/1 weights == SFT gradient on kept episodes:", same)
assert same

# %% [markdown]
# ## 3.5 Measuring the variance of each estimator
#
# Theory says all these estimators have the same mean. Their *variance* decides how many episodes we need.
# We take one policy part-way through training (a rolling return of about 150), sample a batch of episodes
# with it, and compute each episode's gradient estimate $g_i$ for every choice of weights, in one vectorised
# call per choice (`rl.episode_gradients`, built on `torch.func.vmap`). The **total variance** is
# $\frac{1}{N-1}\sum_i\|g_i-\bar g\|^2$, the trace of the covariance of a single-episode estimate.
#
# All estimators below use $\gamma = 1$ (CartPole's own objective), so they estimate the same gradient.
# The value baseline is fitted on a *separate* batch from the same policy, so it is a fixed function of the
# state when evaluated.

# %%
snap = rl.train_reinforce(rl.ReinforceConfig(seed=0, stop_at_return=150, total_env_steps=50_000), progress=False)
policy_mid = snap.policy
N_VAR = rl.by_size(small=64, full=256)
gen_fit, gen_var = torch.Generator().manual_seed(1), torch.Generator().manual_seed(2)
fit_batch = rl.EpisodeBatcher(N_VAR, seed=2000).collect(lambda o: policy_mid.act(o, gen_fit))
value_fn = rl.fit_value_function(fit_batch, gamma=1.0, epochs=rl.by_size(small=300, full=1000), seed=0)
var_batch = rl.EpisodeBatcher(N_VAR, seed=3000).collect(lambda o: policy_mid.act(o, gen_var))
print(f"policy after {snap.env_steps} env steps; its {N_VAR} evaluation episodes: mean return "
      f"{float(var_batch.episode_returns.mean()):.0f}")

estimators = {
    "vanilla R(τ)": ("total", "none"),
    "rewards-to-go": ("rewards_to_go", "none"),
    "rtg − mean": ("rewards_to_go", "mean"),
    "rtg − optimal b*": ("rewards_to_go", "optimal"),
    "rtg − V(s)": ("rewards_to_go", "value"),
}
variance = {name: rl.gradient_variance(policy_mid, var_batch, kind, base, gamma=1.0, value_fn=value_fn)["variance"]
            for name, (kind, base) in estimators.items()}

# %%
# NBVAL_CHECK_OUTPUT
ref = variance["vanilla R(τ)"]
print(f"{'estimator':<18}{'total variance':>16}{'relative':>10}")
for name, v in variance.items():
    print(f"{name:<18}{v:>16.3g}{v / ref:>10.3f}")
assert variance["vanilla R(τ)"] > variance["rewards-to-go"]
assert variance["rewards-to-go"] > max(variance["rtg − mean"], variance["rtg − optimal b*"], variance["rtg − V(s)"])

# %%
fig, ax = plt.subplots(figsize=(6, 3.2), dpi=80)
rl.plot_bars({k: v / ref for k, v in variance.items()}, ax=ax, log=True, ylabel="variance (relative to vanilla)")
ax.set_title("variance of the single-episode gradient estimate");

# %% [markdown]
# Rewards-to-go cut the variance about four-fold, and a baseline cuts it by a further factor of about three.
# The optimal constant beats the plain mean by construction (it minimises exactly this quantity among
# constants); the learned $V(s)$ can match or beat it because it varies with the state. Which one learns fastest also depends
# on how the variance is spread across directions, so we now train with each.
#
# **Unbiasedness on CartPole.** Chapter 2 proved the baseline adds no bias by enumeration on a small MDP. Here
# we cannot enumerate, but we can test: the baseline's own contribution $\sum_t\nabla\log\pi_t\cdot b$ should
# average to zero. We project each episode's contribution on a fixed random direction and check the mean is
# within 4 standard errors of 0.

# %%
# NBVAL_CHECK_OUTPUT
u = rl.episode_gradients(policy_mid, var_batch)  # (N, P): Σ_t ∇log π_t per episode (weights 1)
direction = torch.randn(u.shape[1], generator=torch.Generator().manual_seed(0))
proj = 100.0 * (u @ direction)  # baseline b = 100, projected
z_score = float(proj.mean() / (proj.std() / len(proj) ** 0.5))
print(f"baseline term: mean / s.e. = {z_score:+.2f}  (|z| < 4: consistent with zero)")
assert abs(z_score) < 4

# %% [markdown]
# ## 3.6 Learning CartPole
#
# Now the real test. `rl.train_reinforce` runs the loop of 3.1: collect `episodes_per_batch` complete
# episodes with the current policy (`rl.EpisodeBatcher` steps only the environments still running, so every
# env step counted is a step taken), compute the weights, the baseline and the surrogate, and take one Adam
# step. The default configuration is the best variant we found (see `benchmarks/cartpole_reinforce.py`):

# %%
print(rl.ReinforceConfig())

# %% [markdown]
# We train the best variant on three seeds, and the plain estimators for comparison. The learning target,
# as in the field's benchmarks: the mean return of the last 20 episodes reaches **475**.

# %%
STEPS = rl.by_size(small=60_000, full=150_000)
SEEDS = [0, 1, 2]
variants = {
    "rtg − V(s) (default)": dict(),
    "rtg − mean": dict(baseline="mean", normalize_advantages=False),
    "vanilla R(τ)": dict(return_kind="total", baseline="none", normalize_advantages=False, gamma=1.0),
}
runs_per_variant = rl.by_size(small={"rtg − V(s) (default)": SEEDS, "rtg − mean": [0], "vanilla R(τ)": [0]},
                              full={k: SEEDS for k in variants})
histories = {}
start = time.perf_counter()
for name, overrides in variants.items():
    histories[name] = [rl.train_reinforce(rl.ReinforceConfig(seed=s, total_env_steps=STEPS, **overrides), progress=True)
                       for s in runs_per_variant[name]]
print(f"trained {sum(len(v) for v in histories.values())} runs in {time.perf_counter() - start:.0f} s")

# %%
best = histories["rtg − V(s) (default)"]
steps_to_475 = [h.steps_to_threshold(475, window=20) for h in best]
for s, h, n in zip(SEEDS, best, steps_to_475):
    r = h.rolling_returns(20)
    after = r[h.episode_end_steps.index(n):] if n is not None else r[-1:]
    print(f"seed {s}: rolling-20 ≥ 475 after {n} env steps; lowest rolling-20 afterwards {after.min():.0f}; "
          f"final {h.final_rolling_return(20):.0f}")
for name in ("rtg − mean", "vanilla R(τ)"):
    h = histories[name][0]
    print(f"{name} (seed 0): steps to 475 = {h.steps_to_threshold(475, 20)}, final rolling-20 {h.final_rolling_return(20):.0f}")
assert all(n is not None for n in steps_to_475), "REINFORCE must reach a rolling-20 return of 475 on every seed"
median_steps = int(np.median(steps_to_475))

# %%
fig, ax = plt.subplots(figsize=(6.5, 3.6), dpi=80)
rl.plot_learning_curves(histories, window=20, threshold=475, ax=ax, title="REINFORCE on CartPole-v1")
ax.set_ylim(0, 520);

# %% [markdown]
# The plain estimator with the full return learns, slowly and noisily (it needs about 75,000 env steps on seed 0,
# beyond this plot); rewards-to-go with a baseline reaches 475 in a few tens of thousands of env steps and stays
# there. For scale (FIELD-NOTES, same machine): a plain 60-line
# REINFORCE with a mean baseline and 8 episodes per update needs about 67,000 env steps; Stable-Baselines3's
# tuned PPO needs a median of 33,500. Note also that reaching 475 once is not the same as staying there: a
# REINFORCE policy can collapse later (one large unlucky step), which is one motivation for the trust regions
# of Part II. The printout above reports the lowest rolling return after each first crossing.

# %%
rl.report_headline(f"REINFORCE: 475 reached after {median_steps:,} env steps (median of 3 seeds)")

# %% [markdown]
# ## Summary
#
# * REINFORCE estimates $\nabla J$ from sampled episodes (3.1); code builds a surrogate loss (3.2) whose gradient
#   is the estimate. Its value is not the objective.
# * Rewards-to-go drop rewards an action could not influence (3.3); baselines subtract an action-independent
#   $b(s)$ (3.4). Neither changes the expected gradient; both reduce variance — measured here as roughly
#   vanilla > rewards-to-go > rewards-to-go with any baseline.
# * The variance-optimal constant baseline is $b^\star=\mathbb E[\|u\|^2R]/\mathbb E\|u\|^2$ (3.5); a learned $V(s)$ goes
#   further, and $\hat R_t - V(s_t)$ is an advantage estimate.
# * REINFORCE is weighted SFT: with 0/1 weights it is exactly fine-tuning on the good samples (checked).
# * With rewards-to-go, a learned baseline and $\gamma=0.99$, REINFORCE solves CartPole-v1 in a few tens of
#   thousands of env steps.
#
# ## Exercises
#
# 1. *(Coded.)* Implement `my_discounted_returns(rewards, gamma, terminated, truncated)` (the weight of vanilla
#    REINFORCE at every step) and check it with `rl.exercises.check("discounted_returns", my_discounted_returns)`.
# 2. *(Derivation.)* Derive (3.5) by minimising $\mathbb E\|u\|^2(R-b)^2$ over $b$. When does $b^\star$ equal the mean
#    return?
# 3. *(Experiment.)* Train the default variant with `episodes_per_batch` 1, 4 and 16 at a fixed number of env steps.
#    Which reaches 475 first in env steps? In updates? Explain with the $1/\sqrt N$ law.
# 4. *(Experiment.)* Set `gamma=1.0` for the default variant. What happens to the variance (section 3.5) and to
#    learning speed? Relate it to the bias–variance trade of $\gamma$.
# 5. *(Bug hunt.)* Move the `reinforce_loss` computation *before* collecting the batch, reusing the previous
#    batch's data for a second update. What does the learning curve do, and why is this no longer REINFORCE?
# 6. *(Language models.)* In the bandit view of Chapter 1, write the REINFORCE loss for one prompt with $G$ sampled
#    answers and 0/1 rewards, using the group's mean reward as the baseline. You have just derived the core of
#    GRPO (Part III).
