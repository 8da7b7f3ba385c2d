"""Reward shaping across turns: a tool bonus and a format penalty that cancel at γ = 1, under three credit schemes.

Chapter 17's fourth experiment, on paired seeds. The start is chapter 16's 2-digit warm-up, exactly as in
``agent_credit.py`` (``sft`` there). The training environment adds two shaping rewards to the calculator's outcome
(``rl.ShapedRewards``): a format penalty c on every tool-call turn (a turn without an answer) and a tool bonus of
c per call, paid with the episode's last turn. They cancel in every episode's return from its first turn at
γ = 1: potential-based shaping (Ng et al. 1999), which cannot change the best policy. Masked GRPO (chapter 16's
settings: G = 8 episodes of each of 8 problems a step, 100 steps, lr 1e-3, clip 0.2, token mean) then trains a copy
of the start under each of:

  rebn                 ReBN at γ = 1, no shaping (agent_credit's ``rebn``, one configuration)
  rebn_shaped_small    ReBN at γ = 1, c = 0.05
  rebn_shaped          ReBN at γ = 1, c = 0.25
  rebn_shaped_large    ReBN at γ = 1, c = 0.5
  broadcast_shaped     GRPO's broadcast, c = 0.25
  gigpo_shaped         GiGPO at γ = 1, ω = 1, c = 0.25

Each is evaluated on the 200 held-out problems as in chapter 16, on the outcome alone (no shaping): sampled,
greedy, call frequency, turns, malformed frequency, digit accuracy; training runs record their per-step outcome
reward, call frequency and malformed frequency.

    python benchmarks/agent_shaping.py --workers 2 --save      # rlbook/data/agent_shaping.json
    python benchmarks/agent_shaping.py --seeds 0 --conditions rebn rebn_shaped

Runs repeat exactly on one machine (one torch thread each); another CPU changes float order and so the numbers.
"""

from __future__ import annotations

import platform
import time

from _runner import run_jobs, save_record, seed_parser, sort_and_tabulate, versions
from agent_credit import CREDIT, FIELDS, NUM_DIGITS, grpo_row, warm_start
from agent_tool_use import GRPO, NUM_DEMOS, TOOL_SHARE, WARMUP_STEPS, make_env

SHAPING = {"rebn": (CREDIT["rebn"], 0.0),
           "rebn_shaped_small": (CREDIT["rebn"], 0.05),
           "rebn_shaped": (CREDIT["rebn"], 0.25),
           "rebn_shaped_large": (CREDIT["rebn"], 0.5),
           "broadcast_shaped": (CREDIT["broadcast"], 0.25),
           "gigpo_shaped": (CREDIT["gigpo"], 0.25)}
CONDITIONS = list(SHAPING)
COMMON = (f"small model (2x128, n_positions 64); {NUM_DIGITS}-digit addition; {NUM_DEMOS} demonstrations "
          f"({TOOL_SHARE:.0%} with the tool) for {WARMUP_STEPS} steps, batch 32, SFT lr 3e-3; GRPO {GRPO}, clip 0.2, "
          f"token mean; (credit, c) {SHAPING}, format_penalty = tool_bonus = c; eval on 200 problems, outcome only")


def shaped_env(tok, c: float):
    """The training environments: the 2-digit calculator with ``format_penalty = tool_bonus = c``."""
    from rlbook.envs.text import ShapedRewards

    base = make_env(tok, NUM_DIGITS)
    return lambda: ShapedRewards(base(), tool_bonus=c, format_penalty=c)


def one_run(seed: int) -> list[dict]:
    """One seed: the warm-up, then a GRPO run from it under each (credit, shaping) setting."""
    tok, model = warm_start(seed)
    traces = {"train_reward": "outcome", "train_call_frequency": "call_frequency",
              "train_malformed_frequency": "malformed_frequency"}
    return [grpo_row(model, tok, seed, name, credit, traces, train_env=shaped_env(tok, c))
            for name, (credit, c) in SHAPING.items()]


def main(argv=None) -> dict:
    parser = seed_parser(__doc__, "agent_shaping", CONDITIONS)
    args = parser.parse_args(argv)
    import torch

    print(f"{versions(args.workers)}; {COMMON}", flush=True)
    start = time.perf_counter()

    def show(rows):
        for r in rows:
            print(f"seed {r['seed']} {r['condition']:<18} sampled {r['sampled']:.3f} greedy {r['greedy']:.3f} "
                  f"calls {r['call_frequency']:.2f} turns {r['turns_per_episode']:.2f} "
                  f"malformed {r['malformed_frequency']:.2f} ({r['seconds']:.0f} s)", flush=True)

    rows = [r for group in run_jobs(one_run, list(args.seeds), args.workers, show) for r in group
            if r["condition"] in args.conditions]
    table = sort_and_tabulate(rows, CONDITIONS, args.conditions, FIELDS, 18)
    wall = time.perf_counter() - start
    print(f"total {wall:.0f} s")
    record = {"seeds": args.seeds, "common": COMMON, "grpo": GRPO, "num_digits": NUM_DIGITS,
              "shaping": {k: {"credit": v[0], "c": v[1]} for k, v in SHAPING.items()},
              "conditions": args.conditions, "runs": rows, "table": table, "wall_s": round(wall, 1),
              "torch": torch.__version__, "machine": platform.machine(),
              "command": "python benchmarks/agent_shaping.py --seeds " + " ".join(map(str, args.seeds))
                         + f" --workers {args.workers} --save"}
    if args.save:
        save_record("agent_shaping", record)
    return record


if __name__ == "__main__":
    main()
