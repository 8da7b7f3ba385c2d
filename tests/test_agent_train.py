"""rlbook.algos.agent: the multi-turn trainers, checked against independent computations.

The GRPO step's parameter update equals one computed by hand from the same episodes (the group
advantages, the model-token mean, SGD), for two consecutive steps: a step that skipped ``zero_grad``
(the second update would carry the first gradient), skipped ``step``, flipped the sign or detached the
log-probabilities would not match. The supervised warm-up's loss is the cross-entropy on the model's
tokens only, computed independently.
"""

from __future__ import annotations

import copy

import pytest
import torch

from rlbook.algos.agent import (
    AgentGRPOConfig,
    agent_grpo_step,
    episode_log_probs,
    episode_token_advantages,
    evaluate_agent,
    filter_groups,
    multiturn_sft,
    train_agent_grpo,
)
from rlbook.envs.text import (
    TOOL_ALPHABET,
    ShapedRewards,
    batch_rollouts,
    collate_trajectories,
    rollout,
)
from rlbook.lm.model import build_policy, policy_config
from rlbook.lm.tokenizer import build_char_tokenizer

TOK = build_char_tokenizer(TOOL_ALPHABET)
EOS = TOK.eos_token_id


class SevensEnv:
    """Two turns: the first is answered with '[5]', the second ends the episode with reward = the share of its
    tokens with an even id. A random model gets rewards that differ within a group (signal for GRPO)."""

    def __init__(self):
        self.tokenizer = TOK
        self.turn = 0

    def reset(self, seed=None):
        self.turn = 0
        return [TOK.bos_token_id, *TOK("3=", add_special_tokens=False).input_ids]

    def step(self, action_ids):
        self.turn += 1
        info = {"tool_call": self.turn == 1, "tool_failed": False, "malformed": False}
        if self.turn == 1:
            return TOK("[5]", add_special_tokens=False).input_ids, 0.0, False, False, info
        return [], sum(i % 2 == 0 for i in action_ids) / len(action_ids), True, False, info


def tiny(seed=0):
    return build_policy(policy_config(TOK, n_layer=1, n_embd=32, n_head=2, n_positions=64), seed=seed, device="cpu")


def test_episode_log_probs_are_each_tokens_given_its_prefix():
    model = tiny()
    trajs = [rollout(SevensEnv(), lambda c, k=k: [TOK.convert_tokens_to_ids(str(k))] * (k + 1) + [EOS])
             for k in range(3)]
    batch = collate_trajectories(trajs)
    got = episode_log_probs(model, batch["input_ids"], batch["attention_mask"])
    for b, traj in enumerate(trajs):
        for t in range(1, len(traj.input_ids)):
            prefix = torch.tensor([traj.input_ids[:t]])
            logits = model(input_ids=prefix).logits[0, -1].float()
            expected = torch.log_softmax(logits, -1)[traj.input_ids[t]]
            torch.testing.assert_close(got[b, t - 1], expected, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="temperature"):
        episode_log_probs(model, batch["input_ids"], batch["attention_mask"], temperature=0)
    with pytest.raises(ValueError, match="attention_mask"):
        episode_log_probs(model, batch["input_ids"], batch["attention_mask"][:, :-1])


def _by_hand_step(model, batch, group_size, lr):
    """The expected SGD update: at the batch's first optimiser step ρ = 1, so the clipped surrogate's
    gradient is the policy gradient −Σ m·Â·∇log π / Σ m (token mean over the model's tokens)."""
    rewards = batch["rewards"].reshape(-1, group_size)
    centred = rewards - rewards.mean(dim=1, keepdim=True)
    std = rewards.std(dim=1, keepdim=True, correction=0)
    adv = torch.where(std > 0, centred / (std + 1e-6), torch.zeros_like(centred)).reshape(-1)
    log_probs = episode_log_probs(model, batch["input_ids"], batch["attention_mask"])
    mask = batch["loss_mask"][:, 1:].float()
    loss = -(adv[:, None] * log_probs * mask).sum() / mask.sum()
    grads = torch.autograd.grad(loss, list(model.parameters()))
    with torch.no_grad():
        for p, g in zip(model.parameters(), grads):
            p -= lr * g
    return float(adv.abs().sum())


