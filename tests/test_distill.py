"""On-policy distillation (rlbook.distill): rewards, per-token KLs, GKD's JSD, and exact enumeration identities.

The identities are checked exactly (float64) on toy tabular autoregressive policies small enough to
enumerate every sequence: the sampled reward's expected gradient with reward-to-go (γ = 1) is the
gradient of the sequence reverse KL; with each token's own reward (γ = 0) it is the gradient of the
per-position reverse KLs with the prefix distribution frozen (the full-vocabulary reverse KL on
on-policy prefixes), which is not the sequence KL's gradient; and the KL-regularised optimum with
the log-ratio reward is the teacher (and extrapolates past it when the reward is scaled by α > 1).
"""

import itertools
import math

import pytest
import torch

import rlbook as rl

DT = torch.float64


# ============================================================================= independent helpers


def _table(seed, vocab, horizon, scale=1.5):
    """Student and teacher tables (P, V), float64, P = 1 + V + ... + V^(H−1)."""
    g = torch.Generator().manual_seed(seed)
    rows = sum(vocab ** t for t in range(horizon))
    return (torch.randn(rows, vocab, generator=g, dtype=DT) * scale,
            torch.randn(rows, vocab, generator=g, dtype=DT) * scale)


def _rows(vocab, horizon):
    """{prefix tuple: row}, breadth first, each level in lexicographic order (the documented layout)."""
    rows = {}
    for t in range(horizon):
        for prefix in itertools.product(range(vocab), repeat=t):
            rows[prefix] = len(rows)
    return rows


def _softmax(row):
    top = max(row)
    e = [math.exp(z - top) for z in row]
    return [x / sum(e) for x in e]


def _sequence_probs(table, vocab, horizon):
    """{sequence: π(sequence)} by a product of softmaxes over the prefixes, in plain Python."""
    rows, out = _rows(vocab, horizon), {}
    values = table.tolist()
    for seq in itertools.product(range(vocab), repeat=horizon):
        p = 1.0
        for t in range(horizon):
            p *= _softmax(values[rows[seq[:t]]])[seq[t]]
        out[seq] = p
    return out


def _kl(p, q):
    return sum(pi * math.log(pi / qi) for pi, qi in zip(p, q) if pi > 0)


def _batch(seed=0, shape=(2, 5, 11), dtype=DT):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(*shape, generator=g, dtype=dtype) * 2
    teacher = torch.randn(*shape, generator=g, dtype=dtype) * 2
    mask = torch.ones(shape[:-1], dtype=torch.bool)
    mask[-1, 3:] = False  # padding at the end of the last row
    return logits, teacher, mask


# ============================================================================= the sampled reward


def test_rewards_are_the_detached_log_ratio_and_zero_on_padding():
    lp = torch.tensor([[-1.0, -2.0, -0.5], [-0.1, -3.0, -7.0]], dtype=DT, requires_grad=True)
    lq = torch.tensor([[-0.5, -3.0, -1.5], [-2.1, -1.0, -9.0]], dtype=DT)
    mask = [[1, 1, 1], [1, 1, 0]]
    r = rl.distillation_rewards(lp, lq, mask)
    want = torch.tensor([[0.5, -1.0, -1.0], [-2.0, 2.0, 0.0]], dtype=DT)  # log π_T − log π_θ; the padded one 0
    torch.testing.assert_close(r, want, rtol=0, atol=1e-15)
    assert not r.requires_grad and r.dtype == DT
    assert rl.distillation_rewards(lp, lq)[1, 2] == pytest.approx(-2.0)  # unmasked by default


