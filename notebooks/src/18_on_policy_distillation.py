# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 18. On-policy distillation: a teacher as a dense reward
#
# **Goals.** By the end of this chapter you can
# * turn a teacher model into a reward for every token the student writes, and say which divergence each
#   training signal minimises: the sampled log-ratio with reward-to-go, the same reward token by token, and
#   the full-vocabulary KL;
# * check by enumeration that the per-token signal is *not* the gradient of the sequence-level KL, though
#   both objectives have one value;
# * connect distillation to chapter 12: the teacher is the optimum of a KL-regularised objective whose
#   reward is its log-ratio to the reference;
# * train a student the book built itself by four methods on the same number of samples, and compare them
#   over ten paired seeds: supervised training on the teacher's samples, on-policy distillation with the
#   sampled reward and with the full-vocabulary KL, GRPO on the verifier, and GRPO with a distillation term;
# * measure exposure bias: how far a student drifts from its teacher on its own prefixes compared with the
#   teacher's;
# * distil two specialist teachers into one student, each grading the problems of its own family;
# * map the book's settings onto TRL's `DistillationTrainer`.
#
# **Prerequisites.** The KL estimators k1–k3 and forward against reverse KL (chapter 5); GRPO (chapter 9) and
# chapter 10's scratchpad task and model; the KL-regularised optimum (chapter 12).
#
# **Where this fits.** Every method so far learned from a sparse signal: one reward per completion, from a
# verifier (chapters 9–11) or a reward model (chapter 12). A better model, when one exists, knows more than
# "right" or "wrong": it can say how likely *each token* is. Distillation uses that. Supervised training on a
# teacher's outputs is the oldest form; *on-policy* distillation lets the student write, and has the teacher
# grade every token it wrote. That is reinforcement learning with a dense reward, the reward is a log-ratio,
# and the whole of this book applies to it. It became a standard stage of post-training in 2025: the
# open Qwen3 models distil their small sizes from the large ones this way (Qwen Team 2025,
# arXiv:2505.09388).

# %%
import copy

import matplotlib.pyplot as plt
import numpy as np
import torch

import rlbook as rl

rl.seed_everything(0)
# figures at twice the pixel density (sharp when zoomed)
# %config InlineBackend.figure_formats = ["retina"]
torch.set_num_threads(1)  # as in chapters 9–17: exact repeats on one machine, gentle when it is busy
SIZE = rl.get_size()  # "small" or "full" (RLBOOK_SIZE): this chapter's runs are its benchmark's, at both sizes
# The models are chapter 10's (2 layers of 128); the chapter keeps them on the CPU, where its stored outputs
# and its benchmark were made, on any machine.
DEVICE = "cpu"
print("size:", SIZE, "| device:", DEVICE)

# %% [markdown]
# ## 18.1 A grade for every token
#
# The student $\pi_\theta$ writes a completion $x = (x_1, \dots, x_T)$ for a prompt $q$. The teacher
# $\pi_T$ reads the same tokens and says how likely it would have been to write each of them. The
# *distillation reward* of token $t$ is the log-ratio of the two:
#
# $$r_t = \log \pi_T(x_t \mid q, x_{<t}) - \log \pi_\theta(x_t \mid q, x_{<t}). \tag{18.1}$$
#
# It is positive where the teacher likes the token more than the student did, and very negative where the
# student wrote something the teacher would almost never write. Summed over the completion the log-ratios
# telescope into the sequences' log-ratio, and its mean under the student's own samples is minus the
# *reverse* KL between the two models' distributions over whole completions:
#
# $$\begin{aligned}\mathbb{E}_{x \sim \pi_\theta}\Big[\sum_t r_t\Big]
# &= \mathbb{E}_{x \sim \pi_\theta}\big[\log \pi_T(x \mid q) - \log \pi_\theta(x \mid q)\big] \cr
# &= -\,\mathrm{KL}\big(\pi_\theta(\cdot \mid q) \,\|\, \pi_T(\cdot \mid q)\big).\end{aligned} \tag{18.2}$$
#
# So $-r_t$ is chapter 5's k1 estimator with the teacher in the reference's place, and maximising the
# expected summed reward is minimising the sequence-level reverse KL: the student is pulled to the
# teacher's favourite completions (mode seeking, chapter 5's "Which way round?"). The reward is dense, one
# number per token against the verifier's one per completion, and it never needs a right answer to exist.
#
# **Three ways to follow it.** A policy gradient needs a weight for each $\nabla \log \pi_\theta(x_t)$. The
# methods in use differ in that weight:
#
# * *reward-to-go* ($\gamma = 1$): $G_t = \sum_{t' \ge t} r_{t'}$, every later token's reward as well, as in
#   REINFORCE with causality (chapter 3). Its mean is the gradient of the sequence KL (18.2): MiniLLM's
#   objective (Gu et al. 2023, arXiv:2306.08543).
# * *each token its own reward* ($\gamma = 0$): the weight is $r_t$ alone. This is what Thinking Machines'
#   on-policy distillation (K. Lu and Thinking Machines Lab, "On-Policy Distillation", October 2025), prime-rl
#   and the per-token losses of TRL use.
# * *the full vocabulary*: at every position of the sampled completion, the exact reverse KL between the two
#   next-token distributions, $\sum_v \pi_\theta(v \mid \cdot)\,[\log \pi_\theta(v \mid \cdot) - \log \pi_T(v
#   \mid \cdot)]$, differentiated directly. This is GKD's divergence at $\beta = 1$ (Agarwal et al. 2023,
#   arXiv:2306.13649, eq. 1) and TRL's `DistillationTrainer` with `beta=1.0`.
#
# The second and third have the same mean, and it is *not* the gradient of (18.2). By the chain rule of KL
# the sequence KL is a sum of per-position KLs, each averaged over the prefixes the student writes:
#
# $$\begin{aligned}\mathrm{KL}(\pi_\theta \,\|\, \pi_T) &= \sum_t \mathbb{E}_{x_{<t} \sim \pi_\theta}
# \big[D_t(x_{<t})\big], \cr
# D_t(x_{<t}) &= \mathrm{KL}\big(\pi_\theta(\cdot \mid x_{<t}) \,\|\, \pi_T(\cdot \mid x_{<t})\big).\end{aligned}
# \tag{18.3}$$
#
# The per-token signals differentiate each $D_t$ and hold the prefix distribution fixed.
# They miss one term: how changing token $t$ changes which prefixes the student meets later, and so how much
# it will disagree with the teacher there (Tang & Munos 2025, arXiv:2506.09477, study such partial KL
# gradients). In exchange their estimate carries no later token's sampling noise.
#
# The cell checks all of this exactly on a tabular "language model": three tokens, completions of three
# tokens, so $3^3 = 27$ completions that can be enumerated, with random student and teacher tables. The
# expected gradient of each sampled signal is computed by summing over all 27 completions
# (`rl.expected_distillation_gradient`), and compared with automatic differentiation of the two objectives.

# %%
V, H = 3, 3
g = torch.Generator().manual_seed(0)
prefixes = sum(V ** t for t in range(H))  # one row of logits per prefix shorter than H
student_table = torch.randn(prefixes, V, generator=g, dtype=torch.float64)
teacher_table = 2.0 * torch.randn(prefixes, V, generator=g, dtype=torch.float64)


def autograd_of(objective):
    table = student_table.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(objective(table), table)
    return grad


