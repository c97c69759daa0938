"""The CLI starts fast, never drags torch or wandb in, and its modules import downwards only."""

from __future__ import annotations

import ast
import subprocess
import sys

from conftest import ROOT


def _modules_after(code: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", code + "\nimport sys; print('\\n'.join(sys.modules))"],
        cwd=ROOT, check=True, capture_output=True, text=True,
    ).stdout
    return set(out.split())


def test_importing_logbook_cli_loads_neither_torch_nor_wandb():
    mods = _modules_after("import logbook, logbook.cli")
    assert "torch" not in mods
    assert "wandb" not in mods


def test_logbook_help_runs_without_torch_or_wandb():
    code = (
        "import sys\nfrom logbook.cli import app\n"
        "try:\n    app(['--help'])\nexcept SystemExit as e:\n    assert e.code == 0, e.code\n"
    )
    mods = _modules_after(code)
    assert "torch" not in mods and "wandb" not in mods
    assert "matplotlib" not in mods and "typst" not in mods


WANDB_MIRROR = ROOT / "logbook" / "runs" / "wandb_mirror.py"
"""The one logbook module that talks to W&B: it imports wandb inside the functions that call it, never at its top."""


def test_no_logbook_module_imports_torch():
    for path in (ROOT / "logbook").rglob("*.py"):
        text = path.read_text()
        for line in text.splitlines():
            s = line.strip()
            assert not s.startswith(("import torch", "from torch")), f"{path} imports torch"
            if path != WANDB_MIRROR:
                assert not s.startswith(("import wandb", "from wandb")), f"{path} imports wandb"


def test_the_wandb_mirror_imports_wandb_only_when_a_mirror_starts():
    def imports_wandb(node: ast.AST) -> bool:
        if isinstance(node, ast.Import):
            return any(a.name.split(".")[0] == "wandb" for a in node.names)
        return isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "wandb"

    tree = ast.parse(WANDB_MIRROR.read_text())
    functions = [f for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))]
    in_functions = {id(n) for f in functions for n in ast.walk(f)}
    wandb_imports = [n for n in ast.walk(tree) if imports_wandb(n)]
    assert wandb_imports, "the mirror no longer imports wandb: drop WANDB_MIRROR's exemption"
    assert [n.lineno for n in wandb_imports if id(n) not in in_functions] == [], "import wandb inside a function"
    mods = _modules_after("import logbook.runs.wandb_mirror\nfrom logbook.api import WandbConfig, WandbMirror")
    assert "wandb" not in mods and "torch" not in mods


def test_command_modules_never_import_the_cli_package_that_imports_them():
    # logbook.cli imports every command module to register it; one that imports
    # logbook.cli back sees it half-initialised. What they share lives in _app.
    for path in (ROOT / "logbook" / "cli").glob("*_cmd.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                package = node.module if node.level == 0 else (node.level == 1 and node.module is None and "logbook.cli")
                assert package != "logbook.cli", f"{path.name}:{node.lineno} imports logbook.cli"
