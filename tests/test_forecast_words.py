"""The words and keys a reader sees for forecasts: a scorecard row's phrase, calibration's warnings about small
samples, and the JSON's names. Each pinned exactly, since a reader takes them as written."""

from __future__ import annotations

import pytest

from logbook.scoring.calibration import MIN_POINTS, MIN_PROBABILITY, Calibration, Forecasts
from logbook.scoring.forecasts import RunForecasts, describe_scores


def _refused(text: str):
    """The UsageError that parsing `text` as a prediction raises."""
    from logbook.core.errors import UsageError
    from logbook.promises.predictions import parse_prediction

    with pytest.raises(UsageError) as e:
        parse_prediction(text)
    return e.value


@pytest.mark.parametrize("forecast, words", [
    (None, ""), ("0.8", ""), ({}, ""),
    ({"kind": "probability", "p": 0.8}, "stated 80%, not decided"),
    ({"kind": "probability", "p": 0.8, "brier": 0.04, "log": -0.2231}, "stated 80%: Brier 0.040, log score -0.223"),
    ({"kind": "interval"}, "no value to compare"),
    ({"kind": "interval", "error": -0.05, "rel_error": -0.0167, "covered": True, "level": 0.8,
      "interval_score": 0.123456}, "error -0.05 (-1.7%), inside its 80% interval, interval score 0.123"),
    ({"kind": "interval", "error": 0.4, "rel_error": None, "covered": False, "level": 0.5, "interval_score": 2.0},
     "error +0.4, outside its 50% interval, interval score 2"),
    ({"kind": "interval", "error": 1e-5, "rel_error": 0.0, "covered": True, "level": 0.9,
      "interval_score": 0.00012345}, "error +1e-05 (+0.0%), inside its 90% interval, interval score 0.000123"),
    ({"kind": "interval", "error": 1.5, "rel_error": 0.5, "covered": False, "level": 0.8, "interval_score": 9.0},
     "error +1.5 (+50.0%), outside its 80% interval, interval score 9"),
])
def test_a_scorecard_row_says_its_forecast_scores_in_one_phrase(forecast, words):
    assert describe_scores({"forecast": forecast}) == words


def test_small_samples_are_named_with_their_size_and_where_they_are():
    few = Forecasts(probability=[(0.9, 1)], intervals=[(0.8, True)], rel_errors=[0.1])
    assert few.warnings("for Ada") == [
        "only 1 forecast with a stated confidence for Ada: the Brier score's reliability and resolution say little "
        f"below {MIN_PROBABILITY}",
        "only 1 interval at 80% for Ada: coverage of 1 of 1 cannot be told apart from 80% (95% interval 21–100%)",
        "only 1 point forecast for Ada: a mean relative error from so few is anecdote"]
    assert few.warnings()[0].startswith("only 1 forecast with a stated confidence: the Brier")
    assert Forecasts().warnings() == []
    enough = Forecasts(probability=[(0.9, 1)] * MIN_PROBABILITY)
    assert enough.warnings() == [] and Forecasts(probability=[(0.9, 1)] * (MIN_PROBABILITY - 1)).warnings()
    assert Forecasts(rel_errors=[0.1] * MIN_POINTS).warnings() == []
    assert Forecasts(rel_errors=[0.1] * (MIN_POINTS - 1)).warnings() == [
        f"only {MIN_POINTS - 1} point forecasts: a mean relative error from so few is anecdote"]
    nine = Forecasts(intervals=[(0.8, True)] * 9)  # both ends of the interval in whole percent
    assert nine.warnings() == ["only 9 intervals at 80%: coverage of 9 of 9 cannot be told apart from 80% "
                               "(95% interval 70–100%)"]


def test_the_calibration_json_names_every_group_and_a_scorecards_forecasts_keep_their_names():
    d = Calibration(period="month", runs=2, run_ids=["a", "b"]).to_dict()
    assert set(d) == {"period", "runs", "run_ids", "overall", "by_author", "by_period", "by_metric", "forecasts",
                      "forecasts_by", "late", "warnings"}
    assert (d["period"], d["runs"], d["run_ids"]) == ("month", 2, ["a", "b"])
    assert RunForecasts(probability=2, late=1).to_dict() == {
        "probability": 2, "mean_brier": None, "mean_log": None, "points": 0, "covered": 0,
        "mean_abs_rel_error": None, "late": 1}


