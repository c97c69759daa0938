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

from collections.abc import Iterable
from pathlib import Path

from logbook.eventlog.chain import iter_records
from logbook.promises.predictions import milestone_step  # noqa: F401  (a fraction's step is the grammar's fact)
from logbook.eventlog.eventschema import is_kind

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
