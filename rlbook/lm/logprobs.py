"""Scoring completions: per-token log-probabilities (and entropies) of a causal language model.

The logits at position t predict token t + 1, so the log-probability of completion token j is read
from the logits one column to its left. Log-softmax runs in float32 (bf16 logits lose ~3 digits).
"""

from __future__ import annotations

import inspect

import torch

from rlbook import _checks
from rlbook.lm import gpt2_fast
from rlbook.losses import entropy_from_logits

__all__ = ["token_log_probs", "completion_log_probs", "position_ids_from_mask"]


def token_log_probs(logits, tokens) -> torch.Tensor:
    """Log-probability of each chosen token under softmax(logits), in float32.

    log π(a_t) = log_softmax(logits_t)[a_t] = logits_t[a_t] − logsumexp(logits_t)

    Source: book eq. (lm-logprob); the softmax output layer of a causal LM (Radford et
    al. 2019, GPT-2).

    Args:
        logits: (..., T, V) unnormalised scores.
        tokens: (..., T) integer ids in [0, V).
    Returns:
        (..., T) log-probabilities in nats, float32 (float64 if the logits are float64).
    Gradient:
        through ``logits``: ∂/∂logits_t = onehot(a_t) − softmax(logits_t).
    Raises:
        ValueError: shapes do not match, tokens not integers or out of [0, V).
    See also:
        rlbook.losses.entropy_from_logits, completion_log_probs
    Example:
        >>> token_log_probs(torch.zeros(1, 2, 4), torch.tensor([[0, 3]]))
        tensor([[-1.3863, -1.3863]])
    """
    if not isinstance(logits, torch.Tensor) or not torch.is_floating_point(logits):
        raise ValueError("`logits` must be a floating tensor of shape (..., T, V)")
    _checks.check_min_ndim("logits", logits, 2, "(..., T, V)")
    tokens = torch.as_tensor(tokens, device=logits.device)
    if tokens.dtype.is_floating_point or tokens.dtype == torch.bool:
        raise ValueError(f"`tokens` must hold integer ids; got dtype {tokens.dtype}")
    if tuple(tokens.shape) != tuple(logits.shape[:-1]):
        raise ValueError(f"`tokens` must have shape {tuple(logits.shape[:-1])} (logits without V); got {tuple(tokens.shape)}")
    vocab = logits.shape[-1]
    if tokens.numel() and (tokens.min() < 0 or tokens.max() >= vocab):
        raise ValueError(f"`tokens` must be ids in [0, {vocab}); got min {int(tokens.min())}, max {int(tokens.max())}")
    if logits.dtype != torch.float64:
        logits = logits.float()
    log_p = torch.log_softmax(logits, dim=-1)
    return log_p.gather(-1, tokens.long().unsqueeze(-1)).squeeze(-1)


def position_ids_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """Position ids that start at 0 on each row's first real (unpadded) token.

    position_t = (Σ_{s≤t} mask_s) − 1, clamped at 0 on left padding.

    Args:
        attention_mask: (B, L) bool or 0/1.
    Returns:
        (B, L) long.
    """
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def padding_kwargs(mask: torch.Tensor, first_position: int = 0) -> dict:
    """``model(...)`` keyword arguments for left-padded rows: the attention mask and position ids.

    Args:
        mask: (B, L) bool, False on left padding, covering every position the call attends to.
        first_position: keep position ids from this column on (the tokens fed in this call when the
            earlier columns are already in the cache).
    Returns:
        ``{"attention_mask": (B, L) long, "position_ids": (B, L - first_position) long}``.
    """
    return {"attention_mask": mask.long(), "position_ids": position_ids_from_mask(mask)[:, first_position:]}


def cache_kwarg(model) -> str:
    """The keyword under which ``model.forward`` takes a key/value cache.

    ``"cache"`` where the class's ``forward`` declares it (recent transformers 5 releases, in which
    ``past_key_values`` is a deprecated alias due to be removed), otherwise ``"past_key_values"``
    (transformers 4, and a custom model that names no ``cache`` argument). Read from the class, so a
    forward patched onto one instance still gets the name its class understands.

    Args:
        model: a ``torch.nn.Module`` causal LM.
    Returns:
        ``"cache"`` or ``"past_key_values"``.
    """
    try:
        parameters = inspect.signature(type(model).forward).parameters
    except (TypeError, ValueError):  # no signature to read: the long-standing name
        return "past_key_values"
    return "cache" if "cache" in parameters else "past_key_values"


def output_cache(out):
    """The key/value cache a forward returned, under either name.

    Args:
        out: a model's output: transformers' ``ModelOutput`` (field ``cache`` in recent transformers 5
            releases, ``past_key_values`` before) or any object with a ``past_key_values`` attribute.
    Returns:
        The cache object, or None when the output holds none.
    """
    if "cache" in getattr(out, "__dataclass_fields__", ()):  # transformers' ModelOutput with the new name
        return out.cache
    return getattr(out, "past_key_values", None)


