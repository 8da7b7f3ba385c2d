"""Build the chapter notebooks from their jupytext sources and store a clean run's outputs.

The source of each chapter is ``notebooks/src/NN_name.py`` (jupytext "percent" format: easy to
diff and review). This script converts it to ``notebooks/NN_name.ipynb`` and executes it top to
bottom at the default (small) size, so the committed notebook holds the outputs nbval compares.

    python tools/build_notebooks.py            # every chapter
    python tools/build_notebooks.py 03 07      # chapters whose number starts with these

Needs the ``dev`` extra (jupytext).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import jupytext
import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "notebooks" / "src"
OUT = ROOT / "notebooks"


def build(src: Path, timeout: int = 900) -> float:
    nb = jupytext.read(src)
    nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
    nb.metadata.pop("jupytext", None)
    os.environ["RLBOOK_SIZE"] = "small"
    start = time.perf_counter()
    NotebookClient(nb, timeout=timeout, kernel_name="python3", extra_arguments=["--IPKernelApp.log_level=ERROR"],
                   resources={"metadata": {"path": str(OUT)}}).execute()
    seconds = time.perf_counter() - start
    for cell in nb.cells:  # drop volatile metadata so diffs stay small
        cell.metadata.pop("execution", None)
    nbformat.write(nb, OUT / (src.stem + ".ipynb"))
    return seconds


def main(argv: list[str]) -> int:
    sources = sorted(SRC.glob("[0-9][0-9]_*.py"))
    if argv:
        sources = [s for s in sources if any(s.name.startswith(a) for a in argv)]
    for src in sources:
        print(f"building {src.name} ...", flush=True)
        print(f"  done in {build(src):.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
