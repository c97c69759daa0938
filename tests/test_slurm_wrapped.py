"""A training command of the user's own under a real one-host Slurm cluster: `logbook slurm-script ... -- CMD`.

The job is preempted (`scontrol requeue`): the batch shell passes the signal
on, `logbook run` gives the command a SIGTERM, records `preempted` with the
job id and exits 75; the requeued job resumes the run (`--resume`), the
command picks up from its own progress file, and the restart says why and
under which job.
"""

from __future__ import annotations

import sys
import time

import pytest
from lab import Lab
from slurm_cluster import cluster_or_skip

pytestmark = pytest.mark.slow

SCRIPT = '''\
import os, time
start = int(open("progress").read()) if os.path.exists("progress") else 0
print(f"logbook: resumed from step {start}", flush=True)
open("starts", "a").write(f"{start}\\n")
for step in range(start + 1, 41):
    print(f"step {step} loss {1.0 / step:.4f}", flush=True)
    open("progress.tmp", "w").write(str(step))
    os.replace("progress.tmp", "progress")
    time.sleep(0.2)
'''
REGEX = r"step (?P<step>\d+) loss (?P<loss>[\d.]+)"


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    cluster = cluster_or_skip(tmp_path_factory.mktemp("slurm-wrapped"))
    yield cluster
    cluster.stop()


def test_a_wrapped_command_preempted_by_slurm_is_requeued_and_resumed(tmp_path, slurm):
    lab = Lab.create(tmp_path)
    (lab.root / "train.py").write_text(SCRIPT)
    out = lab.root.parent / "job.out"
    res = lab.logbook("slurm-script", "--exploratory", "--run-id", "own", "--time", "10", "--output", str(out),
                      "--logbook-cmd", f"{sys.executable} -m logbook", "--steps", "40", "--metrics-regex", REGEX,
                      "--", sys.executable, "train.py")
    assert res.returncode == 0, res.stderr
    script = lab.root.parent / "own.sbatch"
    script.write_text(res.stdout)
    sub = slurm.run("sbatch", "--parsable", str(script), check=False)
    assert sub.returncode == 0, sub.stderr
    job = int(sub.stdout.strip().split(";")[0])
    deadline = time.monotonic() + 300
    while not (lab.root / "progress").exists() or int((lab.root / "progress").read_text() or 0) < 8:
        assert time.monotonic() < deadline, f"no progress: {slurm.job(job)} {out.read_text() if out.exists() else ''}"
        time.sleep(0.1)
    slurm.run("scontrol", "requeue", str(job))
    fields = slurm.wait_state(job, ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"), timeout=400)
    log = out.read_text() if out.exists() else ""
    assert (fields["JobState"], fields["Restarts"]) == ("COMPLETED", "1"), log[-3000:]
    evs = lab.events("own")
    (preempted,) = [e for e in evs if e["kind"] == "preempted"]
    assert preempted["attempt"] == 1 and preempted["data"]["slurm"]["job_id"] == job
    assert "saved_step" not in preempted["data"]  # whether the command saved is not known from outside
    (restart,) = [e for e in evs if e["kind"] == "restart"]
    d = restart["data"]
    assert (restart["attempt"], d["cause"]) == (2, "preempted")
    assert (d["slurm"]["job_id"], d["slurm"]["restart_count"]) == (job, 1)
    starts = [int(x) for x in (lab.root / "starts").read_text().split()]  # where the script really resumed
    assert d["resumed_from_step"] == starts[1] >= 8 and evs[-1]["kind"] == "run_finished" and evs[-1]["step"] == 40
    res = lab.logbook("render")
    assert res.returncode == 0, res.stderr
    chronicle = "\n".join(p.read_text() for p in sorted((lab.root / "entries").glob("20*/*/*.md")))
    assert f"Preempted by Slurm (job {job}, requeued 0 time(s) before): received SIGUSR1" in chronicle \
        or f"Preempted by Slurm (job {job}, requeued 0 time(s) before): received SIGTERM" in chronicle
    assert f"Under Slurm: job {job}, requeue count 1" in chronicle
