# %% [markdown]
# # 1. The reinforcement-learning objective
#
# **Goals.** By the end of this chapter you can
# * say precisely what a *policy*, a *trajectory*, a *return* and the *objective* $J(\theta)$ are;
# * compute returns and rewards-to-go for a batch of episodes, with the episode ends handled right;
# * estimate $J(\theta)$ by Monte Carlo on CartPole, the running example of Part I, and quote an error bar;
# * see a language model as a policy: tokens are actions, the prefix is the state, and a whole answer
#   can also be seen as *one* action in a bandit.
#
# **Prerequisites.** Python, PyTorch tensors, expectations and conditional probability. No RL background.
#
# **Why start here?** Every algorithm in this book — REINFORCE, PPO, GRPO — is a way to push one number
# up: the expected reward of the policy. If that number is clear, every later formula is "a gradient of
# it", "an estimate of it" or "a safe step on it". If it is fuzzy, the variants look like a zoo.

# %%
import math

import matplotlib.pyplot as plt
import numpy as np
import torch

import rlbook as rl

rl.seed_everything(0)
device = rl.get_device()
SIZE = rl.get_size()  # "small" (default; 2 CPU cores) or "full", via RLBOOK_SIZE
print("size:", SIZE)

# %% [markdown]
# ## 1.1 Agent, environment, policy
#
# An *environment* is in some state $s_t$. The *agent* picks an action $a_t$; the environment answers
# with a reward $r_t$ and a next state $s_{t+1}$, and so on until the episode ends. A **policy** is the
# agent's rule for picking actions. We use *stochastic* policies with parameters $\theta$ (the weights
# of a neural network):
#
# $$\pi_\theta(a \mid s) = \text{probability of taking action } a \text{ in state } s. \tag{1.1}$$
#
# Stochastic policies matter for two reasons: they explore (a deterministic policy never tries what it
# does not already prefer), and they are *differentiable* in $\theta$ even though the actions are discrete.
# That second point is the whole trick of the next chapter.
#
# A **trajectory** (or episode, or rollout) is the sequence $\tau = (s_0, a_0, r_0, s_1, a_1, r_1, \dots)$.
# Its probability factorises into the parts we control and the parts we don't:
#
# $$p_\theta(\tau) = \rho_0(s_0) \prod_{t=0}^{T-1} \pi_\theta(a_t \mid s_t)\, P(s_{t+1} \mid s_t, a_t). \tag{1.2}$$
#
# $\rho_0$ (the start-state distribution) and $P$ (the dynamics) belong to the environment; we can sample
# them but we never need their formulas. Only the $\pi_\theta$ factors depend on $\theta$.
#
# ## 1.2 Return and objective
#
# The **return** of a trajectory adds up its rewards, optionally discounted by $\gamma \in [0, 1]$:
#
# $$R(\tau) = \sum_{t=0}^{T-1} \gamma^{t} r_t. \tag{1.3}$$
#
# The **objective** is the expected return under the policy:
#
# $$J(\theta) = \mathbb{E}_{\tau \sim p_\theta}\big[R(\tau)\big]. \tag{1.4}$$
#
# Reinforcement learning *maximises* $J$. Note what is random: the start state, the actions the policy
# samples, and the environment's transitions. The reward function is fixed; the policy is what we change.
#
# A close relative of the return is the **reward-to-go** from step $t$,
#
# $$\hat R_t = \sum_{t'=t}^{T-1} \gamma^{t'-t} r_{t'} = r_t + \gamma \hat R_{t+1}, \tag{1.5}$$
#
# the part of the return that comes *after* the action $a_t$ — the only part $a_t$ can influence.
# It will cut the variance of our gradient estimates in Chapter 3.
#
# **Episode ends come in two kinds.** An episode is *terminated* when the task itself ends (the pole
# fell): nothing more will ever be collected. It is *truncated* when we stop it for our own reasons (a
# time limit): the task would have gone on. The library keeps two flags, `terminated` and `truncated`;
# both cut the sum in (1.5), and later, when we learn value functions, only `terminated` means "the
# future is worth zero".
#
# | symbol | code | shape |
# |---|---|---|
# | $r_t$ | `rewards` | `(B, T)` — time last |
# | $\gamma$ | `gamma` | scalar in $[0, 1]$ |
# | $R(\tau)$ at every step of the episode | `rl.discounted_returns(rewards, gamma, terminated, truncated)` | `(B, T)` |
# | $\hat R_t$ | `rl.rewards_to_go(rewards, gamma, terminated, truncated)` | `(B, T)` |
#
# Here is the library's rewards-to-go; it is a backward recursion (1.5) that restarts at every episode end.

