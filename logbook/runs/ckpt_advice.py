"""How often to checkpoint: Young's and Daly's intervals, and the overhead they leave.

With a blocking save cost d and a mean time between failures M (both seconds):

    Young   tau = sqrt(2 d M)
    Daly    tau = sqrt(2 d M) * (1 + (1/3) sqrt(d / 2M) + (1/9) (d / 2M)) - d    for d < 2M
            tau = M                                                            for d >= 2M

The expected share of wall time lost at interval tau (first order):

    overhead(tau) = d / tau + (tau + d) / (2 M)

the first term the saves themselves, the second the work redone after a
failure (on average half a save period, save included). Young's interval is
the minimum of this formula; Daly's adds the higher-order terms of his model.
Restart cost (process start, restore) is the same at any interval and is left
out, as both formulas leave it out.

`advise_from_run` measures both inputs from a run's own event log: the MTBF as
wall time over the failures so far, the save cost as the median blocking
seconds of its saves. It needs `MIN_FAILURES` failures before it estimates the
MTBF at all: with failures arriving at random, n of them estimate the MTBF to
within a relative standard error of about 1/sqrt(n), and the interval (which
goes as its square root) to about half that. One failure leaves the interval
uncertain by about ±50%; three bring it under ±30%, the least for a figure a
person should act on. Below that the advice says how many failures it needs,
unless an MTBF is given.
"""

from __future__ import annotations

import bisect
import math
import re
import statistics
from dataclasses import asdict, dataclass, field
from typing import Any

from logbook.core.errors import UsageError
from logbook.eventlog.kinds import RESTART_CAUSES, counted_as, goodput_charge, is_kind
from logbook.runs.goodput import event_time as _ts
from logbook.runs.goodput import number as _number

DURATION_EXAMPLE = "examples: 90s, 5m, 3.1h, 2d, 1h30m"
_UNITS = {"s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "hr": 3600.0, "d": 86400.0}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*(sec|min|hr|s|m|h|d)", re.IGNORECASE)

# Restarts that cost rework: every cause the registry knows but a preemption, which saves
# first and so loses nothing, and a cause nobody recorded.
FAILURE_CAUSES = (*(c for c in RESTART_CAUSES if c != "preempted"), "unknown")

MIN_FAILURES = 3
"""Failures a run must have seen before its own MTBF is estimated (see the module's docstring)."""


def parse_duration(text: str, what: str = "duration") -> float:
    """Seconds in `3.1h`, `5m`, `90s`, `2d`, `1h30m` (units s, m, h, d); UsageError otherwise."""
    raw = (text or "").strip()
    compact = raw.replace(" ", "").lower()
    pos, total = 0, 0.0
    while pos < len(compact):
        m = _PART.match(compact, pos)
        if not m:
            break
        total += float(m.group(1)) * _UNITS[m.group(2).lower()]
        pos = m.end()
    if not compact or pos != len(compact):
        bare = re.fullmatch(r"\d+(\.\d*)?|\.\d+", compact) is not None
        hint = f"give a unit ({DURATION_EXAMPLE})" if bare else DURATION_EXAMPLE
        raise UsageError(f"{what} {raw!r} is not a duration", hint=hint)
    if total <= 0:
        raise UsageError(f"{what} must be longer than zero, got {raw!r}", hint=DURATION_EXAMPLE)
    return total


def format_duration(seconds: float) -> str:
    """`43 min 08 s`, `2 h 05 min`, `38 s`, `1.5 s`, `3 d 04 h` for people."""
    s = float(seconds)
    if s < 10:
        return f"{s:.3g} s"
    if s < 60:
        return f"{s:.0f} s"
    if s < 3600:
        m, sec = divmod(round(s), 60)
        return f"{m} min {sec:02d} s"
    if s < 86400:
        h, m = divmod(round(s / 60), 60)
        return f"{h} h {m:02d} min"
    d, h = divmod(round(s / 3600), 24)
    return f"{d} d {h:02d} h"


def young_interval(save_s: float, mtbf_s: float) -> float:
    """Young (1974): sqrt(2 d M)."""
    _check_inputs(save_s, mtbf_s)
    return math.sqrt(2.0 * save_s * mtbf_s)


