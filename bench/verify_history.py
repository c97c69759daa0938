"""`logbook verify` over a logbook the size of Llama 3 405B's run: from cold, and after one new commit.

A synthetic logbook is written straight into git with `git fast-import` (the
records' bytes are what verify reads, not how they were made): 54 days, one
run of ~1M steps with 419 restarts and ~1,800 checkpoints in its hash-chained
event log, a downsampled metrics log (one line per 100 steps), one
preregistration, and 40 people writing notes and reviews as one file per record,
all spread over a few hundred commits by 40 identities. Every commit appends to
the run's logs, so every commit changes a log that verify must check as a
prefix of the next version.

For each size (a fraction of the commits) it prints, measured in one run:
`verify` from cold (no cache, a fresh `python3 -m logbook verify`), `verify`
again with nothing new (answered from the last report's memo,
`logbook/records/verify_memo.py`; the same with the memo removed is printed
beside it), and `verify` after one more commit (a note and more
events). Goals, from issue #12: cold <= 30 s, after one commit <= 1 s.

Stamped (the default; `--unstamped` leaves it out): logbook.yaml names a real
RFC 3161 authority on 127.0.0.1 (OpenSSL's `ts -reply`, the tests' own
`tests/tsa_fixture.py`) with `require: true` and commits its CA, and every
token is in place, fetched from that authority while the history is built and
committed where it lands: the preregistration's and the run record's in the
first commit, the chain head at each `checkpoint_saved` line in the commit that
adds the line, the final head in the one more commit. The run's clock starts a
minute before the build and its span is squeezed into four minutes, so every stamp falls within the
clock-skew allowance of the line it covers and
`verify` can say "before". Goals, from issue #35: cold <= 10 s, nothing new
<= 1 s. Each figure is the median of `--repeat` runs; each verify's CPU
seconds are printed too (on a shared machine the wall time counts the waits
for a core).

    python3 bench/verify_history.py [--commits 300] [--sizes 0.25,0.5,1] [--quick] [--unstamped]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Iterator

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from bench._result import result  # noqa: E402
from logbook.core.tsa_settings import authority_key  # noqa: E402
from logbook.eventlog.chain import GENESIS, canonical, record_hash  # noqa: E402
from logbook.promises.prereg_format import record_hash as prereg_hash, render_record, split_record  # noqa: E402
from logbook.trust.tsa_client import read_anchor_file, request_token  # noqa: E402
from tsa_fixture import CA_REL, LocalTsa, Pki, _serve, _TsaServer, make_ca, make_tsa_cert  # noqa: E402

DAYS = 54
STEPS = 1_000_000
RESTARTS = 419
CHECKPOINTS = 1_800
PEOPLE = 40
PID = "2026-01-01-llama-scale-run-abcd"
DAY0 = 1_767_225_600  # 2026-01-01T00:00:00Z
SPAN_S = DAYS * 86400
"""The run's claimed span. Stamped, it is squeezed into the few minutes the build takes: verify finds a stamp
earlier than the line it covers (beyond the 300 s a clock may be off) a forgery, and the authority's clock is now."""
STAMPED_SPAN_S = 240


