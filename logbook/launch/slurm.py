"""A Slurm batch script for a run: resumed on requeue, saved on Slurm's signals, requeued by itself.

Slurm requeues on its own only a job it preempts (`scontrol requeue`, a
preempting job). A job whose time limit nears gets a warning signal
(`--signal=B:USR1@SECONDS`, sent to the batch shell only), and a job whose
steps end by themselves just ends, even with `--requeue`. So the script
written here:

1. starts `logbook run` on every node with `srun` (a new run, or `--resume`
   when Slurm has requeued the job: `SLURM_RESTART_COUNT > 0`);
2. traps USR1 and TERM in the batch shell and passes them on to the step, so
   the run saves a checkpoint, writes `preempted` and exits 75;
3. on exit code 75 requeues its own job (`scontrol requeue`), which runs the
   script again from step 1 with the same job id; unless the job is no longer
   RUNNING: a cancelled job (`scancel`) stays cancelled, and a job Slurm
   requeued itself (`scontrol requeue`, preemption) is requeued once.

A run that fails (exit 5) is not requeued: torchrun's restarts have already
been spent on it, and a loop of requeues would hide the failure.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from logbook.core.errors import EXIT_PREEMPTED, UsageError

_TIME_RE = re.compile(r"^(\d+-)?\d+(:\d{1,2}){0,2}$")


@dataclass
class SbatchSpec:
    """What goes into one run's batch script."""

    run_id: str
    """The run's id: the same on every requeue, so the requeued job resumes it."""
    config: str
    """The training config, relative to the project."""
    project: Path
    """The logbook's repository on the cluster's shared filesystem."""
    overrides: list[str] = field(default_factory=list)
    """key=value overrides of a new run."""
    prereg: str | None = None
    """The preregistration the run answers to; None for an exploratory run."""
    nodes: int = 1
    """Nodes of the job; one `logbook run` per node."""
    nproc: int = 1
    """Worker processes per node (GPUs per node)."""
    gpus_per_node: int = 0
    """`--gpus-per-node`; 0 leaves it out."""
    time: str = "24:00:00"
    """The job's time limit, in Slurm's syntax."""
    warn_s: int = 120
    """Seconds before the time limit Slurm sends SIGUSR1 to the batch shell."""
    max_restarts: int = 3
    """torchrun restarts within one job."""
    rdzv_port: int = 29500
    """The rendezvous port on the job's first node (several nodes only)."""
    join_timeout_s: float = 600.0
    """How long the rendezvous waits for a lost node to come back."""
    job_name: str | None = None
    """The job's name (default: the run id)."""
    output: str | None = None
    """The job's output file (Slurm's `--output`); appended to across requeues."""
    logbook_cmd: str = "logbook"
    """How to call the logbook CLI on the nodes."""
    command: list[str] | None = None
    """A training command of the user's own (`logbook run -- CMD`) instead of the bundled trainer; `config` and
    `overrides` are then unused."""
    command_options: list[str] = field(default_factory=list)
    """`logbook run`'s options for that command (--steps, --metrics-regex, --hang-timeout, --resume-arg)."""

    def validate(self) -> None:
        if self.nodes < 1 or self.nproc < 1 or self.gpus_per_node < 0 or self.max_restarts < 0:
            raise UsageError("--nodes and --nproc must be at least 1, --gpus-per-node and --max-restarts at least 0")
        if not _TIME_RE.match(self.time):
            raise UsageError(f"bad --time {self.time!r}", hint="Slurm's syntax: MINUTES, HH:MM:SS or DAYS-HH:MM:SS")
        if self.warn_s < 1:
            raise UsageError(f"--warn must be at least 1 second, got {self.warn_s}")
        if self.warn_s >= _seconds(self.time):
            raise UsageError(f"--warn {self.warn_s} s is not before the end of a {self.time} time limit",
                             hint="the warning must come while the job still runs: a few minutes before its end")
        if not 1 <= self.rdzv_port <= 65535:
            raise UsageError(f"--rdzv-port must be a TCP port (1-65535), got {self.rdzv_port}")
        if self.command is not None and (self.nodes != 1 or self.nproc != 1):
            raise UsageError("a command after `--` runs as one process on one node (--nodes 1 --nproc 1)",
                             hint="a command that starts its own workers (torchrun ...) goes after `--` whole")
        if not self.logbook_cmd.strip():
            raise UsageError("--logbook-cmd is empty", hint="the command the nodes run, e.g. `logbook` or `python3 -m logbook`")
        from logbook.launch.launcher import check_join_timeout

        check_join_timeout(self.join_timeout_s)


def _seconds(limit: str) -> int:
    """A Slurm time limit (MINUTES, MINUTES:SECONDS, HOURS:MINUTES:SECONDS, DAYS-HOURS[:MINUTES[:SECONDS]]) in seconds."""
    days, _, rest = limit.rpartition("-")
    parts = [int(x) for x in rest.split(":")]
    if days:
        h, m, sec = (parts + [0, 0])[:3]
        return int(days) * 86400 + h * 3600 + m * 60 + sec
    if len(parts) == 1:
        return parts[0] * 60
    if len(parts) == 2:
        return parts[0] * 60 + parts[1]
    return parts[0] * 3600 + parts[1] * 60 + parts[2]


