"""train_grpo against a learned reward model: the batched reward path, ``reward_source``, the per-step callback.

The batched path (``task.reward_batch``, :meth:`rlbook.lm.ProxyRewardTask.reward_batch`) must be
an optimisation only: its scores equal, bit for bit, those of one completion per forward pass, so a
GRPO run gives the same history and weights either way. ``GRPOConfig.reward_source`` says which
reward trains the policy, the model itself being ``train_grpo``'s ``reward_model`` argument.
"""

import numpy as np
import pytest
import torch

import lm_helpers
import rlbook as rl
from rlbook.algos.grpo_rollouts import sample_kwargs, task_rewards
from rlbook.lm.preference_task import ProxyRewardTask, proxy_rewards
from rlbook.lm.sampling import sample_completions
from rlbook.lm.tokenizer import encode_prompts, forbidden_token_ids

pytestmark = pytest.mark.usefixtures("one_thread")

TASK = rl.lm.ScratchpadAdditionTask(num_digits=2)
TOK = rl.lm.build_char_tokenizer(TASK.alphabet)


def tiny_policy(seed=0):
    return rl.lm.build_policy(rl.lm.policy_config(TOK, n_layer=1, n_embd=32, n_head=2), seed=seed).eval()


def reward_model(seed=1):
    """A random scalar head on a random tiny transformer: scores unrelated to addition, spread ~1."""
    return rl.lm.build_reward_model(tiny_policy(seed=7), init_std=1.0, seed=seed).requires_grad_(False)


def cfg(**overrides):
    # the run's device (--device; CPU by default), the one tiny_policy() and reward_model() are built on
    base = dict(prompts_per_step=8, group_size=4, num_steps=3, max_new_tokens=6, lr=3e-3, seed=0, device=str(rl.get_device()))
    return rl.GRPOConfig(**{**base, **overrides})


class PerCallOnly:
    """A task that exposes only the per-completion ``reward`` of the task it wraps (no ``reward_batch``)."""

    def __init__(self, task):
        self.inner, self.calls = task, 0

    def reward(self, prompt, completion):
        self.calls += 1
        return self.inner.reward(prompt, completion)

    def format_reward(self, prompt, completion):
        return self.inner.format_reward(prompt, completion)

    def sample_problems(self, num, generator, split="train"):
        return self.inner.sample_problems(num, generator, split)

    def held_out_problems(self, num):
        return self.inner.held_out_problems(num)


class CountingProxy(ProxyRewardTask):
    """ProxyRewardTask that counts its batched calls."""

    batch_calls = 0

    def reward_batch(self, prompts, completions):
        self.batch_calls += 1
        return super().reward_batch(prompts, completions)


class ZeroVerifier(rl.lm.ScratchpadAdditionTask):
    """The task with a verifier that never rewards: GRPO on it alone has no signal."""

    def reward(self, prompt, completion):
        return 0.0


def sampled(num_prompts=32, group_size=8, max_new_tokens=12, seed=0):
    """32 × 8 completions of a random policy: many lengths, truncated ones, repeats."""
    g = torch.Generator().manual_seed(seed)
    problems = TASK.sample_problems(num_prompts, g)
    ids, mask = encode_prompts(TOK, [p.prompt for p in problems])
    out = sample_completions(tiny_policy(), ids, mask, num_samples=group_size, generator=g,
                             **sample_kwargs(TOK, forbidden_token_ids(TOK), max_new_tokens, 1.0))
    return [p.prompt for p in problems for _ in range(group_size)], out.texts


def assert_same_run(a, b, policy_a, policy_b):
    """Equal histories and weights: bit for bit on the CPU, to float32 rounding on a GPU (lm_helpers)."""
    assert sorted(a.metrics) == sorted(b.metrics)
    for name in a.metrics:
        lm_helpers.assert_same_numbers(a[name], b[name], err_msg=name)  # NaN == NaN here
    for (name, x), (_, y) in zip(policy_a.state_dict().items(), policy_b.state_dict().items()):
        lm_helpers.assert_same_numbers(x, y, err_msg=name, atol=lm_helpers.GPU_WEIGHT_ATOL)


# -- the batched reward -------------------------------------------------------------------------------


def test_reward_batch_is_bit_identical_to_one_completion_per_forward_pass():
    prompts, texts = sampled()
    lengths = {len(TOK(p + o, add_special_tokens=False).input_ids) for p, o in zip(prompts, texts)}
    assert len(lengths) >= 5 and len(set(zip(prompts, texts))) < len(texts)  # many lengths, some repeats
    rm = reward_model()
    batched = ProxyRewardTask(TASK, rm, TOK).reward_batch(prompts, texts)
    alone = np.array([float(proxy_rewards(rm, TOK, [p], [o])[0]) for p, o in zip(prompts, texts)])
    assert batched.dtype == np.float64 and batched.shape == (256,)
    lm_helpers.assert_same_numbers(batched, alone)  # bit for bit on the CPU; a GPU's kernels depend on the batch
    assert batched.std() > 0.3  # the scores are spread: equality is not between constants
    # the padded layout is the same function up to rounding (an independent code path)
    padded = proxy_rewards(rm, TOK, prompts, texts, batch_size=100).double().numpy()
    np.testing.assert_allclose(padded, alone, rtol=0, atol=1e-5)


