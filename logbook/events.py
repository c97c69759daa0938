"""Run events: the closed, documented set of kinds, and how one event looks.

An event is one line of a run's hash-chained log (see `chain.py`):

    {"v": 1, "seq": 7, "ts": "2026-11-30T03:12:00.123456Z", "run": "...",
     "attempt": 2, "rank": 0, "step": 41200, "tokens": 10800000000,
     "kind": "restart", "drill": false, "data": {...}, "prev": "...", "hash": "..."}

`v` is the schema version: readers accept any record with the fields above and
treat unknown kinds generically, so a log written next year still reads today.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .chain import ChainedLog, LogContents, iter_records, read_log

KINDS: dict[str, str] = {
    "run_started": "an attempt of a run began (config hash, world size, code snapshot)",
    "restart": "an attempt resumed after a failure: cause, steps and seconds lost, downtime",
    "checkpoint_saved": "a checkpoint was written completely (step, path, blocking seconds)",
    "checkpoint_rejected": "a checkpoint failed its manifest check and was skipped on load",
    "checkpoint_failed": "writing a checkpoint failed (for example a full disk); training went on",
    "preempted": "SIGTERM or SIGUSR1: the attempt saved and exited for requeue",
    "divergence_detected": "a loss or gradient-norm spike, or a non-finite value",
    "step_skipped": "the guard skipped an optimizer update",
    "rollback": "the guard rolled back to an earlier checkpoint and skipped batches",
    "lr_scaled": "the learning-rate multiplier changed",
    "run_aborted": "the guard aborted the run after too many rollbacks",
    "hparam_change": "a hyperparameter changed mid-run (live request or scheduled)",
    "hparam_change_rejected": "a live change request was refused",
    "milestone": "a progress note at a configured fraction of the run",
    "hang": "a step exceeded its timeout; the attempt exited to be restarted",
    "straggler": "one rank was persistently slower than the others",
    "fault_injected": "a fault drill fired",
    "log_repaired": "a torn last line (from a kill) was moved aside",
    "run_finished": "the run reached its last step",
    "run_failed": "the run ended in failure (restarts exhausted or fatal error)",
    "note": "a human note",
    "review": "a review record",
}


class RunLog(ChainedLog):
    """The event log of one run."""


def read_events(path: Path) -> LogContents:
    return read_log(path)


def iter_events(path: Path) -> Iterator[dict[str, Any]]:
    return iter_records(path)


def event_record(
    kind: str,
    *,
    run: str,
    attempt: int,
    rank: int = 0,
    step: int | None = None,
    tokens: int | None = None,
    drill: bool = False,
    data: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The fields of an event before the log adds `v`, `ts`, `seq`, `prev`, `hash`."""
    return {
        "run": run,
        "attempt": int(attempt),
        "rank": int(rank),
        "step": None if step is None else int(step),
        "tokens": None if tokens is None else int(tokens),
        "kind": kind,
        "drill": bool(drill),
        "data": dict(data or {}),
    }
