"""Exact-enumeration environments: SoftmaxBandit and TabularMDP (∇J, V/Q/A, occupancy, sampling)."""

import math

import pytest
import torch

import rlbook as rl
from rlbook import reference as ref

F64 = torch.float64


def _logits(shape, seed):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=F64)


def _autograd_grad(mdp, logits, horizon=None):
    theta = logits.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(mdp.expected_return(theta, horizon), theta)
    return grad


def _assert_within_4_se(samples, exact):
    """Every coordinate of the sample mean within 4 standard errors of ``exact``."""
    n = samples.shape[0]
    se = samples.std(0) / math.sqrt(n)
    diff = (samples.mean(0) - exact).abs()
    assert bool((diff <= 4 * se + 1e-9).all()), (diff / se).max()


# ----------------------------------------------------------------------------- bandit
BANDITS = [
    rl.SoftmaxBandit([1.0, 0.0, 0.0], dtype=F64),
    rl.SoftmaxBandit([0.5, -1.0, 2.0, 0.3], reward_std=1.0, dtype=F64),
    rl.SoftmaxBandit([0.9, 0.2, 0.6], bernoulli=True, dtype=F64),
]


@pytest.mark.parametrize("bandit", BANDITS)
def test_bandit_exact_gradient_matches_autograd_and_enumeration(bandit):
    K = bandit.num_arms
    for seed in range(3):
        logits = _logits((K,), seed).requires_grad_(True)
        (auto,) = torch.autograd.grad(bandit.expected_return(logits), logits)
        torch.testing.assert_close(bandit.exact_gradient(logits), auto)
        torch.testing.assert_close(auto, ref.bandit_gradient_enumeration(logits, bandit.reward_means))
    batched = _logits((5, K), 7)
    torch.testing.assert_close(bandit.exact_gradient(batched)[2], bandit.exact_gradient(batched[2]))
    assert bandit.expected_return(batched).shape == (5,)


def test_bandit_seed_example_hand_numbers():
    bandit = rl.SoftmaxBandit([1.0, 0.0, 0.0], dtype=F64)
    logits = rl.SoftmaxBandit.logits_from_probs(torch.tensor([0.5, 0.3, 0.2], dtype=F64))
    torch.testing.assert_close(bandit.probs(logits), torch.tensor([0.5, 0.3, 0.2], dtype=F64))
    assert float(bandit.expected_return(logits)) == pytest.approx(0.5)
    torch.testing.assert_close(bandit.exact_gradient(logits), torch.tensor([0.25, -0.15, -0.10], dtype=F64))


@pytest.mark.parametrize("bandit", BANDITS)
@pytest.mark.parametrize("baseline", [None, 0.4])
def test_bandit_monte_carlo_within_4_standard_errors(bandit, baseline):
    logits = _logits((bandit.num_arms,), 1)
    samples = bandit.score_function_samples(logits, 4000, torch.Generator().manual_seed(0), baseline)
    assert samples.shape == (4000, bandit.num_arms)
    _assert_within_4_se(samples, bandit.exact_gradient(logits))
    torch.testing.assert_close(bandit.score_function_estimate(logits, 4000, 0, baseline), samples.mean(0))


def test_bandit_sampler_is_seeded_and_matches_its_distribution():
    bandit = rl.SoftmaxBandit([0.9, 0.2, 0.6], bernoulli=True, dtype=F64)
    logits = _logits((3,), 2)
    a1, r1 = bandit.sample(logits, 5000, torch.Generator().manual_seed(5))
    a2, r2 = bandit.sample(logits, 5000, 5)
    assert torch.equal(a1, a2) and torch.equal(r1, r2)
    assert a1.dtype == torch.int64 and r1.dtype == F64 and set(r1.unique().tolist()) <= {0.0, 1.0}
    freq = torch.bincount(a1, minlength=3).to(F64) / 5000
    pi = bandit.probs(logits)
    assert bool(((freq - pi).abs() <= 4 * (pi * (1 - pi) / 5000).sqrt()).all())
    mean_r = r1.mean()
    se = r1.std() / math.sqrt(5000)
    assert abs(float(mean_r - bandit.expected_return(logits))) <= 4 * float(se)


def test_bandit_baseline_term_has_zero_expectation_by_enumeration():
    bandit = BANDITS[1]
    logits = _logits((4,), 3)
    pi = bandit.probs(logits)
    scores = rl.softmax_score(logits.expand(4, 4), torch.arange(4))
    for b in (-2.0, 0.5, 10.0):
        torch.testing.assert_close((pi[:, None] * scores * b).sum(0), torch.zeros(4, dtype=F64), atol=1e-14, rtol=0)


