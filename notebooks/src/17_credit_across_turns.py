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
# # 17. Credit across turns: which turn earned the reward
#
# **Goals.** By the end of this chapter you can
# * look at one agentic episode in three ways (every token an action, every turn an action, the whole
#   interaction one action) and compute each view's advantages by hand;
# * compute four credit schemes on a fixed group of four episodes and check them against the library:
#   GRPO's broadcast, per-turn discounted returns, GEM's return batch normalisation and GiGPO's
#   anchor-state step groups;
# * recognise the classic bug of giving every turn the value of one turn;
# * predict, and then measure on ten paired seeds, what a discount $\gamma < 1$ does to a tool-using
#   policy under two baselines: one that compares a turn with every turn of the batch, and one that
#   compares it with the turns taken from the same state;
# * show why a tool bonus and a format penalty that cancel at $\gamma = 1$ (potential-based shaping) leave two
#   credit schemes untouched and make the third lose the tool, and measure it;
# * train on episodes sampled by a policy some steps old, as asynchronous trainers do, correct for it on the
#   model's tokens only, and measure what the lag costs;
# * reproduce a training collapse of the Echo Trap's kind by reusing each batch, and measure what RAGEN's
#   uncertainty filter does to it;
# * name each piece in the agent frameworks, and run the book's environment through TRL's own loop.
#
# **Prerequisites.** Chapter 16 (the environment on token ids, the loss mask, masked GRPO on episodes);
# returns and discounting (chapters 3 and 4); GRPO's group advantage (chapter 9).
#
# **Where this fits.** In chapter 16 every model token of an episode got the episode's one advantage. That
# is the default of every framework, and on a task of one call and one answer it worked. But an episode of
# several turns holds several decisions: to call the tool or answer at once, which call, what to do with the
# tool's answer. One reward at the end says how the episode went, not which decision earned it. *Credit
# assignment across turns* decides how the reward is split between them, and the schemes in use differ in
# two choices: what the return of a turn is (discounted or not) and what it is compared with (the
# baseline). This chapter makes both choices exact and shows that the second one decides whether a
# discount helps or destroys.

# %%
import copy

import matplotlib.pyplot as plt
import numpy as np
import torch

import rlbook as rl
from rlbook.algos.agent import (AgentGRPOConfig, episode_token_advantages, evaluate_agent, multiturn_sft,
                                train_agent_grpo)
from rlbook.envs.text import TOOL_ALPHABET, CalculatorEnv, batch_rollouts, collate_trajectories, rollout
from rlbook.trl_environment import TRLCalculatorEnv
from rlbook.widgets.agent_explorer import agent_explorer, agent_readout, plot_agent

rl.seed_everything(0)
# figures at twice the pixel density (sharp when zoomed)
# %config InlineBackend.figure_formats = ["retina"]
torch.set_num_threads(1)  # as in chapters 9–16: exact repeats on one machine, gentle when it is busy
SIZE = rl.get_size()  # "small" or "full" (RLBOOK_SIZE): this chapter runs the same at both, its runs being the benchmark's
# The model is chapter 16's tiny one (2 layers of 128) and episodes are sampled a few tokens at a time; the
# chapter keeps it on the CPU, where its stored outputs and its benchmark were made, on any machine.
DEVICE = "cpu"
print("size:", SIZE, "| device:", DEVICE)

# %% [markdown]
# ## 17.1 One episode, three views
#
# Take chapter 16's calculator on 2-digit addition, where both paths to the reward exist: the model can
# call the calculator and copy its answer (two turns), or write the sum at once (one turn), which is
# sometimes right. The cell plays four scripted episodes of one problem, a *group* in GRPO's sense:
#
# | episode | turn 0 | turn 1 | reward |
# |---|---|---|---|
# | A | calls the calculator | copies its answer | 1 |
# | B | calls the calculator | miscopies it | 0 |
# | C | answers at once, right | | 1 |
# | D | answers at once, wrong | | 0 |

# %%
tok = rl.lm.build_char_tokenizer(TOOL_ALPHABET)
EOS = tok.eos_token_id
PROBLEM = 3  # the seed of the group's problem


def encode(text):
    return tok(text, add_special_tokens=False).input_ids


def make_env(tool="calculator"):
    return lambda: CalculatorEnv(tok, num_digits=2, tool=tool, max_turns=3)


def scripted(turns):
    """A policy that plays ``turns`` (texts) in order; '{expr}' is the problem, '{sum}' its answer, '{read}' the
    tool's answer, '{less}' one less than the tool's answer (or than the sum, before any call)."""
    env = make_env()()
    expression = tok.decode(env.reset(PROBLEM)[1:])[:-1]  # the prompt after <s>, without its '='
    answer, plan = env.answer, iter(turns)

    def policy(context):
        seen = tok.decode(context[1:])
        read = seen[seen.index("[") + 1: seen.index("]")] if "[" in seen else ""
        text = next(plan).format(expr=expression, sum=answer, read=read, less=str(int(read or answer) - 1))
        return encode(text) + ([] if text.startswith("(") else [EOS])
    return policy


PLANS = {"A": ["({expr})", "{read}"], "B": ["({expr})", "{less}"], "C": ["{sum}"], "D": ["{less}"]}
group = [rollout(make_env()(), scripted(turns), seed=PROBLEM) for turns in PLANS.values()]
batch = collate_trajectories(group, pad_token_id=tok.pad_token_id)
for name, ep in zip(PLANS, group):
    turns = [tok.decode([i for i, t in zip(ep.input_ids, ep.turn_ids) if t == k]) for k in range(ep.num_turns)]
    print(f"{name}: {tok.decode(ep.contexts[0][1:]):<7} " + " | ".join(f"turn {k}: {s:<12}" for k, s in enumerate(turns))
          + f"  turn rewards {ep.turn_rewards}")

# %% [markdown]
# Each turn is the model's tokens and the environment's answer to them (chapter 16's `turn_ids`); the
# reward arrives with the last turn. Three views of the same episodes:
#
# * **Every token is an action** (chapter 8's view of a language model as a policy). The state is
#   everything before the token; the episode has one reward, at the end, so with no discount every
#   token's return is the episode's reward $R_b$. Subtract the group's mean and divide by its spread,
#   and every model token of episode $b$ gets $\hat A_b$: chapter 16's broadcast.
# * **Every turn is an action.** The state $s_{b,k}$ is the context the model was given at turn $k$ (the
#   prompt, then everything so far); the action is the whole turn; the return of turn $k$ is
#   $G_{b,k} = \sum_{j \ge k} \gamma^{\,j-k} r_{b,j}$, with $\gamma$ counted *per turn*. This is the
#   turn-level MDP of GEM (Liu et al. 2025, arXiv:2510.01051) and GiGPO (Feng et al. 2025,
#   arXiv:2505.10978).
# * **The whole interaction is one action**, and the episode a bandit arm: one return $R_b$, one
#   advantage, as GRPO treats a single completion.
#
# With $\gamma = 1$ and the reward only at the end, the three give every model token the same advantage.
# They part in two places. A discount counts *tokens* in the first view (the call's tokens in episode A are
# discounted by the length of everything after them, the calculator's answer included, a length the model
# did not choose) and *turns* in the second. And the baseline: the first and third compare an episode with
# its group; the second can compare a turn with other turns, and which other turns is the choice §17.2 and
# §17.4 are about. The cell computes the returns of each view by hand, with plain Python, at a per-turn
# $\gamma = 0.5$ and, for the token view, a per-token $\gamma = 0.9$, and checks the turn view against
# `rl.discounted_turn_returns`.
#
# Episode A's call earns half its answer's return per turn, and under the per-token discount its first token
# earns less than half its last, because the calculator's answer sits between them. A per-token discount
# therefore charges the model for the length of the *tool's* output; a per-turn one charges it for the
# number of decisions. The agent frameworks discount per token when they discount at all (for GAE; §17.7),
# and the methods built for agents, GEM's and GiGPO's, per turn.

# %%
GAMMA = 0.5
by_hand_turn = [[sum(GAMMA ** (j - k) * ep.turn_rewards[j] for j in range(k, ep.num_turns)) for k in range(ep.num_turns)]
                for ep in group]
library_turn = rl.discounted_turn_returns(batch["turn_rewards"], batch["turn_mask"], GAMMA)
for b, (name, ep, hand) in enumerate(zip(PLANS, group, by_hand_turn)):
    # token view: the return of the model's t-th token is 0.9 ** (tokens after it) · R (reward on the last token)
    after = [len(ep.input_ids) - 1 - t for t, m in enumerate(ep.loss_mask) if m]
    token_returns = [0.9 ** n * ep.reward for n in after]
    print(f"{name}: per-turn returns {[round(g, 3) for g in hand]} | per-token returns of its first and last model "
          f"token {token_returns[0]:.3f}, {token_returns[-1]:.3f} | episode {ep.reward}")
    torch.testing.assert_close(library_turn[b, :ep.num_turns], torch.tensor(hand), rtol=0, atol=1e-7)
first_last = [0.9 ** (len(group[0].input_ids) - 1 - t) for t, m in enumerate(group[0].loss_mask) if m]
rl.claim("its first token earns less than half its last", first_last[0] / first_last[-1], high=0.5)

# %% [markdown]
# ## 17.2 Four credit schemes on one group
#
# A credit scheme turns the group's per-turn rewards into one number per turn, which every model token of
# that turn receives (`rl.turn_values_to_tokens`; 0 on the prompt, the tool's output and the padding).
# Four schemes, from the simplest:
#
# * **Broadcast** (GRPO's outcome supervision, Shao et al. 2024, arXiv:2402.03300, §4.1.2): every turn of
#   episode $b$ gets
#
# $$\hat A_{b,k} = \frac{R_b - \operatorname{mean}_{\text{group}} R}{\operatorname{std}_{\text{group}} R + \epsilon}. \tag{17.1}$$
#
# * **Per-turn discounted returns**, $G_{b,k} = r_{b,k} + \gamma\, G_{b,k+1}$ (17.2), with no baseline:
#   REINFORCE on the turn-level MDP.
# * **Return batch normalisation** (ReBN; GEM, arXiv:2510.01051): every valid turn of every episode of the
#   batch is one sample, and its return is z-scored over all of them at once,
#
# $$\hat A_{b,k} = \frac{G_{b,k} - \mu}{\sigma}, \tag{17.3}$$
#
#   with $\mu$ and $\sigma$ the mean and the standard deviation of $G$ over every turn of the batch. It needs no group of episodes that share a start, and it works with rewards at every turn.
# * **GiGPO** (Feng et al. 2025, arXiv:2505.10978, eqs. 3–8): the episode-level advantage (17.1) plus a
#   step-level one computed within *anchor-state groups*, the turns of the group's episodes that were taken
#   from the same state $\tilde s$:
#
# $$\hat A_{b,k} = \hat A^{E}_b + \omega\,\frac{G_{b,k} - \operatorname{mean}_{S(\tilde s)} G}{\operatorname{std}_{S(\tilde s)} G + \epsilon}. \tag{17.4}$$
#
#   A step group of one turn (a state nobody else visited) adds nothing, so with every state distinct GiGPO
#   is GRPO. `rl.episode_token_advantages` takes a turn's state to be the exact ids the policy was given at
#   that turn (its whole context); the `agent` explorer below takes the last thing the environment said, as
#   GiGPO's environments do, and can group a state an episode visits twice.
#
# The cell computes the four on the group at $\gamma = 0.5$ (the two that use no $\gamma$, broadcast and
# GiGPO's episode level, are unchanged by it), per turn, and checks ReBN's and GiGPO's numbers against a
# computation by hand.

# %%
mask_turns = batch["turn_mask"]
returns = rl.discounted_turn_returns(batch["turn_rewards"], mask_turns, GAMMA)
per_turn = {
    "broadcast (17.1)": rl.group_relative_advantages(batch["rewards"], 4)[:, None].expand_as(returns) * mask_turns,
    "returns (17.2)": returns,
    "ReBN (17.3)": rl.return_batch_normalisation(returns, mask_turns),
}
states = {}
anchors = torch.tensor([[states.setdefault(tuple(ep.contexts[k]), len(states)) if k < ep.num_turns else -1
                         for k in range(returns.shape[1])] for ep in group])
