# %% [markdown]
# # 8. Language models as policies
#
# **Goals.** By the end of this chapter you can
# * say what the state, the action, the transition and the reward are when a language model answers
#   a question, and why the transition is deterministic;
# * compute the log-probability of a completion from a model's logits, token by token, and get the
#   off-by-one right;
# * sample $G$ completions per prompt with a key/value cache, reproducibly, with masks that stop at
#   the end-of-sequence token and without ever emitting a special token;
# * train a small transformer from scratch on a task with a *verifiable* reward, and leave it room
#   for reinforcement learning on purpose;
# * estimate pass@1 and pass@$k$ without bias, and read the gap between them as room for RL;
# * explain why a question → answer task is a bandit ($\gamma = 0$ between questions, no
#   discounting inside an answer).
#
# **Prerequisites.** The policy-gradient theorem and REINFORCE (Part I): $\nabla J = \mathbb E[R\,
# \nabla\log\pi]$. A little PyTorch. No prior knowledge of transformers is needed: we use one as a
# black box that maps a sequence of token ids to one vector of logits per position.
#
# **Why this chapter?** Parts I and II trained policies for CartPole, where a state is four numbers
# and an action one of two pushes. Reinforcement learning for language models uses the same
# mathematics with a different vocabulary: the "environment" is a text being written, an action is
# a token, and the reward comes from a checker at the end. This chapter builds that setting, small
# enough to train on a laptop CPU in a minute, so that chapter 9 can run GRPO on it.

# %%
import inspect
import itertools

import matplotlib.pyplot as plt
import numpy as np
import torch

import rlbook as rl

rl.seed_everything(0)
# figures at twice the pixel density (sharp when zoomed)
# %config InlineBackend.figure_formats = ["retina"]
# One thread. A model this small gains little from a second one, and a busy machine then slows the
# chapter down gently instead of many-fold (two threads fighting another process for two cores
# stall each other). The thread count also changes the order of float sums and so the trained
# weights: chapter 9 uses one thread too, so it can reuse the model trained here (§8.4).
torch.set_num_threads(1)
device = rl.get_device()
print("size:", rl.get_size())

# %% [markdown]
# ## 8.1 Tokens as actions
#
# A question $q$ (the *prompt*) is a sequence of tokens. The model writes an answer
# $o = (o_1, \dots, o_T)$ (the *completion*) one token at a time. Read this as a decision process:
#
# | RL | language model | in this chapter |
# |---|---|---|
# | state $s_t$ | prompt and the tokens written so far, $(q, o_{<t})$ | `"07+42="` then `"0"`, `"04"`, ... |
# | action $a_t$ | the next token $o_t \in \mathcal V$ | one of 16 characters |
# | policy $\pi_\theta(a_t \mid s_t)$ | softmax of the model's logits at the last position | GPT-2, 0.4 M parameters |
# | transition | append the token: $s_{t+1} = (q, o_{\le t})$ | deterministic |
# | end of episode | the end-of-sequence token `</s>`, or the token budget | at most 8 tokens |
# | reward | a verifier's score of the finished answer, $R(q, o)$ | 1 if the sum is right, else 0 |
#
# The transition is *deterministic*: given the state and the action, the next state is known
# exactly. All the randomness is in the policy. The probability of a whole completion is therefore
# the product of the per-token probabilities, and its log-probability a sum:
#
# $$\begin{gathered}\pi_\theta(o \mid q) = \prod_{t=1}^{T} \pi_\theta(o_t \mid q, o_{<t}),\cr
# \log \pi_\theta(o \mid q) = \sum_{t=1}^{T} \log \pi_\theta(o_t \mid q, o_{<t}).\end{gathered} \tag{8.1}$$
#
# **The task.** Two-digit addition with fixed-width numbers: the prompt `"07+42="` asks for the
# completion `"049</s>"`. The reward is *verifiable*: three lines of exact arithmetic decide it, so no
# learned reward model can be fooled (the RLVR setting of maths and code problems). Fixed width has
# a practical reason too: every prompt has the same number of tokens, so batches need no padding.
# Of the 10 000 problems, a fixed 10% is held out and never used for training.

