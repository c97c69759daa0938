"""Run events: how one event looks, and the run's log that holds them.

An event is one line of a run's hash-chained log (see `chain.py`):

    {"v": 1, "seq": 7, "ts": "2026-11-30T03:12:00.123456Z", "run": "...",
     "attempt": 2, "rank": 0, "step": 41200, "tokens": 10800000000,
     "kind": "restart", "drill": false, "data": {...}, "prev": "...", "hash": "..."}

`v` is the schema version: readers accept any record with the fields above and
treat unknown kinds generically, so a log written next year still reads today.

Each kind's meaning, payload fields and flags are owned by
`logbook.eventlog.kinds` (rendered as docs/events.md). Producers write the fields
registered there; readers must tolerate missing ones. Times are seconds
(float), steps and tokens integers.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from logbook.eventlog.chain import ChainedLog, LogContents, iter_records, read_log


class RunLog(ChainedLog):
    """The event log of one run."""


def read_events(path: Path) -> LogContents:
    return read_log(path)


def iter_events(path: Path) -> Iterator[dict[str, Any]]:
    return iter_records(path)


def event_record(
    kind: str,
    *,
    run: str,
    attempt: int,
    rank: int = 0,
    step: int | None = None,
    tokens: int | None = None,
    drill: bool = False,
    data: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The fields of an event before the log adds `v`, `ts`, `seq`, `prev`, `hash`."""
    return {
        "run": run,
        "attempt": int(attempt),
        "rank": int(rank),
        "step": None if step is None else int(step),
        "tokens": None if tokens is None else int(tokens),
        "kind": kind,
        "drill": bool(drill),
        "data": dict(data or {}),
    }
