"""One run's facts read from its folder: what its attempts said at their start, how far it got, how it ended.

The run is written through `EventSink` and `MetricsWriter`, as the trainer
writes it; the run record is the launcher's.
"""

from __future__ import annotations

from scoring_helpers import make_prereg, project_of, story_clock, write_record  # noqa: F401  (story_clock: a fixture)

from logbook.eventlog.sink import EventSink, MetricsWriter
from logbook.runs.facts import load_facts


def _run(project, clock, run: str, upto: int, finish_at: int | None = None, world_size: int = 0) -> None:
    """Two attempts: the first states the preregistration, snapshot and world size, the second states none of them
    (`world_size`: 0, which no run has, by default); the loss is logged past the last event's step."""
    d = project.run_dir(run)
    m = MetricsWriter(d, flush_every=1000)
    EventSink(d, run, 1).emit("run_started", step=0, total_steps=40, world_size=4, prereg_id="p-first",
                              snapshot_commit="a" * 40)
    for step in range(1, upto + 1):
        m.write({"step": step, "attempt": 1 if step <= 5 else 2, "time": clock.advance(1.0), "loss": 3.0})
        if step == 5:
            m.flush()
            s2 = EventSink(d, run, 2)
            s2.emit("restart", step=5, cause="signal", signal=9, prev_attempt=1, resumed_from_step=5)
            s2.emit("run_started", step=5, total_steps=40, world_size=world_size, prereg_id=None, snapshot_commit=None)
    m.close()
    if finish_at is not None:
        EventSink(d, run, 2).emit("run_finished", step=finish_at)


def test_an_attempt_that_states_nothing_keeps_what_an_earlier_one_stated(logbook_repo, story_clock):
    project = project_of(logbook_repo)
    _run(project, story_clock, "r", upto=12)
    f = load_facts(project, "r")
    assert (f.prereg_id, f.snapshot_commit, f.world_size, f.total_steps) == ("p-first", "a" * 40, 4, 40)
    _run(project, story_clock, "shrunk", upto=12, world_size=1)  # resumed on one device
    assert load_facts(project, "shrunk").world_size == 1


def test_a_run_reached_the_furthest_step_its_loss_or_its_events_name_and_a_finished_one_its_last(
        logbook_repo, story_clock):
    project = project_of(logbook_repo)
    _run(project, story_clock, "going", upto=12)
    going = load_facts(project, "going")
    assert (going.state, going.last_step) == ("running", 12)  # the loss went past the last event (step 5)
    _run(project, story_clock, "done", upto=12, finish_at=11)
    done = load_facts(project, "done")
    assert (done.state, done.last_step) == ("finished", 11)  # what the run itself says it finished at


def test_a_run_whose_log_ends_without_a_word_takes_its_ending_from_the_record(logbook_repo, story_clock):
    project = project_of(logbook_repo)
    pid = make_prereg(project, ["loss@final < 4"])
    rec = write_record(project, "r", pid, status="failed")
    _run(project, story_clock, "r", upto=12)
    assert load_facts(project, "r").state == "running"  # read without the record
    failed = load_facts(project, "r", rec)
    assert (failed.state, failed.last_step) == ("failed", 12)
