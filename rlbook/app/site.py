"""``rlbook book``: build the book's website from the chapters' stored outputs, offline.

    rlbook book                    # build to book/_build/html and print the path
    rlbook book --serve            # build, then serve it on http://127.0.0.1:8000
    rlbook book --serve --no-build --port 8123
    rlbook book --pdf              # build, then print the whole book to book/_build/rlbook.pdf

The site is a Jupyter Book 1.x (Sphinx + myst-nb + sphinx-book-theme) project: its configuration
(``_config.yml``, ``_toc.yml``, the landing page, the glossary, the bibliography and the vendored
JavaScript) lives in ``book/``. Nothing is executed: the pages show the outputs stored in
``notebooks/*.ipynb``. The build is strict: Sphinx runs nitpicky with warnings as errors (and
``--keep-going``, so every warning is reported before it fails), so a broken reference fails the build
instead of producing a broken page. Everything a page loads ships with the site (MathJax from
``sphinx-mathjax-offline``, the ipywidgets HTML manager from ``book/_assets/vendor/``), so the site
works with the network off.

Before Sphinx sees them, the chapters are *staged*: copied next to the configuration with two
changes made to the copies only (the notebooks themselves are never touched):

* each "Solution to exercise N" section becomes a collapsed ``<details>`` block, so a reader sees the
  exercises first and opens a solution on purpose;
* each ``arXiv:NNNN.NNNNN`` in the prose links to its entry in the bibliography (an id the
  bibliography does not know is an error: add it to ``book/references.bib``);
* the test markers of code cells (``# NBVAL_CHECK_OUTPUT`` and the other ``# NBVAL_*`` lines, which
  tell nbval which outputs to compare) are removed from the code a reader sees;
* each explorer widget (``rlbook.widgets.EXPLORERS``) gets a note under it with the command that runs
  it live, ``rlbook explore NAME``: on a static page its controls move but nothing updates.

The pages also load ``_assets/rlbook-reader.css`` (long code lines wrap instead of being cut off;
figures keep their aspect ratio) and ``_assets/rlbook-zoom.js`` (click a figure to see it at full
resolution; the chapters store figures at twice their displayed pixel density).

Needs the ``book`` extra (``pip install "rlbook[book]"``).
"""

from __future__ import annotations

import copy
import functools
import http.server
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from rlbook.app.chapters import PACKAGE_ROOT, list_chapters

__all__ = ["find_book_dir", "stage_book", "build_book", "serve", "add_subparser",
           "collapse_solutions", "link_citations", "arxiv_keys", "strip_test_markers", "add_live_explorer_notes",
           "live_explorer_note", "code_fingerprint", "read_run_times", "run_time_note", "read_repository",
           "chapter_header", "add_chapter_header", "output_lines", "tag_long_outputs", "toc_pages",
           "combined_page", "find_chromium", "print_pdf", "pdf_page_count"]

_CONFIG_FILES = ("_config.yml", "_toc.yml")
_SOLUTION_HEADING = re.compile(r"^#{2,4}\s+(Solution to exercise\s+\S+?)\s*$", re.MULTILINE)
_SECTION_HEADING = re.compile(r"^#{1,2}\s+\S", re.MULTILINE)
_ARXIV = re.compile(r"(?<![\w/\[])arXiv:(\d{4}\.\d{4,5})")
_TEST_MARKER = re.compile(r"^[ \t]*#[ \t]*NBVAL_[A-Z_]+[ \t]*(?:\n|$)", re.MULTILINE)
_WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
RUN_TIMES_FILE = "run_times.json"  # in book/: each chapter's measured run time (tools/build_notebooks.py)
NOTEBOOKS_FOLDER = "_notebooks"  # in the built site: the chapters' stored .ipynb, for the download link
LONG_OUTPUT_LINES = 25  # a code cell whose text outputs run longer than this is shown collapsed
LONG_OUTPUT_TAG = "rlbook-long-output"  # the cell tag that marks it (a class tag_<tag> on the page)
PDF_NAME = "rlbook.pdf"


def find_book_dir(start: Path | None = None) -> Path:
    """The site configuration folder: ``book/`` with a ``_config.yml`` under ``start`` (default: the
    working directory) or its parents, else the copy packaged inside ``rlbook`` (a wheel install).

    Raises:
        FileNotFoundError: neither exists.
    """
    here = (start or Path.cwd()).resolve()
    candidates = [p / "book" for p in (here, *here.parents)]
    candidates.append(PACKAGE_ROOT.parent / "book")  # an editable install
    candidates.append(PACKAGE_ROOT / "_bundled" / "book")  # a wheel
    for c in candidates:
        if (c / "_config.yml").is_file() and (c / "_toc.yml").is_file():
            return c
    raise FileNotFoundError("no book/ folder with _config.yml and _toc.yml found (run from a clone, "
                            "or install rlbook from its wheel, which carries them)")


