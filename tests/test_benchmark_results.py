"""The per-seed benchmark results that chapters 3, 7, 9, 12, 13, 14 and 15 compare from (``rl.benchmark_results``).

Each shipped file must hold one value per seed for every method the chapter names, in seed order,
so that ``rl.compare`` pairs seed k with seed k; and the command that wrote it must be recorded.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import rlbook as rl

SHIPPED = {  # file: (key of the per-method table, methods a chapter reads, per-seed fields)
    "cartpole": ("algos", ["reinforce", "trpo", "trpo_tuned", "ppo"], ["steps_to_475", "wall_s"]),
    "cartpole_reinforce": ("variants", ["vanilla", "rtg+mean", "default", "default-n1"],
                           ["steps_to_475", "wall_s", "lowest_after_475"]),
    "grpo_passes": ("runs", ["mu1_b0", "mu4_b004"], ["mean_reward", "final_reward", "final_kl", "clip_fraction"]),
}


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_shipped_result_has_one_value_per_seed_for_every_method(name):
    table_key, methods, fields = SHIPPED[name]
    saved = rl.benchmark_results(name)
    seeds = saved["seeds"]
    assert len(seeds) >= 10 and len(set(seeds)) == len(seeds), "ten or more distinct paired seeds"
    assert saved["command"].startswith(f"python benchmarks/{name}.py") and "--save" in saved["command"]
    for method in methods:
        for field in fields:
            values = saved[table_key][method][field]
            assert len(values) == len(seeds), (method, field)
            assert all(v is None or (isinstance(v, (int, float)) and math.isfinite(v)) for v in values), (method, field)


def test_steps_to_475_are_reached_within_the_budget_or_none():
    for name, key in (("cartpole", "algos"), ("cartpole_reinforce", "variants")):
        saved = rl.benchmark_results(name)
        for method, row in saved[key].items():
            budget = row.get("budget", saved.get("budget"))
            assert all(n is None or 0 < n <= budget for n in row["steps_to_475"]), (name, method)


def test_cartpole_reinforce_lowest_after_475_is_recorded_exactly_for_the_runs_that_got_there():
    """Chapter 3 compares how far the return dips after the first crossing: a value for every run that
    reached 475 and none for the others, a rolling-20 mean of CartPole returns (at most 500)."""
    saved = rl.benchmark_results("cartpole_reinforce")
    assert saved["after"] > 0
    for name, row in saved["variants"].items():
        for steps, low in zip(row["steps_to_475"], row["lowest_after_475"]):
            assert (steps is None) == (low is None), name
            assert low is None or 0 < low <= 500, name


@pytest.mark.parametrize("name, methods, fields", [
    ("dpo_vs_rl", ["sft", "offline_dpo", "online_dpo", "rl_reward_model", "rl_gold", "rl_implicit_reward"],
     ["gold", "correct", "length", "kl", "preference_accuracy"]),
])
def test_part_v_comparison_keeps_every_paired_seed_and_its_table_follows_from_them(name, methods, fields):
    """Chapter 13 compares from the per-seed runs: ten seeds in order, every method and metric finite, and the
    stored table and paired comparisons recomputed from those runs (so a hand-edited summary fails)."""
    saved = rl.benchmark_results(name)
    seeds = saved["seeds"]
    assert len(seeds) >= 10 and [r["seed"] for r in saved["runs"]] == seeds
    assert saved["command"].startswith(f"python benchmarks/{name}.py") and "--save" in saved["command"]
    for method in methods:
        for field in fields:
            values = [r["results"][method][field] for r in saved["runs"]]
            assert all(math.isfinite(v) for v in values), (method, field)
            assert saved["table"][method][field] == pytest.approx(list(rl.mean_ci(values)), abs=1e-12), (method, field)
    for key, stored in saved["comparisons_gold"].items():
        b, a = key.split(" - ")
        c = rl.compare([r["results"][b]["gold"] for r in saved["runs"]], [r["results"][a]["gold"] for r in saved["runs"]])
        assert (c.mean_diff, c.ci_low, c.ci_high) == pytest.approx((stored["mean_diff"], stored["ci_low"], stored["ci_high"]), abs=1e-12)


def test_preference_family_keeps_every_sweep_point_on_dpo_vs_rls_paired_seeds():
    """Chapter 13 (§13.4) interpolates each method's sweep at a common KL and compares on paired seeds: the
    seeds of dpo_vs_rl in order, every sweep point of the stored settings on every seed, in the settings'
    order, with finite metrics; the supervised model at KL 0 with preference accuracy 0.5 by definition."""
    saved = rl.benchmark_results("preference_family")
    seeds = saved["seeds"]
    assert len(seeds) >= 10 and [r["seed"] for r in saved["runs"]] == seeds == rl.benchmark_results("dpo_vs_rl")["seeds"]
    assert saved["command"].startswith("python benchmarks/preference_family.py") and "--save" in saved["command"]
    fields = ["gold", "correct", "length", "kl", "preference_accuracy"]
    for run in saved["runs"]:
        assert run["results"]["sft"]["kl"] == 0.0 and run["results"]["sft"]["preference_accuracy"] == 0.5
        for method, sweep in saved["settings"]["sweeps"].items():
            points = run["results"][method]
            assert [p["value"] for p in points] == sweep["values"], (run["seed"], method)
            assert all(math.isfinite(p[k]) for p in points for k in fields), (run["seed"], method)
            assert all(0 <= p["correct"] <= 1 and 0 <= p["preference_accuracy"] <= 1 for p in points), (run["seed"], method)


@pytest.mark.parametrize("name", ["overoptimisation", "overoptimisation_fitted"])
def test_overoptimisation_keeps_ten_seeds_of_curves(name):
    saved = rl.benchmark_results(name)
    assert saved["seeds"] == list(range(10)) and [r["seed"] for r in saved["runs"]] == saved["seeds"]
    for r in saved["runs"]:
        for name in ("best_of_n", "rl"):
            curve = r[name]
            assert len(curve["d"]) == len(curve["gold"]) == len(curve["proxy"]) >= 10
            assert all(math.isfinite(x) for x in curve["gold"] + curve["proxy"] + curve["d"])


@pytest.mark.parametrize("name", ["overoptimisation", "overoptimisation_fitted"])
def test_overoptimisation_best_of_n_kl_is_exact_below_the_bound_and_grows_with_n(name):
    """Best-of-N's stored ``kl`` is the exact KL over each prompt's empirical samples, not the bound (12.9):
    0 at N = 1, never above log N − (N−1)/N, non-decreasing in N, and d = √kl."""
    for r in rl.benchmark_results(name)["runs"]:
        curve = r["best_of_n"]
        kl, bound = curve["kl"], curve["kl_bound"]
        assert curve["n"][0] == 1 and kl[0] == pytest.approx(0.0, abs=1e-9)
        assert bound == pytest.approx([math.log(n) - (n - 1) / n for n in curve["n"]], abs=1e-12)
        assert all(k <= b + 1e-9 for k, b in zip(kl, bound)), (r["seed"], kl)
        assert all(b >= a - 1e-12 for a, b in zip(kl, kl[1:])), (r["seed"], kl)
        assert kl[-1] < bound[-1]  # a finite sample set: strictly below at N = 64
        assert curve["d"] == pytest.approx([math.sqrt(max(k, 0.0)) for k in kl], abs=1e-12)


def test_mismatch_training_keeps_every_paired_seed_and_its_table_follows_from_them():
    """Chapter 14 compares from the per-seed runs: every condition on the same ten seeds, finite values,
    the sampler's mismatch zero exactly when the policy samples itself, and the stored table and paired
    comparisons recomputed from the runs (so a hand-edited summary fails)."""
    saved = rl.benchmark_results("mismatch_training")
    seeds, conditions = saved["seeds"], list(saved["conditions"])
    assert len(seeds) >= 10 and saved["command"].startswith("python benchmarks/mismatch_training.py") and "--save" in saved["command"]
    by = {c: [r for r in saved["runs"] if r["condition"] == c] for c in conditions}
    for c, runs in by.items():
        assert [r["seed"] for r in runs] == seeds, c
        for key in ("pass@1", "greedy_accuracy", "final_kl", "sampler_kl"):
            assert all(math.isfinite(r[key]) for r in runs), (c, key)
        assert saved["table"][c]["pass@1"] == pytest.approx(list(rl.mean_ci([r["pass@1"] for r in runs])), abs=1e-12)
        mismatched = any(k.startswith("sampler_") for k in saved["conditions"][c])
        precision_only = set(saved["conditions"][c]) == {"sampler_precision"}
        if not mismatched:
            assert all(r["sampler_kl"] == 0.0 for r in runs), c
        elif not precision_only:  # rounding alone moves log-probs by less than the stored 4 decimals at times
            assert all(r["sampler_kl"] > 0 for r in runs), c
        assert all(len(r["curves"]["reward"]) == saved["num_steps"] for r in runs), c
    for key, stored in saved["comparisons_pass1"].items():
        a, b = key.split(" - ")
        comparison = rl.compare([r["pass@1"] for r in by[a]], [r["pass@1"] for r in by[b]])
        assert (comparison.mean_diff, comparison.ci_low, comparison.ci_high) == pytest.approx(
            (stored["mean_diff"], stored["ci_low"], stored["ci_high"]), abs=1e-12)


def test_reward_hacking_keeps_every_paired_seed_and_its_numbers_follow_from_them():
    """Chapter 15's reward-hacking section reads the per-seed runs: every condition on the same ten seeds;
    the substring check accepts everything the strict verifier does, at every step and held out; the
    accepted-but-wrong share is the difference of the two pass@1s; the stored table is recomputed from the
    runs; and the audit examples are what the name says (accepted by the substring check, rejected by the
    strict verifier)."""
    saved = rl.benchmark_results("reward_hacking")
    seeds = saved["seeds"]
    assert len(seeds) >= 10 and saved["command"].startswith("python benchmarks/reward_hacking.py") and "--save" in saved["command"]
    by = {c: [r for r in saved["runs"] if r["condition"] == c] for c in ("before", "substring", "strict")}
    task = rl.lm.ScratchpadAdditionTask(num_digits=2)
    steps = saved["budget"] // (saved["common"]["prompts_per_step"] * saved["common"]["group_size"])
    for c, runs in by.items():
        assert [r["seed"] for r in runs] == seeds, c
        for r in runs:
            assert r["substring_pass@1"] >= r["pass@1"] and r["accepted_wrong"] == pytest.approx(r["substring_pass@1"] - r["pass@1"])
            for q, o in r["examples"]:
                assert task.substring_reward(q, o) == 1.0 and task.reward(q, o) == 0.0, (c, q, o)
            if c != "before":
                curves = r["curves"]
                assert len(curves["strict"]) == len(curves["substring"]) == len(curves["completion_length"]) == steps
                assert all(s >= t for s, t in zip(curves["substring"], curves["strict"])), c
        for key in ("pass@1", "substring_pass@1", "accepted_wrong"):
            assert saved["table"][c][key] == pytest.approx(list(rl.mean_ci([r[key] for r in runs])), abs=1e-12), (c, key)


def test_passk_after_rl_keeps_every_paired_seed_and_its_curves_follow_from_the_counts():
    """Chapter 15's pass@k section reads the per-problem counts: ten or more seeds, each with the counts of
    correct samples out of ``num_samples`` on ``num_problems`` problems before and after RL, and the stored
    pass@k curves recomputed from them by the unbiased estimator."""
    saved = rl.benchmark_results("passk_after_rl")
    seeds, n, ks = saved["seeds"], saved["num_samples"], saved["ks"]
    assert len(seeds) >= 10 and saved["command"].startswith("python benchmarks/passk_after_rl.py") and "--save" in saved["command"]
    assert sorted(r["seed"] for r in saved["runs"]) == sorted(seeds) and max(ks) == n
    for r in saved["runs"]:
        for phase in ("before", "after"):
            counts = r[phase]["counts"]
            assert len(counts) == saved["num_problems"] and all(0 <= c <= n for c in counts)
            assert r[phase]["pass@k"] == pytest.approx(list(rl.pass_at_k_curve(n, counts, ks)), abs=1e-12)


def test_entropy_dynamics_add_merges_conditions_and_refuses_records_that_do_not_pair(monkeypatch):
    """``--add`` keeps the saved runs of the other conditions, takes the new conditions' runs and table rows,
    and refuses a record with other seeds or settings, or whose supervised models' rows differ."""
    from pathlib import Path

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import entropy_dynamics

    def record(condition, value, before=0.4, seeds=(0, 1)):
        runs = [{"seed": s, "condition": c, "pass@1": v} for s in seeds for c, v in (("before", before), (condition, value))]
        return {"seeds": list(seeds), "budget": 10240, "common": {"x": 1}, "conditions": {condition: {}}, "runs": runs,
                "table": {condition: [value] * 3}, "wall_s": 10.0, "command": f"run {condition}"}

    saved, new = record("grpo_b0", 0.9), record("grpo_b0_mu4", 0.8)
    out = entropy_dynamics.merged(saved, new, ["grpo_b0_mu4"])
    assert [(r["seed"], r["condition"]) for r in out["runs"]] == [(0, "before"), (0, "grpo_b0"), (0, "grpo_b0_mu4"),
                                                                 (1, "before"), (1, "grpo_b0"), (1, "grpo_b0_mu4")]
    assert out["table"] == {"grpo_b0": [0.9] * 3, "grpo_b0_mu4": [0.8] * 3} and out["wall_s"] == 20.0
    assert out["command"] == "run grpo_b0; run grpo_b0_mu4 --add"
    with pytest.raises(ValueError, match="supervised models"):
        entropy_dynamics.merged(saved, record("grpo_b0_mu4", 0.8, before=0.5), ["grpo_b0_mu4"])
    with pytest.raises(ValueError, match="seeds, budget and settings"):
        entropy_dynamics.merged(saved, record("grpo_b0_mu4", 0.8, seeds=(0, 2)), ["grpo_b0_mu4"])


