"""Importance-sampling corrections for a sampler that is not the policy (rlbook.importance_correction).

Closed forms written out with Python floats for every mode; properties (weights ≤ C, the mask band
symmetric in 1/C and C, "none" the identity, weights detached); named errors; the course-standard
step with a correction; and GRPO training: with the policy as its own sampler every mode is the
uncorrected run bit for bit, and with a sampler whose log-probs differ (noise injected through
``train_grpo(sampler=)``) the step is −lr·∇ of the TIS-weighted loss, not of the unweighted one nor of
one whose weights carry a gradient.
"""

import copy
import dataclasses
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import lm_helpers
import rlbook as rl
from rlbook.algos.grpo import GRPOConfig, grpo_step
from rlbook.lm.logprobs import completion_log_probs
from rlbook.lm.model import build_policy, policy_config
from rlbook.lm.sampling import sample_completions
from rlbook.lm.task import AdditionTask
from rlbook.lm.tokenizer import build_char_tokenizer, forbidden_token_ids

MODES = rl.IS_CORRECTION_MODES
TOK = build_char_tokenizer()
FORBIDDEN = forbidden_token_ids(TOK)

# one batch, two sequences: row 0 has 3 response tokens, row 1 has 2 (then padding)
OLD = [[-1.0, -0.5, -2.0, 0.0], [-0.2, -3.0, 0.0, 0.0]]
SAMPLER = [[-2.0, -0.4, -0.1, 0.0], [-0.3, -1.0, 0.0, 0.0]]
MASK = [[True, True, True, False], [True, True, False, False]]
C = 2.0


def _rho():
    """ρ_t = exp(old − sampler) on the response, by hand."""
    return [[math.exp(o - s) for o, s, m in zip(ro, rs, rm) if m] for ro, rs, rm in zip(OLD, SAMPLER, MASK)]


def _pad(rows, width=4):
    return [r + [0.0] * (width - len(r)) for r in rows]


def _correct(mode, cap=C, dtype=torch.float64):
    return rl.importance_correction(torch.tensor(OLD, dtype=dtype), torch.tensor(SAMPLER, dtype=dtype),
                                    torch.tensor(MASK), mode, cap)


def test_token_truncate_is_min_rho_c():
    rho = _rho()  # row 0: e^1, e^-0.1, e^-1.9; row 1: e^0.1, e^-2
    assert rho[0][0] > C  # the first token is truncated
    want = _pad([[min(r, C) for r in row] for row in rho])
    w, kept, stats = _correct("token_truncate")
    torch.testing.assert_close(w, torch.tensor(want, dtype=torch.float64), rtol=1e-15, atol=0)
    assert torch.equal(kept, torch.tensor(MASK))
    assert stats["truncated_fraction"].item() == pytest.approx(1 / 5)
    assert stats["masked_fraction"].item() == 0.0
    log_ratios = [o - s for ro, rs, rm in zip(OLD, SAMPLER, MASK) for o, s, m in zip(ro, rs, rm) if m]
    assert stats["log_ratio_mean"].item() == pytest.approx(sum(log_ratios) / 5)
    assert stats["weight_mean"].item() == pytest.approx(sum(min(r, C) for row in rho for r in row) / 5)


def test_token_mask_keeps_rho_inside_the_band_and_zeroes_outside():
    rho = _rho()
    inside = [[1 / C <= r <= C for r in row] for row in rho]
    assert inside == [[False, True, False], [True, False]]  # e^1 > 2, e^-1.9 < 1/2, e^-2 < 1/2
    want = _pad([[r if ok else 0.0 for r, ok in zip(row, oks)] for row, oks in zip(rho, inside)])
    w, kept, stats = _correct("token_mask")
    torch.testing.assert_close(w, torch.tensor(want, dtype=torch.float64), rtol=1e-15, atol=0)
    assert kept.tolist() == [[False, True, False, False], [True, False, False, False]]
    assert stats["masked_fraction"].item() == pytest.approx(3 / 5)
    assert stats["truncated_fraction"].item() == 0.0


