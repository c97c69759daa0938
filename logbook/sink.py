"""What the trainer calls to write into the logbook.

This is the whole surface the trainer uses: `EventSink.emit` for events,
`MetricsWriter.write` for per-step scalars. Values must already be plain
Python (tensors become floats before they get here). Only rank 0 writes; on
other ranks both are no-ops, so callers need no `if rank == 0` of their own.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from .chain import canonical
from .events import KINDS, RunLog, event_record


def _plain(value: Any, root: str | None = None) -> Any:
    """Coerce to JSON-safe plain values; non-finite floats become strings.

    With `root` (the repository's absolute path, ending in a separator), a path
    inside the repository is written relative to it: the log is committed and
    read on other machines, where this one's home folder means nothing.
    """
    if isinstance(value, str):
        return value[len(root):] if root and value.startswith(root) else value
    if isinstance(value, bool) or value is None or isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, dict):
        return {str(k): _plain(v, root) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v, root) for v in value]
    if hasattr(value, "item"):  # a numpy scalar; a tensor should never reach here
        return _plain(value.item(), root)
    return _plain(str(value), root)


class EventSink:
    """Appends events for one attempt of one run."""

    def __init__(self, run_dir: Path, run_id: str, attempt: int, rank: int = 0, *, root: Path | None = None) -> None:
        """`root`: the repository; paths inside it are recorded relative to it."""
        self.run_dir = Path(run_dir)
        self.run_id = run_id
        self.attempt = attempt
        self.rank = rank
        self.log = RunLog(self.run_dir / "events.jsonl")
        self._root = os.path.join(str(Path(root).resolve()), "") if root is not None else None

    @property
    def active(self) -> bool:
        return self.rank == 0

    def recorded(self, value: Any) -> Any:
        """`value` as `emit` would write it into the log."""
        return _plain(value, self._root)

    def emit(
        self,
        kind: str,
        *,
        step: int | None = None,
        tokens: int | None = None,
        drill: bool = False,
        **data: Any,
    ) -> dict[str, Any] | None:
        """Append one event durably; returns the record written (None off rank 0)."""
        if not self.active:
            return None
        if kind not in KINDS:
            # Unknown kinds are allowed (readers render them generically) but
            # must still be simple identifiers.
            if not kind.replace("_", "").isalnum():
                raise ValueError(f"event kind must be an identifier, got {kind!r}")
        rec = event_record(kind, run=self.run_id, attempt=self.attempt, rank=self.rank,
                           step=step, tokens=tokens, drill=drill, data=_plain(data, self._root))
        return self.log.append(rec)


class MetricsWriter:
    """Per-step scalars as JSON lines: buffered, flushed every `flush_every` lines.

    Metrics are a stream, not a record: losing the last few unflushed lines
    to a kill is acceptable (the steps are recomputed after the restart and
    written again with the new attempt number), so this does not fsync each line.
    """

    def __init__(self, run_dir: Path, rank: int = 0, flush_every: int = 50) -> None:
        self.path = Path(run_dir) / "metrics.jsonl"
        self.rank = rank
        self.flush_every = flush_every
        self._buf: list[str] = []

    def write(self, row: dict[str, Any]) -> None:
        if self.rank != 0:
            return
        self._buf.append(canonical(_plain(row)))
        if len(self._buf) >= self.flush_every:
            self.flush()

    def flush(self, durable: bool = False) -> None:
        if self.rank != 0 or not self._buf:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = ("\n".join(self._buf) + "\n").encode("utf-8")
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
        try:
            os.write(fd, data)
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        self._buf.clear()

    def close(self) -> None:
        self.flush(durable=True)


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    """All metric rows; a torn last line is skipped. Later attempts win per step."""
    path = Path(run_dir) / "metrics.jsonl"
    rows: list[dict[str, Any]] = []
    if not path.exists():
        return rows
    with open(path, "rb") as f:
        for raw in f:
            if not raw.endswith(b"\n"):
                break
            try:
                rows.append(json.loads(raw))
            except ValueError:
                continue
    return rows
