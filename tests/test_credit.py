"""Credit assignment for multi-turn episodes (rlbook.credit): hand numbers, loop oracles, properties.

One fixed group of 4 episodes (group_size = 4) with 3, 2, 3 and 1 turns is worked out on paper
below and every function is checked against it; each function is also compared with a plain-Python
loop on random inputs, and the defining properties and errors are tested.
"""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlbook.credit import (
    broadcast_to_tokens,
    discounted_turn_returns,
    gigpo_advantages,
    return_batch_normalisation,
    turn_values_to_tokens,
)

F64 = torch.float64


def t(values):
    return torch.tensor(values, dtype=F64)


# ----------------------------------------------------------------------------- the fixed group
# Four episodes of one task instance (group_size = 4), K = 3 turns at most, γ = 0.5.
# Masked turns hold junk (9, anchor ids 1 and 2) that must be ignored everywhere.
GAMMA = 0.5
TURN_MASK = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 1, 1], [1, 0, 0]], dtype=torch.bool)
TURN_REWARDS = t([[1, 0, 4], [0, 0, 9], [-1, 6, 0], [0, 9, 9]])
# G_k = r_k + γ G_{k+1}:
#   ep0: G2 = 4, G1 = 0 + 4/2 = 2, G0 = 1 + 2/2 = 2      -> [2, 2, 4]
#   ep1: G1 = 0, G0 = 0                                 -> [0, 0, 0]  (turn 2 masked)
#   ep2: G2 = 0, G1 = 6 + 0 = 6, G0 = -1 + 6/2 = 2       -> [2, 6, 0]
#   ep3: G0 = 0                                         -> [0, 0, 0]
TURN_RETURNS = t([[2, 2, 4], [0, 0, 0], [2, 6, 0], [0, 0, 0]])
# Episode totals (γ = 1 return of turn 0): 1+0+4 = 5, 0, -1+6+0 = 5, 0
EPISODE_RETURNS = t([5, 0, 5, 0])
# Environment states: every episode starts in state 0; 1, 2, 3 are later states.
ANCHORS = torch.tensor([[0, 1, 2], [0, 1, 2], [0, 3, 2], [0, 1, 2]])

# Tokens (T = 10): P prompt (-1), a_k model tokens of turn k, o_k observation after turn k, pad (-1).
#   ep0: P P a0 a0 o0 a1 o1 a2 a2 pad
#   ep1: P a0 a0 o0 a1 a1 o1 pad pad pad
#   ep2: P P P a0 o0 a1 o1 a2 a2 a2
#   ep3: P a0 a0 pad ...
TURN_IDS = torch.tensor([
    [-1, -1, 0, 0, 0, 1, 1, 2, 2, -1],
    [-1, 0, 0, 0, 1, 1, 1, -1, -1, -1],
    [-1, -1, -1, 0, 0, 1, 1, 2, 2, 2],
    [-1, 0, 0, -1, -1, -1, -1, -1, -1, -1],
])
LOSS_MASK = torch.tensor([
    [0, 0, 1, 1, 0, 1, 0, 1, 1, 0],
    [0, 1, 1, 0, 1, 1, 0, 0, 0, 0],
    [0, 0, 0, 1, 0, 1, 0, 1, 1, 1],
    [0, 1, 1, 0, 0, 0, 0, 0, 0, 0],
])
# Distinct per-turn values (99 on masked turns: no model token points at them).
TURN_VALUES = t([[10, 11, 12], [20, 21, 99], [30, 31, 32], [40, 99, 99]])
EXPECTED_TOKENS = t([
    [0, 0, 10, 10, 0, 11, 0, 12, 12, 0],
    [0, 20, 20, 0, 21, 21, 0, 0, 0, 0],
    [0, 0, 0, 30, 0, 31, 0, 32, 32, 32],
    [0, 40, 40, 0, 0, 0, 0, 0, 0, 0],
])


def test_hand_broadcast_to_tokens():
    # episode advantages [1, -1, 1, -1] on the a-tokens, 0 on P/o/pad
    out = broadcast_to_tokens(t([1, -1, 1, -1]), LOSS_MASK)
    expected = t([
        [0, 0, 1, 1, 0, 1, 0, 1, 1, 0],
        [0, -1, -1, 0, -1, -1, 0, 0, 0, 0],
        [0, 0, 0, 1, 0, 1, 0, 1, 1, 1],
        [0, -1, -1, 0, 0, 0, 0, 0, 0, 0],
    ])
    torch.testing.assert_close(out, expected)
    assert not torch.signbit(out[LOSS_MASK == 0]).any()  # +0.0, not -0.0


