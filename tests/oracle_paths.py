"""The oracle over every trainer path: the Hugging Face and Lightning callbacks, a wrapped script, a wrapped torchrun.

`tests/oracle_harness.py` draws fault schedules for the bundled trainer; this
module does the same for the four other ways a run reaches the logbook, each
a real run of a user's script:

- ``hf``: a `transformers.Trainer` script with `LogbookCallback`, run directly
  and resumed by the Trainer's own `resume_from_checkpoint`;
- ``lightning``: a Lightning script with its callback, resumed by `ckpt_path="last"`;
- ``wrapped``: a plain PyTorch script under `logbook run -- python train.py`
  that prints `step N loss X`, saves its own checkpoint and says
  `logbook: resumed from step N`;
- ``torchrun``: a two-rank `torchrun --nproc-per-node 2` script on the
  `Run` API under `logbook run --`, rank 0 saving, every rank resuming.

A `PathSchedule` fixes the run's length, its checkpoint cadence, the kills
(after a drawn step, from outside: a SIGKILL of the training process, or
for the wrapped paths a SIGTERM to `logbook run`, the scheduler's
preemption, followed by `logbook run --resume`) and, for the callback paths,
a loss spike at a drawn step. Each kill is exact: the script stops at the
start of the step after the drawn one (its checkpoint, when one is due,
written) and waits there until it is killed.

`expected` is the oracle, from the schedule and the cadence alone:

- a kill after step k resumes from the newest checkpoint at or before k
  (k // every * every; 0 with none) and loses the steps between;
- attempts = kills + 1, restarts = kills, the run finishes at its last step;
- a restart's cause is `unknown` for a callback run (nothing outside it saw
  the kill), `signal` for a wrapped SIGKILL and `preempted` after a SIGTERM;
- a spike (the loss of that step blown up 10^4 times, drawn after the last
  kill and past the spike check's warm-up) is flagged at its own step and
  that update is skipped (`on_divergence="skip"`), once.

`observe` reads the record: the event log (`restart` events'
`resumed_from_step`, `steps_lost`, `cause`; `divergence_detected`),
`logbook status --json`, `logbook ls --runs --json` and the rendered
chronicle's restart entries. `disagreements` lists every figure that differs.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import strategies as st
from lab import Lab
from oracle_harness import chronicle_figures

PATHS = ("hf", "lightning", "wrapped", "torchrun")
CALLBACK_PATHS = ("hf", "lightning")
SPIKE_WARMUP = 34
"""Steps an attempt trains before its spike: the callback's check judges nothing in its first 32 (its warm-up)."""


@dataclass(frozen=True)
class PathKill:
    """One outside stop of an attempt, after `step` (and that step's checkpoint, when one is due)."""

    step: int
    signal: str = "SIGKILL"
    """SIGKILL of the training process (for torchrun: rank 1), or SIGTERM to `logbook run` (wrapped paths)."""


@dataclass(frozen=True)
class PathSchedule:
    path: str
    steps: int
    every: int
    kills: tuple[PathKill, ...]
    spike: int | None = None
    """The step whose loss is blown up (callback paths), or None."""


@dataclass
class PathExpected:
    attempts: int
    restarts: int
    resumes: list[int]
    lost: list[int]
    failed_at: list[int]
    causes: list[str]
    final_step: int
    state: str
    spikes: list[int]


@dataclass
class PathObserved:
    events: dict[str, Any] = field(default_factory=dict)
    status: dict[str, Any] = field(default_factory=dict)
    listed: dict[str, Any] = field(default_factory=dict)
    chronicle: dict[str, Any] = field(default_factory=dict)


# --- drawing and the oracle ------------------------------------------------------------------


def resume_after(step: int, every: int) -> int:
    """The oracle's rule: a kill after `step` finds every checkpoint up to and including that step's."""
    return step // every * every