def test_sequence_modes_use_trls_product_ratio():
    # row 0: Σ log ρ = 1 − 0.1 − 1.9 = −1.0 → e^−1 (inside [½, 2]? no: 0.368 < ½); row 1: 0.1 − 2 = −1.9
    seq = [math.exp(sum(o - s for o, s, m in zip(ro, rs, rm) if m)) for ro, rs, rm in zip(OLD, SAMPLER, MASK)]
    assert seq[0] == pytest.approx(math.exp(-1.0)) and seq[1] == pytest.approx(math.exp(-1.9))
    w, kept, _ = _correct("sequence_truncate")
    want = _pad([[min(seq[0], C)] * 3, [min(seq[1], C)] * 2])
    torch.testing.assert_close(w, torch.tensor(want, dtype=torch.float64), rtol=1e-14, atol=0)
    assert torch.equal(kept, torch.tensor(MASK))
    w, kept, stats = _correct("sequence_mask")
    assert not kept.any() and not w.any() and stats["masked_fraction"].item() == 1.0  # both rows below ½
    w, kept, _ = _correct("sequence_mask", cap=3.0)  # band [⅓, 3]: row 0 (0.368) in, row 1 (0.150) out
    torch.testing.assert_close(w, torch.tensor(_pad([[seq[0]] * 3, []]), dtype=torch.float64), rtol=1e-14, atol=0)
    assert kept.tolist() == [[True, True, True, False], [False] * 4]


def test_geometric_modes_use_the_mean_log_ratio():
    geo = [math.exp(-1.0 / 3), math.exp(-1.9 / 2)]  # 0.7165, 0.3867
    w, kept, _ = _correct("geometric_truncate")
    torch.testing.assert_close(w, torch.tensor(_pad([[geo[0]] * 3, [geo[1]] * 2]), dtype=torch.float64),
                               rtol=1e-14, atol=0)
    w, kept, stats = _correct("geometric_mask")
    torch.testing.assert_close(w, torch.tensor(_pad([[geo[0]] * 3, []]), dtype=torch.float64), rtol=1e-14, atol=0)
    assert kept.tolist() == [[True, True, True, False], [False] * 4]
    assert stats["masked_fraction"].item() == pytest.approx(2 / 5)


def test_none_is_one_on_the_response():
    w, kept, stats = _correct("none")
    assert w.tolist() == [[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0]] and torch.equal(kept, torch.tensor(MASK))
    assert stats["masked_fraction"].item() == 0.0 and stats["truncated_fraction"].item() == 0.0


log_probs = st.lists(st.floats(-6.0, 0.0), min_size=12, max_size=12)


def _tensors(a, b, m):
    old = torch.tensor(a, dtype=torch.float64).reshape(3, 4)
    sampler = torch.tensor(b, dtype=torch.float64).reshape(3, 4)
    return old, sampler, torch.tensor(m).reshape(3, 4)


@settings(max_examples=60, deadline=None)
@given(log_probs, log_probs, st.lists(st.booleans(), min_size=12, max_size=12), st.floats(1.0, 10.0),
       st.sampled_from(MODES))
def test_weights_never_exceed_the_cap_and_vanish_off_the_response(a, b, m, cap, mode):
    old, sampler, mask = _tensors(a, b, m)
    w, kept, _ = rl.importance_correction(old, sampler, mask, mode, cap)
    assert (w <= cap * (1 + 1e-12)).all() and (w >= 0).all()
    assert not w[~mask].any() and not kept[~mask].any()
    assert not w.requires_grad


@settings(max_examples=60, deadline=None)
@given(log_probs, log_probs, st.lists(st.booleans(), min_size=12, max_size=12), st.floats(1.0, 10.0),
       st.sampled_from(["token_mask", "sequence_mask", "geometric_mask"]))