# %%
import inspect

print(inspect.getsource(rl.rewards_to_go))

# %% [markdown]
# A hand-worked check. One row holds a 3-step episode with rewards $1, 1, 1$ and $\gamma = 0.9$: the
# rewards-to-go are $1 + 0.9 + 0.81 = 2.71$, then $1.9$, then $1$. The second row holds *two* episodes
# back to back (the first terminates after 2 steps), so the recursion must not leak across the boundary.

# %%
# NBVAL_CHECK_OUTPUT
rewards = torch.tensor([[1.0, 1.0, 1.0], [1.0, 2.0, 3.0]])
terminated = torch.tensor([[False, False, True], [False, True, True]])
rtg = rl.rewards_to_go(rewards, gamma=0.9, terminated=terminated)
ret = rl.discounted_returns(rewards, gamma=0.9, terminated=terminated)
print("rewards-to-go:\n", rtg.numpy().round(3))
print("episode return at every step:\n", ret.numpy().round(3))
assert torch.allclose(rtg[0], torch.tensor([2.71, 1.9, 1.0]))
assert torch.allclose(rtg[1], torch.tensor([1 + 0.9 * 2, 2.0, 3.0]))

# %% [markdown]
# ## 1.3 CartPole, the running example of Part I
#
# In gymnasium's `CartPole-v1` a pole is hinged on a cart that moves on a track. The **state** is four
# numbers: cart position, cart velocity, pole angle, pole angular velocity. There are two **actions**:
# push the cart left (0) or right (1). The **reward** is $+1$ for every step the pole stays up. The
# episode **terminates** when the pole tilts more than 12° or the cart leaves the track, and it is
# **truncated** at 500 steps. So the undiscounted return is simply the episode length, between about
# 8 and 500, and "solving" CartPole means a return near 500. We use $\gamma = 1$ to *score* a policy.
#
# The simplest policy pushes left or right with probability ½ each. Its $J$ is an expectation we can't
# compute in closed form (the physics is in the way), but we can **estimate** it by Monte Carlo:
# run $N$ episodes and average,
#
# $$\hat J_N = \frac{1}{N}\sum_{i=1}^N R(\tau_i), \qquad \text{standard error} = \frac{\hat\sigma}{\sqrt N}. \tag{1.6}$$
#
# `rl.random_policy_returns` runs the episodes with seeded environments (reset with `seed=`), so the
# numbers below are the same on every machine.

# %%
# NBVAL_CHECK_OUTPUT
N_RANDOM = rl.by_size(small=200, full=2000)
random_returns = rl.random_policy_returns(N_RANDOM, seed=0)
stats = rl.episode_statistics(random_returns)
print(f"random policy over {stats['n']} episodes: J ≈ {stats['mean']:.1f} ± {stats['sem']:.1f} (s.e.), "
      f"min {stats['min']:.0f}, median {stats['median']:.0f}, max {stats['max']:.0f}")

# %%
ax = rl.get_ax(figsize=(5, 3))
ax.hist(random_returns, bins=30, color="C0", alpha=0.8)
ax.axvline(stats["mean"], color="k", ls="--", lw=1, label=f"mean {stats['mean']:.1f}")
ax.set_xlabel("return (episode length)")
ax.set_ylabel("episodes")
ax.set_title("CartPole-v1, uniform random policy")
ax.legend();

