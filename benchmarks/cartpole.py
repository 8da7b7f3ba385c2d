"""Part II benchmark: env steps (and wall seconds) for REINFORCE, TRPO and PPO to solve CartPole-v1.

``trpo`` runs chapter 6's TRPO settings, ``trpo_tuned`` the one configuration ``TRPO_TUNED`` picked by a
sweep on seeds 100-109 (``benchmarks/cartpole_sweep.py trpo``), so that PPO, tuned the same way, can be
compared with a TRPO that got the same treatment.

"Solved" = the mean return of the last 20 finished episodes (all envs, in finishing order) first
reaches 475 (``History.steps_to_threshold(475, 20)``). Runs are
deterministic given the seed, so the step counts do not depend on machine load; wall seconds do.

    python benchmarks/cartpole.py                          # all algorithms, seeds 0 1 2
    python benchmarks/cartpole.py --algos ppo --seeds 0 1 2 3 4
    python benchmarks/cartpole.py --algos ppo --stability  # keep training to the budget and report
                                                           # the worst rolling-20 after reaching 475
    python benchmarks/cartpole.py --seeds 0 1 2 3 4 5 6 7 8 9 --save   # and write rlbook/data/cartpole.json

Prints one row per (algorithm, seed), a median row per algorithm, and as the LAST line one JSON
object mapping each algorithm to its median env steps to 475 (null if most seeds never got there).
``--save`` stores every per-seed value (steps to 475, null where never reached; wall seconds) so
that chapters compare the algorithms seed by seed (``rl.benchmark_results("cartpole")``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

# Budgets (env steps) generous enough for every algorithm to reach 475 with its book defaults.
# PPO's budget is also the horizon of its linear learning-rate schedule, so it keeps the config's
# default (100k), the setting it was tuned with.
BUDGETS = {"reinforce": 200_000, "trpo": 300_000, "ppo": 100_000, "trpo_tuned": 300_000}

# "trpo" is chapter 6's TRPOConfig defaults; "trpo_tuned" is exactly one other configuration, the
# winner of a sweep on the tuning seeds 100-109 (benchmarks/cartpole_sweep.py trpo; every setting
# tried is listed in the README), on top of those defaults.
TRPO_TUNED = {"critic_lr": 3e-3}  # seeds 100-109: median 23,776 env steps to 475 (defaults: 33,500), 10/10


def _train(algo: str, seed: int, budget: int, stop: bool):
    stop_at = 475.0 if stop else None
    if algo == "ppo":
        from rlbook.algos.ppo import PPOConfig, train_ppo
        return train_ppo(PPOConfig(seed=seed, total_env_steps=budget, stop_at_return=stop_at), progress=False)
    if algo in ("trpo", "trpo_tuned"):
        from rlbook.algos.trpo import TRPOConfig, train_trpo
        fields = TRPO_TUNED if algo == "trpo_tuned" else {}
        return train_trpo(TRPOConfig(seed=seed, total_env_steps=budget, stop_at_return=stop_at, **fields),
                          progress=False)
    if algo == "reinforce":
        # The lead's REINFORCE with its best-variant defaults (rlbook/algos/reinforce.py).
        from rlbook.algos.reinforce import ReinforceConfig, train_reinforce
        return train_reinforce(ReinforceConfig(seed=seed, total_env_steps=budget, stop_at_return=stop_at),
                               progress=False)
    raise ValueError(f"`algos` must be among {sorted(BUDGETS)}; got {algo!r}")


def _median(values):
    """Median treating 'never reached' (None) as +inf; None if the median itself is +inf."""
    from cartpole_reinforce import median_or_none  # same folder: run as `python benchmarks/cartpole.py`

    return median_or_none(values)


def _after_threshold(hist, window: int = 20):
    """Worst and final rolling-``window`` mean return after the first crossing of 475."""
    steps = hist.steps_to_threshold(475, window)
    if steps is None:
        return None, None
    rolling = hist.rolling_returns(window)
    first = hist.episode_end_steps.index(steps)
    return float(rolling[first:].min()), float(rolling[-1])


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algos", nargs="+", default=["reinforce", "trpo", "ppo"], choices=sorted(BUDGETS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--budget", type=int, default=None, help="env-step budget (default: per algorithm)")
    parser.add_argument("--stability", action="store_true",
                        help="train to the full budget and report the worst rolling-20 after reaching 475")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1 is fastest for CartPole)")
    parser.add_argument("--save", action="store_true", help="write rlbook/data/cartpole.json (per-seed values)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    header = f"{'algorithm':<10} {'seed':>4} {'steps to 475':>13} {'wall s':>8}"
    if args.stability:
        header += f" {'min r20 after':>14} {'final r20':>10}"
    print(header)
    print("-" * len(header))
    medians, per_seed = {}, {}
    for algo in args.algos:
        steps_list, walls = [], []
        for seed in args.seeds:
            start = time.perf_counter()
            hist = _train(algo, seed, args.budget or BUDGETS[algo], stop=not args.stability)
            wall = time.perf_counter() - start
            steps = hist.steps_to_threshold(475, 20)
            steps_list.append(steps)
            walls.append(wall)
            row = f"{algo:<10} {seed:>4} {steps if steps is not None else 'never':>13} {wall:>8.1f}"
            if args.stability:
                worst, final = _after_threshold(hist)
                row += f" {worst if worst is not None else float('nan'):>14.1f} {hist.final_rolling_return(20):>10.1f}"
            print(row, flush=True)
        medians[algo] = _median(steps_list)
        per_seed[algo] = {"steps_to_475": steps_list, "wall_s": [round(w, 1) for w in walls],
                          "budget": args.budget or BUDGETS[algo]}
        med = medians[algo]
        print(f"{algo:<10} {'med':>4} {med if med is not None else 'never':>13} {statistics.median(walls):>8.1f}")
    if args.save:
        if args.stability:
            parser.error("--save records steps to 475 of runs that stop there; leave out --stability")
        from rlbook.config import BENCHMARK_RESULTS

        command = ("python benchmarks/cartpole.py --algos " + " ".join(args.algos)
                   + " --seeds " + " ".join(map(str, args.seeds)) + " --save")
        path = BENCHMARK_RESULTS / "cartpole.json"
        record = {"seeds": args.seeds, "threshold": 475, "window": 20, "algos": per_seed, "command": command}
        path.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
        print(f"saved to {path}")
    print(json.dumps(medians))
    return medians


if __name__ == "__main__":
    main()
