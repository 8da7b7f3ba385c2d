"""Course-standard train steps (rlbook.steps): hand-worked numbers, autograd, accumulation, errors."""

import functools
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import rlbook as rl
import rlbook.steps as steps

F64 = torch.float64

# hand-worked batch: B = 2 sequences, T = 3 columns, lengths 2 and 1
LP = torch.tensor([[-1.0, -3.0, -0.7], [-0.5, -2.0, -9.0]], dtype=F64)
MASK = torch.tensor([[True, True, False], [True, False, False]])


def leaf(x):
    return x.clone().requires_grad_()


def random_batch(seed, B=8, T=6, empty_row=True):
    g = torch.Generator().manual_seed(seed)
    log_probs = -torch.rand(B, T, generator=g, dtype=F64) * 3
    old = log_probs + 0.3 * torch.randn(B, T, generator=g, dtype=F64)
    ref = log_probs + 0.3 * torch.randn(B, T, generator=g, dtype=F64)
    lengths = torch.randint(1, T + 1, (B,), generator=g)
    if empty_row:
        lengths[B // 2] = 0
    mask = torch.arange(T)[None] < lengths[:, None]
    log_probs = torch.where(mask, log_probs, torch.full_like(log_probs, 123.0))  # finite garbage on padding
    return log_probs, old, ref, mask, torch.randn(B, 1, generator=g, dtype=F64)


# ------------------------------------------------------------------------------------------- SFT


def test_sft_loss_hand_worked():
    # per-sequence sums −4 and −0.5; c = 1: mean 2.25; c = 2: 1.125; c = N/B = 1.5: the token mean 4.5/3
    assert rl.sft_loss(LP, MASK).item() == pytest.approx(2.25)
    assert rl.sft_loss(LP, MASK, 2.0).item() == pytest.approx(1.125)
    assert rl.sft_loss(LP, MASK, 1.5).item() == pytest.approx(4.5 / 3)
    assert rl.sft_loss(LP, MASK, torch.tensor(1.5)).item() == pytest.approx(4.5 / 3)


def test_sft_microbatch_train_step_gradient_and_scaling():
    lp = leaf(LP)
    loss, meta = rl.sft_microbatch_train_step(lp, MASK, gradient_accumulation_steps=4, normalize_constant=2.0)
    assert loss.item() == pytest.approx(1.125 / 4) and meta["unscaled_loss"].item() == pytest.approx(1.125)
    assert meta["num_response_tokens"].item() == 3
    # ∂L/∂log π = −m / (k·B·c) = −1/16 on response tokens, 0 on padding
    torch.testing.assert_close(lp.grad, MASK / -16.0, check_dtype=False)


def test_sft_padding_is_ignored_even_if_nan():
    lp = torch.cat([LP, torch.full((2, 4), float("nan"), dtype=F64)], dim=1).requires_grad_()
    mask = torch.cat([MASK, torch.zeros(2, 4, dtype=torch.bool)], dim=1)
    loss, _ = rl.sft_microbatch_train_step(lp, mask, 1)
    assert loss.item() == pytest.approx(2.25)
    assert torch.isfinite(lp.grad).all() and (lp.grad[:, 3:] == 0).all()


def test_sft_empty_row_counts_in_the_batch_with_zero_loss():
    lp = torch.cat([LP, torch.full((1, 3), -5.0, dtype=F64)])
    mask = torch.cat([MASK, torch.zeros(1, 3, dtype=torch.bool)])
    assert rl.sft_loss(lp, mask).item() == pytest.approx(4.5 / 3)


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**31 - 1), st.sampled_from([1, 2, 4, 8]), st.floats(0.5, 6.0))
def test_sft_gradient_accumulation_k_micro_batches_equal_one_batch(seed, k, c):
    log_probs, _, _, mask, _ = random_batch(seed)
    full = leaf(log_probs)
    loss_full, _ = rl.sft_microbatch_train_step(full, mask, 1, normalize_constant=c)
    micro = leaf(log_probs)
    total = sum(rl.sft_microbatch_train_step(part, m, k, normalize_constant=c)[0]
                for part, m in zip(micro.chunk(k), mask.chunk(k)))  # views of one leaf: grads accumulate
    torch.testing.assert_close(micro.grad, full.grad, atol=1e-12, rtol=0)
    assert total.item() == pytest.approx(loss_full.item(), abs=1e-12)


