"""The wheel carries the book: built from this tree, installed away from it, its commands work.

A non-editable install (``pip install .``) must run ``rlbook list/run``, ``rlbook book``,
``rlbook explore`` and ``rlbook assignments`` from any folder, so the wheel carries the chapters, the
site configuration and the assignments' released student versions (setup.py copies them into
``rlbook/_bundled/``). The test builds the wheel from a copy of the working tree, unpacks it into a
fresh folder, and runs the installed copy (not this checkout's editable one) from an unrelated working
directory. Neither the wheel nor the sdist may carry a solution or a hidden test: they are built and
searched for every line of the instructor versions' solution regions, hidden tests and model answers.
"""

import json
import shutil
import subprocess
import sys
import tarfile
import textwrap
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _tree_files() -> list[str]:
    try:
        out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, check=True,
                             capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("needs a git checkout to know which files belong to the source tree")
    return [f for f in out.splitlines() if (ROOT / f).is_file()]


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    """A copy of the working tree's files (tracked and untracked, not ignored)."""
    src = tmp_path_factory.mktemp("src")
    for rel in _tree_files():
        dest = src / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, dest)
    return src


@pytest.fixture(scope="module")
def wheel(tree, tmp_path_factory) -> Path:
    src = tree
    dist = tmp_path_factory.mktemp("dist")
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                           "-w", str(dist), str(src)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (whl,) = dist.glob("rlbook-*.whl")
    return whl