def test_cartpole_sweep_parses_override_sets_with_tuples_and_refuses_a_bare_name(monkeypatch):
    """``--sets`` splits on the commas outside brackets, so a tuple field (``hidden_sizes``) can be swept."""
    from pathlib import Path

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from cartpole_sweep import parse_set

    assert parse_set("default") == {}
    assert parse_set("lr=2e-3,hidden_sizes=(64, 64),num_envs=16") == {"lr": 2e-3, "hidden_sizes": (64, 64), "num_envs": 16}
    assert parse_set("hidden_sizes=(128,)") == {"hidden_sizes": (128,)}
    assert parse_set("lr_schedule=constant,target_kl=None") == {"lr_schedule": "constant", "target_kl": None}
    with pytest.raises(ValueError, match="field=value"):
        parse_set("lr=1e-3,epochs")


def test_cartpole_reinforce_lowest_after_takes_the_stretch_from_the_crossing_to_after_steps(monkeypatch):
    from pathlib import Path

    import numpy as np

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from cartpole_reinforce import lowest_after

    class Hist:  # episodes ending every 100 env steps; rolling means given directly
        episode_end_steps = [100, 200, 300, 400, 500, 600]

        def rolling_returns(self, window):
            assert window == 20
            return np.array([10.0, 480.0, 476.0, 300.0, 490.0, 5.0])

    assert lowest_after(Hist(), 200, after=200) == 300.0  # episodes ending at 200..400
    assert lowest_after(Hist(), 200, after=100) == 476.0  # at 200 and 300
    assert lowest_after(Hist(), 200, after=0) == 480.0  # the crossing episode alone
    assert lowest_after(Hist(), 500, after=10_000) == 5.0  # to the end of the run


