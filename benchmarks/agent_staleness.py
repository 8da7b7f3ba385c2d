"""Asynchronous rollouts: the same masked GRPO with its episodes sampled by a policy k steps old, corrected or not.

Chapter 17's second experiment, on paired seeds. The start is chapter 16's 2-digit warm-up, exactly as in
``agent_credit.py`` (``sft`` there); masked GRPO with GRPO's broadcast credit and the settings of chapter 16 (G = 8
episodes of each of 8 problems a step, 100 steps, AdamW lr 1e-3, clip 0.2, token mean) then trains a copy of it
with its episodes drawn by the policy of k steps before (``AgentGRPOConfig.staleness``; the starting weights for
the first k steps), as a trainer whose rollout workers run k steps ahead of the learner:

  fresh        k = 0: on-policy (this is agent_credit's ``broadcast``, one configuration)
  stale2       k = 2, uncorrected
  stale4       k = 4, uncorrected
  stale4_tis   k = 4, each model token weighted by min(π_θ / π_sampler, 2) (TIS, chapter 14)
  stale4_slow  k = 4, uncorrected, learning rate 2.5e-4 (a quarter)

Each is evaluated on the 200 held-out problems as in chapter 16 (sampled, greedy, call frequency, turns,
malformed frequency, digit accuracy); training runs record their per-step reward, call frequency and share of
zero-variance groups.

    python benchmarks/agent_staleness.py --workers 2 --save      # rlbook/data/agent_staleness.json
    python benchmarks/agent_staleness.py --seeds 0 --conditions fresh stale4

Runs repeat exactly on one machine (one torch thread each); another CPU changes float order and so the numbers.
"""

from __future__ import annotations

import platform
import time

from _runner import run_jobs, save_record, seed_parser, sort_and_tabulate, versions
from agent_credit import FIELDS, NUM_DIGITS, grpo_row, warm_start
from agent_tool_use import GRPO, NUM_DEMOS, TOOL_SHARE, WARMUP_STEPS

ASYNC = {"fresh": {"staleness": 0},
         "stale2": {"staleness": 2},
         "stale4": {"staleness": 4},
         "stale4_tis": {"staleness": 4, "is_correction": "token_truncate", "is_cap": 2.0},
         "stale4_slow": {"staleness": 4, "lr": 2.5e-4}}
CONDITIONS = list(ASYNC)
COMMON = (f"small model (2x128, n_positions 64); {NUM_DIGITS}-digit addition; {NUM_DEMOS} demonstrations "
          f"({TOOL_SHARE:.0%} with the tool) for {WARMUP_STEPS} steps, batch 32, SFT lr 3e-3; GRPO {GRPO}, clip 0.2, "
          f"token mean, broadcast credit; asynchronous settings {ASYNC}; eval on 200 problems")


def one_run(seed: int) -> list[dict]:
    """One seed: the warm-up, then a GRPO run from it under each asynchronous setting."""
    tok, model = warm_start(seed)
    traces = {"train_reward": "reward", "train_call_frequency": "call_frequency",
              "zero_variance_groups": "zero_variance_groups"}
    return [grpo_row(model, tok, seed, name, setting, traces) for name, setting in ASYNC.items()]


def main(argv=None) -> dict:
    parser = seed_parser(__doc__, "agent_staleness", CONDITIONS)
    args = parser.parse_args(argv)
    import torch

    print(f"{versions(args.workers)}; {COMMON}", flush=True)
    start = time.perf_counter()

    def show(rows):
        for r in rows:
            print(f"seed {r['seed']} {r['condition']:<12} sampled {r['sampled']:.3f} greedy {r['greedy']:.3f} "
                  f"calls {r['call_frequency']:.2f} malformed {r['malformed_frequency']:.2f} ({r['seconds']:.0f} s)",
                  flush=True)

    rows = [r for group in run_jobs(one_run, list(args.seeds), args.workers, show) for r in group
            if r["condition"] in args.conditions]
    table = sort_and_tabulate(rows, CONDITIONS, args.conditions, FIELDS, 12)
    wall = time.perf_counter() - start
    print(f"total {wall:.0f} s")
    record = {"seeds": args.seeds, "common": COMMON, "grpo": GRPO, "async": ASYNC, "num_digits": NUM_DIGITS,
              "conditions": args.conditions, "runs": rows, "table": table, "wall_s": round(wall, 1),
              "torch": torch.__version__, "machine": platform.machine(),
              "command": "python benchmarks/agent_staleness.py --seeds " + " ".join(map(str, args.seeds))
                         + f" --workers {args.workers} --save"}
    if args.save:
        save_record("agent_staleness", record)
    return record


if __name__ == "__main__":
    main()