def arxiv_keys(bib_path: Path) -> dict[str, str]:
    """``{arXiv id: BibTeX key}`` for every entry of ``bib_path`` with an ``eprint`` field."""
    keys: dict[str, str] = {}
    for entry in re.split(r"\n(?=@)", Path(bib_path).read_text()):
        key = re.match(r"\s*@\w+\{([^,\s]+),", entry)
        eprint = re.search(r"eprint\s*=\s*\{([^}]+)\}", entry)
        if key and eprint:
            keys[eprint.group(1).strip()] = key.group(1)
    return keys


def link_citations(text: str, keys: dict[str, str], where: str = "") -> str:
    """Turn each ``arXiv:NNNN.NNNNN`` of a markdown text into a link to its bibliography entry.

    Args:
        text: markdown.
        keys: ``{arXiv id: BibTeX key}`` (:func:`arxiv_keys`).
        where: named in the error (e.g. the chapter file).
    Raises:
        KeyError: an arXiv id with no entry in the bibliography.
    """
    def link(m: re.Match) -> str:
        arxiv_id = m.group(1)
        if arxiv_id not in keys:
            raise KeyError(f"{where}: arXiv:{arxiv_id} is cited but has no entry in book/references.bib "
                           "(add one with eprint = {" + arxiv_id + "})")
        return f'<a class="reference internal" href="bibliography.html#cite-{keys[arxiv_id].lower()}">arXiv:{arxiv_id}</a>'

    # code spans and math are left alone
    parts = re.split(r"(`[^`]*`|\$\$.*?\$\$|\$[^$\n]*\$)", text, flags=re.DOTALL)
    return "".join(p if i % 2 else _ARXIV.sub(link, p) for i, p in enumerate(parts))


def collapse_solutions(cells: list[dict]) -> tuple[list[dict], int]:
    """Fold every "Solution to exercise N" section of a chapter into a closed ``<details>`` block.

    A solution runs from its heading to the next solution heading or the next ``#``/``##`` heading
    (or the end). The heading becomes the block's ``<summary>``; the cells between stay as they are
    (markdown, code and outputs), so plots in a solution still show once it is opened.

    Args:
        cells: the notebook's cells (nbformat dicts); not modified.
    Returns:
        (new cells, number of solutions folded).
    """
    out: list[dict] = []
    open_block = False
    count = 0
    for cell in cells:
        cell = copy.deepcopy(cell)
        if cell.get("cell_type") == "markdown":
            src = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
            pieces: list[str] = []
            pos = 0
            # split the cell at solution headings and at section headings that end an open block
            for m in re.finditer(r"^#{1,4}\s+.*$", src, re.MULTILINE):
                line = m.group(0)
                is_solution = _SOLUTION_HEADING.match(line)
                ends_block = is_solution or _SECTION_HEADING.match(line)
                if not ends_block:
                    continue
                pieces.append(src[pos:m.start()])
                if open_block:
                    pieces.append("\n</details>\n\n")
                    open_block = False
                if is_solution:
                    title = is_solution.group(1)
                    slug = re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")
                    pieces.append(f'<details class="solution" id="{slug}">\n<summary>{title}</summary>\n\n')
                    open_block = True
                    count += 1
                    pos = m.end()
                else:
                    pos = m.start()
            pieces.append(src[pos:])
            cell["source"] = "".join(pieces)
        out.append(cell)
    if open_block:
        out.append({"cell_type": "markdown", "metadata": {}, "source": "</details>", "id": "rlbook-end-solutions"})
    return out, count


def strip_test_markers(source: str) -> str:
    """``source`` without its ``# NBVAL_*`` lines (nbval's markers: for the test run, not the reader).

    Only whole-line markers are removed; a line of code is never changed.
    """
    return _TEST_MARKER.sub("", source)


def code_fingerprint(cells: list[dict]) -> str:
    """SHA-256 (hex) of a notebook's code, the sources of its code cells in order.

    A chapter's recorded run time (``book/run_times.json``) is shown only while the stored notebook's
    code still has the fingerprint it was measured with, so a changed chapter never shows a stale time.

    Args:
        cells: the notebook's cells (nbformat dicts).
    """
    import hashlib

    digest = hashlib.sha256()
    for cell in cells:
        if cell.get("cell_type") == "code":
            src = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
            digest.update(src.encode("utf-8") + b"\0")
    return digest.hexdigest()


