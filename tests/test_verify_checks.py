"""The verdict of `verify` and the way forward it gives, pinned part by part.

A report is ok only with no problem and no unverifiable record; the error it
raises names the first finding and how many more; each finding's hint is a step
that works for that kind (restore from the commit that had it, take the remote's
copy, finish the merge first), never "run verify". Then, on real repositories,
the findings `verify_project` assembles from history, the working tree and the
logs: which are problems, which are warnings, and what each names.
"""

from __future__ import annotations

import json
import subprocess

import pytest
from conftest import git

from logbook.core.errors import RefusedError, TamperedError
from logbook.core.project import open_project
from logbook.eventlog.chain import ChainedLog, canonical, record_hash
from logbook.proof.verify import Finding, VerifyReport, fix_hint, verify_project

HAD, LOST = "a" * 40, "b" * 40
REL = "entries/notes/n-1.json"


def _f(kind: str, had: str | None = None, lost: str | None = None, path: str = REL) -> Finding:
    return Finding(path, kind, f"{path} is not as written ({kind})", had=had, lost=lost)


# --- the verdict ------------------------------------------------------------------------------

def test_a_report_is_ok_only_without_problems_and_without_unverifiable_records():
    assert VerifyReport().ok
    assert VerifyReport(warnings=[_f("log_torn_tail")]).ok
    assert not VerifyReport(problems=[_f("edited")]).ok
    assert not VerifyReport(unverifiable=[_f("ignored")]).ok


def test_the_json_report_carries_every_field_a_script_reads():
    report = VerifyReport(preregs=["p1"], amendments=2, logs=["l"], problems=[_f("edited")],
                          warnings=[_f("elsewhere")], unverifiable=[_f("ignored")], commits_checked=7,
                          in_progress="a merge: x")
    d = report.to_dict()
    assert {k: d[k] for k in ("ok", "preregs", "amendments", "logs", "commits_checked", "in_progress")} == \
        {"ok": False, "preregs": ["p1"], "amendments": 2, "logs": ["l"], "commits_checked": 7,
         "in_progress": "a merge: x"}
    assert [p["kind"] for p in d["problems"]] == ["edited"] and d["problems"][0]["path"] == REL
    assert [w["kind"] for w in d["warnings"]] == ["elsewhere"]
    assert [u["kind"] for u in d["unverifiable"]] == ["ignored"]
    json.dumps(d)


def test_a_tampered_report_raises_naming_the_first_finding_and_how_many_more():
    with pytest.raises(TamperedError) as one:
        VerifyReport(problems=[_f("record_edited", HAD, LOST)]).raise_if_tampered()
    assert str(one.value.args[0]) == f"{REL} is not as written (record_edited)"
    with pytest.raises(TamperedError) as three:
        VerifyReport(problems=[_f("record_edited", HAD, LOST), _f("edited"), _f("edited")]).raise_if_tampered()
    assert three.value.args[0].endswith("(record_edited) (and 2 more)")
    assert f"git checkout {HAD[:7]} -- {REL}" in three.value.hint
    VerifyReport(warnings=[_f("log_torn_tail")]).raise_if_tampered()  # a warning raises nothing


def test_ignored_records_refuse_naming_at_most_three_and_how_to_find_the_rule():
    paths = [f"entries/notes/n-{i}.json" for i in range(4)]
    with pytest.raises(RefusedError) as err:
        VerifyReport(unverifiable=[_f("ignored", path=p) for p in paths]).raise_if_tampered()
    msg = err.value.args[0]
    assert "git ignores 4 record(s)" in msg and ", ".join(paths[:3]) in msg and paths[3] not in msg
    assert f"git check-ignore -v {paths[0]}" in err.value.hint and "logbook commit" in err.value.hint


# --- the way forward, one kind at a time --------------------------------------------------------

def test_a_finding_with_the_commit_that_had_it_is_restored_from_that_commit():
    hint = fix_hint(_f("record_edited", HAD, LOST))
    assert f"`git checkout {HAD[:7]} -- {REL}`" in hint and "a correction is a new record" in hint
    assert fix_hint(_f("log_rewritten", HAD, LOST)).startswith(f"restore it as {HAD[:7]} had it")


@pytest.mark.parametrize("had, lost", [(HAD, HAD), (None, LOST), (HAD, None)])
def test_a_finding_without_two_distinct_commits_is_not_sent_to_one(had, lost):
    assert "had it" not in fix_hint(_f("edited", had, lost))
    assert f"`git checkout HEAD -- {REL}`" in fix_hint(_f("edited", had, lost))


@pytest.mark.parametrize("kind", ["edited", "deleted", "log_lines_missing", "log_deleted", "log_edited"])
def test_a_file_that_differs_from_head_is_restored_from_head(kind):
    hint = fix_hint(_f(kind))
    assert f"`git checkout HEAD -- {REL}`" in hint and "never an edit" in hint


@pytest.mark.parametrize("kind", ["symlink", "record_symlink"])
def test_a_symlink_is_replaced_by_the_plain_file(kind):
    hint = fix_hint(_f(kind))
    assert hint.startswith(f"replace {REL} by the plain file") and f"`git checkout HEAD -- {REL}`" in hint


def test_a_record_a_remote_holds_is_taken_back_from_the_remote():
    assert f"`git checkout origin/main -- {REL}`" in fix_hint(_f("remote_dropped", "origin/main", "HEAD"))
    assert "`git pull`" in fix_hint(_f("remote_dropped", "origin/main", "HEAD"))
    differs = fix_hint(_f("remote_differs", "origin/main", "HEAD"))
    assert f"`git checkout origin/main -- {REL}`" in differs and "take the remote's version back" in differs


@pytest.mark.parametrize("kind", ["remote_erased", "remote_erased_elsewhere"])
def test_a_record_a_force_push_erased_is_restored_as_pushed(kind):
    hint = fix_hint(_f(kind, HAD, "origin/main"))
    assert f"`git checkout {HAD[:7]} -- {REL}`" in hint and "commit and push" in hint


def test_an_uncommitted_preregistration_and_a_late_one_each_say_what_to_do_instead():
    assert "`logbook prereg`" in fix_hint(_f("uncommitted"))
    assert "preregister anew" in fix_hint(_f("prereg_after_run", HAD, HAD)) and "--prereg" in \
        fix_hint(_f("prereg_after_run"))
    assert fix_hint(_f("hash_mismatch")).startswith("restore the record from git")
    assert all("verify" not in fix_hint(_f(k)) for k in ("edited", "chain_broken", "hash_mismatch", "uncommitted"))


