# %% [markdown]
# # 15. What RL does to a policy: entropy, its management, and rewards that teach nothing
#
# **Goals.** By the end of this chapter you can
# * derive, for a softmax policy, why a policy-gradient step lowers the entropy when confident tokens are
#   rewarded (the covariance of log-probability and advantage), and check it exactly;
# * read the entropy of the GRPO family's runs over ten paired seeds on one budget, fit the
#   entropy–performance relation $R = -a\,e^{H} + b$ with its interval, and test DAPO's claim that
#   clip-higher keeps the entropy up;
# * switch on the entropy-management methods of 2025 (an entropy bonus, Clip-Cov, KL-Cov, training on
#   the high-entropy "forking" tokens only) and compare them at equal budget;
# * say what random and format-only rewards do to a model trained from scratch when the PPO clip barely
#   acts, and what that can and cannot tell about the pretrained models on which they were reported to help;
# * watch a policy find a loophole in its verifier, catch it three ways (the gap between the reward it
#   trained on and a strict verifier's, a strict verifier on held-out problems, reading samples) and fix it;
# * test on a harder split whether RL expands what the model can solve or only sharpens it, by pass@k up
#   to $k = 256$.
#
# **Prerequisites.** GRPO and the scratchpad task (chapters 9–10); the recipes of chapter 11.
#
# **Where this fits.** Chapters 9–11 measured what RL does to the *reward*. Practitioners ask as often
# what it does to the *policy*: its entropy collapses and exploration with it, its answers grow or
# shrink, it finds whatever the reward pays for, loopholes included, and it may solve fewer problems at
# all while it solves more of them on the first try. Cui et al. 2025 (arXiv:2505.22617) made the first of
# these measurable; Shao et al. 2025 (arXiv:2506.10947) found that on some pretrained models even a
# random reward improves accuracy. This chapter measures both on the book's model, where a reader can
# watch it happen in minutes.

# %%
import copy
import inspect

import matplotlib.pyplot as plt
import numpy as np
import torch

import rlbook as rl

rl.seed_everything(0)
# figures at twice the pixel density (sharp when zoomed)
# %config InlineBackend.figure_formats = ["retina"]
torch.set_num_threads(1)  # as in chapters 9–14: exact repeats on one machine, gentle when it is busy
SIZE = rl.get_size()  # "small" (default; 2 CPU cores) or "full", via RLBOOK_SIZE
print("size:", SIZE)

# %% [markdown]
# ## 15.1 Why policy gradient lowers the entropy
#
# Take a softmax policy $\pi = \mathrm{softmax}(z)$ over tokens and move its logits by a small $\Delta z$. The
# entropy $H = -\sum_a \pi(a)\log\pi(a)$ changes, to first order, by
#
# $$\Delta H \approx -\mathrm{Cov}_{a\sim\pi}\bigl(\log\pi(a),\ \Delta z(a)\bigr). \tag{15.1}$$
#
# *Derivation.* $\partial\pi(b)/\partial z(a) = \pi(b)(\mathbb 1[a=b] - \pi(a))$, so
# $\partial H/\partial z(a) = -\sum_b (\log\pi(b) + 1)\,\pi(b)(\mathbb 1[a=b]-\pi(a)) = -\pi(a)\bigl(\log\pi(a) - \mathbb E_\pi[\log\pi]\bigr)$,
# and $\sum_a \Delta z(a)\,\partial H/\partial z(a) = -\mathbb E_\pi\bigl[(\log\pi - \mathbb E_\pi\log\pi)\,\Delta z\bigr]$, a covariance.
#
# A policy-gradient step on the expected advantage moves the logits by $\Delta z(a) = \eta\,\pi(a)A(a)$ (the
# exact gradient of $\sum_a\pi(a)A(a)$ with a centred $A$), so
# $\Delta H \approx -\eta\,\mathrm{Cov}_\pi(\log\pi,\ \pi A)$: when the likely tokens are the rewarded ones, the
# covariance is positive and the entropy falls. That is the usual situation after supervised training,
# where the model is right more often than not and its right answers are its likely ones. A rare token with
# a positive advantage raises the entropy. (15.1) is Lemma 1 of Cui et al. 2025; for a natural-gradient
# step, $\Delta z = \eta A$, it becomes $\Delta H \approx -\eta\,\mathrm{Cov}_\pi(\log\pi,\ A)$, the form their
# entropy-control methods of §15.3 start from. The cell checks (15.1) on a
# six-token policy against the exact change, at two step sizes: the gap shrinks four times when $\eta$
# halves, as a first-order formula's must.

# %%
from rlbook.widgets.entropy_explorer import FIGSIZE as ENTROPY_FIGSIZE
from rlbook.widgets.entropy_explorer import entropy_explorer, entropy_readout, entropy_trajectory, plot_entropy

gaps = {}
for lr in (0.1, 0.05):
    run = entropy_trajectory("confident token rewarded", lr=lr, steps=1, epochs=1)
    gaps[lr] = abs(run["one_step"][0] - run["first_order"][0])
    print(f"η = {lr}: exact ΔH {run['one_step'][0]:+.6f}, first order (15.1) {run['first_order'][0]:+.6f}, gap {gaps[lr]:.2e}")
print(f"gap ratio for η halved: {gaps[0.1] / gaps[0.05]:.3f}")

# %%
rl.claim("the gap shrinks four times when $\\eta$ halves", gaps[0.1] / gaps[0.05], 4.0, abs=0.2)

# %% [markdown]
# ## 15.2 Entropy across the GRPO family, on one budget
#
# `benchmarks/entropy_dynamics.py` trained chapter 10's scratchpad model (2-digit addition, answers with
# or without their working, up to 24 tokens) with each method for 10,240 generated completions (40 steps
# of 32 prompts × 8), on ten paired seeds: seed $s$ of every method starts from the same supervised model
# and draws from the same generator. `rl.train_grpo` logs the mean token entropy of the sampled
# completions at every step. The methods are chapter 10's and 11's, one configuration per name:
# `grpo_b0` (GRPO without a KL penalty), `grpo_b0_clip_higher` (the same with DAPO's $\varepsilon_{\text{high}} = 0.28$
# and nothing else), and the recipes `dr_grpo`, `dapo`, `cispo` and `gspo`. The chapter reads the stored
# runs (about 13 s each on one core, about 32 s with the four passes of §15.3; 160 runs).

# %%
bench = rl.benchmark_results("entropy_dynamics")
runs, seeds = bench["runs"], bench["seeds"]
by = {c: [r for r in runs if r["condition"] == c] for c in ["before", *bench["conditions"]]}
assert all([r["seed"] for r in rs] == seeds for rs in by.values())  # paired: one run per seed, in order
FAMILY = ["grpo_b0", "grpo_b0_clip_higher", "dr_grpo", "dapo", "cispo", "gspo"]
MANAGED = ["grpo_b0", "grpo_b0_entropy_bonus", "grpo_b0_clip_cov", "grpo_b0_kl_cov", "grpo_b0_top20_entropy"]
SPURIOUS = ["grpo_b0", "random_reward", "format_reward"]


def values(condition, key):
    return np.array([r[key] for r in by[condition]])


def curve(condition, key):
    """Mean over seeds of a per-step curve, up to the shortest run's last step (runs stop at the same budget
    of completions; DAPO's dynamic sampling spends more of it per step, so its runs have fewer steps)."""
    steps = min(len(r["curves"][key]) for r in by[condition])
    return np.mean([r["curves"][key][:steps] for r in by[condition]], axis=0)


print(f"{len(seeds)} paired seeds; budget {bench['budget']:,} completions ({bench['command']}; torch {bench['torch']})")
print(f"{'method':<24}{'final entropy [95 % CI]':>28}{'pass@1 [95 % CI]':>26}{'length':>8}")
for c in FAMILY:
    h, p = rl.mean_ci(values(c, "final_entropy")), rl.mean_ci(values(c, "pass@1"))
    print(f"{c:<24}{h[0]:>10.3f} [{h[1]:.3f}, {h[2]:.3f}]{p[0]:>12.3f} [{p[1]:.3f}, {p[2]:.3f}]{values(c, 'final_length').mean():>8.1f}")

# %%
fig, axes = plt.subplots(1, 2, figsize=(8.4, 4.0), dpi=80)
for k, c in enumerate(FAMILY):
    axes[0].plot(curve(c, "entropy"), color=f"C{k}", label=c)
    axes[1].plot(curve(c, "completion_length"), color=f"C{k}", label=c)
axes[0].set_ylabel("mean token entropy, nats")
axes[1].set_ylabel("completion length, tokens")
for ax in axes:
    ax.set_xlabel("GRPO step (32 prompts × 8)")
fig.legend(*axes[0].get_legend_handles_labels(), loc="lower center", ncol=3, fontsize=9, frameon=False)
axes[0].set_title("mean over ten seeds", fontsize=9)
fig.tight_layout(rect=(0, 0.12, 1, 1));

# %%
def versus(a, b, key):
    return rl.compare(values(a, key), values(b, key), names=(a, b))


entropy_cmp = {c: versus(c, "grpo_b0", "final_entropy") for c in FAMILY[1:]}
for c in entropy_cmp.values():
    print("final entropy:", c)
print("pass@1:", versus("grpo_b0_clip_higher", "grpo_b0", "pass@1"))

# %% [markdown]
# Every method's entropy falls fast in the first steps and keeps falling: a few tenths of a nat per token
# after supervised training, a few hundredths at the end. The family splits in two. Dr. GRPO and CISPO end
# with the lowest entropy, 0.33 and 0.38 of `grpo_b0`'s mean, and with a higher pass@1 and longer answers:
# they keep the working (chapter 10 showed why GRPO's per-sequence normalisation shortens right answers and
# Dr. GRPO's does not), and a long answer whose working is fixed by the question is a low-entropy answer.
# GSPO and DAPO show no difference detected at this scale from `grpo_b0` in final entropy.
#
# **DAPO's claim.** Yu et al. 2025 (arXiv:2503.14476) raised the upper clip to keep the entropy from
# collapsing. Here clip-higher alone changes neither the final entropy nor pass@1: no difference detected
# at this scale for either, with intervals at most two hundredths wide. A likely reason is the setting: with
# one pass per batch in two minibatches, the ratio moves only for the second minibatch of each step, by one
# update's worth, so the clip has little to act on, and a clip that does not act cannot keep anything up.
# §15.3 repeats the test with four passes per batch, where the clip acts. The explorer of §15.7 shows why
# even then clip-higher need not raise the entropy: it lets a *rewarded, likely* token grow faster too,
# which lowers the entropy sooner.

# %%
rl.claim_comparison("Dr. GRPO and CISPO end with the lowest entropy", entropy_cmp["dr_grpo"], "<")
rl.claim_comparison("CISPO end with the lowest entropy", entropy_cmp["cispo"], "<")
for c, said in (("dr_grpo", 0.33), ("cispo", 0.38)):
    rl.claim("0.33 and 0.38 of `grpo_b0`'s mean", values(c, "final_entropy").mean() / values("grpo_b0", "final_entropy").mean(), said)
