"""The forgeries that need no third party, done as a forger with push rights would: exit 4 on a fresh clone.

Each test shares a logbook through a bare origin between clones with their
own identities, rewrites what a forger would (logs re-chained with the
project's own chain code, commits amended or rebuilt with plumbing), pushes
with `--force`, and checks that a FRESH clone's `logbook verify` exits 4 naming
the record, the proof that failed and what to do. Cases are the issue's
numbers (see docs/trust.md).
"""

from __future__ import annotations

from forger import append_forged, fold_into, force_push, json_out, read_log
from scoring_helpers import make_prereg, story_clock, story_run  # noqa: F401  (story_clock is a fixture)
from team import make_team

from logbook.core.project import open_project
from logbook.records.sink import EventSink

LOG = "entries/runs/qknorm/events.jsonl"


def _failed_run(team, clock) -> str:
    """ada preregisters, runs qknorm, which fails after its restart; pushed; everyone pulls."""
    ada = team["ada"]
    project = open_project(ada.path)
    pid = make_prereg(project, ["loss@final < 4", "restarts@final == 1"])
    run_dir = story_run(project, clock, "qknorm", pid, finish=False, author="Ada <ada@lab.example>")
    EventSink(run_dir, "qknorm", 2).emit("run_failed", step=90, reason="restarts exhausted", attempts=2)
    ada.commit()
    ada.push()
    for c in team.clones.values():
        if c is not ada:
            assert c.pull("rebase").returncode == 0
    return pid


def _fresh_verify(team, name: str = "fresh"):
    fresh = team.join(name)
    return fresh, fresh.cli("verify")


def test_case4_a_rechained_run_finished_after_run_failed_is_exit_4_on_a_fresh_clone(tmp_path, story_clock):
    team = make_team(tmp_path, ["ada", "mallory"])
    _failed_run(team, story_clock)
    mallory = team["mallory"]
    log = mallory.path / LOG
    n = len(read_log(log))
    append_forged(log, "run_finished", {"final_loss": 3.0, "val_loss": 3.2})
    assert mallory.cli("verify", "--full").exit_code == 4  # the chain itself is intact: only the schema catches it
    fold_into(mallory)
    force_push(mallory)
    _, res = _fresh_verify(team)
    assert res.exit_code == 4, res.output
    assert f"{LOG}: line {n + 1} is a run_finished event after the run failed (line {n}, run_failed)" in res.output
    assert "hint:" in res.stderr and "acknowledge" in res.stderr


def test_case4_a_resumed_run_may_start_again_after_run_failed_and_finish(tmp_path, story_clock):
    team = make_team(tmp_path, ["ada"])
    _failed_run(team, story_clock)
    ada = team["ada"]
    run_dir = ada.path / "entries/runs/qknorm"
    s = EventSink(run_dir, "qknorm", 3)
    s.emit("run_failed", step=90, reason="the resumed launch never started")  # a launch that failed at once
    s.emit("restart", step=90, cause="signal", prev_attempt=2, next_attempt=3)
    s.emit("run_started", step=90, total_steps=100, world_size=2)
    s.emit("run_finished", step=100, final_loss=3.0)
    ada.commit()
    ada.push()
    _, res = _fresh_verify(team)
    assert res.exit_code == 0, res.output


def test_case4_a_forged_outcome_line_is_exit_4_and_the_chronicle_keeps_the_scorecard_record(tmp_path, story_clock):
    team = make_team(tmp_path, ["ada", "mallory"])
    _failed_run(team, story_clock)
    mallory = team["mallory"]
    mallory.ok("outcome", "qknorm")
    mallory.commit()
    mallory.push()
    log = mallory.path / LOG
    before = log.read_bytes()
    append_forged(log, "outcome", {"counts": {"confirmed": 2, "refuted": 0, "inconclusive": 0},
                                   "prereg_id": "x", "run_state": "finished"})
    fold_into(mallory)
    force_push(mallory)
    _, res = _fresh_verify(team)
    assert res.exit_code == 4, res.output
    n = before.count(b"\n") + 1
    assert f"{LOG}: line {n} is an outcome event that no scorecard record names" in res.output
    problems = json_out(team["fresh"].cli("verify", "--json"))["problems"]
    assert [(p["kind"], p["line"]) for p in problems] == [("outcome_in_log", n)]
