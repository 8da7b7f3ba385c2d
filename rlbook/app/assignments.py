"""``rlbook assignments``: the course assignments, released and graded by nbgrader.

    rlbook assignments list                          # the assignments and their points
    rlbook assignments release [--source DIR] [--out DIR] [NAME ...]
                                                     # student versions (nbgrader generate_assignment)
    rlbook assignments grade SUBMISSIONS [--source DIR] [--out DIR] [--timeout S] [--seed N] [NAME ...]
                                                     # autograde a folder of submissions: scores + feedback
    rlbook assignments validate [--source DIR] [NAME ...]  # the instructor solutions pass their own tests

The instructor versions (``--source``, by default ``assignments/source`` of a clone) are in nbgrader's
format (solution regions, autograded test cells with points, hidden tests, manually graded answers);
no package carries them (the wheel carries the released student versions,
``student_assignments_dir()``). Everything that touches a student's notebook goes through nbgrader
itself (Jupyter Development Team, "nbgrader: A Tool for Creating and Grading Assignments in the Jupyter
Notebook", J. Open Source Education 2(16):32, 2019; https://nbgrader.readthedocs.io): ``release`` is
its ``generate_assignment``, ``grade`` its ``autograde`` then ``generate_feedback``, with the
preprocessors of ``rlbook.app.grading``: student code runs only in a kernel inside a bubblewrap sandbox
(no network, nothing of the course visible, resource limits; without one the grader refuses), only
the definitions of the student's cells run, the library's implementations of the graded functions
raise when student code calls them, each test checks that nothing it relies on was changed, and a
test cell's stderr does not fail it. This process never imports or executes student code. Each
student is graded in a course folder of its own, so a submission that never returns, exits or kills
its kernel costs only its own points and the rest of the batch is graded.

``SUBMISSIONS`` is laid out like nbgrader's ``submitted/`` folder:
``SUBMISSIONS/<student>/<assignment>/<assignment>.ipynb``. ``grade`` writes, under ``--out``:

- ``grading-seed.txt``: the grading seed the hidden tests drew their inputs from (``--seed``);
- ``scores.csv``: one row per (student, assignment): ``auto_score``/``auto_max`` (autograded test
  points), ``manual_max`` (points of the written answers, graded by a person in nbgrader's formgrader),
  ``status`` (``graded``, or ``error: ...`` when nbgrader could not grade the notebook at all),
  ``flags`` (cells refused or left out, guard errors, edited test cells, scores above a cell's points,
  changes outside the submission; empty when nothing was seen) and ``seconds``;
- ``scores_by_test.csv``: one row per graded cell (``grade_id``, ``kind`` = auto/manual, ``score``,
  ``max_score``), so an instructor sees which test each student lost points on;
- ``feedback/<student>/<assignment>/<assignment>.html``: nbgrader's feedback page (the executed
  notebook with each test's outcome and points, hidden tests left out), and nothing else;
- ``autograded/<student>/<assignment>/<assignment>.ipynb``: the executed notebooks;
- ``gradebook.db`` and ``source/``: with them ``--out`` is an nbgrader course folder, so the written
  answers are graded in nbgrader's formgrader (``CourseDirectory.root`` = ``--out``); manual grades
  already given there are kept when the batch is graded again.

Needs the ``assignments`` extra (``pip install "rlbook[assignments]"``, i.e. nbgrader).
"""

from __future__ import annotations

import contextlib
import csv
import json
import logging
import os
import re
import shutil
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from rlbook.app.chapters import PACKAGE_ROOT

__all__ = ["find_assignments_dir", "student_assignments_dir", "list_assignments", "assignment_points", "release", "grade",
           "validate", "GradeResult", "add_subparser", "configure_nbgrader"]

DEFAULT_TIMEOUT = 120  # s per cell: the assignments' training cells take ~30 s on 2 CPU cores


def find_assignments_dir(start: Path | None = None) -> Path:
    """The folder of the instructor versions (``assignments/source``: solutions, hidden tests): under
    ``start`` (default: the working directory) or its parents, else beside the package of a clone
    (an editable install). The wheel never carries them: an instructor passes their own copy's path
    (``--source``) when rlbook is installed from a package.

    Raises:
        FileNotFoundError: no ``assignments/source`` folder holding ``<name>/<name>.ipynb`` was found.
    """
    here = (start or Path.cwd()).resolve()
    candidates = [p / "assignments" / "source" for p in (here, *here.parents)]
    candidates.append(PACKAGE_ROOT.parent / "assignments" / "source")
    for c in candidates:
        if _holds_assignments(c):
            return c
    raise FileNotFoundError("no assignments/source folder with <name>/<name>.ipynb found: the instructor versions "
                            "are not in the rlbook package; pass their path (--source DIR, source_dir=...), or run "
                            "from a clone of the repository")


def student_assignments_dir() -> Path:
    """The released student versions (no solutions, no hidden tests): the clone's ``assignments/student``
    or the copy the wheel carries (``rlbook/_bundled/assignments/student``).

    Raises:
        FileNotFoundError: neither exists.
    """
    for c in (PACKAGE_ROOT.parent / "assignments" / "student", PACKAGE_ROOT / "_bundled" / "assignments" / "student"):
        if _holds_assignments(c):
            return c
    raise FileNotFoundError("no student versions of the assignments found (assignments/student)")


