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
# * say what random and format-only rewards do to a model trained from scratch, and why that differs from
#   the pretrained models on which they were reported to help;
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
# where the model is right more often than not and its right answers are its likely ones (Cui et al.
# 2025, Lemma 1). A rare token with a positive advantage raises the entropy. The cell checks (15.1) on a
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
fig, axes = plt.subplots(1, 2, figsize=(12, 3.6), dpi=80)
for k, c in enumerate(FAMILY):
    axes[0].plot(curve(c, "entropy"), color=f"C{k}", label=c)
    axes[1].plot(curve(c, "completion_length"), color=f"C{k}", label=c)
axes[0].set_ylabel("mean token entropy, nats")
axes[1].set_ylabel("completion length, tokens")
for ax in axes:
    ax.set_xlabel("GRPO step (32 prompts × 8)")
    ax.legend(fontsize=7)
axes[0].set_title("mean over ten seeds", fontsize=9)
plt.tight_layout();

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
# with the lowest entropy, about a third of `grpo_b0`'s, and with a higher pass@1 and longer answers:
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
rl.claim("about a third of `grpo_b0`'s", max(values(c, "final_entropy").mean() for c in ("dr_grpo", "cispo")) / values("grpo_b0", "final_entropy").mean(),
         1 / 3, abs=(rl.mean_ci(values("grpo_b0", "final_entropy"))[2] - rl.mean_ci(values("grpo_b0", "final_entropy"))[1]) / 2
         / values("grpo_b0", "final_entropy").mean())
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
# the entropy $H$ as $R = -a\,e^{H} + b$ (their eq. 1): performance is bought with entropy, and $b$, the
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
ceiling = rl.mean_ci([f["b"] - f["a"] for f in fits])
print(f"the fit's accuracy at H = 0, b − a = {ceiling[0]:.3f} [{ceiling[1]:.3f}, {ceiling[2]:.3f}]")

fig, ax = plt.subplots(figsize=(6, 3.6), dpi=80)
for k, r in enumerate(by["grpo_b0"][:4]):
    h, acc = np.array(r["curves"]["entropy"]), np.array(r["curves"]["pass@1"])
    ax.scatter(h, acc, s=8, color=f"C{k}", label=f"seed {r['seed']}")
    grid = np.linspace(0, h.max(), 50)
    ax.plot(grid, -fits[k]["a"] * np.exp(grid) + fits[k]["b"], color=f"C{k}", lw=1)
ax.set_xlabel("mean token entropy H, nats")
ax.set_ylabel("batch accuracy R")
ax.set_title("grpo_b0 along training; lines: R = −a·exp(H) + b", fontsize=9)
ax.legend(fontsize=7)
plt.tight_layout();

# %% [markdown]
# The relation holds well on the book's model: $R^2$ about 0.89 along a 40-step run. Its prediction at
# $H = 0$, $b - a$, is about 1.03, the accuracy a fully collapsed policy would have; on this task, where
# the right answer is unique, a collapsed policy that always gives it is what training aims for, and the
# runs end near it. Cui et al.'s warning (the entropy is spent before the reward stops rising) bites
# where the collapsed policy's accuracy is *not* the goal: where the model must still explore to find
# answers it does not yet give.

# %%
rl.claim("$R^2$ about 0.89", r2_ci[0], 0.89, abs=(r2_ci[2] - r2_ci[1]) / 2)
rl.claim("is about 1.03", ceiling[0], 1.03, abs=(ceiling[2] - ceiling[1]) / 2)

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
#   $|\log\pi_\theta - \log\pi_{\text{old}}|$ instead (`entropy_control="kl_cov"`);
# * **forking tokens only** (Wang et al. 2025, arXiv:2506.01939): only the 20 % of tokens with the highest
#   entropy carry a policy gradient (`top_entropy_quantile=0.2`).

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
ax.legend(fontsize=7)
plt.tight_layout();