def test_sft_with_tokens_per_sequence_is_the_token_mean_bit_for_bit():
    # train_sft's choice c = N/B: for a power-of-two B the loss and gradient are those of −Σ m·log π / N
    log_probs, _, _, mask, _ = random_batch(3, B=16, T=7)
    log_probs = torch.where(mask, log_probs, torch.zeros_like(log_probs)).float()
    a, b = leaf(log_probs), leaf(log_probs)
    loss, _ = rl.sft_microbatch_train_step(a, mask, 1, normalize_constant=mask.sum() / len(mask))
    direct = -b.sum() / mask.sum()
    direct.backward()
    assert torch.equal(loss, direct) and torch.equal(a.grad, torch.where(mask, b.grad, torch.zeros_like(b.grad)))


def test_sft_errors_name_the_argument():
    with pytest.raises(ValueError, match="policy_log_probs"):
        rl.sft_loss(LP[0], MASK[0])
    with pytest.raises(ValueError, match="policy_log_probs"):
        rl.sft_loss(torch.ones(2, 3, dtype=torch.long), MASK)
    with pytest.raises(ValueError, match="response_mask"):
        rl.sft_loss(LP, MASK[:, :2])
    with pytest.raises(ValueError, match="policy_log_probs"):
        rl.sft_loss(LP[:0], MASK[:0])
    for bad in (0.0, -1.0, float("inf"), torch.tensor([1.0, 2.0])):
        with pytest.raises(ValueError, match="normalize_constant"):
            rl.sft_loss(LP, MASK, bad)
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="gradient_accumulation_steps"):
            rl.sft_microbatch_train_step(leaf(LP), MASK, bad)


# ------------------------------------------------------------------------- policy_gradient_loss

# clip hand numbers: old log π = 0, so ρ = exp(log π); ε = 0.1 → band [0.9, 1.1]
CLIP_LP = torch.tensor([[math.log(1.5), math.log(0.5)], [math.log(1.5), math.log(0.5)]], dtype=F64)
CLIP_ADV = torch.tensor([[1.0], [-1.0]], dtype=F64)


def test_policy_gradient_loss_hand_worked():
    lp = torch.tensor([[-1.0, -2.0], [-0.5, -4.0]], dtype=F64)
    loss, meta = rl.policy_gradient_loss(lp, "no_baseline", raw_rewards=torch.tensor([[2.0], [0.0]]))
    torch.testing.assert_close(loss, torch.tensor([[2.0, 4.0], [0.0, 0.0]], dtype=F64))
    assert meta == {}
    loss, _ = rl.policy_gradient_loss(lp, "reinforce_with_baseline", advantages=torch.tensor([-0.5, 1.0]))  # (B,) works
    torch.testing.assert_close(loss, torch.tensor([[-0.5, -1.0], [0.5, 4.0]], dtype=F64))
    # grpo_clip: Â = +1: ρ = 1.5 clipped to 1.1 → −1.1; ρ = 0.5 → −0.5.  Â = −1: ρ = 1.5 → +1.5; ρ = 0.5 → +0.9
    loss, meta = rl.policy_gradient_loss(CLIP_LP, "grpo_clip", advantages=CLIP_ADV,
                                         old_log_probs=torch.zeros(2, 2, dtype=F64), cliprange=0.1)
    torch.testing.assert_close(loss, torch.tensor([[-1.1, -0.5], [1.5, 0.9]], dtype=F64))
    assert meta["clipped"].tolist() == [[True, False], [False, True]]
    torch.testing.assert_close(meta["ratio"], torch.tensor([[1.5, 0.5], [1.5, 0.5]], dtype=F64))


