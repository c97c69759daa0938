"""`logbook status` health without a trainer: alive, stalled, a launcher gone, and the latest run.

The signs of life are real files: a run record and events written by the
event sink, the trainer's heartbeat file, and the launcher's lock taken with
`RunLock` (held by this process) or naming a process that has exited.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time

import pytest

from logbook.core.project import open_project
from logbook.eventlog.sink import EventSink
from logbook.runs.run_record import RunRecord, write_run_record
from logbook.runs.runlock import RunLock
from logbook.runs.status import STALL_FLOOR_S, latest_run, run_status


def _run(project, run_id: str, created: str = "2026-11-30T00:00:00Z", *, total: int = 1000) -> EventSink:
    write_run_record(project, RunRecord(run_id=run_id, created=created, config_path="c.yaml", config_hash="0" * 64,
                                        exploratory=True))
    sink = EventSink(project.run_dir(run_id), run_id, attempt=1)
    sink.emit("run_started", step=0, total_steps=total)
    return sink


def _beat(project, run_id: str, step: int, at: float) -> None:
    path = project.state_dir / "heartbeat" / f"{run_id}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"attempt": 1, "step": step, "time": at, "pid": 1}).ljust(120))


@pytest.fixture
def project(logbook_repo):
    return open_project()


def _hold_lock(project, run_id: str) -> RunLock:
    lock = RunLock(project.state_dir / "locks" / f"{run_id}.lock")
    lock.acquire(what=f"run {run_id}")
    return lock


def test_a_recent_heartbeat_is_alive_and_its_step_counts(project):
    _run(project, "r1")
    _beat(project, "r1", 40, time.time() - 1)
    lock = _hold_lock(project, "r1")
    try:
        st = run_status(project, "r1")
    finally:
        lock.release()
    assert (st.state, st.health, st.step, st.attempt) == ("running", "alive", 40, 1)
    assert st.how.startswith("last sign of life") and st.fraction == 0.04


def test_silence_past_the_floor_is_stalled(project):
    _run(project, "r1")
    t0 = time.time()
    _beat(project, "r1", 40, t0)
    lock = _hold_lock(project, "r1")
    try:  # looked at later: the event, the heartbeat and the lock are as the run left them
        st = run_status(project, "r1", now=t0 + STALL_FLOOR_S + 30)
        just_under = run_status(project, "r1", now=t0 + STALL_FLOOR_S - 30)
    finally:
        lock.release()
    assert (st.health, st.how) == ("stalled", "no sign of life for 2 min 30 s")
    assert just_under.health == "alive"


def test_a_launcher_gone_without_a_word_has_ended(project):
    _run(project, "r1")
    _beat(project, "r1", 40, time.time())
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # a pid that no longer runs, on this host
    lock_file = project.state_dir / "locks" / "r1.lock"
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    lock_file.write_text(f"pid {gone.pid} on {socket.gethostname()} since 2026-11-30T00:00:00Z\n")
    st = run_status(project, "r1")
    assert (st.state, st.health) == ("running", "ended")
    assert f"its launcher (pid {gone.pid} on" in st.how and "logbook run --resume r1" in st.how
    assert st.eta_s is None


def test_an_ended_run_says_how_in_the_registry_words(project):
    sink = _run(project, "r1")
    sink.emit("run_failed", step=12, reason="restarts exhausted")
    st = run_status(project, "r1")
    assert (st.state, st.health, st.how) == ("failed", "ended", "failed at step 12: restarts exhausted")
    assert [e.kind for e in st.last_events] == ["run_started", "run_failed"]
    assert st.last_events[-1].summary == "restarts exhausted"


def test_the_default_run_is_the_one_launched_last(project, cli):
    _run(project, "zz-older", created="2026-11-29T00:00:00Z")
    _run(project, "aa-newer", created="2026-11-30T00:00:00Z")
    assert latest_run(project) == "aa-newer"
    res = cli("status", "--json")
    assert res.exit_code == 0 and json.loads(res.stdout)["run"] == "aa-newer"


def test_no_runs_is_a_sentence_not_a_traceback(project, cli):
    res = cli("status")
    assert res.exit_code == 3  # NotFoundError is a refusal
    assert "error: no runs yet" in res.stderr and "logbook run" in res.stderr


def test_a_run_that_rolled_back_and_then_ended_is_at_the_step_it_ended_not_the_furthest_it_reached(project):
    sink = _run(project, "r9", total=100)
    sink.emit("checkpoint_saved", step=50, path="ckpt/50", blocking_s=0.1)
    sink.emit("divergence_detected", step=63, metric="loss", value=9.0)
    sink.emit("rollback", step=50, from_step=63, to_step=50)
    sink.emit("run_stopped", step=55, who="Ada", reason="enough", saved_step=55)
    st = run_status(project, "r9")
    assert (st.state, st.health, st.step) == ("stopped", "ended", 55)
    assert st.how.startswith("stopped at step 55")