def test_reward_model_noise_keeps_ten_paired_seeds_of_every_condition():
    """Chapter 12 compares T = 3 with T = 0 and 1,600 with 25 comparisons from this record: one accuracy per seed
    and condition, each a share of the held-out pairs (never at 0 or 1, where a comparison could not move)."""
    saved = rl.benchmark_results("reward_model_noise")
    seeds = saved["seeds"]
    assert len(seeds) >= 10 and len(set(seeds)) == len(seeds) and saved["command"].startswith("python benchmarks/reward_model_noise.py")
    assert sorted(saved["accuracy"]) == sorted(f"N={n},T={t:g}" for n in saved["sizes"] for t in saved["temperatures"])
    for values in saved["accuracy"].values():
        assert len(values) == len(seeds) and all(0 < v < 1 for v in values)


def test_precision_mismatch_ratios_follow_from_the_per_precision_values():
    """Chapter 14 takes its precision claims' tolerances from this record: per seed the fp16/bf16 ratio of each
    statistic is the ratio of the stored values, and every value is positive (a zero would make the ratio vacuous)."""
    saved = rl.benchmark_results("precision_mismatch")
    runs, seeds = saved["runs"], saved["seeds"]
    assert len(seeds) >= 10 and saved["command"].startswith("python benchmarks/precision_mismatch.py")
    for key in ("largest", "mean_abs", "range_1_99"):
        for precision in ("bf16", "fp16"):
            assert len(runs[precision][key]) == len(seeds) and min(runs[precision][key]) > 0
        ratio = [f / b for f, b in zip(runs["fp16"][key], runs["bf16"][key])]
        assert runs["ratio"][key] == pytest.approx(ratio, rel=1e-12)


