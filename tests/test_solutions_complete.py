"""Every exercise in every chapter has a worked solution, and the solutions are marked as such.

Each chapter ends with ``## Exercises`` (a numbered list) and ``## Solutions``, in which solution k
starts with the heading ``### Solution to exercise k``. Every cell from the Solutions heading on is
tagged ``solution`` (JupyterLab folds them, the site renders them as closed blocks), and nbval
executes them with the rest of the chapter, so a coded solution that stops working fails the tests.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def _source(cell) -> str:
    return cell.source if isinstance(cell.source, str) else "".join(cell.source)


def _exercise_numbers(nb) -> list[int]:
    text = "\n".join(_source(c) for c in nb.cells if c.cell_type == "markdown")
    block = re.search(r"^## Exercises\s*$(.*?)(?=^## )", text, re.M | re.S)
    assert block, "no '## Exercises' section followed by another section"
    return [int(n) for n in re.findall(r"^(\d+)\.\s", block.group(1), re.M)]


def _solution_index(nb) -> int:
    starts = [i for i, c in enumerate(nb.cells) if c.cell_type == "markdown" and re.search(r"^## Solutions\s*$", _source(c), re.M)]
    assert len(starts) == 1, f"expected one '## Solutions' heading, found {len(starts)}"
    return starts[0]


def test_every_chapter_is_checked():
    assert len(NOTEBOOKS) >= 11


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_exercise_has_a_solution(path):
    nb = nbformat.read(path, as_version=4)
    exercises = _exercise_numbers(nb)
    assert exercises == list(range(1, len(exercises) + 1)) and exercises, f"exercises numbered {exercises}"
    start = _solution_index(nb)
    solved = [int(n) for c in nb.cells[start:] if c.cell_type == "markdown"
              for n in re.findall(r"^### Solution to exercise (\d+)\s*$", _source(c), re.M)]
    assert solved == exercises, f"{path.name}: exercises {exercises}, solutions {solved}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_solution_cells_are_tagged_and_were_run(path):
    nb = nbformat.read(path, as_version=4)
    start = _solution_index(nb)
    untagged = [i for i, c in enumerate(nb.cells[start:], start) if "solution" not in c.metadata.get("tags", [])]
    assert not untagged, f"{path.name}: cells {untagged} after '## Solutions' lack the 'solution' tag"
    unrun = [i for i, c in enumerate(nb.cells[start:], start) if c.cell_type == "code" and c.execution_count is None]
    assert not unrun, f"{path.name}: solution code cells {unrun} have no stored run"
