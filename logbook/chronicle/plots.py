"""Loss-curve plots for progress notes, with restarts, rollbacks and changes marked.

Drawn by the renderer when a note's plot is missing (the launcher's watcher
renders as a run goes; never the training process). It uses matplotlib's
object API with the Agg canvas (no pyplot global state, no GUI backend)
imported lazily, never torch. The PNG carries no timestamp or version metadata, so the same logs give
the same bytes.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from logbook.core.fsutil import atomic_write_bytes
from logbook.core.project import Project
from logbook.core.textfmt import fmt_int, is_number
from logbook.eventlog.chain import iter_records
from logbook.eventlog.sink import read_metrics
from logbook.scoring.forecasts import run_curves
from logbook.eventlog.kinds import counted_as, has_flag

_MAX_POINTS = 4000  # beyond this, steps are bucketed into a min-max band plus a mean line


def progress_plot_path(project: Project, run_id: str, fraction: float) -> Path:
    """Where the progress plot of `fraction` of `run_id` lives: entries/assets/<run>/progress-050.png."""
    pct = round(float(fraction) * 100, 2)
    name = f"{int(pct):03d}" if float(pct).is_integer() else f"{pct:06.2f}".replace(".", "_")
    return project.assets_dir / run_id / f"progress-{name}.png"


def plot_ref(project: Project, path: Path) -> str:
    """The `plot` value for a milestone payload: the path relative to the entries folder."""
    return Path(path).resolve().relative_to(project.entries.resolve()).as_posix()


@dataclass
class _Marks:
    restarts: list[tuple[int, str]] = field(default_factory=list)
    rollbacks: list[tuple[int, int]] = field(default_factory=list)
    changes: list[tuple[int, str]] = field(default_factory=list)
    spikes: list[tuple[int, float]] = field(default_factory=list)


def _marks(events_path: Path, upto_step: int, upto_seq: int | None) -> _Marks:
    m = _Marks()
    for rec in iter_records(events_path):
        if upto_seq is not None and isinstance(rec.get("seq"), int) and rec["seq"] > upto_seq:
            break
        step, counts = rec.get("step"), counted_as(rec)
        data = rec.get("data") if isinstance(rec.get("data"), dict) else {}
        if not isinstance(step, int) or step > upto_step:
            continue
        if counts == "restarts":
            at = data.get("resumed_from_step")
            m.restarts.append((at if isinstance(at, int) else step, f"attempt {rec.get('attempt')}"))
        elif counts == "rollbacks" and isinstance(data.get("to_step"), int):
            frm = data.get("from_step") if isinstance(data.get("from_step"), int) else step
            m.rollbacks.append((data["to_step"], frm))
        elif has_flag(rec, setting_change=True):
            m.changes.append((step, str(data.get("key") or "lr")))
        elif counts == "spikes" and is_number(data.get("value")) and data.get("metric", "loss") == "loss":
            m.spikes.append((step, float(data["value"])))
    return m


def _curve(rows: list[dict[str, Any]], upto_step: int, max_attempt: int | None) -> tuple[list[int], list[float], list[tuple[int, float]]]:
    """Loss per step (later rows win: a replay after a rollback replaces the first pass).

    A step whose update the guard skipped is left out of the line: its spike is
    drawn as a spike mark, and the line shows the run the model went through.
    """
    loss: dict[int, float] = {}
    val: dict[int, float] = {}
    for r in rows:
        s = r.get("step")
        if not isinstance(s, int) or s > upto_step:
            continue
        if max_attempt is not None and isinstance(r.get("attempt"), int) and r["attempt"] > max_attempt:
            continue
        if r.get("skipped") is True:
            loss.pop(s, None)
        elif is_number(r.get("loss")):
            loss[s] = float(r["loss"])
        if is_number(r.get("val_loss")):
            val[s] = float(r["val_loss"])
    steps = sorted(loss)
    return steps, [loss[s] for s in steps], sorted(val.items())


def write_progress_plot(project: Project, run_id: str, upto_step: int, out_path: Path, *,
                        upto_seq: int | None = None, max_attempt: int | None = None,
                        title: str | None = None) -> Path:
    """Draw the loss curve of `run_id` up to `upto_step` into `out_path` (PNG, atomic).

    Restarts (dashed red, at the step resumed from), rollbacks (orange band from
    the step rolled back to the step it happened at), hyperparameter and
    learning-rate changes (dotted green) and loss spikes (crosses) are marked.
    `upto_seq` and `max_attempt` cut the events and metrics at the moment of the
    milestone when a plot is redrawn later. Returns `out_path`.
    """
    fig = progress_figure(project, run_id, upto_step, upto_seq=upto_seq, max_attempt=max_attempt, title=title)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    atomic_write_bytes(Path(out_path), buf.getvalue())
    return Path(out_path)


def progress_figure(project: Project, run_id: str, upto_step: int, *, upto_seq: int | None = None,
                    max_attempt: int | None = None, title: str | None = None):
    """The matplotlib Figure `write_progress_plot` saves (one Axes)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure


    run_dir = project.run_dir(run_id)
    steps, losses, val = _curve(read_metrics(run_dir), upto_step, max_attempt)
    marks = _marks(run_dir / "events.jsonl", upto_step, upto_seq)
    forecasts = run_curves(project, run_id)

    fig = Figure(figsize=(8, 3.4), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    _draw_loss(ax, steps, losses, val)
    _draw_forecasts(ax, forecasts)
    band = [y for c in forecasts for _, _, lo, hi in c.points for y in (lo, hi)]
    _draw_marks(ax, marks, _loss_range(losses + band, val))
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.set_title(title or f"run {run_id}: loss to step {fmt_int(upto_step)}", fontsize=10)
    ax.grid(True, alpha=0.3)
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    # Whole steps only: on a short run the default locator puts ticks at 0.5 steps,
    # and an integer label on each repeats the same number.
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _pos: f"{int(round(x)):,}"))
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, loc="best", framealpha=0.85)
    fig.tight_layout()
    return fig


