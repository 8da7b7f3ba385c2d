"""The GAE-λ explorer: exact moments of the λ-return against closed forms and the library's rl.gae."""

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pytest
import torch

import rlbook as rl
from rlbook.widgets.gae_explorer import (chapter4_problem, gae_explorer, gae_moments, gae_readout, gae_tradeoff,
                                         plot_gae_tradeoff)


def test_exact_critic_is_unbiased_for_every_lambda():
    problem = chapter4_problem(0.95, 0.0)
    for lam in (0.0, 0.3, 0.9, 1.0):
        mean, _ = gae_moments(problem, lam)
        torch.testing.assert_close(mean, problem.q_true, atol=1e-10, rtol=0)


def test_advantage_at_lambda_one_with_the_exact_critic_is_q_minus_v():
    """Â^λ_0 = R̂^λ_0 − V(s_0): its mean is Q^π − V^π, both from TabularMDP's own Bellman solves."""
    problem = chapter4_problem(0.95, 0.0)
    mean, _ = gae_moments(problem, 1.0)
    mdp, probs = problem.mdp, problem.probs
    live = ~mdp.terminal
    expected = mdp.action_values(probs) - mdp.state_values(probs)[:, None]
    torch.testing.assert_close((mean - problem.critic[:, None])[live], expected[live], atol=1e-10, rtol=0)
    # and the policy-weighted advantage is 0 in every state
    torch.testing.assert_close((probs * (mean - problem.critic[:, None])).sum(-1), torch.zeros(7, dtype=torch.float64),
                               atol=1e-10, rtol=0)


def test_bias_at_lambda_zero_grows_with_the_critic_error_and_vanishes_at_lambda_one():
    sigmas = [0.0, 0.5, 1.0, 2.0, 4.0]
    b0 = [gae_tradeoff(0.95, s, 3)["bias2"][0] for s in sigmas]
    b1 = [gae_tradeoff(0.95, s, 3)["bias2"][-1] for s in sigmas]
    assert b0[0] < 1e-12 and np.all(np.diff(b0) > 0)
    assert max(b1) < 1e-12


def test_lambda_one_is_unbiased_whatever_the_critic():
    problem = chapter4_problem(0.95, 3.0)
    mean, var = gae_moments(problem, 1.0)
    torch.testing.assert_close(mean, problem.q_true, atol=1e-10, rtol=0)
    # and its variance does not depend on the critic (the critic's terms telescope away)
    torch.testing.assert_close(var, gae_moments(chapter4_problem(0.95, 0.0), 1.0)[1], atol=1e-9, rtol=0)


def test_lambda_zero_is_the_td_target_in_closed_form():
    """λ = 0: R̂ = r + γ V(s') (0 after termination): mean r + γ P V, variance γ² Var_{s'}[V(s')] + the
    termination's share."""
    problem = chapter4_problem(0.9, 2.0)
    mdp, V = problem.mdp, problem.critic.clone()
    V[mdp.terminal] = 0.0
    mean, var = gae_moments(problem, 0.0)
    live = ~mdp.terminal
    next_v = mdp.transitions @ V  # (S, A): E[V(s')], V = 0 at the terminal state
    second = mdp.transitions @ V ** 2
    torch.testing.assert_close(mean[live], (mdp.rewards + 0.9 * next_v)[live], atol=1e-10, rtol=0)
    torch.testing.assert_close(var[live], (0.81 * (second - next_v ** 2))[live], atol=1e-10, rtol=0)


def test_gamma_zero_makes_everything_exact():
    c = gae_tradeoff(0.0, 2.0, num_points=5)
    assert np.all(np.abs(c["bias2"]) < 1e-12) and np.all(np.abs(c["variance"]) < 1e-12)
    text, warnings = gae_readout(0.5, 0.0, 2.0)
    assert len(warnings) == 1 and warnings[0].startswith("γ = 0")


