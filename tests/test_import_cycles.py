"""No import cycle inside ``rlbook``: every module's imports, read with the standard library's ``ast``.

Edges are the ``import`` / ``from ... import`` statements of each module under ``rlbook/``, at module
level and inside functions alike (a deferred import still couples two modules: the book site
importing the CLI's chapter list while the CLI imported the site was such a cycle), plus the
package's own re-exports (``rlbook/__init__.py`` imports the modules listed in ``_MODULES``). A
cycle is a strongly connected component of more than one module, found with Tarjan's algorithm.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "rlbook"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in PACKAGE.rglob("*.py") if "_bundled" not in p.parts}


def _owner(name: str, modules) -> str | None:
    """The module of ``rlbook`` that ``name`` (a module or a name inside one) belongs to."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def import_graph() -> dict[str, set[str]]:
    """``{module: modules of rlbook it imports}``, as written in the source."""
    modules = _modules()
    graph = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets |= {_owner(a.name, modules) for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: up from this module's package
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([node.module] if node.module else []))
                for a in node.names:  # `from rlbook import returns` imports the module rlbook.returns
                    full = f"{base}.{a.name}"
                    targets.add(full if full in modules else _owner(base, modules))
            elif isinstance(node, ast.Assign) and path.name == "__init__.py" and any(
                    isinstance(t, ast.Name) and t.id == "_MODULES" for t in node.targets):
                targets |= {_owner(f"{name}.{m}", modules) for m in ast.literal_eval(node.value)}
        graph[name] = {t for t in targets if t and t != name}
    return graph


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components (iterative), each sorted; any order."""
    index, low, on_stack, stack, out, counter = {}, {}, set(), [], [], [0]

    def visit(root):
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        top = stack.pop()
                        on_stack.discard(top)
                        component.append(top)
                        if top == node:
                            break
                    out.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = counter[0]
                counter[0] += 1
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return out


def test_the_finder_finds_cycles_and_only_cycles():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set(), "f": {"g"}, "g": {"f"}}
    cycles = sorted(c for c in strongly_connected(graph) if len(c) > 1)
    assert cycles == [["a", "b", "c"], ["f", "g"]]
    assert all(len(c) == 1 for c in strongly_connected({"a": {"b"}, "b": {"c"}, "c": set()}))


def test_the_graph_sees_deferred_relative_and_package_imports():
    graph = import_graph()
    assert "rlbook.returns" in graph["rlbook"]  # through _MODULES
    assert "rlbook._checks" in graph["rlbook.returns"]
    assert "rlbook.widgets" in graph["rlbook.app.explore"]  # imported inside a function
    assert "rlbook.app.site" in graph["rlbook.app.cli"]  # likewise


def test_no_import_cycle_in_rlbook():
    cycles = [c for c in strongly_connected(import_graph()) if len(c) > 1]
    assert cycles == [], "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)