def test_wheel_carries_the_chapters_the_site_and_the_assignments(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    chapters = sorted(p.name for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    assert chapters, "no chapters in notebooks/"
    for ch in chapters:
        assert f"rlbook/_bundled/notebooks/{ch}" in names
    for rel in ["_config.yml", "_toc.yml", "intro.md", "glossary.md", "bibliography.md", "references.bib",
                "_ext/rlbook_site.py", "_assets/rlbook-mathjax2-shim.js", "_assets/vendor/require.js",
                "_assets/vendor/embed-amd.js"]:
        assert f"rlbook/_bundled/book/{rel}" in names, rel
    students = sorted((ROOT / "assignments" / "student").glob("*/*.ipynb"))
    assert len(students) == len(list((ROOT / "assignments" / "source").glob("*/*.ipynb"))) > 0
    for nb in students:
        assert f"rlbook/_bundled/assignments/student/{nb.parent.name}/{nb.name}" in names
    assert not any("/_build/" in n for n in names), "a build folder leaked into the wheel"
    assert "rlbook/data/grpo_variants.json" in names
    # the capstone assignment's fixed supervised start, which its grading kernel loads from the package
    for rel in ("config.json", "model.safetensors", "rlbook_metadata.json"):
        assert f"rlbook/data/grpo_start/{rel}" in names, rel


def test_installed_wheel_runs_from_any_folder(wheel, tmp_path):
    target = tmp_path / "site-packages"
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target),
                           str(wheel)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    script = textwrap.dedent(f"""
        import sys
        # use the unpacked wheel, not this checkout's editable install
        sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in type(f).__module__.lower()
                            and "editable" not in getattr(f, "__name__", "").lower()]
        sys.path.insert(0, {str(target)!r})
        import rlbook, rlbook.app.cli, rlbook.app.site
        assert rlbook.__file__.startswith({str(target)!r}), rlbook.__file__
        chapters = rlbook.app.cli.list_chapters()
        assert len(chapters) == {len(list((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")))}, chapters
        assert "_bundled" in str(chapters[0].path)
        assert "_bundled" in str(rlbook.app.site.find_book_dir())
        html = rlbook.app.site.build_book(quiet=True)
        assert (html / "index.html").is_file() and (html / "09_grpo.html").is_file(), html
        assert str(html).startswith({str(elsewhere)!r}), html
        served = []  # `rlbook book --serve --no-build` right after `rlbook book` serves that build
        rlbook.app.site.serve = lambda path, port: served.append(path)
        assert rlbook.app.cli.main(["book", "--serve", "--no-build"]) == 0 and served == [html], served
        import rlbook.app.assignments
        try:  # the instructor versions are not in the package: nothing finds them
            found = rlbook.app.assignments.find_assignments_dir()
        except FileNotFoundError:
            found = None
        assert found is None, found
        assert "_bundled" in str(rlbook.app.assignments.student_assignments_dir())
        for sub in (["list"], ["book", "--help"], ["explore", "--help"], ["assignments", "--help"], ["assignments", "list"]):
            try:
                code = rlbook.app.cli.main(sub)
            except SystemExit as stop:  # argparse's --help
                code = stop.code
            assert code == 0, (sub, code)
        print("WHEEL-OK")
    """)
    proc = subprocess.run([sys.executable, "-c", script], cwd=elsewhere, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0 and "WHEEL-OK" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "01  1. The reinforcement-learning objective" in proc.stdout
    assert "part1_score_function" in proc.stdout and "13 autograded" in proc.stdout


# --- no solution or hidden test in what students install ---------------------------------------------------


@pytest.fixture(scope="module")
def sdist(tree, tmp_path_factory) -> Path:
    pytest.importorskip("build", reason='the sdist is built with pypa/build: pip install -e ".[test]"')
    dist = tmp_path_factory.mktemp("sdist")
    proc = subprocess.run([sys.executable, "-m", "build", "--sdist", "--no-isolation", "--outdir", str(dist), str(tree)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (tgz,) = dist.glob("rlbook-*.tar.gz")
    return tgz


def _package_files(path: Path) -> dict[str, bytes]:
    if path.suffix == ".whl":
        with zipfile.ZipFile(path) as z:
            return {n: z.read(n) for n in z.namelist() if not n.endswith("/")}
    with tarfile.open(path) as t:
        return {m.name.split("/", 1)[1]: t.extractfile(m).read() for m in t.getmembers() if m.isfile()}


def _secrets() -> dict[str, list[str]]:
    sys.path.insert(0, str(Path(__file__).parent))
    from test_assignments import _secret_lines

    return {nb.stem: _secret_lines(nb) for nb in sorted((ROOT / "assignments" / "source").glob("*/*.ipynb"))}


def _assert_no_solutions(files: dict[str, bytes], what: str) -> None:
    secrets = _secrets()
    assert secrets and all(secrets.values()), "the instructor versions have no solution regions to look for"
    assert not [n for n in files if "assignments/source/" in n or "assignments/src/" in n], f"{what}: instructor sources"
    graded = 0
    for name, data in files.items():
        if not name.endswith(".ipynb"):
            continue
        cells = json.loads(data)["cells"]
        if not any("nbgrader" in c.get("metadata", {}) for c in cells):
            continue  # a chapter
        graded += 1
        text = ["".join(c["source"]) if isinstance(c["source"], list) else c["source"] for c in cells]
        lines = {ln.strip() for t in text for ln in t.splitlines()}
        for marker in ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "END HIDDEN TESTS"):
            assert not any(marker in t for t in text), f"{what}: {name} holds a {marker!r} region"
        stem = Path(name).stem
        assert stem in secrets, f"{what}: {name} is not one of the assignments"
        leaked = [s for s in secrets[stem] if s in lines]
        assert not leaked, f"{what}: {name} holds solution or hidden-test lines: {leaked[:3]}"
    assert graded == len(secrets), f"{what}: {graded} assignment notebooks, expected the {len(secrets)} student versions"


def test_wheel_carries_no_solution_or_hidden_test(wheel):
    _assert_no_solutions(_package_files(wheel), "the wheel")


def test_sdist_carries_no_solution_or_hidden_test(sdist):
    files = _package_files(sdist)
    assert "assignments/student/part1_score_function/part1_score_function.ipynb" in files
    _assert_no_solutions(files, "the sdist")


def test_student_versions_in_the_repository_are_current(tmp_path):
    """assignments/student is what `tools/build_assignments.py` makes from assignments/source now."""
    pytest.importorskip("nbgrader", reason='nbgrader is not installed: pip install -e ".[assignments]"')
    from rlbook.app.assignments import release

    source = ROOT / "assignments" / "source"
    for nb in release(tmp_path / "course", source_dir=source):
        committed = ROOT / "assignments" / "student" / nb.parent.name / nb.name
        assert committed.is_file(), f"{committed} is missing: python tools/build_assignments.py"
        fresh, kept = json.loads(nb.read_text())["cells"], json.loads(committed.read_text())["cells"]
        assert [(c["cell_type"], c["source"]) for c in fresh] == [(c["cell_type"], c["source"]) for c in kept], (
            f"{committed} is stale: python tools/build_assignments.py")
