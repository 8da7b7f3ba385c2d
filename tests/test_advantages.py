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


# ---- per-step discounts γ_t (a tensor `gamma`) ----

discount_vectors = st.integers(0, 2**31 - 1)


def _discounts(seed, T, zero_prob=0.2):
    g = torch.Generator().manual_seed(seed)
    d = torch.rand(T, generator=g, dtype=DT)
    return torch.where(torch.rand(T, generator=g) < zero_prob, torch.zeros_like(d), d)


@given(trajectories(), discount_vectors, lambdas)
def test_gae_per_step_discount_matches_loop_oracle(traj, seed, lam):
    discounts = _discounts(seed, len(traj[0]))
    adv, ret = rl.gae(*traj, gamma=discounts, gae_lambda=lam)
    adv_ref, ret_ref = ref.gae_per_step_discount_loop(*traj, discounts.tolist(), lam)
    torch.testing.assert_close(adv, torch.tensor(adv_ref, dtype=DT))
    torch.testing.assert_close(ret, torch.tensor(ret_ref, dtype=DT))
    deltas = rl.td_errors(*traj[:4], discounts)
    torch.testing.assert_close(deltas, torch.tensor(ref.gae_per_step_discount_loop(*traj, discounts.tolist(), 0.0)[0], dtype=DT))


@given(trajectories(), gammas, lambdas)
def test_constant_discount_tensor_is_bit_identical_to_float(traj, gamma, lam):
    adv, ret = rl.gae(*traj, gamma=gamma, gae_lambda=lam)
    full = torch.full_like(traj[0], gamma)
    adv_t, ret_t = rl.gae(*traj, gamma=full, gae_lambda=lam)
    assert torch.equal(adv, adv_t) and torch.equal(ret, ret_t)
    assert torch.equal(rl.td_errors(*traj[:4], gamma), rl.td_errors(*traj[:4], full))
    adv_0d, _ = rl.gae(*traj, gamma=torch.tensor(gamma, dtype=DT), gae_lambda=lam)  # 0-d broadcasts
    assert torch.equal(adv, adv_0d)


@given(trajectories(), discount_vectors, gammas, lambdas)
def test_zero_discount_acts_as_termination(traj, seed, gamma, lam):
    rewards, values, next_values, terminated, truncated = traj
    ends = torch.rand(len(rewards), generator=torch.Generator().manual_seed(seed)) < 0.3
    # γ_t = 0 at the steps in `ends` (γ elsewhere) ≡ terminated there with the float γ
    discounts = torch.where(ends, torch.zeros_like(rewards), torch.full_like(rewards, gamma))
    adv, ret = rl.gae(rewards, values, next_values, terminated, truncated, discounts, lam)
    adv_term, ret_term = rl.gae(rewards, values, next_values, terminated | ends, truncated, gamma, lam)
    torch.testing.assert_close(adv, adv_term, rtol=0, atol=1e-12)
    torch.testing.assert_close(ret, ret_term, rtol=0, atol=1e-12)


def test_hand_worked_per_step_discounts_and_flags_win():
    rewards = torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=DT)
    values = torch.zeros(4, dtype=DT)
    next_values = torch.tensor([10.0, 20.0, 30.0, 40.0], dtype=DT)
    none = torch.zeros(4, dtype=torch.bool)
    discounts = torch.tensor([0.5, 1.0, 0.0, 0.25], dtype=DT)
    # δ = r + γ_t V' = [6, 22, 3, 14];  λ = 1: Â_3 = 14, Â_2 = 3 + 0·14 = 3, Â_1 = 22 + 1·3 = 25, Â_0 = 6 + 0.5·25
    adv, ret = rl.gae(rewards, values, next_values, none, none, discounts, 1.0)
    torch.testing.assert_close(adv, torch.tensor([18.5, 25.0, 3.0, 14.0], dtype=DT))
    # a terminated step ignores γ_t (no bootstrap, no carry); a truncated one bootstraps with γ_t but stops the sum
    terminated = torch.tensor([False, True, False, False])
    truncated = torch.tensor([True, False, False, False])
    adv, _ = rl.gae(rewards, values, next_values, terminated, truncated, discounts, 1.0)
    torch.testing.assert_close(adv, torch.tensor([6.0, 2.0, 3.0, 14.0], dtype=DT))


def test_per_step_discount_broadcasts_over_rows():
    g = torch.Generator().manual_seed(5)
    shape = (3, 6)
    rewards, values, next_values = (torch.randn(shape, generator=g, dtype=DT) for _ in range(3))
    terminated, truncated = torch.rand(shape, generator=g) < 0.2, torch.rand(shape, generator=g) < 0.2
    discounts = torch.rand(6, generator=g, dtype=DT)  # (T,) shared by every row
    adv, _ = rl.gae(rewards, values, next_values, terminated, truncated, discounts, 0.7)
    full, _ = rl.gae(rewards, values, next_values, terminated, truncated, discounts.expand(shape), 0.7)
    assert torch.equal(adv, full)
    for i in range(3):
        a, _ = ref.gae_per_step_discount_loop(rewards[i], values[i], next_values[i], terminated[i], truncated[i],
                                              discounts.tolist(), 0.7)
        torch.testing.assert_close(adv[i], torch.tensor(a, dtype=DT))


@pytest.mark.parametrize("gamma, match", [
    (torch.tensor([0.9, 1.1, 0.9, 0.9]), r"`gamma` \(per-step discounts\) must lie in \[0, 1\]"),
    (torch.tensor([0.9, -0.1, 0.9, 0.9]), r"`gamma` \(per-step discounts\) must lie in \[0, 1\]"),
    (torch.tensor([0.9, math.nan, 0.9, 0.9]), "`gamma` contains NaN"),
    (torch.tensor([0.9, math.inf, 0.9, 0.9]), "`gamma` contains NaN or infinite"),
    (torch.full((3,), 0.9), r"`gamma` must be a float or a tensor .* \(4,\); got shape \(3,\)"),
    (torch.full((2, 4), 0.9), r"`gamma` must be a float or a tensor .* \(4,\); got shape \(2, 4\)"),
])
def test_per_step_discount_errors(gamma, match):
    with pytest.raises(ValueError, match=match):
        rl.gae(**_args(), gamma=gamma, gae_lambda=0.9)
    with pytest.raises(ValueError, match=match):
        rl.td_errors(*list(_args().values())[:4], gamma)
