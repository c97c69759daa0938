"""What the launcher does while torchrun runs, and how it reads the end.

While torchrun runs: follow the run's event log, say a line for each restart
or failed attempt, re-render the chronicle when events arrive (a rendering
failure is a warning, never the end of a run), and turn SIGINT/SIGTERM into
one SIGTERM for torchrun so the trainer saves before it stops (SIGUSR1
too: Slurm's time-limit warning, which would kill torchrun outright).

When torchrun has exited: the event log decides. `run_finished` means
finished; a `preempted` in the last attempt means preempted (exit 75); else
the launcher writes `run_failed` itself, with the best reason it can find.
"""

from __future__ import annotations

import dataclasses
import json
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from logbook.chronicle.build import render_chronicle
from logbook.core.errors import EXIT_INTERRUPTED, EXIT_OK, EXIT_PREEMPTED, EXIT_RUN_FAILED
from logbook.core.fsutil import json_records, log_tail
from logbook.core.project import Project
from logbook.eventlog.chain import iter_records
from logbook.eventlog.kinds import (
    Event, counted_as, ending, has_flag, is_kind, restart_cause, summary, unfinished_save_words,
)
from logbook.eventlog.sink import EventSink
from logbook.runs.attempt_ends import lost_ranks_of
from logbook.runs.rankmarks import name_ranks
from logbook.runs.run_record import RunRecord
from logbook.core.textfmt import plural


_FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)
"""SIGUSR1 is Slurm's warning before a time limit (`--signal=USR1@120`): torchrun itself would die of it."""


@dataclass
class RunResult:
    """How a launch ended."""

    run_id: str
    status: str
    """finished | failed | aborted | preempted | stopped"""
    attempts: int
    """Last attempt number in the run's event log (1-based, across resumes)."""
    restarts: int
    """`restart` events in the run's event log."""
    exit_code: int
    """0 finished or stopped, 5 failed or aborted, 75 preempted, 130 interrupted by Ctrl-C."""
    run_dir: Path
    events_path: Path
    reason: str = ""
    torchrun_exit: int | None = None
    exploratory: bool = False
    deviations: list[str] = field(default_factory=list)
    restart_lines: list[str] = field(default_factory=list)
    """One human line per restart, in order."""

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["run_dir"], d["events_path"] = str(self.run_dir), str(self.events_path)
        return d


