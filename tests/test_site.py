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


@pytest.fixture
def built_html(built_book_html):
    """The whole site, built once for the run (tests/conftest.py)."""
    return built_book_html


def test_book_builds_strictly_and_stages_every_solution(built_html):
    """The whole site builds with nitpicky warnings as errors; each chapter's solutions are folded."""
    html = built_html
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


def test_cli_book_prints_the_path(book_cli_build, tmp_path):
    status, printed, out = book_cli_build  # `rlbook book --out DIR`, run once for the session
    assert status == 0, printed
    lines = printed.strip().splitlines()
    assert lines[-1] == str(out / "html"), printed
    assert re.fullmatch(r"built \d+ chapters \(\d+ solutions folded, \d+ citations linked\) in \d+ s", lines[-2]), printed
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
    assert 'add_js_file("rlbook-reader.js"' in ext
    assert "http" not in (BOOK / "_assets" / "rlbook-reader.js").read_text()


# ---- reader features: download, source, run time, long outputs --------------------------------

def _stream(lines):
    return nbformat.v4.new_output("stream", name="stdout", text="".join(f"line {i}\n" for i in range(lines)))


def test_long_text_outputs_are_tagged_and_figures_never():
    long = nbformat.v4.new_code_cell("for i in range(30): print(i)", outputs=[_stream(20), _stream(6)])  # 26 lines
    limit = nbformat.v4.new_code_cell("x", outputs=[_stream(25)])
    figure = nbformat.v4.new_code_cell("plot()", outputs=[_stream(40), nbformat.v4.new_output(
        "display_data", data={"image/png": "iVBOR", "text/plain": "<Figure>"})])
    result = nbformat.v4.new_code_cell("df", outputs=[nbformat.v4.new_output(
        "execute_result", data={"text/plain": "\n".join(["row"] * 30)}, execution_count=1)])
    cells = [long, limit, figure, result, _md("# Title")]
    assert [site.output_lines(c) for c in cells[:4]] == [26, 25, 0, 30]
    out, count = site.tag_long_outputs(cells, max_lines=25)
    assert count == 2
    assert [site.LONG_OUTPUT_TAG in c.get("metadata", {}).get("tags", []) for c in out] == [True, False, False, True, False]
    assert "tags" not in long.metadata  # the input is not modified
    for bad in (0, -3, 2.5, True, "25"):
        with pytest.raises(ValueError, match="max_lines"):
            site.tag_long_outputs(cells, max_lines=bad)


def test_run_time_note_rounds_to_the_half_minute_and_says_when_unmeasured():
    minutes = {20: "under a minute", 59.9: "under a minute", 60: "about 1 minute", 89: "about 1½ minutes",
               100: "about 1½ minutes", 105: "about 2 minutes", 170: "about 3 minutes", 615: "about 10 minutes"}
    assert {s: site._minutes(s) for s in minutes} == minutes
    bounds = {20: "under a minute", 60: "under 1½ minutes", 61: "under 1½ minutes", 99.5: "under 2 minutes",
              121: "under 2½ minutes"}
    assert {s: site._minutes(s, upper=True) for s in bounds} == bounds
    note = site.run_time_note("03", {"seconds": 95.0, "cpu_cores": 2, "date": "2026-11-25", "load_average": 1.6})
    assert "about 1½ minutes</span> on 2 CPU cores at the default size" in note and "<code>rlbook run 03</code>" in note
    assert 'title="measured 95 s on 2026-11-25' in note
    # measured while other work competed for the cores: a bound, rounded up
    busy = site.run_time_note("03", {"seconds": 95.0, "cpu_cores": 2, "date": "2026-11-25", "load_average": 3.3})
    assert "under 2 minutes</span> on 2 CPU cores" in busy and "busy machine" in busy
    unmeasured = site.run_time_note("11", None)
    assert "<code>rlbook run 11</code>" in unmeasured and "not been measured" in unmeasured and "minute" not in unmeasured


def test_code_fingerprint_follows_the_code_only():
    cells = [_md("# T"), nbformat.v4.new_code_cell("x = 1", outputs=[_stream(2)]), nbformat.v4.new_code_cell("print(x)")]
    fp = site.code_fingerprint(cells)
    same = [_md("# Other prose"), nbformat.v4.new_code_cell("x = 1"), nbformat.v4.new_code_cell("print(x)")]
    assert site.code_fingerprint(same) == fp  # prose and outputs do not count
    assert site.code_fingerprint([cells[0], nbformat.v4.new_code_cell("x = 2"), cells[2]]) != fp
    assert site.code_fingerprint([cells[0], cells[2], cells[1]]) != fp  # nor does the order
    assert site.code_fingerprint([nbformat.v4.new_code_cell("x = 1print(x)")]) != fp  # cells stay apart