@pytest.mark.parametrize("kind, says", [
    ("unproven_tail", "a tail stamped late cannot be proven after the fact"),
    ("stamp_missing", "run `logbook stamp`"),
    ("stamps_after_run", "this run's order cannot be proven after the fact"),
])
def test_a_time_finding_says_what_third_party_time_needs_even_with_two_commits_named(kind, says):
    assert says in fix_hint(_f(kind, HAD, "HEAD"))


def test_while_a_merge_is_under_way_the_hint_first_says_how_to_finish_it():
    report = VerifyReport(in_progress="a merge is in progress: `git merge --continue`")
    assert report.hint_for(_f("record_edited", HAD, LOST)).startswith("a merge is in progress: `git merge --continue`")
    assert report.hint_for(_f("record_edited", HAD, LOST)).endswith("then run the command again")
    assert report.hint_for(_f("edited")).endswith("never an edit")
    assert "git restore --source=HEAD" in report.hint_for(_f("deleted"))
    assert VerifyReport().hint_for(_f("record_edited", HAD, LOST)) == fix_hint(_f("record_edited", HAD, LOST))
    assert "git restore --source=HEAD" in VerifyReport().hint_for(_f("edited", HAD, None))


# --- what verify_project assembles ------------------------------------------------------------

def _commit(repo, message="change") -> str:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "--allow-empty", "-m", message)
    return git(repo, "rev-parse", "HEAD").strip()


def _log(repo, n=3, run="r1"):
    log = ChainedLog(repo / "entries" / "runs" / run / "events.jsonl")
    for i in range(n):
        log.append({"kind": "milestone", "run": run, "data": {"i": i}})
    return log.path


def test_history_breaks_are_problems_and_restored_ones_are_warnings_with_both_commits(logbook_repo):
    note = logbook_repo / "entries" / "notes" / "n-1.json"
    note.parent.mkdir(parents=True, exist_ok=True)
    note.write_text("v1\n")
    had = _commit(logbook_repo)
    note.write_text("v2\n")
    lost = _commit(logbook_repo)
    report = verify_project(open_project(logbook_repo))
    assert [(p.path, p.kind, p.had, p.lost) for p in report.problems] == [(REL, "record_edited", had, lost)]
    assert report.commits_checked == 5 and not report.ok
    git(logbook_repo, "checkout", had, "--", REL)
    _commit(logbook_repo, "back")
    report = verify_project(open_project(logbook_repo), full=True)
    assert report.ok and report.problems == [] and report.commits_checked == 6
    assert [(w.path, w.kind, w.had, w.lost) for w in report.warnings] == [(REL, "record_edited_restored", had, lost)]
    assert report.warnings[0].message.endswith(", and is back as first committed")


def test_a_log_edited_on_disk_names_the_line_and_a_torn_tail_is_only_a_warning(logbook_repo):
    path = _log(logbook_repo)
    _commit(logbook_repo)
    lines = path.read_text().splitlines(keepends=True)
    rec = json.loads(lines[1])
    rec["data"] = {"i": 42}
    rec["hash"] = record_hash(rec)
    path.write_text(lines[0] + canonical(rec) + "\n" + lines[2])
    report = verify_project(open_project(logbook_repo))
    logged = [p for p in report.problems if p.kind == "log_edited"]
    assert [(p.path, p.line) for p in logged] == [("entries/runs/r1/events.jsonl", 3)]
    assert logged[0].message.startswith("entries/runs/r1/events.jsonl: line 3 ")
    assert report.logs == ["entries/runs/r1/events.jsonl"]

    path.write_text("".join(lines) + '{"kind":"mile')
    report = verify_project(open_project(logbook_repo))
    assert report.ok
    assert [(w.path, w.kind, w.line) for w in report.warnings] == [("entries/runs/r1/events.jsonl", "log_torn_tail", 4)]


def test_only_what_the_schema_allows_follows_a_runs_end_even_rechained(logbook_repo):
    path = _log(logbook_repo, 2)
    log = ChainedLog(path)
    log.append({"kind": "run_finished", "run": "r1", "data": {}})
    assert verify_project(open_project(logbook_repo)).ok  # an honest end passes
    log.append({"kind": "milestone", "run": "r1", "data": {"i": 9}})
    log.append({"kind": "run_failed", "run": "r1", "data": {}})
    report = verify_project(open_project(logbook_repo))
    assert [(p.kind, p.line) for p in report.problems][:1] == [("after_end", 4)]  # the first line after the end
    assert "line 4 is a milestone event after the run finished (line 3, run_finished)" in report.problems[0].message


def test_a_log_whose_chain_is_broken_is_named_for_the_break_not_for_what_follows_its_end(logbook_repo):
    path = _log(logbook_repo, 2)
    ChainedLog(path).append({"kind": "run_failed", "run": "r1", "data": {}})
    with open(path, "a") as f:  # appended by hand, not chained: the chain names it, and nothing more is said
        f.write('{"kind":"run_finished","run":"r1","seq":3}\n')
    report = verify_project(open_project(logbook_repo))
    assert [(p.kind, p.line) for p in report.problems] == [("log_edited", 4), ("log_edited", 4)]


# --- preregistrations: the amendment chain and the order against runs ----------------------------

FLAGS = ["--title", "qk-norm removes spikes", "--hypothesis", "QK-norm keeps attention logits bounded.",
         "--predict", "val_loss@final < 1.45"]


def _prereg(cli) -> str:
    res = cli("prereg", *FLAGS, "--json")
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)["id"]


def _front(path):
    from logbook.promises.prereg_format import split_record

    return split_record(path.read_text("utf-8"), path.name)


def _sha(path) -> str:
    from logbook.promises.prereg_format import record_hash as prereg_hash

    return prereg_hash(*_front(path))


def _amended(repo, cli) -> tuple[str, "Path", "Path"]:
    """A preregistration and one amendment made by the CLI: (id, the preregistration, the amendment)."""
    pid = _prereg(cli)
    res = cli("prereg", "amend", pid, "--reason", "r", "--seen", "nothing", "--predict", "restarts@final <= 2")
    assert res.exit_code == 0, res.output
    folder = repo / "entries" / "prereg"
    first = next(folder.glob(f"{pid}.amend-*.md"))
    return pid, folder / f"{pid}.md", first


