"""`logbook verify` names every way a record or a log can change after it was written."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from conftest import git

from logbook.core.project import open_project
from logbook.records import gitbind
from logbook.eventlog.chain import ChainedLog
from logbook.promises.prereg import load_prereg
from logbook.promises.prereg_format import record_hash, render_record, split_record
from logbook.eventlog.sink import EventSink
from logbook.proof.verify import verify_project
from logbook.runs.run_record import RunRecord, write_run_record

FLAGS = ["--title", "qk-norm removes spikes", "--hypothesis", "QK-norm keeps attention logits bounded.",
         "--predict", "val_loss@final < 1.45", "--predict", "spikes@final == 0"]


def _prereg(cli) -> str:
    res = cli("prereg", *FLAGS, "--json")
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)["id"]


def _path(repo: Path, pid: str, n: int = 0) -> Path:
    """The preregistration (n=0) or its n-th amendment in the logbook's own order."""
    if n == 0:
        return repo / "entries" / "prereg" / f"{pid}.md"
    return load_prereg(open_project(repo), pid).amendments[n - 1].path


def _amend(cli, pid: str, reason: str = "r") -> None:
    res = cli("prereg", "amend", pid, "--reason", reason, "--seen", "nothing", "--predict", "restarts@final <= 2")
    assert res.exit_code == 0, res.output


def _tampered(cli, *args: str) -> tuple[str, list[dict]]:
    res = cli("verify", *args)
    assert res.exit_code == 4, res.output
    assert res.stderr.startswith("error: ") and "Traceback" not in res.output
    as_json = cli("verify", *args, "--json")
    assert as_json.exit_code == 4
    report = json.loads(as_json.stdout)
    assert report["ok"] is False
    return res.stdout + res.stderr, report["problems"]


def test_intact_logbook_verifies(logbook_repo, cli):
    pid = _prereg(cli)
    _amend(cli, pid)
    res = cli("verify")
    assert res.exit_code == 0, res.output
    assert res.stdout == "Intact: 1 preregistration, 1 amendment, 0 logs.\n"
    report = json.loads(cli("verify", "--json").stdout)
    assert report["ok"] and report["preregs"] == [pid] and report["amendments"] == 1


def test_verify_on_an_empty_logbook_is_intact(logbook_repo, cli):
    res = cli("verify")
    assert res.exit_code == 0 and "Intact: 0 preregistrations" in res.stdout


def test_edited_body_is_named_by_line(logbook_repo, cli):
    pid = _prereg(cli)
    path = _path(logbook_repo, pid)
    lines = path.read_text().splitlines(keepends=True)
    n = next(i for i, ln in enumerate(lines) if ln.startswith("QK-norm keeps") and i > 30)
    lines[n] = "QK-norm keeps attention logits bounded, mostly.\n"
    path.write_text("".join(lines))
    out, problems = _tampered(cli)
    assert f"{path.relative_to(logbook_repo)} was edited after HEAD committed it" in out
    assert f"line {n + 1} changed: 'QK-norm keeps attention logits bounded.' -> " in out
    assert problems == [{"path": str(path.relative_to(logbook_repo)), "kind": "edited", "line": n + 1,
                         "message": problems[0]["message"], "had": None, "lost": None, "hint": None}]


def test_edited_front_matter_is_named_by_line(logbook_repo, cli):
    pid = _prereg(cli)
    path = _path(logbook_repo, pid)
    text = path.read_text()
    path.write_text(text.replace("threshold: 1.45", "threshold: 1.6", 1))
    line = text.splitlines().index("  threshold: 1.45") + 1
    out, problems = _tampered(cli)
    assert f"line {line} changed: '  threshold: 1.45' -> '  threshold: 1.6'" in out
    assert [p["kind"] for p in problems] == ["edited"]


def test_deleted_prereg_is_reported(logbook_repo, cli):
    pid = _prereg(cli)
    _path(logbook_repo, pid).unlink()
    out, problems = _tampered(cli)
    assert f"{pid}.md was deleted" in out and "HEAD has it committed" in out  # whole: test_wording_verify
    out, _ = _tampered(cli, pid)
    assert "was deleted" in out


def test_deleted_and_committed_removal_is_still_reported(logbook_repo, cli):
    pid = _prereg(cli)
    made = git(logbook_repo, "rev-parse", "HEAD").strip()
    git(logbook_repo, "rm", "-q", str(_path(logbook_repo, pid)))
    git(logbook_repo, "commit", "-q", "-m", "tidy up")
    lost = git(logbook_repo, "rev-parse", "HEAD").strip()
    out, problems = _tampered(cli)
    assert [(p["kind"], p["had"], p["lost"]) for p in problems] == [("record_deleted", made, lost)]
    assert f"{pid}.md (record, committed in {made[:7]}) was deleted in {lost[:7]}" in out