per_turn["GiGPO, ω = 1 (17.4)"] = rl.gigpo_advantages(batch["rewards"], returns, anchors, mask_turns, 4, step_weight=1.0)

valid = returns[mask_turns]
rebn_by_hand = (returns - valid.mean()) / valid.std(correction=0)
torch.testing.assert_close(per_turn["ReBN (17.3)"][mask_turns], rebn_by_hand[mask_turns], rtol=0, atol=1e-6)
episode_level = (batch["rewards"] - batch["rewards"].mean()) / (batch["rewards"].std(correction=0) + 1e-6)
turn0 = returns[:, 0]
step0 = (turn0 - turn0.mean()) / (turn0.std(correction=0) + 1e-6)  # turn 0: every episode starts from the prompt
gigpo_by_hand = torch.stack([episode_level + step0, episode_level + torch.tensor([1.0, -1.0, 0.0, 0.0])], dim=1)
# turn 1: A and B read the same calculator answer (one step group of two, returns 1 and 0 → ±1)
torch.testing.assert_close(per_turn["GiGPO, ω = 1 (17.4)"][mask_turns], gigpo_by_hand[mask_turns], rtol=0, atol=1e-5)
assert anchors[0, 1] == anchors[1, 1] and len(set(anchors[:, 0].tolist())) == 1

print(f"{'':<22}" + "".join(f"{n + str(k):>9}" for n, ep in zip(PLANS, group) for k in range(ep.num_turns)))
for scheme, values in per_turn.items():
    print(f"{scheme:<22}" + "".join(f"{values[b, k].item():>9.3f}" for b, ep in enumerate(group) for k in range(ep.num_turns)))
rebn = per_turn["ReBN (17.3)"]

# %%
fig, ax = plt.subplots(figsize=(8.4, 3.2), dpi=80)
labels = [f"{n}, turn {k}" for n, ep in zip(PLANS, group) for k in range(ep.num_turns)]
width = 0.2
for i, (scheme, values) in enumerate(per_turn.items()):
    heights = [values[b, k].item() for b, ep in enumerate(group) for k in range(ep.num_turns)]
    ax.bar(np.arange(len(labels)) + (i - 1.5) * width, heights, width, label=scheme)
ax.axhline(0, color="black", lw=0.8)
ax.set_xticks(np.arange(len(labels)), labels)
ax.set_ylabel("per-turn value")
ax.set_title(f"one group, four credit schemes (per-turn γ = {GAMMA})")
ax.legend(fontsize=9, ncol=2, loc="lower left")
fig.tight_layout()

# %% [markdown]
# Read the figure turn by turn.
#
# * **Broadcast** cannot tell A's call from A's copy, nor B's call (the same action as A's, from the same
#   state) from B's miscopy: A's call is pushed up and B's identical call pushed down, and only their
#   average over many groups says the call is good.
# * **Returns with no baseline** push up everything that was ever rewarded and leave the failures at 0:
#   REINFORCE without a baseline (chapter 3), with its variance.
# * **ReBN** compares every turn with every turn of the batch. A's call gets 0.19, while its
#   copied answer gets more than its episode's broadcast value: the call's return was discounted once, and
#   the batch mean sits near it. The baseline mixes turns at different depths, which a discount has
#   already made unequal.
# * **GiGPO** compares turn 0 with the other turns 0 (every episode starts from the prompt), so its step
#   level there is a discounted broadcast; and it compares B's miscopy with A's copy, since both read the
#   same calculator answer: B's turn 1 takes a full step-level blame on top of its episode's, and A's
#   copy the matching credit. The call itself, the same action from the same state in A and B, is still
#   judged by how each episode ended: only a state that several episodes reach *after* a shared action
#   separates the action from what came later.

# %%
rl.claim("A's call gets 0.19", rebn[0, 0], 0.19, abs=0.005)
rl.claim("while its copied answer gets more than its episode's broadcast value", rebn[0, 1],
         low=per_turn["broadcast (17.1)"][0, 0].item())
gigpo = per_turn["GiGPO, ω = 1 (17.4)"]
rl.claim("B's turn 1 takes a full step-level blame on top of its episode's", gigpo[1, 1] - per_turn["broadcast (17.1)"][1, 1],
         -1.0, abs=1e-4)

# %% [markdown]
# **Explore.** The `agent` explorer (also `rlbook explore agent`) draws one episode of a group of four on
# a key–value lookup task (follow two links through a table the tool reads) token by token: its segments,
# the loss mask, and the advantage each scheme gives every token as $\gamma$ and $\omega$ move, with what
# the loss's normaliser does to each push. The static figure shows episode A under GiGPO at
# $\gamma = 0.9$, $\omega = 1$.

# %%
fig, axes = plt.subplots(3, 1, figsize=(8.4, 5.2), dpi=80, sharex=True, gridspec_kw={"height_ratios": [1.0, 1.6, 1.2]})
plot_agent(0, "gigpo", 0.9, 1.0, "model", axes=axes)
print(agent_readout(0, "gigpo", 0.9, 1.0, "model")[0]);

# %%
try:
    display(agent_explorer())  # move the sliders in a live notebook
except ImportError:
    print("ipywidgets is not installed: the static figure above shows the explorer's default setting")

# %% [markdown]
# ## 17.3 The classic bug: one turn's values for every turn
#
# The per-turn values must reach each turn's own tokens. The bug that recurs in agent code is to compute
# them per turn and then broadcast *one* turn's tensor over the episode, typically turn 0's, or the last
# step's advantage tensor reused for all steps. The result has the right shape, the right mask and the
# right values on turn 0, and a loss that trains: nothing crashes. The cell shows it on GiGPO's values of
# §17.2 and names the tokens that get the wrong number. (`tests/test_credit.py` holds the regression test:
# `rl.turn_values_to_tokens` against this broadcast.)
#
# Exactly the model's tokens of every turn after the first get the wrong value: A's copied answer is
# credited as if it were A's call, and B's miscopy as if it were B's call. Single-turn episodes, and any test
# that checks only turn 0, cannot see it.

# %%
right = rl.turn_values_to_tokens(gigpo, batch["turn_ids"], batch["loss_mask"])
wrong = rl.broadcast_to_tokens(gigpo[:, 0], batch["loss_mask"])  # the bug: turn 0's value on every model token
differs = (right != wrong)
for b, name in enumerate(PLANS):
    tokens = tok.convert_ids_to_tokens(batch["input_ids"][b][differs[b]].tolist())
    print(f"{name}: tokens with the wrong advantage {''.join(tokens) or '(none)'}")
later_turns = batch["loss_mask"] & (batch["turn_ids"] >= 1)
rl.claim("Exactly the model's tokens of every turn after the first", int((differs == later_turns).all()), 1, abs=0)

# %% [markdown]
# ## 17.4 A discount under two baselines, trained
#
# Now the schemes drive training. The setting is chapter 16's 2-digit experiment: the same warm-up
# (2,000 demonstrations, half calling the calculator, 300 steps), so that the warmed-up model both calls and
# answers at once, and the same masked GRPO (8 problems × 8 episodes a step, 100 steps, learning rate
# $10^{-3}$), with only the credit scheme changed (`AgentGRPOConfig.credit`).
#
# **A prediction first.** Suppose training has gone well: in some batch every episode calls the calculator
# and copies its answer. Every episode has two turns with returns $\gamma$ (the call) and $1$ (the copy).
# Under ReBN the batch's turns hold these two values in equal numbers, so $\mu = (1+\gamma)/2$,
# $\sigma = (1-\gamma)/2$, and
#
# $$\hat A_{\text{call}} = \frac{\gamma - (1+\gamma)/2}{(1-\gamma)/2} = -1 \quad \text{for every } \gamma < 1. \tag{17.5}$$
#
# Every call is pushed *down*, at full strength, in exactly the batches where calling works; at $\gamma = 1$
# every return is 1 and nothing moves. GiGPO compares each call with the other first turns of its group; in
# that batch they are all calls with return $\gamma$, the step group has no spread, and the call gets 0. So
# the prediction: under ReBN a discount will push the policy off the tool even while the tool is what makes
# it right; under GiGPO it will not. (`tests/test_agent_train.py` checks (17.5) on the trainer's own
# advantages.)
#
# The cell trains the warmed-up model three times from one start, on one seed: ReBN at $\gamma = 1$
# (`rebn`), ReBN at $\gamma = 0.5$ (`rebn_gamma`) and GiGPO at $\gamma = 0.5$ (`gigpo_gamma`), and evaluates
# each on 200 held-out problems as chapter 16 did.

# %%
bench = rl.benchmark_results("agent_credit")
GRPO = bench["grpo"]
CREDIT = bench["credit"]  # the benchmark's configurations, by name: the live runs use the same
NUM_DEMOS, WARMUP_STEPS, NUM_DIGITS = 2000, 300, bench["num_digits"]
EVAL = list(range(200))


def demonstrations(n, tool_share):
    """n scripted episodes on problems 10,000, 10,001, ...: the first tool_share of them call the calculator and
    copy its answer, the others write the sum at once (chapter 16's demonstrations, 2-digit)."""
    env, episodes = make_env()(), []
    for i in range(n):
        env.reset(10_000 + i)
        answer = env.answer
        if i < tool_share * n:
            turns = iter([encode("(" + tok.decode(env.reset(10_000 + i)[1:])[:-1] + ")"), encode(answer) + [EOS]])
            episodes.append(rollout(env, lambda context, t=turns: next(t), seed=10_000 + i))
        else:
            episodes.append(rollout(env, lambda context, a=answer: encode(a) + [EOS], seed=10_000 + i))
    return episodes


def report(model):
    sampled = evaluate_agent(model, make_env(), EVAL, greedy=False, generator=torch.Generator().manual_seed(9))
    greedy = evaluate_agent(model, make_env(), EVAL, greedy=True)
    return {"sampled": sampled["accuracy"], "greedy": greedy["accuracy"], "calls": sampled["call_frequency"],
            "turns": sampled["turns_per_episode"], "malformed": sampled["malformed_frequency"]}


warm = rl.lm.build_policy(rl.lm.policy_config(tok, size="small", n_positions=64), seed=0, device=DEVICE)
multiturn_sft(warm, demonstrations(NUM_DEMOS, 0.5), num_steps=WARMUP_STEPS, generator=torch.Generator().manual_seed(0),
              progress=True)
live, runs, trained = {"sft": report(warm)}, {}, {}
for name in ("rebn", "rebn_gamma", "gigpo_gamma"):
    trained[name] = copy.deepcopy(warm)
    runs[name] = train_agent_grpo(trained[name], make_env(), AgentGRPOConfig(**GRPO, **CREDIT[name], seed=0))
    live[name] = report(trained[name])
print(f"{'':>12} {'sampled':>8} {'greedy':>7} {'calls':>6} {'turns':>6} {'malformed':>10}")
for name, r in live.items():
    print(f"{name:>12} {r['sampled']:>8.3f} {r['greedy']:>7.3f} {r['calls']:>6.2f} {r['turns']:>6.2f} {r['malformed']:>10.2f}")
for name in ("gigpo_gamma", "rebn_gamma"):  # what each trained policy writes, greedily, on three held-out problems
    episodes = batch_rollouts(trained[name], [make_env()() for _ in range(3)], [0, 1, 2], greedy=True)
    print(f"{name}: " + " | ".join(tok.decode(ep.input_ids[1:]) for ep in episodes))

