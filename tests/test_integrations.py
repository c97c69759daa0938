"""The Hugging Face and Lightning callbacks chronicle real runs, killed and resumed by the frameworks' own resume.

Each framework's test writes a user's script (the callback is its only
logbook line), runs it on CPU with a tiny model built from a config (no
downloads), SIGKILLs it once mid-run, runs it again resuming from the
framework's last checkpoint with the same run id, and then reads what the
logbook made of it: the event log, `logbook verify`, and the chronicle.
"""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT

from logbook.core.errors import UsageError
from logbook.core.project import open_project
from logbook.integrations.recorder import Recorder, SpikeDetector
from logbook.eventlog.kinds import is_kind
from logbook.eventlog.runlog import iter_events
from logbook.eventlog.sink import full_metrics_path

pytestmark = pytest.mark.slow

HF_SCRIPT = '''
import json, os, sys, time
import torch
from torch.utils.data import Dataset
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments
from logbook.integrations.hf import LogbookCallback


class RandomTokens(Dataset):
    def __init__(self, n):
        self.ids = torch.randint(0, 64, (n, 16), generator=torch.Generator().manual_seed(n))

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


class Spiking(Trainer):  # the user's own Trainer: one step's loss blown up, and the weights each step trains from
    def compute_loss(self, model, inputs, *args, **kwargs):
        if model.training and os.environ.get("CHECKSUMS"):
            with open(os.environ["CHECKSUMS"], "a") as f:
                f.write(f"{self.state.global_step} {sum(float(p.double().sum()) for p in model.parameters())!r}\\n")
        loss = super().compute_loss(model, inputs, *args, **kwargs)
        if model.training and self.state.global_step == int(os.environ.get("SPIKE_AT_STEP", "-1")):
            loss = loss * 1e4  # a diverged step
        return loss


class Slow(TrainerCallback):  # gives the test time to kill the first attempt mid-run, and says where it is
    def on_step_end(self, args, state, control, **kwargs):
        with open(os.path.join(args.output_dir, "progress"), "w") as f:
            f.write(str(state.global_step))
        time.sleep(float(os.environ.get("SLOW_STEP_S", "0")))


class ChangeLR(TrainerCallback):  # the user's own callback: from step N on, every update at another learning rate
    def on_step_begin(self, args, state, control, optimizer=None, **kwargs):
        at, lr = os.environ.get("LR_AT", ":").split(":")
        if at and state.global_step + 1 >= int(at):
            for g in optimizer.param_groups:
                g["lr"] = float(lr)


out = sys.argv[1]
torch.manual_seed(0)
model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=2, n_embd=32, vocab_size=64, n_positions=32,
                                   bos_token_id=0, eos_token_id=0))
args = TrainingArguments(output_dir=out, max_steps=int(os.environ.get("MAX_STEPS", "36")),
                         max_grad_norm=float(os.environ.get("MAX_GRAD_NORM", "1.0")),
                         per_device_train_batch_size=8, learning_rate=1e-3,
                         logging_steps=1, save_strategy="steps", save_steps=6, eval_strategy="steps", eval_steps=12,
                         report_to=[], use_cpu=True, disable_tqdm=True, seed=0)
trainer = Spiking(model=model, args=args, train_dataset=RandomTokens(512), eval_dataset=RandomTokens(32),
                  callbacks=[Slow(), ChangeLR(), LogbookCallback(run_id=os.environ.get("RUN_ID", "hf-tiny"),
                                                     on_divergence=os.environ.get("ON_DIVERGENCE"))])
trainer.train(resume_from_checkpoint=sys.argv[2:] == ["resume"] or None)
with open(os.path.join(out, "log_history.json"), "w") as f:
    json.dump(trainer.state.log_history, f)
'''

