"""`logbook outcome`: predictions scored against what runs recorded; deviations listed; written once."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import ROOT, git
from scoring_helpers import (
    STORY_PREDICTIONS, make_prereg, project_of, sha256_of, story_clock, story_run, write_record,  # noqa: F401
)

from logbook.records import gitbind
from logbook.eventlog.chain import iter_records
from logbook.scoring.outcome import load_outcome, outcome_records
from logbook.proof.scorecard import evaluate, record_outcome


def _by_text(card):
    return {p.text: p for p in card.predictions}


def _has_outcome(project, run) -> bool:
    return bool(outcome_records(project, run))


def test_scorecard_confirms_and_refutes_from_metrics_and_events(logbook_repo, story_clock):
    project = project_of(logbook_repo)
    pid = make_prereg(project, STORY_PREDICTIONS)
    story_run(project, story_clock, "story", pid)
    card = evaluate(project, "story")
    p = _by_text(card)
    assert card.final and card.run_state == "finished" and card.last_step == 100
    assert (p["loss@final < 4"].status, p["loss@final < 4"].value, p["loss@final < 4"].at_step) == ("confirmed", 3.0, 100)
    assert p["val_loss@final < 0.5"].status == "refuted" and p["val_loss@final < 0.5"].value == pytest.approx(2.5)
    assert (p["restarts@final == 1"].status, p["restarts@final == 1"].value) == ("confirmed", 1.0)
    assert (p["spikes@final == 0"].status, p["spikes@final == 0"].value) == ("refuted", 1.0)
    assert (p["lr_changes@final == 0"].status, p["lr_changes@final == 0"].value) == ("confirmed", 0.0)
    assert card.counts == {"confirmed": 7, "refuted": 2, "inconclusive": 0}


def test_a_restart_drops_the_abandoned_steps_of_the_attempt_that_died(logbook_repo, story_clock):
    project = project_of(logbook_repo)
    pid = make_prereg(project, STORY_PREDICTIONS)
    story_run(project, story_clock, "story", pid)
    p = _by_text(evaluate(project, "story"))["loss@step:55 < 10"]
    assert p.value == pytest.approx(4.0 - 0.55)  # attempt 2 redid step 55; attempt 1's 3.9 no longer counts
    assert p.at_step == 55 and p.rule == "at step 55"


def test_a_step_without_a_value_is_not_measured_unless_the_prediction_states_a_window(logbook_repo, story_clock):
    project = project_of(logbook_repo)
    pid = make_prereg(project, [*STORY_PREDICTIONS, "val_loss@step:60 < 1", "val_loss@~60±5 < 10"])
    story_run(project, story_clock, "story", pid)
    p = _by_text(evaluate(project, "story"))
    near = p["val_loss@~60±10 < 10"]  # the preregistration said how: the nearest within 10 steps
    assert (near.status, near.at_step, near.value) == ("confirmed", 50, pytest.approx(4.0))
    assert "within 10 steps of step 60" in near.rule
    # Never a stale value from another step: the run evaluated at 50 and 75, so step 60 is not measured
    # (it was once scored "refuted" against step 50's 3.0).
    exact = p["val_loss@step:60 < 1"]
    assert (exact.status, exact.value) == ("inconclusive", None)
    assert exact.reason.startswith("not measured") and "step 60" in exact.reason and "step 50 and 75" in exact.reason
    narrow = p["val_loss@~60±5 < 10"]
    assert narrow.status == "inconclusive" and "within 5 steps of step 60" in narrow.reason


def test_a_step_whose_update_the_guard_skipped_is_scored_by_the_last_accepted_loss(logbook_repo, story_clock):
    from logbook.eventlog.sink import EventSink, MetricsWriter
    from scoring_helpers import write_record

    project = project_of(logbook_repo)
    pid = make_prereg(project, ["loss@step:10 < 4", "spikes@final == 1"])
    write_record(project, "spiky", pid)
    run_dir = project.run_dir("spiky")
    sink, m = EventSink(run_dir, "spiky", 1), MetricsWriter(run_dir, flush_every=1000)
    sink.emit("run_started", step=0, total_steps=10, prereg_id=pid)
    for step in range(1, 11):
        spike = step == 10
        m.write({"step": step, "attempt": 1, "time": story_clock.advance(1.0), "loss": 50.0 if spike else 3.0,
                 "grad_norm": 40.0 if spike else 0.8, **({"skipped": True} if spike else {})})
    sink.emit("divergence_detected", step=10, metric="loss", value=50.0, baseline=3.0, action="skip")
    sink.emit("step_skipped", step=10, reason="loss spike")
    m.close()
    sink.emit("run_finished", step=10, final_loss=50.0)
    p = _by_text(evaluate(project, "spiky"))["loss@step:10 < 4"]
    assert (p.status, p.value, p.at_step) == ("confirmed", 3.0, 9)  # the refused spike is not where the run stands


def test_counts_at_a_point_include_only_what_happened_before_the_run_passed_it(logbook_repo, story_clock):
    project = project_of(logbook_repo)
    pid = make_prereg(project, STORY_PREDICTIONS)
    story_run(project, story_clock, "story", pid)
    p = _by_text(evaluate(project, "story"))["restarts@step:40 == 0"]
    assert (p.status, p.value) == ("confirmed", 0.0)


def test_a_fraction_of_the_run_is_scored_at_its_step_and_a_tolerance_is_named(logbook_repo, story_clock):
    project = project_of(logbook_repo)
    pid = make_prereg(project, STORY_PREDICTIONS)
    story_run(project, story_clock, "story", pid)
    p = _by_text(evaluate(project, "story"))["loss@50% < 3.95 ± 0.1"]
    assert (p.status, p.within_tolerance, p.at_step, p.value) == ("confirmed", True, 50, pytest.approx(4.0))


def test_outcome_is_written_once_as_its_own_record_and_the_runs_log_is_untouched(logbook_repo, story_clock, cli):
    project = project_of(logbook_repo)
    pid = make_prereg(project, STORY_PREDICTIONS)
    run_dir = story_run(project, story_clock, "story", pid)
    log_before = sha256_of(run_dir / "events.jsonl")
    res = cli("outcome", "story", "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert sha256_of(run_dir / "events.jsonl") == log_before  # the run is its log's only writer
    assert not any(e["kind"] == "outcome" for e in iter_records(run_dir / "events.jsonl"))
    (rec,) = outcome_records(project, "story")
    assert out["event"] == f"outcome:{rec['id']}" and (run_dir / "outcomes" / f"{rec['id']}.json").is_file()
    assert rec["data"]["counts"] == out["counts"] and len(rec["data"]["predictions"]) == len(STORY_PREDICTIONS)
    saved = load_outcome(project, "story")
    assert saved["prereg_id"] == pid and saved["final"] is True and saved["event"] == out["event"]
    again = cli("outcome", "story", "--json")
    assert again.exit_code == 0 and json.loads(again.stdout)["already_recorded"] is True
    assert len(outcome_records(project, "story")) == 1  # nothing there twice


def test_a_run_still_going_gets_a_provisional_scorecard_that_is_not_written(logbook_repo, story_clock, cli):
    project = project_of(logbook_repo)
    pid = make_prereg(project, ["loss@final < 4", "spikes@final == 0", "restarts@final <= 3", "loss@step:20 < 10"])
    run_dir = story_run(project, story_clock, "story", pid, finish=False)
    before = sha256_of(run_dir / "events.jsonl")
    res = cli("outcome", "story")
    assert res.exit_code == 0, res.output
    assert "PROVISIONAL" in res.stdout and "not recorded" in res.stdout
    assert not _has_outcome(project, "story") and sha256_of(run_dir / "events.jsonl") == before
    p = _by_text(record_outcome(project, "story"))
    assert p["loss@final < 4"].status == "inconclusive" and "not reached yet" in p["loss@final < 4"].reason
    assert p["spikes@final == 0"].status == "refuted"  # a count that only grows is already past 0
    assert p["restarts@final <= 3"].status == "inconclusive"
    assert p["loss@step:20 < 10"].status == "confirmed"


def test_a_run_aborted_before_a_point_is_inconclusive_there(logbook_repo, story_clock):
    from logbook.eventlog.sink import EventSink

    project = project_of(logbook_repo)
    pid = make_prereg(project, ["loss@final < 4", "loss@step:20 < 10"])
    run_dir = story_run(project, story_clock, "story", pid, finish=False, restart=False)
    EventSink(run_dir, "story", 1).emit("run_aborted", step=60, reason="3 rollbacks", rollbacks=3)
    card = record_outcome(project, "story")
    p = _by_text(card)
    assert card.final and card.run_state == "aborted" and _has_outcome(project, "story")
    assert p["loss@final < 4"].status == "inconclusive" and "aborted at step 60" in p["loss@final < 4"].reason
    assert p["loss@step:20 < 10"].status == "confirmed"


def test_deviations_list_live_changes_off_plan_actions_config_and_code(logbook_repo, story_clock):
    project = project_of(logbook_repo)
    pid = make_prereg(project, ["loss@final < 4"])
    (logbook_repo / "train.py").write_text("print('changed after the preregistration')\n")
    snap = gitbind.snapshot_worktree(project, "story")["commit"]
    story_run(project, story_clock, "story", pid, snapshot=snap,
              deviations=["config configs/story.yaml has sha256 cccccccccccc, the preregistration recorded 000000000000"])
    card = evaluate(project, "story")
    kinds = [d["kind"] for d in card.deviations]
    assert kinds.count("live_change") == 1 and kinds.count("off_plan") == 1
    assert "config" in kinds and "code" in kinds
    live = next(d for d in card.deviations if d["kind"] == "live_change")
    assert "grad_clip 1.0 → 0.5" in live["text"] and "Ada Tester" in live["text"] and live["entry"].startswith("story:")
    assert "train.py" in card.code_diff
    off = next(d for d in card.deviations if d["kind"] == "off_plan")  # the spike and its skip: one incident
    assert off["text"].startswith("divergence detected (action: skip) at step 30") and off["text"].endswith("step skipped")
    assert not any("data.weights" in d["text"] for d in card.deviations)  # a scheduled change is in the plan


def test_a_preregistration_that_fails_verify_stops_the_outcome_and_nothing_is_written(logbook_repo, story_clock, cli):
    project = project_of(logbook_repo)
    pid = make_prereg(project, ["loss@final < 4"])
    run_dir = story_run(project, story_clock, "story", pid)
    before = sha256_of(run_dir / "events.jsonl")
    path = project.prereg_dir / f"{pid}.md"
    path.write_text(path.read_text().replace("QK-norm keeps", "QK-norm surely keeps"))
    res = cli("outcome", "story")
    assert res.exit_code == 4, res.output
    assert f"entries/prereg/{pid}.md" in res.stderr and "fails its check" in res.stderr
    assert "was edited after HEAD committed it" in res.stderr and "Traceback" not in res.output
    assert sha256_of(run_dir / "events.jsonl") == before and not _has_outcome(project, "story")
    # The library still scores it, flagged, for whoever asks it directly.
    card = evaluate(project, "story")
    assert card.verify_ok is False and any("was edited after HEAD committed it" in m for m in card.verify_problems)


def test_a_preregistration_that_cannot_be_read_is_named_with_its_first_problem_and_how_to_restore_it(
        logbook_repo, story_clock):
    from logbook.core.errors import TamperedError
    from logbook.proof.verify import verify_project

    project = project_of(logbook_repo)
    pid = make_prereg(project, ["loss@final < 4"])
    story_run(project, story_clock, "story", pid)
    (project.prereg_dir / f"{pid}.md").write_text("no front matter at all\n")
    first = verify_project(project, pid).problems[0].message
    with pytest.raises(TamperedError) as e:
        evaluate(project, "story")
    assert pid in e.value.message and "cannot be scored" in e.value.message and e.value.message.endswith(first)
    assert "`logbook verify`" in e.value.hint and "restore the record from git" in e.value.hint


def test_an_exploratory_run_is_refused_and_nothing_is_written(logbook_repo, story_clock, cli):
    project = project_of(logbook_repo)
    run_dir = story_run(project, story_clock, "explore", None, exploratory=True)
    before = sha256_of(run_dir / "events.jsonl")
    res = cli("outcome", "explore")
    assert res.exit_code == 3
    assert "exploratory" in res.stderr and "nothing to score" in res.stderr and "Traceback" not in res.output
    assert sha256_of(run_dir / "events.jsonl") == before and not _has_outcome(project, "explore")
    from logbook.core.errors import RefusedError

    with pytest.raises(RefusedError) as e:
        evaluate(project, "explore")
    assert e.value.message.startswith("run explore is exploratory") and "nothing to score" in e.value.message
    assert "`logbook prereg`" in e.value.hint and "`logbook run --prereg ID`" in e.value.hint


def test_a_run_is_scored_against_the_preregistration_its_record_names_or_failing_that_its_log(
        logbook_repo, story_clock):
    project = project_of(logbook_repo)
    pid = make_prereg(project, ["loss@final < 4"])
    write_record(project, "named", pid)
    story_run(project, story_clock, "named", None, with_record=False)  # its log does not say
    assert evaluate(project, "named").prereg_id == pid
    story_run(project, story_clock, "logged", pid, with_record=False)  # no record at all
    assert evaluate(project, "logged").prereg_id == pid


def test_a_run_whose_record_says_it_failed_is_final_and_scored_as_failed(logbook_repo, story_clock):
    project = project_of(logbook_repo)
    pid = make_prereg(project, ["loss@final < 4"])
    write_record(project, "story", pid, status="failed")
    story_run(project, story_clock, "story", pid, finish=False, with_record=False)
    card = evaluate(project, "story")
    assert (card.run_state, card.final) == ("failed", True)
    assert card.computed_at == card.computed_at.strip() and card.computed_at.startswith("2026-11-30T")


def test_an_amendment_not_in_force_at_launch_is_scored_late_and_its_contingency_does_not_judge_the_run(
        logbook_repo, story_clock):
    from datetime import datetime, timezone

    from scoring_helpers import T0

    from logbook.proof.amend import amend_prereg

    project = project_of(logbook_repo)
    from logbook.runs.run_record import RunRecord, write_run_record

    pid = make_prereg(project, ["loss@final < 4"])
    amend_prereg(project, pid, reason="a rule for spikes", seen="nothing", predictions=["spikes@final <= 1"],
                 contingency=["loss spike -> skip"], now=datetime.fromtimestamp(T0 - 1700, timezone.utc))
    # launched from a checkout that did not have the amendment yet: its record holds none in force
    write_run_record(project, RunRecord(run_id="story", created="2026-11-30T08:00:00Z", config_path="configs/story.yaml",
                                        config_hash="c" * 64, prereg_id=pid, amendments=[], status="finished"))
    story_run(project, story_clock, "story", pid, with_record=False)
    card = evaluate(project, "story")
    (late,) = [p for p in card.predictions if p.source == "amend-1"]
    assert late.late == "amendment 1 was not in force when this run started"
    assert [d["kind"] for d in card.deviations].count("off_plan") == 1  # the skip is judged by no rule


def test_an_unknown_run_is_refused_with_the_known_ones(logbook_repo, story_clock, cli):
    project = project_of(logbook_repo)
    story_run(project, story_clock, "story", make_prereg(project, ["loss@final < 4"]))
    res = cli("outcome", "stroy")
    assert res.exit_code == 3 and "unknown run" in res.stderr and "story" in res.stderr
    assert cli("outcome", "../x").exit_code == 2


def test_a_new_amendment_supersedes_the_recorded_outcome(logbook_repo, story_clock):
    from logbook.proof.amend import amend_prereg

    project = project_of(logbook_repo)
    pid = make_prereg(project, ["loss@final < 4"])
    story_run(project, story_clock, "story", pid)
    first = record_outcome(project, "story")
    amend_prereg(project, pid, reason="add the throughput promise", seen="results",
                 predictions=["tokens_per_s@final >= 1000"])
    second = record_outcome(project, "story")
    assert second.supersedes == first.event and second.event != first.event
    assert any(d["kind"] == "amendment" for d in second.deviations)
    assert load_outcome(project, "story")["event"] == second.event


def test_scoring_refuses_nothing_for_a_missing_metric_it_calls_it_inconclusive(logbook_repo, story_clock):
    project = project_of(logbook_repo)
    pid = make_prereg(project, ["mfu@final > 0.3"])
    story_run(project, story_clock, "story", pid)
    p = evaluate(project, "story").predictions[0]
    assert p.status == "inconclusive" and "no mfu was logged" in p.reason


@pytest.mark.slow
def test_a_real_tiny_run_is_scored_with_a_confirmed_and_a_refuted_prediction(logbook_repo, cli):
    from runhelpers import micro_config

    from logbook.eventlog.chain import utc_now
    from logbook.launch.launcher import config_sha256
    from logbook.runs.run_record import RunRecord, write_run_record

    project = project_of(logbook_repo)
    config = micro_config(logbook_repo, steps=12, every=4)
    git(logbook_repo, "add", "configs")
    git(logbook_repo, "commit", "-q", "-m", "micro config")
    pid = make_prereg(project, ["loss@final < 10", "val_loss@final < 0.01", "restarts@final == 0",
                                "loss@50% < 10", "skipped_steps@final == 0"], config=str(config))
    snap = gitbind.snapshot_worktree(project, "tiny")
    digest = config_sha256(config)
    write_run_record(project, RunRecord(run_id="tiny", created=utc_now(), config_path="configs/micro.yaml",
                                        config_hash=digest, prereg_id=pid, prereg_config_hash=digest, snapshot=snap))
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run([sys.executable, "-m", "trainer", "--project", str(logbook_repo), "--run", "tiny",
                           "configs/micro.yaml"], cwd=logbook_repo, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    res = cli("outcome", "tiny", "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    status = {p["text"]: p for p in out["predictions"]}
    assert out["final"] and out["run_state"] == "finished" and out["last_step"] == 12
    assert status["loss@final < 10"]["status"] == "confirmed" and status["loss@final < 10"]["at_step"] == 12
    assert status["val_loss@final < 0.01"]["status"] == "refuted" and status["val_loss@final < 0.01"]["value"] > 1
    assert status["loss@50% < 10"]["at_step"] == 6 and status["restarts@final == 0"]["status"] == "confirmed"
    assert out["deviations"] == [] and out["verify"]["ok"] is True


def test_one_guard_incident_is_one_deviation_however_many_events_carry_it_out(logbook_repo, story_clock):
    from logbook.scoring.outcome import _event_deviations
    from logbook.runs.facts import load_facts
    from logbook.eventlog.sink import EventSink

    project = project_of(logbook_repo)
    s = EventSink(project.run_dir("g"), "g", 1)
    off, on = {"rule": None, "follows": False}, {"rule": 1, "follows": True}
    s.emit("divergence_detected", step=40, action="rollback", plan=off)
    s.emit("rollback", step=30, from_step=40, to_step=30, plan=off)
    s.emit("lr_scaled", step=30, old=1.0, new=0.9, plan=off)
    s.emit("checkpoint_saved", step=35)
    s.emit("divergence_detected", step=50, action="skip", plan=on)
    s.emit("step_skipped", step=50, plan=on)
    s.emit("divergence_detected", step=60, action="skip", plan=off)
    s.emit("hparam_change", step=61, key="lr_scale", old=0.9, new=0.8, source="live", who="Ada", plan=off)
    s.emit("step_skipped", step=62, plan=off)
    devs = _event_deviations(load_facts(project, "g"))
    assert [d["kind"] for d in devs] == ["off_plan", "off_plan", "live_change", "off_plan"]
    assert devs[0]["entries"] == ["g:0", "g:1", "g:2"] and devs[0]["text"].endswith("carried out as: rollback, lr scaled")
    assert devs[1]["entry"] == "g:6" and "carried out as" not in devs[1]["text"]
    assert devs[3]["entry"] == "g:8"  # a skip after a live change is a new incident


def test_following_the_readme_records_no_false_code_change_and_a_real_one_is_named(repo, cli, story_clock):
    """init, prereg --config with an untracked config and helper, run: the run trains what was preregistered."""
    assert cli("init").exit_code == 0  # commits logbook.yaml itself
    assert "logbook.yaml" in git(repo, "ls-files")
    (repo / "configs").mkdir()
    (repo / "configs" / "x.yaml").write_text("train: {steps: 5}\n")
    (repo / "tool.py").write_text("print('helper, never committed')\n")
    (repo / "README.md").write_text("experiments, edited but not committed\n")
    project = project_of(repo)
    pid = make_prereg(project, ["loss@final < 4"], config="configs/x.yaml")
    snap = gitbind.snapshot_worktree(project, "story")["commit"]
    story_run(project, story_clock, "story", pid, snapshot=snap)
    assert not [d for d in evaluate(project, "story").deviations if d["kind"] == "code"]

    (repo / "tool.py").write_text("print('changed after the preregistration')\n")
    snap = gitbind.snapshot_worktree(project, "again")["commit"]
    story_run(project, story_clock, "again", pid, snapshot=snap)
    (code,) = [d for d in evaluate(project, "again").deviations if d["kind"] == "code"]
    assert "1 file (tool.py)" in code["text"]
    assert code == {"kind": "code", "entry": None, "step": None, "text": code["text"]}  # the fields every deviation has


def test_a_scorecard_and_its_record_name_every_field_a_reader_or_a_script_reads(logbook_repo, story_clock):
    """The scorecard's JSON, the record written for it and what a second scoring of the same outcome gives back:
    each field under its own name, with the value it stands for (an `outcome --json` reader keys on them)."""
    from logbook.proof.amend import amend_prereg
    from logbook.scoring.outcome import SCHEMA

    project = project_of(logbook_repo)
    pid = make_prereg(project, ["loss@final < 4"])
    story_run(project, story_clock, "story", pid)
    card = record_outcome(project, "story")
    d = card.to_dict()
    assert set(card.content()) == {"schema", "run", "prereg_id", "prereg_sha256", "prereg_title", "prereg_author",
                                   "prereg_created", "run_state", "final", "last_step", "total_steps", "verify",
                                   "counts", "predictions", "deviations", "code_diff"}
    assert set(d) - set(card.content()) == {"label", "computed_at", "computed_by", "event", "supersedes",
                                            "already_recorded"}
    assert (d["schema"], d["run"], d["prereg_id"], d["run_state"], d["verify"]) == (
        SCHEMA, "story", pid, "finished", {"ok": True, "problems": []})
    assert (d["last_step"], d["total_steps"], d["prereg_title"]) == (100, 100, "qk-norm keeps the loss smooth")
    assert d["deviations"] == card.deviations and d["code_diff"] == card.code_diff and d["label"] == card.label
    assert d["prereg_sha256"] == card.prereg_sha256 and len(card.prereg_sha256) == 64

    (rec,) = outcome_records(project, "story")
    # The record holds the scorecard as it stood before the record's own id (its event) existed.
    assert (rec["kind"], rec["run"], rec["step"], rec["scorecard"]) == ("outcome", "story", card.last_step,
                                                                        {**d, "event": None})
    data = rec["data"]
    assert {k: v for k, v in data.items() if k not in ("content_sha256", "predictions")} == {
        "prereg_id": pid, "prereg_sha256": card.prereg_sha256, "verify_ok": True, "verify_problems": [],
        "run_state": "finished", "counts": card.counts, "outcome_file": "entries/runs/story/outcomes",
        "supersedes": None, "computed_by": "Ada Tester <ada@example.org>",
        "deviations": [{"kind": x["kind"], "text": x["text"], "entry": x["entry"]} for x in card.deviations]}
    assert card.computed_by == "Ada Tester <ada@example.org>" and card.computed_at == rec["ts"]

    again = record_outcome(project, "story")  # nothing new: the record already written, as it was written
    assert (again.already_recorded, again.event, again.computed_at, again.computed_by, again.supersedes) == (
        True, card.event, rec["ts"], card.computed_by, None)
    amend_prereg(project, pid, reason="add the throughput promise", seen="results",
                 predictions=["tokens_per_s@final >= 1000"])
    second = record_outcome(project, "story")
    third = record_outcome(project, "story")
    assert (third.already_recorded, third.event, third.supersedes) == (True, second.event, card.event)
    assert [r["id"] for r in outcome_records(project, "story")] == [card.event.split(":")[1], second.event.split(":")[1]]


def test_a_config_other_than_the_preregistered_one_is_one_deviation_named_with_both_hashes(logbook_repo):
    from logbook.promises.prereg import load_prereg
    from logbook.runs.facts import RunFacts
    from logbook.runs.run_record import RunRecord
    from logbook.scoring.outcome import deviations

    project = project_of(logbook_repo)
    (logbook_repo / "configs").mkdir()
    (logbook_repo / "configs" / "story.yaml").write_text("train:\n  steps: 100\n")
    git(logbook_repo, "add", "-A")
    git(logbook_repo, "commit", "-q", "-m", "the config")
    prereg = load_prereg(project, make_prereg(project, ["loss@final < 4"], config="configs/story.yaml"))
    want = prereg.config["sha256"]

    def rec(config_hash, said=()):
        return RunRecord(run_id="r", created="2026-11-30T08:00:00Z", config_path="configs/story.yaml",
                         config_hash=config_hash, prereg_id=prereg.id, deviations=list(said))

    def config_devs(r):
        return [d for d in deviations(project, r, prereg, RunFacts(run="r"))[0] if d["kind"] == "config"]

    assert config_devs(rec(want)) == [] and config_devs(None) == []
    assert config_devs(rec("d" * 64)) == [{"kind": "config", "entry": None, "step": None, "text": (
        f"config configs/story.yaml has sha256 dddddddddddd, the preregistration recorded {want[:12]}")}]
    said = "config overridden on the command line: optim.lr=0.1"  # the launcher's own words: not said twice
    assert config_devs(rec("d" * 64, [said])) == [{"kind": "config", "entry": None, "step": None, "text": said}]
    assert config_devs(rec(want, [said])) == [{"kind": "config", "entry": None, "step": None, "text": said}]


def test_a_tally_counts_each_result_once_by_its_status_and_tolerance():
    from logbook.scoring.calibration import Tally

    t = Tally()
    for p in ({"status": "confirmed"}, {"status": "confirmed", "within_tolerance": True}, {"status": "refuted"},
              {"status": "inconclusive"}, {}, {"status": "confirmed", "within_tolerance": False}):
        t.add(p)
    assert (t.confirmed, t.within_tolerance, t.refuted, t.inconclusive, t.total) == (3, 1, 1, 2, 6)
    assert t.rate == 0.75 and Tally().rate is None


def test_an_amendment_made_after_results_were_seen_and_in_force_at_launch_is_a_deviation_in_its_own_words(
        logbook_repo, story_clock):
    from datetime import datetime, timezone

    from scoring_helpers import T0, write_record

    from logbook.proof.amend import amend_prereg
    from logbook.promises.prereg import load_prereg
    from logbook.runs.facts import RunFacts
    from logbook.scoring.outcome import deviations

    project = project_of(logbook_repo)
    pid = make_prereg(project, ["loss@final < 4"])
    amend_prereg(project, pid, reason="the pilot's loss was lower", seen="results",
                 predictions=["loss@final < 3.5"], now=datetime.fromtimestamp(T0 - 1800, timezone.utc))
    amend_prereg(project, pid, reason="a rule for spikes", seen="nothing", contingency=["loss is nan -> abort"],
                 now=datetime.fromtimestamp(T0 - 1700, timezone.utc))
    rec = write_record(project, "r", pid)  # both in force at launch
    prereg = load_prereg(project, pid)
    [first, _] = prereg.amendments
    out, diff = deviations(project, rec, prereg, RunFacts(run="r"))
    assert out == [{"kind": "amendment", "entry": None, "step": None,
                    "text": f"amendment 1 ({first.created}) was made after results were seen: the pilot's loss was lower"}]
    assert diff == ""  # no code snapshot to compare: no diff, said as empty text


def test_a_recorded_outcome_names_who_computed_it_from_the_repositorys_identity_and_never_a_guess(
        logbook_repo, story_clock, monkeypatch, tmp_path):
    project = project_of(logbook_repo)
    pid = make_prereg(project, ["loss@final < 4"])
    story_run(project, story_clock, "story", pid)
    story_run(project, story_clock, "other", pid)
    for var in ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL"):
        monkeypatch.delenv(var, raising=False)
    (tmp_path / "empty.gitconfig").write_text("")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(tmp_path / "empty.gitconfig"))  # no identity but the repository's
    git(logbook_repo, "config", "user.name", "Rin Repo")
    git(logbook_repo, "config", "user.email", "rin@example.org")
    monkeypatch.chdir(tmp_path)  # wherever the command runs, the repository's identity counts
    assert record_outcome(project, "story").computed_by == "Rin Repo <rin@example.org>"
    git(logbook_repo, "config", "--unset", "user.email")
    assert record_outcome(project, "other").computed_by is None  # a guessed address names nobody


def test_a_recorded_scorecard_whose_verdict_was_flipped_is_exit_4_in_verify_and_outcome(logbook_repo, story_clock,
                                                                                         cli):
    project = project_of(logbook_repo)
    pid = make_prereg(project, STORY_PREDICTIONS)
    run_dir = story_run(project, story_clock, "story", pid)
    assert cli("outcome", "story").exit_code == 0
    (rec,) = outcome_records(project, "story")
    path = run_dir / "outcomes" / f"{rec['id']}.json"
    doc = json.loads(path.read_text())
    first = doc["scorecard"]["predictions"][0]
    was = first["status"]
    first["status"] = "refuted" if was == "confirmed" else "confirmed"
    path.chmod(0o644)
    path.write_text(json.dumps(doc))
    res = cli("verify", "--json")
    assert res.exit_code == 4
    (p,) = [p for p in json.loads(res.stdout)["problems"] if p["kind"] == "scorecard_differs"]
    assert p["message"].startswith(f"scorecard outcome:{rec['id']} of run story says {first['text']}: "
                                   f"{first['status']}") and f"give {was}" in p["message"]
    assert cli("outcome", "story").exit_code == 4  # never "already recorded; nothing written"