@pytest.mark.parametrize("vocab, horizon", [(2, 3), (3, 2)])
def test_minus_summed_reward_is_an_unbiased_estimate_of_the_sequence_kl(vocab, horizon):
    z, zt = _table(1, vocab, horizon)
    seqs = rl.enumerate_sequences(vocab, horizon)
    lp = torch.log_softmax(rl.tabular_prefix_logits(z), -1).gather(-1, seqs[..., None])[..., 0]
    lq = torch.log_softmax(rl.tabular_prefix_logits(zt), -1).gather(-1, seqs[..., None])[..., 0]
    r = rl.distillation_rewards(lp, lq)
    expectation = float((lp.sum(-1).exp() * -r.sum(-1)).sum())
    p, q = _sequence_probs(z, vocab, horizon), _sequence_probs(zt, vocab, horizon)
    loop_kl = sum(p[x] * math.log(p[x] / q[x]) for x in p)
    assert expectation == pytest.approx(loop_kl, rel=1e-12)
    assert float(rl.sequence_reverse_kl(z, zt)) == pytest.approx(loop_kl, rel=1e-12)
    assert loop_kl > 0.1


# ============================================================================= per-token KLs and the JSD


def test_per_token_kls_match_explicit_sums_over_the_vocabulary():
    logits, teacher, mask = _batch()
    tau = 0.7
    rev = rl.reverse_kl_per_token(logits, teacher, mask, temperature=tau)
    fwd = rl.forward_kl_per_token(logits, teacher, mask, temperature=tau)
    assert rev.shape == fwd.shape == (2, 5)
    for b, t in itertools.product(range(2), range(5)):
        p = _softmax((logits[b, t] / tau).tolist())
        q = _softmax((teacher[b, t] / tau).tolist())
        want_rev, want_fwd = (_kl(p, q), _kl(q, p)) if mask[b, t] else (0.0, 0.0)
        assert float(rev[b, t]) == pytest.approx(want_rev, rel=1e-12, abs=1e-15)
        assert float(fwd[b, t]) == pytest.approx(want_fwd, rel=1e-12, abs=1e-15)
    assert (rev[mask] > 0).all() and (rev[~mask] == 0).all()
    assert rl.reverse_kl_per_token(logits, logits).abs().max() < 1e-12


def test_kl_gradients_have_their_closed_forms():
    logits, teacher, mask = _batch(3)
    tau = 1.3
    z = logits.clone().requires_grad_(True)
    rev = rl.reverse_kl_per_token(z, teacher, mask, temperature=tau)
    (g_rev,) = torch.autograd.grad(rev.sum(), z)
    fwd = rl.forward_kl_per_token(z, teacher, mask, temperature=tau)
    (g_fwd,) = torch.autograd.grad(fwd.sum(), z)
    log_p, log_q = torch.log_softmax(logits / tau, -1), torch.log_softmax(teacher / tau, -1)
    p, q = log_p.exp(), log_q.exp()
    m = mask[..., None].to(DT)
    want_rev = p * (log_p - log_q - rev.detach()[..., None]) / tau * m
    torch.testing.assert_close(g_rev, want_rev, rtol=1e-10, atol=1e-13)
    torch.testing.assert_close(g_fwd, (p - q) / tau * m, rtol=1e-10, atol=1e-13)
    assert g_rev[mask].abs().max() > 1e-2  # the check has something to compare


@pytest.mark.parametrize("fn", [
    lambda z, zt: rl.reverse_kl_per_token(z, zt, temperature=0.8),
    lambda z, zt: rl.forward_kl_per_token(z, zt, temperature=0.8),
    lambda z, zt: rl.generalized_jsd(z, zt, beta=0.3, temperature=0.8, reduction="none"),
    lambda z, zt: rl.generalized_jsd(z, zt, beta=0.5, mask=torch.tensor([[True, False, True]])),
], ids=["reverse", "forward", "jsd0.3", "jsd0.5_token_mean"])
def test_gradcheck(fn):
    g = torch.Generator().manual_seed(5)
    z = torch.randn(1, 3, 4, generator=g, dtype=DT, requires_grad=True)
    zt = torch.randn(1, 3, 4, generator=g, dtype=DT, requires_grad=True)
    assert torch.autograd.gradcheck(fn, (z, zt))


def test_jsd_end_points_are_the_forward_and_reverse_kl():
    logits, teacher, mask = _batch(2)
    for beta, kl in ((0.0, rl.forward_kl_per_token), (1.0, rl.reverse_kl_per_token)):
        jsd = rl.generalized_jsd(logits, teacher, beta, temperature=0.6, mask=mask, reduction="none")
        torch.testing.assert_close(jsd, kl(logits, teacher, mask, temperature=0.6), rtol=0, atol=0)
    # the two differ, so the end points are not interchangeable
    assert (rl.forward_kl_per_token(logits, teacher) - rl.reverse_kl_per_token(logits, teacher)).abs().max() > 0.1


