"""`verify`: prove that every record and log is as it was first committed, on any clone.

Three layers, each asking `recordkinds` which files are records, logs or derived:

- `history`: every commit in HEAD's history, against each of its parents, keeps
  every committed record byte for byte and every committed log as a prefix
  (incremental: commits verified before are not read again);
- `worktree`: the files on disk against HEAD, symlinks, and records git ignores;
- `remote`: a record a remote-tracking branch holds that HEAD holds with other
  bytes, or lacks although an earlier HEAD of this clone held it (a warning
  when HEAD simply has not pulled it yet).

Then, for preregistrations and amendments (working-tree files, plus records
whose `Logbook-Prereg` commits HEAD contains):

- the record must be in HEAD's history (else: uncommitted; a warning when
  another branch has exactly these bytes);
- where a commit with its trailer is in HEAD's history, the record must hash to
  that trailer's `Logbook-Sha256` (else: hash mismatch, the commit was amended);
- each amendment must link, by hash, the preregistration and a record of it that
  is present (two amendments made at once on two clones may link the same one:
  a fork, not a break; else: amendment chain broken);
- a run that answers to it must have been committed after it: some commit that
  added the preregistration is a strict ancestor of a commit that added the
  run's `run.json`, or, when one commit added both (a squash), the record's
  `created` is not later than the run's (else: prereg_after_run).

What is proven is content and order, not commit ids: a rebase, cherry-pick,
merge commit or squash-merge that carries the same bytes verifies on every
clone, with nothing but what `git push`/`git pull` carry. A `Logbook-Prereg`
trailer is corroboration where it survives, never a requirement. What is not
provable from one clone: that the first committed version was honest, or that
history was not rewritten from before a record and never pushed; the remote
check and pushing soon narrow that window.

Every hash-chained log on disk (runs/*/events.jsonl, and the notes/reviews logs
of older logbooks) is checked line by line with `chain.verify_log`; a torn last
line is a warning, not tampering. One-file records (notes, reviews, scorecards)
must match their own hash.
"""

from __future__ import annotations

import functools
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from logbook.core.errors import NotFoundError, RefusedError, TamperedError
from logbook.core.gitstate import restore_hint
from logbook.core.project import Project
from logbook.eventlog.chain import verify_log
from logbook.eventlog.files import record_files, record_problem, run_record_problem
from logbook.eventlog.files import read_record as read_json_record
from logbook.promises.prereg import AMEND_RE, runs_referencing
from logbook.promises.prereg_format import parse_or_none, record_hash
from logbook.promises.prereg_input import ID_RE, check_id
from logbook.records import gitbind, history, remote, verify_memo, worktree
from logbook.records.ancestry import Ancestry
from logbook.records.file_verdicts import FileVerdicts
from logbook.trust import ack, no_third_party, pins, signed_records
from logbook.trust.replay import WARNING_KINDS as SEED_WARNING_KINDS
from logbook.trust.replay import check_seeds
from logbook.trust.signers import acceptances_dir
from logbook.trust.stamp_proof import check_time, time_hint

TRAILER = "Logbook-Prereg"


@dataclass
class Finding:
    """One thing that is not as it was written."""

    path: str
    """File, relative to the repository root."""
    kind: str
    """edited | deleted | uncommitted | hash_mismatch | chain_broken | prereg_after_run | symlink | ignored |
    log_edited | log_lines_missing | log_deleted | log_torn_tail | elsewhere | remote_missing, and the
    history kinds (record_edited | record_deleted | record_dropped | record_symlink | log_rewritten |
    log_deleted | log_dropped | remote_differs | remote_dropped | remote_erased), third-party time's
    (stamp_invalid | stamp_orphan | stamp_unchecked | stamp_missing | stamped_after_run | stamps_after_run |
    unproven_tail | stamp_before_event, see `logbook.trust.stamp_proof`), scorecard_differs (`logbook.scoring.outcome`), the reader's pin's (pin_differs, see `logbook.trust.pins`), identity's (signature_invalid | signature_orphan | unsigned | signer_not_named, and signer_unaccepted
    under `require`; warnings: signer_unaccepted without it |
    signature_unknown_key | signature_unchecked | unsigned_before_require | allowed_signers_missing: see
    `logbook.trust.signed_records`), the seed kinds (seed_mismatch | seed_source_missing | seed_source_foreign |
    seed_not_earliest | seed_not_anchored, see `logbook.trust.replay`) and `verify --replay`'s
    (replay_differs | replay_not_done),
    what a run's log may not hold (after_end | outcome_in_log | restart_missing, see `runends`), and the
    other checks that need no third party (snapshot_missing | snapshot_moved | snapshot_prereg_differs |
    seen_false | prereg_differs_in_log; warnings: stray | snapshot_unknown, see `trust.no_third_party`)"""
    message: str
    line: int | None = None
    """First line that differs, where there is one."""
    had: str | None = None
    """The commit (or remote ref) that held the version that was lost, for history findings."""
    lost: str | None = None
    """The commit that lost it (or `HEAD`), for history findings."""
    hint: str | None = None
    """What to do, where the check that found it knows better than `fix_hint`."""


