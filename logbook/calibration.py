"""`logbook calibration`: how often preregistered predictions held, across every scored run.

Read from each run's recorded outcome (the newest `runs/<run>/outcomes/*.json`, final ones
only), one outcome file in memory at a time. A prediction *held* when it was
confirmed (within its tolerance counts) and *failed* when refuted;
inconclusive ones are counted apart and left out of the held rate, since
nothing was learned from them. Groups: the preregistration's author, the
month or ISO week in which the preregistration was made (when the prediction
was committed to, not when it was scored), and the metric.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date
from typing import Any

from .errors import UsageError
from .eventstream import list_event_runs
from .outcome import load_outcome
from .project import Project


@dataclass
class Tally:
    """Counts of one group."""

    confirmed: int = 0
    refuted: int = 0
    inconclusive: int = 0
    within_tolerance: int = 0
    """Confirmed only thanks to the tolerance (part of `confirmed`)."""

    def add(self, p: dict[str, Any]) -> None:
        status = p.get("status")
        if status == "confirmed":
            self.confirmed += 1
            self.within_tolerance += 1 if p.get("within_tolerance") else 0
        elif status == "refuted":
            self.refuted += 1
        else:
            self.inconclusive += 1

    @property
    def total(self) -> int:
        return self.confirmed + self.refuted + self.inconclusive

    @property
    def rate(self) -> float | None:
        """Share of decided predictions that held; None when none was decided."""
        decided = self.confirmed + self.refuted
        return self.confirmed / decided if decided else None

    def to_dict(self) -> dict[str, Any]:
        return {"confirmed": self.confirmed, "refuted": self.refuted, "inconclusive": self.inconclusive,
                "within_tolerance": self.within_tolerance, "total": self.total, "rate": self.rate}


@dataclass
class Calibration:
    """Tallies overall and per group, each group sorted by key."""

    period: str
    runs: int = 0
    overall: Tally = field(default_factory=Tally)
    by_author: dict[str, Tally] = field(default_factory=dict)
    by_period: dict[str, Tally] = field(default_factory=dict)
    by_metric: dict[str, Tally] = field(default_factory=dict)
    run_ids: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        def groups(d: dict[str, Tally]) -> dict[str, Any]:
            return {k: v.to_dict() for k, v in d.items()}

        return {"period": self.period, "runs": self.runs, "run_ids": self.run_ids, "overall": self.overall.to_dict(),
                "by_author": groups(self.by_author), "by_period": groups(self.by_period),
                "by_metric": groups(self.by_metric)}


def period_key(created: str, period: str) -> str:
    """`2026-11` for a month, `2026-W48` for an ISO week; `unknown` for a date that does not parse."""
    try:
        d = date.fromisoformat(str(created)[:10])
    except ValueError:
        return "unknown"
    if period == "month":
        return f"{d.year:04d}-{d.month:02d}"
    year, week, _ = d.isocalendar()
    return f"{year:04d}-W{week:02d}"


def _author(ident: Any) -> str:
    """`Name <email>` -> `Name`; people are grouped by the name they preregister under."""
    s = str(ident or "unknown")
    return s.split(" <", 1)[0].strip() or s


def calibration(project: Project, *, period: str = "month") -> Calibration:
    """Tally every final outcome's predictions."""
    if period not in ("month", "week"):
        raise UsageError(f"period must be month or week, got {period!r}")
    cal = Calibration(period=period)
    for run in list_event_runs(project):
        out = load_outcome(project, run)
        if not out or not out.get("final") or not isinstance(out.get("predictions"), list):
            continue
        cal.runs += 1
        cal.run_ids.append(run)
        who = _author(out.get("prereg_author"))
        when = period_key(str(out.get("prereg_created") or ""), period)
        for p in out["predictions"]:
            if not isinstance(p, dict):
                continue
            for groups, key in ((cal.by_author, who), (cal.by_period, when), (cal.by_metric, str(p.get("metric")))):
                groups.setdefault(key, Tally()).add(p)
            cal.overall.add(p)
    for name in ("by_author", "by_period", "by_metric"):
        setattr(cal, name, dict(sorted(getattr(cal, name).items())))
    return cal
