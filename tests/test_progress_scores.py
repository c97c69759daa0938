"""A progress note's figures are the run's records as they stood when the note was written, worked out by the
logbook (`logbook.scoring.progress`). Runs are written through the trainer's own sink with a story clock, or
built by hand where a boundary must be exact; nothing trains."""

from __future__ import annotations

from datetime import datetime, timezone

from scoring_helpers import T0, make_prereg, project_of, story_clock, story_run  # noqa: F401  (story_clock: a fixture)

from logbook.proof.amend import amend_prereg
from logbook.promises.predictions import parse_prediction
from logbook.promises.prereg import load_prereg
from logbook.runs.facts import RunFacts, load_facts
from logbook.scoring.progress import facts_at, note_scores, since_last, standing

NOTE_T = T0 + 200


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _e(kind: str, seq, step: int, **data) -> dict:
    return {"kind": kind, "seq": seq, "step": step, "attempt": 1, "run": "r1", "data": data,
            "ts": _iso(T0 + (seq if isinstance(seq, int) else 0))}


def _hand_facts() -> RunFacts:
    events = [_e("run_started", 0, 0), _e("restart", 1, 5), _e("note", None, 6), _e("milestone", 2, 10),
              _e("rollback", 3, 12)]
    rows = [{"step": 5, "time": T0 + 100, "loss": 3.0},
            {"step": 12, "time": NOTE_T},        # written by the note's time, past its step (the attempt died later)
            {"step": 8, "time": T0 + 300},       # written after the note, at an earlier step (a later attempt)
            {"step": 9}, {"step": 11, "loss": 2.4},  # rows without a time go by their step
            {"step": 10, "time": "soon", "loss": 2.5},  # nor does a time that is no number
            {"eval": 1}]                         # a row with no step is kept
    return RunFacts(run="r1", events=events, series={"loss": {5: 3.0, 10: 2.5, 11: 2.4}}, rows=rows,
                    first_past=[(5, T0 + 100), (12, NOTE_T), (13, T0 + 250)], last_step=20, state="finished")


def test_a_note_sees_the_events_up_to_it_the_metrics_up_to_its_step_and_the_rows_written_by_its_time():
    facts = _hand_facts()
    then = facts_at(facts, {**facts.events[3], "ts": _iso(NOTE_T)})
    assert [e["seq"] for e in then.events] == [0, 1, 2]
    assert then.series == {"loss": {5: 3.0, 10: 2.5}}
    r = facts.rows
    assert then.rows == [r[0], r[1], r[3], r[5], r[6]]
    assert then.first_past == [(5, T0 + 100), (12, NOTE_T)]
    assert (then.last_step, then.state) == (10, "running")
    assert (facts.last_step, facts.state, len(facts.rows), len(facts.events)) == (20, "finished", 7, 5)


def test_a_note_without_a_time_takes_the_rows_by_their_step_and_every_first_pass():
    facts = _hand_facts()
    note = {k: v for k, v in facts.events[3].items() if k != "ts"}
    then = facts_at(facts, note)
    r = facts.rows
    assert then.rows == [r[0], r[2], r[3], r[5], r[6]]
    assert then.first_past == facts.first_past


def test_a_note_without_a_step_cuts_only_the_events_and_one_without_a_seq_cuts_nothing():
    facts = _hand_facts()
    then = facts_at(facts, {**facts.events[3], "step": None})
    assert [e["seq"] for e in then.events] == [0, 1, 2]
    assert (then.series, then.rows, then.last_step, then.state) == (facts.series, facts.rows, 20, "finished")
    assert facts_at(facts, {"kind": "milestone", "step": None}).events == facts.events


def _story(logbook_repo, story_clock, predictions=None, *, amend=None):
    project = project_of(logbook_repo)
    pid = make_prereg(project, predictions) if predictions else None
    if amend:
        amend_prereg(project, pid, reason="one more before launch", seen="nothing", predictions=amend,
                     now=datetime.fromtimestamp(T0 - 1800, timezone.utc))
    story_run(project, story_clock, "story", pid)
    facts = load_facts(project, "story")
    note = next(e for e in facts.events if e["kind"] == "milestone")
    return facts, note, (load_prereg(project, pid) if pid else None)


