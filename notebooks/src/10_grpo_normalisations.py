# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 10. What GRPO's normalisations do
#
# **Goals.** By the end of this chapter you can
# * say which tokens each loss aggregation pushes hardest, derive the *length bias* of GRPO's
#   per-answer mean and the *difficulty bias* of its division by the group's standard deviation, and
#   measure both on a model that chooses how long its answers are;
# * name DAPO's five changes to GRPO, switch each on and off as one `GRPOConfig` field, and compare
#   the published ablation with the same ablation on our model;
# * write $\log p$ as a sum of pass@$k$ terms, check it numerically, and explain why MaxRL's estimator
#   optimises a truncated likelihood instead of pass@1;
# * draw pass@$k$ curves before and after RL, and say what the critic of PPO costs and buys here.
#
# **Prerequisites.** Chapter 9 (GRPO, its advantages and its three aggregations) and the supervised
# warm-up of chapter 8.
#
# **Why this chapter?** After GRPO came a stream of variants: Dr. GRPO, DAPO, RLOO, MaxRL and more.
# Each one changes a single "innocent" choice (a normaliser, a mean, a baseline) and claims that the
# choice changes *what the model learns*, not only how fast. Such claims are easy to state and hard to
# see. Here every variant is a setting of the one training loop of chapter 9, so we can switch one
# choice at a time on a model trained on this machine, and watch what happens.

# %%
import copy
import itertools
import time

import matplotlib.pyplot as plt
import numpy as np
import torch

import rlbook as rl

rl.seed_everything(0)
# figures at twice the pixel density (sharp when zoomed)
# %config InlineBackend.figure_formats = ["retina"]
# One thread, as in chapter 9: sampled tokens then repeat exactly on this machine, and a busy
# machine slows the chapter down gently instead of stalling it.
torch.set_num_threads(1)
device = rl.get_device()
SIZE = rl.get_size()  # "small" (default; 2 CPU cores) or "full", via RLBOOK_SIZE
print("size:", SIZE)

# %% [markdown]
# ## 10.1 A task whose answers may be long
#
# The addition task of chapters 8 and 9 has answers of fixed length: "27+45=" has exactly one right
# completion, `072</s>`, four tokens. Every claim about *length* is then void. So we give the model a
# choice. In the *scratchpad* version of the task (after Nye et al. 2021, "Show your work",
# arXiv:2112.00114) a completion may show its working first, one column at a time from the units,
# each step ending in ";":
#
# `27+45=` → `7+5=12;2+4+1=7;072</s>` (18 tokens) or simply `072</s>` (4 tokens).
#
# The verifier reads only the text after the last ";" (or all of it, if there is none): the working is
# never checked. A right answer scores 1 after no working, after the reference working, or after a
# page of nonsense; only the token budget, 24 new tokens here, bounds the length. The supervised
# labels are written with the working half of the time, and 60% of them carry a one-digit mistake in
# the answer (as in chapter 8), so the model starts uncertain, and unsure whether to show its work.

# %%
task = rl.lm.ScratchpadAdditionTask(num_digits=2, held_out_fraction=0.1, seed=0, scratchpad_prob=0.5)
tok = rl.lm.build_char_tokenizer(task.alphabet)
MAX_NEW = 24  # the token budget of every run and evaluation in this chapter (and chapter 11)
q = task.held_out_problems(1)[0]
a, b = (int(x) for x in q.prompt[:-1].split("+"))
for completion in (task.working_for(a, b) + q.answer + "</s>", q.answer + "</s>", "1+1=2;" + q.answer + "</s>",
                   task.working_for(a, b) + "000</s>"):
    print(f"{q.prompt}{completion:<28} reward {task.reward(q.prompt, completion):.0f}")
print("longest reference completion:", task.max_completion_tokens, "tokens")

# %% [markdown]
# The supervised model is trained once and saved (chapter 11 starts from it too). It takes about a
# minute and a half on two CPU cores, the only step of the chapter that uses both; a second run of the
# chapter loads it.

# %%
SFT_CHECKPOINT = rl.runs_dir() / "checkpoints" / "ch10_scratchpad_sft"
sft_policy, _, loaded = rl.lm.load_or_train_sft(tok, task, rl.lm.SFTConfig(seed=0), checkpoint=SFT_CHECKPOINT,
                                                model_seed=0, num_threads=2)
sft_policy.to(device)
print("supervised model:", "loaded" if loaded else "trained here", "|", rl.lm.count_parameters(sft_policy), "parameters")
held_out = task.held_out_problems(rl.by_size(small=200, full=1000))


def evaluate(policy, num_samples=16, k=8):
    return rl.evaluate(policy, tok, held_out, reward_fn=task.reward, num_samples=num_samples, k=k,
                       max_new_tokens=MAX_NEW, seed=1)


def show(name, result):
    keys = ("greedy_accuracy", "pass@1", "pass@8", "length_correct", "length_wrong")
    print(f"{name:<12}" + "  ".join(f"{k} {result[k]:.3f}" for k in keys if k in result))


before = evaluate(sft_policy)
show("before RL", before)

# %% [markdown]
# Sampled pass@1 is low while greedy accuracy and pass@8 are high: the right answer is usually the
# favourite, with much of the mass on its one-digit neighbours, as in chapter 8. Right and wrong
# answers have about the same length, a mix of working and direct answers.

# %%
rl.claim("Sampled pass@1 is low", before["pass@1"], high=0.6)
rl.claim("greedy accuracy and pass@8 are high", min(before["greedy_accuracy"], before["pass@8"]), low=0.8)
rl.claim("about the same length", abs(before["length_correct"] - before["length_wrong"]), high=2.0)

# %% [markdown]
# ## 10.2 The length bias of the per-answer mean (Dr. GRPO)
#
# GRPO's loss (9.2) averages the per-token losses $\ell_{i,t}$ *within* each answer and then over the
# $B$ answers of the batch. Written as one weighted sum,
#
# $$\begin{gathered}L = \sum_{i,t} w_{i,t}\,\ell_{i,t}, \qquad
# w^{\text{GRPO}}_{i,t} = \frac{1}{B\,|o_i|}, \quad
# w^{\text{DAPO}}_{i,t} = \frac{1}{\sum_j |o_j|},\cr
# w^{\text{Dr.GRPO}}_{i,t} = \frac{1}{B\,L_{\max}}, \quad
# w^{\text{ScaleRL}}_{i,t} = \frac{1}{P\,N_p}.\end{gathered} \tag{10.1}$$
#
# At $\rho = 1$ the per-token loss is $\ell_{i,t} = -\hat A_i \log\pi_\theta(o_{i,t}\mid\cdot)$, so each token of
# answer $i$ is pushed with strength $w_{i,t}\hat A_i$. Under GRPO that is $\hat A_i/(B|o_i|)$: the
# *same* advantage is spread more thinly over a long answer. Liu et al. (2025, "Understanding
# R1-Zero-like training", arXiv:2503.20783) point out the two consequences. A right answer
# ($\hat A_i > 0$) is reinforced per token more strongly the shorter it is; a wrong answer
# ($\hat A_i < 0$) is penalised per token more weakly the longer it is. The per-answer mean prefers
# short right answers and tolerates long wrong ones. Their fix, Dr. GRPO ("GRPO done right"), divides
# by a constant, the budget $L_{\max}$, so that each token's weight no longer depends on its answer's
# length. DAPO divides by the batch's token count, also the same for every token. ScaleRL's
# prompt-level mean (chapter 11) weighs every prompt equally, and tokens equally within a prompt.
#
# The weights (10.1) are also the gradients $\partial L/\partial \ell_{i,t}$, which autograd confirms
# on a batch of answers with lengths 4, 8, 18 and 24:

# %%
lengths = torch.tensor([4, 8, 18, 24])
mask = torch.arange(MAX_NEW)[None, :] < lengths[:, None]  # (4, 24)
per_token_loss = torch.zeros(mask.shape, dtype=torch.float64, requires_grad=True)
aggregations = {
    "GRPO (per-answer mean)": lambda x: rl.seq_mean_token_mean(x, mask),
    "DAPO (token mean)": lambda x: rl.token_mean(x, mask),
    "Dr. GRPO (÷ B·L_max)": lambda x: rl.fixed_length_mean(x, mask, max_length=MAX_NEW),
    "ScaleRL (prompt mean, G=2)": lambda x: rl.prompt_mean(x, mask, group_size=2),
}
modes = ["seq_mean_token_mean", "token_mean", "fixed_length_mean", "prompt_mean"]
fig, ax = plt.subplots(figsize=(7, 3), dpi=80)
for (name, aggregate), mode in zip(aggregations.items(), modes):
    (grad,) = torch.autograd.grad(aggregate(per_token_loss), per_token_loss)
    weights = rl.per_token_weights(mask, mode, max_length=MAX_NEW, group_size=2, dtype=torch.float64)
    assert torch.allclose(grad, weights), name
    ax.plot(lengths, grad[:, 0], "o-", label=name)
    print(f"{name:<28} weight of one token, answers of 4/8/18/24 tokens: {np.round(grad[:, 0].numpy(), 4)}")
ax.set_xlabel("answer length |o_i| (tokens)"); ax.set_ylabel("weight of each of its tokens")
ax.set_title("How hard each token is pushed, by aggregation", fontsize=10); ax.legend(fontsize=8.5);

# %% [markdown]
# Only the per-answer mean gives a token of a 4-token answer six times the weight of a token of a
# 24-token one. Summed over the answer, GRPO gives every answer the same total push, whatever its
# length; DAPO's token mean and Dr. GRPO's fixed divisor give every token the same weight, so an
# answer's push is proportional to its length. ScaleRL's prompt mean sits in between: a token's weight
# is one over its *group's* token count, so it depends on the lengths of the answers in its group
# (here the group of the 4- and 8-token answers weighs each token 3.5 times as much as the group of
# the 18- and 24-token ones), but not on its own answer's length alone.

# %%
grpo_weights = rl.per_token_weights(mask, "seq_mean_token_mean")
rl.claim("six times the weight", grpo_weights[0, 0] / grpo_weights[3, 0], 6.0, rel=1e-6)
scalerl_weights = rl.per_token_weights(mask, "prompt_mean", group_size=2)
rl.claim("3.5 times as much as the group", scalerl_weights[0, 0] / scalerl_weights[3, 0], 3.5, rel=1e-6);

# %% [markdown]
# **A constant divisor is the sequence-level policy gradient.** Dividing the sum over all the batch's
# tokens by a constant ($B\,L_{\max}$ for Dr. GRPO) gives
# $\frac{1}{B L_{\max}}\sum_i \hat A_i \sum_t \nabla\log\pi(o_{i,t}\mid q, o_{i,<t}) = \frac{1}{B L_{\max}}\sum_i \hat A_i\,\nabla\log\pi(o_i\mid q)$:
# the score-function estimator of chapter 2 for whole answers, times a constant. DAPO's divisor, the
# batch's token count, is also shared by every token of a batch; it changes only from batch to batch.
# So the heights of the two flat lines in the figure are not two step sizes: Adam divides each
# parameter's step by a running estimate of its gradient's scale, so a constant factor on the loss
# leaves its steps as they were (up to its small $\epsilon$). What Adam does not undo is the *relative*
# weight of tokens in answers of different lengths, the one thing the per-answer mean changes.

# %% [markdown]
#
# **The difficulty bias of the standard deviation.** The second normalisation Dr. GRPO removes is
# the division by the group's std in (9.1). A group of 8 with one wrong answer has a std of
# $\sqrt{7/64} = 0.33$, so its advantages are three times larger than the same rewards centred
# without scaling; a half-right group has std 0.5, so its advantages are only twice as large. The
# division therefore shifts weight, relative to the centred rewards, towards the questions the model
# has nearly mastered (or nearly never solves). They still get a smaller total update than a
# half-right group, only less so:

# %%
groups = {"7 of 8 right": [1.0] * 7 + [0.0], "4 of 8 right": [1.0] * 4 + [0.0] * 4, "1 of 8 right": [1.0] + [0.0] * 7}
push = {}
for name, rewards in groups.items():
    r = torch.tensor(rewards, dtype=torch.float64)
    grpo_adv, dr_adv = rl.group_relative_advantages(r, 8), rl.group_relative_advantages(r, 8, scale="none")
    push[name] = (grpo_adv.abs().sum().item(), dr_adv.abs().sum().item())
    print(f"{name}: std {r.std(unbiased=False):.3f} | sum of |Â|: GRPO {push[name][0]:.2f}, Dr. GRPO {push[name][1]:.2f}")
grpo_share = push["7 of 8 right"][0] / push["4 of 8 right"][0]
dr_share = push["7 of 8 right"][1] / push["4 of 8 right"][1]
print(f"push on a 7-of-8 group relative to a half-right one: GRPO {grpo_share:.2f}, Dr. GRPO {dr_share:.2f}")

# %% [markdown]
# With rewards in $\{0, 1\}$ and a share $p$ of right answers, the summed $|\hat A|$ of a group is
# $2Gp(1-p)$ for the centred rewards and $2G\sqrt{p(1-p)}$ after dividing by the std. A group with 7
# of 8 right gets 0.66 of the push of a half-right group under GRPO, but only 0.44 of it under
# Dr. GRPO: dividing by the std up-weights the nearly solved (and the nearly hopeless) questions
# relative to the unsure ones, though their push stays below a half-right group's under both. The
# centred rewards give the most weight where the policy is most unsure, which is where one sample
# tells it most ($\operatorname{Var}(r) = p(1-p)$ is largest at $p = 1/2$).

# %%
rl.claim("0.66 of the push of a half-right group", grpo_share, 0.66, abs=0.005)
rl.claim("only 0.44 of it", dr_share, 0.44, abs=0.005)

# %% [markdown]
# **The experiment.** Train from the same supervised model twice, 40 steps of 32 prompts × 8
# answers with two minibatches per generation, once with GRPO (chapter 9's loss, $\beta = 0$; we
# call this configuration `grpo_b0`) and once with Dr. GRPO (`advantage_estimator="dr_grpo",
# loss_aggregation="fixed_length_mean"`; `dr_grpo`), and follow the length of the right and of the
# wrong answers in each batch. These are two configurations of the benchmark of §10.3, which runs
# them on ten paired seeds.

# %%
RUN = dict(num_steps=rl.by_size(small=40, full=150), prompts_per_step=32, num_minibatches=2, max_new_tokens=MAX_NEW, seed=0)
runs, policies = {}, {}
for name, config in {
    "grpo_b0": rl.GRPOConfig(**RUN),
    "dr_grpo": rl.GRPOConfig.recipe("dr_grpo", **RUN),
}.items():
    policies[name] = copy.deepcopy(sft_policy)
    runs[name] = rl.train_grpo(policies[name], tok, task, config)
    print(f"{name}: {runs[name].wall_seconds:.0f} s")
after = {name: evaluate(p) for name, p in policies.items()}
show("before RL", before)
for name, result in after.items():
    show(name, result)

# %%
def smooth(x, width=5):
    x = np.asarray(x, dtype=float)
    return np.convolve(x, np.ones(width) / width, mode="valid")


fig, axes = plt.subplots(2, 2, figsize=(8.4, 5.6), dpi=80)
fig.delaxes(axes[1, 1])
axes = axes.ravel()[:3]  # three panels in a 2 × 2 grid
for name, history in runs.items():
    axes[0].plot(smooth(history["reward"]), label=name)
    axes[1].plot(smooth(history["length_correct"]), label=name)
    axes[2].plot(smooth(history["length_wrong"]), label=name)
for ax, title in zip(axes, ("Training reward", "Length of right answers", "Length of wrong answers")):
    ax.set_title(title, fontsize=10); ax.set_xlabel("GRPO step (5-step mean)")
axes[0].set_ylabel("mean reward"); axes[1].set_ylabel("tokens"); axes[2].set_ylabel("tokens")
axes[0].legend(fontsize=9); plt.tight_layout();