# %%
tok = rl.lm.build_char_tokenizer()
task = rl.lm.AdditionTask(num_digits=2, held_out_fraction=0.1, seed=0)
print("vocabulary:", tok.convert_ids_to_tokens(list(range(len(tok)))))
print("train / held-out problems:", task.num_train, "/", task.num_held_out)
q = task.held_out_problems(1)[0]
print("a held-out problem:", q, "-> token ids", tok(q.prompt).input_ids)

# %% [markdown]
# The verifier is strict on purpose. A completion is the text the model produced up to and including
# its first `</s>`, decoded *with* special tokens. If we stripped `<pad>` or `<unk>` before checking,
# a policy could learn to pad its answers with them and still be paid, a reward hack that has been
# seen in practice; here any special token inside an answer makes it wrong. A separate
# `format_reward` scores only the shape of the answer (three digits, then `</s>`).

# %%
# NBVAL_CHECK_OUTPUT
cases = ["049</s>", "049", "49</s>", "048</s>", "049<pad></s>", "<unk>049</s>"]
for completion in cases:
    print(f"{completion:14s} reward {task.reward('07+42=', completion)}  format {task.format_reward('07+42=', completion)}")

# %% [markdown]
# ## 8.2 Scoring a completion: log-probabilities from logits
#
# A causal transformer reads the ids $x_1, \dots, x_L$ and returns logits $z_1, \dots, z_L \in
# \mathbb R^{V}$, where $z_j$ scores the token at position $j + 1$ given $x_{\le j}$. Put the prompt
# ($P$ tokens) and the completion ($T$ tokens) side by side; completion token $t$ sits at position
# $P + t$, so its log-probability is read from the logits one column to its left:
#
# $$\begin{aligned}\log \pi_\theta(o_t \mid q, o_{<t}) &= \log\operatorname{softmax}(z_{P+t-1})[o_t]\cr
# &= z_{P+t-1}[o_t] - \log\sum_{v} e^{z_{P+t-1}[v]}.\end{aligned} \tag{8.2}$$
#
# Its gradient with respect to the logits is $\mathrm{onehot}(o_t) - \operatorname{softmax}(z)$, the
# softmax score function of Part I. Two details matter in practice: compute the log-softmax in
# float32 (bfloat16 logits keep only about three significant digits) and never take the log of a
# probability (it underflows; `log_softmax` does not).
#
# | symbol | code | shape |
# |---|---|---|
# | $z$ | `logits` | `(B, T, V)` |
# | $o_t$ | `tokens`, `completion_ids` | `(B, T)` |
# | $\log\pi_\theta(o_t \mid \cdot)$ | `log_probs` | `(B, T)` |
# | end-of-answer mask | `completion_mask` | `(B, T)` bool |

# %%
print(inspect.getsource(rl.lm.token_log_probs).split('"""')[-1])

# %%
# NBVAL_CHECK_OUTPUT
logits = torch.tensor([[[2.0, 0.0, -1.0], [0.5, 0.5, 0.5]]], dtype=torch.float64)
tokens = torch.tensor([[0, 2]])
naive = torch.log(torch.softmax(logits, -1)).gather(-1, tokens[..., None]).squeeze(-1)
print("library:", rl.lm.token_log_probs(logits, tokens).numpy().round(4))
print("naive  :", naive.numpy().round(4), " oracle:", rl.reference.token_log_probs_loop(logits, tokens).numpy().round(4))
print("uniform over 3 tokens is -log 3 =", round(-np.log(3), 4))

# %% [markdown]
# ## 8.3 Sampling G completions per prompt
#
# To sample, feed the prompt once, draw a token from the softmax of the last logits, append it, and
# repeat. Recomputing the whole sequence at every step would cost $O(L^2)$ forwards; a transformer
# instead keeps each layer's keys and values for the positions it has seen (the *KV cache*) and feeds
# only the newest token. `rl.lm.sample_completions` is that loop written out, with four additions:
#
# * each prompt is encoded once and its cache is then copied for its $G$ samples, which sit in
#   consecutive rows (the layout GRPO's group statistics expect);
# * special tokens other than `</s>` get logit $-\infty$, so they are never sampled;
# * a row that has emitted `</s>` is finished: it receives padding, and the loop stops when every
#   row is finished;
# * a `torch.Generator` drives the draws, so the same seed gives the same samples.
#
# It also returns the log-probability of every sampled token under the sampling distribution, which
# GRPO uses as $\log \pi_{\theta_\text{old}}$ without an extra forward pass. The loop is plain on
# purpose: it is several times faster than `model.generate` at these sizes, whose per-call overhead
# dominates when the model is tiny (see `benchmarks/grpo_throughput.py`). For the same reason the
# one-token steps of a plain GPT-2 do not go through `model.forward` but through
# `rl.lm.gpt2_forward`, the model's arithmetic written out in twenty lines with the cache kept in
# preallocated buffers; the tests check it against `model.forward`, and any other model takes the
# general path.

