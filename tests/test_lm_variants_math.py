"""GRPO-variant losses: GSPO (sequence ratio, GSPO-token) and DPPO (binary TV/KL trust region).

Each formula is checked against an independent written-out version in this file, a slow oracle in
``rlbook.reference``, hand-built cases, and autograd (values *and* gradients).
"""

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import rlbook as rl
from rlbook import reference as ref

F64 = torch.float64


@st.composite
def gspo_batch(draw, min_t=1):
    """(log_probs, old_log_probs, mask) of shape (B, T), every row with ≥ 1 valid token."""
    b, t = draw(st.integers(1, 4)), draw(st.integers(min_t, 6))
    seed = draw(st.integers(0, 2**31 - 1))
    gen = torch.Generator().manual_seed(seed)
    old = -3 * torch.rand(b, t, generator=gen, dtype=F64) - 0.01
    lp = old + draw(st.sampled_from([0.01, 0.3, 1.0])) * torch.randn(b, t, generator=gen, dtype=F64)
    mask = torch.rand(b, t, generator=gen) < draw(st.sampled_from([0.3, 0.7, 1.0]))
    mask[torch.arange(b), torch.randint(0, t, (b,), generator=gen)] = True  # ≥ 1 token per row
    return lp, old, mask


def _written_out_gspo_objective(lp, old, adv, mask, eps_low, eps_high):
    """J_GSPO = (1/B) Σ_i min(s_i A_i, clip(s_i) A_i), written with an explicit loop over rows."""
    total = 0.0
    for i in range(lp.shape[0]):
        valid = mask[i]
        s = torch.exp((lp[i][valid] - old[i][valid]).sum() / valid.sum())
        total = total + torch.minimum(s * adv[i], torch.clamp(s, 1 - eps_low, 1 + eps_high) * adv[i])
    return total / lp.shape[0]


EPS = st.sampled_from([(0.2, 0.2), (3e-4, 4e-4), (0.05, 0.3), (0.0, 0.0)])

# ----------------------------------------------------------------------------- GSPO: the sequence ratio


@given(gspo_batch())
def test_sequence_log_ratio_matches_loop_and_is_a_geometric_mean(data):
    lp, old, mask = data
    got = rl.gspo_sequence_log_ratio(lp, old, mask)
    assert got.shape == (lp.shape[0],)
    torch.testing.assert_close(got, torch.tensor(ref.gspo_sequence_log_ratio_loop(lp, old, mask), dtype=F64))
    for i in range(lp.shape[0]):  # s_i = (Π_t ρ_{i,t})^{1/|y_i|}
        ratios = (lp[i] - old[i]).exp()[mask[i]]
        geometric = ratios.prod() ** (1.0 / int(mask[i].sum()))
        torch.testing.assert_close(got[i].exp(), geometric, rtol=1e-10, atol=0)


def test_sequence_ratio_hand_numbers_and_length_invariance():
    # token ratios 2 and 8 over two valid tokens: s = √16 = 4; the padded 9 is ignored
    lp = torch.tensor([[0.2, 0.8, 0.9]], dtype=F64).log()
    old = torch.tensor([[0.1, 0.1, 0.1]], dtype=F64).log()
    s = rl.gspo_sequence_log_ratio(lp, old, torch.tensor([[True, True, False]])).exp()
    torch.testing.assert_close(s, torch.tensor([4.0], dtype=F64))
    # the same per-token ratio repeated k times gives the same s for every length (not ρ^k)
    for length in (1, 5, 50):
        lp_k, old_k = torch.full((1, length), math.log(0.3), dtype=F64), torch.full((1, length), math.log(0.2), dtype=F64)
        s_k = rl.gspo_sequence_log_ratio(lp_k, old_k, torch.ones(1, length, dtype=torch.bool)).exp()
        torch.testing.assert_close(s_k, torch.tensor([1.5], dtype=F64))


def test_sequence_ratio_gradient_is_one_over_length_on_valid_tokens():
    lp = torch.tensor([[-1.0, -2.0, -0.5, -3.0]], dtype=F64, requires_grad=True)
    mask = torch.tensor([[True, False, True, True]])
    rl.gspo_sequence_log_ratio(lp, torch.zeros(1, 4, dtype=F64) - 1, mask).sum().backward()
    torch.testing.assert_close(lp.grad, torch.tensor([[1 / 3, 0.0, 1 / 3, 1 / 3]], dtype=F64))


