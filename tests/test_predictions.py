"""Predictions parse into typed fields, refuse what cannot fail, and evaluate against values."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from logbook.core.errors import UsageError
from logbook.promises.predictions import METRICS, At, Prediction, check_falsifiable, parse_prediction


@pytest.mark.parametrize(
    "text, metric, at, op, threshold, tolerance, canonical",
    [
        ("val_loss@final < 1.45", "val_loss", At("final"), "<", 1.45, 0.0, "val_loss@final < 1.45"),
        ("val_loss@final < 1.45 ± 0.02", "val_loss", At("final"), "<", 1.45, 0.02, "val_loss@final < 1.45 ± 0.02"),
        ("val_loss@final < 1.45 +- 0.02", "val_loss", At("final"), "<", 1.45, 0.02, "val_loss@final < 1.45 ± 0.02"),
        ("val_loss < 1.45 +/- .02", "val_loss", At("final"), "<", 1.45, 0.02, "val_loss@final < 1.45 ± 0.02"),
        ("spikes@final == 0", "spikes", At("final"), "==", 0.0, 0.0, "spikes@final == 0"),
        ("restarts@final <= 3", "restarts", At("final"), "<=", 3.0, 0.0, "restarts@final <= 3"),
        ("tokens_per_s@50% >= 2000", "tokens_per_s", At("fraction", 0.5), ">=", 2000.0, 0.0, "tokens_per_s@50% >= 2000"),
        ("loss@step:5000 < 3.2", "loss", At("step", 5000), "<", 3.2, 0.0, "loss@step:5000 < 3.2"),
        ("loss@5000<3.2", "loss", At("step", 5000), "<", 3.2, 0.0, "loss@step:5000 < 3.2"),
        ("loss@step:5_000 ≤ 3.2", "loss", At("step", 5000), "<=", 3.2, 0.0, "loss@step:5000 <= 3.2"),
        ("mfu@final >= 40%", "mfu", At("final"), ">=", 0.4, 0.0, "mfu@final >= 0.4"),
        ("tokens@final >= 10B", "tokens", At("final"), ">=", 1e10, 0.0, "tokens@final >= 10000000000"),
        ("goodput@12.5% > 0.9", "goodput", At("fraction", 0.125), ">", 0.9, 0.0, "goodput@12.5% > 0.9"),
        ("grad_norm@final != 1 ± 0.5", "grad_norm", At("final"), "!=", 1.0, 0.5, "grad_norm@final != 1 ± 0.5"),
    ],
)
def test_prediction_forms_parse_into_typed_fields(text, metric, at, op, threshold, tolerance, canonical):
    p = parse_prediction(text)
    assert (p.metric, p.at, p.op, p.threshold, p.tolerance) == (metric, at, op, threshold, tolerance)
    assert p.to_text() == canonical
    assert parse_prediction(p.to_text()) == p


def test_prediction_to_dict_carries_every_field_and_rebuilds():
    p = parse_prediction("tokens_per_s@50% >= 2000 ± 100")
    d = p.to_dict()
    assert d == {"text": "tokens_per_s@50% >= 2000 ± 100", "metric": "tokens_per_s",
                 "at": {"kind": "fraction", "value": 0.5}, "op": ">=", "threshold": 2000, "tolerance": 100}
    assert Prediction.from_dict(d) == p


@pytest.mark.parametrize("key, value", [("metric", "restarts"), ("op", "<="), ("threshold", 1), ("tolerance", 1),
                                        ("at", {"kind": "step", "value": 5}), ("confidence", 0.9),
                                        ("interval", [0, 1])])
def test_from_dict_refuses_any_field_that_disagrees_with_the_text(key, value):
    d = {**parse_prediction("spikes@final == 0").to_dict(), key: value}
    with pytest.raises(UsageError) as e:
        Prediction.from_dict(d)
    assert e.value.message == "prediction 'spikes@final == 0': its fields disagree with its text"


def test_from_dict_refuses_a_trajectory_or_no_text_and_takes_fields_that_agree():
    text = "val_loss ≈ {50%: 2.6 [2.4, 2.8], final: 2.2 [2.0, 2.4]} 80%"
    with pytest.raises(UsageError) as e:
        Prediction.from_dict({"text": text})
    assert e.value.message == f"prediction {text!r} is a trajectory, not a single prediction"
    with pytest.raises(UsageError) as e:
        Prediction.from_dict({})
    assert e.value.message == "empty prediction"
    assert Prediction.from_dict({"text": "spikes@final == 0", "metric": "spikes", "note": "a key it does not check"}) == \
        parse_prediction("spikes@final == 0")


@pytest.mark.parametrize(
    "text, column, what",
    [
        ("val_loss@final << 1.45", 17, "threshold"),
        ("val_loss@final <", 17, "threshold"),
        ("val_loss@fin < 1", 10, "point in the run"),
        ("val_loss@final 1.45", 16, "comparator"),
        ("val_loss@final = 1.45", 16, "=="),
        ("val_loss@final < 1.45 ± -0.1", 25, "tolerance"),
        ("val_loss@final < 1.45 then", 23, "unexpected text"),
        ("loss@150% < 2", 6, "at most 100%"),
        ("loss@step:50% < 2", 11, "whole number"),
        ("val_loss@final < 40%", 18, "percentage"),
        ("@final < 1", 1, "metric name"),
    ],
)
def test_invalid_syntax_names_the_column(text, column, what):
    with pytest.raises(UsageError) as e:
        parse_prediction(text)
    assert f"column {column}" in e.value.message
    assert what in e.value.message
    assert "val_loss@final < 1.45" in (e.value.hint or "")


@pytest.mark.parametrize("text", ["restarts >= 0", "loss > -1", "goodput <= 1", "mfu@final < 2",
                                  "restarts@final > -0.5", "val_loss@final < 1 ± 1e400", "goodput == 0.5 ± 0.5",
                                  "spikes != 0.5", "loss != 1.3"])
def test_a_prediction_that_cannot_fail_is_refused(text):
    with pytest.raises(UsageError, match="cannot fail|must be a finite"):
        parse_prediction(text)


@pytest.mark.parametrize("text", ["loss < 0", "goodput > 1", "spikes == 0.5", "val_ppl@final <= 0.5", "loss == 1.2"])
def test_a_prediction_that_can_never_hold_is_refused(text):
    with pytest.raises(UsageError, match="never holds|never hold"):
        parse_prediction(text)


def test_unknown_metric_lists_the_known_ones_and_the_closest():
    with pytest.raises(UsageError) as e:
        parse_prediction("valloss@final < 1.4")
    assert "unknown metric `valloss`" in e.value.message
    assert "did you mean `val_loss`" in e.value.hint
    for name in ("spikes", "restarts", "tokens_per_s", "goodput"):
        assert name in e.value.hint


def test_metric_registry_covers_the_documented_metrics():
    for name in ("val_loss", "loss", "spikes", "restarts", "rollbacks", "tokens_per_s", "mfu", "goodput",
                 "grad_norm", "steps", "tokens", "lr_changes", "skipped_steps"):
        m = METRICS[name]
        assert m.name == name and m.description and m.unit and m.lo <= m.hi
    assert METRICS["goodput"].hi == 1 and METRICS["restarts"].integer and not METRICS["loss"].integer


@pytest.mark.parametrize(
    "text, value, verdict",
    [
        ("val_loss@final < 1.45 ± 0.02", 1.44, "confirmed"),
        ("val_loss@final < 1.45 ± 0.02", 1.46, "within_tolerance"),
        ("val_loss@final < 1.45 ± 0.02", 1.48, "refuted"),
        ("val_loss@final < 1.45", 1.45, "refuted"),
        ("val_loss@final <= 1.45", 1.45, "confirmed"),
        ("spikes@final == 0", 0, "confirmed"),
        ("spikes@final == 0", 1, "refuted"),
        ("tokens_per_s@50% >= 2000 ± 100", 1950, "within_tolerance"),
        ("tokens_per_s@50% >= 2000", 2500, "confirmed"),
        ("goodput@final > 0.9", 0.89, "refuted"),
        ("val_loss@final == 2.3 ± 0.05", 2.34, "confirmed"),
        ("val_loss@final == 2.3 ± 0.05", 2.36, "refuted"),
        ("grad_norm@final != 1 ± 0.5", 1.2, "refuted"),
        ("grad_norm@final != 1 ± 0.5", 2.0, "confirmed"),
        ("val_loss@final < 1.45", math.nan, "refuted"),
        ("val_loss@final < 1.45", math.inf, "refuted"),
        ("val_loss@final < 1.45", "not a number", "refuted"),
    ],
)
def test_verdict_and_holds_evaluate_a_value(text, value, verdict):
    p = parse_prediction(text)
    assert p.verdict(value) == verdict
    assert p.holds(value) == (verdict != "refuted")


def test_describe_reads_as_a_sentence():
    assert parse_prediction("val_loss@final < 1.45 ± 0.02").describe() == (
        "validation loss (cross-entropy) at the end of the run: below 1.45 (tolerance 0.02)")
    assert "at 50% of the run: at least 2000" in parse_prediction("tokens_per_s@50% >= 2000").describe()


_finite = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False)
_at = st.one_of(st.just(At("final")), st.integers(0, 10**7).map(lambda s: At("step", s)),
                st.integers(1, 1000).map(lambda p: At("fraction", round(p / 1000, 10))))


@settings(max_examples=300, deadline=None)
@given(metric=st.sampled_from(sorted(METRICS)), at=_at, op=st.sampled_from(["<", "<=", ">", ">=", "==", "!="]),
       threshold=_finite, tolerance=st.one_of(st.just(0.0), st.floats(0, 100, allow_nan=False)))
def test_to_text_round_trips_for_every_accepted_prediction(metric, at, op, threshold, tolerance):
    p = Prediction(metric, at, op, threshold, tolerance)
    try:
        check_falsifiable(p)
    except UsageError:
        return  # refused predictions are never written, so they need not round-trip
    assert parse_prediction(p.to_text()) == p


@pytest.mark.parametrize("text, said", [
    ("restarts@final <= 2.5", "means `<= 2`"), ("spikes@final < 0.5", "means `<= 0`"),
    ("rollbacks@final > 1.5", "means `>= 2`"), ("restarts@final <= 2 ± 0.5", "fractional tolerance"),
])
def test_a_count_compared_with_a_fraction_is_refused_naming_the_whole_number(text, said):
    with pytest.raises(UsageError, match="whole number") as e:
        parse_prediction(text)
    assert said in e.value.message


@pytest.mark.parametrize("text", ["loss@final < 3 ± 5", "val_loss@final <= 2 ± 2.5", "goodput@final > 0.9 ± 0.2",
                                  "mfu@50% >= 0.8 ± 0.3"])
def test_a_tolerance_wider_than_what_the_threshold_accepts_is_refused(text):
    with pytest.raises(UsageError, match="can hardly fail: its tolerance") as e:
        parse_prediction(text)
    assert "grace margin" in e.value.hint


@pytest.mark.parametrize("text", ["loss@final < 3 ± 3", "goodput@final > 0.9 ± 0.1", "restarts@final <= 2 ± 1",
                                  "tokens_per_s@50% > 2000 ± 1000"])
def test_a_tolerance_up_to_what_the_threshold_accepts_is_kept(text):
    assert parse_prediction(text).tolerance > 0


HINT = ("write predictions like `val_loss@final < 1.45 ± 0.02`, `spikes@final == 0`, "
        "`val_loss@final < 2.31 (80%)`, `val_loss@final ≈ 2.25 [2.20, 2.30] 80%`")


@pytest.mark.parametrize("text, message", [
    ("val_loss@~final±5 < 3", "invalid prediction 'val_loss@~final±5 < 3': `~` takes a step or a fraction of the run, "
                              "not `final` at column 16 (found '±5 < 3')"),
    ("val_loss@~15 < 3.000000000001", "invalid prediction 'val_loss@~15 < 3.000000000001': `@~` needs its window in "
                                      "steps: write `@~15±5` (the nearest value within 5 steps of step 15) at column 14 "
                                      "(found '< 3.00000000')"),
    ("val_loss@~15± < 3", "invalid prediction 'val_loss@~15± < 3': expected the window, a whole number of steps, "
                          "after `±` at column 15 (found '< 3')"),
    ("val_loss@final <", "invalid prediction 'val_loss@final <': expected a threshold number after `<` at column 17 "
                         "(found 'the end')"),
])
def test_a_malformed_prediction_names_what_was_expected_where_and_the_next_twelve_characters(text, message):
    with pytest.raises(UsageError) as err:
        parse_prediction(text)
    assert (err.value.message, err.value.hint) == (message, HINT)


def test_a_window_may_group_its_digits_like_a_step():
    assert parse_prediction("val_loss@~1_000±1_0 < 3").at == At("step", 1000, 10)
    assert parse_prediction("val_loss@~1_000±1__0_ < 3").at == At("step", 1000, 10)  # as loosely as a step


@pytest.mark.parametrize("text, message", [
    ("loss@final > -1", "prediction 'loss@final > -1' cannot fail: loss is always in [0, ∞)"),
    ("mfu@final < 2", "prediction 'mfu@final < 2' cannot fail: mfu is always in [0, 1]"),
])
def test_a_prediction_that_cannot_fail_names_the_metrics_range(text, message):
    with pytest.raises(UsageError) as err:
        check_falsifiable(parse_prediction(text), text)
    assert err.value.message == message


def test_an_unknown_metric_lists_the_known_ones():
    with pytest.raises(UsageError) as err:
        parse_prediction("foo@final < 3")
    assert err.value.hint.startswith("known metrics: " + ", ".join(sorted(METRICS)) + "; the frameworks' names ")
    assert err.value.hint.endswith("or declare it: --metric NAME:higher|lower|UNIT:DESCRIPTION")


def test_a_trajectory_to_dict_names_its_metric_level_and_points_and_rebuilds_from_them():
    from logbook.promises.predictions import Trajectory, forecast_from_dict

    t = parse_prediction("val_loss ≈ {50%: 2.6 [2.4, 2.8], final: 2 [1, 3]} 80%")
    d = t.to_dict()
    assert d == {"text": "val_loss ≈ {50%: 2.6 [2.4, 2.8], final: 2 [1, 3]} 80%", "kind": "trajectory",
                 "metric": "val_loss", "level": 0.8,
                 "points": [{"at": {"kind": "fraction", "value": 0.5}, "value": 2.6, "interval": [2.4, 2.8]},
                            {"at": {"kind": "final", "value": None}, "value": 2, "interval": [1, 3]}]}
    assert forecast_from_dict(d) == Trajectory.from_dict(d) == t
    assert [(p.metric, p.tolerance, p.confidence, p.curve) for p in t.points] == [("val_loss", 0.0, 0.8, d["text"])] * 2
    for key, other in (("metric", "loss"), ("level", 0.5), ("points", d["points"][:1])):
        with pytest.raises(UsageError) as e:
            Trajectory.from_dict({**d, key: other})
        assert e.value.message == f"trajectory {d['text']!r}: its fields disagree with its text"
    with pytest.raises(UsageError) as e:
        Trajectory.from_dict({"kind": "trajectory"})
    assert e.value.message == "empty prediction"
    with pytest.raises(UsageError) as e:
        Trajectory.from_dict({"text": "val_loss@final < 2", "kind": "trajectory"})
    assert e.value.message == "prediction 'val_loss@final < 2' is marked as a trajectory but is not one"


@pytest.mark.parametrize("text, sentence", [
    ("loss@final < 3", "training loss (cross-entropy) at the end of the run: below 3"),
    ("loss@step:500 <= 3 ± 0.1", "training loss (cross-entropy) at step 500: at most 3 (tolerance 0.1)"),
    ("loss@50% > 3 (80%)", "training loss (cross-entropy) at 50% of the run: above 3, stated confidence 80%"),
    ("loss@final >= 3", "training loss (cross-entropy) at the end of the run: at least 3"),
    ("restarts@final == 0", "restarts after failures at the end of the run: equal to 0"),
    ("grad_norm@final != 1 ± 0.5", "global gradient norm at the end of the run: not equal to 1 (tolerance 0.5)"),
])
def test_each_comparator_reads_as_its_own_words(text, sentence):
    assert parse_prediction(text).describe() == sentence


TRAJECTORY = "val_loss ≈ {50%: 2.6 [2.4, 2.8], final: 2.2 [2.0, 2.4]} 80%"


@pytest.mark.parametrize("texts, says", [
    ([TRAJECTORY, "val_loss@final ≈ 2.3 [2.1, 2.5] 80%"],
     "val_loss@final is forecast twice at 80%: 2.2 [2, 2.4] in prediction 1 (a trajectory) and 2.3 [2.1, 2.5] in "
     "prediction 2"),
    (["val_loss@final ≈ 2.3 [2.1, 2.5] 80%", "val_loss@final ≈ 2.2 [2.0, 2.4] 80%"],
     "val_loss@final is forecast twice at 80%: 2.3 [2.1, 2.5] in prediction 1 and 2.2 [2, 2.4] in prediction 2"),
    (["val_loss@final ≈ 2.2 [2.0, 2.4] 80%", "val_loss@final ≈ 2.2 [2.0, 2.4] 80%"],
     "val_loss@final is forecast twice at 80%: 2.2 [2, 2.4] in prediction 1 and 2.2 [2, 2.4] in prediction 2"),
    ([TRAJECTORY, TRAJECTORY], "val_loss@50% is forecast twice at 80%: 2.6 [2.4, 2.8] in prediction 1 (a trajectory) "
                               "and 2.6 [2.4, 2.8] in prediction 2 (a trajectory)"),
])
def test_one_point_forecast_twice_is_refused_naming_both_places(texts, says):
    from logbook.promises.predictions import merge_stated_twice, parse_prediction_syntax

    with pytest.raises(UsageError) as e:
        merge_stated_twice([parse_prediction_syntax(t) for t in texts])
    assert (e.value.message, e.value.hint) == (says, "state each forecast once: keep the one you mean")


def test_a_lone_point_that_its_trajectory_states_too_is_kept_once_in_the_trajectory_with_a_warning():
    from logbook.promises.predictions import merge_stated_twice, parse_prediction_syntax

    items = [parse_prediction_syntax(t) for t in ("loss@final < 3", TRAJECTORY, "val_loss@final ≈ 2.2 [2.0, 2.4] 80%")]
    kept, warnings = merge_stated_twice(items)
    assert kept == items[:2]
    assert warnings == ["prediction 3 (val_loss@final ≈ 2.2 [2, 2.4] 80%) is also a point of the trajectory: it is "
                        "kept once, in the trajectory, and scored once"]