def test_the_mask_band_is_symmetric_in_one_over_c_and_c(a, b, m, cap, mode):
    """Swapping the two distributions turns ρ into 1/ρ: the same tokens are kept."""
    old, sampler, mask = _tensors(a, b, m)
    _, kept, _ = rl.importance_correction(old, sampler, mask, mode, cap)
    _, kept_swapped, _ = rl.importance_correction(sampler, old, mask, mode, cap)
    log_level = {"token_mask": old - sampler,
                 "sequence_mask": ((old - sampler) * mask).sum(-1, keepdim=True).expand_as(old),
                 "geometric_mask": (((old - sampler) * mask).sum(-1, keepdim=True)
                                    / mask.sum(-1, keepdim=True).clamp(min=1)).expand_as(old)}[mode]
    on_edge = (log_level.abs() - math.log(cap)).abs() < 1e-9  # ties at exactly ±log C may round either way
    assert torch.equal(kept | on_edge, kept_swapped | on_edge)


@settings(max_examples=40, deadline=None)
@given(log_probs, log_probs, st.lists(st.booleans(), min_size=12, max_size=12), st.floats(1.0, 10.0))
def test_mode_none_is_the_identity(a, b, m, cap):
    old, sampler, mask = _tensors(a, b, m)
    w, kept, _ = rl.importance_correction(old, sampler, mask, "none", cap)
    assert torch.equal(w, mask.to(w.dtype)) and torch.equal(kept, mask)


@pytest.mark.parametrize("mode", MODES)
def test_an_identical_sampler_gives_weights_of_exactly_one(mode):
    old = torch.tensor(OLD)
    w, kept, _ = rl.importance_correction(old, old.clone(), torch.tensor(MASK), mode, 1.0)
    assert torch.equal(w, torch.tensor(MASK).float()) and torch.equal(kept, torch.tensor(MASK))


def test_weights_are_detached_from_inputs_that_carry_a_gradient():
    old = torch.tensor(OLD, requires_grad=True)
    sampler = torch.tensor(SAMPLER, requires_grad=True)
    for mode in MODES:
        w, _, stats = rl.importance_correction(old, sampler, torch.tensor(MASK), mode, C)
        assert not w.requires_grad and w.grad_fn is None
        assert not any(v.requires_grad for v in stats.values())
    assert not rl.sampler_log_ratio(old, sampler, torch.tensor(MASK)).requires_grad


def test_bad_inputs_raise_naming_the_argument():
    old, s, m = torch.tensor(OLD), torch.tensor(SAMPLER), torch.tensor(MASK)
    with pytest.raises(ValueError, match="`mode`.*token_truncate"):
        rl.importance_correction(old, s, m, "tis", C)
    with pytest.raises(ValueError, match="`cap`"):
        rl.importance_correction(old, s, m, "token_truncate", 0.5)
    with pytest.raises(ValueError, match="`cap`"):
        rl.importance_correction(old, s, m, "token_truncate", float("inf"))
    with pytest.raises(ValueError, match="sampler_log_probs"):
        rl.importance_correction(old, s[:, :3], m, "token_truncate", C)
    with pytest.raises(ValueError, match="response_mask"):
        rl.importance_correction(old, s, m[:, :3], "token_truncate", C)
    with pytest.raises(ValueError, match="trainer_old_log_probs"):
        rl.importance_correction(old[0], s[0], m[0], "token_truncate", C)
    bad = s.clone()
    bad[0, 0] = float("nan")
    with pytest.raises(ValueError, match="sampler_log_probs.*NaN"):
        rl.importance_correction(old, bad, m, "token_truncate", C)
    bad = old.clone()
    bad[1, 1] = 0.5
    with pytest.raises(ValueError, match="trainer_old_log_probs.*≤ 0"):
        rl.importance_correction(bad, s, m, "token_mask", C)
    bad[1, 1], bad[1, 3] = -1.0, 0.5  # off the response: not a sampled token, ignored
    rl.importance_correction(bad, s, m, "token_mask", C)


# ------------------------------ the course-standard step ------------------------------


