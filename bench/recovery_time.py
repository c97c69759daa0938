"""Seconds from a SIGKILL to the first resumed step, against a cold start, side by side in each run.

Each repeat is one real `logbook run` (library call, exploratory) of the tiny
config cut to a few steps, with a SIGKILL drill after step `--kill-step`:
torchrun restarts the trainer, which resumes from its last checkpoint. The
run's own records give both figures, so a busy machine slows both alike:

- cold start: `launch_run` called -> first step of attempt 1 done (its metrics row);
- recovery: the drill's `fault_injected` event (written just before the
  SIGKILL) -> first resumed step of attempt 2 done.

Each is split at the attempt's `run_started` event: before it, processes
starting and imports (and, for a cold start, the launcher's checks, torchrun's
own start-up; for a recovery, torchrun noticing the death); after it,
building the model and data, loading the checkpoint (recovery only) and the
first step. Printed: the medians, recovery minus cold start, and their ratio
(goal: a restart costs no more than a cold start, ratio <= 1).

With `--compile` each repeat also runs the same config with `train.compile:
true` (alternating with the eager run), so the compiled run's first attempt
compiles and fills the cache under .logbook/, and its restart loads from it.
Printed besides: the compiled recovery over the eager one (goal <= 1.5: a
restart does not pay the compile again) and the compile seconds each
attempt's `run_started` reports.

    python3 bench/recovery_time.py [--repeats 3] [--steps 8] [--kill-step 4] [--compile]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._result import result  # noqa: E402
from logbook.core.project import open_project  # noqa: E402
from logbook.launch.launcher import launch_run  # noqa: E402
from logbook.records.init import init_logbook  # noqa: E402

GOAL = 1.0
COMPILED_GOAL = 1.5


def _ts(event: dict) -> float:
    return datetime.strptime(event["ts"].replace("Z", "+0000"), "%Y-%m-%dT%H:%M:%S.%f%z").timestamp()


def scratch_repo(where: Path) -> Path:
    """A git repository with a logbook, as `logbook init` leaves it."""
    def git(*args: str) -> None:
        subprocess.run(["git", *args], cwd=where, check=True, capture_output=True)

    git("init", "-q", "-b", "main")
    git("config", "user.name", "Bench")
    git("config", "user.email", "bench@example.org")
    git("commit", "-q", "--allow-empty", "-m", "start")
    init_logbook(start=where)
    git("add", "-A")
    git("commit", "-q", "-m", "logbook")
    return where


def write_config(repo: Path, steps: int, kill_step: int, compiled: bool = False) -> Path:
    cfg = yaml.safe_load((ROOT / "configs" / "tiny-cpu.yaml").read_text())
    cfg["train"].update(steps=steps, eval_every=0, eval_batches=1, compile=compiled)
    # Synchronous saves: the checkpoint before the kill is complete when the drill fires.
    cfg["checkpoint"].update(every=max(1, kill_step - 1), background=False)
    cfg["faults"] = [{"kind": "sigkill", "step": kill_step, "attempt": 1}]
    path = repo / ("bench-compiled.yaml" if compiled else "bench.yaml")
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def one_run(repo: Path, config: Path, run_id: str) -> dict[str, float]:
    """Launch one run with a SIGKILL drill and read both timings from its records."""
    launched = time.time()
    res = launch_run(open_project(repo), config, [], exploratory=True, max_restarts=1, run_id=run_id)
    if res.status != "finished" or res.restarts != 1:
        raise SystemExit(f"run {run_id} ended {res.status} with {res.restarts} restarts: {res.reason}")
    run_dir = repo / "entries" / "runs" / run_id
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]

    def first_step(attempt: int) -> float:
        return min((r for r in rows if r.get("attempt") == attempt and "loss" in r), key=lambda r: r["step"])["time"]

    def started(attempt: int) -> float:
        return next(_ts(e) for e in events if e["kind"] == "run_started" and e["attempt"] == attempt)

    killed = next(_ts(e) for e in events if e["kind"] == "fault_injected")
    compile_s = {e["attempt"]: e["data"].get("compile_s", 0.0) for e in events if e["kind"] == "run_started"}
    return {
        "compile_1_s": compile_s.get(1, 0.0),
        "compile_2_s": compile_s.get(2, 0.0),
        "cold_s": first_step(1) - launched,
        "cold_to_started_s": started(1) - launched,
        "cold_started_to_step_s": first_step(1) - started(1),
        "recovery_s": first_step(2) - killed,
        "recovery_to_started_s": started(2) - killed,
        "recovery_started_to_step_s": first_step(2) - started(2),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3, help="runs, each with one cold start and one recovery")
    ap.add_argument("--steps", type=int, default=8, help="training steps per run")
    ap.add_argument("--kill-step", type=int, default=4, help="the drill's SIGKILL fires after this step")
    ap.add_argument("--compile", action="store_true", help="also measure runs with train.compile (alternating)")
    args = ap.parse_args()

    samples, compiled = [], []
    with tempfile.TemporaryDirectory(prefix="bench-recovery-") as tmp:
        repo = scratch_repo(Path(tmp))
        config = write_config(repo, args.steps, args.kill_step)
        config_c = write_config(repo, args.steps, args.kill_step, compiled=True)
        for i in range(args.repeats):
            samples.append(one_run(repo, config, f"recovery-{i}"))
            print(f"repeat {i + 1}: " + ", ".join(f"{k} {v:.2f}" for k, v in samples[-1].items()), file=sys.stderr)
            if args.compile:
                compiled.append(one_run(repo, config_c, f"recovery-compiled-{i}"))
                print(f"repeat {i + 1}, compiled: " + ", ".join(f"{k} {v:.2f}" for k, v in compiled[-1].items()),
                      file=sys.stderr)

    med = {k: statistics.median(s[k] for s in samples) for k in samples[0]}
    print(f"\nmedians over {args.repeats} runs (seconds)")
    print(f"  cold start   launch -> first step        {med['cold_s']:7.2f}"
          f"   (to run_started {med['cold_to_started_s']:.2f} + to first step {med['cold_started_to_step_s']:.2f})")
    print(f"  recovery     SIGKILL -> first resumed step {med['recovery_s']:5.2f}"
          f"   (to run_started {med['recovery_to_started_s']:.2f} + to first step {med['recovery_started_to_step_s']:.2f})")
    extra = med["recovery_s"] - med["cold_s"]
    ratio = med["recovery_s"] / med["cold_s"]
    print(f"  recovery minus cold start                {extra:+7.2f}")
    print(f"  recovery / cold start                    {ratio:7.2f}")
    result("recovery minus cold start", round(extra, 2), "s", "<= 0", extra <= 0)
    result("recovery / cold start", round(ratio, 3), "ratio", f"<= {GOAL}", ratio <= GOAL)
    if compiled:
        report_compiled(samples, compiled)
    return 0


def report_compiled(eager: list[dict[str, float]], compiled: list[dict[str, float]]) -> None:
    med = {k: statistics.median(s[k] for s in compiled) for k in compiled[0]}
    ratio = statistics.median(c["recovery_s"] / e["recovery_s"] for c, e in zip(compiled, eager))
    print(f"\ncompiled runs: medians over {len(compiled)} (seconds)")
    print(f"  cold start   launch -> first step          {med['cold_s']:7.2f}   (compile {med['compile_1_s']:.2f})")
    print(f"  recovery     SIGKILL -> first resumed step {med['recovery_s']:7.2f}   (compile {med['compile_2_s']:.2f},"
          f" to run_started {med['recovery_to_started_s']:.2f})")
    print(f"  compiled recovery / eager recovery       {ratio:7.2f}")
    result("compiled recovery / eager recovery", round(ratio, 3), "ratio", f"<= {COMPILED_GOAL}", ratio <= COMPILED_GOAL)
    result("compile seconds, first attempt", round(med["compile_1_s"], 2), "s", "-", None)
    result("compile seconds, restart (from the cache)", round(med["compile_2_s"], 2), "s", "-", None)


if __name__ == "__main__":
    sys.exit(main())
