"""Progress notes: due exactly once per configured fraction, across restarts, and rendered with a plot."""

from __future__ import annotations

import subprocess
import sys

from chronicle_helpers import clock, project_of, qknorm_story, sink, write_metrics  # noqa: F401  (clock is a fixture)
from conftest import ROOT
from hypothesis import given, settings
from hypothesis import strategies as st

from logbook.chronicle.build import day_path, render_chronicle
from logbook.chronicle.plots import progress_plot_path, write_progress_plot
from logbook.runs.milestones import due_milestones, emitted_milestones, milestone_step

FRACTIONS = [0.1, 0.25, 0.5, 0.75, 1.0]


def test_milestone_steps_fall_where_the_fractions_say():
    assert [milestone_step(f, 1000) for f in FRACTIONS] == [100, 250, 500, 750, 1000]
    assert milestone_step(0.3, 10) == 3  # 0.3 * 10 is 3.0000000000000004 in floating point
    assert milestone_step(0.001, 10) == 1
    assert due_milestones(FRACTIONS, 1000, 99, set()) == []
    assert due_milestones(FRACTIONS, 1000, 100, set()) == [0.1]
    assert due_milestones(FRACTIONS, 1000, 260, {0.1}) == [0.25]
    assert due_milestones(FRACTIONS, 1000, 760, {0.1}) == [0.25, 0.5, 0.75]  # all missed ones, oldest first


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 200), st.integers(0, 200)), max_size=6))
def test_each_milestone_fires_once_whatever_the_restarts(crashes):
    """Attempts die at arbitrary steps and resume from any checkpoint an attempt reached.

    A checkpoint may be past a milestone that was never recorded (the attempt
    died in between), so the trainer also asks right after resuming.
    """
    emitted: dict[float, int] = {}
    step, total, reached = 0, 200, 0
    plan = list(crashes)

    def check() -> None:
        for f in due_milestones(FRACTIONS, total, step, set(emitted)):
            assert f not in emitted
            emitted[f] = step

    while step < total:
        step += 1
        reached = max(reached, step)
        if plan and step >= plan[0][0]:
            _, resume = plan.pop(0)
            step = min(resume, reached)  # died before recording this step's milestone, if any
        check()
    assert sorted(emitted) == FRACTIONS
    assert all(emitted[f] >= milestone_step(f, total) for f in FRACTIONS)


def _train(project, clock, run, attempt, start, stop, total, day, *, skip_emit_at=None):
    """A stand-in for the trainer's loop: emits milestones the way the trainer is meant to."""
    s = sink(project, run, attempt)
    emitted = emitted_milestones(project.run_dir(run))
    for step in range(start + 1, stop + 1):
        for f in due_milestones(project.config.milestones, total, step, emitted):
            if step == skip_emit_at:
                return  # killed between reaching the milestone and recording it
            clock.set(f"{day}T{step // 60 % 24:02d}:{step % 60:02d}:00")
            s.emit("milestone", step=step, tokens=step * 1024, fraction=f, total_steps=total,
                   elapsed_s=step * 2.0, eta_s=(total - step) * 2.0, loss=2.5, tokens_per_s=512.0, goodput=0.9,
                   since_last={"restarts": 0, "rollbacks": 0, "changes": 0, "skips": 0})
            emitted.add(f)


def test_milestone_entries_appear_at_configured_fractions_across_restarts(logbook_repo, clock):
    cfg = logbook_repo / "logbook.yaml"
    cfg.write_text(cfg.read_text().replace("milestones: [0.1, 0.25, 0.5, 0.75, 1.0]", "milestones: [0.2, 0.5, 0.6, 1.0]"))
    project = project_of(logbook_repo)
    assert project.config.milestones == [0.2, 0.5, 0.6, 1.0]
    total = 1000
    _train(project, clock, "m", 1, 0, 370, total, "2026-12-05")  # 0.2 at step 200, dies at 370
    s2 = sink(project, "m", 2)
    clock.set("2026-12-05T06:00:00")
    s2.emit("restart", step=300, cause="signal", signal=9, prev_attempt=1, resumed_from_step=300, failed_at_step=370,
            steps_lost=70, seconds_lost=140.0, downtime_s=30.0)
    _train(project, clock, "m", 2, 300, 600, total, "2026-12-05", skip_emit_at=500)  # reaches 0.5, dies unrecorded
    s3 = sink(project, "m", 3)
    clock.set("2026-12-06T00:00:00")
    s3.emit("restart", step=650, cause="exception", exception_type="RuntimeError", prev_attempt=2,
            resumed_from_step=650, failed_at_step=655, steps_lost=5)
    _train(project, clock, "m", 3, 650, total, total, "2026-12-06")  # resumes past 0.5 and 0.6: both fire late
    assert emitted_milestones(project.run_dir("m")) == {0.2, 0.5, 0.6, 1.0}

    render_chronicle(project, make_plots=False)
    text = day_path(project, "2026-12-05").read_text() + day_path(project, "2026-12-06").read_text()
    heads = [line.split("</a>")[1] for line in text.splitlines() if "· milestone" in line]
    assert [h.split("· milestone ")[1] for h in heads] == ["20%", "50% (late)", "60% (late)", "100%"]
    assert "step 200 " in heads[0] and "step 651 " in heads[1] and "step 651 " in heads[2] and "step 1,000 " in heads[3]
    assert "Written late: this note belongs at step 500, but the run resumed past that step" in text
    assert "Written late: this note belongs at step 600" in text
    assert text.count("![Loss curve to step") == 4


