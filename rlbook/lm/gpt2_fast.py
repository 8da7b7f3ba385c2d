"""The forward pass of a GPT-2 written out, for the sampler and the scorer of a tiny model.

``transformers``' ``GPT2LMHeadModel.forward`` is general: cache objects, attention-mask builders,
output classes, hooks. For the book's 0.4 M-parameter model that generality costs about as much as
the arithmetic (a one-token decoding step spends more time in Python than in matrix products). The
function here is the same arithmetic with the model's own weights and nothing else:

    x₀ = W_te[ids] + W_pe[positions]
    per block:  x ← x + W_o · attn(LN₁(x)) ;  x ← x + W₂ · act(W₁ · LN₂(x))
    logits = W_te · LN_f(x)           (tied embeddings; any ``lm_head`` works)

Who attends to what is left to the caller through ``attend(layer, keys, values)``, which returns the
keys and values a layer's queries see: this call's own (a prompt), a cached prefix followed by this
call's (scoring completions after a shared prompt), or a preallocated cache written in place
(decoding). :mod:`rlbook.lm.sampling` and :mod:`rlbook.lm.logprobs` use it when
:func:`supported` says the model is a plain GPT-2 and fall back to ``model.forward`` otherwise;
``tests/test_lm_sampling.py`` checks both give the same log-probabilities and gradients.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["supported", "gpt2_forward", "gpt2_prefill"]


def supported(model) -> bool:
    """True if ``model`` is a ``GPT2LMHeadModel`` whose forward :func:`gpt2_forward` reproduces.

    Excluded: subclasses, cross-attention, the attention-scaling variants
    (``scale_attn_by_inverse_layer_idx``, ``reorder_and_upcast_attn``, unscaled attention), and
    models in training mode (dropout would be skipped here).
    """
    from transformers import GPT2LMHeadModel

    if type(model) is not GPT2LMHeadModel or model.training:
        return False
    c = model.config
    variants = c.add_cross_attention or c.scale_attn_by_inverse_layer_idx or c.reorder_and_upcast_attn
    return bool(c.scale_attn_weights) and not variants


def gpt2_forward(model, input_ids, positions, attend, attn_mask=None, is_causal=False, last_only=False):
    """Logits of a GPT-2 for ``input_ids`` at ``positions``, attending where ``attend`` says.

    Source: Radford et al. 2019 (GPT-2), the pre-LayerNorm transformer block; the same operations,
    in the same order, as ``transformers.GPT2LMHeadModel.forward`` with dropout off.

    Args:
        model: a plain ``GPT2LMHeadModel`` (see :func:`supported`).
        input_ids: (B, L) long.
        positions: position ids, (L,) or (B, L) long.
        attend: callable(layer index, keys (B, H, L, d), values (B, H, L, d)) -> (keys, values) of
            shape (B, H, S, d) that this call's queries attend over (S ≥ L).
        attn_mask: bool mask broadcastable to (B, H, L, S), True = may attend; or None.
        is_causal: causal mask over a square (L = S) attention instead of ``attn_mask``.
        last_only: return the logits of the last position only, (B, 1, V).
    Returns:
        logits (B, L, V) (or (B, 1, V)) in the model's dtype.
    Gradient:
        through the model's parameters (wrap in ``torch.no_grad()`` for sampling).
    """
    tr, config = model.transformer, model.config
    B, L = input_ids.shape
    C, H = config.n_embd, config.n_head
    x = tr.wte(input_ids) + tr.wpe(positions)  # (B, L, C)
    for i, block in enumerate(tr.h):
        attn, mlp = block.attn, block.mlp
        h = F.layer_norm(x, (C,), block.ln_1.weight, block.ln_1.bias, block.ln_1.eps).reshape(B * L, C)
        qkv = torch.addmm(attn.c_attn.bias, h, attn.c_attn.weight).view(B, L, 3, H, C // H)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # (B, H, L, d) each
        k, v = attend(i, k, v)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=is_causal)  # (B, H, L, d)
        a = a.transpose(1, 2).reshape(B * L, C)
        x = x + torch.addmm(attn.c_proj.bias, a, attn.c_proj.weight).view(B, L, C)
        h = F.layer_norm(x, (C,), block.ln_2.weight, block.ln_2.bias, block.ln_2.eps).reshape(B * L, C)
        h = mlp.act(torch.addmm(mlp.c_fc.bias, h, mlp.c_fc.weight))
        x = x + torch.addmm(mlp.c_proj.bias, h, mlp.c_proj.weight).view(B, L, C)
    if last_only:
        x = x[:, -1:]
    return model.lm_head(tr.ln_f(x))


def gpt2_prefill(model, prompt_ids):
    """Encode unpadded prompts once: the next-token logits and every layer's keys and values.

    Args:
        model: a plain ``GPT2LMHeadModel`` (see :func:`supported`).
        prompt_ids: (N, P) long, no padding.
    Returns:
        logits (N, V) at the last prompt position, and a list with one (keys, values) pair of
        shape (N, H, P, d) per layer.
    """
    prefix = []

    def keep(layer, keys, values):
        prefix.append((keys, values))
        return keys, values

    positions = torch.arange(prompt_ids.shape[1], device=prompt_ids.device)
    logits = gpt2_forward(model, prompt_ids, positions, keep, is_causal=True, last_only=True)
    return logits[:, -1], prefix
