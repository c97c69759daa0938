"""The logbook's public API for training loops: the one module a trainer imports from `logbook`.

Twelve names (`__all__`), the main one an object. A training loop (the bundled
trainer in `trainer/`, the Hugging Face and Lightning callbacks, any script)
talks to the logbook only through them:

- `run_from_env()` (under `logbook run -- CMD`, or a run of its own) and
  `open_run(project_root, run_id, rank=...)` return a `Run`. Every rank opens
  the run; only rank 0 writes, so callers need no `if rank == 0` of their own.
- `Run` is the seam: `log_metrics(step, values)`, `emit(kind, **fields)`,
  `config(values, source=...)`, `resumed(step)`, `reached(step)`, `close()`;
  what the preregistration asks (`contingency_rules()`); live changes
  (`changes(config, ...)`: the channel behind `logbook set`, whose files and
  answers stay inside the logbook); progress notes at milestones
  (`progress_notes(...)`); checkpoint advice; the mirror into Weights &
  Biases (`wandb_mirror(...)`, configured by `WandbConfig`); and, for a loop
  that numbers its own attempts as the bundled trainer does, what earlier
  attempts left (`Run.history`, `Run.restart_facts`). Its exit codes
  (`Run.EXIT_PREEMPTED`, `Run.EXIT_HANG`) are what `logbook run` reads.
- The errors a loop raises or catches: `LogbookError` and the three it meets.
- Two torch-free rooms a loop builds on: `typedconfig` (a config read as the
  logbook reads its own: defaults, layers, `a.b=c` overrides, typed into
  dataclasses with errors that name the key path) and `guard` (the divergence
  guard: spike rule, ladder, decisions, the plan's settings).

Plots, scoring and rendering never happen in a training process: the logbook
side (the launcher's watcher, `logbook render`) reads what the loop emitted.

Importing this module costs no torch and almost nothing else: `typedconfig`,
`guard` and `WandbConfig` load on first use. `API_VERSION` changes when a name
here changes in a way that breaks a caller.
"""

from __future__ import annotations

import importlib
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

# Errors are light and every caller needs them: loaded with the module.
from logbook.core.errors import (EXIT_HANG, EXIT_PREEMPTED, LogbookError, NotFoundError, RefusedError,
                                 RunFailedError, UsageError)

if TYPE_CHECKING:
    from logbook.core.project import Project
    from logbook.eventlog.sink import EventSink, MetricsWriter
    from logbook.runs.attempt_ends import Heartbeat, RunHistory
    from logbook.runs.rankmarks import RankMark
    from logbook.runs.run_record import RunRecord

API_VERSION = 2
"""Raised when a name below changes in a way that breaks a caller."""
FLUSH_EVERY_S = 1.0
"""`Run.log_metrics` rows reach the disk at least this often."""

_LAZY: dict[str, str] = {
    "typedconfig": "logbook.core.typedconfig:", "guard": "logbook.guard:",
    "WandbConfig": "logbook.runs.wandb_mirror",
}
"""Public name -> the module that owns it (`module:attr` where the owner's name differs; `module:` the module)."""

__all__ = ["API_VERSION", "Run", "open_run", "run_from_env", "LogbookError", "UsageError", "RefusedError",
           "RunFailedError", "WandbConfig", "typedconfig", "guard", "NotFoundError"]

PROJECT_ENV = "LOGBOOK_PROJECT"
"""Set by `logbook run -- CMD` for the command: the logbook's repository root."""
RUN_ENV = "LOGBOOK_RUN_ID"
"""Set by `logbook run -- CMD`: the run the command's process belongs to."""
ATTEMPT_ENV = "LOGBOOK_ATTEMPT"
"""Set by `logbook run -- CMD`: the attempt (1, 2, ... across restarts) this process is."""


def __getattr__(name: str) -> Any:
    """Load a public name's module on first use, so that importing the API stays cheap."""
    target = _LAZY.get(name)
    if target is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, colon, attr = target.partition(":")
    owner = importlib.import_module(module)
    value = owner if colon and not attr else getattr(owner, attr or name)
    globals()[name] = value  # the next lookup is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


