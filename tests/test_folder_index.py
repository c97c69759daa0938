"""The derived index of a folder's records: what a view reads equals what the files say, and only what changed is
read again."""

from __future__ import annotations

import os

import logbook.records.folder_index as folder_index
from logbook.core.project import open_project
from logbook.eventlog.files import iter_folder, write_record
from logbook.records.folder_index import folder_records

FIELDS = ("about", "ts", "id", "author")


def _reads(monkeypatch) -> list:
    seen: list = []
    real = folder_index.read_record

    def counting(path):
        seen.append(path)
        return real(path)

    monkeypatch.setattr(folder_index, "read_record", counting)
    return seen


def _cut(recs):
    return [{k: r[k] for k in FIELDS if k in r} for r in recs]


def test_the_index_gives_what_the_files_say_and_reads_only_the_files_that_changed(logbook_repo, monkeypatch):
    monkeypatch.setattr(folder_index, "_RACY_NS", 0)  # files written a moment ago may be kept
    project = open_project(logbook_repo)
    folder = project.notes_dir
    for n in range(5):
        write_record(folder, {"kind": "note", "author": f"P{n}", "text": "t", "about": None if n % 2 else f"r:{n}"})
    (folder / "20261201T000000000000Z-0badf00d.json").write_text("not json")  # unreadable: left out, as iter_folder
    reads = _reads(monkeypatch)
    assert folder_records(project, folder, FIELDS) == _cut(iter_folder(folder))
    assert len(reads) == 6
    reads.clear()
    assert folder_records(project, folder, FIELDS) == _cut(iter_folder(folder))
    assert reads == []  # nothing changed: nothing read

    first = sorted(p for p in folder.glob("*.json") if "0badf00d" not in p.name)[0]
    st = first.stat()
    text = first.read_text().replace('"author":"P0"', '"author":"Q0"')
    first.write_text(text)  # same size, its old modification time put back: the change time still moved
    os.utime(first, ns=(st.st_atime_ns, st.st_mtime_ns))
    write_record(folder, {"kind": "note", "author": "P9", "text": "new"})
    reads.clear()
    got = folder_records(project, folder, FIELDS)
    assert got == _cut(iter_folder(folder)) and any(r.get("author") == "Q0" for r in got)
    assert sorted(p.name for p in reads) == sorted([first.name, max(p.name for p in folder.glob("*.json"))])


def test_a_file_written_within_the_racy_window_is_read_every_time(logbook_repo, monkeypatch):
    project = open_project(logbook_repo)
    write_record(project.notes_dir, {"kind": "note", "author": "P1", "text": "t"})
    reads = _reads(monkeypatch)
    folder_records(project, project.notes_dir, FIELDS)
    folder_records(project, project.notes_dir, FIELDS)
    assert len(reads) == 2  # written a moment ago: a second write in the same clock tick could not be told apart


def test_a_planted_index_is_not_read(logbook_repo, monkeypatch):
    monkeypatch.setattr(folder_index, "_RACY_NS", 0)
    project = open_project(logbook_repo)
    rec = write_record(project.notes_dir, {"kind": "note", "author": "P1", "text": "t"})
    folder_records(project, project.notes_dir, FIELDS)
    (cache,) = project.state_dir.glob("index-*.json")
    head, _, body = cache.read_bytes().partition(b"\n")
    cache.write_bytes(head + b"\n" + body.replace(b'"P1"', b'"P2"'))  # the seal no longer matches
    assert folder_records(project, project.notes_dir, FIELDS) == [{"ts": rec["ts"], "id": rec["id"], "author": "P1"}]
