"""Review records as written: one file each under `reviews/`, read in (time, id) order.

This is the reading side that the chronicle needs (who approved, asked for
changes or commented on an entry). The review queue and writing a review
live in `review.py`, above the chronicle, because a new review re-renders
the day that shows it.
"""

from __future__ import annotations

from typing import Any

from logbook.core.project import Project
from logbook.eventlog.files import iter_folder
from logbook.records.folder_index import folder_records

ACTIONS = ("comment", "approve", "request_changes")
"""What a review record says of its entry."""

_SHOWN = ("entry", "action", "ts", "id", "reviewer", "email", "text", "clock_warnings")
"""The fields of a review the chronicle shows."""


def review_records(project: Project) -> list[dict[str, Any]]:
    """Every readable review record, in (time, id) order."""
    return sorted(iter_folder(project.reviews_dir), key=lambda r: (str(r.get("ts")), str(r.get("id"))))


def reviews_for(project: Project) -> dict[str, list[dict[str, Any]]]:
    """Entry id -> its review records in order, as the chronicle templates read them.

    Each record: `id` (`review:<record id>`), `action`, `verb` (approved, asked for
    changes, commented), `reviewer`, `email`, `text`, `ts`, `date`, `time`, `clock_warnings`.
    """
    verbs = {"approve": "approved", "request_changes": "asked for changes", "comment": "commented"}
    out: dict[str, list[dict[str, Any]]] = {}
    shown = folder_records(project, project.reviews_dir, _SHOWN)  # a lab's year of reviews: only what changed is read
    for rec in sorted(shown, key=lambda r: (str(r.get("ts")), str(r.get("id")))):
        entry, action, ts = rec.get("entry"), rec.get("action"), rec.get("ts")
        if not isinstance(entry, str) or action not in ACTIONS or not isinstance(ts, str):
            continue
        out.setdefault(entry, []).append({
            "id": f"review:{rec.get('id')}", "action": action, "verb": verbs[action],
            "reviewer": str(rec.get("reviewer") or "unknown"), "email": rec.get("email"),
            "text": rec.get("text") if isinstance(rec.get("text"), str) else "",
            "ts": ts, "date": ts[:10], "time": ts[11:16],
            "clock_warnings": [str(w) for w in rec.get("clock_warnings") or [] if isinstance(w, str)],
        })
    return out
