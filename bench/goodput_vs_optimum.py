"""Goodput under real SIGKILL failures at a fixed rate, against the Young/Daly optimum for the same save cost.

1. Calibration: a short real run of the trainer (the same config, synchronous
   saves) gives the save cost d (median blocking seconds of its
   `checkpoint_saved` events) and the time per step.
2. Advice: `advise_from_run(calibration events, mtbf_s=M)` gives Young's
   interval tau*; `checkpoint.every` is tau* in steps.
3. The run: `python -m trainer` trains a fresh run. A driver SIGKILLs each
   attempt a time after its start drawn uniformly from [M/2, 3M/2] (seeded):
   a fixed rate 1/M whose phase against the saves varies, so the work lost
   per failure averages (tau + d)/2 as in Young's model, without the long
   exponential tail that a few-minute run could not average out. It starts
   the trainer again at once, until
   the run finishes. Every restart is a real process: imports, data, model
   and the restore from the newest complete checkpoint.
4. Goodput is measured from the run's own event log and metrics with
   `logbook.goodput.goodput_report`, and compared with the analytic optimum
   1 - overhead(tau*) = 1 - (d/tau* + (tau* + d)/2M) at the realised MTBF.

Young and Daly price saves and rework, not the cost of starting again after
a failure (process start, imports, restore), which is the same at any
interval; so the restart cost is also shown, with the ratio it leaves out.

    python3 bench/goodput_vs_optimum.py [--mtbf 60] [--train-seconds 150] [--seed 7]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._result import result  # noqa: E402
from logbook.chain import iter_records  # noqa: E402
from logbook.ckpt_advice import advise_from_run, overhead, young_interval  # noqa: E402
from logbook.goodput import goodput_report, median_step_seconds  # noqa: E402
from logbook.sink import read_metrics  # noqa: E402

GOAL = 0.90
BASE = ["train.log_every=1", "train.eval_every=0", "train.eval_batches=1", "train.threads=1",
        "checkpoint.background=false", "checkpoint.keep=2", "data.sources.0.max_mb=1"]


def _project(tmp: Path) -> Path:
    repo = tmp / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    subprocess.run(["git", "-c", "user.name=bench", "-c", "user.email=bench@localhost", "commit", "-q",
                    "--allow-empty", "-m", "init"], cwd=repo, check=True)
    subprocess.run([sys.executable, "-m", "logbook", "init"], cwd=repo, check=True, capture_output=True)
    return repo


def _trainer(repo: Path, run_id: str, overrides: list[str]) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "trainer", "--project", str(repo), "--run", run_id,
           str(ROOT / "configs" / "tiny-cpu.yaml"), *BASE, *overrides]
    env = dict(os.environ, PYTHONPATH=str(ROOT), CI="1")
    return subprocess.Popen(cmd, cwd=repo, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _logs(repo: Path, run_id: str) -> tuple[list[dict], list[dict]]:
    run_dir = repo / "entries" / "runs" / run_id
    return list(iter_records(run_dir / "events.jsonl")), read_metrics(run_dir)


def calibrate(repo: Path, mtbf_s: float, steps: int = 40, every: int = 10) -> dict:
    """A failure-free run: save cost, step time, start-up, and Young's advice for the given MTBF."""
    t0 = time.time()
    proc = _trainer(repo, "calibration", [f"train.steps={steps}", f"checkpoint.every={every}"])
    _, err = proc.communicate()
    if proc.returncode != 0:
        raise SystemExit(f"calibration run failed ({proc.returncode}):\n{err[-2000:]}")
    events, metrics = _logs(repo, "calibration")
    advice = advise_from_run(events, mtbf_s=mtbf_s)
    step_s = median_step_seconds(events, metrics)
    first_row = min(r["time"] for r in metrics if "loss" in r)
    return {"advice": advice, "step_s": step_s, "startup_s": first_row - step_s - t0}


def failure_intervals(mtbf_s: float, n: int, seed: int) -> list[float]:
    """n times between failures with mean M, each uniform in [M/2, 3M/2]."""
    rng = random.Random(seed)
    return [mtbf_s * (0.5 + rng.random()) for _ in range(n)]


def run_with_failures(repo: Path, run_id: str, overrides: list[str], intervals: list[float]) -> dict:
    """Train to the end, SIGKILLing each attempt after the next interval; returns what the driver saw."""
    kills, attempts, i = 0, 0, 0
    t_start = time.time()
    events_path = repo / "entries" / "runs" / run_id / "events.jsonl"
    while True:
        attempts += 1
        proc = _trainer(repo, run_id, overrides)
        deadline = time.monotonic() + intervals[i % len(intervals)]
        i += 1
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        if proc.poll() is None and not _finished(events_path):
            os.kill(proc.pid, signal.SIGKILL)  # a node loss: no handler runs, nothing is flushed
            kills += 1
        _, err = proc.communicate()
        if proc.returncode == 0:
            return {"kills": kills, "attempts": attempts, "driver_wall_s": time.time() - t_start}
        if proc.returncode != -signal.SIGKILL:
            raise SystemExit(f"attempt {attempts} failed by itself ({proc.returncode}):\n{err[-2000:]}")


