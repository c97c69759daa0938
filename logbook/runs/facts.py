"""What one run recorded, read once from its event log and metrics stream, for scoring and reports.

Metrics are read in file order. A row whose step is lower than one seen
before starts a new branch (a restart resumed from an older checkpoint, or a
rollback): every value logged for that step and later is dropped, so the
series hold exactly the steps that count, each with its last value.

Goodput, wall time and step times come from `logbook.runs.goodput` over the
run's records; records written after the run by people's commands (the
`outcome` event) are left out, so scoring a run cannot change its figures.
"""

from __future__ import annotations

import bisect
import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from logbook.core.project import Project
from logbook.core.textfmt import fmt_setting, is_number
from logbook.eventlog.chain import iter_records
from logbook.eventlog.plan import rule_differences, structured_rules
from logbook.eventlog.kinds import (
    LR_KEYS, Event, changes_lr, counted_as, ending, get_kind, goodput_charge, has_flag, is_afterwards, is_kind, kind_of,
    kinds_where, parse_ts, run_state,
)
from logbook.eventlog.sink import read_metrics
from logbook.runs.goodput import goodput_report

COUNTS = ("restarts", "spikes", "rollbacks", "skipped_steps", "lr_changes")
"""The counts predictions and outcomes are written in; which kinds add to each is the registry's (`count_kinds`)."""


def count_kinds(metric: str) -> tuple[str, ...]:
    """The kinds that add to a count, asked of the registry now (a kind registered later is among them)."""
    if metric not in COUNTS:
        raise KeyError(metric)
    return kinds_where(lr_change=True) if metric == "lr_changes" else kinds_where(counted_as=metric)


def _count_rule(metric: str) -> str:
    """What a count counts, in words: "restart events", "lr_scaled events plus hparam_change events of lr, ..."."""
    lr_keys = f" of {', '.join(LR_KEYS[:-1])} or {LR_KEYS[-1]}"

    def words(kind: str) -> str:
        # A kind that names the setting it changed (hparam_change) counts as an lr change only for an lr key.
        keyed = metric == "lr_changes" and get_kind(kind).field("key") is not None
        return f"{kind} events" + (lr_keys if keyed else "")
    return " plus ".join(words(k) for k in count_kinds(metric)) or f"events counted as {metric} (no kind is)"


@dataclass
class Measurement:
    """A metric's value at a point, or why there is none."""

    value: float | None = None
    step: int | None = None
    rule: str = ""
    missing: str | None = None
    partial: bool = False
    """A count taken before the point was reached (the run is still short of it)."""


