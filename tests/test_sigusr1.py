"""SIGUSR1 from outside (Slurm's `--signal=USR1@90`): the real trainer saves, says so, exits 75, and resumes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT
from runhelpers import events, of_kind

pytestmark = pytest.mark.slow

MICRO = ROOT / "configs" / "micro-test.yaml"
STEPS = 60


def _command(repo: Path) -> list[str]:
    return [sys.executable, "-m", "trainer", "--project", str(repo), "--run", "usr1", str(MICRO),
            f"train.steps={STEPS}", "train.eval_every=0", "checkpoint.every=50", "checkpoint.background=false"]


def _env() -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CI": "true"}
    env.pop("TORCHELASTIC_ERROR_FILE", None)
    return env


def _signal_at_step(proc: subprocess.Popen, heartbeat: Path, step: int) -> None:
    deadline = time.monotonic() + 120
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            beat = json.loads(heartbeat.read_bytes().strip() or b"{}")
        except (OSError, ValueError):
            beat = {}
        if beat.get("step", 0) >= step:
            proc.send_signal(signal.SIGUSR1)
            return
        time.sleep(0.002)


def test_sigusr1_saves_records_preempted_exits_75_and_a_relaunch_resumes_from_that_save(logbook_repo):
    repo = logbook_repo
    proc = subprocess.Popen(_command(repo), cwd=repo, env=_env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    _signal_at_step(proc, repo / ".logbook" / "heartbeat" / "usr1.json", 5)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 75, err[-2000:]

    evs = events(repo, "usr1")
    [pre] = of_kind(evs, "preempted")
    saved = pre["data"]["saved_step"]
    assert pre["data"]["signal"] == "SIGUSR1" and not pre["drill"]
    # The save was made on the signal (not the every-50 schedule) and is on disk, complete.
    assert 5 <= saved < 50
    assert saved in [e["step"] for e in of_kind(evs, "checkpoint_saved")]
    assert not of_kind(evs, "run_finished")

    res = subprocess.run(_command(repo), cwd=repo, env=_env(), capture_output=True, text=True, timeout=180)
    assert res.returncode == 0, res.stderr[-2000:]
    evs = events(repo, "usr1")
    started = of_kind(evs, "run_started")
    assert [e["data"]["resumed_from_step"] for e in started] == [0, saved]
    [restart] = of_kind(evs, "restart")
    assert restart["data"]["cause"] == "preempted"
    assert len(of_kind(evs, "run_finished")) == 1
