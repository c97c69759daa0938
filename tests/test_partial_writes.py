"""Writes that either happen or say what happened: a record kept when its derived files fail, and retries."""

from __future__ import annotations

from chronicle_helpers import clock, project_of  # noqa: F401  (clock is a fixture)
from scoring_helpers import story_clock  # noqa: F401  (a fixture)

import errno
import os

from logbook.chronicle import build
from logbook.chronicle.build import day_path
from logbook.eventlog.files import iter_folder


def _disk_full_for_day_files(monkeypatch) -> None:
    """Day files fail as on a full disk; the note's own record (a different write) still goes through."""
    def full(path, text):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
    monkeypatch.setattr(build, "atomic_write_text", full)


def test_a_note_whose_day_file_fails_is_kept_said_so_and_a_retry_does_not_duplicate_it(logbook_repo, clock, cli,
                                                                                     monkeypatch):
    project = project_of(logbook_repo)
    clock.set("2026-12-01T11:00:00")
    with monkeypatch.context() as m:
        _disk_full_for_day_files(m)
        res = cli("note", "The disk filled up overnight.")
    assert res.exit_code == 3 and "Traceback" not in res.output
    nid = res.stdout.strip()
    assert nid.startswith("note:")  # the record exists, so its id is printed as on success
    assert f"{nid} is written and kept" in res.stderr and "No space left on device" in res.stderr
    assert "logbook render" in res.stderr and "nothing was half-written" not in res.stderr
    assert [f"note:{r['id']}" for r in iter_folder(project.notes_dir)] == [nid]
    assert not day_path(project, "2026-12-01").is_file()

    clock.set("2026-12-01T11:05:00")  # the same note again, once the disk has room: a retry
    res = cli("note", "The disk filled up overnight.")
    assert res.exit_code == 0, res.output
    assert res.stdout.strip() == nid and "already written" in res.stderr
    assert [f"note:{r['id']}" for r in iter_folder(project.notes_dir)] == [nid]
    assert f"id: `{nid}`" in day_path(project, "2026-12-01").read_text()

    clock.set("2026-12-01T11:10:00")  # its day file shows it now: the same words again are a second note
    res = cli("note", "The disk filled up overnight.")
    assert res.exit_code == 0, res.output
    assert res.stdout.strip() != nid and len(list(iter_folder(project.notes_dir))) == 2


def test_a_retry_must_match_words_and_day(logbook_repo, clock, cli, monkeypatch):
    project = project_of(logbook_repo)
    clock.set("2026-12-01T23:59:00")
    with monkeypatch.context() as m:
        _disk_full_for_day_files(m)
        first = cli("note", "Saw a spike.").stdout.strip()
        clock.set("2026-12-01T23:59:20")
        other = cli("note", "Saw a spike, twice.")  # other words, the day file still missing: a new note
        assert other.exit_code == 3 and other.stdout.strip() not in ("", first)
    clock.set("2026-12-02T00:01:00")  # the next day: a new note, not a retry of yesterday's
    res = cli("note", "Saw a spike.")
    assert res.exit_code == 0 and res.stdout.strip() != first and "already written" not in res.stderr
    assert len(list(iter_folder(project.notes_dir))) == 3


def test_an_approval_whose_day_file_fails_is_kept_and_says_so(logbook_repo, story_clock, cli, monkeypatch):
    from scoring_helpers import make_prereg, story_run

    project = project_of(logbook_repo)
    story_run(project, story_clock, "story", make_prereg(project, ["loss@final < 4"]))
    queue = cli("review", "--json")
    eid = next(i["id"] for i in __import__("json").loads(queue.stdout) if i["kind"] == "restart")
    with monkeypatch.context() as m:
        _disk_full_for_day_files(m)
        res = cli("review", "approve", eid)
    assert "nothing was half-written" not in res.stderr and "Traceback" not in res.output
    assert len(list(iter_folder(project.reviews_dir))) == 1  # the approval is kept
    assert "No space left on device" in res.stderr and "logbook render" in res.stderr