def test_jsd_at_one_half_matches_a_hand_written_jsd():
    logits, teacher, mask = _batch(4)
    jsd = rl.generalized_jsd(logits, teacher, 0.5, mask=mask, reduction="none")
    for b, t in itertools.product(range(2), range(5)):
        p, q = _softmax(logits[b, t].tolist()), _softmax(teacher[b, t].tolist())
        m = [0.5 * a + 0.5 * c for a, c in zip(p, q)]
        want = 0.5 * _kl(q, m) + 0.5 * _kl(p, m) if mask[b, t] else 0.0
        assert float(jsd[b, t]) == pytest.approx(want, rel=1e-12, abs=1e-15)
    assert float(jsd.max()) <= math.log(2)
    torch.testing.assert_close(jsd, rl.generalized_jsd(teacher, logits, 0.5, mask=mask, reduction="none"))


def test_jsd_mixture_gives_beta_to_the_teacher():
    """JSD_β(student, teacher) = JSD_{1−β}(teacher, student), and at β = 0.2 it is the hand-written
    β·KL(π_T‖m) + (1−β)·KL(π_θ‖m) with m = β·π_T + (1−β)·π_θ, not the other assignment."""
    logits, teacher, _ = _batch(6, shape=(1, 3, 5))
    beta = 0.2
    jsd = rl.generalized_jsd(logits, teacher, beta, reduction="none")
    torch.testing.assert_close(jsd, rl.generalized_jsd(teacher, logits, 1 - beta, reduction="none"))
    p, q = _softmax(logits[0, 0].tolist()), _softmax(teacher[0, 0].tolist())
    m = [beta * c + (1 - beta) * a for a, c in zip(p, q)]
    m_swapped = [beta * a + (1 - beta) * c for a, c in zip(p, q)]
    want = beta * _kl(q, m) + (1 - beta) * _kl(p, m)
    other = beta * _kl(q, m_swapped) + (1 - beta) * _kl(p, m_swapped)
    assert float(jsd[0, 0]) == pytest.approx(want, rel=1e-12)
    assert abs(want - other) > 1e-2


def test_jsd_end_points_are_limits_of_the_rescaled_divergence_not_of_the_formula():
    logits, teacher, _ = _batch(7)
    eps = 1e-6
    near_0 = rl.generalized_jsd(logits, teacher, eps, reduction="none")
    near_1 = rl.generalized_jsd(logits, teacher, 1 - eps, reduction="none")
    torch.testing.assert_close(near_0 / eps, rl.forward_kl_per_token(logits, teacher), rtol=1e-4, atol=0)
    torch.testing.assert_close(near_1 / eps, rl.reverse_kl_per_token(logits, teacher), rtol=1e-4, atol=0)
    assert near_0.max() < 1e-4 < rl.generalized_jsd(logits, teacher, 0.0, reduction="none").min()


def test_jsd_reductions():
    logits, teacher, mask = _batch(8)
    per = rl.generalized_jsd(logits, teacher, 0.5, mask=mask, reduction="none")
    valid, vocab = int(mask.sum()), logits.shape[-1]
    assert valid == 8
    total = float(per.sum())
    cases = {"sum": total, "token_mean": total / valid, "batchmean": total / 2, "mean": total / (valid * vocab)}
    for reduction, want in cases.items():
        out = rl.generalized_jsd(logits, teacher, 0.5, mask=mask, reduction=reduction)
        assert out.dim() == 0 and float(out) == pytest.approx(want, rel=1e-12)
    assert float(rl.generalized_jsd(logits, teacher, 0.5)) == pytest.approx(
        float(rl.generalized_jsd(logits, teacher, 0.5, reduction="none").mean()), rel=1e-12)
    nothing = torch.zeros(2, 5, dtype=torch.bool)
    for reduction in ("token_mean", "mean", "sum"):
        assert float(rl.generalized_jsd(logits, teacher, 0.5, mask=nothing, reduction=reduction)) == 0.0


