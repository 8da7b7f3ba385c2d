"""Log-probs against a naive softmax and autograd; EOS masks; the KV-cache sampler."""

from types import SimpleNamespace

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import rlbook as rl
from rlbook import reference
from rlbook.lm.logprobs import completion_log_probs, position_ids_from_mask, token_log_probs
from rlbook.lm.model import build_policy, policy_config
from rlbook.lm.sampling import completion_mask_from_eos, decode_completions, sample_completions
from rlbook.lm.tokenizer import build_char_tokenizer, encode_prompts, forbidden_token_ids

TOK = build_char_tokenizer()
FORBIDDEN = forbidden_token_ids(TOK)


def tiny_policy(seed=0):
    return build_policy(policy_config(TOK, n_layer=1, n_embd=32, n_head=2), seed=seed, device=rl.get_device())


POLICY = tiny_policy()
PROMPTS, PROMPT_MASK = (t.to(POLICY.device) for t in encode_prompts(TOK, ["07+42=", "99+01=", "12+34="]))


def sample(model=POLICY, seed=0, **kw):
    args = dict(num_samples=4, max_new_tokens=6, eos_token_id=TOK.eos_token_id, forbidden_ids=FORBIDDEN,
                generator=torch.Generator().manual_seed(seed), tokenizer=TOK)
    args.update(kw)
    return sample_completions(model, PROMPTS, PROMPT_MASK, **args)


# ---------------------------------------------------------------- token_log_probs
@given(st.integers(1, 3), st.integers(1, 5), st.integers(2, 7), st.integers(0, 2**31 - 1))
def test_token_log_probs_matches_naive_softmax(batch, T, V, seed):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(batch, T, V, generator=g, dtype=torch.float64) * 3
    tokens = torch.randint(V, (batch, T), generator=g)
    expected = reference.token_log_probs_loop(logits, tokens)
    torch.testing.assert_close(token_log_probs(logits, tokens), expected, rtol=0, atol=1e-10)


def test_token_log_probs_gradient_is_onehot_minus_softmax():
    logits = torch.randn(2, 3, 5, dtype=torch.float64, requires_grad=True)
    tokens = torch.tensor([[0, 4, 2], [1, 1, 3]])
    token_log_probs(logits, tokens).sum().backward()
    expected = torch.nn.functional.one_hot(tokens, 5).double() - torch.softmax(logits.detach(), -1)
    torch.testing.assert_close(logits.grad, expected)
    assert torch.autograd.gradcheck(lambda x: token_log_probs(x, tokens), (logits.detach().requires_grad_(),))


def test_token_log_probs_is_float32_for_half_logits():
    logits = torch.randn(2, 3, 5).to(torch.bfloat16)
    out = token_log_probs(logits, torch.zeros(2, 3, dtype=torch.long))
    assert out.dtype == torch.float32


def test_token_log_probs_bad_input():
    with pytest.raises(ValueError, match="tokens"):
        token_log_probs(torch.zeros(2, 3, 5), torch.zeros(2, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="tokens"):
        token_log_probs(torch.zeros(2, 3, 5), torch.full((2, 3), 5))
    with pytest.raises(ValueError, match="tokens"):
        token_log_probs(torch.zeros(2, 3, 5), torch.zeros(2, 3))
    with pytest.raises(ValueError, match="logits"):
        token_log_probs(torch.zeros(5), torch.zeros(1, dtype=torch.long))


# ---------------------------------------------------------------- masks
@given(st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=6), min_size=1, max_size=4).filter(
    lambda rows: len({len(r) for r in rows}) == 1))
def test_completion_mask_matches_loop(rows):
    ids = torch.tensor(rows)
    mask = completion_mask_from_eos(ids, eos_token_id=2)
    assert mask.tolist() == reference.completion_mask_from_eos_loop(ids, 2)


def test_completion_mask_stops_at_and_includes_first_eos():
    ids = torch.tensor([[5, 2, 7, 2], [2, 5, 5, 5], [5, 5, 5, 5]])
    assert completion_mask_from_eos(ids, 2).tolist() == [
        [True, True, False, False], [True, False, False, False], [True, True, True, True]]
    with pytest.raises(ValueError, match="completion_ids"):
        completion_mask_from_eos(torch.zeros(3), 2)


# ---------------------------------------------------------------- sampler
def test_same_generator_seed_reproduces_and_other_seed_differs():
    a, b, c = sample(seed=3), sample(seed=3), sample(seed=4)
    assert torch.equal(a.completion_ids, b.completion_ids) and torch.equal(a.log_probs, b.log_probs)
    assert not torch.equal(a.completion_ids, c.completion_ids)