def test_chapter_header_sits_under_the_title():
    cells = [_md("# 3. REINFORCE\n\n**Goals.** ..."), nbformat.v4.new_code_cell("import rlbook")]
    header = site.chapter_header("03_reinforce", "03", None, ("https://example.org/r", "dev"))
    out = site.add_chapter_header(cells, header)
    first = out[0]["source"]
    assert first.startswith("# 3. REINFORCE\n\n<div class=\"rlbook-chapter-meta\">") and first.endswith("**Goals.** ...")
    assert 'href="_notebooks/03_reinforce.ipynb" download="03_reinforce.ipynb"' in header
    assert 'href="https://example.org/r/blob/dev/notebooks/src/03_reinforce.py"' in header
    assert "rlbook-source" not in site.chapter_header("03_reinforce", "03", None, None)
    assert cells[0]["source"].startswith("# 3. REINFORCE\n\n**Goals")  # not modified
    untitled = site.add_chapter_header([nbformat.v4.new_code_cell("x")], header)
    assert untitled[0]["source"] == header and len(untitled) == 2


def test_staging_shows_a_run_time_only_for_the_code_it_was_measured_on(tmp_path):
    """A recorded time whose code fingerprint no longer matches the chapter is not shown."""
    import json
    import shutil

    book = tmp_path / "book"
    shutil.copytree(BOOK, book, ignore=shutil.ignore_patterns("_build"))
    first, second = CHAPTERS[0], CHAPTERS[1]
    nb = nbformat.read(ROOT / "notebooks" / f"{first}.ipynb", as_version=4)
    (book / site.RUN_TIMES_FILE).write_text(json.dumps({
        first: {"seconds": 150.0, "cpu_cores": 2, "size": "small", "load_average": 0.3, "date": "2026-01-01",
                "code_sha256": site.code_fingerprint(nb.cells)},
        second: {"seconds": 30.0, "cpu_cores": 2, "size": "small", "load_average": 0.3, "date": "2026-01-01",
                 "code_sha256": "0" * 64}}))
    stats = site.stage_book(tmp_path / "stage", book_dir=book)
    assert stats["timed"] == 1
    text = {ch: nbformat.read(tmp_path / "stage" / f"{ch}.ipynb", as_version=4).cells[0].source for ch in (first, second)}
    assert "Runs in <span" in text[first] and "about 2½ minutes</span> on 2 CPU cores" in text[first]
    assert "not been measured" in text[second] and "Runs in" not in text[second]
    assert not (tmp_path / "stage" / site.RUN_TIMES_FILE).exists()


