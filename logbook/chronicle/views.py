"""Turn log records into the plain dicts the chronicle templates read.

Ids are stable and citable: `<run>:<seq>` for a run event (the `seq` of the
hash-chained log never changes) and `note:<record id>` for a note (its file
name, the same on every clone). Each id has an anchor in the Markdown
(`run-<run>-<seq>`, `note-<record id>`); routine events that
are summarised share their day's summary line anchor (`routine-<run>-<day>`).
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from logbook.chronicle.markdown import MarkdownRenderer, Raw, View, view
from logbook.chronicle.plots import progress_plot_path
from logbook.core.project import Project
from logbook.core.textfmt import is_number
from logbook.eventlog.kinds import Event, is_kind, is_routine, kind_of, label
from logbook.eventlog.timeline import NOTES_SOURCE, Item
from logbook.runs.milestones import is_late, milestone_step
from logbook.trust.setting_history import SOURCE as SETTINGS_SOURCE


def entry_id(source: str, seq: Any) -> str:
    return f"{source}:{seq}"


def entry_anchor(source: str, seq: Any, kind: str | None, day: str) -> str:
    if source == NOTES_SOURCE:
        return f"note-{seq}"
    if is_routine(kind):  # summarised in one line per run per day instead of one entry each
        return routine_anchor(source, day)
    return f"run-{source}-{seq}"


def routine_anchor(run: str, day: str) -> str:
    return f"routine-{run}-{day}"


def item_id(item: Item) -> tuple[str, str]:
    """(citable id, anchor) of an entry: `run:seq`, `note:<record id>` or `outcome:<record id>`."""
    rec = item.rec or {}
    if item.rank == 2 and isinstance(rec.get("id"), str):  # a scorecard record (timeline.stream_outcomes)
        return f"outcome:{rec['id']}", f"outcome-{rec['id']}"
    if item.source == SETTINGS_SOURCE:  # a commit that changed who may sign or self-approve
        return f"setting:{rec.get('id')}", f"setting-{rec.get('id')}"
    seq = _seq(item)
    return entry_id(item.source, seq), entry_anchor(item.source, seq, kind_of(rec), item.day)


def _seq(item: Item) -> Any:
    if item.source == NOTES_SOURCE and item.rec and isinstance(item.rec.get("id"), str):
        return item.rec["id"]
    seq = item.rec.get("seq") if item.rec else None
    return seq if isinstance(seq, int) else f"L{item.line}"


def erratum_views(errata: list[dict[str, Any]], r: MarkdownRenderer) -> list[dict[str, Any]]:
    return [{**x, "link": r.link(x["note_day"], x["note_anchor"])} for x in errata]


def event_view(item: Item, r: MarkdownRenderer, errata: dict[str, list[dict[str, Any]]],
               make_plot=None, reviews: dict[str, list[dict[str, Any]]] | None = None,
               extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """The template context of one run event (not routine) or one note.

    `make_plot(entry, path)` is called for a milestone whose plot file is missing.
    `reviews` maps entry ids to their review records (`logbook.promises.reviews.reviews_for`);
    `extra` adds fields computed from other records (a restart's failure statistics).
    """
    rec = item.rec or {}
    kind = kind_of(rec) or "unknown"
    eid, anchor = item_id(item)
    ts = rec.get("ts", item.ts)
    e: dict[str, Any] = View({
        "id": eid, "anchor": anchor, "kind": kind,
        "ts": ts, "day": item.day, "time": ts[11:16], "source": item.source,
        "run": item.source if item.source not in (NOTES_SOURCE, SETTINGS_SOURCE) else rec.get("run"),
        "attempt": rec.get("attempt"), "step": rec.get("step"), "tokens": rec.get("tokens"),
        "drill": rec.get("drill") is True, "data": view(Event.of(rec).data),
        "errata": view(erratum_views(errata.get(eid, []), r)),
        "reviews": view((reviews or {}).get(eid, [])),
    })
    if extra:
        e.update(view(extra))
    if item.source == NOTES_SOURCE and is_kind(kind, "note"):
        e.update(_note_fields(rec, r))
    elif is_kind(kind, "milestone") and item.source != NOTES_SOURCE:
        e["m"] = milestone_fields(e, r.project, r, make_plot)
    # A record's hash pins its content; errata and the day it lands on complete the key.
    # Milestones are always rendered: drawing a missing plot is a side effect.
    key = None
    if isinstance(rec.get("hash"), str) and not is_kind(kind, "milestone"):
        key = (item.source, item.ts, rec["hash"], _frozen(e["errata"]), _frozen(e["reviews"]), _frozen(extra or {}))
    e["heading"], e["body"] = r.cached(key, e)
    return e


def _frozen(x: Any) -> Any:
    """A hashable copy of plain data, for the entry cache's key."""
    if isinstance(x, dict):
        return tuple(sorted((k, _frozen(v)) for k, v in x.items()))
    if isinstance(x, (list, tuple)):
        return tuple(_frozen(v) for v in x)
    return x


def _note_fields(rec: dict[str, Any], r: MarkdownRenderer) -> dict[str, Any]:
    text = rec.get("text") if isinstance(rec.get("text"), str) else ""
    about, about_ts = rec.get("about"), rec.get("about_ts")
    link = None
    if isinstance(about, str) and isinstance(about_ts, str):
        src, _, seq = about.partition(":")
        link = r.link(about_ts[:10], entry_anchor(src, seq, rec.get("about_kind"), about_ts[:10]))
    return {
        "kind": "note", "author": rec.get("author") or "unknown", "email": rec.get("email"),
        # Quoted line by line: a blockquote ends where the note ends, so an
        # unclosed code fence or HTML comment in a note cannot swallow the
        # entries after it.
        "text": Raw(text), "quoted": Raw(_blockquote(text)),
        "about": about if isinstance(about, str) else None, "about_link": link,
        "clock_warnings": clock_warning_list(rec),
    }


def clock_warning_list(rec: dict[str, Any]) -> list[str]:
    """The clock warnings a person's record carries (`clockskew`), as plain strings."""
    w = rec.get("clock_warnings")
    return [str(x) for x in w] if isinstance(w, list) else []


def _blockquote(text: str) -> str:
    return "\n".join(("> " + line) if line.strip() else ">" for line in text.strip("\n").split("\n"))


def milestone_fields(e: dict[str, Any], project: Project, r: MarkdownRenderer, make_plot) -> dict[str, Any]:
    """Late label, target step and the plot link (or why it is not shown) of a milestone."""
    d = e["data"]
    frac, total, step = d.get("fraction"), d.get("total_steps"), e.get("step")
    m: dict[str, Any] = View({"late": False, "target_step": None})
    if is_number(frac) and isinstance(total, int) and total > 0:
        m["target_step"] = milestone_step(frac, total)
        m["late"] = isinstance(step, int) and is_late(frac, total, step)
    rel, refused = plot_location(project, e["run"], d)
    if refused:
        m["plot_refused"] = refused
    elif rel:
        m["plot_link"] = r.asset_link(rel)
        m["plot_rel"] = rel
        if make_plot is not None and not (project.entries / rel).exists():
            make_plot(e, project.entries / rel)
    return m


def plot_location(project: Project, run: str | None, data: dict[str, Any]) -> tuple[str | None, str | None]:
    """(path relative to entries/, None) for a plot inside the assets folder, else (None, the path refused)."""
    plot = data.get("plot")
    if plot is None:
        if run is None or not is_number(data.get("fraction")):
            return None, None
        path = progress_plot_path(project, run, data["fraction"])
        return path.relative_to(project.entries).as_posix(), None
    if not isinstance(plot, str) or not plot or "\x00" in plot:
        return None, str(plot)
    assets = project.assets_dir.resolve()
    p = Path(plot)
    if p.is_absolute() or ".." in p.parts:
        return None, plot
    target = (project.entries / p)
    try:
        ok = target.resolve().is_relative_to(assets)
    except (OSError, RuntimeError):
        ok = False
    if not ok:
        return None, plot
    return target.relative_to(project.entries).as_posix(), None


def routine_views(day: str, items: list[Item], r: MarkdownRenderer, errata: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """One summary line per run for the day's routine events: checkpoints, skipped updates, any other routine kind."""
    per_run: dict[str, dict[str, list[Item]]] = {}
    for it in items:
        per_run.setdefault(it.source, {}).setdefault(kind_of(it.rec), []).append(it)
    out = []
    for run in sorted(per_run):
        kinds = per_run[run]
        view: dict[str, Any] = View({"run": run, "day": day, "anchor": routine_anchor(run, day), "ids": [], "errata": []})
        for its in kinds.values():
            for it in its:
                eid = entry_id(run, _seq(it))
                view["ids"].append(eid)
                view["errata"].extend(View(x) for x in erratum_views(errata.get(eid, []), r))
        view["checkpoints"] = _view_or_none(_checkpoint_summary(kinds.get("checkpoint_saved", [])))
        view["skips"] = _view_or_none(_skip_summary(kinds.get("step_skipped", [])))
        # A routine kind the line has no words of its own for is still counted, by its label, never dropped.
        view["others"] = [View(_other_summary(kind, its)) for kind, its in kinds.items()
                          if not is_kind(kind, "checkpoint_saved", "step_skipped")]
        view["body"] = r.routine(view)
        out.append(view)
    return out


def _view_or_none(d: dict[str, Any] | None) -> View | None:
    return None if d is None else View(d)


def _checkpoint_summary(items: list[Item]) -> dict[str, Any] | None:
    if not items:
        return None
    blocking = [it.rec["data"]["blocking_s"] for it in items
                if isinstance(it.rec.get("data"), dict) and is_number(it.rec["data"].get("blocking_s"))]
    steps = [it.rec.get("step") for it in items if isinstance(it.rec.get("step"), int)]
    sizes = [it.rec["data"]["bytes"] for it in items
             if isinstance(it.rec.get("data"), dict) and is_number(it.rec["data"].get("bytes"))]
    return {
        "count": len(items), "last_step": steps[-1] if steps else None,
        "median_blocking_s": statistics.median(blocking) if blocking else None,
        "total_blocking_s": sum(blocking) if blocking else None,
        "last_bytes": sizes[-1] if sizes else None,
        "drills": sum(1 for it in items if it.rec.get("drill") is True),
    }


def _other_summary(kind: str, items: list[Item]) -> dict[str, Any]:
    steps = [it.rec.get("step") for it in items if isinstance(it.rec.get("step"), int)]
    return {"kind": kind, "label": label(kind), "count": len(items), "last_step": steps[-1] if steps else None,
            "drills": sum(1 for it in items if it.rec.get("drill") is True)}


def _skip_summary(items: list[Item]) -> dict[str, Any] | None:
    if not items:
        return None
    steps = [it.rec.get("step") for it in items if isinstance(it.rec.get("step"), int)]
    reasons = sorted({str(it.rec["data"].get("reason")) for it in items
                      if isinstance(it.rec.get("data"), dict) and it.rec["data"].get("reason")})
    return {"count": len(items), "steps": steps[:10], "more": max(0, len(steps) - 10), "reasons": reasons}