def test_agent_grpo_step_is_the_masked_policy_gradient_by_hand_twice():
    config = AgentGRPOConfig(group_size=4, prompts_per_step=2, max_new_tokens=5, lr=0.5)
    model, reference = tiny(seed=1), tiny(seed=1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    gen, ref_gen = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    for step in range(2):
        before = [p.detach().clone() for p in model.parameters()]
        metrics = agent_grpo_step(model, optimizer, SevensEnv, [0, 1], config, gen)
        trajs = batch_rollouts(reference, [SevensEnv() for _ in range(8)], [0] * 8, max_new_tokens=5, generator=ref_gen)
        signal = _by_hand_step(reference, collate_trajectories(trajs), 4, lr=0.5)
        assert signal > 0, "the rewards should differ within a group"
        moved = max((p - q).abs().max().item() for p, q in zip(model.parameters(), before))
        assert moved > 1e-4, step
        for p, q in zip(model.parameters(), reference.parameters()):
            torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-6)
        assert metrics["turns_per_episode"] == 2 and metrics["call_frequency"] == 1.0
        assert metrics["clip_fraction"] == 0.0 and 0 <= metrics["zero_variance_groups"] <= 1


@pytest.mark.parametrize("epochs", [1, 3])
def test_the_step_ascends_the_objective_and_later_epochs_clip(epochs):
    """A small SGD step raises the batch's advantage-weighted mean log-probability (ascent on the objective,
    not descent); with three optimiser steps on one batch and a narrow band the ratio leaves it (the clip acts)."""
    config = AgentGRPOConfig(group_size=4, prompts_per_step=2, max_new_tokens=5, lr=0.05, epochs_per_batch=epochs,
                             clip_eps_low=0.01, clip_eps_high=0.01)
    model = tiny(seed=2)
    gen = torch.Generator().manual_seed(5)
    trajs = batch_rollouts(copy.deepcopy(model), [SevensEnv() for _ in range(8)], [0] * 8, max_new_tokens=5,
                           generator=copy.deepcopy(gen))
    batch = collate_trajectories(trajs)
    rewards = batch["rewards"].reshape(-1, 4)
    adv = ((rewards - rewards.mean(1, keepdim=True)) / (rewards.std(1, keepdim=True, correction=0) + 1e-6)).reshape(-1)
    mask = batch["loss_mask"][:, 1:].float()

    def objective():
        with torch.no_grad():
            lp = episode_log_probs(model, batch["input_ids"], batch["attention_mask"])
        return float((adv[:, None] * lp * mask).sum() / mask.sum())

    start = objective()
    metrics = agent_grpo_step(model, torch.optim.SGD(model.parameters(), lr=0.05), SevensEnv, [0, 1], config, gen)
    assert objective() > start
    assert (metrics["clip_fraction"] > 0) == (epochs > 1)


def test_the_warm_up_loss_is_cross_entropy_on_model_tokens_only():
    demos = [rollout(SevensEnv(), lambda c: TOK("77", add_special_tokens=False).input_ids + [EOS]) for _ in range(4)]
    model = tiny(seed=3)
    batch = collate_trajectories(demos)
    with torch.no_grad():
        lp = episode_log_probs(model, batch["input_ids"], batch["attention_mask"])
    mask = batch["loss_mask"][:, 1:]
    expected = float(-(lp[mask]).mean())
    losses = multiturn_sft(model, demos, num_steps=30, batch_size=4, lr=1e-2, generator=torch.Generator().manual_seed(0))
    assert losses[0] == pytest.approx(expected, rel=1e-5)
    assert losses[-1] < 0.5 * losses[0]  # it learns the demonstrations
    with pytest.raises(ValueError, match="num_steps"):
        multiturn_sft(model, demos, num_steps=0)
    with pytest.raises(ValueError, match="trajectories"):
        multiturn_sft(model, [], num_steps=1)


def test_evaluate_agent_reports_accuracy_and_tool_use():
    out = evaluate_agent(tiny(), SevensEnv, [0, 1, 2], max_new_tokens=4)
    assert set(out) >= {"accuracy", "call_frequency", "failure_frequency", "turns_per_episode"}
    assert out["turns_per_episode"] == 2 and out["call_frequency"] == 1.0 and 0 <= out["accuracy"] <= 1
    with pytest.raises(ValueError, match="seeds"):
        evaluate_agent(tiny(), SevensEnv, [])


