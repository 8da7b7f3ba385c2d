"""GRPO step throughput: rlbook's ``train_grpo`` vs TRL's ``GRPOTrainer`` at its fastest CPU settings.

Setting (both sides): the book's small GPT-2 (2 × 128, character vocabulary, freshly initialised,
dropout 0), the addition task and its verifier, G = 8 completions per prompt, 64 completions per
step (8 prompts × 8), at most 8 new tokens, temperature 1, one optimisation pass per batch (μ = 1),
β = 0, AdamW (fused, no weight decay, lr 1e-4), gradient clipping at 1.0, float32, CPU.

TRL is configured as a user would for speed on a CPU, from the book's config through
``rlbook.bridge.to_trl_config`` plus: activation (gradient) checkpointing off, generation with the
KV cache (``use_cache=True``), float32 (no bf16/fp16), the fused AdamW, no logging, evaluation,
saving, progress bar or data-loader workers. Every TRL setting that matters is printed, read back
from the trainer after it was built (so a default that TRL changes behind the argument shows up).
TRL's defaults turn checkpointing on, and with transformers 5 a checkpointed model generates without
a KV cache: not the comparison this benchmark makes (the settings line shows checkpointing off and
the cache on, as read from the built trainer).

Method: each (side, thread count) runs in a fresh Python process: ``--warmup`` untimed steps, then
``--steps`` timed ones; a step is measured from the end of one optimiser step to the end of the
next, so it includes everything the loop does (TRL: data loader, callbacks, its metric
bookkeeping; rlbook: the ``History`` log). ``--repeats`` rounds alternate the sides (rlbook, TRL,
rlbook, TRL, ...) at 1 and 2 threads; the machine is shared, so each side's fastest round is kept
and every round is printed.

Per-phase profile (ms per step and share of the step), from timers wrapped around the functions
each side calls; the time of a nested timed call is not counted twice:

* generation: sampling the completions and decoding them to text (rlbook ``sample_completions``;
  TRL ``GRPOTrainer._generate``, which calls ``model.generate``);
* reward: the verifier (rlbook ``_score``; TRL ``_calculate_rewards``);
* scoring: log-probs of π_old / π_ref without gradient (none on either side at μ = 1, β = 0: both
  reuse the sampled batch's own log-probs, rlbook the sampler's, TRL the detached training ones);
* forward: the policy's log-probs with gradient (rlbook ``completion_log_probs``; TRL
  ``_get_per_token_logps_and_entropies``);
* loss: the clipped surrogate and its aggregation (rlbook ``grpo_microbatch_train_step``; TRL
  ``compute_loss``), without the forward and backward inside them;
* backward: ``Tensor.backward``; optimiser: ``clip_grad_norm_`` and ``AdamW.step``;
* rest: the step's wall time minus the above — Python between the phases (batching, padding,
  advantages, metrics, the trainer loop and its callbacks).

Where the time goes (1 thread, CPU time per step, which a loaded machine inflates far less than wall
time; 2-core Xeon, torch 2.13, transformers 5.24, TRL 1.16, 2026-11-25; the printed profile gives
the same shares in wall time):

    phase (ms)   rlbook   TRL    TRL/rlbook   why
    generation   13–15    28     ~2×          TRL: ``model.generate`` over 64 rows, every prompt encoded
                                              8 times; rlbook: each prompt once per group, a
                                              preallocated cache, the GPT-2 arithmetic written out
    forward       8–9     15     ~1.8×        TRL feeds prompt + completion for all 64 rows (64 × 15
                                              positions); rlbook the 8 prompts once, then the
                                              completions after their shared prefix (8 × 7 + 64 × 7)
    backward     11–13    20     ~1.6×        the same positions, twice the arithmetic
    optimiser     1.5      1.6                fused AdamW and clipping on both sides
    rest          2        5                  TRL's trainer loop, padding, metrics; rlbook's metrics
    step         38–45   70–91   1.7–2.0×

Why the ratio stops near 2×: both sides run eager PyTorch on the same matrix shapes, and at 64
completions per step the matrix products are a large part of each phase, so the ratio follows the
number of token positions each side pushes through the model per step. Counting a backward as two
forwards: rlbook samples 8·7 + 7·64 = 504 positions and trains on 504 (forward) + 1008 (backward)
= 2016; TRL samples 64·7 + 7·64 = 896 and trains on 960 + 1920, 3776 in all, 1.87× more. The
measured ratio is that work ratio; 3× would need rlbook to be 1.6× cheaper per position than TRL's
own eager code, or to skip work it now does. Tried and not kept (each also changes float rounding,
so seeded runs would no longer repeat the recorded ones): the attention written out instead of
SDPA's CPU flash kernel (forward/backward 8.8/11.9 ms vs 8.2/11.3: no faster); ``torch.compile`` of
the scorer (7.9/11.4 vs 9.2/12.6 ms, ~10 %, after 142 s of compilation); backpropagating through
the sampler's own forward when μ = 1, so that no training forward runs
(``benchmarks/grpo_backprop_through_sampler.py``: the same gradient, but 1.17× *slower* at 1 thread
and 1.26× at 2, because the backward then runs through eight one-token graphs over caches grown by
concatenation). Not tried: not feeding the positions after EOS. About 19 % of the completion
positions are padding, but every measured batch has a completion at the 8-token cap, so trimming
saves nothing; packing rows of different lengths would save at most that 19 % of the forward and
backward (~3 of 31 ms per step), which leaves the ratio near 2.0×. At the book's recipe batch
(``--prompts 64``, 512 completions per step) the ratio is the same: 252 vs 503 CPU ms per step
(2.0×).

Two threads: with other processes running on the 2 cores, each torch operation waits for both of
its threads to be scheduled, and both sides slow down 10× and more; the ratio then says little (it
read 1.77× at a 1-minute load of 10–13, 0.94× at 12–15). The script says so when the load average
shows it. Compare 2-thread numbers only from a quiet machine; at 1 thread, read the CPU-time ratio
beside the wall-time one.

Measured 2026-11-25 with the defaults (3 rounds of 3 + 20 steps per side and thread count), while
other jobs kept the 1-minute load average at 11–15 on the 2 cores, so every wall-clock number is low:

    threads   rlbook completions/s   TRL completions/s   ratio (wall)   ratio (CPU time per step)
    1         400                    211                 1.89×          2.04×  (44.7 vs 91.3 ms)
    2          10                     11                 0.94×          0.97×  (contended)

The 1-thread CPU-time ratio was 1.99× and 2.04× in two runs at 64 completions per step and 2.00×
at 512; the 3× goal is not reached (see above for why).

Measured again 2026-11-26 on a quiet machine (1-minute load average 0.4–0.9 throughout), the defaults:

    threads   rlbook completions/s   TRL completions/s   ratio (wall)   ratio (CPU time per step)
    1         2036                   1099                1.85×          1.85×  (31.4 vs 58.2 ms)
    2         2671                   1398                1.91×          1.90×  (47.5 vs 90.1 ms)

    phase (ms, 1 thread)   generation   forward   backward   optimiser   rest   step
    rlbook                 12.0         6.6       9.6        1.1         1.6    31.4
    TRL                    23.0         14.6      14.9       1.1         3.9    58.2

Prints versions, settings, a table of completions/s (and generated tokens/s) for both sides at each
thread count with the ratio, and the per-phase profile; the last line is one JSON object. TRL is
optional (``pip install "rlbook[trl]"``); without it only rlbook's numbers are reported.

Usage:
    python benchmarks/grpo_throughput.py [--steps 20] [--warmup 3] [--threads 1 2] [--repeats 3] [--prompts 8]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections import defaultdict

G, MAX_NEW, LR = 8, 8, 1e-4
PROMPTS = 8  # prompts per step (``--prompts``); G completions each
PHASES = ("generation", "reward", "scoring", "forward", "loss", "backward", "optimiser", "rest")


class PhaseClock:
    """Exclusive wall time per phase: a timed call nested in another is charged to its own phase only."""

    def __init__(self):
        self.totals, self.stack, self.on = defaultdict(float), [], False

    def wrap(self, fn, phase):
        """``fn`` timed under ``phase`` (a name, or a callable returning one at call time)."""

        @functools.wraps(fn)
        def timed(*args, **kwargs):
            name = phase() if callable(phase) else phase
            self.stack.append(0.0)
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                elapsed = time.perf_counter() - start
                inner = self.stack.pop()
                if self.on:
                    self.totals[name] += elapsed - inner
                if self.stack:
                    self.stack[-1] += elapsed

        return timed


def _grad_phase():
    import torch

    return "forward" if torch.is_grad_enabled() else "scoring"


def _patch_common(clock):
    """Timers on what both sides call: Tensor.backward, clip_grad_norm_, AdamW.step."""
    import torch

    torch.Tensor.backward = clock.wrap(torch.Tensor.backward, "backward")
    torch.nn.utils.clip_grad_norm_ = clock.wrap(torch.nn.utils.clip_grad_norm_, "optimiser")
    torch.optim.AdamW.step = clock.wrap(torch.optim.AdamW.step, "optimiser")


def book_config():
    import rlbook as rl

    return rl.GRPOConfig(group_size=G, prompts_per_step=PROMPTS, max_new_tokens=MAX_NEW, lr=LR,
                         advantage_std="sample", log_ref_kl=False, device="cpu", seed=0)


def setup(seed: int = 0):
    import rlbook as rl

    task, tok = rl.lm.AdditionTask(), rl.lm.build_char_tokenizer()
    policy = rl.lm.build_policy(rl.lm.policy_config(tok, size="small"), seed=seed, device="cpu")
    return task, tok, policy


def run_ours(steps: int, warmup: int) -> dict:
    """``rl.train_grpo`` for warmup + steps steps; time the last ``steps`` (end of step to end of step)."""
    import dataclasses

    import rlbook as rl
    import rlbook.algos.grpo as grpo
    import rlbook.algos.grpo_rollouts as rollouts

    clock, ends = PhaseClock(), []
    _patch_common(clock)
    rollouts.sample_completions = clock.wrap(rollouts.sample_completions, "generation")
    rollouts._score = clock.wrap(rollouts._score, "reward")
    grpo.completion_log_probs = clock.wrap(grpo.completion_log_probs, _grad_phase)
    grpo.grpo_microbatch_train_step = clock.wrap(grpo.grpo_microbatch_train_step, "loss")
    step = grpo.grpo_step

    def stamped(*args, **kwargs):
        out = step(*args, **kwargs)
        ends.append((time.perf_counter(), time.process_time()))
        clock.on = len(ends) >= warmup  # phases of the timed steps only
        return out

    grpo.grpo_step = stamped
    made = []
    make_optimizer = grpo.grpo_optimizer

    def recorded(*args, **kwargs):
        made.append(make_optimizer(*args, **kwargs))
        return made[-1]

    grpo.grpo_optimizer = recorded
    task, tok, policy = setup()
    config = dataclasses.replace(book_config(), num_steps=warmup + steps)
    load = _load()
    history = rl.train_grpo(policy, tok, task, config, progress=False)
    lengths = [float(x) for x in history["completion_length"][warmup:]]
    settings = {"sampler": "rl.lm.sample_completions (KV cache, prompt encoded once per group)",
                "optimizer": type(made[0]).__name__ + (" fused" if made[0].defaults.get("fused") else ""),
                "max_grad_norm": config.max_grad_norm, "loss": f"{config.per_token_loss} / {config.loss_aggregation}",
                "advantages": f"{config.advantage_estimator} ({config.advantage_std} std)", "beta": config.kl_coef,
                "mu": config.num_inner_epochs, "dtype": str(next(policy.parameters()).dtype)}
    return _result(ends, warmup, steps, lengths, clock, settings, load)


def _result(ends, warmup, steps, lengths, clock, settings, load) -> dict:
    import torch

    wall = ends[-1][0] - ends[warmup - 1][0]
    cpu = ends[-1][1] - ends[warmup - 1][1]
    step_ms = 1000 * wall / steps
    phases = {name: 1000 * clock.totals.get(name, 0.0) / steps for name in PHASES[:-1]}
    phases["rest"] = step_ms - sum(phases.values())
    mean_len = sum(lengths) / len(lengths)
    completions = PROMPTS * G
    return {"completions_per_s": steps * completions / wall, "tokens_per_s": steps * completions * mean_len / wall,
            "step_ms": step_ms, "cpu_ms": 1000 * cpu / steps, "mean_length": mean_len, "load": f"{load} → {_load()}", "phases_ms": phases, "threads": torch.get_num_threads(),
            "settings": settings}


def run_trl(steps: int, warmup: int) -> dict:
    """TRL's GRPOTrainer for warmup + steps optimiser steps; time the last ``steps``."""
    import torch
    from transformers import TrainerCallback

    from rlbook import bridge

    clock, ends, lengths = PhaseClock(), [], []
    _patch_common(clock)
    task, tok, policy = setup()
    config = book_config()
    holder = {}

    class Clock(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            ends.append((time.perf_counter(), time.process_time()))
            clock.on = len(ends) >= warmup
            lengths.append(holder["trainer"]._metrics["train"]["completions/mean_length"][-1])

    total = warmup + steps
    with tempfile.TemporaryDirectory() as tmp:
        trainer = bridge.build_trl_trainer(
            policy, tok, task, config, num_prompts=PROMPTS * (total + 2), output_dir=tmp,
            max_steps=total,
            # the fastest CPU settings a user would pick (the bridge already turns checkpointing off)
            generation_kwargs={"use_cache": True}, optim="adamw_torch_fused", bf16=False, fp16=False,
            logging_steps=total + 1, eval_strategy="no", save_strategy="no", report_to="none", disable_tqdm=True,
            log_completions=False, dataloader_num_workers=0, dataloader_pin_memory=False,
        )
        holder["trainer"] = trainer
        trainer.add_callback(Clock())
        from transformers.trainer_callback import PrinterCallback

        trainer.remove_callback(PrinterCallback)
        trainer._generate = clock.wrap(trainer._generate, "generation")
        trainer._calculate_rewards = clock.wrap(trainer._calculate_rewards, "reward")
        trainer._get_per_token_logps_and_entropies = clock.wrap(trainer._get_per_token_logps_and_entropies, _grad_phase)
        trainer.compute_loss = clock.wrap(trainer.compute_loss, "loss")
        load = _load()
        trainer.train()
        args, model = trainer.args, trainer.model
        settings = {
            "activation_checkpointing": bool(getattr(args, "activation_checkpointing", args.gradient_checkpointing)),
            "model.is_gradient_checkpointing": bool(getattr(model, "is_gradient_checkpointing", False)),
            "generation use_cache": trainer.generation_config.use_cache,
            "generation": f"do_sample={trainer.generation_config.do_sample}, top_k={trainer.generation_config.top_k}, "
                          f"top_p={trainer.generation_config.top_p}, temperature={trainer.generation_config.temperature}",
            "optim": str(args.optim), "optimizer": type(getattr(trainer.optimizer, "optimizer", trainer.optimizer)).__name__
            + (" fused" if getattr(trainer.optimizer, "defaults", {}).get("fused") else ""),
            "max_grad_norm": args.max_grad_norm, "loss_type": args.loss_type, "scale_rewards": args.scale_rewards,
            "beta": args.beta, "num_iterations": args.num_iterations, "steps_per_generation": args.steps_per_generation,
            "per_device_train_batch_size": args.per_device_train_batch_size, "num_generations": args.num_generations,
            "max_completion_length": args.max_completion_length, "bf16": args.bf16, "fp16": args.fp16,
            "dtype": str(next(model.parameters()).dtype), "use_cpu": args.use_cpu, "torch_compile": args.torch_compile,
            "logging_steps": args.logging_steps, "dataloader_num_workers": args.dataloader_num_workers,
        }
    return _result(ends, warmup, steps, lengths[warmup:], clock, settings, load)


def versions() -> dict:
    import importlib.metadata as md

    out = {"python": platform.python_version()}
    for name in ("torch", "transformers", "trl", "accelerate", "datasets", "rlbook"):
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            out[name] = None
    return out


def _cpu() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            names = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
        return f"{names[0]} × {len(names)}" if names else platform.processor()
    except OSError:
        return platform.processor()


def _load(all_three: bool = False) -> str:
    """The 1-minute load average (with ``all_three``: the 1-, 5- and 15-minute ones)."""
    try:
        loads = os.getloadavg()
    except OSError:
        return "n/a"
    return " ".join(f"{x:.2f}" for x in (loads if all_three else loads[:1]))


def worker(side: str, threads: int, steps: int, warmup: int, prompts: int) -> None:
    import torch

    global PROMPTS
    PROMPTS = prompts
    torch.set_num_threads(threads)
    result = (run_ours if side == "rlbook" else run_trl)(steps, warmup)
    print("RESULT " + json.dumps(result))


def _spawn(side: str, threads: int, steps: int, warmup: int) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", side, "--threads", str(threads),
           "--steps", str(steps), "--warmup", str(warmup), "--prompts", str(PROMPTS)]
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads),
               TOKENIZERS_PARALLELISM="false", TRANSFORMERS_VERBOSITY="error")
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode or not lines:
        raise RuntimeError(f"{side} worker ({threads} threads) failed:\n{proc.stderr[-3000:]}")
    return json.loads(lines[-1][len("RESULT "):])