def _holds_assignments(c: Path) -> bool:
    return c.is_dir() and any((d / f"{d.name}.ipynb").is_file() for d in c.iterdir() if d.is_dir())


def list_assignments(source_dir: Path | None = None) -> list[str]:
    """The assignments' names (``part1_...``), sorted: folders of ``source_dir`` holding ``<name>.ipynb``."""
    src = Path(source_dir) if source_dir is not None else find_assignments_dir()
    return sorted(d.name for d in src.iterdir() if d.is_dir() and (d / f"{d.name}.ipynb").is_file())


def assignment_points(notebook: Path) -> dict[str, tuple[str, float]]:
    """``{grade_id: (kind, points)}`` for every graded cell of an nbgrader notebook, read from its
    metadata; ``kind`` is ``"auto"`` (a test cell) or ``"manual"`` (a written answer or hand-graded code).

    Raises:
        ValueError: a graded cell without a ``grade_id`` or with non-positive ``points``.
    """
    cells = json.loads(Path(notebook).read_text())["cells"]
    points = {}
    for cell in cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if not meta.get("grade"):
            continue
        grade_id, p = meta.get("grade_id"), meta.get("points")
        if not grade_id or not isinstance(p, (int, float)) or p <= 0:
            raise ValueError(f"{notebook}: a graded cell needs a grade_id and points > 0, got {meta}")
        kind = "manual" if meta.get("solution") else "auto"
        points[grade_id] = (kind, float(p))
    return points


def _require_nbgrader():
    try:
        import nbgrader  # noqa: F401
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise RuntimeError('rlbook assignments needs nbgrader: pip install "rlbook[assignments]"') from e


def _api(root: Path, timeout: int | None = None, restrict_code: bool = True, seed: int = 0, submission_timeout: int = 0):
    """An ``NbGraderAPI`` on the course folder ``root`` (its own gradebook). With a ``timeout``, the
    API autogrades in the sandbox (``rlbook.app.grading``): the hardened notebook runs in a bubblewrap
    kernel, each cell interrupted after ``timeout`` seconds, and the feedback hides the hidden tests."""
    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory

    config = _config(root, timeout, restrict_code, seed, submission_timeout)
    config.CourseDirectory.root = str(root)
    config.CourseDirectory.db_url = f"sqlite:///{root / 'gradebook.db'}"
    config.NbGraderAPI.log_level = "WARN"
    return NbGraderAPI(CourseDirectory(config=config), config=config)


def _config(root: Path, timeout: int | None = None, restrict_code: bool = True, seed: int = 0, submission_timeout: int = 0):
    """The nbgrader settings of :func:`_api` without the course folder's own (root, gradebook)."""
    from nbconvert.preprocessors import ClearMetadataPreprocessor, CSSHTMLHeaderPreprocessor
    from nbgrader.preprocessors import (AssignLatePenalties, CheckCellMetadata, GetGrades, IgnorePattern,
                                        LimitOutput, SaveAutoGrades)
    from traitlets.config import Config

    from rlbook.app import grading

    config = Config()
    if timeout is not None:
        for cls in ("Execute", "SandboxedExecute"):
            config[cls].timeout = int(timeout)
            config[cls].interrupt_on_timeout = True
            config[cls].execute_retries = 0
            config[cls].iopub_timeout = 30  # s to wait for a cell's last output after its reply (4 by default)
        config.SandboxedExecute.submission_timeout = int(submission_timeout)
        config.Autograde.autograde_preprocessors = [
            grading.Harden, grading.SandboxedExecute, grading.Judge, IgnorePattern, ClearMetadataPreprocessor,
            LimitOutput, SaveAutoGrades, AssignLatePenalties, CheckCellMetadata]
        config.Harden.source_root = str(root / "source")
        config.Harden.restrict = bool(restrict_code)
        config.Harden.grading_seed = int(seed)
        config.Judge.report_dir = str(root / "rlbook-reports")
        config.GenerateFeedback.preprocessors = [grading.HideHiddenTests, GetGrades, CSSHTMLHeaderPreprocessor]
    return config


