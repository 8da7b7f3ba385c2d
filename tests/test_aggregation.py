"""Masked reductions and the three loss aggregations (GRPO, DAPO, Dr. GRPO)."""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import rlbook as rl
from rlbook import reference as ref

F64 = torch.float64
MODES = ["seq_mean_token_mean", "token_mean", "fixed_length_mean"]

# hand-worked example: a 4-token completion of ones and a 1-token completion of 4
LOSS = torch.tensor([[1.0, 1.0, 1.0, 1.0], [4.0, 0.0, 0.0, 0.0]], dtype=F64)
MASK = torch.tensor([[True, True, True, True], [True, False, False, False]])


@st.composite
def loss_and_mask(draw, min_rows=1):
    b = draw(st.integers(min_rows, 5))
    t = draw(st.integers(1, 7))
    seed = draw(st.integers(0, 2**31 - 1))
    gen = torch.Generator().manual_seed(seed)
    loss = torch.randn(b, t, generator=gen, dtype=F64)
    lengths = torch.randint(1, t + 1, (b,), generator=gen)
    mask = torch.arange(t)[None, :] < lengths[:, None]  # right padding, every row non-empty
    return loss, mask


def _apply(mode, loss, mask, max_length=None):
    if mode == "fixed_length_mean":
        return rl.fixed_length_mean(loss, mask, max_length=max_length or loss.shape[1])
    return rl.AGGREGATIONS[mode](loss, mask)


# ----------------------------------------------------------------------------- hand numbers


def test_hand_worked_numbers():
    # GRPO: (mean of row 0 = 1, mean of row 1 = 4) / 2 = 2.5
    assert rl.seq_mean_token_mean(LOSS, MASK).item() == pytest.approx(2.5)
    # DAPO: (4 + 4) / 5 tokens = 1.6
    assert rl.token_mean(LOSS, MASK).item() == pytest.approx(1.6)
    # Dr. GRPO: 8 / (2 sequences × L_max 4) = 1.0; with L_max = 8: 0.5
    assert rl.fixed_length_mean(LOSS, MASK, max_length=4).item() == pytest.approx(1.0)
    assert rl.fixed_length_mean(LOSS, MASK, max_length=8).item() == pytest.approx(0.5)


def test_hand_worked_weights():
    w = rl.per_token_weights(MASK, "seq_mean_token_mean")
    torch.testing.assert_close(w[0], torch.full((4,), 1 / 8), check_dtype=False)
    torch.testing.assert_close(w[1], torch.tensor([0.5, 0, 0, 0]), check_dtype=False)
    torch.testing.assert_close(rl.per_token_weights(MASK, "token_mean"), MASK / 5.0, check_dtype=False)
    torch.testing.assert_close(rl.per_token_weights(MASK, "fixed_length_mean", max_length=8), MASK / 16.0, check_dtype=False)


def test_masked_basics():
    x = torch.tensor([[1.0, 2.0, float("nan")], [3.0, float("inf"), 5.0]], dtype=F64, requires_grad=True)
    m = torch.tensor([[True, True, False], [True, False, True]])
    assert rl.masked_sum(x, m).item() == 11.0
    assert rl.masked_mean(x, m).item() == pytest.approx(11 / 4)
    torch.testing.assert_close(rl.masked_mean(x, m, dim=-1), torch.tensor([1.5, 4.0], dtype=F64))
    rl.masked_mean(x, m).backward()
    torch.testing.assert_close(x.grad, m / 4.0, check_dtype=False)  # padding gets 0, never NaN


def test_masked_whiten():
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(4, 6, generator=gen, dtype=F64) * 3 + 2
    m = torch.rand(4, 6, generator=gen) < 0.6
    z = rl.masked_whiten(x, m, eps=0.0)
    assert rl.masked_mean(z, m).item() == pytest.approx(0.0, abs=1e-12)
    assert rl.masked_mean(z**2, m).item() == pytest.approx(1.0)
    assert torch.equal(z[~m], torch.zeros_like(z[~m]))
    assert torch.equal(rl.masked_whiten(torch.full((3,), 0.1), torch.ones(3, dtype=torch.bool)), torch.zeros(3))


