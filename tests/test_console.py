"""`logbook status`, `tail` and `stop` against real runs, from another process as a second terminal would.

One repository for the module: a short run that finishes, then a long one
(the bundled configs/micro-test.yaml, made long by an override) started in the
background with `logbook run`, watched, followed, and stopped.
The tests run in file order and share those runs (real runs are slow).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT
from runhelpers import events, micro_config, of_kind

LONG, SHORT = "console-long-run-with-a-name-longer-than-a-column-4f2a", "console-short"


def _env(home: Path) -> dict[str, str]:
    env = dict(os.environ, HOME=str(home), GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=str(home / ".gitconfig"),
               CI="true", PYTHONPATH=str(ROOT), NO_COLOR="1")
    for name in ("LOGBOOK_DEBUG", "COLUMNS", "LINES"):  # the pane's own size, not a size set for another test
        env.pop(name, None)
    return env


class Lab:
    """The module's repository, its environment, and the long run's launcher."""

    def __init__(self, root: Path, env: dict[str, str]) -> None:
        self.root, self.env = root, env
        self.launcher: subprocess.Popen | None = None

    def logbook(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "logbook", *args], cwd=self.root, env=self.env,
                              capture_output=True, text=True, timeout=timeout)

    def spawn(self, *args: str) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", "logbook", *args], cwd=self.root, env=self.env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def heartbeat_step(self, run: str) -> int:
        try:
            return json.loads((self.root / ".logbook" / "heartbeat" / f"{run}.json").read_bytes().strip())["step"]
        except (OSError, ValueError, KeyError):
            return -1


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    home = tmp_path_factory.mktemp("home")
    (home / ".gitconfig").write_text("[user]\n\tname = Ada Tester\n\temail = ada@example.org\n")
    root = tmp_path_factory.mktemp("console") / "repo"
    root.mkdir()
    env = _env(home)
    for cmd in (["git", "init", "-q", "-b", "main"], ["git", "commit", "-q", "--allow-empty", "-m", "initial"]):
        subprocess.run(cmd, cwd=root, env=env, check=True)
    lab = Lab(root, env)
    assert lab.logbook("init").returncode == 0
    micro_config(root, "short.yaml", steps=8, every=4)
    (root / "configs" / "micro-test.yaml").write_bytes((ROOT / "configs" / "micro-test.yaml").read_bytes())
    subprocess.run(["git", "add", "-A"], cwd=root, env=env, check=True)
    subprocess.run(["git", "commit", "-q", "-m", "logbook init"], cwd=root, env=env, check=True)
    short = lab.logbook("run", "--exploratory", "--run-id", SHORT, "configs/short.yaml", timeout=300)
    assert short.returncode == 0, short.stderr
    lab.launcher = subprocess.Popen([sys.executable, "-m", "logbook", "run", "--exploratory", "--run-id", LONG,
                                     "configs/micro-test.yaml", "train.steps=100000", "checkpoint.every=50",
                                     "optim.lr=0.0005",
                                     "guard.enabled=false"], cwd=root, env=env,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 240
    metrics = root / ".logbook" / "metrics" / LONG / "metrics.jsonl"
    while lab.heartbeat_step(LONG) < 5 or not metrics.exists() or metrics.read_bytes().count(b"\n") < 3:
        assert lab.launcher.poll() is None, lab.launcher.communicate()
        assert time.monotonic() < deadline, "the long run did not start training"
        time.sleep(0.3)
    yield lab
    if lab.launcher.poll() is None:
        lab.launcher.send_signal(signal.SIGINT)
        lab.launcher.wait(120)


def test_status_of_a_running_run_is_alive_with_attempt_step_and_eta(lab):
    res = lab.logbook("status", LONG, "--json")
    assert res.returncode == 0, res.stderr
    st = json.loads(res.stdout)
    assert (st["run"], st["state"], st["health"], st["attempt"]) == (LONG, "running", "alive", 1)
    assert st["step"] >= 5 and st["total_steps"] == 100_000
    assert st["eta_s"] > 0 and st["seconds_per_step"] > 0
    started = [e for e in st["last_events"] if e["kind"] == "run_started"]
    assert started and started[0]["summary"] == "attempt 1 began, from step 0, 1 worker on cpu"
    text = lab.logbook("status")  # no RUN: the run launched last
    assert text.returncode == 0, text.stderr
    assert f"run      {LONG}\n" in text.stdout  # the whole id, never cut
    assert "health   alive: last sign of life" in text.stdout
    assert "/100,000 (" in text.stdout and "ETA " in text.stdout
    assert "\x1b" not in text.stdout


def test_tail_ctrl_c_stops_following_quietly_with_130(lab):
    proc = lab.spawn("tail", LONG, "--follow", "--interval", "0.2")
    time.sleep(4)
    assert proc.poll() is None, proc.communicate()
    proc.send_signal(signal.SIGINT)
    out, errs = proc.communicate(timeout=30)
    assert proc.returncode == 130
    assert errs == "" and "Traceback" not in out
    assert lab.launcher.poll() is None  # the run trains on


def test_stop_saves_records_run_stopped_and_tail_follows_to_the_end(lab):
    # -n 1000: from the run's first event, however many a fast machine has written by now
    tail = lab.spawn("tail", LONG, "--follow", "--interval", "0.2", "-n", "1000")
    time.sleep(3)
    res = lab.logbook("stop", LONG, "--reason", "enough for this test", timeout=300)
    assert res.returncode == 0, res.stderr
    assert f"run {LONG} stopped at step" in res.stdout
    out, errs = tail.communicate(timeout=120)
    assert tail.returncode == 0, errs
    lines = out.splitlines()
    assert any("run started: attempt 1 began" in ln for ln in lines)
    assert any(ln.startswith("step ") and "/100,000 · loss " in ln for ln in lines), out  # progress as it goes
    assert any("run stopped: stopped by Ada Tester <ada@example.org>, saved at step" in ln
               and "enough for this test" in ln for ln in lines), out
    assert lines[-1].startswith(f"run {LONG} stopped at step ")
    assert "\x1b" not in out

    launcher_out, launcher_err = lab.launcher.communicate(timeout=120)
    assert lab.launcher.returncode == 0, launcher_err  # a clean stop is no failure, and nothing restarts it
    assert f"Run {LONG} (exploratory) stopped" in launcher_err
    evs = events(lab.root, LONG)
    stopped = of_kind(evs, "run_stopped")
    assert len(stopped) == 1 and evs[-1]["kind"] == "run_stopped"
    assert stopped[0]["data"]["reason"] == "enough for this test"
    saved = stopped[0]["data"]["saved_step"]
    assert saved == stopped[0]["step"] > 0  # the last completed step was saved on the way out
    assert (lab.root / ".logbook" / "checkpoints" / LONG / f"step_{saved:06d}" / "COMPLETE").exists()
    for kind in ("restart", "attempt_failed", "run_failed", "preempted"):
        assert not of_kind(evs, kind), kind


def test_status_after_stop_says_ended_and_how(lab):
    st = json.loads(lab.logbook("status", LONG, "--json").stdout)
    assert (st["state"], st["health"]) == ("stopped", "ended")
    assert st["how"].startswith(f"stopped at step {st['step']:,}: stopped by Ada Tester")
    assert st["eta_s"] is None
    fin = json.loads(lab.logbook("status", SHORT, "--json").stdout)
    assert (fin["state"], fin["health"], fin["how"], fin["step"]) == ("finished", "ended", "finished at step 8", 8)


def test_tail_without_follow_prints_the_last_events_and_returns(lab):
    res = lab.logbook("tail", SHORT, "-n", "2")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert len(lines) == 2 and "run finished" in lines[-1]
    done = lab.logbook("tail", LONG, "--follow", timeout=60)  # an ended run: says how, at once
    assert done.returncode == 0 and done.stdout.splitlines()[-1].startswith(f"run {LONG} stopped at step")


def test_stop_and_status_refuse_what_is_not_there(lab):
    ended = lab.logbook("stop", SHORT)
    assert ended.returncode == 3 and "error: run console-short is finished: there is nothing to stop" in ended.stderr
    assert "Traceback" not in ended.stderr
    unknown = lab.logbook("status", "no-such-run")
    assert unknown.returncode != 0 and "error: unknown run 'no-such-run'" in unknown.stderr


def test_compare_a_finished_and_a_stopped_run(lab):
    res = lab.logbook("compare", SHORT, LONG, "--json")
    assert res.returncode == 0, res.stderr
    cmp = json.loads(res.stdout)
    assert cmp["states"] == ["finished", "stopped"] and cmp["config_source"] == ["resolved", "resolved"]
    sections = {s["title"]: {r["key"]: r["values"] for r in s["rows"]} for s in cmp["sections"]}
    config = sections["config"]
    assert config["train.steps"] == {SHORT: 8, LONG: 100_000}
    assert config["optim.lr"] == {SHORT: 0.001, LONG: 0.0005}  # an override, against the trainer's default
    assert config["checkpoint.every"] == {SHORT: 4, LONG: 50}
    assert "model.n_layer" not in config and cmp["same_config_keys"] > 20  # same everywhere: left out
    assert sections["final"]["state"] == {SHORT: "finished", LONG: "stopped"}
    assert sections["final"]["steps"][SHORT] == 8
    assert "loss at 10%" in sections["progress notes"]
    assert set(sections["incidents"]) >= {"restarts", "spikes", "rollbacks", "skipped steps", "live changes"}
    assert 0 < sections["goodput"]["goodput"][SHORT] <= 1

    every = json.loads(lab.logbook("compare", SHORT, LONG, "--all", "--json").stdout)
    keys = {r["key"] for s in every["sections"] if s["title"] == "config" for r in s["rows"]}
    assert "model.n_layer" in keys

    md = lab.logbook("compare", SHORT, LONG, "--markdown")
    assert md.returncode == 0
    assert f"| | `{SHORT}` | `{LONG}` |" in md.stdout and "| train.steps | 8 | 100,000 |" in md.stdout

    text = lab.logbook("compare", SHORT, LONG)  # a pipe: the table at full width, ids whole
    assert f"{SHORT}  {LONG}" in text.stdout and "\x1b" not in text.stdout


def test_an_80_column_terminal_cuts_no_id_and_splits_no_word(lab, tmp_path):
    """What a person sees in a real terminal (a tmux pane of 80x24), against the same commands in a pipe."""
    tmux = shutil.which("tmux") or pytest.skip("tmux is not installed")
    commands = [["status", LONG], ["compare", SHORT, LONG], ["tail", LONG, "-n", "4"]]
    piped = "".join(lab.logbook(*c).stdout for c in commands)
    script = tmp_path / "show.sh"
    lines = [f"cd {shlex.quote(str(lab.root))}"]
    lines += [" ".join([shlex.quote(sys.executable), "-m", "logbook", *map(shlex.quote, c)]) for c in commands]
    script.write_text("\n".join([*lines, "echo __done__", "sleep 120"]) + "\n")
    sock = f"logbook-console-{os.getpid()}"
    env = {**lab.env, "TERM": "xterm-256color"}
    env.pop("NO_COLOR")
    subprocess.run([tmux, "-L", sock, "-f", "/dev/null", "new-session", "-d", "-x", "80", "-y", "24", "sh", str(script)],
                   env=env, check=True)
    try:
        deadline = time.monotonic() + 120
        while True:
            shown = subprocess.run([tmux, "-L", sock, "capture-pane", "-p", "-S", "-500"], env=env,
                                   capture_output=True, text=True).stdout
            if "__done__" in shown or time.monotonic() > deadline:
                break
            time.sleep(0.5)
    finally:
        subprocess.run([tmux, "-L", sock, "kill-server"], env=env)
    assert "__done__" in shown, shown
    rows = shown.split("__done__")[0].rstrip().splitlines()
    assert all(len(r) <= 80 for r in rows), [r for r in rows if len(r) > 80]
    assert any(LONG in r for r in rows if r.startswith("run ")), shown  # the id whole, on one line
    assert sum(r.count(LONG) for r in rows) >= 5
    # The run trains on between the two showings, so a number is compared by its shape (each digit a 0):
    # a word cut in two still leaves pieces that no whole word has.
    shape = str.maketrans("123456789", "000000000")
    words = {w.translate(shape) for w in piped.split()}
    split = [w for r in rows for w in r.split() if w.translate(shape) not in words
             and w.rstrip(":").translate(shape) not in words]  # `RUN:` in blocks
    assert split == [], f"pieces of words at a line's edge: {split}\n{shown}"