@dataclass
class Run:
    """One attempt of one run, as a training loop writes it. Built by `open_run`; close it when done."""

    EXIT_PREEMPTED = EXIT_PREEMPTED
    """Exit with it when a scheduler's SIGTERM stopped the attempt after a save: `logbook run` waits for a requeue."""
    EXIT_HANG = EXIT_HANG
    """Exit with it when a watchdog found the loop hung: `logbook run` records a hang, not a crash."""

    project: Project
    run_id: str
    run_dir: Path
    """`<entries>/runs/<run_id>`: the run's event log and committed metrics."""
    record: RunRecord | None
    """What `logbook run` recorded before the launch (prereg, config, snapshot); None when started otherwise."""
    attempt: int
    """1-based, counted across restarts, requeues and relaunches."""
    rank: int
    """This process's global rank; only rank 0 writes."""
    sink: EventSink
    """The durable, hash-chained event log (`emit` is the usual way in)."""
    metrics: MetricsWriter
    """Per-step scalars: every row outside git, a thinned copy committed (`log_metrics`)."""
    rank_mark: RankMark
    """This rank's mark under `.logbook/ranks/`: how a restart tells a lost rank from a stopped one."""
    heartbeat: Heartbeat | None = None
    """The last step this attempt reached (rank 0), rewritten by `reached` and `log_metrics`: a kill keeps it."""
    launched: bool = False
    """True under `logbook run -- CMD`: the launcher records attempts, restarts and the end from outside."""
    total_steps: int | None = None
    """The run's length, when the loop said it (`open_run(total_steps=)`)."""
    _last_step: int | None = field(default=None, repr=False)
    _closed: bool = field(default=False, repr=False)
    _told_first: bool = field(default=False, repr=False)
    _start_written: bool = field(default=False, repr=False)
    _flushed_at: float = field(default_factory=time.monotonic, repr=False)

    @property
    def writes(self) -> bool:
        """Whether this process writes (rank 0)."""
        return self.rank == 0

    def emit(self, kind: str, *, step: int | None = None, tokens: int | None = None, drill: bool = False,
             **fields: Any) -> dict[str, Any] | None:
        """Append one event of a kind the registry knows (docs/events.md); the record written, or None off rank 0.

        Field values must be plain Python (numbers, strings, lists, dicts):
        turn tensors into numbers first.
        """
        if self.launched and self.writes and not self._start_written:
            self._wait_for_start()
        return self.sink.emit(kind, step=step, tokens=tokens, drill=drill, **fields)

    def _wait_for_start(self) -> None:
        """Under the launcher, the attempt's start is its to write: ask for it and wait, so it comes first."""
        from logbook.launch.handshake import handshake_path, wait_for_start

        self._start_written = True
        self._tell(first_event_at=round(time.time(), 3))
        wait_for_start(handshake_path(self.project.state_dir, self.run_id, self.attempt))

    def log_metrics(self, step: int, values: dict[str, Any]) -> None:
        """One row of per-step scalars (`loss`, `lr`, ...); a no-op off rank 0.

        Each row carries its wall time (`time`) unless the caller gave one: a
        restart's downtime and lost seconds are read from it.
        """
        if not self.writes:
            return
        now = values.get("time") if isinstance(values.get("time"), (int, float)) else round(time.time(), 3)
        if self.launched and not self._told_first:
            self._told_first = True
            self._tell(first_step=int(step), first_step_at=float(now))
        self.metrics.write({"step": step, "attempt": self.attempt, **values, "time": now})
        self.reached(step)
        if time.monotonic() - self._flushed_at >= FLUSH_EVERY_S:  # a kill loses a second of rows, not a run's worth
            self.metrics.flush()
            self._flushed_at = time.monotonic()

    def reached(self, step: int) -> None:
        """The loop has reached `step`: rewrite the heartbeat (a no-op off rank 0); `log_metrics` calls it too.

        A killed attempt's `failed_at_step` and `steps_lost` are read from it,
        since metrics rows reach the disk only once a second. A loop that logs
        every few steps calls it every step.
        """
        self._last_step = int(step)
        if self.writes and self.heartbeat is not None:
            self.heartbeat.beat(self.attempt, int(step), time.time())

    def resumed(self, step: int) -> None:
        """This attempt resumed from its checkpoint of step `step` (0: from scratch); call it before the first step.

        Under `logbook run -- CMD` it tells the launcher, which records the
        restart with it; a loop started otherwise records its own start and
        passes the step there. Without it a wrapped attempt's resume step is
        recorded as unknown.
        """
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise UsageError(f"Run.resumed: the step must be a whole number 0 or more, got {step!r}")
        if self.launched:
            self._tell(resumed_from_step=step)

    def config(self, values: dict[str, Any], *, source: str, seed: int | None = None) -> dict[str, Any] | None:
        """Record the hyperparameters the loop trains with (`config_recorded`), once per attempt.

        `values`: a flat or nested mapping (a framework's arguments, a module's
        hyperparameters); values that are not plain JSON are kept as their
        text. `source`: where they come from, in words ("TrainingArguments and
        model.config"). Returns the record written, or None off rank 0.
        """
        from logbook.core.plainjson import plain_mapping

        if not isinstance(values, dict):
            raise UsageError(f"Run.config: the hyperparameters must be a mapping, got {type(values).__name__}")
        return self.emit("config_recorded", hparams=plain_mapping(values), source=str(source),
                         seed=seed if isinstance(seed, int) and not isinstance(seed, bool) else None)

    def _tell(self, **fields: Any) -> None:
        from logbook.launch.handshake import handshake_path, tell_launcher

        if self.writes:
            tell_launcher(handshake_path(self.project.state_dir, self.run_id, self.attempt), **fields)

    def contingency_rules(self) -> list[Any] | None:
        """The preregistered contingency rules (with accepted amendments); None for a run with no preregistration
        (nothing it does is "not in the plan": it has none)."""
        if self.record is None or not self.record.prereg_id:
            return None
        from logbook.promises.prereg import load_prereg  # git and the prereg parser: only when there is one

        return list(load_prereg(self.project, self.record.prereg_id).all_contingency(self.record.amendments))

    def close(self) -> None:
        """Flush the metrics and mark this rank as ended; safe to call twice.

        Under the launcher, rank 0 also says the step it closed at: an attempt
        that closed at its last step and then failed in its teardown (a rank's
        signal in torchrun's shutdown) has finished training, and is not
        trained again.
        """
        if self._closed:
            return
        self._closed = True
        self.rank_mark.ended()
        self.metrics.close()
        if self.launched:
            self._tell(closed_at_step=self._last_step, total_steps=self.total_steps)
        if self.heartbeat is not None:
            self.heartbeat.close()


    # --- what a loop builds on its run --------------------------------------------------

    def changes(self, config: Any, **options: Any) -> Any:
        """The channel of `logbook set` / `logbook stop` for this run: `poll(step)` at each step boundary.

        It applies allow-listed changes to `config` (a dataclass tree), records
        `hparam_change` or `hparam_change_rejected` and answers each request;
        `options` are `ControlChannel`'s (emit, rules, world_size, live,
        broadcast, ...; logbook/launch/live_channel.py).
        """
        from logbook.launch.live_channel import ControlChannel

        return ControlChannel(self.project, self.run_id, config, rank=self.rank, attempt=self.attempt, **options)

    def progress_notes(self, fractions: Any, total_steps: int) -> Any:
        """The milestones due for a run of `total_steps` (`ProgressNotes`): `write_due(emit, step, values)` as steps pass."""
        from logbook.runs.milestones import ProgressNotes

        return ProgressNotes(fractions, total_steps, self.run_dir)

    def checkpoint_advice(self, *, mtbf_s: float | None = None) -> Any:
        """Young's checkpoint interval for this run, from its own event log so far (see `checkpoint_advice`)."""
        return checkpoint_advice(self.run_dir, mtbf_s=mtbf_s)

    def wandb_mirror(self, cfg: Any, **options: Any) -> Any:
        """A mirror of this run into Weights & Biases (`WandbMirror`; `options`: config, emit, say, load_wandb)."""
        from logbook.runs.wandb_mirror import WandbMirror

        return WandbMirror(cfg, root=self.project.root, state_dir=self.project.state_dir, run_id=self.run_id,
                           run_dir=self.run_dir, **options)

    # --- for a loop that numbers its own attempts (the bundled trainer) -------------------

    @staticmethod
    def history(project_root: Path | str, run_id: str) -> RunHistory:
        """What earlier attempts of `run_id` left: events, metrics tail, heartbeat, rank marks (read it on rank 0)."""
        from logbook.core.project import open_project
        from logbook.runs.attempt_ends import RunHistory

        return RunHistory.of_run(open_project(project_root), run_id)

    @staticmethod
    def no_history() -> RunHistory:
        """An empty history: what the ranks that do not read it hold."""
        from logbook.runs.attempt_ends import RunHistory

        return RunHistory()

    @staticmethod
    def restart_facts(history: RunHistory, prev: int, resumed_from_step: int, started_at: float,
                      env: dict[str, str]) -> dict[str, Any]:
        """The payload of the `restart` that attempt `prev`'s end owes: cause, failed step, steps and time lost."""
        from logbook.runs.attempt_ends import classify_restart

        return classify_restart(history, prev, resumed_from_step, started_at, env)

    @staticmethod
    def job_facts(env: dict[str, str]) -> dict[str, Any] | None:
        """The Slurm job this process runs in, as every path records it (None outside Slurm)."""
        from logbook.launch.slurm import slurm_info

        return slurm_info(env)

    @staticmethod
    def oom_kills() -> int | None:
        """The kernel's count of OOM kills in this process's cgroup so far (None where it is not readable)."""
        from logbook.runs.oom import oom_kill_count

        return oom_kill_count()

    @staticmethod
    def is_kind(event: Any, kind: str) -> bool:
        """Whether an event (or a kind's name) is of registered kind `kind`: never compare kinds as strings."""
        from logbook.eventlog.kinds import is_kind

        return is_kind(event, kind)

    @staticmethod
    def check_id(run_id: str) -> str:
        """`run_id` if it is a valid run id, else a `UsageError` that says why: check it before any work."""
        from logbook.runs.run_record import check_run_id

        return check_run_id(run_id)

    @staticmethod
    def state_dir(project_root: Path | str) -> Path:
        """The logbook's uncommitted state folder (`.logbook/`) of the repository at `project_root`."""
        from logbook.core.project import open_project

        return open_project(project_root).state_dir

    @staticmethod
    def format_duration(seconds: float) -> str:
        """A duration as every view of the logbook writes it (`3.8 s`, `12 min`)."""
        from logbook.runs.ckpt_advice import format_duration

        return format_duration(seconds)


