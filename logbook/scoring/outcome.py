"""`logbook outcome RUN`: score a run's preregistered predictions against what it recorded.

Every prediction of the run's preregistration (amendments included) is
measured from the run's metrics stream and event log (see `runfacts` below)
and judged with `Prediction.verdict`: **confirmed**, **refuted**, or
**inconclusive** when there is nothing to judge (the metric was never logged,
the run ended or is still going before that point). Each result keeps the
measured value, the step it was taken at and the rule that picked it.
A framework's metric (`eval_accuracy`) or a declared one is read from the
metrics stream under its own name; one the run never logged is "not
measured", never scored against another metric.

Points in the run:

- `final`: the run's last step; only a run that finished has one.
- `step:N`: the value logged at step N itself. The run must have reached N.
  A step with no value is "not measured" (inconclusive, naming the logged
  steps nearest it): a value is never taken from another step, except the last
  accepted loss for a step whose update the guard skipped, and the nearest
  value within W steps where the prediction says so (`@~N±W`).
- `P%`: step `milestone_step(P, total_steps)`, `total_steps` from `run_started`.

Throughput (`tokens_per_s`) is the median over a window around the point (the
stated `±W`, else 5% of the run either side): one step's throughput varies
several-fold. The result's rule names the window.

Counts (restarts, spikes, rollbacks, skipped_steps, lr_changes) are counted
over the events recorded before the run first went past the point. Counts
only grow, so an incomplete run can already refute `spikes == 0` or confirm
`restarts >= 1`; anything else waits.

A run that has not ended gets a PROVISIONAL scorecard, which is shown but
never written. A final one is its own immutable record,
`runs/<run>/outcomes/<record id>.json` (`records.py`), with the scorecard and
the deviations; it appears in the chronicle and in the review queue as
`outcome:<record id>`. The run's event log is never touched: the run is its
only writer. Scoring again with the same result writes nothing; a different
result (an amendment, a repaired log) is a new record that supersedes the
earlier one. Two people scoring on two clones each keep their record; the
newest, by (time, id), is the run's outcome on every clone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from logbook.core.errors import NotFoundError, RefusedError, TamperedError
from logbook.core.project import Project
from logbook.eventlog import chain
from logbook.records import gitbind
from logbook.eventlog.chain import canonical
from logbook.eventlog.files import iter_folder, write_record
from logbook.promises.predictions import Prediction
from logbook.promises.prereg import load_prereg
from logbook.runs.facts import COUNTS, Measurement, RunFacts, load_facts
from logbook.runs.milestones import milestone_step
from logbook.runs.run_record import RunRecord, check_run_id, load_run_record
from logbook.scoring.forecasts import late_sources, run_start_time
from logbook.scoring.rules import forecast_scores
from logbook.core.textfmt import plural

SCHEMA = 1
STATUSES = ("confirmed", "refuted", "inconclusive")
_COUNTS = frozenset(COUNTS)


OUTCOME_SOURCE = "outcome"
"""Outcome records are cited as `outcome:<record id>`."""


def outcomes_dir(project: Project, run_id: str) -> Path:
    return project.run_dir(check_run_id(run_id)) / "outcomes"


def outcome_records(project: Project, run_id: str) -> list[dict[str, Any]]:
    """The run's scorecard records, oldest first by (time, id); the last one is the run's outcome."""
    recs = [r for r in iter_folder(outcomes_dir(project, run_id)) if isinstance(r.get("scorecard"), dict)]
    return sorted(recs, key=lambda r: (str(r.get("ts")), str(r.get("id"))))


@dataclass
class PredictionResult:
    """One prediction, its measured value and the verdict."""

    text: str
    metric: str
    source: str
    """`original` or `amend-<n>`."""
    op: str
    threshold: float
    tolerance: float
    status: str
    value: float | None
    at_step: int | None
    rule: str
    reason: str = ""
    within_tolerance: bool = False
    forecast: dict[str, Any] | None = None
    """Scores of a forecast (`scoring_rules.forecast_scores`); None for a plain threshold."""
    late: str | None = None
    """Why this prediction is a late forecast (made after the run started), else None."""

    def to_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        # Keys a plain, on-time prediction does not need are left out, so its record reads as before.
        for key in ("forecast", "late"):
            if d[key] is None:
                del d[key]
        return d


@dataclass
class Scorecard:
    """Everything `logbook outcome` says about one run."""

    run: str
    prereg_id: str
    prereg_sha256: str
    prereg_title: str
    prereg_author: str
    prereg_created: str
    run_state: str
    """finished | failed | aborted | preempted | running"""
    final: bool
    last_step: int | None
    total_steps: int | None
    verify_ok: bool
    verify_problems: list[str] = field(default_factory=list)
    predictions: list[PredictionResult] = field(default_factory=list)
    deviations: list[dict[str, Any]] = field(default_factory=list)
    code_diff: str = ""
    """`git diff --stat` between the preregistration's commit and the run's snapshot (entries excluded)."""
    computed_at: str = ""
    computed_by: str | None = None
    event: str | None = None
    """Id of the `outcome` event that records it (None while provisional)."""
    supersedes: str | None = None
    already_recorded: bool = False
    warnings: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        return "FINAL" if self.final else "PROVISIONAL"

    @property
    def counts(self) -> dict[str, int]:
        """Statuses of the on-time predictions; late forecasts are scored apart and never counted here."""
        return {s: sum(1 for p in self.predictions if p.status == s and not p.late) for s in STATUSES}

    def content(self) -> dict[str, Any]:
        """What the outcome says, without when and by whom it was computed (compared on a rescore)."""
        return {
            "schema": SCHEMA, "run": self.run, "prereg_id": self.prereg_id, "prereg_sha256": self.prereg_sha256,
            "prereg_title": self.prereg_title, "prereg_author": self.prereg_author,
            "prereg_created": self.prereg_created, "run_state": self.run_state, "final": self.final,
            "last_step": self.last_step, "total_steps": self.total_steps,
            "verify": {"ok": self.verify_ok, "problems": self.verify_problems},
            "predictions": [p.to_dict() for p in self.predictions], "counts": self.counts,
            "deviations": self.deviations, "code_diff": self.code_diff,
        }

    def to_dict(self) -> dict[str, Any]:
        return {**self.content(), "label": self.label, "computed_at": self.computed_at,
                "computed_by": self.computed_by, "event": self.event, "supersedes": self.supersedes,
                "already_recorded": self.already_recorded}


# --- measuring ------------------------------------------------------------------------------


def point_step(p: Prediction, facts: RunFacts) -> tuple[int | None, str | None]:
    """(the step a prediction is checked at, or None with the reason)."""
    if p.at.kind == "step":
        return int(p.at.value), None
    if p.at.kind == "fraction":
        if not facts.total_steps:
            return None, "the run recorded no total_steps, so a fraction of it has no step"

        return milestone_step(float(p.at.value), facts.total_steps), None
    if facts.state == "finished":
        return facts.last_step, None
    return None, None  # final of a run that has not finished: handled by `measure`


def measure(p: Prediction, facts: RunFacts) -> Measurement:
    """The value of `p.metric` at `p.at` in this run."""
    step, why = point_step(p, facts)
    if why:
        return Measurement(missing=why)
    reached = step is not None and facts.last_step is not None and facts.last_step >= step
    if not reached:
        return _not_reached(p, facts, step)
    return value_at(p.metric, facts, step, p.at.window)


def _not_reached(p: Prediction, facts: RunFacts, step: int | None) -> Measurement:
    where = "its last step" if step is None else f"step {step:,}"
    last = facts.last_step or 0
    if facts.state == "running" or facts.state == "preempted":
        why = f"not reached yet: the run is {facts.state} at step {last:,}, short of {where}"
    else:
        why = f"the run {facts.state} at step {last:,}, before {where}"
    if p.metric in _COUNTS:
        m = value_at(p.metric, facts, None)
        m.partial, m.missing = True, why
        return m
    return Measurement(missing=why)


def value_at(metric: str, facts: RunFacts, step: int | None, window: int | None = None) -> Measurement:
    """Measure at `step` (None: everything recorded so far); `window`: the preregistered `@~STEP±WINDOW`."""
    upto = step if step is not None else (facts.last_step or 0)
    if metric in _COUNTS:
        n = facts.count(metric, step)
        scope = "over the whole run" if step is None or step == facts.last_step else f"up to step {step:,}"
        return Measurement(float(n), step, f"{facts.count_rule(metric)} {scope}")
    if metric == "steps":
        return Measurement(float(upto), upto, "steps completed")
    if metric == "val_ppl":
        m = _series(facts, "val_loss", upto, window)
        if m.value is not None:
            m.value, m.rule = math.exp(m.value), "exp(val_loss) " + m.rule
        return m
    if metric == "goodput":
        return facts.goodput(step)
    if metric == "wall_hours":
        w = facts.wall_seconds(step)
        return Measurement(None if w is None else w / 3600.0, upto, "wall time since the run started",
                           missing=None if w is not None else "no timestamps to measure wall time from")
    if metric == "mfu":
        m = _series(facts, "mfu", upto, window)
        return m if m.value is not None else facts.milestone_value("mfu", upto) or m
    if metric in WINDOWED:
        return _window_median(facts, metric, upto, window)
    return _series(facts, metric, upto, window)


WINDOWED = {"tokens_per_s"}
"""Metrics scored as the median over a window around the point: one step's throughput says little
(it ranged from 3,043 to 18,076 tokens/s within one tiny run)."""
WINDOW_SHARE = 0.05
"""A windowed metric's default window: this share of the run either side of the point."""


