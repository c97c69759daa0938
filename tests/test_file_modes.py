"""Files the logbook writes get the permissions the user's umask asks for, like any other file."""

from __future__ import annotations

import os
import stat

import pytest

from logbook.core.fsutil import atomic_create_bytes, atomic_text_writer, atomic_write_bytes


@pytest.fixture
def umask():
    def set_mask(mask: int) -> None:
        os.umask(mask)

    old = os.umask(0o022)
    os.umask(old)
    yield set_mask
    os.umask(old)


def _mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize("mask, expected", [(0o022, 0o644), (0o002, 0o664), (0o077, 0o600)])
def test_every_durable_write_follows_the_umask(tmp_path, umask, mask, expected):
    umask(mask)
    atomic_write_bytes(tmp_path / "replaced", b"x")
    atomic_create_bytes(tmp_path / "created", b"x")
    with atomic_text_writer(tmp_path / "streamed") as f:
        f.write("x")
    for name in ("replaced", "created", "streamed"):
        assert _mode(tmp_path / name) == expected, name


def test_a_preregistration_and_the_chronicle_are_group_readable_under_a_shared_umask(logbook_repo, cli, umask):
    umask(0o002)
    made = cli("prereg", "--title", "Modes", "--hypothesis", "The loss falls.", "--predict", "val_loss@final < 3")
    assert made.exit_code == 0, made.output
    assert cli("note", "a note for the day").exit_code == 0
    files = list((logbook_repo / "entries" / "prereg").glob("*.md")) + list((logbook_repo / "entries").glob("2*/*/*.md"))
    assert len(files) >= 2
    assert {_mode(p) for p in files} == {0o664}
