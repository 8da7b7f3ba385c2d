# %% [markdown]
# # 1. The reinforcement-learning objective
#
# **Goals.** By the end of this chapter you can
# * say precisely what a *policy*, a *trajectory*, a *return* and the *objective* $J(\theta)$ are;
# * compute returns and rewards-to-go for a batch of episodes, with the episode ends handled right;
# * estimate $J(\theta)$ by Monte Carlo on CartPole, the running example of Part I, and quote an error bar;
# * see a language model as a policy: tokens are actions, the prefix is the state, and a whole answer
#   can also be seen as *one* action in a bandit;
# * define the value functions $V^\pi$, $Q^\pi$ and the advantage $A^\pi$, derive the Bellman equations
#   and check them exactly on a small MDP (policy evaluation by one linear solve);
# * learn $V^\pi$ from experience with TD(0), the table-sized version of the *critic* used from
#   Chapter 3 on.
#
# **Prerequisites.** Python, PyTorch tensors, expectations and conditional probability, and for §1.7
# a linear system $Ax = b$. No RL background.
#
# **Why start here?** Every algorithm in this book — REINFORCE, PPO, GRPO — is a way to push one number
# up: the expected reward of the policy. If that number is clear, every later formula is "a gradient of
# it", "an estimate of it" or "a safe step on it". If it is fuzzy, the variants look like a zoo.

# %%
import inspect
import math
import time

import matplotlib.pyplot as plt
import numpy as np
import torch

import rlbook as rl

rl.seed_everything(0)
# figures at twice the pixel density (sharp when zoomed)
# %config InlineBackend.figure_formats = ["retina"]
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
# both cut the sum in (1.5), and when we learn value functions (§1.8), only `terminated` means "the
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

# %%
rl.claim("most random episodes end within 30 steps", float((random_returns <= 30).mean()), low=0.5);

# %% [markdown]
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
ax.set_xlabel(r"scale $\alpha$ of the parameters $\theta = \alpha\,(0, 0, 1, 1)$")
ax.set_ylabel("estimated return (± 2 s.e.)")
ax.set_title("expected return along one direction of parameter space");

# %% [markdown]
# $J$ rises from about 10 (pushing the wrong way) to over 300 as $\alpha$ grows (checked just below). In a real network $\theta$
# has thousands of dimensions, and we cannot scan it. We need the *gradient* $\nabla_\theta J$ — and we
# need it *from samples*, because $J$ is an expectation over episodes we can only sample. That is
# Chapter 2.

# %%
rl.claim("from about 10", landscape[0]["mean"], 10, rel=0.3)
rl.claim("to over 300", landscape[-1]["mean"], low=300);