def open_run(project_root: Path | str, run_id: str, *, rank: int = 0, attempt: int | None = None,
             total_steps: int | None = None) -> Run:
    """Open run `run_id` of the logbook at `project_root` for writing (rank 0) or reading (other ranks).

    `attempt`: the attempt this process is part of; by default one more than
    the last attempt in the run's event log (a loop with several ranks should
    have rank 0 decide and share it). `total_steps`: the run's length, so that
    the committed metrics keep every step a milestone or a prediction names.
    Raises `UsageError` for a run id that is not a plain name.
    """
    from logbook.core.project import open_project
    from logbook.eventlog.runlog import iter_events
    from logbook.eventlog.sink import EventSink, MetricsWriter, full_metrics_path
    from logbook.runs.attempt_ends import Heartbeat, heartbeat_path
    from logbook.runs.rankmarks import RankMark, ranks_dir
    from logbook.runs.run_record import check_run_id, load_run_record

    check_run_id(run_id)
    project = open_project(Path(project_root))
    run_dir = project.run_dir(run_id)
    try:
        record = load_run_record(project, run_id)
    except NotFoundError:
        record = None  # started directly, not through `logbook run`
    if attempt is None:
        seen = [e.get("attempt") for e in iter_events(run_dir / "events.jsonl")]
        attempt = max((a for a in seen if isinstance(a, int)), default=0) + 1
    sink = EventSink(run_dir, run_id, attempt, rank, root=project.root)
    metrics = MetricsWriter(run_dir, rank, full_path=full_metrics_path(project.state_dir, run_id),
                            keep=_keep_rule(project, record, total_steps))
    return Run(project, run_id, run_dir, record, attempt, rank, sink, metrics,
               RankMark(ranks_dir(project.state_dir, run_id), rank), Heartbeat(heartbeat_path(project.state_dir, run_id)),
               total_steps=total_steps if isinstance(total_steps, int) and total_steps > 0 else None)


