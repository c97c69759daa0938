"""Goodput and badput of a run, from its event log and (optionally) its metrics.

Wall time runs from the start of the first attempt to the last sign of life
of the latest one. It is split into categories that do not overlap:

- start-up: from an attempt's process start to its first training step,
  less any restore and compile time an attempt reports (`restore_s` and
  `compile_s` in `run_started`);
- compiling: `torch.compile` of the training step before the first step
  (`compile_s` in `run_started`: the full compile on a run's first attempt,
  a cache load on a restart);
- restore: restore seconds reported by `run_started` or `rollback` payloads;
- checkpoint save: the blocking seconds of every `checkpoint_saved`;
- lost to disruptions: `seconds_lost` of each `restart` (work done after the
  newest checkpoint and thrown away; `steps_lost` times the median step time
  when the seconds are missing) plus, for each `rollback`, its `steps_lost`
  times the median step time;
- skipped updates: each `step_skipped` times the median step time (the step
  was computed and thrown away by the guard);
- downtime: between the last sign of life of one attempt and the process
  start of the next (`downtime_s` of the `restart`);
- data loading: the telemetry rows' `data_s` (seconds per step) times their
  `window_steps`, when the metrics carry them (rows of steps a failure threw
  away are left out: that time is already in "lost");
- productive: what is left.

goodput = productive / wall. The categories add up to the wall time, and
every view says goodput and what was lost with the same three parts of it,
computed here once: productive (`goodput`), lost (`lost_total_s`: restarts,
rollbacks, skipped updates and downtime) and overhead (`overhead_s`: start-up,
compiling, restores, saves, data), whose shares sum to 1.

Where an attempt's process start is known (`started_at` in its `run_started`
or `restart` payload) it is used; otherwise the next attempt's start is the
previous attempt's last sign of life plus `downtime_s`, and the first
attempt's start-up is counted from its `run_started` (noted in the report).
The first training step of an attempt is placed one median step time before
its first training row, per step trained since its resume step.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from logbook.eventlog.chain import iter_records
from logbook.eventlog.kinds import Event, counted_as, goodput_charge, is_afterwards, is_kind, parse_ts
from logbook.eventlog.sink import read_metrics

CATEGORIES = ("startup_s", "compile_s", "restore_s", "checkpoint_save_s", "lost_s", "skipped_s", "downtime_s", "data_s",
              "productive_s")
LABELS = {"startup_s": "start-up", "compile_s": "compiling", "restore_s": "restore", "checkpoint_save_s": "checkpoint saves",
          "lost_s": "progress lost to disruptions", "skipped_s": "updates skipped by the guard", "downtime_s": "downtime between attempts",
          "data_s": "data loading", "productive_s": "productive training"}


def number(x: Any) -> float | None:
    """A finite float, or None (bools and strings are not numbers here)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    return float(x) if math.isfinite(x) else None


def event_time(event: dict[str, Any]) -> float | None:
    """Seconds since the epoch of an event's UTC `ts`, or None."""
    return parse_ts(event.get("ts"))