# ----------------------------------------------------------------------------- GSPO: the loss


@given(gspo_batch(), EPS, st.integers(0, 1000))
def test_gspo_value_is_the_negative_written_out_objective(data, eps, seed):
    lp, old, mask = data
    adv = torch.randn(lp.shape[0], generator=torch.Generator().manual_seed(seed), dtype=F64)
    loss = rl.gspo_loss(lp, old, adv, mask, *eps)
    assert loss.shape == lp.shape
    assert torch.equal(loss[~mask], torch.zeros_like(loss[~mask]))  # zero on padding
    per_row = torch.tensor(ref.gspo_sequence_loss_loop(lp, old, adv, mask, *eps), dtype=F64)
    for i in range(lp.shape[0]):  # every valid token of row i carries the row's loss
        torch.testing.assert_close(loss[i][mask[i]], per_row[i].expand(int(mask[i].sum())))
    objective = _written_out_gspo_objective(lp, old, adv, mask, *eps)
    torch.testing.assert_close(rl.seq_mean_token_mean(loss, mask), -objective)


@given(gspo_batch(), EPS, st.integers(0, 1000), st.sampled_from([(-1,), (-1, 1)]))
def test_gspo_gradient_matches_autograd_of_the_written_out_objective(data, eps, seed, adv_shape):
    lp, old, mask = data
    adv = torch.randn(lp.shape[0], generator=torch.Generator().manual_seed(seed), dtype=F64)
    lp1, lp2 = lp.clone().requires_grad_(), lp.clone().requires_grad_()
    rl.seq_mean_token_mean(rl.gspo_loss(lp1, old, adv.reshape(adv_shape), mask, *eps), mask).backward()
    (-_written_out_gspo_objective(lp2, old, adv, mask, *eps)).backward()
    torch.testing.assert_close(lp1.grad, lp2.grad, rtol=1e-10, atol=1e-12)


@given(gspo_batch(), EPS, st.integers(0, 1000))
def test_gspo_token_equals_sequence_level_for_constant_row_advantages(data, eps, seed):
    lp, old, mask = data
    adv = torch.randn(lp.shape[0], generator=torch.Generator().manual_seed(seed), dtype=F64)
    lp1, lp2 = lp.clone().requires_grad_(), lp.clone().requires_grad_()
    seq = rl.gspo_loss(lp1, old, adv, mask, *eps)
    tok = rl.gspo_loss(lp2, old, adv[:, None].expand(lp.shape), mask, *eps, token_level=True)
    torch.testing.assert_close(seq, tok)
    rl.seq_mean_token_mean(seq, mask).backward()
    rl.seq_mean_token_mean(tok, mask).backward()
    torch.testing.assert_close(lp1.grad, lp2.grad, rtol=1e-10, atol=1e-12)


def test_gspo_token_gradient_uses_each_tokens_own_advantage():
    # one row, 3 valid tokens, s = 1 (inside the band): ∂/∂log π_t of seq_mean_token_mean = −A_t·s/(B·|y|)
    lp = torch.tensor([[-1.0, -2.0, -0.5, -4.0]], dtype=F64, requires_grad=True)
    mask = torch.tensor([[True, True, True, False]])
    adv = torch.tensor([[1.0, -2.0, 0.5, 7.0]], dtype=F64)
    loss = rl.gspo_loss(lp, lp.detach(), adv, mask, 0.2, token_level=True)
    rl.seq_mean_token_mean(loss, mask).backward()
    torch.testing.assert_close(lp.grad, torch.tensor([[-1.0, 2.0, -0.5, 0.0]], dtype=F64) / 3)


