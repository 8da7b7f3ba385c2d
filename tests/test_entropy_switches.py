"""Entropy management as GRPOConfig switches: the entropy bonus, top-entropy tokens, Clip-Cov, KL-Cov.

Each switch's update is checked against an independent autograd computation of the loss written
out by hand (one GRPO step with SGD on a tiny float64 model is −lr·∇ of that loss), and the nearby
wrong losses (the bonus detached or with its sign flipped, the low-entropy tokens kept, the
covariance's sign flipped, the clipped surrogate under KL-Cov) are shown to be far outside the
tolerance. At the defaults the loop calls the course-standard step exactly as before the switches
existed, and parameters of a control that is off change nothing, bit for bit. Bad values raise
errors naming the field.

Sources: Cui et al. 2025, arXiv:2505.22617 (Clip-Cov eq. 10, KL-Cov eq. 11); Wang et al. 2025,
arXiv:2506.01939 (top-20 % "forking" tokens); TRL 1.16's ``entropy_coef`` and ``top_entropy_quantile``.
"""

import copy
import inspect
import math

import numpy as np
import pytest
import torch

import lm_helpers
import rlbook as rl
import rlbook.algos.grpo as grpo_module
from rlbook.algos.grpo import GRPOConfig, grpo_step
from rlbook.lm.logprobs import completion_log_probs
from rlbook.lm.model import build_policy, policy_config
from rlbook.lm.task import AdditionTask
from rlbook.lm.tokenizer import build_char_tokenizer, forbidden_token_ids
from test_is_corrections import RecordingTask

TOK = build_char_tokenizer()
FORBIDDEN = forbidden_token_ids(TOK)
LR = 0.5


def _tiny_policy(seed=0):
    return build_policy(policy_config(TOK, n_layer=1, n_embd=32, n_head=2), seed=seed, device="cpu")


def _config(**switches):
    base = dict(group_size=4, prompts_per_step=4, num_steps=1, max_new_tokens=5, device="cpu", lr=1e-3,
                max_grad_norm=1e9, log_ref_kl=False)
    return GRPOConfig(**{**base, **switches})


def _one_step(**switches):
    """One grpo_step with SGD(lr) on a float64 tiny model: (step, model before, metrics, by-hand tensors).

    The tensors are rescored independently from the recorded texts (one prompt per row): log π (with
    grad through ``before``), entropy (with grad), the mask, and the group advantages of the parity
    reward, (r − mean)/(population std + 1e-6)."""
    policy = _tiny_policy().double().eval()
    before, task = copy.deepcopy(policy), RecordingTask()
    opt = torch.optim.SGD(policy.parameters(), lr=LR)
    metrics = grpo_step(policy, None, opt, TOK, task, _config(**switches), torch.Generator().manual_seed(0), FORBIDDEN)
    step = torch.cat([(a - b).reshape(-1) for a, b in zip(policy.parameters(), before.parameters())])
    prompt_ids, prompt_mask, completion_ids, mask = lm_helpers.encode_seen(TOK, task.seen)
    lp, ent = completion_log_probs(before, prompt_ids, completion_ids, prompt_mask, forbidden_ids=FORBIDDEN,
                                   completion_mask=mask, with_entropy=True)
    rewards = torch.tensor([float(sum(map(ord, o)) % 2) for _, o in task.seen], dtype=torch.float64).reshape(-1, 4)
    adv = ((rewards - rewards.mean(1, keepdim=True)) / (rewards.std(1, unbiased=False, keepdim=True) + 1e-6)).reshape(-1, 1)
    assert (adv != 0).any()
    return step, before, metrics, lp.double(), ent.double(), mask, adv


def _grad(before, loss):
    return torch.cat([g.reshape(-1) for g in torch.autograd.grad(loss, list(before.parameters()), retain_graph=True)])


def _surrogate(lp, adv):
    """GRPO's clipped surrogate per token at ρ = π_θ/π_old = 1 (value 1, gradient ∇log π)."""
    ratio = torch.exp(lp - lp.detach())
    return -torch.minimum(ratio * adv, ratio.clamp(0.8, 1.2) * adv)


def _seq_mean_token_mean(per_token, mask):
    m = mask.double()
    return ((per_token * m).sum(1) / m.sum(1)).mean()


