"""The book site without a browser: staging (solutions folded, citations linked), the table of
contents, the glossary's code names, and a strict build (tests/browser/test_site_pages.py checks the pages)."""

import inspect
import re
from pathlib import Path

import nbformat
import pytest

import rlbook as rl
from rlbook.app import cli, site

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"
CHAPTERS = sorted(p.stem for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def _md(text):
    return nbformat.v4.new_markdown_cell(text)


def test_collapse_solutions_folds_each_solution_and_closes_before_the_next_section():
    cells = [_md("## Exercises\n\n1. Do this.\n2. Do that."), _md("## Solutions\n\n### Solution to exercise 1\n\nBecause."),
             nbformat.v4.new_code_cell("print(1)"), _md("### Solution to exercise 2\n\nSee above."),
             _md("## Further reading\n\nA book.")]
    out, count = site.collapse_solutions(cells)
    assert count == 2
    html = "\n".join(c["source"] for c in out)
    assert html.count("<details") == 2 and html.count("</details>") == 2
    assert '<summary>Solution to exercise 1</summary>' in html and '<summary>Solution to exercise 2</summary>' in html
    # the first block closes right before the second opens; the second before "Further reading"
    assert out[3]["source"].startswith("\n</details>") and "</details>" in out[4]["source"].split("## Further")[0]
    assert out[2]["cell_type"] == "code"  # code and outputs stay inside, untouched
    assert cells[1]["source"].startswith("## Solutions")  # the input is not modified


def test_collapse_solutions_closes_a_block_left_open_at_the_end():
    out, count = site.collapse_solutions([_md("### Solution to exercise 1\n\nThe end.")])
    assert count == 1 and out[-1]["source"] == "</details>"
    plain = _md("# Title\n\nNo exercises.")
    assert site.collapse_solutions([plain]) == ([plain], 0)


def test_link_citations_links_known_ids_and_names_unknown_ones():
    keys = {"1707.06347": "schulman2017ppo"}
    text = "PPO (Schulman et al. 2017, arXiv:1707.06347) and `arXiv:1707.06347` in code, $x$."
    out = site.link_citations(text, keys)
    assert out.count('href="bibliography.html#cite-schulman2017ppo"') == 1  # not inside the code span
    assert "`arXiv:1707.06347`" in out
    with pytest.raises(KeyError, match=r"ch99.ipynb: arXiv:2999.00001 .*references.bib"):
        site.link_citations("see arXiv:2999.00001", keys, where="ch99.ipynb")


def test_every_chapter_is_in_the_table_of_contents_once():
    files = re.findall(r"^\s*-\s*file:\s*(\S+)", (BOOK / "_toc.yml").read_text(), re.MULTILINE)
    assert sorted(f for f in files if f[:2].isdigit()) == CHAPTERS
    assert len(files) == len(set(files))
    assert {"glossary", "bibliography"} <= set(files)
    for f in files:
        assert (BOOK / f"{f}.md").is_file() or f in CHAPTERS, f


def test_every_cited_arxiv_id_has_a_bibliography_entry():
    keys = site.arxiv_keys(BOOK / "references.bib")
    cited = set()
    for src in (ROOT / "notebooks" / "src").glob("*.py"):
        cited |= set(re.findall(r"arXiv:(\d{4}\.\d{4,5})", src.read_text()))
    assert cited, "no citations found"
    assert cited <= set(keys), f"missing in book/references.bib: {sorted(cited - set(keys))}"


def test_glossary_code_names_exist_in_the_library():
    """Every `rl.name` in the glossary is in the library, and every argument named "`arg` of `rl.fn`"
    is a parameter of that function (or a GRPOConfig field)."""
    text = (BOOK / "glossary.md").read_text()
    rows = [line for line in text.splitlines() if line.startswith("| ") and not line.startswith("| symbol")]
    assert len(rows) >= 40
    fields = set(rl.GRPOConfig.__dataclass_fields__)
    for row in rows:
        code = row.split("|")[3]
        for name in re.findall(r"`rl\.(\w+)`", code):
            assert hasattr(rl, name), f"rl.{name} (glossary row: {row[:60]})"
        for arg, fn in re.findall(r"`(\w+)` of `rl\.(\w+)`", code):
            assert arg in inspect.signature(getattr(rl, fn)).parameters, f"{arg} of rl.{fn}"
        bare = [n for n in re.findall(r"`(\w+)`", code) if not re.search(rf"`rl\.{n}`", code)]
        for name in bare:
            of_fn = re.search(rf"`{name}` of `rl\.(\w+)`", code)
            known = of_fn or name in fields or name in {"advantages", "log_probs", "old_log_probs", "ref_log_probs"}
            assert known, f"`{name}` in the glossary is neither a GRPOConfig field nor an argument of a named function"
        # "first met": {doc}`ch. N <NN_name>`, its text naming the chapter it links to
        met = row.rstrip(" |").rsplit("|", 1)[1]
        links = re.findall(r"\{doc\}`ch\. (\d+) <(\w+)>`", met)
        assert links and len(links) == met.count("{doc}"), f"'first met' is not {{doc}}`ch. N <NN_name>`: {met}"
        for number, doc in links:
            assert doc in CHAPTERS and int(doc[:2]) == int(number), (number, doc)


def test_find_book_dir_finds_the_clone_and_fails_clearly(tmp_path, monkeypatch):
    assert site.find_book_dir(ROOT / "tests") == BOOK
    monkeypatch.setattr(site, "PACKAGE_ROOT", tmp_path / "pkg" / "rlbook")  # no packaged copy either
    with pytest.raises(FileNotFoundError, match="_config.yml"):
        site.find_book_dir(tmp_path)


def test_book_builds_strictly_and_stages_every_solution(tmp_path, capsys):
    """The whole site builds with nitpicky warnings as errors; each chapter's solutions are folded."""
    html = site.build_book(tmp_path / "_build", quiet=True)
    assert (html / "index.html").is_file()
    for ch in CHAPTERS:
        page = (html / f"{ch}.html").read_text()
        src = (ROOT / "notebooks" / "src" / f"{ch}.py").read_text()
        expected = len(re.findall(r"^# #{2,4} Solution to exercise", src, re.MULTILINE))
        assert page.count('<details class="solution"') == expected, ch
        assert "https://cdn" not in page and "unpkg.com/thebe" not in page.split("</head>")[0].replace(
            'const THEBE_JS_URL = "https://unpkg.com/thebe', ""), ch
    assert (html / "_static" / "mathjax" / "tex-chtml.js").is_file()
    assert (html / "_static" / "vendor" / "embed-amd.js").is_file()


def test_a_broken_reference_fails_the_build(tmp_path):
    """Warnings are errors: a glossary link to a chapter that does not exist stops the build."""
    book = tmp_path / "book"
    import shutil

    shutil.copytree(BOOK, book, ignore=shutil.ignore_patterns("_build"))
    (book / "glossary.md").write_text((book / "glossary.md").read_text() + "\nSee {doc}`99_no_such_chapter`.\n")
    with pytest.raises(RuntimeError, match="99_no_such_chapter"):
        site.build_book(tmp_path / "_build", book_dir=book, quiet=True)


def test_cli_book_prints_the_path(tmp_path, capsys):
    assert cli.main(["book", "--out", str(tmp_path / "b")]) == 0
    assert capsys.readouterr().out.strip().endswith(str(tmp_path / "b" / "html"))
    assert cli.main(["book", "--serve", "--no-build", "--out", str(tmp_path / "none")]) == 2


def test_no_build_serves_the_last_build_of_an_installed_wheel(tmp_path, monkeypatch, capsys):
    """From a wheel the site is built into ./book/_build (the packaged configuration stays untouched);
    `--serve --no-build` must serve that build, not look inside the package."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(site, "_is_packaged", lambda book_dir: True)
    assert site.default_build_dir() == tmp_path / "book" / "_build"
    html = tmp_path / "book" / "_build" / "html"
    html.mkdir(parents=True)
    (html / "index.html").write_text("<html></html>")
    served = []
    monkeypatch.setattr(site, "serve", lambda path, port: served.append(path))
    assert cli.main(["book", "--serve", "--no-build"]) == 0
    assert served == [html] and capsys.readouterr().out.strip() == str(html)


def test_serve_answers_on_localhost(tmp_path):
    """`rlbook book --serve` serves the built folder on 127.0.0.1 (a thread here; Ctrl-C stops it)."""
    import socket
    import threading
    import time
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (tmp_path / "index.html").write_text("<html><body>rlbook</body></html>")
    threading.Thread(target=site.serve, args=(tmp_path, port), daemon=True).start()
    for _ in range(100):  # the server starts within a moment
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.1)
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/index.html", timeout=5) as resp:
        assert b"rlbook" in resp.read()


def test_strip_test_markers_removes_nbval_lines_only():
    src = "# NBVAL_CHECK_OUTPUT\nx = 1  # NBVAL_CHECK_OUTPUT stays: a comment on code\n  #NBVAL_IGNORE_OUTPUT\nprint(x)"
    assert site.strip_test_markers(src) == "x = 1  # NBVAL_CHECK_OUTPUT stays: a comment on code\nprint(x)"
    assert site.strip_test_markers("print('# NBVAL_X')") == "print('# NBVAL_X')"


def test_live_explorer_notes_follow_each_explorer_widget_only():
    widget = {"output_type": "display_data", "metadata": {},
              "data": {"application/vnd.jupyter.widget-view+json": {"model_id": "m"}, "text/plain": "VBox()"}}
    explorer = nbformat.v4.new_code_cell("display(gae_explorer())", outputs=[widget])
    progress = nbformat.v4.new_code_cell("hist = rl.train_ppo(cfg)", outputs=[widget])  # a tqdm widget
    not_run = nbformat.v4.new_code_cell("ae.advantage_explorer()")  # no widget saved: nothing to say
    out, count = site.add_live_explorer_notes([explorer, progress, not_run])
    assert count == 1 and len(out) == 4
    assert out[1]["cell_type"] == "markdown" and "<code>rlbook explore gae</code>" in out[1]["source"]
    assert out[2] is progress and out[3] is not_run


def test_staged_chapters_carry_no_test_markers_and_a_live_note_under_each_explorer(tmp_path):
    stats = site.stage_book(tmp_path / "stage")
    assert stats["markers"] >= 40  # the chapters' NBVAL_CHECK_OUTPUT cells
    staged = {p.stem: nbformat.read(p, as_version=4) for p in (tmp_path / "stage").glob("[0-9][0-9]_*.ipynb")}
    notes = {}
    for ch, nb in staged.items():
        assert not [c for c in nb.cells if c.cell_type == "code" and re.search(r"^\s*#\s*NBVAL_", c.source, re.M)], ch
        notes[ch] = re.findall(r"rlbook explore ([\w-]+)</code>", "\n".join(c.source for c in nb.cells if c.cell_type == "markdown"))
    shown = {name for names in notes.values() for name in names}
    assert shown == set(rl.widgets.EXPLORERS), notes  # every explorer the chapters show, each with its command
    assert stats["explorers"] == sum(len(v) for v in notes.values())
    src = (ROOT / "notebooks" / "01_rl_objective.ipynb").read_text()
    assert "NBVAL_CHECK_OUTPUT" in src  # the notebooks keep their markers: nbval needs them


def test_pages_load_the_reader_css_and_zoom_script():
    ext = (BOOK / "_ext" / "rlbook_site.py").read_text()
    assert 'add_css_file("rlbook-reader.css")' in ext and 'add_js_file("rlbook-zoom.js"' in ext
    css = (BOOK / "_assets" / "rlbook-reader.css").read_text()
    assert "pre-wrap" in css and "height: auto" in css
    js = (BOOK / "_assets" / "rlbook-zoom.js").read_text()
    assert "http" not in js  # offline: nothing fetched
