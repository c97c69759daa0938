"""Forecast curves in progress notes: the band on the plot, and how far off the run is right now.

The story run's loss is 5.0 - 0.02 s in attempt 1 (4.0 at step 50) and its
validation loss 4.5 - 0.01 s (4.0 at step 50).
"""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from scoring_helpers import make_prereg, project_of, story_clock, story_run  # noqa: F401

from logbook.chronicle.build import day_path, render_chronicle
from logbook.chronicle.plots import progress_figure
from logbook.promises.predictions import parse_prediction
from logbook.promises.prereg import load_prereg
from logbook.eventlog.sink import EventSink
from logbook.runs.facts import load_facts
from logbook.scoring.forecasts import Curve, curves, forecast_standings, run_curves

BEFORE = datetime(2026, 11, 30, 7, 0, tzinfo=timezone.utc)
TRAJECTORY = "val_loss ≈ {25%: 4.3 [4.1, 4.5], 75%: 3.6 [3.4, 3.8], final: 3.3 [3.1, 3.5]} 80%"


def test_a_curve_interpolates_its_forecast_and_band_linearly_between_points():
    c = Curve("val_loss", "forecast val_loss", 0.8, ((25, 4.3, 4.1, 4.5), (75, 3.6, 3.4, 3.8)))
    assert c.at(50) == (pytest.approx(3.95), pytest.approx(3.75), pytest.approx(4.15))
    assert c.at(25) == (4.3, 4.1, 4.5) and c.at(24) is None and c.at(76) is None


def test_fractions_and_final_become_steps_of_the_run():
    points = [(p, "original") for p in parse_prediction(TRAJECTORY).points]
    (c,) = curves(points, 100)
    assert [s for s, *_ in c.points] == [25, 75, 100] and c.level == 0.8 and not c.late
    assert curves(points, None) == []  # without the run's length, fractions have no step
    steps = [(parse_prediction("loss@step:40 ≈ 4 [3.9, 4.1] 80%"), "amend-1")]
    (late,) = curves(steps, None, {"amend-1": "made after the run started"})
    assert late.points == ((40, 4, 3.9, 4.1),) and late.late and late.label == "forecast loss (amend-1)"


def test_a_progress_note_says_how_far_off_the_forecast_the_run_is_and_draws_the_band(logbook_repo, story_clock):
    project = project_of(logbook_repo)
    pid = make_prereg(project, [TRAJECTORY, "loss@final ≈ 3 [2.8, 3.2] 80%"], now=BEFORE)
    story_run(project, story_clock, "story", pid)
    facts = load_facts(project, "story")
    got = {f["metric"]: f for f in forecast_standings(load_prereg(project, pid), facts, 50)}
    v = got["val_loss"]  # 4.0 at step 50; forecast halfway from 4.3 to 3.6 = 3.95, band [3.75, 4.15]
    assert (v["step"], v["value"], v["forecast"], v["lo"], v["hi"]) == (
        50, pytest.approx(4.0), pytest.approx(3.95), pytest.approx(3.75), pytest.approx(4.15))
    assert v["off"] == pytest.approx(0.05) and v["rel_off"] == pytest.approx(0.05 / 4.0) and v["inside"]
    assert got["loss"]["forecast"] is None and got["loss"]["next_point"] == {"step": 100, "forecast": 3}

    EventSink(project.run_dir("story"), "story", 2).emit(
        "milestone", step=50, fraction=0.5, total_steps=100, loss=4.0,
        forecasts=forecast_standings(load_prereg(project, pid), facts, 50))
    render_chronicle(project, make_plots=False)
    text = day_path(project, "2026-11-30").read_text("utf-8")
    assert ("- Forecast of `val_loss`: 4 at step 50, 0.05 (1.2%) above the forecast 3.95 there; "
            "inside the 80% band [3.75, 4.15].") in text, text
    assert "- Forecast of `loss`: 4 at step 50; the forecast starts at step 100 (3)." in text

    fig = progress_figure(project, "story", 100)
    labels = fig.axes[0].get_legend_handles_labels()[1]
    assert "forecast val_loss, 80% band" in labels and "forecast loss, 80% band" in labels
    assert len(run_curves(project, "story")) == 2


def test_a_note_the_trainer_left_unscored_is_scored_by_the_chronicle_as_the_run_stood_then(logbook_repo, story_clock):
    """The trainer emits only what the loop knows; the chronicle works out the rest from the records up to the note."""
    from scoring_helpers import write_record

    from logbook.eventlog.sink import MetricsWriter
    from logbook.scoring.progress import facts_at, note_scores

    project = project_of(logbook_repo)
    pid = make_prereg(project, [TRAJECTORY, "loss@final < 4", "restarts@final == 0"], now=BEFORE)
    write_record(project, "later", pid, status="running")
    s, m = EventSink(project.run_dir("later"), "later", 1), MetricsWriter(project.run_dir("later"), flush_every=1000)
    s.emit("run_started", step=0, tokens=0, total_steps=100, world_size=1, prereg_id=pid)
    for step in range(1, 61):  # the loss reaches 4.0 at step 50 and 3.8 at step 60
        m.write({"step": step, "attempt": 1, "loss": 5.0 - 0.02 * step, "time": story_clock.advance(1.0)})
        if step == 30:
            s.emit("step_skipped", step=30, reason="loss spike", metric="loss", plan={"rule": None, "follows": False})
        if step == 50:
            m.write({"step": 50, "attempt": 1, "val_loss": 4.0, "time": story_clock.t})
            m.flush()
            note = s.emit("milestone", step=50, fraction=0.5, total_steps=100, loss=4.0, tokens_per_s=512.0)
    m.close()
    s.emit("step_skipped", step=55, reason="loss spike", metric="loss", plan={"rule": None, "follows": False})

    then = facts_at(load_facts(project, "later"), note)
    assert max(then.series["loss"]) == then.last_step == 50 and then.events[-1]["seq"] == note["seq"]
    got = note_scores(load_facts(project, "later"), note, load_prereg(project, pid))
    assert got["since_last"] == {"restarts": 0, "rollbacks": 0, "changes": 0, "skips": 1}  # not the skip at 55
    status = {p["expr"]: (p["status"], p["value"]) for p in got["predictions"]}
    assert status["loss@final < 4"] == ("at risk", 4.0)  # 4.0 then, though 3.8 now
    assert status["restarts@final == 0"] == ("on track", 0.0)
    assert 0 < got["goodput"] <= 1

    render_chronicle(project, make_plots=False)
    text = day_path(project, "2026-11-30").read_text("utf-8")
    assert "Since the last progress note: 1 skipped update." in text
    assert "| `loss@final < 4` | at risk | 4 |" in text
    assert ("- Forecast of `val_loss`: 4 at step 50, 0.05 (1.2%) above the forecast 3.95 there; "
            "inside the 80% band [3.75, 4.15].") in text, text