LIGHTNING_SCRIPT = '''
import os, sys, time
import torch
import lightning as L
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger
from torch.utils.data import DataLoader, TensorDataset
from logbook.integrations.lightning import LogbookCallback


class Tiny(L.LightningModule):
    def __init__(self, lr=0.05, hidden=16):
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))

    def training_step(self, batch, i):
        x, y = batch
        if os.environ.get("CHECKSUMS"):  # the weights this step trains from
            with open(os.environ["CHECKSUMS"], "a") as f:
                f.write(f"{self.global_step} {sum(float(p.double().sum()) for p in self.parameters())!r}\\n")
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        if self.global_step == int(os.environ.get("SPIKE_AT_STEP", "-1")):
            loss = loss * 1e4  # a diverged step
        if self.global_step >= int(os.environ.get("NAN_FROM_STEP", "1000000")):
            loss = loss * float("nan")  # a diverged step
        if self.global_step == int(os.environ.get("RAISE_AT_STEP", "-1")):
            raise RuntimeError("the data loader lost its file")
        self.log("train_loss", loss)
        os.makedirs(sys.argv[1], exist_ok=True)
        with open(os.path.join(sys.argv[1], "progress"), "w") as f:  # the step being trained, for the test's kill
            f.write(str(self.global_step + 1))
        time.sleep(float(os.environ.get("SLOW_STEP_S", "0")))  # gives the test time to kill the first attempt
        return loss

    def validation_step(self, batch, i):
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.net(x), y))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)

    def on_train_start(self):
        with open(os.path.join(sys.argv[1], "starts"), "a") as f:  # the step Lightning restored, for the test
            f.write(f"{self.global_step} {os.getpid()}\\n")


class ChangeLR(L.Callback):  # the user's own callback: from step N on, every update at another learning rate
    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        at, lr = os.environ.get("LR_AT", ":").split(":")
        if at and trainer.global_step + 1 >= int(at):
            for g in trainer.optimizers[0].param_groups:
                g["lr"] = float(lr)


def data(n):
    g = torch.Generator().manual_seed(n)
    x = torch.randn(n, 8, generator=g)
    return DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=8)


out = sys.argv[1]
os.makedirs(out, exist_ok=True)
L.seed_everything(0)
trainer = L.Trainer(max_steps=int(os.environ.get("MAX_STEPS", "36")), accelerator="cpu", devices=1, default_root_dir=out, val_check_interval=12,
                    limit_val_batches=2, num_sanity_val_steps=0, log_every_n_steps=1, enable_progress_bar=False,
                    enable_model_summary=False, logger=CSVLogger(out, name="csv"),
                    callbacks=[ModelCheckpoint(dirpath=os.path.join(out, "ckpt"), save_last=True, save_top_k=-1,
                                               every_n_train_steps=6), ChangeLR(),
                               LogbookCallback(run_id=os.environ.get("RUN_ID", "pl-tiny"),
                                               stop_on_divergence=os.environ.get("STOP") == "1",
                                               on_divergence=os.environ.get("ON_DIVERGENCE"))])
trainer.fit(Tiny(), data(512), data(32), ckpt_path="last" if sys.argv[2:] == ["resume"] else None)
'''


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
            "OMP_NUM_THREADS": "1", **extra}


def _last_metrics_step(path: Path) -> int:
    try:
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except (OSError, ValueError):
        return -1  # not written yet, or a line caught half-written
    return max((r["step"] for r in rows if "loss" in r), default=-1)


def _progress(out: Path) -> int:
    try:
        return int((out / "progress").read_text() or -1)
    except (OSError, ValueError):
        return -1


