"""Value functions of a fixed policy: linear solve, iterative evaluation, brute-force enumeration,
the Bellman equations, Q from V, and tabular TD(0)."""

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import rlbook as rl
from rlbook import reference as ref

F64 = torch.float64


def _random_case(seed, S=4, A=3, num_terminal=0, gamma=0.9, horizon=None):
    mdp = rl.TabularMDP.random(S, A, gamma=gamma, horizon=horizon, seed=seed, num_terminal=num_terminal)
    probs = torch.softmax(torch.randn(S, A, generator=torch.Generator().manual_seed(seed + 100), dtype=F64), -1)
    return mdp, probs


def _args(mdp, probs):
    return mdp.transitions, mdp.rewards, probs


# ----------------------------------------------------------------------------- exact evaluation
@given(seed=st.integers(0, 10_000), num_terminal=st.integers(0, 2), gamma=st.floats(0.0, 0.97))
def test_linear_solve_equals_iterative_and_the_mdp(seed, num_terminal, gamma):
    mdp, probs = _random_case(seed, num_terminal=num_terminal, gamma=gamma)
    v_solve = rl.policy_evaluation(*_args(mdp, probs), gamma, mdp.terminal)
    v_iter = rl.iterative_policy_evaluation(*_args(mdp, probs), gamma, mdp.terminal, tol=1e-13)
    assert torch.allclose(v_solve, v_iter, atol=1e-10)
    assert torch.allclose(v_solve, mdp.state_values(probs), atol=1e-10)
    assert (v_solve[mdp.terminal] == 0).all()


@pytest.mark.parametrize("seed, num_terminal", [(0, 0), (1, 1), (2, 1)])
def test_iterative_equals_the_loop_oracle(seed, num_terminal):
    mdp, probs = _random_case(seed, S=3, A=2, num_terminal=num_terminal)
    got = rl.iterative_policy_evaluation(*_args(mdp, probs), 0.9, mdp.terminal)
    want = ref.tabular_values_loop(mdp.transitions, mdp.rewards, probs, 0.9, None, mdp.terminal)
    assert torch.allclose(got, torch.tensor(want, dtype=F64), atol=1e-10)


@pytest.mark.parametrize("seed, num_terminal, horizon, gamma", [(0, 0, 3, 0.9), (1, 1, 4, 0.8), (2, 1, 4, 1.0)])
def test_finite_horizon_equals_brute_force_enumeration(seed, num_terminal, horizon, gamma):
    """V_H from H backups = the definition Σ_τ p(τ|s) Σ_t γ^t r_t summed over every trajectory."""
    mdp, probs = _random_case(seed, S=3, A=2, num_terminal=num_terminal, gamma=gamma, horizon=horizon)
    got = rl.iterative_policy_evaluation(*_args(mdp, probs), gamma, mdp.terminal, horizon=horizon)
    want = ref.tabular_values_enumeration(mdp.transitions, mdp.rewards, probs, gamma, horizon, mdp.terminal)
    assert torch.allclose(got, torch.tensor(want, dtype=F64), atol=1e-12)
    assert torch.allclose(got, mdp.state_values(probs), atol=1e-12)


def test_infinite_horizon_is_the_limit_of_enumeration():
    """|V^π − V_H| ≤ γ^H r_max / (1 − γ): the linear solve against brute force with a tail bound."""
    gamma, H = 0.3, 6
    mdp, probs = _random_case(5, S=3, A=2)
    v = rl.policy_evaluation(*_args(mdp, probs), gamma)
    v_h = torch.tensor(ref.tabular_values_enumeration(mdp.transitions, mdp.rewards, probs, gamma, H), dtype=F64)
    bound = gamma**H * float(mdp.rewards.abs().max()) / (1 - gamma)
    assert float((v - v_h).abs().max()) <= bound
    assert float((v - v_h).abs().max()) > 0  # the tail is not zero: the comparison is not vacuous


def test_closed_form_single_state():
    """One state, one action, reward 1 forever: V = 1/(1 − γ)."""
    P, r, pi = torch.ones(1, 1, 1, dtype=F64), torch.ones(1, 1, dtype=F64), torch.ones(1, 1, dtype=F64)
    for gamma in (0.0, 0.5, 0.9):
        assert math.isclose(float(rl.policy_evaluation(P, r, pi, gamma)), 1 / (1 - gamma), rel_tol=1e-12)