# %% [markdown]
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
# $$\begin{gathered}\pi_\theta(o \mid q) = \prod_{t=0}^{L-1} \pi_\theta(o_t \mid q, o_{<t}),\cr
#   \log \pi_\theta(o\mid q) = \sum_t \log \pi_\theta(o_t \mid q, o_{<t}).\end{gathered} \tag{1.7}$$
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
# ## 1.6 Value functions: $V^\pi$, $Q^\pi$ and $A^\pi$
#
# $J(\theta)$ scores a policy with one number. To improve a policy we also want to know *where* it does
# well or badly: which states are promising, and which actions in them are better than the policy's
# habit. Three functions answer these questions; all three are expectations of the return of §1.2, taken
# from a given starting point and then following $\pi$ (we drop $\theta$ from the notation):
#
# $$V^\pi(s) = \mathbb E_\pi\Big[\sum_{t\ge 0}\gamma^t r_t \,\Big|\, s_0 = s\Big], \tag{1.9}$$
#
# $$Q^\pi(s, a) = \mathbb E_\pi\Big[\sum_{t\ge 0}\gamma^t r_t \,\Big|\, s_0 = s,\ a_0 = a\Big], \tag{1.10}$$
#
# $$A^\pi(s, a) = Q^\pi(s, a) - V^\pi(s). \tag{1.11}$$
#
# * The **state value** $V^\pi(s)$: *how good is it to be in $s$*, if from then on I act with $\pi$?
# * The **action value** $Q^\pi(s, a)$: *how good is it to take $a$ in $s$*, and follow $\pi$ afterwards?
# * The **advantage** $A^\pi(s, a)$: *how much better is $a$ than what $\pi$ does in $s$ on average?*
#   Positive: better than the policy's habit, so make $a$ more likely; negative: less likely.
#
# The objective is the state value averaged over start states, $J(\theta) = \mathbb E_{s_0\sim\rho_0}[V^\pi(s_0)]$.
# Since $V^\pi(s)$ averages over the first action and $Q^\pi(s, a)$ fixes it,
#
# $$\begin{gathered}V^\pi(s) = \sum_a \pi(a\mid s)\,Q^\pi(s, a) = \mathbb E_{a\sim\pi(\cdot\mid s)}\big[Q^\pi(s,a)\big],\cr
#   \mathbb E_{a\sim\pi(\cdot\mid s)}\big[A^\pi(s,a)\big] = 0.\end{gathered} \tag{1.12}$$
#
# The second identity follows from the first: $\sum_a \pi(a\mid s)(Q^\pi(s,a) - V^\pi(s)) = V^\pi(s) - V^\pi(s)$.
# An advantage is therefore *relative*: under the policy's own action choice it averages to zero, and
# some actions must be below average for others to be above it.
#
# For a language model with a 0/1 reward at the end and $\gamma = 1$, these have a concrete reading: $V^\pi$
# of a prefix is the probability that the model, continuing from there, ends with a correct answer;
# $Q^\pi$ of a (prefix, next token) pair is the same probability after committing to that token; and the
# advantage says by how much that token raised or lowered the chance of success. The algorithms of Part II
# weight each action's score by an estimate of $A^\pi$; this section and the next two say what is estimated.
#
# ## 1.7 The Bellman expectation equations
#
# The return from step 0 is the first reward plus $\gamma$ times the return from step 1:
# $\sum_{t\ge0}\gamma^t r_t = r_0 + \gamma\sum_{t\ge0}\gamma^{t} r_{t+1}$. Take the expectation given $s_0 = s$.
# The first action is drawn from $\pi(\cdot\mid s)$, the next state from $P(\cdot\mid s, a)$, and — because the
# future depends on the past only through the current state (the Markov property) — the expected return
# from $s_1 = s'$ onwards is $V^\pi(s')$ again. Writing $r(s, a)$ for the expected reward of taking $a$ in $s$:
#
# $$V^\pi(s) = \sum_a \pi(a\mid s)\Big[r(s,a) + \gamma \sum_{s'} P(s'\mid s, a)\,V^\pi(s')\Big], \tag{1.13}$$
#
# $$Q^\pi(s, a) = r(s,a) + \gamma \sum_{s'} P(s'\mid s, a)\,V^\pi(s'). \tag{1.14}$$
#
# These are the **Bellman expectation equations** (Sutton & Barto 2018, eq. 3.14). (1.14) is (1.10) with
# the same one-step split, and (1.13) is (1.12) with (1.14) inserted. A state that ends the episode
# (terminated, §1.2) is worth 0: nothing more is collected there.
#
# With finitely many states, (1.13) is a *linear system*. Collect the policy's expected reward
# $r_\pi(s) = \sum_a\pi(a\mid s) r(s,a)$ into a vector and its state-to-state transition probabilities
# $P_\pi(s, s') = \sum_a \pi(a\mid s)P(s'\mid s,a)$ into a matrix; then
#
# $$V^\pi = r_\pi + \gamma P_\pi V^\pi \quad\Longleftrightarrow\quad V^\pi = (I - \gamma P_\pi)^{-1} r_\pi. \tag{1.15}$$
#
# For $\gamma < 1$ the matrix $I - \gamma P_\pi$ is always invertible (the rows of $\gamma P_\pi$ sum to at most
# $\gamma$); with $\gamma = 1$ it is invertible when every state reaches a terminal state. Solving (1.15) is
# called **policy evaluation**. An alternative that needs no matrix inverse applies the right-hand side
# repeatedly, $V_{k+1} = r_\pi + \gamma P_\pi V_k$ from $V_0 = 0$ (*iterative policy evaluation*, Sutton &
# Barto 2018, Sec. 4.1); each sweep shrinks the error by a factor $\gamma$.
#
# **Finite horizons.** If episodes are cut after $H$ steps, the value depends on how many steps are left:
# $V_k$ above, after exactly $k$ sweeps, is the value with $k$ steps to go, and a finite-horizon problem has
# a *time-dependent* value $V_t = V_{H-t}$. Chapter 2 uses the corridor MDP with $H = 6$. Here we use its
# **discounted infinite-horizon variant** (`horizon=None`, $\gamma = 0.9$): one value per state, and (1.15)
# holds exactly. The cell below also prints the 6-step values, to show that they differ.
#
# The MDP is `rl.TabularMDP.chain`: states 0–3 in a corridor, start at 0; action 0 moves left, action 1
# right; arriving at state 3 pays 1 and ends the episode; pressing left in state 0 pays a small sure 0.05.
# We evaluate the uniformly random policy, $\pi(\text{left}\mid s) = \pi(\text{right}\mid s) = \tfrac12$,
# in four independent ways: the linear solve (1.15) (`rl.policy_evaluation`), iterative evaluation,
# the MDP's own exact value (`mdp.state_values`), and, in the next cell, sampled episodes.

