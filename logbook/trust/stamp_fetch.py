"""Which records get third-party stamps, and fetching the ones still missing.

Each preregistration and amendment (its `Logbook-Sha256`), each run record
(`run.json`, hashed over its bytes) and each scorecard (its own `hash`) is
stamped once; a run's event log is stamped at its chain head (the last line's
`hash`) at every checkpoint and at the end of each launch. Commands stamp
what they write (`prereg`, `prereg amend`, `run`, `outcome`); what an
unreachable authority left pending, `logbook stamp` and `logbook commit`
fetch, within one timeout for the whole batch.
"""

from __future__ import annotations

import hashlib
import json
import queue
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from logbook.core.errors import TamperedError
from logbook.core.fsutil import log_tail
from logbook.core.identity import git_identity
from logbook.core.project import Project
from logbook.eventlog.files import record_files, read_record
from logbook.promises.prereg import AMEND_RE
from logbook.promises.prereg_format import record_hash, split_record
from logbook.promises.prereg_input import ID_RE
from logbook.trust.stamp_store import StampOutcome, earliest, has_stamp_file, settings, stamp_digest


@dataclass(frozen=True)
class Stampable:
    """A record that is proven by one stamp of its hash."""

    digest: str
    """The 64-hex SHA-256 a stamp of it carries."""
    kind: str
    """prereg | amendment | run_record | scorecard | log_head"""
    path: str
    """The record's file, relative to the repository root."""
    what: str
    """The record, in words."""
    prereg_id: str | None = None
    run_id: str | None = None
    key: str = ""
    """An amendment's key; "" otherwise."""
    author: str = ""
    """Who wrote the record (`Name <email>`), "" when it does not say: only its author's clone fetches its
    missing stamp, so no stamp file ever has two writers (two clones would add one path with other bytes)."""


def bytes_digest(path: Path) -> str:
    """A run record's hash: SHA-256 over its bytes as written."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def prereg_records(project: Project) -> list[Stampable]:
    """Preregistrations and amendments on disk, with their record hashes (unreadable ones are verify's)."""
    out = []
    folder = project.prereg_dir
    for path in sorted(folder.glob("*.md")) if folder.is_dir() else []:
        m = AMEND_RE.match(path.name)
        pid, key = (m.group("id"), m.group("n")) if m else (path.stem, "")
        if not ID_RE.match(pid):
            continue
        try:
            front, body = split_record(path.read_text("utf-8"), path.name)
            digest = record_hash(front, body)
        except (OSError, UnicodeDecodeError, TamperedError):
            continue
        what = f"amendment {key} of {pid}" if key else f"preregistration {pid}"
        out.append(Stampable(digest, "amendment" if key else "prereg", _rel(project, path), what, pid, None, key,
                             str(front.get("author") or "")))
    return out


def run_records(project: Project) -> list[Stampable]:
    """Run records and scorecards on disk."""
    out = []
    runs = sorted(project.runs_dir.iterdir()) if project.runs_dir.is_dir() else []
    for d in runs:
        rec = d / "run.json"
        if rec.is_file() and not rec.is_symlink():
            fields = _json_object(rec)
            out.append(Stampable(bytes_digest(rec), "run_record", _rel(project, rec), f"run {d.name}'s record",
                                 _str(fields.get("prereg_id")) or None, d.name, author=_str(fields.get("author"))))
        for card in record_files(d / "outcomes"):
            data = read_record(card)
            if data is not None and isinstance(data.get("hash"), str):
                by = (data.get("data") or {}).get("computed_by") if isinstance(data.get("data"), dict) else None
                out.append(Stampable(data["hash"], "scorecard", _rel(project, card),
                                     f"scorecard {card.stem} of run {d.name}", None, d.name, author=_str(by)))
    return out


def log_head(project: Project, run_id: str, author: str = "") -> Stampable | None:
    """The chain head of a run's event log (its last complete line, read from the end), or None when empty."""
    path = project.run_dir(run_id) / "events.jsonl"
    try:
        with open(path, "rb") as f:
            last = log_tail(f).last_line
        rec = json.loads(last) if last else None
    except (OSError, ValueError):
        return None
    if not isinstance(rec, dict) or not isinstance(rec.get("hash"), str):
        return None
    return Stampable(rec["hash"], "log_head", _rel(project, path), f"run {run_id}'s log at seq {rec.get('seq')}",
                     None, run_id, author=author)


def stampables(project: Project) -> list[Stampable]:
    """Every record that should carry a stamp, and every run log's current head."""
    items = prereg_records(project) + run_records(project)
    for run in [s for s in items if s.kind == "run_record"]:
        head = log_head(project, run.run_id, run.author)  # a run's log has one writer: the run's launcher
        if head is not None:
            items.append(head)
    return items


def _json_object(path: Path) -> dict:
    try:
        rec = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError):
        return {}
    return rec if isinstance(rec, dict) else {}


def _str(value: object) -> str:
    return value if isinstance(value, str) else ""


def mine(project: Project, items: list[Stampable]) -> list[Stampable]:
    """The records this clone's git identity wrote (and those that name no author)."""
    me = str(git_identity(project.root))
    return [s for s in items if not s.author or s.author == me]


def _rel(project: Project, path: Path) -> str:
    return path.relative_to(project.root).as_posix()


# --- fetching what is missing ------------------------------------------------------------


