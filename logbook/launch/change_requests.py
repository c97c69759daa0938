"""Live hyperparameter changes as request files, and whether a run can still take one.

`logbook set RUN key=value --reason ...` writes one request file into the run's
control folder; the trainer (`trainer/live_control.py`) picks it up at its next step
boundary, applies or rejects it, and moves it to `processed/` with its reply
appended. This module is torch-free and shared by both sides, so the keys,
types and ranges the CLI checks up front are exactly those the trainer enforces
(the one allow-list is `SETTINGS` in `live_settings.py`).

Layout under `project.control_dir(run)` (uncommitted runtime state):

    pending/<utc-ts>-<uuid>.json    requests not answered yet, written atomically
    processed/<same name>           the request plus its reply, {"outcome": {...}}

File names sort in submission order and never collide, so two `logbook set`
calls at once both land and are both answered. A temporary file of an atomic
write starts with a dot and is never read as a request.

`logbook stop RUN` uses the same channel: a request with `"type": "stop"` and
no changes. The trainer saves a checkpoint at its next step boundary, writes
`run_stopped` and exits cleanly (so neither torchrun nor the launcher restarts
it), answering `{"status": "stopped", "saved_step": N}`.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from logbook.core.errors import RefusedError, UsageError
from logbook.core.fsutil import atomic_write_json, fsync_dir
from logbook.core.identity import git_identity
from logbook.core.project import Project
from logbook.launch.live_settings import check_reason, validate_changes
from logbook.eventlog.chain import utc_now
from logbook.eventlog.runlog import iter_events
from logbook.eventlog.kinds import is_terminal, run_state, starts_attempt
from logbook.runs.run_record import RunRecord, check_run_id, load_run_record, run_status
from logbook.runs.runlock import dead_holder

REQUEST_VERSION = 1
STOP = "stop"
"""The `type` of a request to stop the run cleanly (a request without `type` changes settings)."""
STOP_REASON = "no reason given"
"""What a stop records when the person gave no reason: a stop needs none, unlike a change."""
MAX_REQUEST_BYTES = 256 * 1024
REPLY_KEY = "outcome"
"""Where a processed request holds the run's reply (status, step, applied or reason).

Named "outcome" on disk since the first request files; trainer/live_control.py
writes and reads the same key, so the name stays for compatibility."""


# --- run state -----------------------------------------------------------------

def run_accepts_changes(project: Project, run_id: str) -> RunRecord:
    """The run record if the run can still take a change; refuses unknown and ended runs."""
    rec = load_run_record(project, check_run_id(run_id))
    status = run_status(project, run_id, rec)
    if status != "running":
        raise RefusedError(f"run {run_id} is {status}: it no longer takes changes",
                           hint="live changes go to a running run; start a new run to try other settings")
    last = last_lifecycle_event(project.run_dir(run_id) / "events.jsonl")
    if last is not None and is_terminal(last):
        ended = run_state(last)
        raise RefusedError(f"run {run_id} has {ended} (event at step {last.get('step')}): it no longer takes changes",
                           hint="live changes go to a running run; start a new run to try other settings")
    for name in (f"{run_id}.lock", f"{run_id}.node0.lock"):  # the launcher's lock (logbook/launch/launcher.py)
        gone = dead_holder(project.state_dir / "locks" / name)
        if gone:
            # Its last event says running, but nothing is: a change queued now would wait, unseen, for a resume.
            raise RefusedError(f"run {run_id} is not running: its launcher ({gone}) is gone, killed before it "
                               "could record how the run ended",
                               hint=f"resume it with `logbook run --resume {run_id}`, then ask for the change")
    return rec


def last_lifecycle_event(events_path: Path) -> dict[str, Any] | None:
    """The last event that starts an attempt or ends the run (run_started, restart, run_finished, run_failed, ...)."""
    last = None
    for rec in iter_events(events_path):
        if starts_attempt(rec) or is_terminal(rec):
            last = rec
    return last


# --- request files ---------------------------------------------------------------

def pending_dir(control_dir: Path) -> Path:
    return Path(control_dir) / "pending"


def processed_dir(control_dir: Path) -> Path:
    return Path(control_dir) / "processed"


def request_name(now: datetime | None = None) -> str:
    """`<utc-ts>-<uuid>.json`: sorts in submission order, never collides."""
    now = now or datetime.now(timezone.utc)
    return f"{now.strftime('%Y%m%dT%H%M%S.%fZ')}-{uuid.uuid4().hex}.json"


def new_request(run_id: str, changes: Mapping[str, Any], reason: str, who: str) -> dict[str, Any]:
    """A complete, validated request (not yet written)."""
    return {
        "v": REQUEST_VERSION,
        "request_id": uuid.uuid4().hex[:16],
        "run": check_run_id(run_id),
        "created": utc_now(),
        "who": who,
        "reason": check_reason(reason),
        "changes": validate_changes(changes),
    }


def new_stop_request(run_id: str, reason: str | None, who: str) -> dict[str, Any]:
    """A complete request to stop the run cleanly at its next step (not yet written)."""
    return {"v": REQUEST_VERSION, "type": STOP, "request_id": uuid.uuid4().hex[:16], "run": check_run_id(run_id),
            "created": utc_now(), "who": who, "reason": check_reason(reason) if reason else STOP_REASON, "changes": {}}


def is_stop(request: Mapping[str, Any]) -> bool:
    return request.get("type") == STOP


def write_request(control_dir: Path, request: Mapping[str, Any]) -> Path:
    """Write a request atomically into pending/; returns its path."""
    path = pending_dir(control_dir) / request_name()
    atomic_write_json(path, dict(request))
    return path


@dataclass
class Submitted:
    """A request that is now waiting in the run's pending/ folder."""

    request: dict[str, Any]
    path: Path

    @property
    def name(self) -> str:
        return self.path.name


