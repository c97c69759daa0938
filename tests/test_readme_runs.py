"""The README's "A week with logbook" runs as written, in order, in a new repository.

Blocks a newcomer is told to run carry an HTML comment just before them (a
reader of the rendered README does not see it): `<!-- readme-test: run -->` runs
the block with `bash -e` and asserts exit 0; `<!-- readme-test: background -->`
starts it (the first terminal's `logbook run`) and lets the next block run
while it trains, as a second terminal would. Training is cut short by
`LOGBOOK_MAX_STEPS`, which the README mentions. `logbook` on PATH is this
checkout's (a shim over `python -m logbook`).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
MARK = re.compile(r"<!-- readme-test: (run|background) -->\s*```bash\n(.*?)```", re.S)
STEPS = "300"
"""The run must still be training when the second terminal's `set` and `stop` arrive; `stop` ends it early."""


def readme_blocks(text: str) -> list[tuple[str, str]]:
    """(mode, script) of every marked block, in README order."""
    return [(m.group(1), m.group(2)) for m in MARK.finditer(text)]


def test_the_readme_marks_the_week_and_the_yaml_is_the_shipped_example():
    text = (ROOT / "README.md").read_text("utf-8")
    blocks = readme_blocks(text)
    assert [mode for mode, _ in blocks] == ["run", "background", "run", "run"]
    assert "LOGBOOK_MAX_STEPS" in text
    shown = re.search(r"looks like this:\s*```yaml\n(.*?)```", text, re.S).group(1)
    shipped = (ROOT / "configs" / "prereg" / "qknorm.yaml").read_text("utf-8")
    assert yaml.safe_load(shown) == yaml.safe_load(shipped)


def _shim(tmp: Path) -> Path:
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "logbook"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m logbook "$@"\n')
    shim.chmod(0o755)
    return bin_dir


def _env(tmp: Path) -> dict[str, str]:
    env = {**os.environ, "PATH": f"{_shim(tmp)}{os.pathsep}{os.environ['PATH']}", "LOGBOOK_MAX_STEPS": STEPS,
           "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)}
    env.pop("LOGBOOK_DEBUG", None)
    return env


def _script(body: str, cwd_file: Path) -> str:
    # Each block starts where the previous one left off (`cd lab`), as in one terminal session.
    return f"set -e\ncd \"$(cat {cwd_file})\"\n{body}\npwd > {cwd_file}\n"


def _wait_for_start(cwd_file: Path, run: subprocess.Popen, timeout: float = 120) -> None:
    """Until the run's first attempt has started (its log has `run_started`): then `set` and `stop` reach it."""
    events = Path(cwd_file.read_text().strip()) / "entries" / "runs" / "qk-1" / "events.jsonl"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if events.exists() and "run_started" in events.read_text("utf-8"):
            return
        assert run.poll() is None, f"the run ended before the second terminal: {run.communicate()[0]}"
        time.sleep(0.2)
    pytest.fail("the run did not start in time")


def test_every_command_of_the_week_exits_0_in_a_new_repository(tmp_path):
    env = _env(tmp_path)
    cwd_file = tmp_path / "cwd"
    cwd_file.write_text(str(tmp_path / "work"))
    (tmp_path / "work").mkdir()
    background: subprocess.Popen | None = None
    for i, (mode, body) in enumerate(readme_blocks((ROOT / "README.md").read_text("utf-8"))):
        cmd = ["bash", "-c", _script(body, cwd_file)]
        if mode == "background":
            background = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            _wait_for_start(cwd_file, background)
            continue
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, f"block {i}:\n{body}\nexit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
        if background is not None:
            out, _ = background.communicate(timeout=300)
            assert background.returncode == 0, f"logbook run: exit {background.returncode}\n{out}"
            assert "Run qk-1 stopped" in out, out  # the second terminal's `stop` reached it
            background = None
    lab = Path(cwd_file.read_text().strip())
    assert lab.name == "lab" and (lab / "configs" / "tiny-cpu.yaml").is_file() and (lab / "cal.png").is_file()
