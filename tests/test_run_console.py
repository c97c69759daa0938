"""`logbook run`'s own console: plain summaries in a pipe, a spinner and a live progress line in a terminal.

Both run a real (tiny) run. In a pipe: no control codes, each event a person
wants as its registry summary (the restart after a drill kill, the guard's
answer to a drill spike, checkpoints, milestones), and none of torchrun's own
lines, which go to its log file. In a real tmux pane (skipped without tmux):
the spinner names a start-up phase, then the progress line is drawn.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT

from logbook.eventlog.kinds import label

DRILLS = "faults=[{kind: sigkill, step: 6}, {kind: nan, step: 12, attempt: 2}]"


def _env(**extra: str) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), **extra}
    for name in ("CI", "LOGBOOK_DEBUG", "SLURM_JOB_ID"):
        env.pop(name, None)  # plain output must come from the pipe alone
    return env


@pytest.mark.slow  # a real training run
def test_in_a_pipe_the_run_prints_plain_summaries_and_none_of_torchruns_lines(logbook_repo):
    proc = subprocess.run([sys.executable, "-m", "logbook", "run", "--exploratory", "micro-test", DRILLS,
                           "--run-id", "piped", "--max-restarts", "2"],
                          cwd=logbook_repo, env=_env(), capture_output=True, text=True, timeout=300)
    out = proc.stderr
    assert proc.returncode == 0, out
    assert "\x1b" not in out + proc.stdout and "\r" not in out  # no colour, no cursor moves, no redraws
    lines = out.splitlines()
    for kind in ("restart", "fault_injected", "divergence_detected", "checkpoint_saved", "milestone"):
        assert any(f"  {label(kind)}: " in ln or f"  {label(kind)} " in ln for ln in lines), (kind, out)
    assert re.search(r"^step \d+/30 · loss ", out, re.M), out  # the progress, as plain lines
    # torchrun's and the workers' own lines went to the log file, not to the person.
    for noise in ("torch.distributed", "exitcode", "SignalException", "telemetry: MFU unknown", "attempt 2: training steps"):
        assert noise not in out, (noise, out)
    logs = list((logbook_repo / ".logbook" / "torchrun" / "piped").glob("*/torchrun.log"))
    assert logs and "attempt 2: training steps" in logs[0].read_text("utf-8", "replace")


@pytest.mark.slow  # a real training run
@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_in_a_terminal_a_spinner_names_the_phase_then_the_progress_line_is_drawn(logbook_repo):
    sock, session = f"logbook-test-{os.getpid()}", "run"
    env = _env(TERM="xterm-256color")
    cmd = (f"cd {logbook_repo} && {sys.executable} -m logbook run --exploratory micro-test train.steps=300 "
           "--run-id paned; sleep 30")
    tmux = ["tmux", "-L", sock]
    started = time.monotonic()
    subprocess.run([*tmux, "new-session", "-d", "-s", session, "-x", "100", "-y", "30", cmd], env=env, check=True)
    try:
        spinner_at = progress_at = None
        while time.monotonic() - started < 180 and progress_at is None:
            pane = subprocess.run([*tmux, "capture-pane", "-p", "-t", session], capture_output=True, text=True).stdout
            if spinner_at is None and re.search(r"^[⠀-⣿] (checking|starting|attempt)", pane, re.M):
                spinner_at = time.monotonic() - started
            if re.search(r"^[⠀-⣿] step \d+/300 · loss [\d.]+ · [\d,]+ tok/s · ETA .* · attempt 1", pane, re.M):
                progress_at = time.monotonic() - started
            time.sleep(0.05)
        assert spinner_at is not None, pane
        assert spinner_at < 3.0, f"the spinner took {spinner_at:.2f} s (goal: under 1 s; 3 s allows a loaded machine)"
        assert progress_at is not None, pane
        print(f"spinner after {spinner_at:.2f} s, progress line after {progress_at:.2f} s")
    finally:
        subprocess.run([*tmux, "kill-server"], check=False)


GUARD_DRILLS = ("train.steps=40", "checkpoint.every=5", "checkpoint.background=false", "guard.warmup=8",
                "guard.cooldown=3", "guard.skip_batches=4",
                "faults=[{kind: spike, step: 12}, {kind: spike, step: 18}, {kind: sigkill, step: 30}]")


@pytest.mark.slow  # a real training run
def test_an_80_column_pane_shows_a_rollback_and_a_restart_wrapped_at_spaces_never_by_the_terminal(logbook_repo):
    """Every line the run prints fits the pane or is wrapped by the logbook under its own text: tmux's joined
    capture (-J undoes the terminal's own wraps) is the same as what the pane shows."""
    sock, session = f"logbook-test80-{os.getpid()}", "run80"
    env = _env(TERM="xterm-256color")
    for name in ("COLUMNS", "LINES"):
        env.pop(name, None)
    overrides = " ".join(f"'{o}'" for o in GUARD_DRILLS)
    cmd = (f"cd {logbook_repo} && {sys.executable} -m logbook run --exploratory micro-test {overrides} "
           f"--run-id drill-in-a-pane; echo __done__ $?; sleep 60")
    tmux = ["tmux", "-L", sock]
    subprocess.run([*tmux, "-f", "/dev/null", "new-session", "-d", "-s", session, "-x", "80", "-y", "24", cmd],
                   env=env, check=True)
    try:
        deadline, pane = time.monotonic() + 240, ""
        while "__done__" not in pane and time.monotonic() < deadline:
            time.sleep(0.5)
            pane = subprocess.run([*tmux, "capture-pane", "-p", "-S", "-1000", "-t", session],
                                  capture_output=True, text=True).stdout
        joined = subprocess.run([*tmux, "capture-pane", "-p", "-J", "-S", "-1000", "-t", session],
                                capture_output=True, text=True).stdout
    finally:
        subprocess.run([*tmux, "kill-server"], check=False)
    assert "__done__ 0" in pane, pane
    rows = [r.rstrip() for r in pane.split("__done__")[0].splitlines() if r.strip()]
    assert [r.rstrip() for r in joined.split("__done__")[0].splitlines() if r.strip()] == rows
    assert all(len(r) <= 80 for r in rows)
    text = "\n".join(rows)
    assert re.search(r"rollback: rolled back from step 17 to 10, batches\s+12–18 skipped", text), text
    assert "not in the plan" not in text  # an exploratory run has no plan for an action to depart from
    assert re.search(r"restart: attempt 1 → 2: killed by SIGKILL, resumed\s+from step 25", text), text
    assert "finished: 2 attempts, 1 restart." in text


def test_a_number_and_its_unit_stay_on_one_line_when_a_line_wraps():
    from logbook.cli.console_cmd import wrap_line

    head = "22:50:48  a1  step       5  "
    lines = wrap_line(head, "checkpoint saved: step 5 saved, training waited 71 ms", 80).splitlines()
    assert lines == [head + "checkpoint saved: step 5 saved, training waited", " " * len(head) + "71 ms"]
    assert "\u00a0" not in wrap_line(head, "resumed from step 25, 5 steps lost, 0.5 s down " * 3, 80)
