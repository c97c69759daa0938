"""Exact resume, restarts and their causes: the real trainer, killed for real, in subprocesses.

One uninterrupted run is the reference. A second run of the same config is
put through a drill at every attempt (an exception, a preemption, a SIGKILL
in the middle of a checkpoint write, a corrupted checkpoint followed by a
SIGKILL, a hang) and relaunched after each, as torchrun would; a third is
killed from outside at whatever moment it happens to be in. Every step's loss
and the final weights must match the reference bit for bit, and the event
log must say what happened at each restart.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import ROOT

from logbook.eventlog.runlog import iter_events, read_events
from logbook.records.init import init_logbook
from logbook.eventlog.sink import read_metrics

pytestmark = pytest.mark.slow

MICRO = ROOT / "configs" / "micro-test.yaml"
DRILLS = ("faults=[{kind: exception, step: 7}, {kind: sigterm, step: 12, attempt: 2},"
          " {kind: sigkill, step: 15, when: save, attempt: 3}, {kind: corrupt_checkpoint, step: 22, attempt: 4},"
          " {kind: sigkill, step: 23, attempt: 4}, {kind: hang, step: 27, attempt: 5}]")


class Repo:
    """A logbook repository of this module, and the environment its trainer runs in."""

    def __init__(self, root: Path, home: Path) -> None:
        self.root = root
        self.env = {**os.environ, "PYTHONPATH": str(ROOT), "HOME": str(home), "CI": "true",
                    "GIT_CONFIG_GLOBAL": str(home / ".gitconfig"), "GIT_CONFIG_NOSYSTEM": "1"}
        self.env.pop("TORCHELASTIC_ERROR_FILE", None)

    def command(self, run: str, *overrides: str) -> list[str]:
        return [sys.executable, "-m", "trainer", "--project", str(self.root), "--run", run, str(MICRO), *overrides]

    def train(self, run: str, *overrides: str) -> subprocess.CompletedProcess:
        return subprocess.run(self.command(run, *overrides), cwd=self.root, env=self.env, capture_output=True,
                              text=True, timeout=300)

    def events(self, run: str) -> list[dict]:
        return list(iter_events(self.root / "entries" / "runs" / run / "events.jsonl"))

    def losses(self, run: str) -> dict[int, float]:
        """Each step's training loss; a step recomputed by a later attempt takes its latest value."""
        return {r["step"]: r["loss"] for r in read_metrics(self.root / "entries" / "runs" / run) if "loss" in r}

    def final_weights(self, run: str, step: int = 30) -> dict[str, torch.Tensor]:
        path = self.root / ".logbook" / "checkpoints" / run / f"step_{step:06d}" / "model.pt"
        return torch.load(path, weights_only=True)


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Repo:
    root = tmp_path_factory.mktemp("resume") / "repo"
    home = root.parent / "home"
    home.mkdir()
    (home / ".gitconfig").write_text("[user]\n\tname = Ada Tester\n\temail = ada@example.org\n")
    root.mkdir()
    r = Repo(root, home)
    for args in (["init", "-q", "-b", "main"], ["commit", "-q", "--allow-empty", "-m", "initial"]):
        subprocess.run(["git", *args], cwd=root, env=r.env, check=True)
    old = os.environ.get("GIT_CONFIG_GLOBAL")
    os.environ["GIT_CONFIG_GLOBAL"] = r.env["GIT_CONFIG_GLOBAL"]
    try:
        init_logbook(start=root)
    finally:
        if old is None:
            os.environ.pop("GIT_CONFIG_GLOBAL", None)
        else:
            os.environ["GIT_CONFIG_GLOBAL"] = old
    return r


@pytest.fixture(scope="module")
def reference(repo) -> str:
    res = repo.train("reference")
    assert res.returncode == 0, res.stderr
    return "reference"


@pytest.fixture(scope="module")
def drilled(repo) -> tuple[str, list[int]]:
    """The drill run, relaunched after every failure until it finishes."""
    codes = []
    for _ in range(8):
        res = repo.train("drilled", DRILLS, "train.hang_timeout_s=4")  # far above any real step, even on a busy machine
        codes.append(res.returncode)
        if res.returncode == 0:
            break
    return "drilled", codes


def test_each_drill_ends_its_attempt_with_the_documented_exit_code(drilled):
    from trainer import EXIT_HANG, EXIT_PREEMPTED

    _, codes = drilled
    assert codes == [1, EXIT_PREEMPTED, -signal.SIGKILL, -signal.SIGKILL, EXIT_HANG, 0]


def test_a_run_resumed_after_every_kind_of_failure_matches_the_uninterrupted_run_bit_for_bit(repo, reference, drilled):
    run, _ = drilled
    expected = repo.losses(reference)
    assert sorted(expected) == list(range(1, 31))
    assert repo.losses(run) == expected
    ref_w, got_w = repo.final_weights(reference), repo.final_weights(run)
    assert ref_w.keys() == got_w.keys() and all(torch.equal(ref_w[k], got_w[k]) for k in ref_w)
    val = lambda r: [(m["step"], m["val_loss"]) for m in read_metrics(repo.root / "entries" / "runs" / r) if "val_loss" in m]
    assert dict(val(run)) == dict(val(reference))


