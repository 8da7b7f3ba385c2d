"""Gold reward, preference pairs, Bradley–Terry labels, the best-of-n estimator and the proxy-reward task."""

import itertools
import math

import numpy as np
import pytest
import torch

import rlbook as rl
from rlbook.lm.preference_task import (GoldReward, PreferencePairs, ProxyRewardTask, best_of_n_estimate,
                                       bradley_terry_labels, completion_num_tokens, proxy_rewards,
                                       sample_preference_pairs)


@pytest.fixture(scope="module")
def task():
    return rl.lm.ScratchpadAdditionTask(num_digits=2)


@pytest.fixture(scope="module")
def tok(task):
    return rl.lm.build_char_tokenizer(task.alphabet)


@pytest.fixture(scope="module")
def tiny_policy(tok):
    return rl.lm.build_policy(rl.lm.policy_config(tok, n_layer=1, n_embd=32, n_head=2), seed=0).eval()


# -- tokens and the gold reward ---------------------------------------------------------------------
def test_completion_num_tokens_counts_eos_as_one_token(tok):
    assert completion_num_tokens("072</s>") == 4
    assert completion_num_tokens("7+5=12;2+4+1=7;072</s>") == 19
    assert completion_num_tokens("0720") == 4  # truncated: no EOS
    for text in ("072</s>", "7+5=12;072</s>", "12;"):
        assert completion_num_tokens(text) == len(tok(text, add_special_tokens=False).input_ids)
    with pytest.raises(ValueError, match="completion"):
        completion_num_tokens(72)
    with pytest.raises(ValueError, match="eos_token"):
        completion_num_tokens("072", eos_token="")


def test_gold_reward_hand_worked(task):
    gold = GoldReward(task, length_coef=0.5, max_new_tokens=24)
    assert gold("27+45=", "072</s>") == pytest.approx(1 - 0.5 * 4 / 24)
    assert gold("27+45=", "7+5=12;2+4+1=7;072</s>") == pytest.approx(1 - 0.5 * 19 / 24)
    assert gold("27+45=", "071</s>") == pytest.approx(-0.5 * 4 / 24)
    assert gold("27+45=", "072") == pytest.approx(-0.5 * 3 / 24)  # no EOS: wrong
    assert gold.components("27+45=", "072</s>") == {"correct": 1.0, "length": 4 / 24}
    np.testing.assert_allclose(gold.batch(["27+45=", "27+45="], ["072</s>", "071</s>"]), [1 - 1 / 12, -1 / 12])


def test_gold_reward_without_length_is_the_verifier(task):
    gold = GoldReward(task, length_coef=0.0)
    for completion in ("072</s>", "7+5=12;2+4+1=7;072</s>", "1;072</s>", "071</s>", "072"):
        assert gold("27+45=", completion) == task.reward("27+45=", completion)


def test_gold_reward_prefers_any_right_answer_to_any_wrong_one(task):
    """With λ < 1 the length term (at most λ) never outweighs correctness (1)."""
    gold = GoldReward(task, length_coef=0.9, max_new_tokens=24)
    longest_right = "9" * 19 + ";072</s>"  # 24 tokens
    shortest_wrong = "</s>"
    assert completion_num_tokens(longest_right) == 24
    assert gold("27+45=", longest_right) > gold("27+45=", shortest_wrong)


def test_gold_reward_rejects_bad_settings(task):
    with pytest.raises(ValueError, match="length_coef"):
        GoldReward(task, length_coef=-0.1)
    with pytest.raises(ValueError, match="max_new_tokens"):
        GoldReward(task, max_new_tokens=0)
    with pytest.raises(ValueError, match="prompt"):
        GoldReward(task)("27+45", "072</s>")
    with pytest.raises(ValueError, match="same length"):
        GoldReward(task).batch(["27+45="], [])


# -- Bradley–Terry labels ---------------------------------------------------------------------------
def test_bradley_terry_labels_probability_is_the_logistic_of_the_scaled_difference():
    ra, rb = torch.tensor([1.0, 0.0, 0.3, -2.0]), torch.tensor([0.0, 0.0, 0.5, 1.0])
    _, prob = bradley_terry_labels(ra, rb, 0.25, torch.Generator().manual_seed(0))
    expected = [1 / (1 + math.exp(-(a - b) / 0.25)) for a, b in zip(ra.tolist(), rb.tolist())]
    np.testing.assert_allclose(prob.numpy(), expected, rtol=1e-12)


