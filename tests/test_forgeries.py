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
from logbook.eventlog.sink import EventSink

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
    # What the chronicle reads (once the finding is acknowledged, it renders): the scorecard record, never the line.
    from logbook.eventlog.timeline import merged

    items = [it.rec for it in merged(open_project(team["fresh"].path), runs=["qknorm"], notes=False)]
    assert [r.get("seq") for r in items if r and r.get("kind") == "outcome" and "seq" in r] == []
    assert len([r for r in items if r and r.get("kind") == "outcome"]) == 1  # the record


# --- case 3: a restart dropped from the log ------------------------------------------------------

def test_case3_a_restart_dropped_from_the_log_and_folded_into_its_commit_is_exit_4_on_a_fresh_clone(
        tmp_path, story_clock):
    from forger import rechain

    team = make_team(tmp_path, ["ada", "mallory"])
    _failed_run(team, story_clock)
    mallory = team["mallory"]
    log = mallory.path / LOG
    recs = read_log(log)
    (restart,) = [r for r in recs if r["kind"] == "restart"]
    rechain(log, [r for r in recs if r is not restart])  # the chain verifies line by line again
    mallory.git("commit", "-q", "--amend", "--no-edit", "-a")  # folded into the run's own commit
    force_push(mallory)
    fresh, res = _fresh_verify(team)
    assert res.exit_code == 4, res.output
    line = [r["kind"] for r in read_log(fresh.path / LOG)].index("run_started", 1) + 1
    assert (f"{LOG}: line {line}: attempt 2 started after attempt 1, but no restart line says how attempt 1 ended"
            in res.output)


def test_case3_attempts_that_died_before_their_first_line_owe_nothing_and_their_restarts_verify(
        tmp_path, story_clock):
    team = make_team(tmp_path, ["ada"])
    _failed_run(team, story_clock)  # attempt 1, a restart, attempt 2, run_failed
    ada = team["ada"]
    s = EventSink(ada.path / "entries/runs/qknorm", "qknorm", 4)  # attempt 3 died before writing anything
    s.emit("restart", step=90, cause="unknown", prev_attempt=2, next_attempt=4)
    s.emit("run_started", step=90, total_steps=100)
    s.emit("run_finished", step=100, final_loss=3.0)
    ada.commit()
    ada.push()
    _, res = _fresh_verify(team)
    assert res.exit_code == 0, res.output


# --- case 5: created times, whatever the commit order --------------------------------------------

def test_case5_a_run_made_first_and_history_reordered_is_exit_4_by_the_records_own_times(tmp_path, story_clock):
    from datetime import datetime, timezone

    from scoring_helpers import write_record

    team = make_team(tmp_path, ["ada", "mallory"])
    mallory = team["mallory"]
    project = open_project(mallory.path)
    base = mallory.git("rev-parse", "HEAD").stdout.strip()
    write_record(project, "early", None, exploratory=True)  # created 2026-11-30T08:00
    mallory.commit("an exploratory run")
    pid = make_prereg(project, ["loss@final < 4"], now=datetime(2026, 11, 30, 9, 0, tzinfo=timezone.utc))
    prereg_commit = mallory.git("rev-parse", "HEAD").stdout.strip()
    # The forger reorders: the preregistration first (its commit and trailers kept), then the run, naming it.
    mallory.git("reset", "-q", "--hard", base)
    mallory.git("cherry-pick", prereg_commit)
    write_record(project, "early", pid)
    EventSink(project.run_dir("early"), "early", 1).emit("run_started", step=0, prereg_id=pid, total_steps=10)
    mallory.commit("run early")
    force_push(mallory)
    fresh, res = _fresh_verify(team)
    assert res.exit_code == 4, res.output
    assert ("run early answers to " + pid + ", but the preregistration's `created` is later than the run's") in res.output
    (p,) = json_out(fresh.cli("verify", "--json"))["problems"]
    assert (p["kind"], p["path"]) == ("prereg_after_run", "entries/runs/early/run.json")
    assert "preregister anew" in res.stderr


# --- case 6: code snapshots deleted on the origin, spread by fetch --prune -------------------------