@pytest.mark.parametrize("field,value", [("group_size", 1), ("lr", 0.0), ("clip_eps_low", 0.0), ("num_steps", 0),
                                         ("loss_aggregation", "sum"), ("temperature", -1.0), ("clip_eps_low", 1.5),
                                         ("clip_eps_low", "0.2"), ("clip_eps_high", "x"), ("clip_eps_high", 0.0),
                                         ("clip_eps_high", float("inf")), ("clip_eps_high", True),
                                         ("credit", "gae"), ("gamma", 1.5), ("gamma", -0.1), ("gamma", True),
                                         ("step_weight", -1.0), ("step_weight", float("nan"))])
def test_bad_config_fields_name_themselves(field, value):
    with pytest.raises(ValueError, match=field):
        AgentGRPOConfig(**{field: value})


class NoRewardEnv(SevensEnv):
    """SevensEnv whose answers never earn anything: every group has zero reward variance."""

    def step(self, action_ids):
        observation, _, terminated, truncated, info = super().step(action_ids)
        return observation, 0.0, terminated, truncated, info


def test_groups_without_reward_variance_leave_the_policy_exactly_unchanged():
    """Chapter 16's useless tool on 4-digit problems: no episode is ever rewarded, every advantage (16.2) is 0,
    and AdamW (no weight decay) takes no step at all, however many, so the trained policy evaluates exactly as its
    start. With rewards that differ, the same steps move it (the test can fail)."""
    config = AgentGRPOConfig(group_size=4, prompts_per_step=2, num_steps=5, max_new_tokens=5, lr=0.05)
    for env, moved in ((NoRewardEnv, False), (SevensEnv, True)):
        model = tiny(seed=3)
        start = copy.deepcopy(model.state_dict())
        history = train_agent_grpo(model, env, config, progress=False)
        same = all(torch.equal(start[k], v) for k, v in model.state_dict().items())
        assert same is not moved, env.__name__
        if not moved:
            assert all(h["zero_variance_groups"] == 1.0 and h["loss"] == 0.0 for h in history)


# ----------------------------------------------------------------------------- credit schemes (chapter 17)


class CallOrAnswerEnv:
    """Chapter 17's two paths in miniature: an action starting with '(' is a tool call answered '[5]' (the episode
    goes on), anything else is a final answer, rewarded 1 when it is '5'. Contexts after the same call are equal."""

    def __init__(self):
        self.tokenizer = TOK

    def reset(self, seed=None):
        self.turn = 0
        return [TOK.bos_token_id, *TOK("2+3=", add_special_tokens=False).input_ids]

    def step(self, action_ids):
        text = TOK.decode([i for i in action_ids if i != EOS])
        self.turn += 1
        info = {"tool_call": text.startswith("("), "tool_failed": False, "malformed": False}
        if text.startswith("(") and self.turn == 1:
            return TOK("[5]", add_special_tokens=False).input_ids, 0.0, False, False, info
        return [], float(text == "5"), True, False, info


def _scripted(actions):
    """One episode of CallOrAnswerEnv whose turns are ``actions`` (strings)."""
    turns = iter(actions)
    return rollout(CallOrAnswerEnv(), lambda context: TOK(next(turns), add_special_tokens=False).input_ids + [EOS])


GROUP = [("(2+3)", "5"), ("(2+3)", "6"), ("5",), ("4",)]  # call+right, call+wrong, direct right, direct wrong


def test_broadcast_credit_is_the_group_advantage_on_model_tokens():
    trajs = [_scripted(a) for a in GROUP]
    batch = collate_trajectories(trajs)
    got = episode_token_advantages(trajs, 4, "broadcast")
    expected = torch.tensor([1.0, -1.0, 1.0, -1.0])  # rewards 1, 0, 1, 0: mean 0.5, population std 0.5
    assert torch.equal(got == 0, ~batch["loss_mask"])
    torch.testing.assert_close(got[batch["loss_mask"]],
                               expected[:, None].expand_as(got)[batch["loss_mask"]], rtol=0, atol=1e-5)


