"""rlbook.returns: rewards_to_go and discounted_returns against loop oracles, limits and errors."""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import rlbook as rl
from rlbook import reference as ref


def _random_episodes(seed, batch_shape, T, p_term, p_trunc):
    g = torch.Generator().manual_seed(seed)
    shape = (*batch_shape, T)
    rewards = torch.randn(shape, generator=g, dtype=torch.float64)
    terminated = torch.rand(shape, generator=g) < p_term
    truncated = torch.rand(shape, generator=g) < p_trunc  # may coincide with terminated
    next_values = torch.randn(shape, generator=g, dtype=torch.float64)
    return rewards, terminated, truncated, next_values


def _rows(*tensors):
    T = tensors[0].shape[-1]
    return zip(*(t.reshape(-1, T) for t in tensors))


episode_args = dict(
    seed=st.integers(0, 2**31 - 1),
    batch_shape=st.lists(st.integers(1, 3), min_size=0, max_size=2).map(tuple),
    T=st.integers(1, 12),
    gamma=st.floats(0.0, 1.0),
    p_term=st.sampled_from([0.0, 0.2, 0.5]),
    p_trunc=st.sampled_from([0.0, 0.2, 0.5]),
)


@given(**episode_args, bootstrap=st.booleans())
def test_rewards_to_go_matches_loop_oracle(seed, batch_shape, T, gamma, p_term, p_trunc, bootstrap):
    rewards, term, trunc, nv = _random_episodes(seed, batch_shape, T, p_term, p_trunc)
    nv = nv if bootstrap else None
    out = rl.rewards_to_go(rewards, gamma, term, trunc, nv)
    assert out.shape == rewards.shape and out.dtype == torch.float64
    nv_rows = nv if nv is not None else torch.zeros_like(rewards)
    for row, (r, d, u, v) in zip(out.reshape(-1, T), _rows(rewards, term, trunc, nv_rows)):
        expected = ref.rewards_to_go_loop(r, gamma, d, u, v if bootstrap else None)
        torch.testing.assert_close(row, torch.tensor(expected, dtype=torch.float64), rtol=1e-10, atol=1e-10)


@given(**episode_args)
def test_discounted_returns_matches_loop_oracle(seed, batch_shape, T, gamma, p_term, p_trunc):
    rewards, term, trunc, _ = _random_episodes(seed, batch_shape, T, p_term, p_trunc)
    out = rl.discounted_returns(rewards, gamma, term, trunc)
    assert out.shape == rewards.shape
    for row, (r, d, u) in zip(out.reshape(-1, T), _rows(rewards, term, trunc)):
        expected = ref.discounted_returns_loop(r, gamma, d, u)
        torch.testing.assert_close(row, torch.tensor(expected, dtype=torch.float64), rtol=1e-10, atol=1e-10)


@given(**episode_args)
def test_discounted_returns_is_rewards_to_go_at_episode_starts(seed, batch_shape, T, gamma, p_term, p_trunc):
    rewards, term, trunc, _ = _random_episodes(seed, batch_shape, T, p_term, p_trunc)
    total = rl.discounted_returns(rewards, gamma, term, trunc)
    rtg = rl.rewards_to_go(rewards, gamma, term, trunc)
    done = term | trunc
    start = torch.ones_like(done)
    start[..., 1:] = done[..., :-1]
    torch.testing.assert_close(total[start], rtg[start])


def test_hand_worked_numbers():
    r = torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=torch.float64)
    # one episode: G = [1 + .5·2 + .25·3 + .125·4, 2 + .5·3 + .25·4, 3 + .5·4, 4]
    torch.testing.assert_close(rl.rewards_to_go(r, 0.5), torch.tensor([3.25, 4.5, 5.0, 4.0], dtype=torch.float64))
    # terminated after step 1: episodes [1, 2] and [3, 4]
    torch.testing.assert_close(
        rl.rewards_to_go(r, 0.5, terminated=[0, 1, 0, 0]), torch.tensor([2.0, 2.0, 5.0, 4.0], dtype=torch.float64)
    )
    torch.testing.assert_close(
        rl.discounted_returns(r, 0.5, terminated=[0, 1, 0, 0]),
        torch.tensor([2.0, 2.0, 5.0, 5.0], dtype=torch.float64),
    )
    # truncated after step 1 with V(final obs) = 10: G_1 = 2 + .5·10 = 7, G_0 = 1 + .5·7 = 4.5
    out = rl.rewards_to_go(r, 0.5, truncated=[0, 1, 0, 0], next_values=[0.0, 10.0, 0.0, 0.0])
    torch.testing.assert_close(out, torch.tensor([4.5, 7.0, 5.0, 4.0], dtype=torch.float64))
    # truncation bootstraps also at the last step of the data
    out = rl.rewards_to_go(r, 0.5, truncated=[0, 0, 0, 1], next_values=[0.0, 0.0, 0.0, 2.0])
    assert float(out[-1]) == 5.0


