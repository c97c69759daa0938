"""Preregistrations and runs for the outcome, review, calibration and report tests.

Runs are written through `logbook.eventlog.sink.EventSink` and `MetricsWriter`, exactly
as the trainer writes them; only the clock that stamps events (and the `time`
of metric rows) is the test's, so what happened when is known to the second.
"""

from __future__ import annotations

import hashlib
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

import logbook.eventlog.chain as chain
from logbook.core.project import Project, open_project
from logbook.promises.prereg import create_prereg
from logbook.promises.prereg_input import PreregInput
from logbook.eventlog.sink import EventSink, MetricsWriter
from logbook.runs.run_record import RunRecord, write_run_record

T0 = datetime(2026, 11, 30, 8, 0, tzinfo=timezone.utc).timestamp()


class StoryClock:
    """A clock the test moves: events are stamped with `now`, metric rows read `t`."""

    def __init__(self) -> None:
        self.t = T0

    def advance(self, seconds: float) -> float:
        self.t += seconds
        return self.t

    def __call__(self) -> str:
        self.t += 0.001  # every record a millisecond after the one before
        return datetime.fromtimestamp(self.t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@pytest.fixture
def story_clock(monkeypatch) -> StoryClock:
    c = StoryClock()
    monkeypatch.setattr(chain, "utc_now", c)
    return c


def make_prereg(project: Project, predictions: list[str], *, title: str = "qk-norm keeps the loss smooth",
                contingency: list[str] | None = None, config: str | None = None,
                now: datetime | None = None) -> str:
    inp = PreregInput(title=title, hypothesis="QK-norm keeps attention logits bounded, so the loss never spikes.",
                      predictions=predictions, contingency=list(contingency or []), config=config,
                      rationale="OLMo 2 and Kimi K2 report it.")
    # Before the story's runs (T0): a preregistration written after its run does not verify.
    return create_prereg(project, inp, now=now or datetime.fromtimestamp(T0 - 3600, timezone.utc)).id


def write_record(project: Project, run: str, prereg_id: str | None, *, status: str = "finished",
                 snapshot: str | None = None, config_hash: str = "c" * 64, prereg_config_hash: str | None = None,
                 deviations: list[str] | None = None, exploratory: bool = False,
                 author: str = "Lin Launcher <lin@example.org>") -> RunRecord:
    from logbook.promises.prereg import load_prereg

    in_force = [a.key for a in load_prereg(project, prereg_id).amendments] if prereg_id else None
    rec = RunRecord(run_id=run, created="2026-11-30T08:00:00Z", config_path="configs/story.yaml",
                    config_hash=config_hash, prereg_id=prereg_id, exploratory=exploratory, amendments=in_force,
                    prereg_config_hash=prereg_config_hash, snapshot={"commit": snapshot} if snapshot else {},
                    author=author, status=status, deviations=list(deviations or []))
    write_run_record(project, rec)
    return rec


def ts_at(t: float) -> str:
    """An event's `ts` for the POSIX time `t`, to the millisecond, as the sink writes it."""
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _row(step: int, attempt: int, loss: float, t: float) -> dict[str, Any]:
    return {"step": step, "attempt": attempt, "loss": loss, "time": t, "tokens": step * 1024, "lr": 1e-3,
            "grad_norm": 0.8, "tokens_per_s": 1024.0}


def attempt_one(clock: StoryClock, s: EventSink, m: MetricsWriter, prereg_id: str | None, upto: int = 60) -> None:
    """Steps 1..upto: a spike at 30 (skipped, not in the plan), a progress note at 50, checkpoints every 25."""
    s.emit("run_started", step=0, tokens=0, total_steps=100, world_size=2, prereg_id=prereg_id,
           snapshot_commit=None, torchelastic_restart_count=0, resumed_from_step=0,
           data_fingerprints={"stdlib": "ab" * 32})
    for step in range(1, upto + 1):
        m.write(_row(step, 1, 5.0 - 0.02 * step, clock.advance(1.0)))
        if step == 30:
            s.emit("divergence_detected", step=30, metric="loss", value=9.0, baseline=4.4, z=7.0,
                   action="skip", plan={"rule": None, "follows": False})
            s.emit("step_skipped", step=30, reason="loss spike", metric="loss", plan={"rule": None, "follows": False})
        if step % 25 == 0:
            m.write({"step": step, "attempt": 1, "val_loss": 4.5 - 0.01 * step, "time": clock.t})
            m.flush()
            s.emit("checkpoint_saved", step=step, path=f"ckpt/{step}", blocking_s=0.5)
        if step == 50:
            s.emit("milestone", step=50, fraction=0.5, total_steps=100, loss=4.0, goodput=0.9)
    m.flush()


def attempt_two(clock: StoryClock, s: EventSink, m: MetricsWriter, prereg_id: str | None, finish: bool = True,
                upto: int = 100) -> None:
    """Resumes at 50 after a SIGKILL at 60; a live clip change at 70, a scheduled mixture change at 80."""
    clock.advance(5.0)
    s.emit("restart", step=50, cause="signal", signal=9, prev_attempt=1, resumed_from_step=50, failed_at_step=60,
           steps_lost=10, seconds_lost=10.0, downtime_s=5.0)
    s.emit("run_started", step=50, total_steps=100, world_size=2, prereg_id=prereg_id, torchelastic_restart_count=1,
           resumed_from_step=50)
    for step in range(51, upto + 1):
        m.write(_row(step, 2, 4.0 - 0.01 * step, clock.advance(1.0)))
        if step == 70:
            s.emit("hparam_change", step=70, key="grad_clip", old=1.0, new=0.5, who="Ada Tester", source="live",
                   reason="grad norm creeping up; $x$ #read(\"/etc/passwd\")", request_id="r-1",
                   plan={"rule": None, "follows": False})
        if step == 80:
            s.emit("hparam_change", step=80, key="data.weights.stdlib", old=1.0, new=0.5, who="schedule",
                   source="schedule", reason="stage 2 of the mixture", plan={"rule": None, "follows": True})
        if step % 25 == 0:
            m.write({"step": step, "attempt": 2, "val_loss": 3.5 - 0.01 * step, "time": clock.t})
            m.flush()
            s.emit("checkpoint_saved", step=step, path=f"ckpt/{step}", blocking_s=0.5)
    m.flush()
    if finish:
        s.emit("run_finished", step=upto, final_loss=4.0 - 0.01 * upto, val_loss=3.5 - 0.01 * upto, wall_s=None)


def story_run(project: Project, clock: StoryClock, run: str, prereg_id: str | None, *, finish: bool = True,
              restart: bool = True, with_record: bool = True, **record: Any) -> Path:
    """A two-attempt run of 100 steps on 2 devices; returns its folder."""
    if with_record:
        write_record(project, run, prereg_id, status="finished" if finish else "running", **record)
    run_dir = project.run_dir(run)
    m = MetricsWriter(run_dir, flush_every=1000)
    attempt_one(clock, EventSink(run_dir, run, 1), m, prereg_id, upto=60 if restart else (100 if finish else 60))
    if restart:
        attempt_two(clock, EventSink(run_dir, run, 2), m, prereg_id, finish=finish, upto=100 if finish else 90)
    elif finish:
        EventSink(run_dir, run, 1).emit("run_finished", step=100, final_loss=3.0, val_loss=3.5)
    m.close()
    return run_dir


STORY_PREDICTIONS = [
    "loss@final < 4",  # 3.0 at step 100: confirmed
    "val_loss@final < 0.5",  # 2.5: refuted
    "restarts@final == 1",  # confirmed
    "spikes@final == 0",  # one spike: refuted
    "loss@step:55 < 10",  # attempt 2's value 3.45, not attempt 1's 3.9
    "val_loss@~60±10 < 10",  # evaluated every 25 steps: the nearest within 10 steps of 60 is step 50
    "restarts@step:40 == 0",  # the restart came after the run passed step 60
    "loss@50% < 3.95 ± 0.1",  # 4.0 at step 50: within tolerance
    "lr_changes@final == 0",  # the clip change is not a learning-rate change
]


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else "absent"


def project_of(repo: Path) -> Project:
    return open_project(repo)
