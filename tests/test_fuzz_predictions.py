"""Fuzzing prediction expressions: any text is parsed or refused with a UsageError, never a crash.

Random characters test the parser's edges; text assembled from the grammar's
own tokens (metric names, points, comparators, numbers with suffixes and
percent signs, tolerances, stray junk) reaches deep into it. Whatever is
accepted must read back to itself through its canonical text.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from logbook.core.errors import UsageError
from logbook.promises.predictions import METRICS, Prediction, parse_prediction, parse_prediction_syntax

FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

_metric = st.sampled_from([*sorted(METRICS), "Val_Loss", "loss2", "x", "_", "spikes ", ""])
_point = st.one_of(
    st.just(""),
    st.sampled_from(["@final", "@end", "@", "@@", "@step:", "@step:12", "@1_000", "@1,000", "@50%", "@0%",
                     "@100%", "@100.5%", "@-3", "@1e3", "@step:5%", "@finalx", "@ final", "@3.5"]),
    st.integers(-10, 10**12).map(lambda n: f"@{n}"),
    st.floats(allow_nan=True, allow_infinity=True).map(lambda x: f"@{x}%"),
)
_op = st.sampled_from(["<", "<=", ">", ">=", "==", "!=", "=", "≤", "≥", "≠", "=<", "=>", "<>", "!", "", "<<"])
_number = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(-10**30, 10**30).map(str),
    st.sampled_from(["1e400", "-1e400", "1e-400", "nan", "inf", ".5", "5.", "1_000", "1__0", "2k", "3M", "4B",
                     "5G", "6T", "7K%", "50%", "1e3k", "0x10", "1,5", "+-1", "--1", "1e", "e5", "", "12%%"]),
)
_tolerance = st.one_of(st.just(""), st.tuples(st.sampled_from(["±", "+-", "+/-", "± ", "+ /-"]), _number).map("".join))
_junk = st.one_of(st.just(""), st.text(max_size=4))
_assembled = st.tuples(_metric, _point, st.sampled_from(["", " ", "\t", "  "]), _op, st.sampled_from(["", " "]),
                       _number, st.sampled_from(["", " "]), _tolerance, _junk).map("".join)


def _parse_or_refuse(text: str) -> Prediction | None:
    try:
        return parse_prediction(text)
    except UsageError as e:
        assert e.message and isinstance(e.message, str)
        return None


@FUZZ
@given(st.text(max_size=250))
def test_random_text_is_parsed_or_refused_with_a_usage_error(text):
    _parse_or_refuse(text)


@FUZZ
@given(_assembled)
def test_text_made_of_grammar_tokens_is_parsed_or_refused_and_what_parses_round_trips(text):
    p = _parse_or_refuse(text)
    if p is None:
        return
    canonical = p.to_text()
    assert parse_prediction(canonical) == p
    assert parse_prediction(canonical).to_text() == canonical
    assert Prediction.from_dict(p.to_dict()) == p


@FUZZ
@given(st.dictionaries(st.sampled_from(["text", "metric", "op", "threshold", "tolerance", "at", "junk"]),
                       st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=30),
                                 _assembled, st.lists(st.integers(), max_size=3),
                                 st.dictionaries(st.text(max_size=5), st.integers(), max_size=2))))
def test_front_matter_predictions_are_rebuilt_or_refused_with_a_usage_error(d):
    try:
        p = Prediction.from_dict(d)
    except UsageError:
        return
    assert parse_prediction_syntax(p.to_text()) == p