def test_masked_mean_empty_row_is_nan_and_leaves_the_others_alone():
    x = torch.tensor([[1.0, 3.0, 9.0], [5.0, 7.0, 9.0], [2.0, 2.0, 2.0]], dtype=F64, requires_grad=True)
    m = torch.tensor([[True, True, False], [False, False, False], [True, False, False]])
    rows = rl.masked_mean(x, m, dim=-1)
    assert rows[0].item() == 2.0 and torch.isnan(rows[1]) and rows[2].item() == 2.0  # torch: mean of empty = NaN
    assert torch.isnan(torch.tensor([], dtype=F64).mean())
    # the empty row's gradient is 0 everywhere (never NaN), the others get 1/|row|
    torch.nanmean(rows).backward()
    expected = torch.tensor([[0.5, 0.5, 0.0], [0.0, 0.0, 0.0], [1.0, 0.0, 0.0]], dtype=F64) / 2
    torch.testing.assert_close(x.grad, expected)
    # along dim 0 too, and an all-False mask along a dim is all NaN (no error)
    cols = rl.masked_mean(x.detach(), m, dim=0)
    assert cols[0].item() == 1.5 and cols[1].item() == 3.0 and torch.isnan(cols[2])
    assert torch.isnan(rl.masked_mean(x.detach(), torch.zeros_like(m), dim=-1)).all()


def test_masked_sum_of_nothing_is_zero():
    x = torch.tensor([[1.0, float("nan")], [3.0, 4.0]])
    m = torch.tensor([[False, False], [True, False]])
    torch.testing.assert_close(rl.masked_sum(x, m, dim=-1), torch.tensor([0.0, 3.0]))
    assert rl.masked_sum(x, torch.zeros_like(m)).item() == 0.0


def test_empty_completion_contributes_zero_to_each_aggregation():
    # a third, empty completion: GRPO counts it in B (2.5 · 2/3), DAPO and Dr. GRPO ignore it
    loss = torch.cat([LOSS, torch.full((1, 4), 7.0, dtype=F64)])
    mask = torch.cat([MASK, torch.zeros(1, 4, dtype=torch.bool)])
    assert rl.seq_mean_token_mean(loss, mask).item() == pytest.approx(2.5 * 2 / 3)
    assert rl.token_mean(loss, mask).item() == pytest.approx(1.6)
    assert rl.fixed_length_mean(loss, mask, max_length=4).item() == pytest.approx(8 / 12)


def test_masked_normalize_hand_worked():
    x = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], dtype=F64)
    m = torch.tensor([[True, False, True], [False, False, False]])
    assert rl.masked_normalize(x, m).item() == 4.0  # c = 1: the masked sum
    assert rl.masked_normalize(x, m, 2.0).item() == 2.0
    torch.testing.assert_close(rl.masked_normalize(x, m, 4.0, dim=-1), torch.tensor([1.0, 0.0], dtype=F64))
    torch.testing.assert_close(rl.masked_normalize(x, m, 0.5, dim=0), torch.tensor([2.0, 0.0, 6.0], dtype=F64))
    # a 0-d tensor constant works and receives no gradient
    c = torch.tensor(2.0, dtype=F64, requires_grad=True)
    x = x.clone().requires_grad_()
    rl.masked_normalize(x, m, c).backward()
    assert c.grad is None
    torch.testing.assert_close(x.grad, m / 2.0, check_dtype=False)


@given(loss_and_mask(), st.floats(0.1, 10.0), st.sampled_from([None, 0, 1, -1]))
def test_masked_normalize_matches_a_loop(data, constant, dim):
    x, mask = data
    mask = mask.clone()
    mask[0] = False  # an empty row is allowed (sums to 0)
    out = rl.masked_normalize(x, mask, constant, dim=dim)
    b, t = x.shape
    cell = [[x[i, j].item() if mask[i, j] else 0.0 for j in range(t)] for i in range(b)]
    if dim is None:
        expected = torch.tensor(sum(map(sum, cell)) / constant, dtype=F64)
    elif dim == 0:
        expected = torch.tensor([sum(cell[i][j] for i in range(b)) / constant for j in range(t)], dtype=F64)
    else:
        expected = torch.tensor([sum(row) / constant for row in cell], dtype=F64)
    torch.testing.assert_close(out, expected)


# ----------------------------------------------------------------------------- oracles, autograd


