"""Build the nbgrader source notebooks from their jupytext sources.

Each assignment's source is ``assignments/src/<name>.py`` (jupytext "percent" format, nbgrader's
cell metadata in the cell headers: ``# %% nbgrader={"grade": true, "grade_id": ..., "points": 2, ...}``).
This script writes ``assignments/source/<name>/<name>.ipynb``, the layout nbgrader expects in a
course directory. Source notebooks are stored without outputs (nbgrader executes them when it
validates or grades), so building is instant and does not run anything.

    python tools/build_assignments.py            # every assignment
    python tools/build_assignments.py part1      # assignments whose name starts with these

Needs the ``dev`` extra (jupytext).
"""

from __future__ import annotations

import sys
from pathlib import Path

import jupytext
import nbformat

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "assignments" / "src"
OUT = ROOT / "assignments" / "source"
KERNELSPEC = {"display_name": "Python 3", "language": "python", "name": "python3"}


def build(src: Path) -> Path:
    nb = jupytext.read(src)
    nb.metadata.pop("jupytext", None)
    nb.metadata["kernelspec"] = dict(KERNELSPEC)
    nb.metadata["language_info"] = {"name": "python"}
    for cell in nb.cells:
        cell.metadata.pop("lines_to_next_cell", None)
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    nbformat.validate(nb)
    out = OUT / src.stem / f"{src.stem}.ipynb"
    out.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, out)
    return out


def main(argv: list[str]) -> int:
    sources = sorted(SRC.glob("*.py"))
    if argv:
        sources = [s for s in sources if any(s.stem.startswith(a) for a in argv)]
    if not sources:
        print(f"no assignment sources match {argv} in {SRC}", file=sys.stderr)
        return 1
    for src in sources:
        print(f"{src.name} -> {build(src).relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
