"""Run the book's text checks on chapter *sources* (``notebooks/src/NN_*.py``), without building the notebooks.

``tests/test_book_text.py`` checks the built notebooks. While a chapter's prose is being edited, this runs the
same checks on the jupytext source in a second, so the writer sees every unbacked comparative sentence and every
misplaced claim quote before spending minutes on a rebuild:

    python tools/text_check.py 10 11      # chapters whose number starts with these (default: all)

Exit status: the number of problems found (capped at 100). Needs the ``dev`` extra (jupytext).
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(argv=None) -> int:
    import jupytext

    sys.path.insert(0, str(ROOT / "tests"))
    import test_book_text as text

    wanted = [a.zfill(2) for a in (argv if argv is not None else sys.argv[1:])]
    problems = 0
    for src in sorted((ROOT / "notebooks" / "src").glob("[0-9][0-9]_*.py")):
        if wanted and src.name[:2] not in wanted:
            continue
        cells = jupytext.read(src).cells
        found = text._unbacked_comparisons(int(src.name[:2]), cells) + text._misplaced_quotes(cells)
        print(f"{src.name}: {len(found)} problem(s)")
        for line in found:
            print("   ", line)
        problems += len(found)
    return min(problems, 100)


if __name__ == "__main__":
    sys.exit(main())
