"""The GRPO family on the book's own model: DAPO's parts one at a time, the family side by side, and
the confounds separated, over paired seeds with 95 % confidence intervals.

Setting (every run): the scratchpad addition task (``rl.lm.ScratchpadAdditionTask``, 2 digits, half
the supervised labels written with their working, so completion length is the model's choice),
the book's small GPT-2 trained by ``rl.lm.train_sft`` with the seed's ``SFTConfig(seed=s)`` and
``model_seed=s`` (cached under ``runs/checkpoints``), then ``rl.train_grpo`` with 32 prompts × G = 8
per step, two minibatches of whole groups per generation (so the ratio moves off 1 and the clip can
act), a budget of 24 new tokens, and the SAME number of generated completions for every method
(``max_completions``, all sampling rounds counted, so dynamic sampling pays for its resampling; a
step is never cut, so a method that resamples may end up to one step past the budget, which the
"completions" column shows).

**Paired seeds.** Seed k of every configuration starts from the same supervised model (seed k),
draws its first prompts from the same generator (``GRPOConfig.seed = k``) and is evaluated on the
same held-out problems with the same sampling seed, so per-seed differences cancel the luck that
methods share (``rl.compare``). The JSON keeps every per-seed value.

**One name, one configuration** (``CONFIGS`` below; fields on top of the shared settings):

  DAPO's cumulative ablation (Yu et al. 2025, arXiv:2503.14476, Table 1), from GRPO at β = 0:
    grpo_b0 → dapo_1_overlong_filter → dapo_2_clip_higher (ε_high = 0.28) → dapo_3_soft_overlong
    (4-token zone) → dapo_4_token_mean → dapo (+ dynamic sampling: the DAPO recipe itself)
  The family, each a ``GRPOConfig.recipe``: grpo_b004 (GRPO's β = 0.04), dr_grpo, dapo, rloo, cispo,
    gspo, maxrl, dppo, prorl_reset10 (reference reset every 10 steps), scalerl, ppo_critic_b004
  Confounds separated: grpo_b0_no_std and grpo_b0_fixed_length (Dr. GRPO's two changes one at a
    time), grpo_b0_token_mean (GRPO at CISPO's β and aggregation, so CISPO vs it isolates the loss).

Columns: held-out pass@1, pass@8, greedy accuracy, mean tokens of right and of wrong sampled answers
(300 problems × 16 samples), completions generated, wall seconds of the RL phase, and the fitted
ScaleRL sigmoid R(C) = R0 + (A − R0)/(1 + (C_mid/C)^B) of held-out pass@1 (100 problems × 8 samples,
evaluated at steps 1, 2, 3 and every 5th) against completions generated, per seed (A, the asymptote;
C_mid, the completions at half the gain; ``rl.fit_compute_curve`` with R0 the pass@1 before RL).
From each run's training logs also its mean clip fraction (the share of loss tokens whose gradient the
trust region zeroed; over all steps and over the last 10), its share of completions cut at the token
budget and its share of groups with no reward variance (``print_logged``). Each cell is the mean over
seeds with its 95 % interval (Student t for the metrics, BCa bootstrap
for A and C_mid). C_mid is "not identified" unless every seed's fit converged, no seed's A sits at
its bound, and C_mid's interval lies inside the evaluated range of compute (an interval outside it
is an extrapolation).

    python benchmarks/grpo_variants.py --seeds 0 1 2 3 4 5 6 7 8 9 --save      # what the chapters print
    python benchmarks/grpo_variants.py --only grpo_b0 cispo --seeds 0 1 --budget 5120

Each worker runs one training at a time with one torch thread (results then repeat exactly on a
machine; a different CPU changes float order and so the numbers). Finished runs are appended to
``runs/grpo_variants_runs.jsonl`` as they complete, and ``--resume`` reuses the ones that match.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import time

import numpy as np

COMMON = dict(prompts_per_step=32, group_size=8, max_new_tokens=24, num_steps=1000, eval_every=5, eval_steps=(1, 2, 3),
              eval_num_problems=100, num_minibatches=2, device="cpu")
_B0 = dict(kl_coef=0.0)
_ABLATION_STEPS = [  # DAPO's parts, added one at a time to GRPO at β = 0
    ("dapo_1_overlong_filter", dict(overlong_filter=True)),
    ("dapo_2_clip_higher", dict(clip_eps_high=0.28)),
    ("dapo_3_soft_overlong", dict(overlong_cache_length=4)),
    ("dapo_4_token_mean", dict(loss_aggregation="token_mean")),
]
# name -> (recipe or None, fields on top of COMMON and the recipe). One name, one configuration.
CONFIGS = {"grpo_b0": (None, _B0)}
_fields = dict(_B0)
for _name, _extra in _ABLATION_STEPS:
    _fields = {**_fields, **_extra}
    CONFIGS[_name] = (None, dict(_fields))
CONFIGS.update({
    "dapo": ("dapo", {}),  # = dapo_4_token_mean + dynamic sampling (checked in check_configs)
    "grpo_b004": ("grpo", {}),
    "dr_grpo": ("dr_grpo", {}),
    "rloo": ("rloo", {}),
    "cispo": ("cispo", {}),
    "gspo": ("gspo", {}),
    "maxrl": ("maxrl", {}),
    "dppo": ("dppo", {}),
    "prorl_reset10": ("prorl", dict(ref_reset_every=10)),
    "scalerl": ("scalerl", {}),
    "ppo_critic_b004": ("ppo", {}),
    "grpo_b0_no_std": (None, dict(_B0, advantage_estimator="dr_grpo")),
    "grpo_b0_fixed_length": (None, dict(_B0, loss_aggregation="fixed_length_mean")),
    "grpo_b0_token_mean": (None, dict(_B0, loss_aggregation="token_mean")),
})
ABLATION = ["grpo_b0"] + [name for name, _ in _ABLATION_STEPS] + ["dapo"]
FAMILY = ["grpo_b0", "grpo_b004", "dr_grpo", "dapo", "rloo", "cispo", "gspo", "maxrl", "dppo", "prorl_reset10",
          "scalerl", "ppo_critic_b004"]
CONFOUNDS = ["grpo_b0", "grpo_b0_no_std", "grpo_b0_fixed_length", "dr_grpo", "grpo_b0_token_mean", "cispo"]
METRICS = ("pass@1", "pass@8", "greedy", "len_right", "len_wrong", "completions", "seconds", "A", "C_mid",
           "clip_fraction", "clip_fraction_last10", "truncated_fraction", "zero_variance_groups")
# Per-run means of the per-step training logs (``rl.train_grpo``'s History; steps without an update skipped):
# clip_fraction, the share of loss tokens whose gradient the trust region zeroed (PPO's clip, GSPO's sequence
# clip, DPPO's mask; for CISPO the share whose weight was clipped), last pass of each step, and its mean over
# the last 10 steps; truncated_fraction, the sampled completions that hit the 24-token budget without EOS;
# zero_variance_groups, the sampled groups whose G rewards are all equal (no policy-gradient signal).
_LOGGED = {"clip_fraction": "clip_fraction", "truncated_fraction": "truncated_fraction",
           "zero_variance_groups": "frac_zero_variance_groups"}
RESULTS_LOG = "grpo_variants_runs.jsonl"


def make_config(name: str, seed: int, budget: int):
    """The ``GRPOConfig`` that ``name`` means, for one seed and budget."""
    import rlbook as rl

    recipe, fields = CONFIGS[name]
    base = dict(COMMON, seed=seed, max_completions=budget)
    return rl.GRPOConfig.recipe(recipe, **base, **fields) if recipe else rl.GRPOConfig(**base, **fields)


def check_configs() -> None:
    """Every name is a distinct configuration, and the ablation's last step is the DAPO recipe."""
    import dataclasses

    import rlbook as rl

    configs = {name: dataclasses.asdict(make_config(name, 0, 10240)) for name in CONFIGS}
    seen = {}
    for name, c in configs.items():
        key = json.dumps(c, sort_keys=True, default=str)
        if key in seen:
            raise AssertionError(f"{name} and {seen[key]} are the same configuration under two names")
        seen[key] = name
    last = dataclasses.asdict(rl.GRPOConfig(**dict(COMMON, seed=0, max_completions=10240),
                                            **CONFIGS["dapo_4_token_mean"][1], dynamic_sampling=True))
    if last != configs["dapo"]:
        raise AssertionError("dapo_4_token_mean + dynamic sampling must be the DAPO recipe")


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
    return dict(seed=seed, **final_eval(policy, tok, task))


