"""`nan` and `spike` drills through the real loop: the guard catches them, the ladder answers, data order holds."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import ROOT

from logbook.chronicle.build import render_chronicle
from logbook.core.errors import UsageError
from logbook.core.project import open_project
from logbook.core.textfmt import fmt_num
from logbook.eventlog.runlog import iter_events
from logbook.eventlog.sink import read_metrics
from trainer.observe.callbacks import Callback
from trainer.checkpoints.checkpoint import list_checkpoints
from trainer.config import FaultConfig, load_train_config
from trainer.loop import Trainer
from trainer.startup import build_trainer

MICRO = ROOT / "configs" / "micro-test.yaml"
GUARDED = ["guard.warmup=8", "guard.cooldown=3", "guard.skip_batches=4", "checkpoint.background=false"]


class RecordBatches(Callback):
    """Which batch each optimizer step trained on, and a fingerprint of its tokens."""

    name, priority = "record_batches", 16  # before the guard, which may end the hook chain with an action

    def __init__(self) -> None:
        self.seen: list[tuple[int, int, int]] = []

    def post_backward(self, loss, grad_norm):
        bid = self.trainer.data.next_batch - 1
        x, _ = self.trainer.data.batch(bid)
        self.seen.append((self.trainer.step + 1, bid, int(x.sum())))
        return None


def _train(root: Path, run_id: str, overrides: list[str], *extra: Callback) -> Trainer:
    cfg = load_train_config(MICRO, overrides)
    t = build_trainer(cfg, project_root=root, run_id=run_id, callbacks=list(extra), interactive=False)
    t.fit()
    return t


def _events(root: Path, run_id: str, *kinds: str) -> list[dict]:
    return [e for e in iter_events(root / "entries" / "runs" / run_id / "events.jsonl") if not kinds or e["kind"] in kinds]


@pytest.mark.parametrize("fault, why", [
    ({"kind": "nan", "when": "save"}, "`save` is only for sigkill drills"),
    ({"kind": "spike", "factor": 1.0}, "must be > 1"),
])
def test_divergence_drills_are_checked_at_load(fault, why):
    with pytest.raises(UsageError) as e:
        FaultConfig(**fault).validate("faults.0")
    assert why in e.value.message


def test_a_nan_drill_is_caught_on_its_step_and_the_update_is_skipped(logbook_repo):
    """The NaN never reaches the weights: step skipped, Adam's counter one behind the loop's, the run finishes."""
    t = _train(logbook_repo, "nan", ["train.steps=12", "faults=[{kind: nan, step: 6}]"])
    evs = _events(logbook_repo, "nan", "fault_injected", "divergence_detected", "step_skipped", "run_finished")
    assert [(e["step"], e["kind"], e["drill"]) for e in evs] == [
        (6, "fault_injected", True), (6, "divergence_detected", True), (6, "step_skipped", True),
        (12, "run_finished", False)]
    assert evs[1]["data"]["nonfinite"] is True and evs[1]["data"]["action"] == "skip"
    assert evs[2]["data"]["batch_id"] == 6
    adam_steps = {int(s["step"]) for opt in t.optimizer.optimizers.values() for s in opt.state.values()}
    assert adam_steps == {11} and t.step == 12
    assert all(torch.isfinite(p).all() for p in t.raw_model.parameters())


@pytest.mark.slow
def test_repeated_spike_drills_climb_the_ladder_and_the_data_order_skips_exactly_the_range(logbook_repo):
    """Spike at 12 skipped, spike at 18 rolls back to step 10 with batches 12-18 skipped and lr x 0.9."""
    rec = RecordBatches()
    t = _train(logbook_repo, "spiky", [*GUARDED, "faults=[{kind: spike, step: 12}, {kind: spike, step: 18}]"], rec)
    evs = _events(logbook_repo, "spiky", "divergence_detected", "step_skipped", "rollback", "lr_scaled")
    assert [(e["step"], e["kind"], e["drill"]) for e in evs] == [
        (12, "divergence_detected", True), (12, "step_skipped", True),
        (18, "divergence_detected", True), (10, "rollback", True), (10, "lr_scaled", True)]
    rollback = evs[3]["data"]
    assert (rollback["from_step"], rollback["to_step"], rollback["batches_skipped"]) == (17, 10, [12, 18])
    assert evs[4]["data"]["new"] == pytest.approx(0.9) and t.lr_scale == pytest.approx(0.9)

    # After the rollback: steps 11.. train on batch 11, then 19, 20, ... (12-18 never again),
    # and each batch is exactly DataStream's pure function of its id.
    after = rec.seen[18:]
    assert [s for s, _, _ in after] == list(range(11, 31))
    assert [b for _, b, _ in after] == [11, *range(19, 38)]
    fresh = t.data.__class__(t.data.corpora, t.cfg.data, seed=t.cfg.train.seed, block_size=t.cfg.model.block_size,
                             batch_size=t.cfg.train.batch_size, total_steps=t.cfg.train.steps)
    assert all(int(fresh.batch(b)[0].sum()) == fp for _, b, fp in rec.seen)
    assert t.data.skip == [[12, 18]]
    # The restored step is saved once, by the rollback (checkpoint.every=5 divides 10: no second save).
    saves = [e["step"] for e in _events(logbook_repo, "spiky", "checkpoint_saved")]
    assert saves == [5, 10, 15, 10, 15, 20, 25, 30]

    # The committed record names checkpoints relative to the repository, never this machine's folders.
    assert rollback["checkpoint"].startswith(".logbook/") and all(p.startswith(".logbook/") for p in rollback["kept"])
    render_chronicle(open_project(logbook_repo))
    committed = [logbook_repo / "entries" / "runs" / "spiky" / "events.jsonl",
                 *(logbook_repo / "entries").glob("2*/*/*.md")]
    assert len(committed) >= 2 and not any(str(logbook_repo) in p.read_text() for p in committed)


class CrashAfterRollback(Callback):
    name, priority = "crash_after_rollback", 40

    def post_step(self, step, metrics):
        rolled_back = any(c.name == "guard" and c.guard.rollbacks for c in self.trainer.callbacks)
        if rolled_back and step == 12 and self.trainer.attempt == 1:
            raise RuntimeError("crash on the new branch")


@pytest.mark.slow
def test_a_rollback_retires_newer_checkpoints_so_a_crash_resumes_the_new_branch(logbook_repo):
    """Checkpoints of the abandoned branch move to abandoned/; a crash after the rollback resumes its new branch."""
    overrides = [*GUARDED, "checkpoint.keep=5", "guard.rollback_window=1000",
                 "faults=[{kind: spike, step: 12}, {kind: spike, step: 27}]"]
    with pytest.raises(RuntimeError, match="new branch"):
        _train(logbook_repo, "branch", overrides, CrashAfterRollback())
    (rollback,) = _events(logbook_repo, "branch", "rollback")
    data = rollback["data"]
    assert (data["from_step"], data["to_step"]) == (26, 10)
    assert [Path(p).name for p in data["abandoned"]] == ["step_000020-rollback-from-26", "step_000025-rollback-from-26"]
    ckpt_dir = logbook_repo / ".logbook" / "checkpoints" / "branch"
    assert all((logbook_repo / p).parent == ckpt_dir / "abandoned" and (logbook_repo / p / "COMPLETE").exists()
               for p in data["abandoned"])
    assert [s for s, _ in list_checkpoints(ckpt_dir)] == [5, 10]  # 15 was set aside under spikes/

    rec = RecordBatches()
    t = _train(logbook_repo, "branch", overrides, rec)
    (started,) = [e for e in _events(logbook_repo, "branch", "run_started") if e["attempt"] == 2]
    assert started["data"]["resumed_from_step"] == 10
    assert t.data.skip == [[12, 27]] and t.lr_scale == pytest.approx(0.9)
    assert [b for _, b, _ in rec.seen[:3]] == [11, 28, 29]


@pytest.mark.slow
def test_a_spike_drill_through_the_command_line_trainer(logbook_repo):
    """`python -m trainer` with a spike drill from the overrides: detected, skipped, finished."""
    proc = subprocess.run([sys.executable, "-m", "trainer", "--project", str(logbook_repo), "--run", "cli-spike",
                           str(MICRO), "train.steps=14", *GUARDED, "faults=[{kind: spike, step: 11, factor: 50}]"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    evs = _events(logbook_repo, "cli-spike", "fault_injected", "divergence_detected", "step_skipped", "run_finished")
    assert [(e["step"], e["kind"]) for e in evs] == [
        (11, "fault_injected"), (11, "divergence_detected"), (11, "step_skipped"), (14, "run_finished")]
    assert evs[0]["data"]["factor"] == 50 and evs[1]["data"]["metric"] in ("loss", "grad_norm")
    # The 75% progress note falls on the spike (step 11 of 14): it reports the spike and the last accepted loss.
    (note,) = [n for n in _events(logbook_repo, "cli-spike", "milestone") if n["step"] == 11]
    losses = {r["step"]: r["loss"] for r in read_metrics(logbook_repo / "entries" / "runs" / "cli-spike") if "loss" in r}
    assert note["data"]["skipped_loss"] == losses[11] and note["data"]["skipped_loss"] > 3 * losses[10]
    assert (note["data"]["loss_step"], note["data"]["loss"]) == (10, losses[10])
    text = "\n".join(p.read_text() for p in render_chronicle(open_project(logbook_repo)).written)
    assert f"The guard skipped this step's update: its loss was {fmt_num(losses[11])}." in text
    assert f"The last accepted loss was {fmt_num(losses[10])} at step 10" in text


def _wait_until(check, proc, timeout: float = 60.0):
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        time.sleep(0.02)
    raise AssertionError("timed out")


@pytest.mark.slow
def test_a_live_lr_scale_from_logbook_set_survives_a_sigkill_and_a_rejected_request_changes_nothing(logbook_repo, cli):
    """`logbook run` with a SIGKILL drill; `logbook set lr_scale=0.5` while it starts: applied once, in force after the restart."""
    import json
    import os

    from runhelpers import micro_config

    from logbook.launch.change_requests import processed_dir, submit_change
    from logbook.core.project import open_project
    from trainer.config import ScheduleConfig
    from trainer.nn.optim import lr_factor

    cfg_path = micro_config(logbook_repo, steps=40, every=4, faults=[{"kind": "sigkill", "step": 6}])
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "logbook", "run", "--exploratory", "--run-id", "lr", str(cfg_path)],
                            cwd=logbook_repo, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    run_json = logbook_repo / "entries" / "runs" / "lr" / "run.json"
    try:
        _wait_until(lambda: run_json.exists() and json.loads(run_json.read_text())["run_id"], proc)
        asked = cli("set", "lr", "lr_scale=0.5", "--reason", "gentler after the spike")
        assert asked.exit_code == 0, asked.output
        bogus = submit_change(open_project(logbook_repo), "lr", {"data.weights.nosuch": 2.0}, "a source it lacks")
        _, stderr = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, stderr[-2000:]

    evs = _events(logbook_repo, "lr")
    changes = [e for e in evs if e["kind"] == "hparam_change"]
    (applied,) = [e for e in changes if not e["data"].get("reapplied")]
    assert applied["attempt"] == 1 and applied["step"] <= 4 and applied["data"]["new"] == 0.5
    assert applied["data"]["who"] == "Ada Tester <ada@example.org>" and applied["data"]["reason"] == "gentler after the spike"
    assert not [e for e in changes if e["data"].get("reapplied")]  # the checkpoint of step 4 carried it
    (rejected,) = [e for e in evs if e["kind"] == "hparam_change_rejected"]
    assert rejected["data"]["request_id"] == bogus.request["request_id"] and "nosuch" in rejected["data"]["reason"]
    assert [e["data"]["cause"] for e in evs if e["kind"] == "restart"] == ["signal"]
    answers = sorted(json.loads(p.read_text())["outcome"]["status"] for p in processed_dir(
        logbook_repo / ".logbook" / "control" / "lr").glob("*.json"))
    assert answers == ["applied", "rejected"]

    rows = [json.loads(line) for line in (logbook_repo / "entries" / "runs" / "lr" / "metrics.jsonl").read_text().splitlines()]
    after = [r for r in rows if r.get("attempt") == 2 and "lr_scale" in r]
    assert after and all(r["lr_scale"] == 0.5 for r in after)
    peak = 1e-3  # the micro config's optim.lr (the default)
    assert all(r["lr"] == pytest.approx(peak * lr_factor(r["step"], ScheduleConfig(), 40) * 0.5) for r in after)


def test_a_rollback_whose_target_was_already_retired_goes_back_to_the_newest_checkpoint_before_the_spike(logbook_repo):
    """With keep=1 the checkpoint at step 10 is gone by the second spike: roll back to 15, not die."""
    t = _train(logbook_repo, "short", [*GUARDED, "checkpoint.keep=1",
                                        "faults=[{kind: spike, step: 12}, {kind: spike, step: 18}]"])
    (rollback,) = _events(logbook_repo, "short", "rollback")
    data = rollback["data"]
    assert data["wanted_step"] < data["to_step"] == 15
    assert "no checkpoint left" in data["note"]
    assert t.step == t.cfg.train.steps and t.data.skip == [[12, 18]]
