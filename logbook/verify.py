"""`verify`: prove that preregistrations, amendments and logs are as they were written.

For each preregistration and amendment (working-tree files, plus records whose
commits HEAD contains) the commit is found by its trailer on any ref, then:

- the file must still exist (else: deleted),
- a commit must carry its trailer (else: commit missing: amended or rebased away),
- that commit must contain the file, change nothing else, and sit on the commit
  recorded as `base_commit` (else: rewritten by amend, rebase or cherry-pick),
- the committed file must hash to the trailer's `Logbook-Sha256` (else: hash mismatch),
- the working file must equal the committed one byte for byte (else: edited,
  naming the first lines that changed),
- each amendment must link, by hash, the preregistration and a record of it that
  is present (two amendments made at once on two clones may link the same one;
  else: amendment chain broken).

Every hash-chained log under the entries folder (runs/*/events.jsonl, and the
notes/reviews logs of older logbooks) is checked with `chain.verify_log`, and,
where HEAD holds a committed version, that version must still be a prefix of
the file (logs are append-only). A torn last line is a warning, not tampering.
One-file records (notes, reviews, scorecards) must match their own hash and
none that HEAD holds may be missing.
"""

from __future__ import annotations

import difflib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from . import gitbind
from .chain import verify_log
from .errors import NotFoundError, TamperedError
from .prereg import AMEND_RE, runs_referencing
from .prereg_format import record_hash, split_record
from .prereg_input import ID_RE, check_id
from .project import Project

TRAILER = "Logbook-Prereg"


@dataclass
class Finding:
    """One thing that is not as it was written."""

    path: str
    """File, relative to the repository root."""
    kind: str
    """edited | deleted | commit_missing | rewritten | hash_mismatch | chain_broken |
    log_edited | log_lines_missing | log_deleted | log_torn_tail | elsewhere"""
    message: str
    line: int | None = None


@dataclass
class VerifyReport:
    """What `verify_project` checked and found."""

    preregs: list[str] = field(default_factory=list)
    amendments: int = 0
    logs: list[str] = field(default_factory=list)
    problems: list[Finding] = field(default_factory=list)
    warnings: list[Finding] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "preregs": self.preregs, "amendments": self.amendments, "logs": self.logs,
                "problems": [asdict(f) for f in self.problems], "warnings": [asdict(f) for f in self.warnings]}

    def raise_if_tampered(self, root: Path | None = None) -> None:
        if self.problems:
            first = self.problems[0].message
            more = f" (and {len(self.problems) - 1} more)" if len(self.problems) > 1 else ""
            from .gitstate import restore_hint

            raise TamperedError(f"{first}{more}", hint=restore_hint(root, self.problems[0].path)
                                + "; record changes as new records (`logbook prereg amend`, `logbook note --about`)")


@dataclass
class _Record:
    prereg_id: str
    key: str  # "" for the preregistration itself; an amendment's record id (a number in older logbooks)
    relpath: str

    @property
    def label(self) -> str:
        return "preregistration" if not self.key else f"amendment {self.key}"


def verify_project(project: Project, prereg_id: str | None = None) -> VerifyReport:
    """Check every preregistration (or one, with its amendments and runs) and every log."""
    root = project.root
    report = VerifyReport()
    has_head = gitbind.head_commit(root) is not None
    commits = gitbind.trailer_commits(root, TRAILER) if has_head else []
    on_head = gitbind.reachable_from_head(root, TRAILER) if has_head else set()
    by_key: dict[tuple[str, str], list[gitbind.TrailerCommit]] = {}
    for tc in commits:
        key = (tc.trailers.get(TRAILER, ""), tc.trailers.get("Logbook-Amendment", "").strip())
        by_key.setdefault(key, []).append(tc)
    records = _records(project, by_key, on_head)
    if prereg_id is not None:
        check_id(prereg_id)
        records = [r for r in records if r.prereg_id == prereg_id]
        if not records:
            raise NotFoundError(f"unknown preregistration {prereg_id!r}", hint="see `logbook ls`")
    hashes: dict[tuple[str, str], str | None] = {}
    blobs = gitbind.read_blobs(root, [f"{c.commit}:{r.relpath}" for r in records
                                      for c in by_key.get((r.prereg_id, r.key), [])])
    for rec in records:
        hashes[(rec.prereg_id, rec.key)] = _check_record(project, rec, by_key.get((rec.prereg_id, rec.key), []),
                                                         on_head, blobs, report)
    _check_chains(project, records, hashes, report)
    report.preregs = sorted({r.prereg_id for r in records})
    report.amendments = sum(1 for r in records if r.key)
    _check_logs(project, prereg_id, report)
    if prereg_id is None:
        _check_record_files(project, report)
    return report


