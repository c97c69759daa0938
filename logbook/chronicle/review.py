"""Team review of the chronicle: a queue of what needs eyes, and signed, append-only review records.

An entry needs review when something happened that a person should look at:
a restart, a divergence, a rollback, an abort, a hand-made or advised
hyperparameter change (scheduled ones were in the config), a progress note,
or a scored outcome. Entries are the run events' stable ids `<run>:<seq>`.

Review records are one immutable file per action, `entries/reviews/<record id>.json`
(`records.py`), so reviews written on several clones on the same day merge
without conflict:

    {"kind": "review", "entry": "qknorm:17", "action": "approve" | "request_changes" | "comment",
     "text": "...", "reviewer": "Ada Tester", "email": "ada@example.org",
     "run": "qknorm", "entry_kind": "restart", "entry_ts": "...", "id": "...", "ts": "...", "hash": "..."}

The reviewer is git's `user.name <user.email>`. Nothing is ever edited: a
reviewer who asked for changes and is now satisfied approves, which replaces
their earlier verdict (records are ordered by time, then id). An entry is
approved when `review_approvals` distinct reviewers (logbook.yaml, counted by
email) have approved it as their latest verdict and none has changes requested
as theirs. The same approval merged in from two clones is one file, so it
counts once. By default the person who launched a run cannot approve its
entries (`review_self_approval` in logbook.yaml).
"""

from __future__ import annotations

import difflib
import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from logbook.chronicle.build import rerender_days
from logbook.chronicle.notes import note_records
from logbook.core.clockskew import clock_warnings
from logbook.core.errors import NotFoundError, RefusedError, TamperedError, UsageError
from logbook.core.fsutil import exclusive
from logbook.core.gitstate import restore_hint
from logbook.core.identity import signing_identity
from logbook.core.project import Project
from logbook.eventlog import chain
from logbook.eventlog.chain import iter_records
from logbook.eventlog.kinds import Event, has_flag, is_kind, kind_of, kinds_where, summary
from logbook.eventlog.timeline import list_event_runs, run_log_path
from logbook.eventlog.files import damaged_records, iter_folder, write_record
from logbook.promises.reviews import ACTIONS, review_records
from logbook.runs.facts import reapplies
from logbook.runs.run_record import load_run_record
from logbook.scoring.outcome import outcome_records
from logbook.trust.ack import ENTRY_PREFIX as ACK_PREFIX, KIND as ACK, acknowledgements_dir, ack_run, ack_summary, \
    check_ack_reviewer
from logbook.trust.people import People, Who
from logbook.trust.setting_history import self_approval_allowed
from logbook.trust.signatures import sign_record

MAX_TEXT_CHARS = 4000
ID_HINT = ("entry ids look like `qknorm:17` (run:seq) or `outcome:<record id>`; "
           "`logbook review` lists those that need review")
_ID_RE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]{0,127}):(\d{1,12})$")

NEEDS_REVIEW = "needs review"
APPROVED = "approved"
CHANGES_REQUESTED = "changes requested"


@dataclass(frozen=True)
class Reviewer:
    """Who signs a review: git's user.name and user.email."""

    name: str
    email: str

    @property
    def key(self) -> str:
        return self.email.lower()

    def __str__(self) -> str:
        return f"{self.name} <{self.email}>"


def reviewer_identity(root: Path) -> Reviewer:
    """git's user.name and user.email (see `identity.git_identity`), or a refusal that says how to set them."""
    ident = signing_identity(root, "a review")
    return Reviewer(ident.name, ident.email)


@dataclass
class QueueItem:
    """One entry that needs review, with the verdicts it has so far."""

    id: str
    run: str
    seq: int
    ts: str
    kind: str
    step: int | None
    attempt: int | None
    drill: bool
    summary: str
    needed: int
    approvals: list[str] = field(default_factory=list)
    """Names of reviewers whose latest verdict is approve."""
    changes_requested: list[str] = field(default_factory=list)
    """Names of reviewers whose latest verdict is request_changes."""
    not_counted: list[str] = field(default_factory=list)
    """Approvals by the run's launcher (by key where signed, else by e-mail), which count only when
    `review_self_approval` is committed as true."""
    comments: int = 0

    @property
    def state(self) -> str:
        if self.changes_requested:
            return CHANGES_REQUESTED
        return APPROVED if len(self.approvals) >= self.needed else NEEDS_REVIEW

    def to_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["state"] = self.state
        return d


