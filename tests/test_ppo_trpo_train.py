"""Learning checks for train_ppo and train_trpo on CartPole-v1 (small, seeded, deterministic)."""

import numpy as np
import pytest
import torch

from rlbook.algos.ppo import PPOConfig, train_ppo
from rlbook.algos.trpo import TRPOConfig, train_trpo

# A uniformly random CartPole policy averages ~22 per episode.
RANDOM_POLICY_RETURN = 22.0


pytestmark = pytest.mark.usefixtures("one_thread")


def test_ppo_tiny_config_runs_and_logs_every_metric():
    hist = train_ppo(PPOConfig(total_env_steps=256, num_envs=4, num_steps=32, num_epochs=2, minibatch_size=64),
                     progress=False)
    assert hist.num_updates == 2
    for key in ("loss", "policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction",
                "explained_variance", "grad_norm", "lr", "env_steps"):
        assert key in hist and np.isfinite(hist[key]).all(), key
    assert hist["lr"][0] == pytest.approx(1e-3) and hist["lr"][1] == pytest.approx(5e-4)  # linear anneal
    assert hist["env_steps"].tolist() == [128, 256]
    assert hist["entropy"][0] == pytest.approx(np.log(2), abs=0.01)  # policy head starts near uniform


def test_ppo_target_kl_stops_the_epochs_early():
    cfg = PPOConfig(total_env_steps=256, num_envs=4, num_steps=32, num_epochs=5, minibatch_size=64, target_kl=1e-9)
    hist = train_ppo(cfg, progress=False)
    assert hist["epochs"].tolist() == [1.0, 1.0]  # the first epoch already moves the policy by > 1e-9 nats
    cfg.target_kl = None
    assert train_ppo(cfg, progress=False)["epochs"].tolist() == [5.0, 5.0]


def test_ppo_is_deterministic_given_the_seed():
    cfg = PPOConfig(seed=3, total_env_steps=512, num_envs=4, num_steps=32, num_epochs=2, minibatch_size=64)
    a, b = train_ppo(cfg, progress=False), train_ppo(cfg, progress=False)
    assert a.episode_returns == b.episode_returns and a.metrics == b.metrics


def test_ppo_improves_on_the_random_policy():
    hist = train_ppo(PPOConfig(seed=0, total_env_steps=4096), progress=False)
    first, last = np.mean(hist.episode_returns[:20]), hist.final_rolling_return(20)
    assert first < 2 * RANDOM_POLICY_RETURN
    assert last >= 70.0  # measured 95.9 (seed 0), > 3× the random policy, after 4096 env steps


def test_trpo_tiny_config_runs_and_logs_every_metric():
    hist = train_trpo(TRPOConfig(total_env_steps=256, num_envs=4, num_steps=32, critic_epochs=1), progress=False)
    assert hist.num_updates == 2
    for key in ("surrogate_improvement", "expected_improvement", "kl", "step_accepted", "backtracks",
                "value_loss", "explained_variance", "entropy"):
        assert key in hist and np.isfinite(hist[key]).all(), key
    # An accepted step respects the trust region and improves the surrogate.
    accepted = hist["step_accepted"] == 1
    assert (hist["kl"][accepted] <= 0.02 + 1e-9).all()
    assert (hist["surrogate_improvement"][accepted] > 0).all()


def test_trpo_improves_on_the_random_policy():
    hist = train_trpo(TRPOConfig(seed=0, total_env_steps=6144, num_steps=64), progress=False)
    first, last = np.mean(hist.episode_returns[:20]), hist.final_rolling_return(20)
    assert first < 2 * RANDOM_POLICY_RETURN
    assert last >= 100.0  # measured ~200 (seed 0) after 6144 env steps


def test_invalid_configs_raise_naming_the_field():
    with pytest.raises(ValueError, match="num_envs"):
        train_ppo(PPOConfig(num_envs=0), progress=False)
    with pytest.raises(ValueError, match="gae_lambda"):
        train_ppo(PPOConfig(gae_lambda=1.5), progress=False)
    with pytest.raises(ValueError, match="max_kl"):
        train_trpo(TRPOConfig(max_kl=0.0), progress=False)
    with pytest.raises(ValueError, match="damping"):
        train_trpo(TRPOConfig(damping=-1.0), progress=False)


