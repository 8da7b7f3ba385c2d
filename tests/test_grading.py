"""rlbook.app.grading without a kernel: what a student's cell may run, and the sandbox's command line.

The end-to-end attacks (graded through nbgrader in the sandbox) are in tests/test_assignments.py;
these check each rule of the reduction to definitions on its own, quickly, and that every instructor
solution passes it untouched.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from rlbook.app import grading as G

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted((ROOT / "assignments" / "source").glob("*/*.ipynb"))


def _cells(nb):
    for c in json.loads(nb.read_text())["cells"]:
        meta = c.get("metadata", {}).get("nbgrader", {})
        src = "".join(c["source"]) if isinstance(c["source"], list) else c["source"]
        yield c["cell_type"], meta, src


def _protected(nb) -> set[str]:
    names = set()
    for kind, meta, src in _cells(nb):
        if kind == "code" and meta.get("locked") and not meta.get("solution"):
            names |= G._bound_names(ast.parse(src))
    return names


@pytest.mark.parametrize("nb", SOURCES, ids=[p.stem for p in SOURCES])
def test_every_instructor_solution_runs_untouched(nb):
    protected = _protected(nb)
    solutions = [(src, meta.get("grade")) for kind, meta, src in _cells(nb) if kind == "code" and meta.get("solution")]
    assert solutions
    for src, by_hand in solutions:
        code, flags, dropped = G.restrict(src, protected)
        assert code is not None and flags == [], (src[:200], flags)
        if by_hand:  # a code answer graded by hand (the capstone's ablation): its runs are left out at grading
            continue
        assert dropped == [], (src[:200], dropped)
        assert ast.dump(ast.parse(code)) == ast.dump(ast.parse(src)), "a definition was left out"


PROTECTED = {"torch", "rl", "bandit", "K", "REFERENCE", "train", "random_batch"}

# each: a cell that must not run at all, and a word of the reason given
REFUSED = [
    ("get_ipython().input_transformers_cleanup.append(lambda lines: lines)\ndef f(x):\n    return x", "get_ipython"),
    ("def k3(a, b):\n    return a\nrl.kl_k3 = k3", "assigns an attribute"),
    ("def f(x):\n    rl.kl_k3 = f\n    return x", "assigns an attribute"),
    ("torch.testing.assert_close = lambda *a, **k: None", "testing"),
    ("def f(x):\n    t = torch\n    t.testing.assert_close = None", "testing"),
    ("import torch.testing as tt", "imports torch.testing"),
    ("import os", "imports os"),
    ("import subprocess\ndef f():\n    pass", "imports subprocess"),
    ("from rlbook import kl_k3", "imports rlbook"),
    ("def k3(a, b):\n    return rl.kl_k3(a, b)", "library's implementation"),
    ("def f(x):\n    g = rl\n    return g.softmax_score(x, x)", "library's implementation"),
    ("variant_loss = REFERENCE[VARIANT]", "REFERENCE"),
    ("def f(*a):\n    return REFERENCE['cispo'](*a)", "REFERENCE"),
    ("def f(x):\n    return getattr(rl, 'kl_' + 'k3')(x, x)", "getattr"),
    ("def f():\n    return ().__class__.__bases__[0].__subclasses__()", "private attribute"),
    ("def f():\n    return __builtins__", "private name"),
    ("def f():\n    return torch.serialization.os.system('ls')", "serialization"),
    ("def f(x):\n    exec('rl.kl_k3 = None')", "exec"),
    ("def f(x):\n    return eval('1')", "eval"),
    ("def f():\n    return globals()", "globals"),
    ("def f():\n    global K\n    K = 0", "global"),
    ("@print\ndef f():\n    pass", "decorates"),
    ("def f(x=setattr(rl, 'kl_k3', None)):\n    pass", "setattr"),
    ("def f(x) -> bandit.reward_means.fill_(0.9):\n    pass", "in place"),
    ("def f():\n    bandit.reward_means[:] = 0.9", "in place"),
    ("def f():\n    bandit.reward_means.fill_(0.9)", "in place"),
    ("class M(type):\n    pass\nclass A(metaclass=M):\n    pass", "keywords"),
    ("class A:\n    x = print('runs at definition')", "body runs code"),
    ("def f():\n    return open('../../../source/x').read()", "open"),
    ("def f(x):\n    return x.f_back.f_globals", "f_back"),
    # changing the test's inputs so that a reference computed afterwards agrees with a wrong answer
    ("def k3(log_probs, ref_log_probs):\n    ref_log_probs.copy_(log_probs)\n    return log_probs * 0", "argument ref_log_probs"),
    ("def f(x, y):\n    y[:] = x\n    return x", "argument y"),
    ("def f(x, y):\n    y += x\n    return x", "argument y"),
    ("def f(x, y):\n    torch.mul(x, 0, out=y)\n    return x", "out="),
    ("def f(b):\n    b['rewards'] = b['rewards'] * 0", "argument b"),
]


@pytest.mark.parametrize("src,why", REFUSED, ids=[str(i) for i in range(len(REFUSED))])
def test_a_cell_that_reaches_for_the_grading_machinery_is_not_run(src, why):
    code, flags, _ = G.restrict(src, PROTECTED)
    assert code is None, src
    assert any(why in f for f in flags), flags


def test_only_definitions_imports_and_constants_run():
    src = ("import math\nimport torch\nEPS = 1e-8\nSIZES = (1, 2)\n"
           "def f(x, eps=EPS):\n    y = x.clone()\n    y[0] = 1\n    y.add_(1)\n    x = x * 2\n    x[0] = 0\n    return y\n"
           "print(f(torch.zeros(3)))\nx = f(torch.ones(2))\nfor i in range(3):\n    pass\n"
           "class Net(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
           "        self.fc = torch.nn.Linear(2, 2)\n")
    code, flags, dropped = G.restrict(src, PROTECTED)
    assert flags == [] and len(dropped) == 3, (flags, dropped)
    tree = ast.parse(code)
    assert [type(s).__name__ for s in tree.body] == ["Import", "Import", "Assign", "Assign", "FunctionDef", "ClassDef"]


def test_redefining_the_instructors_names_is_left_out_and_flagged():
    code, flags, _ = G.restrict("def train(*a):\n    return {'reward': [1.0]}\nK = 2\ndef mine():\n    pass", PROTECTED)
    assert code is not None and "def mine" in code and "train" not in code and "K = 2" not in code
    assert len(flags) == 2 and all("redefines" in f for f in flags), flags


def test_a_syntax_error_runs_as_a_syntax_error():
    code, flags, _ = G.restrict("def f(:\n", set())
    assert code.startswith("raise SyntaxError") and flags == []


def test_the_sandbox_command_isolates_and_limits(tmp_path, monkeypatch):
    monkeypatch.setattr(G.os, "geteuid", lambda: 1000)  # an unprivileged grader (root: the next test)
    sb = G.Sandbox(memory_mb=1000, cpu_s=30, file_mb=8, processes=50)
    if sb.executable() is None:
        pytest.skip("bubblewrap is not installed (apt-get install bubblewrap)")
    cmd = sb.command(["python", "-c", "1"], "/submission", [str(tmp_path / "data.csv")], str(tmp_path / "ipc"), {"A": "1"})
    assert cmd[0] == "prlimit" and f"--as={1000 << 20}" in cmd and "--cpu=30" in cmd and f"--fsize={8 << 20}" in cmd
    assert "--nproc=50" in cmd
    for flag in ("--unshare-all", "--die-with-parent", "--clearenv", "--new-session"):
        assert flag in cmd
    i = cmd.index("--remount-ro")
    assert cmd[i + 1] == "/"
    assert ["--ro-bind", str(tmp_path / "data.csv"), "/submission/data.csv"] == cmd[cmd.index(str(tmp_path / "data.csv")) - 1:][:3]
    binds = [cmd[k + 1] for k, a in enumerate(cmd) if a in ("--bind", "--ro-bind")]
    assert str(ROOT) not in binds and str(ROOT / "assignments") not in binds, "the repository is not visible"
    assert cmd[cmd.index("--") + 1:] == ["python", "-c", "1"]
    # the tmpfs on /tmp comes before every read-only bind, so a virtual environment or checkout under
    # /tmp (as in a CI clone) is bound on top of it rather than hidden by it
    tmp_at = [k for k, a in enumerate(cmd) if a == "--tmpfs" and cmd[k + 1] == "/tmp"][0]
    assert all(k > tmp_at for k, a in enumerate(cmd) if a == "--ro-bind")


def test_as_root_the_kernel_runs_under_an_unprivileged_uid(tmp_path, monkeypatch):
    """Linux ignores RLIMIT_NPROC for root, and for a user namespace's uid that maps to root: a grader
    running as root starts bwrap without a user namespace and drops to a uid of the grading process's
    own (setpriv, no capabilities, no new privileges), so the process limit binds; the folders bwrap
    makes on the way to the bound paths are traversable by it, and its tmpfs folders writable."""
    monkeypatch.setattr(G.os, "geteuid", lambda: 0)
    sb = G.Sandbox(processes=50)
    if sb.executable() is None:
        pytest.skip("bubblewrap is not installed (apt-get install bubblewrap)")
    uid = sb.run_as()
    assert uid == 2_000_000 + G.os.getpid() % 1_000_000
    cmd = sb.command(["python", "-c", "1"], "/submission", [], str(tmp_path / "ipc"), {})
    assert "--nproc=50" in cmd and "--unshare-user" not in cmd and "--unshare-all" not in cmd
    for flag in ("--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--die-with-parent", "--clearenv"):
        assert flag in cmd
    caps = [cmd[k + 1] for k, a in enumerate(cmd) if a == "--cap-add"]
    assert cmd[cmd.index("--cap-drop") + 1] == "ALL" and sorted(caps) == ["CAP_SETGID", "CAP_SETPCAP", "CAP_SETUID"]
    inner = cmd[cmd.index("--") + 1:]
    assert inner[0] == "setpriv" and f"--reuid={uid}" in inner and f"--regid={uid}" in inner
    for flag in ("--clear-groups", "--no-new-privs", "--inh-caps=-all", "--bounding-set=-all"):
        assert flag in inner
    assert inner[inner.index("--") + 1:] == ["python", "-c", "1"]
    for k, a in enumerate(cmd):
        if a == "--tmpfs":
            assert cmd[k - 4:k - 2] == ["--perms", "1777"], cmd[k - 4:k + 2]
    # a Python environment inside a clone under /tmp (as in CI): every folder on the way to it, under
    # /tmp too, is made 0755 before the bind (bwrap would make /tmp/<clone> 0700, closed to `uid`)
    monkeypatch.setattr(sb, "read_only_paths", lambda: ["/usr", "/tmp/ci-clone/.venv-ci", "/root/.pyenv/versions/3.11"])
    cmd = sb.command(["python", "-c", "1"], "/submission", [], str(tmp_path / "ipc"), {})
    made = [cmd[k + 1] for k, a in enumerate(cmd) if a == "--dir"]
    for folder in ("/tmp/ci-clone", "/root", "/root/.pyenv", "/root/.pyenv/versions"):
        k = cmd.index(folder)
        assert folder in made and cmd[k - 3:k] == ["--perms", "0755", "--dir"], folder
        bind = cmd.index("--ro-bind")
        assert k < bind
    monkeypatch.setattr(G.os, "geteuid", lambda: 1000)
    assert sb.run_as() is None


def test_the_grading_seed_replaces_its_name_only():
    text = "g = torch.Generator().manual_seed(GRADING_SEED + 1)\nMY_GRADING_SEED_X = 1\nGRADING_SEED_2 = 3"
    assert G._with_seed(text, 12345) == ("g = torch.Generator().manual_seed(12345 + 1)\nMY_GRADING_SEED_X = 1\n"
                                         "GRADING_SEED_2 = 3")
