"""``rlbook explore``: the book's explorers as live apps in the browser (Voilà), no code visible.

    rlbook explore                 # all ten explorers on one page, one after another
    rlbook explore clip            # one: clip | advantage | kl | gae | trust-region | preference | mismatch | entropy | agent | distill
    rlbook explore gae --port 8870 --no-browser
    rlbook explore --max-kernels 30 --idle-timeout 600   # a classroom: 30 pages at once

How it works. Nothing outside the installed ``rlbook`` package is needed, so the command works from
any folder after ``pip install 'rlbook[explore]'``. At start it writes, into a fresh temporary folder:

* a small notebook (:func:`explorer_notebook`): a title, then for each explorer a heading and one
  code cell, ``build_explorer("<name>")`` from :mod:`rlbook.widgets` (the registry
  ``rlbook.widgets.EXPLORERS`` names them), its box tagged with the CSS classes ``rlbook-explorer``
  and ``rlbook-explorer-<name>``. The code cells are marked hidden too, so the notebook also reads
  well if opened in JupyterLab;
* a kernelspec ``rlbook-explore`` that runs *this* Python interpreter (``sys.executable``) with the
  inline Matplotlib backend, so the figures render even when ``MPLBACKEND=Agg`` is set;
* a Voilà template ``rlbook``: Voilà's own ``lab`` template with its links to a font CDN removed,
  so the page makes no request outside localhost.

Why Voilà rather than JupyterLab opening the notebook: Voilà shows only the outputs (no code, no
editor), gives each visitor a fresh kernel, and is a single dependency (``rlbook[explore]``).

It then runs ``python -m voila`` on the notebook with that folder first on ``JUPYTER_PATH``,
bound to 127.0.0.1, sources stripped, tracebacks hidden, and of the JupyterLab extensions only the
widget managers loaded (others installed beside it fail in Voilà's page) (an explorer reports a bad input itself,
as a "⚠ ..." message). Voilà starts a kernel per page load and executes the cells; every slider
move then runs in that live kernel. Ctrl-C (or SIGTERM) stops Voilà, which shuts its kernels down;
the temporary folder is removed.

Voilà runs the cells with :class:`rlbook.app.kernel_client.WakefulKernelClient` (copied beside the app
as ``rlbook_kernel_client``, set with ``--KernelManager.client_factory``): Voilà's own client could miss
the wake-up of a reply already in its socket and leave the page at "Executing N of M" for good, about
one load in five. If the kernel ends while the page is built, the page says so once, with a reload
button, instead of Voilà's "An exception occurred at the server" in every cell.

Kernels cannot pile up (:mod:`rlbook.app.explore_kernels`, copied beside the app and configured by
``config/voila.py`` and the command line): closing or reloading a page shuts its kernel down (the
page's request now carries its ``_xsrf`` cookie); a kernel no page is connected to is shut down after
``--idle-timeout`` idle seconds (Jupyter Server's culling); and past ``--max-kernels`` pages a visitor
gets a page saying so instead of another ~300 MB kernel.

The browser tests in ``tests/browser/test_explorers.py`` start this command and drive the page;
``tests/browser/test_explore_server.py`` loads and closes it ten times and counts the kernels.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat

__all__ = ["explorer_names", "explorer_title", "explorer_notebook", "write_app", "voila_command"]

KERNEL_NAME = "rlbook-explore"
TEMPLATE_NAME = "rlbook"
_INLINE = "module://matplotlib_inline.backend_inline"
# the widget managers only (Voilà swaps in its own for JupyterLab's); other JupyterLab extensions
# installed beside Voilà (nbgrader's, jupytext's, ...) fail to load in its page
WIDGET_EXTENSIONS = ("@jupyter-widgets/jupyterlab-manager", "@voila-dashboards/widgets-manager8",
                     "@voila-dashboards/widgets-manager7")
_CDN = "://cdn."
# explore_kernels.py is copied beside the app as this module, so that the Voilà process imports it
# without importing the ``rlbook`` package (torch: ~200 MB more in the server)
KERNELS_MODULE = "rlbook_explore_kernels"
KERNEL_MANAGER = f"{KERNELS_MODULE}.BoundedKernelManager"
# kernel_client.py, copied beside the app as this module: the client Voilà executes the cells with
# (it waits on the kernel's sockets in short slices: a missed wake-up left about one page load in
# five "Executing N of M" for good; see rlbook.app.kernel_client)
CLIENT_MODULE = "rlbook_kernel_client"
KERNEL_CLIENT = f"{CLIENT_MODULE}.WakefulKernelClient"
MAX_KERNELS = 8  # explorer pages (kernels, ~300 MB each) alive at once
IDLE_TIMEOUT = 300  # s: a kernel no page is connected to is shut down after this long idle
# config/voila.py, read by Voilà (--Voila.config_file_paths): the hook that lets a closing page shut its kernel down
VOILA_CONFIG = (f"from {KERNELS_MODULE} import set_xsrf_cookie\n"
                "c.VoilaConfiguration.prelaunch_hook = set_xsrf_cookie\n")  # Voilà's lab/base templates link Font Awesome from cdn.jsdelivr.net


def explorer_names() -> list[str]:
    """The explorers' names, in the registry's order (``rlbook.widgets.EXPLORERS``)."""
    from rlbook.widgets import EXPLORERS

    return list(EXPLORERS)


def explorer_title(name: str) -> str:
    """A heading for explorer ``name``: the first line of its module's docstring, else the name."""
    from rlbook.widgets import EXPLORERS

    module_name = EXPLORERS[name].split(":")[0]
    try:  # read from the source, not imported: the explorer modules import torch, the command does not
        spec = importlib.util.find_spec(module_name)
        doc = ast.get_docstring(ast.parse(Path(spec.origin).read_text(encoding="utf-8"))) or ""
    except (ImportError, AttributeError, TypeError, OSError, SyntaxError):
        doc = ""
    first = doc.strip().splitlines()[0].strip() if doc.strip() else ""
    return first.rstrip(".") or f"{name} explorer"


