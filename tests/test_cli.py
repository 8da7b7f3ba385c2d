"""The `rlbook` command: list and run chapters headless, summary table, failures, sources untouched."""

import json
import os

import nbformat
import pytest
import torch

from rlbook.app import chapters, cli, exercises
from rlbook.returns import rewards_to_go


def _write(path, *sources):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell(f"# Title of {path.stem}")] + [nbformat.v4.new_code_cell(s) for s in sources]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)


@pytest.fixture()
def book(tmp_path, monkeypatch):
    nbs = tmp_path / "notebooks"
    nbs.mkdir()
    _write(nbs / "01_ok.ipynb", "import os\nprint(os.environ['RLBOOK_SIZE'])",
           "from rlbook import report_headline\nreport_headline('toy: 42 reached')")
    _write(nbs / "02_broken.ipynb", "raise RuntimeError('learning broke: 12 < 475')")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_list(book, capsys):
    assert cli.main(["list"]) == 0
    out = capsys.readouterr().out
    assert "01  Title of 01_ok" in out and "02  Title of 02_broken" in out


def test_list_prints_each_chapters_measured_run_time_while_its_code_is_the_timed_code(book, capsys):
    from rlbook.app import site

    (book / "book").mkdir()
    for name in ("_config.yml", "_toc.yml"):
        (book / "book" / name).write_text("title: t\n")
    cells = json.loads((book / "notebooks" / "01_ok.ipynb").read_text())["cells"]
    entry = {"seconds": 12.3, "cpu_cores": 2, "size": "small", "load_average": 0.5, "date": "2026-11-29"}
    (book / "book" / "run_times.json").write_text(json.dumps({
        "01_ok": {**entry, "code_sha256": site.code_fingerprint(cells)},
        "02_broken": {**entry, "code_sha256": "0" * 64}}))  # timed on other code: stale
    assert cli.main(["list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "ran in 12 s on 2 CPU cores at the small size, load average 0.5, 2026-11-29" in lines[0], lines
    assert "run time not measured for this version" in lines[1] and "ran in" not in lines[1], lines


def test_run_one_chapter_writes_output_and_headline(book, capsys):
    src = (book / "notebooks" / "01_ok.ipynb").read_text()
    assert cli.main(["run", "1", "--size", "full", "--out", "out"]) == 0
    out = capsys.readouterr().out
    assert "toy: 42 reached" in out and "ok" in out
    executed = json.loads((book / "out" / "01_ok.ipynb").read_text())
    assert "".join(executed["cells"][1]["outputs"][0]["text"]).strip() == "full"  # the size switch reached the kernel
    assert (book / "notebooks" / "01_ok.ipynb").read_text() == src  # sources never overwritten


def test_run_does_not_leak_the_size_into_the_caller(book, monkeypatch):
    monkeypatch.delenv("RLBOOK_SIZE", raising=False)
    cli.main(["run", "1", "--size", "full", "--out", "out"])
    assert "RLBOOK_SIZE" not in os.environ  # later kernels (e.g. nbval's) must see the default
    monkeypatch.setenv("RLBOOK_SIZE", "small")
    cli.main(["run", "1", "--size", "full", "--out", "out"])
    assert os.environ["RLBOOK_SIZE"] == "small"


def test_run_failure_exits_nonzero_and_shows_error(book, capsys):
    assert cli.main(["run", "--out", "out"]) == 1
    captured = capsys.readouterr()
    assert "FAILED" in captured.out and "learning broke: 12 < 475" in captured.err


def test_a_chapter_whose_kernel_stops_answering_runs_again_once(book, capsys):
    """A cell past its timeout (a kernel that never replies) fails the run and is retried once from the start;
    the second run of this chapter finds the marker file the first left and finishes at once."""
    _write(book / "notebooks" / "03_stalls.ipynb",
           "import pathlib, time\nmarker = pathlib.Path('stalled_once')\n"
           "if not marker.exists():\n    marker.touch()\n    time.sleep(60)\nprint('second run done')")
    chapter = next(c for c in chapters.list_chapters() if c.number == "03")
    row = cli.run_chapter(chapter, book / "out", "small", timeout=5)
    assert row["status"] == "ok" and "exception" not in row
    assert "running it again" in capsys.readouterr().err
    row = cli.run_chapter(chapter, book / "out", "small", timeout=5, attempts=1)  # the marker is there now: no stall
    assert row["status"] == "ok"


def test_a_failing_cell_is_not_run_again(book, capsys):
    chapter = next(c for c in chapters.list_chapters() if c.number == "02")
    row = cli.run_chapter(chapter, book / "out", "small")
    assert row["status"] == "FAILED" and "learning broke" in row["error"]
    assert "running it again" not in capsys.readouterr().err


def test_run_unknown_chapter(book, capsys):
    assert cli.main(["run", "07"]) == 2
    assert "no chapter 07" in capsys.readouterr().err


def test_no_notebooks_dir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(chapters, "PACKAGE_ROOT", tmp_path / "x" / "rlbook")  # no package copy either
    with pytest.raises(FileNotFoundError, match="notebooks"):
        cli.find_notebooks_dir(tmp_path)


def test_exercise_checker_accepts_reference_and_rejects_wrong(capsys):
    def my_rtg(rewards, gamma, terminated, truncated):
        return rewards_to_go(rewards, gamma, terminated=terminated, truncated=truncated)

    assert exercises.check("rewards_to_go", my_rtg)
    assert "✓ rewards_to_go" in capsys.readouterr().out

    def wrong(rewards, gamma, terminated, truncated):  # forgets the episode boundaries
        return rewards_to_go(rewards, gamma)

    with pytest.raises(AssertionError, match="differs"):
        exercises.check("rewards_to_go", wrong)
    with pytest.raises(ValueError, match="name"):
        exercises.check("nope", wrong)


def test_exercise_softmax_score_closed_form():
    assert exercises.check("softmax_score", lambda z, a: torch.nn.functional.one_hot(a, z.shape[-1]) - z.softmax(-1))


def test_run_keeps_the_kernel_log_out_of_the_terminal(book, capfd):
    # the kernel's "running over TCP without encryption" notice used to interleave with the bar
    assert cli.main(["run", "1", "--out", "out"]) == 0
    captured = capfd.readouterr()
    assert "without encryption" not in captured.err + captured.out
    assert "toy: 42 reached" in captured.out


def test_claim_passes_prints_and_fails_with_both_numbers(capsys):
    import rlbook as rl

    assert rl.claim("a return of about 350", 340.0, 350) is None  # a cell ending in a claim echoes nothing
    assert '✓ "a return of about 350": 340' in capsys.readouterr().out
    rl.claim("more than 0.3", torch.tensor(0.5), low=0.3)
    assert capsys.readouterr().out == '✓ "more than 0.3": 0.5\n'
    with pytest.raises(AssertionError, match=r"about 350.*350 ± 10.*200"):
        rl.claim("a return of about 350", 200, 350)  # "about 350" allows one unit of its last digit: ±10
    with pytest.raises(AssertionError, match=r"350 ± 5.*338"):
        rl.claim("a return of about 350", 338, 350, rel=5 / 350)  # a narrower tolerance than the words is allowed
    with pytest.raises(AssertionError, match="in \\[0.3, inf\\]"):
        rl.claim("more than 0.3", 0.1, low=0.3)
    with pytest.raises(ValueError, match="does not write 360"):
        rl.claim("about 350", 350, 360)
    with pytest.raises(ValueError, match="quote"):
        rl.claim("", 1.0, low=0)
    with pytest.raises(ValueError, match="finite"):
        rl.claim("about 1", float("nan"), 1, abs=1)
    with pytest.raises(ValueError, match="low"):
        rl.claim("about 1", 1.0)


def test_claim_prints_the_quotes_math_as_plain_text(capsys):
    import rlbook as rl

    rl.claim(r"by almost the full $V^\pi\approx 5$", 5.01, 5, abs=0.1)
    rl.claim(r"about $2\cdot10^{-5}$", 2.01e-5, 2e-5, rel=0.1)
    rl.claim(r"it gains $\Delta L = 0.278$ and $k_1$", 0.278, 0.278, abs=0.0005)
    assert capsys.readouterr().out.splitlines() == ['✓ "by almost the full V^π ≈ 5": 5.01', '✓ "about 2·10⁻⁵": 2.01e-05',
                                                    '✓ "it gains ΔL = 0.278 and k₁": 0.278']
    assert rl.plain_text(r"no math, 40% of it") == "no math, 40% of it"
    assert rl.plain_text(r"$\alpha_n = 0.5\,n^{-0.6}$") == "αₙ = 0.5 n^(-0.6)"  # no superscript '.': kept as ^(…)


def test_a_small_chapter_counts_a_cell_silent_for_ten_minutes_as_a_lost_kernel(book, monkeypatch):
    """A hung kernel costs at most CELL_TIMEOUT[size] before the retry, not half an hour."""
    from rlbook.app import cli

    seen = []
    monkeypatch.setattr(cli, "_run_chapter_once", lambda chapter, out_dir, size, timeout: seen.append((size, timeout))
                        or dict(chapter="01", title="t", status="ok", seconds=0.0, headline="", error="", exception=None))
    chapter = cli.list_chapters()[0]
    cli.run_chapter(chapter, book / "out", "small")
    cli.run_chapter(chapter, book / "out", "full")
    cli.run_chapter(chapter, book / "out", "small", timeout=5)
    assert seen == [("small", 600), ("full", 3600), ("small", 5)]
    assert cli.CELL_TIMEOUT["small"] < cli.CELL_TIMEOUT["full"]


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
def test_a_signal_stops_the_run_and_the_chapters_after_it(book, sig):
    """SIGTERM (a job's timeout, `kill`) or SIGINT (Ctrl-C) while a chapter runs: nbclient ends that chapter's
    kernel, and `rlbook run` stops there with status 130, never running the chapter again (as it would a lost
    kernel) nor the chapters after it."""
    import signal
    import subprocess
    import sys
    import time

    for p in (book / "notebooks").glob("*.ipynb"):
        p.unlink()
    _write(book / "notebooks" / "01_sleeps.ipynb", "import pathlib, time\npathlib.Path('started').write_text('1')\n"
           "time.sleep(120)")
    _write(book / "notebooks" / "02_after.ipynb", "import pathlib\npathlib.Path('second_ran').write_text('1')")
    proc = subprocess.Popen([sys.executable, "-m", "rlbook.app.cli", "run"], cwd=book, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not (book / "notebooks" / "started").exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
        assert (book / "notebooks" / "started").exists(), proc.communicate(timeout=5)
        proc.send_signal(getattr(signal, sig))
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, (proc.returncode, out[-2000:], err[-2000:])
    assert "stopped by a signal during chapter 01; 1 chapter(s) not run" in err
    assert "running it again" not in err and "STOPPED" in out
    assert not (book / "notebooks" / "second_ran").exists()
