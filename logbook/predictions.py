"""Machine-checkable predictions: `metric@point op threshold [± tolerance]`.

Examples:

    val_loss@final < 1.45 ± 0.02      the final validation loss is below 1.45 (+0.02 grace)
    spikes@final == 0                 no loss spikes over the whole run
    restarts@final <= 3
    tokens_per_s@50% >= 2000          throughput half-way through the run
    loss@step:5000 < 3.2              `@5000` means the same step

The point in the run is `final`, a step (`step:N` or `N`) or a fraction of the
run (`P%`, 0 < P <= 100). Without `@...` the point is `final`. Comparators are
`<`, `<=`, `>`, `>=`, `==`, `!=` (and `≤ ≥ ≠`). The tolerance (`± t`, `+- t` or
`+/- t`) widens the accepted side: `x < T ± t` holds when x < T + t (a grace
margin: `verdict()` tells a clean hit from one inside it), and `x == T ± t`
holds when |x - T| <= t (the band of equality).

A prediction must be able to fail and able to hold over the metric's range
(`restarts >= 0` cannot fail; `loss < 0` cannot hold): `check_falsifiable`
refuses both, and unknown metric names list the known ones.
"""

from __future__ import annotations

import difflib
import math
import re
from dataclasses import dataclass
from typing import Any, Literal

from .errors import UsageError

AtKind = Literal["final", "step", "fraction"]
OPS = ("<", "<=", ">", ">=", "==", "!=")
_OP_ALIASES = {"≤": "<=", "≥": ">=", "≠": "!=", "=<": "<=", "=>": ">="}


@dataclass(frozen=True)
class Metric:
    """A run metric a prediction may name."""

    name: str
    """Identifier used in predictions."""
    unit: str
    """Unit for people (`nats`, `count`, `fraction`, ...)."""
    lo: float
    """Smallest value the metric can take (inclusive)."""
    hi: float
    """Largest value the metric can take (inclusive; `inf` when unbounded)."""
    integer: bool
    """True for counts: only whole numbers occur."""
    description: str
    """A noun phrase for people. Counts are cumulative up to the point checked."""


def _m(name: str, unit: str, lo: float, hi: float, integer: bool, description: str) -> Metric:
    return Metric(name, unit, lo, hi, integer, description)


INF = math.inf
METRICS: dict[str, Metric] = {m.name: m for m in (
    _m("val_loss", "nats", 0, INF, False, "validation loss (cross-entropy)"),
    _m("loss", "nats", 0, INF, False, "training loss (cross-entropy)"),
    _m("val_ppl", "perplexity", 1, INF, False, "validation perplexity, exp(val_loss)"),
    _m("spikes", "count", 0, INF, True, "loss or gradient-norm spikes detected"),
    _m("restarts", "count", 0, INF, True, "restarts after failures"),
    _m("rollbacks", "count", 0, INF, True, "rollbacks to an earlier checkpoint"),
    _m("lr_changes", "count", 0, INF, True, "learning-rate changes (by the guard or by hand)"),
    _m("skipped_steps", "count", 0, INF, True, "optimizer updates skipped by the guard"),
    _m("tokens_per_s", "tokens/s", 0, INF, False, "training throughput"),
    _m("mfu", "fraction", 0, 1, False, "model FLOPs utilisation"),
    _m("goodput", "fraction", 0, 1, False, "productive training time over wall time"),
    _m("grad_norm", "L2 norm", 0, INF, False, "global gradient norm"),
    _m("steps", "count", 0, INF, True, "optimizer steps completed"),
    _m("tokens", "count", 0, INF, True, "training tokens consumed"),
    _m("lr", "learning rate", 0, INF, False, "current learning rate"),
    _m("wall_hours", "hours", 0, INF, False, "wall-clock time since the run started"),
)}


def known_metrics_text() -> str:
    return ", ".join(sorted(METRICS))


@dataclass(frozen=True)
class At:
    """Where in the run a prediction is checked."""

    kind: AtKind
    """final | step | fraction"""
    value: int | float | None = None
    """The step (int) or the fraction of the run in (0, 1]; None for `final`."""

    def to_text(self) -> str:
        if self.kind == "final":
            return "final"
        if self.kind == "step":
            return f"step:{self.value}"
        return _shortest(float(self.value), scale=100.0, digits=_FRACTION_DIGITS) + "%"

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "value": self.value}