def test_bradley_terry_labels_at_zero_temperature_follow_the_reward_and_toss_ties():
    ra, rb = torch.tensor([1.0, 0.0] + [0.5] * 4000), torch.tensor([0.0, 1.0] + [0.5] * 4000)
    labels, prob = bradley_terry_labels(ra, rb, 0.0, torch.Generator().manual_seed(0))
    assert labels[0] and not labels[1]
    assert prob[:2].tolist() == [1.0, 0.0] and (prob[2:] == 0.5).all()
    share = labels[2:].double().mean().item()
    assert abs(share - 0.5) < 4 * math.sqrt(0.25 / 4000)


def test_bradley_terry_label_frequencies_match_their_probability():
    """Monte Carlo: the share of a ≻ b over 20 000 draws lies within 4 standard errors of σ(Δ/T)."""
    n = 20_000
    ra, rb = torch.full((n,), 0.2), torch.zeros(n)
    labels, prob = bradley_terry_labels(ra, rb, 0.5, torch.Generator().manual_seed(1))
    p = 1 / (1 + math.exp(-0.4))
    assert abs(labels.double().mean().item() - p) < 4 * math.sqrt(p * (1 - p) / n)
    # large T: labels approach coin tosses; the draws are reproducible from the generator
    assert abs(bradley_terry_labels(ra, rb, 1e6, torch.Generator().manual_seed(1))[1][0].item() - 0.5) < 1e-6
    again, _ = bradley_terry_labels(ra, rb, 0.5, torch.Generator().manual_seed(1))
    assert torch.equal(labels, again)


def test_bradley_terry_labels_reject_bad_input():
    g = torch.Generator().manual_seed(0)
    with pytest.raises(ValueError, match="rewards_a"):
        bradley_terry_labels(torch.zeros(3), torch.zeros(2), 1.0, g)
    with pytest.raises(ValueError, match="finite"):
        bradley_terry_labels(torch.tensor([float("nan")]), torch.zeros(1), 1.0, g)
    with pytest.raises(ValueError, match="temperature"):
        bradley_terry_labels(torch.zeros(2), torch.zeros(2), -1.0, g)


# -- the best-of-n estimator ------------------------------------------------------------------------
def _best_of_n_by_enumeration(scores, values, n):
    """Mean over all C(M, n) subsets of the value at the subset's top score (ties: the later sample)."""
    picks = []
    for subset in itertools.combinations(range(len(scores)), n):
        best = max(subset, key=lambda i: (scores[i], i))
        picks.append(values[best])
    return float(np.mean(picks))


@pytest.mark.parametrize("m", [1, 2, 5, 8])
def test_best_of_n_estimate_equals_the_mean_over_all_subsets(m):
    rng = np.random.default_rng(m)
    scores, values = rng.normal(size=(3, m)), rng.normal(size=(3, m))
    for n in range(1, m + 1):
        got = best_of_n_estimate(torch.tensor(scores), torch.tensor(values), n)
        want = [_best_of_n_by_enumeration(s, v, n) for s, v in zip(scores, values)]
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-10, atol=1e-12)


def test_best_of_n_estimate_limits_and_ties():
    scores = torch.tensor([[0.3, 0.9, 0.1, 0.5]])
    values = torch.tensor([[1.0, 2.0, 3.0, 4.0]])
    assert best_of_n_estimate(scores, values, 1).item() == pytest.approx(2.5)  # plain mean
    assert best_of_n_estimate(scores, values, 4).item() == pytest.approx(2.0)  # the top-scored sample
    assert best_of_n_estimate(scores, scores, 2).item() >= best_of_n_estimate(scores, scores, 1).item()
    tied = torch.zeros(1, 5)
    np.testing.assert_allclose(best_of_n_estimate(tied, torch.arange(5.0)[None], 3).item(),
                               _best_of_n_by_enumeration([0.0] * 5, list(range(5)), 3))