def completion_log_probs(
    model,
    prompt_ids: torch.Tensor,
    completion_ids: torch.Tensor,
    prompt_mask: torch.Tensor | None = None,
    temperature: float = 1.0,
    forbidden_ids=(),
    completion_mask: torch.Tensor | None = None,
    with_entropy: bool = False,
):
    """Log π of each completion token (and its entropy) from the model's logits.

    The policy is softmax(logits / temperature) over the allowed tokens (``forbidden_ids`` get
    logit −∞), the same distribution :func:`rlbook.lm.sample_completions` draws from.

    Two layouts of the prompts:

    * one prompt per completion, ``prompt_ids`` (B, P): one forward pass over prompt + completion;
    * one prompt per *group* of G completions, ``prompt_ids`` (N, P) with B = N·G and completion
      row ``i·G + g`` answering prompt i (the layout :func:`rlbook.lm.sample_completions` returns).
      The prompt is then encoded once per group and its key/value cache is shared by the G
      completions (*prefix sharing*). The result, and its gradient, are the same as with each
      prompt repeated G times, because under causal attention a prompt's hidden states never see
      the completion that follows it; the work on prompt tokens drops G-fold. GRPO uses this.

    Args:
        model: a causal LM returning ``.logits`` of shape (B, L, V) (and a cache with
            ``batch_repeat_interleave``, as every ``transformers`` model has, for prefix sharing).
        prompt_ids: (B, P) or (N, P) long, left-padded if widths differ.
        completion_ids: (B, T) long (positions after EOS hold padding; mask them in the loss).
        prompt_mask: same shape as ``prompt_ids``, bool, False on left padding; None = no padding.
        temperature: τ > 0.
        forbidden_ids: token ids the sampler never emits (removed from the softmax here too).
        completion_mask: (B, T) bool; where False the outputs are exactly 0 (and padding is fed to
            the model as EOS, never as the pad id). None = every token counts.
        with_entropy: also return the per-token entropy of the policy.
    Returns:
        log_probs (B, T) float32, and entropy (B, T) float32 when ``with_entropy``, on the model's
        device (ids and masks on another device are moved there first).
    Gradient:
        through the model's parameters (run under ``torch.no_grad()`` for old/reference models).
    Raises:
        ValueError: the completion batch is not a multiple of the prompt batch, a shape is wrong
            (``completion_mask`` must match ``completion_ids``), or temperature ≤ 0.
    """
    _checks.check_positive("temperature", temperature)
    logits, completion_ids, completion_mask = _completion_outputs(model, prompt_ids, completion_ids, prompt_mask,
                                                                  completion_mask)
    forbidden = sorted({int(i) for i in forbidden_ids})
    if temperature != 1.0 or forbidden:
        logits = logits.float() / temperature
        if forbidden:
            # a large finite number, not -inf: the entropy 0·log 0 would be NaN
            logits = logits.index_fill(-1, torch.tensor(forbidden, device=logits.device), -1e9)
    log_probs = token_log_probs(logits, completion_ids)
    entropy = entropy_from_logits(logits) if with_entropy else None
    if completion_mask is not None:
        log_probs = torch.where(completion_mask, log_probs, torch.zeros_like(log_probs))
        entropy = None if entropy is None else torch.where(completion_mask, entropy, torch.zeros_like(entropy))
    return (log_probs, entropy) if with_entropy else log_probs


def _completion_outputs(model, prompt_ids, completion_ids, prompt_mask=None, completion_mask=None):
    """The model's outputs (B, T, ·) at the positions that predict each completion token.

    Checks the layouts of :func:`completion_log_probs` (``prompt_ids`` (B, P) or (N, P) with
    B = N·G), feeds masked completion positions as EOS, and encodes each prompt once per group
    when the model allows it. Shared by the log-prob scorer and :func:`rlbook.lm.critic_values`.

    Returns:
        ``(outputs, completion_ids, completion_mask)``: the ids as fed, the mask checked (or None),
        all on the model's device (the ids and masks are moved there when they are elsewhere).
    Raises:
        ValueError: as :func:`completion_log_probs`.
    """
    for name, x in (("prompt_ids", prompt_ids), ("completion_ids", completion_ids)):
        if not isinstance(x, torch.Tensor) or x.dim() != 2:
            raise ValueError(f"`{name}` must be a 2-D tensor (B, L) of token ids")
    num_prompts, num_completions = prompt_ids.shape[0], completion_ids.shape[0]
    if num_prompts == 0 or num_completions % num_prompts:
        raise ValueError(
            f"`completion_ids` must have batch size {num_prompts} (one completion per prompt) or a multiple "
            f"N·G of it (G completions per prompt); got {num_completions}"
        )
    if completion_ids.shape[1] == 0:
        raise ValueError("`completion_ids` is empty (T = 0); nothing to score")
    device = next((p.device for p in model.parameters()), None) if hasattr(model, "parameters") else None
    if device is not None:  # the ids meet the model's embedding: move them there once (no copy when already there)
        prompt_ids, completion_ids = prompt_ids.to(device), completion_ids.to(device)
    if prompt_mask is not None:
        prompt_mask = _checks.check_bool_like("prompt_mask", prompt_mask, prompt_ids.shape).to(prompt_ids.device)
        if bool(prompt_mask.all()):
            prompt_mask = None
    if completion_mask is not None:
        completion_mask = _checks.check_bool_like("completion_mask", completion_mask, completion_ids.shape)
        completion_mask = completion_mask.to(completion_ids.device)
        eos = getattr(getattr(model, "config", None), "eos_token_id", None)
        if isinstance(eos, int):
            completion_ids = torch.where(completion_mask, completion_ids, torch.full_like(completion_ids, eos))
    group_size = num_completions // num_prompts
    outputs = None
    if group_size > 1:
        outputs = _shared_prefix_logits(model, prompt_ids, completion_ids, prompt_mask, group_size)
    if outputs is None:  # one prompt per completion (or a model without a shareable cache)
        if group_size > 1:
            prompt_ids = prompt_ids.repeat_interleave(group_size, dim=0)
            prompt_mask = None if prompt_mask is None else prompt_mask.repeat_interleave(group_size, dim=0)
        outputs = _full_logits(model, prompt_ids, completion_ids, prompt_mask)
    return outputs, completion_ids, completion_mask


