"""DPO, IPO, SimPO and ORPO trained on chapter 13's task, each at a sweep of its coefficient, compared at
matched KL from the supervised model (chapter 13, §13.4).

Setting (every seed s): ``benchmarks/dpo_vs_rl.py``'s per-seed data, drawn by its own functions (imported,
not copied): the supervised model π_sft of seed s (its cached checkpoint), ``BUDGET`` offline training
pairs of π_sft's samples with gold Bradley–Terry labels, ``NUM_TEST_PAIRS`` held-out pairs and the
held-out prompts, drawn in the same order from the same generator. On the machine and checkpoints that
wrote dpo_vs_rl.json these are its data exactly; elsewhere they are another draw of the same recipe. Every configuration trains a fresh copy of
π_sft with ``rl.algos.dpo.train_dpo`` for ``DPO_STEPS`` updates of ``DPO_BATCH`` pairs at lr ``DPO_LR``
(the minibatch draws seeded by s), and is evaluated by ``dpo_vs_rl.evaluate``: gold reward, accuracy,
length, KL(π‖π_sft) and held-out preference accuracy (implicit reward log π − log π_sft for all four).

The sweeps (``SWEEPS``, each from the weakest push to the strongest):

* ``dpo`` (``loss_type="sigmoid"``): β (dpo_vs_rl's offline DPO is the point β = ``DPO_BETA``, so its runs
  repeat here).
* ``ipo``: τ (the library's ``beta`` field); the target margin of the per-token log-ratio is 1/(2τ).
* ``simpo``: the learning rate, at β = ``SIMPO_BETA`` and γ = ``SIMPO_GAMMA`` (γ/β = 0.5: Meng, Xia & Chen
  2024, arXiv:2405.14734, tune γ/β and report about 0.5 as a good ratio; β = 2.5 is within their 2–10).
  SimPO's β does not set how far it moves in ``DPO_STEPS`` updates at lr ``DPO_LR``: a one-seed probe at
  β from 1 to 40 (γ fixed or γ/β fixed) gave the same KL (about 1.5 nats) and answers cut to the shortest
  form; ``EXTRA["simpo_beta"]`` (β = 10 at lr ``DPO_LR``) records that on every seed. Meng et al. tune the
  learning rate for each model alongside β and γ/β, so the learning rate is the coefficient swept.
* ``orpo``: λ, the weight of the odds-ratio term beside the supervised loss on the chosen answer.

A comparison at one setting per method compares how far each moved as much as what it learned; so the
comparison is made at matched KL: per seed and method, a metric is interpolated linearly in KL between
the two sweep points whose KLs bracket the target (``at_kl``), and the methods are compared on paired
seeds there (chapter 13 picks the target that every method's sweep brackets on every seed).

    python benchmarks/preference_family.py --seeds 0 1 2 3 4 5 6 7 8 9 --save   # rlbook/data/preference_family.json
    python benchmarks/preference_family.py --seeds 0                            # one seed, printed

One torch thread; results repeat on one machine, another CPU changes float order and so the numbers.
"""

from __future__ import annotations

import argparse
import copy
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import dpo_vs_rl as base  # noqa: E402  (the per-seed data, the evaluation and the shared settings)

SIMPO_BETA, SIMPO_GAMMA = 2.5, 1.25
SWEEPS = {  # method: (loss_type, DPOConfig field swept, values), each ordered from the weakest push to the strongest
    "dpo": ("sigmoid", "beta", (3.0, 1.0, 0.3, 0.1)),
    "ipo": ("ipo", "beta", (3.0, 1.0, 0.3, 0.1)),
    "simpo": ("simpo", "lr", (3e-5, 5e-5, 7e-5, 1e-4)),
    "orpo": ("orpo", "orpo_lambda", (0.3, 1.0, 4.0, 16.0)),
}
EXTRA = {"simpo_beta": ("simpo", "beta", (10.0,))}  # SimPO's β at lr DPO_LR: does β move it?
METRICS = base.METRICS


def family_config(method: str, value: float, seed: int):
    """The DPOConfig of ``method`` at coefficient ``value``: dpo_vs_rl's budget of updates, batch and seed."""
    from rlbook.algos.dpo import DPOConfig

    loss_type, field, _ = {**SWEEPS, **EXTRA}[method]
    settings = {"lr": base.DPO_LR, **({"beta": SIMPO_BETA, "simpo_gamma": SIMPO_GAMMA} if loss_type == "simpo" else {})}
    return DPOConfig(loss_type=loss_type, num_steps=base.DPO_STEPS, batch_size=base.DPO_BATCH, seed=seed, device="cpu",
                     **{**settings, field: value})


