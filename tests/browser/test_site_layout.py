"""The built site's tables as a reader sees them: nothing slides out of the column, numbers line up.

* the glossary's tables fit the text column at a 1280-pixel window: none scrolls sideways, and the
  "first met" column lies inside the column (it was cut off behind a horizontal scroll);
* the explorers' saved readouts (number tables) are set in a fixed-width font, one line per row;
* at every width one search button shows, and no top bar that holds nothing else;
* the glossary's code names wrap between their words (after ``_``, ``.``, ``=``, between CamelCase
  words), never inside one, at a 1280-pixel window;
* at a phone's 390 pixels no page is wider than the window (long inline formulas scroll in place).

* code lines that wrap keep a hanging indent (never a continuation at the column's left edge).

Screenshots: ``site_glossary.png`` and ``site_code_wrapped_390.png`` in the artefacts folder.
"""

from __future__ import annotations

from .test_site_pages import _wait_until_rendered

# a text's width in an element's own font, to tell a fixed-width font from a proportional one
_TEXT_WIDTH = """(el, texts) => {
    const cs = getComputedStyle(el), ctx = document.createElement('canvas').getContext('2d');
    ctx.font = `${cs.fontStyle} ${cs.fontWeight} ${cs.fontSize} ${cs.fontFamily}`;
    return texts.map(t => ctx.measureText(t).width);
}"""


def test_glossary_tables_fit_the_column(built_site, offline_page, artifact_dir):
    _, base = built_site
    page = offline_page.page
    page.set_viewport_size({"width": 1280, "height": 900})
    page.goto(f"{base}/glossary.html")
    _wait_until_rendered(page)
    tables = page.evaluate("""() => [...document.querySelectorAll('main table')].map(t => {
        const box = t.parentElement.getBoundingClientRect();
        const last = [...t.querySelectorAll('tr')].map(r => r.lastElementChild.getBoundingClientRect().right);
        return {overflow: t.parentElement.scrollWidth - t.parentElement.clientWidth,
                beyond: Math.max(...last) - box.right, head: t.querySelector('th:last-child').textContent.trim()};
    })""")
    assert len(tables) >= 3, tables
    assert [t["head"] for t in tables] == ["first met"] * len(tables)
    page.locator("main table").first.scroll_into_view_if_needed()
    page.screenshot(path=str(artifact_dir / "site_glossary.png"))
    assert all(t["overflow"] <= 1 and t["beyond"] <= 1 for t in tables), f"a glossary table overflows: {tables}"
    assert offline_page.external_requests == [] and offline_page.page_errors == []


def test_saved_readouts_use_a_fixed_width_font(built_site, offline_page):
    _, base = built_site
    page = offline_page.page
    page.goto(f"{base}/05_importance_sampling.html")  # the kl explorer's table of estimators
    _wait_until_rendered(page)
    pres = page.locator(".rlbook-readout pre")
    assert pres.count() >= 1
    for i in range(pres.count()):
        narrow, wide = pres.nth(i).evaluate(_TEXT_WIDTH, ["iiiiiiiiii", "MMMMMMMMMM"])
        assert abs(narrow - wide) < 0.5, f"readout {i} is in a proportional font ({narrow:.1f} vs {wide:.1f} px)"
        assert pres.nth(i).evaluate("p => getComputedStyle(p).whiteSpace") == "pre"  # rows never wrap


_VISIBLE = """sel => [...document.querySelectorAll(sel)].filter(e => {
    const r = e.getBoundingClientRect(), cs = getComputedStyle(e);
    return r.width > 0 && r.height > 0 && cs.visibility !== 'hidden';
}).length"""


def test_one_search_button_and_no_empty_top_bar(built_site, offline_page):
    """The theme's top bar held only a second search button from 960 px wide; it is gone, one search
    stays in reach at every width, and the contents toggle too where the right sidebar is folded."""
    _, base = built_site
    page = offline_page.page
    page.goto(f"{base}/03_reinforce.html")
    _wait_until_rendered(page)
    for width in (1280, 1000, 800, 390):
        page.set_viewport_size({"width": width, "height": 900})
        assert page.evaluate(_VISIBLE, "header.bd-header") == 0, width
        assert page.evaluate(_VISIBLE, "button.search-button__button, button.search-button") == 1, width
        if width < 1200:
            assert page.evaluate(_VISIBLE, "button.secondary-toggle") >= 1, width


_BROKEN_WORDS = """() => { const out = []; document.querySelectorAll('main table code').forEach(c => {
    const walker = document.createTreeWalker(c, NodeFilter.SHOW_TEXT); let n;
    while ((n = walker.nextNode())) {
        const r = document.createRange(); r.selectNodeContents(n);
        if (new Set([...r.getClientRects()].map(x => Math.round(x.top))).size > 1) out.push(n.nodeValue);
    } });
    return {broken: out, points: document.querySelectorAll('main table code wbr').length}; }"""