sequence_kl = rl.sequence_reverse_kl(student_table, teacher_table)
stepwise_kl = rl.stepwise_reverse_kl(student_table, teacher_table)
grad_sequence = autograd_of(lambda z: rl.sequence_reverse_kl(z, teacher_table))
grad_frozen_prefixes = autograd_of(lambda z: rl.stepwise_reverse_kl(z, teacher_table, detach_states=True))
grad_gamma1 = rl.expected_distillation_gradient(student_table, teacher_table, gamma=1.0)
grad_gamma0 = rl.expected_distillation_gradient(student_table, teacher_table, gamma=0.0)
print(f"sequence KL (18.2) {float(sequence_kl):.6f} nats; sum of per-position KLs (18.3) {float(stepwise_kl):.6f}")
print(f"gamma = 1 vs gradient of the sequence KL:        max |difference| {float((grad_gamma1 - grad_sequence).abs().max()):.1e}")
print(f"gamma = 0 vs gradient with the prefixes frozen:  max |difference| {float((grad_gamma0 - grad_frozen_prefixes).abs().max()):.1e}")
print(f"gamma = 0 vs gamma = 1:                          max |difference| {float((grad_gamma0 - grad_gamma1).abs().max()):.3f}")
print(f"  ... at the last position (no later token):     max |difference| "
      f"{float((grad_gamma0 - grad_gamma1)[1 + V:].abs().max()):.1e}")
print(f"  ... at the first position:                     max |difference| {float((grad_gamma0 - grad_gamma1)[0].abs().max()):.3f}")

# %% [markdown]
# The two objectives agree in value to the last digit, as the chain rule says. The sampled signals' mean
# gradients are exactly the gradients claimed: with reward-to-go, the sequence KL's; token by token, the
# gradient with the prefixes frozen. The two gradients differ, most at the first position and not at all at
# the last, where no later token depends on the choice. Which one is better for training is not settled by
# this identity: $\gamma = 0$ follows a partial gradient with less noise. §18.4 measures the full-vocabulary
# version, which removes the rest of the noise.

# %%
rl.claim("agree in value to the last digit", float(abs(sequence_kl - stepwise_kl)), 0.0, abs=1e-12)
rl.claim("exactly the gradients claimed", float((grad_gamma1 - grad_sequence).abs().max()), 0.0, abs=1e-12)
rl.claim("exactly the gradients claimed", float((grad_gamma0 - grad_frozen_prefixes).abs().max()), 0.0, abs=1e-12)
rl.claim("not at all at the last", float((grad_gamma0 - grad_gamma1)[1 + V:].abs().max()), 0.0, abs=1e-12)
rl.claim("most at the first position", float((grad_gamma0 - grad_gamma1)[0].abs().max()),
         float((grad_gamma0 - grad_gamma1).abs().max()), abs=0)

# %% [markdown]
# **The teacher is an optimum you already know.** Chapter 12 solved the KL-regularised objective
# $\max_\pi \mathbb{E}_\pi[r] - \beta\,\mathrm{KL}(\pi \,\|\, \pi_{\text{ref}})$: its optimum is
# $\pi^*(y) \propto \pi_{\text{ref}}(y)\,e^{r(y)/\beta}$. Take the reward to be the teacher's log-ratio to
# the starting model, $r(y) = \log \pi_T(y) - \log \pi_{\text{ref}}(y)$, and $\beta = 1$: the reference
# cancels and $\pi^* = \pi_T$. Distillation is KL-regularised RL whose optimum is the teacher. Scale the
# reward by $\alpha$ and $\pi^* \propto \pi_{\text{ref}}^{1-\alpha}\,\pi_T^{\alpha}$: with $\alpha > 1$ the
# optimum moves *past* the teacher, away from the reference, which is one reading of why a student can end
# sharper than its teacher. The cell checks both with chapter 12's `rl.kl_regularised_optimum` on six answers.

# %%
pi_ref = torch.softmax(torch.randn(6, generator=g, dtype=torch.float64), 0)
pi_teacher = torch.softmax(2.0 * torch.randn(6, generator=g, dtype=torch.float64), 0)
log_ratio = pi_teacher.log() - pi_ref.log()
optimum = rl.kl_regularised_optimum(pi_ref, log_ratio, beta=1.0)
alpha = 2.0
extrapolated = rl.kl_regularised_optimum(pi_ref, alpha * log_ratio, beta=1.0)
by_formula = pi_ref ** (1 - alpha) * pi_teacher ** alpha
by_formula = by_formula / by_formula.sum()
print("pi_ref     ", np.round(pi_ref.numpy(), 3))
print("teacher    ", np.round(pi_teacher.numpy(), 3))
print("pi* (a = 1)", np.round(optimum.numpy(), 3))
print("pi* (a = 2)", np.round(extrapolated.numpy(), 3))
print(f"max |pi*(a=1) - teacher| = {float((optimum - pi_teacher).abs().max()):.1e}; "
      f"max |pi*(a=2) - formula| = {float((extrapolated - by_formula).abs().max()):.1e}")
rl.claim("the reference cancels", float((optimum - pi_teacher).abs().max()), 0.0, abs=1e-12)
rl.claim("$\\pi^* \\propto \\pi_{\\text{ref}}^{1-\\alpha}\\,\\pi_T^{\\alpha}$",
         float((extrapolated - by_formula).abs().max()), 0.0, abs=1e-12)

# %% [markdown]
# ## 18.2 A teacher and a student the book trains itself
#
# The student is chapter 10's supervised model of the scratchpad task (2-digit addition, the working
# optional): trained on labels that show the working half of the time, with a one-digit mistake in 60 % of
# the answers. Its favourite answer is usually right, but much of its probability sits on the neighbours.
# The teacher has the same size (2 layers of 128, 0.4 M parameters) and was trained the same way on clean
# labels that always show the working. It is better because it saw better data, not because it is bigger:
# a wider or longer-trained teacher would do as well for what follows, and costs more on a CPU. Both are
# trained once and kept under `runs/checkpoints` (the student by chapter 10; the teacher by this chapter,
# in about a minute on two cores, the chapter's only step that uses both).

# %%
task = rl.lm.ScratchpadAdditionTask(num_digits=2, held_out_fraction=0.1, seed=0, scratchpad_prob=0.5)
tok = rl.lm.build_char_tokenizer(task.alphabet)
forbidden = rl.lm.forbidden_token_ids(tok)
CHECKPOINTS = rl.runs_dir() / "checkpoints"
student, _, _ = rl.lm.load_or_train_sft(tok, task, rl.lm.SFTConfig(seed=0), checkpoint=CHECKPOINTS / "ch10_scratchpad_sft",
                                        model_seed=0, num_threads=2, progress=False)
clean_task = rl.lm.ScratchpadAdditionTask(num_digits=2, held_out_fraction=0.1, seed=0, scratchpad_prob=1.0)
teacher, _, loaded = rl.lm.load_or_train_sft(tok, clean_task, rl.lm.SFTConfig(seed=0, label_noise=0.0),
                                             checkpoint=CHECKPOINTS / "ch18_teacher", model_seed=0, num_threads=2,
                                             progress=False)
print("teacher:", "loaded" if loaded else "trained here", "|", rl.lm.count_parameters(teacher), "parameters each")
for model in (student, teacher):
    model.requires_grad_(False)

bench = rl.benchmark_results("distillation")
MAX_NEW = bench["common"]["max_new_tokens"]
held_out = task.held_out_problems(200)
held_prompts = [p.prompt for p in held_out]