def test_the_build_tool_records_what_the_site_checks(tmp_path):
    """tools/build_notebooks.py writes the entry (with the same fingerprint) that staging accepts."""
    import importlib.util
    import json

    spec = importlib.util.spec_from_file_location("build_notebooks", ROOT / "tools" / "build_notebooks.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    nb = nbformat.read(ROOT / "notebooks" / f"{CHAPTERS[0]}.ipynb", as_version=4)
    entry = tool.record_run_time(CHAPTERS[0], nb, 61.26, 0.5, path=tmp_path / "times.json")
    assert json.loads((tmp_path / "times.json").read_text()) == {CHAPTERS[0]: entry}
    assert entry["seconds"] == 61.3 and entry["size"] == "small" and entry["cpu_cores"] >= 1
    assert entry["code_sha256"] == site.code_fingerprint(nb.cells)


def test_every_chapter_page_offers_its_notebook_its_source_and_its_run_time(built_html):
    html = built_html
    times = site.read_run_times(BOOK)
    url, branch = site.read_repository(BOOK)
    assert url.startswith("https://") and branch
    assert f'href="{url}"' in (html / "intro.html").read_text()  # the theme's repository button
    for ch in CHAPTERS:
        page = (html / f"{ch}.html").read_text()
        assert page.count('<div class="rlbook-chapter-meta">') == 1, ch
        # the download: the stored notebook itself, from the site
        assert f'href="_notebooks/{ch}.ipynb" download="{ch}.ipynb"' in page, ch
        assert (html / "_notebooks" / f"{ch}.ipynb").read_bytes() == (ROOT / "notebooks" / f"{ch}.ipynb").read_bytes()
        # the source: the chapter's jupytext file in the repository
        assert f'href="{url}/blob/{branch}/notebooks/src/{ch}.py"' in page and (ROOT / "notebooks" / "src" / f"{ch}.py").is_file()
        # the run time: the recorded one while the code is unchanged, else a plain "not measured"
        note = re.search(r'<p class="rlbook-run-time">(.*?)</p>', page, re.DOTALL).group(1)
        assert f"<code>rlbook run {ch[:2]}</code>" in note, ch
        entry = times.get(ch)
        nb = nbformat.read(ROOT / "notebooks" / f"{ch}.ipynb", as_version=4)
        if entry and entry["code_sha256"] == site.code_fingerprint(nb.cells):
            minutes = entry["seconds"] / 60
            shown = re.search(r"(under a minute|(about|under) (\d+)(½?) minutes?)</span> on (\d+) CPU core", note)
            assert shown, (ch, note)
            if minutes < 1:
                assert shown.group(1) == "under a minute", (ch, note)
            else:
                value = int(shown.group(3)) + 0.5 * bool(shown.group(4))
                if entry["load_average"] > entry["cpu_cores"]:  # a busy machine: a bound
                    assert shown.group(2) == "under" and 0 < value - minutes <= 0.5, (ch, note)
                else:
                    assert shown.group(2) == "about" and abs(value - minutes) <= 0.25, (ch, note)
            assert int(shown.group(5)) == entry["cpu_cores"]
        else:
            assert "not been measured" in note, (ch, note)
        # long text outputs: the cells whose text outputs pass the limit, counted here independently
        long = 0
        for cell in nb.cells:
            if cell.cell_type != "code":
                continue
            texts, figure = [], False
            for out in cell.outputs:
                data = out.get("data", {})
                figure |= any(k != "text/plain" for k in data)
                texts.append(out.get("text") or "\n".join(out.get("traceback", [])) or data.get("text/plain", ""))
            n = sum(t.rstrip("\n").count("\n") + 1 for t in texts if t.strip())
            long += (not figure) and n > site.LONG_OUTPUT_LINES
        assert page.count("tag_rlbook-long-output") == long, ch
    assert sum((html / f"{ch}.html").read_text().count("tag_rlbook-long-output") for ch in CHAPTERS) >= 10


def test_cli_book_pdf_prints_the_last_build_into_the_build_folder(tmp_path, monkeypatch, capsys):
    """`rlbook book --pdf` hands the built site and the table of contents' pages to the printer
    (tests/browser/test_site_reader.py prints the real book)."""
    html = tmp_path / "b" / "html"
    html.mkdir(parents=True)
    (html / "index.html").write_text("<html></html>")
    calls = []

    def fake_print(html_dir, pdf_path, pages):
        calls.append((html_dir, pdf_path, pages))
        return {"path": pdf_path, "pages": 3, "bytes": 1000, "formulas": 2, "scaled": 1, "smallest_formula_scale": 0.92,
                "seconds": 0.1}

    monkeypatch.setattr(site, "print_pdf", fake_print)
    assert cli.main(["book", "--no-build", "--pdf", "--out", str(tmp_path / "b")]) == 0
    assert calls == [(html, tmp_path / "b" / site.PDF_NAME, site.toc_pages(BOOK))]
    assert site.toc_pages(BOOK) == ["intro", *CHAPTERS, "glossary", "bibliography", "where_next"]
    err = capsys.readouterr().err
    assert "printed 3 pages" in err and "1 scaled to fit, the smallest to 92%" in err


def test_combined_page_joins_the_pages_in_order_with_their_widget_states(tmp_path):
    """The page that `rlbook book --pdf` prints: the first page's frame, every page's article in
    order, every page's saved widget state, and links between pages turned into links inside it."""
    def page(name, body, state=""):
        head = f'<head><title>{name}</title>{state}<script src="_static/x.js"></script></head>'
        return f'<html>{head}<body><nav>menu</nav><article class="bd-article">{body}</article><footer>f</footer></body></html>'

    state = '<script type="application/vnd.jupyter.widget-state+json">{"state": {"m1": {}}}</script>'
    (tmp_path / "intro.html").write_text(page("intro", '<h1>Book</h1><a href="02_b.html#sec-2">see</a>'))
    (tmp_path / "01_a.html").write_text(page("01_a", '<h1>A</h1><a href="intro.html">home</a>', state))
    (tmp_path / "02_b.html").write_text(page("02_b", '<h1 id="sec-2">B</h1><a href="https://example.org/02_b.html">x</a>'))
    out = site.combined_page(tmp_path, ["intro", "01_a", "02_b"])
    assert out.count('<section class="rlbook-print-page"') == 3
    assert out.index("<h1>Book</h1>") < out.index("<h1>A</h1>") < out.index('<h1 id="sec-2">B</h1>')
    assert 'href="#sec-2"' in out and 'href="#rlbook-page-intro"' in out  # links inside the one page
    assert 'href="https://example.org/02_b.html"' in out  # an external link is left alone
    assert out.split("</head>")[0].count("widget-state+json") == 1 and '"m1"' in out.split("</head>")[0]
    assert out.count("<nav>menu</nav>") == 1 and '<body class="rlbook-print"' in out
    (tmp_path / "bad.html").write_text("<html><head></head><body>no article</body></html>")
    with pytest.raises(ValueError, match="bad.html"):
        site.combined_page(tmp_path, ["intro", "bad"])


def test_every_bibliography_entry_names_its_authors_title_and_year():
    """A reader can tell who wrote each cited work (an entry without authors printed as an orphan title)."""
    import re

    text = (BOOK / "references.bib").read_text(encoding="utf-8")
    entries = re.findall(r"@\w+\{([^,\s]+),(.*?)\n\}", text, re.S)
    assert len(entries) > 20
    missing = [(key, field) for key, body in entries for field in ("author|organization|institution", "title", "year")
               if not re.search(rf"^\s*(?:{field})\s*=", body, re.M | re.I)]
    assert missing == [], f"bibliography entries missing a field: {missing}"