# %% [markdown]
# The next cell reads the same three runs, with GRPO's broadcast and GiGPO at $\gamma = 1$ beside them, on
# ten paired seeds from `benchmarks/agent_credit.py` (the seed makes the model and draws its batches; the
# demonstrations and the 200 held-out problems are the same for all), and checks that the run above is one
# a reader can get.
#
# Three results, each over ten paired seeds (the table, the comparisons and the figure below):
#
# * **ReBN at $\gamma = 0.5$ loses the tool, and everything with it.** Its call frequency rose above 0.9
#   within nine steps on every seed, as under the other schemes, and then fell below 0.5 between steps 55
#   and 91; at the end the policy solves almost nothing (the interval against ReBN at $\gamma = 1$ is in the
#   table), and turns per episode fell from 2.0 to 1.1. It did not learn to answer at once instead: most of
#   its episodes end in a malformed turn (the live cell above prints what the policy writes). The push of
#   (17.5) lands on every token of the call, the expression's digits included, so what is unlearned is the
#   whole first turn, not only the choice of `(`. That is the discount's effect on episode length here: fewer
#   turns, by wrecking the turn that made the episode work.
# * **GiGPO at $\gamma = 0.5$ keeps it.** GiGPO at γ = 0.5 against GiGPO at γ = 1: no difference detected at
#   this scale in sampled accuracy, nor in turns per episode. The same discount, measured against the other
#   first turns of the group, costs the call only what the direct answers earn more than it, and on these
#   problems they earn less.
# * **At $\gamma = 1$, between the three baselines**: GiGPO against broadcast, no difference
#   detected, and ReBN against broadcast, no difference detected, in the final accuracy and in the mean reward
#   of the first ten steps (a measure that is not at the ceiling, as the final accuracy nearly is: broadcast
#   reaches 0.95). On a task of one call and one answer there is little for a step-level baseline to separate;
#   GiGPO was designed for, and evaluated on, long-horizon tasks (ALFWorld, WebShop) in which many episodes
#   pass through the same states.
#
# The general form of (17.5): under ReBN a successful call's advantage is $(\gamma - \mu)/\sigma$, negative
# as soon as the batch's mean turn return $\mu$ exceeds $\gamma$. Training makes $\mu$ rise; at
# $\gamma = 0.5$ it crosses $\gamma$ once most episodes succeed, which is when the figure's curves turn.
# A $\gamma$ close to 1 moves the crossing to batches where nearly every episode succeeds (exercise 4).


# %%
KEYS = ("sampled", "greedy", "call_frequency", "turns_per_episode", "malformed_frequency")


def paired_runs(record):
    """A benchmark record's runs by condition, checked paired (every condition on the record's seeds, in the same
    order), and a function giving one condition's values of one field, seed by seed."""
    runs_by = {c: [r for r in record["runs"] if r["condition"] == c] for c in record["conditions"]}
    assert all([r["seed"] for r in runs_by[c]] == record["seeds"] for c in runs_by)
    return runs_by, lambda condition, key: np.array([r[key] for r in runs_by[condition]], dtype=float)


def print_table(record, value, width):
    """Every condition's mean and 95 % interval over the seeds, for the five evaluation fields of KEYS."""
    print(f"{len(record['seeds'])} seeds; " + record["common"])
    print(f"{'':<{width}}" + "".join(f"{k:>22}" for k in ("sampled", "greedy", "calls", "turns", "malformed")))
    for c in record["conditions"]:
        cells = [rl.mean_ci(value(c, k)) for k in KEYS]
        print(f"{c:<{width}}" + "".join(f"{f'{m:.3f} [{lo:.3f}, {hi:.3f}]':>22}" for m, lo, hi in cells))


seeds = bench["seeds"]
by, values = paired_runs(bench)
print_table(bench, values, 12)
cmp = {
    "gamma_rebn": {k: rl.compare(values("rebn_gamma", k), values("rebn", k), names=("rebn_gamma", "rebn")) for k in KEYS},
    "gamma_gigpo": {k: rl.compare(values("gigpo_gamma", k), values("gigpo", k), names=("gigpo_gamma", "gigpo")) for k in KEYS},
    "gigpo_broadcast": rl.compare(values("gigpo", "sampled"), values("broadcast", "sampled"), names=("gigpo", "broadcast")),
    "rebn_broadcast": rl.compare(values("rebn", "sampled"), values("broadcast", "sampled"), names=("rebn", "broadcast")),
}
for c in (cmp["gamma_rebn"]["sampled"], cmp["gamma_rebn"]["turns_per_episode"], cmp["gamma_gigpo"]["sampled"],
          cmp["gamma_gigpo"]["turns_per_episode"], cmp["gigpo_broadcast"], cmp["rebn_broadcast"]):
    print(c)
rl.claim_in_spread("the run above is one a reader can get", live["rebn_gamma"]["sampled"], values("rebn_gamma", "sampled"))
rl.claim_in_spread("the run above is one a reader can get", live["gigpo_gamma"]["sampled"], values("gigpo_gamma", "sampled"))


def early(condition, steps=10):
    """The mean training reward over the first ``steps`` GRPO steps, per seed (how fast a scheme learns)."""
    return np.array([np.mean(r["train_reward"][:steps]) for r in by[condition]])


rose = [next(i + 1 for i, x in enumerate(r["train_call_frequency"]) if x >= 0.9) for r in by["rebn_gamma"]]
fell = [next(i + 1 for i, x in enumerate(r["train_call_frequency"]) if i + 1 > up and x < 0.5)
        for r, up in zip(by["rebn_gamma"], rose)]
print(f"rebn_gamma: call frequency first ≥ 0.9 at steps {rose}, then < 0.5 at steps {fell}")
early_cmp = {a: rl.compare(early(a), early("broadcast"), names=(f"{a}, first 10 steps", "broadcast"))
             for a in ("gigpo", "rebn")}
for c in early_cmp.values():
    print(c)
rl.claim("rose above 0.9 within nine steps on every seed", max(rose), high=9)
rl.claim("fell below 0.5 between steps 55 and 91", min(fell), 55, abs=0)
rl.claim("fell below 0.5 between steps 55 and 91", max(fell), 91, abs=0)
rl.claim_comparison("solves almost nothing", cmp["gamma_rebn"]["sampled"], "<")
rl.claim("solves almost nothing", values("rebn_gamma", "sampled").max(), high=0.01)
rl.claim_comparison("turns per episode fell from 2.0 to 1.1", cmp["gamma_rebn"]["turns_per_episode"], "<")
rl.claim("turns per episode fell from 2.0 to 1.1", values("rebn", "turns_per_episode").mean(), 2.0, abs=0.05)
rl.claim("turns per episode fell from 2.0 to 1.1", values("rebn_gamma", "turns_per_episode").mean(), 1.1, abs=0.05)
rl.claim("most of its episodes end in a malformed turn", values("rebn_gamma", "malformed_frequency").mean(), low=0.5)
rl.claim_comparison("GiGPO at γ = 0.5 against GiGPO at γ = 1: no difference detected at this scale",
                    cmp["gamma_gigpo"]["sampled"], "none")
rl.claim_comparison("nor in turns per episode", cmp["gamma_gigpo"]["turns_per_episode"], "none")
rl.claim_comparison("GiGPO against broadcast, no difference detected", cmp["gigpo_broadcast"], "none")
rl.claim_comparison("GiGPO against broadcast, no difference detected", early_cmp["gigpo"], "none")
rl.claim_comparison("ReBN against broadcast, no difference detected", cmp["rebn_broadcast"], "none")
rl.claim_comparison("ReBN against broadcast, no difference detected", early_cmp["rebn"], "none")
rl.claim("broadcast reaches 0.95", values("broadcast", "sampled").mean(), 0.95, abs=0.005)

# %%
fig, axes = plt.subplots(1, 2, figsize=(8.4, 3.3), sharex=True, dpi=80)
steps = np.arange(1, GRPO["num_steps"] + 1)
styles = {"broadcast": ("C0", "broadcast, γ = 1"), "rebn": ("C2", "ReBN, γ = 1"),
          "rebn_gamma": ("C3", f"ReBN, γ = {CREDIT['rebn_gamma']['gamma']}"),
          "gigpo_gamma": ("C1", f"GiGPO, γ = {CREDIT['gigpo_gamma']['gamma']}")}
for ax, key, title in zip(axes, ("train_call_frequency", "train_reward"), ("call frequency", "reward (share solved)")):
    for name, (color, label) in styles.items():
        curves = np.array([r[key] for r in by[name]])
        for curve in curves:
            ax.plot(steps, curve, color=color, alpha=0.15, lw=0.8)
        ax.plot(steps, curves.mean(axis=0), color=color, lw=2, label=label)
    ax.set_title(f"{title}, training batches")
    ax.set_xlabel("GRPO step")
    ax.set_ylim(-0.03, 1.03)
axes[0].legend(fontsize=9, loc="lower left")
fig.suptitle(f"mean over {len(seeds)} seeds (thick) and each seed (thin)", fontsize=10)
fig.tight_layout()

# %% [markdown]
# ### Shaping that cancels: a tool bonus and a format penalty
#
# An outcome reward says nothing until the last turn, so agent trainers often add *shaping*: small rewards on
# the way. Two common ones pull a tool call in opposite directions. A *tool bonus* pays for having used a
# tool (rLLM's math reward adds its `toolcall_bonus` to a right answer when the episode called a tool; GEM's
# tool wrapper pays per call at once). A *format penalty* charges a turn that does not have the form the task
# asks for; here the task asks for an answer, and each turn spent on a call instead costs $c$. A designer who
# wants neither to favour nor to discourage the tool sets the two equal: $c$ charged on each call, $c$ per
# call paid back with the last turn, whatever the answer (`rl.ShapedRewards`). Every episode's shaping then
# sums to exactly 0.
#
# At $\gamma = 1$ this is *potential-based shaping* (Ng, Harada & Russell 1999, Theorem 1). Each turn's
# shaping reward is a difference of one potential, $F_{b,k} = \Phi(s_{b,k+1}) - \Phi(s_{b,k})$, with
# $\Phi(s) = -c$ times the calls made so far while the episode runs, and $\Phi = 0$ once it is over. The
# shaping from turn $k$ to the end telescopes, and the shaped return of turn $k$ is
#
# $$G^{\text{shaped}}_{b,k} = G_{b,k} - \Phi(s_{b,k}) = G_{b,k} + c\,n_{b,k},$$
#
# with $n_{b,k}$ the calls episode $b$ made before turn $k$: the unshaped return plus a term fixed by the
# state the turn starts from, the same whatever action is taken there. It cannot favour one action over
# another, so the shaping cannot change which policy is best, and the return of every episode's first turn
# ($n = 0$) is its outcome, as if there were no shaping at all.
#
# A credit scheme compares returns with a baseline, though, and what the shaping does depends on what the
# baseline is:
#
# * **Broadcast** uses each episode's total, its outcome: the advantages are the unshaped ones, bit for bit.
# * **GiGPO** uses the total at the episode level; at the step level it compares a turn with turns taken
#   from the same state, which made the same calls: every return of a step group carries the same
#   $c\,n$, and a shift shared by a whole group cancels in its z-score.
# * **ReBN**'s baseline is one number for the whole batch. A call's return is its episode's outcome; the
#   answer after it gets the outcome plus $c$. In a batch where every episode calls and succeeds, the turns
#   hold $1$ and $1 + c$ in equal numbers, $\mu = 1 + c/2$, $\sigma = c/2$, and as in (17.5)
#   the call gets $(1 - \mu)/\sigma = -1$ and the answer $+1$, *for every* $c > 0$. The size of the shaping
#   does not set the size of the push, only when it starts: if every episode calls and a share $s$ succeed,
#   $\mu = s + c/2$, and a successful call is pushed down once $\mu > 1$, that is once fewer than a share
#   $c/2$ of the episodes fail.
#
# A baseline that is a function of the state shifts by $c\,n_{b,k}$ too and leaves every advantage as it was;
# that is why potential-based shaping is safe for actor-critic methods with a learned $V(s)$, and for
# GiGPO's step groups, an estimate of $V$ at the anchor state. A baseline pooled across states does not.
# The cell checks the three schemes on the group of §17.1, shaped with $c = 0.25$, and ReBN's $\pm 1$ on a
# batch of four copies of episode A at three sizes of $c$.

# %%
SHAPE = rl.benchmark_results("agent_shaping")
C = SHAPE["shaping"]["rebn_shaped"]["c"]  # 0.25: the benchmark's middle size; the chapter's live run uses it