@dataclass
class GoodputReport:
    """Each category in seconds; `fractions()` gives them as shares of wall time."""

    wall_s: float = 0.0
    """From the first attempt's start to the latest sign of life."""
    productive_s: float = 0.0
    """Wall time less every badput category."""
    startup_s: float = 0.0
    """Process start to first training step, every attempt (restore and compiling excluded)."""
    compile_s: float = 0.0
    """torch.compile of the training step before each attempt's first step."""
    restore_s: float = 0.0
    """Loading checkpoints, where attempts or rollbacks report it."""
    checkpoint_save_s: float = 0.0
    """Blocking seconds of saves."""
    lost_restart_s: float = 0.0
    """Work thrown away by failures (after the newest checkpoint)."""
    lost_rollback_s: float = 0.0
    """Work thrown away by rollbacks (steps lost times the median step time)."""
    skipped_s: float = 0.0
    """Steps whose update the guard skipped, priced at the median step time."""
    downtime_s: float = 0.0
    """Between one attempt's end and the next one's process start."""
    data_s: float = 0.0
    """Waiting for batches, as the telemetry measured it."""
    attempts: int = 0
    """Attempts that left a `run_started`."""
    restarts: int = 0
    """`restart` events."""
    rollbacks: int = 0
    """`rollback` events."""
    median_step_s: float | None = None
    """Median seconds per training step, from the metrics (or the saves)."""
    notes: list[str] = field(default_factory=list)
    """Approximations made, for people reading the figures."""

    @property
    def lost_s(self) -> float:
        return self.lost_restart_s + self.lost_rollback_s

    @property
    def lost_total_s(self) -> float:
        """Lost to failures, downtime, rollbacks and skipped updates: the "lost" every view shows."""
        return self.lost_restart_s + self.lost_rollback_s + self.skipped_s + self.downtime_s

    @property
    def overhead_s(self) -> float:
        """Start-up, compiling, restores, blocking saves and data loading: neither productive nor lost."""
        return self.startup_s + self.compile_s + self.restore_s + self.checkpoint_save_s + self.data_s

    def shares(self) -> dict[str, float] | None:
        """{productive, lost, overhead} as shares of wall time, summing to 1; None before any wall time."""
        if self.wall_s <= 0:
            return None
        return {"productive": self.productive_s / self.wall_s, "lost": self.lost_total_s / self.wall_s,
                "overhead": self.overhead_s / self.wall_s}

    def shares_shown(self) -> dict[str, float] | None:
        """`shares()` rounded to 0.1% so that the three shown still sum to exactly 100.0%.

        Rounded one by one, 75.55 + 19.65 + 4.8 would read 75.6 + 19.7 + 4.8 = 100.1;
        the largest remainders get the spare tenths instead.
        """
        exact = self.shares()
        if exact is None:
            return None
        tenths = {k: v * 1000 for k, v in exact.items()}
        shown = {k: math.floor(v) for k, v in tenths.items()}
        spare = 1000 - sum(shown.values())
        for k in sorted(tenths, key=lambda k: tenths[k] - shown[k], reverse=True)[:max(0, spare)]:
            shown[k] += 1
        return {k: v / 1000 for k, v in shown.items()}

    @property
    def goodput(self) -> float | None:
        """Productive over wall time; None before any wall time has passed."""
        return self.productive_s / self.wall_s if self.wall_s > 0 else None

    def categories(self) -> dict[str, float]:
        """Seconds per category, in a fixed order (badput first, productive last)."""
        return {k: getattr(self, k) for k in CATEGORIES}

    def fractions(self) -> dict[str, float]:
        """Each category's share of wall time (empty before any wall time)."""
        if self.wall_s <= 0:
            return {}
        return {k: v / self.wall_s for k, v in self.categories().items()}

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(lost_s=self.lost_s, goodput=self.goodput, fractions=self.fractions(), lost_total_s=self.lost_total_s,
                 overhead_s=self.overhead_s, shares=self.shares())
        return d

    def sentence(self) -> str:
        """One line for a progress note: goodput and the largest losses."""
        if self.goodput is None:
            return "Goodput not known yet."
        shares = [(f, LABELS[k]) for k, f in self.fractions().items() if k != "productive_s" and f >= 0.0005]
        shares.sort(reverse=True)
        lost = "; ".join(f"{label} {f:.1%}" for f, label in shares[:4])
        return f"Goodput {self.goodput:.1%}" + (f" (badput: {lost})." if lost else ".")


# --- reading what the run recorded ----------------------------------------------------


@dataclass
class _Attempt:
    number: int
    started: dict[str, Any] | None = None
    restart: dict[str, Any] | None = None
    times: list[float] = field(default_factory=list)
    first_step: float | None = None
    start: float | None = None
    end: float | None = None


def _training_rows(metrics: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in metrics if isinstance(r.get("step"), int) and isinstance(r.get("attempt"), int)
            and number(r.get("time")) is not None and number(r.get("loss")) is not None]


def median_step_seconds(events: list[dict[str, Any]], metrics: list[dict[str, Any]]) -> float | None:
    """Median of (time between consecutive training rows of one attempt) / (steps between them).

    Without metrics, consecutive saves of one attempt stand in for the rows.
    """
    def rates(points: list[tuple[Any, int, float]]) -> list[float]:
        out, prev = [], None
        for attempt, step, t in points:
            if prev is not None and prev[0] == attempt and step > prev[1] and t > prev[2]:
                out.append((t - prev[2]) / (step - prev[1]))
            prev = (attempt, step, t)
        return out

    rows = [(r["attempt"], r["step"], float(r["time"])) for r in _training_rows(metrics)]
    found = rates(rows)
    if not found:
        saves = [(e.get("attempt"), e["step"], t) for e in events if is_kind(e, "checkpoint_saved")
                 and isinstance(e.get("step"), int) and (t := event_time(e)) is not None]
        found = rates(saves)
    return statistics.median(found) if found else None