def final_eval(policy, tok, task) -> dict:
    import rlbook as rl

    out = rl.evaluate(policy, tok, task.held_out_problems(300), reward_fn=task.reward, num_samples=16, k=8,
                      max_new_tokens=COMMON["max_new_tokens"], seed=1)
    return {"pass@1": out["pass@1"], "pass@8": out["pass@8"], "greedy": out["greedy_accuracy"],
            "len_right": out["length_correct"], "len_wrong": out["length_wrong"]}


def one_run(job) -> dict:
    """Train one (name, seed, budget) job; return its metrics and its evaluation curve."""
    name, seed, budget = job
    import rlbook as rl

    task, tok, policy = setup(seed)
    config = make_config(name, seed, budget)
    start = time.perf_counter()
    history = rl.train_grpo(policy, tok, task, config, progress=False)
    seconds = time.perf_counter() - start
    compute, reward = np.asarray(history["eval_completions"], float), np.asarray(history["eval_pass@1"], float)
    result = dict(name=name, seed=seed, budget=budget, **final_eval(policy, tok, task), seconds=seconds,
                  completions=float(np.sum(history["completions_generated"])),
                  curve=[compute.tolist(), reward.tolist()])
    for key, logged in _LOGGED.items():
        series = np.asarray(history[logged], float)
        result[key] = float(np.nanmean(series))
    clip = np.asarray(history["clip_fraction"], float)
    result["clip_fraction_last10"] = float(np.nanmean(clip[np.isfinite(clip)][-10:]))
    keep = compute > 0  # the point before any RL is R0, not a point of the curve
    try:
        fit = rl.fit_compute_curve(compute[keep], reward[keep], r0=float(reward[0]))
        result.update(A=fit["asymptote"], C_mid=fit["c_mid"])
    except (ValueError, RuntimeError):  # too few points, or the fit did not converge
        result.update(A=None, C_mid=None)  # JSON has no NaN
    return result


