"""A preregistration survives `git pull --rebase`; commands refuse to build on records that fail their check;
messages during a merge or rebase give steps that work."""

from __future__ import annotations

import json
import os

import pytest
from gitteam import Team, commit_all, git, write_record
from runhelpers import micro_config
from test_history import _prereg, _synthetic_run, _tampered, _verify

from logbook.core.errors import TamperedError
from logbook.core.project import open_project
from logbook.eventlog.chain import ChainedLog
from logbook.proof.intact import require_intact
from logbook.runs.run_record import RunRecord, write_run_record


@pytest.fixture
def team(tmp_path, monkeypatch) -> Team:
    return Team(tmp_path, monkeypatch)


@pytest.mark.slow
def test_pull_rebase_over_a_local_preregistration_then_verify_and_run_pass(team, cli):
    alice = team.found(cli, "alice")
    bob = team.clone("bob")
    write_record(bob, "notes/n-bob-1.json", {"author": "Bob", "text": "new tokenizer merged"})
    commit_all(bob, "bob's note")
    git(bob, "push", "-q", "origin", "main")
    team.at("alice")
    pid = _prereg(cli)
    made = git(alice, "rev-parse", "HEAD").strip()
    git(alice, "pull", "-q", "--rebase")
    assert git(alice, "rev-parse", "HEAD").strip() != made  # the preregistration's commit was rewritten
    assert _verify(cli)["ok"]
    cfg = micro_config(alice, steps=4, every=2)
    res = cli("run", "--prereg", pid, "--run-id", "qk", str(cfg.relative_to(alice)))
    assert res.exit_code == 0, res.output
    assert cli("commit").exit_code == 0
    report = _verify(cli)
    assert report["ok"] and report["logs"] == ["entries/runs/qk/events.jsonl"]
    git(alice, "push", "-q", "origin", "main")
    team.clone("carol")
    assert _verify(cli)["ok"]


def test_a_run_committed_before_its_preregistration_does_not_answer_to_it(team, cli):
    alice = team.found(cli, "alice")
    git(alice, "switch", "-q", "-c", "late")
    pid = _prereg(cli)
    git(alice, "switch", "-q", "main")
    proj = open_project(alice)
    write_run_record(proj, RunRecord(run_id="early", created="2026-11-30T00:00:00Z", config_path="c.yaml",
                                     config_hash="0" * 64, prereg_id=pid))
    started = commit_all(alice, "run early")
    git(alice, "merge", "-q", "--no-edit", "late")
    out, problems = _tampered(cli)
    assert [(p["kind"], p["lost"]) for p in problems] == [("prereg_after_run", started)]
    assert f"run early answers to {pid}, but the preregistration was first committed in" in out


# --- commands that read records refuse to build on one that fails its check --------

def _edit_committed_run_record(repo) -> None:
    path = repo / "entries" / "runs" / "r1" / "run.json"
    rec = json.loads(path.read_text())
    rec["deviations"] = []
    path.write_text(json.dumps(rec))
    commit_all(repo, "no deviations after all")


@pytest.mark.parametrize("args", [("render",), ("outcome", "r1"), ("report", "r1"), ("calibration",), ("review",),
                                  ("review", "approve", "r1:1")])
def test_commands_that_read_records_refuse_an_edited_one(logbook_repo, cli, args):
    _synthetic_run(logbook_repo)
    commit_all(logbook_repo, "run r1")
    _edit_committed_run_record(logbook_repo)
    res = cli(*args)
    assert res.exit_code == 4, res.output
    assert f"`logbook {args[0]}` will not build on entries/runs/r1/run.json, which fails its check" in res.stderr
    assert "hint: restore it as" in res.stderr and "git checkout" in res.stderr
    assert "Traceback" not in res.output


def test_another_runs_damage_does_not_stop_scoring_this_one(logbook_repo):
    _synthetic_run(logbook_repo, "r1")
    _synthetic_run(logbook_repo, "r2")
    commit_all(logbook_repo, "two runs")
    _edit_committed_run_record(logbook_repo)
    project = open_project()
    require_intact(project, "outcome", run="r2")
    with pytest.raises(TamperedError, match="entries/runs/r1/run.json"):
        require_intact(project, "outcome", run="r1")


