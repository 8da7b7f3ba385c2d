"""A character-level tokenizer exposed as a ``transformers`` tokenizer, built locally.

Every character of the task alphabet is one token; four special tokens sit in front:

====  ========  =====================================================
 id   token     role
====  ========  =====================================================
 0    ``<pad>`` fills rows after they finished; never sampled
 1    ``<s>``   begin-of-sequence, first token of every prompt
 2    ``</s>``  end-of-sequence, ends every completion
 3    ``<unk>`` any character outside the alphabet; never sampled
====  ========  =====================================================

The tokenizer is a :class:`transformers.PreTrainedTokenizerFast` built with the ``tokenizers``
library from an in-memory vocabulary, so nothing is downloaded and ``save_pretrained`` /
``AutoTokenizer.from_pretrained(path)`` work like any Hub tokenizer.
"""

from __future__ import annotations

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

__all__ = ["SPECIAL_TOKENS", "DEFAULT_ALPHABET", "build_char_tokenizer", "encode_prompts", "forbidden_token_ids"]

SPECIAL_TOKENS = {"pad_token": "<pad>", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}
DEFAULT_ALPHABET = "0123456789+="


def build_char_tokenizer(alphabet: str = DEFAULT_ALPHABET) -> PreTrainedTokenizerFast:
    """Build a character-level ``PreTrainedTokenizerFast`` over ``alphabet`` plus 4 special tokens.

    Token ids: ``<pad>``=0, ``<s>``=1, ``</s>``=2, ``<unk>``=3, then the characters of ``alphabet``
    in order. Special-token strings inside a text are recognised as single tokens (so a decoded
    completion re-encodes to the same ids); any other unknown character becomes ``<unk>``.

    Args:
        alphabet: the task's characters, each at most once; no whitespace.
    Returns:
        A tokenizer with ``pad_token_id``, ``bos_token_id``, ``eos_token_id``, ``unk_token_id`` set;
        ``decode`` keeps special tokens unless asked to skip them.
    Raises:
        ValueError: ``alphabet`` is empty, repeats a character, or contains whitespace.
    Example:
        >>> tok = build_char_tokenizer("0123456789+=")
        >>> tok("07+42=").input_ids
        [4, 11, 14, 8, 6, 15]
    """
    if not isinstance(alphabet, str) or not alphabet:
        raise ValueError(f"`alphabet` must be a non-empty string; got {alphabet!r}")
    if len(set(alphabet)) != len(alphabet):
        raise ValueError(f"`alphabet` must not repeat characters; got {alphabet!r}")
    if any(c.isspace() for c in alphabet):
        raise ValueError("`alphabet` must not contain whitespace")
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS.values())}
    for ch in alphabet:
        vocab[ch] = len(vocab)
    core = Tokenizer(models.WordLevel(vocab, unk_token=SPECIAL_TOKENS["unk_token"]))
    core.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")  # one char = one token
    core.decoder = decoders.Fuse()  # join tokens without spaces
    tok = PreTrainedTokenizerFast(tokenizer_object=core, **SPECIAL_TOKENS)
    tok.model_max_length = 1024
    return tok


def encode_prompts(tokenizer, prompts: list[str], add_bos: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Encode prompts into a left-padded batch ``(input_ids, attention_mask)``.

    Left padding keeps every prompt's last token in the last column, where generation continues.
    With the book's fixed-width prompts no padding occurs at all; for a real tokenizer with
    variable-width prompts the attention mask marks the pad columns, and the sampler and scorer
    derive position ids from it.

    Args:
        tokenizer: a ``transformers`` tokenizer with a pad token.
        prompts: B strings.
        add_bos: prepend ``tokenizer.bos_token_id`` when the tokenizer has one.
    Returns:
        ``input_ids`` (B, P) long and ``attention_mask`` (B, P) bool (False on left padding).
    Raises:
        ValueError: ``prompts`` is empty or a prompt encodes to no tokens.
    """
    if isinstance(prompts, str) or len(prompts) == 0:
        raise ValueError("`prompts` must be a non-empty list of strings")
    bos = getattr(tokenizer, "bos_token_id", None) if add_bos else None
    encoded = tokenizer(list(prompts), add_special_tokens=False).input_ids  # one batched call
    rows = [([bos] if bos is not None else []) + list(ids) for ids in encoded]
    for p, ids in zip(prompts, rows):
        if not ids:
            raise ValueError(f"`prompts` contains a prompt that encodes to no tokens: {p!r}")
    width = max(len(r) for r in rows)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    input_ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows], dtype=torch.long)
    attention_mask = torch.tensor([[False] * (width - len(r)) + [True] * len(r) for r in rows], dtype=torch.bool)
    return input_ids, attention_mask


def forbidden_token_ids(tokenizer) -> list[int]:
    """Ids that a policy must never sample: every special token except end-of-sequence.

    Sampling ``<pad>``, ``<s>`` or ``<unk>`` has no meaning in a completion, and a reward that
    strips them could be gamed (a policy finds such a loophole quickly); the sampler sets their logits to −∞.

    Returns:
        Sorted list of token ids (pad, bos, unk and any other special ids), without the EOS id.
    """
    eos = tokenizer.eos_token_id
    ids = set(getattr(tokenizer, "all_special_ids", []) or [])
    for name in ("pad_token_id", "bos_token_id", "unk_token_id"):
        value = getattr(tokenizer, name, None)
        if value is not None:
            ids.add(int(value))
    ids.discard(eos)
    return sorted(int(i) for i in ids)
