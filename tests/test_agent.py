"""`trainer.launch.agent`: torchrun whose trainer workers are forked from one warm fork server.

A real `logbook run` with a SIGKILL drill: the restarted attempt's worker is
a new process forked by the same server as the first, named for its rank,
and the run resumes as under plain torchrun. The server itself makes no
thread, tensor or GPU context a fork would copy badly, and a worker passes
on the trainer's exit code.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from lab import Lab
from nodes import descendants


pytestmark = pytest.mark.slow


def _micro(steps: int, every: int, faults: list | None = None) -> dict:
    """A one-layer GPT whose steps take milliseconds, saved in the foreground every `every` steps."""
    return {"model": {"n_layer": 1, "n_head": 2, "n_embd": 32, "block_size": 32},
            "data": {"sources": [{"name": "stdlib", "kind": "stdlib", "max_mb": 0.3}]},
            "train": {"steps": steps, "batch_size": 4, "eval_every": 0, "eval_batches": 1, "threads": 1},
            "checkpoint": {"every": every, "keep": 2, "background": False}, "faults": faults or []}


def _watch_workers(launcher: subprocess.Popen, seen: dict[int, tuple[int, bytes]], stop: threading.Event) -> None:
    """Record each `trainer-r0` process under the launcher with its parent and the parent's command line."""
    while not stop.is_set():
        for pid in descendants(launcher.pid):
            try:
                if pid not in seen and Path(f"/proc/{pid}/comm").read_text().strip() == "trainer-r0":
                    ppid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
                    seen[pid] = (ppid, Path(f"/proc/{ppid}/cmdline").read_bytes())
            except (OSError, ValueError, IndexError):
                continue
        time.sleep(0.02)


def test_a_restarted_attempt_is_forked_by_the_same_warm_server_and_resumes(tmp_path):
    lab = Lab.create(tmp_path)
    # Long enough a second attempt (a second or so) that the watcher cannot miss its worker on a busy machine.
    config = lab.write_config("killed.yaml", _micro(steps=200, every=10, faults=[{"kind": "sigkill", "step": 12,
                                                                                "attempt": 1}]))
    launcher = subprocess.Popen([sys.executable, "-m", "logbook", "run", str(config), "--exploratory",
                                 "--run-id", "warm", "--max-restarts", "1"], cwd=lab.root, env=lab.env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    seen: dict[int, tuple[int, bytes]] = {}
    stop = threading.Event()
    watcher = threading.Thread(target=_watch_workers, args=(launcher, seen, stop), daemon=True)
    watcher.start()
    try:
        _, err = launcher.communicate(timeout=300)
    finally:
        stop.set()
        watcher.join()
    assert launcher.returncode == 0, err[-3000:]
    assert "Warning" not in err, err[-3000:]  # nothing of the fork server's start-up reaches the user
    # The worker's death in one line, as torchrun says it, with no traceback of torch's own: in torchrun's log,
    # which the console keeps out of the person's terminal.
    (log,) = (lab.root / ".logbook" / "torchrun" / "warm").glob("*/torchrun.log")
    said = log.read_text()
    assert "failed (exitcode: -9)" in said and "Traceback" not in said + err, said[-3000:]
    assert "exitcode" not in err, err[-3000:]
    started = [e for e in lab.events("warm") if e["kind"] == "run_started"]
    assert [e["attempt"] for e in started] == [1, 2] and started[1]["data"]["resumed_from_step"] == 10
    assert max(lab.losses("warm")) == 200
    # One worker per attempt, two processes, one parent: the fork server, started once for the run.
    # A worker's own children (a progress plot's process), between their fork and exec, carry its name
    # and, through it, the server's command line too: a process whose parent is a worker is not counted.
    workers = {pid: parent for pid, parent in seen.items()
               if b"multiprocessing.forkserver" in parent[1] and parent[0] not in seen}
    assert len(workers) == 2, seen
    ((server, cmdline),) = set(workers.values())
    assert b"trainer.launch.prewarm" in cmdline


def test_the_fork_server_leaves_no_thread_gpu_context_or_setting_behind_and_keeps_the_cpu_checks(tmp_path):
    probe = (
        "import os, threading, json\n"
        "import trainer.launch.prewarm\n"
        "import torch, torch._inductor.config as c\n"
        "from torch._inductor import cpu_vec_isa\n"
        "import gc\n"
        "print(json.dumps({'threads': threading.active_count(), 'cuda': torch.cuda.is_initialized(),\n"
        "  'frozen': gc.get_freeze_count() > 100000,\n"
        "  'isa_cached': cpu_vec_isa.valid_vec_isa_list.cache_info().currsize,\n"
        "  'cache_env': os.environ.get('TORCHINDUCTOR_CACHE_DIR'), 'vec_isa_ok': c.cpp.vec_isa_ok,\n"
        "  'compiler': 'torch._inductor.compile_fx' in __import__('sys').modules}))\n"
    )
    env = {**Lab(tmp_path, tmp_path).env, "LOGBOOK_WARM_COMPILE_CACHE": str(tmp_path / ".logbook")}
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout)
    # Inductor's cache folder and settings are put back: each attempt's CompileCache sets its own.
    assert got.pop("cache_env") != str(tmp_path / ".logbook" / "compile-cache" / "inductor")
    assert got == {"threads": 1, "cuda": False, "frozen": True, "isa_cached": 1, "vec_isa_ok": None,
                   "compiler": True}
    assert (tmp_path / ".logbook" / "compile-cache" / "torch-key.json").is_file()