def daly_interval(save_s: float, mtbf_s: float) -> float:
    """Daly (2006), higher order: sqrt(2dM)(1 + sqrt(d/2M)/3 + (d/2M)/9) - d for d < 2M, else M."""
    _check_inputs(save_s, mtbf_s)
    if save_s >= 2.0 * mtbf_s:
        return mtbf_s
    r = save_s / (2.0 * mtbf_s)
    return math.sqrt(2.0 * save_s * mtbf_s) * (1.0 + math.sqrt(r) / 3.0 + r / 9.0) - save_s


def overhead(interval_s: float, save_s: float, mtbf_s: float) -> float:
    """First-order share of wall time lost: d/tau + (tau + d)/(2M), capped at 1."""
    if interval_s <= 0:
        raise ValueError(f"interval must be positive, got {interval_s}")
    return min(1.0, save_s / interval_s + (interval_s + save_s) / (2.0 * mtbf_s))


def _check_inputs(save_s: float, mtbf_s: float) -> None:
    if not (save_s > 0 and math.isfinite(save_s)):
        raise UsageError(f"save cost must be a positive number of seconds, got {save_s!r}")
    if not (mtbf_s > 0 and math.isfinite(mtbf_s)):
        raise UsageError(f"MTBF must be a positive number of seconds, got {mtbf_s!r}")


@dataclass
class Advice:
    """The advised checkpoint interval for one save cost and MTBF, with the reasoning's inputs."""

    save_s: float | None
    """Blocking seconds per save."""
    mtbf_s: float | None
    """Mean time between failures, seconds."""
    young_s: float | None = None
    """Young's interval, seconds."""
    daly_s: float | None = None
    """Daly's interval, seconds."""
    young_overhead: float | None = None
    """overhead(young_s): expected share of wall time lost at Young's interval."""
    daly_overhead: float | None = None
    """overhead(daly_s)."""
    daly_fallback: bool = False
    """True when d >= 2M and Daly's formula does not apply: the interval is then M."""
    current_s: float | None = None
    """The interval the run actually used (median time between its saves), if known."""
    current_overhead: float | None = None
    """overhead(current_s), if known."""
    failures: int | None = None
    """Failures counted in the run (advise_from_run only)."""
    wall_s: float | None = None
    """Wall time the failures were counted over (advise_from_run only)."""
    mtbf_source: str = "given"
    """given | run (measured from the run's restarts)."""
    save_source: str = "given"
    """given | run (median blocking seconds of the run's saves)."""
    notes: list[str] = field(default_factory=list)
    """Caveats for people: fallbacks, a missing input, an interval longer than the MTBF."""

    @property
    def complete(self) -> bool:
        return self.young_s is not None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def sentence(self) -> str:
        """One line for a chronicle entry or a progress note."""
        if not self.complete:
            return " ".join(self.notes) or "No checkpoint advice: the save cost or the MTBF is unknown."
        parts = []
        if self.mtbf_source == "run" and self.failures and self.wall_s:
            parts.append(f"Failures so far: {self.failures} in {format_duration(self.wall_s)} "
                         f"(MTBF {format_duration(self.mtbf_s)}).")
        else:
            parts.append(f"MTBF {format_duration(self.mtbf_s)}.")
        measured = "measured " if self.save_source == "run" else ""
        cur = f" (current: {format_duration(self.current_s)})" if self.current_s else ""
        parts.append(f"At the {measured}{format_duration(self.save_s)} blocking save, the advised interval is "
                     f"{format_duration(self.young_s)}{cur}.")
        return " ".join(parts)


def advise(save_s: float, mtbf_s: float, current_s: float | None = None) -> Advice:
    """Young's and Daly's intervals and their overheads for a save cost and an MTBF (seconds)."""
    young, daly = young_interval(save_s, mtbf_s), daly_interval(save_s, mtbf_s)
    adv = Advice(save_s=save_s, mtbf_s=mtbf_s, young_s=young, daly_s=daly,
                 young_overhead=overhead(young, save_s, mtbf_s), daly_overhead=overhead(daly, save_s, mtbf_s),
                 daly_fallback=save_s >= 2 * mtbf_s)
    if adv.daly_fallback:
        adv.notes.append("The save cost is at least twice the MTBF: Daly's formula does not apply, "
                         "so his interval falls back to the MTBF itself.")
    if young > mtbf_s:
        adv.notes.append("Young's interval exceeds the MTBF: most saves would not be reached; "
                         "make saves cheaper (background writes) before trusting the figure.")
    if current_s:
        adv.current_s, adv.current_overhead = current_s, overhead(current_s, save_s, mtbf_s)
    return adv