def measure(model):
    """Held-out pass@1 and greedy accuracy (16 samples of each of 200 problems), and the reverse KL to the
    teacher summed over a completion, on the model's own completions and on the teacher's."""
    result = rl.evaluate(model, tok, held_out, reward_fn=task.reward, num_samples=16, k=8, max_new_tokens=MAX_NEW,
                         seed=1)
    kl = {where: rl.prefix_divergence(model, teacher, tok, held_prompts, sampler, num_samples=4,
                                      max_new_tokens=MAX_NEW, generator=torch.Generator().manual_seed(2),
                                      forbidden_ids=forbidden)
          for where, sampler in (("own", model), ("teacher_prefix", teacher))}
    return {"pass@1": result["pass@1"], "greedy": result["greedy_accuracy"], "own_kl": kl["own"]["sequence_kl"],
            "teacher_prefix_kl": kl["teacher_prefix"]["sequence_kl"], "own_by_position": kl["own"]["by_position"],
            "teacher_by_position": kl["teacher_prefix"]["by_position"]}


start = measure(student)
teacher_result = rl.evaluate(teacher, tok, held_out, reward_fn=task.reward, num_samples=16, k=8,
                             max_new_tokens=MAX_NEW, seed=1)
print(f"student: pass@1 {start['pass@1']:.3f}, greedy {start['greedy']:.3f}, reverse KL to the teacher "
      f"{start['own_kl']:.1f} nats per completion on its own completions")
print(f"teacher: pass@1 {teacher_result['pass@1']:.3f}, greedy {teacher_result['greedy_accuracy']:.3f}")

# %% [markdown]
# The student answers right greedily on most problems, but a sampled answer is right well under half the
# time; the teacher is right almost always, greedy or sampled. The gap is large in KL too: about 22 nats per
# completion, more than a nat per token.
#
# What does the teacher's grade look like? The cell samples one batch from the student, as a training step
# would (16 problems × 4 completions), and prints the reward of every token of one completion that went
# wrong, then the spread of the rewards over the whole batch.

# %%
rl.claim("right greedily on most problems", start["greedy"], low=0.8)
rl.claim("a sampled answer is right well under half the time", start["pass@1"], high=0.45)
rl.claim("right almost always, greedy or sampled", min(teacher_result["pass@1"], teacher_result["greedy_accuracy"]),
         low=0.98)
rl.claim("about 22 nats per completion", start["own_kl"], 22, abs=1)

# %%
batch_problems = task.sample_problems(16, torch.Generator().manual_seed(0))
prompt_ids, prompt_mask = rl.lm.encode_prompts(tok, [p.prompt for p in batch_problems])
batch = rl.lm.sample_completions(student, prompt_ids, prompt_mask, num_samples=4, max_new_tokens=MAX_NEW,
                                 eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, forbidden_ids=forbidden,
                                 generator=torch.Generator().manual_seed(1), tokenizer=tok)
scoring = dict(forbidden_ids=forbidden, completion_mask=batch.completion_mask)
student_lp = rl.lm.completion_log_probs(student, batch.prompt_ids, batch.completion_ids, batch.prompt_mask, **scoring)
teacher_lp = rl.lm.completion_log_probs(teacher, batch.prompt_ids, batch.completion_ids, batch.prompt_mask, **scoring)
rewards = rl.distillation_rewards(student_lp, teacher_lp, batch.completion_mask)  # (18.1), (64, T)
prompts_per_row = [p.prompt for p in batch_problems for _ in range(4)]
correct = [task.reward(q, o) for q, o in zip(prompts_per_row, batch.texts)]
row = next(i for i, c in enumerate(correct) if c == 0 and len(batch.texts[i]) > 12)
tokens = [tok.decode([int(t)]) for t in batch.completion_ids[row, : int(batch.completion_mask[row].sum())]]
print(f"{prompts_per_row[row]}{batch.texts[row]}  (reward from the verifier: 0)")
print("token   " + "".join(f"{t:>6}" for t in tokens))
print("r_t     " + "".join(f"{float(r):>6.1f}" for r in rewards[row, : len(tokens)]))
values = rewards[batch.completion_mask].double()
print(f"\nbatch of {len(correct)} completions, {values.numel()} tokens: mean r_t {float(values.mean()):+.2f}, "
      f"median {float(values.median()):+.3f}, 1st percentile {float(torch.quantile(values, 0.01)):+.1f}, "
      f"share below -5: {float((values < -5).double().mean()):.3f}")
no_working = torch.tensor([task.separator not in text for text in batch.texts])[:, None].expand_as(rewards)
low = (rewards < -5) & batch.completion_mask
share_direct = float((low & no_working).sum() / low.sum())
print(f"share of the tokens below -5 that are in completions with no working: {share_direct:.3f}")

fig, ax = plt.subplots(figsize=(8.4, 3.0), dpi=80)
ax.hist(values.numpy(), bins=60, color="tab:blue")
ax.set_yscale("log")
ax.set_xlabel("distillation reward $r_t$ of a token (nats)")
ax.set_ylabel("tokens (log scale)")
ax.set_title("The teacher's grades of one batch of the student's tokens")
fig.tight_layout()
plt.show()

# %% [markdown]
# The wrong completion's tokens show where the teacher objects: most tokens get a reward near 0, because
# where the student is sure the teacher is too, and the wrong answer digit gets several nats below (so does the
# digit after it, written after a prefix the teacher would not have written). Over the batch the rewards fall
# in two groups. The median is close to 0; but a quarter of the tokens score below −5 nats,
# and one in a hundred below −10. Over three quarters of those low scores are in completions that give the
# answer with no working, which the teacher, trained always to show it, almost never writes. Such a cluster of large
# negative rewards is what makes the sampled signal noisy when the teacher and the student are far apart,
# and §18.3 measures its cost.

# %%
rl.claim("The median is close to 0", abs(float(values.median())), high=0.05)
rl.claim("a quarter of the tokens score below −5 nats", float((values < -5).double().mean()), 0.25, abs=0.025)
rl.claim("one in a hundred below −10", float(torch.quantile(values, 0.01)), high=-10.0)
rl.claim("Over three quarters of those low scores", share_direct, low=0.75)

# %% [markdown]
# ## 18.3 Five ways to spend 1,600 samples
#
# Each method below starts from the student and may draw **64 completions per step for 25 steps**: 16
# training problems × 4 completions, 1,600 in all. The comparison is at equal samples because sampling is
# what each method pays for every update. The methods differ in who writes the completions and what the student learns
# from them (the trainer is `rl.train_distillation`; every update is on fresh samples, so there are no
# ratios to clip):
#
# | name | who writes | what the student learns from | the loss per token |
# |---|---|---|---|
# | `sequence_kd` | the teacher | the teacher's tokens (supervised, "sequence-level KD") | $-\log \pi_\theta(y_t)$ |
# | `k1` | the student | the sampled reward (18.1), each token its own | $-r_t \log \pi_\theta(x_t)$ |
# | `full_kl` | the student | the full-vocabulary reverse KL at each position | $\mathrm{KL}(\pi_\theta(\cdot \mid x_{<t}) \,\|\, \pi_T(\cdot \mid x_{<t}))$ |
# | `grpo` | the student | the verifier, as chapter 9 | $-\hat A_i \log \pi_\theta(x_t)$ |
# | `grpo_k1` | the student | the verifier plus $0.1\,\times$ the sampled reward | $-(\hat A_i + 0.1\,r_t) \log \pi_\theta(x_t)$ |
#
# `sequence_kd` is Kim & Rush's sequence-level knowledge distillation (2016, arXiv:1606.07947): the off-policy
# baseline, which only ever sees the teacher's prefixes. All use AdamW at a learning rate of $10^{-4}$, the
# token mean, and a gradient clip at 1. The weight 0.1 of `grpo_k1` was not tuned.
#
# The cell runs seed 0 of each, the runs of `benchmarks/distillation.py` (about 3 seconds each here), and
# measures each trained student on the 200 held-out problems.