@dataclass
class VerifyReport:
    """What `verify_project` checked and found."""

    preregs: list[str] = field(default_factory=list)
    amendments: int = 0
    logs: list[str] = field(default_factory=list)
    problems: list[Finding] = field(default_factory=list)
    warnings: list[Finding] = field(default_factory=list)
    unverifiable: list[Finding] = field(default_factory=list)
    """Records git ignores: they can never be committed, so they can never be verified."""
    acknowledged: list[Finding] = field(default_factory=list)
    """Problems a reviewed acknowledgement record covers (`trust.ack`): reported, no longer exit 4."""
    commits_checked: int = 0
    """Commits whose changes were read in this call (the rest were verified before)."""
    in_progress: str | None = None
    """A merge, rebase, cherry-pick... under way, with how to finish or abort it."""
    root: Path | None = field(default=None, repr=False)
    """The repository, for hints that depend on its git state."""
    timestamps: dict[str, Any] = field(default_factory=dict)
    """What third-party stamps prove, per preregistration and run (`logbook.trust.stamp_proof`)."""
    identity: Any = None
    """`logbook.trust.signed_records.IdentityReport`: who signed each record, and who changed who may sign."""

    @property
    def ok(self) -> bool:
        return not self.problems and not self.unverifiable

    def add(self, path: str, kind: str, message: str, line: int | None = None, *, warning: bool = False) -> None:
        """Record one finding (a problem: exit 4; with `warning`, reported only), for checks in other modules."""
        (self.warnings if warning else self.problems).append(Finding(path, kind, message, line))

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "preregs": self.preregs, "amendments": self.amendments, "logs": self.logs,
                "commits_checked": self.commits_checked, "in_progress": self.in_progress,
                "problems": [asdict(f) for f in self.problems], "warnings": [asdict(f) for f in self.warnings],
                "unverifiable": [asdict(f) for f in self.unverifiable], "timestamps": self.timestamps,
                "identity": self.identity.to_dict() if self.identity is not None else None,
                "acknowledged": [asdict(f) for f in self.acknowledged]}

    def raise_if_tampered(self) -> None:
        """TamperedError (exit 4) for a changed record; RefusedError (exit 3) for ignored ones only."""
        if self.problems:
            first = self.problems[0]
            more = f" (and {len(self.problems) - 1} more)" if len(self.problems) > 1 else ""
            raise TamperedError(f"{first.message}{more}", hint=self.hint_for(first))
        if self.unverifiable:
            names = ", ".join(f.path for f in self.unverifiable[:3])
            raise RefusedError(f"git ignores {len(self.unverifiable)} record(s), so they cannot be verified: {names}",
                               hint=f"remove the ignore rule (`git check-ignore -v {self.unverifiable[0].path}` "
                                    "names it), then `logbook commit`")

    def hint_for(self, f: Finding) -> str:
        """How to fix `f`; while a merge or rebase is under way, first how to finish or abort it."""
        if f.kind in ("edited", "deleted") and not (f.had and f.lost):
            # A file on disk differs from HEAD: the restore step that works in this git state
            # (mid-merge, a record that came with the merge is restored from MERGE_HEAD).

            return restore_hint(self.root, f.path) + "; a correction is a new record, never an edit"
        if self.in_progress:
            return f"{self.in_progress}, then run the command again"
        return fix_hint(f)


