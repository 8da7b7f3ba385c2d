"""The Echo Trap: masked GRPO that reuses each batch for four optimiser steps, with and without a rollout filter.

Chapter 17's third experiment, on paired seeds. The start is chapter 16's 2-digit warm-up, exactly as in
``agent_credit.py`` (``sft`` there); masked GRPO with GRPO's broadcast credit and the settings of chapter 16 (G = 8
episodes of each of 8 problems a step, AdamW lr 1e-3, clip 0.2, token mean) then trains a copy of it for 200
steps, twice as long as chapters 16 and 17 do elsewhere:

  onepass        one optimiser step per batch (on-policy)
  reuse4         four optimiser steps per batch (``epochs_per_batch`` = 4: PPO's epochs, the later ones clipped)
  reuse4_filter  reuse4, the loss keeping only the 2 of 8 groups with the largest in-group reward spread
                 (``rollout_filter_ratio`` = 0.25: RAGEN's StarPO-S filter, arXiv:2504.20073, §4.1)
  reuse4_small   reuse4 with 2 problems a step (16 episodes): as many groups in the loss as reuse4_filter keeps,
                 chosen by nobody, so the filter's choice and its smaller batch can be told apart

Each is evaluated on the 200 held-out problems as in chapter 16 (sampled, greedy, call frequency, turns,
malformed frequency, digit accuracy); training runs record, per step, the reward, the mean in-group reward
standard deviation, the policy's entropy on the model's tokens, the gradient norm of the step's first optimiser
step, the call and malformed frequencies, and the share of zero-variance groups (``rl.agent_grpo_step``).

    python benchmarks/agent_echo_trap.py --workers 2 --save      # rlbook/data/agent_echo_trap.json
    python benchmarks/agent_echo_trap.py --seeds 1 --conditions reuse4 reuse4_filter

Runs repeat exactly on one machine (one torch thread each); another CPU changes float order and so the numbers.
"""

from __future__ import annotations

import platform
import time

from _runner import run_jobs, save_record, seed_parser, sort_and_tabulate, versions
from agent_credit import FIELDS, NUM_DIGITS, grpo_row, warm_start
from agent_tool_use import GRPO, NUM_DEMOS, TOOL_SHARE, WARMUP_STEPS

NUM_STEPS = 200
ECHO = {"onepass": {"num_steps": NUM_STEPS},
        "reuse4": {"num_steps": NUM_STEPS, "epochs_per_batch": 4},
        "reuse4_filter": {"num_steps": NUM_STEPS, "epochs_per_batch": 4, "rollout_filter_ratio": 0.25},
        "reuse4_small": {"num_steps": NUM_STEPS, "epochs_per_batch": 4, "prompts_per_step": 2}}
CONDITIONS = list(ECHO)
TRACES = ("reward", "reward_std", "entropy", "grad_norm", "call_frequency", "malformed_frequency",
          "zero_variance_groups")
COMMON = (f"small model (2x128, n_positions 64); {NUM_DIGITS}-digit addition; {NUM_DEMOS} demonstrations "
          f"({TOOL_SHARE:.0%} with the tool) for {WARMUP_STEPS} steps, batch 32, SFT lr 3e-3; GRPO {GRPO}, clip 0.2, "
          f"token mean, broadcast credit; settings {ECHO}; eval on 200 problems")


def one_run(seed: int) -> list[dict]:
    """One seed: the warm-up, then a GRPO run from it under each setting."""
    tok, model = warm_start(seed)
    traces = {f"train_{key}": key for key in TRACES}
    return [grpo_row(model, tok, seed, name, setting, traces) for name, setting in ECHO.items()]


def main(argv=None) -> dict:
    parser = seed_parser(__doc__, "agent_echo_trap", CONDITIONS)
    args = parser.parse_args(argv)
    import torch

    print(f"{versions(args.workers)}; {COMMON}", flush=True)
    start = time.perf_counter()

    def show(rows):
        for r in rows:
            print(f"seed {r['seed']} {r['condition']:<14} sampled {r['sampled']:.3f} greedy {r['greedy']:.3f} "
                  f"calls {r['call_frequency']:.2f} malformed {r['malformed_frequency']:.2f} "
                  f"max grad norm {max(r['train_grad_norm']):.1f} ({r['seconds']:.0f} s)", flush=True)

    rows = [r for group in run_jobs(one_run, list(args.seeds), args.workers, show) for r in group
            if r["condition"] in args.conditions]
    table = sort_and_tabulate(rows, CONDITIONS, args.conditions, FIELDS, 14)
    wall = time.perf_counter() - start
    print(f"total {wall:.0f} s")
    record = {"seeds": args.seeds, "common": COMMON, "grpo": GRPO, "echo": ECHO, "num_digits": NUM_DIGITS,
              "conditions": args.conditions, "runs": rows, "table": table, "wall_s": round(wall, 1),
              "torch": torch.__version__, "machine": platform.machine(),
              "command": "python benchmarks/agent_echo_trap.py --seeds " + " ".join(map(str, args.seeds))
                         + f" --workers {args.workers} --save"}
    if args.save:
        save_record("agent_echo_trap", record)
    return record


if __name__ == "__main__":
    main()
