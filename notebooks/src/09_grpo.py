# %% [markdown]
# # 9. GRPO: group-relative policy optimisation
#
# **Goals.** By the end of this chapter you can
# * compute GRPO's *group-relative advantage* by hand, and say what the population and the sample
#   standard deviation change, and what Dr. GRPO, RLOO and MaxRL change;
# * explain why GRPO's KL penalty uses the $k_3$ estimator, and check by sampling that it is unbiased
#   and never negative;
# * tell apart the three ways of reducing a per-token loss to one number (GRPO, DAPO, Dr. GRPO) and
#   plot the weight each one gives every token;
# * explain why the loss GRPO reports is often exactly 0 while its gradient is not;
# * run the whole GRPO loop on the book's small transformer and measure what it buys on held-out
#   problems.
#
# **Prerequisites.** REINFORCE with a baseline (Part I), importance ratios and PPO's clipped surrogate
# (chapters 5 and 7), the KL estimators $k_1, k_2, k_3$ and their gradients (§5.8), and the small
# language model with its addition task and supervised warm-up (chapter 8).
#
# **Why GRPO?** PPO needs a *critic*, a second network as large as the policy, to estimate the value
# of every prefix, and for a language model that critic is expensive and hard to train when the only
# reward comes at the very end of an answer. GRPO (Shao et al. 2024, DeepSeekMath) drops the critic.
# For each question it samples a *group* of $G$ answers and uses the group itself as the baseline: an
# answer is good if it beats its siblings. Everything else is PPO.

# %%
import copy
import inspect
import itertools
import time

import matplotlib.pyplot as plt
import numpy as np
import torch

import rlbook as rl
from rlbook.widgets import advantage_explorer as ae

rl.seed_everything(0)
# figures at twice the pixel density (sharp when zoomed)
# %config InlineBackend.figure_formats = ["retina"]
# One thread: the thread count changes the order of float sums, and so the sampled tokens; with one
# thread this chapter reproduces the recorded runs of tests/test_grpo_train.py bit for bit, and it
# can reuse chapter 8's model (trained with one thread too). A busy machine also slows it down
# gently, where several threads competing for two cores would stall each other.
torch.set_num_threads(1)
device = rl.get_device()
SIZE = rl.get_size()  # "small" (default; 2 CPU cores) or "full", via RLBOOK_SIZE
print("size:", SIZE)

# %% [markdown]
# ## 9.1 A baseline from the group
#
# Take one question $q$ and sample $G$ answers $o_1, \dots, o_G$ from the current policy. A verifier
# scores each: $r_i = 1$ if the answer is right, $0$ if not. The REINFORCE gradient with a baseline
# $b$ is $\sum_i (r_i - b)\,\nabla_\theta \log \pi_\theta(o_i \mid q)$, and the best cheap $b$ we have
# is how well the policy does *on this question*, which the group itself estimates. GRPO centres each
# reward on its group's mean and scales it by the group's standard deviation:
#
# $$\hat A_i = \frac{r_i - \operatorname{mean}(r_1, \dots, r_G)}{\operatorname{std}(r_1, \dots, r_G) + \varepsilon}.
# \tag{9.1}$$
#
# Every token of answer $i$ gets the same $\hat A_i$: the reward is a property of the whole answer.
#
# **A worked group.** Rewards $[1, 1, 0, 1, 0]$: the mean is $0.6$. The *population* standard deviation
# divides the sum of squares by $G$: $\sqrt{(3 \cdot 0.4^2 + 2 \cdot 0.6^2)/5} = \sqrt{0.24} = 0.490$, so
# the right answers get $0.4/0.490 = +0.82$ and the wrong ones $-0.6/0.490 = -1.22$. The *sample*
# standard deviation divides by $G - 1$ instead (`torch.std`'s default, and what several libraries
# use): $\sqrt{1.2/4} = 0.548$, giving $+0.73$ and $-1.10$. The two differ by the constant factor
# $\sqrt{G/(G-1)}$, so for a fixed $G$ the choice only rescales the step size, but it is one of the
# details that make two "GRPO" implementations disagree.
#
# **A group with no signal.** If all $G$ answers are right (or all wrong), every $r_i$ equals the mean:
# the advantages are $0$ and the group contributes nothing to the gradient. (Without the special case,
# $0/0$ would be NaN; the library returns exact zeros.) As the model gets better, more and more groups
# go silent, which is why DAPO re-samples until a batch is full of informative groups.
#
# | symbol | code | shape |
# |---|---|---|
# | $r_i$ | `rewards` | `(B,)`, $B$ = prompts $\times G$, the $G$ answers of a prompt side by side |
# | $G$ | `group_size` | int |
# | $\hat A_i$ | `rl.group_relative_advantages(rewards, group_size, scale="std", std="population")` | `(B,)` |

# %%
print(inspect.getsource(rl.group_relative_advantages))

# %% [markdown]
# **Three relatives** of (9.1) use the same group but a different scale:
#
# * **Dr. GRPO** (Liu et al. 2025, "GRPO done right") drops the division: $\hat A_i = r_i - \bar r$
#   (`scale="none"`). Dividing by the std makes a group that is *almost* solved (7 right out of 8)
#   produce as large advantages as a half-solved one; Dr. GRPO argues this over-weights questions that
#   are already easy or hopeless.
# * **RLOO** (REINFORCE leave-one-out; Kool et al. 2019, Ahmadian et al. 2024) uses the mean of the
#   *other* $G-1$ answers as the baseline, so the baseline does not depend on $o_i$ and the gradient is
#   unbiased: $\hat A_i = r_i - \frac{1}{G-1}\sum_{j \ne i} r_j = \frac{G}{G-1}(r_i - \bar r)$.
# * **MaxRL** (maximum-likelihood RL) averages the score functions of the *successful* answers only,
#   $\hat g = \frac1K \sum_i r_i \nabla \log \pi(o_i)$ with $K$ successes, which is an unbiased gradient
#   of a truncated log-likelihood $-\sum_{k=1}^{G} (1-p)^k/k$ of success rather than of $p$ itself.
#   Subtracting the zero-mean control variate $\frac1G\sum_i \nabla\log\pi(o_i)$ turns it into an
#   advantage divided by the success rate $\hat r = K/G$:
#   $\hat A_i = (r_i - \hat r)/\hat r$. A rare success on a hard question is pushed up hard.
#   One caveat: the control variate has mean zero only over *all* groups, and a group with no success
#   ($K = 0$) is set to zero as a whole, control variate included. What is left out has expectation
#   $-(1-p)^{G-1}\nabla p$ per question (with $p$ its success probability), so the advantage form
#   estimates the gradient of the log-likelihood truncated one term earlier, at $G - 1$ instead of
#   $G$; we check this exactly below.
#
# The check below recomputes the worked group and these variants, the all-equal group, and compares
# with the slow loop oracles in `rl.reference`.

# %%
# NBVAL_CHECK_OUTPUT
r = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.0], dtype=torch.float64)
rows = {
    "GRPO, population std": rl.group_relative_advantages(r, 5),
    "GRPO, sample std": rl.group_relative_advantages(r, 5, std="sample"),
    "Dr. GRPO (no std)": rl.group_relative_advantages(r, 5, scale="none"),
    "RLOO": rl.leave_one_out_advantages(r, 5),
    "MaxRL": rl.maxrl_advantages(r, 5),
}
for name, adv in rows.items():
    print(f"{name:22s}", np.round(adv.numpy(), 4))
oracle = rl.reference.group_relative_advantages_loop(r.tolist(), 5)
assert np.allclose(rows["GRPO, population std"].numpy(), oracle)
assert np.allclose(rows["RLOO"].numpy(), rows["Dr. GRPO (no std)"].numpy() * 5 / 4)
same = torch.full((4,), 0.1, dtype=torch.float64)
print("all-equal group:", rl.group_relative_advantages(same, 4).tolist(), rl.maxrl_advantages(same, 4).tolist())

# %% [markdown]
# **The MaxRL caveat, checked exactly.** Take the smallest policy there is: one parameter $\theta$ and a
# success probability $p = \sigma(\theta)$, so $\nabla_\theta\log\pi$ is $1 - p$ for a success and $-p$ for a
# failure, and $\nabla p = p(1-p)$. Enumerating all $2^G$ groups gives the exact expectation of both
# forms. The success-only $\hat g$ matches $\nabla\bigl[-\sum_{k=1}^{G}(1-p)^k/k\bigr] = \sum_{k=1}^{G}(1-p)^{k-1}\nabla p$,
# and the advantage form with zeroed all-fail groups matches the same sum stopped at $G - 1$.