# %%
print(inspect.getsource(rl.policy_evaluation).split('"""')[0] + "..." +
      inspect.getsource(rl.policy_evaluation).split('"""')[2])

# %%
# NBVAL_CHECK_OUTPUT
GAMMA = 0.9
mdp = rl.TabularMDP.chain(length=4, gamma=GAMMA)  # horizon=None: discounted, infinite horizon
pi_uniform = torch.full((4, 2), 0.5, dtype=torch.float64)
P, r, terminal = mdp.transitions, mdp.rewards, mdp.terminal
V_solve = rl.policy_evaluation(P, r, pi_uniform, GAMMA, terminal)
V_iter = rl.iterative_policy_evaluation(P, r, pi_uniform, GAMMA, terminal, tol=1e-13)
V_mdp = mdp.state_values(pi_uniform)
residual = rl.bellman_expectation_backup(P, r, pi_uniform, V_solve, GAMMA, terminal) - V_solve
Q = rl.action_values_from_state_values(P, r, V_solve, GAMMA, terminal)
A = Q - V_solve[:, None]
print("V^π, linear solve (1.15):      ", V_solve.numpy().round(4))
print("V^π, iterative evaluation:     ", V_iter.numpy().round(4))
print("V^π, the MDP's exact value:    ", V_mdp.numpy().round(4))
print("6-step values V_6 (chapter 2): ", rl.iterative_policy_evaluation(P, r, pi_uniform, GAMMA, terminal, horizon=6).numpy().round(4))
print("solve == iterative == exact (to 1e-10):",
      torch.allclose(V_solve, V_iter, atol=1e-10) and torch.allclose(V_solve, V_mdp, atol=1e-10))
print("Bellman residual max |T^π V − V| < 1e-10:", float(residual.abs().max()) < 1e-10)
print("Q^π (rows: states, columns: left, right):\n", Q.numpy().round(4))
print("A^π:\n", A.numpy().round(4))
print("E_a[Q] == V and E_a[A] == 0 (to 1e-12):",
      torch.allclose((pi_uniform * Q).sum(-1), V_solve, atol=1e-12) and
      torch.allclose((pi_uniform * A).sum(-1), torch.zeros(4, dtype=torch.float64), atol=1e-12))
assert torch.allclose(V_solve, V_iter, atol=1e-10) and torch.allclose(V_solve, V_mdp, atol=1e-10)
assert float(residual.abs().max()) < 1e-10
assert torch.allclose(Q, mdp.action_values(pi_uniform), atol=1e-10)

# %% [markdown]
# Reading the tables: the value rises towards the goal, as it should. "Right" has the positive advantage in
# every state, but in state 0 it is tiny: there the sure 0.05 of pressing left almost matches the
# discounted prospect of walking to the goal with a random policy. Note also that state 3 is worth 0 — we
# never act there.
#
# **A check by sampling.** (1.9) is an expectation over episodes, so it can also be estimated without
# knowing $P$ at all: start many episodes in each state, follow $\pi$, and average the discounted returns
# (the Monte Carlo estimate of §1.3). Episodes are cut after 100 steps; since every reward here is
# non-negative, the discarded tail of an episode still running is worth at most $\gamma^{100}\cdot\max_s V^\pi(s)$
# in expectation, about $2\cdot10^{-5}$, far below the statistical error. Each estimate should land within
# 4 standard errors of the exact value.