def fix_hint(f: Finding) -> str:
    """What to do about one finding: steps that work, and never `run logbook verify` (it sent you here)."""
    if f.kind == "prereg_after_run":
        return "the run cannot answer to it: preregister anew and start a new run with `--prereg`"
    if f.kind.startswith("stamp") or f.kind == "unproven_tail":
        return time_hint(f.kind, f.path)
    if f.hint:
        return f.hint
    if f.had and f.lost and f.had != f.lost and not f.kind.startswith("remote"):
        return (f"restore it as {f.had[:7]} had it (`git checkout {f.had[:7]} -- {f.path}`) and commit; "
                "a record is never edited: a correction is a new record that supersedes it")
    if f.kind in ("edited", "deleted", "log_lines_missing", "log_deleted", "log_edited"):
        return f"restore it from git (`git checkout HEAD -- {f.path}`); a correction is a new record, never an edit"
    if f.kind == "symlink" or f.kind == "record_symlink":
        return f"replace {f.path} by the plain file git has for it (`git checkout HEAD -- {f.path}`)"
    if f.kind == "remote_dropped":
        return f"take it back from {f.had} (`git checkout {f.had} -- {f.path}`) and commit, or `git pull`"
    if f.kind in ("remote_erased", "remote_erased_elsewhere"):
        return (f"restore it as it was pushed (`git checkout {f.had[:7]} -- {f.path}`), commit and push; "
                "a record is never withdrawn: a later record supersedes it")
    if f.kind == "remote_differs":
        return f"take the remote's version back (`git checkout {f.had} -- {f.path}`) and commit"
    if f.kind == "uncommitted":
        return "preregister with `logbook prereg`, which commits the record; a hand-written file proves nothing"
    if f.kind.startswith(("seed_", "replay_")):
        return ("a run answers to its preregistration only when it trained from the seed the preregistration's "
                "earliest stamp gives: restore a deleted stamp from git, or start a new run with `--prereg`")
    ack = (f"; if it was a mistake, `logbook acknowledge {f.path} --reason TEXT` records it for a teammate to review "
           "(the finding is then reported as acknowledged)")
    if f.kind in ("after_end", "outcome_in_log"):
        return (f"a clone that fetched {f.path} before the line was added holds it as written: push that version back "
                f"(`git log -p -- {f.path}` shows which commit added the line){ack}")
    if f.kind in ("snapshot_missing", "snapshot_moved"):
        return ("in a clone that still has the snapshot, run `logbook init` (it pushes the snapshots the remote "
                f"lacks), then `git fetch` here{ack}")
    if f.kind in ("snapshot_prereg_differs", "seen_false", "prereg_differs_in_log"):
        return f"the record cannot be made true again: say so in a note (`logbook note`){ack}"
    return "restore the record from git; a correction is a new record that supersedes it, never an edit"


@dataclass
class _Record:
    prereg_id: str
    key: str  # "" for the preregistration itself; an amendment's record id (a number in older logbooks)
    relpath: str

    @property
    def label(self) -> str:
        return "preregistration" if not self.key else f"amendment {self.key}"


def verify_project(project: Project, prereg_id: str | None = None, *, full: bool = False,
                   pin: pins.TrustPin | None = None) -> VerifyReport:
    """Check history, the working tree, the remotes' copies, every preregistration and every log.

    With `prereg_id`, only findings about that preregistration, its amendments
    and the runs that answer to it are reported. With `full`, the cache of
    verified commits is neither read nor written: every commit is read again.
    `pin`: the reader's trust root (`logbook.trust.pins`); None: this user's
    pins file's entry for the repository, if any.
    """
    pin = pin if pin is not None else pins.reader_pin(project)
    scope = {"prereg": prereg_id, "pin": asdict(pin) if pin is not None else None}
    digest = None if full else verify_memo.fingerprint(project, scope)
    kept = verify_memo.recall(project, digest) if digest else None
    if kept is not None:
        return _from_memo(kept, project.root)
    report = _verify(project, prereg_id, full, pin)
    # Kept only when nothing changed while the checks read: the report is then the state's own.
    if digest and verify_memo.fingerprint(project, scope) == digest:
        verify_memo.remember(project, digest, report.to_dict())
    return report


