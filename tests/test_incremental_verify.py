"""A warm `verify`, answering from what it kept, finds exactly what a cold `verify --full` finds.

`verify` keeps verdicts of files git says are unchanged since HEAD
(`records/file_verdicts.py`), the newest clean commit (`records/history.py`)
and its last report (`records/verify_memo.py`). Each step below changes the
logbook the way a person or a forger would, and after each the warm verify's
findings are compared with a cold one's, which reads everything again.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from conftest import git
from forger import append_forged

from logbook.core import statecache
from logbook.core.project import open_project
from logbook.eventlog.chain import utc_now
from logbook.eventlog.files import write_record
from logbook.eventlog.sink import EventSink
from logbook.records.file_verdicts import CACHE
from logbook.runs.run_record import RunRecord, write_run_record


def _findings(cli, *flags: str) -> tuple[int, list[tuple[str, str, str]]]:
    res = cli("verify", "--json", *flags)
    report = json.loads(res.stdout)
    return res.exit_code, sorted((bucket, f["path"], f["kind"]) for bucket in ("problems", "warnings")
                                 for f in report[bucket])


def _same_as_cold(cli) -> list[tuple[str, str, str]]:
    warm = _findings(cli)
    assert warm == _findings(cli, "--full")
    return warm[1]


def _run(repo: Path, run_id: str) -> Path:
    project = open_project(repo)
    write_run_record(project, RunRecord(run_id=run_id, created=utc_now(), config_path="c.yaml", config_hash="0" * 64,
                                        prereg_id=None, exploratory=True, amendments=[]))
    sink = EventSink(project.run_dir(run_id), run_id, attempt=1)
    for step in range(3):
        sink.emit("milestone", step=step * 10, fraction=step / 3)
    return project.run_dir(run_id)


def _commit(repo: Path, message: str) -> None:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)


def _note(repo: Path, text: str) -> Path:
    rec = write_record(open_project(repo).notes_dir, {"kind": "note", "author": "Ada", "text": text})
    return open_project(repo).notes_dir / f"{rec['id']}.json"


def test_a_warm_verify_finds_what_a_cold_one_finds_after_every_kind_of_change(logbook_repo, cli):
    repo = logbook_repo
    runs = [_run(repo, f"r{i}") for i in range(3)]
    notes = [_note(repo, f"note {i}") for i in range(3)]
    _commit(repo, "three runs and three notes")
    assert _same_as_cold(cli) == [] and (repo / ".logbook" / CACHE).is_file()

    # A note edited in the working tree: git no longer vouches for its bytes.
    notes[0].write_text(notes[0].read_text().replace("note 0", "note zero"))
    assert ("problems", notes[0].relative_to(repo).as_posix(), "edited") in \
        [(b, p, "edited") for b, p, _k in _same_as_cold(cli)]
    git(repo, "checkout", "--", str(notes[0]))
    assert _same_as_cold(cli) == []

    # A line that breaks the chain appended to a log, not committed: HEAD's blob was kept clean, the tree's is not.
    log = runs[1] / "events.jsonl"
    with log.open("a") as f:
        f.write('{"kind": "milestone", "forged": true}\n')
    assert any(p == log.relative_to(repo).as_posix() for _b, p, _k in _same_as_cold(cli))
    _commit(repo, "a forged line")  # committed: its blob is new, so it is read
    assert any(p == log.relative_to(repo).as_posix() for _b, p, _k in _same_as_cold(cli))

    # Reverted: the log holds its first blob again, whose verdict was kept clean, while history keeps the break.
    git(repo, "revert", "--no-edit", "HEAD")
    assert any(p == log.relative_to(repo).as_posix() for _b, p, _k in _same_as_cold(cli))

    # A record replaced by a symlink in the working tree.
    target = repo / "elsewhere.json"
    target.write_bytes(notes[1].read_bytes())
    notes[1].unlink()
    os.symlink(target, notes[1])
    assert any(p == notes[1].relative_to(repo).as_posix() for _b, p, _k in _same_as_cold(cli))


def test_an_outcome_line_reported_as_unvouched_is_read_again_once_a_scorecard_names_it(logbook_repo, cli):
    """A log's verdict reads the run's scorecards too (an older logbook's `outcome.json` names the line it
    vouches for): a change under the run's `outcome*` paths is part of the verdict's key."""
    run = _run(logbook_repo, "scored")
    line = append_forged(run / "events.jsonl", "outcome", {"counts": {"confirmed": 1}})
    _commit(logbook_repo, "a run with an outcome line")
    assert [k for _b, _p, k in _same_as_cold(cli)] == ["outcome_in_log"]
    (run / "outcome.json").write_text(json.dumps({"event": f"scored:{line['seq']}"}))
    assert _same_as_cold(cli) == []  # untracked, and it vouches: the kept verdict is not used
    _commit(logbook_repo, "the scorecard that names it")
    assert _same_as_cold(cli) == []
    (run / "outcome.json").unlink()
    _commit(logbook_repo, "the scorecard removed")  # a committed record deleted, and the line unvouched again
    assert {k for _b, _p, k in _same_as_cold(cli)} == {"outcome_in_log", "record_deleted"}


def test_a_verdict_cache_planted_to_clear_a_forged_log_is_not_read(logbook_repo, cli):
    run = _run(logbook_repo, "r1")
    _commit(logbook_repo, "a run")
    assert _same_as_cold(cli) == []
    log = run / "events.jsonl"
    lines = log.read_text().splitlines(keepends=True)
    log.write_text(lines[0] + lines[2])  # a line dropped from the middle: the chain breaks
    _commit(logbook_repo, "quietly dropped a line")
    path = logbook_repo / ".logbook" / CACHE
    kept = statecache.load(open_project(logbook_repo), CACHE)
    blob = git(logbook_repo, "rev-parse", f"HEAD:{log.relative_to(logbook_repo).as_posix()}").strip()
    kept["verdicts"] = {k.replace(k.split("\0")[2], blob): [] if k.startswith("log\0") else v
                        for k, v in kept["verdicts"].items()}
    path.write_text(json.dumps(kept))  # no seal: a forger's hand, not this user's logbook
    (logbook_repo / ".logbook" / "verified-report.json").unlink()
    code, found = _findings(cli)
    assert code != 0 and ("problems", log.relative_to(logbook_repo).as_posix(), "log_edited") in found


def test_a_preregistration_whose_hash_and_time_were_kept_is_read_again_once_its_bytes_change(logbook_repo, cli):
    from test_history import _prereg

    pid = _prereg(cli)
    project = open_project(logbook_repo)
    write_run_record(project, RunRecord(run_id="r1", created="2099-01-01T00:00:00.000000Z", config_path="c.yaml",
                                        config_hash="0" * 64, prereg_id=pid))
    _commit(logbook_repo, "run r1")
    assert _same_as_cold(cli) == []  # the warm verify keeps the preregistration's hash and `created`
    _note(logbook_repo, "a later commit")
    _commit(logbook_repo, "a note")
    assert _same_as_cold(cli) == []  # read from what was kept
    path = project.prereg_dir / f"{pid}.md"
    text = path.read_text("utf-8")
    created = next(line for line in text.splitlines() if line.startswith("created:"))
    path.write_text(text.replace(created, "created: '2100-01-01T00:00:00Z'"), "utf-8")
    edited = _same_as_cold(cli)
    assert ("problems", "entries/runs/r1/run.json", "prereg_after_run") in edited
    _commit(logbook_repo, "a later `created`")
    committed = _same_as_cold(cli)
    assert ("problems", "entries/runs/r1/run.json", "prereg_after_run") in committed
    assert any(kind == "hash_mismatch" or kind == "record_edited" for _, _, kind in committed)


def test_a_run_record_rewritten_to_answer_to_a_preregistration_is_caught_from_its_kept_log(logbook_repo, cli):
    from test_history import _prereg

    pid = _prereg(cli)
    project = open_project(logbook_repo)
    record = RunRecord(run_id="r1", created="2099-01-01T00:00:00.000000Z", config_path="c.yaml",
                       config_hash="0" * 64, prereg_id=None, exploratory=True, amendments=[])
    write_run_record(project, record)
    EventSink(project.run_dir("r1"), "r1", attempt=1).emit("run_started", prereg_id=None)
    _commit(logbook_repo, "run r1")
    assert [kind for _, _, kind in _same_as_cold(cli)] == []  # what the log says is kept by its blob
    path = project.run_dir("r1") / "run.json"
    path.write_text(json.dumps({**json.loads(path.read_text("utf-8")), "prereg_id": pid, "exploratory": False}))
    _commit(logbook_repo, "r1 answers to the preregistration after all")
    assert ("problems", "entries/runs/r1/run.json", "prereg_differs_in_log") in _same_as_cold(cli)