# --- what needs review ----------------------------------------------------------------------


def needs_review(rec: dict[str, Any]) -> bool:
    """True for an event a person should look at: a reviewable kind (hparam_change only when not scheduled)."""
    if not has_flag(rec, reviewable=True):
        return False
    if is_kind(rec, "hparam_change"):
        return Event.of(rec).data.get("source") != "schedule"
    return True


def _reviewable_events(project: Project, runs: Iterable[str] | None = None) -> Iterable[tuple[str, dict[str, Any]]]:
    for run in (list_event_runs(project) if runs is None else runs):
        seen: dict[tuple[Any, ...], Any] = {}
        for rec in iter_records(run_log_path(project, run)):
            if is_kind(rec, "hparam_change") and reapplies(rec, seen) is not None:
                continue  # a live change re-applied after a restart: its first application is the entry
            if isinstance(rec.get("seq"), int) and needs_review(rec):
                yield run, rec
        # A scorecard migrated from the old layout is reviewed through the `outcome` event it came from.
        yield from ((run, rec) for rec in outcome_records(project, run) if not rec.get("migrated_from"))
    if runs is None:  # acknowledgements of verify's findings (`trust.ack`) need a reviewer too
        yield from ((ack_run(rec), rec) for rec in iter_folder(acknowledgements_dir(project)) if kind_of(rec) == ACK)


def _entry_id(run: str, rec: dict[str, Any]) -> str:
    """`run:seq` for a run event, `outcome:<record id>` for a scorecard record."""
    if is_kind(rec, "outcome") and isinstance(rec.get("id"), str) and "seq" not in rec:
        return f"outcome:{rec['id']}"
    if kind_of(rec) == ACK:
        return f"{ACK_PREFIX}{rec.get('id')}"
    return f"{run}:{rec['seq']}"


def _item(run: str, rec: dict[str, Any], needed: int) -> QueueItem:
    seq = rec["seq"] if isinstance(rec.get("seq"), int) else -1
    return QueueItem(
        id=_entry_id(run, rec), run=run, seq=seq, ts=str(rec.get("ts", "")), kind=str(kind_of(rec)),
        step=rec.get("step") if isinstance(rec.get("step"), int) else None,
        attempt=rec.get("attempt") if isinstance(rec.get("attempt"), int) else None,
        drill=rec.get("drill") is True, summary=ack_summary(rec) if kind_of(rec) == ACK else summary(rec),
        needed=needed)


def review_queue(project: Project, *, run: str | None = None, include_approved: bool = False) -> list[QueueItem]:
    """Entries that need review (all reviewable entries with `include_approved`), oldest first."""
    if run is not None and not run_log_path(project, run).is_file():
        raise NotFoundError(f"run {run!r} has no event log",
                            hint=f"runs with events: {', '.join(list_event_runs(project)) or 'none yet'}")
    needed = project.config.review_approvals
    out = []
    with People(project) as people:
        verdicts = _verdicts(project, people)
        for r, rec in _reviewable_events(project, None if run is None else [run]):
            item = _item(r, rec, needed)
            _apply_verdicts(project, item, verdicts.get(item.id), people)
            if include_approved or item.state != APPROVED:
                out.append(item)
    out.sort(key=lambda i: (i.ts, i.run, i.seq))
    return out


def identity_notes(project: Project, runs: Iterable[str]) -> list[str]:
    """What the queue says where people can be told apart by e-mail only (which anyone can set)."""
    if project.config.signing is None:
        return ["reviewers and launchers are told apart by e-mail only (logbook.yaml has no `signing:`): "
                "an approval under a second address counts as another person's"]
    with People(project) as people:
        unsigned = [r for r in dict.fromkeys(runs) if (w := people.launcher(r)) is not None and not w.signed]
    return [f"run {r}'s record is signed by no allowed key: its launcher is known by e-mail only" for r in unsigned]


# --- review records -------------------------------------------------------------------------


@dataclass
class _Verdicts:
    latest: dict[str, tuple[str, str, Who]] = field(default_factory=dict)  # person key -> (action, name, who)
    comments: int = 0

    def of(self, me: Who) -> tuple[str, str, Who] | None:
        """The latest verdict of the person `me` is (by key where signed, else by e-mail)."""
        return next((v for v in self.latest.values() if v[2].same_person(me)), None)