def test_best_of_n_estimate_is_unbiased_for_sampled_best_of_n():
    """Monte Carlo: best-of-2 of a discrete reward, estimated from 6 samples per row, averages to the exact value."""
    probs = np.array([0.5, 0.3, 0.2])
    scores_of = np.array([0.0, 1.0, 2.0]) + np.array([0.0, 1e-3, 2e-3])  # distinct scores, no ties
    exact = sum(scores_of[k] * (probs[: k + 1].sum() ** 2 - probs[:k].sum() ** 2) for k in range(3))
    rng = np.random.default_rng(0)
    draws = scores_of[rng.choice(3, p=probs, size=(20_000, 6))]
    est = best_of_n_estimate(torch.tensor(draws), torch.tensor(draws), 2).numpy()
    assert abs(est.mean() - exact) < 4 * est.std() / math.sqrt(len(est))


def test_best_of_n_estimate_rejects_bad_input():
    with pytest.raises(ValueError, match="same shape"):
        best_of_n_estimate(torch.zeros(2, 3), torch.zeros(2, 4), 1)
    with pytest.raises(ValueError, match="`n`"):
        best_of_n_estimate(torch.zeros(2, 3), torch.zeros(2, 3), 4)
    with pytest.raises(ValueError, match="`n`"):
        best_of_n_estimate(torch.zeros(2, 3), torch.zeros(2, 3), 0)
    with pytest.raises(ValueError, match="finite"):
        best_of_n_estimate(torch.tensor([float("inf")]), torch.zeros(1), 1)


# -- pairs, the proxy's scores and the proxy task ---------------------------------------------------
def test_sample_preference_pairs_shapes_split_and_reproducibility(task, tok, tiny_policy):
    pairs = sample_preference_pairs(tiny_policy, tok, task, 6, torch.Generator().manual_seed(0), max_new_tokens=6,
                                    split="held_out")
    assert len(pairs) == 6 and len(pairs.completions_a) == len(pairs.completions_b) == 6
    assert all(task.is_held_out(p) for p in pairs.prompts)
    again = sample_preference_pairs(tiny_policy, tok, task, 6, torch.Generator().manual_seed(0), max_new_tokens=6,
                                    split="held_out")
    assert again.completions_a == pairs.completions_a and again.completions_b == pairs.completions_b
    with pytest.raises(ValueError, match="labelled"):
        pairs.chosen
    pairs.a_preferred = torch.tensor([True, False] * 3)
    assert pairs.chosen[0] == pairs.completions_a[0] and pairs.chosen[1] == pairs.completions_b[1]
    assert pairs.rejected[0] == pairs.completions_b[0]
    sub = pairs.subset([1, 2])
    assert sub.prompts == pairs.prompts[1:3] and sub.a_preferred.tolist() == [False, True]
    with pytest.raises(ValueError, match="num_pairs"):
        sample_preference_pairs(tiny_policy, tok, task, 0, torch.Generator())


def test_proxy_rewards_match_the_reward_models_pair_layout(task, tok, tiny_policy):
    """Completions ending in EOS score as encode_preference_pairs + sequence_rewards score the same response."""
    rm = rl.lm.build_reward_model(tiny_policy, init_std=0.5, seed=1)
    prompts = ["27+45=", "03+04=", "99+99="]
    responses = ["072", "7+5=12;007", "198"]
    got = proxy_rewards(rm, tok, prompts, [r + "</s>" for r in responses], batch_size=2)
    batch = rl.lm.encode_preference_pairs(tok, prompts, responses, responses)
    with torch.no_grad():
        want = rl.lm.sequence_rewards(rm, batch["input_ids"], batch["attention_mask"])[:3]
    np.testing.assert_allclose(got.numpy(), want.cpu().numpy(), rtol=1e-5, atol=1e-6)  # got is on the CPU
    truncated = proxy_rewards(rm, tok, prompts[:1], ["072"])
    assert truncated.item() != pytest.approx(got[0].item())  # without EOS: scored at the last digit
    with pytest.raises(ValueError, match="same length"):
        proxy_rewards(rm, tok, prompts, responses[:2])


