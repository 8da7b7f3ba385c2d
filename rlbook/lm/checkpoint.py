"""Atomic checkpoints: a crash while saving never leaves a half-written checkpoint behind.

:func:`save_checkpoint` writes model, tokenizer and a JSON metadata file into a fresh temporary
folder *beside* the target, then swaps it in with two renames (old → backup, temp → target) and
deletes the backup. An exception anywhere before the swap removes the temporary folder and leaves
the previous checkpoint untouched. The folder is an ordinary ``save_pretrained`` folder, so
``AutoModelForCausalLM.from_pretrained(path)`` and ``AutoTokenizer.from_pretrained(path)`` read it.
Save checkpoints under a git-ignored folder (``checkpoints/`` or ``runs/``).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import uuid
from pathlib import Path

from transformers import AutoTokenizer

from rlbook.lm.model import load_policy, quiet_weight_progress

__all__ = ["save_checkpoint", "load_checkpoint"]

METADATA_FILE = "rlbook_metadata.json"


def save_checkpoint(model, tokenizer, path, metadata: dict | None = None) -> Path:
    """Save ``model`` and ``tokenizer`` to the folder ``path`` atomically.

    Args:
        model: a ``transformers`` model (has ``save_pretrained``).
        tokenizer: a ``transformers`` tokenizer, or None to save the model only.
        path: target folder; its parent is created if needed.
        metadata: JSON-serialisable dict stored as ``rlbook_metadata.json`` (e.g. step, metrics).
    Returns:
        The target path.
    Raises:
        ValueError: ``metadata`` is not JSON-serialisable, or ``path`` is an existing file.
        Any exception of ``save_pretrained`` propagates, with the old checkpoint intact.
    """
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ValueError(f"`path` must be a folder; {str(path)!r} is a file")
    try:
        meta_text = json.dumps(metadata or {}, indent=2, sort_keys=True)
    except TypeError as err:
        raise ValueError(f"`metadata` must be JSON-serialisable: {err}") from None
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-", dir=path.parent))
    try:
        with quiet_weight_progress():
            model.save_pretrained(tmp)
        if tokenizer is not None:
            tokenizer.save_pretrained(tmp)
        (tmp / METADATA_FILE).write_text(meta_text)
        backup = path.parent / f".{path.name}.old-{uuid.uuid4().hex[:8]}"
        if path.exists():
            os.replace(path, backup)
        os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    shutil.rmtree(backup, ignore_errors=True)
    return path


def load_checkpoint(path, device=None):
    """Load ``(model, tokenizer, metadata)`` saved by :func:`save_checkpoint`.

    Args:
        path: the checkpoint folder.
        device: target device for the model (default: ``rl.get_device()``).
    Returns:
        model (eval mode), tokenizer (None if none was saved), metadata dict ({} if none).
    Raises:
        ValueError: ``path`` is not an existing folder.
    """
    path = Path(path)
    if not path.is_dir():
        raise ValueError(f"`path` must be an existing checkpoint folder; got {str(path)!r}")
    model = load_policy(path, device=device)
    has_tok = (path / "tokenizer.json").exists() or (path / "tokenizer_config.json").exists()
    tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True) if has_tok else None
    meta_file = path / METADATA_FILE
    metadata = json.loads(meta_file.read_text()) if meta_file.exists() else {}
    return model, tokenizer, metadata
