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


def test_no_logbook_module_imports_torch():
    for path in (ROOT / "logbook").rglob("*.py"):
        text = path.read_text()
        for line in text.splitlines():
            s = line.strip()
            assert not s.startswith(("import torch", "from torch")), f"{path} imports torch"
            assert not s.startswith(("import wandb", "from wandb")), f"{path} imports wandb"


def test_command_modules_never_import_the_cli_package_that_imports_them():
    # logbook.cli imports every command module to register it; one that imports
    # logbook.cli back sees it half-initialised. What they share lives in _app.
    for path in (ROOT / "logbook" / "cli").glob("*_cmd.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                package = node.module if node.level == 0 else (node.level == 1 and node.module is None and "logbook.cli")
                assert package != "logbook.cli", f"{path.name}:{node.lineno} imports logbook.cli"
