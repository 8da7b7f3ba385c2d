"""The GRPO family on the book's own model: a DAPO-style cumulative ablation and the family side by side.

Setting (every run): the scratchpad addition task (``rl.lm.ScratchpadAdditionTask``, 2 digits, half
the supervised labels written with their working, so completion length is the model's choice),
the book's small GPT-2 trained by ``rl.lm.train_sft`` with the seed's ``SFTConfig(seed=s)`` and
``model_seed=s`` (cached under ``runs/checkpoints``), then ``rl.train_grpo`` with 32 prompts × G = 8
per step, a budget of 24 new tokens, and the SAME number of generated completions for every method
(``max_completions``, all sampling rounds counted, so dynamic sampling pays for its resampling).
Every run evaluates on 100 held-out problems every 5 steps (the points of the compute curve) and at
the end on 300 held-out problems with 16 samples each.

Two tables (mean ± std over seeds):

  (a) DAPO's cumulative ablation (Yu et al. 2025, arXiv:2503.14476, Table 1): GRPO (β = 0, one
      minibatch) → + overlong filtering → + clip-higher (ε_high = 0.28) → + soft overlong
      punishment (4-token zone) → + token-level loss → + dynamic sampling. Here "GRPO" takes two
      minibatches per generation (so the ratio moves off 1 and clip-higher can matter).
  (b) The family, each a ``GRPOConfig.recipe`` with the same budget and two minibatches per
      generation: GRPO (β = 0.04), Dr. GRPO, DAPO, RLOO, CISPO, GSPO, MaxRL, DPPO, ProRL (reference
      reset every 10 steps), ScaleRL, PPO with a critic (GAE over tokens).

Columns: held-out pass@1, pass@8, greedy accuracy, mean tokens of right and of wrong sampled
answers, completions generated, wall seconds of the RL phase, and the fitted ScaleRL sigmoid
R(C) = R0 + (A − R0)/(1 + (C_mid/C)^B) of held-out pass@1 against completions generated (A, the
asymptote; C_mid, the completions at half the gain; ``rl.fit_compute_curve`` with R0 the pass@1
before RL). The last line is one JSON object with every mean and std.

    python benchmarks/grpo_variants.py                       # both tables, seeds 0 1 2, 2 workers
    python benchmarks/grpo_variants.py --only family --seeds 0 --budget 5120

Each worker runs one training at a time with one torch thread (results then repeat exactly on a
machine; a different CPU changes float order and so the numbers, not the conclusions).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import time

import numpy as np

COMMON = dict(prompts_per_step=32, group_size=8, max_new_tokens=24, num_steps=1000, eval_every=5,
              eval_num_problems=100, device="cpu")
TWO_MINIBATCHES = dict(num_minibatches=2)
ABLATION = [  # cumulative: each row adds one of DAPO's parts to the row above
    ("GRPO", dict(kl_coef=0.0)),
    ("+ overlong filtering", dict(overlong_filter=True)),
    ("+ clip-higher", dict(clip_eps_high=0.28)),
    ("+ soft overlong punishment", dict(overlong_cache_length=4)),
    ("+ token-level loss", dict(loss_aggregation="token_mean")),
    ("+ dynamic sampling", dict(dynamic_sampling=True)),
]
FAMILY = [("GRPO", "grpo", {}), ("Dr. GRPO", "dr_grpo", {}), ("DAPO", "dapo", {}), ("RLOO", "rloo", {}),
          ("CISPO", "cispo", {}), ("GSPO", "gspo", {}), ("MaxRL", "maxrl", {}), ("DPPO", "dppo", {}),
          ("ProRL", "prorl", dict(ref_reset_every=10)), ("ScaleRL", "scalerl", {}), ("PPO + critic", "ppo", {})]
METRICS = ("pass@1", "pass@8", "greedy", "len_right", "len_wrong", "completions", "seconds", "A", "C_mid")


def setup(seed: int):
    """Task, tokenizer and the seed's supervised model (trained once, then loaded from runs/)."""
    import torch

    import rlbook as rl

    torch.set_num_threads(1)
    task = rl.lm.ScratchpadAdditionTask(num_digits=2, held_out_fraction=0.1, seed=0, scratchpad_prob=0.5)
    tok = rl.lm.build_char_tokenizer(task.alphabet)
    checkpoint = rl.runs_dir() / "checkpoints" / f"bench_scratchpad_sft_seed{seed}"
    policy, _, _ = rl.lm.load_or_train_sft(tok, task, rl.lm.SFTConfig(seed=seed), checkpoint=checkpoint,
                                           model_seed=seed, progress=False)
    return task, tok, policy


def prepare(seed: int) -> dict:
    """Train (or load) the seed's supervised model; return its held-out metrics before RL."""
    task, tok, policy = setup(seed)
    return final_eval(policy, tok, task)


def final_eval(policy, tok, task) -> dict:
    import rlbook as rl

    out = rl.evaluate(policy, tok, task.held_out_problems(300), reward_fn=task.reward, num_samples=16, k=8,
                      max_new_tokens=COMMON["max_new_tokens"], seed=1)
    return {"pass@1": out["pass@1"], "pass@8": out["pass@8"], "greedy": out["greedy_accuracy"],
            "len_right": out["length_correct"], "len_wrong": out["length_wrong"]}


