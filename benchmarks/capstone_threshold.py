"""The capstone's training threshold: held-out pass@1 of the instructor's loop and of broken loops, per seed.

``assignments/src/capstone_grpo.py`` grades a student's GRPO loop by the held-out pass@1 it reaches
after 40 steps (32 prompts × 8 completions, lr 5e-4, ε = 0.2, β = 0, 2 microbatches) from the fixed
supervised start ``rlbook/data/grpo_start`` (200 held-out problems × 8 samples, sampling seed
``seed + 1``), exactly as its ``test_training`` cell does. This script runs the instructor's solution
cells of the built notebook (``assignments/source/capstone_grpo``) with the notebook's setup cell, on
one torch thread, for each seed, and the same code with one planted bug each:

* ``sign``: the advantages' sign flipped in the loop (the test suite's capstone mistake);
* ``no_step``: ``optimizer.step()`` left out (the loop samples and computes gradients, never updates);
* ``no_zero_grad``: ``optimizer.zero_grad()`` left out (stale gradients accumulate; caught by the
  unit test of the step, not necessarily by the threshold).

It prints each run and, for the correct loop, the mean, the standard deviation over seeds and
mean − 4·sd, the rule the notebook's threshold (0.55) was set by.

    python benchmarks/capstone_threshold.py --seeds 0 1 2 3 4 5 20240611 --bugs none sign no_step
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "assignments" / "source" / "capstone_grpo" / "capstone_grpo.ipynb"
BUGS = {
    "none": [],
    "sign": [('batch["advantages"] = group_advantages(', 'batch["advantages"] = -group_advantages(')],
    "no_step": [("    optimizer.step()\n    return total", "    return total")],
    "no_zero_grad": [("    optimizer.zero_grad()\n    total = 0.0", "    total = 0.0")],
}
SOLUTIONS = ("score_completions", "group_advantages", "response_log_probs", "grpo_loss", "grpo_microbatch_step",
             "train_grpo_loop")


def namespace(bug: str) -> dict:
    """The notebook's setup cell and its solution cells (with ``bug`` planted) run in a fresh namespace."""
    cells = {c["metadata"].get("nbgrader", {}).get("grade_id"): "".join(c["source"])
             for c in json.loads(NOTEBOOK.read_text())["cells"] if c["cell_type"] == "code"}
    ns: dict = {"__name__": "__capstone__"}
    exec(cells["setup"], ns)
    code = "\n\n".join(cells[name] for name in SOLUTIONS)
    for old, new in BUGS[bug]:
        assert old in code, (bug, old)
        code = code.replace(old, new)
    exec(code, ns)
    return ns


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4, 5, 20240611])
    p.add_argument("--bugs", nargs="+", choices=sorted(BUGS), default=["none", "sign", "no_step"])
    args = p.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    import torch

    out = {}
    for bug in args.bugs:
        ns = namespace(bug)
        torch.set_num_threads(1)
        out[bug] = []
        for seed in args.seeds:
            start = time.perf_counter()
            policy = ns["load_start"]()
            rewards = ns["train_grpo_loop"](policy, ns["TASK"], num_steps=40, prompts_per_step=32, group_size=8, lr=5e-4,
                                            clip_eps=0.2, kl_coef=0.0, num_microbatches=2, seed=seed)
            after = ns["held_out_pass_at_1"](policy, seed + 1)
            out[bug].append(after)
            print(f"{bug:>12} seed {seed:>9}: held-out pass@1 {after:.3f}  (batch reward {rewards[0]:.3f} -> "
                  f"{sum(rewards[-5:]) / 5:.3f}; {time.perf_counter() - start:.1f} s)", flush=True)
    if "none" in out and len(out["none"]) > 1:
        mean, sd = statistics.mean(out["none"]), statistics.stdev(out["none"])
        print(f"correct loop: mean {mean:.3f}, sd {sd:.3f} over {len(out['none'])} seeds, min {min(out['none']):.3f}; "
              f"mean - 4 sd = {mean - 4 * sd:.3f}")
    for bug, values in out.items():
        if bug != "none":
            print(f"{bug}: max {max(values):.3f}")
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
