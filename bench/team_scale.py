"""A logbook the size of Llama 3 405B's run, shared by 40 people: what git holds and how long rendering takes.

Builds, in a scratch repository, one run of 54 days and ~1M steps with 419
restarts and ~1,800 checkpoints (plus divergences, live changes, milestones),
its metrics written through the trainer's own `MetricsWriter` and keep rule,
and 40 people's notes and reviews (one file each), committed in ~300 commits
the way a team commits: each commit adds a slice of the run and re-renders the
days it touched. Then it measures:

- the committed `entries/` (files at HEAD) and the packed git history, in MB;
- the full-resolution metrics the same run would have committed before, in MB;
- a render of every day, from scratch, in seconds.

The same build at a quarter of the length (13.5 days, 250k steps) runs first,
so the table shows how each figure grows with the run's length. Goals: committed
`entries/` <= 50 MB, rendering every day <= 10 s, at full length.

    python3 bench/team_scale.py [--quick]     # --quick: 1/16 and 1/4 of the length
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._result import result  # noqa: E402
from bench.render_scaling import _payload, _write_log  # noqa: E402
from logbook.chronicle.build import render_chronicle  # noqa: E402
from logbook.core.project import open_project  # noqa: E402
from logbook.eventlog.files import write_record  # noqa: E402
from logbook.records.init import init_logbook  # noqa: E402
from logbook.eventlog.sink import KeepRule, MetricsWriter  # noqa: E402
from logbook.runs.milestones import milestone_step  # noqa: E402

FULL = {"days": 54, "steps": 1_000_000, "restarts": 419, "checkpoints": 1_800, "people": 40, "commits": 300,
        "notes": 2_000, "reviews": 1_500, "divergences": 40, "changes": 25}
"""Llama 3 405B: 54 days, 419 unexpected interruptions; the rest is a busy lab around it."""
RUN = "llama405b"
START = datetime(2026, 1, 5, tzinfo=timezone.utc)


def _scaled(fraction: float) -> dict[str, int]:
    out = {k: max(1, round(v * fraction)) for k, v in FULL.items()}
    out["people"] = FULL["people"]
    return out


def _ts(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _events(size: dict[str, int], rng: random.Random) -> list[dict]:
    """The run's event log: starts, restarts, checkpoints, divergences, changes, milestones, in time order."""
    span = size["days"] * 86_400
    at = lambda step: START + timedelta(seconds=span * step / size["steps"])  # noqa: E731
    evs: list[tuple[int, str, dict]] = [(0, "run_started", {"total_steps": size["steps"], "world_size": 16_384})]
    for i in range(size["checkpoints"]):
        evs.append((int((i + 1) * size["steps"] / (size["checkpoints"] + 1)), "checkpoint_saved", {}))
    for _ in range(size["restarts"]):
        evs.append((rng.randrange(1, size["steps"]), "restart", {}))
    for _ in range(size["divergences"]):
        evs.append((rng.randrange(1, size["steps"]), "divergence_detected", {}))
    for _ in range(size["changes"]):
        evs.append((rng.randrange(1, size["steps"]), "hparam_change", {}))
    for f in (0.1, 0.25, 0.5, 0.75, 1.0):
        evs.append((milestone_step(f, size["steps"]), "milestone", {"fraction": f, "total_steps": size["steps"],
                                                                     "loss": 2.0, "goodput": 0.9}))
    evs.sort(key=lambda e: e[0])
    out, attempt = [], 1
    for step, kind, extra in evs:
        if kind == "restart":
            attempt += 1
        data = extra or _payload(kind, step, rng)
        out.append({"ts": _ts(at(step)), "run": RUN, "attempt": attempt, "rank": 0, "step": step,
                    "tokens": step * 16_777_216, "kind": kind, "drill": False, "data": data})
    out.append({"ts": _ts(at(size["steps"])), "run": RUN, "attempt": attempt, "rank": 0, "step": size["steps"],
                "tokens": size["steps"] * 16_777_216, "kind": "run_finished", "drill": False, "data": {}})
    return out