def test_mismatch_bias_keeps_every_sampler_and_estimator_for_every_seed():
    """Chapter 14 §14.3 states the bias table over these seeds: a relative bias ≥ 0 and a cosine in [−1, 1] for every
    sampler × estimator × seed, and the estimators the chapter names."""
    saved = rl.benchmark_results("mismatch_bias")
    seeds = saved["seeds"]
    assert len(seeds) >= 10 and saved["command"].startswith("python benchmarks/mismatch_bias.py")
    assert {"none", "is", "token_truncate", "token_mask", "sequence_mask"} <= set(saved["estimators"])
    for sampler in saved["samplers"]:
        for mode in saved["estimators"]:
            biases, cosines = saved["bias"][sampler][mode], saved["cosine"][sampler][mode]
            assert len(biases) == len(cosines) == len(seeds)
            assert all(b >= 0 for b in biases) and all(-1 <= c <= 1 for c in cosines)


def test_reference_policy_keeps_ten_models_and_its_kl_level_follows_from_the_right_answers_mass():
    """Best-of-N's KL levels off at −log π_ref(right answer) when the right answer is the best: the stored level of
    every supervised model equals it (to the precision of N = 1024, where (1 − p)^N is far below 1e-6)."""
    saved = rl.benchmark_results("reference_policy")
    assert len(saved["seeds"]) >= 10 and saved["command"].startswith("python benchmarks/reference_policy.py")
    for p, level, gaps in zip(saved["pi_ref_right"], saved["bon_kl_level"], saved["gaps"]):
        assert 0 < p < 1 and level == pytest.approx(-math.log(p), abs=1e-6)
        assert len(gaps) == 5 and all(g > -1e-12 for g in gaps)  # N = 2 ... 32; π* is never below best-of-N at equal KL


