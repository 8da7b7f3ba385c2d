"""What ``rlbook run`` records about each chapter it executed, and when that execution can stand in for another.

``rlbook run`` writes each executed chapter to ``runs/<size>/`` with a record in the notebook's metadata
(``metadata["rlbook_run"]``): the fingerprint of the chapter's code, of the library that ran it (every file
of the ``rlbook`` package, its benchmark results included), of the installed packages and their releases,
the Python version, the machine (host name and CPU count), the size, the device, whether every cell ran
and when it finished. The chapters repeat exactly on one machine, so an execution whose record matches
the present state in every one of those is the execution a second run would make.

``pytest`` uses that: its notebook check (nbval) compares a chapter's stored outputs with a fresh
execution, and where ``rlbook run`` has just made one that :func:`fresh_run` accepts, it compares against
that execution instead of executing the chapter a second time (``notebooks/conftest.py``;
``pytest --nbval-reexecute`` always executes). CI runs ``rlbook run`` and then ``pytest``, so each chapter
runs once and both checks apply to that run.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import sys
import time
from pathlib import Path

__all__ = ["RECORD_FORMAT", "RECORD_KEY", "fresh_run", "library_fingerprint", "packages_fingerprint",
           "run_record"]

RECORD_KEY = "rlbook_run"
RECORD_FORMAT = 1


def library_fingerprint() -> str:
    """SHA-256 (hex) over every file of the installed ``rlbook`` package (its path and its bytes), the
    benchmark results in ``rlbook/data`` included; compiled caches and the wheel's bundled copies of the
    chapters are left out."""
    from rlbook.app.chapters import PACKAGE_ROOT

    digest = hashlib.sha256()
    for path in sorted(PACKAGE_ROOT.rglob("*")):
        rel = path.relative_to(PACKAGE_ROOT)
        if not path.is_file() or "__pycache__" in rel.parts or rel.parts[0] == "_bundled" or path.suffix == ".pyc":
            continue
        digest.update(rel.as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def packages_fingerprint() -> str:
    """SHA-256 (hex) of the Python version and the names and releases (sorted) of the distributions installed
    in this interpreter's environment (its site-packages folders and the user's; never what a running program
    has added to ``sys.path``)."""
    import site
    import sysconfig
    from importlib import metadata

    folders = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    if site.ENABLE_USER_SITE:
        folders.add(site.getusersitepackages())
    found = metadata.distributions(path=sorted(folders))
    names = sorted({f"{(d.metadata['Name'] or '').lower()}=={d.version}" for d in found})
    return hashlib.sha256("\n".join([sys.version, *names]).encode()).hexdigest()


def _machine() -> dict:
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"host": platform.node(), "cpus": cpus}


def _code_fingerprint(notebook: dict) -> str:
    from rlbook.app.site import code_fingerprint

    return code_fingerprint(notebook["cells"])


def run_record(notebook: dict, *, size: str, device: str, status: str) -> dict:
    """The record ``rlbook run`` stores in an executed chapter's metadata.

    Args:
        notebook: the chapter as executed (nbformat dict); only its code cells' sources are read.
        size: the size it ran at (``"small"`` or ``"full"``).
        device: the device its kernel picked (``"cpu"``, ``"cuda"``, ``"cuda:1"``).
        status: ``"ok"`` when every cell ran without an error, else the run's status (``"FAILED"``, ``"STOPPED"``).
    """
    return {"format": RECORD_FORMAT, "code_sha256": _code_fingerprint(notebook),
            "library_sha256": library_fingerprint(), "packages_sha256": packages_fingerprint(),
            **_machine(), "size": size, "device": device, "status": status,
            "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def fresh_run(chapter: Path, runs_dir: Path, *, size: str = "small", device: str = "cpu") -> tuple[dict | None, str]:
    """The execution of ``chapter`` that ``rlbook run`` stored in ``runs_dir``, if it can stand in for a new one.

    Accepted only if its record says every cell ran, at this ``size`` and on this ``device``, on this
    machine, from the chapter's present code, with the present library and the present packages.

    Args:
        chapter: the stored chapter (``notebooks/NN_name.ipynb``).
        runs_dir: where ``rlbook run`` wrote its executions (``runs/small`` by default).
        size, device: what the caller would run the chapter at.

    Returns:
        ``(notebook, "")`` with the executed notebook (an ``nbformat.NotebookNode``) when it is accepted, else ``(None, reason)``.
    """
    path = Path(runs_dir) / Path(chapter).name
    if not path.is_file():
        return None, f"no execution in {runs_dir}"
    import nbformat

    try:
        executed = nbformat.read(path, as_version=4)
        stored = json.loads(Path(chapter).read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        return None, f"unreadable ({type(error).__name__})"
    record = executed.get("metadata", {}).get(RECORD_KEY)
    if not isinstance(record, dict) or record.get("format") != RECORD_FORMAT:
        return None, "no run record (made by an older rlbook run)"
    wanted = {"status": "ok", "size": size, "device": device, **_machine(),
              "code_sha256": _code_fingerprint(stored)}
    for key, value in wanted.items():
        if record.get(key) != value:
            return None, f"its {key} was {record.get(key)!r}, not {value!r}"
    # the two costlier fingerprints last
    if record.get("library_sha256") != library_fingerprint():
        return None, "the library has changed since it ran"
    if record.get("packages_sha256") != packages_fingerprint():
        return None, "the installed packages have changed since it ran"
    if _code_fingerprint(executed) != record["code_sha256"]:
        return None, "its code does not match its record"
    return executed, ""