@dataclass
class RunFacts:
    """One run's events and metric series, with the questions scoring and reports ask of them."""

    run: str
    events: list[dict[str, Any]] = field(default_factory=list)
    series: dict[str, dict[int, float]] = field(default_factory=dict)
    state: str = "running"
    """finished | failed | aborted | preempted | running (also: nothing recorded yet)."""
    last_step: int | None = None
    total_steps: int | None = None
    world_size: int = 1
    prereg_id: str | None = None
    snapshot_commit: str | None = None
    rows: list[dict[str, Any]] = field(default_factory=list)
    """The metric rows as read (every branch), for `logbook.runs.goodput`."""
    attempt_times: dict[int, tuple[float, float]] = field(default_factory=dict)
    """attempt -> (first, last) `time` of its metric rows."""
    first_past: list[tuple[int, float]] = field(default_factory=list)
    """(step, time) of each row that took the run further than any row before it, in file order."""
    refused: set[int] = field(default_factory=set)
    """Steps whose update the guard skipped: their loss is no value the run stands at."""
    _goodput: dict[float | None, Any] = field(default_factory=dict, repr=False)
    _again: dict[Any, Any] | None = field(default=None, repr=False)
    """`reapplications()`, once computed."""
    """goodput reports already computed, by cut-off time (None: the whole run)."""

    # --- metric values -----------------------------------------------------------------

    def logged(self, metric: str) -> bool:
        """Whether the run logged `metric` at any step that counts."""
        return bool(self.series.get(metric))

    def value_at_or_before(self, metric: str, step: int) -> tuple[int, float] | None:
        s = self.series.get(metric)
        if not s:
            return None
        steps = sorted(s)
        i = bisect.bisect_right(steps, step)
        return (steps[i - 1], s[steps[i - 1]]) if i else None

    def milestone_value(self, key: str, upto: int):
        """The latest progress note's `key` at or before step `upto`, as a Measurement (or None)."""
        found = None
        for e in self.events:
            d = Event.of(e).data
            if is_kind(e, "milestone") and isinstance(e.get("step"), int) and e["step"] <= upto and is_number(d.get(key)):
                found = (e["step"], float(d[key]))
        if found is None:
            return None
        return Measurement(found[1], found[0], f"from the progress note at step {found[0]:,}")

    def value_exactly(self, metric: str, step: int) -> float | None:
        """The value logged at `step` itself on the branch that counts; None when that step has none."""
        return (self.series.get(metric) or {}).get(step)

    def nearest_within(self, metric: str, step: int, window: int) -> tuple[int, float] | None:
        """(step, value) logged nearest `step` within `window` steps either side (a tie: the earlier); None."""
        s = self.series.get(metric) or {}
        near = sorted((abs(k - step), k) for k in s if abs(k - step) <= window)
        return (near[0][1], s[near[0][1]]) if near else None

    def logged_around(self, metric: str, step: int) -> list[int]:
        """The logged steps nearest `step`: the last one before it and the first one after (either may be absent)."""
        steps = sorted(self.series.get(metric) or {})
        i = bisect.bisect_left(steps, step)
        return ([steps[i - 1]] if i else []) + ([steps[i]] if i < len(steps) and steps[i] != step else
                                                [steps[i + 1]] if i + 1 < len(steps) else [])

    def median_over(self, metric: str, lo: int, hi: int) -> tuple[float, int] | None:
        """(median, how many values) of the metric logged at steps lo..hi; None when none was."""
        vals = sorted(v for k, v in (self.series.get(metric) or {}).items() if lo <= k <= hi)
        if not vals:
            return None
        n = len(vals)
        return (vals[n // 2] if n % 2 else (vals[n // 2 - 1] + vals[n // 2]) / 2.0), n

    # --- counts --------------------------------------------------------------------------

    def time_past(self, step: int) -> float | None:
        """When the run first logged a step beyond `step` (None: it never has)."""
        i = bisect.bisect_right([s for s, _ in self.first_past], step)
        return self.first_past[i][1] if i < len(self.first_past) else None

    def curves(self) -> dict[str, list[tuple[int, float]]]:
        """Every logged metric as (step, value) in step order, on the branch that counts.

        The values scoring reads: a rollback's replay replaces the first pass, and a
        step whose update the guard skipped has no loss. Plots draw these, so a
        curve and a scorecard never disagree about where a run stood.
        """
        return {name: sorted(vals.items()) for name, vals in sorted(self.series.items())}

    def count(self, metric: str, step: int | None = None) -> int:
        """Events of the metric's kinds recorded before the run first went past `step` (None: all).

        A live change re-applied after a restart is the change already counted, not another one.
        """
        kinds = count_kinds(metric)
        cutoff = None if step is None else self.time_past(step)
        again = self.reapplications()
        n = 0
        for e in self.events:
            if kind_of(e) not in kinds or e.get("seq") in again:
                continue
            if metric == "lr_changes" and not changes_lr(e):
                continue
            if cutoff is not None and (parse_ts(e.get("ts")) or 0.0) >= cutoff:
                continue
            n += 1
        return n

    def reapplications(self) -> dict[Any, Any]:
        """seq of each live change that re-applies an earlier one after a restart -> seq of that earlier one."""
        if self._again is None:
            self._again = {}
            seen: dict[tuple[Any, ...], Any] = {}
            for e in self.events:
                if is_kind(e, "hparam_change"):
                    first = reapplies(e, seen)
                    if first is not None:
                        self._again[e.get("seq")] = first
        return self._again

    def live_changes(self) -> list[dict[str, Any]]:
        """Hyperparameter changes made by hand (or on advice) during the run, each once.

        A change re-applied after a restart (the trainer applies every live
        change again over the config on resume) is the same change: it is folded
        into the original, whose `reapplied_at` lists the steps it was applied again at.
        """
        again = self.reapplications()
        out: dict[Any, dict[str, Any]] = {}
        for e in self.events:
            d = Event.of(e).data
            if not is_kind(e, "hparam_change") or d.get("source") not in ("live", "advice"):
                continue
            if e.get("seq") in again and again[e.get("seq")] in out:
                out[again[e.get("seq")]]["reapplied_at"].append(e.get("step"))
                continue
            out[e.get("seq")] = {"event": e, "reapplied_at": []}
        return list(out.values())

    def judge_plans(self, rules: list[Any]) -> None:
        """Name how each guard action differs from the contingency rule it carried out, where its log does not.

        Logs written before the guard recorded `differences` say only that rule n
        "said otherwise". The rule's own terms and what the run recorded (the
        batches a rollback skipped, the factor the learning rate was scaled by)
        say which part differed; the rollback's configured distance is not in the
        log, so it is taken as the rule's. The judgement goes on the divergence and the
        rollback (the guard writes a scaling after its rollback, and an incident's
        deviation is read from its first event). Done once, before any view reads the plans.
        """
        table = {n: acts for n, _, acts in structured_rules(rules)}
        for i, e in enumerate(self.events):
            plan = Event.of(e).data.get("plan")
            if not (isinstance(plan, dict) and plan.get("follows") is False and plan.get("rule") in table
                    and "differences" not in plan and is_kind(e, "divergence_detected", "rollback")):
                continue
            done = _recorded_rollback(self.events, i)
            if done is None:
                continue
            acts = table[plan["rule"]]
            want = next((a for a in acts if a.get("kind") == "rollback"), {})
            action = {"kind": "rollback", "rollback_steps": want.get("steps"), **done}
            e["data"] = {**e["data"], "plan": {**plan, "differences": rule_differences(acts, action)}}

    def event_deviations(self) -> list[dict[str, Any]]:
        """Live changes, and guard decisions off the plan: one per incident.

        The guard writes its judgement on the divergence and again on each action
        that carries it out (the skip, the rollback, the learning-rate scaling), so
        actions right after an off-plan divergence are folded into its deviation.
        """
        out: list[dict[str, Any]] = []
        incident: dict[str, Any] | None = None
        again = {c["event"].get("seq"): c["reapplied_at"] for c in self.live_changes()}
        for e in self.run_events():
            kind, d = kind_of(e), e.get("data") if isinstance(e.get("data"), dict) else {}
            eid = f"{self.run}:{e.get('seq')}"
            plan = d.get("plan") if isinstance(d.get("plan"), dict) else {}
            if is_kind(kind, "hparam_change") and d.get("source") in ("live", "advice"):
                if e.get("seq") not in again:
                    continue  # the same change re-applied after a restart: already listed
                steps = _steps_text(again[e.get("seq")])
                out.append({"kind": "live_change", "entry": eid, "step": e.get("step"),
                            "text": f"{d.get('source')} change at step {e.get('step')} by {d.get('who') or 'unknown'}: "
                                    f"{d.get('key')} {fmt_setting(d.get('old'))} → {fmt_setting(d.get('new'))}"
                                    + (f" ({d['reason']})" if d.get("reason") else "")
                                    + (f"; re-applied after a restart at {steps} (the same change)" if steps else "")})
            elif plan.get("follows") is False and incident is not None and has_flag(kind, guard="action"):
                incident["actions"].append(str(kind).replace("_", " "))
                incident["entries"].append(eid)
                continue
            elif plan.get("follows") is False:
                what = str(kind).replace("_", " ")
                if is_kind(kind, "divergence_detected") and d.get("action"):
                    what += f" (action: {d['action']})"
                incident = {"kind": "off_plan", "entry": eid, "step": e.get("step"), "entries": [eid], "actions": [],
                            "text": f"{what} at step {e.get('step')} {off_plan_words(plan)}"}
                out.append(incident)
                if not is_kind(kind, "divergence_detected"):
                    incident = None
                continue
            if not has_flag(kind, keeps_incident=True):
                incident = None
        for dev in out:
            if dev.get("actions"):
                dev["text"] += f"; carried out as: {', '.join(dev['actions'])}"
            dev.pop("actions", None)
        return out

    # --- what people and the machinery did -----------------------------------------------

    def manual_restart(self, restart: dict[str, Any]) -> bool:
        """A resume that torchrun did not make: its attempt's `run_started` counts no elastic restart."""
        for e in self.of_kind("run_started"):
            if e.get("attempt") == restart.get("attempt"):
                return Event.of(e).data.get("torchelastic_restart_count") == 0
        return False

    def restarted_by(self, restart: dict[str, Any]) -> str:
        """Who made a restart: "by hand", "logbook run" (a wrapped command's supervisor) or "torchrun"."""
        if self.manual_restart(restart):
            return "by hand"
        for e in self.of_kind("run_started"):
            if e.get("attempt") == restart.get("attempt") and Event.of(e).data.get("script"):
                return "logbook run"
        return "torchrun"

    def interventions(self) -> list[tuple[str, int, int]]:
        """(what, by hand, automatic) for each kind of intervention, in the order a report lists them.

        A live change re-applied after a restart is the change already counted.
        """
        restarts = [e for e in self.events if counted_as(e) == "restarts"]
        manual_restarts = sum(1 for e in restarts if self.manual_restart(e))
        scheduled = sum(1 for e in self.of_kind("hparam_change") if Event.of(e).data.get("source") == "schedule")
        return [
            ("restarts", manual_restarts, len(restarts) - manual_restarts),
            ("hyperparameter changes", len(self.live_changes()), scheduled),
            ("updates skipped by the guard", 0, self.count("skipped_steps")),
            ("rollbacks", 0, self.count("rollbacks")),
            ("learning-rate scalings by the guard", 0, len(self.of_kind("lr_scaled"))),
            ("aborts", 0, sum(1 for e in self.events if ending(e) == "aborted")),
        ]

    def incident_cost_s(self, e: dict[str, Any]) -> float | None:
        """Seconds an incident cost, by what it charges: a restart its lost work and downtime, a rollback
        its recomputed steps at the run's median step time; None when it charges nothing or the log cannot say."""
        d, charge = Event.of(e).data, goodput_charge(e)
        if charge == "restart":
            parts = [float(x) for x in (d.get("seconds_lost"), d.get("downtime_s")) if is_number(x)]
            return sum(parts) if parts else None
        per_step = self.seconds_per_step()
        if charge == "rollback" and is_number(d.get("steps_lost")) and per_step is not None:
            return float(d["steps_lost"]) * per_step
        return None

    def attempt_spans(self) -> dict[int, tuple[float, float]]:
        """attempt -> (first, last) time of its metric rows and of the events it wrote itself."""
        spans: dict[int, tuple[float, float]] = dict(self.attempt_times)
        for e in self.run_events():
            t, a = parse_ts(e.get("ts")), e.get("attempt")
            if t is None or not isinstance(a, int):
                continue
            lo, hi = spans.get(a, (t, t))
            spans[a] = (min(lo, t), max(hi, t))
        return spans

    def count_rule(self, metric: str) -> str:
        return _count_rule(metric)

    def incidents(self) -> list[dict[str, Any]]:
        """The events a report lists as incidents (the registry's `incident` kinds), in log order."""
        return [e for e in self.events if has_flag(e, incident=True)]

    def of_kind(self, *kinds: str) -> list[dict[str, Any]]:
        return [e for e in self.events if is_kind(e, *kinds)]

    # --- time ----------------------------------------------------------------------------

    def run_events(self) -> list[dict[str, Any]]:
        """The events the run itself wrote (not those recorded about it afterwards)."""
        return [e for e in self.events if not is_afterwards(e)]

    def goodput_report(self, step: int | None = None):
        """`logbook.runs.goodput` over the records written before the run first went past `step` (None: all)."""
        cutoff = None if step is None else self.time_past(step)
        if cutoff not in self._goodput:
            events, rows = self.run_events(), self.rows
            if cutoff is not None:
                events = [e for e in events if (parse_ts(e.get("ts")) or 0.0) < cutoff]
                rows = [r for r in rows if not is_number(r.get("time")) or r["time"] < cutoff]
            self._goodput[cutoff] = goodput_report(events, rows)
        return self._goodput[cutoff]

    def seconds_per_step(self) -> float | None:
        """Median seconds per training step over the whole run."""
        return self.goodput_report().median_step_s

    def wall_seconds(self, step: int | None = None) -> float | None:
        rep = self.goodput_report(step)
        return rep.wall_s if rep.attempts else None

    def goodput(self, step: int | None = None):
        """Goodput at `step` (None: the whole run), from `goodput_report` alone.

        One source: the report's productive share, which its lost and overhead
        shares complete to 1 (a figure a progress note recorded mid-run is that
        note's, not the run's).
        """
        upto = self.last_step if step is None else step
        rep = self.goodput_report(step)
        if rep.goodput is None:
            return Measurement(missing="no wall time recorded to compute goodput from")
        scope = "" if step is None or step == self.last_step else f" up to step {step:,}"
        return Measurement(rep.goodput, upto, f"productive time over wall time{scope}, from the event log and metrics")

    def device_hours(self, seconds: float | None) -> float | None:
        return None if seconds is None else self.world_size * seconds / 3600.0


def _steps_text(steps: list[Any]) -> str:
    """`step 5`, `steps 5 and 7`, `steps 5, 7 and 9`; "" for none."""
    shown = [str(s) for s in steps]
    if len(shown) < 2:
        return f"step {shown[0]}" if shown else ""
    return f"steps {', '.join(shown[:-1])} and {shown[-1]}"


def off_plan_words(plan: dict[str, Any]) -> str:
    """How an action departed from the plan: no rule foresaw it, or it carried a rule out differently (named)."""
    rule = plan.get("rule") if isinstance(plan.get("rule"), int) else None
    if rule is None:
        return "was not in the preregistered contingency plan"
    diffs = [str(x) for x in plan.get("differences") or [] if x]
    if diffs:
        return f"carried out contingency rule {rule} with a difference: {'; '.join(diffs)}"
    return f"was not done as contingency rule {rule} says (the log does not record which part differed)"


def _recorded_rollback(events: list[dict[str, Any]], i: int) -> dict[str, Any] | None:
    """{skip_batches, lr_factor} of the rollback that event `i` belongs to, as the log recorded it: the guard
    writes one action's events together, at one step, so only those that follow `i` at its step without a break
    are its (the same step reached again after a restart or a rollback is another action's)."""
    step = events[i].get("step")
    same = list(itertools.takewhile(lambda e: e.get("step") == step, events[i:]))
    rb = next((Event.of(e).data for e in same if is_kind(e, "rollback")), None)
    if rb is None:
        return None
    b = rb.get("batches_skipped")
    skipped = int(b[1]) - int(b[0]) + 1 if isinstance(b, list) and len(b) == 2 and all(is_number(x) for x in b) else 0
    lr = next((Event.of(e).data for e in same if is_kind(e, "lr_scaled")), {})
    return {"skip_batches": skipped, "lr_factor": lr.get("factor") if is_number(lr.get("factor")) else 1.0}


def reapplies(e: dict[str, Any], seen: dict[tuple[Any, ...], Any]) -> Any:
    """The seq of the change that `e` applies again after a restart, or None when `e` is a change of its own.

    Feed a run's `hparam_change` events in order with one `seen` dict. A change
    is the same one again when the trainer marked it `reapplied`, or when it
    carries the request id, key and value of a change already seen (older logs).
    """
    d = Event.of(e).data
    if d.get("source") not in ("live", "advice"):
        return None
    key = (d.get("request_id"), d.get("key"), repr(d.get("new"))) if d.get("request_id") else None
    first = seen.get(key) if key is not None else None
    if d.get("reapplied") is True and first is None:
        first = next((seq for k, seq in seen.items() if k[1:] == (d.get("key"), repr(d.get("new")))), None)
    if first is not None:
        return first
    if key is not None:
        seen[key] = e.get("seq")
    return None


def _state(events: list[dict[str, Any]], record_status: str | None) -> str:
    state = None
    for e in events:
        state = run_state(e) or state
    if state in (None, "running") and record_status in ("failed", "aborted", "finished"):
        return record_status
    return state or "running"


_REFUSED_BY_GUARD = {"loss", "z_loss", "grad_norm"}
"""Figures of a step whose update the guard skipped; its row keeps them, predictions do not see them."""


def read_metric_rows(facts: RunFacts, rows: list[dict[str, Any]]) -> None:
    """Fill `facts`' series, attempt spans, refused steps and first-past times from metric rows in written order."""
    series: dict[str, dict[int, float]] = {}
    furthest = -1
    last_seen = -1
    for r in rows:
        s = r.get("step")
        if not isinstance(s, int) or isinstance(s, bool):
            continue
        t = r.get("time") if is_number(r.get("time")) else None
        a = r.get("attempt")
        if t is not None and isinstance(a, int):
            lo, hi = facts.attempt_times.get(a, (t, t))
            facts.attempt_times[a] = (min(lo, t), max(hi, t))
        if s < last_seen:  # a new branch: what was logged from here on no longer counts
            facts.refused = {k for k in facts.refused if k < s}
            for vals in series.values():
                for k in [k for k in vals if k >= s]:
                    del vals[k]
        last_seen = s
        if r.get("skipped") is True:
            facts.refused.add(s)
        for key, v in r.items():
            if key in _REFUSED_BY_GUARD and r.get("skipped") is True:
                continue  # the guard refused this step's update: its spike is not where the run stands
            if key not in ("step", "attempt", "time") and is_number(v):
                series.setdefault(key, {})[s] = float(v)
        if s > furthest and t is not None:
            facts.first_past.append((s, float(t)))
            furthest = s
    facts.series, facts.rows = series, rows


def load_facts(project: Project, run_id: str, record=None) -> RunFacts:
    """Read the run's event log and metrics once."""
    run_dir: Path = project.run_dir(run_id)
    facts = RunFacts(run=run_id)
    facts.events = list(iter_records(run_dir / "events.jsonl"))
    read_metric_rows(facts, read_metrics(run_dir))
    steps = [e["step"] for e in facts.run_events() if isinstance(e.get("step"), int)]
    train = facts.series.get("loss") or {}
    facts.last_step = max([*steps, *train.keys()], default=None)
    for e in facts.events:
        d = e.get("data") if isinstance(e.get("data"), dict) else {}
        if is_kind(e, "run_started"):
            if isinstance(d.get("total_steps"), int):
                facts.total_steps = d["total_steps"]
            if isinstance(d.get("world_size"), int) and d["world_size"] > 0:
                facts.world_size = d["world_size"]
            facts.prereg_id = d.get("prereg_id") or facts.prereg_id
            facts.snapshot_commit = d.get("snapshot_commit") or facts.snapshot_commit
    facts.state = _state(facts.events, getattr(record, "status", None))
    fin = facts.of_kind("run_finished")
    if facts.state == "finished" and fin and isinstance(fin[-1].get("step"), int):
        facts.last_step = fin[-1]["step"]
    return facts
