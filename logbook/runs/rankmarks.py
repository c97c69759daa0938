"""Rank marks: each worker's own small file saying which attempt it belongs to and whether it ended by itself.

A worker writes its mark when it starts training and again when it stops in
any way Python sees (finished, preempted, an exception, or a SIGTERM asking it
to stop). A mark still open after its attempt ended is a worker that vanished:
SIGKILL, the OOM killer, a lost node. Only rank 0 writes the logbook, but only
each worker knows whether it ended by itself; with the project on a filesystem
every node shares, these files let the next attempt's `restart`, and the
launcher's `run_failed`, name the rank, node and host that was lost. They live
in the state folder (`.logbook/ranks/RUN/`), never in git.

A worker of a new attempt keeps the mark it replaces (as `before`): on a
restart, a rejoining node's worker may write its mark before rank 0 has read
who vanished in the attempt before, and that mark is the only record of it.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from logbook.core.fsutil import atomic_write_json


def ranks_dir(state_dir: Path, run_id: str) -> Path:
    """The folder of run `run_id`'s marks, one file per rank: `.logbook/ranks/RUN/`."""
    return Path(state_dir) / "ranks" / run_id


class RankMark:
    """One worker's mark: {rank, node, local_rank, host, pid, attempt, ended}."""

    def __init__(self, directory: Path, rank: int) -> None:
        self.path = Path(directory) / f"rank{rank}.json"
        self._mark: dict[str, Any] | None = None
        # `ended` comes from the loop, from a signal handler that may interrupt it, and from the
        # thread that sees signals (trainer/components.py `StopSignals`).
        self._lock = threading.RLock()

    def started(self, attempt: int, member: dict[str, Any]) -> None:
        with self._lock:
            self._mark = {**member, "attempt": attempt, "ended": False}
            before = _read_mark(self.path)
            if before is not None and before.get("attempt") != attempt:
                self._mark["before"] = {k: v for k, v in before.items() if k != "before"}
            atomic_write_json(self.path, self._mark)

    def ended(self, signal_name: str | None = None) -> None:
        """The worker stops by itself, or (`signal_name`) was asked to stop: either way it did not vanish."""
        with self._lock:
            if self._mark is not None and not self._mark["ended"]:
                self._mark["ended"] = signal_name or True
                atomic_write_json(self.path, self._mark)


def _read_mark(path: Path) -> dict[str, Any] | None:
    try:
        mark = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError):
        return None
    return mark if isinstance(mark, dict) else None


def read_marks(directory: Path) -> list[dict[str, Any]]:
    """Every rank's last mark in `directory`, and the one each replaced (unreadable files are skipped)."""
    out = []
    for p in sorted(Path(directory).glob("rank*.json")):
        mark = _read_mark(p)
        if mark is None:
            continue
        before = mark.pop("before", None)
        out.append(mark)
        if isinstance(before, dict):
            out.append(before)
    return out


def lost_ranks(marks: list[dict[str, Any]], attempt: int) -> list[dict[str, Any]]:
    """The workers of `attempt` that vanished without ending by themselves, in rank order."""
    lost = [m for m in marks if m.get("attempt") == attempt and not m.get("ended")]
    return sorted(lost, key=lambda m: int(m.get("rank") or 0))


def name_ranks(marks: list[dict[str, Any]]) -> str:
    """"rank 1 on node 1 (host gpu07)", joined with "and"."""
    return " and ".join(f"rank {m.get('rank')} on node {m.get('node')} (host {m.get('host')})" for m in marks)
