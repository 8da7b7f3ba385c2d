"""Chapter 18's benchmark: on-policy distillation against SFT on the teacher's samples and GRPO, over paired seeds.

One teacher–student pair, trained once (the checkpoints chapter 10 and chapter 18 write under runs/checkpoints):

* student: chapter 10's supervised scratchpad model (2-digit addition; labels with the working half of the
  time and a one-digit mistake in 60 % of answers): greedy accuracy high, sampled accuracy (pass@1) low;
* teacher: the same architecture trained on clean labels that always show the working.

From the student, each condition trains a copy with P = 16 problems × G = 4 samples per step (64 sampled
completions per step in every condition; the teacher samples them for ``sequence_kd``, the student for the
others), then evaluates it on 200 held-out problems (16 samples each, seed 1), and measures its reverse KL to
the teacher on its own completions and on the teacher's (``rl.prefix_divergence``):

==============  ===========================================================================================
sequence_kd     SFT on the teacher's samples (sequence-level KD), token mean
k1              on-policy distillation, sampled k1 reward r_t = log π_T − log π_θ, each token its own (γ = 0)
full_kl         on-policy distillation, full-vocabulary reverse KL(π_θ ‖ π_T) at every position
grpo            GRPO on the verifier (one on-policy update per batch)
grpo_k1         GRPO + 0.1 · k1 reward per token
k1_fast         ``k1`` at 10× the learning rate, 4× the steps
full_kl_fast    ``full_kl`` at 10× the learning rate, 4× the steps
==============  ===========================================================================================

The seeds pair the conditions: seed s draws the same first batch of problems in every condition and the
same evaluation problems; the teacher and the student are the same in every seed (the comparison is over
the training randomness of one pair).

Run: ``python benchmarks/distillation.py --workers 2 --save`` (writes rlbook/data/distillation.json).
"""

from __future__ import annotations

import copy
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _runner import run_jobs, save_record, seed_parser, sort_and_tabulate, versions  # noqa: E402

NUM_DIGITS = 2
MAX_NEW = 24
COMMON = dict(max_new_tokens=MAX_NEW, prompts_per_step=16, samples_per_prompt=4, temperature=1.0)
BUDGET = dict(lr=1e-4, num_steps=25)
FAST = dict(lr=1e-3, num_steps=100)
CONFIGS = {
    "sequence_kd": ("sequence_kd", dict(**BUDGET)),
    "k1": ("on_policy", dict(**BUDGET, reward="sampled")),
    "full_kl": ("on_policy", dict(**BUDGET, reward="full")),
    "grpo": ("on_policy", dict(**BUDGET, distill_coef=0.0, verifier_coef=1.0)),
    "grpo_k1": ("on_policy", dict(**BUDGET, reward="sampled", distill_coef=0.1, verifier_coef=1.0)),
    "k1_fast": ("on_policy", dict(**FAST, reward="sampled")),
    "full_kl_fast": ("on_policy", dict(**FAST, reward="full")),
}
CONDITIONS = ["start", *CONFIGS]
NUM_EVAL = 200
FIELDS = ("pass@1", "greedy", "own_kl", "teacher_prefix_kl")
TRAIN_METRICS = ("reward", "reverse_kl", "k1_reward", "k1_reward_p01", "grad_norm", "length", "loss")


def models(progress: bool = False):
    """(task, tokenizer, student, teacher): the chapter-10 student and the chapter-18 teacher (trained once, cached).

    Both are trained with 2 torch threads, as the chapters train them: the thread count is part of a checkpoint's
    fingerprint (it changes float sums), so a worker asking with 1 thread would retrain instead of loading."""
    threads = 2
    import rlbook as rl

    task = rl.lm.ScratchpadAdditionTask(num_digits=NUM_DIGITS, held_out_fraction=0.1, seed=0, scratchpad_prob=0.5)
    tok = rl.lm.build_char_tokenizer(task.alphabet)
    student, _, _ = rl.lm.load_or_train_sft(tok, task, rl.lm.SFTConfig(seed=0),
                                            checkpoint=rl.runs_dir() / "checkpoints" / "ch10_scratchpad_sft",
                                            model_seed=0, num_threads=threads, progress=progress)
    clean = rl.lm.ScratchpadAdditionTask(num_digits=NUM_DIGITS, held_out_fraction=0.1, seed=0, scratchpad_prob=1.0)
    teacher, _, _ = rl.lm.load_or_train_sft(tok, clean, rl.lm.SFTConfig(seed=0, label_noise=0.0),
                                            checkpoint=rl.runs_dir() / "checkpoints" / "ch18_teacher",
                                            model_seed=0, num_threads=threads, progress=progress)
    for model in (student, teacher):
        model.requires_grad_(False)
    return task, tok, student, teacher