def _verdicts(project: Project, people: People | None = None) -> dict[str, _Verdicts]:
    """Entry id -> each reviewer's latest verdict; one person (one key, whatever the e-mail) has one."""
    if people is None:
        with People(project) as own:
            return _verdicts(project, own)
    out: dict[str, _Verdicts] = {}
    for rec in review_records(project):
        entry, action = rec.get("entry"), rec.get("action")
        if not isinstance(entry, str) or action not in ACTIONS:
            continue
        v = out.setdefault(entry, _Verdicts())
        if action == "comment":
            v.comments += 1
            continue
        who = people.of_review(rec)
        v.latest[who.key] = (action, str(rec.get("reviewer") or who.key), who)
    return out


def _apply_verdicts(project: Project, item: QueueItem, v: _Verdicts | None, people: People) -> None:
    if v is None:
        return
    item.comments = v.comments
    launcher = people.launcher(item.run)
    own_ok = self_approval_allowed(project)
    for action, name, who in v.latest.values():
        if action == "approve" and not own_ok and launcher is not None and who.same_person(launcher):
            item.not_counted.append(name)  # the launcher's own approval, under whichever address
            continue
        (item.approvals if action == "approve" else item.changes_requested).append(name)


def check_review_text(text: str | None, *, required: bool) -> str:
    """A comment: plain text, bounded, no control characters."""
    text = (text or "").replace("\r\n", "\n").strip()
    if required and not text:
        raise UsageError("the review text is empty", hint="say what should change, in a sentence")
    if len(text) > MAX_TEXT_CHARS:
        raise UsageError(f"the review text is {len(text):,} characters; the limit is {MAX_TEXT_CHARS:,}",
                         hint="put the long version in a note (`logbook note --about ENTRY`) and summarise it here")
    bad = next((c for c in text if unicodedata.category(c) == "Cc" and c not in "\n\t"), None)
    if bad is not None:
        raise UsageError(f"the review text contains the control character U+{ord(bad):04X}", hint="remove it and retry")
    return text


def find_reviewable(project: Project, entry_id: str) -> QueueItem:
    """The reviewable entry with this id, or a refusal that suggests close ids."""
    needed = project.config.review_approvals
    if (entry_id or "").startswith(("outcome:", ACK_PREFIX)):
        for r, rec in _reviewable_events(project):
            if (is_kind(rec, "outcome") or kind_of(rec) == ACK) and _entry_id(r, rec) == entry_id:
                item = _item(r, rec, needed)
                with People(project) as people:
                    _apply_verdicts(project, item, _verdicts(project, people).get(item.id), people)
                return item
        raise NotFoundError(f"no scorecard {entry_id} here", hint="pull first if a teammate scored the run (`git pull`); "
                            "`logbook review` lists what needs review")
    m = _ID_RE.match(entry_id or "")
    if not m:
        raise NotFoundError(f"{entry_id!r} is not an entry id", hint=ID_HINT)
    run, seq = m.group(1), int(m.group(2))
    if run_log_path(project, run).is_file():
        for rec in iter_records(run_log_path(project, run)):
            if rec.get("seq") != seq:
                continue
            if not needs_review(rec):
                raise RefusedError(
                    f"entry {entry_id} is a {kind_of(rec)} event, which is not in the review queue",
                    hint=f"reviewed kinds: {', '.join(kinds_where(reviewable=True))}; to remark on any entry use `logbook note --about {entry_id}`")
            item = _item(run, rec, needed)
            with People(project) as people:
                _apply_verdicts(project, item, _verdicts(project, people).get(item.id), people)
            return item
    ids = [_entry_id(r, rec) for r, rec in _reviewable_events(project)]
    close = difflib.get_close_matches(entry_id, ids, n=3, cutoff=0.6)
    hint = f"did you mean {', '.join(close)}? " if close else ""
    raise NotFoundError(f"no entry {entry_id} needs review here", hint=hint + ID_HINT)


@dataclass
class ReviewResult:
    record: dict[str, Any]
    item: QueueItem
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"record": self.record, "entry": self.item.to_dict(), "warnings": self.warnings}