def test_ppo_stop_after_env_steps_cuts_the_same_curve():
    from rlbook.algos.ppo import PPOConfig, train_ppo

    base = dict(seed=0, total_env_steps=2048, num_envs=4, num_steps=32, num_epochs=2, minibatch_size=64)
    full = train_ppo(PPOConfig(**base, stop_after_env_steps=None), progress=False)
    cut = train_ppo(PPOConfig(**base, stop_after_env_steps=512), progress=False)
    assert cut["env_steps"][-1] == 512 and full["env_steps"][-1] == 2048
    # same lr schedule (horizon = total_env_steps), same updates up to the cut
    np.testing.assert_allclose(cut["lr"], full["lr"][:4])
    np.testing.assert_allclose(cut["loss"], full["loss"][:4], rtol=1e-6)
    with pytest.raises(ValueError, match="stop_after_env_steps"):
        PPOConfig(stop_after_env_steps=0).validate()


def test_ppo_accepts_any_finite_clip_band():
    # ε_low ≥ 1 (no lower clip) and a wide ε_high run end to end, clip fraction included
    cfg = PPOConfig(total_env_steps=256, num_envs=4, num_steps=32, num_epochs=2, minibatch_size=64,
                    clip_eps_low=5.0, clip_eps_high=3.0)
    hist = train_ppo(cfg, progress=False)
    assert np.isfinite(hist["clip_fraction"]).all() and (hist["clip_fraction"] <= 1).all()
    for kw, name in ((dict(clip_eps_low=-0.1), "clip_eps_low"), (dict(clip_eps_high=float("inf")), "clip_eps_high")):
        with pytest.raises(ValueError, match=name):
            train_ppo(PPOConfig(**kw), progress=False)


def test_no_config_means_the_default_config_and_the_run_is_timed(monkeypatch):
    # train_x(None) builds the default config (made tiny here by replacing the class the trainer calls)
    from rlbook.algos import ppo as ppo_module
    from rlbook.algos import reinforce as reinforce_module
    from rlbook.algos import trpo as trpo_module
    from rlbook.algos.reinforce import ReinforceConfig, train_reinforce

    tiny = {ppo_module: (PPOConfig, dict(total_env_steps=128, num_envs=4, num_steps=32, num_epochs=1, minibatch_size=64)),
            trpo_module: (TRPOConfig, dict(total_env_steps=128, num_envs=4, num_steps=32, critic_epochs=1)),
            reinforce_module: (ReinforceConfig, dict(total_env_steps=200, episodes_per_batch=4))}
    for module, (cls, kw) in tiny.items():
        monkeypatch.setattr(module, cls.__name__, lambda cls=cls, kw=kw: cls(**kw))
    for train, steps in ((train_ppo, 128), (train_trpo, 128), (train_reinforce, 200)):
        hist = train(progress=False)
        assert hist.env_steps >= steps and hist.wall_seconds > 0, train.__name__


def test_trpo_config_bounds():
    TRPOConfig(damping=0.0).validate()  # no damping is allowed
    for name in ("max_kl", "critic_lr"):
        with pytest.raises(ValueError, match=name):
            TRPOConfig(**{name: 0.0}).validate()
    with pytest.raises(ValueError, match="damping"):
        TRPOConfig(damping=-1e-3).validate()


def test_trpo_critic_fit_uses_every_transition_in_each_epoch():
    # one epoch, one minibatch of the whole batch, plain SGD: the step is −lr·∇ mean ½(V − R̂)² over all n
    from rlbook.algos.trpo import _fit_critic
    from rlbook.nets import ActorCritic

    torch.manual_seed(0)
    model = ActorCritic(4, 2, (8,)).double()
    obs, returns = torch.randn(10, 4, dtype=torch.float64), torch.randn(10, dtype=torch.float64)
    params = list(model.critic.parameters())
    grads = torch.autograd.grad((0.5 * (model.value(obs) - returns) ** 2).mean(), params)
    before = [p.detach().clone() for p in params]
    cfg = TRPOConfig(critic_epochs=1, critic_minibatch_size=10)
    _fit_critic(model, torch.optim.SGD(params, lr=0.1), obs, returns, cfg, torch.Generator().manual_seed(1))
    for p, p0, g in zip(params, before, grads):
        torch.testing.assert_close(p.detach() - p0, -0.1 * g, rtol=1e-10, atol=1e-12)