# %%
CONFIGS = bench["configs"]
BUDGET_RUNS = ["sequence_kd", "k1", "full_kl", "grpo", "grpo_k1"]


def train(name, seed=0):
    """A copy of the student trained by condition ``name`` of the benchmark, and its training history."""
    fields = {k: v for k, v in CONFIGS[name].items() if k != "method"}
    config = rl.DistillationConfig(**bench["common"], **fields, seed=seed)
    rl.seed_everything(seed)
    model = copy.deepcopy(student).requires_grad_(True)
    history = rl.train_distillation(model, teacher, tok, task, config, method=CONFIGS[name]["method"],
                                    forbidden_ids=forbidden, progress=False)
    return model.requires_grad_(False), history


live = {}
for name in BUDGET_RUNS:
    model, history = train(name)
    live[name] = {**measure(model), "history": history, "model": model}
    print(f"{name:<12} pass@1 {live[name]['pass@1']:.3f}  greedy {live[name]['greedy']:.3f}  "
          f"reverse KL on its own completions {live[name]['own_kl']:.2f} nats  ({history.wall_seconds:.1f} s of training)")

# %% [markdown]
# One run of each is one draw. The benchmark ran each method on ten paired seeds (the seed draws the
# problems and the samples; the teacher and the student are the same in every seed), and the next cell reads
# them, checks that this run is one a reader can get, and compares the methods seed by seed.

# %%
by = {c: [r for r in bench["runs"] if r["condition"] == c] for c in bench["conditions"]}
seeds = bench["seeds"]
assert all([r["seed"] for r in by[c]] == seeds for c in by)  # paired: the same seeds, in the same order


def values(condition, key):
    return np.array([r[key] for r in by[condition]], dtype=float)


KEYS = ("pass@1", "greedy", "own_kl", "teacher_prefix_kl")
print(f"{len(seeds)} seeds; {bench['common']}; learning rate {bench['budget']['lr']}, {bench['budget']['num_steps']} steps")
print(f"{'':<13}" + "".join(f"{k:>24}" for k in KEYS))
for c in ["start", *BUDGET_RUNS]:
    cells = [rl.mean_ci(values(c, k)) if c != "start" else (values(c, k)[0],) * 3 for k in KEYS]
    print(f"{c:<13}" + "".join(f"{f'{m:.3f} [{lo:.3f}, {hi:.3f}]':>24}" for m, lo, hi in cells))
for name in BUDGET_RUNS:
    rl.claim_in_spread(f"this run is one a reader can get", live[name]["pass@1"], values(name, "pass@1"))
pairs = [("full_kl", "k1"), ("full_kl", "sequence_kd"), ("full_kl", "grpo"), ("sequence_kd", "grpo"), ("k1", "grpo"),
         ("grpo_k1", "grpo"), ("grpo_k1", "k1")]
cmp = {(a, b): rl.compare(values(a, "pass@1"), values(b, "pass@1"), names=(a, b)) for a, b in pairs}
for c in cmp.values():
    print(c)

# %% [markdown]
# Four results, each over ten paired seeds (the table, the comparisons above and the figure below):
#
# * **The teacher's grades teach more per sample than the verifier's.** `full_kl` is above `grpo`, by about
#   9 points of pass@1, and so is `sequence_kd`; even the noisy `k1` is above `grpo`. A verifier says one bit
#   per completion, and in a group where all four completions are right it says nothing at all; the teacher
#   grades every token of every completion.
# * **The full vocabulary beats the sampled reward.** `full_kl` is above `k1` by about 7 points. Both have the
#   same expected gradient (18.1); the sampled reward estimates each position's KL from the one token that was
#   written, the heavy tail of §18.2 included, while the full-vocabulary KL sums over every token at no extra
#   sampling.
# * **On-policy against supervised training on the teacher's samples: no difference detected at this scale**
#   in accuracy. The next section shows that they learned different things all the same.
# * **A little distillation helps GRPO.** `grpo_k1` is above `grpo`, and above `k1` too: the verifier's
#   signal and the teacher's add up.

# %%
rl.claim_comparison("`full_kl` is above `grpo`", cmp[("full_kl", "grpo")], ">")
rl.claim("by about 9 points of pass@1", cmp[("full_kl", "grpo")].mean_diff, 0.09, abs=0.01)
rl.claim_comparison("and so is `sequence_kd`", cmp[("sequence_kd", "grpo")], ">")
rl.claim_comparison("even the noisy `k1` is above `grpo`", cmp[("k1", "grpo")], ">")
rl.claim_comparison("`full_kl` is above `k1`", cmp[("full_kl", "k1")], ">")
rl.claim("by about 7 points", cmp[("full_kl", "k1")].mean_diff, 0.07, abs=0.01)
rl.claim_comparison("On-policy against supervised training on the teacher's samples: no difference detected at this scale",
                    cmp[("full_kl", "sequence_kd")], "none")
rl.claim_comparison("`grpo_k1` is above `grpo`", cmp[("grpo_k1", "grpo")], ">")
rl.claim_comparison("and above `k1` too", cmp[("grpo_k1", "k1")], ">")

# %%
COLOURS = {"sequence_kd": "tab:gray", "k1": "tab:orange", "full_kl": "tab:blue", "grpo": "tab:green",
           "grpo_k1": "tab:olive", "k1_fast": "tab:red", "full_kl_fast": "tab:purple"}
fig, axes = plt.subplots(1, 2, figsize=(8.4, 3.4), dpi=80)
ax = axes[0]
for i, name in enumerate(BUDGET_RUNS):
    mean, low, high = rl.mean_ci(values(name, "pass@1"))
    ax.bar(i, mean, color=COLOURS[name], yerr=[[mean - low], [high - mean]], capsize=3)
ax.axhline(values("start", "pass@1")[0], color="black", ls="--", lw=1, label="the student before")
ax.set_xticks(range(len(BUDGET_RUNS)), BUDGET_RUNS, rotation=20)
ax.set_ylabel("held-out pass@1")
ax.set_ylim(0, 1)
ax.legend(loc="lower right")
ax.set_title("After 1,600 samples (10 seeds, 95 % CI)")
ax = axes[1]
for name in BUDGET_RUNS[1:]:
    curve = np.mean([r["train_reward"] for r in by[name]], axis=0)
    ax.plot(np.arange(1, len(curve) + 1), curve, color=COLOURS[name], label=name)
ax.set_xlabel("step (64 samples each)")
ax.set_ylabel("accuracy of the step's samples")
ax.set_title("While training (mean of 10 seeds)")
ax.legend(loc="lower right")
fig.tight_layout()
plt.show()