# %%
# NBVAL_CHECK_OUTPUT
def maxrl_expectations(p, G):
    """Exact E[ĝ] and E[(1/G) Σ Â_i ∇log π] for a Bernoulli policy with success probability p."""
    score = {1: 1.0 - p, 0: -p}
    e_success_only = e_advantage_form = 0.0
    for outcome in itertools.product([0, 1], repeat=G):
        prob = float(np.prod([p if o else 1 - p for o in outcome]))
        advantages = rl.maxrl_advantages(torch.tensor(outcome, dtype=torch.float64), G)
        e_advantage_form += prob * sum(a * score[o] for a, o in zip(advantages.tolist(), outcome)) / G
        K = sum(outcome)
        e_success_only += prob * (sum(score[o] for o in outcome if o) / K if K else 0.0)
    return e_success_only, e_advantage_form


G = 4
for p in (0.1, 0.5, 0.9):
    truncated = lambda n: sum((1 - p) ** (k - 1) for k in range(1, n + 1)) * p * (1 - p)
    e_g, e_adv = maxrl_expectations(p, G)
    print(f"p = {p}: E[ĝ] = {e_g:.6f} (G terms: {truncated(G):.6f})   advantage form = {e_adv:.6f} "
          f"(G−1 terms: {truncated(G - 1):.6f}; E[ĝ] − (1−p)^(G−1)·∇p = {e_g - (1 - p) ** (G - 1) * p * (1 - p):.6f})")
    assert abs(e_g - truncated(G)) < 1e-12 and abs(e_adv - truncated(G - 1)) < 1e-12

# %% [markdown]
# How big is the push on a *correct* answer as a function of how many of its $G = 8$ siblings are also
# correct? The plot shows the advantage of a correct answer in a group with $K$ correct answers.
# Dr. GRPO and RLOO fall linearly, as $1 - K/G$ (RLOO $\frac{G}{G-1}$ times higher). GRPO divides that
# by the group's std $\sqrt{\hat r(1-\hat r)}$ (with $\hat r = K/G$), which is smallest at both ends:
# the factor $1/\text{std}$ is 2 for a half-solved group but 3.0 for a nearly hopeless ($K = 1$) or
# nearly solved ($K = 7$) one (at $K = 7$ it is the lone *wrong* answer that gets the big advantage,
# $-2.65$). MaxRL divides by the success rate $\hat r$ instead: it pushes hardest on the hardest
# questions.

# %%
G = 8
ks = np.arange(1, G)
curves = {name: [] for name in ae.ESTIMATORS}
for k in ks:
    group = [1.0] * k + [0.0] * (G - k)
    for name in curves:
        curves[name].append(ae.advantage_table(group, name)[0])
fig, ax = plt.subplots(figsize=(5, 3), dpi=80)
for name, ys in curves.items():
    ax.plot(ks, ys, marker="o", label=ae.ESTIMATOR_LABELS[name])
ax.set_xlabel("K correct answers in the group (G = 8)")
ax.set_ylabel("advantage of a correct answer")
ax.axhline(0, color="k", lw=0.8)
ax.set_title("How hard a correct answer is pushed, by estimator", fontsize=9)
ax.legend(fontsize=9)
plt.tight_layout();

# %% [markdown]
# ## 9.2 The GRPO objective and its KL penalty
#
# With the advantages in hand, GRPO is PPO's clipped surrogate with one advantage per answer, plus a
# penalty that keeps the policy near a frozen reference $\pi_{\text{ref}}$ (the model before RL):
#
# $$\begin{aligned}J_{\text{GRPO}}(\theta) = \mathbb{E}\Big[&\frac{1}{G}\sum_{i=1}^{G} \frac{1}{|o_i|}\sum_{t=1}^{|o_i|}
# \Big(\min\big(\rho_{i,t} \hat A_i,\cr
# &\operatorname{clip}(\rho_{i,t}, 1-\epsilon, 1+\epsilon)\,\hat A_i\big) - \beta\, k_3^{(i,t)}\Big)\Big],\cr
# &\text{where }\rho_{i,t} = \frac{\pi_\theta(o_{i,t} \mid q, o_{i,<t})}{\pi_{\theta_{\text{old}}}(o_{i,t} \mid q, o_{i,<t})}.\end{aligned}
# \tag{9.2}$$
#
# The per-token KL term is not an exact KL (that would need the whole vocabulary at every position)
# but a one-sample estimate from the token that was actually generated. With
# $x = \pi_{\text{ref}}(o_{i,t} \mid \cdot) / \pi_\theta(o_{i,t} \mid \cdot)$,
#
# $$k_1 = -\log x, \qquad k_3 = (x - 1) - \log x. \tag{9.3}$$
#
# Both are unbiased for $\mathrm{KL}(\pi_\theta \,\|\, \pi_{\text{ref}})$ when the token is drawn from
# $\pi_\theta$, because $\mathbb{E}_{\pi_\theta}[x] = \sum_a \pi_{\text{ref}}(a) = 1$, so the added
# $x - 1$ has mean zero. But $k_3 \ge 0$ for every sample (since $\log x \le x - 1$), while $k_1$ is
# negative whenever the sampled token is more likely under $\pi_{\text{ref}}$, and a negative
# "penalty" would reward drifting away. We check both claims on a categorical distribution over 12
# tokens: exactly, by summing over all tokens, and by sampling 200,000 tokens.

# %%
# NBVAL_CHECK_OUTPUT
gen = torch.Generator().manual_seed(0)
logits = torch.randn(12, generator=gen, dtype=torch.float64)
ref_logits = logits + 0.7 * torch.randn(12, generator=gen, dtype=torch.float64)
log_p, log_ref = torch.log_softmax(logits, -1), torch.log_softmax(ref_logits, -1)
exact = rl.categorical_kl(logits, ref_logits).item()
# exact expectations: sum over all 12 tokens, weighted by π_θ
e_k1 = (log_p.exp() * rl.kl_k1(log_p, log_ref)).sum().item()
e_k3 = (log_p.exp() * rl.kl_k3(log_p, log_ref)).sum().item()
print(f"exact KL(π_θ‖π_ref) = {exact:.5f}   E[k1] = {e_k1:.5f}   E[k3] = {e_k3:.5f}")
# sampling: tokens drawn from π_θ
tokens = torch.multinomial(log_p.exp(), 200_000, replacement=True, generator=gen)
k1, k3 = rl.kl_k1(log_p[tokens], log_ref[tokens]), rl.kl_k3(log_p[tokens], log_ref[tokens])
for name, k in [("k1", k1), ("k3", k3)]:
    se = k.std().item() / np.sqrt(len(k))
    print(f"{name}: mean {k.mean().item():.4f} ± {se:.4f} (1 s.e.)   std {k.std().item():.3f}   "
          f"min {k.min().item():+.3f}   share < 0: {(k < 0).double().mean().item():.3f}")
    assert abs(k.mean().item() - exact) < 4 * se
assert k3.min() >= 0 and abs(e_k3 - exact) < 1e-12 and abs(e_k1 - exact) < 1e-12

