"""What a forger with push rights does, with the project's own code: re-chain logs, rewrite history, force-push.

Every helper works on a real clone (`team.Clone`) with git plumbing and the
chain code the logbook itself uses (`logbook.eventlog.chain`), so a check that a
forger can satisfy by running the same code again is shown to prove nothing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from logbook.eventlog.chain import GENESIS, canonical, iter_records, record_hash


def read_log(path: Path) -> list[dict[str, Any]]:
    return list(iter_records(path))


def rechain(path: Path, records: list[dict[str, Any]]) -> None:
    """Write `records` as a log whose seq, prev and hash are all worked out again: it verifies line by line."""
    prev, out = GENESIS, []
    for seq, rec in enumerate(records):
        full = {k: v for k, v in rec.items() if k != "hash"}
        full["seq"], full["prev"] = seq, prev
        full["hash"] = record_hash(full)
        prev = full["hash"]
        out.append(canonical(full) + "\n")
    path.write_text("".join(out), encoding="utf-8")


def append_forged(path: Path, kind: str, data: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """Append one line after the log's last, chained to it, stamped a second after it."""
    recs = read_log(path)
    last = recs[-1]
    ts = last["ts"][:17] + f"{min(59, int(last['ts'][17:19]) + 1):02d}" + last["ts"][19:]
    line = {"v": last.get("v", 1), "ts": ts, "run": last.get("run"), "attempt": last.get("attempt"), "rank": 0,
            "step": last.get("step"), "kind": kind, "data": data, **fields}
    rechain(path, [*recs, line])
    return read_log(path)[-1]


def fold_into(clone) -> None:
    """`git commit --amend` of everything under entries/, keeping the message: the change hides in the old commit."""
    clone.git("add", "-A", "entries")
    clone.git("commit", "-q", "--amend", "--no-edit", "--allow-empty")


def force_push(clone) -> None:
    clone.git("push", "-q", "--force", "origin", "HEAD:main")


def json_out(res) -> dict[str, Any]:
    return json.loads(res.stdout)