def test_progress_plot_is_a_deterministic_png_with_marks(logbook_repo, clock):
    project = project_of(logbook_repo)
    qknorm_story(project, clock)
    write_metrics(project, "qknorm", 50_000, every=50)  # 1,001 points
    out = progress_plot_path(project, "qknorm", 0.5)
    assert out == project.entries / "assets" / "qknorm" / "progress-050.png"
    write_progress_plot(project, "qknorm", 50_000, out)
    first = out.read_bytes()
    assert first.startswith(b"\x89PNG\r\n\x1a\n") and len(first) > 10_000
    write_progress_plot(project, "qknorm", 50_000, out)
    assert out.read_bytes() == first  # no timestamps in the file: same logs, same bytes


def test_a_skipped_spike_is_marked_at_the_top_edge_and_does_not_flatten_the_curve(logbook_repo, clock):
    from logbook.chronicle.plots import progress_figure
    from logbook.eventlog.sink import EventSink, MetricsWriter

    project = project_of(logbook_repo)
    run_dir = project.run_dir("spiky")
    w = MetricsWriter(run_dir)
    for step in range(1, 41):
        spike = step == 30
        w.write({"step": step, "attempt": 1, "loss": 300.0 if spike else 3.0 - step / 100,
                 **({"skipped": True} if spike else {})})
    w.close()
    EventSink(run_dir, "spiky", 1).emit("divergence_detected", step=30, metric="loss", value=300.0, action="skip")
    ax = progress_figure(project, "spiky", 40).axes[0]
    lo, hi = ax.get_ylim()
    assert 2.0 < lo < 2.6 and 2.99 < hi < 3.2  # the curves' range, not 0..300
    train = next(line for line in ax.get_lines() if line.get_label() == "train loss")
    assert 30 not in list(train.get_xdata())  # the refused update is not part of the line
    (mark,) = [line for line in ax.get_lines() if line.get_label() == "spike (above the axis)"]
    assert list(mark.get_xdata()) == [30] and list(mark.get_ydata()) == [hi]
    assert [t.get_text() for t in ax.texts] == ["300"]


def test_render_draws_a_missing_milestone_plot(logbook_repo, clock):
    project = project_of(logbook_repo)
    qknorm_story(project, clock)
    write_metrics(project, "qknorm", 12_000)
    plot = progress_plot_path(project, "qknorm", 0.1)
    assert not plot.exists()
    res = render_chronicle(project)
    assert plot.is_file() and not res.warnings
    assert "![Loss curve to step 10,000](../../assets/qknorm/progress-010.png)" in day_path(project, "2026-11-30").read_text()


def test_a_milestone_plot_path_outside_the_assets_is_not_linked(logbook_repo, clock):
    project = project_of(logbook_repo)
    s = sink(project, "qknorm", 1)
    clock.set("2026-12-07T01:00:00")
    s.emit("milestone", step=10, fraction=0.1, total_steps=100, plot="../../../etc/passwd")
    render_chronicle(project, make_plots=False)
    text = day_path(project, "2026-12-07").read_text()
    assert "[image outside the logbook not shown: ../../../etc/passwd]" in text
    assert "](../../../etc" not in text


def test_plotting_never_imports_torch(logbook_repo, clock):
    project = project_of(logbook_repo)
    qknorm_story(project, clock)
    code = (
        "import sys\nfrom logbook.core.project import open_project\nfrom logbook.chronicle.plots import write_progress_plot\n"
        f"p = open_project({str(logbook_repo)!r})\n"
        f"write_progress_plot(p, 'qknorm', 100, {str(logbook_repo / 'p.png')!r})\n"
        "print('torch' in sys.modules, 'matplotlib.pyplot' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]
