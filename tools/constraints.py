"""The tested versions of every dependency: write ``constraints.txt`` from an environment, or check it.

``constraints.txt`` pins the exact release of every package the book installs (its dependencies, the
extras' and theirs) to the versions CI last passed with, and README's install uses it
(``pip install -c constraints.txt -e ".[test]"``), so a reader gets the releases the stored outputs
and the chapters' claims were checked against. A dependency's new release can change a number
(numpy's sums, transformers' model code, gymnasium's environments): the constraints keep it out until
it has been checked.

    python tools/constraints.py write      # pin what this environment has (run in a fresh venv that passed)
    python tools/constraints.py check      # constraints.txt pins every requirement of pyproject.toml

Releasing new constraints is ``tools/check_newest.sh``: a fresh virtual environment with the newest
release of everything (no constraints), ``rlbook run`` and ``pytest`` there, and only if both pass,
``write`` from that environment.
"""

from __future__ import annotations

import argparse
import datetime
import platform
import re
import sys
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONSTRAINTS = ROOT / "constraints.txt"
SKIP = {"rlbook", "pip", "setuptools", "wheel"}  # the project itself, and the installer's own tools


def canonical(name: str) -> str:
    """PEP 503 normalised name: lower case, runs of ``-_.`` as one ``-``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_names(pyproject: Path = ROOT / "pyproject.toml") -> set[str]:
    """Canonical names of every requirement in ``pyproject.toml``: dependencies and all extras (not rlbook's own)."""
    import tomllib

    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    lines = list(project["dependencies"]) + [r for reqs in project["optional-dependencies"].values() for r in reqs]
    names = {canonical(re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", line).group(0)) for line in lines}
    return names - {"rlbook"}


def read_pins(path: Path = CONSTRAINTS) -> dict[str, str]:
    """``{canonical name: version}`` of ``path``'s ``name==version`` lines (comments and blanks skipped).

    Raises:
        ValueError: a line that is not ``name==version``, or a name pinned twice.
    """
    pins: dict[str, str] = {}
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9.+!_-]+)", line)
        if m is None:
            raise ValueError(f"{path.name}:{number}: expected name==version; got {raw!r}")
        name = canonical(m.group(1))
        if name in pins:
            raise ValueError(f"{path.name}:{number}: {name} is pinned twice")
        pins[name] = m.group(2)
    return pins


def installed() -> dict[str, str]:
    """``{canonical name: version}`` of every distribution installed in this environment's site-packages (the
    project and pip's own tools left out). Only site-packages is read: a package's vendored copies (setuptools
    ships ``packaging``, ``zipp``, ... in ``setuptools/_vendor``, which lands on ``sys.path`` once something
    imports it) are not what pip installed and would shadow the real versions."""
    import site

    user = [site.getusersitepackages()] if site.ENABLE_USER_SITE else []  # off inside a virtual environment
    paths = [p for p in [*site.getsitepackages(), *user] if Path(p).is_dir()]
    found = {}
    for dist in metadata.distributions(path=paths):
        name = dist.metadata["Name"]
        if name and canonical(name) not in SKIP:
            found[canonical(name)] = dist.version
    return found


def write(path: Path = CONSTRAINTS) -> None:
    """Pin this environment's distributions into ``path`` (public versions: a local label such as ``+cpu`` is dropped)."""
    pins = installed()
    missing = sorted(requirement_names() - set(pins))
    if missing:
        raise SystemExit(f"not installed here, so not pinned: {', '.join(missing)} (install the test and trl extras first)")
    header = [
        "# The releases CI last passed with: README's install uses them (pip install -c constraints.txt ...).",
        f"# Written by `python tools/constraints.py write` on {datetime.date.today().isoformat()}, "
        f"Python {platform.python_version()}, {platform.system()} {platform.machine()};",
        "# release new ones with tools/check_newest.sh (the newest releases must pass rlbook run and pytest first).",
    ]
    body = [f"{name}=={version.split('+', 1)[0]}" for name, version in sorted(pins.items())]
    path.write_text("\n".join(header + body) + "\n", encoding="utf-8")
    print(f"wrote {len(body)} pins to {path}")


def check(path: Path = CONSTRAINTS) -> list[str]:
    """The problems with ``path``: requirements of pyproject.toml it does not pin (empty when it is complete)."""
    pins = read_pins(path)
    return [f"{name} is a requirement of pyproject.toml but {path.name} does not pin it"
            for name in sorted(requirement_names() - set(pins))]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["write", "check"])
    args = parser.parse_args(argv)
    if args.command == "write":
        write()
        return 0
    problems = check()
    print("\n".join(problems) or f"{CONSTRAINTS.name}: every requirement of pyproject.toml is pinned")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