@dataclass(frozen=True)
class Prediction:
    """One parsed prediction. `text` is the canonical spelling (see `to_text`)."""

    metric: str
    at: At
    op: str
    threshold: float
    tolerance: float = 0.0

    def to_text(self) -> str:
        s = f"{self.metric}@{self.at.to_text()} {self.op} {_shortest(self.threshold)}"
        if self.tolerance:
            s += f" ± {_shortest(self.tolerance)}"
        return s

    def to_dict(self) -> dict[str, Any]:
        return {
            "text": self.to_text(),
            "metric": self.metric,
            "at": self.at.to_dict(),
            "op": self.op,
            "threshold": _plain_number(self.threshold),
            "tolerance": _plain_number(self.tolerance),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Prediction:
        """Rebuild from front matter; the text is authoritative, fields must agree.

        Only the syntax is checked: a prediction accepted when it was written
        stays readable even if a metric's documented range changes later.
        """
        p = parse_prediction_syntax(str(d.get("text", "")))
        mine = p.to_dict()
        if any(key in d and d[key] != mine[key] for key in ("metric", "op", "threshold", "tolerance", "at")):
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
        if self.op in ("==", "!="):  # the tolerance is the band itself, not a grace margin
            return "confirmed" if _accepts(self.op, self.threshold, self.tolerance, v) else "refuted"
        if _accepts(self.op, self.threshold, 0.0, v):
            return "confirmed"
        if self.tolerance and _accepts(self.op, self.threshold, self.tolerance, v):
            return "within_tolerance"
        return "refuted"

    def describe(self) -> str:
        """A sentence for people: what is checked, where and against what."""
        m = METRICS[self.metric]
        where = {"final": "at the end of the run", "step": f"at step {self.at.value}",
                 "fraction": f"at {self.at.to_text()} of the run"}[self.at.kind]
        words = {"<": "below", "<=": "at most", ">": "above", ">=": "at least", "==": "equal to", "!=": "not equal to"}
        s = f"{m.description} {where}: {words[self.op]} {_shortest(self.threshold)}"
        return s + (f" (tolerance {_shortest(self.tolerance)})" if self.tolerance else "")


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

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NUMBER = re.compile(r"[+-]?(?:\d[\d_]*(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?(?:[kKMBGT](?![A-Za-z0-9_]))?%?")
_OP = re.compile(r"<=|>=|==|!=|=<|=>|<|>|≤|≥|≠|=")
_TOL = re.compile(r"±|\+/-|\+-")
_SUFFIX = {"k": 1e3, "K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9, "T": 1e12}
_MAX_LEN = 200
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
            hint="write predictions like `val_loss@final < 1.45 ± 0.02`, `spikes@final == 0`, `tokens_per_s@50% >= 2000`",
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


def parse_prediction(text: str) -> Prediction:
    """Parse and validate one prediction (syntax, metric, falsifiability)."""
    p = parse_prediction_syntax(text)
    check_falsifiable(p, text)
    return p


def parse_prediction_syntax(text: str) -> Prediction:
    """Parse one prediction; errors say what was expected and at which column."""
    if not isinstance(text, str) or not text.strip():
        raise UsageError("empty prediction", hint="write e.g. `val_loss@final < 1.45`")
    if len(text) > _MAX_LEN:
        raise UsageError(f"prediction longer than {_MAX_LEN} characters: {text[:40]!r}...")
    cur = _Cursor(text.strip())
    name = cur.match(_NAME)
    if name is None:
        raise cur.fail("expected a metric name")
    metric = _lookup_metric(name)
    cur.skip_ws()
    at = At("final")
    if cur.text.startswith("@", cur.pos):
        cur.pos += 1
        at = _parse_at(cur)
    op = cur.match(_OP)
    if op is None:
        raise cur.fail("expected a comparator (<, <=, >, >=, ==, !=)")
    if op == "=":
        cur.pos -= 1
        raise cur.fail("`=` is ambiguous: write `==` for equality")
    op = _OP_ALIASES.get(op, op)
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
    if cur.pos != len(cur.text):
        raise cur.fail("unexpected text after the prediction")
    return Prediction(metric.name, at, op, threshold, tolerance)


def _lookup_metric(name: str) -> Metric:
    m = METRICS.get(name) or METRICS.get(name.lower())
    if m is not None:
        return m
    close = difflib.get_close_matches(name.lower(), list(METRICS), n=1)
    hint = (f"did you mean `{close[0]}`? " if close else "") + f"known metrics: {known_metrics_text()}"
    raise UsageError(f"unknown metric `{name}`", hint=hint)


def check_falsifiable(p: Prediction, text: str | None = None) -> None:
    """Refuse a prediction that holds (or fails) for every value the metric can take."""
    m = METRICS[p.metric]
    shown = text.strip() if text else p.to_text()
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
