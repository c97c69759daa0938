"""Where a run stood at one of its progress notes: goodput, what happened since the last note, predictions, forecasts.

The trainer emits a `milestone` event with what the loop knows (step, loss,
throughput, ETA) and nothing more: scoring is the logbook's, never the
training process's. The chronicle asks `note_scores` for each note when it
renders it, from the run's records as they were when the note was written
(the events up to and including it, the metrics up to its step), so the same
logs give the same note whenever it is rendered.

A note written by an older trainer carries these figures in its own payload;
those are what the run recorded then and are kept (`missing_scores`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from logbook.core.textfmt import is_number
from logbook.eventlog.kinds import has_flag, is_kind, parse_ts
from logbook.runs.facts import RunFacts, read_metric_rows
from logbook.scoring.forecasts import forecast_standings
from logbook.scoring.outcome import judge, measure, point_step, value_at

SCORE_KEYS = ("goodput", "since_last", "predictions", "forecasts")
"""What a progress note shows that the logbook works out, not the trainer."""

SINCE_FLAGS = {"restarts": {"counted_as": "restarts"}, "rollbacks": {"counted_as": "rollbacks"},
               "changes": {"setting_change": True}, "skips": {"counted_as": "skipped_steps"}}
"""What `since_last` counts, by the registry flags of the kinds counted (asked per event, so a later kind counts)."""


def missing_scores(data: dict[str, Any]) -> bool:
    """Whether a note's payload lacks the logbook's figures (a note of today's trainer)."""
    return not any(k in data for k in SCORE_KEYS)


def note_scores(facts: RunFacts, note: dict[str, Any], prereg: Any = None,
                amendments: list[str] | None = None) -> dict[str, Any]:
    """The logbook's figures for one `milestone` record of the run `facts` was read from.

    `prereg`: the run's preregistration (None for an exploratory run), with
    the `amendments` its run record accepted.
    """
    then = facts_at(facts, note)
    step = then.last_step  # the note's own step; a note without one stands where the records do
    rep = then.goodput_report()
    before = then.events[:-1] if then.events and then.events[-1].get("seq") == note.get("seq") else then.events
    preds = [] if prereg is None else [standing(p, then) for p, _src in prereg.all_predictions(amendments)]
    return {
        "goodput": None if rep.goodput is None else round(rep.goodput, 4),
        "since_last": since_last(before),
        "predictions": preds,
        "forecasts": forecast_standings(prereg, then, step) if prereg is not None and step is not None else [],
    }


def facts_at(facts: RunFacts, note: dict[str, Any]) -> RunFacts:
    """`facts` as they stood when `note` was written: the events up to it, the metrics up to its step."""
    seq = note.get("seq")
    events = facts.events
    if isinstance(seq, int):
        events = [e for e in events if isinstance(e.get("seq"), int) and e["seq"] <= seq]
    step = note.get("step")
    if not isinstance(step, int):
        return dataclasses.replace(facts, events=events, _goodput={}, _again=None)
    # The rows written by then: by their time where they have one (a row of an attempt that went past the
    # note's step and died before it still counted then), else by their step.
    # The series are read again from those rows: a step trained again after a rollback has, now, a value that did
    # not exist when the note was written (its row then was the refused spike).
    when = parse_ts(note.get("ts"))
    rows = [r for r in facts.rows if _written_by(r, step, when)]
    read = RunFacts(run=facts.run)
    read_metric_rows(read, rows)
    series = {m: {s: v for s, v in vals.items() if s <= step} for m, vals in read.series.items()}
    first_past = [(s, t) for s, t in facts.first_past if when is None or t <= when]
    return dataclasses.replace(facts, events=events, series=series, rows=rows, refused=read.refused, last_step=step,
                               state="running", first_past=first_past, _goodput={}, _again=None)


def _written_by(row: dict[str, Any], step: int, when: float | None) -> bool:
    if when is not None and is_number(row.get("time")):
        return row["time"] <= when
    return not isinstance(row.get("step"), int) or row["step"] <= step


def since_last(events: list[dict[str, Any]]) -> dict[str, int]:
    """Restarts, rollbacks, changes and skipped updates recorded since the last progress note."""
    start = 0
    for i, e in enumerate(events):
        if is_kind(e, "milestone"):
            start = i + 1
    out = dict.fromkeys(SINCE_FLAGS, 0)
    for e in events[start:]:
        for key, flags in SINCE_FLAGS.items():
            if has_flag(e, **flags):
                out[key] += 1
    return out


def standing(p, facts: RunFacts) -> dict[str, Any]:
    """Where one prediction stands now: met, on track, at risk, already failed or unknown.

    A prediction whose point has passed is settled (met or already failed); a
    count that only grows can fail early (`restarts <= 3` at the fourth
    restart). Otherwise the current value is judged as if it were final: on
    the wrong side or within the tolerance is "at risk".
    """
    m = measure(p, facts)
    status, _within, _ = judge(p, m)
    if status == "refuted":
        label = "already failed"
    elif status == "confirmed":  # judged only once it cannot change any more
        label = "met"
    else:
        step, _ = point_step(p, facts)
        passed = step is not None and facts.last_step is not None and facts.last_step >= step
        # A point already passed with nothing measured there stays unknown: today's value says nothing of it.
        now = m if m.value is not None or passed else value_at(p.metric, facts, None)
        if now.value is None:
            label = "unknown"
        else:
            verdict = p.verdict(now.value)
            label = "on track" if verdict == "confirmed" else "at risk"
            m = now
    value = None if m.value is None else round(float(m.value), 6)
    return {"expr": p.to_text(), "status": label, "value": value}