def test_rebn_with_gamma_below_one_pushes_down_the_call_of_a_batch_that_always_succeeds():
    """Every episode calls and is right: γ = 1 gives every turn the same return (advantage exactly 0), while
    γ = 0.5 gives the call's turn 0.5 and the answer's 1, z-scored to exactly −1 and +1 (17.4's collapse)."""
    trajs = [_scripted(("(2+3)", "5")) for _ in range(4)]
    batch = collate_trajectories(trajs)
    assert torch.equal(episode_token_advantages(trajs, 4, "rebn", gamma=1.0), torch.zeros_like(batch["turn_ids"],
                                                                                           dtype=torch.float32))
    got = episode_token_advantages(trajs, 4, "rebn", gamma=0.5)
    call, answer = batch["loss_mask"] & (batch["turn_ids"] == 0), batch["loss_mask"] & (batch["turn_ids"] == 1)
    torch.testing.assert_close(got[call], torch.full_like(got[call], -1.0))
    torch.testing.assert_close(got[answer], torch.full_like(got[answer], 1.0))
    assert (got[~batch["loss_mask"]] == 0).all()


def test_gigpo_credit_groups_turns_by_their_exact_context():
    """The two calling episodes share the context of their answer turn (same call, same tool answer): they form a
    step group of two, whose step advantage is ±1; every other turn's state is its own, or the shared prompt."""
    trajs = [_scripted(a) for a in GROUP]
    batch = collate_trajectories(trajs)
    got = episode_token_advantages(trajs, 4, "gigpo", gamma=1.0, step_weight=0.5)
    # turn 0: all four share the prompt; their turn-0 returns are the rewards 1, 0, 1, 0 -> step advantage ±1
    # turn 1 of the calling episodes: returns 1 and 0 in a group of two -> ±1; episode level ±1 throughout
    expected_turn = torch.tensor([[1.5, 1.5], [-1.5, -1.5], [1.5, 0.0], [-1.5, 0.0]])
    by_token = expected_turn.gather(1, batch["turn_ids"].clamp(min=0)) * batch["loss_mask"]
    torch.testing.assert_close(got, by_token, rtol=0, atol=1e-5)
    # ω = 0 is the episode level alone: broadcast
    torch.testing.assert_close(episode_token_advantages(trajs, 4, "gigpo", step_weight=0.0),
                               episode_token_advantages(trajs, 4, "broadcast"), rtol=0, atol=1e-6)
    with pytest.raises(ValueError, match="credit"):
        episode_token_advantages(trajs, 4, "turn")
    with pytest.raises(ValueError, match="group_size"):
        episode_token_advantages(trajs, 3, "gigpo")


def _shaped(actions, c):
    """``_scripted`` on CallOrAnswerEnv with a tool bonus and a format penalty of ``c`` each."""
    turns = iter(actions)
    return rollout(ShapedRewards(CallOrAnswerEnv(), tool_bonus=c, format_penalty=c),
                   lambda context: TOK(next(turns), add_special_tokens=False).input_ids + [EOS])


@pytest.mark.parametrize("c", [0.25, 0.05])
def test_a_cancelling_penalty_and_bonus_leave_broadcast_and_gigpo_unchanged_but_not_rebn(c):
    """A format penalty c on the call and a tool bonus c with the last turn cancel in each episode's total and in
    its first turn's return at γ = 1: broadcast's advantages are the unshaped ones (bit for bit at c = 1/4), and
    GiGPO's too up to rounding (its step groups hold turns after the same calls, all shifted by the same c). ReBN
    pools the calls (return 1) with the answers (return 1 + c): in a batch that always succeeds the call gets −1
    and the answer +1, whatever c > 0, where without shaping both get exactly 0."""
    plain, shaped = [_scripted(a) for a in GROUP], [_shaped(a, c) for a in GROUP]
    torch.testing.assert_close(torch.tensor([t.reward for t in shaped]), torch.tensor([1.0, 0.0, 1.0, 0.0]),
                               rtol=0, atol=1e-12)
    compare = torch.equal if c == 0.25 else lambda a, b: torch.allclose(a, b, rtol=0, atol=1e-5)
    assert compare(episode_token_advantages(shaped, 4, "broadcast"), episode_token_advantages(plain, 4, "broadcast"))
    torch.testing.assert_close(episode_token_advantages(shaped, 4, "gigpo", gamma=1.0),
                               episode_token_advantages(plain, 4, "gigpo", gamma=1.0), rtol=0, atol=1e-5)
    assert not torch.allclose(episode_token_advantages(shaped, 4, "rebn", gamma=1.0),
                              episode_token_advantages(plain, 4, "rebn", gamma=1.0), atol=1e-3)
    succeed = [_shaped(("(2+3)", "5"), c) for _ in range(4)]
    batch = collate_trajectories(succeed)
    got = episode_token_advantages(succeed, 4, "rebn", gamma=1.0)
    call, answer = batch["loss_mask"] & (batch["turn_ids"] == 0), batch["loss_mask"] & (batch["turn_ids"] == 1)
    torch.testing.assert_close(got[call], torch.full_like(got[call], -1.0), rtol=0, atol=1e-4)
    torch.testing.assert_close(got[answer], torch.full_like(got[answer], 1.0), rtol=0, atol=1e-4)
    assert torch.equal(episode_token_advantages([_scripted(("(2+3)", "5")) for _ in range(4)], 4, "rebn", gamma=1.0),
                       torch.zeros_like(got))