def _token_mean(x, mask):
    m = mask.double()
    return (x * m).sum() / m.sum()


def _top_share(values, mask, share):
    """The ⌈share·N⌉ masked positions of largest value, by a Python sort (N = masked tokens)."""
    cells = sorted(((float(values[i, t]), i, t) for i, t in mask.nonzero().tolist()), reverse=True)
    keep = torch.zeros_like(mask)
    for _, i, t in cells[: math.ceil(share * len(cells) - 1e-9)]:
        keep[i, t] = True
    return keep


def _assert_step_is(step, want, wrongs):
    torch.testing.assert_close(step, -LR * want, rtol=1e-4, atol=1e-9)
    for name, wrong in wrongs.items():  # each alternative is far outside the tolerance
        assert (wrong - want).norm() > 0.02 * want.norm(), name


@pytest.mark.usefixtures("one_thread")
def test_the_entropy_bonus_is_minus_c_times_the_token_mean_entropy_with_its_gradient():
    """SGD step = −lr·∇[L_pg − c·H̄], H̄ the token mean of the entropy. Fails if the entropy is detached
    (∇L_pg), if the bonus's sign is flipped (+c·H̄), or if c is not the one configured (c = 0.5)."""
    c = 1.0  # the near-uniform entropy of an untrained model has a small gradient: a large c makes it count
    step, before, metrics, lp, ent, mask, adv = _one_step(entropy_coef=c)
    pg = _seq_mean_token_mean(_surrogate(lp, adv), mask)
    want = _grad(before, pg - c * _token_mean(ent, mask))
    _assert_step_is(step, want, {"detached": _grad(before, pg), "sign flipped": _grad(before, pg + c * _token_mean(ent, mask)),
                                 "c = 0.5": _grad(before, pg - 0.5 * _token_mean(ent, mask))})
    assert "entropy_kept_fraction" not in metrics and "cov_selected_fraction" not in metrics


@pytest.mark.usefixtures("one_thread")
def test_top_entropy_quantile_keeps_the_policy_gradient_of_the_highest_entropy_tokens_only():
    """SGD step = −lr·∇ agg(ℓ·e), e = 1 on the ⌈ρN⌉ highest-entropy response tokens, the normaliser
    unchanged. Fails if every token is kept, if the lowest-entropy ones are, or if the mean is over the
    kept tokens only."""
    rho = 0.25
    step, before, metrics, lp, ent, mask, adv = _one_step(top_entropy_quantile=rho)
    keep = _top_share(ent.detach(), mask, rho)
    low = _top_share(-ent.detach(), mask, rho)
    assert 0 < keep.sum() < mask.sum() and not torch.equal(keep, low)
    per_token = _surrogate(lp, adv)
    want = _grad(before, _seq_mean_token_mean(per_token * keep, mask))
    m, k = mask.double(), keep.double()
    kept_normaliser = ((per_token * k).sum(1) / k.sum(1).clamp(min=1)).mean()
    _assert_step_is(step, want, {"all tokens": _grad(before, _seq_mean_token_mean(per_token, mask)),
                                 "lowest entropy": _grad(before, _seq_mean_token_mean(per_token * low, mask)),
                                 "kept-token normaliser": _grad(before, kept_normaliser)})
    assert metrics["entropy_kept_fraction"].item() == pytest.approx(keep.sum().item() / m.sum().item())


@pytest.mark.usefixtures("one_thread")
def test_the_bonus_with_a_quantile_is_the_mean_entropy_of_the_kept_tokens():
    """TRL's composition: with ρ < 1 the bonus is the token mean over the tokens the policy term keeps."""
    c, rho = 1.0, 0.25
    step, before, _, lp, ent, mask, adv = _one_step(entropy_coef=c, top_entropy_quantile=rho)
    keep = _top_share(ent.detach(), mask, rho)
    pg = _seq_mean_token_mean(_surrogate(lp, adv) * keep, mask)
    want = _grad(before, pg - c * _token_mean(ent, keep))
    _assert_step_is(step, want, {"bonus over all tokens": _grad(before, pg - c * _token_mean(ent, mask)),
                                 "no bonus": _grad(before, pg)})


