"""One live change re-applied after a restart is one change: in the deviations, the report and the review queue."""

from __future__ import annotations

from scoring_helpers import make_prereg, project_of, story_clock, write_record  # noqa: F401  (story_clock: a fixture)

from logbook.chronicle.report import report_data
from logbook.chronicle.review import review_queue
from logbook.eventlog.sink import EventSink, MetricsWriter
from logbook.runs.facts import load_facts
from logbook.proof.scorecard import evaluate


def _killed_after_a_live_change(project, clock, pid: str, run: str = "live") -> None:
    """`logbook set RUN lr_scale=0.8 --wait` applied at step 13, a SIGKILL at 16, the change re-applied at 10."""
    write_record(project, run, pid)
    d = project.run_dir(run)
    m = MetricsWriter(d, flush_every=1000)
    s1 = EventSink(d, run, 1)
    s1.emit("run_started", step=0, total_steps=30, prereg_id=pid)
    change = dict(key="lr_scale", old=1.0, new=0.8, who="Ada Tester", source="live", reason="loss too noisy",
                  request_id="req-1", plan={"rule": None, "follows": False})
    for step in range(1, 17):
        m.write({"step": step, "attempt": 1, "time": clock.advance(1.0), "loss": 4.0})
        if step == 10:
            s1.emit("checkpoint_saved", step=10, path="ckpt/10", blocking_s=0.1)
        if step == 13:
            s1.emit("hparam_change", step=13, **change)
    m.flush()
    clock.advance(3.0)
    s2 = EventSink(d, run, 2)
    s2.emit("restart", step=10, cause="signal", signal=9, prev_attempt=1, resumed_from_step=10, failed_at_step=16,
            steps_lost=6)
    s2.emit("run_started", step=10, total_steps=30, prereg_id=pid, resumed_from_step=10)
    s2.emit("hparam_change", step=10, **{**change, "reapplied": True})
    for step in range(11, 31):
        m.write({"step": step, "attempt": 2, "time": clock.advance(1.0), "loss": 3.0})
    m.close()
    s2.emit("run_finished", step=30)


def test_a_live_change_re_applied_after_a_restart_is_one_change_everywhere(logbook_repo, story_clock):
    project = project_of(logbook_repo)
    pid = make_prereg(project, ["lr_changes@final == 1", "restarts@final == 1"])
    _killed_after_a_live_change(project, story_clock, pid)
    card = evaluate(project, "live")
    lives = [d for d in card.deviations if d["kind"] == "live_change"]
    assert len(lives) == 1 and lives[0]["entry"] == "live:2"
    assert lives[0]["text"].endswith("re-applied after a restart at step 10 (the same change)")
    assert {p.text: p.status for p in card.predictions}["lr_changes@final == 1"] == "confirmed"

    data = report_data(project, "live")
    by_hand = {r["what"]: r["manual"] for r in data["interventions"]}
    assert by_hand["hyperparameter changes"] == 1
    assert [(c["key"], c["step"]) for c in data["changes"]] == [("lr_scale", 13)]

    queue = [i for i in review_queue(project, run="live") if i.kind == "hparam_change"]
    assert [i.id for i in queue] == ["live:2"]
    (only,) = load_facts(project, "live").live_changes()  # the one place the views read it from
    assert (only["event"]["step"], only["reapplied_at"]) == (13, [10])


def test_the_same_request_applied_again_without_the_flag_is_still_one_change(logbook_repo, story_clock):
    """Logs written before the trainer marked re-applications: the request id, key and value say it is the same."""
    project = project_of(logbook_repo)
    pid = make_prereg(project, ["restarts@final == 1"])
    _killed_after_a_live_change(project, story_clock, pid)
    facts = load_facts(project, "live")
    for e in facts.events:
        e.get("data", {}).pop("reapplied", None)
    facts._again = None
    assert [c["reapplied_at"] for c in facts.live_changes()] == [[10]]
    assert facts.count("lr_changes") == 1


def test_which_change_a_live_change_applies_again_is_decided_by_its_flag_or_its_request_key_and_value():
    """`reapplies` over one run's changes, in order: the trainer's `reapplied` flag finds the change by key and
    value; an older log's change is the same one only with the same request, key and value; a new request, another
    key or another value is a change of its own, and so is one with no request id to match."""
    from logbook.runs.facts import reapplies

    def ch(seq, source="live", request=None, key="lr_scale", new=0.8, flag=None):
        data = {"source": source, "key": key, "new": new}
        data.update({"request_id": request} if request else {})
        data.update({"reapplied": flag} if flag is not None else {})
        return {"kind": "hparam_change", "seq": seq, "data": data}

    run = [(ch(1, request="r1"), None), (ch(2, source="config", request="r1"), None),
           (ch(3, request="r1"), 1),                          # an older log: the same request, key and value
           (ch(4, flag=True), 1), (ch(5, request="r9", flag=True), 1),  # flagged: found by key and value
           (ch(6, source="advice", request="a1", key="wd", new=0.1), None), (ch(7, source="advice", request="a1",
                                                                                 key="wd", new=0.1), 6),
           (ch(8, request="r2", new=0.5), None), (ch(9), None), (ch(10, flag=True, key="wd", new=0.2), None),
           (ch(11), None),                                    # no request id: nothing to match, never remembered
           (ch(12, request="r3"), None),                      # the same value asked for again: a new change
           (ch(13, request="r4", new=0.7), None), (ch(14, request="r4", key="wd", new=0.7), None),
           (ch(15, request="r5", new=0.6), None), (ch(16, request="r5", new=0.65), None),
           (ch(17, request="r5", new=0.65), 16)]
    seen: dict = {}
    assert [(e["seq"], reapplies(e, seen)) for e, _ in run] == [(e["seq"], want) for e, want in run]
