"""rlbook.policy_gradient: score functions vs autograd, the REINFORCE surrogate, baselines."""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import rlbook as rl
from rlbook import reference as ref

SEED_PROBS = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)


def _gen(seed):
    return torch.Generator().manual_seed(seed)


@given(seed=st.integers(0, 2**31 - 1), batch=st.lists(st.integers(1, 3), max_size=2).map(tuple),
       A=st.integers(1, 6), scale=st.sampled_from([0.1, 1.0, 5.0]))
def test_softmax_score_matches_autograd(seed, batch, A, scale):
    g = _gen(seed)
    logits = scale * torch.randn(*batch, A, generator=g, dtype=torch.float64)
    actions = torch.randint(A, batch, generator=g)
    out = rl.softmax_score(logits, actions)
    assert out.shape == logits.shape
    for z, a, s in zip(logits.reshape(-1, A), actions.reshape(-1), out.reshape(-1, A)):
        torch.testing.assert_close(s, ref.softmax_score_autograd(z, a))


def test_softmax_score_seed_table_and_zero_mean_by_enumeration():
    logits = SEED_PROBS.log()
    scores = rl.softmax_score(logits.expand(3, 3), torch.arange(3))  # row a: score of action a
    expected = torch.tensor([[0.5, -0.3, -0.2], [-0.5, 0.7, -0.2], [-0.5, -0.3, 0.8]], dtype=torch.float64)
    torch.testing.assert_close(scores, expected)
    weighted = SEED_PROBS[:, None] * scores
    torch.testing.assert_close(weighted[0], torch.tensor([0.25, -0.15, -0.10], dtype=torch.float64))
    torch.testing.assert_close(weighted.sum(0), torch.zeros(3, dtype=torch.float64), atol=1e-15, rtol=0)
    torch.testing.assert_close(ref.bandit_expected_score(SEED_PROBS), torch.zeros(3, dtype=torch.float64),
                               atol=1e-15, rtol=0)


@given(seed=st.integers(0, 2**31 - 1), B=st.integers(1, 4), D=st.integers(1, 4), shared=st.booleans())
def test_gaussian_score_matches_autograd(seed, B, D, shared):
    g = _gen(seed)
    mean = torch.randn(B, D, generator=g, dtype=torch.float64)
    log_std = 0.5 * torch.randn(D if shared else (B, D), generator=g, dtype=torch.float64)
    actions = mean + log_std.exp() * torch.randn(B, D, generator=g, dtype=torch.float64)
    d_mean, d_log_std = rl.gaussian_score(mean, log_std, actions)
    assert d_mean.shape == d_log_std.shape == (B, D)
    for i in range(B):
        ls = log_std if shared else log_std[i]
        gm, gs = ref.gaussian_score_autograd(mean[i], ls, actions[i])
        torch.testing.assert_close(d_mean[i], gm)
        torch.testing.assert_close(d_log_std[i], gs)


def test_gaussian_score_hand_numbers_and_zero_mean():
    # a = μ + 2σ with σ = e: ∂μ = 2/σ, ∂logσ = 4 − 1
    dm, ds = rl.gaussian_score(torch.tensor([1.0]), torch.tensor([1.0]), torch.tensor([1.0 + 2 * torch.e]))
    torch.testing.assert_close(dm, torch.tensor([2 / torch.e]))
    torch.testing.assert_close(ds, torch.tensor([3.0]))
    # E[score] = 0 under the policy: Gauss–Hermite quadrature is exact for these polynomials
    x, w = torch.tensor([-1.7320508075688772, 0.0, 1.7320508075688772], dtype=torch.float64), \
        torch.tensor([1 / 6, 2 / 3, 1 / 6], dtype=torch.float64)  # 3-point rule for N(0, 1)
    mu, log_std = torch.tensor([0.3], dtype=torch.float64), torch.tensor([-0.4], dtype=torch.float64)
    dm, ds = rl.gaussian_score(mu.expand(3, 1), log_std, (mu + log_std.exp() * x)[:, None])
    assert abs(float((w[:, None] * dm).sum())) < 1e-12 and abs(float((w[:, None] * ds).sum())) < 1e-12


