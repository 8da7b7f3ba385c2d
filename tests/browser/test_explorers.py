"""The live explorers in a real browser: ``rlbook explore`` (Voilà) driven by headless Chromium.

One ``rlbook explore --no-browser`` server (all ten explorers on one page) per module, started from
an empty folder; one page load, offline (every request off localhost is aborted and counted). For
each explorer: it renders, the page made no external request and logged no error, a slider moved by
the keyboard changes the figure's PNG bytes and the printed numbers, and a nonsense value shows a
"⚠ ..." message in ``.rlbook-error``, never a traceback. The readouts are in a fixed-width font
and no dropdown cuts its labels. Screenshots go to ``artifact_dir``.
"""

from __future__ import annotations

import base64
import time

import pytest

from ._util import open_offline_page, run_explore_server

NAMES = ["clip", "advantage", "kl", "gae", "trust-region", "preference", "mismatch", "entropy", "agent", "distill"]
# the control to move (its ``description``; None: the explorer's first slider) and the nonsense
# value to type into which control; the explorers' own contract (rlbook/widgets)
MOVE = {"clip": "Â", "advantage": None, "kl": None, "gae": None, "trust-region": "δ", "preference": "β", "mismatch": "C", "entropy": "η",
        "agent": "γ", "distill": "β (0 forward, 1 reverse KL)"}
NONSENSE = {"clip": ("ε_low", "0"), "advantage": ("G", "1"), "kl": ("α", "0"), "gae": ("γ", "0"), "trust-region": ("δ", "0"),
            "preference": ("N", "0"), "mismatch": ("top-p", "0"), "entropy": ("η", "0"),
            "agent": ("γ", "0"), "distill": ("τ", "0")}
START_TIMEOUT = 90  # s: Voilà's start, then a kernel that imports torch and builds ten explorers
CHANGE_TIMEOUT = 30  # s: one redraw in the live kernel


@pytest.fixture(scope="module")
def explore_server(chromium_path, tmp_path_factory):
    """``rlbook explore --port P --no-browser`` run from an empty folder; stopped at teardown, and
    nothing it started may outlive it."""
    with run_explore_server(tmp_path_factory.mktemp("explore"), start_timeout=START_TIMEOUT) as server:
        yield server
    # SIGTERM to the command only, as a user's Ctrl-C or kill: what it leaves running is a leak
    # (killing the whole process group at once would hide it; stop_server does that afterwards)
    assert not server.leftovers, f"rlbook explore left processes running after SIGTERM: {server.leftovers}"


@pytest.fixture(scope="module")
def app(browser, explore_server, artifact_dir):
    """The all-explorers page, loaded once, offline; a full-page screenshot once it has rendered."""
    context, op = open_offline_page(browser)
    try:
        op.page.goto(explore_server.url, wait_until="commit", timeout=START_TIMEOUT * 1000)
        # Voilà shows the cells when it has executed them all (no reload: a page stuck at "Executing N of
        # M", which one load in five was before rlbook.app.kernel_client, fails here)
        op.page.wait_for_selector("#rendered_cells", state="visible", timeout=START_TIMEOUT * 1000)
        op.page.wait_for_selector(".rlbook-explorer .rlbook-figure img", timeout=START_TIMEOUT * 1000)
        op.page.wait_for_timeout(500)
        op.page.screenshot(path=str(artifact_dir / "explorers_all.png"), full_page=True)
    except Exception as e:
        context.close()
        pytest.fail(f"the explorers page did not render: {e}\n--- rlbook explore's log ---\n{explore_server.log()}")
    op.server = explore_server
    yield op
    context.close()


def _control(scope, label: str | None):
    """The ipywidgets control whose description is ``label`` (None: the first slider)."""
    if label is None:
        return scope.locator(".widget-slider").first
    return scope.locator(".widget-inline-hbox").filter(
        has=scope.page.locator("label.widget-label").get_by_text(label, exact=True)).first


def _png(scope) -> bytes:
    src = scope.locator(".rlbook-figure img").first.get_attribute("src") or ""
    assert src.startswith("data:image/png;base64,"), f"the figure is not an inline PNG: {src[:60]!r}"
    return base64.b64decode(src.split(",", 1)[1])


def _readout(scope) -> str:
    return scope.locator(".rlbook-readout").first.inner_text()