def test_commit_amended_with_new_content_is_a_hash_mismatch(logbook_repo, cli):
    pid = _prereg(cli)
    path = _path(logbook_repo, pid)
    path.write_text(path.read_text().replace("spikes@final == 0", "spikes@final <= 3"))
    git(logbook_repo, "commit", "-q", "--amend", "--no-edit", "-a")
    out, problems = _tampered(cli)
    assert [p["kind"] for p in problems] == ["hash_mismatch"]
    assert "says Logbook-Sha256" in out and "(the commit was amended)" in out


def test_commit_amended_to_carry_another_file_still_verifies(logbook_repo, cli):
    """The record's bytes are what is proven; a commit that also carries code is what a squash-merge makes."""
    _prereg(cli)
    (logbook_repo / "train.py").write_text("x = 1\n")
    git(logbook_repo, "add", "train.py")
    git(logbook_repo, "commit", "-q", "--amend", "--no-edit")
    res = cli("verify")
    assert res.exit_code == 0, res.output


def test_commit_rebased_onto_another_parent_still_verifies(logbook_repo, cli):
    git(logbook_repo, "checkout", "-q", "-b", "exp")
    _prereg(cli)
    git(logbook_repo, "checkout", "-q", "main")
    git(logbook_repo, "commit", "-q", "--allow-empty", "-m", "meanwhile on main")
    git(logbook_repo, "checkout", "-q", "exp")
    git(logbook_repo, "rebase", "-q", "main")
    res = cli("verify")
    assert res.exit_code == 0, res.output


def test_commit_whose_trailers_were_lost_still_verifies(logbook_repo, cli):
    """A squash-merge may drop the trailers; the bytes in HEAD's history are the proof."""
    _prereg(cli)
    git(logbook_repo, "commit", "-q", "--amend", "-m", "a plain message")
    res = cli("verify")
    assert res.exit_code == 0, res.output


def test_record_committed_only_on_another_branch_is_a_warning(logbook_repo, cli):
    pid = _prereg(cli)
    git(logbook_repo, "branch", "keep")
    git(logbook_repo, "reset", "-q", "--hard", "HEAD~1")
    git(logbook_repo, "checkout", "keep", "--", str(_path(logbook_repo, pid).relative_to(logbook_repo)))
    res = cli("verify")
    assert res.exit_code == 0, res.output
    assert "on another branch, not in HEAD's history" in res.stderr


def _forge(repo: Path, path: Path, front: dict, body: str, pid: str, n: int) -> None:
    """Commit a hand-made record with trailers that look like logbook's."""
    path.write_text(render_record(front, body), encoding="utf-8")
    git(repo, "add", str(path))
    msg = gitbind.format_message(f"Amend {pid}", "", [("Logbook-Prereg", pid), ("Logbook-Amendment", str(n)),
                                                     ("Logbook-Sha256", record_hash(front, body))])
    git(repo, "commit", "-q", "-m", msg)


def test_forged_amendment_is_caught(logbook_repo, cli):
    pid = _prereg(cli)
    for reason in ("first", "second"):
        _amend(cli, pid, reason)
    a1 = _path(logbook_repo, pid, 1)
    key = a1.name.split(".amend-")[1][:-3]
    front, body = split_record(a1.read_text(), "a1")
    front["reason"] = "first, rewritten later"
    front["base_commit"] = git(logbook_repo, "rev-parse", "HEAD").strip()
    git(logbook_repo, "rm", "-q", str(a1))
    git(logbook_repo, "commit", "-q", "-m", "drop")
    front["base_commit"] = git(logbook_repo, "rev-parse", "HEAD").strip()
    _forge(logbook_repo, a1, front, body, pid, key)
    out, problems = _tampered(cli)
    kinds = {p["kind"] for p in problems}
    # History: the committed amendment was dropped, then made again; its trailer no longer matches its bytes.
    assert {"record_deleted", "hash_mismatch"} <= kinds
    assert f"{a1.name} (amendment {key}) hashes to" in out


