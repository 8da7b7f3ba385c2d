"""The book's one size switch and the device choice.

``RLBOOK_SIZE=small`` (the default) sizes every chapter to run in under ~3 minutes on 2 CPU cores;
``RLBOOK_SIZE=full`` trains longer and larger, on a GPU when one is present. Chapters read the size
through :func:`get_size` and pick their settings with :func:`by_size`. What a chapter saves for a
later one (chapter 8's trained model, for chapter 9) goes under :func:`runs_dir`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TypeVar

import torch

__all__ = ["SIZES", "get_size", "by_size", "get_device", "runs_dir", "benchmark_results"]

SIZES = ("small", "full")
T = TypeVar("T")


def get_size(size: str | None = None) -> str:
    """Return the active size: ``size`` if given, else ``$RLBOOK_SIZE``, else ``"small"``.

    Raises:
        ValueError: the size is not one of ``SIZES``.
    """
    value = size if size is not None else os.environ.get("RLBOOK_SIZE", "small")
    value = str(value).strip().lower()
    if value not in SIZES:
        raise ValueError(f"`size` (or $RLBOOK_SIZE) must be one of {SIZES}; got {value!r}")
    return value


def by_size(small: T, full: T, size: str | None = None) -> T:
    """Pick ``small`` or ``full`` according to :func:`get_size`.

    Example:
        >>> by_size(small=100, full=10_000, size="small")
        100
    """
    return small if get_size(size) == "small" else full


def get_device(device: str | torch.device | None = None) -> torch.device:
    """Return ``device`` if given, else CUDA when available, else CPU."""
    if device is not None:
        return torch.device(device)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


BENCHMARK_RESULTS = Path(__file__).resolve().parent / "data"


def benchmark_results(name: str) -> dict:
    """The saved output of ``benchmarks/<name>.py --save`` (shipped with the package), as a dict.

    Chapters print their benchmark tables from these files, so a quoted number is the number the
    benchmark printed. Example: ``rl.benchmark_results("grpo_variants")["family"]["DAPO"]["pass@1"]``
    is (mean, std) over seeds.

    Raises:
        ValueError: no saved result of that name (the message lists those there are).
    """
    import json

    path = BENCHMARK_RESULTS / f"{name}.json"
    if not path.is_file():
        saved = sorted(p.stem for p in BENCHMARK_RESULTS.glob("*.json"))
        raise ValueError(f"`name` must be a saved benchmark result, one of {saved}; got {name!r}")
    return json.loads(path.read_text(encoding="utf-8"))


def runs_dir() -> Path:
    """The folder for the book's outputs (executed chapters, checkpoints); not created here.

    ``$RLBOOK_RUNS_DIR`` if set; else ``runs/`` at the root of the source checkout when the
    library is used from one (the folder holding ``pyproject.toml`` above ``rlbook/``), so a
    chapter run by nbval inside ``notebooks/`` and the same chapter run by ``rlbook run`` write
    to the same place; else ``runs/`` in the current directory. ``runs/`` is git-ignored.

    Returns:
        an absolute :class:`pathlib.Path`.
    """
    if os.environ.get("RLBOOK_RUNS_DIR"):
        return Path(os.environ["RLBOOK_RUNS_DIR"]).expanduser().resolve()
    root = Path(__file__).resolve().parents[1]
    if (root / "pyproject.toml").is_file() and (root / "rlbook").is_dir():
        return root / "runs"
    return Path.cwd().resolve() / "runs"