def test_chain_by_hand():
    """Corridor 0-1-2-[3], always right, γ = 0.9: the goal pays 1 on arrival, so V = (0.81, 0.9, 1, 0)."""
    mdp = rl.TabularMDP.chain(length=4, gamma=0.9, left_reward=0.0)
    right = torch.tensor([[0.0, 1.0]] * 4, dtype=F64)
    v = rl.policy_evaluation(mdp.transitions, mdp.rewards, right, 0.9, mdp.terminal)
    assert torch.allclose(v, torch.tensor([0.81, 0.9, 1.0, 0.0], dtype=F64), atol=1e-12)


# ----------------------------------------------------------------------------- Bellman equations
@given(seed=st.integers(0, 10_000), num_terminal=st.integers(0, 2))
def test_bellman_residual_and_q_identities(seed, num_terminal):
    mdp, probs = _random_case(seed, num_terminal=num_terminal)
    v = rl.policy_evaluation(*_args(mdp, probs), 0.9, mdp.terminal)
    backup = rl.bellman_expectation_backup(*_args(mdp, probs), v, 0.9, mdp.terminal)
    assert float((backup - v).abs().max()) < 1e-10
    q = rl.action_values_from_state_values(mdp.transitions, mdp.rewards, v, 0.9, mdp.terminal)
    assert torch.allclose(q, mdp.action_values(probs), atol=1e-10)
    assert torch.allclose((probs * q).sum(-1), v, atol=1e-10)  # V = E_a[Q]
    adv = q - v[:, None]
    assert torch.allclose((probs * adv).sum(-1), torch.zeros_like(v), atol=1e-10)  # E_a[A] = 0


def test_backup_of_a_wrong_value_is_not_a_fixed_point():
    mdp, probs = _random_case(3)
    v = rl.policy_evaluation(*_args(mdp, probs), 0.9) + 0.1
    assert float((rl.bellman_expectation_backup(*_args(mdp, probs), v, 0.9) - v).abs().max()) > 1e-3


def test_policy_reward_and_transitions_by_hand():
    P = torch.tensor([[[0.0, 1.0], [1.0, 0.0]], [[0.5, 0.5], [0.0, 1.0]]], dtype=F64)
    r = torch.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=F64)
    pi = torch.tensor([[0.25, 0.75], [1.0, 0.0]], dtype=F64)
    r_pi, P_pi = rl.policy_reward_and_transitions(P, r, pi)
    assert torch.allclose(r_pi, torch.tensor([1.75, 3.0], dtype=F64))
    assert torch.allclose(P_pi, torch.tensor([[0.75, 0.25], [0.5, 0.5]], dtype=F64))
    r_pi, P_pi = rl.policy_reward_and_transitions(P, r, pi, terminal=[False, True])
    assert torch.allclose(r_pi, torch.tensor([1.75, 0.0], dtype=F64))
    assert torch.allclose(P_pi, torch.tensor([[0.75, 0.0], [0.0, 0.0]], dtype=F64))


def test_values_are_differentiable_in_the_policy():
    mdp, _ = _random_case(7)
    logits = torch.randn(4, 3, generator=torch.Generator().manual_seed(1), dtype=F64).requires_grad_(True)
    j = mdp.initial_dist @ rl.policy_evaluation(mdp.transitions, mdp.rewards, torch.softmax(logits, -1), 0.9)
    (grad,) = torch.autograd.grad(j, logits)
    assert torch.allclose(grad, mdp.policy_gradient_theorem(logits.detach()), atol=1e-10)


