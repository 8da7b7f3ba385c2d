"""A chapter's headline result, printed so that ``rlbook run`` can collect it."""

from __future__ import annotations

__all__ = ["HEADLINE_MARK", "report_headline"]

HEADLINE_MARK = "[rlbook headline]"


def report_headline(text: str) -> None:
    """Print ``text`` as this chapter's headline result (e.g. "REINFORCE: 475 after 41,200 steps").

    ``rlbook run`` scans each executed notebook for the printed mark and shows the text in its
    summary table. Returns None, so a call that ends a notebook cell prints the line once (a
    returned string would be echoed again as the cell's result, in quotes).

    Raises:
        ValueError: ``text`` is empty or spans several lines.
    """
    text = str(text).strip()
    if not text or "\n" in text:
        raise ValueError(f"`text` must be one non-empty line; got {text!r}")
    print(f"{HEADLINE_MARK} {text}")