def test_reward_batch_memoises_and_agrees_with_reward_in_any_order(monkeypatch):
    prompts, texts = sampled(num_prompts=6, group_size=4)
    rm = reward_model()
    proxy = ProxyRewardTask(TASK, rm, TOK)
    first = [proxy.reward(p, o) for p, o in zip(prompts[:5], texts[:5])]  # some from the per-call path
    seen = []
    real = proxy_rewards

    def counting(*args, **kwargs):
        seen.append(len(args[2]))
        return real(*args, **kwargs)

    monkeypatch.setattr(rl.lm.preference_task, "proxy_rewards", counting)
    scores = proxy.reward_batch(prompts, texts)
    assert seen == [len(set(zip(prompts, texts)) - set(zip(prompts[:5], texts[:5])))]  # only the new, once each
    assert scores[:5].tolist() == first
    again = proxy.reward_batch(prompts[::-1], texts[::-1])
    assert len(seen) == 1 and again.tolist() == scores[::-1].tolist()  # all memoised
    fresh = ProxyRewardTask(TASK, rm, TOK, max_cache=0)  # no memo: still the same values
    lm_helpers.assert_same_numbers(fresh.reward_batch(prompts, texts), scores)  # other batches: GPU rounding
    assert fresh._cache == {}
    assert proxy.reward_batch([], []).shape == (0,)
    with pytest.raises(ValueError, match="same length"):
        proxy.reward_batch(prompts, texts[:-1])


def test_task_rewards_prefers_reward_batch_and_checks_its_length():
    class Both(rl.lm.ScratchpadAdditionTask):
        def reward_batch(self, prompts, completions):
            return torch.arange(len(prompts), dtype=torch.float64) + 0.5

    got = task_rewards(Both(), ["1+1="] * 3, ["2</s>"] * 3)
    assert got.dtype == torch.float32 and got.tolist() == [0.5, 1.5, 2.5]
    assert task_rewards(TASK, ["01+01="], ["02</s>"]).tolist() == [TASK.reward("01+01=", "02</s>")]

    class Short(rl.lm.ScratchpadAdditionTask):
        def reward_batch(self, prompts, completions):
            return [1.0]

    with pytest.raises(ValueError, match="reward_batch"):
        task_rewards(Short(), ["1+1="] * 2, ["2</s>"] * 2)


def test_train_grpo_with_the_batched_reward_equals_one_completion_at_a_time():
    """Same seed, same reward model: the run through reward_batch and the run through reward only
    give equal histories and equal weights (format reward and overlong penalty on, to cover _score)."""
    rm, config = reward_model(), cfg(format_coef=0.3, overlong_cache_length=2)
    batched_task, per_call_task = CountingProxy(TASK, rm, TOK), PerCallOnly(ProxyRewardTask(TASK, rm, TOK))
    policy_a, policy_b = tiny_policy(), tiny_policy()
    a = rl.train_grpo(policy_a, TOK, batched_task, config, progress=False)
    b = rl.train_grpo(policy_b, TOK, per_call_task, config, progress=False)
    assert batched_task.batch_calls == 3 and per_call_task.calls == 3 * 8 * 4  # each path was taken
    assert_same_run(a, b, policy_a, policy_b)
    assert not torch.equal(policy_a.lm_head.weight, tiny_policy().lm_head.weight)  # it trained
    assert np.ptp(a["reward"]) > 0 and (a["frac_zero_variance_groups"] < 1).all()


# -- GRPOConfig.reward_source and train_grpo(reward_model=...) ----------------------------------------


def test_reward_source_reward_model_is_the_proxy_task_run():
    """reward_source='reward_model' with reward_model=rm trains exactly as on ProxyRewardTask(task, rm)."""
    rm = reward_model()
    policy_a, policy_b = tiny_policy(), tiny_policy()
    a = rl.train_grpo(policy_a, TOK, TASK, cfg(reward_source="reward_model"), progress=False, reward_model=rm)
    b = rl.train_grpo(policy_b, TOK, ProxyRewardTask(TASK, rm, TOK), cfg(), progress=False)
    assert_same_run(a, b, policy_a, policy_b)