def test_spurious_rewards_keeps_ten_paired_seeds_and_its_table_follows_from_them():
    saved = rl.benchmark_results("spurious_rewards")
    seeds = saved["seeds"]
    assert len(seeds) >= 10 and saved["command"].startswith("python benchmarks/spurious_rewards.py") and "--save" in saved["command"]
    for condition in ("before", "random_reward", "random_reward_mu4"):
        runs = sorted((r for r in saved["runs"] if r["condition"] == condition), key=lambda r: r["seed"])
        assert [r["seed"] for r in runs] == sorted(seeds), condition
        mean = sum(r["pass@1"] for r in runs) / len(runs)
        assert saved["table"][condition]["pass@1"][0] == pytest.approx(mean), condition
        if condition != "before":  # the clip's share is recorded, and four passes give it more to act on
            assert all(0 <= r["mean_clip_fraction"] <= 1 and len(r["curves"]["entropy"]) == r["steps"] for r in runs)
    by = {c: {r["seed"]: r for r in saved["runs"] if r["condition"] == c} for c in ("random_reward", "random_reward_mu4")}
    assert all(by["random_reward_mu4"][s]["mean_clip_fraction"] > by["random_reward"][s]["mean_clip_fraction"] for s in seeds)


def test_answer_entropy_keeps_every_paired_seed_and_its_table_follows_from_them():
    """Chapter 10's entropy paragraph splits the trained policies' entropy by position: the three conditions on
    the same ten seeds, entropies finite and non-negative, shares in [0, 1], the per-token mean between the
    answer's and the working's means whenever both exist, and the stored table recomputed from the runs."""
    saved = rl.benchmark_results("answer_entropy")
    seeds = saved["seeds"]
    assert len(seeds) >= 10 and saved["command"].startswith("python benchmarks/answer_entropy.py") and "--save" in saved["command"]
    for condition in saved["conditions"]:
        runs = [r for r in saved["runs"] if r["condition"] == condition]
        assert [r["seed"] for r in runs] == seeds, condition
        for r in runs:
            assert all(math.isfinite(r[k]) and r[k] >= 0 for k in ("entropy_token_mean", "entropy_answer", "entropy_working",
                                                                   "entropy_answer_sum")), (condition, r["seed"])
            assert 0 <= r["worked_share"] <= 1 and 0 <= r["pass@1"] <= 1
            low, high = sorted((r["entropy_answer"], r["entropy_working"]))
            assert low - 1e-9 <= r["entropy_token_mean"] <= high + 1e-9 or r["ended_share"] < 1, (condition, r["seed"])
        for key, cell in saved["table"][condition].items():
            assert cell == pytest.approx(list(rl.mean_ci([r[key] for r in runs])), abs=1e-12), (condition, key)


def test_dpo_vs_rl_reward_model_curve_and_pair_ceiling_are_consistent():
    """Chapter 13 reads the reward model trained on past its 40 updates and the pairs' ceiling: the curve's first
    point is rl_reward_model's own reward model (same held-out accuracy), steps increase, accuracies are shares,
    and the gold reward's own preference accuracy (the ceiling) is above every learned scorer's mean but below 1."""
    saved = rl.benchmark_results("dpo_vs_rl")
    steps = saved["settings"]["rm_curve_steps"]
    assert steps[0] == saved["settings"]["rm_steps"] and steps == sorted(set(steps))
    for r in saved["runs"]:
        curve = r["rm_curve"]
        assert curve["steps"] == steps
        assert curve["test_accuracy"][0] == pytest.approx(r["results"]["rl_reward_model"]["preference_accuracy"], abs=1e-12)
        assert curve["train_accuracy"][0] == pytest.approx(r["results"]["rl_reward_model"]["rm_train_accuracy"], abs=1e-12)
        assert all(0 <= a <= 1 for a in curve["train_accuracy"] + curve["test_accuracy"])
        assert all(math.isfinite(x) and x > 0 for x in curve["test_loss"])
        assert 0 <= r["pairs"]["identical_train"] < 0.5 and 0 <= r["pairs"]["identical_test"] < 0.5
        # rl_implicit_reward is scored by offline DPO's implicit reward: the same preference accuracy
        assert r["results"]["rl_implicit_reward"]["preference_accuracy"] == r["results"]["offline_dpo"]["preference_accuracy"]
    ceiling = np.mean([r["pairs"]["gold_preference_accuracy"] for r in saved["runs"]])
    assert ceiling < 1
    for method in ("offline_dpo", "online_dpo", "rl_reward_model"):
        assert np.mean([r["results"][method]["preference_accuracy"] for r in saved["runs"]]) < ceiling, method


