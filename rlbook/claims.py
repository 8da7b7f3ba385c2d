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

__all__ = ["claim", "claim_comparison"]


def claim(quote: str, value, expected: float | None = None, *, rel: float | None = None,
          abs: float | None = None, low: float | None = None, high: float | None = None,
          bounds: tuple | None = None) -> float:
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
        bounds: the range the quantity can take at all, e.g. (0, 1) for an accuracy. A value
            sitting on either end (within 1e-9 of the range) is refused: a check that passes at a
            ceiling or a floor cannot fail, so it backs nothing. Give it for every rate.
    Returns:
        ``value`` as a float (after printing ``✓ "quote": value``).
    Raises:
        ValueError: ``quote`` too short, no tolerance or bounds given, a negative tolerance, a
            non-finite ``value``, or a ``value`` at an end of ``bounds`` (a vacuous claim).
        AssertionError: the value contradicts the text (the message names both).
    """
    if not isinstance(quote, str) or len(quote.strip()) < 3:
        raise ValueError(f"`quote` must be the text's words (a string of ≥ 3 characters); got {quote!r}")
    x = float(value.item() if hasattr(value, "item") else value)
    if not math.isfinite(x):
        raise ValueError(f"`value` must be finite; got {x}")
    if bounds is not None:
        lo, hi = (float(b) for b in bounds)
        if not lo < hi:
            raise ValueError(f"`bounds` must be (low, high) with low < high; got {bounds!r}")
        if x <= lo + 1e-9 * (hi - lo) or x >= hi - 1e-9 * (hi - lo):
            raise ValueError(f"{quote!r}: the value {x:g} sits at an end of its range {bounds}, where the check "
                             "cannot fail: measure it where it can move (a harder task, a smaller k)")
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


def claim_comparison(quote: str, comparison, expect: str) -> object:
    """Back a comparative sentence ("A beats B", "no difference detected") with a paired comparison.

    ``comparison`` comes from :func:`rlbook.compare` over paired seeds. ``expect`` is what the
    sentence says:

    * ``">"``: A is larger (the whole confidence interval of A − B lies above 0);
    * ``"<"``: A is smaller (the interval lies below 0);
    * ``"none"``: no difference detected at this scale (the interval contains 0; the text should
      state the interval, which this prints).

    Args:
        quote: the text's words (verbatim, ≥ 3 characters), as for :func:`claim`.
        comparison: a :class:`rlbook.stats.Comparison`.
        expect: ">", "<" or "none".
    Returns:
        ``comparison`` (after printing ``✓ "quote": <the comparison's line>``).
    Raises:
        ValueError: a short quote, a ``comparison`` of the wrong type, or an unknown ``expect``.
        AssertionError: the interval does not support the sentence (the message gives it).
    """
    from rlbook.stats import Comparison

    if not isinstance(quote, str) or len(quote.strip()) < 3:
        raise ValueError(f"`quote` must be the text's words (a string of ≥ 3 characters); got {quote!r}")
    if not isinstance(comparison, Comparison):
        raise ValueError(f"`comparison` must be an rl.compare(...) result; got {type(comparison).__name__}")
    if expect not in (">", "<", "none"):
        raise ValueError(f"`expect` must be '>', '<' or 'none'; got {expect!r}")
    ok = {">": comparison.ci_low > 0, "<": comparison.ci_high < 0,
          "none": comparison.ci_low <= 0 <= comparison.ci_high}[expect]
    if not ok:
        said = {">": "A > B", "<": "A < B", "none": "no difference detected"}[expect]
        raise AssertionError(f"the text says {quote!r} ({said}) but this experiment gives {comparison}: "
                             "update the text or find what changed")
    print(f'✓ "{quote}": {comparison}')
    return comparison