def test_every_restart_records_its_cause_and_what_it_cost(repo, drilled):
    run, _ = drilled
    restarts = [e for e in repo.events(run) if e["kind"] == "restart"]
    # The kill inside the background write of step 15 lands while training has gone on
    # (at most until the next save, at 20, waits for that write).
    mid_save = restarts[2]["data"]["failed_at_step"]
    assert 15 <= mid_save <= 20
    got = [(e["attempt"], e["data"]["cause"], e["data"]["resumed_from_step"], e["data"]["failed_at_step"]) for e in restarts]
    assert got == [(2, "exception", 5, 7), (3, "preempted", 12, 12), (4, "signal", 12, mid_save),
                   (5, "signal", 15, 23), (6, "hang", 25, 27)]
    first = restarts[0]["data"]
    assert first["exception_type"] == "InjectedFault" and "step 7" in first["exception_message"]
    assert restarts[2]["data"]["detail"] == "killed by a signal with no record left"
    assert [e["data"]["steps_lost"] for e in restarts] == [2, 0, mid_save - 12, 8, 2]
    assert all(e["drill"] for e in restarts)
    for e in restarts:
        assert e["data"]["downtime_s"] >= 0 and e["data"]["seconds_lost"] >= 0


def test_the_event_log_tells_the_whole_story_once(repo, drilled):
    run, _ = drilled
    log = read_events(repo.root / "entries" / "runs" / run / "events.jsonl")
    assert log.intact
    events = log.records
    kinds = [e["kind"] for e in events]
    assert kinds.count("run_started") == 6 and kinds.count("run_finished") == 1 and kinds[-1] == "run_finished"
    assert [e["attempt"] for e in events if e["kind"] == "run_started"] == [1, 2, 3, 4, 5, 6]
    failed = [e for e in events if e["kind"] == "attempt_failed"]
    assert len(failed) == 1 and failed[0]["drill"] and failed[0]["data"]["exception_type"] == "InjectedFault"
    preempted = [e for e in events if e["kind"] == "preempted"]
    assert [(e["data"]["signal"], e["data"]["saved_step"], e["drill"]) for e in preempted] == [("SIGTERM", 12, True)]
    hang = [e for e in events if e["kind"] == "hang"]
    assert len(hang) == 1 and hang[0]["step"] == 27 and hang[0]["data"]["timeout_s"] == 4.0
    injected = [(e["attempt"], e["data"]["fault"], e["data"]["at_step"]) for e in events if e["kind"] == "fault_injected"]
    assert injected == [(1, "exception", 7), (2, "sigterm", 12), (3, "sigkill", 15), (4, "corrupt_checkpoint", 22),
                        (4, "sigkill", 23), (5, "hang", 27)]


def test_a_checkpoint_killed_mid_write_is_never_used(repo, drilled):
    run, _ = drilled
    events = repo.events(run)
    # Attempt 3 was killed while writing step 15: attempt 4 resumed from 12, and 15 was saved again later.
    saved_by_3 = [e["step"] for e in events if e["kind"] == "checkpoint_saved" and e["attempt"] == 3]
    assert 15 not in saved_by_3
    started_4 = next(e for e in events if e["kind"] == "run_started" and e["attempt"] == 4)
    assert started_4["data"]["resumed_from_step"] == 12


def test_a_corrupted_checkpoint_is_rejected_and_the_previous_good_one_is_used(repo, drilled):
    run, _ = drilled
    events = repo.events(run)
    rejected = [e for e in events if e["kind"] == "checkpoint_rejected"]
    assert len(rejected) == 1 and rejected[0]["attempt"] == 5 and rejected[0]["drill"]
    assert rejected[0]["data"]["ckpt_step"] == 20 and "sha256" in rejected[0]["data"]["reason"]
    started_5 = next(e for e in events if e["kind"] == "run_started" and e["attempt"] == 5)
    assert started_5["data"]["resumed_from_step"] == 15


def test_a_run_killed_from_outside_at_any_moment_resumes_exactly(repo, reference):
    heartbeat = repo.root / ".logbook" / "heartbeat" / "killed.json"
    proc = subprocess.Popen(repo.command("killed"), cwd=repo.root, env=repo.env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            beat = json.loads(heartbeat.read_bytes().strip() or b"{}")
        except (OSError, ValueError):
            beat = {}
        if beat.get("step", 0) >= 17:
            proc.send_signal(signal.SIGKILL)
            break
        time.sleep(0.001)
    assert proc.wait(60) == -signal.SIGKILL, "the run ended before it could be killed"
    res = repo.train("killed")
    assert res.returncode == 0, res.stderr
    assert repo.losses("killed") == repo.losses(reference)
    ref_w, got_w = repo.final_weights(reference), repo.final_weights("killed")
    assert all(torch.equal(ref_w[k], got_w[k]) for k in ref_w)
    restart = next(e for e in repo.events("killed") if e["kind"] == "restart")
    assert restart["data"]["cause"] == "signal" and not restart["drill"] and restart["data"]["failed_at_step"] >= 17