def test_agent_tool_use_keeps_every_paired_seed_and_its_table_follows_from_them():
    """Chapter 16 compares from the per-seed runs: every condition on the same ten or more seeds, rates in [0, 1],
    the stored table recomputed from the runs, GRPO curves one value per step; and with the useless tool on
    4-digit problems, on every seed where no training episode was rewarded, every group had zero variance and the
    model evaluates exactly as its start, which is what GRPO must do with no advantage (tests/test_agent_train.py proves it on a small model).
    Chapter 16 reads both: the seeds on which no training episode was rewarded, and the others."""
    saved = rl.benchmark_results("agent_tool_use")
    seeds, conditions = saved["seeds"], saved["conditions"]
    assert len(seeds) >= 10 and len(set(seeds)) == len(seeds)
    assert saved["command"].startswith("python benchmarks/agent_tool_use.py") and "--save" in saved["command"]
    by = {c: [r for r in saved["runs"] if r["condition"] == c] for c in conditions}
    rates = ("sampled", "greedy", "call_frequency", "digit_accuracy", "sampled_useless")
    for c, runs in by.items():
        assert [r["seed"] for r in runs] == seeds, c
        for key in rates:
            assert all(0.0 <= r[key] <= 1.0 for r in runs), (c, key)
            assert saved["table"][c][key] == pytest.approx(list(rl.mean_ci([r[key] for r in runs])), abs=1e-12)
        if "_grpo_" in c:
            for key in ("train_reward", "train_call_frequency", "zero_variance_groups"):
                assert all(len(r[key]) == saved["grpo"]["num_steps"] for r in runs), (c, key)
    silent = 0
    for useless, start in zip(by["mixed_grpo_useless"], by["mixed_sft"]):
        if set(useless["train_reward"]) == {0.0}:
            silent += 1
            assert set(useless["zero_variance_groups"]) == {1.0}
            assert all(useless[k] == start[k] for k in rates), useless["seed"]
    assert silent >= 1  # the property is exercised


def _benchmark_module(name):
    """``benchmarks/<name>.py`` loaded as a module (its settings are what a stored record must hold); the scripts
    import their neighbours (``_runner``, ``agent_credit``, ...), so ``benchmarks/`` is on the path while it loads."""
    import importlib.util
    import sys
    from pathlib import Path

    benchmarks = Path(__file__).resolve().parents[1] / "benchmarks"
    spec = importlib.util.spec_from_file_location(f"bench_{name}", benchmarks / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(benchmarks))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(benchmarks))
    return module


AGENT_RATES = ("sampled", "greedy", "call_frequency", "malformed_frequency", "digit_accuracy")


def _paired_agent_record(name, traces, num_steps=None, untraced=()):
    """Chapter 17's benchmark ``name``, checked as every such record is: ten or more distinct seeds, saved by its
    script's command, every condition on the same seeds in the same order, rates in [0, 1], the stored table
    recomputed from the runs, and one value per GRPO step in each trace of ``traces`` (``num_steps(saved,
    condition)`` of them, default the record's ``grpo["num_steps"]``; the conditions in ``untraced`` have none).
    Returns the record and its runs by condition."""
    saved = rl.benchmark_results(name)
    seeds = saved["seeds"]
    assert len(seeds) >= 10 and len(set(seeds)) == len(seeds)
    assert saved["command"].startswith(f"python benchmarks/{name}.py") and "--save" in saved["command"]
    by = {c: [r for r in saved["runs"] if r["condition"] == c] for c in saved["conditions"]}
    for c, runs in by.items():
        assert [r["seed"] for r in runs] == seeds, c
        for key in AGENT_RATES:
            assert all(0.0 <= r[key] <= 1.0 for r in runs), (c, key)
            assert saved["table"][c][key] == pytest.approx(list(rl.mean_ci([r[key] for r in runs])), abs=1e-12)
        assert all(1.0 <= r["turns_per_episode"] <= 3.0 for r in runs), c
        if c not in untraced:
            steps = num_steps(saved, c) if num_steps else saved["grpo"]["num_steps"]
            for key in traces:
                assert all(len(r[key]) == steps for r in runs), (c, key)
    return saved, by


def _same_runs_as_agent_credit(saved, pairs, keys):
    """Where ``saved`` and agent_credit were made with the same torch on the same kind of machine, each
    ``(condition, agent_credit's condition)`` of ``pairs`` holds the same numbers in ``keys``, seed for seed."""
    credit = rl.benchmark_results("agent_credit")
    if credit["torch"] == saved["torch"] and credit["machine"] == saved["machine"]:
        for mine, theirs in pairs:
            old = {r["seed"]: r for r in credit["runs"] if r["condition"] == theirs}
            for run in (r for r in saved["runs"] if r["condition"] == mine):
                if run["seed"] in old:
                    assert all(run[k] == old[run["seed"]][k] for k in keys), (mine, run["seed"])