def read_run_times(book_dir: Path) -> dict[str, dict]:
    """``{chapter stem: entry}`` from ``book_dir/run_times.json`` (``{}`` if there is none).

    Each entry, written by ``tools/build_notebooks.py``, has ``seconds`` (wall clock), ``cpu_cores``,
    ``size``, ``load_average``, ``date`` and ``code_sha256`` (:func:`code_fingerprint`).
    """
    import json

    path = Path(book_dir) / RUN_TIMES_FILE
    return json.loads(path.read_text()) if path.is_file() else {}


def _minutes(seconds: float, upper: bool = False) -> str:
    """``"under a minute"``, ``"about 1½ minutes"``, ``"about 3 minutes"`` (to the nearest half minute);
    with ``upper``, a bound rounded up: ``"under 2 minutes"``."""
    import math

    if seconds < 60:
        return "under a minute"
    halves = math.floor(seconds / 30) + 1 if upper else max(2, round(seconds / 30))
    whole, half = divmod(halves, 2)
    return f"{'under' if upper else 'about'} {whole}{'½' if half else ''} minute{'' if halves == 2 else 's'}"


def run_time_note(number: str, entry: dict | None) -> str:
    """The sentence at the top of chapter ``number`` on how long it runs, from its recorded time.

    A time measured while the machine's load average exceeded its cores (other work competing for
    them) is longer than a reader's run, so it is shown as a bound ("under 2 minutes"), not as
    "about".

    Args:
        number: the chapter's number, ``"03"``.
        entry: its :func:`read_run_times` entry, or ``None`` when no time is recorded for the
            chapter's current code (then the sentence says so instead of guessing).
    """
    command = f"<code>rlbook run {number}</code>"
    if entry is None:
        return (f"Run it with {command} (a CPU is enough; its run time has not been measured for this "
                "version of the chapter yet).")
    cores = entry.get("cpu_cores", 2)
    load = entry.get("load_average")
    busy = load is not None and load > cores
    detail = (f"measured {entry['seconds']:.0f} s on {entry.get('date', '?')}, load average {load}"
              + (" (a busy machine: a bound)" if busy else ""))
    return (f'Runs in <span title="{detail}">{_minutes(entry["seconds"], upper=busy)}</span> on {cores} CPU '
            f"core{'s' if cores != 1 else ''} at the default size: {command}.")


def read_repository(book_dir: Path) -> tuple[str, str] | None:
    """``(url, branch)`` of the source repository from ``_config.yml``'s ``repository`` section, or ``None``."""
    import yaml

    config = yaml.safe_load((Path(book_dir) / "_config.yml").read_text()) or {}
    repo = config.get("repository") or {}
    url = (repo.get("url") or "").rstrip("/")
    return (url, repo.get("branch") or "main") if url else None


def chapter_header(stem: str, number: str, run_time: dict | None, repository: tuple[str, str] | None) -> str:
    """The block under a chapter's title: download its notebook, its source, and how long it runs.

    Args:
        stem: the chapter's file name without ``.ipynb``, ``"03_reinforce"``.
        number: its number, ``"03"``.
        run_time: its recorded run time (:func:`read_run_times`), or ``None``.
        repository: ``(url, branch)`` (:func:`read_repository`), or ``None`` for no source link.
    """
    links = [f'<a class="rlbook-download" href="{NOTEBOOKS_FOLDER}/{stem}.ipynb" download="{stem}.ipynb">'
             "Download this notebook (.ipynb)</a>"]
    if repository:
        url, branch = repository
        links.append(f'<a class="rlbook-source" href="{url}/blob/{branch}/notebooks/src/{stem}.py">'
                     f"Source: notebooks/src/{stem}.py</a>")
    return (f'<div class="rlbook-chapter-meta">\n<p class="rlbook-links">{" · ".join(links)}</p>\n'
            f'<p class="rlbook-run-time">{run_time_note(number, run_time)}</p>\n</div>')


