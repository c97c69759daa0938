"""The oracle over many drawn fault schedules: how often the record disagrees with what the schedule implies.

`--path bundled` (the default): each example is a tiny real run of the
bundled trainer with drawn kills (after any step, or in the middle of a
checkpoint write), live changes before and after kills, and a loss spike or
NaN met by a preregistered contingency rule; the expected facts come from
the schedule and the checkpoint cadence alone (`tests/oracle_harness.py`),
and are compared with `logbook outcome --json`, the report's Markdown and
the rendered chronicle.

`--path hf|lightning|wrapped|torchrun`: the same for a Hugging Face
`Trainer` script with the callback, a Lightning script with the callback, a
plain script under `logbook run --` and a two-rank torchrun under it
(`tests/oracle_paths.py`): drawn kills after a step (SIGKILL, or SIGTERM to
`logbook run`) and a loss spike, compared with the event log, `logbook status
--json`, `logbook ls --runs --json` and the chronicle. `--path all` runs
every path, `--examples` each.

Prints one line per example, then per path the count of disagreements (goal:
0) and the seconds per example.

    python3 bench/oracle.py [--path all] --examples 200 [--seed N] [--budget-min M] [--keep DIR]
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

import oracle_paths  # noqa: E402

PATHS = ("bundled", *oracle_paths.PATHS)


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


def draw_and_check_path(lab: Lab, path: str, examples: int, rng_seed: int, max_kills: int, min_kills: int,
                        budget_s: float | None = None) -> list[oracle_paths.PathChecked]:
    """As `draw_and_check`, for one of the other trainer paths."""
    done: list[oracle_paths.PathChecked] = []
    runs = itertools.count(1)
    t0 = time.monotonic()

    @seed(rng_seed)
    @settings(max_examples=examples, deadline=None, database=None, phases=(Phase.generate,),
              suppress_health_check=list(HealthCheck))
    @given(schedule=oracle_paths.path_schedules(path, max_kills=max_kills, min_kills=min_kills))
    def one(schedule):
        if budget_s is not None and time.monotonic() - t0 > budget_s:
            return
        run, started = f"oracle-{path}-{next(runs)}", time.monotonic()
        try:
            got = oracle_paths.check(lab, run, schedule, lab.root.parent / "scratch" / run)
        except AssertionError as e:  # a run or a command that failed is a disagreement too
            got = oracle_paths.PathChecked(run, schedule, oracle_paths.expected(schedule), oracle_paths.PathObserved(),
                                           [f"could not be checked: {str(e)[-1500:]}"], time.monotonic() - started)
        done.append(got)
        k = ", ".join(f"{x.step}{'' if x.signal == 'SIGKILL' else ' (SIGTERM)'}" for x in schedule.kills) or "none"
        print(f"{got.run}: {schedule.steps} steps, every {schedule.every}; kills {k}; "
              f"spike {schedule.spike or 'none'}: {len(got.disagreements)} disagreement(s) in {got.seconds:.0f} s",
              flush=True)
        for d in got.disagreements:
            print(f"    {d}", flush=True)

    one()
    return done


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--path", choices=(*PATHS, "all"), default="bundled",
                    help="which trainer's runs to draw (default bundled; all: every path, --examples each)")
    ap.add_argument("--examples", type=int, default=200, help="drawn schedules to run per path (default 200)")
    ap.add_argument("--seed", type=int, default=36, help="the draw's seed")
    ap.add_argument("--max-kills", type=int, default=None,
                    help="kills per run at most (default 3 for the bundled trainer, 2 for the other paths)")
    ap.add_argument("--min-kills", type=int, default=1,
                    help="kills per run at least (default 1: a draw starts from the simplest schedules, "
                         "and a run without a kill checks little; the suite draws from 0)")
    ap.add_argument("--budget-min", type=float, default=None,
                    help="stop starting new examples after this many minutes, shared evenly by the paths run "
                         "(the count covers those run)")
    ap.add_argument("--quick", action="store_true", help="5 examples (for run_all)")
    ap.add_argument("--keep", metavar="DIR", help="build the scratch project in DIR and keep it (to read its logs)")
    args = ap.parse_args()
    n = 5 if args.quick else args.examples
    paths = PATHS if args.path == "all" else (args.path,)
    budget = args.budget_min * 60 / len(paths) if args.budget_min else None
    base = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="oracle-"))
    counts: dict[str, tuple[int, int, int, float]] = {}
    try:
        for path in paths:
            t0 = time.monotonic()
            lab = Lab.create(base / path)
            if path == "bundled":
                done = draw_and_check(lab, n, args.seed, args.max_kills or 3, args.min_kills, budget)
            else:
                done = draw_and_check_path(lab, path, n, args.seed, args.max_kills or 2, args.min_kills, budget)
            per = (time.monotonic() - t0) / max(len(done), 1)
            counts[path] = (len(done), sum(bool(c.disagreements) for c in done),
                            sum(len(c.disagreements) for c in done), per)
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
    print()
    for path, (runs, runs_bad, bad, per) in counts.items():
        print(f"{path}: {runs} schedules, {runs_bad} with disagreements, {bad} disagreement(s) in all; "
              f"{per:.0f} s per example")
        name = "oracle" if path == "bundled" else f"oracle ({path})"
        result(f"{name} disagreements", bad, "count", "0", bad == 0)
        result(f"{name} schedules checked", runs, "count", f">= {n}", runs >= n)
        result(f"{name} seconds per example", round(per, 1), "s", "(informational)", None)
    return 0 if all(bad == 0 for _, _, bad, _ in counts.values()) else 1

if __name__ == "__main__":
    sys.exit(main())