def test_the_episode_metrics_report_the_outcome_without_the_shaping():
    """``outcome`` (a metric of every step) is the reward less each turn's ``info["shaping"]``: on the four scripted
    episodes, 2 of 4 right; ``reward`` adds the shaping (−0.5 per call, 0.25 per call with the last turn)."""
    from rlbook.algos.agent import _episode_metrics

    shaped = [rollout(ShapedRewards(CallOrAnswerEnv(), tool_bonus=0.25, format_penalty=0.5),
                      lambda context, t=iter(a): TOK(next(t), add_special_tokens=False).input_ids + [EOS]) for a in GROUP]
    metrics = _episode_metrics(shaped)
    assert metrics["outcome"] == 0.5 == _episode_metrics([_scripted(a) for a in GROUP])["outcome"]
    assert metrics["reward"] == (1 + 0 + 1 + 0 + 2 * (0.25 - 0.5)) / 4  # the two calling episodes: −0.5 + 0.25


def _assert_one_sgd_step_matches(model, reference, loss, lr):
    """Take one SGD step on ``loss`` (a function of ``reference``'s parameters) by hand, and check that ``model``,
    stepped by the trainer from the same start, landed on the same parameters."""
    grads = torch.autograd.grad(loss, list(reference.parameters()))
    with torch.no_grad():
        for p, g in zip(reference.parameters(), grads):
            p -= lr * g
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("credit,gamma", [("rebn", 0.5), ("gigpo", 0.5)])
def test_the_step_follows_the_credit_schemes_token_advantages(credit, gamma):
    """One SGD step under a credit scheme equals the masked policy gradient with that scheme's token advantages,
    computed from the same episodes: a step that fell back to the broadcast advantage would not match."""
    config = AgentGRPOConfig(group_size=4, prompts_per_step=2, max_new_tokens=5, lr=0.5, credit=credit, gamma=gamma)
    model, reference = tiny(seed=1), tiny(seed=1)
    gen, ref_gen = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    agent_grpo_step(model, torch.optim.SGD(model.parameters(), lr=0.5), SevensEnv, [0, 1], config, gen)
    trajs = batch_rollouts(reference, [SevensEnv() for _ in range(8)], [0] * 8, max_new_tokens=5, generator=ref_gen)
    batch = collate_trajectories(trajs)
    adv = episode_token_advantages(trajs, 4, credit, gamma=gamma)[:, 1:]
    broadcast = episode_token_advantages(trajs, 4, "broadcast")[:, 1:]
    assert not torch.allclose(adv, broadcast), "the scheme must differ from broadcast on this batch"
    log_probs = episode_log_probs(reference, batch["input_ids"], batch["attention_mask"])
    mask = batch["loss_mask"][:, 1:].float()
    _assert_one_sgd_step_matches(model, reference, -(adv * log_probs * mask).sum() / mask.sum(), lr=0.5)


# ----------------------------------------------------------------------------- asynchronous rollouts (chapter 17)