def one_run(job) -> dict:
    """Train one (table, name, seed, config fields) job; return its metrics."""
    table, name, seed, recipe, fields, budget = job
    import rlbook as rl

    task, tok, policy = setup(seed)
    base = dict(COMMON, seed=seed, max_completions=budget, **TWO_MINIBATCHES)
    config = rl.GRPOConfig.recipe(recipe, **base, **fields) if recipe else rl.GRPOConfig(**base, **fields)
    start = time.perf_counter()
    history = rl.train_grpo(policy, tok, task, config, progress=False)
    seconds = time.perf_counter() - start
    result = dict(table=table, name=name, seed=seed, **final_eval(policy, tok, task), seconds=seconds,
                  completions=float(np.sum(history["completions_generated"])))
    compute, reward = np.asarray(history["eval_completions"], float), np.asarray(history["eval_pass@1"], float)
    keep = compute > 0  # the point before any RL is R0, not a point of the curve
    try:
        fit = rl.fit_compute_curve(compute[keep], reward[keep], r0=float(reward[0]))
        result.update(A=fit["asymptote"], C_mid=fit["c_mid"])
    except (ValueError, RuntimeError):  # too few points, or the fit did not converge
        result.update(A=float("nan"), C_mid=float("nan"))
    return result


def jobs(only: str, seeds, budget: int):
    out = []
    if only in ("all", "ablation"):
        fields = {}
        for name, extra in ABLATION:
            fields = {**fields, **extra}
            out += [("ablation", name, s, None, dict(fields), budget) for s in seeds]
    if only in ("all", "family"):
        out += [("family", name, s, recipe, extra, budget) for name, recipe, extra in FAMILY for s in seeds]
    return out


def summarise(results, table: str) -> dict:
    names = list(dict.fromkeys(r["name"] for r in results if r["table"] == table))
    summary = {}
    for name in names:
        rows = [r for r in results if r["table"] == table and r["name"] == name]
        summary[name] = {m: _mean_std([r[m] for r in rows]) for m in METRICS}
    return summary


def _mean_std(values) -> tuple:
    """(mean, std) over the finite values; (None, None) if none is finite (JSON has no NaN)."""
    finite = [v for v in values if v is not None and np.isfinite(v)]
    return (float(np.mean(finite)), float(np.std(finite))) if finite else (None, None)


def print_table(title: str, summary: dict, num_seeds: int) -> None:
    print(f"\n{title} (mean ± std over {num_seeds} seeds)")
    header = (f"{'method':<28}{'pass@1':>14}{'pass@8':>14}{'greedy':>14}{'len right':>12}{'len wrong':>12}"
              f"{'completions':>13}{'seconds':>9}{'A':>13}{'C_mid':>9}")
    print(header)
    print("-" * len(header))
    for name, s in summary.items():
        def cell(m, w, f=".3f"):
            mean, std = s[m]
            return ("n/a" if mean is None else f"{mean:{f}}±{std:{f}}").rjust(w)

        c_mid = "n/a" if s["C_mid"][0] is None else f"{s['C_mid'][0]:.0f}"
        print(f"{name:<28}{cell('pass@1', 14)}{cell('pass@8', 14)}{cell('greedy', 14)}{cell('len_right', 12, '.1f')}"
              f"{cell('len_wrong', 12, '.1f')}{s['completions'][0]:>13.0f}{s['seconds'][0]:>9.0f}{cell('A', 13)}"
              f"{c_mid:>9}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--budget", type=int, default=40 * 256, help="generated completions per run")
    parser.add_argument("--only", choices=["all", "ablation", "family"], default="all")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--save", action="store_true",
                        help="write the results to rlbook/data/grpo_variants.json (what the chapters quote)")
    args = parser.parse_args()
    start = time.perf_counter()
    ctx = mp.get_context("spawn")
    with ctx.Pool(args.workers) as pool:
        before = pool.map(prepare, args.seeds)  # the supervised models, once per seed
        results = pool.map(one_run, jobs(args.only, args.seeds, args.budget), chunksize=1)
    output = {"before": {m: _mean_std([b[m] for b in before]) for m in before[0]}}
    print("before RL (the supervised models):", {m: round(v[0], 3) for m, v in output["before"].items()})
    for table, title in (("ablation", "(a) DAPO's parts added one at a time"), ("family", "(b) The family")):
        summary = summarise(results, table)
        if summary:
            print_table(title, summary, len(args.seeds))
            output[table] = summary
    print(f"\nbudget {args.budget} completions per run; seeds {args.seeds}; total {time.perf_counter() - start:.0f} s")
    record = {"budget": args.budget, "seeds": args.seeds, "seconds": round(time.perf_counter() - start), **output}
    if args.save:
        from rlbook.config import BENCHMARK_RESULTS

        path = BENCHMARK_RESULTS / "grpo_variants.json"
        path.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
        print(f"saved to {path} (chapters 10 and 11 print their tables from it)")
    print(json.dumps(record))


if __name__ == "__main__":
    main()