def _covariance(lp, adv, mask):
    """c_{i,t} = (A_i − Ā)(log π_{i,t} − mean log π), means over the response tokens (Cui et al. eq. 9)."""
    a = adv.expand_as(lp)
    lp = lp.detach()
    return ((a - a[mask].mean()) * (lp - lp[mask].mean())).masked_fill(~mask, 0.0)


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("band", [(0.0, 1e6), (-1e6, 0.0)])
def test_clip_cov_removes_the_gradient_of_the_high_covariance_tokens(band):
    """With r = 1 Clip-Cov removes every token whose covariance lies in the band (none is clipped at
    ρ = 1): with (0, 10⁶) those of positive covariance, with (−10⁶, 0) those of negative covariance
    (each band's bounds matter). SGD step = −lr·∇ agg(ℓ·1[c ∉ band]). Fails with no removal or with
    the other side removed (the covariance's sign flipped)."""
    low, high = band
    step, before, metrics, lp, ent, mask, adv = _one_step(entropy_control="clip_cov", clip_cov_ratio=1.0,
                                                          clip_cov_lb=low, clip_cov_ub=high)
    cov = _covariance(lp, adv, mask)
    removed = (cov > low) & (cov < high) & mask
    assert 0 < removed.sum() < mask.sum()
    per_token = _surrogate(lp, adv)
    want = _grad(before, _seq_mean_token_mean(per_token * ~removed, mask))
    flipped = (-cov > low) & (-cov < high) & mask
    _assert_step_is(step, want, {"no removal": _grad(before, _seq_mean_token_mean(per_token, mask)),
                                 "sign flipped": _grad(before, _seq_mean_token_mean(per_token * ~flipped, mask))})
    assert metrics["cov_selected_fraction"].item() == pytest.approx(removed.sum().item() / mask.sum().item())


@pytest.mark.usefixtures("one_thread")
def test_clip_cov_at_the_papers_ratio_removes_one_token_of_a_small_batch():
    """r = 2·10⁻⁴ of ~60 tokens: max(1, ⌊r·N⌋) = 1 token, drawn among those in the band."""
    _, _, metrics, _, _, mask, _ = _one_step(entropy_control="clip_cov", clip_cov_lb=0.0)
    assert metrics["cov_selected_fraction"].item() == pytest.approx(1 / mask.sum().item())


def _fixed_batch(seed=0, B=6, T=7):
    g = torch.Generator().manual_seed(seed)
    lp = -torch.rand(B, T, generator=g, dtype=torch.float64) * 3
    old = lp + 0.3 * torch.randn(B, T, generator=g, dtype=torch.float64)  # ratios outside the clip band too
    adv = 3 * torch.randn(B, 1, generator=g, dtype=torch.float64)
    lengths = torch.tensor([7, 3, 5, 1, 6, 4])
    mask = torch.arange(T)[None, :] < lengths[:, None]
    return lp, old, adv, mask


def test_kl_cov_in_the_step_is_the_unclipped_surrogate_plus_kappa_abs_log_ratio_on_the_top_covariance_tokens():
    """grpo_microbatch_train_step with entropy_control='kl_cov': ∇ of agg(−A·ρ + κ|log ρ|·1[top-k by c]),
    written by hand. Fails with the clipped surrogate, with κ's sign flipped, or with the lowest-covariance
    tokens penalised."""
    lp0, old, adv, mask = _fixed_batch()
    k, kappa = 0.25, 0.7
    lp = lp0.clone().requires_grad_(True)
    _, meta = rl.grpo_microbatch_train_step(lp, mask, 1, "grpo_clip", advantages=adv, old_log_probs=old, cliprange=0.2,
                                            aggregation="token_mean", entropy_control="kl_cov", kl_cov_ratio=k,
                                            kl_cov_coef=kappa)
    got = lp.grad.clone()
    cov = _covariance(lp0, adv, mask)
    n = int(mask.sum())
    top = _top_share(cov, mask, math.floor(k * n) / n)
    bottom = _top_share(-cov, mask, math.floor(k * n) / n)
    assert torch.equal(meta["cov_selected"], top) and int(top.sum()) == math.floor(k * n)

    def grad(per_token):
        x = lp0.clone().requires_grad_(True)
        (g,) = torch.autograd.grad(_token_mean(per_token(x), mask), x)
        return g

    ratio = lambda x: torch.exp(x - old)  # noqa: E731
    want = grad(lambda x: -adv * ratio(x) + kappa * (x - old).abs() * top)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-15)
    clipped = grad(lambda x: -torch.minimum(adv * ratio(x), adv * ratio(x).clamp(0.8, 1.2)) + kappa * (x - old).abs() * top)
    for wrong in (clipped, grad(lambda x: -adv * ratio(x) - kappa * (x - old).abs() * top),
                  grad(lambda x: -adv * ratio(x) + kappa * (x - old).abs() * bottom)):
        assert (wrong - want).norm() > 0.02 * want.norm()