def test_agent_credit_keeps_every_paired_seed_and_its_broadcast_runs_are_chapter_16s():
    """Chapter 17 compares from the per-seed runs: every condition on the same ten or more seeds, rates in [0, 1],
    the stored table recomputed from the runs, one training value per GRPO step. Its warm-up is chapter 16's 2-digit
    one and its `broadcast` condition is chapter 16's `mixed2_grpo_calculator` (one configuration, two names): where
    both benchmarks were run with the same torch on the same kind of machine, their rows agree number for number."""
    saved, by = _paired_agent_record("agent_credit", ("train_reward", "train_call_frequency",
                                                      "train_malformed_frequency"), untraced=("sft",))
    assert saved["credit"]["broadcast"] == {"credit": "broadcast"}
    chapter16 = rl.benchmark_results("agent_tool_use")
    if chapter16["torch"] == saved["torch"] and chapter16["machine"] == saved["machine"]:
        old = {r["seed"]: r for r in chapter16["runs"] if r["condition"] == "mixed2_grpo_calculator"}
        start = {r["seed"]: r for r in chapter16["runs"] if r["condition"] == "mixed2_sft"}
        for new, sft in zip(by["broadcast"], by["sft"]):
            if new["seed"] in old:
                assert all(new[k] == old[new["seed"]][k] for k in ("sampled", "greedy", "call_frequency")), new["seed"]
                assert all(sft[k] == start[sft["seed"]][k] for k in ("sampled", "greedy", "call_frequency")), sft["seed"]


def test_agent_staleness_keeps_every_paired_seed_and_its_fresh_runs_are_the_broadcast_runs():
    """Chapter 17's asynchronous experiment: every condition on the same ten or more seeds, rates in [0, 1], the
    stored table recomputed from the runs, one training value per step; its ``fresh`` condition is agent_credit's
    ``broadcast`` (the same warm-up and settings): on the same torch and machine, the same numbers."""
    saved, _ = _paired_agent_record("agent_staleness", ("train_reward", "train_call_frequency", "zero_variance_groups"))
    assert saved["async"]["fresh"] == {"staleness": 0}
    _same_runs_as_agent_credit(saved, [("fresh", "broadcast")], AGENT_RATES + ("train_reward",))


def test_agent_shaping_keeps_every_paired_seed_and_its_unshaped_and_broadcast_runs_are_agent_credits():
    """Chapter 17's shaping experiment: every condition on the same ten or more seeds, rates in [0, 1], the stored
    table recomputed from the runs, one training value per step; the settings are the script's. Its ``rebn``
    condition (no shaping) is agent_credit's ``rebn``, and its ``broadcast_shaped`` is agent_credit's
    ``broadcast``: a penalty of 1/4 on the call and a bonus of 1/4 with the last turn leave every episode's total,
    and so broadcast's advantages, exactly unchanged. On the same torch and machine, the same numbers, run for run."""
    saved, by = _paired_agent_record("agent_shaping", ("train_reward", "train_call_frequency",
                                                       "train_malformed_frequency"))
    module = _benchmark_module("agent_shaping")
    assert saved["conditions"] == module.CONDITIONS
    assert saved["shaping"] == {k: {"credit": v[0], "c": v[1]} for k, v in module.SHAPING.items()}
    assert saved["grpo"] == module.GRPO and saved["shaping"]["rebn"]["c"] == 0.0
    for c, runs in by.items():  # the outcome, without the shaping
        assert all(0.0 <= x <= 1.0 for r in runs for x in r["train_reward"]), c
    _same_runs_as_agent_credit(saved, [("rebn", "rebn"), ("broadcast_shaped", "broadcast")],
                               AGENT_RATES + ("train_reward",))


def test_agent_echo_trap_keeps_every_paired_seed_and_its_first_hundred_steps_are_the_broadcast_runs():
    """Chapter 17's Echo Trap experiment: every condition on the same ten or more seeds, rates in [0, 1], the stored
    table recomputed from the runs, one value per step of every trace; its ``onepass`` condition is agent_credit's
    ``broadcast`` run for twice the steps, so (same torch and machine) its first 100 steps are that run's, reward
    for reward; the filter kept its share of groups (a filtered step's traces differ from the unfiltered one's)."""
    traces = [f"train_{key}" for key in ("reward", "reward_std", "entropy", "grad_norm", "call_frequency",
                                         "malformed_frequency", "zero_variance_groups")]
    saved, by = _paired_agent_record("agent_echo_trap", traces, num_steps=lambda saved, c: saved["echo"][c]["num_steps"])
    for c, runs in by.items():
        assert all(min(r["train_grad_norm"]) >= 0 and min(r["train_entropy"]) >= 0 for r in runs), c
    assert saved["echo"]["reuse4_filter"]["rollout_filter_ratio"] == 0.25
    assert saved["echo"]["onepass"] == {"num_steps": 200}
    credit = rl.benchmark_results("agent_credit")
    if credit["torch"] == saved["torch"] and credit["machine"] == saved["machine"]:
        broadcast = {r["seed"]: r for r in credit["runs"] if r["condition"] == "broadcast"}
        for run in by["onepass"]:
            if run["seed"] in broadcast:
                first = broadcast[run["seed"]]["train_reward"]
                assert run["train_reward"][:len(first)] == first, run["seed"]