# %% [markdown]
# At these settings three of the four change nothing measurable: the entropy bonus at $c = 0.01$, Clip-Cov
# and KL-Cov all show no difference detected at this scale from `grpo_b0`, in final entropy and in
# pass@1. Clip-Cov and KL-Cov act on a share of tokens ($2\times10^{-4}$, $2\times10^{-3}$) tuned for batches of
# millions of tokens; a batch here holds a few thousand, so Clip-Cov touches fewer than one token per step. The
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
rl.claim("Clip-Cov touches fewer than one token per step", 2e-4 * tokens_per_step, high=1.0)
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
# longer answers, with no difference detected at this scale in pass@1. DAPO's claim gets its fair test here,
# and the answer is the same as at one pass: clip-higher shows no difference detected at this scale against
# `grpo_b0_mu4`, in final entropy or in pass@1. The seeds disagree rather than agree on nothing: on three
# seeds clip-higher ended with more than twice the entropy (and those three with the shortest answers of its
# ten runs: more of their answers skip the working), on the other seven with about the same. A mean difference
# of this size, at this spread, would need 26 paired seeds to detect. KL-Cov at four passes shows no difference detected at this scale either,
# in final entropy or in pass@1, though on three seeds its pass@1 fell well below the others'.

# %%
rl.claim_comparison("ends with a lower entropy than `grpo_b0`", mu4_cmp[("grpo_b0_mu4", "grpo_b0", "final_entropy")], "<")
rl.claim_comparison("and with\nlonger answers".replace("\n", " "), mu4_cmp[("grpo_b0_mu4", "grpo_b0", "final_length")], ">")
rl.claim_comparison("with no difference detected at this scale in pass@1", mu4_cmp[("grpo_b0_mu4", "grpo_b0", "pass@1")], "none")
for key in ("final_entropy", "pass@1"):
    rl.claim_comparison("clip-higher shows no difference detected at this scale against", mu4_cmp[("grpo_b0_mu4_clip_higher", "grpo_b0_mu4", key)], "none")
    rl.claim_comparison("KL-Cov at four passes shows no difference detected at this scale either", mu4_cmp[("grpo_b0_mu4_kl_cov", "grpo_b0_mu4", key)], "none")
rl.claim("on three\nseeds clip-higher ended with more than twice the entropy".replace("\n", " "), int(np.sum(higher > 2)), 3, abs=0)
rl.claim("on the other seven with about the same", max(abs(np.log(higher[higher <= 2]))), high=np.log(1.5))
rl.claim("would\nneed 26 paired seeds to detect".replace("\n", " "), needed, 26, abs=0)
lengths = values("grpo_b0_mu4_clip_higher", "final_length")
rl.claim("those three with the shortest answers of its\nten runs".replace("\n", " "), lengths[higher <= 2].min() - lengths[higher > 2].max(), low=0.0)
rl.claim("on three seeds its pass@1 fell well below the others'", int(np.sum(values("grpo_b0_mu4_kl_cov", "pass@1") < 0.8)), 3, abs=0)

# %% [markdown]
# ## 15.4 Rewards that teach nothing
#
# Shao et al. 2025 (arXiv:2506.10947) trained Qwen2.5-Math models with GRPO on rewards that carry no
# information about correctness, a coin flip or a reward for a well-formed answer alone, and found
# accuracy gains on math benchmarks not far from those of the true reward; on other model families
# (Llama, OLMo) the same spurious rewards gave little or nothing. Their explanation: the clipped update
# amplifies behaviours the pretrained model already has (for Qwen-Math, reasoning in code), whether or not
# the reward points at them. The book's model was trained from scratch on this one task, so it tests the
# question cleanly: is there anything to amplify?
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
# it rises. With advantages uncorrelated with the answer, the updates are noise, and the policy drifts
# away from what supervised training put in it. The format reward keeps answers
# well-formed (it pays for that) and short, and loses the arithmetic.
#
# This is the cleanest version of Shao et al.'s own explanation. Their spurious rewards helped only
# where the pretrained model already had a behaviour that the clipped update could amplify and that
# happened to be correct more often (on Qwen2.5-Math, reasoning in code); where the model had no such
# behaviour, they gave nothing. A model trained only to add has nothing else to amplify. A gain from a
# reward that carries no information is evidence about the *model*, not about the method.

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


fig, axes = plt.subplots(1, 3, figsize=(13, 3.4), dpi=80)
for ax, c in zip(axes[:2], ("substring", "strict")):
    for r in hack_by[c]:
        ax.plot(smooth(r["curves"]["strict"]), color="C3", alpha=0.25, lw=0.8)
    for key, color, label in (("substring", "C0", "reward by the substring check"), ("strict", "C3", "reward by the strict verifier")):
        ax.plot(np.mean([smooth(r["curves"][key]) for r in hack_by[c]], axis=0), color=color, lw=2, label=label)
    ax.set_title(HACK_NAMES[c] + " (thin: each seed)", fontsize=9)
    ax.set_ylim(0, 1.02); ax.set_ylabel("share of the training batch", fontsize=8)
