"""Runs side by side (`logbook compare`): configs, metrics, verdicts, incidents and goodput, as data.

Every figure comes from `logbook.runs.facts` (one read of each run's event
log and metrics); nothing here counts raw events itself. The config compared
is the one each run trained with: the config file's bytes from the run's code
snapshot, with the run's overrides, resolved by the trainer's own
`--print-config` (so defaults that a file leaves out are compared too). When
the trainer cannot resolve it, the file and overrides as written are compared
and `config_source` says so. Live changes made during the run are a section of
their own, not folded into the config.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from logbook.core.bundled import safe_env, safe_python
from logbook.core.errors import UsageError
from logbook.core.project import Project
from logbook.core.textfmt import fmt_duration, fmt_pct, is_number
from logbook.eventlog.kinds import Event, is_kind
from logbook.runs.facts import COUNTS, RunFacts, load_facts
from logbook.runs.run_record import RunRecord, check_run_id, read_run_record

FINAL_METRICS = ("loss", "val_loss")
"""Metrics compared at the run's end and at each progress note."""


@dataclass
class Row:
    """One line of a section: a name and each run's value (None: the run has none)."""

    key: str
    values: list[Any]
    """One per run, in the order of `Comparison.runs`."""

    @property
    def differs(self) -> bool:
        return any(_canon(v) != _canon(self.values[0]) for v in self.values[1:])


@dataclass
class Section:
    """A titled group of rows (config, final metrics, ...)."""

    title: str
    rows: list[Row] = field(default_factory=list)


@dataclass
class Comparison:
    """Several runs side by side."""

    runs: list[str]
    states: list[str]
    """Each run's state as its event log says (finished, running, stopped, ...)."""
    config_source: list[str]
    """Per run: `resolved` (by the trainer), `as the trainer reported it` (its `config_recorded`) or `as written`
    (file and overrides; defaults not known)."""
    sections: list[Section]
    only_differences: bool
    """The config section holds only the keys whose values differ."""
    same_config_keys: int = 0
    """Config keys left out because every run has the same value."""

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["sections"] = [{"title": s.title, "rows": [{"key": r.key, "values": dict(zip(self.runs, r.values)),
                                                      "differs": r.differs} for r in s.rows]} for s in self.sections]
        return d


SHOWN_AS = {"goodput": "percent", "wall seconds": "duration", "seconds per step": "duration"}
"""Rows whose numbers read as a percentage or a duration, written as every other command writes them."""


def fmt_value(v: Any, key: str | None = None) -> str:
    """A value as a cell: ints with separators, floats to 4 significant digits, nothing as `-`; a goodput as a
    percentage and seconds as a duration (`72.4%`, `20.4 s`), as `ls` and `status` show them."""
    if v is None:
        return "-"
    if is_number(v) and SHOWN_AS.get(key or "") == "percent":
        return fmt_pct(v)
    if is_number(v) and SHOWN_AS.get(key or "") == "duration":
        return fmt_duration(v)
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, (list, dict)):
        return json.dumps(v, ensure_ascii=False)
    return " ".join(str(v).split())


def _canon(v: Any) -> str:
    return json.dumps(v, sort_keys=True, default=str)


# --- configs ------------------------------------------------------------------------------


def flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    """A nested config as dotted keys: {"optim": {"lr": 1e-3}} -> {"optim.lr": 1e-3}. Lists stay values."""
    if not isinstance(tree, dict):
        return {prefix: tree} if prefix else {}
    out: dict[str, Any] = {}
    for k, v in tree.items():
        key = f"{prefix}.{k}" if prefix else str(k)
        if isinstance(v, dict) and v:
            out.update(flatten(v, key))
        else:
            out[key] = v
    return out


