"""GRPO and CISPO on a harder task: do their fitted asymptotes separate? (Chapter 11, exercise 6.)

Chapter 11 fits the ScaleRL sigmoid R(C) = R0 + (A − R0)/(1 + (C_mid/C)^B) (Khatri et al. 2025,
arXiv:2510.13786, eq. 1) to held-out pass@1 against completions generated, for GRPO (β = 0.04) and
CISPO on 2-digit scratchpad addition, and finds both asymptotes near 1: the task is too easy to
separate methods by where they stop. This script repeats the experiment on 3-digit problems:

* task: ``rl.lm.ScratchpadAdditionTask(num_digits=3, scratchpad_prob=0.5)``; its completions need up
  to ``max_completion_tokens`` = 30 tokens, so the model's context is 64 (``policy_config(tok,
  n_positions=64)``) and the budget of new tokens is 30;
* supervised start: the book's small GPT-2 trained by ``rl.lm.train_sft`` with chapter 10's recipe
  (``SFTConfig(seed=s)``, 60% noisy labels), one model per seed, cached under ``runs/checkpoints``;
* RL: ``GRPOConfig.recipe("grpo")`` and ``recipe("cispo")``, 32 prompts × G = 8 per step, the same
  budget of generated completions, evaluation on 100 held-out problems every 5 steps; one torch
  thread per run.

    python benchmarks/harder_task.py                 # seeds 0 1, 2 workers
    python benchmarks/harder_task.py --save          # and write rlbook/data/harder_task.json

Prints, per method and seed, the fitted A, C_mid, B and the fit's rmse, and the final held-out pass@1;
the last line is one JSON object with everything (the curves too).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import time

import numpy as np

METHODS = {"GRPO (β = 0.04)": "grpo", "CISPO": "cispo"}


def setup(seed: int):
    import torch

    import rlbook as rl

    torch.set_num_threads(1)
    task = rl.lm.ScratchpadAdditionTask(num_digits=3, held_out_fraction=0.1, seed=0, scratchpad_prob=0.5)
    tok = rl.lm.build_char_tokenizer(task.alphabet)
    checkpoint = rl.runs_dir() / "checkpoints" / f"bench_scratchpad3_sft_seed{seed}"
    config = rl.lm.policy_config(tok, n_positions=64)
    try:
        policy = rl.lm.load_checkpoint(checkpoint, device="cpu")[0]
    except (FileNotFoundError, OSError, ValueError, KeyError, TypeError):
        policy = rl.lm.build_policy(config, seed=seed, device="cpu")
        rl.lm.train_sft(policy, tok, task, rl.lm.SFTConfig(seed=seed, device="cpu"), progress=False)
        rl.lm.save_checkpoint(policy, None, checkpoint)
    return task, tok, policy


def one_run(job) -> dict:
    name, recipe, seed, budget = job
    import rlbook as rl

    task, tok, policy = setup(seed)
    config = rl.GRPOConfig.recipe(recipe, prompts_per_step=32, group_size=8, max_new_tokens=task.max_completion_tokens,
                                  num_steps=1000, max_completions=budget, eval_every=5, eval_num_problems=100,
                                  seed=seed, device="cpu")
    start = time.perf_counter()
    history = rl.train_grpo(policy, tok, task, config, progress=False)
    compute, reward = np.asarray(history["eval_completions"], float), np.asarray(history["eval_pass@1"], float)
    fit = rl.fit_compute_curve(compute[1:], reward[1:], r0=float(reward[0]))
    return dict(name=name, seed=seed, seconds=time.perf_counter() - start, compute=compute.tolist(),
                reward=reward.tolist(), A=fit["asymptote"], C_mid=fit["c_mid"], B=fit["exponent"], rmse=fit["rmse"],
                r0=float(reward[0]), final=float(reward[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--budget", type=int, default=60 * 256, help="generated completions per run")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--save", action="store_true", help="write rlbook/data/harder_task.json")
    args = parser.parse_args()
    start = time.perf_counter()
    ctx = mp.get_context("spawn")
    with ctx.Pool(args.workers) as pool:
        pool.map(setup, args.seeds)  # the supervised models, once per seed
        jobs = [(name, recipe, s, args.budget) for name, recipe in METHODS.items() for s in args.seeds]
        results = pool.map(one_run, jobs, chunksize=1)
    print(f"{'method':<18}{'seed':>5}{'R0':>7}{'final':>7}{'A':>7}{'C_mid':>8}{'B':>6}{'rmse':>7}{'seconds':>9}")
    for r in results:
        print(f"{r['name']:<18}{r['seed']:>5}{r['r0']:>7.3f}{r['final']:>7.3f}{r['A']:>7.3f}{r['C_mid']:>8.0f}"
              f"{r['B']:>6.2f}{r['rmse']:>7.3f}{r['seconds']:>9.0f}")
    record = {"budget": args.budget, "seeds": args.seeds, "seconds": round(time.perf_counter() - start),
              "runs": results}
    if args.save:
        from rlbook.config import BENCHMARK_RESULTS

        path = BENCHMARK_RESULTS / "harder_task.json"
        path.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
        print(f"saved to {path} (chapter 11's solution to exercise 6 prints from it)")
    print(json.dumps(record))


if __name__ == "__main__":
    main()