def test_low_precision_logits_are_upcast():
    logits, teacher, _ = _batch(9, dtype=torch.bfloat16)
    out = rl.generalized_jsd(logits, teacher, 0.5, reduction="none")
    assert out.dtype == torch.float32
    want = rl.generalized_jsd(logits.to(DT), teacher.to(DT), 0.5, reduction="none")
    torch.testing.assert_close(out.to(DT), want, rtol=1e-5, atol=1e-6)


# ============================================================================= enumeration tools


def test_enumerate_sequences_and_prefix_layout():
    seqs = rl.enumerate_sequences(3, 2)
    assert seqs.tolist() == [list(x) for x in itertools.product(range(3), repeat=2)]
    vocab, horizon = 2, 3
    z, _ = _table(0, vocab, horizon)
    rows = _rows(vocab, horizon)
    got = rl.tabular_prefix_logits(z)
    assert got.shape == (8, 3, 2)
    for n, seq in enumerate(itertools.product(range(vocab), repeat=horizon)):
        for t in range(horizon):
            assert got[n, t].tolist() == z[rows[seq[:t]]].tolist()


@pytest.mark.parametrize("vocab, horizon, seed", [(2, 3, 0), (3, 2, 1), (3, 3, 2)])
def test_gamma_one_expected_gradient_is_the_sequence_kl_gradient(vocab, horizon, seed):
    z, zt = _table(seed, vocab, horizon)
    leaf = z.clone().requires_grad_(True)
    (want,) = torch.autograd.grad(rl.sequence_reverse_kl(leaf, zt), leaf)
    got = rl.expected_distillation_gradient(z, zt, gamma=1.0)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)
    assert want.abs().max() > 0.05


@pytest.mark.parametrize("vocab, horizon, seed", [(2, 3, 0), (3, 2, 1), (3, 3, 2)])
def test_gamma_zero_expected_gradient_is_the_frozen_state_per_token_kl_gradient(vocab, horizon, seed):
    z, zt = _table(seed, vocab, horizon)
    got = rl.expected_distillation_gradient(z, zt, gamma=0.0)

    leaf = z.clone().requires_grad_(True)
    (frozen,) = torch.autograd.grad(rl.stepwise_reverse_kl(leaf, zt, detach_states=True), leaf)
    torch.testing.assert_close(got, frozen, rtol=1e-10, atol=1e-12)

    # the same thing with the batched full-vocabulary functions on every on-policy sequence, weighted by
    # its (detached) probability: GKD's β = 1 loss in expectation over the student's samples
    seqs = rl.enumerate_sequences(vocab, horizon)
    for per_token in (lambda a, b: rl.reverse_kl_per_token(a, b),
                      lambda a, b: rl.generalized_jsd(a, b, beta=1.0, reduction="none")):
        leaf = z.clone().requires_grad_(True)
        prefix_logits = rl.tabular_prefix_logits(leaf)
        weight = torch.log_softmax(prefix_logits, -1).gather(-1, seqs[..., None])[..., 0].sum(-1).exp().detach()
        loss = (weight[:, None] * per_token(prefix_logits, rl.tabular_prefix_logits(zt))).sum()
        (full_vocab,) = torch.autograd.grad(loss, leaf)
        torch.testing.assert_close(got, full_vocab, rtol=1e-10, atol=1e-12)

    # ... and NOT the sequence KL's gradient, although the two objectives are equal in value
    leaf = z.clone().requires_grad_(True)
    (sequence,) = torch.autograd.grad(rl.sequence_reverse_kl(leaf, zt), leaf)
    assert float((got - sequence).norm()) > 0.01 * float(sequence.norm())  # 2 % to 108 % on these toys
    assert float(rl.stepwise_reverse_kl(z, zt, detach_states=True)) == pytest.approx(
        float(rl.sequence_reverse_kl(z, zt)), rel=1e-12)
    # with the state distribution differentiated, the per-token sum is the sequence KL in gradient too
    leaf = z.clone().requires_grad_(True)
    (chained,) = torch.autograd.grad(rl.stepwise_reverse_kl(leaf, zt), leaf)
    torch.testing.assert_close(chained, sequence, rtol=1e-10, atol=1e-12)


