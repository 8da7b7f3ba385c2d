"""Build the chapter notebooks from their jupytext sources and store a clean run's outputs.

The source of each chapter is ``notebooks/src/NN_name.py`` (jupytext "percent" format: easy to
diff and review). This script converts it to ``notebooks/NN_name.ipynb`` and executes it top to
bottom at the default (small) size, so the committed notebook holds the outputs nbval compares.

    python tools/build_notebooks.py                # every chapter
    python tools/build_notebooks.py 03 07          # chapters whose number starts with these
    python tools/build_notebooks.py --time-only    # measure the run times only; notebooks untouched

Each build records the chapter's wall-clock run time in ``book/run_times.json`` (seconds, the CPU
cores the process could use, the size, the date, and the fingerprint of the chapter's code), which
the site shows at the top of the chapter ("Runs in about N minutes on 2 CPU cores ..."); the site
drops a time whose fingerprint no longer matches the stored notebook's code. ``--time-only``
executes the chapters in order with an empty runs folder (no cached checkpoint: chapters 8 and 10
train their supervised models, as on a reader's first run) and records the times without writing
the notebooks.

Needs the ``dev`` extra (jupytext).
"""

from __future__ import annotations

import datetime
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from rlbook.app.kernel_client import WakefulKernelManager

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "notebooks" / "src"
OUT = ROOT / "notebooks"
RUN_TIMES = ROOT / "book" / "run_times.json"


def execute(src: Path, timeout: int = 900) -> tuple[nbformat.NotebookNode, float, float]:
    """The chapter converted from ``src`` and executed at the small size, its wall time in seconds, and
    the machine's 1-minute load average over the run (the mean of the readings before and after)."""
    import jupytext  # the dev extra; imported here so that the recording half of this tool needs only nbformat

    nb = jupytext.read(src)
    nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
    nb.metadata.pop("jupytext", None)
    os.environ["RLBOOK_SIZE"] = "small"
    load = os.getloadavg()[0]
    start = time.perf_counter()
    # WakefulKernelManager: a reply whose wake-up the client missed is read within half a second instead
    # of never (a build sat on an idle kernel until its 900 s timeout; rlbook.app.kernel_client)
    NotebookClient(nb, timeout=timeout, kernel_name="python3", extra_arguments=["--IPKernelApp.log_level=ERROR"],
                   kernel_manager_class=WakefulKernelManager, resources={"metadata": {"path": str(OUT)}}).execute()
    seconds = time.perf_counter() - start
    load = (load + os.getloadavg()[0]) / 2
    for cell in nb.cells:  # drop volatile metadata so diffs stay small
        cell.metadata.pop("execution", None)
    return nb, seconds, load


def record_run_time(name: str, nb: nbformat.NotebookNode, seconds: float, load: float, path: Path = RUN_TIMES) -> dict:
    """Store chapter ``name``'s run time (seconds) in ``path`` with what it was measured on; return the entry.

    ``load`` is the machine's 1-minute load average over the run (the mean of the readings before and
    after): a time measured with the cores busy with other work is longer than a reader's.
    """
    sys.path.insert(0, str(ROOT))
    from rlbook.app.site import code_fingerprint

    times = json.loads(path.read_text()) if path.is_file() else {}
    entry = {
        "seconds": round(seconds, 1),
        "cpu_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "size": "small",
        "load_average": round(load, 2),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
        "code_sha256": code_fingerprint(nb.cells),
    }
    times[name] = entry
    path.write_text(json.dumps(dict(sorted(times.items())), indent=1) + "\n")
    return entry


def build(src: Path, timeout: int = 900) -> float:
    """Execute chapter ``src``, store the notebook with its outputs, record its run time; return the seconds."""
    nb, seconds, load = execute(src, timeout)
    nbformat.write(nb, OUT / (src.stem + ".ipynb"))
    record_run_time(src.stem, nb, seconds, load)
    return seconds


def main(argv: list[str]) -> int:
    time_only = "--time-only" in argv
    argv = [a for a in argv if a != "--time-only"]
    sources = sorted(SRC.glob("[0-9][0-9]_*.py"))
    if argv:
        sources = [s for s in sources if any(s.name.startswith(a) for a in argv)]
    if time_only:
        os.environ["RLBOOK_RUNS_DIR"] = tempfile.mkdtemp(prefix="rlbook-time-")
    for src in sources:
        print(f"{'timing' if time_only else 'building'} {src.name} ...", flush=True)
        if time_only:
            nb, seconds, load = execute(src)
            record_run_time(src.stem, nb, seconds, load)
        else:
            seconds = build(src)
        print(f"  done in {seconds:.1f} s (load average {os.getloadavg()[0]:.2f})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