for c, color in (("substring", "C0"), ("strict", "C3")):
    axes[2].plot(np.mean([smooth(r["curves"]["completion_length"]) for r in hack_by[c]], axis=0), color=color, label=HACK_NAMES[c])
axes[2].set_title("Completion length (mean over seeds)", fontsize=9); axes[2].set_ylabel("tokens", fontsize=8)
axes[0].legend(fontsize=7, loc="lower left"); axes[2].legend(fontsize=7)
for ax in axes:
    ax.set_xlabel("GRPO step (32 prompts × 8; 10-step rolling mean)", fontsize=8)
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
rl.claim("half of what it writes is accepted but wrong", hack_values("substring", "accepted_wrong").mean(), 0.5,
         abs=(found_cmp.ci_high - found_cmp.ci_low) / 2)
before_wrong = rl.mean_ci(hack_values("before", "accepted_wrong"))
rl.claim("up from 7 %", before_wrong[0], 0.07, abs=(before_wrong[2] - before_wrong[1]) / 2)
rl.claim("on two seeds almost nothing it writes is right", int(np.sum(hack_values("substring", "pass@1") < 0.01)), 2, abs=0)
rl.claim("every seed ends at least ten points below its own peak", min(peak_drop), low=0.10)
rl.claim_comparison("its completions end longer than the strict-trained policy's", length_cmp, ">")
rl.claim("fires on every one of the ten hacked runs", sum(s is not None for s in alarm_steps), len(hack_by["substring"]), abs=0)
proxy_says = rl.mean_ci(hack_values("substring", "substring_pass@1"))
rl.claim("the proxy says 0.98", proxy_says[0], 0.98, abs=(proxy_says[2] - proxy_says[1]) / 2)
rl.claim("about half of them never reach their end token", never_stop, 0.5, abs=2 * np.sqrt(0.25 / len(audit)))

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
ax.legend(fontsize=8)
plt.tight_layout();

# %% [markdown]
# The curves cross. RL lifts pass@1 from 0.26 to 0.83 and keeps a lead up to $k = 8$; at $k = 16$ there is no
# difference detected at this scale; from $k = 32$ on the supervised model is ahead, and at $k = 256$ by
# 2.5 points. (The figure's bands are each curve's own spread over seeds and overlap at large $k$; the
# table's paired differences cancel what the seeds share, and they are what separate the curves.) The
# crossing happens below the ceiling (at $k = 32$ the supervised model solves 0.985 of the
# problems, the RL-trained one 0.949), so it is not an artefact of a curve that cannot rise. The per-problem
# counts say what happened. In 256 samples the supervised models leave almost no held-out problem unsolved,
# so at this $k$ there was little for RL to add; what it did was lose: after RL about 5 of the 200 problems
# are never solved in 256 samples, more than the problems it gained on the paired seeds.
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
    rl.claim("RL lifts pass@1 from 0.26 to 0.83", m, target, abs=(hi - lo) / 2)
rl.claim_comparison("keeps a lead up to $k = 8$", passk_cmp[8], ">")
rl.claim_comparison("at $k = 16$ there is no\ndifference detected at this scale".replace("\n", " "), passk_cmp[16], "none")
for k in (32, 64, 128, 256):
    rl.claim_comparison("from $k = 32$ on the supervised model is ahead", passk_cmp[k], "<")
rl.claim("at $k = 256$ by\n2.5 points".replace("\n", " "), -passk_cmp[256].mean_diff, 0.025,
         abs=(passk_cmp[256].ci_high - passk_cmp[256].ci_low) / 2)
i32 = list(ks).index(32)
for quote, values_32, target in (("the supervised model solves 0.985", pk_before[:, i32], 0.985),
                                 ("the RL-trained one 0.949", pk_after[:, i32], 0.949)):
    m, lo, hi = rl.mean_ci(values_32)
    rl.claim(quote, m, target, abs=(hi - lo) / 2)
rl.claim("leave almost no held-out problem unsolved", unsolved["before"].mean(), high=1.0)
m, lo, hi = rl.mean_ci(unsolved["after"])
rl.claim("after RL about 5 of the 200 problems", m, 5.0, abs=(hi - lo) / 2)
rl.claim_comparison("more than the problems it gained on the paired seeds", lost_cmp, ">")
rl.claim("pass@1 more than tripled", pk_after[:, 0].mean() / pk_before[:, 0].mean(), low=3.0)

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
fig, axes = plt.subplots(2, 2, figsize=ENTROPY_FIGSIZE)
plot_entropy("confident token rewarded", 0.2, 0.28, 0.0, 1.0, 40, 4, axes=axes.flatten())
fig.tight_layout()
print(entropy_readout("confident token rewarded", 0.2, 0.28, 0.0, 1.0, 40, 4)[0]);

