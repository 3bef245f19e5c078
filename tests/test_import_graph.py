"""The import graph of jetkafka has no cycles.

Every module under ``jetkafka/`` is parsed (not imported) and each import of another jetkafka
module is an edge: imports at module level and inside functions alike, since a function-local
import still ties the two modules together, it only defers the tie to the first call. Relative
imports are resolved; ``from pkg import name`` is an edge to ``pkg.name`` when that is a
module, else to ``pkg`` (a package's ``__init__`` is a node of its own). The implicit import
of a module's parent packages is not an edge: every submodule would otherwise depend on its
package's ``__init__``.

Imports under ``if TYPE_CHECKING:`` are edges too. They never run, but they are how one
module's interface names another's, and a cycle of them is a cycle of knowledge all the same:
neither module can be read, typed or moved without the other. Where a module only needs a
narrow part of another, it names a Protocol of that part instead (``channel/running.py``).
"""

from __future__ import annotations

import ast
from pathlib import Path

import jetkafka

ROOT = Path(jetkafka.__file__).resolve().parent


def module_names() -> dict[str, Path]:
    """Every module of the package, by dotted name (``jetkafka.channel`` for its ``__init__``)."""
    names = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


def _imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement, at any depth: module level, in functions, under TYPE_CHECKING."""
    return [node for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))]


def _base(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    package = module if is_package else module.rpartition(".")[0]
    for _ in range(node.level - 1):
        package = package.rpartition(".")[0]
    return f"{package}.{node.module}" if node.module else package


def import_graph() -> dict[str, set[str]]:
    modules = module_names()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        is_package = path.name == "__init__.py"
        for node in _imports(tree):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = _base(name, is_package, node)
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            for named in targets:
                # "import a.b.c" names a.b.c; a name that is not a module leaves its module.
                target = named
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph[name].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def _describe(component: list[str], graph: dict[str, set[str]]) -> str:
    members = set(component)
    edges = [f"    {a} -> {b}" for a in component for b in sorted(graph[a] & members)]
    return f"  {len(component)} modules: {', '.join(component)}\n" + "\n".join(edges)


def test_no_import_cycles() -> None:
    graph = import_graph()
    found = cycles(graph)
    assert not found, "import cycles among jetkafka modules:\n" + "\n".join(_describe(c, graph) for c in found)


def test_the_graph_sees_local_relative_and_submodule_imports() -> None:
    """The parser finds what the cycle check relies on (a check that sees nothing passes anyway)."""
    graph = import_graph()
    assert "jetkafka.channel._inbound" in graph["jetkafka.channel"]  # from x import y, y a module
    assert "jetkafka.config" in graph["jetkafka.channel._inbound"]  # from pkg import name: the package
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    tree = ast.parse("def f():\n    from . import x\nif TYPE_CHECKING:\n    import y\n")
    assert sorted(type(n).__name__ for n in _imports(tree)) == ["Import", "ImportFrom"]
    relative = ast.ImportFrom(module="budget", names=[], level=1)
    assert _base("jetkafka.channel.inbound", False, relative) == "jetkafka.channel.budget"
    assert _base("jetkafka.channel", True, relative) == "jetkafka.channel.budget"
    assert _base("jetkafka.channel.inbound", False, ast.ImportFrom(module=None, names=[], level=2)) == "jetkafka"