for c in ("dr_grpo", "cispo"):
    rl.claim_comparison("with a higher pass@1", versus(c, "grpo_b0", "pass@1"), ">")
    rl.claim_comparison("and longer answers", versus(c, "grpo_b0", "final_length"), ">")
rl.claim_comparison("GSPO and DAPO show no difference detected at this scale", entropy_cmp["gspo"], "none")
rl.claim_comparison("show no difference detected at this scale from `grpo_b0` in final entropy", entropy_cmp["dapo"], "none")
rl.claim_comparison("clip-higher alone changes neither the final entropy", entropy_cmp["grpo_b0_clip_higher"], "none")
rl.claim_comparison("nor pass@1", versus("grpo_b0_clip_higher", "grpo_b0", "pass@1"), "none")
rl.claim("intervals at most two hundredths wide", max(c.ci_high - c.ci_low for c in (entropy_cmp["grpo_b0_clip_higher"],
                                                                               versus("grpo_b0_clip_higher", "grpo_b0", "pass@1"))), high=0.02)
rl.claim("a few tenths of a nat per token", np.mean([r["curves"]["entropy"][0] for r in by["grpo_b0"]]), low=0.2, high=0.6)
rl.claim("a few hundredths at the end", values("grpo_b0", "final_entropy").mean(), low=0.02, high=0.09)

# %% [markdown]
# **The entropy–performance relation.** Cui et al. fitted, along a run, the training accuracy $R$ against
# the entropy $H$ as $R = -a\,e^{H} + b$ (their eq. 1): performance is bought with entropy, and $b - a$, the
# value at $H = 0$, is where the run must stop once the entropy is spent. `rl.entropy_performance_fit`
# fits it by least squares in $x = e^H$. The cell fits it to each `grpo_b0` run's 40 steps (the batch's
# sampled accuracy against its entropy), and gives $a$, $b$ and $R^2$ across the ten seeds with their
# intervals, beside the accuracy the runs reached.

# %%
fits = [rl.entropy_performance_fit(r["curves"]["entropy"], r["curves"]["pass@1"]) for r in by["grpo_b0"]]
a_ci, b_ci, r2_ci = (rl.mean_ci([f[k] for f in fits]) for k in ("a", "b", "r2"))
last_batch = rl.mean_ci([np.mean(r["curves"]["pass@1"][-5:]) for r in by["grpo_b0"]])
print(f"a = {a_ci[0]:.3f} [{a_ci[1]:.3f}, {a_ci[2]:.3f}];  b = {b_ci[0]:.3f} [{b_ci[1]:.3f}, {b_ci[2]:.3f}];  "
      f"R² = {r2_ci[0]:.3f} [{r2_ci[1]:.3f}, {r2_ci[2]:.3f}]  (ten runs)")
print(f"batch accuracy over the last five steps: {last_batch[0]:.3f} [{last_batch[1]:.3f}, {last_batch[2]:.3f}]")
ceiling_per_seed = np.array([f["b"] - f["a"] for f in fits])
ceiling = rl.mean_ci(ceiling_per_seed)
print(f"the fit's accuracy at H = 0, b − a = {ceiling[0]:.3f} [{ceiling[1]:.3f}, {ceiling[2]:.3f}]; above 1 on "
      f"{int(np.sum(ceiling_per_seed > 1))} of {len(fits)} seeds")


def line_r2(h, acc):
    """R² of the least-squares straight line acc ≈ c₀ + c₁·H, the alternative to e^H."""
    h, acc = np.asarray(h, dtype=float), np.asarray(acc, dtype=float)
    residual = acc - np.polyval(np.polyfit(h, acc, 1), h)
    return 1 - np.sum(residual ** 2) / np.sum((acc - acc.mean()) ** 2)


r2_line = [line_r2(r["curves"]["entropy"], r["curves"]["pass@1"]) for r in by["grpo_b0"]]
fit_cmp = rl.compare([f["r2"] for f in fits], r2_line, names=("R² of R = −a·e^H + b", "R² of a straight line in H"))
print(fit_cmp)
entropy_range = (min(min(r["curves"]["entropy"]) for r in by["grpo_b0"]), max(max(r["curves"]["entropy"]) for r in by["grpo_b0"]))
print(f"entropies along the runs: {entropy_range[0]:.2f} to {entropy_range[1]:.2f} nats")

fig, ax = plt.subplots(figsize=(6, 3.6), dpi=80)
for k, r in enumerate(by["grpo_b0"][:4]):
    h, acc = np.array(r["curves"]["entropy"]), np.array(r["curves"]["pass@1"])
    ax.scatter(h, acc, s=8, color=f"C{k}", label=f"seed {r['seed']}")
    grid = np.linspace(0, h.max(), 50)
    ax.plot(grid, -fits[k]["a"] * np.exp(grid) + fits[k]["b"], color=f"C{k}", lw=1)
ax.set_xlabel("mean token entropy H, nats")
ax.set_ylabel("batch accuracy R")
ax.set_title("grpo_b0 along training; lines: R = −a·exp(H) + b", fontsize=9)
ax.legend(fontsize=8.5)
plt.tight_layout();

# %% [markdown]
# The relation fits the book's runs, $R^2$ about 0.89 along a 40-step run, but these runs cannot test it:
# a straight line in $H$ fits them too, and the paired difference in $R^2$ between the two shows no difference
# detected at this scale. Over the entropies these runs pass through, between 0.02 and 0.37 nats, $e^H$ is
# close to $1 + H$, so the two curves nearly coincide: the law is consistent with these runs, not tested by
# them. Its prediction at $H = 0$, $b - a$, is about 1.03, above 1 on seven of the ten seeds: an accuracy no
# policy can have, so it is an artefact of extrapolating the fit, not a prediction. What the runs do show is
# that on this task, where the right answer is unique, the accuracy keeps rising as the entropy falls, to
# the end of the runs. Cui et al.'s warning (the entropy is spent before the reward stops rising) bites
# where the collapsed policy's accuracy is *not* the goal: where the model must still explore to find
# answers it does not yet give.

# %%
rl.claim("$R^2$ about 0.89", r2_ci[0], 0.89)
rl.claim_comparison("the paired difference in $R^2$ between the two shows no difference detected", fit_cmp, "none")
rl.claim("between 0.02 and 0.37 nats", entropy_range[0], 0.02)
rl.claim("between 0.02 and 0.37 nats", entropy_range[1], 0.37)
rl.claim("is about 1.03", ceiling[0], 1.03)
rl.claim("above 1 on seven of the ten seeds", int(np.sum(ceiling_per_seed > 1)), 7, abs=0)

# %% [markdown]
# ## 15.3 Managing the entropy
#
# Four ways to keep the entropy from collapsing, each one switch of `GRPOConfig` on top of `grpo_b0`
# (the losses are checked against autograd in `tests/test_entropy_switches.py`):
#
# * **an entropy bonus**: the loss minus $c$ times the mean token entropy (`entropy_coef`; TRL's name), here
#   $c = 0.01$;
# * **Clip-Cov** (Cui et al., eq. 10): among the tokens whose centred covariance
#   $(\log\pi - \overline{\log\pi})(A - \bar A)$ lies in $[1, 5]$, a random share of $2\times10^{-4}$ of all tokens has
#   its gradient removed (`entropy_control="clip_cov"`);
# * **KL-Cov** (their eq. 11): the top $2\times10^{-3}$ of tokens by covariance get a penalty
#   $|\log\pi_\theta - \log\pi_{\text{old}}|$ instead (`entropy_control="kl_cov"`), and every token's surrogate is
#   the *unclipped* $-A\rho$, so outside those few tokens there is no trust region at all;
# * **forking tokens only** (Wang et al. 2025, arXiv:2506.01939): only the 20 % of tokens with the highest
#   entropy carry a policy gradient (`top_entropy_quantile=0.2`).
#
# **From (15.1) to a batch.** (15.1) is about one state: the covariance runs over the tokens the policy
# could emit at one prefix, weighted by $\pi$. Clip-Cov and KL-Cov cannot compute that for a language model,
# so they rank the *sampled* tokens by the centred product $(\log\pi - \overline{\log\pi})(A - \bar A)$, with the
# means taken over all the response tokens of the batch. Sampling weights each prefix's tokens by $\pi$
# already, so the product's batch mean is the natural-gradient form $\mathrm{Cov}(\log\pi, A)$ above, with
# the expectation over states replaced by a pool over prompts and positions. The pool is where it can
# mislead: a token can rank high because its whole answer was likely and rewarded, or because its position
# is nearly determined, not because of a choice at that token, and the optimiser (AdamW here, as in
# practice) takes neither of the two step forms. The product ranks tokens; it does not predict the
# entropy change.

# %%
print(f"{'method':<24}{'final entropy [95 % CI]':>28}{'pass@1 [95 % CI]':>26}")
for c in MANAGED:
    h, p = rl.mean_ci(values(c, "final_entropy")), rl.mean_ci(values(c, "pass@1"))
    print(f"{c:<24}{h[0]:>10.3f} [{h[1]:.3f}, {h[2]:.3f}]{p[0]:>12.3f} [{p[1]:.3f}, {p[2]:.3f}]")
managed_cmp = {c: (versus(c, "grpo_b0", "final_entropy"), versus(c, "grpo_b0", "pass@1")) for c in MANAGED[1:]}
for c, (h, p) in managed_cmp.items():
    print("final entropy:", h)
    print("pass@1:       ", p)

# %%
fig, ax = plt.subplots(figsize=(7, 3.6), dpi=80)
for k, c in enumerate(MANAGED):
    ax.plot(curve(c, "entropy"), color=f"C{k}", label=c)
ax.set_xlabel("GRPO step")
ax.set_ylabel("mean token entropy, nats")
ax.set_title("mean over ten seeds", fontsize=9)
ax.legend(fontsize=8.5)
plt.tight_layout();

# %% [markdown]
# At these settings three of the four change nothing measurable: the entropy bonus at $c = 0.01$, Clip-Cov
# and KL-Cov all show no difference detected at this scale from `grpo_b0`, in final entropy and in
# pass@1. Clip-Cov and KL-Cov act on a share of tokens ($2\times10^{-4}$, $2\times10^{-3}$) tuned for batches of
# millions of tokens; a batch here holds a few thousand, in two minibatches. At that share Clip-Cov's rule
# would pick fewer than one token per minibatch; the implementation, as verl's, picks at least one, so here
# it removes the gradient of at most one token per minibatch, two per step, about 0.07 % of a batch's
# tokens: more than three times the paper's share, and still a handful of tokens. KL-Cov penalises two
# tokens per minibatch. The
# bonus is small against a policy-gradient term whose advantages are of order one. Training on the
# top-20 % entropy tokens is the one that moves: it keeps the entropy higher, and pays for it with a lower
# pass@1. Wang et al. found the forking tokens sufficient on large reasoning models, where most tokens
# of a long chain of thought are nearly determined; on this model the low-entropy tokens (the digits of
# the working) still carry part of what must be learned.
#
# That leaves the question the methods were built for unanswered here: does keeping the entropy up pay
# later, on a task where the policy must keep exploring? This task does not need it (§15.2). Exercise 3
# raises the switches to strengths that act at this batch size.

