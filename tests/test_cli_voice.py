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
MAIN = 'import sys; sys.argv[0] = "logbook"; from logbook.cli import main; main()'
"""The CLI under its installed name, as the console script runs it: messages and the completion variable
(`_LOGBOOK_COMPLETE`) are named after it."""
TITLE = "QK-norm removes spikes"


def _logbook(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    e = {**os.environ, "PYTHONPATH": str(ROOT), **env}
    return subprocess.run([sys.executable, "-c", MAIN, *args], cwd=cwd, env=e, capture_output=True, text=True,
                          timeout=120)


def _in_terminal(cwd: Path, *args: str, **env: str) -> str:
    """What a person sees: the command's stdout and stderr on a pseudo-terminal (140 columns unless `COLUMNS`)."""
    e = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "CI", "FORCE_COLOR")}
    e.update({"PYTHONPATH": str(ROOT), "TERM": "xterm-256color", "COLUMNS": "140", "LINES": "40", **env})
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


@pytest.mark.parametrize("args", [["bogus"], ["status", "--bogus"], ["compare"], ["--bogus"], ["review", "approve"]])
def test_argument_errors_speak_in_the_error_hint_form(logbook_repo, args):
    res = _logbook(logbook_repo, *args)
    assert res.returncode == 2 and res.stdout == ""
    lines = res.stderr.splitlines()
    assert lines[0].startswith("error: ") and lines[1].startswith("hint: see `logbook") and len(lines) == 2
    as_json = _logbook(logbook_repo, *args, "--json")
    assert as_json.returncode == 2 and json.loads(as_json.stdout)["error"] == lines[0][len("error: "):]


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


LONG_RUN = "qk-norm-removes-loss-spikes-even-at-the-largest-learning-rate-we-tried-7c1e"


def _write_run(project, run: str, *, created: str, prereg: str | None, losses: list[float], restarts: int,
               finish: bool) -> None:
    """A run written as the trainer writes one: its record, its events through the sink, its metric rows."""
    from logbook.eventlog.sink import EventSink, MetricsWriter
    from logbook.runs.run_record import RunRecord, write_run_record

    write_run_record(project, RunRecord(run_id=run, created=created, config_path="c.yaml", config_hash="0" * 64,
                                        prereg_id=prereg, exploratory=prereg is None))
    sink = EventSink(project.run_dir(run), run, attempt=1)
    sink.emit("run_started", step=0, total_steps=100)
    metrics = MetricsWriter(project.run_dir(run))
    for i, loss in enumerate(losses):
        metrics.write({"step": (i + 1) * 10, "loss": loss, "attempt": 1, "time": 1000.0 + i})
    metrics.close()
    for _ in range(restarts):
        sink.emit("restart", step=10, cause="unknown")
    if finish:
        sink.emit("run_finished", step=len(losses) * 10, final_loss=losses[-1])


@pytest.fixture
def with_runs(with_prereg):
    from logbook.core.project import open_project
    from logbook.promises.prereg import list_preregs

    project = open_project()
    pid = list_preregs(project)[0].id
    _write_run(project, LONG_RUN, created="2026-11-20T08:00:00Z", prereg=pid, losses=[3.0, 2.5, 2.25], restarts=2,
               finish=True)
    _write_run(project, "scratch-lr-sweep-a", created="2026-12-02T09:30:00Z", prereg=None, losses=[4.0], restarts=0,
               finish=False)
    return with_prereg, pid


def test_ls_runs_json_has_every_column_from_the_facts(with_runs):
    repo, pid = with_runs
    res = _logbook(repo, "ls", "--runs", "--json")
    assert res.returncode == 0, res.stderr
    rows = {r["id"]: r for r in json.loads(res.stdout)}
    done, open_ = rows[LONG_RUN], rows["scratch-lr-sweep-a"]
    assert (done["state"], done["prereg"], done["steps"], done["total_steps"], done["final_loss"], done["restarts"]) \
        == ("finished", pid, 30, 100, 2.25, 2)
    assert (open_["state"], open_["prereg"], open_["steps"], open_["final_loss"], open_["restarts"]) \
        == ("running", None, 10, 4.0, 0)
    assert done["created"] == "2026-11-20T08:00:00Z" and "goodput" in done


@pytest.mark.parametrize("args, ids", [
    (["--state", "finished"], [LONG_RUN]),
    (["--state", "running"], ["scratch-lr-sweep-a"]),
    (["--state", "stopped"], []),  # a state of the registry's (`logbook stop`), though no run here is in it
    (["--prereg", "none"], ["scratch-lr-sweep-a"]),
    (["--runs", "--since", "2026-12-01"], ["scratch-lr-sweep-a"]),
    (["--runs", "--since", "2026-11-01T00:00"], [LONG_RUN, "scratch-lr-sweep-a"]),
])
def test_ls_runs_filters(with_runs, args, ids):
    res = _logbook(with_runs[0], "ls", *args, "--json")
    assert res.returncode == 0, res.stderr
    assert [r["id"] for r in json.loads(res.stdout)] == ids


def test_ls_runs_by_prereg_prefix_and_bad_filters(with_runs):
    repo, pid = with_runs
    res = _logbook(repo, "ls", "--prereg", pid[:14], "--json")
    assert [r["id"] for r in json.loads(res.stdout)] == [LONG_RUN]
    bad = _logbook(repo, "ls", "--state", "done", "--json")
    assert bad.returncode == 2 and "finished" in json.loads(bad.stdout)["hint"]
    bad = _logbook(repo, "ls", "--runs", "--since", "last tuesday")
    assert bad.returncode == 2 and bad.stderr.startswith("error: --since")
    bad = _logbook(repo, "ls", "--prereg", "no-such-thing")
    assert bad.returncode == 3


