"""GRPO with a sampler that is not the policy, uncorrected and corrected, on paired seeds (chapter 14).

Setting (every run): the supervised model of chapter 9 for seed s (2-digit addition,
``SFTConfig(num_steps=800, seed=s)``, model seed s, cached under
``runs/checkpoints/bench_addition_sft800_seed{s}`` as ``benchmarks/grpo_seeds.py`` caches it), then
``rl.train_grpo`` for ``NUM_STEPS`` steps of 64 prompts × G = 8 (chapter 9's recipe otherwise:
μ = M = 1, β = 0, lr 2e-4), one torch thread. The conditions differ only in ``GRPOConfig``'s sampler
switches (:class:`rlbook.MismatchedSampler`) and its correction (``is_correction``, cap C = ``is_cap``
= 2, the default):

  on_policy        the policy samples its own completions (no mismatch)
  lag{k}           the sampler holds the weights of k steps ago (an asynchronous pipeline), k = 1, 2, 4, 8
  lag8_tis         lag 8, token-level truncated importance sampling: weight min(π_old/π_s, C)
  lag8_mis         lag 8, token-level masking: tokens with π_old/π_s outside [1/C, C] dropped
  lag8_seq_mask    lag 8, sequence-level mask on TRL's product ratio Π_t π_old/π_s
  lag8_geo_mask    lag 8, sequence-level mask on the geometric-mean ratio
  temp0.5          the sampler applies T_s = 0.5; the trainer scores at T = 1
  temp0.5_tis      the same with TIS
  temp1.5          the sampler applies T_s = 1.5
  top_p0.8         the sampler keeps the nucleus p = 0.8; the trainer scores the full distribution
  top_p0.8_tis     the same with TIS
  bf16, fp16       the sampler's weights and logits rounded to bfloat16 / float16

**Paired seeds.** Seed s of every condition starts from the same supervised model and the same
generator (``GRPOConfig.seed = s``), so per-seed differences cancel the shared luck (``rl.compare``).
Recorded per run: held-out pass@1 and greedy accuracy after training (``rl.evaluate`` on
``task.held_out_problems(500)``, 16 samples at T = 1, evaluation seed 1: the trainer's own policy,
not the sampler), the k3 KL to the supervised model at the last step, the mean over steps of the
sampler's mismatch (``sampler_kl``, ``sampler_out_of_band_fraction``) and of the correction's
truncated / masked shares, and per-step curves of the training reward and the mismatch.

    python benchmarks/mismatch_training.py --seeds 0 1 2 3 4 5 6 7 8 9 --workers 2 --save
    python benchmarks/mismatch_training.py --seeds 0 --conditions on_policy lag8 lag8_tis   # a quick look

One thread per run; runs repeat exactly on one machine, another CPU changes float order and so the numbers.
"""

from __future__ import annotations

import platform
import time

from _runner import run_jobs, save_record, seed_parser, versions

NUM_STEPS = 60
NUM_HELD_OUT = 500
CONDITIONS = {
    "on_policy": {},
    "lag1": dict(sampler_lag=1),
    "lag2": dict(sampler_lag=2),
    "lag4": dict(sampler_lag=4),
    "lag8": dict(sampler_lag=8),
    "lag8_tis": dict(sampler_lag=8, is_correction="token_truncate"),
    "lag8_mis": dict(sampler_lag=8, is_correction="token_mask"),
    "lag8_seq_mask": dict(sampler_lag=8, is_correction="sequence_mask"),
    "lag8_geo_mask": dict(sampler_lag=8, is_correction="geometric_mask"),
    "temp0.5": dict(sampler_temperature=0.5),
    "temp0.5_tis": dict(sampler_temperature=0.5, is_correction="token_truncate"),
    "temp1.5": dict(sampler_temperature=1.5),
    "top_p0.8": dict(sampler_top_p=0.8),
    "top_p0.8_tis": dict(sampler_top_p=0.8, is_correction="token_truncate"),
    "bf16": dict(sampler_precision="bf16"),
    "fp16": dict(sampler_precision="fp16"),
}
CURVES = ("reward", "sampler_kl", "sampler_out_of_band_fraction", "is_truncated_fraction", "is_masked_fraction")


