"""Wall time of `logbook --help`, of every subcommand's `--help`, and of a full `logbook prereg`, as a user sees them.

Each command runs as a fresh subprocess (interpreter start-up included) several
times; the median is printed beside the bare interpreter's start-up, measured in
the same run, and against the goals: 0.3 s for any `--help`, 0.5 s for a
prereg. The prereg runs in a scratch git repository with `logbook init` done,
using the flags form.

    python3 bench/cli_latency.py [--runs 7]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
GOAL_S = 0.5
HELP_GOAL_S = 0.3

from bench._result import result  # noqa: E402


def _env(home: Path) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HOME": str(home), "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_CONFIG_GLOBAL": str(home / ".gitconfig"), "CI": "1"}
    env.pop("LOGBOOK_DEBUG", None)
    return env


def _time(cmd: list[str], cwd: Path, env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True)
    elapsed = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.decode()[-500:]}")
    return elapsed


def _scratch_repo(base: Path, env: dict[str, str]) -> Path:
    repo = base / "repo"
    repo.mkdir()
    (base / "home" / ".gitconfig").write_text("[user]\n\tname = Bench\n\temail = bench@example.org\n")
    for args in (["init", "-q", "-b", "main"], ["commit", "-q", "--allow-empty", "-m", "init"]):
        subprocess.run(["git", *args], cwd=repo, env=env, check=True)
    subprocess.run([sys.executable, "-m", "logbook", "init"], cwd=repo, env=env, check=True, capture_output=True)
    (repo / "configs").mkdir()
    (repo / "configs" / "tiny.yaml").write_text("model:\n  n_layer: 2\n")
    subprocess.run(["git", "add", "-A"], cwd=repo, env=env, check=True)
    subprocess.run(["git", "commit", "-q", "-m", "logbook init"], cwd=repo, env=env, check=True)
    return repo


# Where the time of one prereg goes, measured inside a fresh interpreter.
_BREAKDOWN = """
import json, time
t0 = time.perf_counter()
import logbook.cli
t1 = time.perf_counter()
import typer._adapters  # typer coerces every option value through pydantic TypeAdapters
t2 = time.perf_counter()
from logbook.promises.prereg import create_prereg
from logbook.promises.prereg_input import PreregInput
from logbook.core.project import open_project
t3 = time.perf_counter()
create_prereg(open_project(), PreregInput(title="breakdown", hypothesis="h", predictions=["spikes@final == 0"],
                                          config="configs/tiny.yaml", budget="8 GPU-hours"))
t4 = time.perf_counter()
print(json.dumps([t1 - t0, t2 - t1, t3 - t2, t4 - t3]))
"""
_PARTS = ["import logbook.cli (all commands)", "typer's option coercion (pydantic)",
          "import prereg modules (yaml, ...)", "create_prereg: validate, hash, git"]


def _breakdown(repo: Path, env: dict[str, str], runs: int) -> list[list[float]]:
    rows = []
    for _ in range(runs):
        out = subprocess.run([sys.executable, "-c", _BREAKDOWN], cwd=repo, env=env, check=True,
                             capture_output=True, text=True).stdout
        rows.append(json.loads(out))
    return [list(col) for col in zip(*rows)]


def _command_paths() -> list[list[str]]:
    """Every command a person can ask `--help` of: `ls`, `prereg amend`, `review approve`..."""
    import click
    import typer

    from logbook.cli import app

    def walk(cmd: click.Command, path: list[str]) -> list[list[str]]:
        subs = getattr(cmd, "commands", {}) or {}
        return [path] + [p for name, sub in sorted(subs.items()) if not sub.hidden for p in walk(sub, [*path, name])]

    return [p for p in walk(typer.main.get_command(app), []) if p]


def _help_times(repo: Path, env: dict[str, str], runs: int) -> dict[str, float]:
    """The median wall time of each subcommand's --help, interleaved across commands."""
    paths = _command_paths()
    times: dict[str, list[float]] = {" ".join(p): [] for p in paths}
    for _ in range(runs):
        for p in paths:
            times[" ".join(p)].append(_time([sys.executable, "-m", "logbook", *p, "--help"], repo, env))
    return {name: statistics.median(ts) for name, ts in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="runs per command (median reported)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="logbook-bench-") as tmp:
        base = Path(tmp)
        (base / "home").mkdir()
        env = _env(base / "home")
        repo = _scratch_repo(base, env)
        prereg = [sys.executable, "-m", "logbook", "prereg", "--title", "qk-norm removes spikes",
                  "--hypothesis", "QK-norm keeps attention logits bounded.",
                  "--predict", "val_loss@final < 1.45 ± 0.02", "--predict", "spikes@final == 0",
                  "--contingency", "loss spike > 4 sigma twice in 500 steps -> rollback 100 steps, lr × 0.9",
                  "--config", "configs/tiny.yaml", "--budget", "8 GPU-hours"]
        commands = {
            "python -c pass (floor)": [sys.executable, "-c", "pass"],
            "logbook --help": [sys.executable, "-m", "logbook", "--help"],
            "logbook prereg (flags)": prereg,
        }
        _time(commands["logbook --help"], repo, env)  # warm the page cache and the bytecode
        times: dict[str, list[float]] = {name: [] for name in commands}
        for _ in range(args.runs):  # interleaved, so a busy machine slows every command alike
            for name, cmd in commands.items():
                times[name].append(_time(cmd, repo, env))
        parts = _breakdown(repo, env, args.runs)
        helps = _help_times(repo, env, max(3, args.runs // 2))
    floor = statistics.median(times["python -c pass (floor)"])
    print(f"{'command':<26} {'median s':>9} {'min s':>7} {'x floor':>8} {'x goal':>7}  (goal {GOAL_S} s, {args.runs} runs)")
    for name, ts in times.items():
        med = statistics.median(ts)
        print(f"{name:<26} {med:>9.3f} {min(ts):>7.3f} {med / floor:>8.1f} {med / GOAL_S:>7.2f}")
    print("\ninside one prereg process (median s):")
    for label, ts in zip(_PARTS, parts):
        print(f"  {label:<38} {statistics.median(ts):>6.3f}")
    slowest = sorted(helps.items(), key=lambda kv: -kv[1])
    print(f"\nevery subcommand's --help ({len(helps)} commands, median s each; goal {HELP_GOAL_S} s):")
    for name, med in slowest[:5]:
        print(f"  logbook {name} --help{'':<{max(0, 28 - len(name))}} {med:>6.3f}  x floor {med / floor:.1f}")
    print(f"  median over commands {statistics.median(helps.values()):.3f}, slowest {slowest[0][1]:.3f}")
    med = statistics.median(times["logbook --help"])
    result("logbook --help wall time (median)", round(med, 3), "s", f"<= {HELP_GOAL_S}", med <= HELP_GOAL_S)
    result("slowest subcommand --help (median)", round(slowest[0][1], 3), "s", f"<= {HELP_GOAL_S}",
           slowest[0][1] <= HELP_GOAL_S)
    med = statistics.median(times["logbook prereg (flags)"])
    result("logbook prereg (flags) wall time (median)", round(med, 3), "s", f"<= {GOAL_S}", med <= GOAL_S)


if __name__ == "__main__":
    main()
