"""The oracle: for drawn fault schedules of tiny real runs, every view of the record states what the schedule implies.

A schedule (`oracle_harness.schedules`) kills attempts after any step or in
the middle of a checkpoint write (background saves included), or hangs them
until the watchdog ends them, leaves live
changes for attempts before and after a kill, and can end the last attempt's
stretch with a loss spike or a NaN met by the preregistered contingency rule.
`oracle_harness.expected` works out from the schedule and the checkpoint
cadence alone what must be recorded; `logbook outcome --json`, the report's
Markdown and the rendered chronicle must say exactly that. A few schedules
here; `bench/oracle.py --examples 200` draws many.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from lab import Lab
from oracle_harness import Kill, Schedule, check, expected, schedules

pytestmark = pytest.mark.slow

_runs = itertools.count(1)


@pytest.fixture(scope="module")
def lab(tmp_path_factory) -> Lab:
    return Lab.create(tmp_path_factory.mktemp("oracle"))


@settings(max_examples=1, deadline=None, database=None, derandomize=True,
          phases=(Phase.explicit, Phase.generate),  # no shrinking: each example is a real run
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@example(Schedule(steps=14, every=4, background=False, kills=(Kill(6, False, hang=True), Kill(8, True)),
                  live_changes=(1, 2), divergence=("spike", 12)))  # issue 36's cases 1, 2 and 12 in one run
@given(schedule=schedules(max_kills=2))
def test_every_view_states_what_the_schedule_implies(lab, schedule):
    got = check(lab, f"oracle-{next(_runs)}", schedule)
    assert not got.disagreements, f"{schedule}\n" + "\n".join(got.disagreements)


def test_the_oracle_knows_a_save_cut_short_does_not_count():
    """The rules themselves, without a run: a kill inside a save resumes from the save before it."""
    s = Schedule(steps=12, every=3, background=True, kills=(Kill(6, True), Kill(6, True)), live_changes=(1, 3))
    exp = expected(s)
    assert (exp.attempts, exp.restarts, exp.resumes) == (3, 2, [3, 3])
    assert exp.reached == [(6, 9), (6, 9)]  # a background save is met by the drill while training goes on
    assert exp.live_changes == 2 and exp.final_step == 12
    s = Schedule(steps=12, every=3, background=False, kills=(Kill(7, False), Kill(9, False, hang=True)), live_changes=())
    assert expected(s).resumes == [6, 6] and expected(s).reached == [(7, 7), (9, 9)]
    assert expected(s).first_steps == [0, 6, 6]