def test_missing_amendment_in_the_middle_breaks_the_chain(logbook_repo, cli):
    pid = _prereg(cli)
    original = load_prereg(open_project(), pid)
    front = {"schema": 1, "amends": pid, "n": 2, "created": "2026-11-30T00:00:00Z", "author": "x", "reason": "r",
             "seen": "nothing", "kind": "amendment", "previous": {"file": f"{pid}.amend-1.md", "sha256": original.sha256},
             "original": {"file": f"{pid}.md", "sha256": original.sha256},
             "predictions": [], "contingency": [], "runs_started": [],
             "base_commit": git(logbook_repo, "rev-parse", "HEAD").strip()}
    _forge(logbook_repo, logbook_repo / "entries" / "prereg" / f"{pid}.amend-2.md", front, "# amendment\n", pid, 2)
    out, problems = _tampered(cli)
    assert [p["kind"] for p in problems] == ["chain_broken"]
    assert f"links the record before it as {pid}.amend-1.md, which is not among {pid}'s records" in out


def test_verify_one_id_checks_only_that_one(logbook_repo, cli):
    a = _prereg(cli)
    b = _prereg(cli)
    _path(logbook_repo, a).write_text(_path(logbook_repo, a).read_text() + "\nappended\n")
    assert cli("verify", b).exit_code == 0
    out, _ = _tampered(cli, a[:-2])
    lines = len(_path(logbook_repo, a).read_text().splitlines())
    assert f"lines {lines - 1}-{lines} were added: 'appended'" in out


def test_verify_unknown_or_bad_id(logbook_repo, cli):
    res = cli("verify", "2026-01-01-never-abcd")
    assert res.exit_code == 3 and "unknown preregistration" in res.stderr
    res = cli("verify", "../x")
    assert res.exit_code == 2 and "invalid preregistration id" in res.stderr


def test_uncommitted_hand_written_prereg_has_no_commit(logbook_repo, cli):
    pid = _prereg(cli)
    text = _path(logbook_repo, pid).read_text()
    fake = _path(logbook_repo, "2026-12-01-hand-made-abcd")
    fake.write_text(text)
    out, problems = _tampered(cli)
    assert [p["kind"] for p in problems] == ["uncommitted"]
    assert "2026-12-01-hand-made-abcd.md (preregistration) is in no commit of HEAD's history" in out


# --- logs --------------------------------------------------------------------

def _run_log(repo: Path, n: int = 5, commit: bool = True) -> Path:
    proj = open_project()
    write_run_record(proj, RunRecord(run_id="r1", created="2026-11-30T00:00:00Z", config_path="c.yaml",
                                     config_hash="0" * 64))
    sink = EventSink(proj.run_dir("r1"), "r1", attempt=0)
    for step in range(n):
        sink.emit("milestone", step=step * 10, fraction=step / n)
    if commit:
        git(repo, "add", "entries/runs")
        git(repo, "commit", "-q", "-m", "run r1")
    return proj.run_dir("r1") / "events.jsonl"


def test_intact_event_log_verifies(logbook_repo, cli):
    _run_log(logbook_repo)
    res = cli("verify")
    assert res.exit_code == 0 and "1 log." in res.stdout


def test_edited_event_line_is_named_by_file_and_line(logbook_repo, cli):
    log = _run_log(logbook_repo)
    lines = log.read_text().splitlines(keepends=True)
    rec = json.loads(lines[2])
    rec["data"]["fraction"] = 0.99
    lines[2] = json.dumps(rec) + "\n"
    log.write_text("".join(lines))
    out, problems = _tampered(cli)
    assert problems[0]["path"] == "entries/runs/r1/events.jsonl" and problems[0]["line"] == 3
    assert "line 3 (seq 2, milestone) was edited" in out  # whole: test_wording_verify


def test_deleted_event_line_is_named(logbook_repo, cli):
    log = _run_log(logbook_repo)
    lines = log.read_text().splitlines(keepends=True)
    log.write_text("".join(lines[:1] + lines[2:]))
    out, problems = _tampered(cli)
    assert problems[0]["line"] == 2 and "a line was deleted, inserted or moved" in out


def test_reordered_event_lines_are_named(logbook_repo, cli):
    log = _run_log(logbook_repo)
    lines = log.read_text().splitlines(keepends=True)
    lines[1], lines[3] = lines[3], lines[1]
    log.write_text("".join(lines))
    _out, problems = _tampered(cli)
    assert {p["line"] for p in problems} >= {2}


def test_committed_lines_cut_from_the_end_are_detected(logbook_repo, cli):
    log = _run_log(logbook_repo)
    lines = log.read_text().splitlines(keepends=True)
    log.write_text("".join(lines[:-2]))
    out, problems = _tampered(cli)
    assert [p["kind"] for p in problems] == ["log_lines_missing"]
    assert "5 lines, the file now has 3" in out  # whole: test_wording_verify


