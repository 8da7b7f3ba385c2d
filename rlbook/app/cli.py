"""``rlbook``: run the book's chapters headless, or list them.

    rlbook list                       # the chapters, in reading order, with their measured run times
    rlbook run                        # execute every chapter (small size), summary table at the end
    rlbook run 03                     # one chapter (or several: rlbook run 02 03)
    rlbook run --size full --out runs/full
    rlbook book [--serve]             # build the book site (Jupyter Book) from the stored outputs
    rlbook explore [clip|advantage|kl|gae|trust-region|preference|mismatch|entropy|agent|distill]   # the explorers as live apps (Voila)
    rlbook assignments release|grade  # the course assignments (nbgrader)

Executed notebooks are written to the output folder (default ``runs/<size>``); the sources in
``notebooks/`` are never overwritten. The exit status is 1 if any chapter failed, and the failing
cell's error is printed.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from rlbook.app.chapters import PACKAGE_ROOT, Chapter, find_notebooks_dir, list_chapters
from rlbook.app.headline import HEADLINE_MARK
from rlbook.app.run_record import RECORD_KEY, run_record
from rlbook.config import SIZES

__all__ = ["Chapter", "find_notebooks_dir", "list_chapters", "run_chapter", "main"]


def _headline(nb) -> str:
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            text = out.get("text", "") if out.get("output_type") == "stream" else ""
            for line in text.splitlines():
                if line.startswith(HEADLINE_MARK):
                    return line[len(HEADLINE_MARK):].strip()
    return ""


# how long one cell may run before its kernel counts as lost (seconds): every cell of a small chapter ends in
# well under a minute on 2 CPU cores, so 600 s is a hang (a kernel idle while nbclient waited for a reply it
# never read was seen a few times on a 2-core machine before rlbook.app.kernel_client); the full size trains for longer
CELL_TIMEOUT = {"small": 600, "full": 3600}


def run_chapter(chapter: Chapter, out_dir: Path, size: str, timeout: int | None = None, attempts: int = 2) -> dict:
    """Execute one chapter with nbclient at ``size``; write it to ``out_dir``; return a result row.

    The row has ``chapter, title, status ('ok' | 'FAILED' | 'STOPPED'), seconds, headline, error``. A
    chapter whose kernel died or stopped answering (no reply within ``timeout`` seconds for one cell; by
    default ``CELL_TIMEOUT[size]``) is run again from the start, up to ``attempts`` runs in all: a lost
    kernel message has left runs waiting on an idle kernel. A cell that raised (a failed claim or
    assert) is never retried: the chapters repeat exactly on one machine, so a second run would fail
    the same way. A run interrupted by SIGINT (Ctrl-C) or SIGTERM is 'STOPPED', never retried: nbclient
    answers those signals by ending the kernel, which would otherwise read as a lost kernel.
    """
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    if timeout is None:
        timeout = CELL_TIMEOUT.get(size, max(CELL_TIMEOUT.values()))
    for attempt in range(1, attempts + 1):
        row = _run_chapter_once(chapter, out_dir, size, timeout)
        lost_kernel = isinstance(row.pop("exception"), (CellTimeoutError, DeadKernelError))
        if not lost_kernel or attempt == attempts or row["status"] == "STOPPED":
            return row
        print(f"\nchapter {chapter.number}: {row['error'].splitlines()[0][:200]}; running it again", file=sys.stderr)
    raise ValueError(f"`attempts` must be at least 1; got {attempts}")


def _run_chapter_once(chapter: Chapter, out_dir: Path, size: str, timeout: int) -> dict:
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    from rlbook.app.kernel_client import WakefulKernelManager

    nb = nbformat.read(chapter.path, as_version=4)
    # chapters from a wheel live inside site-packages: run them in the output folder, and keep their
    # checkpoints in ./runs (unless $RLBOOK_RUNS_DIR says otherwise), never inside the installed package
    bundled = PACKAGE_ROOT in chapter.path.resolve().parents
    workdir = Path(out_dir) if bundled else chapter.path.parent
    workdir.mkdir(parents=True, exist_ok=True)
    # The kernel's own log (e.g. its "running over TCP without encryption" notice) would interleave
    # with the progress bar; errors still arrive through the notebook's outputs.
    # WakefulKernelManager: its client waits on the kernel's sockets in short slices, so a reply whose
    # wake-up the event loop missed is read within half a second (rlbook.app.kernel_client)
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", kernel_manager_class=WakefulKernelManager,
                            extra_arguments=["--IPKernelApp.log_level=ERROR"],
                            resources={"metadata": {"path": str(workdir)}})
    start = time.perf_counter()
    status, error, exception = "ok", "", None
    previous = os.environ.get("RLBOOK_SIZE")
    previous_runs = os.environ.get("RLBOOK_RUNS_DIR")
    os.environ["RLBOOK_SIZE"] = size  # the kernel inherits it when it starts
    if bundled and previous_runs is None:
        os.environ["RLBOOK_RUNS_DIR"] = str(Path.cwd().resolve() / "runs")
    try:
        client.execute()
    except CellExecutionError as err:
        status, error = "FAILED", str(err)
    except Exception as err:  # kernel died, timeout, ...
        status, error, exception = "FAILED", f"{type(err).__name__}: {err}", err
    finally:  # never leak the size into this process (e.g. into later nbval kernels)
        if previous is None:
            os.environ.pop("RLBOOK_SIZE", None)
        else:
            os.environ["RLBOOK_SIZE"] = previous
        if previous_runs is None:
            os.environ.pop("RLBOOK_RUNS_DIR", None)
    seconds = time.perf_counter() - start
    # nbclient ends the kernel on SIGINT or SIGTERM (its own handlers, set while it runs) and goes on; the
    # future it leaves behind says a signal came: the reader (or a CI job's timeout) asked to stop
    if getattr(client, "_async_cleanup_kernel_future", None) is not None:
        status, error = "STOPPED", "stopped by a signal (SIGINT or SIGTERM)"
    # what ran, where and how: pytest's notebook check compares the stored outputs with this execution
    # rather than making another when the record matches the present state (rlbook.app.run_record)
    nb.metadata[RECORD_KEY] = run_record(nb, size=size, device=_kernel_device(), status=status)
    out_dir.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, out_dir / chapter.path.name)
    return dict(chapter=chapter.number, title=chapter.title, status=status, seconds=seconds,
                headline=_headline(nb), error=error, exception=exception)


def _kernel_device() -> str:
    """The device a chapter's kernel picks (it inherits this process's environment): ``"cpu"``, ``"cuda"``,
    ``"cuda:N"``; ``"unknown"`` if ``$RLBOOK_DEVICE`` is unusable (the chapter then failed on it too)."""
    from rlbook.config import get_device

    try:
        return str(get_device())
    except ValueError:
        return "unknown"


def _table(rows: list[dict]) -> str:
    head = f"{'chapter':<8}{'status':<8}{'seconds':>9}  headline"
    lines = [head, "-" * max(len(head), 60)]
    for r in rows:
        lines.append(f"{r['chapter'] + ' ':<8}{r['status']:<8}{r['seconds']:>9.1f}  {r['headline'] or r['title']}")
    return "\n".join(lines)


def _cmd_list(args) -> int:
    """Each chapter in reading order, with its measured run time (``book/run_times.json``, recorded by
    ``tools/build_notebooks.py``) while the stored notebook's code is the code that was timed."""
    import json

    from rlbook.app import site

    try:
        run_times = site.read_run_times(site.find_book_dir())
    except FileNotFoundError:
        run_times = {}
    for ch in list_chapters():
        entry = run_times.get(ch.path.stem)
        if entry is not None and entry.get("code_sha256") != site.code_fingerprint(json.loads(ch.path.read_text())["cells"]):
            entry = None  # measured on other code
        timed = ("run time not measured for this version" if entry is None else
                 f"ran in {entry['seconds']:.0f} s on {entry.get('cpu_cores', '?')} CPU cores at the {entry.get('size', 'small')} size, "
                 f"load average {entry.get('load_average', '?')}, {entry.get('date', '?')}")
        print(f"{ch.number}  {ch.title}  ({ch.path.name}; {timed})")
    return 0