def _kill_mid_run(cmd: list[str], cwd: Path, metrics: Path, at_step: int, out: Path) -> None:
    """Start the script and SIGKILL it once its metrics show `at_step`: no chance to record its end.

    Never on a step whose checkpoint is about to be written (every 6th): neither framework writes a
    checkpoint atomically, and resuming from a half-written one is the framework's failure, not the logbook's.
    """
    proc = subprocess.Popen(cmd, cwd=cwd, env=_env(SLOW_STEP_S="0.15"), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 90
    while _last_metrics_step(metrics) < at_step or _progress(out) % 6 in (0, 5):
        if proc.poll() is not None or time.time() > deadline:
            proc.kill()
            pytest.fail(f"the first attempt ended before step {at_step}: {proc.communicate()[0][-3000:]}")
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate()


def _run(cmd: list[str], cwd: Path, fails: bool = False, **env: str) -> None:
    res = subprocess.run(cmd, cwd=cwd, env=_env(**env), capture_output=True, text=True, timeout=180)
    assert (res.returncode != 0) == fails, res.stdout[-3000:] + res.stderr[-3000:]


def _events(repo: Path, run_id: str) -> list[dict]:
    return list(iter_events(open_project(repo).run_dir(run_id) / "events.jsonl"))


def _run_killed_then_resumed(repo: Path, tmp_path: Path, script: str, run_id: str) -> list[dict]:
    path = tmp_path / "train.py"
    path.write_text(script)
    out = tmp_path / "out"
    metrics = full_metrics_path(open_project(repo).state_dir, run_id)
    _kill_mid_run([sys.executable, str(path), str(out)], repo, metrics, at_step=14, out=out)
    _run([sys.executable, str(path), str(out), "resume"], repo)
    return _events(repo, run_id)


def _check_the_story(events: list[dict], cli, repo: Path) -> dict:
    """What both frameworks' runs must show: two starts, a restart, checkpoints, milestones, an end; verify, render."""
    starts = [e for e in events if is_kind(e, "run_started")]
    assert [(s["attempt"], s["data"]["total_steps"]) for s in starts] == [(1, 36), (2, 36)]
    assert starts[0]["data"]["resumed_from_step"] == 0
    resumed = starts[1]["data"]["resumed_from_step"]
    assert resumed > 0 and resumed % 6 == 0  # the framework's own checkpoint cadence

    restart, = [e for e in events if is_kind(e, "restart")]
    assert events.index(restart) == events.index(starts[1]) - 1
    assert restart["data"]["cause"] == "unknown" and restart["data"]["prev_attempt"] == 1
    assert restart["data"]["resumed_from_step"] == resumed
    assert restart["data"]["failed_at_step"] >= 14
    assert restart["data"]["steps_lost"] == restart["data"]["failed_at_step"] - resumed

    saved = [e["step"] for e in events if is_kind(e, "checkpoint_saved")]
    assert saved and all(s % 6 == 0 for s in saved) and 36 in saved
    notes = [e["data"]["fraction"] for e in events if is_kind(e, "milestone")]
    assert notes == [0.1, 0.25, 0.5, 0.75, 1.0]  # logbook.yaml's, each once across the kill
    assert all(isinstance(e["data"]["loss"], float) for e in events if is_kind(e, "milestone"))
    assert is_kind(events[-1], "run_finished") and events[-1]["step"] == 36

    res = cli("verify")
    assert res.exit_code == 0, res.output
    assert cli("render").exit_code == 0
    days = "\n".join(p.read_text() for p in sorted(open_project(repo).entries.glob("2*/*/*.md")))
    assert "Attempt 1 ended without a record of why" in days
    assert f"Resumed from the checkpoint at step {resumed}" in days
    for pct in ("10%", "25%", "50%", "75%", "100%"):
        assert f"**{pct} of the run**" in days
    _check_listed(cli, restart["run"])
    return {"restart": restart, "resumed": resumed, "days": days}


def _check_listed(cli, run_id: str) -> None:
    """A run recorded by the callback alone (no `logbook run`, so no run.json) is a run to every listing."""
    status = cli("status", run_id, "--json")
    assert status.exit_code == 0, status.output
    assert json.loads(status.output)["state"] == "finished" and json.loads(status.output)["step"] == 36
    listed = cli("ls", "--runs", "--json")
    assert listed.exit_code == 0, listed.output
    row, = [r for r in json.loads(listed.output) if r["id"] == run_id]
    assert row["state"] == "finished" and row["steps"] == 36 and row["restarts"] == 1


def _final_attempt_losses(repo: Path, run_id: str) -> dict[int, float]:
    rows = [json.loads(line) for line in full_metrics_path(open_project(repo).state_dir, run_id).read_text().splitlines()]
    return {r["step"]: r["loss"] for r in rows if r.get("attempt") == 2 and "loss" in r}


def test_hf_trainer_run_killed_and_resumed_is_chronicled_with_its_restart(logbook_repo, tmp_path, cli):
    events = _run_killed_then_resumed(logbook_repo, tmp_path, HF_SCRIPT, "hf-tiny")
    story = _check_the_story(events, cli, logbook_repo)
    saves = [e["data"] for e in events if is_kind(e, "checkpoint_saved")]
    assert any(d["path"].endswith(f"checkpoint-{story['resumed']}") for d in saves)
    assert all(0 < d["blocking_s"] < 30 for d in saves)  # the save's own seconds
    history = json.loads((tmp_path / "out" / "log_history.json").read_text())
    logged = {h["step"]: h["loss"] for h in history if "loss" in h}
    ours = _final_attempt_losses(logbook_repo, "hf-tiny")
    assert sorted(ours) == list(range(story["resumed"] + 1, 37))
    assert all(ours[s] == pytest.approx(logged[s], rel=1e-6) for s in ours)  # the Trainer's own logged losses
    evals = {h["step"]: h["eval_loss"] for h in history if "eval_loss" in h}
    notes = {e["step"]: e["data"] for e in events if is_kind(e, "milestone")}
    assert sorted(evals) == [12, 24, 36] and notes[36]["val_step"] == 36  # evaluated at the 100% note's own step
    assert notes[36]["val_loss"] == pytest.approx(evals[36], rel=1e-6)  # quoted after that evaluation, not before
    assert all(n["val_step"] in (None, max(s for s in evals if s <= step)) for step, n in notes.items() if step >= 12), \
        notes  # never an earlier evaluation than the latest at the note's step (None: this attempt has not evaluated)


def test_lightning_run_killed_and_resumed_is_chronicled_with_its_restart(logbook_repo, tmp_path, cli):
    events = _run_killed_then_resumed(logbook_repo, tmp_path, LIGHTNING_SCRIPT, "pl-tiny")
    story = _check_the_story(events, cli, logbook_repo)
    paths = [e["data"]["path"] for e in events if is_kind(e, "checkpoint_saved")]
    assert all(p and p.endswith(".ckpt") for p in paths)
    assert story["restart"]["data"]["resumed_from_step"] == story["resumed"]
    logged: dict[int, float] = {}
    for f in sorted((tmp_path / "out" / "csv").glob("version_*/metrics.csv")):  # one version per attempt
        with open(f) as fh:
            logged.update({int(r["step"]) + 1: float(r["train_loss"]) for r in csv.DictReader(fh) if r.get("train_loss")})
    ours = _final_attempt_losses(logbook_repo, "pl-tiny")
    assert sorted(ours) == list(range(story["resumed"] + 1, 37))
    # CSVLogger logs at the step before the optimizer step counted it; the callback records after.
    assert all(ours[s] == pytest.approx(logged[s], rel=1e-6) for s in ours)
    rows = [json.loads(line) for line in full_metrics_path(open_project(logbook_repo).state_dir, "pl-tiny")
            .read_text().splitlines()]
    evals = {r["step"]: r["val_loss"] for r in rows if r.get("attempt") == 2 and "val_loss" in r}
    notes = {e["step"]: e["data"] for e in events if is_kind(e, "milestone")}
    assert 36 in evals and notes[36]["val_step"] == 36  # Lightning validated at the 100% note's own step
    assert notes[36]["val_loss"] == pytest.approx(evals[36], rel=1e-6)  # and the note waited to quote it


def test_importing_the_cli_loads_no_framework_adapter():
    code = "import logbook, logbook.cli, logbook.api, sys; print('\\n'.join(sys.modules))"
    mods = set(subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, capture_output=True,
                              text=True).stdout.split())
    assert not {"transformers", "lightning", "torch", "logbook.integrations.hf", "logbook.integrations.lightning"} & mods


