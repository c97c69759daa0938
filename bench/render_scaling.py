"""How chronicle rendering scales: 1,000 / 10,000 / 100,000 events to Markdown and to PDF.

Builds a scratch git repository with real hash-chained event logs (4 runs, one
event every 20 s, a realistic mix of kinds: half of them routine checkpoints
and skipped steps that are summarised, the rest one entry each) plus a note
every 500 events, then times a full render of the dated Markdown files and of
the PDF. Time should grow linearly: the per-1k-event column should stay flat.
Goals on a 2-core machine: 10,000 events to Markdown within 1 s, to PDF within 5 s.
The last column is the launcher's case: one more event arrives, and only its
day is rendered again (entries already rendered come from the in-process cache).

    python3 bench/render_scaling.py [--sizes 1000,10000,100000] [--no-pdf] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._result import result  # noqa: E402
from logbook.chronicle.build import render_chronicle  # noqa: E402
from logbook.core.project import open_project  # noqa: E402
from logbook.eventlog.chain import GENESIS, SCHEMA_VERSION, canonical, record_hash  # noqa: E402
from logbook.eventlog.files import write_record  # noqa: E402
from logbook.records.init import init_logbook  # noqa: E402
from logbook.eventlog.sink import EventSink  # noqa: E402

RUNS = ["alpha", "beta", "gamma", "delta"]
MIX = [("checkpoint_saved", 40), ("step_skipped", 10), ("divergence_detected", 12), ("restart", 6),
       ("rollback", 6), ("lr_scaled", 6), ("hparam_change", 8), ("hang", 4), ("fault_injected", 2),
       ("attempt_failed", 3), ("thermal_throttle", 3)]


def _payload(kind: str, step: int, rng: random.Random) -> dict:
    if kind == "checkpoint_saved":
        return {"path": f"ckpt/step-{step}", "blocking_s": round(rng.uniform(0.2, 0.8), 3), "total_s": 3.1, "bytes": 10**9}
    if kind == "step_skipped":
        return {"reason": "loss spike", "metric": "loss"}
    if kind == "divergence_detected":
        return {"metric": "loss", "value": round(rng.uniform(2.5, 4), 3), "baseline": 2.44, "scale": 0.07, "threshold": 6.0,
                "z": round(rng.uniform(6, 12), 2), "nonfinite": False, "batch_ids": [step, step + 1], "action": "skip",
                "plan": {"rule": 1, "follows": True}}
    if kind == "restart":
        return {"cause": "signal", "signal": -9, "prev_attempt": 1, "resumed_from_step": step - 200, "failed_at_step": step,
                "steps_lost": 200, "seconds_lost": 400.0, "downtime_s": 125.0}
    if kind == "rollback":
        return {"from_step": step, "to_step": step - 390, "steps_lost": 390, "batches_skipped": [step - 390, step - 90],
                "checkpoint": f"ckpt/step-{step - 390}", "kept": [], "plan": {"rule": 1, "follows": True}}
    if kind == "lr_scaled":
        return {"old": 1.0, "new": 0.9, "factor": 0.9, "reason": "ladder", "plan": {"rule": 1, "follows": True}}
    if kind == "hparam_change":
        return {"key": "grad_clip", "old": 1.0, "new": 0.5, "reason": "grad norm creeping up", "who": "j.doe",
                "source": "live", "request_id": f"r-{step}", "config_diff": "-grad_clip: 1.0\n+grad_clip: 0.5\n",
                "plan": {"rule": None, "follows": False}}
    if kind == "hang":
        return {"timeout_s": 600, "elapsed_s": 640}
    if kind == "fault_injected":
        return {"fault": "kill", "at_step": step}
    if kind == "attempt_failed":
        return {"exception_type": "RuntimeError", "exception_message": "CUDA error", "traceback": ["Traceback:", "  boom"]}
    return {"gpu": rng.randint(0, 7), "temp_c": round(rng.uniform(85, 95), 1)}


def _write_log(path: Path, records: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    prev = GENESIS
    with open(path, "w", encoding="utf-8") as f:
        for seq, rec in enumerate(records):
            full = {"v": SCHEMA_VERSION, **rec, "seq": seq, "prev": prev}
            full["hash"] = record_hash(full)
            prev = full["hash"]
            f.write(canonical(full) + "\n")


def build(root: Path, n: int, seed: int = 7) -> None:
    rng = random.Random(seed)
    subprocess.run(["git", "init", "-q", "-b", "main", str(root)], check=True)
    subprocess.run(["git", "-C", str(root), "-c", "user.name=b", "-c", "user.email=b@b", "commit", "-q", "--allow-empty", "-m", "init"], check=True)
    init_logbook(root)
    project = open_project(root)
    kinds = [k for k, w in MIX for _ in range(w)]
    start = datetime(2026, 11, 30, tzinfo=timezone.utc)
    per_run: dict[str, list[dict]] = {r: [] for r in RUNS}
    notes: list[dict] = []
    for i in range(n):
        run = RUNS[i % len(RUNS)]
        ts = (start + timedelta(seconds=20 * i)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        step = 10 * i
        kind = rng.choice(kinds)
        per_run[run].append({"ts": ts, "run": run, "attempt": 1 + i // 5000, "rank": 0, "step": step, "tokens": step * 262_144,
                             "kind": kind, "drill": kind == "fault_injected", "data": _payload(kind, step, rng)})
        if i % 500 == 250:
            notes.append({"ts": ts, "kind": "note", "author": "Ada", "email": "a@b", "text": f"Looked at step {step}: *fine*.\n",
                          "run": run, "step": step})
    for run, recs in per_run.items():
        _write_log(project.run_dir(run) / "events.jsonl", recs)
    for note in notes:  # one file per note, as `logbook note` writes them
        write_record(project.notes_dir, {k: v for k, v in note.items() if k != "ts"}, ts=note["ts"])


def _time(fn) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process): on a shared machine the CPU figure is the steadier one."""
    t, c = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - t, time.process_time() - c


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--no-pdf", action="store_true")
    ap.add_argument("--quick", action="store_true", help="1,000 and 10,000 events only")
    args = ap.parse_args()
    sizes = [1000, 10000] if args.quick else [int(s) for s in args.sizes.split(",")]
    rows = []
    for n in sizes:
        with tempfile.TemporaryDirectory(prefix="logbook-bench-") as tmp:
            root = Path(tmp) / "repo"
            build(root, n, seed=n)  # a different seed per size: no entry is rendered from the cache
            project = open_project(root)
            md = _time(lambda: render_chronicle(project, make_plots=False))
            days = len(list(project.entries.glob("2*/*/*.md")))
            last_day = sorted(project.entries.glob("2*/*/*.md"))[-1]
            day = "-".join(last_day.parts[-3:])[:-3]
            # The launcher's case: one more event arrives, and its day is rendered again. (Its
            # timestamp is now; it still sorts after the log's last line, on the last day.)
            EventSink(project.run_dir(RUNS[0]), RUNS[0], 9).emit("hang", step=1, timeout_s=60, elapsed_s=61)
            one = _time(lambda: render_chronicle(project, days=[day], make_plots=False))
            pdf = None
            if not args.no_pdf:
                from logbook.chronicle.pdf import render_pdf

                pdf = _time(lambda: render_pdf(project, Path(tmp) / "c.pdf"))
            rows.append({"events": n, "days": days, "md_wall_s": md[0], "md_cpu_s": md[1], "one_day_wall_s": one[0],
                         "pdf_wall_s": pdf[0] if pdf else None, "pdf_cpu_s": pdf[1] if pdf else None})
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"load average {load:.1f} on {os.cpu_count()} CPUs; wall and CPU seconds, and per 1,000 events")
    print(f"{'events':>8} {'days':>5} | {'md wall':>8} {'md cpu':>8} {'cpu/1k':>7} | {'pdf wall':>8} {'pdf cpu':>8} {'cpu/1k':>7}"
          f" | {'+1 event, re-render its day':>28}")
    for r in rows:
        k = r["events"] / 1000
        md = f"{r['md_wall_s']:8.2f} {r['md_cpu_s']:8.2f} {r['md_cpu_s'] / k:7.3f}"
        pdf = (f"{r['pdf_wall_s']:8.2f} {r['pdf_cpu_s']:8.2f} {r['pdf_cpu_s'] / k:7.3f}" if r["pdf_wall_s"] is not None
               else f"{'-':>8} {'-':>8} {'-':>7}")
        print(f"{r['events']:>8,} {r['days']:>5} | {md} | {pdf} | {r['one_day_wall_s']:26.3f} s")
    print(json.dumps(rows))
    _results(rows)