def test_grpo_clip_gradient_is_zero_exactly_where_clipped():
    lp = leaf(CLIP_LP)
    loss, meta = rl.policy_gradient_loss(lp, "grpo_clip", advantages=CLIP_ADV, old_log_probs=torch.zeros(2, 2, dtype=F64),
                                         cliprange=0.1)
    loss.sum().backward()
    # unclipped tokens: ∂(−ρÂ)/∂log π = −ρÂ: −0.5 (Â=1, ρ=0.5), +1.5 (Â=−1, ρ=1.5)
    torch.testing.assert_close(lp.grad, torch.tensor([[0.0, -0.5], [1.5, 0.0]], dtype=F64))
    assert torch.equal(lp.grad == 0, meta["clipped"])


def test_grpo_clip_and_cispo_call_the_library_losses(monkeypatch):
    g = torch.Generator().manual_seed(0)
    lp, old = -torch.rand(3, 4, generator=g, dtype=F64), -torch.rand(3, 4, generator=g, dtype=F64)
    adv = torch.randn(3, 1, generator=g, dtype=F64)
    loss, _ = rl.policy_gradient_loss(lp, "grpo_clip", advantages=adv, old_log_probs=old, cliprange=(0.2, 0.28))
    assert torch.equal(loss, rl.clipped_surrogate_loss(lp, old, adv, 0.2, 0.28))
    loss, meta = rl.policy_gradient_loss(lp, "cispo", advantages=adv, old_log_probs=old, cliprange=(0.9, 0.3))
    assert torch.equal(loss, rl.cispo_loss(lp, old, adv, 0.9, 0.3))
    ratio = torch.exp(lp - old)
    assert torch.equal(meta["weight_clipped"], (ratio < 0.1) | (ratio > 1.3))
    calls = []

    def spy(*args, **kwargs):
        calls.append(kwargs)
        return torch.zeros(3, 4, dtype=F64)

    monkeypatch.setattr(steps, "clipped_surrogate_loss", spy)
    rl.policy_gradient_loss(lp, "grpo_clip", advantages=adv, old_log_probs=old, cliprange=0.2)
    assert calls == [{"clip_eps_low": 0.2, "clip_eps_high": 0.2}]  # the library function, not a re-implementation


def test_policy_gradient_loss_errors_name_the_argument():
    lp, old, adv = LP, LP.clone(), torch.ones(2, 1, dtype=F64)
    with pytest.raises(ValueError, match="loss_type"):
        rl.policy_gradient_loss(lp, "ppo", advantages=adv)
    with pytest.raises(ValueError, match="raw_rewards"):
        rl.policy_gradient_loss(lp, "no_baseline", advantages=adv)
    with pytest.raises(ValueError, match="advantages"):
        rl.policy_gradient_loss(lp, "reinforce_with_baseline", raw_rewards=adv)
    for missing in ("advantages", "old_log_probs", "cliprange"):
        kwargs = dict(advantages=adv, old_log_probs=old, cliprange=0.2)
        kwargs[missing] = None
        for loss_type in ("grpo_clip", "cispo"):
            with pytest.raises(ValueError, match=missing):
                rl.policy_gradient_loss(lp, loss_type, **kwargs)
    with pytest.raises(ValueError, match="policy_log_probs"):
        rl.policy_gradient_loss(lp[0], "reinforce_with_baseline", advantages=adv)
    with pytest.raises(ValueError, match="advantages"):
        rl.policy_gradient_loss(lp, "reinforce_with_baseline", advantages=torch.ones(3, 1))
    with pytest.raises(ValueError, match="raw_rewards"):
        rl.policy_gradient_loss(lp, "no_baseline", raw_rewards=torch.ones(2, 2, 1))
    with pytest.raises(ValueError, match="old_log_probs"):
        rl.policy_gradient_loss(lp, "grpo_clip", advantages=adv, old_log_probs=old[:, :2], cliprange=0.2)
    with pytest.raises(ValueError, match="cliprange"):
        rl.policy_gradient_loss(lp, "grpo_clip", advantages=adv, old_log_probs=old, cliprange=(0.1, 0.2, 0.3))
    with pytest.raises(ValueError, match="clip_eps_low"):
        rl.policy_gradient_loss(lp, "grpo_clip", advantages=adv, old_log_probs=old, cliprange=-0.1)


