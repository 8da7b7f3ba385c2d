"""Explorer page loads: how many of N loads of ``rlbook explore`` render, hang, and leave a kernel behind.

Starts ``rlbook explore`` (default: all eight explorers on one page, the longest page: 8 cells run
per load) and loads its page ``--loads`` times in headless Chromium (the system's, offline), one
after another, while ``--busy`` processes keep that many CPU cores busy (a loaded machine: the
issue's hangs were measured on one). A load *renders* when every explorer's figure is on the page
within ``--timeout`` seconds, and *hangs* otherwise (the page still says "Executing N of M"). Each
rendered page is then closed as a tab is (its ``beforeunload`` runs), and the load counts as
*leaving a kernel* if its kernel is still alive 15 s later.

    python benchmarks/explore_loads.py                    # 100 loads of the all-in-one page, 2 busy cores
    python benchmarks/explore_loads.py --loads 30 --names kl --busy 0
    python benchmarks/explore_loads.py --readers 5 --loads 2 --busy 0   # 5 readers at once, twice

With ``--readers K`` each of the ``--loads`` rounds opens K pages at the same moment (K readers
arriving together; the server runs at most ``--max-kernels`` pages, default 8 as ``rlbook explore``),
and the peak resident memory of the server and its kernels over the round is printed too.

Printed: the versions and settings, one line per load, then a table (loads, rendered, hung with its
95 % Clopper–Pearson interval, kernels left, median and largest seconds to render) and, last, one
JSON object with the same numbers. The exit status is 1 if any load hung or left a kernel.

Before ``rlbook.app.kernel_client`` (the client Voilà now runs the cells with), 2 of the first 6 loads
of the all-in-one page hung on an idle 2-core machine; the issue measured 11 of 58 on a loaded one.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# the browser tests' helpers: a free port, waiting for the server, an offline page, a process's descendants
from tests.browser._util import CHROMIUM_ARGS, descendants, free_port, open_offline_page, wait_for_http  # noqa: E402

CLOSE_WAIT = 15.0  # s: a closed page's kernel must have ended by then (its shutdown request, not culling)


def _burn(stop) -> None:  # pragma: no cover - a busy loop in a child process
    x = 0
    while not stop.is_set():
        x = (x * 1103515245 + 12345) % 2**31


def _kernels(pid: int) -> int:
    """How many kernels (``ipykernel_launcher`` processes) the server ``pid`` runs now."""
    import psutil

    n = 0
    for p in descendants(pid):
        try:
            n += "ipykernel_launcher" in " ".join(p.cmdline())
        except psutil.Error:  # ended meanwhile
            pass
    return n


def _tree_rss_mb(pid: int) -> float:
    """Resident memory (MB) of process ``pid`` and all its descendants (the server and its kernels)."""
    import psutil

    total = 0
    try:
        procs = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    except psutil.Error:
        return 0.0
    for p in procs:
        try:
            total += p.memory_info().rss
        except psutil.Error:
            pass
    return total / 2**20


def _readers_round(browser, url: str, names: list[str], readers: int, timeout: float, server_pid: int,
                   round_index: int) -> list[dict]:
    """``readers`` pages opened at once; each row: when its page rendered (or that it did not, and what
    it said), and the round's peak resident memory of the server tree."""
    import threading

    peak = [0.0]
    done = threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], _tree_rss_mb(server_pid))
            time.sleep(0.5)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    pages = []
    t0 = time.monotonic()
    for _ in range(readers):
        context, offline = open_offline_page(browser)
        page = offline.page
        page.goto(url, wait_until="commit", timeout=timeout * 1000)
        pages.append((context, page))
    selector = ", ".join(f".rlbook-explorer-{n} .rlbook-figure img" for n in names)
    seconds: list[float | None] = [None] * readers
    while time.monotonic() - t0 < timeout and None in seconds:
        for j, (_, page) in enumerate(pages):
            if seconds[j] is None and page.locator(selector).count() >= len(names):
                seconds[j] = time.monotonic() - t0
        time.sleep(0.25)
    rows = []
    for j, (context, page) in enumerate(pages):
        said = "" if seconds[j] is not None else page.inner_text("body")[:120].replace("\n", " ")
        rows.append({"load": f"{round_index}.{j}", "rendered": seconds[j] is not None,
                     "seconds": round(seconds[j] if seconds[j] is not None else timeout, 2), "kernel_left": False,
                     "said": said})
        print(f"round {round_index} reader {j}: " + (f"rendered in {seconds[j]:.1f} s" if seconds[j] is not None
                                                      else f"not rendered: {said}"), flush=True)
        page.close(run_before_unload=True)
    t1 = time.monotonic()
    while _kernels(server_pid) > 0 and time.monotonic() - t1 < CLOSE_WAIT:
        time.sleep(0.25)
    left = _kernels(server_pid)
    done.set()
    sampler.join()
    for row in rows:
        row["peak_rss_mb"] = round(peak[0])
    if left:
        rows[-1]["kernel_left"] = True
        print(f"round {round_index}: {left} kernel(s) outlived the closes", flush=True)
        t2 = time.monotonic()
        while _kernels(server_pid) > 0 and time.monotonic() - t2 < 200:
            time.sleep(1)
    else:
        for context, _ in pages:
            context.close()
    return rows