# %%
print(inspect.getsource(rl.lm.sample_completions).split('"""')[-1])

# %% [markdown]
# The completion mask keeps every token up to and including the first `</s>`: the end token is an
# action the policy chose, and it must be rewarded or blamed like any other.

# %%
# NBVAL_CHECK_OUTPUT
ids = torch.tensor([[5, 2, 7, 2], [2, 5, 5, 5], [5, 5, 5, 5]])
print(rl.lm.completion_mask_from_eos(ids, eos_token_id=2).int().numpy())

# %%
policy = rl.lm.build_policy(rl.lm.policy_config(tok), seed=0, device=device)
print("parameters:", rl.lm.count_parameters(policy))
forbidden = rl.lm.forbidden_token_ids(tok)
sample_args = dict(max_new_tokens=8, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                   forbidden_ids=forbidden, tokenizer=tok)
prompt_ids, prompt_mask = rl.lm.encode_prompts(tok, ["07+42=", "33+58="])
a = rl.lm.sample_completions(policy, prompt_ids, prompt_mask, num_samples=4,
                             generator=torch.Generator().manual_seed(1), **sample_args)
b = rl.lm.sample_completions(policy, prompt_ids, prompt_mask, num_samples=4,
                             generator=torch.Generator().manual_seed(1), **sample_args)
rescored = rl.lm.completion_log_probs(policy, a.prompt_ids, a.completion_ids, forbidden_ids=forbidden,
                                      completion_mask=a.completion_mask)
print("untrained samples:", a.texts)
print("same seed, same samples:", a.texts == b.texts)
print("a special token sampled:", any(int(t) in forbidden for t in a.completion_ids[a.completion_mask]))
print("cached log-probs = full re-scoring:", torch.allclose(rescored, a.log_probs, atol=1e-5))

# %% [markdown]
# An untrained network writes noise, and a verifier gives noise reward 0. Policy gradients multiply
# $\nabla\log\pi$ by the reward (or the advantage), so with every reward 0 there is nothing to learn
# from: RL needs a starting policy that is *sometimes* right.
#
# ## 8.4 Training the model from scratch, leaving room for RL
#
# Real pipelines pretrain on text and then fine-tune on demonstrations (SFT) before any RL. We do the
# same in miniature: maximise the log-likelihood of labelled answers (`answer</s>`), a token mean of
# (8.2) over the training problems:
#
# $$\mathcal L_\text{SFT}(\theta) = -\frac{1}{N}\sum_{i}\sum_{t} m_{i,t}\,
# \log\pi_\theta(y_{i,t} \mid q_i, y_{i,<t}). \tag{8.3}$$
#
# Trained on clean labels the model would soon be right almost always and RL would have nothing left
# to do. So we leave room on purpose: 60% of the labels (`label_noise`) are a *plausible mistake*,
# the right answer with one digit changed at random. The mistakes are spread over about 27
# alternatives, so maximum likelihood, which fits the noisy distribution faithfully, keeps the right
# answer as the single favourite (near 40% of the mass) while any single sample is more likely wrong
# than right. The result is a model that *can* add (greedy decoding is right, and the right answer is
# almost always among a few samples) but often says something else. That is the situation in which
# RL from a verifiable reward shines: the knowledge is there, and the reward tells the policy which of
# its own habits to keep. (`SFTConfig` also has a `carry_noise` knob for a *systematic* slip, a
# forgotten carry; exercise 2 shows why that one is much harder for RL to undo.)
#
# We train for 800 steps, more than `SFTConfig`'s default of 550. At 550 steps most initialisations
# have learned to add, but not all: over ten seeds (`benchmarks/grpo_seeds.py`, the table is in the
# README), two started RL from a model whose greedy answers were still often wrong, and RL then
# has to teach addition rather than sharpen it. With 800 steps every one of the ten could add.
#
# `rl.lm.load_or_train_sft` builds the model from the seed above, trains it with `rl.lm.train_sft`,
# and saves it atomically (a crash while writing leaves any old copy intact) to
# `runs/checkpoints/ch08_sft/`, together with a fingerprint of everything that decided its weights
# (the settings, the model, the task, the torch version, thread count and device, the training code).
# Chapter 9 starts from this model: it loads the checkpoint when the fingerprint matches its own
# settings, so the two chapters start RL from the same weights, and trains the identical model
# itself when the checkpoint is missing.