def _step_inputs():
    g = torch.Generator().manual_seed(0)
    lp = (-torch.rand(4, 5, generator=g, dtype=torch.float64) * 2).requires_grad_(True)
    old = (lp.detach() - 0.1 * torch.rand(4, 5, generator=g, dtype=torch.float64)).clamp(max=0.0)
    sampler = (old - 0.8 * torch.randn(4, 5, generator=g, dtype=torch.float64)).clamp(max=0.0)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 1, 0, 0, 0], [1, 1, 1, 1, 0]], dtype=torch.bool)
    adv = torch.tensor([[1.0], [-0.5], [0.7], [-1.2]], dtype=torch.float64)
    return lp, old, sampler, mask, adv


@pytest.mark.parametrize("mode", ["token_truncate", "token_mask", "sequence_truncate", "geometric_mask"])
def test_step_multiplies_the_surrogate_by_the_detached_weights(mode):
    lp, old, sampler, mask, adv = _step_inputs()
    loss, meta = rl.grpo_microbatch_train_step(lp, mask, 1, "grpo_clip", advantages=adv, old_log_probs=old,
                                               cliprange=0.2, sampler_log_probs=sampler, is_correction=mode, is_cap=C)
    got = lp.grad.clone()
    # by hand: ℓ = −min(ρÂ, clip(ρ)Â), ρ = exp(lp − old); weights from the closed form of the mode
    w, kept, _ = rl.importance_correction(old, sampler, mask, mode, C)
    x = torch.tensor(lp.detach().tolist(), dtype=torch.float64, requires_grad=True)
    ratio = torch.exp(x - old)
    per_token = -torch.minimum(ratio * adv, ratio.clamp(0.8, 1.2) * adv) * w
    m = mask.double()
    want = ((per_token * m).sum(1) / m.sum(1)).mean()
    want.backward()
    torch.testing.assert_close(loss.detach(), want.detach(), rtol=1e-12, atol=0)
    torch.testing.assert_close(got, x.grad, rtol=1e-12, atol=1e-15)
    assert torch.equal(meta["is_weights"], w) and torch.equal(meta["is_kept"], kept)
    assert (w[mask] != 1).any()  # the weights act


def test_step_with_mode_none_or_an_identical_sampler_is_bit_identical():
    lp, old, sampler, mask, adv = _step_inputs()
    args = dict(advantages=adv, old_log_probs=old, cliprange=0.2, kl_coef=0.1, ref_log_probs=old - 0.3)
    base, _ = rl.grpo_microbatch_train_step(lp, mask, 2, "grpo_clip", **args)
    grad = lp.grad.clone()
    for mode, s in [("none", sampler), ("token_truncate", old.clone()), ("token_mask", old.clone()),
                    ("sequence_mask", old.clone()), ("geometric_truncate", old.clone())]:
        lp.grad = None
        loss, _ = rl.grpo_microbatch_train_step(lp, mask, 2, "grpo_clip", sampler_log_probs=s, is_correction=mode, **args)
        assert torch.equal(loss, base) and torch.equal(lp.grad, grad), mode


def test_step_on_policy_uses_the_current_log_probs_as_pi_old():
    lp, _, sampler, mask, adv = _step_inputs()
    rl.grpo_microbatch_train_step(lp, mask, 1, "reinforce_with_baseline", advantages=adv, sampler_log_probs=sampler,
                                  is_correction="token_truncate", is_cap=C)
    w, _, _ = rl.importance_correction(lp.detach(), sampler, mask, "token_truncate", C)
    m = mask.double()
    torch.testing.assert_close(lp.grad, -(adv * w * m) / m.sum(1, keepdim=True) / 4, rtol=1e-12, atol=1e-15)


def test_step_rejects_a_bad_correction_naming_the_argument():
    lp, old, sampler, mask, adv = _step_inputs()
    args = dict(advantages=adv, old_log_probs=old, cliprange=0.2)
    with pytest.raises(ValueError, match="`sampler_log_probs` is required"):
        rl.grpo_microbatch_train_step(lp, mask, 1, "grpo_clip", is_correction="token_truncate", **args)
    with pytest.raises(ValueError, match="`is_correction`"):
        rl.grpo_microbatch_train_step(lp, mask, 1, "grpo_clip", sampler_log_probs=sampler, is_correction="tis", **args)
    with pytest.raises(ValueError, match="`is_cap`"):
        rl.grpo_microbatch_train_step(lp, mask, 1, "grpo_clip", sampler_log_probs=sampler,
                                      is_correction="token_mask", is_cap=0.9, **args)


