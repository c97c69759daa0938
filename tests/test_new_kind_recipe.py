"""The recipe in docs/architecture.md, checked: a new attempt-ending kind needs the registry entry and nothing else.

Kinds are registered in-process, as a plugin would, and no other file is
touched: `node_drained` ends its attempt the way a preemption does (the node
is taken away after a save), and `gpu_lost` ends it in a way the registry has no
words for. Every reader that asks about attempts, endings, goodput, lineage,
incidents and the one-line summary must handle both: a `node_drained` exactly
as it would a `preempted` at the same moment, and a `gpu_lost` by its own
summary, never by another ending's words (lineage once showed such a kind as a hang).
A third, `batch_dropped`, is routine, reviewable and counted, and is registered
only after every reader was imported: the chronicle's routine line, the review
queue and the run's counts must still find it (they once kept copies of the
registry's lists made at import, which a later kind was missing from).
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from chronicle_helpers import clock, project_of, sink  # noqa: F401  (clock is a fixture)

from logbook.chronicle.build import day_path, render_chronicle
from logbook.chronicle.report import incidents
from logbook.chronicle.review import review_queue
from logbook.launch.watch import event_line
from logbook.eventlog.kinds import (
    KINDS, Field, Kind, ends_attempt, ending, kinds_where, may_follow_end, reference_markdown, register,
    registry_version, summary,
)
from logbook.eventlog.runends import check_run_log
from logbook.eventlog.sink import EventSink
from logbook.runs.attempt_ends import RunHistory, classify_restart
from logbook.runs.facts import RunFacts, load_facts
from logbook.runs.goodput import goodput_report
from logbook.runs.lineage import run_lineage
from logbook.runs.status import is_quiet
from logbook.scoring.progress import since_last

T0 = datetime(2026, 11, 30, tzinfo=timezone.utc)

NODE_DRAINED = Kind(
    "node_drained", "the scheduler drained the node: the attempt saved and gave the node back", "node drained",
    incident=True, ends_attempt=2, ending="preempted", run_state="preempted", console=True,
    summary=lambda e: f"node {e.data.get('node', '?')} drained, saved at step {e.data.get('saved_step')}",
    fields=(Field("node", "str", "the node drained"), Field("saved_step", "int", "the step saved on the way out")))
GPU_LOST = Kind(
    "gpu_lost", "a GPU fell off the bus; the attempt exited", "GPU lost",
    incident=True, ends_attempt=2, ending="hardware",
    summary=lambda e: f"GPU {e.data.get('gpu', '?')} fell off the bus (Xid {e.data.get('xid', '?')})",
    fields=(Field("gpu", "int", "the device"), Field("xid", "int", "the driver's error code")))

BATCH_DROPPED = Kind(
    "batch_dropped", "the data loader dropped a corrupt batch and trained on the next one", "batch dropped",
    routine=True, reviewable=True, counted_as="skipped_steps",
    summary=lambda e: f"batch {e.data.get('batch', '?')} dropped: {e.data.get('reason') or 'no reason recorded'}",
    fields=(Field("batch", "int", "the batch index dropped"), Field("reason", "str", "why, in the loader's words")))


@pytest.fixture
def new_kinds():
    undo = [register(NODE_DRAINED), register(GPU_LOST)]
    yield
    for u in undo:
        u()
    assert "node_drained" not in KINDS and "gpu_lost" not in KINDS


def _write_run(run_dir, ending_kind: str, **payload) -> None:
    """Attempt 1 saves at step 5 and ends at step 8 by `ending_kind`; attempt 2 resumes and finishes at 12."""
    one = EventSink(run_dir, "r1", attempt=1)
    one.emit("run_started", step=0, total_steps=12)
    one.emit("checkpoint_saved", step=5, blocking_s=0.5)
    one.emit(ending_kind, step=8, **payload)
    two = EventSink(run_dir, "r1", attempt=2)
    two.emit("restart", step=5, cause="preempted", prev_attempt=1, resumed_from_step=5, steps_lost=3)
    two.emit("run_started", step=5, total_steps=12, resumed_from_step=5)
    two.emit("run_finished", step=12)


def test_registering_a_kind_answers_the_registrys_questions(new_kinds):
    assert "node_drained" in kinds_where(incident=True) and "gpu_lost" in kinds_where(lambda k: k.ends_attempt)
    rec = {"kind": "node_drained", "step": 8, "attempt": 1, "data": {"node": "n7", "saved_step": 8}}
    assert (ends_attempt(rec), ending(rec)) == (2, "preempted")
    assert summary(rec) == "node n7 drained, saved at step 8"
    assert "## `node_drained`" in reference_markdown()
    with pytest.raises(ValueError, match="already registered"):
        register(NODE_DRAINED)


def test_the_strict_sink_takes_the_new_kind_and_verify_accepts_the_log(new_kinds, tmp_path):
    _write_run(tmp_path, "node_drained", node="n7", saved_step=8)
    assert check_run_log(tmp_path / "events.jsonl", "runs/r1/events.jsonl") == []


def test_lineage_names_each_ending_in_its_own_words(new_kinds, tmp_path):
    one = EventSink(tmp_path, "r1", attempt=1)
    one.emit("run_started", step=0)
    one.emit("node_drained", step=8, node="n7", saved_step=8)
    two = EventSink(tmp_path, "r1", attempt=2)
    two.emit("run_started", step=8)
    two.emit("gpu_lost", step=11, gpu=3, xid=79)
    lineage = run_lineage(tmp_path / "events.jsonl")
    assert [a.how for a in lineage] == ["preempted, saved at step 8", "GPU 3 fell off the bus (Xid 79)"]
    assert not any("hung" in a.how for a in lineage)


def test_a_restart_after_the_new_kind_is_classified_by_its_ending(new_kinds):
    drained = {"kind": "node_drained", "attempt": 1, "step": 8, "data": {"node": "n7", "saved_step": 8}}
    preempted = {"kind": "preempted", "attempt": 1, "step": 8, "data": {"saved_step": 8}}
    started = {"kind": "run_started", "attempt": 1, "step": 0, "data": {}}
    out = classify_restart(RunHistory(events=[started, drained]), 1, 8, 0.0, {})
    assert out["cause"] == "preempted"
    assert out["cause"] == classify_restart(RunHistory(events=[started, preempted]), 1, 8, 0.0, {})["cause"]


def _ev(kind, sec, attempt, step=None, **data):
    ts = (T0 + timedelta(seconds=sec)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return {"v": 1, "kind": kind, "ts": ts, "attempt": attempt, "step": step, "drill": False, "data": data}


def _run_ending_with(kind: str) -> list[dict]:
    start = T0.timestamp()
    return [
        _ev("run_started", 1, 1, 0, started_at=start),
        _ev("checkpoint_saved", 6, 1, 5, blocking_s=0.5),
        _ev(kind, 9, 1, 8, saved_step=8),
        _ev("restart", 12, 2, 8, cause="preempted", prev_attempt=1, resumed_from_step=8, downtime_s=2.0),
        _ev("run_started", 12, 2, 8, resumed_from_step=8, started_at=start + 11),
        _ev("checkpoint_saved", 16, 2, 12, blocking_s=0.5),
        _ev("run_finished", 16, 2, 12),
    ]


def test_goodput_prices_the_new_kind_as_the_ending_it_names(new_kinds):
    drained, preempted = goodput_report(_run_ending_with("node_drained")), goodput_report(_run_ending_with("preempted"))
    assert drained.attempts == preempted.attempts == 2
    assert drained.restarts == 1 and drained.wall_s == pytest.approx(16.0)
    # Attempt 1's last sign of life is the drain at 9 s, the resume at 11 s: 2 s down, not 5 s from its last save.
    assert drained.downtime_s == pytest.approx(2.0)
    assert drained.to_dict() == preempted.to_dict()


def test_reports_and_the_terminal_show_the_new_kind(new_kinds):
    events = _run_ending_with("node_drained")
    events[2]["data"]["node"] = "n7"
    facts = RunFacts(run="r1", events=[{**e, "seq": i} for i, e in enumerate(events)])
    rows = incidents(facts)
    drained = next(r for r in rows if r["kind"] == "node_drained")
    assert drained["summary"] == "node n7 drained, saved at step 8"
    assert drained["action"] == "saved and exited for requeue"  # as for a preemption: asked by ending
    assert event_line(events[2]) == "attempt 1 at step 8: node n7 drained, saved at step 8"


def test_a_terminal_kind_still_refuses_what_follows_it(new_kinds):
    # The new kinds end an attempt, not the run: anything may follow them; a finished run takes nothing more.
    assert not KINDS["node_drained"].terminal and not may_follow_end("node_drained", "run_started")
    assert not may_follow_end("run_finished", "node_drained")


def test_a_routine_reviewable_counted_kind_is_read_everywhere(logbook_repo, clock):
    project = project_of(logbook_repo)
    assert "batch_dropped" not in kinds_where(routine=True)  # asked before: a stale answer would stay cached
    version = registry_version()
    unregister = register(BATCH_DROPPED)  # the recipe's in-process step, after every reader was imported
    try:
        assert registry_version() != version and "batch_dropped" in kinds_where(routine=True)
        clock.set("2026-11-30T20:00:00")
        s = sink(project, "r1", 1)
        s.emit("run_started", step=0, total_steps=10)
        s.emit("batch_dropped", step=3, batch=3, reason="crc mismatch")
        s.emit("checkpoint_saved", step=5, blocking_s=0.5)
        s.emit("batch_dropped", step=7, batch=7, reason="crc mismatch")
        s.emit("run_finished", step=10)
        render_chronicle(project)

        day = day_path(project, "2026-11-30").read_text()
        assert ("run r1: 1 checkpoint saved, last at step 5, median blocking 0.5 s; "
                "batch dropped: 2, last at step 7.") in day
        queue = [(i.kind, i.summary) for i in review_queue(project)]
        assert queue.count(("batch_dropped", "batch 7 dropped: crc mismatch")) == 1
        assert sum(1 for kind, _ in queue if kind == "batch_dropped") == 2
        facts = load_facts(project, "r1")
        assert facts.count("skipped_steps") == 2 and "batch_dropped events" in facts.count_rule("skipped_steps")
        assert since_last(facts.events)["skips"] == 2  # a progress note's "since the last note"
        assert [is_quiet(e) for e in facts.of_kind("batch_dropped")] == [True, True]  # routine: the console skips it
    finally:
        unregister()
    assert "batch_dropped" not in KINDS and "batch_dropped" not in kinds_where(routine=True)


def test_the_registrys_kinds_is_live_and_only_register_changes_it():
    from logbook.api import Run

    undo = register(BATCH_DROPPED)
    try:
        assert KINDS["batch_dropped"] is BATCH_DROPPED and "batch_dropped" in kinds_where(reviewable=True)
        assert Run.is_kind({"kind": "batch_dropped"}, "batch_dropped")  # what a loop asks, through its one object
    finally:
        undo()
    assert "batch_dropped" not in KINDS
    with pytest.raises(TypeError):  # a kind added behind register's back would outlive kinds_where's cache
        KINDS["batch_dropped"] = BATCH_DROPPED  # type: ignore[index]