# %%
sft_config = rl.lm.SFTConfig(num_steps=rl.by_size(small=800, full=2000), seed=0)
print(sft_config)
SFT_CHECKPOINT = rl.runs_dir() / "checkpoints" / "ch08_sft"
policy, sft_history, _ = rl.lm.load_or_train_sft(tok, task, sft_config, checkpoint=SFT_CHECKPOINT, retrain=True)
print(f"SFT: {sft_config.num_steps} steps, final loss {sft_history['loss'][-20:].mean():.3f}")

# %%
fig, ax = plt.subplots(figsize=(5, 2.8), dpi=80)
ax.plot(sft_history["loss"], lw=0.8, label="batch loss")
ax.plot(rl.rolling_mean(sft_history["loss"], 25), lw=1.5, label="rolling mean (25)")
ax.set_xlabel("SFT step"); ax.set_ylabel("cross-entropy (nats / token)")
ax.set_ylim(0, 3); ax.legend(fontsize=9); ax.set_title("Supervised training from scratch", fontsize=9)
plt.tight_layout();

# %% [markdown]
# The loss levels off well above 0: on a noisy label the model pays $-\log$ of a probability it
# spreads, as it should, over the mistakes in its data. Let us look at what it writes on held-out
# problems.

# %%
def show_samples(policy, problems, n=6, seed=0):
    """Print n sampled completions for each problem, marked ✓ / ✗ by the verifier."""
    prompt_ids, prompt_mask = rl.lm.encode_prompts(tok, [p.prompt for p in problems])
    out = rl.lm.sample_completions(policy, prompt_ids, prompt_mask, num_samples=n,
                                   generator=torch.Generator().manual_seed(seed), **sample_args)
    greedy = rl.lm.sample_completions(policy, prompt_ids, prompt_mask, greedy=True, **sample_args)
    for i, p in enumerate(problems):
        marks = [t.replace(tok.eos_token, "") + ("✓" if task.reward(p.prompt, t) else "✗") for t in out.texts[i * n:(i + 1) * n]]
        print(f"{p.prompt}  greedy {greedy.texts[i].replace(tok.eos_token, ''):4s}  samples: {' '.join(marks)}")


held_out = task.held_out_problems(rl.by_size(small=500, full=1000))
show_samples(policy, held_out[:6])

# %% [markdown]
# ## 8.5 pass@1 and pass@k
#
# Two numbers describe a stochastic solver. **pass@1** is the chance that one sample is right (the
# expected reward, $J(\theta)$ itself). **pass@k** is the chance that at least one of $k$ samples is
# right: what you get if a verifier may pick among $k$ tries. With $n \ge k$ samples of a problem of
# which $c$ are right, the unbiased estimator (Chen et al. 2021) counts the $k$-subsets with no right
# sample:
#
# $$\text{pass@}k = 1 - \binom{n-c}{k}\Big/\binom{n}{k}
# = 1 - \prod_{i=n-c+1}^{n}\Bigl(1 - \frac{k}{i}\Bigr), \tag{8.4}$$
#
# averaged over problems. The naive $1 - (1 - c/n)^k$ is biased (it is Jensen's inequality away from
# the truth). For $n = 5$, $c = 2$, $k = 2$: of the $\binom52 = 10$ pairs, $\binom32 = 3$ hold no right
# sample, so pass@2 $= 0.7$.

# %%
# NBVAL_CHECK_OUTPUT
print("pass@2 for n=5, c=2:", rl.pass_at_k(5, 2, 2))
pairs = list(itertools.combinations([1, 1, 0, 0, 0], 2))
print("by enumeration     :", sum(max(p) for p in pairs) / len(pairs))
print("naive 1-(1-c/n)^k  :", round(1 - (1 - 2 / 5) ** 2, 4))

