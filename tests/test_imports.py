"""The package's import graph has no cycle.

Every ``import`` in every module of ``amplint`` (and ``amplint.rules``) counts --
module level and inside functions alike, since a lazy import is still a dependency --
except those under ``if TYPE_CHECKING:``, which never run."""
from __future__ import annotations

import ast
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: package name -> its folder (the rules ship as amplint.rules from rules/)
PACKAGES = {"amplint": os.path.join(ROOT, "amplint"), "amplint.rules": os.path.join(ROOT, "rules")}


def modules(packages: dict[str, str]) -> dict[str, str]:
    """Dotted module name -> file, for every .py file of the packages."""
    found = {}
    for package, folder in packages.items():
        for dirpath, _, filenames in os.walk(folder):
            for filename in filenames:
                if not filename.endswith(".py"):
                    continue
                rel = os.path.relpath(os.path.join(dirpath, filename), folder)[:-3].replace(os.sep, ".")
                if rel == "__init__":
                    name = package
                elif rel.endswith(".__init__"):
                    name = f"{package}.{rel[:-len('.__init__')]}"
                else:
                    name = f"{package}.{rel}"
                found[name] = os.path.join(dirpath, filename)
    return found


def _is_type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def imports_of(name: str, path: str, known: dict[str, str]) -> set[str]:
    """The modules among ``known`` that module ``name`` imports."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    is_package = path.endswith("__init__.py")
    out: set[str] = set()
    stack = list(tree.body)
    while stack:
        node = stack.pop()
        if _is_type_checking(node):
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.ImportFrom):
            if node.level:
                parts = name.split(".")
                base = parts[: len(parts) - node.level + (1 if is_package else 0)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            for alias in node.names:
                if f"{module}.{alias.name}" in known:  # from package import module
                    out.add(f"{module}.{alias.name}")
                elif module in known:
                    out.add(module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name in known)
        stack.extend(ast.iter_child_nodes(node))
    out.discard(name)
    return out


def find_cycle(graph: dict[str, set[str]]) -> list[str]:
    """One cycle of ``graph`` as a path (first == last), or [] when there is none."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return []

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return []


def import_graph(packages: dict[str, str]) -> dict[str, set[str]]:
    known = modules(packages)
    return {name: imports_of(name, path, known) for name, path in known.items()}


def test_no_import_cycle():
    graph = import_graph(PACKAGES)
    assert "amplint.context" in graph and "amplint.rules.amp101_overflow_constant" in graph
    cycle = find_cycle(graph)
    assert not cycle, "import cycle: " + " -> ".join(cycle)


def test_a_cycle_through_a_lazy_import_is_found(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from .b import helper\n")
    (pkg / "b.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from .c import Thing\n"
        "def helper():\n    from . import a\n    return a\n"
    )
    (pkg / "c.py").write_text("from .b import helper\n")
    graph = import_graph({"pkg": str(pkg)})
    assert graph["pkg.b"] == {"pkg.a"}  # the TYPE_CHECKING import does not count
    assert find_cycle(graph) == ["pkg.a", "pkg.b", "pkg.a"]
