"""The sampler that is not the policy (rlbook.MismatchedSampler) and GRPOConfig's sampler switches.

Each source of mismatch is checked against an independent computation of the distribution it must
sample from: the log-probs the sampler reports equal :func:`rlbook.sampler_log_probs` applied to the
logits of a separate full forward pass (of the policy, of a copy with rounded weights, or of the
weights k updates back), tokens outside a nucleus or a top-k are never drawn, and with every switch at
its default the sampler is the policy (the run is bit-identical to one without a sampler). Then the
wiring: switches equal the same sampler passed through ``train_grpo(sampler=)``, bit for bit; the
mismatch metrics against a hand computation; errors name the field.
"""

import copy

import numpy as np
import pytest
import torch

import rlbook as rl
from rlbook.algos import grpo as grpo_module
from rlbook.algos.grpo import GRPOConfig
from rlbook.algos.grpo_rollouts import Rollouts, sample_kwargs
from rlbook.lm.model import build_policy, policy_config
from rlbook.lm.sampling import sample_completions
from rlbook.lm.task import AdditionTask
from rlbook.lm.tokenizer import build_char_tokenizer, encode_prompts, forbidden_token_ids

TOK = build_char_tokenizer()
FORBIDDEN = forbidden_token_ids(TOK)
TASK = AdditionTask()

pytestmark = pytest.mark.usefixtures("one_thread")


def _policy(seed=0):
    return build_policy(policy_config(TOK, n_layer=1, n_embd=32, n_head=2), seed=seed, device="cpu")


def _prompts(n=6):
    return encode_prompts(TOK, [p.prompt for p in TASK.held_out_problems(n)])


def _draw(sampler, policy, seed=0, num_samples=8, temperature=1.0):
    ids, mask = _prompts()
    return sampler(policy, ids, mask, num_samples=num_samples, generator=torch.Generator().manual_seed(seed),
                   **sample_kwargs(TOK, FORBIDDEN, 5, temperature))


def _step_logits(model, out):
    """(B, T, V) logits of ``model`` at each completion position, by one full transformers forward (no KV
    cache; the addition prompts have one width, so there is no padding before the completion)."""
    assert out.prompt_mask.all()
    full = torch.cat([out.prompt_ids, out.completion_ids], dim=1)
    with torch.no_grad():
        logits = model(input_ids=full).logits
    P = out.prompt_ids.shape[1]
    return logits[:, P - 1:-1].float()


def _expected_log_probs(model, out, **sampler):
    """log μ of the drawn tokens from the formula: forbidden ids removed, then renormalised."""
    z = _step_logits(model, out)
    log_mu = rl.sampler_log_probs(z, **sampler)
    log_mu[..., FORBIDDEN] = -torch.inf
    log_mu = torch.log_softmax(log_mu, dim=-1)
    picked = log_mu.gather(-1, out.completion_ids[..., None])[..., 0]
    return torch.where(out.completion_mask, picked, torch.zeros_like(picked))


@pytest.mark.parametrize("switches", [dict(temperature=0.5), dict(temperature=1.7), dict(top_p=0.7), dict(top_k=3),
                                      dict(temperature=0.8, top_p=0.9, top_k=5)])
def test_the_reported_log_probs_are_the_samplers_distribution_at_the_drawn_tokens(switches):
    policy = _policy()
    out = _draw(rl.MismatchedSampler(**switches), policy)
    want = _expected_log_probs(policy, out, **switches)
    torch.testing.assert_close(out.log_probs, want, atol=2e-5, rtol=0)
    assert torch.isfinite(out.log_probs).all()  # no drawn token lies outside the nucleus or the top-k


