"""Proper scoring rules for one forecast against what happened.

A threshold prediction with a stated confidence `p` is a probability forecast
of a binary event, "the prediction holds" (confirmed, within its tolerance
included):

- Brier score `(p - o)^2` with `o` = 1 if it held, else 0. Lower is better;
  0.25 is what always saying 50% earns.
- Log score `ln(p)` if it held, else `ln(1 - p)`. Higher is better (0 is
  perfect). The grammar only accepts confidences strictly between 0% and 100%,
  so the score is always finite and nothing is clamped.

A point forecast `value [lo, hi] L%` against the measured `x`:

- signed error `x - value` (positive: the run came out above the forecast),
- relative error `(x - value) / |x|`, relative to what happened as a
  percentage error is (None when `x` is 0),
- whether the interval held (`lo <= x <= hi`),
- the interval score of Gneiting and Raftery (2007) for a central interval
  at level L (alpha = 1 - L): `(hi - lo) + (2/alpha)(lo - x)[x < lo] +
  (2/alpha)(x - hi)[x > hi]`. Lower is better: it rewards narrow intervals
  and charges misses in proportion to how far they land outside.

A trajectory's points are point forecasts, each scored on its own.
"""

from __future__ import annotations

import math
from typing import Any

from logbook.promises.predictions import Prediction


def brier(p: float, held: bool) -> float:
    """(p - o)^2 for a stated probability `p` of an event that did (`held`) or did not happen."""
    return (float(p) - (1.0 if held else 0.0)) ** 2


def log_score(p: float, held: bool) -> float:
    """ln of the probability given to what happened; `p` must lie in (0, 1)."""
    p = float(p)
    if not 0.0 < p < 1.0:
        raise ValueError(f"a probability forecast must lie strictly between 0 and 1, got {p}")
    return math.log(p if held else 1.0 - p)


def interval_score(lo: float, hi: float, level: float, x: float) -> float:
    """Gneiting-Raftery interval score of the central `level` interval [lo, hi] for outcome `x`."""
    alpha = 1.0 - float(level)
    score = float(hi) - float(lo)
    if x < lo:
        score += 2.0 / alpha * (lo - x)
    elif x > hi:
        score += 2.0 / alpha * (x - hi)
    return score


def point_errors(value: float, x: float) -> tuple[float, float | None]:
    """(signed error x - value, relative error (x - value) / |x|, None when x is 0)."""
    err = float(x) - float(value)
    return err, (err / abs(float(x)) if x != 0 else None)


def forecast_scores(p: Prediction, status: str, value: float | None) -> dict[str, Any] | None:
    """The scores a scorecard shows for one prediction; None for a plain threshold.

    A threshold with a confidence gets its probability scores only once it is
    decided (confirmed or refuted); a point forecast gets its errors once a
    value was measured.
    """
    if p.is_point:
        out: dict[str, Any] = {"kind": "point", "value": p.threshold, "lo": p.lo, "hi": p.hi, "level": p.confidence,
                               "width": p.hi - p.lo}
        if p.curve:
            out["trajectory"] = p.curve
        if value is not None and status in ("confirmed", "refuted"):
            err, rel = point_errors(p.threshold, value)
            out.update(error=err, rel_error=rel, covered=p.lo <= value <= p.hi,
                       interval_score=interval_score(p.lo, p.hi, p.confidence, value))
        return out
    if p.confidence is None:
        return None
    out = {"kind": "probability", "p": p.confidence}
    if status in ("confirmed", "refuted"):
        held = status == "confirmed"
        out.update(outcome=1 if held else 0, brier=brier(p.confidence, held), log=log_score(p.confidence, held))
    return out