def test_reinforce_loss_gradient_is_weighted_score_and_weights_detached():
    g = _gen(0)
    logits = torch.randn(4, 5, 3, generator=g, dtype=torch.float64, requires_grad=True)  # (B, T, A)
    actions = torch.randint(3, (4, 5), generator=g)
    weights = torch.randn(4, 5, generator=g, dtype=torch.float64, requires_grad=True)
    log_probs = torch.log_softmax(logits, -1).gather(-1, actions[..., None])[..., 0]
    loss = rl.reinforce_loss(log_probs, weights)
    assert loss.shape == (4, 5)
    torch.testing.assert_close(loss, -log_probs * weights)
    loss.sum().backward()
    expected = -weights.detach()[..., None] * rl.softmax_score(logits.detach(), actions)
    torch.testing.assert_close(logits.grad, expected)
    assert weights.grad is None
    # broadcast weights (one per sequence) equal the expanded ones
    w_seq = torch.randn(4, 1, generator=g, dtype=torch.float64)
    torch.testing.assert_close(rl.reinforce_loss(log_probs, w_seq), rl.reinforce_loss(log_probs, w_seq.expand(4, 5)))


def test_mean_baseline():
    r = torch.tensor([[1.0, 2.0], [3.0, 10.0]], dtype=torch.float64)
    assert float(rl.mean_baseline(r)) == 4.0
    mask = torch.tensor([[True, True], [True, False]])
    assert float(rl.mean_baseline(r, mask)) == 2.0
    assert rl.mean_baseline(r, mask).shape == ()


@given(seed=st.integers(0, 2**31 - 1), N=st.integers(1, 20), weighted=st.booleans())
def test_optimal_baseline_matches_loop_oracle(seed, N, weighted):
    g = _gen(seed)
    returns = torch.randn(N, generator=g, dtype=torch.float64)
    sq = torch.rand(N, generator=g, dtype=torch.float64) + 0.01
    w = torch.rand(N, generator=g, dtype=torch.float64) + 0.01 if weighted else None
    b = rl.optimal_baseline(returns, sq, weights=w)
    assert b.shape == ()
    assert float(b) == pytest.approx(ref.optimal_baseline_loop(returns, sq, w), rel=1e-12, abs=1e-12)
    # invariant to the scale of the squared norms; equal norms give the plain mean
    assert float(rl.optimal_baseline(returns, 7.0 * sq, weights=w)) == pytest.approx(float(b), rel=1e-10, abs=1e-12)
    assert float(rl.optimal_baseline(returns, torch.ones(N, dtype=torch.float64))) == pytest.approx(
        float(returns.mean()), rel=1e-12, abs=1e-12)


def test_optimal_baseline_all_zero_norms_falls_back_to_mean():
    returns = torch.tensor([1.0, 2.0, 6.0])
    assert float(rl.optimal_baseline(returns, torch.zeros(3))) == 3.0


@pytest.mark.parametrize("bandit", [
    rl.SoftmaxBandit([1.0, 0.0, 0.0], dtype=torch.float64),
    rl.SoftmaxBandit([1.0, 0.2, -0.5, 3.0], reward_std=0.7, dtype=torch.float64),
    rl.SoftmaxBandit([0.9, 0.1, 0.5], bernoulli=True, dtype=torch.float64),
])
def test_optimal_baseline_minimises_exact_variance_on_a_grid(bandit):
    K = bandit.num_arms
    logits = torch.linspace(-1.0, 1.5, K, dtype=torch.float64) if K != 3 else SEED_PROBS.log()
    pi = torch.softmax(logits, -1)
    sq = rl.score_sq_norms(rl.softmax_score(logits.expand(K, K), torch.arange(K)))  # (K,) ‖s_a‖²
    b_star = rl.optimal_baseline(bandit.reward_means, sq, weights=pi)  # exact, by enumeration of arms
    assert float(b_star) == pytest.approx(float(bandit.exact_optimal_baseline(logits)), rel=1e-12)
    grid = torch.linspace(-3.0, 4.0, 701, dtype=torch.float64)
    var_grid = bandit.estimator_variance(logits, grid)
    var_star = bandit.estimator_variance(logits, b_star)
    assert float(var_star) <= float(var_grid.min()) + 1e-12
    assert abs(float(grid[var_grid.argmin()]) - float(b_star)) <= 0.01 + 1e-12
    # strictly better than no baseline and than the plain mean return (unless they coincide)
    assert float(var_star) <= float(bandit.estimator_variance(logits, 0.0))
    assert float(var_star) <= float(bandit.estimator_variance(logits, bandit.expected_return(logits)))
    # the closed-form variance agrees with the enumeration oracle
    for b in (-1.0, 0.0, float(b_star), 2.5):
        assert float(bandit.estimator_variance(logits, b)) == pytest.approx(
            ref.bandit_estimator_variance_loop(logits, bandit.reward_means, bandit.reward_variances, b), rel=1e-10)