# %% [markdown]
# ## 18.4 Exposure bias, measured
#
# A student trained only on its teacher's completions learns what to write after the teacher's prefixes.
# At test time it writes its own, and after its first deviation it is in prefixes it was never trained on.
# Ross, Gordon & Bagnell (2011, "A Reduction of Imitation Learning and Structured Prediction to No-Regret
# Online Learning", AISTATS, arXiv:1011.0686, Theorem 2.1 and §3) made this exact for imitation: with a
# per-step error $\varepsilon$ on the teacher's states, the cost of a learner trained on those states alone
# can grow as $\varepsilon T^2$ over $T$ steps, because one mistake leaves the states it knows; a learner
# trained on its own states pays $\varepsilon T$. On-policy distillation is the second kind: the teacher
# grades the student's prefixes, the wrong ones included.
#
# The benchmark measures it directly. For each trained student it computes the reverse KL to the teacher
# position by position and sums it over the completion (`rl.prefix_divergence`), once on the student's own
# completions and once on the teacher's. The first is the sequence KL of (18.3), what on-policy distillation
# minimises; the second is what the supervised student was trained on.

# %%
exposure = {c: values(c, "own_kl") - values(c, "teacher_prefix_kl") for c in by}
cmp_own = rl.compare(values("sequence_kd", "own_kl"), values("full_kl", "own_kl"), names=("sequence_kd own KL", "full_kl"))
cmp_teacher = rl.compare(values("sequence_kd", "teacher_prefix_kl"), values("full_kl", "teacher_prefix_kl"),
                         names=("sequence_kd teacher-prefix KL", "full_kl"))
cmp_gap = rl.compare(exposure["sequence_kd"], exposure["full_kl"], names=("sequence_kd own − teacher-prefix", "full_kl"))
for c in (cmp_own, cmp_teacher, cmp_gap):
    print(c)
def position_mean(rows, key):
    """Mean over seeds of a per-position curve (seeds with no completion at a position left out; NaN where none
    reached it)."""
    curves = np.array([r[key] for r in rows], dtype=float)
    counts = (~np.isnan(curves)).sum(axis=0)
    return np.where(counts > 0, np.nansum(curves, axis=0) / np.maximum(counts, 1), np.nan)


LONGEST = task.max_completion_tokens  # the longest reference completion; past it only rare runaway completions
own_curve = {c: position_mean(by[c], "own_kl_by_position")[:LONGEST] for c in ("sequence_kd", "full_kl")}
excess = own_curve["sequence_kd"] - own_curve["full_kl"]
early_share = float(np.nansum(excess[:4]) / np.nansum(excess))
print(f"share of sequence_kd's extra own-prefix KL (per position, over full_kl's) in the first 4 positions: {early_share:.2f}")


def direct_share(model):
    """Share of a model's sampled held-out completions that give the answer without any working."""
    ids, mask = rl.lm.encode_prompts(tok, held_prompts)
    out = rl.lm.sample_completions(model, ids, mask, num_samples=4, max_new_tokens=MAX_NEW, eos_token_id=tok.eos_token_id,
                                   pad_token_id=tok.pad_token_id, forbidden_ids=forbidden,
                                   generator=torch.Generator().manual_seed(3), tokenizer=tok)
    return float(np.mean([task.separator not in text for text in out.texts]))


direct = {"student before": direct_share(student), "teacher": direct_share(teacher),
          **{name: direct_share(live[name]["model"]) for name in ("sequence_kd", "full_kl")}}
print("share of sampled completions with no working:", {k: round(v, 3) for k, v in direct.items()})

# %% [markdown]
# * **On the teacher's completions the two students are close.** `sequence_kd` is further from the teacher
#   than `full_kl` there, but only by about 0.06 nats per completion.
# * **On their own completions they are not.** There `sequence_kd` is further by about 0.7 nats,
#   over ten times that, and the gap between its own and the teacher's completions is larger than `full_kl`'s. That is
#   exposure bias, measured: the supervised student is worst exactly where only it goes.
# * **Where it goes is the first tokens.** The student before training skips the working on about half of
#   its samples, and the teacher almost never does. A completion that starts with the answer is a prefix no
#   teacher sample contains: supervised training never sees it, on-policy training is graded on it. Most of
#   `sequence_kd`'s extra divergence per position sits in the first four positions (figure, left), and both
#   trained students still skip the working now and then.
#
# What this run does *not* show is the compounding. Past the first four positions the two students' curves
# nearly coincide: a completion that skipped the working ends four tokens later, and one that wrote the working
# copies digits from the prompt, where a small slip does not lead far. The $T^2$ needs detours that last;
# exercise 4 asks for a task that has them. And it does not show up in accuracy (§18.3): the divergence that
# the supervised student keeps is spread over tokens the verifier does not grade, such as how a working step is
# written.

# %%
rl.claim_comparison("`sequence_kd` is further from the teacher than `full_kl` there", cmp_teacher, ">")
rl.claim("but only by about 0.06 nats per completion", cmp_teacher.mean_diff, 0.06, abs=0.01)
rl.claim_comparison("There `sequence_kd` is further by about 0.7 nats", cmp_own, ">")
rl.claim("There `sequence_kd` is further by about 0.7 nats", cmp_own.mean_diff, 0.7, abs=0.1)
rl.claim("over ten times that", cmp_own.mean_diff / cmp_teacher.mean_diff, low=10)
rl.claim_comparison("the gap between its own and the teacher's completions is larger than `full_kl`'s", cmp_gap, ">")
rl.claim("skips the working on about half of", direct["student before"], 0.5, abs=0.05)
rl.claim("the teacher almost never does", direct["teacher"], high=0.01)
rl.claim("Most of `sequence_kd`'s extra divergence per position sits in the first four positions", early_share, low=0.5)
rl.claim("both trained students still skip the working now and then", min(direct["sequence_kd"], direct["full_kl"]),
         low=0.001)

# %%
fig, axes = plt.subplots(1, 2, figsize=(8.4, 3.4), dpi=80, sharey=True, sharex=True)
for ax, key, title in ((axes[0], "own_kl_by_position", "on the student's own completions"),
                       (axes[1], "teacher_prefix_kl_by_position", "on the teacher's completions")):
    for name, marker in (("sequence_kd", "s"), ("full_kl", "o")):
        curve = position_mean(by[name], key)[:LONGEST]
        ax.plot(np.arange(LONGEST), curve, marker=marker, ms=4, color=COLOURS[name], label=name)
    ax.set_xticks(range(0, LONGEST, 4))
    ax.set_title(title)
    ax.set_xlabel("position in the completion")
axes[0].set_ylabel("reverse KL to the teacher (nats)")
axes[0].legend()
fig.suptitle(f"Where the trained students differ from the teacher (mean of 10 seeds; first {LONGEST} positions)")
fig.tight_layout()
plt.show()

# %% [markdown]
# ## 18.5 A larger step, and what the full vocabulary does not fix
#
# The sampled reward's tail (§18.2) invites a guess: with a teacher this far from the student, one token at
# −15 nats can push the student hard, so larger steps should hurt the sampled reward most, and the
# full-vocabulary KL, whose gradient at each position is bounded by the two distributions, should hold up.
# The benchmark tested it with two more arms: `k1_fast` and `full_kl_fast`, the same methods at ten times
# the learning rate ($10^{-3}$) for four times the steps (100 steps, 6,400 samples).

# %%
FAST_RUNS = ["k1_fast", "full_kl_fast"]
for c in FAST_RUNS:
    cells = [rl.mean_ci(values(c, k)) for k in KEYS]
    print(f"{c:<13}" + "".join(f"{f'{m:.3f} [{lo:.3f}, {hi:.3f}]':>24}" for m, lo, hi in cells))