def _lightning(tmp_path: Path) -> list[str]:
    path = tmp_path / "train.py"
    path.write_text(LIGHTNING_SCRIPT)
    return [sys.executable, str(path), str(tmp_path / "out")]


def test_a_nan_loss_stops_lightning_when_asked_and_the_run_ends_aborted(logbook_repo, tmp_path, cli):
    _run(_lightning(tmp_path), logbook_repo, RUN_ID="pl-nan", NAN_FROM_STEP="20", STOP="1")
    events = _events(logbook_repo, "pl-nan")
    spike, = [e for e in events if is_kind(e, "divergence_detected")]
    assert spike["step"] == 21 and spike["data"]["nonfinite"] and spike["data"]["action"] == "abort"
    assert "training stopped" in spike["data"]["reason"]
    assert is_kind(events[-1], "run_aborted") and events[-1]["step"] == 21  # stopped, not finished
    assert not any(is_kind(e, "run_finished") for e in events)
    assert [e["data"]["fraction"] for e in events if is_kind(e, "milestone")] == [0.1, 0.25, 0.5]
    assert cli("verify").exit_code == 0


def _checksums(path: Path) -> dict[int, float]:
    """The script's record: the sum of the weights each training step started from, by steps done before it."""
    return {int(a): float(b) for a, b in (line.split() for line in path.read_text().splitlines())}