def _forged_second(repo, pid, original, first, change) -> str:
    """A second amendment made by hand, its links worked out as the CLI would, then `change`d; committed."""
    from logbook.promises.prereg_format import render_record

    front, body = _front(first)
    front.pop("id", None)
    front.update(n=2, previous={"file": first.name, "sha256": _sha(first)},
                 original={"file": original.name, "sha256": _sha(original)})
    change(front, pid)
    path = repo / "entries" / "prereg" / f"{pid}.amend-2.md"
    path.write_text(render_record(front, body), encoding="utf-8")
    _commit(repo, "a second amendment")
    return path.relative_to(repo).as_posix()


def _chain_findings(repo) -> list[tuple[str, str]]:
    return [(p.path, p.message) for p in verify_project(open_project(repo)).problems if p.kind == "chain_broken"]


def test_an_amendment_linked_as_the_cli_links_it_verifies(logbook_repo, cli):
    pid, original, first = _amended(logbook_repo, cli)
    _forged_second(logbook_repo, pid, original, first, lambda front, pid: None)
    report = verify_project(open_project(logbook_repo))
    assert report.ok and report.problems == [] and report.amendments == 2 and report.preregs == [pid]


@pytest.mark.parametrize("change, says", [
    (lambda f, pid: f.update(amends="2026-01-01-another-abcd"),
     "says it is amendment 2 of 2026-01-01-another-abcd, but its file name makes it amendment 2 of {pid}"),
    (lambda f, pid: f.update(n=3), "says it is amendment 3 of {pid}, but its file name makes it amendment 2"),
    (lambda f, pid: f["previous"].update(file=f"{pid}.amend-2.md"),
     "links the record before it as {pid}.amend-2.md, which is not among {pid}'s records"),
    (lambda f, pid: f["previous"].update(file=f"{pid}.amend-1.md"),
     "links the record before it as {pid}.amend-1.md, which is not among {pid}'s records"),
    (lambda f, pid: f.update(previous="the one before"),
     "links the record before it as None, which is not among {pid}'s records"),
    (lambda f, pid: f["original"].update(sha256="0" * 64),
     "links {pid}.md by hash 000000000000, but that record hashes to "),
    (lambda f, pid: f["previous"].update(sha256="f" * 64), "by hash ffffffffffff, but that record hashes to "),
    (lambda f, pid: f.pop("original"), "links the preregistration as None, which is not among"),
])
def test_an_amendment_with_a_broken_link_names_itself_and_the_link(logbook_repo, cli, change, says):
    pid, original, first = _amended(logbook_repo, cli)
    rel = _forged_second(logbook_repo, pid, original, first, change)
    found = _chain_findings(logbook_repo)
    assert len(found) == 1 and found[0][0] == rel
    assert found[0][1].startswith(f"{rel}: ") and says.format(pid=pid) in found[0][1]


def _prereg_and_run_in_one_commit(repo, cli, run_created) -> tuple[str, str]:
    from logbook.runs.run_record import RunRecord, write_run_record

    pid = _prereg(cli)
    git(repo, "reset", "-q", "--soft", "HEAD~1")  # the two arrive in one commit, as a squash-merge makes them
    write_run_record(open_project(repo), RunRecord(run_id="r1", created=run_created(pid), config_path="c.yaml",
                                                   config_hash="0" * 64, prereg_id=pid))
    return pid, _commit(repo, "preregistration and run (#2)")


def _created(repo, pid) -> str:
    return str(_front(repo / "entries" / "prereg" / f"{pid}.md")[0]["created"])


def test_a_run_squashed_with_its_preregistration_within_the_same_second_is_in_order(logbook_repo, cli):
    _prereg_and_run_in_one_commit(logbook_repo, cli, lambda pid: _created(logbook_repo, pid)[:19] + ".999999Z")
    assert verify_project(open_project(logbook_repo)).ok


def test_a_run_squashed_with_a_preregistration_made_a_second_later_does_not_answer_to_it(logbook_repo, cli):
    from datetime import datetime, timedelta

    def a_second_before(pid):
        made = datetime.strptime(_created(logbook_repo, pid)[:19], "%Y-%m-%dT%H:%M:%S")
        return (made - timedelta(seconds=1)).strftime("%Y-%m-%dT%H:%M:%S.000000Z")

    pid, both = _prereg_and_run_in_one_commit(logbook_repo, cli, a_second_before)
    problems = verify_project(open_project(logbook_repo)).problems
    assert [(p.path, p.kind, p.had, p.lost) for p in problems] == \
        [("entries/runs/r1/run.json", "prereg_after_run", both, both)]
    assert f"run r1 answers to {pid}, but the preregistration's `created` is later than the run" in problems[0].message
    assert f"whatever order the commits {both[:7]} and {both[:7]} put them in (both arrived in one commit)" in \
        problems[0].message


# --- one-file records: notes, reviews, scorecards, run records ------------------------------------

def _note(cli, repo, text="spike at 47k"):
    res = cli("note", text, "--json")
    assert res.exit_code == 0, res.output
    rid = json.loads(res.stdout)["id"].removeprefix("note:")
    return repo / "entries" / "notes" / f"{rid}.json"


def _damage(path, **changes):
    rec = json.loads(path.read_text("utf-8"))
    rec.update(changes)
    path.write_text(json.dumps(rec), "utf-8")


@pytest.mark.parametrize("folder", ["notes", "reviews", "runs/r1/outcomes"])
def test_an_uncommitted_one_file_record_that_no_longer_matches_its_hash_is_named(logbook_repo, cli, folder):
    note = _note(cli, logbook_repo)
    target = logbook_repo / "entries" / folder / note.name
    target.parent.mkdir(parents=True, exist_ok=True)
    if target != note:
        target.write_bytes(note.read_bytes())
    assert verify_project(open_project(logbook_repo)).ok
    _damage(target, text="no spike at all")
    rel = target.relative_to(logbook_repo).as_posix()
    problems = verify_project(open_project(logbook_repo)).problems
    assert [(p.path, p.kind) for p in problems] == [(rel, "edited")]
    assert problems[0].message == f"{rel}: its content no longer matches its hash"