def stamp_pending(project: Project, *, only: list[Stampable] | None = None,
                  deadline: float | None = None) -> list[StampOutcome]:
    """Ask for every stamp still missing of this clone's own records (records first, then log heads), within
    one timeout in all.

    An authority that fails once is not asked again in this call, so an
    unreachable one costs one timeout, however many records wait. Records
    another clone wrote are left to it (see `Stampable.author`).
    """
    cfg = settings(project)
    if cfg is None:
        return []
    items = [s for s in mine(project, stampables(project) if only is None else only)
             if not has_stamp_file(project, s.digest)]
    deadline, down = deadline if deadline is not None else time.monotonic() + cfg.timeout_s, set()
    return [stamp_digest(project, s.digest, what=s.what, deadline=deadline, skip=down)
            for s in sorted(items, key=lambda s: s.kind == "log_head")]


def stamp_record(project: Project, item: Stampable, *, commit: bool = False) -> StampOutcome:
    """Stamp one record a command just wrote (bounded by the timeout, pending on failure)."""
    return stamp_digest(project, item.digest, what=item.what, commit=commit)


def stamp_prereg_record(project: Project, prereg_id: str, digest: str, key: str = "") -> StampOutcome:
    """A preregistration's or amendment's stamp, committed on its own right after the record."""
    what = f"amendment {key} of {prereg_id}" if key else f"preregistration {prereg_id}"
    return stamp_digest(project, digest, what=what, commit=True)


class HeadStamper:
    """Stamps a run log's chain head from the launcher, in a thread of its own: training never waits for it.

    `checkpoint(head)` asks for a stamp of the line the launcher just read
    (the log's head at that moment); requests that pile up while an authority
    is slow collapse into the newest (the latest head proves every line
    before it). `close()` stamps the final head and waits at most one timeout.
    """

    def __init__(self, project: Project, run_id: str) -> None:
        self.project = project
        self.run_id = run_id
        self.outcomes: list[StampOutcome] = []
        self._wake: queue.Queue[dict | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        if settings(project) is not None:
            self._thread = threading.Thread(target=self._loop, name=f"stamp-{run_id}", daemon=True)
            self._thread.start()

    def checkpoint(self, head: dict) -> None:
        """`head`: the newest event read from the log (a dict with its chain `hash`)."""
        if self._thread is not None and isinstance(head.get("hash"), str):
            self._wake.put(head)

    def close(self) -> None:
        if self._thread is None:
            return
        self._wake.put(None)
        cfg = settings(self.project)
        self._thread.join(cfg.timeout_s + 1 if cfg else 1)

    def _loop(self) -> None:
        while True:
            item = self._wake.get()
            while item is not None and not self._wake.empty():  # a backlog: the newest head proves the older
                item = self._wake.get_nowait()
            if item is None:
                final = log_head(self.project, self.run_id)
                self._stamp(final.digest if final else None, final.what if final else "")
                return
            self._stamp(item["hash"], f"run {self.run_id}'s log at seq {item.get('seq')}")

    def _stamp(self, digest: str | None, what: str) -> None:
        if digest is None or has_stamp_file(self.project, digest):
            return
        try:
            self.outcomes.append(stamp_digest(self.project, digest, what=what))
        except Exception:  # noqa: BLE001 - a stamp is never worth a run: it stays pending
            pass


# --- a run's start ------------------------------------------------------------------------


def launch_deadline(project: Project) -> float | None:
    """One timeout for everything a launch stamps before the first step (a `time.monotonic()` value)."""
    cfg = settings(project)
    return time.monotonic() + cfg.timeout_s if cfg else None


def stamp_prereg_before_run(project: Project, prereg_id: str, in_force: list[str],
                            deadline: float | None = None) -> list[StampOutcome]:
    """Fetch what a preregistration (and its amendments in force) still lacks, before its run is recorded:
    the run's stamp must come after theirs, and a seed drawn from the preregistration's stamp needs it.

    Only its author's clone fetches a record's stamp (see `Stampable.author`): another's comes back pending,
    said so, since a run started now cannot be proven to come after it.
    """
    items = [s for s in prereg_records(project)
             if s.prereg_id == prereg_id and (not s.key or s.key in in_force)]
    theirs = [s for s in items if s not in mine(project, items) and not has_stamp_file(project, s.digest)]
    return stamp_pending(project, only=items, deadline=deadline) + [
        StampOutcome(s.digest, s.what, pending=[f"written on {s.author}'s clone, which fetches its stamp; a run "
                                                "started before that cannot be proven to come after it"])
        for s in theirs if settings(project) is not None]


def stamp_run_start(project: Project, run_id: str, deadline: float | None = None) -> StampOutcome | None:
    """Stamp the run record just written, strictly later than its preregistration's stamps.

    Bounded by the timeout (or by `deadline`, shared with `stamp_prereg_before_run` so that a launch's first
    step waits one timeout at most): torchrun starts when it returns, stamp or not.
    """
    path = project.run_dir(run_id) / "run.json"
    if settings(project) is None or not path.is_file():
        return None
    rec = json.loads(path.read_text("utf-8"))
    pid, keys = rec.get("prereg_id"), [str(k) for k in rec.get("amendments") or []]
    firsts = [earliest(project, s.digest) for s in prereg_records(project)
              if pid and s.prereg_id == pid and (not s.key or s.key in keys)]
    after = max((f.time for f in firsts if f is not None), default=None)
    return stamp_digest(project, bytes_digest(path), what=f"run {run_id}'s record", after=after, deadline=deadline)