def test_a_notes_goodput_is_its_own_even_after_the_whole_runs_was_worked_out(logbook_repo, story_clock):
    facts, note, _ = _story(logbook_repo, story_clock)
    whole = facts.goodput_report()
    then = facts_at(facts, note)
    assert then.goodput_report().wall_s < whole.wall_s
    older = facts_at(facts, {**note, "step": None})  # an older trainer's note: the events up to it, every row
    assert older.goodput_report() is not whole and older.goodput_report() != whole


def test_since_last_counts_what_happened_after_the_latest_note_only():
    ev = [_e("restart", 0, 1), _e("milestone", 1, 5), _e("restart", 2, 6), _e("rollback", 3, 7),
          _e("lr_scaled", 4, 8), _e("hparam_change", 5, 9), _e("step_skipped", 6, 10), _e("step_skipped", 7, 11),
          _e("checkpoint_saved", 8, 12)]
    zero = {"restarts": 0, "rollbacks": 0, "changes": 0, "skips": 0}
    assert since_last(ev) == {"restarts": 1, "rollbacks": 1, "changes": 2, "skips": 2}
    assert since_last(ev[:1]) == {**zero, "restarts": 1}  # no note yet: since the start
    assert since_last(ev[:2]) == zero
    assert since_last(ev + [_e("milestone", 9, 13)]) == zero


def test_a_note_is_scored_against_the_predictions_in_force_at_its_own_step(logbook_repo, story_clock):
    facts, note, prereg = _story(logbook_repo, story_clock,
                                 ["loss@step:40 < 4.5", "restarts@final == 0", "val_loss@final ≈ 4.1 [3.9, 4.3] 80%"],
                                 amend=["spikes@final <= 5"])
    scores = note_scores(facts, note, prereg, [])
    assert scores["goodput"] == round(facts_at(facts, note).goodput_report().goodput, 4) == 0.96
    early = {"kind": "milestone", "seq": 1, "step": 27}  # after the first checkpoint: 0.98148...
    g = facts_at(facts, early).goodput_report().goodput
    assert note_scores(facts, early, prereg, [])["goodput"] == round(g, 4) != round(g, 5)
    assert scores["since_last"] == {"restarts": 0, "rollbacks": 0, "changes": 0, "skips": 1}
    assert [(p["expr"], p["status"]) for p in scores["predictions"]] == [
        ("loss@step:40 < 4.5", "met"), ("restarts@final == 0", "on track"), ("val_loss@final ≈ 4.1 [3.9, 4.3] 80%", "on track")]
    [f] = scores["forecasts"]
    assert (f["metric"], f["step"], f["value"]) == ("val_loss", 50, 4.0)
    with_amendment = note_scores(facts, note, prereg, None)  # None: every amendment
    assert [p["expr"] for p in with_amendment["predictions"]][-1] == "spikes@final <= 5"


def test_a_note_without_a_seq_counts_every_event_before_it_and_one_without_a_step_is_scored_at_the_last(
        logbook_repo, story_clock):
    facts, note, prereg = _story(logbook_repo, story_clock, ["val_loss@final ≈ 3 [2.8, 3.2] 80%"])
    no_seq = {k: v for k, v in note.items() if k != "seq"}
    assert note_scores(facts, no_seq, prereg)["since_last"]["restarts"] == 1  # the run's restart, after the note
    ends_in_a_restart = RunFacts(run="r1", events=[_e("milestone", 0, 5), _e("restart", 1, 6)])
    assert note_scores(ends_in_a_restart, {"kind": "milestone", "step": 7}, None)["since_last"]["restarts"] == 1
    older = note_scores(facts, {**note, "step": None}, prereg)
    assert [f["step"] for f in older["forecasts"]] == [100]  # no step of its own: where the records stand


