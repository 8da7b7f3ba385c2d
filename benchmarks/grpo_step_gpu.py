"""The book's GRPO step on one device: wall time per step, completions/s and a model-FLOPs utilisation, per size.

Setting: chapter 9's task (2-digit addition, character tokenizer) and ``rl.GRPOConfig`` defaults
(64 prompts × G = 8 completions, 8 new tokens, μ = 1, β = 0), a freshly initialised policy of each size
(``rl.lm.policy_config(size=...)``: the work per step does not depend on what the model knows, except
through when completions end, so a fresh model is the worst case: it rarely emits EOS early). Three warm-up steps,
then ``--steps`` timed steps (CUDA synchronised before and after).

Model FLOPs per step (an estimate, the usual 2N per token forward and 4N backward, N the parameters
without the embeddings, attention's own FLOPs left out): sampling 2·N·B·(P + L), scoring forward 2·N·B·(P + L),
backward 4·N·B·(P + L), with B completions, P prompt tokens, L new tokens. MFU = FLOPs / wall / peak,
with ``--peak-tflops`` the device's dense peak in the step's precision (float32 here; default 67 TFLOP/s,
an H100/H200 SXM's FP32 peak without TF32). At these sizes the step is bound by kernel launches, not by arithmetic,
so the MFU is tiny: that is the measurement, and the reason a larger model costs little more per step.

    python benchmarks/grpo_step_gpu.py                 # on rl.get_device() (CUDA when present)
    RLBOOK_DEVICE=cpu python benchmarks/grpo_step_gpu.py --steps 5
"""

from __future__ import annotations

import argparse
import platform
import time


def main(argv=None) -> list[dict]:
    import torch
    import transformers

    import rlbook as rl

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=15)
    parser.add_argument("--sizes", nargs="+", default=["small", "full"], choices=["small", "full"])
    parser.add_argument("--peak-tflops", type=float, default=67.0)
    args = parser.parse_args(argv)
    device = rl.get_device()
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or platform.machine()
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, python {platform.python_version()}, "
          f"device {device} ({name}), threads {torch.get_num_threads()}, peak {args.peak_tflops:g} TFLOP/s (MFU's denominator)")
    task, tok = rl.lm.AdditionTask(num_digits=2, held_out_fraction=0.1, seed=0), rl.lm.build_char_tokenizer()
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    rows = []
    print(f"{'size':<7}{'params':>10}{'ms/step':>10}{'completions/s':>15}{'model TFLOP/step':>18}{'MFU':>9}")
    for size in args.sizes:
        policy = rl.lm.build_policy(rl.lm.policy_config(tok, size=size), seed=0, device=device)
        config = rl.GRPOConfig(num_steps=3, seed=0, device=str(device))
        rl.train_grpo(policy, tok, task, config, progress=False)  # warm-up: allocator, kernels
        sync()
        start = time.perf_counter()
        rl.train_grpo(policy, tok, task, rl.GRPOConfig(num_steps=args.steps, seed=1, device=str(device)), progress=False)
        sync()
        seconds = (time.perf_counter() - start) / args.steps
        n = rl.lm.count_parameters(policy) - policy.transformer.wte.weight.numel() - policy.transformer.wpe.weight.numel()
        batch = config.prompts_per_step * config.group_size
        tokens = batch * (len(task.held_out_problems(1)[0].prompt) + 1 + config.max_new_tokens)  # BOS + prompt + L
        flops = (2 + 2 + 4) * n * tokens
        row = dict(size=size, params=rl.lm.count_parameters(policy), ms_per_step=1000 * seconds,
                   completions_per_s=batch / seconds, tflop_per_step=flops / 1e12,
                   mfu=flops / seconds / (args.peak_tflops * 1e12))
        rows.append(row)
        print(f"{size:<7}{row['params']:>10,}{row['ms_per_step']:>10.1f}{row['completions_per_s']:>15,.0f}"
              f"{row['tflop_per_step']:>18.4f}{row['mfu']:>9.2%}")
    return rows


if __name__ == "__main__":
    main()
