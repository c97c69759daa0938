"""One immutable file per record, named by an id that needs no coordination.

Notes, errata, reviews and scorecards are written by many people on many
clones. If they shared one file, every two writes on the same day would be a
merge conflict, and sequence numbers would collide (two clones both writing
`note:0`). Instead each record is its own JSON file named by a *record id*:
the writer's UTC time to the microsecond and 32 random bits, e.g.
`20261130T101500123456Z-3f9a1c2e`. Ids sort in time order, are unique without
asking anyone, and are the same on every clone because they are the file
name. Git merges different new files without conflict, whatever their order.

A record carries `id`, `ts` and `hash` (sha256 over its canonical JSON
without `hash`), so a changed byte is caught by reading the file alone.
"""

from __future__ import annotations

import json
import os
import re
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from logbook.core.fsutil import atomic_create_bytes
from logbook.eventlog import chain
from logbook.eventlog.chain import SCHEMA_VERSION, canonical, record_hash

RECORD_ID_RE = re.compile(r"^(\d{8}T\d{12}Z)-([0-9a-f]{8})$")
"""`YYYYMMDDTHHMMSSffffffZ-xxxxxxxx`: the writer's UTC time and 32 random bits."""


def new_record_id(ts: str) -> str:
    """A fresh record id for a record written at `ts` (an ISO UTC timestamp from `utc_now`)."""
    digits = re.sub(r"\D", "", ts)[:20].ljust(20, "0")  # 2026-11-30T10:15:00.123456Z -> 20261130101500123456
    return f"{digits[:8]}T{digits[8:]}Z-{secrets.token_hex(4)}"


def is_record_id(value: str) -> bool:
    return bool(RECORD_ID_RE.match(value or ""))


def write_record(folder: Path, record: dict[str, Any], *, ts: str | None = None) -> dict[str, Any]:
    """Write `record` as a new file `<folder>/<id>.json` and return it completed (v, ts, id, hash).

    The file is created, never replaced: a name already taken (which 32
    random bits make vanishingly rare) draws a new id.
    """
    ts = ts or chain.utc_now()  # looked up at call time: one clock for logs and records
    for _ in range(8):
        rid = new_record_id(ts)
        full = {"v": SCHEMA_VERSION, "ts": ts, **record, "id": rid}
        full.pop("hash", None)
        full["hash"] = record_hash(full)
        try:
            atomic_create_bytes(Path(folder) / f"{rid}.json", (canonical(full) + "\n").encode("utf-8"))
        except FileExistsError:
            continue
        return full
    raise RuntimeError(f"could not find a free record id in {folder}")  # eight collisions of 32 random bits


def record_intact(rec: dict[str, Any], name: str) -> str | None:
    """Why a record read from file `name` is not as written, or None when it is."""
    if rec.get("id") != name.removesuffix(".json"):
        return f"its id {rec.get('id')!r} does not match its file name"
    try:
        if rec.get("hash") != record_hash(rec):
            return "its content no longer matches its hash"
    except ValueError:
        return "it holds a value JSON cannot spell"
    return None


def read_record(path: Path) -> dict[str, Any] | None:
    """The record in one file, or None when it is not a JSON object."""
    try:
        rec = json.loads(Path(path).read_bytes())
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    return rec if isinstance(rec, dict) else None


def record_files(folder: Path, *, day: str | None = None) -> list[Path]:
    """The record files in `folder` in id order (time, then random), optionally only those minted on `day`."""
    folder = Path(folder)
    try:
        names = os.listdir(folder)  # names, not Paths: a lab's year has thousands of files here
    except (FileNotFoundError, NotADirectoryError):
        return []
    prefix = day.replace("-", "") if day else ""
    return [folder / n for n in sorted(names)
            if n.endswith(".json") and n.startswith(prefix) and is_record_id(n[:-5])]


def iter_folder(folder: Path, *, day: str | None = None) -> Iterator[dict[str, Any]]:
    """The readable records of `folder` in id order; unreadable files are skipped (verify reports them)."""
    for p in record_files(folder, day=day):
        rec = read_record(p)
        if rec is not None:
            yield rec


def damaged_records(folder: Path, root: Path) -> list[tuple[str, str]]:
    """(path relative to `root`, why) for each record file in `folder` that is not as written (for `verify`)."""
    out = []
    # Files not named by a record id are no records any reader takes in; history
    # still keeps them as committed (recordkinds), so they cannot change unseen.
    for path in record_files(folder):
        why = record_problem(path)
        if why:
            out.append((path.relative_to(root).as_posix(), why))
    return out


def record_problem(path: Path) -> str | None:
    """Why the one-file record at `path` is not as written (None when it is)."""
    rec = read_record(path)
    return "it is not a JSON record" if rec is None else record_intact(rec, path.name)


_RUN_RECORD_FIELDS = ("run_id", "created", "config_path", "config_hash")


def run_record_problem(path: Path) -> str | None:
    """Why `path` is not the run record a launch writes (None when it is): for `verify` and every reader."""
    try:
        raw = json.loads(path.read_text("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return "it is not a JSON record"
    if not isinstance(raw, dict):
        return "it is not a run record (a JSON object)"
    missing = [k for k in _RUN_RECORD_FIELDS if not isinstance(raw.get(k), str)]
    if missing:
        return f"it is not a run record: {', '.join(missing)} missing"
    if raw["run_id"] != path.parent.name:
        return f"it names run {raw['run_id']!r}, not the folder's {path.parent.name!r}"
    return None