def _from_memo(kept: dict[str, Any], root: Path) -> VerifyReport:
    """The report `VerifyReport.to_dict` kept; nothing was read again (`commits_checked` 0)."""
    # `_verify` always checks identity, so every kept report has one
    identity = signed_records.IdentityReport.from_dict(kept["identity"])
    findings = {name: [Finding(**f) for f in kept[name]]
                for name in ("problems", "warnings", "unverifiable", "acknowledged")}
    return VerifyReport(preregs=kept["preregs"], amendments=kept["amendments"], logs=kept["logs"],
                        in_progress=kept["in_progress"], root=root, timestamps=kept["timestamps"],
                        identity=identity, **findings)


def _verify(project: Project, prereg_id: str | None, full: bool, pin: pins.TrustPin | None) -> VerifyReport:
    root = project.root
    report = VerifyReport(in_progress=_in_progress(root), root=root)
    if prereg_id is not None:
        check_id(prereg_id)
    hist = history.check_history(project, use_cache=not full)
    report.commits_checked = hist.commits_checked
    report.problems += [Finding(b.path, b.kind, b.message, had=b.had, lost=b.lost) for b in hist.breaks]
    report.warnings += [Finding(b.path, f"{b.kind}_restored", f"{b.message}, and is back as first committed",
                                had=b.had, lost=b.lost) for b in hist.restored]
    for w in worktree.check_worktree(project):
        finding = Finding(w.path, w.kind, w.message, w.line)
        (report.unverifiable if w.kind == "ignored" else report.problems).append(finding)
    for r in remote.check_remotes(project):
        finding = Finding(r.path, r.kind, r.message, had=r.had, lost=r.lost)
        (report.warnings if r.kind in ("remote_missing", "remote_erased_elsewhere") else report.problems).append(finding)
    head_files = _head_blobs(project)
    verdicts = FileVerdicts(project, use_cache=not full)
    _check_preregs(project, prereg_id, hist, head_files, report, verdicts)
    _check_logs(project, prereg_id, report, verdicts)
    _check_scorecards(project, prereg_id, report)
    _check_time(project, report, use_cache=not full, require=bool(pin and pin.requires))
    report.identity = ident = signed_records.check_identity(project, prereg_id, hist.introduced)
    report.problems += [Finding(f.path, f.kind, f.message, hint=f.hint) for f in ident.problems]
    report.warnings += [Finding(f.path, f.kind, f.message, hint=f.hint) for f in ident.warnings]
    for f in check_seeds(project, prereg_id):
        (report.warnings if f.kind in SEED_WARNING_KINDS else report.problems).append(Finding(f.path, f.kind, f.message))
    no_third_party.check(project, report, hist.introduced, verdicts)
    verdicts.save()
    ack.apply_acknowledgements(project, report)  # last: it may cover any check's finding
    if prereg_id is not None:
        _keep_scope(project, prereg_id, report)
    # After the scope and the acknowledgements: the trust root concerns every record, and no record vouches for it.
    for d in pins.differences(project, pin) if pin is not None else []:
        report.problems.insert(0, Finding(d.path, "pin_differs", d.message, hint=d.hint))
    report.timestamps["pin"] = pin.source if pin is not None else None
    if pin is None and report.timestamps.get("state") == "on":
        report.timestamps["pin_nearest"] = pins.nearest_pin(project, pins.load_pins())
    return report


def _check_time(project: Project, report: VerifyReport, use_cache: bool, require: bool) -> None:
    time = check_time(project, use_cache=use_cache, require=require)
    for t in time.findings:
        (report.problems if t.problem else report.warnings).append(Finding(t.path, t.kind, t.message))
    report.timestamps = time.facts


def _in_progress(root: Path) -> str | None:
    busy = gitbind.operation_in_progress(root)
    return None if busy is None else f"{busy[0]}: {busy[1]}"


def _head_blobs(project: Project) -> dict[str, str]:
    """Repository-relative path -> blob id, for everything HEAD holds under the prereg folder."""
    if gitbind.head_commit(project.root) is None:
        return {}
    folder = project.prereg_dir.relative_to(project.root).as_posix()
    return {p: blob for p, (_mode, blob) in gitbind.tree_files(project.root, "HEAD", folder).items()}


