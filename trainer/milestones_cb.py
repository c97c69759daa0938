"""Progress notes at the fractions of a run set in logbook.yaml (`milestones`), written by rank 0.

After every step, and once right after resuming, the callback asks
`logbook.runs.milestones.due_milestones` which notes are due (exactly once per
fraction across restarts: the fractions already in the event log are read
once per attempt, then kept in memory) and writes one `milestone` event each:
step, tokens, elapsed time and ETA, loss, throughput, goodput so far, what
happened since the last note, where each preregistered prediction stands, and
how far the run is from each forecast curve right now.

The event is written at once; its loss-curve plot is drawn by a child
process (waited for at `close`; logbook/chronicle/plot_process.py says why not
a thread), so training never waits for matplotlib. A plot that was never
finished (the machine went down) is drawn by `logbook render`. Reading the
run's records for goodput and the predictions happens only when a note is
due, a handful of times per run.
"""

from __future__ import annotations

import subprocess
import time
import traceback
from typing import Any

from logbook.chronicle.plot_process import spawn_progress_plot
from logbook.chronicle.plots import plot_ref, progress_plot_path
from logbook.records.eventschema import is_kind, kind_of, kinds_where
from logbook.records.prereg import load_prereg
from logbook.runs.facts import load_facts
from logbook.runs.milestones import due_milestones, emitted_milestones, milestone_step
from logbook.scoring.forecasts import forecast_standings
from logbook.scoring.outcome import judge, measure, point_step, value_at

from .callbacks import Callback

PLOT_TIMEOUT_S = 120.0
"""How long the end of an attempt waits for its plots to be drawn."""

SINCE_KINDS = {"restarts": kinds_where(counted_as="restarts"), "rollbacks": kinds_where(counted_as="rollbacks"),
               "changes": kinds_where(setting_change=True), "skips": kinds_where(counted_as="skipped_steps")}
"""What `since_last` counts, by the event kinds counted."""