@pytest.mark.parametrize("precision, dtype", [("bf16", torch.bfloat16), ("fp16", torch.float16)])
def test_precision_rounds_the_weights_and_the_logits(precision, dtype):
    policy = _policy()
    out = _draw(rl.MismatchedSampler(precision=precision), policy)
    rounded = copy.deepcopy(policy)
    with torch.no_grad():
        for p in rounded.parameters():
            p.copy_(p.to(dtype).float())
    want = _expected_log_probs(rounded, out, dtype=precision)
    torch.testing.assert_close(out.log_probs, want, atol=2e-5, rtol=0)
    # and it is not the policy's own distribution (a check that could fail)
    unrounded = _expected_log_probs(policy, out)
    assert (out.log_probs - unrounded)[out.completion_mask].abs().max() > 1e-4
    assert all(torch.equal(a, b) for a, b in zip(policy.parameters(), _policy().parameters()))  # policy untouched


def test_lag_samples_with_the_weights_of_k_updates_ago():
    policy, lag = _policy(), 2
    sampler = rl.MismatchedSampler(lag=lag)
    versions = []
    for update in range(5):
        versions.append(copy.deepcopy(policy))
        out = _draw(sampler, policy, seed=update)
        _draw(sampler, policy, seed=50 + update)  # a second call with the same weights adds no version
        used = versions[max(0, update - lag)]
        torch.testing.assert_close(out.log_probs, _expected_log_probs(used, out), atol=2e-5, rtol=0)
        if update >= 1:  # and not the current weights
            assert (out.log_probs - _expected_log_probs(policy, out))[out.completion_mask].abs().max() > 1e-3
        with torch.no_grad():  # an "optimiser step"
            for p in policy.parameters():
                p.add_(0.05 * torch.randn(p.shape, generator=torch.Generator().manual_seed(update)))


def test_at_the_defaults_the_sampler_is_the_policy():
    policy = _policy()
    assert rl.MismatchedSampler().is_policy and rl.MismatchedSampler(precision="fp32").is_policy
    out = _draw(rl.MismatchedSampler(), policy)
    own = _draw(sample_completions, policy)
    assert torch.equal(out.completion_ids, own.completion_ids)
    torch.testing.assert_close(out.log_probs, own.log_probs, atol=1e-6, rtol=0)
    assert GRPOConfig().mismatched_sampler() is None and GRPOConfig(sampler_precision="fp32").mismatched_sampler() is None
    for field, value in (("sampler_temperature", 0.7), ("sampler_top_p", 0.9), ("sampler_top_k", 4),
                         ("sampler_precision", "bf16"), ("sampler_lag", 1)):
        assert isinstance(GRPOConfig(**{field: value}).mismatched_sampler(), rl.MismatchedSampler), field


def test_temperature_none_follows_the_trainers_temperature():
    policy = _policy()
    out = _draw(rl.MismatchedSampler(top_p=0.95), policy, temperature=0.6)
    want = _expected_log_probs(policy, out, temperature=0.6, top_p=0.95)
    torch.testing.assert_close(out.log_probs, want, atol=2e-5, rtol=0)


def _small(**kw):
    base = dict(group_size=4, prompts_per_step=4, num_steps=4, max_new_tokens=5, device="cpu", lr=1e-3)
    base.update(kw)
    return GRPOConfig(**base)


class ParityTask(AdditionTask):
    """Addition prompts; reward 1 for completions whose character codes sum to an odd number, so a random
    model's groups are mixed and every step changes the weights."""

    def reward(self, prompt, completion):
        return float(sum(map(ord, completion)) % 2)


def _train(config, sampler=None):
    policy = _policy()
    return policy, rl.train_grpo(policy, TOK, ParityTask(), config, progress=False, sampler=sampler)


def test_config_switches_train_exactly_as_the_same_sampler_through_the_hook():
    switches = dict(temperature=0.7, top_p=0.9, precision="bf16", lag=2)
    a, ha = _train(_small(is_correction="token_truncate", is_cap=1.1, **{f"sampler_{k}": v for k, v in switches.items()}))
    b, hb = _train(_small(is_correction="token_truncate", is_cap=1.1), sampler=rl.MismatchedSampler(**switches))
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
    for name in ha.metrics:
        np.testing.assert_array_equal(ha[name], hb[name], err_msg=name)
    assert hb["sampler_kl"].min() > 0 and ha["is_weight_mean"].max() < 1  # a mismatch, and the correction acts


