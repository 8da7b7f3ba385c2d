"""The wheel carries the book: built from this tree, installed away from it, its commands work.

A non-editable install (``pip install .``) must run ``rlbook list/run``, ``rlbook book``,
``rlbook explore`` and ``rlbook assignments`` from any folder, so the wheel carries the chapters, the
site configuration and the assignments' sources (setup.py copies them into ``rlbook/_bundled/``).
The test builds the wheel from a copy of the working tree, unpacks it into a fresh folder, and runs
the installed copy (not this checkout's editable one) from an unrelated working directory.
"""

import shutil
import subprocess
import sys
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
def wheel(tmp_path_factory) -> Path:
    src = tmp_path_factory.mktemp("src")
    for rel in _tree_files():
        dest = src / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, dest)
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
    sources = sorted((ROOT / "assignments" / "source").glob("*/*.ipynb"))
    for nb in sources:
        assert f"rlbook/_bundled/assignments/source/{nb.parent.name}/{nb.name}" in names
    assert not any("/_build/" in n for n in names), "a build folder leaked into the wheel"
    assert "rlbook/data/grpo_variants.json" in names


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
        import rlbook, rlbook.cli, rlbook.site
        assert rlbook.__file__.startswith({str(target)!r}), rlbook.__file__
        chapters = rlbook.cli.list_chapters()
        assert len(chapters) == {len(list((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")))}, chapters
        assert "_bundled" in str(chapters[0].path)
        assert "_bundled" in str(rlbook.site.find_book_dir())
        html = rlbook.site.build_book(quiet=True)
        assert (html / "index.html").is_file() and (html / "09_grpo.html").is_file(), html
        assert str(html).startswith({str(elsewhere)!r}), html
        for sub in (["list"], ["book", "--help"], ["explore", "--help"], ["assignments", "--help"]):
            try:
                code = rlbook.cli.main(sub)
            except SystemExit as stop:  # argparse's --help
                code = stop.code
            assert code == 0, (sub, code)
        print("WHEEL-OK")
    """)
    proc = subprocess.run([sys.executable, "-c", script], cwd=elsewhere, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0 and "WHEEL-OK" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "01  1. The reinforcement-learning objective" in proc.stdout
