"""The days of the chronicle that the commits since a revision can have changed.

After a pull, the clone's hooks re-render the chronicle. A day file is a pure
function of the records it shows and of a few run-wide records (the run's
record, its preregistration, its scorecards, the reviews and errata pointing
into it), so only the days that the pulled commits touched need rendering
again. This module reads `git diff REV HEAD` and answers that set of days, or
None when it cannot tell (a changed template or setting, a deleted record, a
file it does not know), in which case everything is rendered.

A day is never left out for a change the renderer would show there: an
appended log adds the days from its first new record onward (a record's
place in time is the running maximum of the log's clocks, so a later day may
be the one that moves), a rewritten log adds every day it had before and has
now, a change to a run's record or scorecards adds all of the run's days, a
note its own day and the day it is an erratum to, a review the day of the
entry it judges. `tests/test_pulled_render.py` pins that a render of these
days leaves the same files as a full render, over pulls of every kind.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

from logbook.core.project import Project
from logbook.eventlog.timeline import days_of, line_ts, run_log_path, stream_log
from logbook.records import gitbind
from logbook.trust.setting_history import watched_paths

# Files under the logbook folder that no day page reads.
_NOT_SHOWN = ("reports/", "assets/", "site/", "README.md", ".gitattributes", ".gitignore")


def pulled_days(project: Project, since: str) -> set[str] | None:
    """Days whose page the commits in `since..HEAD` can have changed; None: render them all."""
    root = project.root
    if not _is_commit(root, since) or not _is_commit(root, "HEAD"):
        return None
    entries = project.entries.relative_to(root).as_posix()
    changes = _changes(root, since)
    whole = set(watched_paths(project))
    days: set[str] = set()
    runs_whole: set[str] = set()
    for status, path in changes:
        if path in whole or path.startswith("templates/"):
            return None  # how every day reads, or who may sign (shown on the days it changed)
        if not path.startswith(entries + "/"):
            continue  # the project's own code: no day shows it
        rel = path[len(entries) + 1:]
        if rel.startswith(_NOT_SHOWN) or _is_day_file(rel):
            if _is_day_file(rel):
                days.add(f"{rel[:4]}-{rel[5:7]}-{rel[8:10]}")  # a teammate's render of it came in: write ours
            continue
        if status not in ("A", "M"):
            return None  # a record deleted or retyped: a full render also removes what no longer has records
        found = _days_of_change(project, since, path, rel, runs_whole)
        if found is None:
            return None
        days |= found
    for run in sorted(runs_whole):
        days |= set(days_of(run, run_log_path(project, run)))
    return days


def _changes(root: Path, since: str) -> list[tuple[str, str]]:
    """(status letter, path) of each file that `since..HEAD` changed, renames seen as delete and add."""
    out = gitbind.git(root, "diff", "--name-status", "--no-renames", "-z", since, "HEAD").split("\0")
    pairs = [p for p in out if p]
    return [(pairs[i][:1], pairs[i + 1]) for i in range(0, len(pairs) - 1, 2)]


def _days_of_change(project: Project, since: str, path: str, rel: str, runs_whole: set[str]) -> set[str] | None:
    parts = rel.split("/")
    if parts[0] == "runs" and len(parts) >= 3:
        run = parts[1]
        if rel == f"runs/{run}/events.jsonl":
            return _log_days(project, since, path, run)
        if rel == f"runs/{run}/metrics.jsonl":
            return _metrics_days(project, since, path, run, runs_whole)
        runs_whole.add(run)  # run.json, scorecards, anything else of the run: all of its days
        return set()
    if parts[0] in ("notes", "reviews") and len(parts) == 2:
        return _record_days(project, since, path, runs_whole)
    if parts[0] == "prereg" and len(parts) == 2:
        runs_whole |= _runs_of_prereg(project, parts[1].split(".amend-")[0].removesuffix(".md"))
        return set()
    return None


def _log_days(project: Project, since: str, path: str, run: str) -> set[str] | None:
    old, new = _blobs(project.root, since, path)
    log = run_log_path(project, run)
    if new is None:
        return None
    if old is None or not new.startswith(old):
        # Written anew (or new here): every day it had and has.
        return set(days_of(run, log)) | _days_in(old or b"")
    added = _days_in(new[len(old):])
    return _days_from(run, log, min(added)) if added else set()


def _metrics_days(project: Project, since: str, path: str, run: str, runs_whole: set[str]) -> set[str] | None:
    """A progress note reads the rows written by its time: the days of the run from the first new row's."""
    old, new = _blobs(project.root, since, path)
    if new is None:
        return None
    added = new[len(old):] if old is not None and new.startswith(old) else None
    times = [_row_time(line) for line in (added or b"").splitlines() if line.strip()]
    if added is None or None in times:
        runs_whole.add(run)  # rewritten, or a row placed by its step alone: any note of the run may read it
        return set()
    if not times:
        return set()
    first = datetime.fromtimestamp(min(times), timezone.utc).strftime("%Y-%m-%d")
    return _days_from(run, run_log_path(project, run), first)