@pytest.mark.parametrize("token_level", [False, True])
def test_gspo_row_gradient_is_exactly_zero_when_clipped_in_the_advantage_direction(token_level):
    eps = 0.1
    old = torch.full((4, 3), -1.0, dtype=F64)
    shift = torch.tensor([0.3, -0.3, -0.3, 0.3], dtype=F64)[:, None]  # s = e^{±0.3}: outside [0.9, 1.1]
    lp = (old + shift).requires_grad_()
    adv = torch.tensor([1.0, -1.0, 1.0, -1.0], dtype=F64)  # rows 0, 1: pushed further out -> clipped
    mask = torch.ones(4, 3, dtype=torch.bool)
    adv_in = adv[:, None].expand(4, 3) if token_level else adv
    loss = rl.gspo_loss(lp, old, adv_in, mask, eps, token_level=token_level)
    rl.seq_mean_token_mean(loss, mask).backward()
    assert torch.equal(lp.grad[:2], torch.zeros(2, 3, dtype=F64))  # exactly 0, not small
    s = shift.exp().squeeze(1)
    expected = (-adv * s / (4 * 3))[2:, None].expand(2, 3)  # rows 2, 3: the min picks s·A
    torch.testing.assert_close(lp.grad[2:], expected)
    # clipped rows carry the constant clip(s)·A: −(1+ε)·1 and −(1−ε)·(−1)
    torch.testing.assert_close(loss[:2, 0], torch.tensor([-(1 + eps), (1 - eps)], dtype=F64))


def test_gspo_ignores_padding_values_and_gradcheck():
    gen = torch.Generator().manual_seed(0)
    lp, old = -torch.rand(3, 5, generator=gen, dtype=F64), -torch.rand(3, 5, generator=gen, dtype=F64)
    mask = torch.tensor([[1, 1, 0, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]], dtype=torch.bool)
    adv = torch.tensor([0.5, -1.0, 2.0], dtype=F64)
    garbage = torch.where(mask, lp, torch.full_like(lp, -50.0))
    torch.testing.assert_close(rl.gspo_loss(lp, old, adv, mask, 0.2), rl.gspo_loss(garbage, old, adv, mask, 0.2))
    x = lp.clone().requires_grad_()
    assert torch.autograd.gradcheck(lambda z: rl.gspo_loss(z, old, adv, mask, 0.5), (x,))
    # (no gradcheck for GSPO-token: its stop-gradients make the gradient differ from the
    # derivative of its per-token value on purpose; its aggregated gradient is checked above)