# ----------------------------------------------------------------------------- TD(0)
def test_td0_update_by_hand():
    v = torch.tensor([1.0, 2.0, 3.0], dtype=F64)
    new = rl.td0_update(v, 0, 0.5, 2, False, gamma=0.9, step_size=0.1)
    # δ = 0.5 + 0.9·3 − 1 = 2.2; V(0) = 1 + 0.22
    assert torch.allclose(new, torch.tensor([1.22, 2.0, 3.0], dtype=F64))
    assert torch.equal(v, torch.tensor([1.0, 2.0, 3.0], dtype=F64))  # pure: input untouched
    ended = rl.td0_update(v, 1, 0.5, 2, True, gamma=0.9, step_size=1.0)  # no bootstrap
    assert torch.allclose(ended, torch.tensor([1.0, 0.5, 3.0], dtype=F64))


def test_td0_update_fixed_point_is_the_expected_target():
    """E[δ] = 0 at V^π: the exact values are a fixed point of the expected TD(0) update."""
    mdp, probs = _random_case(11, num_terminal=1)
    v = rl.policy_evaluation(*_args(mdp, probs), 0.9, mdp.terminal)
    S, A = probs.shape
    for s in range(S - 1):
        expected = torch.zeros(S, dtype=F64)
        for a in range(A):
            for s2 in range(S):
                w = probs[s, a] * mdp.transitions[s, a, s2]
                expected += w * rl.td0_update(v, s, mdp.rewards[s, a], s2, bool(mdp.terminal[s2]), 0.9, 1.0)
        assert torch.allclose(expected, v, atol=1e-10)


def test_td0_learner_converges_on_the_chain():
    mdp = rl.TabularMDP.chain(length=4, gamma=0.9)
    probs = torch.full((4, 2), 0.5, dtype=F64)
    v_true = rl.policy_evaluation(mdp.transitions, mdp.rewards, probs, 0.9, mdp.terminal)
    res = rl.td0_policy_evaluation(mdp.transitions, mdp.rewards, probs, mdp.initial_dist, 0.9, num_steps=20_000,
                                   step_size=0.5, generator=torch.Generator().manual_seed(0),
                                   terminal=mdp.terminal, step_size_power=0.7, record_every=1000)
    err = (res.history - v_true).norm(dim=1)
    assert float(err[0]) == pytest.approx(float(v_true.norm()))
    assert float(err[-1]) < 0.03  # measured ≈ 0.01 at this seed; the start is ≈ 0.9
    assert torch.equal(res.values, res.history[-1]) and int(res.steps[-1]) == 20_000
    assert res.values[3] == 0  # the terminal state is never updated


def test_td0_learner_is_seeded():
    mdp = rl.TabularMDP.random(3, 2, gamma=0.8, seed=0)
    probs = torch.full((3, 2), 0.5, dtype=F64)
    run = lambda seed: rl.td0_policy_evaluation(mdp.transitions, mdp.rewards, probs, mdp.initial_dist, 0.8, 500,
                                                0.1, torch.Generator().manual_seed(seed)).values
    assert torch.equal(run(1), run(1)) and not torch.equal(run(1), run(2))


# ----------------------------------------------------------------------------- errors
def test_bad_inputs_raise_naming_the_argument():
    mdp, probs = _random_case(0)
    P, r = mdp.transitions, mdp.rewards
    with pytest.raises(ValueError, match="`transitions` must have shape"):
        rl.policy_evaluation(P[0], r, probs, 0.9)
    with pytest.raises(ValueError, match="`rewards` must have shape"):
        rl.policy_evaluation(P, r[:, :2], probs, 0.9)
    with pytest.raises(ValueError, match="`probs` must sum to 1"):
        rl.policy_evaluation(P, r, probs * 2, 0.9)
    with pytest.raises(ValueError, match="`gamma` must be in"):
        rl.policy_evaluation(P, r, probs, 1.5)
    with pytest.raises(ValueError, match="singular"):
        rl.policy_evaluation(P, r, probs, 1.0)  # nothing terminates: the return is infinite
    with pytest.raises(ValueError, match="`terminal` must have shape"):
        rl.policy_evaluation(P, r, probs, 0.9, terminal=[True])
    with pytest.raises(ValueError, match="`values` must have shape"):
        rl.bellman_expectation_backup(P, r, probs, torch.zeros(3), 0.9)
    with pytest.raises(ValueError, match="`horizon` must be None or an integer"):
        rl.iterative_policy_evaluation(P, r, probs, 0.9, horizon=-1)
    with pytest.raises(RuntimeError, match="did not converge"):
        rl.iterative_policy_evaluation(P, r, probs, 0.999, max_sweeps=10)
    with pytest.raises(ValueError, match="`state` must be an integer"):
        rl.td0_update(torch.zeros(3), 3, 0.0, 0, False, 0.9, 0.1)
    with pytest.raises(ValueError, match="`step_size` must be in"):
        rl.td0_update(torch.zeros(3), 0, 0.0, 0, False, 0.9, 0.0)
    with pytest.raises(ValueError, match="`generator` must be a torch.Generator"):
        rl.td0_policy_evaluation(P, r, probs, mdp.initial_dist, 0.9, 10, 0.1, generator=0)
    with pytest.raises(ValueError, match="`initial_dist` puts mass on a terminal state"):
        rl.td0_policy_evaluation(P, r, probs, torch.tensor([0.0, 0, 0, 1], dtype=F64), 0.9, 10, 0.1,
                                 torch.Generator(), terminal=[False, False, False, True])
    with pytest.raises(ValueError, match="`step_size_power` must be in"):
        rl.td0_policy_evaluation(P, r, probs, mdp.initial_dist, 0.9, 10, 0.1, torch.Generator(), step_size_power=2)