def test_hand_turn_values_to_tokens():
    torch.testing.assert_close(turn_values_to_tokens(TURN_VALUES, TURN_IDS, LOSS_MASK), EXPECTED_TOKENS)


def test_regression_one_turn_broadcast_bug():
    """The classic bug: one turn's (masked) tensor broadcast over every turn of the episode."""
    buggy = TURN_VALUES[:, :1] * LOSS_MASK  # every model token gets turn 0's value
    # ep0's turn-1 and turn-2 tokens get 10 instead of 11 and 12; ep1's turn-1 tokens 20 instead of 21
    assert buggy[0, 5] == 10 and EXPECTED_TOKENS[0, 5] == 11
    assert not torch.equal(buggy, EXPECTED_TOKENS)
    right = turn_values_to_tokens(TURN_VALUES, TURN_IDS, LOSS_MASK)
    torch.testing.assert_close(right, EXPECTED_TOKENS)
    # they differ on exactly the model tokens of turns 1 and 2: ep0 1 + 2, ep1 2, ep2 1 + 3, ep3 none = 9
    assert (buggy != right).sum() == 9


def test_hand_discounted_turn_returns():
    torch.testing.assert_close(discounted_turn_returns(TURN_REWARDS, TURN_MASK, GAMMA), TURN_RETURNS)
    # γ = 1: G0 = the episode's total reward; ep0 turns: [5, 4, 4], ep2: [5, 6, 0]
    torch.testing.assert_close(
        discounted_turn_returns(TURN_REWARDS, TURN_MASK, 1.0), t([[5, 4, 4], [0, 0, 0], [5, 6, 0], [0, 0, 0]])
    )


def test_hand_return_batch_normalisation():
    # valid returns: 2, 2, 4 | 0, 0 | 2, 6, 0 | 0   (N = 9)
    # μ = 16/9;  E[G²] = (4+4+16+0+0+4+36+0+0)/9 = 64/9;  σ² = 64/9 − 256/81 = 320/81, σ = 8√5/9
    # Â = (G − 16/9) / (8√5/9) = (9G − 16) / (8√5):
    #   G=0 -> −16/(8√5) = −2/√5,  G=2 -> 2/(8√5) = 1/(4√5),  G=4 -> 20/(8√5) = √5/2,  G=6 -> 38/(8√5) = 19/(4√5)
    r5 = math.sqrt(5)
    a0, a2, a4, a6 = -2 / r5, 1 / (4 * r5), r5 / 2, 19 / (4 * r5)
    expected = t([[a2, a2, a4], [a0, a0, 0], [a2, a6, a0], [a0, 0, 0]])
    torch.testing.assert_close(return_batch_normalisation(TURN_RETURNS, TURN_MASK, eps=0.0), expected)


def test_hand_gigpo_std():
    # Episode level: R = [5, 0, 5, 0], mean 2.5, population std 2.5 -> A^E = [1, -1, 1, -1]
    # Step groups (valid turns only; the junk anchors of masked turns join nothing):
    #   state 0: (0,0)=2, (1,0)=0, (2,0)=2, (3,0)=0 -> mean 1, std 1 -> [1, -1, 1, -1]
    #   state 1: (0,1)=2, (1,1)=0                   -> mean 1, std 1 -> [1, -1]
    #   state 2: (0,2)=4, (2,2)=0                   -> mean 2, std 2 -> [1, -1]
    #   state 3: (2,1)=6 alone                      -> 0
    # A = A^E + A^S: ep0 [1+1, 1+1, 1+1], ep1 [-1-1, -1-1, 0], ep2 [1+1, 1+0, 1-1], ep3 [-1-1, 0, 0]
    out = gigpo_advantages(EPISODE_RETURNS, TURN_RETURNS, ANCHORS, TURN_MASK, group_size=4, eps=0.0)
    torch.testing.assert_close(out, t([[2, 2, 2], [-2, -2, 0], [2, 1, 0], [-2, 0, 0]]))


