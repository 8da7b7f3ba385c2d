"""Tests of rlbook.trpo: CG, Fisher-vector products, the natural step and the line search."""

import math

import pytest
import torch
from hypothesis import given, strategies as st

from rlbook import reference as ref
from rlbook.kl import categorical_kl
from rlbook.nets import mlp
from rlbook.trpo import (
    backtracking_line_search,
    conjugate_gradient,
    fisher_vector_product,
    flat_grad,
    flat_params,
    natural_gradient_step,
    per_sample_grads,
    score_fisher_vector_product,
    set_flat_params,
    trpo_surrogate,
)


def _policy_and_obs(seed=0, n=5, obs_dim=3, hidden=4, actions=3):
    torch.manual_seed(seed)
    policy = mlp([obs_dim, hidden, actions]).double()
    obs = torch.randn(n, obs_dim, dtype=torch.float64)
    return policy, obs


def _mean_kl_fn(policy, obs):
    old_logits = policy(obs).detach()
    return lambda: categorical_kl(old_logits, policy(obs)).mean()


def _random_spd(n, seed):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(n, n, generator=g, dtype=torch.float64)
    return q @ q.T + 0.5 * torch.eye(n, dtype=torch.float64)


# ----------------------------------------------------------------- flat parameter helpers


def test_flat_params_round_trip_and_flat_grad_matches_autograd():
    policy, obs = _policy_and_obs()
    theta = flat_params(policy)
    assert theta.shape == (sum(p.numel() for p in policy.parameters()),)
    set_flat_params(policy, theta + 1.0)
    assert torch.allclose(flat_params(policy), theta + 1.0)
    out = policy(obs).pow(2).sum()
    grads = torch.autograd.grad(out, list(policy.parameters()), retain_graph=True)
    assert torch.allclose(flat_grad(out, policy), torch.cat([g.reshape(-1) for g in grads]))


def test_flat_grad_unused_parameter_gets_zeros():
    a = torch.tensor([1.0, 2.0], dtype=torch.float64, requires_grad=True)
    b = torch.tensor([3.0], dtype=torch.float64, requires_grad=True)
    g = flat_grad((a ** 2).sum(), [a, b])
    assert g.tolist() == [2.0, 4.0, 0.0]


# ----------------------------------------------------------------- conjugate gradient


@given(n=st.integers(1, 10), seed=st.integers(0, 10_000))
def test_conjugate_gradient_exact_in_n_steps(n, seed):
    a = _random_spd(n, seed)
    b = torch.randn(n, generator=torch.Generator().manual_seed(seed + 1), dtype=torch.float64)
    x = conjugate_gradient(lambda v: a @ v, b, iters=n, tol=0.0)
    expected = torch.linalg.solve(a, b)
    assert torch.allclose(x, expected, rtol=1e-6, atol=1e-6 * float(expected.abs().max()))


def test_conjugate_gradient_matches_dense_oracle_iterate_by_iterate():
    a = _random_spd(6, 3)
    b = torch.arange(1.0, 7.0, dtype=torch.float64)
    for k in (1, 2, 4):
        x = conjugate_gradient(lambda v: a @ v, b, iters=k, tol=0.0)
        assert torch.allclose(x, torch.tensor(ref.conjugate_gradient_dense(a, b, k), dtype=torch.float64))


def test_conjugate_gradient_hand_worked_2x2():
    # Nocedal & Wright style example: A = [[4, 1], [1, 3]], b = [1, 2] -> x = [1/11, 7/11].
    a = torch.tensor([[4.0, 1.0], [1.0, 3.0]], dtype=torch.float64)
    x = conjugate_gradient(lambda v: a @ v, torch.tensor([1.0, 2.0], dtype=torch.float64), iters=2)
    assert torch.allclose(x, torch.tensor([1 / 11, 7 / 11], dtype=torch.float64))


# ----------------------------------------------------------------- Fisher-vector products


