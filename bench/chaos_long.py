"""Chaos, long version: one real training run SIGKILLed fifty times and more at random moments, then audited.

The moments are drawn (seeded) from every kind in `tests/chaos_harness.py`:
a random delay after the start, late in start-up, a random step past the last
checkpoint, the middle of a background checkpoint write, just after an event
append, just after a progress note. The first leg runs under `logbook run`
(torchrun restarts a killed worker, then SIGTERM preempts it); after that the
trainer's own command is relaunched after each kill, as torchrun or a Slurm
requeue would. The audit then checks that the run finished with the weights
and losses of an uninterrupted run bit for bit, that every restart is in the
event log and in the rendered chronicle exactly once, that `logbook verify`
passes, that no checkpoint failing its manifest was ever loaded, and that each
progress note was written once.

    python3 bench/chaos_long.py [--kills 50] [--steps 600] [--seed 7] [--keep DIR] [--quick]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from bench._result import result  # noqa: E402
from chaos_harness import Chaos, audit  # noqa: E402
from lab import Lab, run_config  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kills", type=int, default=50, help="SIGKILLs in all (the first goes to a torchrun worker)")
    ap.add_argument("--steps", type=int, default=600, help="training steps of the run")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--keep", metavar="DIR", help="build the scratch project in DIR and keep it (to read its logs)")
    ap.add_argument("--quick", action="store_true", help="12 kills over 200 steps (a few minutes less)")
    args = ap.parse_args()
    if args.quick:
        args.kills, args.steps = 12, 200
    base = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="chaos-long-"))
    t0 = time.monotonic()

    def say(line: str) -> None:
        print(f"{time.monotonic() - t0:7.1f} s  {line}", flush=True)

    try:
        lab = Lab.create(base)
        config = lab.write_config("chaos.yaml", run_config(steps=args.steps, every=2))
        ref = lab.train("reference", config, timeout=1800)
        if ref.returncode != 0:
            raise SystemExit(f"the uninterrupted reference run failed:\n{ref.stderr[-2000:]}")
        say(f"reference run: {args.steps} steps, uninterrupted")
        chaos = Chaos(lab, "chaos", config, seed=args.seed, kills=args.kills, steps=args.steps, say=say).drive()
        say(f"the run finished after {len(chaos.kills)} kills and {chaos.launches} launches (exit {chaos.final_rc})")
        report = audit(chaos, "reference")
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
    _print(report)
    ok = not report.problems
    expected = report.traced_kills + chaos.preemptions
    result("chaos: SIGKILLs survived", report.kills, "kills", f">= {args.kills}", report.kills >= args.kills)
    result("chaos: invariants violated", len(report.problems), "count", "0", ok)
    result("chaos: restart events / (traced kills + preemptions)", round(report.restarts / max(expected, 1), 4), "ratio",
           "== 1", report.restarts == expected)
    result("chaos: restart entries in the chronicle / restart events", round(report.chronicle_restarts / max(report.restarts, 1), 4),
           "ratio", "== 1", report.chronicle_restarts == report.restarts)
    result("chaos: kills that landed mid-way through a checkpoint write", report.mid_save_kills, "kills", "> 0 (seen)",
           report.mid_save_kills > 0)
    return 0 if ok else 1


def _print(report) -> None:
    print()
    print(f"kills: {report.kills} ({report.traced_kills} after the attempt had announced itself); "
          f"by kind: {dict(sorted(report.kill_kinds.items()))}")
    print(f"mid-way through a checkpoint write: {report.mid_save_kills}")
    print(f"restart events: {report.restarts} (causes {report.restart_causes}); "
          f"restart entries in the chronicle: {report.chronicle_restarts}")
    for name, problems in report.checks.items():
        print(f"  {'ok' if not problems else 'FAILED':6s} {name}")
        for p in problems:
            print(f"         {p}")
    print()


if __name__ == "__main__":
    raise SystemExit(main())