def _ts(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + ".000000Z"


class _Log:
    """A hash-chained log built in memory, line by line, as `ChainedLog` writes it."""

    def __init__(self) -> None:
        self.lines: list[bytes] = []
        self.prev = GENESIS

    def add(self, t: float, kind: str, step: int, **data) -> None:
        rec = {"v": 1, "ts": _ts(t), "run": "llama", "attempt": 0, "rank": 0, "step": step, "kind": kind,
               "data": data, "seq": len(self.lines), "prev": self.prev}
        rec["hash"] = record_hash(rec)
        self.prev = rec["hash"]
        self.lines.append((canonical(rec) + "\n").encode())


def _timeline(rng: random.Random, day0: float) -> list[tuple[float, str, int, dict]]:
    """(time, kind, step, data) of the run's events over 54 days from `day0`, in order."""
    span = SPAN_S
    DAY0 = day0  # noqa: N806 (the module's constant, moved)
    evs = [(DAY0 + 60, "run_started", 0, {"world_size": 16384})]
    for i in range(CHECKPOINTS):
        f = (i + 1) / (CHECKPOINTS + 1)
        evs.append((DAY0 + f * span, "checkpoint_saved", int(f * STEPS), {"path": f"ckpt/{i}", "seconds": 38.0}))
    for i in range(RESTARTS):
        f = rng.random()
        evs.append((DAY0 + f * span, "restart", int(f * STEPS), {"cause": rng.choice(["signal", "exception"]),
                                                                "next_attempt": i + 2}))
    for p in (10, 25, 50, 75, 100):
        evs.append((DAY0 + p / 100 * span, "milestone", p * STEPS // 100, {"fraction": p / 100}))
    return sorted(evs, key=lambda e: e[0])


def _prereg(day0: float) -> bytes:
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(day0 - 3600))
    front = {"schema": 1, "id": PID, "title": "405B at scale", "created": created,
             "author": "Lead <lead@lab.example>", "predictions": [], "contingency": []}
    return render_record(front, "# 405B at scale\n\nThe run finishes.\n").encode()


@contextmanager
def _local_tsa(folder: Path) -> Iterator[LocalTsa]:
    """The tests' RFC 3161 authority (OpenSSL's `ts -reply`) on 127.0.0.1, with a CA made for it in `folder`."""
    ca = make_ca(folder)
    make_tsa_cert(folder, folder)
    server = _serve(_TsaServer(Pki(folder, ca)))
    tsa = LocalTsa(f"http://127.0.0.1:{server.server_address[1]}/", ca, server)
    try:
        yield tsa
    finally:
        tsa.stop()


class _Stamper:
    """Real tokens from the local authority, for the build's stream: what `prereg`, `run` and the launcher's
    `HeadStamper` would have fetched. Tokens are kept by digest, so every size of one bench run (same
    events, other commit splits) asks for each once."""

    def __init__(self, tsa: LocalTsa) -> None:
        self.tsa = tsa
        self.trust = read_anchor_file(tsa.ca_pem_path)
        self.key = authority_key(tsa.url)
        self.tokens: dict[str, tuple[bytes, datetime]] = {}
        self.seconds = 0.0

    def settings(self) -> bytes:
        """logbook.yaml naming the authority, with every stamp required: a missing token is exit 4."""
        cfg = {"entries_dir": "entries", "timestamping": {"authorities": [{"url": self.tsa.url, "ca": CA_REL}],
                                                          "require": True, "timeout_s": 5}}
        return yaml.safe_dump(cfg, sort_keys=False).encode()

    def stamp(self, digest: str, after: datetime | None = None) -> tuple[str, bytes, datetime]:
        """(the stamp file's path, the token, its time), strictly later than `after` (the authority reads
        seconds: a token in the same second as its preregistration's orders nothing)."""
        if digest not in self.tokens:
            t0 = time.perf_counter()
            while True:
                tsr, when = request_token(self.tsa.url, bytes.fromhex(digest), self.trust, 30)
                if after is None or when > after:
                    break
                time.sleep(0.25)
            self.seconds += time.perf_counter() - t0
            self.tokens[digest] = (tsr, when)
        tsr, when = self.tokens[digest]
        return f"entries/stamps/{digest}/{self.key}.tsr", tsr, when


def _fast_import(repo: Path, commits: int, day0: float = DAY0, stamper: _Stamper | None = None,
                 seed: int = 0) -> int:
    """Write the whole history in one `git fast-import` stream; returns how many stamps it holds."""
    rng = random.Random(seed)
    events, metrics = _Log(), []
    timeline = _timeline(rng, day0)
    DAY0 = day0  # noqa: N806 (the module's constant, moved)
    stamps = 0
    span = SPAN_S
    out = bytearray()

    def blob(data: bytes) -> None:
        out.extend(b"data %d\n" % len(data) + data + b"\n")

    def stamp(digest: str, after: datetime | None = None) -> datetime:
        nonlocal stamps
        path, tsr, when = stamper.stamp(digest, after)
        out.extend(f"M 100644 inline {path}\n".encode())
        blob(tsr)
        stamps += 1
        return when

    run = {"run_id": "llama", "created": _ts(DAY0), "prereg_id": PID, "config_path": "configs/405b.yaml",
           "config_hash": "0" * 64, "status": "running", "deviations": []}
    k = 0
    for c in range(commits):
        t_end = DAY0 + (c + 1) / commits * span
        who = c % PEOPLE
        out.extend(f"commit refs/heads/main\ncommitter P{who} <p{who}@lab.example> {int(t_end)} +0000\n".encode())
        msg = f"logbook: day {int((t_end - DAY0) // 86400) + 1}".encode()
        out.extend(b"data %d\n%s\n" % (len(msg), msg))
        if c == 0:
            prereg, record = _prereg(day0), (json.dumps(run, indent=2, sort_keys=True) + "\n").encode()
            out.extend(b"M 100644 inline logbook.yaml\n")
            blob(stamper.settings() if stamper else b"entries_dir: entries\n")
            out.extend(f"M 100644 inline entries/prereg/{PID}.md\n".encode())
            blob(prereg)
            out.extend(b"M 100644 inline entries/runs/llama/run.json\n")
            blob(record)
            if stamper:
                out.extend(f"M 100644 inline {CA_REL}\n".encode())
                blob(stamper.tsa.ca_pem_path.read_bytes())
                promised = stamp(prereg_hash(*split_record(prereg.decode(), f"{PID}.md")))
                stamp(hashlib.sha256(record).hexdigest(), after=promised)  # the run starts after its promise
        while k < len(timeline) and timeline[k][0] <= t_end:
            t, kind, step, data = timeline[k]
            events.add(t, kind, step, **data)
            if stamper and kind == "checkpoint_saved":  # the launcher stamps the head at every checkpoint
                stamp(events.prev)
            k += 1
        last = int((c + 1) / commits * STEPS)
        metrics.extend(b'{"step":%d,"loss":%.4f}\n' % (s, 2 + 8 / (1 + s / 1e4)) for s in
                       range(len(metrics) * 100, last, 100))
        for name, lines in (("events", events.lines), ("metrics", metrics)):
            out.extend(f"M 100644 inline entries/runs/llama/{name}.jsonl\n".encode())
            blob(b"".join(lines))
        for j in range(40):  # notes and reviews by the 40 people: one immutable file each
            kind = "notes" if j % 2 else "reviews"
            author = rng.randrange(PEOPLE)
            rec = {"author": f"P{author} <p{author}@lab.example>", "ts": _ts(t_end - j), "about": f"llama:{k}",
                   "text": "checked the restart cost against the drill; matches within 5%" * 2}
            out.extend(f"M 100644 inline entries/{kind}/{c:04d}-{j:02d}-p{author}.json\n".encode())
            blob((json.dumps(rec, indent=2, sort_keys=True) + "\n").encode())
        out.extend(b"\n")
    subprocess.run(["git", "fast-import", "--quiet"], cwd=repo, input=bytes(out), check=True)
    subprocess.run(["git", "reset", "-q", "--hard", "main"], cwd=repo, check=True)
    return stamps


def _env(home: Path) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HOME": str(home), "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_CONFIG_GLOBAL": str(home / ".gitconfig"), "CI": "1"}
    env.pop("LOGBOOK_DEBUG", None)
    return env


CPU: list[float] = []
"""CPU seconds (user + system) of each `verify` process, in order: on a shared machine the wall time also
counts the waits for a core, these do not."""


def _verify(repo: Path, env: dict[str, str]) -> tuple[float, dict]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "logbook", "verify", "--json"], cwd=repo, env=env,
                          capture_output=True, text=True)
    elapsed = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    report = json.loads(proc.stdout or "{}")
    if proc.returncode != 0 or not report.get("ok"):
        raise SystemExit(f"verify failed ({proc.returncode}): {proc.stderr[-800:]} {proc.stdout[-800:]}")
    return elapsed, report


