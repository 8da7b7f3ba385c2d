"""Chapter 18's multi-teacher benchmark: two specialist teachers distilled into one student, against GRPO, paired seeds.

The task (chapter 10's scratchpad addition, 2 digits) splits into two families on the same train / held-out split
(``rl.lm.ScratchpadAdditionTask(family=...)``): problems whose units digits sum to 10 or more (``units_carry``,
45 % of them) and the others (``no_units_carry``). Two teachers of chapter 18's kind (the student's size, clean
labels that always show the working) are trained once, each on one family only; the student is chapter 10's model,
trained on both. From the student, each condition trains a copy on the whole task for 25 steps of 16 problems × 4
completions (1,600 samples), learning rate 1e-4, the full-vocabulary reverse KL (``reward="full"``):

==================  =========================================================================================
routed              each completion graded by the teacher of its problem's family (``rl.RoutedTeacher``)
carry_teacher       the ``units_carry`` specialist grades every completion
no_carry_teacher    the ``no_units_carry`` specialist grades every completion
generalist          chapter 18's teacher, trained on the whole task, grades every completion (the reference)
grpo                GRPO on the verifier, no teacher (one on-policy update per batch)
==================  =========================================================================================

Each trained student is evaluated on the 200 held-out problems of the whole task (16 samples each, seed 1), its
pass@1 reported on each family's part of them and on all. The seeds pair the conditions (seed s draws the same
first batch of problems in every condition); the teachers and the student are the same in every seed.

Run: ``python benchmarks/distillation_multi_teacher.py --workers 2 --save`` (writes
rlbook/data/distillation_multi_teacher.json).
"""

from __future__ import annotations

import copy
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _runner import run_jobs, save_record, seed_parser, sort_and_tabulate, versions  # noqa: E402
from distillation import COMMON, MAX_NEW, NUM_DIGITS, NUM_EVAL  # noqa: E402
from distillation import models as chapter_models  # noqa: E402

FAMILY_NAMES = ("units_carry", "no_units_carry")
BUDGET = dict(lr=1e-4, num_steps=25)
CONFIGS = {
    "routed": dict(**BUDGET, reward="full"),
    "carry_teacher": dict(**BUDGET, reward="full"),
    "no_carry_teacher": dict(**BUDGET, reward="full"),
    "generalist": dict(**BUDGET, reward="full"),
    "grpo": dict(**BUDGET, distill_coef=0.0, verifier_coef=1.0),
}
CONDITIONS = ["start", *CONFIGS]
FIELDS = ("pass@1", "pass@1_units_carry", "pass@1_no_units_carry")


def models(progress: bool = False):
    """(task, tokenizer, student, generalist, specialists): chapter 18's pair and the two family teachers (2 threads,
    cached under runs/checkpoints, as :func:`distillation.models`)."""
    import rlbook as rl

    task, tok, student, generalist = chapter_models(progress)
    specialists = {}
    for family in FAMILY_NAMES:
        clean = rl.lm.ScratchpadAdditionTask(num_digits=NUM_DIGITS, held_out_fraction=0.1, seed=0, scratchpad_prob=1.0,
                                             family=family)
        specialists[family], _, _ = rl.lm.load_or_train_sft(
            tok, clean, rl.lm.SFTConfig(seed=0, label_noise=0.0),
            checkpoint=rl.runs_dir() / "checkpoints" / f"ch18_teacher_{family}", model_seed=0, num_threads=2,
            progress=progress)
        specialists[family].requires_grad_(False)
    return task, tok, student, generalist, specialists


def teacher_for(name: str, task, generalist, specialists):
    import rlbook as rl

    return {"routed": rl.RoutedTeacher(specialists, task.family_of), "carry_teacher": specialists["units_carry"],
            "no_carry_teacher": specialists["no_units_carry"], "generalist": generalist, "grpo": None}[name]


