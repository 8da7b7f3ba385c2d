"""GRPO-variant estimators and objectives: Magistral advantages, ScaleRL's prompt-level aggregation
and compute curve, pass@k curves, and MaxRL's truncated likelihood (checked by exact enumeration)."""

import itertools
import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import rlbook as rl
from rlbook import reference as ref

F64 = torch.float64


def t(values):
    return torch.tensor(values, dtype=F64)


@st.composite
def grouped_rewards(draw):
    group_size, num_prompts = draw(st.integers(1, 6)), draw(st.integers(1, 4))
    elems = st.one_of(st.sampled_from([0.0, 1.0, 0.1]), st.floats(-10, 10, allow_nan=False, width=64))
    return t(draw(st.lists(elems, min_size=group_size * num_prompts, max_size=group_size * num_prompts))), group_size


# ----------------------------------------------------------------------------- Magistral advantages


def test_magistral_hand_numbers():
    # groups [1, 0] and [1, 1]: centred [0.5, −0.5, 0, 0]; batch population std √(0.5/4) = 0.3536
    adv = rl.magistral_advantages(t([1, 0, 1, 1]), group_size=2)
    torch.testing.assert_close(adv, t([0.5, -0.5, 0.0, 0.0]) / math.sqrt(0.125))
    # unlike GRPO, a group whose rewards barely differ is not blown up to unit scale
    rewards = t([1.0, 0.0, 0.51, 0.49])
    magistral = rl.magistral_advantages(rewards, 2)
    grpo = rl.group_relative_advantages(rewards, 2, eps=0.0)
    torch.testing.assert_close(grpo[2:], t([1.0, -1.0]))
    assert abs(magistral[2].item()) < 0.05 < abs(magistral[0].item())


