"""Build the nbgrader source notebooks from their jupytext sources.

Each assignment's source is ``assignments/src/<name>.py`` (jupytext "percent" format, nbgrader's
cell metadata in the cell headers: ``# %% nbgrader={"grade": true, "grade_id": ..., "points": 2, ...}``).
This script writes ``assignments/source/<name>/<name>.ipynb``, the layout nbgrader expects in a
course directory, then the student versions ``assignments/student/<name>/<name>.ipynb`` with
nbgrader's ``generate_assignment`` (solutions and hidden tests stripped): those, and only those, are
what the wheel and the sdist carry. Source notebooks are stored without outputs (nbgrader executes
them when it validates or grades).

**Snapshots.** A visible test compares a student's function with stored numbers, never with a
reference implementation that a student could read and copy. In the jupytext source a test cell
writes ``NAME = snapshot(EXPRESSION)`` (a top-level statement of the cell), where the expression may
call the library's implementations (``rl.kl_k3(...)``) or build inputs; the build runs every code
cell of the instructor's notebook in order (solutions included, hidden tests with ``GRADING_SEED = 0``)
and replaces each such statement by ``NAME = <the value as a literal>`` (tensors as
``torch.tensor([...], dtype=...)``, at full precision). The expression lives only in
``assignments/src``, which no package carries; the notebooks (instructor and student versions) hold
the numbers. Code cells marked ``build_only=true`` in the jupytext header (the visible tests'
inputs, reference computations) run at build time and are then removed. Running the cells is also a
check that every instructor solution passes its tests.

    python tools/build_assignments.py            # every assignment
    python tools/build_assignments.py part1      # assignments whose name starts with these

Needs the ``dev`` extra (jupytext) and the ``assignments`` extra (nbgrader).
"""

from __future__ import annotations

import ast
import contextlib
import io
import json
import os
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
    fill_snapshots(nb, src.stem)
    nbformat.validate(nb)
    out = OUT / src.stem / f"{src.stem}.ipynb"
    out.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, out)
    return out


def _is_snapshot(stmt) -> bool:
    return (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
            and isinstance(stmt.value, ast.Call) and isinstance(stmt.value.func, ast.Name)
            and stmt.value.func.id == "snapshot" and len(stmt.value.args) == 1 and not stmt.value.keywords)


def fill_snapshots(nb, name: str) -> int:
    """Run the notebook's code cells in order (in this process, ``GRADING_SEED = 0``) and replace every
    top-level ``NAME = snapshot(EXPR)`` by ``NAME = <literal of EXPR's value>``. Returns how many.

    Raises:
        ValueError: ``snapshot(...)`` used anywhere but as a cell's top-level ``NAME = snapshot(EXPR)``.
        Exception: whatever a cell raises (an instructor solution that fails its own tests).
    """
    import torch

    os.environ.setdefault("MPLBACKEND", "Agg")
    sys.path.insert(0, str(ROOT))
    # each notebook starts as a fresh kernel does: parts 3 and 5 set float64 as torch's default dtype in
    # their setup, which would otherwise carry over to the notebooks built after them in this process
    torch.set_default_dtype(torch.float32)
    torch.set_num_threads(1)  # as the grading kernel runs (OMP_NUM_THREADS=1): the same float order
    ns = {"__name__": "__assignment__", "GRADING_SEED": 0}
    filled = 0
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        tree = ast.parse(cell.source)
        stmts = [s for s in tree.body if _is_snapshot(s)]
        calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
                 and n.func.id == "snapshot"]
        if len(calls) != len(stmts):
            raise ValueError(f"{name}, cell {cell.id}: snapshot(...) only as a top-level NAME = snapshot(EXPR)")
        values = []
        ns["snapshot"] = lambda v, values=values: values.append(v) or v
        with contextlib.redirect_stdout(io.StringIO()):  # the tests' own prints
            exec(compile(cell.source, f"<{name}:{cell.id}>", "exec"), ns)
        if not stmts:
            continue
        lines = cell.source.split("\n")
        for stmt, value in reversed(list(zip(stmts, values))):
            indent = " " * stmt.col_offset
            text = f"{indent}{stmt.targets[0].id} = {_literal(value, indent)}"
            lines[stmt.lineno - 1:stmt.end_lineno] = text.split("\n")
            filled += 1
        cell.source = "\n".join(lines)
    nb.cells = [c for c in nb.cells if not c.metadata.get("build_only")]
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is not None:
        plt.close("all")
    return filled


_WIDTH = 108


def _scalar(x, dtype=None) -> str:
    import numpy as np
    import torch

    if isinstance(x, bool) or dtype == torch.bool:
        return repr(bool(x))
    if isinstance(x, int) or (dtype is not None and not dtype.is_floating_point):
        return repr(int(x))
    if dtype in (torch.float32, torch.float16, torch.bfloat16):
        return str(np.float32(x))  # the shortest text that reads back as the same float32
    return repr(float(x))


def _rows(items: list[str], indent: str) -> str:
    """``[a, b, ...]`` on one line, or wrapped over several with ``indent``."""
    one = "[" + ", ".join(items) + "]"
    if len(indent) + len(one) <= _WIDTH and "\n" not in one:
        return one
    if any("\n" in it for it in items) or any(it.startswith("[") for it in items):
        inner = indent + "    "
        return "[\n" + ",\n".join(inner + it for it in items) + ",\n" + indent + "]"
    lines, line = [], ""
    for it in items:
        if line and len(indent) + 5 + len(line) + len(it) > _WIDTH:
            lines.append(line.rstrip())
            line = ""
        line += it + ", "
    lines.append(line.rstrip(", "))
    inner = indent + "    "
    return "[\n" + "\n".join(inner + ln for ln in lines) + "\n" + indent + "]"


def _nested(x, dtype, indent: str) -> str:
    if isinstance(x, list):
        return _rows([_nested(v, dtype, indent + "    ") for v in x], indent)
    return _scalar(x, dtype)


def _literal(v, indent: str = "") -> str:
    """Python source that evaluates to ``v`` (tensors, numbers, strings, lists, tuples, dicts of them)."""
    import torch

    if isinstance(v, torch.Tensor):
        v = v.detach()
        body = _nested(v.tolist(), v.dtype, indent)
        return f"torch.tensor({body}, dtype={v.dtype})"
    if isinstance(v, (bool, int, float)):
        return _scalar(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list) and v and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v):
        return _rows([_scalar(x) for x in v], indent)
    if isinstance(v, (list, tuple)):
        items = [_literal(x, indent + "    ") for x in v]
        if isinstance(v, tuple):
            one = "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
            if len(indent) + len(one) <= _WIDTH and "\n" not in one:
                return one
            inner = indent + "    "
            return "(\n" + ",\n".join(inner + it for it in items) + ",\n" + indent + ")"
        one = "[" + ", ".join(items) + "]"
        if len(indent) + len(one) <= _WIDTH and "\n" not in one:
            return one
        inner = indent + "    "
        return "[\n" + ",\n".join(inner + it for it in items) + ",\n" + indent + "]"
    if isinstance(v, dict):
        inner = indent + "    "
        items = [f"{_literal(k)}: {_literal(x, inner)}" for k, x in v.items()]
        one = "{" + ", ".join(items) + "}"
        if len(indent) + len(one) <= _WIDTH and "\n" not in one:
            return one
        return "{\n" + ",\n".join(inner + it for it in items) + ",\n" + indent + "}"
    raise TypeError(f"snapshot: cannot store a {type(v).__name__} as a literal")


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
    from rlbook.app.assignments import release

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
