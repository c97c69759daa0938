"""`logbook report RUN`: the retrospective of a run, as Markdown or PDF.

Assembled from the logbook alone: the preregistration, the lineage of
attempts, every incident with its action and cost, the scorecard (the recorded
outcome, else a provisional one) with its forecasts scored, the calibration
of every scored forecast so far across runs (with its plot), the reviewers'
sign-offs, and the
disclosures public reports tend to leave out: compute spent on failed
attempts and lost work (device-hours = world_size x seconds / 3600), every
hyperparameter change with who and why, the data mixture over time, manual
against automatic interventions, and goodput.

The Markdown comes from `templates/report.md.j2` (a project-local
`templates/` overrides it). The PDF is that same Markdown parsed into a plain
JSON tree (`mdconvert`) and laid out by `templates/report.typ` in a fresh
temporary folder holding only the template, `data.json` and the allowed
images: no text from the logbook is ever read as Typst markup, and Typst
cannot read outside that folder.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from logbook.chronicle.glyphs import compile_pdf
from logbook.chronicle.markdown import find_template_file, MarkdownRenderer
from logbook.chronicle.mdconvert import Converter, ImageStore
from logbook.chronicle.plots import write_progress_plot
from logbook.chronicle.review import APPROVED, review_queue
from logbook.core.errors import LogbookError, NotFoundError, RefusedError, TamperedError, UsageError
from logbook.core.fsutil import atomic_write_bytes, atomic_write_text
from logbook.core.project import Project
from logbook.core.textfmt import fmt_setting, is_number
from logbook.core.yamlsafe import load_yaml_text
from logbook.records import gitbind
from logbook.eventlog.kinds import (
    Event, ending, is_kind, kind_of, parse_ts, summary as event_summary,
)
from logbook.eventlog.plan import plan_words
from logbook.promises.prereg import load_prereg, runs_referencing
from logbook.promises.reviews import reviews_for
from logbook.runs.facts import RunFacts, load_facts
from logbook.runs.lineage import run_lineage
from logbook.runs.run_record import RunRecord, check_run_id, load_run_record
from logbook.scoring.calibration import calibration
from logbook.scoring.calibration_plot import write_calibration_plot
from logbook.scoring.forecasts import run_summary, summary_text
from logbook.scoring.outcome import load_outcome
from logbook.proof.scorecard import evaluate
from logbook.trust.disclosure import same_question
from logbook.trust.stamp_store import earliest

MD_TEMPLATE = "report.md.j2"
TYP_TEMPLATE = "report.typ"


class ReportError(LogbookError):
    """Typst could not lay out the report (most often a broken project-local template)."""


@dataclass
class ReportResult:
    path: Path
    fmt: str
    plot: Path | None = None
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"path": str(self.path), "format": self.fmt, "plot": str(self.plot) if self.plot else None,
                "warnings": self.warnings}


def _hours(facts: RunFacts, seconds: float | None) -> float | None:
    return facts.device_hours(seconds)


# --- lineage and incidents --------------------------------------------------------------------


def attempts(project: Project, facts: RunFacts) -> list[dict[str, Any]]:
    """Each attempt with its span, steps, ending, and device-hours."""
    spans = facts.attempt_spans()
    out = []
    for a in run_lineage(project.run_dir(facts.run) / "events.jsonl"):
        start, end = spans.get(a.attempt, (None, None))
        secs = None if start is None or end is None else max(0.0, end - start)
        out.append({**a.to_dict(), "seconds": secs, "device_hours": _hours(facts, secs),
                    "finished": a.how.startswith("finished")})
    return out


def incidents(facts: RunFacts) -> list[dict[str, Any]]:
    """Restarts, divergences, rollbacks, aborts and failures, each with what it cost."""
    out = []
    for e in facts.incidents():
        d, kind = Event.of(e).data, kind_of(e)
        lost_s = facts.incident_cost_s(e)
        summary = event_summary(e)
        if e.get("drill") is True and not summary.endswith("(drill)"):
            summary += " (drill)"
        out.append({"id": f"{facts.run}:{e.get('seq')}", "ts": e.get("ts"), "kind": kind, "step": e.get("step"),
                    "attempt": e.get("attempt"), "drill": e.get("drill") is True, "summary": summary,
                    "action": _action(e, facts.restarted_by(e) if is_kind(kind, "restart") else ""), "steps_lost": d.get("steps_lost"), "seconds_lost": d.get("seconds_lost"),
                    "downtime_s": d.get("downtime_s"), "cost_s": lost_s, "device_hours": _hours(facts, lost_s)})
    return out


def _action(e: dict[str, Any], restarted_by: str = "") -> str:
    d, kind = Event.of(e).data, kind_of(e)
    words = plan_words(d.get("plan"))
    tag = f" ({words})" if words else ""
    if is_kind(kind, "restart"):
        return "relaunched by hand" if restarted_by == "by hand" else f"automatic restart ({restarted_by})"
    if is_kind(kind, "divergence_detected"):
        return f"ladder: {d.get('action') or 'none'}{tag}"
    if is_kind(kind, "rollback"):
        return f"rollback{tag}"
    if ending(e) == "aborted":
        return f"run aborted{tag}"
    if ending(e) == "preempted":
        return "saved and exited for requeue"
    if ending(e) in ("hang", "exception"):
        return "exited to be restarted"
    return "recorded"


# --- disclosures ------------------------------------------------------------------------------


def compute(project: Project, facts: RunFacts, rec: RunRecord | None, atts: list[dict[str, Any]]) -> dict[str, Any]:
    """Device-hours of the run, of its failed attempts, and of each kind of time that produced nothing."""
    rep = facts.goodput_report()
    per_step = rep.median_step_s
    parts = {
        "lost_restarts": rep.lost_restart_s, "downtime": rep.downtime_s, "lost_rollbacks": rep.lost_rollback_s,
        "skipped": rep.skipped_s, "startup": rep.startup_s + rep.compile_s + rep.restore_s,
        "checkpoints": rep.checkpoint_save_s, "data": rep.data_s, "productive": rep.productive_s,
    }
    failed_s = sum(a["seconds"] or 0.0 for a in atts if not a["finished"])
    abandoned = facts.state in ("failed", "aborted")
    lost_total = rep.wall_s if abandoned else rep.lost_total_s
    shares = rep.shares_shown() or {}
    dh = lambda s: _hours(facts, s)  # noqa: E731
    return {
        "world_size": facts.world_size, "total_s": rep.wall_s, "total_dh": dh(rep.wall_s),
        "failed_attempts": sum(1 for a in atts if not a["finished"]), "failed_s": failed_s, "failed_dh": dh(failed_s),
        "parts": {k: {"seconds": v, "device_hours": dh(v)} for k, v in parts.items()},
        "lost_total_s": lost_total, "lost_total_dh": dh(lost_total),
        "lost_share": 1.0 if abandoned and rep.wall_s else shares.get("lost"), "abandoned": abandoned,
        "overhead_share": shares.get("overhead"),
        "per_step_s": per_step, "notes": list(rep.notes), "goodput": rep.goodput,
        "sibling_runs": _siblings(project, facts.run, rec),
    }


def _siblings(project: Project, run_id: str, rec: RunRecord | None) -> list[dict[str, Any]]:
    """Other runs answering to the same preregistration, with how they ended and what they cost."""
    if rec is None or not rec.prereg_id:
        return []
    out = []
    for other in runs_referencing(project).get(rec.prereg_id, []):
        if other == run_id:
            continue
        try:
            orec = load_run_record(project, other)
        except NotFoundError:
            continue
        f = load_facts(project, other, orec)
        secs = f.wall_seconds()
        out.append({"run": other, "state": f.state, "last_step": f.last_step, "seconds": secs,
                    "device_hours": f.device_hours(secs), "abandoned": f.state in ("failed", "aborted")})
    return out


def changes(facts: RunFacts) -> list[dict[str, Any]]:
    """Every hyperparameter change (and guard learning-rate scaling), in order."""
    out = []
    again = facts.reapplications()
    for e in facts.of_kind("hparam_change", "lr_scaled"):
        if e.get("seq") in again:
            continue  # a live change re-applied after a restart is the change already listed
        d = Event.of(e).data
        plan = d.get("plan") if isinstance(d.get("plan"), dict) else {}
        if is_kind(e, "lr_scaled"):
            row = {"key": "lr_scale", "who": "guard", "source": "guard", "old": d.get("old"), "new": d.get("new"),
                   "reason": d.get("reason")}
        else:
            row = {k: d.get(k) for k in ("key", "who", "source", "old", "new", "reason")}
        out.append({**row, "who": _name_only(row.get("who")), "id": f"{facts.run}:{e.get('seq')}", "step": e.get("step"), "ts": e.get("ts"),
                    "follows": plan.get("follows"), "rule": plan.get("rule"),
                    "old_text": exact(row.get("old")), "new_text": exact(row.get("new"))})
    return out


def _name_only(who: Any) -> Any:
    """"Ada Tester <ada@lab.example>" -> "Ada Tester": a table column has no room for the address (the chronicle keeps it)."""
    if not isinstance(who, str) or "<" not in who:
        return who
    name = who.split("<", 1)[0].strip()
    return name or who


def exact(v: Any) -> str:
    """A hyperparameter as recorded (1.0, 0.0003, 0.72 for 0.8 × 0.9): never rounded to a few digits."""
    if v is None:
        return "none"
    if isinstance(v, str):
        return v
    return fmt_setting(v)


def mixture(project: Project, facts: RunFacts, rec: RunRecord | None) -> list[dict[str, Any]]:
    """The data mixture over time: the config's phases, then every change of a data weight."""
    rows = []
    cfg = _run_config(project, facts, rec)
    data = cfg.get("data") if isinstance(cfg.get("data"), dict) else {}
    names = [s.get("name") for s in data.get("sources") or [] if isinstance(s, dict)] or \
        sorted(_first_started(facts).get("data_fingerprints") or {})
    phases = [p for p in data.get("phases") or [] if isinstance(p, dict)]
    total = facts.total_steps
    start = 0.0
    for p in phases or [{"until": 1.0, "weights": {n: 1.0 for n in names}}]:
        weights = p.get("weights") if isinstance(p.get("weights"), dict) else {}
        step = round(start * total) if total else None
        rows.append({"step": step, "fraction": start, "weights": _shares({n: weights.get(n, 0.0) for n in names}),
                     "why": "preregistered config" + ("" if phases else " (equal weights)"), "who": "config"})
        start = float(p.get("until") or 1.0)
    for e in facts.of_kind("hparam_change"):
        d = Event.of(e).data
        if str(d.get("key", "")).startswith("data."):
            rows.append({"step": e.get("step"), "fraction": None, "weights": {str(d.get("key")): exact(d.get("new"))},
                         "old": exact(d.get("old")), "why": d.get("reason") or d.get("source"), "who": d.get("who")})
    return rows


