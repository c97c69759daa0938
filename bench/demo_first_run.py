"""Wall time of `logbook demo` as a first run on a fresh machine, against another checkout, in turns.

Each run gets a fresh home, cache folder and scratch repository, so nothing
an earlier run built or cached (PyTorch's inductor cache, anything under
`~/.cache`) helps it: what a new user's first `logbook demo` pays. With
`--against PATH` (another checkout of this project, e.g. the commit before a
change) the two take turns, so a busy machine slows both alike; the figure is
the median over rounds of this checkout's time over the other's.

    python3 bench/demo_first_run.py [--against ../main] [--rounds 2] [--steps 120]
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._result import result  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def first_demo(checkout: Path, steps: int) -> float:
    """Seconds of one `logbook demo` of `checkout`, started as on a machine that never ran it."""
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        home.mkdir()
        env = {**os.environ, "PYTHONPATH": str(checkout), "HOME": str(home), "XDG_CACHE_HOME": str(home / ".cache"),
               "LOGBOOK_KERNEL_CACHE": str(home / ".cache" / "kernels"), "TORCHINDUCTOR_CACHE_DIR": str(home / "ind")}
        env.pop("GIT_CONFIG_GLOBAL", None)
        (home / ".gitconfig").write_text("[user]\n\tname = Demo User\n\temail = demo@example.org\n")
        t0 = time.perf_counter()
        res = subprocess.run([sys.executable, "-m", "logbook", "demo", "--dir", str(Path(tmp) / "demo"),
                              "--steps", str(steps)], cwd=tmp, env=env, capture_output=True, text=True)
        seconds = time.perf_counter() - t0
    if res.returncode != 0:
        raise SystemExit(f"logbook demo of {checkout} failed ({res.returncode}):\n{res.stderr[-3000:]}")
    return seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--against", type=Path, help="another checkout to time in turns with this one")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--steps", type=int, default=120)
    args = ap.parse_args()
    ours, theirs = [], []
    for r in range(args.rounds):
        ours.append(first_demo(ROOT, args.steps))
        print(f"round {r + 1}: this checkout {ours[-1]:.1f} s", end="", flush=True)
        if args.against:
            theirs.append(first_demo(args.against.resolve(), args.steps))
            print(f", {args.against} {theirs[-1]:.1f} s", end="")
        print()
    result("logbook demo, first run", round(statistics.median(ours), 1), "s", "-", None)
    if theirs:
        ratio = statistics.median(a / b for a, b in zip(ours, theirs))
        print(f"this checkout / {args.against}: median {ratio:.3f} (goal <= 1.0)")
        result("logbook demo first run vs the other checkout", round(ratio, 3), "ratio", "<= 1.0", ratio <= 1.0)


if __name__ == "__main__":
    main()
