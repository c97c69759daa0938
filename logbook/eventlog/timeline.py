"""Stream every run's event log and the team's notes in time order, one day at a time.

The chronicle never loads all logs at once: each log is read line by line, the
streams are merged by timestamp, and consumers see one UTC day's records at a
time. To render a single day cheaply, a log is entered by binary search on the
timestamps of its lines (they are written in order under the log's lock)
instead of being read from the start.

Ordering is by an *effective* timestamp: the running maximum of the `ts`
values in that log, so a clock that stepped backwards between two attempts on
different hosts can never split a day or reorder a log's own lines. Records
keep their own `ts` for display.

Notes are one file each, written by many people on many clocks: each is
filed under its own timestamp (no running maximum across writers), so one
clock that runs a day ahead misfiles only its own notes, never a teammate's.
"""

from __future__ import annotations

import heapq
import itertools
import json
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import date, timedelta
from pathlib import Path
from typing import Any, NamedTuple

from logbook.core.errors import TamperedError, UsageError
from logbook.core.fsutil import log_tail
from logbook.core.project import Project
from logbook.eventlog.files import iter_folder

NOTES_SOURCE = "note"
_TS_RE = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}")
_DAY_RE = re.compile(r"^\d{4}-\d{2}-\d{2}$")

RUN_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def check_run_id(run_id: str) -> str:
    """Refuse ids that could escape their folder or be read as options, and the notes' own name."""
    if not RUN_ID_RE.match(run_id or "") or ".." in run_id:
        raise UsageError(
            f"invalid run id {run_id!r}",
            hint="use letters, digits, '.', '_' and '-', starting with a letter or digit",
        )
    if run_id == NOTES_SOURCE:  # entry ids are SOURCE:SEQ, so `note:3` must keep meaning the third note
        raise UsageError(f"the run id {run_id!r} is reserved for the team's notes", hint="choose another run id")
    return run_id


class Item(NamedTuple):
    """One line of one log, placed in time. `rec` is None for an unreadable line.

    A tuple so that the merge compares items directly: (ts, rank, source, line)
    is unique per line, so `rec` itself is never compared.
    """

    ts: str  # effective timestamp (ordering and the day it belongs to)
    rank: int  # run events before notes at the same instant
    source: str  # run id, or NOTES_SOURCE
    line: int  # position in the stream, ties broken in file order
    rec: dict[str, Any] | None

    @property
    def day(self) -> str:
        return self.ts[:10]


@dataclass(frozen=True)
class TornTail:
    """A log whose last line is incomplete (an append cut short by a kill)."""

    source: str
    path: Path
    nbytes: int
    day: str | None  # the day of the last complete record, where the notice goes


def run_log_path(project: Project, run_id: str) -> Path:
    return project.run_dir(run_id) / "events.jsonl"


def list_event_runs(project: Project) -> list[str]:
    """Runs that have an event log, sorted by id (folders whose name is not a valid run id are left out)."""
    if not project.runs_dir.is_dir():
        return []
    return sorted(p.name for p in project.runs_dir.iterdir()
                  if (p / "events.jsonl").is_file() and RUN_ID_RE.match(p.name) and ".." not in p.name
                  and p.name != NOTES_SOURCE)


def sources(project: Project, runs: Iterable[str] | None = None) -> list[tuple[str, Path]]:
    """(run id, event log path) of every run log the chronicle reads, in a fixed order."""
    out = [(r, run_log_path(project, r)) for r in (list_event_runs(project) if runs is None else sorted(runs))]
    for _, path in out:
        _refuse_if_linked(project, path)
    return out


def _stream_folder(folder: Path, source: str, rank: int, since: str | None, until: str | None,
                   skip_migrated: bool = False) -> Iterator[Item]:
    """One-file records of `folder` written on days in [since, until], each at its own time, in (time, id) order."""
    one_day = since if since and since == until else None  # the file names say the day: read only that day's
    items = []
    for n, rec in enumerate(iter_folder(folder, day=one_day)):
        ts = rec.get("ts")
        if not valid_ts(ts) or (since and ts[:10] < since) or (until and ts[:10] > until):
            continue
        if skip_migrated and rec.get("migrated_from"):
            continue  # the old layout's event it was copied from is in the run's log and shows already
        items.append(Item(ts, rank, source, n, rec))
    items.sort(key=lambda it: (it.ts, str(it.rec.get("id"))))
    return iter([it._replace(line=i) for i, it in enumerate(items)])


def stream_notes(project: Project, *, since: str | None = None, until: str | None = None) -> Iterator[Item]:
    """The notes written on days in [since, until], each at its own timestamp, in (time, id) order."""
    return _stream_folder(project.notes_dir, NOTES_SOURCE, 1, since, until)


def stream_outcomes(project: Project, run: str, *, since: str | None = None, until: str | None = None) -> Iterator[Item]:
    """A run's scorecard records on days in [since, until]: entries of the run, after its own events at one instant."""
    return _stream_folder(project.run_dir(run) / "outcomes", run, 2, since, until, skip_migrated=True)