# %%
for name, (h, p) in managed_cmp.items():
    if name != "grpo_b0_top20_entropy":
        rl.claim_comparison("all show no difference detected at this scale from `grpo_b0`, in final entropy", h, "none")
        rl.claim_comparison("in final entropy and in", p, "none")
tokens_per_step = 32 * 8 * np.mean([np.mean(r["curves"]["completion_length"]) for r in by["grpo_b0"]])
rl.claim("a batch here holds a few thousand", tokens_per_step, low=1000, high=9999)
per_minibatch = tokens_per_step / 2  # num_minibatches=2 (benchmarks/entropy_dynamics.py)
rl.claim("would pick fewer than one token per minibatch", 2e-4 * per_minibatch, high=1.0)
clip_cov_count = max(1, int(2e-4 * per_minibatch))  # rlbook.clip_cov_mask: max(1, ⌊r·N⌋) of the eligible tokens
rl.claim("at most one token per minibatch, two per step", 2 * clip_cov_count, 2, abs=0)
rl.claim("about 0.07 % of a batch's", 2 * clip_cov_count / tokens_per_step, 0.0007)
rl.claim("more than three times the paper's share", 2 * clip_cov_count / tokens_per_step / 2e-4, low=3.0)
rl.claim("KL-Cov penalises two tokens per minibatch", max(1, int(2e-3 * per_minibatch)), 2, abs=0)
rl.claim_comparison("it keeps the entropy higher", managed_cmp["grpo_b0_top20_entropy"][0], ">")
rl.claim_comparison("and pays for it with a lower", managed_cmp["grpo_b0_top20_entropy"][1], "<")

# %% [markdown]
# **With four passes per batch, where the clip acts.** At one pass the ratio barely leaves 1, which is why
# clip-higher (§15.2) and KL-Cov, both of which act through the ratio, could hardly act. The benchmark also
# ran `grpo_b0` with four passes over each batch (`grpo_b0_mu4`, `num_inner_epochs=4`), the same with
# clip-higher ($\varepsilon_{\text{high}} = 0.28$) and the same with KL-Cov, on the same ten seeds and budget.

# %%
MU4 = ["grpo_b0", "grpo_b0_mu4", "grpo_b0_mu4_clip_higher", "grpo_b0_mu4_kl_cov"]
print(f"{'method':<26}{'final entropy [95 % CI]':>28}{'pass@1 [95 % CI]':>26}{'length':>8}")
for c in MU4:
    h, p = rl.mean_ci(values(c, "final_entropy")), rl.mean_ci(values(c, "pass@1"))
    print(f"{c:<26}{h[0]:>10.3f} [{h[1]:.3f}, {h[2]:.3f}]{p[0]:>12.3f} [{p[1]:.3f}, {p[2]:.3f}]{values(c, 'final_length').mean():>8.1f}")
mu4_cmp = {(a, b, key): versus(a, b, key) for a, b in (("grpo_b0_mu4", "grpo_b0"), ("grpo_b0_mu4_clip_higher", "grpo_b0_mu4"),
                                                       ("grpo_b0_mu4_kl_cov", "grpo_b0_mu4"))
           for key in ("final_entropy", "pass@1", "final_length")}
for c in mu4_cmp.values():
    print(c)
higher = values("grpo_b0_mu4_clip_higher", "final_entropy") / values("grpo_b0_mu4", "final_entropy")
print("clip-higher's final entropy over grpo_b0_mu4's, per seed:", np.round(higher, 2))
clip_higher_entropy = mu4_cmp[("grpo_b0_mu4_clip_higher", "grpo_b0_mu4", "final_entropy")]
needed = rl.seeds_needed(clip_higher_entropy.mean_diff, clip_higher_entropy.sd_diff)
print(f"paired seeds needed to detect a difference of {clip_higher_entropy.mean_diff:+.3f} at this spread (power 0.8): {needed}")

# %% [markdown]
# Four passes spend the entropy faster: `grpo_b0_mu4` ends with a lower entropy than `grpo_b0`, and with
# longer answers, with no difference detected at this scale in pass@1. Here the clip acts, and the test of
# DAPO's claim is inconclusive at ten seeds: clip-higher's final entropy is 44 % above `grpo_b0_mu4`'s on
# average, but its paired interval includes zero (no difference detected), and a difference of the size
# observed, at this spread, would need 26 paired seeds to detect. In pass@1 clip-higher shows no difference
# detected at this scale against `grpo_b0_mu4` either. The seeds disagree rather than agree on nothing: on
# three seeds clip-higher ended with more than twice the entropy (and those three with the shortest answers
# of its ten runs: more of their answers skip the working), on the other seven with about the same. Forty
# steps on a task whose entropy collapses anyway is also far from DAPO's regime of long runs. KL-Cov at four
# passes shows no difference detected at this scale either, in final entropy or in pass@1, though on three
# seeds its pass@1 fell well below the others'; its surrogate has no clip on all but a few tokens, which at
# four passes may let a batch move the policy far (untested here).

# %%
rl.claim_comparison("ends with a lower entropy than `grpo_b0`", mu4_cmp[("grpo_b0_mu4", "grpo_b0", "final_entropy")], "<")
rl.claim_comparison("and with longer answers", mu4_cmp[("grpo_b0_mu4", "grpo_b0", "final_length")], ">")
rl.claim_comparison("with no difference detected at this scale in pass@1", mu4_cmp[("grpo_b0_mu4", "grpo_b0", "pass@1")], "none")
rl.claim_comparison("the test of DAPO's claim is inconclusive at ten seeds", clip_higher_entropy, "none")
rl.claim("44 % above `grpo_b0_mu4`'s on average", clip_higher_entropy.mean_diff / values("grpo_b0_mu4", "final_entropy").mean(), 0.44)
rl.claim_comparison("In pass@1 clip-higher shows no difference detected",
                    mu4_cmp[("grpo_b0_mu4_clip_higher", "grpo_b0_mu4", "pass@1")], "none")
for key in ("final_entropy", "pass@1"):
    rl.claim_comparison("KL-Cov at four passes shows no difference detected at this scale either",
                        mu4_cmp[("grpo_b0_mu4_kl_cov", "grpo_b0_mu4", key)], "none")
rl.claim("on three seeds clip-higher ended with more than twice the entropy", int(np.sum(higher > 2)), 3, abs=0)
rl.claim("on the other seven with about the same", max(abs(np.log(higher[higher <= 2]))), high=np.log(1.5))
rl.claim("would need 26 paired seeds to detect", needed, 26, abs=0)
lengths = values("grpo_b0_mu4_clip_higher", "final_length")
rl.claim("those three with the shortest answers of its ten runs", lengths[higher <= 2].min() - lengths[higher > 2].max(), low=0.0)
rl.claim("three seeds its pass@1 fell well below the others'", int(np.sum(values("grpo_b0_mu4_kl_cov", "pass@1") < 0.8)), 3, abs=0)

# %% [markdown]
# **The clip's own bias, exactly.** Chen et al. 2025 (arXiv:2512.16912) and Park et al. 2025
# (arXiv:2509.26114) traced part of the entropy's fall to the clip itself: with a reward that carries no
# information, the clipped update still moves the policy in a preferred direction. A five-token case shows
# where the direction comes from. Sample a token $a$ from $\pi$, give it an advantage of $+1$ or $-1$ with
# probability ½ each (a coin-flip reward), and run passes of the clipped surrogate until the ratio reaches
# the clip. The sampled token's probability ends at $(1+\varepsilon_{\text{high}})\pi(a)$ if rewarded and at
# $(1-\varepsilon_{\text{low}})\pi(a)$ if penalised, and the other tokens keep their proportions (the ratio's
# gradient moves logit $a$ against all the others, along $e_a - \pi$). Averaging over the ten outcomes,
#
# $$\mathbb E[\pi'(b)] = \pi(b)\Bigl[1 + \delta\Bigl(\pi(b) - \sum_{a\ne b}\frac{\pi(a)^2}{1-\pi(a)}\Bigr)\Bigr],
# \qquad \delta = \frac{\varepsilon_{\text{high}} - \varepsilon_{\text{low}}}{2}.$$
#
# With a symmetric clip, $\delta = 0$ and the expected policy is exactly the old one: no bias, as for any update
# that moves the sampled token's probability by the same factor up and down. With DAPO's
# $\varepsilon_{\text{high}} = 0.28$ the bias points to the likely tokens: the most likely one gains 0.013 in
# expectation and the entropy of the expected policy falls by 0.022 nats; swapping the two widths reverses it,
# a rise of 0.021. This idealised end point is one mechanism, not the whole story: in real training not every
# sample reaches the clip, and which ones do depends on the sign of their advantage and on their probability.
# Park et al. analyse that case and find that the lower bound (acting on negative advantages) raises the
# entropy and the upper bound lowers it, with the upper bound's effect dominating at the usual symmetric
# setting, so that even a random reward lowers the entropy; the idealised case above, unbiased at a symmetric
# clip, does not reproduce that asymmetry. A second effect
# acts whatever the clip: the expected entropy after the step, $\mathbb E[H(\pi')]$, falls even when the expected
# policy does not move (by 0.020 nats at the symmetric clip), because $H$ is concave: shaking a policy at
# random lowers its entropy on average. That is noise, not bias; a random reward does it clipped or not. The
# cell computes both over the ten outcomes for three clip settings and checks the formula. (A finite step that
# overshoots the clip in one pass ends elsewhere; the idealised end point is what makes the case exact.)

# %%
def entropy(p):
    return float(-(p * np.log(p)).sum())


def clipped_outcome(pi, a, rewarded, eps_low, eps_high):
    """The policy after passes that drive token a's ratio to the clip: π'(a) = (1 ± ε)π(a), others rescaled."""
    new_a = (1 + eps_high) * pi[a] if rewarded else (1 - eps_low) * pi[a]
    out = pi * (1 - new_a) / (1 - pi[a])
    out[a] = new_a
    return out