def test_an_exploratory_run_and_a_run_with_nothing_measured_have_no_scores_to_show():
    empty = RunFacts(run="r1", events=[_e("milestone", 0, 0)])
    scores = note_scores(empty, {**empty.events[0], "step": None}, None)
    assert scores == {"goodput": None, "since_last": {"restarts": 0, "rollbacks": 0, "changes": 0, "skips": 0},
                      "predictions": [], "forecasts": []}


def test_a_standing_is_met_failed_on_track_at_risk_or_unknown():
    facts = RunFacts(run="r1", series={"loss": {10: 3.0, 20: 2.0}}, events=[_e("restart", 0, 5)], last_step=20,
                     total_steps=100)
    got = {t: standing(parse_prediction(t), facts) for t in (
        "loss@step:10 < 3.5", "restarts@final <= 0", "loss@final < 2.5", "loss@final < 1.5", "val_loss@final < 3",
        "loss@step:15 < 3")}
    assert {t: (s["status"], s["value"]) for t, s in got.items()} == {
        "loss@step:10 < 3.5": ("met", 3.0), "restarts@final <= 0": ("already failed", 1.0),
        "loss@final < 2.5": ("on track", 2.0), "loss@final < 1.5": ("at risk", 2.0),
        "val_loss@final < 3": ("unknown", None), "loss@step:15 < 3": ("unknown", None)}


def test_a_point_passed_with_nothing_measured_stays_unknown_and_values_are_kept_to_six_places():
    facts = RunFacts(run="r1", series={"loss": {15: 2.123456789}}, last_step=15, total_steps=100)
    assert standing(parse_prediction("loss@step:12 < 3"), facts)["status"] == "unknown"  # reached: today says nothing
    assert standing(parse_prediction("loss@step:15 < 3"), RunFacts(  # reached at this very step, not measured there
        run="r1", series={"loss": {10: 2.0}}, last_step=15, total_steps=100))["status"] == "unknown"
    assert standing(parse_prediction("loss@step:16 < 3"), facts) == {
        "expr": "loss@step:16 < 3", "status": "on track", "value": 2.123457}


def test_a_note_with_no_step_on_a_run_with_no_step_yet_has_no_forecast_standing(logbook_repo):
    project = project_of(logbook_repo)
    prereg = load_prereg(project, make_prereg(project, ["val_loss@final ≈ 3 [2.8, 3.2] 80%"]))
    facts = RunFacts(run="r1", series={"val_loss": {10: 3.0}}, events=[_e("milestone", 0, 0)])
    assert note_scores(facts, {"kind": "milestone", "seq": 0}, prereg)["forecasts"] == []


def test_a_note_at_a_step_the_guard_refused_does_not_see_the_value_trained_there_after_the_rollback():
    from logbook.runs.facts import read_metric_rows

    rows = [{"step": s, "attempt": 1, "time": T0 + s, "loss": 4.0 - 0.1 * s} for s in range(1, 6)]
    rows.append({"step": 6, "attempt": 1, "time": T0 + 6, "loss": 296.0, "skipped": True})  # the spike, refused
    rows += [{"step": s, "attempt": 1, "time": T0 + 20 + s, "loss": 3.0} for s in (4, 5, 6)]  # re-trained, later
    facts = RunFacts(run="r1", events=[_e("run_started", 0, 0), _e("milestone", 1, 6), _e("rollback", 2, 6)],
                     last_step=6, state="finished")
    read_metric_rows(facts, rows)
    assert facts.series["loss"][6] == 3.0  # the run, now: step 6 as trained again
    then = facts_at(facts, {**facts.events[1], "ts": _iso(T0 + 10)})  # the note, written after the refused row
    assert 6 not in then.series["loss"] and then.series["loss"][5] == 3.5 and 6 in then.refused
    p = parse_prediction("loss@step:6 < 3.5")
    assert standing(p, facts) == {"expr": p.to_text(), "status": "met", "value": 3.0}
    # When the note was written step 6 stood at its last accepted loss (the refused step's rule), not at 3.0.
    assert standing(p, then) == {"expr": p.to_text(), "status": "already failed", "value": 3.5}