def test_a_committed_note_edited_on_disk_is_named_once_by_the_line_that_changed(logbook_repo, cli):
    note = _note(cli, logbook_repo)
    _commit(logbook_repo, "a note")
    _damage(note, text="no spike at all")
    rel = note.relative_to(logbook_repo).as_posix()
    problems = verify_project(open_project(logbook_repo)).problems
    assert [(p.path, p.kind) for p in problems] == [(rel, "edited")]
    assert problems[0].line is not None


def test_a_run_record_is_checked_as_one_and_named_once_when_committed(logbook_repo):
    from logbook.runs.run_record import RunRecord, write_run_record

    for run in ("r1", "r2"):
        write_run_record(open_project(logbook_repo), RunRecord(run_id=run, created="2026-11-30T00:00:00Z",
                                                              config_path="c.yaml", config_hash="0" * 64))
    git(logbook_repo, "add", "entries/runs/r1")
    git(logbook_repo, "commit", "-q", "-m", "run r1")  # r2 is left uncommitted
    assert verify_project(open_project(logbook_repo)).ok
    for run in ("r1", "r2"):
        (logbook_repo / "entries" / "runs" / run / "run.json").write_text("[]\n")
    problems = verify_project(open_project(logbook_repo)).problems
    assert [(p.path, p.kind) for p in problems] == [("entries/runs/r1/run.json", "edited"),
                                                    ("entries/runs/r2/run.json", "edited")]
    assert problems[0].line is not None  # named by the working-tree check, with its line
    assert problems[1].message == "entries/runs/r2/run.json: it is not a run record (a JSON object)"


# --- scope and state --------------------------------------------------------------------------

def test_verify_of_one_preregistration_reports_only_it_and_the_runs_that_answer_to_it(logbook_repo, cli):
    from logbook.runs.run_record import RunRecord, write_run_record

    a, b = _prereg(cli), _prereg(cli)
    for run, pid in (("ra", a), ("rb", b)):
        write_run_record(open_project(logbook_repo), RunRecord(run_id=run, created="2099-01-01T00:00:00Z",
                                                              config_path="c.yaml", config_hash="0" * 64,
                                                              prereg_id=pid))
        _log(logbook_repo, 3, run)
    _commit(logbook_repo, "two runs")
    for run in ("ra", "rb"):
        path = logbook_repo / "entries" / "runs" / run / "events.jsonl"
        path.write_text(path.read_text().replace('"i":1', '"i":7'))
    (logbook_repo / "entries" / "prereg" / f"{b}.md").write_text("rewritten\n")
    report = verify_project(open_project(logbook_repo), a)
    assert report.preregs == [a] and report.logs == ["entries/runs/ra/events.jsonl"]
    assert {p.path for p in report.problems} == {"entries/runs/ra/events.jsonl"}
    everything = verify_project(open_project(logbook_repo))
    assert {p.path for p in everything.problems} >= {"entries/runs/ra/events.jsonl", "entries/runs/rb/events.jsonl",
                                                     f"entries/prereg/{b}.md"}
    assert everything.logs == ["entries/runs/ra/events.jsonl", "entries/runs/rb/events.jsonl"]


def test_an_unknown_preregistration_is_not_found(logbook_repo):
    from logbook.core.errors import NotFoundError

    with pytest.raises(NotFoundError, match="unknown preregistration '2026-01-01-never-abcd'"):
        verify_project(open_project(), "2026-01-01-never-abcd")


def test_a_merge_under_way_is_said_in_the_report(logbook_repo):
    note = logbook_repo / "README.md"  # a conflict outside the logbook
    note.write_text("base\n")
    _commit(logbook_repo)
    git(logbook_repo, "switch", "-q", "-c", "side")
    note.write_text("side\n")
    _commit(logbook_repo)
    git(logbook_repo, "switch", "-q", "main")
    note.write_text("main\n")
    _commit(logbook_repo)
    import subprocess
    assert subprocess.run(["git", "merge", "-q", "side"], cwd=logbook_repo, capture_output=True).returncode != 0
    report = verify_project(open_project(logbook_repo))
    assert report.in_progress and report.in_progress.startswith("a merge")
    assert report.to_dict()["in_progress"] == report.in_progress


# --- the rest of the report and of the way forward ------------------------------------------------

def test_the_json_report_carries_time_identity_and_acknowledged_findings():
    class Identity:
        def to_dict(self):
            return {"enabled": True}

    report = VerifyReport(timestamps={"p1": {"before": True}}, acknowledged=[_f("after_end")], identity=Identity())
    d = report.to_dict()
    assert d["timestamps"] == {"p1": {"before": True}} and d["identity"] == {"enabled": True}
    assert [a["kind"] for a in d["acknowledged"]] == ["after_end"] and d["acknowledged"][0]["path"] == REL
    assert VerifyReport().to_dict()["identity"] is None and VerifyReport().to_dict()["acknowledged"] == []


def test_a_finding_added_by_another_check_is_a_problem_unless_it_is_a_warning():
    report = VerifyReport()
    report.add(REL, "snapshot_missing", "gone", 3)
    report.add(REL, "stray", "a stray file", warning=True)
    assert [(f.path, f.kind, f.message, f.line) for f in report.problems] == [(REL, "snapshot_missing", "gone", 3)]
    assert [(f.kind, f.message, f.line) for f in report.warnings] == [("stray", "a stray file", None)]
    assert not report.ok


def test_two_problems_raise_naming_the_first_and_one_more():
    with pytest.raises(TamperedError) as two:
        VerifyReport(problems=[_f("edited"), _f("chain_broken")]).raise_if_tampered()
    assert two.value.args[0] == f"{REL} is not as written (edited) (and 1 more)"
    with pytest.raises(TamperedError) as one:
        VerifyReport(problems=[_f("chain_broken")], unverifiable=[_f("ignored")]).raise_if_tampered()
    assert one.value.args[0] == f"{REL} is not as written (chain_broken)"  # a problem outranks an ignored record


def test_a_record_edited_in_history_is_not_restored_from_head_while_a_merge_is_under_way():
    report = VerifyReport(in_progress="a merge: x")
    assert report.hint_for(_f("edited", HAD, LOST)) == "a merge: x, then run the command again"
    assert report.hint_for(_f("deleted", HAD, None)).endswith("never an edit")


def test_a_time_finding_gets_the_time_hint_before_its_own():
    from logbook.trust.stamp_proof import time_hint

    for kind in ("stamp_invalid", "stamp_missing", "stamped_after_run", "stamps_after_run"):
        f = Finding(REL, kind, "m", hint="its own hint", had=HAD, lost=LOST)
        assert fix_hint(f) == time_hint(kind, REL)


