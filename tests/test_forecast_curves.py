"""Forecast curves are what the milestone plot draws and what a progress note compares against: their points,
the band between them, which forecasts make one, and which came late. Pinned on curves and runs built here."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from scoring_helpers import T0, make_prereg, project_of, story_clock, story_run  # noqa: F401  (story_clock: a fixture)

from logbook.proof.amend import amend_prereg
from logbook.promises.predictions import parse_prediction
from logbook.promises.prereg import load_prereg
from logbook.runs.facts import RunFacts, load_facts
from logbook.scoring.forecasts import Curve, curves, forecast_standings, run_curves
from logbook.scoring.outcome import value_at

THREE = Curve("loss", "forecast loss", 0.8, ((10, 3.0, 2.8, 3.2), (20, 2.0, 1.8, 2.4), (40, 1.0, 0.6, 1.2)))


def test_a_curve_is_its_points_at_their_steps_linear_between_them_and_nothing_outside():
    assert THREE.at(9) is None and THREE.at(41) is None
    assert THREE.at(10) == (3.0, 2.8, 3.2) and THREE.at(20) == (2.0, 1.8, 2.4) and THREE.at(40) == pytest.approx((1.0, 0.6, 1.2))
    assert THREE.at(15) == pytest.approx((2.5, 2.3, 2.8))
    assert THREE.at(30) == pytest.approx((1.5, 1.2, 1.8))


def test_a_curve_of_one_point_is_that_point_and_two_points_at_one_step_give_the_first():
    one = Curve("loss", "forecast loss", 0.8, ((10, 3.0, 2.8, 3.2),))
    assert one.at(10) == (3.0, 2.8, 3.2) and one.at(11) is None
    twice = Curve("loss", "forecast loss", 0.8, ((10, 3.0, 2.8, 3.2), (10, 3.5, 3.0, 4.0)))
    assert twice.at(10) == (3.0, 2.8, 3.2)


def _p(text: str):
    return parse_prediction(text)


def test_only_point_forecasts_of_the_plotted_metrics_make_curves_and_one_without_a_step_is_left_out():
    forecasts = [(_p("loss@50% ≈ 3 [2.8, 3.2] 80%"), "original"),          # no total steps: no step to draw at
                 (_p("val_loss@step:10 ≈ 3 [2.8, 3.2] 80%"), "original"),
                 (_p("val_loss@step:30 ≈ 2.5 [2.2, 2.8] 80%"), "original"),  # its own curve: a lone point
                 (_p("loss@final < 3"), "original"),                        # no forecast: a threshold
                 (_p("tokens_per_s@final ≈ 900 [800, 1000] 80%"), "original"),  # not a plotted metric
                 (_p("val_loss@step:20 ≈ 2.7 [2.5, 2.9] 90%"), "amend-1")]
    got = curves(forecasts, None, {"amend-1": "made after the run started"})
    assert [(c.metric, c.label, c.level, c.points, c.late) for c in got] == [
        ("val_loss", "forecast val_loss", 0.8, ((10, 3.0, 2.8, 3.2),), False),
        ("val_loss", "forecast val_loss", 0.8, ((30, 2.5, 2.2, 2.8),), False),
        ("val_loss", "forecast val_loss (amend-1)", 0.9, ((20, 2.7, 2.5, 2.9),), True)]
    assert [c.metric for c in curves(forecasts, 100, metrics=("loss",))] == ["loss"]


def _story_with_forecasts(logbook_repo, story_clock):
    project = project_of(logbook_repo)
    pid = make_prereg(project, ["val_loss@final ≈ 3 [2.8, 3.2] 80%", "loss@50% ≈ 4 [3.8, 4.2] 80%"])
    # Its clock says a minute after the run's first event: late by its time alone (it says nothing was seen).
    amend_prereg(project, pid, reason="tighter, written during the run", seen="nothing",
                 predictions=["val_loss@final ≈ 2.6 [2.5, 2.7] 80%"],
                 now=datetime.fromtimestamp(T0 + 60, timezone.utc))
    story_run(project, story_clock, "story", pid)
    return project, pid


def test_a_runs_curves_come_from_its_preregistration_with_a_forecast_made_after_its_start_marked_late(
        logbook_repo, story_clock):
    project, _ = _story_with_forecasts(logbook_repo, story_clock)
    got = run_curves(project, "story")
    assert [(c.label, c.points[0][0], c.late) for c in got] == [
        ("forecast val_loss", 100, False), ("forecast loss", 50, False), ("forecast val_loss (amend-1)", 100, True)]
    assert [c.label for c in run_curves(project, "story", ("val_loss",))] == [
        "forecast val_loss", "forecast val_loss (amend-1)"]


def test_an_exploratory_run_has_no_curves(logbook_repo, story_clock):
    project = project_of(logbook_repo)
    story_run(project, story_clock, "free", None)
    assert run_curves(project, "free") == []


def test_a_progress_note_marks_the_standing_against_a_late_forecast_as_late(logbook_repo, story_clock):
    project, pid = _story_with_forecasts(logbook_repo, story_clock)
    facts = load_facts(project, "story")
    got = forecast_standings(load_prereg(project, pid), facts, 100)
    assert [(s["label"], s["late"], s["step"], s["forecast"]) for s in got] == [
        ("forecast val_loss", False, 100, 3.0), ("forecast loss", False, 100, None),  # past its only point, at 50
        ("forecast val_loss (amend-1)", True, 100, 2.6)]


def test_a_count_short_of_its_point_says_where_the_run_stopped_and_why():
    p = _p("restarts@step:60 <= 1")
    for state, words in (("running", "not reached yet: the run is running at step 40, short of step 60"),
                         ("preempted", "not reached yet: the run is preempted at step 40, short of step 60"),
                         ("failed", "the run failed at step 40, before step 60")):
        facts = RunFacts(run="r1", last_step=40, state=state)
        from logbook.scoring.outcome import measure

        m = measure(p, facts)
        assert (m.missing, m.partial, m.value) == (words, True, 0.0)
    m = measure(_p("loss@final < 3"), RunFacts(run="r1", state="failed"))
    assert m.missing == "the run failed at step 0, before its last step" and m.value is None


def test_throughput_is_the_median_over_a_window_of_at_least_one_step_either_side():
    facts = RunFacts(run="r1", series={"tokens_per_s": {0: 50.0, 1: 100.0, 2: 400.0, 3: 200.0, 5: 900.0}},
                     total_steps=10, last_step=10)
    m = value_at("tokens_per_s", facts, 2)  # 5% of 10 steps rounds to none: one step either side
    assert (m.value, m.rule) == (200.0, "median of 3 logged values over steps 1–3 (step 2 ± 1, 5% of the run either side)")
    m = value_at("tokens_per_s", facts, 1)
    assert m.rule.startswith("median of 3 logged values over steps 0–2")
    m = value_at("tokens_per_s", facts, 8)
    assert m.value is None and m.missing == "not measured: no tokens_per_s was logged over steps 7–9"


def test_a_standing_names_the_next_point_short_of_a_curve_none_past_it_and_the_band_at_its_edges():
    from logbook.scoring.forecasts import standing_against

    facts = RunFacts(run="r1", series={"loss": {5: 3.5, 10: 3.2, 20: 1.8, 30: 0.0, 45: 0.9}})
    short = standing_against(THREE, facts, 5)
    assert short == {"metric": "loss", "step": 5, "value": 3.5, "level": 0.8, "late": False, "forecast": None,
                     "next_point": {"step": 10, "forecast": 3.0}}
    assert standing_against(THREE, facts, 45)["next_point"] is None
    at_lo, at_hi = standing_against(THREE, facts, 20), standing_against(THREE, facts, 10)
    assert (at_lo["value"], at_lo["lo"], at_lo["inside"]) == (1.8, 1.8, True)
    assert (at_hi["value"], at_hi["hi"], at_hi["inside"]) == (3.2, 3.2, True)
    assert at_hi["off"] == pytest.approx(0.2) and at_hi["rel_off"] == pytest.approx(0.2 / 3.2)
    zero = standing_against(THREE, facts, 30)
    assert (zero["value"], zero["inside"], zero["rel_off"]) == (0.0, False, None)
    assert standing_against(THREE, RunFacts(run="r1"), 10) is None


def test_a_note_stands_against_every_point_forecast_of_its_preregistration_whatever_the_metric(
        logbook_repo, story_clock):
    project = project_of(logbook_repo)
    pid = make_prereg(project, ["tokens_per_s@final ≈ 1000 [900, 1100] 80%"])
    story_run(project, story_clock, "story", pid)
    got = forecast_standings(load_prereg(project, pid), load_facts(project, "story"), 100)
    assert [(s["metric"], s["forecast"]) for s in got] == [("tokens_per_s", 1000.0)]


def _run_with_start(project, run, **data):
    """A log as another trainer might write it: straight into the chain, past the sink's schema."""
    from logbook.eventlog.chain import ChainedLog

    log = ChainedLog(project.run_dir(run) / "events.jsonl")
    if data:
        log.append({"kind": "run_started", "step": 0, "run": run, "attempt": 1, "data": data})
    log.append({"kind": "note", "step": 0, "run": run, "attempt": 1, "data": {"text": "hello"}})


def test_a_run_without_a_start_has_no_curves_and_one_without_a_whole_total_has_no_fraction_points(logbook_repo):
    project = project_of(logbook_repo)
    pid = make_prereg(project, ["val_loss@50% ≈ 3 [2.8, 3.2] 80%", "val_loss@step:40 ≈ 2.5 [2.3, 2.7] 80%"])
    _run_with_start(project, "no-start")
    assert run_curves(project, "no-start") == []
    _run_with_start(project, "odd-total", prereg_id=pid, total_steps="100")
    assert [c.points for c in run_curves(project, "odd-total")] == [((40, 2.5, 2.3, 2.7),)]
    _run_with_start(project, "whole-total", prereg_id=pid, total_steps=100)
    assert [c.points for c in run_curves(project, "whole-total")] == [((50, 3.0, 2.8, 3.2),), ((40, 2.5, 2.3, 2.7),)]
