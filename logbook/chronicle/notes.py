"""Human notes and errata: one immutable file each, `entries/notes/<record id>.json`.

A note is Markdown written by a person (the author comes from git). With
`about`, it is an erratum: it attaches a warning to an earlier entry, which
then links to the note, while the earlier entry's own record stays untouched
(only the rendered day files change). A note's id is `note:<record id>`: the
same on every clone, and never taken by a teammate writing on the same day.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from logbook.chronicle.build import RenderResult, day_path, render_chronicle
from logbook.core.clockskew import clock_warnings
from logbook.core.errors import LogbookError, NotFoundError, UsageError
from logbook.core.identity import signing_identity
from logbook.core.project import Project
from logbook.eventlog import chain
from logbook.eventlog.chain import iter_records
from logbook.eventlog.timeline import NOTES_SOURCE, list_event_runs, run_log_path
from logbook.eventlog.files import is_record_id, iter_folder, read_record, write_record
from logbook.runs.run_record import check_run_id
from logbook.eventlog.kinds import kind_of

MAX_NOTE_BYTES = 64 * 1024
"""A note is a paragraph or a page, not a file dump: larger text belongs in a committed file it links to."""

ID_HINT = ("entry ids look like `qknorm:17` (run:seq) or `note:20261130T101500123456Z-3f9a1c2e`; "
           "each entry in the day files ends with its id")
_ID_RE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]{0,127}):(\d{1,12}|\d{8}T\d{12}Z-[0-9a-f]{8})$")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


@dataclass(frozen=True)
class EntryRef:
    """An entry an erratum can point at."""

    id: str
    source: str
    seq: int | str
    """A run event's position in its log, or a note's record id."""
    ts: str
    kind: str


@dataclass
class NoteResult:
    """What `add_note` did: the record (new, or the one a retry found) and its day files."""

    record: dict[str, Any]
    """The note's record as written."""
    id: str
    """`note:<record id>`, as the chronicle cites it."""
    rendered: RenderResult
    """The day files written or found up to date."""
    render_error: str | None = None
    """Why the day files could not be written (a full disk, a refused template), the record being kept; None when
    they were."""
    render_fix: str | None = None
    """What to do first when a refusal, not the disk, kept the day files from being written."""
    retried: bool = False
    """True when this call found the record a failed earlier call had written, and only redid its day files."""


def check_note_text(text: str | bytes) -> str:
    """The note as clean UTF-8 text, or a UsageError saying what is wrong with it."""
    if isinstance(text, bytes):
        if len(text) > MAX_NOTE_BYTES:
            raise UsageError(f"the note is {len(text):,} bytes; notes are limited to {MAX_NOTE_BYTES // 1024} KiB",
                             hint="commit the long text as a file and link to it from a short note")
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as e:
            raise UsageError(f"the note is not UTF-8 text (invalid byte at offset {e.start})",
                             hint="save the text as UTF-8 and try again") from None
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError as e:  # undecodable bytes from the command line arrive as surrogates
        raise UsageError(f"the note is not UTF-8 text (invalid byte at character {e.start})",
                         hint="save the text as UTF-8 and try again") from None
    if size > MAX_NOTE_BYTES:
        raise UsageError(f"the note is {size:,} bytes; notes are limited to {MAX_NOTE_BYTES // 1024} KiB",
                         hint="commit the long text as a file and link to it from a short note")
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    bad = _CONTROL.search(text)
    if bad:
        raise UsageError(f"the note contains the control character U+{ord(bad.group()):04X} at character {bad.start()}",
                         hint="notes are Markdown text; remove the control character")
    if not text.strip():
        raise UsageError("the note is empty", hint='write the text: logbook note "what you saw"')
    return text.strip("\n") + "\n"


def find_entry(project: Project, entry_id: str) -> EntryRef:
    """The entry with this id (streams one log or reads one note), or an error explaining how ids look.

    An id that is not shaped like one is a usage error (exit 2); a well-formed id
    that names nothing here is NotFoundError.
    """
    m = _ID_RE.match(entry_id or "")
    if not m:
        raise UsageError(f"{entry_id!r} is not an entry id", hint=ID_HINT)
    source, key = m.group(1), m.group(2)
    if source == NOTES_SOURCE:
        return _find_note(project, entry_id, key)
    if not key.isdigit():
        raise UsageError(f"{entry_id!r} is not an entry id: a run's entries are numbered", hint=ID_HINT)
    path = run_log_path(project, source)
    if not path.is_file():
        known = ", ".join(list_event_runs(project)) or "none yet"
        raise NotFoundError(f"no run {source!r} with an event log (for entry {entry_id})", hint=f"runs: {known}; {ID_HINT}")
    for rec in iter_records(path):
        if rec.get("seq") == int(key) and isinstance(rec.get("ts"), str):
            return EntryRef(entry_id, source, int(key), rec["ts"], str(kind_of(rec) or "unknown"))
    raise NotFoundError(f"no entry {entry_id} in {path.relative_to(project.root).as_posix()}", hint=ID_HINT)