def test_a_finding_with_its_own_hint_keeps_it_before_any_by_kind():
    assert fix_hint(Finding(REL, "record_edited", "m", hint="do this", had=HAD, lost=LOST)) == "do this"
    assert fix_hint(Finding(REL, "signature_invalid", "m", hint="re-sign it")) == "re-sign it"
    assert VerifyReport().hint_for(Finding(REL, "unsigned", "m", hint="sign it")) == "sign it"


def test_a_remote_finding_with_two_commits_is_not_restored_from_the_first():
    hint = fix_hint(_f("remote_differs", HAD, LOST))
    assert f"`git checkout {HAD} -- {REL}`" in hint and "take the remote's version back" in hint


@pytest.mark.parametrize("kind", ["seed_mismatch", "seed_source_missing", "replay_differs", "replay_not_done"])
def test_a_seed_or_replay_finding_says_a_run_must_train_from_the_stamps_seed(kind):
    hint = fix_hint(_f(kind))
    assert "earliest stamp" in hint and "restore a deleted stamp" in hint and hint.endswith("`--prereg`")


ACK = f"`logbook acknowledge {REL} --reason TEXT`"


@pytest.mark.parametrize("kind", ["after_end", "outcome_in_log"])
def test_a_line_after_the_end_is_pushed_back_from_a_clone_or_acknowledged(kind):
    hint = fix_hint(_f(kind))
    assert "push that version back" in hint and f"`git log -p -- {REL}`" in hint and ACK in hint


@pytest.mark.parametrize("kind", ["snapshot_missing", "snapshot_moved"])
def test_a_lost_snapshot_is_pushed_back_from_a_clone_that_has_it_or_acknowledged(kind):
    hint = fix_hint(_f(kind))
    assert "in a clone that still has the snapshot, run `logbook init`" in hint and "`git fetch`" in hint
    assert ACK in hint


@pytest.mark.parametrize("kind", ["snapshot_prereg_differs", "seen_false", "prereg_differs_in_log"])
def test_a_record_that_cannot_be_made_true_again_is_said_in_a_note_or_acknowledged(kind):
    hint = fix_hint(_f(kind))
    assert "cannot be made true again" in hint and "`logbook note`" in hint and ACK in hint


def test_any_other_finding_is_restored_from_git_and_superseded():
    assert fix_hint(_f("chain_broken")).startswith("restore the record from git")
    assert "supersedes it" in fix_hint(_f("chain_broken"))
    assert "preregister anew" in fix_hint(_f("prereg_after_run"))
    assert fix_hint(_f("prereg_after_run")).endswith("`--prereg`")


def _run_for(repo, pid, created, run="r1"):
    from logbook.runs.run_record import RunRecord, write_run_record

    write_run_record(open_project(repo), RunRecord(run_id=run, created=created, config_path="c.yaml",
                                                   config_hash="0" * 64, prereg_id=pid))


def test_a_run_committed_before_its_preregistration_does_not_answer_to_it(logbook_repo, cli):
    pid = _prereg(cli)
    git(logbook_repo, "reset", "-q", "--soft", "HEAD~1")
    git(logbook_repo, "rm", "-q", "--cached", "-r", "entries/prereg")  # the preregistration waits, uncommitted
    _run_for(logbook_repo, pid, "2099-01-01T00:00:00.000000Z")
    git(logbook_repo, "add", "entries/runs")
    git(logbook_repo, "commit", "-q", "-m", "the run first")
    run_commit = git(logbook_repo, "rev-parse", "HEAD").strip()
    made = _commit(logbook_repo, "the preregistration after it")
    problems = verify_project(open_project(logbook_repo)).problems
    assert [(p.path, p.kind, p.had, p.lost) for p in problems] == \
        [("entries/runs/r1/run.json", "prereg_after_run", made, run_commit)]
    assert problems[0].message == (
        f"run r1 answers to {pid}, but the preregistration was first committed in {made[:7]}, which is not before "
        f"{run_commit[:7]}, where the run was first committed")


def test_a_run_committed_after_its_preregistration_but_created_before_it_does_not_answer_to_it(logbook_repo, cli):
    pid = _prereg(cli)
    made = git(logbook_repo, "rev-parse", "HEAD").strip()
    _run_for(logbook_repo, pid, "2000-01-01T00:00:00.000000Z")
    started = _commit(logbook_repo, "the run")
    problems = verify_project(open_project(logbook_repo)).problems
    assert [(p.kind, p.had, p.lost) for p in problems] == [("prereg_after_run", made, started)]
    assert problems[0].message == (
        f"run {'r1'} answers to {pid}, but the preregistration's `created` is later than the run's: it was written "
        f"after the run started, whatever order the commits {made[:7]} and {started[:7]} put them in")


def test_a_run_committed_after_its_preregistration_and_created_after_it_answers_to_it(logbook_repo, cli):
    pid = _prereg(cli)
    _run_for(logbook_repo, pid, "2099-01-01T00:00:00.000000Z")
    _commit(logbook_repo, "the run")
    assert verify_project(open_project(logbook_repo)).ok
    _run_for(logbook_repo, pid, "2099-01-01T00:00:00.000000Z", run="r2")  # not committed yet: nothing to order
    assert verify_project(open_project(logbook_repo)).ok


def test_a_record_git_ignores_is_unverifiable_not_a_problem(logbook_repo, cli):
    note = _note(cli, logbook_repo)
    (logbook_repo / ".gitignore").write_text("n-ignored.json\n")
    _commit(logbook_repo, "an ignore rule")
    copy = note.with_name("n-ignored.json")
    copy.write_bytes(note.read_bytes())
    report = verify_project(open_project(logbook_repo))
    assert [(u.path, u.kind) for u in report.unverifiable] == [(copy.relative_to(logbook_repo).as_posix(), "ignored")]
    assert report.problems == [] and not report.ok


def test_a_stamp_of_nothing_is_a_problem_and_one_no_authority_can_check_is_a_warning(logbook_repo):
    stamp = logbook_repo / "entries" / "stamps" / ("ab" * 32) / "0123456789ab.tsr"
    stamp.parent.mkdir(parents=True)
    stamp.write_bytes(b"not a token")
    report = verify_project(open_project(logbook_repo))
    rel = stamp.relative_to(logbook_repo).as_posix()
    assert [(p.path, p.kind) for p in report.problems] == [(rel, "stamp_orphan")]
    assert [(w.path, w.kind) for w in report.warnings] == [(rel, "stamp_unchecked")]
    assert report.timestamps["state"] == "off"


