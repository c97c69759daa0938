"""The fault matrix as a table: each kind of failure injected into a real tiny run, its classification and the action taken.

Exception, SIGKILL, SIGTERM, hang and a corrupted checkpoint each end one
attempt of one run (relaunched after each, as torchrun would); NaN, a loss
spike and two bad live-change requests hit its last attempt; a second run
saves its checkpoints to a filesystem that fills up. The cells and what each
must show are in `tests/fault_harness.py`; `tests/test_fault_matrix.py`
asserts the same cells.

    python3 bench/fault_matrix.py [--keep DIR]
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
from lab import Lab, run_config  # noqa: E402
from fault_harness import STEPS, checkpoint_bytes, classify_disk, classify_matrix, run_disk, run_matrix, table  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keep", metavar="DIR", help="build the scratch project in DIR and keep it (to read its logs)")
    ap.add_argument("--quick", action="store_true", help="accepted for run_all; the matrix is already quick")
    args = ap.parse_args()
    base = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="fault-matrix-"))
    t0 = time.monotonic()
    try:
        lab = Lab.create(base)
        ref = lab.train("reference", lab.write_config("reference.yaml", run_config(steps=STEPS, every=2)))
        if ref.returncode != 0:
            raise SystemExit(f"the uninterrupted reference run failed:\n{ref.stderr[-2000:]}")
        outcome = run_matrix(lab)
        cells = classify_matrix(lab, "matrix", outcome)
        cells += classify_disk(lab, "disk", run_disk(lab, checkpoint_bytes=checkpoint_bytes(lab, "reference")), "reference")
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
    print(table(cells))
    print(f"\n{sum(c.ok for c in cells)} of {len(cells)} cells as designed, in {time.monotonic() - t0:.0f} s")
    for c in cells:
        result(f"fault matrix: {c.fault}", "ok" if c.ok else "wrong", "", "classified and handled as designed", c.ok)
    return 0 if all(c.ok for c in cells) else 1


if __name__ == "__main__":
    raise SystemExit(main())
