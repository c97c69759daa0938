"""Which progress notes are due: exactly once per configured fraction, across restarts.

The trainer asks `due_milestones` after every optimizer step, passing the
fractions already recorded in the run's event log (`emitted_milestones`), so
the answer survives any number of restarts: a milestone is never written twice,
and one that a restart jumped over (the attempt died between reaching it and
recording it, and resumed from a later checkpoint) is written at the first step
after the resume. The chronicle labels such a note "late" because its step is
past `milestone_step`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from logbook.eventlog.chain import iter_records
from logbook.promises.predictions import milestone_step  # a fraction's step is the grammar's fact
from logbook.eventlog.kinds import is_kind

_FRACTION_DIGITS = 9


def _norm(fraction: float) -> float:
    """Fractions are compared after rounding, so 0.1 read back from JSON matches 0.1 from YAML."""
    return round(float(fraction), _FRACTION_DIGITS)


def due_milestones(fractions: Iterable[float], total_steps: int, step: int, already_emitted: set[float]) -> list[float]:
    """Fractions whose step has been reached and that were not emitted yet, in increasing order.

    `step` is the number of completed steps. Call it after every step and once
    right after resuming (the checkpoint may be the run's last step). When
    several are due at once (a resume past more than one), all are returned,
    oldest first; the caller emits one event each.
    """
    done = {_norm(f) for f in already_emitted}
    due = []
    for f in sorted({_norm(f) for f in fractions}):
        if f not in done and step >= milestone_step(f, total_steps):
            due.append(f)
    return due


def emitted_milestones(run_dir: Path) -> set[float]:
    """Fractions that already have a `milestone` event in the run's log (torn tail ignored)."""
    out: set[float] = set()
    for rec in iter_records(Path(run_dir) / "events.jsonl"):
        if not is_kind(rec, "milestone"):
            continue
        data = rec.get("data")
        f = data.get("fraction") if isinstance(data, dict) else None
        if isinstance(f, (int, float)) and not isinstance(f, bool):
            out.add(_norm(f))
    return out


def is_late(fraction: float, total_steps: int, step: int) -> bool:
    """A note written at a later step than its fraction falls on (a restart jumped past it)."""
    return step > milestone_step(fraction, total_steps)


class ProgressNotes:
    """One run's progress notes, each written once across restarts: the one place a `milestone` event is emitted.

    The bundled trainer, the framework adapters' recorder and the wrapped
    command's launcher each hold one per attempt and hand it the figures
    they know; which notes are due is `due_milestones`, what was written
    before is read from the log once (`emitted_milestones`).
    """

    def __init__(self, fractions: Iterable[float], total_steps: int | None, run_dir: Path | None = None,
                 emitted: set[float] | None = None) -> None:
        self.fractions = [float(f) for f in fractions]
        self.total_steps = total_steps
        self.emitted = set(emitted) if emitted is not None else (emitted_milestones(run_dir) if run_dir else set())
        self._next = self._first_pending()

    def due(self, step: int) -> list[float]:
        """The fractions due at `step` and not written yet; a step before the next note costs one comparison."""
        if self._next is None or step < self._next:
            return []
        return due_milestones(self.fractions, self.total_steps, step, self.emitted)

    def next_step(self) -> int | None:
        """The step of the next note due (None: every note written)."""
        return self._next

    def _first_pending(self) -> int | None:
        if not self.total_steps:
            return None
        pending = due_milestones(self.fractions, self.total_steps, self.total_steps, self.emitted)
        return min((milestone_step(f, self.total_steps) for f in pending), default=None)

    def write_due(self, emit: Callable[..., Any], step: int, figures: Callable[[], dict[str, Any]],
                  before: Callable[[], Any] | None = None) -> list[float]:
        """Emit one `milestone` per fraction due at `step`, with `figures()`; the fractions written.

        `emit(kind, step=..., **fields)` writes an event; `before()` runs once
        first when a note is due (the metrics flushed: they are what the note
        is scored against); `figures()` is asked only then.
        """
        due = self.due(step)
        if not due:
            return []
        if before is not None:
            before()
        fields = figures()
        for f in due:
            emit("milestone", step=step, fraction=f, total_steps=self.total_steps, **fields)
            self.emitted.add(f)
        self._next = self._first_pending()
        return due
