"""Attempts of a run: numbering, the heartbeat, and why the last one ended.

The attempt number is 1 + the highest attempt the run has left any trace of
(its event log, its heartbeat), so torchrun restarts, Slurm requeues and
manual relaunches all keep counting. On every start after the first, what the
previous attempt left behind says why it ended: an `attempt_failed` event (an
exception it recorded itself), `preempted`, `hang`, torchrun's error file, or
nothing at all, which means it was killed by a signal (SIGKILL, the OOM
killer, a lost node) before it could write anything. With several ranks, a
rank that dies leaves rank 0 failing in a collective ("connection reset by
peer"); that is recorded as the signal it most likely was, with `peer_lost`.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from logbook.api import (ending, is_kind, iter_events, lost_ranks, name_ranks, oom_kill_count, oom_kills_between,
                         read_marks)

_HEARTBEAT_BYTES = 256
_METRICS_TAIL = 4 << 20  # bytes of the metrics stream read at start-up (tens of thousands of rows)


def parse_ts(ts: str) -> float:
    """An event's UTC timestamp as seconds since the epoch."""
    return datetime.strptime(ts.replace("Z", "+0000"), "%Y-%m-%dT%H:%M:%S.%f%z").timestamp()


class Heartbeat:
    """A tiny file rewritten in place every step: the last sign of life of an attempt.

    One `pwrite` of a fixed-size record per step (no fsync, no rename): a killed
    process's writes survive in the page cache, and the cost is microseconds.
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
        os.pwrite(self._fd, rec.ljust(_HEARTBEAT_BYTES), 0)

    def read(self) -> dict[str, Any] | None:
        try:
            return json.loads(self.path.read_bytes().strip() or b"null")
        except (OSError, ValueError):
            return None

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


@dataclass
class RunHistory:
    """What earlier attempts of a run left behind."""

    events: list[dict[str, Any]] = field(default_factory=list)
    heartbeat: dict[str, Any] | None = None
    metrics: list[dict[str, Any]] = field(default_factory=list)
    ranks: list[dict[str, Any]] = field(default_factory=list)
    """Every worker's last `RankMark` (one per rank ever used)."""

    @classmethod
    def read(cls, run_dir: Path, heartbeat: Heartbeat, metrics_path: Path | None = None,
             ranks_dir: Path | None = None) -> RunHistory:
        """The run so far; `metrics_path` is the full-resolution stream (the committed one is thinned),
        `ranks_dir` holds each worker's mark (see `logbook.runs.rankmarks`)."""
        metrics = metrics_path if metrics_path is not None and metrics_path.is_file() else run_dir / "metrics.jsonl"
        return cls(list(iter_events(run_dir / "events.jsonl")), heartbeat.read(), _metrics_tail(metrics),
                   read_marks(ranks_dir) if ranks_dir is not None else [])

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
        covered = {e.get("data", {}).get("prev_attempt") for e in self.events if is_kind(e, "restart")}
        out = []
        for k in range(1, attempt):
            mine = self.of_attempt(k)
            if k == attempt - 1 and not mine and self.heartbeat and self.heartbeat.get("attempt") == k:
                mine = [{}]  # announced itself through the heartbeat only (killed before its first event)
            if mine and k not in covered and not any(is_kind(e, "run_finished") for e in mine):
                out.append(k)
        return out

    def first_event_time(self, attempt: int) -> float | None:
        times = [parse_ts(e["ts"]) for e in self.of_attempt(attempt) if "ts" in e]
        return min((t for t in times if t is not None), default=None)

    def first_started(self) -> float | None:
        starts = [parse_ts(e["ts"]) for e in self.events if is_kind(e, "run_started") and "ts" in e]
        return min(starts, default=None)


def _metrics_tail(path: Path, max_bytes: int = _METRICS_TAIL) -> list[dict[str, Any]]:
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
    rows = []
    for raw in lines[:-1]:  # the last piece is empty or a torn line
        try:
            rows.append(json.loads(raw))
        except ValueError:
            continue
    return rows


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
                   detail=f"attempt {prev} was preempted ({d.get('signal')}) and saved at step {d.get('saved_step')}")
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
    failed_at, last_alive = _last_signs(history, prev, events)
    out["failed_at_step"] = failed_at
    out["steps_lost"] = max(0, (failed_at or 0) - resumed_from_step) if failed_at is not None else None
    out["downtime_s"] = round(max(0.0, started_at - last_alive), 3) if last_alive is not None else None
    out["seconds_lost"] = _seconds_lost(history, events, resumed_from_step, last_alive)
    return out


_PEER_LOST = ("Connection reset by peer", "Connection closed by peer", "Broken pipe", "NCCL communicator was aborted",
              "remote process exited or there was a network error")


def peer_lost(failed: dict[str, Any]) -> bool:
    """Whether an `attempt_failed` payload is a collective broken by another rank's death."""
    message = str(failed.get("exception_message") or "")
    return failed.get("exception_type") in ("RuntimeError", "DistBackendError", "DistNetworkError") and \
        any(m in message for m in _PEER_LOST)


def _last_signs(history: RunHistory, prev: int, events: list[dict[str, Any]]) -> tuple[int | None, float | None]:
    """(last step attempt `prev` reported, when it was last alive) from metrics, heartbeat and events."""
    steps: list[int] = [r["step"] for r in history.metrics if r.get("attempt") == prev and isinstance(r.get("step"), int)]
    times: list[float] = [float(r["time"]) for r in history.metrics if r.get("attempt") == prev and isinstance(r.get("time"), (int, float))]
    hb = history.heartbeat
    if hb and hb.get("attempt") == prev:
        steps.append(int(hb.get("step", 0)))
        times.append(float(hb.get("time", 0.0)))
    for e in events:
        if isinstance(e.get("step"), int) and not is_kind(e, "checkpoint_rejected"):
            steps.append(e["step"])
        if "ts" in e:
            times.append(parse_ts(e["ts"]))
    return (max(steps) if steps else None), (max(times) if times else None)


def _seconds_lost(history: RunHistory, events: list[dict[str, Any]], resumed: int, last_alive: float | None) -> float | None:
    """Wall time of the work thrown away: from reaching the resumed step (or the attempt's start) to the failure."""
    if last_alive is None:
        return None
    marks = [parse_ts(e["ts"]) for e in events if is_kind(e, "run_started") and "ts" in e]
    reached = [float(r["time"]) for r in history.metrics if r.get("step") == resumed and isinstance(r.get("time"), (int, float))]
    saved = [parse_ts(e["ts"]) for e in history.events
             if is_kind(e, "checkpoint_saved") and e.get("step") == resumed and "ts" in e]
    begin = max(marks + reached[-1:] + saved[-1:], default=None)
    return None if begin is None else round(max(0.0, last_alive - begin), 3)
