"""`logbook run -- CMD`: any training command, recorded from outside, restarted when it fails.

The command is not the logbook's, so everything about its attempts is seen
from this process: each attempt's start (`run_started`), how it ended (exit
code or signal), the restart that follows (cause, the step it had reached,
the step it resumed from, steps and seconds lost, downtime), and the end
(`run_finished`, `run_failed`). Its metrics come from the command itself when
it uses the API (`logbook.api.run_from_env`: the environment names the run
and attempt), or from its output lines, matched by a regular expression with
named groups (`step`, `loss`, any other number). Milestone notes follow from
those metrics when the run's length is known (`--steps`, or the API's).

A command silent for longer than `--hang-timeout` is killed and restarted (a
`hang`, then a restart whose cause is the hang). A SIGTERM to `logbook run`
(a scheduler's preemption) goes on to the command, which has the time it
takes to stop; the run is then `preempted` (exit 75) and `logbook run
--resume RUN` starts its next attempt.

What it cannot do, unlike the bundled trainer: roll back or skip a batch (the
loop is not ours), resume by itself (the command resumes from its own
checkpoints), or save before a preemption (the command's own SIGTERM handler
may). The record is the same: run.json
with the code snapshot and the preregistration's promise, and the one
hash-chained event log every view reads.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from logbook.core.errors import EXIT_INTERRUPTED, EXIT_PREEMPTED, RefusedError, UsageError
from logbook.core.project import Project
from logbook.launch.launcher import Rendezvous, _checked_prereg, _new_plan, _term_with_parent, new_run_id
from logbook.launch.handshake import RESUMED_LINE, handshake_path, mark_started, read_handshake
from logbook.launch.torchrun_facts import is_torchrun, root_cause, torchrun_world_size
from logbook.launch.watch import RunResult
from logbook.eventlog.sink import EventSink, MetricsWriter, full_metrics_path
from logbook.runs.milestones import ProgressNotes
from logbook.runs.run_record import check_run_id
from logbook.core.textfmt import plural

Say = Callable[[str], None]
ENV_PROJECT, ENV_RUN, ENV_ATTEMPT = "LOGBOOK_PROJECT", "LOGBOOK_RUN_ID", "LOGBOOK_ATTEMPT"  # logbook.api reads them


@dataclass
class WrappedOptions:
    """How `logbook run -- CMD` supervises the command."""

    command: list[str]
    """The command and its arguments, as typed after `--`."""
    max_restarts: int = 3
    """Restarts after a failed attempt before the run fails."""
    steps: int | None = None
    """The run's length in steps, when known: milestones and progress need it."""
    metrics_regex: str | None = None
    """A regular expression over the command's output lines; its named groups `step`, `loss`, ... are metrics."""
    hang_timeout_s: float | None = None
    """Seconds without a line of output after which the command counts as hung, is killed and restarted."""
    metrics_from: str | None = None
    """`tensorboard:DIR`: the metrics are the scalars of the TensorBoard event files the command writes there."""
    metrics_tags: list[str] = field(default_factory=list)
    """`TAG=NAME` pairs naming TensorBoard tags as metrics (`train/loss=loss`), beyond the usual names."""
    resume_args: list[str] = field(default_factory=list)
    """Arguments appended to the command on every attempt after the first (`--init_from=resume`): how a script
    that resumes only when told to is told."""

    @classmethod
    def from_cli(cls, command: list[str] | None, *, max_restarts: int | None, steps: int | None,
                 metrics_regex: str | None, metrics_from: str | None, metrics_tags: list[str] | None,
                 hang_timeout_s: float | None, resume_args: list[str] | None) -> WrappedOptions | None:
        """The options of `logbook run` / `slurm-script` for a command after `--`; None without a command, where
        giving any of them is a usage error."""
        opts = cls(command=list(command or []), max_restarts=3 if max_restarts is None else max_restarts,
                   steps=steps, metrics_regex=metrics_regex, hang_timeout_s=hang_timeout_s,
                   resume_args=list(resume_args or []), metrics_from=metrics_from, metrics_tags=list(metrics_tags or []))
        if command is None:
            if opts.cli_args():
                raise UsageError("--steps, --metrics-regex, --metrics-from, --metrics-tag, --hang-timeout and "
                                 "--resume-arg are for a command run after `--`",
                                 hint="the bundled trainer's length is train.steps in its config")
            return None
        return opts

    def cli_args(self) -> list[str]:
        """These options as `logbook run` takes them (what a batch script passes on); the restarts apart."""
        out = [*(["--steps", str(self.steps)] if self.steps is not None else []),
               *(["--metrics-regex", self.metrics_regex] if self.metrics_regex is not None else []),
               *(["--metrics-from", self.metrics_from] if self.metrics_from is not None else []),
               *(["--hang-timeout", f"{self.hang_timeout_s:g}"] if self.hang_timeout_s is not None else [])]
        return out + [f"--metrics-tag={t}" for t in self.metrics_tags] + [f"--resume-arg={a}" for a in self.resume_args]


