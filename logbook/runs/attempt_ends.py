"""How the earlier attempts of a run ended, read from what they left on disk: the one place that works it out.

What an attempt leaves behind: its events (the run's log), the rows of the
full-resolution metrics stream (outside git), the trainer's heartbeat
(`.logbook/heartbeat/RUN.json`, rewritten every step) and every worker's rank
mark (`logbook.runs.rankmarks`). `RunHistory` reads them once; the functions
below turn them into plain data: the attempt number seen last, the ends no
`restart` has recorded yet, and the payload of the `restart` that records one
(`classify_restart`) with what it cost (`restart_cost`). The bundled trainer
calls them at start-up (through `logbook.api`), the framework adapters'
recorder for its own restarts, the launcher for the ranks a failed launch lost.

Why an attempt ended: an `attempt_failed` event (an exception it recorded
itself), `preempted`, `hang`, torchrun's error file, or nothing at all, which
means it was killed by a signal (SIGKILL, the OOM killer, a lost node) before
it could write anything. With several ranks, a rank that dies leaves rank 0
failing in a collective ("connection reset by peer"); that is recorded as the
signal it most likely was, with `peer_lost`.

Nothing here writes but the heartbeat (`Heartbeat`, kept beside its reader so
the record has one owner; `logbook.api.Run` beats it for every loop); the
marks are each worker's own.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from logbook.core.fsutil import json_records
from logbook.core.project import Project
from logbook.eventlog.kinds import ending, is_kind, parse_ts
from logbook.eventlog.runlog import iter_events
from logbook.eventlog.sink import full_metrics_path
from logbook.runs.oom import oom_kill_count, oom_kills_between
from logbook.runs.rankmarks import lost_ranks, name_ranks, ranks_dir, read_marks

_HEARTBEAT_BYTES = 256
METRICS_TAIL = 4 << 20
"""Bytes of the metrics stream read at start-up (tens of thousands of rows): enough for the previous attempt."""


def heartbeat_path(state_dir: Path, run_id: str) -> Path:
    """Where the trainer's heartbeat of run `run_id` lives: outside git, rewritten in place every step."""
    return Path(state_dir) / "heartbeat" / f"{run_id}.json"


