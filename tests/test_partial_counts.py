"""A count taken before its point is reached: which verdicts it can already settle, and which it must leave open.

Counts only grow. A run still short of `restarts@final` that has already
restarted three times has refuted `<= 2` and confirmed `>= 2`, whatever comes
next; one that has restarted once has settled neither. `judge` says which, on
measurements built by hand, with the same words the scorecard prints.
"""

from __future__ import annotations

import pytest

from logbook.promises.predictions import parse_prediction
from logbook.runs.facts import Measurement
from logbook.scoring.outcome import judge

SHORT = "the run has not reached its last step"
GROW = "before the point, and counts only grow"


def _partial(value: float, missing: str | None = SHORT) -> Measurement:
    return Measurement(value, 12, "restart events up to step 12", missing=missing, partial=True)


@pytest.mark.parametrize("text, value, want", [
    # a point forecast: refuted once the count is past its interval's top, open until then
    ("restarts@final ≈ 2 [1, 3] 80%", 4, ("refuted", False, "already 4 before the point, above the interval, and counts only grow")),
    ("restarts@final ≈ 2 [1, 3] 80%", 3, ("inconclusive", False, SHORT)),
    # at most: refuted once broken, for good; `==` only from above, since from below it may still be met
    ("restarts@final <= 2", 3, ("refuted", False, f"already 3 {GROW}")),
    ("restarts@final < 2", 3, ("refuted", False, f"already 3 {GROW}")),
    ("restarts@final == 2", 3, ("refuted", False, f"already 3 {GROW}")),
    ("restarts@final <= 2", 2, ("inconclusive", False, SHORT)),
    ("restarts@final < 2 ± 1", 3, ("refuted", False, f"already 3 {GROW}")),  # at its tolerance's strict end
    ("restarts@final < 2 ± 1", 2, ("inconclusive", False, SHORT)),
    ("restarts@final == 2 ± 1", 3, ("inconclusive", False, SHORT)),
    ("restarts@final == 2", 1, ("inconclusive", False, SHORT)),
    # at least: confirmed as soon as reached, and within its tolerance as soon as there
    ("restarts@final >= 2", 3, ("confirmed", False, f"already 3 {GROW}")),
    ("restarts@final > 1", 3, ("confirmed", False, f"already 3 {GROW}")),
    ("restarts@final > 1 ± 1", 1, ("confirmed", True, f"already 1 {GROW}")),
    ("restarts@final >= 2", 1, ("inconclusive", False, SHORT)),
    # not equal: settled once past the value, open at it
    ("restarts@final != 0", 1, ("confirmed", False, f"already 1 {GROW}")),
    ("restarts@final != 0", 0, ("inconclusive", False, SHORT)),
])
def test_a_count_short_of_its_point_settles_only_what_more_events_cannot_change(text, value, want):
    assert judge(parse_prediction(text), _partial(value)) == want


def test_an_open_verdict_gives_the_measurements_reason_or_none():
    for text, value in (("restarts@final != 0", 0), ("restarts@final ≈ 2 [1, 3] 80%", 2)):
        assert judge(parse_prediction(text), _partial(value, missing=None)) == ("inconclusive", False, "")


def test_a_final_measurement_is_confirmed_or_refuted_with_no_reason_and_no_value_is_inconclusive():
    p = parse_prediction("restarts@final < 2 ± 1")
    assert judge(p, Measurement(1.0, 30)) == ("confirmed", False, "")
    assert judge(p, Measurement(2.0, 30)) == ("confirmed", True, "")
    assert judge(p, Measurement(3.5, 30)) == ("refuted", False, "")
    assert judge(p, Measurement(missing="no restart events were logged")) == (
        "inconclusive", False, "no restart events were logged")
    assert judge(p, Measurement()) == ("inconclusive", False, "no value")