def _refuse_if_linked(project: Project, path: Path) -> None:
    """A log reached through a symlink could be any file: reading it as empty would make a renderer
    drop the days it held, so it is refused instead."""
    if not path.is_symlink() and not path.parent.is_symlink() and not path.parent.parent.is_symlink():
        return  # entries/runs/<run>/events.jsonl with no link on the way stays inside (two lstats, not a realpath)
    inside = project.entries.resolve()
    if path.is_symlink() or (path.exists() and not path.resolve().is_relative_to(inside)):
        rel = path.relative_to(project.root).as_posix()
        raise TamperedError(f"{rel} is a symlink or leads outside the logbook, so it is not read",
                            hint=f"put the plain file back from git (`git checkout HEAD -- {rel}`)")


def valid_ts(ts: Any) -> bool:
    return isinstance(ts, str) and bool(_TS_RE.match(ts))


def check_day(value: str, what: str = "date") -> str:
    if not _DAY_RE.match(value or ""):
        raise UsageError(f"{what} must look like 2026-12-01, got {value!r}")
    try:
        date.fromisoformat(value)
    except ValueError:
        raise UsageError(f"{what} {value!r} is not a calendar date") from None
    return value


def day_before(day: str) -> str:
    return (date.fromisoformat(day) - timedelta(days=1)).isoformat()


def line_ts(raw: bytes) -> str | None:
    try:
        rec = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return None
    ts = rec.get("ts") if isinstance(rec, dict) else None
    return ts if valid_ts(ts) else None


def seek_day(f, day: str) -> int:
    """Offset of the first complete line whose `ts` is on or after `day` (binary search).

    Lines whose timestamp cannot be read count as "after", so the search never
    skips past a day it should include; a few extra lines are read instead.
    """
    size = f.seek(0, os.SEEK_END)

    def line_at_or_after(pos: int) -> tuple[int, bytes]:
        if pos == 0:
            f.seek(0)
        else:
            f.seek(pos - 1)
            f.readline()  # finish the line that `pos - 1` is in
        start = f.tell()
        return start, f.readline()

    lo, hi = 0, size
    while lo < hi:
        mid = (lo + hi) // 2
        start, raw = line_at_or_after(mid)
        if not raw.endswith(b"\n"):
            hi = mid  # end of file or torn tail: the answer is at or before here
            continue
        ts = line_ts(raw)
        if ts is None or ts[:10] >= day:
            hi = mid
        else:
            lo = start + len(raw)
    start, _ = line_at_or_after(lo)
    return start


def stream_log(source: str, path: Path, *, since: str | None = None, until: str | None = None) -> Iterator[Item]:
    """Items of one log with effective timestamps, restricted to days in [since, until]."""
    rank = 1 if source == NOTES_SOURCE else 0
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        return
    with f:
        # Start a day early so the running maximum is warmed up the same way a
        # full read would have it (it only differs for a clock that jumped a day).
        offset = seek_day(f, day_before(since)) if since else 0
        f.seek(offset)
        eff: str | None = None
        pending_bad = 0
        for n, raw in enumerate(f):
            if not raw.endswith(b"\n"):
                return  # torn tail: reported separately by `torn_tail`
            rec: Any
            try:
                rec = json.loads(raw)
            except (ValueError, UnicodeDecodeError):
                rec = None
            ts = rec.get("ts") if isinstance(rec, dict) else None
            if not isinstance(rec, dict) or not valid_ts(ts):
                if eff is None:
                    pending_bad += 1  # placed with the first readable record
                elif (not since or eff[:10] >= since) and (not until or eff[:10] <= until):
                    yield Item(eff, rank, source, n, None)
                continue
            eff = ts if eff is None or ts > eff else eff
            day = eff[:10]
            if until and day > until:
                return
            if since and day < since:
                pending_bad = 0
                continue
            for k in range(pending_bad):
                yield Item(eff, rank, source, n - pending_bad + k, None)
            pending_bad = 0
            yield Item(eff, rank, source, n, rec)


def torn_tail(source: str, path: Path) -> TornTail | None:
    """The torn last line of a log, if any, and the day of the last good record (O(1) reads)."""
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        return None
    with f:
        tail = log_tail(f)
    if tail.complete_end == tail.size:
        return None  # empty, or ends with a newline: nothing is torn
    ts = line_ts(tail.last_line) if tail.last_line is not None else None
    return TornTail(source, path, tail.size - tail.complete_end, ts[:10] if ts else None)


def merged(project: Project, *, runs: Iterable[str] | None = None, notes: bool = True,
           since: str | None = None, until: str | None = None) -> Iterator[Item]:
    """All logs' items in effective-time order."""
    from logbook.eventlog.runends import keep_vouched

    logs = sources(project, runs)
    streams = [keep_vouched(stream_log(s, p, since=since, until=until), p) for s, p in logs]
    streams += [stream_outcomes(project, s, since=since, until=until) for s, _ in logs]
    if notes:
        streams.append(stream_notes(project, since=since, until=until))
    return heapq.merge(*streams)


def by_day(items: Iterator[Item]) -> Iterator[tuple[str, list[Item]]]:
    """Group a time-ordered stream into (day, that day's items); one day in memory at a time."""
    for day, group in itertools.groupby(items, key=lambda it: it[0][:10]):
        yield day, list(group)


def days_of(source: str, path: Path) -> list[str]:
    """The distinct days a log has records on, streaming (a handful of strings in memory)."""
    seen: list[str] = []
    for it in stream_log(source, path):
        if not seen or seen[-1] != it.day:
            seen.append(it.day)
    return sorted(set(seen))
