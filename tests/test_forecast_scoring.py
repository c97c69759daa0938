"""Brier and log scores, point-forecast errors, interval scores and late forecasts, against hand-computed values.

The story run (tests/scoring_helpers.py) ends at step 100 with loss 3.0 and
val_loss 2.5; its loss is 4.5 at step 25 and 3.25 at step 75.
"""

from __future__ import annotations

import json
import math
from datetime import datetime, timezone

import pytest
from scoring_helpers import make_prereg, project_of, story_clock, story_run  # noqa: F401

from logbook.promises.predictions import parse_prediction
from logbook.proof.scorecard import evaluate, record_outcome
from logbook.scoring.rules import brier, forecast_scores, interval_score, log_score, point_errors

BEFORE_RUN = datetime(2026, 11, 30, 7, 0, tzinfo=timezone.utc)  # the story run starts at 08:00


def test_brier_is_the_squared_gap_between_the_stated_probability_and_what_happened():
    assert brier(0.8, True) == pytest.approx(0.04)  # (0.8 - 1)^2
    assert brier(0.8, False) == pytest.approx(0.64)  # (0.8 - 0)^2
    assert brier(0.5, True) == brier(0.5, False) == 0.25


def test_log_score_is_the_log_of_the_probability_given_to_what_happened():
    assert log_score(0.8, True) == pytest.approx(-0.2231435513)  # ln 0.8
    assert log_score(0.7, False) == pytest.approx(-1.2039728043)  # ln 0.3
    for p, held in ((1.0, False), (1.0, True), (0.0, False), (0.0, True), (1.5, True)):
        with pytest.raises(ValueError, match="strictly between 0 and 1"):
            log_score(p, held)  # the grammar refuses 0% and 100%, so this never comes from a preregistration


def test_interval_score_charges_the_width_plus_misses_scaled_by_two_over_alpha():
    assert interval_score(2.4, 2.8, 0.8, 2.5) == pytest.approx(0.4)  # inside: the width
    assert interval_score(3.1, 3.3, 0.5, 3.0) == pytest.approx(0.2 + 4 * 0.1)  # alpha 0.5: 2/alpha = 4
    assert interval_score(3.1, 3.3, 0.9, 3.5) == pytest.approx(0.2 + 20 * 0.2)  # alpha 0.1: 2/alpha = 20


def test_point_errors_are_signed_and_relative_to_what_happened():
    assert point_errors(2.252, 2.234) == (pytest.approx(-0.018), pytest.approx(-0.018 / 2.234))
    assert point_errors(1, 0) == (-1.0, None)


def test_a_plain_threshold_has_no_forecast_scores_and_an_undecided_one_no_probability_scores():
    assert forecast_scores(parse_prediction("loss@final < 4"), "confirmed", 3.0) is None
    assert forecast_scores(parse_prediction("loss@final < 4 (80%)"), "inconclusive", None) == {"kind": "probability",
                                                                                            "p": 0.8}


def test_a_point_forecasts_interval_takes_both_its_ends_and_states_its_width():
    p = parse_prediction("val_loss@final ≈ 3.4 [3.2, 3.6] 80%")
    stated = {"kind": "point", "value": 3.4, "lo": 3.2, "hi": 3.6, "level": 0.8, "width": pytest.approx(0.4)}
    assert forecast_scores(p, "inconclusive", None) == stated  # nothing measured: only what was stated
    for value, covered in ((3.2, True), (3.6, True), (3.1999, False), (3.6001, False)):
        got = forecast_scores(p, "confirmed", value)
        assert got["covered"] is covered and got["width"] == pytest.approx(0.4), value


def test_outcome_scores_confident_thresholds_point_forecasts_and_trajectories(logbook_repo, story_clock):
    project = project_of(logbook_repo)
    pid = make_prereg(project, [
        "loss@final < 4 (80%)",  # held: Brier 0.04, log ln 0.8
        "val_loss@final < 0.5 (70%)",  # failed: Brier 0.49, log ln 0.3
        "val_loss@final ≈ 2.6 [2.4, 2.8] 80%",  # 2.5: error -0.1, relative -0.04, held, interval score 0.4
        "loss@final ≈ 3.2 [3.1, 3.3] 50%",  # 3.0: error -0.2, relative -0.0667, missed, interval score 0.6
        "loss ≈ {25%: 4.4 [4.3, 4.6], 75%: 3.3 [3.2, 3.4], final: 3.05 [2.9, 3.2]} 90%",
        "spikes@final == 0",
    ], now=BEFORE_RUN)
    story_run(project, story_clock, "story", pid)
    card = evaluate(project, "story")
    by = {p.text: p for p in card.predictions}
    held = by["loss@final < 4 (80%)"].forecast
    assert (held["outcome"], held["brier"], held["log"]) == (1, pytest.approx(0.04), pytest.approx(math.log(0.8)))
    failed = by["val_loss@final < 0.5 (70%)"].forecast
    assert (failed["outcome"], failed["brier"], failed["log"]) == (0, pytest.approx(0.49), pytest.approx(math.log(0.3)))
    inside = by["val_loss@final ≈ 2.6 [2.4, 2.8] 80%"]
    assert inside.status == "confirmed" and inside.forecast["covered"] is True
    assert inside.forecast["error"] == pytest.approx(-0.1) and inside.forecast["rel_error"] == pytest.approx(-0.04)
    assert inside.forecast["interval_score"] == pytest.approx(0.4) and inside.forecast["level"] == 0.8
    missed = by["loss@final ≈ 3.2 [3.1, 3.3] 50%"]
    assert missed.status == "refuted" and missed.forecast["covered"] is False
    assert missed.forecast["error"] == pytest.approx(-0.2) and missed.forecast["rel_error"] == pytest.approx(-0.2 / 3)
    assert missed.forecast["interval_score"] == pytest.approx(0.6)
    traj = [p for p in card.predictions if p.forecast and p.forecast.get("trajectory")]
    assert [(p.at_step, p.value) for p in traj] == [(25, pytest.approx(4.5)), (75, pytest.approx(3.25)),
                                                    (100, pytest.approx(3.0))]
    assert [p.forecast["error"] for p in traj] == [pytest.approx(0.1), pytest.approx(-0.05), pytest.approx(-0.05)]
    assert traj[0].forecast["rel_error"] == pytest.approx(0.1 / 4.5) and all(p.forecast["covered"] for p in traj)
    assert "forecast" not in by["spikes@final == 0"].to_dict() and "late" not in by["spikes@final == 0"].to_dict()


