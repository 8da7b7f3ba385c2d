# %% [markdown]
# # 3. REINFORCE and baselines on CartPole
#
# **Goals.** By the end of this chapter you can
# * turn the policy-gradient theorem into a training loop (REINFORCE) with a *surrogate loss*;
# * explain, and measure, why rewards-to-go and baselines reduce the variance of the gradient without
#   biasing it;
# * derive the variance-optimal constant baseline and compare it with a learned value function;
# * read REINFORCE as *weighted supervised fine-tuning*, the bridge to language models;
# * train a policy that balances CartPole for the full 500 steps, on a CPU, in the time it takes to read
#   this section (the training cell prints how long it took).
#
# **Prerequisites.** Chapters 1–2 (returns and rewards-to-go, the score function, eq. (2.5)). The learned
# baseline of §3.3 is a value function $V^\pi$, defined in §1.6 and learned from returns much as in §1.8.

# %%
import inspect
import time

import matplotlib.pyplot as plt
import numpy as np
import scipy.stats
import torch

import rlbook as rl

rl.seed_everything(0)
# figures at twice the pixel density (sharp when zoomed)
# %config InlineBackend.figure_formats = ["retina"]
torch.set_num_threads(1)  # networks this small gain nothing from a second thread; one thread also keeps runs reproducible
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
# * **Learned value** $b(s_t) = V_\phi(s_t)\approx\mathbb E[\hat R_t\mid s_t]$, an estimate of the state value
#   $V^\pi$ of §1.6: a second network (the *critic*) regressed on the rewards-to-go, the Monte Carlo
#   targets of §1.7. It depends on the state, so it can tell "a good step in a bad state" from "a bad step
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
# We take one policy part-way through training: we stop training as soon as its rolling return (the mean of
# the last 20 training episodes) first reaches 150. The rolling mean lags behind a policy that is improving
# quickly, so on fresh episodes this policy does better than that: it averages well above 150 (printed
# below with its 95 % interval over the evaluation episodes, whose lower end is checked to exceed 250). We sample a batch of episodes with it, and compute each episode's gradient estimate $g_i$ for every choice of weights, in one vectorised
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
eval_mean, eval_low, eval_high = rl.mean_ci(var_batch.episode_returns.float().numpy())
print(f"95 % interval of that mean over the {N_VAR} episodes: {eval_low:.0f} to {eval_high:.0f}")
rl.claim("whose lower end is checked to exceed 250", eval_low, low=250)

estimators = {
    "vanilla R(τ)": ("total", "none"),
    "rewards-to-go": ("rewards_to_go", "none"),
    "rewards-to-go − mean": ("rewards_to_go", "mean"),
    "rewards-to-go − optimal b*": ("rewards_to_go", "optimal"),
    "rewards-to-go − V(s)": ("rewards_to_go", "value"),
}
variance = {name: rl.gradient_variance(policy_mid, var_batch, kind, base, gamma=1.0, value_fn=value_fn)["variance"]
            for name, (kind, base) in estimators.items()}
# The same single-episode estimates g_i, kept per episode so that the episodes can be resampled below.
per_episode = {}
for name, (kind, base) in estimators.items():
    w = rl.reinforce_weights(var_batch, kind, 1.0)
    b = rl.baseline_values(base, w, var_batch, policy=policy_mid, value_fn=value_fn)
    per_episode[name] = rl.episode_gradients(policy_mid, var_batch, (w - b) * var_batch.mask).double().numpy()

# %%
# NBVAL_CHECK_OUTPUT
ref = variance["vanilla R(τ)"]
print(f"{'estimator':<28}{'total variance':>16}{'relative':>10}")
for name, v in variance.items():
    print(f"{name:<28}{v:>16.3g}{v / ref:>10.3f}")
assert variance["vanilla R(τ)"] > variance["rewards-to-go"]
assert variance["rewards-to-go"] > max(variance["rewards-to-go − mean"], variance["rewards-to-go − optimal b*"], variance["rewards-to-go − V(s)"])