# %% [markdown]
# What happened in this run (one seed). Under `dr_grpo` the model learned to show its working: by
# the end its right answers are several tokens longer than before RL, on their way to the length of
# the reference working (16 to 20 tokens with the answer and EOS), many wrong ones carry working too,
# and held-out pass@1 rose by more than 35 points. Under
# `grpo_b0` a single run can go either way: the model may settle on answering directly (its right
# answers shrink towards the direct answer's length), or find the working too, and
# the ten seeds of the benchmark below show both outcomes. The next cell prints which happened
# here; a run on another CPU starts from slightly different numbers and may land on the other side,
# which is why the seeds below, not this run, carry the comparison.
#
# This is the first half of Dr. GRPO's argument, seen from the other side. The per-answer mean gives
# a short right answer more push per token than a long one; here the worked answers, which are long,
# are the ones that are right more often, and the bias works against them, so the model may never
# commit to working. Remove the bias and the model can find out that working pays. The second half
# (wrong answers growing long under the per-answer mean) did not show in this run: the length of
# `grpo_b0`'s wrong answers did not grow from before RL (the next cell prints the change), and almost
# no completion ran into the 24-token budget. One run cannot settle it either way; the seeds below
# test it.

# %%
grpo_after, dr_after = after["grpo_b0"], after["dr_grpo"]
found = grpo_after["length_correct"] >= 16.0
print(f"this run: GRPO's right answers {grpo_after['length_correct']:.1f} tokens, pass@1 {grpo_after['pass@1']:.3f} -> "
      f"GRPO {'found the working too' if found else 'kept answering directly'}; "
      f"Dr. GRPO {dr_after['length_correct']:.1f} tokens, pass@1 {dr_after['pass@1']:.3f}")
rl.claim("learned to show its working", dr_after["length_correct"] - before["length_correct"], low=3.0)
rl.claim("rose by more than 35 points", dr_after["pass@1"] - before["pass@1"], low=0.35)
print(f"length of grpo_b0's wrong answers: before RL {before['length_wrong']:.1f}, after {grpo_after['length_wrong']:.1f} "
      f"tokens (change {grpo_after['length_wrong'] - before['length_wrong']:+.1f})")
rl.claim("wrong answers did not grow from before RL", grpo_after["length_wrong"] - before["length_wrong"], high=0.0)
rl.claim("almost no completion ran into the 24-token budget", max(float(np.max(h["truncated_fraction"])) for h in runs.values()),
         high=0.02)
assert grpo_after["pass@1"] - before["pass@1"] >= 0.25, "GRPO should lift held-out pass@1 by 25 points"

# %% [markdown]
# **Over ten paired seeds.** One run is one draw. The benchmark of §10.3 ran `grpo_b0` and `dr_grpo`
# from ten supervised models (trained with one thread, so they are not the model above), seed $k$ of
# both starting from model $k$ with the same prompts, together with Dr. GRPO's two changes one at a
# time: `grpo_b0_no_std` (centred rewards, no division by the std) and `grpo_b0_fixed_length` (the
# per-answer mean replaced by the fixed divisor $B\,L_{\max}$). Per seed, the length of the right
# answers and held-out pass@1 (300 questions × 16 samples):

# %%
bench = rl.benchmark_results("grpo_variants")
per_seed, n_seeds = bench["per_seed"], len(bench["seeds"])
DR_PARTS = ["grpo_b0", "grpo_b0_no_std", "grpo_b0_fixed_length", "dr_grpo"]
print(f"{'seed':>4}" + "".join(f"{name:>24}" for name in DR_PARTS) + "\n" + " " * 4 + "  len right / pass@1" * len(DR_PARTS))
for i, seed in enumerate(bench["seeds"]):
    print(f"{seed:>4}" + "".join(f"{per_seed[n]['len_right'][i]:>15.1f} / {per_seed[n]['pass@1'][i]:.3f}" for n in DR_PARTS))
worked = {name: int(np.sum(np.asarray(per_seed[name]["len_right"]) >= 16.0)) for name in DR_PARTS}
print("seeds whose right answers average ≥ 16 tokens (the working):", worked)
dr_vs_grpo = {m: rl.compare(per_seed["dr_grpo"][m], per_seed["grpo_b0"][m], names=("dr_grpo", "grpo_b0"))
              for m in ("pass@1", "len_right", "len_wrong")}
dr_parts = {name: rl.compare(per_seed[name]["pass@1"], per_seed["grpo_b0"]["pass@1"], names=(name, "grpo_b0"))
            for name in ("grpo_b0_no_std", "grpo_b0_fixed_length")}
for m, c in dr_vs_grpo.items():
    print(f"{m:<10}", c)
for c in dr_parts.values():
    print("pass@1    ", c)
fixed_vs_dr = rl.compare(per_seed["grpo_b0_fixed_length"]["pass@1"], per_seed["dr_grpo"]["pass@1"],
                         names=("grpo_b0_fixed_length", "dr_grpo"))
wrong_vs_before = rl.compare(per_seed["grpo_b0"]["len_wrong"], bench["before"]["len_wrong"], names=("grpo_b0", "before RL"))
print("pass@1    ", fixed_vs_dr)
print("len_wrong ", wrong_vs_before)

# %% [markdown]
# The seeds settle what one run could not. Over ten paired seeds `dr_grpo` beats `grpo_b0` on
# held-out pass@1 (the interval printed above lies above zero), and its right answers are longer: it
# found the working (right answers averaging at least 16 tokens) on nine of the ten seeds, `grpo_b0` on three.
# Which of its two changes does it? Dropping the std alone (`grpo_b0_no_std`): no difference detected
# at this scale. Replacing the per-answer mean by the fixed divisor alone (`grpo_b0_fixed_length`)
# beats `grpo_b0`, and between it and `dr_grpo` no difference detected at this scale either. So the
# length bias of the per-answer mean carries all of the effect that ten seeds resolve here (the
# interval between the fixed divisor alone and `dr_grpo` still leaves room for up to about two points);
# the std's difficulty bias, real as it is in the weights, shows no effect that ten seeds can detect.
#
# Wrong answers tell the same story from the other side. Those of `dr_grpo` are longer than those of
# `grpo_b0`, because many of them carry working too; those of `grpo_b0` show no difference detected
# from the supervised models' wrong answers (paired by seed). The second half of Dr. GRPO's argument,
# wrong answers *growing* under the per-answer mean, does not show at this scale.

# %%
rl.claim_comparison("`dr_grpo` beats `grpo_b0` on held-out pass@1", dr_vs_grpo["pass@1"], ">")
rl.claim_comparison("its right answers are longer", dr_vs_grpo["len_right"], ">")
rl.claim("on nine of the ten seeds", worked["dr_grpo"], 9, abs=0)
rl.claim("`grpo_b0` on three", worked["grpo_b0"], 3, abs=0)
rl.claim_comparison("Dropping the std alone (`grpo_b0_no_std`): no difference detected at this scale",
                    dr_parts["grpo_b0_no_std"], "none")
rl.claim_comparison("the fixed divisor alone (`grpo_b0_fixed_length`) beats `grpo_b0`", dr_parts["grpo_b0_fixed_length"], ">")
rl.claim_comparison("between it and `dr_grpo` no difference detected at this scale", fixed_vs_dr, "none")
rl.claim("leaves room for up to about two points", max(-fixed_vs_dr.ci_low, fixed_vs_dr.ci_high), 0.02, abs=0.005)
rl.claim_comparison("Those of `dr_grpo` are longer than those of `grpo_b0`", dr_vs_grpo["len_wrong"], ">")
rl.claim_comparison("those of `grpo_b0` show no difference detected", wrong_vs_before, "none");

