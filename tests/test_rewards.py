"""DAPO's soft overlong punishment: piecewise values, oracle, monotonicity, errors."""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import rlbook as rl
from rlbook import reference as ref


def test_piecewise_values():
    # L_max = 20, L_cache = 4: free up to 16, linear ramp to −1 at 20, −1 beyond
    lengths = torch.tensor([0, 10, 16, 17, 18, 19, 20, 21, 100])
    out = rl.overlong_penalty(lengths, max_length=20, cache_length=4)
    expected = torch.tensor([0, 0, 0, -0.25, -0.5, -0.75, -1.0, -1.0, -1.0])
    torch.testing.assert_close(out, expected)


@given(
    st.lists(st.floats(0, 300, allow_nan=False), min_size=1, max_size=20),
    st.integers(1, 200),
    st.floats(0.01, 1.0),
)
def test_matches_loop_and_is_bounded(lengths, max_length, frac):
    cache = max(1, int(frac * max_length))
    out = rl.overlong_penalty(torch.tensor(lengths, dtype=torch.float64), max_length, cache)
    torch.testing.assert_close(out, torch.tensor(ref.overlong_penalty_loop(lengths, max_length, cache), dtype=torch.float64))
    assert torch.all(out <= 0) and torch.all(out >= -1)


def test_monotone_non_increasing_and_continuous_at_soft_start():
    lengths = torch.arange(0, 60, dtype=torch.float64) / 2
    out = rl.overlong_penalty(lengths, max_length=20, cache_length=8)
    assert torch.all(out[1:] <= out[:-1])
    assert rl.overlong_penalty(torch.tensor([12.0001], dtype=torch.float64), 20, 8).item() == pytest.approx(0, abs=1e-4)


def test_accepts_lists_and_keeps_shape():
    out = rl.overlong_penalty([[5, 19], [25, 3]], max_length=20, cache_length=2)
    assert out.shape == (2, 2) and out.dtype == torch.get_default_dtype()
    assert out.tolist() == [[0.0, -0.5], [-1.0, 0.0]]


def test_errors_name_the_argument():
    with pytest.raises(ValueError, match="lengths"):
        rl.overlong_penalty([-1, 3], 20, 4)
    with pytest.raises(ValueError, match="max_length"):
        rl.overlong_penalty([1, 3], 0, 4)
    with pytest.raises(ValueError, match="cache_length"):
        rl.overlong_penalty([1, 3], 20, 0)
    with pytest.raises(ValueError, match="cache_length"):
        rl.overlong_penalty([1, 3], 20, 21)