# %%
n_samples = 16
sft_eval = rl.evaluate(policy, tok, held_out, num_samples=n_samples, k=8, seed=1)
print({k: round(v, 3) for k, v in sft_eval.items() if k != "num_correct"})
ks = np.arange(1, n_samples + 1)
curve = [rl.pass_at_k(n_samples, sft_eval["num_correct"], int(k)).mean() for k in ks]
fig, ax = plt.subplots(figsize=(5, 2.8), dpi=80)
ax.plot(ks, curve, "o-", ms=3, label="pass@k (held-out)")
ax.axhline(sft_eval["greedy_accuracy"], color="C2", ls="--", label="greedy accuracy")
ax.set_xlabel("k"); ax.set_ylabel("probability"); ax.set_ylim(0, 1.02); ax.legend(fontsize=9)
ax.set_title("After SFT: the gap between pass@1 and pass@k is the room for RL", fontsize=9)
plt.tight_layout();

# %%
assert sft_eval["pass@8"] > 0.9, "a right answer should be among 8 samples almost always"
assert sft_eval["pass@1"] < 0.6, "one sample should still be wrong often (room for RL)"
assert sft_eval["greedy_accuracy"] > 0.8, "the favourite answer should be right"

# %% [markdown]
# Read the plot: one sample is often wrong (at the default size it is right less than half the time; the
# `full` size's longer supervised training lifts it a little), yet eight samples almost always contain
# the right answer, and the single most likely answer is nearly always right. The model has learned
# addition; it just says something else too often. Chapter 9 turns that gap into accuracy with GRPO.

# %%
rl.claim("one sample is often wrong", sft_eval["pass@1"], high=0.6, bounds=(0, 1))
if rl.get_size() == "small":  # the sentence is about the default size
    rl.claim("at the default size it is right less than half the time", sft_eval["pass@1"], high=0.5, bounds=(0, 1))

# %% [markdown]
# ## 8.6 Why a question → answer task is a bandit
#
# Different questions do not influence each other: answering `"07+42="` does not change which
# question comes next. Between questions the discount is effectively $\gamma = 0$, and each question
# is a one-step *contextual bandit*: see $q$, pick an entire answer $o$ (one "arm" among
# $|\mathcal V|^T$), receive $R(q, o)$. The objective and its gradient are
#
# $$\begin{gathered}J(\theta) = \mathbb E_{q\sim\mu}\,\mathbb E_{o\sim\pi_\theta(\cdot\mid q)} R(q, o),\cr
# \nabla J = \mathbb E\Bigl[R(q, o)\sum_{t=1}^{T}\nabla\log\pi_\theta(o_t \mid q, o_{<t})\Bigr].\end{gathered} \tag{8.5}$$
#
# Inside one answer we can also keep the token-level view of §8.1; with the only reward at the end
# and no discount, every token's reward-to-go equals $R(q, o)$, which is (8.5) again. Discounting
# within an answer ($\gamma < 1$) would only make the first tokens matter less for no reason: they
# decide the answer as much as the last. So RL for language models treats the whole completion as
# one action and broadcasts one advantage to all its tokens, which is exactly what GRPO does.
#
# Because actions are whole answers, $\pi_\theta(\cdot \mid q)$ is a distribution over answers, and we
# can check (8.1) directly: enumerate all 1000 well-formed answers `"000</s>"`…`"999</s>"`, score each
# as a sum of token log-probabilities, and add up their probabilities. The mass on well-formed
# answers should be close to 1, the right answer should be the favourite with roughly 40% of it, and
# most of the rest should sit on the 27 answers that are one digit away (the label noise changes one
# digit), although they are under 3% of the 999 wrong answers. Which of them rank second to fifth
# is a matter of a few thousandths and changes with the CPU's float order; the share does not.

# %%
q = held_out[0]
answers = [f"{v:03d}" for v in range(1000)]
completion_ids = torch.tensor([tok(a, add_special_tokens=False).input_ids + [tok.eos_token_id] for a in answers])
prompt_ids, _ = rl.lm.encode_prompts(tok, [q.prompt] * len(answers))
with torch.no_grad():
    seq_log_probs = rl.lm.completion_log_probs(policy, prompt_ids, completion_ids, forbidden_ids=forbidden).sum(-1)
