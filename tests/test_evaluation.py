"""pass@k: the unbiased estimator against brute-force enumeration of k-subsets."""

import math
from fractions import Fraction

import numpy as np
import pytest

import rlbook as rl
from rlbook import reference as ref


def test_matches_enumeration_on_a_grid():
    for n in range(1, 9):
        for c in range(n + 1):
            for k in range(1, n + 1):
                assert rl.pass_at_k(n, c, k) == pytest.approx(ref.pass_at_k_enumeration(n, c, k), abs=1e-12)


def test_hand_numbers_and_limits():
    assert rl.pass_at_k(5, 2, 2) == pytest.approx(0.7)  # 1 − C(3,2)/C(5,2) = 1 − 3/10
    assert rl.pass_at_k(10, 3, 1) == pytest.approx(0.3)  # k = 1: sampled accuracy c/n
    assert rl.pass_at_k(10, 0, 5) == 0.0
    assert rl.pass_at_k(10, 8, 3) == 1.0  # n − c = 2 < k: every 3-subset holds a correct one
    assert isinstance(rl.pass_at_k(4, 1, 2), float)


def test_large_n_is_stable_and_exact():
    n, c, k = 200, 7, 100
    exact = 1 - Fraction(math.comb(n - c, k), math.comb(n, k))
    assert rl.pass_at_k(n, c, k) == pytest.approx(float(exact), rel=1e-12)


def test_vectorised_and_broadcast():
    n = np.array([[10, 10, 10], [20, 20, 20]])
    c = np.array([0, 3, 10])
    out = rl.pass_at_k(n, c, 2)
    assert out.shape == (2, 3)
    for i in range(2):
        for j in range(3):
            assert out[i, j] == pytest.approx(rl.pass_at_k(int(n[i, j]), int(c[j]), 2))
    # averaging over problems: the book's "pass@k of a model"
    assert np.mean(rl.pass_at_k([4, 4], [1, 3], 1)) == pytest.approx(0.5)


def test_monotone_in_k_and_c():
    vals = rl.pass_at_k(12, 3, np.arange(1, 13))
    assert np.all(np.diff(vals) >= 0)
    vals = rl.pass_at_k(12, np.arange(13), 4)
    assert np.all(np.diff(vals) >= 0)


def test_biased_naive_estimator_differs():
    # 1 − (1 − c/n)^k (with replacement) underestimates; the unbiased one is exact for subsets
    assert rl.pass_at_k(4, 1, 4) == 1.0
    assert 1 - (1 - 1 / 4) ** 4 < 0.69


def test_errors_name_the_argument():
    with pytest.raises(ValueError, match="num_correct"):
        rl.pass_at_k(5, 6, 1)
    with pytest.raises(ValueError, match="num_correct"):
        rl.pass_at_k(5, -1, 1)
    with pytest.raises(ValueError, match="`k`"):
        rl.pass_at_k(5, 2, 6)
    with pytest.raises(ValueError, match="`k`"):
        rl.pass_at_k(5, 2, 0)
    with pytest.raises(ValueError, match="num_samples"):
        rl.pass_at_k(0, 0, 1)
    with pytest.raises(ValueError, match="num_samples"):
        rl.pass_at_k(5.5, 2, 1)
    with pytest.raises(ValueError, match="num_samples"):
        rl.pass_at_k([5, 5, 5], [1, 2], 1)