def _run_with_snapshot(team, clock, run="qknorm") -> str:
    from logbook.records import gitbind

    ada = team["ada"]
    project = open_project(ada.path)
    pid = make_prereg(project, ["loss@final < 4"])
    snap = gitbind.snapshot_worktree(project, run)["commit"]
    story_run(project, clock, run, pid, snapshot=snap, author="Ada <ada@lab.example>")
    ada.commit()
    ada.git("push", "-q")  # plain push: the branch and the snapshots (`logbook init`'s push refspecs)
    return snap


def test_case6_a_snapshot_deleted_on_the_origin_is_exit_4_everywhere_and_a_clone_that_has_it_restores_it(
        tmp_path, story_clock):
    team = make_team(tmp_path, ["ada", "bo", "mallory"])
    snap = _run_with_snapshot(team, story_clock)
    bo, mallory = team["bo"], team["mallory"]
    assert bo.pull("merge").returncode == 0
    assert bo.cli("verify").exit_code == 0
    mallory.git("fetch", "-q")
    mallory.git("push", "-q", "origin", ":refs/logbook/snapshots/qknorm")  # the forger deletes it on the origin
    bo.git("fetch", "-q", "--prune")  # and a teammate's routine fetch spreads the deletion
    assert bo.git("rev-parse", "-q", "--verify", "refs/logbook/snapshots/qknorm", check=False).returncode != 0
    res = bo.cli("verify")
    assert res.exit_code == 4, res.output
    assert f"run qknorm's code snapshot refs/logbook/snapshots/qknorm (commit {snap[:12]}" in res.output
    assert "is missing" in res.output and "logbook init" in res.stderr
    _, res = _fresh_verify(team, "fresh1")
    assert res.exit_code == 4 and "snapshot_missing" in team["fresh1"].cli("verify", "--json").stdout
    # ada's clone never fetched with --prune: `logbook init` there pushes it back, and every clone recovers.
    out = team["ada"].ok("init").stderr
    assert "restored 1 code snapshot that origin lacked: qknorm" in out
    bo.git("fetch", "-q")
    assert bo.cli("verify").exit_code == 0
    _, res = _fresh_verify(team, "fresh2")
    assert res.exit_code == 0, res.output


def test_case6_a_snapshot_moved_to_other_code_is_exit_4_on_a_fresh_clone(tmp_path, story_clock):
    team = make_team(tmp_path, ["ada", "mallory"])
    snap = _run_with_snapshot(team, story_clock)
    mallory = team["mallory"]
    mallory.git("fetch", "-q")
    other = mallory.git("rev-parse", "HEAD~1").stdout.strip()
    mallory.git("push", "-q", "--force", "origin", f"{other}:refs/logbook/snapshots/qknorm")
    fresh, res = _fresh_verify(team)
    assert res.exit_code == 4, res.output
    assert f"points at {other[:12]}, but entries/runs/qknorm/run.json names {snap[:12]}" in res.output


def test_case6_a_snapshot_moved_with_its_run_record_rewritten_is_exit_4_by_the_log(tmp_path, story_clock):
    import json

    from logbook.records import gitbind

    team = make_team(tmp_path, ["ada", "mallory"])
    ada = team["ada"]
    project = open_project(ada.path)
    pid = make_prereg(project, ["loss@final < 4"])
    snap = gitbind.snapshot_worktree(project, "qknorm")["commit"]
    from scoring_helpers import write_record

    write_record(project, "qknorm", pid, snapshot=snap)
    sink = EventSink(project.run_dir("qknorm"), "qknorm", 1)
    sink.emit("run_started", step=0, snapshot_commit=snap, prereg_id=pid, total_steps=10)
    sink.emit("run_finished", step=10, final_loss=3.0)
    ada.commit()
    ada.git("push", "-q")
    mallory = team["mallory"]
    assert mallory.pull("rebase").returncode == 0
    other = mallory.git("rev-parse", "HEAD~2").stdout.strip()
    record = mallory.path / "entries/runs/qknorm/run.json"
    data = json.loads(record.read_text())
    data["snapshot"]["commit"] = other  # the run record rewritten, folded into its commit, and the ref moved
    record.write_text(json.dumps(data))
    fold_into(mallory)
    force_push(mallory)
    mallory.git("push", "-q", "--force", "origin", f"{other}:refs/logbook/snapshots/qknorm")
    _, res = _fresh_verify(team)
    assert res.exit_code == 4, res.output
    assert f"run_started event names code snapshot {snap[:12]}, but entries/runs/qknorm/run.json names {other[:12]}" \
        in res.output


