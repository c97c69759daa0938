"""`logbook calibration`: how well preregistered predictions and forecasts did, across every scored run.

Read from each run's recorded outcome (the newest `runs/<run>/outcomes/*.json`,
final ones only), one outcome file in memory at a time. A prediction *held*
when it was confirmed (within its tolerance counts) and *failed* when refuted;
inconclusive ones are counted apart and left out of the held rate, since
nothing was learned from them. Groups: the preregistration's author, the month
or ISO week in which the preregistration was made (when the prediction was
committed to, not when it was scored), and the metric.

A held rate says little on its own (timid thresholds always hold), so the
forecasts are scored properly as well (`Forecasts`):

- **Probability forecasts** (thresholds with a stated confidence): the mean
  Brier score and its Murphy decomposition over `BINS` equal-width bins of
  stated confidence, Brier = reliability - resolution + uncertainty. The
  binned decomposition is exact only when the forecasts within each bin are
  equal; otherwise the gap (within-bin variance and covariance terms) is
  reported as `residual`. Lower reliability is better calibrated, higher
  resolution tells outcomes apart better; the Brier skill score
  1 - Brier / uncertainty compares with always stating the base rate (above
  0 beats it). The reliability diagram lists each
  bin's mean stated confidence against the observed frequency, with a 95%
  Wilson interval for the frequency.
- **Intervals**: coverage at each nominal level against that level (an 80%
  interval should hold 80% of the time), with a 95% Wilson interval.
- **Point forecasts**: mean relative error (signed: a bias) and mean
  absolute relative error.

Late forecasts (made after their run started, see `forecasts`) are counted
apart: in `late`, never in the groups. Where a sample is too small to say
anything, `warnings` says so in words.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import date
from typing import Any

from logbook.core.errors import UsageError
from logbook.core.project import Project
from logbook.eventlog.timeline import list_event_runs
from logbook.scoring.outcome import load_outcome
from logbook.scoring.rules import log_score
from logbook.core.textfmt import plural


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


# --- scoring forecasts across runs ---------------------------------------------------------

BINS = 10
"""Equal-width bins of stated confidence for the reliability diagram and the decomposition."""
MIN_PROBABILITY = 20
"""Below this many probability forecasts, the Brier score's parts are noise: said in a warning."""
MIN_BIN = 5
"""A reliability-diagram bin with fewer forecasts is marked as too small to read."""
MIN_COVERAGE = 10
"""Below this many intervals at one level, coverage cannot be told from the nominal level."""
MIN_POINTS = 5
_Z = 1.959963984540054  # the 97.5% normal quantile, for 95% Wilson intervals


def wilson(k: int, n: int) -> tuple[float, float] | None:
    """95% Wilson score interval for k successes in n trials; None when n is 0."""
    if n <= 0:
        return None
    p, z2 = k / n, _Z * _Z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = _Z / (1 + z2 / n) * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)


def bin_index(p: float) -> int:
    """Bin k holds confidences in [k/BINS, (k+1)/BINS); the epsilon keeps 0.3 out of bin 2."""
    return min(BINS - 1, max(0, math.floor(float(p) * BINS + 1e-9)))


@dataclass
class ReliabilityBin:
    """One bin of the reliability diagram."""

    lo: float
    """Lower edge of the bin of stated confidence (inclusive)."""
    hi: float
    """Upper edge (exclusive, but 1.0 for the last bin)."""
    n: int
    mean_forecast: float
    """Mean stated confidence in the bin."""
    observed: float
    """Share of the bin's predictions that held."""
    ci: tuple[float, float]
    """95% Wilson interval of `observed`."""
    few: bool
    """Fewer than MIN_BIN forecasts: too few to read."""

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "ci": list(self.ci)}


def reliability_bins(pairs: list[tuple[float, int]]) -> list[ReliabilityBin]:
    """The non-empty bins of (stated probability, outcome 0/1) pairs, by confidence."""
    groups: dict[int, list[tuple[float, int]]] = {}
    for p, o in pairs:
        groups.setdefault(bin_index(p), []).append((p, o))
    out = []
    for k in sorted(groups):
        g = groups[k]
        held = sum(o for _, o in g)
        out.append(ReliabilityBin(k / BINS, (k + 1) / BINS, len(g), sum(p for p, _ in g) / len(g), held / len(g),
                                  wilson(held, len(g)), len(g) < MIN_BIN))
    return out