def test_monte_carlo_with_the_librarys_gae_agrees():
    """Long rollouts (survival 0.97^300 ≈ 1e-4) scored by rl.gae: per-pair means and the averaged
    variance match the exact recursion."""
    gamma, lam, sigma = 0.95, 0.7, 2.0
    problem = chapter4_problem(gamma, sigma)
    mdp, critic = problem.mdp, problem.critic
    T, N = 300, 6000
    traj = mdp.sample_trajectories(problem.probs, N, horizon=T + 1, generator=11)
    states, actions = traj.states, traj.actions[:, :T]
    rewards, terminated = traj.rewards[:, :T], traj.terminated[:, :T]
    truncated = torch.zeros_like(terminated)
    truncated[:, -1] = True
    _, returns = rl.gae(rewards, critic[states[:, :T]], critic[states[:, 1:T + 1]], terminated, truncated, gamma, lam)
    mean, var = gae_moments(problem, lam)
    key = states[:, 0] * 3 + actions[:, 0]
    x = returns[:, 0]
    for k in torch.unique(key):
        sel = x[key == k]
        if len(sel) < 200:
            continue
        s, a = divmod(int(k), 3)
        se = float(var[s, a]) ** 0.5 / len(sel) ** 0.5
        assert abs(float(sel.mean()) - float(mean[s, a])) < 5 * se, (s, a)
        assert float(sel.var()) == pytest.approx(float(var[s, a]), rel=0.25), (s, a)


def test_tradeoff_shape_and_the_chapter_4_picture():
    c = gae_tradeoff(0.95, 2.0)
    assert set(c) == {"lambda", "bias2", "variance", "mse"} and all(v.shape == (51,) for v in c.values())
    np.testing.assert_allclose(c["mse"], c["bias2"] + c["variance"])
    assert np.all(np.diff(c["bias2"]) < 0) and c["bias2"][-1] < 1e-12  # bias falls to 0 at λ = 1
    assert c["variance"][-1] == c["variance"].max()
    assert 0.3 < c["lambda"][np.argmin(c["mse"])] < 0.9  # an interior optimum
    # bias grows with the critic's error at λ = 0, as σ²
    b = [gae_tradeoff(0.95, s, 3)["bias2"][0] for s in (1.0, 2.0)]
    assert b[1] == pytest.approx(4 * b[0], rel=1e-9)
    # with the exact critic the variance rises with λ, and λ = 0 is best
    exact = gae_tradeoff(0.95, 0.0)
    assert np.all(np.diff(exact["variance"]) > 0) and np.argmin(exact["mse"]) == 0


@pytest.mark.parametrize("call, match", [
    (lambda: chapter4_problem(1.0, 1.0), "gamma"),
    (lambda: chapter4_problem(0.9, -1.0), "critic_error"),
    (lambda: gae_moments(chapter4_problem(), 1.5), "gae_lambda"),
    (lambda: gae_tradeoff(0.9, 1.0, num_points=1), "num_points"),
    (lambda: gae_readout(float("nan")), "gae_lambda"),
    (lambda: plot_gae_tradeoff(0.5, "0.9"), "gamma"),
])
def test_bad_input_names_the_argument(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_readout_numbers():
    text, warnings = gae_readout(0.9, 0.95, 2.0)
    c = gae_tradeoff(0.95, 2.0)
    i = int(np.argmin(c["mse"]))
    assert f"{c['mse'][i]:.3f} at λ = {c['lambda'][i]:.2f}" in text
    assert f"{c['variance'][-1]:.3f}" in text and not warnings
    assert "σ = 0" in gae_readout(0.9, 0.95, 0.0)[1][0]


def test_plot_and_widget():
    import matplotlib.pyplot as plt

    ax = plot_gae_tradeoff(0.5)
    assert len(ax.lines) >= 4
    plt.close("all")
    pytest.importorskip("ipywidgets")
    box = gae_explorer()
    before = box.readout.value
    box.controls["gae_lambda"].value = 0.3
    assert box.readout.value != before and "⚠" not in box.error.value
    box.controls["gamma"].value = 0.0
    assert "⚠" in box.error.value and "γ = 0" in box.error.value
    plt.close("all")
