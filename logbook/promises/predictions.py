"""Machine-checkable predictions and forecasts, one line each.

Three forms:

    metric@point op threshold [± tolerance] [(C%)]      a threshold, optionally with a stated confidence
    metric@point ≈ value [lo, hi] L%                     a point forecast with its L% interval
    metric ≈ {point: value [lo, hi], point: ...} L%     a trajectory: point forecasts along one run

Examples:

    val_loss@final < 1.45 ± 0.02      the final validation loss is below 1.45 (+0.02 grace)
    spikes@final == 0                 no loss spikes over the whole run
    restarts@final <= 3
    tokens_per_s@50% >= 2000          throughput half-way through the run
    loss@step:5000 < 3.2              `@5000` means the same step

The point in the run is `final`, a step (`step:N` or `N`) or a fraction of the
run (`P%`, 0 < P <= 100). Without `@...` the point is `final`. A value is
scored at its point's own step and never taken from another one, unless the
prediction says how: `@~N±W` (or `@~P%±W`) takes the value logged nearest the
point within W steps either side (a tie: the earlier step), for a metric the
run logs only now and then (`val_loss@~15±5` on a run that evaluates every 10
steps). A point the run never measures is "not measured", never refuted by a
stale value; `logbook prereg` refuses it when the config is named, and
`logbook run` names it at launch (`logbook.promises.measurable`). Comparators are
`<`, `<=`, `>`, `>=`, `==`, `!=` (and `≤ ≥ ≠`). The tolerance (`± t`, `+- t` or
`+/- t`) widens the accepted side: `x < T ± t` holds when x < T + t (a grace
margin: `verdict()` tells a clean hit from one inside it), and `x == T ± t`
holds when |x - T| <= t (the band of equality).

A prediction must be able to fail and able to hold over the metric's range
(`restarts >= 0` cannot fail; `loss < 0` cannot hold): `check_falsifiable`
refuses both, and an unknown metric name is refused with the closest known one.
A metric is a bundled one, a framework's name for one (`eval_loss` is
`val_loss`), any other `eval_*` name an evaluation logs, or one the
preregistration declares (`logbook.promises.metric_names`). It also refuses a
count compared with a fraction (`restarts <= 2.5` means `<= 2`: say so) and a
tolerance wider than everything the threshold accepts (`loss < 3 ± 5`: the
tolerance, not the threshold, would decide).

Forecasts (scored by `logbook.scoring.rules`):

    val_loss@final < 2.31 (80%)                 80% sure it holds: scored with Brier and log scores
    val_loss@final ≈ 2.25 [2.20, 2.30] 80%      point 2.25, 80% central interval [2.20, 2.30]
    val_loss ≈ {25%: 3.1 [2.9, 3.3], 50%: 2.6 [2.45, 2.75], final: 2.25 [2.2, 2.3]} 80%

A confidence or interval level is a percentage strictly between 0 and 100
(a probability of 0 or 1 is certainty, which a log score punishes without
bound). `≈` may be written `~=` or `~`. An interval must contain its point,
must not be inverted, and must not cover the metric's whole range (it could
not fail). A point forecast holds when the value lands inside its interval.
A trajectory is two or more point forecasts of one metric at different
points of the run, sharing one level; each point is scored on its own. A lone
point forecast that a trajectory states too is one forecast: `flatten` keeps it
once (scored, plotted and calibrated once) and `merge_stated_twice` says so at
prereg; two different intervals of one point at one level are refused.
Without a stated confidence a threshold prediction is scored as held or not
and stays out of probability scores.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from logbook.core.errors import UsageError
from logbook.promises.metric_names import BUNDLED as METRICS
from logbook.promises.metric_names import Metric, framework_metric, lookup

AtKind = Literal["final", "step", "fraction"]
OPS = ("<", "<=", ">", ">=", "==", "!=")
POINT_OP = "≈"
_OP_ALIASES = {"≤": "<=", "≥": ">=", "≠": "!=", "=<": "<=", "=>": ">=", "~=": POINT_OP, "~": POINT_OP}


def milestone_step(fraction: float, total_steps: int) -> int:
    """The step at which `fraction` of a `total_steps` run is complete (at least step 1): what `P%` means."""
    if total_steps <= 0:
        raise ValueError(f"total_steps must be positive, got {total_steps}")
    # The epsilon keeps 0.3 * 10 (= 3.0000000000000004) from rounding up to 4.
    return max(1, min(total_steps, math.ceil(fraction * total_steps - 1e-9)))


@dataclass(frozen=True)
class At:
    """Where in the run a prediction is checked."""

    kind: AtKind
    """final | step | fraction"""
    value: int | float | None = None
    """The step (int) or the fraction of the run in (0, 1]; None for `final`."""
    window: int | None = None
    """`@~N±W`: the value is the one logged nearest the point within W steps either side; None: exactly there."""

    def to_text(self) -> str:
        if self.kind == "final":
            return "final"
        if self.kind == "step":
            at = f"step:{self.value}" if self.window is None else str(self.value)
        else:
            at = _shortest(float(self.value), scale=100.0, digits=_FRACTION_DIGITS) + "%"
        return at if self.window is None else f"~{at}±{self.window}"

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"kind": self.kind, "value": self.value}
        if self.window is not None:  # only a windowed point carries it, so older records read as before
            d["window"] = self.window
        return d


@dataclass(frozen=True)
class Prediction:
    """One parsed prediction. `text` is the canonical spelling (see `to_text`)."""

    metric: str
    at: At
    op: str
    """A comparator, or `≈` for a point forecast."""
    threshold: float
    """The threshold, or the forecast value of a point forecast."""
    tolerance: float = 0.0
    confidence: float | None = None
    """Stated probability in (0, 1) that a threshold holds, or the level of a point forecast's interval."""
    lo: float | None = None
    """Lower end of a point forecast's interval (None for a threshold)."""
    hi: float | None = None
    """Upper end of a point forecast's interval (None for a threshold)."""
    curve: str | None = None
    """The canonical text of the trajectory this point belongs to, if any."""
    spec: Metric | None = field(default=None, compare=False, repr=False)
    """The metric as parsed (bundled, a framework's or declared): its range and words; None: looked up by name."""

    @property
    def is_point(self) -> bool:
        """A point forecast with an interval (`≈`), not a threshold."""
        return self.op == POINT_OP

    def to_text(self) -> str:
        if self.is_point:
            return (f"{self.metric}@{self.at.to_text()} {POINT_OP} {self._interval_text()} "
                    f"{_level_text(self.confidence)}")
        s = f"{self.metric}@{self.at.to_text()} {self.op} {_shortest(self.threshold)}"
        if self.tolerance:
            s += f" ± {_shortest(self.tolerance)}"
        if self.confidence is not None:
            s += f" ({_level_text(self.confidence)})"
        return s

    def _interval_text(self) -> str:
        return f"{_shortest(self.threshold)} [{_shortest(self.lo)}, {_shortest(self.hi)}]"

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "text": self.to_text(),
            "metric": self.metric,
            "at": self.at.to_dict(),
            "op": self.op,
            "threshold": _plain_number(self.threshold),
            "tolerance": _plain_number(self.tolerance),
        }
        # Only forecasts carry the new keys, so a plain prediction's record reads as it always did.
        if self.confidence is not None:
            d["confidence"] = self.confidence
        if self.is_point:
            d["interval"] = [_plain_number(self.lo), _plain_number(self.hi)]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any], declared: Mapping[str, Metric] | None = None) -> Prediction:
        """Rebuild from front matter (`declared`: the metrics its record declares); the text is authoritative,
        fields must agree.

        Only the syntax is checked: a prediction accepted when it was written
        stays readable even if a metric's documented range changes later.
        """
        p = parse_prediction_syntax(str(d.get("text", "")), declared)
        if isinstance(p, Trajectory):
            raise UsageError(f"prediction {d.get('text')!r} is a trajectory, not a single prediction")
        mine = p.to_dict()
        keys = ("metric", "op", "threshold", "tolerance", "at", "confidence", "interval")
        if any(key in d and d[key] != mine.get(key) for key in keys):
            raise UsageError(f"prediction {d.get('text')!r}: its fields disagree with its text")
        return p

    def holds(self, value: float) -> bool:
        """True when `value` satisfies the prediction, tolerance included."""
        return self.verdict(value) != "refuted"

    def verdict(self, value: float) -> Literal["confirmed", "within_tolerance", "refuted"]:
        """`confirmed` without the tolerance, `within_tolerance` only with it, else `refuted`.

        For `==` and `!=` the tolerance is the band of equality, so the answer
        is `confirmed` or `refuted`.
        """
        try:
            v = float(value)
        except (TypeError, ValueError):
            return "refuted"
        if math.isnan(v):
            return "refuted"
        if self.is_point:  # a point forecast holds when the value lands in its interval
            return "confirmed" if self.lo <= v <= self.hi else "refuted"
        if self.op in ("==", "!="):  # the tolerance is the band itself, not a grace margin
            return "confirmed" if _accepts(self.op, self.threshold, self.tolerance, v) else "refuted"
        if _accepts(self.op, self.threshold, 0.0, v):
            return "confirmed"
        if self.tolerance and _accepts(self.op, self.threshold, self.tolerance, v):
            return "within_tolerance"
        return "refuted"

    def describe(self) -> str:
        """A sentence for people: what is checked, where and against what."""
        m = metric_of(self)
        where = {"final": "at the end of the run", "step": f"at step {self.at.value}",
                 "fraction": f"at {self.at.to_text()} of the run"}[self.at.kind]
        if self.is_point:
            return (f"{m.description} {where}: forecast {_shortest(self.threshold)}, "
                    f"{_level_text(self.confidence)} interval [{_shortest(self.lo)}, {_shortest(self.hi)}]")
        words = {"<": "below", "<=": "at most", ">": "above", ">=": "at least", "==": "equal to", "!=": "not equal to"}
        s = f"{m.description} {where}: {words[self.op]} {_shortest(self.threshold)}"
        s += f" (tolerance {_shortest(self.tolerance)})" if self.tolerance else ""
        return s + (f", stated confidence {_level_text(self.confidence)}" if self.confidence is not None else "")