def add_chapter_header(cells: list[dict], header: str) -> list[dict]:
    """``cells`` with ``header`` placed right under the chapter's ``# Title`` (the first markdown
    cell's first level-1 heading; at the top if there is none). The input is not modified."""
    out = copy.deepcopy(cells)
    for cell in out:
        if cell.get("cell_type") != "markdown":
            continue
        src = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        m = re.search(r"^#\s+.*$", src, re.MULTILINE)
        if m:
            cell["source"] = f"{src[:m.end()]}\n\n{header}\n{src[m.end():]}"
            return out
        break
    return [{"cell_type": "markdown", "metadata": {}, "source": header, "id": "rlbook-chapter-meta"}, *out]


def output_lines(cell: dict) -> int:
    """How many lines of text a code cell's outputs show (streams, plain-text results, tracebacks).

    0 when an output is an image, HTML or a widget (a figure is not collapsed behind a toggle).
    """
    lines = 0
    for out in cell.get("outputs", []):
        kind = out.get("output_type")
        if kind == "stream":
            text = out.get("text", "")
        elif kind == "error":
            text = "\n".join(out.get("traceback", []))
        else:
            data = out.get("data", {})
            if set(data) - {"text/plain"}:
                return 0
            text = data.get("text/plain", "")
        text = "".join(text) if isinstance(text, list) else text
        lines += len(text.rstrip("\n").split("\n")) if text.strip() else 0
    return lines


def tag_long_outputs(cells: list[dict], max_lines: int = LONG_OUTPUT_LINES) -> tuple[list[dict], int]:
    """Tag each code cell whose text outputs run longer than ``max_lines`` with :data:`LONG_OUTPUT_TAG`.

    On the page the tag is the class ``tag_rlbook-long-output`` of the cell, and
    ``_assets/rlbook-reader.js`` shows its output collapsed with a "show all N lines" button (with
    no JavaScript, or in print, the whole output shows). The notebooks are not modified.

    Args:
        cells: the notebook's cells (nbformat dicts); not modified.
        max_lines: the longest output shown whole (a positive int).
    Returns:
        (new cells, number of cells tagged).
    Raises:
        ValueError: ``max_lines`` is not a positive int.
    """
    if isinstance(max_lines, bool) or not isinstance(max_lines, int) or max_lines < 1:
        raise ValueError(f"`max_lines` must be a positive int; got {max_lines!r}")
    out, count = [], 0
    for cell in cells:
        if cell.get("cell_type") == "code" and output_lines(cell) > max_lines:
            cell = copy.deepcopy(cell)
            tags = cell.setdefault("metadata", {}).setdefault("tags", [])
            if LONG_OUTPUT_TAG not in tags:
                tags.append(LONG_OUTPUT_TAG)
            count += 1
        out.append(cell)
    return out, count


def _explorer_functions() -> dict[str, str]:
    """``{function name: explorer name}`` from the registry, e.g. ``{"gae_explorer": "gae"}``."""
    from rlbook.widgets import EXPLORERS

    return {target.split(":")[1]: name for name, target in EXPLORERS.items()}


def live_explorer_note(name: str) -> str:
    """The note placed under explorer ``name`` on the static site: the command that runs it live."""
    return (f'<div class="rlbook-live-note">Live version: <code>rlbook explore {name}</code> '
            "(or run this notebook in Jupyter). On this static page the controls are not connected to "
            "Python, so moving them changes nothing.</div>")


def add_live_explorer_notes(cells: list[dict]) -> tuple[list[dict], int]:
    """After each code cell that shows an explorer widget, add a markdown cell with :func:`live_explorer_note`.

    A cell shows an explorer when its source calls one of the registry's functions (``gae_explorer(``,
    ``clip_explorer(``, ...) and its outputs hold a widget view.

    Args:
        cells: the notebook's cells (nbformat dicts); not modified.
    Returns:
        (new cells, number of notes added).
    """
    functions = _explorer_functions()
    out: list[dict] = []
    count = 0
    for cell in cells:
        out.append(cell)
        if cell.get("cell_type") != "code":
            continue
        src = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        called = [name for fn, name in functions.items() if re.search(rf"\b{re.escape(fn)}\(", src)]
        shows_widget = any(_WIDGET_VIEW in o.get("data", {}) for o in cell.get("outputs", []))
        if called and shows_widget:
            out.append({"cell_type": "markdown", "metadata": {}, "source": live_explorer_note(called[0]),
                        "id": f"rlbook-live-{count}"})
            count += 1
    return out, count


