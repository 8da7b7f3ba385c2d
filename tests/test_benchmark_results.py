"""The per-seed benchmark results that chapters 3, 7, 9, 12, 13 and 14 compare from (``rl.benchmark_results``).

Each shipped file must hold one value per seed for every method the chapter names, in seed order,
so that ``rl.compare`` pairs seed k with seed k; and the command that wrote it must be recorded.
"""

from __future__ import annotations

import math

import pytest

import rlbook as rl

SHIPPED = {  # file: (key of the per-method table, methods a chapter reads, per-seed fields)
    "cartpole": ("algos", ["reinforce", "trpo", "ppo"], ["steps_to_475", "wall_s"]),
    "cartpole_reinforce": ("variants", ["vanilla", "rtg+mean", "default"], ["steps_to_475", "wall_s"]),
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


@pytest.mark.parametrize("name, methods, fields", [
    ("dpo_vs_rl", ["sft", "offline_dpo", "online_dpo", "rl_reward_model", "rl_gold"],
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


def test_overoptimisation_keeps_ten_seeds_of_curves():
    saved = rl.benchmark_results("overoptimisation")
    assert saved["seeds"] == list(range(10)) and [r["seed"] for r in saved["runs"]] == saved["seeds"]
    for r in saved["runs"]:
        for name in ("best_of_n", "rl"):
            curve = r[name]
            assert len(curve["d"]) == len(curve["gold"]) == len(curve["proxy"]) >= 10
            assert all(math.isfinite(x) for x in curve["gold"] + curve["proxy"] + curve["d"])


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
