"""The policy network: a small GPT-2 trained from scratch, or any local causal language model.

A language model is a policy: the state is the prompt plus the tokens written so far, the action
is the next token, and π_θ(a_t | s_t) = softmax(logits_t)[a_t]. The book's default is a GPT-2
(2 layers × 128 wide, ~0.4 M parameters) over the character vocabulary of
:mod:`rlbook.lm.tokenizer`; ``RLBOOK_SIZE=full`` doubles depth and width.

Dropout must be 0: with dropout on, the log-probabilities used in the loss differ from the ones
the samples were drawn with, and RL stalls (measured while writing the book). :func:`build_policy` refuses a config
with dropout and every policy is returned in ``eval()`` mode (gradients still flow).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, GPT2Config, GPT2LMHeadModel, PretrainedConfig
from transformers.utils import logging as hf_logging

from rlbook.config import by_size, get_device

__all__ = ["policy_config", "build_policy", "load_policy", "count_parameters"]

_DROPOUTS = ("resid_pdrop", "embd_pdrop", "attn_pdrop", "summary_first_dropout")


def policy_config(tokenizer, size: str | None = None, **overrides) -> GPT2Config:
    """A dropout-free ``GPT2Config`` sized by ``rl.by_size`` and wired to ``tokenizer``'s ids.

    small: 2 layers, 128 wide, 4 heads; full: 4 layers, 256 wide, 8 heads. Context 32 tokens.

    Args:
        tokenizer: supplies ``len(tokenizer)`` and the pad / bos / eos ids.
        size: "small" or "full" (default: ``$RLBOOK_SIZE``).
        **overrides: any ``GPT2Config`` field (e.g. ``n_layer=1``).
    Returns:
        A ``GPT2Config`` with every dropout probability 0.
    """
    fields = dict(
        vocab_size=len(tokenizer),
        n_positions=32,
        n_embd=by_size(128, 256, size),
        n_layer=by_size(2, 4, size),
        n_head=by_size(4, 8, size),
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=True,
        activation_function="gelu",  # exact GELU: one kernel (gelu_new is 4 on CPU)
    )
    fields.update({name: 0.0 for name in _DROPOUTS})
    fields.update(overrides)
    return GPT2Config(**fields)


def _check_no_dropout(config: PretrainedConfig) -> None:
    for name in _DROPOUTS:
        value = getattr(config, name, 0.0)
        if value:
            raise ValueError(
                f"`config.{name}` must be 0 for an RL policy (dropout makes sampled and scored "
                f"log-probs disagree); got {value}. Use rlbook.lm.policy_config(...)"
            )


def build_policy(config: GPT2Config, seed: int = 0, device: str | torch.device | None = None) -> GPT2LMHeadModel:
    """A freshly initialised GPT-2 policy from ``config`` (weights seeded by ``seed``).

    Args:
        config: a ``GPT2Config`` with all dropouts 0 (see :func:`policy_config`).
        seed: seed of the weight initialisation (a local generator state; the global RNG is
            restored afterwards).
        device: where to put the model (default: ``rl.get_device()``).
    Returns:
        The model in ``eval()`` mode.
    Raises:
        ValueError: ``config`` is not a GPT2Config or has a non-zero dropout.
    """
    if not isinstance(config, GPT2Config):
        raise ValueError(f"`config` must be a transformers.GPT2Config; got {type(config).__name__}")
    _check_no_dropout(config)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))
        model = GPT2LMHeadModel(config)
    return model.to(get_device(device)).eval()


def load_policy(config_or_path, seed: int = 0, device: str | torch.device | None = None, dtype=None):
    """Build a policy from a config, or load any local causal-LM checkpoint folder.

    Args:
        config_or_path: a ``GPT2Config`` (a fresh model, as :func:`build_policy`) or a path to a
            folder written by ``save_pretrained`` (ours, or a real model copied to local disk;
            nothing is downloaded: ``local_files_only=True``).
        seed: weight seed for a fresh model.
        device: target device (default: ``rl.get_device()``).
        dtype: optional torch dtype for a loaded checkpoint (e.g. ``torch.bfloat16`` on a GPU).
    Returns:
        The model in ``eval()`` mode (dropout off; gradients still flow).
    Raises:
        ValueError: the path does not exist, or the config has dropout.
    """
    if isinstance(config_or_path, PretrainedConfig):
        return build_policy(config_or_path, seed=seed, device=device)
    if not isinstance(config_or_path, (str, os.PathLike)):
        raise ValueError(f"`config_or_path` must be a GPT2Config or a local folder; got {type(config_or_path).__name__}")
    path = Path(config_or_path)
    if not path.is_dir():
        raise ValueError(f"`config_or_path` must be an existing local checkpoint folder; got {str(path)!r}")
    kwargs = {"local_files_only": True}
    if dtype is not None:
        kwargs["dtype"] = dtype
    with quiet_weight_progress():
        model = AutoModelForCausalLM.from_pretrained(str(path), **kwargs)
    return model.to(get_device(device)).eval()


@contextlib.contextmanager
def quiet_weight_progress():
    """Within the block, ``from_pretrained`` / ``save_pretrained`` draw no progress bar.

    transformers 5 draws a "Loading weights" bar on every load and a "Writing model shards" bar on
    every save, even for the book's 28 tensors that load in a millisecond; in a notebook each one
    is a widget saved into the page. The library's own loads and saves (here, in
    :mod:`rlbook.lm.checkpoint` and :mod:`rlbook.bridge`) run inside this; the setting is restored
    after, so a reader's own downloads keep their bars.
    """
    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()


def count_parameters(model: torch.nn.Module) -> int:
    """Number of trainable parameters (tied embeddings counted once)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