def stage_book(stage_dir: Path, book_dir: Path | None = None, notebooks_dir: Path | None = None) -> dict:
    """Copy the site configuration and the chapters (solutions folded, citations linked) into ``stage_dir``.

    Each chapter also gets :func:`chapter_header` under its title (download, source, run time) and
    its long text outputs tagged (:func:`tag_long_outputs`).

    Returns:
        ``{"chapters": n, "solutions": n, "citations": n, "markers": n, "explorers": n,
        "long_outputs": n, "timed": n}`` (``timed``: chapters with a run time for their current code).
    Raises:
        FileNotFoundError: no configuration or no chapters; KeyError: a citation with no entry.
    """
    import nbformat


    book_dir = book_dir or find_book_dir()
    chapters = list_chapters(notebooks_dir)
    if not chapters:
        raise FileNotFoundError("no chapters (NN_name.ipynb) to build")
    stage_dir = Path(stage_dir)
    if stage_dir.exists():
        shutil.rmtree(stage_dir)
    shutil.copytree(book_dir, stage_dir, ignore=shutil.ignore_patterns("_build", "README.md", "__pycache__",
                                                                     RUN_TIMES_FILE))
    keys = arxiv_keys(book_dir / "references.bib")
    run_times = read_run_times(book_dir)
    repository = read_repository(book_dir)
    stats = {"chapters": 0, "solutions": 0, "citations": 0, "markers": 0, "explorers": 0, "long_outputs": 0,
             "timed": 0}
    for ch in chapters:
        nb = nbformat.read(ch.path, as_version=4)
        stem = ch.path.stem
        entry = run_times.get(stem)
        if entry is not None and entry.get("code_sha256") != code_fingerprint(nb.cells):
            entry = None  # measured on other code: stale
        stats["timed"] += entry is not None
        cells, folded = collapse_solutions(nb.cells)
        cells, notes = add_live_explorer_notes(cells)
        cells, long_outputs = tag_long_outputs(cells)
        cells = add_chapter_header(cells, chapter_header(stem, ch.number, entry, repository))
        stats["explorers"] += notes
        stats["long_outputs"] += long_outputs
        for cell in cells:
            if cell["cell_type"] == "markdown":
                before = cell["source"]
                cell["source"] = link_citations(before, keys, where=ch.path.name)
                stats["citations"] += cell["source"].count('href="bibliography.html#cite-')
            elif cell["cell_type"] == "code":
                stripped = strip_test_markers(cell["source"])
                stats["markers"] += cell["source"] != stripped
                cell["source"] = stripped
        nb.cells = [nbformat.from_dict(c) for c in cells]
        nbformat.write(nb, stage_dir / ch.path.name)
        stats["chapters"] += 1
        stats["solutions"] += folded
    return stats


def build_book(out_dir: Path | None = None, book_dir: Path | None = None, notebooks_dir: Path | None = None,
               quiet: bool = False) -> Path:
    """Build the site; return the folder of the HTML (``<out_dir>/html``, default ``book/_build/html``).

    Stages the chapters into ``<out_dir>/_stage`` and runs ``jupyter-book build`` on it, nitpicky and
    with warnings as errors.

    Raises:
        RuntimeError: the build failed or warned (its log is in the message).
        ModuleNotFoundError: Jupyter Book is not installed (the ``book`` extra).
    """
    import importlib.util

    if importlib.util.find_spec("jupyter_book") is None:
        raise ModuleNotFoundError("Jupyter Book is not installed: pip install \"rlbook[book]\"")
    book_dir = book_dir or find_book_dir()
    out_dir = Path(out_dir or default_build_dir(book_dir)).resolve()
    stage = out_dir / "_stage"
    stats = stage_book(stage, book_dir, notebooks_dir)
    html = out_dir / "html"
    if html.exists():
        shutil.rmtree(html)  # a clean build: no stale page can hide a broken one
    # jupyter-book writes <path-output>/_build/html; build in the stage, then move the html out
    cmd = [sys.executable, "-c", "from jupyter_book.cli.main import main; main()", "build", str(stage), "--path-output", str(stage),
           "--builder", "html", "--warningiserror", "--nitpick", "--keep-going", "--quiet"]
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    log = (proc.stdout or "") + (proc.stderr or "")
    built = stage / "_build" / "html"
    if proc.returncode != 0 or not (built / "index.html").is_file():
        raise RuntimeError(f"the book did not build (exit {proc.returncode}):\n{log[-6000:]}")
    shutil.move(str(built), str(html))
    downloads = html / NOTEBOOKS_FOLDER  # each chapter's stored notebook, for its download link
    downloads.mkdir()
    for ch in list_chapters(notebooks_dir):
        shutil.copy2(ch.path, downloads / ch.path.name)
    if not quiet:
        print(f"built {stats['chapters']} chapters ({stats['solutions']} solutions folded, "
              f"{stats['citations']} citations linked) in {time.perf_counter() - start:.0f} s")
    return html