pi5 = np.array([0.6, 0.2, 0.1, 0.06, 0.04])
clip_bias = {}
for eps_low, eps_high in ((0.2, 0.2), (0.2, 0.28), (0.28, 0.2)):
    outcomes = [(pi5[a] / 2, clipped_outcome(pi5, a, rewarded, eps_low, eps_high)) for a in range(5) for rewarded in (True, False)]
    mean_policy = sum(w * p for w, p in outcomes)  # E[π'] over the sampled token and the coin
    mean_entropy = sum(w * entropy(p) for w, p in outcomes)  # E[H(π')]
    delta = (eps_high - eps_low) / 2
    formula = pi5 * (1 + delta * (pi5 - np.array([sum(pi5[a] ** 2 / (1 - pi5[a]) for a in range(5) if a != b) for b in range(5)])))
    assert np.allclose(mean_policy, formula, atol=1e-15)
    clip_bias[(eps_low, eps_high)] = (mean_policy - pi5, entropy(mean_policy) - entropy(pi5), mean_entropy - entropy(pi5))
    print(f"ε_low = {eps_low}, ε_high = {eps_high}:  E[π'] − π = {np.round(mean_policy - pi5, 4)};  "
          f"H(E[π']) − H(π) = {clip_bias[(eps_low, eps_high)][1]:+.4f};  E[H(π')] − H(π) = {clip_bias[(eps_low, eps_high)][2]:+.4f}")

# %%
assert np.abs(clip_bias[(0.2, 0.2)][0]).max() < 1e-15  # symmetric clip: E[π'] = π exactly
rl.claim("the most likely one gains 0.013 in expectation", clip_bias[(0.2, 0.28)][0][0], 0.013)
rl.claim("the entropy of the expected policy falls by 0.022 nats", -clip_bias[(0.2, 0.28)][1], 0.022)
rl.claim("a rise of 0.021", clip_bias[(0.28, 0.2)][1], 0.021)
rl.claim("by 0.020 nats at the symmetric clip", -clip_bias[(0.2, 0.2)][2], 0.020)

# %% [markdown]
# ## 15.4 Rewards that teach nothing
#
# Shao et al. 2025 (arXiv:2506.10947) trained Qwen2.5-Math models with GRPO on rewards that carry no
# information about correctness, a coin flip or a reward for a well-formed answer alone, and found
# accuracy gains on math benchmarks not far from those of the true reward; on other model families
# (Llama, OLMo) the same spurious rewards gave little or nothing. Their explanation: the clipped update
# amplifies behaviours the pretrained model already has (for Qwen-Math, reasoning in code), whether or not
# the reward points at them. The book's model was trained from scratch on this one task: what do such
# rewards do to it?
#
# Two more conditions of the same benchmark, on `grpo_b0`'s settings: `random_reward` (reward 1 with
# probability ½, whatever the answer; seeded) and `format_reward` (the task's format reward alone: 1 for
# a well-formed answer, right or wrong). Accuracy is measured by the true verifier.

# %%
print(f"{'':<16}{'pass@1 [95 % CI]':>26}{'pass@64':>10}{'greedy':>9}{'final entropy':>15}{'length':>8}")
for c in ["before", *SPURIOUS]:
    p = rl.mean_ci(values(c, "pass@1"))
    extra = "" if c == "before" else f"{values(c, 'final_entropy').mean():>15.3f}{values(c, 'final_length').mean():>8.1f}"
    print(f"{c:<16}{p[0]:>10.3f} [{p[1]:.3f}, {p[2]:.3f}]{values(c, 'pass@64').mean():>10.3f}{values(c, 'greedy').mean():>9.3f}{extra}")
spurious_cmp = {c: rl.compare(values(c, "pass@1"), values("before", "pass@1"), names=(c, "supervised start")) for c in SPURIOUS}
for c in spurious_cmp.values():
    print("pass@1:", c)
pass64_cmp = rl.compare(values("random_reward", "pass@64"), values("before", "pass@64"), names=("random_reward pass@64", "supervised"))
print("pass@64:", pass64_cmp)

# %% [markdown]
# On a model trained from scratch, rewards that teach nothing do harm, and a lot of it. Both spurious
# rewards end far *below* the supervised model they started from, in pass@1, in greedy accuracy and even
# in pass@64, which the supervised model had at its ceiling and a coin-flip reward lowers. The entropy
# does not fall as it does under the true reward: under the coin flip it stays where it started (no
# difference detected at this scale between the first and the last step), and under the format reward
# it rises. With advantages uncorrelated with the answer, the expected update is zero; what is left is the
# noise of each batch's update, and the policy drifts away from what supervised training put in it. The
# format reward is a degenerate case here: the supervised model's answers are almost all well-formed (the
# training reward at the first step is at least 0.99 on every seed), so nearly every group has one reward
# for all its answers and no advantage. The stored reward curves bound how nearly, exactly: a step's reward
# counts its malformed answers ((1 − reward) × 256 of them, for 32 prompts × 8), and a group has an advantage
# only if it holds one, so at most that many of the step's 32 groups carry any signal. At most 3 groups did,
# in any step of any seed, and on every seed at least 98 % of the groups had all-equal rewards, averaged over
# the run. The few groups with a signal penalise a malformed answer (plausibly
# one that ran on to the token budget; the benchmark did not record why), which pushes towards short answers:
# the format reward keeps answers well-formed (it pays for that) and short, and loses the arithmetic with the
# working.
#
# **What this does not test.** Shao et al. explain their gains by the clipping of the update: with rewards
# that carry no signal, the clipped objective still favours the tokens the model already makes likely, so it
# sharpens the model's existing behaviour (on Qwen2.5-Math, reasoning in code), which happened to be right
# more often. Chen et al. 2025 (arXiv:2512.16912) find the same direction: under random rewards clipping
# lowers the entropy, and without clipping it can rise. These runs used `grpo_b0`'s setting, one pass per batch
# in two minibatches, where the ratio barely leaves 1 and the clip has almost nothing to act on (§15.2), and
# the coin flip's entropy did not fall, as with a clip that does not act. So they test a random reward
# without the clipping bias, and show that such a reward does harm here. They do not test Shao et al.'s
# explanation, and they do not show that this model has nothing to amplify: the supervised model's greedy
# answer is right 98 % of the time, a strong mode that a clipping bias might sharpen. The experiment that
# would test it is the same reward at four passes per batch (`num_inner_epochs=4`, where §15.3's clip acts);
# the next cells run it. A gain from a reward that carries no information is evidence about the model and the
# update rule together, not about the reward.

# %%
rl.claim_comparison("Both spurious rewards end far *below* the supervised model", spurious_cmp["random_reward"], "<")
rl.claim_comparison("end far *below* the supervised model they started from, in pass@1", spurious_cmp["format_reward"], "<")
rl.claim("far *below*", max(spurious_cmp[c].ci_high for c in ("random_reward", "format_reward")), high=-0.1)
rl.claim_comparison("a coin-flip reward lowers", pass64_cmp, "<")
rl.claim("in greedy accuracy", max(values(c, "greedy").mean() for c in ("random_reward", "format_reward")) - values("before", "greedy").mean(),
         high=-0.1)
first_entropy = {c: np.array([r["curves"]["entropy"][0] for r in by[c]]) for c in ("random_reward", "format_reward")}
rl.claim_comparison("does not fall as it does under the true reward", rl.compare(values("random_reward", "final_entropy"),
                    values("grpo_b0", "final_entropy"), names=("random_reward's final entropy", "grpo_b0's")), ">")
rl.claim_comparison("under the coin flip it stays where it started", rl.compare(values("random_reward", "final_entropy"), first_entropy["random_reward"],
                                                                               names=("final entropy", "first step's")), "none")
rl.claim_comparison("under the format reward it rises", rl.compare(values("format_reward", "final_entropy"), first_entropy["format_reward"],
                                                                                       names=("final entropy", "first step's")), ">")
rl.claim_comparison("and short", rl.compare(values("format_reward", "final_length"), values("grpo_b0", "final_length"),
                                            names=("format_reward's length", "grpo_b0's")), "<")
rl.claim("the training reward at the first step is at least 0.99 on every seed", min(r["curves"]["reward"][0] for r in by["format_reward"]),
         low=0.99)
# a group has an advantage only if it holds a malformed answer: the step's count of them bounds the groups with a signal
batch = bench["common"]["prompts_per_step"] * bench["common"]["group_size"]
malformed = [np.rint((1 - np.array(r["curves"]["reward"])) * batch) for r in by["format_reward"]]
assert all(np.abs((1 - np.array(r["curves"]["reward"])) * batch - m).max() < 0.01 for r, m in zip(by["format_reward"], malformed))
signal_groups_at_most = [np.minimum(m, bench["common"]["prompts_per_step"]) for m in malformed]
zero_variance_at_least = [1 - (g / bench["common"]["prompts_per_step"]).mean() for g in signal_groups_at_most]
print("format_reward: groups with a signal per step, at most:", max(int(g.max()) for g in signal_groups_at_most),
      "| share of all-equal groups over the run, at least, per seed:", np.round(zero_variance_at_least, 3))
rl.claim("At most 3 groups did", max(g.max() for g in signal_groups_at_most), 3)
rl.claim("at least 98 % of the groups had all-equal rewards", min(zero_variance_at_least), low=0.98)
rl.claim("greedy answer is right 98 % of the time", values("before", "greedy").mean(), 0.98)

# %% [markdown]
# **The coin flip where the clip acts.** `benchmarks/spurious_rewards.py` trains the coin-flip reward at one
# pass per batch (`random_reward`, as above) and at four (`random_reward_mu4`), from the same supervised
# model on each of ten paired seeds, at the same budget of generated completions, and records the share of
# loss tokens whose ratio the clip cut. It is a record of its own, made on another machine than the benchmark
# above: its supervised models come out a little different (another CPU's float order), so it also repeats the
# one-pass condition, and every comparison below pairs runs within it.
#
# The clip now acts: it cuts about 7 % of the tokens at four passes against about 0.1 % at one. If its bias
# sharpened the model, the entropy would fall and the likely answers, right 98 % of the time under greedy
# decoding, would gain. Neither happens. The final entropy is higher than at the first step, at four passes as
# at one, and between four passes and one no difference detected at this scale in the final entropy (the
# interval is wide: telling apart 0.05 nats would take about 40 seeds). Held-out pass@1 falls further at four
# passes than at one, lower on 9 of the 10 seeds, and far below the supervised model's. More passes move the
# policy further on each batch, and with advantages unrelated to the answer the further moves are drift. In
# this record the one-pass entropy rose too, where the first record detected no change; across the two, the
# coin flip at one pass did not lower it. So on this model the clipping bias, if it is there, is smaller than
# the drift of a reward that carries no signal; a model with a strong prior over long reasoning, as
# Qwen2.5-Math has, may give the bias more to act on (untested here).

# %%
spurious_record = rl.benchmark_results("spurious_rewards")
coin = {c: sorted((r for r in spurious_record["runs"] if r["condition"] == c), key=lambda r: r["seed"])
        for c in ("before", "random_reward", "random_reward_mu4")}


def coin_values(condition, key):
    return np.array([r[key] for r in coin[condition]], dtype=float)


def coin_first_entropy(condition):
    return np.array([r["curves"]["entropy"][0] for r in coin[condition]], dtype=float)


