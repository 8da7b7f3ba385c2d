"""``rlbook book``: build the book's website from the chapters' stored outputs, offline.

    rlbook book                    # build to book/_build/html and print the path
    rlbook book --serve            # build, then serve it on http://127.0.0.1:8000
    rlbook book --serve --no-build --port 8123

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
           "live_explorer_note"]

_CONFIG_FILES = ("_config.yml", "_toc.yml")
_SOLUTION_HEADING = re.compile(r"^#{2,4}\s+(Solution to exercise\s+\S+?)\s*$", re.MULTILINE)
_SECTION_HEADING = re.compile(r"^#{1,2}\s+\S", re.MULTILINE)
_ARXIV = re.compile(r"(?<![\w/\[])arXiv:(\d{4}\.\d{4,5})")
_TEST_MARKER = re.compile(r"^[ \t]*#[ \t]*NBVAL_[A-Z_]+[ \t]*(?:\n|$)", re.MULTILINE)
_WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


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

    Returns:
        ``{"chapters": n, "solutions": n, "citations": n, "markers": n, "explorers": n}``.
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
    shutil.copytree(book_dir, stage_dir, ignore=shutil.ignore_patterns("_build", "README.md", "__pycache__"))
    keys = arxiv_keys(book_dir / "references.bib")
    stats = {"chapters": 0, "solutions": 0, "citations": 0, "markers": 0, "explorers": 0}
    for ch in chapters:
        nb = nbformat.read(ch.path, as_version=4)
        cells, folded = collapse_solutions(nb.cells)
        cells, notes = add_live_explorer_notes(cells)
        stats["explorers"] += notes
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
    if not quiet:
        print(f"built {stats['chapters']} chapters ({stats['solutions']} solutions folded, "
              f"{stats['citations']} citations linked) in {time.perf_counter() - start:.0f} s")
    return html


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
    p.set_defaults(fn=_cmd_book)
