"""Run every benchmark in bench/ and print one table: figure, value, goal, met.

Usage: python3 bench/run_all.py [--quick] [--only NAME ...] [--timeout SECONDS]

Each script runs in its own process, one after another (never in parallel:
they measure ratios side by side and need the machine to themselves), and
reports its figures as `RESULT {json}` lines (see bench/_result.py). The
full run takes about 10 minutes on a 2-core machine; `--quick` passes
`--quick` to the scripts that take it (smaller sizes, fewer kills) and takes
about 7. The exit status is 1 when a figure misses its goal.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCRIPTS = [
    "trainer_vs_bare.py",
    "peers.py",
    "demo_first_run.py",
    "guard_overhead.py",
    "telemetry_overhead.py",
    "callback_overhead.py",
    "api_cost.py",
    "background_save.py",
    "recovery_time.py",
    "scaleout_goodput.py",
    "goodput_vs_optimum.py",
    "cli_latency.py",
    "render_scaling.py",
    "site.py",
    "verify_history.py",
    "stamp_cost.py",
    "sign_verify.py",
    "team_scale.py",
    "replay_cost.py",
    "gpu_mfu.py",
    "fault_matrix.py",
    "chaos_long.py",
    "oracle.py",
]


def run_one(script: Path, timeout: float, quick: bool = False) -> tuple[list[dict], str, float]:
    t0 = time.perf_counter()
    argv = [sys.executable, str(script)]
    if quick and "--quick" in script.read_text(encoding="utf-8"):
        argv.append("--quick")
    try:
        proc = subprocess.run(argv, cwd=HERE.parent, capture_output=True, text=True, timeout=timeout)
        out, status = proc.stdout, ("ok" if proc.returncode == 0 else f"exit {proc.returncode}")
        if proc.returncode != 0:
            sys.stderr.write(proc.stderr[-2000:])
    except subprocess.TimeoutExpired as e:
        out, status = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or ""), "timeout"
    rows = []
    for line in out.splitlines():
        if line.startswith("RESULT "):
            try:
                rows.append(json.loads(line[7:]))
            except ValueError:
                pass
    return rows, status, time.perf_counter() - t0


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", help="script names (without .py) to run")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per script")
    ap.add_argument("--quick", action="store_true", help="pass --quick to the scripts that take it")
    args = ap.parse_args()
    started = time.perf_counter()
    names = [s for s in SCRIPTS if not args.only or s.removesuffix(".py") in args.only]
    table: list[tuple[str, str, str, str, str]] = []
    for name in names:
        script = HERE / name
        if not script.exists():
            table.append((name, "(missing)", "", "", "missing"))
            continue
        print(f"running {name} ...", file=sys.stderr, flush=True)
        rows, status, secs = run_one(script, args.timeout, args.quick)
        if not rows:
            table.append((name, "(no figure)", "", "", status))
        for r in rows:
            met = {True: "yes", False: "NO", None: "-"}[r.get("met")]
            table.append((r["figure"], f"{_fmt(r['value'])} {r.get('unit', '')}".strip(), r.get("goal", ""), met, f"{status}, {secs:.0f} s"))
    widths = [max(len(row[i]) for row in table + [("figure", "value", "goal", "met", "script")]) for i in range(5)]
    header = ("figure", "value", "goal", "met", "script")
    print("  ".join(h.ljust(w) for h, w in zip(header, widths)))
    print("  ".join("-" * w for w in widths))
    for row in table:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)))
    print(f"\n{len(names)} scripts, {(time.perf_counter() - started) / 60:.1f} min")
    return 0 if all(r[3] != "NO" for r in table) else 1


if __name__ == "__main__":
    raise SystemExit(main())
