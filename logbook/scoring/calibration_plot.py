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
"""

from __future__ import annotations

import io
from pathlib import Path

from logbook.core.fsutil import atomic_write_bytes
from logbook.scoring.calibration import Calibration, reliability_bins

_BLUE, _PURPLE, _GREY = "#1f4e79", "#7f3f98", "#888888"
_TOP = 1.12
"""Room above 1.0 on every probability axis, so a count at the top sits below the panel's title."""


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


def _square(ax, title: str, xlabel: str, ylabel: str) -> None:
    ax.plot([0, 1], [0, 1], ls="--", lw=0.8, color=_GREY)
    ax.set_xlim(0, 1)
    ax.set_ylim(-0.02, _TOP)
    ax.set_title(title, fontsize=11)
    ax.set_xlabel(xlabel, fontsize=10)
    ax.set_ylabel(ylabel, fontsize=10)
    ax.tick_params(labelsize=9)
    ax.grid(True, alpha=0.3)


def _empty(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", fontsize=10, transform=ax.transAxes, color=_GREY)


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
        ax.annotate(f"n={b.n}", (b.mean_forecast, b.observed),  # inside the panel, clear of the title
                    xytext=(-26 if b.mean_forecast > 0.9 else 5, -12 if b.observed > 0.9 else 4),
                    textcoords="offset points", fontsize=8)


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
        ax.annotate(f"{r['covered']}/{r['n']}", (r["level"], r["rate"]), xytext=(5, -12), textcoords="offset points",
                    fontsize=8)


def _periods(ax, cal: Calibration, title: str, ylabel: str):
    """The per-period panel's frame; the periods and their forecasts, or None when nothing is scored yet."""
    periods = cal.forecasts_by.get("period", {})
    ax.set_title(title, fontsize=11)
    ax.set_ylabel(ylabel, fontsize=10)
    ax.set_xlabel(cal.period, fontsize=10)
    ax.tick_params(labelsize=9)
    ax.grid(True, alpha=0.3)
    ax.set_ylim(-0.02, _TOP)
    if not periods:
        _empty(ax, "nothing scored yet")
        return None
    keys = list(periods)
    ax.set_xticks(range(len(keys)))
    ax.set_xticklabels(keys, rotation=30, ha="right", fontsize=9)
    ax.set_xlim(-0.5, len(keys) - 0.5)
    return [(x, periods[k]) for x, k in enumerate(keys)]


def _brier_over_time(ax, cal: Calibration) -> None:
    rows = _periods(ax, cal, f"Brier score by {cal.period}", "mean Brier score (lower is better)")
    if rows is None:
        return
    ax.axhline(0.25, ls="--", lw=0.9, color=_GREY, label="always 50% (0.25)")
    pts = [(x, sum((p - o) ** 2 for p, o in f.probability) / len(f.probability), len(f.probability))
           for x, f in rows if f.probability]
    if not pts:
        _empty(ax, "no forecast with a stated\nconfidence scored yet")
    else:
        ax.plot([x for x, _, _ in pts], [y for _, y, _ in pts], "o-", ms=5, lw=1.2, color=_BLUE, label="mean Brier")
        for x, y, n in pts:
            ax.annotate(f"n={n}", (x, y), xytext=(5, 4), textcoords="offset points", fontsize=8)
    ax.legend(fontsize=8, loc="upper right")


def _coverage_over_time(ax, cal: Calibration) -> None:
    rows = _periods(ax, cal, f"interval coverage by {cal.period}", "share of values inside their interval")
    if rows is None:
        return
    levels = sorted({lv for _, f in rows for lv, _ in f.intervals})
    for lv, ls in zip(levels, ["--", ":", "-."] * len(levels)):  # the rate each stated level promises
        ax.axhline(lv, ls=ls, lw=1.0, color=_PURPLE, alpha=0.7, label=f"nominal {lv * 100:g}%")
    pts = [(x, sum(c for _, c in f.intervals) / len(f.intervals), len(f.intervals)) for x, f in rows if f.intervals]
    if not pts:
        _empty(ax, "no point forecast\nscored yet")
    else:
        ax.plot([x for x, _, _ in pts], [y for _, y, _ in pts], "s-", ms=5, lw=1.2, color=_PURPLE,
                label="observed coverage")
        for x, y, n in pts:
            ax.annotate(f"n={n}", (x, y), xytext=(5, -12), textcoords="offset points", fontsize=8)
    ax.legend(fontsize=8, loc="lower right")
