"""A lab's year in one repository: verify and every listing at 1/10, 1/3 and the whole year, beside git's own walk.

The history is written straight into git with one `git fast-import` stream
(the records' bytes are what the commands read, not how they were made):
`--commits` commits by `--people` identities, `--runs` runs (most short, a
tenth with a restart, ten long ones that keep appending to their logs),
`--preregs` preregistrations the runs name, `--notes` notes and `--reviews`
reviews, one immutable record file each, as `logbook note` and `logbook
review` write them. Every tenth commit one long run in turn appends a
checkpoint to its log: a stream that rewrote ten growing logs in every commit
would run to hundreds of GB. Not yet in it: amendments, third-party stamps,
signatures, merges and rebases (bench/verify_history.py measures stamps on a
long run; tests/test_history_workflows.py checks merges and rebases).

For each fraction of the year it prints, measured in one run (medians of
`--repeat`): `verify` from cold (no `.logbook/`), with nothing new, and after
one more commit; `ls`, `ls --runs`, `status` of a long run, `compare` of two
runs, `review --status` and `calibration`; and beside them the floor git sets
for the same walk, `git log --raw` over every commit (each figure is printed
as a ratio to it), and `git cat-file --batch-all-objects --batch`, reading
every object once. Then each figure's growth from the smallest fraction to the
whole year (1.0: linear in the history). Goals (issue 52, at the whole year):
verify cold <= 30 s and within 3x of git's walk, after one commit <= 1 s,
nothing new <= 0.5 s, each listing <= 1 s, the re-render after a pull of ten
commits (`render --pulled`, as the clone's hook runs it) <= 1 s.

    python3 bench/lab_year.py [--commits 10000] [--runs 1000] [--fractions 0.1,0.33,1] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from bench._result import result  # noqa: E402
from verify_history import scratch_repo  # noqa: E402 (the same scratch HOME and git config)

from logbook.eventlog.chain import GENESIS, canonical, record_hash  # noqa: E402
from logbook.eventlog.files import SCHEMA_VERSION, new_record_id  # noqa: E402
from logbook.promises.prereg_format import render_body, render_record  # noqa: E402

DAY0 = 1_767_225_600  # 2026-01-01T00:00:00Z
YEAR_S = 365 * 86400
LONG_RUNS = 10


def _ts(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + ".000000Z"


def _record(rec: dict, t: float) -> tuple[str, bytes]:
    """(file name, bytes) of one immutable record, as `write_record` makes it."""
    ts = _ts(t)
    full = {"v": SCHEMA_VERSION, "ts": ts, **rec, "id": new_record_id(ts)}
    full["hash"] = record_hash(full)
    return f"{full['id']}.json", (canonical(full) + "\n").encode()


class _Chain:
    """One run's hash-chained event log, built in memory line by line."""

    def __init__(self, run: str) -> None:
        self.run, self.lines, self.prev = run, [], GENESIS

    def add(self, t: float, kind: str, step: int, attempt: int = 1, **data) -> None:
        rec = {"v": 1, "ts": _ts(t), "run": self.run, "attempt": attempt, "rank": 0, "step": step, "kind": kind,
               "data": data, "seq": len(self.lines), "prev": self.prev}
        rec["hash"] = record_hash(rec)
        self.prev = rec["hash"]
        self.lines.append((canonical(rec) + "\n").encode())


