"""Benchmark: REINFORCE variants on CartPole-v1, env steps to a rolling-20 return of 475.

For each variant × seed, trains until the mean of the last 20 episode returns first reaches 475
(or the step budget runs out) and records the env steps and wall seconds. Prints a table, the
medians over seeds, and as its LAST line one JSON object {variant: median env steps}
(null where fewer than half the seeds got there).

    python benchmarks/cartpole_reinforce.py                 # all variants, seeds 0 1 2
    python benchmarks/cartpole_reinforce.py --variants default rtg+mean --seeds 0 1 2 3 4
    python benchmarks/cartpole_reinforce.py --variants vanilla rtg+mean default default-n1 --seeds 0 1 2 3 4 5 6 7 8 9 --save
        # and write every per-seed value to rlbook/data/cartpole_reinforce.json (chapter 3 compares from it)

Staying there: each run that reached 475 is repeated and continued 30,000 env steps past its first
crossing, and the lowest rolling-20 return in that stretch is recorded (a policy that collapses after
solving shows up there, not in the steps to 475).

Env-step counts are deterministic given the seed; wall seconds depend on the machine and its load.
Reference (measured on the same kind of 2-core machine): a plain REINFORCE with a mean baseline, 8 episodes
per update, needs 66.2k / 67.8k / 70.6k env steps.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from rlbook.algos.reinforce import ReinforceConfig, train_reinforce

VARIANTS: dict[str, dict] = {
    "vanilla": dict(return_kind="total", baseline="none", normalize_advantages=False, gamma=1.0),
    "rtg": dict(return_kind="rewards_to_go", baseline="none", normalize_advantages=False),
    "rtg+mean": dict(baseline="mean", normalize_advantages=False),
    "rtg+optimal": dict(baseline="optimal", normalize_advantages=False),
    "rtg+value": dict(baseline="value", normalize_advantages=False),
    "default": dict(),  # rtg + value baseline + normalised advantages: the book's default variant
    # the default with one episode per update instead of eight (chapter 3, exercise 3): picked on seeds
    # 100-109 with benchmarks/cartpole_sweep.py (README), reported on seeds 0-9
    "default-n1": dict(episodes_per_batch=1),
}
AFTER = 30_000  # env steps after the first crossing of 475 in which the lowest rolling-20 return is taken


def median_or_none(values: list[int | None]) -> float | None:
    """Median over seeds, counting a seed that never reached the target as +inf."""
    med = statistics.median([v if v is not None else float("inf") for v in values])
    return None if med == float("inf") else med


def lowest_after(hist, steps: int, after: int = AFTER) -> float:
    """Lowest rolling-20 return over the episodes that end within ``after`` env steps of the first
    crossing of 475 at ``steps`` (the crossing episode included)."""
    ends = hist.episode_end_steps
    first = ends.index(steps)
    last = max(i for i, end in enumerate(ends) if end <= steps + after)
    return float(hist.rolling_returns(20)[first:last + 1].min())


def run(variants: list[str], seeds: list[int], budget: int, per_seed: dict | None = None) -> dict[str, float | None]:
    """Train every variant on every seed; return the medians, and fill ``per_seed`` (if given) with
    {variant: {"steps_to_475": [...], "wall_s": [...], "lowest_after_475": [...]}} in the order of
    ``seeds`` (None = not reached). ``lowest_after_475``: a second run of the same seed, continued
    ``AFTER`` env steps past its first crossing (or to the budget), gives the lowest rolling-20 return
    in that stretch; the runs are deterministic, so it crosses at the same step (checked)."""
    torch.set_num_threads(1)
    rows, medians = [], {}
    print(f"{'variant':<13}{'seed':>5}{'steps to 475':>14}{'wall s':>9}{f'lowest in the next {AFTER:,}':>28}")
    for name in variants:
        steps, walls, lows = [], [], []
        for seed in seeds:
            cfg = ReinforceConfig(seed=seed, total_env_steps=budget, stop_at_return=475.0, **VARIANTS[name])
            start = time.perf_counter()
            hist = train_reinforce(cfg, progress=False)
            wall = time.perf_counter() - start
            n = hist.steps_to_threshold(475.0, window=20)
            low = None
            if n is not None:
                longer = train_reinforce(ReinforceConfig(seed=seed, total_env_steps=min(budget, n + AFTER),
                                                         **VARIANTS[name]), progress=False)
                if longer.steps_to_threshold(475.0, window=20) != n:
                    raise RuntimeError(f"{name}, seed {seed}: the continued run crossed 475 elsewhere (not deterministic)")
                low = round(lowest_after(longer, n), 2)
            steps.append(n)
            walls.append(wall)
            lows.append(low)
            print(f"{name:<13}{seed:>5}{(f'{n:,}' if n else f'> {budget:,}'):>14}{wall:>9.1f}"
                  f"{(f'{low:.1f}' if low is not None else '-'):>28}", flush=True)
        medians[name] = median_or_none(steps)
        if per_seed is not None:
            per_seed[name] = {"steps_to_475": steps, "wall_s": [round(w, 1) for w in walls], "lowest_after_475": lows}
        rows.append((name, medians[name], statistics.median(walls)))
    print("\nmedians over seeds", seeds)
    print(f"{'variant':<13}{'median steps':>14}{'median wall s':>15}")
    for name, med, wall in rows:
        print(f"{name:<13}{(f'{med:,.0f}' if med else 'not reached'):>14}{wall:>15.1f}")
    return medians


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--budget", type=int, default=150_000, help="env-step budget per run")
    parser.add_argument("--save", action="store_true", help="write rlbook/data/cartpole_reinforce.json (per-seed values)")
    args = parser.parse_args(argv)
    per_seed: dict = {}
    medians = run(args.variants, args.seeds, args.budget, per_seed)
    if args.save:
        from rlbook.config import BENCHMARK_RESULTS

        record = {"seeds": args.seeds, "budget": args.budget, "threshold": 475, "window": 20, "after": AFTER,
                  "variants": {name: dict(VARIANTS[name], **per_seed[name]) for name in args.variants},
                  "command": "python benchmarks/cartpole_reinforce.py --variants " + " ".join(args.variants)
                             + " --seeds " + " ".join(map(str, args.seeds)) + " --save"}
        path = BENCHMARK_RESULTS / "cartpole_reinforce.json"
        path.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
        print(f"saved to {path}")
    print(json.dumps(medians))


if __name__ == "__main__":
    main()
