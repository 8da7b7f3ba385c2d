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
