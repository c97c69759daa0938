"""A cache under `.logbook/` that this user's logbook did not write in this clone is never read.

`.logbook/` travels with the folder: a tarball handed to a reviewer, a shared
disk, a `cp -r` of a teammate's checkout. A forger who ships a
`verified-history.json` naming HEAD as clean would have `verify` skip the
whole history walk. Every cache is sealed (`logbook/core/statecache.py`); these
tests plant one the ways a forger can and show the forgery is still found.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import git

from logbook.core import statecache
from logbook.core.project import open_project
from logbook.records.history import CACHE_FILE


def _forged_history(repo: Path) -> tuple[str, str]:
    """A note committed, then edited in a later commit: a break any honest verify reports."""
    note = repo / "entries" / "notes" / "2026-11-05-note-ab12.json"
    note.parent.mkdir(parents=True, exist_ok=True)
    note.write_text('{"text": "loss spiked at step 120"}\n')
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "note")
    had = git(repo, "rev-parse", "HEAD").strip()
    note.write_text('{"text": "no spike"}\n')
    git(repo, "commit", "-qam", "quietly reworded")
    return had, git(repo, "rev-parse", "HEAD").strip()


def _claims_clean(head: str) -> dict:
    """What a walk that found HEAD's whole history clean writes."""
    return {"version": 1, "entries": "entries", "tip": head, "introduced": {}}


def _kinds(cli) -> tuple[int, list[str]]:
    res = cli("verify", "--json")
    return res.exit_code, [p["kind"] for p in json.loads(res.stdout)["problems"]]


def _become(monkeypatch, home: Path) -> None:
    """Another person's machine: another home, so another sealing key."""
    home.mkdir(parents=True, exist_ok=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_STATE_HOME", str(home / ".local" / "state"))


def test_the_sealed_history_cache_is_what_lets_verify_skip_the_walk(logbook_repo, cli):
    """The control: sealed by this user in this clone, a cache naming HEAD clean is believed (so the tests below
    fail if sealing stops mattering)."""
    _, head = _forged_history(logbook_repo)
    statecache.save(open_project(logbook_repo), CACHE_FILE, _claims_clean(head))
    code, kinds = _kinds(cli)
    assert code == 0 and "record_edited" not in kinds


def test_a_planted_unsealed_history_cache_is_not_read(logbook_repo, cli):
    _, head = _forged_history(logbook_repo)
    (open_project(logbook_repo).state_dir / CACHE_FILE).write_text(json.dumps(_claims_clean(head)))
    code, kinds = _kinds(cli)
    assert code != 0 and "record_edited" in kinds


def test_a_history_cache_sealed_on_the_forgers_machine_is_not_read_on_the_readers(logbook_repo, cli, tmp_path,
                                                                                  monkeypatch):
    _, head = _forged_history(logbook_repo)
    _become(monkeypatch, tmp_path / "forger")
    statecache.save(open_project(logbook_repo), CACHE_FILE, _claims_clean(head))
    _become(monkeypatch, tmp_path / "reader")
    code, kinds = _kinds(cli)
    assert code != 0 and "record_edited" in kinds


def test_a_cache_copied_with_the_folder_into_another_clone_is_not_read(logbook_repo, cli, tmp_path, monkeypatch):
    """Even this user's own cache vouches only for the clone it was written in."""
    _, head = _forged_history(logbook_repo)
    statecache.save(open_project(logbook_repo), CACHE_FILE, _claims_clean(head))
    copy = tmp_path / "copy"
    shutil.copytree(logbook_repo, copy, symlinks=True)
    monkeypatch.chdir(copy)
    code, kinds = _kinds(cli)
    assert code != 0 and "record_edited" in kinds


@pytest.mark.parametrize("damage", [
    lambda b: b.replace(b'"tip"', b'"tiq"'),  # the body edited, the seal kept
    lambda b: b[:30] + bytes([b[30] ^ 1]) + b[31:],  # the seal edited
    lambda b: b.split(b"\n", 1)[1],  # the seal line removed
])
def test_a_sealed_cache_edited_afterwards_is_not_read(logbook_repo, cli, damage):
    _, head = _forged_history(logbook_repo)
    project = open_project(logbook_repo)
    statecache.save(project, CACHE_FILE, _claims_clean(head))
    path = logbook_repo / ".logbook" / CACHE_FILE
    path.write_bytes(damage(path.read_bytes()))
    assert statecache.load(project, CACHE_FILE) is None
    code, kinds = _kinds(cli)
    assert code != 0 and "record_edited" in kinds


def test_the_sealing_key_is_made_once_outside_the_repository_readable_by_its_owner_only(logbook_repo, cli):
    assert cli("verify").exit_code == 0
    key = statecache.key_path()
    assert key.is_file() and (key.stat().st_mode & 0o777) == 0o600
    assert logbook_repo not in key.parents
    first = key.read_bytes()
    assert cli("verify", "--full").exit_code == 0
    assert key.read_bytes() == first and len(first) == 32


def test_without_a_writable_home_nothing_is_cached_and_verify_still_answers(logbook_repo, cli, monkeypatch, tmp_path):
    blocked = tmp_path / "state-is-a-file"
    blocked.write_text("")
    monkeypatch.setenv("XDG_STATE_HOME", str(blocked))
    _forged_history(logbook_repo)
    for _ in range(2):
        code, kinds = _kinds(cli)
        assert code != 0 and "record_edited" in kinds
    assert not (logbook_repo / ".logbook" / CACHE_FILE).exists()