# %% [markdown]
# **The entropy of these runs.** `train_grpo` logs the mean token entropy of the sampled answers at
# every step: the entropy of the next-token distribution, averaged over every token of every answer.
# The figure shows it for this chapter's two runs. Chapter 15 measures it on ten paired seeds at these
# settings (`benchmarks/entropy_dynamics.py`, §15.2): `dr_grpo` ends with a lower per-token mean entropy
# than `grpo_b0`. Read that number for what it averages. A worked answer is long, but once the model
# has started it, each column's digits follow from the prompt and the previous columns, so most of its
# tokens carry almost no choice; adding some fourteen such tokens to an answer lowers the per-token
# mean whether or not the choice left at the answer's digits changed. The per-token mean therefore
# mixes the composition of the answers with how sure the policy is where it matters. To separate the
# two, `benchmarks/answer_entropy.py` trains both conditions again on the same ten seeds and splits the
# entropy of each trained policy, on its own held-out samples, by position: the answer (its three digits
# and EOS) and the working before it. At the answer's positions too, `dr_grpo` ends with a lower entropy
# than `grpo_b0` (printed below, with the working's and the share of answers that show working). So the
# fall is not only composition: where the answer is decided, `dr_grpo`'s policy is surer as well.

# %%
fig, ax = plt.subplots(figsize=(5.5, 2.8), dpi=80)
for name, history in runs.items():
    ax.plot(smooth(history["entropy"]), label=name)
ax.set_title("Mean token entropy of the sampled answers (this run)", fontsize=9)
ax.set_xlabel("GRPO step (5-step mean)"); ax.set_ylabel("nats per token"); ax.legend(fontsize=9)
plt.tight_layout();
dynamics = rl.benchmark_results("entropy_dynamics")
final_entropy = {c: np.array([r["final_entropy"] for r in sorted(dynamics["runs"], key=lambda r: r["seed"])
                              if r["condition"] == c]) for c in ("grpo_b0", "dr_grpo")}
entropy_dr = rl.compare(final_entropy["dr_grpo"], final_entropy["grpo_b0"], names=("dr_grpo final entropy", "grpo_b0's"))
print(f"ten paired seeds ({dynamics['command']}):", entropy_dr)
rl.claim_comparison("`dr_grpo` ends with a lower per-token mean entropy", entropy_dr, "<")
by_position = rl.benchmark_results("answer_entropy")
position_runs = {c: sorted((r for r in by_position["runs"] if r["condition"] == c), key=lambda r: r["seed"])
                 for c in ("grpo_b0", "dr_grpo")}
position_cmp = {key: rl.compare([r[key] for r in position_runs["dr_grpo"]], [r[key] for r in position_runs["grpo_b0"]],
                                names=(f"dr_grpo {key}", "grpo_b0's"))
                for key in ("entropy_answer", "entropy_working", "worked_share")}
print(f"ten paired seeds ({by_position['command']}):")
for comparison in position_cmp.values():
    print(" ", comparison)
rl.claim_comparison("At the answer's positions too, `dr_grpo` ends with a lower entropy", position_cmp["entropy_answer"], "<")

# %% [markdown]
# ## 10.3 DAPO's five changes, one at a time
#
# DAPO (Yu et al. 2025, arXiv:2503.14476) keeps GRPO's advantage and changes five other things. Each
# is one field of `GRPOConfig`:
#
# | change | what it does | `GRPOConfig` |
# | --- | --- | --- |
# | clip-higher | a wider upper band $[1-\varepsilon_{\text{low}}, 1+\varepsilon_{\text{high}}]$, 0.2 / 0.28, so unlikely tokens can grow | `clip_eps_high=0.28` |
# | token-level loss | the DAPO weights of (10.1) | `loss_aggregation="token_mean"` |
# | overlong filtering | answers cut off by the budget are masked out of the loss | `overlong_filter=True` |
# | soft overlong punishment | a penalty rising linearly from 0 to −1 over the last $L_{\text{cache}}$ tokens of the budget | `overlong_cache_length=4` (DAPO's 4,096-token zone of a 20,480 budget, a fifth, scaled to our 24 tokens) |
# | dynamic sampling | resample prompts until every group in the batch has mixed rewards | `dynamic_sampling=True`, `max_sampling_rounds` |
#
# and it drops the KL penalty ($\beta = 0$). Dynamic sampling costs extra generation: the loop counts
# every completion it generates, including those of the groups it throws away. One step with and
# without it:

# %%
probe = copy.deepcopy(policies["grpo_b0"])  # a model that already solves many prompts: many groups are all right
for dynamic in (False, True):
    config = rl.GRPOConfig(**{**RUN, "num_steps": 1}, dynamic_sampling=dynamic, max_sampling_rounds=4, lr=1e-12)
    h = rl.train_grpo(copy.deepcopy(probe), tok, task, config, progress=False)
    kept = h["kept_groups"][0] * config.group_size
    print(f"dynamic_sampling={dynamic!s:5}: groups with no signal among those sampled {h['frac_zero_variance_groups'][0]:.2f}, "
          f"completions generated {h['completions_generated'][0]:.0f}, in the update {kept:.0f}, "
          f"generated per kept completion {h['completions_generated'][0] / kept:.2f}")
    if dynamic:
        assert h["frac_zero_variance_groups"][0] > 0 and h["sampling_rounds"][0] >= 2
        dyn_cost = h["completions_generated"][0] / kept

# %% [markdown]
# With this half-trained model, a large share of groups are all right and carry no gradient; dynamic
# sampling replaces them, and pays for it in extra completions per completion it trains on.
#
# **The published ablation and ours.** DAPO's paper adds the parts one at a time to GRPO on a 32B
# model (Qwen2.5-32B) and reports AIME 2024 accuracy (avg@32): naive GRPO 30%, + overlong filtering
# 36%, + clip-higher 38%, + soft overlong punishment 41%, + token-level loss 42%, + dynamic sampling
# 50%. The benchmark `benchmarks/grpo_variants.py` runs the same cumulative ablation on our scratchpad
# task over ten paired seeds: seed $k$ of every row starts from the same supervised model (trained
# with seed $k$), draws the same first prompts and is evaluated on the same 300 held-out questions
# with the same sampling seed, so a per-seed difference between two rows cancels the luck they share
# (`rl.compare`). Every run has a budget of 10,240 generated completions (so dynamic sampling pays for
# its resampling; a step is never cut short, so a method that resamples can overshoot by part of a
# step, which the `generated` column shows) and takes two minibatches per generation (so the ratio
# moves off 1 and clip-higher can act). Each row has its own name, and the last row is exactly the
# DAPO recipe. Its saved result (mean and 95 % confidence interval over the seeds):

# %%
ABLATION = ["grpo_b0", "dapo_1_overlong_filter", "dapo_2_clip_higher", "dapo_3_soft_overlong", "dapo_4_token_mean", "dapo"]
DAPO_PAPER = dict(zip(ABLATION, (30, 36, 38, 41, 42, 50)))
summary, per_seed = bench["summary"], bench["per_seed"]


def ci(row, digits=3):
    mean, low, high = row
    return f"{mean:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"


print(f"budget {bench['budget']} completions per run, {n_seeds} paired seeds; before RL pass@1 "
      f"{ci(rl.mean_ci(bench['before']['pass@1']))}")
print(f"{'':24}{'paper AIME':>11}{'pass@1':>23}{'pass@8':>23}{'len right':>20}{'len wrong':>20}{'generated':>10}")
for name in ABLATION:
    row = summary[name]
    print(f"{name:<24}{DAPO_PAPER[name]:>10}%{ci(row['pass@1']):>23}{ci(row['pass@8']):>23}{ci(row['len_right'], 1):>20}"
          f"{ci(row['len_wrong'], 1):>20}{row['completions'][0]:>10.0f}")
steps = {b: rl.compare(per_seed[b]["pass@1"], per_seed[a]["pass@1"], names=(b, a)) for a, b in zip(ABLATION, ABLATION[1:])}
print("\neach part's effect on held-out pass@1 (the row minus the row above it, paired over seeds):")
for comparison in steps.values():
    print(" ", comparison)

# %%
fig, axes = plt.subplots(2, 1, figsize=(8.4, 6.8), dpi=80)
means = np.array([summary[n]["pass@1"][0] for n in ABLATION])
errors = np.array([[summary[n]["pass@1"][0] - summary[n]["pass@1"][1], summary[n]["pass@1"][2] - summary[n]["pass@1"][0]]
                   for n in ABLATION]).T
