"""`logbook site --out DIR`: the logbook as a static site, readable from file:// or any static host.

Pages: an index of runs and preregistrations, a page per run (its
preregistration, predictions against what was measured, its metrics plotted
with the record's events marked, incidents with their cost, the scorecard and
goodput), the chronicle's day pages with each entry's review state, and a
calibration page. Every page says what `verify` found when the site was built
and the commit it was built from.

What a page states comes from what the report and the chronicle already
compute (`report.report_data`, `build.Chronicle`, `review.review_queue`,
`calibration`); the site only lays it out. Text reaches the HTML through
jinja2's autoescape, and Markdown (the chronicle's entries, notes) through
markdown-it with raw HTML off and unsafe link schemes refused. Plots are
Vega-Lite specs in JSON data blocks drawn by Vega from `assets/`: no CDN, no
inline script (each page's Content-Security-Policy allows scripts from the
site itself only). Everything is sorted and no clock is read, so one commit
builds the same bytes.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from logbook.chronicle.build import Chronicle
from logbook.chronicle.markdown import MarkdownRenderer, template_dirs
from logbook.chronicle.report import report_data
from logbook.chronicle.review import review_queue
from logbook.chronicle.sitespecs import MARK_COLOURS, metric_spec, reliability_spec
from logbook.core.errors import RefusedError, UsageError
from logbook.core.fsutil import atomic_write_bytes
from logbook.core.project import Project
from logbook.core.textfmt import fmt_duration, fmt_int, fmt_num, fmt_pct
from logbook.eventlog.kinds import counted_as, has_flag, is_kind, summary as event_summary
from logbook.promises.prereg import list_preregs, runs_referencing
from logbook.proof.verify import verify_project
from logbook.records import gitbind
from logbook.runs.compare import compare_runs, fmt_value
from logbook.runs.facts import load_facts, RunFacts
from logbook.runs.runlist import list_runs
from logbook.trust.stamp_fetch import prereg_records, run_records
from logbook.trust.stamp_store import earliest
from logbook.scoring.calibration import calibration

MARKER = ".logbook-site"
"""Marks a folder as a site this command built, so a rebuild may replace it (and nothing else)."""
BUNDLE = "assets/vega-bundle.js"
OWN_ASSETS = ("site.css", "site.js")
FIRST_METRICS = ("loss", "val_loss")
"""Plotted first, in this order; every other metric follows by name."""
_COUNTED = {"restarts": "restart", "spikes": "spike", "skipped_steps": "skip", "rollbacks": "rollback"}


@dataclass
class SiteResult:
    """What `build_site` wrote."""

    out: Path
    pages: list[str] = field(default_factory=list)
    """Pages written, relative to `out`, sorted."""
    bytes: int = 0
    commit: str | None = None
    verify_ok: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"out": str(self.out), "pages": self.pages, "bytes": self.bytes, "commit": self.commit,
                "verify_ok": self.verify_ok}


class SiteRenderer(MarkdownRenderer):
    """The chronicle's Markdown with links to the site's day pages and its copies of the entries' files."""

    def __init__(self, project: Project, out: Path) -> None:
        super().__init__(project, out_dir=out)  # out_dir keeps its entries apart in the shared entry cache
        self.files: set[str] = set()

    def link(self, day: str, anchor: str) -> str:
        return f"../days/{day}.html#{anchor}"

    def asset_link(self, rel: str) -> str:
        self.files.add(rel)
        return f"../files/{rel}"


def _vega_bundle() -> bytes:
    try:
        import vl_convert
    except ImportError:
        raise UsageError("the static site needs vl-convert-python (Vega, Vega-Lite and Vega-Embed, offline)",
                         hint="pip install 'logbook[site]'") from None
    return vl_convert.javascript_bundle().encode("utf-8")


def _markdown():
    from markdown_it import MarkdownIt

    # js-default: raw HTML off (a note's <script> shows as text), tables on; javascript: links are refused.
    return MarkdownIt("js-default")