def _check_record_files(project: Project, report: VerifyReport) -> None:
    """One-file records (notes, reviews, scorecards): each as written, and none that HEAD holds missing."""
    from .records import damaged_records

    root = project.root
    folders = [project.notes_dir, project.reviews_dir]
    folders += sorted(project.runs_dir.glob("*/outcomes")) if project.runs_dir.is_dir() else []
    for folder in folders:
        for sentence in damaged_records(folder, root):
            rel = sentence.split(":", 1)[0]
            report.problems.append(Finding(rel, "edited", sentence))
    if not gitbind.head_commit(root):
        return
    entries = project.entries.relative_to(root).as_posix()
    tracked = gitbind.git(root, "ls-tree", "-r", "--name-only", "-z", "HEAD", "--",
                          f"{entries}/notes", f"{entries}/reviews", f"{entries}/runs").split("\0")
    for rel in tracked:
        if rel.endswith(".json") and ("/notes/" in rel or "/reviews/" in rel or "/outcomes/" in rel) \
                and not (root / rel).exists():
            report.problems.append(Finding(rel, "deleted", f"{rel} was deleted; HEAD has it committed"))


def _records(project: Project, by_key: dict, on_head: set[str]) -> list[_Record]:
    """Records in the working tree, plus those HEAD's history committed (to catch deletions)."""
    base = project.prereg_dir.relative_to(project.root).as_posix()
    keys: set[tuple[str, str]] = set()
    if project.prereg_dir.is_dir():
        for p in project.prereg_dir.iterdir():
            m = AMEND_RE.match(p.name)
            if m and ID_RE.match(m.group("id")):
                keys.add((m.group("id"), m.group("n")))
            elif p.suffix == ".md" and ID_RE.match(p.stem):
                keys.add((p.stem, ""))
    for (pid, key), tcs in by_key.items():
        well_formed = ID_RE.match(pid) and (not key or AMEND_RE.match(f"{pid}.amend-{key}.md"))
        if well_formed and any(tc.commit in on_head for tc in tcs):
            keys.add((pid, key))
    return [_Record(i, k, f"{base}/{i}.md" if not k else f"{base}/{i}.amend-{k}.md") for i, k in sorted(keys)]


def _check_record(project: Project, rec: _Record, candidates: list[gitbind.TrailerCommit], on_head: set[str],
                  blobs: dict[str, bytes | None], report: VerifyReport) -> str | None:
    """Check one record; returns its hash as committed (None when it cannot be trusted)."""
    path = project.root / rec.relpath
    reachable = [c for c in candidates if c.commit in on_head]
    if not path.exists():
        if reachable:
            report.problems.append(Finding(rec.relpath, "deleted",
                                           f"{rec.relpath} ({rec.label}) was deleted; it was committed in {reachable[0].commit[:7]}"))
        return None
    data = path.read_bytes()
    if not candidates:
        report.problems.append(Finding(rec.relpath, "commit_missing", (
            f"{rec.relpath} ({rec.label}): no commit on any branch carries `{TRAILER}: {rec.prereg_id}`"
            + (f" with `Logbook-Amendment: {rec.key}`" if rec.key else "")
            + " (the commit was amended or rebased away, or the file was never committed by logbook)")))
        return None
    best: list[Finding] | None = None
    for c in reachable or candidates:
        found = _check_against(rec, c, data, blobs.get(f"{c.commit}:{rec.relpath}"))
        if best is None or len(found) < len(best):
            best = found
        if not found:
            break
    report.problems.extend(best or [])
    if not reachable and not best:
        report.warnings.append(Finding(rec.relpath, "elsewhere", (
            f"{rec.relpath} matches commit {candidates[0].commit[:7]}, which is on another branch, not in HEAD's history")))
    return _hash_bytes(data) if not best else None