def _check_the_skip(events: list[dict], sums: dict[int, float], at: int, metric: str, total: int, cli) -> None:
    """Step `at` flagged and skipped, the weights left as they were, the run going on to its end."""
    spike, = [e for e in events if is_kind(e, "divergence_detected")]
    assert spike["step"] == at and spike["data"]["action"] == "skip" and spike["data"]["metric"] == metric
    assert spike["data"]["actions"] == ["skip_update"] and not spike["data"]["nonfinite"] and spike["data"]["z"] > 8
    skipped = events[events.index(spike) + 1]
    assert is_kind(skipped, "step_skipped") and skipped["step"] == at
    assert skipped["data"]["metric"] == metric and skipped["data"]["counted"] is True
    assert "optimizer update skipped" in skipped["data"]["reason"]
    assert sum(is_kind(e, "step_skipped") for e in events) == 1
    # sums[n]: the weights after n updates. Step `at` (steps done: at - 1) changed nothing; its neighbours did.
    assert sums[at] == sums[at - 1] and sums[at - 1] != sums[at - 2] and sums[at + 1] != sums[at]
    assert is_kind(events[-1], "run_finished") and events[-1]["step"] == total
    assert cli("verify").exit_code == 0


def test_a_loss_spike_in_lightning_skips_that_update_and_training_goes_on(logbook_repo, tmp_path, cli):
    sums = tmp_path / "sums"
    _run(_lightning(tmp_path), logbook_repo, RUN_ID="pl-skip", SPIKE_AT_STEP="39", MAX_STEPS="48",
         ON_DIVERGENCE="skip", CHECKSUMS=str(sums))
    _check_the_skip(_events(logbook_repo, "pl-skip"), _checksums(sums), at=40, metric="loss", total=48, cli=cli)


