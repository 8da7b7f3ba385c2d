"""What the per-seed benchmarks share: run (seed, condition) jobs on worker processes, and save a record.

Each job runs in a fresh process (``spawn``: one torch thread each, no state carried between runs), and
``show`` prints each result as it arrives (completion order); the caller sorts the rows.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import platform


def seed_parser(doc: str, name: str, conditions=None) -> argparse.ArgumentParser:
    """The per-seed benchmarks' command line: ``--seeds`` (default 0–9), ``--workers`` (default 1), ``--save``
    (write ``rlbook/data/<name>.json``) and, when ``conditions`` are given, ``--conditions`` (default all)."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--seeds", nargs="+", type=int, default=list(range(10)))
    if conditions is not None:
        parser.add_argument("--conditions", nargs="+", default=list(conditions), choices=list(conditions))
    parser.add_argument("--workers", type=int, default=1, help="parallel processes, one run each at a time")
    parser.add_argument("--save", action="store_true", help=f"write rlbook/data/{name}.json")
    return parser


def versions(workers: int) -> str:
    """The line every per-seed benchmark prints first: torch and Python versions, machine, workers × 1 thread."""
    import torch

    return (f"torch {torch.__version__}, python {platform.python_version()}, {platform.machine()}, "
            f"{workers} worker(s) × 1 thread")


def run_jobs(one_run, jobs: list, workers: int, show) -> list:
    """``[one_run(job) for job in jobs]`` on ``workers`` processes (in this process when ``workers`` is 1),
    calling ``show(row)`` as each row arrives; rows in completion order."""
    rows = []
    if workers > 1:
        with mp.get_context("spawn").Pool(workers) as pool:
            for row in pool.imap_unordered(one_run, jobs):
                rows.append(row)
                show(row)
    else:
        for job in jobs:
            rows.append(one_run(job))
            show(rows[-1])
    return rows


def sort_and_tabulate(rows: list, order: list, names: list, keys, width: int) -> dict:
    """Sort ``rows`` in place by (seed, position of the condition in ``order``); with two seeds or more, print and
    return ``{name: {key: rl.mean_ci(values over seeds)}}`` for each condition in ``names`` (``keys``: a tuple of
    fields, or a callable name -> tuple); an empty table with one seed."""
    import rlbook as rl

    rows.sort(key=lambda r: (r["seed"], order.index(r["condition"])))
    table = {}
    if len({r["seed"] for r in rows}) >= 2:
        for name in names:
            fields = keys(name) if callable(keys) else keys
            runs = [r for r in rows if r["condition"] == name]
            table[name] = {k: rl.mean_ci([r[k] for r in runs]) for k in fields}
            print(f"{name:<{width}}" + "".join(f"  {k} {v[0]:.3f} [{v[1]:.3f}, {v[2]:.3f}]" for k, v in table[name].items()))
    return table


def save_record(name: str, record: dict) -> None:
    """Write ``record`` to ``rlbook/data/<name>.json`` (what ``rl.benchmark_results(name)`` reads) and say so."""
    from rlbook.config import BENCHMARK_RESULTS

    path = BENCHMARK_RESULTS / f"{name}.json"
    path.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    print(f"saved to {path}")


def exec_chapter(source: str, path, name: str, quiet: bool = True) -> dict:
    """Execute a chapter's source text (or a part of it) at the small size and return its namespace.

    The benchmarks that repeat a chapter's own cells over seeds use this, so that they run exactly the
    chapter's code. The chapter's ``rl.claim``, ``rl.claim_comparison`` and ``rl.claim_in_spread`` are
    switched off while it runs (they are about the chapter's own run, not another seed's) and restored
    afterwards; ``display`` does nothing; with ``quiet`` the chapter's printing is swallowed.
    """
    import contextlib
    import io
    import os

    import matplotlib

    matplotlib.use("Agg")
    import rlbook as rl

    os.environ["RLBOOK_SIZE"] = "small"
    checks = {check: getattr(rl, check) for check in ("claim", "claim_comparison", "claim_in_spread")}
    for check in checks:
        setattr(rl, check, lambda *args, **kwargs: None)
    namespace: dict = {"__name__": name, "display": lambda *args, **kwargs: None}
    try:
        with contextlib.redirect_stdout(io.StringIO()) if quiet else contextlib.nullcontext():
            exec(compile(source, str(path), "exec"), namespace)  # noqa: S102
    finally:
        for check, function in checks.items():
            setattr(rl, check, function)
    return namespace