def _hash_bytes(data: bytes) -> str | None:
    try:
        front, body = split_record(data.decode("utf-8"), "record")
        return record_hash(front, body)
    except (TamperedError, UnicodeDecodeError):
        return None


def _check_against(rec: _Record, c: gitbind.TrailerCommit, data: bytes, blob: bytes | None) -> list[Finding]:
    where, short = rec.relpath, c.commit[:7]
    if blob is None:
        return [Finding(where, "rewritten", f"{where} ({rec.label}): commit {short} carries its trailer "
                                            "but does not contain the file (rewritten)")]
    out: list[Finding] = []
    claimed = c.trailers.get("Logbook-Sha256", "")
    actual = _hash_bytes(blob)
    if actual != claimed:
        out.append(Finding(where, "hash_mismatch", (
            f"{where} ({rec.label}): the file in commit {short} hashes to {(actual or 'nothing readable')[:12]}, "
            f"but the commit's Logbook-Sha256 says {claimed[:12]} (the commit was rewritten)")))
    others = [f for f in c.files if f != rec.relpath]
    if others:
        out.append(Finding(where, "rewritten", f"{where} ({rec.label}): commit {short} also changes "
                                               f"{', '.join(others[:3])} (the commit was amended)"))
    base = _base_commit(blob)
    parent = c.parents[0] if c.parents else ""
    if base and parent != base:
        out.append(Finding(where, "rewritten", (
            f"{where} ({rec.label}): commit {short} sits on {parent[:7] or 'no parent'}, but the record was made "
            f"on {base[:7]} (the commit was rebased or cherry-picked)")))
    if data != blob:
        line, what = _first_change(blob, data)
        out.append(Finding(where, "edited", f"{where} ({rec.label}) was edited after commit {short}: {what}", line))
    return out


def _base_commit(blob: bytes) -> str:
    try:
        front, _ = split_record(blob.decode("utf-8"), "record")
    except (TamperedError, UnicodeDecodeError):
        return ""
    return str(front.get("base_commit") or "")


def _first_change(old: bytes, new: bytes) -> tuple[int, str]:
    """The first changed line, in words: `line 12 changed: 'a' -> 'b'`."""
    a = old.decode("utf-8", "replace").splitlines()
    b = new.decode("utf-8", "replace").splitlines()
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        if tag == "replace":
            return j1 + 1, f"line {j1 + 1} changed: {_clip(a[i1])} -> {_clip(b[j1])}"
        if tag == "delete":
            return j1 + 1, f"{_span(i1, i2)} removed: {_first_text(a[i1:i2])}"
        return j1 + 1, f"{_span(j1, j2)} added: {_first_text(b[j1:j2])}"
    return 1, "the line endings or the final newline changed"


def _span(start: int, end: int) -> str:
    return f"line {start + 1} was" if end - start == 1 else f"lines {start + 1}-{end} were"


def _first_text(lines: list[str]) -> str:
    return _clip(next((ln for ln in lines if ln.strip()), lines[0]))


def _clip(s: str, n: int = 80) -> str:
    return repr(s if len(s) <= n else s[:n] + "…")


def _check_chains(project: Project, records: list[_Record], hashes: dict, report: VerifyReport) -> None:
    """Each amendment links the original, and a record of the same preregistration, by their hashes.

    Amendments made on two clones at once may link the same earlier record:
    that is a fork, not a break. A link to a record that is not there is.
    """
    by_id: dict[str, list[_Record]] = {}
    for r in records:
        by_id.setdefault(r.prereg_id, []).append(r)
    for pid, recs in by_id.items():
        files = {Path(r.relpath).name: r for r in recs}
        for r in recs:
            path = project.root / r.relpath
            if r.key and path.exists():
                _check_link(pid, r, path, files, hashes, report)