@pytest.mark.parametrize("text, says", [
    ("val_loss ≈ {50% 2.6 [2.4, 2.8], final: 2 [1, 3]} 80%",
     "expected `:` between a trajectory's point and its forecast (`50%: 2.6 [2.4, 2.8]`) at column 17"),
    ("val_loss ≈ {50%: 2.6 [2.4, 2.8] final: 2 [1, 3]} 80%", "expected `,` or `}` after a trajectory point at column 33"),
    ("val_loss ≈ {50%: 2.6 [2.4, 2.8]} 80%",
     "a trajectory needs at least two points; a single one is a point forecast (`@50% ≈ ...`) at column 33"),
    ("val_loss ≈ {" + ", ".join(f"{s}: 2 [1, 3]" for s in range(1, 102)) + "} 80%", "a trajectory has at most 100 points"),
    ("val_loss@final ≈ [2.2, 2.3] 80%", "expected the forecast value after `≈`"),
    ("val_loss@final ≈ 2.25 80%", "a point forecast needs an interval: write `≈ 2.25 [2.20, 2.30] 80%`"),
    ("val_loss@final ≈ 2.25% [2.2, 2.3] 80%", "a percentage is not allowed for the forecast value"),
    ("val_loss@final ≈ 2.25 [2.2%, 2.3] 80%", "a percentage is not allowed for the interval's lower bound"),
    ("val_loss@final ≈ 2.25 [2.2, 2.3%] 80%", "a percentage is not allowed for the interval's upper bound"),
    ("val_loss@final ≈ 2.25 [2.2, 2.3] x", "expected a level as a percentage, such as `80%`"),
    ("val_loss@final < 2.31 (x)", "expected a confidence as a percentage, such as `(80%)`"),
    ("val_loss@final < 2.31 (0%)", "a confidence must be above 0% and below 100% (certainty cannot be scored)"),
    ("val_loss@final < 2.31 (80% x", "expected `)` after the confidence"),
    ("loss@ < 3", "expected a point in the run after '@' (`final`, `step:5000`, `5000` or `50%`)"),
    ("loss@step:50% < 3", "a step must be a whole number, not a percentage"),
    ("loss@0% < 3", "a fraction of the run must be above 0% and at most 100%"),
    ("loss@100.5% < 3", "a fraction of the run must be above 0% and at most 100%"),
    ("loss@12.5 < 3", "a step must be a whole number"),
    ("@final < 3", "expected a metric name"),
    ("loss@final 3", "expected a comparator (<, <=, >, >=, ==, !=) or ≈ for a point forecast"),
    ("loss@final = 3", "`=` is ambiguous: write `==` for equality"),
    ("val_loss@final ≈ {50%: 2 [1, 3], final: 2 [1, 3]} 80%", "a trajectory names its points inside `{...}`, not after `@`"),
    ("loss@final < 3 ± -1", "expected a non-negative tolerance after `±`"),
    ("loss@final < 3 ± +1", "expected a non-negative tolerance after `±`"),
    ("loss@final < 3 ± 5%", "a percentage is not allowed for the tolerance"),
    ("loss@final < 3%", "a percentage is not allowed for the threshold"),
    ("loss@final < 3 80%", "a threshold's stated confidence goes in parentheses: `(80%)`"),
    ("loss@final < 3 x", "unexpected text after the prediction"),
])
def test_a_prediction_that_does_not_parse_says_in_full_what_it_expected_and_where(text, says):
    message = _refused(text).message
    assert message.startswith(f"invalid prediction {text!r}: {says} "), message  # then where: ` at column N`