class EventTail:
    """Reads the complete lines appended to a log since the last read."""

    def __init__(self, path: Path, from_end: bool = True) -> None:
        self.path = Path(path)
        self.offset = 0
        if from_end and self.path.exists():
            # A torn last line (a kill mid-append) is read once it is repaired.
            with open(self.path, "rb") as f:
                self.offset = log_tail(f).complete_end

    def new(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            data = f.read()
        end = data.rfind(b"\n")
        if end < 0:
            return []
        self.offset += end + 1
        return json_records(data[: end + 1].splitlines())


class StderrPump:
    """Copies torchrun's stderr (its own and its workers') to the terminal and to a log file.

    Once the launcher has forwarded a SIGINT or SIGTERM, torchrun answers with a
    `SignalException` traceback of some 25 lines although all went as designed;
    from then on the output goes to the log file only, and the person at the
    terminal sees the launcher's one line about the signal and how the run ended.

    With `person_lines` (a run's console), only the lines the trainer writes
    for a person (`error:`, `hint:`) go to it; torchrun's own lines, worker
    tracebacks and progress go to the log file alone.
    """

    def __init__(self, stream: IO[bytes], log_path: Path, muted: Callable[[], bool],
                 out: IO[bytes] | None = None, person_lines: Callable[[str], None] | None = None) -> None:
        self._person_lines = person_lines
        self._stream = stream
        self._log_path = log_path
        self._muted = muted
        self._out = out if out is not None else sys.stderr.buffer
        self._thread = threading.Thread(target=self._pump, name="torchrun-stderr", daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        with open(self._log_path, "ab") as log:
            # Chunks, not lines: a progress bar redraws with \r and never ends a line.
            pending = b""
            while chunk := self._stream.read1(65536):
                log.write(chunk)
                log.flush()
                if self._person_lines is not None:
                    *lines, pending = (pending + chunk).split(b"\n")
                    self._to_person(lines)
                elif not self._muted():
                    try:
                        self._out.write(chunk)
                        self._out.flush()
                    except (OSError, ValueError):
                        pass  # the terminal went away; the log file keeps everything

    def _to_person(self, lines: list[bytes]) -> None:
        for raw in lines:
            text = raw.decode("utf-8", "replace").rstrip("\r")
            if text.startswith(("error:", "hint:")) and not self._muted():
                self._person_lines(text)

    def join(self, timeout: float = 5.0) -> None:
        self._thread.join(timeout)


class Watcher:
    """Follows one torchrun process until it exits."""

    def __init__(self, project: Project, run_id: str, proc: subprocess.Popen, say: Callable[[str], None],
                 heads: Any = None, on_tick: Callable[[Project, str, list[dict[str, Any]]], None] | None = None) -> None:
        self.on_tick = on_tick
        """A run's console: it shows new events itself (the registry's summaries) instead of `event_line`'s."""
        self.project = project
        self.heads = heads  # a HeadStamper: told of each checkpoint, it stamps the log's head in its own thread
        self.run_id = run_id
        self.proc = proc
        self.say = say
        self.tail = EventTail(project.run_dir(run_id) / "events.jsonl")
        self.signals: list[int] = []
        self._warned: set[str] = set()

    def wait(self, poll_s: float = 1.0) -> int:
        """Block until torchrun exits; return its exit code."""
        previous = self._install()
        try:
            while True:
                try:
                    return self.proc.wait(timeout=poll_s)
                except subprocess.TimeoutExpired:
                    self.tick()
        finally:
            self._restore(previous)
            self.tick()

    def tick(self) -> None:
        new = [e for e in self.tail.new() if e.get("run") == self.run_id]
        if self.on_tick is not None:
            self.on_tick(self.project, self.run_id, new)
        for ev in new if self.on_tick is None else []:
            line = event_line(ev)
            if line:
                self.say(line)
        if self.heads is not None and any(is_kind(e, "checkpoint_saved") for e in new):
            self.heads.checkpoint(new[-1])
        if new:
            self._render(sorted({str(e.get("ts", ""))[:10] for e in new if e.get("ts")}))

    def _render(self, days: list[str]) -> None:
        try:
            res = render_chronicle(self.project, days=days)
        except Exception as e:  # a renderer bug must never stop a run
            self._warn(f"chronicle not rendered: {type(e).__name__}: {e}")
            return
        for w in res.warnings:
            self._warn(w)

    def _warn(self, message: str) -> None:
        if message not in self._warned:
            self._warned.add(message)
            self.say(f"warning: {message} (the run goes on; `logbook render` can render it later)")

    def _on_signal(self, signum: int, _frame: Any) -> None:
        self.signals.append(signum)
        name = signal.Signals(signum).name
        if len(self.signals) == 1:
            self.say(f"{name}: asking the trainer to save and stop (SIGTERM to torchrun)")
            try:
                self.proc.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                pass
        else:
            self.say(f"{name}: already stopping; torchrun kills the workers if they do not stop within 30 s")

    def _install(self) -> dict[int, Any] | None:
        if threading.current_thread() is not threading.main_thread():
            return None  # signal handlers can only be set from the main thread
        return {s: signal.signal(s, self._on_signal) for s in _FORWARDED}

    def _restore(self, previous: dict[int, Any] | None) -> None:
        for s, handler in (previous or {}).items():
            signal.signal(s, handler)


def event_line(ev: dict[str, Any]) -> str | None:
    """One plain line for the events a person at the terminal should see at once."""
    d = ev.get("data") or {}
    if not has_flag(ev, console=True):
        return None
    if is_kind(ev, "restart"):  # its payload says how the attempt before it ended
        return restart_line(ev)
    if ending(ev) == "exception":
        if d.get("exception_type") == "RunFailedError":
            return None  # an abort: final, and the worker's own `error:` line already says it
        return f"attempt {ev.get('attempt')} failed at step {ev.get('step')}: {d.get('exception_type')}: {d.get('exception_message')}"
    if is_kind(ev, "run_stopped"):
        return f"attempt {ev.get('attempt')} stopped on request at step {ev.get('step')}: checkpoint at step {d.get('saved_step')}"
    if ending(ev) == "preempted" and is_kind(ev, "preempted"):
        return f"attempt {ev.get('attempt')} preempted at step {ev.get('step')}: checkpoint at step {d.get('saved_step')}"
    return f"attempt {ev.get('attempt')} at step {ev.get('step')}: {summary(ev)}"


def restart_line(ev: dict[str, Any]) -> str:
    """The terminal's line for a restart: the registry's words for its cause, then what the trainer added."""
    d = Event.of(ev).data
    prev = d.get("prev_attempt", (ev.get("attempt") or 1) - 1)
    words, detail = restart_cause(d), str(d.get("detail") or "")
    # A detail that opens with the same words says them more fully ("killed by a signal with no record left").
    parts = [f"restart: attempt {prev} -> {ev.get('attempt')}, {detail if detail.startswith(words) else words}"]
    if detail and not detail.startswith(words):
        parts.append(detail)
    if d.get("resumed_from_step") is not None:
        lost = f", {plural(d['steps_lost'], 'step')} lost" if d.get("steps_lost") is not None else ""
        parts.append(f"{unfinished_save_words(d) or 'resumed from step ' + str(d['resumed_from_step'])}{lost}")
    if ev.get("drill"):
        parts.append("drill")
    return " · ".join(parts)


# --- the end of a launch -------------------------------------------------------------


def next_seq(events_path: Path) -> int:
    """The `seq` the next record of a log will get: where a new launch's events begin."""
    return 1 + max((int(e.get("seq", -1)) for e in iter_records(events_path)), default=-1)


def launch_ending(project: Project, rec: RunRecord, torchrun_exit: int, signals: list[int], launch_dir: Path,
            first_seq: int = 0, record: bool = True, join_timeout_s: float | None = None) -> RunResult:
    """Decide how the launch ended; with `record`, write run_failed into the run's event log.

    Only this launch's events (from `first_seq` on) say how it ended: an
    earlier launch of a resumed run may have been preempted or failed.
    """
    events_path = project.run_dir(rec.run_id) / "events.jsonl"
    events = [e for e in iter_records(events_path) if e.get("run") == rec.run_id]
    ours = [e for e in events if int(e.get("seq", -1)) >= first_seq]
    last = max((int(e.get("attempt") or 0) for e in ours), default=0)
    tail = [e for e in ours if e.get("attempt") == last]
    endings = {ending(e) for e in tail}
    interrupted = bool(signals) and signals[0] == signal.SIGINT
    reason = ""
    if any(ending(e) == "finished" for e in events):
        status, code = "finished", EXIT_OK
    elif "stopped" in endings:  # `logbook stop`: saved and ended on request, the trainer exited 0
        status, code = "stopped", EXIT_OK
        reason = "stopped on request after saving (logbook stop); resume with `logbook run --resume " + rec.run_id + "`"
    elif "preempted" in endings:
        status, code = "preempted", EXIT_INTERRUPTED if interrupted else EXIT_PREEMPTED
        reason = "stopped on request after saving; resume with `logbook run --resume " + rec.run_id + "`"
    elif signals and not interrupted and not ours:
        # A scheduler's stop (SIGTERM, Slurm's SIGUSR1) before the trainer began: nothing was
        # lost, so it is a preemption (exit 75, requeued), not a failure.
        status, code = "preempted", EXIT_PREEMPTED
        reason = (f"stopped by {signal.Signals(signals[0]).name} before the trainer started; nothing to save; "
                  f"resume with `logbook run --resume {rec.run_id}`")
    else:
        status = "aborted" if "aborted" in endings else "failed"
        code = EXIT_INTERRUPTED if interrupted else EXIT_RUN_FAILED
        lost = lost_ranks_of(project.state_dir, rec.run_id, last)
        reason = failure_reason(rec, tail, last, torchrun_exit, signals, launch_dir, lost=lost,
                                join_timeout_s=join_timeout_s)
        last = last or _first_attempt_of_launch(events)  # an attempt that died before its first event
        if record:
            step = max((e["step"] for e in tail if isinstance(e.get("step"), int)), default=None)
            aborted = [e["step"] for e in tail if ending(e) == "aborted" and isinstance(e.get("step"), int)]
            step = aborted[-1] if aborted else step  # an abort ends the run where run_aborted says, as every view reads it
            EventSink(project.run_dir(rec.run_id), rec.run_id, attempt=last, rank=0).emit(
                "run_failed", step=step, reason=reason, exit_code=torchrun_exit, attempts=last,
                status=status, torchrun_attempts=len(_attempt_dirs(launch_dir)),
            )
    last = max(last, max((int(e.get("attempt") or 0) for e in events), default=0))
    restarts = [e for e in events if counted_as(e) == "restarts"]
    return RunResult(
        run_id=rec.run_id, status=status, attempts=last, restarts=len(restarts), exit_code=code,
        run_dir=project.run_dir(rec.run_id), events_path=events_path, reason=reason,
        torchrun_exit=torchrun_exit, exploratory=rec.exploratory, deviations=list(rec.deviations),
        restart_lines=[restart_line(e) for e in restarts],
    )


def _first_attempt_of_launch(events: list[dict[str, Any]]) -> int:
    return 1 + max((int(e.get("attempt") or 0) for e in events), default=0)


def failure_reason(rec: RunRecord, tail: list[dict[str, Any]], last: int, torchrun_exit: int,
                   signals: list[int], launch_dir: Path, lost: list[dict[str, Any]] = (),
                   join_timeout_s: float | None = None) -> str:
    """The best one-sentence account of why the last attempt ended.

    `lost`: the workers of the last attempt that vanished (see `rankmarks`).
    """
    by_ending = {ending(e): e for e in tail if ending(e)}
    drill = next((e for e in tail if is_kind(e, "fault_injected")), None)
    worker_error = _worker_error(launch_dir)
    if signals:
        why = f"stopped by {signal.Signals(signals[0]).name} before the trainer saved"
    elif _rendezvous_timed_out(launch_dir):
        gone = f": {name_ranks(lost)} vanished" if lost else ""
        waited = f"{join_timeout_s:g} s" if join_timeout_s else "its join timeout"
        why = (f"node lost: attempt {last} ended{gone}, and the rendezvous waited {waited} for all "
               f"{plural(rec.nnodes, 'node')} to come back; they did not")
    elif worker_error.startswith("StartupTimeout"):
        why = f"an attempt could not start: {worker_error}"
    elif "aborted" in by_ending:
        why = f"aborted by the guard: {(by_ending['aborted'].get('data') or {}).get('reason', 'no reason given')}"
    elif "exception" in by_ending:
        d = by_ending["exception"].get("data") or {}
        why = f"attempt {last} raised {d.get('exception_type')}: {d.get('exception_message')}"
    elif "hang" in by_ending:
        why = f"attempt {last} hung: a step ran past {(by_ending['hang'].get('data') or {}).get('timeout_s')} s"
    elif drill is not None:
        why = f"attempt {last} was killed by a drill fault ({(drill.get('data') or {}).get('fault')})"
    elif not tail:
        why = "the trainer never started"
        if worker_error:
            why += f": {worker_error}"
    else:
        why = f"attempt {last} ended without an error record (killed by a signal, or its machine was lost)"
    used = len(_attempt_dirs(launch_dir))
    if used > rec.max_restarts and not signals and "aborted" not in by_ending:
        why += f"; all {plural(rec.max_restarts, 'restart')} used"
    return f"{why} (torchrun exit {torchrun_exit})"


def _rendezvous_timed_out(launch_dir: Path) -> bool:
    """Whether torchrun itself gave up waiting for nodes (its own error file, written by its @record)."""
    try:
        data = json.loads((launch_dir / "torchrun-error.json").read_text("utf-8"))
    except (OSError, ValueError):
        return False
    msg = data.get("message") if isinstance(data, dict) else None
    if isinstance(msg, dict):
        msg = msg.get("message")
    return "RendezvousTimeoutError" in str(msg)


def _attempt_dirs(launch_dir: Path) -> list[Path]:
    return sorted((launch_dir / "logs").glob("*/attempt_*"))


def _worker_error(launch_dir: Path) -> str:
    """The message of a worker's torchelastic error file, if one was written."""
    dirs = _attempt_dirs(launch_dir)
    files = sorted(dirs[-1].glob("*/error.json")) if dirs else []
    files += [launch_dir / "torchrun-error.json"]
    for f in files:
        try:
            data = json.loads(f.read_text("utf-8"))
        except (OSError, ValueError):
            continue
        msg = data.get("message")
        if isinstance(msg, dict):
            msg = msg.get("message")
        if msg:
            return str(msg).strip().splitlines()[-1]
    return ""
