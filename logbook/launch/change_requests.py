"""Live hyperparameter changes: the allow-list, and change requests as files.

`logbook set RUN key=value --reason ...` writes one request file into the run's
control folder; the trainer (`trainer/live_control.py`) picks it up at its next step
boundary, applies or rejects it, and moves it to `processed/` with its reply
appended. This module is torch-free and shared by both sides, so the keys,
types and ranges the CLI checks up front are exactly those the trainer enforces:
`SETTINGS` is the one allow-list.

Layout under `project.control_dir(run)` (uncommitted runtime state):

    pending/<utc-ts>-<uuid>.json    requests not answered yet, written atomically
    processed/<same name>           the request plus its reply, {"outcome": {...}}

File names sort in submission order and never collide, so two `logbook set`
calls at once both land and are both answered. A temporary file of an atomic
write starts with a dot and is never read as a request.
"""

from __future__ import annotations

import json
import math
import re
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from logbook.core.errors import RefusedError, UsageError, did_you_mean
from logbook.core.fsutil import atomic_write_json, fsync_dir
from logbook.core.identity import git_identity
from logbook.core.project import Project
from logbook.records.chain import utc_now
from logbook.records.events import iter_events
from logbook.records.eventschema import kinds_where
from logbook.runs.record import RunRecord, check_run_id, load_run_record, run_status

REQUEST_VERSION = 1
MAX_REQUEST_BYTES = 256 * 1024
MAX_REASON_CHARS = 2000
REPLY_KEY = "outcome"
"""Where a processed request holds the run's reply (status, step, applied or reason).

Named "outcome" on disk since the first request files; trainer/control.py
writes and reads the same key, so the name stays for compatibility."""
WEIGHTS_PREFIX = "data.weights."
_SOURCE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
TERMINAL_KINDS = kinds_where(terminal=True)
_LIFECYCLE_KINDS = (*kinds_where(starts_attempt=True), *TERMINAL_KINDS)


@dataclass(frozen=True)
class Setting:
    """One key that may change while a run is training."""

    key: str
    """Public name, as typed after `logbook set RUN`."""
    kind: type
    """`float` or `int`; ints are refused where a float was expected only if not whole."""
    lo: float | None
    """Lowest allowed value (None: unbounded)."""
    hi: float | None
    """Highest allowed value (None: unbounded)."""
    path: str
    """Where the value lives: a dotted path into the training config, or `live.<name>`
    for a runtime multiplier the trainer keeps outside the config."""
    doc: str
    """What changing it does, for help texts and error messages."""
    lo_open: bool = False
    """True when `lo` itself is not allowed (a strictly positive value)."""

    def describe_range(self) -> str:
        lo = "-inf" if self.lo is None else _fmt(self.lo)
        hi = "inf" if self.hi is None else _fmt(self.hi)
        return f"{'(' if self.lo_open else '['}{lo}, {hi}]"


def _fmt(x: float) -> str:
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e15 else repr(float(x))


_SETTINGS_LIST = [
    Setting("lr_scale", float, 0.0, 10.0, "live.lr_scale", "multiplier over the learning-rate schedule", lo_open=True),
    Setting("lr", float, 0.0, 1.0, "optim.lr", "peak learning rate of the schedule (AdamW's parameters)", lo_open=True),
    Setting("muon_lr", float, 0.0, 1.0, "optim.muon_lr", "peak learning rate of Muon's parameters", lo_open=True),
    Setting("weight_decay", float, 0.0, 1.0, "optim.weight_decay", "decoupled weight decay of the parameters that decay"),
    Setting("grad_clip", float, 0.0, 1e4, "optim.grad_clip", "gradient-norm clipping threshold (0 only measures it)"),
    Setting("guard.spike_sigma", float, 1.0, 1000.0, "guard.spike_sigma", "loss spike threshold in robust sigmas"),
    Setting("guard.grad_norm_sigma", float, 1.0, 1000.0, "guard.grad_norm_sigma", "gradient-norm spike threshold in robust sigmas of its log"),
    Setting("guard.window", int, 8, 100_000, "guard.window", "steps in the rolling window of the spike detector"),
    Setting("guard.warmup", int, 0, None, "guard.warmup", "observations before spikes are judged"),
    Setting("guard.cooldown", int, 0, None, "guard.cooldown", "steps after a counted spike in which further spikes are not counted"),
    Setting("guard.rollback_after", int, 1, 1000, "guard.rollback_after", "counted spikes within the rollback window that trigger a rollback"),
    Setting("guard.rollback_window", int, 1, None, "guard.rollback_window", "steps over which spikes are counted"),
    Setting("guard.rollback_steps", int, 0, None, "guard.rollback_steps", "least distance from the first spike back to the checkpoint rolled back to"),
    Setting("guard.skip_batches", int, 0, None, "guard.skip_batches", "batches skipped from the spike's batch after a rollback"),
    Setting("guard.lr_factor", float, 0.0, 1.0, "guard.lr_factor", "learning-rate multiplier applied at each rollback", lo_open=True),
    Setting("guard.max_rollbacks", int, 0, 1000, "guard.max_rollbacks", "rollbacks allowed before the run is aborted"),
    Setting("checkpoint.every", int, 1, None, "checkpoint.every", "steps between checkpoints"),
    Setting("train.eval_every", int, 0, None, "train.eval_every", "steps between evaluations (0: only at the end)"),
    Setting(WEIGHTS_PREFIX + "<source>", float, 0.0, 1e6, "live.data.weights", "sampling weight of one data source in the mixture"),
]
SETTINGS: dict[str, Setting] = {s.key: s for s in _SETTINGS_LIST}
"""The allow-list: every key `logbook set` accepts and the trainer applies."""