def test_a_stale_sampler_lags_by_exactly_k_steps():
    """train_agent_grpo with staleness k equals agent_grpo_step driven by hand with the policy of step max(s − k, 0)
    as the sampler: a lag off by one (the sampler of step s − k + 1, or the current policy) would not match."""
    k, steps = 2, 4
    config = AgentGRPOConfig(group_size=4, prompts_per_step=2, num_steps=steps, max_new_tokens=5, lr=0.05, staleness=k)
    model, reference = tiny(seed=4), tiny(seed=4)
    train_agent_grpo(model, SevensEnv, config, progress=False)
    generator = torch.Generator().manual_seed(config.seed)
    optimizer = torch.optim.AdamW(reference.parameters(), lr=config.lr, weight_decay=0.0)
    weights = [copy.deepcopy(reference.state_dict())]  # weights[s] = the policy of step s
    for step in range(steps):
        sampler = tiny(seed=4)
        sampler.load_state_dict(weights[max(step - k, 0)])
        seeds = [1_000_000 + step * 2 + j for j in range(2)]
        agent_grpo_step(reference, optimizer, SevensEnv, seeds, config, generator, sampler=sampler)
        weights.append(copy.deepcopy(reference.state_dict()))
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p, q, rtol=0, atol=0)
    lagging_by_one = tiny(seed=4)
    config1 = AgentGRPOConfig(group_size=4, prompts_per_step=2, num_steps=steps, max_new_tokens=5, lr=0.05, staleness=1)
    train_agent_grpo(lagging_by_one, SevensEnv, config1, progress=False)
    assert any(not torch.equal(p, q) for p, q in zip(lagging_by_one.parameters(), reference.parameters()))


def test_the_truncated_importance_weight_reweights_model_tokens_only():
    """One SGD step on episodes a different model sampled, with TIS: the update equals the masked policy gradient
    with each model token weighted by min(π_θ/π_sampler, C), computed by hand; uncorrected, the weights are 1."""
    for correction in ("token_truncate", "none"):
        config = AgentGRPOConfig(group_size=4, prompts_per_step=2, max_new_tokens=5, lr=0.5,
                                 is_correction=correction, is_cap=1.5)
        model, reference, sampler = tiny(seed=1), tiny(seed=1), tiny(seed=7)
        gen, ref_gen = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
        agent_grpo_step(model, torch.optim.SGD(model.parameters(), lr=0.5), SevensEnv, [0, 1], config, gen,
                        sampler=sampler)
        trajs = batch_rollouts(sampler, [SevensEnv() for _ in range(8)], [0] * 8, max_new_tokens=5, generator=ref_gen)
        batch = collate_trajectories(trajs)
        adv = episode_token_advantages(trajs, 4)[:, 1:]
        log_probs = episode_log_probs(reference, batch["input_ids"], batch["attention_mask"])
        with torch.no_grad():
            sampler_lp = episode_log_probs(sampler, batch["input_ids"], batch["attention_mask"])
        weight = torch.exp(log_probs.detach() - sampler_lp).clamp(max=1.5) if correction != "none" else torch.ones_like(sampler_lp)
        assert correction == "none" or (weight[batch["loss_mask"][:, 1:]] < 1.5).any()
        mask = batch["loss_mask"][:, 1:].float()
        _assert_one_sgd_step_matches(model, reference, -(weight * adv * log_probs * mask).sum() / mask.sum(), lr=0.5)


@pytest.mark.parametrize("field,value", [("staleness", -1), ("staleness", 1.5), ("staleness", True),
                                         ("is_correction", "tis"), ("is_cap", 0.5)])
def test_bad_asynchronous_settings_name_themselves(field, value):
    with pytest.raises(ValueError, match=field):
        AgentGRPOConfig(**{field: value})


# ----------------------------------------------------------------------------- StarPO-S's rollout filter (chapter 17)


def test_the_filter_keeps_exactly_the_groups_with_the_largest_spread_by_enumeration():
    """Every 0/1 reward table of 3 groups of 3 episodes, every ratio: the kept groups are int(p × P) of them, none
    kept has a smaller spread than one dropped, and on ties the earlier group is kept."""
    import itertools

    for bits in itertools.product((0.0, 1.0), repeat=9):
        table = torch.tensor(bits).reshape(3, 3)
        spread = table.std(dim=1)
        for ratio in (1 / 3, 0.5, 2 / 3, 1.0):
            keep = filter_groups(table, ratio)
            assert int(keep.sum()) == int(ratio * 3)
            for i, j in itertools.product(range(3), repeat=2):
                if keep[i] and not keep[j]:
                    assert spread[i] > spread[j] or (spread[i] == spread[j] and i < j), (bits, ratio)


@pytest.mark.parametrize("kwargs,match", [({"rollout_filter_ratio": 0.0}, "rollout_filter_ratio"),
                                          ({"rollout_filter_ratio": 1.5}, "rollout_filter_ratio"),
                                          ({"rollout_filter_ratio": True}, "rollout_filter_ratio"),
                                          ({"rollout_filter_ratio": 0.1}, "keeps int"),
                                          ({"group_rewards": torch.zeros(4)}, "group_rewards")])