# %%
fig, ax = plt.subplots(figsize=(7, 3.6), dpi=80)
rl.plot_bars({k: v / ref for k, v in variance.items()}, ax=ax, log=True, ylabel="variance (relative to vanilla)")
plt.setp(ax.get_xticklabels(), rotation=20, ha="right")
ax.set_title("variance of the single-episode gradient estimate");

# %% [markdown]
# Rewards-to-go cut the variance about four-fold, and a baseline cuts it by a further factor of three to four.
# These are ratios measured on 64 episodes, so they carry sampling error: the cell below resamples the
# episodes (a bootstrap: the policy and the fitted $V$ stay fixed, the 64 per-episode estimates are drawn
# with replacement) and prints a 95 % interval for each ratio. The intervals are wide, so "four-fold" and
# "three to four" describe the point estimates on this batch; the intervals show how far another batch
# could move them.
# Every interval of the first four rows lies above 1, so the ordering vanilla > rewards-to-go > rewards-to-go
# with any baseline is measured, not only expected. Among the baselines, the optimal constant minimises the
# second moment among constants by construction, and the learned $V(s)$ can vary with the state, yet on this
# policy the three are within sampling error of one another (the last three rows: every interval contains 1):
# no difference detected at this scale. Which one *learns* fastest also depends on how the variance is spread
# across directions, so we then train with each.
#
# %%
def variance_ratio(a, b):
    """Statistic for rl.bootstrap_ci: total variance of estimator a over that of b, on resampled episodes."""
    def stat(idx, axis=-1):
        rows = np.atleast_2d(idx).astype(int)
        out = [per_episode[a][r].var(0, ddof=1).sum() / per_episode[b][r].var(0, ddof=1).sum() for r in rows]
        return np.asarray(out).reshape(np.shape(idx)[:-1])
    return stat


episodes = np.arange(N_VAR)
ratio_ci = {}
for a, b in [("vanilla R(τ)", "rewards-to-go"), ("rewards-to-go", "rewards-to-go − mean"),
             ("rewards-to-go", "rewards-to-go − optimal b*"), ("rewards-to-go", "rewards-to-go − V(s)"),
             ("rewards-to-go − mean", "rewards-to-go − optimal b*"), ("rewards-to-go − mean", "rewards-to-go − V(s)"),
             ("rewards-to-go − optimal b*", "rewards-to-go − V(s)")]:
    ratio_ci[a, b] = rl.bootstrap_ci(episodes, variance_ratio(a, b), n_resamples=2000)
    print(f"variance of {a:<27} / {b:<27} = {ratio_ci[a, b][0]:5.2f}  (95 % interval {ratio_ci[a, b][1]:.2f} to {ratio_ci[a, b][2]:.2f})")

# %%
four_fold = ratio_ci["vanilla R(τ)", "rewards-to-go"]
rl.claim("cut the variance about four-fold", four_fold[0], 4)  # the point estimate; the words allow ±1
best_name = min(["rewards-to-go − mean", "rewards-to-go − optimal b*", "rewards-to-go − V(s)"], key=variance.get)
further = ratio_ci["rewards-to-go", best_name]
rl.claim("a further factor of three to four", further[0], low=3, high=4)  # the point estimate
rl.claim("Every interval of the first four rows lies above 1", min(ci[1] for ci in list(ratio_ci.values())[:4]), low=1.0)
for pair in list(ratio_ci)[4:]:
    rl.claim("every interval contains 1", ratio_ci[pair][1], high=1.0)  # lower end ≤ 1 ...
    rl.claim("every interval contains 1", ratio_ci[pair][2], low=1.0);  # ... and upper end ≥ 1

# %% [markdown]
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
# step. The default configuration uses rewards-to-go with $\gamma = 0.99$, the learned value baseline, and
# advantages standardised within each batch (`benchmarks/cartpole_reinforce.py` compares it with the other
# variants):

# %%
print(rl.ReinforceConfig())

