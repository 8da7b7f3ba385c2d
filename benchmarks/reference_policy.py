"""Chapter 12's reference policy on its one prompt (§12.4–12.5) over ten supervised models.

Sections 12.4 and 12.5 hold the supervised model's distribution over the 1,000 answers to one held-out
prompt as π_ref and compute, exactly, the KL-regularised optimum π* and best-of-N from it. Everything
they say about "the model" is about one training run of chapter 8's supervised model; another machine's
float order trains another one. This benchmark runs those sections from the chapter's source
(``notebooks/src/12_preferences.py``: everything before §12.3's pairs of answers, then §12.4 and §12.5;
no reward model is trained) for ten supervised models, seed s of which is ``SFTConfig(seed=s)`` with
weights initialised from seed s (s = 0 is the chapter's model), and records per seed:

* ``pi_ref_right``: π_ref of the right answer;
* ``bon_kl_level``: the exact KL of best-of-1024 from π_ref, nats (−log π_ref(right) when the right
  answer is the best);
* ``gaps``: E_π*[r] − E_best-of-N[r] at equal KL for N = 2, 4, 8, 16, 32 (reward units).

    python benchmarks/reference_policy.py --workers 2 --save   # seeds 0-9; writes rlbook/data/reference_policy.json

Runs with one thread repeat exactly on one machine; another CPU changes float order and so the numbers.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _runner import exec_chapter, run_jobs, save_record, seed_parser, versions  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CHAPTER = ROOT / "notebooks" / "src" / "12_preferences.py"
SFT_LINES = ('sft_config = rl.lm.SFTConfig(num_steps=rl.by_size(small=800, full=2000), seed=0)',
             'policy, _, loaded = rl.lm.load_or_train_sft(tok, task, sft_config, checkpoint=SFT_CHECKPOINT)')


def chapter_source(seed: int) -> str:
    """The chapter up to §12.3's pairs of answers, then §§12.4–12.5, with the supervised model of ``seed``."""
    text = CHAPTER.read_text(encoding="utf-8")
    marks = ["def sample_answer_pairs", "# ## 12.4 ", "# ## 12.6 "]
    if not all(text.count(m) == 1 for m in marks) or not all(text.count(line) == 1 for line in SFT_LINES):
        raise RuntimeError(f"{CHAPTER.name} changed its sections or its supervised model's lines: update this benchmark")
    at = {m: text.index(m) for m in marks}
    source = text[:at[marks[0]]] + text[at[marks[1]]:at[marks[2]]]
    return (source.replace(SFT_LINES[0], SFT_LINES[0].replace("seed=0)", f"seed={int(seed)})"))
                  .replace(SFT_LINES[1], SFT_LINES[1].replace("checkpoint=SFT_CHECKPOINT)",
                                                              f"checkpoint=None, model_seed={int(seed)}, progress=False)")))


def one_run(seed: int) -> dict:
    start = time.perf_counter()
    namespace = exec_chapter(chapter_source(seed), CHAPTER, "chapter12")
    return {"seed": seed, "pi_ref_right": float(namespace["pi_ref_right"]), "bon_kl_level": float(namespace["model_kl"][-1]),
            "gaps": [float(g) for g in namespace["gaps"]], "seconds": round(time.perf_counter() - start, 1)}


def main(argv=None) -> dict:
    import numpy as np
    import torch

    args = seed_parser(__doc__, "reference_policy").parse_args(argv)
    print(versions(args.workers), flush=True)
    start = time.perf_counter()
    rows = run_jobs(one_run, list(args.seeds), args.workers,
                    lambda r: print(f"seed {r['seed']}: π_ref(right) {r['pi_ref_right']:.3f}, best-of-1024 KL "
                                    f"{r['bon_kl_level']:.3f}, largest gap {max(r['gaps']):.4f} ({r['seconds']:.0f} s)", flush=True))
    rows.sort(key=lambda r: r["seed"])
    record = {"seeds": [r["seed"] for r in rows], "torch": torch.__version__, "workers": args.workers,
              **{key: [r[key] for r in rows] for key in ("pi_ref_right", "bon_kl_level", "gaps")},
              "command": "python benchmarks/reference_policy.py --seeds " + " ".join(map(str, args.seeds))
                         + f" --workers {args.workers} --save"}
    for key in ("pi_ref_right", "bon_kl_level"):
        v = np.asarray(record[key])
        print(f"{key:<14} mean {v.mean():.3f}  sd {v.std(ddof=1) if len(v) > 1 else 0:.3f}  min {v.min():.3f}  max {v.max():.3f}")
    largest = np.asarray([max(g) for g in record["gaps"]])
    print(f"largest gap    mean {largest.mean():.4f}  min {largest.min():.4f}  max {largest.max():.4f}")
    record["seconds"] = round(time.perf_counter() - start)
    print(f"{record['seconds']} s")
    if args.save:
        save_record("reference_policy", record)
    return record


if __name__ == "__main__":
    main()