def test_proxy_reward_task_replaces_only_the_reward(task, tok, tiny_policy):
    rm = rl.lm.build_reward_model(tiny_policy, init_std=0.5, seed=1)
    proxy = ProxyRewardTask(task, rm, tok, max_cache=2)
    assert proxy.reward("27+45=", "072</s>") == pytest.approx(proxy_rewards(rm, tok, ["27+45="], ["072</s>"]).item())
    for completion in ("071</s>", "1</s>", "072</s>"):  # overflows the 2-entry memo: still right
        assert proxy.reward("27+45=", completion) == pytest.approx(proxy_rewards(rm, tok, ["27+45="], [completion]).item())
    assert proxy.format_reward("27+45=", "072</s>") == task.format_reward("27+45=", "072</s>")
    g1, g2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    assert proxy.sample_problems(4, g1) == task.sample_problems(4, g2)
    assert proxy.held_out_problems(3) == task.held_out_problems(3)
    with pytest.raises(ValueError, match="max_cache"):
        ProxyRewardTask(task, rm, tok, max_cache=-1)


def test_grpo_on_the_proxy_raises_the_proxy_reward(task, tok):
    """train_grpo takes the proxy task unchanged and climbs the reward model it is given.

    The reward model is a random scalar head (init_std 1) on a random tiny transformer, so its
    score has nothing to do with addition; 12 GRPO steps must still raise the batch's mean proxy
    reward (measured: 0.92 → 4.41; the assertion asks for +0.5 between the first and last three steps).
    """
    policy = rl.lm.build_policy(rl.lm.policy_config(tok, n_layer=1, n_embd=32, n_head=2), seed=0).eval()
    rm = rl.lm.build_reward_model(policy, init_std=1.0, seed=0).requires_grad_(False)
    proxy = ProxyRewardTask(task, rm, tok)
    config = rl.GRPOConfig(prompts_per_step=16, group_size=4, num_steps=12, max_new_tokens=3, lr=3e-3, seed=0,
                           log_ref_kl=False, device=str(rl.get_device()))
    history = rl.train_grpo(policy, tok, proxy, config, progress=False)
    rewards = np.asarray(history["reward"])
    assert rewards[-3:].mean() > rewards[:3].mean() + 0.5


@pytest.mark.slow
def test_overoptimisation_small_run_shows_gold_peaking_while_the_proxy_rises(monkeypatch):
    """The chapter's live run (``benchmarks/overoptimisation.py --seeds 0 --small``): over-optimisation appears.

    Measured on the 2-core machine (16 s with the seed's one-thread supervised model cached, the model
    of the ten-seed benchmark): best-of-N gold 0.182 → 0.280 at d = 0.80 → −0.050 at d = 1.78, proxy
    0.01 → 0.17 (best-of-N's d then from the bound (12.9); the benchmark now stores the exact KL over
    the samples, a little lower); GRPO (20 steps, β = 0) gold 0.195 → 0.257 at d = 0.25 → −0.042 at d = 2.06, proxy
    0.00 → 0.16. The thresholds sit about a third below those numbers, a margin for another CPU's float
    order (they were set afresh when the benchmark moved to this model; on chapter 10's two-thread model
    the best-of-N proxy rose 0.27, hence the old 0.15).
    """
    import importlib
    from pathlib import Path

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "benchmarks"))
    bench = importlib.import_module("overoptimisation")
    run = bench.main(["--seeds", "0", "--small"])["runs"][0]
    for name, rise, fall, proxy_rise in (("best_of_n", 0.06, 0.2, 0.1), ("rl", 0.04, 0.2, 0.1)):
        curve = run[name]
        gold, proxy = np.asarray(curve["gold"]), np.asarray(curve["proxy"])
        assert gold.max() >= gold[0] + rise, (name, gold)  # gold rises first ...
        assert gold[-1] <= gold.max() - fall, (name, gold)  # ... then falls well below its peak
        assert proxy[-1] >= proxy[0] + proxy_rise, (name, proxy)  # while the proxy keeps rising
        assert int(np.argmax(gold)) < len(gold) - 1
