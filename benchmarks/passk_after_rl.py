"""Does RL expand what the model can solve, or only sharpen it? pass@k up to k = 256 before and after GRPO on
a split that is not at the ceiling (data for the chapter on what RL does to a policy; issue 23).

On chapter 10's 2-digit task every model solves every held-out problem within 64 samples, so pass@k at large
k cannot tell anything apart. This script uses ``harder_task``'s 3-digit setting: the scratchpad task with
3-digit operands (``ScratchpadAdditionTask(num_digits=3, scratchpad_prob=0.5)``, context 64, 30 new tokens)
and the seed's supervised model trained by ``rl.lm.train_sft`` with the book's recipe (cached under
``runs/checkpoints/bench_scratchpad3_sft_seed{s}``). RL: grpo_b0 (``GRPOConfig(kl_coef=0)``, 32 prompts ×
G = 8, two minibatches, one pass) for ``BUDGET`` generated completions, one torch thread. Paired by seed.

Recorded per seed, before and after RL: the number of correct samples out of ``NUM_SAMPLES`` on each of the
first ``NUM_PROBLEMS`` held-out problems (evaluation seed 1), from which any pass@k with k ≤ NUM_SAMPLES
follows by the unbiased estimator (Chen et al. 2021, arXiv:2107.03374, eq. 1), and greedy accuracy.

    python benchmarks/passk_after_rl.py --seeds 0 1 2 3 4 5 6 7 8 9 --workers 2 --save   # rlbook/data/passk_after_rl.json

One thread per run; runs repeat exactly on one machine, another CPU changes float order and so the numbers.
"""

from __future__ import annotations

import platform
import time

import numpy as np
from _runner import run_jobs, save_record, seed_parser, versions
from harder_task import setup  # the seed's supervised 3-digit scratchpad model, cached as harder_task caches it

BUDGET = 30720
NUM_PROBLEMS = 200
NUM_SAMPLES = 256
KS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
COMMON = dict(prompts_per_step=32, group_size=8, max_new_tokens=30, num_steps=1000, num_minibatches=2, kl_coef=0.0,
              device="cpu")


def measure(policy, tok, task) -> dict:
    import rlbook as rl

    out = rl.evaluate(policy, tok, task.held_out_problems(NUM_PROBLEMS), reward_fn=task.reward, num_samples=NUM_SAMPLES,
                      k=NUM_SAMPLES, max_new_tokens=COMMON["max_new_tokens"], seed=1)
    counts = np.asarray(out["num_correct"], int)
    return {"counts": counts.tolist(), "greedy": float(out["greedy_accuracy"]),
            "pass@k": [float(v) for v in rl.pass_at_k_curve(NUM_SAMPLES, counts, KS)]}


def one_run(seed: int) -> dict:
    import rlbook as rl

    task, tok, policy = setup(seed)
    before = measure(policy, tok, task)
    config = rl.GRPOConfig(**dict(COMMON, max_completions=BUDGET, seed=seed))
    start = time.perf_counter()
    hist = rl.train_grpo(policy, tok, task, config, progress=False)
    seconds = time.perf_counter() - start
    return {"seed": seed, "before": before, "after": measure(policy, tok, task), "seconds": round(seconds, 1),
            "steps": len(hist["reward"]), "entropy": [round(float(v), 5) for v in hist["entropy"]]}


def main(argv=None) -> dict:
    parser = seed_parser(__doc__, "passk_after_rl")
    args = parser.parse_args(argv)
    import torch

    print(f"{versions(args.workers)}; budget {BUDGET} completions; {COMMON}; {NUM_PROBLEMS} problems × {NUM_SAMPLES} samples", flush=True)
    start = time.perf_counter()

    def show(r):
        line = "  ".join(f"pass@{k} {b:.3f}→{a:.3f}" for k, b, a in zip(KS, r["before"]["pass@k"], r["after"]["pass@k"])
                         if k in (1, 16, 256))
        print(f"seed {r['seed']}  {line}  ({r['seconds']:.0f} s)", flush=True)

    rows = sorted(run_jobs(one_run, list(args.seeds), args.workers, show), key=lambda r: r["seed"])
    wall = time.perf_counter() - start
    print(f"total {wall:.0f} s")
    record = {"seeds": args.seeds, "budget": BUDGET, "common": COMMON, "num_problems": NUM_PROBLEMS,
              "num_samples": NUM_SAMPLES, "ks": list(KS), "runs": rows, "wall_s": round(wall, 1),
              "torch": torch.__version__, "machine": platform.machine(),
              "command": "python benchmarks/passk_after_rl.py --seeds " + " ".join(map(str, args.seeds))
                         + f" --workers {args.workers} --save"}
    if args.save:
        save_record("passk_after_rl", record)
    return record


if __name__ == "__main__":
    main()