def _wait_for(check, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except Exception:  # the element is being replaced while the figure redraws
            pass
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def _move(control) -> None:
    """Press ArrowRight on the slider's handle three times (ArrowLeft if it sits at its maximum)."""
    handle = control.locator(".noUi-handle").first
    handle.focus()
    key = "ArrowLeft" if handle.get_attribute("aria-valuenow") == handle.get_attribute("aria-valuemax") else "ArrowRight"
    for _ in range(3):
        handle.press(key)


def _type_value(control, value: str) -> None:
    """Type ``value`` into the control: a slider's editable readout, a text box or a dropdown."""
    readout = control.locator(".widget-readout")
    if readout.count():
        readout.first.click()
        readout.first.press("Control+A")
        readout.first.type(value)
        readout.first.press("Enter")
    elif control.locator("select").count():
        control.locator("select").first.select_option(label=value)
    else:
        box = control.locator("input").first
        box.fill(value)
        box.press("Enter")


def _clean(op, when: str) -> None:
    assert op.external_requests == [], f"requests left localhost {when}: {op.external_requests}"
    assert op.console_errors == [], f"console errors {when}: {op.console_errors}"
    assert op.page_errors == [], f"uncaught page errors {when}: {op.page_errors}"


def test_page_shows_no_code_and_stays_offline(app):
    page = app.page
    text = page.inner_text("body")
    assert page.locator(".jp-CodeCell .jp-InputArea, .jp-Editor, .cm-editor, .CodeMirror").count() == 0
    for code in ("build_explorer", "import ", "%matplotlib"):
        assert code not in text, f"code is visible in the page: {code!r}"
    assert "There was an error when executing cell" not in text, app.server.log()
    assert "rlbook explorers" in text
    _clean(app, "while loading")


@pytest.mark.parametrize("name", NAMES)
def test_explorer_live(app, name, artifact_dir):
    page = app.page
    scope = page.locator(f".rlbook-explorer-{name}")
    assert scope.count() == 1, f"explorer {name!r} is not on the page\n{page.inner_text('body')[:2000]}"
    scope.locator(".rlbook-figure img").first.wait_for(timeout=CHANGE_TIMEOUT * 1000)
    scope.scroll_into_view_if_needed()
    _clean(app, "after loading")
    scope.screenshot(path=str(artifact_dir / f"explorer_{name}.png"))

    png0, numbers0 = _png(scope), _readout(scope)
    assert numbers0.strip(), f"{name}: the readout is empty"
    mover = _control(scope, MOVE[name])
    assert mover.count() == 1, f"{name}: no slider described {MOVE[name]!r}"
    _move(mover)
    _wait_for(lambda: _png(scope) != png0, CHANGE_TIMEOUT, f"{name}: the figure to change after a slider move")
    _wait_for(lambda: _readout(scope) != numbers0, CHANGE_TIMEOUT, f"{name}: the numbers to change after a slider move")

    if NONSENSE[name] is None:
        pytest.fail(f"{name}: no nonsense value is listed in NONSENSE")
    label, value = NONSENSE[name]
    control = _control(scope, label)
    assert control.count() == 1, f"{name}: no control described {label!r}"
    _type_value(control, value)
    error = scope.locator(".rlbook-error")
    _wait_for(lambda: any(t.strip().startswith("⚠") for t in error.all_inner_texts()), CHANGE_TIMEOUT,
              f"{name}: a '⚠ ...' message after {label} = {value}")
    scope.screenshot(path=str(artifact_dir / f"explorer_{name}_nonsense.png"))
    assert page.get_by_text("Traceback").count() == 0 and "Traceback" not in page.inner_text("body")
    _clean(app, f"after {name}'s nonsense value")


# a text's width in an element's own font (canvas measureText), to tell a fixed-width font from a
# proportional one and a cut dropdown label from a whole one, whatever the fonts are called
_TEXT_WIDTH = """(el, texts) => {
    const cs = getComputedStyle(el), ctx = document.createElement('canvas').getContext('2d');
    ctx.font = `${cs.fontStyle} ${cs.fontWeight} ${cs.fontSize} ${cs.fontFamily}`;
    return texts.map(t => ctx.measureText(t).width);
}"""


def test_readouts_use_a_fixed_width_font(app):
    """The readouts are tables whose columns line up only in a fixed-width font (kl's misaligned)."""
    pres = app.page.locator(".rlbook-readout pre")
    assert pres.count() == len(NAMES)
    for i in range(pres.count()):
        narrow, wide = pres.nth(i).evaluate(_TEXT_WIDTH, ["iiiiiiiiii", "MMMMMMMMMM"])
        assert abs(narrow - wide) < 0.5, f"readout {i} is set in a proportional font: i×10 {narrow:.1f} px, M×10 {wide:.1f} px"


def test_dropdowns_show_their_whole_labels(app, artifact_dir):
    """Every dropdown is wide enough for its longest option (the advantage explorer's showed "1.", "0.")."""
    selects = app.page.locator(".rlbook-explorer select:visible")  # G = 5: r5.. are hidden
    assert selects.count() > 0
    cut = []
    for i in range(selects.count()):
        select = selects.nth(i)
        labels = select.evaluate("s => [...s.options].map(o => o.text)")
        room = select.evaluate("s => { const cs = getComputedStyle(s); return s.clientWidth - "
                               "parseFloat(cs.paddingLeft) - parseFloat(cs.paddingRight); }")
        widths = select.evaluate(_TEXT_WIDTH, labels)
        cut += [f"{label!r} needs {w:.0f} px, has {room:.0f}" for label, w in zip(labels, widths) if w > room]
    app.page.locator(".rlbook-explorer-advantage").screenshot(path=str(artifact_dir / "explorer_advantage_controls.png"))
    assert cut == [], f"dropdown labels cut: {cut}"