def test_a_run_seeded_from_a_stamp_that_is_not_there_is_a_problem(logbook_repo, cli):
    from logbook.runs.run_record import RunRecord, write_run_record

    pid = _prereg(cli)
    write_run_record(open_project(logbook_repo), RunRecord(
        run_id="r1", created="2099-01-01T00:00:00.000000Z", config_path="c.yaml", config_hash="0" * 64,
        prereg_id=pid, seed=1, seed_source="stamps/none.tsr"))
    _commit(logbook_repo, "the run")
    report = verify_project(open_project(logbook_repo))
    assert [(p.path, p.kind) for p in report.problems] == [("entries/runs/r1/run.json", "seed_source_missing")]
    assert report.warnings == []


def test_a_late_run_is_never_sent_to_restore_a_commit_whatever_commits_it_names():
    late = Finding("entries/runs/r1/run.json", "prereg_after_run", "m", had=HAD, lost=LOST, hint="other")
    assert "preregister anew" in fix_hint(late) and "git checkout" not in fix_hint(late)


def test_an_amendment_with_both_links_broken_names_both(logbook_repo, cli):
    def change(front, pid):
        front["previous"].update(file="gone.md")
        front.pop("original")

    pid, original, first = _amended(logbook_repo, cli)
    rel = _forged_second(logbook_repo, pid, original, first, change)
    assert _chain_findings(logbook_repo) == [
        (rel, f"{rel}: links the record before it as gone.md, which is not among {pid}'s records: "
              "the amendment chain is broken"),
        (rel, f"{rel}: links the preregistration as None, which is not among {pid}'s records: "
              "the amendment chain is broken")]


def test_an_amendment_linking_a_record_by_another_hash_names_both_hashes(logbook_repo, cli):
    pid, original, first = _amended(logbook_repo, cli)
    rel = _forged_second(logbook_repo, pid, original, first, lambda f, pid: f["original"].update(sha256="0" * 64))
    assert _chain_findings(logbook_repo) == [
        (rel, f"{rel}: links {pid}.md by hash 000000000000, but that record hashes to {_sha(original)[:12]}: "
              "the amendment chain is broken")]


def test_a_line_after_the_end_is_named_by_its_log_and_line(logbook_repo):
    log = ChainedLog(_log(logbook_repo, 1))
    log.append({"kind": "run_finished", "run": "r1", "data": {}})
    log.append({"kind": "milestone", "run": "r1", "data": {"i": 9}})
    problems = verify_project(open_project(logbook_repo)).problems
    assert [(p.path, p.kind, p.line) for p in problems] == [("entries/runs/r1/events.jsonl", "after_end", 3)]
    assert problems[0].message.startswith("entries/runs/r1/events.jsonl: line 3 is a milestone event")


def test_a_run_record_without_a_time_is_ordered_by_history_alone(logbook_repo, cli):
    pid = _prereg(cli)
    _run_for(logbook_repo, pid, "")
    _commit(logbook_repo, "the run, committed after")
    assert verify_project(open_project(logbook_repo)).ok


def test_a_run_record_without_a_time_squashed_with_its_preregistration_cannot_be_ordered(logbook_repo, cli):
    pid, both = _prereg_and_run_in_one_commit(logbook_repo, cli, lambda pid: "")
    problems = verify_project(open_project(logbook_repo)).problems
    assert [(p.path, p.kind) for p in problems] == [("entries/runs/r1/run.json", "prereg_after_run")]


def test_a_preregistration_without_a_time_is_ordered_by_history_alone(logbook_repo, cli):
    from logbook.promises.prereg_format import render_record

    pid = _prereg(cli)
    git(logbook_repo, "reset", "-q", "--soft", "HEAD~1")
    path = logbook_repo / "entries" / "prereg" / f"{pid}.md"
    front, body = _front(path)
    front.pop("created")
    path.write_text(render_record(front, body), encoding="utf-8")
    _commit(logbook_repo, "a preregistration with no time")
    _run_for(logbook_repo, pid, "2000-01-01T00:00:00.000000Z")
    _commit(logbook_repo, "the run")
    assert [p.kind for p in verify_project(open_project(logbook_repo)).problems] == []


def test_the_hints_that_restore_a_record_say_it_is_never_edited_nor_withdrawn_in_full():
    edited = fix_hint(_f("record_edited", HAD, LOST))
    assert f"`git checkout {HAD[:7]} -- {REL}`" in edited and "never edited" in edited
    erased = fix_hint(_f("remote_erased", HAD, "origin/main"))
    assert f"`git checkout {HAD[:7]} -- {REL}`" in erased and "never withdrawn" in erased
    assert "proves nothing" in fix_hint(_f("uncommitted"))


def test_ignored_records_hint_names_the_rule_finder_in_full():
    with pytest.raises(RefusedError) as err:
        VerifyReport(unverifiable=[_f("ignored")]).raise_if_tampered()
    assert f"`git check-ignore -v {REL}`" in err.value.hint and err.value.hint.endswith("`logbook commit`")


def test_a_file_that_differs_from_head_is_restored_by_its_own_path():
    hint = VerifyReport().hint_for(_f("deleted"))
    assert f"`git restore --source=HEAD --staged --worktree -- {REL}`" in hint and "never an edit" in hint


def test_mid_merge_a_file_that_differs_from_head_may_come_from_the_merge(logbook_repo):
    readme = logbook_repo / "README.md"  # a conflict outside the logbook
    readme.write_text("base\n")
    _commit(logbook_repo)
    git(logbook_repo, "switch", "-q", "-c", "side")
    readme.write_text("side\n")
    _commit(logbook_repo)
    git(logbook_repo, "switch", "-q", "main")
    readme.write_text("main\n")
    _commit(logbook_repo)
    import subprocess
    assert subprocess.run(["git", "merge", "-q", "side"], cwd=logbook_repo, capture_output=True).returncode != 0
    hint = verify_project(open_project(logbook_repo)).hint_for(_f("edited"))
    assert hint.startswith("a merge is in progress: ") and "`--source=MERGE_HEAD`" in hint and REL in hint