def _draw_loss(ax, steps: list[int], losses: list[float], val: list[tuple[int, float]]) -> None:
    if not steps:
        ax.text(0.5, 0.5, "no metrics recorded yet", ha="center", va="center", transform=ax.transAxes)
        return
    if len(steps) <= _MAX_POINTS:
        ax.plot(steps, losses, lw=0.8, color="#1f4e79", label="train loss")
    else:
        # Bucket into a band so a one-step spike stays visible at any length.
        n = _MAX_POINTS // 2
        size = -(-len(steps) // n)
        xs, lo, hi, mean = [], [], [], []
        for i in range(0, len(steps), size):
            chunk = losses[i : i + size]
            xs.append(steps[i])
            lo.append(min(chunk))
            hi.append(max(chunk))
            mean.append(sum(chunk) / len(chunk))
        ax.fill_between(xs, lo, hi, color="#1f4e79", alpha=0.25, lw=0, label="train loss (min-max)")
        ax.plot(xs, mean, lw=0.8, color="#1f4e79", label="train loss (mean)")
    if val:
        ax.plot([s for s, _ in val], [v for _, v in val], "o-", ms=3, lw=0.8, color="#7f3f98", label="val loss")


_FORECAST_COLOURS = {"loss": "#1f4e79", "val_loss": "#7f3f98"}


def _draw_forecasts(ax, curves) -> None:
    """Each forecast as a dashed line through its points with its interval as a band (late ones in grey)."""
    for c in curves:
        colour = "#999999" if c.late else _FORECAST_COLOURS.get(c.metric, "#555555")
        xs = [s for s, *_ in c.points]
        ax.fill_between(xs, [lo for *_, lo, _hi in c.points], [hi for *_, hi in c.points], color=colour,
                        alpha=0.13, lw=0, step=None)
        label = f"{c.label}, {c.level * 100:g}% band" + (" (late)" if c.late else "")
        ys = [f for _, f, _, _ in c.points]
        # Error bars show each point's interval; a lone point forecast has no band to fill.
        ax.errorbar(xs, ys, yerr=[[f - lo for _, f, lo, _ in c.points], [hi - f for _, f, _, hi in c.points]],
                    fmt="--D", ms=3.5, lw=1.0, elinewidth=0.8, capsize=3, color=colour, label=label)


def _loss_range(losses: list[float], val: list[tuple[int, float]]) -> tuple[float, float] | None:
    """The y-range of the curves, padded; None when there is nothing to draw."""
    ys = losses + [v for _, v in val]
    if not ys:
        return None
    lo, hi = min(ys), max(ys)
    pad = (hi - lo) * 0.08 or abs(hi) * 0.05 or 1.0
    return lo - pad, hi + pad


def _draw_marks(ax, m: _Marks, yrange: tuple[float, float] | None) -> None:
    for i, (s, _) in enumerate(m.restarts):
        ax.axvline(s, color="#c0392b", ls="--", lw=0.9, label="restart" if i == 0 else None)
    for i, (to, frm) in enumerate(m.rollbacks):
        ax.axvspan(to, max(frm, to + 1), color="#e67e22", alpha=0.25, label="rollback" if i == 0 else None)
    for i, (s, _) in enumerate(m.changes):
        ax.axvline(s, color="#27ae60", ls=":", lw=1.1, label="change" if i == 0 else None)
    if not m.spikes:
        return
    if yrange is None:
        ax.plot([s for s, _ in m.spikes], [v for _, v in m.spikes], "x", color="#c0392b", ms=6, label="spike")
        return
    # A spike hundreds of times the loss would flatten the curve to a line at zero: the axis keeps the curves'
    # range, and a spike above it is drawn at the top edge with its value written beside it.
    ax.set_ylim(*yrange)
    top = yrange[1]
    inside = [(s, v) for s, v in m.spikes if v <= top]
    above = [(s, v) for s, v in m.spikes if v > top]
    if inside:
        ax.plot([s for s, _ in inside], [v for _, v in inside], "x", color="#c0392b", ms=6, label="spike")
    if above:
        ax.plot([s for s, _ in above], [top] * len(above), "^", color="#c0392b", ms=6, clip_on=False,
                label="spike (above the axis)")
        for s, v in above:
            ax.annotate(f"{v:.3g}", (s, top), xytext=(4, -10), textcoords="offset points", fontsize=7,
                        color="#c0392b")
