"""What a person sees at 80 columns: every command on one logbook the demo made, in a pipe and in a tmux pane.

The demo runs once for the module (about a minute), in an 80-column tmux pane
where tmux exists, else in a pipe; a short second run gives `compare` two runs.
Then every reading command and every `--help` runs in a pipe (`COLUMNS=80`)
and in one 80-column pane. In the pane nothing passes 80 columns but a word
wider than the pane itself (a long path): the terminal never wraps a line the
logbook did not. Everywhere, each run and preregistration id is whole, counts
are words ("1 restart", never "restart(s)") and no Python repr shows. The demo's
console has none of torchrun's own log lines and says what the guard did.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT

pytestmark = pytest.mark.slow  # the demo built once and every command run in a pane: half a minute

WIDTH = 80
HAS_TMUX = shutil.which("tmux") is not None
TORCHRUN_LOG_LINE = re.compile(r"^[EWI]\d{4} ", re.M)
"""torch's glog-style prefix (`E1207 02:31:59.622000 9196 .../api.py:836] failed (exitcode: -9)`)."""
GUESSED_PLURAL = re.compile(r"\w\((?:e?s)\)")
PYTHON_REPR = re.compile(r"\{'\w+': |\['[^']*', '|=None\b|=True\b|=False\b|: None\b")


def _env(**extra: str) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": "1", "OMP_NUM_THREADS": "1", **extra}
    for name in ("CI", "LOGBOOK_DEBUG", "SLURM_JOB_ID", "COLUMNS", "LINES", "LOGBOOK_MAX_STEPS"):
        env.pop(name, None)
    env.update(extra)
    return env


class Pane:
    """One tmux server and an 80-column pane with a long history; `run` types a command and waits for it."""

    def __init__(self, cwd: Path) -> None:
        self.tmux = ["tmux", "-L", f"logbook-80-{os.getpid()}"]
        subprocess.run([*self.tmux, "-f", "/dev/null", "new-session", "-d", "-s", "w", "-x", str(WIDTH), "-y", "50",
                        "-c", str(cwd), "bash --norc --noprofile"], env=_env(TERM="xterm-256color"), check=True)
        subprocess.run([*self.tmux, "set-option", "-g", "history-limit", "50000"], check=True)
        self._n = 0

    def run(self, command: str, timeout: float = 120) -> tuple[str, int]:
        """The pane's text of one command, as tmux shows it joined (-J undoes the terminal's own wraps), and
        its exit status."""
        self._n += 1
        subprocess.run([*self.tmux, "send-keys", "-t", "w", "clear; tmux clear-history", "Enter"], check=True)
        time.sleep(0.3)
        subprocess.run([*self.tmux, "send-keys", "-t", "w", f"PS1=; {command}; echo __done{self._n}__ $?", "Enter"],
                       check=True)
        deadline, text = time.monotonic() + timeout, ""
        while time.monotonic() < deadline:
            text = self._capture()
            if re.search(rf"^__done{self._n}__", text, re.M):
                break
            time.sleep(0.3)
        lines = text.split("\n")
        start = next(i for i, ln in enumerate(lines) if f"echo __done{self._n}__" in ln) + 1
        end = next(i for i, ln in enumerate(lines) if ln.startswith(f"__done{self._n}__"))
        return "\n".join(ln.rstrip() for ln in lines[start:end]), int(lines[end].split()[1])

    def _capture(self) -> str:
        return subprocess.run([*self.tmux, "capture-pane", "-p", "-J", "-S", "-", "-t", "w"],
                              capture_output=True, text=True).stdout

    def close(self) -> None:
        subprocess.run([*self.tmux, "kill-server"], check=False)


LOGBOOK = f"{sys.executable} -m logbook"


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """The demo's logbook, its console (in the pane where tmux exists), a second short run, and the pane."""
    where = tmp_path_factory.mktemp("demo80") / "demo"
    pane = Pane(where.parent) if HAS_TMUX else None
    try:
        if pane is not None:
            console, rc = pane.run(f"{LOGBOOK} demo --dir {where}", timeout=600)
            assert rc == 0, console
        else:
            res = subprocess.run([sys.executable, "-m", "logbook", "demo", "--dir", str(where)], env=_env(),
                                 capture_output=True, text=True, timeout=600)
            console = res.stderr
            assert res.returncode == 0, console
        assert "logbook verify:  intact" in console, console
        second = subprocess.run([sys.executable, "-m", "logbook", "run", "--exploratory", "micro-test",
                                 "train.steps=6", "--run-id", "second-run"], cwd=where, env=_env(),
                                capture_output=True, text=True, timeout=300)
        assert second.returncode == 0, second.stderr
        yield where, console, pane
    finally:
        if pane is not None:
            pane.close()


def _ids(where: Path) -> list[str]:
    runs = sorted(p.name for p in (where / "entries" / "runs").iterdir() if (p / "run.json").exists())
    preregs = sorted(p.stem for p in (where / "entries" / "prereg").glob("*.md"))
    return runs + preregs