# ------------------------------ GRPOConfig and training ------------------------------


def test_config_validates_the_correction_fields():
    assert GRPOConfig().is_correction == "none" and GRPOConfig().is_cap == 2.0
    for mode in MODES:
        GRPOConfig(is_correction=mode)
    with pytest.raises(ValueError, match="`is_correction`"):
        GRPOConfig(is_correction="tis")
    for cap in (0.99, float("nan"), float("inf"), "2"):
        with pytest.raises(ValueError, match="`is_cap`"):
            GRPOConfig(is_cap=cap)
    with pytest.raises(ValueError, match="`sampler`"):
        rl.train_grpo(_tiny_policy(), TOK, AdditionTask(), _small(num_steps=1), progress=False, sampler="vllm")


def _tiny_policy(seed=0):
    return build_policy(policy_config(TOK, n_layer=1, n_embd=32, n_head=2), seed=seed, device="cpu")


def _small(**kw):
    base = dict(group_size=4, prompts_per_step=4, num_steps=3, max_new_tokens=5, device="cpu", lr=1e-3)
    base.update(kw)
    return GRPOConfig(**base)


def _train(config, sampler=None):
    policy = _tiny_policy()
    hist = rl.train_grpo(policy, TOK, AdditionTask(), config, progress=False, sampler=sampler)
    return policy, hist


@pytest.mark.usefixtures("one_thread")
def test_with_the_policy_as_its_own_sampler_every_correction_is_the_uncorrected_run_bit_for_bit():
    base_policy, base = _train(_small())
    for mode in MODES[1:]:
        policy, hist = _train(_small(is_correction=mode, is_cap=1.0 if "mask" in mode else 2.0))
        assert set(hist.metrics) == set(base.metrics) | {"is_log_ratio_mean", "is_weight_mean", "is_truncated_fraction",
                                                         "is_masked_fraction"}
        for name, values in base.metrics.items():
            np.testing.assert_array_equal(hist[name], np.asarray(values), err_msg=f"{mode}: {name}")
        assert all(torch.equal(a, b) for a, b in zip(policy.state_dict().values(), base_policy.state_dict().values())), mode
        assert list(hist["is_weight_mean"]) == [1.0] * 3 and list(hist["is_masked_fraction"]) == [0.0] * 3
        assert list(hist["is_log_ratio_mean"]) == [0.0] * 3


class NoisySampler:
    """The policy's own sampler, reporting log-probs off by noise (a sampler that is not the trainer)."""

    def __init__(self, scale=0.5, seed=7):
        self.g, self.scale, self.reported = torch.Generator().manual_seed(seed), scale, []

    def __call__(self, policy, prompt_ids, prompt_mask, **kwargs):
        out = sample_completions(policy, prompt_ids, prompt_mask, **kwargs)
        noise = self.scale * torch.randn(out.log_probs.shape, generator=self.g, dtype=out.log_probs.dtype)
        reported = torch.where(out.completion_mask, (out.log_probs + noise).clamp(max=0.0), torch.zeros_like(noise))
        self.reported.append(reported)
        return dataclasses.replace(out, log_probs=reported)


@pytest.mark.usefixtures("one_thread")
def test_a_sampler_that_is_not_the_policy_is_logged_and_corrected():
    sampler = NoisySampler()
    _, hist = _train(_small(is_correction="token_truncate"), sampler=sampler)
    assert len(sampler.reported) == 3
    assert all(v != 0 for v in hist["is_log_ratio_mean"]) and all(0 < v < 1 for v in hist["is_truncated_fraction"])
    # an identical sampler plugged in through the hook: π_old is recomputed by the trainer (to rounding)
    _, same = _train(_small(is_correction="token_truncate"), sampler=sample_completions)
    assert max(abs(v) for v in same["is_log_ratio_mean"]) < 1e-6 and list(same["is_truncated_fraction"]) == [0.0] * 3