# %% [markdown]
# The distribution is skewed: most random episodes end within 30 steps, a few survive much longer.
# Skewed, high-variance returns are the normal situation in RL, and they are why estimators and their
# variance take up so much of this book.
#
# ## 1.4 J depends on θ: a landscape to climb
#
# To see $J$ as a function of parameters, take a tiny policy family: a logistic policy that pushes right
# with probability $\sigma(\theta^\top s)$. A sensible direction for $\theta$ puts weight on the pole
# angle and angular velocity (push the cart under a falling pole). Along the line
# $\theta = \alpha\,(0, 0, 1, 1)$ we estimate $J(\alpha)$ with error bars. Negative $\alpha$ pushes the
# wrong way; $\alpha = 0$ is the random policy; large $\alpha$ approaches a deterministic controller.

# %%
def logistic_policy(theta: torch.Tensor, generator: torch.Generator):
    """π_θ(right | s) = σ(θᵀs); returns a function mapping observations (n, 4) to actions (n,)."""
    def act(obs: torch.Tensor) -> torch.Tensor:
        p_right = torch.sigmoid(obs.double() @ theta)
        return (torch.rand(len(obs), generator=generator, dtype=torch.float64) < p_right).long()
    return act


alphas = rl.by_size(small=[-4, -1, 0, 0.5, 1, 2, 4, 8, 16], full=list(np.linspace(-4, 16, 21)))
N_EVAL = rl.by_size(small=40, full=200)
direction = torch.tensor([0.0, 0.0, 1.0, 1.0], dtype=torch.float64)
landscape = []
for alpha in alphas:
    gen = torch.Generator().manual_seed(1)
    batcher = rl.EpisodeBatcher(N_EVAL, seed=1000)
    batch = batcher.collect(logistic_policy(alpha * direction, gen))
    landscape.append(rl.episode_statistics(batch.episode_returns))

# %%
# NBVAL_CHECK_OUTPUT
for alpha, st in zip(alphas, landscape):
    print(f"alpha = {alpha:5.1f}:  J ≈ {st['mean']:6.1f} ± {st['sem']:5.1f}")
assert landscape[-1]["mean"] > 5 * landscape[alphas.index(0)]["mean"], "a good direction should beat random"

# %%
ax = rl.get_ax(figsize=(5, 3))
ax.errorbar(alphas, [s["mean"] for s in landscape], yerr=[2 * s["sem"] for s in landscape], fmt="o-", capsize=3)
ax.set_xlabel(r"$\alpha$ in $\theta = \alpha\,(0,0,1,1)$")
ax.set_ylabel(r"$\hat J$ (± 2 s.e.)")
ax.set_title("J along one direction of parameter space");

# %% [markdown]
# $J$ rises from about 10 (pushing the wrong way) to over 300 as $\alpha$ grows. In a real network $\theta$
# has thousands of dimensions, and we cannot scan it. We need the *gradient* $\nabla_\theta J$ — and we
# need it *from samples*, because $J$ is an expectation over episodes we can only sample. That is
# Chapter 2.
#
# ## 1.5 A language model is a policy
#
# Now the setting this book is heading for. A language model (LM) with weights $\theta$ assigns, to every
# prefix $x_{<t}$ of tokens, a distribution over the next token: $\pi_\theta(x_t \mid x_{<t})$. Read it as a
# policy:
#
# | RL | language model |
# |---|---|
# | state $s_t$ | the prompt $q$ plus the tokens generated so far, $o_{<t}$ |
# | action $a_t$ | the next token $o_t$ (a choice among $V$ vocabulary entries) |
# | transition $P$ | deterministic: append $o_t$ to the text |
# | episode end | the end-of-sequence token `<eos>` (terminated) or a length limit (truncated) |
# | reward | usually one number at the end: is the answer right? |
#
# The probability of a whole completion $o = (o_0, \dots, o_{L-1})$ given the prompt is the product of
# the per-token probabilities, exactly (1.2) with the dynamics factors all equal to one:
#
# $$\pi_\theta(o \mid q) = \prod_{t=0}^{L-1} \pi_\theta(o_t \mid q, o_{<t}), \qquad
#   \log \pi_\theta(o\mid q) = \sum_t \log \pi_\theta(o_t \mid q, o_{<t}). \tag{1.7}$$
#
# To make this concrete without any download, here is a toy "language model" over a 5-token vocabulary:
# a table of next-token logits indexed by the previous token (a bigram model). The question is fixed,
# "2+2=", and a completion is correct if it reads `4` followed by `<eos>`.

