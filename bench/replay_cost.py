"""What `logbook verify --replay 3` costs on the small CPU configs, against `logbook verify` alone.

In a scratch repository: `logbook init`, a preregistration, one short run of
the config through `logbook run` (the whole run), then `logbook verify
--replay 3` and `logbook verify` as a user types them, each a fresh process,
three times; the medians are printed. The replay exports the run's code
snapshot, starts the trainer on it and stops it after step 3: nearly all of
its cost is the trainer's start (importing torch, building the model). No
goal: the figure says what the proof costs.

    python3 bench/replay_cost.py [--quick]     # --quick: the micro config only
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._result import result  # noqa: E402

CONFIGS = [("micro-test", "configs/micro-test.yaml", "train.steps=8"),
           ("tiny-cpu", "configs/tiny-cpu.yaml", "train.steps=20")]
"""(name, config, the override that keeps the measured run short: the replay trains 3 steps whatever the length)."""


def _sh(repo: Path, *args: str) -> str:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    proc = subprocess.run(args, cwd=repo, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(args[1:4])} failed (exit {proc.returncode}):\n{proc.stdout}{proc.stderr}")
    return proc.stdout


def _logbook(repo: Path, *args: str) -> str:
    return _sh(repo, sys.executable, "-m", "logbook", *args)


def _scratch(tmp: Path, config: str, override: str) -> Path:
    repo = tmp / "repo"
    repo.mkdir()
    _sh(repo, "git", "init", "-q", "-b", "main")
    _sh(repo, "git", "config", "user.name", "Bench")
    _sh(repo, "git", "config", "user.email", "bench@example.org")
    _sh(repo, "git", "commit", "-q", "--allow-empty", "-m", "start")
    (repo / "configs").mkdir()
    shutil.copyfile(ROOT / config, repo / "configs" / Path(config).name)
    _logbook(repo, "init")
    _sh(repo, "git", "add", "-A")
    _sh(repo, "git", "commit", "-q", "-m", "logbook and config")
    made = _logbook(repo, "prereg", "--title", "replay cost", "--hypothesis", "The loss falls.",
                    "--predict", "val_loss@final < 6.0", "--json")
    _logbook(repo, "run", "--prereg", json.loads(made)["id"], "--run-id", "bench", "--max-restarts", "0",
             f"configs/{Path(config).name}", override)
    _sh(repo, "git", "add", "-A")
    _sh(repo, "git", "commit", "-q", "-m", "run")
    return repo


def _median_s(repo: Path, *args: str, times: int = 3) -> float:
    took = []
    for _ in range(times):
        t0 = time.perf_counter()
        _logbook(repo, *args)
        took.append(time.perf_counter() - t0)
    return statistics.median(took)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="the micro config only")
    args = ap.parse_args()
    for name, config, override in CONFIGS[:1] if args.quick else CONFIGS:
        with tempfile.TemporaryDirectory(prefix="bench-replay-") as tmp:
            repo = _scratch(Path(tmp), config, override)
            replay = _median_s(repo, "verify", "--replay", "3")
            plain = _median_s(repo, "verify")
        print(f"{name}: verify --replay 3 {replay:.2f} s, verify {plain:.2f} s (medians of 3)")
        result(f"verify --replay 3, {name}", round(replay, 2), "s", "none (what the proof costs)", None)
        result(f"verify alone, {name}", round(plain, 2), "s", "none", None)


if __name__ == "__main__":
    main()