probs = seq_log_probs.exp()
top = probs.argsort(descending=True)[:5]
print(f"{q.prompt}: mass on well-formed answers {probs.sum():.3f}; π(right answer {q.answer}) = {probs[int(q.answer)]:.3f}")
print("most likely answers:", [(answers[i], round(float(probs[i]), 3)) for i in top])
assert 0.9 < float(probs.sum()) <= 1.0 + 1e-4
assert answers[top[0]] == q.answer, "the right answer should be the favourite"
one_digit_off = torch.tensor([sum(x != y for x, y in zip(a, q.answer)) == 1 for a in answers])
wrong_mass = probs.sum() - probs[int(q.answer)]
one_digit_share = float(probs[one_digit_off].sum() / wrong_mass)
print(f"share of the wrong answers' mass on the {int(one_digit_off.sum())} answers one digit away: {one_digit_share:.2f}")
assert one_digit_share > 0.5, "most of the wrong mass should be one digit away"
rl.claim("roughly 40% of it", probs[int(q.answer)], 0.4);  # the words allow ±0.1

# %% [markdown]
# The checkpoint saved in §8.4 is an ordinary `save_pretrained` folder (in the git-ignored `runs/`),
# and any local causal-LM folder loads the same way, so a reader with a GPU can swap in a real model
# with `rl.lm.load_policy("path/to/model")`. Reloading gives back the same function, logit for logit:

# %%
reloaded, reloaded_tok, meta = rl.lm.load_checkpoint(SFT_CHECKPOINT, device=device)
with torch.no_grad():
    same = torch.equal(reloaded(input_ids=prompt_ids[:2].to(device)).logits, policy(input_ids=prompt_ids[:2].to(device)).logits)
print("reloaded from runs/checkpoints/ch08_sft; SFT steps:", meta["fingerprint"]["sft_config"]["num_steps"], "; identical logits:", same)
assert same

# %%
_ = rl.report_headline(
    f"SFT from scratch ({sft_config.num_steps} steps): held-out greedy {sft_eval['greedy_accuracy']:.2f}, "
    f"pass@1 {sft_eval['pass@1']:.2f}, pass@8 {sft_eval['pass@8']:.2f}"
)

# %% [markdown]
# ## Summary
#
# * A language model is a policy over tokens. The state is the prompt plus the text so far, the
#   transition appends the chosen token (deterministic), and the reward judges the finished answer.
# * $\log\pi_\theta(o\mid q)$ is a sum of per-token log-probabilities (8.1), each read from the logits
#   one position to the left (8.2), in float32, with `log_softmax`.
# * Sampling uses the KV cache, draws from a seeded generator, forbids special tokens, and masks each
#   completion up to and including its first `</s>`. The sampled log-probabilities equal a full
#   re-scoring.
# * A verifiable reward is exact but sparse: a random model never earns it, so we first train by
#   maximum likelihood, with noisy labels (random one-digit slips) that leave pass@1 low while
#   greedy accuracy and pass@k are high.
# * pass@k is estimated without bias by (8.4); its gap to pass@1 is what RL can convert.
# * A question → answer task is a contextual bandit ($\gamma = 0$ across questions, no discount
#   within an answer), so one advantage per completion is broadcast to all its tokens.
#
# ## Exercises
#
# 1. **The off-by-one.** Score a completion with the logits of the *same* column instead of the
#    column to its left. What log-probabilities do you get for `</s>`, and why is the mistake easy to
#    miss when the loss still goes down?
# 2. **Systematic versus random noise.** Train with `SFTConfig(label_noise=0.5, carry_noise=0.6,
#    num_steps=700)`: 60% of the labels also forget the carry out of the units column. Before you
#    measure, work out which label is the most frequent one for a problem with a units carry, and
#    predict what greedy decoding does on those problems. Then run chapter 9's GRPO on it and compare
#    the gain in pass@1 with chapter 9's. Why is a *systematic* slip, the favourite answer, so much
#    harder for RL to undo than random slips? (Look at the entropy curve.)
# 3. **Naive pass@k.** For `sft_eval["num_correct"]`, plot the naive $1 - (1 - c/n)^k$ next to (8.4).
#    Which is larger, and by how much at $k = 8$?
# 4. **A reward hack.** Write `lenient_reward` that strips special tokens before comparing, sample
#    without forbidding `<pad>` (`forbidden_ids=[]`), and count the completions that the lenient
#    reward pays and the strict one does not. Why does the count grow if you train on the lenient
#    reward?
# 5. **Temperature.** Evaluate pass@1 and pass@8 at temperatures 0.5, 1 and 1.5. Lowering the
#    temperature raises pass@1 here. Why is that not the same thing as what RL does?