@pytest.mark.parametrize("text, says, hint", [
    ("mfu@final ≈ 0.5 [0, 1] 80%", "forecast 'mfu@final ≈ 0.5 [0, 1] 80%' cannot fail: its interval covers all of "
     "mfu's range [0, 1]", "state the interval you actually expect the value to land in"),
    ("mfu@final ≈ 1.5 [1.2, 1.8] 80%", "forecast 'mfu@final ≈ 1.5 [1.2, 1.8] 80%' can never hold: mfu is always in "
     "[0, 1]", "check the interval's bounds"),
    ("val_loss@final ≈ 2.25 [2.25, 2.25] 80%", "forecast 'val_loss@final ≈ 2.25 [2.25, 2.25] 80%' practically never "
     "holds: val_loss is continuous and the interval has no width", "give the interval you expect, e.g. `[2.20, 2.30]`"),
    ("restarts@final <= 2.5", "prediction 'restarts@final <= 2.5' compares a count with a fraction: restarts is a "
     "whole number, so `<= 2.5` means `<= 2`", "say the whole number you mean: `restarts@final <= 2`"),
    ("restarts@final >= 1.5", "prediction 'restarts@final >= 1.5' compares a count with a fraction: restarts is a "
     "whole number, so `>= 1.5` means `>= 2`", "say the whole number you mean: `restarts@final >= 2`"),
    ("restarts@final > 1.5", "prediction 'restarts@final > 1.5' compares a count with a fraction: restarts is a "
     "whole number, so `> 1.5` means `>= 2`", "say the whole number you mean: `restarts@final >= 2`"),
    ("restarts@final <= 2 ± 0.5", "prediction 'restarts@final <= 2 ± 0.5' gives a count a fractional tolerance: "
     "restarts is a whole number", "use a whole-number tolerance, or none: `restarts@final <= 2`"),
    (" restarts@final<=2.5 ", "prediction 'restarts@final<=2.5' compares a count with a fraction: restarts is a "
     "whole number, so `<= 2.5` means `<= 2`", "say the whole number you mean: `restarts@final <= 2`"),  # as written
    ("spikes@final == 0.5", "prediction 'spikes@final == 0.5' can never hold: spikes is a whole number",
     "use a whole-number threshold such as `spikes@final == 0`"),
    ("spikes@final != 0.5", "prediction 'spikes@final != 0.5' cannot fail: spikes is a whole number",
     "use a whole-number threshold such as `spikes@final != 0`"),
    ("loss@final == 1.2", "prediction 'loss@final == 1.2' practically never holds: loss is continuous, an exact match "
     "is never seen", "give a tolerance (`loss@final == 1.2 ± 0.01`) or use < / >"),
    ("loss@final != 1.2", "prediction 'loss@final != 1.2' practically cannot fail: loss is continuous, an exact match "
     "is never seen", "give a tolerance (`loss@final != 1.2 ± 0.01`) or use < / >"),
    ("goodput@final <= 1", "prediction 'goodput@final <= 1' cannot fail: goodput is always in [0, 1]",
     "a prediction must name an outcome that could turn out false; tighten the threshold"),
    ("goodput@final>1", "prediction 'goodput@final>1' can never hold: goodput is always in [0, 1]",
     "check the comparator's direction and the threshold"),
    ("goodput@final >= 1.5", "prediction 'goodput@final >= 1.5' can never hold: goodput is always in [0, 1]",
     "check the comparator's direction and the threshold"),
    *[(t, f"prediction {t!r} cannot fail: goodput is always in [0, 1]",
       "a prediction must name an outcome that could turn out false; tighten the threshold")
      for t in ("goodput@final < 1.5", "goodput@final > -0.5", "goodput@final != 1.5 ± 0.1",
                "goodput@final != -0.5 ± 0.1", "goodput@final <= 0.95 ± 0.1", "goodput@final >= 0.05 ± 0.1")],
    *[(t, f"prediction {t!r} can never hold: goodput is always in [0, 1]",
       "check the comparator's direction and the threshold")
      for t in ("goodput@final < -0.5", "goodput@final > 1.5")],  # past the range's far end, not its near one
    ("goodput@final == 1.2 ± 0.1", "prediction 'goodput@final == 1.2 ± 0.1' can never hold: goodput is always in "
     "[0, 1]", "check the comparator's direction and the threshold"),
    ("goodput@final == -0.2 ± 0.1", "prediction 'goodput@final == -0.2 ± 0.1' can never hold: goodput is always in "
     "[0, 1]", "check the comparator's direction and the threshold"),
    ("loss@final<3±5", "prediction 'loss@final<3±5' can hardly fail: its tolerance ± 5 is wider than everything the "
     "threshold accepts ([0, 3)), so the tolerance, not the threshold, decides",
     "a tolerance is a small grace margin; state the threshold you expect and a margin smaller than it"),
    ("goodput@final > 0.9 ± 0.2", "prediction 'goodput@final > 0.9 ± 0.2' can hardly fail: its tolerance ± 0.2 is "
     "wider than everything the threshold accepts ((0.9, 1]), so the tolerance, not the threshold, decides",
     "a tolerance is a small grace margin; state the threshold you expect and a margin smaller than it"),
])
def test_a_prediction_that_cannot_fail_hold_or_mean_what_it_says_is_refused_in_full_with_what_to_do(
        text, says, hint):
    e = _refused(text)
    assert (e.message, e.hint) == (says, hint)