print(f"{spurious_record['command']}\n{'':<19}{'pass@1 [95 % CI]':>26}{'greedy':>8}{'first entropy':>15}{'final':>7}{'clip':>8}")
for c in coin:
    p = rl.mean_ci(coin_values(c, "pass@1"))
    extra = "" if c == "before" else (f"{coin_first_entropy(c).mean():>15.3f}{coin_values(c, 'final_entropy').mean():>7.3f}"
                                      f"{coin_values(c, 'mean_clip_fraction').mean():>8.4f}")
    print(f"{c:<19}{p[0]:>10.3f} [{p[1]:.3f}, {p[2]:.3f}]{coin_values(c, 'greedy').mean():>8.3f}{extra}")
passes = {key: rl.compare(coin_values("random_reward_mu4", key), coin_values("random_reward", key),
                          names=(f"four passes {key}", "one pass")) for key in ("mean_clip_fraction", "pass@1", "final_entropy")}
rise = {c: rl.compare(coin_values(c, "final_entropy"), coin_first_entropy(c), names=(f"{c} final entropy", "first step's"))
        for c in ("random_reward", "random_reward_mu4")}
versus_start = rl.compare(coin_values("random_reward_mu4", "pass@1"), coin_values("before", "pass@1"),
                          names=("random_reward_mu4 pass@1", "supervised"))
for c in [*passes.values(), *rise.values(), versus_start]:
    print(c)
entropy_seeds_needed = rl.seeds_needed(0.05, passes["final_entropy"].sd_diff)
print("paired seeds to detect 0.05 nats of final entropy between four passes and one:", entropy_seeds_needed)

# %%
rl.claim("it cuts about 7 % of the tokens at four passes", coin_values("random_reward_mu4", "mean_clip_fraction").mean(), 0.07)
rl.claim("against about 0.1 % at one", coin_values("random_reward", "mean_clip_fraction").mean(), 0.001)
rl.claim_comparison("The clip now acts", passes["mean_clip_fraction"], ">")
rl.claim_comparison("The final entropy is higher than at the first step, at four passes", rise["random_reward_mu4"], ">")
rl.claim_comparison("as at one", rise["random_reward"], ">")
rl.claim_comparison("between four passes and one no difference detected at this scale in the final entropy",
                    passes["final_entropy"], "none")
rl.claim("would take about 40 seeds", entropy_seeds_needed, 40, abs=10)
rl.claim_comparison("Held-out pass@1 falls further at four passes than at one", passes["pass@1"], "<")
rl.claim("lower on 9 of the 10 seeds", int(np.sum(coin_values("random_reward_mu4", "pass@1") < coin_values("random_reward", "pass@1"))),
         9, abs=0)
rl.claim_comparison("and far below the supervised model's", versus_start, "<")
rl.claim("far below", versus_start.ci_high, high=-0.1)

# %% [markdown]
# ## 15.5 A verifier with a loophole, and the policy that finds it
#
# A verifier is code, and code has bugs. When a bug makes it accept wrong answers, RL becomes an optimiser
# pointed at the bug: whatever the verifier pays for and the policy can reach by sampling gets reinforced,
# whether or not it is the task. This is *reward hacking*, one of the concrete problems of Amodei et al.
# 2016 (arXiv:1606.06565); chapter 12 met its cousin, over-optimising a learned reward model. With verifiable rewards it shows up as graders that score an empty answer, a malformed one,
# or one that merely *contains* the right number.
#
# The last is the loophole here. A grader that wants to accept "72" as well as "072" might check whether the
# sum appears anywhere in the completion, `str(a + b) in completion`. The library keeps that check as
# `task.substring_reward`, documented as a verifier with a loophole:

# %%
print(inspect.getsource(rl.lm.AdditionTask.substring_reward).split('"""')[-1].strip())
probe = rl.lm.ScratchpadAdditionTask(num_digits=2)
for prompt, completion in [("29+20=", "049</s>"), ("29+20=", "149</s>"), ("29+20=", "9+0=9;2+2=4;0494949494"),
                           ("88+37=", "8+7=15;8+3+1=12;125</s>")]:
    print(f"{prompt} {completion:<26} strict verifier {probe.reward(prompt, completion):.0f}   "
          f"substring check {probe.substring_reward(prompt, completion):.0f}")

# %% [markdown]
# It accepts everything the strict verifier accepts, and more: a wrong digit in the zero padding of a sum
# below 100, and a right number followed by anything, including an answer that never stops. How much more
# depends on what the policy writes, so the loophole is a property of the pair, verifier and policy.
#
# `benchmarks/reward_hacking.py` trains `grpo_b0` from each seed's supervised model twice, once on the
# substring check and once on the strict verifier (the fix), for 92,160 generated completions (360 steps of
# 32 prompts × 8, nine times §15.2's budget, so that a slow exploit has time to show), on ten paired seeds.
# Every training completion is scored by *both* verifiers, whichever one trains, so each run records the
# reward the trainer saw and the reward it should have seen. After training, held-out pass@1 is measured by
# each verifier on the same samples (300 problems × 16); the difference is the share of samples the
# substring check accepts although they are wrong.

# %%
hack = rl.benchmark_results("reward_hacking")
hack_by = {c: [r for r in hack["runs"] if r["condition"] == c] for c in ("before", "substring", "strict")}
assert all([r["seed"] for r in rs] == hack["seeds"] for rs in hack_by.values())  # paired
HACK_NAMES = {"before": "supervised start", "substring": "trained on the substring check",
              "strict": "trained on the strict verifier"}


def hack_values(condition, key):
    return np.array([r[key] for r in hack_by[condition]])


print(f"{len(hack['seeds'])} paired seeds; budget {hack['budget']:,} completions ({hack['command']}; torch {hack['torch']})")
print(f"{'':<32}{'strict pass@1':>24}{'substring pass@1':>24}{'accepted but wrong':>24}")
for c, name in HACK_NAMES.items():
    cells = [rl.mean_ci(hack_values(c, key)) for key in ("pass@1", "substring_pass@1", "accepted_wrong")]
    print(f"{name:<32}" + "".join(f"{m:>10.3f} [{lo:.3f}, {hi:.3f}]" for m, lo, hi in cells))
true_cmp = rl.compare(hack_values("substring", "pass@1"), hack_values("strict", "pass@1"),
                      names=("substring-trained strict pass@1", "strict-trained"))
proxy_cmp = rl.compare(hack_values("substring", "substring_pass@1"), hack_values("strict", "substring_pass@1"),
                       names=("substring-trained substring pass@1", "strict-trained"))
found_cmp = rl.compare(hack_values("substring", "accepted_wrong"), hack_values("before", "accepted_wrong"),
                       names=("substring-trained accepted-but-wrong", "supervised start"))
for c in (true_cmp, proxy_cmp, found_cmp):
    print(c)

# %%
def smooth(values, window=10):
    return rl.rolling_mean(values, window)


fig, axes = plt.subplots(2, 2, figsize=(8.4, 6.0), dpi=80)
fig.delaxes(axes[1, 1])
axes = axes.ravel()[:3]  # three panels in a 2 × 2 grid
for ax, c in zip(axes[:2], ("substring", "strict")):
    for r in hack_by[c]:
        ax.plot(smooth(r["curves"]["strict"]), color="C3", alpha=0.25, lw=0.8)
    for key, color, label in (("substring", "C0", "reward by the substring check"), ("strict", "C3", "reward by the strict verifier")):
        ax.plot(np.mean([smooth(r["curves"][key]) for r in hack_by[c]], axis=0), color=color, lw=2, label=label)
    ax.set_title(HACK_NAMES[c] + " (thin: each seed)", fontsize=9)
    ax.set_ylim(0, 1.02); ax.set_ylabel("share of the training batch", fontsize=9)
for c, color in (("substring", "C0"), ("strict", "C3")):
    axes[2].plot(np.mean([smooth(r["curves"]["completion_length"]) for r in hack_by[c]], axis=0), color=color, label=HACK_NAMES[c])
axes[2].set_title("Completion length (mean over seeds)", fontsize=9); axes[2].set_ylabel("tokens", fontsize=9)
axes[0].legend(fontsize=8.5, loc="lower left"); axes[2].legend(fontsize=8.5)
for ax in axes:
    ax.set_xlabel("GRPO step (32 prompts × 8; 10-step rolling mean)", fontsize=9)
plt.tight_layout();

# %% [markdown]
# Trained on the substring check, the policy finds the loophole. At first both rewards climb together, as
# they do under the strict verifier. Then, seed after seed, the strict reward of
# the training batches falls while the reward the trainer sees stays near 1; every seed ends at least ten
# points below its own peak. The policy has learned that the right number followed by *anything* pays as
# well as the right number: it appends digits after its answer, repeats it, or never writes the end token
# at all, and its completions end longer than the strict-trained policy's. On held-out problems half of what
# it writes is accepted but wrong, up from 7 % for the supervised model it started from, and on two seeds
# almost nothing it writes is right. Its strict pass@1 is far below that of the same model trained on the
# strict verifier. By the reward it was trained on, nothing is wrong: its pass@1 by the substring check
# shows no difference detected at this scale from the honest policy's. That is what makes reward hacking
# dangerous: the training curve looks like success.
#
# **Catching it.** Three checks catch it, and none of them needs to know the bug in advance:
#
# 1. *The gap between the reward and a strict verifier, during training.* Scoring a share of each batch
#    with a stricter (slower, more expensive) verifier costs little. An alarm set at the largest 10-step gap
#    any of the ten honest runs showed fires on every one of the ten hacked runs; the cell prints the step.
#    That level is set on the same honest runs, so it cannot raise a false alarm on them. Left out in turn,
#    one of the ten honest runs would have tripped the alarm set on the other nine: expect about one false
#    alarm in ten honest runs at this level.
# 2. *A strict verifier on held-out problems*, as in the table above: the proxy says 0.98, the truth
#    much less.
# 3. *Reading samples.* The audit below prints accepted-but-wrong samples from the hacked runs; about half of
#    them never reach their end token, and the rest carry the right number with more written after it.

# %%
gaps = {c: [smooth(np.subtract(r["curves"]["substring"], r["curves"]["strict"])) for r in hack_by[c]]
        for c in ("substring", "strict")}
alarm_level = max(g.max() for g in gaps["strict"])  # the largest 10-step gap an honest run showed
alarm_steps = [int(np.argmax(g > alarm_level)) if (g > alarm_level).any() else None for g in gaps["substring"]]
print(f"alarm level (largest 10-step gap of the ten honest runs): {alarm_level:.3f}")
print("first step at which each hacked run's gap exceeds it:", alarm_steps)
peak_drop = [max(smooth(r["curves"]["strict"], 30)) - np.mean(r["curves"]["strict"][-30:]) for r in hack_by["substring"]]
print("strict reward, peak (30-step mean) minus the last 30 steps, per hacked seed:", np.round(peak_drop, 2))
length_cmp = rl.compare([np.mean(r["curves"]["completion_length"][-10:]) for r in hack_by["substring"]],
                        [np.mean(r["curves"]["completion_length"][-10:]) for r in hack_by["strict"]],
                        names=("substring-trained final length", "strict-trained"))
