"""The calibration figure: one panel per measure, each on its own labelled axis.

Four panels, drawn with matplotlib's object API on the Agg canvas (no
pyplot state, never torch), without timestamps in the PNG so the same
outcomes give the same bytes:

1. Reliability diagram: each bin's mean stated confidence against how often
   those predictions held, with 95% Wilson intervals, the diagonal of
   perfect calibration, and the count per bin; bins too small to read are
   drawn hollow.
2. Interval coverage: observed coverage at each nominal level against the
   level itself, with 95% Wilson intervals.
3. Brier score per period (lower is better; 0.25 is what always saying 50%
   scores, drawn as a line).
4. Interval coverage per period, with a dashed line at each nominal level
   the intervals were stated at: the rate they should reach.

Every number drawn is one `Calibration` states (and `--json` prints); this
module only places them. Its look is the tables below, one per kind of mark,
so every panel matches and the reader's matplotlib settings change nothing.
"""

from __future__ import annotations

import io
from pathlib import Path

from logbook.core.fsutil import atomic_write_bytes
from logbook.scoring.calibration import Calibration, reliability_bins

_BLUE, _PURPLE, _GREY = "#1f4e79", "#7f3f98", "#888888"
_TOP = 1.12
"""Room above 1.0 on every probability axis, so a count at the top sits below the panel's title."""
_TITLE = {"fontsize": 11}
_LABEL = {"fontsize": 10}
_TICKS = {"labelsize": 9}
_GRID = {"alpha": 0.3}
_DIAGONAL = {"ls": "--", "lw": 0.8, "color": _GREY}
_POINT = {"ms": 5, "lw": 0.8, "capsize": 2}
_LINE = {"ms": 5, "lw": 1.2}
_TICKS_TEXT = {"fontsize": 9}
_COUNT = {"textcoords": "offset points", "fontsize": 8}
_EMPTY = {"ha": "center", "va": "center", "fontsize": 10, "color": _GREY}
_LEGEND = {"fontsize": 8}
_CHANCE = {"ls": "--", "lw": 0.9, "color": _GREY}
_NOMINAL = {"lw": 1.0, "color": _PURPLE, "alpha": 0.7}