def test_reward_source_decides_which_reward_trains_and_evaluation_keeps_the_verifier():
    """On a verifier that never rewards, reward_source='task' has no signal (weights unchanged, reward
    0); 'reward_model' learns from the model's scores (the logged reward is their batch mean, nonzero),
    while the held-out evaluation still uses the task's verifier (pass@1 = 0)."""
    rm, task = reward_model(), ZeroVerifier(num_digits=2)
    still = tiny_policy()
    hist = rl.train_grpo(still, TOK, task, cfg(num_steps=2, log_ref_kl=False), progress=False)
    assert (hist["reward"] == 0).all() and (hist["frac_zero_variance_groups"] == 1).all()
    assert all(torch.equal(x, y) for x, y in zip(still.state_dict().values(), tiny_policy().state_dict().values()))
    rewards = []
    moved = tiny_policy()
    config = cfg(num_steps=2, reward_source="reward_model", eval_every=1, eval_num_problems=4)
    hist = rl.train_grpo(moved, TOK, task, config, progress=False, reward_model=rm,
                         callback=lambda step, policy, metrics: rewards.append(metrics["reward"]))
    assert (hist["frac_zero_variance_groups"] < 1).all() and (np.abs(hist["reward"]) > 1e-3).all()
    assert not torch.equal(moved.lm_head.weight, tiny_policy().lm_head.weight)
    assert (hist["eval_pass@1"] == 0).all() and (hist["eval_greedy_accuracy"] == 0).all()
    # the logged reward is the mean proxy score of the step's 32 completions (the first step's, re-scored)
    g = torch.Generator().manual_seed(config.seed)
    problems = task.sample_problems(config.prompts_per_step, g)
    ids, mask = encode_prompts(TOK, [p.prompt for p in problems])
    out = sample_completions(tiny_policy(), ids, mask, num_samples=config.group_size, generator=g,
                             **sample_kwargs(TOK, forbidden_token_ids(TOK), config.max_new_tokens, config.temperature))
    prompts = [p.prompt for p in problems for _ in range(config.group_size)]
    want = proxy_rewards(rm, TOK, prompts, out.texts).mean().item()
    assert rewards[0] == pytest.approx(want, abs=1e-5) and hist["reward"][0] == rewards[0]


def test_reward_source_mismatches_raise_naming_the_argument():
    rm = reward_model()
    with pytest.raises(ValueError, match="`reward_model` is required"):
        rl.train_grpo(tiny_policy(), TOK, TASK, cfg(reward_source="reward_model"), progress=False)
    with pytest.raises(ValueError, match="`reward_model` was given"):
        rl.train_grpo(tiny_policy(), TOK, TASK, cfg(), progress=False, reward_model=rm)
    for bad in ("model", "", None, "Task"):
        with pytest.raises(ValueError, match="reward_source"):
            cfg(reward_source=bad)
    assert rl.GRPOConfig().reward_source == "task"


# -- the per-step callback ------------------------------------------------------------------------------


def test_callback_is_called_once_per_step_with_that_steps_logged_metrics():
    calls = []
    policy = tiny_policy()

    def callback(step, model, metrics):
        calls.append((step, model, metrics, model.lm_head.weight.detach().clone()))

    hist = rl.train_grpo(policy, TOK, TASK, cfg(num_steps=3, reward_source="reward_model"), progress=False,
                         reward_model=reward_model(), callback=callback)
    assert [c[0] for c in calls] == [0, 1, 2] and all(c[1] is policy for c in calls)
    for step, _, metrics, _ in calls:
        assert sorted(metrics) == sorted(hist.metrics)
        for name, value in metrics.items():
            assert isinstance(value, float)
            np.testing.assert_array_equal(value, hist[name][step], err_msg=name)
    assert not torch.equal(calls[0][3], calls[1][3])  # called after each update, with the updated policy
    assert torch.equal(calls[-1][3], policy.lm_head.weight)


def test_callback_returning_true_stops_after_that_step():
    steps = []
    policy, twin, rm = tiny_policy(), tiny_policy(), reward_model()
    config = cfg(num_steps=5, eval_every=2, eval_num_problems=3, reward_source="reward_model")
    hist = rl.train_grpo(policy, TOK, TASK, config, progress=False, reward_model=rm,
                         callback=lambda step, model, metrics: steps.append(step) or step == 1)
    assert steps == [0, 1] and len(hist["reward"]) == 2
    assert hist["eval_step"].tolist() == [0, 2]  # the final evaluation still runs, after 2 steps
    full = rl.train_grpo(twin, TOK, TASK, cfg(num_steps=2, reward_source="reward_model"), progress=False,
                         reward_model=rm, callback=lambda *a: False)
    lm_helpers.assert_same_numbers(hist["reward"], full["reward"])  # False and None go on; same first steps
    for x, y in zip(policy.state_dict().values(), twin.state_dict().values()):
        lm_helpers.assert_same_numbers(x, y, atol=lm_helpers.GPU_WEIGHT_ATOL)
    assert not torch.equal(policy.lm_head.weight, tiny_policy().lm_head.weight)  # two updates were made


def test_callback_must_be_callable_and_return_a_bool_or_none():
    with pytest.raises(ValueError, match="`callback` must be None or callable"):
        rl.train_grpo(tiny_policy(), TOK, TASK, cfg(num_steps=1), progress=False, callback=3)
    with pytest.raises(ValueError, match="`callback` must return None, False or True"):
        rl.train_grpo(tiny_policy(), TOK, TASK, cfg(num_steps=2), progress=False, callback=lambda *a: "stop")
