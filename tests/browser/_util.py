"""Helpers for the browser tests: find the system Chromium, an offline page, a free port, waiting for a server."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from rlbook.app.site import find_chromium  # the one `rlbook book --pdf` prints with

__all__ = ["CHROMIUM_ARGS", "NO_CHROMIUM", "OfflinePage", "find_chromium", "free_port", "is_local",
           "descendants", "open_offline_page", "run_explore_server", "stop_server", "wait_for_http"]

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


def descendants(pid: int) -> list:
    """The live descendants (``psutil.Process``) of process ``pid``: for a server, Voilà and its kernels.

    (Kernels are not in the server's process group or session: jupyter_client starts each in a
    session of its own, so neither ``killpg`` nor a session id reaches them; the process tree does.)
    """
    import psutil

    try:
        found = psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []
    return [p for p in found if _alive(p)]


def _alive(p) -> bool:
    import psutil

    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def stop_server(proc, timeout: float = 30.0) -> list[str]:
    """Stop a server the way a user does (SIGTERM to its own pid only), then clean up after it.

    Returns:
        the command lines of the server's descendants (taken just before the signal) still alive
        ``timeout`` s after the server itself exited: what a user's Ctrl-C or ``kill`` would leave
        running. These, and the server's process group, are then killed, so that a failing test
        leaves nothing behind either.
    """
    tree = descendants(proc.pid)
    leftovers: list[str] = []
    try:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout)
        deadline = time.monotonic() + timeout
        while any(_alive(p) for p in tree) and time.monotonic() < deadline:
            time.sleep(0.5)
        leftovers = [" ".join(p.cmdline()[:4]) for p in tree if _alive(p)]
    except subprocess.TimeoutExpired:
        leftovers = [f"the server itself (pid {proc.pid}) did not exit within {timeout:.0f} s of SIGTERM"]
    for p in tree:
        if _alive(p):
            try:
                p.kill()
            except Exception:  # noqa: BLE001  (gone meanwhile)
                pass
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            break
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            continue
    return leftovers


@contextlib.contextmanager
def run_explore_server(cwd: Path, *args: str, start_timeout: float = 90.0):
    """``rlbook explore ARGS --port P --no-browser`` run from the folder ``cwd``, for a ``with`` block.

    Skips the test when Voilà is not installed or the system is not POSIX (the server runs in a
    session of its own, so that nothing it starts can outlive the test).

    Yields:
        the server's ``subprocess.Popen``, with ``url`` (its root, ending in "/") and ``log()`` (the
        last 4,000 characters of its output) added. At the end of the block it is stopped with
        :func:`stop_server`, whose result is left in the Popen's ``leftovers``: what SIGTERM to the
        command alone left running.
    """
    import pytest

    if importlib.util.find_spec("voila") is None:
        pytest.skip("Voilà is not installed: pip install -e '.[explore]'")
    if os.name != "posix":
        pytest.skip("the explore server runs in a POSIX session of its own")
    log_path = Path(cwd) / "voila.log"
    port = free_port()
    cmd = [sys.executable, "-m", "rlbook.app.cli", "explore", *args, "--port", str(port), "--no-browser"]
    with open(log_path, "wb") as log:
        # MPLBACKEND=Agg: the app must still draw its figures inline without a display
        proc = subprocess.Popen(cmd, cwd=cwd, env=dict(os.environ, MPLBACKEND="Agg"), stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
    proc.url = f"http://127.0.0.1:{port}/"
    proc.log = lambda: log_path.read_text(errors="replace")[-4000:] if log_path.exists() else ""
    proc.leftovers = []
    try:
        try:
            wait_for_http(proc.url + "voila/static/voila.js", start_timeout, proc=proc)
        except (TimeoutError, RuntimeError) as e:
            pytest.fail(f"rlbook explore did not start: {e}\n{proc.log()}")
        yield proc
    finally:
        proc.leftovers = stop_server(proc)
