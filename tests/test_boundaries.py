"""The CLI starts fast and never drags torch or wandb in."""

from __future__ import annotations

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