def at_kl(kls, values, target: float):
    """``values`` interpolated linearly in KL at ``target``, between the two sweep points (ordered by KL)
    whose KLs bracket it; None when no two points bracket it."""
    order = np.argsort(kls)
    k, v = np.asarray(kls, dtype=float)[order], np.asarray(values, dtype=float)[order]
    for i in range(len(k) - 1):
        if k[i] <= target <= k[i + 1]:
            w = 0.0 if k[i + 1] == k[i] else (target - k[i]) / (k[i + 1] - k[i])
            return float(v[i] + w * (v[i + 1] - v[i]))
    return None


def one_seed(seed: int, methods=tuple(SWEEPS) + tuple(EXTRA), num_prompts: int = base.EVAL_PROMPTS) -> dict:
    import torch

    from rlbook.algos.dpo import train_dpo

    start = time.perf_counter()
    task, tok, gold, sft = base.setup(seed)
    generator = torch.Generator().manual_seed(seed)
    train = base.labelled_pairs(sft, tok, task, gold, base.BUDGET, generator, "train")
    test = base.labelled_pairs(sft, tok, task, gold, base.NUM_TEST_PAIRS, generator, "held_out")
    problems = task.held_out_problems(num_prompts)
    chosen, rejected = base.strip_eos(train.chosen), base.strip_eos(train.rejected)
    sft_result = base.evaluate(sft, sft, tok, task, gold, problems, test)
    results = {"sft": {k: sft_result[k] for k in METRICS}}
    for method in methods:
        results[method] = []
        for value in {**SWEEPS, **EXTRA}[method][2]:
            t = time.perf_counter()
            policy = copy.deepcopy(sft).requires_grad_(True)
            train_dpo(policy, sft, tok, train.prompts, chosen, rejected, family_config(method, value, seed), progress=False)
            r = base.evaluate(policy, sft, tok, task, gold, problems, test)
            results[method].append({"value": value, **{k: r[k] for k in METRICS}, "wall_s": round(time.perf_counter() - t, 1)})
    return {"seed": seed, "results": results, "wall_s": round(time.perf_counter() - start, 1)}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", nargs="+", type=int, default=list(range(10)))
    parser.add_argument("--methods", nargs="+", default=list(SWEEPS) + list(EXTRA), choices=list(SWEEPS) + list(EXTRA))
    parser.add_argument("--save", action="store_true", help="write rlbook/data/preference_family.json")
    args = parser.parse_args(argv)
    import torch

    print(f"torch {torch.__version__}, python {platform.python_version()}, {platform.machine()}, 1 thread")
    print(f"{base.DPO_STEPS} updates × {base.DPO_BATCH} pairs of {base.BUDGET}; lr {base.DPO_LR} unless swept; sweeps "
          + "; ".join(f"{m} {f} {v}" for m, (_, f, v) in {**SWEEPS, **EXTRA}.items())
          + f"; SimPO β = {SIMPO_BETA} unless swept, γ = {SIMPO_GAMMA}")
    start, rows = time.perf_counter(), []
    for seed in args.seeds:
        rows.append(one_seed(seed, tuple(args.methods)))
        r = rows[-1]["results"]
        print(f"seed {seed} ({rows[-1]['wall_s']:.0f} s): sft gold {r['sft']['gold']:+.3f} len {r['sft']['length']:.1f}",
              flush=True)
        for m in args.methods:
            print("   " + m + ": " + "; ".join(f"{p['value']:g}: gold {p['gold']:+.3f} acc {p['correct']:.2f} len "
                                             f"{p['length']:.1f} KL {p['kl']:.2f} pref {p['preference_accuracy']:.2f}"
                                             for p in r[m]), flush=True)
    wall = time.perf_counter() - start
    print(f"total {wall:.0f} s")
    record = {"seeds": args.seeds, "runs": rows, "wall_s": round(wall, 1),
              "settings": dict(sweeps={m: {"loss_type": lt, "field": f, "values": list(v)}
                                       for m, (lt, f, v) in {**SWEEPS, **EXTRA}.items()},
                               simpo_beta=SIMPO_BETA, simpo_gamma=SIMPO_GAMMA, lr=base.DPO_LR, steps=base.DPO_STEPS, batch=base.DPO_BATCH,
                               budget=base.BUDGET, num_test_pairs=base.NUM_TEST_PAIRS, max_new_tokens=base.MAX_NEW,
                               eval_prompts=base.EVAL_PROMPTS, eval_samples=base.EVAL_SAMPLES, data="benchmarks/dpo_vs_rl.py"),
              "torch": torch.__version__, "machine": platform.machine(),
              "command": "python benchmarks/preference_family.py --seeds " + " ".join(map(str, args.seeds)) + " --save"}
    if args.save:
        from rlbook.config import BENCHMARK_RESULTS

        path = BENCHMARK_RESULTS / "preference_family.json"
        path.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
        print(f"saved to {path}")
    return record


if __name__ == "__main__":
    main()