# ------------------------------------------------------------------- grpo_microbatch_train_step


def test_grpo_microbatch_train_step_hand_worked():
    # per-token −Â·log π: row 0 (Â = 1): 1, 3 → mean 2; row 1 (Â = −2): −1 → mean −1; batch mean 0.5; k = 2
    lp = leaf(LP)
    loss, meta = rl.grpo_microbatch_train_step(lp, MASK, 2, "reinforce_with_baseline", advantages=torch.tensor([[1.0], [-2.0]]))
    assert loss.item() == pytest.approx(0.25)
    # ∂L/∂log π_{i,t} = −Â_i m_{i,t} / (k·B·|o_i|): −1/8 on row 0, +2/4 on row 1
    torch.testing.assert_close(lp.grad, torch.tensor([[-0.125, -0.125, 0.0], [0.5, 0.0, 0.0]], dtype=F64))
    torch.testing.assert_close(meta["per_token_loss"], torch.tensor([[1.0, 3.0, 0.7], [-1.0, -4.0, -18.0]], dtype=F64))


def test_grpo_aggregation_is_the_course_masked_mean_per_sequence_then_mean():
    log_probs, old, _, mask, adv = random_batch(1, empty_row=False)
    lp = leaf(log_probs)
    loss, _ = rl.grpo_microbatch_train_step(lp, mask, 3, "grpo_clip", advantages=adv, old_log_probs=old, cliprange=0.2)
    per_token, _ = rl.policy_gradient_loss(log_probs, "grpo_clip", advantages=adv, old_log_probs=old, cliprange=0.2)
    course = rl.masked_mean(per_token, mask, dim=-1).mean() / 3
    assert loss.item() == pytest.approx(course.item(), abs=1e-12)


def test_grpo_empty_row_contributes_zero_not_nan():
    log_probs, old, _, mask, adv = random_batch(2)
    assert not mask[4].any()
    lp = leaf(log_probs)
    loss, _ = rl.grpo_microbatch_train_step(lp, mask, 1, "grpo_clip", advantages=adv, old_log_probs=old, cliprange=0.2)
    assert torch.isfinite(loss) and torch.isfinite(lp.grad).all() and (lp.grad[4] == 0).all()
    # equal to the course's form over the non-empty rows, rescaled by (B − 1)/B
    per_token, _ = rl.policy_gradient_loss(log_probs, "grpo_clip", advantages=adv, old_log_probs=old, cliprange=0.2)
    rows = rl.masked_mean(per_token, mask, dim=-1)
    assert torch.isnan(rows[4])
    assert loss.item() == pytest.approx(torch.nansum(rows).item() / len(rows), abs=1e-12)


def test_grpo_kl_penalty_and_aggregation_choices():
    log_probs, old, ref, mask, adv = random_batch(4)
    kw = dict(advantages=adv, old_log_probs=old, cliprange=(0.2, 0.28))
    per_token, _ = rl.policy_gradient_loss(log_probs, "grpo_clip", **kw)
    with_kl = per_token + 0.1 * rl.kl_k3(log_probs, ref)
    loss, meta = rl.grpo_microbatch_train_step(leaf(log_probs), mask, 1, "grpo_clip", ref_log_probs=ref, kl_coef=0.1, **kw)
    assert torch.equal(loss, rl.seq_mean_token_mean(with_kl, mask)) and torch.equal(meta["per_token_loss"], with_kl)
    loss, _ = rl.grpo_microbatch_train_step(leaf(log_probs), mask, 1, "grpo_clip", aggregation="token_mean", **kw)
    assert torch.equal(loss, rl.token_mean(per_token, mask))
    loss, _ = rl.grpo_microbatch_train_step(leaf(log_probs), mask, 1, "grpo_clip", aggregation="fixed_length_mean", **kw)
    assert torch.equal(loss, rl.fixed_length_mean(per_token, mask, max_length=mask.shape[1]))


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**31 - 1), st.sampled_from([2, 4, 8]),
       st.sampled_from(["no_baseline", "reinforce_with_baseline", "grpo_clip", "cispo"]), st.booleans())
