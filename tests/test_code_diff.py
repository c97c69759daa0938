"""The code a run ran, compared with the code its preregistration was made on: what the scorecard says changed.

Real commits in a real repository; the scorecard's words are checked against
what `git` itself says of the two commits.
"""

from __future__ import annotations

from conftest import git
from scoring_helpers import project_of

from logbook.scoring.outcome import code_diff


def _commit(repo, message: str) -> str:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD").strip()


def _changed(repo, n: int) -> tuple[str, str]:
    base = git(repo, "rev-parse", "HEAD").strip()
    for i in range(n):
        (repo / f"m{i}.py").write_text(f"x = {i}\n")
    return base, _commit(repo, f"{n} files")


def test_a_change_is_named_by_both_commits_and_its_first_five_files(logbook_repo, monkeypatch, tmp_path):
    project = project_of(logbook_repo)
    base, snap = _changed(logbook_repo, 7)
    monkeypatch.chdir(tmp_path)  # the repository is the project's, wherever the command runs
    got = code_diff(project, base, snap)
    assert got["summary"] == (f"the code changed between the preregistration's commit {base[:7]} and the run's "
                              f"snapshot {snap[:7]}: 7 files (m0.py, m1.py, m2.py, m3.py, m4.py and 2 more)")
    assert got["text"] == git(logbook_repo, "diff", "--stat=100", base, snap).rstrip()
    assert got["text"].startswith(" m0.py") and got["text"].endswith("7 insertions(+)")


def test_five_files_are_all_named_and_six_say_one_more(logbook_repo):
    project = project_of(logbook_repo)
    five = code_diff(project, *_changed(logbook_repo, 5))["summary"]
    assert five.endswith(": 5 files (m0.py, m1.py, m2.py, m3.py, m4.py)")
    base = git(logbook_repo, "rev-parse", "HEAD").strip()
    for i in range(6):
        (logbook_repo / f"n{i}.py").write_text("y = 1\n")
    six = code_diff(project, base, _commit(logbook_repo, "six"))["summary"]
    assert six.endswith(": 6 files (n0.py, n1.py, n2.py, n3.py, n4.py and 1 more)")


def test_a_renamed_file_is_the_old_path_gone_and_the_new_one_added_and_the_logbook_is_left_out(logbook_repo):
    project = project_of(logbook_repo)
    (logbook_repo / "train.py").write_text("print('train')\n")
    base = _commit(logbook_repo, "train")
    git(logbook_repo, "mv", "train.py", "fit.py")
    (logbook_repo / "entries" / "notes.md").write_text("a note\n")
    got = code_diff(project, base, _commit(logbook_repo, "rename"))
    assert got["summary"].endswith(": 2 files (fit.py, train.py)")
    assert "=>" not in got["text"] and "entries" not in got["text"]
    assert got["text"].splitlines()[-1].strip() == "2 files changed, 1 insertion(+), 1 deletion(-)"


def test_a_file_the_preregistration_held_uncommitted_is_not_a_change_unless_it_changed_again(logbook_repo, monkeypatch,
                                                                                             tmp_path):
    project = project_of(logbook_repo)
    base = git(logbook_repo, "rev-parse", "HEAD").strip()
    (logbook_repo / "model.py").write_text("width = 64\n")
    (logbook_repo / "data.py").write_text("seed = 1\n")
    blob = git(logbook_repo, "hash-object", "model.py").strip()
    snap = _commit(logbook_repo, "as preregistered, and one more file")
    monkeypatch.chdir(tmp_path)
    assert code_diff(project, base, snap, {"model.py": blob})["summary"].endswith(": 1 file (data.py)")
    assert code_diff(project, base, snap, {"model.py": blob, "data.py": "0" * 40})["summary"].endswith(
        ": 1 file (data.py)")
    assert code_diff(project, base, snap, {"model.py": blob, "data.py": git(logbook_repo, "hash-object", "data.py")
                                           .strip()}) == {}


def test_a_commit_the_repository_lacks_is_said_and_no_comparison_is_made(logbook_repo):
    project = project_of(logbook_repo)
    head = git(logbook_repo, "rev-parse", "HEAD").strip()
    gone = "0123456789ab" + "c" * 28
    for base, snap in ((gone, head), (head, gone)):
        assert code_diff(project, base, snap) == {
            "text": "commit 0123456789ab is not in this repository",
            "summary": "the code cannot be compared: commit 0123456789ab is not in this repository"}
    assert code_diff(project, None, head) == {} == code_diff(project, head, None) == code_diff(project, head, head)
