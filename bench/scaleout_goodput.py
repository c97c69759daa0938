"""Goodput across a node loss and across a Slurm preemption, with the time from the fault to the first resumed step.

Three real runs of one small config, side by side in one invocation so a busy
machine slows them alike:

- two nodes (two `logbook run --nnodes 2` launchers on 127.0.0.1), no fault;
- the same, with node 1's launcher, torchrun and worker SIGKILLed after the
  checkpoint of step 8 and started again `--rejoin-after` seconds later;
- one node under a real one-host Slurm cluster (tests/slurm_cluster.py),
  preempted with `scontrol requeue` after the first checkpoint and resumed by
  the requeued job (skipped, and said so, where Slurm cannot run).

For each: goodput (`logbook.runs.goodput`, from the run's own events and metrics)
and, for the faults, the seconds from the fault to the first resumed step
(the metrics row of the next attempt's first step). Every figure is printed
as a RESULT line; none has a goal: they describe what a node loss and a
requeue cost on this machine (the Slurm figure includes the requeued job's
wait for its old credential to expire, 10 s on the test cluster).

    python3 bench/scaleout_goodput.py [--steps 40] [--rejoin-after 2]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from bench._result import result  # noqa: E402
from lab import Lab, run_config  # noqa: E402
from nodes import free_port, kill_node, node_command, start_node, start_nodes  # noqa: E402
from slurm_cluster import SlurmCluster, SlurmUnavailable  # noqa: E402

from logbook.eventlog.sink import read_metrics  # noqa: E402
from logbook.runs.goodput import goodput_report  # noqa: E402

NODE_ARGS = ["--join-timeout", "120", "--startup-timeout", "120", "--max-restarts", "2"]


def _config(lab: Lab, steps: int) -> Path:
    cfg = run_config(steps=steps, every=4)
    cfg["checkpoint"]["background"] = False
    return lab.write_config("bench.yaml", cfg)


def _goodput(lab: Lab, run: str) -> float:
    rep = goodput_report(lab.events(run), read_metrics(lab.run_dir(run)))
    return round(rep.goodput or 0.0, 4)


def _first_resumed_step(lab: Lab, run: str, after: float) -> float:
    """Seconds from `after` to the first training step of a later attempt."""
    first = min(r["time"] for r in read_metrics(lab.run_dir(run)) if r.get("attempt", 1) > 1 and "loss" in r)
    return round(first - after, 3)


def _saved(lab: Lab, run: str, step: int) -> bool:
    return lab.events_path(run).exists() and any(
        e["kind"] == "checkpoint_saved" and e["step"] >= step for e in lab.events(run))


def two_nodes(base: Path, steps: int, rejoin_after: float | None) -> tuple[float, float | None]:
    """(goodput, fault -> first resumed step) of a two-node run, with a node lost when `rejoin_after` is set."""
    lab = Lab.create(base)
    cfg = _config(lab, steps)
    endpoint = f"127.0.0.1:{free_port()}"
    n0, n1 = start_nodes(lab, node_command(0, 2, endpoint, "two", cfg, *NODE_ARGS),
                         node_command(1, 2, endpoint, "two", cfg, *NODE_ARGS), endpoint, base)
    killed = None
    if rejoin_after is not None:
        while not _saved(lab, "two", 8):
            if n0.poll() is not None:
                raise RuntimeError(f"node 0 ended early: {(base / 'node0.log').read_text()[-2000:]}")
            time.sleep(0.05)
        kill_node(n1)
        killed = time.time()
        time.sleep(rejoin_after)
        n1 = start_node(lab, node_command(1, 2, endpoint, "two", cfg, *NODE_ARGS), base / "node1-again.log")
    codes = (n0.wait(900), n1.wait(900))
    if codes != (0, 0):
        raise RuntimeError(f"two-node run ended {codes}: {(base / 'node0.log').read_text()[-2000:]}")
    return _goodput(lab, "two"), (None if killed is None else _first_resumed_step(lab, "two", killed))


def slurm_preemption(base: Path, steps: int) -> tuple[float, float]:
    """(goodput, requeue -> first resumed step) of a one-node run preempted with `scontrol requeue`."""
    cluster = SlurmCluster(base / "slurm")
    try:
        cluster.start()
        lab = Lab.create(base / "lab")
        _config(lab, steps)
        script = lab.logbook("slurm-script", "configs/bench.yaml", "--exploratory", "--run-id", "job", "--time", "30",
                             "--output", str(base / "job.out"), "--logbook-cmd", f"{sys.executable} -m logbook").stdout
        (base / "job.sbatch").write_text(script)
        job = int(cluster.run("sbatch", "--parsable", str(base / "job.sbatch")).stdout.strip().split(";")[0])
        deadline = time.monotonic() + 600
        while not _saved(lab, "job", 8):
            state = cluster.job(job).get("JobState")
            if state in ("COMPLETED", "FAILED", "CANCELLED") or time.monotonic() > deadline:
                # Said at once, with the job's own output: a job that failed at its start has nothing to wait for.
                out = base / "job.out"
                raise RuntimeError(f"job {state} before its first checkpoint: "
                                   f"{out.read_text()[-2000:] if out.exists() else '(no output)'}")
            time.sleep(0.2)
        cluster.run("scontrol", "requeue", str(job))
        preempted = time.time()
        fields = cluster.wait_state(job, ("COMPLETED", "FAILED", "CANCELLED"), timeout=900)
        if fields["JobState"] != "COMPLETED":
            raise RuntimeError(f"job ended {fields['JobState']}: {(base / 'job.out').read_text()[-2000:]}")
        return _goodput(lab, "job"), _first_resumed_step(lab, "job", preempted)
    finally:
        cluster.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=40, help="training steps of each run")
    ap.add_argument("--rejoin-after", type=float, default=2.0, help="seconds before the lost node is started again")
    ap.add_argument("--quick", action="store_true", help="fewer steps")
    args = ap.parse_args()
    steps = 24 if args.quick else args.steps
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        clean, _ = two_nodes(base / "clean", steps, None)
        lost, lost_s = two_nodes(base / "lost", steps, args.rejoin_after)
        result("goodput, two nodes, no fault", clean, "ratio", "-", None)
        result(f"goodput, two nodes, node 1 lost and back after {args.rejoin_after:g} s", lost, "ratio", "-", None)
        result("node loss: fault to first resumed step", lost_s, "s", "-", None)
        try:
            pre, pre_s = slurm_preemption(base / "slurm", steps)
        except SlurmUnavailable as e:
            print(f"Slurm preemption skipped: {e}", file=sys.stderr)
            result("goodput, Slurm preemption (scontrol requeue)", "skipped: no Slurm", "ratio", "-", None)
            return 0
        result("goodput, Slurm preemption (scontrol requeue)", pre, "ratio", "-", None)
        result("Slurm preemption: requeue to first resumed step", pre_s, "s", "-", None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
