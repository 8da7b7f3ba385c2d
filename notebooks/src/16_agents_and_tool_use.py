# %% [markdown]
# # 16. Agents: tool use over several turns, exactly
#
# **Goals.** By the end of this chapter you can
# * write an environment for a language model as Gymnasium writes one for a robot, on token ids:
#   `reset` returns the prompt's ids, `step` takes the ids the model generated and returns the
#   environment's answer, a reward and whether the episode is over;
# * say which tokens of a multi-turn episode are the model's actions, prove that the loss puts no
#   gradient on the others, and show what the loss's normaliser does when it counts the wrong ones;
# * keep a trajectory *token in, token out*, check the extension property that makes it so, and measure
#   what decoding and re-encoding the text does to the importance ratio;
# * warm a small model up on tool-call demonstrations, train it further with masked GRPO on whole
#   episodes, and read the metrics the agent frameworks log (call frequency, failure frequency, turns
#   per episode);
# * test whether the tool is what the model's accuracy rests on, by taking it away.
#
# **Prerequisites.** GRPO on the book's model (chapter 9) and its loss normalisations (chapter 10); the
# importance ratio (chapters 5 and 7).
#
# **Where this fits.** Up to now a completion was one turn: the model wrote, a verifier scored. An *agent*
# writes, reads what the world answers, and writes again: it calls a calculator, a search engine, a code
# interpreter, a shell. In 2026 this is where RL for language models is applied most (TRL's `tools=` and
# `environment_factory`, verl's AgentLoop, SkyRL-Gym, prime-rl's environments, OpenRLHF's agent mode), and
# the questions its users ask most are the ones a small, exact setting answers: which tokens are actions,
# what the loss divides by, why re-tokenising text corrupts a trajectory. This chapter builds the loop
# from the environment up on the book's own model, and gives each turn of an episode the episode's reward;
# how else one reward at the end can become credit for each turn is a question of its own (`rl.credit`).

# %%
import copy

import matplotlib.pyplot as plt
import numpy as np
import torch

import rlbook as rl
from rlbook.algos.agent import (
    AgentGRPOConfig,
    episode_log_probs,
    evaluate_agent,
    multiturn_sft,
    train_agent_grpo,
)
from rlbook.envs.text import (
    TOOL_ALPHABET,
    CalculatorEnv,
    batch_rollouts,
    collate_trajectories,
    rollout,
    samples_from_turns,
)

rl.seed_everything(0)
# figures at twice the pixel density (sharp when zoomed)
# %config InlineBackend.figure_formats = ["retina"]
torch.set_num_threads(1)  # as in chapters 9–15: exact repeats on one machine, gentle when it is busy
SIZE = rl.get_size()  # "small" or "full" (RLBOOK_SIZE): this chapter runs the same at both, its runs being the benchmark's
# The models here are tiny (2 layers of 128) and an episode is sampled turn by turn, a few tokens at a time;
# this chapter keeps them on the CPU, where its stored outputs and its benchmark were made, on any machine.
DEVICE = "cpu"
print("size:", SIZE, "| device:", DEVICE)

# %% [markdown]
# ## 16.1 The environment, on token ids
#
# Gymnasium's contract (Towers et al. 2024, arXiv:2407.17032) is two calls: `reset()` starts an episode
# and returns the first observation; `step(action)` applies an action and returns the next observation,
# a reward, `terminated` (the episode ended on the task's own terms) and `truncated` (it was cut off by a
# budget). A text environment keeps the contract and changes the types: observations and actions are
# lists of **token ids**.
#
# | call | in | out |
# |---|---|---|
# | `reset(seed)` | a problem's seed | the prompt's ids |
# | `step(action_ids)` | the ids the model generated this turn, ending with a stop token | the environment's answer as ids (empty when the episode ends), reward, terminated, truncated, info |
#
# The book's first environment is a calculator task. The prompt is an addition of two 4-digit numbers,
# `<s>1234+5678=`. The model may write a tool call, `(1234+5678)`, which ends its turn (`)` is a stop
# token); the environment answers `[6912]` and the model's next turn begins. A turn that ends with `</s>`
# after digits is an answer: reward 1 if it is the sum, 0 otherwise, and the episode is over. Anything
# else (a malformed turn, three turns without an answer) ends it with reward 0. Every character is one
# token of the book's character tokenizer (chapter 8), here over the alphabet `0123456789+*=:()[]`.
#
# Why 4-digit addition? Because the experiment has to be honest: the tool must be *necessary*. §16.3 shows
# that the book's small model, trained on thousands of worked examples, does not learn to add 4-digit
# numbers in its head at this budget, while the same model with the calculator does. (A calculator that a
# model can do without teaches nothing about tool use: every gain could come from the model's own skill.)
#
# The cell runs one episode with a scripted policy, the demonstration policy of §16.3: call the tool on
# the prompt's expression, then copy its answer. It prints the episode's ids with the two things a trainer
# must know about each: whether the model produced it (the **loss mask**) and which turn it belongs to.

# %%
tok = rl.lm.build_char_tokenizer(TOOL_ALPHABET)
EOS = tok.eos_token_id


def encode(text):
    return tok(text, add_special_tokens=False).input_ids


def tool_user(context):
    """The demonstration policy: call the calculator on the prompt, then copy its answer."""
    seen = tok.decode(context[1:])  # the text after <s>
    if "[" not in seen:
        return encode("(" + seen[:-1] + ")")  # the prompt without its '='
    return encode(seen[seen.index("[") + 1: seen.index("]")]) + [EOS]


def make_env(tool="calculator"):
    return lambda: CalculatorEnv(tok, num_digits=4, tool=tool, max_turns=3)


def actions(ep):
    """The ids the model generated in each turn of an episode."""
    return [[i for i, t, m in zip(ep.input_ids, ep.turn_ids, ep.loss_mask) if t == k and m] for k in range(ep.num_turns)]


episode = rollout(make_env()(), tool_user, seed=2)
# the episode's ids in runs of equal (loss mask, turn): who wrote them and in which turn
print(f"{'positions':<10} {'tokens':<14} {'loss_mask':>9} {'turn_ids':>8}  written by")
start = 0
for pos in range(1, len(episode.input_ids) + 1):
    if pos == len(episode.input_ids) or (episode.loss_mask[pos], episode.turn_ids[pos]) != (
            episode.loss_mask[start], episode.turn_ids[start]):
        ids = episode.input_ids[start:pos]
        who = "the model" if episode.loss_mask[start] else "the environment"
        print(f"{f'{start}–{pos - 1}':<10} {''.join(tok.convert_ids_to_tokens(ids)):<14} "
              f"{episode.loss_mask[start]:>9} {episode.turn_ids[start]:>8}  {who}")
        start = pos