def submit_change(project: Project, run_id: str, changes: Mapping[str, Any], reason: str,
                  who: str | None = None) -> Submitted:
    """Validate a change for a running run and queue it for the trainer."""
    request = new_request(run_id, changes, reason, who or str(git_identity(project.root)))
    run_accepts_changes(project, run_id)
    path = write_request(project.control_dir(run_id), request)
    return Submitted(request=request, path=path)


def submit_stop(project: Project, run_id: str, reason: str | None, who: str | None = None) -> Submitted:
    """Ask a running run to save and end at its next step; refuses unknown and ended runs."""
    request = new_stop_request(run_id, reason, who or str(git_identity(project.root)))
    status = run_status(project, run_id, load_run_record(project, run_id))
    if status != "running":
        raise RefusedError(f"run {run_id} is {status}: there is nothing to stop",
                           hint=f"`logbook status {run_id}` says how it ended")
    run_accepts_changes(project, run_id)  # and the launcher must be alive to end it
    path = write_request(project.control_dir(run_id), request)
    return Submitted(request=request, path=path)


def list_pending(control_dir: Path) -> list[Path]:
    """Request files waiting for the trainer, in name (= submission) order."""
    d = pending_dir(control_dir)
    try:  # asked at every step: one directory read, and a Path only for what is there
        with os.scandir(d) as entries:
            names = sorted(e.name for e in entries if e.name.endswith(".json") and not e.name.startswith("."))
    except (FileNotFoundError, NotADirectoryError):
        return []
    return [d / name for name in names]


