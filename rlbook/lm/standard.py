"""The tokenizer- and model-facing pieces of a course-standard SFT / GRPO loop.

Course assignments on GRPO (Stanford CS336 assignment 5) and libraries such as TRL and verl lay a
batch out as one right-padded row per (prompt, output) pair and score it with a single forward
pass. Two functions build that layout and read the log-probabilities off it:

* :func:`tokenize_prompt_and_output`: ``input_ids``, ``labels`` (the inputs shifted by one) and
  ``response_mask`` (True where the label is an output token), each (B, L − 1);
* :func:`get_response_log_probs`: log π_θ(label_t | input_{≤t}) for every column, optionally with
  the entropy of the next-token distribution.

The book's own loop uses left-padded prompts and :func:`rlbook.lm.completion_log_probs`, which
shares a prompt's encoding among its G completions; on the same tokens the two give the same
numbers (the tests check it). The tensors then go to the tensor-only steps of :mod:`rlbook.steps`.
"""

from __future__ import annotations

import torch

from rlbook.lm.logprobs import token_log_probs
from rlbook.losses import entropy_from_logits

__all__ = ["tokenize_prompt_and_output", "get_response_log_probs"]


def tokenize_prompt_and_output(prompt_strs, output_strs, tokenizer) -> dict:
    """Tokenize (prompt, output) pairs into right-padded inputs, shifted labels and a response mask.

    Row i is ids_i = enc(prompt_i) ‖ enc(output_i) (each encoded separately, without special
    tokens), right-padded with ``tokenizer.pad_token_id`` to L = max_i |ids_i|. Then

        input_ids = ids[:, :-1],   labels = ids[:, 1:],
        response_mask[i, t] = True  iff  labels[i, t] is a token of output_i.

    Position t of ``labels`` is what the model must predict after reading ``input_ids[:, :t+1]``;
    the first prompt token is never a label. Add a BOS token to the prompt string yourself if the
    model expects one (the book's prompts start with ``<s>``).

    Source: Stanford CS336 (2025) assignment 5, ``tokenize_prompt_and_output``; the next-token
    layout of causal LM training (Radford et al. 2019, GPT-2).

    Args:
        prompt_strs: list of B prompt strings.
        output_strs: list of B output strings (the responses), aligned with ``prompt_strs``.
        tokenizer: a ``transformers`` tokenizer with a ``pad_token_id``.
    Returns:
        dict with ``input_ids`` (B, L − 1) long, ``labels`` (B, L − 1) long, ``response_mask``
        (B, L − 1) bool (False on prompt labels and on padding).
    Gradient:
        none (token ids).
    Raises:
        ValueError: the lists are empty, differ in length or are not lists of strings; the
            tokenizer has no pad id; every row has fewer than 2 tokens (L − 1 = 0).
    Example:
        >>> from rlbook.lm.tokenizer import build_char_tokenizer
        >>> tok = build_char_tokenizer()     # '0'..'9' -> 4..13, '+' -> 14, '=' -> 15
        >>> tokenize_prompt_and_output(["1+2="], ["3"], tok)["labels"]
        tensor([[14,  6, 15,  7]])
    """
    for name, strs in (("prompt_strs", prompt_strs), ("output_strs", output_strs)):
        if isinstance(strs, str) or not all(isinstance(x, str) for x in strs):
            raise ValueError(f"`{name}` must be a list of strings; got {type(strs).__name__}")
    if len(prompt_strs) == 0 or len(prompt_strs) != len(output_strs):
        raise ValueError(f"`prompt_strs` and `output_strs` must be non-empty lists of the same length; "
                         f"got {len(prompt_strs)} and {len(output_strs)}")
    pad = getattr(tokenizer, "pad_token_id", None)
    if pad is None:
        raise ValueError("`tokenizer` must define pad_token_id (rows are right-padded with it)")
    prompts = tokenizer(list(prompt_strs), add_special_tokens=False).input_ids
    outputs = tokenizer(list(output_strs), add_special_tokens=False).input_ids
    width = max(len(p) + len(o) for p, o in zip(prompts, outputs))
    if width < 2:
        raise ValueError("every (prompt, output) pair encodes to fewer than 2 tokens; nothing to predict")
    ids = torch.full((len(prompts), width), int(pad), dtype=torch.long)
    is_output = torch.zeros((len(prompts), width), dtype=torch.bool)
    for i, (p, o) in enumerate(zip(prompts, outputs)):
        ids[i, : len(p) + len(o)] = torch.tensor(list(p) + list(o), dtype=torch.long)
        is_output[i, len(p) : len(p) + len(o)] = True
    return {"input_ids": ids[:, :-1], "labels": ids[:, 1:], "response_mask": is_output[:, 1:]}


def get_response_log_probs(model, input_ids, labels, return_token_entropy: bool = False) -> dict:
    """Per-token log π_θ(labels | inputs) from one forward pass (and the next-token entropy).

    log_probs[i, t] = log_softmax(logits[i, t])[labels[i, t]],  logits = model(input_ids).logits
    token_entropy[i, t] = −Σ_v π(v) log π(v),  π = softmax(logits[i, t])

    No masking: every column is scored, padding included; reduce with ``response_mask`` (for
    example :func:`rlbook.sft_microbatch_train_step`). Right padding is harmless under causal
    attention: a column never sees the columns after it, so no attention mask is passed. The
    log-softmax runs in float32 whatever the model's dtype.

    Source: Stanford CS336 (2025) assignment 5, ``get_response_log_probs``; book eq. (lm-logprob).

    Args:
        model: a causal LM; ``model(input_ids=...)`` returns ``.logits`` (B, T, V) (or the tensor).
        input_ids: (B, T) long token ids.
        labels: (B, T) long ids in [0, V), the next token of each column.
        return_token_entropy: also return ``token_entropy``.
    Returns:
        dict with ``log_probs`` (B, T) float32 nats, and ``token_entropy`` (B, T) float32 nats
        when asked.
    Gradient:
        through the model's parameters (wrap in ``torch.no_grad()`` for an old or reference model).
        The entropy carries a gradient too; detach it if it is only logged.
    Raises:
        ValueError: ``input_ids`` / ``labels`` not 2-D integer tensors of the same shape, labels out
            of [0, V), or logits of the wrong shape.
    """
    for name, x in (("input_ids", input_ids), ("labels", labels)):
        if not isinstance(x, torch.Tensor) or x.dim() != 2 or x.dtype.is_floating_point or x.dtype == torch.bool:
            raise ValueError(f"`{name}` must be a 2-D integer tensor (B, T) of token ids")
    if tuple(labels.shape) != tuple(input_ids.shape):
        raise ValueError(f"`labels` must have the shape of `input_ids` {tuple(input_ids.shape)}; got {tuple(labels.shape)}")
    out = model(input_ids=input_ids)
    logits = getattr(out, "logits", out)  # (B, T, V)
    if not isinstance(logits, torch.Tensor) or logits.dim() != 3 or tuple(logits.shape[:2]) != tuple(input_ids.shape):
        shape = tuple(logits.shape) if isinstance(logits, torch.Tensor) else type(logits).__name__
        raise ValueError(f"`model` must return logits of shape (B, T, V) = {tuple(input_ids.shape)} + (V,); got {shape}")
    result = {"log_probs": token_log_probs(logits, labels.to(logits.device))}
    if return_token_entropy:
        result["token_entropy"] = entropy_from_logits(logits)
    return result