def diff_configs(configs: list[dict[str, Any]], *, show_all: bool = False) -> tuple[list[Row], int]:
    """Rows of the union of the flat configs' keys (sorted); only differing ones unless `show_all`.

    Returns (rows, how many keys were left out as the same everywhere). A key one
    run lacks shows as NOT_SET and differs from any value, null included.
    """
    keys = sorted(set().union(*(c.keys() for c in configs))) if configs else []
    rows = [Row(k, [c.get(k, NOT_SET) for c in configs]) for k in keys]
    shown = rows if show_all else [r for r in rows if r.differs]
    return shown, len(rows) - len([r for r in rows if r.differs]) if not show_all else 0


NOT_SET = "(not set)"
"""A config key the run's config does not have (another run's has)."""


def recorded_config(facts: RunFacts) -> tuple[dict[str, Any], str] | None:
    """The hyperparameters the trainer itself reported (`config_recorded`, its last), when it reported any.

    A framework's run (HF, Lightning, a script through `Run.config`) names what it trains with; that is a better
    source than the file it was launched with, which for a wrapped script is the script itself.
    """
    last = next((e for e in reversed(facts.events) if is_kind(e, "config_recorded")), None)
    hparams = (last or {}).get("data", {}).get("hparams")
    return (flatten(hparams), "as the trainer reported it") if isinstance(hparams, dict) else None


def run_config(project: Project, rec: RunRecord) -> tuple[dict[str, Any], str]:
    """(flat config the run trained with, `resolved` | `as written`)."""
    text = _config_text(project, rec)
    if text is None:
        return {f"override {o.split('=', 1)[0]}": o.split("=", 1)[1] for o in rec.overrides or []}, "as written"
    resolved = _resolve_with_trainer(project, text, list(rec.overrides or []))
    if resolved is not None:
        return flatten(resolved), "resolved"
    try:
        tree = yaml.safe_load(text) or {}
    except yaml.YAMLError:
        tree = {}
    flat = flatten(tree if isinstance(tree, dict) else {})
    for o in rec.overrides or []:
        k, _, v = o.partition("=")
        flat[k] = yaml.safe_load(v) if v else v
    return flat, "as written"


def _config_text(project: Project, rec: RunRecord) -> str | None:
    """The config file as the run's code snapshot holds it (what it trained with), else as on disk now."""
    commit = (rec.snapshot or {}).get("commit")
    path = Path(rec.config_path)
    if commit and not path.is_absolute():
        proc = subprocess.run(["git", "cat-file", "-p", f"{commit}:{path.as_posix()}"], cwd=project.root,
                              capture_output=True, text=True)
        if proc.returncode == 0:
            return proc.stdout
    disk = path if path.is_absolute() else project.root / path
    try:
        return disk.read_text("utf-8")
    except OSError:
        return None


def _resolve_with_trainer(project: Project, text: str, overrides: list[str]) -> dict[str, Any] | None:
    """The bundled trainer's `--print-config` over the text (torch-free, a fraction of a second); None if it refuses."""
    with tempfile.TemporaryDirectory(prefix="logbook-compare-") as tmp:
        cfg = Path(tmp) / "config.yaml"
        cfg.write_text(text, "utf-8")
        # The installed trainer, from a folder the repository does not control: a `trainer/` committed
        # there must not run on the reader's machine (`compare` only reads).
        try:
            proc = subprocess.run(safe_python("-m", "trainer", "--print-config", str(cfg), *overrides),
                                  cwd=tmp, env=safe_env(os.environ), capture_output=True, text=True, timeout=120)
        except (OSError, subprocess.TimeoutExpired):
            return None
    if proc.returncode != 0:
        return None
    try:
        doc = json.loads(proc.stdout)
    except ValueError:
        return None
    return doc.get("config") if isinstance(doc, dict) and isinstance(doc.get("config"), dict) else None


# --- figures from the facts ----------------------------------------------------------------


def _final(f: RunFacts) -> dict[str, Any]:
    out: dict[str, Any] = {"state": f.state, "steps": f.last_step, "total steps": f.total_steps}
    for m in FINAL_METRICS:
        s = f.series.get(m) or {}
        out[m] = s[max(s)] if s else None
    return out


