"""``rlbook explore`` without a browser: the app notebook, its kernelspec and template, the CLI.

The live app itself (Voilà in headless Chromium) is tested in ``tests/browser/test_explorers.py``.
"""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from rlbook.app import cli, explore

NAMES = ["clip", "advantage", "kl", "gae", "trust-region", "preference", "mismatch", "entropy", "agent", "distill"]
needs_voila = pytest.mark.skipif(importlib.util.find_spec("voila") is None, reason="Voilà is not installed")


def _code_cells(nb):
    return [c for c in nb.cells if c.cell_type == "code"]


def test_registry_names_the_ten_explorers():
    assert explore.explorer_names() == NAMES


def test_notebook_has_one_hidden_code_cell_per_explorer():
    nb = explore.explorer_notebook(NAMES)
    nbformat.validate(nb)
    cells = _code_cells(nb)
    assert len(cells) == len(NAMES)
    for cell, name in zip(cells, NAMES):
        assert f"build_explorer({name!r})" in cell.source
        assert f"rlbook-explorer-{name}" in cell.source
        assert cell.metadata["jupyter"]["source_hidden"] is True
        assert "remove-input" in cell.metadata["tags"]
    headings = [c.source.splitlines()[0] for c in nb.cells if c.cell_type == "markdown"]
    assert headings[0] == "# rlbook explorers" and len(headings) == 1 + len(NAMES)
    assert all(h.startswith("## ") for h in headings[1:])
    assert nb.metadata["kernelspec"]["name"] == explore.KERNEL_NAME


def test_single_explorer_notebook_has_its_title():
    nb = explore.explorer_notebook(["gae"])
    assert len(_code_cells(nb)) == 1
    assert nb.cells[0].source.startswith("# " + explore.explorer_title("gae"))


def test_unknown_explorer_is_refused_with_the_valid_names():
    with pytest.raises(ValueError, match="choose from: clip, advantage, kl, gae, trust-region, preference, mismatch, entropy, agent, distill"):
        explore.explorer_notebook(["clip", "nope"])
    with pytest.raises(ValueError, match="empty"):
        explore.explorer_notebook([])


def test_cli_unknown_name_exits_2_naming_the_valid_ones(capsys):
    assert cli.main(["explore", "nope"]) == 2
    err = capsys.readouterr().err
    assert "unknown explorer 'nope'" in err
    for name in NAMES:
        assert name in err


