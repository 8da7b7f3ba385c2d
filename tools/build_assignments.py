"""Build the nbgrader source notebooks from their jupytext sources.

Each assignment's source is ``assignments/src/<name>.py`` (jupytext "percent" format, nbgrader's
cell metadata in the cell headers: ``# %% nbgrader={"grade": true, "grade_id": ..., "points": 2, ...}``).
This script writes ``assignments/source/<name>/<name>.ipynb``, the layout nbgrader expects in a
course directory, then the student versions ``assignments/student/<name>/<name>.ipynb`` with
nbgrader's ``generate_assignment`` (solutions and hidden tests stripped): those, and only those, are
what the wheel and the sdist carry. Source notebooks are stored without outputs (nbgrader executes
them when it validates or grades), so building is quick and does not run anything.

    python tools/build_assignments.py            # every assignment
    python tools/build_assignments.py part1      # assignments whose name starts with these

Needs the ``dev`` extra (jupytext) and the ``assignments`` extra (nbgrader).
"""

from __future__ import annotations

import sys
from pathlib import Path

import jupytext
import nbformat

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "assignments" / "src"
OUT = ROOT / "assignments" / "source"
STUDENT = ROOT / "assignments" / "student"
KERNELSPEC = {"display_name": "Python 3", "language": "python", "name": "python3"}


def build(src: Path) -> Path:
    nb = jupytext.read(src)
    nb.metadata.pop("jupytext", None)
    nb.metadata["kernelspec"] = dict(KERNELSPEC)
    nb.metadata["language_info"] = {"name": "python"}
    for i, cell in enumerate(nb.cells):
        cell.metadata.pop("lines_to_next_cell", None)
        # stable ids, so that a rebuild changes only what changed
        cell.id = cell.metadata.get("nbgrader", {}).get("grade_id") or f"cell-{i}"
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
    for path in build_student([s.stem for s in sources]):
        print(f"student version -> {path.relative_to(ROOT)}")
    return 0


def build_student(names: list[str]) -> list[Path]:
    """The released student versions of ``names`` (nbgrader generate_assignment), in assignments/student/."""
    import shutil
    import tempfile

    sys.path.insert(0, str(ROOT))
    from rlbook.assignments import release

    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for nb in release(Path(tmp) / "course", names, source_dir=OUT):
            dst = STUDENT / nb.parent.name / nb.name
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(nb, dst)
            out.append(dst)
    return out


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