print(length_cmp)
audit = [(r["seed"], q, o) for r in hack_by["substring"] for q, o in r["examples"]]
never_stop = np.mean([not o.endswith("</s>") for _, _, o in audit])
print(f"\naudit: {len(audit)} accepted-but-wrong samples stored (the first {len(audit) // len(hack_by['substring'])} per seed); "
      f"{never_stop:.0%} never reach their end token. Two per seed:")
for r in hack_by["substring"]:
    for q, o in list(dict.fromkeys(map(tuple, r["examples"])))[:2]:  # two distinct samples
        print(f"  seed {r['seed']}  {q} {o:<26} answer {probe.answer_for(*map(int, q[:-1].split('+')))}")

# %%
rl.claim_comparison("Its strict pass@1 is far below", true_cmp, "<")
rl.claim("far below", true_cmp.ci_high, high=-0.2)
rl.claim_comparison("shows no difference detected at this scale from the honest policy's", proxy_cmp, "none")
rl.claim_comparison("half of what it writes is accepted but wrong, up from 7 %", found_cmp, ">")
rl.claim("half of what it writes is accepted but wrong", hack_values("substring", "accepted_wrong").mean(), 0.5)
before_wrong = rl.mean_ci(hack_values("before", "accepted_wrong"))
rl.claim("up from 7 %", before_wrong[0], 0.07)
rl.claim("on two seeds almost nothing it writes is right", int(np.sum(hack_values("substring", "pass@1") < 0.01)), 2, abs=0)
rl.claim("every seed ends at least ten points below its own peak", min(peak_drop), low=0.10)
rl.claim_comparison("its completions end longer than the strict-trained policy's", length_cmp, ">")
rl.claim("fires on every one of the ten hacked runs", sum(s is not None for s in alarm_steps), len(hack_by["substring"]), abs=0)
left_out = [gaps["strict"][i].max() > max(g.max() for j, g in enumerate(gaps["strict"]) if j != i) for i in range(len(gaps["strict"]))]
rl.claim("one of the ten honest runs would have tripped the alarm set on the other nine", sum(left_out), 1, abs=0)
proxy_says = rl.mean_ci(hack_values("substring", "substring_pass@1"))
rl.claim("the proxy says 0.98", proxy_says[0], 0.98)
rl.claim("about half of them never reach their end token", never_stop, 0.5)

# %% [markdown]
# **Fixing it.** Fix the verifier, not the policy. The leniency the substring check was written for,
# accepting "72" as well as "072", is a matter of *parsing* the answer, not of searching for it: require the
# end token, take the final segment, require digits, compare numbers (exercise 5 writes it). The
# book's strict verifier (`task.reward`) is stricter still, and the third row of the table is the fix: the
# same model trained on it ends with almost no accepted-but-wrong answers and the highest strict pass@1 of
# the three rows. Penalties bolted onto a broken reward (a length penalty here, say) might only move the exploit
# elsewhere; the policy optimises whatever the verifier pays for. Why could the policy reach this exploit at
# all? Because the working makes the completion's length the model's choice: the moment it may decide when
# to stop, writing on after the answer is one sampled token away, and the loophole pays for it.

# %%
rl.claim("almost no accepted-but-wrong answers", hack_values("strict", "accepted_wrong").mean(), high=0.005)
rl.claim_comparison("the highest strict pass@1 of the three rows", true_cmp, "<")

# %% [markdown]
# ## 15.6 Does RL expand what the model can solve, or sharpen it?
#
# Yue et al. 2025 (arXiv:2504.13837) compared base and RL-trained models by pass@k up to large $k$ and found
# the RL-trained model ahead at small $k$ and the base model ahead at large $k$: the RL model solves fewer
# problems *at all*,
# because RL concentrates probability on answers the base model could already produce and drops the rest.
# If so, RL with verifiable rewards sharpens, it does not expand. Testing this needs pass@k that is not at its
# ceiling: on chapter 10's 2-digit task every model here solves every held-out problem within 64 samples
# (§15.4's table), so nothing can be told apart at large $k$.
#
# `benchmarks/passk_after_rl.py` moves to a harder split, the same task with 3-digit operands (answers of up
# to 30 tokens; each seed's supervised model trained with the book's recipe), trains `grpo_b0` for 30,720
# completions on ten paired seeds, and draws 256 samples for each of 200 held-out problems before and after
# RL. pass@k for every $k \le 256$ follows from the counts by the unbiased estimator (8.4), and the paired
# difference at each $k$ has its interval over the seeds.

# %%
passk = rl.benchmark_results("passk_after_rl")
ks = np.array(passk["ks"])
prs = sorted(passk["runs"], key=lambda r: r["seed"])
pk_before = np.array([r["before"]["pass@k"] for r in prs])  # (seeds, len(ks))
pk_after = np.array([r["after"]["pass@k"] for r in prs])
print(f"{len(prs)} paired seeds; {passk['num_problems']} problems × {passk['num_samples']} samples; budget "
      f"{passk['budget']:,} completions ({passk['command']}; torch {passk['torch']})")
passk_cmp = {int(k): rl.compare(pk_after[:, i], pk_before[:, i], names=(f"after RL pass@{k}", "before"))
             for i, k in enumerate(ks)}
print(f"{'k':>5}{'before':>9}{'after':>9}   after − before [95 % CI]   verdict")
for i, k in enumerate(ks):
    c = passk_cmp[int(k)]
    print(f"{k:>5}{pk_before[:, i].mean():>9.3f}{pk_after[:, i].mean():>9.3f}   {c.mean_diff:+.3f} [{c.ci_low:+.3f}, {c.ci_high:+.3f}]"
          f"   {c.verdict}")
counts_before = np.array([r["before"]["counts"] for r in prs])  # (seeds, problems) correct samples of 256
counts_after = np.array([r["after"]["counts"] for r in prs])
gained = ((counts_before == 0) & (counts_after > 0)).sum(axis=1)  # problems solved only after RL, per seed
lost = ((counts_before > 0) & (counts_after == 0)).sum(axis=1)  # problems solved only before
unsolved = {"before": (counts_before == 0).sum(axis=1), "after": (counts_after == 0).sum(axis=1)}
print(f"problems never solved in 256 samples, mean over seeds: before {unsolved['before'].mean():.1f}, "
      f"after {unsolved['after'].mean():.1f} (of {counts_before.shape[1]})")
print(f"per seed, solved only after RL: {gained.tolist()}; solved only before: {lost.tolist()}")
lost_cmp = rl.compare(lost, gained, names=("problems lost by RL", "problems gained"))
print(lost_cmp)

# %%
fig, ax = plt.subplots(figsize=(6.5, 3.6), dpi=80)
for values_k, color, label in ((pk_before, "C7", "supervised start"), (pk_after, "C0", "after grpo_b0")):
    bands = np.array([rl.mean_ci(values_k[:, i]) for i in range(len(ks))])
    ax.plot(ks, bands[:, 0], "o-", color=color, label=label)
    ax.fill_between(ks, bands[:, 1], bands[:, 2], color=color, alpha=0.2)
ax.set_xscale("log", base=2); ax.set_xticks(ks, [str(k) for k in ks])
ax.set_xlabel("k (samples per problem)"); ax.set_ylabel("held-out pass@k")
ax.set_title("3-digit problems: mean and 95 % CI over ten paired seeds", fontsize=9)
ax.legend(fontsize=9)
plt.tight_layout();

# %% [markdown]
# The curves cross. RL lifts pass@1 from 0.26 to 0.83 and keeps a lead up to $k = 8$; at $k = 16$ there is no
# difference detected at this scale; from $k = 32$ on the supervised model is ahead, and at $k = 256$ by
# 2.5 points. (The figure's bands are each curve's own spread over seeds and overlap at large $k$; the
# table's paired differences cancel what the seeds share, and they are what separate the curves.) The
# crossing happens below the ceiling (at $k = 32$ the supervised model solves 0.985 of the
# problems, the RL-trained one 0.949), so it is not an artefact of a curve that cannot rise. The per-problem
# counts say what happened. In 256 samples the supervised models leave almost no held-out problem unsolved,
# so at this $k$ there was little for RL to add; what it did was lose: after RL a median of 2.5 of the 200
# problems (a mean of 5, pulled up by one seed with 21) are never solved in 256 samples, more than the
# problems it gained on the paired seeds. The t-intervals at large $k$ lean on that one seed; a sign test does
# not, and pass@k for $k$ = 32, 64 and 128 is lower after RL on all ten seeds (two-sided sign test, p = 0.002
# for each).
#
# On this task RL sharpened. It moved probability onto answers the model could already produce, which is
# why pass@1 more than tripled, and the answers it moved probability away from included the only right
# answers to a few problems. This is Yue et al.'s finding, on a model trained from scratch in minutes
# rather than on a pretrained one. What it does not show is that RL *cannot* expand: the supervised model
# here was trained on labels with a one-digit mistake in most of them, which spreads its probability over
# near-miss answers with the right one among them, so it could already reach almost everything. A base
# model whose right answers are out of its sampling reach would test the other half of the question.

# %%
rl.claim_comparison("RL lifts pass@1 from 0.26 to 0.83", passk_cmp[1], ">")
for phase, mean, target in (("before", pk_before[:, 0], 0.26), ("after", pk_after[:, 0], 0.83)):
    m, lo, hi = rl.mean_ci(mean)
    rl.claim("RL lifts pass@1 from 0.26 to 0.83", m, target)
rl.claim_comparison("keeps a lead up to $k = 8$", passk_cmp[8], ">")
rl.claim_comparison("at $k = 16$ there is no difference detected at this scale", passk_cmp[16], "none")
for k in (32, 64, 128, 256):
    rl.claim_comparison("from $k = 32$ on the supervised model is ahead", passk_cmp[k], "<")
rl.claim("at $k = 256$ by 2.5 points", -passk_cmp[256].mean_diff, 0.025)  # the words allow ±0.0005
i32 = list(ks).index(32)
for quote, values_32, target in (("the supervised model solves 0.985", pk_before[:, i32], 0.985),
                                 ("the RL-trained one 0.949", pk_after[:, i32], 0.949)):
    rl.claim(quote, np.mean(values_32), target)
rl.claim("leave almost no held-out problem unsolved", unsolved["before"].mean(), high=1.0)
rl.claim("a median of 2.5 of the 200", np.median(unsolved["after"]), 2.5)
rl.claim("a mean of 5, pulled up by one seed with 21", unsolved["after"].mean(), 5)
rl.claim("a mean of 5, pulled up by one seed with 21", unsolved["after"].max(), 21, abs=0)
from scipy.stats import binomtest

for k in (32, 64, 128):
    lower = int(np.sum(pk_after[:, list(ks).index(k)] < pk_before[:, list(ks).index(k)]))
    rl.claim("lower after RL on all ten seeds", lower, 10, abs=0)
    rl.claim("two-sided sign test, p = 0.002", binomtest(lower, len(prs)).pvalue, 0.002)
