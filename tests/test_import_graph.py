"""Packages are layered: no module imports, however indirectly, a module that imports it back.

trainer/ reaches the logbook through one seam, `logbook.api`, and nothing else.

Every import counts: at module level, inside functions, and under
`if TYPE_CHECKING` (a type-only cycle still means two modules that cannot be
read, or moved, one without the other). logbook/ and trainer/ are also layered
by folder: each subpackage imports only those below it, as docs/architecture.md draws.
"""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import ROOT

LOGBOOK_LAYERS = ("core", "eventlog", "records", "promises", "runs", "scoring", "proof", "chronicle", "launch",
                  "guard")
"""logbook/'s subpackages, lowest first; the CLI, the demo and the package root sit above them all."""
TOP_LAYER = ("cli", "integrations")
"""Subpackages at the top, beside `api.py` and the demo: they may import the API and anything below.

`integrations/` holds the framework adapters; nothing else imports them (see
`test_no_logbook_module_outside_the_adapters_imports_them`).
"""
SAME_LAYER = {"trust": "promises"}
"""trust/ holds the records' proofs (third-party time, signatures): verify calls them, a preregistration is signed
with them, and they read preregistrations and git records."""


def _module_name(package: Path, path: Path) -> str:
    parts = list(path.relative_to(package.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(package: Path) -> dict[str, set[str]]:
    """{module: modules of the same package it imports}, with dotted names, for every .py file under `package`.

    Any form counts: `from . import x`, `from .x import y`, `from ..x import y`,
    `import pkg.x`, `from pkg.x import y`, `from pkg import x`.
    """
    paths = {_module_name(package, p): p for p in sorted(package.rglob("*.py"))}
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text("utf-8"), filename=str(path))):
            if isinstance(node, ast.Import):
                deps |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(here[:len(here) - node.level + 1] + ([base] if base else []))
                subs = {f"{base}.{a.name}" for a in node.names} & paths.keys()
                deps |= subs if len(subs) == len(node.names) else subs | {base}
        graph[name] = {d for d in deps if d in paths and d != name}
    return graph


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


def _layer(module: str) -> int:
    """A logbook module's layer: its subpackage's place in LOGBOOK_LAYERS; above them all when in none."""
    parts = module.split(".")
    sub = SAME_LAYER.get(parts[1], parts[1]) if len(parts) > 2 else ""
    return LOGBOOK_LAYERS.index(sub) if sub in LOGBOOK_LAYERS else len(LOGBOOK_LAYERS)


TRAINER_LAYERS = ("job", "checkpoints", "observe", "guard", "config", "nn", "core", "launch")
"""trainer/'s parts, lowest first: its rooms (subpackages), `config` for trainer/config.py and `core` for the other
modules at its top. config.py gathers every room's config section (the guard's, the observers') into one
`TrainConfig`, and the model, data and optimizer read theirs from it, so it sits between guard/ and nn/; the rest
of the core puts the rooms together into an attempt, and launch/ runs that attempt (`python -m trainer`).
The package's own `__init__.py` (exit codes, imported from logbook.api) sits below them all."""
TRAINER_CORE = ("__init__.py", "__main__.py", "config.py", "loop.py", "restore.py", "components.py", "faults.py",
                "live_control.py", "compiling.py", "startup.py")
"""The modules at trainer/'s top: the attempt itself, which reads every room. restore.py puts a checkpoint back
into the loop's trainer (model, optimizer, RNG, data, callbacks, the guard's rollback), and compiling.py's warm-up
runs the trainer's first step ahead of time, so both need the loop and stay beside it."""


def _trainer_rooms() -> set[str]:
    return {p.parent.name for p in (ROOT / "trainer").glob("*/__init__.py")}


def _trainer_layer(module: str) -> int:
    """A trainer module's layer: its room's, or config's or the core's place in TRAINER_LAYERS; -1 for the package."""
    parts = module.split(".")
    if len(parts) == 1:
        return -1
    if parts[1] in _trainer_rooms():
        return TRAINER_LAYERS.index(parts[1])
    return TRAINER_LAYERS.index("config" if parts[1] == "config" else "core")