def _series(facts: RunFacts, metric: str, step: int, window: int | None = None) -> Measurement:
    """The value at `step` itself; another step's only where the preregistration said how (`@~STEP±W`).

    Any metric the stream holds is measured by its name (a framework's `eval_accuracy`, a declared
    `bleu`); one the run never logged is not measured, never taken from another metric.
    """
    if not facts.logged(metric):
        return Measurement(missing=f"not measured: no {metric} was logged at any step")
    if window is not None:
        found = facts.nearest_within(metric, step, window)
        if found is None:
            return Measurement(missing=f"not measured: no {metric} was logged within {window:,} steps of step {step:,}")
        at, value = found
        return Measurement(value, at, f"at step {at:,}, the nearest logged within {window:,} steps of step {step:,} "
                                      f"(as preregistered)")
    value = facts.value_exactly(metric, step)
    if value is not None:
        return Measurement(value, step, f"at step {step:,}")
    if step in facts.refused and (found := facts.value_at_or_before(metric, step)) is not None:
        at, value = found
        return Measurement(value, at, f"at step {at:,}, the last step whose update the guard accepted "
                                      f"(it skipped step {step:,}'s)")
    near = " and ".join(f"{s:,}" for s in facts.logged_around(metric, step))
    return Measurement(missing=f"not measured: no {metric} was logged at step {step:,}"
                               + (f" (logged nearest: step {near})" if near else ""))


