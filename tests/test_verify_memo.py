"""A second `verify` with nothing changed answers from the last report, and any change makes it check again.

The memo (`logbook/records/verify_memo.py`) is only as good as its
fingerprint: each test changes one thing verify reads, the way a person or a
forger would (an edit that keeps the size and the mtime, a new commit, a
deleted ref, a changed setting, another reader's pin), and shows that the
verdict follows the change.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from conftest import git

from logbook.core.project import open_project
from logbook.proof import verify as verify_mod
from logbook.proof.verify import verify_project
from logbook.trust.pins import TrustPin

FLAGS = ("--title", "QK-norm removes loss spikes", "--hypothesis", "QK-norm keeps attention logits bounded.",
         "--predict", "val_loss@final < 3.5", "--contingency", "if loss spikes: rollback 5 steps")


@pytest.fixture
def committed(logbook_repo, cli):
    res = cli("prereg", *FLAGS, "--json")
    assert res.exit_code == 0, res.output
    pid = json.loads(res.stdout)["id"]
    return logbook_repo, logbook_repo / "entries" / "prereg" / f"{pid}.md"


def _no_checks(monkeypatch):
    """From here on, a verify that runs its checks fails the test: only the memo may answer."""
    def refuse(*a, **k):
        raise AssertionError("verify ran its checks again")
    monkeypatch.setattr(verify_mod, "_verify", refuse)


def test_a_second_verify_with_nothing_changed_gives_the_same_report_without_checking_again(committed, monkeypatch):
    repo, _ = committed
    first = verify_project(open_project(repo))
    assert first.ok and (repo / ".logbook" / "verified-report.json").is_file()
    _no_checks(monkeypatch)
    again = verify_project(open_project(repo))
    want = first.to_dict()
    assert again.to_dict() == {**want, "commits_checked": 0}
    assert again.root == repo


def test_full_never_answers_from_the_memo(committed, monkeypatch):
    repo, _ = committed
    verify_project(open_project(repo))
    calls = []
    real = verify_mod._verify
    monkeypatch.setattr(verify_mod, "_verify", lambda *a: calls.append(1) or real(*a))
    verify_project(open_project(repo), full=True)
    assert calls == [1]


def test_an_edit_that_keeps_the_size_and_the_mtime_is_found(committed):
    repo, path = committed
    assert verify_project(open_project(repo)).ok
    st = path.stat()
    text = path.read_text()
    path.write_text(text.replace("bounded.", "boundeD."))  # same size
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))  # and the same mtime
    report = verify_project(open_project(repo))
    assert [p.kind for p in report.problems] == ["edited"]


def test_a_new_commit_a_deleted_ref_and_a_changed_setting_each_make_it_check_again(committed, cli):
    repo, path = committed
    assert verify_project(open_project(repo)).ok
    (repo / "notes.txt").write_text("outside the logbook\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "a commit")
    calls = []
    real = verify_mod._verify

    def counted(*a):
        calls.append(1)
        return real(*a)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(verify_mod, "_verify", counted)
        verify_project(open_project(repo))  # a new commit
        verify_project(open_project(repo))  # nothing new
        assert calls == [1]
        git(repo, "update-ref", "refs/logbook/extra", "HEAD")  # a ref
        verify_project(open_project(repo))
        assert calls == [1, 1]
        (repo / "logbook.yaml").write_text((repo / "logbook.yaml").read_text() + "\n")  # the settings file
        verify_project(open_project(repo))
        assert calls == [1, 1, 1]
        verify_project(open_project(repo), pin=TrustPin(require=True))  # another reader's pin
        assert calls == [1, 1, 1, 1]


def test_an_untracked_file_in_the_entries_folder_is_seen(committed):
    repo, _ = committed
    assert verify_project(open_project(repo)).ok
    (repo / "entries" / "week.pdf").write_bytes(b"%PDF-1.7\n")
    report = verify_project(open_project(repo))
    assert any("week.pdf" in f.path for f in report.problems + report.warnings)


def test_a_record_that_git_ignores_appearing_in_the_entries_folder_is_seen(committed):
    repo, pre = committed
    (repo / ".gitignore").write_text("kept-aside.md\n")
    git(repo, "add", ".gitignore")
    git(repo, "commit", "-q", "-m", "an ignore rule")
    assert verify_project(open_project(repo)).unverifiable == []
    (pre.parent / "kept-aside.md").write_bytes(pre.read_bytes())  # git does not list it unless asked for ignored files
    report = verify_project(open_project(repo))
    assert [(u.path, u.kind) for u in report.unverifiable] == [("entries/prereg/kept-aside.md", "ignored")]


def test_a_report_whose_files_changed_while_it_was_checked_is_not_kept(committed, monkeypatch):
    repo, path = committed
    real = verify_mod._verify

    def edit_meanwhile(*a):
        report = real(*a)
        path.write_text(path.read_text() + "\n")
        return report

    monkeypatch.setattr(verify_mod, "_verify", edit_meanwhile)
    verify_project(open_project(repo))
    assert not (repo / ".logbook" / "verified-report.json").exists()


def test_a_merge_under_way_is_still_named_when_the_memo_answers(committed):
    repo, _ = committed
    (repo / "notes.txt").write_text("base\n")
    git(repo, "add", "notes.txt")
    git(repo, "commit", "-q", "-m", "notes")
    git(repo, "switch", "-q", "-c", "side")
    (repo / "notes.txt").write_text("side\n")
    git(repo, "commit", "-qam", "side notes")
    git(repo, "switch", "-q", "-")
    (repo / "notes.txt").write_text("main\n")
    git(repo, "commit", "-qam", "main notes")
    merging = subprocess.run(["git", "merge", "-q", "side"], cwd=repo, capture_output=True, text=True)
    assert merging.returncode != 0  # a conflict outside the logbook: the merge stays under way
    first = verify_project(open_project(repo))
    again = verify_project(open_project(repo))
    assert first.in_progress and "merge" in first.in_progress
    assert again.in_progress == first.in_progress and again.commits_checked == 0


def test_a_change_to_the_code_that_made_the_memo_makes_it_check_again(committed, monkeypatch, tmp_path):
    """The memo is only the verdict of the code that made it: any file of that code (not its caches) that
    changes, however deep, changes the fingerprint."""
    from logbook.records import verify_memo

    repo, _ = committed
    code = tmp_path / "code"
    deep = code / "pkg" / "sub" / "module.py"
    deep.parent.mkdir(parents=True)
    deep.write_text("A = 1\n")
    (code / "pkg" / "__pycache__").mkdir()
    (code / "a_first.py").write_text("")
    monkeypatch.setattr(verify_memo, "_CODE", code)
    project = open_project(repo)
    first = verify_memo.fingerprint(project, {})
    assert verify_memo.fingerprint(project, {}) == first
    (code / "pkg" / "__pycache__" / "module.cpython-311.pyc").write_bytes(b"cache")
    assert verify_memo.fingerprint(project, {}) == first  # a cache is not the code
    deep.write_text("A = 22\n")
    assert verify_memo.fingerprint(project, {}) != first


def test_the_files_outside_the_logbook_that_verify_reads_are_all_in_the_fingerprint(committed, monkeypatch, tmp_path):
    """Settings, the CA and signers files they name, the repository's ignore rules, and the reader's own git
    config, git ignore file and trust pins: where the environment moves them, the fingerprint follows."""
    from logbook.records import verify_memo

    repo, _ = committed
    cfg = repo / "logbook.yaml"
    cfg.write_text(cfg.read_text() + "timestamping:\n  authorities:\n    - url: http://127.0.0.1:9/\n"
                   "      ca: trust/tsa.pem\nsigning:\n  allowed_signers: trust/allowed_signers\n")
    home, xdg = tmp_path / "home", tmp_path / "xdg"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("GIT_CONFIG_GLOBAL", raising=False)
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    user = [home / ".gitconfig", home / ".config" / "git" / "config", home / ".config" / "git" / "ignore"]
    ours = [repo / "logbook.yaml", repo / ".gitignore", repo / "trust" / "tsa.pem", repo / "trust" / "allowed_signers"]
    assert verify_memo._named_files(open_project(repo)) == [
        *ours, *user, Path("/etc/gitconfig"), home / ".config" / "logbook" / "pins.yaml"]
    monkeypatch.setenv("XDG_CONFIG_HOME", str(xdg))
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(tmp_path / "global.cfg"))
    assert verify_memo._named_files(open_project(repo))[4:] == [
        tmp_path / "global.cfg", xdg / "git" / "config", xdg / "git" / "ignore", Path("/etc/gitconfig"),
        xdg / "logbook" / "pins.yaml"]

    project = open_project(repo)
    first = verify_memo.fingerprint(project, {})
    (xdg / "git").mkdir(parents=True)
    (xdg / "git" / "ignore").write_text("*.pdf\n")  # a global ignore rule changes what git lists as ignored
    assert verify_memo.fingerprint(project, {}) != first


def test_a_repository_without_a_commit_is_verified_in_full_and_nothing_is_remembered(tmp_path, monkeypatch, cli):
    from logbook.records import verify_memo

    repo = tmp_path / "unborn"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    monkeypatch.chdir(repo)
    assert cli("init").exit_code == 0
    git(repo, "update-ref", "-d", "refs/heads/main")  # HEAD names a branch with no commit yet, and no ref exists
    project = open_project(repo)
    assert verify_memo.fingerprint(project, {}) is None
    verify_project(project)
    assert not (project.state_dir / verify_memo.MEMO_FILE).exists()


def test_the_environment_that_steers_git_and_the_logbook_and_gits_own_config_are_in_the_fingerprint(committed,
                                                                                                   monkeypatch):
    from logbook.records import verify_memo

    repo, _ = committed
    project = open_project(repo)
    first = verify_memo.fingerprint(project, {})
    monkeypatch.setenv("UNRELATED_SETTING", "1")
    assert verify_memo.fingerprint(project, {}) == first
    for name in ("GIT_NOTES_REF", "LOGBOOK_SOMETHING"):
        monkeypatch.setenv(name, "x")
        assert verify_memo.fingerprint(project, {}) != first, name
        monkeypatch.delenv(name)
    assert verify_memo.fingerprint(project, {}) == first
    git(repo, "config", "core.quotePath", "false")  # the repository's own git config
    assert verify_memo.fingerprint(project, {}) != first


def test_a_file_name_that_is_not_utf8_in_the_entries_folder_is_seen_and_read_without_error(committed):
    from logbook.records import verify_memo

    repo, _ = committed
    project = open_project(repo)
    first = verify_memo.fingerprint(project, {})
    odd = os.path.join(os.fsencode(repo / "entries"), b"week-\xff.txt")
    with open(odd, "wb") as f:
        f.write(b"x")
    assert verify_memo.fingerprint(project, {}) != first
    report = verify_project(open_project(repo))
    assert any("week-" in f.path for f in report.problems + report.warnings)


def _checks_counted(monkeypatch) -> list[int]:
    """Each time verify runs its checks (instead of answering from the memo), a 1 is appended."""
    calls: list[int] = []
    real = verify_mod._verify

    def counted(*a):
        calls.append(1)
        return real(*a)

    monkeypatch.setattr(verify_mod, "_verify", counted)
    return calls


def test_a_record_edited_again_while_git_already_lists_it_as_changed_is_checked_again(committed, monkeypatch):
    """`git status` says " M" before and after the second edit; only the file's own stat tells them apart."""
    repo, path = committed
    path.write_text(path.read_text() + "first edit\n")
    calls = _checks_counted(monkeypatch)
    verify_project(open_project(repo))
    verify_project(open_project(repo))
    assert calls == [1]
    path.write_text(path.read_text() + "second edit\n")
    verify_project(open_project(repo))
    assert calls == [1, 1]


