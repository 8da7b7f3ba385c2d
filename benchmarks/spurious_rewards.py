"""Spurious rewards where the clip acts: a coin-flip reward at one and at four passes per batch, on paired seeds.

Shao et al. (2025, "Spurious rewards: rethinking training signals in RLVR", arXiv:2506.10947) found that a reward
that ignores the answer can still raise a model's accuracy, and explain it by the *clipping bias* of PPO's
objective: with several passes over each batch the clip cuts the updates of low-probability tokens more than of
high-probability ones, so even a zero-mean reward pushes probability towards what the model already prefers
(its mode), lowering the entropy. With one pass per batch (``num_inner_epochs=1``) the ratio stays near 1 and the
clip hardly acts, so that explanation cannot show; chapter 15's first spurious-reward runs are of that kind. This
benchmark runs the coin-flip reward at four passes (``num_inner_epochs=4``), where the clip acts, beside the same
reward at one pass, on the same ten paired seeds of one machine:

  random_reward       Bernoulli(½) reward that ignores the answer (seeded), one pass
  random_reward_mu4   the same at four passes per batch

(The format-only reward is left out: the supervised models already write well-formed answers, so nearly every
group has the same reward, no advantage and no gradient, at any number of passes.)

Setting, as ``benchmarks/entropy_dynamics.py`` (whose conditions and evaluation these are): chapter 10's scratchpad
addition task, the seed's supervised model, ``rl.train_grpo`` with 32 prompts × G = 8, two minibatches, a budget of
10,240 generated completions; one torch thread per run. Recorded per run: held-out pass@1, pass@8, greedy accuracy,
pass@64, the final entropy and length, the curves, and the mean clip fraction (how much the clip acted). The
supervised models' own numbers are the ``before`` rows.

    python benchmarks/spurious_rewards.py --workers 2 --save        # rlbook/data/spurious_rewards.json (about 25 min)
    python benchmarks/spurious_rewards.py --seeds 0 --conditions random_reward_mu4

Runs repeat exactly on one machine; another CPU changes float order and so the numbers (which is why this record
is separate from ``entropy_dynamics.json``: the comparisons it makes are paired within it).
"""

from __future__ import annotations

import platform
import time

from _runner import run_jobs, save_record, seed_parser, sort_and_tabulate, versions
from entropy_dynamics import BUDGET, COMMON, one_run, table_fields

CONDITIONS = ["random_reward", "random_reward_mu4"]


def main(argv=None) -> dict:
    parser = seed_parser(__doc__, "spurious_rewards", CONDITIONS)
    args = parser.parse_args(argv)
    import torch

    print(f"{versions(args.workers)}; budget {BUDGET} completions; {COMMON}", flush=True)
    jobs = [(seed, "before") for seed in args.seeds] + [(seed, name) for seed in args.seeds for name in args.conditions]
    start = time.perf_counter()

    def show(r):
        extra = "" if r["condition"] == "before" else (f" entropy {r['final_entropy']:.3f} clip {r['mean_clip_fraction']:.4f}"
                                                        f" ({r['seconds']:.0f} s)")
        print(f"seed {r['seed']} {r['condition']:<18} pass@1 {r['pass@1']:.3f} pass@64 {r['pass@64']:.3f} "
              f"greedy {r['greedy']:.3f}{extra}", flush=True)

    rows = run_jobs(one_run, jobs, args.workers, show)
    table = sort_and_tabulate(rows, ["before", *CONDITIONS], ["before", *args.conditions],
                              lambda name: table_fields(name) + (() if name == "before" else ("mean_clip_fraction",)), 20)
    wall = time.perf_counter() - start
    print(f"total {wall:.0f} s")
    record = {"seeds": args.seeds, "budget": BUDGET, "common": COMMON, "conditions": args.conditions, "runs": rows,
              "table": table, "wall_s": round(wall, 1), "torch": torch.__version__, "machine": platform.machine(),
              "command": "python benchmarks/spurious_rewards.py --seeds " + " ".join(map(str, args.seeds))
                         + f" --workers {args.workers} --save"}
    if args.save:
        save_record("spurious_rewards", record)
    return record


if __name__ == "__main__":
    main()
