"""Several nodes on one machine: one `logbook run` launcher per node, one rendezvous on 127.0.0.1.

Each node is what a cluster would run on each host: its own `logbook run
--nnodes N --node-rank R`, its own torchrun agent and workers. Killing a node
means SIGKILLing its whole process tree at once (launcher, torchrun, workers),
as a lost host would vanish, with nothing left to save or report.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from lab import Lab


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def node_command(rank: int, nnodes: int | str, endpoint: str, run_id: str, config: Path | None, *extra: str,
                 resume: bool = False) -> list[str]:
    """`logbook run` for node `rank` of a run on `nnodes` nodes."""
    head = ["--resume", run_id] if resume else [str(config), "--exploratory", "--run-id", run_id]
    return [sys.executable, "-m", "logbook", "run", *head, "--nnodes", str(nnodes), "--node-rank", str(rank),
            "--rdzv-endpoint", endpoint, *extra]


def start_node(lab: Lab, argv: list[str], log: Path) -> subprocess.Popen:
    """Start one node's launcher in a session of its own, its output in `log`."""
    out = open(log, "ab")
    try:
        return subprocess.Popen(argv, cwd=lab.root, env=lab.env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    finally:
        out.close()


def wait_for_rendezvous(endpoint: str, node0: subprocess.Popen, timeout: float = 300) -> None:
    """Wait until node 0's torchrun listens on the rendezvous endpoint.

    On one machine every launcher's host matches the endpoint, and whichever
    torchrun binds the port first hosts the rendezvous store. On a cluster it is
    node 0, whose address the endpoint is; starting the others after it keeps
    that true here, so losing node 1 does not take the store with it.
    """
    host, port = endpoint.rsplit(":", 1)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if node0.poll() is not None:
            raise AssertionError(f"node 0 ended (exit {node0.returncode}) before its rendezvous was up")
        try:
            with socket.create_connection((host, int(port)), timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"nothing listens on {endpoint} after {timeout} s")


def start_nodes(lab: Lab, argv0: list[str], argv1: list[str], endpoint: str, logs: Path) -> tuple:
    """Node 0, then (once its rendezvous is up) node 1."""
    n0 = start_node(lab, argv0, logs / "node0.log")
    wait_for_rendezvous(endpoint, n0)
    return n0, start_node(lab, argv1, logs / "node1.log")


def descendants(pid: int) -> list[int]:
    """Every process below `pid`, children first, read from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    out: list[int] = []
    todo = list(children.get(pid, []))
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def worker_pids(launcher: subprocess.Popen) -> list[int]:
    """The trainer processes under a launcher: forked by the agent's fork server, named `trainer-r<local rank>`."""
    out = []
    for p in descendants(launcher.pid):
        try:
            comm = Path(f"/proc/{p}/comm").read_text().strip()
        except OSError:
            continue
        if comm.startswith("trainer-r"):
            out.append(p)
    return out


def kill_node(launcher: subprocess.Popen) -> None:
    """SIGKILL a node's launcher, torchrun and workers together: a host that vanished."""
    pids = [*descendants(launcher.pid), launcher.pid]
    for p in pids:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass
    launcher.wait(timeout=30)