def test_an_uncommitted_symlink_in_place_of_a_preregistration_is_named_as_a_symlink_only(logbook_repo, cli):
    pid = _prereg(cli)
    link = logbook_repo / "entries" / "prereg" / "2026-12-01-linked-abcd.md"
    link.symlink_to(f"{pid}.md")
    report = verify_project(open_project(logbook_repo))
    assert "uncommitted" not in [p.kind for p in report.problems]
    assert "elsewhere" not in [w.kind for w in report.warnings]


def test_a_preregistration_committed_only_on_another_branch_is_a_warning_naming_it(logbook_repo, cli):
    pid = _prereg(cli)
    rel = f"entries/prereg/{pid}.md"
    git(logbook_repo, "branch", "keep")
    git(logbook_repo, "reset", "-q", "--hard", "HEAD~1")
    git(logbook_repo, "checkout", "keep", "--", rel)
    git(logbook_repo, "reset", "-q")  # on disk, not staged
    report = verify_project(open_project(logbook_repo))
    assert report.ok and [(w.path, w.kind) for w in report.warnings] == [(rel, "elsewhere")]
    assert report.warnings[0].message == \
        f"{rel} (preregistration) is committed on another branch, not in HEAD's history"
    (logbook_repo / rel).write_text((logbook_repo / rel).read_text() + "\nlater\n")
    problems = verify_project(open_project(logbook_repo)).problems
    assert [(p.path, p.kind) for p in problems] == [(rel, "uncommitted")]


def test_a_preregistration_edited_in_a_later_commit_is_named_by_history_not_again_by_its_hash(logbook_repo, cli):
    pid = _prereg(cli)
    rel = f"entries/prereg/{pid}.md"
    (logbook_repo / rel).write_text((logbook_repo / rel).read_text() + "\nlater\n")
    _commit(logbook_repo, "an edit")
    problems = verify_project(open_project(logbook_repo)).problems
    assert [(p.path, p.kind) for p in problems] == [(rel, "record_edited")]


def _recommit(repo, trailers) -> str:
    from logbook.records import gitbind

    git(repo, "commit", "-q", "--amend", "-m", gitbind.format_message("Preregister", "", trailers))
    return git(repo, "rev-parse", "HEAD").strip()


def test_a_commit_whose_trailer_claims_another_hash_is_named_with_both_hashes(logbook_repo, cli):
    pid = _prereg(cli)
    rel = f"entries/prereg/{pid}.md"
    made = _recommit(logbook_repo, [("Logbook-Prereg", pid), ("Logbook-Sha256", "e" * 64)])
    problems = verify_project(open_project(logbook_repo)).problems
    assert [(p.path, p.kind, p.had, p.lost) for p in problems] == [(rel, "hash_mismatch", made, "HEAD")]
    assert problems[0].message == (
        f"{rel} (preregistration) hashes to {_sha(logbook_repo / rel)[:12]}, but commit {made[:7]} that made it "
        f"says Logbook-Sha256 {'e' * 12} (the commit was amended)")


def test_a_commit_whose_trailer_claims_a_hash_for_an_unreadable_record_says_so(logbook_repo, cli):
    pid = _prereg(cli)
    rel = f"entries/prereg/{pid}.md"
    (logbook_repo / rel).write_bytes(b"\xff not a record\n")
    git(logbook_repo, "add", rel)
    _recommit(logbook_repo, [("Logbook-Prereg", pid), ("Logbook-Sha256", "e" * 64)])
    found = [p for p in verify_project(open_project(logbook_repo)).problems if p.kind == "hash_mismatch"]
    assert len(found) == 1 and "hashes to nothing read, but commit" in found[0].message


def test_a_commit_without_a_hash_trailer_proves_by_its_bytes_alone(logbook_repo, cli):
    pid = _prereg(cli)
    _recommit(logbook_repo, [("Logbook-Prereg", pid)])
    assert verify_project(open_project(logbook_repo)).ok


def test_verify_or_raise_returns_the_report_of_its_scope_and_raises_on_a_change(logbook_repo, cli):
    from logbook.proof.verify import verify_or_raise

    a, b = _prereg(cli), _prereg(cli)
    (logbook_repo / "entries" / "prereg" / f"{b}.md").write_text("rewritten\n")
    assert verify_or_raise(open_project(logbook_repo), a).preregs == [a]
    with pytest.raises(TamperedError):
        verify_or_raise(open_project(logbook_repo))


def test_every_run_of_a_preregistration_is_ordered_even_after_an_uncommitted_one_and_one_in_order(logbook_repo, cli):
    """The runs are checked one by one: a run not committed yet, or one in order, never ends the check early."""
    from logbook.runs.run_record import RunRecord, write_run_record

    pid = _prereg(cli)
    made = _created(logbook_repo, pid)
    project = open_project(logbook_repo)
    for run, created in (("r-b-in-order", "2099-01-01T00:00:00Z"), ("r-c-backdated", "2000-01-01T00:00:00Z")):
        write_run_record(project, RunRecord(run_id=run, created=created, config_path="c.yaml",
                                            config_hash="0" * 64, prereg_id=pid))
    _commit(logbook_repo, "two runs")
    write_run_record(project, RunRecord(run_id="r-a-uncommitted", created="2099-01-01T00:00:00Z",
                                        config_path="c.yaml", config_hash="0" * 64, prereg_id=pid))
    report = verify_project(open_project(logbook_repo))
    late = [p for p in report.problems if p.kind == "prereg_after_run"]
    assert [p.path for p in late] == ["entries/runs/r-c-backdated/run.json"], report.problems
    assert made > "2000-01-01" and "`created` is later than the run's" in late[0].message


def test_a_run_log_that_is_a_symlink_is_never_read_as_a_log_with_or_without_a_scope(logbook_repo, cli, tmp_path):
    """A link can point anywhere: it is reported as a symlink, and its target is not checked as the run's log."""
    from logbook.runs.run_record import RunRecord, write_run_record

    pid = _prereg(cli)
    project = open_project(logbook_repo)
    write_run_record(project, RunRecord(run_id="r-linked", created="2099-01-01T00:00:00Z", config_path="c.yaml",
                                        config_hash="0" * 64, prereg_id=pid))
    elsewhere = tmp_path / "events.jsonl"
    ChainedLog(elsewhere).append({"kind": "run_started", "step": 0})
    (project.run_dir("r-linked") / "events.jsonl").symlink_to(elsewhere)
    link = "entries/runs/r-linked/events.jsonl"
    for scope in (None, pid):
        report = verify_project(open_project(logbook_repo), scope, full=True)
        assert link not in report.logs, (scope, report.logs)
    assert any(p.kind == "symlink" and p.path == link for p in verify_project(open_project(logbook_repo)).problems)


