"""The run record: `runs/<run>/run.json`, one per logical run (all its attempts).

It links the run to its preregistration (and the amendments in force when it
started), its code snapshot and the hash of the config it trains with, so every
later reader can tell what ran and against which promise. It is a record: it is
written once before the first step and never rewritten. How the run ended is
in its event log (`run_status`), which the run alone appends to.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from logbook.core.errors import NotFoundError, TamperedError
from logbook.core.fsutil import atomic_create_bytes
from logbook.core.project import Project
from logbook.eventlog.chain import iter_records
from logbook.eventlog.files import run_record_problem
from logbook.eventlog.timeline import check_run_id, run_log_path
from logbook.trust.signatures import sign_record
from logbook.eventlog.kinds import is_kind, run_state

@dataclass
class RunRecord:
    """Everything that identifies a run, independent of its attempts."""

    run_id: str
    """Unique id; also the folder name under `runs/`."""
    created: str
    """UTC time the run was launched."""
    config_path: str
    """Training config file, relative to the repository root where possible."""
    config_hash: str
    """sha256 of the config file's bytes as launched."""
    prereg_id: str | None = None
    """Preregistration the run answers to; None for exploratory runs."""
    exploratory: bool = False
    """True when launched with `--exploratory` (no preregistration)."""
    amendments: list[str] | None = None
    """Keys of the preregistration's amendments in force when the run started (None in records older than this
    field: every amendment counts). Later amendments are deviations for this run, not its promise."""
    prereg_config_hash: str | None = None
    """Config hash stored in the preregistration, for the deviation check."""
    snapshot: dict[str, Any] = field(default_factory=dict)
    """Code snapshot: {"ref": "refs/logbook/...", "commit": sha, "head": sha, "dirty": bool}."""
    overrides: list[str] = field(default_factory=list)
    """`key.sub=value` overrides given on the command line."""
    nproc: int = 1
    """Processes per node."""
    nnodes: int = 1
    """Nodes."""
    max_restarts: int = 0
    """torchrun --max-restarts."""
    author: str = ""
    """Who launched it (git config user.name <user.email>)."""
    status: str = "running"
    """Not written in new records (run.json is written once, at launch, and must not claim a state it no longer
    has): `run_status` reads the state from the event log. Older records may carry one."""
    deviations: list[str] = field(default_factory=list)
    """Deviations recorded at launch (config differs from the preregistered one, ...)."""
    seed: int | None = None
    """The seed the run trains with (initialisation and data order): drawn from its preregistration's earliest
    timestamp token when there is one (`seed_source`), else its config's own; None in older records."""
    command: list[str] | None = None
    """The command `logbook run -- CMD` supervised (its config_path/config_hash are its script's); None for the
    bundled trainer."""
    command_options: dict[str, Any] | None = None
    """How that command is watched: `steps`, `metrics_regex`, `hang_timeout_s` (a resume keeps them)."""
    seed_source: str | None = None
    """That token's path relative to the entries folder (logbook/trust/replay.py); None: the config's seed, which
    nothing anchors in time."""

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        for key in ("command", "command_options"):
            if d[key] is None:  # the bundled trainer's records keep the shape they always had
                del d[key]
        if d["status"] == "running":  # written once, at launch: a state it would go on claiming after the end
            del d["status"]
        return d


def run_record_path(project: Project, run_id: str) -> Path:
    return project.run_dir(check_run_id(run_id)) / "run.json"


def write_run_record(project: Project, rec: RunRecord) -> list[str]:
    """Create run.json, signed by the launcher's key when one is configured; returns warnings.

    A record is written once, so an existing one is never replaced (FileExistsError).
    """
    body = (json.dumps(rec.to_dict(), indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")
    atomic_create_bytes(run_record_path(project, rec.run_id), body)
    return sign_record(project, hashlib.sha256(body).hexdigest(), what=f"run record {rec.run_id}")


def run_status(project: Project, run_id: str, rec: RunRecord | None = None) -> str:
    """running | finished | failed | aborted | preempted, from the run's event log (streamed).

    Records written before run.json became write-once may carry a later status of their own.
    """
    state = None
    for e in iter_records(run_log_path(project, run_id)):
        state = run_state(e) or state
    if state in (None, "running") and rec is not None and rec.status in ("failed", "aborted", "finished"):
        return rec.status
    return state or "running"


def load_run_record(project: Project, run_id: str) -> RunRecord:
    path = run_record_path(project, run_id)
    if not path.exists():
        known = list_run_ids(project)
        hint = f"known runs: {', '.join(known[-10:])}" if known else "no runs yet: start one with `logbook run`"
        raise NotFoundError(f"unknown run {run_id!r}", hint=hint)
    why = run_record_problem(path)
    if why:
        rel = path.relative_to(project.root).as_posix() if path.is_relative_to(project.root) else str(path)
        raise TamperedError(f"{rel}: {why}", hint=f"restore it from git (`git checkout HEAD -- {rel}`); "
                                                  "a run record is written once, at launch, and never edited")
    raw = json.loads(path.read_text("utf-8"))
    names = {f.name for f in dataclasses.fields(RunRecord)}
    return RunRecord(**{k: v for k, v in raw.items() if k in names})


def list_run_ids(project: Project) -> list[str]:
    """Runs launched by `logbook run` (they have a run.json): what `run --resume` and the launcher know."""
    if not project.runs_dir.exists():
        return []
    return sorted(p.name for p in project.runs_dir.iterdir() if (p / "run.json").exists())


def all_run_ids(project: Project) -> list[str]:
    """Every run, however it was recorded: launched (run.json) or written by a callback alone (only its log)."""
    if not project.runs_dir.exists():
        return []
    return sorted(p.name for p in project.runs_dir.iterdir()
                  if (p / "run.json").exists() or (p / "events.jsonl").exists())


def read_run_record(project: Project, run_id: str) -> RunRecord:
    """The run's record: its run.json, or, for a run a callback recorded alone, what its first `run_started` says.

    Raises NotFoundError (naming the known runs) when the run has neither.
    """
    if run_record_path(project, run_id).exists():
        return load_run_record(project, run_id)
    rec = record_from_log(project, run_id)
    if rec is None:
        known = all_run_ids(project)
        hint = f"known runs: {', '.join(known[-10:])}" if known else "no runs yet: start one with `logbook run`"
        raise NotFoundError(f"unknown run {run_id!r}", hint=hint)
    return rec


def record_from_log(project: Project, run_id: str) -> RunRecord | None:
    """A run record read from the log's first `run_started` (None without one): nothing is filled in that it lacks."""
    for e in iter_records(run_log_path(project, run_id)):
        if not is_kind(e, "run_started"):
            continue
        d = e.get("data") if isinstance(e.get("data"), dict) else {}
        pid = d.get("prereg_id") if isinstance(d.get("prereg_id"), str) and d.get("prereg_id") else None
        world = d.get("world_size") if isinstance(d.get("world_size"), int) and d.get("world_size") > 0 else 1
        commit = d.get("snapshot_commit")
        return RunRecord(run_id=run_id, created=str(e.get("ts") or ""),
                         config_path=str(d.get("config_path") or ""),
                         config_hash=str(d.get("config_hash") or ""), prereg_id=pid, exploratory=pid is None,
                         snapshot={"commit": commit} if isinstance(commit, str) and commit else {}, nproc=world,
                         seed=d.get("seed") if isinstance(d.get("seed"), int) else None)
    return None
