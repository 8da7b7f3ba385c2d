"""Write the book's "Where next" page, ``book/where_next.md``, from the mapping in ``rlbook/frameworks.py``.

The page (the book's concepts by their names in TRL, verl, OpenRLHF, prime-rl and SkyRL, the ladder
from this book to a cluster, TRL's defaults) is generated: edit ``rlbook.frameworks`` and run

    python tools/build_where_next.py          # rewrites book/where_next.md
    python tools/build_where_next.py --check  # exit 1 if the page is not what the mapping gives

``tests/test_where_next.py`` fails while the committed page differs from what this writes.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "book" / "where_next.md"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare instead of writing; exit 1 on a difference")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from rlbook.frameworks import where_next_markdown

    text = where_next_markdown()
    if args.check:
        current = PAGE.read_text(encoding="utf-8") if PAGE.exists() else None
        if current != text:
            print(f"{PAGE.relative_to(ROOT)} is out of date: run python tools/build_where_next.py")
            return 1
        print(f"{PAGE.relative_to(ROOT)} is up to date")
        return 0
    PAGE.write_text(text, encoding="utf-8")
    print(f"wrote {PAGE.relative_to(ROOT)} ({len(text.splitlines())} lines)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
