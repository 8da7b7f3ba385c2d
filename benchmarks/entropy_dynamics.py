"""Entropy, length and reward over training: the GRPO family, the entropy-management switches and spurious
rewards, on paired seeds (data for the chapter on what RL does to a policy; issue 23).

Setting (every run): chapter 10's scratchpad addition task (2 digits, half the supervised answers show
their working, 24 new tokens), the seed's supervised model (``SFTConfig(seed=s)``, model seed s,
cached under ``runs/checkpoints/bench_scratchpad_sft_seed{s}`` as ``benchmarks/grpo_variants.py``
caches it), then ``rl.train_grpo`` at grpo_variants' common settings (32 prompts × G = 8, two
minibatches, one pass) up to a budget of ``BUDGET`` generated completions; one torch thread. The
conditions, one configuration each:

  grpo_b0                GRPO without a KL penalty (β = 0)
  grpo_b0_clip_higher    the same with DAPO's clip-higher alone (ε_high = 0.28)
  dr_grpo, dapo, cispo, gspo      the published recipes (``GRPOConfig.recipe``)
  grpo_b0_entropy_bonus  grpo_b0 + entropy bonus, ``entropy_coef`` = ``ENTROPY_COEF``
  grpo_b0_clip_cov       grpo_b0 + Clip-Cov (Cui et al. 2025, arXiv:2505.22617, their defaults)
  grpo_b0_kl_cov         grpo_b0 + KL-Cov (same paper)
  grpo_b0_top20_entropy  grpo_b0 trained on the top-20 % highest-entropy tokens only
                         (Wang et al. 2025, arXiv:2506.01939; ``top_entropy_quantile=0.2``)
  random_reward          grpo_b0 on a reward that ignores the answer: Bernoulli(½), seeded
  format_reward          grpo_b0 on the task's format reward alone (Shao et al. 2025, arXiv:2506.10947)
  grpo_b0_mu4            grpo_b0 with four passes over each batch (``num_inner_epochs=4``), where the clip acts
  grpo_b0_mu4_clip_higher, grpo_b0_mu4_kl_cov    the same with clip-higher (ε_high = 0.28) or with KL-Cov
  random_reward_mu4, format_reward_mu4           the spurious rewards at four passes per batch, where the clip
                         acts: the setting in which Shao et al.'s clipping-bias explanation can show

Recorded per run: held-out pass@1, pass@8 and greedy accuracy by the true verifier (300 problems × 16
samples, evaluation seed 1), pass@64 on 100 problems × 64 samples (a curve's far end), and per step the
mean token entropy of the sampled completions, the completion length and the training reward. The
supervised model's own numbers are recorded once per seed (``before``).

    python benchmarks/entropy_dynamics.py --seeds 0 1 2 3 4 5 6 7 8 9 --workers 2 --save   # rlbook/data/entropy_dynamics.json
    python benchmarks/entropy_dynamics.py --seeds 0 --conditions grpo_b0 random_reward
    python benchmarks/entropy_dynamics.py --conditions grpo_b0_mu4 grpo_b0_mu4_clip_higher --workers 2 --save --add

``--add`` merges the runs of the named conditions into the saved record (the other conditions' runs are kept;
the supervised models' ``before`` rows are rerun and must come out the same).

One thread per run; runs repeat exactly on one machine, another CPU changes float order and so the numbers.
"""

from __future__ import annotations

import platform
import time

import numpy as np
from _runner import run_jobs, save_record, seed_parser, sort_and_tabulate, versions
from grpo_variants import setup  # the seed's supervised scratchpad model, cached as grpo_variants caches it