def shaped_env(c):
    """Chapter 16's 2-digit calculator with a format penalty c on each call and a tool bonus c per call, paid
    with the last turn."""
    return lambda: rl.ShapedRewards(make_env()(), tool_bonus=c, format_penalty=c)


shaped_group = [rollout(shaped_env(C)(), scripted(turns), seed=PROBLEM) for turns in PLANS.values()]
for name, ep, plain in zip(PLANS, shaped_group, group):
    print(f"{name}: shaped turn rewards {ep.turn_rewards}, total {ep.reward} (unshaped {plain.turn_rewards}, total {plain.reward})")
change = {}
for credit in ("broadcast", "gigpo", "rebn"):
    unshaped_adv = episode_token_advantages(group, 4, credit, gamma=1.0)
    shaped_adv = episode_token_advantages(shaped_group, 4, credit, gamma=1.0)
    change[credit] = (shaped_adv - unshaped_adv).abs().max().item()
    print(f"{credit:>9}, γ = 1: largest change of any token's advantage {change[credit]:.2e}")
for c in (0.05, C, 0.5):
    all_success = [rollout(shaped_env(c)(), scripted(PLANS["A"]), seed=PROBLEM) for _ in range(4)]
    success_batch = collate_trajectories(all_success)
    adv = episode_token_advantages(all_success, 4, "rebn", gamma=1.0)
    call_adv = adv[success_batch["loss_mask"] & (success_batch["turn_ids"] == 0)]
    answer_adv = adv[success_batch["loss_mask"] & (success_batch["turn_ids"] == 1)]
    print(f"ReBN, four copies of A, c = {c}: call {call_adv.mean().item():+.4f}, answer {answer_adv.mean().item():+.4f}; "
          f"a successful call is pushed down once fewer than {c / 2:.1%} of the episodes fail")
    rl.claim("the call gets $(1 - \\mu)/\\sigma = -1$ and the answer $+1$, *for every* $c > 0$", call_adv.max().item(),
             -1.0, abs=1e-4)
    rl.claim("the call gets $(1 - \\mu)/\\sigma = -1$ and the answer $+1$, *for every* $c > 0$", answer_adv.min().item(),
             1.0, abs=1e-4)
rl.claim("the advantages are the unshaped ones, bit for bit", change["broadcast"], 0.0, abs=0)
rl.claim("a shift shared by a whole group cancels in its z-score", change["gigpo"], high=1e-5)

# %% [markdown]
# **A prediction, and a run.** So the pair should do nothing under broadcast, nothing beyond rounding under
# GiGPO, and under ReBN push the call down in the batches where nearly everything succeeds: the collapse of
# §17.4's ReBN at $\gamma = 0.5$, now at $\gamma = 1$, from a shaping designed to be neutral. The thresholds
# say when: at $c = 0.05$ a batch of 64 must have at most one failure, at $c = 0.25$ at most seven, at
# $c = 0.5$ at most fifteen. The cell trains the warmed-up model of §17.4 with ReBN at $\gamma = 1$ on the
# shaped calculator ($c = 0.25$, seed 0), with everything else as before, and evaluates it on the outcome
# alone.

# %%
trained["rebn_shaped"] = copy.deepcopy(warm)
runs["rebn_shaped"] = train_agent_grpo(trained["rebn_shaped"], shaped_env(C), AgentGRPOConfig(**GRPO, **CREDIT["rebn"], seed=0))
live["rebn_shaped"] = report(trained["rebn_shaped"])
for name in ("rebn", "rebn_shaped"):
    r = live[name]
    print(f"{name:>12}: sampled {r['sampled']:.3f}, greedy {r['greedy']:.3f}, calls {r['calls']:.2f}, turns {r['turns']:.2f}, "
          f"malformed {r['malformed']:.2f}")
print("rebn_shaped, call frequency every 10 steps:", [round(h["call_frequency"], 2) for h in runs["rebn_shaped"][::10]])
print("rebn_shaped, outcome reward every 10 steps:", [round(h["outcome"], 2) for h in runs["rebn_shaped"][::10]])
batch_size = GRPO["group_size"] * GRPO["prompts_per_step"]
for c, words in ((0.05, "at most one failure"), (0.25, "at most seven"), (0.5, "at most fifteen")):
    rl.claim(words, int(np.ceil(batch_size * c / 2)) - 1, {"at most one failure": 1, "at most seven": 7,
                                                        "at most fifteen": 15}[words], abs=0)

# %% [markdown]
# The benchmark `benchmarks/agent_shaping.py` runs the same on ten paired seeds, from the warm start of
# §17.4: ReBN at $\gamma = 1$ without shaping (`rebn`, §17.4's run) and with $c = 0.05$, $0.25$ and $0.5$;
# broadcast and GiGPO ($\gamma = 1$, $\omega = 1$) with $c = 0.25$. The cell also checks that
# the run above is one a reader can get. The table and the figure below:
#
# * **Under ReBN the neutral shaping drops the tool, at $c = 0.25$ and at $c = 0.5$.** At $c = 0.25$
#   the call frequency fell from 1.00 to 0.39 on average, and sampled accuracy with it (both intervals against
#   unshaped ReBN are in the table); 7 of the 10 runs ended solving less than 5 % of the problems, with most
#   of their episodes a malformed turn, as in §17.4. At $c = 0.5$: 9 of 10. Every run first learned to call
#   (call frequency at least 0.9 within six steps), and the runs that lost it lost it late: at $c = 0.5$ the
#   call frequency first fell below 0.5 between steps 62 and 99.
#   At $c = 0.05$ against unshaped ReBN: no difference detected at this scale, in accuracy or in calls;
#   $c = 0.25$ against $c = 0.05$ is worse, and $c = 0.5$ against $c = 0.25$: no difference detected at this
#   scale. The thresholds above predict the order: a small $c$ pushes only in batches with at most one failure.
# * **Broadcast does not see it**: all ten shaped runs are the unshaped broadcast runs of §17.4, number for
#   number (the episodes' totals are the same floats, so every step is).
# * **GiGPO does not see it either**, up to rounding: against unshaped GiGPO, no difference detected at this
#   scale; 6 of the 10 runs are identical, and in the others the z-scores' last bits differ and the runs
#   drift apart.
#
# The pair was potential-based, and provably could not change the best policy. It changed what ReBN's
# gradient pointed at, because a potential-based shaping is neutral only to a comparison made between turns
# from the same state. The lesson is §17.4's again, from the other side: with per-turn rewards of any kind,
# the baseline decides who is credited, and a baseline pooled over states turns a difference in *where*
# rewards arrive into a push on the turns that arrive first.

# %%
shape_by, shaped_values = paired_runs(SHAPE)
assert SHAPE["seeds"] == seeds  # paired with §17.4's benchmark too
print_table(SHAPE, shaped_values, 18)
assert all(a[k] == b[k] for a, b in zip(shape_by["rebn"], by["rebn"]) for k in KEYS)  # §17.4's rebn runs, one configuration
shape_cmp = {(a, b, k): rl.compare(shaped_values(a, k), shaped_values(b, k), names=(a, b))
             for a, b in (("rebn_shaped", "rebn"), ("rebn_shaped_small", "rebn"), ("rebn_shaped", "rebn_shaped_small"),
                          ("rebn_shaped_large", "rebn_shaped"), ("rebn_shaped_large", "rebn"))
             for k in ("sampled", "call_frequency")}
gigpo_cmp = rl.compare(shaped_values("gigpo_shaped", "sampled"), values("gigpo", "sampled"), names=("gigpo_shaped", "gigpo"))
for c in [*shape_cmp.values(), gigpo_cmp]:
    print(c)
collapsed = {c: int((shaped_values(c, "sampled") < 0.05).sum()) for c in ("rebn_shaped_small", "rebn_shaped", "rebn_shaped_large")}
identical = {name: sum(all(a[k] == b[k] for k in KEYS) for a, b in zip(shape_by[f"{name}_shaped"], by[name]))
             for name in ("broadcast", "gigpo")}
rose_shaped = [next(i + 1 for i, x in enumerate(r["train_call_frequency"]) if x >= 0.9)
               for c in ("rebn_shaped_small", "rebn_shaped", "rebn_shaped_large") for r in shape_by[c]]
fell_large = [next((i + 1 for i, x in enumerate(r["train_call_frequency"]) if i + 1 > up and x < 0.5), None)
              for r, up in zip(shape_by["rebn_shaped_large"], rose_shaped[-len(seeds):])]  # None: it never fell
fell_large = [step for step in fell_large if step is not None]
print(f"runs ending below 5 % accuracy: {collapsed}; identical to the unshaped run: {identical}")
print(f"call frequency first ≥ 0.9 by step {max(rose_shaped)}; at c = 0.5 first < 0.5 at steps {sorted(fell_large)}")
rl.claim_comparison("Under ReBN the neutral shaping drops the tool", shape_cmp[("rebn_shaped", "rebn", "call_frequency")], "<")
rl.claim_comparison("Under ReBN the neutral shaping drops the tool", shape_cmp[("rebn_shaped_large", "rebn", "call_frequency")], "<")
rl.claim_comparison("the call frequency fell from 1.00 to 0.39 on average", shape_cmp[("rebn_shaped", "rebn", "call_frequency")], "<")
rl.claim("the call frequency fell from 1.00 to 0.39 on average", shaped_values("rebn", "call_frequency").mean(), 1.00, abs=0.005)
rl.claim("the call frequency fell from 1.00 to 0.39 on average", shaped_values("rebn_shaped", "call_frequency").mean(), 0.39,
         abs=0.005)
rl.claim_comparison("and sampled accuracy with it", shape_cmp[("rebn_shaped", "rebn", "sampled")], "<")
rl.claim("7 of the 10 runs ended solving less than 5 % of the problems", collapsed["rebn_shaped"], 7, abs=0)
rl.claim("most of their episodes a malformed turn",
         shaped_values("rebn_shaped", "malformed_frequency")[shaped_values("rebn_shaped", "sampled") < 0.05].min(), low=0.5)
rl.claim("At $c = 0.5$: 9 of 10", collapsed["rebn_shaped_large"], 9, abs=0)
rl.claim("call frequency at least 0.9 within six steps", max(rose_shaped), high=6)
rl.claim("call frequency first fell below 0.5 between steps 62 and 99", min(fell_large), 62, abs=0)
rl.claim("call frequency first fell below 0.5 between steps 62 and 99", max(fell_large), 99, abs=0)
rl.claim("call frequency first fell below 0.5 between steps 62 and 99", len(fell_large), collapsed["rebn_shaped_large"], abs=0)
rl.claim_comparison("At $c = 0.05$ against unshaped ReBN: no difference detected at this scale, in accuracy",
                    shape_cmp[("rebn_shaped_small", "rebn", "sampled")], "none")
rl.claim_comparison("no difference detected at this scale, in accuracy or in calls",
                    shape_cmp[("rebn_shaped_small", "rebn", "call_frequency")], "none")
rl.claim_comparison("$c = 0.25$ against $c = 0.05$ is worse", shape_cmp[("rebn_shaped", "rebn_shaped_small", "sampled")], "<")
rl.claim_comparison("$c = 0.5$ against $c = 0.25$: no difference detected at this",
                    shape_cmp[("rebn_shaped_large", "rebn_shaped", "sampled")], "none")
rl.claim("all ten shaped runs are the unshaped broadcast runs of §17.4", identical["broadcast"], len(seeds), abs=0)
rl.claim_comparison("against unshaped GiGPO, no difference detected at this", gigpo_cmp, "none")
rl.claim("6 of the 10 runs are identical", identical["gigpo"], 6, abs=0)
rl.claim_in_spread("the run above is one a reader can get", live["rebn_shaped"]["sampled"], shaped_values("rebn_shaped", "sampled"))

