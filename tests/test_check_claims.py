"""tools/check_claims.py: every failing claim and assert of a chapter is listed, and the run goes on past them."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _tool():
    spec = importlib.util.spec_from_file_location("check_claims_tool", ROOT / "tools" / "check_claims.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_failure_is_listed_and_the_chapter_runs_to_its_end(tmp_path, capsys):
    source = tmp_path / "99_toy.py"
    source.write_text(
        "import rlbook as rl\n"
        "rl.claim('about 350', 300, 350)\n"             # fails
        "rl.claim('more than 0.3', 0.4, low=0.3)\n"                # holds
        "assert 1 + 1 == 3, 'arithmetic broke'\n"                   # fails
        "rl.claim_in_spread('a typical run', 9.0, [1.0, 1.1, 0.9])\n"  # fails
        "print('reached the end')\n"
        "raise RuntimeError('the last cell crashed')\n")
    failures = _tool().check_chapter(source)
    assert [f.split(":")[0] for f in failures] == ["claim", "assert", "claim", "crash"]
    assert "arithmetic broke" in failures[1] and "the last cell crashed" in failures[3]
    assert "reached the end" in capsys.readouterr().out


def test_the_real_checks_are_restored_afterwards(tmp_path):
    import pytest

    import rlbook as rl

    source = tmp_path / "98_toy.py"
    source.write_text("import rlbook as rl\nrl.claim('about 350', 300, 350)\n")
    _tool().check_chapter(source)
    with pytest.raises(AssertionError):
        rl.claim("about 350", 300, 350)


def test_each_chapter_starts_with_the_default_dtype(tmp_path):
    """A chapter that sets float64 (chapters 2, 4, 5 do, for exact checks) must not leak it into the next one."""
    first, second = tmp_path / "96_sets.py", tmp_path / "97_reads.py"
    first.write_text("import torch\ntorch.set_default_dtype(torch.float64)\n")
    second.write_text("import torch\nassert torch.get_default_dtype() == torch.float32, 'float64 leaked'\n")
    tool = _tool()
    assert tool.check_chapter(first) == []
    assert tool.check_chapter(second) == []