def _rescore(policy, seen):
    """Log π (B, T) of the recorded completions, re-encoded from their text, one prompt per row."""
    prompt_ids, prompt_mask, completion_ids, mask = lm_helpers.encode_seen(TOK, seen)
    return completion_log_probs(policy, prompt_ids, completion_ids, prompt_mask, forbidden_ids=FORBIDDEN,
                                completion_mask=mask), mask


class RecordingTask(AdditionTask):
    """Addition prompts with a parity reward (mixed groups) that records what it scores."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def reward(self, prompt, completion):
        self.seen.append((prompt, completion))
        return float(sum(map(ord, completion)) % 2)


@pytest.mark.usefixtures("one_thread")
def test_grpo_step_is_minus_lr_times_the_gradient_of_the_tis_weighted_loss():
    """SGD step = −lr·∇ agg(min(ρ_t, C)·ℓ_t) with ρ_t = π_old/π_s treated as data. Fails if the weights
    are ignored (∇ of the unweighted loss) or carry a gradient (∇ with ρ_t a function of θ)."""
    cap = 1.5  # not the default C = 2, so a loop that ignores is_cap fails
    cfg = _small(prompts_per_step=4, group_size=4, max_grad_norm=1e9, log_ref_kl=False,
                 is_correction="token_truncate", is_cap=cap)
    policy = _tiny_policy().double().eval()
    before, task, sampler, lr = copy.deepcopy(policy), RecordingTask(), NoisySampler(scale=0.6), 0.5
    opt = torch.optim.SGD(policy.parameters(), lr=lr)
    metrics = grpo_step(policy, None, opt, TOK, task, cfg, torch.Generator().manual_seed(0), FORBIDDEN, sampler=sampler)
    step = torch.cat([(a - b).reshape(-1) for a, b in zip(policy.parameters(), before.parameters())])

    lp, mask = _rescore(before, task.seen)
    lp = lp.double()
    s = sampler.reported[0].double()
    assert s.shape == lp.shape
    rewards = torch.tensor([float(sum(map(ord, o)) % 2) for _, o in task.seen], dtype=torch.float64).reshape(-1, 4)
    adv = ((rewards - rewards.mean(1, keepdim=True)) / (rewards.std(1, unbiased=False, keepdim=True) + 1e-6)).reshape(-1, 1)
    assert (adv != 0).any()
    m = mask.double()

    def loss_with(weights):
        ratio = torch.exp(lp - lp.detach())
        per_token = -torch.minimum(ratio * adv, ratio.clamp(0.8, 1.2) * adv) * weights
        return ((per_token * m).sum(1) / m.sum(1)).mean()

    def grad(loss):
        return torch.cat([g.reshape(-1) for g in torch.autograd.grad(loss, list(before.parameters()), retain_graph=True)])

    w = torch.where(mask, torch.exp(lp.detach() - s).clamp(max=cap), torch.zeros_like(lp))
    assert (w[mask] == cap).any() and ((w[mask] > 1.05) & (w[mask] < cap)).any() and (w[mask] < 0.9).any()
    want = grad(loss_with(w))
    torch.testing.assert_close(step, -lr * want, rtol=1e-4, atol=1e-9)
    ignored = grad(loss_with(torch.ones_like(lp)))
    attached = grad(loss_with(torch.where(mask, torch.exp(lp - s).clamp(max=cap), torch.zeros_like(lp))))
    other_cap = grad(loss_with(torch.where(mask, torch.exp(lp.detach() - s).clamp(max=2.0), torch.zeros_like(lp))))
    for wrong in (ignored, attached, other_cap):  # each alternative is far outside the tolerance
        assert (wrong - want).norm() > 0.02 * want.norm()
    assert metrics["is_truncated_fraction"] > 0
