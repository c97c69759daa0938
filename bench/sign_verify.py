"""What signed identity costs: signing one record, and `verify`'s identity check over many signed records.

Builds a scratch repository with `signing:` on and a real ed25519 key, writes N
review records (one file each, as `logbook review` does) and signs each as the
review command does, commits them, then measures:

- signing one record (an `ssh-keygen -Y sign` call and the signature file), median;
- the identity check (`signed_records.check_identity`) from cold: no cache, two
  `ssh-keygen` calls per signature;
- the same check warm: every answer cached under `.logbook/`, no `ssh-keygen`;
- `logbook verify` as a whole, warm.

    python3 bench/sign_verify.py [--records 1000] [--quick]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._result import result  # noqa: E402


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout


def build(base: Path, n: int) -> tuple[Path, list[float]]:
    from logbook.core.project import open_project
    from logbook.eventlog.files import write_record
    from logbook.records.init import init_logbook
    from logbook.trust.signatures import sign_digest

    repo = base / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "config", "user.name", "Ada")
    _git(repo, "config", "user.email", "ada@lab.example")
    (repo / "README.md").write_text("bench\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "initial")
    os.chdir(repo)
    init_logbook(entries_dir="entries")
    key = base / "ada_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    kind, blob = Path(f"{key}.pub").read_text().split()[:2]
    (repo / "trust").mkdir()
    (repo / "trust/allowed_signers").write_text(f"ada@lab.example {kind} {blob}\n")
    with open(repo / "logbook.yaml", "a") as f:
        f.write("signing:\n  allowed_signers: trust/allowed_signers\n  require: true\n")
    _git(repo, "config", "gpg.format", "ssh")
    _git(repo, "config", "user.signingkey", str(key))
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "signing")
    project = open_project(repo)
    times = []
    for i in range(n):
        rec = write_record(project.reviews_dir, {"kind": "review", "entry": f"r:{i}", "action": "comment",
                                                 "text": f"review {i}", "reviewer": "Ada", "email": "ada@lab.example"})
        t = time.perf_counter()
        sign_digest(project, rec["hash"], what="review")
        times.append(time.perf_counter() - t)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "reviews")
    return repo, times


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=1000)
    ap.add_argument("--quick", action="store_true", help="200 records")
    args = ap.parse_args()
    if args.quick:
        args.records = 200
    from logbook.core.project import open_project
    from logbook.trust.signed_records import check_identity

    with tempfile.TemporaryDirectory() as tmp:
        repo, sign_times = build(Path(tmp), args.records)
        project = open_project(repo)
        cache = repo / ".logbook" / "signatures-cache.json"
        cache.unlink(missing_ok=True)
        t = time.perf_counter()
        report = check_identity(project, None, {})
        cold = time.perf_counter() - t
        assert all(r.signed_by == ["ada@lab.example"] for r in report.records), "a signature did not check"
        t = time.perf_counter()
        check_identity(project, None, {})
        warm = time.perf_counter() - t
        subprocess.run([sys.executable, "-m", "logbook", "verify"], cwd=repo, capture_output=True)  # history cache
        t = time.perf_counter()
        r = subprocess.run([sys.executable, "-m", "logbook", "verify"], cwd=repo, capture_output=True)
        whole = time.perf_counter() - t
        assert r.returncode == 0, r.stdout + r.stderr
    n = args.records
    result("signing one record (median)", round(statistics.median(sign_times), 4), "s", "<= 0.3", statistics.median(sign_times) <= 0.3)
    result(f"identity check, {n} signed records, cold", round(cold, 2), "s", "<= 10", cold <= 10)
    result(f"identity check, {n} signed records, warm", round(warm, 3), "s", "<= 1", warm <= 1)
    result(f"logbook verify, {n} signed records, warm (process)", round(whole, 2), "s", "<= 1", whole <= 1)


if __name__ == "__main__":
    main()
