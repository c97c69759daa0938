"""Every check of the history walk, pinned as a forger would defeat it: each break names the path, the commit
that had the record, the commit that lost it, who made that commit, and the line.

These call `check_history` on real repositories (no CLI in between), so each test
is a few git commands: a record edited in a commit, deleted, dropped by a merge
parent or turned into a symlink; a log cut short or rewritten rather than
appended; the cache of the last clean commit never hiding a break; the breaks
that HEAD has undone told apart from those it has not.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from logbook.core import statecache
from logbook.core.project import Project
from logbook.core.settings import LogbookConfig
from logbook.eventlog.chain import ChainedLog
from logbook.records.history import CACHE_FILE, check_history, is_ancestor

AUTHOR = {"GIT_AUTHOR_NAME": "Grace Hopper", "GIT_AUTHOR_EMAIL": "grace@lab.example",
          "GIT_AUTHOR_DATE": "2026-11-05T10:00:00+00:00"}


def git(repo: Path, *args: str, env: dict | None = None) -> str:
    r = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True,
                       env=None if env is None else {**os.environ, **env})
    assert r.returncode == 0, r.stderr
    return r.stdout


def commit(repo: Path, message: str = "change", *, env: dict | None = None) -> str:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "--allow-empty", "-m", message, env=env)
    return git(repo, "rev-parse", "HEAD").strip()


def put(repo: Path, rel: str, text: str, folder: str = "entries") -> Path:
    path = repo / folder / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.fixture
def repo(tmp_path) -> Path:
    r = tmp_path / "lab"
    r.mkdir()
    git(r, "init", "-q", "-b", "main")
    (r / "README.md").write_text("experiments\n")
    commit(r, "initial")
    return r


def project(repo: Path, entries: str = "entries") -> Project:
    return Project(root=repo, config=LogbookConfig(entries_dir=entries))


def check(repo: Path, entries: str = "entries", **kw):
    return check_history(project(repo, entries), **kw)


def cached(repo: Path, entries: str = "entries"):
    """The history cache as `check_history` would read it (None: missing, or not sealed by this user here)."""
    return statecache.load(project(repo, entries), CACHE_FILE)


def found(res) -> list[tuple[str, str, str, str]]:
    return [(b.path, b.kind, b.had, b.lost) for b in res.breaks]


def blob(repo: Path, rev: str, path: str) -> str:
    return git(repo, "rev-parse", f"{rev}:{path}").strip()


def log_lines(repo: Path, n: int, rel: str = "runs/r1/events.jsonl") -> Path:
    log = ChainedLog(repo / "entries" / rel)
    for i in range(n):
        log.append({"kind": "milestone", "run": "r1", "data": {"i": i}})
    return log.path


# --- an honest history ---------------------------------------------------------------------------

def test_a_repository_without_commits_has_nothing_to_check(tmp_path):
    r = tmp_path / "empty"
    r.mkdir()
    git(r, "init", "-q", "-b", "main")
    res = check(r)
    assert res.head is None and res.commits_checked == 0 and res.breaks == [] and res.introduced == {}


def test_appending_to_logs_and_adding_records_is_clean_and_says_which_commit_introduced_each(repo):
    commit(repo, "nothing yet")  # an edge with no change under the entries folder
    put(repo, "notes/n-1.json", '{"text": "first"}\n')
    log = log_lines(repo, 2)
    a = commit(repo, "a note and a run")
    with open(log, "ab") as f:  # a torn tail committed (a crash can leave NUL bytes): the next version may repair it
        f.write(b"\0\0\0\0")
    commit(repo, "the run goes on, then is killed")
    ChainedLog(log).append({"kind": "milestone", "run": "r1", "data": {"i": 2}})
    put(repo, "2026/12/01.md", "# the chronicle, regenerated\n")
    put(repo, "notes/n-2.json", '{"text": "second"}\n')
    c = commit(repo, "repaired, a second note")
    put(repo, "2026/12/01.md", "# the chronicle, regenerated again\n")
    (repo / "README.md").write_text("outside the entries folder: not a record\n")
    d = commit(repo, "derived files and the README change freely")
    res = check(repo)
    assert res.head == d and res.breaks == [] and res.restored == []
    assert res.commits_checked == 6
    assert res.introduced == {"notes/n-1.json": [a], "runs/r1/events.jsonl": [a], "notes/n-2.json": [c],
                              "runs/r1/events.jsonl.torn": [c]}  # derived files are not records


def test_a_record_in_the_root_commit_is_introduced_there(tmp_path):
    r = tmp_path / "fresh"
    r.mkdir()
    git(r, "init", "-q", "-b", "main")
    put(r, "notes/n-1.json", "{}\n")
    first = commit(r, "root")
    res = check(r)
    assert res.introduced == {"notes/n-1.json": [first]} and res.breaks == []


def test_an_entries_folder_given_with_a_trailing_slash_is_the_same_folder(repo):
    put(repo, "notes/n-1.json", "v1\n", folder="XAI-lab/entries")
    had = commit(repo)
    put(repo, "notes/n-1.json", "v2\n", folder="XAI-lab/entries")
    lost = commit(repo)
    res = check(repo, "XAI-lab/entries/")
    assert found(res) == [("XAI-lab/entries/notes/n-1.json", "record_edited", had, lost)]
    assert res.introduced == {"notes/n-1.json": [had]}


def test_a_branch_named_like_the_entries_folder_does_not_confuse_the_walk(repo):
    note = put(repo, "notes/n-1.json", "v1\n")
    had = commit(repo)
    git(repo, "branch", "entries")
    note.write_text("v2\n")
    lost = commit(repo)
    assert found(check(repo)) == [("entries/notes/n-1.json", "record_edited", had, lost)]


def test_a_record_whose_name_is_not_utf8_is_named_as_the_filesystem_spells_it(repo):
    name = os.fsencode(str(repo / "entries" / "notes")) + b"/n-\xff.json"
    os.makedirs(repo / "entries" / "notes")
    with open(name, "w") as f:
        f.write("v1\n")
    had = commit(repo)
    with open(name, "w") as f:
        f.write("v2\n")
    lost = commit(repo)
    assert found(check(repo)) == [("entries/notes/n-\udcff.json", "record_edited", had, lost)]


# --- records: edited, deleted, dropped by a merge, symlinked -------------------------------------

def test_a_record_edited_in_a_commit_names_the_path_both_commits_who_when_and_the_line(repo):
    put(repo, "prereg/p1.md", "# qk-norm\n\n- text: val_loss@final < 1.45\n")
    had = commit(repo, "preregister")
    put(repo, "prereg/p1.md", "# qk-norm\n\n- text: val_loss@final < 1.55\n")
    lost = commit(repo, "typo", env=AUTHOR)
    res = check(repo)
    assert found(res) == [("entries/prereg/p1.md", "record_edited", had, lost)]
    b = res.breaks[0]
    assert b.old_blob == blob(repo, had, "entries/prereg/p1.md")
    assert b.message.startswith("entries/prereg/p1.md ")
    assert b.message == (f"entries/prereg/p1.md (record, as committed in {had[:7]}) was edited in {lost[:7]} "
                         "(Grace Hopper, 2026-11-05): line 3 changed: '- text: val_loss@final < 1.45' -> "
                         "'- text: val_loss@final < 1.55'")


def test_the_commit_that_lost_a_record_is_its_direct_child_even_after_unrelated_commits(repo):
    put(repo, "notes/n-1.json", "v1\n")
    commit(repo, "note")
    (repo / "README.md").write_text("unrelated\n")
    commit(repo, "readme")
    had = commit(repo, "empty")
    put(repo, "notes/n-1.json", "v2\n")
    lost = commit(repo, "edit", env=AUTHOR)
    commit(repo, "after")
    res = check(repo)
    assert found(res) == [("entries/notes/n-1.json", "record_edited", had, lost)]
    assert f"was edited in {lost[:7]} (Grace Hopper, 2026-11-05): line 1 changed" in res.breaks[0].message


@pytest.mark.parametrize("before, after, says", [
    ("", "filled in later\n", ": line 1 was added: 'filled in later'"),
    ("written\n", "", ": line 1 was removed: 'written'"),
])
def test_a_record_emptied_or_filled_in_names_the_lines_removed_or_added(repo, before, after, says):
    note = put(repo, "notes/n-1.json", before)
    commit(repo)
    note.write_text(after)
    commit(repo)
    assert check(repo).breaks[0].message.endswith(says)


def test_a_deleted_record_is_named_with_the_commit_that_had_it(repo):
    note = put(repo, "notes/n-1.json", "v1\n")
    put(repo, "2026/11/30.md", "day\n")
    had = commit(repo)
    note.unlink()
    (repo / "entries" / "2026" / "11" / "30.md").unlink()  # a derived file sorts first and is skipped, not the rest
    lost = commit(repo, "tidy", env=AUTHOR)
    res = check(repo)
    assert found(res) == [("entries/notes/n-1.json", "record_deleted", had, lost)]
    msg = res.breaks[0].message
    assert msg.endswith(f"(record, committed in {had[:7]}) was deleted in {lost[:7]} (Grace Hopper, 2026-11-05)")
    assert res.breaks[0].old_blob == blob(repo, had, "entries/notes/n-1.json")


def _merge_without(repo: Path, drop: str, *, env: dict | None = None) -> tuple[str, str]:
    """Bob's record arrives on a side branch; the merge commit leaves it out. (commit that had it, the merge)"""
    git(repo, "switch", "-q", "-c", "bob")
    put(repo, drop, "bob's\n")
    had = commit(repo, "bob's record")
    git(repo, "switch", "-q", "main")
    put(repo, "notes/n-alice.json", "alice's\n")
    commit(repo, "alice's record")
    git(repo, "merge", "-q", "--no-commit", "bob")
    git(repo, "rm", "-q", "-f", f"entries/{drop}")
    git(repo, "commit", "-q", "--no-edit", env=env)
    return had, git(repo, "rev-parse", "HEAD").strip()