def test_gspo_errors_name_the_argument():
    lp, old = torch.zeros(2, 3), torch.zeros(2, 3)
    mask = torch.tensor([[True, False, False], [False, False, False]])
    with pytest.raises(ValueError, match=r"completion_mask.*rows \[1\] are empty"):
        rl.gspo_sequence_log_ratio(lp, old, mask)  # row 1 is empty
    six_empty = torch.zeros(7, 3, dtype=torch.bool)
    six_empty[6, 0] = True
    with pytest.raises(ValueError, match=r"rows \[0, 1, 2, 3\] are empty"):  # the first four are named
        rl.gspo_sequence_log_ratio(torch.zeros(7, 3), torch.zeros(7, 3), six_empty)
    with pytest.raises(ValueError, match="completion_mask"):
        rl.gspo_loss(lp, old, torch.zeros(2), mask)
    full = torch.ones(2, 3, dtype=torch.bool)
    with pytest.raises(ValueError, match="completion_mask"):
        rl.gspo_loss(lp, old, torch.zeros(2), torch.ones(2, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="log_probs"):
        rl.gspo_sequence_log_ratio(torch.zeros(3), torch.zeros(3), torch.ones(3, dtype=torch.bool))
    with pytest.raises(ValueError, match="old_log_probs"):
        rl.gspo_loss(lp, torch.zeros(2, 4), torch.zeros(2), full)
    with pytest.raises(ValueError, match="advantages"):
        rl.gspo_loss(lp, old, torch.zeros(2, 3), full)  # per-token advantages need token_level=True
    with pytest.raises(ValueError, match="advantages"):
        rl.gspo_loss(lp, old, torch.zeros(3), full)
    with pytest.raises(ValueError, match="advantages"):
        rl.gspo_loss(lp, old, torch.zeros(2, 4), full, token_level=True)
    with pytest.raises(ValueError, match="clip_eps_low"):
        rl.gspo_loss(lp, old, torch.zeros(2), full, clip_eps_low=-0.1)
    with pytest.raises(ValueError, match="clip_eps_high"):
        rl.gspo_loss(lp, old, torch.zeros(2), full, clip_eps_high=float("nan"))


# ----------------------------------------------------------------------------- DPPO: binary divergences


def _two_outcome(log_prob):
    """The explicit distribution over {sampled token, any other token}, in Python floats."""
    p = math.exp(log_prob)
    return [p, 1.0 - p]


LOG_PROB = st.floats(-15.0, -1e-3)


@given(st.lists(st.tuples(LOG_PROB, LOG_PROB), min_size=1, max_size=8))
def test_binary_tv_and_kl_equal_the_divergences_of_explicit_two_outcome_distributions(pairs):
    lp = torch.tensor([a for a, _ in pairs], dtype=F64)
    old = torch.tensor([b for _, b in pairs], dtype=F64)
    tv_want, kl_want = [], []
    for a, b in pairs:
        P, Q = _two_outcome(a), _two_outcome(b)  # P = π_θ, Q = π_old (the sampling policy)
        tv_want.append(0.5 * sum(abs(x - y) for x, y in zip(P, Q)))
        kl_want.append(sum(y * math.log(y / x) for x, y in zip(P, Q)))  # KL(Q ‖ P): expectation under Q
    torch.testing.assert_close(rl.binary_tv(lp, old), torch.tensor(tv_want, dtype=F64), rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(rl.binary_kl(lp, old), torch.tensor(kl_want, dtype=F64), rtol=1e-7, atol=1e-12)
    torch.testing.assert_close(rl.binary_tv(lp, old), torch.tensor(ref.binary_tv_loop(lp, old), dtype=F64))
    torch.testing.assert_close(rl.binary_kl(lp, old), torch.tensor(ref.binary_kl_loop(lp, old), dtype=F64), rtol=1e-7, atol=1e-12)


def test_binary_kl_direction_and_hand_numbers():
    p, q = 0.5, 0.25
    lp, old = torch.tensor(math.log(p), dtype=F64), torch.tensor(math.log(q), dtype=F64)
    forward = q * math.log(q / p) + (1 - q) * math.log((1 - q) / (1 - p))  # KL(Bern(q) ‖ Bern(p))
    reverse = p * math.log(p / q) + (1 - p) * math.log((1 - p) / (1 - q))
    assert float(rl.binary_kl(lp, old)) == pytest.approx(forward, rel=1e-12)
    assert abs(forward - reverse) > 1e-3  # the direction matters and is the one documented
    assert float(rl.binary_tv(lp, old)) == pytest.approx(0.25, rel=1e-12)
    # a rare token's ratio-2 move is a tiny TV; a frequent token's ratio-1.1 move is a large one
    tv = rl.binary_tv(torch.tensor([0.002, 0.99], dtype=F64).log(), torch.tensor([0.001, 0.9], dtype=F64).log())
    torch.testing.assert_close(tv, torch.tensor([0.001, 0.09], dtype=F64))


def test_binary_divergences_are_zero_for_equal_policies_and_symmetric_tv():
    gen = torch.Generator().manual_seed(1)
    lp = -5 * torch.rand(50, generator=gen, dtype=F64)
    other = -5 * torch.rand(50, generator=gen, dtype=F64)
    assert torch.equal(rl.binary_tv(lp, lp), torch.zeros(50, dtype=F64))
    torch.testing.assert_close(rl.binary_kl(lp, lp), torch.zeros(50, dtype=F64), rtol=0, atol=1e-15)
    torch.testing.assert_close(rl.binary_tv(lp, other), rl.binary_tv(other, lp))
    assert (rl.binary_kl(lp, other) >= -1e-15).all()
    # Pinsker: KL ≥ 2·TV² for the same pair of Bernoullis
    assert (rl.binary_kl(lp, other) >= 2 * rl.binary_tv(lp, other) ** 2 - 1e-12).all()


def test_binary_kl_is_stable_near_and_at_probability_one():
    mpmath = pytest.importorskip("mpmath")
    # log-probabilities so close to 0 that 1 − exp(x) cancels catastrophically if done naively
    cases = [(-1e-12, -3e-12), (-3e-12, -1e-12), (-1e-9, -0.5), (-0.5, -1e-9), (-1e-300, -1e-200)]
    for a, b in cases:
        with mpmath.workdps(60):  # the exact value, from 60-digit arithmetic
            a_, b_ = mpmath.mpf(a), mpmath.mpf(b)
            q, fail_p, fail_q = mpmath.exp(b_), -mpmath.expm1(a_), -mpmath.expm1(b_)
            exact = q * (b_ - a_) + fail_q * mpmath.log(fail_q / fail_p)
        got = float(rl.binary_kl(torch.tensor(a, dtype=F64), torch.tensor(b, dtype=F64)))
        assert got == pytest.approx(float(exact), rel=1e-6, abs=1e-300), (a, b)
    lp = torch.tensor([0.0, -0.7, 0.0, -40.0], dtype=F64, requires_grad=True)
    old = torch.tensor([0.0, 0.0, -0.7, 0.0], dtype=F64)
    kl = rl.binary_kl(lp, old)
    assert not torch.isnan(kl).any()
    assert kl[0] == 0.0  # q = p = 1
    assert kl[1].item() == pytest.approx(0.7, rel=1e-12)  # q = 1: KL = −log p
    assert kl[2] == float("inf")  # p = 1 > q: π_θ put all mass on the token
    assert kl[3].item() == pytest.approx(40.0, rel=1e-12)
    kl[[0, 1, 3]].sum().backward()  # finite gradients where q = 1, including p = q = 1; no NaN leaks from kl[2]
    assert torch.isfinite(lp.grad).all()
    torch.testing.assert_close(lp.grad, torch.tensor([-1.0, -1.0, 0.0, -1.0], dtype=F64))


def test_binary_divergence_errors():
    with pytest.raises(ValueError, match="old_log_probs"):
        rl.binary_tv(torch.zeros(3), torch.zeros(4))
    with pytest.raises(ValueError, match="log_probs"):
        rl.binary_kl(torch.tensor([0.1]), torch.tensor([-0.1]))
    with pytest.raises(ValueError, match="old_log_probs"):
        rl.binary_kl(torch.tensor([-0.1]), torch.tensor([0.1]))
    with pytest.raises(ValueError, match="log_probs"):
        rl.binary_tv(torch.tensor([float("nan")]), torch.tensor([-0.1]))


# ----------------------------------------------------------------------------- DPPO: mask and loss


def test_dppo_mask_hand_cases():
    # (p, q, Â) with τ = 0.1 (binary TV): block iff |p − q| > τ and Â pushes the ratio further out
    cases = [
        (0.5, 0.3, +1.0, False),  # moved up by 0.2, Â > 0 would raise it more: blocked
        (0.5, 0.3, -1.0, True),  # moved up, Â < 0 lowers it back: kept
        (0.1, 0.3, -1.0, False),  # moved down by 0.2, Â < 0 would lower it more: blocked
        (0.1, 0.3, +1.0, True),  # moved down, Â > 0 raises it back: kept
        (0.35, 0.3, +1.0, True),  # inside the region (0.05 ≤ τ): kept whatever the direction
        (0.002, 0.001, +1.0, True),  # ratio 2 (PPO would clip) but TV = 0.001: kept
        (0.5, 0.3, 0.0, True),  # Â = 0 is never blocked
    ]
    p = torch.tensor([c[0] for c in cases], dtype=F64)
    q = torch.tensor([c[1] for c in cases], dtype=F64)
    adv = torch.tensor([c[2] for c in cases], dtype=F64)
    keep = rl.dppo_mask(p.log(), q.log(), adv, threshold=0.1)
    assert keep.tolist() == [c[3] for c in cases]
    assert rl.dppo_mask(p.log(), q.log(), adv, 0.1).tolist() == ref.dppo_mask_loop(p.log(), q.log(), adv, 0.1)
    # PPO's ratio clip disagrees on the rare token (ratio 2 > 1.2): DPPO keeps what PPO drops
    assert bool(rl.clip_region(p[5:6] / q[5:6], adv[5:6], 0.2)[0])
    # binary KL uses its own scale: with τ = 0.05 nats the 0.3 → 0.5 move (KL 0.087) is blocked too
    kl_keep = rl.dppo_mask(p.log(), q.log(), adv, threshold=0.05, divergence="binary_kl")
    assert kl_keep.tolist()[:4] == [False, True, False, True]


@given(st.integers(0, 10_000), st.sampled_from([0.01, 0.05, 0.2]), st.sampled_from(["binary_tv", "binary_kl"]))
def test_dppo_mask_blocks_exactly_the_tokens_outside_and_pushed_out(seed, tau, divergence):
    gen = torch.Generator().manual_seed(seed)
    old = -3 * torch.rand(4, 6, generator=gen, dtype=F64)
    lp = (old + 0.5 * torch.randn(4, 6, generator=gen, dtype=F64)).clamp(max=-1e-6)
    adv = torch.randn(4, 6, generator=gen, dtype=F64)
    adv[0, :2] = 0.0
    keep = rl.dppo_mask(lp, old, adv, tau, divergence)
    div = rl.binary_tv(lp, old) if divergence == "binary_tv" else rl.binary_kl(lp, old)
    ratio = (lp - old).exp()
    blocked = (div > tau) & (((adv > 0) & (ratio > 1)) | ((adv < 0) & (ratio < 1)))
    assert torch.equal(keep, ~blocked)
    want = ref.dppo_mask_loop(lp.flatten().tolist(), old.flatten().tolist(), adv.flatten().tolist(), tau, divergence)
    assert keep.flatten().tolist() == want


@given(st.integers(0, 10_000), st.sampled_from(["binary_tv", "binary_kl"]))
def test_dppo_gradient_is_zero_exactly_at_blocked_tokens(seed, divergence):
    gen = torch.Generator().manual_seed(seed)
    old = -3 * torch.rand(3, 8, generator=gen, dtype=F64)
    lp = (old + 0.7 * torch.randn(3, 8, generator=gen, dtype=F64)).clamp(max=-1e-6).requires_grad_()
    adv = torch.randn(3, 8, generator=gen, dtype=F64)
    loss = rl.dppo_loss(lp, old, adv, 0.05, divergence)
    loss.sum().backward()
    keep = rl.dppo_mask(lp, old, adv, 0.05, divergence)
    ratio = (lp - old).exp().detach()
    assert torch.equal(lp.grad[~keep], torch.zeros_like(lp.grad[~keep]))
    assert torch.equal(loss.detach()[~keep], torch.zeros_like(loss.detach()[~keep]))
    torch.testing.assert_close(lp.grad[keep], -(ratio * adv)[keep])
    torch.testing.assert_close(loss.detach()[keep], -(ratio * adv)[keep])


def test_dppo_without_blocking_is_the_plain_importance_weighted_surrogate():
    gen = torch.Generator().manual_seed(3)
    old = -2 * torch.rand(2, 5, generator=gen, dtype=F64)
    lp = old + 0.01 * torch.randn(2, 5, generator=gen, dtype=F64)
    adv = torch.randn(2, 1, generator=gen, dtype=F64)  # (B, 1) broadcasts over T
    loss = rl.dppo_loss(lp, old, adv, threshold=0.5)
    torch.testing.assert_close(loss, -(lp - old).exp() * adv)


def test_dppo_errors_name_the_argument():
    lp, old, adv = torch.tensor([-0.5]), torch.tensor([-0.6]), torch.tensor([1.0])
    for bad in (0.0, -0.1, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="threshold"):
            rl.dppo_mask(lp, old, adv, bad)
        with pytest.raises(ValueError, match="threshold"):
            rl.dppo_loss(lp, old, adv, bad)
    with pytest.raises(ValueError, match="divergence"):
        rl.dppo_mask(lp, old, adv, 0.1, divergence="kl")
    with pytest.raises(ValueError, match="divergence"):
        rl.dppo_loss(lp, old, adv, 0.1, divergence="topk")
    with pytest.raises(ValueError, match="advantages"):
        rl.dppo_loss(lp, old, torch.ones(3), 0.1)
    with pytest.raises(ValueError, match="old_log_probs"):
        rl.dppo_mask(lp, torch.zeros(2), adv, 0.1)