@dataclass(frozen=True)
class Trajectory:
    """Point forecasts of one metric at several points of one run, with one interval level."""

    metric: str
    level: float
    """Level of every point's interval, in (0, 1)."""
    points: tuple[Prediction, ...]
    """Point forecasts (`≈`), in the order written; each knows its trajectory by `curve`."""

    def to_text(self) -> str:
        inner = ", ".join(f"{p.at.to_text()}: {p._interval_text()}" for p in self.points)
        return f"{self.metric} {POINT_OP} {{{inner}}} {_level_text(self.level)}"

    def to_dict(self) -> dict[str, Any]:
        return {"text": self.to_text(), "kind": "trajectory", "metric": self.metric, "level": self.level,
                "points": [{"at": p.at.to_dict(), "value": _plain_number(p.threshold),
                            "interval": [_plain_number(p.lo), _plain_number(p.hi)]} for p in self.points]}

    @classmethod
    def from_dict(cls, d: dict[str, Any], declared: Mapping[str, Metric] | None = None) -> Trajectory:
        """Rebuild from front matter; the text is authoritative, fields must agree."""
        t = parse_prediction_syntax(str(d.get("text", "")), declared)
        if not isinstance(t, Trajectory):
            raise UsageError(f"prediction {d.get('text')!r} is marked as a trajectory but is not one")
        mine = t.to_dict()
        if any(key in d and d[key] != mine[key] for key in ("metric", "level", "points")):
            raise UsageError(f"trajectory {d.get('text')!r}: its fields disagree with its text")
        return t

    def describe(self) -> str:
        m = metric_of(self.points[0])
        shown = ", ".join(f"{p._interval_text()} at {p.at.to_text()}" for p in self.points)
        return (f"{m.description} along the run, {_level_text(self.level)} intervals: {shown}")