def measure(model, tok, task) -> dict:
    """Held-out pass@1 and greedy accuracy on all 200 problems and on each family's part of them."""
    import rlbook as rl

    held_out = task.held_out_problems(NUM_EVAL)
    out = {}
    for family in (None, *FAMILY_NAMES):
        problems = [p for p in held_out if family is None or task.family_of(p.prompt) == family]
        result = rl.evaluate(model, tok, problems, reward_fn=task.reward, num_samples=16, k=8, max_new_tokens=MAX_NEW,
                             seed=1)
        suffix = "" if family is None else f"_{family}"
        out[f"pass@1{suffix}"], out[f"greedy{suffix}"] = result["pass@1"], result["greedy_accuracy"]
        out[f"num_problems{suffix}"] = len(problems)
    return out


def one_run(seed: int) -> list:
    """Every condition for one seed (one process, one thread): a list of rows."""
    import torch

    import rlbook as rl

    torch.set_num_threads(1)
    task, tok, student, generalist, specialists = models()
    forbidden = rl.lm.forbidden_token_ids(tok)
    rows = [{"seed": seed, "condition": "start", **measure(student, tok, task), "seconds": 0.0}]
    for name, fields in CONFIGS.items():
        config = rl.DistillationConfig(**COMMON, **fields, seed=seed)
        rl.seed_everything(seed)
        trained = copy.deepcopy(student).requires_grad_(True)
        start = time.perf_counter()
        history = rl.train_distillation(trained, teacher_for(name, task, generalist, specialists), tok, task, config,
                                        forbidden_ids=forbidden, progress=False)
        seconds = time.perf_counter() - start
        trained.requires_grad_(False)
        row = {"seed": seed, "condition": name, **measure(trained, tok, task), "seconds": round(seconds, 2),
               "train_reward": [round(float(v), 5) for v in history.metrics["reward"]]}
        rows.append(row)
    return rows


def main(argv=None) -> dict:
    parser = seed_parser(__doc__, "distillation_multi_teacher", CONDITIONS)
    args = parser.parse_args(argv)
    import torch

    print(f"{versions(args.workers)}; {COMMON}; budget {BUDGET}", flush=True)
    start = time.perf_counter()
    task, tok, _, generalist, specialists = models(progress=True)  # train (or load) the checkpoints before the workers
    torch.set_num_threads(1)
    teachers = {name: measure(model, tok, task) for name, model in
                (("generalist", generalist), *((f"{f}_teacher", m) for f, m in specialists.items()))}
    for name, result in teachers.items():
        print(f"teacher {name:<24} " + "  ".join(f"{k} {v:.3f}" for k, v in result.items() if k.startswith("pass")))

    def show(rows):
        for r in rows:
            print(f"seed {r['seed']} {r['condition']:<17} " + "  ".join(f"{k} {r[k]:.3f}" for k in FIELDS)
                  + f" ({r['seconds']:.0f} s)", flush=True)

    rows = [r for group in run_jobs(one_run, list(args.seeds), args.workers, show) for r in group
            if r["condition"] in args.conditions]
    table = sort_and_tabulate(rows, CONDITIONS, args.conditions, FIELDS, 17)
    wall = time.perf_counter() - start
    print(f"total {wall:.0f} s")
    record = {"seeds": args.seeds, "common": COMMON, "budget": BUDGET, "num_digits": NUM_DIGITS,
              "families": list(FAMILY_NAMES), "configs": CONFIGS, "teachers": teachers,
              "conditions": args.conditions, "runs": rows, "table": table, "wall_s": round(wall, 1),
              "torch": torch.__version__, "machine": platform.machine(),
              "command": "python benchmarks/distillation_multi_teacher.py --seeds " + " ".join(map(str, args.seeds))
                         + f" --workers {args.workers} --save"}
    if args.save:
        save_record("distillation_multi_teacher", record)
    return record


if __name__ == "__main__":
    main()
