"""A real one-host Slurm cluster: the batch script from `logbook slurm-script` under requeue, USR1, TERM and KILL.

Each test submits the script with `sbatch`, waits for the run's first
checkpoint, does to the job what a cluster does (preempt it with `scontrol
requeue`, warn of its time limit with USR1, cancel it with TERM, kill it), and
checks that the run saved, exited 75, was requeued, resumed bit for bit and
that the event log and the chronicle say so with the job id and requeue count.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest
import torch
from lab import Lab, run_config
from slurm_cluster import SlurmCluster, cluster_or_skip

pytestmark = pytest.mark.slow

STEPS, EVERY = 40, 4
# Each step sleeps 0.2 s (the straggler drill, which changes no number): the signal lands mid-run.
SLOW = ["straggler.drill_rank=0", "straggler.drill_sleep_s=0.2"]


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    cluster = cluster_or_skip(tmp_path_factory.mktemp("slurm"))
    yield cluster
    cluster.stop()


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """Losses and final weights of the config trained without interruption, outside Slurm."""
    lab = Lab.create(tmp_path_factory.mktemp("ref"))
    cfg = _config(lab)
    res = lab.logbook("run", str(cfg), "--exploratory", "--run-id", "ref", *SLOW, timeout=600)
    assert res.returncode == 0, res.stderr
    return lab.losses("ref"), lab.final_weights("ref", STEPS)


def _config(lab: Lab) -> Path:
    cfg = run_config(steps=STEPS, every=EVERY)
    cfg["checkpoint"]["background"] = False
    return lab.write_config("job.yaml", cfg)


def _submit(lab: Lab, slurm: SlurmCluster, *script_args: str, slow: list[str] = SLOW,
            time_limit: str = "10") -> tuple[int, Path]:
    _config(lab)
    out = lab.root.parent / "job.out"
    res = lab.logbook("slurm-script", "configs/job.yaml", *slow, "--exploratory", "--run-id", "job", "--time", time_limit,
                      "--output", str(out), "--logbook-cmd", f"{sys.executable} -m logbook", *script_args)
    assert res.returncode == 0, res.stderr
    script = lab.root.parent / "job.sbatch"
    script.write_text(res.stdout)
    sub = slurm.run("sbatch", "--parsable", str(script), check=False)
    assert sub.returncode == 0, sub.stderr
    job = int(sub.stdout.strip().split(";")[0])
    deadline = time.monotonic() + 300
    while not (lab.events_path("job").exists() and any(e["kind"] == "checkpoint_saved" for e in lab.events("job"))):
        assert time.monotonic() < deadline, f"no checkpoint: {slurm.job(job)} {out.read_text() if out.exists() else ''}"
        time.sleep(0.1)
    return job, out


def _finished(lab: Lab, slurm: SlurmCluster, job: int, out: Path, restarts: int = 1) -> list[dict]:
    fields = slurm.wait_state(job, ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"), timeout=400)
    log = out.read_text() if out.exists() else ""
    assert (fields["JobState"], fields["Restarts"]) == ("COMPLETED", str(restarts)), log[-3000:]
    return lab.events("job")


def _render(lab: Lab) -> str:
    res = lab.logbook("render")
    assert res.returncode == 0, res.stderr
    return "\n".join(p.read_text() for p in sorted((lab.root / "entries").glob("20*/*/*.md")))


def _assert_preempted_requeued_and_exact(lab: Lab, evs: list[dict], job: int, reference, signals: set[str]) -> None:
    (preempted,) = [e for e in evs if e["kind"] == "preempted"]
    assert preempted["attempt"] == 1 and preempted["data"]["signal"] in signals
    assert preempted["data"]["slurm"]["job_id"] == job and "restart_count" not in preempted["data"]["slurm"]
    (restart,) = [e for e in evs if e["kind"] == "restart"]
    d = restart["data"]
    assert (restart["attempt"], d["cause"], d["steps_lost"]) == (2, "preempted", 0)
    assert d["resumed_from_step"] == preempted["data"]["saved_step"] > 0
    assert (d["slurm"]["job_id"], d["slurm"]["restart_count"]) == (job, 1)
    assert len([e for e in evs if e["kind"] == "run_finished"]) == 1 and not [e for e in evs if e["kind"] == "run_failed"]
    ref_losses, ref_weights = reference
    assert lab.losses("job") == ref_losses
    w = lab.final_weights("job", STEPS)
    assert w.keys() == ref_weights.keys() and all(torch.equal(w[k], ref_weights[k]) for k in w)
    chronicle = _render(lab)
    assert f"Preempted by Slurm (job {job}, requeued 0 time(s) before)" in chronicle
    assert f"Under Slurm: job {job}, requeue count 1" in chronicle


def test_scontrol_requeue_saves_exits_75_and_the_requeued_job_resumes_exactly(tmp_path, slurm, reference):
    lab = Lab.create(tmp_path)
    job, out = _submit(lab, slurm)
    slurm.run("scontrol", "requeue", str(job))
    evs = _finished(lab, slurm, job, out)
    # SIGTERM reaches the run directly and through the batch shell's trap (as USR1): either may come first.
    _assert_preempted_requeued_and_exact(lab, evs, job, reference, {"SIGTERM", "SIGUSR1"})


def test_the_time_limit_warning_to_the_batch_shell_is_passed_on_and_the_job_requeues_itself(tmp_path, slurm, reference):
    lab = Lab.create(tmp_path)
    job, out = _submit(lab, slurm)
    # What `--signal=B:USR1@120` does two minutes before the time limit, without waiting for it.
    slurm.run("scancel", "--batch", "--signal=USR1", str(job))
    evs = _finished(lab, slurm, job, out)
    assert f"requeueing job {job}" in out.read_text()
    _assert_preempted_requeued_and_exact(lab, evs, job, reference, {"SIGUSR1"})


def test_a_job_reaching_its_time_limit_is_warned_saves_and_requeues_itself(tmp_path, slurm, reference):
    lab = Lab.create(tmp_path)
    # A two-minute limit, warned 80 s before: Slurm looks about every 30 s, so the warning comes 40
    # to 70 s in, after the first checkpoint and well before the run, slowed to 2 s a step, could
    # finish. The sleep changes no number.
    slow = ["straggler.drill_rank=0", "straggler.drill_sleep_s=2.0"]
    job, out = _submit(lab, slurm, "--warn", "80", slow=slow, time_limit="2")
    deadline = time.monotonic() + 180
    while not [e for e in lab.events("job") if e["kind"] == "preempted"]:
        # SIGNALING: Slurm is delivering the warning; the job runs on meanwhile.
        running = ("RUNNING", "SIGNALING", "COMPLETING")
        assert time.monotonic() < deadline and slurm.job(job).get("JobState") in running, out.read_text()
        time.sleep(0.2)
    # The operator gives the requeued job room to finish (it would be warned and requeued again).
    slurm.wait_state(job, ("PENDING", "REQUEUED", "RUNNING"), timeout=60)
    slurm.run("scontrol", "update", f"JobId={job}", "TimeLimit=10")
    evs = _finished(lab, slurm, job, out)
    assert f"requeueing job {job}" in out.read_text()
    _assert_preempted_requeued_and_exact(lab, evs, job, reference, {"SIGUSR1"})


def test_scancel_term_saves_and_the_job_requeues_itself(tmp_path, slurm, reference):
    lab = Lab.create(tmp_path)
    job, out = _submit(lab, slurm)
    slurm.run("scancel", "--signal=TERM", str(job))
    evs = _finished(lab, slurm, job, out)
    _assert_preempted_requeued_and_exact(lab, evs, job, reference, {"SIGTERM", "SIGUSR1"})


def _kill_the_run_outright(lab: Lab) -> None:
    """SIGKILL the job step's processes (launcher, torchrun, trainer), as the OOM killer or a crash would."""
    from nodes import descendants

    for entry in Path("/proc").iterdir():
        try:
            cmd = (entry / "cmdline").read_bytes().split(b"\0")
            cwd = (entry / "cwd").resolve()
        except OSError:
            continue
        if cwd == lab.root.resolve() and b"logbook" in cmd and b"run" in cmd and b"slurm-script" not in cmd:
            for pid in [*descendants(int(entry.name)), int(entry.name)]:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            return
    raise AssertionError("no `logbook run` process to kill")