def test_gamma_one_with_termination_is_allowed():
    mdp = rl.TabularMDP.chain(length=4, gamma=1.0, horizon=50, left_reward=0.0)
    probs = torch.full((4, 2), 0.5, dtype=F64)
    v = rl.policy_evaluation(mdp.transitions, mdp.rewards, probs, 1.0, mdp.terminal)
    assert torch.allclose(v[:3], torch.ones(3, dtype=F64), atol=1e-10)  # the goal is reached surely, paying 1


def test_exercises_registered():
    v_fn = lambda P, r, pi, gamma: rl.iterative_policy_evaluation(P, r, pi, gamma, tol=1e-13)
    assert rl.exercises.check("policy_evaluation", v_fn)
    assert rl.exercises.check("td0_update", rl.td0_update)
    with pytest.raises(AssertionError):
        rl.exercises.check("policy_evaluation", lambda P, r, pi, gamma: rl.policy_evaluation(P, r, pi, 0.5 * gamma))


# ----------------------------------------------------------------------------- TD(0): the step-size schedule and the draws
def _one_state_mdp(reward=2.0):
    """s0 → terminal s1 under either action (reward ``reward``), then a reset to s0: state 0 is
    visited exactly once per step, so the n-th estimate has a closed form."""
    P = torch.zeros(2, 2, 2, dtype=F64)
    P[:, :, 1] = 1.0
    r = torch.tensor([[reward, reward], [0.0, 0.0]], dtype=F64)
    return P, r, torch.full((2, 2), 0.5, dtype=F64), torch.tensor([1.0, 0.0], dtype=F64), [False, True]


@pytest.mark.parametrize("step_size, power", [(0.5, None), (0.5, 0.0), (0.5, 1.0), (0.8, 0.6), (1.0, 1.0)])
def test_td0_step_size_of_the_nth_visit_is_alpha_n_to_the_minus_power(step_size, power):
    # V_n = V_{n-1} + α·n^(−p)·(r − V_{n-1}) with V_0 = 0 (no bootstrap: the next state is terminal);
    # p defaults to 0, a constant step size (V_n = r·(1 − (1 − α)^n)).
    P, r, probs, d0, term = _one_state_mdp()
    kw = {} if power is None else dict(step_size_power=power)
    res = rl.td0_policy_evaluation(P, r, probs, d0, 0.9, 7, step_size, torch.Generator().manual_seed(0),
                                   terminal=term, record_every=1, **kw)
    v, expected = 0.0, [0.0]
    for n in range(1, 8):
        v += step_size * n ** -(power or 0.0) * (2.0 - v)
        expected.append(v)
    assert res.steps.tolist() == list(range(8))
    torch.testing.assert_close(res.history[:, 0], torch.tensor(expected, dtype=F64))
    assert (res.history[:, 1] == 0).all()


