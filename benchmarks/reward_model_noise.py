"""Chapter 12's reward models over ten paired seeds: label noise (T = 3 against T = 0) and data (1,600 against 25).

Setting: chapter 12's own setup, run from its source (``notebooks/src/12_preferences.py``, every cell
before §12.3's "Accuracy against data and noise"): chapter 8's supervised model (loaded from or saved
to ``runs/checkpoints/ch08_sft``), its 6,000 training prompts and 1,200 held-out prompts with two
sampled answers each, the gold reward (12.1) and Bradley–Terry labels at temperature T. For each seed
s and each condition (N, T) in {25, 1600} × {0, 3}, the chapter's loop body: the first N pairs of
``torch.randperm`` under seed s, labels at T drawn with seed s, a reward model from the supervised
model trained by ``rl.lm.train_reward_model`` (100 steps of 32 pairs, lr 1e-3, seed s), and its
held-out pair accuracy against the gold order.

**Paired seeds.** At one seed the four conditions share the subset order and the minibatch seed; the
two temperatures at one N share the pairs and differ only in their labels. Seed 0 is the chapter's
own run.

    python benchmarks/reward_model_noise.py --save   # seeds 0-9; writes rlbook/data/reward_model_noise.json

Runs with one thread repeat exactly on one machine; another CPU changes float order and so the numbers.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _runner import exec_chapter, save_record, seed_parser, versions  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CHAPTER = ROOT / "notebooks" / "src" / "12_preferences.py"
SETUP_ENDS = "# **Accuracy against data and noise.**"
SIZES, TEMPERATURES = (25, 1600), (0.0, 3.0)
RM_CONFIG = dict(num_steps=100, batch_size=32, lr=1e-3)  # the chapter's at the small size


def chapter_setup() -> dict:
    """The namespace of chapter 12 after its setup cells (executed from the chapter's source)."""
    source = CHAPTER.read_text(encoding="utf-8")
    if SETUP_ENDS not in source:
        raise RuntimeError(f"{CHAPTER.name} no longer has the section {SETUP_ENDS!r}: update this benchmark")
    return exec_chapter(source.split(SETUP_ENDS)[0], CHAPTER, "chapter12", quiet=False)


def main(argv=None) -> dict:
    import torch

    import rlbook as rl

    args = seed_parser(__doc__, "reward_model_noise").parse_args(argv)
    print(versions(1), flush=True)
    start = time.perf_counter()
    ch = chapter_setup()
    torch.set_num_threads(1)
    train_pairs, test_pairs = ch["train_pairs"], ch["test_pairs"]
    test_chosen, test_rejected = ch["test_chosen"], ch["test_rejected"]
    accuracy = {f"N={n},T={t:g}": [] for n in SIZES for t in TEMPERATURES}
    print(f"{'seed':>4}" + "".join(f"{k:>16}" for k in accuracy), flush=True)
    for seed in args.seeds:
        row = []
        for n in SIZES:
            for temperature in TEMPERATURES:
                subset = torch.randperm(len(train_pairs[0]), generator=torch.Generator().manual_seed(seed))[:n].tolist()
                pairs = (tuple([column[i] for i in subset] for column in train_pairs[:3])
                         + tuple(column[subset] for column in train_pairs[3:]))
                chosen, rejected, _ = ch["label_pairs"](pairs, temperature, seed)
                reward_model = rl.lm.build_reward_model(ch["policy"])
                rl.lm.train_reward_model(reward_model, ch["tok"], pairs[0], chosen, rejected,
                                         rl.lm.RewardModelConfig(seed=seed, **RM_CONFIG), progress=False)
                acc = rl.lm.reward_model_accuracy(reward_model, ch["tok"], test_pairs[0], test_chosen, test_rejected)
                accuracy[f"N={n},T={temperature:g}"].append(acc)
                row.append(acc)
        print(f"{seed:>4}" + "".join(f"{a:>16.4f}" for a in row), flush=True)
    comparisons = {}
    if len(args.seeds) >= 2:
        for n in SIZES:
            comparisons[f"noise at N={n}"] = rl.compare(accuracy[f"N={n},T=3"], accuracy[f"N={n},T=0"],
                                                        names=(f"N={n},T=3", f"N={n},T=0"))
        for t in TEMPERATURES:
            comparisons[f"data at T={t:g}"] = rl.compare(accuracy[f"N=1600,T={t:g}"], accuracy[f"N=25,T={t:g}"],
                                                         names=(f"N=1600,T={t:g}", f"N=25,T={t:g}"))
        for name, c in comparisons.items():
            print(f"{name:<14}", c)
    seconds = round(time.perf_counter() - start)
    print(f"{seconds} s")
    record = {"seeds": args.seeds, "sizes": list(SIZES), "temperatures": list(TEMPERATURES), "rm_config": RM_CONFIG,
              "torch": torch.__version__, "seconds": seconds, "accuracy": accuracy,
              "command": "python benchmarks/reward_model_noise.py --seeds " + " ".join(map(str, args.seeds)) + " --save"}
    if args.save:
        save_record("reward_model_noise", record)
    return record


if __name__ == "__main__":
    main()
