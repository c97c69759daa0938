"""The lineage of a run: its attempts, when each ran, how far it got and how it ended.

Read by streaming the run's event log once, keeping a few fields per attempt.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from logbook.eventlog.chain import iter_records
from logbook.eventlog.kinds import Event, ending, ends_attempt, ending_words, is_afterwards, is_kind, restart_cause


@dataclass
class Attempt:
    """One attempt of a run, as the event log saw it."""

    attempt: int
    started: str
    ended: str
    first_step: int | None = None
    last_step: int | None = None
    how: str = ""
    drill: bool = False

    def to_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["steps"] = "–" if self.first_step is None else f"{self.first_step:,} → {self.last_step:,}"
        d["started"] = self.started[:16].replace("T", " ") or "–"
        d["ended"] = self.ended[:16].replace("T", " ") or "–"
        return d


def run_lineage(events_path: Path) -> list[Attempt]:
    """The attempts of one run in order; the last one reads "no end recorded" while it runs."""
    attempts: dict[int, Attempt] = {}
    strength: dict[int, int] = {}
    aborted_at: dict[int, int] = {}
    for rec in iter_records(events_path):
        a, ts = rec.get("attempt"), rec.get("ts")
        if not isinstance(a, int) or not isinstance(ts, str):
            continue
        if is_afterwards(rec):  # written about the run later: no attempt's life
            continue
        cur = attempts.get(a)
        if cur is None:
            cur = attempts[a] = Attempt(a, ts, ts)
        cur.ended = max(cur.ended, ts)
        step = rec.get("step")
        if isinstance(step, int):
            cur.first_step = step if cur.first_step is None else min(cur.first_step, step)
            cur.last_step = step if cur.last_step is None else max(cur.last_step, step)
        if ending(rec) == "aborted" and isinstance(step, int):
            aborted_at[a] = step
        # The attempt's own last words; a stronger ending (the run's end) replaces a weaker one.
        if ends_attempt(rec) and ends_attempt(rec) >= strength.get(a, 0):
            strength[a] = ends_attempt(rec)
            cur.how = ending_words(rec) or ""
            cur.drill = bool(rec.get("drill"))  # the ending was a drill's doing, not a real failure
        elif is_kind(rec, "restart"):  # the next attempt's first words say how the one before it ended
            data = Event.of(rec).data
            prev = data.get("prev_attempt")
            if isinstance(prev, int) and strength.get(prev, 0) < 3:
                strength[prev] = 3
                if prev not in attempts:
                    attempts[prev] = Attempt(prev, "", "")
                attempts[prev].how = restart_cause(data)
                attempts[prev].drill = bool(rec.get("drill"))
            fail = data.get("failed_at_step")
            if isinstance(prev, int) and isinstance(fail, int):
                p = attempts[prev]
                p.last_step = fail if p.last_step is None else max(p.last_step, fail)
    for k, step in aborted_at.items():
        # An abort ends the attempt at its last completed step, as run_aborted and the console say; the
        # diverging step after it (its detection, its drill) was never applied.
        attempts[k].last_step = step
    order = sorted(attempts)
    for i, k in enumerate(order):
        a = attempts[k]
        if not a.how:
            a.how = ("no end recorded yet (running, or lost without a trace)" if i == len(order) - 1
                     else f"no end recorded; attempt {order[i + 1]} followed")
        if a.drill:
            a.how += " (drill)"
    return [attempts[k] for k in order]