def _window_median(facts: RunFacts, metric: str, step: int, window: int | None) -> Measurement:
    """The median of `metric` over the steps within `window` of `step` (default: 5% of the run either side)."""
    why = "as preregistered"
    if window is None:
        window = max(1, round(WINDOW_SHARE * (facts.total_steps or step)))
        why = f"{WINDOW_SHARE:.0%} of the run either side"
    lo, hi = max(0, step - window), step + window
    found = facts.median_over(metric, lo, hi)
    if found is None:
        return Measurement(missing=f"not measured: no {metric} was logged over steps {lo:,}–{hi:,}")
    value, n = found
    return Measurement(value, step, f"median of {plural(n, 'logged value')} over steps {lo:,}–{hi:,} "
                                    f"(step {step:,} ± {window:,}, {why})")


def judge(p: Prediction, m: Measurement) -> tuple[str, bool, str]:
    """(status, within_tolerance, reason)."""
    if m.value is None:
        return "inconclusive", False, m.missing or "no value"
    verdict = p.verdict(m.value)
    if not m.partial:
        return ("refuted" if verdict == "refuted" else "confirmed"), verdict == "within_tolerance", ""
    # A count that only grows: some verdicts cannot change any more.
    if p.is_point:
        if m.value > p.hi:
            return "refuted", False, f"already {m.value:g} before the point, above the interval, and counts only grow"
        return "inconclusive", False, m.missing or ""
    exceeded = m.value > p.threshold + p.tolerance
    # An upper bound once broken stays broken; `==` broken from below may still be met.
    if verdict == "refuted" and (p.op in ("<", "<=") or (p.op == "==" and exceeded)):
        return "refuted", False, f"already {m.value:g} before the point, and counts only grow"
    if p.op in (">", ">=") and verdict != "refuted":
        return "confirmed", verdict == "within_tolerance", f"already {m.value:g} before the point, and counts only grow"
    if p.op == "!=" and exceeded:
        return "confirmed", False, f"already {m.value:g} before the point, and counts only grow"
    return "inconclusive", False, m.missing or ""