def test_sampler_layout_masks_and_padding():
    out = sample()
    B, T = out.completion_ids.shape
    assert B == 12 and T <= 6
    assert torch.equal(out.prompt_ids[:4], PROMPTS[:1].expand(4, -1))  # group-contiguous
    assert torch.equal(out.completion_mask, completion_mask_from_eos(out.completion_ids, TOK.eos_token_id))
    assert (out.completion_ids[~out.completion_mask] == TOK.pad_token_id).all()
    assert (out.log_probs[~out.completion_mask] == 0).all()
    assert out.texts == decode_completions(TOK, out.completion_ids, out.completion_mask)


class FavoursSpecialTokens(torch.nn.Module):
    """A stub LM whose logits strongly prefer <pad>, <s> and <unk>, then EOS at step 3."""

    def __init__(self, vocab):
        super().__init__()
        self.vocab = vocab
        self.dummy = torch.nn.Parameter(torch.zeros(()))

    def forward(self, input_ids, past_key_values=None, use_cache=True, **kwargs):
        step = 0 if past_key_values is None else past_key_values + 1
        logits = torch.zeros(*input_ids.shape, self.vocab)
        logits[..., FORBIDDEN] = 20.0
        logits[..., TOK.eos_token_id] = 25.0 if step >= 2 else -5.0
        return SimpleNamespace(logits=logits, past_key_values=step)


def test_special_tokens_are_never_sampled():
    out = sample(model=FavoursSpecialTokens(len(TOK)), num_samples=16)
    produced = out.completion_ids[out.completion_mask]
    assert not any(int(t) in FORBIDDEN for t in produced)
    assert (out.lengths == 3).all()  # EOS sampled at step 3 and kept in the mask
    with pytest.raises(ValueError, match="forbidden_ids"):
        sample(forbidden_ids=[TOK.eos_token_id])


def test_sampled_log_probs_match_rescoring_with_the_full_forward():
    out = sample(num_samples=8)
    rescored = completion_log_probs(POLICY, out.prompt_ids, out.completion_ids, forbidden_ids=FORBIDDEN,
                                    completion_mask=out.completion_mask)
    torch.testing.assert_close(rescored, out.log_probs, atol=1e-5, rtol=0)
    hot = sample(num_samples=8, temperature=0.5)
    rescored = completion_log_probs(POLICY, hot.prompt_ids, hot.completion_ids, temperature=0.5,
                                    forbidden_ids=FORBIDDEN, completion_mask=hot.completion_mask)
    torch.testing.assert_close(rescored, hot.log_probs, atol=1e-5, rtol=0)


def test_greedy_is_argmax_and_deterministic():
    a = sample(greedy=True, num_samples=1, generator=None)
    b = sample(greedy=True, num_samples=1, generator=torch.Generator().manual_seed(9))
    assert torch.equal(a.completion_ids, b.completion_ids)
    logits = POLICY(input_ids=PROMPTS).logits[:, -1].detach()
    logits[:, FORBIDDEN] = -float("inf")
    assert torch.equal(a.completion_ids[:, 0], logits.argmax(-1))


def test_left_padding_gives_the_same_scores_as_no_padding():
    completion = torch.tensor([[5, 6, 2]])
    plain, _ = encode_prompts(TOK, ["07+42="])
    padded, mask = encode_prompts(TOK, ["07+42=", "1+2="])
    a = completion_log_probs(POLICY, plain, completion)
    b = completion_log_probs(POLICY, padded[1:], completion, prompt_mask=mask[1:])
    c = completion_log_probs(POLICY, encode_prompts(TOK, ["1+2="])[0], completion)
    torch.testing.assert_close(b, c, atol=1e-5, rtol=0)
    assert a.shape == b.shape
    assert position_ids_from_mask(mask[1:]).tolist() == [[0, 0, 0, 1, 2, 3, 4]]


def test_entropy_is_finite_with_forbidden_tokens():
    out = sample()
    lp, ent = completion_log_probs(POLICY, out.prompt_ids, out.completion_ids, forbidden_ids=FORBIDDEN,
                                   completion_mask=out.completion_mask, with_entropy=True)
    assert torch.isfinite(ent).all() and (ent >= 0).all() and (ent[~out.completion_mask] == 0).all()
    assert float(ent.detach().max()) <= float(torch.log(torch.tensor(len(TOK) - len(FORBIDDEN)))) + 1e-5