def test_case6_a_run_whose_snapshot_does_not_carry_its_preregistration_is_exit_4(tmp_path, story_clock):
    """The post-hoc preregistration (case 1) without a TSA: the run's code was snapshotted before the record existed."""
    from logbook.records import gitbind

    team = make_team(tmp_path, ["ada"])
    ada = team["ada"]
    project = open_project(ada.path)
    snap = gitbind.snapshot_worktree(project, "qknorm")["commit"]  # launched first, exploratory
    pid = make_prereg(project, ["loss@final < 4"])  # written after, and the run record made to name it
    story_run(project, story_clock, "qknorm", pid, snapshot=snap)
    ada.commit()
    ada.git("push", "-q")
    fresh, res = _fresh_verify(team)
    assert res.exit_code == 4, res.output
    assert f"run qknorm's code snapshot {snap[:12]} does not hold entries/prereg/{pid}.md" in res.output


# --- case 8: a stray file under entries/ ---------------------------------------------------------

def test_case8_a_stray_file_is_refused_by_commit_and_out_and_one_committed_on_two_clones_leaves_a_way_out(
        tmp_path, story_clock):
    team = make_team(tmp_path, ["ada", "bo"])
    ada, bo = team["ada"], team["bo"]
    res = ada.cli("render", "--format", "pdf", "--out", "entries/week.pdf")
    assert res.exit_code == 3 and "--out entries/week.pdf is inside the logbook folder" in res.stderr, res.output
    assert not (ada.entries() / "week.pdf").exists()
    (ada.entries() / "week.pdf").write_bytes(b"%PDF-1.7 ada's week\n")
    ada.ok("note", "a note beside the stray file")
    res = ada.cli("commit")
    assert res.exit_code == 3 and "entries/week.pdf is not a logbook record" in res.stderr
    assert "out/week.pdf" in res.stderr  # where it could go
    # An older logbook committed such files: two clones, two versions, merged.
    for c, text in ((ada, b"%PDF-1.7 ada's week\n"), (bo, b"%PDF-1.7 bo's week\n")):
        (c.entries() / "week.pdf").write_bytes(text)
        c.git("add", "entries/week.pdf")
        c.git("commit", "-q", "-m", "week")
    ada.push()
    bo.git("pull", "-q", "--no-rebase", check=False)
    bo.git("checkout", "--theirs", "entries/week.pdf")
    bo.git("add", "entries/week.pdf")
    bo.git("commit", "-q", "--no-edit")
    bo.push()
    for c in (bo, team.join("fresh")):
        res = c.cli("verify")
        assert res.exit_code == 0, res.output
        assert "warning: entries/week.pdf is not a logbook record" in res.stderr
    # The hint's fix works: move it out, and `logbook commit` commits its removal; nothing is left to warn about.
    (bo.path / "out").mkdir()
    (bo.entries() / "week.pdf").rename(bo.path / "out" / "week.pdf")
    bo.ok("commit")
    bo.push()
    for c in (bo, team.join("fresh2")):
        res = c.cli("verify")
        assert res.exit_code == 0 and "week.pdf" not in res.output, res.output


# --- case 9: `logbook commit` never commits an edit or deletion of a record ---------------------

def test_case9_commit_refuses_an_edit_or_a_deletion_of_a_committed_record(tmp_path, story_clock):
    team = make_team(tmp_path, ["ada", "bo"])
    ada, bo = team["ada"], team["bo"]
    ada.ok("note", "node 7 is flaky")
    ada.commit()
    ada.push()
    assert bo.pull("rebase").returncode == 0
    (note,) = (bo.entries() / "notes").glob("*.json")
    rel = note.relative_to(bo.path).as_posix()
    head = bo.git("rev-parse", "HEAD").stdout.strip()
    note.write_text(note.read_text().replace("flaky", "fine"))  # an accident in an editor
    bo.ok("note", "a new note")
    res = bo.cli("commit")
    assert res.exit_code == 4, res.output
    assert f"{rel} is a committed record and the working tree edits it" in res.stderr
    assert bo.git("rev-parse", "HEAD").stdout.strip() == head  # nothing committed
    bo.git("checkout", "HEAD", "--", rel)  # the hint's fix
    bo.ok("commit")
    note.unlink()
    res = bo.cli("commit")
    assert res.exit_code == 4 and "the working tree deletes it" in res.stderr
    log = ada.path / "entries/runs/x/events.jsonl"
    EventSink(log.parent, "x", 1).emit("run_started", step=0)
    ada.commit()
    log.write_text(log.read_text().replace('"step":0', '"step":1'))
    res = ada.cli("commit")
    assert res.exit_code == 4 and "entries/runs/x/events.jsonl is a committed log" in res.stderr


