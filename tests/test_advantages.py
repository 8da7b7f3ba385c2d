"""Part II advantage estimators: td_errors, gae, n_step_returns vs loop oracles and identities."""

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import rlbook as rl
from rlbook import reference as ref

DT = torch.float64


@st.composite
def trajectories(draw, max_len=12):
    """A random 1-D rollout with terminations and truncations anywhere (also both at once)."""
    T = draw(st.integers(1, max_len))
    seed = draw(st.integers(0, 2**31 - 1))
    g = torch.Generator().manual_seed(seed)
    rewards = torch.randn(T, generator=g, dtype=DT)
    values = torch.randn(T, generator=g, dtype=DT)
    next_values = torch.cat([values[1:], torch.randn(1, generator=g, dtype=DT)])
    terminated = torch.rand(T, generator=g) < 0.2
    truncated = torch.rand(T, generator=g) < 0.2
    # after a reset the next state's value is unrelated: on truncation next_values = V(final obs)
    next_values = torch.where(truncated, torch.randn(T, generator=g, dtype=DT), next_values)
    return rewards, values, next_values, terminated, truncated


gammas = st.sampled_from([0.0, 0.5, 0.9, 0.99, 1.0])
lambdas = st.sampled_from([0.0, 0.3, 0.95, 1.0])


@given(trajectories(), gammas, lambdas)
def test_gae_matches_loop_oracle(traj, gamma, lam):
    adv, ret = rl.gae(*traj, gamma=gamma, gae_lambda=lam)
    adv_ref, ret_ref = ref.gae_loop(*traj, gamma, lam)
    torch.testing.assert_close(adv, torch.tensor(adv_ref, dtype=DT))
    torch.testing.assert_close(ret, torch.tensor(ret_ref, dtype=DT))


@given(trajectories(), gammas)
def test_td_errors_match_loop_and_gae_lambda_zero(traj, gamma):
    rewards, values, next_values, terminated, truncated = traj
    deltas = rl.td_errors(rewards, values, next_values, terminated, gamma)
    torch.testing.assert_close(deltas, torch.tensor(ref.td_errors_loop(*traj[:4], gamma), dtype=DT))
    adv, _ = rl.gae(*traj, gamma=gamma, gae_lambda=0.0)
    torch.testing.assert_close(adv, deltas)


@given(trajectories(), gammas)
def test_gae_lambda_one_is_monte_carlo_minus_values(traj, gamma):
    rewards, values, next_values, terminated, truncated = traj
    adv, ret = rl.gae(*traj, gamma=gamma, gae_lambda=1.0)
    mc = torch.tensor(ref.monte_carlo_returns_loop(rewards, next_values, terminated, truncated, gamma), dtype=DT)
    torch.testing.assert_close(ret, mc)
    torch.testing.assert_close(adv, mc - values)


@given(trajectories(), lambdas)
def test_gamma_zero_gives_one_step_reward_advantage(traj, lam):
    rewards, values = traj[0], traj[1]
    adv, ret = rl.gae(*traj, gamma=0.0, gae_lambda=lam)
    torch.testing.assert_close(adv, rewards - values)
    torch.testing.assert_close(ret, rewards)


@given(trajectories(), gammas, lambdas)
def test_gae_equals_explicit_discounted_sum_of_deltas_within_episode(traj, gamma, lam):
    """Vectorised identity, independent of the oracle's loop: Â_t = Σ_k (γλ)^{k−t} δ_k·1[no end in t..k−1]."""
    rewards, values, next_values, terminated, truncated = traj
    T = rewards.shape[0]
    deltas = rl.td_errors(rewards, values, next_values, terminated, gamma)
    done = (terminated | truncated).to(DT)
    ends_before = torch.cat([torch.zeros(1, dtype=DT), torch.cumsum(done, 0)])  # ends among steps < k
    idx = torch.arange(T)
    same_episode = (ends_before[idx][None, :] - ends_before[idx][:, None]) == 0  # [t, k]: no end in t..k−1
    upper = idx[None, :] >= idx[:, None]
    power = (idx[None, :] - idx[:, None]).clamp(min=0).to(DT)
    weights = torch.where(same_episode & upper, (gamma * lam) ** power, torch.zeros((), dtype=DT))
    adv, _ = rl.gae(*traj, gamma=gamma, gae_lambda=lam)
    torch.testing.assert_close(adv, weights @ deltas)


@given(trajectories(), gammas, st.integers(1, 15))
def test_n_step_matches_loop_oracle(traj, gamma, n):
    got = rl.n_step_returns(*traj, gamma=gamma, n=n)
    torch.testing.assert_close(got, torch.tensor(ref.n_step_returns_loop(*traj, gamma, n), dtype=DT))


