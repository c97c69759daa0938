"""One-file commits with trailers, repository state checks, trailer search and code snapshots."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from conftest import git

from logbook.core.errors import RefusedError, UsageError
from logbook.core.project import open_project
from logbook.records import gitbind


def _raw(repo: Path, *args: str) -> bytes:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True).stdout


def _head(repo: Path) -> str:
    return git(repo, "rev-parse", "HEAD").strip()


def _message(record_id: str = "r1") -> str:
    return gitbind.format_message("Record r1", "body", [("Logbook-Prereg", record_id), ("Logbook-Sha256", "ab" * 32)])


def test_commit_file_commits_only_that_file_with_trailers(repo):
    before = _head(repo)
    done = gitbind.commit_file(repo, "entries/prereg/r1.md", b"hello\n", _message())
    assert _head(repo) == done.commit and done.parent == before
    assert git(repo, "show", "--name-only", "--format=", done.commit).split() == ["entries/prereg/r1.md"]
    trailers = git(repo, "log", "-1", "--format=%(trailers:only,unfold)").splitlines()
    assert "Logbook-Prereg: r1" in trailers and f"Logbook-Sha256: {'ab' * 32}" in trailers
    assert (repo / "entries/prereg/r1.md").read_bytes() == b"hello\n"
    assert git(repo, "status", "--porcelain") == ""


def test_commit_file_refuses_a_path_that_exists(repo):
    (repo / "entries").mkdir()
    (repo / "entries/r1.md").write_text("mine\n")
    before = _head(repo)
    with pytest.raises(RefusedError, match="already exists"):
        gitbind.commit_file(repo, "entries/r1.md", b"x\n", _message())
    assert _head(repo) == before and (repo / "entries/r1.md").read_text() == "mine\n"


def test_commit_file_refuses_when_the_branch_moved_and_leaves_no_file(repo):
    state = gitbind.check_repo_state(repo)
    git(repo, "commit", "-q", "--allow-empty", "-m", "someone else")
    moved = _head(repo)
    with pytest.raises(RefusedError, match="branch moved"):
        gitbind.commit_file(repo, "r1.md", b"x\n", _message(), state)
    assert _head(repo) == moved
    assert not (repo / "r1.md").exists()


def test_commit_file_undoes_the_commit_when_the_index_stays_locked(repo, monkeypatch):
    monkeypatch.setattr(gitbind, "_INDEX_LOCK_WAIT_S", 0.2)
    before = _head(repo)
    lock = repo / ".git" / "index.lock"
    lock.write_text("")
    try:
        with pytest.raises(RefusedError, match="index.lock"):
            gitbind.commit_file(repo, "r1.md", b"x\n", _message())
    finally:
        lock.unlink()
    assert _head(repo) == before
    assert not (repo / "r1.md").exists()
    assert git(repo, "status", "--porcelain") == ""


def test_check_repo_state_refuses_a_detached_head(repo):
    git(repo, "checkout", "-q", "--detach")
    with pytest.raises(RefusedError, match="detached"):
        gitbind.check_repo_state(repo)


def test_check_repo_state_refuses_a_repository_without_commits(tmp_path):
    git(tmp_path, "init", "-q")
    with pytest.raises(RefusedError, match="no commits"):
        gitbind.check_repo_state(tmp_path)


def _conflict(repo: Path) -> None:
    """Two branches that change README.md differently."""
    git(repo, "checkout", "-q", "-b", "other")
    (repo / "README.md").write_text("theirs\n")
    git(repo, "commit", "-q", "-am", "theirs")
    git(repo, "checkout", "-q", "main")
    (repo / "README.md").write_text("ours\n")
    git(repo, "commit", "-q", "-am", "ours")


@pytest.mark.parametrize("command, what", [
    (["merge", "other"], "merge is in progress"),
    (["cherry-pick", "other"], "cherry-pick is in progress"),
    (["rebase", "other"], "rebase"),
])
def test_check_repo_state_refuses_an_operation_in_progress(repo, command, what):
    _conflict(repo)
    assert subprocess.run(["git", *command], cwd=repo, capture_output=True).returncode != 0
    with pytest.raises(RefusedError, match=what) as e:
        gitbind.check_repo_state(repo)
    assert "abort" in e.value.hint


def test_author_ident_comes_from_git_config(repo):
    assert gitbind.author_ident(repo) == "Ada Tester <ada@example.org>"
    git(repo, "config", "user.name", "Grace Hopper")
    assert gitbind.author_ident(repo) == "Grace Hopper <ada@example.org>"


def test_trailer_commits_are_found_on_any_branch_but_reachable_only_from_head(repo):
    git(repo, "checkout", "-q", "-b", "colleague")
    theirs = gitbind.commit_file(repo, "theirs.md", b"t\n", _message("theirs")).commit
    git(repo, "checkout", "-q", "main")
    mine = gitbind.commit_file(repo, "mine.md", b"m\n", _message("mine")).commit
    found = {tc.trailers["Logbook-Prereg"]: tc for tc in gitbind.trailer_commits(repo, "Logbook-Prereg")}
    assert found["theirs"].commit == theirs and found["mine"].commit == mine
    assert found["mine"].files == ["mine.md"]
    assert gitbind.reachable_from_head(repo, "Logbook-Prereg") == {mine}


def test_a_trailer_line_in_the_body_is_not_a_trailer(repo):
    git(repo, "commit", "-q", "--allow-empty", "-m", "subject\n\nLogbook-Prereg: fake\n\nreal paragraph")
    assert gitbind.trailer_commits(repo, "Logbook-Prereg") == []


def test_read_blobs_returns_contents_and_none_for_missing(repo):
    blobs = gitbind.read_blobs(repo, ["HEAD:README.md", "HEAD:nope.md", "HEAD:README.md"])
    assert blobs == {"HEAD:README.md": b"experiments\n", "HEAD:nope.md": None}


# --- snapshots ---------------------------------------------------------------

def _user_view(repo: Path) -> tuple[bytes, ...]:
    return (_raw(repo, "diff", "--cached"), _raw(repo, "diff"), _raw(repo, "status", "--porcelain", "-uall"),
            _raw(repo, "rev-parse", "HEAD"), _raw(repo, "symbolic-ref", "HEAD"))


def test_snapshot_captures_dirty_and_untracked_files_without_touching_anything(logbook_repo):
    repo = logbook_repo
    settings = repo / "logbook.yaml"
    settings.write_text(re.sub(r"(?m)^snapshot_max_file_mb:.*$", "snapshot_max_file_mb: 0.001", settings.read_text()))
    git(repo, "commit", "-q", "-am", "small snapshot cap")
    (repo / ".gitignore").write_text("*.log\n")
    git(repo, "add", ".gitignore")
    (repo / "README.md").write_text("changed, unstaged\n")
    (repo / "new.py").write_text("print('untracked')\n")
    (repo / "debug.log").write_text("ignored\n")
    (repo / "ckpt.bin").write_bytes(b"\0" * 5000)
    (repo / "staged.py").write_text("staged\n")
    git(repo, "add", "staged.py")
    before = _user_view(repo)
    head = _head(repo)

    snap = gitbind.snapshot_worktree(open_project(), "run-1")

    assert _user_view(repo) == before
    assert snap["ref"] == "refs/logbook/snapshots/run-1" and snap["head"] == head and snap["dirty"] is True
    assert snap["skipped"] == ["ckpt.bin"]
    assert git(repo, "rev-parse", snap["ref"]).strip() == snap["commit"] != head
    assert git(repo, "rev-parse", f"{snap['commit']}^").strip() == head
    files = set(git(repo, "ls-tree", "-r", "--name-only", snap["commit"]).split())
    assert {"new.py", "staged.py", ".gitignore", "README.md"} <= files
    assert not {"debug.log", "ckpt.bin"} & files
    assert git(repo, "show", f"{snap['commit']}:README.md") == "changed, unstaged\n"


def test_snapshot_of_a_clean_tree_is_head_itself(logbook_repo):
    snap = gitbind.snapshot_worktree(open_project(), "clean")
    assert snap["dirty"] is False and snap["commit"] == snap["head"] == _head(logbook_repo)
    assert git(logbook_repo, "rev-parse", "refs/logbook/snapshots/clean").strip() == snap["head"]


def test_snapshot_records_deleted_tracked_files(logbook_repo):
    (logbook_repo / "README.md").unlink()
    snap = gitbind.snapshot_worktree(open_project(), "gone")
    assert "README.md" not in git(logbook_repo, "ls-tree", "-r", "--name-only", snap["commit"]).split()
    assert git(logbook_repo, "ls-files").split().count("README.md") == 1


def test_snapshot_refuses_a_repeated_or_invalid_run_id(logbook_repo):
    gitbind.snapshot_worktree(open_project(), "r1")
    with pytest.raises(RefusedError, match="already exists"):
        gitbind.snapshot_worktree(open_project(), "r1")
    for bad in ("../x", "-rf", "a.lock"):
        with pytest.raises(UsageError):
            gitbind.snapshot_worktree(open_project(), bad)