def _commands(where: Path) -> list[str]:
    """Every reading command on the demo's records, then `--help` of the tool and of every (sub)command."""
    runs = sorted(p.name for p in (where / "entries" / "runs").iterdir() if (p / "run.json").exists())
    prereg = sorted(p.stem for p in (where / "entries" / "prereg").glob("*.md"))[0]
    demo_run = next(r for r in runs if prereg in (where / "entries" / "runs" / r / "run.json").read_text())
    other = next(r for r in runs if r != demo_run)
    reading = ["review", "review --status", "ls", "ls --runs", f"show {prereg}", f"show {demo_run}",
               f"compare {demo_run} {other}", f"status {demo_run}", f"tail {demo_run}", "calibration",
               f"outcome {demo_run}", "verify"]
    return reading + [f"{' '.join(path)} --help".strip() for path in _command_paths()]


def _command_paths() -> list[tuple[str, ...]]:
    import typer

    from logbook.cli import app

    def walk(cmd, path):
        yield path
        if hasattr(cmd, "commands"):  # a group (click's, under typer)
            for name, sub in cmd.commands.items():
                if not sub.hidden:
                    yield from walk(sub, (*path, name))

    return list(walk(typer.main.get_command(app), ()))


def _cut_ids(text: str, ids: list[str]) -> list[str]:
    """Ids that show their start but not their whole (cut by a column, or broken across lines): once every
    whole id is taken out (the longest first: a preregistration's id holds its run's name), no start is left."""
    for i in sorted(ids, key=len, reverse=True):
        text = text.replace(i, " ")
    return [i for i in ids if i[:16] in text]


def _defects(text: str, ids: list[str]) -> list[str]:
    out = [f"cut id {i}" for i in _cut_ids(text, ids)]
    out += [f"guessed plural: {ln.strip()}" for ln in text.splitlines() if GUESSED_PLURAL.search(ln)]
    out += [f"Python repr: {ln.strip()}" for ln in text.splitlines() if PYTHON_REPR.search(ln)]
    return out


def _too_wide(text: str) -> list[str]:
    """Lines past the pane's width that hold no word wider than the pane: the terminal wrapped them, not we."""
    return [ln for ln in text.splitlines()
            if len(ln) > WIDTH and max(len(w) for w in ln.split()) + len(ln) - len(ln.lstrip()) <= WIDTH]


def test_in_a_pipe_every_command_prints_ids_whole_counts_as_words_and_no_reprs(demo):
    where, _, _ = demo
    ids, found = _ids(where), {}
    for command in _commands(where):
        res = subprocess.run(f"{LOGBOOK} {command} 2>&1 | cat; echo __rc=${{PIPESTATUS[0]}}__", shell=True,
                             executable="/bin/bash", cwd=where, capture_output=True,
                             text=True, env=_env(COLUMNS=str(WIDTH)), timeout=120)
        assert "Traceback" not in res.stdout and "__rc=0__" in res.stdout, (command, res.stdout)
        if problems := _defects(res.stdout, ids):
            found[command] = problems
    assert not found, found


@pytest.mark.skipif(not HAS_TMUX, reason="tmux is not installed: no terminal to measure")
def test_in_an_80_column_pane_every_command_fits_and_cuts_no_word(demo):
    where, _, pane = demo
    ids, found = _ids(where), {}
    for command in _commands(where):
        text, rc = pane.run(f"cd {where} && {LOGBOOK} {command}")
        assert rc == 0 and "Traceback" not in text, (command, text)
        problems = _defects(text, ids) + [f"wider than {WIDTH}: {ln}" for ln in _too_wide(text)]
        if problems:
            found[command] = problems
    assert not found, found


def test_the_demo_console_says_what_the_guard_did_and_shows_no_launcher_lines(demo):
    where, console, _ = demo
    assert not TORCHRUN_LOG_LINE.search(console), TORCHRUN_LOG_LINE.findall(console)
    assert "torch.distributed" not in console and "exitcode" not in console
    text = " ".join(console.split())  # the pane wraps at spaces; the words are what counts
    assert re.search(r"the guard skipped step \d+: its update was never applied", text), console
    assert re.search(r"the guard rolled back from step \d+ to the checkpoint at step \d+", text), console
    assert re.search(r"a live change \(`logbook set`\) at step \d+: lr_scale [\d.]+ → 0\.8", text), console
    assert "1 restart)" in text and "2 attempts" in text
    assert not _defects(console, _ids(where)), _defects(console, _ids(where))
    if HAS_TMUX:
        assert not _too_wide(console), _too_wide(console)


def test_a_wrapped_message_keeps_within_the_width_and_every_word_whole():
    from logbook.core.textfmt import plural, wrap_said

    line = ("  restart: attempt 1 -> 2, killed by SIGKILL with no record left (the OOM killer, `kill -9`, or a "
            "scheduler's hard stop) · resumed from step 25, 5 steps lost · drill")
    wrapped = wrap_said(line, WIDTH).split("\n")
    assert all(len(ln) <= WIDTH for ln in wrapped), wrapped  # the continuation's two extra spaces included
    assert all(ln.startswith("    ") for ln in wrapped[1:]) and " ".join(" ".join(wrapped).split()) == line.strip()
    path = "  report: /" + "x" * 90 + ".md"  # wider than the terminal: whole, under its indent
    assert wrap_said(path, WIDTH).split("\n") == ["  report:", "    /" + "x" * 90 + ".md"]
    assert (plural(1, "restart"), plural(2, "restart"), plural(3, "process", "processes")) == \
        ("1 restart", "2 restarts", "3 processes")