def sbatch_script(spec: SbatchSpec) -> str:
    """The batch script's text; `sbatch` it from anywhere."""
    spec.validate()
    q = shlex.quote
    new_args = [*spec.command_options] if spec.command is not None else [spec.config, *spec.overrides]
    new_args += ["--prereg", spec.prereg] if spec.prereg else ["--exploratory"]
    after = ["--", *spec.command] if spec.command is not None else []  # the command ends the command line
    if spec.command is not None:  # `logbook run`'s own options before the arguments, which end with the command
        launch = f"exec {spec.logbook_cmd} run --max-restarts {spec.max_restarts} \"$@\""
    else:
        launch = f"exec {spec.logbook_cmd} run \"$@\" --nproc {spec.nproc} --max-restarts {spec.max_restarts}"
    if spec.nodes > 1:
        launch += (f" --nnodes \"$SLURM_NNODES\" --node-rank \"$SLURM_NODEID\" --rdzv-endpoint \"$0:{spec.rdzv_port}\""
                   f" --join-timeout {int(spec.join_timeout_s)}")
    head = [
        "#!/bin/bash",
        f"#SBATCH --job-name={spec.job_name or spec.run_id}",
        f"#SBATCH --nodes={spec.nodes}",
        "#SBATCH --ntasks-per-node=1",
        *([f"#SBATCH --gpus-per-node={spec.gpus_per_node}"] if spec.gpus_per_node else []),
        f"#SBATCH --time={spec.time}",
        "#SBATCH --requeue",
        f"#SBATCH --signal=B:USR1@{spec.warn_s}",
        "#SBATCH --open-mode=append",
        *([f"#SBATCH --output={spec.output}"] if spec.output else []),
    ]
    body = f"""
# Written by `logbook slurm-script`. Requeued (SLURM_RESTART_COUNT > 0), the job resumes the run.
cd {q(str(spec.project))} || exit 1
run={q(spec.run_id)}
head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)
if [ "${{SLURM_RESTART_COUNT:-0}}" -gt 0 ]; then
  args=(--resume "$run")
else
  args=({" ".join(q(a) for a in new_args)} --run-id "$run"{"".join(" " + q(a) for a in after)})
fi

srun --kill-on-bad-exit=0 bash -c {q(launch)} "$head" "${{args[@]}}" &
step=$!
# Slurm's warnings reach this shell only (B:USR1) or this shell too (TERM): pass them on to the run.
trap 'kill -USR1 "$step" 2>/dev/null' USR1 TERM
while :; do
  wait "$step"; rc=$?
  # Above 128 with the step alive: `wait` was cut short by a trapped signal, not the step's end.
  if [ "$rc" -le 128 ] || ! kill -0 "$step" 2>/dev/null; then break; fi
done
if [ "$rc" -gt 128 ]; then wait "$step"; again=$?; [ "$again" -ne 127 ] && rc=$again; fi

state=$(scontrol show job "$SLURM_JOB_ID" -o | grep -o 'JobState=[A-Z_]*' | cut -d= -f2)
if [ "$rc" -eq {EXIT_PREEMPTED} ] && [ "$state" = RUNNING ]; then
  # Saved and stopped: Slurm does not requeue a job that ends by itself, so ask for it.
  echo "logbook: run $run saved and stopped (exit {EXIT_PREEMPTED}); requeueing job $SLURM_JOB_ID"
  scontrol requeue "$SLURM_JOB_ID"
elif [ "$rc" -eq {EXIT_PREEMPTED} ]; then
  # Cancelled (scancel), or already requeued by Slurm (scontrol requeue, preemption): leave it so.
  echo "logbook: run $run saved and stopped (exit {EXIT_PREEMPTED}); job $SLURM_JOB_ID is $state, not requeueing it"
fi
exit "$rc"
"""
    return "\n".join(head) + "\n" + body


# --- what Slurm says about the job a process runs in ------------------------------------
# A run's `run_started`, `preempted` and `restart` carry it as `slurm: {...}` (a requeued job keeps its id and
# bumps SLURM_RESTART_COUNT); the bundled trainer reads it through logbook.api, a wrapped command's launcher here.

_KEYS = {
    "SLURM_JOB_ID": "job_id",
    "SLURM_JOB_NAME": "job_name",
    "SLURM_STEP_ID": "step_id",
    "SLURM_JOB_NODELIST": "nodelist",
    "SLURM_JOB_NUM_NODES": "num_nodes",
    "SLURM_NODEID": "node_id",
    "SLURM_PROCID": "proc_id",
    "SLURM_JOB_PARTITION": "partition",
    "SLURM_JOB_ACCOUNT": "account",
    "SLURM_ARRAY_JOB_ID": "array_job_id",
    "SLURM_ARRAY_TASK_ID": "array_task_id",
    "SLURM_ARRAY_TASK_COUNT": "array_task_count",
    "SLURM_RESTART_COUNT": "restart_count",
    "SLURM_CLUSTER_NAME": "cluster",
    "SLURMD_NODENAME": "node",
}
_INTS = {"job_id", "step_id", "num_nodes", "node_id", "proc_id", "array_job_id", "array_task_id",
         "array_task_count", "restart_count"}


def slurm_info(env: Mapping[str, str]) -> dict[str, str | int] | None:
    """The Slurm facts of this process's job, or None outside Slurm."""
    if "SLURM_JOB_ID" not in env:
        return None
    out: dict[str, str | int] = {}
    for var, key in _KEYS.items():
        value = env.get(var)
        if value is None or value == "":
            continue
        out[key] = int(value) if key in _INTS and value.isdigit() else value
    return out