# %%
vocab = ["<eos>", "3", "4", "5", "="]
EOS = 0
gen = torch.Generator().manual_seed(0)
bigram_logits = torch.randn(len(vocab), len(vocab), generator=gen, dtype=torch.float64)
bigram_logits[4, 2] += 3.0   # after "=", the token "4" is likely (a half-trained model)
bigram_logits[2, EOS] += 3.0  # after "4", stopping is likely


def next_token_log_probs(prev_token: int) -> torch.Tensor:
    """log π(· | prefix) of the toy bigram model: depends on the last token only. Shape (V,)."""
    return torch.log_softmax(bigram_logits[prev_token], dim=-1)


def sample_completion(max_len: int, generator: torch.Generator) -> list[int]:
    """Sample tokens after the prompt's last token '=' until <eos> or max_len tokens."""
    tokens, prev = [], 4
    for _ in range(max_len):
        tok = int(torch.multinomial(next_token_log_probs(prev).exp(), 1, generator=generator))
        tokens.append(tok)
        if tok == EOS:
            break
        prev = tok
    return tokens


def completion_log_prob(tokens: list[int]) -> float:
    """log π(o | q) as the sum of per-token log-probabilities, eq. (1.7)."""
    prevs = [4] + tokens[:-1]
    return float(sum(next_token_log_probs(p)[t] for p, t in zip(prevs, tokens)))


def reward(tokens: list[int]) -> float:
    """Verifiable reward: 1 if the completion is exactly '4<eos>', else 0."""
    return float(tokens == [2, EOS])


def show(tokens):
    return "".join(vocab[t] if t != EOS else "⏎" for t in tokens)

# %%
# NBVAL_CHECK_OUTPUT
g = torch.Generator().manual_seed(0)
for _ in range(6):
    o = sample_completion(max_len=3, generator=g)
    print(f"2+2={show(o):<6} log π(o|q) = {completion_log_prob(o):7.3f}   reward = {reward(o):.0f}")

# %% [markdown]
# ### Two views of the same objective
#
# **MDP view (token level).** Each token is an action; the reward arrives at the last step; with
# $\gamma = 1$ the return of the episode is the final reward.
#
# **Bandit view (sequence level).** The whole completion $o$ is *one* action drawn from $\pi_\theta(\cdot\mid q)$,
# and the reward $R(q, o)$ is paid at once. The objective is
#
# $$J(\theta) = \mathbb{E}_{q\sim\mu}\,\mathbb{E}_{o \sim \pi_\theta(\cdot\mid q)}\big[R(q, o)\big]. \tag{1.8}$$
#
# With a deterministic environment and a single terminal reward, the two views give the *same* $J$ — there
# is no discounting to decide and no intermediate state the environment could perturb. Let's check it:
# enumerate every completion of at most 3 tokens (there are few), sum $\pi(o\mid q)R(q,o)$ exactly, and
# compare with a Monte Carlo average of sampled episodes.

# %%
# NBVAL_CHECK_OUTPUT
import itertools

MAX_LEN = 3
completions = []
for length in range(1, MAX_LEN + 1):
    for toks in itertools.product(range(len(vocab)), repeat=length):
        toks = list(toks)
        stops_here = toks[-1] == EOS or length == MAX_LEN  # sampling stops at <eos> or the limit
        if stops_here and EOS not in toks[:-1]:
            completions.append(toks)