# %% [markdown] tags=["solution"] jp-MarkdownHeadingCollapsed=true
# ## Solutions
#
# Exercises 2 and 5 ask for training or evaluation runs; the cells below run the parts that take a few
# seconds and say what the longer runs show and why.
#
# ### Solution to exercise 1
#
# Read each completion token's log-probability from the logits of its *own* column, $z_{P+t}$, instead of
# $z_{P+t-1}$. That column has already seen the token, and it predicts the *next* one:

# %% tags=["solution"]
prompt_part, _ = rl.lm.encode_prompts(tok, ["60+44="])  # the prompt exactly as the sampler encodes it
answer_part = torch.tensor([tok("104", add_special_tokens=False).input_ids + [tok.eos_token_id]])
ids, P = torch.cat([prompt_part, answer_part], dim=1).to(device), prompt_part.shape[1]
with torch.no_grad():
    z = policy(input_ids=ids).logits.float()
right = rl.lm.token_log_probs(z[:, P - 1:-1], ids[:, P:])
wrong = rl.lm.token_log_probs(z[:, P:], ids[:, P:])
print("tokens                :", tok.convert_ids_to_tokens(ids[0, P:].tolist()))
print("log π, left column    :", right.cpu().numpy().round(2))
print("log π, same column    :", wrong.cpu().numpy().round(2))
assert wrong.sum() < right.sum()

# %% [markdown] tags=["solution"]
# With the right column the answer `104</s>` is likely (its log-probabilities are close to 0 where the
# model is sure). With the same column each token is scored as if it were its own successor, so the
# numbers are nonsense; for `</s>` the same column is the one *after* the end, which training never
# reaches. The mistake is easy to miss because training with it still lowers the loss, fast: the model
# can see the token it is asked to predict and learns to copy its input, which says nothing about
# writing answers. A check against an independent loop (`rl.reference.token_log_probs_loop`, §8.2) or
# a sampled answer's cached log-probabilities (§8.3) catches it at once.
#
# ### Solution to exercise 2
#
# Count the labels. For a problem with a carry out of the units column, the carry slip is applied first
# with probability 0.6, then a random one-digit change with probability 0.5 (spread over about 27
# different mistakes). So the right label appears with probability $0.4 \times 0.5 = 0.2$ and the
# slipped one with $0.6 \times 0.5 = 0.3$: the slip is the single most likely label, and maximum
# likelihood makes it the favourite. Greedy decoding, which outputs the favourite, is therefore wrong
# on almost every problem with a units carry (45 of every 100 pairs of digits $a_0, b_0$ have
# $a_0 + b_0 \ge 10$), while it stays right on the others. We can check the label frequencies without training:

# %% tags=["solution"]
_, _, target_ids, target_mask, _ = rl.lm.sft_batch(tok, task, 4096, 0.5, torch.Generator().manual_seed(0),
                                                    carry_noise=0.6)
problems_drawn = task.sample_problems(4096, torch.Generator().manual_seed(0))
labels = [tok.decode(t[m].tolist()).replace(tok.eos_token, "") for t, m in zip(target_ids, target_mask)]
has_carry = [task.carry_slip(p) != p.answer for p in problems_drawn]
right_share = np.mean([lab == p.answer for lab, p, c in zip(labels, problems_drawn, has_carry) if c])
slip_share = np.mean([lab == task.carry_slip(p) for lab, p, c in zip(labels, problems_drawn, has_carry) if c])
print(f"problems with a units carry: {np.mean(has_carry):.2f};  on them, right label {right_share:.3f}, "
      f"carry slip {slip_share:.3f}")
assert slip_share > right_share

# %% [markdown] tags=["solution"]
# (The first line checks that `sft_batch` draws its problems before anything else from the generator,
# so `problems_drawn` are the problems behind `labels`; the shares are close to the $0.2$ and $0.3$
# computed above, the small excess of right labels coming from random digit changes that happen to
# undo a slip.)
#
# We therefore predict that GRPO helps much less than in chapter 9 (the exercise's run tests it; this
# solution does not train). In expectation its gradient does favour the right
# answer, but the signal from a problem is proportional to how often both a right and a wrong answer
# appear in its group, and the right answer is now a minority that is rarely sampled. Meanwhile RL
# sharpens the policy everywhere (the entropy curve falls quickly), and on a carry problem sharpening
# concentrates the mass on the favourite, the slip. Once all $G$ samples of a problem are the slip,
# its group has zero variance and contributes nothing: the mistake is locked in. Random slips are
# different: there the right answer is the favourite, so sharpening and correcting are the same move.
#
# ### Solution to exercise 3

