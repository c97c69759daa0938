"""Run events: the closed, documented set of kinds, and how one event looks.

An event is one line of a run's hash-chained log (see `chain.py`):

    {"v": 1, "seq": 7, "ts": "2026-11-30T03:12:00.123456Z", "run": "...",
     "attempt": 2, "rank": 0, "step": 41200, "tokens": 10800000000,
     "kind": "restart", "drill": false, "data": {...}, "prev": "...", "hash": "..."}

`v` is the schema version: readers accept any record with the fields above and
treat unknown kinds generically, so a log written next year still reads today.

Payload (`data`) fields per kind. Producers add fields freely; readers must
tolerate missing ones. Times are seconds (float), steps and tokens integers.

- run_started: config_hash, config_path, world_size, prereg_id, exploratory,
  snapshot_commit, total_steps, tokens_per_step, device, resumed_from_step,
  restore_s, compiled, compile_s (torch.compile before the first step; a
  cache load on a restart), slurm (job facts under Slurm), members ([{rank,
  node, local_rank, host, pid}] with several workers), group_id (the
  attempt's identity, agreed by every worker)
- restart: cause (exception | signal | preempted | hang | unknown), detail,
  prev_attempt, next_attempt, resumed_from_step, failed_at_step, steps_lost, seconds_lost,
  downtime_s, exception_type, exception_message, signal, lost_ranks ([{rank, node, host, pid}]:
  the workers that vanished without a record)
- attempt_failed: exception_type, exception_message, traceback (last lines)
- checkpoint_saved: path, blocking_s, total_s, bytes
- checkpoint_rejected: path, ckpt_step, reason
- checkpoint_failed: reason
- preempted: signal, saved_step, slurm ({job_id, restart_count, ...} when Slurm sent the signal)
- straggler: rank_slow, node_slow, ratio, steps, checks, step_s, median_s
- divergence_detected: metric (loss | grad_norm), value, baseline, scale,
  threshold, z, nonfinite, batch_ids, action (skip | rollback | lr_scale | abort | none),
  plan ({rule: int | null, follows: bool})
- step_skipped: reason, metric
- rollback: from_step, to_step, steps_lost, batches_skipped ([first, last]),
  checkpoint, kept (paths of the checkpoints kept for study), plan
- lr_scaled: old, new, factor, reason, plan
- run_aborted: reason, rollbacks
- hparam_change: key, old, new, reason, who, source (live | schedule | advice),
  request_id, config_diff (unified diff text), plan ({rule, follows})
- hparam_change_rejected: request_id, who, reason, changes
- milestone: fraction, total_steps, elapsed_s, eta_s, loss, val_loss,
  tokens_per_s, goodput, plot, predictions ([{expr, status, value}]),
  since_last ({restarts, rollbacks, changes, skips}); when the guard skipped
  the note's own step: skipped_loss (that step's loss) and loss_step (the
  step of `loss`, the last accepted one)
- hang: timeout_s, elapsed_s
- fault_injected: fault, at_step
- run_finished: final_loss, val_loss, wall_s
- run_failed: reason, exit_code, attempts
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
    "attempt_failed": "an attempt raised an exception; recorded by the failing attempt itself",
    "run_finished": "the run reached its last step",
    "run_failed": "the run ended in failure (restarts exhausted or fatal error)",
    "note": "a human note",
    "review": "a review record",
    "wandb_run": "the run is mirrored to W&B: id, path, project, entity, mode, dir, url (online only)",
    "outcome": "the run's predictions scored against its preregistration (logbook outcome)",
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