def configure_nbgrader(c, root: Path | str | None = None, timeout: int = DEFAULT_TIMEOUT, seed: int | None = None,
                       submission_timeout: int | None = None) -> int:
    """Make plain ``nbgrader autograde`` and ``nbgrader generate_feedback`` grade as
    ``rlbook assignments grade`` does: call it from the course's ``nbgrader_config.py``::

        from rlbook.app.assignments import configure_nbgrader
        configure_nbgrader(c)

    It sets the autograde preprocessors (the sandboxed kernel, :class:`~rlbook.app.grading.Harden`,
    :class:`~rlbook.app.grading.Judge`), the per-cell ``timeout`` (s) and the submission's budget
    (default 3 × ``timeout``), the instructor notebooks' folder (``<root>/source``), where the flag
    reports go (``<root>/rlbook-reports/<student>/<notebook>.json``: read them before publishing
    grades), the feedback preprocessors (hidden tests removed) and the **grading seed**: ``seed``, or
    the environment's ``RLBOOK_GRADING_SEED``, or the one kept in ``<root>/grading-seed.txt``, which
    is drawn at random (``secrets``) the first time and written there readable by its owner only, so
    re-grades use the same hidden inputs and no student can know them.

    Args:
        c: the ``traitlets`` config object of ``nbgrader_config.py``.
        root: the course folder (default: ``c.CourseDirectory.root`` if set, else the current folder).

    Returns:
        The grading seed.

    Raises:
        ValueError: ``seed`` or ``RLBOOK_GRADING_SEED`` is not an integer in [0, 2**31), or ``timeout`` or
            ``submission_timeout`` is not a positive integer.
    """
    from rlbook.app import grading

    root = Path(root or (c.CourseDirectory.root if "root" in c.CourseDirectory else None) or os.getcwd()).resolve()
    if not (isinstance(timeout, int) and timeout > 0):
        raise ValueError(f"timeout: seconds per cell must be a positive integer, got {timeout!r}")
    budget = 3 * timeout if submission_timeout is None else submission_timeout
    if not (isinstance(budget, int) and budget > 0):
        raise ValueError(f"submission_timeout: a positive integer expected, got {submission_timeout!r}")
    if seed is None and os.environ.get("RLBOOK_GRADING_SEED"):
        try:
            seed = int(os.environ["RLBOOK_GRADING_SEED"])
        except ValueError:
            raise ValueError(f"RLBOOK_GRADING_SEED: an integer expected, got {os.environ['RLBOOK_GRADING_SEED']!r}") from None
    if seed is None:
        kept = root / "grading-seed.txt"
        if kept.is_file():
            seed = int(kept.read_text().split()[0])
        else:
            import secrets

            seed = secrets.randbelow(2**31)
            kept.write_text(f"{seed}\n")
            kept.chmod(0o600)
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**31:
        raise ValueError(f"seed: an integer in [0, 2**31) expected, got {seed!r}")
    config = _config(root, timeout, True, seed, budget)  # the same settings as rlbook assignments grade
    for section in ("Autograde", "Execute", "SandboxedExecute", "Harden", "Judge", "GenerateFeedback"):
        for key, value in config[section].items():
            c[section][key] = value
    return seed


def _names(names, source_dir: Path) -> list[str]:
    available = list_assignments(source_dir)
    if not names:
        return available
    unknown = [n for n in names if n not in available]
    if unknown:
        raise ValueError(f"names: unknown assignment(s) {unknown}; choose from {available}")
    return list(names)