def _keep_scope(project: Project, prereg_id: str, report: VerifyReport) -> None:
    entries = project.entries.relative_to(project.root).as_posix()
    runs = runs_referencing(project).get(prereg_id, [])
    prefixes = (f"{entries}/prereg/{prereg_id}.", *(f"{entries}/runs/{r}/" for r in runs))
    for name in ("problems", "warnings", "unverifiable", "acknowledged"):
        setattr(report, name, [f for f in getattr(report, name) if f.path.startswith(prefixes)])


def _check_preregs(project: Project, prereg_id: str | None, hist: history.HistoryCheck,
                   head_files: dict[str, str], report: VerifyReport, verdicts: FileVerdicts) -> None:
    root = project.root
    has_head = hist.head is not None
    commits = gitbind.trailer_commits(root, TRAILER) if has_head else []
    on_head = gitbind.reachable_from_head(root, TRAILER) if has_head else set()
    by_key: dict[tuple[str, str], list[gitbind.TrailerCommit]] = {}
    for tc in commits:
        key = (tc.trailers.get(TRAILER, ""), tc.trailers.get("Logbook-Amendment", "").strip())
        by_key.setdefault(key, []).append(tc)
    records = _records(project, head_files)
    if prereg_id is not None:
        records = [r for r in records if r.prereg_id == prereg_id]
        if not records:
            raise NotFoundError(f"unknown preregistration {prereg_id!r}", hint="see `logbook ls`")
    blobs = gitbind.read_blobs(root, [head_files[r.relpath] for r in records if r.relpath in head_files]
                               + [f"{c.commit}:{r.relpath}" for r in records if r.relpath not in head_files
                                  for c in by_key.get((r.prereg_id, r.key), [])])
    hashes: dict[tuple[str, str], str | None] = {}
    for rec in records:
        cands = by_key.get((rec.prereg_id, rec.key), [])
        hashes[(rec.prereg_id, rec.key)] = _check_record(project, rec, cands, on_head, head_files, blobs, report,
                                                         verdicts)
    _check_chains(project, records, hashes, report)
    _check_order(project, records, hist, report, verdicts)
    report.preregs = sorted({r.prereg_id for r in records})
    report.amendments = sum(1 for r in records if r.key)
    if prereg_id is None:
        _check_record_files(project, report, verdicts)


def _check_record_files(project: Project, report: VerifyReport, verdicts: FileVerdicts) -> None:
    """One-file records (notes, reviews, scorecards) match their own hash, and each run record reads as one
    (deletions are `worktree`'s)."""
    root = project.root
    folders = [project.notes_dir, project.reviews_dir, acceptances_dir(project)]
    folders += sorted(project.runs_dir.glob("*/outcomes"))  # no runs folder yet: nothing to glob
    named = {f.path for f in report.problems}  # a committed record edited on disk is named once, by `worktree`
    for folder in folders:
        # Files not named by a record id are no records any reader takes in (history still keeps them).
        for path in record_files(folder):
            rel = path.relative_to(root).as_posix()
            why = None if rel in named else verdicts.get("record", rel, lambda p=path: record_problem(p))
            if why:
                report.problems.append(Finding(rel, "edited", f"{rel}: {why}"))
    for path in sorted(project.runs_dir.glob("*/run.json")):
        rel = path.relative_to(root).as_posix()
        why = None if rel in named else verdicts.get("run_record", rel, lambda p=path: run_record_problem(p))
        if why:
            report.problems.append(Finding(rel, "edited", f"{rel}: {why}"))


def _records(project: Project, head_files: dict[str, str]) -> list[_Record]:
    """Records in the working tree plus those HEAD holds (a deleted one is reported by `worktree`)."""
    base = project.prereg_dir.relative_to(project.root).as_posix()
    names = {p.name for p in project.prereg_dir.iterdir()} if project.prereg_dir.is_dir() else set()
    names |= {path.rsplit("/", 1)[-1] for path in head_files}
    keys: set[tuple[str, str]] = set()
    for name in names:
        m = AMEND_RE.match(name)
        if m and ID_RE.match(m.group("id")):
            keys.add((m.group("id"), m.group("n")))
        elif name.endswith(".md") and ID_RE.match(name[:-3]):
            keys.add((name[:-3], ""))
    return [_Record(i, k, f"{base}/{i}.md" if not k else f"{base}/{i}.amend-{k}.md") for i, k in sorted(keys)]