def test_an_amended_preregistration_does_not_end_the_order_check_of_those_after_it(logbook_repo, cli):
    _amended(logbook_repo, cli)  # sorts first, and its amendment right after it
    res = cli("prereg", "--title", "zz a later idea", "--hypothesis", "Later.", "--predict", "loss@final < 2",
              "--json")
    pid = json.loads(res.stdout)["id"]
    git(logbook_repo, "reset", "-q", "--soft", "HEAD~1")
    git(logbook_repo, "rm", "-q", "--cached", f"entries/prereg/{pid}.md")
    _run_for(logbook_repo, pid, "2099-01-01T00:00:00.000000Z")
    git(logbook_repo, "add", "entries/runs")
    git(logbook_repo, "commit", "-q", "-m", "the run first")
    _commit(logbook_repo, "the preregistration after it")
    problems = verify_project(open_project(logbook_repo)).problems
    assert [(p.kind, p.path) for p in problems] == [("prereg_after_run", "entries/runs/r1/run.json")]


def test_the_order_is_read_from_the_repository_whatever_the_working_folder(logbook_repo, cli, tmp_path,
                                                                           monkeypatch):
    pid = _prereg(cli)
    _run_for(logbook_repo, pid, "2099-01-01T00:00:00.000000Z")
    _commit(logbook_repo, "the run")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # a script that verifies a logbook it is not standing in
    assert verify_project(open_project(logbook_repo)).ok


def test_a_deleted_preregistration_is_reported_as_deleted_and_its_committed_run_is_not_called_post_hoc(logbook_repo, cli):
    """The order check reads the record's `created` from disk; a record gone from disk leaves history's order alone."""
    from logbook.runs.run_record import RunRecord, write_run_record

    pid = _prereg(cli)
    project = open_project(logbook_repo)
    write_run_record(project, RunRecord(run_id="r-after", created="2099-01-01T00:00:00Z", config_path="c.yaml",
                                        config_hash="0" * 64, prereg_id=pid))
    _commit(logbook_repo, "the run")
    (logbook_repo / "entries" / "prereg" / f"{pid}.md").unlink()
    kinds = {p.kind for p in verify_project(open_project(logbook_repo), full=True).problems}
    assert "deleted" in kinds and "prereg_after_run" not in kinds, kinds


def test_a_run_whose_start_trained_with_another_seed_than_its_record_says_is_named_with_both(logbook_repo, cli):
    from logbook.eventlog.chain import ChainedLog as Log
    from logbook.runs.run_record import RunRecord, write_run_record

    pid = _prereg(cli)
    project = open_project(logbook_repo)
    write_run_record(project, RunRecord(run_id="r-seeded", created="2099-01-01T00:00:00Z", config_path="c.yaml",
                                        config_hash="0" * 64, prereg_id=pid, seed=1))
    Log(project.run_dir("r-seeded") / "events.jsonl").append(
        {"kind": "run_started", "step": 0, "run": "r-seeded", "attempt": 1, "data": {"prereg_id": pid, "seed": 2}})
    found = [p for p in verify_project(open_project(logbook_repo), full=True).problems if p.kind == "seed_mismatch"]
    assert [(p.path, p.message) for p in found] == [(
        "entries/runs/r-seeded/run.json", "run r-seeded: its run_started #1 trained with seed 2, its run.json records 1")]


def test_a_merge_under_way_is_named_whatever_folder_verify_is_asked_from(logbook_repo, tmp_path, monkeypatch):
    (logbook_repo / "plan.txt").write_text("a\n")
    _commit(logbook_repo, "plan")
    git(logbook_repo, "checkout", "-q", "-b", "other")
    (logbook_repo / "plan.txt").write_text("b\n")
    _commit(logbook_repo, "plan b")
    git(logbook_repo, "checkout", "-q", "-")
    (logbook_repo / "plan.txt").write_text("c\n")
    _commit(logbook_repo, "plan c")
    subprocess.run(["git", "merge", "-q", "other"], cwd=logbook_repo, capture_output=True)  # conflicts
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    report = verify_project(open_project(logbook_repo), full=True)
    assert report.in_progress == "a merge is in progress: finish it (`git commit`) or abort it (`git merge --abort`)"


def test_verify_asked_from_another_folder_reads_the_repositorys_own_history(logbook_repo, cli, tmp_path, monkeypatch):
    """Every git question is put to the repository, never to the folder the reader happens to be in."""
    pid = _prereg(cli)
    made = _recommit(logbook_repo, [("Logbook-Prereg", pid), ("Logbook-Sha256", "e" * 64)])
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    problems = verify_project(open_project(logbook_repo), full=True).problems
    assert [(p.kind, p.had) for p in problems] == [("hash_mismatch", made)]


def test_verify_of_an_unknown_preregistration_says_where_to_find_the_known_ones(logbook_repo, cli):
    from logbook.core.errors import NotFoundError

    _prereg(cli)
    with pytest.raises(NotFoundError) as err:
        verify_project(open_project(logbook_repo), "2026-01-01-no-such-idea-abc123", full=True)
    assert (err.value.message, err.value.hint) == (
        "unknown preregistration '2026-01-01-no-such-idea-abc123'", "see `logbook ls`")


def test_only_files_named_as_a_preregistration_in_its_folder_are_checked_as_one(logbook_repo, cli):
    """A name is a record when it is an id and `.md` both: a note beside the records is not one, an id of one
    short word is, and a name that is an id only once a letter more is cut is not."""
    pid = _prereg(cli)
    _commit(logbook_repo, "the preregistration")
    folder = logbook_repo / "entries" / "prereg"
    for name in ("notes.md", "2026-01-01-a.md", "2026-01-01-ab-.md"):
        (folder / name).write_text("written by hand\n")
    report = verify_project(open_project(logbook_repo), full=True)
    assert report.preregs == ["2026-01-01-a", pid]
    assert [(p.path, p.kind) for p in report.problems] == [("entries/prereg/2026-01-01-a.md", "uncommitted")]
