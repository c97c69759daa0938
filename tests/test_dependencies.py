"""Every package the tests import is installed by `pip install -e '.[test]'`, so a fresh machine runs them all."""

from __future__ import annotations

import ast
import importlib.metadata as md
import re
import sys
import tomllib

from conftest import ROOT


def _requirement_names(reqs: list[str], extras: dict[str, list[str]], project: str, seen: set[str]) -> set[str]:
    names: set[str] = set()
    for req in reqs:
        m = re.match(r"\s*([A-Za-z0-9_.\-]+)(?:\[([^\]]+)\])?", req)
        if not m:
            continue
        name = m.group(1).lower().replace("_", "-")
        if name == project and m.group(2):  # logbook[train] inside an extra
            for extra in (x.strip() for x in m.group(2).split(",")):
                if extra not in seen:
                    seen.add(extra)
                    names |= _requirement_names(extras.get(extra, []), extras, project, seen)
        else:
            names.add(name)
    return names


def _declared_for_tests() -> set[str]:
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = meta.get("optional-dependencies", {})
    return (_requirement_names(meta["dependencies"], extras, meta["name"], set())
            | _requirement_names(extras.get("test", []), extras, meta["name"], {"test"}))


def _imported_by_tests() -> set[str]:
    mods: set[str] = set()
    for path in (ROOT / "tests").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.Import):
                mods |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                mods.add(node.module.split(".")[0])
    local = {p.stem for p in (ROOT / "tests").glob("*.py")} | {p.name for p in ROOT.iterdir() if p.is_dir()}
    return mods - set(sys.stdlib_module_names) - local - {"__future__"}


def test_every_third_party_module_the_tests_import_is_installed_by_the_test_extra():
    declared = _declared_for_tests()
    dists = md.packages_distributions()
    missing = []
    for mod in sorted(_imported_by_tests()):
        names = {d.lower().replace("_", "-") for d in dists.get(mod, [])}
        if not names & declared:
            missing.append(f"{mod} (distribution {', '.join(sorted(names)) or 'not installed'})")
    assert not missing, "tests import packages that pyproject.toml's `test` extra does not install: " + "; ".join(missing)


def test_the_readme_test_command_installs_the_test_extra_and_ci_runs_it():
    readme = (ROOT / "README.md").read_text()
    command = "python3 -m pip install -e '.[test]' && python3 -m pytest"
    assert command in readme
    assert command in (ROOT / ".ci" / "run").read_text()