# %% [markdown]
# We train the default variant on three seeds and, to show their curves, two plain estimators on seed 0:
# rewards-to-go with the batch-mean baseline ($\gamma = 0.99$, no standardisation) and the vanilla estimator
# ($\gamma = 1$). The learning target, as in the field's benchmarks: the mean return of the last 20 episodes
# reaches **475**.

# %%
STEPS = rl.by_size(small=60_000, full=150_000)
SEEDS = [0, 1, 2]
variants = {
    "default": dict(),
    "rewards-to-go − mean, γ = 0.99": dict(baseline="mean", normalize_advantages=False),
    "vanilla R(τ)": dict(return_kind="total", baseline="none", normalize_advantages=False, gamma=1.0),
}
runs_per_variant = rl.by_size(small={"default": SEEDS, "rewards-to-go − mean, γ = 0.99": [0], "vanilla R(τ)": [0]},
                              full={k: SEEDS for k in variants})
histories = {}
start = time.perf_counter()
for name, overrides in variants.items():
    histories[name] = [rl.train_reinforce(rl.ReinforceConfig(seed=s, total_env_steps=STEPS, **overrides), progress=True)
                       for s in runs_per_variant[name]]
print(f"trained {sum(len(v) for v in histories.values())} runs in {time.perf_counter() - start:.0f} s")

# %%
best = histories["default"]
steps_to_475 = [h.steps_to_threshold(475, window=20) for h in best]
for s, h, n in zip(SEEDS, best, steps_to_475):
    r = h.rolling_returns(20)
    after = r[h.episode_end_steps.index(n):] if n is not None else r[-1:]
    print(f"seed {s}: rolling-20 ≥ 475 after {n} env steps; lowest rolling-20 afterwards {after.min():.0f}; "
          f"final {h.final_rolling_return(20):.0f}")
for name in ("rewards-to-go − mean, γ = 0.99", "vanilla R(τ)"):
    h = histories[name][0]
    print(f"{name} (seed 0): steps to 475 = {h.steps_to_threshold(475, 20)}, final rolling-20 {h.final_rolling_return(20):.0f}")
assert all(n is not None for n in steps_to_475), "REINFORCE must reach a rolling-20 return of 475 on every seed"
median_steps = int(np.median(steps_to_475))

# %%
# One colour per run: each seed of the default variant gets its own colour and legend entry.
curves = {f"{name}, seed {s}": [h] for name, runs in histories.items() for s, h in zip(runs_per_variant[name], runs)}
fig, ax = plt.subplots(figsize=(7, 3.8), dpi=80)
rl.plot_learning_curves(curves, window=20, threshold=475, ax=ax, title="REINFORCE on CartPole-v1: learning curves")
ax.set_ylabel("mean return of the last 20 episodes")
ax.set_xlabel("environment steps")
ax.set_ylim(0, 520)
ax.legend(fontsize=8.5, loc="lower right");

# %% [markdown]
# In these runs the default variant reaches 475 in a few tens of thousands of env steps on each of its three
# seeds, and its rolling return stays above 400 afterwards (checked below); the printout shows how far the
# vanilla estimator got on seed 0 within this budget. One seed per variant illustrates; it cannot rank the
# variants. Ten paired seeds can: `benchmarks/cartpole_reinforce.py` trained the three (and a fourth, below) on seeds
# 0–9 with a budget of 150,000 env steps each, and the cells below print its saved table and the paired
# comparisons (seed $k$ of every variant shares its environment seeds and initial weights). A run that never
# reached 475 counts as 150,000 steps, which understates the vanilla estimator's steps and so the gap.
# Rewards-to-go with either baseline needs fewer env steps than the vanilla estimator, which reached 475 on
# only 4 of the 10 seeds. Because six of the ten vanilla runs are censored at the budget, the size of that
# paired mean difference (a paired $t$ interval) is only a lower bound on the gap; a rank-based summary does
# not depend on the censored values: each of the two baselined variants reached 475 before the vanilla
# estimator on 9 of the 10 seeds, and the Wilcoxon signed-rank test on the paired differences gives
# p = 0.004 for each. Between the default variant and rewards-to-go with the batch-mean baseline there is
# no difference detected at this scale: the interval of the paired difference contains 0, and its spread
# says how many seeds a difference of 5,000 steps would need. Note also that reaching 475 once is not the same as staying there: a
# REINFORCE policy can collapse later (one large unlucky step), which is one motivation for the trust regions
# of Part II. The printout above reports the lowest rolling return after each first crossing.