Forecast = Prediction | Trajectory
"""What one line of a preregistration's predictions is."""


def forecast_from_dict(d: dict[str, Any], declared: Mapping[str, Metric] | None = None) -> Forecast:
    """A prediction or a trajectory from its front-matter entry (`declared`: the metrics its record declares)."""
    if isinstance(d, dict) and d.get("kind") == "trajectory":
        return Trajectory.from_dict(d, declared)
    return Prediction.from_dict(d, declared)


def metric_of(p: Prediction) -> Metric:
    """The metric `p` names: as parsed, else the bundled one or (an `eval_*` name) the framework's."""
    return p.spec or METRICS.get(p.metric) or framework_metric(p.metric)


def flatten(items: list[Forecast]) -> list[Prediction]:
    """Trajectories replaced by their points: what is scored, one by one, each forecast once.

    A lone point forecast that a trajectory also states (same metric, point,
    value, interval and level) is one forecast written twice: it is kept once,
    as the trajectory's point, so it is scored, plotted and calibrated once.
    """
    in_curves = {_same(p) for x in items if isinstance(x, Trajectory) for p in x.points}
    out: list[Prediction] = []
    for x in items:
        if isinstance(x, Trajectory):
            out.extend(x.points)
        elif not (x.is_point and _same(x) in in_curves):
            out.append(x)
    return out