def _environment(project: Project):
    import jinja2

    from logbook.chronicle.sandbox import TemplateEnvironment

    env = TemplateEnvironment(loader=jinja2.FileSystemLoader([str(d) for d in template_dirs(project)]),
                             autoescape=True, trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
    env.filters.update(num=fmt_num, comma=fmt_int, pct=fmt_pct, dur=fmt_duration, cell=fmt_value)
    return env


def _spec_json(spec: dict[str, Any]) -> str:
    """JSON that cannot end its <script> block: <, > and & as escapes, keys sorted for identical bytes."""
    text = json.dumps(spec, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")


# --- what every page says -----------------------------------------------------------------------


def built_from(project: Project) -> dict[str, Any]:
    """The commit the site is built from, its time, and whether the working tree had more."""
    commit = gitbind.head_commit(project.root)
    when = gitbind.git(project.root, "show", "-s", "--format=%cI", "HEAD", check=False).strip() if commit else ""
    dirty = bool(gitbind.git(project.root, "status", "--porcelain", "--untracked-files=no", check=False).strip())
    return {"commit": commit, "short": (commit or "")[:12], "time": when or None, "dirty": dirty}


def verify_said(project: Project) -> dict[str, Any]:
    """What `verify` said at build time: its verdict and the first problems, in its words, and per record file
    who signed it as verify judged it (`signed`: path -> principals; empty where signing is off)."""
    report = verify_project(project)
    identity = report.to_dict().get("identity") or {}
    return {"ok": report.ok, "problems": [f.message for f in report.problems][:10],
            "problem_count": len(report.problems), "warning_count": len(report.warnings),
            "unverifiable": len(report.unverifiable), "signing": bool(identity.get("enabled")),
            "signed": {r["path"]: r.get("signed_by") or [] for r in identity.get("records") or []}}


def record_proofs(project: Project, said: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Per run: its records (its preregistration and amendments, its run record, its scorecards), each with its
    earliest third-party stamp and the people verify found signed it."""
    records = run_records(project)
    preregs = prereg_records(project)
    out: dict[str, list[dict[str, Any]]] = {}
    for run_id in sorted({r.run_id for r in records if r.run_id}):
        own = [r for r in records if r.run_id == run_id]
        pids = {r.prereg_id for r in own if r.prereg_id}
        rows = []
        for rec in [p for p in preregs if p.prereg_id in pids] + own:
            stamp = earliest(project, rec.digest)
            rows.append({"what": rec.what, "path": rec.path,
                         "stamp": None if stamp is None else {"time": stamp.time.strftime("%Y-%m-%d %H:%M:%S UTC"),
                                                              "authority": stamp.authority},
                         "signed_by": said["signed"].get(rec.path)})
        out[run_id] = rows
    return out


# --- the pages ----------------------------------------------------------------------------------


def run_marks(facts: RunFacts) -> list[dict[str, Any]]:
    """The run's events that a curve marks (restarts, spikes, skips, rollbacks, live changes, milestones, saves)."""
    marks = []
    for e in facts.run_events():
        what = _COUNTED.get(counted_as(e) or "")
        if what is None and has_flag(e, setting_change=True):
            what = "live change"
        elif what is None and is_kind(e, "milestone"):
            what = "milestone"
        elif what is None and is_kind(e, "checkpoint_saved"):
            what = "checkpoint"
        if what and isinstance(e.get("step"), int):
            marks.append({"step": e["step"], "what": what, "summary": event_summary(e), "id": f"{facts.run}:{e.get('seq')}"})
    return marks


def run_plots(project: Project, run_id: str) -> list[dict[str, Any]]:
    """One Vega-Lite spec per logged metric, loss first, each with the run's events marked."""
    facts = load_facts(project, run_id)
    curves = facts.curves()
    names = [n for n in FIRST_METRICS if n in curves] + [n for n in curves if n not in FIRST_METRICS]
    marks = run_marks(facts)
    out = []
    for i, name in enumerate(names):
        spec = metric_spec(run_id, name, curves[name], marks)
        out.append({"id": f"plot-{i}", "metric": name, "alt": spec["description"], "json": _spec_json(spec)})
    return out


def _entry_states(project: Project) -> dict[str, dict[str, Any]]:
    """Entry id -> its review state and reviewers, from the review queue."""
    return {i.id: {"state": i.state, "approvals": i.approvals, "changes_requested": i.changes_requested,
                   "needed": i.needed} for i in review_queue(project, include_approved=True)}


def day_pages(project: Project, renderer: SiteRenderer) -> list[dict[str, Any]]:
    """The chronicle's days, each entry's Markdown turned into HTML, with its review state."""
    md = _markdown()
    states = _entry_states(project)
    out = []
    for page in Chronicle(project, renderer).pages():
        entries = [{"anchor": e["anchor"], "id": e["id"], "run": e.get("run"),
                    "heading": md.renderInline(e["heading"]), "body": md.render(e["body"]),
                    "review": states.get(e["id"])} for e in page.entries]
        routine = [{"anchor": r["anchor"], "body": md.render(r["body"])} for r in page.routine]
        problems = [{"body": md.render(p["text"])} for p in page.problems]
        out.append({"date": page.date, "weekday": page.context()["weekday"], "entries": entries,
                    "routine": routine, "problems": problems})
    return out


def index_rows(project: Project) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(runs as `logbook ls --runs` lists them, preregistrations with the runs that answer to them)."""
    runs = [r.to_dict() for r in list_runs(project)]
    referencing = runs_referencing(project)
    preregs = [{"id": p.id, "title": p.title, "author": p.author, "created": p.created,
                "runs": sorted(referencing.get(p.id, []))} for p in list_preregs(project)]
    return runs, sorted(preregs, key=lambda p: (p["created"], p["id"]))


# --- writing ------------------------------------------------------------------------------------


def _prepare(out: Path) -> Path:
    """An empty folder at `out`; an earlier site there is replaced, anything else refused."""
    out = Path(out).expanduser().resolve()
    if out.exists() and not out.is_dir():
        raise UsageError(f"{out} is a file, not a folder")
    if out.is_dir() and any(out.iterdir()):
        if not (out / MARKER).is_file():
            raise RefusedError(f"{out} is not empty and holds no site built by `logbook site`",
                               hint="give an empty or new folder with --out")
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    return out


def build_site(project: Project, out: Path) -> SiteResult:
    """Write the whole site into `out` (see the module's docstring); returns what was written."""
    out = _prepare(out)
    env = _environment(project)
    common = {"built": built_from(project), "verify": verify_said(project), "project": project.root.name,
              "marks": list(MARK_COLOURS)}
    renderer = SiteRenderer(project, out)
    files: dict[str, bytes] = {}

    def page(rel: str, template: str, **ctx: Any) -> None:
        root = "../" * rel.count("/")
        html = env.get_template(f"site/{template}").render(root=root, **common, **ctx)
        files[rel] = html.encode("utf-8")

    runs, preregs = index_rows(project)
    proofs = record_proofs(project, common["verify"])
    common["run_ids"] = sorted(r["id"] for r in runs)
    days = day_pages(project, renderer)
    # Where each entry is, so a run page links its reviewed entries to their place in the chronicle.
    common["entry_links"] = {e["id"]: f"../days/{d['date']}.html#{e['anchor']}" for d in days for e in d["entries"]}
    page("index.html", "index.html.j2", runs=runs, preregs=preregs, days=[d["date"] for d in days])
    for row in runs:
        page(f"runs/{row['id']}.html", "run.html.j2", r=report_data(project, row["id"]),
             proofs=proofs.get(row["id"], []),
             plots=run_plots(project, row["id"]))
    for day in days:
        page(f"days/{day['date']}.html", "day.html.j2", day=day)
    for p in preregs:
        if len(p["runs"]) >= 2:  # the runs that answer to one preregistration, side by side as `compare` shows them
            page(f"compare/{p['id']}.html", "compare.html.j2", prereg=p,
                 cmp=compare_runs(project, p["runs"]).to_dict())
    cal = calibration(project).to_dict()
    page("calibration.html", "calibration.html.j2", cal=cal,
         plot=_spec_json(reliability_spec(cal["forecasts"]["reliability"])) if cal["forecasts"]["reliability"] else None)
    files[BUNDLE] = _vega_bundle()
    site_templates = next(d / "site" for d in template_dirs(project) if (d / "site" / "site.js").is_file())
    for name in OWN_ASSETS:
        files[f"assets/{name}"] = (site_templates / name).read_bytes()
    for rel in sorted(renderer.files):
        src = project.entries / rel
        if src.is_file():
            files[f"files/{rel}"] = src.read_bytes()
    files[MARKER] = b"built by `logbook site`; the folder is replaced by the next build\n"
    res = SiteResult(out, commit=common["built"]["commit"], verify_ok=common["verify"]["ok"])
    for rel in sorted(files):
        atomic_write_bytes(out / rel, files[rel])
        res.bytes += len(files[rel])
    res.pages = sorted(rel for rel in files if rel.endswith(".html"))
    return res
