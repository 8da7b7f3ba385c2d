"""The chapters under nbval, without executing a chapter twice.

nbval (``--nbval-lax``, set in pyproject.toml) executes each chapter in a fresh kernel, fails on any cell
that raises, and compares the outputs of the cells marked ``# NBVAL_CHECK_OUTPUT`` with the stored ones.
``rlbook run`` has executed the same chapters just before in CI (and often on a reader's machine): where
its execution in ``runs/small/`` is one the chapter would repeat exactly, because its record matches the
chapter's present code, the library, the installed packages, this machine, the size and the device, and
every cell of it ran (``rlbook.app.run_record.fresh_run``), the same checks are applied to that execution:
nbval's own comparison, sanitisers and cell markers, cell by cell, with no kernel started. Any other
chapter is executed by nbval as before. ``pytest --nbval-reexecute`` executes every chapter regardless.
The summary at the end says which chapters were checked which way, and why.
"""

from __future__ import annotations

import copy

import nbformat
import pytest
from nbval.plugin import IPyNbCell, IPyNbFile, coalesce_streams

_REPLAYED: dict[str, str] = {}  # chapter file -> where its execution came from
_EXECUTED: dict[str, str] = {}  # chapter file -> why nbval executed it


def pytest_addoption(parser):
    parser.addoption("--nbval-reexecute", action="store_true", default=False,
                     help="execute every chapter under nbval, even one that `rlbook run` has just executed "
                          "from the same code, library and packages on this machine (runs/small/)")


class ReplayedNbFile(IPyNbFile):
    """A chapter whose cells are checked against the execution ``rlbook run`` stored, not a new one."""

    executed: dict | None = None

    def setup(self):
        self.setup_sanitize_files()  # no kernel: nothing is executed

    def collect(self):
        code_cells = [c for c in self.executed["cells"] if c.get("cell_type") == "code"]
        for item in super().collect():
            yield ReplayedNbCell.from_parent(self, name=item.name, cell_num=item.cell_num, cell=item.cell,
                                             options=item.options, executed_cell=code_cells[item.cell_num])


class ReplayedNbCell(IPyNbCell):
    """One cell: its outputs in ``rlbook run``'s execution, under nbval's checks (error, compare)."""

    def __init__(self, name, parent, cell_num, cell, options, executed_cell):
        super().__init__(name, parent, cell_num, cell, options)
        self.executed_cell = executed_cell

    def runtest(self):
        if self.options["skip"]:
            pytest.skip()
        outs = [nbformat.from_dict(copy.deepcopy(o)) for o in self.executed_cell.get("outputs", [])]
        self.test_outputs = outs
        errors = [o for o in outs if o.get("output_type") == "error"]
        if errors and not self.options["check_exception"]:
            self.raise_cell_error("Cell execution caused an exception (in the execution `rlbook run` stored)",
                                  "\n" + "\n".join(errors[0].get("traceback", [])))
        outs = coalesce_streams(outs)
        unrun = self.cell.execution_count is None
        if unrun and self.cell.outputs:
            self.raise_cell_error("Unrun reference cell has outputs")
        if self.options["check"] and not unrun and not self.compare_outputs(outs, coalesce_streams(self.cell.outputs)):
            self.raise_cell_error("Cell outputs differ", "\n".join(self.comparison_traceback))


@pytest.hookimpl(hookwrapper=True)
def pytest_collect_file(file_path, parent):
    outcome = yield
    results = outcome.get_result()
    if file_path.suffix != ".ipynb" or not any(type(r) is IPyNbFile for r in results):
        return
    name = file_path.name
    if parent.config.getoption("--nbval-reexecute"):
        _EXECUTED[name] = "--nbval-reexecute"
        return
    from rlbook.app.run_record import fresh_run
    from rlbook.config import get_device

    runs_dir = parent.config.rootpath / "runs" / "small"  # where `rlbook run` writes, run from the clone's root
    executed, reason = fresh_run(file_path, runs_dir, size="small", device=str(get_device()))
    if executed is None:
        _EXECUTED[name] = reason
        return
    replaced = []
    for r in results:
        if type(r) is IPyNbFile:
            r = ReplayedNbFile.from_parent(parent, path=file_path)
            r.executed = executed
        replaced.append(r)
    _REPLAYED[name] = f"{runs_dir.relative_to(parent.config.rootpath).as_posix()}/{name}, " \
                      f"finished {executed['metadata']['rlbook_run']['finished']}"
    outcome.force_result(replaced)


_SELECTED: set[str] = set()  # the chapters this run tests (pytest visits every file of a folder it collects from)


def pytest_collection_modifyitems(items):
    _SELECTED.update(item.path.name for item in items if isinstance(item, IPyNbCell))


def pytest_terminal_summary(terminalreporter):
    lines = [f"{name}: checked against rlbook run's execution ({source})" for name, source in sorted(_REPLAYED.items())
             if name in _SELECTED]
    lines += [f"{name}: executed by nbval ({reason})" for name, reason in sorted(_EXECUTED.items()) if name in _SELECTED]
    if lines:
        terminalreporter.section("chapters under nbval")
        for line in lines:
            terminalreporter.write_line(line)