def _one_more_commit(repo: Path, env: dict[str, str], day0: float, stamper: _Stamper | None) -> None:
    note = repo / "entries" / "notes" / "zz-new.json"
    note.write_text('{"author": "P1", "text": "one more"}\n')
    log = repo / "entries" / "runs" / "llama" / "events.jsonl"
    last = json.loads(log.read_bytes().rstrip(b"\n").rsplit(b"\n", 1)[-1])
    rec = {"v": 1, "ts": _ts(day0 + SPAN_S + 1), "run": "llama", "attempt": 0, "rank": 0, "step": STEPS,
           "kind": "run_finished", "data": {}, "seq": last["seq"] + 1, "prev": last["hash"]}
    rec["hash"] = record_hash(rec)
    with open(log, "a") as f:
        f.write(canonical(rec) + "\n")
    if stamper:  # the launcher stamps the final head when the launch ends
        path, tsr, _when = stamper.stamp(rec["hash"])
        (repo / path).parent.mkdir(parents=True)
        (repo / path).write_bytes(tsr)
    subprocess.run(["git", "add", "-A"], cwd=repo, env=env, check=True)
    subprocess.run(["git", "commit", "-q", "-m", "one more"], cwd=repo, env=env, check=True)


def scratch_repo(base: Path) -> tuple[Path, dict[str, str]]:
    """An empty repository under `base`, and the environment of a scratch HOME whose git identity is the bench's."""
    home = base / "home"
    home.mkdir(parents=True)
    (home / ".gitconfig").write_text("[user]\n\tname = Bench\n\temail = bench@example.org\n")
    env = _env(home)
    repo = base / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=repo, env=env, check=True)
    return repo, env


