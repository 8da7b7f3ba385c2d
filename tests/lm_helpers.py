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