def test_an_empty_or_overlong_prediction_is_refused_before_it_is_read():
    from logbook.promises.predictions import parse_prediction

    for empty in ("", "   "):
        e = _refused(empty)
        assert (e.message, e.hint) == ("empty prediction", "write e.g. `val_loss@final < 1.45`")
    longest = "loss@final < 3" + " " * 186  # 200 characters: the most a prediction may take
    assert parse_prediction(longest).to_text() == "loss@final < 3"
    assert _refused(longest + " ").message == f"prediction longer than 200 characters: {longest[:40]!r}..."


def test_a_metric_name_in_capitals_and_digits_grouped_by_underscores_are_read_as_meant():
    from logbook.promises.predictions import parse_prediction

    assert parse_prediction("VAL_LOSS@final < 3").to_text() == "val_loss@final < 3"
    assert parse_prediction("tokens_per_s@final > 2_000").threshold == 2000.0


def test_a_trajectory_point_that_cannot_fail_is_named_as_that_point():
    e = _refused("goodput ≈ {50%: 0.5 [0, 1], final: 0.6 [0.5, 0.7]} 80%")
    assert e.message == "forecast 'goodput@50% ≈ 0.5 [0, 1] 80%' cannot fail: its interval covers all of goodput's range [0, 1]"


def test_points_in_the_run_are_read_in_their_other_spellings_and_written_back_in_one():
    from logbook.promises.predictions import parse_prediction

    assert parse_prediction("loss@end < 3").to_text() == "loss@final < 3"
    assert parse_prediction("loss@5_0% < 3").to_dict()["at"] == {"kind": "fraction", "value": 0.5}
    d = parse_prediction("val_loss@~60±10 < 10").to_dict()
    assert d["at"] == {"kind": "step", "value": 60, "window": 10}
    assert isinstance(d["threshold"], int) and isinstance(d["at"]["value"], int)  # whole numbers stay whole


def test_a_number_refused_is_pointed_at_where_it_starts():
    assert _refused("loss@final < 3%").message == ("invalid prediction 'loss@final < 3%': a percentage is not allowed "
                                                   "for the threshold at column 14 (found '3%')")
    assert _refused("goodput@final > 1e400").message == (
        "invalid prediction 'goodput@final > 1e400': the threshold must be a finite number at column 17 (found '1e400')")


def test_a_fractions_threshold_and_tolerance_may_be_percentages_and_a_point_forecast_has_no_tolerance():
    from logbook.promises.predictions import parse_prediction

    p = parse_prediction("goodput@final > 80% ± 5%")
    assert (p.threshold, p.tolerance, p.to_text()) == (0.8, 0.05, "goodput@final > 0.8 ± 0.05")
    assert parse_prediction("val_loss@final ≈ 3.4 [3.2, 3.6] 80%").tolerance == 0.0