def run_from_env(run_id: str | None = None, *, project_root: Path | str | None = None,
                 total_steps: int | None = None) -> Run:
    """The run this process trains for: the one `logbook run -- CMD` launched it in, or one it starts itself.

    Under `logbook run -- CMD`, LOGBOOK_PROJECT, LOGBOOK_RUN_ID and
    LOGBOOK_ATTEMPT name the run and attempt (the launcher records the
    attempts, restarts and the end from outside: `Run.launched` is True and a
    loop emits only what happens inside training). Otherwise the run is
    `run_id` (default: the script's name and the UTC time) in the logbook of
    `project_root` (default: the current directory), an exploratory run whose
    loop emits its own `run_started` and end. The rank is torchrun's (RANK),
    so every process of a distributed job may call this and only rank 0 writes.
    """
    import os
    import sys
    import time

    rank = int(os.environ.get("RANK", "0") or 0)
    if os.environ.get(RUN_ENV):
        attempt = int(os.environ.get(ATTEMPT_ENV, "0") or 0) or None
        run = open_run(os.environ.get(PROJECT_ENV) or project_root or ".", os.environ[RUN_ENV], rank=rank,
                       attempt=attempt, total_steps=total_steps)
        run.launched = True
        world = os.environ.get("WORLD_SIZE", "1")
        run._tell(world_size=int(world) if world.isdigit() and int(world) > 0 else None)
        return run
    if run_id is None:
        script = Path(sys.argv[0]).stem if sys.argv and sys.argv[0] not in ("", "-c") else "run"
        run_id = f"{''.join(c if c.isalnum() else '-' for c in script.lower()).strip('-') or 'run'}-" \
                 f"{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}"
    return open_run(project_root or ".", run_id, rank=rank, total_steps=total_steps)