rl.claim_comparison("more than the problems it gained on the paired seeds", lost_cmp, ">")
rl.claim("pass@1 more than tripled", pk_after[:, 0].mean() / pk_before[:, 0].mean(), low=3.0)

# %% [markdown]
# **The debate since.** Yue et al.'s reading, that RL with verifiable rewards sharpens and does not expand,
# has been contested on three fronts. Liu et al. 2025 (ProRL, arXiv:2505.24864) trained far longer, with a KL
# penalty and periodic resets of the reference policy to the current one, and report pass@k gains at large
# $k$, including on tasks the base model failed at every $k$ they tried: in their reading expansion comes
# with prolonged training, and shorter runs stopped before it. Wen et al. 2025 (arXiv:2506.14245) argue that
# pass@k at large $k$ credits the base model for right answers reached by wrong reasoning; counting a sample
# only when its chain of thought is right as well (CoT-pass@k), they find that RL with verifiable rewards does
# extend what the model can solve. Chen et al. 2025 (arXiv:2508.10751) change the objective instead: train on
# pass@k itself, so that a set of $k$ samples earns reward 1 when any of them is right, and they report that
# this improves exploration.
#
# `rl.pass_at_k_advantages` is their analytic advantage. Split a group's $N$ samples, $c$ of them right, into
# all $\binom{N}{k}$ subsets of $k$ and give a subset reward 1 if it holds a right sample. The subsets' mean
# reward is the unbiased estimate (8.4), $\bar R = 1 - \binom{N-c}{k}/\binom{N}{k}$, their variance
# $\bar R(1-\bar R)$, and a sample's advantage is the mean normalised advantage of the subsets it sits in:
#
# $$\begin{gathered}\hat A_{\text{right}} = \frac{1-\bar R}{\sigma},\qquad
# \hat A_{\text{wrong}} = \frac{1-\bar R-\binom{N-c-1}{k-1}\big/\binom{N-1}{k-1}}{\sigma},\cr
# \sigma = \sqrt{\bar R(1-\bar R)},\end{gathered} \tag{15.2}$$
#
# since a wrong sample's subsets lack a right one with probability $\binom{N-c-1}{k-1}/\binom{N-1}{k-1}$. At
# $k = 1$ it is the usual group advantage. The cell prints both advantages for a group of $N = 8$ at $k = 4$
# against $k = 1$, for every count $c$, and checks (15.2) against the enumeration of all 70 subsets. Two
# things stand out. From $c = 5$ on every subset of four holds a right sample, so pass@4 training gives the
# group zero advantage, where the $k = 1$ advantage still pushes toward the right samples: problems the model
# already solves at $k$ stop pulling probability toward their likely answers, the kind of concentration
# §15.6 measured. And with one right sample, a wrong one gets −0.14 at $k = 4$ against −0.38 at
# $k = 1$: it is blamed only for the subsets it leaves without a right answer. (Without the $\sigma$,
# $\tfrac kN\sum_i \hat A_i\nabla\log\pi(y_i)$ has expectation exactly $(1-\tfrac kN)\nabla\,\text{pass@}k$;
# `tests/test_pass_at_k_advantages.py` checks it, and (15.2), by enumeration.)

# %%
import itertools
from math import comb

N_GROUP, K_TRAIN = 8, 4
print(f"{'c':>3}{'pass@4 estimate':>17}{'Â right (k=4)':>15}{'Â wrong (k=4)':>15}{'Â right (k=1)':>15}{'Â wrong (k=1)':>15}")
passk_adv = {}
for c in range(N_GROUP + 1):
    group = torch.tensor([1.0] * c + [0.0] * (N_GROUP - c), dtype=torch.float64)
    adv4, adv1 = rl.pass_at_k_advantages(group, N_GROUP, K_TRAIN), rl.pass_at_k_advantages(group, N_GROUP, 1)
    # the closed form (15.2) against the enumeration of all C(8, 4) = 70 subsets
    subsets = list(itertools.combinations(range(N_GROUP), K_TRAIN))
    maxima = np.array([group[list(s)].max().item() for s in subsets])
    mean, sd = maxima.mean(), maxima.std()
    enumerated = [np.mean([(m - mean) / sd for s, m in zip(subsets, maxima) if i in s]) if sd > 0 else 0.0
                  for i in range(N_GROUP)]
    assert np.allclose(adv4.numpy(), enumerated, atol=1e-12) and abs(mean - rl.pass_at_k(N_GROUP, c, K_TRAIN)) < 1e-12
    passk_adv[c] = (adv4[0].item() if c else float("nan"), adv4[-1].item() if c < N_GROUP else float("nan"),
                    adv1[0].item() if c else float("nan"), adv1[-1].item() if c < N_GROUP else float("nan"))
    print(f"{c:>3}{rl.pass_at_k(N_GROUP, c, K_TRAIN):>17.3f}" + "".join(f"{v:>15.3f}" for v in passk_adv[c]))
zero_from = min(c for c in range(1, N_GROUP + 1) if all(v == 0 or np.isnan(v) for v in passk_adv[c][:2]))

# %%
rl.claim("against the enumeration of all 70 subsets", comb(N_GROUP, K_TRAIN), 70, abs=0)
rl.claim("From $c = 5$ on every subset of four holds a right sample", zero_from, 5, abs=0)
rl.claim("where the $k = 1$ advantage still pushes toward the right samples", passk_adv[zero_from][2], low=0.1)
rl.claim("a wrong one gets −0.14 at $k = 4$", passk_adv[1][1], -0.14)
rl.claim("against −0.38 at $k = 1$", passk_adv[1][3], -0.38)

# %% [markdown]
# **Where §15.6 sits in this debate.** Its result is Yue et al.'s, on a model trained from scratch: after a
# short run of plain GRPO, pass@k at large $k$ fell. It tests neither of the other readings. The run is short
# (30,720 completions, no reference resets), so it says nothing about ProRL's regime. The verifier scores the
# final answer and leaves the working unchecked, so some of the supervised model's extra solves at large $k$
# may be right answers after wrong working, which CoT-pass@k would not count; the scratchpad's working can be
# checked, but the stored counts are of right answers only, so this needs a rerun that keeps the samples. And
# the training objective was pass@1; whether pass@$k$ training (15.2) keeps the large-$k$ solves on this task
# is untested here.

# %% [markdown]
# ## 15.7 The entropy explorer
#
# **Explore.** The `entropy` explorer (also `rlbook explore entropy`) runs §15.1's six-token policy through
# repeated clipped policy-gradient steps, exactly (expectations over the tokens, nothing sampled). Choose
# which tokens are rewarded, the clip range (symmetric, or clip-higher with $\varepsilon_{\text{high}} > \varepsilon_{\text{low}}$), the
# entropy bonus, the step size and the number of passes per step; it draws the entropy over the steps
# beside the same run at symmetric clipping and without the bonus, each token's probability, and the
# first-order prediction (15.1) against the exact change. The static figure shows the confident token
# rewarded, $\varepsilon = 0.2/0.28$, no bonus, $\eta = 1$, four passes per step.

# %%
fig, axes = plt.subplots(2, 2, figsize=(8.4, 6.4), dpi=80)
plot_entropy("confident token rewarded", 0.2, 0.28, 0.0, 1.0, 40, 4, axes=axes.flatten())
fig.tight_layout()
print(entropy_readout("confident token rewarded", 0.2, 0.28, 0.0, 1.0, 40, 4)[0]);

# %%
try:
    display(entropy_explorer())  # move the sliders in a live notebook
except ImportError:
    print("ipywidgets is not installed: the static figure above shows the explorer's default setting")

# %% [markdown]
# ## 15.8 In TRL and verl
#
# The switches of this chapter, by the names two libraries give them (TRL's `GRPOConfig`; verl's actor
# configuration, whose `policy_loss.loss_mode` selects Cui et al.'s losses):
#
# * *Clip-higher*: `epsilon_high` in TRL (the lower side stays `epsilon`), `clip_eps_high` here; DAPO uses 0.28.
# * *An entropy bonus*: `entropy_coef` in TRL and here.
# * *Adaptive entropy control*: Skywork-OR1 (He et al. 2025, arXiv:2505.22312) keeps a target entropy and moves
#   the bonus coefficient by a fixed step each update, up while the entropy is below the target and down
#   while it is above, so the bonus acts only when the entropy has fallen too far. TRL exposes it as
#   `use_adaptive_entropy=True` with `entropy_target`, `entropy_coef_delta` (the step) and `entropy_coef_min` /
#   `entropy_coef_max`. rlbook does not implement it, and this chapter did not test it.
# * *Forking tokens only*: `top_entropy_quantile=0.2` in TRL and here.
# * *Clip-Cov and KL-Cov*: not in TRL; in verl, `policy_loss.loss_mode="clip_cov"` or `"kl_cov"`, with
#   `clip_cov_ratio`, `clip_cov_lb`, `clip_cov_ub`, `kl_cov_ratio` and `ppo_kl_coef`. Cui et al.'s recipes use
#   $k = 2\times10^{-3}$ (7B) and a coefficient of 1 for KL-Cov, which a release's defaults need not match;
#   and on small batches the rounding up to one token per minibatch sets the share (§15.3).
#
# What to log, whichever you use: the mean token entropy of the sampled completions, and by position; the
# training reward beside a second, stricter verifier's score of a share of the same batch (§15.5); and
# pass@k at a $k$ below its ceiling, before and after (§15.6). Which switch to reach for depends on the task.
# Where, as here, the accuracy rises while the entropy falls, a collapse is not in itself a problem. Where the
# model must keep exploring, a constant bonus has to be sized against the scale of the advantages, which
# changes over a run (§15.3's $c = 0.01$ did nothing measurable here); a target entropy fixes the quantity
# you care about instead, which is the argument for the adaptive form, though nothing here measures it.