def summarise(per_seed: dict, curves: dict) -> dict:
    """Per configuration: each metric's (mean, low, high) over seeds; C_mid only where identified."""
    import rlbook as rl

    out = {}
    for name, values in per_seed.items():
        row = {}
        for m in ("pass@1", "pass@8", "greedy", "len_right", "len_wrong", "completions", "seconds", "clip_fraction",
                  "clip_fraction_last10", "truncated_fraction", "zero_variance_groups"):
            row[m] = rl.mean_ci(values[m]) if len(values[m]) > 1 else (values[m][0],) * 3
        a, c_mid = np.asarray(values["A"], float), np.asarray(values["C_mid"], float)
        first = max(min(c for c in curve[0] if c > 0) for curve in curves[name])
        last = min(max(curve[0]) for curve in curves[name])
        fitted = bool(np.all(np.isfinite(c_mid))) and a.size >= 3
        row["A"] = rl.bootstrap_ci(a) if fitted else (None, None, None)
        row["C_mid"] = rl.bootstrap_ci(c_mid) if fitted else (None, None, None)
        at_bound = fitted and bool(np.any(a >= 1.0 - 1e-6))
        inside = fitted and first <= row["C_mid"][1] and row["C_mid"][2] <= last
        row["c_mid_identified"] = bool(fitted and not at_bound and inside)
        row["eval_range"] = (first, last)
        out[name] = row
    return out