x = np.arange(len(ABLATION))
axes[0].bar(x, means, yerr=errors, capsize=3, color="tab:blue", alpha=0.8, label="ours: held-out pass@1 (95 % CI)")
axes[0].axhline(np.mean(bench["before"]["pass@1"]), color="gray", lw=1, ls=":", label="ours before RL")
axes[0].set_ylabel("our held-out pass@1"); axes[0].set_title("DAPO's parts added one at a time", fontsize=11)
paper_axis = axes[0].twinx()  # the paper's numbers on an axis of their own: another model, task and metric
paper_axis.plot(x, [DAPO_PAPER[n] - DAPO_PAPER["grpo_b0"] for n in ABLATION], "ko--",
                label="DAPO paper (32B model): AIME'24 gain over naive GRPO, points (right axis)")
paper_axis.set_ylabel("paper: gain in AIME'24 avg@32, points"); paper_axis.set_ylim(-2, 22)
handles = axes[0].get_legend_handles_labels()[0] + paper_axis.get_legend_handles_labels()[0]
axes[0].legend(handles, [h.get_label() for h in handles], fontsize=8.5, loc="lower right")
diffs = [steps[b] for b in ABLATION[1:]]
axes[1].errorbar(x[1:], [c.mean_diff for c in diffs],
                 yerr=[[c.mean_diff - c.ci_low for c in diffs], [c.ci_high - c.mean_diff for c in diffs]], fmt="o", capsize=4)
axes[1].axhline(0, color="gray", lw=1)
axes[1].set_ylabel("change in pass@1 (paired)"); axes[1].set_title("Each part's effect, 95 % CI over seeds", fontsize=11)
for ax in axes:
    ax.set_xticks(x); ax.set_xticklabels(ABLATION, rotation=20, fontsize=9, ha="right")
plt.tight_layout();

# %% [markdown]
# What survives at our scale. For each of the first three parts (overlong filtering, clip-higher, the
# soft punishment) no difference detected at this scale in pass@1: each paired interval printed above
# contains zero and reaches at most about two points to either side. The benchmark's training logs
# (printed below) show why the parts had little to act on. Almost nothing is truncated at a 24-token
# budget: in no run of the ablation did more than 0.2 % of the sampled completions hit it, so the two
# overlong parts had almost no completions to filter or punish. And clip-higher only changes the update
# of tokens whose ratio has moved past $1 + \varepsilon$: with two minibatches per generation, the clip
# zeroed the gradient of about 0.1 % of the loss tokens in `dapo_1_overlong_filter` (its mean over the
# steps and the seeds), so raising the upper bound could change little. Clip-higher did leave a trace in length: its right answers came out a little shorter,
# with a paired interval below zero that chapter 11 (§11.8) shows does not survive an adjustment for
# the number of tests it makes. The token-level loss stands out:
# `dapo_4_token_mean` beats `dapo_3_soft_overlong`, and its right answers lengthen to the reference
# working, which is §10.2's length bias removed once more (the same step as `grpo_b0_fixed_length`).
# Dynamic sampling, the largest step in the paper, does not help at an equal budget: `dapo` is
# slightly below `dapo_4_token_mean` (its interval lies just below zero), although it generated a few
# hundred completions more (a step is never cut short). What it saves in gradient steps it pays in
# generation; the paper did not hold the number of generated completions fixed. So the parts do not
# add up as on a 32B model with answers of up to 20k tokens; the part that matters here is the one
# that touches length, the thing our task lets the model control.

# %%
for name in ABLATION[1:4]:
    rl.claim_comparison("no difference detected at this scale in pass@1", steps[name], "none")
rl.claim("reaches at most about two points to either side",
         max(max(-steps[name].ci_low, steps[name].ci_high) for name in ABLATION[1:4]), 0.02, abs=0.005)
print("share of sampled completions cut at the token budget, per-run mean over the steps, largest run of each row:",
      {name: round(max(per_seed[name]["truncated_fraction"]), 4) for name in ABLATION})
print("clip fraction, per-run mean over the steps (mean [95 % CI] over the seeds):",
      {name: ci(summary[name]["clip_fraction"], 4) for name in ABLATION})
rl.claim("in no run of the ablation did more than 0.2 % of the sampled completions hit it",
         max(max(per_seed[name]["truncated_fraction"]) for name in ABLATION), high=0.002)
rl.claim("zeroed the gradient of about 0.1 % of the loss tokens in `dapo_1_overlong_filter`",
         summary["dapo_1_overlong_filter"]["clip_fraction"][0], 0.001, abs=0.0005)
clip_length = rl.compare(per_seed["dapo_2_clip_higher"]["len_right"], per_seed["dapo_1_overlong_filter"]["len_right"],
                         names=("dapo_2_clip_higher", "dapo_1_overlong_filter"))
print("len_right ", clip_length)
rl.claim_comparison("its right answers came out a little shorter", clip_length, "<")
rl.claim_comparison("`dapo_4_token_mean` beats `dapo_3_soft_overlong`", steps["dapo_4_token_mean"], ">")
rl.claim_comparison("its right answers lengthen", rl.compare(per_seed["dapo_4_token_mean"]["len_right"],
                    per_seed["dapo_3_soft_overlong"]["len_right"], names=("dapo_4_token_mean", "dapo_3_soft_overlong")), ">")
rl.claim("to the reference working", summary["dapo_4_token_mean"]["len_right"][0], low=15.0, high=20.0)
rl.claim_comparison("`dapo` is slightly below `dapo_4_token_mean`", steps["dapo"], "<")
rl.claim("generated a few hundred completions more", summary["dapo"]["completions"][0] - bench["budget"], low=100, high=999);

# %% [markdown]
#
# ## 10.4 Baselines: RLOO, MaxRL and the critic
#
# **RLOO** (Ahmadian et al. 2024, arXiv:2402.14740) uses the mean of the *other* $G-1$ rewards as each
# answer's baseline; chapter 9 showed this is $\frac{G}{G-1}(r_i - \bar r)$, the unbiased version of
# Dr. GRPO's centred reward.
#
# **MaxRL** (Maximum Likelihood RL, 2026, arXiv:2602.02710) starts from a different question: what
# should we maximise? RL for a verifiable reward maximises the success probability $p = \pi_\theta(\text{right} \mid q)$,
# which is pass@1. Supervised learning would maximise $\log p$. Expand the logarithm around $p = 1$
# in the failure probability $1 - p$:
#
# $$\log p = \log\bigl(1 - (1 - p)\bigr) = -\sum_{k=1}^{\infty} \frac{(1-p)^k}{k}. \tag{10.2}$$
#
# $(1-p)^k$ is the chance that $k$ independent attempts all fail, one minus pass@$k$. So
# $\nabla \log p = \sum_k \frac1k \nabla \text{pass@}k$: the likelihood gradient is a harmonic mixture
# of the gradients of pass@1, pass@2, pass@3, …, and ordinary RL keeps only the first term. The
# series is easy to check numerically:

# %%
for p in (0.9, 0.5, 0.1):
    terms = rl.log_likelihood_pass_at_k_terms(torch.tensor(p, dtype=torch.float64), 2000)
    print(f"p = {p}: log p = {np.log(p):+.6f}, sum of 2000 pass@k terms = {terms.sum():+.6f}, first term alone "
          f"{terms[0]:+.4f}")
    assert abs(terms.sum().item() - np.log(p)) < 1e-9

# %% [markdown]
# The first term alone is a poor stand-in for $\log p$ when $p$ is small: a hard question's likelihood
# gradient is dominated by the high-$k$ terms. MaxRL truncates the series after $T$ terms,
# $J^{(T)} = -\sum_{k=1}^{T} (1-p)^k/k$ (so $T = 1$ is RL and $T \to \infty$ is maximum likelihood), and
# shows that with $N$ samples of a question, $K$ of them right, the estimator
#
# $$\hat g = \frac1K \sum_{i=1}^{N} r_i\, \nabla \log \pi_\theta(o_i \mid q) \quad (K \ge 1), \qquad \hat g = 0 \quad (K = 0) \tag{10.3}$$
#
# is unbiased for $\nabla J^{(N)}$: more samples per question means both less variance and an
# objective closer to the likelihood. We can check this exactly for a one-parameter policy,
# $p = \sigma(\theta)$, by enumerating all $2^N$ outcome patterns of $N = 6$ samples:

# %%
theta = torch.tensor(-0.8, dtype=torch.float64, requires_grad=True)
p = torch.sigmoid(theta)
N = 6
(exact,) = torch.autograd.grad(rl.maxrl_truncated_objective(p, N), theta)
score_right = (1 - p).detach()  # d/dθ log σ(θ); wrong answers have r = 0 and drop out of (10.3)
expected = 0.0
for outcome in itertools.product([0, 1], repeat=N):
    K = sum(outcome)
    prob = float(p.detach()) ** K * (1 - float(p.detach())) ** (N - K)
    estimate = (sum(outcome) * score_right / K) if K else 0.0
    expected += prob * float(estimate)
print(f"p = {float(p.detach()):.3f}, N = {N}: E[ĝ] by enumeration {expected:.10f}; dJ^(N)/dθ by autograd {exact.item():.10f}")
assert abs(expected - exact.item()) < 1e-12

# %% [markdown]
# `rl.maxrl_advantages` writes (10.3) as a centred advantage, $(r_i - \hat r)/(N\hat r)$ with
# $\hat r = K/N$, so it drops into GRPO's loop: `GRPOConfig.recipe("maxrl")`. A success on a question
# the model rarely solves gets a large weight, which is the high-$k$ terms at work. Centring costs
# one term: subtracting the mean score is a zero-mean control variate only when groups with $K = 0$
# are kept, and they are zeroed, so the centred form is exactly unbiased for $\nabla J^{(N-1)}$, not
# $\nabla J^{(N)}$ (the library's tests check both by enumeration; for $N = 8$ the difference is the
# single $k = 8$ term).
#
# The claim to test: ordinary RL *sharpens* the policy, raising pass@1 at the cost of pass@$k$ for
# large $k$, while MaxRL keeps pass@$k$. A test of that needs room to lose: on the average held-out
# question the supervised model already succeeds within 16 samples almost surely, so pass@16 sits at
# its ceiling and no method can fall below it. We therefore measure on the *hard* questions: the
# quarter of the held-out questions on which the supervised model did worst in 32 samples. The
# questions are chosen with one set of samples and measured with a fresh one (another sampling seed),
# so the luck that made a question look hard does not come back as a gain after RL (regression to
# the mean). The unbiased pass@$k$ estimator (Chen et al. 2021, arXiv:2107.03374) is computed per
# question from 32 samples, for $k = 1 \dots 16$:

# %%
policies["maxrl"] = copy.deepcopy(sft_policy)
runs["maxrl"] = rl.train_grpo(policies["maxrl"], tok, task, rl.GRPOConfig.recipe("maxrl", **RUN))
SAMPLES, ks = 32, np.array([1, 2, 4, 8, 16])
chooser = rl.evaluate(sft_policy, tok, held_out, reward_fn=task.reward, num_samples=SAMPLES, k=1,
                      max_new_tokens=MAX_NEW, seed=3)