def test_bandit_errors_name_the_argument():
    with pytest.raises(ValueError, match="reward_means"):
        rl.SoftmaxBandit([[1.0, 0.0]])
    with pytest.raises(ValueError, match="reward_means"):
        rl.SoftmaxBandit([])
    with pytest.raises(ValueError, match="reward_std"):
        rl.SoftmaxBandit([1.0, 0.0], reward_std=-1.0)
    with pytest.raises(ValueError, match="reward_std"):
        rl.SoftmaxBandit([1.0, 0.0], reward_std=0.5, bernoulli=True)
    with pytest.raises(ValueError, match="reward_means"):
        rl.SoftmaxBandit([1.5, 0.0], bernoulli=True)
    bandit = rl.SoftmaxBandit([1.0, 0.0, 0.0])
    with pytest.raises(ValueError, match="logits"):
        bandit.expected_return(torch.zeros(4))
    with pytest.raises(ValueError, match="logits"):
        bandit.sample(torch.zeros(2, 3), 3, 0)
    with pytest.raises(ValueError, match="n"):
        bandit.sample(torch.zeros(3), 0, 0)
    with pytest.raises(ValueError, match="generator"):
        bandit.sample(torch.zeros(3), 3, None)
    with pytest.raises(ValueError, match="baseline"):
        bandit.score_function_estimate(torch.zeros(3), 3, 0, baseline=torch.zeros(2))
    with pytest.raises(ValueError, match="probs"):
        rl.SoftmaxBandit.logits_from_probs([0.5, 0.6])
    with pytest.raises(ValueError, match="probs"):
        rl.SoftmaxBandit.logits_from_probs([1.0, 0.0])


# ----------------------------------------------------------------------------- tabular MDP
def _finite_cases():
    """(mdp, horizon argument) pairs covering terminals, slip, γ = 1 and an infinite MDP cut at H."""
    return [
        (rl.TabularMDP.random(3, 2, 0.9, horizon=3, seed=0), None),
        (rl.TabularMDP.random(4, 2, 0.8, horizon=3, seed=1, num_terminal=1), None),
        (rl.TabularMDP.random(3, 3, 1.0, horizon=2, seed=2), None),
        (rl.TabularMDP.chain(4, gamma=0.9, slip=0.2), 4),
        (rl.TabularMDP.chain(3, gamma=1.0, horizon=4), None),
    ]


