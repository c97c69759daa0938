"""The oracle over every trainer path: for fixed fault schedules, each path's record states what the schedule implies.

A Hugging Face `Trainer` script and a Lightning script with the logbook's
callback (run by hand, killed from outside, resumed by the framework's own
resume), a plain script under `logbook run --` and a two-rank torchrun under
it (SIGKILLed or preempted with a SIGTERM): `oracle_paths.expected` works
out from the schedule and the checkpoint cadence alone the restarts, their
resume steps, the steps lost, the end and the spike's step; the event log,
`logbook status --json`, `logbook ls --runs --json` and the chronicle must
say exactly that. One schedule per path here (each a real run of a few
processes); `bench/oracle.py --path all --examples N` draws many.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from lab import Lab
from oracle_paths import PathKill, PathSchedule, check, expected, path_schedules

pytestmark = pytest.mark.slow

_runs = itertools.count(1)
_fixed = settings(max_examples=1, deadline=None, database=None, derandomize=True,
                  phases=(Phase.explicit,),  # the fixed schedules only: each is a real run of several processes
                  suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@pytest.fixture(scope="module")
def lab(tmp_path_factory) -> Lab:
    return Lab.create(tmp_path_factory.mktemp("oracle-paths"))


def _check(lab: Lab, schedule: PathSchedule) -> None:
    run = f"oracle-{schedule.path}-{next(_runs)}"
    got = check(lab, run, schedule, lab.root.parent / "scratch" / run)
    assert not got.disagreements, f"{schedule}\n" + "\n".join(got.disagreements)


@_fixed
@example(PathSchedule("hf", steps=40, every=5, kills=(PathKill(7),), spike=None))  # after a save, steps lost
@given(schedule=path_schedules("hf"))
def test_a_hf_trainer_run_killed_from_outside_states_what_the_schedule_implies(lab, schedule):
    _check(lab, schedule)


@_fixed
@example(PathSchedule("lightning", steps=44, every=6, kills=(PathKill(8),), spike=43))  # a kill, then a skipped spike
@given(schedule=path_schedules("lightning"))
def test_a_lightning_run_killed_from_outside_states_what_the_schedule_implies(lab, schedule):
    _check(lab, schedule)


@_fixed
@example(PathSchedule("wrapped", steps=12, every=4, kills=(PathKill(6), PathKill(9, "SIGTERM"))))
@given(schedule=path_schedules("wrapped"))
def test_a_wrapped_script_killed_and_preempted_states_what_the_schedule_implies(lab, schedule):
    _check(lab, schedule)


TORCHRUN_SCHEDULE = PathSchedule("torchrun", steps=10, every=3, kills=(PathKill(7),))


def test_a_wrapped_torchrun_with_a_rank_killed_states_the_step_it_reached_and_the_steps_lost(lab):
    """Its restarts, resume steps and end, and the step the killed rank 0 reached, read from the Run's heartbeat."""
    got = check(lab, "oracle-torchrun-fixed", TORCHRUN_SCHEDULE, lab.root.parent / "scratch" / "torchrun-fixed")
    assert not got.disagreements, "\n".join(got.disagreements)


def test_the_path_oracle_resumes_from_the_checkpoint_at_or_before_the_kill():
    """The rules themselves, without a run: a kill after a save's step keeps that save."""
    exp = expected(PathSchedule("wrapped", steps=12, every=4, kills=(PathKill(8), PathKill(11, "SIGTERM"))))
    assert (exp.attempts, exp.restarts, exp.resumes, exp.lost) == (3, 2, [8, 8], [0, 3])
    assert exp.causes == ["signal", "preempted"] and exp.final_step == 12
    exp = expected(PathSchedule("hf", steps=40, every=5, kills=(PathKill(3),), spike=38))
    assert (exp.resumes, exp.lost, exp.causes, exp.spikes) == ([0], [3], ["unknown"], [38])