def _phase_table(best: dict, threads: list[int], sides: list[str]) -> list[str]:
    lines = []
    for n in threads:
        lines.append(f"\nPer-phase profile, {n} thread(s), fastest round (ms per step, share of the step):")
        lines.append(f"  {'phase':11s}" + "".join(f"{s:>22s}" for s in sides) + ("   TRL / rlbook" if len(sides) > 1 else ""))
        for phase in (*PHASES, "step"):
            row = f"  {phase:11s}"
            for s in sides:
                r = best[(s, n)]
                ms = r["step_ms"] if phase == "step" else r["phases_ms"][phase]
                row += f"{ms:12.1f} ms {100 * ms / r['step_ms']:5.1f} %"
            if len(sides) > 1:
                a, b = (best[(s, n)]["step_ms"] if phase == "step" else best[(s, n)]["phases_ms"][phase] for s in sides)
                row += f"{b / a:12.2f}x" if a > 0.05 else f"{'-':>13s}"
            lines.append(row)
    return lines


def main() -> None:
    global PROMPTS
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=20, help="timed steps per round")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps first (≥ 1)")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="torch thread counts to measure")
    parser.add_argument("--repeats", type=int, default=3, help="rounds per side; the fastest is kept")
    parser.add_argument("--prompts", type=int, default=PROMPTS,
                        help=f"prompts per step, G={G} completions each (the book's recipe uses 64)")
    parser.add_argument("--worker", choices=["rlbook", "trl"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if min(args.warmup, args.steps, args.repeats, args.prompts, *args.threads) < 1:
        raise ValueError("`--steps`, `--warmup`, `--repeats`, `--prompts` and `--threads` must be ≥ 1")
    if args.worker:
        worker(args.worker, args.threads[0], args.steps, args.warmup, args.prompts)
        return
    PROMPTS = args.prompts
    vers = versions()
    sides = ["rlbook"]
    try:
        import accelerate  # noqa: F401
        import datasets  # noqa: F401
        import trl  # noqa: F401
    except ImportError as err:
        print(f"TRL, datasets or accelerate is not installed ({err}; pip install \"rlbook[trl]\"): reporting rlbook only")
    else:
        sides.append("trl")
    print(f"GRPO step: {PROMPTS * G} completions ({PROMPTS} prompts × G={G}), ≤{MAX_NEW} new tokens, μ=1, β=0, "
          f"lr {LR}, float32, CPU; {args.warmup} warm-up + {args.steps} timed steps, {args.repeats} round(s) per side")
    print("versions: " + ", ".join(f"{k} {v}" for k, v in vers.items()))
    print(f"CPU: {_cpu()}; load average (1, 5, 15 min) at start: {_load(True)}")
    runs = defaultdict(list)
    for _ in range(args.repeats):
        for n in args.threads:
            for side in sides:
                runs[(side, n)].append(_spawn(side, n, args.steps, args.warmup))
    best = {key: max(rs, key=lambda r: r["completions_per_s"]) for key, rs in runs.items()}
    print(f"load average (1, 5, 15 min) at end: {_load(True)}")
    for side in sides:
        print(f"\n{side} settings: " + "; ".join(f"{k}={v}" for k, v in best[(side, args.threads[0])]["settings"].items()))
    print("\nthreads  side     completions/s  (each round)        tokens/s   ms/step  CPU ms/step  mean length  load (1-min avg)")
    for n in args.threads:
        for side in sides:
            r = best[(side, n)]
            rounds = ", ".join(f"{x['completions_per_s']:.0f}" for x in runs[(side, n)])
            print(f"{n:7d}  {side:7s} {r['completions_per_s']:13.1f}  ({rounds:18s}) {r['tokens_per_s']:9.1f} "
                  f"{r['step_ms']:9.1f} {r['cpu_ms']:12.1f} {r['mean_length']:12.2f}  {r['load']}")
        if "trl" in sides:
            ratio = best[("rlbook", n)]["completions_per_s"] / best[("trl", n)]["completions_per_s"]
            by_cpu = min(r["cpu_ms"] for r in runs[("trl", n)]) / min(r["cpu_ms"] for r in runs[("rlbook", n)])
            print(f"{n:7d}  ratio rlbook / TRL: {ratio:.2f}x  (by CPU time per step: {by_cpu:.2f}x)")
    cores = os.cpu_count() or 1
    busy = [float(x) for rs in runs.values() for r in rs for x in r["load"].split(" → ") if x != "n/a"] or [0.0]
    if max(args.threads) > 1 and max(busy) > cores - max(args.threads) + 0.5:
        print(f"note: 1-min load averages up to {max(busy):.1f} on {cores} cores: runs at {max(args.threads)} threads "
              "shared their cores with other processes (OpenMP threads then wait on each other), so their numbers "
              "are low for both sides and the ratio is less reliable than at 1 thread")
    for line in _phase_table(best, args.threads, sides):
        print(line)
    result = {"versions": vers, "prompts": PROMPTS, "group_size": G, "steps": args.steps, "warmup": args.warmup,
              "repeats": args.repeats}
    for n in args.threads:
        result[f"rlbook_completions_per_s_{n}t"] = round(best[("rlbook", n)]["completions_per_s"], 1)
        result[f"rlbook_phases_ms_{n}t"] = {k: round(v, 2) for k, v in best[("rlbook", n)]["phases_ms"].items()}
        if "trl" in sides:
            result[f"trl_completions_per_s_{n}t"] = round(best[("trl", n)]["completions_per_s"], 1)
            result[f"trl_phases_ms_{n}t"] = {k: round(v, 2) for k, v in best[("trl", n)]["phases_ms"].items()}
            result[f"ratio_{n}t"] = round(best[("rlbook", n)]["completions_per_s"] / best[("trl", n)]["completions_per_s"], 2)
            result[f"ratio_cpu_time_{n}t"] = round(min(r["cpu_ms"] for r in runs[("trl", n)])
                                                   / min(r["cpu_ms"] for r in runs[("rlbook", n)]), 2)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
