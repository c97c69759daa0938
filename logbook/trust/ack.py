"""Acknowledgements: the one way forward from a `verify` finding that was a mistake, keeping the evidence.

A record is never edited, and a history break cannot be undone on clones that
already hold it: without a way forward, a mistake (a record edited by hand and
committed, a stray line in a log) would leave every clone at exit 4 for good.
`logbook acknowledge PATH --reason TEXT` writes one immutable record,
`<entries>/acknowledgements/<record id>.json`:

    {"kind": "acknowledgement", "path": "entries/runs/qknorm/events.jsonl",
     "findings": [{"kind": "after_end", "line": 13, "message": "..."}],
     "sha256": "<the file's bytes as they are now>", "size": 4711,
     "reason": "...", "author": "Ada", "email": "ada@lab.example", "id": ..., "ts": ..., "hash": ...}

It names the broken record by its path and the hash of its bytes (for a log,
of its first `size` bytes, so the log may still grow), and the finding kinds
it covers. Decision: an acknowledgement takes effect only once reviewed:
it enters `logbook review`'s queue as `ack:<record id>` and needs
`review_approvals` approvals from people other than its author (whatever
`review_self_approval` says: whoever could have forged the record must not be
the one to wave it through). Until then `verify` still exits 4, and says the
acknowledgement awaits review. Once approved, the finding is reported as
acknowledged (exit 0), not hidden: `verify` lists it, `--json` carries it, and
the record's bytes stay what they are, so the chronicle still shows it. A
later change to the same file (other bytes) is not covered: it is a new finding.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from logbook.core.errors import RefusedError, UsageError
from logbook.core.identity import signing_identity
from logbook.core.project import Project
from logbook.core.recordkinds import classify
from logbook.eventlog import chain
from logbook.eventlog.files import damaged_records, iter_folder, write_record
from logbook.promises.reviews import review_records
from logbook.trust.people import People, Who
from logbook.trust.signatures import sign_record

KIND = "acknowledgement"
ENTRY_PREFIX = "ack:"
"""Review-queue ids of acknowledgements: `ack:<record id>`."""
MAX_REASON_CHARS = 4000


@dataclass
class Ack:
    """One acknowledgement record as `verify` uses it."""

    id: str
    path: str
    """The acknowledged file, relative to the repository root."""
    kinds: set[tuple[str, int | None]]
    """The findings it covers: (kind, line), the line None for a finding about a whole file."""
    sha256: str
    """The file's bytes when acknowledged (`absent` for a file that was gone); for a log, its first `size` bytes."""
    size: int
    author: str
    email: str
    approved_by: list[str] = field(default_factory=list)
    """Reviewers other than the author whose latest verdict is approve."""


def acknowledgements_dir(project: Project) -> Path:
    return project.entries / "acknowledgements"


def digest_of(project: Project, rel: str, size: int | None = None) -> tuple[str, int]:
    """(sha256, size) of the file's bytes now, or of its first `size` bytes; ("absent", 0) when it is gone."""
    path = project.root / rel
    try:
        data = path.read_bytes() if path.is_file() and not path.is_symlink() else None
    except OSError:
        data = None
    if data is None:
        return "absent", 0
    if size is not None:
        data = data[:size]
    return hashlib.sha256(data).hexdigest(), len(data)


def acknowledge(project: Project, path: str, reason: str, findings: list[Any]) -> dict[str, Any]:
    """Write an acknowledgement of `findings` (verify's, all about `path`); returns the record written.

    Refuses when `findings` is empty: there is nothing to acknowledge.
    """
    reason = (reason or "").strip()
    if not reason:
        raise UsageError("the reason is empty", hint="say what went wrong and why the record stays as it is")
    if len(reason) > MAX_REASON_CHARS:
        raise UsageError(f"the reason is {len(reason):,} characters; the limit is {MAX_REASON_CHARS:,}")
    if not findings:
        raise RefusedError(f"verify finds nothing wrong with {path}: there is nothing to acknowledge",
                           hint="`logbook verify` names the records it reports, by their path")
    ident = signing_identity(project.root, "an acknowledgement")
    sha, size = digest_of(project, path)
    rec = {"kind": KIND, "path": path, "sha256": sha, "size": size, "reason": reason,
           "findings": [{"kind": f.kind, "line": f.line, "message": f.message, "had": f.had, "lost": f.lost}
                        for f in findings],
           "author": ident.name, "email": ident.email}
    written = write_record(acknowledgements_dir(project), rec, ts=chain.utc_now())
    written["warnings"] = sign_record(project, written["hash"], what=f"acknowledgement {ENTRY_PREFIX}{written['id']}")
    return written