def test_gamma_zero_ignores_a_token_s_effect_on_later_kls():
    """A designed toy (V = 2, H = 2, student uniform): the teacher agrees with the student on the first
    token and after x_1 = 0, and is peaked after x_1 = 1. The sequence KL is ½·K, K = KL(u ‖ π_T(·|1)),
    and its gradient on the first token's logits is (−K/4, K/4): steer away from the prefix after which
    the teacher disagrees. With γ = 0 that gradient is exactly 0 (the first token's own KL is 0)."""
    z = torch.zeros(3, 2, dtype=DT)
    zt = torch.tensor([[0.0, 0.0], [0.0, 0.0], [4.0, -4.0]], dtype=DT)
    k = _kl([0.5, 0.5], _softmax([4.0, -4.0]))
    assert float(rl.sequence_reverse_kl(z, zt)) == pytest.approx(0.5 * k, rel=1e-12)
    g0, g1 = (rl.expected_distillation_gradient(z, zt, gamma=g) for g in (0.0, 1.0))
    assert g1[0].tolist() == pytest.approx([-k / 4, k / 4], rel=1e-12)
    assert g0[0].abs().max() < 1e-15 and k / 4 > 0.8
    torch.testing.assert_close(g0[1:], g1[1:], rtol=1e-12, atol=1e-15)  # the last token: the same


def test_last_position_gradients_agree_and_earlier_ones_differ():
    """γ only changes the credit of earlier tokens: at the last position (no later rewards) both
    expected gradients agree; at the first they differ."""
    vocab, horizon = 3, 3
    z, zt = _table(4, vocab, horizon)
    g0, g1 = (rl.expected_distillation_gradient(z, zt, gamma=g) for g in (0.0, 1.0))
    last = slice(1 + vocab, None)  # the rows of the prefixes of length H − 1
    torch.testing.assert_close(g0[last], g1[last], rtol=1e-10, atol=1e-12)
    assert float((g0[0] - g1[0]).abs().max()) > 0.05


def test_intermediate_gamma_interpolates_linearly_for_two_tokens():
    """H = 2: G_1 = r_1 + γ·r_2, so the expected gradient is affine in γ."""
    z, zt = _table(3, 3, 2)
    g0, g1, g3 = (rl.expected_distillation_gradient(z, zt, gamma=g) for g in (0.0, 1.0, 0.3))
    torch.testing.assert_close(g3, 0.7 * g0 + 0.3 * g1, rtol=1e-10, atol=1e-12)
    assert float((g0 - g1).abs().max()) > 0.05


def test_float32_tables_give_float32_results():
    z, zt = (t.float() for t in _table(0, 2, 2))
    assert rl.expected_distillation_gradient(z, zt).dtype == torch.float32
    assert rl.sequence_reverse_kl(z, zt).dtype == torch.float32


# ============================================================================= KL-regularised optimum


def test_kl_regularised_optimum_of_the_log_ratio_reward_is_the_teacher():
    g = torch.Generator().manual_seed(11)
    ref = torch.softmax(torch.randn(6, generator=g, dtype=DT), 0)
    teacher = torch.softmax(torch.randn(6, generator=g, dtype=DT) * 2, 0)
    log_ratio = teacher.log() - ref.log()
    torch.testing.assert_close(rl.kl_regularised_optimum(ref, log_ratio, beta=1.0), teacher, rtol=1e-12, atol=1e-14)
    for alpha in (0.5, 2.0, 3.0):
        star = rl.kl_regularised_optimum(ref, alpha * log_ratio, beta=1.0)
        unnorm = [r ** (1 - alpha) * t ** alpha for r, t in zip(ref.tolist(), teacher.tolist())]
        assert star.tolist() == pytest.approx([u / sum(unnorm) for u in unnorm], rel=1e-10)
    # α > 1 extrapolates past the teacher: more mass than π_T where the teacher most exceeds π_ref,
    # less where it most falls short, and further from π_ref than the teacher is
    star = rl.kl_regularised_optimum(ref, 2.0 * log_ratio, beta=1.0)
    up, down = int(log_ratio.argmax()), int(log_ratio.argmin())
    assert star[up] > teacher[up] * 1.05 and star[down] < teacher[down] * 0.95
    assert _kl(star.tolist(), ref.tolist()) > _kl(teacher.tolist(), ref.tolist()) + 0.1