@dataclass
class _Attempt:
    """What this process saw of one attempt."""

    number: int
    began_at: float = field(default_factory=time.time)
    """Wall time its process was started."""
    first_step: int | None = None
    first_step_at: float | None = None
    """Wall time its first step was seen on its output (a command on the API says it through the handshake)."""
    last_step: int | None = None
    last_loss: float | None = None
    started: bool = False
    """Its `run_started` is written."""
    said_resumed: int | None = None
    """The step its output said it resumed from (`logbook: resumed from step N`)."""
    tail: deque[str] = field(default_factory=lambda: deque(maxlen=200))
    """Its last lines of output: where torchrun's failure summary is."""
    hung: bool = False
    preempted: str | None = None
    """The signal that stopped it for a scheduler (SIGTERM, SIGUSR1), when one did."""


@dataclass
class _Ended:
    """How an attempt ended, as the next attempt's `restart` says it."""

    number: int
    last_step: int | None
    cause: dict[str, Any]
    heartbeat: dict[str, Any] | None = None
    """The heartbeat as the attempt left it: the next attempt's rank 0 rewrites it before its `restart` is written."""


def _cause(attempt: _Attempt, code: int, torchrun: bool) -> dict[str, Any]:
    """Why the attempt ended: a hang, torchrun's first failed rank (its signal or exit code), or the exit."""
    if attempt.hung:
        return {"cause": "hang"}
    failed = root_cause(attempt.tail) if torchrun else None
    if failed is not None:
        return {"cause": "signal" if "signal" in failed else "exit", **failed}
    return {"cause": "signal", "signal": -code} if code < 0 else {"cause": "exit", "exit_code": code}


def checked_regex(text: str | None) -> re.Pattern[str] | None:
    if text is None:
        return None
    try:
        pattern = re.compile(text)
    except re.error as e:
        raise UsageError(f"--metrics-regex {text!r} is not a regular expression: {e}") from None
    if "step" not in pattern.groupindex:
        raise UsageError("--metrics-regex needs a named group `step`",
                         hint=r"e.g. --metrics-regex 'step (?P<step>\d+) loss (?P<loss>[\d.]+)'")
    return pattern


def _script(project: Project, command: list[str]) -> Path | None:
    """The command's script (the first argument that is a file in the repository), for the record's hash."""
    for arg in command[1:] if len(command) > 1 else command:
        path = (project.root / arg).resolve() if not os.path.isabs(arg) else Path(arg)
        if path.is_file() and path.is_relative_to(project.root):
            return path
    return None


def check_command_elsewhere(project: Project, opts: WrappedOptions, prereg_id: str | None) -> None:
    """What `logbook run -- CMD` would refuse, for a run started elsewhere (a Slurm batch script)."""
    from logbook.promises.prereg import load_prereg, resolve_prereg_id

    checked_regex(opts.metrics_regex)
    _checked_source(project, opts)
    if _script(project, opts.command) is None:
        raise UsageError(f"no file of this repository in the command {shlex.join(opts.command)!r}",
                         hint="the run's record hashes the script it runs: give its path, e.g. python train.py")
    if prereg_id:
        load_prereg(project, resolve_prereg_id(project, prereg_id) or prereg_id)  # unknown: NotFoundError


def _checked_source(project: Project, opts: WrappedOptions) -> None:
    from logbook.launch.tbreader import parse_source, parse_tags

    if opts.metrics_from is None:
        if opts.metrics_tags:
            raise UsageError("--metrics-tag names TensorBoard tags: it goes with --metrics-from tensorboard:DIR")
        return
    if opts.metrics_regex is not None:
        raise UsageError("--metrics-regex and --metrics-from are two sources of the same metrics; choose one")
    parse_source(opts.metrics_from, project.root)
    parse_tags(opts.metrics_tags)


