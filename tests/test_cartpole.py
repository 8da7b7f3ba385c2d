import gymnasium as gym
import numpy as np
import pytest
import torch

from rlbook.envs.cartpole import EpisodeBatcher, episode_statistics, make_cartpole, random_policy_returns


def _alternating(obs):
    return torch.as_tensor([int(o[2] > 0) for o in obs])  # push under the pole: deterministic


def test_batch_matches_single_env_run_with_same_seed():
    batch = EpisodeBatcher(3, seed=10).collect(_alternating)
    for i in range(3):
        env = gym.make("CartPole-v1")
        obs, _ = env.reset(seed=10 + i)
        rewards, observations = [], []
        done = False
        while not done:
            observations.append(obs)
            obs, r, term, trunc, _ = env.step(int(obs[2] > 0))
            rewards.append(r)
            done = term or trunc
        n = len(rewards)
        assert int(batch.lengths[i]) == n
        assert float(batch.episode_returns[i]) == sum(rewards)
        np.testing.assert_allclose(batch.obs[i, :n].numpy(), np.array(observations), rtol=1e-6)
        assert bool(batch.terminated[i, n - 1]) == term and bool(batch.truncated[i, n - 1]) == trunc
        assert not batch.mask[i, n:].any() and batch.mask[i, :n].all()


def test_step_count_is_exact_and_runs_are_reproducible():
    gen_a, gen_b = torch.Generator().manual_seed(0), torch.Generator().manual_seed(0)
    b1 = EpisodeBatcher(5, seed=3)
    b2 = EpisodeBatcher(5, seed=3)
    x = [b1.collect(lambda o: torch.randint(0, 2, (len(o),), generator=gen_a)) for _ in range(2)]
    y = [b2.collect(lambda o: torch.randint(0, 2, (len(o),), generator=gen_b)) for _ in range(2)]
    assert b1.total_steps == sum(int(b.lengths.sum()) for b in x) == sum(int(b.mask.sum()) for b in x)
    for p, q in zip(x, y):
        assert torch.equal(p.obs, q.obs) and torch.equal(p.actions, q.actions)
    # the second batch continues each env's RNG instead of re-seeding: different start states
    assert not torch.equal(x[0].obs[:, 0], x[1].obs[:, 0])


def test_truncation_flag_at_step_cap():
    batch = EpisodeBatcher(2, seed=0, max_steps=4).collect(lambda o: torch.zeros(len(o), dtype=torch.long) + 1 - 1)
    # pushing left for 4 steps does not topple the pole: every episode is cut at the cap
    assert batch.lengths.tolist() == [4, 4]
    assert batch.truncated[:, 3].all() and not batch.terminated.any()


def test_random_policy_returns_statistics():
    r = random_policy_returns(50, seed=0)
    assert r.shape == (50,) and (r >= 8).all() and (r <= 500).all()
    assert 12 < r.mean() < 40  # a uniform random policy balances ~20 steps
    stats = episode_statistics(r)
    assert stats["n"] == 50 and stats["min"] <= stats["median"] <= stats["max"]
    assert stats["sem"] == pytest.approx(np.std(r, ddof=1) / np.sqrt(50))
    np.testing.assert_array_equal(r, random_policy_returns(50, seed=0))


def test_make_cartpole_seeded():
    a, b = make_cartpole(seed=5), make_cartpole(seed=5)
    np.testing.assert_array_equal(a.reset(seed=5)[0], b.reset(seed=5)[0])


@pytest.mark.parametrize("kwargs, name", [(dict(num_envs=0), "num_envs"), (dict(num_envs=2, max_steps=0), "max_steps")])
def test_batcher_errors(kwargs, name):
    with pytest.raises(ValueError, match=name):
        EpisodeBatcher(**kwargs)


def test_statistics_errors():
    with pytest.raises(ValueError, match="returns"):
        episode_statistics([])
    with pytest.raises(ValueError, match="num_episodes"):
        random_policy_returns(0)