def print_table(title: str, names, summary: dict, num_seeds: int) -> None:
    print(f"\n{title} (mean [95 % CI] over {num_seeds} paired seeds)")
    header = (f"{'config':<24}{'pass@1':>22}{'pass@8':>22}{'greedy':>22}{'len right':>19}{'len wrong':>19}"
              f"{'completions':>13}{'seconds':>9}{'A':>22}{'C_mid':>20}")
    print(header)
    print("-" * len(header))
    for name in names:
        s = summary[name]

        def cell(m, w, f=".3f"):
            mean, low, high = s[m]
            return ("n/a" if mean is None else f"{mean:{f}} [{low:{f}}, {high:{f}}]").rjust(w)

        if s["c_mid_identified"]:
            c_mid = f"{s['C_mid'][0]:.0f} [{s['C_mid'][1]:.0f}, {s['C_mid'][2]:.0f}]"
        else:
            c_mid = "not identified"
        print(f"{name:<24}{cell('pass@1', 22)}{cell('pass@8', 22)}{cell('greedy', 22)}{cell('len_right', 19, '.1f')}"
              f"{cell('len_wrong', 19, '.1f')}{s['completions'][0]:>13.0f}{s['seconds'][0]:>9.0f}{cell('A', 22)}"
              f"{c_mid:>20}")


def print_logged(names, summary: dict, num_seeds: int) -> None:
    """Per configuration, the training logs' per-run means (mean [95 % CI] over seeds): how much the
    trust region acted, how often a completion hit the token budget, how many groups gave no signal."""
    print(f"\ntraining logs, per-run means (mean [95 % CI] over {num_seeds} paired seeds)")
    header = f"{'config':<24}{'clip fraction':>24}{'clip, last 10 steps':>24}{'truncated':>24}{'zero-variance groups':>24}"
    print(header)
    print("-" * len(header))
    for name in names:
        cells = "".join(f"{m:.3f} [{lo:.3f}, {hi:.3f}]".rjust(24) for m, lo, hi in
                        (summary[name][k] for k in ("clip_fraction", "clip_fraction_last10", "truncated_fraction",
                                                    "zero_variance_groups")))
        print(f"{name:<24}{cells}")


def print_comparisons(per_seed: dict) -> None:
    import rlbook as rl

    pairs = [("dapo_1_overlong_filter", "grpo_b0"), ("dapo_2_clip_higher", "dapo_1_overlong_filter"),
             ("dapo_3_soft_overlong", "dapo_2_clip_higher"), ("dapo_4_token_mean", "dapo_3_soft_overlong"),
             ("dapo", "dapo_4_token_mean"), ("dr_grpo", "grpo_b0"), ("grpo_b0_no_std", "grpo_b0"),
             ("grpo_b0_fixed_length", "grpo_b0"), ("cispo", "grpo_b0_token_mean"), ("cispo", "grpo_b0"),
             ("ppo_critic_b004", "grpo_b004"), ("grpo_b004", "grpo_b0"), ("maxrl", "grpo_b0"), ("rloo", "grpo_b0"),
             ("gspo", "grpo_b0"), ("dppo", "grpo_b0")]
    print("\npaired differences in held-out pass@1 (A − B, 95 % CI)")
    for a, b in pairs:
        if a in per_seed and b in per_seed and len(per_seed[a]["pass@1"]) > 1:
            print("  " + str(rl.compare(per_seed[a]["pass@1"], per_seed[b]["pass@1"], names=(a, b))))