def test_terminated_wins_over_truncated():
    r = torch.ones(3, dtype=torch.float64)
    both = rl.rewards_to_go(r, 0.9, terminated=[0, 1, 0], truncated=[0, 1, 0], next_values=[5.0, 5.0, 5.0])
    only_term = rl.rewards_to_go(r, 0.9, terminated=[0, 1, 0])
    torch.testing.assert_close(both, only_term)


@given(**episode_args)
def test_gamma_zero_limit(seed, batch_shape, T, gamma, p_term, p_trunc):
    rewards, term, trunc, nv = _random_episodes(seed, batch_shape, T, p_term, p_trunc)
    torch.testing.assert_close(rl.rewards_to_go(rewards, 0.0, term, trunc, nv), rewards)
    # γ = 0: R(τ) is the episode's first reward
    total = rl.discounted_returns(rewards, 0.0, term, trunc)
    for row, (r, d, u) in zip(total.reshape(-1, T), _rows(rewards, term, trunc)):
        first, expected = 0, []
        for t in range(T):
            if t == 0 or bool(d[t - 1] | u[t - 1]):
                first = float(r[t])
            expected.append(first)
        torch.testing.assert_close(row, torch.tensor(expected, dtype=torch.float64))


def test_gamma_one_limit_is_reverse_cumsum_and_total():
    r = torch.randn(4, 7, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    rev_cumsum = r.flip(-1).cumsum(-1).flip(-1)
    torch.testing.assert_close(rl.rewards_to_go(r, 1.0), rev_cumsum)
    torch.testing.assert_close(rl.discounted_returns(r, 1.0), r.sum(-1, keepdim=True).expand_as(r))


def test_dtype_device_and_list_inputs():
    out = rl.rewards_to_go(torch.ones(2, 3, dtype=torch.float32), 0.9)
    assert out.dtype == torch.float32
    assert rl.discounted_returns([1, 2, 3], 1.0).tolist() == [6.0, 6.0, 6.0]
    r = torch.ones(3, dtype=torch.float64, requires_grad=True)
    rl.rewards_to_go(r, 0.5)[0].backward()
    torch.testing.assert_close(r.grad, torch.tensor([1.0, 0.5, 0.25], dtype=torch.float64))


@pytest.mark.parametrize("fn", [rl.rewards_to_go, rl.discounted_returns])
def test_errors_name_the_argument(fn):
    r = torch.zeros(2, 3)
    with pytest.raises(ValueError, match="gamma"):
        fn(r, -0.1)
    with pytest.raises(ValueError, match="gamma"):
        fn(r, 1.1)
    with pytest.raises(ValueError, match="gamma"):
        fn(r, float("nan"))
    with pytest.raises(ValueError, match="rewards"):
        fn(torch.zeros(2, 0), 0.9)  # empty T
    with pytest.raises(ValueError, match="rewards"):
        fn(torch.zeros(0, 3), 0.9)  # empty batch
    with pytest.raises(ValueError, match="rewards"):
        fn(torch.tensor(1.0), 0.9)  # no time axis
    with pytest.raises(ValueError, match="rewards"):
        fn(torch.tensor([1.0, float("nan")]), 0.9)
    with pytest.raises(ValueError, match="terminated"):
        fn(r, 0.9, terminated=torch.zeros(2, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="truncated"):
        fn(r, 0.9, truncated=torch.zeros(3, dtype=torch.bool))
    with pytest.raises(ValueError, match="terminated"):
        fn(r, 0.9, terminated=torch.full((2, 3), 2))


def test_next_values_errors():
    with pytest.raises(ValueError, match="next_values"):
        rl.rewards_to_go(torch.zeros(2, 3), 0.9, next_values=torch.zeros(2, 2))
    with pytest.raises(ValueError, match="next_values"):
        rl.rewards_to_go(torch.zeros(3), 0.9, next_values=[0.0, float("inf"), 0.0])
