"""The trainer's tokens/s with malloc on huge pages (as `logbook run` starts it) against 4 KB pages, side by side.

Two real `logbook run --exploratory` runs of the peer shape (bench/peers.py:
4 layers, 4 heads, 128 wide, block 128, batch 16, one thread), the second
with `GLIBC_TUNABLES=glibc.malloc.hugetlb=0`, which the launcher leaves as
it is (logbook/launch/launcher.py `with_huge_pages`). They run in turns,
one stopped while the other runs, as the peers do, so a busy machine slows
both alike. Printed: each run's tokens/s per round and the figure, the
median over rounds of huge/4 KB (goal: above 1, or the launcher should stop
asking). Where the machine gives no huge pages (`heap_pages` in
`run_started` is not "huge"), it says so and skips.

    python3 bench/huge_pages.py [--rounds 5] [--steps 80] [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._result import result  # noqa: E402
from bench.peers import Logbook, measure  # noqa: E402
from logbook.launch.launcher import _child_env  # noqa: E402
from trainer.host_memory import heap_pages  # noqa: E402

FIGURE = "trainer tokens/s, huge pages vs 4 KB"


class SmallPages(Logbook):
    name = "logbook-4k"

    def command(self, compiled: bool) -> tuple[list[str], Path, dict[str, str]]:
        argv, cwd, env = super().command(compiled)
        return argv, cwd, {**env, "GLIBC_TUNABLES": "glibc.malloc.hugetlb=0"}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=80, help="steps per run per round")
    ap.add_argument("--quick", action="store_true", help="2 rounds of 40 steps")
    args = ap.parse_args()
    if args.quick:
        args.rounds, args.steps = 2, 40
    claim = heap_pages(_child_env())
    if claim != "huge":
        print(f"skipped: this machine gives the trainer no huge pages: {claim}")
        result(FIGURE, "skipped", "ratio", "> 1.0", None)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        huge, small = Logbook(Path(tmp) / "huge", args.steps), SmallPages(Path(tmp) / "small", args.steps)
        tps = measure([huge, small], [False], rounds=args.rounds, warmup=10, slice_s=2.0)
    a, b = tps[("logbook", False)], tps[("logbook-4k", False)]
    print(f"huge pages: {', '.join(f'{v:,.0f}' for v in a)} tok/s")
    print(f"4 KB pages: {', '.join(f'{v:,.0f}' for v in b)} tok/s")
    ratios = [x / y for x, y in zip(a, b)]
    figure = statistics.median(ratios)
    print(f"huge / 4 KB per round: {', '.join(f'{r:.3f}' for r in ratios)}; median {figure:.3f}")
    result(FIGURE, round(figure, 3), "ratio", "> 1.0", figure > 1.0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
