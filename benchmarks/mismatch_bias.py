"""Chapter 14's exact gradient bias (§14.3) over ten seeds: every sampler, every correction, relative bias and cosine.

Setting: chapter 14's own cells, run from its source (``notebooks/src/14_train_inference_mismatch.py``,
everything before §14.4) with one change per seed s: the 40 GRPO steps that make "the policy in the
middle of training" run with ``GRPOConfig(num_steps=40, seed=s)`` (the chapter's is seed 0), so each
seed is another policy and another set of stale snapshots, as another machine's float order gives a
reader another run. For each sampler of §14.2 (bf16, fp16, T_s = 0.5 and 1.5, top-p 0.8, lags 1, 2, 4,
8) and each estimator (none, is, token_truncate, token_mask, sequence_mask, geometric_mask) the record
keeps the chapter's exact relative bias ‖E ĝ − g*‖/‖g*‖ and the cosine between E ĝ and g*, on the
chapter's 16 held-out prompts over all 1,000 answers (nothing sampled). The chapter's claims are not
checked while it runs here.

    python benchmarks/mismatch_bias.py --workers 2 --save   # seeds 0-9; writes rlbook/data/mismatch_bias.json

Runs with one thread repeat exactly on one machine; another CPU changes float order and so the numbers.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _runner import exec_chapter, run_jobs, save_record, seed_parser, versions  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CHAPTER = ROOT / "notebooks" / "src" / "14_train_inference_mismatch.py"
SECTION_ENDS = "# ## 14.4 Training with a sampler that is not the policy"
GRPO_CALL = "rl.GRPOConfig(num_steps=MID_STEPS, seed=0)"


def chapter_bias(seed: int) -> dict:
    """``bias[sampler][estimator] = (relative bias, cosine)`` of chapter 14's §14.3 with the GRPO run at ``seed``."""
    source = CHAPTER.read_text(encoding="utf-8")
    if SECTION_ENDS not in source or source.count(GRPO_CALL) != 1:
        raise RuntimeError(f"{CHAPTER.name} no longer has {SECTION_ENDS!r} and one {GRPO_CALL!r}: update this benchmark")
    source = source.split(SECTION_ENDS)[0].replace(GRPO_CALL, f"rl.GRPOConfig(num_steps=MID_STEPS, seed={int(seed)})")
    namespace = exec_chapter(source, CHAPTER, "chapter14")
    return {name: {mode: [float(b), float(c)] for mode, (b, c) in row.items()} for name, row in namespace["bias"].items()}


def one_run(seed: int) -> dict:
    start = time.perf_counter()
    bias = chapter_bias(seed)
    return {"seed": seed, "bias": bias, "seconds": round(time.perf_counter() - start, 1)}


def main(argv=None) -> dict:
    import numpy as np
    import torch

    args = seed_parser(__doc__, "mismatch_bias").parse_args(argv)
    print(versions(args.workers), flush=True)
    start = time.perf_counter()
    rows = run_jobs(one_run, list(args.seeds), args.workers,
                    lambda r: print(f"seed {r['seed']}: {r['seconds']:.0f} s; uncorrected bias "
                                    + ", ".join(f"{n} {v['none'][0]:.3f}" for n, v in r["bias"].items()), flush=True))
    rows.sort(key=lambda r: r["seed"])
    samplers = list(rows[0]["bias"])
    modes = list(rows[0]["bias"][samplers[0]])
    bias = {n: {m: [r["bias"][n][m][0] for r in rows] for m in modes} for n in samplers}
    cosine = {n: {m: [r["bias"][n][m][1] for r in rows] for m in modes} for n in samplers}
    print(f"relative bias, mean [min, max] over {len(rows)} seeds")
    print(f"{'sampler':<11}" + "".join(f"{m:>24}" for m in modes))
    for n in samplers:
        print(f"{n:<11}" + "".join(f"{np.mean(bias[n][m]):>9.3f} [{min(bias[n][m]):.3f}, {max(bias[n][m]):.3f}]" for m in modes))
    seconds = round(time.perf_counter() - start)
    print(f"{seconds} s")
    record = {"seeds": [r["seed"] for r in rows], "samplers": samplers, "estimators": modes, "torch": torch.__version__,
              "seconds": seconds, "workers": args.workers, "bias": bias, "cosine": cosine,
              "command": "python benchmarks/mismatch_bias.py --seeds " + " ".join(map(str, args.seeds))
                         + f" --workers {args.workers} --save"}
    if args.save:
        save_record("mismatch_bias", record)
    return record


if __name__ == "__main__":
    main()
