"""The book's chapters: the ``notebooks/NN_name.ipynb`` files, found from a clone or an installed wheel.

Used by the ``rlbook`` command (:mod:`rlbook.app.cli`) and the site builder (:mod:`rlbook.app.site`),
neither of which imports the other.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

__all__ = ["PACKAGE_ROOT", "Chapter", "find_notebooks_dir", "list_chapters"]

PACKAGE_ROOT = Path(__file__).resolve().parents[1]  # the installed ``rlbook`` folder


@dataclass
class Chapter:
    """A chapter notebook: its number (``"03"``), title and path."""

    number: str
    title: str
    path: Path


def find_notebooks_dir(start: Path | None = None) -> Path:
    """The ``notebooks/`` folder: under ``start`` (default: the working directory) or its parents,
    else beside the installed package (an editable install from a clone), else the copy of the
    chapters that the wheel carries (``rlbook/_bundled/notebooks``, see setup.py).

    Raises:
        FileNotFoundError: no folder with chapter notebooks was found.
    """
    here = (start or Path.cwd()).resolve()
    candidates = [p / "notebooks" for p in (here, *here.parents)]
    candidates.append(PACKAGE_ROOT.parent / "notebooks")
    candidates.append(PACKAGE_ROOT / "_bundled" / "notebooks")
    for c in candidates:
        if c.is_dir() and any(c.glob("[0-9][0-9]_*.ipynb")):
            return c
    raise FileNotFoundError("no notebooks/ folder with chapters (NN_name.ipynb) found: run from a clone of the "
                            "repository, or install rlbook from its wheel, which carries the chapters")


def _title(path: Path) -> str:
    try:
        cells = json.loads(path.read_text())["cells"]
    except (OSError, ValueError, KeyError):
        return path.stem
    for cell in cells:
        if cell.get("cell_type") == "markdown":
            for line in "".join(cell.get("source", "")).splitlines():
                if line.startswith("#"):
                    return line.lstrip("#").strip()
    return path.stem


def list_chapters(notebooks_dir: Path | None = None) -> list[Chapter]:
    """Every ``NN_name.ipynb`` chapter in reading order."""
    nb_dir = notebooks_dir or find_notebooks_dir()
    return [Chapter(p.name[:2], _title(p), p) for p in sorted(nb_dir.glob("[0-9][0-9]_*.ipynb"))]