# %% tags=["solution"]
c = sft_eval["num_correct"]
unbiased = rl.pass_at_k(n_samples, c, 8).mean()
naive = (1 - (1 - c / n_samples) ** 8).mean()
print(f"pass@8: unbiased {unbiased:.4f}, naive {naive:.4f}, naive − unbiased {naive - unbiased:+.4f}")
assert naive <= unbiased + 1e-12

# %% [markdown] tags=["solution"]
# The naive estimate is the smaller. Per problem, $1 - (1 - c/n)^k$ draws the $k$ tries *with*
# replacement from the $n$ samples, so a wrong sample can be drawn twice, and the chance that all $k$
# are wrong is larger than without replacement, which is what (8.4) computes. Averaged over the sampling
# of $c$, the naive value is also below the true pass@k, by Jensen's inequality: $(1 - p)^k$ is convex
# in $p$. The gap is largest for problems with few right samples, where it matters most.
#
# ### Solution to exercise 4

# %% tags=["solution"]
def lenient_reward(prompt, completion):
    """Pays an answer that is right once every special token is removed (the hackable verifier)."""
    for special in tok.all_special_tokens:
        completion = completion.replace(special, "")
    return task.reward(prompt, completion + tok.eos_token)


probe = held_out[:200]
prompt_ids, prompt_mask = rl.lm.encode_prompts(tok, [p.prompt for p in probe])
unguarded = rl.lm.sample_completions(policy, prompt_ids.to(device), prompt_mask.to(device), num_samples=8,
                                     generator=torch.Generator(device=device).manual_seed(0),
                                     **{**sample_args, "forbidden_ids": []})
paid = [(lenient_reward(probe[j // 8].prompt, t), task.reward(probe[j // 8].prompt, t)) for j, t in enumerate(unguarded.texts)]
hacks = sum(1 for lenient, strict in paid if lenient and not strict)
print(f"{len(paid)} completions: lenient pays {sum(l for l, _ in paid):.0f}, strict pays {sum(s for _, s in paid):.0f}, "
      f"paid only by the lenient reward: {hacks}")
assert all(lenient >= strict for lenient, strict in paid)

# %% [markdown] tags=["solution"]
# The supervised model never saw a special token inside an answer, so it rarely writes one and the
# count starts small. Train on the lenient reward, though, and nothing ever pushes those tokens down: a
# right answer with a stray `<pad>` is paid exactly like a clean one, so the stray token is reinforced
# with every success it rides along with, while nothing penalises it. Its probability drifts up, and
# with a reward that also pays for something *easier* to produce with special tokens (a format check
# that counts characters, say) it is actively selected for. That is why the verifier is strict, and
# why the sampler forbids special tokens other than `</s>` in the first place.
#
# ### Solution to exercise 5

# %% tags=["solution"]
for temperature in (0.5, 1.0, 1.5):
    ev = rl.evaluate(policy, tok, held_out[:200], num_samples=16, k=8, temperature=temperature, seed=1)
    print(f"temperature {temperature}: pass@1 {ev['pass@1']:.3f}   pass@8 {ev['pass@8']:.3f}")
    if temperature == 0.5:
        cold = ev["pass@1"]
assert cold > sft_eval["pass@1"], "a lower temperature should raise pass@1 when the favourite is right"

# %% [markdown] tags=["solution"]
# Lowering the temperature divides every logit by $\tau < 1$, which moves mass towards each position's
# favourite token, on every problem alike. Here the favourite answer is right (high greedy accuracy),
# so pass@1 rises, while pass@8, already close to 1, has little left to gain; at a high temperature
# both fall, as the mass spreads over wrong answers. RL does
# something else. It changes the model's weights using the *reward*, so it raises the right answer
# whether or not it is the favourite, and it can lower a favourite that is wrong. With the carry slip
# of exercise 2, a low temperature would make pass@1 on carry problems *worse*, while the reward still
# points the other way. Temperature is a decoding choice that reuses what the model already ranks
# first; RL changes the ranking.