def test_a_merge_that_drops_a_parents_record_names_that_parent(repo):
    had, merge = _merge_without(repo, "notes/n-bob.json", env=AUTHOR)
    res = check(repo)
    assert found(res) == [("entries/notes/n-bob.json", "record_dropped", had, merge)]
    assert res.breaks[0].message.endswith(
        f"(record, committed in {had[:7]}) was dropped by the merge in {merge[:7]} (Grace Hopper, 2026-11-05)")
    assert "notes/n-bob.json" in res.introduced and merge not in res.introduced["notes/n-bob.json"]


def test_a_merge_that_drops_a_parents_log_is_a_dropped_log(repo):
    had, merge = _merge_without(repo, "runs/r9/events.jsonl")
    res = check(repo)
    assert found(res) == [("entries/runs/r9/events.jsonl", "log_dropped", had, merge)]
    assert f"(log, committed in {had[:7]}) was dropped by the merge in {merge[:7]}" in res.breaks[0].message


def test_a_merge_that_changes_a_record_is_an_edit_against_the_parent_that_had_it(repo):
    put(repo, "notes/n-1.json", "v1\n")
    commit(repo)
    git(repo, "switch", "-q", "-c", "side")
    put(repo, "notes/n-side.json", "side\n")
    side = commit(repo)
    git(repo, "switch", "-q", "main")
    put(repo, "notes/n-main.json", "main\n")
    main = commit(repo)
    git(repo, "merge", "-q", "--no-commit", "side")
    put(repo, "notes/n-1.json", "v2\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "--no-edit")
    merge = git(repo, "rev-parse", "HEAD").strip()
    res = check(repo)
    assert sorted(found(res)) == sorted([("entries/notes/n-1.json", "record_edited", main, merge),
                                         ("entries/notes/n-1.json", "record_edited", side, merge)])
    assert all(f"was changed by the merge in {merge[:7]}" in b.message for b in res.breaks)
    assert all(b.message.endswith(": line 1 changed: 'v1' -> 'v2'") for b in res.breaks)


def test_a_record_added_by_a_merge_itself_is_introduced_by_the_merge(repo):
    git(repo, "switch", "-q", "-c", "side")
    put(repo, "notes/n-side.json", "side\n")
    side = commit(repo)
    git(repo, "switch", "-q", "main")
    put(repo, "notes/n-main.json", "main\n")
    main = commit(repo)
    git(repo, "merge", "-q", "--no-commit", "side")
    put(repo, "notes/n-evil.json", "slipped into the merge\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "--no-edit")
    merge = git(repo, "rev-parse", "HEAD").strip()
    res = check(repo)
    assert res.breaks == []
    assert res.introduced == {"notes/n-side.json": [side], "notes/n-main.json": [main], "notes/n-evil.json": [merge]}


def test_a_record_added_as_a_symlink_is_a_break_that_no_later_file_undoes(repo, tmp_path):
    (tmp_path / "elsewhere.json").write_text("{}\n")
    link = repo / "entries" / "notes" / "n-1.json"
    link.parent.mkdir(parents=True)
    os.symlink(tmp_path / "elsewhere.json", link)
    added = commit(repo, "a note that is a link", env=AUTHOR)
    res = check(repo)
    assert found(res) == [("entries/notes/n-1.json", "record_symlink", git(repo, "rev-parse", "HEAD~1").strip(),
                           added)]
    assert res.breaks[0].message.endswith(f"is added as a symlink in {added[:7]} (Grace Hopper, 2026-11-05) "
                                          "(a record must be a plain file)")
    assert res.breaks[0].old_blob == ""  # the commit before held nothing there
    other = put(repo, "notes/n-2.json", "v1\n")
    commit(repo)
    other.write_text("v2\n")  # an ordinary edit in the same history, described line by line
    link.unlink()
    link.write_text("{}\n")
    fixed = commit(repo, "a plain file now", env=AUTHOR)
    res = check(repo)
    assert sorted((b.path, b.kind, b.lost) for b in res.breaks) == sorted([
        ("entries/notes/n-1.json", "record_symlink", added), ("entries/notes/n-1.json", "record_edited", fixed),
        ("entries/notes/n-2.json", "record_edited", fixed)])
    assert next(b for b in res.breaks if b.path.endswith("n-2.json")).message.endswith(": line 1 changed: 'v1' -> 'v2'")
    edit = next(b for b in res.breaks if b.lost == fixed and b.path.endswith("n-1.json"))  # a link's target and a file's lines are not compared
    assert edit.message.endswith(f"was edited in {fixed[:7]} (Grace Hopper, 2026-11-05)")
    assert res.restored == []


def test_a_record_replaced_by_a_symlink_that_spells_its_bytes_is_not_restored(repo):
    """A link's blob is its target's name: a link named after the record's bytes has the record's blob id."""
    note = put(repo, "notes/n-1.json", "target.json")
    had = commit(repo)
    note.unlink()
    os.symlink("target.json", note)
    lost = commit(repo, "a link", env=AUTHOR)
    assert blob(repo, had, "entries/notes/n-1.json") == blob(repo, lost, "entries/notes/n-1.json")
    res = check(repo)
    assert found(res) == [("entries/notes/n-1.json", "record_symlink", had, lost)]
    assert res.breaks[0].message.endswith(f"(record in {had[:7]}) was replaced by a symlink in {lost[:7]} "
                                          "(Grace Hopper, 2026-11-05)")
    assert res.breaks[0].old_blob == blob(repo, had, "entries/notes/n-1.json")
    assert res.restored == []


def test_a_record_replaced_by_a_symlink_and_put_back_as_the_file_is_restored(repo, tmp_path):
    note = put(repo, "notes/n-1.json", "v1\n")
    had = commit(repo)
    note.unlink()
    os.symlink(tmp_path / "elsewhere.json", note)
    lost = commit(repo, "a link")
    note.unlink()
    git(repo, "checkout", had, "--", "entries/notes/n-1.json")
    commit(repo, "the file again")
    res = check(repo)
    assert res.breaks == []
    assert [(b.kind, b.had, b.lost) for b in res.restored] == [("record_symlink", had, lost)]


def test_a_log_replaced_by_a_symlink_is_named_as_a_log(repo):
    path = log_lines(repo, 2)
    had = commit(repo)
    path.unlink()
    os.symlink("/etc/hostname", path)
    lost = commit(repo)
    res = check(repo)
    assert found(res) == [("entries/runs/r1/events.jsonl", "record_symlink", had, lost)]
    assert f"(log in {had[:7]}) was replaced by a symlink in {lost[:7]}" in res.breaks[0].message


def test_a_record_whose_mode_changes_is_noticed_and_with_its_bytes_intact_is_a_restored_edit(repo):
    note = put(repo, "notes/n-1.json", "v1\n")
    had = commit(repo)
    note.chmod(0o755)
    lost = commit(repo)
    res = check(repo)
    assert res.breaks == []
    assert [(b.path, b.kind, b.had, b.lost) for b in res.restored] == \
        [("entries/notes/n-1.json", "record_edited", had, lost)]


def test_a_log_whose_mode_changes_is_noticed_as_a_rewrite_and_with_its_lines_intact_is_restored(repo):
    path = log_lines(repo, 2)
    had = commit(repo)
    path.chmod(0o755)
    lost = commit(repo)
    res = check(repo)
    assert [(b.path, b.kind, b.had, b.lost) for b in res.restored] == \
        [("entries/runs/r1/events.jsonl", "log_rewritten", had, lost)]
    assert f"(log, as committed in {had[:7]}) was edited in {lost[:7]}" in res.restored[0].message


def test_a_deleted_log_is_a_deleted_log(repo):
    path = log_lines(repo, 2)
    had = commit(repo)
    path.unlink()
    lost = commit(repo)
    res = check(repo)
    assert found(res) == [("entries/runs/r1/events.jsonl", "log_deleted", had, lost)]
    assert f"(log, committed in {had[:7]}) was deleted in {lost[:7]}" in res.breaks[0].message


# --- logs: appended, not rewritten -------------------------------------------------------------

def _rewrite_log(repo: Path, n: int, change) -> tuple[str, str, Path]:
    path = log_lines(repo, n)
    had = commit(repo, "log")
    path.write_bytes(change(path.read_bytes()))
    lost = commit(repo, "rewritten", env=AUTHOR)
    return had, lost, path


@pytest.mark.parametrize("keep, span", [(4, "line 5"), (3, "lines 4-5"), (0, "lines 1-5")])
def test_a_log_cut_short_says_which_lines_it_lost(repo, keep, span):
    had, lost, _ = _rewrite_log(repo, 5, lambda b: b"".join(b.splitlines(keepends=True)[:keep]))
    res = check(repo)
    assert found(res) == [("entries/runs/r1/events.jsonl", "log_rewritten", had, lost)]
    b = res.breaks[0]
    assert f"(log, 5 lines in {had[:7]}) lost {span} of the 5 committed in {lost[:7]} (Grace Hopper, " in b.message
    assert b.old_blob == blob(repo, had, "entries/runs/r1/events.jsonl")


def test_a_log_cut_in_the_middle_of_a_line_lost_that_line_and_the_rest(repo):
    had, lost, _ = _rewrite_log(repo, 5, lambda b: b[: b.index(b"\n", b.index(b"\n") + 1) + 10])
    assert "lost lines 3-5 of the 5 committed" in check(repo).breaks[0].message


@pytest.mark.parametrize("line", [1, 3, 5])
def test_a_log_line_edited_and_rechained_is_rewritten_from_that_line(repo, line):
    def edit(data: bytes) -> bytes:
        lines = data.splitlines(keepends=True)
        lines[line - 1] = lines[line - 1].replace(b'"i":', b'"j":')
        return b"".join(lines)
    had, lost, _ = _rewrite_log(repo, 5, edit)
    res = check(repo)
    assert found(res) == [("entries/runs/r1/events.jsonl", "log_rewritten", had, lost)]
    assert res.breaks[0].message.endswith(f"(log, 5 lines in {had[:7]}) was rewritten from line {line} in {lost[:7]} "
                                          "(Grace Hopper, 2026-11-05)")


def test_a_log_with_a_line_dropped_and_one_appended_is_rewritten_not_cut(repo):
    def swap(data: bytes) -> bytes:
        lines = data.splitlines(keepends=True)
        return b"".join(lines[:2] + lines[3:] + [b'{"forged":1}\n'])
    had, lost, _ = _rewrite_log(repo, 5, swap)
    assert "was rewritten from line 3 in" in check(repo).breaks[0].message


def test_a_log_cut_to_fewer_lines_with_different_bytes_is_rewritten_from_the_first_that_differs(repo):
    had, lost, _ = _rewrite_log(repo, 5, lambda b: b"".join(b.splitlines(keepends=True)[:1]) + b'{"forged":1}\n')
    assert "was rewritten from line 2 in" in check(repo).breaks[0].message


def test_a_log_whose_last_newline_became_a_carriage_return_is_rewritten_from_that_line(repo):
    had, lost, _ = _rewrite_log(repo, 3, lambda b: b[:-1] + b"\r")
    assert "(log, 3 lines in " in check(repo).breaks[0].message
    assert "was rewritten from line 3 in" in check(repo).breaks[0].message


def test_a_carriage_return_slipped_into_the_first_line_is_named_as_line_1(repo):
    had, lost, _ = _rewrite_log(repo, 2, lambda b: b.replace(b"\n", b"\r\n", 1))
    assert "was rewritten from line 1 in" in check(repo).breaks[0].message


# --- breaks that HEAD has undone --------------------------------------------------------------

def test_a_deleted_record_put_back_byte_for_byte_is_restored_and_named_by_what_it_first_lost(repo):
    note = put(repo, "notes/n-1.json", "v1\n")
    had = commit(repo)
    note.unlink()
    lost = commit(repo, "gone")
    git(repo, "checkout", had, "--", "entries/notes/n-1.json")
    commit(repo, "back")
    res = check(repo)
    assert res.breaks == []
    assert [(b.path, b.kind, b.had, b.lost) for b in res.restored] == \
        [("entries/notes/n-1.json", "record_deleted", had, lost)]


def test_a_record_edited_twice_and_put_back_as_first_committed_is_restored_from_its_first_break(repo):
    note = put(repo, "notes/n-1.json", "v1\n")
    had = commit(repo)
    note.write_text("v2\n")
    first = commit(repo)
    note.write_text("v3\n")
    commit(repo)
    note.write_text("v1\n")
    commit(repo, "as it was")
    res = check(repo)
    assert res.breaks == []
    assert [(b.kind, b.had, b.lost) for b in res.restored] == [("record_edited", had, first)]


def test_a_record_put_back_to_a_later_version_is_not_restored(repo):
    note = put(repo, "notes/n-1.json", "v1\n")
    had = commit(repo)
    note.write_text("v2\n")
    first = commit(repo)
    note.write_text("v3\n")
    second = commit(repo)
    note.write_text("v2\n")
    third = commit(repo, "back to v2, which was never the record")
    res = check(repo)
    assert res.restored == []
    assert [(b.kind, b.had, b.lost) for b in res.breaks] == [("record_edited", second, third),
                                                           ("record_edited", first, second),
                                                           ("record_edited", had, first)]


def test_a_log_cut_and_then_restored_and_continued_is_restored(repo):
    path = log_lines(repo, 3)
    with open(path, "ab") as f:
        f.write(b"\0\0\0")  # the committed version ends in a torn line: only its complete lines count
    full = path.read_bytes()
    had = commit(repo)
    path.write_bytes(b"".join(full.splitlines(keepends=True)[:1]))
    lost = commit(repo, "cut")
    path.write_bytes(full[: full.rfind(b"\n") + 1])
    ChainedLog(path).append({"kind": "milestone", "run": "r1", "data": {"i": 3}})
    commit(repo, "back and on")
    res = check(repo)
    assert res.breaks == []
    assert [(b.path, b.kind, b.had, b.lost) for b in res.restored] == \
        [("entries/runs/r1/events.jsonl", "log_rewritten", had, lost)]


def test_a_log_cut_and_rewritten_differently_is_not_restored(repo):
    path = log_lines(repo, 3)
    had = commit(repo)
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(lines[0])
    lost = commit(repo, "cut")
    path.write_bytes(lines[0] + lines[2] + lines[1])
    commit(repo, "reordered")
    res = check(repo)
    assert res.restored == []
    assert ("entries/runs/r1/events.jsonl", "log_rewritten", had, lost) in found(res)


def test_a_log_deleted_then_started_anew_and_then_put_back_is_restored_from_its_first_break(repo):
    path = log_lines(repo, 3)
    first = path.read_bytes()
    had = commit(repo)
    path.unlink()
    deleted = commit(repo, "gone")
    path.write_bytes(b"".join(first.splitlines(keepends=True)[1:]))  # another log at the same place
    commit(repo, "a new log")
    path.write_bytes(first)
    commit(repo, "the first log back")
    res = check(repo)
    assert res.breaks == []
    assert [(b.kind, b.had, b.lost) for b in res.restored] == [("log_deleted", had, deleted)]


def test_a_merge_that_loses_both_sides_versions_stays_a_problem_when_one_side_is_put_back(repo):
    git(repo, "switch", "-q", "-c", "side")
    put(repo, "notes/week.json", "bob's\n")
    side = commit(repo, "bob's week")
    git(repo, "switch", "-q", "main")
    put(repo, "notes/week.json", "alice's\n")
    main = commit(repo, "alice's week")
    conflict = subprocess.run(["git", "merge", "-q", "--no-commit", "side"], cwd=repo, capture_output=True, text=True)
    assert "CONFLICT (add/add)" in conflict.stdout
    put(repo, "notes/week.json", "both\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "--no-edit")
    merge = git(repo, "rev-parse", "HEAD").strip()
    git(repo, "checkout", main, "--", "entries/notes/week.json")
    commit(repo, "alice's week back")
    assert ("entries/notes/week.json", "record_edited", side, merge) in found(check(repo))


def test_a_deleted_log_is_not_restored_while_it_is_missing(repo):
    path = log_lines(repo, 2)
    commit(repo)
    path.unlink()
    commit(repo)
    put(repo, "notes/n-1.json", "{}\n")
    commit(repo)
    res = check(repo)
    assert [b.kind for b in res.breaks] == ["log_deleted"] and res.restored == []


def test_a_record_put_back_is_told_apart_from_one_still_missing_whatever_their_order(repo):
    back = put(repo, "notes/n-back.json", "1\n")
    gone = put(repo, "notes/n-gone.json", "2\n")
    had = commit(repo)
    back.unlink()
    commit(repo, "one gone")
    gone.unlink()
    commit(repo, "the other gone")  # its break is found first: children before parents
    git(repo, "checkout", had, "--", "entries/notes/n-back.json")
    commit(repo, "one back")
    res = check(repo)
    assert [b.path for b in res.breaks] == ["entries/notes/n-gone.json"]
    assert [b.path for b in res.restored] == ["entries/notes/n-back.json"]


def test_restored_breaks_are_listed_one_a_file_in_path_order(repo):
    a = put(repo, "notes/n-b.json", "b\n")
    b = put(repo, "notes/n-a.json", "a\n")
    had = commit(repo)
    a.unlink()
    b.unlink()
    commit(repo)
    git(repo, "checkout", had, "--", "entries/notes")
    commit(repo)
    assert [r.path for r in check(repo).restored] == ["entries/notes/n-a.json", "entries/notes/n-b.json"]


# --- the cache of the last clean commit --------------------------------------------------------

def test_a_clean_walk_is_cached_outside_the_entries_folder_and_the_next_walk_starts_there(repo):
    put(repo, "notes/n-1.json", "{}\n")
    a = commit(repo)
    first = check(repo)
    assert first.commits_checked == 2
    assert CACHE_FILE == "verified-history.json" and (repo / ".logbook" / CACHE_FILE).is_file()
    assert cached(repo) == {"version": 1, "entries": "entries", "tip": a, "introduced": {"notes/n-1.json": [a]}}
    again = check(repo)
    assert again.commits_checked == 0 and again.head == a and again.introduced == {"notes/n-1.json": [a]}
    put(repo, "notes/n-2.json", "{}\n")
    b = commit(repo)
    third = check(repo)
    assert third.commits_checked == 1 and third.introduced == {"notes/n-1.json": [a], "notes/n-2.json": [b]}
    assert cached(repo)["tip"] == b


def test_a_walk_without_the_cache_reads_everything_and_writes_no_cache(repo):
    put(repo, "notes/n-1.json", "{}\n")
    commit(repo)
    assert check(repo, use_cache=False).commits_checked == 2
    assert not (repo / ".logbook" / CACHE_FILE).exists()
    check(repo)
    res = check(repo, use_cache=False)
    assert res.commits_checked == 2 and res.introduced == {"notes/n-1.json": [git(repo, "rev-parse", "HEAD").strip()]}


def test_a_break_is_never_cached_away_by_clean_commits_after_it(repo):
    note = put(repo, "notes/n-1.json", "v1\n")
    had = commit(repo)
    assert check(repo).commits_checked == 2
    note.write_text("v2\n")
    lost = commit(repo)
    put(repo, "notes/n-2.json", "{}\n")
    commit(repo)
    for _ in range(2):
        res = check(repo)
        assert res.commits_checked == 2  # from the last clean commit, every time
        assert found(res) == [("entries/notes/n-1.json", "record_edited", had, lost)]
    assert cached(repo)["tip"] == had


def test_a_break_on_a_merged_side_branch_is_never_cached_away(repo):
    note = put(repo, "notes/n-1.json", "v1\n")
    had = commit(repo)
    check(repo)
    git(repo, "switch", "-q", "-c", "side")
    note.write_text("v2\n")
    lost = commit(repo, "edited on a branch")
    git(repo, "switch", "-q", "main")
    put(repo, "notes/n-2.json", "{}\n")
    commit(repo)
    git(repo, "merge", "-q", "--no-edit", "side")
    for _ in range(2):
        assert ("entries/notes/n-1.json", "record_edited", had, lost) in found(check(repo))


def test_a_cached_tip_that_history_no_longer_holds_is_ignored(repo):
    note = put(repo, "notes/n-1.json", "v1\n")
    commit(repo)
    check(repo)
    git(repo, "reset", "-q", "--hard", "HEAD~1")
    note.parent.mkdir(parents=True, exist_ok=True)
    note.write_text("another v1\n")
    had = commit(repo)
    note.write_text("v2\n")
    lost = commit(repo)
    res = check(repo)
    assert res.commits_checked == 3
    assert found(res) == [("entries/notes/n-1.json", "record_edited", had, lost)]
    assert res.introduced == {"notes/n-1.json": [had]}  # not the cached commit that is gone


@pytest.mark.parametrize("damage", [
    lambda c: {**c, "version": 2},
    lambda c: {**c, "entries": "elsewhere"},
    lambda c: {**c, "tip": None},
    lambda c: {**c, "introduced": []},
    lambda c: [c],
    lambda c: "not json {",
])
def test_a_cache_of_another_version_folder_or_shape_is_ignored(repo, damage):
    put(repo, "notes/n-1.json", "{}\n")
    commit(repo)
    check(repo)
    path = repo / ".logbook" / CACHE_FILE
    cache = damage(cached(repo))
    if isinstance(cache, str):
        path.write_text(cache)
    else:
        statecache.save(project(repo, "entries"), CACHE_FILE, cache)  # sealed as this user's own: the shape is what fails
    res = check(repo)
    assert res.commits_checked == 2 and res.breaks == []


def test_a_cache_made_for_another_entries_folder_is_not_trusted(repo):
    put(repo, "notes/n-1.json", "v1\n", folder="lab")
    commit(repo)
    put(repo, "notes/n-1.json", "v1\n")
    commit(repo)
    assert check(repo, "entries").commits_checked == 3
    put(repo, "notes/n-1.json", "v2\n", folder="lab")
    commit(repo)
    res = check(repo, "lab")
    assert res.commits_checked == 4 and [b.path for b in res.breaks] == ["lab/notes/n-1.json"]


def test_is_ancestor_answers_quietly_even_for_a_commit_it_does_not_know(repo, capfd):
    a = git(repo, "rev-parse", "HEAD").strip()
    b = commit(repo)
    capfd.readouterr()
    assert is_ancestor(repo, a, b) and is_ancestor(repo, b, b)
    assert not is_ancestor(repo, b, a) and not is_ancestor(repo, "0" * 40, b)
    assert capfd.readouterr() == ("", "")  # git's "fatal: not a valid commit" is not the user's business


def test_a_rewritten_log_whose_lines_hold_spaces_is_named_by_line_not_by_word(repo):
    log = ChainedLog(repo / "entries" / "runs/r1/events.jsonl")
    for i in range(4):
        log.append({"kind": "note", "run": "r1", "data": {"text": f"a note with several words, number {i}"}})
    had = commit(repo, "log")
    lines = log.path.read_bytes().splitlines(keepends=True)
    lines[2] = lines[2].replace(b"number 2", b"number 9")
    log.path.write_bytes(b"".join(lines))
    commit(repo, "rewritten", env=AUTHOR)
    assert "(log, 4 lines in " in check(repo).breaks[0].message
    assert "was rewritten from line 3 in" in check(repo).breaks[0].message


def test_a_record_shaped_file_outside_the_entries_folder_is_not_walked(repo):
    """`archive/` is as long as `entries/`: read without the folder's pathspec, its files would pass for records."""
    path = repo / "archive" / "runs" / "r1" / "events.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text('{"kind":"note"}\n{"kind":"note"}\n')
    commit(repo, "an old log kept outside the logbook")
    path.write_text('{"kind":"edited"}\n')
    commit(repo, "edited freely: not a record")
    assert check(repo).breaks == []
