"""Tamper evidence over history, as a team shares a logbook: a bare origin and clones with their own identities.

Ordinary git workflows (rebase, cherry-pick, merge commits, squash-merges with
the branch deleted) are not tampering; a committed record that a later commit
edits, truncates, deletes or drops in a merge is, on every clone, named with
the commit that had it and the commit that lost it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from gitteam import Team, commit_all, git, head, write_record

from logbook.core.project import open_project
from logbook.records.history import CACHE_FILE
from logbook.eventlog.sink import EventSink
from logbook.runs.run_record import RunRecord, write_run_record

FLAGS = ["--title", "qk-norm removes spikes", "--hypothesis", "QK-norm keeps attention logits bounded.",
         "--predict", "val_loss@final < 1.45"]


@pytest.fixture
def team(tmp_path, monkeypatch) -> Team:
    return Team(tmp_path, monkeypatch)


def _prereg(cli) -> str:
    res = cli("prereg", *FLAGS, "--json")
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)["id"]


def _verify(cli) -> dict:
    res = cli("verify", "--json")
    report = json.loads(res.stdout)
    assert res.exit_code == (0 if report["ok"] else 4), res.output
    return report


def _tampered(cli) -> tuple[str, list[dict]]:
    res = cli("verify")
    assert res.exit_code == 4, res.output
    assert "Traceback" not in res.output and "Intact" not in res.stdout
    return res.output, json.loads(cli("verify", "--json").stdout)["problems"]


def _synthetic_run(repo: Path, run_id: str = "r1", events: int = 6) -> Path:
    """A run record and an event log as a run writes them (no training: these tests are about git)."""
    proj = open_project(repo)
    write_run_record(proj, RunRecord(run_id=run_id, created="2026-11-30T00:00:00Z", config_path="c.yaml",
                                     config_hash="0" * 64, deviations=["grad_clip 1.0 -> 0.5 (not preregistered)"]))
    sink = EventSink(proj.run_dir(run_id), run_id, attempt=0)
    for step in range(events):
        sink.emit("milestone", step=step * 10, fraction=step / events)
    return proj.run_dir(run_id)


# --- ordinary workflows are not tampering --------------------------------------

def test_a_squash_merged_preregistration_with_its_branch_deleted_verifies_on_a_fresh_clone(team, cli):
    team.found(cli, "alice")
    alice = team.at("alice")
    git(alice, "switch", "-q", "-c", "qknorm")
    pid = _prereg(cli)
    git(alice, "push", "-q", "origin", "qknorm")
    # The forge squash-merges the pull request and deletes its branch.
    bob = team.clone("bob")
    git(bob, "fetch", "-q", "origin")
    git(bob, "merge", "-q", "--squash", "origin/qknorm")
    git(bob, "commit", "-q", "-m", "Preregister qk-norm (#1)")
    git(bob, "push", "-q", "origin", "main")
    git(bob, "push", "-q", "origin", "--delete", "qknorm")
    team.at("alice")
    git(alice, "switch", "-q", "main")
    git(alice, "pull", "-q", "--ff-only")
    git(alice, "branch", "-q", "-D", "qknorm")
    git(alice, "fetch", "-q", "--prune")
    for name in ("alice", "bob"):
        team.at(name)
        git(team.clones[name], "pull", "-q", "--ff-only")
        assert _verify(cli)["preregs"] == [pid]
    team.clone("carol")
    report = _verify(cli)
    assert report["ok"] and report["preregs"] == [pid] and report["warnings"] == []


def test_a_cherry_picked_preregistration_verifies(team, cli):
    alice = team.found(cli, "alice")
    git(alice, "switch", "-q", "-c", "side")
    pid = _prereg(cli)
    picked = head(alice)
    git(alice, "switch", "-q", "main")
    git(alice, "commit", "-q", "--allow-empty", "-m", "meanwhile")
    git(alice, "cherry-pick", picked)
    assert head(alice) != picked
    git(alice, "branch", "-q", "-D", "side")
    report = _verify(cli)
    assert report["ok"] and report["preregs"] == [pid]


def test_a_merge_commit_that_keeps_both_sides_records_verifies(team, cli):
    alice = team.found(cli, "alice")
    bob = team.clone("bob")
    write_record(bob, "notes/n-bob-1.json", {"author": "Bob", "text": "loss flat"})
    commit_all(bob, "bob's note")
    git(bob, "push", "-q", "origin", "main")
    team.at("alice")
    write_record(alice, "notes/n-alice-1.json", {"author": "Alice", "text": "spike at 47k"})
    commit_all(alice, "alice's note")
    git(alice, "pull", "-q", "--no-rebase", "--no-edit")
    assert len(git(alice, "rev-parse", "HEAD^@").split()) == 2
    assert _verify(cli)["ok"]


# --- committed tampering, each named with the commit that had it and the one that lost it ---------

def _cut_last_lines(run: Path) -> None:
    log = run / "events.jsonl"
    log.write_text("".join(log.read_text().splitlines(keepends=True)[:-2]))


def _truncate(run: Path) -> None:
    log = run / "events.jsonl"
    log.write_bytes(log.read_bytes()[:100])


def _git_rm_run(run: Path) -> None:
    git(run, "rm", "-q", "-r", ".")


def _edit_scorecard(run: Path) -> None:
    card = json.loads((run / "outcome.json").read_text())
    card["predictions"][0]["status"] = "refuted"
    (run / "outcome.json").write_text(json.dumps(card))


def _drop_deviations(run: Path) -> None:
    rec = json.loads((run / "run.json").read_text())
    rec["deviations"] = []
    (run / "run.json").write_text(json.dumps(rec, indent=2))


@pytest.mark.parametrize("tamper, path, kind", [
    (_cut_last_lines, "events.jsonl", "log_rewritten"),
    (_truncate, "events.jsonl", "log_rewritten"),
    (_git_rm_run, "run.json", "record_deleted"),
    (_edit_scorecard, "outcome.json", "record_edited"),
    (_drop_deviations, "run.json", "record_edited"),
])
def test_committed_tampering_is_named_with_the_commit_that_had_it_and_the_one_that_lost_it(team, cli, tamper,
                                                                                            path, kind):
    alice = team.found(cli, "alice")
    run = _synthetic_run(alice)
    write_record(alice, "runs/r1/outcome.json", {"predictions": [{"text": "val_loss@final < 1.45",
                                                                 "status": "confirmed"}]})
    had = commit_all(alice, "run r1")
    git(alice, "push", "-q", "origin", "main")
    assert _verify(cli)["ok"]
    tamper(run)
    lost = commit_all(alice, "tidy the run")
    out, problems = _tampered(cli)
    rel = f"entries/runs/r1/{path}"
    assert (rel, kind, had, lost) in {(p["path"], p["kind"], p["had"], p["lost"]) for p in problems}
    assert f"CHANGED  {rel} (" in out and f" in {had[:7]})" in out and f" in {lost[:7]}" in out
    # Pushed, it reads the same on every other clone.
    git(alice, "push", "-q", "origin", "main")
    team.clone("bob")
    _out, theirs = _tampered(cli)
    assert (rel, kind, had, lost) in {(p["path"], p["kind"], p["had"], p["lost"]) for p in theirs}


@pytest.mark.parametrize("tamper, path, kind", [
    (_cut_last_lines, "events.jsonl", "log_rewritten"),
    (_git_rm_run, "run.json", "record_deleted"),
    (_edit_scorecard, "outcome.json", "record_edited"),
])
def test_a_break_undone_by_the_hints_step_is_a_warning_and_reading_commands_work_again(team, cli, tamper, path,
                                                                                      kind):
    """An accidental `git rm`, restored as the hint says, must not stop the chronicle for good; history keeps it."""
    alice = team.found(cli, "alice")
    run = _synthetic_run(alice)
    write_record(alice, "runs/r1/outcome.json", {"predictions": [{"text": "val_loss@final < 1.45",
                                                                 "status": "confirmed"}]})
    had = commit_all(alice, "run r1")
    tamper(run)
    commit_all(alice, "oops")
    _tampered(cli)
    assert cli("render").exit_code == 4
    rel = f"entries/runs/r1/{path}"
    git(alice, "checkout", had, "--", "entries/runs/r1")  # the hint's step
    commit_all(alice, "restore r1")
    report = _verify(cli)
    assert report["ok"] and report["problems"] == []
    restored = {(w["path"], w["kind"]) for w in report["warnings"]}
    assert (rel, f"{kind}_restored") in restored and all(k.endswith("_restored") for _, k in restored)
    assert all("is back as first committed" in w["message"] for w in report["warnings"])
    assert cli("render").exit_code == 0
    if path == "events.jsonl":  # a log restored and then continued is restored too
        EventSink(run, "r1", attempt=0).emit("milestone", step=99, fraction=1.0)
        commit_all(alice, "one more event")
        assert _verify(cli)["ok"]


def test_a_deleted_record_put_back_with_other_bytes_is_still_a_problem(team, cli):
    alice = team.found(cli, "alice")
    note = write_record(alice, "notes/n-1.json", {"text": "as first written"})
    commit_all(alice, "note")
    git(alice, "rm", "-q", str(note))
    commit_all(alice, "gone")
    write_record(alice, "notes/n-1.json", {"text": "as rewritten"})
    commit_all(alice, "back, but not as it was")
    _out, problems = _tampered(cli)
    assert [(p["path"], p["kind"]) for p in problems] == [("entries/notes/n-1.json", "record_deleted")]


def test_a_log_that_lost_its_last_lines_says_how_many(team, cli):
    alice = team.found(cli, "alice")
    run = _synthetic_run(alice)
    had = commit_all(alice, "run r1")
    _cut_last_lines(run)
    lost = commit_all(alice, "shorter")
    out, _ = _tampered(cli)
    assert (f"entries/runs/r1/events.jsonl (log, 6 lines in {had[:7]}) lost lines 5-6 of the 6 committed "
            f"in {lost[:7]}") in out


def test_a_merge_that_drops_a_teammates_record_is_caught_on_every_clone(team, cli):
    alice = team.found(cli, "alice")
    bob = team.clone("bob")
    note = write_record(bob, "notes/n-bob-1.json", {"author": "Bob", "text": "batches 47,000-47,300 are a forum dump"})
    had = commit_all(bob, "bob's note")
    git(bob, "push", "-q", "origin", "main")
    team.at("alice")
    write_record(alice, "notes/n-alice-1.json", {"author": "Alice", "text": "spike at 47k"})
    commit_all(alice, "alice's note")
    git(alice, "pull", "-q", "--no-rebase", "--no-commit")
    git(alice, "rm", "-q", "-f", str(note.relative_to(bob)))
    git(alice, "commit", "-q", "--no-edit")
    lost = head(alice)
    rel = "entries/notes/n-bob-1.json"
    out, problems = _tampered(cli)
    assert [(p["path"], p["kind"], p["had"], p["lost"]) for p in problems] == [(rel, "record_dropped", had, lost)]
    assert f"{rel} (record, committed in {had[:7]}) was dropped by the merge in {lost[:7]}" in out
    git(alice, "push", "-q", "origin", "main")
    team.at("bob")
    git(bob, "pull", "-q", "--ff-only")
    _out, theirs = _tampered(cli)
    assert [(p["path"], p["kind"]) for p in theirs] == [(rel, "record_dropped")]


def test_a_record_the_remote_saw_and_history_rewritten_here_is_reported(team, cli):
    alice = team.found(cli, "alice")
    note = write_record(alice, "notes/n-alice-1.json", {"author": "Alice", "text": "lr 3e-4"})
    commit_all(alice, "alice's note")
    git(alice, "push", "-q", "origin", "main")
    note.write_text(note.read_text().replace("3e-4", "6e-4"))
    git(alice, "commit", "-q", "-a", "--amend", "--no-edit")  # this clone's history no longer has the original
    out, problems = _tampered(cli)
    assert [(p["path"], p["kind"], p["had"], p["lost"]) for p in problems] == \
        [("entries/notes/n-alice-1.json", "remote_differs", "origin/main", "HEAD")]
    assert "differs from the version origin/main has" in out


def test_a_record_the_remote_has_and_this_clone_lacks_is_a_warning(team, cli):
    team.found(cli, "alice")
    bob = team.clone("bob")
    write_record(bob, "notes/n-bob-1.json", {"author": "Bob", "text": "x"})
    commit_all(bob, "bob's note")
    git(bob, "push", "-q", "origin", "main")
    alice = team.at("alice")
    git(alice, "fetch", "-q")
    res = cli("verify")
    assert res.exit_code == 0, res.output
    assert "origin/main has 1 record HEAD does not: entries/notes/n-bob-1.json" in res.stderr


# --- incremental --------------------------------------------------------------

def test_verify_reads_each_commit_once_and_keeps_its_cache_outside_the_entries_folder(team, cli):
    alice = team.found(cli, "alice")
    for i in range(3):
        write_record(alice, f"notes/n-{i}.json", {"i": i})
        commit_all(alice, f"note {i}")
    assert _verify(cli)["commits_checked"] == 6  # the first commit, logbook.yaml (init), the entries folder, three notes
    assert (alice / ".logbook" / CACHE_FILE).is_file()
    assert _verify(cli)["commits_checked"] == 0
    write_record(alice, "notes/n-3.json", {"i": 3})
    commit_all(alice, "note 3")
    assert _verify(cli)["commits_checked"] == 1
    assert git(alice, "status", "--porcelain") == ""


def test_a_cached_clean_history_does_not_hide_a_later_rewrite(team, cli):
    alice = team.found(cli, "alice")
    note = write_record(alice, "notes/n-1.json", {"i": 1})
    commit_all(alice, "note")
    assert _verify(cli)["ok"]
    git(alice, "reset", "-q", "--hard", "HEAD~1")
    note.parent.mkdir(parents=True, exist_ok=True)
    note.write_text('{"i": 2}\n')
    commit_all(alice, "another first version")
    write_record(alice, "notes/n-2.json", {"i": 2})
    commit_all(alice, "note 2")
    note.write_text('{"i": 3}\n')
    lost = commit_all(alice, "edit")
    _out, problems = _tampered(cli)
    assert [(p["path"], p["lost"]) for p in problems] == [("entries/notes/n-1.json", lost)]


def test_verify_full_reads_every_commit_again_without_trusting_the_cache(team, cli):
    alice = team.found(cli, "alice")
    write_record(alice, "notes/n-1.json", {"i": 1})
    commit_all(alice, "note")
    assert _verify(cli)["commits_checked"] == 4
    res = cli("verify", "--full", "--json")
    assert res.exit_code == 0 and json.loads(res.stdout)["commits_checked"] == 4
    assert _verify(cli)["commits_checked"] == 0


def test_a_pulled_record_this_clone_then_reset_away_is_reported_and_the_hint_restores_it(team, cli):
    team.found(cli, "alice")
    bob = team.clone("bob")
    write_record(bob, "notes/n-bob-1.json", {"author": "Bob", "text": "x"})
    commit_all(bob, "bob's note")
    git(bob, "push", "-q", "origin", "main")
    alice = team.at("alice")
    git(alice, "pull", "-q", "--ff-only")
    git(alice, "reset", "-q", "--hard", "HEAD~1")  # the pull is undone: Bob's note is gone from this branch
    write_record(alice, "notes/n-alice-1.json", {"author": "Alice", "text": "y"})
    commit_all(alice, "alice's note")
    res = cli("verify")
    assert res.exit_code == 4, res.output
    assert "entries/notes/n-bob-1.json is in origin/main and this branch had it" in res.stdout
    assert "hint: take it back from origin/main (`git checkout origin/main -- entries/notes/n-bob-1.json`)" \
        in res.stderr
    git(alice, "checkout", "origin/main", "--", "entries/notes/n-bob-1.json")
    git(alice, "commit", "-q", "-m", "Bob's note back")
    assert _verify(cli)["ok"]


@pytest.mark.parametrize("which", ["notes/notes.jsonl", "reviews/reviews.jsonl"])
def test_lines_cut_from_a_committed_notes_or_reviews_log_are_caught(team, cli, which):
    from logbook.eventlog.chain import ChainedLog

    alice = team.found(cli, "alice")
    log = ChainedLog(alice / "entries" / which)
    for i in range(4):
        log.append({"kind": "note", "data": {"i": i}})
    had = commit_all(alice, "four lines")
    log.path.write_text("".join(log.path.read_text().splitlines(keepends=True)[:3]))
    lost = commit_all(alice, "three lines")
    out, problems = _tampered(cli)
    assert [(p["path"], p["kind"], p["had"], p["lost"]) for p in problems] == \
        [(f"entries/{which}", "log_rewritten", had, lost)]
    assert f"lost line 4 of the 4 committed in {lost[:7]}" in out


def test_a_record_on_a_pushed_branch_one_switched_away_from_is_neither_dropped_nor_missing(team, cli):
    """Preregistering on a branch, pushing it for review and going back to main is the daily workflow, not a drop."""
    alice = team.found(cli, "alice")
    git(alice, "switch", "-q", "-c", "alice/pr")
    write_record(alice, "notes/n-alice-1.json", {"author": "Alice", "text": "on my branch"})
    commit_all(alice, "alice's note, for review")
    git(alice, "push", "-q", "origin", "alice/pr")
    git(alice, "switch", "-q", "main")
    res = cli("verify")
    assert res.exit_code == 0, res.output
    assert "alice/pr" not in res.output  # its records are its own until it is merged
    bob = team.clone("bob")  # a reviewer who looks at the branch and goes back
    git(bob, "switch", "-q", "alice/pr")
    git(bob, "switch", "-q", "main")
    team.at("bob")
    assert cli("verify").exit_code == 0


def test_a_force_push_that_erases_a_pulled_record_is_caught_on_every_clone_that_saw_it(team, cli):
    alice = team.found(cli, "alice")
    git(alice, "push", "-q", "-u", "origin", "main")
    bob = team.clone("bob")
    write_record(bob, "notes/n-bob-1.json", {"author": "Bob", "text": "x"})
    commit_all(bob, "bob's note")
    git(bob, "push", "-q", "origin", "main")
    team.at("alice")
    git(alice, "pull", "-q", "--ff-only")
    git(alice, "reset", "-q", "--hard", "HEAD~1")
    git(alice, "push", "-q", "-f", "origin", "main")  # Bob's note is gone from the remote too
    rel = "entries/notes/n-bob-1.json"
    out, problems = _tampered(cli)
    assert [(p["path"], p["kind"]) for p in problems] == [(rel, "remote_erased")]
    assert "a force-push erased it" in out and "git checkout " in out
    team.at("bob")
    git(bob, "pull", "-q", "--rebase")  # Bob's own clone follows the rewritten remote
    assert not (bob / rel).exists()
    out, problems = _tampered(cli)
    assert [(p["path"], p["kind"]) for p in problems] == [(rel, "remote_erased")]
    had = problems[0]["had"]
    git(bob, "checkout", had, "--", rel)  # the hint's step
    commit_all(bob, "Bob's note back")
    assert _verify(cli)["ok"]


def test_a_pull_request_branch_rewritten_by_its_author_is_only_a_warning_on_main(team, cli):
    alice = team.found(cli, "alice")
    git(alice, "switch", "-q", "-c", "alice/pr")
    write_record(alice, "notes/n-alice-1.json", {"author": "Alice", "text": "draft"})
    commit_all(alice, "draft note")
    git(alice, "push", "-q", "origin", "alice/pr")
    git(alice, "reset", "-q", "--hard", "HEAD~1")
    git(alice, "push", "-q", "-f", "origin", "alice/pr")
    git(alice, "switch", "-q", "main")
    res = cli("verify", "--json")
    report = json.loads(res.stdout)
    assert res.exit_code == 0 and report["ok"], res.output
    assert [w["kind"] for w in report["warnings"]] == ["remote_erased_elsewhere"]


def test_a_committed_edit_of_a_preregistration_is_one_finding_naming_the_line_who_and_when(team, cli):
    alice = team.found(cli, "alice")
    pid = _prereg(cli)
    record = alice / "entries" / "prereg" / f"{pid}.md"
    record.write_text(record.read_text().replace("val_loss@final < 1.45", "val_loss@final < 1.55"))
    lost = commit_all(alice, "typo")
    _out, problems = _tampered(cli)
    assert [(p["kind"], p["lost"]) for p in problems] == [("record_edited", lost)]  # no second, vaguer finding
    message = problems[0]["message"]
    assert f"was edited in {lost[:7]} (Alice, " in message
    assert "changed: '- text: val_loss@final < 1.45' -> '- text: val_loss@final < 1.55'" in message