def test_cli_help(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["explore", "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert "--port" in out and "--no-browser" in out and "trust-region" in out


@needs_voila
def test_app_folder_kernel_and_template_make_no_cdn_request(tmp_path):
    path = explore.write_app(tmp_path, ["clip"])
    assert path.name == "rlbook-clip.ipynb" and len(_code_cells(nbformat.read(path, 4))) == 1
    spec = json.loads((tmp_path / "share/kernels/rlbook-explore/kernel.json").read_text())
    assert spec["argv"][0] == sys.executable  # the kernel is this interpreter
    assert spec["env"]["MPLBACKEND"] == "module://matplotlib_inline.backend_inline"
    template = tmp_path / "share/voila/templates/rlbook"
    assert json.loads((template / "conf.json").read_text()) == {"base_template": "lab"}
    index = (template / "index.html.j2").read_text()
    assert "cell_generator" in index  # Voilà's lab template, not an empty file
    for f in template.iterdir():
        assert "://cdn." not in f.read_text(), f.name
    assert "voila/templates/rlbook/base_page.html" in (template / "page.html").read_text()


def test_voila_command_is_local_and_hides_code(tmp_path):
    cmd = explore.voila_command(tmp_path / "a.ipynb", 8870, open_browser=False)
    assert cmd[:3] == [sys.executable, "-m", "voila"]
    for arg in ("--port=8870", "--no-browser", "--Voila.ip=127.0.0.1", "--strip_sources=True",
                "--show_tracebacks=False", "--template=rlbook"):
        assert arg in cmd
    cmd = explore.voila_command(tmp_path / "a.ipynb", None, open_browser=True)
    assert "--no-browser" not in cmd and not any(a.startswith("--port") for a in cmd)


@needs_voila
def test_run_serves_a_temporary_app_and_removes_it(tmp_path, monkeypatch):
    """From any folder: the app is written to a temporary folder, Voilà sees it first on
    JUPYTER_PATH, and the folder is gone when Voilà exits."""
    seen = {}

    class FakeVoila:
        def __init__(self, cmd, env, cwd):
            seen.update(cmd=cmd, env=env, cwd=Path(cwd), existed=(Path(cwd) / "share/kernels").is_dir())

        def wait(self, timeout=None):
            return 0

        def poll(self):
            return 0

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(explore.subprocess, "Popen", FakeVoila)
    assert cli.main(["explore", "kl", "--port", "8871", "--no-browser"]) == 0
    assert seen["existed"] and seen["env"]["JUPYTER_PATH"].split(os.pathsep)[0] == str(seen["cwd"] / "share")
    assert seen["cmd"][3] == str(seen["cwd"] / "rlbook-kl.ipynb") and "--port=8871" in seen["cmd"]
    assert seen["env"]["PYTHONPATH"].split(os.pathsep)[0] == str(seen["cwd"] / "py")
    assert f"--BoundedKernelManager.max_kernels={explore.MAX_KERNELS}" in seen["cmd"]
    assert not seen["cwd"].exists()


def test_missing_voila_is_explained(monkeypatch, capsys):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "voila" else real(name, *a))
    assert cli.main(["explore", "clip"]) == 1
    assert "pip install 'rlbook[explore]'" in capsys.readouterr().err


def test_voila_command_bounds_and_culls_kernels(tmp_path):
    cmd = explore.voila_command(tmp_path / "a.ipynb", None, open_browser=False, max_kernels=3, idle_timeout=120)
    for arg in ("--VoilaConfiguration.multi_kernel_manager_class=rlbook_explore_kernels.BoundedKernelManager",
                "--KernelManager.client_factory=rlbook_kernel_client.WakefulKernelClient",
                "--BoundedKernelManager.max_kernels=3", "--MappingKernelManager.cull_idle_timeout=120",
                "--MappingKernelManager.cull_interval=30", "--MappingKernelManager.cull_connected=False",
                f"--Voila.config_file_paths={tmp_path / 'config'}"):
        assert arg in cmd
    assert "--MappingKernelManager.cull_interval=5" in explore.voila_command(tmp_path / "a.ipynb", None, False, 3, 10)
    for bad in ({"max_kernels": 0}, {"idle_timeout": 0}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            explore.voila_command(tmp_path / "a.ipynb", None, False, **bad)


def test_cli_refuses_a_nonsense_kernel_bound(capsys):
    assert cli.main(["explore", "kl", "--max-kernels", "0"]) == 2
    assert "--max-kernels" in capsys.readouterr().err


@needs_voila
def test_server_module_is_copied_and_imports_without_torch(tmp_path):
    """Voilà imports the copied kernel manager, hook and kernel client without loading ``rlbook`` (torch)."""
    explore.write_app(tmp_path, ["kl"])
    config = (tmp_path / "config" / "voila.py").read_text()
    assert "c.VoilaConfiguration.prelaunch_hook = set_xsrf_cookie" in config
    assert not (tmp_path / "voila.py").exists()  # `python -m voila` would import it as the package
    code = ("import sys, rlbook_explore_kernels as k, rlbook_kernel_client as c; "
            "assert k.BoundedKernelManager and k.set_xsrf_cookie and c.WakefulKernelClient; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('rlbook', 'torch')))")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=str(tmp_path / "py")))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


@needs_voila
def test_kernel_manager_refuses_past_the_limit_even_when_loads_overlap():
    """Two page loads at once with one slot: the second is refused (503, the readable message),
    although the first kernel has not finished starting when the second asks."""
    import asyncio
    import concurrent.futures

    from jupyter_server.services.kernels.kernelmanager import AsyncMappingKernelManager
    from tornado import web

    from rlbook.app import explore_kernels as ek

    started = []

    async def slow_start(self, *, kernel_id=None, **kwargs):
        await asyncio.sleep(0.05)
        started.append(kernel_id)
        return kernel_id

    async def two_loads():
        km = ek.BoundedKernelManager(max_kernels=1)
        km.cull_idle_timeout = 300
        results = await asyncio.gather(km.start_kernel(), km.start_kernel(), return_exceptions=True)
        return km, results

    original = AsyncMappingKernelManager.start_kernel
    AsyncMappingKernelManager.start_kernel = slow_start
    try:
        # a thread of its own: asyncio.run refuses to start where an event loop already runs (one
        # left by the browser tests' Playwright earlier in the same session)
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            km, results = pool.submit(asyncio.run, two_loads()).result()
    finally:
        AsyncMappingKernelManager.start_kernel = original
    ok = [r for r in results if isinstance(r, str)]
    refused = [r for r in results if isinstance(r, web.HTTPError)]
    assert len(ok) == 1 and len(refused) == 1 and started == ok
    assert refused[0].status_code == 503 and refused[0].reason == ek.LIMIT_REASON
    assert refused[0].log_message == ek.limit_message(1, 300)
    assert "1 explorer page is open already" in refused[0].log_message and "--max-kernels" in refused[0].log_message
    assert km._starting == set()  # the reservation is released