def _attempts(events: list[dict[str, Any]], metrics: list[dict[str, Any]], step_s: float | None) -> list[_Attempt]:
    by: dict[int, _Attempt] = {}
    for e in events:
        a = e.get("attempt")
        if not isinstance(a, int) or isinstance(a, bool):
            continue
        att = by.setdefault(a, _Attempt(a))
        if (t := event_time(e)) is not None:
            att.times.append(t)
        if is_kind(e, "run_started") and att.started is None:
            att.started = e
        elif is_kind(e, "restart") and att.restart is None:
            att.restart = e
    for r in metrics:
        if isinstance(r.get("attempt"), int) and r["attempt"] in by and (t := number(r.get("time"))) is not None:
            by[r["attempt"]].times.append(t)
    # An attempt that failed while building or restoring has events but never started training.
    started = [by[k] for k in sorted(by) if by[k].started is not None]
    for att in started:
        att.first_step = _first_step(att, events, metrics, step_s)
    return started


def _first_step(att: _Attempt, events: list[dict[str, Any]], metrics: list[dict[str, Any]],
                step_s: float | None) -> float | None:
    """When the attempt began its first training step (estimated from its first step-bearing record)."""
    began = event_time(att.started)
    resumed = Event.of(att.started).data.get("resumed_from_step")
    resumed = resumed if isinstance(resumed, int) else 0
    marks: list[tuple[int, float]] = []
    rows = [r for r in _training_rows(metrics) if r["attempt"] == att.number]
    if rows:
        marks.append((rows[0]["step"], float(rows[0]["time"])))
    saves = [e for e in events if e.get("attempt") == att.number and is_kind(e, "checkpoint_saved")
             and isinstance(e.get("step"), int) and event_time(e) is not None]
    if saves:
        marks.append((saves[0]["step"], event_time(saves[0])))
    estimates = [t - max(0, step - resumed) * (step_s or 0.0) for step, t in marks if step > resumed]
    if not estimates:
        return began
    first = min(estimates)
    return first if began is None else max(began, first)


def goodput_report(events: Iterable[dict[str, Any]], metrics: Iterable[dict[str, Any]] | None = None) -> GoodputReport:
    """Goodput and badput of a run from its events (and metrics, which sharpen the step times).

    Records written about the run afterwards (`outcome`) are left out: scoring a
    run later must not stretch its wall time.
    """

    events = [e for e in events if not is_afterwards(e)]
    metrics = list(metrics or [])
    rep = GoodputReport()
    step_s = median_step_seconds(events, metrics)
    rep.median_step_s = step_s
    attempts = _attempts(events, metrics, step_s)
    rep.attempts = len(attempts)
    rep.restarts = sum(1 for e in events if counted_as(e) == "restarts")
    rep.rollbacks = sum(1 for e in events if counted_as(e) == "rollbacks")
    if not attempts:
        return rep
    _place_attempts(attempts, rep)
    for prev, att in zip(attempts, attempts[1:]):
        rep.downtime_s += max(0.0, att.start - prev.end)
    for att in attempts:
        restore = number(Event.of(att.started).data.get("restore_s")) or 0.0
        compiling = number(Event.of(att.started).data.get("compile_s")) or 0.0
        span = max(0.0, (att.first_step or att.start) - att.start)
        restore = min(restore, span)
        compiling = min(compiling, span - restore)
        rep.restore_s += restore
        rep.compile_s += compiling
        rep.startup_s += span - restore - compiling
    _losses(events, attempts, step_s, rep)
    for e in events:
        d = Event.of(e).data
        if goodput_charge(e) == "checkpoint_save":
            rep.checkpoint_save_s += number(d.get("blocking_s")) or 0.0
        elif goodput_charge(e) == "rollback":
            rep.restore_s += number(d.get("restore_s")) or 0.0
    rep.data_s = _data_seconds(events, metrics)
    rep.skipped_s = sum(1 for e in events if goodput_charge(e) == "skipped") * (step_s or 0.0)
    rep.wall_s = max(0.0, attempts[-1].end - attempts[0].start)
    _settle(rep)
    return rep