@given(trajectories(), gammas)
def test_n_step_limits(traj, gamma):
    rewards, values, next_values, terminated, truncated = traj
    T = rewards.shape[0]
    _, ret_mc = rl.gae(*traj, gamma=gamma, gae_lambda=1.0)
    torch.testing.assert_close(rl.n_step_returns(*traj, gamma=gamma, n=T + 3), ret_mc)
    _, ret_td = rl.gae(*traj, gamma=gamma, gae_lambda=0.0)
    torch.testing.assert_close(rl.n_step_returns(*traj, gamma=gamma, n=1), ret_td)


def test_hand_worked_gae_with_termination_and_truncation():
    # episode 1: steps 0,1 (terminated after 1); episode 2: step 2 (truncated, V(final)=10); step 3 open
    rewards = torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=DT)
    values = torch.tensor([0.5, 0.5, 0.5, 0.5], dtype=DT)
    next_values = torch.tensor([0.5, 99.0, 10.0, 2.0], dtype=DT)
    terminated = torch.tensor([False, True, False, False])
    truncated = torch.tensor([False, False, True, False])
    gamma, lam = 0.5, 0.5
    # δ = [1 + .25 − .5, 2 − .5, 3 + 5 − .5, 4 + 1 − .5] = [0.75, 1.5, 7.5, 4.5]
    adv, ret = rl.gae(rewards, values, next_values, terminated, truncated, gamma, lam)
    torch.testing.assert_close(adv, torch.tensor([0.75 + 0.25 * 1.5, 1.5, 7.5, 4.5], dtype=DT))
    torch.testing.assert_close(ret, adv + values)


def test_gae_batched_equals_rowwise():
    g = torch.Generator().manual_seed(3)
    shape = (3, 2, 7)
    rewards, values, next_values = (torch.randn(shape, generator=g, dtype=DT) for _ in range(3))
    terminated, truncated = torch.rand(shape, generator=g) < 0.2, torch.rand(shape, generator=g) < 0.2
    adv, ret = rl.gae(rewards, values, next_values, terminated, truncated, 0.9, 0.8)
    nstep = rl.n_step_returns(rewards, values, next_values, terminated, truncated, 0.9, 3)
    for i in range(3):
        for j in range(2):
            row = (rewards[i, j], values[i, j], next_values[i, j], terminated[i, j], truncated[i, j])
            a, _ = rl.gae(*row, gamma=0.9, gae_lambda=0.8)
            torch.testing.assert_close(adv[i, j], a)
            torch.testing.assert_close(nstep[i, j], rl.n_step_returns(*row, gamma=0.9, n=3))


def test_float32_and_list_inputs():
    adv, _ = rl.gae([1.0, 1.0], [0.0, 0.0], [0.0, 0.0], [0, 1], [0, 0], 1.0, 1.0)
    assert adv.dtype == torch.float32 and adv.tolist() == [2.0, 1.0]


def _args(T=4):
    return dict(
        rewards=torch.zeros(T), values=torch.zeros(T), next_values=torch.zeros(T),
        terminated=torch.zeros(T, dtype=torch.bool), truncated=torch.zeros(T, dtype=torch.bool),
    )


@pytest.mark.parametrize("name", ["values", "next_values", "terminated", "truncated"])
def test_shape_mismatch_names_argument(name):
    args = _args()
    args[name] = args[name][:3]
    with pytest.raises(ValueError, match=f"`{name}`"):
        rl.gae(**args, gamma=0.9, gae_lambda=0.9)
    with pytest.raises(ValueError, match=f"`{name}`"):
        rl.n_step_returns(**args, gamma=0.9, n=2)


@pytest.mark.parametrize("kw, name", [
    (dict(gamma=1.1, gae_lambda=0.9), "gamma"),
    (dict(gamma=-0.1, gae_lambda=0.9), "gamma"),
    (dict(gamma=0.9, gae_lambda=-0.01), "gae_lambda"),
    (dict(gamma=0.9, gae_lambda=1.5), "gae_lambda"),
])
def test_range_errors(kw, name):
    with pytest.raises(ValueError, match=f"`{name}`"):
        rl.gae(**_args(), **kw)


@pytest.mark.parametrize("n", [0, -1, 2.5, True])
def test_n_step_bad_n(n):
    with pytest.raises(ValueError, match="`n`"):
        rl.n_step_returns(**_args(), gamma=0.9, n=n)


def test_other_errors():
    with pytest.raises(ValueError, match="`rewards`"):
        rl.gae(**{**_args(), "rewards": torch.tensor(1.0)}, gamma=0.9, gae_lambda=0.9)
    with pytest.raises(ValueError, match="`terminated`"):
        rl.td_errors(torch.zeros(2), torch.zeros(2), torch.zeros(2), torch.tensor([0, 2]), 0.9)
    with pytest.raises(ValueError, match="`values`"):
        rl.td_errors(torch.zeros(2), torch.tensor([0.0, math.nan]), torch.zeros(2), [0, 0], 0.9)