def one_run(job) -> dict:
    seed, name = job
    import numpy as np
    import torch

    import rlbook as rl

    torch.set_num_threads(1)
    task, tok = rl.lm.AdditionTask(num_digits=2, held_out_fraction=0.1, seed=0), rl.lm.build_char_tokenizer()
    checkpoint = rl.runs_dir() / "checkpoints" / f"bench_addition_sft800_seed{seed}"
    policy, _, _ = rl.lm.load_or_train_sft(tok, task, rl.lm.SFTConfig(num_steps=800, seed=seed), checkpoint=checkpoint,
                                           model_seed=seed, progress=False)
    start = time.perf_counter()
    hist = rl.train_grpo(policy, tok, task, rl.GRPOConfig(num_steps=NUM_STEPS, seed=seed, **CONDITIONS[name]),
                         progress=False)
    after = rl.evaluate(policy, tok, task.held_out_problems(NUM_HELD_OUT), num_samples=16, k=8, seed=1)

    def mean(key):
        return float(np.nanmean(hist[key])) if key in hist else 0.0

    curves = {key: [round(float(v), 4) for v in hist[key]] for key in CURVES if key in hist}
    return {"seed": seed, "condition": name, "pass@1": float(after["pass@1"]),
            "greedy_accuracy": float(after["greedy_accuracy"]), "final_kl": float(hist["kl"][-1]),
            "max_kl": float(np.max(hist["kl"])), "sampler_kl": mean("sampler_kl"),
            "out_of_band": mean("sampler_out_of_band_fraction"), "truncated": mean("is_truncated_fraction"),
            "masked": mean("is_masked_fraction"), "curves": curves, "wall_s": round(time.perf_counter() - start, 1)}


def main(argv=None) -> dict:
    parser = seed_parser(__doc__, "mismatch_training", CONDITIONS)
    args = parser.parse_args(argv)
    import torch

    import rlbook as rl

    print(f"{versions(args.workers)}; {NUM_STEPS} GRPO steps of 64 prompts × 8, cap C = "
          f"{rl.GRPOConfig().is_cap}; held-out pass@1 on {NUM_HELD_OUT} problems × 16 samples", flush=True)
    jobs = [(seed, name) for seed in args.seeds for name in args.conditions]
    start = time.perf_counter()

    def show(row):
        print(f"seed {row['seed']} {row['condition']:<14} pass@1 {row['pass@1']:.3f} greedy {row['greedy_accuracy']:.3f} "
              f"KL {row['final_kl']:.3f} sampler KL {row['sampler_kl']:.4f} out of band {row['out_of_band']:.3f} "
              f"({row['wall_s']:.0f} s)", flush=True)

    rows = run_jobs(one_run, jobs, args.workers, show)
    rows.sort(key=lambda r: (r["seed"], list(CONDITIONS).index(r["condition"])))
    by = {name: [r for r in rows if r["condition"] == name] for name in args.conditions}
    table, comparisons = {}, {}
    if len(args.seeds) >= 2:
        print(f"{'condition':<15}{'pass@1 [95% CI]':>26}{'greedy':>8}{'final KL':>10}{'sampler KL':>12}")
        for name, rs in by.items():
            table[name] = {key: rl.mean_ci([r[key] for r in rs]) for key in
                           ("pass@1", "greedy_accuracy", "final_kl", "sampler_kl", "out_of_band", "truncated", "masked")}
            c = table[name]["pass@1"]
            print(f"{name:<15}{c[0]:>10.3f} [{c[1]:.3f}, {c[2]:.3f}]{table[name]['greedy_accuracy'][0]:>8.3f}"
                  f"{table[name]['final_kl'][0]:>10.3f}{table[name]['sampler_kl'][0]:>12.4f}")
        pairs = [(name, "on_policy") for name in args.conditions if name != "on_policy"]
        pairs += [(f"{base}_{fix}", base) for base in ("lag8", "temp0.5", "top_p0.8")
                  for fix in ("tis", "mis", "seq_mask", "geo_mask") if f"{base}_{fix}" in by and base in by]
        for a, b in pairs:
            if a in by and b in by:
                c = rl.compare([r["pass@1"] for r in by[a]], [r["pass@1"] for r in by[b]], names=(a, b))
                comparisons[f"{a} - {b}"] = {"mean_diff": c.mean_diff, "ci_low": c.ci_low, "ci_high": c.ci_high,
                                             "verdict": c.verdict, "n": c.n}
                print("pass@1: " + str(c))
    wall = time.perf_counter() - start
    print(f"total {wall:.0f} s")
    record = {"seeds": args.seeds, "num_steps": NUM_STEPS, "num_held_out": NUM_HELD_OUT, "conditions": CONDITIONS,
              "runs": rows, "table": table, "comparisons_pass1": comparisons, "wall_s": round(wall, 1),
              "torch": torch.__version__, "machine": platform.machine(),
              "command": "python benchmarks/mismatch_training.py --seeds " + " ".join(map(str, args.seeds))
                         + f" --workers {args.workers} --save"}
    if args.save:
        save_record("mismatch_training", record)
    return record


if __name__ == "__main__":
    main()
