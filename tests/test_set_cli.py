"""`logbook set`: validation up front, refusals for unknown and ended runs, answers with --wait."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from contextlib import contextmanager

import pytest

from conftest import ROOT
from logbook.core.project import open_project
from logbook.launch.change_requests import list_pending, processed_dir
from logbook.eventlog.sink import EventSink
from logbook.runs.run_record import RunRecord, write_run_record


def _make_run(run_id: str = "r1", status: str = "running", last_event: str | None = "run_started"):
    project = open_project()
    write_run_record(project, RunRecord(run_id=run_id, created="2026-11-30T00:00:00Z", config_path="c.yaml",
                                        config_hash="0" * 64, status=status, exploratory=True))
    if last_event:
        sink = EventSink(project.run_dir(run_id), run_id, attempt=1)
        sink.emit("run_started", step=0)
        if last_event != "run_started":
            ending = {"reason": "ended in this test"} if last_event in ("run_failed", "run_aborted") else {}
            sink.emit(last_event, step=40, **ending)
    return project


@pytest.fixture
def running(logbook_repo):
    return _make_run()


@contextmanager
def trainer_answering(project, run_id: str = "r1", config=None):
    """A real control channel polling in a thread, as the training loop would at each step."""
    from trainer.config import TrainConfig
    from logbook.launch.live_channel import ControlChannel

    cfg = config or TrainConfig()
    sink = EventSink(project.run_dir(run_id), run_id, attempt=1)
    ch = ControlChannel(project, run_id, cfg, emit=sink.emit, grace_s=0)
    stop = threading.Event()

    def loop():
        step = 0
        while not stop.wait(0.02):
            step += 1
            ch.poll(step)

    t = threading.Thread(target=loop, daemon=True)
    t.start()
    try:
        yield cfg
    finally:
        stop.set()
        t.join()


def test_set_leaves_one_request_with_who_why_and_what(cli, running):
    res = cli("set", "r1", "lr=3e-4", "guard.window=64", "--reason", "grad norm creeping up")
    assert res.exit_code == 0, res.output
    (path,) = list_pending(running.control_dir("r1"))
    req = json.loads(path.read_text())
    assert req["changes"] == {"lr": 0.0003, "guard.window": 64} and isinstance(req["changes"]["guard.window"], int)
    assert req["who"] == "Ada Tester <ada@example.org>" and req["reason"] == "grad norm creeping up"
    assert req["run"] == "r1" and res.stdout.strip() == req["request_id"]
    assert "applies at the run's next step" in res.stderr
    assert not [p for p in path.parent.iterdir() if p.name.startswith(".")]  # no temp file left behind


@pytest.mark.parametrize("arg, message, hint", [
    ("lrr=1e-3", "`lrr` cannot be changed live", "did you mean `lr`?"),
    ("guard.spike_sigm=3", "`guard.spike_sigm` cannot be changed live", "did you mean `guard.spike_sigma`?"),
    ("momentum=0.9", "cannot be changed live", "logbook set --help"),
    ("lr=fast", "`lr` needs a number, got 'fast'", None),
    ("guard.window=64.5", "`guard.window` needs a whole number", None),
    ("lr=0", "`lr` = 0.0 is out of range: allowed (0, 1]", "peak learning rate"),
    ("lr_scale=11", "out of range: allowed (0, 10]", None),
    ("grad_clip=-1", "out of range", None),
    ("weight_decay=nan", "must be finite", None),
    ("data.weights.../x=1", "invalid data source name", None),
    ("lr", "expected key=value", None),
])
def test_bad_changes_are_refused_with_a_clear_message_and_nothing_written(cli, running, arg, message, hint):
    res = cli("set", "r1", arg, "--reason", "why")
    assert res.exit_code == 2, res.output
    assert message in res.stderr and "Traceback" not in res.output
    if hint:
        assert hint in res.stderr
    assert list_pending(running.control_dir("r1")) == []


def test_a_reason_is_required(cli, running):
    res = cli("set", "r1", "lr=1e-4")
    assert res.exit_code == 2 and "needs a reason" in res.stderr and "--reason" in res.stderr


def test_a_key_given_twice_is_refused(cli, running):
    res = cli("set", "r1", "lr=1e-4", "lr=2e-4", "--reason", "why")
    assert res.exit_code == 2 and "given twice" in res.stderr


def test_an_unknown_run_is_refused(cli, running):
    res = cli("set", "nope", "lr=1e-4", "--reason", "why")
    assert res.exit_code == 3 and "unknown run 'nope'" in res.stderr and "r1" in res.stderr


@pytest.mark.parametrize("status, last_event, says", [
    ("finished", "run_finished", "is finished"),
    ("failed", "run_failed", "is failed"),
    ("running", "run_finished", "is finished"),  # run.json is written once; the event log knows
    ("running", "run_aborted", "is aborted"),
])
def test_an_ended_run_is_refused(cli, logbook_repo, status, last_event, says):
    project = _make_run("done", status=status, last_event=last_event)
    res = cli("set", "done", "lr=1e-4", "--reason", "why")
    assert res.exit_code == 3, res.output
    assert says in res.stderr and "no longer takes changes" in res.stderr
    assert list_pending(project.control_dir("done")) == []


def test_a_run_whose_launcher_was_killed_is_refused_with_how_to_resume_it(cli, logbook_repo):
    import socket
    import subprocess

    project = _make_run("crashed", last_event="run_started")
    gone = subprocess.Popen(["true"])
    gone.wait()  # a pid no process has now
    locks = project.state_dir / "locks"
    locks.mkdir(parents=True, exist_ok=True)
    (locks / "crashed.lock").write_text(f"pid {gone.pid} on {socket.gethostname()} since 2026-11-30T00:00:00Z\n")
    res = cli("set", "crashed", "lr=1e-4", "--reason", "why")
    assert res.exit_code == 3 and "is not running: its launcher" in res.stderr, res.output
    assert "logbook run --resume crashed" in res.stderr
    assert list_pending(project.control_dir("crashed")) == []
    (locks / "crashed.lock").write_text(f"pid {os.getpid()} on {socket.gethostname()} since 2026-11-30T00:00:00Z\n")
    assert cli("set", "crashed", "lr=1e-4", "--reason", "why").exit_code == 0  # a live launcher takes it


def test_a_restarted_run_takes_changes_again(cli, logbook_repo):
    project = _make_run("again", last_event="run_failed")
    EventSink(project.run_dir("again"), "again", attempt=2).emit("restart", step=40, cause="signal")
    assert cli("set", "again", "lr=1e-4", "--reason", "why").exit_code == 0


def test_wait_prints_what_was_applied(cli, running):
    with trainer_answering(running) as cfg:
        res = cli("set", "r1", "grad_clip=0.5", "--reason", "clip harder", "--wait", "--timeout", "30")
    assert res.exit_code == 0, res.output
    assert res.stdout.startswith("applied at step ") and res.stdout.strip().endswith("grad_clip 1.0 -> 0.5")
    assert cfg.optim.grad_clip == 0.5


def test_wait_reports_a_rejection_with_exit_code_3(cli, running):
    with trainer_answering(running):
        res = cli("set", "r1", "data.weights.web=2", "--reason", "more web", "--wait", "--timeout", "30", "--json")
    assert res.exit_code == 3
    assert "rejected the change" in res.stderr and "no data source 'web'" in res.stderr
    assert json.loads(res.stdout)["outcome"]["status"] == "rejected"


def test_wait_gives_up_after_the_timeout_and_the_request_stays(cli, running):
    res = cli("set", "r1", "lr=1e-4", "--reason", "why", "--wait", "--timeout", "0.3")
    assert res.exit_code == 3 and "no answer from run r1 within 0.3 s" in res.stderr
    assert len(list_pending(running.control_dir("r1"))) == 1


def test_ctrl_c_while_waiting_says_the_request_stays_and_exits_130(cli, running, monkeypatch):
    import logbook.launch.change_requests as requests

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(requests, "wait_for_answer", interrupted)
    res = cli("set", "r1", "lr=1e-4", "--reason", "why", "--wait")
    assert res.exit_code == 130 and "stays pending and applies at the run's next step" in res.stderr, res.output
    assert len(list_pending(running.control_dir("r1"))) == 1


def test_json_prints_the_request(cli, running):
    res = cli("set", "r1", "checkpoint.every=25", "--reason", "save more often", "--json")
    assert res.exit_code == 0
    req = json.loads(res.stdout)
    assert req["changes"] == {"checkpoint.every": 25} and req["reason"] == "save more often"


def test_two_set_commands_at_once_are_both_answered(running):
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    cmd = [sys.executable, "-m", "logbook", "set", "r1"]
    with trainer_answering(running) as cfg:
        procs = [subprocess.Popen(cmd + [change, "--reason", f"change {i}", "--wait", "--timeout", "60"],
                                  cwd=running.root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for i, change in enumerate(["lr=2e-4", "weight_decay=0.05"])]
        outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert "lr 0.001 -> 0.0002" in outs[0][0] and "weight_decay 0.1 -> 0.05" in outs[1][0]
    assert cfg.optim.lr == 2e-4 and cfg.optim.weight_decay == 0.05
    assert len(list(processed_dir(running.control_dir("r1")).glob("*.json"))) == 2