def test_sequence_optimum_of_the_summed_distillation_reward_is_the_teacher():
    """Over whole sequences: π_ref the student's starting table, r(x) = Σ_t r_t (the per-token
    rewards of the teacher against π_ref) and β = 1 give π*(x) = π_T(x) for all V^H sequences."""
    vocab, horizon = 3, 2
    z_ref, zt = _table(12, vocab, horizon)
    seqs = rl.enumerate_sequences(vocab, horizon)
    lp = torch.log_softmax(rl.tabular_prefix_logits(z_ref), -1).gather(-1, seqs[..., None])[..., 0]
    lq = torch.log_softmax(rl.tabular_prefix_logits(zt), -1).gather(-1, seqs[..., None])[..., 0]
    reward = rl.distillation_rewards(lp, lq).sum(-1)
    star = rl.kl_regularised_optimum(lp.sum(-1).exp(), reward, beta=1.0)
    q = _sequence_probs(zt, vocab, horizon)
    assert star.tolist() == pytest.approx([q[tuple(x)] for x in seqs.tolist()], rel=1e-10)


# ============================================================================= config


def test_config_defaults_are_fully_on_policy_per_token_reverse_kl():
    c = rl.DistillationConfig()
    assert (c.beta, c.lmbda, c.reward, c.gamma) == (1.0, 1.0, "sampled", 0.0)
    rl.DistillationConfig(reward="full", beta=0.5, lmbda=0.5)
    rl.DistillationConfig(reward="sampled", gamma=1.0)


@pytest.mark.parametrize("kwargs, field", [
    (dict(beta=-0.1, reward="full"), "beta"), (dict(beta=1.5, reward="full"), "beta"),
    (dict(beta=0.5), "beta"),  # the sampled reward estimates the reverse KL only
    (dict(temperature=0.0), "temperature"), (dict(temperature=math.inf), "temperature"),
    (dict(lmbda=1.2), "lmbda"), (dict(lmbda=True), "lmbda"),
    (dict(max_new_tokens=0), "max_new_tokens"), (dict(max_new_tokens=2.0), "max_new_tokens"),
    (dict(lr=0.0), "lr"), (dict(lr="1e-5"), "lr"),
    (dict(num_steps=0), "num_steps"), (dict(num_steps=True), "num_steps"),
    (dict(reward="k3"), "reward"),
    (dict(gamma=-0.5), "gamma"), (dict(gamma=0.5, reward="full"), "gamma"),
    (dict(seed=-1), "seed"),
    (dict(prompts_per_step=0), "prompts_per_step"), (dict(samples_per_prompt=1.5), "samples_per_prompt"),
    (dict(distill_coef=-1.0), "distill_coef"), (dict(verifier_coef=math.nan), "verifier_coef"),
    (dict(max_grad_norm=0.0), "max_grad_norm"),
    (dict(verifier_coef=1.0, samples_per_prompt=1), "samples_per_prompt"),  # GRPO needs a group
    (dict(distill_coef=0.0), "distill_coef"),  # a loss of 0
])
def test_config_errors_name_the_field(kwargs, field):
    with pytest.raises(ValueError, match=f"`{field}`"):
        rl.DistillationConfig(**kwargs)


