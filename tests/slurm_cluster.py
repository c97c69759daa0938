"""A real one-host Slurm cluster in a temporary folder: munged, slurmctld and slurmd, started and stopped by pid.

Debian's `slurmctld`, `slurmd`, `slurm-client` and `munge` packages, run as
root without systemd: every file (munge key and socket, slurm.conf, state,
spool, logs, pid files) lives in the folder, ports are free ones, and
`SLURM_CONF` points the client commands at it. Processes are tracked with
cgroups off (`proctrack/linuxproc`, `task/none`), so it runs in a container.
`SlurmCluster.start` raises `SlurmUnavailable` with the reason when it cannot
run here (not root, packages missing, a daemon that will not come up).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

DAEMONS = ("munged", "mungekey", "slurmctld", "slurmd", "sbatch", "scontrol", "squeue", "scancel", "sinfo")


class SlurmUnavailable(RuntimeError):
    """Slurm cannot run on this machine; the message says why."""


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class SlurmCluster:
    """One node, one partition, requeue allowed; `env` is what a client command needs."""

    def __init__(self, base: Path) -> None:
        self.base = Path(base)
        self.node = socket.gethostname()
        self.conf = self.base / "slurm.conf"
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}
        self._pids: dict[str, Path] = {}

    def start(self, timeout: float = 60) -> SlurmCluster:
        if os.geteuid() != 0:
            raise SlurmUnavailable("the test cluster runs its daemons as root, and this is not root")
        missing = [d for d in DAEMONS if not (shutil.which(d) or Path("/usr/sbin", d).exists())]
        if missing:
            raise SlurmUnavailable(f"not installed: {', '.join(missing)} (apt-get install slurmctld slurmd slurm-client munge)")
        for sub in ("munge", "state", "spool", "log"):
            (self.base / sub).mkdir(parents=True, exist_ok=True)
            os.chmod(self.base / sub, 0o700)
        self._start_munge()
        self.conf.write_text(self._slurm_conf())
        self._daemon("slurmctld", ["slurmctld", "-f", str(self.conf)])
        self._daemon("slurmd", ["slurmd", "-f", str(self.conf), "-N", self.node])
        self._wait_idle(timeout)
        return self

    def _start_munge(self) -> None:
        key = self.base / "munge" / "munge.key"
        subprocess.run(["mungekey", "--create", "--keyfile", str(key), "--force"], check=True, capture_output=True)
        os.chmod(key, 0o600)
        m = self.base / "munge"
        self._daemon("munged", ["munged", "--force", f"--socket={m / 'munge.socket'}", f"--key-file={key}",
                                f"--pid-file={m / 'munged.pid'}", f"--log-file={m / 'munged.log'}",
                                f"--seed-file={m / 'munged.seed'}"], pid_file=m / "munged.pid")

    def _slurm_conf(self) -> str:
        b = self.base
        cpus = max(2, os.cpu_count() or 2)
        return "\n".join([
            "ClusterName=logbooktest",
            f"SlurmctldHost={self.node}(127.0.0.1)",
            "SlurmUser=root", "SlurmdUser=root",
            f"SlurmctldPort={_free_port()}", f"SlurmdPort={_free_port()}",
            "AuthType=auth/munge", "CredType=cred/munge", f"AuthInfo=socket={b / 'munge' / 'munge.socket'},cred_expire=10",
            f"StateSaveLocation={b / 'state'}", f"SlurmdSpoolDir={b / 'spool'}",
            f"SlurmctldPidFile={b / 'slurmctld.pid'}", f"SlurmdPidFile={b / 'slurmd.pid'}",
            f"SlurmctldLogFile={b / 'log' / 'slurmctld.log'}", f"SlurmdLogFile={b / 'log' / 'slurmd.log'}",
            "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none", "JobCompType=jobcomp/none",
            "SchedulerType=sched/builtin", "SchedulerParameters=sched_interval=1", "SelectType=select/cons_tres", "SelectTypeParameters=CR_CPU",
            # A requeued job waits until its old credential expires (120 s by default): 10 s here.
            "MpiDefault=none", "ReturnToService=2", "JobRequeue=1", "MinJobAge=600",
            # Seconds between the SIGTERM of a cancel, requeue or time limit and the SIGKILL: time to save.
            "KillWait=30", "InactiveLimit=0", "SlurmctldTimeout=30", "SlurmdTimeout=30",
            f"NodeName={self.node} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN",
            "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
            "",
        ])

    def _daemon(self, name: str, argv: list[str], pid_file: Path | None = None) -> None:
        pid_file = pid_file or self.base / f"{name}.pid"
        log = open(self.base / "log" / f"{name}.out", "ab")
        try:
            proc = subprocess.run(argv, env=self.env, stdout=log, stderr=log, timeout=60)
        finally:
            log.close()
        if proc.returncode != 0:
            raise SlurmUnavailable(f"{name} did not start (exit {proc.returncode}): {self._tail(name)}")
        self._pids[name] = pid_file
        deadline = time.monotonic() + 20
        while not pid_file.exists():
            if time.monotonic() > deadline:
                raise SlurmUnavailable(f"{name} wrote no pid file: {self._tail(name)}")
            time.sleep(0.1)

    def _tail(self, name: str) -> str:
        texts = []
        for p in (self.base / "log" / f"{name}.out", self.base / "log" / f"{name}.log", self.base / "munge" / "munged.log"):
            if p.exists() and (name in p.name):
                texts.append(p.read_text(errors="replace")[-800:])
        return " | ".join(texts) or "no log"

    def _wait_idle(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        out = ""
        while time.monotonic() < deadline:
            out = self.run("sinfo", "-h", "-N", "-o", "%T", check=False).stdout.strip()
            if out.startswith("idle"):
                return
            time.sleep(0.5)
        raise SlurmUnavailable(f"the node never became idle (sinfo: {out!r}): {self._tail('slurmd')}")

    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
        """A client command (sbatch, squeue, scontrol, scancel...) against this cluster."""
        return subprocess.run(list(argv), env=self.env, capture_output=True, text=True, timeout=60, check=check)

    def job(self, job_id: int) -> dict[str, str]:
        """`scontrol show job` as a dict of its Key=Value fields."""
        out = self.run("scontrol", "show", "job", str(job_id), "-o", check=False).stdout
        fields: dict[str, str] = {}
        for token in out.split():
            if "=" in token:
                k, v = token.split("=", 1)
                fields[k] = v
        return fields

    def wait_state(self, job_id: int, states: tuple[str, ...], timeout: float = 300, poll: float = 0.5) -> dict[str, str]:
        """Poll until the job is in one of `states`; the job's fields (AssertionError after `timeout`)."""
        deadline = time.monotonic() + timeout
        job: dict[str, str] = {}
        while time.monotonic() < deadline:
            job = self.job(job_id)
            if job.get("JobState") in states:
                return job
            time.sleep(poll)
        raise AssertionError(f"job {job_id} never reached {states}: {job}")

    def stop(self) -> None:
        """Stop every daemon this cluster started, by its own pid (the job's processes go with slurmd)."""
        for name in ("slurmd", "slurmctld", "munged"):
            pid_file = self._pids.get(name)
            if pid_file is None:
                continue
            try:
                pid = int(pid_file.read_text().split()[0])
            except (OSError, ValueError, IndexError):
                continue
            _stop_pid(pid)


def _stop_pid(pid: int, grace: float = 10) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def cluster_or_skip(base: Path):
    """A started cluster for a test module's fixture (yield it, then stop it), or pytest's skip saying why not."""
    import pytest

    cluster = SlurmCluster(base)
    try:
        cluster.start()
    except SlurmUnavailable as e:
        cluster.stop()
        pytest.skip(f"no Slurm cluster here: {e}")
    return cluster