def _find_note(project: Project, entry_id: str, key: str) -> EntryRef:
    if not is_record_id(key):
        raise UsageError(f"{entry_id!r} is not a note id: notes are named by record ids", hint=ID_HINT)
    rec = read_record(project.notes_dir / f"{key}.json")
    if rec is None or not isinstance(rec.get("ts"), str):
        raise NotFoundError(f"no note {entry_id} in {project.notes_dir.relative_to(project.root).as_posix()}/",
                            hint="pull first if a teammate wrote it (`git pull`); " + ID_HINT)
    return EntryRef(entry_id, NOTES_SOURCE, key, rec["ts"], str(kind_of(rec) or "note"))


def _last_step(project: Project, run: str) -> int | None:
    """The furthest step a run has reached or plans to reach, from its event log (None: no steps known)."""
    last = None
    for rec in iter_records(run_log_path(project, run)):
        data = rec.get("data") if isinstance(rec.get("data"), dict) else {}
        for v in (rec.get("step"), data.get("total_steps")):
            if isinstance(v, int) and not isinstance(v, bool) and (last is None or v > last):
                last = v
    return last


def _check_step(project: Project, run: str | None, step: int | None) -> None:
    if step is None:
        return
    if isinstance(step, bool) or step < 0:
        raise UsageError(f"--step must be a non-negative step number, got {step}")
    if run is None:
        return
    last = _last_step(project, run)
    if last is not None and step > last:
        raise UsageError(f"--step {step:,} is past the end of run {run}, which goes to step {last:,}",
                         hint="give a step the run has reached or plans to reach")


def note_records(project: Project, *, day: str | None = None):
    """(`note:<id>`, record) for every readable note, in time order (only those written on `day`)."""
    for rec in iter_folder(project.notes_dir, day=day):
        if isinstance(rec.get("id"), str):
            yield f"{NOTES_SOURCE}:{rec['id']}", rec


def add_note(project: Project, text: str | bytes, *, run: str | None = None, step: int | None = None,
             about: str | None = None, render: bool = True) -> NoteResult:
    """Write a signed note (an erratum with `about`) as its own record and re-render the days it shows on."""
    text = check_note_text(text)
    signer = signing_identity(project.root, "a note")
    if run is not None:
        check_run_id(run)
        if not run_log_path(project, run).is_file() and not (project.run_dir(run) / "run.json").is_file():
            known = ", ".join(list_event_runs(project)) or "none yet"
            raise NotFoundError(f"unknown run {run!r}", hint=f"runs: {known}")
    _check_step(project, run, step)
    target = find_entry(project, about) if about is not None else None
    rec: dict[str, Any] = {"kind": "note", "author": signer.name, "email": signer.email, "text": text, "run": run, "step": step}
    if target is not None:
        rec.update(about=target.id, about_ts=target.ts, about_kind=target.kind)
    now = chain.utc_now()
    earlier = _unrendered_twin(project, rec, now[:10]) if render else None
    if earlier is not None:
        written, retried = earlier, True
    else:
        warnings = clock_warnings(now, signer.email, _signed_records(project))
        if warnings:
            rec["clock_warnings"] = warnings
        written, retried = write_record(project.notes_dir, rec, ts=now), False
    days = {written["ts"][:10]}
    if target is not None:
        days.add(target.ts[:10])
    result = NoteResult(written, f"{NOTES_SOURCE}:{written['id']}", RenderResult(), retried=retried)
    if render:
        result.rendered, result.render_error, result.render_fix = _render_days(project, sorted(days))
    return result


_SAME_NOTE = ("email", "text", "run", "step", "about")
"""What makes a note the same note again: its author, its words and what it is about."""


def _unrendered_twin(project: Project, rec: dict[str, Any], day: str) -> dict[str, Any] | None:
    """The note a failed earlier try of this same command wrote, or None.

    The rule: a note with the same author, text, run, step and target, written
    the same UTC day, whose day file does not show it yet. Only a write whose
    day file failed leaves that behind; once the day file shows a note, the
    same words again are a second note (someone saw the same thing twice).
    """
    path = day_path(project, day)
    try:
        shown = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        shown = ""
    for nid, old in note_records(project, day=day):
        if all(old.get(k) == rec.get(k) for k in _SAME_NOTE) and f"`{nid}`" not in shown:
            return old
    return None


def _render_days(project: Project, days: list[str]) -> tuple[RenderResult, str | None, str | None]:
    """Render `days`; a storage failure (a full disk) or a refusal (a template the sandbox refused) is returned as
    a sentence and what to do, the record being already kept."""
    try:
        return render_chronicle(project, days=days, make_plots=False), None, None
    except OSError as e:
        where = f": {_rel(project, e.filename)}" if e.filename else ""
        return RenderResult(), f"{e.strerror or e}{where}", None
    except LogbookError as e:
        return RenderResult(), e.message, e.hint


def _rel(project: Project, name: str) -> str:
    try:
        return Path(name).resolve().relative_to(project.root.resolve()).as_posix()
    except ValueError:
        return str(name)


def _signed_records(project: Project):
    """Every note and review with its citable id: what the clock check compares against."""
    yield from note_records(project)
    for rec in iter_folder(project.reviews_dir):
        yield f"review:{rec.get('id')}", rec