def _metric_row(step: int, attempt: int, t: float) -> dict:
    return {"step": step, "attempt": attempt, "loss": 2.0 + 1.0 / (1 + step / 1e4), "z_loss": 1e-4, "lr_scale": 1.0,
            "grad_norm": 0.8, "tokens_per_s": 2.1e6, "time": t, "window_steps": 1, "step_s": 4.6, "data_s": 0.01,
            "fwd_bwd_s": 3.9, "optim_s": 0.5, "ckpt_s": 0.0, "other_s": 0.2, "tflops": 400.0, "mfu": 0.4,
            "max_logit": 31.5, "tokens": step * 16_777_216}


def _metrics(run_dir: Path, size: dict[str, int], events: list[dict]) -> tuple[int, int]:
    """Write every step through the trainer's writer and keep rule; (committed bytes, bytes of all steps)."""
    exact = {milestone_step(f, size["steps"]) for f in (0.1, 0.25, 0.5, 0.75, 1.0)}
    m = MetricsWriter(run_dir, keep=KeepRule.for_run(size["steps"], exact), flush_every=5_000)
    restarts = iter(sorted(e["step"] for e in events if e["kind"] == "restart"))
    nxt, attempt = next(restarts, None), 1
    full_bytes = 0
    for step in range(1, size["steps"] + 1):
        if nxt is not None and step >= nxt:
            attempt, nxt = attempt + 1, next(restarts, None)
        row = _metric_row(step, attempt, 1.7e9 + step * 4.6)
        if step % 1_000 == 1:  # the bytes every row would have cost, measured on a sample
            full_bytes += 1_000 * (len(json.dumps(row, separators=(",", ":"))) + 1)
        m.write(row)
        if step % 2_000 == 0:
            m.write({"step": step, "attempt": attempt, "val_loss": 2.1, "time": 1.7e9 + step * 4.6})
    m.close()
    return (run_dir / "metrics.jsonl").stat().st_size, full_bytes


def _people_records(project, size: dict[str, int], events: list[dict], rng: random.Random) -> list[tuple[str, str, dict]]:
    """(ts, folder kind, record) for every note and review, spread over the run's days."""
    people = [(f"Person {i:02d}", f"p{i:02d}@lab.example") for i in range(size["people"])]
    reviewable = [e for e in events if e["kind"] in ("restart", "divergence_detected", "hparam_change", "milestone")]
    span = size["days"] * 86_400
    out = []
    for _ in range(size["notes"]):
        name, email = rng.choice(people)
        t = START + timedelta(seconds=rng.uniform(0, span))
        out.append((_ts(t), "notes", {"kind": "note", "author": name, "email": email, "run": RUN, "step": None,
                                      "text": "Looked at the loss around this step; throughput is back to normal.\n"}))
    for _ in range(size["reviews"]):
        name, email = rng.choice(people)
        e = rng.choice(reviewable)
        seq = events.index(e)
        t = datetime.fromisoformat(e["ts"].replace("Z", "+00:00")) + timedelta(hours=rng.uniform(1, 48))
        out.append((_ts(t), "reviews", {"kind": "review", "entry": f"{RUN}:{seq}", "action": "approve", "text": "",
                                        "reviewer": name, "email": email, "run": RUN, "entry_kind": e["kind"],
                                        "entry_ts": e["ts"]}))
    out.sort(key=lambda r: r[0])
    return out


def _git(root: Path, *args: str, who: tuple[str, str] = ("b", "b@b")) -> None:
    subprocess.run(["git", "-c", f"user.name={who[0]}", "-c", f"user.email={who[1]}", *args], cwd=root, check=True,
                   capture_output=True)


