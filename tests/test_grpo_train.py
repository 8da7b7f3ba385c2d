"""train_grpo runs and logs every documented metric; config and evaluation errors; learning (slow)."""

import numpy as np
import pytest
import torch

import rlbook as rl
from rlbook.algos.grpo import GRPOConfig, evaluate, train_grpo
from rlbook.lm.model import build_policy, policy_config
from rlbook.lm.task import AdditionTask
from rlbook.lm.tokenizer import build_char_tokenizer

TOK = build_char_tokenizer()
TASK = AdditionTask()
METRICS = ["reward", "pass@1", "kl", "entropy", "clip_fraction", "completion_length",
           "frac_zero_variance_groups", "loss", "grad_norm"]


def tiny():
    return build_policy(policy_config(TOK, n_layer=1, n_embd=32, n_head=2), seed=0, device="cpu")


def tiny_config(**kw):
    base = dict(group_size=4, prompts_per_step=4, num_steps=3, max_new_tokens=5, device="cpu")
    base.update(kw)
    return GRPOConfig(**base)


def test_train_grpo_logs_every_documented_metric():
    hist = train_grpo(tiny(), TOK, TASK, tiny_config(), progress=False)
    for name in METRICS:
        assert name in hist and len(hist[name]) == 3 and np.isfinite(hist[name]).all(), name
    assert (hist["completion_length"] >= 1).all() and (hist["completion_length"] <= 5).all()
    assert ((0 <= hist["frac_zero_variance_groups"]) & (hist["frac_zero_variance_groups"] <= 1)).all()
    assert hist["kl"][0] == pytest.approx(0.0, abs=1e-6)  # π_θ = π_ref before the first update
    assert (hist["clip_fraction"] == 0).all()  # μ = 1: ρ ≡ 1, the clip never acts
    assert hist.wall_seconds > 0 and rl.train_grpo is train_grpo


def test_train_grpo_variants_and_kl_penalty_run():
    for kw in (dict(kl_coef=0.05, num_inner_epochs=2, clip_eps_high=0.28, loss_aggregation="token_mean"),
               dict(advantage_estimator="dr_grpo", loss_aggregation="fixed_length_mean", overlong_cache_length=2),
               dict(advantage_estimator="rloo", per_token_loss="cispo", format_coef=0.5, log_ref_kl=False)):
        hist = train_grpo(tiny(), TOK, TASK, tiny_config(num_steps=2, **kw), progress=False)
        assert all(np.isfinite(hist[m]).all() for m in METRICS), kw


def test_train_grpo_is_reproducible():
    a = train_grpo(tiny(), TOK, TASK, tiny_config(num_steps=2, lr=1e-2), progress=False)
    b = train_grpo(tiny(), TOK, TASK, tiny_config(num_steps=2, lr=1e-2), progress=False)
    np.testing.assert_array_equal(a["loss"], b["loss"])
    np.testing.assert_array_equal(a["grad_norm"], b["grad_norm"])


def test_grpo_config_bad_input():
    for kw, name in ((dict(group_size=1), "group_size"), (dict(prompts_per_step=0), "prompts_per_step"),
                     (dict(loss_aggregation="sum"), "loss_aggregation"), (dict(advantage_estimator="x"), "advantage_estimator"),
                     (dict(clip_eps_low=-0.1), "clip_eps_low"), (dict(kl_coef=-1.0), "kl_coef"),
                     (dict(overlong_cache_length=9, max_new_tokens=8), "overlong_cache_length"),
                     (dict(per_token_loss="ppo2"), "per_token_loss"), (dict(temperature=0.0), "temperature")):
        with pytest.raises(ValueError, match=name):
            GRPOConfig(**kw)


def test_group_size_must_divide_the_batch_in_a_custom_estimator():
    # advantage estimators receive (B,) rewards and G; a G that does not divide B is named
    with pytest.raises(ValueError, match="group_size"):
        rl.group_relative_advantages(torch.zeros(6), group_size=4)


def test_evaluate_lengths_of_right_and_wrong_samples_are_the_token_counts():
    seen = []

    def reward_fn(prompt, completion):  # "right" = an even number of characters; records every call
        seen.append(completion)
        return float(len(completion) % 2 == 0)

    out = evaluate(tiny(), TOK, TASK.held_out_problems(5), reward_fn=reward_fn, num_samples=4, k=2, max_new_tokens=5)
    sampled = seen[-20:]  # the 5 greedy completions come first

    def tokens(text):  # one token per character, the EOS "</s>" is one token
        eos = text.endswith(TOK.eos_token)
        return len(text) - len(TOK.eos_token) * eos + eos

    right = [tokens(t) for t in sampled if len(t) % 2 == 0]
    wrong = [tokens(t) for t in sampled if len(t) % 2]
    assert right and wrong
    assert out["length_correct"] == pytest.approx(np.mean(right)) and out["length_wrong"] == pytest.approx(np.mean(wrong))