def test_find_cycle_names_the_modules_of_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_import_graph_counts_type_checking_in_function_and_nested_imports(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .b import B\n")
    (pkg / "b.py").write_text("def f():\n    from . import c\n")
    (pkg / "c.py").write_text("import pkg.a\nfrom pkg.sub import d\n")
    (pkg / "sub" / "d.py").write_text("from ..b import f\n")
    assert import_graph(pkg) == {"pkg": set(), "pkg.a": {"pkg.b"}, "pkg.b": {"pkg.c"},
                                 "pkg.c": {"pkg.a", "pkg.sub.d"}, "pkg.sub": set(), "pkg.sub.d": {"pkg.b"}}


def test_trainer_has_no_import_cycle():
    cycle = find_cycle(import_graph(ROOT / "trainer"))
    assert cycle is None, "import cycle in trainer/: " + " -> ".join(cycle)


def test_logbook_has_no_import_cycle():
    cycle = find_cycle(import_graph(ROOT / "logbook"))
    assert cycle is None, "import cycle in logbook/: " + " -> ".join(cycle)


def test_each_logbook_layer_imports_only_the_layers_below_it():
    upward = [f"{a} imports {b}" for a, deps in sorted(import_graph(ROOT / "logbook").items()) for b in sorted(deps)
              if _layer(b) > _layer(a)]
    assert upward == [], "a lower layer reaches up (move the shared piece down; see docs/architecture.md)"


def test_no_logbook_module_outside_the_adapters_imports_them():
    # The adapters import transformers or Lightning at their top: a module that
    # imported one would drag a framework into the CLI, or fail where none is installed.
    reach = [f"{a} imports {b}" for a, deps in sorted(import_graph(ROOT / "logbook").items()) for b in sorted(deps)
             if b.startswith("logbook.integrations") and not a.startswith("logbook.integrations")]
    assert reach == [], "only a user's script imports logbook.integrations.<framework>"


def test_every_logbook_module_sits_in_a_layer():
    loose = sorted(p.name for p in (ROOT / "logbook").glob("*.py")
                   if p.name not in ("__init__.py", "__main__.py", "demo.py", "api.py"))
    assert loose == [], "put these in the layer they belong to (see docs/architecture.md)"
    known = set(LOGBOOK_LAYERS) | set(TOP_LAYER) | set(SAME_LAYER)
    unplaced = sorted(p.parent.name for p in (ROOT / "logbook").glob("*/__init__.py") if p.parent.name not in known)
    assert unplaced == [], "name these subpackages' layer here and in docs/architecture.md"


def test_every_trainer_module_outside_the_core_sits_in_a_room():
    loose = sorted(p.name for p in (ROOT / "trainer").glob("*.py") if p.name not in TRAINER_CORE)
    assert loose == [], "put these in the room they belong to (see docs/architecture.md), or name them in TRAINER_CORE"


def test_every_trainer_room_has_its_place_among_the_layers():
    placed = set(TRAINER_LAYERS) - {"config", "core"}
    assert sorted(_trainer_rooms() ^ placed) == [], "give each room of trainer/ its place in TRAINER_LAYERS"


def test_each_trainer_layer_imports_only_the_layers_below_it():
    upward = [f"{a} imports {b}" for a, deps in sorted(import_graph(ROOT / "trainer").items()) for b in sorted(deps)
              if _trainer_layer(b) > _trainer_layer(a)]
    assert upward == [], "a lower part of trainer/ reaches up (move the shared piece down; see docs/architecture.md)"


SEAM = "logbook.api"
"""The one module of `logbook` a trainer imports (issue 37; the public API of issue 39)."""


def logbook_imports_besides_the_seam(package: Path) -> list[str]:
    """`file:line: module` for each import of `logbook` other than the seam, anywhere in `package`'s files.

    Every form counts, at module level or inside a function: `import logbook`,
    `import logbook.x`, `from logbook import x` (even `from logbook import api`:
    one spelling keeps the rule greppable), `from logbook.x import y`.
    """
    found = []
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text("utf-8"), filename=str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            else:
                continue
            found += [f"{path.relative_to(package.parent)}:{node.lineno}: {n}" for n in names
                      if (n == "logbook" or n.startswith("logbook.")) and n != SEAM]
    return found


def test_the_trainer_imports_only_the_seam_from_logbook():
    besides = logbook_imports_besides_the_seam(ROOT / "trainer")
    assert besides == [], "the trainer talks to the logbook only through logbook/api.py: add what it needs there"


def names_taken_from_the_seam_outside_its_surface(package: Path, surface: list[str]) -> list[str]:
    """`file:line: name` for each name `package` imports from the seam that is not in its `__all__`."""
    found = []
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text("utf-8"), filename=str(path))):
            if isinstance(node, ast.ImportFrom) and node.module == SEAM:
                found += [f"{path.relative_to(package.parent)}:{node.lineno}: {a.name}" for a in node.names
                          if a.name not in surface]
    return found