@st.composite
def path_schedules(draw, path: str, max_kills: int = 2, min_kills: int = 0) -> PathSchedule:
    callback = path in CALLBACK_PATHS
    every = draw(st.integers(3, 8) if callback else st.integers(2, 5))
    steps = draw(st.integers(40, 48) if callback else st.integers(8, 16))
    signals = ["SIGKILL"] if callback else ["SIGKILL", "SIGTERM"]
    kills, start = [], 0
    for _ in range(draw(st.integers(min_kills, max_kills))):
        if start + 1 > steps - 1:
            break
        kills.append(PathKill(draw(st.integers(start + 1, steps - 1)), draw(st.sampled_from(signals))))
        start = resume_after(kills[-1].step, every)
    spike = None
    lo = max(start + SPIKE_WARMUP, max((k.step for k in kills), default=0) + 1)
    if callback and lo <= steps - 1 and draw(st.booleans()):
        spike = draw(st.integers(lo, steps - 1))
    return PathSchedule(path, steps, every, tuple(kills), spike)


def expected(s: PathSchedule) -> PathExpected:
    resumes = [resume_after(k.step, s.every) for k in s.kills]
    cause = {"SIGKILL": "unknown" if s.path in CALLBACK_PATHS else "signal", "SIGTERM": "preempted"}
    return PathExpected(attempts=len(s.kills) + 1, restarts=len(s.kills), resumes=resumes,
                        lost=[k.step - r for k, r in zip(s.kills, resumes)], failed_at=[k.step for k in s.kills],
                        causes=[cause[k.signal] for k in s.kills], final_step=s.steps, state="finished",
                        spikes=[s.spike] if s.spike else [])


# --- the scripts: a user's own, with a stop the harness can kill at ------------------------

_STOP = '''
def _stop_here(step):  # the harness kills this attempt here: after `step` and its checkpoint
    if step != int(os.environ.get("ORACLE_STOP_AT", "-1")):
        return
    with open(os.path.join(os.environ["ORACLE_DIR"], f"stopped-{os.environ.get('RANK', '0')}"), "w") as f:
        f.write(f"{step} {os.getpid()}")
    time.sleep(3600)
'''

HF = '''
import glob, os, sys, time
import torch
from torch.utils.data import Dataset
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments
from logbook.integrations.hf import LogbookCallback
''' + _STOP + '''

class RandomTokens(Dataset):
    def __init__(self, n):
        self.ids = torch.randint(0, 64, (n, 16), generator=torch.Generator().manual_seed(n))

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


class Spiking(Trainer):
    def compute_loss(self, model, inputs, *args, **kwargs):
        loss = super().compute_loss(model, inputs, *args, **kwargs)
        if model.training and self.state.global_step + 1 == int(os.environ.get("ORACLE_SPIKE", "-1")):
            loss = loss * 1e4  # a diverged step
        return loss


class Stop(TrainerCallback):
    def on_step_begin(self, args, state, control, **kwargs):
        _stop_here(state.global_step)


out = os.path.join(os.environ["ORACLE_DIR"], "out")
torch.manual_seed(0)
model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=2, n_embd=32, vocab_size=64, n_positions=32,
                                   bos_token_id=0, eos_token_id=0))
args = TrainingArguments(output_dir=out, max_steps=int(os.environ["ORACLE_STEPS"]), max_grad_norm=0.0,
                         per_device_train_batch_size=8, learning_rate=1e-3, logging_steps=1, save_strategy="steps",
                         save_steps=int(os.environ["ORACLE_EVERY"]), report_to=[], use_cpu=True, disable_tqdm=True,
                         seed=0)
trainer = Spiking(model=model, args=args, train_dataset=RandomTokens(512),
                  callbacks=[Stop(), LogbookCallback(run_id=os.environ["ORACLE_RUN"], on_divergence="skip")])
trainer.train(resume_from_checkpoint=bool(glob.glob(os.path.join(out, "checkpoint-*"))) or None)
'''