class Heartbeat:
    """A tiny file rewritten in place every step: the last step an attempt reached, which a kill cannot take back.

    A killed attempt's `failed_at_step` and `steps_lost` are worked out from it;
    metrics rows wait in memory for their flush. One `pwrite` of a fixed-size
    record per step (no fsync, no rename): a killed process's write survives
    in the page cache, and the cost is microseconds.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._fd: int | None = None

    def beat(self, attempt: int, step: int, now: float) -> None:
        if self._fd is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
        # The JSON spelled out by hand: a third of the cost of json.dumps, and this runs every step.
        rec = b'{"attempt": %d, "step": %d, "time": %r, "pid": %d}' % (attempt, step, float(now), os.getpid())
        os.pwrite(self._fd, rec.ljust(_HEARTBEAT_BYTES), 0)  # the fixed size leaves no tail of a longer record

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def read_heartbeat(path: Path) -> dict[str, Any] | None:
    """The last heartbeat {attempt, step, time, pid} in `path`, or None (no file, or not one record)."""
    try:
        beat = json.loads(Path(path).read_bytes().strip() or b"null")
    except (OSError, ValueError):
        return None
    return beat if isinstance(beat, dict) else None


def lost_ranks_of(state_dir: Path, run_id: str, attempt: int) -> list[dict[str, Any]]:
    """The workers of `attempt` that vanished without ending by themselves, from their marks, in rank order."""
    return lost_ranks(read_marks(ranks_dir(state_dir, run_id)), attempt)


@dataclass
class RunHistory:
    """What earlier attempts of a run left behind."""

    events: list[dict[str, Any]] = field(default_factory=list)
    heartbeat: dict[str, Any] | None = None
    metrics: list[dict[str, Any]] = field(default_factory=list)
    ranks: list[dict[str, Any]] = field(default_factory=list)
    """Every worker's last `RankMark` (one per rank ever used)."""

    @classmethod
    def read(cls, run_dir: Path, heartbeat: Path | None = None, metrics_path: Path | None = None,
             ranks: Path | None = None) -> RunHistory:
        """The run so far; `metrics_path` is the full-resolution stream (the committed one is thinned),
        `heartbeat` the trainer's heartbeat file, `ranks` the folder of each worker's mark."""
        metrics = metrics_path if metrics_path is not None and metrics_path.is_file() else run_dir / "metrics.jsonl"
        return cls(list(iter_events(run_dir / "events.jsonl")), read_heartbeat(heartbeat) if heartbeat else None,
                   metrics_tail(metrics), read_marks(ranks) if ranks is not None else [])

    @classmethod
    def of_run(cls, project: Project, run_id: str) -> RunHistory:
        """Run `run_id` of `project` so far, from where its log, metrics, heartbeat and marks live."""
        state = project.state_dir
        return cls.read(project.run_dir(run_id), heartbeat_path(state, run_id), full_metrics_path(state, run_id),
                        ranks_dir(state, run_id))

    def lost_ranks(self, attempt: int) -> list[dict[str, Any]]:
        """Workers of `attempt` that vanished without ending by themselves, in rank order."""
        return lost_ranks(self.ranks, attempt)

    def last_attempt(self) -> int:
        seen = [e.get("attempt") for e in self.events if isinstance(e.get("attempt"), int)]
        if self.heartbeat and isinstance(self.heartbeat.get("attempt"), int):
            seen.append(self.heartbeat["attempt"])
        return max(seen, default=0)

    def of_attempt(self, attempt: int) -> list[dict[str, Any]]:
        return [e for e in self.events if e.get("attempt") == attempt]

    def has(self, kind: str) -> dict[str, Any] | None:
        """The last event of `kind` in the whole run, if any."""
        found = [e for e in self.events if is_kind(e, kind)]
        return found[-1] if found else None

    def unrecorded_ends(self, attempt: int) -> list[int]:
        """Earlier attempts that left a trace but whose end no `restart` has recorded, oldest first.

        Normally only `attempt - 1`. An attempt that wrote an event (a failure while
        building, a rejected checkpoint) and died before announcing itself took a
        number without recording the end of the attempt before it: both are owed.
        """
        covered = {(e.get("data") or {}).get("prev_attempt") for e in self.events if is_kind(e, "restart")}
        out = []
        for k in range(1, attempt):
            mine = self.of_attempt(k)
            if k == attempt - 1 and not mine and self.heartbeat and self.heartbeat.get("attempt") == k:
                mine = [{}]  # announced itself through the heartbeat only (killed before its first event)
            if mine and k not in covered and not any(is_kind(e, "run_finished") for e in mine):
                out.append(k)
        return out

    def first_event_time(self, attempt: int) -> float | None:
        times = [parse_ts(e.get("ts")) for e in self.of_attempt(attempt)]
        return min((t for t in times if t is not None), default=None)

    def first_started(self) -> float | None:
        starts = [parse_ts(e.get("ts")) for e in self.events if is_kind(e, "run_started")]
        return min((t for t in starts if t is not None), default=None)


def metrics_tail(path: Path, max_bytes: int = METRICS_TAIL) -> list[dict[str, Any]]:
    """The last rows of a metrics stream: enough for the previous attempt, without reading a long run whole."""
    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(max(0, size - max_bytes))
            data = f.read()
    except OSError:
        return []
    lines = data.split(b"\n")
    if size > max_bytes:
        lines = lines[1:]  # the first line is cut
    return json_records(lines[:-1])  # the last piece is empty or a torn line


def torchelastic_previous_error(env: dict[str, str]) -> dict[str, Any] | None:
    """The error file torchrun kept for this rank's previous attempt, if it wrote one."""
    current = env.get("TORCHELASTIC_ERROR_FILE") or ""
    restart = int(env.get("TORCHELASTIC_RESTART_COUNT", "0") or 0)
    p = Path(current)
    if not current or restart < 1 or p.parent.parent.name != f"attempt_{restart}":
        return None
    prev = p.parent.parent.with_name(f"attempt_{restart - 1}") / p.parent.name / p.name
    try:
        msg = json.loads(prev.read_text("utf-8")).get("message", {})
    except (OSError, ValueError, AttributeError):
        return None
    if isinstance(msg, str):
        return {"message": msg}
    return {"message": str(msg.get("message", "")), "extra": msg.get("extraInfo", {})}


