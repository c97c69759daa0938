"""The spike rule, defined once: robust rolling statistics and the spike test, on plain floats.

The bundled trainer's divergence guard (trainer/guard/) and the framework
adapters' recorder (logbook/integrations/recorder.py) both judge with it.

A NaN or inf loss or gradient norm is always a spike. A finite loss is a spike
when it lies more than `spike_sigma` robust sigmas above the median of the
last `window` losses, sigma being 1.4826 x the median absolute deviation
(floored at `min_rel_sigma` x |median| so a flat series cannot make every
wobble a spike). The gradient norm is judged the same way on its logarithm,
against `grad_norm_sigma`: its noise is multiplicative and heavy-tailed, so
"eight sigmas" means "far more times larger than usual than it ever is by
chance". Spikes are judged only after `warmup` finite values of that metric.
Non-finite values never enter the history; finite spikes do (the guard's ladder and the recorder keep the histories), so a genuine change of level (a
new data stage) is absorbed instead of flagged forever, and the median and MAD
barely move for a handful of outliers.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Protocol


class SpikeRule(Protocol):
    """The thresholds the test reads (the trainer's `GuardConfig` is one; `Thresholds` another)."""

    spike_sigma: float
    grad_norm_sigma: float
    warmup: int
    min_rel_sigma: float


@dataclass(frozen=True)
class Thresholds:
    """The spike rule's thresholds, for a caller without the trainer's guard config."""

    spike_sigma: float = 6.0
    """Robust sigmas above the median beyond which a loss is a spike."""
    grad_norm_sigma: float = 8.0
    """The same for the logarithm of the gradient norm."""
    warmup: int = 32
    """Finite values of a metric seen before any is judged."""
    min_rel_sigma: float = 0.005
    """Floor of the robust sigma, relative to |median| (for the gradient norm: of its logarithm, absolute)."""

MIN_HISTORY = 8
MAD_TO_SIGMA = 1.4826  # sigma of a normal distribution from its median absolute deviation
METRICS = ("loss", "grad_norm")


@dataclass
class Signal:
    """One metric that looked wrong at this step."""

    metric: str
    value: float
    baseline: float | None
    """Rolling median (None before the window has any value)."""
    scale: float | None
    """Robust sigma used (for the gradient norm: of its natural logarithm)."""
    z: float
    """Robust sigmas above the median (inf for NaN/inf)."""
    nonfinite: bool
    threshold: float | None = None
    """The threshold in sigmas that `z` exceeded."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def z_of(self, value: float) -> float:
        """Where another value of this metric would lie, against the same baseline and scale."""
        if not math.isfinite(value) or self.baseline is None or not self.scale:
            return math.inf
        if self.metric == "grad_norm":
            return (_log(value) - _log(self.baseline)) / self.scale
        return (value - self.baseline) / self.scale


def spike_signal(cfg: SpikeRule, metric: str, value: float, hist: list[float],
                 ordered: list[float] | None = None) -> Signal | None:
    """The signal `value` raises against `hist`, the metric's rolling history; None if it is no spike.

    `ordered` may hand in `sorted(judged_form(metric, hist))` kept up to date from
    earlier steps (the guard does), so the test sorts and logs nothing per step.
    """
    if not math.isfinite(value):
        return Signal(metric, value, _median_sorted(sorted(hist)) if hist else None, None, math.inf, True)
    if len(hist) < max(cfg.warmup, MIN_HISTORY):
        return None
    s = ordered if ordered is not None else sorted(judged_form(metric, hist))
    if _below_any_threshold(cfg, metric, value, s):
        return None
    if metric == "grad_norm":  # judged as a ratio to its typical size
        med, sigma = robust_stats(s, 0.0, ordered=True)
        sigma = max(sigma, cfg.min_rel_sigma)
        z, baseline, threshold = (_log(value) - med) / sigma, math.exp(med), cfg.grad_norm_sigma
    else:
        med, sigma = robust_stats(s, cfg.min_rel_sigma, ordered=True)
        z, baseline, threshold = (value - med) / sigma, med, cfg.spike_sigma
    return Signal(metric, value, baseline, sigma, z, False, threshold) if z > threshold else None


def _below_any_threshold(cfg: SpikeRule, metric: str, value: float, s: list[float]) -> bool:
    """True when `value` is no spike whatever the spread: most steps, told without the MAD.

    Sigma is never below its floor, so z = (x - median) / sigma is at most
    (x - median) / floor; division rounds monotonically, so this holds for the
    floats too.
    """
    med = _median_sorted(s)
    if metric == "grad_norm":
        x, floor, threshold = _log(value), max(cfg.min_rel_sigma, 1e-12), cfg.grad_norm_sigma
    else:
        x, floor, threshold = value, max(cfg.min_rel_sigma * abs(med), 1e-12), cfg.spike_sigma
    return threshold >= 0 and (x - med) / floor <= threshold


def judged_form(metric: str, values: list[float]) -> list[float]:
    """The values as their spike test reads them: the gradient norm's logarithms, the loss as it is."""
    return [_log(v) for v in values] if metric == "grad_norm" else values


def judged_value(metric: str, value: float) -> float:
    """One value as its spike test reads it (see `judged_form`)."""
    return _log(value) if metric == "grad_norm" else value


def robust_stats(values: list[float], min_rel_sigma: float, *, ordered: bool = False) -> tuple[float, float]:
    """(median, robust sigma) of `values`; `ordered=True` says they are sorted already."""
    s = values if ordered else sorted(values)
    med = _median_sorted(s)
    mad = _median_deviation(s, med)
    return med, max(MAD_TO_SIGMA * mad, min_rel_sigma * abs(med), 1e-12)


def _median_deviation(s: list[float], med: float) -> float:
    """The median of |v - med| over the sorted `s`, without building or sorting the deviations.

    The deviations below `med` (read leftwards) and above it (read rightwards)
    are two sorted runs, so the middle one or two are found by bisection in
    O(log n). `med - v` and `abs(v - med)` are the same float, so this is the
    value a sort would give, bit for bit.
    """
    n = len(s)
    split = bisect.bisect_left(s, med)
    below = lambda i: med - s[split - 1 - i]  # noqa: E731  (i-th smallest deviation below the median)
    above = lambda j: s[split + j] - med  # noqa: E731
    hi = _kth_of_two(below, split, above, n - split, n // 2)
    if n % 2:
        return hi
    return 0.5 * (_kth_of_two(below, split, above, n - split, n // 2 - 1) + hi)


def _kth_of_two(a, na: int, b, nb: int, k: int) -> float:
    """The k-th smallest (from 0) of two sorted runs given as index -> value functions."""
    lo, hi = max(0, k + 1 - nb), min(na, k + 1)
    while True:
        i = (lo + hi) // 2  # how many of the k + 1 smallest come from `a`
        j = k + 1 - i
        if i < na and j > 0 and b(j - 1) > a(i):
            lo = i + 1
        elif i > 0 and j < nb and a(i - 1) > b(j):
            hi = i - 1
        else:
            return max(a(i - 1) if i > 0 else -math.inf, b(j - 1) if j > 0 else -math.inf)


def _log(x: float) -> float:
    return math.log(max(x, 1e-12))


def _median_sorted(s: list[float]) -> float:
    n = len(s)
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])