def _cmd_run(args) -> int:
    from tqdm.auto import tqdm

    size = args.size or os.environ.get("RLBOOK_SIZE", "small")
    if size not in SIZES:
        print(f"rlbook: --size must be one of {SIZES}; got {size!r}", file=sys.stderr)
        return 2
    chapters = list_chapters()
    if args.chapters:
        wanted = [c.zfill(2) for c in args.chapters]
        unknown = [w for w in wanted if w not in {c.number for c in chapters}]
        if unknown:
            print(f"rlbook: no chapter {', '.join(unknown)}; see `rlbook list`", file=sys.stderr)
            return 2
        chapters = [c for c in chapters if c.number in wanted]
    out_dir = Path(args.out or f"runs/{size}")
    rows = []
    bar = tqdm(chapters, desc=f"chapters ({size})", unit="chapter")
    for ch in bar:
        bar.set_postfix_str(ch.path.name)
        rows.append(run_chapter(ch, out_dir, size))
        if rows[-1]["status"] == "STOPPED":
            break
    bar.close()
    print()
    print(_table(rows))
    print(f"\nexecuted notebooks written to {out_dir}/")
    if rows and rows[-1]["status"] == "STOPPED":
        left = len(chapters) - len(rows)
        print(f"rlbook: stopped by a signal during chapter {rows[-1]['chapter']}; {left} chapter(s) not run",
              file=sys.stderr)
        return 130
    failed = [r for r in rows if r["status"] != "ok"]
    for r in failed:
        print(f"\n=== chapter {r['chapter']} failed ===\n{r['error']}", file=sys.stderr)
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``rlbook`` command."""
    parser = argparse.ArgumentParser(prog="rlbook", description="Run or list the chapters of rlbook.")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="list the chapters").set_defaults(fn=_cmd_list)
    run = sub.add_parser("run", help="execute chapters headless and print a summary table")
    run.add_argument("chapters", nargs="*", help="chapter numbers (default: all), e.g. 02 03")
    run.add_argument("--size", choices=SIZES, help="small (default; 2 CPU cores) or full; or set $RLBOOK_SIZE")
    run.add_argument("--out", help="output folder for executed notebooks (default: runs/<size>)")
    run.set_defaults(fn=_cmd_run)
    # the site, the live explorers and the course assignments: each module adds its own subcommand
    from rlbook.app import assignments
    from rlbook.app import explore, site

    for module in (site, explore, assignments):
        module.add_subparser(sub)
    args = parser.parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