def toc_pages(book_dir: Path) -> list[str]:
    """The site's pages in reading order from ``_toc.yml``: the root, then every ``file`` entry."""
    import yaml

    toc = yaml.safe_load((Path(book_dir) / "_toc.yml").read_text())
    pages = [toc["root"]]

    def walk(node):
        if isinstance(node, dict):
            if "file" in node:
                pages.append(str(node["file"]))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk({k: v for k, v in toc.items() if k != "root"})
    return pages


_ARTICLE = re.compile(r'<article class="bd-article">(.*)</article>', re.DOTALL)
_WIDGET_STATE = re.compile(r'<script type="application/vnd\.jupyter\.widget-state\+json">.*?</script>', re.DOTALL)


def combined_page(html_dir: Path, pages: list[str]) -> str:
    """One HTML page holding every page of the built site in ``pages`` order, for printing.

    The first page's HTML is the frame (its stylesheets and scripts); its article is replaced by
    each page's article in turn, each in a ``<section class="rlbook-print-page">`` that starts a
    new printed page; every page's saved widget state is carried over, so widgets render; links
    between pages become links inside the one page.

    Raises:
        FileNotFoundError: a page is not in ``html_dir``; ValueError: a page has no article.
    """
    html_dir = Path(html_dir)
    sources = {name: (html_dir / f"{name}.html").read_text(encoding="utf-8") for name in pages}
    frame = sources[pages[0]]
    names = "|".join(re.escape(n) for n in pages)
    link = re.compile(rf'href="(?:\./)?({names})\.html(#[^"]*)?"')
    sections, states = [], []
    for name, text in sources.items():
        m = _ARTICLE.search(text)
        if m is None:
            raise ValueError(f"{name}.html has no <article class=\"bd-article\">")
        body = link.sub(lambda l: f'href="{l.group(2) or "#rlbook-page-" + l.group(1)}"', m.group(1))
        sections.append(f'<section class="rlbook-print-page" id="rlbook-page-{name}">{body}</section>')
        states += _WIDGET_STATE.findall(text.split("</head>", 1)[0])
    frame = _WIDGET_STATE.sub("", frame)
    frame = frame.replace("</head>", "\n".join(states) + "\n</head>", 1)
    m = _ARTICLE.search(frame)
    return (frame[:m.start(1)] + "\n".join(sections) + frame[m.end(1):]).replace(
        "<body", '<body class="rlbook-print"', 1)