def test_hand_gigpo_none_and_weight():
    # scale="none": A^E = R − 2.5 = [2.5, -2.5, 2.5, -2.5];
    # A^S: state 0 [1, -1, 1, -1], state 1 [1, -1], state 2 [4-2, 0-2] = [2, -2], state 3: 0
    # ep0 [2.5+1, 2.5+1, 2.5+2], ep1 [-2.5-1, -2.5-1, 0], ep2 [2.5+1, 2.5+0, 2.5-2], ep3 [-2.5-1, 0, 0]
    out = gigpo_advantages(EPISODE_RETURNS, TURN_RETURNS, ANCHORS, TURN_MASK, group_size=4, scale="none")
    torch.testing.assert_close(out, t([[3.5, 3.5, 4.5], [-3.5, -3.5, 0], [3.5, 2.5, 0.5], [-3.5, 0, 0]]))
    # step_weight = 0.5 halves the step part: ep2 turn 2 = 2.5 + 0.5·(−2) = 1.5
    half = gigpo_advantages(EPISODE_RETURNS, TURN_RETURNS, ANCHORS, TURN_MASK, 4, step_weight=0.5, scale="none")
    torch.testing.assert_close(half, t([[3.0, 3.0, 3.5], [-3.0, -3.0, 0], [3.0, 2.5, 1.5], [-3.0, 0, 0]]))


def test_hand_pipeline_to_tokens():
    # rewards -> returns -> GiGPO -> tokens, all hand numbers from above
    returns = discounted_turn_returns(TURN_REWARDS, TURN_MASK, GAMMA)
    adv = gigpo_advantages(EPISODE_RETURNS, returns, ANCHORS, TURN_MASK, group_size=4, eps=0.0)
    tokens = turn_values_to_tokens(adv, TURN_IDS, LOSS_MASK)
    expected = t([
        [0, 0, 2, 2, 0, 2, 0, 2, 2, 0],
        [0, -2, -2, 0, -2, -2, 0, 0, 0, 0],
        [0, 0, 0, 2, 0, 1, 0, 0, 0, 0],
        [0, -2, -2, 0, 0, 0, 0, 0, 0, 0],
    ])
    torch.testing.assert_close(tokens, expected)


# ----------------------------------------------------------------------------- loop oracles


def loop_broadcast(adv, mask):
    return [[adv[b] if mask[b][i] else 0.0 for i in range(len(mask[b]))] for b in range(len(adv))]


def loop_turn_values(values, ids, mask):
    return [[values[b][ids[b][i]] if mask[b][i] else 0.0 for i in range(len(ids[b]))] for b in range(len(ids))]


def loop_discounted(rewards, lengths, gamma, K):
    out = []
    for b, n in enumerate(lengths):
        row = []
        for k in range(K):
            row.append(sum(gamma ** (j - k) * rewards[b][j] for j in range(k, n)) if k < n else 0.0)
        out.append(row)
    return out


def loop_rebn(returns, lengths, eps, K):
    valid = [returns[b][k] for b, n in enumerate(lengths) for k in range(n)]
    out = [[0.0] * K for _ in lengths]
    if not valid or all(v == valid[0] for v in valid):
        return out
    mean = sum(valid) / len(valid)
    std = math.sqrt(sum((v - mean) ** 2 for v in valid) / len(valid))
    for b, n in enumerate(lengths):
        for k in range(n):
            out[b][k] = (returns[b][k] - mean) / (std + eps)
    return out


def loop_relative(values, scale, eps):
    """{index: advantage} for one group {index: value}, population std, all-equal -> 0."""
    xs = list(values.values())
    if all(x == xs[0] for x in xs):
        return {i: 0.0 for i in values}
    mean = sum(xs) / len(xs)
    std = math.sqrt(sum((x - mean) ** 2 for x in xs) / len(xs))
    return {i: (x - mean) / (std + eps) if scale == "std" else x - mean for i, x in values.items()}


