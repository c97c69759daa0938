"""One voice across commands: `--json` failures are JSON objects with the exit code; NO_COLOR means plain text.

The commands run as the `logbook` console script does (`logbook.cli.main`) in
a real process, so that the error handler, click's own argument errors and
rich's terminal detection are the ones a person meets.
"""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAIN = "from logbook.cli import main; main()"
TITLE = "QK-norm removes spikes"


def _logbook(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    e = {**os.environ, "PYTHONPATH": str(ROOT), **env}
    return subprocess.run([sys.executable, "-c", MAIN, *args], cwd=cwd, env=e, capture_output=True, text=True,
                          timeout=120)


def _in_terminal(cwd: Path, *args: str, **env: str) -> str:
    """What a person sees: the command's stdout and stderr on a pseudo-terminal 140 columns wide."""
    e = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "CI", "FORCE_COLOR")}
    e.update(PYTHONPATH=str(ROOT), TERM="xterm-256color", COLUMNS="140", LINES="40", **env)
    leader, follower = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-c", MAIN, *args], cwd=cwd, env=e, stdin=follower, stdout=follower,
                            stderr=follower, close_fds=True)
    os.close(follower)
    out = b""
    while True:
        ready, _, _ = select.select([leader], [], [], 60)
        if not ready:
            break
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the terminal closed: the command ended
            break
        if not chunk:
            break
        out += chunk
    os.close(leader)
    assert proc.wait(timeout=60) == 0, out
    return out.decode()


@pytest.fixture
def with_prereg(logbook_repo, cli) -> Path:
    res = cli("prereg", "--title", TITLE, "--hypothesis", "QK-norm keeps attention logits bounded.",
              "--predict", "spikes@final == 0", "--budget", "8 GPU-hours", "--rationale", "Bounded logits.")
    assert res.exit_code == 0, res.output
    return logbook_repo


@pytest.mark.parametrize("args, code", [
    (["show", "no-such-prereg", "--json"], 3),         # a library error (NotFoundError)
    (["compare", "--json"], 2),                         # click's own argument error: a RUN is missing
    (["status", "../escape", "--json"], 2),             # a bad run id
    (["ls", "--json", "--no-such-option"], 2),          # an unknown option, --json before it
])
def test_json_failures_are_one_json_object_with_the_exit_code(logbook_repo, args, code):
    res = _logbook(logbook_repo, *args)
    assert res.returncode == code, res.stdout + res.stderr
    obj = json.loads(res.stdout)  # the whole of stdout is one object
    assert set(obj) == {"error", "hint", "exit_code"} and obj["exit_code"] == code
    assert obj["error"] and obj["hint"]
    assert f"error: {obj['error']}" in res.stderr  # the person at the terminal still reads it


def test_without_json_a_failure_is_text_only(logbook_repo):
    res = _logbook(logbook_repo, "show", "no-such-prereg")
    assert res.returncode == 3 and res.stdout == "" and res.stderr.startswith("error: ")


def test_a_json_after_double_dash_is_an_argument_not_the_flag(logbook_repo):
    res = _logbook(logbook_repo, "show", "--", "--json")
    assert res.returncode == 3 and res.stdout == ""


def test_no_color_means_no_escape_codes_at_a_terminal(with_prereg):
    coloured = _in_terminal(with_prereg, "ls")
    assert TITLE in coloured and "\x1b[1m" in coloured  # the table's header is bold at a terminal...
    plain = _in_terminal(with_prereg, "ls", NO_COLOR="1")
    assert TITLE in plain and "\x1b" not in plain  # ...and plain, bold included, under NO_COLOR


def test_help_at_a_terminal_and_output_in_a_pipe_hold_no_control_codes(with_prereg):
    assert "\x1b" not in _in_terminal(with_prereg, "ls", "--help")
    assert "\x1b" not in _in_terminal(with_prereg, "--help")
    piped = _logbook(with_prereg, "ls")
    assert piped.returncode == 0 and TITLE in piped.stdout and "\x1b" not in piped.stdout + piped.stderr