cmp_fast = {("k1_fast", "k1"): rl.compare(values("k1_fast", "pass@1"), values("k1", "pass@1"), names=("k1_fast", "k1")),
            ("full_kl_fast", "full_kl"): rl.compare(values("full_kl_fast", "pass@1"), values("full_kl", "pass@1"),
                                                    names=("full_kl_fast", "full_kl")),
            ("full_kl_fast", "k1_fast"): rl.compare(values("full_kl_fast", "pass@1"), values("k1_fast", "pass@1"),
                                                    names=("full_kl_fast", "k1_fast"))}
for c in cmp_fast.values():
    print(c)
start_pass = values("start", "pass@1")[0]

# %% [markdown]
# The guess was half right:
#
# * **A ten times larger step costs both.** `k1_fast` is below `k1`, and `full_kl_fast` is below `full_kl`,
#   although they drew four times the samples. Single runs swing widely from one step to the next (figure).
# * **The full vocabulary does not rescue a step that is too large.** `full_kl_fast` against `k1_fast`: no
#   difference detected at this scale (the interval is wide: some seeds of each recovered well, some did not).
#
# So the sampled reward's noise is a cost at every step size (§18.3), and the remedy for a step that is too
# large is a smaller step. The KL on the student's own samples (`reverse_kl` in the trainer's history) is the
# quantity to watch while distilling, as the accuracy of the step's samples is in the figure.

# %%
rl.claim_comparison("`k1_fast` is below `k1`", cmp_fast[("k1_fast", "k1")], "<")
rl.claim_comparison("`full_kl_fast` is below `full_kl`", cmp_fast[("full_kl_fast", "full_kl")], "<")
rl.claim_comparison("`full_kl_fast` against `k1_fast`: no difference detected at this scale",
                    cmp_fast[("full_kl_fast", "k1_fast")], "none")

# %%
fig, axes = plt.subplots(1, 2, figsize=(8.4, 3.3), dpi=80, sharey=True)
for ax, name in zip(axes, FAST_RUNS):
    for r in by[name]:
        ax.plot(np.arange(1, len(r["train_reward"]) + 1), r["train_reward"], color=COLOURS[name], alpha=0.25, lw=0.8)
    ax.plot(np.arange(1, len(r["train_reward"]) + 1), np.mean([r["train_reward"] for r in by[name]], axis=0),
            color="black", lw=1.5, label="mean of 10 seeds")
    ax.axhline(start_pass, color="black", ls="--", lw=1, label="the student's pass@1 before")
    ax.set_title(f"{name} (learning rate {bench['fast']['lr']:g})")
    ax.set_xlabel("step (64 samples each)")
axes[0].set_ylabel("accuracy of the step's samples")
axes[0].legend(loc="lower right")
fig.tight_layout()
plt.show()

# %% [markdown]
# ## 18.6 Two teachers, one student
#
# A teacher does not have to know everything. One way to build a model that does several things well is to
# train specialists, one per domain, and distil them into one student: each completion is graded by the teacher
# of its domain, and the student learns from all of them at once. Nothing in (18.1) changes: the reward of a token is the log-ratio to
# *its* teacher.
#
# The book's version splits the scratchpad task into two families on the same train / held-out split: the
# problems whose units digits sum to 10 or more (`units_carry`, 45 % of them: the tens column needs the
# `+1`) and the others (`no_units_carry`). Two teachers of §18.2's kind are trained once, each on one family
# only (`rl.lm.ScratchpadAdditionTask(family=...)`), and the benchmark `benchmarks/distillation_multi_teacher.py`
# gives the same student the §18.3 budget (1,600 samples, the full-vocabulary KL) under five regimes:
# `routed` (each completion graded by its family's teacher, `rl.RoutedTeacher`), `carry_teacher` or
# `no_carry_teacher` alone grading everything, `generalist` (§18.2's teacher, trained on the whole task), and
# `grpo` on the verifier. The cell reads the stored runs (ten paired seeds; this chapter does not retrain
# the specialists) and first shows what each teacher knows.

# %%
multi = rl.benchmark_results("distillation_multi_teacher")
mt_by = {c: [r for r in multi["runs"] if r["condition"] == c] for c in multi["conditions"]}
assert all([r["seed"] for r in mt_by[c]] == multi["seeds"] for c in mt_by)  # paired
FAMILY_KEYS = ("pass@1", "pass@1_units_carry", "pass@1_no_units_carry")
print(f"{'teacher':<24}" + "".join(f"{k:>24}" for k in FAMILY_KEYS))
for name, result in multi["teachers"].items():
    print(f"{name:<24}" + "".join(f"{result[k]:>24.3f}" for k in FAMILY_KEYS))


def mt_values(condition, key):
    return np.array([r[key] for r in mt_by[condition]], dtype=float)


print(f"\n{len(multi['seeds'])} seeds; each student after 1,600 samples (pass@1 on the held-out problems of each family)")
print(f"{'student':<24}" + "".join(f"{k:>24}" for k in FAMILY_KEYS))
for c in multi["conditions"]:
    cells = [rl.mean_ci(mt_values(c, k)) if c != "start" else (mt_values(c, k)[0],) * 3 for k in FAMILY_KEYS]
    print(f"{c:<24}" + "".join(f"{f'{m:.3f} [{lo:.3f}, {hi:.3f}]':>24}" for m, lo, hi in cells))
mt_cmp = {(a, b, k): rl.compare(mt_values(a, k), mt_values(b, k), names=(f"{a} {k}", b))
          for a, b, k in (("routed", "grpo", "pass@1"), ("routed", "generalist", "pass@1"),
                          ("routed", "generalist", "pass@1_units_carry"), ("routed", "generalist", "pass@1_no_units_carry"),
                          ("carry_teacher", "start", "pass@1_no_units_carry"),
                          ("no_carry_teacher", "start", "pass@1_units_carry"),
                          ("carry_teacher", "routed", "pass@1_units_carry"),
                          ("no_carry_teacher", "routed", "pass@1_no_units_carry"))}
for c in mt_cmp.values():
    print(c)

# %% [markdown]
# Each specialist is right on almost every problem of its own family and on almost none of the other's:
# the teacher of the problems without a carry never learned the `+1`. What the student learns:
#
# * **Routed, two specialists taught what one teacher of everything did.**
#   `routed` is within one point of pass@1 of `generalist`,
#   overall and on each family (an equivalence margin of ±0.01, under an eighth of what a teacher adds over GRPO here),
#   and it is above `grpo` by about 9 points.
# * **One specialist alone teaches its mistakes.** Graded everywhere by the teacher that never carries,
#   the student gets worse than it started on the carry problems;
#   graded everywhere by the carry specialist, worse on the others.
#   Distillation follows the teacher, wrong or right, and the verifier is not consulted.
# * **And it costs the specialist's own family too.** A student graded everywhere by the carry specialist
#   is below the routed one even on the carry problems: its one set of weights is pulled toward the wrong
#   answers on the rest. Routing is not a detail.

# %%
rl.claim("right on almost every problem of its own family",
         min(multi["teachers"]["units_carry_teacher"]["pass@1_units_carry"],
             multi["teachers"]["no_units_carry_teacher"]["pass@1_no_units_carry"]), low=0.99)
rl.claim("and on almost none of the other's",
         max(multi["teachers"]["units_carry_teacher"]["pass@1_no_units_carry"],
             multi["teachers"]["no_units_carry_teacher"]["pass@1_units_carry"]), high=0.01)
for key in FAMILY_KEYS:
    rl.claim_comparison("`routed` is within one point of pass@1 of `generalist`", mt_cmp[("routed", "generalist", key)],
                        "equivalent", margin=0.01)