def _settle(rep: GoodputReport) -> None:
    """Productive time is what the other categories leave; where estimates overrun the wall time,
    the estimated losses shrink to fit, so the parts still add up to it."""
    over = rep.overhead_s + rep.lost_total_s - rep.wall_s
    if over > 0:
        rep.notes.append(f"estimated losses exceeded the wall time by {over:.1f} s and were scaled to fit")
        est = rep.lost_restart_s + rep.lost_rollback_s + rep.skipped_s
        k = max(0.0, est - over) / est if est > 0 else 1.0
        rep.lost_restart_s, rep.lost_rollback_s, rep.skipped_s = (rep.lost_restart_s * k, rep.lost_rollback_s * k,
                                                                  rep.skipped_s * k)
    rep.productive_s = max(0.0, rep.wall_s - rep.overhead_s - rep.lost_total_s)


def _place_attempts(attempts: list[_Attempt], rep: GoodputReport) -> None:
    """Each attempt's process start and last sign of life, without overlaps between attempts."""
    for i, att in enumerate(attempts):
        d_start, d_restart = Event.of(att.started).data, Event.of(att.restart).data if att.restart else {}
        announced = event_time(att.started)
        started_at = number(d_start.get("started_at")) or number(d_restart.get("started_at"))
        downtime = number(d_restart.get("downtime_s"))
        prev = attempts[i - 1] if i else None
        if started_at is not None:
            att.start = started_at
        elif prev is not None and downtime is not None:
            att.start = prev.end + downtime
        else:
            att.start = announced
            rep.notes.append(f"attempt {att.number}: process start unknown, start-up counted from run_started")
        att.start = min(att.start, announced) if announced is not None else att.start
        if prev is not None and downtime is not None:
            # The unlogged tail of the previous attempt (lost metrics buffer, heartbeat only)
            # belongs to that attempt, not to the downtime.
            prev.end = max(prev.end, att.start - downtime)
        att.end = max([*att.times, att.start])


def _losses(events: list[dict[str, Any]], attempts: list[_Attempt], step_s: float | None, rep: GoodputReport) -> None:
    by_number = {a.number: a for a in attempts}
    for e in events:
        d = Event.of(e).data
        charge = goodput_charge(e)
        steps_lost = d.get("steps_lost") if isinstance(d.get("steps_lost"), int) else None
        if charge == "restart":
            lost = number(d.get("seconds_lost"))
            if lost is None and steps_lost is not None and step_s is not None:
                lost = steps_lost * step_s
            prev = by_number.get(d.get("prev_attempt")) if isinstance(d.get("prev_attempt"), int) else None
            if lost is not None and prev is not None:
                lost = min(lost, max(0.0, prev.end - (prev.first_step or prev.start)))
            rep.lost_restart_s += lost or 0.0
        elif charge == "rollback" and steps_lost:
            if step_s is None:
                rep.notes.append("rollback losses unknown: no step times to price them")
            else:
                rep.lost_rollback_s += steps_lost * step_s


def _data_seconds(events: list[dict[str, Any]], metrics: list[dict[str, Any]]) -> float:
    """Telemetry's data-loading seconds, less those of steps a failure threw away (already counted as lost)."""
    lost_after: dict[int, int] = {}
    for e in events:
        d = Event.of(e).data
        if is_kind(e, "restart") and isinstance(d.get("prev_attempt"), int) and isinstance(d.get("resumed_from_step"), int):
            lost_after[d["prev_attempt"]] = d["resumed_from_step"]
    total = 0.0
    for r in metrics:
        per_step, steps = number(r.get("data_s")), number(r.get("window_steps"))
        if per_step is None or steps is None:
            continue
        cut = lost_after.get(r.get("attempt"))
        if cut is not None and isinstance(r.get("step"), int) and r["step"] > cut:
            continue
        total += per_step * steps
    return total


def goodput_of_run(run_dir: Path) -> GoodputReport:
    """`goodput_report` of the run stored in `run_dir` (its events.jsonl and metrics.jsonl)."""
    return goodput_report(iter_records(Path(run_dir) / "events.jsonl"), read_metrics(Path(run_dir)))