def measure(base: Path, commits: int, day0: float = DAY0, stamper: _Stamper | None = None, repeat: int = 1) -> dict:
    """Build the history, then time `verify` `repeat` times each way (the medians are kept): cold (no
    `.logbook/`), nothing new, and after one more commit (from the caches as they were before it)."""
    repo, env = scratch_repo(base)
    t0 = time.perf_counter()
    stamps = _fast_import(repo, commits, day0, stamper)
    built = time.perf_counter() - t0
    files = int(subprocess.run(["git", "ls-files", "entries"], cwd=repo, capture_output=True, text=True,
                               check=True).stdout.count("\n"))
    size = sum(p.stat().st_size for p in (repo / "entries").rglob("*") if p.is_file())
    state = repo / ".logbook"
    colds, warms, ones, cpu_cold, cpu_warm, cpu_one = [], [], [], [], [], []
    unmemos, cpu_unmemo = [], []
    for _ in range(repeat):
        shutil.rmtree(state, ignore_errors=True)
        cold, report = _verify(repo, env)
        cpu_cold.append(CPU[-1])
        warm, again = _verify(repo, env)
        cpu_warm.append(CPU[-1])
        (state / "verified-report.json").unlink()  # side by side: the same, re-reading what the memo spares
        unmemo, _ = _verify(repo, env)
        cpu_unmemo.append(CPU[-1])
        colds.append(cold)
        warms.append(warm)
        unmemos.append(unmemo)
    shutil.copytree(state, base / "state-before")
    _one_more_commit(repo, env, day0, stamper)
    for _ in range(repeat):
        shutil.rmtree(state)
        shutil.copytree(base / "state-before", state)
        one, after = _verify(repo, env)
        cpu_one.append(CPU[-1])
        ones.append(one)
    cold, warm, one = (statistics.median(v) for v in (colds, warms, ones))
    assert report["commits_checked"] == commits and again["commits_checked"] == 0 and after["commits_checked"] == 1
    if stamper:  # every token is in place and checked, and the run is proven to come after its promise
        for rep, n in ((report, stamps), (again, stamps), (after, stamps + 1)):
            t = rep["timestamps"]
            assert t["stamps"] == n and not t["pending"] and t["runs"]["llama"]["order"] == "before", t
    return {"commits": commits, "files": files, "mb": size / 1e6, "events": len(report["logs"]) and
            sum(1 for _ in open(repo / "entries/runs/llama/events.jsonl", "rb")),
            "build_s": built, "cold_s": cold, "warm_s": warm, "one_commit_s": one, "stamps": stamps,
            "warm_no_memo_s": statistics.median(unmemos),
            "all_s": {"cold": colds, "warm": warms, "warm_no_memo": unmemos, "one_commit": ones},
            "cpu_s": {k: statistics.median(v) for k, v in (("cold", cpu_cold), ("warm", cpu_warm),
                                                           ("warm_no_memo", cpu_unmemo), ("one_commit", cpu_one))}}


