"""What may follow a run's end in its event log, and which `outcome` lines a log may hold.

The chain proves that every line follows the one before it, not who wrote
it: anyone who can push can append a line and work its hash out again. Such a
line is caught only by what it says, so a run's log is read against the event
registry (`kinds.may_follow_end`):

- after `run_finished` nothing any attempt writes may follow;
- after `run_failed` or `run_aborted` only the first words of a resumed launch
  (`restart`, `run_started`, a `log_repaired`, or the launcher's `run_failed`).

Every attempt that left a line and was followed by a started one owes a
`restart` line, which the trainer writes before the next attempt's
`run_started`: a restart removed from the log is caught by the attempt numbers
the other lines still carry (a forger who also renumbers every later line and
drops the later attempt's `run_started` is not: only a stamped chain head, a
third party's time, pins the log's past).

Scorecards are records of their own (`runs/<run>/outcomes/<id>.json`), never
lines in a run's log: `logbook outcome` writes none. Older logbooks did append
an `outcome` event, and kept a copy of the scorecard in `runs/<run>/outcome.json`
naming it (`event: "<run>:<seq>"`), which `logbook migrate` carries into a
scorecard record (`legacy`). Those lines stay readable and verify. An `outcome`
line that nothing outside the log vouches for (no scorecard record or old
`outcome.json` names it, nor a vouched-for outcome line it supersedes) can only
have been appended by hand: it is reported, and the chronicle's scorecard is
the record's, never the line's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from logbook.eventlog.chain import iter_records
from logbook.eventlog.kinds import (
    ending, is_afterwards, is_kind, is_terminal, kind_of, may_follow_end, run_state,
)
from logbook.eventlog.files import iter_folder


@dataclass
class EndProblem:
    """One line of a run's log that the schema does not allow where it stands."""

    line: int
    """1-based line number in the log."""
    kind: str
    """after_end (an event after the run's end) | outcome_in_log (an outcome line nothing vouches for) |
    restart_missing (an attempt began after another that no `restart` line accounts for)."""
    message: str


def check_run_log(log: Path, rel: str) -> list[EndProblem]:
    """The lines of one run's intact log that may not stand where they are: each line right after an end that
    the schema does not allow there, every unvouched outcome line, and the first attempt begun without a
    restart line for the one before."""
    run_dir = log.parent
    vouched: set[str] | None = None
    problems: list[EndProblem] = []
    end: tuple[int, str] | None = None
    attempts = _Attempts()
    for line, rec in enumerate(iter_records(log), start=1):
        kind = kind_of(rec)
        if is_afterwards(rec):
            vouched = vouched_outcomes(run_dir, log) if vouched is None else vouched
            if f"{rec.get('run')}:{rec.get('seq')}" not in vouched:
                problems.append(EndProblem(line, "outcome_in_log", (
                    f"{_at(rel, line)} is an outcome event that no scorecard record names: logbook writes "
                    "scorecards as records of their own (runs/<run>/outcomes/), never into a run's log")))
            continue
        if end is not None and not may_follow_end(end[1], kind):
            state = run_state(end[1]) or "ended"
            problems.append(EndProblem(line, "after_end", (
                f"{_at(rel, line)} is a {kind} event after the run {state} (line {end[0]}, {end[1]}): "
                "nothing runs then to write it")))
        end = (line, kind) if kind is not None and is_terminal(kind) else None
        attempts.see(line, rec)
    problems += attempts.problems(rel)
    return problems


class _Attempts:
    """Every attempt that left a line and was followed by a started one owes a `restart` line (the trainer writes
    it first thing: `logbook.runs.attempt_ends.RunHistory.unrecorded_ends`). A restart removed from the log, its
    hashes worked out again, leaves the next attempt's `run_started` unexplained."""

    def __init__(self) -> None:
        self.seen: set[int] = set()
        self.ended: set[int] = set()  # finished: nothing owed
        self.covered: set[int] = set()
        self.starts: list[tuple[int, int, set[int]]] = []  # (line, attempt, attempts seen before it)

    def see(self, line: int, rec: dict[str, Any]) -> None:
        attempt, kind, data = rec.get("attempt"), kind_of(rec), rec.get("data") or {}
        if not isinstance(attempt, int) or isinstance(attempt, bool):
            return
        if is_kind(kind, "restart") and isinstance(data, dict):
            prev = data.get("prev_attempt")
            nxt = data.get("next_attempt") if isinstance(data.get("next_attempt"), int) else attempt
            self.covered.add(prev if isinstance(prev, int) else nxt - 1)
        elif is_kind(kind, "run_started"):
            self.starts.append((line, attempt, set(self.seen)))
        if ending(rec) == "finished":
            self.ended.add(attempt)
        self.seen.add(attempt)

    def problems(self, rel: str) -> list[EndProblem]:
        for line, attempt, before in self.starts:
            owed = sorted(k for k in before if k < attempt and k not in self.covered and k not in self.ended)
            if owed:
                return [EndProblem(line, "restart_missing", (
                    f"{_at(rel, line)}: attempt {attempt} started after attempt {owed[0]}, but no restart "
                    f"line says how attempt {owed[0]} ended (the trainer always writes one): a restart was "
                    "removed from the log"))]
        return []


def _at(rel: str, line: int) -> str:
    return f"{rel}: line {line}"


def vouched_outcomes(run_dir: Path, log: Path) -> set[str]:
    """`<run>:<seq>` of the outcome lines that a record outside the log names, and those they supersede."""
    named: set[str] = set()
    old = run_dir / "outcome.json"
    try:
        card = json.loads(old.read_text("utf-8")) if old.is_file() else None
    except (OSError, ValueError):
        card = None
    if isinstance(card, dict) and isinstance(card.get("event"), str):
        named.add(card["event"])
    for rec in iter_folder(run_dir / "outcomes"):
        named |= {str(rec[k]) for k in ("legacy", "migrated_from") if rec.get(k)}
    by_id: dict[str, dict[str, Any]] = {f"{r.get('run')}:{r.get('seq')}": r for r in iter_records(log)
                                        if is_afterwards(r)}
    todo = [n for n in named if n in by_id]
    vouched: set[str] = set()
    while todo:  # an old scorecard superseded a line before it: that line was vouched for in its time
        one = todo.pop()
        if one in vouched:
            continue
        vouched.add(one)
        sup = (by_id[one].get("data") or {}).get("supersedes")
        if isinstance(sup, str) and sup in by_id:
            todo.append(sup)
    return vouched


def keep_vouched(items: Iterator[Any], log: Path) -> Iterator[Any]:
    """The chronicle's items of one run log (`timeline.Item`), without the outcome lines nothing vouches for:
    a scorecard shown is a record's, never a line someone appended. Reads the run's records only when the log
    holds an outcome line."""
    vouched: set[str] | None = None
    for it in items:
        rec = it.rec
        if isinstance(rec, dict) and is_afterwards(rec):
            vouched = vouched_outcomes(log.parent, log) if vouched is None else vouched
            if f"{rec.get('run')}:{rec.get('seq')}" not in vouched:
                continue
        yield it
