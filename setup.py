"""Packaging hook: the wheel carries the book, not only the library.

Everything else is in pyproject.toml. A regular (non-editable) build copies the chapters
(``notebooks/*.ipynb``), the site configuration (``book/``, without its build folder) and the
assignments' released student versions (``assignments/student/``: no solutions, no hidden tests) into
``rlbook/_bundled/``, so ``rlbook run``, ``rlbook book``, ``rlbook explore`` and
``rlbook assignments list`` work from any folder after ``pip install rlbook``. The instructor versions
(``assignments/source/``) are never packaged: ``rlbook assignments release/grade/validate`` take their
path. An editable install (``pip install -e .``) copies nothing: the commands find the clone's own
folders. ``tests/test_packaging.py`` builds the wheel and the sdist and checks what they carry.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
_IGNORE = shutil.ignore_patterns("_build", "__pycache__", "*.pyc", ".ipynb_checkpoints", "release", "autograded",
                                 "feedback", "submitted", "gradebook.db")


class BuildPyWithBook(build_py):
    """``build_py`` that also copies the chapters, the site and the student assignments into the package."""

    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return
        bundle = Path(self.build_lib) / "rlbook" / "_bundled"
        if bundle.exists():
            shutil.rmtree(bundle)
        (bundle / "notebooks").mkdir(parents=True)
        for nb in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
            shutil.copy2(nb, bundle / "notebooks" / nb.name)
        shutil.copytree(ROOT / "book", bundle / "book", ignore=_IGNORE)
        if (ROOT / "assignments" / "student").is_dir():  # student versions only, never assignments/source
            shutil.copytree(ROOT / "assignments" / "student", bundle / "assignments" / "student", ignore=_IGNORE)


setup(cmdclass={"build_py": BuildPyWithBook})