_WHO_SENDS = {"SIGKILL": " (the OOM killer, `kill -9`, or a scheduler's hard stop)",
              "SIGSEGV": " (a crash in native code)", "SIGBUS": " (a bad memory access: often a full /dev/shm)",
              "SIGABRT": " (an abort in native code)"}
"""What usually sends the signals that leave no record, for the restart's one sentence."""


def classify_restart(history: RunHistory, prev: int, resumed_from_step: int, started_at: float,
                     env: dict[str, str]) -> dict[str, Any]:
    """The payload of a `restart` event: why attempt `prev` ended and what it cost."""
    events = history.of_attempt(prev)
    ends = {ending(e): e for e in events if ending(e)}  # how the attempt's own last words say it ended
    out: dict[str, Any] = {"prev_attempt": prev, "resumed_from_step": resumed_from_step}
    hung = [m for m in history.ranks if m.get("attempt") == prev and m.get("ended") == "hang"]
    if hung and "hang" not in ends:
        # A rank other than 0 hung; rank 0 saw only its collective break when that rank exited.
        out.update(cause="hang", hung_ranks=[{k: m.get(k) for k in ("rank", "node", "host", "pid")} for m in hung],
                   detail=f"{name_ranks(hung)} of attempt {prev} made no progress past its hang timeout and exited")
    elif "hang" in ends:
        # Before a lost peer: rank 0's watchdog saw no progress, then its collective broke as the rank
        # that hung exited. The hang is the cause; the broken collective is what it did.
        d = ends["hang"].get("data", {})
        out.update(cause="hang", detail=f"attempt {prev} made no progress for {d.get('elapsed_s')} s and exited")
        if hung:
            out["hung_ranks"] = [{k: m.get(k) for k in ("rank", "node", "host", "pid")} for m in hung]
    elif "exception" in ends and peer_lost(ends["exception"].get("data", {})):
        d = ends["exception"].get("data", {})
        # Rank 0 saw a collective fail because another rank vanished mid-step: the
        # cause is that rank's death (a signal, the OOM killer, a lost node), not rank 0's error.
        out.update(cause="signal", signal=None, peer_lost=True, exception_message=d.get("exception_message"),
                   detail=f"another rank of attempt {prev} died with no record left; rank 0 lost its peer "
                          f"({d.get('exception_type')})")
    elif "exception" in ends:
        d = ends["exception"].get("data", {})
        out.update(cause="exception", exception_type=d.get("exception_type"), exception_message=d.get("exception_message"),
                   detail=f"attempt {prev} raised {d.get('exception_type')}: {d.get('exception_message')}")
    elif "preempted" in ends:
        d = ends["preempted"].get("data", {})
        out.update(cause="preempted", signal=d.get("signal"),
                   detail=f"attempt {prev} was preempted ({d.get('signal')})" + (
                       f" and saved at step {d['saved_step']}" if isinstance(d.get("saved_step"), int) else ""))
    elif "stopped" in ends:
        d = ends["stopped"].get("data", {})
        out.update(cause="stopped", detail=f"attempt {prev} was stopped on request by {d.get('who')} and saved at "
                                           f"step {d.get('saved_step')}")
    elif (err := torchelastic_previous_error(env)) is not None:
        out.update(cause="exception", exception_message=err["message"],
                   detail=f"attempt {prev} failed; torchrun recorded: {err['message']}")
    else:
        out.update(cause="signal", signal=None, detail="killed by a signal with no record left")
    lost = history.lost_ranks(prev)
    # The agent saw the exit status of a worker a signal killed (trainer/launch/agent.py): its mark names it.
    killed = sorted({str(m["killed_by"]) for m in lost if m.get("killed_by")})
    if out["cause"] == "signal" and killed and out.get("signal") is None:
        out["signal"] = killed[0] if len(killed) == 1 else ", ".join(killed)
        if not out.get("peer_lost"):
            out["detail"] = f"killed by {out['signal']} with no record left" + _WHO_SENDS.get(out["signal"], "")
    several = sum(1 for m in history.ranks if m.get("attempt") == prev) > 1
    if lost and several and out["cause"] == "signal":  # alone, "killed by a signal" already says which
        out["lost_ranks"] = [{k: m.get(k) for k in ("rank", "node", "host", "pid", "killed_by") if m.get(k) is not None}
                             for m in lost]
        how = f"killed by {out['signal']}" if out.get("signal") else "SIGKILL, the OOM killer or a lost node"
        out["detail"] = f"{name_ranks(lost)} of attempt {prev} vanished with no record left " \
                        f"({how})" + ("; rank 0 lost its peer" if out.get("peer_lost") else "")
    # The kernel's own evidence, where it keeps it: OOM kills in the memory cgroup since attempt `prev` began.
    began = next((e.get("data", {}) for e in events if is_kind(e, "run_started")), {})
    if out["cause"] == "signal" and (kills := oom_kills_between(began.get("oom_kills"), oom_kill_count())) is not None:
        out["oom_kills"] = kills
    out.update(restart_cost(history, prev, resumed_from_step, started_at))
    return out


