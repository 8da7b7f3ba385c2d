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
import re

__all__ = ["claim", "claim_comparison", "claim_in_spread", "plain_text", "stated_tolerance"]

_TEX_SYMBOLS = {
    "alpha": "α", "beta": "β", "gamma": "γ", "delta": "δ", "epsilon": "ε", "varepsilon": "ε", "theta": "θ",
    "lambda": "λ", "mu": "μ", "pi": "π", "rho": "ρ", "sigma": "σ", "tau": "τ", "phi": "φ", "Delta": "Δ",
    "Sigma": "Σ", "approx": "≈", "cdot": "·", "times": "×", "le": "≤", "leq": "≤", "ge": "≥", "geq": "≥",
    "ne": "≠", "neq": "≠", "infty": "∞", "to": "→", "mid": "∣", "pm": "±", "sim": "∼", "log": "log",
    "exp": "exp", "quad": " ", ",": " ", ";": " ", "!": "", " ": " ",
}
_SUPERSCRIPT = str.maketrans("0123456789+-=()nik", "⁰¹²³⁴⁵⁶⁷⁸⁹⁺⁻⁼⁽⁾ⁿⁱᵏ")
_SUBSCRIPT = str.maketrans("0123456789+-=()aeiklmnoprstx", "₀₁₂₃₄₅₆₇₈₉₊₋₌₍₎ₐₑᵢₖₗₘₙₒₚᵣₛₜₓ")
# a command, and the one space after it when a letter follows (TeX drops it: "\\Delta L" is ΔL)
_TEX_COMMAND = re.compile(r"\\([A-Za-z]+|[,;! ])(?: (?=[A-Za-z]))?")
_TEX_SCRIPT = re.compile(r"([_^])(\{[^{}]*\}|\\[A-Za-z]+|.)")
_RELATIONS = {"≈", "≤", "≥", "≠", "→", "∼"}


def _symbol(m: re.Match) -> str:
    sym = _TEX_SYMBOLS.get(m.group(1), m.group(1))
    return f" {sym} " if sym in _RELATIONS else sym


def plain_text(text: str) -> str:
    """``text`` with its inline TeX (``$…$``) written as plain Unicode, for printed output.

    The book's prose is markdown with TeX, and a claim quotes it verbatim; what a cell *prints* is
    plain text, where ``$V^\\pi\\approx 5$`` would show as raw TeX. Greek letters and common
    operators become their characters, ``^{…}``/``_{…}`` become super-/subscripts where Unicode has
    them (``10^{-5}`` → ``10⁻⁵``, ``k_1`` → ``k₁``) and stay as ``^…``/``_…`` otherwise
    (``V^\\pi`` → ``V^π``). Text outside ``$…$`` is unchanged.

    Args:
        text: a string, possibly with inline math.
    Returns:
        The string with each ``$…$`` replaced by its plain-text form.
    """
    def script(m: re.Match) -> str:
        body = m.group(2)[1:-1] if m.group(2).startswith("{") else m.group(2)
        body = _TEX_COMMAND.sub(_symbol, body).strip()
        table, chars = (_SUPERSCRIPT, "0123456789+-=()nik") if m.group(1) == "^" else (_SUBSCRIPT, "0123456789+-=()aeiklmnoprstx")
        if body and all(ch in chars for ch in body):
            return body.translate(table)
        return m.group(1) + (body if len(body) == 1 else f"({body})")

    def math(m: re.Match) -> str:
        body = _TEX_SCRIPT.sub(script, m.group(1))
        body = _TEX_COMMAND.sub(_symbol, body)
        return re.sub(r" {2,}", " ", body.replace("{", "").replace("}", "")).strip()

    return re.sub(r"\$([^$\n]+)\$", math, text)


