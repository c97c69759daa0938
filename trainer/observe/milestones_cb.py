"""Progress notes at the fractions of a run set in logbook.yaml (`milestones`), emitted by rank 0.

After every step, and once right after resuming, the callback hands the
logbook's `ProgressNotes` what the loop knows (step, tokens, elapsed time and
ETA, loss, validation loss, throughput and MFU); it writes the notes due,
exactly once per fraction across restarts, as it does for every trainer.

Everything else a note shows is the logbook's to work out from the records,
outside the training process: goodput so far, what happened since the last
note, where each prediction and forecast stands (`logbook.scoring.progress`),
and the loss-curve plot, drawn when the chronicle is rendered (the launcher
renders as events arrive and once more when torchrun exits).
"""

from __future__ import annotations

import time
from typing import Any


from .callbacks import Callback


class MilestoneNotes(Callback):
    """Writes the run's progress notes; rank 0 only."""

    name = "milestones"
    priority = 800  # after telemetry and the guard: the step's figures are final

    def __init__(self, fractions: list[float] | None = None) -> None:
        self.fractions = fractions
        self.notes: Any = None
        self._next_step: int | None = None
        self._metrics: dict[str, Any] = {}
        self._mark: tuple[float, int, int] | None = None  # (time, step, tokens) when this attempt began training

    # --- hooks ------------------------------------------------------------------------

    def pre_train(self) -> None:
        tr = self.trainer
        if self.fractions is None:
            self.fractions = list(tr.project.config.milestones)
        self.notes = tr.book.run.progress_notes(self.fractions, tr.cfg.train.steps)
        self._mark = (time.time(), tr.step, tr.tokens)
        self._plan()
        self._emit_due(tr.step, {})

    def post_step(self, step: int, metrics: dict[str, Any]) -> None:
        self._metrics = metrics

    def step_end(self, step: int) -> None:
        # After the step's evaluation and metrics row, so the note reports this step's figures.
        if self._next_step is not None and step >= self._next_step:
            self._emit_due(step, self._metrics)

    # --- notes --------------------------------------------------------------------------

    def _plan(self) -> None:
        """The step of the next note due, so that a step with none costs one comparison."""
        self._next_step = self.notes.next_step() if self.notes is not None else None

    def _emit_due(self, step: int, metrics: dict[str, Any]) -> None:
        tr = self.trainer
        if self.notes is None:
            return
        if self.notes.write_due(tr.emit, step, lambda: self._figures(step, metrics), before=tr.metrics.flush):
            self._plan()

    def _figures(self, step: int, metrics: dict[str, Any]) -> dict[str, Any]:
        val = self.trainer.last_val
        return {"elapsed_s": round(self._elapsed(), 3), "eta_s": self._eta(step), **self._loss(metrics),
                "val_loss": val[1] if val else None, "val_step": val[0] if val else None,
                "tokens_per_s": self._throughput(step, metrics), "mfu": metrics.get("mfu")}

    # --- figures ------------------------------------------------------------------------

    def _loss(self, metrics: dict[str, Any]) -> dict[str, Any]:
        """The loss to report: a step whose update the guard skipped reports the last accepted one as well."""
        tr = self.trainer
        loss = metrics.get("loss", tr.last_loss)
        if not metrics.get("skipped"):
            return {"loss": loss}
        step, accepted = tr.last_accepted or (None, None)
        return {"loss": accepted, "loss_step": step, "skipped_loss": loss}

    def _elapsed(self) -> float:
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