# %% [markdown]
# Both means sit within a few standard errors of the exact KL; $k_1$ is negative on a large share of
# samples while $k_3$ never is, and $k_3$ has the smaller spread here. Its *gradient* is another
# matter. Used as a loss on tokens sampled from $\pi_\theta$, $k_3$'s expected gradient is that of the
# *forward* KL, $\mathrm{KL}(\pi_{\text{ref}}\,\|\,\pi_\theta)$, not of the reverse KL
# $\mathrm{KL}(\pi_\theta\,\|\,\pi_{\text{ref}})$ whose value it estimates (§5.8 derives both and checks them
# by autograd). Near $\pi_{\text{ref}}$ the two KLs agree to second order, which is why the penalty
# works in practice. GRPO adds $\beta k_3$ to every token's loss; DAPO and Dr. GRPO set $\beta = 0$ and
# drop the reference model.
#
# ## 9.3 Reducing per-token losses: which tokens count?
#
# Equation (9.2) has a detail that looks harmless: $\frac1G\sum_i \frac1{|o_i|}\sum_t$. Each answer's
# per-token losses are averaged *within* the answer, then the answers are averaged. So a token of a
# 2-token answer weighs four times as much as a token of an 8-token answer. Three choices are in use;
# writing $\ell_{i,t}$ for the per-token loss and $m_{i,t}$ for the completion mask, and $B$ for the
# number of answers in the batch:
#
# $$\begin{aligned}&\text{GRPO (sample-level):}\cr
# &L = \frac1B \sum_i \frac{1}{|o_i|}\sum_t m_{i,t}\ell_{i,t}, \qquad w_{i,t} = \frac{m_{i,t}}{B\,|o_i|}\end{aligned} \tag{9.4}$$
#
# $$\begin{aligned}&\text{DAPO (token-level):}\cr
# &L = \frac{\sum_{i,t} m_{i,t}\ell_{i,t}}{\sum_{i,t} m_{i,t}}, \qquad w_{i,t} = \frac{m_{i,t}}{\sum m}\end{aligned} \tag{9.5}$$
#
# $$\begin{aligned}&\text{Dr. GRPO (constant):}\cr
# &L = \frac{\sum_{i,t} m_{i,t}\ell_{i,t}}{B\, L_{\max}}, \qquad w_{i,t} = \frac{m_{i,t}}{B\,L_{\max}}\end{aligned} \tag{9.6}$$
#
# Each is $L = \sum_{i,t} w_{i,t}\ell_{i,t}$, and $w_{i,t}$ is also $\partial L / \partial \ell_{i,t}$: how
# hard each token is pushed. Under (9.4) a long answer's tokens are pushed less. Combined with a
# negative advantage, that means a long *wrong* answer is discouraged less per token than a short
# wrong one, and a short *right* answer is encouraged more: Dr. GRPO identifies this as a bias towards
# ever longer wrong answers. (9.5) and (9.6) give every token the same weight; (9.6) also keeps it
# the same from batch to batch.
#
# The library keeps losses unreduced and names each reduction after its normaliser:

# %%
print(inspect.getsource(rl.seq_mean_token_mean))
print(inspect.getsource(rl.per_token_weights).split('"""')[-1])

# %% [markdown]
# A hand-worked check: a 4-token answer whose tokens each have loss 1, and a 1-token answer with loss 4.
# GRPO: the two answer means are 1 and 4, so $L = 2.5$. DAPO: $8$ in total over 5 tokens, $L = 1.6$.
# Dr. GRPO with $L_{\max} = 4$: $8 / (2 \cdot 4) = 1$. For gradient accumulation, DAPO's count must be
# the count of the *whole* batch: averaging per-micro-batch token means silently turns it back into
# something else (here, into GRPO's 2.5).

# %%
# NBVAL_CHECK_OUTPUT
loss = torch.tensor([[1.0, 1.0, 1.0, 1.0], [4.0, 0.0, 0.0, 0.0]], dtype=torch.float64)
mask = torch.tensor([[True, True, True, True], [True, False, False, False]])
print("GRPO     seq_mean_token_mean:", round(rl.seq_mean_token_mean(loss, mask).item(), 6))
print("DAPO     token_mean         :", round(rl.token_mean(loss, mask).item(), 6))
print("Dr. GRPO fixed_length_mean  :", round(rl.fixed_length_mean(loss, mask, max_length=4).item(), 6))
micro_global = sum(rl.token_mean(loss[i:i + 1], mask[i:i + 1], num_tokens=5) for i in range(2))
micro_local = sum(rl.token_mean(loss[i:i + 1], mask[i:i + 1]) for i in range(2)) / 2
print("micro-batches, global count:", round(micro_global.item(), 6), "  local counts:", round(micro_local.item(), 6))
for mode in ["seq_mean_token_mean", "token_mean", "fixed_length_mean"]:
    print(f"{mode:20s} weights", rl.per_token_weights(mask, mode, dtype=torch.float64).numpy().round(4).tolist())

# %% [markdown]
# Now a group of $G = 6$ answers of different lengths, three right and three wrong, with Dr. GRPO's
# mean-centred advantages $\pm 0.5$. The plot shows the push on each token, $\hat A_i\, w_{i,t}$, summed
# over the answer's tokens (left) and per token (right). Under GRPO's aggregation every answer
# gets the same *total* push, so the 2-token wrong answer is punished 6× harder per token than the 12-token one;
# under DAPO and Dr. GRPO every token gets the same push, so longer answers get more in total.

# %%
rewards6 = [1, 0, 1, 0, 1, 0]
lengths6 = [2, 2, 6, 6, 12, 12]
fig, axes = plt.subplots(1, 2, figsize=(8.4, 3.6), dpi=80)
x = np.arange(6)
for j, mode in enumerate(["seq_mean_token_mean", "token_mean", "fixed_length_mean"]):
    push = ae.per_token_weights_for_group(rewards6, lengths6, "grpo_no_std", mode, max_length=12)
    axes[0].bar(x + 0.27 * (j - 1), push.sum(axis=1), width=0.27, label=ae.AGGREGATION_LABELS[mode])
    axes[1].bar(x + 0.27 * (j - 1), push[:, 0], width=0.27, label=ae.AGGREGATION_LABELS[mode])
for ax, title in zip(axes, ["Total push on the answer  Σ_t Â·w", "Push on each token  Â·w"]):
    ax.set_xticks(x, [f"r={r}\nL={n}" for r, n in zip(rewards6, lengths6)], fontsize=9)
    ax.axhline(0, color="k", lw=0.8)
    ax.set_title(title, fontsize=9)
    ax.set_xlabel("answer: reward r, length L (tokens)", fontsize=9)
# one legend for both panels, in its own strip below the axis labels
fig.legend(*axes[0].get_legend_handles_labels(), loc="lower center", ncol=3, fontsize=8.5, frameon=False)
fig.tight_layout(rect=(0, 0.1, 1, 1));

# %% [markdown]
# ## 9.4 The model, the task and the starting point
#
# The policy is the book's small GPT-2-style transformer (`rl.lm`), with one character per token. The
# task is two-digit addition with an exact verifier: prompt `"07+42="`, correct completion `"049</s>"`
# (reward 1), anything else reward 0. A random network never answers correctly, so GRPO would see only
# all-zero groups; we first train it by maximum likelihood (`rl.lm.train_sft`) on labels of which a
# large share (60%) are *plausible mistakes*: the right answer with one random digit changed. Maximum
# likelihood fits that noisy distribution faithfully. The right answer stays the single most likely
# one (greedy decoding is mostly right, and a right answer is almost always among 8 samples: high
# pass@8), but a *sample* at temperature 1 is right less than half of the time (low pass@1). That is
# the situation in which RL from a verifiable reward shines: nearly every group contains a right
# answer to reinforce and wrong ones to push down. Held-out problems (10% of all pairs) are never used for training.
#
# This is chapter 8's model, with chapter 8's settings. If chapter 8 has run on this machine, its
# checkpoint in `runs/checkpoints/ch08_sft/` carries a fingerprint of everything that decided its
# weights, and `rl.lm.load_or_train_sft` loads it when the fingerprint matches ours; otherwise it trains
# the same model here (under a minute on a CPU). Either way, both chapters start from the same
# weights, and the numbers below match chapter 8's.

# %%
task, tok = rl.lm.AdditionTask(num_digits=2, held_out_fraction=0.1, seed=0), rl.lm.build_char_tokenizer()
sft_config = rl.lm.SFTConfig(num_steps=rl.by_size(small=800, full=2000), seed=0)  # chapter 8's settings
SFT_CHECKPOINT = rl.runs_dir() / "checkpoints" / "ch08_sft"
policy, _, loaded = rl.lm.load_or_train_sft(tok, task, sft_config, checkpoint=SFT_CHECKPOINT)
print("supervised model:", "loaded from chapter 8's checkpoint" if loaded else "trained here (no matching checkpoint)")
print("parameters:", rl.lm.count_parameters(policy))
sft_start = copy.deepcopy(policy)  # an untouched copy: the second run of §9.6 and §9.8 start from it too
held_out = task.held_out_problems(rl.by_size(small=500, full=1000))
before = rl.evaluate(policy, tok, held_out, num_samples=16, k=8, seed=1)
print({k: round(v, 3) for k, v in before.items() if k != "num_correct"})