def _shares(w: dict[str, Any]) -> dict[str, float]:
    total = sum(float(v) for v in w.values() if is_number(v))
    return {k: (float(v) / total if total else 0.0) for k, v in w.items() if is_number(v)}


def _first_started(facts: RunFacts) -> dict[str, Any]:
    return next((Event.of(e).data for e in facts.of_kind("run_started")), {})


def _run_config(project: Project, facts: RunFacts, rec: RunRecord | None) -> dict[str, Any]:
    """The training config as of the run's code snapshot (falling back to the working tree)."""
    path = rec.config_path if rec else _first_started(facts).get("config_path")
    if not path:
        return {}
    rel = Path(path)
    if rel.is_absolute():
        try:
            rel = rel.resolve().relative_to(project.root.resolve())
        except ValueError:
            return {}
    commit = (rec.snapshot or {}).get("commit") if rec else facts.snapshot_commit
    text = ""
    if commit:
        text = gitbind.git(project.root, "show", f"{commit}:{rel.as_posix()}", check=False)
    if not text and (project.root / rel).is_file():
        text = (project.root / rel).read_text("utf-8", errors="replace")
    try:
        cfg = load_yaml_text(text, str(rel)) if text else {}
    except UsageError:
        return {}
    return cfg if isinstance(cfg, dict) else {}


