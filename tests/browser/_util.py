"""Helpers for the browser tests: find the system Chromium, an offline page, a free port, waiting for a server."""

from __future__ import annotations

import os
import shutil
import socket
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

__all__ = ["CHROMIUM_ARGS", "NO_CHROMIUM", "OfflinePage", "find_chromium", "free_port", "is_local",
           "open_offline_page", "wait_for_http"]

NO_CHROMIUM = (
    "no Chromium found: install it with `apt-get install chromium` (Debian/Ubuntu) "
    "or set RLBOOK_CHROMIUM; see README"
)
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1", "[::1]"}
LOCAL_SCHEMES = {"data", "blob", "file", "about", "chrome-extension", "devtools"}


def find_chromium() -> str | None:
    """The system Chromium: ``$RLBOOK_CHROMIUM``, else chromium / chromium-browser / google-chrome."""
    env = os.environ.get("RLBOOK_CHROMIUM")
    if env:
        return env if Path(env).is_file() else None
    for name in ("/usr/bin/chromium", "chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


def is_local(url: str) -> bool:
    """True for loopback http(s)/ws(s) addresses and for data:, blob:, file:, about: URLs."""
    parts = urlsplit(url)
    if parts.scheme in LOCAL_SCHEMES:
        return True
    return (parts.hostname or "") in LOCAL_HOSTS


@dataclass
class OfflinePage:
    """A page with every non-local request blocked; what was blocked and what went wrong is kept."""

    page: object
    external_requests: list[str] = field(default_factory=list)
    console_errors: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)


def open_offline_page(browser, viewport=(1280, 900)):
    """A new context and page on ``browser`` with every non-local request aborted and recorded.

    Returns:
        ``(context, OfflinePage)``; close the context when done.
    """
    context = browser.new_context(viewport={"width": viewport[0], "height": viewport[1]}, service_workers="block")
    page = context.new_page()
    result = OfflinePage(page=page)

    def route(r):
        url = r.request.url
        if is_local(url):
            r.continue_()
        else:
            result.external_requests.append(url)
            r.abort("blockedbyclient")

    context.route("**/*", route)
    # WebSockets are not seen by context.route; record non-local ones too.
    page.on("websocket", lambda ws: None if is_local(ws.url) else result.external_requests.append(ws.url))
    page.on("console", lambda m: result.console_errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: result.page_errors.append(str(e)))
    return context, result




def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_http(url: str, timeout: float = 60.0, proc=None) -> None:
    """Poll ``url`` until it answers with any HTTP status (< 500), or raise ``TimeoutError``.

    Args:
        url: a local address, e.g. ``http://127.0.0.1:8866/``.
        timeout: seconds to wait in all.
        proc: optional ``subprocess.Popen`` of the server; if it exits, fail at once.
    Raises:
        TimeoutError: no answer within ``timeout``; RuntimeError: ``proc`` exited.
    """
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited with status {proc.returncode} before answering {url}")
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:
                if resp.status < 500:
                    return
        except urllib.error.HTTPError as e:
            if e.code < 500:
                return
            last = e
        except (urllib.error.URLError, ConnectionError, OSError) as e:
            last = e
        time.sleep(0.25)
    raise TimeoutError(f"{url} did not answer within {timeout:.0f} s (last error: {last})")