def _check_record(project: Project, rec: _Record, candidates: list[gitbind.TrailerCommit], on_head: set[str],
                  head_files: dict[str, str], blobs: dict[str, bytes | None], report: VerifyReport,
                  verdicts: FileVerdicts) -> str | None:
    """Check one preregistration or amendment; returns its hash as committed (None when it cannot be trusted)."""
    committed = blobs.get(head_files[rec.relpath]) if rec.relpath in head_files else None
    if committed is None:
        path = project.root / rec.relpath
        data = path.read_bytes() if path.is_file() and not path.is_symlink() else None
        if data is not None and any(blobs.get(f"{c.commit}:{rec.relpath}") == data for c in candidates):
            report.warnings.append(Finding(rec.relpath, "elsewhere", (
                f"{rec.relpath} ({rec.label}) is committed on another branch, not in HEAD's history")))
            return _hash_bytes(data)
        if data is not None:
            report.problems.append(Finding(rec.relpath, "uncommitted", (
                f"{rec.relpath} ({rec.label}) is in no commit of HEAD's history, so nothing proves when it was written")))
        return None
    # Kept by the blob only while the tree holds HEAD's bytes there, which are then `committed` itself.
    actual = verdicts.get("prereg_hash", rec.relpath, lambda: _hash_bytes(committed))
    if any(f.path == rec.relpath and f.kind == "record_edited" for f in report.problems):
        return None  # history named the commit that changed it, and the line: a hash says no more
    for c in candidates:
        claimed = c.trailers.get("Logbook-Sha256")
        if c.commit in on_head and claimed and actual != claimed:
            report.problems.append(Finding(rec.relpath, "hash_mismatch", (
                f"{rec.relpath} ({rec.label}) hashes to {(actual or 'nothing readable')[:12]}, but commit "
                f"{c.commit[:7]} that made it says Logbook-Sha256 {claimed[:12]} (the commit was amended)"),
                had=c.commit, lost="HEAD"))
            return None
    return actual


def _hash_bytes(data: bytes) -> str | None:
    parsed = _parsed(data)
    return record_hash(*parsed) if parsed is not None else None


@functools.lru_cache(maxsize=8192)
def _parsed(data: bytes) -> tuple[dict[str, Any], str] | None:
    """A record's bytes parsed once per process: the order check reads what the hash check has read (not to be
    changed by a caller)."""
    return parse_or_none(data)


def _check_order(project: Project, records: list[_Record], hist: history.HistoryCheck, report: VerifyReport,
                 verdicts: FileVerdicts) -> None:
    """A run answers to a preregistration only if the preregistration was committed first.

    Provable from history: some commit that added the preregistration is an
    ancestor of a commit that added the run's record. When both arrived in one
    commit (a squash-merge of a branch that carried both), history cannot order
    them, so the two records' own committed timestamps are compared instead.
    """
    entries = project.entries.relative_to(project.root).as_posix()
    runs = runs_referencing(project)
    made_in = {c for rec in records if not rec.key for c in hist.introduced.get(rec.relpath[len(entries) + 1:], [])}
    graph = Ancestry(project.root, hist.head, made_in) if hist.head and made_in else None
    for rec in records:
        if rec.key:
            continue
        made = hist.introduced.get(rec.relpath[len(entries) + 1:])
        created = verdicts.get("prereg_created", rec.relpath, lambda r=rec: _prereg_created(project, r)) \
            if made and runs.get(rec.prereg_id) else None
        for run in runs.get(rec.prereg_id, []):
            started = hist.introduced.get(f"runs/{run}/run.json")
            if not made or not started:
                continue  # the run is not committed yet, or the record is reported as uncommitted
            strictly = graph is not None and any(m != s and graph.is_ancestor(m, s) for m in made for s in started)
            together = set(made) & set(started)
            # History's order is whatever the last person to push made it: the records' own times must agree too.
            in_order = _created_in_order(project, created, run, missing_ok=bool(strictly))
            if (strictly or together) and in_order:
                continue
            report.problems.append(Finding(f"{entries}/runs/{run}/run.json", "prereg_after_run", (
                f"run {run} answers to {rec.prereg_id}, but " + (
                    f"the preregistration's `created` is later than the run's: it was written after the run "
                    f"started, whatever order the commits {made[0][:7]} and {started[0][:7]} put them in"
                    + (" (both arrived in one commit)" if together else "")
                    if (strictly or together) else
                    f"the preregistration was first committed in {made[0][:7]}, which is not before "
                    f"{started[0][:7]}, where the run was first committed")), had=made[0], lost=started[0]))