class PendingWatch:
    """Whether `pending/` may hold something new: one `stat` a step in place of a directory read.

    A directory's mtime moves whenever an entry is added, renamed in or
    removed, and every request lands by a rename. A scan that found the folder
    empty is trusted until that stamp moves, but only once the stamp is
    `settle_s` older than the scan: two changes within one tick of the file
    system's clock can leave the same stamp. A folder scanned with files in it
    is scanned again at the next step (a file still being written by hand is
    read once more), and a full scan runs every `backstop_s` whatever the stamp
    says (a clock set back, a file system that does not keep mtimes).
    """

    def __init__(self, control_dir: Path, *, settle_s: float = 1.0, backstop_s: float = 5.0) -> None:
        self.dir = pending_dir(control_dir)
        self.settle_s, self.backstop_s = settle_s, backstop_s
        self._quiet: tuple[int, int] | None = None
        """(inode, mtime in ns) of the folder when a scan last found it empty, while that can be trusted."""
        self._scanned_at = 0.0

    def pending(self) -> list[Path]:
        """The request files waiting, as `list_pending` gives them; [] without a read when nothing moved."""
        now = time.time()
        stamp = self._stamp()
        if stamp == self._quiet and now - self._scanned_at < self.backstop_s:
            return []
        found = list_pending(self.dir.parent)
        settled = now - stamp[1] / 1e9 > self.settle_s
        self._quiet = stamp if not found and settled else None
        self._scanned_at = now
        return found

    def _stamp(self) -> tuple[int, int]:
        try:
            st = os.stat(self.dir)
        except OSError:  # not there (yet): the scan finds nothing, and the next stat sees it appear
            return (0, 0)
        return st.st_ino, st.st_mtime_ns


def decode_request(raw: bytes, run_id: str) -> dict[str, Any]:
    """Parse and check one request file's bytes; raises UsageError saying what is wrong."""
    if len(raw) > MAX_REQUEST_BYTES:
        raise UsageError(f"request file is larger than {MAX_REQUEST_BYTES // 1024} KiB")
    try:
        req = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise UsageError("request file is not UTF-8 text") from None
    except ValueError as e:
        raise UsageError(f"request file is not complete JSON ({e.msg} at line {e.lineno}): half-written or garbage") from None
    if not isinstance(req, dict):
        raise UsageError(f"request file holds a JSON {type(req).__name__}, expected an object")
    for field, kind in (("request_id", str), ("run", str), ("who", str), ("reason", str)):
        if not isinstance(req.get(field), kind) or not req[field]:
            raise UsageError(f"request file has no valid `{field}`")
    if req["run"] != run_id:
        raise UsageError(f"request is addressed to run {req['run']!r}, not {run_id!r}")
    req["reason"] = check_reason(req["reason"])
    if req.get("type") not in (None, STOP):
        raise UsageError(f"request file has an unknown `type` {req['type']!r} (known: {STOP}, or none for a change)")
    req["changes"] = {} if is_stop(req) else validate_changes(req.get("changes"))
    return req


def finish_request(control_dir: Path, name: str, body: Mapping[str, Any], reply: Mapping[str, Any]) -> Path:
    """Answer a request: write processed/<name> (request + reply) atomically, then drop pending/<name>.

    The answer is durable before the request disappears, so a kill between the
    two leaves both files, and the processed one says what happened.
    """
    out = processed_dir(control_dir) / name
    atomic_write_json(out, {**dict(body), REPLY_KEY: dict(reply)})
    src = pending_dir(control_dir) / name
    try:
        src.unlink()
    except FileNotFoundError:
        pass
    fsync_dir(src.parent)
    return out


def read_answer(control_dir: Path, name: str) -> dict[str, Any] | None:
    """The processed request with the run's reply under REPLY_KEY, or None while it is unanswered."""
    path = processed_dir(control_dir) / name
    try:
        doc = json.loads(path.read_text("utf-8"))
    except (FileNotFoundError, ValueError):
        return None
    return doc if isinstance(doc, dict) and isinstance(doc.get(REPLY_KEY), dict) else None


def wait_for_answer(control_dir: Path, name: str, timeout_s: float, poll_s: float = 0.2) -> dict[str, Any] | None:
    """Poll for the answer to request `name`; None if none came within `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        answer = read_answer(control_dir, name)
        if answer is not None or time.monotonic() >= deadline:
            return answer
        time.sleep(min(poll_s, max(0.0, deadline - time.monotonic())))


def iter_answers(control_dir: Path) -> Iterable[tuple[str, dict[str, Any]]]:
    """(name, processed request) for every answered request, in name order."""
    d = processed_dir(control_dir)
    if not d.is_dir():
        return
    for p in sorted(d.iterdir(), key=lambda p: p.name):
        if p.name.endswith(".json") and not p.name.startswith("."):
            doc = read_answer(control_dir, p.name)
            if doc is not None:
                yield p.name, doc
