"""The flat public API: every exported name is documented; plotting helpers return their axes."""

import inspect

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pytest

import rlbook as rl
from rlbook.history import History


def test_every_public_name_is_documented_and_unique():
    assert len(rl.__all__) == len(set(rl.__all__))
    undocumented = [n for n in rl.__all__ if (inspect.isfunction(getattr(rl, n)) or inspect.isclass(getattr(rl, n)))
                    and not (getattr(rl, n).__doc__ or "").strip()]
    assert undocumented == []


def test_lazy_submodules():
    assert rl.reference.__name__ == "rlbook.reference"
    with pytest.raises(AttributeError, match="no attribute"):
        rl.not_a_thing


def _history(returns):
    h = History()
    steps = np.cumsum(returns)
    for r, s in zip(returns, steps):
        h.add_episode(r, int(r), int(s))
    h.log(loss=1.0)
    h.log(loss=0.5)
    return h


def test_plot_helpers_return_axes_and_draw():
    h = _history([10.0, 20.0, 30.0])
    ax = rl.plot_learning_curves({"a": [h, h]}, window=2)
    assert ax.get_xlabel() == "env steps" and len(ax.lines) == 3  # 2 runs + the threshold line
    np.testing.assert_allclose(ax.lines[0].get_ydata(), [10.0, 15.0, 25.0])
    fig, ax2 = plt.subplots()
    assert rl.plot_metric(h, "loss", ax=ax2) is ax2
    assert rl.plot_bars({"x": 1.0, "y": 2.0}, log=True).get_yscale() == "log"
    ax3 = rl.plot_mc_error([1, 4, 16], [1.0, 0.5, 0.25])
    np.testing.assert_allclose(ax3.lines[1].get_ydata(), [1.0, 0.5, 0.25])  # the 1/√N guide
    plt.close("all")
