"""Run chapters from their sources and list every claim and assert that fails, instead of stopping at the first.

``rlbook run`` stops a chapter at its first failing cell, which is right for a reader and for CI. To find
out how a chapter's claims hold on another machine (another CPU's float order, a GPU, the ``full`` size),
a maintainer wants the whole list from one run. This runs each chapter's jupytext source
(``notebooks/src/NN_*.py``) as a script, with ``rl.claim``, ``rl.claim_comparison`` and
``rl.claim_in_spread`` reporting a contradiction instead of raising, and every ``assert`` statement
turned into a printed report, then prints one line per failure and a summary.

    python tools/check_claims.py 12 14                   # on rl.get_device(), at $RLBOOK_SIZE
    RLBOOK_DEVICE=cpu ATEN_CPU_CAPABILITY=avx2 python tools/check_claims.py   # every chapter, another CPU kernel set

``ATEN_CPU_CAPABILITY`` (default, avx2 or avx512 on x86) makes torch use another set of CPU kernels, so one
machine can stand in for a CPU of another generation. Exit status: the number of chapters with a failure
(0: every claim held), capped at 100.
"""

from __future__ import annotations

import argparse
import ast
import builtins
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "notebooks" / "src"


class _SoftAsserts(ast.NodeTransformer):
    """``assert test, msg`` → ``if not (test): _report("ASSERT", msg or the test's source)``."""

    def visit_Assert(self, node):
        message = node.msg if node.msg is not None else ast.Constant(ast.unparse(node.test)[:200])
        report = ast.Expr(ast.Call(ast.Name("_report", ast.Load()), [ast.Constant("assert"), message], []))
        return ast.copy_location(ast.If(ast.UnaryOp(ast.Not(), node.test), [report], []), node)


def check_chapter(path: Path) -> list[str]:
    """Run one chapter source; return its failures (``"claim: ..."`` / ``"assert: ..."`` lines)."""
    import matplotlib
    import torch

    matplotlib.use("Agg")
    import rlbook as rl

    # each chapter starts as in a fresh kernel: chapters 2, 4 and 5 set float64 as the default dtype for their
    # exact checks, which would leak into the chapters run after them in this one process
    torch.set_default_dtype(torch.float32)

    failures: list[str] = []

    def report(kind, message):
        failures.append(f"{kind}: {str(message)[:300]}")
        print(f"  FAILS {kind}: {str(message)[:300]}", flush=True)

    def soft(check):
        def wrapped(*args, **kwargs):
            try:
                return check(*args, **kwargs)
            except (AssertionError, ValueError) as err:
                report("claim", err)
        return wrapped

    checks = {name: getattr(rl, name) for name in ("claim", "claim_comparison", "claim_in_spread")}
    for name, check in checks.items():
        setattr(rl, name, soft(check))
    cwd = os.getcwd()
    os.chdir(ROOT / "notebooks")  # where rlbook run and nbval execute a chapter
    try:
        tree = ast.fix_missing_locations(_SoftAsserts().visit(ast.parse(path.read_text(encoding="utf-8"))))
        namespace = {"__name__": "__main__", "_report": report, "display": lambda *a, **k: None}
        builtins.display = namespace["display"]
        try:
            exec(compile(tree, str(path), "exec"), namespace)  # noqa: S102
        except Exception as err:  # a crash ends the chapter: report it as a failure
            report("crash", f"{type(err).__name__}: {err}")
    finally:
        os.chdir(cwd)
        for name, check in checks.items():
            setattr(rl, name, check)
    return failures


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("chapters", nargs="*", help="chapter numbers (default: all)")
    args = parser.parse_args(argv)
    sources = sorted(SRC.glob("[0-9][0-9]_*.py"))
    if args.chapters:
        wanted = {c.zfill(2) for c in args.chapters}
        sources = [s for s in sources if s.name[:2] in wanted]
    import torch

    import rlbook as rl

    print(f"torch {torch.__version__}, device {rl.get_device()}, size {rl.get_size()}, "
          f"CPU kernels {torch.backends.cpu.get_cpu_capability()}, threads {torch.get_num_threads()}", flush=True)
    results = {}
    for source in sources:
        print(f"{source.name}", flush=True)
        start = time.perf_counter()
        results[source.name[:2]] = (check_chapter(source), time.perf_counter() - start)
    print("\nchapter  failures  seconds")
    for number, (failures, seconds) in results.items():
        print(f"{number:<9}{len(failures):>8}{seconds:>9.0f}")
        for failure in failures:
            print(f"    {failure}")
    return min(100, sum(1 for failures, _ in results.values() if failures))


if __name__ == "__main__":
    sys.exit(main())