def _du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def build(root: Path, size: dict[str, int], seed: int = 405) -> dict[str, float]:
    rng = random.Random(seed)
    subprocess.run(["git", "init", "-q", "-b", "main", str(root)], check=True)
    _git(root, "commit", "-q", "--allow-empty", "-m", "init")
    init_logbook(root)
    project = open_project(root)
    events = _events(size, rng)
    people = _people_records(project, size, events, rng)
    run_dir = project.run_dir(RUN)
    metrics_bytes, full_bytes = _metrics(run_dir, size, events)
    # ~300 commits: each adds the next slice of time (events appended, records added) and re-renders its days.
    slices = size["commits"]
    span = size["days"] * 86_400
    ei = pi = 0
    for k in range(1, slices + 1):
        cut = _ts(START + timedelta(seconds=span * k / slices)) if k < slices else "9999"
        while ei < len(events) and events[ei]["ts"] <= cut:
            ei += 1
        _write_log(run_dir / "events.jsonl", events[:ei])
        days = set()
        while pi < len(people) and people[pi][0] <= cut:
            ts, folder, rec = people[pi]
            write_record(project.entries / folder, rec, ts=ts)
            days.add(ts[:10])
            pi += 1
        days |= {e["ts"][:10] for e in events[max(0, ei - 50):ei]}
        render_chronicle(project, days=sorted(days), make_plots=False)
        _git(root, "add", "-A", "entries")
        _git(root, "commit", "-q", "-m", f"logbook: slice {k}", who=(f"Person {k % 40:02d}", f"p{k % 40:02d}@lab.example"))
    _git(root, "gc", "-q", "--aggressive")
    for p in project.entries.glob("[0-9][0-9][0-9][0-9]"):  # render every day from scratch, timed
        subprocess.run(["rm", "-rf", str(p)], check=True)
    t0, c0 = time.perf_counter(), time.process_time()
    res = render_chronicle(project, make_plots=False)
    render_s, render_cpu_s = time.perf_counter() - t0, time.process_time() - c0
    packs = _du(root / ".git" / "objects")
    return {"days": len(res.days), "events": len(events), "notes": size["notes"], "reviews": size["reviews"],
            "entries_mb": _du(project.entries) / 1e6, "git_mb": packs / 1e6, "metrics_mb": metrics_bytes / 1e6,
            "all_steps_mb": full_bytes / 1e6, "render_s": render_s, "render_cpu_s": render_cpu_s}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="1/16 and 1/4 of the length instead of 1/4 and all of it")
    args = ap.parse_args()
    fractions = [1 / 16, 1 / 4] if args.quick else [1 / 4, 1.0]
    rows = []
    for f in fractions:
        size = _scaled(f)
        with tempfile.TemporaryDirectory(prefix="logbook-team-scale-") as tmp:
            row = build(Path(tmp) / "repo", size)
        rows.append({"fraction": f, "steps": size["steps"], **row})
        print(json.dumps(rows[-1]), flush=True)
    print(f"{'steps':>9} {'days':>5} {'events':>6} {'notes':>6} {'reviews':>7} | {'entries/ MB':>11} {'git MB':>7} "
          f"{'metrics MB':>10} {'all steps MB':>12} | {'render s':>8} {'cpu s':>6}")
    for r in rows:
        print(f"{r['steps']:>9,} {r['days']:>5} {r['events']:>6,} {r['notes']:>6,} {r['reviews']:>7,} | "
              f"{r['entries_mb']:>11.1f} {r['git_mb']:>7.1f} {r['metrics_mb']:>10.2f} {r['all_steps_mb']:>12.1f} | "
              f"{r['render_s']:>8.2f} {r['render_cpu_s']:>6.2f}")
    small, big = rows[0], rows[-1]
    label = "Llama 3 405B scale" if big["fraction"] == 1.0 else f"{big['fraction']:.3g} of Llama 3 405B scale"
    result(f"committed entries/, {label}", round(big["entries_mb"], 1), "MB", "<= 50", big["entries_mb"] <= 50)
    result(f"packed git history, {label}", round(big["git_mb"], 1), "MB", "-", None)
    result(f"render every day, {label}", round(big["render_s"], 2), "s", "<= 10", big["render_s"] <= 10)
    result(f"render every day, CPU, {label}", round(big["render_cpu_s"], 2), "s", "-", None)
    result(f"committed metrics vs every step, {label}", round(big["metrics_mb"] / big["all_steps_mb"], 4), "ratio",
           "-", None)
    growth = (big["entries_mb"] / small["entries_mb"]) / (big["fraction"] / small["fraction"])
    result(f"entries/ growth per unit of run length, {big['fraction']:.3g} vs {small['fraction']:.3g}",
           round(growth, 3), "ratio", "<= 1.1 (at most linear)", growth <= 1.1)


if __name__ == "__main__":
    main()
