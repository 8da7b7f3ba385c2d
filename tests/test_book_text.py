"""The book's text check: references resolve, no internal working notes, no TODOs, and every
number the prose takes from a computation is backed by an ``rl.claim`` next to it.

Conventions it enforces (README, "For contributors"):
* "chapter N", "chapters N–M", "ch. N" and "§N" / "§N.M" / "section N.M" refer to this book and
  must name a chapter notebook / a numbered heading ("## N.M Title") that exists. A paper's
  sections are cited as "Sec. N.M" of the paper, so they are not mistaken for the book's.
* Internal source material is never named in the product (only public papers are cited).
* ``rl.claim("words", ...)`` quotes words that appear in a markdown cell above it.
* A sentence that compares methods (a comparison word such as "beats", "better", "stands out",
  "outperforms", "worse", "wins", "survives" next to a method's name) contains the quoted words of an
  ``rl.claim_comparison`` in its chapter: a paired comparison over seeds with its confidence
  interval backs it. Sentences that use such a word for something else (a paper's own finding, an
  advantage being "better than usual") are listed in ``NOT_A_METHOD_COMPARISON`` with the reason.
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
COMPARISON_WORD = re.compile(r"\b(?:beats?|beating|better|stands? out|outperform(?:s|ed)?|worse|wins?|won|survives?|"
                             r"superior|inferior)\b", re.IGNORECASE)
METHOD_NAME = re.compile(r"\b(?:GRPO|Dr\. GRPO|DAPO|RLOO|CISPO|GSPO|MaxRL|DPPO|ProRL|ScaleRL|Magistral|PPO|TRPO|"
                         r"REINFORCE|critic|baselines?|rewards-to-go|clip-higher|token-level|natural (?:gradient|step)|"
                         r"vanilla|TRL|SFT|supervised model|DPO|IPO|SimPO|ORPO|KTO|best-of-\$?N\$?|reward model)\b")
# (chapter, words of the sentence, why it is not a comparison of methods that needs seeds)
NOT_A_METHOD_COMPARISON = [
    (3, '("better than usual" / "worse than usual")', "the sign of an advantage, not a comparison of methods"),
    (4, "would win outright, as it is unbiased and least noisy", "exact: bias and variance by enumeration (§4.5)"),
    (4, "tolerate variance better than bias", "a reason for a convention, not a measured comparison"),
    (4, "how much better an action was than the policy's average", "the definition of the advantage"),
    (4, "a worse critic makes bias expensive", "a critic's error, not a method"),
    (7, "The PPO paper found a simpler device that does better", "the paper's own finding, cited"),
    (7, "The critic has not got worse", "one run's value loss over time, not a comparison of methods"),
    (9, "an answer is good if it beats its siblings", "the definition of the group baseline"),
    (9, "As the model gets better", "one run over time, not a comparison of methods"),
    (11, "**Goals.**", "the chapter's goals list names what the reader will compare"),
    (13, '"Is DPO superior to PPO for LLM alignment?"', "the title and finding of the cited paper (Xu et al. 2024)"),
]


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


def _quotes(cell, names=("claim", "claim_comparison", "claim_in_spread")) -> list[str]:
    """The quoted words of every ``rl.claim``-like call (``names``) in a code cell, spaces normalised."""
    if cell.cell_type != "code":
        return []
    try:
        tree = ast.parse(re.sub(r"^\s*[%!].*$", "", cell.source, flags=re.MULTILINE))
    except SyntaxError:
        return []
    return [" ".join(str(node.args[0].value).split()) for node in ast.walk(tree)
            if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) in names
            and node.args and isinstance(node.args[0], ast.Constant)]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_claims_quote_the_text_above_them(path):
    markdown_so_far = ""
    problems = []
    for i, cell in enumerate(_cells(path)):
        if cell.cell_type == "markdown":
            markdown_so_far += "\n" + cell.source
            continue
        for quote in _quotes(cell):
            if quote not in " ".join(markdown_so_far.split()):
                problems.append(f"cell {i}: a claim quotes {quote!r}, which no markdown cell above says")
    assert not problems, "\n".join(problems)


def _sentences(markdown: str) -> list[str]:
    return re.split(r"(?<=[.!?])\s+(?=[A-Z*(\"])", " ".join(markdown.split()))


def _comparison_quotes(cells) -> list[str]:
    return [quote for cell in cells for quote in _quotes(cell, ("claim_comparison",))]


def _unbacked_comparisons(chapter: int, cells) -> list[str]:
    quotes = _comparison_quotes(cells)
    exempt = [words for ch, words, _ in NOT_A_METHOD_COMPARISON if ch == chapter]
    problems = []
    for i, cell in enumerate(cells):
        if cell.cell_type != "markdown":
            continue
        for sentence in _sentences(cell.source):
            if not (COMPARISON_WORD.search(sentence) and METHOD_NAME.search(sentence)):
                continue
            if any(q in sentence for q in quotes) or any(w in sentence for w in exempt):
                continue
            problems.append(f"cell {i}: a comparison with no rl.claim_comparison quoting it: {sentence[:200]!r}")
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
    nb.cells = [nbformat.v4.new_markdown_cell("CISPO beats GRPO here. Both learn. DAPO is no worse than RLOO."),
                nbformat.v4.new_code_cell('rl.claim_comparison("DAPO is no worse than RLOO", c, "none")')]
    problems = _unbacked_comparisons(99, nb.cells)
    assert len(problems) == 1 and "CISPO beats GRPO" in problems[0]
    assert _quotes(nb.cells[1]) == ["DAPO is no worse than RLOO"]  # claim_comparison quotes are checked too