@dataclass
class Murphy:
    """The Brier score and its binned Murphy decomposition."""

    n: int
    brier: float
    """Mean (p - o)^2 over every forecast, exactly."""
    reliability: float
    resolution: float
    uncertainty: float
    """base rate x (1 - base rate)."""
    residual: float
    """brier - (reliability - resolution + uncertainty): 0 when forecasts within each bin are equal."""
    base_rate: float
    """Share of the forecasts' predictions that held."""

    @property
    def skill(self) -> float | None:
        """Brier skill score against always stating the base rate: 1 - brier / uncertainty (None if it is 0)."""
        return 1 - self.brier / self.uncertainty if self.uncertainty > 0 else None

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "skill": self.skill}


def murphy(pairs: list[tuple[float, int]]) -> Murphy | None:
    """Brier = reliability - resolution + uncertainty over the reliability diagram's bins (+ residual); None
    without pairs."""
    n = len(pairs)
    if not n:
        return None
    brier = sum((p - o) ** 2 for p, o in pairs) / n
    base = sum(o for _, o in pairs) / n
    rows = reliability_bins(pairs)
    rel = sum(b.n * (b.mean_forecast - b.observed) ** 2 for b in rows) / n
    res = sum(b.n * (b.observed - base) ** 2 for b in rows) / n
    unc = base * (1 - base)
    return Murphy(n, brier, rel, res, unc, brier - (rel - res + unc), base)


