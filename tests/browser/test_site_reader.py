"""What a reader of the built site expects beyond the text, in a real browser with the network off.

* every chapter's "Download this notebook" link downloads the stored notebook from the site itself;
* a long text output shows collapsed to its first lines, with a "Show all N lines" button that
  opens it whole and closes it again;
* ``rlbook book --pdf``: the whole book printed by the system Chromium, offline, with every formula
  typeset: more pages than chapters, and every chapter's title and its first section in the PDF's
  outline (the bookmarks Chromium makes from the printed headings).

Screenshots: ``site_long_output_collapsed.png`` and ``site_long_output_open.png`` in the artefacts
folder; the PDF is copied there too.
"""

from __future__ import annotations

import json
import re
import shutil
import zlib

import pytest

from rlbook.app import site
from rlbook.app.chapters import list_chapters

from .test_site_pages import CHAPTERS, ROOT, _wait_until_rendered


def test_download_link_gives_the_stored_notebook(built_site, offline_page, tmp_path):
    _, base = built_site
    page = offline_page.page
    chapter = CHAPTERS[-1]
    page.goto(f"{base}/{chapter}.html")
    _wait_until_rendered(page)
    link = page.locator("a.rlbook-download")
    assert link.count() == 1 and link.is_visible() and "Download this notebook" in link.text_content()
    with page.expect_download() as info:
        link.click()
    download = info.value
    assert download.suggested_filename == f"{chapter}.ipynb"
    saved = tmp_path / download.suggested_filename
    download.save_as(saved)
    assert saved.read_bytes() == (ROOT / "notebooks" / f"{chapter}.ipynb").read_bytes()
    assert json.loads(saved.read_text())["nbformat"] == 4
    note = page.locator(".rlbook-run-time")
    assert note.is_visible() and f"rlbook run {chapter[:2]}" in note.text_content()
    assert offline_page.external_requests == [] and offline_page.page_errors == [] and offline_page.console_errors == []


def test_long_outputs_are_collapsed_until_asked(built_site, offline_page, artifact_dir):
    html_dir, base = built_site
    page = offline_page.page
    page.goto(f"{base}/09_grpo.html")
    _wait_until_rendered(page)
    cells = page.locator("div.cell.tag_rlbook-long-output")
    assert cells.count() == (html_dir / "09_grpo.html").read_text().count("tag_rlbook-long-output") >= 1
    assert page.locator("button.rlbook-output-toggle").count() == cells.count()
    cell = cells.first
    output, button = cell.locator("div.cell_output"), cell.locator("button.rlbook-output-toggle")
    lines = output.evaluate("o => o.innerText.replace(/\\n+$/, '').split('\\n').length")
    assert lines > site.LONG_OUTPUT_LINES
    shown, full = output.evaluate("o => [o.clientHeight, o.scrollHeight]")
    assert shown < 0.7 * full, (shown, full)  # collapsed: most of it hidden
    line_height = output.evaluate("o => parseFloat(getComputedStyle(o.querySelector('pre')).lineHeight)")
    assert 10 * line_height < shown < (site.LONG_OUTPUT_LINES + 1) * line_height  # its first lines show
    assert button.text_content() == f"Show all {lines} lines" and button.get_attribute("aria-expanded") == "false"
    button.scroll_into_view_if_needed()
    page.screenshot(path=str(artifact_dir / "site_long_output_collapsed.png"))
    button.click()
    shown, full = output.evaluate("o => [o.clientHeight, o.scrollHeight]")
    assert shown >= full - 1 and button.text_content() == "Show less"
    cell.scroll_into_view_if_needed()
    page.screenshot(path=str(artifact_dir / "site_long_output_open.png"))
    button.click()
    assert output.evaluate("o => o.clientHeight < 0.7 * o.scrollHeight")
    # printing shows every output whole
    page.emulate_media(media="print")
    assert output.evaluate("o => o.clientHeight >= o.scrollHeight - 1")
    assert offline_page.external_requests == [] and offline_page.page_errors == [] and offline_page.console_errors == []


def _pdf_strings(data: bytes) -> str:
    """The PDF's text strings outside page content (outline titles): literal and UTF-16 hex strings,
    from plain and Flate-compressed objects."""
    chunks = [data]
    for m in re.finditer(rb"stream\r?\n(.*?)\r?\nendstream", data, re.DOTALL):
        try:
            chunks.append(zlib.decompress(m.group(1)))
        except zlib.error:
            pass
    found = []
    for chunk in chunks:
        for m in re.finditer(rb"/Title\s*(<[0-9A-Fa-f\s]*>|\((?:\\.|[^\\)])*\))", chunk):
            raw = m.group(1)
            if raw.startswith(b"<"):
                hexed = bytes.fromhex(raw[1:-1].decode().replace(" ", "").replace("\n", ""))
                found.append(hexed[2:].decode("utf-16-be") if hexed[:2] == b"\xfe\xff" else hexed.decode("latin-1"))
            else:
                text = re.sub(rb"\\([()\\])", rb"\1", raw[1:-1])
                found.append(text.decode("utf-16-be")[1:] if text[:2] == b"\xfe\xff" else text.decode("latin-1"))
    return "\n".join(found)