def test_grpo_gradient_accumulation_k_micro_batches_equal_one_batch(seed, k, loss_type, with_kl):
    # an empty row, except with k = 8 (one row per micro-batch: an all-empty micro-batch raises, see below)
    log_probs, old, ref, mask, adv = random_batch(seed, empty_row=k < 8)
    kw = dict(raw_rewards=adv, advantages=adv, old_log_probs=old, cliprange=(0.2, 0.28), ref_log_probs=ref,
              kl_coef=0.05 if with_kl else 0.0)
    full = leaf(log_probs)
    loss_full, _ = rl.grpo_microbatch_train_step(full, mask, 1, loss_type, **kw)
    micro, total = leaf(log_probs), 0.0
    for idx, m in zip(torch.arange(len(mask)).chunk(k), mask.chunk(k)):
        part = {name: (v[idx] if isinstance(v, torch.Tensor) else v) for name, v in kw.items()}
        total = total + rl.grpo_microbatch_train_step(micro[idx], m, k, loss_type, **part)[0].item()
    torch.testing.assert_close(micro.grad, full.grad, atol=1e-12, rtol=0)
    assert total == pytest.approx(loss_full.item(), abs=1e-12)


def test_token_mean_accumulates_with_the_global_token_count():
    log_probs, old, _, mask, adv = random_batch(5)
    kw = dict(advantages=adv, old_log_probs=old, cliprange=0.2)
    full = leaf(log_probs)
    rl.grpo_microbatch_train_step(full, mask, 1, "grpo_clip", aggregation="token_mean", **kw)
    agg = functools.partial(rl.token_mean, num_tokens=int(mask.sum()))
    micro = leaf(log_probs)
    for idx in torch.arange(len(mask)).chunk(4):
        rl.grpo_microbatch_train_step(micro[idx], mask[idx], 1, "grpo_clip", aggregation=agg, advantages=adv[idx],
                                      old_log_probs=old[idx], cliprange=0.2)
    torch.testing.assert_close(micro.grad, full.grad, atol=1e-12, rtol=0)


def test_grpo_microbatch_errors_name_the_argument():
    kw = dict(advantages=torch.ones(2, 1, dtype=F64), old_log_probs=LP.clone(), cliprange=0.2)
    with pytest.raises(ValueError, match="ref_log_probs"):
        rl.grpo_microbatch_train_step(leaf(LP), MASK, 1, "grpo_clip", kl_coef=0.1, **kw)
    with pytest.raises(ValueError, match="kl_coef"):
        rl.grpo_microbatch_train_step(leaf(LP), MASK, 1, "grpo_clip", kl_coef=-0.1, ref_log_probs=LP, **kw)
    with pytest.raises(ValueError, match="aggregation"):
        rl.grpo_microbatch_train_step(leaf(LP), MASK, 1, "grpo_clip", aggregation="sum", **kw)
    with pytest.raises(ValueError, match="response_mask"):
        rl.grpo_microbatch_train_step(leaf(LP), MASK[:1], 1, "grpo_clip", **kw)
    with pytest.raises(ValueError, match="gradient_accumulation_steps"):
        rl.grpo_microbatch_train_step(leaf(LP), MASK, 0, "grpo_clip", **kw)
    with pytest.raises(ValueError, match="cliprange"):
        rl.grpo_microbatch_train_step(leaf(LP), MASK, 1, "grpo_clip", advantages=kw["advantages"], old_log_probs=LP)
    with pytest.raises(ValueError, match="completion_mask"):  # a micro-batch without a single response token
        rl.grpo_microbatch_train_step(leaf(LP), torch.zeros_like(MASK), 1, "grpo_clip", **kw)