@pytest.mark.parametrize("text", ["goodput@final >= 1", "goodput@final == 1.1 ± 0.1", "goodput@final == 0 ± 0.1",
                                  "goodput@final == 1 ± 0.1", "goodput@final == 0.95 ± 0.1",
                                  "goodput@final != 0.95 ± 0.1", "goodput@final != 0 ± 0.1",
                                  "goodput@final != -0.1 ± 0.1", "goodput@final != 1.1 ± 0.1",
                                  "goodput@final != 0.05 ± 0.1"])
def test_a_prediction_at_the_edge_of_its_metrics_range_or_a_band_reaching_past_it_can_still_go_either_way(text):
    from logbook.promises.predictions import parse_prediction

    assert parse_prediction(text).to_text() == text


def test_a_trajectory_of_exactly_the_most_points_is_taken_and_its_separators_need_no_spaces():
    from logbook.promises.predictions import parse_prediction

    most = parse_prediction("loss ≈ {" + ", ".join(f"{s}: 2 [1, 3]" for s in range(1, 101)) + "} 80%")
    assert len(most.points) == 100
    tight = parse_prediction("val_loss ≈ {50%:2.6 [2.4, 2.8],final:2 [1, 3]} (80%)")
    assert tight.to_text() == "val_loss ≈ {50%: 2.6 [2.4, 2.8], final: 2 [1, 3]} 80%"


def test_an_interval_that_starts_at_the_top_of_the_range_can_still_hold():
    from logbook.promises.predictions import parse_prediction

    assert parse_prediction("mfu@final ≈ 1 [1, 1.2] 80%").to_text() == "mfu@final ≈ 1 [1, 1.2] 80%"


def test_a_level_in_many_digits_is_written_back_as_it_was_given():
    from logbook.promises.predictions import parse_prediction

    for text in ("val_loss@final < 2.31 (28.57142857%)", "val_loss@final ≈ 2.25 [2.2, 2.3] 22.22222222%"):
        assert parse_prediction(text).to_text() == text


def test_points_in_the_run_take_their_separators_and_their_edges():
    from logbook.promises.predictions import milestone_step, parse_prediction

    assert parse_prediction("loss@1_000 < 3").to_text() == parse_prediction("loss@1,000 < 3").to_text() == \
        "loss@step:1000 < 3"
    assert parse_prediction("loss@1_0% < 3").at.value == parse_prediction("loss@1,0% < 3").at.value == 0.1
    assert parse_prediction("loss@100% < 3").at.value == 1.0 and parse_prediction("loss@0.5% < 3").at.value == 0.005
    assert [milestone_step(f, 10) for f in (0.01, 0.3, 1.0)] == [1, 3, 10] and milestone_step(0.5, 1) == 1
    for bad in (0, -5):
        with pytest.raises(ValueError, match=f"total_steps must be positive, got {bad}"):
            milestone_step(0.5, bad)


def test_a_scorecards_forecast_summary_counts_each_kind_once_and_says_it_in_one_line():
    from logbook.scoring.forecasts import run_summary, summary_text

    s = run_summary([{"forecast": "an error note, no brier"},  # not a forecast's scores: left out
                     {"late": True, "forecast": {"kind": "probability", "p": 0.8, "brier": 0.1, "log": -0.1}},
                     {"forecast": {"kind": "interval", "error": 0.1, "covered": True, "rel_error": None}},
                     {"forecast": {"kind": "interval", "error": 0.3, "covered": False, "rel_error": None}},
                     {"forecast": {"kind": "probability", "p": 0.8, "brier": 0.04, "log": -0.2}}])
    assert (s.probability, s.points, s.covered, s.late, s.mean_abs_rel_error) == (1, 2, 1, 1, None)
    assert summary_text(s) == ("Forecasts: 1 with a stated confidence: mean Brier 0.040, mean log score -0.200; "
                               "2 point forecasts: 1 of 2 intervals held; 1 late forecast scored apart.")
    assert summary_text(RunForecasts()) == ""