def interventions(facts: RunFacts) -> list[dict[str, Any]]:
    """Counts of what people did against what the machinery did on its own (`RunFacts.interventions`)."""
    return [{"what": w, "manual": m, "automatic": a} for w, m, a in facts.interventions()]


# --- assembling -------------------------------------------------------------------------------


def report_data(project: Project, run_id: str) -> dict[str, Any]:
    """Everything the report templates show, as plain values."""
    check_run_id(run_id)
    try:
        rec = load_run_record(project, run_id)
    except NotFoundError:
        rec = None
    facts = load_facts(project, run_id, rec)
    if rec is None and not facts.events:
        load_run_record(project, run_id)  # raises: unknown run, with the known ones
    prereg = _prereg(project, rec, facts)
    if prereg is not None and not prereg.get("missing"):
        facts.judge_plans(load_prereg(project, prereg["id"]).all_contingency(rec.amendments if rec else None))
    card = load_outcome(project, run_id)
    if prereg is not None and (card is None or not card.get("final")):
        try:
            card = evaluate(project, run_id, facts).to_dict()
        except (RefusedError, TamperedError):  # nothing to score, or a record that cannot be read
            card = None
    atts = attempts(project, facts)
    return {
        "run": run_id, "project": project.root.name, "state": facts.state, "last_step": facts.last_step,
        "total_steps": facts.total_steps, "world_size": facts.world_size,
        "record": rec.to_dict() if rec else None, "prereg": prereg, "outcome": card, "attempts": atts,
        "incidents": incidents(facts), "reviews": _signoffs(project, run_id),
        "compute": compute(project, facts, rec, atts), "changes": changes(facts),
        "mixture": mixture(project, facts, rec), "interventions": interventions(facts),
        "goodput": _goodput(facts), "first_ts": facts.events[0].get("ts") if facts.events else None,
        "last_ts": facts.events[-1].get("ts") if facts.events else None,
        "forecasts": forecast_rows(card), "calibration": _calibration(project),
    }