def _blank_pages(pdf) -> list[int]:
    """Pages (1-based) with nothing on them but the page number: no other text and no image (an empty
    code frame left behind by a block that jumped to the next sheet, or a blank sheet). Only pages
    with a handful of text operators are read closely, so the whole book takes about a second."""
    import pypdf

    reader = pypdf.PdfReader(pdf)
    total, blank = len(reader.pages), []
    for number, page in enumerate(reader.pages, 1):
        shown = len(re.findall(rb"[)\]>]\s*T[jJ]\b", page.get_contents().get_data()))
        if shown > 6:
            continue
        text = re.sub(rf"\b{number} / {total}\b", "", page.extract_text() or "").strip()
        xobjects = (page.get("/Resources") or {}).get("/XObject")
        images = [x for x in (xobjects.get_object().values() if xobjects else [])
                  if x.get_object().get("/Subtype") == "/Image"]
        if not text and not images:
            blank.append(number)
    return blank


def test_the_whole_book_prints_to_pdf_offline(built_site, browser, artifact_dir, tmp_path):
    """The PDF of ``rlbook book --pdf`` (here with the tests' Chromium; the command launches its own)."""
    html_dir, _ = built_site
    pdf = tmp_path / site.PDF_NAME
    printed = site.print_pdf(html_dir, pdf, site.toc_pages(site.find_book_dir(ROOT)), browser=browser)
    shutil.copy2(pdf, artifact_dir / site.PDF_NAME)
    chapters = list_chapters(ROOT / "notebooks")
    assert pdf.read_bytes().startswith(b"%PDF-")
    assert printed["pages"] == site.pdf_page_count(pdf) > 10 * len(chapters), printed
    assert printed["formulas"] > 1000, printed  # typeset before printing (raw TeX would be an error)
    # a display formula wider than the printed column is scaled to fit it: the widest were split over lines,
    # so none prints below 90 % of the text's size (the widest printed at 57 % before)
    assert printed["smallest_formula_scale"] >= 0.9, printed
    assert not (html_dir / "_rlbook_print.html").exists()  # the site is left as it was
    assert _blank_pages(pdf) == [], "sheets with nothing but their page number (an empty code frame?)"
    # a heading that wraps on the sheet is one outline title with its line breaks dropped: compare
    # without white space
    titles = re.sub(r"\s+", "", _pdf_strings(pdf.read_bytes()))
    for ch in (chapters[0], chapters[-1]):
        assert re.sub(r"\s+", "", ch.title) in titles, (ch.title, titles[:2000])
        nb = json.loads(ch.path.read_text())
        section = next(line.lstrip("#").strip() for cell in nb["cells"] if cell["cell_type"] == "markdown"
                       for line in "".join(cell["source"]).splitlines() if line.startswith("## "))
        assert re.sub(r"[$`*\s]", "", section)[:20] in titles, (section, ch.path.name)


def test_printing_refuses_a_page_that_reaches_off_the_machine(browser, tmp_path):
    """The offline guarantee of `rlbook book --pdf` is checked, not assumed: a page asking for an
    image from another host stops the print with the address named (the request itself is refused)."""
    page = ('<html><head><title>t</title></head><body><article class="bd-article"><h1>Offline?</h1>'
            '<p>text</p><img src="https://example.org/tracker.png"></article></body></html>')
    (tmp_path / "intro.html").write_text(page)
    with pytest.raises(RuntimeError, match="example.org/tracker.png"):
        site.print_pdf(tmp_path, tmp_path / "out.pdf", ["intro"], browser=browser, timeout_s=60)
    (tmp_path / "intro.html").write_text(page.replace('<img src="https://example.org/tracker.png">', ""))
    printed = site.print_pdf(tmp_path, tmp_path / "out.pdf", ["intro"], browser=browser, timeout_s=60)
    assert printed["pages"] == 1 and printed["formulas"] == 0


def test_the_blank_sheet_check_finds_a_sheet_with_only_its_page_number(browser, tmp_path):
    """The check of the book's PDF is not vacuous: a forced blank sheet between two of text is found,
    and a sheet holding only an image is not blank."""
    pixel = ("data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==")
    page = ('<html><head><title>t</title></head><body><article class="bd-article"><h1>First</h1>'
            '<div style="break-after: page"></div><div style="break-after: page">&nbsp;</div>'
            f'<p>third sheet</p><div style="break-before: page"><img src="{pixel}" width="200" height="200"></div>'
            '</article></body></html>')
    (tmp_path / "intro.html").write_text(page)
    printed = site.print_pdf(tmp_path, tmp_path / "out.pdf", ["intro"], browser=browser, timeout_s=60)
    assert printed["pages"] == 4, printed
    assert _blank_pages(tmp_path / "out.pdf") == [2]