# %%
rl.claim("reaches 475 in a few tens of thousands of env steps", median_steps, low=10_000, high=60_000)
lowest_after = min(float(h.rolling_returns(20)[h.episode_end_steps.index(n):].min()) for h, n in zip(best, steps_to_475))
rl.claim("stays above 400 afterwards", lowest_after, low=400)

# %%
bench = rl.benchmark_results("cartpole_reinforce")  # saved by the command it prints
print(bench["command"], f"(budget {bench['budget']:,} env steps per run)")
labels = {"vanilla": "vanilla R(τ)", "rtg+mean": "rewards-to-go − mean, γ = 0.99", "default": "default",
          "default-n1": "default, 1 episode per update"}
print(f"{'seed':<32}" + "".join(f"{k:>8}" for k in bench["seeds"]) + f"{'median':>10}")
steps_by_variant = {}
for key, label in labels.items():
    raw = bench["variants"][key]["steps_to_475"]
    steps_by_variant[key] = [n if n is not None else bench["budget"] for n in raw]  # never reached: the budget
    cells = "".join(f"{n / 1000:>7.1f}k" if n is not None else f"{'never':>8}" for n in raw)
    median = np.median(steps_by_variant[key])
    print(f"{label:<32}{cells}" + (f"{median / 1000:>9.1f}k" if median < bench["budget"] else f"{'never':>10}"))
short = {"vanilla": "vanilla", "rtg+mean": "mean baseline", "default": "default"}  # names in the comparisons
versus_vanilla = [rl.compare(steps_by_variant[k], steps_by_variant["vanilla"], names=(short[k], "vanilla"))
                  for k in ("default", "rtg+mean")]
default_vs_mean = rl.compare(steps_by_variant["default"], steps_by_variant["rtg+mean"], names=("default", "mean baseline"))

# %%
for comparison in versus_vanilla:
    rl.claim_comparison("Rewards-to-go with either baseline needs fewer env steps than the vanilla estimator", comparison, "<")
    rl.claim_comparison("reached 475 before the vanilla estimator", comparison, "<")  # the sign; its size is censored
rl.claim("on only 4 of the 10 seeds", sum(n is not None for n in bench["variants"]["vanilla"]["steps_to_475"]), 4, abs=0)
for key in ("default", "rtg+mean"):  # rank-based: unaffected by the censored vanilla runs
    first = sum(a < b for a, b in zip(steps_by_variant[key], steps_by_variant["vanilla"]))
    signed_rank = scipy.stats.wilcoxon(steps_by_variant[key], steps_by_variant["vanilla"])
    print(f"{short[key]} reached 475 before vanilla on {first} of 10 seeds; Wilcoxon signed-rank p = {signed_rank.pvalue:.4f}")
    rl.claim("before the vanilla estimator on 9 of the 10 seeds", first, 9, abs=0)
    rl.claim("p = 0.004 for each", signed_rank.pvalue, 0.004)
rl.claim_comparison("no difference detected at this scale", default_vs_mean, "none")
print(f"paired seeds needed to detect a 5,000-step difference at this spread (power 0.8): "
      f"{rl.seeds_needed(5000, default_vs_mean.sd_diff)}")