def test_ls_runs_never_cuts_an_id(with_runs):
    repo, pid = with_runs
    narrow = _in_terminal(repo, "ls", "--runs", COLUMNS="80", NO_COLOR="1").replace("\r", "")
    assert LONG_RUN in narrow.splitlines() and "…" not in narrow  # at 80 columns: a block per run, the id on its own line
    assert "2 restarts" in narrow and "30/100" in narrow
    assert all(len(ln) <= 80 for ln in narrow.splitlines() if ln != LONG_RUN)  # details wrap between values
    wide = _in_terminal(repo, "ls", "--runs", COLUMNS="300", NO_COLOR="1").replace("\r", "")
    header = wide.splitlines()[0].split()
    assert header[:3] == ["id", "state", "prereg"] and "goodput" in header  # the table, when it fits
    line = next(ln for ln in wide.splitlines() if ln.startswith(LONG_RUN))
    assert "finished" in line and pid in line and "30/100" in line and "2.25" in line
    piped = _logbook(repo, "ls", "--runs", COLUMNS="40")
    line = next(ln for ln in piped.stdout.splitlines() if ln.startswith(LONG_RUN))
    assert pid in line and "2.25" in line and "\x1b" not in piped.stdout  # a pipe: one whole line per run


def _complete(cwd: Path, words: str) -> list[str]:
    """What bash completion offers for the last word of `words`, as the installed script asks for it."""
    cword = str(len(words.split()) - (0 if words.endswith(" ") else 1))
    e = {**os.environ, "PYTHONPATH": str(ROOT), "_LOGBOOK_COMPLETE": "complete_bash", "COMP_WORDS": words,
         "COMP_CWORD": cword}
    res = subprocess.run([sys.executable, "-c", MAIN], cwd=cwd, env=e, capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 0 and res.stderr == "", res.stderr  # a completion never prints an error
    return res.stdout.split()


def test_shell_completion_is_installable_and_completes_commands_and_run_ids(with_runs):
    repo = with_runs[0]
    script = subprocess.run([sys.executable, "-c", MAIN, "--show-completion", "bash"], cwd=repo,
                            env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=60)
    assert script.returncode == 0 and "_LOGBOOK_COMPLETE=complete_bash" in script.stdout
    assert _complete(repo, "logbook sta") == ["stamp", "status"]
    for command in ("status", "tail", "stop", "outcome", "report", "set"):
        assert _complete(repo, f"logbook {command} qk") == [LONG_RUN], command
    assert _complete(repo, "logbook compare scratch-lr-sweep-a ") == [LONG_RUN, "scratch-lr-sweep-a"]


def test_run_id_completion_outside_a_logbook_offers_nothing_and_says_nothing(tmp_path):
    assert _complete(tmp_path, "logbook status qk") == []


def test_ls_since_filters_preregistrations_too(with_prereg):
    assert [p["title"] for p in json.loads(_logbook(with_prereg, "ls", "--since", "1d", "--json").stdout)] == [TITLE]
    assert json.loads(_logbook(with_prereg, "ls", "--since", "2099-01-01", "--json").stdout) == []


def test_since_reads_ages_and_dates_in_utc():
    from datetime import datetime, timezone

    from logbook.runs.runlist import parse_since

    now = datetime(2026, 12, 3, 12, 0, tzinfo=timezone.utc)
    assert parse_since("12h", now) == datetime(2026, 12, 3, 0, 0, tzinfo=timezone.utc)
    assert parse_since("3d", now) == datetime(2026, 11, 30, 12, 0, tzinfo=timezone.utc)
    assert parse_since("2w", now) == datetime(2026, 11, 19, 12, 0, tzinfo=timezone.utc)
    assert parse_since("2026-12-01", now) == datetime(2026, 12, 1, tzinfo=timezone.utc)
    assert parse_since("2026-12-01T09:00+01:00", now) == datetime(2026, 12, 1, 8, 0, tzinfo=timezone.utc)


def test_every_placeholder_is_one_name_in_capitals():
    """Usage lines and option values: `{RUN}`, `[RUN]`, `{RUN}...`, `--events EVENTS`; never `{run}`, `[[RUN]]`,
    `{RUN RUN...}...` or a type such as `<int>` where a value goes."""
    import re

    reference = (ROOT / "docs" / "cli.md").read_text("utf-8")
    from logbook.cli.docgen import reference as generate

    text = generate()
    assert text == reference  # what is checked is what the reader gets
    usages = [ln for ln in text.splitlines() if ln.startswith("Usage: ")]
    assert len(usages) > 25
    for line in usages:
        tokens = line.split()
        for token in tokens[tokens.index("[OPTIONS]"):]:  # after the command's own name
            assert re.fullmatch(r"\[OPTIONS\]|COMMAND|\[ARGS\]\.\.\.|\{[A-Z=_]+\}(\.\.\.)?|\[[A-Z=_]+\](\.\.\.)?",
                                token), line
    values = re.findall(r"^  (?:-\w, )?--[a-z-]+ (\S+)(?:  |$)", text, flags=re.M)  # an option's row, not prose
    assert values and all(re.fullmatch(r"[A-Z_=:]+", v) for v in values), sorted(set(values))
