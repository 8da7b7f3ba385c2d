"""pytest checks a chapter against the execution ``rlbook run`` stored only when that execution is one the
chapter would repeat exactly, and then with nbval's own checks: a changed checked output or a cell that
raised fails exactly as it would under a new execution (notebooks/conftest.py, rlbook.app.run_record)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from rlbook.app import cli, run_record
from rlbook.app.chapters import Chapter

ROOT = Path(__file__).resolve().parents[1]


def _tiny_book(tmp_path: Path) -> Path:
    """A clone-like folder: notebooks/99_tiny.ipynb (one checked cell), the book's notebooks/conftest.py and
    nbval configured as in pyproject.toml."""
    book = tmp_path / "book"
    (book / "notebooks").mkdir(parents=True)
    shutil.copy(ROOT / "notebooks" / "conftest.py", book / "notebooks" / "conftest.py")
    (book / "pytest.ini").write_text("[pytest]\naddopts = -p no:cacheprovider --nbval-lax --nbval-current-env\n")
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("# NBVAL_CHECK_OUTPUT\nprint(6 * 7)"),
                nbformat.v4.new_code_cell("x = 3\nx")]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path = book / "notebooks" / "99_tiny.ipynb"
    nbformat.write(nb, path)
    # the stored outputs: the notebook as executed once
    row = cli.run_chapter(Chapter(number="99", title="tiny", path=path), tmp_path / "stored", "small", timeout=120)
    assert row["status"] == "ok", row["error"]
    shutil.copy(tmp_path / "stored" / path.name, path)
    return book


def _rlbook_run(book: Path) -> Path:
    path = book / "notebooks" / "99_tiny.ipynb"
    row = cli.run_chapter(Chapter(number="99", title="tiny", path=path), book / "runs" / "small", "small", timeout=120)
    assert row["status"] == "ok", row["error"]
    return book / "runs" / "small" / path.name


def _pytest(book: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "RLBOOK_DEVICE": "cpu"}
    return subprocess.run([sys.executable, "-m", "pytest", "notebooks/99_tiny.ipynb", "-q", *args], check=False,
                          cwd=book,
                          capture_output=True, text=True, env=env, timeout=300)


def _edit(path: Path, change) -> None:
    nb = json.loads(path.read_text())
    change(nb)
    path.write_text(json.dumps(nb))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    book = _tiny_book(tmp_path_factory.mktemp("replay"))
    return book, _rlbook_run(book)


def test_a_fresh_run_is_checked_without_a_kernel_and_a_tampered_one_fails(tiny, tmp_path):
    book, run = tiny
    book = Path(shutil.copytree(book, tmp_path / "book"))
    run = book / "runs" / "small" / run.name
    done = _pytest(book)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "99_tiny.ipynb: checked against rlbook run's execution (runs/small/99_tiny.ipynb" in done.stdout
    assert "2 passed" in done.stdout

    # the checked cell printed something else in the stored run: nbval's comparison fails it
    _edit(run, lambda nb: nb["cells"][0]["outputs"][0].update(text=["41\n"]))
    done = _pytest(book)
    assert done.returncode == 1 and "Cell outputs differ" in done.stdout and "checked against" in done.stdout

    # a cell that raised in the stored run fails, with its traceback
    _edit(run, lambda nb: nb["cells"][1]["outputs"].append(
        {"output_type": "error", "ename": "ValueError", "evalue": "planted", "traceback": ["ValueError: planted"]}))
    done = _pytest(book)
    assert "Cell execution caused an exception" in done.stdout and "ValueError: planted" in done.stdout

    # --nbval-reexecute executes the chapter itself (which passes: the planted defects are only in the run)
    done = _pytest(book, "--nbval-reexecute")
    assert done.returncode == 0, done.stdout
    assert "99_tiny.ipynb: executed by nbval (--nbval-reexecute)" in done.stdout


def test_a_changed_chapter_is_executed_again(tiny, tmp_path):
    book, _ = tiny
    book = Path(shutil.copytree(book, tmp_path / "book"))
    _edit(book / "notebooks" / "99_tiny.ipynb", lambda nb: nb["cells"][1].update(source="x = 4\nx"))
    done = _pytest(book)
    assert done.returncode == 0, done.stdout
    assert "99_tiny.ipynb: executed by nbval (its code_sha256 was" in done.stdout


def test_a_run_record_is_accepted_only_when_everything_matches(tiny, monkeypatch):
    book, run = tiny
    chapter = book / "notebooks" / "99_tiny.ipynb"
    executed, reason = run_record.fresh_run(chapter, run.parent)
    assert executed is not None and reason == ""
    assert executed.metadata["rlbook_run"]["status"] == "ok"
    assert run_record.fresh_run(chapter, run.parent, size="full")[1] == "its size was 'small', not 'full'"
    assert run_record.fresh_run(chapter, run.parent, device="cuda")[1] == "its device was 'cpu', not 'cuda'"
    assert run_record.fresh_run(chapter, book / "elsewhere")[1].startswith("no execution in")
    with monkeypatch.context() as m:
        m.setattr(run_record, "library_fingerprint", lambda: "0" * 64)
        assert run_record.fresh_run(chapter, run.parent)[1] == "the library has changed since it ran"
    with monkeypatch.context() as m:
        m.setattr(run_record, "packages_fingerprint", lambda: "0" * 64)
        assert run_record.fresh_run(chapter, run.parent)[1] == "the installed packages have changed since it ran"
    with monkeypatch.context() as m:
        m.setattr(run_record, "_machine", lambda: {"host": "another", "cpus": 64})
        assert run_record.fresh_run(chapter, run.parent)[1] == "its host was " + repr(run_record.platform.node()) \
            + ", not 'another'"
    record = executed.metadata["rlbook_run"]
    for key, value in [("status", "FAILED"), ("format", 0)]:
        copy = dict(executed)
        copy["metadata"] = {"rlbook_run": {**record, key: value}}
        stale = book / "stale" / run.name
        stale.parent.mkdir(exist_ok=True)
        stale.write_text(json.dumps(copy))
        assert run_record.fresh_run(chapter, stale.parent)[0] is None


def test_the_library_fingerprint_follows_every_file_of_the_package(tmp_path, monkeypatch):
    package = tmp_path / "rlbook"
    (package / "data").mkdir(parents=True)
    (package / "a.py").write_text("x = 1\n")
    (package / "data" / "b.json").write_text("{}")
    monkeypatch.setattr("rlbook.app.chapters.PACKAGE_ROOT", package)
    first = run_record.library_fingerprint()
    (package / "__pycache__").mkdir()
    (package / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"\0")
    assert run_record.library_fingerprint() == first  # caches do not count
    (package / "data" / "b.json").write_text('{"seeds": 10}')
    assert run_record.library_fingerprint() != first  # benchmark results do