# %% [markdown]
# ### How many episodes per update?
#
# Exercise 3 below asks this for one seed; the benchmark answers it over the same ten paired seeds. It also
# trained the default variant with one episode per update instead of eight (`default-n1` below). That setting
# was picked among batch sizes and learning rates on seeds 100–109 with `benchmarks/cartpole_sweep.py`, so
# the seeds reported here played no part in choosing it. One episode per update needs fewer env steps to
# reach 475 than eight: the paired difference and its interval are printed below. Each update is noisier
# (§2.6's $1/\sqrt N$), but there are eight times as many, and the standardised advantages with Adam keep the
# size of each step in check; on an easy task, many cheap noisy steps make more progress per env step than a
# few careful ones.
#
# Reaching 475 is not staying there, so every run that reached it was repeated and continued 30,000 env steps
# past its first crossing, and the lowest rolling-20 return in that stretch was recorded. With one episode
# per update it dipped as low as 239 on one seed, where the default's lowest was 374; over the ten seeds the
# difference in that lowest return is inside the noise, no difference detected at this scale. Call a run
# *collapsed* when its rolling-20 return falls below 200 within those 30,000 env steps. Counted per variant
# (the cell prints the counts): three of the vanilla estimator's four runs that reached 475 collapsed, and
# none of the ten runs of each of the three other variants. These are counts, not a test: the vanilla
# estimator has only four runs to count, and the cut-off matters (with one episode per update the lowest
# value, 239, is not far above 200).

# %%
lowest = {key: bench["variants"][key]["lowest_after_475"] for key in ("vanilla", "rtg+mean", "default", "default-n1")}
n1 = bench["variants"]["default-n1"]["steps_to_475"]
assert None not in n1 and None not in lowest["default-n1"], "one episode per update reached 475 on every seed"
print(f"lowest rolling-20 return in the {bench['after']:,} env steps after the first crossing of 475")
print(f"{'seed':<32}" + "".join(f"{k:>8}" for k in bench["seeds"]))
for key in ("default", "default-n1"):
    print(f"{labels[key]:<32}" + "".join(f"{v:>8.0f}" for v in lowest[key]))
n1_vs_default = rl.compare(n1, steps_by_variant["default"], names=("default-n1", "default"))
n1_dip = rl.compare(lowest["default-n1"], lowest["default"], names=("default-n1", "default"))
print("env steps to 475:", n1_vs_default)
print("lowest rolling-20 after 475:", n1_dip)

# %%
rl.claim_comparison("One episode per update needs fewer env steps to reach 475 than eight", n1_vs_default, "<")
rl.claim("dipped as low as 239 on one seed", min(lowest["default-n1"]), 239, abs=0.5)
rl.claim("where the default's lowest was 374", min(lowest["default"]), 374, abs=0.5)
rl.claim_comparison("no difference detected at this scale", n1_dip, "none")
collapsed = {key: sum(v < 200 for v in lowest[key] if v is not None) for key in lowest}
reached = {key: sum(v is not None for v in lowest[key]) for key in lowest}
for key in lowest:
    print(f"{labels[key]:<32} collapsed (rolling-20 < 200 after reaching 475): {collapsed[key]} of {reached[key]} runs")
rl.claim("three of the vanilla estimator's four runs that reached 475 collapsed", collapsed["vanilla"], 3, abs=0)
rl.claim("three of the vanilla estimator's four runs that reached 475", reached["vanilla"], 4, abs=0)
for key in ("rtg+mean", "default", "default-n1"):
    rl.claim("none of the ten runs of each of the three other variants", collapsed[key], 0, abs=0)
    rl.claim("none of the ten runs of each of the three other variants", reached[key], 10, abs=0)

# %%
rl.report_headline(f"REINFORCE: 475 reached after {median_steps:,} env steps (median of 3 seeds)")

