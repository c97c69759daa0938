"""`logbook commit`: one commit of the logbook folder; the user's own staged and unstaged work stays put."""

from __future__ import annotations

from chronicle_helpers import clock, project_of, qknorm_story  # noqa: F401  (clock is a fixture)
from conftest import git


def _work_in_progress(repo):
    """Staged, unstaged and untracked work of the user, inside and outside the logbook's reach."""
    (repo / "train.py").write_text("lr = 1e-3\n")
    git(repo, "add", "train.py")
    git(repo, "commit", "-q", "-m", "add train.py")
    (repo / "README.md").write_text("experiments, staged edit\n")
    git(repo, "add", "README.md")
    (repo / "README.md").write_text("experiments, staged edit\nplus an unstaged line\n")
    (repo / "train.py").write_text("lr = 3e-4  # unstaged\n")
    (repo / "scratch.txt").write_text("untracked\n")
    (repo / "new_staged.py").write_text("x = 1\n")
    git(repo, "add", "new_staged.py")


def _snapshot(repo) -> tuple[str, str, str]:
    return (git(repo, "diff", "--cached", "--", ".", ":!entries"), git(repo, "diff", "--", ".", ":!entries"),
            git(repo, "status", "--porcelain", "--untracked-files=all", "--", ".", ":!entries"))


def test_commit_takes_only_the_logbook_and_leaves_other_work_untouched(logbook_repo, clock, cli):
    project = project_of(logbook_repo)
    _work_in_progress(logbook_repo)
    before = _snapshot(logbook_repo)
    head = git(logbook_repo, "rev-parse", "HEAD").strip()
    qknorm_story(project, clock)
    clock.set("2026-12-01T11:00:00")
    assert cli("note", "--run", "qknorm", "looks fine").exit_code == 0
    assert cli("render").exit_code == 0
    res = cli("commit")
    assert res.exit_code == 0, res.output
    new = git(logbook_repo, "rev-parse", "HEAD").strip()
    assert res.stdout.strip() == new and git(logbook_repo, "rev-parse", "HEAD~1").strip() == head
    files = git(logbook_repo, "diff-tree", "--no-commit-id", "--name-only", "-r", "HEAD").split()
    assert files and all(f.startswith("entries/") for f in files)
    assert "entries/runs/qknorm/events.jsonl" in files and "entries/2026/12/01.md" in files
    assert any(f.startswith("entries/notes/") and f.endswith(".json") for f in files) and "entries/assets/qknorm/progress-010.png" in files
    assert git(logbook_repo, "log", "-1", "--format=%s").strip() == "logbook: 1 run, 21 events, 1 note (2026-11-30 – 2026-12-01)"
    assert _snapshot(logbook_repo) == before  # staged, unstaged and untracked work exactly as it was
    assert git(logbook_repo, "status", "--porcelain", "--", "entries") == ""  # index agrees for committed paths
    assert git(logbook_repo, "show", ":README.md") == "experiments, staged edit\n"


def test_commit_with_a_message_keeps_the_summary_in_the_body(logbook_repo, clock, cli):
    qknorm_story(project_of(logbook_repo), clock)
    assert cli("commit", "-m", "qknorm: first night").exit_code == 0
    assert git(logbook_repo, "log", "-1", "--format=%s").strip() == "qknorm: first night"
    assert "logbook: 1 run, 21 events (2026-11-30 – 2026-12-01)" in git(logbook_repo, "log", "-1", "--format=%b")


def test_commit_with_nothing_changed_is_a_no_op_and_refuses_on_detached_head_and_mid_merge(logbook_repo, clock, cli):
    head = git(logbook_repo, "rev-parse", "HEAD").strip()
    res = cli("commit")  # nothing to commit is no error: `logbook commit && git pull --rebase` goes on
    assert res.exit_code == 0 and "Nothing to commit: entries/ matches HEAD." in res.stderr and res.stdout == ""
    assert git(logbook_repo, "rev-parse", "HEAD").strip() == head
    qknorm_story(project_of(logbook_repo), clock)
    head = git(logbook_repo, "rev-parse", "HEAD").strip()
    git(logbook_repo, "checkout", "-q", "--detach")
    res = cli("commit")
    assert res.exit_code == 3 and "HEAD is detached" in res.stderr and "git switch" in res.stderr
    git(logbook_repo, "checkout", "-q", "main")
    (logbook_repo / ".git" / "MERGE_HEAD").write_text(head + "\n")
    res = cli("commit")
    assert res.exit_code == 3 and "a merge is in progress" in res.stderr
    (logbook_repo / ".git" / "MERGE_HEAD").unlink()
    assert git(logbook_repo, "rev-parse", "HEAD").strip() == head
    assert cli("commit").exit_code == 0


def test_commit_of_rerendered_days_and_a_deleted_day_file(logbook_repo, clock, cli):
    project = project_of(logbook_repo)
    qknorm_story(project, clock)
    cli("render")
    assert cli("commit").exit_code == 0
    day = project.entries / "2026/12/01.md"
    day.write_text("hand edit\n")
    (project.entries / "2026/11/30.md").unlink()
    cli("render")
    assert git(logbook_repo, "status", "--porcelain", "--", "entries") == ""  # render restored both
    (project.entries / "2026/11/30.md").unlink()
    res = cli("commit", "--json")
    assert res.exit_code == 0, res.output
    assert "entries/2026/11/30.md" not in git(logbook_repo, "ls-tree", "-r", "--name-only", "HEAD")
    assert git(logbook_repo, "status", "--porcelain") == ""
    assert git(logbook_repo, "log", "-1", "--format=%s").strip() == "logbook: 1 day file updated"
