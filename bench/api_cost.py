"""Cost of logging one step through `logbook.api`, beside the bundled trainer's own path and `wandb.log` offline.

Three ways to record a training step's scalars, timed in interleaved blocks in
one process (a busy machine slows all three alike):

- api: `Run.log_metrics(step, {...})`, what any training loop calls;
- trainer: `Run.metrics.write({...})`, the row the bundled trainer writes itself
  (trainer/loop.py), through the same `Run` the API opens;
- wandb: `wandb.log({...}, step=step)` in an offline run (skipped, and said so,
  without the wandb package).

Every 100th step also emits an event (a `note`) through the hash-chained log
in the first two, as a loop does at its milestones. Reports calls per second
per block (median, min, max) and the ratio api / trainer of the best blocks,
the least disturbed by the rest of a shared machine (goal >= 0.95: the API
costs no more per step than the bundled trainer's path, within noise).

    python3 bench/api_cost.py [--steps 200] [--blocks 41]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._result import result  # noqa: E402

clock = time.perf_counter


def _repo(base: Path) -> Path:
    repo = base / "repo"
    repo.mkdir()
    env = {**os.environ, "GIT_AUTHOR_NAME": "Bench", "GIT_AUTHOR_EMAIL": "b@example.org",
           "GIT_COMMITTER_NAME": "Bench", "GIT_COMMITTER_EMAIL": "b@example.org"}
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=repo, check=True)
    subprocess.run(["git", "-c", "user.name=Bench", "-c", "user.email=b@example.org", "commit", "-q",
                    "--allow-empty", "-m", "init"], cwd=repo, check=True, env=env)
    subprocess.run([sys.executable, "-m", "logbook", "init"], cwd=repo, check=True, capture_output=True,
                   env={**env, "PYTHONPATH": str(ROOT)})
    return repo


def _row(step: int) -> dict[str, float]:
    return {"loss": 3.0 - step * 1e-4, "lr": 3e-4, "grad_norm": 0.9, "tokens_per_s": 18000.0, "mfu": 0.41}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=200, help="steps per block (short: a block is seldom disturbed)")
    ap.add_argument("--blocks", type=int, default=41, help="blocks per way")
    args = ap.parse_args()
    import logbook.api as api

    with tempfile.TemporaryDirectory(prefix="logbook-api-cost-") as tmp:
        repo = _repo(Path(tmp))
        runs = {name: api.open_run(repo, f"cost-{name}", total_steps=args.steps * args.blocks)
                for name in ("api", "trainer")}
        step = {"api": 0, "trainer": 0, "wandb": 0}

        def via_api(n: int) -> None:
            run = runs["api"]
            for _ in range(n):
                step["api"] += 1
                run.log_metrics(step["api"], _row(step["api"]))
                if step["api"] % 100 == 0:
                    run.emit("note", step=step["api"], text="progress")

        def via_trainer(n: int) -> None:
            run = runs["trainer"]
            for _ in range(n):
                step["trainer"] += 1
                run.metrics.write({"step": step["trainer"], "attempt": run.attempt, **_row(step["trainer"])})
                if step["trainer"] % 100 == 0:
                    run.sink.emit("note", step=step["trainer"], text="progress")

        ways = {"api": via_api, "trainer": via_trainer}
        try:
            import wandb

            os.environ.setdefault("WANDB_SILENT", "true")
            wb = wandb.init(mode="offline", project="logbook-bench", dir=tmp)

            def via_wandb(n: int) -> None:
                for _ in range(n):
                    step["wandb"] += 1
                    wb.log(_row(step["wandb"]), step=step["wandb"])

            ways["wandb"] = via_wandb
        except ImportError:
            print("wandb is not installed: its column is left out (pip install 'logbook[wandb]')")
            wb = None
        rates: dict[str, list[float]] = {name: [] for name in ways}
        for name, fn in ways.items():
            fn(50)  # warm
        order = list(ways)
        for b in range(args.blocks):
            for name in order[b % len(order):] + order[:b % len(order)]:  # each way leads in turn
                fn = ways[name]
                t0 = clock()
                fn(args.steps)
                rates[name].append(args.steps / (clock() - t0))
        for run in runs.values():
            run.close()
        if wb is not None:
            wb.finish()
    med = {name: statistics.median(r) for name, r in rates.items()}
    print(f"{'way':<10} {'calls/s (median)':>17} {'min':>10} {'max':>10}   ({args.blocks} blocks of {args.steps} steps)")
    for name, r in rates.items():
        print(f"{name:<10} {med[name]:>17,.0f} {min(r):>10,.0f} {max(r):>10,.0f}")
    # The best block of each way is the least disturbed by the rest of a shared machine: the figure compares those.
    best = {name: max(r) for name, r in rates.items()}
    ratio = best["api"] / best["trainer"]
    print(f"api / trainer: {ratio:.3f} best blocks, {med['api'] / med['trainer']:.3f} medians"
          + (f"; api / wandb offline: {best['api'] / best['wandb']:.2f}" if "wandb" in best else ""))
    result("API calls per second over the bundled trainer's path", round(ratio, 3), "ratio", ">= 0.95 (equal within noise)",
           ratio >= 0.95)
    if "wandb" in med:
        result("API calls per second over wandb.log offline", round(best["api"] / best["wandb"], 2), "ratio", "none", None)


if __name__ == "__main__":
    main()
