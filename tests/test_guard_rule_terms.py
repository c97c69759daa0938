"""A guard action that carries out a contingency rule is judged against the rule's own terms, and a difference is named."""

from __future__ import annotations

import pytest

from scoring_helpers import make_prereg, project_of, story_clock, write_record  # noqa: F401  (story_clock: a fixture)

from logbook.chronicle.report import render_markdown, report_data
from logbook.chronicle.review import review_queue
from logbook.eventlog.plan import judge_against_plan
from logbook.promises.prereg import load_prereg
from logbook.eventlog.sink import EventSink, MetricsWriter
from logbook.proof.scorecard import evaluate

RULE = "loss spike > 4 sigma twice within 50 steps -> rollback 5 steps, skip 10 batches, lr x 0.9"


def _guarded_run(project, clock, pid: str) -> None:
    """Spikes at 12 and 24; the guard rolls back 5 steps and skips batches 12-24 (13: it always includes
    the latest spike), with lr × 0.9. The judgement is the one the guard itself makes (`judge_against_plan`)."""
    rules = load_prereg(project, pid).all_contingency()
    write_record(project, "g", pid)
    d = project.run_dir("g")
    s, m = EventSink(d, "g", 1), MetricsWriter(d, flush_every=1000)
    s.emit("run_started", step=0, total_steps=40, prereg_id=pid)
    action = {"kind": "rollback", "source": "guard", "metric": "loss", "z": 7.0, "nonfinite": False,
              "spike_steps": [12, 24], "step": 24, "rollback_steps": 5, "skip_batches": 13, "lr_factor": 0.9}
    plan = judge_against_plan(action, rules)
    for step in range(1, 41):
        m.write({"step": step, "attempt": 1, "time": clock.advance(1.0), "loss": 3.0})
        if step == 12:
            s.emit("divergence_detected", step=12, metric="loss", value=9.0, baseline=3.0, z=7.0, action="skip",
                   plan=judge_against_plan({**action, "kind": "skip", "spike_steps": [12], "step": 12}, rules))
            s.emit("step_skipped", step=12, reason="loss spike", metric="loss", plan={"rule": 1, "follows": True})
        if step == 24:
            s.emit("divergence_detected", step=24, metric="loss", value=9.0, baseline=3.0, z=7.0, action="rollback",
                   plan=plan)
            s.emit("rollback", step=24, from_step=23, to_step=15, steps_lost=8, batches_skipped=[12, 24], plan=plan)
            s.emit("lr_scaled", step=24, old=1.0, new=0.9, factor=0.9, reason="rule 1", plan=plan)
    m.close()
    s.emit("run_finished", step=40)


def test_a_rollback_that_carries_out_its_rule_names_the_difference_and_is_not_called_off_plan(logbook_repo, story_clock):
    project = project_of(logbook_repo)
    pid = make_prereg(project, ["rollbacks@final <= 1"], contingency=[RULE])
    _guarded_run(project, story_clock, pid)

    (dev,) = [d for d in evaluate(project, "g").deviations if d["kind"] == "off_plan"]
    assert dev["text"] == ("divergence detected (action: rollback) at step 24 carried out contingency rule 1 with a "
                           "difference: skipped 13 batches, the rule said 10; carried out as: rollback, lr scaled")
    assert "was not in the preregistered contingency plan" not in dev["text"]

    data = report_data(project, "g")
    actions = {i["kind"]: i["action"] for i in data["incidents"]}
    assert actions["rollback"] == "rollback (plan rule 1, with a difference: skipped 13 batches, the rule said 10)"
    assert actions["divergence_detected"].startswith("ladder: rollback (plan rule 1, with a difference")
    md = render_markdown(project, data, plot_link=None, pdf=True)  # what the PDF lays out
    assert "not in the plan" not in md and "skipped 13 batches, the rule said 10" in md

    summaries = [i.summary for i in review_queue(project, run="g") if i.kind == "rollback"]
    assert summaries == ["rolled back from step 23 to 15, batches 12–24 skipped "
                         "[plan rule 1, with a difference: skipped 13 batches, the rule said 10]"]


def test_an_action_no_rule_foresaw_is_still_not_in_the_plan(logbook_repo, story_clock):
    project = project_of(logbook_repo)
    pid = make_prereg(project, ["rollbacks@final <= 1"], contingency=["loss is nan -> abort"])
    _guarded_run(project, story_clock, pid)
    (dev,) = [d for d in evaluate(project, "g").deviations if d["kind"] == "off_plan" and d["step"] == 24]
    assert "at step 24 was not in the preregistered contingency plan" in dev["text"]
    actions = {i["kind"]: i["action"] for i in report_data(project, "g")["incidents"]}
    assert actions["rollback"] == "rollback (not in the plan)"