def _code(name: str) -> str:
    # the CSS classes let a page (and the browser tests) find each explorer's box
    return ("%matplotlib inline\nfrom rlbook.widgets import build_explorer\n"
            f"build_explorer({name!r}).add_class('rlbook-explorer').add_class({'rlbook-explorer-' + name!r})")


def explorer_notebook(names: list[str]) -> nbformat.NotebookNode:
    """The app notebook: a title, then per explorer a heading and one hidden code cell.

    Args:
        names: explorer names from :func:`explorer_names` (at least one).
    Returns:
        an nbformat v4 notebook whose kernelspec is ``rlbook-explore`` (see :func:`write_app`).
    Raises:
        ValueError: ``names`` is empty or holds an unknown name (the valid names are listed).
    """
    valid = explorer_names()
    unknown = [n for n in names if n not in valid]
    if not names or unknown:
        raise ValueError(f"unknown explorer {unknown[0]!r}; choose from: {', '.join(valid)}" if unknown
                         else f"`names` is empty; choose from: {', '.join(valid)}")
    v4 = nbformat.v4
    hidden = {"jupyter": {"source_hidden": True}, "tags": ["remove-input"]}
    if len(names) == 1:
        cells = [v4.new_markdown_cell(f"# {explorer_title(names[0])}\n\nMove a control: the figure and the numbers "
                                      "are recomputed by the `rlbook` library in a live Python kernel.")]
    else:
        cells = [v4.new_markdown_cell("# rlbook explorers\n\nEach explorer below runs in a live Python kernel: "
                                      "move a control and the `rlbook` library recomputes the figure and the numbers.")]
    for name in names:
        if len(names) > 1:
            cells.append(v4.new_markdown_cell(f"## {explorer_title(name)}\n\n`rlbook explore {name}` opens it alone."))
        cells.append(v4.new_code_cell(_code(name), metadata=dict(hidden)))
    nb = v4.new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {"name": KERNEL_NAME, "display_name": "Python (rlbook explore)", "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    return nb


def _voila_template_dir(name: str) -> Path:
    """The installed Voilà template folder ``name`` (``lab`` or ``base``)."""
    from voila.paths import collect_template_paths

    for p in collect_template_paths(["voila"], name):
        if Path(p, "page.html").is_file() and Path(p).name == name:
            return Path(p)
    raise FileNotFoundError(f"Voilà's {name!r} template was not found; reinstall voila")


def _strip_cdn(text: str) -> str:
    return "".join(line for line in text.splitlines(keepends=True) if _CDN not in line)


# what Voilà writes into a cell's output when the kernel ended while the page was being built (culled,
# stopped with the server, out of memory): shown instead, once, as a message with a reload button
SERVER_ERROR = "An exception occurred at the server (not the notebook)"
KERNEL_LOST = ("This explorer's Python kernel stopped before the page was ready: the server may have been stopped "
               "or restarted, or the kernel ran out of memory. Reload the page to start a new one.")
# what a cell that raised shows instead of Voilà's advice to restart it with tracebacks on
CELL_ERROR = "Reload the page to try again; the terminal running rlbook explore shows what went wrong."
_DATA_PRIORITY = "{% block data_priority scoped %}\n{% if output %}"


def _kernel_lost_message(template: str) -> str:
    """Voilà's page template with its server-error output replaced by :data:`KERNEL_LOST` and a reload
    button, shown once on the page (the template is returned unchanged if Voilà's block is not found)."""
    replacement = (
        "{% block data_priority scoped %}\n"
        f"{{% if output and output.output_type == 'stream' and {SERVER_ERROR!r} in output.text %}}\n"
        f'  <div class="rlbook-kernel-lost" role="alert"><p>{KERNEL_LOST}</p>'
        '<button type="button" onclick="location.reload()">Reload the page</button></div>\n'
        "  <script>(() => { const all = document.querySelectorAll('.rlbook-kernel-lost');"
        " if (all.length > 1) all[all.length - 1].remove(); })();</script>\n"
        "{% elif output %}")
    return template.replace(_DATA_PRIORITY, replacement, 1)


def _write_template(share: Path) -> None:
    """Voilà's ``lab`` template without its CDN links, as template ``rlbook`` under ``share``."""
    lab, base = _voila_template_dir("lab"), _voila_template_dir("base")
    out = share / "voila" / "templates" / TEMPLATE_NAME
    out.mkdir(parents=True)
    (out / "conf.json").write_text(json.dumps({"base_template": "lab"}))
    (out / "index.html.j2").write_text(_kernel_lost_message(_strip_cdn((lab / "index.html.j2").read_text())))
    # error and 404 pages: lab/page.html extends base/page.html, which links the CDN too
    (out / "base_page.html").write_text(_strip_cdn((base / "page.html").read_text()))
    page = (lab / "page.html").read_text().replace("voila/templates/base/page.html",
                                                   f"voila/templates/{TEMPLATE_NAME}/base_page.html")
    (out / "page.html").write_text(_strip_cdn(page))
    # error pages (e.g. past --max-kernels) also show the error's message, not only its heading
    (out / "error.html").write_text('{% extends "voila/templates/lab/error.html" %}\n{% block error_detail %}'
                                    '<p class="rlbook-error-detail">{{ message }}</p>{% endblock %}\n')


def _write_kernelspec(share: Path) -> None:
    """A kernelspec that runs this interpreter with the inline Matplotlib backend."""
    d = share / "kernels" / KERNEL_NAME
    d.mkdir(parents=True)
    spec = {"argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            "display_name": "Python (rlbook explore)", "language": "python",
            "env": {"MPLBACKEND": _INLINE}}
    (d / "kernel.json").write_text(json.dumps(spec, indent=1))


def write_app(folder: Path, names: list[str]) -> Path:
    """Write the app notebook, its kernelspec and its Voilà template into ``folder``.

    Returns:
        the notebook's path; ``folder / "share"`` must go first on ``JUPYTER_PATH`` and
        ``folder / "py"`` on ``PYTHONPATH``.
    """
    folder = Path(folder)
    share = folder / "share"
    _write_kernelspec(share)
    _write_template(share)
    stem = "rlbook-explorers" if len(names) > 1 else f"rlbook-{names[0]}"
    path = folder / f"{stem}.ipynb"
    nbformat.write(explorer_notebook(names), path)
    # not in the working folder: ``python -m voila`` would import it as the package
    (folder / "config").mkdir()
    (folder / "config" / "voila.py").write_text(VOILA_CONFIG)
    (folder / "py").mkdir()
    shutil.copyfile(Path(__file__).with_name("explore_kernels.py"), folder / "py" / f"{KERNELS_MODULE}.py")
    shutil.copyfile(Path(__file__).with_name("kernel_client.py"), folder / "py" / f"{CLIENT_MODULE}.py")
    return path


def voila_command(notebook: Path, port: int | None, open_browser: bool, max_kernels: int = MAX_KERNELS,
                  idle_timeout: int = IDLE_TIMEOUT) -> list[str]:
    """The ``python -m voila`` command line serving ``notebook`` on 127.0.0.1.

    Kernels: at most ``max_kernels`` at once (:class:`rlbook.app.explore_kernels.BoundedKernelManager`),
    and one that no page is connected to is shut down after ``idle_timeout`` idle seconds (Jupyter
    Server's culling, checked every ``idle_timeout / 2`` s, at most every 30 s).

    Raises:
        ValueError: ``max_kernels`` < 1 or ``idle_timeout`` < 1.
    """
    if max_kernels < 1:
        raise ValueError(f"`max_kernels` must be >= 1, got {max_kernels}")
    if idle_timeout < 1:
        raise ValueError(f"`idle_timeout` must be >= 1 s, got {idle_timeout}")
    cmd = [sys.executable, "-m", "voila", str(notebook), f"--template={TEMPLATE_NAME}", "--theme=light",
           "--strip_sources=True", "--show_tracebacks=False", "--Voila.ip=127.0.0.1", "--Voila.token="]
    cmd += [f"--VoilaConfiguration.extension_allowlist={x}" for x in WIDGET_EXTENSIONS]
    cmd += [f"--Voila.config_file_paths={Path(notebook).parent / 'config'}",
            f"--VoilaConfiguration.multi_kernel_manager_class={KERNEL_MANAGER}",
            f"--KernelManager.client_factory={KERNEL_CLIENT}",
            f"--VoilaExecutor.cell_error_instruction={CELL_ERROR}",
            f"--BoundedKernelManager.max_kernels={max_kernels}",
            f"--MappingKernelManager.cull_idle_timeout={idle_timeout}",
            f"--MappingKernelManager.cull_interval={max(1, min(30, idle_timeout // 2))}",
            "--MappingKernelManager.cull_connected=False"]
    if port is not None:
        cmd += [f"--port={port}", "--Voila.port_retries=0"]
    if not open_browser:
        cmd.append("--no-browser")
    return cmd


def _run(args) -> int:
    try:
        valid = explorer_names()
    except ImportError as e:
        print(f"rlbook explore: the explorers could not be imported: {e}", file=sys.stderr)
        return 1
    names = [args.name] if args.name else valid
    if args.name and args.name not in valid:
        print(f"rlbook explore: unknown explorer {args.name!r}; choose from: {', '.join(valid)}", file=sys.stderr)
        return 2
    if args.max_kernels < 1 or args.idle_timeout < 1:
        print("rlbook explore: --max-kernels and --idle-timeout must be >= 1", file=sys.stderr)
        return 2
    if importlib.util.find_spec("voila") is None:
        print("rlbook explore needs Voilà: pip install 'rlbook[explore]'", file=sys.stderr)
        return 1
    tmp = Path(tempfile.mkdtemp(prefix="rlbook-explore-"))
    proc = None
    previous = signal.getsignal(signal.SIGTERM)
    try:
        notebook = write_app(tmp, names)
        env = dict(os.environ)
        for var, sub in (("JUPYTER_PATH", "share"), ("PYTHONPATH", "py")):
            env[var] = os.pathsep.join([str(tmp / sub), *filter(None, [env.get(var)])])
        print(f"rlbook explore: starting Voilà for {', '.join(names)} (Ctrl-C stops it)", flush=True)
        cmd = voila_command(notebook, args.port, not args.no_browser, args.max_kernels, args.idle_timeout)
        proc = subprocess.Popen(cmd, env=env, cwd=tmp)
        signal.signal(signal.SIGTERM, lambda *_: proc.terminate())
        return proc.wait()
    except KeyboardInterrupt:  # Ctrl-C reached Voilà too: let it shut its kernels down
        try:
            proc.wait(15)
        except (subprocess.TimeoutExpired, KeyboardInterrupt, AttributeError):
            pass
        return 0
    finally:
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
        signal.signal(signal.SIGTERM, previous)
        shutil.rmtree(tmp, ignore_errors=True)


def add_subparser(sub) -> None:
    """Add the ``explore`` subcommand to the ``rlbook`` parser's subparsers ``sub``."""
    try:
        names = ", ".join(explorer_names())
    except (ImportError, AttributeError):  # the registry is missing: say so when the command runs
        names = "see rlbook.widgets.EXPLORERS"
    p = sub.add_parser("explore", help="the explorers as live apps in the browser (Voilà)",
                       description="Open the explorers as live apps (Voilà, a live Python kernel, no code shown).")
    p.add_argument("name", nargs="?", metavar="NAME", help=f"one explorer ({names}); default: all on one page")
    p.add_argument("--port", type=int, help="port on 127.0.0.1 (default: 8866, or the next free one)")
    p.add_argument("--no-browser", action="store_true", help="do not open a browser; print the address")
    p.add_argument("--max-kernels", type=int, default=MAX_KERNELS, metavar="N",
                   help=f"the most pages (one Python kernel each, ~300 MB) open at once (default {MAX_KERNELS})")
    p.add_argument("--idle-timeout", type=int, default=IDLE_TIMEOUT, metavar="S",
                   help=f"shut a kernel down S seconds after its page went away without closing it (default {IDLE_TIMEOUT})")
    p.set_defaults(fn=_run)