# %%
def show_samples(policy, problems, n=4, seed=0):
    """Print n sampled completions for each problem, marked ✓ / ✗ by the verifier."""
    prompt_ids, prompt_mask = rl.lm.encode_prompts(tok, [q.prompt for q in problems])
    out = rl.lm.sample_completions(
        policy, prompt_ids.to(device), prompt_mask.to(device), num_samples=n, max_new_tokens=8,
        eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, forbidden_ids=rl.lm.forbidden_token_ids(tok),
        generator=torch.Generator(device=device).manual_seed(seed), tokenizer=tok,
    )
    for i, q in enumerate(problems):
        texts = out.texts[i * n:(i + 1) * n]
        marks = [f"{t.replace(tok.eos_token, '')}{'✓' if task.reward(q.prompt, t) else '✗'}" for t in texts]
        print(f"{q.prompt} (answer {q.answer}):  " + "  ".join(marks))


show_samples(policy, held_out[:5])

# %% [markdown]
# ## 9.5 The loss is 0, the gradient is not
#
# Watch the `loss` that GRPO implementations log: at the first inner step it is often exactly zero,
# and it stays near zero throughout training. Nothing is broken. On the first pass over a fresh batch
# $\pi_\theta = \pi_{\theta_{\text{old}}}$, so $\rho_{i,t} = 1$, the clip is inactive, and the per-token loss is
# $-\hat A_i$. With the sample-level aggregation (9.4) the loss is $-\frac1B\sum_i \hat A_i$, and the
# advantages of every group sum to zero. With $\beta > 0$, $k_3 = 0$ too on the first step, where
# $\pi_\theta = \pi_{\text{ref}}$. The *gradient*, however, is
# $-\frac1B \sum_i \hat A_i \frac{1}{|o_i|}\sum_t \nabla_\theta \log\pi_\theta(o_{i,t} \mid \cdot)$: the
# advantages weight different score vectors, which do not cancel. We measure both with autograd on a
# real batch sampled from the model we just trained.

