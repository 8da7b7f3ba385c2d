"""Group-relative advantages (GRPO, Dr. GRPO), RLOO and MaxRL: hand numbers, oracles, identities."""

import itertools
import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import rlbook as rl
from rlbook import reference as ref

F64 = torch.float64


def t(values):
    return torch.tensor(values, dtype=F64)


@st.composite
def grouped_rewards(draw, binary=False, min_group=2):
    group_size = draw(st.integers(min_group, 6))
    num_prompts = draw(st.integers(1, 4))
    if binary:
        elems = st.sampled_from([0.0, 1.0])
    else:
        elems = st.one_of(st.sampled_from([0.0, 1.0, 0.1]), st.floats(-10, 10, allow_nan=False, width=64))
    values = draw(st.lists(elems, min_size=group_size * num_prompts, max_size=group_size * num_prompts))
    return t(values), group_size


# ----------------------------------------------------------------------------- hand-worked numbers


def test_worked_example_population_std():
    # rewards 1,1,0,1,0: mean 0.6, population std sqrt(0.24) = 0.4899 -> +0.8165 / -1.2247
    adv = rl.group_relative_advantages(t([1, 1, 0, 1, 0]), group_size=5, eps=0.0)
    expected = t([0.4, 0.4, -0.6, 0.4, -0.6]) / math.sqrt(0.24)
    torch.testing.assert_close(adv, expected)
    assert round(adv[0].item(), 4) == 0.8165 and round(adv[2].item(), 4) == -1.2247


def test_seed_example_sample_std():
    # sample std sqrt(1.2 / 4) = sqrt(0.3) = 0.5477 -> +0.7303 / -1.0954
    adv = rl.group_relative_advantages(t([1, 1, 0, 1, 0]), group_size=5, std="sample", eps=0.0)
    torch.testing.assert_close(adv, t([0.4, 0.4, -0.6, 0.4, -0.6]) / math.sqrt(0.3))
    assert round(adv[0].item(), 4) == 0.7303 and round(adv[2].item(), 4) == -1.0954


def test_dr_grpo_is_mean_centering_only():
    adv = rl.group_relative_advantages(t([1, 1, 0, 1, 0, 3, 1, 1, 1, 1]), group_size=5, scale="none")
    torch.testing.assert_close(adv, t([0.4, 0.4, -0.6, 0.4, -0.6, 1.6, -0.4, -0.4, -0.4, -0.4]))


def test_rloo_and_maxrl_hand_numbers():
    torch.testing.assert_close(rl.leave_one_out_advantages(t([1, 0, 0, 0]), 4), t([1, -1 / 3, -1 / 3, -1 / 3]))
    # one success in 8: r̂ = 1/8, the success gets (1 - 1/8) / (1/8) = 7, the failures -1
    torch.testing.assert_close(rl.maxrl_advantages(t([1] + [0] * 7), 8), t([7] + [-1] * 7))
    torch.testing.assert_close(rl.maxrl_advantages(t([1, 1, 1, 0]), 4), t([1 / 3, 1 / 3, 1 / 3, -1]))


def test_groups_are_independent_and_contiguous():
    rewards = t([1, 0, 0, 0, 5, 5, 5, 5])
    adv = rl.group_relative_advantages(rewards, group_size=4)
    torch.testing.assert_close(adv[:4], rl.group_relative_advantages(rewards[:4], 4))
    assert torch.equal(adv[4:], torch.zeros(4, dtype=F64))


# ----------------------------------------------------------------------------- oracles


@given(grouped_rewards(), st.sampled_from(["std", "none"]), st.sampled_from(["population", "sample"]))
def test_group_relative_matches_loop(data, scale, std):
    rewards, g = data
    fast = rl.group_relative_advantages(rewards, g, scale=scale, std=std)
    slow = t(ref.group_relative_advantages_loop(rewards.tolist(), g, scale=scale, std=std))
    torch.testing.assert_close(fast, slow, rtol=1e-9, atol=1e-9)


@given(grouped_rewards())
def test_rloo_matches_loop(data):
    rewards, g = data
    slow = t(ref.leave_one_out_advantages_loop(rewards.tolist(), g))
    torch.testing.assert_close(rl.leave_one_out_advantages(rewards, g), slow, rtol=1e-9, atol=1e-9)


@given(grouped_rewards(binary=True, min_group=1))
def test_maxrl_matches_loop(data):
    rewards, g = data
    slow = t(ref.maxrl_advantages_loop(rewards.tolist(), g))
    torch.testing.assert_close(rl.maxrl_advantages(rewards, g), slow, rtol=1e-12, atol=1e-12)


# ----------------------------------------------------------------------------- properties