def test_deleted_event_log_is_detected(logbook_repo, cli):
    log = _run_log(logbook_repo)
    log.unlink()
    out, problems = _tampered(cli)
    assert [p["kind"] for p in problems] == ["log_deleted"]
    assert "r1/events.jsonl was deleted" in out  # whole: test_wording_verify


def test_torn_last_line_is_a_warning_not_tampering(logbook_repo, cli):
    log = _run_log(logbook_repo, commit=False)
    with open(log, "ab") as f:
        f.write(b'{"kind": "milest')
    res = cli("verify")
    assert res.exit_code == 0, res.output
    assert "events.jsonl: line 6 is incomplete" in res.stderr  # whole: test_wording_verify
    report = json.loads(cli("verify", "--json").stdout)
    assert report["ok"] and report["warnings"][0]["kind"] == "log_torn_tail"


@pytest.mark.parametrize("which", ["notes", "reviews"])
def test_notes_and_review_logs_are_checked(logbook_repo, cli, which):
    proj = open_project()
    log = ChainedLog(proj.notes_log if which == "notes" else proj.reviews_log)
    for i in range(3):
        log.append({"kind": "note", "data": {"i": i}})
    assert cli("verify").exit_code == 0
    lines = log.path.read_text().splitlines(keepends=True)
    log.path.write_text(lines[0] + lines[2])
    _out, problems = _tampered(cli)
    assert problems[0]["path"] == f"entries/{which}/{which}.jsonl"


def test_verify_id_checks_the_logs_of_its_runs(logbook_repo, cli):
    pid = _prereg(cli)
    log = _run_log(logbook_repo)
    proj = open_project()
    rec = json.loads((proj.run_dir("r1") / "run.json").read_text())
    (proj.run_dir("r1") / "run.json").unlink()  # set up a run of this preregistration (run.json is write-once)
    write_run_record(proj, RunRecord(**{**rec, "prereg_id": pid}))
    assert json.loads(cli("verify", pid, "--json").stdout)["logs"] == ["entries/runs/r1/events.jsonl"]
    log.write_text("".join(log.read_text().splitlines(keepends=True)[1:]))
    _tampered(cli, pid)


def test_verify_project_is_a_library_call(logbook_repo, cli):
    pid = _prereg(cli)
    report = verify_project(open_project())
    assert report.ok and report.preregs == [pid] and report.to_dict()["problems"] == []


def test_verify_works_from_a_subdirectory(logbook_repo, cli, monkeypatch):
    _prereg(cli)
    sub = logbook_repo / "entries"
    monkeypatch.chdir(sub)
    assert cli("verify").exit_code == 0
    assert subprocess.run(["git", "status", "--porcelain"], cwd=sub, capture_output=True, text=True).stdout == ""


def test_an_event_appended_after_the_run_finished_is_caught_though_its_hash_was_worked_out_again(logbook_repo, cli):
    import json as _json

    from logbook.eventlog.chain import record_hash
    from logbook.eventlog.sink import EventSink
    from logbook.runs.run_record import RunRecord, write_run_record

    proj = open_project(logbook_repo)
    write_run_record(proj, RunRecord(run_id="m1", created="2026-11-30T00:00:00Z", config_path="c.yaml",
                                     config_hash="0" * 64, exploratory=True))
    sink = EventSink(proj.run_dir("m1"), "m1", attempt=1)
    sink.emit("milestone", step=10, fraction=1.0)
    sink.emit("run_finished", step=10, final_loss=3.0, val_loss=3.1)
    log = proj.run_dir("m1") / "events.jsonl"
    git(logbook_repo, "add", "-A")
    git(logbook_repo, "commit", "-q", "-m", "run m1")
    assert cli("verify").exit_code == 0
    last = _json.loads(log.read_text().splitlines()[-1])
    forged = {**last, "seq": last["seq"] + 1, "prev": last["hash"], "kind": "hparam_change",
              "data": {"key": "grad_clip", "old": 1.0, "new": 0.5, "reason": "forged", "who": "mallory"}}
    forged.pop("hash")
    forged["hash"] = record_hash(forged)
    with log.open("a") as f:
        f.write(_json.dumps(forged, sort_keys=True, separators=(",", ":")) + "\n")
    git(logbook_repo, "commit", "-q", "-am", "more")
    res = cli("verify")
    assert res.exit_code == 4 and "line 3 is a hparam_change event after the run finished" in res.output, res.output
