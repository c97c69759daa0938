"""Clock warnings for the records people write: a clock that runs ahead or went back.

Every record is filed under the day of its own timestamp, so a clock that is
wrong affects only its own records. It can still mislead a reader, so a record
written while something looks wrong carries a `clock_warnings` list of
sentences, and the chronicle shows them with the record:

- the writer's clock is behind the same writer's previous record (it went back);
- a record already in the logbook is dated more than `AHEAD_S` after the
  writer's now: either that record's clock ran ahead or this one is behind.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

AHEAD_S = 300.0
"""Five minutes: more than ordinary drift between laptops, far less than a wrong time zone."""


def _parse(ts: str) -> datetime | None:
    try:
        return datetime.fromisoformat(ts.replace("Z", "+00:00"))
    except (TypeError, ValueError):
        return None


def _span(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 60:.0f} min"


def clock_warnings(now: str, email: str, existing: Iterable[tuple[str, dict[str, Any]]]) -> list[str]:
    """Sentences about the clock of a record about to be written at `now` by `email`.

    `existing` yields (citable id, record) for the records already in the logbook.
    """
    t = _parse(now)
    if t is None:
        return []
    mine: tuple[datetime, str] | None = None
    ahead: tuple[datetime, str, str] | None = None
    for rid, rec in existing:
        ts = _parse(str(rec.get("ts") or ""))
        if ts is None:
            continue
        who = str(rec.get("email") or "").lower()
        if who and who == email.lower() and (mine is None or ts > mine[0]):
            mine = (ts, rid)
        elif (ts - t).total_seconds() > AHEAD_S and (ahead is None or ts > ahead[0]):
            ahead = (ts, rid, str(rec.get("author") or rec.get("reviewer") or who or "unknown"))
    out = []
    if mine is not None and mine[0] > t:
        out.append(f"written at {now[:19]}Z, {_span((mine[0] - t).total_seconds())} before this writer's previous "
                   f"record {mine[1]}: this writer's clock went back")
    if ahead is not None:
        out.append(f"{ahead[1]} by {ahead[2]} is dated {_span((ahead[0] - t).total_seconds())} after this writer's "
                   f"clock: one of the two clocks is wrong")
    return out
