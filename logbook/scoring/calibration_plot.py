"""The calibration figure: reliability diagram, interval coverage, and scores over time.

Three panels, drawn with matplotlib's object API on the Agg canvas (no
pyplot state, never torch), without timestamps in the PNG so the same
outcomes give the same bytes:

1. Reliability diagram: each bin's mean stated confidence against how often
   those predictions held, with 95% Wilson intervals, the diagonal of
   perfect calibration, and the count per bin; bins too small to read are
   drawn hollow.
2. Interval coverage: observed coverage at each nominal level against the
   level itself, with 95% Wilson intervals.
3. Over time: the mean Brier score and the interval coverage per period.
"""

from __future__ import annotations

import io
from pathlib import Path

from logbook.core.fsutil import atomic_write_bytes
from logbook.scoring.calibration import Calibration, reliability_bins

_BLUE, _PURPLE, _GREY = "#1f4e79", "#7f3f98", "#888888"


def write_calibration_plot(cal: Calibration, out_path: Path) -> Path:
    """Draw `cal` into `out_path` (PNG, atomic); returns the path."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 3.4), dpi=100)
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, 3)
    _reliability(axes[0], cal)
    _coverage(axes[1], cal)
    _over_time(axes[2], cal)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    atomic_write_bytes(Path(out_path), buf.getvalue())
    return Path(out_path)


def _square(ax, title: str, xlabel: str, ylabel: str) -> None:
    ax.plot([0, 1], [0, 1], ls="--", lw=0.8, color=_GREY)
    ax.set_xlim(0, 1)
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(title, fontsize=9)
    ax.set_xlabel(xlabel, fontsize=8)
    ax.set_ylabel(ylabel, fontsize=8)
    ax.tick_params(labelsize=7)
    ax.grid(True, alpha=0.3)


def _empty(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", fontsize=8, transform=ax.transAxes, color=_GREY)


def _reliability(ax, cal: Calibration) -> None:
    _square(ax, f"reliability ({len(cal.forecasts.probability)} forecasts)", "stated confidence", "observed frequency")
    bins = reliability_bins(cal.forecasts.probability)
    if not bins:
        _empty(ax, "no forecast with a stated\nconfidence scored yet")
        return
    for b in bins:
        face = "white" if b.few else _BLUE
        ax.errorbar([b.mean_forecast], [b.observed], yerr=[[b.observed - b.ci[0]], [b.ci[1] - b.observed]],
                    fmt="o", ms=5, color=_BLUE, mfc=face, lw=0.8, capsize=2)
        ax.annotate(f"n={b.n}", (b.mean_forecast, b.observed), xytext=(4, 4), textcoords="offset points", fontsize=6)


def _coverage(ax, cal: Calibration) -> None:
    rows = cal.forecasts.coverage()
    _square(ax, f"interval coverage ({sum(r['n'] for r in rows)} intervals)", "nominal level", "observed coverage")
    if not rows:
        _empty(ax, "no point forecast\nscored yet")
        return
    for r in rows:
        face = "white" if r["few"] else _PURPLE
        ax.errorbar([r["level"]], [r["rate"]], yerr=[[r["rate"] - r["ci"][0]], [r["ci"][1] - r["rate"]]],
                    fmt="s", ms=5, color=_PURPLE, mfc=face, lw=0.8, capsize=2)
        ax.annotate(f"{r['covered']}/{r['n']}", (r["level"], r["rate"]), xytext=(4, -9), textcoords="offset points",
                    fontsize=6)


def _over_time(ax, cal: Calibration) -> None:
    periods = cal.forecasts_by.get("period", {})
    ax.set_title(f"by {cal.period}", fontsize=9)
    ax.tick_params(labelsize=7)
    ax.grid(True, alpha=0.3)
    ax.set_ylim(-0.02, 1.02)
    if not periods:
        _empty(ax, "nothing scored yet")
        return
    keys = list(periods)
    xs = list(range(len(keys)))
    brier = [(x, sum((p - o) ** 2 for p, o in periods[k].probability) / len(periods[k].probability))
             for x, k in zip(xs, keys) if periods[k].probability]
    cover = [(x, sum(c for _, c in periods[k].intervals) / len(periods[k].intervals))
             for x, k in zip(xs, keys) if periods[k].intervals]
    if brier:
        ax.plot([x for x, _ in brier], [y for _, y in brier], "o-", ms=4, lw=0.9, color=_BLUE, label="mean Brier")
    if cover:
        ax.plot([x for x, _ in cover], [y for _, y in cover], "s-", ms=4, lw=0.9, color=_PURPLE, label="coverage")
    ax.set_xticks(xs)
    ax.set_xticklabels(keys, rotation=30, ha="right", fontsize=7)
    ax.legend(fontsize=7, loc="best")
