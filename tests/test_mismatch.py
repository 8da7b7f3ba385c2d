"""rlbook.mismatch: the sampler's distribution against closed forms and transformers' own warpers;
the log-ratio statistics against numpy; the estimator moments against enumeration written out
separately, autograd, and Monte Carlo within its own standard error."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlbook.mismatch import GRADIENT_CORRECTIONS, log_ratio_stats, mismatch_kls, off_policy_gradient_moments, sampler_log_probs

F64 = torch.float64


# ---------------------------------------------------------------- the sampler's distribution
def test_top_p_closed_form():
    logits = torch.tensor([0.5, 0.3, 0.15, 0.05], dtype=F64).log()
    # the smallest top set reaching p: {0.5} for p < 0.5, {0.5, 0.3} for p < 0.8, ... (p off the
    # boundaries, where the cumulative sum's rounding decides)
    for p, kept in [(0.3, 1), (0.499, 1), (0.501, 2), (0.799, 2), (0.801, 3), (0.951, 4), (1.0, 4)]:
        mu = sampler_log_probs(logits, top_p=p).exp()
        full = torch.tensor([0.5, 0.3, 0.15, 0.05], dtype=F64)
        expect = torch.where(torch.arange(4) < kept, full, torch.zeros(4, dtype=F64))
        torch.testing.assert_close(mu, expect / expect.sum(), rtol=1e-12, atol=0)
    # exactly at a boundary (equal logits: every probability and partial sum a power of two, exact): a set
    # whose mass equals p reaches p, so it is the kept set, and no more
    for p, kept in [(0.25, 1), (0.5, 2), (0.75, 3), (0.125, 1), (1.0, 4)]:
        mu = sampler_log_probs(torch.zeros(4, dtype=F64), top_p=p).exp()
        assert int((mu > 0).sum()) == kept, p
        torch.testing.assert_close(mu[mu > 0], torch.full((kept,), 1 / kept, dtype=F64), rtol=0, atol=0)


def test_temperature_closed_form_and_top_k():
    probs = torch.tensor([0.6, 0.25, 0.1, 0.05], dtype=F64)
    for t in (0.5, 0.7, 1.0, 2.0):
        mu = sampler_log_probs(probs.log(), temperature=t).exp()
        expect = probs ** (1 / t) / (probs ** (1 / t)).sum()
        torch.testing.assert_close(mu, expect, rtol=1e-12, atol=0)
    mu = sampler_log_probs(probs.log(), top_k=2).exp()
    torch.testing.assert_close(mu, torch.tensor([0.6 / 0.85, 0.25 / 0.85, 0, 0], dtype=F64), rtol=1e-12, atol=0)
    # ties at the k-th value are kept (transformers' TopKLogitsWarper does the same)
    mu = sampler_log_probs(torch.tensor([2.0, 1.0, 1.0, 0.0], dtype=F64), top_k=2).exp()
    assert (mu > 0).tolist() == [True, True, True, False]
    assert torch.equal(sampler_log_probs(probs.log(), top_k=4), torch.log_softmax(probs.log(), -1))


def test_precision_rounding_is_torch_s_cast_then_softmax():
    gen = torch.Generator().manual_seed(0)
    z = torch.randn(5, 50, generator=gen) * 4 + 20
    for name, dt in (("bf16", torch.bfloat16), ("fp16", torch.float16), ("fp32", torch.float32)):
        got = sampler_log_probs(z, dtype=name)
        assert torch.equal(got, torch.log_softmax(z.to(dt).float(), dim=-1))
        assert torch.equal(got, sampler_log_probs(z, dtype=dt))
    # rounding moves each logit by at most u·|z| (unit roundoff u = 2^-8 for bf16's 8 significant bits,
    # 2^-11 for fp16's 11), so each log-probability by at most 2u·max|z|: softmax ignores a common
    # offset, rounding does not, and the error grows with it
    errors = {}
    for offset in (0.0, 100.0):
        zz = z.double() - 20 + offset
        exact = torch.log_softmax(zz, -1)
        for name, u in (("bf16", 2.0 ** -8), ("fp16", 2.0 ** -11)):
            err = float((sampler_log_probs(zz, dtype=name) - exact).abs().max())
            assert err <= 2 * u * float(zz.abs().max()) * (1 + 1e-9), (name, offset)
            errors[name, offset] = err
    assert errors["bf16", 100.0] > 4 * errors["bf16", 0.0] and errors["fp16", 100.0] < errors["bf16", 100.0] / 4
    with pytest.raises(ValueError, match="logits"):
        sampler_log_probs(torch.tensor([7e4, 0.0]), dtype="fp16")


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.integers(0, 10_000), st.floats(0.2, 3.0), st.floats(0.05, 1.0), st.one_of(st.none(), st.integers(1, 40)))
def test_matches_transformers_warpers(seed, temperature, top_p, top_k):
    """transformers' generate applies TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper in
    that order: an independent implementation of the same truncations."""
    tf = pytest.importorskip("transformers")
    gen = torch.Generator().manual_seed(seed)
    z = torch.randn(3, 32, generator=gen, dtype=F64) * 2
    scores = tf.TemperatureLogitsWarper(temperature)(None, z.clone())
    if top_k is not None:
        scores = tf.TopKLogitsWarper(top_k)(None, scores)
    if top_p < 1.0:
        scores = tf.TopPLogitsWarper(top_p)(None, scores)
    expect = torch.log_softmax(scores, dim=-1)
    got = sampler_log_probs(z, temperature=temperature, top_p=top_p, top_k=top_k)
    assert torch.equal(torch.isinf(got), torch.isinf(expect))
    finite = torch.isfinite(expect)
    torch.testing.assert_close(got[finite], expect[finite], rtol=0, atol=1e-12)


def test_output_is_a_distribution_and_keeps_minus_inf():
    z = torch.tensor([[0.0, -math.inf, 1.0], [3.0, 2.0, 1.0]])
    lp = sampler_log_probs(z, temperature=0.5, top_p=0.9, dtype="bf16")
    torch.testing.assert_close(lp.exp().sum(-1), torch.ones(2))
    assert lp[0, 1] == -math.inf and lp.dtype == torch.float32
    assert sampler_log_probs(z.double()).dtype == F64


@pytest.mark.parametrize("kwargs, name", [
    ({"temperature": 0.0}, "temperature"), ({"temperature": -1.0}, "temperature"),
    ({"temperature": float("nan")}, "temperature"), ({"temperature": float("inf")}, "temperature"),
    ({"top_p": 0.0}, "top_p"), ({"top_p": 1.5}, "top_p"), ({"top_p": -0.1}, "top_p"),
    ({"top_k": 0}, "top_k"), ({"top_k": 2.5}, "top_k"), ({"dtype": "int8"}, "dtype"), ({"dtype": torch.int8}, "dtype"),
])
def test_sampler_bad_input_names_the_argument(kwargs, name):
    with pytest.raises(ValueError, match=name):
        sampler_log_probs(torch.zeros(4), **kwargs)


@pytest.mark.parametrize("logits", [torch.tensor([]), torch.tensor(1.0), torch.tensor([float("nan"), 0.0]),
                                    torch.tensor([math.inf, 0.0]), torch.tensor([-math.inf, -math.inf]), "x"])
def test_sampler_bad_logits(logits):
    with pytest.raises(ValueError, match="logits"):
        sampler_log_probs(logits)


# ---------------------------------------------------------------- statistics of the log-ratio
def test_log_ratio_stats_against_numpy():
    gen = torch.Generator().manual_seed(1)
    t = -torch.rand(257, generator=gen, dtype=F64) * 3
    s = -torch.rand(257, generator=gen, dtype=F64) * 3
    x = (t - s).numpy()
    out = log_ratio_stats(t, s, quantiles=(0.0, 0.01, 0.25, 0.5, 0.99, 1.0), cap=2.0)
    assert out["mean"] == pytest.approx(x.mean(), rel=1e-12) and out["kl_k1"] == pytest.approx(-x.mean(), rel=1e-12)
    assert out["mean_abs"] == pytest.approx(np.abs(x).mean(), rel=1e-12)
    assert out["kl_k3"] == pytest.approx((np.exp(x) - 1 - x).mean(), rel=1e-12)
    assert out["ratio_mean"] == pytest.approx(np.exp(x).mean(), rel=1e-12)
    assert (out["min"], out["max"], out["count"]) == (x.min(), x.max(), 257.0)
    for q, v in out["quantiles"].items():
        assert v == np.quantile(x, q, method="inverted_cdf"), q
    assert out["frac_truncated"] == pytest.approx((np.exp(x) > 2).mean(), abs=1e-15)
    assert out["frac_masked"] == pytest.approx(((np.exp(x) > 2) | (np.exp(x) < 0.5)).mean(), abs=1e-15)
    # a mask drops tokens: the same as passing only the kept ones
    mask = torch.arange(257) % 3 != 0
    masked, kept = log_ratio_stats(t, s, weights=mask), log_ratio_stats(t[mask], s[mask])
    assert masked["quantiles"] == kept["quantiles"] and masked["mean"] == pytest.approx(kept["mean"], rel=1e-12)


def test_log_ratio_stats_exact_under_the_sampler():
    """With weights μ over the whole vocabulary: mean = −KL(μ‖π) exactly, E_μ[ρ] = 1 − (π's mass μ cut),
    and k3 = KL(μ‖π) − that mass."""
    gen = torch.Generator().manual_seed(2)
    z = torch.randn(12, generator=gen, dtype=F64) * 2
    pi_lp = torch.log_softmax(z, -1)
    for kwargs in ({"temperature": 0.7}, {"top_p": 0.8, "temperature": 1.2}, {"top_k": 5}):
        mu_lp = sampler_log_probs(z, **kwargs)
        drawn = torch.isfinite(mu_lp)
        out = log_ratio_stats(pi_lp[drawn], mu_lp[drawn], weights=mu_lp[drawn].exp())
        kl_mu_pi, kl_pi_mu = mismatch_kls(pi_lp, mu_lp)
        cut = float(pi_lp[~drawn].exp().sum())
        assert out["mean"] == pytest.approx(-float(kl_mu_pi), rel=1e-12)
        assert out["ratio_mean"] == pytest.approx(1 - cut, rel=1e-12)
        assert out["kl_k3"] == pytest.approx(float(kl_mu_pi) - cut, rel=1e-10, abs=1e-14)
        assert (kl_pi_mu == math.inf) == (cut > 0)


def test_mismatch_kls_closed_form():
    pi = torch.tensor([0.5, 0.3, 0.2], dtype=F64)
    mu = torch.tensor([0.4, 0.4, 0.2], dtype=F64)
    a, b = mismatch_kls(pi.log(), mu.log())
    assert float(a) == pytest.approx(float((mu * (mu / pi).log()).sum()), rel=1e-14)
    assert float(b) == pytest.approx(float((pi * (pi / mu).log()).sum()), rel=1e-14)
    a, b = mismatch_kls(pi.log(), torch.tensor([0.6, 0.4, 0.0], dtype=F64).log())
    assert math.isfinite(float(a)) and float(b) == math.inf


@pytest.mark.parametrize("call, name", [
    (lambda: log_ratio_stats([-1.0, -2.0], [-1.0]), "sampler_log_probs"),
    (lambda: log_ratio_stats([0.5], [-1.0]), "log-probabilities"),
    (lambda: log_ratio_stats([-1.0], [-1.0], weights=[-1.0]), "weights"),
    (lambda: log_ratio_stats([-1.0], [-1.0], weights=[0.0]), "weights"),
    (lambda: log_ratio_stats([-1.0], [-1.0], quantiles=(1.5,)), "quantiles"),
    (lambda: log_ratio_stats([-1.0], [-1.0], cap=0.5), "cap"),
    (lambda: log_ratio_stats([-1.0], [float("-inf")]), "sampler_log_probs"),
])
def test_stats_bad_input(call, name):
    with pytest.raises(ValueError, match=name):
        call()


# ---------------------------------------------------------------- the estimator's moments
def _setting(seed=0, k=8, truncate=False):
    gen = torch.Generator().manual_seed(seed)
    z = torch.randn(k, generator=gen, dtype=F64) * 1.5
    pi = torch.softmax(z, -1)
    mu = sampler_log_probs(z, temperature=0.6, top_p=0.85 if truncate else 1.0).exp()
    adv = torch.randn(k, generator=gen, dtype=F64)
    return pi, mu, adv


def _by_hand(pi, mu, adv, correction, cap):
    """The expectation written out per correction (Σ over tokens, no shared code with the library)."""
    k = len(pi)
    mean = torch.zeros(k, dtype=F64)
    for a in range(k):
        if mu[a] == 0:
            continue
        rho = pi[a] / mu[a]
        w = {"none": 1.0, "is": rho, "tis": min(rho, cap or 1.0), "mis": rho if 1 / (cap or 1.0) <= rho <= (cap or 1.0) else 0.0}[correction]
        score = -pi.clone()
        score[a] += 1
        mean += mu[a] * w * adv[a] * score
    return mean


@pytest.mark.parametrize("truncate", [False, True])
@pytest.mark.parametrize("correction, cap", [("none", None), ("is", None), ("tis", 1.5), ("tis", 1.1), ("mis", 1.5), ("mis", 3.0)])
def test_mean_matches_the_sum_written_out(correction, cap, truncate):
    pi, mu, adv = _setting(3, truncate=truncate)
    m = off_policy_gradient_moments(pi, mu, adv, correction, cap)
    torch.testing.assert_close(m["mean"], _by_hand(pi, mu, adv, correction, cap), rtol=1e-12, atol=1e-15)
    # the target: the gradient of E_π[A·log π] with respect to the logits, by autograd
    z = pi.log().clone().requires_grad_(True)
    (pi * adv * torch.log_softmax(z, -1)).sum().backward()
    torch.testing.assert_close(m["target"], z.grad, rtol=1e-12, atol=1e-15)


def test_importance_sampling_is_unbiased_and_caps_that_never_bind_change_nothing():
    pi, mu, adv = _setting(4)
    is_ = off_policy_gradient_moments(pi, mu, adv, "is")
    torch.testing.assert_close(is_["mean"], is_["target"], rtol=1e-12, atol=1e-15)
    rho = pi / mu
    none = off_policy_gradient_moments(pi, mu, adv, "none")
    assert float(none["bias_norm"]) > 1e-3  # the mismatch biases the uncorrected gradient
    big = float(max(rho.max(), 1 / rho.min())) * 1.01
    for c in ("tis", "mis"):
        m = off_policy_gradient_moments(pi, mu, adv, c, big)
        torch.testing.assert_close(m["mean"], is_["mean"], rtol=1e-14, atol=0)
        torch.testing.assert_close(m["covariance"], is_["covariance"], rtol=1e-14, atol=0)
        assert float(m["changed"]) == 0
    # C = 1: TIS weights min(ρ, 1), and the share it truncates is μ's mass where ρ > 1
    tis = off_policy_gradient_moments(pi, mu, adv, "tis", 1.0)
    torch.testing.assert_close(tis["weights"], torch.clamp(rho, max=1.0), rtol=1e-14, atol=0)
    assert float(tis["changed"]) == pytest.approx(float(mu[rho > 1].sum()), abs=1e-12)
    mis = off_policy_gradient_moments(pi, mu, adv, "mis", 1.5)
    outside = (rho > 1.5) | (rho < 1 / 1.5)
    assert outside.any() and float(mis["changed"]) == pytest.approx(float(mu[outside].sum()), abs=1e-12)


def test_truncated_sampler_leaves_a_bias_no_weight_removes():
    pi, mu, adv = _setting(5, truncate=True)
    cut = mu == 0
    assert cut.any()
    is_ = off_policy_gradient_moments(pi, mu, adv, "is")
    score = torch.eye(len(pi), dtype=F64) - pi
    torch.testing.assert_close(is_["bias"], -((pi * adv * cut) @ score), rtol=1e-12, atol=1e-15)
    assert (is_["weights"][cut] == 0).all()


def test_variance_is_one_over_n_and_scores_generalise():
    pi, mu, adv = _setting(6)
    one = off_policy_gradient_moments(pi, mu, adv, "tis", 2.0, n=1)
    eight = off_policy_gradient_moments(pi, mu, adv, "tis", 2.0, n=8)
    torch.testing.assert_close(eight["covariance"] * 8, one["covariance"], rtol=1e-12, atol=1e-15)
    assert float(eight["mse"]) == pytest.approx(float(eight["bias_norm"]) ** 2 + float(eight["variance"]), rel=1e-12)
    # scores = 1 (D = 1): estimating E_π[A] itself
    m = off_policy_gradient_moments(pi, mu, adv, "is", scores=torch.ones(len(pi), 1))
    assert float(m["target"][0]) == pytest.approx(float(pi @ adv), rel=1e-12)
    w = pi / mu
    assert float(m["variance"]) == pytest.approx(float(mu @ (w * adv) ** 2 - (pi @ adv) ** 2), rel=1e-10)


@pytest.mark.parametrize("correction, cap", [("none", None), ("is", None), ("tis", 1.5), ("mis", 2.0)])
def test_monte_carlo_within_its_standard_error(correction, cap):
    """200,000 single draws from μ; each draw's gradient by autograd through log_softmax and the
    weights by plain torch ops: the sample mean lies within 4.5 standard errors (the exact σ/√N) of
    the closed-form mean in every coordinate, and each coordinate's sample variance within 4.5 standard
    errors (from the exact fourth central moment) of the closed form; blocks of n = 5 draws give 1/n."""
    pi, mu, adv = _setting(7, k=6)
    m = off_policy_gradient_moments(pi, mu, adv, correction, cap)
    k, draws = len(pi), 200_000
    table = torch.zeros(k, k, dtype=F64)
    for a in range(k):
        z = pi.log().clone().requires_grad_(True)
        rho = float(pi[a] / mu[a])
        w = {"none": 1.0, "is": rho, "tis": min(rho, cap or 0), "mis": rho * (1 / (cap or 1) <= rho <= (cap or 1))}[correction]
        (w * adv[a] * torch.log_softmax(z, -1)[a]).backward()
        table[a] = z.grad
    idx = torch.multinomial(mu, draws, replacement=True, generator=torch.Generator().manual_seed(11))
    samples = table[idx]
    centred4 = mu @ (table - m["mean"]) ** 4
    sigma2 = torch.diagonal(m["covariance"])
    se_mean = (sigma2 / draws).sqrt()
    assert ((samples.mean(0) - m["mean"]).abs() <= 4.5 * se_mean + 1e-15).all()
    se_var = ((centred4 - sigma2 ** 2) / draws).sqrt()
    assert ((samples.var(0) - sigma2).abs() <= 4.5 * se_var + 1e-15).all()
    blocks = samples.reshape(-1, 5, k).mean(1)  # 40,000 estimates with n = 5
    m5 = off_policy_gradient_moments(pi, mu, adv, correction, cap, n=5)
    assert ((blocks.mean(0) - m5["mean"]).abs() <= 4.5 * (torch.diagonal(m5["covariance"]) / len(blocks)).sqrt() + 1e-15).all()
    assert float(blocks.var(0).sum()) == pytest.approx(float(m5["variance"]), rel=0.05)


def test_weights_closed_forms():
    """The weights come from rlbook.importance_correction: on a hand-made pair they are min(ρ, C) and
    ρ·1[1/C ≤ ρ ≤ C]."""
    pi = torch.tensor([0.05, 0.25, 0.2, 0.4, 0.1], dtype=F64)
    mu = torch.tensor([0.5, 0.5, 0.2, 0.2, 0.02], dtype=F64) / 1.42
    rho = pi / mu
    adv = torch.ones(5, dtype=F64)
    got = {c: off_policy_gradient_moments(pi, mu, adv, c, 2.0)["weights"] for c in GRADIENT_CORRECTIONS}
    torch.testing.assert_close(got["none"], torch.ones(5, dtype=F64))
    torch.testing.assert_close(got["is"], rho, rtol=1e-14, atol=0)
    torch.testing.assert_close(got["tis"], torch.clamp(rho, max=2.0), rtol=1e-14, atol=0)
    torch.testing.assert_close(got["mis"], torch.where((rho >= 0.5) & (rho <= 2.0), rho, 0.0), rtol=1e-14, atol=0)
    assert (rho < 0.5).any() and (rho > 2.0).any() and ((rho >= 0.5) & (rho <= 2.0)).any()


@pytest.mark.parametrize("call, name", [
    (lambda: off_policy_gradient_moments([0.5, 0.5], [0.5, 0.5], [1.0, 0.0], "clip"), "correction"),
    (lambda: off_policy_gradient_moments([0.5, 0.5], [0.5, 0.5], [1.0, 0.0], "tis", 0.5), "cap"),
    (lambda: off_policy_gradient_moments([0.5, 0.5], [0.5, 0.5], [1.0, 0.0], "mis", float("inf")), "cap"),
    (lambda: off_policy_gradient_moments([0.5, 0.5], [0.5, 0.4], [1.0, 0.0]), "sampler_probs"),
    (lambda: off_policy_gradient_moments([0.5, 0.6], [0.5, 0.5], [1.0, 0.0]), "trainer_probs"),
    (lambda: off_policy_gradient_moments([0.5, 0.5], [0.5, 0.5], [1.0]), "advantages"),
    (lambda: off_policy_gradient_moments([0.5, 0.5], [0.5, 0.5], [1.0, 0.0], n=0), "`n`"),
    (lambda: off_policy_gradient_moments([0.5, 0.5], [0.5, 0.5], [1.0, 0.0], scores=torch.ones(3, 1)), "scores"),
    (lambda: off_policy_gradient_moments([0.5, 0.5], [0.5, 0.5], [1.0, 0.0], "tis"), "cap"),
    (lambda: off_policy_gradient_moments([[0.5, 0.5]], [[0.5, 0.5]], [1.0, 0.0]), "trainer_probs"),
])
def test_moments_bad_input(call, name):
    with pytest.raises(ValueError, match=name):
        call()


def test_corrections_listed():
    assert GRADIENT_CORRECTIONS == ("none", "is", "tis", "mis")


def test_numpy_scalars_are_numbers():
    z = torch.tensor([1.0, 0.5, -0.5, -2.0], dtype=F64)
    assert torch.equal(sampler_log_probs(z, temperature=np.float32(0.5), top_p=np.float64(0.9), top_k=np.int64(3)),
                       sampler_log_probs(z, temperature=0.5, top_p=0.9, top_k=3))
    pi, mu, adv = _setting(8)
    a = off_policy_gradient_moments(pi, mu, adv, "tis", np.float32(2.0), n=np.int64(3))
    b = off_policy_gradient_moments(pi, mu, adv, "tis", 2.0, n=3)
    assert torch.equal(a["covariance"], b["covariance"])
    # float32 probabilities (sums off by ~1e-7) are accepted
    off_policy_gradient_moments(pi.float(), mu.float(), adv)