def _prereg_created(project: Project, rec: _Record) -> str:
    """The preregistration's `created` as the working tree has it ("" when it cannot be read or has none)."""
    try:
        parsed = _parsed((project.root / rec.relpath).read_bytes())
    except OSError:
        parsed = None
    return str(parsed[0].get("created") or "") if parsed is not None else ""


def _created_in_order(project: Project, made: str | None, run: str, *, missing_ok: bool) -> bool:
    """The preregistration's `created` (`made`) is not later than the run's; `missing_ok`: a record without one
    passes."""
    run_rec = read_json_record(project.run_dir(run) / "run.json")
    if run_rec is None:
        return missing_ok
    started = str(run_rec.get("created") or "")
    if not made or not started:
        return missing_ok
    return _to_the_second(made) <= _to_the_second(started)


def _to_the_second(ts: str) -> str:
    """An ISO 8601 time cut to the second: a preregistration's has no fraction, a run's may."""
    return ts[:19]


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
    parsed = parse_or_none(path.read_bytes())
    if parsed is None:
        return  # already reported as edited
    front = parsed[0]
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
    """Hash-chained logs on disk to check line by line, relative to the root."""
    root = project.root
    if prereg_id is None:
        present = list(project.runs_dir.glob("*/events.jsonl"))  # no runs folder yet: nothing to glob
        present += [p for p in (project.notes_log, project.reviews_log) if p.exists()]
        return sorted(p.relative_to(root).as_posix() for p in present if p.is_file() and not p.is_symlink())
    runs = runs_referencing(project).get(prereg_id, [])
    entries = project.entries.relative_to(root).as_posix()
    paths = [f"{entries}/runs/{r}/events.jsonl" for r in runs]
    return [p for p in paths if (root / p).is_file() and not (root / p).is_symlink()]


def _check_logs(project: Project, prereg_id: str | None, report: VerifyReport, verdicts: FileVerdicts) -> None:
    for rel in _log_paths(project, prereg_id):
        report.logs.append(rel)
        # An outcome line is vouched for by the run's scorecard records (`runends.vouched_outcomes`).
        found = verdicts.get("log", rel, lambda r=rel: _log_findings(project, r),
                             depends_on=rel.rsplit("/", 1)[0] + "/outcome")
        for bucket, kind, message, line in found:
            (report.warnings if bucket == "warning" else report.problems).append(Finding(rel, kind, message, line))


def _log_findings(project: Project, rel: str) -> list[tuple[str, str, str, int | None]]:
    """(problem | warning, kind, message, line) for one log: its chain, and for a run's events what follows its end."""
    from logbook.eventlog.runends import check_run_log

    problems = verify_log(project.root / rel)
    out = [("warning" if p.kind == "torn_tail" else "problem", "log_torn_tail" if p.kind == "torn_tail" else "log_edited",
            f"{rel}: {p.message}", p.line) for p in problems]
    if not problems and rel.endswith("/events.jsonl"):
        # Only what the schema allows may follow a run's end; outcome lines must be vouched for (`runends`).
        out += [("problem", p.kind, p.message, p.line) for p in check_run_log(project.root / rel, rel)]
    return out


def _check_scorecards(project: Project, prereg_id: str | None, report: VerifyReport) -> None:
    """Every recorded scorecard computed again from its run's log and preregistration (`scoring.outcome`)."""
    from logbook.scoring.outcome import recheck_scorecards

    runs = None if prereg_id is None else sorted(runs_referencing(project).get(prereg_id, []))
    hint = ("a scorecard is computed from records anyone can read: restore it from git, or see who edited it with "
            "`git log -p -- PATH`; a correction is a new scorecard (`logbook outcome RUN`), never an edit")
    report.problems += [Finding(m.path, "scorecard_differs", m.message, hint=hint.replace("PATH", m.path))
                        for m in recheck_scorecards(project, runs)]


def verify_or_raise(project: Project, prereg_id: str | None = None) -> VerifyReport:
    """`verify_project`, raising TamperedError when anything changed."""
    report = verify_project(project, prereg_id)
    report.raise_if_tampered()
    return report