def test_distillation_keeps_every_paired_seed_and_its_configurations_are_the_benchmark_s():
    """Chapter 18's benchmark: every condition on the same ten or more seeds; the stored configurations are the
    script's (the chapter builds its live runs from them, so one name means one configuration); accuracies in
    [0, 1], KLs ≥ 0, the table recomputed from the runs, one value per step of every trace; the equal-sample rule
    (every condition draws prompts_per_step × samples_per_prompt completions per step); and the chain rule behind
    ``own_kl``: the sequence KL is the per-position mean KL weighted by the share of completions reaching each
    position, so it is at least the first position's mean KL."""
    saved = rl.benchmark_results("distillation")
    module = _benchmark_module("distillation")
    seeds, conditions = saved["seeds"], saved["conditions"]
    assert len(seeds) >= 10 and len(set(seeds)) == len(seeds)
    assert saved["command"].startswith("python benchmarks/distillation.py") and "--save" in saved["command"]
    assert conditions == module.CONDITIONS and saved["common"] == module.COMMON
    assert saved["configs"] == {name: {"method": m, **f} for name, (m, f) in module.CONFIGS.items()}
    for name in module.CONFIGS:  # each stored configuration is a valid rl.DistillationConfig
        fields = {k: v for k, v in saved["configs"][name].items() if k != "method"}
        rl.DistillationConfig(**saved["common"], **fields, seed=0)
    by = {c: [r for r in saved["runs"] if r["condition"] == c] for c in conditions}
    for c, runs in by.items():
        assert [r["seed"] for r in runs] == seeds, c
        for key in ("pass@1", "greedy", "pass@8"):
            assert all(0.0 <= r[key] <= 1.0 for r in runs), (c, key)
        for key in module.FIELDS:
            assert saved["table"][c][key] == pytest.approx(list(rl.mean_ci([r[key] for r in runs])), abs=1e-12)
        for r in runs:
            assert r["own_kl"] >= 0 and r["teacher_prefix_kl"] >= 0
            assert r["own_kl"] >= r["own_kl_by_position"][0] - 1e-9  # position 0 is reached by every completion
            assert len(r["own_kl_by_position"]) == saved["common"]["max_new_tokens"]
        if c != "start":
            steps = saved["configs"][c]["num_steps"]
            assert all(len(r["train_reward"]) == steps and len(r["train_loss"]) == steps for r in runs), c
    start = by["start"]
    assert len({(r["pass@1"], r["own_kl"]) for r in start}) == 1  # the untrained student does not depend on the seed


def test_distillation_multi_teacher_keeps_every_paired_seed_and_its_families_partition_the_evaluation():
    """Chapter 18's multi-teacher benchmark: every condition on the same ten or more seeds, configurations the
    script's, accuracies in [0, 1], the table recomputed from the runs; the two families' held-out problems
    partition the 200 evaluation problems (each family's pass@1 is its own evaluation, with its own samples); the
    untrained student does not depend on the seed; each specialist teacher is stored with its accuracy."""
    saved = rl.benchmark_results("distillation_multi_teacher")
    module = _benchmark_module("distillation_multi_teacher")
    seeds, conditions = saved["seeds"], saved["conditions"]
    assert len(seeds) >= 10 and len(set(seeds)) == len(seeds)
    assert saved["command"].startswith("python benchmarks/distillation_multi_teacher.py") and "--save" in saved["command"]
    assert conditions == module.CONDITIONS and saved["configs"] == module.CONFIGS
    assert saved["families"] == list(module.FAMILY_NAMES)
    by = {c: [r for r in saved["runs"] if r["condition"] == c] for c in conditions}
    for c, runs in by.items():
        assert [r["seed"] for r in runs] == seeds, c
        for key in module.FIELDS:
            assert all(0.0 <= r[key] <= 1.0 for r in runs), (c, key)
            assert saved["table"][c][key] == pytest.approx(list(rl.mean_ci([r[key] for r in runs])), abs=1e-12)
        for r in runs:
            sizes = [r[f"num_problems_{f}"] for f in module.FAMILY_NAMES]
            assert sum(sizes) == r["num_problems"] == module.NUM_EVAL and min(sizes) > 0
    assert len({(r["pass@1"], r["pass@1_units_carry"]) for r in by["start"]}) == 1
    assert set(saved["teachers"]) == {"generalist", "units_carry_teacher", "no_units_carry_teacher"}
    # `generalist` and `grpo` are the distillation benchmark's `full_kl` and `grpo`, seed for seed, where both
    # were made with one torch on one machine (the same student, teacher, configuration and seeds)
    single = rl.benchmark_results("distillation")
    if single["torch"] == saved["torch"] and single["machine"] == saved["machine"]:
        for here, there in (("generalist", "full_kl"), ("grpo", "grpo")):
            stored = {r["seed"]: r["pass@1"] for r in single["runs"] if r["condition"] == there}
            assert [r["pass@1"] for r in by[here]] == [stored[s] for s in seeds], here
