"""Sampling G completions per prompt with the KV cache: a lean loop, not ``generate``.

One forward over the prompts fills the key/value cache (each prompt encoded once, its cache then
repeated for the G samples); then each step feeds only the newest token. No generation config, no
logits processors, no stopping-criteria objects: the loop is the algorithm written out, and at
small batches (where ``generate`` is overhead-bound; see chapter 8) it is several times faster.
Special tokens other than EOS are forbidden (logit −∞); rows that have emitted EOS keep being fed
padding, and the loop stops when every row has finished.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rlbook import _checks
from rlbook.config import same_device
from rlbook.lm import gpt2_fast
from rlbook.lm.logprobs import cache_kwarg, output_cache, padding_kwargs, position_ids_from_mask

__all__ = ["Completions", "completion_mask_from_eos", "sample_completions", "decode_completions"]


@dataclass
class Completions:
    """A batch of sampled completions, G consecutive rows per prompt (group-contiguous).

    Attributes:
        prompt_ids: (B, P) long, each prompt repeated G times.
        prompt_mask: (B, P) bool, False on left padding.
        completion_ids: (B, T) long; padding after the first EOS.
        completion_mask: (B, T) bool; True up to and including the first EOS.
        log_probs: (B, T) float32 log-probs of the sampled tokens under the sampling distribution
            softmax(logits / temperature) with forbidden tokens removed; 0 where masked.
        texts: B decoded completions (special tokens kept), filled by :func:`sample_completions`
            when a tokenizer is passed.
    """

    prompt_ids: torch.Tensor
    prompt_mask: torch.Tensor
    completion_ids: torch.Tensor
    completion_mask: torch.Tensor
    log_probs: torch.Tensor
    texts: list[str] | None = None

    @property
    def lengths(self) -> torch.Tensor:
        """(B,) completion lengths in tokens, EOS included."""
        return self.completion_mask.sum(dim=-1)


def completion_mask_from_eos(completion_ids, eos_token_id: int) -> torch.Tensor:
    """Mask of the tokens that belong to each completion: up to and including the first EOS.

    m_t = 1[no EOS among tokens 0 .. t−1]

    A row without EOS (truncated at the budget) is all True.

    Args:
        completion_ids: (B, T) integer ids.
        eos_token_id: the end-of-sequence id.
    Returns:
        (B, T) bool.
    Raises:
        ValueError: ``completion_ids`` is not 2-D integer.
    Example:
        >>> completion_mask_from_eos(torch.tensor([[5, 2, 7, 2], [5, 5, 5, 5]]), eos_token_id=2)
        tensor([[ True,  True, False, False],
                [ True,  True,  True,  True]])
    """
    ids = torch.as_tensor(completion_ids)
    if ids.dim() != 2 or ids.dtype.is_floating_point or ids.dtype == torch.bool:
        raise ValueError(f"`completion_ids` must be a 2-D integer tensor (B, T); got shape {tuple(ids.shape)}, dtype {ids.dtype}")
    is_eos = (ids == int(eos_token_id)).long()
    eos_before = is_eos.cumsum(dim=-1) - is_eos  # number of EOS strictly before t
    return eos_before == 0


def _sample_next(logits, forbidden, temperature, generator, greedy, logits_processor=None):
    """Pick one token per row; return (tokens (N,), their log-probs (N,) in float32)."""
    logits = logits.float()
    if logits_processor is not None:
        logits = logits_processor(logits).float()
    if forbidden is not None:
        logits[:, forbidden] = float("-inf")
    if greedy:
        tokens = logits.argmax(dim=-1)
        log_p = torch.log_softmax(logits, dim=-1)
    else:
        log_p = torch.log_softmax(logits / temperature, dim=-1)
        probs = log_p.exp()
        if generator is not None and not same_device(generator.device, probs.device):  # a CPU generator, CUDA logits
            tokens = torch.multinomial(probs.cpu(), 1, generator=generator).squeeze(-1).to(probs.device)
        else:
            tokens = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
    return tokens, log_p.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)


@torch.no_grad()
def sample_completions(
    model,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor | None = None,
    *,
    num_samples: int = 1,
    max_new_tokens: int = 8,
    eos_token_id: int,
    pad_token_id: int = 0,
    forbidden_ids=(),
    temperature: float = 1.0,
    greedy: bool = False,
    generator: torch.Generator | None = None,
    tokenizer=None,
    logits_processor=None,
    stop_token_ids=(),
) -> Completions:
    """Sample ``num_samples`` completions for every prompt with the model's KV cache.

    o_t ~ softmax(logits(q, o_<t) / τ) over the allowed tokens, until EOS or ``max_new_tokens``.

    Source: book §(lm-sampling); the autoregressive policy π_θ(o|q) = Π_t π_θ(o_t | q, o_<t)
    (Shao et al. 2024, arXiv:2402.03300, §2 notation: question q, output o).

    Args:
        model: a causal LM (``forward(input_ids, cache=..., use_cache=True)``, or ``past_key_values=...``
            in transformers 4 and custom models: see :func:`rlbook.lm.logprobs.cache_kwarg`).
        prompt_ids: (N, P) long prompt ids (left-padded if widths differ).
        prompt_mask: (N, P) bool, False on padding; None = no padding.
        num_samples: G ≥ 1; output row ``i*G + g`` is sample g of prompt i.
        max_new_tokens: budget T ≥ 1, EOS included.
        eos_token_id: ends a completion.
        pad_token_id: written after a row's EOS.
        forbidden_ids: token ids never sampled (see ``rlbook.lm.forbidden_token_ids``).
        temperature: τ > 0 (ignored when ``greedy``).
        greedy: take the argmax instead of sampling (for greedy accuracy).
        generator: a ``torch.Generator`` for reproducible samples (CPU or the model's device).
        tokenizer: if given, ``texts`` are decoded with special tokens kept.
        logits_processor: None, or a callable (N, V) float32 logits -> (N, V) logits applied to each
            step's logits before the forbidden ids and the temperature (an inference engine's own
            distribution: :class:`rlbook.MismatchedSampler` passes its rounded, truncated log μ).
        stop_token_ids: ids besides EOS that end a completion, kept as its last token (a tool call's
            closing bracket ends a multi-turn agent's turn); the completion mask then covers the
            tokens up to and including the first EOS or stop id.
    Returns:
        :class:`Completions` with B = N·G rows and T ≤ ``max_new_tokens`` columns (trimmed to
        the longest completion).
    Gradient:
        none (runs under ``torch.no_grad``).
    Raises:
        ValueError: bad shapes, num_samples < 1, max_new_tokens < 1, temperature ≤ 0, EOS
            among the forbidden ids, or a ``logits_processor`` that is not callable.
    """
    if not isinstance(prompt_ids, torch.Tensor) or prompt_ids.dim() != 2 or prompt_ids.numel() == 0:
        raise ValueError("`prompt_ids` must be a non-empty 2-D tensor (N, P) of token ids")
    for name, value in (("num_samples", num_samples), ("max_new_tokens", max_new_tokens)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"`{name}` must be a positive integer; got {value!r}")
    _checks.check_positive("temperature", temperature)
    if logits_processor is not None and not callable(logits_processor):
        raise ValueError(f"`logits_processor` must be None or callable((N, V) logits) -> (N, V); got "
                         f"{type(logits_processor).__name__}")
    forbidden = sorted({int(i) for i in forbidden_ids})
    if int(eos_token_id) in forbidden:
        raise ValueError("`forbidden_ids` must not contain `eos_token_id` (no completion could end)")
    stops = sorted({int(i) for i in stop_token_ids} - {int(eos_token_id)})
    if set(stops) & set(forbidden):
        raise ValueError(f"`stop_token_ids` {stops} must not be among `forbidden_ids` (they could never end a completion)")
    device = next(model.parameters()).device
    if prompt_mask is None:
        prompt_mask = torch.ones_like(prompt_ids, dtype=torch.bool)
    prompt_mask = _checks.check_bool_like("prompt_mask", prompt_mask, prompt_ids.shape)
    prompt_ids, prompt_mask = prompt_ids.to(device), prompt_mask.to(device)
    G, B = num_samples, prompt_ids.shape[0] * num_samples
    forbidden_t = torch.tensor(forbidden, dtype=torch.long, device=device) if forbidden else None
    stops_t = torch.tensor(stops, dtype=torch.long, device=device) if stops else None
    decode, logits = _start_decoding(model, prompt_ids, prompt_mask, G, max_new_tokens)  # logits: (B, V)
    tokens = torch.full((B, max_new_tokens), int(pad_token_id), dtype=torch.long, device=device)
    log_probs = torch.zeros((B, max_new_tokens), dtype=torch.float32, device=device)
    finished = torch.zeros(B, dtype=torch.bool, device=device)
    steps = 0
    for t in range(max_new_tokens):
        tok, logp = _sample_next(logits, forbidden_t, temperature, generator, greedy, logits_processor)
        tok = torch.where(finished, torch.full_like(tok, int(pad_token_id)), tok)
        tokens[:, t] = tok
        log_probs[:, t] = torch.where(finished, torch.zeros_like(logp), logp)
        finished |= tok == int(eos_token_id)
        if stops_t is not None:
            finished |= torch.isin(tok, stops_t)
        steps = t + 1
        if t + 1 == max_new_tokens or bool(finished.all()):
            break
        feed = torch.where(finished, torch.full_like(tok, int(eos_token_id)), tok)  # no pad ids into the model
        logits = decode(feed)  # one new token per row through the KV cache
    tokens, log_probs = tokens[:, :steps], log_probs[:, :steps]
    completion_mask = completion_mask_from_eos(tokens, eos_token_id)
    if stops_t is not None:  # ended by EOS or by a stop id, whichever came first
        ended = (tokens == int(eos_token_id)) | torch.isin(tokens, stops_t)
        completion_mask = (ended.long().cumsum(dim=-1) - ended.long()) == 0
    ids, mask = prompt_ids.repeat_interleave(G, dim=0), prompt_mask.repeat_interleave(G, dim=0)  # (B, P)
    result = Completions(ids, mask, tokens, completion_mask, log_probs * completion_mask)
    if tokenizer is not None:
        result.texts = decode_completions(tokenizer, tokens, completion_mask)
    return result


_NO_CACHE = ("`model` returned no key/value cache (or an empty one) although use_cache=True was asked "
             "(gradient checkpointing in training mode turns the cache off): call model.eval() or "
             "turn checkpointing off (model.activation_checkpointing_disable() in recent transformers, "
             "model.gradient_checkpointing_disable() before) before sampling")


def _cached_length(past) -> int | None:
    """Positions held by a key/value cache: 0 for None or an empty cache (transformers 4 returns None,
    5.x an empty ``DynamicCache``, when gradient checkpointing turns the cache off in training mode);
    None for a cache of a kind we cannot measure (a custom model's own state)."""
    if past is None:
        return 0
    if hasattr(past, "get_seq_length"):
        return int(past.get_seq_length())
    if isinstance(past, (tuple, list)) and past and isinstance(past[0], (tuple, list)):
        return int(past[0][0].shape[-2])  # legacy tuple of per-layer (keys, values)
    return None


def _start_decoding(model, prompt_ids, prompt_mask, num_samples, max_new_tokens):
    """Encode the N prompts once; return (decode, logits): decode(tokens (B,)) -> next logits (B, V).

    Each prompt's key/value cache is repeated for its G = ``num_samples`` rows (B = N·G). A plain
    GPT-2 runs through :func:`rlbook.lm.gpt2_fast.gpt2_forward` with a preallocated cache
    (:class:`_GPT2Decoder`); any other model through its own ``forward`` and cache object.
    """
    padded = not bool(prompt_mask.all())
    mask = prompt_mask.repeat_interleave(num_samples, dim=0)  # (B, P)
    if gpt2_fast.supported(model) and not padded:
        logits, prefix = gpt2_fast.gpt2_prefill(model, prompt_ids)  # (N, V), per layer (N, H, P, d)
        return _GPT2Decoder(model, prefix, mask, max_new_tokens), logits.repeat_interleave(num_samples, dim=0)
    kwargs = padding_kwargs(prompt_mask) if padded else {}
    out = model(input_ids=prompt_ids, use_cache=True, **kwargs)  # (N, P)
    past, logits = output_cache(out), out.logits[:, -1, :]  # logits: (N, V)
    if _cached_length(past) not in (None, prompt_ids.shape[1]):  # decoding without it would sample garbage
        raise ValueError(_NO_CACHE)
    if gpt2_fast.supported(model):  # padded prompts: the model's own prefill, then our decoding
        prefix = [(layer.keys, layer.values) for layer in past.layers]
        return _GPT2Decoder(model, prefix, mask, max_new_tokens), logits.repeat_interleave(num_samples, dim=0)
    if num_samples > 1:
        if hasattr(past, "batch_repeat_interleave"):
            past.batch_repeat_interleave(num_samples)
            logits = logits.repeat_interleave(num_samples, dim=0)
        else:  # a cache we cannot repeat: encode every row
            ids = prompt_ids.repeat_interleave(num_samples, dim=0)
            kwargs = padding_kwargs(mask) if padded else {}
            out = model(input_ids=ids, use_cache=True, **kwargs)
            past, logits = output_cache(out), out.logits[:, -1, :]
    state = {"past": past, "attn": mask.long(), "pos": position_ids_from_mask(mask)[:, -1:] + 1}
    cache_name = cache_kwarg(model)

    def decode(feed):
        kwargs = {}
        if padded:  # the mask covers the cached positions and the new one
            state["attn"] = torch.cat([state["attn"], torch.ones_like(state["attn"][:, :1])], dim=1)
            kwargs = {"attention_mask": state["attn"], "position_ids": state["pos"]}
            state["pos"] = state["pos"] + 1
        cached = _cached_length(state["past"])  # before the call: a cache object grows in place
        kwargs[cache_name] = state["past"]
        out = model(input_ids=feed[:, None], use_cache=True, **kwargs)
        if cached is not None and _cached_length(output_cache(out)) != cached + 1:  # as at the prefill
            raise ValueError(_NO_CACHE)
        state["past"] = output_cache(out)
        return out.logits[:, -1, :]

    return decode, logits


class _GPT2Decoder:
    """One-token decoding steps of a plain GPT-2 with a preallocated key/value cache.

    The prompts' keys and values (N rows) are copied once into (B, H, P + T, d) buffers, each
    repeated for its G rows; every step writes the new token's keys and values in place and
    attends over the filled part (left padding masked out). No cache object is grown by
    concatenation, and no attention mask is built for the unpadded case.
    """

    def __init__(self, model, prefix, mask, max_new_tokens):
        self.model = model
        (B, P), N = mask.shape, prefix[0][0].shape[0]
        self.keys, self.values = [], []
        for keys, values in prefix:  # (N, H, P, d) each
            size = (B, keys.shape[1], P + max_new_tokens, keys.shape[3])
            k, v = keys.new_empty(size), values.new_empty(size)
            k[:, :, :P], v[:, :, :P] = keys.repeat_interleave(B // N, dim=0), values.repeat_interleave(B // N, dim=0)
            self.keys.append(k)
            self.values.append(v)
        self.length = P
        self.key_mask = None
        if not bool(mask.all()):
            self.key_mask = torch.cat([mask, mask.new_ones(B, max_new_tokens)], dim=1)[:, None, None, :]
        self.pos = position_ids_from_mask(mask)[:, -1:] + 1  # (B, 1) position of the next token

    def __call__(self, feed):
        L = self.length

        def write(layer, keys, values):  # keys, values: (B, H, 1, d) of the new token
            self.keys[layer][:, :, L : L + 1], self.values[layer][:, :, L : L + 1] = keys, values
            return self.keys[layer][:, :, : L + 1], self.values[layer][:, :, : L + 1]

        mask = None if self.key_mask is None else self.key_mask[..., : L + 1]
        logits = gpt2_fast.gpt2_forward(self.model, feed[:, None], self.pos, write, attn_mask=mask)  # (B, 1, V)
        self.length, self.pos = L + 1, self.pos + 1
        return logits[:, -1]


def decode_completions(tokenizer, completion_ids: torch.Tensor, completion_mask: torch.Tensor) -> list[str]:
    """Decode each row's masked tokens to text, keeping special tokens (so verifiers see them).

    Args:
        tokenizer: a ``transformers`` tokenizer.
        completion_ids: (B, T) long.
        completion_mask: (B, T) bool.
    Returns:
        B strings.
    Raises:
        ValueError: the shapes differ.
    """
    completion_mask = _checks.check_bool_like("completion_mask", completion_mask, completion_ids.shape)
    rows = [[t for t, keep in zip(ids, m) if keep] for ids, m in zip(completion_ids.tolist(), completion_mask.tolist())]
    return tokenizer.batch_decode(rows, skip_special_tokens=False, clean_up_tokenization_spaces=False)