def forecast_rows(card: dict[str, Any] | None) -> dict[str, Any]:
    """The scorecard's forecasts for the report: probability forecasts, point forecasts, and their sum."""
    preds = [p for p in (card or {}).get("predictions") or [] if isinstance(p, dict) and p.get("forecast")]
    prob = [p for p in preds if p["forecast"].get("kind") == "probability"]
    points = [p for p in preds if p["forecast"].get("kind") == "point"]
    return {"probability": prob, "points": points, "summary": summary_text(run_summary(preds)),
            "late": [p for p in preds if p.get("late")]}


def _calibration(project: Project) -> dict[str, Any] | None:
    """Calibration across every scored run, when any forecast was scored (None otherwise)."""
    cal = calibration(project)
    if cal.forecasts.empty and cal.late.empty:
        return None
    return cal.to_dict()


def _prereg(project: Project, rec: RunRecord | None, facts: RunFacts) -> dict[str, Any] | None:
    pid = (rec.prereg_id if rec else None) or (None if rec else facts.prereg_id)
    if not pid:
        return None
    try:
        p = load_prereg(project, pid)
    except (NotFoundError, LogbookError):
        return {"id": pid, "missing": True}
    return {"id": p.id, "title": p.title, "author": p.author, "created": p.created, "base_commit": p.base_commit,
            "hypothesis": p.hypothesis, "rationale": p.rationale, "assumptions": p.assumptions,
            "predictions": [{"text": pr.to_text(), "describe": pr.describe(), "source": src}
                            for pr, src in p.all_predictions()],
            "contingency": [{"text": r.text, "summary": r.summary(), "structured": r.structured}
                            for r in p.all_contingency()],
            "config": p.config, "budget": p.budget,
            "same_question": [s.to_dict() for s in same_question(project, p.id)],
            "stamp": _stamp(project, p.sha256),
            "amendments": [{"n": a.n, "kind": a.kind, "created": a.created, "author": a.author, "reason": a.reason}
                           for a in p.amendments]}


