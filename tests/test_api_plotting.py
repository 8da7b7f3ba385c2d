"""The flat public API: every exported name is documented; plotting helpers return their axes."""

import inspect

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pytest

import rlbook as rl
from rlbook.history import History


def test_every_public_name_is_documented_and_unique():
    assert len(rl.__all__) == len(set(rl.__all__))
    undocumented = [n for n in rl.__all__ if (inspect.isfunction(getattr(rl, n)) or inspect.isclass(getattr(rl, n)))
                    and not (getattr(rl, n).__doc__ or "").strip()]
    assert undocumented == []


def test_lazy_submodules():
    assert rl.reference.__name__ == "rlbook.reference"
    with pytest.raises(AttributeError, match="no attribute"):
        rl.not_a_thing


def _fresh_python(code: str) -> str:
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_import_rlbook_alone_imports_no_library_module_and_the_first_name_imports_them_all():
    """`import rlbook` (as the `rlbook` command does) loads neither torch nor numpy; the first public
    name loads every module, in the book's order, and the package then looks as it always did."""
    out = _fresh_python(
        "import sys, rlbook as rl\n"
        "print(sorted(m for m in ('torch', 'numpy', 'rlbook.advantages') if m in sys.modules))\n"
        "gae = rl.gae\n"
        "print(gae.__module__, 'torch' in sys.modules, len(rl.__all__) == len(set(rl.__all__)) > 150)\n"
        "print(all(getattr(rl, n) is getattr(sys.modules[getattr(rl, n).__module__], n, getattr(rl, n)) for n in rl.__all__\n"
        "          if callable(getattr(rl, n)) and hasattr(getattr(rl, n), '__module__')))\n"
        "print(rl.preferences.dpo_loss is rl.dpo_loss, 'gae' in dir(rl))\n")
    assert out.splitlines() == ["[]", "rlbook.advantages True True", "True", "True True"], out
    star = _fresh_python("from rlbook import *\nfrom rlbook import dpo_loss, _checks\nprint(gae.__name__, dpo_loss.__name__, _checks.__name__)")
    assert star.split() == ["gae", "dpo_loss", "rlbook._checks"], star


def test_the_command_imports_no_torch_until_it_runs_a_chapter():
    """`rlbook --help`, `rlbook list`, every subcommand's help and the app `rlbook explore` writes
    before it starts Voilà need neither torch, numpy nor transformers (`--help` took about 20 s on a busy
    machine, and the `explore` wrapper held about 290 MB, while they were imported)."""
    out = _fresh_python(
        "import contextlib, io, sys\n"
        "from rlbook.app import cli\n"
        "for argv in (['--help'], ['list'], ['run', '--help'], ['book', '--help'], ['explore', '--help'],\n"
        "             ['assignments', '--help']):\n"
        "    with contextlib.redirect_stdout(io.StringIO()):\n"
        "        try:\n"
        "            cli.main(argv)\n"
        "        except SystemExit:\n"
        "            pass\n"
        "import tempfile, pathlib\n"
        "from rlbook.app import explore\n"
        "explore.write_app(pathlib.Path(tempfile.mkdtemp()), explore.explorer_names())  # what `rlbook explore` writes\n"
        "print(sorted(m for m in ('torch', 'numpy', 'transformers') if m in sys.modules))\n")
    assert out.strip() == "[]", out


def _history(returns):
    h = History()
    steps = np.cumsum(returns)
    for r, s in zip(returns, steps):
        h.add_episode(r, int(r), int(s))
    h.log(loss=1.0)
    h.log(loss=0.5)
    return h


def test_plot_helpers_return_axes_and_draw():
    h = _history([10.0, 20.0, 30.0])
    ax = rl.plot_learning_curves({"a": [h, h]}, window=2)
    assert ax.get_xlabel() == "env steps" and len(ax.lines) == 3  # 2 runs + the threshold line
    np.testing.assert_allclose(ax.lines[0].get_ydata(), [10.0, 15.0, 25.0])
    fig, ax2 = plt.subplots()
    assert rl.plot_metric(h, "loss", ax=ax2) is ax2
    assert rl.plot_bars({"x": 1.0, "y": 2.0}, log=True).get_yscale() == "log"
    ax3 = rl.plot_mc_error([1, 4, 16], [1.0, 0.5, 0.25])
    np.testing.assert_allclose(ax3.lines[1].get_ydata(), [1.0, 0.5, 0.25])  # the 1/√N guide
    plt.close("all")