# %%
gen = torch.Generator(device=device).manual_seed(3)
problems = task.sample_problems(16, gen)
prompt_ids, prompt_mask = rl.lm.encode_prompts(tok, [q.prompt for q in problems])
G = 8
batch = rl.lm.sample_completions(
    policy, prompt_ids.to(device), prompt_mask.to(device), num_samples=G, max_new_tokens=8, eos_token_id=tok.eos_token_id,
    pad_token_id=tok.pad_token_id, forbidden_ids=rl.lm.forbidden_token_ids(tok), generator=gen, tokenizer=tok,
)
rewards = torch.tensor([task.reward(problems[j // G].prompt, t) for j, t in enumerate(batch.texts)])
advantages = rl.group_relative_advantages(rewards, G).to(device)
log_probs = rl.lm.completion_log_probs(policy, batch.prompt_ids, batch.completion_ids, batch.prompt_mask,
                                       forbidden_ids=rl.lm.forbidden_token_ids(tok), completion_mask=batch.completion_mask)
per_token = rl.clipped_surrogate_loss(log_probs, log_probs.detach(), advantages[:, None])  # ρ = 1
lengths = batch.lengths.to(advantages.dtype)
expected = {"seq_mean_token_mean": -advantages.mean(), "token_mean": -(advantages * lengths).sum() / lengths.sum()}
for mode in ["seq_mean_token_mean", "token_mean"]:
    loss = rl.AGGREGATIONS[mode](per_token, batch.completion_mask)
    grads = torch.autograd.grad(loss, list(policy.parameters()), retain_graph=True)
    grad_norm = torch.sqrt(sum((g.double() ** 2).sum() for g in grads)).item()
    print(f"{mode:20s} loss {loss.item():+.1e} (predicted {expected[mode].item():+.1e})   gradient norm {grad_norm:.3f}")
    assert abs(loss.item() - expected[mode].item()) < 1e-6 and grad_norm > 0.01
assert abs(loss.item()) < 1e-6 or len(set(batch.lengths.tolist())) > 1
print("groups with signal:", int((rewards.view(-1, G).std(dim=1) > 0).sum()), "of", len(problems),
      "  completion lengths:", sorted(set(batch.lengths.tolist())))

# %% [markdown]
# The sample-level loss is zero to rounding. The token-level loss at $\rho = 1$ is
# $-\sum_i \hat A_i |o_i| / \sum_i |o_i|$, which vanishes only when the answers in each group are equally
# long (as they mostly are here: three digits and EOS) and otherwise has the sign of "are the right
# answers longer?", which says nothing about progress either. Track the reward, the held-out accuracy
# and the KL instead, and treat a loss curve from a GRPO run with suspicion.
#
# ## 9.6 The GRPO loop
#
# `rl.train_grpo` is one readable loop (open `rlbook/algos/grpo.py`): draw prompts, sample $G$
# completions each with the current weights ($\pi_{\theta_{\text{old}}}$), score them with the verifier,
# compute the advantages, then take gradient steps on the clipped surrogate (9.2) aggregated by the
# chosen rule. Each variant is a configuration, not a code path. DAPO's *loss* is
# `GRPOConfig(clip_eps_high=0.28, loss_aggregation="token_mean", kl_coef=0.0)`: clip-higher and the
# token-level mean. That is two of DAPO's five changes; the other three (dynamic sampling, overlong
# filtering, a soft penalty for overlong answers) decide which samples enter the batch and what they
# are paid, and are not part of this loss. Dr. GRPO is
# `GRPOConfig(advantage_estimator="dr_grpo", loss_aggregation="fixed_length_mean")`.

# %%
print(inspect.getsource(rl.algos.grpo.grpo_step))

# %% [markdown]
# One detail of the step is about cost, not about the objective. The $G$ completions of a prompt share
# that prompt, and under causal attention the prompt's hidden states never look at what follows them,
# so they are the same in all $G$ rows. `completion_log_probs` therefore accepts the $N$ distinct
# prompts with the $N G$ completions, encodes each prompt once, and lets its $G$ completions attend to
# one shared copy of its keys and values (*prefix sharing*; the sampler does the same). The numbers,
# and the gradient, are those of the prompt repeated $G$ times; the work on prompt tokens drops
# $G$-fold:

# %%
log_probs_shared = rl.lm.completion_log_probs(policy, prompt_ids.to(device), batch.completion_ids, prompt_mask.to(device),
                                              forbidden_ids=rl.lm.forbidden_token_ids(tok), completion_mask=batch.completion_mask)
P, T = prompt_ids.shape[1], batch.completion_ids.shape[1]
print(f"max |shared − repeated| = {(log_probs_shared - log_probs).abs().max().item():.1e}")
print(f"token positions through the model: repeated {len(batch.texts) * (P + T - 1)}, "
      f"shared {len(problems) * P + len(batch.texts) * (T - 1)}")
assert torch.allclose(log_probs_shared, log_probs, atol=1e-5)

# %% [markdown]
# The run below uses the defaults, and two of them mean that parts of (9.2) never act, so be clear
# about what it shows. $\beta = 0$ (`kl_coef=0.0`): there is no KL penalty; the KL to the starting model
# is only *measured* (`log_ref_kl=True`). And one optimisation pass per batch ($\mu = 1$,
# `num_inner_epochs=1`): the single gradient step is taken at $\theta = \theta_{\text{old}}$, where
# every ratio is 1, so the clip never fires either. This run is, in effect, REINFORCE with the group
# baseline, which on this task is all it needs. A second, shorter run afterwards switches both on.

# %%
grpo_config = rl.GRPOConfig(num_steps=rl.by_size(small=rl.GRPOConfig.num_steps, full=400), seed=0)
print(grpo_config)
history = rl.train_grpo(policy, tok, task, grpo_config)
after = rl.evaluate(policy, tok, held_out, num_samples=16, k=8, seed=1)
print("before:", {k: round(v, 3) for k, v in before.items() if k != "num_correct"})
print("after: ", {k: round(v, 3) for k, v in after.items() if k != "num_correct"})
print(f"GRPO phase: {history.wall_seconds:.0f} s on this machine")
assert after["pass@1"] - before["pass@1"] >= 0.40, "held-out sampled pass@1 should rise by at least 40 points"
assert after["greedy_accuracy"] >= before["greedy_accuracy"], "greedy accuracy should not fall"

# %%
DIAGNOSTICS = {
    "reward": ("Training reward (sampled accuracy)", "mean reward"),
    "kl": ("KL to the starting model (k3)", "nats per token"),
    "frac_zero_variance_groups": ("Groups with no signal", "share of groups"),
    "clip_fraction": ("Tokens whose ratio is clipped", "share of tokens"),
}
fig, axes = plt.subplots(2, 2, figsize=(8.4, 5.2), dpi=80)
for ax, (key, (title, ylabel)) in zip(axes.flat, DIAGNOSTICS.items()):
    ax.plot(np.asarray(history[key], dtype=float))
    ax.set_title(title, fontsize=9)
    ax.set_xlabel("GRPO step"); ax.set_ylabel(ylabel, fontsize=9)
plt.tight_layout();

# %% [markdown]
# The training reward (the sampled accuracy on the training batch) climbs, and with it the share of
# groups in which every answer is right, which then carry no signal. The KL to the starting model
# grows slowly, unchecked, since nothing penalises it. The clipped share is exactly zero at every
# step, as it must be with $\mu = 1$.

# %%
assert float(np.max(history["clip_fraction"])) == 0.0, "with one pass per batch the ratio is 1: nothing is clipped"

# %% [markdown]
# **The policy's entropy, and where it sits.** `train_grpo` also logs the entropy of the policy,
# $H = -\sum_v \pi_\theta(v \mid q, o_{<t}) \log \pi_\theta(v \mid q, o_{<t})$, averaged over the sampled answer tokens
# (`history["entropy"]`), and the same average at each position $t$ of the answer
# (`history["entropy_by_position"]`, one row per step). Entropy is how much choice the policy still
# leaves itself: the room in which sampling can find an answer the verifier rewards.

# %%
by_position = history["entropy_by_position"]  # (steps, max_new_tokens); NaN where no answer is that long
POSITIONS = ["hundreds digit", "tens digit", "units digit", "EOS"]
fig, axes = plt.subplots(1, 2, figsize=(8.4, 3.0), dpi=80)
axes[0].plot(history["entropy"])
axes[0].set_title("Mean token entropy of the sampled answers", fontsize=9)
for t, name in enumerate(POSITIONS):
    axes[1].plot(by_position[:, t], label=name)
axes[1].set_title("By position in the answer", fontsize=9)
axes[1].legend(fontsize=9)
for ax in axes:
    ax.set_xlabel("GRPO step"); ax.set_ylabel("nats per token", fontsize=9)
plt.tight_layout();
first, last = by_position[:5, :4].mean(axis=0), by_position[-5:, :4].mean(axis=0)
for name, a, b in zip(POSITIONS, first, last):
    print(f"{name:<15} first five steps {a:.3f}  last five {b:.3f} nats")
print(f"all tokens      first five steps {np.mean(history['entropy'][:5]):.3f}  last five {np.mean(history['entropy'][-5:]):.3f} nats")

# %% [markdown]
# The entropy falls as the reward rises, by more than half over the run: GRPO spends the choice that
# supervised training on noisy labels left in the model. It was never spread evenly. The end of the answer
# carries almost none (after three digits the model always stops); the digits carry it all, the tens digit
# most. And it falls at every digit, by more than half: the choice is spent where the reward tells the
# answers apart. Chapter 15 derives why a policy-gradient step lowers the entropy and measures it across
# the GRPO family.

# %%
rl.claim("by more than half over the run", np.mean(history["entropy"][-5:]) / np.mean(history["entropy"][:5]), high=0.5)
rl.claim("The end of the answer carries almost none", max(first[3], last[3]), high=0.02)
rl.claim("the tens digit most", first[1] / max(first[0], first[2]), low=1.0)
rl.claim("it falls at every digit, by more than half", max(last[:3] / first[:3]), high=0.5)

# %% [markdown]
# **Now with the clip and the penalty acting.** Start again from the same supervised model and take
# $\mu = 4$ passes over every batch (`num_inner_epochs=4`) with a KL penalty $\beta = 0.04$
# (`kl_coef=0.04`, the value of the DeepSeekMath paper). After the first pass $\theta \ne \theta_{\text{old}}$, the
# ratios spread around 1, and the clip starts to bind on the tokens that have moved furthest in the
# direction their advantage asks for; the reported clipped share is measured on the last pass. The
# KL is now part of the loss, so its gradient pulls the policy back towards the reference.

# %%
offpolicy_config = rl.GRPOConfig(num_steps=rl.by_size(small=30, full=150), num_inner_epochs=4, kl_coef=0.04, seed=0)
offpolicy_history = rl.train_grpo(copy.deepcopy(sft_start), tok, task, offpolicy_config)
steps = offpolicy_config.num_steps
fig, axes = plt.subplots(2, 2, figsize=(8.4, 5.2), dpi=80)
fig.delaxes(axes[1, 1])
axes = axes.ravel()[:3]  # three panels in a 2 × 2 grid
for ax, key in zip(axes, ["reward", "kl", "clip_fraction"]):
    title, ylabel = DIAGNOSTICS[key]
    ax.plot(np.asarray(history[key], dtype=float)[:steps], label="μ = 1, β = 0 (the run above)")
    ax.plot(np.asarray(offpolicy_history[key], dtype=float), label="μ = 4, β = 0.04")
    ax.set_title(title, fontsize=9)
    ax.set_xlabel("GRPO step"); ax.set_ylabel(ylabel, fontsize=9)
axes[0].legend(fontsize=9)
plt.tight_layout();
clip_share = float(np.mean(offpolicy_history["clip_fraction"]))
print(f"μ = 4, β = 0.04: mean clipped share {clip_share:.3f}, final KL {float(offpolicy_history['kl'][-1]):.4f} nats/token, "
      f"{offpolicy_history.wall_seconds:.0f} s")
assert clip_share > 0.0 and float(np.max(offpolicy_history["kl"])) > 0.0

# %% [markdown]
# Four passes take four gradient steps on each batch of samples instead of one. The figure is one pair
# of runs (seed 0); the comparison comes from ten. `benchmarks/grpo_passes.py` ran both configurations
# for 30 steps on seeds 0–9 from this supervised model (seed $k$ of both draws the same first prompts and
# samples, so the per-seed differences cancel the luck they share), and the cell below prints its saved
# table and the paired differences. With $\mu = 4$ and $\beta = 0.04$ the reward climbs faster per step
# (the mean training reward over the 30 steps is higher on every seed), and the pair $\mu = 4$,
# $\beta = 0.04$ also drifts further from the reference (the KL at the last step), penalty and all. The
# two configurations differ in $\mu$ and $\beta$ at once, so these intervals credit the pair,
# not either change alone (rerun with `kl_coef=0.0` and with `kl_coef=0.4` to separate them), and "per
# step" hides that each step of the second run does four times the gradient work. The clipped share of
# seed 0 is above zero (its mean over the run is printed above): the clip is acting, stopping a token's
# ratio once it has gone $\varepsilon$ in the helpful direction. On this small task the on-policy run reaches the chapter's
# target without either, which is why the book's main run leaves them off; on a real model, where
# sampling is the expensive part, reusing each batch for several passes is the reason the clip exists.

# %%
faster = float(np.mean(offpolicy_history["reward"])) - float(np.mean(np.asarray(history["reward"], dtype=float)[:steps]))
print(f"seed 0 in this chapter: mean training reward over {steps} steps, μ = 4, β = 0.04 minus μ = 1, β = 0: {faster:+.3f}")
passes = rl.benchmark_results("grpo_passes")  # saved by the command it prints
print(passes["command"])
runs = {"μ = 1, β = 0": passes["runs"]["mu1_b0"], "μ = 4, β = 0.04": passes["runs"]["mu4_b004"]}
for metric in ("mean_reward", "final_kl"):
    print(f"{metric:<22}" + "".join(f"{s:>7}" for s in passes["seeds"]))
    for name, run in runs.items():
        print(f"  {name:<20}" + "".join(f"{v:>7.3f}" for v in run[metric]))
climb = rl.compare(runs["μ = 4, β = 0.04"]["mean_reward"], runs["μ = 1, β = 0"]["mean_reward"], names=("μ=4,β=0.04", "μ=1,β=0"))
drift = rl.compare(runs["μ = 4, β = 0.04"]["final_kl"], runs["μ = 1, β = 0"]["final_kl"], names=("μ=4,β=0.04", "μ=1,β=0"))

# %%
rl.claim_comparison("the reward climbs faster per step", climb, ">")
rl.claim("higher on every seed", min(np.subtract(runs["μ = 4, β = 0.04"]["mean_reward"], runs["μ = 1, β = 0"]["mean_reward"])), low=0.0)
rl.claim_comparison("drifts further from the reference", drift, ">");
#
# The same held-out problems before and after, four samples each:

# %%
show_samples(policy, held_out[:5])

# %%
rl.report_headline(
    f"GRPO: held-out sampled pass@1 {before['pass@1']:.2f} → {after['pass@1']:.2f}, "
    f"greedy {before['greedy_accuracy']:.2f} → {after['greedy_accuracy']:.2f}"
)

# %% [markdown]
# RL from the verifiable reward did what supervised learning on noisy labels could not: it moved the
# probability mass onto the answers the verifier accepts. Note what it mostly did *not* do: teach the
# model something it did not know, since the right answer was already its favourite (high greedy
# accuracy and pass@8 before RL). Whether large models behave the same way is debated. Yue et al. 2025
# (arXiv:2504.13837) compared base and RL-trained models by pass@k up to large $k$ and found that RL with
# verifiable rewards mostly sharpens what the base model can already produce (chapter 15 returns to
# this); ProRL (Liu et al. 2025, arXiv:2505.24864) reports the opposite after much longer RL training,
# with the trained model solving problems that the base model does not solve even with many samples.
# `SFTConfig(carry_noise=0.6)` builds a model whose favourite
# answer is *systematically* wrong on some problems (exercise 6), and there the same reasoning predicts
# that GRPO gains less, since sharpening concentrates the mass on the slip; exercise 6 asks you to measure it.
#
# ## 9.7 Explore: advantages and token weights
#
# The widget lets you set $G$, each answer's reward and length, the advantage estimator and the
# aggregation, and shows the push on each answer's tokens. Things to try: make all rewards equal;
# one success out of eight under `grpo`, `grpo_no_std` and `maxrl`; a long wrong answer under
# `seq_mean_token_mean` versus `token_mean`. The static figure below shows one such setting.

# %%
ae.advantage_explorer()

# %%
fig, axes = plt.subplots(2, 2, figsize=(8.4, 6.0), dpi=80)
fig.delaxes(axes[1, 1])
axes = axes.ravel()[:3]  # three panels in a 2 × 2 grid
ae.plot_advantages([1, 0, 0, 0, 0, 0, 0, 0], [4, 4, 4, 4, 4, 4, 12, 12], "grpo", "seq_mean_token_mean", ax=axes[0])
ae.plot_advantages([1, 0, 0, 0, 0, 0, 0, 0], [4, 4, 4, 4, 4, 4, 12, 12], "maxrl", "token_mean", ax=axes[1])
ae.plot_advantages([1, 1, 1, 1], [4, 4, 4, 4], "grpo", "token_mean", ax=axes[2])
plt.tight_layout();

# %% [markdown]
# ## 9.8 Taking this recipe to a real model
#
# `rl.train_grpo` is written to be read; to train a real model on a GPU you will want a production
# trainer such as TRL's `GRPOTrainer` (von Werra et al.), with generation servers, sharding and
# mixed precision. The risk is that "GRPO" there is not the GRPO you studied: the previous sections
# showed how many small choices (the std, the aggregation, the clip band, the KL estimator) hide behind
# the name. `rlbook.bridge` translates a `GRPOConfig` into TRL's configuration, and refuses, naming
# the setting, when TRL cannot express it. Two examples of what the translation has to know:
#
# * TRL divides by the *sample* standard deviation of the group; the book's default is the population
#   one (§9.1). So the book's default configuration does not translate: the error says to set
#   `advantage_std="sample"`.
# * TRL, by default, multiplies the $k_3$ penalty by the importance ratio (`use_bias_correction_kl`);
#   (9.2) does not, so the bridge switches it off.
#
# The proof that the two sides optimise the same thing is a computation: evaluate TRL's own loss code
# and rlbook's on one batch (prompts, sampled completions of different lengths, old log-probabilities
# that make the clip act, a reference model for the KL term) and compare the loss and every
# parameter's gradient. The test suite does this for every loss both sides implement (GRPO, DAPO's
# token mean, Dr. GRPO, CISPO), with and without the KL term; here is the GRPO case with $\beta > 0$.
# TRL is an optional extra (`pip install -e ".[trl]"`); without it the cells below say so and skip.

# %%
try:
    from rlbook import bridge
    bridge.require_trl()
    HAVE_TRL = True
except ImportError as err:
    HAVE_TRL = False
    print("TRL is not installed, so this section is skipped:", err)

try:
    bridge.to_trl_config(rl.GRPOConfig(device="cpu")) if HAVE_TRL else None
except ValueError as err:
    print(err)
# device="cpu": the float64 comparison below runs on the CPU, also on a machine with a GPU
recipe = rl.GRPOConfig(advantage_std="sample", kl_coef=0.04, group_size=8, prompts_per_step=4, num_steps=5, seed=0,
                       device="cpu")
if HAVE_TRL:
    trl_args = bridge.to_trl_config(recipe)
    print({name: getattr(trl_args, name) for name in ("loss_type", "num_generations", "per_device_train_batch_size",
                                                      "epsilon", "epsilon_high", "beta", "use_bias_correction_kl",
                                                      "scale_rewards", "num_iterations", "max_completion_length")})

# %%
if HAVE_TRL:
    model64 = copy.deepcopy(policy).double().cpu()  # float64, so that "equal" can mean 1e-6
    trainer = bridge.build_trl_trainer(model64, tok, task, recipe)  # with β > 0, TRL reloads the model: same weights
    model64 = trainer.model
    # the batch of §9.5: 16 prompts (each row repeated for its G completions), completions sampled by the model
    P, M = batch.prompt_ids.cpu(), batch.prompt_mask.cpu()
    ids, cmask = batch.completion_ids.cpu(), batch.completion_mask.cpu()
    with torch.no_grad():
        now = rl.lm.completion_log_probs(model64, P, ids, M, completion_mask=cmask).double()
        reference64 = copy.deepcopy(sft_start).double().cpu()  # π_ref: the supervised model
        ref_now = rl.lm.completion_log_probs(reference64, P, ids, M, completion_mask=cmask).double()
    old_now = now + 0.3 * torch.randn(now.shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    one_batch = dict(prompt_ids=P, prompt_mask=M, completion_ids=ids, completion_mask=cmask,
                     advantages=rl.group_relative_advantages(rewards, G, std="sample").double(),
                     old_log_probs=old_now, ref_log_probs=ref_now)
    model64.zero_grad(set_to_none=True)
    loss_trl = bridge.trl_loss(trainer, **one_batch)
    loss_trl.backward()
    grads_trl = [p.grad.clone() for p in model64.parameters()]
    model64.zero_grad(set_to_none=True)
    loss_rlbook = bridge.rlbook_grpo_loss(model64, **one_batch, config=recipe)
    grad_gap = max((p.grad - g).abs().max().item() for p, g in zip(model64.parameters(), grads_trl))
    print(f"TRL's loss    {loss_trl.item():+.10f}")
    print(f"rlbook's loss {loss_rlbook.item():+.10f}")
    print(f"largest gradient difference over all parameters: {grad_gap:.1e}")
    assert abs(loss_trl.item() - loss_rlbook.item()) < 1e-6 and grad_gap < 1e-6

# %% [markdown]
# With the loss established, the recipe runs in TRL's trainer unchanged. Both trainers start from the
# supervised model and run the same recipe, the chapter's batch of 64 prompts × 8 answers with
# $\beta = 0.04$, for 30 steps each (150 at the full size). (TRL samples with `model.generate` and decodes without special
# tokens, so the reward function adds the end token back before the verifier sees the answer; see
# `rl.bridge.build_trl_trainer`.) The two runs draw different prompts and samples, so their curves
# are two samples of the same process, not copies of each other; both should climb and lift held-out
# pass@1 (by at least 15 points each, checked below). One run per trainer cannot say whether either
# lifts it more: the two numbers printed are one draw each, not a comparison.

# %%
if HAVE_TRL:
    from transformers.trainer_callback import PrinterCallback

    recipe = rl.GRPOConfig(advantage_std="sample", kl_coef=0.04, num_steps=rl.by_size(small=30, full=150), seed=0)
    book_policy = copy.deepcopy(sft_start)
    book_history = rl.train_grpo(book_policy, tok, task, recipe)
    trainer = bridge.build_trl_trainer(copy.deepcopy(sft_start).cpu(), tok, task, recipe, logging_steps=1, disable_tqdm=True)
    trainer.remove_callback(PrinterCallback)
    start = time.perf_counter()
    trainer.train()
    trl_seconds = time.perf_counter() - start
    trl_rewards = [entry["reward"] for entry in trainer.state.log_history if "reward" in entry]
    trl_policy = trainer.model.eval()
    results = {"rlbook.train_grpo": rl.evaluate(book_policy, tok, held_out, num_samples=16, k=8, seed=1),
               "TRL GRPOTrainer": rl.evaluate(trl_policy.to(device), tok, held_out, num_samples=16, k=8, seed=1)}
    fig, ax = plt.subplots(figsize=(5, 2.8), dpi=80)
    ax.plot(np.asarray(book_history["reward"], dtype=float), label="rlbook.train_grpo")
    ax.plot(trl_rewards, label="TRL GRPOTrainer")
    ax.set_xlabel("GRPO step"); ax.set_ylabel("mean reward"); ax.legend(fontsize=9)
    ax.set_title("One recipe, two trainers: training reward", fontsize=9)
    plt.tight_layout()
    print(f"held-out pass@1 before: {before['pass@1']:.3f}")
    for name, result in results.items():
        print(f"  after {recipe.num_steps} steps of {name:18s}: {result['pass@1']:.3f}")
    print(f"wall time: rlbook {book_history.wall_seconds:.0f} s, TRL {trl_seconds:.0f} s (this machine)")
    assert len(trl_rewards) == recipe.num_steps
    assert all(result["pass@1"] - before["pass@1"] >= 0.15 for result in results.values()), "both should learn"

# %% [markdown]
# Scaling up from here is TRL's business (and the business of its documentation): a larger model
# loaded with `rl.lm.load_policy("path/to/model")`, `bf16=True` passed to `to_trl_config` on a GPU, a
# generation server. What the bridge guarantees is that the loss you read in this chapter is the one
# being optimised.

# %% [markdown]
# ## Summary
#
# * GRPO replaces PPO's critic by a group of $G$ answers to the same question: the advantage of an
#   answer is its reward relative to its siblings, (9.1). Population and sample standard deviation
#   differ by $\sqrt{G/(G-1)}$; groups whose answers all score the same give exactly zero signal.
# * Dr. GRPO drops the std (no extra weight on nearly solved or hopeless questions), RLOO uses the
#   leave-one-out mean ($\frac{G}{G-1}$ times the mean-centred advantage), and MaxRL divides by the
#   success rate, favouring hard questions.
# * GRPO's per-token KL penalty uses $k_3 = (x-1) - \log x$: unbiased like $k_1$, but never negative.
# * The reduction of per-token losses is a modelling choice: GRPO's sample-level mean weighs a token by
#   $1/|o_i|$, DAPO's token-level mean weighs all tokens equally, Dr. GRPO divides by a constant.
#   With micro-batches, token-level means need the global token count.
# * The reported GRPO loss is zero on a fresh batch while the gradient is not: monitor reward, held-out
#   accuracy and KL instead.
# * `rlbook.bridge` expresses a configuration in TRL's `GRPOTrainer`, refuses what TRL cannot express,
#   and the two losses and gradients agree on the same batch to $10^{-6}$.
# * On the book's small transformer GRPO lifted held-out sampled pass@1 by more than 40 points in a
#   short CPU run (its time is printed in §9.6), by sharpening what supervised training had left
#   uncertain; greedy accuracy, already high, did not fall (whether it rises by a point or stays put
#   depends on the CPU the supervised model was trained on). That run had $\beta = 0$ and $\mu = 1$, so
#   neither the KL penalty nor the clip acted; with $\mu = 4$ and $\beta = 0.04$ both do, and over ten paired
#   seeds that configuration's training reward climbed faster per step, with more drift from the reference.
#
# ## Exercises
#
# 1. *(By hand.)* For rewards $[1, 0, 0, 0]$ compute the advantages under GRPO (population and sample
#    std), Dr. GRPO, RLOO and MaxRL; check with `rl.group_relative_advantages` and friends.
# 2. Show that RLOO's advantage equals $\frac{G}{G-1}(r_i - \bar r)$, and that the plain group mean
#    baseline therefore scales the unbiased gradient by $\frac{G-1}{G}$.
# 3. Reproduce the $k_3$ check with $\pi_{\text{ref}}$ far from $\pi_\theta$ (multiply the perturbation
#    by 5). What happens to the standard deviations of $k_1$ and $k_3$?
# 4. Make the answers' lengths differ (e.g. a task whose answers have 1 to 4 digits) and measure the
#    logged loss at $\rho = 1$ under `token_mean`. Why is it no longer zero? What is its sign when the
#    wrong answers are longer?
# 5. Train with `GRPOConfig(advantage_estimator="dr_grpo", loss_aggregation="fixed_length_mean")` and
#    with `GRPOConfig(clip_eps_high=0.28, loss_aggregation="token_mean", num_inner_epochs=2)` (DAPO's
#    loss) and compare the held-out pass@1 and the KL curves with the run above.
# 6. Set `label_noise=0.0` in the supervised warm-up. How much room is left for GRPO, and what does the
#    share of zero-variance groups look like from the first step? Then try `carry_noise=0.6`, which
#    teaches the model to forget the carry out of the units column: greedy decoding is then wrong on
#    every such problem. How far does GRPO get, and why does sharpening the policy lock the slip in?
# 7. *(Cost.)* Time `rl.lm.completion_log_probs` forward and backward with the $N$ distinct prompts
#    (prefix sharing) and with each prompt repeated $G$ times, for $G = 2, 8, 32$ and a fixed number of
#    completions. Predict the ratio from the token counts $N P + N G (T-1)$ and $N G (P + T - 1)$
#    before you measure; where does the prediction fail, and why? (Hint: count the attention's work
#    too, and the fixed cost of each call.)

# %% [markdown] tags=["solution"] jp-MarkdownHeadingCollapsed=true
# ## Solutions
#
# Exercises 5 and 6 ask for training runs of a minute or more each, which these solutions do not
# repeat; they compute what can be computed in seconds and say what the runs show and why.
#
# ### Solution to exercise 1
#
# Rewards $[1, 0, 0, 0]$: $\bar r = 0.25$. Population std $\sqrt{0.25 \cdot 0.75} = 0.433$, so GRPO gives
# $+0.75/0.433 = +1.732$ and $-0.25/0.433 = -0.577$. Sample std $\sqrt{0.75/3} = 0.5$: $+1.5$ and $-0.5$.
# Dr. GRPO: $+0.75$, $-0.25$. RLOO: the success's baseline is the mean of the other three, $0$, so $+1$;
# each failure's is $1/3$, so $-1/3$. MaxRL: $(1 - 0.25)/0.25 = +3$ and $-0.25/0.25 = -1$.

# %% tags=["solution"]
r4 = torch.tensor([1.0, 0.0, 0.0, 0.0], dtype=torch.float64)
by_hand = {
    "GRPO, population std": [3 ** 0.5, -(3 ** -0.5)], "GRPO, sample std": [1.5, -0.5], "Dr. GRPO": [0.75, -0.25],
    "RLOO": [1.0, -1 / 3], "MaxRL": [3.0, -1.0],
}
computed = {
    "GRPO, population std": rl.group_relative_advantages(r4, 4), "GRPO, sample std": rl.group_relative_advantages(r4, 4, std="sample"),
    "Dr. GRPO": rl.group_relative_advantages(r4, 4, scale="none"), "RLOO": rl.leave_one_out_advantages(r4, 4),
    "MaxRL": rl.maxrl_advantages(r4, 4),
}
for name, (win, lose) in by_hand.items():
    print(f"{name:22s} by hand {win:+.4f} {lose:+.4f}   library {computed[name][0].item():+.4f} {computed[name][1].item():+.4f}")
    assert np.allclose(computed[name].numpy(), [win, lose, lose, lose])

# %% [markdown] tags=["solution"]
# ### Solution to exercise 2
#
# $\sum_{j \ne i} r_j = G\bar r - r_i$, so
# $r_i - \frac{G\bar r - r_i}{G - 1} = \frac{(G-1) r_i - G\bar r + r_i}{G-1} = \frac{G}{G-1}(r_i - \bar r)$.
# The leave-one-out baseline does not depend on $o_i$, so $\mathbb E[(r_i - b_i)\nabla\log\pi(o_i)] =
# \mathbb E[r_i \nabla\log\pi(o_i)]$: RLOO's gradient is unbiased. The plain mean baseline gives
# $r_i - \bar r = \frac{G-1}{G}\,(\text{RLOO's advantage})$, so its gradient is the unbiased one times
# $\frac{G-1}{G}$: a smaller step in the same expected direction, not a wrong direction. A numerical
# check on random rewards:

# %% tags=["solution"]
rand_rewards = torch.rand(5 * 6, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
centred = rl.group_relative_advantages(rand_rewards, 6, scale="none")
assert torch.allclose(rl.leave_one_out_advantages(rand_rewards, 6), centred * 6 / 5)
print("RLOO = G/(G−1) · (r − mean) on 5 random groups of 6: True")

# %% [markdown] tags=["solution"]
# ### Solution to exercise 3

# %% tags=["solution"]
gen3 = torch.Generator().manual_seed(0)
logits3 = torch.randn(12, generator=gen3, dtype=torch.float64)
for scale in (0.7, 3.5):
    ref3 = logits3 + scale * torch.randn(12, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    lp, lr_ = torch.log_softmax(logits3, -1), torch.log_softmax(ref3, -1)
    w = lp.exp()
    row = []
    for estimator in (rl.kl_k1, rl.kl_k3):
        k = estimator(lp, lr_)
        mean = (w * k).sum()
        row.append(((w * (k - mean) ** 2).sum().sqrt().item(), mean.item()))
    print(f"perturbation ×{scale / 0.7:.0f}: KL {row[0][1]:.3f}   std k1 {row[0][0]:.3f}   std k3 {row[1][0]:.3f}")

# %% [markdown] tags=["solution"]
# (The standard deviations are exact, summed over the 12 tokens.) Both spreads grow as the
# distributions move apart, but $k_3$'s grows faster: $k_3 = (x - 1) - \log x$ contains the ratio $x$
# itself, which is unbounded above, so a token that is much likelier under $\pi_{\text{ref}}$ than under
# $\pi_\theta$ produces a large value. The control variate that cancels $k_1$'s first-order noise near
# $\pi_{\text{ref}}$ adds noise of its own far from it. §5.8 measures both spreads on a finer grid.
#
# ### Solution to exercise 4
#
# At $\rho = 1$ the per-token loss is $-\hat A_i$, so the token-level loss is
# $-\sum_i \hat A_i |o_i| / \sum_i |o_i|$. The advantages sum to zero within a group, so the sum vanishes
# when all lengths are equal; otherwise it is a length-weighted sum of the advantages. If the wrong
# answers (negative $\hat A$) are the longer ones, the negative advantages get the larger weights and
# the loss is *positive*:

# %% tags=["solution"]
rewards_ex4 = torch.tensor([1.0, 1.0, 0.0, 0.0], dtype=torch.float64)
lengths_ex4 = torch.tensor([1, 2, 4, 4])
mask_ex4 = torch.arange(4)[None, :] < lengths_ex4[:, None]
adv_ex4 = rl.group_relative_advantages(rewards_ex4, 4)
zeros = torch.zeros(4, 4, dtype=torch.float64)
per_token_ex4 = rl.clipped_surrogate_loss(zeros, zeros, adv_ex4[:, None].expand(4, 4))  # ρ = 1
loss_ex4 = rl.token_mean(per_token_ex4, mask_ex4)
print("advantages", adv_ex4.numpy().round(3), " lengths", lengths_ex4.tolist(), f" token_mean loss {loss_ex4.item():+.4f}")
assert loss_ex4 > 0 and abs(loss_ex4 + (adv_ex4 * lengths_ex4).sum() / lengths_ex4.sum()) < 1e-12

# %% [markdown] tags=["solution"]
# The logged loss then tracks how answer *lengths* correlate with reward in the batch, not progress.
#
# ### Solution to exercise 5
#
# Before training, notice what differs on *this* task. Every well-formed answer has 4 tokens (three
# digits and `</s>`), so the three aggregations weigh tokens equally and differ only by a constant:
# the token mean equals the sample-level mean, and Dr. GRPO's constant normaliser divides by
# $L_{\max} = 8$ instead of 4, halving the loss. Checked on equal-length answers:

# %% tags=["solution"]
per_token_5 = torch.randn(6, 8, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
mask_5 = torch.arange(8)[None, :] < 4
print("sample-level", round(rl.seq_mean_token_mean(per_token_5, mask_5.expand(6, 8)).item(), 6),
      " token-level", round(rl.token_mean(per_token_5, mask_5.expand(6, 8)).item(), 6),
      " Dr. GRPO × 2", round(2 * rl.fixed_length_mean(per_token_5, mask_5.expand(6, 8), max_length=8).item(), 6))
print(rl.GRPOConfig(advantage_estimator="dr_grpo", loss_aggregation="fixed_length_mean"))
print(rl.GRPOConfig(clip_eps_high=0.28, loss_aggregation="token_mean", num_inner_epochs=2))

# %% [markdown] tags=["solution"]
# So the Dr. GRPO run differs from the main run through its step size only: no division by the
# group std (advantages smaller by the factor $\text{std} \le 0.5$ for 0/1 rewards) and half the loss.
# With Adam, which normalises the gradient's scale, the effect should be milder than these factors
# suggest; the reasoning predicts slower learning per step at the same learning rate. The DAPO-loss run
# has two passes per batch, so its clipped share is above zero (as in the second run of §9.6);
# clip-higher matters for tokens whose probability is small, which on a 16-token vocabulary with a
# confident model are few, so the reasoning predicts behaviour much like the main run. One run of each
# is one draw: test either prediction over paired seeds (as §9.6 and chapter 10 do) before believing it. The differences these papers report
# come from long reasoning answers whose lengths vary by thousands of tokens, which this task does not
# have; Part IV's second task does.
#
# ### Solution to exercise 6
#
# With clean labels the supervised model is right almost always, so most groups are all-correct and
# silent from the first step. The share of silent groups for a question answered right with
# probability $p$ is $p^G + (1-p)^G$:

# %% tags=["solution"]
for p_right in (0.4, 0.7, 0.9, 0.97):
    print(f"p = {p_right:4.2f}: share of groups with no signal at G = 8: {p_right ** 8 + (1 - p_right) ** 8:.3f}")

# %% [markdown] tags=["solution"]
# Near $p = 0.97$ three groups out of four carry nothing, and the rest carry the signal of a rare
# failure: little room and little signal. With `carry_noise=0.6` the model's favourite answer on the
# problems with a units carry is the slip (chapter 8's exercise 2 counts the labels). GRPO's gradient
# still points towards the right answer wherever a group contains one, but sharpening the policy
# concentrates the mass on the favourite, the slip; once all $G$ samples of a problem are the slip, its
# group is silent and the mistake is locked in. The reasoning predicts pass@1 rising on the problems
# without a carry and much less on the others; compare the two groups of problems over several seeds.
#
# ### Solution to exercise 7
#
# With $N$ prompts of $P$ tokens and $G$ completions of $T$ tokens each, the repeated layout sends
# $NG(P + T - 1)$ token positions through the model and the shared one $NP + NG(T - 1)$. Timing both,
# forward and backward, with $NG = 256$ completions:

# %% tags=["solution"]
def time_scoring(shared, G_, reps=3):
    n_prompts = 256 // G_
    probs_ = task.sample_problems(n_prompts, torch.Generator().manual_seed(0))
    p_ids, p_mask = rl.lm.encode_prompts(tok, [q.prompt for q in probs_])
    c_ids = torch.randint(4, 14, (n_prompts * G_, 4), generator=torch.Generator().manual_seed(0))
    if not shared:
        p_ids, p_mask = p_ids.repeat_interleave(G_, 0), p_mask.repeat_interleave(G_, 0)
    p_ids, p_mask, c_ids = p_ids.to(device), p_mask.to(device), c_ids.to(device)
    best = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        rl.lm.completion_log_probs(policy, p_ids, c_ids, p_mask).sum().backward()
        best = min(best, time.perf_counter() - start)
    policy.zero_grad(set_to_none=True)
    return best


P_, T_ = rl.lm.encode_prompts(tok, ["00+00="])[0].shape[1], 4
for G_ in (2, 8, 32):
    N_ = 256 // G_
    predicted = (N_ * G_ * (P_ + T_ - 1)) / (N_ * P_ + N_ * G_ * (T_ - 1))
    measured = time_scoring(False, G_) / time_scoring(True, G_)
    print(f"G = {G_:2d}: token-count ratio {predicted:.2f}   measured time ratio {measured:.2f}")

# %% [markdown] tags=["solution"]
# The measured ratio follows the token count for small $G$ and tends to fall short of it as $G$ grows. Two costs
# do not shrink with the prompt: each completion token still attends to all $P$ prompt positions
# (attention work grows with the *context* length, which prefix sharing does not shorten), and each
# call has a fixed overhead of kernel launches and Python that is large next to a model this small.
# The prediction is best for long prompts and short answers, the case of real RL for reasoning with
# long system prompts.
