"""Preferences: Bradley–Terry, DPO and its family, the KL-regularised optimum, best-of-N.

Every loss is checked against a slow oracle or a closed form, its gradient against the formula the
docstring states (autograd vs closed form), and the enumerated quantities against brute force:
π* against a numerical maximisation of the objective (and against every perturbation), best-of-N
against a listing of all K^N draws, and DPO's population minimiser against π*.
"""

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import rlbook as rl
from rlbook import reference as R

DT = torch.float64


def _randn(*shape, seed=0, scale=1.0):
    return scale * torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=DT)


def _probs(K, seed=0):
    return torch.softmax(_randn(K, seed=seed, scale=1.5), -1)


floats = st.floats(-20, 20, allow_nan=False)


# ============================== Bradley–Terry ==============================


@given(st.lists(st.tuples(floats, floats), min_size=1, max_size=8))
def test_bradley_terry_loss_matches_its_oracle_and_its_probability(pairs):
    c = torch.tensor([a for a, _ in pairs], dtype=DT)
    r = torch.tensor([b for _, b in pairs], dtype=DT)
    loss = rl.bradley_terry_loss(c, r)
    assert torch.allclose(loss, torch.tensor(R.bradley_terry_loss_loop(c, r), dtype=DT), atol=1e-12)
    assert torch.allclose(loss, -rl.bradley_terry_probability(c, r).log(), atol=1e-9, rtol=1e-9)
    assert torch.allclose(rl.bradley_terry_probability(c, r) + rl.bradley_terry_probability(r, c), torch.ones_like(c))


def test_bradley_terry_hand_worked_values_and_gradient():
    c, r = torch.tensor([0.0, math.log(3.0)], dtype=DT, requires_grad=True), torch.zeros(2, dtype=DT, requires_grad=True)
    assert torch.allclose(rl.bradley_terry_probability(c, r), torch.tensor([0.5, 0.75], dtype=DT))
    loss = rl.bradley_terry_loss(c, r)
    assert torch.allclose(loss, torch.tensor([math.log(2), -math.log(0.75)], dtype=DT))
    loss.sum().backward()
    weight = torch.sigmoid(r - c).detach()  # ∂/∂r_c = −σ(r_r − r_c) = −∂/∂r_r
    assert torch.allclose(c.grad, -weight) and torch.allclose(r.grad, weight)


