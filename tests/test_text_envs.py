"""rlbook.envs.text: the token-id environment contract, the tool tasks, and the multi-turn rollout.

What is proved here: the tools answer exactly (and the controls do not); a scripted agent that calls
the tool solves what it could not guess; the rollout keeps token ids end to end (each turn's context
extends the last: the extension property); the loss mask marks the model's tokens and nothing else,
so a masked loss has exactly zero gradient at the environment's tokens and its normaliser counts the
model's tokens only.
"""

from __future__ import annotations

import pytest
import torch

from rlbook.aggregation import token_mean
from rlbook.envs.text import (
    STOP_TEXT,
    TOOL_ALPHABET,
    CalculatorEnv,
    KeyValueLookupEnv,
    ShapedRewards,
    Trajectory,
    collate_trajectories,
    model_policy,
    rollout,
    samples_from_turns,
)
from rlbook.lm.tokenizer import build_char_tokenizer

TOK = build_char_tokenizer(TOOL_ALPHABET)
EOS = TOK.eos_token_id


def ids(text: str) -> list[int]:
    return TOK(text, add_special_tokens=False).input_ids


def text(token_ids) -> str:
    return TOK.decode(list(token_ids))


def prompt_of(env, seed=None) -> str:
    p = env.reset(seed)
    assert p[0] == TOK.bos_token_id
    return text(p[1:])


def test_the_calculator_answers_exactly_and_scores_the_answer():
    env = CalculatorEnv(TOK, num_digits=4, seed=3)
    prompt = prompt_of(env)
    a, b = prompt[:-1].split("+")
    assert len(a) == len(b) == 4 and prompt.endswith("=")
    obs, reward, terminated, truncated, info = env.step(ids(f"({a}+{b})"))
    assert text(obs) == f"[{int(a) + int(b)}]" and (reward, terminated, truncated) == (0.0, False, False)
    assert info == {"tool_call": True, "tool_failed": False, "malformed": False}
    obs, reward, terminated, truncated, info = env.step(ids(str(int(a) + int(b))) + [EOS])
    assert (obs, reward, terminated, truncated) == ([], 1.0, True, False)
    with pytest.raises(RuntimeError, match="reset"):
        env.step(ids("1") + [EOS])
    prompt_of(env)
    assert env.step(ids(str(int(env.answer) + 1)) + [EOS])[1:3] == (0.0, True)  # a wrong answer


def test_multiplication_and_a_failed_call():
    env = CalculatorEnv(TOK, num_digits=3, operation="*", mul_digits=2, seed=1)
    a, b = prompt_of(env)[:-1].split("*")
    assert len(a) == 3 and len(b) == 2 and env.answer == str(int(a) * int(b))
    obs, _, terminated, _, _ = env.step(ids(f"({a}*{b})"))
    assert text(obs) == f"[{int(a) * int(b)}]" and not terminated
    obs, _, terminated, _, info = env.step(ids("(12+)"))  # not an expression: the tool fails, the episode goes on
    assert text(obs) == "[]" and info["tool_failed"] and not terminated


def test_the_control_tools_return_nothing_or_noise():
    useless = CalculatorEnv(TOK, num_digits=4, tool="useless", seed=0)
    a, b = prompt_of(useless)[:-1].split("+")
    obs, *_, info = useless.step(ids(f"({a}+{b})"))
    assert text(obs) == "[]" and not info["tool_failed"]
    harmful = CalculatorEnv(TOK, num_digits=4, tool="harmful", seed=0)
    answers = []
    for episode in range(20):
        a, b = prompt_of(harmful, seed=episode)[:-1].split("+")
        obs, *_ = harmful.step(ids(f"({a}+{b})"))
        noise = text(obs)[1:-1]
        assert len(noise) == len(str(int(a) + int(b)))  # as many digits as the right result
        answers.append(noise == str(int(a) + int(b)))
    assert sum(answers) <= 1  # noise, not the result (1 in 9,000 per call by chance)