def test_the_filter_names_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        filter_groups(**{"group_rewards": torch.zeros(4, 2), "rollout_filter_ratio": 0.5, **kwargs})


@pytest.mark.parametrize("value", [0.0, 1.01, "0.5", True, 0.1])
def test_a_bad_filter_ratio_names_itself_in_the_config(value):
    with pytest.raises(ValueError, match="rollout_filter_ratio"):
        AgentGRPOConfig(prompts_per_step=4, rollout_filter_ratio=value)


def test_the_filtered_step_is_the_masked_policy_gradient_on_the_kept_groups_only():
    """One SGD step with p = 0.5: the update equals the hand-computed masked policy gradient over the episodes of
    the 2 groups (of 4) with the largest reward spread, the token mean counting their tokens only; a step that
    kept every group, or masked the dropped groups but still counted their tokens, would not match."""
    config = AgentGRPOConfig(group_size=4, prompts_per_step=4, max_new_tokens=5, lr=0.5, rollout_filter_ratio=0.5)
    model, reference = tiny(seed=2), tiny(seed=2)
    gen, ref_gen = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    metrics = agent_grpo_step(model, torch.optim.SGD(model.parameters(), lr=0.5), SevensEnv, [0, 1, 2, 3], config,
                              gen)
    trajs = batch_rollouts(reference, [SevensEnv() for _ in range(16)], [0] * 16, max_new_tokens=5, generator=ref_gen)
    batch = collate_trajectories(trajs)
    spread = batch["rewards"].reshape(4, 4).std(dim=1)
    kept = torch.argsort(-spread, stable=True)[:2]
    dropped = [g for g in range(4) if g not in kept.tolist()]
    assert min(spread[dropped]) > 0, "a dropped group must carry signal, or dropping it changes nothing"
    rows = torch.cat([torch.arange(4 * int(g), 4 * int(g) + 4) for g in sorted(kept.tolist())])
    adv = episode_token_advantages(trajs, 4)[:, 1:][rows]
    log_probs = episode_log_probs(reference, batch["input_ids"][rows], batch["attention_mask"][rows])
    mask = batch["loss_mask"][:, 1:][rows].float()
    _assert_one_sgd_step_matches(model, reference, -(adv * log_probs * mask).sum() / mask.sum(), lr=0.5)
    assert metrics["kept_groups"] == 2 and metrics["model_tokens"] == int(mask.sum())
    torch.testing.assert_close(metrics["reward_std"], float(spread.mean()))
    torch.testing.assert_close(metrics["kept_reward_std"], float(spread[kept].mean()))


def test_the_steps_entropy_and_gradient_norm_are_those_computed_by_hand():
    """The step's ``entropy`` is the mean next-token entropy over every sampled episode's model tokens, and its
    ``grad_norm`` the L2 norm of the loss's gradient, both recomputed here from the same episodes."""
    config = AgentGRPOConfig(group_size=4, prompts_per_step=2, max_new_tokens=5, lr=0.5)
    model, reference = tiny(seed=1), tiny(seed=1)
    gen, ref_gen = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    metrics = agent_grpo_step(model, torch.optim.SGD(model.parameters(), lr=0.5), SevensEnv, [0, 1], config, gen)
    trajs = batch_rollouts(reference, [SevensEnv() for _ in range(8)], [0] * 8, max_new_tokens=5, generator=ref_gen)
    batch = collate_trajectories(trajs)
    logits = reference(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"].long()).logits[:, :-1]
    probs = torch.softmax(logits.float(), dim=-1)
    entropy = -(probs * torch.log(probs)).sum(-1).detach()
    mask = batch["loss_mask"][:, 1:].float()
    torch.testing.assert_close(metrics["entropy"], float((entropy * mask).sum() / mask.sum()), rtol=1e-5, atol=1e-6)
    adv = episode_token_advantages(trajs, 4)[:, 1:]
    log_probs = episode_log_probs(reference, batch["input_ids"], batch["attention_mask"])
    grads = torch.autograd.grad(-(adv * log_probs * mask).sum() / mask.sum(), list(reference.parameters()))
    norm = float(torch.sqrt(sum((g ** 2).sum() for g in grads)))
    assert norm > 0
    torch.testing.assert_close(metrics["grad_norm"], norm, rtol=1e-4, atol=1e-7)
