"""Build the fixed supervised start of the GRPO capstone assignment: ``rlbook/data/grpo_start/``.

The capstone (``assignments/src/capstone_grpo.py``) grades a student's whole GRPO loop by the
held-out pass@1 it reaches from one fixed model. Training that model takes minutes (800 SFT steps),
far more than a submission's grading budget, so it is trained once, here, and shipped with the
package (``rlbook/data/grpo_start/``, a ``save_pretrained`` folder of about 1.6 MB; the grading
sandbox can read the package, not the course folder). The recipe is chapter 9's supervised stage
for seed 0: ``rl.lm.build_policy(rl.lm.policy_config(tok), seed=0)`` trained by ``rl.lm.train_sft``
with ``SFTConfig(num_steps=800, seed=0)`` (60 % of the labels plausible one-digit mistakes, so the
start adds correctly when greedy but samples the right answer well under half the time), on one torch
thread, on 2-digit addition (``AdditionTask(num_digits=2, held_out_fraction=0.1, seed=0)``). The
folder's ``rlbook_metadata.json`` records the recipe, the machine's torch version and the start's
held-out numbers (500 problems × 16 samples, sampling seed 1, as chapter 9 measures them).

    python tools/build_grpo_start.py          # ~4 min on one core; rewrites rlbook/data/grpo_start/
"""

from __future__ import annotations

import json
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "rlbook" / "data" / "grpo_start"
SFT_STEPS = 800


def main() -> int:
    sys.path.insert(0, str(ROOT))
    import torch

    import rlbook as rl

    torch.set_num_threads(1)
    task, tok = rl.lm.AdditionTask(num_digits=2, held_out_fraction=0.1, seed=0), rl.lm.build_char_tokenizer()
    policy = rl.lm.build_policy(rl.lm.policy_config(tok, size="small"), seed=0)
    start = time.perf_counter()
    rl.lm.train_sft(policy, tok, task, rl.lm.SFTConfig(num_steps=SFT_STEPS, seed=0), progress=False)
    seconds = time.perf_counter() - start
    held_out = rl.evaluate(policy, tok, task.held_out_problems(500), num_samples=16, k=8, seed=1)
    numbers = {k: round(float(held_out[k]), 4) for k in ("greedy_accuracy", "pass@1", "pass@8")}
    metadata = {"recipe": f"build_policy(policy_config(tok, size='small'), seed=0); train_sft(SFTConfig(num_steps={SFT_STEPS}, "
                          "seed=0)); AdditionTask(num_digits=2, held_out_fraction=0.1, seed=0); 1 torch thread",
                "held_out_500x16_seed1": numbers, "sft_seconds": round(seconds, 1), "torch": torch.__version__,
                "python": platform.python_version(), "command": "python tools/build_grpo_start.py"}
    rl.lm.save_checkpoint(policy, None, OUT, metadata=metadata)
    for extra in ("generation_config.json",):  # transformers' sampling defaults: not used, not shipped
        (OUT / extra).unlink(missing_ok=True)
    # readable by everyone: the grading sandbox's kernel runs under another uid (save_checkpoint's
    # temporary folder is private, 0700)
    OUT.chmod(0o755)
    for p in OUT.iterdir():
        p.chmod(0o644)
    print(json.dumps(metadata, indent=1))
    print(f"saved to {OUT.relative_to(ROOT)}: {sorted(p.name for p in OUT.iterdir())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