def test_td0_records_every_100_steps_by_default_and_the_last_step():
    P, r, probs, d0, term = _one_state_mdp()
    res = rl.td0_policy_evaluation(P, r, probs, d0, 0.9, 250, 0.1, torch.Generator().manual_seed(0), terminal=term)
    assert res.steps.tolist() == [0, 100, 200, 250] and res.history.shape == (4, 2)
    res = rl.td0_policy_evaluation(P, r, probs, d0, 0.9, 300, 0.1, torch.Generator().manual_seed(0), terminal=term,
                                   record_every=150)
    assert res.steps.tolist() == [0, 150, 300]


def test_td0_draws_the_action_and_the_next_state_independently():
    # From s0 both actions pay 1; action 0 stays in s0, action 1 stays with probability 1/2, else ends.
    # P(stay) = 1/2 + 1/4 = 3/4 and V(s0) = 1 / (1 − 0.9 · 3/4) = 3.08. Drawing the next state with the
    # action's uniform would make action 1 always end (the upper half of [0, 1)): V = 1 / (1 − 0.45) = 1.82.
    P = torch.zeros(2, 2, 2, dtype=F64)
    P[0, 0, 0] = 1.0
    P[0, 1] = torch.tensor([0.5, 0.5], dtype=F64)
    P[1, :, 1] = 1.0
    r = torch.tensor([[1.0, 1.0], [0.0, 0.0]], dtype=F64)
    probs = torch.full((2, 2), 0.5, dtype=F64)
    v_true = rl.policy_evaluation(P, r, probs, 0.9, [False, True])
    assert float(v_true[0]) == pytest.approx(1 / (1 - 0.675))
    res = rl.td0_policy_evaluation(P, r, probs, torch.tensor([1.0, 0.0], dtype=F64), 0.9, 20_000, 0.02,
                                   torch.Generator().manual_seed(0), terminal=[False, True])
    assert abs(float(res.history[-50:, 0].mean()) - float(v_true[0])) < 0.3  # measured: 0.05 off


def test_td0_and_policy_evaluation_boundaries():
    mdp, probs = _random_case(0, num_terminal=1)
    P, r = mdp.transitions, mdp.rewards
    gen = lambda: torch.Generator().manual_seed(0)
    # step size 1 is allowed (α ∈ (0, 1]); above 1 is not
    rl.td0_policy_evaluation(P, r, probs, mdp.initial_dist, 0.9, 5, 1.0, gen(), terminal=mdp.terminal)
    for bad in (1.5, 0.0):
        with pytest.raises(ValueError, match="`step_size` must be in"):
            rl.td0_policy_evaluation(P, r, probs, mdp.initial_dist, 0.9, 5, bad, gen(), terminal=mdp.terminal)
    # horizon 0 is the empty sum (V = 0); γ > 1 is refused by iterative evaluation too
    assert (rl.iterative_policy_evaluation(P, r, probs, 0.9, horizon=0, terminal=mdp.terminal) == 0).all()
    with pytest.raises(ValueError, match="`gamma` must be in"):
        rl.iterative_policy_evaluation(P, r, probs, 1.5, terminal=mdp.terminal)


@pytest.mark.parametrize("gamma", [1.5, -0.1])
def test_every_value_function_refuses_a_discount_outside_the_unit_interval(gamma):
    mdp, probs = _random_case(0, num_terminal=1)
    P, r, term = mdp.transitions, mdp.rewards, mdp.terminal
    v = torch.zeros(P.shape[0], dtype=F64)
    calls = [lambda: rl.bellman_expectation_backup(P, r, probs, v, gamma, term),
             lambda: rl.policy_evaluation(P, r, probs, gamma, term),
             lambda: rl.iterative_policy_evaluation(P, r, probs, gamma, term),
             lambda: rl.action_values_from_state_values(P, r, v, gamma, term),
             lambda: rl.td0_update(v, 0, 1.0, 1, False, gamma, 0.5),
             lambda: rl.td0_policy_evaluation(P, r, probs, mdp.initial_dist, gamma, 5, 0.5, torch.Generator(),
                                              terminal=term)]
    for call in calls:
        with pytest.raises(ValueError, match="`gamma` must be in"):
            call()