print("turn rewards:", episode.turn_rewards, "| terminated:", episode.terminated, "| truncated:", episode.truncated)

# %% [markdown]
# Read the table from the top. The prompt (turn −1) is the environment's. The model's first turn is the call
# `(8848+6487)` (mask 1, turn 0); the calculator's answer `[15335]` belongs to turn 0 too, since that action
# caused it, but has mask 0: the model did not write it. The second turn, `15335</s>`, is the model's again,
# and it earns the reward. The episode's ids are the concatenation of all of it, and *nothing was decoded
# and re-encoded on the way*: the environment read the model's ids (it decodes them to evaluate the
# expression, and returns ids of its own), and the trajectory kept the ids. §16.4 shows why that matters.
#
# The per-turn rewards are `[0, 1]`: zero for the call, one for the answer. Summed, they are the
# episode's reward, what GRPO compares within a group. (Other ways to share it among the turns are in
# `rl.credit`.)

# %%
# NBVAL_CHECK_OUTPUT
env = make_env()()
prompt = env.reset(seed=2)
print(tok.decode(prompt), "| answer:", env.answer)
observation, reward, terminated, truncated, info = env.step(encode("(8848+6487)"))
print("after the call:", tok.decode(observation), reward, terminated, truncated, info)
observation, reward, terminated, truncated, info = env.step(encode("15334") + [EOS])
print("a wrong answer:", observation, reward, terminated, truncated, info)
try:
    env.step(encode("1"))
except RuntimeError as error:
    print("after the end:", error)

# %% [markdown]
# ## 16.2 Which tokens are actions: the loss mask, proved
#
# An episode is one sequence of ids, and one forward pass of the model scores all of it. But only some of
# those ids are the policy's *actions*: the ones it sampled. The prompt and the tool's answers are the
# environment's, part of the state the next action is conditioned on. The policy gradient of an episode
# with advantage $\hat A$ (chapter 9's group-relative advantage, one number per episode) is
#
# $$\nabla_\theta J = \mathbb E\Bigl[\hat A \sum_{t} m_t\, \nabla_\theta \log \pi_\theta(x_t \mid x_{<t})\Bigr], \tag{16.1}$$
#
# with $m_t = 1$ on the model's tokens and $0$ on the others: the score function of a trajectory is the sum
# of the scores of the actions *the policy took*. A tool's answer is a draw from the environment, not from
# $\pi_\theta$, and its log-probability under the model is not part of the trajectory's probability. Putting
# it in the loss would train the model to *predict the calculator*: to raise the probability of whatever
# the tool said after a good episode and lower it after a bad one.
#
# In code, (16.1) is the mask `loss_mask` (1 on the model's tokens), multiplied into the per-token loss
# before it is summed. The cell checks the claim exactly: it builds a batch of four demonstration episodes,
# gives them advantages $+1, -1, +1, -1$, backpropagates the masked loss to the **logits** and reads the
# gradient there. At every position whose next token is the prompt's, a tool output's or padding, the
# gradient is zero, not small: exactly zero, since those positions are multiplied by $m_t = 0$ before
# anything else touches them.

# %%
policy = rl.lm.build_policy(rl.lm.policy_config(tok, size="small", n_positions=64), seed=0, device=DEVICE)
demo_episodes = [rollout(make_env()(), tool_user, seed=s) for s in range(4)]
batch = collate_trajectories(demo_episodes, pad_token_id=tok.pad_token_id)
advantages = torch.tensor([1.0, -1.0, 1.0, -1.0])