def _keep_rule(project: Project, record: RunRecord | None, total: int | None) -> Any:
    """What the committed metrics keep: ~1,000 rows a run, plus every step a milestone or prediction names.

    Every row also goes to `.logbook/metrics/` (outside git).
    """
    from logbook.eventlog.sink import KeepRule
    from logbook.runs.milestones import milestone_step

    if not total:
        return KeepRule()
    exact = {milestone_step(f, total) for f in project.config.milestones}
    if record is not None and record.prereg_id:
        from logbook.promises.prereg import load_prereg

        try:
            preds = load_prereg(project, record.prereg_id).all_predictions(record.amendments)
        except LogbookError:
            preds = []  # an unreadable preregistration is verify's to report; the stride still plots the run
        for p, _src in preds:
            if p.at.kind == "step":
                exact.add(int(p.at.value))
            elif p.at.kind == "fraction":
                exact.add(milestone_step(float(p.at.value), total))
    return KeepRule.for_run(total, exact)


def checkpoint_advice(run_dir: Path | str, *, mtbf_s: float | None = None) -> Any:
    """Young's checkpoint interval for a run, from its own event log (`logbook.runs.ckpt_advice.Advice`).

    The MTBF is the run's own (its failures over its wall time) unless
    `mtbf_s` is given; `Advice.complete` says whether there was enough to go on.
    """
    from logbook.eventlog.runlog import iter_events
    from logbook.runs.ckpt_advice import advise_from_run

    return advise_from_run(list(iter_events(Path(run_dir) / "events.jsonl")), mtbf_s=mtbf_s)