@dataclass
class Forecasts:
    """Forecast outcomes of one group, as collected (plain numbers, a few per prediction)."""

    probability: list[tuple[float, int]] = field(default_factory=list)
    """(stated confidence, 1 if it held else 0) of decided thresholds with a confidence."""
    intervals: list[tuple[float, bool]] = field(default_factory=list)
    """(nominal level, whether the value landed inside) of point forecasts."""
    rel_errors: list[float] = field(default_factory=list)
    """Signed relative errors of point forecasts (where defined)."""

    def add(self, p: dict[str, Any]) -> None:
        f = p.get("forecast") if isinstance(p.get("forecast"), dict) else None
        if not f:
            return
        if f.get("kind") == "probability" and "brier" in f:
            self.probability.append((float(f["p"]), int(f["outcome"])))
        elif f.get("kind") == "point" and "covered" in f:
            self.intervals.append((round(float(f["level"]), 6), bool(f["covered"])))
            if isinstance(f.get("rel_error"), (int, float)):
                self.rel_errors.append(float(f["rel_error"]))

    @property
    def empty(self) -> bool:
        return not (self.probability or self.intervals)

    @property
    def brier(self) -> float | None:
        """Mean Brier score of the forecasts with a stated confidence; None without one."""
        m = murphy(self.probability)
        return m.brier if m else None

    @property
    def covered_share(self) -> float | None:
        """Share of point forecasts whose value landed inside their interval, whatever its level; None without one."""
        return sum(c for _, c in self.intervals) / len(self.intervals) if self.intervals else None

    def coverage(self) -> list[dict[str, Any]]:
        """Per nominal level: intervals, how many held, the rate and its 95% interval."""
        out = []
        for level in sorted({lv for lv, _ in self.intervals}):
            hits = [c for lv, c in self.intervals if lv == level]
            k = sum(hits)
            out.append({"level": level, "n": len(hits), "covered": k, "rate": k / len(hits),
                        "ci": list(wilson(k, len(hits))), "few": len(hits) < MIN_COVERAGE})
        return out

    def errors(self) -> dict[str, Any]:
        r = self.rel_errors
        return {"n": len(r), "mean_rel_error": sum(r) / len(r) if r else None,
                "mean_abs_rel_error": sum(abs(x) for x in r) / len(r) if r else None}

    def warnings(self, what: str = "") -> list[str]:
        """Plain sentences where the sample is too small to say anything."""
        out, where = [], f" {what}" if what else ""
        n = len(self.probability)
        if 0 < n < MIN_PROBABILITY:
            out.append(f"only {plural(n, 'forecast')} with a stated confidence{where}: the Brier score's reliability and "
                       f"resolution say little below {MIN_PROBABILITY}")
        for c in self.coverage():
            if c["few"]:
                out.append(f"only {plural(c['n'], 'interval')} at {c['level'] * 100:g}%{where}: coverage of {c['covered']} "
                           f"of {c['n']} cannot be told apart from {c['level'] * 100:g}% "
                           f"(95% interval {c['ci'][0] * 100:.0f}–{c['ci'][1] * 100:.0f}%)")
        m = len(self.rel_errors)
        if 0 < m < MIN_POINTS:
            out.append(f"only {plural(m, 'point forecast')}{where}: a mean relative error from so few is anecdote")
        return out

    def to_dict(self) -> dict[str, Any]:
        m = murphy(self.probability)
        return {"probability": len(self.probability), "murphy": m.to_dict() if m else None,
                "reliability": [b.to_dict() for b in reliability_bins(self.probability)],
                "coverage": self.coverage(), "covered_share": self.covered_share, "errors": self.errors(),
                "mean_log": (sum(log_score(p, bool(o)) for p, o in self.probability) / len(self.probability)
                             if self.probability else None)}


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
    forecasts: Forecasts = field(default_factory=Forecasts)
    """Every on-time forecast."""
    forecasts_by: dict[str, dict[str, Forecasts]] = field(default_factory=dict)
    """"author" | "period" | "metric" -> group -> its forecasts."""
    late: Forecasts = field(default_factory=Forecasts)
    """Late forecasts (made after their run started), never mixed into the rest."""
    late_count: int = 0
    """Late predictions of any kind, left out of the tallies above."""

    @property
    def warnings(self) -> list[str]:
        out = self.forecasts.warnings()
        if self.late_count:
            out.append(f"{plural(self.late_count, 'late prediction')}, made after their run had started, are counted apart")
        return out

    def to_dict(self) -> dict[str, Any]:
        def groups(d: dict[str, Tally]) -> dict[str, Any]:
            return {k: v.to_dict() for k, v in d.items()}

        return {"period": self.period, "runs": self.runs, "run_ids": self.run_ids, "overall": self.overall.to_dict(),
                "by_author": groups(self.by_author), "by_period": groups(self.by_period),
                "by_metric": groups(self.by_metric), "forecasts": self.forecasts.to_dict(),
                "forecasts_by": {g: {k: v.to_dict() for k, v in d.items()} for g, d in self.forecasts_by.items()},
                "late": {"count": self.late_count, **self.late.to_dict()}, "warnings": self.warnings}


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
        seen: set[tuple[Any, Any]] = set()
        for p in out["predictions"]:
            if not isinstance(p, dict):
                continue
            # A scorecard written before a forecast stated twice was merged (a point forecast that is also a
            # trajectory's point) holds it twice under one text: it is one forecast, counted once.
            if (p.get("text"), p.get("source")) in seen:
                continue
            seen.add((p.get("text"), p.get("source")))
            if p.get("late"):  # seen the run before forecasting: never mixed with honest forecasts
                cal.late_count += 1
                cal.late.add(p)
                continue
            keys = {"author": who, "period": when, "metric": str(p.get("metric"))}
            for groups, key in ((cal.by_author, who), (cal.by_period, when), (cal.by_metric, keys["metric"])):
                groups.setdefault(key, Tally()).add(p)
            cal.overall.add(p)
            cal.forecasts.add(p)
            for g, key in keys.items():
                cal.forecasts_by.setdefault(g, {}).setdefault(key, Forecasts()).add(p)
    for name in ("by_author", "by_period", "by_metric"):
        setattr(cal, name, dict(sorted(getattr(cal, name).items())))
    cal.forecasts_by = {g: {k: v for k, v in sorted(d.items()) if not v.empty} for g, d in cal.forecasts_by.items()}
    return cal