def _results(rows: list[dict]) -> None:
    """The figures against the goals in the docstring: 10,000 events within 1 s (Markdown) and 5 s (PDF), linear."""
    by_n = {r["events"]: r for r in rows}
    ten = by_n.get(10_000)
    if ten:
        result("render 10k events to Markdown (wall)", round(ten["md_wall_s"], 3), "s", "<= 1", ten["md_wall_s"] <= 1.0)
        if ten["pdf_wall_s"] is not None:
            result("render 10k events to PDF (wall)", round(ten["pdf_wall_s"], 3), "s", "<= 5", ten["pdf_wall_s"] <= 5.0)
        result("one more event: re-render its day (wall, 10k events)", round(ten["one_day_wall_s"], 3), "s", "-", None)
    small, big = rows[0], rows[-1]
    if big["events"] > small["events"]:
        per_k = lambda r, key: r[key] / (r["events"] / 1000)  # noqa: E731
        growth = per_k(big, "md_cpu_s") / per_k(small, "md_cpu_s")
        result(f"Markdown CPU per 1k events, {big['events']:,} vs {small['events']:,} events", round(growth, 3), "ratio",
               "<= 1.5 (linear)", growth <= 1.5)
        if big["pdf_cpu_s"] is not None and small["pdf_cpu_s"] is not None:
            growth = per_k(big, "pdf_cpu_s") / per_k(small, "pdf_cpu_s")
            result(f"PDF CPU per 1k events, {big['events']:,} vs {small['events']:,} events", round(growth, 3), "ratio",
                   "<= 1.5 (linear)", growth <= 1.5)


if __name__ == "__main__":
    main()
