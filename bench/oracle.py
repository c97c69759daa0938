"""The oracle over many drawn fault schedules: how often the record disagrees with what the schedule implies.

Each example is a tiny real run with drawn kills (after any step, or in the
middle of a checkpoint write), live changes before and after kills, and a
loss spike or NaN met by a preregistered contingency rule; the expected facts
come from the schedule and the checkpoint cadence alone
(`tests/oracle_harness.py`), and are compared with `logbook outcome --json`,
the report's Markdown and the rendered chronicle. Prints one line per
example and the count of disagreements (goal: 0).

    python3 bench/oracle.py --examples 200 [--seed N] [--budget-min M] [--keep DIR]
"""

from __future__ import annotations

import argparse
import itertools
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from hypothesis import HealthCheck, Phase, given, seed, settings  # noqa: E402

from bench._result import result  # noqa: E402
from lab import Lab  # noqa: E402
from oracle_harness import Checked, Observed, check, expected, schedules  # noqa: E402


def draw_and_check(lab: Lab, examples: int, rng_seed: int, max_kills: int, min_kills: int,
                   budget_s: float | None = None) -> list[Checked]:
    """Run `examples` drawn schedules (hypothesis, no shrinking: each example is a real run), or as many as fit
    in `budget_s` seconds."""
    done: list[Checked] = []
    runs = itertools.count(1)
    t0 = time.monotonic()

    @seed(rng_seed)
    @settings(max_examples=examples, deadline=None, database=None, phases=(Phase.generate,),
              suppress_health_check=list(HealthCheck))
    @given(schedule=schedules(max_kills=max_kills, min_kills=min_kills))
    def one(schedule):
        if budget_s is not None and time.monotonic() - t0 > budget_s:
            return  # out of time: the draws left go by without a run
        run, started = f"oracle-{next(runs)}", time.monotonic()
        try:
            got = check(lab, run, schedule)
        except AssertionError as e:  # a run or a command that failed is a disagreement too, and the draw goes on
            got = Checked(run, schedule, expected(schedule), Observed(), [f"could not be checked: {str(e)[-1500:]}"],
                          time.monotonic() - started)
        done.append(got)
        k = ", ".join(f"{x.step}{' (in save)' if x.during_save else ' (hang)' if x.hang else ''}"
                      for x in schedule.kills) or "none"
        print(f"{got.run}: {schedule.steps} steps, every {schedule.every}{' bg' if schedule.background else ''}; "
              f"kills {k}; live {list(schedule.live_changes)}; {schedule.divergence or 'no spike'}: "
              f"{len(got.disagreements)} disagreement(s) in {got.seconds:.0f} s", flush=True)
        for d in got.disagreements:
            print(f"    {d}", flush=True)

    one()
    return done


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", type=int, default=200, help="drawn schedules to run (default 200)")
    ap.add_argument("--seed", type=int, default=36, help="the draw's seed")
    ap.add_argument("--max-kills", type=int, default=3, help="kills per run at most (default 3)")
    ap.add_argument("--min-kills", type=int, default=1,
                    help="kills per run at least (default 1: a draw starts from the simplest schedules, "
                         "and a run without a kill checks little; the suite draws from 0)")
    ap.add_argument("--budget-min", type=float, default=None,
                    help="stop starting new examples after this many minutes (the count covers those run)")
    ap.add_argument("--quick", action="store_true", help="5 examples (for run_all)")
    ap.add_argument("--keep", metavar="DIR", help="build the scratch project in DIR and keep it (to read its logs)")
    args = ap.parse_args()
    n = 5 if args.quick else args.examples
    base = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="oracle-"))
    t0 = time.monotonic()
    try:
        done = draw_and_check(Lab.create(base), n, args.seed, args.max_kills, args.min_kills,
                              args.budget_min * 60 if args.budget_min else None)
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
    bad = sum(len(c.disagreements) for c in done)
    runs_bad = sum(bool(c.disagreements) for c in done)
    per = (time.monotonic() - t0) / max(len(done), 1)
    print(f"\n{len(done)} schedules, {runs_bad} with disagreements, {bad} disagreement(s) in all; {per:.0f} s per example")
    result("oracle disagreements", bad, "count", "0", bad == 0)
    result("oracle schedules checked", len(done), "count", f">= {n}", len(done) >= n)
    result("oracle seconds per example", round(per, 1), "s", "(informational)", None)
    return 0 if bad == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
