"""REINFORCE pieces: weights, per-episode gradients (vs autograd), baselines (vs brute force)."""

import pytest
import torch

from rlbook.algos.reinforce import (
    CategoricalMLPPolicy,
    ReinforceConfig,
    baseline_values,
    episode_gradients,
    fit_value_function,
    gradient_variance,
    reinforce_weights,
    train_reinforce,
)
from rlbook.envs.cartpole import EpisodeBatcher
from rlbook.returns import discounted_returns, rewards_to_go


@pytest.fixture(scope="module")
def setup():
    torch.manual_seed(0)
    policy = CategoricalMLPPolicy(hidden_sizes=(8,))
    gen = torch.Generator().manual_seed(0)
    batch = EpisodeBatcher(6, seed=0).collect(lambda o: policy.act(o, gen))
    return policy, batch


def test_weights_are_masked_returns(setup):
    _, batch = setup
    w = reinforce_weights(batch, "rewards_to_go", 0.9)
    want = rewards_to_go(batch.rewards, 0.9, terminated=batch.terminated, truncated=batch.truncated) * batch.mask
    assert torch.equal(w, want)
    w_total = reinforce_weights(batch, "total", 1.0)
    assert torch.allclose(w_total[:, 0], batch.lengths.float())  # R(τ) = episode length on CartPole
    assert torch.equal(w_total, discounted_returns(batch.rewards, 1.0, batch.terminated, batch.truncated) * batch.mask)
    with pytest.raises(ValueError, match="return_kind"):
        reinforce_weights(batch, "bogus", 0.9)


def test_episode_gradients_match_autograd_loop(setup):
    policy, batch = setup
    w = torch.randn(batch.rewards.shape, generator=torch.Generator().manual_seed(1)) * batch.mask
    g = episode_gradients(policy, batch, w)
    params = list(policy.parameters())
    assert g.shape == (6, sum(p.numel() for p in params))
    for i in range(6):
        obj = (policy.log_prob(batch.obs[i], batch.actions[i]) * w[i] * batch.mask[i]).sum()
        want = torch.cat([x.reshape(-1) for x in torch.autograd.grad(obj, params)])
        assert torch.allclose(g[i], want, atol=1e-5)


def test_optimal_baseline_minimises_variance_among_constants(setup):
    policy, batch = setup
    w = reinforce_weights(batch, "rewards_to_go", 1.0)
    b_star = float(baseline_values("optimal", w, batch, policy=policy)[0, 0])
    u, v = episode_gradients(policy, batch), episode_gradients(policy, batch, w)

    def second_moment(b):  # Σ_i ‖v_i − b u_i‖², the quantity b* minimises
        return float(((v - b * u) ** 2).sum())

    grid = torch.linspace(b_star - 50, b_star + 50, 101)
    assert all(second_moment(b_star) <= second_moment(float(b)) + 1e-6 for b in grid)


def test_mean_and_value_baselines(setup):
    policy, batch = setup
    w = reinforce_weights(batch, "rewards_to_go", 1.0)
    b = baseline_values("mean", w, batch)
    assert torch.allclose(b, torch.full_like(w, float(w[batch.mask].mean())))
    v = fit_value_function(batch, gamma=1.0, epochs=5)
    bv = baseline_values("value", w, batch, value_fn=v)
    assert torch.equal(bv[~batch.mask], torch.zeros_like(bv[~batch.mask]))
    for kind, kwargs, name in [("optimal", {}, "policy"), ("value", {}, "value_fn"), ("bogus", {}, "kind")]:
        with pytest.raises(ValueError, match=name):
            baseline_values(kind, w, batch, **kwargs)


def test_gradient_variance_orders_estimators(setup):
    policy, batch = setup
    gen = torch.Generator().manual_seed(3)
    big = EpisodeBatcher(32, seed=5).collect(lambda o: policy.act(o, gen))
    var = {k: gradient_variance(policy, big, *k, gamma=1.0)["variance"]
           for k in [("total", "none"), ("rewards_to_go", "none"), ("rewards_to_go", "mean")]}
    assert var[("total", "none")] > var[("rewards_to_go", "none")] > var[("rewards_to_go", "mean")]
    one = EpisodeBatcher(1, seed=5).collect(lambda o: policy.act(o))
    with pytest.raises(ValueError, match="batch"):
        gradient_variance(policy, one, "total", "none")


def test_config_validation():
    for kwargs, name in [(dict(return_kind="x"), "return_kind"), (dict(baseline="x"), "baseline"),
                         (dict(gamma=-0.1), "gamma"), (dict(gamma=1.5), "gamma"), (dict(lr=0), "lr")]:
        with pytest.raises(ValueError, match=name):
            ReinforceConfig(**kwargs)


def test_short_training_run_improves_and_logs():
    cfg = ReinforceConfig(seed=0, total_env_steps=6000)
    h = train_reinforce(cfg, progress=False)
    assert h.env_steps >= 6000 and h.num_updates == len(h["loss"])
    for key in ("loss", "grad_norm", "mean_return", "baseline_mean", "value_loss", "env_steps"):
        assert key in h
    first, last = sum(h.episode_returns[:20]) / 20, h.final_rolling_return(20)
    assert last > 2 * first  # learning, not noise: ~20 → >40 within 6k steps


def test_gradient_variance_is_the_unbiased_sample_variance_of_the_episode_gradients(setup):
    # variance = Σ_i ‖g_i − ḡ‖² / (N − 1) and mean_sq_norm = ‖ḡ‖², with g_i the per-episode estimates
    # (checked against an autograd loop above) for the configured weights minus baseline
    policy, batch = setup
    w = reinforce_weights(batch, "rewards_to_go", 0.9)
    b = baseline_values("mean", w, batch)
    g = episode_gradients(policy, batch, (w - b) * batch.mask).double()
    g_bar = g.mean(0)
    out = gradient_variance(policy, batch, "rewards_to_go", "mean", gamma=0.9)
    assert out["variance"] == pytest.approx(float(((g - g_bar) ** 2).sum() / (g.shape[0] - 1)), rel=1e-5)
    assert out["mean_sq_norm"] == pytest.approx(float((g_bar ** 2).sum()), rel=1e-5)


def test_episode_gradients_carry_no_graph_and_leave_grad_fields_alone(setup):
    policy, batch = setup
    for p in policy.parameters():
        p.grad = None
    g = episode_gradients(policy, batch)
    assert not g.requires_grad and all(p.grad is None for p in policy.parameters())