# %%
fig, axes = plt.subplots(1, 3, figsize=(8.4, 3.0), sharey=True, dpi=80)
unshaped = np.array([r["train_call_frequency"] for r in shape_by["rebn"]]).mean(axis=0)
for ax, (cond, color) in zip(axes, (("rebn_shaped_small", "C2"), ("rebn_shaped", "C1"), ("rebn_shaped_large", "C3"))):
    curves = np.array([r["train_call_frequency"] for r in shape_by[cond]])
    for curve in curves:
        ax.plot(steps, curve, color=color, alpha=0.2, lw=0.8)
    ax.plot(steps, curves.mean(axis=0), color=color, lw=2, label="mean (thin: each seed)")
    ax.plot(steps, unshaped, color="black", lw=1.2, ls="--", label="no shaping, mean")
    ax.set_title(f"c = {SHAPE['shaping'][cond]['c']}: {collapsed[cond]} of {len(seeds)} runs collapse", fontsize=10)
    ax.set_xlabel("GRPO step")
    ax.set_ylim(-0.03, 1.03)
axes[0].set_ylabel("call frequency, training batches")
axes[0].legend(fontsize=8.5, loc="lower left")
fig.suptitle("ReBN at γ = 1 on the calculator with a format penalty c per call and a tool bonus c per call",
             fontsize=10)
fig.tight_layout()

# %% [markdown]
# ## 17.5 Asynchronous rollouts and a staleness bound
#
# An agent's episodes are slow to sample: the model waits for each tool, and one long episode holds up its
# whole batch. So the frameworks sample *asynchronously*: rollout workers keep generating with the weights
# they have while the learner trains, and the learner takes episodes that a policy some steps old produced.
# Each bounds the lag, in its own units (§17.7 gives the sources): TRL's experimental asynchronous GRPO by
# `max_staleness` (4 policy versions by default), SkyRL by `max_staleness_steps` (4), prime-rl, asynchronous
# by default, by `max_off_policy_steps` (8); verl's experimental fully asynchronous trainer by
# `staleness_threshold`, a share of stale samples (0.1); OpenRLHF by the length of its rollout queue,
# `async_queue_size` (1).
#
# Stale episodes are off-policy, and chapter 14's corrections apply to them with one change: they weight the
# model's tokens only. A model token sampled by $\pi_{\text{sampler}}$ gets
#
# $$w_{b,t} = \min\Bigl(\frac{\pi_\theta(x_{b,t+1}\mid x_{b,\le t})}{\pi_{\text{sampler}}(x_{b,t+1}\mid x_{b,\le t})},\ C\Bigr) \tag{17.6}$$
#
# (TIS), and a tool's token gets nothing: neither policy produced it, and its probability under the model is
# not part of the episode's probability. `AgentGRPOConfig.staleness` = $k$ samples step $s$'s episodes with
# the policy of step $s - k$ (the starting weights while $s < k$), and `is_correction` applies (17.6) or
# another of chapter 14's modes; `tests/test_agent_train.py` checks the lag and the weights against a
# computation by hand.
#
# The experiment keeps everything of §17.4 but the lag: the same 2-digit warm-up and masked GRPO with
# broadcast credit, on-policy (`fresh`), with a lag of 2 and 4 steps (`stale2`, `stale4`), with a lag of 4
# and TIS at $C = 2$ (`stale4_tis`), and with a lag of 4 at a quarter of the learning rate (`stale4_slow`).
# The cell runs `fresh` and `stale4` on one seed.

# %%
async_bench = rl.benchmark_results("agent_staleness")
ASYNC = async_bench["async"]  # the benchmark's settings, by name
for name in ("fresh", "stale4"):
    trained[name] = copy.deepcopy(warm)
    runs[name] = train_agent_grpo(trained[name], make_env(), AgentGRPOConfig(**{**GRPO, **ASYNC[name]}, seed=0))
    live[name] = report(trained[name])
    r = live[name]
    print(f"{name:>7}: sampled {r['sampled']:.3f}, greedy {r['greedy']:.3f}, calls {r['calls']:.2f}, "
          f"malformed {r['malformed']:.2f}; call frequency every 10 steps "
          f"{[round(h['call_frequency'], 2) for h in runs[name][::10]]}")

# %% [markdown]
# The next cell reads the five settings on ten paired seeds from `benchmarks/agent_staleness.py` (its
# `fresh` runs are `agent_credit.py`'s `broadcast` runs: one configuration, and on one machine the same
# numbers), checks that the run above is one a reader can get, and the figure draws the call frequency of
# every seed's `stale4` run. Over the ten seeds:
#
# * **A lag of four steps breaks this training**: `stale4` against `fresh` in the table and the comparisons.
#   The call frequency rose above 0.9 and then fell below 0.5 on every seed, on some of them several times;
#   at the end most episodes are malformed. A lag of two steps: no difference detected at
#   this scale, with a wide interval, since one seed of ten collapsed under it too;
#   that is the final accuracy, and on the way its mean training reward fell below one half (the figure).
# * **TIS repairs most of it**: `stale4_tis` against `stale4` in the comparisons; against on-policy training,
#   no difference detected, again with a wide interval (one seed failed).
# * **So does a quarter of the learning rate**: `stale4_slow` against `stale4`; against `fresh`, no difference
#   detected in the final accuracy.
#
# The swing is what a feedback loop with a delay does. The learner is told how the policy of four steps ago
# fared; at this learning rate the policy can go from calling on half the problems to calling on nearly all
# within four steps (§17.4's figure), so the evidence arrives after the policy has moved past what it
# describes, and the learner keeps pushing. A smaller step moves the policy less within the lag; the
# importance weight (17.6) tells the learner, token by token, how far the policy has moved since the episode
# was sampled. These runs show the swing and both repairs; they do not separate this reading from another,
# that AdamW turns the stale batches' signal into full-size steps after the policy has stopped needing them
# (exercise 6 asks how to tell the two apart). For a practitioner the lesson is about units. The frameworks bound staleness in steps
# (4 in TRL and SkyRL, 8 in prime-rl); the learning rate decides how far the policy travels in those steps, so a
# staleness bound says nothing on its own, only together with a step size.

# %%
async_by, async_values = paired_runs(async_bench)
print_table(async_bench, async_values, 12)
async_cmp = {c: rl.compare(async_values(c, "sampled"), async_values(ref, "sampled"), names=(c, ref))
             for c, ref in (("stale2", "fresh"), ("stale4", "fresh"), ("stale4_tis", "stale4"), ("stale4_slow", "stale4"))}
async_cmp["stale4_slow_fresh"] = rl.compare(async_values("stale4_slow", "sampled"), async_values("fresh", "sampled"),
                                            names=("stale4_slow", "fresh"))
for c in async_cmp.values():
    print(c)
rl.claim_in_spread("one a reader can get", live["stale4"]["sampled"], async_values("stale4", "sampled"))
async_cmp["stale4_tis_fresh"] = rl.compare(async_values("stale4_tis", "sampled"), async_values("fresh", "sampled"),
                                           names=("stale4_tis", "fresh"))
print(async_cmp["stale4_tis_fresh"])


def swung(curve):
    """Whether a call-frequency curve rose to 0.9 or more and later fell below 0.5."""
    return any(curve[j] < 0.5 and max(curve[:j]) >= 0.9 for j in range(1, len(curve)))


rl.claim_comparison("A lag of four steps breaks this training", async_cmp["stale4"], "<")
rl.claim("rose above 0.9 and then fell below 0.5 on every seed",
         sum(swung(r["train_call_frequency"]) for r in async_by["stale4"]), len(async_bench["seeds"]), abs=0)
rl.claim("most episodes are malformed", async_values("stale4", "malformed_frequency").mean(), low=0.5)
rl.claim_comparison("A lag of two steps: no difference detected at this scale", async_cmp["stale2"], "none")
rl.claim("one seed of ten collapsed under it too", int((async_values("stale2", "sampled") < 0.1).sum()), 1, abs=0)
rl.claim("its mean training reward fell below one half",
         np.mean([r["train_reward"] for r in async_by["stale2"]], axis=0).min(), high=0.5)
rl.claim_comparison("TIS repairs most of it", async_cmp["stale4_tis"], ">")
rl.claim("TIS repairs most of it", async_cmp["stale4_tis"].mean_diff / (-async_cmp["stale4"].mean_diff), low=0.5)
rl.claim_comparison("against on-policy training, no difference detected", async_cmp["stale4_tis_fresh"], "none")
rl.claim("(one seed failed)", int((async_values("stale4_tis", "sampled") < 0.1).sum()), 1, abs=0)
rl.claim_comparison("So does a quarter of the learning rate", async_cmp["stale4_slow"], ">")
rl.claim_comparison("against `fresh`, no difference detected", async_cmp["stale4_slow_fresh"], "none")

# %%
fig, axes = plt.subplots(1, 2, figsize=(8.4, 3.3), sharex=True, dpi=80)
for r in async_by["stale4"]:
    axes[0].plot(steps, r["train_call_frequency"], lw=0.9, alpha=0.7)
axes[0].plot(steps, np.mean([r["train_call_frequency"] for r in async_by["fresh"]], axis=0), color="black", lw=2.5,
             label="on-policy (fresh), mean")
axes[0].set_title("call frequency, stale4: each seed")
axes[0].legend(fontsize=9, loc="lower right")
for name, color in (("fresh", "black"), ("stale2", "C0"), ("stale4", "C3"), ("stale4_tis", "C2"), ("stale4_slow", "C1")):
    axes[1].plot(steps, np.mean([r["train_reward"] for r in async_by[name]], axis=0), color=color, lw=2, label=name)
axes[1].set_title(f"reward, mean over {len(async_bench['seeds'])} seeds")
axes[1].legend(fontsize=9, loc="lower left", ncol=2)
for ax in axes:
    ax.set_xlabel("GRPO step")
    ax.set_ylim(-0.03, 1.03)
fig.tight_layout()

# %% [markdown]
# ## 17.6 The Echo Trap, and a filter that keeps the groups still in doubt
#
# Agent training runs have a way of failing that looks like success first. Wang et al. (2025, arXiv:2504.20073,
# RAGEN) trained agents on multi-turn games with PPO and GRPO and saw the reward rise and then collapse for
# good. Before the collapse the spread of the rewards within a group and the policy's entropy fell, and the
# gradient norm spiked. They named it the *Echo Trap*: the policy settles on a few patterns that were once
# rewarded and stops trying anything else. Their stabilised variant, StarPO-S, makes three changes: it drops the
# KL penalty, decouples the two clip bounds ($\epsilon_{\text{low}} < \epsilon_{\text{high}}$, chapter 10) and
# adds an *uncertainty filter*. The filter ranks a step's $P$ groups by the standard deviation of their $G$
# rewards and keeps the top $\operatorname{int}(p\,P)$ of them, with $p = 0.25$ in the paper; the other groups
# leave the batch before the loss (`rollout_filter_ratio` = $p$ of `AgentGRPOConfig`, `rl.filter_groups`;
# RAGEN's own code is `_filter_rollout` in `ragen/trainer/agent_trainer.py`). The book's trainer has no KL
# penalty to remove, so the filter is the piece to test.
#
# Why the spread? Under GRPO's normalisation (17.1) a group with no spread in its rewards (every episode solved
# the problem, or none did) has advantage 0 on every token and teaches nothing, and a group with one failure
# among eight gives the failure $-\sqrt{7} \approx -2.65$ and each success $+1/\sqrt{7}$. Once the policy is
# good, nearly every group is of the first kind, and the few of the second kind set the whole step. The filter
# keeps the groups with the most spread, and because the loss is a mean over the kept groups' tokens
# (`token_mean`), their tokens are no longer diluted by the tokens of the groups that teach nothing.
#
# The cell checks the two advantages and applies the filter to one step's batch, eight problems and eight
# episodes each, sampled by the warmed-up policy of §17.4 and by §17.5's on-policy run after 100 steps.