def test_to_trl_refuses_what_trl_cannot_express_before_importing_it():
    with pytest.raises(ValueError, match=r"lmbda=0\.5(.|\n)*gamma=1\.0"):
        rl.to_trl_distillation_config(rl.DistillationConfig(lmbda=0.5, gamma=1.0))
    with pytest.raises(ValueError, match=r"verifier_coef=1\.0(.|\n)*distill_coef=0\.5"):
        rl.to_trl_distillation_config(rl.DistillationConfig(verifier_coef=1.0, distill_coef=0.5))
    with pytest.raises(ValueError, match="`config`"):
        rl.to_trl_distillation_config({"beta": 1.0})
    with pytest.raises(ValueError, match="max_completion_length"):
        rl.to_trl_distillation_config(rl.DistillationConfig(), max_completion_length=7)


# ============================================================================= argument errors


Z = torch.zeros(2, 3, 4)
LP = torch.zeros(2, 3)
ERRORS = [
    (lambda: rl.distillation_rewards(LP, torch.zeros(2, 4)), "teacher_log_probs"),
    (lambda: rl.distillation_rewards(torch.full((2, 3), math.nan), LP), "log_probs"),
    (lambda: rl.distillation_rewards(torch.tensor(1.0), torch.tensor(1.0)), "log_probs"),
    (lambda: rl.distillation_rewards(LP, LP, mask=torch.ones(3, 2)), "mask"),
    (lambda: rl.distillation_rewards(LP, LP, mask=torch.full((2, 3), 2)), "mask"),
    (lambda: rl.reverse_kl_per_token(torch.zeros(4), torch.zeros(4)), "logits"),
    (lambda: rl.reverse_kl_per_token(Z, torch.zeros(2, 3, 5)), "teacher_logits"),
    (lambda: rl.reverse_kl_per_token(Z, Z, temperature=0.0), "temperature"),
    (lambda: rl.reverse_kl_per_token(Z, Z, mask=torch.ones(2, 4)), "mask"),
    (lambda: rl.forward_kl_per_token(torch.zeros(0, 3, 4), torch.zeros(0, 3, 4)), "logits"),
    (lambda: rl.forward_kl_per_token(Z, Z, temperature=-1.0), "temperature"),
    (lambda: rl.forward_kl_per_token(Z, torch.full((2, 3, 4), math.inf)), "teacher_logits"),
    (lambda: rl.generalized_jsd(Z, Z, beta=1.5), "beta"),
    (lambda: rl.generalized_jsd(Z, Z, beta=-0.1), "beta"),
    (lambda: rl.generalized_jsd(Z, Z, beta=0.5, reduction="avg"), "reduction"),
    (lambda: rl.generalized_jsd(Z, Z, beta=0.5, mask=torch.ones(3)), "mask"),
    (lambda: rl.enumerate_sequences(1, 2), "vocab_size"),
    (lambda: rl.enumerate_sequences(2, 0), "horizon"),
    (lambda: rl.enumerate_sequences(2, 2.0), "horizon"),
    (lambda: rl.enumerate_sequences(10, 6), "vocab_size"),
    (lambda: rl.tabular_prefix_logits(torch.zeros(3)), "logits"),
    (lambda: rl.tabular_prefix_logits(torch.zeros(4, 2)), "logits"),  # 1, 3, 7, ... rows for V = 2
    (lambda: rl.tabular_prefix_logits(torch.zeros(3, 1)), "logits"),
    (lambda: rl.tabular_prefix_logits(torch.zeros(2 ** 17 - 1, 2)), "logits"),  # 2^17 sequences
    (lambda: rl.sequence_reverse_kl(torch.zeros(3, 2), torch.zeros(7, 2)), "teacher_logits"),
    (lambda: rl.stepwise_reverse_kl(torch.zeros(3, 2), torch.full((3, 2), math.nan)), "teacher_logits"),
    (lambda: rl.expected_distillation_gradient(torch.zeros(3, 2), torch.zeros(3, 2), gamma=1.5), "gamma"),
    (lambda: rl.expected_distillation_gradient(torch.zeros(5, 2), torch.zeros(5, 2)), "logits"),
]


@pytest.mark.parametrize("call, name", ERRORS, ids=[f"{i}-{n}" for i, (_, n) in enumerate(ERRORS)])
def test_bad_arguments_raise_value_errors_naming_them(call, name):
    with pytest.raises(ValueError, match=f"`{name}`"):
        call()
