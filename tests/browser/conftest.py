"""Shared fixtures for the browser tests: the system Chromium driven by Playwright, offline.

Nothing here downloads a browser: Playwright launches the Chromium installed by the OS package
manager (``apt-get install chromium`` on Debian/Ubuntu; ``.ci/run`` installs it), found at
``$RLBOOK_CHROMIUM`` or on the usual paths. Without it (or without the ``playwright`` package) every
browser test skips with the reason.

Fixtures:
    chromium_path (session): path of the Chromium executable.
    browser (session): a headless Playwright Chromium.
    offline_page (function): a fresh 1280×900 page whose requests to any host other than
        127.0.0.1/localhost are aborted and recorded (``.external_requests``), with
        ``.console_errors`` and ``.page_errors``.
    artifact_dir (session): folder for screenshots (``$RLBOOK_ARTIFACTS`` or tests/browser/artifacts).
"""

from __future__ import annotations

import os
import functools
import http.server
import threading
from pathlib import Path

import pytest

from ._util import CHROMIUM_ARGS, NO_CHROMIUM, find_chromium, open_offline_page
from ._util import free_port, wait_for_http  # noqa: F401  (tests may import them from here too)


@pytest.fixture(scope="session")
def chromium_path() -> str:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        pytest.skip("the `playwright` package is not installed: pip install -e '.[browser]'; see README")
    path = find_chromium()
    if path is None:
        pytest.skip(NO_CHROMIUM)
    return path


@pytest.fixture(scope="session")
def browser(chromium_path):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        # Playwright's launch() gives every browser a fresh, empty temporary user-data-dir.
        b = pw.chromium.launch(executable_path=chromium_path, headless=True, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def offline_page(browser):
    context, result = open_offline_page(browser)
    try:
        yield result
    finally:
        context.close()


@pytest.fixture(scope="session")
def artifact_dir() -> Path:
    d = Path(os.environ.get("RLBOOK_ARTIFACTS") or Path(__file__).parent / "artifacts")
    d.mkdir(parents=True, exist_ok=True)
    return d


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="session")
def built_site(built_book_html, chromium_path):
    """The site built once for the run (``built_book_html``, tests/conftest.py), served on a free local
    port: ``(html folder, base URL)``."""
    html = built_book_html
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(html)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield html, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