def test_render_refuses_a_log_replaced_by_a_symlink_and_keeps_the_day_file(logbook_repo, cli, tmp_path):
    run = _synthetic_run(logbook_repo)
    assert cli("render").exit_code == 0
    days = sorted((logbook_repo / "entries").glob("[0-9][0-9][0-9][0-9]/*/*.md"))
    assert days
    commit_all(logbook_repo, "run r1 and its chronicle")
    other = tmp_path / "elsewhere.jsonl"
    other.write_text("not an event log\n")
    (run / "events.jsonl").unlink()
    os.symlink(other, run / "events.jsonl")
    res = cli("render")
    assert res.exit_code == 4, res.output
    assert "entries/runs/r1/events.jsonl is a symlink" in res.stderr
    assert all(d.is_file() for d in days)
    out, problems = _tampered(cli)
    assert ("entries/runs/r1/events.jsonl", "symlink") in {(p["path"], p["kind"]) for p in problems}


def test_a_run_folder_that_leads_outside_the_logbook_is_refused(logbook_repo, cli, tmp_path):
    outside = tmp_path / "outside"
    _synthetic_run(logbook_repo, "r1").rename(outside)
    os.symlink(outside, logbook_repo / "entries" / "runs" / "r1")
    out, problems = _tampered(cli)
    assert [(p["path"], p["kind"]) for p in problems] == [("entries/runs/r1", "symlink")]
    assert cli("render").exit_code == 4


# --- a merge or rebase under way --------------------------------------------------

def _diverged_log(team, cli):
    """Alice and Bob both appended to one log file: a rebase stops on a conflict inside it."""
    alice = team.found(cli, "alice")
    rel = "entries/runs/shared/events.jsonl"
    ChainedLog(alice / rel).append({"kind": "note", "data": {"by": "alice"}})
    commit_all(alice, "shared log")
    git(alice, "push", "-q", "origin", "main")
    bob = team.clone("bob")
    ChainedLog(bob / rel).append({"kind": "note", "data": {"by": "bob"}})
    commit_all(bob, "bob appends")
    git(bob, "push", "-q", "origin", "main")
    team.at("alice")
    ChainedLog(alice / rel).append({"kind": "note", "data": {"by": "alice, again"}})
    commit_all(alice, "alice appends")
    git(alice, "pull", "-q", "--rebase", check=False)
    assert (alice / ".git" / "rebase-merge").exists() or (alice / ".git" / "rebase-apply").exists()
    return alice


def test_during_a_rebase_conflict_inside_a_log_verify_says_how_to_finish_or_abort(team, cli):
    alice = _diverged_log(team, cli)
    res = cli("verify")
    assert res.exit_code == 4, res.output
    assert "hint: a rebase is in progress: finish it (`git rebase --continue`) or abort it (`git rebase --abort`)" \
        in res.stderr
    assert "logbook verify" not in res.stderr.split("hint:")[1]
    git(alice, "rebase", "--abort")
    # Back on Alice's own history, which is intact; only the two writers' disagreement remains, named.
    assert [(p["path"], p["kind"]) for p in _verify(cli)["problems"]] == \
        [("entries/runs/shared/events.jsonl", "remote_differs")]


def _conflict_in_code(team, cli) -> tuple:
    """Alice preregistered locally and changed the README; Bob changed it too: `git pull --rebase` stops."""
    alice = team.found(cli, "alice")
    bob = team.clone("bob")
    (bob / "README.md").write_text("bob's readme\n")
    commit_all(bob, "bob's readme")
    git(bob, "push", "-q", "origin", "main")
    team.at("alice")
    pid = _prereg(cli)
    (alice / "README.md").write_text("alice's readme\n")
    commit_all(alice, "alice's readme")
    git(alice, "pull", "-q", "--rebase", check=False)
    assert (alice / ".git" / "rebase-merge").exists() or (alice / ".git" / "rebase-apply").exists()
    return alice, pid


def test_during_a_rebase_run_refuses_and_the_steps_it_gives_work(team, cli, monkeypatch):
    alice, pid = _conflict_in_code(team, cli)
    cfg = str(micro_config(alice).relative_to(alice))
    res = cli("run", "--prereg", pid, cfg)
    assert res.exit_code == 3, res.output
    assert "a rebase is in progress" in res.stderr
    assert "hint: finish it (`git rebase --continue`) or abort it (`git rebase --abort`)" in res.stderr
    assert "logbook verify" not in res.stderr
    verify = cli("verify")
    assert verify.exit_code == 0 and "a rebase is in progress" in verify.stderr
    # The hint's first step: resolve, then continue.
    (alice / "README.md").write_text("both readmes\n")
    git(alice, "add", "README.md")
    monkeypatch.setenv("GIT_EDITOR", "true")
    git(alice, "rebase", "--continue")
    report = _verify(cli)
    assert report["ok"] and report["preregs"] == [pid] and report["in_progress"] is None