def _stamp(project: Project, digest: str) -> dict[str, str] | None:
    """The preregistration's earliest third-party stamp (verify has checked it before any report is built)."""
    stamp = earliest(project, digest)
    return None if stamp is None else {"time": stamp.time.strftime("%Y-%m-%d %H:%M:%S UTC"), "authority": stamp.authority}


def _signoffs(project: Project, run_id: str) -> dict[str, Any]:
    items = [i for i in review_queue(project, run=run_id, include_approved=True)] \
        if (project.run_dir(run_id) / "events.jsonl").is_file() else []
    records = reviews_for(project)
    rows = [{**i.to_dict(), "records": records.get(i.id, [])} for i in items]
    return {"entries": rows, "approved": sum(1 for i in items if i.state == APPROVED), "total": len(items),
            "needed": project.config.review_approvals}


def _goodput(facts: RunFacts) -> dict[str, Any]:
    """Goodput with the lost and overhead shares of the same report: the three add up to 100%."""
    m = facts.goodput(None)
    rep = facts.goodput_report()
    shares = rep.shares_shown() or {}
    return {"value": shares.get("productive", m.value), "rule": m.rule or m.missing, "productive_s": rep.productive_s if rep.attempts else None,
            "wall_s": rep.wall_s if rep.attempts else None, "lost_share": shares.get("lost"),
            "overhead_share": shares.get("overhead")}


# --- rendering --------------------------------------------------------------------------------


def default_out(project: Project, run_id: str, fmt: str) -> Path:
    return project.entries / "reports" / f"{check_run_id(run_id)}.{fmt}"


def render_markdown(project: Project, data: dict[str, Any], *, plot_link: str | None, pdf: bool = False) -> str:
    """The report as Markdown, through the chronicle's escaping template environment.

    `pdf` leaves out what only a Markdown reader needs (the generated-file comment).
    """
    env = MarkdownRenderer(project).env
    text = env.get_template(MD_TEMPLATE).render(r=data, plot=plot_link, pdf=pdf)
    return text.rstrip("\n") + "\n"


def _plot(project: Project, data: dict[str, Any], warnings: list[str]) -> Path | None:
    if not data["last_step"]:
        return None
    path = project.assets_dir / data["run"] / "report-loss.png"
    try:
        return write_progress_plot(project, data["run"], data["last_step"], path,
                                   title=f"run {data['run']}: loss over the whole run")
    except Exception as e:  # a missing plot must not cost the report; say so
        warnings.append(f"could not draw the loss curve: {type(e).__name__}: {e}")
        return None


def _calibration_plot(project: Project, data: dict[str, Any], warnings: list[str]) -> Path | None:
    if not data.get("calibration"):
        return None
    try:
        return write_calibration_plot(calibration(project), project.assets_dir / data["run"] / "report-calibration.png")
    except Exception as e:  # a missing plot must not cost the report; say so
        warnings.append(f"could not draw the calibration plot: {type(e).__name__}: {e}")
        return None