def test_truncation_after_max_turns_and_malformed_turns():
    env = CalculatorEnv(TOK, num_digits=2, max_turns=2, seed=0)
    prompt_of(env)
    assert env.step(ids("(1+1)"))[2:4] == (False, False)
    _, reward, terminated, truncated, _ = env.step(ids("(1+1)"))
    assert (reward, terminated, truncated) == (0.0, False, True)
    with pytest.raises(RuntimeError):
        env.step(ids("(1+1)"))
    prompt_of(env)
    _, reward, terminated, _, info = env.step(ids("12+"))  # neither a call nor an answer
    assert (reward, terminated, info["malformed"]) == (0.0, True, True)


def test_the_lookup_table_is_new_each_episode_and_the_tool_follows_it():
    env = KeyValueLookupEnv(TOK, hops=2, num_keys=16, seed=5)
    tables = []
    for episode in range(3):
        start, hops = prompt_of(env)[:-1].split(":")
        assert hops == "2" and len(start) == 2
        tables.append(dict(env.table))
        node = start
        for _ in range(2):
            obs, _, terminated, _, info = env.step(ids(f"({node})"))
            assert info["tool_call"] and not terminated
            node = text(obs)[1:-1]
        assert env.step(ids(node) + [EOS])[1] == 1.0
    assert tables[0] != tables[1] != tables[2]
    ranged = KeyValueLookupEnv(TOK, hops=(1, 3), seed=0)
    assert {prompt_of(ranged)[-2] for _ in range(40)} == {"1", "2", "3"}


def _shaped_episode(turns, c=0.25, seed=4):
    """One episode of the shaped 2-digit calculator, its turns scripted: '{expr}' the problem, '{sum}' its answer."""
    env = ShapedRewards(CalculatorEnv(TOK, num_digits=2, max_turns=3), tool_bonus=c, format_penalty=c)
    expression = prompt_of(env, seed)[:-1]
    plan = iter(turns)
    return rollout(env, lambda context: ids(next(plan).format(expr=expression, sum=env.answer)), seed=seed)


def test_shaping_charges_each_call_and_pays_the_bonus_with_the_last_turn():
    """Turn rewards, by hand (c = 0.25): call + right answer (−c, 1 + c); call + wrong answer (−c, c); right at
    once (1); a failed call is still a call (−c, 1 + c); three calls, truncated (−c, −c, −c + 3c). Every episode's
    shaping sums to exactly 0 (potential-based at γ = 1); the unshaped outcome is the reward less
    ``info["shaping"]``."""
    cases = {("({expr})", "{sum}</s>"): [-0.25, 1.25], ("({expr})", "1</s>"): [-0.25, 0.25], ("{sum}</s>",): [1.0],
             ("(1+)", "{sum}</s>"): [-0.25, 1.25], ("({expr})",) * 3: [-0.25, -0.25, 0.5]}
    for turns, expected in cases.items():
        episode = _shaped_episode(turns)
        assert episode.turn_rewards == expected, turns
        outcome = [r - i["shaping"] for r, i in zip(episode.turn_rewards, episode.infos)]
        assert outcome == [0.0] * (len(turns) - 1) + [float(turns[-1] == "{sum}</s>")], turns
        assert sum(i["shaping"] for i in episode.infos) == 0.0 and episode.reward == sum(outcome), turns
    assert _shaped_episode(("(1+)", "{sum}</s>")).infos[0]["tool_failed"]
    # no shaping: the wrapped environment's rewards exactly, and everything else is the wrapped environment's
    assert _shaped_episode(("({expr})", "{sum}</s>"), c=0.0).turn_rewards == [0.0, 1.0]
    env = ShapedRewards(CalculatorEnv(TOK, num_digits=2, seed=0), tool_bonus=0.1)
    prompt_of(env, 7)
    assert env.tokenizer is TOK and env.answer == env.env.answer and env.max_turns == 3


