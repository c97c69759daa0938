"""Where a run stands now, for `logbook status` and `logbook tail`: attempt, step, ETA, last events, health.

Everything about the run's past comes from `logbook.runs.facts` (read once
from the event log and metrics); what only the present can say comes from
the two signs of life the run leaves outside git: the trainer's heartbeat
(`.logbook/heartbeat/RUN.json`, rewritten every step) and the launcher's lock
(`.logbook/locks/RUN.lock`, which names the launcher's pid).

Health is one of:

- `alive`: the run is running and gave a sign of life recently;
- `stalled`: the run is running by its log, but nothing moved for longer than
  `stall_after_s` (the greater of a floor and many median steps): a hang, a
  long save or evaluation, or a launcher killed on another host;
- `ended`: the log says how (finished, failed, aborted, stopped, preempted),
  or the launcher is gone from this host without having said it.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from logbook.core.errors import LogbookError, NotFoundError
from logbook.core.project import Project
from logbook.eventlog.kinds import get_kind, has_flag, kind_of, label, parse_ts, run_state, summary
from logbook.eventlog.sink import full_metrics_path
from logbook.runs.attempt_ends import heartbeat_path, read_heartbeat
from logbook.runs.facts import RunFacts, load_facts
from logbook.runs.run_record import all_run_ids, read_run_record
from logbook.runs.runlock import dead_holder

STALL_FLOOR_S = 120.0
"""A running run is never called stalled sooner than this: start-up, a first compile, an evaluation."""
STALL_STEPS = 20
"""...nor before this many median steps passed without a sign of life."""
LAST_EVENTS = 8
"""Events `status` shows by default."""


def is_quiet(rec: dict[str, Any]) -> bool:
    """A routine event a console leaves out (a checkpoint save); the guard's routine actions (a skip) still show."""
    return has_flag(rec, routine=True, guard=None)


@dataclass
class EventLine:
    """One event as a person reads it in a list."""

    seq: int | None
    """The event's place in the run's log."""
    ts: str | None
    """UTC time it was written."""
    attempt: int | None
    step: int | None
    kind: str
    label: str
    """A few words naming the kind (from the event registry)."""
    summary: str
    """One line saying what happened (from the event registry)."""
    drill: bool = False
    """Caused by a fault drill, not by the world."""


@dataclass
class RunStatus:
    """One run as it stands now."""

    run: str
    state: str
    """As the event log says: running | finished | failed | aborted | stopped | preempted."""
    health: str
    """alive | stalled | ended."""
    how: str
    """The health in words: how it ended, or how long since its last sign of life."""
    attempt: int | None
    step: int | None
    total_steps: int | None
    fraction: float | None
    """step / total_steps."""
    eta_s: float | None
    """Seconds to the last step at the median step time (None: ended, or no step time yet)."""
    seconds_per_step: float | None
    loss: float | None
    """The last training loss on the branch that counts."""
    last_seen_age_s: float | None
    """Seconds since the latest sign of life (heartbeat, metric row or event)."""
    prereg_id: str | None
    exploratory: bool
    last_events: list[EventLine] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def event_line(rec: dict[str, Any]) -> EventLine:
    """An event as one line, in the registry's words."""
    kind = str(kind_of(rec))
    step = rec.get("step") if isinstance(rec.get("step"), int) else None
    attempt = rec.get("attempt") if isinstance(rec.get("attempt"), int) else None
    seq = rec.get("seq") if isinstance(rec.get("seq"), int) else None
    return EventLine(seq, rec.get("ts") if isinstance(rec.get("ts"), str) else None, attempt, step, kind,
                     label(kind), summary(rec), rec.get("drill") is True)


def latest_run(project: Project) -> str:
    """The run launched last (by its record's creation time); NotFoundError when there is none."""
    ids = all_run_ids(project)
    if not ids:
        raise NotFoundError("no runs yet", hint="start one with `logbook run CONFIG`")

    def created(run_id: str) -> str:
        try:
            return read_run_record(project, run_id).created or ""
        except LogbookError:
            return ""

    return max(ids, key=lambda r: (created(r), r))


def launcher_gone(project: Project, run_id: str) -> str | None:
    """What the launcher's lock names when that launcher is dead on this host, else None."""
    for name in (f"{run_id}.lock", f"{run_id}.node0.lock"):  # logbook/launch/launcher.py's lock names
        gone = dead_holder(project.state_dir / "locks" / name)
        if gone:
            return gone
    return None