# --- case 10: --seen is checked against what exists ----------------------------------------------

def test_case10_seen_run_started_after_the_run_ended_and_was_scored_is_refused_and_a_handmade_one_is_exit_4(
        tmp_path, story_clock):
    team = make_team(tmp_path, ["ada", "mallory"])
    pid = _failed_run(team, story_clock)
    ada, mallory = team["ada"], team["mallory"]
    ada.ok("outcome", "qknorm")
    ada.commit()
    ada.push()
    mallory.commit()
    assert mallory.pull("rebase").returncode == 0
    res = mallory.cli("prereg", "amend", pid, "--seen", "run-started", "--reason", "tighter", "--predict",
                      "spikes@final == 0")
    assert res.exit_code == 3, res.output
    assert "`--seen run-started` says no results were seen, but run qknorm failed" in res.stderr
    # The forger writes it with the library, skipping the command's check, and pushes.
    from logbook.proof import amend
    from logbook.trust import no_third_party

    real = no_third_party.results_before
    no_third_party.results_before = lambda *a, **k: None
    try:
        written = amend.amend_prereg(open_project(mallory.path), pid, reason="tighter", seen="run-started",
                                     predictions=["spikes@final == 0"])
    finally:
        no_third_party.results_before = real
    mallory.push()
    fresh, res = _fresh_verify(team)
    assert res.exit_code == 4, res.output
    rel = written.path.relative_to(mallory.path).as_posix()
    assert f"{rel} says `--seen run-started`, but the commit that added it" in res.output
    assert "already held a scorecard of run qknorm" in res.output or "the end of run qknorm" in res.output


# --- the acknowledgement record: one way forward -------------------------------------------------

def test_an_acknowledgement_approved_by_a_teammate_turns_exit_4_into_acknowledged_on_every_clone(
        tmp_path, story_clock):
    team = make_team(tmp_path, ["ada", "bo"])
    _failed_run(team, story_clock)
    ada, bo = team["ada"], team["bo"]
    log = ada.path / LOG
    append_forged(log, "run_finished", {"final_loss": 3.0})  # a mistake: a test line appended by hand
    ada.git("add", "-A")
    ada.git("commit", "-q", "-m", "oops")
    ada.push()
    assert ada.cli("verify").exit_code == 4
    res = ada.cli("acknowledge", LOG, "--reason", "a line appended by hand while testing a parser")
    assert res.exit_code == 0, res.output
    ack_id = res.stdout.strip()
    assert ack_id.startswith("ack:")
    still = ada.cli("verify")
    assert still.exit_code == 4 and f"awaiting review: `logbook review approve {ack_id}`" in still.output
    refused = ada.cli("review", "approve", ack_id)
    assert refused.exit_code == 3 and "cannot approve it" in refused.stderr
    ada.commit()
    ada.push()
    assert bo.pull("rebase").returncode == 0
    queue = json_out(bo.cli("review", "--json"))
    assert ack_id in [i["id"] for i in queue]
    bo.ok("review", "approve", ack_id)
    bo.commit()
    bo.push()
    fresh, res = _fresh_verify(team)
    assert res.exit_code == 0, res.output
    assert "ACKNOWLEDGED" in res.output and f"acknowledged in {ack_id} by Ada, approved by Bo" in res.output
    body = json_out(fresh.cli("verify", "--json"))
    assert [f["kind"] for f in body["acknowledged"]] == ["after_end"] and body["problems"] == []
    # A later change to the same file is not covered: a new finding.
    log2 = fresh.path / LOG
    append_forged(log2, "run_finished", {"final_loss": 2.0})
    fresh.git("commit", "-qam", "more")
    assert fresh.cli("verify").exit_code == 4


def test_acknowledge_refuses_a_record_with_nothing_to_acknowledge(tmp_path, story_clock):
    team = make_team(tmp_path, ["ada"])
    _failed_run(team, story_clock)
    res = team["ada"].cli("acknowledge", LOG, "--reason", "just in case")
    assert res.exit_code == 3 and "there is nothing to acknowledge" in res.stderr