def _same(p: Prediction) -> tuple[Any, ...]:
    """What makes two point forecasts the same forecast (where it came from aside)."""
    return (p.metric, p.at, p.threshold, p.lo, p.hi, p.confidence)


def merge_stated_twice(items: list[Forecast]) -> tuple[list[Forecast], list[str]]:
    """Lone point forecasts that a trajectory states too, merged into it (with a warning each).

    Two intervals of one metric at one point and one level that disagree
    contradict each other: refused. (At different levels they are two
    forecasts, as quantiles are, and both are kept.)
    """
    seen: dict[tuple[str, At, float | None], tuple[Prediction, str]] = {}
    for i, x in enumerate(items, start=1):
        for p in (x.points if isinstance(x, Trajectory) else [x] if x.is_point else []):
            where = f"prediction {i}" + (" (a trajectory)" if isinstance(x, Trajectory) else "")
            key = (p.metric, p.at, p.confidence)
            if key in seen and (_same(seen[key][0]) != _same(p) or isinstance(x, Trajectory) == bool(seen[key][0].curve)):
                first, first_where = seen[key]
                raise UsageError(f"{p.metric}@{p.at.to_text()} is forecast twice at {_level_text(p.confidence)}: "
                                 f"{first._interval_text()} in "
                                 f"{first_where} and {p._interval_text()} in {where}",
                                 hint="state each forecast once: keep the one you mean")
            seen.setdefault(key, (p, where))
    kept = flatten(items)
    dropped = [(i, x) for i, x in enumerate(items, start=1) if isinstance(x, Prediction) and x not in kept]
    warnings = [f"prediction {i} ({x.to_text()}) is also a point of the trajectory: it is kept once, "
                f"in the trajectory, and scored once" for i, x in dropped]
    return [x for x in items if not (isinstance(x, Prediction) and x not in kept)], warnings


def _level_text(p: float | None) -> str:
    return _shortest(float(p), scale=100.0, digits=_FRACTION_DIGITS) + "%"


def _accepts(op: str, t: float, tol: float, v: float) -> bool:
    if op == "<":
        return v < t + tol
    if op == "<=":
        return v <= t + tol
    if op == ">":
        return v > t - tol
    if op == ">=":
        return v >= t - tol
    if op == "==":
        return abs(v - t) <= tol
    return abs(v - t) > tol


def _plain_number(x: float) -> int | float:
    """Whole numbers as ints so front matter reads `0`, not `0.0`."""
    return int(x) if float(x).is_integer() and abs(x) < 2**53 else float(x)


def _shortest(x: float, scale: float = 1.0, digits: int | None = None) -> str:
    """The shortest decimal that parses back to exactly `x`.

    With `scale`, the text is `x * scale` and parsing divides by `scale` (and
    rounds to `digits` places), as fractions written as percentages are.
    """

    def back(s: str) -> float:
        v = float(s) / scale
        return round(v, digits) if digits is not None else v

    y = x * scale
    if float(y).is_integer() and abs(y) < 1e16 and back(str(int(y))) == x:
        return str(int(y))
    for precision in range(1, 18):
        s = format(y, f".{precision}g")
        if back(s) == x:
            return s
    return repr(y)