def test_scoring_and_sampling_bad_input():
    ids = torch.zeros(3, 4, dtype=torch.long)
    with pytest.raises(ValueError, match="completion_mask"):
        completion_log_probs(POLICY, PROMPTS, ids, completion_mask=torch.ones(3, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match="completion_ids"):
        completion_log_probs(POLICY, PROMPTS, torch.zeros(3, 0, dtype=torch.long))
    with pytest.raises(ValueError, match="completion_ids"):
        completion_log_probs(POLICY, PROMPTS, torch.zeros(2, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="completion_mask"):
        decode_completions(TOK, ids, torch.ones(3, 2, dtype=torch.bool))
    with pytest.raises(ValueError, match="num_samples"):
        sample(num_samples=0)
    with pytest.raises(ValueError, match="temperature"):
        sample(temperature=0.0)



# ---------------------------------------------------------------- prefix sharing and the GPT-2 fast path
MIXED, MIXED_MASK = encode_prompts(TOK, ["07+42=", "1+2=", "123+4="])  # left padding on two rows


@pytest.fixture(params=["gpt2_fast", "model.forward"])
def forward_path(request, monkeypatch):
    """Run a test through the written-out GPT-2 forward and through the model's own forward."""
    from rlbook.lm import gpt2_fast

    if request.param == "model.forward":
        monkeypatch.setattr(gpt2_fast, "supported", lambda model: False)
    return request.param


def test_gpt2_forward_matches_the_models_forward():
    from rlbook.lm.gpt2_fast import gpt2_forward, supported

    policy = build_policy(policy_config(TOK, n_layer=2, n_embd=32, n_head=4), seed=3, device=rl.get_device())
    ids = torch.randint(0, len(TOK), (5, 9), generator=torch.Generator().manual_seed(0)).to(policy.device)
    mine = gpt2_forward(policy, ids, torch.arange(9, device=policy.device), lambda layer, k, v: (k, v), is_causal=True)
    torch.testing.assert_close(mine, policy(input_ids=ids).logits, atol=1e-5, rtol=0)
    assert supported(policy)
    assert not supported(policy.train()) and not supported(policy.transformer)
    assert not supported(build_policy(policy_config(TOK, n_layer=1, n_embd=32, n_head=2, scale_attn_by_inverse_layer_idx=True)))


@pytest.mark.parametrize("padded", [False, True])
def test_shared_prefix_scoring_equals_repeated_prompts_with_gradients(padded, forward_path):
    """Prompts (N, P) with G completions each give the log-probs and gradients of prompts repeated G times."""
    prompts, mask = (MIXED, MIXED_MASK) if padded else (PROMPTS, PROMPT_MASK)
    G, T = 4, 5
    completions = torch.randint(4, len(TOK), (3 * G, T), generator=torch.Generator().manual_seed(1))
    completion_mask = completion_mask_from_eos(completions, TOK.eos_token_id)
    completion_mask[0, 2:] = False  # an early end
    kw = dict(temperature=0.7, forbidden_ids=FORBIDDEN, completion_mask=completion_mask, with_entropy=True)

    def scores_and_grads(prompt_ids, prompt_mask):
        POLICY.zero_grad()
        lp, ent = completion_log_probs(POLICY, prompt_ids, completions, prompt_mask, **kw)
        (lp.sum() + 0.3 * ent.sum()).backward()
        return lp.detach(), ent.detach(), [p.grad.clone() for p in POLICY.parameters()]

    shared = scores_and_grads(prompts, mask)
    repeated = scores_and_grads(prompts.repeat_interleave(G, 0), mask.repeat_interleave(G, 0))
    torch.testing.assert_close(shared[0], repeated[0], atol=1e-5, rtol=0)
    torch.testing.assert_close(shared[1], repeated[1], atol=1e-5, rtol=0)
    for a, b in zip(shared[2], repeated[2]):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
    one_token = completion_log_probs(POLICY, prompts, completions[:, :1], mask, temperature=0.7, forbidden_ids=FORBIDDEN)
    torch.testing.assert_close(one_token, repeated[0][:, :1], atol=1e-5, rtol=0)  # T = 1: the prompt pass alone


@pytest.mark.parametrize("padded", [False, True])
def test_sampled_log_probs_match_rescoring_with_left_padding(padded, forward_path):
    prompts, mask = (MIXED, MIXED_MASK) if padded else (PROMPTS, PROMPT_MASK)
    out = sample_completions(POLICY, prompts, mask, num_samples=5, max_new_tokens=6, eos_token_id=TOK.eos_token_id,
                             forbidden_ids=FORBIDDEN, temperature=1.5, generator=torch.Generator().manual_seed(4))
    rescored = completion_log_probs(POLICY, out.prompt_ids, out.completion_ids, out.prompt_mask, temperature=1.5,
                                    forbidden_ids=FORBIDDEN, completion_mask=out.completion_mask)
    torch.testing.assert_close(rescored, out.log_probs, atol=1e-5, rtol=0)
    assert out.completion_mask.float().mean() < 1  # some rows ended early: the EOS feed is exercised


@pytest.mark.parametrize("padded", [False, True])
def test_fast_decoder_samples_what_the_models_forward_samples(padded, monkeypatch):
    from rlbook.lm import gpt2_fast

    prompts, mask = (MIXED, MIXED_MASK) if padded else (PROMPTS, PROMPT_MASK)
    args = dict(num_samples=6, max_new_tokens=6, eos_token_id=TOK.eos_token_id, forbidden_ids=FORBIDDEN, temperature=1.5)
    fast = sample_completions(POLICY, prompts, mask, generator=torch.Generator().manual_seed(2), **args)
    monkeypatch.setattr(gpt2_fast, "supported", lambda model: False)
    slow = sample_completions(POLICY, prompts, mask, generator=torch.Generator().manual_seed(2), **args)
    assert torch.equal(fast.completion_ids, slow.completion_ids)
    torch.testing.assert_close(fast.log_probs, slow.log_probs, atol=1e-5, rtol=0)


@pytest.mark.parametrize("padded", [False, True])
def test_the_cache_goes_in_under_the_name_the_models_forward_declares(padded, monkeypatch):
    """transformers 5 renamed forward's ``past_key_values`` to ``cache`` (the old name warns, then goes):
    the sampler and the shared-prefix scorer pass the cache under the name the class's forward declares,
    and a custom model that knows only ``past_key_values`` still gets that name."""
    import inspect

    from rlbook.lm import gpt2_fast
    from rlbook.lm.logprobs import cache_kwarg, output_cache

    monkeypatch.setattr(gpt2_fast, "supported", lambda model: False)  # the model's own forward
    declared = inspect.signature(type(POLICY).forward).parameters
    expected = "cache" if "cache" in declared else "past_key_values"
    assert expected in declared and cache_kwarg(POLICY) == expected
    assert cache_kwarg(FavoursSpecialTokens(len(TOK))) == "past_key_values"
    prompts, mask = (MIXED, MIXED_MASK) if padded else (PROMPTS, PROMPT_MASK)
    calls, forward = [], POLICY.forward

    def recording_forward(*args, **kwargs):
        calls.append(sorted(k for k in kwargs if k in ("cache", "past_key_values") and kwargs[k] is not None))
        out = forward(*args, **kwargs)
        assert output_cache(out) is not None and output_cache(out).get_seq_length() > 0
        return out

    monkeypatch.setattr(POLICY, "forward", recording_forward)
    out = sample_completions(POLICY, prompts, mask, num_samples=4, max_new_tokens=6, eos_token_id=TOK.eos_token_id,
                             forbidden_ids=FORBIDDEN, generator=torch.Generator().manual_seed(0))
    completion_log_probs(POLICY, prompts, out.completion_ids, mask)
    with_cache = [c for c in calls if c]
    assert len(with_cache) >= out.completion_ids.shape[1] - 1  # every decoding step, and the scorer's second pass
    assert all(c == [expected] for c in with_cache), with_cache
    assert output_cache(SimpleNamespace(past_key_values=7)) == 7 and output_cache(SimpleNamespace()) is None


def test_scoring_rejects_a_completion_batch_that_is_not_a_multiple_of_the_prompts():
    with pytest.raises(ValueError, match="completion_ids.*multiple"):
        completion_log_probs(POLICY, PROMPTS, torch.zeros(7, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="prompt_mask"):
        completion_log_probs(POLICY, PROMPTS, torch.zeros(6, 4, dtype=torch.long), prompt_mask=torch.ones(3, 2, dtype=torch.bool))


def test_a_model_that_drops_its_cache_is_refused_not_sampled_wrongly():
    """A model that returns no key/value cache although use_cache=True was asked (gradient
    checkpointing in training mode did this in transformers 4.x, as TRL's trainer leaves a model)
    is refused: decoding token by token without the cache would sample garbage silently."""
    model = tiny_policy()
    model.train()  # training mode: the sampler takes the model's own forward, not the fast path
    forward = model.forward

    def forward_without_cache(*args, **kwargs):
        out = forward(*args, **kwargs)
        setattr(out, "cache" if "cache" in out.__dataclass_fields__ else "past_key_values", None)
        return out

    model.forward = forward_without_cache
    with pytest.raises(ValueError, match="no key/value cache"):
        sample(model=model)
    del model.forward  # the class's forward again
    enable = getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
    enable()  # drops the cache at the prefill (transformers 4) or after it (5.x)
    with pytest.raises(ValueError, match="no key/value cache"):
        sample(model=model)
    model.eval()  # the fast path (eval mode) needs no HF cache and samples as before
    assert torch.equal(sample(model=model, seed=3).completion_ids, sample(seed=3).completion_ids)


def test_one_token_completions_score_like_the_prompts_last_logits(forward_path):
    # T = 1: the shared-prefix path returns the prompts' last logits, repeated G times
    G = 3
    completions = torch.randint(4, len(TOK), (3 * G, 1), generator=torch.Generator().manual_seed(4)).to(POLICY.device)
    lp = completion_log_probs(POLICY, PROMPTS, completions, PROMPT_MASK)
    with torch.no_grad():
        last = torch.log_softmax(POLICY(input_ids=PROMPTS).logits[:, -1].float(), -1).repeat_interleave(G, 0)
    torch.testing.assert_close(lp.detach(), last.gather(1, completions), atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="temperature"):
        completion_log_probs(POLICY, PROMPTS, completions, PROMPT_MASK, temperature=0.0)


def test_sampling_without_a_generator_uses_the_global_seed():
    args = dict(num_samples=2, max_new_tokens=4, eos_token_id=TOK.eos_token_id, pad_token_id=TOK.pad_token_id)
    torch.manual_seed(5)
    a = sample_completions(POLICY, PROMPTS, PROMPT_MASK, **args)
    torch.manual_seed(5)
    b = sample_completions(POLICY, PROMPTS, PROMPT_MASK, **args)
    assert torch.equal(a.completion_ids, b.completion_ids)


def test_fp32_lm_head_keeps_a_float32_models_logits_and_returns_the_model():
    from rlbook.lm.critic import fp32_lm_head

    model = tiny_policy()
    ids = torch.tensor([[5, 6, 7, 8]], device=model.device)
    with torch.no_grad():
        before = model(input_ids=ids).logits
        assert fp32_lm_head(model) is model and fp32_lm_head(model) is model  # idempotent
        torch.testing.assert_close(model(input_ids=ids).logits, before, rtol=0, atol=0)


def test_stop_token_ids_end_a_row_and_bound_its_mask():
    """A stop id ends its row like EOS (kept as the row's last token, padding after it, the mask through it);
    with no stop ids the samples are exactly those of the default call."""
    model = tiny_policy(seed=5)
    prompt_ids, prompt_mask = encode_prompts(TOK, ["12+34=", "5+6="])
    kw = dict(num_samples=8, max_new_tokens=6, eos_token_id=TOK.eos_token_id, pad_token_id=TOK.pad_token_id,
              forbidden_ids=forbidden_token_ids(TOK))
    plain = rl.lm.sample_completions(model, prompt_ids, prompt_mask, generator=torch.Generator().manual_seed(0), **kw)
    same = rl.lm.sample_completions(model, prompt_ids, prompt_mask, generator=torch.Generator().manual_seed(0),
                                    stop_token_ids=(), **kw)
    assert torch.equal(plain.completion_ids, same.completion_ids) and torch.equal(plain.completion_mask,
                                                                                  same.completion_mask)
    stop = TOK.convert_tokens_to_ids("+")
    cut = rl.lm.sample_completions(model, prompt_ids, prompt_mask, generator=torch.Generator().manual_seed(0),
                                   stop_token_ids=[stop], **kw)
    ended = 0
    for ids, mask in zip(cut.completion_ids.tolist(), cut.completion_mask.tolist()):
        kept = [i for i, m in zip(ids, mask) if m]
        ends = [j for j, i in enumerate(kept) if i in (stop, TOK.eos_token_id)]
        assert ends in ([], [len(kept) - 1])  # at most one ending token, and it is the last kept one
        assert all(i == TOK.pad_token_id for i, m in zip(ids, mask) if not m)
        ended += bool(kept) and kept[-1] == stop
    assert ended > 0  # the stop id did end some rows
    with pytest.raises(ValueError, match="stop_token_ids"):
        rl.lm.sample_completions(model, prompt_ids, prompt_mask, stop_token_ids=[TOK.pad_token_id], **kw)