LIGHTNING = '''
import os, sys, time
import torch
import lightning as L
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from torch.utils.data import DataLoader, TensorDataset
from logbook.integrations.lightning import LogbookCallback
''' + _STOP + '''

class Tiny(L.LightningModule):
    def __init__(self, lr=0.05):
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))

    def training_step(self, batch, i):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        if self.global_step + 1 == int(os.environ.get("ORACLE_SPIKE", "-1")):
            loss = loss * 1e4  # a diverged step
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


class Stop(Callback):
    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        _stop_here(trainer.global_step)


out = os.path.join(os.environ["ORACLE_DIR"], "out")
L.seed_everything(0)
g = torch.Generator().manual_seed(512)
x = torch.randn(512, 8, generator=g)
trainer = L.Trainer(max_steps=int(os.environ["ORACLE_STEPS"]), accelerator="cpu", devices=1, default_root_dir=out,
                    limit_val_batches=0, num_sanity_val_steps=0, log_every_n_steps=1, enable_progress_bar=False,
                    enable_model_summary=False, logger=False,
                    callbacks=[Stop(), ModelCheckpoint(dirpath=os.path.join(out, "ckpt"), save_last=True,
                                                       save_top_k=-1,
                                                       every_n_train_steps=int(os.environ["ORACLE_EVERY"])),
                               LogbookCallback(run_id=os.environ["ORACLE_RUN"], on_divergence="skip")])
trainer.fit(Tiny(), DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=8), ckpt_path="last")
'''

WRAPPED = '''
import os, sys, time
import torch
''' + _STOP + '''
ckpt = os.path.join(os.environ["ORACLE_DIR"], "ckpt.pt")
stops = [int(s) for s in os.environ["ORACLE_STOPS"].split(",") if s]
attempt = int(os.environ["LOGBOOK_ATTEMPT"])
os.environ["ORACLE_STOP_AT"] = str(stops[attempt - 1]) if attempt <= len(stops) else "-1"
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
start = 0
if os.path.exists(ckpt):
    state = torch.load(ckpt)
    model.load_state_dict(state["model"]); opt.load_state_dict(state["opt"]); start = state["step"]
print(f"logbook: resumed from step {start}", flush=True)
x, y = torch.randn(64, 8), torch.randn(64, 1)
for step in range(start + 1, int(os.environ["ORACLE_STEPS"]) + 1):
    _stop_here(step - 1)
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad(); loss.backward(); opt.step()
    print(f"step {step} loss {loss.item():.4f}", flush=True)
    if step % int(os.environ["ORACLE_EVERY"]) == 0:
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step}, ckpt + ".tmp")
        os.replace(ckpt + ".tmp", ckpt)
'''

TORCHRUN = '''
import os, sys, time
import torch
import torch.distributed as dist
from logbook.api import run_from_env
''' + _STOP + '''
ckpt = os.path.join(os.environ["ORACLE_DIR"], "ckpt.pt")
stops = [int(s) for s in os.environ["ORACLE_STOPS"].split(",") if s]
attempt = int(os.environ["LOGBOOK_ATTEMPT"])
os.environ["ORACLE_STOP_AT"] = str(stops[attempt - 1]) if attempt <= len(stops) else "-1"
dist.init_process_group("gloo")
rank, steps = dist.get_rank(), int(os.environ["ORACLE_STEPS"])
run = run_from_env(total_steps=steps)
torch.manual_seed(0)
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
start = 0
if os.path.exists(ckpt):
    state = torch.load(ckpt)
    model.load_state_dict(state["model"]); opt.load_state_dict(state["opt"]); start = state["step"]
run.resumed(start)
x = torch.randn(32, 8, generator=torch.Generator().manual_seed(rank))
for step in range(start + 1, steps + 1):
    _stop_here(step - 1)
    loss = model(x).pow(2).mean()
    opt.zero_grad(); loss.backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= 2
    opt.step()
    t = loss.detach().clone(); dist.all_reduce(t)
    run.log_metrics(step, {"loss": float(t) / 2})
    if rank == 0 and step % int(os.environ["ORACLE_EVERY"]) == 0:
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step}, ckpt + ".tmp")
        os.replace(ckpt + ".tmp", ckpt)
    dist.barrier()  # the checkpoint of this step is written before any rank goes on
run.close()
dist.destroy_process_group()
'''