class MilestoneNotes(Callback):
    """Writes the run's progress notes; rank 0 only."""

    name = "milestones"
    priority = 800  # after telemetry and the guard: the step's figures are final

    def __init__(self, fractions: list[float] | None = None) -> None:
        self.fractions = fractions
        self.emitted: set[float] = set()
        self._next_step: int | None = None
        self._metrics: dict[str, Any] = {}
        self._children: list[subprocess.Popen] = []
        self._prereg = None
        self._mark: tuple[float, int, int] | None = None  # (time, step, tokens) when this attempt began training

    # --- hooks ------------------------------------------------------------------------

    def pre_train(self) -> None:
        tr = self.trainer
        if self.fractions is None:
            self.fractions = list(tr.project.config.milestones)
        self.emitted = emitted_milestones(tr.run_dir)
        self._prereg = self._load_prereg()
        self._mark = (time.time(), tr.step, tr.tokens)
        self._plan()
        self._emit_due(tr.step, {})

    def post_step(self, step: int, metrics: dict[str, Any]) -> None:
        self._metrics = metrics

    def step_end(self, step: int) -> None:
        # After the step's evaluation and metrics row, so the note reports this step's figures.
        if self._next_step is not None and step >= self._next_step:
            self._emit_due(step, self._metrics)

    def close(self) -> None:
        for child in self._children:
            try:
                child.wait(timeout=PLOT_TIMEOUT_S)
            except subprocess.TimeoutExpired:  # `logbook render` draws it
                child.kill()
                child.wait()
        self._children.clear()

    # --- notes --------------------------------------------------------------------------

    def _plan(self) -> None:
        """The step of the next note due, so that a step with none costs one comparison."""
        total = self.trainer.cfg.train.steps
        pending = due_milestones(self.fractions or [], total, total, self.emitted)  # every one not written yet
        self._next_step = min((milestone_step(f, total) for f in pending), default=None)

    def _emit_due(self, step: int, metrics: dict[str, Any]) -> None:
        tr = self.trainer
        due = due_milestones(self.fractions or [], tr.cfg.train.steps, step, self.emitted)
        if not due:
            return
        tr.metrics.flush()  # the rows up to this step are read back for goodput and the predictions
        for f in due:
            self._emit_one(f, step, metrics)
            self.emitted.add(f)
        self._plan()

    def _emit_one(self, fraction: float, step: int, metrics: dict[str, Any]) -> None:
        tr = self.trainer

        facts = load_facts(tr.project, tr.run_id, tr.run_record)
        path = progress_plot_path(tr.project, tr.run_id, fraction)
        rep = facts.goodput_report()
        val = tr.last_val
        rec = tr.emit(
            "milestone", fraction=fraction, total_steps=tr.cfg.train.steps,
            elapsed_s=round(self._elapsed(facts), 3), eta_s=self._eta(step),
            **self._loss(metrics), val_loss=val[1] if val else None,
            val_step=val[0] if val else None, tokens_per_s=self._throughput(step, metrics),
            mfu=metrics.get("mfu"), goodput=None if rep.goodput is None else round(rep.goodput, 4),
            plot=plot_ref(tr.project, path), predictions=self._standings(facts),
            forecasts=forecast_standings(self._prereg, facts, step),
            since_last=since_last(facts.events),
        )
        seq = rec.get("seq") if isinstance(rec, dict) else None
        self._draw(step, path, seq)

    def _draw(self, step: int, path, seq: int | None) -> None:
        tr = self.trainer
        try:
            child = spawn_progress_plot(tr.project, tr.run_id, step, path, upto_seq=seq, max_attempt=tr.attempt)
        except OSError:  # a plot is a nicety: `logbook render` draws a missing one
            traceback.print_exc()
            return
        self._children.append(child)

    # --- figures ------------------------------------------------------------------------

    def _loss(self, metrics: dict[str, Any]) -> dict[str, Any]:
        """The loss to report: a step whose update the guard skipped reports the last accepted one as well."""
        tr = self.trainer
        loss = metrics.get("loss", tr.last_loss)
        if not metrics.get("skipped"):
            return {"loss": loss}
        step, accepted = tr.last_accepted or (None, None)
        return {"loss": accepted, "loss_step": step, "skipped_loss": loss}

    def _elapsed(self, facts) -> float:
        first = self.trainer.history.first_started()
        return time.time() - (first or self.trainer.started_at)

    def _eta(self, step: int) -> float | None:
        """Steps left at this attempt's pace so far (None before its first step)."""
        t0, s0, _ = self._mark
        done = step - s0
        if done <= 0:
            return None
        return round((self.trainer.cfg.train.steps - step) * (time.time() - t0) / done, 3)

    def _throughput(self, step: int, metrics: dict[str, Any]) -> float | None:
        if isinstance(metrics.get("tokens_per_s"), (int, float)):
            return float(metrics["tokens_per_s"])
        t0, s0, tok0 = self._mark
        dt = time.time() - t0
        return (self.trainer.tokens - tok0) / dt if step > s0 and dt > 0 else None

    def _load_prereg(self):
        rec = self.trainer.run_record
        if rec is None or not rec.prereg_id:
            return None

        try:
            return load_prereg(self.trainer.project, rec.prereg_id)
        except Exception:  # an unreadable preregistration is `logbook verify`'s to report, not training's
            return None

    def _standings(self, facts) -> list[dict[str, Any]]:
        if self._prereg is None:
            return []
        keys = getattr(self.trainer.run_record, "amendments", None)
        return [standing(p, facts) for p, _src in self._prereg.all_predictions(keys)]


def since_last(events: list[dict[str, Any]]) -> dict[str, int]:
    """Restarts, rollbacks, changes and skipped updates recorded since the last progress note."""
    start = 0
    for i, e in enumerate(events):
        if is_kind(e, "milestone"):
            start = i + 1
    out = dict.fromkeys(SINCE_KINDS, 0)
    for e in events[start:]:
        for key, kinds in SINCE_KINDS.items():
            if kind_of(e) in kinds:
                out[key] += 1
    return out


def standing(p, facts) -> dict[str, Any]:
    """Where one prediction stands now: met, on track, at risk, already failed or unknown.

    A prediction whose point has passed is settled (met or already failed); a
    count that only grows can fail early (`restarts <= 3` at the fourth
    restart). Otherwise the current value is judged as if it were final: on
    the wrong side or within the tolerance is "at risk".
    """
    m = measure(p, facts)
    status, _within, _ = judge(p, m)
    if status == "refuted":
        label = "already failed"
    elif status == "confirmed":  # judged only once it cannot change any more
        label = "met"
    else:
        step, _ = point_step(p, facts)
        passed = step is not None and facts.last_step is not None and facts.last_step >= step
        # A point already passed with nothing measured there stays unknown: today's value says nothing of it.
        now = m if m.value is not None or passed else value_at(p.metric, facts, None)
        if now.value is None:
            label = "unknown"
        else:
            verdict = p.verdict(now.value)
            label = "on track" if verdict == "confirmed" else "at risk"
            m = now
    value = None if m.value is None else round(float(m.value), 6)
    return {"expr": p.to_text(), "status": label, "value": value}