_WORD_NUMBERS = {w: i for i, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen twenty".split())}
_ORDINALS = {"half": 2, "halves": 2, "third": 3, "thirds": 3, "quarter": 4, "quarters": 4, "fourth": 4, "fourths": 4,
             "fifth": 5, "fifths": 5, "sixth": 6, "sixths": 6, "seventh": 7, "sevenths": 7, "eighth": 8, "eighths": 8,
             "ninth": 9, "ninths": 9, "tenth": 10, "tenths": 10}
_APPROX = re.compile(r"(?:about|roughly|around|nearly|almost|approximately|some|close to|≈|~|\\approx|\\sim)\W*$",
                     re.IGNORECASE)
_DIGITS = re.compile(r"(?<![\w.])([-−+]?\d{1,3}(?:(?:,| |\u202f|\u2009)\d{3})+|[-−+]?\d+(?:\.\d+)?)"
                     r"(?:\s*(%|(?:percentage )?points?\b))?(?![\w.]*\d)")
_FRACTION = re.compile(r"\b(?:(a|one|two|three|four|five|six|seven|eight|nine)[ -])?(half|halves|thirds?|quarters?|"
                       r"fourths?|fifths?|sixths?|sevenths?|eighths?|ninths?|tenths?)\b", re.IGNORECASE)
_WORD = re.compile(r"\b(" + "|".join(_WORD_NUMBERS) + r")\b(?![ -](?:" + "|".join(_ORDINALS) + r")\b)", re.IGNORECASE)


def _stated_numbers(quote: str):
    """(value, tolerance its words allow, approximate?) for each number the quote writes."""
    text = plain_text(quote)
    found = []
    for m in _DIGITS.finditer(text):
        raw = m.group(1).replace("−", "-").replace(",", "").replace(" ", "").replace("\u202f", "").replace("\u2009", "")
        digits = raw.lstrip("+-")
        if "." in digits:
            unit = 10.0 ** -len(digits.split(".")[1])
        else:
            stripped = digits.rstrip("0")
            unit = 10.0 ** (len(digits) - len(stripped)) if stripped else 1.0
        approx = bool(_APPROX.search(text[:m.start()]))
        value = float(raw)
        found.append((value, unit, approx))
        if m.group(2):  # "42 %" and "2.5 points" are also the rates 0.42 and 0.025
            found.append((value / 100, unit / 100, approx))
    for m in _FRACTION.finditer(text):
        numerator = 1 if m.group(1) in (None, "a", "A") else _WORD_NUMBERS[m.group(1).lower()]
        d = _ORDINALS[m.group(2).lower()]
        # half the distance to the nearest other fraction a writer would have used (1/(d+1)): "about a third"
        # is closer to 1/3 than to 1/4
        found.append((numerator / d, 1 / (2 * d * (d + 1)), True))
    for m in _WORD.finditer(text):
        value, approx = float(_WORD_NUMBERS[m.group(1).lower()]), bool(_APPROX.search(text[:m.start()]))
        found.append((value, 1.0, approx))
        if re.match(r"\s+(?:percentage\s+)?points?\b", text[m.end():]):  # "two points" of a rate: 0.02
            found.append((value / 100, 0.01, approx))
    return found


def stated_tolerance(quote: str, expected: float) -> float | None:
    """The tolerance that the words of ``quote`` allow around ``expected``, or None if they do not state it.

    A number written "0.42" is a rounded value: it allows half a unit of its last digit (±0.005). Written
    "about 0.42" (or "roughly", "around", "nearly", "≈", …) it allows one unit (±0.01); "about 350" allows ±10
    and "about five tokens" ±1. A fraction word allows half the distance to the next fraction a writer would
    have used: "about a third" is 1/3 ± 1/24, "about half" 1/2 ± 1/12. "42 %" also states the rate 0.42,
    and "2.5 points" the difference 0.025.

    Args:
        quote: the text's words.
        expected: the number the claim says the text states.
    Returns:
        The tolerance (≥ 0, in ``expected``'s units), or None when no number in ``quote`` equals ``expected``.
    """
    for value, unit, approx in _stated_numbers(quote):
        if math.isclose(value, expected, rel_tol=1e-9, abs_tol=1e-12):
            return unit if approx else unit / 2
    return None


# a sentence about a rate (a share of something, an accuracy, a probability): the range is [0, 1]
_RATE_WORDS = re.compile(r"accura|pass@|\brate\b|\bfraction|\bshare\b|\bproportion|probabilit|percent|%|\bof the (?:held-out|"
                         r"questions|answers|completions|pairs|seeds|tokens)|\bmass\b", re.IGNORECASE)


def claim(quote: str, value, expected: float | None = None, *, rel: float | None = None,
          abs: float | None = None, low: float | None = None, high: float | None = None,
          bounds: tuple | bool | None = None, _words_rule: bool = True) -> None:
    """Check that a computed ``value`` supports the sentence ``quote`` of the text; print it.

    Either give ``expected`` (the number the text writes) and let the words set the tolerance: "0.42"
    allows ±0.005, "about 350" ±10, "about a third" ±1/24 (:func:`stated_tolerance`); or give a
    tolerance yourself (``rel``: |value − expected| ≤ rel·|expected|; ``abs``: |value − expected| ≤
    abs), which may be narrower than the words allow but never wider; or give a range ``low ≤ value ≤
    high`` (either end may be omitted), for sentences such as "more than 0.3". A sentence whose run
    varies more than its digits allow states the range the runs take, or cites a benchmark
    (:func:`claim_in_spread`), instead of "about" a number.

    Args:
        quote: the words of the markdown text this number backs (verbatim, ≥ 3 characters).
        value: a Python number, a NumPy scalar or a 0-d tensor (units as in the text).
        expected: the number the text states.
        rel, abs: tolerance around ``expected`` (one of them, ≥ 0, at most what the words allow when
            ``quote`` writes ``expected``).
        low, high: bounds, used instead of ``expected``.
        bounds: the range the quantity can take at all, e.g. (0, 1) for an accuracy. A value
            sitting on either end (within 1e-9 of the range) is refused: a check that passes at a
            ceiling or a floor cannot fail, so it backs nothing. Left at None, a sentence about a rate
            (an accuracy, pass@k, a share, a fraction, a probability, a mass, a percentage) with a value
            in [0, 1] gets (0, 1); ``False`` turns the guard off for a sentence whose point is the end
            itself ("no answer was cut off"), which the text then must show can move.
    Returns:
        None. It prints ``✓ "quote": value``; nothing is returned, so a call that ends a notebook
        cell does not also echo the bare number as the cell's result.
    Raises:
        ValueError: ``quote`` too short; no ``expected`` and no range; ``expected`` without a
            tolerance that ``quote`` does not write; a tolerance that is negative or wider than the
            words allow; a non-finite ``value``; or a ``value`` at an end of ``bounds`` (a vacuous claim).
        AssertionError: the value contradicts the text (the message names both).
    """
    if not isinstance(quote, str) or len(quote.strip()) < 3:
        raise ValueError(f"`quote` must be the text's words (a string of ≥ 3 characters); got {quote!r}")
    x = float(value.item() if hasattr(value, "item") else value)
    if not math.isfinite(x):
        raise ValueError(f"`value` must be finite; got {x}")
    if bounds is None and _RATE_WORDS.search(quote) and 0.0 <= x <= 1.0:
        bounds = (0.0, 1.0)
    if bounds is not None and bounds is not False:
        if bounds is True or len(bounds) != 2:
            raise ValueError(f"`bounds` must be (low, high), None or False; got {bounds!r}")
        lo, hi = (float(b) for b in bounds)
        if not lo < hi:
            raise ValueError(f"`bounds` must be (low, high) with low < high; got {bounds!r}")
        if x <= lo + 1e-9 * (hi - lo) or x >= hi - 1e-9 * (hi - lo):
            raise ValueError(f"{quote!r}: the value {x:g} sits at an end of its range {bounds}, where the check "
                             "cannot fail: measure it where it can move (a harder task, a smaller k)")
    if expected is not None:
        if rel is not None and abs is not None:
            raise ValueError("give at most one of `rel` or `abs` with `expected`")
        words = stated_tolerance(quote, expected) if _words_rule else None
        if rel is None and abs is None:
            if words is None:
                raise ValueError(f"{quote!r} does not write {expected:g}: give `rel` or `abs`, or quote the number")
            tol = words
        else:
            tol = abs if abs is not None else rel * math.fabs(expected)
        if tol < 0:
            raise ValueError(f"the tolerance must be ≥ 0; got {tol}")
        if words is not None and tol > words * (1 + 1e-9):
            raise ValueError(f"{quote!r}: a tolerance of ±{tol:g} is wider than its words allow (±{words:g}); "
                             "state the range the runs take, or cite the spread over seeds (rl.claim_in_spread)")
        ok, want = math.fabs(x - expected) <= tol, f"{expected:g} ± {tol:g}"
    else:
        if low is None and high is None:
            raise ValueError("give `expected` with `rel`/`abs`, or `low` and/or `high`")
        ok = (low is None or x >= low) and (high is None or x <= high)
        want = f"in [{'-inf' if low is None else f'{low:g}'}, {'inf' if high is None else f'{high:g}'}]"
    if not ok:
        raise AssertionError(f"the text says {quote!r} ({want}) but this run gives {x:g}: "
                             "update the text or find what changed")
    print(f'✓ "{plain_text(quote)}": {x:.4g}')


def claim_in_spread(quote: str, value, over_seeds, sds: float = 4.0, bounds: tuple | None = None) -> None:
    """Check that one run's ``value`` is a run a reader can get: within ``sds`` standard deviations of ``over_seeds``.

    A chapter's live run is one draw, and on another machine (another CPU's float order, another thread
    count, a GPU) the same seed is another draw. A sentence about that run therefore states what holds
    over many seeds (``over_seeds``: the per-seed values a benchmark stored for the same quantity), and
    this check ties the live run to them: |value − mean| ≤ sds·sd, with the sample standard deviation of
    ``over_seeds``. It is :func:`claim` with the tolerance taken from the measured spread, never chosen.

    Args:
        quote: the text's words (verbatim, ≥ 3 characters), as for :func:`claim`.
        value: this run's number.
        over_seeds: ≥ 3 finite per-seed values of the same quantity (a list or 1-D array).
        sds: how many standard deviations count as "a run a reader can get" (> 0; 4 by default: a normal
            quantity leaves that band once in about 16,000 runs).
        bounds: as for :func:`claim` (a value at an end of its range is refused).
    Returns:
        None (prints the check, as :func:`claim`).
    Raises:
        ValueError: fewer than 3 values, a non-finite value, ``sds`` ≤ 0, or as :func:`claim`.
        AssertionError: ``value`` is outside the band (the message names both).
    """
    values = [float(v) for v in over_seeds]
    if len(values) < 3 or not all(math.isfinite(v) for v in values):
        raise ValueError(f"`over_seeds` must hold ≥ 3 finite per-seed values; got {values!r}")
    if not (isinstance(sds, (int, float)) and sds > 0):
        raise ValueError(f"`sds` must be a positive number; got {sds!r}")
    mean = sum(values) / len(values)
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
    # the band is the runs' spread, not the quote's digits: the words describe the seeds' mean
    claim(quote, value, mean, abs=sds * sd, bounds=bounds, _words_rule=False)


def claim_comparison(quote: str, comparison, expect: str, *, margin: float | None = None) -> None:
    """Back a comparative sentence ("A beats B", "no difference detected", "within ±δ") with a paired comparison.

    ``comparison`` comes from :func:`rlbook.compare` over paired seeds. ``expect`` is what the
    sentence says:

    * ``">"``: A is larger (the whole confidence interval of A − B lies above 0);
    * ``"<"``: A is smaller (the interval lies below 0);
    * ``"none"``: no difference detected at this scale (the interval contains 0). This has no power of
      its own and accepts a result that leans either way, so the sentence must say "no difference
      detected" (or "inconclusive" where the interval is wide), never "equal", "the same" or "did not
      pay" (the book's text check enforces the wording);
    * ``"equivalent"``: the same within ±``margin`` (the whole interval lies inside [−margin, margin],
      the two one-sided tests of Schuirmann 1987, J. Pharmacokinet. Biopharm. 15:657–680, read off the
      interval at the comparison's level, which is conservative). The sentence states the margin and the
      chapter says why a difference that small does not matter.

    Args:
        quote: the text's words (verbatim, ≥ 3 characters), as for :func:`claim`.
        comparison: a :class:`rlbook.stats.Comparison`.
        expect: ">", "<", "none" or "equivalent".
        margin: the equivalence margin δ > 0, in the comparison's units (``"equivalent"`` only).
    Returns:
        None (it prints ``✓ "quote": <the comparison's line>``), like :func:`claim`.
    Raises:
        ValueError: a short quote, a ``comparison`` of the wrong type, an unknown ``expect``, or a
            ``margin`` missing, non-positive or given with another ``expect``.
        AssertionError: the interval does not support the sentence (the message gives it).
    """
    from rlbook.stats import Comparison

    if not isinstance(quote, str) or len(quote.strip()) < 3:
        raise ValueError(f"`quote` must be the text's words (a string of ≥ 3 characters); got {quote!r}")
    if not isinstance(comparison, Comparison):
        raise ValueError(f"`comparison` must be an rl.compare(...) result; got {type(comparison).__name__}")
    if expect not in (">", "<", "none", "equivalent"):
        raise ValueError(f"`expect` must be '>', '<', 'none' or 'equivalent'; got {expect!r}")
    if expect == "equivalent":
        if not (isinstance(margin, (int, float)) and not isinstance(margin, bool) and math.isfinite(margin) and margin > 0):
            raise ValueError(f"`margin` must be a positive number (the equivalence margin δ) for 'equivalent'; got {margin!r}")
    elif margin is not None:
        raise ValueError(f"`margin` goes with expect='equivalent' only; got expect={expect!r}")
    ok = {">": comparison.ci_low > 0, "<": comparison.ci_high < 0,
          "none": comparison.ci_low <= 0 <= comparison.ci_high,
          "equivalent": margin is not None and -margin <= comparison.ci_low and comparison.ci_high <= margin}[expect]
    if not ok:
        said = {">": "A > B", "<": "A < B", "none": "no difference detected",
                "equivalent": f"the same within ±{margin or 0:g}"}[expect]
        raise AssertionError(f"the text says {quote!r} ({said}) but this experiment gives {comparison}: "
                             "update the text or find what changed")
    within = f" (within ±{margin:g})" if expect == "equivalent" else ""
    print(f'✓ "{plain_text(quote)}": {comparison}{within}')