def test_a_log_written_before_the_guard_named_differences_is_judged_by_the_rules_terms_too(logbook_repo, story_clock):
    """The issue's own run: its log says only {rule: 1, follows: false}; the rule and the rollback's record say why."""
    import json

    project = project_of(logbook_repo)
    pid = make_prereg(project, ["rollbacks@final <= 1"], contingency=[RULE])
    _guarded_run(project, story_clock, pid)
    log = project.run_dir("g") / "events.jsonl"
    # Rewrite the log as the older guard wrote it (the test's own fixture, re-chained by a fresh sink).
    recs = [json.loads(x) for x in log.read_text().splitlines()]
    log.unlink()
    sinks = {}
    for r in recs:
        d = dict(r["data"])
        if isinstance(d.get("plan"), dict):
            d["plan"] = {k: v for k, v in d["plan"].items() if k != "differences"}
        sink = sinks.setdefault(r["attempt"], EventSink(project.run_dir("g"), "g", r["attempt"]))
        sink.emit(r["kind"], step=r["step"], **d)
    (dev,) = [d for d in evaluate(project, "g").deviations if d["kind"] == "off_plan"]
    assert "carried out contingency rule 1 with a difference: skipped 13 batches, the rule said 10" in dev["text"]
    actions = {i["kind"]: i["action"] for i in report_data(project, "g")["incidents"]}
    assert actions["rollback"] == "rollback (plan rule 1, with a difference: skipped 13 batches, the rule said 10)"


@pytest.mark.slow  # a real training run
def test_a_real_run_whose_guard_skips_more_batches_than_its_rule_says_names_the_difference(logbook_repo, cli):
    """Through the real trainer: spikes at 12 and 24, so the skipped range 12-24 (13 batches, the latest spike's
    included) is longer than the rule's 10. The guard's own judgement names it, and every view says it."""
    import json

    from conftest import ROOT

    from logbook.core.project import open_project
    from logbook.eventlog.runlog import iter_events

    config = logbook_repo / "micro.yaml"
    config.write_text((ROOT / "configs" / "micro-test.yaml").read_text())
    res = cli("prereg", "--title", "the guard carries out its rule", "--hypothesis", "The guard follows the plan.",
              "--predict", "loss@final < 9", "--config", str(config.relative_to(logbook_repo)),
              "--contingency", "loss spike > 4 sigma twice within 50 steps -> rollback 5 steps, skip 10 batches, lr × 0.9",
              "--json")
    assert res.exit_code == 0, res.output
    pid = json.loads(res.stdout)["id"]
    res = cli("run", "--prereg", pid, str(config), "--run-id", "wider", "guard.warmup=8", "guard.cooldown=3",
              "faults=[{kind: spike, step: 12}, {kind: spike, step: 24}]")
    assert res.exit_code == 0, res.output
    project = open_project(logbook_repo)
    events = list(iter_events(project.run_dir("wider") / "events.jsonl"))
    rollback = next(e for e in events if e["kind"] == "rollback")["data"]
    assert rollback["batches_skipped"] == [12, 24]
    assert rollback["plan"] == {"rule": 1, "follows": False, "differences": ["skipped 13 batches, the rule said 10"]}
    offs = [d["text"] for d in evaluate(project, "wider").deviations if d["kind"] == "off_plan"]
    assert any("carried out contingency rule 1 with a difference: skipped 13 batches, the rule said 10" in t for t in offs)
    assert not any("not in the preregistered contingency plan" in t for t in offs)
    actions = {i["kind"]: i["action"] for i in report_data(project, "wider")["incidents"]}
    assert actions["rollback"] == "rollback (plan rule 1, with a difference: skipped 13 batches, the rule said 10)"


def test_the_chronicle_names_the_rule_and_its_difference(logbook_repo, story_clock):
    from logbook.chronicle.build import render_chronicle

    project = project_of(logbook_repo)
    pid = make_prereg(project, ["rollbacks@final <= 1"], contingency=[RULE])
    _guarded_run(project, story_clock, pid)
    render_chronicle(project)
    text = "".join(p.read_text() for p in sorted(project.entries.glob("[0-9]*/[0-9]*/[0-9]*.md")))
    assert ("Preregistered contingency rule 1 applied here, with a difference: skipped 13 batches, the rule said 10. "
            "Recorded as a deviation.") in text


def test_an_older_logs_rollback_is_read_only_from_the_events_written_with_its_action():
    """The rollback and learning-rate change written together with an action are its terms; the same step reached
    again later (after a restart) and acted on again is another action, never borrowed."""
    from logbook.runs.facts import _recorded_rollback

    def ev(kind, step, **data):
        return {"kind": kind, "step": step, "data": data}

    events = [ev("divergence_detected", 24, action="rollback"), ev("rollback", 24, batches_skipped=[12, 24]),
              ev("lr_scaled", 24, factor=0.9), ev("checkpoint_saved", 24), ev("attempt_started", 20),
              ev("divergence_detected", 24, action="skip"), ev("divergence_detected", 24, action="rollback"),
              ev("rollback", 24, batches_skipped=[20, 24]), ev("lr_scaled", 24, factor=0.5)]
    assert _recorded_rollback(events, 0) == {"skip_batches": 13, "lr_factor": 0.9}
    assert _recorded_rollback(events, 5) == {"skip_batches": 5, "lr_factor": 0.5}
    alone = [ev("divergence_detected", 24, action="skip"), ev("attempt_started", 20), ev("divergence_detected", 24),
             ev("rollback", 24, batches_skipped=[12, 24])]
    assert _recorded_rollback(alone, 0) is None
    assert _recorded_rollback([ev("rollback", 24, batches_skipped=[12, 24])], 0) == {"skip_batches": 13, "lr_factor": 1.0}
