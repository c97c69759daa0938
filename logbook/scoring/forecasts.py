"""Forecasts against a run: which ones came late, where the run stands against them, their curves.

A forecast made after its run started is a *late forecast*: whoever made it
may have seen the run, so it is never scored as the original. An amendment
counts as late for a run when it says so (`seen: run-started` or `results`)
or when it was created after the run's first `run_started` event. Its
predictions keep their own source (`amend-<n>`), carry the reason in the
scorecard, and calibration counts them apart.

A trajectory (or any point forecast) is a curve over steps: fractions of the
run become steps through `milestone_step`, `final` the run's last planned
step. Between two forecast points the forecast and its band are interpolated
linearly in steps, which is what the milestone plot draws and what "how far
off the run is right now" compares against.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from logbook.core.errors import LogbookError
from logbook.core.textfmt import fmt_num, plural
from logbook.eventlog.chain import iter_records
from logbook.eventlog.kinds import is_kind, parse_ts
from logbook.promises.predictions import POINT_OP, At, Prediction
from logbook.promises.prereg import load_prereg
from logbook.runs.facts import RunFacts
from logbook.runs.milestones import milestone_step


def run_start_time(facts: RunFacts) -> float | None:
    """Epoch seconds of the run's first `run_started` event, None when there is none."""
    for e in facts.of_kind("run_started"):
        t = parse_ts(e.get("ts"))
        if t is not None:
            return t
    return None


def late_sources(prereg, start: float | None, in_force: list[str] | None = None) -> dict[str, str]:
    """`amend-<n>` -> why its forecasts are late for a run that started at `start`; on-time ones are absent.

    `in_force`: the amendment keys the run recorded at its start, where it did;
    any other amendment came later, whatever its clock says.
    """
    out: dict[str, str] = {}
    for a in prereg.amendments:
        created = parse_ts(a.created)
        if a.seen in ("run-started", "results"):
            out[f"amend-{a.n}"] = f"amendment {a.n} was made after a run started ({a.seen} seen)"
        elif start is not None and created is not None and created > start:
            out[f"amend-{a.n}"] = f"amendment {a.n} ({a.created}) was made after this run started"
        elif in_force is not None and a.key not in in_force:
            out[f"amend-{a.n}"] = f"amendment {a.n} was not in force when this run started"
    return out


def at_step(at: At, total_steps: int | None) -> int | None:
    """The step a point of the run falls on; None when it cannot be known (a fraction with no total)."""
    if at.kind == "step":
        return int(at.value)
    if not total_steps:
        return None
    if at.kind == "fraction":
        return milestone_step(float(at.value), total_steps)
    return int(total_steps)


@dataclass(frozen=True)
class Curve:
    """A forecast over steps: one trajectory, or one point forecast."""

    metric: str
    label: str
    """For a legend: `forecast <metric>`, with the amendment it came from."""
    level: float
    """The level of its intervals, in (0, 1)."""
    points: tuple[tuple[int, float, float, float], ...]
    """(step, forecast, lo, hi), by step."""
    late: bool = False
    """Made after the run started (see `late_sources`)."""

    def at(self, step: int) -> tuple[float, float, float] | None:
        """(forecast, lo, hi) at `step`, interpolated linearly between points; None outside them."""
        pts = self.points
        if not pts or step < pts[0][0] or step > pts[-1][0]:
            return None
        for (s0, *a), (s1, *b) in zip(pts, pts[1:]):
            if s0 <= step <= s1:
                w = 0.0 if s1 == s0 else (step - s0) / (s1 - s0)
                return tuple(x + w * (y - x) for x, y in zip(a, b))  # type: ignore[return-value]
        return tuple(pts[0][1:])  # a single point  # type: ignore[return-value]


def curves(forecasts: list[tuple[Prediction, str]], total_steps: int | None,
           late: dict[str, str] | None = None, metrics: tuple[str, ...] = ("loss", "val_loss")) -> list[Curve]:
    """The point forecasts of `metrics` as curves: one per trajectory, one per lone point forecast."""
    late = late or {}
    groups: dict[tuple[str, str], list[tuple[Prediction, str]]] = {}
    for p, src in forecasts:
        if p.op == POINT_OP and p.metric in metrics:
            groups.setdefault((src, p.curve or p.to_text()), []).append((p, src))
    out = []
    for (src, _key), members in groups.items():
        pts = []
        for p, _ in members:
            s = at_step(p.at, total_steps)
            if s is not None:
                pts.append((s, p.threshold, p.lo, p.hi))
        if not pts:
            continue
        first = members[0][0]
        label = f"forecast {first.metric}" + (f" ({src})" if src != "original" else "")
        out.append(Curve(first.metric, label, float(first.confidence), tuple(sorted(pts)), src in late))
    return out