@given(grouped_rewards())
def test_magistral_matches_loop_and_has_zero_group_means_and_unit_population_std(data):
    rewards, g = data
    adv = rl.magistral_advantages(rewards, g)
    assert torch.isfinite(adv).all() and adv.dtype == F64
    torch.testing.assert_close(adv, t(ref.magistral_advantages_loop(rewards.tolist(), g)), rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(adv.reshape(-1, g).mean(dim=1), torch.zeros(len(rewards) // g, dtype=F64), atol=1e-9, rtol=0)
    if adv.abs().max() > 0:
        assert adv.std(correction=0).item() == pytest.approx(1.0, abs=1e-9)  # population (÷B), not ÷(B−1)


@pytest.mark.parametrize("value", [0.0, 1.0, -3.7, 0.1])
@pytest.mark.parametrize("g", [1, 3])
def test_magistral_constant_batch_gives_exact_zeros(value, g):
    adv = rl.magistral_advantages(torch.full((2 * g,), value, dtype=F64), g)
    assert torch.equal(adv, torch.zeros_like(adv))
    # a constant group inside a batch that has signal is exactly 0 too
    adv = rl.magistral_advantages(t([value] * 3 + [1.0, 0.0, 0.0]), 3)
    assert torch.equal(adv[:3], torch.zeros(3, dtype=F64))


@given(grouped_rewards(), st.floats(0.01, 100), st.floats(-50, 50))
def test_magistral_is_shift_and_scale_invariant(data, scale, shift):
    rewards, g = data
    moved = rl.magistral_advantages(rewards * scale + shift, g)
    torch.testing.assert_close(moved, rl.magistral_advantages(rewards, g), rtol=1e-6, atol=1e-6)


def test_magistral_errors():
    with pytest.raises(ValueError, match="group_size"):
        rl.magistral_advantages(t([1, 0, 1]), 2)
    with pytest.raises(ValueError, match="group_size"):
        rl.magistral_advantages(t([1, 0]), 0)
    with pytest.raises(ValueError, match="rewards"):
        rl.magistral_advantages(t([[1, 0]]), 2)
    with pytest.raises(ValueError, match="rewards"):
        rl.magistral_advantages(t([1.0, float("inf")]), 2)


# ----------------------------------------------------------------------------- prompt_mean (ScaleRL)


@st.composite
def grouped_loss(draw):
    g, prompts, width = draw(st.integers(1, 4)), draw(st.integers(1, 4)), draw(st.integers(1, 6))
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    loss = torch.randn(g * prompts, width, generator=gen, dtype=F64)
    mask = torch.rand(g * prompts, width, generator=gen) < draw(st.sampled_from([0.2, 0.6, 1.0]))
    mask[0, 0] = True
    return loss, mask, g


def test_prompt_mean_hand_numbers():
    loss = t([[1, 1, 1, 1], [4, 0, 0, 0], [2, 2, 0, 0], [6, 0, 0, 0]])
    mask = torch.tensor([[1, 1, 1, 1], [1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 0, 0]], dtype=torch.bool)
    # prompt 0: (1+1+1+1+4)/5 = 1.6; prompt 1: (2+2+6)/3 = 10/3; mean 2.4667
    assert rl.prompt_mean(loss, mask, 2).item() == pytest.approx((1.6 + 10 / 3) / 2, abs=1e-12)


@given(grouped_loss())
def test_prompt_mean_matches_loop_and_its_weights_are_the_gradient(data):
    loss, mask, g = data
    assert rl.prompt_mean(loss, mask, g).item() == pytest.approx(ref.prompt_mean_loop(loss, mask, g), abs=1e-12)
    x = loss.clone().requires_grad_()
    (grad,) = torch.autograd.grad(rl.prompt_mean(x, mask, g), x)
    torch.testing.assert_close(grad, rl.per_token_weights(mask, "prompt_mean", dtype=F64, group_size=g))


@given(grouped_loss())
def test_prompt_mean_limits(data):
    loss, mask, g = data
    # one prompt: the DAPO token mean; one completion per prompt: GRPO's sequence mean of token means
    torch.testing.assert_close(rl.prompt_mean(loss, mask, loss.shape[0]), rl.token_mean(loss, mask))
    torch.testing.assert_close(rl.prompt_mean(loss, mask, 1), rl.seq_mean_token_mean(loss, mask))


def test_prompt_mean_errors():
    loss, mask = torch.zeros(4, 3), torch.ones(4, 3, dtype=torch.bool)
    for bad in (3, 0, -2, 2.0, True, None):
        with pytest.raises(ValueError, match="group_size"):
            rl.prompt_mean(loss, mask, bad)
    with pytest.raises(ValueError, match="group_size"):
        rl.per_token_weights(mask, "prompt_mean")  # group_size is required for this mode
    with pytest.raises(ValueError, match="group_size"):
        rl.per_token_weights(mask, "prompt_mean", group_size=3)
    with pytest.raises(ValueError, match="completion_mask"):
        rl.prompt_mean(loss, torch.zeros(4, 3, dtype=torch.bool), 2)
    with pytest.raises(ValueError, match="loss"):
        rl.prompt_mean(torch.zeros(4), torch.ones(4, dtype=torch.bool), 2)
    with pytest.raises(ValueError, match="mode"):
        rl.per_token_weights(mask, "prompt_sum", group_size=2)


# ----------------------------------------------------------------------------- pass@k curve


def test_pass_at_k_curve_matches_brute_force_subset_enumeration():
    rng = np.random.default_rng(0)
    for n in range(1, 8):
        correct = rng.integers(0, n + 1, size=5)
        ks = list(range(1, n + 1))
        want = [np.mean([ref.pass_at_k_enumeration(n, int(c), k) for c in correct]) for k in ks]
        np.testing.assert_allclose(rl.pass_at_k_curve(n, correct, ks), want, rtol=0, atol=1e-12)
    # per-problem sample counts
    n, c = np.array([3, 5, 6]), np.array([1, 0, 4])
    want = [np.mean([ref.pass_at_k_enumeration(int(a), int(b), k) for a, b in zip(n, c)]) for k in (1, 2, 3)]
    np.testing.assert_allclose(rl.pass_at_k_curve(n, c, [1, 2, 3]), want, rtol=0, atol=1e-12)
    curve = rl.pass_at_k_curve(10, [0, 2, 7, 10], range(1, 11))
    assert curve.shape == (10,) and np.all(np.diff(curve) >= 0)


def test_pass_at_k_curve_errors():
    with pytest.raises(ValueError, match="ks"):
        rl.pass_at_k_curve(5, [1, 2], [])
    with pytest.raises(ValueError, match="ks"):
        rl.pass_at_k_curve(5, [1, 2], [1, 6])
    with pytest.raises(ValueError, match="ks"):
        rl.pass_at_k_curve([5, 3], [1, 2], [4])  # k must not exceed the smallest n
    with pytest.raises(ValueError, match="ks"):
        rl.pass_at_k_curve(5, [1, 2], [[1, 2]])
    with pytest.raises(ValueError, match="ks"):
        rl.pass_at_k_curve(5, [1, 2], [1.5])
    with pytest.raises(ValueError, match="num_samples"):
        rl.pass_at_k_curve([5, 5, 5], [1, 2], [1])
    with pytest.raises(ValueError, match="num_correct"):
        rl.pass_at_k_curve(5, [1, 6], [1])


# ----------------------------------------------------------------------------- the log p = −Σ fail@k / k expansion


@pytest.mark.parametrize("p", [0.05, 0.1, 0.3, 0.5, 0.77, 0.95, 1.0])
def test_terms_sum_to_log_p(p):
    terms = rl.log_likelihood_pass_at_k_terms(torch.tensor(p, dtype=F64), 1000)
    assert terms.shape == (1000,)
    assert terms.sum().item() == pytest.approx(math.log(p), abs=1e-10)
    assert rl.maxrl_truncated_objective(torch.tensor(p, dtype=F64), 1000).item() == pytest.approx(math.log(p), abs=1e-10)
    # every term is ≤ 0, so the truncations J^(T) decrease monotonically to log p
    partial = torch.cumsum(terms, 0)
    assert torch.all(partial >= math.log(p) - 1e-12) and torch.all(torch.diff(partial) <= 0)


def test_terms_hand_numbers_and_first_term_is_pass_at_1():
    torch.testing.assert_close(rl.log_likelihood_pass_at_k_terms(t(0.5), 3), t([-0.5, -0.125, -0.125 / 3]))
    for p in (0.1, 0.5, 0.9):
        assert rl.maxrl_truncated_objective(t(p), 1).item() == pytest.approx(-(1 - p), abs=1e-15)  # p − 1
    batch = rl.log_likelihood_pass_at_k_terms(t([[0.2, 0.7]]), 4)
    assert batch.shape == (1, 2, 4)
    assert torch.equal(rl.log_likelihood_pass_at_k_terms(t(1.0), 5), torch.zeros(5, dtype=F64))


@pytest.mark.parametrize("num_terms", [1, 2, 5, 40])
def test_truncated_objective_gradient_in_p(num_terms):
    p = torch.tensor([0.05, 0.3, 0.8, 1.0], dtype=F64, requires_grad=True)
    rl.maxrl_truncated_objective(p, num_terms).sum().backward()
    q = p.detach()
    # dJ^(T)/dp = Σ_{k≤T} (1−p)^{k−1}, computed as a sum (not the closed form the docstring gives)
    want = sum((1 - q) ** (k - 1) for k in range(1, num_terms + 1))
    torch.testing.assert_close(p.grad, want)
    torch.testing.assert_close(p.grad[:3], ((1 - (1 - q) ** num_terms) / q)[:3])


def test_expansion_errors():
    for bad in (0.0, -0.1, 1.5, float("nan")):
        with pytest.raises(ValueError, match="`p`"):
            rl.log_likelihood_pass_at_k_terms(bad, 3)
        with pytest.raises(ValueError, match="`p`"):
            rl.maxrl_truncated_objective(t([0.5, bad]), 3)
    for bad in (0, -1, 2.5, True, None):
        with pytest.raises(ValueError, match="num_terms"):
            rl.log_likelihood_pass_at_k_terms(0.5, bad)
        with pytest.raises(ValueError, match="num_terms"):
            rl.maxrl_truncated_objective(0.5, bad)


# ----------------------------------------------------------------------------- MaxRL by exact enumeration


def _dJ_dtheta(theta: float, num_terms: int) -> float:
    """dJ^(T)/dθ for p = σ(θ) by autograd through the library's objective; J^(0) = 0."""
    if num_terms == 0:
        return 0.0
    th = torch.tensor(theta, dtype=F64, requires_grad=True)
    (grad,) = torch.autograd.grad(rl.maxrl_truncated_objective(torch.sigmoid(th), num_terms), th)
    return grad.item()


def _sigmoid_policy_expectations(theta: float, n: int):
    """Exact E[ĝ] of MaxRL's (1/K) Σ r_i ∇log π(y_i) and of (1/N) Σ Â_i ∇log π(y_i) with the library's
    maxrl_advantages, over all 2^N outcome patterns of N Bernoulli(σ(θ)) rollouts."""
    th = torch.tensor(theta, dtype=F64, requires_grad=True)
    log_success, log_failure = torch.nn.functional.logsigmoid(th), torch.nn.functional.logsigmoid(-th)
    score = {1: torch.autograd.grad(log_success, th, retain_graph=True)[0].item(),
             0: torch.autograd.grad(log_failure, th)[0].item()}  # ∇_θ log π(y) for a success / a failure
    p = torch.sigmoid(th).item()
    success_only = centred = 0.0
    for outcome in itertools.product([0, 1], repeat=n):
        prob = math.prod(p if o else 1 - p for o in outcome)
        k = sum(outcome)
        if k:
            success_only += prob * sum(o * score[o] for o in outcome) / k
        adv = rl.maxrl_advantages(t(list(outcome)), n).tolist()
        centred += prob * sum(a * score[o] for a, o in zip(adv, outcome)) / n
    return success_only, centred


@pytest.mark.parametrize("n", [1, 2, 3, 5, 7])
@pytest.mark.parametrize("theta", [-2.0, 0.0, 1.3])
def test_maxrl_estimator_is_unbiased_for_the_objective_truncated_at_n(n, theta):
    success_only, centred = _sigmoid_policy_expectations(theta, n)
    grads = {T: _dJ_dtheta(theta, T) for T in (n - 1, n, n + 1)}
    # (1/K) Σ r_i ∇log π(y_i) (0 when K = 0) is exactly unbiased for ∇J^(N), T = N = the rollouts
    assert success_only == pytest.approx(grads[n], abs=1e-13)
    assert abs(success_only - grads[n + 1]) > 1e-9  # ...and not for T = N + 1 (10⁴× the tolerance)
    if n > 1:
        assert abs(success_only - grads[n - 1]) > 1e-9  # ...nor for T = N − 1
    # the centred, 1/N-averaged form of rl.maxrl_advantages differs only on all-fail groups and is
    # exactly unbiased for ∇J^(N−1): its control variate removes the k = N term in expectation
    assert centred == pytest.approx(grads[n - 1], abs=1e-13)
    assert abs(centred - grads[n]) > 1e-9


def test_maxrl_estimator_is_unbiased_for_a_softmax_policy_by_enumeration():
    # three answers, answers 0 and 1 correct; θ ∈ R³ logits; enumerate all 3^N outcome patterns
    theta = torch.tensor([-1.0, 0.3, 0.8], dtype=F64)
    correct = [1.0, 1.0, 0.0]
    log_pi = torch.log_softmax(theta, -1)
    scores = [torch.autograd.functional.jacobian(lambda z, a=a: torch.log_softmax(z, -1)[a], theta) for a in range(3)]
    def grad_j(num_terms):
        if num_terms == 0:
            return torch.zeros(3, dtype=F64)
        z = theta.clone().requires_grad_()
        p = (torch.softmax(z, -1) * t(correct)).sum()
        return torch.autograd.grad(rl.maxrl_truncated_objective(p, num_terms), z)[0]

    for n in (1, 2, 4):
        success_only, centred = torch.zeros(3, dtype=F64), torch.zeros(3, dtype=F64)
        for outcome in itertools.product(range(3), repeat=n):
            prob = math.exp(sum(log_pi[a].item() for a in outcome))
            r = [correct[a] for a in outcome]
            if sum(r):
                success_only += prob * sum(ri * scores[a] for ri, a in zip(r, outcome)) / sum(r)
            adv = rl.maxrl_advantages(t(r), n).tolist()
            centred += prob * sum(ai * scores[a] for ai, a in zip(adv, outcome)) / n
        torch.testing.assert_close(success_only, grad_j(n), rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(centred, grad_j(n - 1), rtol=1e-10, atol=1e-12)


# ----------------------------------------------------------------------------- ScaleRL's compute curve


def test_sigmoid_compute_curve_identities():
    r0, a, c_mid, b = 0.1, 0.7, 300.0, 1.7
    c = np.geomspace(1, 1e7, 50)
    r = rl.sigmoid_compute_curve(c, r0, a, c_mid, b)
    assert np.all(np.diff(r) > 0) and r.shape == (50,)
    assert float(rl.sigmoid_compute_curve(c_mid, r0, a, c_mid, b)) == pytest.approx((r0 + a) / 2, abs=1e-15)
    assert float(rl.sigmoid_compute_curve(0.0, r0, a, c_mid, b)) == r0
    assert float(rl.sigmoid_compute_curve(1e30, r0, a, c_mid, b)) == pytest.approx(a, abs=1e-15)
    # the written-out formula, at a few points
    for ci in (3.0, 300.0, 4e4):
        want = r0 + (a - r0) / (1 + (c_mid / ci) ** b)
        assert float(rl.sigmoid_compute_curve(ci, r0, a, c_mid, b)) == pytest.approx(want, rel=1e-13)


def _synthetic(noise=0.0, seed=0, num=30, low=10.0):
    truth = dict(r0=0.12, asymptote=0.63, c_mid=2500.0, exponent=1.3)
    c = np.geomspace(low, 1e6, num)
    r = rl.sigmoid_compute_curve(c, **truth) + noise * np.random.default_rng(seed).standard_normal(num)
    return c, r, truth


def test_fit_recovers_noiseless_parameters():
    c, r, truth = _synthetic()
    fit = rl.fit_compute_curve(c, r, r0=truth["r0"])
    for key in ("asymptote", "c_mid", "exponent"):
        assert fit[key] == pytest.approx(truth[key], rel=1e-3), key
    assert fit["r0"] == truth["r0"] and fit["rmse"] < 1e-8
    # r0=None takes the reward at the smallest compute (an early point: C ≪ C_mid)
    c, r, truth = _synthetic(low=0.01)
    fit = rl.fit_compute_curve(c[::-1], r[::-1])  # order does not matter
    assert fit["r0"] == pytest.approx(r[0]) and abs(fit["r0"] - truth["r0"]) < 1e-4
    for key in ("asymptote", "c_mid", "exponent"):
        assert fit[key] == pytest.approx(truth[key], rel=1e-2), key


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fit_recovers_parameters_from_lightly_noisy_data(seed):
    c, r, truth = _synthetic(noise=0.005, seed=seed, num=40)
    fit = rl.fit_compute_curve(c, r, r0=truth["r0"])
    for key in ("asymptote", "c_mid", "exponent"):
        assert fit[key] == pytest.approx(truth[key], rel=0.05), key
    assert 0.002 < fit["rmse"] < 0.008  # about the noise level


def test_fit_of_a_curve_still_rising_runs_to_the_default_c_mid_bound():
    # r = 0.1 + 1e-4·√C on [10, 1e4] has no midpoint in sight: the fit pushes C_mid to the default
    # upper bound, max C · 1000 = 1e7, and not beyond; an explicit wider bound lets it go further
    c = np.geomspace(10, 1e4, 8)
    r = 0.1 + 1e-4 * np.sqrt(c)
    fit = rl.fit_compute_curve(c, r, r0=0.1)
    assert 0.99e7 <= fit["c_mid"] <= 1e7 * (1 + 1e-9)
    wider = rl.fit_compute_curve(c, r, r0=0.1, c_mid_bounds=(0.01, 1e9))
    assert wider["c_mid"] > 1.5e7


def test_compute_curve_errors():
    c, r, _ = _synthetic(num=6)
    with pytest.raises(ValueError, match="compute"):
        rl.fit_compute_curve(c[:3], r[:3])
    with pytest.raises(ValueError, match="compute"):
        rl.fit_compute_curve(np.r_[0.0, c[1:]], r)
    with pytest.raises(ValueError, match="compute"):
        rl.fit_compute_curve(np.r_[-1.0, c[1:]], r)
    with pytest.raises(ValueError, match="reward"):
        rl.fit_compute_curve(c, r[:-1])
    with pytest.raises(ValueError, match="reward"):
        rl.fit_compute_curve(c, np.r_[r[:-1], np.nan])
    with pytest.raises(ValueError, match="asymptote_bounds"):
        rl.fit_compute_curve(c, r, asymptote_bounds=(1.0, 0.0))
    with pytest.raises(ValueError, match="exponent_bounds"):
        rl.fit_compute_curve(c, r, exponent_bounds=(0.0, 5.0))
    with pytest.raises(ValueError, match="c_mid_bounds"):
        rl.fit_compute_curve(c, r, c_mid_bounds=(-1.0, 5.0))
    with pytest.raises(ValueError, match="compute"):
        rl.sigmoid_compute_curve([-1.0, 2.0], 0.1, 0.5, 10.0, 1.0)
    with pytest.raises(ValueError, match="c_mid"):
        rl.sigmoid_compute_curve([1.0], 0.1, 0.5, 0.0, 1.0)
    with pytest.raises(ValueError, match="exponent"):
        rl.sigmoid_compute_curve([1.0], 0.1, 0.5, 10.0, -1.0)
    with pytest.raises(ValueError, match="r0"):
        rl.sigmoid_compute_curve([1.0], float("nan"), 0.5, 10.0, 1.0)


def test_fit_without_scipy_raises_a_clear_import_error(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "scipy.optimize", None)
    c, r, _ = _synthetic(num=6)
    with pytest.raises(ImportError, match="SciPy"):
        rl.fit_compute_curve(c, r)
