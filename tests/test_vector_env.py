"""Tests of rlbook.envs.vector: SAME_STEP autoreset bookkeeping, episode records, bootstraps."""

import gymnasium as gym
import pytest
import torch

from rlbook.advantages import gae
from rlbook.envs.vector import RolloutState, collect_rollout, make_cartpole_vector_env


def _bang_bang(obs):
    """A deterministic, mediocre controller: push towards the side the pole leans to."""
    return (obs[..., 2] > 0).long()


def _pd(obs):
    """A deterministic controller that balances CartPole for 500 steps."""
    return (obs[..., 2] + 0.5 * obs[..., 3] + 0.01 * obs[..., 0] + 0.1 * obs[..., 1] > 0).long()


def _value(obs):
    """Any deterministic function of the observation serves as a stand-in critic."""
    return obs[..., 0] + 2.0 * obs[..., 2] + 10.0


def _policy(controller):
    def policy_fn(obs):
        return controller(obs), torch.zeros(obs.shape[0]), _value(obs)

    return policy_fn


def _hand_run(seed, controller, num_steps, max_episode_steps=500):
    """One plain env: (episodes [(return, length, local_step_at_end)], final obs of each episode)."""
    env = gym.make("CartPole-v1", max_episode_steps=max_episode_steps)
    obs, _ = env.reset(seed=seed)
    episodes, finals, ret, length = [], [], 0.0, 0
    for step in range(1, num_steps + 1):
        obs, reward, terminated, truncated, _ = env.step(int(controller(torch.as_tensor(obs))))
        ret, length = ret + reward, length + 1
        if terminated or truncated:
            episodes.append((ret, length, step, bool(terminated)))
            finals.append(torch.as_tensor(obs, dtype=torch.float32))
            obs, _ = env.reset()
            ret, length = 0.0, 0
    return episodes, finals


def test_episodes_match_hand_run_single_envs():
    num_envs, seed, steps = 3, 11, 120
    envs = make_cartpole_vector_env(num_envs, seed)
    state = RolloutState.start(envs, seed)
    rollout = collect_rollout(state, _policy(_bang_bang), _value, steps)
    assert state.env_steps == num_envs * steps
    for i in range(num_envs):
        expected, _ = _hand_run(seed + i, _bang_bang, steps)
        got = [e for e in rollout.episodes if e.env_index == i]
        assert len(got) == len(expected) >= 2
        for e, (ret, length, local_step, _) in zip(got, expected):
            assert (e.episode_return, e.length) == (ret, length)
            assert e.env_step == local_step * num_envs  # global count: all envs step together
    # Finishing order: by global step, then env index.
    keys = [(e.env_step, e.env_index) for e in rollout.episodes]
    assert keys == sorted(keys)


def test_consecutive_rollouts_equal_one_long_rollout():
    def run(chunks):
        envs = make_cartpole_vector_env(2, 3)
        state = RolloutState.start(envs, 3)
        parts = [collect_rollout(state, _policy(_bang_bang), _value, n) for n in chunks]
        return torch.cat([p.actions for p in parts], 1), [tuple(e) for p in parts for e in p.episodes]

    a1, e1 = run([60])
    a2, e2 = run([25, 35])
    assert torch.equal(a1, a2) and e1 == e2


def test_truncation_bootstraps_from_final_obs_and_termination_does_not():
    max_steps, steps = 20, 45
    envs = make_cartpole_vector_env(1, 0, max_episode_steps=max_steps)
    state = RolloutState.start(envs, 0)
    rollout = collect_rollout(state, _policy(_pd), _value, steps)
    expected, finals = _hand_run(0, _pd, steps, max_episode_steps=max_steps)
    trunc_steps = torch.nonzero(rollout.truncated[0]).flatten().tolist()
    assert trunc_steps == [max_steps - 1, 2 * max_steps - 1]
    for t, final in zip(trunc_steps, finals):
        assert torch.allclose(rollout.next_values[0, t], _value(final))
        # ... not the value of the reset observation stored at t + 1:
        assert not torch.allclose(rollout.next_values[0, t], rollout.values[0, t + 1])
    # Elsewhere next_values[t] = V(s_{t+1}); the last one is V of the next rollout's first obs.
    inside = [t for t in range(steps - 1) if t not in trunc_steps]
    assert torch.equal(rollout.next_values[0, inside], rollout.values[0, [t + 1 for t in inside]])
    assert torch.allclose(rollout.next_values[0, -1], _value(state.obs[0]))
    # GAE: a truncated step is cut but bootstrapped: Â = r + γ V(final) − V(s).
    adv, _ = gae(rollout.rewards, rollout.values, rollout.next_values, rollout.terminated, rollout.truncated, 0.9, 0.95)
    t = trunc_steps[0]
    assert torch.allclose(adv[0, t], 1.0 + 0.9 * _value(finals[0]) - rollout.values[0, t])


def test_termination_has_zero_next_value():
    envs = make_cartpole_vector_env(2, 4)
    state = RolloutState.start(envs, 4)
    rollout = collect_rollout(state, _policy(_bang_bang), _value, 80)
    assert rollout.terminated.any()
    assert torch.all(rollout.next_values[rollout.terminated] == 0)
    assert not rollout.truncated.any()
    adv, _ = gae(rollout.rewards, rollout.values, rollout.next_values, rollout.terminated, rollout.truncated, 0.9, 0.95)
    i, t = torch.nonzero(rollout.terminated)[0].tolist()
    assert torch.allclose(adv[i, t], 1.0 - rollout.values[i, t])


def test_cartpole_truncates_at_500_with_return_500():
    envs = make_cartpole_vector_env(1, 1)
    state = RolloutState.start(envs, 1)
    rollout = collect_rollout(state, _policy(_pd), _value, 501)
    assert rollout.truncated[0, 499] and not rollout.terminated[0, 499]
    assert [(e.episode_return, e.length, e.env_step) for e in rollout.episodes] == [(500.0, 500, 500)]
    assert rollout.obs.shape == (1, 501, 4) and rollout.actions.shape == (1, 501)


def test_errors_name_the_argument():
    with pytest.raises(ValueError, match="num_envs"):
        make_cartpole_vector_env(0, 0)
    with pytest.raises(ValueError, match="seed"):
        make_cartpole_vector_env(1, -1)
    envs = make_cartpole_vector_env(2, 0)
    state = RolloutState.start(envs, 0)
    with pytest.raises(ValueError, match="num_steps"):
        collect_rollout(state, _policy(_pd), _value, 0)
    bad = lambda obs: (torch.zeros(3, dtype=torch.long), torch.zeros(3), torch.zeros(3))  # noqa: E731
    with pytest.raises(ValueError, match="policy_fn"):
        collect_rollout(state, bad, _value, 2)