# %%
N_MC_V, H_MC = rl.by_size(small=2000, full=20000), 100
starts = (~terminal).to(torch.float64) / (~terminal).sum()  # start uniformly in the non-terminal states
mdp_mc = rl.TabularMDP(P, r, starts, GAMMA, horizon=H_MC, terminal=terminal)
episodes = mdp_mc.sample_trajectories(pi_uniform, 3 * N_MC_V, generator=torch.Generator().manual_seed(0))
returns0 = rl.discounted_returns(episodes.rewards, GAMMA, episodes.terminated)[:, 0]  # return from s_0
rl.claim("about $2\\cdot10^{-5}$", GAMMA**H_MC * float(V_solve.max()), 2e-5, rel=0.25)
print(f"episodes still running at the cut: {int(episodes.mask[:, -1].sum())} of {len(returns0)}")
for s in range(3):
    g_s = returns0[episodes.states[:, 0] == s]
    se = float(g_s.std() / len(g_s) ** 0.5)
    z = (float(g_s.mean()) - float(V_solve[s])) / se
    print(f"state {s}: Monte Carlo {float(g_s.mean()):.4f} ± {se:.4f} over {len(g_s)} episodes;"
          f"  exact {float(V_solve[s]):.4f};  (MC − exact)/s.e. = {z:+.2f}")
    assert abs(z) < 4

# %% [markdown]
# ## 1.8 What a critic learns: TD(0)
#
# The linear solve needs $P$ and $r$; a learning agent has neither, only the transitions it experiences.
# The Monte Carlo check above needs only samples, but it must wait for each episode to end and its
# estimates carry the noise of every reward along the way. **Temporal-difference learning** uses the
# Bellman equation (1.13) instead. After each step $(s, a, r, s')$, the quantity $r + \gamma V(s')$ is a one-sample
# estimate of the right-hand side of (1.13), so we move $V(s)$ a little towards it:
#
# $$V(s) \leftarrow V(s) + \alpha\,\big(\underbrace{r + \gamma V(s') - V(s)}_{\delta,\ \text{the TD error}}\big),
#   \tag{1.16}$$
#
# with $\gamma V(s')$ replaced by 0 when $s'$ terminated the episode. This is **TD(0)** (Sutton & Barto 2018,
# Sec. 6.1). The target uses the current estimate $V(s')$ — it *bootstraps* — so it needs only one step of
# experience, and its noise is the noise of one reward and one transition. In expectation over $a$ and
# $s'$, the update moves $V(s)$ towards the Bellman backup $r_\pi(s) + \gamma (P_\pi V)(s)$, whose only fixed
# point is $V^\pi$. With a step size $\alpha$ that shrinks slowly enough ($\alpha_n = \alpha_0 n^{-0.7}$ for the
# $n$-th visit of a state below: the steps sum to infinity, their squares do not), $V$ converges to
# $V^\pi$; with a constant $\alpha$ it hovers around $V^\pi$ with a noise floor that grows with $\alpha$.
#
# In the library the update (1.16) is one pure function, and a tabular learner applies it along one long
# stream of experience, restarting an episode whenever the goal is reached:

# %%
print(inspect.getsource(rl.td0_update).split('"""')[0] + "..." + inspect.getsource(rl.td0_update).split('"""')[2])

# %% [markdown]
# We run it on the same corridor and policy, with a constant step size and with a decaying one, and
# measure the distance $\lVert V_{\text{TD}} - V^\pi\rVert$ to the exact values of §1.7 as learning proceeds.

# %%
TD_STEPS = rl.by_size(small=30_000, full=200_000)
start = time.perf_counter()
td_runs = {
    r"constant $\alpha = 0.1$": rl.td0_policy_evaluation(
        P, r, pi_uniform, mdp.initial_dist, GAMMA, TD_STEPS, step_size=0.1,
        generator=torch.Generator().manual_seed(0), terminal=terminal, record_every=100),
    r"decaying $\alpha_n = 0.5\,n^{-0.7}$": rl.td0_policy_evaluation(
        P, r, pi_uniform, mdp.initial_dist, GAMMA, TD_STEPS, step_size=0.5, step_size_power=0.7,
        generator=torch.Generator().manual_seed(0), terminal=terminal, record_every=100),
}
td_distance = {name: (run.history - V_solve).norm(dim=1) for name, run in td_runs.items()}
print(f"TD(0): {len(td_runs)} runs of {TD_STEPS} steps in {time.perf_counter() - start:.1f} s")
for name, run in td_runs.items():
    print(f"{rl.plain_text(name):<36} final V {run.values.numpy().round(3)}  error {float(td_distance[name][-1]):.4f}")