def test_clip_cov_in_the_step_equals_the_papers_loss_with_the_same_draw():
    """The step's Clip-Cov (clipped tokens not eligible) equals rl.clip_cov_loss, token-mean aggregated,
    drawing from equally seeded generators; and differs from the plain clipped surrogate."""
    lp0, old, adv, mask = _fixed_batch(seed=1)  # 26 tokens, 9 clipped, 6 unclipped with covariance in (1, 5)
    lp = lp0.clone().requires_grad_(True)
    _, meta = rl.grpo_microbatch_train_step(lp, mask, 1, "grpo_clip", advantages=adv, old_log_probs=old, cliprange=0.2,
                                            aggregation="token_mean", entropy_control="clip_cov", clip_cov_ratio=0.1,
                                            generator=torch.Generator().manual_seed(5))
    x = lp0.clone().requires_grad_(True)
    per_token, removed = rl.clip_cov_loss(x, old, adv, mask, clip_eps=0.2, clip_fraction=0.1,
                                          generator=torch.Generator().manual_seed(5))
    assert torch.equal(meta["cov_selected"], removed) and int(removed.sum()) >= 2
    assert (meta["clipped"] & mask).any()  # clipped tokens exist and were not eligible
    assert not (removed & meta["clipped"]).any()
    (want,) = torch.autograd.grad(_token_mean(per_token, mask), x)
    torch.testing.assert_close(lp.grad, want, rtol=1e-12, atol=1e-15)
    y = lp0.clone().requires_grad_(True)
    plain = -torch.minimum(adv * torch.exp(y - old), adv * torch.exp(y - old).clamp(0.8, 1.2))
    (unremoved,) = torch.autograd.grad(_token_mean(plain, mask), y)
    assert (unremoved - want).norm() > 0.02 * want.norm()


@pytest.mark.usefixtures("one_thread")
def test_grpo_step_passes_the_kl_cov_settings_and_logs_the_share_it_penalised(monkeypatch):
    seen = []
    original = grpo_module.grpo_microbatch_train_step

    def spy(*args, **kwargs):
        seen.append(kwargs)
        return original(*args, **kwargs)

    monkeypatch.setattr(grpo_module, "grpo_microbatch_train_step", spy)
    _, _, metrics, _, _, mask, _ = _one_step(entropy_control="kl_cov", kl_cov_ratio=0.1, kl_cov_coef=0.3)
    assert seen[0]["entropy_control"] == "kl_cov" and (seen[0]["kl_cov_ratio"], seen[0]["kl_cov_coef"]) == (0.1, 0.3)
    n = int(mask.sum())
    assert metrics["cov_selected_fraction"].item() == pytest.approx(max(1, math.floor(0.1 * n)) / n)


# the keyword arguments the loop passed to the course-standard step before the entropy switches existed
_PRE_SWITCH_KWARGS = {"advantages", "old_log_probs", "cliprange", "aggregation", "ref_log_probs", "kl_coef",
                      "divergence_threshold", "divergence", "sampler_log_probs", "is_correction", "is_cap"}