@given(grouped_rewards())
def test_zero_mean_per_group_and_never_nan(data):
    rewards, g = data
    for adv in (
        rl.group_relative_advantages(rewards, g),
        rl.group_relative_advantages(rewards, g, std="sample"),
        rl.group_relative_advantages(rewards, g, scale="none"),
        rl.leave_one_out_advantages(rewards, g),
    ):
        assert torch.isfinite(adv).all()
        torch.testing.assert_close(adv.reshape(-1, g).mean(dim=1), torch.zeros(len(rewards) // g, dtype=F64), atol=1e-9, rtol=0)


@given(grouped_rewards(binary=True, min_group=1))
def test_maxrl_zero_mean_and_finite(data):
    rewards, g = data
    adv = rl.maxrl_advantages(rewards, g)
    assert torch.isfinite(adv).all()
    torch.testing.assert_close(adv.reshape(-1, g).mean(dim=1), torch.zeros(len(rewards) // g, dtype=F64), atol=1e-12, rtol=0)


@pytest.mark.parametrize("value", [0.0, 1.0, 0.1, -3.7, 1e6])
@pytest.mark.parametrize("g", [1, 2, 3, 7])
def test_all_equal_groups_give_exact_zeros(value, g):
    rewards = torch.full((3 * g,), value, dtype=F64)
    outs = [rl.group_relative_advantages(rewards, g), rl.group_relative_advantages(rewards, g, scale="none")]
    if g >= 2:
        outs += [rl.group_relative_advantages(rewards, g, std="sample"), rl.leave_one_out_advantages(rewards, g)]
    if value >= 0:
        outs.append(rl.maxrl_advantages(rewards, g))
    for adv in outs:
        assert torch.equal(adv, torch.zeros_like(adv))  # exact, not approximately


@given(grouped_rewards(), st.floats(-50, 50))
def test_shift_invariance(data, shift):
    rewards, g = data
    for fn in (
        lambda r: rl.group_relative_advantages(r, g, eps=0.0),
        lambda r: rl.group_relative_advantages(r, g, scale="none"),
        lambda r: rl.leave_one_out_advantages(r, g),
    ):
        torch.testing.assert_close(fn(rewards + shift), fn(rewards), rtol=1e-6, atol=1e-6)


@given(grouped_rewards(), st.floats(0.01, 100))
def test_std_scaling_is_scale_invariant(data, scale):
    rewards, g = data
    a = rl.group_relative_advantages(rewards * scale, g, eps=0.0)
    torch.testing.assert_close(a, rl.group_relative_advantages(rewards, g, eps=0.0), rtol=1e-6, atol=1e-6)
    # without std, the advantage scales with the reward
    b = rl.group_relative_advantages(rewards * scale, g, scale="none")
    torch.testing.assert_close(b, scale * rl.group_relative_advantages(rewards, g, scale="none"), rtol=1e-9, atol=1e-9)


@given(grouped_rewards())
def test_rloo_is_mean_baseline_times_g_over_g_minus_1(data):
    rewards, g = data
    mean_baseline = rl.group_relative_advantages(rewards, g, scale="none")
    torch.testing.assert_close(rl.leave_one_out_advantages(rewards, g), mean_baseline * g / (g - 1), rtol=1e-9, atol=1e-9)


@given(grouped_rewards(binary=True))
def test_maxrl_is_mean_baseline_over_success_rate(data):
    rewards, g = data
    grouped = rewards.reshape(-1, g)
    rate = grouped.mean(dim=1, keepdim=True)
    centred = rl.group_relative_advantages(rewards, g, scale="none").reshape(-1, g)
    expected = torch.where(rate > 0, centred / rate.clamp(min=1e-12), torch.zeros_like(centred))
    torch.testing.assert_close(rl.maxrl_advantages(rewards, g), expected.reshape(-1))


def test_maxrl_estimator_identity_with_random_scores():
    # (1/N) Σ Â_i s_i = (1/K) Σ r_i s_i − (1/N) Σ s_i, sample by sample, whenever K ≥ 1
    gen = torch.Generator().manual_seed(0)
    for rewards in ([1, 0, 0, 0, 0, 0], [1, 1, 0, 1, 0, 0], [1, 1, 1, 1, 1, 1]):
        r = t(rewards)
        scores = torch.randn(6, 3, generator=gen, dtype=F64)
        lhs = (rl.maxrl_advantages(r, 6)[:, None] * scores).mean(dim=0)
        rhs = (r[:, None] * scores).sum(dim=0) / r.sum() - scores.mean(dim=0)
        torch.testing.assert_close(lhs, rhs)


@pytest.mark.parametrize("n", [1, 2, 4, 6])
@pytest.mark.parametrize("p", [0.1, 0.5, 0.8])
def test_maxrl_exact_expectation_on_bernoulli_bandit(n, p):
    # one logit θ, success probability p = sigmoid(θ); score of a success 1 − p, of a failure −p.
    # MaxRL's truncated objective J_N = −Σ_{k≤N} (1−p)^k / k has dJ_N/dθ = (1−p)(1 − (1−p)^N).
    # The success-only estimator is unbiased for it; the centred advantage form differs in
    # expectation by exactly −p (1−p)^N (the control variate on the all-fail outcome).
    exact_grad = (1 - p) * (1 - (1 - p) ** n)
    mean_success_only = mean_centred = 0.0
    for outcome in itertools.product([0.0, 1.0], repeat=n):
        prob = math.prod(p if o else 1 - p for o in outcome)
        scores = [(1 - p) if o else -p for o in outcome]
        k = sum(outcome)
        if k:
            mean_success_only += prob * sum(o * s for o, s in zip(outcome, scores)) / k
        adv = rl.maxrl_advantages(t(list(outcome)), n)
        mean_centred += prob * sum(a * s for a, s in zip(adv.tolist(), scores)) / n
    assert mean_success_only == pytest.approx(exact_grad, abs=1e-12)
    assert mean_centred == pytest.approx(exact_grad - p * (1 - p) ** n, abs=1e-12)


def test_output_is_detached_and_keeps_dtype():
    r = t([1, 0, 1, 1]).requires_grad_()
    for adv in (rl.group_relative_advantages(r, 4), rl.leave_one_out_advantages(r, 4), rl.maxrl_advantages(r, 4)):
        assert not adv.requires_grad and adv.dtype == F64
    assert rl.group_relative_advantages([1.0, 0.0], 2).dtype == torch.get_default_dtype()


# ----------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    "fn", [rl.group_relative_advantages, rl.leave_one_out_advantages, rl.maxrl_advantages]
)
def test_group_size_must_divide(fn):
    with pytest.raises(ValueError, match="group_size"):
        fn(t([1, 0, 1, 1, 0]), 2)
    with pytest.raises(ValueError, match="group_size"):
        fn(t([1, 0]), 0)
    with pytest.raises(ValueError, match="rewards"):
        fn(t([[1, 0], [1, 0]]), 2)
    with pytest.raises(ValueError, match="rewards"):
        fn(t([]), 2)
    with pytest.raises(ValueError, match="rewards"):
        fn(t([1.0, float("nan")]), 2)


def test_other_argument_errors():
    r = t([1, 0, 1, 0])
    with pytest.raises(ValueError, match="scale"):
        rl.group_relative_advantages(r, 2, scale="mad")
    with pytest.raises(ValueError, match="std"):
        rl.group_relative_advantages(r, 2, std="unbiased")
    with pytest.raises(ValueError, match="eps"):
        rl.group_relative_advantages(r, 2, eps=-1.0)
    with pytest.raises(ValueError, match="group_size"):
        rl.group_relative_advantages(r, 1, std="sample")
    with pytest.raises(ValueError, match="group_size"):
        rl.leave_one_out_advantages(r, 1)
    with pytest.raises(ValueError, match="rewards"):
        rl.maxrl_advantages(t([1, -1]), 2)


# ---- the population/sample std choice is exposed where GRPO resolves its estimator ----

def test_grpo_config_routes_advantage_std_to_the_estimator():
    from rlbook.algos.grpo import GRPOConfig, _parts

    rewards = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0, 0.5, 0.0])
    default_fn = _parts(GRPOConfig(group_size=5))[0]
    assert torch.equal(default_fn(rewards, 5), rl.group_relative_advantages(rewards, 5))  # default unchanged
    assert torch.equal(default_fn(rewards, 5), rl.group_relative_advantages(rewards, 5, std="population"))
    sample_fn = _parts(GRPOConfig(group_size=5, advantage_std="sample"))[0]
    got = sample_fn(rewards, 5)
    assert torch.equal(got, rl.group_relative_advantages(rewards, 5, std="sample"))
    # the worked example: +0.73 / −1.10 with the sample std (÷(G−1)) instead of +0.82 / −1.22
    torch.testing.assert_close(got[:5], torch.tensor([0.7303, 0.7303, -1.0954, 0.7303, -1.0954]), atol=1e-4, rtol=0)
    want = ref.group_relative_advantages_loop(rewards.tolist(), 5, std="sample")
    torch.testing.assert_close(got, torch.tensor(want, dtype=got.dtype))


def test_grpo_config_advantage_std_errors():
    from rlbook.algos.grpo import GRPOConfig

    with pytest.raises(ValueError, match="`advantage_std` must be 'population'"):
        GRPOConfig(advantage_std="unbiased")
    for est in ("dr_grpo", "rloo", "maxrl"):
        with pytest.raises(ValueError, match="`advantage_std` applies only to advantage_estimator='grpo'"):
            GRPOConfig(advantage_estimator=est, advantage_std="sample")
        GRPOConfig(advantage_estimator=est)  # the default is fine with every estimator
