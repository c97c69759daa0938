"""Durable writes: a file is either whole or absent, and a created file never replaces another.

And a log's tail: where its complete lines end, whatever a kill mid-append left behind.
"""

from __future__ import annotations

import pytest

from logbook.core.fsutil import LogTail, atomic_create_bytes, atomic_write_bytes, log_tail


def test_atomic_create_never_replaces_a_file_and_leaves_no_temporary_behind(tmp_path):
    target = tmp_path / "sub" / "record.yaml"
    atomic_create_bytes(target, b"first\n")
    with pytest.raises(FileExistsError):
        atomic_create_bytes(target, b"second\n")
    assert target.read_bytes() == b"first\n"
    assert sorted(p.name for p in target.parent.iterdir()) == ["record.yaml"]


def test_atomic_write_replaces_whole_and_leaves_no_temporary_behind(tmp_path):
    target = tmp_path / "state.json"
    atomic_write_bytes(target, b"old")
    atomic_write_bytes(target, b"new")
    assert target.read_bytes() == b"new"
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]


@pytest.mark.parametrize("content, tail", [
    (b"", LogTail(0, 0, None)),
    (b"no newline at all", LogTail(17, 0, None)),
    (b"only\n", LogTail(5, 5, b"only")),
    (b"a\nb\n", LogTail(4, 4, b"b")),
    (b"a\nb\n{\"torn", LogTail(10, 4, b"b")),
    (b"\n\n", LogTail(2, 2, b"")),
], ids=["empty", "no-newline", "one-line", "two-lines", "torn-last-line", "blank-lines"])
def test_log_tail_finds_where_the_complete_lines_end(tmp_path, content, tail):
    path = tmp_path / "events.jsonl"
    path.write_bytes(content)
    with open(path, "rb") as f:
        assert log_tail(f) == tail


def test_log_tail_reads_a_last_line_longer_than_its_block_whole(tmp_path):
    long = b"x" * 1000
    path = tmp_path / "events.jsonl"
    path.write_bytes(b"first\n" + long + b"\n" + b"torn" * 300)
    with open(path, "rb") as f:
        assert log_tail(f, block=16) == LogTail(path.stat().st_size, 6 + 1001, long)