def test_prereg_amend_on_a_changed_record_gives_the_fix_not_a_pointer_to_verify(logbook_repo, cli):
    pid = _prereg(cli)
    path = logbook_repo / "entries" / "prereg" / f"{pid}.md"
    path.write_text(path.read_text() + "\nOne more thought, added later.\n")
    res = cli("prereg", "amend", pid, "--reason", "r", "--seen", "nothing", "--predict", "spikes@final == 0")
    assert res.exit_code == 4, res.output
    assert f"restore it as committed: `git restore --source=HEAD --staged --worktree -- entries/prereg/{pid}.md`" \
        in res.stderr
    assert "logbook verify" not in res.stderr
    res = cli("verify")
    assert "prereg amend" not in res.output


# --- records git ignores ------------------------------------------------------------

@pytest.mark.parametrize("rule", ["entries/\n", "*.jsonl\n"])
def test_ignored_records_are_named_commit_refuses_and_verify_is_not_intact(logbook_repo, cli, rule):
    _synthetic_run(logbook_repo)
    (logbook_repo / ".gitignore").write_text(rule)
    commit_all(logbook_repo, "ignore rule")
    res = cli("commit")
    assert res.exit_code == 3, res.output
    assert "git ignores" in res.stderr and "entries/runs/r1/events.jsonl" in res.stderr
    assert "hint: `git check-ignore -v entries/runs/r1/events.jsonl` names the rule" in res.stderr
    res = cli("verify")
    assert res.exit_code == 3, res.output
    assert "Intact" not in res.stdout
    assert "IGNORED  entries/runs/r1/events.jsonl is ignored by git" in res.stdout
    assert not json.loads(cli("verify", "--json").stdout)["ok"]
    # The hint's step works: without the rule, the run is committed and verifies.
    (logbook_repo / ".gitignore").write_text("")
    git(logbook_repo, "commit", "-q", "-m", "no ignore rule", "--", ".gitignore")
    assert cli("commit").exit_code == 0
    assert cli("verify").exit_code == 0


@pytest.mark.parametrize("run_created, ok", [("2099-01-01T00:00:00.000000Z", True),
                                             ("2020-01-01T00:00:00.000000Z", False)])
def test_a_squash_of_a_preregistration_and_its_run_in_one_commit_is_ordered_by_their_timestamps(
        team, cli, run_created, ok):
    alice = team.found(cli, "alice")
    git(alice, "switch", "-q", "-c", "exp")
    pid = _prereg(cli)
    write_run_record(open_project(alice), RunRecord(run_id="r1", created=run_created, config_path="c.yaml",
                                                    config_hash="0" * 64, prereg_id=pid))
    commit_all(alice, "run r1")
    git(alice, "switch", "-q", "main")
    git(alice, "merge", "-q", "--squash", "exp")
    git(alice, "commit", "-q", "-m", "Preregistration and run (#2)")
    git(alice, "branch", "-q", "-D", "exp")
    if ok:
        assert _verify(cli)["ok"]
    else:
        out, problems = _tampered(cli)
        assert [p["kind"] for p in problems] == ["prereg_after_run"]
        assert "both arrived in one commit" in out


@pytest.mark.parametrize("text", ["{\n", "[]\n", '{"run_id": "other", "created": "x", "config_path": "c", "config_hash": "h"}\n'])
def test_a_damaged_run_record_is_tampering_to_verify_and_every_reader_names_it(logbook_repo, cli, text):
    from logbook.eventlog.sink import EventSink
    from logbook.runs.run_record import RunRecord, write_run_record

    proj = open_project(logbook_repo)
    write_run_record(proj, RunRecord(run_id="r1", created="2026-11-30T00:00:00Z", config_path="c.yaml",
                                     config_hash="0" * 64, exploratory=True))
    EventSink(proj.run_dir("r1"), "r1", attempt=0).emit("milestone", step=0, fraction=0.0)
    record = logbook_repo / "entries" / "runs" / "r1" / "run.json"
    record.write_text(text)
    for committed in (False, True):
        res = cli("verify")
        assert res.exit_code == 4 and "entries/runs/r1/run.json" in res.output, res.output
        for args in (("render",), ("show", "r1"), ("report", "r1"), ("outcome", "r1")):
            res = cli(*args)
            assert res.exit_code == 4, (args, res.output)
            assert "internal error" not in res.output and "Traceback" not in res.output
        if not committed:
            assert cli("commit").exit_code == 0
