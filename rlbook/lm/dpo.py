"""Preference pairs on a language model: the batch layout, sequence log-probabilities, CS336's DPO loss.

A preference pair is (prompt x, chosen response y_c, rejected response y_r). The batch layout is
the one TRL's ``DataCollatorForPreference`` builds, so the same tensors feed rlbook's losses, a
reward model and TRL's trainers:

* rows 0 … B−1 hold x ‖ y_c, rows B … 2B−1 hold x ‖ y_r, right-padded with the pad id;
* ``attention_mask`` is True on real tokens, ``completion_mask`` True on the response tokens
  (EOS included), False on the prompt and on padding.

The sequence log-probability log π(y|x) = Σ_t log π(y_t | x, y_<t) sums over the response tokens
only. Prompt tokens would add log π(x) to both responses of a pair, and it cancels in every
pairwise loss (CS336's reference solution scores the whole sequence; the loss is the same).
"""

from __future__ import annotations

import torch

from rlbook.lm.logprobs import token_log_probs
from rlbook.preferences import dpo_loss

__all__ = ["encode_preference_pairs", "sequence_log_probs", "compute_per_instance_dpo_loss"]


def _check_strings(name: str, values, count: int | None = None) -> list[str]:
    if isinstance(values, str) or not all(isinstance(v, str) for v in values):
        raise ValueError(f"`{name}` must be a list of strings")
    values = list(values)
    if not values or (count is not None and len(values) != count):
        raise ValueError(f"`{name}` must hold {count if count is not None else 'at least one'} strings; got {len(values)}")
    return values


def encode_preference_pairs(tokenizer, prompts, chosen, rejected, add_bos: bool = True, add_eos: bool = True) -> dict:
    """Tokenize B preference pairs into TRL's layout: [x ‖ y_c rows; x ‖ y_r rows], right-padded.

    Each text is encoded without special tokens; the prompt gets ``tokenizer.bos_token_id`` in
    front (``add_bos``) and each response ``tokenizer.eos_token_id`` at its end (``add_eos``), as
    the book's sampler writes them.

    Source: TRL, ``trl.trainer.dpo_trainer.DataCollatorForPreference`` (the same layout).

    Args:
        tokenizer: a ``transformers`` tokenizer with pad (and bos / eos) ids.
        prompts: B prompt strings, e.g. ``"07+42="``.
        chosen, rejected: B response strings each (without EOS).
        add_bos, add_eos: add the special tokens as described.
    Returns:
        dict of (2B, L) tensors: ``input_ids`` long, ``attention_mask`` bool, ``completion_mask``
        bool (True on response tokens).
    Raises:
        ValueError: the lists are not strings, are empty or differ in length; a response encodes to
            no tokens; the tokenizer lacks a needed special id.
    """
    prompts = _check_strings("prompts", prompts)
    chosen = _check_strings("chosen", chosen, len(prompts))
    rejected = _check_strings("rejected", rejected, len(prompts))
    ids = {}
    for name in ("pad_token_id",) + (("bos_token_id",) if add_bos else ()) + (("eos_token_id",) if add_eos else ()):
        if getattr(tokenizer, name, None) is None:
            raise ValueError(f"`tokenizer` has no {name}")
        ids[name] = int(getattr(tokenizer, name))
    bos = [ids["bos_token_id"]] if add_bos else []
    eos = [ids["eos_token_id"]] if add_eos else []
    prompt_ids = tokenizer(prompts, add_special_tokens=False).input_ids
    rows, masks = [], []
    for name, responses in (("chosen", chosen), ("rejected", rejected)):
        for p, r in zip(prompt_ids, tokenizer(responses, add_special_tokens=False).input_ids):
            response = list(r) + eos
            if not response:
                raise ValueError(f"`{name}` contains a response that encodes to no tokens")
            rows.append(bos + list(p) + response)
            masks.append([False] * (len(bos) + len(p)) + [True] * len(response))
    width = max(len(r) for r in rows)
    input_ids = torch.tensor([r + [ids["pad_token_id"]] * (width - len(r)) for r in rows], dtype=torch.long)
    attention_mask = torch.tensor([[True] * len(r) + [False] * (width - len(r)) for r in rows])
    completion_mask = torch.tensor([m + [False] * (width - len(m)) for m in masks])
    return {"input_ids": input_ids, "attention_mask": attention_mask, "completion_mask": completion_mask}


