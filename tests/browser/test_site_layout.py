"""The built site's tables as a reader sees them: nothing slides out of the column, numbers line up.

* the glossary's tables fit the text column at a 1280-pixel window: none scrolls sideways, and the
  "first met" column lies inside the column (it was cut off behind a horizontal scroll);
* the explorers' saved readouts (number tables) are set in a fixed-width font, one line per row;
* at every width one search button shows, and no top bar that holds nothing else;
* the glossary's code names wrap between their words (after ``_``, ``.``, ``=``, between CamelCase
  words), never inside one, at a 1280-pixel window;
* at a phone's 390 pixels no page is wider than the window (long inline formulas scroll in place).

Screenshot: ``site_glossary.png`` in the artefacts folder.
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