@pytest.mark.usefixtures("one_thread")
def test_at_the_defaults_the_loop_calls_the_step_as_before_and_idle_parameters_change_nothing(monkeypatch):
    """Defaults: the step gets exactly the pre-switch arguments (so the loss is computed as before the
    switches existed); Clip-Cov / KL-Cov parameters with ``entropy_control="none"`` leave a 3-step run
    bit-identical (parameters by torch.equal, every metric), and no entropy-management metric is logged."""
    seen = []
    original = grpo_module.grpo_microbatch_train_step

    def spy(*args, **kwargs):
        seen.append(set(kwargs))
        return original(*args, **kwargs)

    monkeypatch.setattr(grpo_module, "grpo_microbatch_train_step", spy)
    base = dict(group_size=4, prompts_per_step=4, num_steps=3, max_new_tokens=5, device="cpu", lr=1e-3,
                format_coef=1.0, num_inner_epochs=2)
    policy = _tiny_policy()
    hist = rl.train_grpo(policy, TOK, AdditionTask(), GRPOConfig(**base), progress=False)
    assert seen and all(kw == _PRE_SWITCH_KWARGS for kw in seen)
    idle = _tiny_policy()
    idle_hist = rl.train_grpo(idle, TOK, AdditionTask(),
                              GRPOConfig(**base, entropy_coef=0.0, top_entropy_quantile=1.0, entropy_control="none",
                                         clip_cov_ratio=0.5, clip_cov_lb=-3.0, clip_cov_ub=0.5, kl_cov_ratio=0.9,
                                         kl_cov_coef=7.0), progress=False)
    assert all(torch.equal(a, b) for a, b in zip(policy.state_dict().values(), idle.state_dict().values()))
    assert set(hist.metrics) == set(idle_hist.metrics)
    assert not {"entropy_kept_fraction", "cov_selected_fraction"} & set(hist.metrics)
    for name, values in hist.metrics.items():
        np.testing.assert_array_equal(idle_hist[name], np.asarray(values), err_msg=name)


def test_the_defaults_are_the_papers_numbers_from_one_source():
    config = GRPOConfig()
    assert (config.entropy_coef, config.top_entropy_quantile, config.entropy_control) == (0.0, 1.0, "none")
    assert (config.clip_cov_ratio, (config.clip_cov_lb, config.clip_cov_ub)) == (rl.CLIP_COV_RATIO, rl.CLIP_COV_BOUNDS)
    assert (config.kl_cov_ratio, config.kl_cov_coef) == (rl.KL_COV_RATIO, rl.KL_COV_COEF)
    # Cui et al. 2025, §5: Clip-Cov r = 2e-4, (ω_low, ω_high) = (1, 5); KL-Cov k = 2e-3 (7B), β = 1
    assert (rl.CLIP_COV_RATIO, rl.CLIP_COV_BOUNDS, rl.KL_COV_RATIO, rl.KL_COV_COEF) == (2e-4, (1.0, 5.0), 2e-3, 1.0)
    clip = inspect.signature(rl.clip_cov_loss).parameters
    kl = inspect.signature(rl.kl_cov_loss).parameters
    assert (clip["clip_fraction"].default, clip["cov_low"].default, clip["cov_high"].default) == (2e-4, 1.0, 5.0)
    assert (kl["kl_fraction"].default, kl["kl_coef"].default) == (2e-3, 1.0)


@pytest.mark.parametrize("field, value", [("entropy_coef", -0.01), ("entropy_coef", float("nan")), ("entropy_coef", True),
                                          ("top_entropy_quantile", 0.0), ("top_entropy_quantile", 1.5),
                                          ("entropy_control", "entropy_bonus"), ("clip_cov_ratio", 0.0),
                                          ("clip_cov_ratio", 2.0), ("clip_cov_lb", 5.0), ("clip_cov_ub", float("inf")),
                                          ("kl_cov_ratio", 0.0), ("kl_cov_ratio", 1.1), ("kl_cov_coef", -1.0),
                                          ("kl_cov_coef", "1")])
def test_config_rejects_bad_entropy_switches_naming_the_field(field, value):
    with pytest.raises(ValueError, match=f"`{field}`"):
        GRPOConfig(**{field: value})


@pytest.mark.parametrize("loss", ["cispo", "gspo", "gspo_token", "dppo"])
@pytest.mark.parametrize("control", ["clip_cov", "kl_cov"])
def test_covariance_control_needs_the_clipped_surrogate(loss, control):
    with pytest.raises(ValueError, match="`entropy_control`.*clipped_surrogate"):
        GRPOConfig(per_token_loss=loss, entropy_control=control)
    GRPOConfig(entropy_control=control)