def _short_run(chain: _Chain, t: float, rng: random.Random) -> None:
    """A short run's whole log: start, checkpoints, maybe a restart, milestones, the end."""
    steps = rng.choice((200, 500, 1000))
    chain.add(t, "run_started", 0, total_steps=steps, world_size=8, resumed_from_step=0)
    for i in range(1, 5):
        chain.add(t + i * 60, "checkpoint_saved", steps * i // 5, path=f"ckpt/{i}", blocking_s=1.5)
    attempt = 1
    if rng.random() < 0.1:
        chain.add(t + 250, "restart", steps * 2 // 5, attempt=2, prev_attempt=1, next_attempt=2, cause="signal",
                  signal=9, resumed_from_step=steps * 2 // 5, steps_lost=3, downtime_s=20.0)
        attempt = 2
    for f in (0.25, 0.5, 0.75, 1.0):
        chain.add(t + 300 * f, "milestone", int(steps * f), attempt=attempt, fraction=f, total_steps=steps,
                  loss=3.0 - f)
    chain.add(t + 320, "run_finished", steps, attempt=attempt, final_loss=2.0)


def build(repo: Path, commits: int, runs: int, preregs: int, notes: int, reviews: int, people: int,
          seed: int = 0) -> None:
    """The whole year in one fast-import stream."""
    rng = random.Random(seed)
    out = bytearray()

    def put(path: str, data: bytes) -> None:
        out.extend(f"M 100644 inline {path}\n".encode() + b"data %d\n" % len(data) + data + b"\n")

    pids: list[str] = []
    longs = [_Chain(f"long-{i}") for i in range(min(LONG_RUNS, runs))]
    made_runs = {"prereg": 0, "run": 0, "note": 0, "review": 0}
    quota = {"prereg": preregs, "run": runs - len(longs), "note": notes, "review": reviews}
    reviewable: list[str] = []
    for c in range(commits):
        t = DAY0 + (c + 1) / commits * YEAR_S
        who = c % people
        out.extend(f"commit refs/heads/main\ncommitter P{who} <p{who}@lab.example> {int(t)} +0000\n".encode())
        msg = f"logbook: day {int((t - DAY0) // 86400) + 1}".encode()
        out.extend(b"data %d\n%s\n" % (len(msg), msg))
        if c == 0:
            put("logbook.yaml", b"entries_dir: entries\n")
            for chain in longs:
                chain.add(t, "run_started", 0, total_steps=1_000_000, world_size=1024, resumed_from_step=0)
                put(f"entries/runs/{chain.run}/run.json", _run_json(chain.run, t, None))
        # Each kind of record arrives at its own steady rate over the year.
        earlier = pids[:]  # a run answers to a preregistration of an earlier commit
        for kind in ("prereg", "run", "note", "review"):
            due = quota[kind] * (c + 1) // commits
            while made_runs[kind] < due:
                made_runs[kind] += 1
                n = made_runs[kind]
                if kind == "prereg":
                    pid = f"{_ts(t)[:10]}-hypothesis-{n:04d}-{n * 2654435761 % 65536:04x}"
                    front = _prereg_front(pid, n, t, who)
                    put(f"entries/prereg/{pid}.md", render_record(front, render_body(front)).encode())
                    pids.append(pid)
                elif kind == "run":
                    run = f"run-{n:04d}"
                    pid = rng.choice(earlier) if earlier and rng.random() < 0.8 else None  # preregistered before
                    put(f"entries/runs/{run}/run.json", _run_json(run, t, pid))
                    chain = _Chain(run)
                    _short_run(chain, t, rng)
                    put(f"entries/runs/{run}/events.jsonl", b"".join(chain.lines))
                    reviewable += [f"{run}:{i}" for i in range(len(chain.lines)) if b'"restart"' in chain.lines[i]]
                elif kind == "note":
                    name, data = _record({"kind": "note", "author": f"P{who}", "email": f"p{who}@lab.example",
                                          "text": "the restart cost matches the drill within 5%", "run": None,
                                          "step": None}, t)
                    put(f"entries/notes/{name}", data)
                else:
                    entry = rng.choice(reviewable) if reviewable else "long-0:0"
                    name, data = _record({"kind": "review", "entry": entry, "action": "comment",
                                          "text": "looked at it", "reviewer": f"P{who}",
                                          "email": f"p{who}@lab.example", "run": entry.split(":")[0],
                                          "entry_kind": "restart", "entry_ts": _ts(t)}, t)
                    put(f"entries/reviews/{name}", data)
        if longs and c % 10 == 0:  # every tenth commit, one long run in turn appends to its log
            chain = longs[(c // 10) % len(longs)]
            chain.add(t, "checkpoint_saved", int((c + 1) / commits * 1_000_000), path=f"ckpt/{c}", blocking_s=30.0)
            put(f"entries/runs/{chain.run}/events.jsonl", b"".join(chain.lines))
        out.extend(b"\n")
    subprocess.run(["git", "fast-import", "--quiet"], cwd=repo, input=bytes(out), check=True)
    subprocess.run(["git", "reset", "-q", "--hard", "main"], cwd=repo, check=True)


def _prereg_front(pid: str, n: int, t: float, who: int) -> dict:
    """A preregistration as `logbook prereg` writes one: a hypothesis, two predictions, a plan, a budget."""
    def final() -> dict:
        return {"kind": "final", "value": None}  # a fresh mapping each: one shared would be dumped as a YAML alias
    return {"schema": 1, "id": pid, "title": f"hypothesis {n}", "created": _ts(t)[:19] + "Z",
            "author": f"P{who} <p{who}@lab.example>",
            "hypothesis": f"Variant {n} reaches a lower validation loss than the baseline at the same budget.",
            "rationale": "It changed one thing against the last run.", "assumptions": [],
            "predictions": [
                {"text": "val_loss@final < 3 (80%)", "metric": "val_loss", "at": final(), "op": "<", "threshold": 3,
                 "tolerance": 0, "confidence": 0.8},
                {"text": "restarts@final <= 1", "metric": "restarts", "at": final(), "op": "<=", "threshold": 1,
                 "tolerance": 0}],
            "contingency": [],
            "config": {"path": "configs/tiny.yaml", "sha256": "0" * 64},
            "budget": {"text": "1000 steps", "amount": 1000, "unit": "steps"},
            "base_commit": "0" * 40}


def _run_json(run: str, t: float, pid: str | None) -> bytes:
    rec = {"run_id": run, "created": _ts(t), "prereg_id": pid, "exploratory": pid is None,
           "config_path": "configs/tiny.yaml", "config_hash": "0" * 64, "status": "finished", "deviations": []}
    return (json.dumps(rec, indent=2, sort_keys=True) + "\n").encode()


def _timed(cmd: list[str], repo: Path, env: dict[str, str], ok: tuple[int, ...] = (0,)) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=repo, env=env, capture_output=True)
    elapsed = time.perf_counter() - t0
    if proc.returncode not in ok:
        raise SystemExit(f"{' '.join(cmd)} exited {proc.returncode}: {proc.stderr[-600:]!r}")
    return elapsed


def measure(base: Path, scale: dict, repeat: int) -> dict:
    repo, env = scratch_repo(base)
    t0 = time.perf_counter()
    build(repo, **scale)
    built = time.perf_counter() - t0
    lb = [sys.executable, "-m", "logbook"]
    state = repo / ".logbook"
    figures: dict[str, list[float]] = {}

    def note(name: str, seconds: float) -> None:
        figures.setdefault(name, []).append(seconds)

    for _ in range(repeat):
        note("git log --raw", _timed(["git", "log", "--raw", "--no-abbrev", "--format=%H", "main"], repo, env))
        note("git cat-file --batch", _timed(["git", "cat-file", "--batch-all-objects", "--batch"], repo, env))
        shutil.rmtree(state, ignore_errors=True)
        note("verify cold", _timed([*lb, "verify"], repo, env))
        note("verify, nothing new", _timed([*lb, "verify"], repo, env))
        for name, args in (("ls", ["ls"]), ("ls --runs", ["ls", "--runs"]), ("status (a long run)", ["status", "long-0"]),
                           ("compare (two runs)", ["compare", "run-0001", "run-0002"]),
                           ("review --status", ["review", "--status"]), ("calibration", ["calibration"])):
            note(name, _timed([*lb, *args], repo, env, ok=(0, 3)))
    shutil.copytree(state, base / "state-before")
    (repo / "entries" / "notes" / "zz-one-more.json").write_bytes(_record(
        {"kind": "note", "author": "P1", "email": "p1@lab.example", "text": "one more", "run": None, "step": None},
        DAY0 + YEAR_S + 1)[1])
    subprocess.run(["git", "add", "-A"], cwd=repo, env=env, check=True)
    subprocess.run(["git", "commit", "-q", "-m", "one more"], cwd=repo, env=env, check=True)
    for _ in range(repeat):
        shutil.rmtree(state)
        shutil.copytree(base / "state-before", state)
        note("verify after one commit", _timed([*lb, "verify"], repo, env))
    # A pull of ten commits (notes over two days), as the clone's hook re-renders after it:
    # the check `render` makes first included (its verify state is as of before the pull), then without it.
    pulled_from = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout.strip()
    subprocess.run([*lb, "verify"], cwd=repo, env=env, capture_output=True)
    shutil.rmtree(base / "state-before")
    shutil.copytree(state, base / "state-before")
    for k in range(10):
        name, data = _record({"kind": "note", "author": "P2", "email": "p2@lab.example", "text": f"pulled note {k}",
                              "run": None, "step": None}, DAY0 + YEAR_S + 3600 * (k + 2) * 4)
        (repo / "entries" / "notes" / name).write_bytes(data)
        subprocess.run(["git", "add", "-A"], cwd=repo, env=env, check=True)
        subprocess.run(["git", "commit", "-q", "-m", f"pulled {k}"], cwd=repo, env=env, check=True)
    for _ in range(repeat):
        shutil.rmtree(state)
        shutil.copytree(base / "state-before", state)
        note("render --pulled (10 commits, with its verify)", _timed([*lb, "render", "--pulled", pulled_from], repo, env))
    for _ in range(repeat):
        note("render --pulled (10 commits, verified)", _timed([*lb, "render", "--pulled", pulled_from], repo, env))
    files = subprocess.run(["git", "ls-files", "entries"], cwd=repo, capture_output=True, text=True).stdout.count("\n")
    size = sum(p.stat().st_size for p in (repo / "entries").rglob("*") if p.is_file())
    return {"scale": scale, "files": files, "mb": size / 1e6, "build_s": built,
            "s": {k: statistics.median(v) for k, v in figures.items()}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--commits", type=int, default=10_000)
    ap.add_argument("--runs", type=int, default=1_000)
    ap.add_argument("--preregs", type=int, default=800)
    ap.add_argument("--notes", type=int, default=3_000)
    ap.add_argument("--reviews", type=int, default=5_000)
    ap.add_argument("--people", type=int, default=50)
    ap.add_argument("--fractions", default="0.1,0.33,1", help="fractions of the year to measure")
    ap.add_argument("--repeat", type=int, default=3, help="times each figure is measured; the median is printed")
    args = ap.parse_args()
    rows = []
    for frac in (float(x) for x in args.fractions.split(",")):
        scale = {k: max(LONG_RUNS + 2 if k == "runs" else 2, int(getattr(args, k) * frac))
                 for k in ("commits", "runs", "preregs", "notes", "reviews")}
        scale["people"] = args.people
        with tempfile.TemporaryDirectory(prefix="bench-lab-year-") as tmp:
            rows.append(measure(Path(tmp), scale, args.repeat))
        r = rows[-1]
        floor = r["s"]["git log --raw"]
        print(f"\n{frac:g} of the year: {scale['commits']} commits, {scale['runs']} runs, {r['files']} files, "
              f"{r['mb']:.1f} MB (built in {r['build_s']:.1f} s)", flush=True)
        for name, s in r["s"].items():
            print(f"  {name:<24} {s:7.2f} s  ({s / floor:5.1f}x git log --raw)", flush=True)
    big, small = rows[-1], rows[0]
    if len(rows) > 1:
        grew = big["scale"]["commits"] / small["scale"]["commits"]
        print(f"\ngrowth from {small['scale']['commits']} to {big['scale']['commits']} commits ({grew:.1f}x): "
              + ", ".join(f"{k} {big['s'][k] / small['s'][k] / grew:.2f}" for k in big["s"]) + " (1.0 = linear)")
    what = f"{big['scale']['commits']} commits, {big['scale']['runs']} runs"
    floor = big["s"]["git log --raw"]  # the walk verify makes: every commit and the paths it changed
    for name, goal in (("verify cold", 30), ("verify after one commit", 1), ("verify, nothing new", 0.5)):
        result(f"{name}, {what}", round(big["s"][name], 2), "s", f"<= {goal}", big["s"][name] <= goal)
    result(f"verify cold over `git log --raw` of the same history, {what}", round(big["s"]["verify cold"] / floor, 1), "ratio", "<= 3",
           big["s"]["verify cold"] / floor <= 3)
    for name in ("ls", "ls --runs", "status (a long run)", "compare (two runs)", "review --status", "calibration"):
        result(f"{name}, {what}", round(big["s"][name], 2), "s", "<= 1", big["s"][name] <= 1)
    for name in ("render --pulled (10 commits, with its verify)", "render --pulled (10 commits, verified)"):
        result(f"{name}, {what}", round(big["s"][name], 2), "s", "<= 1", big["s"][name] <= 1)
    result(f"committed entries/, {what}", round(big["mb"], 1), "MB", "<= 500", big["mb"] <= 500)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
