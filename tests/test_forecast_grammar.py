"""Stated confidences, point forecasts with intervals and trajectories: parsed, typed, checked, round-tripped."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from logbook.core.errors import UsageError
from logbook.promises.predictions import (At, Prediction, Trajectory, flatten, forecast_from_dict, parse_prediction)
from logbook.promises.prereg_input import input_from_mapping, trajectory_line


@pytest.mark.parametrize(
    "text, canonical, confidence",
    [
        ("val_loss@final < 2.31 (80%)", "val_loss@final < 2.31 (80%)", 0.8),
        ("val_loss < 2.31 ± 0.01 ( 62.5 % )", "val_loss@final < 2.31 ± 0.01 (62.5%)", 0.625),
        ("spikes@final == 0 (95%)", "spikes@final == 0 (95%)", 0.95),
        ("mfu@50% >= 40% (30%)", "mfu@50% >= 0.4 (30%)", 0.3),
    ],
)
def test_a_threshold_takes_a_stated_confidence_in_parentheses(text, canonical, confidence):
    p = parse_prediction(text)
    assert isinstance(p, Prediction) and not p.is_point
    assert (p.to_text(), p.confidence) == (canonical, confidence)
    assert parse_prediction(canonical) == p and Prediction.from_dict(p.to_dict()) == p


def test_a_threshold_without_confidence_keeps_its_old_record_shape():
    d = parse_prediction("val_loss@final < 2.31").to_dict()
    assert "confidence" not in d and "interval" not in d and parse_prediction("val_loss@final < 2.31").confidence is None


@pytest.mark.parametrize(
    "text, canonical",
    [
        ("val_loss@final ≈ 2.25 [2.20, 2.30] 80%", "val_loss@final ≈ 2.25 [2.2, 2.3] 80%"),
        ("val_loss ~= 2.25 [2.2,2.3] (80%)", "val_loss@final ≈ 2.25 [2.2, 2.3] 80%"),
        ("loss@step:500 ~ 3 [2.5, 3.5] 50%", "loss@step:500 ≈ 3 [2.5, 3.5] 50%"),
        ("restarts@final ≈ 2 [1, 4] 90%", "restarts@final ≈ 2 [1, 4] 90%"),
        ("mfu@final ≈ 40% [35%, 45%] 50%", "mfu@final ≈ 0.4 [0.35, 0.45] 50%"),
    ],
)
def test_point_forecasts_parse_into_a_point_an_interval_and_a_level(text, canonical):
    p = parse_prediction(text)
    assert p.is_point and p.to_text() == canonical
    assert p.lo <= p.threshold <= p.hi and 0 < p.confidence < 1
    d = p.to_dict()
    assert d["op"] == "≈" and d["interval"] == [p.lo, p.hi] and d["confidence"] == p.confidence
    assert Prediction.from_dict(d) == p and parse_prediction(canonical) == p


def test_a_point_forecast_holds_when_the_value_lands_in_its_interval():
    p = parse_prediction("val_loss@final ≈ 2.25 [2.20, 2.30] 80%")
    assert [p.verdict(v) for v in (2.2, 2.25, 2.3, 2.19, 2.31, float("nan"))] == \
        ["confirmed", "confirmed", "confirmed", "refuted", "refuted", "refuted"]


def test_a_trajectory_is_point_forecasts_at_several_points_sharing_a_level():
    t = parse_prediction("val_loss ≈ {25%: 3.1 [2.9, 3.3], step:60: 2.6 [2.45, 2.75]; final: 2.25 [2.2, 2.3]} 80%")
    assert isinstance(t, Trajectory) and t.metric == "val_loss" and t.level == 0.8
    canonical = "val_loss ≈ {25%: 3.1 [2.9, 3.3], step:60: 2.6 [2.45, 2.75], final: 2.25 [2.2, 2.3]} 80%"
    assert t.to_text() == canonical
    assert [p.at for p in t.points] == [At("fraction", 0.25), At("step", 60), At("final")]
    assert [(p.threshold, p.lo, p.hi) for p in t.points] == [(3.1, 2.9, 3.3), (2.6, 2.45, 2.75), (2.25, 2.2, 2.3)]
    assert all(p.curve == canonical and p.confidence == 0.8 and p.is_point for p in t.points)
    assert forecast_from_dict(t.to_dict()) == t and parse_prediction(canonical) == t
    assert flatten([parse_prediction("spikes@final == 0"), t])[1:] == list(t.points)


@pytest.mark.parametrize(
    "text, message",
    [
        ("val_loss@final ≈ 2.25", "needs an interval"),
        ("val_loss@final ≈ 2.25 [2.20] 80%", "expected `,` in the interval"),
        ("val_loss@final ≈ 2.25 [, 2.30] 80%", "lower bound"),
        ("val_loss@final ≈ 2.25 [2.20, ] 80%", "upper bound"),
        ("val_loss@final ≈ 2.25 [2.20, 2.30", "expected `]`"),
        ("val_loss@final ≈ 2.25 [2.20, 2.30]", "expected a level"),
        ("val_loss@final < 2.31 (0%)", "above 0% and below 100%"),
        ("val_loss@final < 2.31 (100%)", "above 0% and below 100%"),
        ("val_loss@final < 2.31 (150%)", "above 0% and below 100%"),
        ("val_loss@final < 2.31 (-5%)", "as a percentage"),
        ("val_loss@final ≈ 2.25 [2.20, 2.30] 0%", "above 0% and below 100%"),
        ("val_loss@final ≈ 2.25 [2.20, 2.30] 100%", "above 0% and below 100%"),
        ("val_loss@final < 2.31 (80%", "expected `)`"),
        ("val_loss@final < 2.31 80%", "goes in parentheses"),
        ("val_loss@final ≈ 2.40 [2.20, 2.30] 80%", "does not contain its point 2.4"),
        ("val_loss@final ≈ 2.25 [2.30, 2.20] 80%", "is inverted"),
        ("val_loss ≈ {50%: 2.6 [2.4, 2.8]} 80%", "at least two points"),
        ("val_loss ≈ {50%: 2.6 [2.4, 2.8], 50%: 2.5 [2.4, 2.8]} 80%", "given twice"),
        ("val_loss ≈ {50% 2.6 [2.4, 2.8], final: 2 [1, 3]} 80%", "expected `:`"),
        ("val_loss ≈ {50%: 2.6 [2.4, 2.8] final: 2 [1, 3]} 80%", "expected `,` or `}`"),
        ("val_loss@final ≈ {50%: 2.6 [2.4, 2.8], final: 2 [1, 3]} 80%", "not after `@`"),
        ("val_loss ≈ {50%: 2.6 [2.8, 2.4], final: 2 [1, 3]} 80%", "is inverted"),
    ],
)
def test_bad_forecasts_are_refused_with_what_was_expected(text, message):
    with pytest.raises(UsageError) as e:
        parse_prediction(text)
    assert message in e.value.message


@pytest.mark.parametrize(
    "text, message",
    [
        ("mfu@final ≈ 0.5 [0, 1] 80%", "cannot fail: its interval covers all of mfu's range"),
        ("goodput@final ≈ 50% [0%, 100%] 80%", "cannot fail"),
        ("val_loss@final ≈ 2.25 [2.25, 2.25] 80%", "practically never holds"),
        ("val_ppl@final ≈ 0.5 [0.2, 0.8] 80%", "can never hold"),
        ("goodput ≈ {50%: 0.5 [0.4, 0.6], final: 0.5 [0, 1]} 80%", "cannot fail"),
        ("restarts@final >= 0 (90%)", "cannot fail"),
    ],
)
def test_forecasts_that_cannot_fail_or_never_hold_are_refused(text, message):
    with pytest.raises(UsageError, match=message):
        parse_prediction(text)


def test_an_interval_that_covers_only_part_of_a_bounded_range_is_accepted():
    assert parse_prediction("mfu@final ≈ 0.5 [0, 0.9] 80%").hi == 0.9
    assert parse_prediction("restarts@final ≈ 0 [0, 0] 60%").lo == 0  # a whole number can land exactly


def test_a_trajectory_can_be_a_table_in_the_yaml_file(tmp_path):
    src = str(tmp_path / "prereg.yaml")
    line = trajectory_line({"trajectory": "val_loss", "level": "80%",
                            "points": [["25%", 3.1, 2.9, 3.3], ["final", 2.25, 2.2, 2.3]]}, src)
    assert parse_prediction(line).to_text() == "val_loss ≈ {25%: 3.1 [2.9, 3.3], final: 2.25 [2.2, 2.3]} 80%"
    (tmp_path / "curve.csv").write_text("point,value,lo,hi\n25%,3.1,2.9,3.3\nstep:80,2.5,2.3,2.7\n")
    inp = input_from_mapping({"title": "t", "hypothesis": "h", "predictions": [
        "spikes@final == 0", {"trajectory": "val_loss", "level": "90%", "file": "curve.csv"}]}, src)
    assert inp.predictions[1] == "val_loss ≈ {25%: 3.1 [2.9, 3.3], step:80: 2.5 [2.3, 2.7]} 90%"


@pytest.mark.parametrize(
    "entry, message",
    [
        ({"trajectory": "val_loss", "level": "80%", "points": [["25%", 3.1, 2.9]]}, "missing interval bounds"),
        ({"trajectory": "val_loss", "points": [["25%", 3.1, 2.9, 3.3]]}, "give the level"),
        ({"trajectory": "val_loss", "level": 0.8, "points": [["25%", 3.1, 2.9, 3.3]]}, "is a percentage"),
        ({"trajectory": "val_loss", "level": "80%"}, "either `points` or `file`"),
        ({"trajectory": "val_loss", "level": "80%", "file": "nowhere.csv"}, "cannot read"),
        ({"metric": "val_loss"}, "unknown key `metric`"),
    ],
)
def test_a_bad_trajectory_table_is_refused_with_a_sentence(tmp_path, entry, message):
    with pytest.raises(UsageError) as e:
        trajectory_line(entry, str(tmp_path / "p.yaml"))
    assert message in f"{e.value.message} {e.value.hint or ''}"


def test_prereg_records_a_trajectory_and_scores_it_as_its_points(logbook_repo, cli):
    res = cli("prereg", "--title", "forecast", "--hypothesis", "h", "--predict",
              "val_loss ≈ {50%: 2.6 [2.4, 2.8], final: 2.25 [2.2, 2.3]} 80%", "--predict", "loss@final < 4 (70%)")
    assert res.exit_code == 0, res.output
    from logbook.promises.prereg import list_preregs
    from logbook.core.project import open_project

    p = list_preregs(open_project(logbook_repo))[0]
    assert isinstance(p.predictions[0], Trajectory) and p.predictions[1].confidence == 0.7
    assert [x.to_text() for x, _ in p.all_predictions()] == [
        "val_loss@50% ≈ 2.6 [2.4, 2.8] 80%", "val_loss@final ≈ 2.25 [2.2, 2.3] 80%", "loss@final < 4 (70%)"]
    assert "along the run, 80% intervals: 2.6 [2.4, 2.8] at 50%, 2.25 [2.2, 2.3] at final" in p.body
    bad = cli("prereg", "--title", "bad", "--hypothesis", "h", "--predict", "val_loss@final ≈ 2.25 [2.3, 2.2] 80%")
    assert bad.exit_code == 2 and "inverted" in bad.output and "Traceback" not in bad.output


_positive = st.floats(min_value=0.001, max_value=1e6, allow_nan=False, allow_infinity=False)


@settings(max_examples=150, deadline=None)
@given(_positive, _positive, _positive, st.integers(1, 99))
def test_any_valid_point_forecast_reads_back_to_itself_through_its_canonical_text(a, b, c, level):
    lo, value, hi = sorted((a, b, c))
    try:
        p = parse_prediction(f"loss@final ≈ {value!r} [{lo!r}, {hi!r}] {level}%")
    except UsageError as e:  # only a zero-width interval of a continuous metric is refused
        assert lo == hi and "never holds" in e.message
        return
    assert (p.lo, p.threshold, p.hi, p.confidence) == (lo, value, hi, level / 100)
    assert parse_prediction(p.to_text()) == p and Prediction.from_dict(p.to_dict()) == p


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet="loss@≈~{}[],:%0123456789. final step", max_size=80))
def test_text_made_of_forecast_tokens_is_parsed_or_refused_with_a_usage_error(text):
    try:
        p = parse_prediction(text)
    except UsageError as e:
        assert e.message
        return
    assert parse_prediction(p.to_text()) == p