def write_report(project: Project, run_id: str, *, fmt: str = "md", out: Path | None = None) -> ReportResult:
    """Write the retrospective of `run_id` as Markdown or PDF; returns where."""
    if fmt not in ("md", "pdf"):
        raise UsageError(f"format must be md or pdf, got {fmt!r}")
    data = report_data(project, run_id)
    out = Path(out).resolve() if out is not None else default_out(project, run_id, fmt)
    if out.is_dir():
        raise UsageError(f"{out} is a folder; give a file name", hint=f"e.g. --out {out / (run_id + '.' + fmt)}")
    res = ReportResult(out, fmt)
    res.plot = _plot(project, data, res.warnings)
    cal_plot = _calibration_plot(project, data, res.warnings)
    if fmt == "md":
        link = Path(os.path.relpath(res.plot, out.parent)).as_posix() if res.plot else None
        data["calibration_plot"] = Path(os.path.relpath(cal_plot, out.parent)).as_posix() if cal_plot else None
        atomic_write_text(out, render_markdown(project, data, plot_link=link))
        return res
    link = res.plot.relative_to(project.entries).as_posix() if res.plot else None
    data["calibration_plot"] = cal_plot.relative_to(project.entries).as_posix() if cal_plot else None
    md = render_markdown(project, data, plot_link=link, pdf=True)
    atomic_write_bytes(out, _compile_pdf(project, data, md, res.warnings))
    return res


def refresh_reports(project: Project, since: str) -> list[Path]:
    """Write again each Markdown report (entries/reports/<run>.md) that changed between `since` and HEAD.

    After a pull that merged two versions of a report (git's union merge keeps
    both sides' lines), the file reads as two reports at once; the clone's hooks
    call this with ORIG_HEAD so it matches the merged records again. A `since`
    git cannot read (no such commit yet) refreshes nothing.
    """
    folder = (project.entries / "reports").relative_to(project.root).as_posix()
    changed = gitbind.git(project.root, "diff", "--name-only", "-z", since, "HEAD", "--", f"{folder}/*.md",
                          check=False).split("\0")
    written = []
    for rel in sorted(p for p in changed if p):
        run_id = Path(rel).stem
        if (project.root / rel).is_file() and (project.run_dir(run_id) / "run.json").is_file():
            written.append(write_report(project, run_id, fmt="md").path)
    return written


def _compile_pdf(project: Project, data: dict[str, Any], md: str, warnings: list[str]) -> bytes:
    """Typst in a temporary root holding only the template, data.json and allowed images."""
    with tempfile.TemporaryDirectory(prefix="logbook-report-") as tmp:
        root = Path(tmp)
        shutil.copyfile(find_template_file(project, TYP_TEMPLATE), root / TYP_TEMPLATE)
        blocks = Converter(ImageStore(project.entries, project.assets_dir, root)).blocks(md, project.entries)
        if blocks and blocks[0].get("t") == "h" and blocks[0].get("level") == 1:
            blocks = blocks[1:]  # the title block carries the title
        first = next((i for i, b in enumerate(blocks) if b.get("t") == "h"), len(blocks))
        card = data.get("outcome") or {}
        meta = {"title": "Retrospective", "project": data["project"], "run": data["run"], "state": data["state"],
                "prereg": (data.get("prereg") or {}).get("title"), "label": card.get("label"),
                "counts": card.get("counts"), "first_day": (data.get("first_ts") or "")[:10] or None,
                "last_day": (data.get("last_ts") or "")[:10] or None}
        (root / "data.json").write_text(json.dumps({"meta": meta, "lead": blocks[:first], "body": blocks[first:]},
                                                    ensure_ascii=False), "utf-8")
        stamp = parse_ts(data.get("last_ts"))
        try:
            return compile_pdf(project, TYP_TEMPLATE, root, warnings, timestamp=int(stamp) if stamp else None)
        except Exception as e:  # typst raises its own error types; the message says where
            raise ReportError(f"Typst could not lay out the report: {str(e).strip()[:2000]}",
                              hint=f"if you restyled {TYP_TEMPLATE} in templates/, check it; otherwise please report this") from None