def _check_records_intact(project: Project) -> None:
    damaged = damaged_records(project.reviews_dir, project.root)
    if damaged:
        rel, why = damaged[0]
        raise TamperedError(f"{rel}: {why}; a review record changed after it was written",
                            hint=f"review records are never edited: {restore_hint(project.root, rel)}")


def _check_self_approval(project: Project, item: QueueItem, reviewer: Reviewer) -> None:
    """The launcher may not approve their run's entries: by the key git signs with, or by e-mail."""
    with People(project) as people:
        me = people.me(reviewer.email, reviewer.name)
        if item.kind == ACK:
            check_ack_reviewer(project, item.id, me)  # never its author, whatever the setting says
            return
        if self_approval_allowed(project):
            return
        launcher = people.launcher(item.run)
    if launcher is not None and launcher.same_person(me):
        raise RefusedError(
            f"{reviewer.name} launched run {item.run} and cannot approve its entries; nothing was recorded",
            hint=f"ask a teammate to approve {item.id}; you can still comment "
                 f"(`logbook review comment {item.id} TEXT`); `review_self_approval: true` in logbook.yaml, "
                 "committed, allows it")


def add_review(project: Project, entry_id: str, action: str, text: str | None = None, *,
               render: bool = True) -> ReviewResult:
    """Write one review record (signed with git's identity); refuse what would change nothing.

    With `render`, the day file of the reviewed entry is re-rendered, as a note's is.
    """
    if action not in ACTIONS:
        raise UsageError(f"unknown review action {action!r}", hint=f"one of {', '.join(ACTIONS)}")
    text = check_review_text(text, required=action in ("comment", "request_changes"))
    reviewer = reviewer_identity(project.root)
    item = find_reviewable(project, entry_id)
    if action == "approve":
        _check_self_approval(project, item, reviewer)
    # Two reviews at once from one person (two terminals, a script) must not both pass the check below.
    with exclusive(project.state_dir / "reviews.lock"):
        _check_records_intact(project)
        with People(project) as people:
            me = people.me(reviewer.email, reviewer.name)
            latest = _verdicts(project, people).get(item.id, _Verdicts()).of(me)
        if action == "approve" and latest is not None and latest[0] == "approve":
            raise RefusedError(f"{reviewer.name} has already approved {item.id}; nothing was recorded",
                               hint=f"to add a remark, use `logbook review comment {item.id} TEXT`")
        rec: dict[str, Any] = {"kind": "review", "entry": item.id, "action": action, "text": text,
                               "reviewer": reviewer.name, "email": reviewer.email, "run": item.run,
                               "entry_kind": item.kind, "entry_ts": item.ts}
        now = chain.utc_now()

        existing = [*note_records(project), *((f"review:{r.get('id')}", r) for r in review_records(project))]
        warnings = clock_warnings(now, reviewer.email, existing)
        if warnings:
            rec["clock_warnings"] = warnings
        written = write_record(project.reviews_dir, rec, ts=now)
    warnings = sign_record(project, written["hash"], what=f"review review:{written['id']}")
    warnings += rerender_days(project, [item.ts[:10]]) if render else []
    return ReviewResult(written, find_reviewable(project, item.id), warnings)


# --- the state of every run -----------------------------------------------------------------


@dataclass
class RunReviewStatus:
    """Where one run stands with its reviewers."""

    run: str
    entries: int
    needs_review: int
    approved: int
    changes_requested: int
    outcome: bool
    """True when a final outcome is recorded (runs/<run>/outcomes/)."""
    open_ids: list[str] = field(default_factory=list)

    @property
    def signed_off(self) -> bool:
        return self.needs_review == 0 and self.changes_requested == 0 and self.outcome

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "signed_off": self.signed_off}


def review_status(project: Project) -> list[RunReviewStatus]:
    """One line per run with an event log: counts of entries by review state, and the outcome."""
    items = review_queue(project, include_approved=True)
    out = []
    for run in list_event_runs(project):
        mine = [i for i in items if i.run == run]
        st = RunReviewStatus(
            run=run, entries=len(mine),
            needs_review=sum(1 for i in mine if i.state == NEEDS_REVIEW),
            approved=sum(1 for i in mine if i.state == APPROVED),
            changes_requested=sum(1 for i in mine if i.state == CHANGES_REQUESTED),
            outcome=bool(outcome_records(project, run)),
            open_ids=[i.id for i in mine if i.state != APPROVED])
        out.append(st)
    return out
