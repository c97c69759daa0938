"""Chaos, short version: a real run SIGKILLed five times at different moments, then audited.

The first kill goes to a torchrun worker under `logbook run` (torchrun
restarts it), which is then preempted with SIGTERM; the other four hit
direct relaunches of the trainer while it saves a checkpoint, late in its
start-up (building, restoring), just after a progress note, and in the middle
of its steps. `bench/chaos_long.py` does the same fifty times and more, with the
moments drawn at random. See `chaos_harness.py` for the invariants.
"""

from __future__ import annotations

import pytest
from chaos_harness import Chaos, audit
from lab import Lab, run_config

pytestmark = pytest.mark.slow

STEPS = 60
PLAN = ["save", "startup", "milestone", "step"]


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    lab = Lab.create(tmp_path_factory.mktemp("chaos"))
    config = lab.write_config("chaos.yaml", run_config(steps=STEPS))
    ref = lab.train("reference", config)
    assert ref.returncode == 0, ref.stderr
    chaos = Chaos(lab, "chaos", config, seed=20261130, kills=1 + len(PLAN), steps=STEPS, plan=list(PLAN)).drive()
    return chaos, audit(chaos, "reference")


def test_the_run_was_really_killed_five_times_in_different_places(result):
    chaos, report = result
    assert [k.kind for k in chaos.kills] == ["torchrun-worker", *PLAN], [k.landed for k in chaos.kills]
    assert chaos.preemptions == 1 and report.checks["finished"] == []
    assert report.traced_kills >= 3  # kills before an attempt announced itself leave no trace, by design


def test_the_killed_run_ends_with_the_weights_and_losses_of_an_uninterrupted_run(result):
    _, report = result
    assert report.checks["same result"] == []


def test_every_restart_is_in_the_event_log_exactly_once(result):
    _, report = result
    assert report.checks["log intact"] == []
    assert report.checks["restarts in the log"] == []
    assert report.restarts == report.traced_kills + 1  # the preemption is a restart too
    assert report.restart_causes == {"signal": report.traced_kills, "preempted": 1}


def test_every_restart_is_in_the_rendered_chronicle_exactly_once(result):
    _, report = result
    assert report.checks["restarts in the chronicle"] == []
    assert report.chronicle_restarts == report.restarts


def test_the_logbook_verifies_after_the_kills(result):
    _, report = result
    assert report.checks["verify"] == []


def test_no_checkpoint_that_fails_its_manifest_is_ever_loaded(result):
    _, report = result
    assert report.checks["checkpoints"] == []


def test_each_progress_note_is_written_once_whatever_the_kills(result):
    _, report = result
    assert report.checks["milestones"] == []