def _course(root: Path, source_dir: Path, names: list[str]) -> None:
    """Lay out an nbgrader course folder at ``root`` with ``source/<name>`` for each name."""
    for name in names:
        dst = root / "source" / name
        if dst.exists():
            shutil.rmtree(dst)
        shutil.copytree(source_dir / name, dst, ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"))


def _check(result: dict, what: str) -> None:
    if not result.get("success"):
        raise RuntimeError(f"nbgrader {what} failed:\n{result.get('error') or ''}\n{result.get('log') or ''}")


def release(out: Path | str = "assignments-course", names: list[str] | None = None,
            source_dir: Path | None = None) -> list[Path]:
    """Make the student versions of the assignments with nbgrader's ``generate_assignment``.

    ``out`` becomes (or is updated as) an nbgrader course folder: ``out/source/<name>/`` (a copy of the
    instructor versions), ``out/release/<name>/<name>.ipynb`` (what students get: solution regions
    replaced by ``raise NotImplementedError()``, written answers by "YOUR ANSWER HERE", hidden tests
    removed, every cell's checksum recorded) and ``out/gradebook.db``.

    Returns:
        The released notebooks' paths, one per assignment.

    Raises:
        ValueError: ``names`` holds an assignment that does not exist.
        RuntimeError: nbgrader is missing, or it refused an assignment (its log is in the message).
    """
    _require_nbgrader()
    src = Path(source_dir) if source_dir is not None else find_assignments_dir()
    names = _names(names, src)
    root = Path(out).resolve()
    root.mkdir(parents=True, exist_ok=True)
    _course(root, src, names)
    api = _api(root)
    released = []
    for name in names:
        _check(api.generate_assignment(name, force=True, create=True), f"generate_assignment {name}")
        released.append(root / "release" / name / f"{name}.ipynb")
    return released


def validate(names: list[str] | None = None, source_dir: Path | None = None, timeout: int = DEFAULT_TIMEOUT,
             seed: int | None = None) -> dict:
    """Grade the instructor versions as if a student had handed them in: every autograded test
    must pass (the hidden tests on the inputs of ``seed``, by default a fresh random one). Returns
    ``{name: (auto_score, auto_max)}``.

    Raises:
        ValueError: unknown names.
        RuntimeError: an instructor solution does not score full marks (the failing tests are named).
    """
    src = Path(source_dir) if source_dir is not None else find_assignments_dir()
    names = _names(names, src)
    with tempfile.TemporaryDirectory(prefix="rlbook-validate-") as tmp:
        subs = Path(tmp) / "submitted" / "instructor"
        for name in names:
            shutil.copytree(src / name, subs / name)
        result = grade(Path(tmp) / "submitted", Path(tmp) / "out", timeout=timeout, names=names, source_dir=src,
                       seed=seed)
    scores, failed = {}, []
    for row in result.rows:
        scores[row["assignment"]] = (row["auto_score"], row["auto_max"])
        lost = [t["grade_id"] for t in result.tests
                if t["assignment"] == row["assignment"] and t["kind"] == "auto" and t["score"] < t["max_score"]]
        if row["status"] != "graded" or lost:
            failed.append(f"{row['assignment']}: {row['status']}; tests below full marks: {lost}")
    if failed:
        raise RuntimeError("instructor solutions do not score full marks:\n" + "\n".join(failed))
    return scores


@dataclass
class GradeResult:
    """What ``grade`` wrote: the rows of ``scores.csv`` and ``scores_by_test.csv``, and the paths."""

    rows: list[dict] = field(default_factory=list)
    tests: list[dict] = field(default_factory=list)
    seed: int | None = None
    scores_csv: Path | None = None
    tests_csv: Path | None = None
    feedback: list[Path] = field(default_factory=list)

    def score(self, student: str, assignment: str) -> float:
        """The autograded score of one submission (KeyError if it was not in the batch)."""
        for row in self.rows:
            if row["student"] == student and row["assignment"] == assignment:
                return row["auto_score"]
        raise KeyError((student, assignment))

    def flags(self, student: str, assignment: str) -> str:
        """The ``flags`` of one submission ("" when nothing was flagged)."""
        for row in self.rows:
            if row["student"] == student and row["assignment"] == assignment:
                return row["flags"]
        raise KeyError((student, assignment))

    def lost(self, student: str, assignment: str) -> dict[str, float]:
        """``{grade_id: points lost}`` for the autograded tests one submission did not pass in full."""
        return {t["grade_id"]: t["max_score"] - t["score"] for t in self.tests
                if t["student"] == student and t["assignment"] == assignment and t["kind"] == "auto"
                and t["score"] < t["max_score"]}


def _submissions(submissions: Path, names: list[str]) -> list[tuple[str, str]]:
    pairs = []
    for student in sorted(p for p in submissions.iterdir() if p.is_dir() and not p.name.startswith(".")):
        for name in names:
            if (student / name / f"{name}.ipynb").is_file():
                pairs.append((student.name, name))
    return pairs


@contextlib.contextmanager
def _quiet_logs():
    """nbgrader logs every step at INFO through the root handlers; keep the CLI's output to results."""
    logger = logging.getLogger("traitlets")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            # nbgrader's gradebook queries trip SQLAlchemy's autoflush warnings; they are harmless
            warnings.filterwarnings("ignore", message=".*not in session.*")
            yield
    finally:
        logger.setLevel(level)


def grade(submissions: Path | str, out: Path | str = "graded", timeout: int = DEFAULT_TIMEOUT,
          names: list[str] | None = None, source_dir: Path | None = None, *,
          restrict_code: bool = True, jobs: int | None = None, seed: int | None = None,
          submission_timeout: int | None = None) -> GradeResult:
    """Autograde every submission under ``submissions`` (``<student>/<assignment>/<assignment>.ipynb``)
    with nbgrader and write the score tables and feedback under ``out`` (see the module docstring).

    Each (student, assignment) is graded in a course folder of its own (a copy of the sources and of a
    gradebook made once by ``generate_assignment``), by nbgrader's ``autograde`` (which restores the
    locked test cells from the source and runs the notebook in a fresh kernel in the sandbox,
    interrupting any cell that runs longer than ``timeout`` seconds) and ``generate_feedback``. A
    submission that nbgrader cannot grade at all (its kernel died) gets ``status = "error: ..."`` and
    score 0; the batch goes on. The sandbox is checked once first: without it nothing is graded.

    Args:
        submissions: folder of student folders.
        out: output folder (created; earlier results for the same submissions are replaced).
        timeout: seconds allowed per cell, > 0 (the value applied to every cell).
        names: assignments to grade (default: every assignment found in the sources).
        source_dir: the instructor versions (default: ``find_assignments_dir()``).
        restrict_code: run only the definitions of the student's cells (``rlbook.app.grading.restrict``);
            False only to test the sandbox and the guard on their own.
        jobs: submissions graded at once, each in a worker process (default: the CPU count, at most 4;
            each kernel uses one thread).
        submission_timeout: seconds for one whole submission, > 0 (default: 3 × ``timeout``): each cell
            gets the smaller of ``timeout`` and what is left, so a function that loops forever in
            every cell costs one budget, not one timeout per cell.
        seed: the grading seed, an integer in [0, 2**31): the instructor's cells have the name
            ``GRADING_SEED`` replaced by it, and the hidden tests draw their inputs from it, so
            the public test code does not tell anyone those inputs. Default: a fresh random seed
            (``secrets``), reported in ``GradeResult.seed`` and ``out/grading-seed.txt``; pass it
            again to grade with the same hidden inputs.

    Raises:
        ValueError: ``submissions`` is not a folder, ``timeout`` <= 0, ``seed`` outside [0, 2**31), or
            ``names`` is unknown.
        rlbook.app.grading.SandboxUnavailable: bubblewrap cannot run here; nothing is graded.
        RuntimeError: nbgrader is missing or cannot generate an assignment's gradebook entries.
    """
    _require_nbgrader()
    submissions = Path(submissions).resolve()
    if not submissions.is_dir():
        raise ValueError(f"submissions: {submissions} is not a folder (expected <student>/<assignment>/<assignment>.ipynb)")
    if not (isinstance(timeout, (int, float)) and timeout > 0):
        raise ValueError(f"timeout: seconds per cell must be > 0, got {timeout!r}")
    if seed is None:
        import secrets

        seed = secrets.randbelow(2**31)
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**31:
        raise ValueError(f"seed: an integer in [0, 2**31) expected, got {seed!r}")
    submission_timeout = 3 * int(timeout) if submission_timeout is None else submission_timeout
    if not (isinstance(submission_timeout, int) and not isinstance(submission_timeout, bool) and submission_timeout > 0):
        raise ValueError(f"submission_timeout: seconds per submission must be an integer > 0, got {submission_timeout!r}")
    src = Path(source_dir) if source_dir is not None else find_assignments_dir()
    names = _names(names, src)
    from rlbook.app.grading import Sandbox

    Sandbox().check()  # refuse to run any student code without the sandbox
    jobs = min(4, os.cpu_count() or 1) if jobs is None else int(jobs)
    out = Path(out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    pairs = _submissions(submissions, names)
    needed = sorted({a for _, a in pairs})
    result = GradeResult(seed=seed)
    (out / "grading-seed.txt").write_text(f"{seed}\n")
    with tempfile.TemporaryDirectory(prefix="rlbook-grade-") as tmp, _quiet_logs():
        template = Path(tmp) / "template"
        _course(template, src, needed)
        api = _api(template)
        for name in needed:
            _check(api.generate_assignment(name, force=True, create=True), f"generate_assignment {name}")
        points = {name: assignment_points(src / name / f"{name}.ipynb") for name in needed}
        tasks = [(Path(tmp) / "students" / f"{student}__{name}", template, submissions, student, name, points[name],
                  timeout, out, restrict_code, seed, submission_timeout) for student, name in pairs]
        course_db = _course_gradebook(out, template, src, needed)
        # scores.csv grows as each submission finishes (a long batch can be read, or resumed by hand, midway);
        # it is rewritten in order at the end
        partial = out / "scores.csv"
        _write_csv(partial, [], SCORE_COLUMNS)

        def finished(outcome):
            with open(partial, "a", newline="") as f:
                csv.DictWriter(f, fieldnames=SCORE_COLUMNS).writerow(
                    {k: (f"{v:g}" if isinstance(v, float) else v) for k, v in outcome[0].items()})

        for task, (row, tests, feedback) in zip(tasks, _run_tasks(tasks, jobs, finished)):
            result.rows.append(row)
            result.tests.extend(tests)
            if feedback is not None:
                result.feedback.append(feedback)
            if row["status"] == "graded":
                _merge_gradebook(course_db, task[0] / "gradebook.db", row["student"], row["assignment"])
    result.scores_csv = _write_csv(out / "scores.csv", result.rows, SCORE_COLUMNS)
    result.tests_csv = _write_csv(out / "scores_by_test.csv", result.tests,
                                  ["student", "assignment", "grade_id", "kind", "score", "max_score"])
    return result


def _course_gradebook(out: Path, template: Path, src: Path, names: list[str]) -> Path:
    """``out`` as an nbgrader course folder for the formgrader: ``out/source/<name>`` (the instructor
    versions) and ``out/gradebook.db`` (kept across runs, so manual grades survive; made from the
    template's when missing, an assignment it lacks added with generate_assignment)."""
    from nbgrader.api import Gradebook, MissingEntry

    _course(out, src, names)
    db = out / "gradebook.db"
    if not db.exists():
        shutil.copy2(template / "gradebook.db", db)
        return db
    with Gradebook(f"sqlite:///{db}") as gb:
        missing = []
        for name in names:
            try:
                gb.find_assignment(name)
            except MissingEntry:
                missing.append(name)
    if missing:
        api = _api(out)
        for name in missing:
            _check(api.generate_assignment(name, force=True, create=True), f"generate_assignment {name}")
    return db


def _merge_gradebook(course_db: Path, graded_db: Path, student: str, name: str) -> None:
    """Copy one submission's grades and comments from its own gradebook into the course's (scores capped
    at each cell's points; manual scores a person already gave are kept)."""
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{graded_db}") as src, Gradebook(f"sqlite:///{course_db}") as dst:
        sub = src.find_submission(name, student)
        dst.update_or_create_student(student)
        dst.update_or_create_submission(name, student, timestamp=sub.timestamp)
        for nb in sub.notebooks:
            for g in nb.grades:
                d = dst.find_grade(g.name, nb.name, name, student)
                d.auto_score = None if g.auto_score is None else min(float(g.auto_score), float(g.max_score))
                d.needs_manual_grade = bool(g.needs_manual_grade or d.manual_score is not None)
            for c in nb.comments:
                d = dst.find_comment(c.name, nb.name, name, student)
                d.auto_comment = c.auto_comment
        dst.db.commit()


def _grade_task(task):
    """One submission, timed, with the tripwire: the template and the submissions folder must not change."""
    template, submissions = task[1], task[2]
    with _quiet_logs():
        before = _fingerprint(template, submissions)
        started = time.monotonic()
        row, tests, feedback = _grade_one(*task)
        row["seconds"] = round(time.monotonic() - started, 1)
        if _fingerprint(template, submissions) != before:
            row["flags"] = _join(row["flags"], "the course folder outside the submission changed while it was graded")
    return row, tests, feedback


def _failed_task(task, error: BaseException):
    """The outcome of a submission whose grading process died: 0 points, an error status."""
    _, _, _, student, name, points, *_ = task
    row = {"student": student, "assignment": name, "auto_score": 0.0,
           "auto_max": sum(p for k, p in points.values() if k == "auto"),
           "manual_max": sum(p for k, p in points.values() if k == "manual"),
           "status": f"error: the grading process died ({type(error).__name__})", "flags": "", "seconds": 0.0}
    tests = [{"student": student, "assignment": name, "grade_id": g, "kind": k, "score": 0.0, "max_score": p}
             for g, (k, p) in points.items()]
    return row, tests, None


def _run_tasks(tasks: list, jobs: int, finished=None) -> list:
    """Grade the tasks, ``jobs`` at a time, each in a worker process (one worker's death costs only
    the submission it was grading: the others are graded again in a fresh pool); ``finished(outcome)``
    is called as each one is done."""
    finished = finished or (lambda outcome: None)
    if jobs <= 1 or len(tasks) <= 1:
        outcomes = []
        for t in tasks:
            outcomes.append(_grade_task(t))
            finished(outcomes[-1])
        return outcomes
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed
    from concurrent.futures.process import BrokenProcessPool

    context = multiprocessing.get_context("fork" if sys.platform.startswith("linux") else "spawn")
    outcomes: dict[int, tuple] = {}
    pending, tries = list(range(len(tasks))), {i: 0 for i in range(len(tasks))}
    while pending:
        with ProcessPoolExecutor(max_workers=min(jobs, len(pending)), mp_context=context) as pool:
            futures = {pool.submit(_grade_task, tasks[i]): i for i in pending}
            retry = []
            for future in as_completed(futures):
                i = futures[future]
                try:
                    outcomes[i] = future.result()
                    finished(outcomes[i])
                except BrokenProcessPool as e:  # some worker died: grade the unfinished ones again
                    tries[i] += 1
                    if tries[i] >= 2:
                        outcomes[i] = _failed_task(tasks[i], e)
                        finished(outcomes[i])
                    else:
                        retry.append(i)
                except Exception as e:  # noqa: BLE001 - a submission must never stop the batch
                    outcomes[i] = _failed_task(tasks[i], e)
                    finished(outcomes[i])
        pending = retry
        jobs = 1 if retry else jobs  # alone, a crashing submission takes no other with it
    return [outcomes[i] for i in range(len(tasks))]


def _symlinks(folder: Path) -> list[str]:
    """Paths under ``folder`` (itself included) that are symbolic links, relative to its parent."""
    found = [folder.name] if folder.is_symlink() else []
    for here, dirs, files in os.walk(folder):
        for n in dirs + files:
            p = Path(here) / n
            if p.is_symlink():
                found.append(str(p.relative_to(folder.parent)))
    return found


def _grade_one(root: Path, template: Path, submissions: Path, student: str, name: str,
               points: dict[str, tuple[str, float]], timeout, out: Path, restrict_code: bool = True, seed: int = 0,
               submission_timeout: int = 0):
    """Grade one submission in its own course folder ``root``; never raises for the submission's faults."""
    links = _symlinks(submissions / student) if (submissions / student).is_symlink() else _symlinks(submissions / student / name)
    if links:  # a link to the instructor's notebook or to a file elsewhere: never followed, never graded
        row, tests, _ = _failed_task((root, template, submissions, student, name, points), RuntimeError())
        row["status"] = "rejected: the submission holds symbolic links"
        row["flags"] = "symbolic links in the submission (not followed, not graded): " + "; ".join(
            repr(p) for p in links[:5])
        return row, tests, None
    code_files = sorted(p.name for p in (submissions / student / name).iterdir()
                        if p.suffix in (".py", ".pth", ".so", ".pyc") or (p / "__init__.py").exists())
    shutil.copytree(template / "source", root / "source")
    shutil.copy2(template / "gradebook.db", root / "gradebook.db")
    shutil.copytree(submissions / student / name, root / "submitted" / student / name,
                    ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    auto_max = sum(p for kind, p in points.values() if kind == "auto")
    manual_max = sum(p for kind, p in points.values() if kind == "manual")
    row = {"student": student, "assignment": name, "auto_score": 0.0, "auto_max": auto_max,
           "manual_max": manual_max, "status": "graded", "flags": ""}
    flags = []
    scores = {gid: 0.0 for gid in points}
    feedback = None
    if code_files:  # the kernel never has its working folder on sys.path; a file there is still worth a look
        flags.append("a Python file or package beside the notebook (never imported): "
                     + ", ".join(repr(n) for n in code_files[:5]))
    flags += _edited_locked_cells(submissions / student / name / f"{name}.ipynb", template / "source" / name / f"{name}.ipynb")
    try:
        api = _api(root, timeout, restrict_code, seed, submission_timeout)
        res = api.autograde(name, student, force=True, create=True)
        if not res.get("success"):
            reason = _first_line((res.get("error") or "") + "\n" + (res.get("log") or ""))
            row["status"] = "error: " + (reason or "autograde failed")
        else:
            for gid, score in _read_scores(root, name, student).items():
                if gid in points and score > points[gid][1]:
                    flags.append(f"{gid}: score {score:g} above the cell's {points[gid][1]:g} points (capped)")
                    score = points[gid][1]
                scores[gid] = max(score, 0.0)
            report = root / "rlbook-reports" / student / f"{name}.json"
            if report.is_file():
                flags += json.loads(report.read_text())["flags"]
            else:
                flags.append("no grading report: the hardening step did not run")
            res = api.generate_feedback(name, student, force=True)
            html = root / "feedback" / student / name / f"{name}.html"
            if res.get("success") and html.is_file():
                # the page only: files the submission wrote never reach the feedback folder
                dst = out / "feedback" / student / name
                if dst.exists():
                    shutil.rmtree(dst)
                dst.mkdir(parents=True)
                shutil.copy2(html, dst / f"{name}.html")
                feedback = dst / f"{name}.html"
            graded_nb = root / "autograded" / student / name / f"{name}.ipynb"
            if graded_nb.is_file():
                (out / "autograded" / student / name).mkdir(parents=True, exist_ok=True)
                shutil.copy2(graded_nb, out / "autograded" / student / name / f"{name}.ipynb")
    except Exception as e:  # a submission must never stop the batch
        row["status"] = f"error: {type(e).__name__}: {_first_line(str(e))}"
    row["auto_score"] = sum(scores[g] for g, (kind, _) in points.items() if kind == "auto")
    row["flags"] = "; ".join(flags)
    tests = [{"student": student, "assignment": name, "grade_id": g, "kind": kind, "score": scores[g], "max_score": p}
             for g, (kind, p) in points.items()]
    return row, tests, feedback


def _edited_locked_cells(submitted: Path, source: Path) -> list[str]:
    """A flag for each of the instructor's locked code cells (tests, setup) whose submitted source differs
    (nbgrader grades the instructor's version anyway) or that is missing."""
    try:
        cells = json.loads(submitted.read_text())["cells"]
    except (OSError, ValueError, KeyError, TypeError):
        return ["the submitted notebook could not be read"]
    def text(cell):
        src = cell.get("source", "")
        return "".join(src) if isinstance(src, list) else src
    theirs = {}
    for c in cells:
        if isinstance(c, dict):
            gid = (c.get("metadata", {}).get("nbgrader") or {}).get("grade_id")
            if gid:
                theirs[gid] = text(c)
    flags = []
    for c in json.loads(source.read_text())["cells"]:
        meta = c.get("metadata", {}).get("nbgrader", {})
        if c["cell_type"] == "code" and meta.get("locked") and not meta.get("solution"):
            gid = meta.get("grade_id")
            if gid not in theirs:
                flags.append(f"{gid}: the instructor's cell is missing from the submission")
            elif _strip_hidden(theirs[gid]) != _strip_hidden(text(c)):
                flags.append(f"{gid}: the submitted cell differs from the instructor's (graded with the instructor's)")
    return flags


def _strip_hidden(text: str) -> str:
    return re.sub(r"[ \t]*### BEGIN HIDDEN TESTS.*?### END HIDDEN TESTS[ \t]*\n?", "", text, flags=re.S).strip()


def _join(a: str, b: str) -> str:
    return f"{a}; {b}" if a else b


def _fingerprint(*folders: Path) -> list[tuple]:
    """(path, size, mtime) of every file under ``folders``: the grader's tripwire for writes outside a
    submission's sandbox."""
    out = []
    for folder in folders:
        for p in sorted(folder.rglob("*")):
            if p.is_file() and p.name != "gradebook.db":
                st = p.stat()
                out.append((str(p), st.st_size, st.st_mtime_ns))
    return out


def _read_scores(root: Path, name: str, student: str) -> dict[str, float]:
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        submission = gb.find_submission(name, student)
        return {grade.name: float(grade.score or 0.0) for nb in submission.notebooks for grade in nb.grades}


_ERROR_LINE = re.compile(r"^\s*([\w.]*(?:Error|Exception|Exit|Interrupt)): ?(.*)$")


def _first_line(text: str) -> str:
    """The most telling line of an nbgrader log: the last ``SomeError: message`` that is not nbgrader's
    own "see the above traceback" wrapper (e.g. ``nbclient.exceptions.DeadKernelError: Kernel died``)."""
    errors = [m for m in map(_ERROR_LINE.match, str(text).splitlines()) if m and "NbGraderException" not in m.group(1)]
    if errors:
        return f"{errors[-1].group(1).rsplit('.', 1)[-1]}: {errors[-1].group(2)}"[:200]
    lines = [ln.strip() for ln in str(text).splitlines() if ln.strip()]
    return lines[-1][:200] if lines else ""


SCORE_COLUMNS = ["student", "assignment", "auto_score", "auto_max", "manual_max", "status", "flags", "seconds"]


def _write_csv(path: Path, rows: list[dict], columns: list[str]) -> Path:
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        for r in rows:
            writer.writerow({k: (f"{v:g}" if isinstance(v, float) else v) for k, v in r.items()})
    return path


# --- the command line ------------------------------------------------------------------------------------


def _source(args) -> Path:
    return Path(args.source) if getattr(args, "source", None) else find_assignments_dir()


def _cmd_list(args) -> int:
    if getattr(args, "source", None):
        src = Path(args.source)
    else:
        try:
            src = find_assignments_dir()
        except FileNotFoundError:
            src = student_assignments_dir()
    for name in list_assignments(src):
        pts = assignment_points(src / name / f"{name}.ipynb")
        auto = sum(p for k, p in pts.values() if k == "auto")
        manual = sum(p for k, p in pts.values() if k == "manual")
        print(f"{name:28s} {auto:5g} autograded + {manual:g} written points")
    return 0


def _cmd_release(args) -> int:
    for path in release(args.out, args.names or None, source_dir=_source(args)):
        print(path)
    return 0


def _cmd_grade(args) -> int:
    from rlbook.app.grading import SandboxUnavailable

    try:
        result = grade(args.submissions, args.out, timeout=args.timeout, names=args.names or None,
                       source_dir=_source(args), jobs=args.jobs, seed=args.seed,
                       submission_timeout=args.submission_timeout)
    except SandboxUnavailable as e:
        print(e, file=sys.stderr)
        return 2
    for row in result.rows:
        print(f"{row['student']:20s} {row['assignment']:28s} {row['auto_score']:6g} / {row['auto_max']:g}"
              f"  (+ {row['manual_max']:g} written, graded by hand)  {row['status']}"
              + (f"  FLAGGED: {row['flags']}" if row["flags"] else ""))
    print(f"grading seed: {result.seed} (--seed {result.seed} grades again with the same hidden inputs)")
    print(f"scores: {result.scores_csv}\nper test: {result.tests_csv}\nfeedback: {Path(args.out).resolve() / 'feedback'}")
    return 0 if all(r["status"] == "graded" for r in result.rows) else 1


def _cmd_validate(args) -> int:
    try:
        scores = validate(args.names or None, timeout=args.timeout, source_dir=_source(args), seed=args.seed)
    except RuntimeError as e:
        print(e, file=sys.stderr)
        return 1
    for name, (score, max_score) in scores.items():
        print(f"{name:28s} {score:g} / {max_score:g}  ok")
    return 0


def add_subparser(sub) -> None:
    """Add the ``assignments`` subcommand (``list``, ``release``, ``grade``, ``validate``) to ``sub``."""
    p = sub.add_parser("assignments", help="the course assignments: release and grade them with nbgrader",
                       description=__doc__.split("\n\n")[1] if __doc__ else None,
                       formatter_class=__import__("argparse").RawDescriptionHelpFormatter)
    sp = p.add_subparsers(dest="assignments_cmd", required=True)
    q = sp.add_parser("list", help="the assignments and their points")
    q.add_argument("--source", help="the instructor versions: a folder of <name>/<name>.ipynb (default: assignments/source in a clone)")
    q.set_defaults(fn=_cmd_list)
    q = sp.add_parser("release", help="student versions, via nbgrader generate_assignment")
    q.add_argument("names", nargs="*", help="assignments (default: all)")
    q.add_argument("--out", default="assignments-course", help="course folder to write (default: %(default)s)")
    q.add_argument("--source", help="the instructor versions: a folder of <name>/<name>.ipynb (default: assignments/source in a clone)")
    q.set_defaults(fn=_cmd_release)
    q = sp.add_parser("grade", help="autograde SUBMISSIONS/<student>/<assignment>/<assignment>.ipynb")
    q.add_argument("submissions", help="folder of student folders")
    q.add_argument("names", nargs="*", help="assignments (default: all)")
    q.add_argument("--out", default="graded", help="folder for scores.csv and feedback/ (default: %(default)s)")
    q.add_argument("--timeout", type=int, default=DEFAULT_TIMEOUT, help="seconds per cell (default: %(default)s)")
    q.add_argument("--submission-timeout", type=int, default=None,
                   help="seconds for one whole submission (default: 3 × --timeout)")
    q.add_argument("--jobs", type=int, default=None, help="submissions graded at once (default: CPU count, at most 4)")
    q.add_argument("--seed", type=int, default=None,
                   help="grading seed: the hidden tests' inputs are drawn from it (default: a fresh random one, printed)")
    q.add_argument("--source", help="the instructor versions: a folder of <name>/<name>.ipynb (default: assignments/source in a clone)")
    q.set_defaults(fn=_cmd_grade)
    q = sp.add_parser("validate", help="the instructor solutions score full marks")
    q.add_argument("names", nargs="*", help="assignments (default: all)")
    q.add_argument("--timeout", type=int, default=DEFAULT_TIMEOUT, help="seconds per cell (default: %(default)s)")
    q.add_argument("--seed", type=int, default=None, help="grading seed for the hidden tests (default: a fresh random one)")
    q.add_argument("--source", help="the instructor versions: a folder of <name>/<name>.ipynb (default: assignments/source in a clone)")
    q.set_defaults(fn=_cmd_validate)