def _milestones(f: RunFacts) -> dict[str, Any]:
    """`<metric> at <fraction>` -> the progress note's value."""
    out: dict[str, Any] = {}
    for e in f.of_kind("milestone"):
        d = Event.of(e).data
        frac = d.get("fraction")
        if not isinstance(frac, (int, float)):
            continue
        for m in FINAL_METRICS:
            if isinstance(d.get(m), (int, float)):
                out[f"{m} at {frac:.0%}"] = d[m]
    return out


def _verdicts(f: RunFacts) -> dict[str, Any]:
    """Each prediction's verdict from the run's latest scorecard (`logbook outcome`), with its value."""
    cards = f.of_kind("outcome")
    if not cards:
        return {}
    out: dict[str, Any] = {}
    for p in Event.of(cards[-1]).data.get("predictions") or []:
        text = p.get("text") or p.get("expr") if isinstance(p, dict) else None  # `expr` in progress notes
        if text:
            value = p.get("value")
            shown = f"{value:.4g}" if isinstance(value, float) else value
            out[str(text)] = f"{p.get('status')}" + (f" ({shown})" if shown is not None else "")
    return out


def _incidents(f: RunFacts) -> dict[str, Any]:
    out: dict[str, Any] = {metric.replace("_", " "): f.count(metric) for metric in COUNTS}
    out["live changes"] = len(f.live_changes())
    return out


def _goodput(f: RunFacts) -> dict[str, Any]:
    g = f.goodput()
    wall = f.wall_seconds()
    return {"goodput": g.value, "wall seconds": wall, "device hours": f.device_hours(wall),
            "seconds per step": f.seconds_per_step()}


def _live_changes(f: RunFacts) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for ch in f.live_changes():
        d = Event.of(ch["event"]).data
        key = str(d.get("key"))
        text = f"{d.get('old')} → {d.get('new')} at step {ch['event'].get('step')}"
        out[key] = f"{out[key]}; {text}" if key in out else text
    return out


def _section(title: str, per_run: list[dict[str, Any]]) -> Section:
    keys: list[str] = []
    for d in per_run:
        keys += [k for k in d if k not in keys]
    return Section(title, [Row(k, [d.get(k) for d in per_run]) for k in keys])


def _by_fraction(section: Section) -> Section:
    """Progress-note rows in the order of the run: by fraction, then metric."""
    def order(row: Row) -> tuple[float, int]:
        metric, _, pct = row.key.rpartition(" at ")
        return float(pct.rstrip("%") or 0), FINAL_METRICS.index(metric) if metric in FINAL_METRICS else 99

    section.rows.sort(key=order)
    return section


def compare_runs(project: Project, run_ids: list[str], *, show_all: bool = False) -> Comparison:
    """Compare two or more runs. Raises UsageError for fewer than two or a repeated id, NotFoundError for unknown ones."""
    if len(run_ids) < 2:
        raise UsageError("compare needs at least two runs", hint="logbook compare RUN RUN [RUN...]")
    if len(set(run_ids)) != len(run_ids):
        raise UsageError("a run is named twice", hint="name each run once")
    recs = [read_run_record(project, check_run_id(r)) for r in run_ids]
    facts = [load_facts(project, r, rec) for r, rec in zip(run_ids, recs)]
    configs = [recorded_config(f) or run_config(project, rec) for rec, f in zip(recs, facts)]
    rows, same = diff_configs([c for c, _ in configs], show_all=show_all)
    sections = [
        Section("config", rows),
        _section("changes during the run", [_live_changes(f) for f in facts]),
        _section("final", [_final(f) for f in facts]),
        _by_fraction(_section("progress notes", [_milestones(f) for f in facts])),
        _section("predictions", [_verdicts(f) for f in facts]),
        _section("incidents", [_incidents(f) for f in facts]),
        _section("goodput", [_goodput(f) for f in facts]),
    ]
    return Comparison(runs=list(run_ids), states=[f.state for f in facts], config_source=[s for _, s in configs],
                      sections=sections, only_differences=not show_all, same_config_keys=same)