@given(loss_and_mask())
def test_aggregations_match_loops(data):
    loss, mask = data
    assert rl.seq_mean_token_mean(loss, mask).item() == pytest.approx(ref.seq_mean_token_mean_loop(loss, mask), abs=1e-12)
    assert rl.token_mean(loss, mask).item() == pytest.approx(ref.token_mean_loop(loss, mask), abs=1e-12)
    L = loss.shape[1] + 3
    assert rl.fixed_length_mean(loss, mask, L).item() == pytest.approx(ref.fixed_length_mean_loop(loss, mask, L), abs=1e-12)


@given(loss_and_mask(), st.sampled_from(MODES))
def test_per_token_weights_are_the_gradient(data, mode):
    loss, mask = data
    loss = loss.clone().requires_grad_()
    (grad,) = torch.autograd.grad(_apply(mode, loss, mask), loss)
    weights = rl.per_token_weights(mask, mode, dtype=F64)
    torch.testing.assert_close(weights, grad)
    # and the aggregate is the weighted sum
    assert (weights * loss).sum().item() == pytest.approx(_apply(mode, loss, mask).item(), abs=1e-12)


@given(loss_and_mask())
def test_weight_totals(data):
    _, mask = data
    assert rl.per_token_weights(mask, "seq_mean_token_mean").sum().item() == pytest.approx(1.0)
    assert rl.per_token_weights(mask, "token_mean").sum().item() == pytest.approx(1.0)
    b, t = mask.shape
    total = rl.per_token_weights(mask, "fixed_length_mean").sum().item()
    assert total == pytest.approx(mask.sum().item() / (b * t)) and total <= 1.0 + 1e-12


# ----------------------------------------------------------------------------- invariances