rl.claim("under an eighth of what a teacher adds over GRPO here", 0.01 / mt_cmp[("routed", "grpo", "pass@1")].mean_diff,
         high=1 / 8)
rl.claim_comparison("it is above `grpo` by about 9 points", mt_cmp[("routed", "grpo", "pass@1")], ">")
rl.claim("it is above `grpo` by about 9 points", mt_cmp[("routed", "grpo", "pass@1")].mean_diff, 0.09, abs=0.01)
rl.claim_comparison("the student gets worse than it started on the carry problems",
                    mt_cmp[("no_carry_teacher", "start", "pass@1_units_carry")], "<")
rl.claim_comparison("graded everywhere by the carry specialist, worse on the others",
                    mt_cmp[("carry_teacher", "start", "pass@1_no_units_carry")], "<")
rl.claim_comparison("is below the routed one even on the carry problems",
                    mt_cmp[("carry_teacher", "routed", "pass@1_units_carry")], "<")

# %%
fig, ax = plt.subplots(figsize=(8.4, 3.3), dpi=80)
MT_RUNS = ["routed", "generalist", "carry_teacher", "no_carry_teacher", "grpo"]
width = 0.38
for j, (key, label, colour) in enumerate((("pass@1_units_carry", "problems with a units carry", "tab:red"),
                                          ("pass@1_no_units_carry", "problems without", "tab:blue"))):
    for i, name in enumerate(MT_RUNS):
        mean, low, high = rl.mean_ci(mt_values(name, key))
        ax.bar(i + (j - 0.5) * width, mean, width, color=colour, yerr=[[mean - low], [high - mean]], capsize=2,
               label=label if i == 0 else None)
    ax.axhline(mt_values("start", key)[0], color=colour, ls="--", lw=1)
ax.set_xticks(range(len(MT_RUNS)), MT_RUNS)
ax.set_ylabel("held-out pass@1")
ax.set_ylim(0, 1.2)
ax.set_yticks(np.arange(0, 1.01, 0.2))
ax.set_title("Who grades matters: after 1,600 samples (10 seeds, 95 % CI; dashed: before)")
ax.legend(loc="upper center", ncol=2)
fig.tight_layout()
plt.show()

# %% [markdown]
# ## 18.7 Where this goes at scale
#
# TRL 1.16's `DistillationTrainer` is this chapter's `full_kl` at `beta=1.0`: the student samples, and the
# loss is the generalised Jensen–Shannon divergence of GKD over the whole vocabulary at every position
# (`beta=0.0` the forward KL, `1.0` the reverse, in between the mixture; `rl.generalized_jsd` reproduces its
# conventions, and `tests/test_distill_trl.py` checks the book's loss and gradient against TRL's own code on
# one batch, in CI). `rl.to_trl_distillation_config` turns the book's `rl.DistillationConfig` into a
# `trl.DistillationConfig`:
#
# | `rl.DistillationConfig` | `trl.DistillationConfig` | note |
# |---|---|---|
# | `beta` | `beta` | 0 forward KL … 1 reverse KL, the same convention |
# | `temperature` | `temperature` | the sampler's and the divergence's |
# | `max_new_tokens` | `max_completion_length` | |
# | `lr`, `num_steps`, `seed`, `max_grad_norm` | `learning_rate`, `max_steps`, `seed`, `max_grad_norm` | constant rate, no warm-up |
# | `reward="sampled"` | (none) | TRL's loss is the full-vocabulary divergence, with the same mean gradient (§18.1) |
# | `gamma` | (none) | TRL's loss is per token: only $\gamma = 0$ maps |
# | `lmbda` | (none) | the share of student samples; TRL's trainer samples every completion from the student |
# | `verifier_coef`, `distill_coef` | (none) | the trainer has no verifier term: `grpo_k1` does not map |
#
# Two things the comparison with TRL's code found, worth knowing before a run at scale: GKD's trainer in TRL
# 1.16 (`trl.experimental.gkd.GKDTrainer`) never passes its `temperature` to its loss, so its divergence is at
# temperature 1 whatever the config says (`DistillationTrainer` does pass it); and a teacher and a student must
# share a tokenizer for any of this, since the reward compares their probabilities token by token.

# %% [markdown]
# ## Summary
#
# * The distillation reward $r_t = \log \pi_T - \log \pi_\theta$ grades every token the student writes; its
#   summed mean is minus the sequence-level reverse KL (18.2). With reward-to-go its policy gradient is that
#   KL's gradient; token by token it is the gradient with the prefixes frozen, the same mean gradient as the
#   full-vocabulary reverse KL and not the sequence KL's (checked exactly by enumeration, §18.1).
# * The teacher is the optimum of chapter 12's KL-regularised objective with the reward
#   $\log \pi_T - \log \pi_{\text{ref}}$ and $\beta = 1$; scaling that reward past 1 extrapolates past the
#   teacher.
# * At 1,600 samples from the same student, over ten paired seeds: both distillation signals beat GRPO on
#   the verifier; the full-vocabulary KL beats the sampled reward by about 7 points of pass@1; against
#   supervised training on the teacher's samples, no difference detected at this scale; a little of the
#   sampled reward added to GRPO helps it.
# * Exposure bias, measured: the supervised student is as close to the teacher as the on-policy one on the
#   teacher's completions, within 0.06 nats, and much further on its own; the difference sits where the
#   student starts in a way the teacher never does.
# * A ten times larger step costs both distillation signals; between them at that step, no difference detected
#   at this scale: the full vocabulary does not rescue it.
# * Two specialists, each grading the completions of its own family, taught the student what one teacher of
#   everything did (within one point of pass@1); one specialist grading everything taught its mistakes.

# %%
rl.claim_comparison("the full-vocabulary KL beats the sampled reward", cmp[("full_kl", "k1")], ">")
rl.claim("by about 7 points of pass@1", cmp[("full_kl", "k1")].mean_diff, 0.07, abs=0.01)
rl.claim_comparison("both distillation signals beat GRPO", cmp[("k1", "grpo")], ">")
rl.claim_comparison("against supervised training on the teacher's samples, no difference detected at this scale",
                    cmp[("full_kl", "sequence_kd")], "none")
rl.claim_comparison("a little of the sampled reward added to GRPO helps it", cmp[("grpo_k1", "grpo")], ">")
rl.claim("within 0.06 nats", cmp_teacher.mean_diff, high=0.08)
rl.claim_comparison("and much further on its own", cmp_own, ">")
rl.claim_comparison("A ten times larger step costs both distillation signals", cmp_fast[("k1_fast", "k1")], "<")
rl.claim_comparison("A ten times larger step costs both distillation signals", cmp_fast[("full_kl_fast", "full_kl")], "<")
rl.claim_comparison("between them at that step, no difference detected", cmp_fast[("full_kl_fast", "k1_fast")], "none")
rl.claim_comparison("taught the student what one teacher of", mt_cmp[("routed", "generalist", "pass@1")],
                    "equivalent", margin=0.01)
rl.claim_comparison("one specialist grading everything taught its mistakes",
                    mt_cmp[("no_carry_teacher", "start", "pass@1_units_carry")], "<")
rl.report_headline(f"On-policy distillation: full_kl − sequence_kd pass@1 {cmp[('full_kl', 'sequence_kd')].mean_diff:+.3f} "
                   f"[{cmp[('full_kl', 'sequence_kd')].ci_low:+.3f}, {cmp[('full_kl', 'sequence_kd')].ci_high:+.3f}]; "
                   f"full_kl − k1 {cmp[('full_kl', 'k1')].mean_diff:+.3f} [{cmp[('full_kl', 'k1')].ci_low:+.3f}, "
                   f"{cmp[('full_kl', 'k1')].ci_high:+.3f}] ({len(seeds)} paired seeds)")