def test_a_kernel_being_shut_down_does_not_count_against_the_limit(monkeypatch):
    """A page closed, another loaded at once: the closed page's kernel may still be listed while its
    shutdown finishes (its process already gone); it must not fill the one slot (seen in CI: 503)."""
    import asyncio
    import concurrent.futures

    from jupyter_server.services.kernels.kernelmanager import AsyncMappingKernelManager

    from rlbook.app import explore_kernels as ek

    listed = {"old"}

    async def fake_start(self, *, kernel_id=None, **kwargs):
        listed.add(kernel_id)
        return kernel_id

    async def scenario():
        release = asyncio.Event()

        async def slow_shutdown(self, kernel_id, now=False, restart=False):
            await release.wait()  # Jupyter Server still lists the kernel while this runs
            listed.discard(kernel_id)

        monkeypatch.setattr(AsyncMappingKernelManager, "shutdown_kernel", slow_shutdown)
        km = ek.BoundedKernelManager(max_kernels=1)
        monkeypatch.setattr(km, "list_kernel_ids", lambda: sorted(listed))
        closing = asyncio.ensure_future(km.shutdown_kernel("old"))
        await asyncio.sleep(0)
        new = await km.start_kernel()  # refused before: "old" still listed, the limit reached
        release.set()
        await closing
        return km, new

    monkeypatch.setattr(AsyncMappingKernelManager, "start_kernel", fake_start)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:  # a thread of its own, as above
        km, new = pool.submit(asyncio.run, scenario()).result()
    assert listed == {new} and km._stopping == set()


@needs_voila
def test_xsrf_hook_sets_the_cookie_the_page_sends_back():
    from rlbook.app import explore_kernels as ek

    class Handler:
        touched = False

        @property
        def xsrf_token(self):
            Handler.touched = True
            return b"token"

    assert ek.set_xsrf_cookie(Handler(), notebook=object(), cwd="/") is None
    assert Handler.touched


def _data_priority_block(tmp_path) -> str:
    explore.write_app(tmp_path, ["kl"])
    text = (tmp_path / "share" / "voila" / "templates" / explore.TEMPLATE_NAME / "index.html.j2").read_text()
    start = text.index("{% block data_priority scoped %}")
    end = text.index("{% endblock data_priority %}", start) + len("{% endblock data_priority %}")
    return text[start:end]


@needs_voila
def test_a_lost_kernel_reads_as_a_message_with_a_reload_button_not_a_server_error(tmp_path):
    """Voilà writes "An exception occurred at the server" into every cell left when the kernel ends
    mid-page (culled, stopped, out of memory); the page shows the message once, with a reload button."""
    import jinja2

    env = jinja2.Environment()
    env.filters["trusted"] = lambda x: x
    block = env.from_string(_data_priority_block(tmp_path))
    lost = {"output_type": "stream", "name": "stderr",
            "text": f"{explore.SERVER_ERROR}. Please run Voilà with --show_tracebacks=True"}
    html = block.render(output=lost)
    assert explore.KERNEL_LOST in html and 'onclick="location.reload()"' in html
    assert explore.SERVER_ERROR not in html
    assert "querySelectorAll('.rlbook-kernel-lost')" in html  # a second one removes itself: shown once
    ordinary = {"output_type": "stream", "name": "stdout", "text": "hello"}
    html = block.render(output=ordinary)
    assert "application/vnd.voila.cell-output+json" in html and "hello" in html and "rlbook-kernel-lost" not in html


@needs_voila
def test_a_failed_cell_says_to_reload(tmp_path):
    cmd = explore.voila_command(tmp_path / "a.ipynb", None, False)
    assert f"--VoilaExecutor.cell_error_instruction={explore.CELL_ERROR}" in cmd
    assert "--show_tracebacks" not in explore.CELL_ERROR