def find_chromium() -> str | None:
    """The system Chromium: ``$RLBOOK_CHROMIUM``, else ``chromium``, ``chromium-browser`` or
    ``google-chrome`` on the PATH (``None`` if there is none)."""
    import os

    env = os.environ.get("RLBOOK_CHROMIUM")
    if env:
        return env if Path(env).is_file() else None
    for name in ("/usr/bin/chromium", "chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


_RENDERED = """async () => {
    const sleep = ms => new Promise(r => setTimeout(r, ms));
    const mathjax = document.querySelector('script[src*="mathjax"]') !== null;  // the site's pages load it
    for (let i = 0; i < 600 && mathjax && !(window.MathJax && window.MathJax.startup && window.MathJax.startup.promise); i++) await sleep(100);
    if (window.MathJax && window.MathJax.startup) await window.MathJax.startup.promise;
    const views = () => document.querySelectorAll('script[type="application/vnd.jupyter.widget-view+json"]').length;
    const shown = () => [...document.querySelectorAll('.widget-subarea')].filter(e => e.children.length > 0).length;
    for (let i = 0; i < 600 && shown() < views(); i++) await sleep(100);
    if (window.MathJax && window.MathJax.typesetPromise) await window.MathJax.typesetPromise();
    document.querySelectorAll('details').forEach(d => { d.open = true; });
    await Promise.all([...document.images].map(img => { img.loading = 'eager'; return img.complete ? null : img.decode().catch(() => null); }));
    await document.fonts.ready;
    return {formulas: document.querySelectorAll('mjx-container').length, widgets: shown(), views: views(),
            raw: document.querySelectorAll('mjx-merror').length};
}"""

# what is wider than the printed column (display formulas, widgets) is scaled down to fit it, instead
# of being cut at the sheet's edge (on screen they scroll sideways)
_FIT_TO_COLUMN = """() => {
    let scaled = 0, smallest = 1;
    const items = document.querySelectorAll('mjx-container[display="true"], .widget-subarea > .jupyter-widgets, .widget-subarea > .lm-Widget');
    for (const el of items) {
        const room = el.parentElement.clientWidth, wide = el.scrollWidth;
        if (room > 0 && wide > room + 1) {
            el.style.zoom = (room / wide).toFixed(3); scaled++;
            if (el.matches('mjx-container')) smallest = Math.min(smallest, room / wide);
        }
    }
    return {scaled: scaled, smallest_formula_scale: +smallest.toFixed(3)};
}"""
_A4_COLUMN_PX = 688  # the printed column: A4's 210 mm less 2 × 14 mm margins, at 96 px per inch

_FOOTER = ('<div style="font-size:8px;width:100%;text-align:center;color:#666;">'
           '<span class="pageNumber"></span> / <span class="totalPages"></span></div>')


def print_pdf(html_dir: Path, pdf_path: Path, pages: list[str], chromium: str | None = None,
              timeout_s: float = 300.0, browser=None) -> dict:
    """Print the built site as one PDF with the system Chromium, offline; return what was printed.

    Serves ``html_dir`` on localhost, opens :func:`combined_page` of ``pages`` in headless
    Chromium (Playwright) with every request off localhost refused, waits until MathJax has typeset
    every formula, the saved widgets have rendered and the images have loaded, opens the folded
    solutions, scales down what is wider than the printed column (a long display formula, a widget),
    and prints A4 pages with page numbers and an outline (bookmarks) from the headings.

    Args:
        html_dir: the built site (:func:`build_book`).
        pdf_path: the PDF to write.
        pages: the pages in reading order (:func:`toc_pages`).
        chromium: the Chromium executable (default :func:`find_chromium`).
        timeout_s: the longest wait for the page to load and render, in seconds.
        browser: a Playwright Chromium already running (a test's), used instead of launching one.
    Returns:
        ``{"path": pdf_path, "pages": printed pages, "bytes": size, "formulas": typeset formulas,
        "scaled": formulas and widgets scaled down to fit the column, "smallest_formula_scale": the
        smallest scale a display formula was printed at (1: none scaled), "seconds": time taken}``.
    Raises:
        ModuleNotFoundError: Playwright is not installed; FileNotFoundError: no Chromium;
        RuntimeError: the page asked for something off this machine, or a formula failed to typeset.
    """
    if browser is None:
        try:
            from playwright.sync_api import sync_playwright
        except ImportError as err:
            raise ModuleNotFoundError("printing the PDF needs Playwright: pip install \"rlbook[browser]\" "
                                      "(it drives the system Chromium; nothing is downloaded)") from err
        chromium = chromium or find_chromium()
        if chromium is None:
            raise FileNotFoundError("no Chromium found to print the PDF: install it with `apt-get install chromium` "
                                    "(Debian/Ubuntu) or set RLBOOK_CHROMIUM")
        with sync_playwright() as pw:
            launched = pw.chromium.launch(executable_path=chromium, headless=True,
                                          args=["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                                                "--disable-component-update", "--no-first-run"])
            try:
                return print_pdf(html_dir, pdf_path, pages, timeout_s=timeout_s, browser=launched)
            finally:
                launched.close()
    import threading

    start = time.perf_counter()
    html_dir, pdf_path = Path(html_dir), Path(pdf_path)
    print_page = html_dir / "_rlbook_print.html"
    print_page.write_text(combined_page(html_dir, pages), encoding="utf-8")
    handler = functools.partial(_QuietHandler, directory=str(html_dir))
    blocked: list[str] = []
    try:
        with http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler) as httpd:
            threading.Thread(target=httpd.serve_forever, daemon=True).start()
            base = f"http://127.0.0.1:{httpd.server_address[1]}"
            context = browser.new_context(viewport={"width": 1000, "height": 1400}, service_workers="block")
            try:
                def route(r):
                    if r.request.url.startswith(base) or r.request.url.startswith(("data:", "blob:")):
                        r.continue_()
                    else:
                        blocked.append(r.request.url)
                        r.abort("blockedbyclient")

                context.route("**/*", route)
                page = context.new_page()
                page.set_default_timeout(timeout_s * 1000)
                page.goto(f"{base}/{print_page.name}", wait_until="load")
                rendered = page.evaluate(_RENDERED)
                page.set_viewport_size({"width": _A4_COLUMN_PX, "height": 1000})  # lay out as printed
                page.emulate_media(media="print")
                rendered.update(page.evaluate(_FIT_TO_COLUMN))
                pdf_path.parent.mkdir(parents=True, exist_ok=True)
                page.pdf(path=str(pdf_path), format="A4", print_background=True, outline=True, tagged=True,
                         display_header_footer=True, header_template="<span></span>", footer_template=_FOOTER,
                         margin={"top": "14mm", "bottom": "16mm", "left": "14mm", "right": "14mm"})
            finally:
                context.close()
                httpd.shutdown()
    finally:
        print_page.unlink(missing_ok=True)
    if blocked:
        raise RuntimeError(f"the book asked for {len(blocked)} address(es) off this machine while printing: {blocked[:5]}")
    if rendered["raw"]:
        raise RuntimeError(f"{rendered['raw']} formulas failed to typeset (MathJax errors) in the PDF")
    return {"path": pdf_path, "pages": pdf_page_count(pdf_path), "bytes": pdf_path.stat().st_size,
            "formulas": rendered["formulas"], "scaled": rendered["scaled"],
            "smallest_formula_scale": rendered["smallest_formula_scale"], "seconds": time.perf_counter() - start}


def pdf_page_count(pdf_path: Path) -> int:
    """The number of pages of a PDF written by Chromium (its ``/Type /Page`` objects)."""
    return len(re.findall(rb"/Type\s*/Page(?![a-zA-Z])", Path(pdf_path).read_bytes()))


def default_build_dir(book_dir: Path | None = None) -> Path:
    """Where ``rlbook book`` builds, and ``--no-build`` looks, when no ``--out`` is given.

    In a clone: ``book/_build`` beside the site configuration; from an installed wheel (the
    configuration is the packaged copy, which must stay untouched): ``./book/_build`` in the
    working directory.
    """
    book_dir = Path(book_dir or find_book_dir())
    return (Path.cwd() / "book" if _is_packaged(book_dir) else book_dir) / "_build"


def _is_packaged(book_dir: Path) -> bool:
    return PACKAGE_ROOT in Path(book_dir).resolve().parents


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 (the base class's name)
        pass


def serve(html_dir: Path, port: int = 8000, host: str = "127.0.0.1") -> None:
    """Serve ``html_dir`` on http://host:port until interrupted (localhost only by default)."""
    handler = functools.partial(_QuietHandler, directory=str(html_dir))
    with http.server.ThreadingHTTPServer((host, port), handler) as httpd:
        print(f"serving the book on http://{host}:{httpd.server_address[1]}/ (Ctrl-C to stop)", flush=True)
        try:
            httpd.serve_forever()
        except KeyboardInterrupt:
            pass


def _cmd_book(args) -> int:
    try:
        if args.no_build:
            html = Path(args.out or default_build_dir()).resolve() / "html"
            if not (html / "index.html").is_file():
                print(f"rlbook: no built site at {html}; run `rlbook book` first", file=sys.stderr)
                return 2
        else:
            html = build_book(Path(args.out) if args.out else None)
        if args.pdf:
            printed = print_pdf(html, html.parent / PDF_NAME, toc_pages(find_book_dir()))
            scale = printed.get("smallest_formula_scale", 1.0)
            print(f"printed {printed['pages']} pages ({printed['bytes'] / 1e6:.1f} MB, {printed['formulas']} formulas, "
                  f"{printed.get('scaled', 0)} scaled to fit, the smallest to {scale:.0%}) "
                  f"in {printed['seconds']:.0f} s: {printed['path']}", file=sys.stderr)
    except (FileNotFoundError, ModuleNotFoundError, KeyError, RuntimeError) as err:
        print(f"rlbook: {err}", file=sys.stderr)
        return 1
    print(html)
    if args.serve:
        serve(html, args.port)
    return 0


def add_subparser(sub) -> None:
    """Add the ``book`` subcommand to the ``rlbook`` parser's subparsers ``sub``."""
    p = sub.add_parser("book", help="build the book's website (Jupyter Book) from the stored outputs; --serve to serve it")
    p.add_argument("--out", help="build folder (default: book/_build); the site goes to <out>/html")
    p.add_argument("--serve", action="store_true", help="serve the built site on http://127.0.0.1:PORT")
    p.add_argument("--port", type=int, default=8000, help="port for --serve (default 8000; 0 picks a free one)")
    p.add_argument("--no-build", action="store_true", help="with --serve: serve the last build without rebuilding")
    p.add_argument("--pdf", action="store_true",
                   help=f"also print the whole book to <out>/{PDF_NAME} with the system Chromium (offline; needs Playwright)")
    p.set_defaults(fn=_cmd_book)
