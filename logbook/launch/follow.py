"""Following a run from any terminal (`logbook tail`): its events as they are written, and its progress.

The event log and the metrics stream are read the way the launcher reads
them (`EventTail`: complete lines only, so a line being written is read once
it is whole). `follow` yields what a person should see, in order; it never
prints. With `until_end` it returns once the run has ended (a terminal or
preemption event, or a launcher gone from this host without one).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from logbook.core.project import Project
from logbook.launch.watch import EventTail
from logbook.eventlog.kinds import is_kind, run_state
from logbook.runs.status import EventLine, event_line, follow_files, is_quiet, launcher_gone

PROGRESS_EVERY_S = 2.0
"""Least seconds between two progress lines (a step of a tiny run takes milliseconds)."""


@dataclass
class Progress:
    """Where the training stands, from the latest metric row."""

    attempt: int | None
    step: int
    total_steps: int | None
    loss: float | None
    tokens_per_s: float | None
    eta_s: float | None
    """Seconds to the last step at the recent step time."""


@dataclass
class Ended:
    """The run ended: `state` as its log says (or `gone`), and in words."""

    state: str
    how: str


Item = EventLine | Progress | Ended


def follow(project: Project, run_id: str, *, until_end: bool, poll_s: float = 0.5, last: int = 10,
           progress_every_s: float = PROGRESS_EVERY_S, sleep: Callable[[float], None] = time.sleep) -> Iterator[Item]:
    """Yield the last `last` events, then (with `until_end`) each new event and progress line until the run ends."""
    events_path, metrics_path = follow_files(project, run_id)  # every row, not the committed, thinned stream
    ev_tail, m_tail = EventTail(events_path, from_end=False), EventTail(metrics_path, from_end=True)
    first = ev_tail.new()
    total = total_steps_of(first)
    for rec in [r for r in first if _shown(r)][-last:] if last else []:
        yield event_line(rec)
    ended = _ending(first)
    if ended is not None or not until_end:
        if ended is not None and until_end:
            yield ended
        return
    said_at, said_step = 0.0, None
    while True:
        new = ev_tail.new()
        total = total_steps_of(new) or total
        for rec in new:
            if _shown(rec):
                yield event_line(rec)
        ended = _ending(new)
        if ended is not None:
            yield ended
            return
        rows = [r for r in m_tail.new() if isinstance(r.get("step"), int) and "loss" in r]
        if rows and time.monotonic() - said_at >= progress_every_s and rows[-1]["step"] != said_step:
            said_at, said_step = time.monotonic(), rows[-1]["step"]
            yield progress_of(rows[-1], total)
        gone = launcher_gone(project, run_id)
        if gone:
            yield Ended("gone", f"its launcher ({gone}) is gone without recording how the run ended")
            return
        sleep(poll_s)


def _shown(rec: dict[str, Any]) -> bool:
    return not is_quiet(rec) or rec.get("drill") is True


def total_steps_of(records: list[dict[str, Any]]) -> int | None:
    """The run's total steps as the last `run_started` among `records` says, if one does."""
    totals = [r["data"]["total_steps"] for r in records if is_kind(r, "run_started")
              and isinstance(r.get("data"), dict) and isinstance(r["data"].get("total_steps"), int)]
    return totals[-1] if totals else None


def _ending(records: list[dict[str, Any]]) -> Ended | None:
    """The run's end among `records`, if they hold one (its last lifecycle event is no `running`)."""
    state = None
    for r in records:
        state = run_state(r) or state
    if state in (None, "running"):
        return None
    last = [r for r in records if run_state(r)][-1]
    step = f" at step {last['step']:,}" if isinstance(last.get("step"), int) else ""
    return Ended(state, f"{state}{step}")


def progress_of(row: dict[str, Any], total: int | None) -> Progress:
    """Where the training stands by one metric row (also `logbook run`'s live line)."""
    step = row["step"]
    step_s = row.get("step_s") if isinstance(row.get("step_s"), (int, float)) else None
    eta = (total - step) * step_s if total and step_s else None
    tps = row.get("tokens_per_s") if isinstance(row.get("tokens_per_s"), (int, float)) else None
    loss = row.get("loss") if isinstance(row.get("loss"), (int, float)) else None
    return Progress(row.get("attempt") if isinstance(row.get("attempt"), int) else None, step, total, loss, tps, eta)