BUDGET = 10240
ENTROPY_COEF = 0.01
COMMON = dict(prompts_per_step=32, group_size=8, max_new_tokens=24, num_steps=1000, num_minibatches=2, device="cpu")
CONDITIONS = {
    "grpo_b0": (None, dict(kl_coef=0.0)),
    "grpo_b0_clip_higher": (None, dict(kl_coef=0.0, clip_eps_high=0.28)),
    "dr_grpo": ("dr_grpo", {}),
    "dapo": ("dapo", {}),
    "cispo": ("cispo", {}),
    "gspo": ("gspo", {}),
    "grpo_b0_entropy_bonus": (None, dict(kl_coef=0.0, entropy_coef=ENTROPY_COEF)),
    "grpo_b0_clip_cov": (None, dict(kl_coef=0.0, entropy_control="clip_cov")),
    "grpo_b0_kl_cov": (None, dict(kl_coef=0.0, entropy_control="kl_cov")),
    "grpo_b0_top20_entropy": (None, dict(kl_coef=0.0, top_entropy_quantile=0.2)),
    "random_reward": (None, dict(kl_coef=0.0)),
    "format_reward": (None, dict(kl_coef=0.0)),
    "grpo_b0_mu4": (None, dict(kl_coef=0.0, num_inner_epochs=4)),
    "grpo_b0_mu4_clip_higher": (None, dict(kl_coef=0.0, num_inner_epochs=4, clip_eps_high=0.28)),
    "grpo_b0_mu4_kl_cov": (None, dict(kl_coef=0.0, num_inner_epochs=4, entropy_control="kl_cov")),
    "random_reward_mu4": (None, dict(kl_coef=0.0, num_inner_epochs=4)),
    "format_reward_mu4": (None, dict(kl_coef=0.0, num_inner_epochs=4)),
}
CURVES = ("entropy", "completion_length", "reward", "pass@1")


class RandomReward:
    """The task with its reward replaced by a coin flip that ignores the answer (seeded, so runs repeat)."""

    def __init__(self, task, seed: int):
        self.task, self.rng = task, np.random.default_rng(10_000 + seed)

    def __getattr__(self, name):
        return getattr(self.task, name)

    def reward(self, prompt, completion):
        return float(self.rng.random() < 0.5)


class FormatReward:
    """The task with its reward replaced by its format reward (well-formed answer: 1, whatever the sum)."""

    def __init__(self, task):
        self.task = task

    def __getattr__(self, name):
        return getattr(self.task, name)

    def reward(self, prompt, completion):
        return float(self.task.format_reward(prompt, completion))


def final_eval(policy, tok, task) -> dict:
    import rlbook as rl

    out = rl.evaluate(policy, tok, task.held_out_problems(300), reward_fn=task.reward, num_samples=16, k=8,
                      max_new_tokens=COMMON["max_new_tokens"], seed=1)
    far = rl.evaluate(policy, tok, task.held_out_problems(100), reward_fn=task.reward, num_samples=64, k=64,
                      max_new_tokens=COMMON["max_new_tokens"], seed=2)
    return {"pass@1": float(out["pass@1"]), "pass@8": float(out["pass@8"]), "greedy": float(out["greedy_accuracy"]),
            "pass@64": float(far["pass@64"]), "pass@1_64": float(far["pass@1"])}


def make_config(name: str, seed: int):
    import rlbook as rl

    recipe, fields = CONDITIONS[name]
    settings = dict(COMMON, max_completions=BUDGET, seed=seed, **fields)
    return rl.GRPOConfig.recipe(recipe, **settings) if recipe else rl.GRPOConfig(**settings)


def one_run(job) -> dict:
    seed, name = job
    import rlbook as rl

    task, tok, policy = setup(seed)
    if name == "before":
        return {"seed": seed, "condition": "before", **final_eval(policy, tok, task)}
    train_task = (RandomReward(task, seed) if name.startswith("random_reward") else
                  FormatReward(task) if name.startswith("format_reward") else task)
    start = time.perf_counter()
    hist = rl.train_grpo(policy, tok, train_task, make_config(name, seed), progress=False)
    seconds = time.perf_counter() - start
    curves = {key: [round(float(v), 5) for v in hist[key]] for key in CURVES}
    return {"seed": seed, "condition": name, **final_eval(policy, tok, task), "curves": curves,
            "final_entropy": float(np.mean(hist["entropy"][-5:])), "final_length": float(np.mean(hist["completion_length"][-5:])),
            "steps": len(hist["entropy"]), "seconds": round(seconds, 1),
            # the share of loss tokens whose ratio the clip cut, over the last pass of each step (how much the clip acts)
            "mean_clip_fraction": float(np.nanmean(hist["clip_fraction"]))}