# %%
lone = rl.group_relative_advantages(torch.tensor([1.0] * 7 + [0.0]), 8)
print(f"one failure among eight: the failure gets {lone[-1]:+.3f}, each success {lone[0]:+.3f}")
torch.testing.assert_close(lone[-1], torch.tensor(-7 ** 0.5), atol=1e-5, rtol=0)
torch.testing.assert_close(lone[0], torch.tensor(7 ** -0.5), atol=1e-5, rtol=0)
FILTER = 0.25
filter_seeds = [1_000_000 + j for j in range(GRPO["prompts_per_step"]) for _ in range(GRPO["group_size"])]
for name, policy in (("warmed up", warm), ("fresh, 100 steps", trained["fresh"])):
    episodes = batch_rollouts(policy, [make_env()() for _ in filter_seeds], filter_seeds,
                              generator=torch.Generator().manual_seed(5))
    group_rewards = collate_trajectories(episodes)["rewards"].reshape(GRPO["prompts_per_step"], GRPO["group_size"])
    kept = rl.filter_groups(group_rewards, FILTER)
    spread = group_rewards.std(dim=1)
    print(f"{name:>16}: group means {group_rewards.mean(dim=1).numpy().round(2)}, spreads {spread.numpy().round(2)}; "
          f"keeps groups {kept.nonzero().flatten().tolist()}; {int((spread == 0).sum())} of {len(spread)} groups teach nothing")

# %% [markdown]
# **The experiment** (`benchmarks/agent_echo_trap.py`, ten paired seeds). The Echo Trap needs a run that
# goes on after the task is learned, so these runs take 200 steps, twice the chapter's other runs, from
# §17.4's warm start, with broadcast credit:
#
# * `onepass`: one optimiser step per batch, as everywhere else in this chapter;
# * `reuse4`: four optimiser steps on each batch (`epochs_per_batch` = 4, PPO's epochs; the later ones
#   clipped), the kind of reuse that makes RL on slow agent rollouts cheaper;
# * `reuse4_filter`: `reuse4` with the filter at $p = 0.25$, keeping 2 of the 8 groups;
# * `reuse4_small`: `reuse4` with 2 problems a step instead of 8, so 2 groups in the loss as under the
#   filter, but chosen by nobody. It separates the filter's choice from its smaller batch.
#
# Each step records the reward, the mean in-group standard deviation of the rewards (`reward_std`), the
# policy's entropy on the model's tokens and the norm of the step's gradient (`rl.agent_grpo_step`). A run
# *collapses* when its training reward, averaged over 10 steps, has reached 0.9 and later falls below 0.5.
# Over the ten seeds:
#
# * **Reusing each batch four times breaks training on most seeds.** `reuse4` collapsed on 6 of 10 seeds,
#   between steps 90 and 174; `onepass` collapsed on none. In sampled accuracy `reuse4` is below `onepass`
#   (the comparison below), and 5 of the 6 collapsed runs never came back.
# * **The collapse follows a quiet phase.** In the 20 steps that begin 80 steps before each collapse, the
#   policy was nearly deterministic: its entropy was below 0.05 nats per token and most groups had no reward
#   spread at all. `onepass` reaches the same quiet state and stays in it. In four of the six falls the
#   policy ends in noise, not in an echo: in the ten steps before the collapse the entropy rose above 0.25
#   nats and at least a third of the episodes became malformed. In the other two, over the ten steps either side of the
#   fall, at least 95 % of the episodes still called the tool and fewer than 10 % were malformed: the
#   answers were well formed, and wrong.
# * **Why it is a trap.** In the last 50 steps of the five runs that never came back, at least 95 % of the
#   groups had no reward spread, and on three of them the gradient was exactly zero at every one of those
#   steps. A group without spread has advantage 0 (17.1), so nothing in GRPO's loss can pull the policy back
#   (chapter 16 proved the zero step).
# * **The filter prevents most of it.** `reuse4_filter` against `reuse4`: its interval only just excludes
#   zero, so the size of the rescue is uncertain. Against `onepass`: no difference detected at this scale.
#   On one seed the filtered run ended solving almost nothing, and on two others its training reward fell
#   below 0.5 after reaching 0.9.
# * **It is the choice, not the smaller batch.** `reuse4_small` learned on few seeds, so `reuse4_filter`
#   is above `reuse4_small`. Two groups chosen for their spread teach what two groups drawn at random do not.
# * **A large gradient norm is not the alarm here.** The filtered runs' gradient norms were larger than
#   `reuse4`'s at their median step, on 9 of 10 seeds: the token mean divides by the kept groups' tokens
#   only. Their largest gradient norms were larger too, and most of these runs did not collapse.
#
# These runs show where this setting breaks and what repairs it. They do not show why the filter works.
# It changes which groups train and also how much the kept tokens weigh, since the token mean now divides
# by fewer tokens. Exercise 7 asks for the experiment that tells the two apart.

# %%
echo_bench = rl.benchmark_results("agent_echo_trap")
echo_by, echo_values = paired_runs(echo_bench)


def collapse_step(curve, window=10):
    """The first step at which the reward, averaged over ``window`` steps, is below 0.5 after having reached 0.9
    (None: it never collapsed)."""
    smooth = np.convolve(curve, np.ones(window) / window, mode="valid")
    fallen = np.nonzero((np.maximum.accumulate(smooth) >= 0.9) & (smooth < 0.5))[0]
    return int(fallen[0]) + window if len(fallen) else None


print_table(echo_bench, echo_values, 14)
collapses = {c: [collapse_step(r["train_reward"]) for r in echo_by[c]] for c in echo_by}
for c, steps_at in collapses.items():
    print(f"{c:<14} collapsed at steps {[s for s in steps_at if s is not None]}")
echo_cmp = {(a, b): rl.compare(echo_values(a, "sampled"), echo_values(b, "sampled"), names=(a, b))
            for a, b in (("reuse4", "onepass"), ("reuse4_filter", "reuse4"), ("reuse4_filter", "onepass"),
                         ("reuse4_filter", "reuse4_small"))}
median_norm = {c: np.array([np.median(r["train_grad_norm"]) for r in echo_by[c]]) for c in echo_by}
peak_norm = {c: np.array([max(r["train_grad_norm"]) for r in echo_by[c]]) for c in echo_by}
echo_cmp["median_norm"] = rl.compare(median_norm["reuse4_filter"], median_norm["reuse4"],
                                     names=("reuse4_filter median grad norm", "reuse4"))
echo_cmp["peak_norm"] = rl.compare(peak_norm["reuse4_filter"], peak_norm["reuse4"],
                                   names=("reuse4_filter largest grad norm", "reuse4"))
for c in echo_cmp.values():
    print(c)
echo_fell = [(r, s) for r, s in zip(echo_by["reuse4"], collapses["reuse4"]) if s is not None]
quiet = [(np.mean(r["train_entropy"][s - 80:s - 60]), np.mean(r["train_zero_variance_groups"][s - 80:s - 60]))
         for r, s in echo_fell]
falling = [(np.mean(r["train_entropy"][s - 10:s]), np.mean(r["train_malformed_frequency"][s - 10:s])) for r, s in echo_fell]
print("reuse4, 80 to 60 steps before each collapse (entropy, share of groups without spread):", np.round(quiet, 3).tolist())
print("reuse4, the 10 steps before each collapse (entropy, malformed share):", np.round(falling, 3).tolist())
never_back = sum(r["sampled"] < 0.1 for r, _ in echo_fell)
rl.claim("`reuse4` collapsed on 6 of 10 seeds", len(echo_fell), 6, abs=0)
rl.claim("between steps 90 and 174", min(s for _, s in echo_fell), 90, abs=0)
rl.claim("between steps 90 and 174", max(s for _, s in echo_fell), 174, abs=0)
rl.claim("`onepass` collapsed on none", sum(s is not None for s in collapses["onepass"]), 0, abs=0)
rl.claim_comparison("In sampled accuracy `reuse4` is below `onepass`", echo_cmp[("reuse4", "onepass")], "<")
rl.claim("5 of the 6 collapsed runs never came back", never_back, 5, abs=0)
rl.claim("its entropy was below 0.05 nats per token", max(e for e, _ in quiet), high=0.05)
rl.claim("most groups had no reward spread at all", min(z for _, z in quiet), low=0.5)
rl.claim("`onepass` reaches the same quiet state and stays in it",
         np.mean([r["train_entropy"][-20:] for r in echo_by["onepass"]]), high=0.05)
noisy = [e > 0.25 and m >= 1 / 3 for e, m in falling]
rl.claim("In four of the six falls the policy ends in noise", sum(noisy), 4, abs=0)
quiet_falls = [r_s for r_s, n in zip(echo_fell, noisy) if not n]
rl.claim("at least 95 % of the episodes still called the tool",
         min(np.mean(r["train_call_frequency"][s - 10:s + 10]) for r, s in quiet_falls), low=0.95)
rl.claim("fewer than 10 % were malformed",
         max(np.mean(r["train_malformed_frequency"][s - 10:s + 10]) for r, s in quiet_falls), high=0.1)
gone = [r for r, _ in echo_fell if r["sampled"] < 0.1]
rl.claim("at least 95 % of the groups had no reward spread",
         min(np.mean(r["train_zero_variance_groups"][-50:]) for r in gone), low=0.95)
rl.claim("on three of them the gradient was exactly zero", sum(max(r["train_grad_norm"][-50:]) == 0 for r in gone), 3,
         abs=0)
rl.claim_comparison("The filter prevents most of it", echo_cmp[("reuse4_filter", "reuse4")], ">")
rl.claim("The filter prevents most of it",
         echo_cmp[("reuse4_filter", "reuse4")].mean_diff / -echo_cmp[("reuse4", "onepass")].mean_diff, low=0.5)
rl.claim("its interval only just excludes zero", echo_cmp[("reuse4_filter", "reuse4")].ci_low, 0, abs=0.01)
rl.claim_comparison("Against `onepass`: no difference detected at this scale", echo_cmp[("reuse4_filter", "onepass")],
                    "none")
rl.claim("On one seed the filtered run ended solving almost nothing", int((echo_values("reuse4_filter", "sampled") < 0.1).sum()), 1, abs=0)
rl.claim("on two others its training reward fell below 0.5 after reaching 0.9", sum(s is not None for s in collapses["reuse4_filter"]), 2, abs=0)
rl.claim("`reuse4_small` learned on few seeds", int((echo_values("reuse4_small", "sampled") > 0.5).sum()), high=2)
rl.claim_comparison("`reuse4_filter` is above `reuse4_small`", echo_cmp[("reuse4_filter", "reuse4_small")], ">")
rl.claim("on 9 of 10 seeds", int((median_norm["reuse4_filter"] > median_norm["reuse4"]).sum()), 9, abs=0)
rl.claim_comparison("The filtered runs' gradient norms were larger", echo_cmp["median_norm"], ">")
rl.claim_comparison("Their largest gradient norms were larger too", echo_cmp["peak_norm"], ">")
rl.claim("most of these runs did not collapse", sum(s is None for s in collapses["reuse4_filter"]), low=6)

# %%
fig, axes = plt.subplots(1, 3, figsize=(8.4, 3.5), dpi=80)
echo_steps = np.arange(1, echo_bench["echo"]["reuse4"]["num_steps"] + 1)


def smoothed(curve, window=10):
    """The curve averaged over the last ``window`` steps (fewer at the start)."""
    sums = np.cumsum(np.insert(np.asarray(curve, dtype=float), 0, 0.0))
    lows = np.maximum(np.arange(1, len(sums)) - window, 0)
    return (sums[1:] - sums[lows]) / (np.arange(1, len(sums)) - lows)


for name, color in (("onepass", "black"), ("reuse4", "C3"), ("reuse4_filter", "C2"), ("reuse4_small", "C1")):
    axes[0].plot(echo_steps, smoothed(np.mean([r["train_reward"] for r in echo_by[name]], axis=0)), color=color,
                 lw=1.8, label=name)
axes[0].set_title(f"reward, mean of {len(echo_bench['seeds'])} seeds")
offsets = np.arange(-80, 20)
for key, color, label in (("train_entropy", "C3", "entropy (nats)"), ("train_reward_std", "C0", "reward spread"),
                          ("train_malformed_frequency", "C2", "malformed share")):
    aligned = np.array([[r[key][s + o] if 0 <= s + o < len(r[key]) else np.nan for o in offsets] for r, s in echo_fell])
    axes[1].plot(offsets, np.nanmean(aligned, axis=0), color=color, lw=2, label=label)
