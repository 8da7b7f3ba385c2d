"""``rlbook assignments``: the course assignments, released and graded by nbgrader.

    rlbook assignments list                          # the assignments and their points
    rlbook assignments release [--out DIR] [NAME ...] # student versions (nbgrader generate_assignment)
    rlbook assignments grade SUBMISSIONS [--out DIR] [--timeout S] [NAME ...]
                                                     # autograde a folder of submissions: scores + feedback
    rlbook assignments validate [NAME ...]           # the instructor solutions pass their own tests

The assignments live in ``assignments/source/<name>/<name>.ipynb`` in nbgrader's format (solution
regions, autograded test cells with points, hidden tests, manually graded answers). Everything that
touches a student's notebook goes through nbgrader itself (Jupyter Development Team, "nbgrader: A Tool
for Creating and Grading Assignments in the Jupyter Notebook", J. Open Source Education 2(16):32, 2019;
https://nbgrader.readthedocs.io): ``release`` is its ``generate_assignment``, ``grade`` its
``autograde`` then ``generate_feedback``. Student code only ever runs in a Jupyter kernel that
nbgrader starts (a separate process, with a per-cell timeout after which the kernel is interrupted);
this process never imports or executes it. Each student is graded in a course folder of their own,
so a submission that deletes files around it, kills its kernel or never returns costs only its own
points and the rest of the batch is graded.

``SUBMISSIONS`` is laid out like nbgrader's ``submitted/`` folder:
``SUBMISSIONS/<student>/<assignment>/<assignment>.ipynb``. ``grade`` writes, under ``--out``:

- ``scores.csv``: one row per (student, assignment): ``auto_score``/``auto_max`` (autograded test
  points), ``manual_max`` (points of the written answers, graded by a person in nbgrader's formgrader),
  ``status`` (``graded``, or ``error: ...`` when nbgrader could not grade the notebook at all);
- ``scores_by_test.csv``: one row per graded cell (``grade_id``, ``kind`` = auto/manual, ``score``,
  ``max_score``), so an instructor sees which test each student lost points on;
- ``feedback/<student>/<assignment>/<assignment>.html``: nbgrader's feedback page (the executed
  notebook with each test's outcome and points);
- ``autograded/<student>/<assignment>/<assignment>.ipynb``: the executed notebooks.

Needs the ``assignments`` extra (``pip install "rlbook[assignments]"``, i.e. nbgrader).
"""

from __future__ import annotations

import contextlib
import csv
import json
import logging
import re
import shutil
import sys
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["find_assignments_dir", "list_assignments", "assignment_points", "release", "grade",
           "validate", "GradeResult", "add_subparser"]

DEFAULT_TIMEOUT = 120  # s per cell: the assignments' training cells take ~30 s on 2 CPU cores


def find_assignments_dir(start: Path | None = None) -> Path:
    """The folder of nbgrader source assignments (``assignments/source``): under ``start`` (default:
    the working directory) or its parents, else beside the installed package (a clone), else the copy
    the wheel carries (``rlbook/_bundled/assignments/source``).

    Raises:
        FileNotFoundError: no ``assignments/source`` folder holding ``<name>/<name>.ipynb`` was found.
    """
    here = (start or Path.cwd()).resolve()
    candidates = [p / "assignments" / "source" for p in (here, *here.parents)]
    candidates.append(Path(__file__).resolve().parents[1] / "assignments" / "source")
    candidates.append(Path(__file__).resolve().parent / "_bundled" / "assignments" / "source")
    for c in candidates:
        if c.is_dir() and any((d / f"{d.name}.ipynb").is_file() for d in c.iterdir() if d.is_dir()):
            return c
    raise FileNotFoundError("no assignments/source folder with <name>/<name>.ipynb found: run from a clone of "
                            "the repository, or install rlbook from its wheel, which carries the assignments")


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


def _api(root: Path, timeout: int | None = None):
    """An ``NbGraderAPI`` on the course folder ``root`` (its own gradebook), with a per-cell timeout."""
    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory
    from traitlets.config import Config

    config = Config()
    config.CourseDirectory.root = str(root)
    config.CourseDirectory.db_url = f"sqlite:///{root / 'gradebook.db'}"
    if timeout is not None:
        config.Execute.timeout = int(timeout)
        config.Execute.interrupt_on_timeout = True
        config.Execute.execute_retries = 0
    config.NbGraderAPI.log_level = "WARN"
    return NbGraderAPI(CourseDirectory(config=config), config=config)


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