def _check_link(pid: str, r: _Record, path: Path, files: dict[str, _Record], hashes: dict,
                report: VerifyReport) -> None:
    try:
        front, _ = split_record(path.read_bytes().decode("utf-8"), r.relpath)
    except (TamperedError, UnicodeDecodeError):
        return  # already reported as edited
    prev = front.get("previous") if isinstance(front.get("previous"), dict) else {}
    original = front.get("original") if isinstance(front.get("original"), dict) else {}
    named = front.get("n") if r.key.isdigit() else front.get("id")
    if front.get("amends") != pid or str(named) != r.key:
        report.problems.append(Finding(r.relpath, "chain_broken", (
            f"{r.relpath}: says it is amendment {named} of {front.get('amends')}, "
            f"but its file name makes it amendment {r.key} of {pid}")))
        return
    for what, link in (("the record before it", prev), ("the preregistration", original)):
        target = files.get(str(link.get("file")))
        if target is None or target is r:
            report.problems.append(Finding(r.relpath, "chain_broken", (
                f"{r.relpath}: links {what} as {link.get('file')}, which is not among {pid}'s records: "
                "the amendment chain is broken")))
            continue
        have = hashes.get((pid, target.key))
        if have is not None and link.get("sha256") != have:
            report.problems.append(Finding(r.relpath, "chain_broken", (
                f"{r.relpath}: links {link.get('file')} by hash {str(link.get('sha256'))[:12]}, "
                f"but that record hashes to {have[:12]}: the amendment chain is broken")))


# --- logs --------------------------------------------------------------------

def _log_paths(project: Project, prereg_id: str | None) -> list[str]:
    """Logs to check, relative to the root: present ones plus those HEAD has committed."""
    root = project.root
    entries = project.entries.relative_to(root).as_posix()
    if prereg_id is None:
        present = [p for p in project.runs_dir.glob("*/events.jsonl")] if project.runs_dir.is_dir() else []
        present += [p for p in (project.notes_log, project.reviews_log) if p.exists()]
        rels = {p.relative_to(root).as_posix() for p in present}
        if gitbind.head_commit(root):
            tracked = gitbind.git(root, "ls-tree", "-r", "--name-only", "-z", "HEAD", "--", entries).split("\0")
            rels |= {t for t in tracked if _is_log(entries, t)}
        return sorted(rels)
    runs = runs_referencing(project).get(prereg_id, [])
    return [f"{entries}/runs/{r}/events.jsonl" for r in runs if (project.run_dir(r) / "events.jsonl").exists()]


def _is_log(entries: str, rel: str) -> bool:
    if rel in (f"{entries}/notes/notes.jsonl", f"{entries}/reviews/reviews.jsonl"):
        return True
    parts = rel.split("/")
    return rel.startswith(f"{entries}/runs/") and len(parts) == len(entries.split("/")) + 3 \
        and parts[-1] == "events.jsonl"


def _check_logs(project: Project, prereg_id: str | None, report: VerifyReport) -> None:
    rels = _log_paths(project, prereg_id)
    committed = gitbind.read_blobs(project.root, [f"HEAD:{r}" for r in rels]) \
        if rels and gitbind.head_commit(project.root) else {}
    for rel in rels:
        path = project.root / rel
        report.logs.append(rel)
        if not path.exists():
            report.problems.append(Finding(rel, "log_deleted", f"{rel} was deleted; HEAD has it committed"))
            continue
        problems = verify_log(path)
        for p in problems:
            kind = "log_torn_tail" if p.kind == "torn_tail" else "log_edited"
            finding = Finding(rel, kind, f"{rel}: {p.message}", p.line)
            (report.warnings if kind == "log_torn_tail" else report.problems).append(finding)
        if any(p.kind != "torn_tail" for p in problems):
            continue
        old = committed.get(f"HEAD:{rel}")
        if old:
            _check_prefix(rel, old, path.read_bytes(), report)


def _check_prefix(rel: str, old: bytes, new: bytes, report: VerifyReport) -> None:
    """Append-only: the lines HEAD committed must all still be there, unchanged, first."""
    complete = old[: old.rfind(b"\n") + 1]
    if new.startswith(complete):
        return
    old_lines, new_lines = complete.splitlines(), new.splitlines()
    line = next((i + 1 for i, (a, b) in enumerate(zip(old_lines, new_lines)) if a != b),
                min(len(old_lines), len(new_lines)) + 1)
    report.problems.append(Finding(rel, "log_lines_missing", (
        f"{rel}: HEAD committed {len(old_lines)} lines, the file now has {len(new_lines)}; "
        f"they differ from line {line} (lines were removed or replaced)"), line))


def verify_or_raise(project: Project, prereg_id: str | None = None) -> VerifyReport:
    """`verify_project`, raising TamperedError when anything changed."""
    report = verify_project(project, prereg_id)
    report.raise_if_tampered(project.root)
    return report