def calibration_figure(cal: Calibration):
    """The figure, not yet saved (a test inspects its panels)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 8), dpi=110)
    FigureCanvasAgg(fig)
    axes = fig.subplots(2, 2)
    _reliability(axes[0][0], cal)
    _coverage(axes[0][1], cal)
    _brier_over_time(axes[1][0], cal)
    _coverage_over_time(axes[1][1], cal)
    fig.tight_layout(h_pad=2.0, w_pad=2.0)
    return fig


def write_calibration_plot(cal: Calibration, out_path: Path) -> Path:
    """Draw `cal` into `out_path` (PNG, atomic); returns the path."""
    buf = io.BytesIO()
    calibration_figure(cal).savefig(buf, format="png", metadata={"Software": None})
    atomic_write_bytes(Path(out_path), buf.getvalue())
    return Path(out_path)


def _frame(ax, title: str, xlabel: str, ylabel: str) -> None:
    """Title, labels and grid of a panel whose y axis is a probability."""
    ax.set_title(title, **_TITLE)
    ax.set_xlabel(xlabel, **_LABEL)
    ax.set_ylabel(ylabel, **_LABEL)
    ax.tick_params(**_TICKS)
    ax.grid(True, **_GRID)
    ax.set_ylim(-0.02, _TOP)


def _square(ax, title: str, xlabel: str, ylabel: str) -> None:
    """A panel of probability against probability, with the diagonal where the two agree."""
    _frame(ax, title, xlabel, ylabel)
    ax.plot([0, 1], [0, 1], **_DIAGONAL)
    ax.set_xlim(0, 1)


def _empty(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, transform=ax.transAxes, **_EMPTY)


def _point(ax, x: float, y: float, ci, marker: str, color: str, hollow: bool, count: str, offset) -> None:
    """One estimate with its 95% interval and its count beside it; hollow when too few to read."""
    ax.errorbar([x], [y], yerr=[[y - ci[0]], [ci[1] - y]], fmt=marker, color=color,
                mfc="white" if hollow else color, **_POINT)
    ax.annotate(count, (x, y), xytext=offset, **_COUNT)


def _reliability(ax, cal: Calibration) -> None:
    _square(ax, f"reliability ({len(cal.forecasts.probability)} forecasts)", "stated confidence", "observed frequency")
    bins = reliability_bins(cal.forecasts.probability)
    if not bins:
        _empty(ax, "no forecast with a stated\nconfidence scored yet")
        return
    for b in bins:  # the count inside the panel, clear of the title and of the right edge
        _point(ax, b.mean_forecast, b.observed, b.ci, "o", _BLUE, b.few, f"n={b.n}",
               (-26 if b.mean_forecast > 0.9 else 5, -12 if b.observed > 0.9 else 4))


def _coverage(ax, cal: Calibration) -> None:
    rows = cal.forecasts.coverage()
    _square(ax, f"interval coverage ({sum(r['n'] for r in rows)} intervals)", "nominal level", "observed coverage")
    if not rows:
        _empty(ax, "no point forecast\nscored yet")
        return
    for r in rows:
        _point(ax, r["level"], r["rate"], r["ci"], "s", _PURPLE, r["few"], f"{r['covered']}/{r['n']}", (5, -12))


def _periods(ax, cal: Calibration, title: str, ylabel: str):
    """The per-period panel's frame; the periods and their forecasts, or None when nothing is scored yet."""
    periods = cal.forecasts_by.get("period", {})
    _frame(ax, title, cal.period, ylabel)
    if not periods:
        _empty(ax, "nothing scored yet")
        return None
    keys = list(periods)
    ax.set_xticks(range(len(keys)))
    ax.set_xticklabels(keys, rotation=30, ha="right", **_TICKS_TEXT)
    ax.set_xlim(-0.5, len(keys) - 0.5)
    return [(x, periods[k]) for x, k in enumerate(keys)]


def _trend(ax, pts: list[tuple[int, float, int]], marker: str, color: str, label: str, offset, none: str) -> None:
    """The measure per period as a line, each point with its count; `none` said when no period has one."""
    if not pts:
        _empty(ax, none)
        return
    ax.plot([x for x, _, _ in pts], [y for _, y, _ in pts], marker, color=color, label=label, **_LINE)
    for x, y, n in pts:
        ax.annotate(f"n={n}", (x, y), xytext=offset, **_COUNT)


def _brier_over_time(ax, cal: Calibration) -> None:
    rows = _periods(ax, cal, f"Brier score by {cal.period}", "mean Brier score (lower is better)")
    if rows is None:
        return
    ax.axhline(0.25, label="always 50% (0.25)", **_CHANCE)
    _trend(ax, [(x, f.brier, len(f.probability)) for x, f in rows if f.brier is not None], "o-", _BLUE,
           "mean Brier", (5, 4), "no forecast with a stated\nconfidence scored yet")
    _legend(ax, "upper right")


def _coverage_over_time(ax, cal: Calibration) -> None:
    rows = _periods(ax, cal, f"interval coverage by {cal.period}", "share of values inside their interval")
    if rows is None:
        return
    levels = sorted({lv for _, f in rows for lv, _ in f.intervals})
    for lv, ls in zip(levels, ["--", ":", "-."] * len(levels)):  # the rate each stated level promises
        ax.axhline(lv, ls=ls, label=f"nominal {lv * 100:g}%", **_NOMINAL)
    _trend(ax, [(x, f.covered_share, len(f.intervals)) for x, f in rows if f.covered_share is not None], "s-", _PURPLE,
           "observed coverage", (5, -12), "no point forecast\nscored yet")
    _legend(ax, "lower right")


def _legend(ax, loc: str) -> None:
    """The panel's legend, if anything in it is labelled (matplotlib warns on the reader's terminal otherwise)."""
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc=loc, **_LEGEND)
