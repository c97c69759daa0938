"""Real hash-chained event logs with chosen timestamps, for the chronicle tests.

Events are written through `logbook.eventlog.sink.EventSink` exactly as the trainer
writes them; only the clock that stamps them is set by the test, so a scenario
can span days and the rendered files can be compared byte for byte.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import logbook.eventlog.chain as chain
from logbook.core.project import Project, open_project
from logbook.eventlog.sink import EventSink, MetricsWriter


class Clock:
    """Stamps the next records with `at`; each record advances it by a second."""

    def __init__(self) -> None:
        self.now = "2026-11-30T20:00:00.000000Z"
        self._n = 0

    def set(self, ts: str) -> None:
        self.now = ts if ts.endswith("Z") else ts + ".000000Z"
        self._n = 0

    def __call__(self) -> str:
        # Records written at the same `set` moment stay in order, a second apart.
        base = self.now
        self._n += 1
        if self._n == 1:
            return base
        sec = int(base[17:19]) + self._n - 1
        return f"{base[:17]}{min(sec, 59):02d}{base[19:]}"


@pytest.fixture
def clock(monkeypatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(chain, "utc_now", c)
    return c


def project_of(repo: Path) -> Project:
    return open_project(repo)


def sink(project: Project, run: str, attempt: int) -> EventSink:
    return EventSink(project.run_dir(run), run, attempt)


def qknorm_story(project: Project, clock: Clock, run: str = "qknorm") -> None:
    """Two days of a run: start, checkpoints, a milestone, a restart, a divergence, a rollback, a change, a drill."""
    s1 = sink(project, run, 1)
    clock.set("2026-11-30T20:00:00")
    s1.emit("run_started", step=0, tokens=0, config_hash="9b1f" * 16, config_path="configs/1b.yaml", world_size=8,
            prereg_id="2026-11-30-qknorm-removes-spikes-3f9a", exploratory=False, snapshot_commit="1c2e4d7" + "0" * 33,
            total_steps=100_000, tokens_per_step=262_144, device="cuda", resumed_from_step=0)
    for k in range(1, 13):
        clock.set(f"2026-11-30T{20 + k // 6:02d}:{(k * 9) % 60:02d}:00")
        s1.emit("checkpoint_saved", step=k * 1000, tokens=k * 1000 * 262_144, path=f"ckpt/step-{k * 1000}",
                blocking_s=0.3 + (k % 3) * 0.1, total_s=3.0, bytes=1_000_000_000)
    clock.set("2026-11-30T23:10:00")
    s1.emit("milestone", step=10_000, tokens=10_000 * 262_144, fraction=0.1, total_steps=100_000, elapsed_s=11_520,
            eta_s=104_400, loss=3.41, val_loss=3.52, tokens_per_s=245_000, goodput=0.97,
            predictions=[{"expr": "val_loss@final < 2.31", "status": "on_track", "value": 3.52}],
            since_last={"restarts": 0, "rollbacks": 0, "changes": 0, "skips": 0})
    s4 = sink(project, run, 4)
    clock.set("2026-12-01T03:12:00")
    s4.emit("restart", step=41_200, tokens=10_800_000_000, cause="signal", signal=-9, detail=None, prev_attempt=3,
            resumed_from_step=41_000, failed_at_step=41_200, steps_lost=200, seconds_lost=400.0, downtime_s=125.0)
    clock.set("2026-12-01T05:47:00")
    s4.emit("divergence_detected", step=47_315, tokens=12_403_000_000, metric="loss", value=2.91, baseline=2.44,
            scale=0.077, threshold=6.0, z=6.1, nonfinite=False, batch_ids=[47_315], action="skip",
            plan={"rule": 1, "follows": True})
    s4.emit("step_skipped", step=47_315, reason="loss spike", metric="loss")
    clock.set("2026-12-01T06:02:00")
    s4.emit("rollback", step=47_390, from_step=47_390, to_step=47_000, steps_lost=390, batches_skipped=[47_000, 47_300],
            checkpoint="ckpt/step-47000", kept=["spikes/step-47000", "spikes/step-47500"], plan={"rule": 1, "follows": True})
    s4.emit("lr_scaled", step=47_000, old=1.0, new=0.9, factor=0.9, reason="contingency rule 1", plan={"rule": 1, "follows": True})
    clock.set("2026-12-01T09:02:00")
    s4.emit("hparam_change", step=52_010, key="grad_clip", old=1.0, new=0.5, reason="grad norm creeping up since 47k",
            who="j.doe", source="live", request_id="r-12",
            config_diff="--- config\n+++ config\n@@ -1 +1 @@\n-grad_clip: 1.0\n+grad_clip: 0.5\n",
            plan={"rule": None, "follows": False})
    clock.set("2026-12-01T10:00:00")
    s4.emit("fault_injected", step=52_100, drill=True, fault="kill", at_step=52_100)


def write_metrics(project: Project, run: str, upto: int, every: int = 100) -> None:
    w = MetricsWriter(project.run_dir(run))
    for step in range(0, upto + 1, every):
        w.write({"step": step, "loss": 3.0 + 4.0 / (1 + step / 2000), "attempt": 1})
    w.close()
