"""`logbook run`: launch the trainer under torchrun and keep the run's record.

Before the first step the launcher checks the config (through the trainer's
own `--print-config`), the preregistration (it must exist and verify), takes a
code snapshot, hashes the config and writes `run.json`. Then torchrun runs the
trainer with `--max-restarts`: the trainer writes its own events (run_started,
restart, preempted, run_finished...) while the launcher re-renders the
chronicle as events arrive and forwards SIGINT/SIGTERM (and Slurm's SIGUSR1)
so the trainer's preemption path saves a checkpoint. On several nodes each
node runs its own launcher; the workers agree on each attempt through a fresh
store per rendezvous round (see trainer/job/rendezvous.py). When torchrun exits without a
`run_finished`, the launcher records `run_failed` itself, unless the last
attempt was preempted (exit code 75, so a Slurm requeue resumes it).

torch is never imported here: torchrun runs as a subprocess of the same
interpreter (`python -m torch.distributed.run`).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import math
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from logbook.core.bundled import with_own_source
from logbook.core.errors import RefusedError, UsageError
from logbook.core.identity import git_identity
from logbook.core.project import Project
from logbook.core.yamlsafe import load_training_config
from logbook.launch.watch import RunResult, StderrPump, Watcher, launch_ending, next_seq
from logbook.records import gitbind
from logbook.eventlog.chain import utc_now
from logbook.records.gitbind import snapshot_worktree
from logbook.promises.measurable import launch_warnings
from logbook.promises.prereg import load_prereg, resolve_prereg_id
from logbook.proof.verify import verify_or_raise
from logbook.runs.run_record import RunRecord, check_run_id, load_run_record, run_record_path, run_status, write_run_record
from logbook.runs.runlock import RunLock
from logbook.trust.stamp_fetch import HeadStamper, launch_deadline, stamp_prereg_before_run, stamp_run_start
from logbook.trust.replay import anchored_seed, stamp_files, timestamping_configured
from logbook.core.textfmt import plural

__all__ = ["Rendezvous", "RunResult", "config_sha256", "launch_run", "new_run_id", "torchrun_command"]

DEFAULT_MAX_RESTARTS = 3
"""torchrun --max-restarts for a new run when none is given."""
_OVERRIDE_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)*=")
Say = Callable[[str], None]


def _quiet(_: str) -> None:
    """The default `say`: the library itself never prints."""


@dataclass
class Rendezvous:
    """Where the workers of a run meet (torchrun's c10d rendezvous)."""

    nnodes: int = 1
    """Number of machines; above 1, `endpoint` is required."""
    node_rank: int = 0
    """This machine's rank; only rank 0 writes run.json and the final status."""
    endpoint: str | None = None
    """host:port of the rendezvous; None on one node picks a free local port."""
    rdzv_id: str | None = None
    """Rendezvous group id; defaults to the run id."""
    join_timeout_s: float = 600.0
    """How long torchrun's rendezvous waits for every node, at the start and after a node is lost,
    before the run fails (torchrun's `join_timeout`)."""
    startup_timeout_s: float = 300.0
    """How long a worker waits at start-up for the other workers of its attempt before it fails
    with the names of those missing."""


@dataclass
class _Plan:
    """Everything decided before torchrun starts."""

    record: RunRecord
    config: Path
    overrides: list[str]
    resumed: bool


def launch_run(
    project: Project,
    config_path: str | Path | None,
    overrides: Sequence[str] = (),
    prereg_id: str | None = None,
    exploratory: bool = False,
    nproc: int | None = None,
    max_restarts: int | None = None,
    run_id: str | None = None,
    *,
    resume: str | None = None,
    rendezvous: Rendezvous | None = None,
    entry: str = "trainer",
    say: Say = _quiet,
    poll_s: float = 1.0,
    console: Any = None,
) -> RunResult:
    """Check, record and run one training run under torchrun; return how it ended.

    `entry` is what torchrun starts: a module name (`trainer`) or a script
    path ending in `.py`; it is called as `ENTRY --project ROOT --run ID CONFIG
    OVERRIDES...` and must accept `--print-config CONFIG OVERRIDES...` (check
    the config, print it, exit 0; exit 2 with `error:`/`hint:` lines when bad).
    `say` receives one plain line per thing the launcher does. A `console`
    (`logbook.cli.run_console.RunConsole`) gets every new event and the
    trainer's `error:`/`hint:` lines; torchrun's own output then goes to its
    log file only.
    Raises UsageError (bad config, override or option) or RefusedError (no
    preregistration, live or finished run id, ...) before anything starts.
    """
    rdzv = rendezvous or Rendezvous()
    _check_numbers(nproc, max_restarts, rdzv)
    if run_id:
        check_run_id(run_id)
    overrides = [str(o) for o in overrides]
    prereg = None
    if resume is not None:
        config, overrides = _resume_args(project, resume, config_path, overrides, prereg_id, exploratory, run_id)
        run_id = resume
    else:
        config = _checked_config_path(config_path)
        _check_overrides(overrides)
        if rdzv.node_rank == 0:
            prereg = _checked_prereg(project, prereg_id, exploratory)
            prereg_id = prereg.id if prereg is not None else None
        elif not run_id:
            raise UsageError("nodes other than 0 need the run id of node 0", hint="pass --run-id ID on every node")
    _check_torch_installed()
    resolved = _check_config_with_trainer(project, config, overrides, entry)
    run_id = check_run_id(run_id) if run_id else new_run_id(project, prereg_id, config)
    lock = RunLock(project.state_dir / "locks" / _lock_name(run_id, rdzv))
    stale = lock.acquire(what=f"run {run_id}")
    try:
        if stale:
            say(stale)
        if rdzv.node_rank != 0:
            plan = _follower_plan(project, run_id, config, overrides)
        elif resume is not None:
            plan = _resume_plan(project, run_id, nproc, max_restarts, rdzv, say)
        else:
            plan = _new_plan(project, run_id, config, overrides, prereg, prereg_id, exploratory,
                             nproc or 1, DEFAULT_MAX_RESTARTS if max_restarts is None else max_restarts, rdzv, say,
                             config_seed=_config_seed(resolved))
        _announce(plan, project, say)
        return _supervise(project, plan, rdzv, entry, say, poll_s, lock, console)
    finally:
        lock.release()


def new_run_id(project: Project, prereg_id: str | None, config: Path) -> str:
    """A fresh id: the preregistration's slug (or the config's name) plus 4 hex digits."""
    if prereg_id:
        base = re.sub(r"^\d{4}-\d{2}-\d{2}-", "", prereg_id)
        base = re.sub(r"-[0-9a-f]{4,}$", "", base)
    else:
        base = config.stem
    base = re.sub(r"[^A-Za-z0-9._-]+", "-", base).strip("-._")[:48].rstrip("-._") or "run"
    while True:
        candidate = f"{base}-{secrets.token_hex(2)}"
        if not project.run_dir(candidate).exists():
            return candidate


def config_sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


# --- checks before anything starts -------------------------------------------------


def _check_numbers(nproc: int | None, max_restarts: int | None, rdzv: Rendezvous) -> None:
    if nproc is not None and nproc < 1:
        raise UsageError(f"--nproc must be at least 1, got {nproc}")
    if max_restarts is not None and max_restarts < 0:
        raise UsageError(f"--max-restarts must be 0 or more, got {max_restarts}")
    if rdzv.nnodes < 1 or not 0 <= rdzv.node_rank < rdzv.nnodes:
        raise UsageError(f"--node-rank must be in [0, {rdzv.nnodes}), got {rdzv.node_rank}")
    check_join_timeout(rdzv.join_timeout_s)
    if not math.isfinite(rdzv.startup_timeout_s) or rdzv.startup_timeout_s <= 0:
        raise UsageError(f"--startup-timeout must be a positive number of seconds, got {rdzv.startup_timeout_s:g}")
    if rdzv.nnodes > 1 and not rdzv.endpoint:
        raise UsageError("a run on several nodes needs --rdzv-endpoint HOST:PORT", hint="use the address of node 0, the same on every node")


def check_elsewhere(project: Project, config_path: str, overrides: list[str], prereg_id: str | None,
                    entry: str = "trainer") -> None:
    """What `logbook run` refuses before it starts, for a run to be started elsewhere (a Slurm batch script):
    a bad config or override, an unknown preregistration, fail here and not in a job's output hours later."""
    path = Path(config_path).expanduser()
    config = _checked_config_path(path if path.is_absolute() else project.root / path)
    _check_overrides(overrides)
    if prereg_id:
        load_prereg(project, resolve_prereg_id(project, prereg_id) or prereg_id)  # unknown: NotFoundError
    if importlib.util.find_spec("torch") is not None:  # the trainer's own check, where this machine can run it
        _check_config_with_trainer(project, config, overrides, entry)


def check_join_timeout(seconds: float) -> None:
    """torchrun's rendezvous takes whole seconds only: anything else would fail inside it, with a run on record."""
    if not math.isfinite(seconds) or seconds < 1 or not float(seconds).is_integer():
        raise UsageError(f"--join-timeout must be a whole number of seconds, at least 1, got {seconds:g}")


def _checked_config_path(config_path: str | Path | None) -> Path:
    if config_path is None or str(config_path) == "":
        raise UsageError("no training config given", hint="example: logbook run --prereg ID configs/tiny-cpu.yaml")
    path = Path(config_path).expanduser().resolve()
    if not path.is_file():
        raise UsageError(f"config file not found: {config_path}", hint="give the path of a training config, for example configs/tiny-cpu.yaml")
    load_training_config(path)  # a bad or empty file is refused before anything starts
    return path


def _check_overrides(overrides: list[str]) -> None:
    for o in overrides:
        if not _OVERRIDE_RE.match(o):
            raise UsageError(f"bad override {o!r}: expected key=value", hint="example: optim.lr=3e-4 (dotted keys reach nested settings)")


def _entry_argv(entry: str) -> list[str]:
    return [entry] if entry.endswith(".py") else ["-m", entry]


def _child_env() -> dict[str, str]:
    """The environment for torchrun and the trainer: this logbook's source on the path."""
    env = with_own_source(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _check_torch_installed() -> None:
    """torchrun and the trainer need torch; say so before anything is recorded."""
    import importlib.util

    if importlib.util.find_spec("torch") is None:  # finds the package without importing it
        raise RefusedError("torch is not installed, so there is no torchrun to start the trainer",
                           hint="install the training extra: python3 -m pip install -e '.[train]'")


def _check_config_with_trainer(project: Project, config: Path, overrides: list[str], entry: str) -> Any:
    """Let the trainer parse the config and overrides, so a typo fails before any process starts.

    `--print-config` validates without importing torch and prints the resolved config; returns what it
    printed, parsed (None when it is not JSON: another entry's format).
    """
    cmd = [sys.executable, *_entry_argv(entry), "--print-config", str(config), *overrides]
    proc = subprocess.run(cmd, cwd=project.root, env=_child_env(), capture_output=True, text=True, timeout=300)
    if proc.returncode == 0:
        try:
            return json.loads(proc.stdout)
        except ValueError:
            return None
    message, hint = _error_lines(proc.stderr or proc.stdout)
    if proc.returncode == 2:
        raise UsageError(message or f"the trainer refused the config {config}", hint=hint)
    raise RefusedError(
        f"checking the config with the trainer failed (exit {proc.returncode}): {message}",
        hint=f"run `{' '.join(cmd[1:])}` to see the whole output",
    )


def _config_seed(resolved: Any) -> int | None:
    """train.seed of the config as the trainer resolved it (`--print-config`), when it says."""
    try:
        seed = resolved["config"]["train"]["seed"]
    except (KeyError, TypeError):
        return None
    return seed if isinstance(seed, int) and not isinstance(seed, bool) else None


def _error_lines(text: str) -> tuple[str, str | None]:
    """The `error:` and `hint:` lines of a command's output, else its last line."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    message = next((ln[len("error:"):].strip() for ln in lines if ln.startswith("error:")), "")
    hint = next((ln[len("hint:"):].strip() for ln in lines if ln.startswith("hint:")), None)
    return (message or (lines[-1] if lines else "")), hint


def _checked_prereg(project: Project, prereg_id: str | None, exploratory: bool) -> Any:
    if prereg_id and exploratory:
        raise UsageError("--prereg and --exploratory exclude each other", hint="a preregistered run is not exploratory")
    if not prereg_id:
        if not exploratory:
            raise RefusedError(
                "a run needs a preregistration",
                hint="preregister first (`logbook prereg`) and pass --prereg ID, or label the run --exploratory",
            )
        if not project.config.allow_unregistered_runs:
            raise RefusedError("exploratory runs are switched off in logbook.yaml (allow_unregistered_runs: false)",
                               hint="preregister the run and pass --prereg ID")
        return None

    busy = gitbind.operation_in_progress(project.root)
    if busy is not None:
        # The working tree is half of one history and half of another: nothing in it proves anything yet.
        raise RefusedError(f"{busy[0]}: a preregistered run starts from a finished history", hint=busy[1])
    prereg = load_prereg(project, resolve_prereg_id(project, prereg_id) or prereg_id)
    _verify_prereg(project, prereg.id)
    return prereg


def _verify_prereg(project: Project, prereg_id: str) -> None:
    """`logbook verify` for this one preregistration: a changed record starts no run."""
    verify_or_raise(project, prereg_id)


def _lock_name(run_id: str | None, rdzv: Rendezvous) -> str:
    name = run_id or "new"
    return f"{name}.node{rdzv.node_rank}.lock" if rdzv.nnodes > 1 else f"{name}.lock"


def _resume_args(project: Project, resume: str, config_path, overrides, prereg_id, exploratory, run_id) -> tuple[Path, list[str]]:
    """The config and overrides of the run being resumed; refuses arguments that would change them."""
    rec = load_run_record(project, check_run_id(resume))
    if prereg_id or exploratory or run_id:
        raise UsageError("--resume takes the run's own preregistration and id", hint=f"logbook run --resume {resume}")
    stored = (project.root / rec.config_path).resolve()
    if config_path is not None and Path(config_path).expanduser().resolve() != stored:
        raise UsageError(f"run {resume} trains with {rec.config_path}, not {config_path}", hint=f"logbook run --resume {resume}")
    if overrides and list(overrides) != list(rec.overrides):
        raise UsageError(f"run {resume} was launched with overrides {rec.overrides}; a resumed run keeps them",
                         hint=f"logbook run --resume {resume}")
    if not stored.is_file():
        raise RefusedError(f"the config of run {resume} is gone: {rec.config_path}")
    return stored, list(rec.overrides)


# --- the run record ------------------------------------------------------------------


def _new_plan(project, run_id, config, overrides, prereg, prereg_id, exploratory, nproc, max_restarts, rdzv, say,
              *, config_seed: int | None = None, command: list[str] | None = None,
              command_options: dict[str, Any] | None = None) -> _Plan:
    check_run_id(run_id)
    if run_record_path(project, run_id).exists():
        status = run_status(project, run_id, load_run_record(project, run_id))
        raise RefusedError(f"run {run_id} already exists (status {status})",
                           hint=f"resume it with `logbook run --resume {run_id}`, or choose another --run-id")
    _refuse_chosen_seed(project, prereg, overrides)
    snapshot = snapshot_worktree(project, run_id)
    digest = config_sha256(config)
    rec = RunRecord(
        run_id=run_id, created=utc_now(), config_path=_rel(project, config), config_hash=digest,
        prereg_id=prereg_id, exploratory=exploratory, snapshot=dict(snapshot), overrides=list(overrides),
        nproc=nproc, nnodes=rdzv.nnodes, max_restarts=max_restarts, author=str(git_identity(project.root)),
        status="running", command=command, command_options=command_options,
    )
    if prereg is not None:
        rec.amendments = [a.key for a in prereg.amendments]  # the promise as it stands at the start
        rec.prereg_config_hash = _prereg_config_hash(prereg)
        rec.deviations = _deviations(rec)
        for d in rec.deviations:
            say(f"WARNING: deviation from preregistration {prereg_id}: {d}")
        for w in launch_warnings(prereg, config, list(overrides), rec.amendments):
            say(f"WARNING: {w}")
    deadline = launch_deadline(project)  # one timeout for all the stamps before the first step
    if prereg is not None:
        _say_stamps(say, stamp_prereg_before_run(project, prereg.id, rec.amendments, deadline))
    # Last before the record is written: a stamp fetched while launching is the one the seed comes from.
    anchor = anchored_seed(project, prereg.sha256) if prereg is not None else None
    rec.seed, rec.seed_source = (anchor.seed, anchor.source) if anchor else (config_seed, None)
    for w in write_run_record(project, rec):
        say(f"WARNING: {w}")
    _say_stamps(say, [stamp_run_start(project, run_id, deadline)])
    return _Plan(record=rec, config=config, overrides=_trainer_overrides(rec, overrides), resumed=False)


def _refuse_chosen_seed(project: Project, prereg: Any, overrides: list[str]) -> None:
    """A seed chosen on the command line would undo the draw from the preregistration's timestamp: refused
    wherever there is or will be a stamp to draw it from."""
    if prereg is None or not any(o.startswith("train.seed=") for o in overrides):
        return
    if timestamping_configured(project) or stamp_files(project, prereg.sha256):
        raise UsageError(f"the seed of a run of preregistration {prereg.id} is drawn from its timestamp, "
                         "so train.seed cannot be set on the command line", hint="drop the train.seed override")


def _trainer_overrides(rec: RunRecord, overrides: list[str]) -> list[str]:
    """The trainer's overrides: the launch's own, then the anchored seed (last, so it wins over the config's)."""
    return [*overrides, f"train.seed={rec.seed}"] if rec.seed_source else list(overrides)


def _resume_plan(project: Project, run_id: str, nproc, max_restarts, rdzv: Rendezvous, say: Say = _quiet) -> _Plan:
    rec = load_run_record(project, run_id)
    if run_status(project, run_id, rec) == "finished":
        raise RefusedError(f"run {run_id} already finished", hint="start a new run instead of resuming this one")
    config = (project.root / rec.config_path).resolve()
    digest = config_sha256(config)
    if digest != rec.config_hash:
        raise RefusedError(
            f"the config {rec.config_path} changed since run {run_id} started (sha256 {rec.config_hash[:12]} -> {digest[:12]})",
            hint="a resumed run must train with the config it started with; restore the file or start a new run",
        )
    # run.json is a record, written once: this launch's shape lives in memory, and the
    # trainer's run_started event records the world size it actually ran with.
    rec.nproc = nproc or rec.nproc
    rec.max_restarts = rec.max_restarts if max_restarts is None else max_restarts
    rec.nnodes = rdzv.nnodes
    _say_stamps(say, [stamp_run_start(project, run_id)])  # a start whose authority was down: fetched now
    return _Plan(record=rec, config=config, overrides=_trainer_overrides(rec, list(rec.overrides)), resumed=True)


def _say_stamps(say: Say, outcomes: list) -> None:
    for o in outcomes:
        if o is not None and o.written:
            say(f"  stamped {o.what} (third-party time)")
        for why in o.pending if o is not None else []:
            say(f"  warning: stamp pending for {o.what}: {why}; `logbook stamp` fetches it later")


def _follower_plan(project: Project, run_id: str, config: Path, overrides: list[str]) -> _Plan:
    """Nodes other than 0 read the run record that node 0 writes; they never write it."""
    for _ in range(120):
        if run_record_path(project, run_id).exists():
            rec = load_run_record(project, run_id)
            return _Plan(record=rec, config=config, overrides=_trainer_overrides(rec, overrides), resumed=False)
        time.sleep(0.5)
    raise RefusedError(f"run {run_id} has no run.json after 60 s", hint="start node 0 first, on a filesystem all nodes share")


def _prereg_config_hash(prereg: Any) -> str | None:
    """The sha256 of the config file the preregistration names, if it names one."""
    config = getattr(prereg, "config", None)
    if isinstance(config, dict) and config.get("sha256"):
        return str(config["sha256"])
    return None


def _deviations(rec: RunRecord) -> list[str]:
    out = []
    if rec.prereg_config_hash and rec.prereg_config_hash != rec.config_hash:
        out.append(f"config {rec.config_path} has sha256 {rec.config_hash[:12]}, "
                   f"the preregistration recorded {rec.prereg_config_hash[:12]}")
    if rec.overrides:
        out.append(f"launched with overrides not in the preregistered config: {' '.join(rec.overrides)}")
    return out


def _rel(project: Project, path: Path) -> str:
    try:
        return str(path.resolve().relative_to(project.root))
    except ValueError:
        return str(path)


def _announce(plan: _Plan, project: Project, say: Say) -> None:
    rec = plan.record
    verb = "Resuming" if plan.resumed else "Starting"
    label = "EXPLORATORY run (no preregistration)" if rec.exploratory else f"preregistration {rec.prereg_id}"
    say(f"{verb} run {rec.run_id}: {label}")
    snap = rec.snapshot or {}
    dirty = " (uncommitted changes included)" if snap.get("dirty") else ""
    say(f"  config {rec.config_path} sha256 {rec.config_hash[:12]}; code snapshot {str(snap.get('commit', ''))[:12]}{dirty}")
    if rec.seed_source:
        say(f"  seed {rec.seed}, drawn from the preregistration's timestamp ({rec.seed_source})")
    elif rec.prereg_id and not plan.resumed:
        say(f"  seed {rec.seed} from the config: the preregistration has no timestamp yet, so the run's randomness "
            "is not anchored")
    say(f"  torchrun: {plural(rec.nproc, 'process', 'processes')} x {plural(rec.nnodes, 'node')}, up to {plural(rec.max_restarts, 'restart')}")
    say(f"  events: {_rel(project, project.run_dir(rec.run_id) / 'events.jsonl')}")


# --- torchrun and what happens while it runs ------------------------------------------


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun_command(project: Project, plan: _Plan, rdzv: Rendezvous, entry: str, log_dir: Path) -> list[str]:
    """The torchrun command line for one launch of a run."""
    rec = plan.record
    endpoint = rdzv.endpoint or f"127.0.0.1:{_free_port()}"
    return [
        # The trainer's module runs under trainer.launch.agent (torchrun with workers forked
        # warm from a fork server, see there); a script runs under torchrun itself.
        sys.executable, "-m", "torch.distributed.run" if entry.endswith(".py") else "trainer.launch.agent",
        "--nproc-per-node", str(rec.nproc), "--nnodes", str(rdzv.nnodes), "--node-rank", str(rdzv.node_rank),
        "--max-restarts", str(rec.max_restarts),
        "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint, "--rdzv-id", rdzv.rdzv_id or rec.run_id,
        "--rdzv-conf", f"join_timeout={int(rdzv.join_timeout_s)}",
        "--monitor-interval", "0.5", "--log-dir", str(log_dir),
        # `--` ends torchrun's own options: its parser would otherwise take the
        # trainer's `--run` for an abbreviation of its `--run-path`.
        *_entry_argv(entry), "--",
        "--project", str(project.root), "--run", rec.run_id, str(plan.config), *plan.overrides,
    ]


def _supervise(project: Project, plan: _Plan, rdzv: Rendezvous, entry: str, say: Say, poll_s: float,
               lock: RunLock, console: Any = None) -> RunResult:
    rec = plan.record
    launch_dir = project.state_dir / "torchrun" / rec.run_id / time.strftime("%Y%m%dT%H%M%S")
    launch_dir.mkdir(parents=True, exist_ok=True)
    env = _child_env()
    # torchrun's own @record copies the root-cause worker error here when it fails.
    env["TORCHELASTIC_ERROR_FILE"] = str(launch_dir / "torchrun-error.json")
    env.update(_rendezvous_env(rdzv))
    cmd = torchrun_command(project, plan, rdzv, entry, launch_dir / "logs")
    first_seq = next_seq(project.run_dir(rec.run_id) / "events.jsonl")
    # A session of its own: a Ctrl-C at the terminal reaches only the launcher,
    # which turns it into one SIGTERM for torchrun (and so for the trainer).
    # torchrun inherits the run's lock, so a launcher killed outright leaves the
    # run id locked until torchrun is gone too, and it gets SIGTERM (save and
    # stop) when the launcher dies rather than training on unwatched.
    proc = subprocess.Popen(cmd, cwd=project.root, env=env, start_new_session=True, stderr=subprocess.PIPE,
                            pass_fds=(lock.fileno(),), preexec_fn=_term_with_parent)
    # The log's chain head is stamped at every checkpoint, from a thread of the launcher: never the trainer's.
    heads = HeadStamper(project, rec.run_id) if rdzv.node_rank == 0 else None
    watcher = Watcher(project, rec.run_id, proc, say, heads=heads, on_tick=console.tick if console else None)
    pump = StderrPump(proc.stderr, launch_dir / "torchrun.log", muted=lambda: bool(watcher.signals),
                      person_lines=console.say if console else None)
    torchrun_exit = watcher.wait(poll_s)
    pump.join()
    result = launch_ending(project, rec, torchrun_exit, watcher.signals, launch_dir, first_seq,
                           record=rdzv.node_rank == 0, join_timeout_s=rdzv.join_timeout_s if rdzv.nnodes > 1 else None)
    if heads is not None:
        heads.close()  # the final head, run_failed included; at most one timeout
    return result


def _rendezvous_env(rdzv: Rendezvous) -> dict[str, str]:
    """What the workers need to agree on an attempt (see trainer/job/rendezvous.py)."""
    return {
        # A fresh store for each rendezvous round: torchrun's shared one outlives attempts, and its
        # agents do not agree on the restart count that used to tell attempts apart.
        "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1",
        "LOGBOOK_NODE_RANK": str(rdzv.node_rank),
        "LOGBOOK_STARTUP_TIMEOUT_S": f"{rdzv.startup_timeout_s:g}",
    }


def _term_with_parent() -> None:
    """In the child, before exec: ask Linux for a SIGTERM when the launcher dies; ignore SIGUSR1.

    Slurm delivers a step's signals to every process of the step: torchrun would
    die of SIGUSR1 (the time-limit warning) before the trainer had saved. The
    launcher turns its own SIGUSR1 into a SIGTERM for torchrun, and the trainer
    sets its own handler, so nothing is lost by torchrun ignoring it.
    """
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)
