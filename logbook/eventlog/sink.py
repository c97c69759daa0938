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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from logbook.eventlog.chain import canonical
from logbook.eventlog.runlog import RunLog, event_record
from logbook.eventlog.kinds import check_event, get_kind, strict_events


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


def _plain_row(row: dict[str, Any]) -> dict[str, Any]:
    """`_plain` of a metrics row, with a short way through the usual one: string keys, finite numbers."""
    out: dict[str, Any] = {}
    for k, v in row.items():
        t = type(v)
        if type(k) is str and (t is int or (t is float and v - v == 0.0)):  # v - v is nan for inf and nan
            out[k] = v
        else:
            out[str(k)] = _plain(v)
    return out


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
        # Read once here, not per event: outside the tests, writing an event costs nothing more.
        self._strict = strict_events()

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
        if get_kind(kind) is None:
            # Unknown kinds are allowed (readers render them generically) but
            # must still be simple identifiers.
            if not kind.replace("_", "").isalnum():
                raise ValueError(f"event kind must be an identifier, got {kind!r}")
        payload = _plain(data, self._root)
        if self._strict:
            check_event(kind, payload)
        rec = event_record(kind, run=self.run_id, attempt=self.attempt, rank=self.rank,
                           step=step, tokens=tokens, drill=drill, data=payload)
        return self.log.append(rec)


_WINDOW_KEYS_SUFFIX = "_s"
"""Telemetry's per-step seconds (`step_s`, `data_s`, ...): averaged over `window_steps` when rows are merged."""


@dataclass(frozen=True)
class KeepRule:
    """Which per-step rows the committed metrics keep, so git grows with events, not with steps.

    Every row still goes to the full-resolution stream outside git. The committed
    stream keeps a step row when its step is a multiple of `stride`, is one of
    `exact_steps` (evaluation points, milestones, steps the predictions name), or
    is an attempt's first row; the writer also keeps the last row it saw when it
    closes (the run's final step). Rows that are not plain training steps
    (evaluations) are always kept. A dropped row's telemetry seconds are folded
    into the next kept row of the same attempt (`window_steps` grows), so
    goodput's sums come out the same.
    """

    stride: int = 1
    """Keep every `stride`-th step's row."""
    exact_steps: frozenset[int] = frozenset()
    """Steps whose rows are always kept."""

    @staticmethod
    def for_run(total_steps: int, exact_steps: set[int] | frozenset[int] = frozenset(), points: int = 1000) -> KeepRule:
        """About `points` rows per run, whatever its length, plus the exact steps."""
        return KeepRule(max(1, -(-int(total_steps) // points)), frozenset(int(s) for s in exact_steps))

    def keeps(self, row: dict[str, Any], first_of_attempt: bool) -> bool:
        step = row.get("step")
        if "loss" not in row or not isinstance(step, int):
            return True  # an evaluation or another row that is not a plain training step
        return first_of_attempt or step % self.stride == 0 or step in self.exact_steps


class MetricsWriter:
    """Per-step scalars as JSON lines: buffered, flushed every `flush_every` lines.

    Metrics are a stream, not a record: losing the last few unflushed lines
    to a kill is acceptable (the steps are recomputed after the restart and
    written again with the new attempt number), so this does not fsync each line.
    Rows are held as plain values and turned into JSON when they are flushed:
    a step pays for a dict, and the encoding runs fifty rows at a time.

    With `full_path`, every row also goes there (outside git: `.logbook/metrics/`),
    and the committed stream at `<run_dir>/metrics.jsonl` keeps only what `keep`
    says. Without it, every row is committed.
    """

    def __init__(self, run_dir: Path, rank: int = 0, flush_every: int = 50, *,
                 full_path: Path | None = None, keep: KeepRule | None = None) -> None:
        self.path = Path(run_dir) / "metrics.jsonl"
        self.full_path = Path(full_path) if full_path is not None else None
        self.rank = rank
        self.flush_every = flush_every
        self.keep = keep or KeepRule()
        self._buf: list[dict[str, Any]] = []
        self._full: list[dict[str, Any]] = []
        self._attempt: Any = None
        self._held: dict[str, Any] | None = None  # the last dropped row: kept at close as the final step
        self._window: dict[str, float] = {}  # seconds x steps of dropped rows, folded into the next kept row

    def write(self, row: dict[str, Any]) -> None:
        if self.rank != 0:
            return
        row = _plain_row(row)
        if self.full_path is not None:
            self._full.append(row)
        first = row.get("attempt") != self._attempt and "loss" in row
        if first:
            self._attempt, self._window = row.get("attempt"), {}
        if self.keep.keeps(row, first):
            self._buf.append(self._fold(row))
            self._held = None
        else:
            self._absorb(row)
            self._held = row
        if len(self._buf) + len(self._full) >= self.flush_every:
            self.flush()

    def _absorb(self, row: dict[str, Any]) -> None:
        steps = row.get("window_steps")
        if not isinstance(steps, (int, float)) or isinstance(steps, bool):
            return
        self._window["window_steps"] = self._window.get("window_steps", 0) + steps
        for k, v in row.items():
            if k.endswith(_WINDOW_KEYS_SUFFIX) and isinstance(v, (int, float)) and not isinstance(v, bool):
                self._window[k] = self._window.get(k, 0.0) + v * steps

    def _fold(self, row: dict[str, Any]) -> dict[str, Any]:
        if not self._window or not isinstance(row.get("window_steps"), (int, float)):
            return row
        total = self._window["window_steps"] + row["window_steps"]
        out = dict(row, window_steps=total)
        for k, v in row.items():
            if k.endswith(_WINDOW_KEYS_SUFFIX) and isinstance(v, (int, float)) and not isinstance(v, bool):
                out[k] = (self._window.get(k, 0.0) + v * row["window_steps"]) / total
        self._window = {}
        return out

    def flush(self, durable: bool = False) -> None:
        if self.rank != 0:
            return
        lines = {id(row): canonical(row) for row in self._full}  # a kept row that folds nothing in is encoded once
        for path, buf in ((self.path, self._buf), (self.full_path, self._full)):
            if path is not None and buf:
                _append_lines(path, [lines.get(id(row)) or canonical(row) for row in buf], durable)
                buf.clear()

    def close(self) -> None:
        if self.rank == 0 and self._held is not None:
            self._buf.append(self._fold(self._held))  # the last step the run reached
            self._held = None
        self.flush(durable=True)


def _append_lines(path: Path, lines: list[str], durable: bool) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = ("\n".join(lines) + "\n").encode("utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    try:
        os.write(fd, data)
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)


def full_metrics_path(state_dir: Path, run_id: str) -> Path:
    """Where a run's full-resolution metrics live, outside git."""
    return Path(state_dir) / "metrics" / run_id / "metrics.jsonl"


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