def loop_gigpo(ep_returns, returns, anchors, lengths, group_size, weight, scale, eps, K):
    B = len(ep_returns)
    ep_adv = {}
    for g in range(B // group_size):
        ep_adv.update(loop_relative({b: ep_returns[b] for b in range(g * group_size, (g + 1) * group_size)}, scale, eps))
    step_groups = {}
    for b in range(B):
        for k in range(lengths[b]):
            step_groups.setdefault((b // group_size, anchors[b][k]), {})[(b, k)] = returns[b][k]
    step_adv = {}
    for members in step_groups.values():
        step_adv.update(loop_relative(members, scale, eps))
    return [[ep_adv[b] + weight * step_adv[(b, k)] if k < lengths[b] else 0.0 for k in range(K)] for b in range(B)]


GRID = st.integers(-8, 8).map(lambda v: v / 4)  # exact in binary: sums and ties are exact


@st.composite
def episodes(draw, min_group=1):
    group_size = draw(st.integers(min_group, 4))
    num_groups = draw(st.integers(1, 3))
    B, K = group_size * num_groups, draw(st.integers(1, 4))
    lengths = draw(st.lists(st.integers(0, K), min_size=B, max_size=B))
    values = draw(st.lists(st.lists(GRID, min_size=K, max_size=K), min_size=B, max_size=B))
    anchors = draw(st.lists(st.lists(st.integers(0, 2), min_size=K, max_size=K), min_size=B, max_size=B))
    ep_returns = draw(st.lists(GRID, min_size=B, max_size=B))
    mask = [[k < n for k in range(K)] for n in lengths]
    return {"group_size": group_size, "B": B, "K": K, "lengths": lengths, "values": values,
            "anchors": anchors, "ep_returns": ep_returns, "mask": mask}


@st.composite
def token_layouts(draw):
    """Random (turn_values, turn_ids, loss_mask): tokens of turn k in order, model then observation."""
    B, K = draw(st.integers(1, 4)), draw(st.integers(1, 3))
    values = draw(st.lists(st.lists(GRID, min_size=K, max_size=K), min_size=B, max_size=B))
    rows_ids, rows_mask = [], []
    for _ in range(B):
        n_turns = draw(st.integers(0, K))
        ids = [-1] * draw(st.integers(0, 2))  # prompt
        mask = [0] * len(ids)
        for k in range(n_turns):
            n_model, n_obs = draw(st.integers(1, 3)), draw(st.integers(0, 2))
            ids += [k] * (n_model + n_obs)
            mask += [1] * n_model + [0] * n_obs
        rows_ids.append(ids)
        rows_mask.append(mask)
    T = max(1, max(len(r) for r in rows_ids))
    rows_ids = [r + [-1] * (T - len(r)) for r in rows_ids]
    rows_mask = [r + [0] * (T - len(r)) for r in rows_mask]
    return values, rows_ids, rows_mask


@settings(max_examples=50, deadline=None)
@given(token_layouts(), st.data())
def test_tokens_match_loops(layout, data):
    values, ids, mask = layout
    adv = data.draw(st.lists(GRID, min_size=len(ids), max_size=len(ids)))
    torch.testing.assert_close(broadcast_to_tokens(t(adv), torch.tensor(mask)), t(loop_broadcast(adv, mask)))
    out = turn_values_to_tokens(t(values), torch.tensor(ids), torch.tensor(mask))
    torch.testing.assert_close(out, t(loop_turn_values(values, ids, mask)))
    assert (out[torch.tensor(mask) == 0] == 0).all()


@settings(max_examples=50, deadline=None)
@given(episodes(), st.one_of(st.sampled_from([0.0, 0.5, 1.0]), st.floats(0, 1)))
def test_discounted_returns_match_loop(ep, gamma):
    out = discounted_turn_returns(t(ep["values"]), torch.tensor(ep["mask"]), gamma)
    torch.testing.assert_close(out, t(loop_discounted(ep["values"], ep["lengths"], gamma, ep["K"])))


@settings(max_examples=50, deadline=None)
@given(episodes(), st.sampled_from([0.0, 1e-8, 0.1]))
def test_rebn_matches_loop(ep, eps):
    out = return_batch_normalisation(t(ep["values"]), torch.tensor(ep["mask"]), eps=eps)
    torch.testing.assert_close(out, t(loop_rebn(ep["values"], ep["lengths"], eps, ep["K"])))


@settings(max_examples=50, deadline=None)
@given(episodes(), st.sampled_from(["std", "none"]), st.sampled_from([0.0, 0.5, 1.0]), st.sampled_from([0.0, 1e-6]))
def test_gigpo_matches_loop(ep, scale, weight, eps):
    out = gigpo_advantages(t(ep["ep_returns"]), t(ep["values"]), torch.tensor(ep["anchors"]),
                           torch.tensor(ep["mask"]), ep["group_size"], step_weight=weight, scale=scale, eps=eps)
    expected = loop_gigpo(ep["ep_returns"], ep["values"], ep["anchors"], ep["lengths"], ep["group_size"],
                          weight, scale, eps, ep["K"])
    torch.testing.assert_close(out, t(expected))


# ----------------------------------------------------------------------------- properties


@settings(max_examples=50, deadline=None)
@given(episodes())
def test_rebn_mean_zero_std_one_over_valid_turns(ep):
    mask = torch.tensor(ep["mask"])
    returns = t(ep["values"])
    out = return_batch_normalisation(returns, mask, eps=0.0)
    valid = out[mask]
    assert (out[~mask] == 0).all()
    if valid.numel() == 0 or (returns[mask] == returns[mask][0]).all():
        assert (valid == 0).all()
    else:
        torch.testing.assert_close(valid.mean(), t(0.0), atol=1e-12, rtol=0)
        torch.testing.assert_close(valid.std(correction=0), t(1.0))


def _episode_level(ep, scale="std"):
    """Plain GRPO advantage per episode, broadcast to its valid turns."""
    ep_adv = {}
    for g in range(ep["B"] // ep["group_size"]):
        members = {b: ep["ep_returns"][b] for b in range(g * ep["group_size"], (g + 1) * ep["group_size"])}
        ep_adv.update(loop_relative(members, scale, 1e-6))
    return t([[ep_adv[b] if m else 0.0 for m in row] for b, row in enumerate(ep["mask"])])


@settings(max_examples=50, deadline=None)
@given(episodes(), st.sampled_from(["std", "none"]))
def test_gigpo_distinct_anchors_is_episode_level(ep, scale):
    K = ep["K"]
    distinct = torch.arange(ep["B"] * K).reshape(ep["B"], K)  # every (episode, turn) its own state
    out = gigpo_advantages(t(ep["ep_returns"]), t(ep["values"]), distinct, torch.tensor(ep["mask"]),
                           ep["group_size"], scale=scale)
    torch.testing.assert_close(out, _episode_level(ep, scale))


@settings(max_examples=50, deadline=None)
@given(episodes(), st.sampled_from(["std", "none"]))
def test_gigpo_zero_step_weight_is_episode_level(ep, scale):
    out = gigpo_advantages(t(ep["ep_returns"]), t(ep["values"]), torch.tensor(ep["anchors"]),
                           torch.tensor(ep["mask"]), ep["group_size"], step_weight=0.0, scale=scale)
    torch.testing.assert_close(out, _episode_level(ep, scale))


def test_gigpo_anchor_ids_do_not_cross_episode_groups():
    # two groups of 2 with the same anchor ids: computed together or apart, the same numbers
    R, G = t([1, 0, 3, 5]), t([[1, 2], [0, 4], [7, 1], [2, 2]])
    anchors, mask = torch.tensor([[0, 1], [0, 1], [0, 1], [0, 1]]), torch.ones(4, 2, dtype=torch.bool)
    together = gigpo_advantages(R, G, anchors, mask, group_size=2)
    apart = torch.cat([gigpo_advantages(R[i:i + 2], G[i:i + 2], anchors[i:i + 2], mask[i:i + 2], 2) for i in (0, 2)])
    torch.testing.assert_close(together, apart)


@settings(max_examples=50, deadline=None)
@given(episodes())
def test_gamma_one_first_turn_is_total_reward(ep):
    out = discounted_turn_returns(t(ep["values"]), torch.tensor(ep["mask"]), 1.0)
    totals = t([sum(row[:n]) for row, n in zip(ep["values"], ep["lengths"])])
    torch.testing.assert_close(out[:, 0], totals)


def test_masked_rewards_are_ignored():
    junk = TURN_REWARDS.clone()
    junk[~TURN_MASK] = -1000.0
    torch.testing.assert_close(discounted_turn_returns(junk, TURN_MASK, GAMMA), TURN_RETURNS)


# ----------------------------------------------------------------------------- gradients


def test_outputs_are_detached():
    adv = t([1, -1, 1, -1]).requires_grad_()
    values = TURN_VALUES.clone().requires_grad_()
    rewards = TURN_REWARDS.clone().requires_grad_()
    returns = TURN_RETURNS.clone().requires_grad_()
    ep = EPISODE_RETURNS.clone().requires_grad_()
    outs = [
        broadcast_to_tokens(adv, LOSS_MASK),
        turn_values_to_tokens(values, TURN_IDS, LOSS_MASK),
        discounted_turn_returns(rewards, TURN_MASK, GAMMA),
        return_batch_normalisation(returns, TURN_MASK),
        gigpo_advantages(ep, returns, ANCHORS, TURN_MASK, group_size=4),
    ]
    for out in outs:
        assert not out.requires_grad and out.grad_fn is None


# ----------------------------------------------------------------------------- errors


def test_errors_shapes():
    with pytest.raises(ValueError, match="trajectory_advantages"):
        broadcast_to_tokens(t([[1.0]]), LOSS_MASK)
    with pytest.raises(ValueError, match="loss_mask"):
        broadcast_to_tokens(t([1, 2, 3]), LOSS_MASK)
    with pytest.raises(ValueError, match="loss_mask"):
        broadcast_to_tokens(t([1, 2, 3, 4]), torch.full((4, 10), 2))
    with pytest.raises(ValueError, match="turn_values"):
        turn_values_to_tokens(t([1, 2, 3, 4]), TURN_IDS, LOSS_MASK)
    with pytest.raises(ValueError, match="turn_ids"):
        turn_values_to_tokens(TURN_VALUES, TURN_IDS[:, :5], LOSS_MASK)
    with pytest.raises(ValueError, match="turn_ids"):
        turn_values_to_tokens(TURN_VALUES, TURN_IDS.double() + 0.5, LOSS_MASK)
    with pytest.raises(ValueError, match="turn_rewards"):
        discounted_turn_returns(t([1, 2, 3]), TURN_MASK, GAMMA)
    with pytest.raises(ValueError, match="turn_mask"):
        discounted_turn_returns(TURN_REWARDS, TURN_MASK[:, :2], GAMMA)
    with pytest.raises(ValueError, match="turn_returns"):
        return_batch_normalisation(t([[[1.0]]]), TURN_MASK)
    with pytest.raises(ValueError, match="episode_returns"):
        gigpo_advantages(EPISODE_RETURNS[:3], TURN_RETURNS, ANCHORS, TURN_MASK, group_size=4)
    with pytest.raises(ValueError, match="anchor_states"):
        gigpo_advantages(EPISODE_RETURNS, TURN_RETURNS, ANCHORS[:, :2], TURN_MASK, group_size=4)
    with pytest.raises(ValueError, match="anchor_states"):
        gigpo_advantages(EPISODE_RETURNS, TURN_RETURNS, ANCHORS + 0.5, TURN_MASK, group_size=4)


def test_errors_non_prefix_turn_mask():
    holey = torch.tensor([[1, 0, 1], [1, 1, 0], [1, 1, 1], [1, 0, 0]])
    for call in (
        lambda: discounted_turn_returns(TURN_REWARDS, holey, GAMMA),
        lambda: return_batch_normalisation(TURN_RETURNS, holey),
        lambda: gigpo_advantages(EPISODE_RETURNS, TURN_RETURNS, ANCHORS, holey, group_size=4),
    ):
        with pytest.raises(ValueError, match="turn_mask.*prefix"):
            call()


def test_errors_ranges_and_options():
    for gamma in (-0.1, 1.5, float("nan")):
        with pytest.raises(ValueError, match="gamma"):
            discounted_turn_returns(TURN_REWARDS, TURN_MASK, gamma)
    with pytest.raises(ValueError, match="eps"):
        return_batch_normalisation(TURN_RETURNS, TURN_MASK, eps=-1.0)
    for group_size in (3, 0, 2.0, True):
        with pytest.raises(ValueError, match="group_size"):
            gigpo_advantages(EPISODE_RETURNS, TURN_RETURNS, ANCHORS, TURN_MASK, group_size=group_size)
    with pytest.raises(ValueError, match="scale"):
        gigpo_advantages(EPISODE_RETURNS, TURN_RETURNS, ANCHORS, TURN_MASK, group_size=4, scale="sample")
    with pytest.raises(ValueError, match="step_weight"):
        gigpo_advantages(EPISODE_RETURNS, TURN_RETURNS, ANCHORS, TURN_MASK, group_size=4, step_weight=-1.0)
    with pytest.raises(ValueError, match="eps"):
        gigpo_advantages(EPISODE_RETURNS, TURN_RETURNS, ANCHORS, TURN_MASK, group_size=4, eps=-1e-6)


def test_errors_model_token_without_turn():
    ids = TURN_IDS.clone()
    ids[0, 2] = -1  # a model token (loss_mask 1) marked as prompt
    with pytest.raises(ValueError, match=r"turn_ids.*-1 on a model token"):
        turn_values_to_tokens(TURN_VALUES, ids, LOSS_MASK)
    ids = TURN_IDS.clone()
    ids[2, 9] = 3  # K = 3: turn 3 does not exist
    with pytest.raises(ValueError, match=r"turn_ids.*\[-1, K\)"):
        turn_values_to_tokens(TURN_VALUES, ids, LOSS_MASK)