def test_fisher_vector_product_equals_explicit_fisher_times_v():
    policy, obs = _policy_and_obs()
    fisher = ref.fisher_matrix_enumerated(policy, obs)
    v = torch.randn(fisher.shape[0], generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    fv = fisher_vector_product(_mean_kl_fn(policy, obs), policy, v)
    assert torch.allclose(fv, fisher @ v, atol=1e-10)
    fv_damped = fisher_vector_product(_mean_kl_fn(policy, obs), policy, v, damping=0.3)
    assert torch.allclose(fv_damped, fisher @ v + 0.3 * v, atol=1e-10)


def test_fisher_equals_hessian_of_mean_kl_at_old_params():
    policy, obs = _policy_and_obs(seed=2, n=4)
    fisher = ref.fisher_matrix_enumerated(policy, obs)
    hessian = ref.mean_kl_hessian(policy, obs)
    assert torch.allclose(fisher, hessian, atol=1e-10)
    assert torch.allclose(fisher, fisher.T)
    assert torch.linalg.eigvalsh(fisher).min() > -1e-10  # positive semi-definite


def test_score_fisher_vector_product_with_enumeration_weights_is_exact():
    policy, obs = _policy_and_obs(seed=3, n=4, actions=2)
    log_p = torch.log_softmax(policy(obs), -1)  # (N, A)
    scores = per_sample_grads(log_p.reshape(-1), policy)  # rows ordered (s0,a0), (s0,a1), ...
    weights = log_p.detach().exp().reshape(-1) / obs.shape[0]
    v = torch.randn(scores.shape[1], generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    fisher = ref.fisher_matrix_enumerated(policy, obs)
    assert torch.allclose(score_fisher_vector_product(scores, v, weights), fisher @ v, atol=1e-10)
    # Unweighted: the plain mean of s sᵀ v.
    assert torch.allclose(score_fisher_vector_product(scores, v), scores.T @ (scores @ v) / scores.shape[0])


def test_empirical_fisher_from_sampled_actions_converges():
    policy, obs = _policy_and_obs(seed=4, n=2, actions=2)
    fisher = ref.fisher_matrix_enumerated(policy, obs)
    gen = torch.Generator().manual_seed(0)
    probs = torch.softmax(policy(obs), -1).detach()
    reps = 400
    actions = torch.multinomial(probs, reps, replacement=True, generator=gen)  # (N, reps)
    log_p = torch.log_softmax(policy(obs), -1).gather(-1, actions).reshape(-1)
    scores = per_sample_grads(log_p, policy)
    v = torch.ones(scores.shape[1], dtype=torch.float64)
    est, exact = score_fisher_vector_product(scores, v), fisher @ v
    assert (est - exact).norm() < 0.15 * exact.norm()


# ----------------------------------------------------------------- natural step


@given(seed=st.integers(0, 1000), max_kl=st.floats(1e-4, 0.5))
def test_natural_step_hits_kl_boundary(seed, max_kl):
    a = _random_spd(5, seed)
    g = torch.randn(5, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    s = natural_gradient_step(g, lambda v: a @ v, max_kl, cg_iters=5)
    assert math.isclose(0.5 * float(s @ a @ s), max_kl, rel_tol=1e-8)
    # Direction: F⁻¹g, and α = √(2δ / gᵀF⁻¹g).
    nat = torch.linalg.solve(a, g)
    alpha = math.sqrt(2 * max_kl / float(g @ nat))
    assert torch.allclose(s, alpha * nat, rtol=1e-6, atol=1e-9)


def test_natural_step_boundary_holds_even_with_truncated_cg():
    a = _random_spd(8, 7)
    g = torch.randn(8, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    s = natural_gradient_step(g, lambda v: a @ v, 0.01, cg_iters=2)
    assert math.isclose(0.5 * float(s @ a @ s), 0.01, rel_tol=1e-10)


def test_natural_step_true_kl_is_close_to_max_kl_for_small_steps():
    policy, obs = _policy_and_obs(seed=5, n=6)
    mean_kl = _mean_kl_fn(policy, obs)
    # A policy gradient lies in the span of the score vectors, i.e. in the range of F (F is singular here).
    actions = torch.tensor([0, 1, 2, 1, 0, 2])
    adv = torch.tensor([1.0, -0.5, 2.0, 0.3, -1.0, 0.7], dtype=torch.float64)
    log_p = torch.log_softmax(policy(obs), -1).gather(-1, actions[:, None]).squeeze(-1)
    g = flat_grad((log_p * adv).mean(), policy)
    fvp = lambda v: fisher_vector_product(mean_kl, policy, v, damping=1e-8)  # noqa: E731
    theta0 = flat_params(policy)
    s = natural_gradient_step(g, fvp, 1e-6, cg_iters=30)
    set_flat_params(policy, theta0 + s)
    with torch.no_grad():
        kl = float(mean_kl())
    assert math.isclose(kl, 1e-6, rel_tol=0.03)  # the cubic term is O(√max_kl) relative


def test_natural_step_zero_gradient_gives_zero_step():
    s = natural_gradient_step(torch.zeros(3, dtype=torch.float64), lambda v: v, 0.01)
    assert s.tolist() == [0.0, 0.0, 0.0]
    # gᵀg below CG's tolerance (a converged policy): also no step, not a division by zero.
    s = natural_gradient_step(torch.full((3,), 1e-7, dtype=torch.float64), lambda v: v, 0.01)
    assert s.tolist() == [0.0, 0.0, 0.0]


# ----------------------------------------------------------------- line search


def _quadratic_problem():
    g = torch.tensor([1.0, 0.0], dtype=torch.float64)
    surrogate = lambda th: g @ th  # noqa: E731  linear, improves along +x
    kl = lambda th: 0.5 * th @ th  # noqa: E731  KL = ½‖θ‖² around θ₀ = 0
    return g, surrogate, kl


def test_line_search_accepts_full_step_inside_trust_region():
    g, surrogate, kl = _quadratic_problem()
    theta0, step = torch.zeros(2, dtype=torch.float64), torch.tensor([0.1, 0.0], dtype=torch.float64)
    new, accepted, backtracks = backtracking_line_search(surrogate, kl, theta0, step, 0.01, float(g @ step))
    assert accepted and backtracks == 0 and torch.allclose(new, step)


def test_line_search_rejects_step_violating_kl_and_backtracks():
    g, surrogate, kl = _quadratic_problem()
    theta0 = torch.zeros(2, dtype=torch.float64)
    step = torch.tensor([0.4, 0.0], dtype=torch.float64)  # KL(full) = 0.08 > 0.01; KL(step/4) = 0.005
    new, accepted, backtracks = backtracking_line_search(surrogate, kl, theta0, step, 0.01, float(g @ step))
    assert accepted and backtracks == 2 and torch.allclose(new, step / 4)
    assert float(kl(new)) <= 0.01


def test_line_search_keeps_old_params_when_surrogate_never_improves():
    _, surrogate, kl = _quadratic_problem()
    theta0 = torch.zeros(2, dtype=torch.float64)
    step = torch.tensor([-0.01, 0.0], dtype=torch.float64)  # goes downhill
    new, accepted, backtracks = backtracking_line_search(surrogate, kl, theta0, step, 0.01, 0.01, max_backtracks=5)
    assert not accepted and backtracks == 5 and torch.equal(new, theta0)


# ----------------------------------------------------------------- surrogate


def test_trpo_surrogate_gradient_at_old_params_is_policy_gradient():
    policy, obs = _policy_and_obs(seed=6, n=5)
    actions = torch.tensor([0, 1, 2, 1, 0])
    adv = torch.tensor([1.0, -0.5, 2.0, 0.3, -1.0], dtype=torch.float64)
    log_p = torch.log_softmax(policy(obs), -1).gather(-1, actions[:, None]).squeeze(-1)
    surrogate = trpo_surrogate(log_p, log_p.detach(), adv).mean()
    assert math.isclose(float(surrogate.detach()), float(adv.mean()))
    pg = flat_grad((log_p * adv).mean(), policy, retain_graph=True)
    assert torch.allclose(flat_grad(surrogate, policy), pg)


# ----------------------------------------------------------------- errors


def test_errors_name_the_argument():
    a = torch.eye(2, dtype=torch.float64)
    g = torch.ones(2, dtype=torch.float64)
    with pytest.raises(ValueError, match="max_kl"):
        natural_gradient_step(g, lambda v: a @ v, 0.0)
    with pytest.raises(ValueError, match="max_kl"):
        natural_gradient_step(g, lambda v: a @ v, -1.0)
    with pytest.raises(ValueError, match="max_kl"):
        backtracking_line_search(lambda t: t.sum(), lambda t: t.sum(), g, g, 0.0, 1.0)
    with pytest.raises(ValueError, match="step"):
        backtracking_line_search(lambda t: t.sum(), lambda t: t.sum(), g, torch.ones(3), 0.1, 1.0)
    with pytest.raises(ValueError, match="backtrack_coef"):
        backtracking_line_search(lambda t: t.sum(), lambda t: t.sum(), g, g, 0.1, 1.0, backtrack_coef=1.0)
    with pytest.raises(ValueError, match="iters"):
        conjugate_gradient(lambda v: v, g, iters=0)
    with pytest.raises(ValueError, match="`b`"):
        conjugate_gradient(lambda v: v, torch.ones(2, 2))
    with pytest.raises(ValueError, match="fvp"):
        conjugate_gradient(lambda v: -v, g)  # not positive-definite
    policy, obs = _policy_and_obs()
    with pytest.raises(ValueError, match="flat"):
        set_flat_params(policy, torch.zeros(3))
    with pytest.raises(ValueError, match="`v`"):
        fisher_vector_product(_mean_kl_fn(policy, obs), policy, torch.zeros(3))
    with pytest.raises(ValueError, match="damping"):
        fisher_vector_product(_mean_kl_fn(policy, obs), policy, flat_params(policy), damping=-1.0)
    with pytest.raises(ValueError, match="weights"):
        score_fisher_vector_product(torch.ones(3, 2), torch.ones(2), torch.ones(2))
    with pytest.raises(ValueError, match="output"):
        flat_grad(torch.ones(2, requires_grad=True), [torch.ones(1, requires_grad=True)])
    with pytest.raises(ValueError, match="advantages"):
        trpo_surrogate(torch.zeros(3), torch.zeros(3), torch.zeros(2))


def test_fisher_vector_product_is_detached_even_for_a_direction_with_grad():
    # documented "(P,) vector F v (+ λ v), detached": a direction that carries a graph (the CG
    # iterate of a differentiable caller) must not leak it into the product
    policy, obs = _policy_and_obs()
    P = sum(p.numel() for p in policy.parameters())
    v = torch.randn(P, generator=torch.Generator().manual_seed(2), dtype=torch.float64).requires_grad_()
    fv = fisher_vector_product(_mean_kl_fn(policy, obs), policy, v, damping=0.1)
    assert not fv.requires_grad and fv.grad_fn is None


def test_lists_are_accepted_and_nan_is_refused_like_tensors():
    A = _random_spd(3, 0).float()
    b = [1.0, -2.0, 0.5]
    x = conjugate_gradient(lambda v: A @ v, b, iters=3)
    torch.testing.assert_close(A @ x, torch.tensor(b), rtol=0, atol=1e-4)
    lp, old, adv = [-0.5, -1.0], [-0.7, -0.9], [1.0, -2.0]
    expected = torch.exp(torch.tensor(lp) - torch.tensor(old)) * torch.tensor(adv)
    torch.testing.assert_close(trpo_surrogate(lp, old, adv), expected)
    with pytest.raises(ValueError, match="old_log_probs"):
        trpo_surrogate(torch.tensor(lp), torch.tensor([float("nan"), -0.9]), torch.tensor(adv))
    with pytest.raises(ValueError, match="`b`"):
        conjugate_gradient(lambda v: v, torch.tensor([1.0, float("nan")]))