# %% [markdown]
# ## Summary
#
# * A policy-gradient step changes a softmax policy's entropy by minus the covariance of log-probability
#   and the logit change, (15.1); rewarding likely tokens lowers the entropy, rewarding rare ones raises it.
# * On the book's model every GRPO-family method spends most of its entropy within 40 steps; Dr. GRPO and
#   CISPO spend more of it than `grpo_b0` and reach a higher pass@1 with longer answers. The relation
#   $R = -a\,e^{H} + b$ fits each run, but over this narrow range of entropies a straight line fits too, and
#   its value at $H = 0$ is an accuracy above 1: the runs are consistent with the law without testing it.
# * DAPO's clip-higher, alone, made no difference detected at this scale to entropy or accuracy at one pass
#   per batch, where the clip has little to act on. At four passes, where it acts, the entropy test was
#   inconclusive at ten seeds (a mean 44 % higher, an interval that includes zero).
# * An entropy bonus, Clip-Cov and KL-Cov at their usual strengths made no difference detected at this scale;
#   training on the top-20 % entropy tokens kept more entropy and cost accuracy.
# * Random and format-only rewards made the model trained from scratch much worse, even at pass@64, in a
#   setting where the PPO clip barely acts. At four passes per batch, where the clip cuts about 7 % of the
#   tokens, the coin flip did not sharpen it either: the entropy rose, and pass@1 fell further than at one
#   pass. On this model the clipping bias that Shao et al. credit for their gains is, if present, smaller
#   than the drift of a reward with no signal.
# * A verifier that accepts the right number anywhere was exploited on every seed: the policy learned to
#   write on after its answer, half of its held-out answers ended wrong but accepted, and by the reward it
#   trained on, there was no difference detected at this scale between it and the honest policy. The gap to a strict verifier on the training batches
#   caught it on every seed, and so did reading samples; the fix is the verifier.
# * On 3-digit problems RL raised pass@1 more than threefold but lowered pass@k from $k = 32$ on: after RL a
#   few problems were never solved in 256 samples. Here it sharpened what the supervised model could do.
#   That is Yue et al.'s reading at this scale; ProRL's longer runs, CoT-pass@k and pass@k training (15.2)
#   are the three answers to it, and none of them was tested here.
# * With a coin-flip reward and passes that run the ratio to the clip, a symmetric clip leaves the expected
#   policy unchanged and an upper clip wider than the lower one shifts it toward the likely tokens, exactly,
#   on five tokens; the entropy also falls by noise alone, whatever the clip.

# %%
rl.claim_comparison("spend more of it than `grpo_b0`", entropy_cmp["dr_grpo"], "<")
rl.claim("its value at $H = 0$ is an accuracy above 1", ceiling[0], low=1.0, bounds=False)
rl.claim_comparison("CISPO spend more of it than", entropy_cmp["cispo"], "<")
rl.claim("spends most of its entropy within 40 steps", max(curve(c, "entropy")[-1] / curve(c, "entropy")[0] for c in FAMILY), high=0.5)
rl.claim_comparison("made no difference detected at this scale to entropy or accuracy at one pass", entropy_cmp["grpo_b0_clip_higher"], "none")
rl.claim_comparison("the entropy test was inconclusive at ten seeds", clip_higher_entropy, "none")
rl.claim("a mean 44 % higher", clip_higher_entropy.mean_diff / values("grpo_b0_mu4", "final_entropy").mean(), 0.44)
rl.claim_comparison("training on the top-20 % entropy tokens kept more entropy", managed_cmp["grpo_b0_top20_entropy"][0], ">")
rl.claim_comparison("and cost accuracy", managed_cmp["grpo_b0_top20_entropy"][1], "<")
rl.claim_comparison("made the model trained from scratch much worse", spurious_cmp["random_reward"], "<")
rl.claim_comparison("even at pass@64", pass64_cmp, "<")
rl.claim("where the clip cuts about 7 % of the tokens", coin_values("random_reward_mu4", "mean_clip_fraction").mean(), 0.07)
rl.claim_comparison("the entropy rose", rise["random_reward_mu4"], ">")
rl.claim_comparison("and pass@1 fell further than at one pass", passes["pass@1"], "<")
rl.claim("was exploited on every seed", min(peak_drop), low=0.10)
rl.claim_comparison("half of its held-out answers ended wrong but accepted", found_cmp, ">")
rl.claim_comparison("there was no difference detected at this scale between it and the honest policy", proxy_cmp, "none")
rl.claim("caught it on every seed", sum(s is not None for s in alarm_steps), len(hack_by["substring"]), abs=0)
rl.claim("RL raised pass@1 more than threefold", pk_after[:, 0].mean() / pk_before[:, 0].mean(), low=3.0)
rl.claim_comparison("but lowered pass@k from $k = 32$ on", passk_cmp[32], "<")
rl.claim_comparison("after RL a few problems were never solved", lost_cmp, ">")
rl.report_headline(f"Entropy: clip-higher − GRPO final entropy {entropy_cmp['grpo_b0_clip_higher'].mean_diff:+.3f} "
                   f"[{entropy_cmp['grpo_b0_clip_higher'].ci_low:+.3f}, {entropy_cmp['grpo_b0_clip_higher'].ci_high:+.3f}]; "
                   f"random reward − supervised pass@1 {spurious_cmp['random_reward'].mean_diff:+.3f} "
                   f"[{spurious_cmp['random_reward'].ci_low:+.3f}, {spurious_cmp['random_reward'].ci_high:+.3f}] ({len(seeds)} paired seeds)")

# %% [markdown]
# ## Exercises
#
# 1. *(By hand.)* For a two-token policy $\pi = (p, 1-p)$ with advantages $A = (1-p, -p)$ (the first token
#    rewarded), write $\Delta z = \eta\,\pi A$ and the first-order $\Delta H$ of (15.1). For which $p$ does the
#    step lower the entropy? Check your answer with `entropy_trajectory` on the explorer's presets.
# 2. Fit $R = -a\,e^{H} + b$ to the `dr_grpo` runs of §15.2 as the chapter did for `grpo_b0`. Is its predicted
#    accuracy at $H = 0$ different from `grpo_b0`'s, on the ten paired seeds?
# 3. *(A longer run.)* Rerun `benchmarks/entropy_dynamics.py` with `entropy_coef=0.05` and with
#    `num_inner_epochs=4` for `grpo_b0` and `grpo_b0_clip_higher`. Does clip-higher keep the entropy up once the
#    clip acts?
# 4. In the explorer, set the rare token rewarded and compare $\varepsilon_{\text{high}} = 0.2$ with 0.28 over 40 steps at
#    four passes per step. When is the entropy higher with clip-higher, and why does that change?
# 5. Write the verifier the substring check of §15.5 was meant to be: it accepts `"72</s>"` as well as
#    `"072</s>"` for `27+45=` (with or without the working before the answer) and accepts nothing wrong. Check
#    it on the stored accepted-but-wrong audit samples and on the probe strings of §15.5.

# %% [markdown] tags=["solution"] jp-MarkdownHeadingCollapsed=true
# ## Solutions
#
# ### Solution to exercise 1
#
# With $\log\pi = (\log p, \log(1-p))$ and $\Delta z = \eta\,(p(1-p), -p(1-p))$, the covariance under $\pi$ of
# two two-valued variables is $p(1-p)$ times the product of their differences:
# $\mathrm{Cov} = p(1-p)\,\bigl(\log\tfrac{p}{1-p}\bigr)\,\eta\,2p(1-p)$, so
# $\Delta H \approx -2\eta\,p^2(1-p)^2\log\frac{p}{1-p}$: negative when $p > \tfrac12$ (the rewarded token is the likely
# one), positive when $p < \tfrac12$. The cell checks the formula against the covariance computed directly.

# %% tags=["solution"]
for p in (0.3, 0.5, 0.8):
    pi = torch.tensor([p, 1 - p], dtype=torch.float64)
    advantages = torch.tensor([1 - p, -p], dtype=torch.float64)
    dz = 0.1 * pi * advantages
    cov = (pi * (pi.log() - (pi * pi.log()).sum()) * (dz - (pi * dz).sum())).sum()
    by_hand = -2 * 0.1 * p ** 2 * (1 - p) ** 2 * np.log(p / (1 - p))
    print(f"p = {p}: −Cov = {-cov.item():+.6f}, formula {by_hand:+.6f}")

# %% [markdown] tags=["solution"]
# ### Solution to exercise 2
#
# The cell fits each `dr_grpo` run and compares $b - a$ with `grpo_b0`'s over the paired seeds.

# %% tags=["solution"]
dr_fits = [rl.entropy_performance_fit(r["curves"]["entropy"], r["curves"]["pass@1"]) for r in by["dr_grpo"]]
print(rl.compare([f["b"] - f["a"] for f in dr_fits], [f["b"] - f["a"] for f in fits], names=("dr_grpo's b − a", "grpo_b0's")))

# %% [markdown] tags=["solution"]
# ### Solution to exercise 3
#
# The μ = 4 half is stored and read in §15.3: four passes lower the final entropy, and the test of
# clip-higher on top of them is inconclusive at ten seeds (a difference of the size observed would need 26
# paired seeds to detect). For the entropy bonus, add a condition to
# `CONDITIONS` in the benchmark, `"grpo_b0_bonus05": (None, dict(kl_coef=0.0, entropy_coef=0.05))`, and run
# `python benchmarks/entropy_dynamics.py --conditions grpo_b0_bonus05 --workers 2 --save --add` (about 3
# minutes on two cores); compare it with `grpo_b0` as the chapter compares the other switches. A bonus five
# times larger is of the order of the policy-gradient term only where the advantages are small, so expect it
# to act mostly late in a run, when most groups are already solved.

# %% tags=["solution"]
rl.claim_comparison("four passes lower the final entropy", mu4_cmp[("grpo_b0_mu4", "grpo_b0", "final_entropy")], "<")
rl.claim_comparison("the test of clip-higher on top of them is inconclusive at ten seeds", clip_higher_entropy, "none")
rl.claim("would need 26 paired seeds to detect", needed, 26, abs=0)

# %% [markdown] tags=["solution"]
# ### Solution to exercise 4
#
# With the rare token rewarded, clip-higher lets that token grow faster, so the entropy rises faster at
# first, peaks a step earlier, and then falls faster once the rare token has become the likely one. The
# cell prints the two trajectories.

# %% tags=["solution"]
higher = entropy_trajectory("rare token rewarded", 0.2, 0.28, 0.0, 1.0, 40, 4)["entropy"]
symmetric = entropy_trajectory("rare token rewarded", 0.2, 0.2, 0.0, 1.0, 40, 4)["entropy"]
print("steps 0–10, ε_high = 0.28:", np.round(higher[:11], 3))
print("steps 0–10, ε_high = 0.2: ", np.round(symmetric[:11], 3))

# %% [markdown] tags=["solution"]
# ### Solution to exercise 5
#
# Parse, do not search: require the end token, take the final segment (after the last `";"`), require it
# to be ASCII digits, and compare it *as a number* with the sum. The leading zeros are then optional and
# nothing else is. The cell checks it on the audit samples (it accepts none of them) and on the probes.

# %% tags=["solution"]
def lenient_reward(prompt, completion, eos="</s>"):
    a, b = (int(x) for x in prompt.rstrip("=").split("+"))
    if not completion.endswith(eos):
        return 0.0
    final = completion[: -len(eos)].rpartition(";")[2]
    return float(final.isascii() and final.isdigit() and int(final) == a + b)


audit = [(q, o) for r in hack_by["substring"] for q, o in r["examples"]]
print("accepted audit samples:", sum(lenient_reward(q, o) for q, o in audit), "of", len(audit))
for prompt, completion in [("27+45=", "72</s>"), ("27+45=", "7+5=12;2+4+1=7;072</s>"), ("29+20=", "149</s>"),
                           ("29+20=", "9+0=9;2+2=4;0494949494")]:
    print(f"{prompt} {completion:<24} lenient {lenient_reward(prompt, completion):.0f}   strict {probe.reward(prompt, completion):.0f}")
assert not any(lenient_reward(q, o) for q, o in audit)