def score(p: Prediction, source: str, facts: RunFacts, late: str | None = None) -> PredictionResult:
    m = measure(p, facts)
    status, within, reason = judge(p, m)
    return PredictionResult(text=p.to_text(), metric=p.metric, source=source, op=p.op, threshold=p.threshold,
                            tolerance=p.tolerance, status=status, value=m.value, at_step=m.step, rule=m.rule,
                            reason=reason, within_tolerance=within, forecast=forecast_scores(p, status, m.value),
                            late=late)


# --- the run, its preregistration, its deviations -------------------------------------------


def prereg_id_of(rec: RunRecord | None, facts: RunFacts) -> str | None:
    if rec is not None:
        if rec.exploratory or not rec.prereg_id:
            return None
        return rec.prereg_id
    return facts.prereg_id


def _event_deviations(facts: RunFacts) -> list[dict[str, Any]]:
    """Live changes and guard decisions off the plan (`RunFacts.event_deviations`: one source for every view)."""
    return facts.event_deviations()


def deviations(project: Project, rec: RunRecord | None, prereg, facts: RunFacts) -> tuple[list[dict[str, Any]], str]:
    """Every departure from the preregistered plan, and the code diff text (may be empty)."""
    out = _event_deviations(facts)
    for text in (rec.deviations if rec else []):
        out.append({"kind": "config", "entry": None, "step": None, "text": text})
    want = (prereg.config or {}).get("sha256") if isinstance(prereg.config, dict) else None
    if rec and want and rec.config_hash != want and not any(d["kind"] == "config" for d in out):
        out.append({"kind": "config", "entry": None, "step": None,
                    "text": f"config {rec.config_path} has sha256 {rec.config_hash[:12]}, the preregistration recorded {want[:12]}"})
    in_force = {a.key for a in prereg.in_force(rec.amendments if rec is not None else None)}
    for a in prereg.amendments:
        if a.key not in in_force:
            out.append({"kind": "amendment", "entry": None, "step": None,
                        "text": f"amendment {a.n} ({a.created}, {a.author}) was made after the run started, "
                                f"so the run is not scored against it: {a.reason}"})
        elif a.kind == "deviation":
            out.append({"kind": "amendment", "entry": None, "step": None,
                        "text": f"amendment {a.n} ({a.created}) was made after results were seen: {a.reason}"})
    diff = code_diff(project, prereg.base_commit, _snapshot_commit(rec, facts), prereg.front.get("uncommitted"))
    if diff.get("text"):
        out.append({"kind": "code", "entry": None, "step": None, "text": diff["summary"]})
    return out, diff.get("text", "")


