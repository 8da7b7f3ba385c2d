"""The book's text check: references resolve, no internal working notes, no TODOs, and every
number the prose takes from a computation is backed by an ``rl.claim`` next to it.

Conventions it enforces (README, "For contributors"):
* "chapter N", "chapters N–M", "ch. N" and "§N" / "§N.M" / "section N.M" refer to this book and
  must name a chapter notebook / a numbered heading ("## N.M Title") that exists. A paper's
  sections are cited as "Sec. N.M" of the paper, so they are not mistaken for the book's.
* Internal source material is never named in the product (only public papers are cited).
* ``rl.claim("words", ...)`` quotes words of the markdown right above it (the markdown cells between
  the previous run of code cells and its own), not words further up that it was not written for.
* A sentence that compares methods (a comparison word such as "beats", "better", "faster", "higher",
  "ahead", "raised", "moves", "-er than", "did as well", "did not pay" next to a method's name)
  contains the quoted words of an ``rl.claim_comparison`` in the first run of code cells after its
  markdown cell: a paired comparison over seeds with its confidence interval backs it. A sentence
  backed by a "none" verdict says "no difference detected" or "inconclusive"; one that says two
  methods are alike needs an "equivalent" verdict with its margin. Sentences that use such a word for
  something else (an exact computation, a paper's own finding, an advantage being "better than
  usual") are listed in ``tests/text_exemptions.py`` with the reason.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
CHAPTERS = {int(p.name[:2]) for p in NOTEBOOKS}

INTERNAL = re.compile(r"FIELD[-_ ]NOTES|field notes|the seed.s worked|\bseeds? ?0\d\d\b|seed tables|\bseed (?:doc|document)s?\b|"
                      r"\bshared/(?:seeds|STYLE|FIELD)|\.\./shared\b|STYLE\.md", re.IGNORECASE)
TODO = re.compile(r"\b(?:TODO|FIXME|XXX)\b")
CHAPTER_REF = re.compile(r"\b(?:[Cc]hapters?|[Cc]h\.)\s*(\d+)(?:\s*(?:[–-]|and|to)\s*(\d+))?")
SECTION_REF = re.compile(r"(?:§\s?|\b[Ss]ections?\s+)(\d+)(?:\.(\d+))?(?![\d.]*\d)")
HEADING = re.compile(r"^#{1,3}\s+(\d+)\.(\d+)?\s", re.MULTILINE)
# comparative words: the verbs and adjectives of "A beats B", "-er than" forms, and the words that say two
# methods are alike ("did as well", "did not pay"); matched next to a method's name
COMPARISON_WORD = re.compile(
    r"\b(?:beats?|beating|better|best|stands? out|outperform\w*|underperform\w*|worse|worst|wins?|won|survives?|"
    r"superior|inferior|ahead|behind|\w+er than|more \w+ than|less \w+ than|fewer|faster|slower|higher|lower|"
    r"larger|smaller|greater|raised?|raises|lowered|lowers|moves?|moved|held back|holds? back|helps?|helped|"
    r"hurts?|did not (?:pay|help|hurt|matter)|costs? nothing|as (?:well|good|fast|much|often) as|did as well|"
    r"the same as|equal(?:ly)?|matche[sd]|improv\w*|gains?|drops?|dropped|outlast\w*|overtak\w*)\b", re.IGNORECASE)
# words that say two methods are alike: a "none" verdict (no power, either sign) cannot back them; an
# "equivalent" verdict (the interval inside ±margin) can
EQUALITY_WORD = re.compile(r"\b(?:equal(?:ly)?|did as well|as good as|did not (?:pay|help|hurt|matter)|costs? nothing|"
                           r"no better|no worse|the same as|indistinguishable|on a par|matche[sd])\b", re.IGNORECASE)
NONE_WORDING = re.compile(r"no\s+difference\s+detected|inconclusive", re.IGNORECASE)
METHOD_NAME = re.compile(r"\b(?:GRPO|Dr\. GRPO|DAPO|RLOO|CISPO|GSPO|MaxRL|DPPO|ProRL|ScaleRL|Magistral|PPO|TRPO|"
                         r"REINFORCE|critic|baselines?|rewards-to-go|clip-higher|token-level|natural (?:gradient|step)|"
                         r"vanilla|TRL|SFT|supervised model|DPO|IPO|SimPO|ORPO|KTO|best-of-\$?N\$?|reward model)\b")
from text_exemptions import NOT_A_METHOD_COMPARISON  # noqa: E402  (chapter, words, why)


def _cells(path: Path):
    return nbformat.read(path, as_version=4).cells


def _sections() -> set[tuple[int, int | None]]:
    found = set()
    for path in NOTEBOOKS:
        chapter = int(path.name[:2])
        found.add((chapter, None))
        for cell in _cells(path):
            if cell.cell_type == "markdown":
                for major, minor in HEADING.findall(cell.source):
                    if minor and int(major) == chapter:
                        found.add((chapter, int(minor)))
    return found


def _text_of(cell) -> str:
    text = cell.source
    for out in cell.get("outputs", []):
        text += "\n" + str(out.get("text", "")) + "\n" + str(out.get("data", {}).get("text/plain", ""))
    return text


def _library_and_readme() -> list[Path]:
    return sorted((ROOT / "rlbook").rglob("*.py")) + [ROOT / "README.md"] + sorted((ROOT / "benchmarks").glob("*.py"))


def _bad_refs(text: str, sections) -> list[str]:
    bad = []
    for m in CHAPTER_REF.finditer(text):
        for n in filter(None, m.groups()):
            if int(n) not in CHAPTERS:
                bad.append(m.group(0))
    for m in SECTION_REF.finditer(text):
        major, minor = int(m.group(1)), (int(m.group(2)) if m.group(2) else None)
        if (major, minor) not in sections:
            bad.append(m.group(0))
    return bad


def test_there_are_chapters():
    assert len(NOTEBOOKS) >= 9


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_chapter_text(path):
    sections = _sections()
    problems = []
    for i, cell in enumerate(_cells(path)):
        text = _text_of(cell)
        problems += [f"cell {i}: internal material named: {m.group(0)!r}" for m in INTERNAL.finditer(text)]
        problems += [f"cell {i}: leftover {m.group(0)}" for m in TODO.finditer(cell.source)]
        # a control character is a TeX command eaten by a Python string ("\\alpha" written as "\alpha" is BEL + "lpha"):
        # MathJax fails on it in the printed book
        problems += [f"cell {i}: control character {ch!r} in {cell.source[max(0, k - 20):k + 20]!r}"
                     for k, ch in enumerate(cell.source) if ord(ch) < 32 and ch not in "\n"]
        if cell.cell_type == "markdown":
            problems += [f"cell {i}: reference to a missing chapter/section: {r!r}" for r in _bad_refs(cell.source, sections)]
            # Sphinx wraps a display with line breaks in \begin{split}; a \tag inside it fails to typeset (MathJax)
            problems += [f"cell {i}: a tagged display with line breaks (\\\\ and \\tag): {m.group(0)[:60]!r}"
                         for m in re.finditer(r"\$\$.*?\$\$", cell.source, re.S) if "\\\\" in m.group(0) and "\\tag" in m.group(0)]
    assert not problems, "\n".join(problems)


def _claim_calls(cell, names) -> list:
    """The ``ast.Call`` nodes of every call named in ``names`` (``rl.claim``, ``claim_comparison``, ...) whose
    first argument is a string literal, in a code cell (none for markdown or unparsable code)."""
    if cell.cell_type != "code":
        return []
    try:
        tree = ast.parse(re.sub(r"^\s*[%!].*$", "", cell.source, flags=re.MULTILINE))
    except SyntaxError:
        return []
    return [node for node in ast.walk(tree)
            if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) in names
            and node.args and isinstance(node.args[0], ast.Constant)]


def _quotes(cell, names=("claim", "claim_comparison", "claim_in_spread")) -> list[str]:
    """The quoted words of every ``rl.claim``-like call (``names``) in a code cell, spaces normalised."""
    return [" ".join(str(node.args[0].value).split()) for node in _claim_calls(cell, names)]


def _misplaced_quotes(cells) -> list[str]:
    """Claims whose quote is not in the nearest markdown above them: the markdown cells between the previous
    run of code cells and this one (a quote found only further up could back a sentence it was not written for)."""
    block, after_code, problems = "", False, []
    for i, cell in enumerate(cells):
        if cell.cell_type == "markdown":
            if after_code:
                block, after_code = "", False
            block += "\n" + cell.source
            continue
        after_code = True
        for quote in _quotes(cell):
            if quote not in " ".join(block.split()):
                problems.append(f"cell {i}: a claim quotes {quote!r}, which the markdown right above it does not say")
    return problems


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_claims_quote_the_text_above_them(path):
    problems = _misplaced_quotes(_cells(path))
    assert not problems, "\n".join(problems)


def _sentences(markdown: str) -> list[str]:
    return re.split(r"(?<=[.!?])\s+(?=[A-Z*(\"])", " ".join(markdown.split()))


def _comparison_calls(cell) -> list[tuple[str, str]]:
    """(quote, expect) of every ``rl.claim_comparison`` call in a code cell (expect "?" when not a literal)."""
    calls = []
    for node in _claim_calls(cell, ("claim_comparison",)):
        expect = node.args[2] if len(node.args) > 2 else next((k.value for k in node.keywords if k.arg == "expect"), None)
        calls.append((" ".join(str(node.args[0].value).split()), expect.value if isinstance(expect, ast.Constant) else "?"))
    return calls


def _following_code(cells, i: int) -> list:
    """The code cells that back markdown cell ``i``: the first run of code cells after it."""
    j = i + 1
    while j < len(cells) and cells[j].cell_type != "code":
        j += 1
    run = []
    while j < len(cells) and cells[j].cell_type == "code":
        run.append(cells[j])
        j += 1
    return run


def _unbacked_comparisons(chapter: int, cells) -> list[str]:
    """Comparative sentences that the code cells right after them do not back with a paired comparison.

    A sentence with a comparison word next to a method's name must contain the quote of an
    ``rl.claim_comparison`` in the first run of code cells after its markdown cell (not anywhere in the
    chapter: a generic quote elsewhere must not back it). A sentence whose only backing is a "none"
    verdict must say "no difference detected" or "inconclusive"; one that says the methods are alike
    ("did as well", "did not pay") needs an "equivalent" verdict.
    """
    exempt = [words for ch, words, _ in NOT_A_METHOD_COMPARISON if ch == chapter]
    problems = []
    for i, cell in enumerate(cells):
        if cell.cell_type != "markdown":
            continue
        calls = [call for code in _following_code(cells, i) for call in _comparison_calls(code)]
        for sentence in _sentences(cell.source):
            backing = [expect for quote, expect in calls if quote in sentence]
            for expect in backing:
                if expect == "none" and not NONE_WORDING.search(sentence):
                    problems.append(f"cell {i}: a 'none' verdict backs a sentence that does not say \"no difference "
                                    f"detected\" or \"inconclusive\": {sentence[:200]!r}")
            if any(w in sentence for w in exempt):
                continue
            if EQUALITY_WORD.search(sentence) and METHOD_NAME.search(sentence) and "equivalent" not in backing:
                problems.append(f"cell {i}: a sentence says two methods are alike with no 'equivalent' verdict "
                                f"(rl.claim_comparison(..., 'equivalent', margin=...)) after it: {sentence[:200]!r}")
                continue
            if not (COMPARISON_WORD.search(sentence) and METHOD_NAME.search(sentence)) or backing:
                continue
            problems.append(f"cell {i}: a comparison with no rl.claim_comparison quoting it in the code cell(s) that "
                            f"follow: {sentence[:200]!r}")
    return problems


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_comparative_sentences_are_backed_by_paired_comparisons(path):
    problems = _unbacked_comparisons(int(path.name[:2]), _cells(path))
    assert not problems, "\n".join(problems)


def test_exemptions_still_match_a_sentence():
    """An exemption whose sentence was rewritten must go, or it would silently exempt nothing (or too much)."""
    stale = []
    for chapter, words, _ in NOT_A_METHOD_COMPARISON:
        text = " ".join(" ".join(c.source.split()) for p in NOTEBOOKS if int(p.name[:2]) == chapter
                        for c in _cells(p) if c.cell_type == "markdown")
        if words not in text:
            stale.append((chapter, words))
    assert not stale, f"exemptions that match no sentence any more: {stale}"


def test_library_readme_and_benchmarks_name_no_internal_material():
    problems = []
    for path in _library_and_readme():
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if INTERNAL.search(line) or TODO.search(line):
                problems.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not problems, "\n".join(problems)


def test_library_chapter_references_resolve():
    problems = []
    for path in sorted((ROOT / "rlbook").rglob("*.py")) + [ROOT / "README.md"]:
        text = path.read_text(encoding="utf-8")
        problems += [f"{path.relative_to(ROOT)}: {m.group(0)!r}" for m in CHAPTER_REF.finditer(text)
                     if any(int(n) not in CHAPTERS for n in filter(None, m.groups()))]
    assert not problems, "\n".join(problems)


# --- the checker checks itself -----------------------------------------------------------------

def test_the_patterns_catch_what_they_should():
    sections = {(3, None), (3, 2), (9, None), (9, 6)}
    assert _bad_refs("see chapter 31 and §9.7", sections) == ["chapter 31", "§9.7"]
    assert _bad_refs("see §9.6, section 3.2 and Sec. 4.1.2 of the paper", sections) == []
    assert INTERNAL.search("as in the FIELD-NOTES") and INTERNAL.search("seed 002 Part 4")
    assert not INTERNAL.search("rl.seed_everything(0); seed 0, 1 and 2")
    assert TODO.search("# TODO: fix") and not TODO.search("todos")


def test_the_comparison_rule_catches_an_unbacked_sentence():
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("CISPO beats GRPO here. Both learn. Between DAPO and RLOO no difference "
                                              "detected at this scale."),
                nbformat.v4.new_code_cell('rl.claim_comparison("Between DAPO and RLOO no difference detected", c, "none")')]
    problems = _unbacked_comparisons(99, nb.cells)
    assert len(problems) == 1 and "CISPO beats GRPO" in problems[0]
    assert _quotes(nb.cells[1]) == ["Between DAPO and RLOO no difference detected"]  # claim_comparison quotes are checked too


_LINTER_DIRECTIVE = re.compile(r"#\s*(noqa\b|type:\s*ignore|pragma:|pylint:|fmt:\s*(off|on|skip))")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_code_cells_carry_no_linter_directives(path):
    """What a reader sees of a code cell is for the reader: a ``# noqa: F821`` is a note to a linter."""
    nb = nbformat.read(path, as_version=4)
    found = [f"cell {i}: {line.strip()[:100]}" for i, cell in enumerate(nb.cells) if cell.cell_type == "code"
             for line in cell.source.splitlines() if _LINTER_DIRECTIVE.search(line)]
    assert found == [], found