logits = policy(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"].long()).logits
logits.retain_grad()
log_probs = torch.log_softmax(logits[:, :-1].float(), dim=-1).gather(-1, batch["input_ids"][:, 1:, None])[..., 0]
mask = batch["loss_mask"][:, 1:].float()  # position t scores token t + 1: the mask of the *next* token
loss = -(advantages[:, None] * log_probs * mask).sum() / mask.sum()
loss.backward()

grad_norm = logits.grad[:, :-1].norm(dim=-1)  # (B, T − 1): the gradient's size at each scoring position
on_actions = grad_norm[mask.bool()]
elsewhere = grad_norm[~mask.bool()]
print(f"model tokens: {int(mask.sum())} of {int(batch['attention_mask'][:, 1:].sum())} scored tokens "
      f"({mask.sum() / batch['attention_mask'][:, 1:].sum():.0%})")
print(f"gradient at the logits that score a model token: smallest norm {on_actions.min():.2e}")
print(f"gradient at every other position: largest norm {elsewhere.max():.1f}")
rl.claim("exactly zero, since those positions", elsewhere.abs().max(), 0.0, abs=0.0, bounds=False)
assert on_actions.min() > 0

# %% [markdown]
# The mask is shifted by one: the logits at position $t$ score token $t + 1$, so `loss_mask[:, 1:]` is the
# mask of the scores. Shifting it the other way is an easy slip in a hand-written multi-turn loss: the stop
# token `)` of a call would lose its gradient while the `[` the environment wrote after it would get one
# (exercise 2). `rlbook`'s `episode_log_probs` and the trainers below do the shift in one place, and a
# test checks it the way the cell does.
#
# ### What the normaliser counts
#
# The loss above divides by the number of *model* tokens, $\sum_t m_t$: DAPO's token mean (chapter 10),
# taken over actions. A common slip is to divide by all the tokens of the completion, the tool's output
# included, as a single-turn trainer does when it is handed multi-turn episodes without being told which
# tokens are whose. The gradient's direction is unchanged, but its size is multiplied by the model tokens'
# share of the episode, and that share moves with the tools: a step whose tool answers happen to be long
# takes a smaller step, with no reason in the objective. The cell computes both normalisations of the same
# batch.

# %%
scored = batch["attention_mask"][:, 1:].float()
loss_all = -(advantages[:, None] * log_probs * mask).sum() / scored[:, :].sum()
share = mask.sum() / scored.sum()
print(f"token mean over model tokens: {loss.item():+.5f}")
print(f"divided by all scored tokens: {loss_all.item():+.5f}  (ratio {loss_all.item() / loss.item():.4f}, "
      f"the model tokens' share {share:.4f})")
rl.claim("multiplied by the model tokens' share of the episode", loss_all.item() / loss.item(), share.item(), rel=1e-6)

# %% [markdown]
# Here the share is the same for every batch of this task up to a few tokens, so the slip would only
# rescale the learning rate. With a search tool whose answers run from ten tokens to a thousand it does
# not: the all-token normaliser makes each step's size depend on what the tools returned. (TRL 1.16 divides
# by the model tokens when it is given `tool_mask`; the book's bridge test checks that its loss and rlbook's
# are the same on a batch where the tool's output is a quarter of the tokens, and differ without the mask.)

# %% [markdown]
# ## 16.3 A warm-up, and whether the tool is needed
#
# RL can only reinforce what the policy already does now and then (chapter 15 measured how little it adds
# beyond that at this scale). A model that has never seen a tool call will not write `(1234+5678)` by
# chance, so every agent recipe starts with a *warm-up*: supervised training on demonstration episodes
# (multi-turn SFT in TRL, verl and SkyRL). `rl.multiturn_sft` is chapter 8's supervised training on
# episodes, with the mask of §16.2: the cross-entropy counts the model's tokens only, so the model learns
# when to call, what to write in the call and what to do with the answer, and never learns to predict the
# tool.
#
# The warm-up here is deliberately *undecided*: of its 2,000 demonstration episodes, half call the
# calculator and copy its answer (the policy of §16.1), and half write the sum at once
# (`1234+5678=6912</s>`). The warmed-up model does both, so whether to call is something RL can change,
# which is what §16.5 asks. Beside it, the same model is trained on the 2,000 direct answers only, for 600
# steps, twice the warm-up's: the model without the tool.
#
# Both are evaluated on the same 200 held-out problems, with the policy sampled as it is in training
# ($\tau = 1$) and greedily. The cell also reports the **digit accuracy** of the greedy answers: the share
# of the sum's digits that are right, aligned from the units. A model that cannot add 4-digit numbers
# exactly may still get some digits right, and this shows whether it learned anything at all.

# %%
def demonstrations(n, tool_share):
    """n scripted episodes on problems 10,000, 10,001, ...: the first tool_share of them call and copy,
    the others write the sum at once."""
    env, episodes = make_env()(), []
    for i in range(n):
        if i < tool_share * n:
            episodes.append(rollout(env, tool_user, seed=10_000 + i))
        else:
            env.reset(10_000 + i)
            episodes.append(rollout(env, lambda context, a=env.answer: encode(a) + [EOS], seed=10_000 + i))
    return episodes


def digit_accuracy(model, seeds, tool="calculator"):
    """Greedy episodes on `seeds`: the share of the sum's digits right, aligned from the units."""
    envs = [make_env(tool)() for _ in seeds]
    right = []
    for env, seed, ep in zip(envs, seeds, batch_rollouts(model, envs, list(seeds), greedy=True)):
        env.reset(seed)
        text = tok.decode(actions(ep)[-1]).removesuffix("</s>")
        text = text if text.isdigit() else ""
        right.append(sum(a == b for a, b in zip(reversed(text), reversed(env.answer))) / len(env.answer))
    return float(np.mean(right))


def report(model, tool="calculator"):
    """Sampled (τ = 1) and greedy accuracy, call frequency and digit accuracy on the 200 held-out problems."""
    sampled = evaluate_agent(model, make_env(tool), EVAL, greedy=False, generator=torch.Generator().manual_seed(9))
    greedy = evaluate_agent(model, make_env(tool), EVAL)
    return {"sampled": sampled["accuracy"], "greedy": greedy["accuracy"], "calls": sampled["call_frequency"],
            "digits": digit_accuracy(model, EVAL), "turns": sampled["turns_per_episode"],
            "failures": sampled["failure_frequency"], "malformed": sampled["malformed_frequency"]}


EVAL = list(range(200))
warm, live = {}, {}
for name, tool_share, steps in (("no_tool", 0.0, 600), ("mixed_sft", 0.5, 300)):
    model = rl.lm.build_policy(rl.lm.policy_config(tok, size="small", n_positions=64), seed=0, device=DEVICE)
    multiturn_sft(model, demonstrations(2000, tool_share), num_steps=steps, generator=torch.Generator().manual_seed(0),
                  progress=True)
    warm[name], live[name] = model, report(model)
    r = live[name]
    print(f"{name:>9}: sampled accuracy {r['sampled']:.3f}, greedy {r['greedy']:.3f}, calls {r['calls']:.2f}, "
          f"digit accuracy {r['digits']:.3f}")

# %% [markdown]
# One seed is one draw. `benchmarks/agent_tool_use.py` runs the same two trainings, and the rest of this
# chapter's, on ten paired seeds (the seed makes the model and draws its batches; the demonstrations and the
# 200 held-out problems are the same for all), and stores every seed's numbers. The cell prints each
# condition's mean with its 95 % interval over the seeds, and checks that the run above, on this seed, is one
# a reader can get: within the spread of the ten.
#
# Over the ten seeds the model without the tool is right on at most one of the 200 problems on any seed, and
# it did learn something: it gets between a fifth and a third of the digits right (mostly the last ones,
# which depend on two digits each). The 4-digit sum is out of its reach at this size and budget, which is
# what makes the tool *necessary*. The warmed-up model calls the calculator on about half of the problems,
# as its demonstrations did, and solves about a third of them when sampled; with the calculator made
# useless its accuracy falls to nothing, so every one of those successes came through the tool. Greedy
# decoding does better than sampling here because the single most likely first token is usually `(`: the
# warm-up left the choice to call undecided, and the sampled policy, the one RL trains, pays for it.

# %%
bench = rl.benchmark_results("agent_tool_use")
seeds = bench["seeds"]
by = {c: [r for r in bench["runs"] if r["condition"] == c] for c in bench["conditions"]}
assert all([r["seed"] for r in by[c]] == seeds for c in by)  # paired: the same seeds, in the same order


def values(condition, key):
    return np.array([r[key] for r in by[condition]], dtype=float)


def summary_row(condition):
    cells = []
    for key in ("sampled", "greedy", "call_frequency", "digit_accuracy", "sampled_useless"):
        mean, low, high = rl.mean_ci(values(condition, key))
        cells.append(f"{mean:.3f} [{low:.3f}, {high:.3f}]")
    return f"{condition:<24}" + "".join(f"{c:>22}" for c in cells)


print(f"{len(seeds)} seeds; " + bench["common"])
print(f"{'':<24}" + "".join(f"{k:>22}" for k in ("sampled", "greedy", "calls", "digit accuracy", "sampled, useless tool")))
for c in ("no_tool", "mixed_sft"):
    print(summary_row(c))
rl.claim_in_spread("on this seed", live["mixed_sft"]["sampled"], values("mixed_sft", "sampled"))
rl.claim("at most one of the 200 problems", values("no_tool", "greedy").max() * 200, high=1)
rl.claim("between a fifth and a third of the digits", values("no_tool", "digit_accuracy").mean(), low=0.2, high=1 / 3)
rl.claim("on about half of the problems", values("mixed_sft", "call_frequency").mean(), 0.5)
rl.claim_comparison("solves about a third of them", rl.compare(values("mixed_sft", "sampled"), values("no_tool", "sampled"),
                                                                names=("mixed_sft", "no_tool")), ">")
rl.claim("solves about a third of them", values("mixed_sft", "sampled").mean(), 1 / 3)
tool_needed = rl.compare(values("mixed_sft", "sampled_useless"), values("mixed_sft", "sampled"),
                         names=("mixed_sft, useless tool", "mixed_sft"))
print(tool_needed)
rl.claim_comparison("every one of those successes came through the tool", tool_needed, "<")

# %% [markdown]
# ## 16.4 Token in, token out
#
# A trainer computes $\log\pi_\theta$ of the tokens the sampler produced, and the importance ratio of
# chapter 7, $\rho_t = \pi_\theta(x_t\mid x_{<t}) / \pi_{\text{old}}(x_t\mid x_{<t})$, is exactly 1 on the first
# pass of an on-policy step. That holds only if the trainer scores *the same ids, after the same context*,
# as the sampler saw. A multi-turn loop has two ways to break it, and both are common in agent code.
#
# **1. The context of a turn is rebuilt from text.** Many agent loops keep the conversation as text (a
# list of messages) and, at each turn, render it with the chat template and tokenize it afresh. The
# rollout of this chapter never does: the context of turn $t + 1$ is the ids of turns $\le t$ followed by
# the environment's new ids. The property that makes an episode one training sample is the **extension
# property**: each turn's context begins with exactly the previous turn's context and action. The cell
# samples 64 episodes from the warmed-up model and checks it at every turn.

# %%
tool_model = warm["mixed_sft"]
sampled = batch_rollouts(tool_model, [make_env()() for _ in range(64)], list(range(64)),
                         generator=torch.Generator().manual_seed(1))
checked = 0
for ep in sampled:
    for k in range(1, ep.num_turns):
        assert ep.contexts[k][: len(ep.contexts[k - 1]) + len(actions(ep)[k - 1])] == ep.contexts[k - 1] + actions(ep)[k - 1]
        checked += 1
print(f"extension property holds at all {checked} later turns of {len(sampled)} sampled episodes")

# %% [markdown]
# A template can break the property on purpose. Agent frameworks compact the history to save context: they
# drop a turn's reasoning ("thinking") span once the turn is over, or replace an old tool call by its
# result. Then the context the policy samples turn $t + 1$ in is *not* the ids of the episode so far, and the
# episode cannot be scored as one sequence: the concatenation puts back ids that the policy did not see when
# it chose its next action. `rl.samples_from_turns` takes each turn's (context, action) pair as the policy
# saw it and starts a new training sample wherever a context does not extend the last one (verl's AgentLoop
# and prime-rl split the same way). The cell samples 64 episodes from a policy whose template drops the
# call once the calculator has answered (the model sees `<s>1234+5678=[6912]`), and measures how far off the
# log-probability of each final answer is when the turns are concatenated anyway.

# %%
from rlbook.envs.text import model_policy

CALL_OPEN, CALL_CLOSE = encode("(")[0], encode(")")[0]


def compact(context):
    """The compacting template: once the tool has answered, the call `(...)` is dropped from the context."""
    if CALL_CLOSE not in context:
        return list(context)
    return context[: context.index(CALL_OPEN)] + context[context.index(CALL_CLOSE) + 1:]


sampler = model_policy(tool_model, make_env()().stop_token_ids, generator=torch.Generator().manual_seed(2),
                       forbidden_ids=rl.lm.forbidden_token_ids(tok))


@torch.no_grad()
def sequence_log_prob(model, context, action):
    """log π(action | context), summed over the action's tokens (nats)."""
    ids = torch.tensor([list(context) + list(action)])
    return float(episode_log_probs(model, ids, torch.ones_like(ids, dtype=torch.bool))[0, len(context) - 1:].sum())


gaps, samples_per_episode, called_once = [], [], []
for seed in range(64):
    ep = rollout(make_env()(), lambda context: sampler(compact(context)), seed=seed)
    called_once.append(ep.num_turns >= 2 and ep.infos[0]["tool_call"])
    turns = [(compact(context), action) for context, action in zip(ep.contexts, actions(ep))]  # as the policy saw them
    samples_per_episode.append(len(samples_from_turns(turns)))
    if ep.num_turns == 2:
        (_, _), (c1, a1) = turns
        right = sequence_log_prob(tool_model, c1, a1)  # the answer after the context it was sampled in
        wrong = sequence_log_prob(tool_model, ep.contexts[1], a1)  # after the concatenated episode: the call is back
        gaps.append(right - wrong)
splits = {int(k): int(v) for k, v in zip(*np.unique(samples_per_episode, return_counts=True))}
print(f"training samples per episode (samples: episodes): {splits}")
print(f"{len(gaps)} two-turn episodes; log-probability of the answer, as sampled minus as concatenated: "
      f"mean {np.mean(gaps):+.1f} nats, smallest |gap| {np.min(np.abs(gaps)):.1f}")

# %% [markdown]
# Every episode in which the tool answered became two training samples, one per turn, and the one-turn
# episodes stayed one. Scoring the answers after the concatenated history instead would have been off by
# more than ten nats on average: the policy sampled its answer after `=[sum]`, and the concatenation puts
# the call back in front of it. A trainer that did that would compute importance ratios of $e^{10}$ and
# more on the first pass of an on-policy step, where they must be exactly 1, and the clip would cut those
# tokens out of the update, silently.

# %%
rl.claim("Every episode in which the tool answered became two training samples", splits.get(2, 0),
         sum(ep_calls for ep_calls in called_once), abs=0)
rl.claim("more than ten nats on average", np.mean(np.abs(gaps)), low=10.0)

# %% [markdown]
# **2. The trajectory is rebuilt from decoded text.** The other way is to decode the sampled ids to text
# and tokenize the text again for training, which is how a loop that stores conversations as messages
# computes its training ids. With a character tokenizer that is harmless: each character is one token and
# the ids come back unchanged. Real tokenizers are not like that. A BPE vocabulary holds frequent *pairs*
# as single tokens, and at a boundary between the model's text and the environment's, the re-encoding can
# merge a character of each into a token that nobody sampled; it can also re-split a sampled token into
# its canonical pieces.
#
# The cell makes that concrete with the smallest change: the same tokenizer with one more token, the pair
# `)[`, as a BPE tokenizer learns frequent pairs. The model gets one more row in its embedding and output
# layers (its other weights are unchanged), and it never produces the new token: its turn ends at `)`, and
# `[` is the calculator's. The sampled episodes are token in, token out; then they are decoded and encoded
# again, and both versions are scored by the same weights. The importance ratio of an on-policy step
# should be exactly 1.

# %%
tok_pairs = rl.lm.build_char_tokenizer(TOOL_ALPHABET)
tok_pairs.add_tokens([")["])
pair_model = copy.deepcopy(tool_model)
pair_model.resize_token_embeddings(len(tok_pairs), mean_resizing=False)



def retokenised_log_ratio(ep, mask_merged=True):
    """log π(re-encoded episode's model tokens) − log π(sampled model tokens), same weights (pair_model).

    A trainer that re-tokenises finds the model's tokens by character position: a token is the model's if it
    starts where a model token started; `mask_merged=False` masks the merged `)[` out."""
    text_ids = tok_pairs(tok.decode(ep.input_ids), add_special_tokens=False).input_ids
    starts, pos = set(), 0
    for i, m in zip(ep.input_ids, ep.loss_mask):
        if m:
            starts.add(pos)
        pos += len(tok.convert_ids_to_tokens(i))
    mask_retok, pos = [], 0
    for i in text_ids:
        piece = tok_pairs.convert_ids_to_tokens(i)
        mask_retok.append(int(pos in starts and (mask_merged or piece != ")[")))
        pos += len(piece)
    totals = []
    for ids, m in ((ep.input_ids, ep.loss_mask), (text_ids, mask_retok)):
        ids_t = torch.tensor([ids])
        with torch.no_grad():
            lp = episode_log_probs(pair_model, ids_t, torch.ones_like(ids_t, dtype=torch.bool))[0]
        totals.append(float((lp * torch.tensor(m[1:], dtype=torch.float32)).sum()))
    return totals[1] - totals[0], text_ids != ep.input_ids


results = [retokenised_log_ratio(ep) for ep in sampled]
log_ratios = np.array([r[0] for r in results])
changed = np.array([r[1] for r in results])
called = np.array([any(i["tool_call"] for i in ep.infos) for ep in sampled])
print(f"episodes whose ids change when decoded and re-encoded: {changed.sum()} of {len(sampled)} "
      f"({called.sum()} called the tool; the same episodes: {bool((changed == called).all())})")
print(f"log of the actions' importance ratio, re-encoded / sampled (same weights), episodes that called: "
      f"range [{log_ratios[called].min():+.1f}, {log_ratios[called].max():+.1f}]; the others: "
      f"largest |log ratio| {np.abs(log_ratios[~called]).max():.1f}")
outside = (np.exp(log_ratios) < 0.8) | (np.exp(log_ratios) > 1.2)
print(f"share of the episodes that called whose ratio is outside PPO's clip band [0.8, 1.2]: {outside[called].mean():.0%}")

# %% [markdown]
# The ids of every episode that called the tool changed, and only those: the re-encoding merged the model's
# `)` and the calculator's `[` at each call. The model never produced the merged token, and its log-ratio
# is of the order of tens of nats: the ratio of every one of those episodes lies outside the clip band, in
# an on-policy step where it is exactly 1 for the ids that were sampled. The episodes without a call,
# unchanged by the re-encoding, have a log-ratio of exactly 0. A tokenizer with tens of thousands of merges
# can do this at any boundary, not only where the tool's text begins, which is why agent trainers keep the
# sampler's token ids rather than re-tokenising the conversation.

# %%
rl.claim("The ids of every episode that called the tool changed, and only those", int((changed == called).sum()),
         len(sampled), abs=0)
rl.claim("of the order of tens of nats", np.median(-log_ratios[called]), low=10.0, high=99.0)
rl.claim("the ratio of every one of those episodes lies outside the clip band", outside[called].mean(), 1.0, abs=0.0,
         bounds=False)
rl.claim("have a log-ratio of exactly 0", np.abs(log_ratios[~called]).max(), 0.0, abs=0.0, bounds=False)

# %% [markdown]
# ## 16.5 Masked GRPO on whole episodes
#
# GRPO carries over to episodes with one change: the sample is an episode, not a completion. For each
# problem, $G$ episodes are run ($G = 8$ environments reset with the same seed); each gets its total reward
# $R_b$ (the sum of its turns'); the group-relative advantage is chapter 9's,
#
# $$\hat A_b = \frac{R_b - \operatorname{mean}_{\text{group}} R}{\operatorname{std}_{\text{group}} R + 10^{-6}}, \tag{16.2}$$
#
# and it is given to every *model* token of episode $b$; the clipped surrogate of chapter 7 is averaged over
# the model tokens of the batch (DAPO's token mean, taken over actions):
#
# $$\begin{aligned}L(\theta) &= -\frac{1}{M}\sum_{b,t} m_{b,t}\,\ell_{b,t}, \qquad M = \sum_{b,t} m_{b,t},\cr
#   \ell_{b,t} &= \min\bigl(\rho_{b,t}\hat A_b,\ \operatorname{clip}(\rho_{b,t}, 1-\varepsilon_{\text{low}}, 1+\varepsilon_{\text{high}})\,\hat A_b\bigr).\end{aligned} \tag{16.3}$$
#
# The environment's tokens are in every forward pass, as context, and nowhere in the loss. That is all of
# `rl.agent_grpo_step`; `rl.train_agent_grpo` repeats it on fresh problems. (Giving every turn of an
# episode the same advantage is the simplest credit assignment, and the default of the frameworks; the
# others, per-turn discounted returns, GEM's return batch normalisation and GiGPO's step groups, are in
# `rl.credit`.)
#
# The cell trains the warmed-up model of §16.3 for 100 steps of 8 problems × 8 episodes at learning rate
# $10^{-3}$ (the rate the pilot runs settled on), twice from the same start: with the calculator
# (`mixed_grpo_calculator`) and with the useless tool (`mixed_grpo_useless`), which answers every call with
# `[]`. It logs what the agent frameworks log per step: the reward, the **call frequency** (the share of
# episodes that called the tool) and the share of groups whose rewards were all equal (no advantage, no
# gradient); afterwards it evaluates as §16.3 did.

# %%
runs = {}
for name, tool in (("mixed_grpo_calculator", "calculator"), ("mixed_grpo_useless", "useless")):
    model = copy.deepcopy(warm["mixed_sft"])
    history = train_agent_grpo(model, make_env(tool), AgentGRPOConfig(group_size=8, prompts_per_step=8, num_steps=100,
                                                                      lr=1e-3, seed=0))
    runs[name], live[name] = history, report(model)
    warm[name] = model
print(f"{'':>22} {'sampled':>8} {'greedy':>7} {'calls':>6} {'digits':>7} {'turns':>6} {'failures':>9} {'malformed':>10}")
for name in ("mixed_sft", "mixed_grpo_calculator", "mixed_grpo_useless"):
    r = live[name]
    print(f"{name:>22} {r['sampled']:>8.3f} {r['greedy']:>7.3f} {r['calls']:>6.2f} {r['digits']:>7.3f} {r['turns']:>6.2f} "
          f"{r['failures']:>9.2f} {r['malformed']:>10.2f}")
zero_variance = {name: np.mean([h["zero_variance_groups"] for h in runs[name]]) for name in runs}
print("share of groups with all rewards equal, over the run:", {k: round(v, 3) for k, v in zero_variance.items()})


# %% [markdown]
# On this seed's run, GRPO with the calculator turned the undecided warm-up into a policy that calls on
# nearly every problem, within a few steps. The useless tool is the control, and the next cell reads both
# on ten paired seeds, with the same pair on 2-digit problems (`mixed2_*`).
#
# Three results, each over ten paired seeds:
#
# * **With the calculator**, masked GRPO raised the sampled accuracy by about a third of the problems
#   (the interval in the table), and the greedy accuracy too, by raising the call frequency to 0.97: the
#   sampled policy calls on nine episodes in ten or more within five steps on every seed (the figure). What
#   RL changed is *whether to call*, a choice the warm-up had left open; with the calculator broken, the
#   trained policy still solves nothing (§16.6). That is the kind of change RL makes at this scale (chapter
#   15): it moves probability between things the policy already does.
# * **With the useless tool on 4-digit problems**, on eight of the ten seeds not one of the 6,400 training
#   episodes was rewarded: an answer written at once is never right, and a call returns nothing. Every group
#   had zero variance, every advantage (16.2) was zero, and the policy evaluates exactly as its start (a test
#   checks that GRPO takes no step at all then). On the other two seeds a direct answer was right in one or
#   two steps, and that was enough for the policy to stop calling altogether: in a group where one episode
#   of eight succeeds, (16.2) gives it an advantage of $\sqrt 7 \approx 2.6$ while the batch's other groups
#   give nothing, so that single success sets the direction of the whole step; and Adam's momentum keeps
#   moving the weights that way for the steps after, which bring no gradient. The policy learned to skip the
#   tool from one lucky answer, and lost with it every success the tool had brought.
# * **On 2-digit problems**, where an answer written at once is right now and then, the useless tool is
#   abandoned on every seed, within 16 steps, and the calculator adopted. This is the experiment that shows
#   the call frequency responding to what the tool is worth, and it needs a task where not calling is
#   sometimes rewarded.

# %%
for c in ("mixed_sft", "mixed_grpo_calculator", "mixed_grpo_useless", "mixed2_sft", "mixed2_grpo_calculator",
          "mixed2_grpo_useless"):
    print(summary_row(c))
rl.claim_in_spread("this seed's run", live["mixed_grpo_calculator"]["sampled"], values("mixed_grpo_calculator", "sampled"))
grpo_cmp = {key: rl.compare(values("mixed_grpo_calculator", key), values("mixed_sft", key),
                            names=("mixed_grpo_calculator", "mixed_sft")) for key in ("sampled", "greedy", "call_frequency")}
calls2_cmp = {tool: rl.compare(values(f"mixed2_grpo_{tool}", "call_frequency"), values("mixed2_sft", "call_frequency"),
                               names=(f"mixed2_grpo_{tool}", "mixed2_sft")) for tool in ("calculator", "useless")}
for comparison in (*grpo_cmp.values(), *calls2_cmp.values()):
    print(comparison)
unchanged = sum(all(r[k] == s[k] for k in ("sampled", "greedy", "call_frequency", "digit_accuracy"))
                for r, s in zip(by["mixed_grpo_useless"], by["mixed_sft"]))
print(f"mixed_grpo_useless evaluates exactly as its start on {unchanged} of {len(seeds)} seeds")
rl.claim_comparison("raised the sampled accuracy", grpo_cmp["sampled"], ">")
rl.claim("by about a third of the problems", grpo_cmp["sampled"].mean_diff, 1 / 3)
rl.claim("not one of the 6,400 training", bench["grpo"]["num_steps"] * bench["grpo"]["prompts_per_step"]
         * bench["grpo"]["group_size"], 6400, abs=0)
one_success = rl.group_relative_advantages(torch.tensor([1.0] + [0.0] * 7), 8)
rl.claim("an advantage of $\\sqrt 7 \\approx 2.6$", one_success[0], 7 ** 0.5, rel=1e-4)
rl.claim_comparison("and the greedy accuracy", grpo_cmp["greedy"], ">")
rl.claim("the call frequency to 0.97", values("mixed_grpo_calculator", "call_frequency").mean(), 0.97)
first_calling = [next(i for i, x in enumerate(r["train_call_frequency"]) if x >= 0.9) for r in by["mixed_grpo_calculator"]]
rl.claim("within five steps on every seed", max(first_calling) + 1, high=5)
lucky = [sum(x > 0 for x in r["train_reward"]) for r in by["mixed_grpo_useless"]]
rl.claim("on eight of the ten seeds not one", sum(n == 0 for n in lucky), 8, abs=0)
rl.claim("exactly as its start", unchanged, sum(n == 0 for n in lucky), abs=0)
rl.claim("one or two steps", max(lucky), 2, abs=0)
rl.claim("the other two seeds", sum(n > 0 for n in lucky), 2, abs=0)
lost = [r["call_frequency"] for r, n in zip(by["mixed_grpo_useless"], lucky) if n > 0]
rl.claim("stop calling altogether", max(lost), 0.0, abs=0.0, bounds=False)
rl.claim_comparison("the useless tool is abandoned on every seed", calls2_cmp["useless"], "<")
abandoned_at = [next((i + 1 for i, x in enumerate(r["train_call_frequency"]) if x < 0.05), None)
                for r in by["mixed2_grpo_useless"]]
assert None not in abandoned_at
rl.claim("abandoned on every seed, within 16 steps", max(abandoned_at), high=16)
rl.claim_comparison("and the calculator adopted", calls2_cmp["calculator"], ">")

# %%
fig, axes = plt.subplots(1, 2, figsize=(8.4, 3.3), sharex=True, dpi=80)
steps = np.arange(1, bench["grpo"]["num_steps"] + 1)
styles = {"mixed_grpo_calculator": ("C0", "-", "4-digit, calculator"), "mixed_grpo_useless": ("C3", "-", "4-digit, useless tool"),
          "mixed2_grpo_calculator": ("C0", "--", "2-digit, calculator"), "mixed2_grpo_useless": ("C3", "--", "2-digit, useless tool")}
for ax, key, title in zip(axes, ("train_call_frequency", "train_reward"), ("call frequency", "reward")):
    for condition, (color, ls, label) in styles.items():
        curves = np.array([r[key] for r in by[condition]])
        ax.plot(steps, curves.mean(axis=0), color=color, ls=ls, label=label)
        ax.fill_between(steps, curves.min(axis=0), curves.max(axis=0), color=color, alpha=0.12, lw=0)
    ax.set(title=f"{title} of the training episodes", xlabel="GRPO step", ylim=(-0.03, 1.03))
fig.suptitle(f"masked GRPO from the mixed warm-up: mean (line) and range (band) over {len(seeds)} seeds", fontsize=10)
axes[0].plot(steps, [h["call_frequency"] for h in runs["mixed_grpo_calculator"]], color="k", lw=0.8, alpha=0.6,
             label="this chapter's run (calculator)")
axes[0].legend(fontsize=8.5, loc="center right")
fig.tight_layout()
plt.show()

# %% [markdown]
# ## 16.6 What the accuracy rests on: taking the tool away
#
# A policy that calls the calculator and then answers right could in principle be doing the sum itself
# and calling out of habit. The test is to break the tool at evaluation time and see what is left. Two
# controls of `rl.CalculatorEnv`: the **useless** tool of §16.5, which answers every call with `[]`, and a
# **harmful** one, which answers with a random number of the right length. Neither changes the prompt or
# the reward, only what the model reads after its call.

# %%
print(f"{'':>22} " + " ".join(f"{tool:>18}" for tool in ("calculator", "useless", "harmful")))
broken = {}
for name in ("mixed_sft", "mixed_grpo_calculator"):
    row = {tool: evaluate_agent(warm[name], make_env(tool), EVAL, greedy=False, generator=torch.Generator().manual_seed(9))
           for tool in ("calculator", "useless", "harmful")}
    broken[name] = row
    print(f"{name:>22} " + " ".join(f"{row[t]['accuracy']:>8.3f} calls {row[t]['call_frequency']:.2f}" for t in row))


def copies_the_tool(model, tool):
    """Of the sampled episodes that called once and then answered: the share whose answer is the tool's output."""
    envs = [make_env(tool)() for _ in EVAL]
    episodes = batch_rollouts(model, envs, EVAL, generator=torch.Generator().manual_seed(9))
    copied = []
    for ep in episodes:
        if ep.num_turns == 2 and ep.terminated:
            told = tok.decode([i for i, m, t in zip(ep.input_ids, ep.loss_mask, ep.turn_ids) if t == 0 and not m])
            copied.append(tok.decode(actions(ep)[1]).removesuffix("</s>") == told.strip("[]"))
    return float(np.mean(copied)), len(copied)


copy_share, copy_count = copies_the_tool(warm["mixed_grpo_calculator"], "harmful")
print(f"with the harmful tool, {copy_share:.0%} of the {copy_count} call-then-answer episodes answered the tool's number")

# %% [markdown]
# With the calculator broken, the trained policy still calls it on nearly every problem, reads `[]` or a
# wrong number, and then answers wrong: over the ten seeds its accuracy is the calculator's, not its own.
# The last line of the cell shows how often it simply answered with the harmful tool's number: nothing in
# its training ever showed it a tool that lied, and an agent trained this way trusts its tools as far as its
# training made them trustworthy.

# %%
broken_cmp = {c: rl.compare(values(c, "sampled_useless"), values(c, "sampled"), names=(f"{c}, useless tool", c))
              for c in ("mixed_sft", "mixed_grpo_calculator")}
for comparison in broken_cmp.values():
    print(comparison)
rl.claim_comparison("its accuracy is the calculator's", broken_cmp["mixed_grpo_calculator"], "<")

# %% [markdown]
# ## Summary
#
# * A text environment keeps Gymnasium's contract on token ids: `reset` gives the prompt's ids, `step` takes
#   the model's turn and gives back the environment's ids, a reward and whether the episode ended. A
#   rollout that only ever appends ids is *token in, token out*: every turn's context extends the last
#   (checked on every turn of 64 sampled episodes here).
# * The model's tokens are the actions; the prompt's and the tools' are the state. The loss mask puts them
#   in the forward pass and out of the gradient, exactly (the gradient at their logits is zero), and the
#   token mean divides by the model's tokens. Dividing by all tokens shrinks every step by the model's
#   share of the episode, a share the tools' answers decide.
# * Rebuilding a turn's context with a template that compacts the history, or rebuilding the episode from
#   decoded text, makes the trainer score ids the sampler never saw: split the episode where a context
#   does not extend the last (`rl.samples_from_turns`), and never re-encode.
# * On 4-digit addition the book's small model cannot do without the calculator (at most one problem of
#   200 right), and with it a short, undecided warm-up solves about a third. Masked GRPO with the
#   calculator raised the sampled accuracy by about a third of the problems over ten paired seeds, by
#   teaching the policy to call on nearly every problem; with the calculator broken at test time the
#   trained policy solves none, so its accuracy is the calculator's.
# * A useless tool is abandoned when not calling is sometimes rewarded (2-digit problems, every seed). When
#   nothing is ever rewarded GRPO does nothing at all, and a single lucky episode in a batch of otherwise
#   silent groups can set the direction of a whole step: on two of ten seeds, one or two lucky steps made
#   the policy stop calling for good.

# %%
rl.claim("checked on every turn of 64 sampled episodes", len(sampled), 64, abs=0)
rl.claim("at most one problem of 200 right", values("no_tool", "greedy").max() * 200, high=1)
rl.claim("solves about a third", values("mixed_sft", "sampled").mean(), 1 / 3)
rl.claim_comparison("raised the sampled accuracy by about a third", grpo_cmp["sampled"], ">")
rl.claim("raised the sampled accuracy by about a third", grpo_cmp["sampled"].mean_diff, 1 / 3)
rl.claim_comparison("the trained policy solves none", broken_cmp["mixed_grpo_calculator"], "<")
rl.claim("the trained policy solves none", values("mixed_grpo_calculator", "sampled_useless").max(), 0.0, abs=0.0,
         bounds=False)
rl.claim_comparison("A useless tool is abandoned", calls2_cmp["useless"], "<")
rl.claim("on two of ten seeds", sum(n > 0 for n in lucky), 2, abs=0)
rl.report_headline(f"Agents: masked GRPO with a calculator − warm-up, sampled accuracy {grpo_cmp['sampled'].mean_diff:+.3f} "
                   f"[{grpo_cmp['sampled'].ci_low:+.3f}, {grpo_cmp['sampled'].ci_high:+.3f}], call frequency "
                   f"{values('mixed_sft', 'call_frequency').mean():.2f} → {values('mixed_grpo_calculator', 'call_frequency').mean():.2f} "
                   f"({len(seeds)} paired seeds)")

# %% [markdown]
# ## Exercises
#
# 1. *(By hand.)* An episode of this chapter's task on the problem `8848+6487=` calls the calculator, reads
#    `[15335]` and answers `15335</s>`. Count its tokens: the prompt (with `<s>`), the call, the tool's
#    answer and the final answer. What share of the scored positions (all but the first token) are the
#    model's, and by what factor does dividing by all scored positions shrink the loss of §16.2?
# 2. Shift the mask the wrong way: in the cell of §16.2, use `batch["loss_mask"][:, :-1]` instead of
#    `[:, 1:]`. Which positions get a gradient now that should not, and which lose theirs? Say it in terms of
#    the tokens `)` and `[`.
# 3. *(Training on the tool's output.)* Add to the warm-up's loss a cross-entropy term on the calculator's
#    output tokens, with weight 1: the model is then also trained to predict the sum inside `[...]`. Does the
#    warmed-up model's *own* arithmetic improve (its digit accuracy when the tool is useless)? Why might a
#    practitioner want this, and why is it not part of the policy gradient?
# 4. In the re-tokenisation cell of §16.4, give the merged token `)[` mask 0 instead of 1 (it holds the
#    environment's `[`). Is the ratio right now? What is missing from the re-encoded episode that the
#    policy actually did?

# %% [markdown] tags=["solution"] jp-MarkdownHeadingCollapsed=true
# ## Solutions
#
# ### Solution to exercise 1
#
# The prompt `<s>8848+6487=` is 11 tokens, the call `(8848+6487)` 11, the answer `[15335]` 7 and the final
# answer `15335</s>` 6 (`</s>` is one token): 35 tokens, 34 scored positions, of which the call and the
# final answer, 17, are the model's. The share is 17/34 = 1/2, so the all-token normaliser halves the loss
# and its gradient. The cell counts it on the environment's own episode.

# %% tags=["solution"]
ep = rollout(make_env()(), tool_user, seed=2)
print(tok.decode(ep.input_ids), "| tokens:", len(ep.input_ids), "| model tokens:", sum(ep.loss_mask),
      "| share of scored positions:", sum(ep.loss_mask) / (len(ep.input_ids) - 1))

# %% [markdown] tags=["solution"]
# ### Solution to exercise 2
#
# `loss_mask[:, :-1]` is the mask of the token *at* each position, while the logits there score the token
# *after* it. So every position whose token is the model's but whose next token is not gets a gradient: the
# position of `)`, which scores the calculator's `[`, and the position of `</s>`, which scores padding. And
# every position whose next token is the model's first of a turn loses its gradient: the prompt's `=`,
# which scores `(`, and the tool's `]`, which scores the first digit of the answer. The model would be
# trained to predict the calculator's `[` and never to start its own turns.

# %% tags=["solution"]
wrong_mask = batch["loss_mask"][:, :-1].float()
wrong_logits = policy(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"].long()).logits
wrong_logits.retain_grad()
wrong_log_probs = torch.log_softmax(wrong_logits[:, :-1], dim=-1).gather(-1, batch["input_ids"][:, 1:, None])[..., 0]
(-(advantages[:, None] * wrong_log_probs * wrong_mask).sum() / wrong_mask.sum()).backward()
gets = wrong_logits.grad[:, :-1].norm(dim=-1) > 0
row = 0
next_tokens = tok.convert_ids_to_tokens(batch["input_ids"][row, 1:].tolist())
print("next tokens that get a gradient but are not the model's:",
      sorted({next_tokens[t] for t in range(len(next_tokens)) if gets[row, t] and not mask[row, t]}))
print("next tokens that are the model's but get no gradient:",
      sorted({next_tokens[t] for t in range(len(next_tokens)) if mask[row, t] and not gets[row, t]}))

# %% [markdown] tags=["solution"]
# ### Solution to exercise 3
#
# The cell adds the term to the supervised loss of the mixed warm-up and prints the two models' digit
# accuracy with the tool useless (each answers from its own arithmetic after reading `[]`), on one seed:
# one seed cannot settle whether the term helps, and the benchmark's paired seeds are the way to find out.
# Training on the tool's output is supervised learning of the sums from the tool's answers: cheap, since
# the tokens are already in the batch, and a possible help to a model that must sometimes answer without
# its tool. It is not part of the policy gradient (16.1): the tool's tokens are not actions, and their
# log-probability is not part of the trajectory's probability under the policy. It is an auxiliary loss,
# to be weighed against the objective like any other.

# %% tags=["solution"]
def warm_up_with_tool_output(weight, steps=300, seed=0):
    model = rl.lm.build_policy(rl.lm.policy_config(tok, size="small", n_positions=64), seed=seed, device=DEVICE)
    episodes, generator = demonstrations(2000, 0.5), torch.Generator().manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
    model.train()
    for _ in range(steps):
        rows = torch.randint(0, len(episodes), (32,), generator=generator).tolist()
        b = collate_trajectories([episodes[i] for i in rows], pad_token_id=tok.pad_token_id)
        lp = episode_log_probs(model, b["input_ids"], b["attention_mask"])
        actions_mask = b["loss_mask"][:, 1:].float()
        tool_mask = (b["attention_mask"][:, 1:] & ~b["loss_mask"][:, 1:] & (b["turn_ids"][:, 1:] >= 0)).float()
        loss = -(lp * actions_mask).sum() / actions_mask.sum()
        loss = loss - weight * (lp * tool_mask).sum() / tool_mask.sum().clamp(min=1)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    model.eval()
    return model


with_output = warm_up_with_tool_output(1.0)
print(f"digit accuracy with the tool useless: warm-up {digit_accuracy(warm['mixed_sft'], EVAL, 'useless'):.3f}, "
      f"warm-up trained on the tool's output too {digit_accuracy(with_output, EVAL, 'useless'):.3f} (one seed)")

# %% [markdown] tags=["solution"]
# ### Solution to exercise 4
#
# No. With mask 0 on `)[`, the re-encoded episode's model tokens are the call without its closing `)` and
# the answer, and the policy's actual action `)`, the stop token that ended its turn, is scored nowhere. The
# log-probability of the episode's actions is then too large by exactly $-\log\pi(\texttt{)} \mid \dots)$ at
# each call, and the ratio is wrong in the other direction. No mask assignment fixes a re-encoding: the
# re-encoded ids are not the ids the policy sampled, and the only correct training ids are the sampled ones.

# %% tags=["solution"]
log_ratios_mask0 = np.array([retokenised_log_ratio(ep, mask_merged=False)[0] for ep in sampled])
print(f"log ratio with the merged token masked out: median {np.median(log_ratios_mask0):+.2f}, "
      f"range [{log_ratios_mask0.min():+.2f}, {log_ratios_mask0.max():+.2f}]")
