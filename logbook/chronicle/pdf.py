"""The chronicle as a PDF, through Typst, with every word passed as data.

The compile happens in a fresh temporary folder that holds only the template
(`templates/chronicle.typ`, project-local override first), `data.json`, and
copies of the images the policy in `mdconvert` allows. Typst refuses to read
outside its root, and the root holds nothing else, so no note or event can make
the PDF include a file from anywhere: not by markup (there is none to inject:
text reaches the template as JSON strings) and not by an image path.

`data.json` is written day by day while the logs are streamed, so Python holds
one day at a time; Typst then reads the whole document, as it must to lay it out.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from logbook.chronicle.build import Chronicle, DayPage, iter_pages, select_days
from logbook.chronicle.glyphs import compile_pdf
from logbook.chronicle.markdown import MarkdownRenderer, find_template_file
from logbook.chronicle.mdconvert import Converter, ImageStore
from logbook.core.errors import UsageError
from logbook.core.fsutil import atomic_write_bytes
from logbook.core.project import Project
from logbook.eventlog.timeline import list_event_runs, run_log_path
from logbook.runs.lineage import run_lineage
from logbook.eventlog.kinds import kind_of

TEMPLATE = "chronicle.typ"


class PdfError(UsageError):
    """Typst could not compile the chronicle (a broken project-local template, most often)."""


@dataclass
class PdfResult:
    path: Path
    days: list[str] = field(default_factory=list)
    events: int = 0
    notes: int = 0
    images: int = 0
    warnings: list[str] = field(default_factory=list)


def _day_data(page: DayPage, conv: Converter, entries: Path) -> dict[str, Any]:
    base = entries / page.date[:4] / page.date[5:7]
    ctx = page.context()
    return {
        "date": page.date,
        "title": f"{page.date} · {ctx['weekday']}",
        "entries": [
            {"anchor": e["anchor"], "id": e["id"], "kind": kind_of(e), "drill": e["drill"],
             "heading": conv.inline(e["heading"], base), "body": _without_id_line(conv.blocks(e["body"], base), e["id"])}
            for e in page.entries
        ],
        "routine": [{"anchor": r["anchor"], "body": conv.inline(r["body"], base)} for r in page.routine],
        "problems": [conv.inline(p["text"], base) for p in page.problems],
    }


def _without_id_line(blocks: list[Any], entry_id: str) -> list[Any]:
    """The PDF shows the id set apart under the entry, so the body's own "id: ..." line is dropped."""
    if blocks and blocks[-1] == {"t": "p", "c": ["id: ", {"t": "code", "v": entry_id}]}:
        return blocks[:-1]
    return blocks


def _lineage(project: Project, runs: list[str], since: str | None = None,
             until: str | None = None) -> list[dict[str, Any]]:
    """Each run's attempts that overlap the days asked for (all of them without --since/--until); runs with none
    are left out: a week's PDF lists that week's runs."""
    out = []
    for r in runs:
        attempts = [a for a in run_lineage(run_log_path(project, r))
                    if (until is None or a.started[:10] <= until) and (since is None or a.ended[:10] >= since)]
        if attempts or (since is None and until is None):
            out.append({"run": r, "attempts": [a.to_dict() for a in attempts]})
    return out


def _timestamp(last_day: str | None) -> int | None:
    """The PDF's date: the last day it covers, so the same logs give the same document."""
    if not last_day:
        return None
    return int(datetime.fromisoformat(last_day + "T00:00:00+00:00").timestamp())


def render_pdf(project: Project, out: Path, *, run: str | None = None, since: str | None = None,
               until: str | None = None) -> PdfResult:
    """Render the selected days (and each run's lineage) into a PDF at `out`."""
    windows = select_days(project, run, since, until, None)
    chron = Chronicle(project, MarkdownRenderer(project), only_run=run, make_plots=True)
    runs = [run] if run else list_event_runs(project)
    res = PdfResult(path=Path(out))
    with tempfile.TemporaryDirectory(prefix="logbook-pdf-") as tmp:
        root = Path(tmp)
        shutil.copyfile(find_template_file(project, TEMPLATE), root / TEMPLATE)
        images = ImageStore(project.entries, project.assets_dir, root)
        conv = Converter(images)
        with open(root / "data.json", "w", encoding="utf-8") as f:
            f.write('{"days": [')
            for i, page in enumerate(iter_pages(chron, windows, since, until)):
                f.write(("," if i else "") + json.dumps(_day_data(page, conv, project.entries), ensure_ascii=False))
                res.days.append(page.date)
                res.events += page.events
                res.notes += page.notes
            lineage = _lineage(project, runs, since, until)
            meta = {
                "title": "Chronicle", "project": project.root.name, "run": run,
                "first_day": res.days[0] if res.days else None, "last_day": res.days[-1] if res.days else None,
                "since": since, "until": until,
                "runs": [x["run"] for x in lineage], "events": res.events, "notes": res.notes,
            }
            f.write('], "meta": ' + json.dumps(meta, ensure_ascii=False))
            f.write(', "lineage": ' + json.dumps(lineage, ensure_ascii=False) + "}")
        res.images = len(images._copied)
        try:
            # No PDF tags: tagging multiplies compile time tenfold on a long chronicle.
            pdf = compile_pdf(project, TEMPLATE, root, res.warnings, pdf_tags=False,
                              timestamp=_timestamp(res.days[-1] if res.days else None))
        except Exception as e:  # typst raises its own error types; the message says where
            raise PdfError(f"Typst could not compile the chronicle: {str(e).strip()[:2000]}",
                           hint=f"if you restyled {TEMPLATE} in templates/, check it; otherwise please report this") from None
    atomic_write_bytes(Path(out), pdf)
    res.warnings = [*chron.warnings, *res.warnings]
    return res