def _snapshot_commit(rec: RunRecord | None, facts: RunFacts) -> str | None:
    if rec is not None and isinstance(rec.snapshot, dict) and rec.snapshot.get("commit"):
        return str(rec.snapshot["commit"])
    return facts.snapshot_commit


def code_diff(project: Project, base: str | None, snapshot: str | None,
              uncommitted: dict[str, str | None] | None = None) -> dict[str, str]:
    """`git diff --stat base snapshot`, leaving the logbook folder out; {} when nothing changed.

    `uncommitted` is what the working tree held beyond `base` when the
    preregistration was made (path -> blob id, None if deleted): a file the run's
    snapshot holds exactly so is the code that was preregistered, not a change.
    """
    if not base or not snapshot:
        return {}
    root = project.root
    for c in (base, snapshot):
        if gitbind.git(root, "cat-file", "-t", c, check=False).strip() != "commit":
            return {"text": f"commit {c[:12]} is not in this repository", "summary":
                    f"the code cannot be compared: commit {c[:12]} is not in this repository"}
    entries = project.entries.relative_to(root).as_posix()
    spec = ["--", ".", f":(exclude){entries}"]
    files = [f for f in gitbind.git(root, "diff", "--name-only", "--no-renames", base, snapshot, *spec).splitlines() if f]
    if uncommitted and isinstance(uncommitted, dict):
        now = gitbind.blob_ids(root, snapshot, [f for f in files if f in uncommitted])
        files = [f for f in files if f not in now or now[f] != uncommitted[f]]
    if not files:
        return {}
    stat = gitbind.git(root, "diff", "--stat=100", "--no-renames", base, snapshot, "--", *files).rstrip()
    shown = ", ".join(files[:5]) + (f" and {len(files) - 5} more" if len(files) > 5 else "")
    return {"text": stat, "summary": f"the code changed between the preregistration's commit {base[:7]} and the "
                                     f"run's snapshot {snapshot[:7]}: {plural(len(files), 'file')} ({shown})"}


def score_card(project: Project, run_id: str, rec: RunRecord | None, facts: RunFacts, prereg) -> Scorecard:
    """The scorecard of a run against its preregistration, `verify` aside: what `outcome` and `verify` both compute."""
    card = Scorecard(run=run_id, prereg_id=prereg.id, prereg_sha256=prereg.sha256, prereg_title=prereg.title,
                     prereg_author=prereg.author, prereg_created=prereg.created, run_state=facts.state,
                     final=facts.state in ("finished", "failed", "aborted"), last_step=facts.last_step,
                     total_steps=facts.total_steps, verify_ok=True)
    # Amendments made after the run started are scored too, but apart and
    # labelled late (and listed as deviations): never as if preregistered.
    in_force = rec.amendments if rec is not None else None
    facts.judge_plans(prereg.all_contingency(in_force))
    late = late_sources(prereg, run_start_time(facts), in_force)
    card.predictions = [score(p, src, facts, late.get(src)) for p, src in prereg.all_predictions()]
    card.deviations, card.code_diff = deviations(project, rec, prereg, facts)
    card.computed_at = chain.utc_now()
    return card


# --- checking what was recorded ---------------------------------------------------------------


@dataclass
class ScorecardMismatch:
    """A recorded scorecard that says other than its run's log and preregistration give."""

    path: str
    """The outcome record's file, relative to the repository root."""
    message: str


def recheck_scorecards(project: Project, run_ids: list[str] | None = None) -> list[ScorecardMismatch]:
    """Score every run that has a recorded scorecard again, with `outcome`'s own code, and name what differs.

    A scorecard is a claim about a log and a preregistration that are both in
    the repository, so anyone can compute it again: a verdict, value or count
    that a forger flipped (and re-hashed, re-signed, re-stamped) differs from
    what the records give. Only the measured parts are compared: what verify
    said, and when and by whom it was computed, may differ honestly.
    """
    out: list[ScorecardMismatch] = []
    runs = project.runs_dir
    for run_dir in sorted(runs.iterdir()) if run_ids is None and runs.is_dir() else \
            [project.run_dir(r) for r in run_ids or []]:
        records = outcome_records(project, run_dir.name) if (run_dir / "outcomes").is_dir() else []
        if records:
            out += _recheck_run(project, run_dir.name, records)
    return out