probs = torch.tensor([math.exp(completion_log_prob(o)) for o in completions], dtype=torch.float64)
print(f"{len(completions)} distinct completions; their probabilities sum to {probs.sum():.6f}")
J_exact = float(sum(p * reward(o) for p, o in zip(probs, completions)))

g = torch.Generator().manual_seed(1)
N_MC = rl.by_size(small=4000, full=40000)
mc = torch.tensor([reward(sample_completion(MAX_LEN, g)) for _ in range(N_MC)])
print(f"J exact (bandit view, enumeration) = {J_exact:.4f}")
print(f"J Monte Carlo (MDP view, {N_MC} rollouts) = {mc.mean():.4f} ± {mc.std() / N_MC**0.5:.4f}")
assert abs(probs.sum() - 1) < 1e-9
assert abs(mc.mean() - J_exact) < 4 * mc.std() / N_MC**0.5

# %% [markdown]
# The probabilities of all completions sum to one (the length limit and `<eos>` make every sampled path a
# complete "episode"), and the Monte Carlo estimate lands within a few standard errors of the exact value.
#
# Which view should we use? For question → answer tasks with a verifiable final reward — the RLVR setting
# of Part III — the bandit view is natural: one prompt, one sampled answer, one reward, $\gamma$ irrelevant.
# The MDP view becomes useful when we want *per-token* credit (a value per prefix, as in PPO with a critic),
# or when rewards arrive along the way. Both share (1.7): the log-probability of a completion is a sum over
# tokens, which is why token-level code computes sequence-level gradients.

# %%
rl.report_headline(f"random policy on CartPole-v1: J ≈ {stats['mean']:.1f} ± {stats['sem']:.1f} over {stats['n']} episodes")

# %% [markdown]
# ## Summary
#
# * A policy $\pi_\theta(a\mid s)$ is a distribution over actions; a trajectory's probability (1.2) factorises
#   into policy terms (depend on $\theta$) and environment terms (don't).
# * The objective is the expected return $J(\theta) = \mathbb{E}[R(\tau)]$ (1.4). We estimate it by averaging
#   sampled returns, with standard error $\hat\sigma/\sqrt N$ (1.6).
# * Rewards-to-go (1.5) keep only the rewards after an action. Episode ends are *terminated* (the task ended)
#   or *truncated* (we stopped it); both cut the sums.
# * CartPole-v1 pays +1 per step up to 500; a random policy scores a little over 20.
# * A language model is a policy over tokens with deterministic dynamics; for question → answer tasks the
#   whole answer can be treated as one bandit action, and both views give the same $J$ (checked exactly).
#
# ## Exercises
#
# 1. *(Returns by hand.)* For rewards $(0, 0, 1)$ and $\gamma = 0.5$, compute the return and the
#    rewards-to-go by hand, then check with `rl.rewards_to_go`.
# 2. *(Coded.)* Write `my_rewards_to_go(rewards, gamma, terminated, truncated)` with an explicit Python loop
#    and check it: `rl.exercises.check("rewards_to_go", my_rewards_to_go)`.
# 3. *(Error bars.)* How many random-policy episodes do you need for a standard error below 0.1? Use the
#    measured standard deviation above, then verify by simulation.
# 4. *(Landscape.)* Repeat the $J(\alpha)$ scan along $\theta = \alpha(0, 0, 0, 1)$ and along $\alpha(1, 0, 0, 0)$.
#    Which state features matter? Why might the cart-position direction alone fail?
# 5. *(Bandit vs MDP.)* Give the toy model a reward of 0.1 for every `=` token it emits plus 1 for a correct
#    answer. Do the bandit and MDP views still agree? What changes if you discount with $\gamma = 0.9$?
# 6. *(Think.)* Why must the policy be stochastic for the expectation (1.4) to be differentiable in $\theta$
#    when actions are discrete?