def test_a_worker_exits_with_the_trainers_exit_code(tmp_path):
    missing = tmp_path / "missing.yaml"
    res = subprocess.run([sys.executable, "-c", "import sys; from trainer.launch.agent import train_worker; "
                          "train_worker('--print-config', sys.argv[1])", str(missing)],
                         env=Lab(tmp_path, tmp_path).env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 2, res.stderr
    assert "missing.yaml" in res.stderr and "Traceback" not in res.stderr


def test_a_worker_whose_agent_is_killed_outright_saves_and_stops_instead_of_training_unwatched(tmp_path):
    lab = Lab.create(tmp_path)
    config = lab.write_config("long.yaml", _micro(steps=100000, every=20))
    launcher = subprocess.Popen([sys.executable, "-m", "logbook", "run", str(config), "--exploratory",
                                 "--run-id", "orphan"], cwd=lab.root, env=lab.env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while _steps_done(lab, "orphan") < 3:
            assert time.monotonic() < deadline and launcher.poll() is None, "the run never started"
            time.sleep(0.2)
        procs = {pid: Path(f"/proc/{pid}/cmdline").read_bytes() for pid in descendants(launcher.pid)}
        (agent,) = [pid for pid, cmd in procs.items() if b"trainer.launch.agent" in cmd.split(b"\0")]
        (worker,) = [pid for pid in procs if Path(f"/proc/{pid}/comm").read_text().strip() == "trainer-r0"]
        os.kill(agent, signal.SIGKILL)  # the agent alone, as an OOM killer might pick it
        deadline = time.monotonic() + 120
        while Path(f"/proc/{worker}").exists() and Path(f"/proc/{worker}/stat").read_text().split()[2] != "Z":
            assert time.monotonic() < deadline, "the worker trained on after its agent was gone"
            time.sleep(0.2)
    finally:
        for pid in [*descendants(launcher.pid), launcher.pid]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        launcher.wait(timeout=60)
    (stopped,) = [e for e in lab.events("orphan") if e["kind"] == "preempted"]
    assert stopped["data"]["signal"] == "SIGTERM" and stopped["data"]["saved_step"] > 0


def _steps_done(lab: Lab, run: str) -> int:
    return max(lab.losses(run), default=0) if (lab.run_dir(run) / "metrics.jsonl").exists() else 0