def restart_cost(history: RunHistory, prev: int, resumed_from_step: int, started_at: float) -> dict[str, Any]:
    """What the end of attempt `prev` cost a resume from `resumed_from_step` that started at `started_at`.

    {failed_at_step, steps_lost, downtime_s, seconds_lost}: the last step the
    attempt reached, the steps to do again, the time from its last sign of life
    to the new start, and the wall time of the work thrown away (None where
    nothing says).
    """
    failed_at, last_alive = last_signs(history, prev)
    return {"failed_at_step": failed_at,
            "steps_lost": max(0, failed_at - resumed_from_step) if failed_at is not None else None,
            "downtime_s": round(max(0.0, started_at - last_alive), 3) if last_alive is not None else None,
            "seconds_lost": _seconds_lost(history, prev, resumed_from_step, last_alive)}


_PEER_LOST = ("Connection reset by peer", "Connection closed by peer", "Broken pipe", "NCCL communicator was aborted",
              "remote process exited or there was a network error")


def peer_lost(failed: dict[str, Any]) -> bool:
    """Whether an `attempt_failed` payload is a collective broken by another rank's death."""
    message = str(failed.get("exception_message") or "")
    return failed.get("exception_type") in ("RuntimeError", "DistBackendError", "DistNetworkError") and \
        any(m in message for m in _PEER_LOST)


def last_signs(history: RunHistory, attempt: int) -> tuple[int | None, float | None]:
    """(last step `attempt` reported, when it was last alive) from its metrics rows, the heartbeat and its events.

    The metrics rows written after the attempt's last flush are lost with it;
    the heartbeat (rewritten every step) and its events fill in what they can.
    """
    rows = [r for r in history.metrics if r.get("attempt") == attempt]
    steps: list[int] = [r["step"] for r in rows if isinstance(r.get("step"), int)]
    times: list[float] = [float(r["time"]) for r in rows if isinstance(r.get("time"), (int, float))]
    hb = history.heartbeat
    if hb and hb.get("attempt") == attempt:
        steps.append(int(hb.get("step", 0)))
        times.append(float(hb.get("time", 0.0)))
    for e in history.of_attempt(attempt):
        if isinstance(e.get("step"), int) and not is_kind(e, "checkpoint_rejected"):
            steps.append(e["step"])
        if (t := parse_ts(e.get("ts"))) is not None:
            times.append(t)
    return (max(steps) if steps else None), (max(times) if times else None)


def _seconds_lost(history: RunHistory, prev: int, resumed: int, last_alive: float | None) -> float | None:
    """Wall time of the work thrown away: from reaching the resumed step (or the attempt's start) to the failure."""
    if last_alive is None:
        return None
    started = [parse_ts(e.get("ts")) for e in history.of_attempt(prev) if is_kind(e, "run_started")]
    reached = [float(r["time"]) for r in history.metrics
               if r.get("step") == resumed and isinstance(r.get("time"), (int, float))]
    saved = [parse_ts(e.get("ts")) for e in history.events if is_kind(e, "checkpoint_saved") and e.get("step") == resumed]
    begin = max([t for t in started if t is not None] + reached[-1:] + [t for t in saved if t is not None][-1:],
                default=None)
    return None if begin is None else round(max(0.0, last_alive - begin), 3)
