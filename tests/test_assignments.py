"""The course assignments through nbgrader: released student versions and autograding.

Everything here goes through ``rlbook.assignments`` (nbgrader's generate_assignment, autograde and
generate_feedback); student code runs only in the kernels nbgrader starts. The batch fixtures grade,
in two nbgrader runs: the instructor versions (full marks), the untouched student versions (0, no
crash), submissions with one deliberate mistake each (they lose exactly the points of the tests aimed
at that mistake), and hostile submissions (an endless loop, ``sys.exit``, deleting every file in the
working folder, killing the kernel) that cost only their own points while the rest of the batch is
graded.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rlbook import assignments as A

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "assignments" / "source"
NAMES = A.list_assignments(SOURCE) if SOURCE.is_dir() else []

needs_nbgrader = pytest.mark.skipif(importlib.util.find_spec("nbgrader") is None,
                                    reason='nbgrader is not installed: pip install -e ".[assignments]"')

# One deliberate mistake per row: (assignment, grade_id of the solution cell, old text, new text, the
# autograded tests expected to lose all their points). The substitution is made in the instructor's
# solution cell, so the rest of the submission is correct.
MISTAKES = [
    # the plain mean reward where the score-weighted (variance-optimal) mean belongs
    ("part1_score_function", "optimal_baseline", "(score_sq_norms * returns).sum() / score_sq_norms.sum()",
     "returns.mean()", {"test_optimal_baseline", "test_optimal_baseline_minimises", "test_variance"}),
    # the clipped surrogate with max instead of min (the pessimistic bound turned optimistic)
    ("part2_gae_ppo", "clipped_surrogate", "torch.min(", "torch.max(",
     {"test_clipped_surrogate", "test_clipped_surrogate_gradient"}),
    # group advantages without the division by the group's standard deviation
    ("part3_grpo_loss", "group_advantages", "(centred / (spread + eps))", "centred",
     {"test_group_advantages", "test_group_advantages_scale"}),
]

# The hostile submissions: a line put at the top of the first solution cell of ``HOSTILE_IN``.
HOSTILE_IN = "part3_grpo_loss"
HOSTILE = {
    "loops_forever": "while True:\n    pass\n",
    "calls_exit": "import sys\nsys.exit(1)\n",
    "deletes_files": ("import os, shutil\nfor _f in os.listdir('.'):\n"
                      "    (shutil.rmtree if os.path.isdir(_f) else os.remove)(_f)\n"),
    "kills_kernel": "import os\nos._exit(1)\n",
}
HOSTILE_TIMEOUT = 20  # s per cell: the endless loop is interrupted after this


def _cells(nb_path: Path) -> list[dict]:
    return json.loads(Path(nb_path).read_text())["cells"]


def _meta(cell: dict) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {})


def _source(cell: dict) -> str:
    src = cell["source"]
    return "".join(src) if isinstance(src, list) else src


def _regions(text: str, begin: str, end: str) -> list[str]:
    return re.findall(rf"{begin}\n(.*?)\n[ \t]*{end}", text, flags=re.S)


def _secret_lines(nb_path: Path) -> list[str]:
    """Every line of the source's solution regions, hidden tests and model written answers, except
    lines that the source also shows students elsewhere (e.g. the same ``ratio = ...`` in a test)."""
    lines, public = [], set()
    for cell in _cells(nb_path):
        text, meta = _source(cell), _meta(cell)
        if cell["cell_type"] == "markdown" and meta.get("solution"):
            lines += [ln.strip() for ln in text.splitlines() if len(ln.strip()) >= 12]
            continue
        regions = _regions(text, r"### BEGIN SOLUTION", r"### END SOLUTION")
        regions += _regions(text, r"### BEGIN HIDDEN TESTS", r"### END HIDDEN TESTS")
        for region in regions:
            lines += [ln.strip() for ln in region.splitlines() if len(ln.strip()) >= 12]
            text = text.replace(region, "")
        public |= {ln.strip() for ln in text.splitlines()}
    return [ln for ln in lines if ln not in public]


def _set_cell(nb_path: Path, grade_id: str, edit) -> None:
    nb = json.loads(nb_path.read_text())
    hits = [c for c in nb["cells"] if _meta(c).get("grade_id") == grade_id]
    assert len(hits) == 1, f"{nb_path.name}: no single cell with grade_id {grade_id!r}"
    hits[0]["source"] = edit(_source(hits[0]))
    nb_path.write_text(json.dumps(nb, indent=1))


def _submit(subs: Path, student: str, name: str, notebook: Path) -> Path:
    dst = subs / student / name / f"{name}.ipynb"
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(notebook, dst)
    return dst


def _first_solution_cell(nb_path: Path) -> str:
    for cell in _cells(nb_path):
        meta = _meta(cell)
        if cell["cell_type"] == "code" and meta.get("solution") and not meta.get("grade"):
            return meta["grade_id"]
    raise AssertionError(f"{nb_path.name} has no autograded solution cell")


def _tests_of(nb_path: Path, function: str) -> set[str]:
    """The autograded test cells that call ``function``."""
    return {_meta(c)["grade_id"] for c in _cells(nb_path)
            if _meta(c).get("grade") and not _meta(c).get("solution") and re.search(rf"\b{function}\(", _source(c))}


# --- without nbgrader: the sources' structure ---------------------------------------------------------------


def test_there_is_one_assignment_per_part():
    assert [n.split("_")[0] for n in NAMES] == ["part1", "part2", "part3", "part4"], NAMES


@pytest.mark.parametrize("name", NAMES)
def test_source_structure(name):
    """Solution regions, autograded tests with points, a hidden test, a written answer; unique ids;
    tests never import the solution (they call the student's functions and rlbook's oracles)."""
    nb = SOURCE / name / f"{name}.ipynb"
    cells = _cells(nb)
    ids = [_meta(c)["grade_id"] for c in cells if _meta(c).get("grade_id")]
    assert len(ids) == len(set(ids)), f"duplicate grade_ids in {name}"
    points = A.assignment_points(nb)
    auto = {g: p for g, (k, p) in points.items() if k == "auto"}
    manual = {g: p for g, (k, p) in points.items() if k == "manual"}
    assert len(auto) >= 3 and manual, f"{name}: autograded tests {auto}, written answers {manual}"
    text = "\n".join(_source(c) for c in cells)
    assert "### BEGIN SOLUTION" in text and "### BEGIN HIDDEN TESTS" in text
    total = sum(auto.values()) + sum(manual.values())
    intro = next(_source(c) for c in cells if c["cell_type"] == "markdown")
    assert re.search(rf"\b{total:g} points\b", intro), f"{name}: the introduction should state the total, {total:g} points"
    for c in cells:
        if _meta(c).get("grade") and not _meta(c).get("solution"):
            assert "BEGIN SOLUTION" not in _source(c) and _meta(c).get("locked"), f"{name}: {_meta(c)['grade_id']}"


def test_assignment_points_reads_metadata_and_rejects_bad_cells(tmp_path):
    nb = {"cells": [{"cell_type": "code", "source": "", "metadata": {"nbgrader": {
        "grade": True, "grade_id": "test_a", "points": 2, "solution": False}}},
        {"cell_type": "markdown", "source": "", "metadata": {"nbgrader": {
            "grade": True, "grade_id": "answer_b", "points": 3, "solution": True}}},
        {"cell_type": "code", "source": "", "metadata": {}}]}
    path = tmp_path / "x.ipynb"
    path.write_text(json.dumps(nb))
    assert A.assignment_points(path) == {"test_a": ("auto", 2.0), "answer_b": ("manual", 3.0)}
    nb["cells"][0]["metadata"]["nbgrader"]["points"] = 0
    path.write_text(json.dumps(nb))
    with pytest.raises(ValueError, match="points > 0"):
        A.assignment_points(path)


def test_error_line_of_an_nbgrader_log():
    log = ("Traceback (most recent call last):\n  File ...\nnbclient.exceptions.DeadKernelError: Kernel died\n"
           "[ERROR] x\nnbgrader.converters.base.NbGraderException: Please see the above traceback\n")
    assert A._first_line(log) == "DeadKernelError: Kernel died"
    assert A._first_line("just text\nlast line") == "last line"


@needs_nbgrader
def test_grade_rejects_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="submissions"):
        A.grade(tmp_path / "missing", tmp_path / "out", source_dir=SOURCE)
    with pytest.raises(ValueError, match="timeout"):
        A.grade(tmp_path, tmp_path / "out", timeout=0, source_dir=SOURCE)
    with pytest.raises(ValueError, match="names"):
        A.grade(tmp_path, tmp_path / "out", names=["part9_nothing"], source_dir=SOURCE)
    with pytest.raises(ValueError, match="names"):
        A.release(tmp_path / "course", names=["part9_nothing"], source_dir=SOURCE)


def test_cli_lists_the_assignments():
    out = subprocess.run([sys.executable, "-m", "rlbook.cli", "assignments", "list"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    for name in NAMES:
        assert name in out.stdout


# --- release ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def released(tmp_path_factory):
    if importlib.util.find_spec("nbgrader") is None:
        pytest.skip('nbgrader is not installed: pip install -e ".[assignments]"')
    course = tmp_path_factory.mktemp("course")
    out = subprocess.run([sys.executable, "-m", "rlbook.cli", "assignments", "release", "--out", str(course)],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    paths = {Path(line).parent.name: Path(line) for line in out.stdout.split()}
    assert sorted(paths) == NAMES
    return paths


@pytest.mark.parametrize("name", NAMES)
def test_released_version_has_no_solution_text(released, name):
    student = released[name].read_text()
    student_lines = {ln.strip() for c in _cells(released[name]) for ln in _source(c).splitlines()}
    secrets = _secret_lines(SOURCE / name / f"{name}.ipynb")
    assert secrets, f"{name}: no solution regions found in the source"
    leaked = [s for s in secrets if s in student_lines]
    assert not leaked, f"{name}: solution text in the student version: {leaked[:5]}"
    assert "raise NotImplementedError()" in student and "YOUR ANSWER HERE" in student
    assert "BEGIN SOLUTION" not in student and "BEGIN HIDDEN TESTS" not in student
    # every cell nbgrader will check carries its checksum
    for cell in _cells(released[name]):
        if _meta(cell).get("grade") or _meta(cell).get("locked"):
            assert _meta(cell).get("checksum"), f"{name}: {_meta(cell).get('grade_id')} has no checksum"


def test_cli_grades_a_folder(released, tmp_path):
    """``rlbook assignments grade`` from the command line: the tables, the feedback, the summary."""
    name = HOSTILE_IN
    _submit(tmp_path / "submitted", "alice", name, released[name])
    out = subprocess.run([sys.executable, "-m", "rlbook.cli", "assignments", "grade", str(tmp_path / "submitted"),
                          name, "--out", str(tmp_path / "graded"), "--timeout", "60"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "alice" in out.stdout and "graded" in out.stdout
    rows = list(csv.DictReader((tmp_path / "graded" / "scores.csv").open()))
    assert [(r["student"], r["assignment"], float(r["auto_score"])) for r in rows] == [("alice", name, 0.0)]
    assert (tmp_path / "graded" / "feedback" / "alice" / name / f"{name}.html").is_file()


# --- grading: one batch ------------------------------------------------------------------------------------


def _mistake_notebook(tmp: Path, name: str, grade_id: str, old: str | None, new: str | None) -> Path:
    nb = tmp / f"{name}-{grade_id}.ipynb"
    shutil.copy2(SOURCE / name / f"{name}.ipynb", nb)
    if old is None:
        return nb
    def edit(text):
        assert old in text, f"{name}/{grade_id}: {old!r} is not in the solution cell"
        return text.replace(old, new)
    _set_cell(nb, grade_id, edit)
    return nb


@pytest.fixture(scope="module")
def batch(released, tmp_path_factory):
    """Grade, in one run: the instructor versions, the released versions, and the deliberate mistakes."""
    tmp = tmp_path_factory.mktemp("batch")
    subs = tmp / "submitted"
    for name in NAMES:
        _submit(subs, "instructor", name, SOURCE / name / f"{name}.ipynb")
        _submit(subs, "untouched", name, released[name])
    for i, (name, grade_id, old, new, _) in enumerate(MISTAKES):
        if name in NAMES and old is not None:
            _submit(subs, f"mistake{i}", name, _mistake_notebook(tmp, name, grade_id, old, new))
    return A.grade(subs, tmp / "graded", source_dir=SOURCE)


@pytest.mark.parametrize("name", NAMES)
def test_instructor_solution_scores_full_marks(batch, name):
    row = next(r for r in batch.rows if r["student"] == "instructor" and r["assignment"] == name)
    assert row["status"] == "graded", row
    assert batch.lost("instructor", name) == {}
    assert row["auto_score"] == row["auto_max"] > 0


@pytest.mark.parametrize("name", NAMES)
def test_untouched_student_version_scores_zero_and_still_runs(batch, name):
    row = next(r for r in batch.rows if r["student"] == "untouched" and r["assignment"] == name)
    assert row["status"] == "graded", row
    assert row["auto_score"] == 0
    executed = batch.scores_csv.parent / "autograded" / "untouched" / name / f"{name}.ipynb"
    cells = _cells(executed)
    errors = {o["ename"] for c in cells if c["cell_type"] == "code" for o in c.get("outputs", [])
              if o.get("output_type") == "error"}
    # only the missing implementations fail (and what depends on them), never the notebook's own code
    assert errors <= {"NotImplementedError", "AssertionError", "NameError", "TypeError"}, errors
    first_code = next(c for c in cells if c["cell_type"] == "code")
    assert not [o for o in first_code.get("outputs", []) if o.get("output_type") == "error"], "the setup cell failed"


@pytest.mark.parametrize("i", range(len(MISTAKES)))
def test_a_mistake_loses_exactly_its_tests_points(batch, i):
    name, grade_id, old, new, targeted = MISTAKES[i]
    if name not in NAMES or old is None:
        pytest.fail(f"mistake {i} ({name}/{grade_id}) is not specified")
    points = A.assignment_points(SOURCE / name / f"{name}.ipynb")
    lost = batch.lost(f"mistake{i}", name)
    assert lost == {g: points[g][1] for g in targeted}, f"{name}: {old!r} -> {new!r} lost {lost}"


def test_score_tables_and_feedback(batch):
    rows = list(csv.DictReader(batch.scores_csv.open()))
    assert {(r["student"], r["assignment"]) for r in rows} == {(r["student"], r["assignment"]) for r in batch.rows}
    assert all(float(r["auto_score"]) <= float(r["auto_max"]) for r in rows)
    tests = list(csv.DictReader(batch.tests_csv.open()))
    for r in rows:  # the per-test table adds up to the per-student table
        own = [t for t in tests if t["student"] == r["student"] and t["assignment"] == r["assignment"]]
        assert sum(float(t["score"]) for t in own if t["kind"] == "auto") == pytest.approx(float(r["auto_score"]))
        assert sum(float(t["max_score"]) for t in own if t["kind"] == "manual") == pytest.approx(float(r["manual_max"]))
    for name in NAMES:
        html = batch.scores_csv.parent / "feedback" / "instructor" / name / f"{name}.html"
        assert html.is_file() and "Score:" in html.read_text()


# --- grading: hostile submissions ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def hostile(released, tmp_path_factory):
    if HOSTILE_IN not in NAMES:
        pytest.fail(f"{HOSTILE_IN} is missing")
    tmp = tmp_path_factory.mktemp("hostile")
    subs = tmp / "submitted"
    source = SOURCE / HOSTILE_IN / f"{HOSTILE_IN}.ipynb"
    target = _first_solution_cell(source)
    for student, code in HOSTILE.items():
        nb = _submit(subs, student, HOSTILE_IN, source)
        _set_cell(nb, target, lambda text, code=code: code + text)
    _submit(subs, "zz_honest", HOSTILE_IN, source)  # graded after the others
    return A.grade(subs, tmp / "graded", timeout=HOSTILE_TIMEOUT, names=[HOSTILE_IN], source_dir=SOURCE), target


@pytest.mark.parametrize("student", ["loops_forever", "calls_exit"])
def test_loop_and_exit_cost_only_the_broken_cell(hostile, student):
    result, target = hostile
    row = next(r for r in result.rows if r["student"] == student)
    assert row["status"] == "graded", row
    expected = _tests_of(SOURCE / HOSTILE_IN / f"{HOSTILE_IN}.ipynb", target)
    assert expected, f"no test calls {target}()"
    assert set(result.lost(student, HOSTILE_IN)) == expected


def test_deleting_files_is_contained(hostile):
    result, _ = hostile
    row = next(r for r in result.rows if r["student"] == "deletes_files")
    assert row["status"] == "graded" and result.lost("deletes_files", HOSTILE_IN) == {}


def test_a_dead_kernel_scores_zero_and_the_batch_goes_on(hostile):
    result, _ = hostile
    row = next(r for r in result.rows if r["student"] == "kills_kernel")
    assert row["status"].startswith("error") and "Kernel died" in row["status"], row
    assert row["auto_score"] == 0
    honest = next(r for r in result.rows if r["student"] == "zz_honest")
    assert honest["status"] == "graded" and honest["auto_score"] == honest["auto_max"]