def run_status(project: Project, run_id: str, *, events: int = LAST_EVENTS, now: float | None = None,
               facts: RunFacts | None = None) -> RunStatus:
    """Where `run_id` stands now. Raises NotFoundError for an unknown run."""
    rec = read_run_record(project, run_id)
    facts = facts or load_facts(project, run_id, rec)
    now = time.time() if now is None else now
    beat = read_heartbeat(heartbeat_path(project.state_dir, run_id))
    last_seen = _last_seen(facts, beat)
    step = facts.last_step
    ended_at = next((e["step"] for e in reversed(facts.run_events()) if run_state(e) and isinstance(e.get("step"), int)),
                    None)
    if facts.state != "running" and ended_at is not None:
        step = ended_at  # where it ended: after a rollback, lower than the furthest step it reached
    if beat and isinstance(beat.get("step"), int) and facts.state == "running":
        step = max(step or 0, beat["step"])
    spp = facts.seconds_per_step()
    age = None if last_seen is None else max(0.0, now - last_seen)
    health, how = _health(project, run_id, facts, age, spp)
    remaining = (facts.total_steps - step) if facts.total_steps and step is not None else None
    eta = remaining * spp if health != "ended" and remaining is not None and spp else None
    shown = [e for e in facts.run_events() if not is_quiet(e)][-events:] if events else []
    loss = facts.series.get("loss") or {}
    return RunStatus(
        run=run_id, state=facts.state, health=health, how=how, attempt=_attempt(facts, beat), step=step,
        total_steps=facts.total_steps,
        fraction=(step / facts.total_steps) if facts.total_steps and step is not None else None,
        eta_s=eta, seconds_per_step=spp, loss=loss[max(loss)] if loss else None, last_seen_age_s=age,
        prereg_id=facts.prereg_id or rec.prereg_id, exploratory=bool(rec.exploratory),
        last_events=[event_line(e) for e in shown],
    )


def _attempt(facts: RunFacts, beat: dict[str, Any] | None) -> int | None:
    attempts = [e["attempt"] for e in facts.run_events() if isinstance(e.get("attempt"), int)]
    if beat and isinstance(beat.get("attempt"), int):
        attempts.append(beat["attempt"])
    return max(attempts, default=None)


def _last_seen(facts: RunFacts, beat: dict[str, Any] | None) -> float | None:
    times = [parse_ts(e.get("ts")) for e in facts.run_events()[-1:]]
    times += [r["time"] for r in facts.rows[-1:] if isinstance(r.get("time"), (int, float))]
    if beat and isinstance(beat.get("time"), (int, float)):
        times.append(float(beat["time"]))
    return max((t for t in times if t is not None), default=None)


def stall_after_s(seconds_per_step: float | None) -> float:
    """How long a running run may show no sign of life before it is called stalled."""
    return max(STALL_FLOOR_S, STALL_STEPS * (seconds_per_step or 0.0))


def _health(project: Project, run_id: str, facts: RunFacts, age: float | None,
            spp: float | None) -> tuple[str, str]:
    if facts.state != "running":
        return "ended", _ending_words(facts)
    gone = launcher_gone(project, run_id)
    if gone:
        return "ended", (f"its launcher ({gone}) is gone without recording how the run ended; "
                         f"resume it with `logbook run --resume {run_id}`")
    if age is None:
        return "alive", "launched; no sign of life from the trainer yet"
    from logbook.core.textfmt import fmt_duration

    if age > stall_after_s(spp):
        return "stalled", f"no sign of life for {fmt_duration(age)}"
    return "alive", f"last sign of life {fmt_duration(age)} ago"


def _ending_words(facts: RunFacts) -> str:
    """The state, where the run ended, and the ending event's own summary when its kind has one."""
    last = next((e for e in reversed(facts.run_events()) if run_state(e)), None)
    if last is None:
        return facts.state
    step = f" at step {last['step']:,}" if isinstance(last.get("step"), int) else ""
    kind = get_kind(kind_of(last))
    words = summary(last) if kind is not None and kind.summary is not None else ""
    return f"{facts.state}{step}" + (f": {words}" if words else "")


def follow_files(project: Project, run_id: str) -> tuple[Path, Path]:
    """The event log and the full metrics stream of a run, as `tail` follows them."""
    return project.run_dir(run_id) / "events.jsonl", full_metrics_path(project.state_dir, run_id)