def launch_command(project: Project, opts: WrappedOptions, *, prereg_id: str | None = None,
                   exploratory: bool = False, run_id: str | None = None, say: Say = lambda _: None) -> RunResult:
    """Record the run, then run the command until it succeeds or its restarts run out; how it ended."""
    if not opts.command:
        raise UsageError("nothing after `--`", hint="e.g. logbook run --exploratory -- python train.py")
    if opts.max_restarts < 0:
        raise UsageError(f"--max-restarts must be 0 or more, got {opts.max_restarts}")
    if opts.hang_timeout_s is not None and not opts.hang_timeout_s > 0:
        raise UsageError(f"--hang-timeout must be a positive number of seconds, got {opts.hang_timeout_s:g}")
    pattern = checked_regex(opts.metrics_regex)
    _checked_source(project, opts)
    prereg = _checked_prereg(project, prereg_id, exploratory)
    script = _script(project, opts.command)
    if script is None:
        raise UsageError(f"no file of this repository in the command {shlex.join(opts.command)!r}",
                         hint="the run's record hashes the script it runs: give its path, e.g. python train.py")
    run_id = check_run_id(run_id) if run_id else new_run_id(project, prereg.id if prereg else None, script)
    plan = _new_plan(project, run_id, script, [], prereg, prereg.id if prereg else None, exploratory, 1,
                     opts.max_restarts, Rendezvous(), say, command=list(opts.command),
                     command_options={"steps": opts.steps, "metrics_regex": opts.metrics_regex,
                                      "metrics_from": opts.metrics_from, "metrics_tags": opts.metrics_tags,
                                      "hang_timeout_s": opts.hang_timeout_s, "resume_args": opts.resume_args})
    say(f"Starting run {run_id}: " + ("EXPLORATORY run (no preregistration)" if exploratory
                                       else f"preregistration {plan.record.prereg_id}"))
    say(f"  command {shlex.join(opts.command)} (script sha256 {plan.record.config_hash[:12]}), "
        f"up to {plural(opts.max_restarts, 'restart')}")
    return _Supervisor(project, plan.record, opts, pattern, say).run()


def resume_command(project: Project, run_id: str, opts: WrappedOptions, say: Say = lambda _: None) -> RunResult:
    """The next attempts of a run of a command that did not finish (preempted, failed, interrupted)."""
    from logbook.eventlog.runlog import iter_events
    from logbook.eventlog.kinds import is_kind
    from logbook.runs.run_record import load_run_record, run_status

    record = load_run_record(project, check_run_id(run_id))
    if not record.command:
        raise UsageError(f"run {run_id} trained with the bundled trainer, not a command",
                         hint=f"resume it without `--`: logbook run --resume {run_id}")
    if opts.command and opts.command != record.command:
        raise RefusedError(f"run {run_id} ran `{shlex.join(record.command)}`; a resumed run runs the same command",
                           hint=f"logbook run --resume {run_id} (the command comes from its record)")
    if run_status(project, run_id, record) == "finished":
        raise RefusedError(f"run {run_id} already finished", hint="start a new run instead of resuming this one")
    opts.command = list(record.command)
    kept = record.command_options or {}  # what the first launch said, unless this one says otherwise
    opts.steps = opts.steps if opts.steps is not None else kept.get("steps")
    opts.metrics_regex = opts.metrics_regex if opts.metrics_regex is not None else kept.get("metrics_regex")
    opts.hang_timeout_s = opts.hang_timeout_s if opts.hang_timeout_s is not None else kept.get("hang_timeout_s")
    opts.resume_args = opts.resume_args or list(kept.get("resume_args") or [])
    opts.metrics_from = opts.metrics_from if opts.metrics_from is not None else kept.get("metrics_from")
    opts.metrics_tags = opts.metrics_tags or list(kept.get("metrics_tags") or [])
    events = list(iter_events(project.run_dir(run_id) / "events.jsonl"))
    first = max((e["attempt"] for e in events if isinstance(e.get("attempt"), int)), default=0) + 1
    say(f"Resuming run {run_id}: attempt {first}, command {shlex.join(record.command)}")
    sup = _Supervisor(project, record, opts, checked_regex(opts.metrics_regex), say, first=first)
    if events:
        last = events[-1]
        steps = [e["step"] for e in events if isinstance(e.get("step"), int)]
        cause = {"cause": "preempted"} if is_kind(last, "preempted") else {"cause": "unknown"}
        sup.resumed_after = _Ended(first - 1, max(steps, default=None), cause, sup.heartbeat())
    return sup.run()


