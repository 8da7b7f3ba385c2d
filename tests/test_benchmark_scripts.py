"""Benchmark scripts whose conclusion rests on two code paths computing the same thing."""

import sys
from pathlib import Path

import pytest
import torch

from rlbook.lm import gpt2_fast

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import grpo_backprop_through_sampler as bts  # noqa: E402

THROUGH = "backprop through the sampler"


def test_backprop_through_the_sampler_gives_the_books_gradient():
    """The timing compares equal work: the same samples, loss and gradient, and the gradient is not ~0."""
    policy, ids, eos = bts.setup()
    assert bts.check_same(policy, ids, eos, seed=3) < 1e-6
    advantages = torch.randn(bts.N * bts.G, 1, generator=torch.Generator().manual_seed(4))
    _, _, grad = bts.gradients(bts.through_sampler, policy, ids, eos, 3, advantages)
    assert grad.abs().max() > 1e-3


def test_check_same_catches_a_flipped_sign(monkeypatch):
    policy, ids, eos = bts.setup()
    monkeypatch.setitem(bts.STRATEGIES, THROUGH, lambda p, i, e, g, adv: bts.through_sampler(p, i, e, g, -adv))
    with pytest.raises(AssertionError, match="different loss or gradient"):
        bts.check_same(policy, ids, eos)


def test_check_same_catches_a_gradient_lost_through_the_cache(monkeypatch):
    """Same loss, but the prompt's keys and values carry no gradient: only the gradient check sees it."""
    policy, ids, eos = bts.setup()
    real = gpt2_fast.gpt2_prefill

    def detached_prefill(model, prompt_ids):
        logits, prefix = real(model, prompt_ids)
        return logits, [(k.detach(), v.detach()) for k, v in prefix]

    def mutant(*args):
        with monkeypatch.context() as m:
            m.setattr(gpt2_fast, "gpt2_prefill", detached_prefill)
            return bts.through_sampler(*args)

    monkeypatch.setitem(bts.STRATEGIES, THROUGH, mutant)
    with pytest.raises(AssertionError, match="max gap"):
        bts.check_same(policy, ids, eos)


import preference_family as family  # noqa: E402


def test_preference_family_interpolates_at_kl_between_the_bracketing_sweep_points_only():
    """Chapter 13 compares the family at matched KL: linear in KL between the two points that bracket the
    target, whatever order the sweep visits them in, and no value outside the swept range."""
    kls, gold = [2.0, 0.5, 1.0], [0.1, 0.4, 0.3]
    assert family.at_kl(kls, gold, 1.5) == pytest.approx(0.2)
    assert family.at_kl(kls, gold, 0.75) == pytest.approx(0.35)
    assert family.at_kl(kls, gold, 1.0) == pytest.approx(0.3)
    assert family.at_kl(kls, gold, 0.4) is None and family.at_kl(kls, gold, 2.1) is None


def test_preference_family_configs_sweep_the_named_coefficient_at_dpo_vs_rls_budget():
    """Each method's sweep sets the coefficient the chapter names (IPO's τ is the library's ``beta``), SimPO's
    γ stays fixed, and every configuration has offline DPO's updates, batch and minibatch seed."""
    for method, (loss_type, field, values) in family.SWEEPS.items():
        assert 3 <= len(values) <= 4 and len(set(values)) == len(values), method
        for v in values:
            cfg = family.family_config(method, v, seed=3)
            assert cfg.loss_type == loss_type and getattr(cfg, field) == v, method
            assert (cfg.num_steps, cfg.batch_size, cfg.seed) == (family.base.DPO_STEPS, family.base.DPO_BATCH, 3)
            if method == "simpo":
                assert cfg.simpo_gamma == family.SIMPO_GAMMA
    dpo = family.family_config("dpo", family.base.DPO_BETA, seed=3)
    assert dpo == family.base.dpo_config(3, family.base.DPO_STEPS), "DPO at dpo_vs_rl's β is dpo_vs_rl's offline DPO"