def setting_for(key: str) -> Setting:
    """The allow-list entry for `key`; unknown keys name the closest valid one."""
    if key in SETTINGS and not key.endswith("<source>"):
        return SETTINGS[key]
    if key.startswith(WEIGHTS_PREFIX):
        source = key[len(WEIGHTS_PREFIX):]
        if not _SOURCE_RE.match(source):
            raise UsageError(f"invalid data source name {source!r} in `{key}`",
                             hint="write data.weights.<source>=x with the source's name from the run's config")
        return SETTINGS[WEIGHTS_PREFIX + "<source>"]
    hint = did_you_mean(key, list(SETTINGS), "see `logbook set --help` for the keys that can change live", cutoff=0.5)
    raise UsageError(f"`{key}` cannot be changed live (not in the allow-list)", hint=hint)


def config_path(key: str) -> str:
    """The dotted config path a key writes to (`live.<name>` for runtime multipliers)."""
    s = setting_for(key)
    return "live." + key if key.startswith(WEIGHTS_PREFIX) else s.path


def coerce_value(key: str, value: Any) -> int | float:
    """Check a value's type and range for `key`; strings (from the CLI) are parsed first."""
    s = setting_for(key)
    if isinstance(value, str):
        value = _parse_number(key, value.strip(), s.kind)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise UsageError(f"`{key}` needs a number, got {_show(value)}")
    if isinstance(value, float) and not math.isfinite(value):
        raise UsageError(f"`{key}` must be finite, got {value}")
    if s.kind is int:
        if isinstance(value, float) and not value.is_integer():
            raise UsageError(f"`{key}` needs a whole number, got {value}")
        value = int(value)
    else:
        try:
            value = float(value)
        except OverflowError:  # an integer beyond any float
            raise UsageError(f"`{key}` = {_show(value)} is out of range: allowed {s.describe_range()}") from None
    if not _in_range(s, value):
        raise UsageError(f"`{key}` = {value} is out of range: allowed {s.describe_range()}",
                         hint=f"{key}: {s.doc}")
    return value


def _parse_number(key: str, text: str, kind: type) -> int | float:
    try:
        value = float(text)
    except ValueError:
        raise UsageError(f"`{key}` needs {'a whole number' if kind is int else 'a number'}, got {text!r}") from None
    if kind is int and math.isfinite(value):
        if not value.is_integer():
            raise UsageError(f"`{key}` needs a whole number, got {text!r}")
        return int(value)
    return value


def _in_range(s: Setting, v: float) -> bool:
    if s.lo is not None and (v < s.lo or (s.lo_open and v == s.lo)):
        return False
    return s.hi is None or v <= s.hi


def _show(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def parse_assignment(text: str) -> tuple[str, int | float]:
    """`key=value` from the command line, checked against the allow-list."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise UsageError(f"expected key=value, got {text!r}", hint="for example: logbook set RUN lr=3e-4 --reason '...'")
    return key, coerce_value(key, raw)


def validate_changes(changes: Any) -> dict[str, int | float]:
    """A request's changes, each checked; raises UsageError naming the first bad one."""
    if not isinstance(changes, Mapping) or not changes:
        raise UsageError("a change request needs at least one key=value")
    out: dict[str, int | float] = {}
    for key, value in changes.items():
        if not isinstance(key, str):
            raise UsageError(f"change keys must be strings, got {_show(key)}")
        out[key] = coerce_value(key, value)
    return out


def check_reason(reason: Any) -> str:
    if not isinstance(reason, str) or not reason.strip():
        raise UsageError("a change needs a reason", hint="add --reason 'why this change' (it goes into the chronicle)")
    if len(reason) > MAX_REASON_CHARS:
        raise UsageError(f"the reason is longer than {MAX_REASON_CHARS} characters")
    return reason.strip()


# --- run state -----------------------------------------------------------------

def run_accepts_changes(project: Project, run_id: str) -> RunRecord:
    """The run record if the run can still take a change; refuses unknown and ended runs."""
    rec = load_run_record(project, check_run_id(run_id))
    status = run_status(project, run_id, rec)
    if status != "running":
        raise RefusedError(f"run {run_id} is {status}: it no longer takes changes",
                           hint="live changes go to a running run; start a new run to try other settings")
    last = last_lifecycle_event(project.run_dir(run_id) / "events.jsonl")
    if last is not None and last.get("kind") in TERMINAL_KINDS:
        ended = last["kind"].removeprefix("run_")
        raise RefusedError(f"run {run_id} has {ended} (event at step {last.get('step')}): it no longer takes changes",
                           hint="live changes go to a running run; start a new run to try other settings")
    return rec


def last_lifecycle_event(events_path: Path) -> dict[str, Any] | None:
    """The last run_started / restart / run_finished / run_failed / run_aborted event."""
    last = None
    for rec in iter_events(events_path):
        if rec.get("kind") in _LIFECYCLE_KINDS:
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


def list_pending(control_dir: Path) -> list[Path]:
    """Request files waiting for the trainer, in name (= submission) order."""
    d = pending_dir(control_dir)
    if not d.is_dir():
        return []
    return sorted((p for p in d.iterdir() if p.name.endswith(".json") and not p.name.startswith(".")),
                  key=lambda p: p.name)


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
    req["changes"] = validate_changes(req.get("changes"))
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