def table_fields(name: str) -> tuple:
    """The fields the saved table summarises for a condition (the supervised rows have no training curves)."""
    return ("pass@1", "pass@64", "greedy") + (() if name == "before" else ("final_entropy", "final_length"))


def merged(saved: dict, new: dict, conditions: list) -> dict:
    """``saved`` with the runs and table rows of ``conditions`` taken from ``new`` (same seeds and settings; the
    ``before`` rows of both must agree, as they are the same supervised models), the commands joined."""
    if saved["seeds"] != new["seeds"] or saved["budget"] != new["budget"] or saved["common"] != new["common"]:
        raise ValueError("--add needs the saved record's seeds, budget and settings")
    before = lambda rec: [r for r in rec["runs"] if r["condition"] == "before"]  # noqa: E731
    if before(saved) != before(new):
        raise ValueError("the supervised models' numbers differ from the saved record's: another machine or code?")
    order = ["before", *CONDITIONS]
    runs = [r for r in saved["runs"] if r["condition"] not in conditions] + \
           [r for r in new["runs"] if r["condition"] in conditions]
    runs.sort(key=lambda r: (r["seed"], order.index(r["condition"])))
    return {**saved, "conditions": new["conditions"], "runs": runs,
            "table": {**saved["table"], **{c: new["table"][c] for c in conditions}},
            "wall_s": round(saved["wall_s"] + new["wall_s"], 1),
            "command": saved["command"] + "; " + new["command"] + " --add"}


def main(argv=None) -> dict:
    parser = seed_parser(__doc__, "entropy_dynamics", CONDITIONS)
    parser.add_argument("--add", action="store_true", help="with --save: merge these conditions into the saved record")
    args = parser.parse_args(argv)
    import torch

    import rlbook as rl

    print(f"{versions(args.workers)}; budget {BUDGET} completions; {COMMON}", flush=True)
    jobs = [(seed, "before") for seed in args.seeds]
    jobs += [(seed, name) for seed in args.seeds for name in args.conditions]
    start = time.perf_counter()

    def show(r):
        extra = "" if r["condition"] == "before" else (f" entropy {r['final_entropy']:.3f} length {r['final_length']:.1f} "
                                                        f"({r['seconds']:.0f} s)")
        print(f"seed {r['seed']} {r['condition']:<22} pass@1 {r['pass@1']:.3f} pass@64 {r['pass@64']:.3f} "
              f"greedy {r['greedy']:.3f}{extra}", flush=True)

    rows = run_jobs(one_run, jobs, args.workers, show)
    table = sort_and_tabulate(rows, ["before", *CONDITIONS], ["before", *args.conditions], table_fields, 22)
    wall = time.perf_counter() - start
    print(f"total {wall:.0f} s")
    record = {"seeds": args.seeds, "budget": BUDGET, "common": COMMON, "entropy_coef": ENTROPY_COEF,
              "conditions": {k: {"recipe": r, "fields": f} for k, (r, f) in CONDITIONS.items()}, "runs": rows,
              "table": table, "wall_s": round(wall, 1), "torch": torch.__version__, "machine": platform.machine(),
              "command": "python benchmarks/entropy_dynamics.py --seeds " + " ".join(map(str, args.seeds))
                         + f" --workers {args.workers} --save"}
    if args.add:
        record = merged(rl.benchmark_results("entropy_dynamics"), record, args.conditions)
    if args.save:
        save_record("entropy_dynamics", record)
    return record


if __name__ == "__main__":
    main()
