"""Packages are layered: no module imports, however indirectly, a module that imports it back.

Every import counts: at module level, inside functions, and under
`if TYPE_CHECKING` (a type-only cycle still means two modules that cannot be
read, or moved, one without the other).
"""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import ROOT


def import_graph(package: Path) -> dict[str, set[str]]:
    """{module: modules of the same package it imports}, for the .py files directly in `package`.

    Modules are named by file stem (`__init__` for the package itself); any
    form counts: `from . import x`, `from .x import y`, `import pkg.x`,
    `from pkg.x import y`, `from pkg import x`.
    """
    name = package.name
    modules = {p.stem for p in package.glob("*.py")}
    graph: dict[str, set[str]] = {}
    for path in sorted(package.glob("*.py")):
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text("utf-8"), filename=str(path))):
            if isinstance(node, ast.ImportFrom):
                deps |= _from_import(node, name, modules)
            elif isinstance(node, ast.Import):
                deps |= {a.name.split(".")[1] for a in node.names if a.name.startswith(name + ".")}
        graph[path.stem] = {d for d in deps if d in modules and d != path.stem}
    return graph


def _from_import(node: ast.ImportFrom, package: str, modules: set[str]) -> set[str]:
    if node.level == 1 and node.module:  # from .x import y
        return {node.module.split(".")[0]}
    if (node.level == 1 and not node.module) or (node.level == 0 and node.module == package):  # from . / pkg import x
        return {a.name for a in node.names if a.name in modules}
    if node.level == 0 and node.module and node.module.startswith(package + "."):  # from pkg.x import y
        return {node.module.split(".")[1]}
    return set()


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as [a, b, ..., a], or None when the graph has none."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(mod: str) -> list[str] | None:
        state[mod] = 1
        path.append(mod)
        for dep in sorted(graph.get(mod, ())):
            if state.get(dep) == 1:
                return path[path.index(dep):] + [dep]
            if dep not in state and (found := visit(dep)):
                return found
        path.pop()
        state[mod] = 2
        return None

    for mod in sorted(graph):
        if mod not in state and (found := visit(mod)):
            return found
    return None


def test_find_cycle_names_the_modules_of_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_import_graph_counts_type_checking_and_in_function_imports(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .b import B\n")
    (pkg / "b.py").write_text("def f():\n    from . import c\n")
    (pkg / "c.py").write_text("import pkg.a\n")
    assert import_graph(pkg) == {"__init__": set(), "a": {"b"}, "b": {"c"}, "c": {"a"}}


def test_trainer_has_no_import_cycle():
    cycle = find_cycle(import_graph(ROOT / "trainer"))
    assert cycle is None, "import cycle in trainer/: " + " -> ".join(cycle)