def main(argv: list[str] | None = None) -> int:
    from rlbook.app.explore import explorer_names
    from rlbook.app.site import find_chromium

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--loads", type=int, default=100, help="page loads (default: %(default)s)")
    p.add_argument("--names", default="all", help="one explorer's name, or 'all' for the all-in-one page (default)")
    p.add_argument("--busy", type=int, default=2, help="CPU cores kept busy meanwhile (default: %(default)s)")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds a load may take to render (default: %(default)s)")
    p.add_argument("--readers", type=int, default=1, help="pages opened at the same moment in each round (default: 1)")
    p.add_argument("--max-kernels", type=int, default=8, help="the server's --max-kernels (default: %(default)s)")
    args = p.parse_args(argv)
    if args.loads < 1 or args.busy < 0 or args.timeout <= 0 or args.readers < 1 or args.max_kernels < 1:
        p.error("--loads, --readers and --max-kernels must be >= 1, --busy >= 0 and --timeout > 0")
    names = explorer_names() if args.names == "all" else [args.names]
    if args.names != "all" and args.names not in explorer_names():
        p.error(f"unknown explorer {args.names!r}; choose from: all, {', '.join(explorer_names())}")
    chromium = find_chromium()
    if chromium is None:
        p.error("no Chromium found (apt-get install chromium, or set RLBOOK_CHROMIUM)")
    from playwright.sync_api import sync_playwright
    from scipy.stats import binomtest

    print(f"python {platform.python_version()}, voila {version('voila')}, jupyter_client {version('jupyter_client')}, "
          f"ipykernel {version('ipykernel')}, pyzmq {version('pyzmq')}, playwright {version('playwright')}; "
          f"{os.cpu_count()} CPU cores, {args.busy} kept busy; page: {args.names} ({len(names)} explorer(s)); "
          f"{args.loads} {'loads' if args.readers == 1 else f'rounds of {args.readers} readers at once'}, "
          f"{args.timeout:.0f} s each at most; server --max-kernels {args.max_kernels}", flush=True)
    stop = mp.Event()
    burners = [mp.Process(target=_burn, args=(stop,), daemon=True) for _ in range(args.busy)]
    for b in burners:
        b.start()
    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    tmp = Path(tempfile.mkdtemp(prefix="rlbook-explore-loads-"))
    log = open(tmp / "voila.log", "wb")
    cmd = [sys.executable, "-m", "rlbook.app.cli", "explore", *([] if args.names == "all" else [args.names]),
           "--port", str(port), "--no-browser", "--max-kernels", str(args.max_kernels), "--idle-timeout", "120"]
    server = subprocess.Popen(cmd, cwd=tmp, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                              env=dict(os.environ, MPLBACKEND="Agg"))
    rows = []
    try:
        wait_for_http(url + "voila/static/voila.js", 180, proc=server)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=chromium, headless=True, args=CHROMIUM_ARGS)
            for i in range(args.loads if args.readers > 1 else 0):
                rows.extend(_readers_round(browser, url, names, args.readers, args.timeout, server.pid, i))
            for i in range(args.loads if args.readers == 1 else 0):
                context, offline = open_offline_page(browser)
                page = offline.page
                t0 = time.monotonic()
                page.goto(url, wait_until="commit", timeout=args.timeout * 1000)
                rendered, left = True, False
                try:
                    for name in names:
                        remaining = max(1.0, args.timeout - (time.monotonic() - t0))
                        page.wait_for_selector(f".rlbook-explorer-{name} .rlbook-figure img", timeout=remaining * 1000)
                except Exception:  # noqa: BLE001  (Playwright's timeout)
                    rendered = False
                seconds = time.monotonic() - t0
                status = page.inner_text("body")[:80].replace("\n", " ") if not rendered else ""
                page.close(run_before_unload=True)
                t1 = time.monotonic()
                while _kernels(server.pid) > 0 and time.monotonic() - t1 < CLOSE_WAIT:
                    time.sleep(0.25)
                left = _kernels(server.pid) > 0
                if not left:
                    context.close()
                # else: leave the context open (the culler ends the kernel); closing it can block
                rows.append({"load": i, "rendered": rendered, "seconds": round(seconds, 2), "kernel_left": left})
                print(f"load {i:3d}: {'rendered' if rendered else 'HUNG: ' + status} in {seconds:.1f} s"
                      f"{'; its kernel outlived the close' if left else ''}", flush=True)
                if left:  # start the next load with no kernel from this one (culling, or the server's limit)
                    t2 = time.monotonic()
                    while _kernels(server.pid) > 0 and time.monotonic() - t2 < 200:
                        time.sleep(1)
            browser.close()
    finally:
        stop.set()
        for b in burners:
            b.join(5)
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
    hung = sum(not r["rendered"] for r in rows)
    left = sum(r["kernel_left"] for r in rows)
    times = [r["seconds"] for r in rows if r["rendered"]]
    ci = binomtest(hung, len(rows)).proportion_ci(confidence_level=0.95, method="exact")
    record = {"loads": len(rows), "rendered": len(rows) - hung, "hung": hung,
              "hung_rate_ci95": [round(ci.low, 4), round(ci.high, 4)], "kernels_left": left,
              "median_seconds": round(statistics.median(times), 1) if times else None,
              "max_seconds": round(max(times), 1) if times else None, "page": args.names, "busy_cores": args.busy,
              "readers": args.readers, "peak_rss_mb": max((r["peak_rss_mb"] for r in rows if "peak_rss_mb" in r), default=None),
              "cpu_cores": os.cpu_count(), "load_average": [round(x, 2) for x in os.getloadavg()]}
    print(f"\n{'loads':>6} {'rendered':>9} {'hung':>5} {'hung rate, 95 % CI':>20} {'kernels left':>13} "
          f"{'median s':>9} {'max s':>6}")
    print(f"{len(rows):>6} {len(rows) - hung:>9} {hung:>5} {f'[{ci.low:.3f}, {ci.high:.3f}]':>20} {left:>13} "
          f"{record['median_seconds']!s:>9} {record['max_seconds']!s:>6}")
    if args.readers > 1:
        print(f"{args.readers} readers at once: peak resident memory of the server and its kernels "
              f"{record['peak_rss_mb']} MB")
    print(json.dumps(record))
    return 1 if hung or left else 0


if __name__ == "__main__":
    sys.exit(main())