axes[1].axvline(0, color="grey", lw=0.8, ls="--")
axes[1].set_title(f"reuse4: {len(echo_fell)} collapses aligned")
axes[1].set_xlabel("steps from the collapse")
axes[1].legend(fontsize=9, loc="upper left")
for r in echo_by["reuse4"]:
    axes[2].plot(echo_steps, smoothed(r["train_reward"]), color="C3", lw=0.9, alpha=0.6)
axes[2].set_title("reward, reuse4: each seed")
for ax in (axes[0], axes[2]):
    ax.set_ylim(-0.03, 1.03)
    ax.set_xlabel("GRPO step (10-step average)")
fig.legend(*axes[0].get_legend_handles_labels(), loc="lower center", ncol=4, fontsize=9, frameon=False)
fig.tight_layout(rect=(0, 0.07, 1, 1))

# %% [markdown]
# ## 17.7 Where this goes at scale
#
# Nothing in this chapter is tied to the book's trainer. The environment contract, the loss mask and the
# per-turn credit carry over to the agent frameworks, under other names. TRL 1.16's `GRPOTrainer` runs the
# multi-turn loop itself when it is given an `environment_factory`: a class whose `reset` starts an episode
# and whose public methods are the tools. `rlbook.trl_environment.TRLCalculatorEnv` is chapter 16's
# calculator in that form, and `tests/test_trl_environment.py` trains the book's tiny model with it for two
# GRPO steps inside TRL, checking that TRL's `tool_mask` equals the book's loss mask token for token. The
# cell plays one episode of each and compares what the two environments say.

# %%
trl_env, book_env = TRLCalculatorEnv(num_digits=2), make_env()()
problem = trl_env.reset(seed=PROBLEM)
book_ids = book_env.reset(PROBLEM)
answer_text = trl_env.calculator(problem[:-1])
book_answer = book_env.step(encode("(" + problem[:-1] + ")"))[0]
print(f"TRL environment: reset(seed={PROBLEM}) -> {problem!r}; calculator({problem[:-1]!r}) -> {answer_text!r}")
print(f"book environment: reset({PROBLEM}) -> {tok.decode(book_ids)!r}; step('({problem[:-1]})') -> {tok.decode(book_answer)!r}")
assert tok.decode(book_ids[1:]) == problem and tok.decode(book_answer) == f"[{answer_text}]"

# %% [markdown]
# The names of this chapter's pieces in five frameworks, read in their source (TRL 1.16.0 as installed;
# verl at commit `b178a3c`, SkyRL at `a956457`, prime-rl at `559b447` with its environments library
# verifiers at `a60a606`, OpenRLHF at `3c3be62`, the commits of the book's "Where next" page; a framework
# can rename a setting in a later release):
#
# | piece | TRL | verl | SkyRL | prime-rl | OpenRLHF |
# |---|---|---|---|---|---|
# | environment | `environment_factory` of `GRPOTrainer` (a class: `reset`, tools as public methods) | `BaseTool`, `BaseInteraction` | `skyrl_gym.Env`, `BaseTextEnv` (`step` returns observations, reward, done) | verifiers' `Env.run(task, agents)`: a whole agent program, not reset/step | `AgentInstanceBase` (`reset`, `step`) |
# | multi-turn loop | `GRPOTrainer._tool_call_loop`, `max_tool_calling_iterations` | `ToolAgentLoop` (`"tool_agent"`) | `SkyRLGymGenerator.agent_loop`, `generator.max_turns` | verifiers' `Harness` | `MultiTurnAgentExecutor` |
# | loss mask $m_t$ | `tool_mask` | `response_mask` | `loss_masks` | `mask` (`TrainingSample`) | `action_mask` |
# | token in, token out | yes | yes | yes | yes | yes |
# | default credit | broadcast (the only one) | broadcast | broadcast (per-turn rewards summed first) | broadcast | broadcast (γ forced to 1 for the group estimators) |
# | per-turn γ, ReBN, GiGPO | none | none (its `gamma` is per token, for GAE) | none (per token) | none | none (per token) |
# | staleness bound | `max_staleness` (experimental asynchronous GRPO) | `staleness_threshold`, a share of samples (experimental) | `max_staleness_steps` | `max_off_policy_steps` | `async_queue_size`, a queue length |
#
# Sources (file and line in each repository at the commit above): TRL `trainer/grpo_trainer.py:266`
# (`environment_factory`), `:1945` (`_tool_call_loop`), `:1950` (`tool_mask`), `:2123` (ids concatenated, no
# re-tokenisation), `:3059` (one advantage per completion); verl `verl/tools/base_tool.py:24`,
# `verl/interactions/base.py:20`, `verl/experimental/agent_loop/tool_agent_loop.py:95`, `:246` and `:373`
# (`response_mask` 1 on the model's ids, 0 on the tool's), `docs/advance/agent_loop.rst:146` (token in,
# token out), `verl/trainer/ppo/core_algos.py:328` (GRPO's scores times `response_mask`); SkyRL
# `skyrl-gym/skyrl_gym/envs/base_text_env.py:17`, `skyrl/train/generators/skyrl_gym_generator.py:140` and
# `:299` (token in, token out), `skyrl/train/generators/base.py:41` (`loss_masks`),
# `skyrl/backends/skyrl_train/utils/ppo_utils.py:1391`; prime-rl `src/prime_rl/orchestrator/algo/routing.py:11`
# (one advantage copied to every sampled token), `src/prime_rl/transports/rollouts/types.py:32`, verifiers
# `verifiers/v1/env.py:76`, `verifiers/v1/harness.py:33`; OpenRLHF `openrlhf/utils/agent.py:18`, `:31` and
# `:151` (observation, action and feedback ids concatenated), `openrlhf/trainer/ppo_utils/samples_generator.py:262`,
# `openrlhf/trainer/ppo_utils/experience_maker.py:299`. The staleness bounds: TRL
# `experimental/async_grpo/async_grpo_config.py:360`; verl
# `verl/experimental/fully_async_policy/config/fully_async_ppo_trainer.yaml:12`; SkyRL
# `skyrl/train/config/config.py:951`; prime-rl `packages/prime-rl-configs/src/prime_rl/configs/orchestrator.py:532`;
# OpenRLHF `openrlhf/cli/train_ppo_ray.py:274`.
#
# The credit rows are the point of this chapter's place in the book. Every framework keeps the sampled
# ids and masks the tools' output, as chapter 16 does; every one gives each model token its episode's one
# advantage, and none offers a per-turn discount or a step-level baseline. Those live in the methods'
# own code: GiGPO in its authors' verl-agent (`gigpo/core_gigpo.py`), ReBN in GEM's training examples
# (github.com/axon-rl/gem, `use_rebn` with a per-turn `gamma`, default 0.9). A reader who adds a per-turn
# discount to a framework adds it to a baseline too, and §17.4 says which baseline it must be.

# %% [markdown]
# ## Summary
#
# * An agentic episode can be read with every token, every turn or the whole interaction as the action.
#   With the reward at the end and no discount all three give every model token the same advantage; they
#   part in what a discount counts (tokens, including the tools' output, or turns) and in what a turn is
#   compared with.
# * Four credit schemes, checked by hand on one group: broadcast (17.1), per-turn returns (17.2), ReBN (17.3)
#   and GiGPO (17.4). Only GiGPO compares a turn with turns taken from the same state, which is what lets it
#   separate a miscopy from a copy after the same call.
# * Per-turn values must reach their own turn's tokens (`rl.turn_values_to_tokens`): turn 0's values on every
#   token are wrong on exactly the model's tokens of every later turn, and nothing crashes.
# * Under ReBN a successful call's advantage is $(\gamma - \mu)/\sigma$, negative once the batch's mean turn
#   return passes $\gamma$. Over ten paired seeds ReBN at $\gamma = 0.5$ first learned to call and then lost
#   the tool on every seed, and solves almost nothing; GiGPO at $\gamma = 0.5$ against GiGPO at $\gamma = 1$:
#   no difference detected. A discount is a price per turn, and the baseline decides who pays it.
# * At $\gamma = 1$, GiGPO and ReBN against broadcast: no difference detected on this one-call task.
# * A format penalty on each call and a tool bonus paid back with the last turn cancel in every episode's
#   return at $\gamma = 1$: potential-based shaping, which cannot change the best policy. Broadcast's ten runs
#   were unchanged number for number; under ReBN, 7 of 10 runs collapsed at $c = 0.25$ (below 5 % solved, the
#   call frequency down from 1.00 to 0.39 on average). Potential-based shaping is neutral to a baseline that
#   is a function of the state, and only to one.
# * Episodes sampled by a policy four steps old broke training at this learning rate on every seed (the call
#   frequency swings and collapses); TIS on the model's tokens, or a quarter of the learning rate, repaired
#   most of it. A staleness bound in steps is a bound on the policy's movement only through the step size.
# * Four optimiser steps on each batch made 6 of 10 runs collapse after the task was learned, out of a quiet,
#   nearly deterministic phase; a collapse into zero reward is permanent under GRPO, since every group then has
#   zero spread. Keeping the 2 groups of 8 with the most reward spread (StarPO-S's filter) prevented most of
#   it, and 2 groups drawn at random did not: the filter's choice matters, not its smaller batch.
# * The agent frameworks keep the sampled ids, mask the tools' output and broadcast one advantage per episode;
#   none offers a per-turn discount. The book's environment runs in TRL's own multi-turn loop
#   (`rlbook.trl_environment`).

# %%
rl.claim("first learned to call and then lost the tool on every seed", max(fell), high=GRPO["num_steps"])
rl.claim_comparison("and solves almost nothing", cmp["gamma_rebn"]["sampled"], "<")
rl.claim_comparison("GiGPO at $\\gamma = 0.5$ against GiGPO at $\\gamma = 1$: no difference detected",
                    cmp["gamma_gigpo"]["sampled"], "none")
rl.claim_comparison("GiGPO and ReBN against broadcast: no difference detected", cmp["gigpo_broadcast"], "none")
rl.claim_comparison("GiGPO and ReBN against broadcast: no difference detected", cmp["rebn_broadcast"], "none")
rl.claim("were unchanged number for number", identical["broadcast"], len(seeds), abs=0)
rl.claim("under ReBN, 7 of 10 runs collapsed", collapsed["rebn_shaped"], 7, abs=0)
rl.claim_comparison("call frequency down from 1.00 to 0.39 on average", shape_cmp[("rebn_shaped", "rebn", "call_frequency")], "<")
rl.claim_comparison("Episodes sampled by a policy four steps old broke training", async_cmp["stale4"], "<")
rl.claim_comparison("or a quarter of the learning rate, repaired", async_cmp["stale4_slow"], ">")
rl.claim_comparison("TIS on the model's tokens", async_cmp["stale4_tis"], ">")
rl.claim("made 6 of 10 runs collapse", len(echo_fell), 6, abs=0)
rl.claim_comparison("prevented most of it", echo_cmp[("reuse4_filter", "reuse4")], ">")
rl.claim_comparison("and 2 groups drawn at random did not", echo_cmp[("reuse4_filter", "reuse4_small")], ">")
rl.report_headline(f"Credit across turns: ReBN at γ = {CREDIT['rebn_gamma']['gamma']} − ReBN at γ = 1, sampled accuracy "
                   f"{cmp['gamma_rebn']['sampled'].mean_diff:+.3f} [{cmp['gamma_rebn']['sampled'].ci_low:+.3f}, "
                   f"{cmp['gamma_rebn']['sampled'].ci_high:+.3f}]; GiGPO at γ = {CREDIT['gigpo_gamma']['gamma']} − GiGPO at γ = 1 "
                   f"{cmp['gamma_gigpo']['sampled'].mean_diff:+.3f} [{cmp['gamma_gigpo']['sampled'].ci_low:+.3f}, "
                   f"{cmp['gamma_gigpo']['sampled'].ci_high:+.3f}] ({len(seeds)} paired seeds)")