def test_a_file_inside_an_ignored_folder_changing_is_checked_again(committed, monkeypatch):
    """git lists an ignored folder as one line; the walk of the folder sees what changes inside it."""
    repo, pre = committed
    (repo / ".gitignore").write_text("aside/\n")
    git(repo, "add", ".gitignore")
    git(repo, "commit", "-q", "-m", "an ignore rule")
    inner = pre.parent / "aside" / "deeper" / "copy.md"
    inner.parent.mkdir(parents=True)
    inner.write_bytes(pre.read_bytes())
    calls = _checks_counted(monkeypatch)
    verify_project(open_project(repo))
    verify_project(open_project(repo))
    assert calls == [1]
    inner.write_bytes(pre.read_bytes() + b"\n")
    verify_project(open_project(repo))
    assert calls == [1, 1]


def test_the_walk_of_a_folder_skips_one_that_vanished_and_never_follows_a_link(tmp_path, monkeypatch):
    """A folder removed while it is walked (a run cleaning up) is passed over, the rest still walked; a link is
    stat'ed as a link, so one that points back up its own tree cannot make the walk endless."""
    from logbook.records import verify_memo

    for name in ("a", "b", "c"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "f.txt").write_text(name)
    (tmp_path / "c" / "up").symlink_to(tmp_path, target_is_directory=True)
    real = os.scandir

    def vanishing(folder):
        if str(folder).endswith("/b"):
            raise FileNotFoundError(folder)
        return real(folder)

    monkeypatch.setattr(verify_memo.os, "scandir", vanishing)
    walked = [row[0] for row in verify_memo._tree_stats(tmp_path)[1:]]
    assert sorted(p.removeprefix(str(tmp_path)) for p in walked) == [
        "/a", "/a/f.txt", "/b", "/c", "/c/f.txt", "/c/up"]


