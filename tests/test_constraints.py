"""``constraints.txt``: every requirement of pyproject.toml is pinned, and README's install uses the file."""

import importlib.util
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytest.importorskip("tomllib")  # Python ≥ 3.11: the tool reads pyproject.toml with it


def _tool():
    spec = importlib.util.spec_from_file_location("constraints_tool", ROOT / "tools" / "constraints.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("constraints_tool", module)
    spec.loader.exec_module(module)
    return module


def test_every_requirement_is_pinned():
    tool = _tool()
    assert tool.check() == []
    pins = tool.read_pins()
    # the packages whose releases move the book's numbers are among them
    for name in ("torch", "numpy", "scipy", "transformers", "gymnasium", "matplotlib", "nbval", "trl"):
        assert name in pins, name


def test_the_installed_releases_are_the_pinned_ones():
    """The environment running the suite (CI's, made by README's install) has exactly the pinned releases."""
    tool = _tool()
    pins, have = tool.read_pins(), tool.installed()
    wrong = {name: (have[name].split("+")[0], version) for name, version in pins.items()
             if name in have and have[name].split("+")[0] != version}
    if wrong and "CI" not in __import__("os").environ:
        pytest.skip(f"this environment was not installed with constraints.txt (differs in {sorted(wrong)[:5]} ...)")
    assert wrong == {}


def test_a_missing_pin_is_reported(tmp_path):
    tool = _tool()
    lines = [line for line in (ROOT / "constraints.txt").read_text().splitlines() if not line.startswith("numpy==")]
    path = tmp_path / "constraints.txt"
    path.write_text("\n".join(lines) + "\n")
    assert tool.check(path) == ["numpy is a requirement of pyproject.toml but constraints.txt does not pin it"]


@pytest.mark.parametrize("line, message", [("numpy>=2", "expected name==version"), ("numpy==2.4.6\nNumPy==2.4.5", "pinned twice")])
def test_a_malformed_file_is_refused(tmp_path, line, message):
    path = tmp_path / "constraints.txt"
    path.write_text(line + "\n")
    with pytest.raises(ValueError, match=message):
        _tool().read_pins(path)


def test_readme_install_uses_the_constraints():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    installs = re.findall(r"^pip install [^\n]*-e \"\.\[[^\n]*$", readme, flags=re.M)
    assert installs, "README has no `pip install -e .[...]` line"
    for line in installs:
        assert "-c constraints.txt" in line, line
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "-c constraints.txt" in ci and "rlbook run" in ci