# %% [markdown]
# ## Exercises
#
# 1. *(By hand.)* At some position the student puts probability 0.9 on token `a` and 0.1 on token `b`; the
#    teacher puts 0.5 on each. Compute the distillation reward (18.1) of each token, its mean under the
#    student, and the full-vocabulary reverse KL at that position. What is the variance of the sampled
#    reward, and what does it become when the teacher puts 0.001 on `b`?
# 2. *(Enumeration.)* Build a tabular student and teacher with two tokens and completions of two tokens for
#    which the first token's expected gradient is exactly 0 at $\gamma = 0$ and not at $\gamma = 1$. What does
#    the teacher have to do at the second position, and what does this say about what the per-token signal
#    cannot see?
# 3. *(Self-distillation, design.)* Self-distillation uses no second model: the teacher is the student
#    itself, shown privileged information in its prompt, for example the worked solution (on-policy
#    self-distillation, Zhao et al. 2026, arXiv:2601.18734). Design it for this chapter's task: what does the
#    teacher's prompt hold, what must happen before the student can use such a prompt at all, and what does
#    the distillation reward then measure? Name one way the student can "cheat" its own teacher.
# 4. *(Design.)* §18.4 found exposure bias at the first tokens and no compounding along the completion.
#    Design a version of the scratchpad task on which a detour lasts, so that the $\varepsilon T^2$ against
#    $\varepsilon T$ argument can be measured. Say what you would plot, against what.
# 5. *(Design.)* §18.6 routed each problem to its family's teacher because the family was known. Suppose it is
#    not: each completion goes to whichever teacher gives it the higher probability,
#    $r_t = \max_k \log \pi_{T_k}(x_t \mid \cdot) - \log \pi_\theta(x_t \mid \cdot)$. What does this reward, on a
#    carry problem whose completion forgot the `+1`? Propose a routing that needs no labels and does not have
#    this flaw.

# %% [markdown] tags=["solution"] jp-MarkdownHeadingCollapsed=true
# ## Solutions
#
# ### Solution to exercise 1
#
# $r_a = \log 0.5 - \log 0.9 = -0.588$ and $r_b = \log 0.5 - \log 0.1 = +1.609$. The mean under the student is
# $0.9 \times (-0.588) + 0.1 \times 1.609 = -0.368$, and the reverse KL at the position is
# $0.9 \log(0.9/0.5) + 0.1 \log(0.1/0.5) = 0.368$: the mean reward is minus the KL, as (18.2) says position by
# position. The variance is $0.9 \times 0.1 \times (r_b - r_a)^2 = 0.43$. With the teacher at 0.001 on `b`,
# $r_a = \log 0.999 - \log 0.9 = +0.104$ and $r_b = \log 0.001 - \log 0.1 = -4.605$: the KL hardly moves
# (0.367, now $-0.094 + 0.461$), but the variance grows to $0.09 \times 4.71^2 \approx 2.0$, more than
# four times as much. The sampled reward is a one-token estimate of a KL whose size is decided by a rare token,
# which is where §18.2's tail comes from. The full-vocabulary KL sums the two terms instead of drawing one.

# %% tags=["solution"]
for teacher_b in (0.5, 0.001):
    p_student = torch.tensor([0.9, 0.1], dtype=torch.float64)
    p_teacher = torch.tensor([1 - teacher_b, teacher_b], dtype=torch.float64)
    r = p_teacher.log() - p_student.log()
    mean = float((p_student * r).sum())
    variance = float((p_student * (r - mean) ** 2).sum())
    kl = float(rl.reverse_kl_per_token(p_student.log()[None], p_teacher.log()[None])[0])
    print(f"teacher on b {teacher_b}: r = {np.round(r.numpy(), 3)}, mean {mean:+.3f}, variance {variance:.3f}, "
          f"reverse KL {kl:.3f}")

# %% [markdown] tags=["solution"]
# ### Solution to exercise 2
#
# Let the teacher agree with the student at the first position (so the first position's own KL and its
# gradient are 0) and disagree at the second position after one first token only. At $\gamma = 0$ the first
# token's weight is its own reward, 0 in expectation with a zero-gradient KL: exactly 0. At $\gamma = 1$ the
# first token also carries the second position's reward, so the student is pushed away from the first
# token that leads to the disagreement. The per-token signal cannot see that a token leads the student into
# prefixes where it will be graded badly; reward-to-go sees it, at the cost of the later tokens' noise.

# %% tags=["solution"]
uniform = torch.zeros(3, 2, dtype=torch.float64)  # rows: empty prefix, after token 0, after token 1
teacher_rows = uniform.clone()
teacher_rows[2] = torch.tensor([3.0, -3.0])  # after token 1 the teacher strongly prefers token 0
for gamma in (0.0, 1.0):
    grad = rl.expected_distillation_gradient(uniform, teacher_rows, gamma=gamma)
    print(f"gamma = {gamma:.0f}: gradient at the first position {np.round(grad[0].numpy(), 4)}")

# %% [markdown] tags=["solution"]
# ### Solution to exercise 3
#
# The teacher's prompt holds the problem and the reference working and answer, say
# `"27+45=|7+5=12;2+4+1=7;072|"` before the completion, and the teacher scores the student's completion
# *after* that hint; the student sees only the problem. Before the hint means anything the model must be
# trained on such prompts (a short supervised stage with hints), or the "teacher" is the student plus noise:
# our scratchpad model was never shown a hint. The reward $\log \pi_{\text{hint}}(x_t) - \log \pi_\theta(x_t)$
# then measures how much more likely the token is once the model knows the answer: high on tokens that move
# toward the solution, low on the first wrong digit. The cheat: the teacher shares the student's weights, so
# an update that makes the model ignore the hint makes teacher and student agree and the reward 0 without
# learning anything: the teacher's pass must carry no gradient (it is a target, not a second student), and a
# teacher that is a frozen or slowly updated copy closes the loophole further.

# %% [markdown] tags=["solution"]
# ### Solution to exercise 4
#
# Make a deviation expensive for longer: for example a working that carries a running total, each step
# using the previous step's result (multi-operand addition, `a+b+c+d=` with the partial sums written out), so
# that one wrong partial sum makes every later step differ from the teacher's. Train `sequence_kd` and
# `full_kl` on tasks of 2, 4, 6 and 8 operands at a budget that scales with the completion length, and plot
# against the length $T$ the reverse KL summed over the student's own completions (`rl.prefix_divergence`,
# `sequence_kl`) for both, over ten paired seeds each. The argument predicts a ratio `sequence_kd` / `full_kl`
# that grows with $T$ (quadratic against linear); a constant ratio would mean the detours do not compound.

# %% [markdown] tags=["solution"]
# ### Solution to exercise 5
#
# The maximum over teachers rewards a token whenever *some* teacher likes it. On a carry problem, a completion
# that forgot the `+1` is exactly what the no-carry specialist writes, so it scores well under that teacher,
# and the student is taught the mistake, as in §18.6's single-specialist runs, though now only where it errs.
# The student's own choices pick its grader, which is the loophole. A routing without labels must be decided
# by the *problem*, not by the completion: for example by the teachers' agreement on the problem's first
# tokens before the student writes (or by a classifier of prompts trained on the teachers' own training
# sets), fixed before sampling, so that no completion can choose the teacher that flatters it.