# --- parsing -----------------------------------------------------------------

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:/[A-Za-z0-9_]+)*")  # `eval/loss`: TensorBoard's tags
_NUMBER = re.compile(r"[+-]?(?:\d[\d_]*(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?(?:[kKMBGT](?![A-Za-z0-9_]))?%?")
_OP = re.compile(r"<=|>=|==|!=|=<|=>|~=|<|>|≤|≥|≠|≈|~|=")
_LEVEL = re.compile(r"\d+(?:\.\d+)?\s*%")
_TOL = re.compile(r"±|\+/-|\+-")
_SUFFIX = {"k": 1e3, "K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9, "T": 1e12}
_MAX_LEN = 200
_MAX_TRAJECTORY_LEN = 2000
_MAX_POINTS = 100
_FRACTION_DIGITS = 10


class _Cursor:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def skip_ws(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos] in " \t":
            self.pos += 1

    def match(self, rx: re.Pattern[str]) -> str | None:
        self.skip_ws()
        m = rx.match(self.text, self.pos)
        if not m:
            return None
        self.pos = m.end()
        return m.group(0)

    def fail(self, what: str) -> UsageError:
        col = self.pos + 1
        found = self.text[self.pos:self.pos + 12] or "the end"
        return UsageError(
            f"invalid prediction {self.text!r}: {what} at column {col} (found {found!r})",
            hint="write predictions like `val_loss@final < 1.45 ± 0.02`, `spikes@final == 0`, "
                 "`val_loss@final < 2.31 (80%)`, `val_loss@final ≈ 2.25 [2.20, 2.30] 80%`",
        )


def _number(raw: str, cur: _Cursor, what: str, percent_ok: bool = False) -> float:
    text = raw.replace("_", "")
    percent = text.endswith("%")
    if percent:
        if not percent_ok:
            cur.pos -= len(raw)
            raise cur.fail(f"a percentage is not allowed for {what}")
        text = text[:-1]
    scale = 1.0
    if text and text[-1] in _SUFFIX:
        text, scale = text[:-1], _SUFFIX[text[-1]]
    value = float(text) * scale
    if percent:
        value = round(value / 100.0, 12)
    if not math.isfinite(value):
        cur.pos -= len(raw)
        raise cur.fail(f"{what} must be a finite number")
    return value


def _parse_at(cur: _Cursor) -> At:
    cur.skip_ws()
    if cur.match(re.compile(r"(?:final|end)\b")):
        return At("final")
    if cur.match(re.compile(r"~")):
        return _parse_window(cur, _parse_at_point(cur))
    return _parse_at_point(cur)


def _parse_window(cur: _Cursor, at: At) -> At:
    """`~N±W` / `~P%±W`: the nearest logged value within W steps of the point (W a whole number of steps)."""
    if at.kind == "final":
        raise cur.fail("`~` takes a step or a fraction of the run, not `final`")
    if cur.match(_TOL) is None:
        raise cur.fail("`@~` needs its window in steps: write `@~15±5` (the nearest value within 5 steps of step 15)")
    raw = cur.match(re.compile(r"\d[\d_]*"))
    if raw is None:
        raise cur.fail("expected the window, a whole number of steps, after `±`")
    return At(at.kind, at.value, int(raw.replace("_", "")))


def _parse_at_point(cur: _Cursor) -> At:
    cur.skip_ws()
    if cur.match(re.compile(r"(?:final|end)\b")):
        return At("final")
    step_prefix = cur.match(re.compile(r"step:?\s*"))
    start = cur.pos
    raw = cur.match(re.compile(r"\d[\d_,]*(?:\.\d+)?%?"))
    if raw is None:
        raise cur.fail("expected a point in the run after '@' (`final`, `step:5000`, `5000` or `50%`)")
    if raw.endswith("%"):
        if step_prefix:
            cur.pos = start
            raise cur.fail("a step must be a whole number, not a percentage")
        pct = float(raw[:-1].replace("_", "").replace(",", ""))
        if not 0 < pct <= 100:
            cur.pos = start
            raise cur.fail("a fraction of the run must be above 0% and at most 100%")
        return At("fraction", round(pct / 100.0, _FRACTION_DIGITS))
    digits = raw.replace("_", "").replace(",", "")
    if not digits.isdigit():
        cur.pos = start
        raise cur.fail("a step must be a whole number")
    return At("step", int(digits))


def parse_prediction(text: str, declared: Mapping[str, Metric] | None = None) -> Forecast:
    """Parse and validate one prediction or forecast (syntax, metric, falsifiability).

    `declared`: the metrics the preregistration declares beyond the bundled set (`metric_names`).
    """
    p = parse_prediction_syntax(text, declared)
    for one in p.points if isinstance(p, Trajectory) else (p,):
        check_falsifiable(one, text if one is p else None)
    return p


def parse_prediction_syntax(text: str, declared: Mapping[str, Metric] | None = None) -> Forecast:
    """Parse one prediction, point forecast or trajectory; errors say what was expected and at which column."""
    if not isinstance(text, str) or not text.strip():
        raise UsageError("empty prediction", hint="write e.g. `val_loss@final < 1.45`")
    limit = _MAX_TRAJECTORY_LEN if "{" in text else _MAX_LEN
    if len(text) > limit:
        raise UsageError(f"prediction longer than {limit} characters: {text[:40]!r}...")
    cur = _Cursor(text.strip())
    name = cur.match(_NAME)
    if name is None:
        raise cur.fail("expected a metric name")
    metric = lookup(name, declared)
    cur.skip_ws()
    at, has_at = At("final"), cur.text.startswith("@", cur.pos)
    if has_at:
        cur.pos += 1
        at = _parse_at(cur)
    op = cur.match(_OP)
    if op is None:
        raise cur.fail("expected a comparator (<, <=, >, >=, ==, !=) or ≈ for a point forecast")
    if op == "=":
        cur.pos -= 1
        raise cur.fail("`=` is ambiguous: write `==` for equality")
    op = _OP_ALIASES.get(op, op)
    cur.skip_ws()
    if op == POINT_OP and cur.text.startswith("{", cur.pos):
        if has_at:
            raise cur.fail("a trajectory names its points inside `{...}`, not after `@`")
        return _finish(cur, _parse_trajectory(cur, metric))
    if op == POINT_OP:
        value, lo, hi = _parse_interval(cur, metric)
        level = _parse_level(cur)
        return _finish(cur, Prediction(metric.name, at, op, value, 0.0, level, lo, hi, spec=metric))
    raw = cur.match(_NUMBER)
    if raw is None:
        raise cur.fail(f"expected a threshold number after `{op}`")
    threshold = _number(raw, cur, "the threshold", percent_ok=metric.unit == "fraction")
    tolerance = 0.0
    if cur.match(_TOL):
        cur.skip_ws()
        before = cur.pos
        raw_t = cur.match(_NUMBER)
        if raw_t is None or raw_t.startswith(("-", "+")):
            cur.pos = before
            raise cur.fail("expected a non-negative tolerance after `±`")
        tolerance = _number(raw_t, cur, "the tolerance", percent_ok=metric.unit == "fraction")
    cur.skip_ws()
    confidence = _parse_level(cur) if cur.text.startswith("(", cur.pos) else None
    return _finish(cur, Prediction(metric.name, at, op, threshold, tolerance, confidence, spec=metric))


def _finish(cur: _Cursor, p: Forecast) -> Forecast:
    cur.skip_ws()
    if isinstance(p, Prediction) and not p.is_point and _LEVEL.match(cur.text, cur.pos):
        raise cur.fail("a threshold's stated confidence goes in parentheses: `(80%)`")
    if cur.pos != len(cur.text):
        raise cur.fail("unexpected text after the prediction")
    return p


def _parse_interval(cur: _Cursor, metric: Metric) -> tuple[float, float, float]:
    """`value [lo, hi]`: the forecast and its interval, checked for order."""
    pct = metric.unit == "fraction"
    raw = cur.match(_NUMBER)
    if raw is None:
        raise cur.fail(f"expected the forecast value after `{POINT_OP}`")
    value = _number(raw, cur, "the forecast value", percent_ok=pct)
    if cur.match(re.compile(r"\[")) is None:
        raise cur.fail("a point forecast needs an interval: write `≈ 2.25 [2.20, 2.30] 80%`")
    bounds = []
    for what, sep in (("lower", ","), ("upper", "]")):
        raw_b = cur.match(_NUMBER)
        if raw_b is None:
            raise cur.fail(f"expected the interval's {what} bound (`[lo, hi]`)")
        bounds.append(_number(raw_b, cur, f"the interval's {what} bound", percent_ok=pct))
        cur.skip_ws()
        if not cur.text.startswith(sep, cur.pos):
            raise cur.fail(f"expected `{sep}` in the interval `[lo, hi]`")
        cur.pos += 1
    lo, hi = bounds
    if lo > hi:
        raise cur.fail(f"the interval [{_shortest(lo)}, {_shortest(hi)}] is inverted: write the lower bound first")
    if not lo <= value <= hi:
        raise cur.fail(f"the interval [{_shortest(lo)}, {_shortest(hi)}] does not contain its point {_shortest(value)}")
    return value, lo, hi


def _parse_level(cur: _Cursor) -> float:
    """A confidence or interval level: `80%` (or `(80%)`), strictly between 0% and 100%."""
    cur.skip_ws()
    opened = cur.text.startswith("(", cur.pos)
    if opened:
        cur.pos += 1
    before = cur.pos
    raw = cur.match(_LEVEL)
    if raw is None:
        cur.skip_ws()
        raise cur.fail("expected a level as a percentage, such as `80%`" if not opened else
                       "expected a confidence as a percentage, such as `(80%)`")
    pct = float(raw.rstrip("% \t"))
    if not 0 < pct < 100:
        cur.pos = before
        raise cur.fail("a confidence must be above 0% and below 100% (certainty cannot be scored)")
    if opened:
        cur.skip_ws()
        if not cur.text.startswith(")", cur.pos):
            raise cur.fail("expected `)` after the confidence")
        cur.pos += 1
    return round(pct / 100.0, _FRACTION_DIGITS)


def _parse_trajectory(cur: _Cursor, metric: Metric) -> Trajectory:
    """`{point: value [lo, hi], ...} L%` after `metric ≈`."""
    cur.pos += 1  # the `{`
    raw_points: list[tuple[At, float, float, float]] = []
    while True:
        cur.skip_ws()
        at = _parse_at(cur)
        cur.skip_ws()
        if not cur.text.startswith(":", cur.pos):
            raise cur.fail("expected `:` between a trajectory's point and its forecast (`50%: 2.6 [2.4, 2.8]`)")
        cur.pos += 1
        cur.skip_ws()
        if any(a == at for a, *_ in raw_points):
            raise cur.fail(f"the point {at.to_text()} is given twice in the trajectory")
        raw_points.append((at, *_parse_interval(cur, metric)))
        sep = cur.match(re.compile(r"[,;}]"))
        if sep is None:
            raise cur.fail("expected `,` or `}` after a trajectory point")
        if sep == "}":
            break
        if len(raw_points) >= _MAX_POINTS:
            raise cur.fail(f"a trajectory has at most {_MAX_POINTS} points")
    if len(raw_points) < 2:
        raise cur.fail("a trajectory needs at least two points; a single one is a point forecast (`@50% ≈ ...`)")
    level = _parse_level(cur)
    points = tuple(Prediction(metric.name, a, POINT_OP, v, confidence=level, lo=lo, hi=hi, spec=metric)
                   for a, v, lo, hi in raw_points)
    curve = Trajectory(metric.name, level, points).to_text()  # each point knows the curve it belongs to
    return Trajectory(metric.name, level, tuple(replace(p, curve=curve) for p in points))


def check_falsifiable(p: Prediction, text: str | None = None) -> None:
    """Refuse a prediction that holds (or fails) for every value the metric can take."""
    m = metric_of(p)
    shown = text.strip() if text else p.to_text()
    if p.is_point:
        _check_interval(p, m, shown)
        return
    t, tol = p.threshold, p.tolerance
    lo, hi = m.lo, m.hi
    if m.integer:
        if p.op in ("==", "!=") and tol == 0 and not float(t).is_integer():
            verb = "can never hold" if p.op == "==" else "cannot fail"
            raise UsageError(f"prediction {shown!r} {verb}: {m.name} is a whole number",
                             hint=f"use a whole-number threshold such as `{m.name}@final {p.op} {math.floor(t)}`")
    elif p.op in ("==", "!=") and tol == 0:
        verb = "practically never holds" if p.op == "==" else "practically cannot fail"
        raise UsageError(f"prediction {shown!r} {verb}: {m.name} is continuous, an exact match is never seen",
                         hint=f"give a tolerance (`{m.name}@{p.at.to_text()} {p.op} {_shortest(t)} ± 0.01`) or use < / >")
    if _covers_range(p.op, t, tol, lo, hi):
        raise UsageError(
            f"prediction {shown!r} cannot fail: {m.name} is always in {_range_text(m)}",
            hint="a prediction must name an outcome that could turn out false; tighten the threshold",
        )
    if _misses_range(p.op, t, tol, lo, hi):
        raise UsageError(
            f"prediction {shown!r} can never hold: {m.name} is always in {_range_text(m)}",
            hint="check the comparator's direction and the threshold",
        )
    if m.integer:
        _check_whole(p, m, shown)
    _check_tolerance(p, m, shown)


def _check_whole(p: Prediction, m: Metric, shown: str) -> None:
    """A count compared with a fraction (`restarts <= 2.5`) says less than it seems: refuse it, naming the whole number."""
    t, tol = p.threshold, p.tolerance
    if p.op in ("==", "!="):
        return  # a fractional `==`/`!=` is refused above, a band of equality may be fractional
    if not float(t).is_integer():
        whole = {"<": ("<=", math.floor(t)), "<=": ("<=", math.floor(t)),
                 ">": (">=", math.ceil(t)), ">=": (">=", math.ceil(t))}[p.op]
        raise UsageError(f"prediction {shown!r} compares a count with a fraction: {m.name} is a whole number, "
                         f"so `{p.op} {_shortest(t)}` means `{whole[0]} {whole[1]}`",
                         hint=f"say the whole number you mean: `{m.name}@{p.at.to_text()} {whole[0]} {whole[1]}`")
    if tol and not float(tol).is_integer():
        raise UsageError(f"prediction {shown!r} gives a count a fractional tolerance: {m.name} is a whole number",
                         hint=f"use a whole-number tolerance, or none: `{m.name}@{p.at.to_text()} {p.op} {_shortest(t)}`")


def _check_tolerance(p: Prediction, m: Metric, shown: str) -> None:
    """A grace margin wider than everything the threshold itself accepts makes the threshold say nothing.

    `loss < 3 ± 5` accepts [0, 3) by its threshold and [3, 8) by its tolerance:
    the tolerance is the prediction, and it is not the one written. A tolerance
    is a small grace margin; anything wider is refused.
    """
    t, tol = p.threshold, p.tolerance
    if not tol or p.op in ("==", "!="):
        return  # for == and != the tolerance is the band itself, checked above
    accepted = t - m.lo if p.op in ("<", "<=") else m.hi - t
    if tol > accepted and not math.isclose(tol, accepted, rel_tol=1e-9):  # 1 - 0.9 is 0.0999...
        side = f"[{_shortest(m.lo)}, {_shortest(t)})" if p.op in ("<", "<=") else f"({_shortest(t)}, {_shortest(m.hi)}]"
        raise UsageError(f"prediction {shown!r} can hardly fail: its tolerance ± {_shortest(tol)} is wider than "
                         f"everything the threshold accepts ({side}), so the tolerance, not the threshold, decides",
                         hint="a tolerance is a small grace margin; state the threshold you expect and a margin "
                              "smaller than it")


def _check_interval(p: Prediction, m: Metric, shown: str) -> None:
    """An interval that covers every possible value cannot fail; one outside the range cannot hold."""
    lo, hi = float(p.lo), float(p.hi)
    if lo <= m.lo and hi >= m.hi:
        raise UsageError(f"forecast {shown!r} cannot fail: its interval covers all of {m.name}'s range {_range_text(m)}",
                         hint="state the interval you actually expect the value to land in")
    if hi < m.lo or lo > m.hi:
        raise UsageError(f"forecast {shown!r} can never hold: {m.name} is always in {_range_text(m)}",
                         hint="check the interval's bounds")
    if lo == hi and not m.integer:
        raise UsageError(f"forecast {shown!r} practically never holds: {m.name} is continuous and the interval "
                         "has no width", hint="give the interval you expect, e.g. `[2.20, 2.30]`")


def _range_text(m: Metric) -> str:
    return f"[{_shortest(m.lo)}, " + ("∞)" if math.isinf(m.hi) else f"{_shortest(m.hi)}]")


def _covers_range(op: str, t: float, tol: float, lo: float, hi: float) -> bool:
    """Every value in [lo, hi] satisfies the prediction: it cannot fail."""
    if op in ("<", "<="):
        return _accepts(op, t, tol, hi)  # the worst case of an upper bound is the top of the range
    if op in (">", ">="):
        return _accepts(op, t, tol, lo)
    if op == "==":
        return t - tol <= lo and hi <= t + tol
    return t + tol < lo or t - tol > hi  # != : the excluded band lies outside the range


def _misses_range(op: str, t: float, tol: float, lo: float, hi: float) -> bool:
    """No value in [lo, hi] satisfies the prediction: it can never hold."""
    if op == "<":
        return lo >= t + tol
    if op == "<=":
        return lo > t + tol
    if op == ">":
        return hi <= t - tol
    if op == ">=":
        return hi < t - tol
    if op == "==":
        return t + tol < lo or t - tol > hi
    return lo == hi and abs(lo - t) <= tol