# %% [markdown]
# ## Summary
#
# * REINFORCE estimates $\nabla J$ from sampled episodes (3.1); code builds a surrogate loss (3.2) whose gradient
#   is the estimate. Its value is not the objective.
# * Rewards-to-go drop rewards an action could not influence (3.3); baselines subtract an action-independent
#   $b(s)$ (3.4). Neither changes the expected gradient; both reduce variance — measured here on one policy, with
#   95 % bootstrap intervals over 64 episodes, as vanilla > rewards-to-go > rewards-to-go with any baseline; the
#   three baselines showed no difference detected at this scale.
# * The variance-optimal constant baseline is $b^\star=\mathbb E[\|u\|^2R]/\mathbb E\|u\|^2$ (3.5); a learned $V(s)$ may
#   vary with the state, and $\hat R_t - V(s_t)$ is an advantage estimate.
# * REINFORCE is weighted SFT: with 0/1 weights it is exactly fine-tuning on the good samples (checked).
# * With rewards-to-go, a learned baseline and $\gamma=0.99$, REINFORCE solves CartPole-v1 in a few tens of
#   thousands of env steps. Over ten paired seeds, rewards-to-go with a baseline (learned or batch mean) needs
#   fewer env steps than the vanilla estimator; between the two baselines, no difference detected at this scale.
#   Updating after every episode instead of every eight needs fewer env steps still, with no difference
#   detected in how far the return dips after reaching 475.

# %%
for comparison in versus_vanilla:  # §3.6's paired comparisons over ten seeds
    rl.claim_comparison("rewards-to-go with a baseline (learned or batch mean) needs fewer env steps than the vanilla estimator",
                        comparison, "<")
rl.claim_comparison("between the two baselines, no difference detected at this scale", default_vs_mean, "none")
rl.claim_comparison("Updating after every episode instead of every eight needs fewer env steps still", n1_vs_default, "<")
rl.claim_comparison("no difference detected in how far the return dips after reaching 475", n1_dip, "none")

# %% [markdown]
# ## Exercises
#
# 1. *(Coded.)* Implement `my_discounted_returns(rewards, gamma, terminated, truncated)` (the weight of vanilla
#    REINFORCE at every step) and check it with `rl.exercises.check("discounted_returns", my_discounted_returns)`.
# 2. *(Derivation.)* Derive (3.5) by minimising $\mathbb E\|u\|^2(R-b)^2$ over $b$. When does $b^\star$ equal the mean
#    return?
# 3. *(Experiment.)* Train the default variant with `episodes_per_batch` 1, 4 and 16 at a fixed number of env steps.
#    Which reaches 475 first in env steps? In updates? Explain with the $1/\sqrt N$ law.
# 4. *(Experiment.)* Set `gamma=1.0` for the default variant. What happens to the variance (§3.5) and to
#    learning speed? Relate it to the bias–variance trade of $\gamma$.
# 5. *(Bug hunt.)* Move the `reinforce_loss` computation *before* collecting the batch, reusing the previous
#    batch's data for a second update. What does the learning curve do, and why is this no longer REINFORCE?
# 6. *(Language models.)* In the bandit view of Chapter 1, write the REINFORCE loss for one prompt with $G$ sampled
#    answers and 0/1 rewards, using the group's mean reward as the baseline. You have just derived the core of
#    GRPO (Part III).

# %% [markdown] tags=["solution"] jp-MarkdownHeadingCollapsed=true
# ## Solutions

# %% [markdown] tags=["solution"]
# ### Solution to exercise 1
#
# The vanilla weight at step $t$ is the discounted return of the *whole* episode that contains $t$, counted
# from that episode's first step. Walk forwards, remember where the current episode started, and when it
# ends write its return into every one of its steps.

# %% tags=["solution"]
def my_discounted_returns(rewards, gamma, terminated=None, truncated=None):
    """(B, T): at every step, the discounted return Σ_k γ^k r_k of the episode containing that step."""
    ends = torch.zeros_like(rewards, dtype=torch.bool)
    for flags in (terminated, truncated):
        if flags is not None:
            ends = ends | flags.bool()
    out = torch.zeros_like(rewards)
    for b in range(rewards.shape[0]):
        start, total = 0, 0.0
        for t in range(rewards.shape[1]):
            total += gamma ** (t - start) * float(rewards[b, t])
            if ends[b, t] or t == rewards.shape[1] - 1:
                out[b, start : t + 1] = total  # the episode [start, t] is complete
                start, total = t + 1, 0.0
    return out