def _full_logits(model, prompt_ids, completion_ids, prompt_mask):
    """(B, T, V) logits predicting each completion token, from one pass over prompt + completion."""
    input_ids = torch.cat([prompt_ids, completion_ids], dim=1)  # (B, P+T)
    kwargs = {}
    if prompt_mask is not None:
        full = torch.cat([prompt_mask, torch.ones_like(completion_ids, dtype=torch.bool)], dim=1)
        kwargs = padding_kwargs(full)
    logits = model(input_ids=input_ids, use_cache=False, **kwargs).logits  # (B, P+T, V)
    return logits[:, prompt_ids.shape[1] - 1 : -1, :]  # column t predicts completion token t


def _shared_prefix_logits(model, prompt_ids, completion_ids, prompt_mask, group_size):
    """(B, T, V) logits with each prompt encoded once and its KV cache repeated G times.

    Returns None when the model's cache cannot be repeated (the caller falls back to one pass).
    """
    if prompt_mask is None and gpt2_fast.supported(model):
        return _shared_prefix_logits_gpt2(model, prompt_ids, completion_ids, group_size)
    kwargs = {}
    if prompt_mask is not None:
        kwargs = padding_kwargs(prompt_mask)
    out = model(input_ids=prompt_ids, use_cache=True, **kwargs)  # (N, P): the prompts, once each
    cache = output_cache(out)
    if not hasattr(cache, "batch_repeat_interleave"):
        return None
    first = out.logits[:, -1:, :].repeat_interleave(group_size, dim=0)  # (B, 1, V) predicts token 0
    T = completion_ids.shape[1]
    if T == 1:
        return first
    cache.batch_repeat_interleave(group_size)  # (N, ...) -> (B, ...), differentiable
    if prompt_mask is not None:
        full = torch.cat([prompt_mask.repeat_interleave(group_size, dim=0),
                          torch.ones_like(completion_ids[:, :-1], dtype=torch.bool)], dim=1)
        kwargs = padding_kwargs(full, first_position=prompt_ids.shape[1])
    kwargs[cache_kwarg(model)] = cache
    rest = model(input_ids=completion_ids[:, :-1], use_cache=True, **kwargs).logits
    return torch.cat([first, rest], dim=1)  # (B, T, V)


def _shared_prefix_logits_gpt2(model, prompt_ids, completion_ids, group_size):
    """:func:`_shared_prefix_logits` for a plain GPT-2 and unpadded prompts, via ``gpt2_forward``."""
    (N, P), T, device = prompt_ids.shape, completion_ids.shape[1], prompt_ids.device
    first, prefix = gpt2_fast.gpt2_prefill(model, prompt_ids)  # (N, V); per layer (keys, values) (N, H, P, d)
    first = first.repeat_interleave(group_size, dim=0)[:, None]  # (B, 1, V) predicts completion token 0
    if T == 1:
        return first

    def after_prompt(layer, keys, values):  # the group's prompt, then the completion so far
        prompt_keys, prompt_values = prefix[layer]
        return (torch.cat([prompt_keys.repeat_interleave(group_size, dim=0), keys], dim=2),
                torch.cat([prompt_values.repeat_interleave(group_size, dim=0), values], dim=2))

    causal = torch.ones(T - 1, P + T - 1, dtype=torch.bool, device=device).tril(diagonal=P)  # query j sees keys ≤ P + j
    rest = gpt2_fast.gpt2_forward(model, completion_ids[:, :-1], torch.arange(P, P + T - 1, device=device), after_prompt,
                                  attn_mask=causal)
    return torch.cat([first, rest], dim=1)  # (B, T, V)