class _Supervisor:
    """Runs the attempts and writes what they did."""

    def __init__(self, project: Project, record: Any, opts: WrappedOptions, pattern: re.Pattern[str] | None,
                 say: Say, first: int = 1) -> None:
        self.project, self.record, self.opts, self.pattern, self.say = project, record, opts, pattern, say
        self.first = first
        self.resumed_after: _Ended | None = None
        """How the attempt before a `--resume` ended (its `restart` opens the resumed attempt)."""
        self.proc: subprocess.Popen[str] | None = None
        self.attempt: _Attempt | None = None
        self._lock = threading.Lock()  # steps arrive from the output and from the TensorBoard reader's thread
        self._tb_lock = threading.Lock()
        self.tb = None
        if opts.metrics_from:
            from logbook.launch.tbreader import TensorBoardTail, parse_source, parse_tags

            self.tb = TensorBoardTail(parse_source(opts.metrics_from, project.root), parse_tags(opts.metrics_tags))
        self.run_dir = project.run_dir(record.run_id)
        self.notes = ProgressNotes(project.config.milestones, opts.steps, self.run_dir)
        self.metrics = MetricsWriter(self.run_dir, 0, flush_every=1,
                                     full_path=full_metrics_path(project.state_dir, record.run_id))

    def run(self) -> RunResult:
        # A scheduler's stop: SIGTERM (preemption, scancel) or Slurm's time-limit warning (SIGUSR1, passed on by
        # `logbook slurm-script`'s batch shell).
        main = threading.current_thread() is threading.main_thread()
        previous = {sig: signal.signal(sig, self._on_sigterm) for sig in (signal.SIGTERM, signal.SIGUSR1)} if main else {}
        try:
            return self._run()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _on_sigterm(self, signum: int, frame: Any) -> None:
        """A scheduler's preemption: the command gets a SIGTERM (what a script stops on) and the time it takes."""
        if self.attempt is not None:
            self.attempt.preempted = signal.Signals(signum).name
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)

    def _run(self) -> RunResult:
        restarts, prev, reason = 0, self.resumed_after, ""
        last = self.first + self.opts.max_restarts
        for number in range(self.first, last + 1):
            attempt = _Attempt(number)
            code = self._attempt(attempt, prev)
            if attempt.preempted:
                # No saved_step: whether and where the command saved is its own business, not known from here.
                self._sink(number).emit("preempted", step=attempt.last_step, signal=attempt.preempted, **_slurm())
                return self._result("preempted", number, restarts, EXIT_PREEMPTED,
                                    f"preempted (SIGTERM) at step {attempt.last_step}; resume with "
                                    f"`logbook run --resume {self.record.run_id}`")
            teardown = self._failed_after_its_last_step(attempt, code)
            if code == 0 or teardown:
                self._sink(number).emit("run_finished", step=attempt.last_step, final_loss=attempt.last_loss,
                                        attempt_wall_s=round(time.time() - attempt.began_at, 3),
                                        **({"teardown": teardown} if teardown else {}))
                if teardown:
                    self.say(f"  attempt {number} closed at its last step, then {teardown}: not trained again")
                return self._result("finished", number, restarts, 0)
            if code == -signal.SIGINT or code == EXIT_INTERRUPTED:
                reason = "interrupted by Ctrl-C"
                self._sink(number).emit("run_failed", step=attempt.last_step, reason=reason, exit_code=EXIT_INTERRUPTED,
                                        attempts=number, status="failed")
                return self._result("failed", number, restarts, EXIT_INTERRUPTED, reason)
            prev = _Ended(attempt.number, attempt.last_step, _cause(attempt, code, is_torchrun(self.opts.command)),
                          self.heartbeat())
            if number < last:
                restarts += 1
                self.say(f"  attempt {number} {_how(attempt, prev.cause, code)}; restarting")
        how = _how(attempt, prev.cause, code)
        reason = f"attempt {attempt.number} {how}, and no restart was left ({self.opts.max_restarts} allowed)"
        self._sink(attempt.number).emit("run_failed", step=attempt.last_step, reason=reason,
                                        exit_code=code if code > 0 else 1, attempts=attempt.number, status="failed")
        return self._result("failed", attempt.number, restarts, 5, reason)

    def _failed_after_its_last_step(self, attempt: _Attempt, code: int) -> str | None:
        """How an attempt failed after its loop closed the run at its last step (`Run.close`, rank 0), or None.

        A sync-training loop's rank 0 reaches its last step only once every
        rank has, so a failure after that is in the teardown (torchrun's
        shutdown, a rank's exit handler): training is over, and a relaunch
        would record a restart that lost nothing and trained nothing.
        """
        if code == 0 or attempt.hung or attempt.preempted or self.pattern is not None or self.tb is not None:
            return None
        told = read_handshake(handshake_path(self.project.state_dir, self.record.run_id, attempt.number))
        total, closed = told.get("total_steps"), told.get("closed_at_step")
        if not isinstance(total, int) or closed != total or attempt.last_step != total:
            return None
        return _how(attempt, _cause(attempt, code, is_torchrun(self.opts.command)), code)

    def heartbeat(self) -> dict[str, Any] | None:
        from logbook.runs.attempt_ends import heartbeat_path, read_heartbeat

        return read_heartbeat(heartbeat_path(self.project.state_dir, self.record.run_id))

    def _sink(self, attempt: int) -> EventSink:
        return EventSink(self.run_dir, self.record.run_id, attempt, 0, root=self.project.root)

    def _attempt(self, attempt: _Attempt, prev: _Ended | None) -> int:
        """One attempt: its start is written once its first step is seen (that is when the resume step is known),
        or at once when no --metrics-regex reads steps (a command on the API writes its own metrics after it)."""
        env = {**os.environ, ENV_PROJECT: str(self.project.root), ENV_RUN: self.record.run_id,
               ENV_ATTEMPT: str(attempt.number), "PYTHONUNBUFFERED": "1"}
        command = [*self.opts.command, *(self.opts.resume_args if attempt.number > 1 else [])]
        # Its own session (a Ctrl-C is passed on by us, once); a SIGTERM if this launcher dies, as torchrun gets.
        proc = subprocess.Popen(command, cwd=self.project.root, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, bufsize=1, start_new_session=True,
                                preexec_fn=_term_with_parent)
        self.proc, self.attempt = proc, attempt
        heard = [time.monotonic()]
        if self.opts.hang_timeout_s:
            threading.Thread(target=self._watch, args=(proc, attempt, heard), daemon=True).start()
        if self.pattern is None and self.tb is None:  # a command on the API says its first step through the handshake
            threading.Thread(target=self._follow_handshake, args=(proc, attempt, prev), daemon=True).start()
        if self.tb is not None:
            threading.Thread(target=self._follow_tensorboard, args=(proc, attempt, prev), daemon=True).start()
        try:
            for line in proc.stdout:  # type: ignore[union-attr]
                heard[0] = time.monotonic()
                sys.stderr.write(line)
                attempt.tail.append(line)
                if (said := RESUMED_LINE.match(line)) and attempt.said_resumed is None:
                    attempt.said_resumed = int(said.group(1))
                seen = self._metrics(line)
                if seen is not None:
                    self._seen(attempt, prev, *seen)
            code = proc.wait()
        except KeyboardInterrupt:
            os.killpg(proc.pid, signal.SIGINT)  # the command's own Ctrl-C path, then its end
            proc.wait()
            code = -signal.SIGINT
        if self.tb is not None:
            self._read_tensorboard(attempt, prev)  # what the writer flushed as the command closed it
        if self.pattern is None and self.tb is None:
            self._progress_from_api(attempt)
        with self._lock:
            if not attempt.started:  # it never made a step: its start is written as it ends
                self._start(attempt, prev)
                attempt.started = True
        return code

    def _follow_handshake(self, proc: subprocess.Popen[str], attempt: _Attempt, prev: _Ended | None) -> None:
        """A command on the API: its start is written once it says its first step (the resume step is known then)."""
        path = handshake_path(self.project.state_dir, self.record.run_id, attempt.number)
        while proc.poll() is None and not attempt.started:
            told = read_handshake(path)
            if told.keys() & {"first_step", "resumed_from_step", "first_event_at"}:
                with self._lock:
                    if not attempt.started:
                        attempt.first_step = told.get("first_step")
                        # Down until it trained again: its first step, else the moment it said it resumed.
                        attempt.first_step_at = told.get("first_step_at") or time.time()
                        self._start(attempt, prev)
                        attempt.started = True
                return
            time.sleep(0.05)

    def _follow_tensorboard(self, proc: subprocess.Popen[str], attempt: _Attempt, prev: _Ended | None) -> None:
        while proc.poll() is None:
            self._read_tensorboard(attempt, prev)
            time.sleep(0.5)

    def _read_tensorboard(self, attempt: _Attempt, prev: _Ended | None) -> None:
        with self._tb_lock:  # the follower thread and the attempt's last read share the files' loaders
            for step, row in self.tb.new_rows():  # type: ignore[union-attr]
                self._seen(attempt, prev, step, row)

    def _seen(self, attempt: _Attempt, prev: _Ended | None, step: int, row: dict[str, float]) -> None:
        """One step's metrics: written, and the attempt's start and milestones once due."""
        with self._lock:
            now = time.time()
            if attempt.first_step is None:
                attempt.first_step, attempt.first_step_at = step, now
            attempt.last_step, attempt.last_loss = step, row.get("loss", attempt.last_loss)
            self.metrics.write({"step": step, "attempt": attempt.number, **row, "time": round(now, 3)})
            if not attempt.started:
                self._start(attempt, prev)
                attempt.started = True
            self._milestones(attempt)

    def _progress_from_api(self, attempt: _Attempt) -> None:
        """The steps a command on the API logged itself (the run's full metrics), for its end's step and loss."""
        from logbook.eventlog.sink import read_metrics

        rows = [r for r in read_metrics(full_metrics_path(self.project.state_dir, self.record.run_id).parent)
                if r.get("attempt") == attempt.number and isinstance(r.get("step"), int)]
        if rows:
            attempt.first_step, attempt.last_step = rows[0]["step"], rows[-1]["step"]
            attempt.last_loss = next((r["loss"] for r in reversed(rows) if isinstance(r.get("loss"), (int, float))),
                                     None)

    def _watch(self, proc: subprocess.Popen[str], attempt: _Attempt, heard: list[float]) -> None:
        """The hang watchdog: silence past the timeout is a `hang`; the command is killed, to be restarted."""
        timeout = float(self.opts.hang_timeout_s or 0)
        while proc.poll() is None:
            silent = time.monotonic() - heard[0]
            if silent > timeout:
                attempt.hung = True
                self._sink(attempt.number).emit("hang", step=attempt.last_step, timeout_s=timeout,
                                                elapsed_s=round(silent, 3))
                os.killpg(proc.pid, signal.SIGKILL)
                return
            time.sleep(min(0.5, timeout / 4))

    def _metrics(self, line: str) -> tuple[int, dict[str, float]] | None:
        """(step, metrics) from one output line that --metrics-regex matches."""
        m = self.pattern.search(line) if self.pattern else None
        if m is None:
            return None
        row: dict[str, Any] = {}
        for name, value in m.groupdict().items():
            try:
                row[name] = int(value) if name == "step" else float(value)
            except (TypeError, ValueError):
                continue
        return (row.pop("step"), row) if "step" in row else None

    def _start(self, attempt: _Attempt, prev: _Ended | None) -> None:
        """`restart` (for every attempt after the first), then `run_started`, as the bundled trainer writes them.

        Each fact from the best source there is, else unknown (None): the
        resume step from what the command said (the API's handshake, or its
        `logbook: resumed from step N` line; a first attempt starts at 0),
        the cost from the run's own metrics rows and events, as every other
        path reads it, the downtime up to this attempt's first step.
        """
        from logbook.runs.attempt_ends import RunHistory

        sink = self._sink(attempt.number)
        told = read_handshake(handshake_path(self.project.state_dir, self.record.run_id, attempt.number))
        self.metrics.flush()
        history = RunHistory.of_run(self.project, self.record.run_id)
        if prev is not None and prev.heartbeat is not None:
            history.heartbeat = prev.heartbeat
        if prev is None and attempt.number == 1:
            resumed: int | None = 0
        else:
            resumed = told.get("resumed_from_step", attempt.said_resumed)
        if resumed is None and attempt.first_step is not None:
            # Its first step is the run's very first one again: it started from scratch (no checkpoint).
            firsts = [r["step"] for r in history.metrics if r.get("attempt") == 1 and isinstance(r.get("step"), int)]
            if firsts and attempt.first_step <= min(firsts):
                resumed = 0
        if prev is not None:
            sink.emit("restart", step=resumed, prev_attempt=prev.number, next_attempt=attempt.number,
                      resumed_from_step=resumed, **self._cost(history, prev, resumed, attempt.first_step_at),
                      **prev.cause, **_slurm())
        rec = self.record
        world = told.get("world_size") or torchrun_world_size(self.opts.command)
        if world is None and not is_torchrun(self.opts.command):
            world = None if told else 1  # one process of ours, which did not say it is more
        sink.emit("run_started", step=resumed, script=rec.config_path, script_sha256=rec.config_hash,
                  world_size=world, prereg_id=rec.prereg_id, exploratory=rec.exploratory,
                  snapshot_commit=(rec.snapshot or {}).get("commit"), total_steps=self.opts.steps,
                  resumed_from_step=resumed, started_at=round(attempt.began_at, 3), **_slurm())
        mark_started(handshake_path(self.project.state_dir, rec.run_id, attempt.number))

    @staticmethod
    def _cost(history: Any, prev: _Ended, resumed: int | None, first_step_at: float | None) -> dict[str, Any]:
        """{failed_at_step, steps_lost, seconds_lost, downtime_s} of the attempt that ended: None where unknown."""
        from logbook.runs.attempt_ends import last_signs, restart_cost

        failed_at, last_alive = last_signs(history, prev.number)
        failed_at = failed_at if failed_at is not None else prev.last_step
        if resumed is not None and first_step_at is not None:
            cost = restart_cost(history, prev.number, resumed, first_step_at)
        else:
            cost = {"steps_lost": None, "seconds_lost": None, "downtime_s": None}
            if first_step_at is not None and last_alive is not None:
                cost["downtime_s"] = round(max(0.0, first_step_at - last_alive), 3)
        if failed_at is not None and resumed is not None:
            cost["steps_lost"] = max(0, failed_at - resumed)
        return {**cost, "failed_at_step": failed_at}

    def _milestones(self, attempt: _Attempt) -> None:
        if attempt.last_step is None:
            return
        self.notes.write_due(self._sink(attempt.number).emit, attempt.last_step,
                             lambda: {"loss": attempt.last_loss, "loss_step": attempt.last_step})

    def _result(self, status: str, attempts: int, restarts: int, code: int, reason: str = "") -> RunResult:
        self.metrics.close()
        from logbook.launch.watch import restart_line
        from logbook.eventlog.runlog import iter_events
        from logbook.eventlog.kinds import is_kind

        events = self.run_dir / "events.jsonl"
        lines = [restart_line(e) for e in iter_events(events) if is_kind(e, "restart")]
        return RunResult(run_id=self.record.run_id, status=status, attempts=attempts, restarts=restarts,
                         exit_code=code, run_dir=self.run_dir, events_path=events, reason=reason,
                         exploratory=self.record.exploratory, deviations=list(self.record.deviations),
                         restart_lines=lines)


def _slurm() -> dict[str, Any]:
    """The Slurm job this launcher runs in (the bundled trainer records the same), when it runs in one."""
    from logbook.launch.slurm import slurm_info

    info = slurm_info(os.environ)
    return {"slurm": info} if info else {}


def _how(attempt: _Attempt, cause: dict[str, Any], code: int) -> str:
    """How an attempt ended, in words: "hung", "rank 1 was killed by SIGKILL", "exited with code 3"."""
    if attempt.hung:
        return "hung"
    if isinstance(cause.get("failed_rank"), int):
        sig = cause.get("signal")
        return f"rank {cause['failed_rank']} " + (_ended(-sig) if isinstance(sig, int) else
                                                  _ended(int(cause.get("exit_code") or code)))
    return _ended(code)


def _ended(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"