def test_glossary_code_names_wrap_between_words(built_site, offline_page):
    _, base = built_site
    page = offline_page.page
    page.set_viewport_size({"width": 1280, "height": 900})
    page.goto(f"{base}/glossary.html")
    _wait_until_rendered(page)
    found = page.evaluate(_BROKEN_WORDS)
    assert found["points"] > 100, found  # the names were given their wrap points
    assert found["broken"] == [], f"code names broken inside a word: {found['broken']}"


def test_no_page_is_wider_than_a_phone(built_site, offline_page):
    _, base = built_site
    page = offline_page.page
    page.set_viewport_size({"width": 390, "height": 844})
    for name in ("09_grpo", "14_train_inference_mismatch", "glossary"):  # long inline formulas, long code names
        page.goto(f"{base}/{name}.html")
        _wait_until_rendered(page)
        page.wait_for_timeout(300)  # the wide-formula check runs after MathJax
        wider = page.evaluate("() => document.documentElement.scrollWidth - document.documentElement.clientWidth")
        assert wider <= 0, f"{name}: {wider} px wider than a 390-pixel window"


_CODE_LINES = """() => {
    const out = {blocks: 0, lines: 0, textMismatch: 0, wrapped: [], extraHeight: []};
    for (const pre of document.querySelectorAll('div.cell_input div.highlight pre')) {
        const lines = [...pre.querySelectorAll(':scope > span.rlbook-line')];
        if (!lines.length) continue;
        out.blocks += 1; out.lines += lines.length;
        const text = lines.map(l => l.textContent).join('');
        if (text !== pre.textContent || !text.includes('\\n')) out.textMismatch += 1;
        const lh = parseFloat(getComputedStyle(pre).lineHeight);
        let rows = 0;
        for (const line of lines) {
            const range = document.createRange();
            range.selectNodeContents(line);
            const rects = [...range.getClientRects()].filter(r => r.width > 0);
            const tops = [...new Set(rects.map(r => Math.round(r.top)))];
            rows += Math.max(1, tops.length);
            if (tops.length > 1) {
                const s = line.textContent, first = s.search(/\\S/);
                const walker = document.createTreeWalker(line, NodeFilter.SHOW_TEXT);
                let seen = 0, at = null;
                while (walker.nextNode() && at === null) {
                    const v = walker.currentNode.nodeValue;
                    if (seen + v.length > first) { at = [walker.currentNode, first - seen]; }
                    seen += v.length;
                }
                const r = document.createRange(); r.setStart(at[0], at[1]); r.setEnd(at[0], at[1] + 1);
                const codeBox = r.getBoundingClientRect(), box = line.getBoundingClientRect();
                const secondTop = tops[1];
                const cont = Math.min(...rects.filter(x => Math.round(x.top) === secondTop).map(x => x.left));
                const ch = codeBox.width;  // one column of the fixed-width font
                // [start of the line, x of its code, x of its first continuation, left edge of the column,
                //  whether the hanging indent (code's column + 4) fits in 40 % of the column]
                out.wrapped.push([s.slice(0, 40), codeBox.left, cont, box.left,
                                  Math.round(codeBox.top) === tops[0] && (codeBox.left - box.left + 4 * ch) <= 0.4 * box.width]);
            }
        }
        out.extraHeight.push(pre.getBoundingClientRect().height - rows * lh
                             - parseFloat(getComputedStyle(pre).paddingTop) - parseFloat(getComputedStyle(pre).paddingBottom));
    }
    return out;
}"""


def test_wrapped_code_lines_keep_their_indentation(built_site, offline_page, artifact_dir):
    """At a phone's 390 pixels long code lines wrap; no continuation starts at the column's left edge, and
    where the hanging indent fits (the code's column + 4, up to 40 % of the column) each continuation starts
    to the right of the wrapped line's own code, so a wrapped statement never looks one level out. The
    code's text, newlines included, is unchanged (what the copy button copies), and no block gains a blank
    line."""
    _, base = built_site
    page = offline_page.page
    page.set_viewport_size({"width": 390, "height": 900})
    page.goto(f"{base}/07_ppo.html")
    _wait_until_rendered(page)
    found = page.evaluate(_CODE_LINES)
    assert found["blocks"] >= 10 and found["textMismatch"] == 0, found["textMismatch"]
    assert len(found["wrapped"]) >= 10, found["wrapped"][:3]
    flush_left = [w for w in found["wrapped"] if w[2] <= w[3] + 1]  # the defect: a continuation at column 0
    assert not flush_left, flush_left[:3]
    fits = [w for w in found["wrapped"] if w[4]]
    assert len(fits) >= 5 and not [w for w in fits if w[2] <= w[1] + 1], [w for w in fits if w[2] <= w[1] + 1][:3]
    assert max(found["extraHeight"]) < 4, max(found["extraHeight"])  # no blank line added to any block
    block = page.locator("div.cell_input div.highlight pre").nth(3)
    block.scroll_into_view_if_needed()
    block.screenshot(path=str(artifact_dir / "site_code_wrapped_390.png"))
    page.set_viewport_size({"width": 1280, "height": 900})
    assert max(page.evaluate(_CODE_LINES)["extraHeight"]) < 4
    assert offline_page.page_errors == [] and offline_page.console_errors == []