def _print_row(r: dict) -> None:
    every = "  ".join(f"{k} " + "/".join(f"{x:.2f}" for x in v) for k, v in r["all_s"].items())
    print(f"{r['commits']:>5} commits  {r['files']:>6} files  {r['stamps']:>5} stamps  {r['mb']:7.1f} MB  "
          f"{r['events']:>5} events  cold {r['cold_s']:6.2f} s  nothing new {r['warm_s']:5.2f} s  "
          f"one commit {r['one_commit_s']:5.2f} s  (medians; built in {r['build_s']:.1f} s; each: {every})",
          flush=True)
    print("      CPU (user+sys) medians: " + "  ".join(f"{k} {v:.2f} s" for k, v in r["cpu_s"].items()), flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--commits", type=int, default=300, help="commits at full size (a few hundred)")
    ap.add_argument("--sizes", default="0.25,0.5,1", help="fractions of --commits to measure")
    ap.add_argument("--quick", action="store_true", help="60 commits, one size")
    ap.add_argument("--unstamped", action="store_true", help="no authority and no stamps (issue #12's logbook)")
    ap.add_argument("--repeat", type=int, default=3, help="times each figure is measured; the median is printed")
    args = ap.parse_args()
    sizes = [1.0] if args.quick else [float(x) for x in args.sizes.split(",")]
    full = 60 if args.quick else args.commits
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-verify-tsa-") as pki:
        tsa = None if args.unstamped else _local_tsa(Path(pki))
        stamper = _Stamper(tsa.__enter__()) if tsa else None
        global SPAN_S
        SPAN_S = STAMPED_SPAN_S if stamper else SPAN_S
        day0 = time.time() - 60 if stamper else DAY0  # stamps fetched now fall inside the run's span
        try:
            for frac in sizes:
                with tempfile.TemporaryDirectory(prefix="bench-verify-") as tmp:
                    rows.append(measure(Path(tmp), max(2, int(full * frac)), day0, stamper, args.repeat))
                _print_row(rows[-1])
        finally:
            if tsa:
                tsa.__exit__(None, None, None)
    if stamper:
        print(f"{len(stamper.tokens)} tokens fetched from the local TSA in {stamper.seconds:.1f} s "
              f"({stamper.seconds / max(1, len(stamper.tokens)) * 1000:.0f} ms each)")
    big = rows[-1]
    what = f"{big['commits']} commits, {big['files']} files" + (f", {big['stamps']} stamps" if stamper else "")
    cold_goal = 10 if stamper else 30
    result(f"verify from cold, {what}", round(big["cold_s"], 2), "s", f"<= {cold_goal}", big["cold_s"] <= cold_goal)
    if stamper:
        result(f"verify with nothing new, {what}", round(big["warm_s"], 2), "s", "<= 1", big["warm_s"] <= 1)
        result(f"verify with nothing new and no report memo (each check's own cache only), {what}",
               round(big["warm_no_memo_s"], 2), "s", "-", None)
    result(f"verify after one new commit, {what}", round(big["one_commit_s"], 2), "s",
           "<= 1", big["one_commit_s"] <= 1)
    for k, v in big["cpu_s"].items():  # what the wall figures would be on an idle core
        result(f"verify CPU seconds (user+sys), {k.replace('_', ' ')}, {what}", round(v, 2), "s", "-", None)
    print(f"load average at the end: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} on {os.cpu_count()} cores")
    if len(rows) > 1:
        small = rows[0]
        growth = (big["cold_s"] / small["cold_s"]) / (big["commits"] / small["commits"])
        result("verify cold time growth per commit growth (1.0 = linear)", round(growth, 2), "ratio", "-", None)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