def test_score_sq_norms():
    s = torch.arange(12.0).reshape(2, 3, 2)
    torch.testing.assert_close(rl.score_sq_norms(s), (s**2).sum(-1))
    torch.testing.assert_close(rl.score_sq_norms(s, num_param_dims=2), (s**2).sum((-1, -2)))


def test_errors_name_the_argument():
    logits = torch.zeros(2, 3)
    with pytest.raises(ValueError, match="actions"):
        rl.softmax_score(logits, torch.tensor([0, 3]))
    with pytest.raises(ValueError, match="actions"):
        rl.softmax_score(logits, torch.tensor([0, -1]))
    with pytest.raises(ValueError, match="actions"):
        rl.softmax_score(logits, torch.tensor([0, 1, 2]))
    with pytest.raises(ValueError, match="actions"):
        rl.softmax_score(logits, torch.tensor([0.0, 1.0]))
    with pytest.raises(ValueError, match="logits"):
        rl.softmax_score(torch.tensor(1.0), torch.tensor(0))
    with pytest.raises(ValueError, match="logits"):
        rl.softmax_score(torch.zeros(2, 0), torch.tensor([0, 0]))
    with pytest.raises(ValueError, match="log_std"):
        rl.gaussian_score(torch.zeros(2, 3), torch.zeros(4), torch.zeros(2, 3))
    with pytest.raises(ValueError, match="actions"):
        rl.gaussian_score(torch.zeros(2, 3), torch.zeros(3), torch.zeros(5, 3))
    with pytest.raises(ValueError, match="mean"):
        rl.gaussian_score(torch.zeros(0, 3), torch.zeros(3), torch.zeros(0, 3))
    with pytest.raises(ValueError, match="weights"):
        rl.reinforce_loss(torch.zeros(2, 3), torch.zeros(2, 4))
    with pytest.raises(ValueError, match="weights"):
        rl.reinforce_loss(torch.zeros(2, 3), torch.zeros(5, 2, 3))  # would enlarge the loss
    with pytest.raises(ValueError, match="log_probs"):
        rl.reinforce_loss(torch.zeros(0), torch.zeros(0))
    with pytest.raises(ValueError, match="returns"):
        rl.mean_baseline(torch.zeros(0))
    with pytest.raises(ValueError, match="mask"):
        rl.mean_baseline(torch.zeros(3), torch.zeros(3, dtype=torch.bool))
    with pytest.raises(ValueError, match="mask"):
        rl.mean_baseline(torch.zeros(3), torch.ones(4, dtype=torch.bool))
    with pytest.raises(ValueError, match="returns"):
        rl.optimal_baseline(torch.zeros(0), torch.zeros(0))
    with pytest.raises(ValueError, match="score_sq_norms"):
        rl.optimal_baseline(torch.zeros(3), torch.zeros(4))
    with pytest.raises(ValueError, match="score_sq_norms"):
        rl.optimal_baseline(torch.zeros(3), torch.tensor([1.0, -1.0, 1.0]))
    with pytest.raises(ValueError, match="weights"):
        rl.optimal_baseline(torch.zeros(3), torch.ones(3), weights=torch.zeros(3))
    with pytest.raises(ValueError, match="weights"):
        rl.optimal_baseline(torch.zeros(3), torch.ones(3), weights=torch.ones(2))
    with pytest.raises(ValueError, match="num_param_dims"):
        rl.score_sq_norms(torch.zeros(3), num_param_dims=0)
    with pytest.raises(ValueError, match="scores"):
        rl.score_sq_norms(torch.zeros(3), num_param_dims=2)


def test_reinforce_loss_takes_lists_and_refuses_nan_log_probs():
    torch.testing.assert_close(rl.reinforce_loss([-0.5, -1.0], [2.0, -1.0]), torch.tensor([1.0, -1.0]))
    with pytest.raises(ValueError, match="log_probs"):
        rl.reinforce_loss(torch.tensor([-0.5, float("nan")]), torch.tensor([2.0, -1.0]))
