"""Shared helpers of the language-model tests (not a test module: pytest collects only ``test_*.py``)."""

from __future__ import annotations

import torch

from rlbook.lm.tokenizer import encode_prompts


def encode_seen(tokenizer, seen):
    """Recorded (prompt, completion) texts re-encoded, one prompt per row.

    Returns ``(prompt_ids, prompt_mask, completion_ids, completion_mask)``: the prompts as
    :func:`rlbook.lm.encode_prompts` encodes them, the completions' ids right-padded with EOS (B, T)
    and their (B, T) bool mask.
    """
    ids = [tokenizer(o, add_special_tokens=False).input_ids for _, o in seen]
    T = max(len(i) for i in ids)
    completion_ids = torch.full((len(ids), T), tokenizer.eos_token_id, dtype=torch.long)
    mask = torch.zeros(len(ids), T, dtype=torch.bool)
    for row, i in enumerate(ids):
        completion_ids[row, : len(i)] = torch.tensor(i)
        mask[row, : len(i)] = True
    prompt_ids, prompt_mask = encode_prompts(tokenizer, [p for p, _ in seen])
    return prompt_ids, prompt_mask, completion_ids, mask


# Two float32 computations that should agree: on the CPU (one machine, the same thread count) the
# book's code gives the same bits, and the tests say so. On a GPU, cuBLAS picks its matmul kernel by
# shape (a batch of 1 and a batch of 256 sum in different orders) and the embedding backward adds
# with atomics (in any order), so equal runs agree only to float32 rounding: relative 1e-4 (float32
# epsilon is 1.2e-7; a sum of 10^3 terms in another order moves it by ~1e-6). Weights after a few
# AdamW steps need an absolute 1e-4: Adam divides by sqrt(v), so where a gradient is itself at the
# rounding level its step (size up to lr = 3e-3) carries that rounding, relatively, into the weight.
# Measured on an H200 (torch 2.11), tests/test_grpo_reward_model.py after 3 GRPO steps: in two runs 3
# and 1 of 4096 entries of one matrix differed, by at most 1.7e-5 and 1.5e-4; every logged metric
# agreed within rtol 1e-4. So weights get GPU_WEIGHT_ATOL = 5e-4, a sixth of one Adam step: a real
# divergence (another token sampled, an update of another sign) moves entries by whole steps.
GPU_RTOL, GPU_ATOL, GPU_WEIGHT_ATOL = 1e-4, 1e-5, 5e-4


def bit_identical_here() -> bool:
    """True when the run's device (``rl.get_device()``) gives the same bits for the same computation
    in another batch layout or on a second run: the CPU."""
    import rlbook as rl

    return rl.get_device().type == "cpu"


def assert_same_numbers(actual, expected, err_msg: str = "", atol: float = GPU_ATOL) -> None:
    """Bit-for-bit equal on the CPU; equal within float32 rounding (``GPU_RTOL``, ``atol``) elsewhere.
    NaN equals NaN. Takes tensors (any device) or arrays."""
    import numpy as np

    def host(x):
        return x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)

    if bit_identical_here():
        np.testing.assert_array_equal(host(actual), host(expected), err_msg=err_msg)
    else:
        np.testing.assert_allclose(host(actual), host(expected), rtol=GPU_RTOL, atol=atol, err_msg=err_msg)