def config_for(name: str, seed: int):
    """The rl.DistillationConfig of condition ``name`` (not "start") for ``seed``, and its method."""
    import rlbook as rl

    method, fields = CONFIGS[name]
    return method, rl.DistillationConfig(**COMMON, **fields, seed=seed)


def measure(student, teacher, tok, task, seed: int) -> dict:
    """Held-out pass@1 / greedy accuracy / mean length, and the reverse KL to the teacher on both models' prefixes."""
    import torch

    import rlbook as rl

    held_out = task.held_out_problems(NUM_EVAL)
    result = rl.evaluate(student, tok, held_out, reward_fn=task.reward, num_samples=16, k=8, max_new_tokens=MAX_NEW,
                         seed=1)
    forbidden = rl.lm.forbidden_token_ids(tok)
    prompts = [p.prompt for p in held_out]
    divergence = {}
    for where, sampler in (("own", student), ("teacher_prefix", teacher)):
        divergence[where] = rl.prefix_divergence(student, teacher, tok, prompts, sampler, num_samples=4,
                                                 max_new_tokens=MAX_NEW, generator=torch.Generator().manual_seed(2),
                                                 forbidden_ids=forbidden)
    return {"pass@1": result["pass@1"], "greedy": result["greedy_accuracy"], "pass@8": result["pass@8"],
            "length": (result["length_correct"] * result["pass@1"] + result["length_wrong"] * (1 - result["pass@1"]))
            if result["pass@1"] < 1 else result["length_correct"],
            "own_kl": divergence["own"]["sequence_kl"], "teacher_prefix_kl": divergence["teacher_prefix"]["sequence_kl"],
            "own_kl_by_position": [round(float(x), 6) for x in divergence["own"]["by_position"]],
            "teacher_prefix_kl_by_position": [round(float(x), 6) for x in divergence["teacher_prefix"]["by_position"]]}


def one_run(seed: int) -> list:
    """Every condition for one seed (one process, one thread): a list of rows."""
    import torch

    import rlbook as rl

    torch.set_num_threads(1)
    task, tok, student, teacher = models()
    forbidden = rl.lm.forbidden_token_ids(tok)
    rows = [{"seed": seed, "condition": "start", **measure(student, teacher, tok, task, seed), "seconds": 0.0}]
    for name in CONFIGS:
        method, config = config_for(name, seed)
        rl.seed_everything(seed)
        trained = copy.deepcopy(student).requires_grad_(True)
        start = time.perf_counter()
        history = rl.train_distillation(trained, teacher, tok, task, config, method=method, forbidden_ids=forbidden,
                                        progress=False)
        seconds = time.perf_counter() - start
        trained.requires_grad_(False)
        row = {"seed": seed, "condition": name, **measure(trained, teacher, tok, task, seed), "seconds": round(seconds, 2)}
        for key in TRAIN_METRICS:
            if key in history.metrics:
                row["train_" + key] = [round(float(v), 5) for v in history.metrics[key]]
        rows.append(row)
    return rows


def main(argv=None) -> dict:
    parser = seed_parser(__doc__, "distillation", CONDITIONS)
    args = parser.parse_args(argv)
    import torch

    print(f"{versions(args.workers)}; {COMMON}; budget {BUDGET}; fast {FAST}", flush=True)
    start = time.perf_counter()
    models(progress=True)  # train (or load) the two checkpoints once, before the workers start

    def show(rows):
        for r in rows:
            print(f"seed {r['seed']} {r['condition']:<13} pass@1 {r['pass@1']:.3f} greedy {r['greedy']:.3f} "
                  f"own KL {r['own_kl']:.2f} teacher-prefix KL {r['teacher_prefix_kl']:.2f} ({r['seconds']:.0f} s)",
                  flush=True)

    rows = [r for group in run_jobs(one_run, list(args.seeds), args.workers, show) for r in group
            if r["condition"] in args.conditions]
    table = sort_and_tabulate(rows, CONDITIONS, args.conditions, FIELDS, 13)
    wall = time.perf_counter() - start
    print(f"total {wall:.0f} s")
    record = {"seeds": args.seeds, "common": COMMON, "budget": BUDGET, "fast": FAST, "num_digits": NUM_DIGITS,
              "configs": {name: {"method": m, **f} for name, (m, f) in CONFIGS.items()},
              "conditions": args.conditions, "runs": rows, "table": table, "wall_s": round(wall, 1),
              "torch": torch.__version__, "machine": platform.machine(),
              "command": "python benchmarks/distillation.py --seeds " + " ".join(map(str, args.seeds))
                         + f" --workers {args.workers} --save"}
    if args.save:
        save_record("distillation", record)
    return record


if __name__ == "__main__":
    main()