def test_bradley_terry_mle_recovers_the_gold_reward_differences():
    """Population BT likelihood on a bandit (all pairs, labels drawn from the gold reward): its
    maximiser is the gold reward up to a constant (a logistic regression on reward differences)."""
    gold = torch.tensor([0.3, -1.0, 1.2, 0.0], dtype=DT)
    mu = _probs(4, seed=3)
    prefer = torch.sigmoid(gold[:, None] - gold[None, :])
    weight = mu[:, None] * mu[None, :] * prefer
    est = torch.zeros(4, dtype=DT, requires_grad=True)
    opt = torch.optim.LBFGS([est], max_iter=500, tolerance_grad=1e-13, tolerance_change=1e-16, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = (weight * rl.bradley_terry_loss(est[:, None].expand(4, 4), est[None, :].expand(4, 4))).sum()
        loss.backward()
        return loss

    opt.step(closure)
    diff = (est.detach() - est.detach().mean()) - (gold - gold.mean())
    assert diff.abs().max() < 1e-7


# ============================== DPO ==============================


def _pairs(B=6, seed=0):
    return [_randn(B, seed=seed + k, scale=3.0) - 10 for k in range(4)]


@pytest.mark.parametrize("label_smoothing", [0.0, 0.1, 0.3])
@pytest.mark.parametrize("beta", [0.05, 0.5, 2.0])
def test_dpo_loss_matches_its_oracle(beta, label_smoothing):
    pc, pr, rc, rr = _pairs()
    want = torch.tensor(R.dpo_loss_loop(pc, pr, rc, rr, beta, label_smoothing), dtype=DT)
    assert torch.allclose(rl.dpo_loss(pc, pr, rc, rr, beta, label_smoothing), want, atol=1e-12)


def test_dpo_loss_is_bradley_terry_on_implicit_rewards():
    pc, pr, rc, rr = _pairs()
    beta = 0.3
    implicit_c, implicit_r = rl.implicit_rewards(pc, rc, beta), rl.implicit_rewards(pr, rr, beta)
    assert torch.allclose(implicit_c, beta * (pc - rc))
    assert torch.allclose(rl.dpo_loss(pc, pr, rc, rr, beta), rl.bradley_terry_loss(implicit_c, implicit_r), atol=1e-14)
    # symmetric under swapping the roles of chosen and rejected with flipped labels (ε ↔ 1 − ε at ε = 0 vs the swap)
    assert torch.allclose(rl.dpo_loss(pc, pr, rc, rr, beta) - rl.dpo_loss(pr, pc, rr, rc, beta), -beta * ((pc - rc) - (pr - rr)))


@pytest.mark.parametrize("label_smoothing", [0.0, 0.2])
def test_dpo_gradient_is_minus_beta_weight_times_the_score_difference(label_smoothing):
    """Through a real parametrised policy: ∇L = −β·w·(∇log π(y_c) − ∇log π(y_r)), w = σ(r̂_r − r̂_c) − ε."""
    K, beta = 7, 0.4
    theta = _randn(K, seed=1).requires_grad_(True)
    ref_log = torch.log_softmax(_randn(K, seed=2), -1)
    chosen, rejected = torch.tensor([0, 3, 5]), torch.tensor([2, 1, 6])
    log_pi = torch.log_softmax(theta, -1)
    loss = rl.dpo_loss(log_pi[chosen], log_pi[rejected], ref_log[chosen], ref_log[rejected], beta, label_smoothing)
    (grad,) = torch.autograd.grad(loss.sum(), theta)
    weight = rl.dpo_gradient_weight(rl.implicit_rewards(log_pi[chosen], ref_log[chosen], beta),
                                    rl.implicit_rewards(log_pi[rejected], ref_log[rejected], beta), label_smoothing).detach()
    pi = log_pi.exp().detach()
    score = torch.eye(K, dtype=DT) - pi  # ∇_θ log π(a) = onehot(a) − π
    want = sum(-beta * weight[i] * (score[chosen[i]] - score[rejected[i]]) for i in range(3))
    assert torch.allclose(grad, want, atol=1e-14)


def test_dpo_loss_gradcheck():
    inputs = [x.requires_grad_(True) for x in _pairs(B=3)]
    assert torch.autograd.gradcheck(lambda *xs: rl.dpo_loss(*xs, beta=0.7, label_smoothing=0.1), inputs)


def test_dpo_gradient_weight_limits():
    big = torch.tensor([50.0], dtype=DT)
    assert rl.dpo_gradient_weight(big, -big).item() < 1e-40  # confidently right: no push
    assert abs(rl.dpo_gradient_weight(-big, big).item() - 1.0) < 1e-15  # confidently wrong: full push
    assert rl.dpo_gradient_weight(torch.zeros(1), torch.zeros(1)).item() == 0.5
    assert abs(rl.dpo_gradient_weight(big, -big, 0.1).item() + 0.1) < 1e-15  # cDPO pushes back past the margin


# ============================== IPO, SimPO, ORPO ==============================


def test_ipo_loss_closed_form_value_gradient_and_minimiser():
    pc, pr, rc, rr = [x.clone().requires_grad_(True) for x in _pairs()]
    beta = 0.25
    h = (pc - rc) - (pr - rr)
    loss = rl.ipo_loss(pc, pr, rc, rr, beta)
    assert torch.allclose(loss, (h - 2.0) ** 2)
    (g,) = torch.autograd.grad(loss.sum(), pc)
    assert torch.allclose(g, 2 * (h - 2.0).detach())
    # one pair: minimised at h = 1/(2β); a preference of probability p on two answers: h* = (2p − 1)/(2β)
    z = torch.zeros(1, dtype=DT)
    assert rl.ipo_loss(torch.tensor([2.0], dtype=DT), z, z, z, beta).item() == 0.0
    p = 0.8
    hs = torch.linspace(-5, 5, 200001, dtype=DT)
    pop = p * rl.ipo_loss(hs, 0 * hs, 0 * hs, 0 * hs, beta) + (1 - p) * rl.ipo_loss(-hs, 0 * hs, 0 * hs, 0 * hs, beta)
    assert abs(hs[pop.argmin()].item() - (2 * p - 1) / (2 * beta)) < 1e-4


def test_ipo_population_minimiser_is_azar_et_al_closed_form():
    """Azar et al. 2023, §5: with pairs from μ×μ, IPO's optimum is π ∝ π_ref·exp(p(y ≻ μ)/τ)."""
    K, tau = 4, 0.5
    ref = _probs(K, seed=4)
    gold = torch.tensor([0.5, -0.7, 1.1, 0.0], dtype=DT)
    prefer = torch.sigmoid(gold[:, None] - gold[None, :])
    weight = ref[:, None] * ref[None, :] * prefer
    theta = torch.zeros(K, dtype=DT, requires_grad=True)
    opt = torch.optim.LBFGS([theta], max_iter=500, tolerance_grad=1e-13, tolerance_change=1e-16, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        lp = torch.log_softmax(theta, -1)
        loss = (weight * rl.ipo_loss(lp[:, None].expand(K, K), lp[None, :].expand(K, K), ref.log()[:, None].expand(K, K),
                                      ref.log()[None, :].expand(K, K), tau)).sum()
        loss.backward()
        return loss

    opt.step(closure)
    want = torch.softmax(ref.log() + (prefer * ref[None, :]).sum(-1) / tau, -1)
    assert (torch.softmax(theta.detach(), -1) - want).abs().max() < 1e-8


@given(st.lists(st.tuples(st.floats(-6, -0.05), st.floats(-6, -0.05), st.floats(-6, -0.05), st.floats(-6, -0.05),
                          st.integers(1, 9), st.integers(1, 9)), min_size=1, max_size=6),
       st.floats(0.05, 5.0), st.floats(0.0, 2.0))
def test_ipo_simpo_orpo_match_their_oracles(rows, beta, gamma):
    pc, pr, rc, rr, lc, lr = (torch.tensor(col, dtype=DT) for col in zip(*rows))
    assert torch.allclose(rl.ipo_loss(pc, pr, rc, rr, beta), torch.tensor(R.ipo_loss_loop(pc, pr, rc, rr, beta), dtype=DT),
                          atol=1e-9, rtol=1e-9)
    want = torch.tensor(R.simpo_loss_loop(pc * lc, pr * lr, beta, gamma, lc, lr), dtype=DT)
    assert torch.allclose(rl.simpo_loss(pc * lc, pr * lr, beta, gamma, lc, lr), want, atol=1e-9, rtol=1e-9)
    assert torch.allclose(rl.orpo_loss(pc, pr, gamma), torch.tensor(R.orpo_loss_loop(pc, pr, gamma), dtype=DT),
                          atol=1e-9, rtol=1e-9)


def test_simpo_is_reference_free_length_normalised_and_matches_its_formula():
    c, r = _randn(5, seed=1) - 8, _randn(5, seed=2) - 8
    lc, lr = torch.tensor([3.0, 4, 5, 6, 7], dtype=DT), torch.tensor([2.0, 8, 5, 1, 3], dtype=DT)
    beta, gamma = 2.0, 0.5
    loss = rl.simpo_loss(c, r, beta, gamma, lc, lr)
    assert torch.allclose(loss, -torch.nn.functional.logsigmoid(beta * (c / lc - r / lr) - gamma))
    assert torch.allclose(loss, rl.simpo_loss(c / lc, r / lr, beta, gamma))  # sums + lengths = averages
    # no reference model: the signature has none, and shifting every log-prob by the same per-token amount changes nothing
    assert torch.allclose(rl.simpo_loss(c + 3 * lc, r + 3 * lr, beta, gamma, lc, lr), loss)
    # length normalisation: repeating a response's per-token quality over twice the tokens leaves the loss unchanged
    assert torch.allclose(rl.simpo_loss(2 * c, r, beta, gamma, 2 * lc, lr), loss)
    # the margin: with equal averages the loss is −log σ(−γ) > log 2
    assert torch.allclose(rl.simpo_loss(c, c, beta, gamma), torch.full_like(c, math.log1p(math.exp(gamma))))


def test_orpo_matches_its_formula_written_with_odds():
    c, r = -torch.rand(4, dtype=DT) * 2 - 0.05, -torch.rand(4, dtype=DT) * 2 - 0.05
    lam = 0.3
    pc, pr = c.exp(), r.exp()
    log_or = torch.log(pc / (1 - pc)) - torch.log(pr / (1 - pr))
    want = -c - lam * torch.log(torch.sigmoid(log_or))
    assert torch.allclose(rl.orpo_loss(c, r, lam), want, atol=1e-12)
    lengths = torch.tensor([2.0, 3, 4, 5], dtype=DT)
    assert torch.allclose(rl.orpo_loss(c * lengths, r * lengths, lam, lengths, lengths), want, atol=1e-12)
    assert torch.allclose(rl.orpo_loss(c, r, 0.0), -c)  # λ = 0: supervised fine-tuning on the chosen answers


# ============================== the KL-regularised optimum ==============================


@pytest.mark.parametrize("beta", [0.05, 0.3, 1.0, 20.0])
def test_kl_regularised_optimum_equals_a_numerical_maximisation_and_its_value_is_beta_log_z(beta):
    ref = torch.tensor([0.2, 0.3, 0.1, 0.35, 0.05, 0.0], dtype=DT)
    rewards = torch.tensor([1.0, -0.5, 2.0, 0.3, 1.9, 5.0], dtype=DT)
    star = rl.kl_regularised_optimum(ref, rewards, beta)
    assert (star - R.kl_regularised_optimum_search(ref, rewards, beta)).abs().max() < 1e-9
    assert star[-1] == 0  # no mass where π_ref has none
    value = rl.kl_regularised_value(ref, rewards, beta)
    assert abs(rl.kl_regularised_objective(star, ref, rewards, beta) - value) < 1e-9
    # every perturbation of π* (moving mass between answers in π_ref's support) lowers the objective
    g = torch.Generator().manual_seed(0)
    for _ in range(200):
        noise = torch.randn(6, generator=g, dtype=DT) * (ref > 0)
        for eps in (1e-3, 1e-1):
            other = torch.softmax(star.log() + eps * noise, -1)
            assert rl.kl_regularised_objective(other, ref, rewards, beta) <= value + 1e-12


def test_kl_regularised_value_limits_and_gradient():
    ref = _probs(5, seed=7)
    rewards = _randn(5, seed=8)
    assert abs(rl.kl_regularised_value(ref, rewards, 1e4) - (ref * rewards).sum()) < 1e-3  # β → ∞: E_ref[r]
    assert abs(rl.kl_regularised_value(ref, rewards, 1e-3) - rewards.max()) < 1e-2  # β → 0: max r
    r = rewards.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(rl.kl_regularised_value(ref, r, 0.5), r)
    assert torch.allclose(g, rl.kl_regularised_optimum(ref, rewards, 0.5))  # ∂(β log Z)/∂r = π*
    huge = torch.tensor([1e4, 0.0], dtype=DT)  # r/β = 1e6: the log-space form does not overflow
    assert torch.allclose(rl.kl_regularised_optimum(torch.tensor([0.5, 0.5], dtype=DT), huge, 0.01), torch.tensor([1.0, 0.0], dtype=DT))


@given(st.lists(st.floats(-3, 3), min_size=2, max_size=6), st.floats(0.05, 5.0))
def test_kl_regularised_optimum_properties(rewards, beta):
    rewards = torch.tensor(rewards, dtype=DT)
    ref = torch.full_like(rewards, 1 / len(rewards))
    star = rl.kl_regularised_optimum(ref, rewards, beta)
    assert abs(star.sum().item() - 1) < 1e-12
    # higher reward, more mass; unchanged by adding a constant to every reward
    order = torch.argsort(rewards)
    assert (star[order].diff() >= -1e-15).all()
    assert torch.allclose(star, rl.kl_regularised_optimum(ref, rewards + 7.0, beta))
    assert rl.kl_regularised_value(ref, rewards, beta) >= (ref * rewards).sum() - 1e-12


# ============================== DPO's population minimiser is π* ==============================


@pytest.mark.parametrize("beta", [0.1, 0.5, 2.0])
def test_dpo_population_minimiser_recovers_the_kl_regularised_optimum(beta):
    K = 5
    ref = _probs(K, seed=11)
    gold = torch.tensor([0.4, -1.0, 1.5, 0.2, 0.9], dtype=DT)
    theta = torch.zeros(K, dtype=DT, requires_grad=True)
    opt = torch.optim.LBFGS([theta], max_iter=1000, tolerance_grad=1e-14, tolerance_change=1e-17,
                            line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = rl.dpo_population_loss(torch.log_softmax(theta, -1), ref.log(), gold, beta)
        loss.backward()
        return loss

    opt.step(closure)

    def population_loss(free):  # logit 0 pinned at 0 (the loss ignores a common shift): a strictly convex problem
        return rl.dpo_population_loss(torch.log_softmax(torch.cat([free.new_zeros(1), free]), -1), ref.log(), gold, beta)

    free = (theta - theta[0]).detach()[1:]
    for _ in range(5):  # Newton's method from L-BFGS's point, to rounding
        grad = torch.autograd.functional.jacobian(population_loss, free)
        free = free - torch.linalg.solve(torch.autograd.functional.hessian(population_loss, free), grad)
    found = torch.softmax(torch.cat([free.new_zeros(1), free]), -1)
    assert (found - rl.kl_regularised_optimum(ref, gold, beta)).abs().max() < 1e-12


def test_dpo_population_loss_matches_its_double_loop_and_pair_losses():
    K = 4
    lp, ref_lp = torch.log_softmax(_randn(K, seed=1), -1), torch.log_softmax(_randn(K, seed=2), -1)
    gold = _randn(K, seed=3)
    got = rl.dpo_population_loss(lp, ref_lp, gold, 0.3)
    assert abs(got.item() - R.dpo_population_loss_loop(lp, ref_lp, gold, 0.3)) < 1e-12
    mu = _probs(K, seed=5)
    assert abs(rl.dpo_population_loss(lp, ref_lp, gold, 0.3, mu).item()
               - R.dpo_population_loss_loop(lp, ref_lp, gold, 0.3, mu)) < 1e-12



@pytest.mark.parametrize("K, seed", [(5, 0), (200, 1)])
def test_newtons_dpo_population_minimiser_is_pi_star_and_needs_full_support(K, seed):
    """rl.reference.dpo_population_minimise (Newton on the logits, no closed form) lands on π* to 1e-12;
    with pairs drawn from a μ that never shows the last answer, the loss cannot see that answer and the
    minimiser leaves it where π_ref put it, so it is not π*."""
    ref = torch.softmax(2 * _randn(K, seed=seed), -1)
    gold = _randn(K, seed=seed + 10)
    found, iterations, grad = R.dpo_population_minimise(ref, gold, 0.5)
    assert grad < 1e-14 and iterations < 20
    star = rl.kl_regularised_optimum(ref, gold, 0.5)
    assert (found - star).abs().max() < 1e-12
    mu = ref.clone()
    mu[-1] = 0.0
    mu /= mu.sum()
    partial, _, _ = R.dpo_population_minimise(ref, gold, 0.5, sampling_probs=mu)
    assert abs(partial[-1] / star[-1] - 1) > 0.05  # the unseen answer is off π* (measured 25 % and more)
    # on the answers μ covers, the ratios are still π*'s
    ratio = (partial[:-1] / star[:-1]).log()
    assert (ratio - ratio.mean()).abs().max() < 1e-10

# ============================== best-of-N ==============================


@pytest.mark.parametrize("n", [1, 2, 3, 5])
@pytest.mark.parametrize("keep", ["first", "last"])
def test_best_of_n_probs_equals_enumeration_of_all_draws_with_ties(n, keep):
    ref = torch.tensor([0.1, 0.25, 0.05, 0.3, 0.2, 0.1], dtype=DT)
    rewards = torch.tensor([1.0, 0.0, 1.0, -2.0, 0.0, 3.0], dtype=DT)  # two tied pairs
    want = torch.tensor(R.best_of_n_probs_enumeration(ref, rewards, n, keep), dtype=DT)
    got = rl.best_of_n_probs(ref, rewards, n)
    assert (got - want).abs().max() < 1e-14
    assert abs(got.sum().item() - 1) < 1e-14


def test_best_of_n_hand_worked_and_limits():
    ref = torch.tensor([0.5, 0.5], dtype=DT)
    assert torch.allclose(rl.best_of_n_probs(ref, torch.tensor([0.0, 1.0], dtype=DT), 2), torch.tensor([0.25, 0.75], dtype=DT))
    ref = _probs(6, seed=2)
    rewards = _randn(6, seed=3)
    assert torch.allclose(rl.best_of_n_probs(ref, rewards, 1), ref)  # N = 1 is π_ref
    big = rl.best_of_n_probs(ref, rewards, 2000)
    assert big[rewards.argmax()] > 1 - 1e-12  # N → ∞: the best answer
    assert torch.allclose(rl.best_of_n_probs(ref, torch.zeros(6, dtype=DT), 7), ref)  # all tied: π_ref


@given(st.lists(st.integers(-3, 3), min_size=2, max_size=7), st.integers(1, 64), st.integers(0, 10**6))
def test_best_of_n_kl_never_exceeds_the_bound(int_rewards, n, seed):
    rewards = torch.tensor(int_rewards, dtype=DT)  # small integers: ties are common
    ref = _probs(len(int_rewards), seed=seed)
    kl = rl.best_of_n_kl(ref, rewards, n).item()
    probs = rl.best_of_n_probs(ref, rewards, n)
    assert abs(kl - R.categorical_kl_loop(probs.tolist(), ref.tolist())) < 1e-10
    assert -1e-12 <= kl <= rl.best_of_n_kl_bound(n) + 1e-12


def test_best_of_n_kl_bound_equality_cases():
    assert rl.best_of_n_kl_bound(1) == 0.0 == rl.best_of_n_kl(_probs(4), _randn(4), 1).item()
    assert abs(rl.best_of_n_kl_bound(4) - (math.log(4) - 0.75)) < 1e-15
    # distinct rewards under a uniform π_ref over K answers: the gap closes as K grows (no atoms in the limit)
    gaps = []
    for K in (4, 64, 4096):
        ref = torch.full((K,), 1.0 / K, dtype=DT)
        gaps.append(rl.best_of_n_kl_bound(8) - rl.best_of_n_kl(ref, torch.arange(K, dtype=DT), 8).item())
    assert gaps[0] > gaps[1] > gaps[2] > 0 and gaps[2] < 1e-3
    # the best answer already holding most of π_ref's mass: KL ≤ log(1/π_ref(best)) = 0.105, far below the bound 1.835
    ref = torch.tensor([0.05, 0.05, 0.9], dtype=DT)
    kl = rl.best_of_n_kl(ref, torch.tensor([0.0, 1.0, 2.0], dtype=DT), 16).item()
    assert kl < -math.log(0.9) < rl.best_of_n_kl_bound(16) - 1.7


# ============================== bad inputs ==============================


def test_bad_inputs_raise_value_errors_naming_the_argument():
    z, z3 = torch.zeros(2), torch.zeros(3)
    p = torch.tensor([0.5, 0.5])
    cases = [
        (lambda: rl.bradley_terry_loss(z, z3), "rejected_rewards"),
        (lambda: rl.bradley_terry_loss(torch.tensor([float("nan")]), torch.zeros(1)), "chosen_rewards"),
        (lambda: rl.implicit_rewards(z, z, 0.0), "beta"),
        (lambda: rl.dpo_loss(z, z, z, z, beta=-1.0), "beta"),
        (lambda: rl.dpo_loss(z, z, z, z3, beta=0.1), "ref_rejected_log_probs"),
        (lambda: rl.dpo_loss(z, z, z, z, beta=0.1, label_smoothing=0.5), "label_smoothing"),
        (lambda: rl.dpo_gradient_weight(z, z, label_smoothing=-0.1), "label_smoothing"),
        (lambda: rl.ipo_loss(z, z, z, z, beta=0), "beta"),
        (lambda: rl.simpo_loss(z, z, beta=1.0, gamma=-0.1), "gamma"),
        (lambda: rl.simpo_loss(z, z, beta=1.0, gamma=0.1, chosen_lengths=torch.tensor([1.0, 0.0])), "chosen_lengths"),
        (lambda: rl.simpo_loss(z, z, 1.0, 0.1, None, torch.ones(3)), "rejected_lengths"),
        (lambda: rl.orpo_loss(torch.tensor([0.0]), torch.tensor([-1.0]), 0.1), "chosen_log_probs"),
        (lambda: rl.orpo_loss(torch.tensor([-1.0]), torch.tensor([-1.0]), -0.1), "lam"),
        (lambda: rl.kl_regularised_optimum(torch.tensor([0.5, 0.6]), z, 1.0), "ref_probs"),
        (lambda: rl.kl_regularised_optimum(p, z, 0.0), "beta"),
        (lambda: rl.kl_regularised_value(p, z3, 1.0), "rewards"),
        (lambda: rl.kl_regularised_objective(torch.tensor([0.2, 0.2]), p, z, 1.0), "probs"),
        (lambda: rl.best_of_n_probs(p, z, 0), "`n`"),
        (lambda: rl.best_of_n_probs(p, z, 2.5), "`n`"),
        (lambda: rl.best_of_n_kl(torch.tensor([-0.5, 1.5]), z, 2), "ref_probs"),
        (lambda: rl.best_of_n_kl_bound(True), "`n`"),
        (lambda: rl.dpo_population_loss(z, z, z, 0.1, sampling_probs=torch.tensor([0.3, 0.3])), "sampling_probs"),
    ]
    for call, name in cases:
        with pytest.raises(ValueError, match=name):
            call()
