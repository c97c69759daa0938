"""Slurm: what the scheduler says about this job, recorded with every attempt.

Under Slurm the job id, step, node list and array index are part of a run's
story (a requeued job keeps its id and bumps SLURM_RESTART_COUNT). They go
into `run_started`, and into `preempted` and `restart` (with the requeue
count), as `slurm: {...}`. Getting Slurm's signals to the trainer and the job
requeued after it saved is the batch script's part: see `logbook/launch/slurm.py`
(`logbook slurm-script`) and docs/slurm.md.
"""

from __future__ import annotations

from collections.abc import Mapping

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