def _recheck_run(project: Project, run_id: str, records: list[dict[str, Any]]) -> list[ScorecardMismatch]:
    try:
        rec = load_run_record(project, run_id)
    except NotFoundError:
        rec = None
    facts = load_facts(project, run_id, rec)
    out, cards = [], {}
    for r in records:
        stored = r["scorecard"]
        pid = str(stored.get("prereg_id") or "")
        rel = f"{outcomes_dir(project, run_id).relative_to(project.root).as_posix()}/{r.get('id')}.json"
        if pid not in cards:
            try:
                cards[pid] = score_card(project, run_id, rec, facts, load_prereg(project, pid))
            except (NotFoundError, TamperedError, RefusedError):
                cards[pid] = None  # an unreadable preregistration is verify's own finding
        if cards[pid] is not None:
            out += [ScorecardMismatch(rel, m) for m in _differences(run_id, r, cards[pid])]
    return out


def _differences(run_id: str, record: dict[str, Any], card: Scorecard) -> list[str]:
    stored, cite = record["scorecard"], f"scorecard {OUTCOME_SOURCE}:{record.get('id')} of run {run_id}"
    ours = {(p.text, p.source): p for p in card.predictions}
    out = []
    for p in stored.get("predictions") or []:
        mine = ours.get((p.get("text"), p.get("source"))) if isinstance(p, dict) else None
        if mine is None:
            continue
        said = (p.get("status"), _num(p.get("value")), p.get("at_step"))
        if said != (mine.status, _num(mine.value), mine.at_step):
            out.append(f"{cite} says {p.get('text')}: {_verdict(*said)}, but its log and preregistration give "
                       f"{_verdict(mine.status, _num(mine.value), mine.at_step)}")
    if not out and stored.get("counts") != card.counts and len(stored.get("predictions") or []) == len(ours):
        out.append(f"{cite} counts {_tally(stored.get('counts'))}, but its log and preregistration give "
                   f"{_tally(card.counts)}")
    payload = [(p.get("text"), p.get("status")) for p in (record.get("data") or {}).get("predictions") or []
               if isinstance(p, dict)]
    for text, status in payload:
        mine = next((m for m in card.predictions if m.text == text), None)
        if mine is not None and status != mine.status and not out:
            out.append(f"{cite}'s outcome event says {text}: {status}, but its log and preregistration give "
                       f"{mine.status}")
    return out


def _num(v: Any) -> Any:
    return round(float(v), 12) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else v


def _verdict(status: Any, value: Any, step: Any) -> str:
    if value is None:
        return f"{status}"
    return f"{status} at {value:g}" + (f" (step {step})" if step is not None else "") if isinstance(value, float) \
        else f"{status} at {value}" + (f" (step {step})" if step is not None else "")


def _tally(counts: Any) -> str:
    if not isinstance(counts, dict):
        return repr(counts)
    return ", ".join(f"{counts.get(s, 0)} {s}" for s in STATUSES)


def content_hash(card: Scorecard) -> str:
    """The hash of what a scorecard measured: equal hashes, nothing new to record."""
    import hashlib

    return hashlib.sha256(canonical(card.content()).encode("utf-8")).hexdigest()


def load_outcome(project: Project, run_id: str) -> dict[str, Any] | None:
    """The run's recorded outcome (the scorecard of its newest outcome record), or None."""
    recs = outcome_records(project, run_id)
    if not recs:
        return None
    return {**recs[-1]["scorecard"], "event": f"{OUTCOME_SOURCE}:{recs[-1].get('id')}"}