SCRIPTS = {"hf": HF, "lightning": LIGHTNING, "wrapped": WRAPPED, "torchrun": TORCHRUN}


# --- running it for real -------------------------------------------------------------------

REGEX = r"step (?P<step>\d+) loss (?P<loss>[\d.]+)"
TIMEOUT_S = 300.0


def _env(lab: Lab, run: str, s: PathSchedule, scratch: Path) -> dict[str, str]:
    return {**lab.env, "ORACLE_DIR": str(scratch), "ORACLE_RUN": run, "ORACLE_STEPS": str(s.steps),
            "ORACLE_EVERY": str(s.every), "ORACLE_SPIKE": str(s.spike or -1),
            "ORACLE_STOPS": ",".join(str(k.step) for k in s.kills), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false", "PYTHONWARNINGS": "ignore"}


def script_of(lab: Lab, path: str) -> Path:
    """The path's script in the lab's repository, committed (`logbook run --` records the commit it ran)."""
    file = lab.root / f"oracle_{path}.py"
    if not file.exists():
        file.write_text(SCRIPTS[path])
        for args in (["add", file.name], ["commit", "-q", "-m", f"the {path} script"]):
            subprocess.run(["git", *args], cwd=lab.root, env=lab.env, check=True, capture_output=True)
    return file


def _wait_stopped(proc: subprocess.Popen, scratch: Path, step: int, ranks: int) -> list[int]:
    """Wait for every rank to stop after `step`; their pids. The marker names no attempt, so each is removed."""
    deadline = time.monotonic() + TIMEOUT_S
    markers = [scratch / f"stopped-{r}" for r in range(ranks)]
    while True:
        said = [m.read_text().split() if m.exists() else [] for m in markers]
        if all(len(x) == 2 and int(x[0]) == step for x in said):
            for m in markers:
                m.unlink()
            return [int(x[1]) for x in said]
        if proc.poll() is not None or time.monotonic() > deadline:
            out = proc.communicate()[1] if proc.poll() is not None else ""
            proc.kill()
            raise AssertionError(f"the attempt never stopped after step {step} (exit {proc.returncode}): "
                                 f"{(out or '')[-2000:]}")
        time.sleep(0.05)


def _wait_recorded(lab: Lab, run: str, step: int, timeout: float) -> None:
    """Give the launcher time to read step `step` off the command's output (it reads, the command has stopped)."""
    from logbook.core.project import open_project
    from logbook.eventlog.sink import full_metrics_path

    path = full_metrics_path(open_project(lab.root).state_dir, run)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if max((json.loads(ln).get("step", 0) for ln in path.read_text().splitlines() if ln.strip()),
                   default=0) >= step:
                return
        except (OSError, ValueError):
            pass
        time.sleep(0.05)


def _finish(proc: subprocess.Popen, what: str) -> None:
    try:
        _, err = proc.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    if proc.returncode != 0:
        raise AssertionError(f"{what} exited {proc.returncode}: {(err or '')[-3000:]}")


def _start(lab: Lab, argv: list[str], env: dict[str, str], started: list[subprocess.Popen]) -> subprocess.Popen:
    started.append(subprocess.Popen(argv, cwd=lab.root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                    text=True, start_new_session=True))
    return started[-1]


def _run_callback(lab: Lab, run: str, s: PathSchedule, scratch: Path, started: list[subprocess.Popen]) -> None:
    """The script run by hand once per attempt, each killed where the schedule says, the last to its end."""
    script = script_of(lab, s.path)
    for attempt in range(1, len(s.kills) + 2):
        kill = s.kills[attempt - 1] if attempt <= len(s.kills) else None
        env = {**_env(lab, run, s, scratch), "ORACLE_STOP_AT": str(kill.step if kill else -1)}
        proc = _start(lab, [sys.executable, str(script)], env, started)
        if kill is None:
            _finish(proc, f"attempt {attempt}")
            return
        _wait_stopped(proc, scratch, kill.step, 1)
        proc.kill()  # SIGKILL from outside: the callback has no chance to record it
        proc.communicate()


def _run_wrapped(lab: Lab, run: str, s: PathSchedule, scratch: Path, started: list[subprocess.Popen]) -> None:
    """`logbook run -- CMD`, its training process SIGKILLed (it restarts it) or itself SIGTERMed (then resumed)."""
    script = script_of(lab, s.path)
    ranks = 2 if s.path == "torchrun" else 1
    cmd = ([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", script.name]
           if ranks == 2 else [sys.executable, script.name])
    options = ["--steps", str(s.steps), "--metrics-regex", REGEX] if ranks == 1 else []
    env = _env(lab, run, s, scratch)
    proc = _start(lab, [sys.executable, "-m", "logbook", "run", "--exploratory", "--run-id", run, "--max-restarts",
                        str(len(s.kills) + 1), *options, "--", *cmd], env, started)
    for kill in s.kills:
        pids = _wait_stopped(proc, scratch, kill.step, ranks)
        _wait_recorded(lab, run, kill.step, 20.0 if ranks == 1 else 3.0)
        if kill.signal == "SIGKILL":
            os.kill(pids[-1], signal.SIGKILL)  # a lost worker (rank 1 under torchrun): logbook run restarts it
            continue
        proc.send_signal(signal.SIGTERM)  # the scheduler's preemption of the whole job
        proc.communicate(timeout=TIMEOUT_S)
        if proc.returncode != 75:
            raise AssertionError(f"a preempted `logbook run` exited {proc.returncode}, not 75")
        proc = _start(lab, [sys.executable, "-m", "logbook", "run", "--resume", run], env, started)
    _finish(proc, "logbook run")


def run_path_schedule(lab: Lab, run: str, s: PathSchedule, scratch: Path) -> None:
    scratch.mkdir(parents=True, exist_ok=True)
    started: list[subprocess.Popen] = []
    try:
        (_run_callback if s.path in CALLBACK_PATHS else _run_wrapped)(lab, run, s, scratch, started)
    finally:  # a schedule that failed half-way leaves no process behind (each started its own session)
        for proc in started:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate()


# --- what the record says ------------------------------------------------------------------


def observe(lab: Lab, run: str) -> PathObserved:
    obs = PathObserved()
    events = lab.events(run)
    restarts = [e for e in events if e.get("kind") == "restart"]
    obs.events = {
        "attempts": len({e.get("attempt") for e in events if e.get("kind") == "run_started"}),
        "restarts": len(restarts),
        "resumes": [e["data"].get("resumed_from_step") for e in restarts],
        "lost": [e["data"].get("steps_lost") for e in restarts],
        "failed_at": [e["data"].get("failed_at_step") for e in restarts],
        "causes": [e["data"].get("cause") for e in restarts],
        "starts": [e["data"].get("resumed_from_step") for e in events if e.get("kind") == "run_started"],
        "end": (events[-1].get("kind"), events[-1].get("step")) if events else None,
        "spikes": [e.get("step") for e in events if e.get("kind") == "divergence_detected"],
        "skipped": [e.get("step") for e in events if e.get("kind") == "step_skipped"],
    }
    res = lab.logbook("status", run, "--json")
    if res.returncode != 0:
        raise AssertionError(f"status exited {res.returncode}: {res.stdout[-2000:]}{res.stderr[-2000:]}")
    card = json.loads(res.stdout)
    obs.status = {"state": card.get("state"), "step": card.get("step"), "attempt": card.get("attempt")}
    res = lab.logbook("ls", "--runs", "--json")
    if res.returncode != 0:
        raise AssertionError(f"ls exited {res.returncode}: {res.stderr[-2000:]}")
    row = next((r for r in json.loads(res.stdout) if r.get("id") == run), {})
    obs.listed = {"state": row.get("state"), "steps": row.get("steps"), "restarts": row.get("restarts")}
    res = lab.logbook("render")
    if res.returncode != 0:
        raise AssertionError(f"render exited {res.returncode}: {res.stderr[-2000:]}")
    text = "".join(p.read_text("utf-8") for p in sorted(lab.root.glob("entries/[0-9]*/[0-9]*/[0-9]*.md")))
    text = text.replace(f"· run {run} (exploratory) ·", f"· run {run} ·")  # a run with no preregistration says so
    obs.chronicle = {**chronicle_figures(text, run), "failed_at": _reached(text, run)}
    return obs


def _reached(text: str, run: str) -> list[int | None]:
    """The step each restart entry of `run` says the attempt before it had reached."""
    out = []
    for b in re.split(r"(?m)^### ", text):
        if f"· run {run} ·" in b.splitlines()[0] and b.splitlines()[0].rstrip().endswith(("· restart",)):
            m = re.search(r"It had reached step ([\d,]+)", b)
            out.append(int(m.group(1).replace(",", "")) if m else None)
    return out


def disagreements(exp: PathExpected, obs: PathObserved) -> list[str]:
    """Every figure where the record and the oracle differ, as 'view: figure: said X, expected Y'."""
    ev, st_, ls, ch = obs.events, obs.status, obs.listed, obs.chronicle
    checks = [
        ("events", "attempts started", ev.get("attempts"), exp.attempts),
        ("events", "restarts", ev.get("restarts"), exp.restarts),
        ("events", "restart.resumed_from_step", ev.get("resumes"), exp.resumes),
        ("events", "restart.failed_at_step", ev.get("failed_at"), exp.failed_at),
        ("events", "restart.steps_lost", ev.get("lost"), exp.lost),
        ("events", "restart.cause", ev.get("causes"), exp.causes),
        ("events", "run_started.resumed_from_step", ev.get("starts"), [0, *exp.resumes]),
        ("events", "last event", ev.get("end"), ("run_finished", exp.final_step)),
        ("events", "divergence_detected steps", ev.get("spikes"), exp.spikes),
        ("events", "step_skipped steps", ev.get("skipped"), exp.spikes),
        ("status", "state", st_.get("state"), exp.state),
        ("status", "step", st_.get("step"), exp.final_step),
        ("status", "attempt", st_.get("attempt"), exp.attempts),
        ("ls --runs", "state", ls.get("state"), exp.state),
        ("ls --runs", "steps", ls.get("steps"), exp.final_step),
        ("ls --runs", "restarts", ls.get("restarts"), exp.restarts),
        ("chronicle", "restarts", ch.get("restarts"), exp.restarts),
        ("chronicle", "resume steps", ch.get("resumes"), exp.resumes),
        ("chronicle", "steps lost per restart", ch.get("lost"), exp.lost),
        ("chronicle", "step each killed attempt reached", ch.get("failed_at"),
         [k if k > r else None for k, r in zip(exp.failed_at, exp.resumes)]),  # said only when steps were lost
        ("chronicle", "run finished at", ch.get("finished_at"), [exp.final_step]),
    ]
    return [f"{view}: {what}: said {got!r}, expected {want!r}" for view, what, got, want in checks if got != want]


@dataclass
class PathChecked:
    run: str
    schedule: PathSchedule
    expected: PathExpected
    observed: PathObserved
    disagreements: list[str]
    seconds: float


def check(lab: Lab, run: str, s: PathSchedule, scratch: Path) -> PathChecked:
    """Run `s` as `run` in `lab` (its own files under `scratch`), read the record, compare it with the oracle."""
    t0 = time.monotonic()
    run_path_schedule(lab, run, s, scratch)
    obs = observe(lab, run)
    exp = expected(s)
    return PathChecked(run, s, exp, obs, disagreements(exp, obs), time.monotonic() - t0)