def test_default_switches_are_the_run_without_a_sampler_bit_for_bit():
    a, ha = _train(_small())
    b, hb = _train(_small(sampler_precision="fp32", sampler_top_p=1.0, sampler_lag=0))
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
    assert set(ha.metrics) == set(hb.metrics) and "sampler_kl" not in ha.metrics


def test_a_lagged_sampler_is_on_policy_at_the_first_step_and_off_policy_after():
    _, hist = _train(_small(sampler_lag=3))
    # step 0: the starting weights are the only version (the two log-probs differ by float order only)
    assert abs(hist["sampler_kl"][0]) < 1e-9 and abs(hist["sampler_log_ratio_mean"][0]) < 1e-6
    assert (hist["sampler_kl"][1:] > 1e-5).all()


def test_mismatch_metrics_are_the_token_means_written_out():
    log_probs = torch.tensor([[-0.1, -2.0, 0.0], [-1.0, -0.3, -0.2]])
    sampler_lp = torch.tensor([[-0.2, -0.5, 0.0], [-1.0, -1.5, -0.1]])
    mask = torch.tensor([[True, True, False], [True, True, True]])
    batch = Rollouts([None, None], torch.zeros(2, 1, dtype=torch.long), torch.ones(2, 1, dtype=torch.bool),
                     torch.zeros(2, 3, dtype=torch.long), mask, log_probs, ["", ""], torch.zeros(2), torch.zeros(2),
                     torch.zeros(2, dtype=torch.bool), 2, sampler_log_probs=sampler_lp)
    d = [0.1, -1.5, 0.0, 1.2, -0.1]  # log π_old − log π_s on the five response tokens
    out = grpo_module._mismatch_metrics(batch, _small(is_cap=2.0), sampler=object())
    assert abs(float(out["sampler_log_ratio_mean"]) - sum(d) / 5) < 1e-7
    assert abs(float(out["sampler_kl"]) - sum(np.expm1(x) - x for x in d) / 5) < 1e-7
    assert float(out["sampler_out_of_band_fraction"]) == pytest.approx(2 / 5)  # |d| > log 2: −1.5 and 1.2
    assert grpo_module._mismatch_metrics(batch, _small(), sampler=None) == {}


@pytest.mark.parametrize("field, value, words", [
    ("sampler_temperature", 0.0, "`sampler_temperature` must be a finite number > 0"),
    ("sampler_top_p", 1.5, "`sampler_top_p` must be in (0, 1]"),
    ("sampler_top_p", 0.0, "`sampler_top_p` must be in (0, 1]"),
    ("sampler_top_k", 0, "`sampler_top_k` must be None or an integer ≥ 1"),
    ("sampler_precision", "fp8", "`sampler_precision` must be None or one of"),
    ("sampler_lag", -1, "`sampler_lag` must be an integer ≥ 0"),
    ("sampler_lag", 1.5, "`sampler_lag` must be an integer ≥ 0"),
])
def test_config_rejects_bad_sampler_switches_naming_the_field(field, value, words):
    with pytest.raises(ValueError, match=words.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        GRPOConfig(**{field: value})


def test_bad_sampler_arguments_raise_naming_the_argument():
    for kwargs, words in ((dict(temperature=-1), "`temperature`"), (dict(top_p=2), "`top_p`"), (dict(top_k=0), "`top_k`"),
                          (dict(precision="int8"), "`precision`"), (dict(lag=-2), "`lag`"), (dict(lag=True), "`lag`")):
        with pytest.raises(ValueError, match=words):
            rl.MismatchedSampler(**kwargs)
    with pytest.raises(ValueError, match="sampler_\\* switches"):
        _train(_small(sampler_lag=1), sampler=sample_completions)
    ids, mask = _prompts(2)
    with pytest.raises(ValueError, match="`logits_processor`"):
        sample_completions(_policy(), ids, mask, eos_token_id=TOK.eos_token_id, logits_processor="top_p")