# %% [markdown]
# ## Exercises
#
# 1. *(By hand.)* A batch holds $n$ episodes that call the calculator and copy its answer (returns $\gamma$
#    and 1) and $n$ that answer at once and are right (return 1). What advantage does ReBN (17.3) give the
#    calls? For which $\gamma$ is it negative? And what does GiGPO's step level give them, with every
#    episode starting from the same prompt?
# 2. *(Repair ReBN.)* Normalise the returns within each turn index $k$ over the batch instead of over all
#    turns at once. What does this give the calls of (17.5)'s all-success batch, and the group of §17.1?
#    Which of GiGPO's ideas does it borrow, and what does it still get wrong when episodes at the same depth
#    come from different states?
# 3. Check in code that GiGPO reduces to GRPO's broadcast when every anchor state is distinct, and when
#    $\omega = 0$.
# 4. *(Predict, then run.)* (17.5) says the call's advantage in an all-success batch is $-1$ for *every*
#    $\gamma < 1$. GEM's example trainer uses ReBN with a per-turn $\gamma = 0.9$ by default
#    (`use_rebn`, `gamma` in `examples/train_tinker/tinker_train.py` of github.com/axon-rl/gem at commit
#    `4069f2f`). Train the warmed-up model of §17.4 with ReBN at $\gamma = 0.9$ and at $\gamma = 0.99$ for
#    the same 100 steps on one seed. Before running: when, in a batch with some failures, is a successful
#    call pushed down?
# 5. *(By hand, then check.)* At a per-turn $\gamma < 1$ a penalty $c$ on the call and a bonus $c$ with the
#    answer no longer cancel in the first turn's return. For an episode of one call and one answer, which
#    bonus makes the pair potential-based again? Does that rescue ReBN in (17.5)'s all-success batch? Check
#    both with `rl.discounted_turn_returns` and `rl.return_batch_normalisation`.
# 6. *(Design.)* §17.5 offers two readings of why a lag of four steps breaks training at this learning rate:
#    the policy moves past the evidence before the evidence arrives, or the optimiser turns the stale
#    batches' signal into full-size steps after the policy has stopped needing them. Design an experiment, on
#    this chapter's code, whose outcome would differ between the two.
# 7. *(Design.)* §17.6's filter does two things at once: it chooses the groups with the most reward spread,
#    and, because the loss is a token mean over the kept groups, it makes each kept token weigh about
#    $1/p$ times more. Design runs that separate the two, and say what each outcome would mean.

# %% [markdown] tags=["solution"] jp-MarkdownHeadingCollapsed=true
# ## Solutions
#
# ### Solution to exercise 1
#
# The batch's turns hold $n$ values $\gamma$ (the calls) and $2n$ values 1 (the copies and the direct
# answers): $\mu = (\gamma + 2)/3$ and $\sigma = \sqrt 2\,(1-\gamma)/3$. The calls get
# $(\gamma - \mu)/\sigma = -\sqrt 2 \approx -1.41$ for every $\gamma < 1$: negative, and more strongly than
# in (17.5), although the call was as successful as the direct answer. GiGPO's turn-0 step group holds every
# episode (they share the prompt), with returns $\gamma$ for the calls and 1 for the direct answers; the
# calls get $-1$ there too, since at $\gamma < 1$ a call that succeeds *is* worth less than a direct answer
# that succeeds. The difference is what each compares: GiGPO compares the call with the other actions from
# the same state, which is the right question (call, or answer at once?), and it is pushed down only when the
# direct answers do better; ReBN compares it with the turns that come after it. The cell checks both.

# %% tags=["solution"]
n, gamma = 4, 0.5
turn_returns = torch.tensor([[gamma, 1.0]] * n + [[1.0, 0.0]] * n)
turn_mask = torch.tensor([[1, 1]] * n + [[1, 0]] * n)
print("ReBN, the calls:", rl.return_batch_normalisation(turn_returns, turn_mask, eps=0.0)[0, 0].item(),
      "| −√2 =", -(2 ** 0.5))
same_prompt = torch.tensor([[0, 1]] * n + [[0, -1]] * n)
gigpo_step = rl.gigpo_advantages(torch.ones(2 * n), turn_returns, same_prompt, turn_mask, 2 * n, eps=0.0)
print("GiGPO (all rewards 1, so its episode level is 0), the calls:", gigpo_step[0, 0].item())

# %% [markdown] tags=["solution"]
# ### Solution to exercise 2
#
# Within turn index 0 of the all-success batch every return is $\gamma$, within turn index 1 every return
# is 1: no spread at either depth, so every advantage is 0 and nothing moves, as at $\gamma = 1$. Comparing
# a turn only with turns at the same depth is half of GiGPO's step grouping; the other half is that GiGPO
# compares only turns taken from the *same state*. Per-depth normalisation still compares a turn 1 that
# read the calculator's answer with a turn 1 of an episode whose first call went wrong, states that have
# nothing to do with each other.

# %% tags=["solution"]
def depth_normalised(returns, mask):
    out = torch.zeros_like(returns)
    for k in range(returns.shape[1]):
        rows = mask[:, k].bool()
        if rows.sum() > 1 and returns[rows, k].std(correction=0) > 0:
            out[rows, k] = (returns[rows, k] - returns[rows, k].mean()) / returns[rows, k].std(correction=0)
    return out


all_success = torch.tensor([[gamma, 1.0]] * 8)
print("all-success batch:", depth_normalised(all_success, torch.ones(8, 2)).abs().max().item())
print("the group of §17.1, per turn:", depth_normalised(returns, mask_turns)[mask_turns].numpy().round(3))

# %% [markdown] tags=["solution"]
# ### Solution to exercise 3

# %% tags=["solution"]
distinct = torch.arange(returns.numel()).reshape(returns.shape)
episode_only = rl.group_relative_advantages(batch["rewards"], 4)[:, None].expand_as(returns) * mask_turns
for label, kwargs in (("distinct anchors", {"anchor_states": distinct, "step_weight": 1.0}),
                      ("ω = 0", {"anchor_states": anchors, "step_weight": 0.0})):
    got = rl.gigpo_advantages(batch["rewards"], returns, kwargs["anchor_states"], mask_turns, 4,
                              step_weight=kwargs["step_weight"])
    print(label, "| largest difference from broadcast:", (got - episode_only).abs().max().item())

# %% [markdown] tags=["solution"]
# ### Solution to exercise 4
#
# A successful call's advantage is $(\gamma - \mu)/\sigma$: it is pushed down exactly when the batch's
# mean turn return $\mu$ exceeds $\gamma$. With $n_f$ failed episodes of two turns (returns 0) among $n$,
# the others calling and succeeding, $\mu = (1 - n_f/n)(1+\gamma)/2$, which exceeds $\gamma$ when
# $n_f/n < (1-\gamma)/(1+\gamma)$: below a third of the batch failing at $\gamma = 0.5$, below one in
# nineteen at $\gamma = 0.9$, below one in 199 at $\gamma = 0.99$ (a batch of 64 episodes then needs every
# one to succeed). So the discount's push starts later the closer $\gamma$ is to 1, and a policy that
# keeps failing now and then may never feel it within 100 steps; one that becomes nearly perfect will. The
# cell prints the thresholds and runs both settings on seed 0: one seed shows what can happen, and ten, as in
# the benchmark, would say how often.

# %% tags=["solution"]
for gamma in (0.5, 0.9, 0.99):
    print(f"γ = {gamma}: a successful call is pushed down when fewer than {(1 - gamma) / (1 + gamma):.3f} of the "
          f"episodes fail ({64 * (1 - gamma) / (1 + gamma):.2f} of a batch of 64)")
for gamma in (0.9, 0.99):
    model = copy.deepcopy(warm)
    history = train_agent_grpo(model, make_env(), AgentGRPOConfig(**GRPO, credit="rebn", gamma=gamma, seed=0),
                               progress=False)
    r = report(model)
    print(f"ReBN, γ = {gamma}, seed 0: sampled accuracy {r['sampled']:.3f}, calls {r['calls']:.2f}, "
          f"malformed {r['malformed']:.2f}; call frequency every 10 steps {[round(h['call_frequency'], 2) for h in history[::10]]}")

# %% [markdown] tags=["solution"]
# ### Solution to exercise 5
#
# Potential-based shaping at discount $\gamma$ is $F_k = \gamma\,\Phi(s_{k+1}) - \Phi(s_k)$. The call starts
# from the prompt ($\Phi = 0$), so $F_0 = \gamma\,\Phi(s_1) = -c$ gives $\Phi(s_1) = -c/\gamma$; the answer
# ends the episode ($\Phi = 0$), so $F_1 = -\Phi(s_1) = c/\gamma$. The bonus must be $c/\gamma$: discounted
# once, it is worth $c$ at the call. The first turn's return is then the unshaped $\gamma\,o$ ($o$ the
# outcome) and the answer's $o + c/\gamma$, shifted by $-\Phi(s_1)$, a function of the state again. It does
# not rescue ReBN: in the all-success batch the call's advantage is $-1$ with or without the shaping, since
# at $\gamma < 1$ the call's return is already below the answer's (17.5), and the shaping only widens the gap.
# A state-dependent baseline absorbs the shift; a pooled one cannot, at any $\gamma$.

# %% tags=["solution"]
gamma, c = 0.5, 0.25
both_turns = torch.ones(4, 2, dtype=torch.bool)
unshaped_returns = rl.discounted_turn_returns(torch.tensor([[0.0, 1.0]] * 4), both_turns, gamma)
shaped_returns = rl.discounted_turn_returns(torch.tensor([[-c, 1.0 + c / gamma]] * 4), both_turns, gamma)
print("first turn's return, unshaped and shaped:", unshaped_returns[0, 0].item(), shaped_returns[0, 0].item())
print("answer's return, unshaped and shaped:", unshaped_returns[0, 1].item(), shaped_returns[0, 1].item())
print("ReBN, the call, unshaped and shaped:", rl.return_batch_normalisation(unshaped_returns, both_turns)[0, 0].item(),
      rl.return_batch_normalisation(shaped_returns, both_turns)[0, 0].item())

# %% [markdown] tags=["solution"]
# ### Solution to exercise 6
#
# The first reading says the damage is set by how far the policy moves *within the lag*; the second, by what
# the optimiser does with each stale batch. Two measurements separate them. First, measure the movement:
# after every step, the mean KL between the current policy and the sampler's on the episodes of the batch
# (both log-probabilities are already computed in `agent_grpo_step`); if the first reading holds, runs
# collapse once the KL accumulated over $k$ steps passes some level, whatever the mix of $k$ and learning
# rate that produced it, so a grid over $k \in \{1, 2, 4, 8\}$ and four learning rates should line up on that
# one quantity. Second, change the optimiser and keep the movement: plain SGD with a step size chosen so that
# the per-step KL of on-policy training matches AdamW's. If the collapse at $k = 4$ persists under SGD, the
# delay is the cause; if it goes away, Adam's normalisation is. Each cell of such a grid needs its own ten
# paired seeds; at about 15 seconds a run here, the grid above is about an hour and a half on one core.
#
# ### Solution to exercise 7
#
# Keep everything of `reuse4_filter` and change one thing at a time. (a) *Choice without reweighting:*
# filter the groups as before, but divide the loss by the token count of the whole batch (every group's
# tokens), as if the dropped groups were still there with advantage 0; the kept tokens then weigh what they
# weigh in `reuse4`. (b) *Reweighting without choice:* keep every group, but multiply the loss by the batch's
# token count over the token count of its groups with nonzero spread, so the informative tokens weigh what
# they weigh under the filter. Under AdamW a constant factor on the loss nearly cancels, so (b) tests whether
# the factor's change *from step to step* matters. If (a) prevents the collapse and (b) does not, the choice
# is what works; if it is the other way round, the weight is. `reuse4_small` against `reuse4_filter` already
# shows that two groups chosen at random are not enough. Ten paired seeds per arm, at about a minute a run
# here, is twenty minutes on two cores.
