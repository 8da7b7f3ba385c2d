"""The advantage explorer's pure functions (the widget itself only wires controls to them)."""

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pytest
import torch

import rlbook as rl
from rlbook.widgets import advantage_explorer as ae


def test_advantage_table_uses_the_library():
    r = [1, 1, 0, 1, 0]
    np.testing.assert_allclose(ae.advantage_table(r, "grpo"), [0.8165, 0.8165, -1.2247, 0.8165, -1.2247], atol=1e-4)
    np.testing.assert_allclose(ae.advantage_table(r, "grpo", std="sample"), [0.7303, 0.7303, -1.0954, 0.7303, -1.0954], atol=1e-4)
    np.testing.assert_allclose(ae.advantage_table(r, "grpo_no_std"), [0.4, 0.4, -0.6, 0.4, -0.6])
    np.testing.assert_allclose(ae.advantage_table(r, "rloo"), np.array([0.4, 0.4, -0.6, 0.4, -0.6]) * 5 / 4)
    np.testing.assert_allclose(ae.advantage_table(r, "maxrl"), np.array([0.4, 0.4, -0.6, 0.4, -0.6]) / 0.6)
    for est in ae.ESTIMATORS:
        assert np.all(ae.advantage_table([1, 1, 1], est) == 0)


def test_per_token_push_is_advantage_times_weight():
    r, lengths = [1, 0, 1, 0], [2, 2, 6, 6]
    push = ae.per_token_weights_for_group(r, lengths, "grpo_no_std", "seq_mean_token_mean")
    assert push.shape == (4, 6)
    # Â = ±0.5; GRPO weight 1/(G·L_i): short completions are pushed 3× harder per token
    np.testing.assert_allclose(push[:, 0], [0.5 / 8, -0.5 / 8, 0.5 / 24, -0.5 / 24])
    assert np.all(push[:2, 2:] == 0)
    dapo = ae.per_token_weights_for_group(r, lengths, "grpo_no_std", "token_mean")
    np.testing.assert_allclose(dapo[:, 0], [0.5 / 16, -0.5 / 16, 0.5 / 16, -0.5 / 16])
    dr = ae.per_token_weights_for_group(r, lengths, "grpo_no_std", "fixed_length_mean", max_length=10)
    assert dr.shape == (4, 10)
    np.testing.assert_allclose(dr[:, 0], np.array([0.5, -0.5, 0.5, -0.5]) / 40)


def test_push_matches_autograd_of_the_surrogate():
    # on-policy (ρ = 1) the gradient of −aggregate(Â·log π) w.r.t. log π is −Â·w
    r, lengths = [1.0, 0.0, 0.0, 1.0, 0.0], [3, 1, 4, 2, 4]
    mask = torch.arange(4)[None] < torch.tensor(lengths)[:, None]
    adv = torch.tensor(ae.advantage_table(r, "grpo"))
    log_probs = torch.zeros(5, 4, dtype=torch.float64, requires_grad=True)
    loss = rl.seq_mean_token_mean(-adv[:, None] * log_probs, mask)
    (grad,) = torch.autograd.grad(loss, log_probs)
    np.testing.assert_allclose(-grad.numpy(), ae.per_token_weights_for_group(r, lengths, "grpo", "seq_mean_token_mean"))


def test_plot_returns_axes_and_annotates_vanishing_signal():
    import matplotlib.pyplot as plt

    ax = ae.plot_advantages([1, 0, 1], [3, 4, 5], "rloo", "token_mean")
    assert len(ax.patches) == 3
    assert "RLOO" in ax.get_title() and "DAPO" in ax.get_title() and "token_mean" not in ax.get_title()
    ax2 = ae.plot_advantages([1, 1, 1], [3, 4, 5])
    assert any("no learning signal" in t.get_text() for t in ax2.texts)
    plt.close("all")


def test_widget_builds():
    pytest.importorskip("ipywidgets")
    import matplotlib.pyplot as plt

    w = ae.advantage_explorer()
    w.controls["group_size"].value = 3  # triggers a redraw without error
    rows = [next(r for r in w.children if w.controls[f"r{i}"] in getattr(r, "children", ())) for i in range(4)]
    assert [r.layout.display for r in rows] == [None, None, None, "none"]  # only G reward rows shown
    assert all(r.layout.display is None for r in w.children[:2])  # the header rows stay
    before = w.readout.value
    w.controls["estimator"].value = "maxrl"
    assert w.readout.value != before and w.error.value == ""
    w.controls["group_size"].value = 1  # a group of one: explained, not a traceback
    assert "⚠ G = 1" in w.error.value
    w.controls["estimator"].value = "rloo"  # leave-one-out cannot take G = 1: the library's message
    assert "⚠" in w.error.value and "group_size" in w.error.value
    plt.close("all")


def test_readout_numbers():
    readout, warnings = ae.advantage_readout([1, 0], [1, 2], "grpo_no_std", "token_mean")
    # Â = ±0.5; token_mean weights 1/3 per token: push +0.1667 and -0.1667 (see the doctest above)
    assert "+0.500  -0.500" in readout and "+0.1667  -0.1667" in readout and warnings == []
    assert "total push on the group's tokens: -0.1667" in readout  # one positive token, two negative
    assert ae.advantage_readout([1, 1], [1, 2])[1][0].startswith("all rewards are equal")


def test_errors():
    with pytest.raises(ValueError, match="estimator"):
        ae.advantage_table([1, 0], "ppo")
    with pytest.raises(ValueError, match="lengths"):
        ae.per_token_weights_for_group([1, 0], [0, 3])
    with pytest.raises(ValueError, match="lengths"):
        ae.per_token_weights_for_group([1, 0], [2, 3, 4])
    with pytest.raises(ValueError, match="aggregation"):
        ae.per_token_weights_for_group([1, 0], [2, 3], aggregation="sum")
    with pytest.raises(ValueError, match="max_length"):
        ae.per_token_weights_for_group([1, 0], [2, 3], max_length=2)