def test_the_step_names_a_missing_or_detached_entropy_and_a_missing_generator():
    lp0, old, adv, mask = _fixed_batch()
    common = dict(advantages=adv, old_log_probs=old, cliprange=0.2)
    entropy = torch.rand(lp0.shape, dtype=torch.float64)
    with pytest.raises(ValueError, match="`entropy`"):
        rl.grpo_microbatch_train_step(lp0.clone().requires_grad_(True), mask, 1, "grpo_clip", entropy_coef=0.1, **common)
    with pytest.raises(ValueError, match="`entropy` must carry its gradient"):
        rl.grpo_microbatch_train_step(lp0.clone().requires_grad_(True), mask, 1, "grpo_clip", entropy=entropy,
                                      entropy_coef=0.1, **common)
    with pytest.raises(ValueError, match="`entropy`"):
        rl.grpo_microbatch_train_step(lp0.clone().requires_grad_(True), mask, 1, "grpo_clip", top_entropy_quantile=0.2,
                                      **common)
    with pytest.raises(ValueError, match="`generator`"):
        rl.grpo_microbatch_train_step(lp0.clone().requires_grad_(True), mask, 1, "grpo_clip", entropy_control="clip_cov",
                                      **common)
    with pytest.raises(ValueError, match="`entropy_control`.*grpo_clip"):
        rl.grpo_microbatch_train_step(lp0.clone().requires_grad_(True), mask, 1, "cispo", entropy_control="kl_cov", **common)
    for name, value in (("entropy_coef", -1.0), ("top_entropy_quantile", 0.0), ("entropy_control", "bonus")):
        with pytest.raises(ValueError, match=f"`{name}`"):
            rl.grpo_microbatch_train_step(lp0.clone().requires_grad_(True), mask, 1, "grpo_clip", entropy=entropy,
                                          **{name: value}, **common)


# -- entropy logged by position ------------------------------------------------------------------

def test_entropy_by_position_is_the_mean_entropy_of_the_sampled_tokens_at_each_position():
    """Rescored independently from the recorded texts (one minibatch, so every row is scored by π_old): position
    t's value is the mean entropy over the completions that reach t; positions no completion reaches are NaN;
    the count-weighted mean over positions is the token mean, which is the logged ``entropy``."""
    _, _, metrics, _, ent, mask, _ = _one_step()
    by_position = metrics["entropy_by_position"]
    assert by_position.shape == (5,)  # max_new_tokens
    m = mask.double()
    counts = m.sum(0)
    expected = torch.full((5,), float("nan"), dtype=torch.float64)
    expected[: m.shape[1]][counts > 0] = ((ent * m).sum(0) / counts.clamp(min=1))[counts > 0]
    torch.testing.assert_close(by_position.double(), expected, rtol=1e-5, atol=1e-6, equal_nan=True)
    assert not torch.isnan(by_position[0])
    token_mean = (ent * m).sum() / m.sum()
    weighted = (by_position[: m.shape[1]][counts > 0].double() * counts[counts > 0]).sum() / counts.sum()
    torch.testing.assert_close(weighted, token_mean, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(metrics["entropy"].double(), token_mean, rtol=1e-5, atol=1e-6)


def test_train_grpo_logs_entropy_by_position_as_a_series_one_row_per_step():
    hist = rl.train_grpo(_tiny_policy(), TOK, AdditionTask(num_digits=1), _config(num_steps=3), progress=False)
    by_position = hist["entropy_by_position"]
    assert by_position.shape == (3, 5) and "entropy_by_position" in hist and "entropy_by_position" not in hist.metrics
    assert np.isfinite(by_position[:, 0]).all() and (by_position[np.isfinite(by_position)] >= 0).all()
    assert (by_position[np.isfinite(by_position)] <= math.log(len(TOK)) + 1e-6).all()


def test_history_series_stack_rows_and_reject_non_vectors():
    hist = rl.History()
    hist.log_series(x=torch.tensor([1.0, 2.0]))
    hist.log_series(x=np.array([3.0]))
    np.testing.assert_array_equal(hist["x"], np.array([[1.0, 2.0], [3.0, np.nan]]))
    with pytest.raises(ValueError, match="series `y` takes one-dimensional values"):
        hist.log_series(y=np.zeros((2, 2)))
    with pytest.raises(KeyError, match="series"):
        hist["z"]
