"""The book's one size switch and the device choice.

``RLBOOK_SIZE=small`` (the default) sizes every chapter to run in under ~3 minutes on 2 CPU cores;
``RLBOOK_SIZE=full`` trains longer and larger, on a GPU when one is present. Chapters read the size
through :func:`get_size` and pick their settings with :func:`by_size`. What a chapter saves for a
later one (chapter 8's trained model, for chapter 9) goes under :func:`runs_dir`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:  # torch is imported where a device is chosen: `rlbook --help` needs none
    import torch

__all__ = ["SIZES", "get_size", "by_size", "get_device", "same_device", "runs_dir", "benchmark_results"]

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


DEVICE_ENV = "RLBOOK_DEVICE"
DEVICE_CHOICES = ("cpu", "cuda", "cuda:N")


def get_device(device: str | torch.device | None = None) -> torch.device:
    """Return the device the book computes on.

    Order of precedence:
        1. ``device``, when given (a string or a :class:`torch.device`), taken as it is;
        2. else ``$RLBOOK_DEVICE``: ``cpu``, ``cuda`` or ``cuda:N`` (case and spaces ignored; an
           empty value counts as unset); a reader with a GPU sets ``RLBOOK_DEVICE=cpu`` to
           reproduce the stored outputs, which were made on a CPU;
        3. else CUDA when available, else CPU.

    Raises:
        ValueError: ``$RLBOOK_DEVICE`` is not one of ``cpu``, ``cuda``, ``cuda:N``; or it asks for
            CUDA (or a CUDA index) that this machine does not have.
    """
    import torch

    if device is not None:
        return torch.device(device)
    value = os.environ.get(DEVICE_ENV, "").strip().lower()
    if not value:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    kind, _, index = value.partition(":")
    if value == "cpu" or (kind == "cuda" and (value == "cuda" or index.isdigit())):
        chosen = torch.device(value)
    else:
        raise ValueError(f"${DEVICE_ENV} must be one of {DEVICE_CHOICES} (N a GPU index); got {value!r}")
    if chosen.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"${DEVICE_ENV}={value!r} asks for CUDA, but torch.cuda.is_available() is False on "
                             f"this machine (torch {torch.__version__}); unset it or set {DEVICE_ENV}=cpu")
        if chosen.index is not None and chosen.index >= torch.cuda.device_count():
            raise ValueError(f"${DEVICE_ENV}={value!r} asks for GPU {chosen.index}, but this machine has "
                             f"{torch.cuda.device_count()} (indices 0 to {torch.cuda.device_count() - 1})")
    return chosen


def same_device(a: str | torch.device, b: str | torch.device) -> bool:
    """True when ``a`` and ``b`` name the same device: ``cuda`` (no index) is the current CUDA device,
    so ``same_device("cuda", "cuda:0")`` is True while GPU 0 is current (``torch.device("cuda") !=
    torch.device("cuda:0")`` in torch). Types compare first; CUDA is not initialised for CPU devices.
    """
    import torch

    a, b = torch.device(a), torch.device(b)
    if a.type != b.type:
        return False
    if a.index == b.index:
        return True
    if a.type != "cuda":
        return False
    current = torch.cuda.current_device()
    return (current if a.index is None else a.index) == (current if b.index is None else b.index)


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
