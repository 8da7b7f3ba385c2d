"""Chapter 14's precision mismatch over ten seeds: how far bf16 and fp16 samplers move a token's log-probability.

Setting (chapter 14, §14.2): chapter 8's supervised model (2-digit addition, ``SFTConfig(num_steps=800, seed=0)``,
loaded from or saved to ``runs/checkpoints/ch08_sft``), then ``rl.train_grpo`` for 40 steps with
``GRPOConfig(seed=s)`` and one torch thread: the policy "in the middle of training". A
``rl.MismatchedSampler(precision=...)`` (weights and logits rounded to bf16 or fp16, fp32 in between)
draws 8 completions for each of 128 held-out prompts with a generator seeded s + 1, and the trainer
(fp32) scores the same tokens. Recorded per seed and precision, over the sampled tokens of
log ρ = log π − log μ: the largest |log ρ| (the chapter's "largest change"), the mean |log ρ| and
the 1 %-99 % range; and per seed the fp16/bf16 ratios of each. Seed 0 is the chapter's own run.

The ratio of the *mean* |log ρ| is what the mantissas predict: bf16 keeps 8 significant bits and fp16
11, so fp16's relative rounding error is 2⁻³ = 1/8 of bf16's, and log ρ is linear in the logits'
rounding errors at this size. The *largest* change is one token's extreme and moves far more from
run to run.

    python benchmarks/precision_mismatch.py --save   # seeds 0-9; writes rlbook/data/precision_mismatch.json

Runs with one thread repeat exactly on one machine; another CPU changes float order and so the numbers.
"""

from __future__ import annotations

import copy
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _runner import save_record, seed_parser, versions  # noqa: E402

MID_STEPS, NUM_PROBLEMS, NUM_SAMPLES = 40, 128, 8
PRECISIONS = ("bf16", "fp16")


def one_seed(rl, torch, tok, task, sft_policy, seed: int) -> dict:
    """The log-ratio statistics of both precisions at ``seed`` (see the module docstring)."""
    import numpy as np

    from rlbook.algos.grpo_rollouts import sample_kwargs

    forbidden = rl.lm.forbidden_token_ids(tok)
    policy = copy.deepcopy(sft_policy)
    rl.train_grpo(policy, tok, task, rl.GRPOConfig(num_steps=MID_STEPS, seed=seed), progress=False)
    policy.eval().requires_grad_(False)
    problems = task.held_out_problems(NUM_PROBLEMS)
    prompt_ids, prompt_mask = rl.lm.encode_prompts(tok, [p.prompt for p in problems])
    row = {}
    for precision in PRECISIONS:
        out = rl.MismatchedSampler(precision=precision)(
            policy, prompt_ids, prompt_mask, num_samples=NUM_SAMPLES, generator=torch.Generator().manual_seed(seed + 1),
            **sample_kwargs(tok, forbidden, 8, 1.0))
        with torch.no_grad():
            trainer = rl.lm.completion_log_probs(policy, prompt_ids, out.completion_ids, prompt_mask,
                                                 completion_mask=out.completion_mask, forbidden_ids=forbidden)
        s = rl.log_ratio_stats(trainer, out.log_probs, weights=out.completion_mask, quantiles=(0.01, 0.99))
        row[precision] = {"largest": max(abs(s["min"]), abs(s["max"])), "mean_abs": s["mean_abs"],
                          "range_1_99": s["quantiles"][0.99] - s["quantiles"][0.01]}
    row["ratio"] = {k: row["fp16"][k] / row["bf16"][k] for k in row["bf16"]}
    assert np.isfinite(list(row["ratio"].values())).all()
    return row


def main(argv=None) -> dict:
    import numpy as np
    import torch

    import rlbook as rl

    args = seed_parser(__doc__, "precision_mismatch").parse_args(argv)
    print(versions(1), flush=True)
    torch.set_num_threads(1)  # as chapter 14
    start = time.perf_counter()
    task, tok = rl.lm.AdditionTask(num_digits=2, held_out_fraction=0.1, seed=0), rl.lm.build_char_tokenizer()
    sft_policy, _, loaded = rl.lm.load_or_train_sft(tok, task, rl.lm.SFTConfig(num_steps=800, seed=0), progress=False,
                                                    checkpoint=rl.runs_dir() / "checkpoints" / "ch08_sft")
    print("supervised model:", "loaded" if loaded else "trained", flush=True)
    keys = ("largest", "mean_abs", "range_1_99")
    runs = {p: {k: [] for k in keys} for p in (*PRECISIONS, "ratio")}
    print(f"{'seed':>4}" + "".join(f"{p + ' ' + k:>20}" for p in runs for k in keys), flush=True)
    for seed in args.seeds:
        row = one_seed(rl, torch, tok, task, sft_policy, seed)
        for p in runs:
            for k in keys:
                runs[p][k].append(float(row[p][k]))
        print(f"{seed:>4}" + "".join(f"{row[p][k]:>20.5f}" for p in runs for k in keys), flush=True)
    if len(args.seeds) >= 2:
        for k in keys:
            values = np.asarray(runs["ratio"][k])
            print(f"fp16/bf16 {k:<11} mean {values.mean():.4f}  sd {values.std(ddof=1):.4f}  "
                  f"min {values.min():.4f}  max {values.max():.4f}")
    seconds = round(time.perf_counter() - start)
    print(f"{seconds} s")
    record = {"seeds": args.seeds, "mid_steps": MID_STEPS, "num_problems": NUM_PROBLEMS, "num_samples": NUM_SAMPLES,
              "torch": torch.__version__, "seconds": seconds, "runs": runs,
              "command": "python benchmarks/precision_mismatch.py --seeds " + " ".join(map(str, args.seeds)) + " --save"}
    if args.save:
        save_record("precision_mismatch", record)
    return record


if __name__ == "__main__":
    main()