def test_evaluate_keys_bounds_and_errors():
    problems = TASK.held_out_problems(6)
    out = evaluate(tiny(), TOK, problems, num_samples=4, k=2, max_new_tokens=5)
    assert set(out) == {"greedy_accuracy", "pass@1", "pass@2", "num_correct", "length_correct", "length_wrong"}
    assert 0 <= out["pass@1"] <= out["pass@2"] <= 1 and out["num_correct"].shape == (6,)
    again = evaluate(tiny(), TOK, problems, reward_fn=TASK.reward, num_samples=4, k=2, max_new_tokens=5)
    np.testing.assert_array_equal(out["num_correct"], again["num_correct"])
    with pytest.raises(ValueError, match="problems"):
        evaluate(tiny(), TOK, [], num_samples=4, k=2)
    with pytest.raises(ValueError, match="k"):
        evaluate(tiny(), TOK, problems, num_samples=4, k=5)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sft_then_grpo_lifts_held_out_pass_at_1_by_40_points(seed):
    """The book's headline at the default (small) size: SFT ~1 min, GRPO < 3 min on 2 cores.

    One torch thread makes a run repeat bit for bit on one CPU (thread count changes float sums), not
    across CPU models. Recorded for seeds 0/1/2 on the machine that set the bar:
    pass@1 0.349/0.414/0.314 -> 0.806/0.909/0.750, greedy 0.854/0.972/0.944 -> 0.956/0.992/0.974.
    On another 2-core CPU (the same numbers from this library and from the one that recorded the runs
    above, so the CPU made the difference): pass@1 0.395/0.371/0.285 -> 0.839/0.739/0.708, greedy
    0.938/0.768/0.858 -> 0.962/0.804/0.898; seed 1 gains 36.8 points there and this test fails for it.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        policy = build_policy(policy_config(TOK, size="small"), seed=seed, device="cpu")
        rl.lm.train_sft(policy, TOK, TASK, rl.lm.SFTConfig(seed=seed), progress=False)
        held_out = TASK.held_out_problems(500)
        before = evaluate(policy, TOK, held_out)
        train_grpo(policy, TOK, TASK, GRPOConfig(seed=seed, device="cpu"), progress=False)
        after = evaluate(policy, TOK, held_out)
    finally:
        torch.set_num_threads(threads)
    print(f"seed {seed}: pass@1 {before['pass@1']:.3f} -> {after['pass@1']:.3f}, "
          f"greedy {before['greedy_accuracy']:.3f} -> {after['greedy_accuracy']:.3f}, "
          f"pass@8 {before['pass@8']:.3f} -> {after['pass@8']:.3f}")  # shown with pytest -s
    assert after["pass@1"] - before["pass@1"] >= 0.40, (before, after)
    assert after["greedy_accuracy"] > before["greedy_accuracy"], (before, after)


def test_train_grpo_runs_with_no_lower_clip_wide_clip_higher_and_sample_std():
    # ε_low ≥ 1 (no lower clip) and a wide ε_high are legal, as in the per-token losses
    cfg = tiny_config(num_steps=2, num_inner_epochs=2, clip_eps_low=1.0, clip_eps_high=3.0, advantage_std="sample")
    hist = train_grpo(tiny(), TOK, TASK, cfg, progress=False)
    assert all(np.isfinite(hist[m]).all() for m in METRICS)
    # nothing can leave a [0, 4] band after two small steps from ρ = 1
    assert (hist["clip_fraction"] == 0).all()
    for kw, name in ((dict(clip_eps_high=float("inf")), "clip_eps_high"), (dict(clip_eps_low=float("nan")), "clip_eps_low"),
                     (dict(advantage_std="biased"), "advantage_std")):
        with pytest.raises(ValueError, match=name):
            GRPOConfig(**kw)


def test_eval_steps_add_evaluations_before_those_steps():
    """eval_every=3 evaluates before steps 0 and 3 and at the end; eval_steps=(1, 2) adds steps 1 and 2,
    each logged with the completions generated before it (4 prompts × G = 4 = 16 per step)."""
    hist = train_grpo(tiny(), TOK, TASK, tiny_config(num_steps=4, eval_every=3, eval_steps=(2, 1), eval_num_problems=4),
                      progress=False)
    assert list(hist["eval_step"]) == [0, 1, 2, 3, 4]
    assert list(hist["eval_completions"]) == [0, 16, 32, 48, 64]
    only = train_grpo(tiny(), TOK, TASK, tiny_config(num_steps=2, eval_steps=(1,), eval_num_problems=4), progress=False)
    assert list(only["eval_step"]) == [1, 2]  # eval_every=0: only the listed step and the end
    for bad in ((-1,), (1.5,), 3, (True,)):
        with pytest.raises(ValueError, match="eval_steps"):
            tiny_config(eval_steps=bad)