def test_the_trainer_takes_only_the_public_names_from_the_seam():
    """The bundled trainer reaches the logbook as HF, Lightning and a script do: through `__all__` alone."""
    import logbook.api

    assert names_taken_from_the_seam_outside_its_surface(ROOT / "trainer", logbook.api.__all__) == []


def test_the_surface_check_finds_a_name_outside_it(tmp_path):
    pkg = tmp_path / "trainer"
    pkg.mkdir()
    (pkg / "a.py").write_text("from logbook.api import Run, RunHistory\nfrom logbook.apis import X\n")
    assert names_taken_from_the_seam_outside_its_surface(pkg, ["Run"]) == ["trainer/a.py:1: RunHistory"]


def test_the_seam_check_finds_every_form_of_import(tmp_path):
    pkg = tmp_path / "trainer"
    pkg.mkdir()
    (pkg / "ok.py").write_text("from logbook.api import open_run\nimport logbook.api\nimport logbooks\n")
    (pkg / "top.py").write_text("from logbook.eventlog.sink import EventSink\n")
    (pkg / "late.py").write_text("def f():\n    import logbook.core.fsutil as fs\n")
    (pkg / "pkg.py").write_text("from logbook import api\n")
    assert logbook_imports_besides_the_seam(pkg) == [
        "trainer/late.py:2: logbook.core.fsutil", "trainer/pkg.py:1: logbook", "trainer/top.py:1: logbook.eventlog.sink"]


def _calls_and_defs(tree: ast.AST) -> tuple[list[str], list[str]]:
    """(string literals passed as the first argument of an `emit(...)` call, names defined or assigned)."""
    emitted, defined = [], []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and getattr(node.func, "attr", getattr(node.func, "id", None)) == "emit":
            emitted.append(str(node.args[0].value))
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            defined.append(node.name)
        elif isinstance(node, ast.Assign):
            defined += [t.id for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.Constant) and node.value == 1.4826:
            defined.append("1.4826")
    return emitted, defined


def test_the_spike_rule_and_the_progress_notes_are_defined_once_for_every_trainer():
    """The bundled trainer, the framework adapters and the wrapped command judge spikes and write progress notes
    with the same code: one module writes `milestone` events, one holds the spike test and its constants."""
    emits, rules = {}, {}
    for path in sorted([*(ROOT / "logbook").rglob("*.py"), *(ROOT / "trainer").rglob("*.py")]):
        emitted, defined = _calls_and_defs(ast.parse(path.read_text("utf-8")))
        rel = path.relative_to(ROOT).as_posix()
        if "milestone" in emitted:
            emits[rel] = emitted.count("milestone")
        for name in ("spike_signal", "robust_stats", "MAD_TO_SIGMA", "1.4826"):
            if name in defined:
                rules.setdefault(name, []).append(rel)
    assert emits == {"logbook/runs/milestones.py": 1}
    assert rules == {n: ["logbook/runs/spikes.py"] for n in ("spike_signal", "robust_stats", "MAD_TO_SIGMA", "1.4826")}
