"""The per-seed benchmark results that chapters 3, 7 and 9 compare from (``rl.benchmark_results``).

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