# %%
try:
    display(entropy_explorer())  # noqa: F821  (display is a notebook builtin); move the sliders live
except ImportError:
    print("ipywidgets is not installed: the static figure above shows the explorer's default setting")

# %% [markdown]
# ## Summary
#
# * A policy-gradient step changes a softmax policy's entropy by minus the covariance of log-probability
#   and the logit change, (15.1); rewarding likely tokens lowers the entropy, rewarding rare ones raises it.
# * On the book's model every GRPO-family method spends most of its entropy within 40 steps; Dr. GRPO and
#   CISPO spend more of it than `grpo_b0` and reach a higher pass@1 with longer answers. The relation
#   $R = -a\,e^{H} + b$ fits each run well.
# * DAPO's clip-higher, alone, made no difference detected at this scale to entropy or accuracy here, at one
#   pass per batch, where the clip has little to act on, and at four, where it acts.
# * An entropy bonus, Clip-Cov and KL-Cov at their usual strengths made no difference detected at this scale;
#   training on the top-20 % entropy tokens kept more entropy and cost accuracy.
# * Random and format-only rewards made the model trained from scratch much worse, even at pass@64: a
#   spurious reward can only amplify what a model already does.
# * A verifier that accepts the right number anywhere was exploited on every seed: the policy learned to
#   write on after its answer, half of its held-out answers ended wrong but accepted, and by the reward it
#   trained on it looked as good as the honest policy. The gap to a strict verifier on the training batches
#   caught it on every seed, and so did reading samples; the fix is the verifier.
# * On 3-digit problems RL raised pass@1 more than threefold but lowered pass@k from $k = 32$ on: after RL a
#   few problems were never solved in 256 samples. Here it sharpened what the supervised model could do.

# %%
rl.claim_comparison("spend more of it than `grpo_b0`", entropy_cmp["dr_grpo"], "<")
rl.claim_comparison("CISPO spend more of it than", entropy_cmp["cispo"], "<")
rl.claim("spends most of its entropy within 40 steps", max(curve(c, "entropy")[-1] / curve(c, "entropy")[0] for c in FAMILY), high=0.5)
rl.claim_comparison("made no difference detected at this scale to entropy or accuracy here", entropy_cmp["grpo_b0_clip_higher"], "none")
rl.claim_comparison("and at four, where it acts", clip_higher_entropy, "none")
rl.claim_comparison("training on the top-20 % entropy tokens kept more entropy", managed_cmp["grpo_b0_top20_entropy"][0], ">")
rl.claim_comparison("and cost accuracy", managed_cmp["grpo_b0_top20_entropy"][1], "<")
rl.claim_comparison("made the model trained from scratch much worse", spurious_cmp["random_reward"], "<")
rl.claim_comparison("even at pass@64", pass64_cmp, "<")
rl.claim("was exploited on every seed", min(peak_drop), low=0.10)
rl.claim_comparison("half of its held-out answers ended wrong but accepted", found_cmp, ">")
rl.claim_comparison("it looked as good as the honest policy", proxy_cmp, "none")
rl.claim("caught it on every seed", sum(s is not None for s in alarm_steps), len(hack_by["substring"]), abs=0)
rl.claim("RL raised pass@1 more than threefold", pk_after[:, 0].mean() / pk_before[:, 0].mean(), low=3.0)
rl.claim_comparison("but lowered pass@k from $k = 32$ on", passk_cmp[32], "<")
rl.claim_comparison("after RL a\n#   few problems were never solved".replace("\n#  ", ""), lost_cmp, ">")
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
# The μ = 4 half is stored and read in §15.3: four passes lower the final entropy, and clip-higher on top of
# them shows no difference detected at this scale over ten seeds. For the entropy bonus, add a condition to
# `CONDITIONS` in the benchmark, `"grpo_b0_bonus05": (None, dict(kl_coef=0.0, entropy_coef=0.05))`, and run
# `python benchmarks/entropy_dynamics.py --conditions grpo_b0_bonus05 --workers 2 --save --add` (about 3
# minutes on two cores); compare it with `grpo_b0` as the chapter compares the other switches. A bonus five
# times larger is of the order of the policy-gradient term only where the advantages are small, so expect it
# to act mostly late in a run, when most groups are already solved.
#
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