def test_a_nan_loss_in_lightning_is_skipped_too(logbook_repo, tmp_path, cli):
    sums = tmp_path / "sums"
    _run(_lightning(tmp_path), logbook_repo, RUN_ID="pl-nan-skip", NAN_FROM_STEP="20", ON_DIVERGENCE="skip",
         CHECKSUMS=str(sums))
    events = _events(logbook_repo, "pl-nan-skip")
    spikes = [e for e in events if is_kind(e, "divergence_detected")]
    assert [e["step"] for e in spikes] == list(range(21, 37))  # every NaN step from then on, none before
    assert all(e["data"]["nonfinite"] and e["data"]["action"] == "skip" for e in spikes)
    assert [e["step"] for e in events if is_kind(e, "step_skipped")] == list(range(21, 37))
    checks = _checksums(sums)
    assert len({checks[n] for n in range(20, 36)}) == 1  # no NaN reached the weights
    assert is_kind(events[-1], "run_finished") and events[-1]["step"] == 36
    assert cli("verify").exit_code == 0


def test_a_gradient_spike_under_the_hf_trainer_skips_that_update_and_training_goes_on(logbook_repo, tmp_path, cli):
    path, sums = tmp_path / "train.py", tmp_path / "sums"
    path.write_text(HF_SCRIPT)
    _run([sys.executable, str(path), str(tmp_path / "out")], logbook_repo, RUN_ID="hf-skip", SPIKE_AT_STEP="39",
         MAX_STEPS="48", MAX_GRAD_NORM="0", ON_DIVERGENCE="skip", CHECKSUMS=str(sums))
    _check_the_skip(_events(logbook_repo, "hf-skip"), _checksums(sums), at=40, metric="grad_norm", total=48, cli=cli)


def test_on_divergence_takes_its_three_words_and_stop_on_divergence_is_stop():
    assert Recorder("lightning").on_divergence == "record"
    assert Recorder("lightning", stop_on_divergence=True).on_divergence == "stop"
    assert Recorder("lightning", on_divergence="skip").on_divergence == "skip"
    with pytest.raises(UsageError, match="on_divergence must be one of record, skip, stop"):
        Recorder("lightning", on_divergence="rollback")
    with pytest.raises(UsageError, match="contradicts"):
        Recorder("lightning", on_divergence="skip", stop_on_divergence=True)


def test_the_gradient_norm_check_reads_ratios_and_flags_non_finite_norms():
    det = SpikeDetector(sigma=8.0, window=64, warmup=16, metric="grad_norm")
    assert all(det.check(0.5 * (0.9 + 0.02 * (i * 7 % 11))) is None for i in range(40))
    assert det.check(0.6) is None  # within the spread of its logarithm
    spike = det.check(50.0)
    assert spike["metric"] == "grad_norm" and spike["z"] > 8 and spike["baseline"] == pytest.approx(0.5, rel=0.15)
    assert det.check(float("inf"))["nonfinite"]


def test_an_exception_in_lightning_ends_the_run_failed_and_the_rerun_records_the_restart(logbook_repo, tmp_path, cli):
    _run(_lightning(tmp_path), logbook_repo, fails=True, RUN_ID="pl-raise", RAISE_AT_STEP="15")
    failed = _events(logbook_repo, "pl-raise")[-1]
    assert is_kind(failed, "run_failed") and "RuntimeError: the data loader lost its file" in failed["data"]["reason"]
    _run(_lightning(tmp_path) + ["resume"], logbook_repo, RUN_ID="pl-raise")
    events = _events(logbook_repo, "pl-raise")
    restart, = [e for e in events if is_kind(e, "restart")]
    assert restart["data"]["cause"] == "exception" and restart["data"]["resumed_from_step"] == 12
    assert is_kind(events[-1], "run_finished")
    assert cli("verify").exit_code == 0
    assert cli("render").exit_code == 0
    days = "\n".join(p.read_text() for p in sorted(open_project(logbook_repo).entries.glob("2*/*/*.md")))
    assert "Attempt 1 raised `RuntimeError`: “the data loader lost its file”." in days