def run_curves(project, run_id: str, metrics: tuple[str, ...] = ("loss", "val_loss")) -> list[Curve]:
    """The forecast curves of a run's preregistration (none for an exploratory or unreadable one)."""
    started = next((e for e in iter_records(project.run_dir(run_id) / "events.jsonl")
                    if is_kind(e, "run_started")), None)
    data = started.get("data") if started and isinstance(started.get("data"), dict) else {}
    pid = data.get("prereg_id")
    if not isinstance(pid, str) or not pid:
        return []
    try:
        prereg = load_prereg(project, pid)
    except LogbookError:  # an unreadable record is `verify`'s to report; the plot goes without its forecast
        return []
    total = data.get("total_steps") if isinstance(data.get("total_steps"), int) else None
    late = late_sources(prereg, parse_ts(started.get("ts")))
    return curves(prereg.all_predictions(), total, late, metrics)


def forecast_standings(prereg, facts: RunFacts, step: int) -> list[dict[str, Any]]:
    """Where the run stands against each forecast curve at `step` (for a progress note)."""
    if prereg is None:
        return []
    late = late_sources(prereg, run_start_time(facts))
    metrics = tuple(sorted({p.metric for p, _ in prereg.all_predictions() if p.op == POINT_OP}))
    out = []
    for c in curves(prereg.all_predictions(), facts.total_steps, late, metrics):
        s = standing_against(c, facts, step)
        if s is not None:
            out.append({**s, "label": c.label})
    return out


def standing_against(curve: Curve, facts: RunFacts, step: int) -> dict[str, Any] | None:
    """How far the run is from a forecast curve at `step`: the latest value against the forecast there."""
    found = facts.value_at_or_before(curve.metric, step)
    if found is None:
        return None
    at, value = found
    here = curve.at(at)
    if here is None:
        # Outside the curve: short of its first point (the next one to reach) or past its last (none).
        first = curve.points[0]
        return {"metric": curve.metric, "step": at, "value": value, "level": curve.level, "late": curve.late,
                "forecast": None, "next_point": {"step": first[0], "forecast": first[1]} if at < first[0] else None}
    f, lo, hi = here
    return {"metric": curve.metric, "step": at, "value": value, "level": curve.level, "late": curve.late,
            # Relative to the value, as the outcome's relative error is, so the note and the scorecard agree.
            "forecast": f, "lo": lo, "hi": hi, "off": value - f, "rel_off": (value - f) / abs(value) if value else None,
            "inside": lo <= value <= hi}


def describe_scores(p: dict[str, Any]) -> str:
    """One phrase with a scored prediction's forecast scores (a scorecard row's dict), or ''."""
    f = p.get("forecast") if isinstance(p.get("forecast"), dict) else None
    if not f:
        return ""
    if f.get("kind") == "probability":
        if "brier" not in f:
            return f"stated {f['p'] * 100:g}%, not decided"
        return f"stated {f['p'] * 100:g}%: Brier {f['brier']:.3f}, log score {f['log']:.3f}"
    if "error" not in f:
        return "no value to compare"
    rel = "" if f.get("rel_error") is None else f" ({f['rel_error'] * 100:+.1f}%)"
    held = "inside" if f["covered"] else "outside"
    return (f"error {f['error']:+.4g}{rel}, {held} its {f['level'] * 100:g}% interval, "
            f"interval score {fmt_num(f['interval_score'])}")


@dataclass
class RunForecasts:
    """What one scorecard's forecasts add up to (late forecasts counted apart)."""

    probability: int = 0
    """Decided threshold predictions with a stated confidence."""
    mean_brier: float | None = None
    mean_log: float | None = None
    points: int = 0
    """Point forecasts (trajectory points included) with a measured value."""
    covered: int = 0
    mean_abs_rel_error: float | None = None
    late: int = 0
    """Late forecasts, left out of the figures above."""

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def run_summary(predictions: list[dict[str, Any]]) -> RunForecasts:
    """Sum up the forecast scores of one scorecard's predictions (their dicts)."""
    out = RunForecasts()
    briers, logs, rels = [], [], []
    for p in predictions:
        f = p.get("forecast") if isinstance(p.get("forecast"), dict) else None
        if not f:
            continue
        if p.get("late"):
            out.late += 1
            continue
        if "brier" in f:
            briers.append(f["brier"])
            logs.append(f["log"])
        elif "error" in f:
            out.points += 1
            out.covered += 1 if f["covered"] else 0
            if f.get("rel_error") is not None:
                rels.append(abs(f["rel_error"]))
    out.probability = len(briers)
    out.mean_brier = sum(briers) / len(briers) if briers else None
    out.mean_log = sum(logs) / len(logs) if logs else None
    out.mean_abs_rel_error = sum(rels) / len(rels) if rels else None
    return out


def summary_text(s: RunForecasts) -> str:
    """The summary for people; '' when the scorecard holds no scored forecast."""
    parts = []
    if s.probability:
        parts.append(f"{s.probability} with a stated confidence: mean Brier {s.mean_brier:.3f}, "
                     f"mean log score {s.mean_log:.3f}")
    if s.points:
        rel = "" if s.mean_abs_rel_error is None else f", mean |relative error| {s.mean_abs_rel_error * 100:.1f}%"
        parts.append(f"{plural(s.points, 'point forecast')}: {s.covered} of {s.points} intervals held{rel}")
    if s.late:
        parts.append(f"{plural(s.late, 'late forecast')} scored apart")
    return "Forecasts: " + "; ".join(parts) + "." if parts else ""