hard = [held_out[i] for i in np.argsort(chooser["num_correct"], kind="stable")[: len(held_out) // 4]]
per_question = {}  # name -> {k: pass@k of each hard question}
for name, policy in {"before RL": sft_policy, "grpo_b0": policies["grpo_b0"], "maxrl": policies["maxrl"]}.items():
    result = rl.evaluate(policy, tok, hard, reward_fn=task.reward, num_samples=SAMPLES, k=16,
                         max_new_tokens=MAX_NEW, seed=2)
    per_question[name] = {k: rl.pass_at_k(SAMPLES, np.asarray(result["num_correct"]), k) for k in ks}
curves = {name: np.array([per_question[name][k].mean() for k in ks]) for name in per_question}
print(f"{len(hard)} hard questions (of {len(held_out)}), {SAMPLES} fresh samples each")
for name, curve in curves.items():
    print(f"{name:<10}" + "  ".join(f"pass@{k} {v:.3f}" for k, v in zip(ks, curve)))
fig, ax = plt.subplots(figsize=(6, 3), dpi=80)
for name, curve in curves.items():
    ax.plot(ks, curve, "o-", label=name)
ax.set_xscale("log", base=2); ax.set_xlabel("k (samples per question)"); ax.set_ylabel("pass@k, hard questions")
ax.set_title("pass@k before and after RL, on the hard quarter", fontsize=10); ax.legend(fontsize=9);

# %% [markdown]
# Both RL runs raise pass@1 on the hard questions a long way (paired over the questions; one
# training run each, so these intervals cover which questions and samples were drawn, not the luck of
# training). Even on the hard quarter, though, the supervised model already sits at its ceiling by
# $k = 16$, and the RL models sit there with it: agreement at a ceiling tests nothing (these
# questions are too easy for 16 samples to tell sharpening from its absence), so the sharpening
# claim cannot be tested at large $k$ on this task and this model. Where there is
# room (the largest $k$ printed, at which the supervised model is still below 0.95), GRPO's pass@$k$
# is above the supervised model's, but that is no test either: at so small a $k$ the large gain in
# pass@1 carries pass@$k$ up with it whether or not the policy has narrowed. This task cannot test the
# sharpening claim. Sharpening shows as a crossover at large $k$, where the model before RL solves
# questions that the model after RL no longer does: Yue et al. (2025, arXiv:2504.13837) find it on
# pretrained models, while ProRL (Liu et al. 2025, arXiv:2505.24864) reports that prolonged RL
# training widened pass@$k$ instead. Chapter 15 (§15.6) tests the question on a harder split of this
# task, over ten paired seeds (`benchmarks/passk_after_rl.py`).
#
# MaxRL against GRPO is a question one run each cannot answer: the cell prints their paired difference
# over the hard questions in this one pair of runs, but which of the two training runs got lucky is
# not in that interval, and on
# another machine (another float order, so other runs) the sign of a difference of a few points can
# change. The benchmark of §10.3 trained both from ten supervised models on paired seeds, at this
# chapter's budget of 10,240 completions: over those seeds MaxRL's held-out pass@1 is higher than
# GRPO's, by about three points (the interval is printed below; chapter 11 puts it beside the rest of the
# family).

# %%
k16 = list(ks).index(16)
room = [k for k, v in zip(ks, curves["before RL"]) if v < 0.95]
k_room = max(room)
print(f"largest k with room (supervised model's pass@k < 0.95): {k_room}")
rl.claim("already sits at its ceiling by $k = 16$", curves["before RL"][k16], low=0.99)
gain = {k: {name: rl.compare(per_question[name][k], per_question["before RL"][k], names=(name, "before RL"), unit="questions")
            for name in ("grpo_b0", "maxrl")} for k in (1, k_room)}
maxrl_vs_grpo = {k: rl.compare(per_question["maxrl"][k], per_question["grpo_b0"][k], names=("maxrl", "grpo_b0"),
                               unit="questions") for k in (1, k_room)}
for k in (1, k_room):
    print(f"pass@{k}:", *gain[k].values(), maxrl_vs_grpo[k], sep="\n  ")
for name in ("grpo_b0", "maxrl"):
    rl.claim_comparison("Both RL runs raise pass@1 on the hard questions a long way", gain[1][name], ">")
rl.claim_comparison("GRPO's pass@$k$ is above the supervised model's", gain[k_room]["grpo_b0"], ">")
variants = rl.benchmark_results("grpo_variants")["per_seed"]
maxrl_over_seeds = rl.compare(variants["maxrl"]["pass@1"], variants["grpo_b0"]["pass@1"], names=("maxrl", "grpo_b0"))
print("held-out pass@1 over the benchmark's ten paired seeds:", maxrl_over_seeds)
rl.claim_comparison("over those seeds MaxRL's held-out pass@1 is higher than GRPO's", maxrl_over_seeds, ">")
rl.claim("by about three points", maxrl_over_seeds.mean_diff, 0.03, abs=0.005)

# %% [markdown]
# **PPO with a critic.** GRPO's group baseline replaced PPO's learned value function $V(s)$. Nothing
# stops us from putting the critic back: a copy of the GPT-2 with a scalar head, trained to predict
# the final reward from every prefix, and advantages from GAE over tokens (chapter 4) with
# $\gamma = 1$, $\lambda = 0.95$ (`GRPOConfig.recipe("ppo")`, after Ouyang et al. 2022,
# arXiv:2203.02155). One difference from InstructGPT: there the KL penalty is part of the per-token
# reward, so GAE and the critic see it; the recipe here adds $\beta\,k_3$ to the loss, as GRPO does
# (chapter 12, §12.4, compares the two placements and the optima they reach). What it costs on our model:

# %%
critic = rl.lm.build_critic(sft_policy)
n_policy, n_critic = rl.lm.count_parameters(sft_policy), rl.lm.count_parameters(critic)
# CPU seconds of this process (one thread), not wall seconds: other jobs on the machine do not move them
cpu_start = time.process_time()
ppo_run = rl.train_grpo(copy.deepcopy(sft_policy), tok, task, rl.GRPOConfig.recipe("ppo", **{**RUN, "num_steps": 10}),
                        progress=False)
ppo_cpu_seconds = time.process_time() - cpu_start
cpu_start = time.process_time()
grpo_run = rl.train_grpo(copy.deepcopy(sft_policy), tok, task, rl.GRPOConfig(**{**RUN, "num_steps": 10}), progress=False)
grpo_cpu_seconds = time.process_time() - cpu_start
# (PPO's recipe has β = 0.04, GRPO's chapter-9 default β = 0: this cell times a step, it does not compare accuracy)
seconds_ratio = ppo_cpu_seconds / grpo_cpu_seconds
print(f"parameters: policy {n_policy:,}, critic {n_critic:,} (×{(n_policy + n_critic) / n_policy:.2f} in all, "
      f"plus the critic's AdamW state: 2 more floats per parameter)")
print(f"10 steps, CPU seconds: PPO with the critic {ppo_cpu_seconds:.1f} s, grpo_b0 {grpo_cpu_seconds:.1f} s "
      f"(×{seconds_ratio:.2f}); value loss {ppo_run['value_loss'][0]:.3f} → {ppo_run['value_loss'][-1]:.3f}")
assert n_critic > n_policy and ppo_run["value_loss"][-1] < ppo_run["value_loss"][0]

# %% [markdown]
# The critic doubles the parameters (and the optimiser state, and the memory for activations) and
# adds a forward and a backward pass of a second network to every step: in the timing above the
# run with the critic took longer than the run without (the ratio of CPU seconds is printed; it is one
# timing on this machine, not a profile, so we draw nothing finer from it). The value loss falls, so the critic learns something:
# from each prefix it predicts the chance that the answer ends right. What that buys in accuracy per
# generated completion, against the group baseline that is free, is a row of the family table in
# chapter 11.

# %%
rl.claim("doubles the parameters", (n_policy + n_critic) / n_policy, 2.0, abs=0.01)
rl.claim("the run with the critic took longer than the run without", seconds_ratio, low=1.0);

# %% [markdown]
# ## Summary
#
# * A loss aggregation decides how hard each token is pushed (10.1). Only GRPO's per-answer mean makes
#   a token's weight depend on its own answer's length (a 4-token answer's tokens weigh six times a
#   24-token answer's); DAPO's token mean and Dr. GRPO's fixed divisor weigh every token alike, and
#   ScaleRL's prompt mean makes it depend on the total length of its group.
# * Dividing the advantages by the group's std up-weights groups that are nearly all right or all wrong
#   relative to the unsure ones ($2G\sqrt{p(1-p)}$ instead of $2Gp(1-p)$ in all), though a half-right
#   group still gets the largest push; Dr. GRPO drops it.
# * On a task whose answers may show their working, Dr. GRPO let the model discover that working pays
#   (long right answers on nine of the ten seeds, held-out pass@1 above GRPO's with a paired interval above
#   zero), while GRPO's length bias held it back on most seeds. Of Dr. GRPO's two changes the
#   fixed divisor alone carries the effect that ten seeds resolve. For the other half of the published
#   claim, wrong answers growing long under GRPO, no difference detected at this scale in their length
#   against the supervised models' (with a 24-token budget).
# * DAPO's five changes are five `GRPOConfig` fields; dynamic sampling costs extra generated
#   completions per completion trained on, which a comparison at a fixed budget must count. At our
#   scale, over ten paired seeds (§10.3), the token-level loss raised pass@1 and dynamic sampling, at
#   the same budget of generated completions, lowered it slightly; for the other three parts no
#   difference detected at this scale. The parts do not add up as they do in the paper.
# * $\log p = -\sum_k (1-p)^k/k$: the likelihood gradient is a harmonic mixture of pass@$k$ gradients.
#   MaxRL's estimator is unbiased for the first $N$ terms (checked by exact enumeration; its centred
#   form in the training loop for the first $N - 1$), so more samples per question means an objective
#   closer to the likelihood.
# * A critic on the language model doubles the parameters and the optimiser state and slows every
#   step (chapter 11 compares the two over paired seeds, at the same budget and the same β).

# %%
rl.claim_comparison("held-out pass@1 above GRPO's with a paired interval above", dr_vs_grpo["pass@1"], ">")
rl.claim("held it back on most seeds", n_seeds - worked["grpo_b0"], low=n_seeds // 2 + 1)
rl.claim("long right answers on nine of the ten seeds", worked["dr_grpo"], 9, abs=0)
rl.claim_comparison("no difference detected at this scale in their length", wrong_vs_before, "none")
rl.claim_comparison("the token-level loss raised pass@1", steps["dapo_4_token_mean"], ">")
rl.claim_comparison("lowered it slightly", steps["dapo"], "<")
for name in ABLATION[1:4]:
    rl.claim_comparison("for the other three parts no difference detected at this scale", steps[name], "none")

# %% [markdown]
# ## Exercises
#
# 1. *(By hand.)* A batch holds two answers, of 4 and 20 tokens, with advantages $+1$ and $-1$. Write
#    down the push $w_{i,t}\hat A_i$ on one token of each under the four aggregations of (10.1) (take
#    $L_{\max} = 24$ and one prompt, $G = 2$), and check with `rl.per_token_weights`.
# 2. Show that for rewards in $\{0, 1\}$ with a share $p$ of right answers the group's summed $|\hat A|$
#    is $2Gp(1-p)$ for the centred rewards and $2G\sqrt{p(1-p)}$ for GRPO's (population std). Where is
#    each largest, and what is the ratio of the two?
# 3. DAPO's token mean gives every token in the batch the same weight. Show that this weight depends on
#    the *other* answers: how does one 24-token answer added to a batch of 4-token answers change the
#    push on the short answers' tokens? Is a per-answer view of the loss still meaningful?
# 4. For the one-parameter policy $p = \sigma(\theta)$ compute $\mathbb E[\hat g]$ of (10.3) by hand and
#    compare with $\mathrm d J^{(N)}/\mathrm d\theta$. What do both tend to for $N = 1$ and for
#    $N \to \infty$, and what does that say about hard questions ($p \to 0$)?
# 5. Set the budget below the reference working (`max_new_tokens=12`): how often is a completion cut
#    off at the start of RL? Train with and without `overlong_filter=True` and compare the length of
#    right answers and the held-out pass@1. Which of DAPO's parts would you expect to matter here
#    that did not matter with 24 tokens?
# 6. *(Open.)* §10.2 states four things of one run: Dr. GRPO's right answers reach the reference
#    working's length (≥ 15 tokens), its pass@1 rises by more than 35 points, GRPO's wrong answers stay
#    within 20 tokens, and GRPO's pass@1 rises by at least 25 points. The benchmark ran the same two
#    configurations, `dr_grpo` and `grpo_b0`, on ten seeds (`rl.benchmark_results("grpo_variants")
#    ["per_seed"]`). On how many seeds does each statement hold there? Then run §10.2 itself from
#    supervised models trained with seeds 1 to 4 (`SFTConfig(seed=s)`, `model_seed=s`,
#    `GRPOConfig(seed=s)`) and check the same four.

# %% [markdown] tags=["solution"] jp-MarkdownHeadingCollapsed=true
# ## Solutions
#
# Exercises 5 and 6 ask for training runs of a minute or more each; their solutions compute the part
# that takes seconds and say what the runs show.
#
# ### Solution to exercise 1
#
# $B = 2$ answers, $\sum|o| = 24$ tokens. GRPO: $w = 1/(2 \cdot 4) = 0.125$ on the short answer's
# tokens and $1/(2\cdot 20) = 0.025$ on the long one's, so pushes $+0.125$ and $-0.025$. DAPO:
# $1/24$ for both, pushes $\pm 0.0417$. Dr. GRPO: $1/(2\cdot24) = 0.0208$, pushes $\pm 0.0208$.
# Prompt mean with one prompt of $G = 2$: the prompt's 24 tokens share weight 1, so $1/24$, as DAPO.

# %% tags=["solution"]
mask2 = torch.arange(24)[None, :] < torch.tensor([4, 20])[:, None]
for mode, by_hand in {"seq_mean_token_mean": (0.125, 0.025), "token_mean": (1 / 24, 1 / 24),
                      "fixed_length_mean": (1 / 48, 1 / 48), "prompt_mean": (1 / 24, 1 / 24)}.items():
    w = rl.per_token_weights(mask2, mode, max_length=24, group_size=2, dtype=torch.float64)
    print(f"{mode:<20} short {w[0, 0]:.4f} long {w[1, 0]:.4f}")
    assert np.allclose([w[0, 0], w[1, 0]], by_hand)

# %% [markdown] tags=["solution"]
# ### Solution to exercise 2
#
# $pG$ answers have $\hat A = 1 - p$ and $(1-p)G$ have $\hat A = -p$, so
# $\sum|\hat A| = pG(1-p) + (1-p)Gp = 2Gp(1-p)$. The population std of the rewards is $\sqrt{p(1-p)}$,
# so GRPO's sum is $2Gp(1-p)/\sqrt{p(1-p)} = 2G\sqrt{p(1-p)}$. Both peak at $p = 1/2$ (at $G/2$ and
# $G$); their ratio $1/\sqrt{p(1-p)}$ is smallest there (2) and grows without bound as $p \to 0$ or 1:
# that growth is the up-weighting of nearly solved and nearly hopeless questions.

# %% tags=["solution"]
for k in range(1, 8):
    r = torch.tensor([1.0] * k + [0.0] * (8 - k), dtype=torch.float64)
    pk = k / 8
    assert np.isclose(rl.group_relative_advantages(r, 8, scale="none").abs().sum(), 2 * 8 * pk * (1 - pk))
    assert np.isclose(rl.group_relative_advantages(r, 8).abs().sum(), 2 * 8 * np.sqrt(pk * (1 - pk)))
print("both formulas hold for k = 1..7 right answers of 8")

# %% [markdown] tags=["solution"]
# ### Solution to exercise 3
#
# With $n$ answers of 4 tokens, each token weighs $1/(4n)$; adding one 24-token answer makes it
# $1/(4n + 24)$. For $n = 4$ the short answers' tokens lose 60% of their push ($16/40$ remains)
# because of an answer they have nothing to do with. The token mean is a per-*batch* normaliser: it
# is exactly a sum of per-token losses divided by a constant of the batch, which is the point (every
# token counts the same), but a single answer's contribution is no longer defined on its own.

# %% tags=["solution"]
short = torch.arange(24)[None, :] < torch.full((4, 1), 4)
with_long = torch.arange(24)[None, :] < torch.tensor([4, 4, 4, 4, 24])[:, None]
w_short, w_long = rl.per_token_weights(short, "token_mean"), rl.per_token_weights(with_long, "token_mean")
print(f"weight of a short answer's token: alone {w_short[0, 0]:.4f}, beside one long answer {w_long[0, 0]:.4f}")
assert np.isclose(w_long[0, 0] / w_short[0, 0], 16 / 40)

# %% [markdown] tags=["solution"]
# ### Solution to exercise 4
#
# The score of a right answer is $\mathrm d \log\sigma(\theta)/\mathrm d\theta = 1 - p$, and wrong
# answers have $r = 0$, so $\hat g = \frac1K \cdot K(1-p) = 1 - p$ whenever $K \ge 1$. Hence
# $\mathbb E[\hat g] = (1-p)\,\Pr(K \ge 1) = (1-p)(1 - (1-p)^N)$. On the other side
# $\mathrm dJ^{(N)}/\mathrm dp = \sum_{k=1}^{N}(1-p)^{k-1} = (1 - (1-p)^N)/p$ and
# $\mathrm dp/\mathrm d\theta = p(1-p)$: the same. $N = 1$ gives $p(1-p) = \mathrm dp/\mathrm d\theta$,
# the pass@1 gradient; $N \to \infty$ gives $1 - p = \mathrm d\log p/\mathrm d\theta$. For a hard
# question ($p \to 0$) the pass@1 gradient vanishes like $p$, while the likelihood gradient tends to 1:
# maximum likelihood keeps pushing on the questions RL gives up on.

# %% tags=["solution"]
for n_samples in (1, 4, 64):
    pt = torch.tensor(0.05, dtype=torch.float64)
    by_hand = (1 - pt) * (1 - (1 - pt) ** n_samples)
    th = torch.logit(pt).clone().requires_grad_(True)
    (g,) = torch.autograd.grad(rl.maxrl_truncated_objective(torch.sigmoid(th), n_samples), th)
    print(f"p = 0.05, N = {n_samples:>2}: by hand {by_hand:.5f}, autograd {g.item():.5f}")
    assert torch.isclose(g, by_hand)

# %% [markdown] tags=["solution"]
# ### Solution to exercise 5
#
# A worked answer for two digits is 16 to 20 tokens, so with a 12-token budget every worked
# answer is cut off: it has no EOS and scores 0. One sampling step measures how often that happens:

# %% tags=["solution"]
short_budget = rl.GRPOConfig(**{**RUN, "num_steps": 1, "max_new_tokens": 12}, lr=1e-12)
h12 = rl.train_grpo(copy.deepcopy(sft_policy), tok, task, short_budget, progress=False)
print(f"share of completions cut off by a 12-token budget at the start of RL: {h12['truncated_fraction'][0]:.2f}")
assert h12["truncated_fraction"][0] > 0.2

# %% [markdown] tags=["solution"]
# About half the completions start with working and are cut off. What to expect from the two runs
# (run them to check; each takes under a minute). Without the filter the cut-off answers are wrong
# answers with $\hat A < 0$, so GRPO pushes the model away from writing working at all, which is
# what this budget demands anyway: it only fits the direct answer. With `overlong_filter=True` the
# truncated answers leave the loss: the model is never told that working is bad, only that right
# direct answers are good. Our prediction, which the exercise asks you to check (we did not store a run
# of it): the share of cut-off answers falls more slowly, and pass@1 rises more slowly with it. Overlong filtering and the soft punishment (whose zone now overlaps the
# working's length) act here, where they were idle at 24 tokens: whether a length trick matters
# depends on how often the budget binds.

# %% tags=["solution"]
rl.claim("About half the completions", h12["truncated_fraction"][0], 0.5)  # "about half": ±1/12

# %% [markdown] tags=["solution"]
# ### Solution to exercise 6
#
# The first half, from the benchmark's per-seed values (the second half takes a minute per run and
# is left to run):

# %% tags=["solution"]
before_seed = np.asarray(bench["before"]["pass@1"])
statements = {
    "dr_grpo: right answers ≥ 15 tokens": np.asarray(per_seed["dr_grpo"]["len_right"]) >= 15.0,
    "dr_grpo: pass@1 gain > 0.35": np.asarray(per_seed["dr_grpo"]["pass@1"]) - before_seed > 0.35,
    "grpo_b0: wrong answers ≤ 20 tokens": np.asarray(per_seed["grpo_b0"]["len_wrong"]) <= 20.0,
    "grpo_b0: pass@1 gain ≥ 0.25": np.asarray(per_seed["grpo_b0"]["pass@1"]) - before_seed >= 0.25,
}
for statement, holds in statements.items():
    print(f"{statement:<38} holds on {int(holds.sum())} of {holds.size} seeds")
