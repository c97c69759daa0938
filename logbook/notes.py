"""Human notes and errata: `entries/notes/notes.jsonl`, hash-chained and append-only.

A note is Markdown written by a person (the author comes from git). With
`about`, it is an erratum: it attaches a warning to an earlier entry, which
then links to the note, while the earlier entry's own record stays untouched
(the logs are append-only; only the rendered day files change).
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .chain import ChainedLog, iter_records
from .chronicle import RenderResult, render_chronicle
from .errors import NotFoundError, RefusedError, UsageError
from .eventstream import NOTES_SOURCE, list_event_runs, run_log_path
from .project import Project
from .runs import check_run_id

MAX_NOTE_BYTES = 64 * 1024
"""A note is a paragraph or a page, not a file dump: larger text belongs in a committed file it links to."""

ID_HINT = "entry ids look like `qknorm:17` (run:seq) or `note:3`; each entry in the day files ends with its id"
_ID_RE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]{0,127}):(\d{1,12})$")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


@dataclass(frozen=True)
class EntryRef:
    """An entry an erratum can point at."""

    id: str
    source: str
    seq: int
    ts: str
    kind: str


@dataclass
class NoteResult:
    record: dict[str, Any]
    id: str
    rendered: RenderResult


def git_identity(root: Path) -> tuple[str, str]:
    """(user.name, user.email) from git config, or a refusal that says how to set them."""
    def get(key: str) -> str:
        r = subprocess.run(["git", "config", "--get", key], cwd=root, capture_output=True, text=True)
        return r.stdout.strip() if r.returncode == 0 else ""

    name, email = get("user.name"), get("user.email")
    if not name:
        raise RefusedError(
            "no git identity: notes are signed with git's user.name, which is not set",
            hint='run `git config user.name "Your Name"` and `git config user.email you@example.org`',
        )
    return name, email


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
    """The entry with this id (streams one log), or NotFoundError explaining how ids look."""
    m = _ID_RE.match(entry_id or "")
    if not m:
        raise NotFoundError(f"{entry_id!r} is not an entry id", hint=ID_HINT)
    source, seq = m.group(1), int(m.group(2))
    if source == NOTES_SOURCE:
        path = project.notes_log
    else:
        path = run_log_path(project, source)
        if not path.is_file():
            known = ", ".join(list_event_runs(project)) or "none yet"
            raise NotFoundError(f"no run {source!r} with an event log (for entry {entry_id})", hint=f"runs: {known}; {ID_HINT}")
    for rec in iter_records(path):
        if rec.get("seq") == seq and isinstance(rec.get("ts"), str):
            return EntryRef(f"{source}:{seq}", source, seq, rec["ts"], str(rec.get("kind") or "unknown"))
    raise NotFoundError(f"no entry {entry_id} in {path.relative_to(project.root).as_posix()}", hint=ID_HINT)


def add_note(project: Project, text: str | bytes, *, run: str | None = None, step: int | None = None,
             about: str | None = None, render: bool = True) -> NoteResult:
    """Append a signed note (an erratum with `about`) and re-render the days it shows on."""
    text = check_note_text(text)
    name, email = git_identity(project.root)
    if run is not None:
        check_run_id(run)
        if not run_log_path(project, run).is_file() and not (project.run_dir(run) / "run.json").is_file():
            known = ", ".join(list_event_runs(project)) or "none yet"
            raise NotFoundError(f"unknown run {run!r}", hint=f"runs: {known}")
    if step is not None and (isinstance(step, bool) or step < 0):
        raise UsageError(f"--step must be a non-negative step number, got {step}")
    target = find_entry(project, about) if about is not None else None
    rec: dict[str, Any] = {"kind": "note", "author": name, "email": email, "text": text, "run": run, "step": step}
    if target is not None:
        rec.update(about=target.id, about_ts=target.ts, about_kind=target.kind)
    written = ChainedLog(project.notes_log).append(rec)
    days = {written["ts"][:10]}
    if target is not None:
        days.add(target.ts[:10])
    rendered = render_chronicle(project, days=sorted(days), make_plots=False) if render else RenderResult()
    return NoteResult(written, f"{NOTES_SOURCE}:{written['seq']}", rendered)
