"""Tie a number written in a chapter's prose to the cell that computes it.

A sentence such as "the evaluation reaches a rolling return of about 350" is true of one run; when
the chapter is rebuilt on another machine the number can move. The book therefore never leaves a
computed number in prose on its own: either the cell prints it, or the cell right after the
sentence calls :func:`claim` with the sentence's words and the tolerance the text implies::

    rl.claim("a rolling return of about 350", final_return, expected=350, rel=0.25)

The call fails (so nbval fails) when the run no longer supports the sentence, and the book's text
check (``tests/test_book_text.py``) fails when the quoted words are missing from the markdown
above the cell, so text and number cannot drift apart silently.
"""

from __future__ import annotations

import math

__all__ = ["claim"]


def claim(quote: str, value, expected: float | None = None, *, rel: float | None = None,
          abs: float | None = None, low: float | None = None, high: float | None = None) -> float:
    """Check that a computed ``value`` supports the sentence ``quote`` of the text; print it.

    Either give ``expected`` with a tolerance (``rel``: |value − expected| ≤ rel·|expected|;
    ``abs``: |value − expected| ≤ abs), or a range ``low ≤ value ≤ high`` (either end may be
    omitted), for sentences such as "more than 0.3".

    Args:
        quote: the words of the markdown text this number backs (verbatim, ≥ 3 characters).
        value: a Python number, a NumPy scalar or a 0-d tensor (units as in the text).
        expected: the number the text states.
        rel, abs: tolerance around ``expected`` (one of them, ≥ 0).
        low, high: bounds, used instead of ``expected``.
    Returns:
        ``value`` as a float (after printing ``✓ "quote": value``).
    Raises:
        ValueError: ``quote`` too short, no tolerance or bounds given, a negative tolerance, or a
            non-finite ``value``.
        AssertionError: the value contradicts the text (the message names both).
    """
    if not isinstance(quote, str) or len(quote.strip()) < 3:
        raise ValueError(f"`quote` must be the text's words (a string of ≥ 3 characters); got {quote!r}")
    x = float(value.item() if hasattr(value, "item") else value)
    if not math.isfinite(x):
        raise ValueError(f"`value` must be finite; got {x}")
    if expected is not None:
        if (rel is None) == (abs is None):
            raise ValueError("give exactly one of `rel` or `abs` with `expected`")
        tol = abs if abs is not None else rel * math.fabs(expected)
        if tol < 0:
            raise ValueError(f"the tolerance must be ≥ 0; got {tol}")
        ok, want = math.fabs(x - expected) <= tol, f"{expected:g} ± {tol:g}"
    else:
        if low is None and high is None:
            raise ValueError("give `expected` with `rel`/`abs`, or `low` and/or `high`")
        ok = (low is None or x >= low) and (high is None or x <= high)
        want = f"in [{'-inf' if low is None else f'{low:g}'}, {'inf' if high is None else f'{high:g}'}]"
    if not ok:
        raise AssertionError(f"the text says {quote!r} ({want}) but this run gives {x:g}: "
                             "update the text or find what changed")
    print(f'✓ "{quote}": {x:.4g}')
    return x