def _finished(events_path: Path) -> bool:
    try:
        with open(events_path, "rb") as f:
            f.seek(max(0, events_path.stat().st_size - 4096))
            return b'"run_finished"' in f.read()
    except FileNotFoundError:
        return False


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mtbf", type=float, default=60.0, help="mean seconds between injected failures")
    ap.add_argument("--train-seconds", type=float, default=150.0, help="failure-free training time to aim for")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--keep", metavar="DIR", help="build the scratch project in DIR and keep it (to read its logs)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="goodput-bench-") as tmp:
        if args.keep:
            Path(args.keep).mkdir(parents=True, exist_ok=False)
        repo = _project(Path(args.keep or tmp))
        cal = calibrate(repo, args.mtbf)
        adv, step_s = cal["advice"], cal["step_s"]
        every = max(1, round(adv.young_s / step_s))
        steps = max(every * 4, round(args.train_seconds / step_s))
        print(f"calibration: save {adv.save_s:.3f} s blocking, {step_s * 1e3:.1f} ms a step, start-up {cal['startup_s']:.1f} s")
        print(f"advice at MTBF {args.mtbf:.0f} s: Young {adv.young_s:.2f} s -> checkpoint.every={every} steps; "
              f"training {steps} steps")
        intervals = failure_intervals(args.mtbf, 32, args.seed)
        seen = run_with_failures(repo, "faulty", [f"train.steps={steps}", f"checkpoint.every={every}"], intervals)
        events, metrics = _logs(repo, "faulty")
    report(events, metrics, seen, every, args.mtbf)


def report(events: list[dict], metrics: list[dict], seen: dict, every: int, mtbf_given: float) -> None:
    rep = goodput_report(events, metrics)
    failures = sum(1 for e in events if e.get("kind") == "restart" and (e.get("data") or {}).get("cause") == "signal")
    if not failures:
        raise SystemExit(f"no failure was logged ({seen['kills']} SIGKILLs sent): lower --mtbf or raise --train-seconds")
    mtbf = rep.wall_s / failures if failures else math.inf
    run_adv = advise_from_run(events, mtbf_s=mtbf if failures else mtbf_given)
    d = run_adv.save_s
    tau_star = young_interval(d, mtbf)
    tau_used = every * (rep.median_step_s or 0.0)
    optimum = 1.0 - overhead(tau_star, d, mtbf)
    restart_share = (rep.startup_s + rep.downtime_s + rep.restore_s) / rep.wall_s
    ratio = rep.goodput / optimum
    policy_ratio = (rep.goodput + restart_share) / optimum
    by_driver = rep.productive_s / seen["driver_wall_s"]
    print(f"run: {seen['attempts']} attempts, {seen['kills']} SIGKILLs ({failures} restarts logged), "
          f"wall {rep.wall_s:.1f} s, realised MTBF {mtbf:.1f} s (fixed rate: {mtbf_given:.0f} s)")
    print(f"save cost {d:.3f} s; interval used {tau_used:.2f} s ({every} steps), Young at the realised MTBF {tau_star:.2f} s")
    print("badput: " + ", ".join(f"{k.removesuffix('_s')} {v:.1%}" for k, v in rep.fractions().items() if k != "productive_s"))
    print(f"goodput measured {rep.goodput:.3f} (productive over the driver's wall clock: {by_driver:.3f}); "
          f"analytic optimum 1 - overhead(tau*) = {optimum:.3f}")
    print(f"measured / optimum = {ratio:.3f} (goal >= {GOAL}); restart cost (start-up, downtime, restore) "
          f"{restart_share:.1%} of wall, which Young/Daly leave out; without it: {policy_ratio:.3f}")
    print("note: " + "; ".join(rep.notes) if rep.notes else "", end="\n" if rep.notes else "")
    result("goodput under failures / Young-Daly optimum", round(ratio, 4), "ratio", f">= {GOAL}", ratio >= GOAL)
    result("same, restart cost added back (policy only)", round(policy_ratio, 4), "ratio", f">= {GOAL}",
           policy_ratio >= GOAL)
    result("goodput under failures (measured)", round(rep.goodput, 4), "fraction", f"optimum {optimum:.3f}", None)
    print(json.dumps({"goodput": rep.to_dict(), "mtbf_s": mtbf, "tau_star_s": tau_star, "save_s": d}, default=str),
          file=sys.stderr)


if __name__ == "__main__":
    main()