def load_log(path, budget: int) -> dict:
    """Finished runs from the log, keyed by (name, seed) (the last entry wins)."""
    done = {}
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                r = json.loads(line)
                if r.get("budget") == budget and r.get("name") in CONFIGS and all(m in r for m in METRICS):
                    done[(r["name"], r["seed"])] = r
    return done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=list(range(10)))
    parser.add_argument("--budget", type=int, default=40 * 256, help="generated completions per run")
    parser.add_argument("--only", nargs="+", choices=sorted(CONFIGS), default=None, help="configurations to run")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--resume", action="store_true", help=f"reuse finished runs from runs/{RESULTS_LOG}")
    parser.add_argument("--save", action="store_true",
                        help="write the results to rlbook/data/grpo_variants.json (what the chapters quote)")
    parser.add_argument("--save-to", default=None, help="write the results to this JSON file instead")
    args = parser.parse_args()
    import torch

    import rlbook as rl

    check_configs()
    names = args.only or list(CONFIGS)
    print(f"torch {torch.__version__}, rlbook {rl.__version__}; {args.workers} worker processes × 1 thread; "
          f"budget {args.budget} completions per run; seeds {args.seeds}")
    print("shared settings:", {k: v for k, v in COMMON.items()})
    log = rl.runs_dir() / RESULTS_LOG
    log.parent.mkdir(parents=True, exist_ok=True)
    done = load_log(log, args.budget) if args.resume else {}
    todo = [(n, s, args.budget) for s in args.seeds for n in names if (n, s) not in done]
    start = time.perf_counter()
    ctx = mp.get_context("spawn")
    with ctx.Pool(args.workers) as pool:
        before = pool.map(prepare, args.seeds)  # the supervised models, once per seed
        with log.open("a", encoding="utf-8") as f:
            for i, r in enumerate(pool.imap_unordered(one_run, todo, chunksize=1), 1):
                f.write(json.dumps(r) + "\n")
                f.flush()
                done[(r["name"], r["seed"])] = r
                print(f"  [{i}/{len(todo)}] {r['name']} seed {r['seed']}: pass@1 {r['pass@1']:.3f} "
                      f"({r['seconds']:.0f} s)", flush=True)
    per_seed = {n: {m: [done[(n, s)][m] for s in args.seeds] for m in METRICS} for n in names}
    curves = {n: [done[(n, s)]["curve"] for s in args.seeds] for n in names}
    before_seed = {m: [b[m] for b in before] for m in before[0] if m != "seed"}
    print("before RL (the supervised models, mean over seeds):",
          {m: round(float(np.mean(v)), 3) for m, v in before_seed.items()})
    summary = summarise(per_seed, curves)
    for title, group in (("(a) DAPO's parts added one at a time", ABLATION), ("(b) The family", FAMILY),
                         ("(c) Confounds separated", CONFOUNDS)):
        shown = [n for n in group if n in summary]
        if shown:
            print_table(title, shown, summary, len(args.seeds))
    print_logged(names, summary, len(args.seeds))
    print_comparisons(per_seed)
    total = time.perf_counter() - start
    print(f"\nbudget {args.budget} completions per run; seeds {args.seeds}; total {total:.0f} s")
    record = {"budget": args.budget, "seeds": args.seeds, "seconds": round(total), "workers": args.workers,
              "torch": torch.__version__, "common": {k: (list(v) if isinstance(v, tuple) else v) for k, v in COMMON.items()},
              "configs": {n: {"recipe": CONFIGS[n][0], "fields": CONFIGS[n][1]} for n in names},
              "before": before_seed, "per_seed": per_seed, "curves": curves, "summary": summary}
    if args.save or args.save_to:
        from pathlib import Path

        from rlbook.config import BENCHMARK_RESULTS

        path = Path(args.save_to) if args.save_to else BENCHMARK_RESULTS / "grpo_variants.json"
        path.write_text(json.dumps(record, indent=1, allow_nan=False, default=_no_nan) + "\n", encoding="utf-8")
        print(f"saved to {path} (chapters 10 and 11 print their tables from it)")


def _no_nan(x):
    raise TypeError(f"not JSON serialisable: {x!r}")


if __name__ == "__main__":
    main()
