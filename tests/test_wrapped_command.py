"""`logbook run -- CMD`: a plain PyTorch script the logbook did not write, unmodified, chronicled from outside.

The script trains a tiny model, saves a checkpoint every 5 steps, resumes
from it when it finds one, and prints `step N loss X`. The test SIGKILLs it
mid-run; the logbook restarts it, and the record says what happened.
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

from conftest import ROOT, git

from logbook.eventlog.chain import verify_log
from logbook.eventlog.runlog import iter_events

SCRIPT = '''\
import os, sys, time
import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
start = 0
if os.path.exists("ckpt.pt"):
    state = torch.load("ckpt.pt")
    model.load_state_dict(state["model"]); opt.load_state_dict(state["opt"]); start = state["step"]
if os.environ.get("SAY_RESUME"):
    print(f"logbook: resumed from step {start}", flush=True)
with open("train.pid", "w") as f:
    f.write(str(os.getpid()))
with open("starts.txt", "a") as f:
    f.write(f"{start}\\n")
x, y = torch.randn(64, 8), torch.randn(64, 1)
for step in range(start + 1, 41):
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad(); loss.backward(); opt.step()
    with open("steps.txt", "a") as f:
        f.write(f"{os.getpid()} {step} {time.time()}\\n")
    print(f"step {step} loss {loss.item():.4f}", flush=True)
    if step % 5 == 0:
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step}, "ckpt.tmp")
        os.replace("ckpt.tmp", "ckpt.pt")
    time.sleep(0.15)
'''
REGEX = r"step (?P<step>\d+) loss (?P<loss>[\d.]+)"


def _env() -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CI": "true"}
    env.pop("LOGBOOK_DEBUG", None)
    return env


def _steps_seen(repo: Path, run: str) -> int:
    path = repo / ".logbook" / "metrics" / run / "metrics.jsonl"
    try:
        rows = [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()]
    except (OSError, ValueError):
        return 0
    return max((r["step"] for r in rows), default=0)


def _real_downtime(repo: Path) -> float:
    """From the killed process's last step to the next process's first, as the script itself wrote them."""
    rows = [ln.split() for ln in (repo / "steps.txt").read_text().splitlines()]
    pids = list(dict.fromkeys(r[0] for r in rows))
    last = max(float(r[2]) for r in rows if r[0] == pids[0])
    first = min(float(r[2]) for r in rows if r[0] == pids[1])
    return first - last


def _real_seconds_lost(repo: Path, resumed: int) -> float:
    rows = [ln.split() for ln in (repo / "steps.txt").read_text().splitlines()]
    first = [r for r in rows if r[0] == rows[0][0]]
    return max(float(r[2]) for r in first) - next(float(r[2]) for r in first if int(r[1]) == resumed)


@pytest.mark.parametrize("says_resume", [True, False], ids=["says-its-resume-step", "says-nothing"])
def test_an_unmodified_script_killed_mid_run_is_restarted_and_chronicled(logbook_repo, cli, says_resume):
    (logbook_repo / "train.py").write_text(SCRIPT)
    (logbook_repo / ".gitignore").write_text("ckpt.pt\nckpt.tmp\ntrain.pid\nsteps.txt\nstarts.txt\n")
    git(logbook_repo, "add", "train.py", ".gitignore")
    git(logbook_repo, "commit", "-q", "-m", "a training script of our own")
    run = "plain-script"
    proc = subprocess.Popen([sys.executable, "-m", "logbook", "run", "--exploratory", "--run-id", run,
                             "--steps", "40", "--metrics-regex", REGEX, "--max-restarts", "2", "--json",
                             "--", sys.executable, "train.py"],
                            cwd=logbook_repo, env={**_env(), **({"SAY_RESUME": "1"} if says_resume else {})},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while _steps_seen(logbook_repo, run) < 12:
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    os.kill(int((logbook_repo / "train.pid").read_text()), signal.SIGKILL)  # the kill -9 of a lost node
    out, errs = proc.communicate(timeout=120)
    assert proc.returncode == 0, errs
    result = json.loads(out)
    assert (result["status"], result["attempts"], result["restarts"]) == ("finished", 2, 1)
    assert "step 40 loss" in errs  # the command's own output reaches the person

    log = logbook_repo / "entries" / "runs" / run / "events.jsonl"
    assert verify_log(log) == []
    events = list(iter_events(log))
    kinds = [e["kind"] for e in events]
    assert kinds.count("run_started") == 2 and kinds[-1] == "run_finished"
    restart = next(e for e in events if e["kind"] == "restart")
    d = restart["data"]
    assert d["cause"] == "signal" and d["signal"] == signal.SIGKILL and d["prev_attempt"] == 1
    starts = [int(x) for x in (logbook_repo / "starts.txt").read_text().split()]  # what the script really did
    first, second = [e for e in events if e["kind"] == "run_started"]
    assert first["data"]["resumed_from_step"] == 0 and first["data"]["world_size"] == 1  # a first attempt starts at 0
    assert d["failed_at_step"] >= 12
    if says_resume:
        assert d["resumed_from_step"] == starts[1] and d["steps_lost"] == d["failed_at_step"] - starts[1]
    else:  # nothing says where it resumed: unknown, never its first printed step minus one
        assert d["resumed_from_step"] is None and d["steps_lost"] is None
    assert second["attempt"] == 2 and second["data"]["resumed_from_step"] == d["resumed_from_step"]
    assert abs(d["downtime_s"] - _real_downtime(logbook_repo)) < 1.5
    if says_resume:  # the work thrown away: from reaching the checkpoint's step to the kill, as the script timed it
        assert abs(d["seconds_lost"] - _real_seconds_lost(logbook_repo, starts[1])) < 1.0
    fractions = [e["data"]["fraction"] for e in events if e["kind"] == "milestone"]
    assert sorted(fractions) == sorted(set(fractions)) and 1.0 in fractions
    record = json.loads((logbook_repo / "entries" / "runs" / run / "run.json").read_text())
    assert record["command"] == [sys.executable, "train.py"] and record["config_path"] == "train.py"

    assert cli("verify").exit_code == 0
    assert cli("render").exit_code == 0
    day = "".join(p.read_text() for p in (logbook_repo / "entries").glob("20*/*/*.md"))
    assert "Attempt 1 was killed by signal 9 (SIGKILL)" in day  # the restart entry, from outside
    if says_resume:
        assert f"Resumed from the checkpoint at step {d['resumed_from_step']}: {d['steps_lost']} steps (" in day
    else:
        assert "Resumed from a step nothing recorded" in day
    assert "**100% of the run**: step 40 of 40." in day  # milestone notes from the command's own output
    status = json.loads(cli("status", run, "--json").stdout)
    assert (status["state"], status["attempt"], status["step"]) == ("finished", 2, 40)


def test_a_command_that_keeps_failing_ends_the_run_failed_with_its_exit_code(logbook_repo, cli):
    (logbook_repo / "bad.py").write_text("import sys\nprint('step 1 loss 1.0')\nsys.exit(3)\n")
    git(logbook_repo, "add", "bad.py")
    git(logbook_repo, "commit", "-q", "-m", "a script that fails")
    res = subprocess.run([sys.executable, "-m", "logbook", "run", "--exploratory", "--run-id", "bad", "--max-restarts",
                          "1", "--metrics-regex", REGEX, "--", sys.executable, "bad.py"],
                         cwd=logbook_repo, env=_env(), capture_output=True, text=True, timeout=120)
    assert res.returncode == 5, res.stderr
    events = list(iter_events(logbook_repo / "entries" / "runs" / "bad" / "events.jsonl"))
    restart = next(e for e in events if e["kind"] == "restart")
    assert (restart["data"]["cause"], restart["data"]["exit_code"]) == ("exit", 3)
    assert events[-1]["kind"] == "run_failed" and "exited with code 3" in events[-1]["data"]["reason"]
    assert "restart: attempt 1 -> 2, exited with code 3" in res.stderr


def test_a_command_is_checked_before_anything_is_recorded(logbook_repo, cli):
    res = cli("run", "--exploratory", "--", sys.executable, "missing.py")
    assert res.exit_code == 2 and "no file of this repository" in res.output
    res = cli("run", "--exploratory", "--metrics-regex", "loss (?P<loss>", "--", sys.executable, "x.py")
    assert res.exit_code == 2 and "not a regular expression" in res.output
    res = cli("run", "configs/tiny.yaml", "--exploratory", "--", "python", "x.py")
    assert res.exit_code == 2 and "exclude each other" in res.output
    assert not (logbook_repo / "entries" / "runs").exists() or not any((logbook_repo / "entries" / "runs").iterdir())


HANGS_ONCE = '''\
import os, time
print("step 1 loss 2.0", flush=True)
if not os.path.exists("hung-once"):
    open("hung-once", "w").close()
    time.sleep(600)  # a collective that never returns
print("step 2 loss 1.5", flush=True)
'''


def test_a_silent_command_is_killed_as_hung_and_restarted(logbook_repo):
    (logbook_repo / "hangs.py").write_text(HANGS_ONCE)
    git(logbook_repo, "add", "hangs.py")
    git(logbook_repo, "commit", "-q", "-m", "a script that hangs once")
    t0 = time.monotonic()
    res = subprocess.run([sys.executable, "-m", "logbook", "run", "--exploratory", "--run-id", "hangs", "--hang-timeout",
                          "2", "--metrics-regex", REGEX, "--", sys.executable, "hangs.py"],
                         cwd=logbook_repo, env=_env(), capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert time.monotonic() - t0 < 60  # killed after its timeout, not after its sleep
    events = list(iter_events(logbook_repo / "entries" / "runs" / "hangs" / "events.jsonl"))
    hang = next(e for e in events if e["kind"] == "hang")
    assert hang["attempt"] == 1 and hang["data"]["timeout_s"] == 2 and hang["data"]["elapsed_s"] >= 2
    restart = next(e for e in events if e["kind"] == "restart")
    assert restart["data"]["cause"] == "hang" and events[-1]["kind"] == "run_finished"


LONG = '''\
import os, time
start = int(open("progress").read()) if os.path.exists("progress") else 0
for step in range(start + 1, 31):
    print(f"step {step} loss {1.0 / step:.4f}", flush=True)
    open("progress", "w").write(str(step))
    time.sleep(0.1)
'''


def test_a_preempted_command_ends_with_75_and_resumes_where_it_stopped(logbook_repo, cli):
    (logbook_repo / "long.py").write_text(LONG)
    git(logbook_repo, "add", "long.py")
    git(logbook_repo, "commit", "-q", "-m", "a script that resumes")
    proc = subprocess.Popen([sys.executable, "-m", "logbook", "run", "--exploratory", "--run-id", "pre", "--steps", "30",
                             "--metrics-regex", REGEX, "--", sys.executable, "long.py"],
                            cwd=logbook_repo, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while _steps_seen(logbook_repo, "pre") < 5:
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)  # the scheduler's preemption
    out, errs = proc.communicate(timeout=60)
    assert proc.returncode == 75, errs
    assert "logbook run --resume pre" in errs
    res = subprocess.run([sys.executable, "-m", "logbook", "run", "--resume", "pre"], cwd=logbook_repo, env=_env(),
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    events = list(iter_events(logbook_repo / "entries" / "runs" / "pre" / "events.jsonl"))
    kinds = [e["kind"] for e in events]
    assert "preempted" in kinds and kinds[-1] == "run_finished"
    restart = next(e for e in events if e["kind"] == "restart")
    assert restart["data"]["cause"] == "preempted" and restart["attempt"] == 2
    fractions = [e["data"]["fraction"] for e in events if e["kind"] == "milestone"]
    assert len(fractions) == len(set(fractions)) and 1.0 in fractions  # the resume kept --steps and the regex
    assert json.loads(cli("status", "pre", "--json").stdout)["state"] == "finished"


ON_THE_API = '''\
from logbook.api import run_from_env

run = run_from_env(total_steps=20)
assert run.launched, "under logbook run -- the environment names the run"
for step in range(1, 21):
    run.log_metrics(step, {"loss": 2.0 / step})
    if step % 10 == 0:
        run.emit("checkpoint_saved", step=step, path=f"ckpt/{step}", blocking_s=0.01)
run.close()
'''


def test_a_command_on_the_api_writes_into_the_run_that_logbook_run_launched(logbook_repo, cli):
    (logbook_repo / "api_loop.py").write_text(ON_THE_API)
    git(logbook_repo, "add", "api_loop.py")
    git(logbook_repo, "commit", "-q", "-m", "a loop on the API")
    res = subprocess.run([sys.executable, "-m", "logbook", "run", "--exploratory", "--run-id", "on-api", "--",
                          sys.executable, "api_loop.py"], cwd=logbook_repo, env=_env(), capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    log = logbook_repo / "entries" / "runs" / "on-api" / "events.jsonl"
    events = list(iter_events(log))
    assert [e["kind"] for e in events] == ["run_started", "checkpoint_saved", "checkpoint_saved", "run_finished"]
    assert {e["attempt"] for e in events} == {1} and verify_log(log) == []
    status = json.loads(cli("status", "on-api", "--json").stdout)
    assert (status["state"], status["step"]) == ("finished", 20)


def test_resume_args_are_added_on_every_restart_and_kept_for_a_later_resume(logbook_repo):
    (logbook_repo / "told.py").write_text("import sys\nprint('step 1 loss 1.0', sys.argv[1:], flush=True)\n"
                                          "sys.exit(0 if '--resume' in sys.argv else 3)\n")
    git(logbook_repo, "add", "told.py")
    git(logbook_repo, "commit", "-q", "-m", "a script that resumes when told")
    res = subprocess.run([sys.executable, "-m", "logbook", "run", "--exploratory", "--run-id", "told", "--max-restarts",
                          "1", "--resume-arg=--resume", "--metrics-regex", REGEX, "--", sys.executable, "told.py"],
                         cwd=logbook_repo, env=_env(), capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "step 1 loss 1.0 []" in res.stderr and "step 1 loss 1.0 ['--resume']" in res.stderr
    record = json.loads((logbook_repo / "entries" / "runs" / "told" / "run.json").read_text())
    assert record["command"] == [sys.executable, "told.py"] and record["command_options"]["resume_args"] == ["--resume"]


ON_TENSORBOARD = '''\
import os, sys
from torch.utils.tensorboard import SummaryWriter

start = int(open("progress").read()) if os.path.exists("progress") else 0
print(f"logbook: resumed from step {start}", flush=True)  # the documented handshake of a script off the API
writer = SummaryWriter("runs/tb")
for step in range(start + 1, 31):
    writer.add_scalar("train/loss", 3.0 / step, step)
    if step % 10 == 0:
        writer.add_scalar("eval/loss", 3.3 / step, step)
        writer.flush()
        open("progress", "w").write(str(step))  # the script's own checkpoint
    if step == 15 and start == 0:
        writer.flush()
        sys.exit(3)  # the first attempt fails after step 15; the next resumes from step 10
writer.close()
'''


def test_a_command_writing_tensorboard_files_gets_its_metrics_and_milestones_from_them(logbook_repo, cli):
    pytest.importorskip("tensorboard", reason="TensorBoard is in the test extra; the tensorboard source needs it")
    (logbook_repo / "tb.py").write_text(ON_TENSORBOARD)
    (logbook_repo / ".gitignore").write_text("runs/\nprogress\n")
    git(logbook_repo, "add", "tb.py", ".gitignore")
    git(logbook_repo, "commit", "-q", "-m", "a script that writes TensorBoard files")
    res = subprocess.run([sys.executable, "-m", "logbook", "run", "--exploratory", "--run-id", "tb", "--steps", "30",
                          "--metrics-from", "tensorboard:runs", "--", sys.executable, "tb.py"],
                         cwd=logbook_repo, env=_env(), capture_output=True, text=True, timeout=180)
    assert res.returncode == 0, res.stderr
    rows = [json.loads(ln) for ln in (logbook_repo / ".logbook" / "metrics" / "tb" / "metrics.jsonl").read_text()
            .splitlines()]
    final = {r["step"]: r for r in rows if r["attempt"] == 2}
    assert sorted(final) == list(range(11, 31)) and final[30]["loss"] == pytest.approx(0.1)
    assert final[20]["val_loss"] == pytest.approx(3.3 / 20)  # eval/loss is the logbook's val_loss
    events = list(iter_events(logbook_repo / "entries" / "runs" / "tb" / "events.jsonl"))
    restart = next(e for e in events if e["kind"] == "restart")
    assert (restart["data"]["cause"], restart["data"]["exit_code"]) == ("exit", 3)
    assert (restart["data"]["failed_at_step"], restart["data"]["resumed_from_step"]) == (15, 10)
    fractions = sorted(e["data"]["fraction"] for e in events if e["kind"] == "milestone")
    assert fractions == sorted(set(fractions)) and 1.0 in fractions
    assert json.loads(cli("status", "tb", "--json").stdout)["step"] == 30


TWO_RANKS = '''\
import os, signal, time
import torch
import torch.distributed as dist
from logbook.api import run_from_env

dist.init_process_group("gloo")
rank = dist.get_rank()
run = run_from_env(total_steps=20)
attempt = int(os.environ["LOGBOOK_ATTEMPT"])
run.resumed(0)  # no checkpoint: every attempt starts again from scratch
for step in range(1, 21):
    t = torch.ones(1) * step
    dist.all_reduce(t)
    run.log_metrics(step, {"loss": 1.0 / step})
    if attempt == 1 and rank == 1 and step == 8:
        os.kill(os.getpid(), signal.SIGKILL)  # a lost worker: no record of its own
    time.sleep(0.25)
run.close()
dist.destroy_process_group()
'''


@pytest.mark.slow
def test_a_wrapped_torchrun_records_its_world_size_and_the_rank_and_signal_that_ended_an_attempt(logbook_repo):
    (logbook_repo / "ddp.py").write_text(TWO_RANKS)
    git(logbook_repo, "add", "ddp.py")
    git(logbook_repo, "commit", "-q", "-m", "a two-rank script")
    res = subprocess.run([sys.executable, "-m", "logbook", "run", "--exploratory", "--run-id", "ddp", "--max-restarts",
                          "1", "--", sys.executable, "-m", "torch.distributed.run", "--standalone",
                          "--nproc-per-node", "2", "ddp.py"],
                         cwd=logbook_repo, env={**_env(), "OMP_NUM_THREADS": "1"}, capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    events = list(iter_events(logbook_repo / "entries" / "runs" / "ddp" / "events.jsonl"))
    starts = [e for e in events if e["kind"] == "run_started"]
    assert [s["data"]["world_size"] for s in starts] == [2, 2]  # what torchrun's ranks said, not 1
    restart, = [e for e in events if e["kind"] == "restart"]
    d = restart["data"]
    assert (d["cause"], d["signal"], d["failed_rank"], d["local_rank"]) == ("signal", 9, 1, 1)
    # Rank 0's rows reach the disk every second: the last ones before the kill are lost with it.
    assert d["resumed_from_step"] == 0 and d["steps_lost"] == d["failed_at_step"] and 4 <= d["failed_at_step"] <= 8
    assert "attempt 1 rank 1 was killed by SIGKILL; restarting" in res.stderr  # torchrun itself exited with 1



TEARDOWN_CRASH = '''\
import os, signal, sys
import torch
import torch.distributed as dist
from logbook.api import run_from_env

dist.init_process_group("gloo")
rank = dist.get_rank()
steps = int(sys.argv[1])
run = run_from_env(total_steps=20)
run.resumed(0)
for step in range(1, steps + 1):
    t = torch.ones(1) * step
    dist.all_reduce(t)
    run.log_metrics(step, {"loss": 1.0 / step})
run.close()
dist.barrier()  # every rank has closed (rank 0 said its last step) before rank 1 crashes
dist.destroy_process_group()
if rank == 1:
    os.kill(os.getpid(), signal.SIGABRT)  # a crash in the teardown, after the loop closed its run
'''


def _two_ranks(repo: Path, run: str, steps: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "logbook", "run", "--exploratory", "--run-id", run, "--max-restarts",
                           "1", "--", sys.executable, "-m", "torch.distributed.run", "--standalone",
                           "--nproc-per-node", "2", "teardown.py", str(steps)],
                          cwd=repo, env={**_env(), "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_a_rank_that_crashes_after_the_loop_closed_at_its_last_step_finishes_the_run_without_a_relaunch(logbook_repo):
    (logbook_repo / "teardown.py").write_text(TEARDOWN_CRASH)
    git(logbook_repo, "add", "teardown.py")
    git(logbook_repo, "commit", "-q", "-m", "a two-rank script that crashes in its teardown")
    res = _two_ranks(logbook_repo, "tear", 20)
    assert res.returncode == 0, res.stderr[-3000:]
    events = list(iter_events(logbook_repo / "entries" / "runs" / "tear" / "events.jsonl"))
    assert [e["kind"] for e in events if e["kind"] in ("run_started", "restart", "run_finished")] == \
        ["run_started", "run_finished"]
    end = events[-1]
    assert end["kind"] == "run_finished" and end["step"] == 20
    assert end["data"]["teardown"] == "rank 1 was killed by SIGABRT"
    assert "then rank 1 was killed by SIGABRT" in res.stderr and "not trained again" in res.stderr
    # Short of its last step, the same crash is a failure, and the attempt is trained again.
    res = _two_ranks(logbook_repo, "short", 12)
    events = list(iter_events(logbook_repo / "entries" / "runs" / "short" / "events.jsonl"))
    assert res.returncode == 5 and [e["kind"] for e in events].count("restart") == 1
    assert events[-1]["kind"] == "run_failed" and "teardown" not in events[-1]["data"]


NO_CHECKPOINT = '''\
import os, time
with open("train.pid", "w") as f:
    f.write(str(os.getpid()))
for step in range(1, 31):
    with open("steps.txt", "a") as f:
        f.write(f"{os.getpid()} {step} {time.time()}\\n")
    print(f"step {step} loss {1.0 / step:.4f}", flush=True)
    time.sleep(0.1)
'''


def test_a_script_with_no_checkpoint_killed_and_started_again_loses_its_whole_attempt_in_every_view(logbook_repo, cli):
    (logbook_repo / "plain.py").write_text(NO_CHECKPOINT)
    (logbook_repo / ".gitignore").write_text("train.pid\nsteps.txt\n")
    git(logbook_repo, "add", "plain.py", ".gitignore")
    git(logbook_repo, "commit", "-q", "-m", "a script with no checkpoint")
    proc = subprocess.Popen([sys.executable, "-m", "logbook", "run", "--exploratory", "--run-id", "nockpt", "--steps",
                             "30", "--metrics-regex", REGEX, "--max-restarts", "1", "--", sys.executable, "plain.py"],
                            cwd=logbook_repo, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while _steps_seen(logbook_repo, "nockpt") < 12:
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    os.kill(int((logbook_repo / "train.pid").read_text()), signal.SIGKILL)
    proc.communicate(timeout=120)
    assert proc.returncode == 0
    events = list(iter_events(logbook_repo / "entries" / "runs" / "nockpt" / "events.jsonl"))
    d = next(e for e in events if e["kind"] == "restart")["data"]
    lost = _real_seconds_lost_from_start(logbook_repo)
    # Its first step is the run's first again: from scratch, every step of the first attempt lost.
    assert d["resumed_from_step"] == 0 and d["steps_lost"] == d["failed_at_step"] >= 12
    assert abs(d["seconds_lost"] - lost) < 1.0
    from logbook.runs.goodput import goodput_of_run

    rep = goodput_of_run(logbook_repo / "entries" / "runs" / "nockpt")
    assert abs(rep.lost_restart_s - lost) < 1.0  # the report's "work lost to restarts", not "<1 ms"
    assert cli("report", "nockpt").exit_code == 0
    text = (logbook_repo / "entries" / "reports" / "nockpt.md").read_text()
    assert "automatic restart (logbook run)" in text and "torchrun" not in text


def _real_seconds_lost_from_start(repo: Path) -> float:
    rows = [ln.split() for ln in (repo / "steps.txt").read_text().splitlines()]
    first = [float(r[2]) for r in rows if r[0] == rows[0][0]]
    return max(first) - min(first)


def test_a_log_written_with_the_old_attempt_wall_s_reads_it_as_unknown_in_every_view(logbook_repo, cli):
    """tests/assets/old_wrapped_run: a wrapped run's log as the launcher wrote it before attempt_wall_s was
    seconds (it held the Unix time less one): the log keeps it, the views read it as unknown."""
    import shutil

    from logbook.eventlog.kinds import Event
    from logbook.eventlog.runlog import iter_events

    run_dir = logbook_repo / "entries" / "runs" / "wrapped-2026-12-04"
    run_dir.mkdir(parents=True)
    shutil.copy(ROOT / "tests" / "assets" / "old_wrapped_run" / "events.jsonl", run_dir / "events.jsonl")
    end = list(iter_events(run_dir / "events.jsonl"))[-1]
    assert end["data"]["attempt_wall_s"] > 1.7e9  # what the old launcher wrote
    assert Event.of(end).data["attempt_wall_s"] is None and Event.of(end).data["wall_s"] == 12.5
    assert cli("render").exit_code == 0
    day = (logbook_repo / "entries" / end["ts"][:4] / end["ts"][5:7] / f"{end['ts'][8:10]}.md").read_text()
    assert "Checkpoints blocked training for 0.4 s in this attempt." in day
    assert "(of " not in day and "years" not in day
    assert cli("verify").exit_code == 0  # the log itself is intact: nothing was rewritten