def test_a_forecast_amended_after_the_run_started_is_scored_apart_as_late(logbook_repo, story_clock, cli):
    from logbook.proof.amend import amend_prereg

    project = project_of(logbook_repo)
    pid = make_prereg(project, ["val_loss@final ≈ 3 [2.8, 3.2] 80%"], now=BEFORE_RUN)
    amend_prereg(project, pid, reason="one more before launch", seen="nothing",
                 predictions=["loss@final < 3.5 (60%)"], now=datetime(2026, 11, 30, 7, 30, tzinfo=timezone.utc))
    amend_prereg(project, pid, reason="tighter, written during the run", seen="nothing",
                 predictions=["val_loss@final ≈ 2.55 [2.45, 2.65] 80%"],
                 now=datetime(2026, 11, 30, 9, 0, tzinfo=timezone.utc))
    story_run(project, story_clock, "story", pid)
    amend_prereg(project, pid, reason="seen the curve", seen="results", predictions=["loss@final < 3.1 (90%)"])
    card = record_outcome(project, "story")
    rows = [(p.text, p.source, p.late) for p in card.predictions]
    assert rows[0] == ("val_loss@final ≈ 3 [2.8, 3.2] 80%", "original", None)
    assert rows[1] == ("loss@final < 3.5 (60%)", "amend-1", None)  # made before the run started: on time
    assert rows[2][1] == "amend-2" and "after this run started" in rows[2][2]
    assert rows[3][1] == "amend-3" and "results seen" in rows[3][2]
    # The original is still scored as the original, on its own interval.
    assert card.predictions[0].status == "refuted" and card.predictions[0].forecast["covered"] is False
    assert card.predictions[2].status == "confirmed"
    shown = cli("outcome", "story").stdout
    assert shown.count("LATE") == 2 and "2 late forecasts scored apart" in " ".join(shown.split())


def test_the_scorecard_shows_each_forecast_score_and_their_sum(logbook_repo, story_clock, cli):
    from logbook.scoring.forecasts import describe_scores, run_summary, summary_text

    project = project_of(logbook_repo)
    pid = make_prereg(project, ["loss@final < 4 (80%)", "val_loss@final < 0.5 (70%)",
                                "val_loss@final ≈ 2.6 [2.4, 2.8] 80%", "loss@final ≈ 3.2 [3.1, 3.3] 50%"],
                      now=BEFORE_RUN)
    story_run(project, story_clock, "story", pid)
    res = cli("outcome", "story", "--json")
    assert res.exit_code == 0, res.output
    rows = json.loads(res.stdout)["predictions"]
    assert [describe_scores(p) for p in rows] == [
        "stated 80%: Brier 0.040, log score -0.223", "stated 70%: Brier 0.490, log score -1.204",
        "error -0.1 (-4.0%), inside its 80% interval, interval score 0.4",
        "error -0.2 (-6.7%), outside its 50% interval, interval score 0.6"]
    # mean Brier (0.04 + 0.49) / 2; mean log (ln 0.8 + ln 0.3) / 2 = -0.7136; |rel| (0.04 + 0.0667) / 2 = 5.3%
    assert summary_text(run_summary(rows)) == (
        "Forecasts: 2 with a stated confidence: mean Brier 0.265, mean log score -0.714; "
        "2 point forecasts: 1 of 2 intervals held, mean |relative error| 5.3%.")
    table = cli("outcome", "story").stdout
    assert "Forecasts: 2 with a stated confidence" in table and "Brier" in table


def test_a_count_already_above_its_interval_is_refuted_before_the_point(logbook_repo, story_clock):
    project = project_of(logbook_repo)
    pid = make_prereg(project, ["spikes@final ≈ 0 [0, 0] 70%", "restarts@final ≈ 2 [1, 3] 80%"], now=BEFORE_RUN)
    story_run(project, story_clock, "going", pid, finish=False)  # one spike and one restart so far, still running
    by = {p.text: p for p in evaluate(project, "going").predictions}
    spikes, restarts = by["spikes@final ≈ 0 [0, 0] 70%"], by["restarts@final ≈ 2 [1, 3] 80%"]
    assert spikes.status == "refuted" and "above the interval" in spikes.reason
    assert spikes.forecast["covered"] is False and spikes.forecast["error"] == 1.0
    assert restarts.status == "inconclusive" and "error" not in restarts.forecast  # 1 so far: may still land anywhere
