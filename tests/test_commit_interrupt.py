"""Ctrl-C during `logbook commit`, at any moment: never a traceback, and the exit code says whether it committed."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time

from conftest import ROOT, git

_WRAPPER = "import sys\nfrom logbook.cli import main\nsys.exit(main())\n"
"""What the `logbook` console script runs, for a machine where the script is not on PATH."""


def _logbook() -> list[str]:
    script = shutil.which("logbook")
    return [script] if script else [sys.executable, "-c", _WRAPPER]


def _head(repo) -> str:
    return git(repo, "rev-parse", "HEAD").strip()


def _commit(repo, monkeypatch, delay: float | None) -> tuple[int, str, str, float]:
    """`logbook commit` as a real process, SIGINT after `delay` seconds (None: never); (exit, stdout, stderr, secs)."""
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    start = time.monotonic()
    proc = subprocess.Popen([*_logbook(), "commit", "-m", "notes"], cwd=repo, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    if delay is not None:
        time.sleep(delay)
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    return proc.returncode, out, err, time.monotonic() - start


def _seconds(argv: list[str]) -> float:
    start = time.monotonic()
    subprocess.run(argv, check=True)
    return time.monotonic() - start


def test_ctrl_c_at_any_moment_of_a_commit_is_never_a_traceback_and_the_exit_code_says_if_it_committed(
        logbook_repo, cli, monkeypatch):
    assert cli("note", "calibrating the interrupt test").exit_code == 0
    code, out, err, took = _commit(logbook_repo, monkeypatch, None)
    assert code == 0 and out.strip() == _head(logbook_repo), err
    # Before the interpreter has imported `site`, a Ctrl-C is CPython's own fatal error, before any code of
    # ours can run: the moments start after twice the time a bare interpreter needs to start.
    python = max(_seconds([sys.executable, "-c", "pass"]) for _ in range(3))
    # Start-up to past the end; the last ones late enough that a slower run than the calibration still commits.
    moments = [0.0] + [2 * python + (took - 2 * python) * k / 10 for k in range(12)] + [2 * took, 4 * took]
    seen = set()
    for n, delay in enumerate(moments):
        assert cli("note", f"note {n}").exit_code == 0
        before = _head(logbook_repo)
        code, out, err, _ = _commit(logbook_repo, monkeypatch, delay)
        moved = _head(logbook_repo) != before
        assert "Traceback" not in err and "KeyboardInterrupt" not in err, (delay, err)
        assert code in (0, 130, -signal.SIGINT), (delay, code, err)  # -2: killed before Python's handler was set
        assert (code == 0) == moved, (delay, code, err)
        if moved:
            assert out.strip() == _head(logbook_repo), (delay, out, err)  # a made commit is printed
        elif code == 130:
            assert "interrupted" in err and "nothing was" in err, (delay, err)
        assert not list((logbook_repo / ".git").rglob("*.lock")), (delay, err)  # no git lock left behind
        seen.add(moved)
    assert seen == {True, False}  # the moments covered both sides of the commit


def _interrupt_after(monkeypatch, *, made: bool) -> None:
    """A Ctrl-C that lands just before the commit is made, or just after git moved the branch."""
    from logbook.records import commit

    real = commit.commit_logbook

    def interrupted(project, message):
        if made:
            real(project, message)
        raise KeyboardInterrupt
    monkeypatch.setattr(commit, "commit_logbook", interrupted)


def test_a_ctrl_c_just_after_git_moved_the_branch_still_reports_the_commit_with_exit_0(logbook_repo, cli, monkeypatch):
    assert cli("note", "late interrupt").exit_code == 0
    before = _head(logbook_repo)
    _interrupt_after(monkeypatch, made=True)
    res = cli("commit", "-m", "notes")
    after = _head(logbook_repo)
    assert after != before and res.exit_code == 0 and res.stdout.strip() == after
    assert "interrupted after the commit was made" in res.stderr and "Traceback" not in res.output


def test_a_ctrl_c_before_the_commit_is_exit_130_and_says_nothing_was_committed(logbook_repo, cli, monkeypatch):
    assert cli("note", "early interrupt").exit_code == 0
    before = _head(logbook_repo)
    _interrupt_after(monkeypatch, made=False)
    res = cli("commit", "-m", "notes")
    assert _head(logbook_repo) == before and res.exit_code == 130 and res.stdout == ""
    assert "interrupted: nothing was committed" in res.stderr