def test_a_run_killed_outright_fails_the_job_and_after_a_requeue_its_restart_is_recorded(tmp_path, slurm, reference):
    lab = Lab.create(tmp_path)
    job, out = _submit(lab, slurm)
    _kill_the_run_outright(lab)
    fields = slurm.wait_state(job, ("FAILED", "CANCELLED", "COMPLETED"), timeout=120)
    assert (fields["JobState"], fields["Restarts"]) == ("FAILED", "0")  # a failure is not requeued by the script
    assert not [e for e in lab.events("job") if e["kind"] in ("preempted", "run_finished")]
    slurm.run("scontrol", "requeue", str(job))  # the operator's decision
    evs = _finished(lab, slurm, job, out)
    (restart,) = [e for e in evs if e["kind"] == "restart"]
    d = restart["data"]
    assert (restart["attempt"], d["cause"], d["resumed_from_step"] > 0) == (2, "signal", True)
    assert d["failed_at_step"] >= d["resumed_from_step"] and d["steps_lost"] == d["failed_at_step"] - d["resumed_from_step"]
    assert (d["slurm"]["job_id"], d["slurm"]["restart_count"]) == (job, 1)
    ref_losses, _ = reference
    assert lab.losses("job") == ref_losses
    chronicle = _render(lab)
    assert "Attempt 1 was killed by" in chronicle and f"Under Slurm: job {job}, requeue count 1" in chronicle


def test_a_cancelled_job_saves_and_stays_cancelled(tmp_path, slurm):
    lab = Lab.create(tmp_path)
    job, out = _submit(lab, slurm)
    slurm.run("scancel", str(job))
    fields = slurm.wait_state(job, ("CANCELLED", "COMPLETED", "FAILED"), timeout=120)
    time.sleep(3)  # had the script requeued it, the job would now be pending again
    assert (slurm.job(job)["JobState"], fields["Restarts"]) == ("CANCELLED", "0")
    (preempted,) = [e for e in lab.events("job") if e["kind"] == "preempted"]
    assert preempted["data"]["slurm"]["job_id"] == job
    assert "not requeueing it" in out.read_text()