@given(loss_and_mask(min_rows=2), st.integers(1, 4))
def test_token_mean_micro_batches_with_global_count_equal_full_batch(data, num_chunks):
    loss, mask = data
    full = rl.token_mean(loss, mask)
    n = int(mask.sum())
    parts = [rl.token_mean(l_, m_, num_tokens=n) for l_, m_ in zip(loss.split(1 + len(loss) // num_chunks), mask.split(1 + len(loss) // num_chunks))]
    torch.testing.assert_close(sum(parts), full)


@given(loss_and_mask(min_rows=2))
def test_fixed_length_micro_batches_with_global_count_equal_full_batch(data):
    loss, mask = data
    L = loss.shape[1]
    full = rl.fixed_length_mean(loss, mask, L)
    parts = [rl.fixed_length_mean(loss[i : i + 1], mask[i : i + 1], L, num_sequences=len(loss)) for i in range(len(loss))]
    torch.testing.assert_close(sum(parts), full)


def test_token_mean_with_local_counts_is_not_the_full_batch():
    # averaging per-micro-batch token means re-weights tokens: 2.5 (= GRPO here), not 1.6
    local = [rl.token_mean(LOSS[i : i + 1], MASK[i : i + 1]) for i in range(2)]
    assert (sum(local) / 2).item() == pytest.approx(2.5)
    assert rl.token_mean(LOSS, MASK).item() == pytest.approx(1.6)


@given(loss_and_mask(), st.integers(1, 5), st.sampled_from(MODES))
def test_all_modes_ignore_extra_padding(data, extra, mode):
    # padding columns (mask False) change nothing, for a fixed L_max in Dr. GRPO
    loss, mask = data
    padded_loss = torch.cat([loss, torch.full((len(loss), extra), 123.0, dtype=F64)], dim=1)
    padded_mask = torch.cat([mask, torch.zeros(len(mask), extra, dtype=torch.bool)], dim=1)
    L = loss.shape[1] + extra
    torch.testing.assert_close(_apply(mode, padded_loss, padded_mask, L), _apply(mode, loss, mask, L))


def test_grpo_token_weight_depends_on_own_length_dr_grpo_does_not():
    # lengths 2 and 8 in a batch of 2, budget 8
    mask = torch.zeros(2, 8, dtype=torch.bool)
    mask[0, :2] = True
    mask[1, :] = True
    grpo = rl.per_token_weights(mask, "seq_mean_token_mean")
    assert grpo[0, 0].item() == pytest.approx(1 / 4) and grpo[1, 0].item() == pytest.approx(1 / 16)
    # so a long wrong answer (negative advantage) is pushed down 4× less per token than a short one
    drgrpo = rl.per_token_weights(mask, "fixed_length_mean", max_length=8)
    assert torch.all(drgrpo[mask] == 1 / 16)
    dapo = rl.per_token_weights(mask, "token_mean")
    assert torch.all(dapo[mask] == 1 / 10)


def test_seq_mean_equals_micro_batch_average_of_equal_chunks():
    gen = torch.Generator().manual_seed(3)
    loss = torch.randn(6, 5, generator=gen, dtype=F64)
    mask = torch.arange(5)[None] < torch.tensor([1, 5, 2, 3, 4, 5])[:, None]
    parts = [rl.seq_mean_token_mean(loss[i : i + 2], mask[i : i + 2]) for i in range(0, 6, 2)]
    torch.testing.assert_close(sum(parts) / 3, rl.seq_mean_token_mean(loss, mask))


def test_gradcheck():
    loss = LOSS.clone().requires_grad_()
    for mode in MODES:
        assert torch.autograd.gradcheck(lambda x, mode=mode: _apply(mode, x, MASK), (loss,))


# ----------------------------------------------------------------------------- errors


def test_errors_name_the_argument():
    with pytest.raises(ValueError, match="completion_mask"):
        rl.token_mean(LOSS, MASK[:, :3])
    with pytest.raises(ValueError, match="completion_mask"):
        rl.seq_mean_token_mean(LOSS, torch.zeros_like(MASK))
    with pytest.raises(ValueError, match="loss"):
        rl.token_mean(LOSS[0], MASK[0])
    with pytest.raises(ValueError, match="max_length"):
        rl.fixed_length_mean(LOSS, MASK, max_length=3)
    with pytest.raises(ValueError, match="num_tokens"):
        rl.token_mean(LOSS, MASK, num_tokens=0)
    with pytest.raises(ValueError, match="num_sequences"):
        rl.fixed_length_mean(LOSS, MASK, 4, num_sequences=-1)
    with pytest.raises(ValueError, match="mode"):
        rl.per_token_weights(MASK, "sum")
    with pytest.raises(ValueError, match="completion_mask"):
        rl.per_token_weights(MASK[0], "token_mean")
    with pytest.raises(ValueError, match="mask"):
        rl.masked_mean(LOSS, MASK[:1])
    with pytest.raises(ValueError, match="mask"):
        rl.masked_mean(LOSS, torch.zeros(2, 4, dtype=torch.bool))  # dim=None: one undefined number
    with pytest.raises(ValueError, match="mask"):
        rl.masked_sum(LOSS, torch.full((2, 4), 2))
    with pytest.raises(ValueError, match="eps"):
        rl.masked_whiten(LOSS, MASK, eps=-1)
    for bad in (0.0, -2.0, float("inf"), float("nan"), torch.tensor([1.0, 2.0])):
        with pytest.raises(ValueError, match="normalize_constant"):
            rl.masked_normalize(LOSS, MASK, bad)
    with pytest.raises(ValueError, match="mask"):
        rl.masked_normalize(LOSS, MASK[:, :2], 1.0)


def test_masked_whiten_eps_is_added_to_the_std_and_the_gradient_flows_through_mean_and_std():
    x = torch.tensor([1.0, 3.0, 4.0, 100.0], dtype=F64, requires_grad=True)
    m = torch.tensor([True, True, True, False])
    sel = x[:3]
    mu, sd = sel.mean(), sel.std(correction=0)
    expected = (sel - mu) / (sd + 0.5)  # an independent formula on the selected elements
    got = rl.masked_whiten(x, m, eps=0.5)
    torch.testing.assert_close(got[:3], expected, rtol=1e-12, atol=1e-12)
    assert got[3] == 0
    w = torch.tensor([0.3, -1.0, 2.0, 5.0], dtype=F64)
    (g_got,) = torch.autograd.grad((got * w).sum(), x)
    (g_exp,) = torch.autograd.grad((expected * w[:3]).sum(), x)
    torch.testing.assert_close(g_got, g_exp, rtol=1e-12, atol=1e-12)  # ≠ 0 only via μ and σ for a constant w
    assert g_got[3] == 0
