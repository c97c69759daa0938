"""Append-only, hash-chained JSONL logs that survive kills.

Every record carries `seq` (its position), `prev` (the hash of the record
before it) and `hash` (sha256 over its own canonical JSON without `hash`). A
deleted, reordered, inserted or edited line therefore breaks the chain at a
place `verify_log` can name. Appends take an exclusive lock, fsync before they
return, and repair a torn last line left by a kill: the torn bytes are moved to
`<log>.torn` (nothing is thrown away) and a `log_repaired` record says so.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from logbook.core.fsutil import log_tail
from logbook.eventlog.kinds import kind_of

SCHEMA_VERSION = 1
GENESIS = "0" * 64


def utc_now() -> str:
    """UTC timestamp with microseconds, always with a `Z` suffix."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def canonical(obj: Any) -> str:
    """The one JSON spelling that hashes are computed over."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def record_hash(record: dict[str, Any]) -> str:
    body = {k: v for k, v in record.items() if k != "hash"}
    return hashlib.sha256(canonical(body).encode("utf-8")).hexdigest()


@dataclass
class Problem:
    """One place where a log is not what was written."""

    line: int
    kind: str  # edited | broken_chain | seq_gap | bad_line | torn_tail
    message: str


@dataclass
class LogContents:
    """What a tolerant read found: the good records, and everything else."""

    records: list[dict[str, Any]] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    torn_tail: bytes = b""

    @property
    def intact(self) -> bool:
        return not self.problems


class ChainedLog:
    """One hash-chained JSONL file. Safe for several appending processes."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def append(self, record: dict[str, Any]) -> dict[str, Any]:
        """Append `record` (plain JSON values, a `kind` key) durably; return it completed."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
        with os.fdopen(fd, "r+b") as f:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX)
            try:
                tail = log_tail(f)
                last, complete_end, size = tail.last_line, tail.complete_end, tail.size
                prev_hash, seq = GENESIS, 0
                if last:
                    prev = json.loads(last)
                    prev_hash, seq = prev["hash"], prev["seq"] + 1
                out = b""  # what goes on the end: the repair of a torn tail, if any, then the record
                if size > complete_end:
                    out, prev_hash, seq = self._repair_tail(f, complete_end, size, prev_hash, seq, record)
                full = self._complete(record, prev_hash, seq)
                out += (canonical(full) + "\n").encode("utf-8")
                f.seek(0, os.SEEK_END)
                f.write(out)
                f.flush()
                os.fsync(f.fileno())
                return full
            finally:
                fcntl.flock(f.fileno(), fcntl.LOCK_UN)

    def _complete(self, record: dict[str, Any], prev_hash: str, seq: int) -> dict[str, Any]:
        full = {"v": SCHEMA_VERSION, "ts": utc_now(), **record, "seq": seq, "prev": prev_hash}
        full.pop("hash", None)
        full["hash"] = record_hash(full)
        return full

    def _repair_tail(self, f, complete_end: int, size: int, prev_hash: str, seq: int, template: dict[str, Any]):
        """Move a torn last line aside and chain a `log_repaired` record in its place."""
        f.seek(complete_end)
        torn = f.read(size - complete_end)
        torn_path = self.path.with_name(self.path.name + ".torn")
        with open(torn_path, "ab") as t:
            t.write(torn + b"\n")
            t.flush()
            os.fsync(t.fileno())
        f.truncate(complete_end)
        # Carry the identifying fields of the log (run, attempt...) so a reader
        # of a run log sees the repair in context.
        keep = {k: template[k] for k in ("run", "attempt", "rank") if k in template}
        rec = self._complete(
            {**keep, "kind": "log_repaired", "data": {"torn_bytes": len(torn), "saved_to": torn_path.name}},
            prev_hash,
            seq,
        )
        return (canonical(rec) + "\n").encode("utf-8"), rec["hash"], seq + 1

    def read(self) -> LogContents:
        return read_log(self.path)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter_records(self.path)


def iter_records(path: Path) -> Iterator[dict[str, Any]]:
    """Stream the parseable records of a log, skipping a torn tail and bad lines."""
    path = Path(path)
    if not path.exists():
        return
    with open(path, "rb") as f:
        for raw in f:
            if not raw.endswith(b"\n"):
                return  # torn tail: an append that a kill interrupted
            try:
                rec = json.loads(raw)
            except (ValueError, UnicodeDecodeError):
                continue
            if isinstance(rec, dict):
                yield rec


def read_log(path: Path) -> LogContents:
    """Read every record and check the chain; never raises on damaged content."""
    out = LogContents()
    path = Path(path)
    if not path.exists():
        return out
    prev_hash, expect_seq = GENESIS, 0
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, start=1):
            if not raw.endswith(b"\n"):
                out.torn_tail = raw
                out.problems.append(Problem(lineno, "torn_tail", f"line {lineno} is incomplete ({len(raw)} bytes): an append was interrupted"))
                break
            try:
                rec = json.loads(raw)
                if not isinstance(rec, dict):
                    raise ValueError("not an object")
            except (ValueError, UnicodeDecodeError):
                out.problems.append(Problem(lineno, "bad_line", f"line {lineno} is not a JSON record"))
                continue
            _check(rec, lineno, prev_hash, expect_seq, out.problems)
            out.records.append(rec)
            prev_hash = rec.get("hash", "")
            expect_seq = (rec.get("seq") if isinstance(rec.get("seq"), int) else expect_seq) + 1
    return out


def _check(rec: dict[str, Any], lineno: int, prev_hash: str, expect_seq: int, problems: list[Problem]) -> None:
    try:
        computed: str | None = record_hash(rec)
    except ValueError:
        computed = None  # nothing the writer could have hashed (a NaN): never equal to any stored hash, even a missing one
    if computed is None or rec.get("hash") != computed:
        problems.append(Problem(lineno, "edited", f"line {lineno} (seq {rec.get('seq')}, {kind_of(rec)}) was edited: its content no longer matches its hash"))
    if rec.get("seq") != expect_seq:
        problems.append(Problem(lineno, "seq_gap", f"line {lineno}: expected seq {expect_seq}, found {rec.get('seq')}: a line was deleted, inserted or moved"))
    elif rec.get("prev") != prev_hash:
        problems.append(Problem(lineno, "broken_chain", f"line {lineno} (seq {rec.get('seq')}) does not follow the line before it: a line was deleted, inserted or moved"))


def verify_log(path: Path) -> list[Problem]:
    """Every problem in a log, in file order; empty when intact."""
    return read_log(path).problems