rl.exercises.check("discounted_returns", my_discounted_returns);

# %% [markdown] tags=["solution"]
# ### Solution to exercise 2
#
# The mean of $g = u(R - b)$ does not depend on $b$ (the baseline term has mean zero), so minimising the
# variance is the same as minimising the second moment $m(b) = \mathbb E\big[\|u\|^2(R-b)^2\big]$. It is a
# convex quadratic in $b$:
# $m'(b) = -2\,\mathbb E\big[\|u\|^2(R-b)\big] = 0 \iff b\,\mathbb E\|u\|^2 = \mathbb E\big[\|u\|^2R\big]$, which is (3.5).
# $b^\star$ is a weighted mean of returns with weights $\|u\|^2$; it equals the plain mean return $J$ exactly
# when $\|u\|^2$ and $R$ are uncorrelated, for instance when every outcome has the same score norm. A uniform
# softmax bandit is such a case: $\|\mathbf 1_a - \pi\|^2$ is the same for every arm, so $b^\star = J$; a
# non-uniform policy breaks the tie, as the cell shows.

# %% tags=["solution"]
# NBVAL_CHECK_OUTPUT
bandit_ex = rl.SoftmaxBandit([1.0, 0.0, 0.5], dtype=torch.float64)
for name, z_ex in [("uniform", torch.zeros(3, dtype=torch.float64)), ("skewed", torch.tensor([2.0, 0.0, -1.0], dtype=torch.float64))]:
    print(f"{name:>8} policy: b* = {float(bandit_ex.exact_optimal_baseline(z_ex)):.4f},  J = {float(bandit_ex.expected_return(z_ex)):.4f}")
z0 = torch.zeros(3, dtype=torch.float64)
assert abs(float(bandit_ex.exact_optimal_baseline(z0)) - float(bandit_ex.expected_return(z0))) < 1e-12

# %% [markdown] tags=["solution"]
# ### Solution to exercise 3
#
# With a fixed budget of env steps, a batch of $N$ episodes buys one update whose gradient noise falls like
# $1/\sqrt N$ (§2.6); $N$ times smaller batches buy $N$ times more updates, each noisier. Counted in *updates*,
# larger batches should need fewer: every step is better informed. Counted in *env steps*, small batches can
# need fewer on an easy task like CartPole, because many cheap, noisy steps may make more progress than a few
# precise ones — as long as the noise does not destabilise training. The advantage normalisation and Adam of
# the default configuration help with that: they keep the step size of a one-episode update in check. Where
# the balance lies is an empirical question; the cell runs the experiment at the full size on seed 0 (it takes
# a few minutes) and prints both counts. One seed is one draw: to rank the batch sizes, repeat it over paired
# seeds and compare as in §3.6. The benchmark of §3.6 did so for one episode against eight: one needs fewer
# env steps over ten paired seeds (the interval is printed there), with no difference detected in the dip
# after reaching 475.

# %% tags=["solution"]
if SIZE == "full":
    for n_ep in (1, 4, 16):
        h_ex = rl.train_reinforce(rl.ReinforceConfig(seed=0, episodes_per_batch=n_ep, total_env_steps=STEPS), progress=True)
        n_steps = h_ex.steps_to_threshold(475, window=20)
        n_updates = None if n_steps is None else (h_ex.episode_end_steps.index(n_steps) + 1) // n_ep
        print(f"episodes_per_batch = {n_ep:>2}: 475 after {n_steps} env steps, about {n_updates} updates")
else:
    print("set RLBOOK_SIZE=full to run this experiment")