# --- from a run's own event log ------------------------------------------------




def count_failures(events: list[dict[str, Any]], include_drills: bool = False) -> int:
    """Restarts caused by a failure (not preemptions); drills only when asked."""
    n = 0
    for e in events:
        if not is_kind(e, "restart") or (e.get("drill") and not include_drills):
            continue
        cause = (e.get("data") or {}).get("cause", "unknown")
        if cause in FAILURE_CAUSES:
            n += 1
    return n


class AdviceTracker:
    """`advise_from_run` kept up to date one event at a time, for readers that stream a log.

    The chronicle asks for the advice at every restart of a run; feeding each
    event once and asking at each restart keeps that linear in the log.
    """

    def __init__(self, include_drills: bool = False) -> None:
        self.include_drills = include_drills
        self.failures = 0
        self.first_ts: float | None = None
        self.last_ts: float | None = None
        self._costs: list[float] = []
        self._gaps: list[float] = []
        self._last_save: dict[Any, float] = {}

    def add(self, e: dict[str, Any]) -> None:
        t = _ts(e)
        if t is not None:
            self.first_ts = t if self.first_ts is None else min(self.first_ts, t)
            self.last_ts = t if self.last_ts is None else max(self.last_ts, t)
        if counted_as(e) == "restarts":
            self.failures += count_failures([e], self.include_drills)
        elif goodput_charge(e) == "checkpoint_save":  # a save that training waited for
            cost = _number((e.get("data") or {}).get("blocking_s"))
            if cost is not None:
                bisect.insort(self._costs, cost)
            if t is not None:
                prev = self._last_save.get(e.get("attempt"))
                if prev is not None and t > prev:
                    bisect.insort(self._gaps, t - prev)
                self._last_save[e.get("attempt")] = max(t, prev or t)

    def advice(self, *, mtbf_s: float | None = None, save_s: float | None = None) -> Advice:
        """The advice from the events added so far; a given `mtbf_s` or `save_s` takes precedence."""
        wall = self.last_ts - self.first_ts if self.first_ts is not None and self.last_ts > self.first_ts else None
        failures, current = self.failures, _median(self._gaps)
        measured_save = _median(self._costs)
        mtbf_src = save_src = "given"
        if mtbf_s is None and failures >= MIN_FAILURES and wall:
            mtbf_s, mtbf_src = wall / failures, "run"
        if save_s is None and measured_save:
            save_s, save_src = measured_save, "run"
        if mtbf_s is None or save_s is None:
            adv = Advice(save_s=save_s, mtbf_s=mtbf_s, failures=failures, wall_s=wall, current_s=current,
                         mtbf_source=mtbf_src, save_source=save_src)
            if mtbf_s is None and failures:
                adv.notes.append(f"An MTBF from this run needs at least {MIN_FAILURES} failures, and it has seen "
                                 f"{failures}: the advised interval would be uncertain by about "
                                 f"±{50 / math.sqrt(failures):.0f}%. To advise anyway, give one: "
                                 "logbook ckpt-interval --mtbf 3.1h.")
            elif mtbf_s is None:
                adv.notes.append("No failures yet, so no MTBF from this run: give one (logbook ckpt-interval --mtbf 3.1h).")
            if save_s is None:
                adv.notes.append("No completed save in this run yet: give the save cost (logbook ckpt-interval --save-cost 5m).")
            return adv
        adv = advise(save_s, mtbf_s, current)
        adv.failures, adv.wall_s, adv.mtbf_source, adv.save_source = failures, wall, mtbf_src, save_src
        return adv


def _median(sorted_values: list[float]) -> float | None:
    return statistics.median(sorted_values) if sorted_values else None


def advise_from_run(events: list[dict[str, Any]], *, mtbf_s: float | None = None, save_s: float | None = None,
                    include_drills: bool = False) -> Advice:
    """Advice from the run's own measurements; a given `mtbf_s` or `save_s` takes precedence.

    The MTBF is the run's wall time over its failures (restarts that were not
    preemptions; drills only with `include_drills`). With no failures yet and
    no MTBF given, the advice is incomplete and says what it needs.
    """
    tracker = AdviceTracker(include_drills)
    for e in events:
        tracker.add(e)
    return tracker.advice(mtbf_s=mtbf_s, save_s=save_s)
