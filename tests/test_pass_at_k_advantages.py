"""rl.pass_at_k_advantages (Chen et al. 2025, arXiv:2508.10751): checked by exact enumeration of the
k-subsets of every binary reward vector of small groups, and of every outcome of a Bernoulli bandit."""

import itertools
import math

import pytest
import torch

import rlbook as rl

F64 = torch.float64


def t(values):
    return torch.tensor(values, dtype=F64)


def subset_enumeration(rewards, k, scale="std"):
    """Per-completion mean over the k-subsets containing it of (max − mean)/std over all k-subsets."""
    n = len(rewards)
    subsets = list(itertools.combinations(range(n), k))
    maxima = [max(rewards[i] for i in s) for s in subsets]
    mean = sum(maxima) / len(maxima)
    std = math.sqrt(sum((m - mean) ** 2 for m in maxima) / len(maxima))
    if scale == "std" and std == 0.0:
        return [0.0] * n
    norm = std if scale == "std" else 1.0
    return [sum((m - mean) / norm for s, m in zip(subsets, maxima) if i in s) / math.comb(n - 1, k - 1)
            for i in range(n)]


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 6])
@pytest.mark.parametrize("scale", ["std", "none"])
def test_closed_form_equals_subset_enumeration_for_every_reward_vector(n, scale):
    for k in range(1, n + 1):
        for outcome in itertools.product([0.0, 1.0], repeat=n):
            got = rl.pass_at_k_advantages(t(list(outcome)), n, k, scale=scale)
            torch.testing.assert_close(got, t(subset_enumeration(outcome, k, scale)), rtol=0, atol=1e-12)
            assert abs(got.sum().item()) < 1e-12  # each subset counted k times: the group sums to zero


@pytest.mark.parametrize("n", [2, 3, 5, 8])
def test_subset_mean_is_the_unbiased_pass_at_k_estimator(n):
    # the normalisation R̄ of the closed form is rl.pass_at_k(n, c, k), the mean of the subset maxima
    for c in range(n + 1):
        outcome = [1.0] * c + [0.0] * (n - c)
        for k in range(1, n + 1):
            subsets = list(itertools.combinations(range(n), k))
            mean = sum(max(outcome[i] for i in s) for s in subsets) / len(subsets)
            assert rl.pass_at_k(n, c, k) == pytest.approx(mean, abs=1e-12)


@pytest.mark.parametrize("n", [1, 2, 4, 6])
@pytest.mark.parametrize("p", [0.1, 0.5, 0.8])
def test_estimator_is_unbiased_and_gradient_factor_is_exact_on_bernoulli_bandit(n, p):
    # one logit θ, success probability p = sigmoid(θ): pass@k = 1 − (1−p)^k, d/dθ = k (1−p)^(k−1) p (1−p).
    # scores: ∂ log π(success)/∂θ = 1 − p, ∂ log π(failure)/∂θ = −p.
    for k in range(1, n + 1):
        expected_estimate = expected_grad = 0.0
        for outcome in itertools.product([0.0, 1.0], repeat=n):
            prob = math.prod(p if o else 1 - p for o in outcome)
            expected_estimate += prob * rl.pass_at_k(n, int(sum(outcome)), k)
            adv = rl.pass_at_k_advantages(t(list(outcome)), n, k, scale="none").tolist()
            scores = [(1 - p) if o else -p for o in outcome]
            expected_grad += prob * (k / n) * sum(a * s for a, s in zip(adv, scores))
        assert expected_estimate == pytest.approx(1 - (1 - p) ** k, abs=1e-12)
        true_grad = k * (1 - p) ** (k - 1) * p * (1 - p)
        assert expected_grad == pytest.approx((1 - k / n) * true_grad, abs=1e-12)


def test_k_one_is_grpo_with_population_std():
    for outcome in itertools.product([0.0, 1.0], repeat=5):
        torch.testing.assert_close(rl.pass_at_k_advantages(t(list(outcome)), 5, 1),
                                   rl.group_relative_advantages(t(list(outcome)), 5, eps=0.0), rtol=0, atol=1e-12)


def test_solved_at_k_groups_get_zeros_and_worked_example():
    # N − c < k: every k-subset holds a correct completion, R̄ = 1, no signal
    assert rl.pass_at_k_advantages(t([1, 1, 0, 0]), 4, 3).tolist() == [0.0] * 4
    torch.testing.assert_close(rl.pass_at_k_advantages(t([1, 0, 0, 0]), 4, 2), t([1, -1 / 3, -1 / 3, -1 / 3]))
    # several groups, group-contiguous
    two = rl.pass_at_k_advantages(t([1, 0, 0, 0, 0, 0, 0, 0]), 4, 2)
    torch.testing.assert_close(two, t([1, -1 / 3, -1 / 3, -1 / 3, 0, 0, 0, 0]))


def test_output_is_detached_and_keeps_dtype():
    r = t([1, 0, 1, 0]).requires_grad_()
    adv = rl.pass_at_k_advantages(r, 4, 2)
    assert not adv.requires_grad and adv.dtype == F64


@pytest.mark.parametrize("bad", [dict(k=0), dict(k=5), dict(k=1.0), dict(k=True), dict(scale="sample")])
def test_bad_arguments(bad):
    args = dict(rewards=t([1, 0, 1, 0]), group_size=4, k=2) | bad
    with pytest.raises(ValueError):
        rl.pass_at_k_advantages(**args)


def test_non_binary_rewards_and_bad_group_size():
    with pytest.raises(ValueError):
        rl.pass_at_k_advantages(t([1, 0.5, 0, 0]), 4, 2)
    with pytest.raises(ValueError):
        rl.pass_at_k_advantages(t([1, 0, 0]), 2, 1)