def validate(names: list[str] | None = None, source_dir: Path | None = None, timeout: int = DEFAULT_TIMEOUT) -> dict:
    """Grade the instructor versions as if a student had handed them in: every autograded test
    must pass. Returns ``{name: (auto_score, auto_max)}``.

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
        result = grade(Path(tmp) / "submitted", Path(tmp) / "out", timeout=timeout, names=names, source_dir=src)
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
    scores_csv: Path | None = None
    tests_csv: Path | None = None
    feedback: list[Path] = field(default_factory=list)

    def score(self, student: str, assignment: str) -> float:
        """The autograded score of one submission (KeyError if it was not in the batch)."""
        for row in self.rows:
            if row["student"] == student and row["assignment"] == assignment:
                return row["auto_score"]
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
          names: list[str] | None = None, source_dir: Path | None = None) -> GradeResult:
    """Autograde every submission under ``submissions`` (``<student>/<assignment>/<assignment>.ipynb``)
    with nbgrader and write the score tables and feedback under ``out`` (see the module docstring).

    Each (student, assignment) is graded in a course folder of its own (a copy of the sources and of a
    gradebook made once by ``generate_assignment``), by nbgrader's ``autograde`` (which restores the
    locked test cells from the source and runs the notebook in a fresh kernel, interrupting any cell
    that runs longer than ``timeout`` seconds) and ``generate_feedback``. A submission that nbgrader
    cannot grade at all (its kernel died, its folder vanished) gets ``status = "error: ..."`` and
    score 0; the batch goes on.

    Args:
        submissions: folder of student folders.
        out: output folder (created; earlier results for the same submissions are replaced).
        timeout: seconds allowed per cell, > 0.
        names: assignments to grade (default: every assignment found in the sources).
        source_dir: the instructor versions (default: ``find_assignments_dir()``).

    Raises:
        ValueError: ``submissions`` is not a folder, ``timeout`` <= 0, or ``names`` is unknown.
        RuntimeError: nbgrader is missing or cannot generate an assignment's gradebook entries.
    """
    _require_nbgrader()
    submissions = Path(submissions).resolve()
    if not submissions.is_dir():
        raise ValueError(f"submissions: {submissions} is not a folder (expected <student>/<assignment>/<assignment>.ipynb)")
    if not (isinstance(timeout, (int, float)) and timeout > 0):
        raise ValueError(f"timeout: seconds per cell must be > 0, got {timeout!r}")
    src = Path(source_dir) if source_dir is not None else find_assignments_dir()
    names = _names(names, src)
    out = Path(out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    pairs = _submissions(submissions, names)
    needed = sorted({a for _, a in pairs})
    result = GradeResult()
    with tempfile.TemporaryDirectory(prefix="rlbook-grade-") as tmp, _quiet_logs():
        template = Path(tmp) / "template"
        _course(template, src, needed)
        api = _api(template)
        for name in needed:
            _check(api.generate_assignment(name, force=True, create=True), f"generate_assignment {name}")
        points = {name: assignment_points(src / name / f"{name}.ipynb") for name in needed}
        for student, name in pairs:
            row, tests, feedback = _grade_one(Path(tmp) / "students" / f"{student}__{name}", template, submissions,
                                              student, name, points[name], timeout, out)
            result.rows.append(row)
            result.tests.extend(tests)
            if feedback is not None:
                result.feedback.append(feedback)
    result.scores_csv = _write_csv(out / "scores.csv", result.rows,
                                   ["student", "assignment", "auto_score", "auto_max", "manual_max", "status"])
    result.tests_csv = _write_csv(out / "scores_by_test.csv", result.tests,
                                  ["student", "assignment", "grade_id", "kind", "score", "max_score"])
    return result


def _grade_one(root: Path, template: Path, submissions: Path, student: str, name: str,
               points: dict[str, tuple[str, float]], timeout, out: Path):
    """Grade one submission in its own course folder ``root``; never raises for the submission's faults."""
    shutil.copytree(template / "source", root / "source")
    shutil.copy2(template / "gradebook.db", root / "gradebook.db")
    shutil.copytree(submissions / student / name, root / "submitted" / student / name,
                    ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    auto_max = sum(p for kind, p in points.values() if kind == "auto")
    manual_max = sum(p for kind, p in points.values() if kind == "manual")
    row = {"student": student, "assignment": name, "auto_score": 0.0, "auto_max": auto_max,
           "manual_max": manual_max, "status": "graded"}
    scores = {gid: 0.0 for gid in points}
    feedback = None
    try:
        api = _api(root, timeout)
        res = api.autograde(name, student, force=True, create=True)
        if not res.get("success"):
            reason = _first_line((res.get("error") or "") + "\n" + (res.get("log") or ""))
            row["status"] = "error: " + (reason or "autograde failed")
        else:
            scores.update(_read_scores(root, name, student))
            res = api.generate_feedback(name, student, force=True)
            html = root / "feedback" / student / name / f"{name}.html"
            if res.get("success") and html.is_file():
                dst = out / "feedback" / student / name
                if dst.exists():
                    shutil.rmtree(dst)
                shutil.copytree(root / "feedback" / student / name, dst)
                feedback = dst / f"{name}.html"
            graded_nb = root / "autograded" / student / name / f"{name}.ipynb"
            if graded_nb.is_file():
                (out / "autograded" / student / name).mkdir(parents=True, exist_ok=True)
                shutil.copy2(graded_nb, out / "autograded" / student / name / f"{name}.ipynb")
    except Exception as e:  # a submission must never stop the batch
        row["status"] = f"error: {type(e).__name__}: {_first_line(str(e))}"
    row["auto_score"] = sum(scores[g] for g, (kind, _) in points.items() if kind == "auto")
    tests = [{"student": student, "assignment": name, "grade_id": g, "kind": kind, "score": scores[g], "max_score": p}
             for g, (kind, p) in points.items()]
    return row, tests, feedback


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


def _write_csv(path: Path, rows: list[dict], columns: list[str]) -> Path:
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        for r in rows:
            writer.writerow({k: (f"{v:g}" if isinstance(v, float) else v) for k, v in r.items()})
    return path


# --- the command line ------------------------------------------------------------------------------------


def _cmd_list(args) -> int:
    src = find_assignments_dir()
    for name in list_assignments(src):
        pts = assignment_points(src / name / f"{name}.ipynb")
        auto = sum(p for k, p in pts.values() if k == "auto")
        manual = sum(p for k, p in pts.values() if k == "manual")
        print(f"{name:28s} {auto:5g} autograded + {manual:g} written points")
    return 0


def _cmd_release(args) -> int:
    for path in release(args.out, args.names or None):
        print(path)
    return 0


def _cmd_grade(args) -> int:
    result = grade(args.submissions, args.out, timeout=args.timeout, names=args.names or None)
    for row in result.rows:
        print(f"{row['student']:20s} {row['assignment']:28s} {row['auto_score']:6g} / {row['auto_max']:g}"
              f"  (+ {row['manual_max']:g} written, graded by hand)  {row['status']}")
    print(f"scores: {result.scores_csv}\nper test: {result.tests_csv}\nfeedback: {Path(args.out).resolve() / 'feedback'}")
    return 0 if all(r["status"] == "graded" for r in result.rows) else 1


def _cmd_validate(args) -> int:
    try:
        scores = validate(args.names or None, timeout=args.timeout)
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
    q.set_defaults(fn=_cmd_list)
    q = sp.add_parser("release", help="student versions, via nbgrader generate_assignment")
    q.add_argument("names", nargs="*", help="assignments (default: all)")
    q.add_argument("--out", default="assignments-course", help="course folder to write (default: %(default)s)")
    q.set_defaults(fn=_cmd_release)
    q = sp.add_parser("grade", help="autograde SUBMISSIONS/<student>/<assignment>/<assignment>.ipynb")
    q.add_argument("submissions", help="folder of student folders")
    q.add_argument("names", nargs="*", help="assignments (default: all)")
    q.add_argument("--out", default="graded", help="folder for scores.csv and feedback/ (default: %(default)s)")
    q.add_argument("--timeout", type=int, default=DEFAULT_TIMEOUT, help="seconds per cell (default: %(default)s)")
    q.set_defaults(fn=_cmd_grade)
    q = sp.add_parser("validate", help="the instructor solutions score full marks")
    q.add_argument("names", nargs="*", help="assignments (default: all)")
    q.add_argument("--timeout", type=int, default=DEFAULT_TIMEOUT, help="seconds per cell (default: %(default)s)")
    q.set_defaults(fn=_cmd_validate)
