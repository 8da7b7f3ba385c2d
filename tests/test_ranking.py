"""Rankings of K answers: the Plackett–Luce log-likelihood and the pairs a ranking implies.

The log-likelihood is checked against Bradley–Terry at K = 2, against a normalisation proved by
listing all K! rankings, against a slow product-of-choices oracle, its gradient against central
finite differences and against the docstring's formula, and its invariance to a shift of every
reward; then the error cases, each naming the argument at fault.
"""

import itertools
import math

import pytest
import torch

import rlbook as rl

DT = torch.float64


def _randn(*shape, seed=0, scale=1.0):
    return scale * torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=DT)


def _oracle(rewards, ranking):
    """log Π_i exp r_σ(i) / Σ_{j ≥ i} exp r_σ(j), one row, with Python floats."""
    r = [float(rewards[k]) for k in ranking]
    return sum(r[i] - math.log(sum(math.exp(v) for v in r[i:])) for i in range(len(r)))


def test_k2_is_bradley_terry():
    r = _randn(50, 2, seed=1, scale=3.0)
    for order in ([0, 1], [1, 0]):
        ranking = torch.tensor(order).expand(50, 2)
        ll = rl.plackett_luce_log_likelihood(r, ranking)
        bt = -rl.bradley_terry_loss(r[:, order[0]], r[:, order[1]])
        torch.testing.assert_close(ll, bt, rtol=0, atol=1e-12)


@pytest.mark.parametrize("K", [1, 2, 3, 4, 5])
def test_probabilities_of_all_rankings_sum_to_one(K):
    r = _randn(K, seed=K, scale=2.0)
    rankings = torch.tensor(list(itertools.permutations(range(K))))
    ll = rl.plackett_luce_log_likelihood(r.expand(len(rankings), K), rankings)
    assert len(rankings) == math.factorial(K)
    assert abs(ll.exp().sum().item() - 1.0) < 1e-12
    assert (ll <= 1e-15).all()


def test_matches_the_product_of_choices_oracle_and_batches():
    r = _randn(3, 4, 6, seed=2, scale=2.0)
    ranking = torch.stack([torch.randperm(6, generator=torch.Generator().manual_seed(s)) for s in range(12)]).view(3, 4, 6)
    ll = rl.plackett_luce_log_likelihood(r, ranking)
    assert ll.shape == (3, 4)
    for a in range(3):
        for b in range(4):
            assert abs(ll[a, b].item() - _oracle(r[a, b], ranking[a, b].tolist())) < 1e-12


def test_gradient_matches_finite_differences_and_the_formula():
    K = 5
    r = _randn(K, seed=3, scale=1.5).requires_grad_(True)
    ranking = torch.tensor([3, 0, 4, 1, 2])
    rl.plackett_luce_log_likelihood(r, ranking).backward()
    h = 1e-6
    for k in range(K):
        e = torch.zeros(K, dtype=DT)
        e[k] = h
        up = rl.plackett_luce_log_likelihood(r.detach() + e, ranking).item()
        down = rl.plackett_luce_log_likelihood(r.detach() - e, ranking).item()
        assert abs((up - down) / (2 * h) - r.grad[k].item()) < 1e-8
    # the docstring: ∂/∂r_σ(i) = 1 − Σ_{j ≤ i} softmax over {σ(j), …, σ(K)} of r, at σ(i)
    ordered = r.detach()[ranking]
    formula = torch.zeros(K, dtype=DT)
    for i in range(K):
        formula[ranking[i]] = 1 - sum(torch.softmax(ordered[j:], 0)[i - j] for j in range(i + 1))
    torch.testing.assert_close(r.grad, formula, rtol=0, atol=1e-12)


def test_invariant_to_a_constant_added_to_every_reward():
    r = _randn(8, 4, seed=4, scale=2.0)
    ranking = torch.stack([torch.randperm(4, generator=torch.Generator().manual_seed(s)) for s in range(8)])
    base = rl.plackett_luce_log_likelihood(r, ranking)
    for c in (-7.0, 0.5, 100.0):
        torch.testing.assert_close(rl.plackett_luce_log_likelihood(r + c, ranking), base, rtol=0, atol=1e-10)
    # a constant per row too (the per-prompt constant of Bradley–Terry)
    torch.testing.assert_close(rl.plackett_luce_log_likelihood(r + _randn(8, 1, seed=5, scale=10.0), ranking), base,
                               rtol=0, atol=1e-10)
    # but not to a scale: the reward's scale is a temperature
    assert not torch.allclose(rl.plackett_luce_log_likelihood(2 * r, ranking), base)


def test_gumbel_sort_samples_rankings_with_these_probabilities():
    r = torch.tensor([1.0, 0.0, -0.5], dtype=DT)
    n = 200_000
    gen = torch.Generator().manual_seed(6)
    gumbel = -torch.log(-torch.log(torch.rand(n, 3, generator=gen, dtype=DT)))
    samples = torch.argsort(r + gumbel, dim=-1, descending=True)
    for perm in itertools.permutations(range(3)):
        p = rl.plackett_luce_log_likelihood(r, torch.tensor(perm)).exp().item()
        freq = (samples == torch.tensor(perm)).all(-1).double().mean().item()
        assert abs(freq - p) < 4.5 * math.sqrt(p * (1 - p) / n)


def test_extreme_rewards_stay_finite():
    r = torch.tensor([500.0, -500.0, 0.0], dtype=DT)
    ll = rl.plackett_luce_log_likelihood(r, torch.tensor([0, 2, 1]))
    assert torch.isfinite(ll) and abs(ll.item()) < 1e-12
    assert rl.plackett_luce_log_likelihood(r, torch.tensor([1, 2, 0])).item() == pytest.approx(-1500.0, abs=1e-9)


def test_ranking_pairs():
    assert rl.ranking_pairs(torch.tensor([2, 0, 1])).tolist() == [[2, 0], [2, 1], [0, 1]]
    for K in range(1, 7):
        pairs = rl.ranking_pairs(torch.randperm(K, generator=torch.Generator().manual_seed(K)))
        assert pairs.shape == (K * (K - 1) // 2, 2)
        assert len({tuple(p) for p in pairs.tolist()}) == K * (K - 1) // 2


@pytest.mark.parametrize("rewards, ranking, message", [
    ([[1.0, float("nan")]], [[0, 1]], "`rewards`"),
    (torch.tensor(1.0), torch.tensor(0), "`rewards`"),
    (torch.zeros(0), torch.zeros(0, dtype=torch.long), "`rewards`"),
    ([1.0, 2.0, 3.0], [0, 1], "`ranking` must have the same shape"),
    ([1.0, 2.0, 3.0], [0, 1, 1], "permutation"),
    ([1.0, 2.0, 3.0], [1, 2, 3], "permutation"),
    ([1.0, 2.0, 3.0], [0.0, 1.0, 2.0], "integer"),
    ([1.0, 2.0], [True, False], "integer"),
    ([1.0, 2.0], "ab", "`ranking`"),
])
def test_errors_name_the_argument(rewards, ranking, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        rl.plackett_luce_log_likelihood(rewards, ranking)


def test_ranking_pairs_errors():
    with pytest.raises(ValueError, match="shape \\(K,\\)"):
        rl.ranking_pairs(torch.tensor([[0, 1], [1, 0]]))
    with pytest.raises(ValueError, match="permutation"):
        rl.ranking_pairs([0, 0])