print(f"{'exact V^π':<36} {V_solve.numpy().round(3)}")
err_const = td_distance[r"constant $\alpha = 0.1$"]
err_decay = td_distance[r"decaying $\alpha_n = 0.5\,n^{-0.7}$"]
assert float(err_decay[-1]) < 0.03, "TD(0) with a decaying step size should approach V^π"
assert float(err_decay[-1]) < float(err_const[-len(err_const) // 4:].mean()), "the decaying step beats the noise floor"

# %%
fig, ax = plt.subplots(figsize=(5.5, 3.2), dpi=80)
for (name, err), colour in zip(td_distance.items(), ["tab:orange", "tab:blue"]):
    steps = td_runs[name].steps
    ax.loglog(steps[1:], err[1:], color=colour, label=name)
ax.set_xlabel("environment steps (= TD updates)")
ax.set_ylabel(r"distance to exact values $\|V_{TD} - V^\pi\|$")
ax.set_title("TD(0) on the corridor: distance to the exact values")
ax.legend(fontsize=9);

# %% [markdown]
# Both runs close most of the gap within a few hundred steps (the cell below checks that the error after
# 500 steps is under half the initial error). The constant step size then stalls at its
# noise floor, jumping up and down with recent luck; the decaying step size keeps improving. (Try it:
# a smaller constant $\alpha$ lowers the floor but takes longer to get there — the same bias–variance
# trade you will meet again.)

# %%
after_500 = max(float(err[td_runs[name].steps == 500][0] / err[0]) for name, err in td_distance.items())
rl.claim("close most of the gap within a few hundred steps", after_500, high=0.5);

# %% [markdown]
# **This is what the critic learns.** From Chapter 3 on we train a second network $V_\phi(s)$, the *critic*,
# next to the policy: by regression on sampled returns in Chapter 3 (the Monte Carlo target), and on
# targets that bootstrap from $V_\phi$ itself in Chapters 4–7 (the TD error $\delta_t$ and its multi-step
# averages, GAE). A gradient step on $\tfrac12\big(V_\phi(s) - \text{target}\big)^2$ with the target held fixed
# moves $V_\phi(s)$ towards the target — exactly (1.16), with a network in place of a table and the learning
# rate in place of $\alpha$. The policy then uses $V_\phi$ to form advantages (1.11). Because a neural critic
# is never exact, the choice of target trades its error (bias) against the noise of sampled rewards
# (variance): that is the subject of Chapter 4. For language models a critic must score every prefix of
# every answer; GRPO in Chapter 9 avoids training one by comparing several answers to the same prompt.

# %% [markdown]
# ## Summary
#
# * A policy $\pi_\theta(a\mid s)$ is a distribution over actions; a trajectory's probability (1.2) factorises
#   into policy terms (depend on $\theta$) and environment terms (don't).
# * The objective is the expected return $J(\theta) = \mathbb{E}[R(\tau)]$ (1.4). We estimate it by averaging
#   sampled returns, with standard error $\hat\sigma/\sqrt N$ (1.6).
# * Rewards-to-go (1.5) keep only the rewards after an action. Episode ends are *terminated* (the task ended)
#   or *truncated* (we stopped it); both cut the sums.
# * CartPole-v1 pays +1 per step up to 500; a random policy falls far short of that (§1.3 measures it).
# * A language model is a policy over tokens with deterministic dynamics; for question → answer tasks the
#   whole answer can be treated as one bandit action, and both views give the same $J$ (checked exactly).
# * Value functions localise $J$: $V^\pi(s)$ (1.9) scores a state, $Q^\pi(s,a)$ (1.10) an action in it, and the
#   advantage $A^\pi = Q^\pi - V^\pi$ (1.11) says how much better than the policy's average an action is;
#   $V^\pi = \mathbb E_a[Q^\pi]$ and $\mathbb E_a[A^\pi] = 0$ (1.12).
# * The Bellman expectation equations (1.13)–(1.14) split off the first step. On a finite MDP they are linear,
#   and policy evaluation is one solve, $V^\pi = (I-\gamma P_\pi)^{-1}r_\pi$ (1.15): checked against
#   iterative evaluation, the MDP's exact values and Monte Carlo returns. Finite horizons give time-dependent
#   values.
# * TD(0) (1.16) learns $V^\pi$ from single transitions by moving $V(s)$ towards $r + \gamma V(s')$; with a
#   decaying step size it converges to the exact values. A neural critic does the same with a gradient step.
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
# 7. *(Bellman by hand.)* In the corridor of §1.7 take the policy that always goes right. Solve (1.13) by hand
#    for $\gamma = 0.9$, then compute $Q^\pi$ and $A^\pi$ of going left in states 0, 1 and 2 with (1.14). Which
#    left move is least bad, and why? Check with `rl.policy_evaluation`.
# 8. *(Coded.)* Write `my_policy_evaluation(transitions, rewards, probs, gamma)` with plain loops over $s$, $a$,
#    $s'$ that repeats the backup (1.13) until the values stop changing, and check it:
#    `rl.exercises.check("policy_evaluation", my_policy_evaluation)`.
# 9. *(Coded, TD.)* Write `my_td0_update(values, state, reward, next_state, terminated, gamma, step_size)` for
#    (1.16) and check it with `rl.exercises.check("td0_update", my_td0_update)`. Then run
#    `rl.td0_policy_evaluation` on the corridor with constant step sizes 0.02, 0.1 and 0.5. How does the noise
#    floor of the error depend on $\alpha$, and how does the time to reach it?

# %% [markdown] tags=["solution"] jp-MarkdownHeadingCollapsed=true
# ## Solutions

# %% [markdown] tags=["solution"]
# ### Solution to exercise 1
#
# With $\gamma = 0.5$ the return is $0 + 0.5\cdot 0 + 0.25\cdot 1 = 0.25$. The rewards-to-go run backwards with
# (1.5): $\hat R_2 = 1$, $\hat R_1 = 0 + 0.5\cdot 1 = 0.5$, $\hat R_0 = 0 + 0.5\cdot 0.5 = 0.25$. The first one
# equals the return, as it must.

# %% tags=["solution"]
# NBVAL_CHECK_OUTPUT
rtg_ex = rl.rewards_to_go(torch.tensor([[0.0, 0.0, 1.0]]), gamma=0.5)
print("rewards-to-go:", rtg_ex.numpy().round(4))
assert torch.allclose(rtg_ex, torch.tensor([[0.25, 0.5, 1.0]]))

# %% [markdown] tags=["solution"]
# ### Solution to exercise 2
#
# Walk backwards through time with a running sum; at a step that ends an episode (terminated *or* truncated)
# the running sum restarts, so nothing leaks from the next episode into this one.

# %% tags=["solution"]
def my_rewards_to_go(rewards, gamma, terminated=None, truncated=None):
    """(B, T) rewards-to-go by an explicit backward loop over time."""
    ends = torch.zeros_like(rewards, dtype=torch.bool)
    for flags in (terminated, truncated):
        if flags is not None:
            ends = ends | flags.bool()
    out = torch.zeros_like(rewards)
    for b in range(rewards.shape[0]):
        running = 0.0
        for t in reversed(range(rewards.shape[1])):
            if ends[b, t]:
                running = 0.0  # step t is the last of its episode
            running = float(rewards[b, t]) + gamma * running
            out[b, t] = running
    return out


rl.exercises.check("rewards_to_go", my_rewards_to_go);

# %% [markdown] tags=["solution"]
# ### Solution to exercise 3
#
# The standard error is $\hat\sigma/\sqrt N$, so $N \ge (\hat\sigma / 0.1)^2$. The cell computes $\hat\sigma$
# from the 200 episodes of §1.3 and the $N$ it implies — more than ten thousand episodes, because halving the
# error costs four times the samples. Running that many takes a while, so the check simulates a smaller
# batch (the full size runs the whole $N$) and compares its standard error with the $\hat\sigma/\sqrt N$
# prediction.

# %% tags=["solution"]
sigma_hat = float(np.std(random_returns, ddof=1))
n_needed = math.ceil((sigma_hat / 0.1) ** 2)
rl.claim("more than ten thousand episodes", n_needed, low=10_000)
print(f"σ̂ = {sigma_hat:.1f}  →  N ≥ {n_needed} episodes for a standard error below 0.1")
n_sim = rl.by_size(small=2000, full=n_needed)
sim = rl.random_policy_returns(n_sim, seed=1)
sem_sim, sem_pred = float(np.std(sim, ddof=1) / np.sqrt(n_sim)), sigma_hat / np.sqrt(n_sim)
print(f"simulated {n_sim} episodes: s.e. {sem_sim:.3f}; predicted σ̂/√N = {sem_pred:.3f}")
assert 0.7 < sem_sim / sem_pred < 1.4

# %% [markdown] tags=["solution"]
# ### Solution to exercise 4
#
# Along the angular-velocity direction $\alpha(0,0,0,1)$ the return grows with $\alpha$ much as along
# $(0,0,1,1)$: pushing the cart in the direction the pole is rotating keeps it under the pole. Along the
# cart-position direction $\alpha(1,0,0,0)$ the policy ignores the pole entirely. Pushing the cart away from the
# centre ($\alpha > 0$) makes things slightly worse than random; pushing it back ($\alpha < 0$) helps a little,
# because it keeps the cart on the track longer, but nothing here balances the pole. The pole's angle and
# angular velocity carry the information the task needs.

# %% tags=["solution"]
for name, d in [("angular velocity (0,0,0,1)", [0.0, 0.0, 0.0, 1.0]), ("cart position (1,0,0,0)", [1.0, 0.0, 0.0, 0.0])]:
    scan = []
    for alpha in [-4, 0, 4, 16]:
        batch_ex = rl.EpisodeBatcher(N_EVAL, seed=1000).collect(
            logistic_policy(alpha * torch.tensor(d, dtype=torch.float64), torch.Generator().manual_seed(1)))
        scan.append(rl.episode_statistics(batch_ex.episode_returns)["mean"])
    print(f"{name:<28}", "  ".join(f"α={a}: {j:.0f}" for a, j in zip([-4, 0, 4, 16], scan)))

# %% [markdown] tags=["solution"]
# ### Solution to exercise 5
#
# They still agree, for any $\gamma$, as long as the bandit's reward is defined as the episode's (discounted)
# return. The per-token rewards are a deterministic function of the completion, so
# $R(q, o) = \sum_t \gamma^t r_t(o)$ is a well-defined reward for the single action $o$, and
# $\mathbb E_o[R(q,o)]$ is exactly the MDP objective. What changes: the reward is no longer a single verdict at
# the end (it depends on *where* the `=` tokens occur once $\gamma < 1$: earlier ones count more), and the MDP view
# now has genuine per-step credit to assign. The cell checks both $\gamma = 1$ and $\gamma = 0.9$ by enumeration
# against per-step Monte Carlo.

# %% tags=["solution"]
def step_rewards(tokens):
    """0.1 for every '=' emitted, plus 1 at the last step if the completion is exactly '4<eos>'."""
    rs = [0.1 * (t == 4) for t in tokens]
    rs[-1] += reward(tokens)
    return rs


for gamma_ex in (1.0, 0.9):
    ret = lambda toks: sum(gamma_ex**t * x for t, x in enumerate(step_rewards(toks)))
    J_bandit = float(sum(p * ret(o) for p, o in zip(probs, completions)))
    g_ex = torch.Generator().manual_seed(2)
    mc_ex = torch.tensor([ret(sample_completion(MAX_LEN, g_ex)) for _ in range(N_MC)])
    se_ex = float(mc_ex.std() / N_MC**0.5)
    print(f"γ = {gamma_ex}: bandit (enumeration) {J_bandit:.4f};  MDP (Monte Carlo) {float(mc_ex.mean()):.4f} ± {se_ex:.4f}")
    assert abs(float(mc_ex.mean()) - J_bandit) < 4 * se_ex

# %% [markdown] tags=["solution"]
# ### Solution to exercise 6
#
# With discrete actions a deterministic policy picks $a = \arg\max$ of some score that depends on $\theta$. A
# small change of $\theta$ either leaves every choice unchanged — then $J$ does not move and the gradient is 0 —
# or flips a choice, and $J$ jumps. So $J(\theta)$ is piecewise constant: its gradient is zero almost everywhere
# and undefined at the jumps, useless for ascent. A stochastic policy makes the probabilities
# $\pi_\theta(a\mid s)$ smooth functions of $\theta$, and $J(\theta) = \sum_\tau p_\theta(\tau) R(\tau)$ is a sum of
# products of them (1.2), hence differentiable. The actions stay discrete; what varies smoothly is how often
# each is taken.

# %% [markdown] tags=["solution"]
# ### Solution to exercise 7
#
# Going right always, the only reward is the 1 paid on arrival at state 3, so
# $V(2) = 1$, $V(1) = 0 + 0.9\,V(2) = 0.9$, $V(0) = 0.9\,V(1) = 0.81$ and $V(3) = 0$.
# By (1.14), going left once and then right again:
# $Q(0, \text{left}) = 0.05 + 0.9\,V(0) = 0.779$, $Q(1, \text{left}) = 0.9\,V(0) = 0.729$,
# $Q(2, \text{left}) = 0.9\,V(1) = 0.81$; the advantages $Q - V$ are $-0.031$, $-0.171$ and $-0.19$.
# Left is least bad in state 0: it costs only one step of delay (a factor 0.9 on $V(0)$) and pays the
# 0.05 that partly makes up for it. In states 1 and 2 a left step loses two steps of progress.

# %% tags=["solution"]
# NBVAL_CHECK_OUTPUT
right = torch.tensor([[0.0, 1.0]] * 4, dtype=torch.float64)
V_right = rl.policy_evaluation(P, r, right, GAMMA, terminal)
A_right = rl.action_values_from_state_values(P, r, V_right, GAMMA, terminal) - V_right[:, None]
print("V (always right):", V_right.numpy().round(4))
print("A(s, left) for s = 0, 1, 2:", A_right[:3, 0].numpy().round(4))
assert torch.allclose(A_right[:3, 0], torch.tensor([-0.031, -0.171, -0.19], dtype=torch.float64), atol=1e-10)

# %% [markdown] tags=["solution"]
# ### Solution to exercise 8
#
# Iterative policy evaluation with explicit loops; stop when no value moves by more than $10^{-12}$.
# Each sweep shrinks the error by $\gamma$, so this takes a few hundred sweeps for $\gamma$ near 0.95.

# %% tags=["solution"]
def my_policy_evaluation(transitions, rewards, probs, gamma, tol=1e-12):
    """V^π by repeated Bellman backups (1.13), written with loops over s, a and s'."""
    S, A = probs.shape
    v = [0.0] * S
    while True:
        new = [sum(float(probs[s, a]) * (float(rewards[s, a]) +
                                         gamma * sum(float(transitions[s, a, s2]) * v[s2] for s2 in range(S)))
                   for a in range(A)) for s in range(S)]
        change = max(abs(x - y) for x, y in zip(new, v))
        v = new
        if change < tol:
            return torch.tensor(v, dtype=torch.float64)


rl.exercises.check("policy_evaluation", my_policy_evaluation);

# %% [markdown] tags=["solution"]
# ### Solution to exercise 9
#
# The update changes one entry and must not bootstrap past a terminal state. For the experiment: with a
# constant $\alpha$ each update adds noise of size about $\alpha$ times the spread of the TD error, and the
# estimate averages roughly the last $1/\alpha$ updates, so the floor of the error grows with $\alpha$
# (roughly like $\sqrt\alpha$) while the time to reach it shrinks (roughly like $1/\alpha$ steps). Small $\alpha$:
# precise but slow; large $\alpha$: fast but noisy — which is why the decaying schedule of §1.8 starts large
# and shrinks.

# %% tags=["solution"]
def my_td0_update(values, state, reward, next_state, terminated, gamma, step_size):
    """V(s) ← V(s) + α (r + γ(1 − terminated)V(s') − V(s)), on a copy of ``values``."""
    new = values.clone()
    target = reward + (0.0 if terminated else gamma * float(values[next_state]))
    new[state] = values[state] + step_size * (target - values[state])
    return new


rl.exercises.check("td0_update", my_td0_update)
for alpha in (0.02, 0.1, 0.5):
    run = rl.td0_policy_evaluation(P, r, pi_uniform, mdp.initial_dist, GAMMA, TD_STEPS, step_size=alpha,
                                   generator=torch.Generator().manual_seed(0), terminal=terminal, record_every=100)
    err = (run.history - V_solve).norm(dim=1)
    first = int(run.steps[int(torch.nonzero(err < 2 * err[-len(err) // 4:].mean())[0])])
    print(f"α = {alpha:<4}: error floor (mean over the last quarter) {float(err[-len(err) // 4:].mean()):.3f}; "
          f"first within 2× of it after {first} steps")