def _killed_under_logbook_run(repo: Path, tmp_path: Path, script: str, run_id: str) -> list[dict]:
    """`logbook run -- python train.py OUT`, its training process SIGKILLed mid-run, restarted with `resume`."""
    path = repo / "train.py"
    path.write_text(script)
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "logbook", "run", "--exploratory", "--run-id", run_id, "--resume-arg", "resume",
           "--max-restarts", "1", "--", sys.executable, "train.py", str(out)]
    proc = subprocess.Popen(cmd, cwd=repo, env=_env(SLOW_STEP_S="0.15"), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    metrics = full_metrics_path(open_project(repo).state_dir, run_id)
    deadline = time.time() + 120
    while _last_metrics_step(metrics) < 14 or _progress(out) % 6 in (0, 5):
        if proc.poll() is not None or time.time() > deadline:
            proc.kill()
            pytest.fail(f"the first attempt ended before step 14: {proc.communicate()[0][-3000:]}")
        time.sleep(0.02)
    pid = int((out / "starts").read_text().split()[1])
    os.kill(pid, signal.SIGKILL)  # the training process, not the launcher: a lost worker
    output = proc.communicate(timeout=240)[0]
    assert proc.returncode == 0, output[-3000:]
    return _events(repo, run_id)


def test_lightning_resumed_by_itself_under_logbook_run_is_recorded_from_the_step_it_restored(logbook_repo, tmp_path,
                                                                                              cli):
    events = _killed_under_logbook_run(logbook_repo, tmp_path, LIGHTNING_SCRIPT, "pl-launched")
    restored = int((tmp_path / "out" / "starts").read_text().split()[2])  # what Lightning itself restored
    assert restored > 0 and restored % 6 == 0
    restart, = [e for e in events if is_kind(e, "restart")]
    starts = [e for e in events if is_kind(e, "run_started")]
    assert [s["data"]["resumed_from_step"] for s in starts] == [0, restored]
    assert restart["data"]["resumed_from_step"] == restored and restart["data"]["cause"] == "signal"
    assert restart["data"]["steps_lost"] == restart["data"]["failed_at_step"] - restored
    assert all(s["data"]["world_size"] == 1 for s in starts)
    assert [e["data"]["fraction"] for e in events if is_kind(e, "milestone")] == [0.1, 0.25, 0.5, 0.75, 1.0]
    configs = [e["data"] for e in events if is_kind(e, "config_recorded")]
    assert [c["hparams"] for c in configs] == [{"lr": 0.05, "hidden": 16}] * 2 and configs[0]["seed"] == 0
    assert is_kind(events[-1], "run_finished") and events[-1]["step"] == 36
    record = json.loads((open_project(logbook_repo).run_dir("pl-launched") / "run.json").read_text())
    assert "status" not in record  # written once at launch, it claims no state; the log says how the run ended
    assert json.loads(cli("status", "pl-launched", "--json").stdout)["state"] == "finished"
    assert cli("render").exit_code == 0
    days = "\n".join(p.read_text() for p in sorted(open_project(logbook_repo).entries.glob("2*/*/*.md")))
    assert f"Resumed from the checkpoint at step {restored}" in days
    assert "hparams\\_initial: 2 settings (lr 0.05); seed 0." in days


def test_hf_trainer_under_logbook_run_records_its_arguments_and_model_config(logbook_repo, tmp_path, cli):
    (logbook_repo / "train.py").write_text(HF_SCRIPT)
    res = subprocess.run([sys.executable, "-m", "logbook", "run", "--exploratory", "--run-id", "hf-launched", "--",
                          sys.executable, "train.py", str(tmp_path / "out")], cwd=logbook_repo,
                         env=_env(MAX_STEPS="6"), capture_output=True, text=True, timeout=240)
    assert res.returncode == 0, res.stderr[-3000:]
    events = _events(logbook_repo, "hf-launched")
    config, = [e["data"] for e in events if is_kind(e, "config_recorded")]
    h = config["hparams"]
    assert (h["learning_rate"], h["per_device_train_batch_size"], h["max_steps"]) == (1e-3, 8, 6)
    assert (h["n_embd"], h["n_layer"], h["vocab_size"]) == (32, 1, 64)  # the model's config under the arguments
    assert config["seed"] == 0 and config["source"] == "TrainingArguments and model.config"
    started, = [e for e in events if is_kind(e, "run_started")]
    assert events.index(started) == 0 and started["data"]["resumed_from_step"] == 0


def test_the_spike_check_flags_non_finite_and_outlying_losses_and_absorbs_a_new_level():
    det = SpikeDetector(sigma=6.0, window=64, warmup=16)
    assert all(det.check(2.0 + 0.01 * (i % 5)) is None for i in range(40))
    nan = det.check(float("nan"))
    assert nan["nonfinite"] and nan["baseline"] == pytest.approx(2.02)
    spike = det.check(3.0)
    assert spike["z"] > 6 and spike["baseline"] == pytest.approx(2.02) and not spike["nonfinite"]
    flagged = [det.check(1.0) for _ in range(64)]  # a new, lower level: flagged never, absorbed
    assert flagged == [None] * 64


def test_bad_callback_arguments_are_refused_with_a_message_before_training():
    with pytest.raises(UsageError, match="run id"):
        Recorder("lightning", run_id="../elsewhere")
    with pytest.raises(UsageError, match="spike_sigma must be a positive number"):
        Recorder("lightning", spike_sigma=0)
    with pytest.raises(UsageError, match="milestones must be fractions"):
        Recorder("lightning", milestones="0.5")


def test_a_learning_rate_a_callback_sets_outside_the_scheduler_is_recorded_once_as_a_change(logbook_repo, tmp_path,
                                                                                            cli):
    path = tmp_path / "train.py"
    path.write_text(HF_SCRIPT)
    _run([sys.executable, str(path), str(tmp_path / "out")], logbook_repo, RUN_ID="hf-lr", MAX_STEPS="24",
         LR_AT="15:1e-05")
    events = _events(logbook_repo, "hf-lr")
    change, = [e for e in events if is_kind(e, "hparam_change")]  # once, though the callback sets it at every step
    assert (change["step"], change["data"]["key"], change["data"]["new"], change["data"]["source"]) == \
        (15, "lr", 1e-05, "callback")
    scheduled = change["data"]["old"]
    assert 0 < scheduled < 1e-3 and scheduled != 1e-05  # the linear decay's rate for step 15, which it replaced
    rows = [json.loads(line) for line in full_metrics_path(open_project(logbook_repo).state_dir, "hf-lr")
            .read_text().splitlines()]
    assert all(r["lr"] != 1e-05 for r in rows if "lr" in r and r["step"] < 15)  # before it: the scheduler's rates
    assert cli("render").exit_code == 0
    days = "\n".join(p.read_text() for p in sorted(open_project(logbook_repo).entries.glob("2*/*/*.md")))
    line, = [ln for ln in days.splitlines() if ln.startswith("`lr`")]
    assert "1e-05" in line and "by transformers.Trainer (set outside the scheduler)" in line, line


def test_a_learning_rate_a_lightning_callback_changes_is_recorded_once_against_the_rate_before(logbook_repo,
                                                                                               tmp_path):
    _run(_lightning(tmp_path), logbook_repo, RUN_ID="pl-lr", MAX_STEPS="24", LR_AT="15:0.001")
    changes = [e for e in _events(logbook_repo, "pl-lr") if is_kind(e, "hparam_change")]
    assert [(e["step"], e["data"]["key"], e["data"]["old"], e["data"]["new"], e["data"]["source"])
            for e in changes] == [(15, "lr", 0.05, 0.001, "callback")]  # no scheduler: the module's 0.05 before
