"""Durable writes: a file is either whole or absent, and a created file never replaces another."""

from __future__ import annotations

import pytest

from logbook.fsutil import atomic_create_bytes, atomic_write_bytes


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