def _record_days(project: Project, since: str, path: str, runs_whole: set[str]) -> set[str] | None:
    """A note shows on its day and marks the entry it corrects; a review marks the entry it judges."""
    old, new = _blobs(project.root, since, path)
    days: set[str] = set()
    for blob in (old, new):
        if blob is None:
            continue
        try:
            rec = json.loads(blob)
        except (ValueError, UnicodeDecodeError):
            return None  # verify's to report; a full render shows where
        if not isinstance(rec, dict):
            return None
        ts = rec.get("ts")
        if isinstance(ts, str) and len(ts) >= 10:
            days.add(ts[:10])
        for target in (rec.get("about"), rec.get("entry")):
            if isinstance(target, str) and not _target_day(target, days, runs_whole):
                return None
    return days


def _target_day(target: str, days: set[str], runs_whole: set[str]) -> bool:
    """Add the day(s) an entry id points at; False when the id cannot be placed."""
    head, _, tail = target.rpartition(":")
    if head == "note" and len(tail) >= 8 and tail[:8].isdigit():
        days.add(f"{tail[:4]}-{tail[4:6]}-{tail[6:8]}")  # a note's id starts with its time
        return True
    if head and "/" not in head and ".." not in head:
        runs_whole.add(head)
        return True
    return False


def _runs_of_prereg(project: Project, prereg_id: str) -> set[str]:
    """Runs whose record answers to the preregistration (their notes score against it)."""
    out = set()
    if not project.runs_dir.is_dir():
        return out
    for p in project.runs_dir.glob("*/run.json"):
        try:
            rec = json.loads(p.read_bytes())
        except (OSError, ValueError, UnicodeDecodeError):
            continue
        if isinstance(rec, dict) and rec.get("prereg_id") == prereg_id:
            out.add(p.parent.name)
    return out


def _days_from(run: str, log: Path, first: str) -> set[str]:
    """The days of the run's log from `first` on, placed as the renderer places them."""
    return {it.day for it in stream_log(run, log, since=first)}


def _days_in(data: bytes) -> set[str]:
    """The days of the readable records in a run of log lines."""
    return {ts[:10] for ts in map(line_ts, data.splitlines()) if ts}


def _row_time(line: bytes) -> float | None:
    try:
        row = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        return None
    t = row.get("time") if isinstance(row, dict) else None
    return float(t) if isinstance(t, (int, float)) and not isinstance(t, bool) else None


def _blobs(root: Path, since: str, path: str) -> tuple[bytes | None, bytes | None]:
    got = gitbind.read_blobs(root, [f"{since}:{path}", f"HEAD:{path}"])
    return got.get(f"{since}:{path}"), got.get(f"HEAD:{path}")


def _is_commit(root: Path, rev: str) -> bool:
    return bool(gitbind.git(root, "rev-parse", "-q", "--verify", f"{rev}^{{commit}}", check=False).strip())


def _is_day_file(rel: str) -> bool:
    p = rel.split("/")
    return len(p) == 3 and len(p[0]) == 4 and p[0].isdigit() and len(p[1]) == 2 and p[1].isdigit() \
        and p[2].endswith(".md") and len(p[2]) == 5 and p[2][:2].isdigit()