def test_head_moved_to_another_commit_with_the_same_entries_and_refs_is_checked_again(committed, monkeypatch):
    """A detached HEAD on an older commit: no ref moved and no file of the logbook differs, yet HEAD's history
    (what verify reads) is another."""
    repo, _ = committed
    (repo / "README.md").write_text("a change outside the logbook\n")
    git(repo, "commit", "-q", "-am", "outside the logbook")
    calls = _checks_counted(monkeypatch)
    verify_project(open_project(repo))
    git(repo, "checkout", "-q", "--detach", "HEAD~1")
    verify_project(open_project(repo))
    assert calls == [1, 1]


def test_the_memo_answers_when_verify_is_asked_from_another_folder(committed, monkeypatch, tmp_path):
    repo, _ = committed
    project = open_project(repo)
    monkeypatch.chdir(tmp_path)  # not a repository: git must be asked about the logbook's, not the working folder
    calls = _checks_counted(monkeypatch)
    verify_project(project)
    verify_project(project)
    assert calls == [1]


def test_a_new_untracked_file_listed_before_another_is_checked_again(committed, monkeypatch):
    """Every path git lists counts, not only the last: a file named to sort first still changes the fingerprint."""
    repo, _ = committed
    (repo / "entries" / "z-notes.txt").write_text("kept aside\n")
    calls = _checks_counted(monkeypatch)
    verify_project(open_project(repo))
    (repo / "entries" / "a-notes.txt").write_text("another\n")
    verify_project(open_project(repo))
    assert calls == [1, 1]


def test_a_linked_folder_is_not_walked_so_what_changes_behind_the_link_is_not_read(committed, monkeypatch, tmp_path):
    """verify never reads a record through a link (a link is itself a finding), so the fingerprint takes the link
    and not what it points to: a large or looping folder behind it costs nothing."""
    repo, _ = committed
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "data.txt").write_text("1\n")
    (repo / "entries" / "linked").symlink_to(outside, target_is_directory=True)
    calls = _checks_counted(monkeypatch)
    verify_project(open_project(repo))
    (outside / "data.txt").write_text("22\n")
    verify_project(open_project(repo))
    assert calls == [1]
