"""`logbook migrate`: bring a logbook written in the shared-log layout to one file per record.

Older logbooks kept every note in `notes/notes.jsonl`, every review in
`reviews/reviews.jsonl` and a run's scorecard in `runs/<run>/outcome.json`
(rewritten at each scoring). Migration copies each of those records into its own
file (`records.py`), keeping its time, author and text, and the id it had
(`legacy`), so nothing is lost and every old id can still be traced:

- a note `note:3` becomes `notes/<record id>.json`; an erratum about another
  note is pointed at that note's new id;
- a review becomes `reviews/<record id>.json`, still about the same entry;
- `outcome.json` becomes `runs/<run>/outcomes/<record id>.json`, marked
  `migrated_from` the `outcome` event the old layout wrote, which stays in the
  run's log (logs are append-only) and keeps showing in the chronicle.

The old files are left exactly as they are: they are committed records and
logs, and `verify` keeps checking them; the logbook simply stops reading them.
Migration is idempotent: a record already copied (same `legacy` id) is skipped.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from logbook.core.project import Project
from logbook.eventlog.chain import iter_records
from logbook.eventlog.files import iter_folder, write_record
from logbook.eventlog.kinds import is_kind

_BOOKKEEPING = ("v", "seq", "prev", "hash", "ts", "id")


@dataclass
class MigrateResult:
    """What `migrate` copied, and what it found already copied."""

    notes: int = 0
    reviews: int = 0
    outcomes: int = 0
    skipped: int = 0
    """Records already migrated by an earlier run."""
    remapped: dict[str, str] = field(default_factory=dict)
    """Old note id -> new note id."""


def _legacy_ids(folder: Path) -> dict[str, str]:
    return {str(r["legacy"]): str(r.get("id")) for r in iter_folder(folder) if isinstance(r.get("legacy"), str)}


def _body(rec: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in rec.items() if k not in _BOOKKEEPING}


def _migrate_notes(project: Project, res: MigrateResult) -> None:
    done = _legacy_ids(project.notes_dir)
    for rec in iter_records(project.notes_log):
        if not isinstance(rec.get("seq"), int) or not isinstance(rec.get("ts"), str) or not is_kind(rec, "note"):
            continue
        old = f"note:{rec['seq']}"
        if old in done:
            res.remapped[old], res.skipped = f"note:{done[old]}", res.skipped + 1
            continue
        body = _body(rec)
        about = body.get("about")
        if isinstance(about, str) and about in res.remapped:  # notes are in order: an erratum follows its target
            body["about"] = res.remapped[about]
        written = write_record(project.notes_dir, {**body, "legacy": old}, ts=rec["ts"])
        res.remapped[old] = f"note:{written['id']}"
        res.notes += 1


def _migrate_reviews(project: Project, res: MigrateResult) -> None:
    done = _legacy_ids(project.reviews_dir)
    for rec in iter_records(project.reviews_log):
        if not isinstance(rec.get("seq"), int) or not isinstance(rec.get("ts"), str):
            continue
        old = f"review:{rec['seq']}"
        if old in done:
            res.skipped += 1
            continue
        # A review of an old `outcome` event stays on it: the event is still in the log and the chronicle.
        write_record(project.reviews_dir, {**_body(rec), "legacy": old}, ts=rec["ts"])
        res.reviews += 1


def _outcome_event(project: Project, run: str) -> dict[str, Any] | None:
    last = None
    for e in iter_records(project.run_dir(run) / "events.jsonl"):
        if is_kind(e, "outcome"):
            last = e
    return last


def _migrate_outcomes(project: Project, res: MigrateResult) -> None:
    """Copy each run's outcome.json into the run's outcomes/ folder."""
    if not project.runs_dir.is_dir():
        return
    for old_file in sorted(project.runs_dir.glob("*/outcome.json")):
        run = old_file.parent.name
        try:
            card = json.loads(old_file.read_text("utf-8"))
        except (OSError, ValueError):
            continue
        if not isinstance(card, dict):
            continue
        event = _outcome_event(project, run)
        old_id = str(card.get("event") or (f"{run}:{event['seq']}" if event else f"{run}:outcome.json"))
        folder = old_file.parent / "outcomes"
        done = _legacy_ids(folder)
        if old_id in done:
            res.skipped += 1
            continue
        data = dict(event.get("data") or {}) if event else {}
        ts = str(card.get("computed_at") or (event or {}).get("ts") or "")
        rec = {"kind": "outcome", "run": run, "step": card.get("last_step"), "data": data, "scorecard": card,
               "legacy": old_id, "migrated_from": old_id if event else None}
        write_record(folder, rec, ts=ts or None)
        res.outcomes += 1


def migrate(project: Project) -> MigrateResult:
    """Copy every record of the shared-log layout into its own file; idempotent, nothing deleted."""
    res = MigrateResult()
    _migrate_notes(project, res)
    _migrate_outcomes(project, res)
    _migrate_reviews(project, res)
    return res