@pytest.mark.parametrize("kwargs,match", [
    ({"tool_bonus": -0.1}, "tool_bonus"), ({"format_penalty": float("nan")}, "format_penalty"),
    ({"tool_bonus": True}, "tool_bonus"), ({"format_penalty": "0.2"}, "format_penalty"),
])
def test_bad_shaping_names_itself(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ShapedRewards(CalculatorEnv(TOK, num_digits=2), **kwargs)
    with pytest.raises(ValueError, match="env"):
        ShapedRewards(object())


@pytest.mark.parametrize("make,match", [
    (lambda: CalculatorEnv(TOK, num_digits=7), "num_digits"),
    (lambda: CalculatorEnv(TOK, operation="-"), "operation"),
    (lambda: CalculatorEnv(TOK, tool="web"), "tool"),
    (lambda: CalculatorEnv(TOK, max_turns=0), "max_turns"),
    (lambda: CalculatorEnv(build_char_tokenizer(), num_digits=2), "TOOL_ALPHABET"),
    (lambda: KeyValueLookupEnv(TOK, hops=4), "hops"),
    (lambda: KeyValueLookupEnv(TOK, num_keys=101), "num_keys"),
])
def test_bad_arguments_name_themselves(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_an_empty_action_is_refused():
    env = CalculatorEnv(TOK, seed=0)
    env.reset()
    with pytest.raises(ValueError, match="action_ids"):
        env.step([])


def _tool_user(env):
    """A scripted agent that calls the calculator on the prompt, then copies the tool's answer."""
    def policy(context):
        seen = text(context[1:])
        if "[" not in seen:
            return ids("(" + seen[:-1] + ")")
        return ids(seen[seen.index("[") + 1: seen.index("]")]) + [EOS]
    return policy


def test_a_rollout_keeps_ids_and_marks_the_models_tokens():
    env = CalculatorEnv(TOK, num_digits=4, seed=11)
    prompt = env.reset(seed=2)  # what the rollout's reset(seed=2) will give again
    traj = rollout(env, _tool_user(env), seed=2)
    a_b = text(prompt[1:])[:-1]
    call, answer = ids(f"({a_b})"), ids(env.answer) + [EOS]
    result = ids(f"[{env.answer}]")
    assert traj.input_ids == prompt + call + result + answer
    assert traj.loss_mask == [0] * len(prompt) + [1] * len(call) + [0] * len(result) + [1] * len(answer)
    assert traj.turn_ids == [-1] * len(prompt) + [0] * (len(call) + len(result)) + [1] * len(answer)
    assert traj.turn_rewards == [0.0, 1.0] and traj.reward == 1.0 and traj.terminated and not traj.truncated
    # the extension property: each turn's context starts with exactly the ids of the turns before it
    assert traj.contexts == [prompt, prompt + call + result]
    for earlier, later in zip(traj.contexts, traj.contexts[1:] + [traj.input_ids]):
        assert later[: len(earlier)] == earlier


def test_a_guess_without_the_tool_rarely_solves_it():
    env = CalculatorEnv(TOK, num_digits=4, seed=0)
    solved = sum(rollout(env, lambda c: ids("10000") + [EOS], seed=s).reward for s in range(50))
    assert solved <= 1


def test_collate_pads_and_keeps_every_field():
    env = CalculatorEnv(TOK, num_digits=2, seed=0)
    short = rollout(env, lambda c: ids("7") + [EOS], seed=1)
    long = rollout(env, _tool_user(env), seed=1)
    batch = collate_trajectories([short, long], pad_token_id=TOK.pad_token_id)
    B, T = batch["input_ids"].shape
    assert (B, T) == (2, len(long.input_ids)) and batch["turn_rewards"].shape == (2, 2)
    assert batch["input_ids"][0, len(short.input_ids):].eq(TOK.pad_token_id).all()
    assert batch["loss_mask"][0].tolist() == [bool(m) for m in short.loss_mask] + [False] * (T - len(short.loss_mask))
    assert batch["turn_ids"][0, len(short.input_ids):].eq(-1).all()
    assert batch["turn_mask"].tolist() == [[True, False], [True, True]]
    assert batch["rewards"].tolist() == [short.reward, long.reward]
    with pytest.raises(ValueError, match="trajectories"):
        collate_trajectories([])


def _tiny_model(seed=0):
    from rlbook.lm.model import build_policy, policy_config

    return build_policy(policy_config(TOK, n_layer=1, n_embd=32, n_head=2, n_positions=64), seed=seed, device="cpu")


def test_the_masked_loss_has_no_gradient_at_environment_tokens_and_counts_model_tokens():
    """A REINFORCE-style loss −A·log π(token) averaged over the loss mask: the gradient with respect to the
    logits that predict prompt, tool-output or padding tokens is exactly 0; the normaliser is the number of
    model tokens (dividing by all tokens would shrink the loss by their ratio)."""
    env = CalculatorEnv(TOK, num_digits=2, seed=0)
    batch = collate_trajectories([rollout(env, _tool_user(env), seed=s) for s in range(3)] +
                                 [rollout(env, lambda c: ids("5") + [EOS], seed=9)], pad_token_id=TOK.pad_token_id)
    model = _tiny_model()
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"].long()).logits
    logits.retain_grad()
    targets = batch["input_ids"][:, 1:]
    log_probs = torch.log_softmax(logits[:, :-1].float(), dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    mask = batch["loss_mask"][:, 1:]
    advantages = (batch["rewards"] - batch["rewards"].mean())[:, None].expand_as(log_probs)
    loss = token_mean(-advantages * log_probs, mask)
    loss.backward()
    grad = logits.grad[:, :-1]  # position t predicts token t + 1
    assert grad[~mask].abs().max() == 0.0 and grad[mask].abs().max() > 0
    by_hand = (-advantages * log_probs)[mask].sum() / mask.sum()
    torch.testing.assert_close(loss, by_hand)  # the same sum in another order: float32 rounding apart
    all_tokens = (-advantages * log_probs * mask).sum() / batch["attention_mask"][:, 1:].sum()
    ratio = mask.sum() / batch["attention_mask"][:, 1:].sum()
    torch.testing.assert_close(all_tokens, loss * ratio)  # the diluted loss: smaller by the model-token share
    assert ratio < 0.7


def test_the_model_policy_stops_at_a_stop_token_and_repeats_with_its_generator():
    model = _tiny_model(seed=1)
    stops = [TOK.convert_tokens_to_ids(t) for t in STOP_TEXT]
    forbidden = [TOK.pad_token_id, TOK.bos_token_id, TOK.unk_token_id]
    env = CalculatorEnv(TOK, num_digits=2, max_turns=3, seed=0)
    runs = []
    for _ in range(2):
        policy = model_policy(model, stops, max_new_tokens=6, generator=torch.Generator().manual_seed(4),
                              forbidden_ids=forbidden)
        runs.append([rollout(env, policy, seed=s) for s in range(8)])
    assert [t.input_ids for t in runs[0]] == [t.input_ids for t in runs[1]]
    for traj in runs[0]:
        assert isinstance(traj, Trajectory) and 1 <= traj.num_turns <= 3
        for turn in range(traj.num_turns):
            action = [i for i, m, k in zip(traj.input_ids, traj.loss_mask, traj.turn_ids) if m and k == turn]
            assert 1 <= len(action) <= 6 and not set(action) & set(forbidden)
            assert action[-1] in stops or len(action) == 6
            assert all(i not in stops for i in action[:-1])
    with pytest.raises(ValueError, match="temperature"):
        model_policy(model, stops, temperature=0)
    with pytest.raises(ValueError, match="max_new_tokens"):
        model_policy(model, stops, max_new_tokens=0)


def test_a_token_in_token_out_episode_is_one_sample():
    env = CalculatorEnv(TOK, num_digits=3, seed=0)
    traj = rollout(env, _tool_user(env), seed=4)
    actions = [[i for i, m, k in zip(traj.input_ids, traj.loss_mask, traj.turn_ids) if m and k == turn]
               for turn in range(traj.num_turns)]
    samples = samples_from_turns(list(zip(traj.contexts, actions)))
    assert samples == [{"input_ids": traj.input_ids, "loss_mask": traj.loss_mask}]


def _thought_dropping_turns(num_turns=3):
    """A template that shows earlier turns without their reasoning: each action is 'thought' ids 7, 7 then
    the reply; the next context renders the history with the thought removed (not a prefix-extension)."""
    history, turns = [1, 4, 5], []
    for k in range(num_turns):
        action = [7, 7, 10 + k]  # thought (7, 7), then the reply
        turns.append((list(history), action))
        history = history + [10 + k] + [20 + k]  # the re-rendered history: the reply only, then the observation
    return turns


def test_a_template_that_drops_the_thought_splits_the_episode_instead_of_corrupting_it():
    """Every action stays after exactly the context it was sampled in (so its log-probability, and the
    importance ratio, is the sampler's); concatenating the turns would put turn 1's action after ids that
    include turn 0's thought, which the policy never saw at turn 1."""
    turns = _thought_dropping_turns()
    samples = samples_from_turns(turns)
    assert len(samples) == 3  # each turn's context breaks the prefix: one sample per turn
    for sample, (context, action) in zip(samples, turns):
        assert sample["input_ids"] == context + action
        assert sample["loss_mask"] == [0] * len(context) + [1] * len(action)
    naive = [i for ctx, act in turns[:1] for i in ctx + act] + turns[1][1]  # turn 0 then turn 1's action
    assert naive[: -len(turns[1][1])] != turns[1][0]  # what concatenation would have conditioned on
    # a mixed episode: the first two turns extend, the third re-renders
    ctx0, act0 = [1, 4], [7, 9]
    ctx1 = ctx0 + act0 + [30]
    act1 = [8]
    ctx2 = [1, 4, 9, 30, 8, 31]  # drops turn 0's 7
    samples = samples_from_turns([(ctx0, act0), (ctx1, act1), (ctx2, [6])])
    assert samples == [{"input_ids": ctx1 + act1, "loss_mask": [0, 0, 1, 1, 0, 1]},
                       {"input_ids": ctx2 + [6], "loss_mask": [0] * 6 + [1]}]
    with pytest.raises(ValueError, match="turns"):
        samples_from_turns([])
    with pytest.raises(ValueError, match="turn 0"):
        samples_from_turns([([1], [])])


def test_batched_rollouts_equal_one_episode_at_a_time():
    """Greedy decoding: the batched rollouts (left-padded contexts, one sampler call per turn, rows ending at
    ')' or '</s>') give the same ids, masks and rewards as :func:`rollout` with :func:`model_policy`, episode by
    episode; a group (environments reset with one seed) shares its prompt."""
    from rlbook.envs.text import batch_rollouts

    model = _tiny_model(seed=2)
    stops = [TOK.convert_tokens_to_ids(t) for t in STOP_TEXT]
    forbidden = [TOK.pad_token_id, TOK.bos_token_id, TOK.unk_token_id]
    make = lambda: [CalculatorEnv(TOK, num_digits=2, max_turns=3, seed=0) for _ in range(6)]
    seeds = [0, 0, 0, 1, 2, 3]
    batched = batch_rollouts(model, make(), seeds, max_new_tokens=6, greedy=True)
    policy = model_policy(model, stops, max_new_tokens=6, greedy=True, forbidden_ids=forbidden)
    one_by_one = [rollout(env, policy, seed=s) for env, s in zip(make(), seeds)]
    for a, b in zip(batched, one_by_one):
        assert (a.input_ids, a.loss_mask, a.turn_ids, a.turn_rewards) == (b.input_ids, b.loss_mask, b.turn_ids,
                                                                         b.turn_rewards)
        assert a.contexts == b.contexts and (a.terminated, a.truncated) == (b.terminated, b.truncated)
    assert batched[0].contexts[0] == batched[1].contexts[0] == batched[2].contexts[0] != batched[3].contexts[0]
    sampled = batch_rollouts(model, make(), seeds, max_new_tokens=6, generator=torch.Generator().manual_seed(1))
    for traj in sampled:  # every turn ends at its first stop id, or at the budget
        for turn in range(traj.num_turns):
            action = [i for i, m, k in zip(traj.input_ids, traj.loss_mask, traj.turn_ids) if m and k == turn]
            assert all(i not in stops for i in action[:-1]) and (action[-1] in stops or len(action) == 6)
    with pytest.raises(ValueError, match="seeds"):
        batch_rollouts(model, make(), [0])