@pytest.mark.parametrize("case", range(5))
@pytest.mark.parametrize("kind", ["total", "rewards_to_go"])
def test_enumerated_policy_gradient_equals_autograd(case, kind):
    mdp, H = _finite_cases()[case]
    logits = _logits((mdp.num_states, mdp.num_actions), case)
    auto = _autograd_grad(mdp, logits, H)
    torch.testing.assert_close(mdp.exact_policy_gradient(logits, H, kind=kind), auto, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(mdp.policy_gradient_theorem(logits, H), auto, rtol=1e-10, atol=1e-12)
    # and an oracle that knows nothing about autograd
    J = lambda th: mdp.expected_return(th, H)  # noqa: E731
    torch.testing.assert_close(ref.finite_difference_gradient(J, logits), auto, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("case", range(5))
def test_enumeration_matches_brute_force_and_expected_return(case):
    mdp, H = _finite_cases()[case]
    h = H or mdp.horizon
    pi = mdp.policy_probs(_logits((mdp.num_states, mdp.num_actions), 10 + case))
    trajs, prob = mdp.enumerate_trajectories(pi, H)
    assert trajs.states.shape == trajs.rewards.shape == (len(prob), h)
    assert float(prob.sum()) == pytest.approx(1.0, abs=1e-12)
    R = rl.discounted_returns(trajs.rewards, mdp.gamma, trajs.terminated)[:, 0]
    assert float((prob * R).sum()) == pytest.approx(float(mdp.expected_return(pi.log(), H)), rel=1e-12)
    brute = ref.tabular_trajectories_loop(mdp.transitions, mdp.rewards, mdp.initial_dist, pi, h, mdp.terminal)
    table = {}
    for n in range(len(prob)):
        L = int(trajs.mask[n].sum())
        ended = bool(trajs.terminated[n].any())
        key = (tuple(trajs.states[n, :L].tolist()), tuple(trajs.actions[n, :L].tolist()), ended)
        assert key not in table  # each distinct trajectory listed once
        table[key] = (trajs.rewards[n, :L].tolist(), float(prob[n]))
    assert len(table) == len(brute)
    for states, actions, rewards, p, ended in brute:
        got_rewards, got_p = table[(tuple(states), tuple(actions), ended)]
        assert got_rewards == pytest.approx(rewards) and got_p == pytest.approx(p, rel=1e-10, abs=1e-15)


@pytest.mark.parametrize("case", [0, 1, 3])
@pytest.mark.parametrize("kind", ["total", "rewards_to_go"])
def test_tabular_monte_carlo_within_4_standard_errors(case, kind):
    mdp, H = _finite_cases()[case]
    logits = _logits((mdp.num_states, mdp.num_actions), case)
    samples = mdp.score_function_samples(logits, 3000, H, torch.Generator().manual_seed(case), kind=kind)
    _assert_within_4_se(samples, mdp.exact_policy_gradient(logits, H, kind=kind))


def test_sampler_is_consistent_with_J_and_padding():
    mdp = rl.TabularMDP.random(4, 2, 0.8, horizon=4, seed=1, num_terminal=1)
    pi = mdp.policy_probs(_logits((4, 2), 3))
    trajs = mdp.sample_trajectories(pi, 4000, generator=torch.Generator().manual_seed(1))
    assert trajs.states.shape == (4000, 4) and trajs.terminated.dtype == torch.bool
    assert bool(trajs.terminated.any()) and bool((~trajs.mask).any())
    # padding is zero and nothing happens after termination
    assert bool((trajs.rewards[~trajs.mask] == 0).all()) and not bool(trajs.terminated[~trajs.mask].any())
    assert bool((trajs.terminated.sum(-1) <= 1).all())
    R = rl.discounted_returns(trajs.rewards, mdp.gamma, trajs.terminated)[:, 0]
    se = R.std() / math.sqrt(4000)
    assert abs(float(R.mean() - mdp.expected_return(pi.log()))) <= 4 * float(se)
    again = mdp.sample_trajectories(pi, 4000, generator=1)
    assert all(torch.equal(a, b) for a, b in zip(trajs, again))


def test_baseline_term_has_zero_expectation_by_enumeration():
    mdp = rl.TabularMDP.random(4, 3, 0.9, horizon=3, seed=4, num_terminal=1)
    logits = _logits((4, 3), 4)
    pi = mdp.policy_probs(logits)
    trajs, prob = mdp.enumerate_trajectories(pi)
    b = _logits((4,), 5)  # any state-dependent baseline b(s)
    scores = rl.softmax_score(logits[trajs.states], trajs.actions)  # (N, H, A)
    per_step = scores * (b[trajs.states] * trajs.mask)[..., None]
    onehot = torch.nn.functional.one_hot(trajs.states, 4).to(F64)
    term = torch.einsum("n,nhs,nha->sa", prob, onehot, per_step)
    torch.testing.assert_close(term, torch.zeros(4, 3, dtype=F64), atol=1e-14, rtol=0)
    for kind in ("total", "rewards_to_go"):
        with_b = torch.einsum("n,nsa->sa", prob, mdp.trajectory_gradients(logits, trajs, kind, baseline=3.0))
        torch.testing.assert_close(with_b, mdp.exact_policy_gradient(logits, kind=kind), atol=1e-13, rtol=0)


INFINITE = [
    rl.TabularMDP.random(4, 3, 0.9, seed=3),
    rl.TabularMDP.random(5, 2, 0.7, seed=4, num_terminal=2),
    rl.TabularMDP.chain(5, gamma=0.95, slip=0.1),
]


@pytest.mark.parametrize("mdp", INFINITE)
def test_values_bellman_consistency_and_loop_oracle(mdp):
    pi = mdp.policy_probs(_logits((mdp.num_states, mdp.num_actions), 6))
    V, Q, A = mdp.state_values(pi), mdp.action_values(pi), mdp.advantages(pi)
    live = ~mdp.terminal
    torch.testing.assert_close(V, (pi * Q).sum(-1))  # V = Σ_a π Q
    bellman_q = mdp.rewards + mdp.gamma * mdp.transitions @ torch.where(live, V, torch.zeros_like(V))
    torch.testing.assert_close(Q[live], bellman_q[live])
    torch.testing.assert_close((pi * A).sum(-1), torch.zeros_like(V), atol=1e-12, rtol=0)
    oracle = ref.tabular_values_loop(mdp.transitions, mdp.rewards, pi, mdp.gamma, None, mdp.terminal, sweeps=600)
    torch.testing.assert_close(V, torch.tensor(oracle, dtype=F64), atol=1e-9, rtol=0)
    assert float(mdp.expected_return(pi.log())) == pytest.approx(float(mdp.initial_dist @ V), rel=1e-12)


def test_finite_horizon_values():
    mdp = rl.TabularMDP.random(3, 2, 0.9, horizon=4, seed=8, num_terminal=1)
    pi = mdp.policy_probs(_logits((3, 2), 8))
    oracle = ref.tabular_values_loop(mdp.transitions, mdp.rewards, pi, mdp.gamma, 4, mdp.terminal)
    torch.testing.assert_close(mdp.state_values(pi), torch.tensor(oracle, dtype=F64))
    # Q with H steps = r + γ P V with H − 1 steps; V = Σ_a π Q
    V3 = torch.where(mdp.terminal, 0.0, mdp.state_values(pi, horizon=3))
    torch.testing.assert_close(mdp.action_values(pi)[:2], (mdp.rewards + mdp.gamma * mdp.transitions @ V3)[:2])
    torch.testing.assert_close(mdp.state_values(pi), (pi * mdp.action_values(pi)).sum(-1))
    # horizon 1: V = r_π
    torch.testing.assert_close(mdp.state_values(pi, horizon=1)[:2], (pi * mdp.rewards).sum(-1)[:2])


def test_occupancy_normalisation_and_identities():
    mdp = INFINITE[0]
    pi = mdp.policy_probs(_logits((4, 3), 9))
    rho = mdp.occupancy(pi)
    assert float(rho.sum()) == pytest.approx(1 / (1 - mdp.gamma), rel=1e-12)
    assert float(mdp.occupancy(pi, normalize=True).sum()) == pytest.approx(1.0, rel=1e-12)
    r_pi = (pi * mdp.rewards).sum(-1)
    assert float(rho @ r_pi) == pytest.approx(float(mdp.expected_return(pi.log())), rel=1e-12)
    # a long finite horizon converges to the infinite one; γ = 1 finite sums to H
    torch.testing.assert_close(mdp.occupancy(pi, horizon=400), rho, atol=1e-12, rtol=0)
    undiscounted = rl.TabularMDP.random(4, 3, 1.0, horizon=6, seed=3)
    assert float(undiscounted.occupancy(pi).sum()) == pytest.approx(6.0, rel=1e-12)
    # with terminal states the episode can end early: less than 1/(1 − γ), never in a terminal state
    ended = INFINITE[1]
    rho_t = ended.occupancy(ended.policy_probs(torch.zeros(5, 2, dtype=F64)))
    assert float(rho_t.sum()) < 1 / (1 - ended.gamma) and bool((rho_t[ended.terminal] == 0).all())


@pytest.mark.parametrize("mdp", INFINITE)
def test_performance_difference_lemma(mdp):
    S, A = mdp.num_states, mdp.num_actions
    pi, pi_new = (mdp.policy_probs(_logits((S, A), s)) for s in (11, 12))
    lhs = mdp.expected_return(pi_new.log()) - mdp.expected_return(pi.log())
    rhs = (mdp.occupancy(pi_new)[:, None] * pi_new * mdp.advantages(pi)).sum()
    assert float(lhs) == pytest.approx(float(rhs), rel=1e-10, abs=1e-12)


@pytest.mark.parametrize("mdp", INFINITE)
def test_infinite_horizon_gradient_theorem_equals_autograd(mdp):
    logits = _logits((mdp.num_states, mdp.num_actions), 13)
    torch.testing.assert_close(mdp.policy_gradient_theorem(logits), _autograd_grad(mdp, logits))


def test_chain_hand_numbers():
    mdp = rl.TabularMDP.chain(4, gamma=0.9, left_reward=0.05)
    right = torch.tensor([[0.0, 1.0]] * 4, dtype=F64)
    left = torch.tensor([[1.0, 0.0]] * 4, dtype=F64)
    # always right: the goal (state 3) is reached on step 2, reward γ² · 1
    assert float(mdp.state_values(right)[0]) == pytest.approx(0.81)
    # always left: 0.05 forever from state 0
    assert float(mdp.state_values(left)[0]) == pytest.approx(0.05 / 0.1)
    trajs, prob = mdp.enumerate_trajectories(right, horizon=5)
    assert len(prob) == 1 and trajs.states[0].tolist() == [0, 1, 2, 0, 0]
    assert trajs.terminated[0].tolist() == [False, False, True, False, False]


def test_tabular_errors_name_the_argument():
    P = torch.full((2, 2, 2), 0.5)
    R, d0 = torch.zeros(2, 2), torch.tensor([1.0, 0.0])
    with pytest.raises(ValueError, match="transitions"):
        rl.TabularMDP(torch.full((2, 2, 3), 1 / 3), R, d0, 0.9)
    with pytest.raises(ValueError, match="transitions"):
        rl.TabularMDP(torch.full((2, 2, 2), 0.6), R, d0, 0.9)
    with pytest.raises(ValueError, match="transitions"):
        rl.TabularMDP(torch.tensor([[[1.5, -0.5]] * 2] * 2), R, d0, 0.9)
    with pytest.raises(ValueError, match="rewards"):
        rl.TabularMDP(P, torch.zeros(2, 3), d0, 0.9)
    with pytest.raises(ValueError, match="initial_dist"):
        rl.TabularMDP(P, R, torch.tensor([0.5, 0.6]), 0.9)
    with pytest.raises(ValueError, match="initial_dist"):
        rl.TabularMDP(P, R, torch.ones(3) / 3, 0.9)
    with pytest.raises(ValueError, match="initial_dist"):
        rl.TabularMDP(P, R, d0, 0.9, terminal=[True, False])
    with pytest.raises(ValueError, match="terminal"):
        rl.TabularMDP(P, R, d0, 0.9, terminal=[False, False, True])
    for gamma in (-0.1, 1.1):
        with pytest.raises(ValueError, match="gamma"):
            rl.TabularMDP(P, R, d0, gamma, horizon=3)
    with pytest.raises(ValueError, match="gamma"):
        rl.TabularMDP(P, R, d0, 1.0)  # infinite horizon needs γ < 1
    for horizon in (0, 1.5, True):
        with pytest.raises(ValueError, match="horizon"):
            rl.TabularMDP(P, R, d0, 0.9, horizon=horizon)
    mdp = rl.TabularMDP(P, R, d0, 0.9)
    with pytest.raises(ValueError, match="logits"):
        mdp.expected_return(torch.zeros(3, 2))
    with pytest.raises(ValueError, match="probs"):
        mdp.state_values(torch.full((2, 2), 0.7))
    with pytest.raises(ValueError, match="probs"):
        mdp.occupancy(torch.ones(2, 3) / 3)
    with pytest.raises(ValueError, match="horizon"):
        mdp.enumerate_trajectories(torch.full((2, 2), 0.5))  # infinite horizon, none given
    with pytest.raises(ValueError, match="horizon"):
        mdp.enumerate_trajectories(torch.full((2, 2), 0.5), horizon=12, max_trajectories=1000)
    with pytest.raises(ValueError, match="horizon"):
        mdp.state_values(torch.full((2, 2), 0.5), horizon=-1)
    with pytest.raises(ValueError, match="kind"):
        mdp.exact_policy_gradient(torch.zeros(2, 2), horizon=2, kind="gae")
    with pytest.raises(ValueError, match="n"):
        mdp.sample_trajectories(torch.full((2, 2), 0.5), 0, 3, generator=0)
    with pytest.raises(ValueError, match="generator"):
        mdp.sample_trajectories(torch.full((2, 2), 0.5), 4, 3)
    trajs = mdp.sample_trajectories(torch.full((2, 2), 0.5), 4, 3, generator=0)
    with pytest.raises(ValueError, match="baseline"):
        mdp.trajectory_gradients(torch.zeros(2, 2), trajs, baseline=torch.zeros(2))
    with pytest.raises(ValueError, match="rewards"):
        mdp.trajectory_gradients(torch.zeros(2, 2), trajs._replace(rewards=trajs.rewards[:, :2]))
    with pytest.raises(ValueError, match="num_terminal"):
        rl.TabularMDP.random(3, 2, 0.9, num_terminal=3)
    with pytest.raises(ValueError, match="num_states"):
        rl.TabularMDP.random(0, 2, 0.9)
    with pytest.raises(ValueError, match="length"):
        rl.TabularMDP.chain(1)
    with pytest.raises(ValueError, match="slip"):
        rl.TabularMDP.chain(3, slip=1.5)