# %% [markdown] tags=["solution"]
# ### Solution to exercise 4
#
# With $\gamma = 0.99$ an action's weight counts rewards up to roughly $1/(1-\gamma) = 100$ steps ahead; with
# $\gamma = 1$ it counts every remaining step, up to 500, and those distant rewards are mostly noise as far as
# this action is concerned. So $\gamma = 1$ raises the variance of the gradient, which the cell measures on
# the batch of §3.5 (rewards-to-go, no baseline, so that no value function has to be refitted). The price of
# $\gamma < 1$ is a bias: the gradient optimises the discounted objective, which undervalues the far future.
# On CartPole that bias is likely harmless (a pole that is balanced now is likely to stay balanced). The effect
# on learning speed need not follow the variance ratio and can go either way on a single seed: the learned
# baseline and the normalised advantages of the default variant already remove much of the extra noise of
# $\gamma = 1$. The full size trains one run with $\gamma = 1$, which illustrates and does not rank; compare
# over paired seeds (§3.6) before concluding.

# %% tags=["solution"]
var_by_gamma = {g: rl.gradient_variance(policy_mid, var_batch, "rewards_to_go", "none", gamma=g)["variance"]
                for g in (0.99, 1.0)}
print(f"total variance, rewards-to-go: γ = 0.99 → {var_by_gamma[0.99]:.3g};  γ = 1 → {var_by_gamma[1.0]:.3g}")
assert var_by_gamma[0.99] < var_by_gamma[1.0]
if SIZE == "full":
    h_ex = rl.train_reinforce(rl.ReinforceConfig(seed=0, gamma=1.0, total_env_steps=STEPS), progress=True)
    print(f"default variant with γ = 1: 475 after {h_ex.steps_to_threshold(475, 20)} env steps")

# %% [markdown] tags=["solution"]
# ### Solution to exercise 5
#
# The second update reuses episodes sampled by the *previous* policy $\pi_{\theta_{\text{old}}}$. The surrogate's
# gradient is then $\mathbb E_{\tau\sim\pi_{\theta_{\text{old}}}}\big[\sum_t\nabla\log\pi_\theta(a_t\mid s_t)\,w_t\big]$, an
# expectation under the wrong distribution: it is not $\nabla J(\theta)$, and nothing in the estimator corrects
# for the mismatch. After one small step the two policies are close, so the extra update is nearly a repeat of
# the previous one — effectively a larger learning rate in the same direction. The more the data are reused,
# the more the policy chases the quirks of one batch: learning curves typically become less stable and can
# collapse. This is no longer REINFORCE because REINFORCE is on-policy by construction (§3.1). Reusing data
# correctly needs importance weights $\pi_\theta/\pi_{\theta_{\text{old}}}$ (Chapter 5) and a limit on how far the
# policy may move (Chapters 6–7).
#
# ### Solution to exercise 6
#
# For one prompt $q$ with answers $o_1,\dots,o_G$ and rewards $R_i\in\{0,1\}$, take the baseline
# $b = \bar R = \frac1G\sum_j R_j$. The surrogate (3.2) in the bandit view (one action per answer, its
# log-probability the sum over tokens, (1.7)) is
#
# $$L(\theta) = -\frac1G\sum_{i=1}^G \big(R_i - \bar R\big)\sum_{t}\log\pi_\theta(o_{i,t}\mid q, o_{i,<t}).$$
#
# Correct answers get a positive weight, wrong ones a negative weight, and if all $G$ answers agree every weight
# is 0 (nothing to learn from that prompt). GRPO keeps exactly this weight (optionally divided by the group's
# standard deviation) and adds a clipped ratio and a KL penalty (Chapter 9). Strictly, a baseline computed from
# the same group includes $R_i$ itself; using the mean of the *other* $G-1$ answers removes that dependence and
# only rescales the weights by $G/(G-1)$. The library's group advantage with `scale="none"` is $R_i - \bar R$:

# %% tags=["solution"]
# NBVAL_CHECK_OUTPUT
group_rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0])
adv_ex = rl.group_relative_advantages(group_rewards, group_size=8, scale="none")
print("rewards:   ", group_rewards.numpy())
print("R − mean R:", adv_ex.numpy().round(3))
assert torch.allclose(adv_ex, group_rewards - group_rewards.mean())
