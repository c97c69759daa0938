"""`verify`'s identity check: every signature over a record, who signed each record, and who changed who may sign.

Records signed (see `signatures`): preregistrations and amendments (digest: their
`Logbook-Sha256`), run records (the sha256 of `run.json`'s bytes), reviews and
scorecards (their own `hash`). For each, `verify` checks every signature kept
under `signatures/<digest>/` and says who signed it, or "unsigned". A problem
(exit 4):

- `signature_invalid`: a signature that is not a good one of the digest it is
  filed under, by the key its file name says: the record or the signature was
  changed after signing (a record edited with its hash worked out again and the
  old signature moved beside it lands here);
- `signature_orphan`: a signature of a digest no record here has: the record it
  signed was edited with its hash worked out again, or removed;
- `unsigned` (only with `signing.require: true`): a record no allowed key signed;
- `signer_not_named`: a record that names its writer (a scorecard's `computed_by`,
  a review's reviewer, a run's launcher, an acknowledgement's or a key
  acceptance's author) by an address some valid key holds, signed by none of
  that address's keys: one person signed in another's name. An address no key
  holds names no one by key, so a second address of the signer's own passes.

Who may sign for whom is `signers`': a key someone else added for an address
that already had one counts for no one until the address's holder accepts it
(`signer_unaccepted`: a warning, exit 4 under `signing.require`).

Reported, not failed: a good signature by a key the committed allowed-signers
file does not list (`signature_unknown_key`: it counts for no one), and, with
`require`, a record first committed in a commit whose own logbook.yaml did not
yet require signatures (`unsigned_before_require`). That is the rule a team can
adopt without rewriting its past; its limit is history itself: whoever can
rewrite history unseen can also move a record before the commit that turned
`require` on, which is why that commit is listed (`setting_history`) and why
time against a forger comes from a timestamp authority, not from commit order.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from logbook.core.errors import NotFoundError, RefusedError, TamperedError
from logbook.core.project import Project
from logbook.core.settings import CONFIG_FILE
from logbook.records import gitbind
from logbook.eventlog.chain import record_hash
from logbook.eventlog.files import read_record, record_files
from logbook.promises.prereg import AMEND_RE, runs_referencing
from logbook.promises.prereg_format import record_hash as prereg_hash
from logbook.promises.prereg_format import split_record
from logbook.promises.prereg_input import ID_RE
from logbook.trust.ack import acknowledgements_dir
from logbook.trust.setting_history import SettingChange, setting_changes
from logbook.trust.signatures import (SIGNATURES_DIR, SignatureBook, all_signature_files, configured_fingerprint,
                                      configured_key, fp12_of, sign_digest)
from logbook.trust.signers import KeyStanding, Standing, acceptances_dir, key_standing

_SIG_NAME = re.compile(r"^[0-9a-f]{12}\.sig$")


@dataclass
class SignedRecord:
    """One record and who signed it."""

    path: str
    """Relative to the repository root."""
    kind: str
    """preregistration | amendment | run record | review | scorecard"""
    digest: str
    signed_by: list[str] = field(default_factory=list)
    """Principals whose allowed key signed it (empty: unsigned)."""
    grandfathered: bool = False
    """Unsigned, and first committed before signatures were required."""


@dataclass
class IdentityFinding:
    """A problem or a warning, in the shape `verify.Finding` takes."""

    path: str
    kind: str
    message: str
    hint: str | None = None


@dataclass
class IdentityReport:
    """What the identity check found: per record, who signed it; which commits changed who may sign."""

    enabled: bool
    """True when logbook.yaml has a `signing:` block."""
    allowed_signers: str | None = None
    records: list[SignedRecord] = field(default_factory=list)
    changes: list[SettingChange] = field(default_factory=list)
    keys: list[KeyStanding] = field(default_factory=list)
    """Each (address, key) pair the committed allowed-signers file lists, and whether the key may sign for it."""
    problems: list[IdentityFinding] = field(default_factory=list)
    warnings: list[IdentityFinding] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"enabled": self.enabled, "allowed_signers": self.allowed_signers,
                "records": [asdict(r) for r in self.records], "setting_changes": [c.to_dict() for c in self.changes],
                "keys": [asdict(k) for k in self.keys]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> IdentityReport:
        """The report `to_dict` wrote (findings are the caller's: verify keeps them with its own)."""
        return cls(enabled=d["enabled"], allowed_signers=d["allowed_signers"],
                   records=[SignedRecord(**r) for r in d["records"]],
                   changes=[SettingChange(**c) for c in d["setting_changes"]],
                   keys=[KeyStanding(**k) for k in d.get("keys", [])])

    def lines(self) -> list[str]:
        """What `verify` prints about identity: who signed what, every change to who may sign, keys not accepted."""
        out = [f"SETTING  {c.sentence()}" for c in self.changes]
        if not self.enabled:
            return out
        out += [f"KEY      {k.fingerprint} for {k.principal}: {k.sentence()}" for k in self.keys if not k.valid]
        for r in self.records:
            who = ", ".join(r.signed_by) if r.signed_by else "unsigned" + (
                " (before signing was required)" if r.grandfathered else "")
            out.append(f"SIGNED   {r.path}  by {who}" if r.signed_by else f"UNSIGNED {r.path}  {r.kind}, {who}")
        return out


def check_identity(project: Project, prereg_id: str | None, introduced: dict[str, list[str]]) -> IdentityReport:
    """Check every signature, say who signed each record, and list the commits that changed who may sign.

    `introduced` is history's map of entries-relative path -> the commits that added it (for `require`).
    """
    signing = project.config.signing
    report = IdentityReport(enabled=signing is not None, changes=setting_changes(project))
    files = all_signature_files(project)
    if signing is None:
        if files:
            report.warnings.append(IdentityFinding(files[0][1].relative_to(project.root).as_posix(), "signature_unchecked", (
                f"{len(files)} signature file(s) under {SIGNATURES_DIR}/ are not checked: logbook.yaml has no "
                "`signing:` block naming the allowed signers")))
        return report
    report.allowed_signers = signing.allowed_signers
    records = _records(project, prereg_id)
    by_digest: dict[str, list[SignedRecord]] = {}
    for r in records:
        by_digest.setdefault(r.digest, []).append(r)
    with SignatureBook(project) as book:
        if book.allowed is not None and book.allowed.data is None:
            finding = IdentityFinding(signing.allowed_signers, "allowed_signers_missing", (
                f"{signing.allowed_signers}, which logbook.yaml names as the allowed signers, is not committed: "
                "no signature can count"), hint=f"commit it (`git add {signing.allowed_signers} && git commit`)")
            (report.problems if signing.require else report.warnings).append(finding)
        book.prefetch([(path, digest) for digest, path in files if digest in by_digest])
        standing = key_standing(project, book)
        report.keys = standing.keys
        signer_keys: dict[str, set[str]] = {}
        for digest, path in files:
            _check_file(project, book, digest, path, by_digest, report, scoped=prereg_id is not None,
                        standing=standing, require=signing.require, signer_keys=signer_keys)
    _judge_named(project, records, signer_keys, standing, report)
    _judge_unsigned(project, records, introduced, signing.require, report)
    report.records = records
    return report


def _check_file(project: Project, book: SignatureBook, digest: str, path: Path,
                by_digest: dict[str, list[SignedRecord]], report: IdentityReport, *, scoped: bool,
                standing: Standing, require: bool, signer_keys: dict[str, set[str]]) -> None:
    rel = path.relative_to(project.root).as_posix()
    targets = by_digest.get(digest, [])
    if not targets:
        if not scoped:  # with one preregistration in scope, other records' signatures are not looked for
            report.problems.append(IdentityFinding(rel, "signature_orphan", (
                f"{rel} signs a record whose sha256 is {digest[:12]}, and no record here has that hash: the record "
                "it signed was edited (its hash worked out again) or removed"), hint=(
                f"`git log --all --stat -- {rel}` shows the commit that added the signature and the record beside "
                "it: restore that record as first committed; a correction is a new record, never an edit")))
        return
    target = targets[0]
    if not _SIG_NAME.match(path.name):
        report.warnings.append(IdentityFinding(target.path, "signature_unchecked", (
            f"{rel} is not named `<key fingerprint, 12 hex>.sig`, so it is no signature of {target.path}")))
        return
    check = book.check(path, digest)
    if check.fingerprint is not None and fp12_of(check.fingerprint) != path.stem:
        check_ok, why = False, f"it is named for key {path.stem} but made with {check.fingerprint}"
    else:
        check_ok, why = check.valid, check.why
    if check_ok:
        valid = standing.valid_principals(check.fingerprint or "", check.principals)
        if not valid:
            _unaccepted(standing.pending_for(check.fingerprint or "", check.principals), targets, rel, require, report)
            return
        for t in targets:
            t.signed_by += [p for p in valid[:1] if p not in t.signed_by]
            signer_keys.setdefault(t.path, set()).add(check.fingerprint or "")
        return
    if check.fingerprint is not None and not check.principals and "not in" in why:
        for t in targets:
            report.warnings.append(IdentityFinding(t.path, "signature_unknown_key", (
                f"{t.path} ({t.kind}) carries a signature by key {check.fingerprint} ({rel}), which "
                f"{book.allowed.path if book.allowed else 'the allowed-signers file'} as committed does not list: "
                "it counts for no one"), hint=(
                "if the key is a teammate's, add it to the allowed-signers file in a commit of its own "
                "(the chronicle shows who did); if not, someone signed in another's place")))
        return
    for t in targets:
        who = f" by {check.principals[0]}" if check.principals else ""
        report.problems.append(IdentityFinding(t.path, "signature_invalid", (
            f"{t.path} ({t.kind}, sha256 {digest[:12]}): its signature {rel}{who} does not check: {why}; the "
            "record or the signature changed after it was signed"), hint=(
            f"restore both as first committed (`git log --all --format=%h -- {t.path} {rel}` lists the commits "
            "that hold them); a signature is never moved or re-made for an edited record: a correction is a "
            "new record, signed anew")))


def _unaccepted(pending: list[KeyStanding], targets: list[SignedRecord], rel: str, require: bool,
                report: IdentityReport) -> None:
    """A good signature by a key someone else added for an address that already had one: it counts for no one."""
    k = pending[0]
    for t in targets:
        (report.problems if require else report.warnings).append(IdentityFinding(t.path, "signer_unaccepted", (
            f"{t.path} ({t.kind}) is signed by key {k.fingerprint} ({rel}), listed for {k.principal}: "
            f"{k.sentence()}; it counts for no one"), hint=(
            f"if the key is {k.principal}'s, {k.principal} accepts it with a key they already have "
            f"(`logbook signers accept {k.fingerprint}`, then `logbook commit`); if not, remove its line from the "
            "allowed-signers file: someone signed in another's place")))


def _judge_named(project: Project, records: list[SignedRecord], signer_keys: dict[str, set[str]],
                 standing: Standing, report: IdentityReport) -> None:
    """A record signed, but by none of the keys that hold the address it names as its writer, is exit 4."""
    for r in records:
        keys = signer_keys.get(r.path)
        named = _named(project.root / r.path, r.kind) if keys else None
        if not keys or named is None:
            continue
        role, who, email = named
        holders = standing.holders(email)
        if not holders or keys & holders:
            continue  # the address is no one's by key (a second address of the signer's own), or the writer signed
        report.problems.append(IdentityFinding(r.path, "signer_not_named", (
            f"{r.path} ({r.kind}) names {who} as its {role}, but it is signed by {', '.join(r.signed_by)} "
            f"(key {', '.join(sorted(keys))}), and no key {email} holds ({', '.join(sorted(holders))}) signed it: "
            "one person signed in another's name"), hint=(
            f"a record is never edited: if {email} wrote it, they sign it too (`logbook sign {r.path}`, then "
            f"`logbook commit`); if not, `logbook acknowledge {r.path} --reason TEXT` keeps the evidence for a "
            "teammate to review, and the real writer records it anew")))


def _named(path: Path, what: str) -> tuple[str, str, str] | None:
    """(role, `Name <email>`, email lower-cased) of the writer a record names; None when it names no address."""
    if what in ("preregistration", "amendment"):
        try:
            front, _ = split_record(path.read_bytes().decode("utf-8"), path.name)
        except (OSError, TamperedError, UnicodeDecodeError, ValueError):
            return None  # damaged: verify's own checks name it
        return _writer("author", str(front.get("author") or ""))
    rec = read_record(path)
    if rec is None:
        return None
    if what == "scorecard":
        card = rec.get("scorecard") if isinstance(rec.get("scorecard"), dict) else {}
        role, who = "computed_by", str(card.get("computed_by") or "")
    elif what == "run record":
        role, who = "launcher (author)", str(rec.get("author") or "")
    else:
        name = rec.get("reviewer") if what == "review" else rec.get("accepted_by") or rec.get("author")
        role, who = ("reviewer" if what == "review" else "author"), f"{name or ''} <{rec.get('email') or ''}>"
    return _writer(role, who)


def _writer(role: str, who: str) -> tuple[str, str, str] | None:
    m = re.search(r"<([^<>]+)>\s*$", who)
    return (role, who, m.group(1).strip().lower()) if m else None


def _judge_unsigned(project: Project, records: list[SignedRecord], introduced: dict[str, list[str]],
                    require: bool, report: IdentityReport) -> None:
    if not require:
        return
    entries = project.config.entries_dir.strip("/")
    named = {f.path for f in report.problems if f.kind == "signer_unaccepted"}
    unsigned = [r for r in records if not r.signed_by and r.path not in named]  # named once, for its signer
    commits = {c for r in unsigned for c in introduced.get(r.path[len(entries) + 1:], [])}
    required_at = _require_at(project, commits)
    for r in unsigned:
        made = introduced.get(r.path[len(entries) + 1:], [])
        if made and not all(required_at.get(c, False) for c in made):
            r.grandfathered = True
            report.warnings.append(IdentityFinding(r.path, "unsigned_before_require", (
                f"{r.path} ({r.kind}) is unsigned; it was first committed in {made[0][:7]}, before signing was "
                "required")))
            continue
        where = f"first committed in {made[0][:7]}, when" if made else "not committed yet, and"
        report.problems.append(IdentityFinding(r.path, "unsigned", (
            f"{r.path} ({r.kind}, sha256 {r.digest[:12]}) is signed by no key in {report.allowed_signers}; it was "
            f"{where} logbook.yaml requires signatures (signing.require: true)"), hint=(
            f"its author signs it (`logbook sign {r.path}`, with git's gpg.format ssh and user.signingkey set), "
            "then `logbook commit`; or turn signing.require off in a commit of its own (the chronicle shows it)")))


def _require_at(project: Project, commits: set[str]) -> dict[str, bool]:
    """commit -> whether that commit's own logbook.yaml says `signing.require: true`."""
    blobs = gitbind.read_blobs(project.root, [f"{c}:{CONFIG_FILE}" for c in sorted(commits)])
    out = {}
    for c in commits:
        try:
            raw = yaml.safe_load((blobs.get(f"{c}:{CONFIG_FILE}") or b"").decode("utf-8"))
        except (yaml.YAMLError, UnicodeDecodeError):
            raw = None
        signing = raw.get("signing") if isinstance(raw, dict) else None
        out[c] = isinstance(signing, dict) and signing.get("require") is True
    return out


def sign_existing(project: Project, paths: list[str]) -> list[SignatureFile]:
    """Sign records already written (the key was set up after they were made, or `require` was turned on).

    `paths` are relative to the repository root. A path that is no signed kind
    of record is refused, and so is signing with no key configured: nothing is
    written then.
    """
    if project.config.signing is None:
        raise RefusedError("logbook.yaml has no `signing:` block, so no signature would be checked",
                           hint="signing:\n  allowed_signers: trust/allowed_signers   (committed)")
    if configured_key(project.root) is None:
        raise RefusedError("no signing key: git's gpg.format is not ssh, or user.signingkey is not set",
                           hint="git config gpg.format ssh && git config user.signingkey ~/.ssh/id_ed25519")
    known = {r.path: r for r in _records(project, None)}
    missing = [p for p in paths if p not in known]
    if missing:
        raise NotFoundError(f"{missing[0]} is no record that is signed here",
                            hint="signed records: preregistrations and amendments, run.json, reviews, scorecards; "
                                 "give the path from the repository root")
    _refuse_another_name(project, [known[p] for p in paths])
    out = []
    for p in paths:
        done = sign_digest(project, known[p].digest, what=p)
        if done.path is None:
            raise RefusedError(done.warning or f"{p} could not be signed")
        out.append(SignatureFile(p, done.path.relative_to(project.root).as_posix(), done.fingerprint or ""))
    return out


def _refuse_another_name(project: Project, records: list[SignedRecord]) -> None:
    """Refuse to sign, alone, a record that names a writer whose address another key holds (verify: exit 4)."""
    mine = configured_fingerprint(project.root)
    with SignatureBook(project) as book:
        standing = key_standing(project, book)
        for r in records:
            named = _named(project.root / r.path, r.kind)
            holders = standing.holders(named[2]) if named else set()
            if not holders or mine in holders or {s.fingerprint for s in standing.signers(book, r.digest)} & holders:
                continue  # nobody holds the address, it is mine, or its holder signed already (a co-signature)
            raise RefusedError(f"{r.path} names {named[1]} as its {named[0]}, and your signing key {mine} is not "
                               f"one {named[2]} holds: a record is signed by the person it names; nothing was signed",
                               hint=f"{named[2]} signs it (`logbook sign {r.path}`); a record of your own is written "
                                    "with your own identity (git's user.name and user.email)")


@dataclass
class SignatureFile:
    """A signature `sign_existing` wrote (or found: one key signs a record once)."""

    record: str
    signature: str
    fingerprint: str


# --- the records and their digests ------------------------------------------------------------

def _records(project: Project, prereg_id: str | None) -> list[SignedRecord]:
    """Every signed kind of record on disk (in scope), with the digest a signature covers."""
    root = project.root
    out: list[SignedRecord] = []
    runs_in_scope = None if prereg_id is None else set(runs_referencing(project).get(prereg_id, []))
    if project.prereg_dir.is_dir():
        for p in sorted(project.prereg_dir.glob("*.md")):
            m = AMEND_RE.match(p.name)
            pid = m.group("id") if m else p.stem
            if not ID_RE.match(pid) or (prereg_id is not None and pid != prereg_id):
                continue
            digest = _prereg_digest(p)
            if digest:
                out.append(SignedRecord(p.relative_to(root).as_posix(), "amendment" if m else "preregistration", digest))
    run_dirs = sorted(d for d in project.runs_dir.iterdir() if d.is_dir()) if project.runs_dir.is_dir() else []
    for d in run_dirs:
        if runs_in_scope is not None and d.name not in runs_in_scope:
            continue
        run_json = d / "run.json"
        if run_json.is_file() and not run_json.is_symlink():
            out.append(SignedRecord(run_json.relative_to(root).as_posix(), "run record",
                                    hashlib.sha256(run_json.read_bytes()).hexdigest()))
        out += _json_records(root, d / "outcomes", "scorecard")
    if prereg_id is None:
        out += _json_records(root, project.reviews_dir, "review")
        out += _json_records(root, acknowledgements_dir(project), "acknowledgement")
        out += _json_records(root, acceptances_dir(project), "key acceptance")
    return out


def _prereg_digest(path: Path) -> str | None:
    try:
        front, body = split_record(path.read_bytes().decode("utf-8"), path.name)
        return prereg_hash(front, body)
    except (TamperedError, UnicodeDecodeError, ValueError):  # damaged: verify's own checks name it
        return None


def _json_records(root: Path, folder: Path, kind: str) -> list[SignedRecord]:
    out = []
    for p in record_files(folder):
        rec = read_record(p)
        try:
            digest = record_hash(rec) if rec is not None else None
        except ValueError:
            digest = None
        if digest:
            out.append(SignedRecord(p.relative_to(root).as_posix(), kind, digest))
    return out