def sequence_log_probs(model, input_ids, attention_mask, completion_mask) -> torch.Tensor:
    """log π(y|x) of each row: the sum of the response tokens' log-probabilities, one forward pass.

    log π(y|x) = Σ_t completion_mask_t · log softmax(logits_{t−1})[input_ids_t]

    Source: Rafailov et al. 2023, arXiv:2305.18290, §4 (sequence likelihoods of an autoregressive LM).

    Args:
        model: a causal LM returning ``.logits`` (N, L, V).
        input_ids: (N, L) long, right-padded. attention_mask: (N, L) bool.
        completion_mask: (N, L) bool, True on response tokens (never on column 0).
    Returns:
        (N,) sequence log-probabilities, nats, float32 (float64 for a float64 model).
    Gradient:
        through the model's parameters (wrap in ``torch.no_grad()`` for a reference model).
    Raises:
        ValueError: the three tensors differ in shape, are not 2-D, or column 0 is a response token.
    """
    if not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2:
        raise ValueError("`input_ids` must be a 2-D tensor (N, L) of token ids")
    for name, mask in (("attention_mask", attention_mask), ("completion_mask", completion_mask)):
        if not isinstance(mask, torch.Tensor) or tuple(mask.shape) != tuple(input_ids.shape):
            raise ValueError(f"`{name}` must have the shape of `input_ids` {tuple(input_ids.shape)}")
    if completion_mask[:, 0].any():
        raise ValueError("`completion_mask` must be False in column 0 (a response token needs a prompt before it)")
    logits = model(input_ids=input_ids, attention_mask=attention_mask.long(), use_cache=False).logits  # (N, L, V)
    per_token = token_log_probs(logits[:, :-1], input_ids[:, 1:])  # (N, L−1): column t predicts token t+1
    return torch.where(completion_mask[:, 1:].bool(), per_token, torch.zeros_like(per_token)).sum(-1)


def compute_per_instance_dpo_loss(lm, lm_ref, tokenizer, beta: float, prompt: str, response_chosen: str,
                                  response_rejected: str) -> torch.Tensor:
    """The DPO loss of one preference pair, with the signature of Stanford CS336's alignment assignment.

    loss = −log σ(β·[(log π_θ(y_c|x) − log π_ref(y_c|x)) − (log π_θ(y_r|x) − log π_ref(y_r|x))])

    The pair is laid out by :func:`encode_preference_pairs` (BOS + prompt; response + EOS: the
    book's format, where CS336 uses its Alpaca template) and scored by
    :func:`sequence_log_probs` over the response tokens; :func:`rlbook.dpo_loss` does the rest.

    Source: Stanford CS336 (2025) assignment 5 (alignment), ``compute_per_instance_dpo_loss``;
    Rafailov et al. 2023, arXiv:2305.18290, eq. 7.

    Args:
        lm: the policy π_θ (a causal LM). lm_ref: the frozen reference π_ref.
        tokenizer: their tokenizer.
        beta: β > 0.
        prompt: the prompt string x. response_chosen, response_rejected: y_c and y_r (without EOS).
    Returns:
        0-d loss tensor, nats.
    Gradient:
        through ``lm`` only (``lm_ref`` is scored under ``torch.no_grad()``).
    Raises:
        ValueError: β ≤ 0, or inputs as :func:`encode_preference_pairs`.
    """
    batch = encode_preference_pairs(tokenizer, [prompt], [response_chosen], [response_rejected])
    device = next(lm.parameters()).device
    batch = {k: v.to(device) for k, v in batch.items()}
    policy = sequence_log_probs(lm, **batch)  # (2,): chosen, rejected
    with torch.no_grad():
        ref = sequence_log_probs(lm_ref, **batch).to(policy.dtype)
    return dpo_loss(policy[:1], policy[1:], ref[:1], ref[1:], beta)[0]
