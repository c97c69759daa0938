"""Seconds per third-party stamp on a local RFC 3161 authority (OpenSSL's `ts -reply` on 127.0.0.1).

Three figures; the goal is 0.3 s per stamped record (the warm one):
- warm: one `stamp_digest` in a process that has stamped before (request, HTTP round trip, `ts -reply`,
  the token checked against the CA, the file written), median over --n records;
- cold: the same in a fresh interpreter, imports included: what `logbook prereg` pays on top;
- check: one stamp checked offline (what `verify` pays per stamp), median.

    python3 bench/stamp_cost.py [--n 30]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
GOAL_S = 0.3

from bench._result import result  # noqa: E402
from tsa_fixture import LocalTsa, Pki, _TsaServer, make_ca, make_tsa_cert  # noqa: E402

_COLD = """
import hashlib, sys, time
t0 = time.perf_counter()
from logbook.core.project import open_project
from logbook.trust.stamp_store import stamp_digest
out = stamp_digest(open_project(), hashlib.sha256(sys.argv[1].encode()).hexdigest(), what="bench")
assert out.written, out.pending
print(time.perf_counter() - t0)
"""


def _repo(base: Path, tsa: LocalTsa, env: dict[str, str]) -> Path:
    repo = base / "repo"
    repo.mkdir()
    for args in (["init", "-q", "-b", "main"], ["commit", "-q", "--allow-empty", "-m", "init"]):
        subprocess.run(["git", *args], cwd=repo, env=env, check=True)
    subprocess.run([sys.executable, "-m", "logbook", "init"], cwd=repo, env=env, check=True, capture_output=True)
    subprocess.run(["git", "add", "-A"], cwd=repo, env=env, check=True)
    subprocess.run(["git", "commit", "-q", "-m", "logbook init"], cwd=repo, env=env, check=True)
    tsa.configure(repo)
    return repo


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=30, help="records stamped for the warm median")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="stamp-bench-") as tmp:
        base = Path(tmp)
        env = {**os.environ, "PYTHONPATH": str(ROOT), "GIT_AUTHOR_NAME": "Bench", "GIT_AUTHOR_EMAIL": "b@example.org",
               "GIT_COMMITTER_NAME": "Bench", "GIT_COMMITTER_EMAIL": "b@example.org"}
        make_ca(base / "pki")
        make_tsa_cert(base / "pki", base / "pki")
        server = _TsaServer(Pki(base / "pki", base / "pki" / "ca.pem"))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        tsa = LocalTsa(f"http://127.0.0.1:{server.server_address[1]}/", base / "pki" / "ca.pem", server)
        repo = _repo(base, tsa, env)
        os.chdir(repo)
        from logbook.core.project import open_project
        from logbook.trust.stamp_store import check_stamp_file, stamp_digest

        project = open_project(repo)
        stamp_digest(project, "0" * 64, what="warm-up")
        warm, check = [], []
        for i in range(args.n):
            digest = hashlib.sha256(f"record {i}".encode()).hexdigest()
            t0 = time.perf_counter()
            out = stamp_digest(project, digest, what=f"record {i}")
            warm.append(time.perf_counter() - t0)
            assert out.written, out.pending
            t0 = time.perf_counter()
            check_stamp_file(project, out.written[0])
            check.append(time.perf_counter() - t0)
        cold = [float(subprocess.run([sys.executable, "-c", _COLD, f"cold {i}"], cwd=repo, env=env, check=True,
                                     capture_output=True, text=True).stdout) for i in range(5)]
        server.shutdown()
    for name, values in (("warm", warm), ("cold", cold), ("check", check)):
        med = statistics.median(values)
        print(f"{name:>5}: median {med * 1000:7.1f} ms  (min {min(values) * 1000:.1f}, max {max(values) * 1000:.1f}, "
              f"n={len(values)})")
    result("stamp, warm (s per record)", round(statistics.median(warm), 4), "s", f"<= {GOAL_S}",
           statistics.median(warm) <= GOAL_S)
    # Mostly imports (cryptography, rfc3161-client): paid once by a command, not per record.
    result("first stamp of a fresh process, imports included (s)", round(statistics.median(cold), 4), "s", "-", None)
    result("stamp check offline (s per stamp)", round(statistics.median(check), 5), "s", "-", None)


if __name__ == "__main__":
    main()