def load_acks(project: Project) -> list[Ack]:
    """Every intact acknowledgement, with who approved it: distinct people, never its author.

    People are told apart as reviews tell them apart (`logbook.trust.people`): by the key that signed the
    record where records are signed, so an author approving under a second e-mail is still the author.
    """
    acks = list(iter_folder(acknowledgements_dir(project)))
    if not acks:
        return []  # the reviews are read only for what they say of acknowledgements: a lab's year has 5,000
    with People(project) as people:
        verdicts: dict[str, dict[str, tuple[str, Who]]] = {}
        for r in review_records(project):
            entry = r.get("entry")
            if isinstance(entry, str) and entry.startswith(ENTRY_PREFIX) and r.get("action") in ("approve", "request_changes"):
                who = people.of_review(r)
                verdicts.setdefault(entry, {})[who.key] = (str(r["action"]), who)
        out = []
        for rec in acks:
            if rec.get("kind") != KIND or rec.get("hash") != chain.record_hash(rec) or not isinstance(rec.get("path"), str):
                continue  # a damaged one covers nothing (verify reports it)
            author = people.of_author(rec)
            latest = verdicts.get(f"{ENTRY_PREFIX}{rec.get('id')}", {})
            approved = [who.name or who.email for action, who in latest.values()
                        if action == "approve" and not who.same_person(author)]
            blocked = any(action == "request_changes" for action, _ in latest.values())
            out.append(Ack(str(rec.get("id")), rec["path"], {(str(f.get("kind")), f.get("line"))
                                                             for f in rec.get("findings") or [] if isinstance(f, dict)},
                           str(rec.get("sha256")), int(rec.get("size") or 0), str(rec.get("author") or ""),
                           author.email, [] if blocked else approved))
    return out


def covers(project: Project, ack: Ack, finding: Any) -> bool:
    """Whether `ack` names this finding (file, kind and line) and the file's bytes as they are now (for a log,
    its first bytes: a log may grow, but a line added later is a finding of its own)."""
    if ack.path != finding.path or (finding.kind, finding.line) not in ack.kinds:
        return False
    entries = project.entries.relative_to(project.root).as_posix()
    is_log = classify(ack.path[len(entries) + 1:]) == "log" and ack.sha256 != "absent"
    sha, _ = digest_of(project, ack.path, ack.size if is_log else None)
    return sha == ack.sha256


def apply_acknowledgements(project: Project, report: Any) -> None:
    """Move each problem an approved acknowledgement covers to `report.acknowledged`; say which await review."""
    for rel, why in damaged_records(acknowledgements_dir(project), project.root):
        if not any(f.path == rel for f in report.problems):
            report.add(rel, "edited", f"{rel}: {why}")
    acks = load_acks(project)
    if not acks or not report.problems:
        return
    needed = max(1, project.config.review_approvals)
    kept = []
    for f in report.problems:
        mine = [a for a in acks if covers(project, a, f)]
        done = next((a for a in mine if len(a.approved_by) >= needed), None)
        if done is not None:
            f.message += f" (acknowledged in {ENTRY_PREFIX}{done.id} by {done.author}, approved by " \
                         f"{', '.join(done.approved_by)})"
            report.acknowledged.append(f)
            continue
        if mine:
            f.message += (f" (acknowledged in {ENTRY_PREFIX}{mine[0].id} by {mine[0].author}, awaiting review: "
                          f"`logbook review approve {ENTRY_PREFIX}{mine[0].id}` by someone else)")
        kept.append(f)
    report.problems = kept



# --- in the review queue ---------------------------------------------------------------------

def ack_run(rec: dict[str, Any]) -> str:
    """The run an acknowledgement is about (its path is under runs/<run>/), or "" for any other record."""
    parts = str(rec.get("path") or "").split("/")
    return parts[parts.index("runs") + 1] if "runs" in parts[:-1] else ""


def ack_summary(rec: dict[str, Any]) -> str:
    kinds = ", ".join(sorted({str(f.get("kind")) for f in rec.get("findings") or [] if isinstance(f, dict)}))
    return f"acknowledges {rec.get('path')} ({kinds}) by {rec.get('author')}: {str(rec.get('reason') or '')[:200]}"


def check_ack_reviewer(project: Project, entry_id: str, reviewer: Who) -> None:
    """Refuse the author of an acknowledgement as its approver, by key where records are signed, else by e-mail:
    whoever could have made the mistake (or the forgery) must not be the one who waves it through."""
    rid = entry_id[len(ENTRY_PREFIX):]
    with People(project) as people:
        for rec in iter_folder(acknowledgements_dir(project)):
            if rec.get("id") == rid and people.of_author(rec).same_person(reviewer):
                raise RefusedError(f"{rec.get('author')} wrote {entry_id} and cannot approve it; nothing was recorded",
                                   hint=f"ask a teammate to review it (`logbook review approve {entry_id}`)")


ANY = "ack:*"
"""`acknowledged_paths`' entry for the review queue itself: every acknowledgement's path."""


def acknowledged_paths(project: Project, entry: str | None) -> frozenset[str]:
    """The paths acknowledgements name, so reviewing them does not wait for their own findings: the one
    `entry` (`ack:<id>`) names, or every one for `ANY` (listing the queue); nothing for any other entry."""
    if not entry or not entry.startswith(ENTRY_PREFIX):
        return frozenset()
    rid = entry[len(ENTRY_PREFIX):]
    return frozenset(str(r.get("path")) for r in iter_folder(acknowledgements_dir(project))
                     if r.get("kind") == KIND and (entry == ANY or r.get("id") == rid))
