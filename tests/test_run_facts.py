"""The questions scoring and reports ask of one run's facts, each pinned on a small log built by hand.

`RunFacts` is the one source of every number about a run; these tests build
its series and events directly (no trainer, no files) so each answer can be
checked against values whose mean and median differ, ties that must break one
way, and steps on either side of a point.
"""

from __future__ import annotations

from scoring_helpers import ts_at

from logbook.eventlog.kinds import parse_ts
from logbook.promises.contingency import parse_rule
from logbook.runs.facts import RunFacts, read_metric_rows, _recorded_rollback, _state


def _facts(series=None, events=None) -> RunFacts:
    return RunFacts(run="r1", series=series or {}, events=events or [])


def _e(kind: str, step: int, seq: int, attempt: int = 1, **data) -> dict:
    return {"kind": kind, "step": step, "seq": seq, "attempt": attempt, "run": "r1", "data": data,
            "ts": f"2026-12-05T10:00:{seq:02d}.000Z"}


LOSS = {"loss": {2: 4.0, 5: 3.5, 9: 3.0}}


def test_a_value_at_or_before_a_step_is_the_last_logged_up_to_it():
    f = _facts(LOSS)
    assert f.value_at_or_before("loss", 5) == (5, 3.5)
    assert f.value_at_or_before("loss", 8) == (5, 3.5)
    assert f.value_at_or_before("loss", 9) == (9, 3.0)
    assert f.value_at_or_before("loss", 100) == (9, 3.0)
    assert f.value_at_or_before("loss", 1) is None
    assert f.value_at_or_before("val_loss", 9) is None


def test_a_milestone_value_is_the_latest_progress_note_up_to_the_step_that_carries_the_key():
    events = [_e("milestone", 10, 0, loss=3.0, fraction=0.1), _e("note", 15, 1, loss=9.9),
              _e("milestone", 20, 2, loss=2.5, fraction=0.2), _e("milestone", 30, 3, fraction=0.3),
              _e("milestone", 1200, 4, loss=1.5, fraction=0.4), _e("milestone", 40, 5, loss=True, fraction=0.5)]
    f = _facts(events=events)
    got = f.milestone_value("loss", 35)
    assert (got.value, got.step, got.rule) == (2.5, 20, "from the progress note at step 20")
    assert f.milestone_value("loss", 20).value == 2.5 and f.milestone_value("loss", 19).value == 3.0
    assert f.milestone_value("loss", 9) is None
    assert f.milestone_value("val_loss", 35) is None
    assert f.milestone_value("loss", 5000).rule == "from the progress note at step 1,200"


def test_the_nearest_value_within_a_window_breaks_a_tie_towards_the_earlier_step():
    f = _facts({"loss": {10: 1.0, 14: 2.0, 20: 3.0}})
    assert f.nearest_within("loss", 12, 2) == (10, 1.0)
    assert f.nearest_within("loss", 13, 2) == (14, 2.0)
    assert f.nearest_within("loss", 12, 1) is None
    assert f.nearest_within("loss", 17, 3) == (14, 2.0)
    assert f.nearest_within("loss", 18, 2) == (20, 3.0)
    assert f.nearest_within("loss", 19, 5) == (20, 3.0)  # nearer, though an earlier step is in the window
    assert f.nearest_within("val_loss", 10, 5) is None


def test_the_steps_logged_around_a_point_are_the_last_before_and_the_first_after():
    f = _facts({"loss": {10: 1.0, 20: 2.0, 30: 3.0}})
    assert f.logged_around("loss", 15) == [10, 20]
    assert f.logged_around("loss", 20) == [10, 30]
    assert f.logged_around("loss", 10) == [20]
    assert f.logged_around("loss", 30) == [20]
    assert f.logged_around("loss", 5) == [10]
    assert f.logged_around("loss", 35) == [30]
    assert f.logged_around("val_loss", 15) == []


def test_a_median_over_an_interval_takes_both_ends_and_is_not_the_mean():
    f = _facts({"tokens_per_s": {10: 1.0, 11: 2.0, 12: 10.0, 13: 3.0, 14: 100.0}})
    assert f.median_over("tokens_per_s", 10, 12) == (2.0, 3)  # the mean would be 4.33
    assert f.median_over("tokens_per_s", 10, 13) == (2.5, 4)  # the mean would be 4
    assert f.median_over("tokens_per_s", 12, 12) == (10.0, 1)
    assert f.median_over("tokens_per_s", 13, 14) == (51.5, 2)
    assert f.median_over("tokens_per_s", 15, 20) is None
    assert f.median_over("loss", 10, 14) is None


def _restart(step, seq, attempt):
    return _e("restart", step, seq, attempt, cause="signal", prev_attempt=attempt - 1)


def test_a_restart_is_by_hand_when_its_attempt_started_outside_torchrun():
    events = [_e("run_started", 0, 0, 1, torchelastic_restart_count=0),
              _restart(5, 1, 2), _e("run_started", 5, 2, 2, torchelastic_restart_count=2),
              _restart(9, 3, 3), _e("run_started", 9, 4, 3, torchelastic_restart_count=0),
              _restart(12, 5, 4)]  # attempt 4 never started: nobody can say who made it
    f = _facts(events=events)
    assert [f.manual_restart(e) for e in f.of_kind("restart")] == [False, True, False]
    assert f.interventions()[0] == ("restarts", 1, 2)


def test_interventions_count_each_kind_once_by_hand_or_automatic():
    events = [
        _e("run_started", 0, 0, 1, torchelastic_restart_count=0),
        _e("hparam_change", 3, 1, source="live", key="lr_scale", old=1.0, new=0.8, request_id="q1", who="ada"),
        _e("hparam_change", 4, 2, source="schedule", key="lr_scale", old=0.8, new=0.5),
        _e("hparam_change", 5, 3, source="advice", key="checkpoint.every", old=50, new=20, request_id="q2"),
        _e("restart", 6, 4, 2, cause="signal"), _e("run_started", 6, 5, 2, torchelastic_restart_count=1),
        _e("hparam_change", 6, 6, 2, source="live", key="lr_scale", old=1.0, new=0.8, request_id="q1",
           reapplied=True),
        _e("step_skipped", 7, 7, 2), _e("step_skipped", 8, 8, 2),
        _e("rollback", 9, 9, 2, from_step=9, to_step=5), _e("lr_scaled", 9, 10, 2, factor=0.5),
        _e("run_aborted", 11, 11, 2, reason="nan"),
    ]
    assert _facts(events=events).interventions() == [
        ("restarts", 0, 1), ("hyperparameter changes", 2, 1), ("updates skipped by the guard", 0, 2),
        ("rollbacks", 0, 1), ("learning-rate scalings by the guard", 0, 1), ("aborts", 0, 1)]


RULE = parse_rule("loss spike > 4 sigma -> rollback 5 steps, skip 10 batches, lr x 0.9")


def _incident(skipped, factor=None, step=12):
    off = {"follows": False, "rule": 1}
    evs = [_e("divergence_detected", step, 0, plan=off, action="rollback"),
           _e("rollback", step, 1, from_step=step, to_step=step - 5, batches_skipped=skipped, plan=off)]
    if factor is not None:
        evs.append(_e("lr_scaled", step, 2, factor=factor, plan=off))
    return evs


def test_a_rollback_is_read_as_the_batches_it_skipped_and_the_factor_it_scaled_by():
    assert _recorded_rollback(_incident([8, 20], 0.5), 0) == {"skip_batches": 13, "lr_factor": 0.5}
    assert _recorded_rollback(_incident([8, 8]), 0) == {"skip_batches": 1, "lr_factor": 1.0}
    assert _recorded_rollback(_incident(None, "fast"), 0) == {"skip_batches": 0, "lr_factor": 1.0}
    assert _recorded_rollback(_incident([8, "x"]), 1) == {"skip_batches": 0, "lr_factor": 1.0}
    assert _recorded_rollback([_e("divergence_detected", 12, 0)], 0) is None
    other_step = [_e("divergence_detected", 12, 0), _e("rollback", 13, 1, batches_skipped=[1, 4])]
    assert _recorded_rollback(other_step, 0) is None


def test_a_guard_action_off_its_rule_names_each_part_that_differed():
    f = _facts(events=_incident([8, 20], 0.5))
    f.judge_plans([RULE])
    assert f.events[0]["data"]["plan"]["differences"] == [
        "skipped 13 batches, the rule said 10", "scaled the learning rate by 0.5, the rule said 0.9"]
    (dev,) = f.event_deviations()
    assert "skipped 13 batches, the rule said 10" in dev["text"] and dev["step"] == 12


def test_every_guard_event_of_an_old_incident_is_judged_and_a_judgement_the_guard_wrote_is_kept():
    wrote = {"follows": False, "rule": 1, "differences": ["as the guard wrote it"]}
    events = [_e("divergence_detected", 3, 10, plan={"follows": False, "rule": 1}),  # no rollback recorded with it
              _e("rollback", 7, 11, plan=wrote), *_incident([8, 20], 0.5)]
    f = _facts(events=events)
    f.judge_plans([RULE])
    said = ["skipped 13 batches, the rule said 10", "scaled the learning rate by 0.5, the rule said 0.9"]
    assert [e["data"]["plan"].get("differences") for e in f.events] == [None, ["as the guard wrote it"], said, said, None]


def test_an_old_rollback_judged_by_a_rule_without_one_says_what_was_done_and_what_the_rule_said():
    f = _facts(events=_incident([8, 20]))
    f.judge_plans([parse_rule("loss spike > 4 sigma -> lr x 0.5")])
    assert f.events[0]["data"]["plan"]["differences"] == [
        "rolled back, the rule said: scale the learning rate"]


def test_a_guard_action_that_did_what_its_rule_says_has_no_difference_to_name():
    f = _facts(events=_incident([3, 12], 0.9))
    f.judge_plans([RULE])
    assert f.events[0]["data"]["plan"]["differences"] == []


def _timed(events) -> RunFacts:
    """A run whose metric rows are half a second apart: its median step takes 0.5 s."""
    rows = [{"step": s, "time": 1000.0 + 0.5 * s, "attempt": 1, "loss": 1.0} for s in range(1, 21)]
    return RunFacts(run="r1", rows=rows, events=events)


def test_an_incident_costs_what_it_charges_a_restart_its_lost_work_and_downtime_a_rollback_its_steps():
    f = _timed([_e("run_started", 0, 0)])
    assert f.seconds_per_step() == 0.5
    assert f.incident_cost_s(_e("restart", 9, 1, 2, seconds_lost=3.0, downtime_s=4.5)) == 7.5
    assert f.incident_cost_s(_e("restart", 9, 1, 2, downtime_s=4.5)) == 4.5
    assert f.incident_cost_s(_e("restart", 9, 1, 2, seconds_lost=3.0, downtime_s="?")) == 3.0
    assert f.incident_cost_s(_e("restart", 9, 1, 2)) is None  # nothing the log can say
    assert f.incident_cost_s(_e("rollback", 9, 1, steps_lost=6)) == 3.0
    assert f.incident_cost_s(_e("rollback", 9, 1)) is None
    assert f.incident_cost_s(_e("step_skipped", 9, 1, steps_lost=6, downtime_s=4.5)) is None
    assert _facts(events=[_e("run_started", 0, 0)]).incident_cost_s(_e("rollback", 9, 1, steps_lost=6)) is None


def test_an_attempt_spans_its_metric_rows_and_the_events_it_wrote_itself():
    f = _facts(events=[_e("run_started", 0, 3, 1), _e("restart", 5, 9, 2), _e("checkpoint_saved", 7, 20, 2),
                       {**_e("note", 8, 30, 2), "ts": "not a time"}, {**_e("note", 8, 31), "attempt": None}])
    f.attempt_times = {2: (1_000_000_000.0, 2_000_000_000.0)}
    spans = f.attempt_spans()
    first, third = f.events[0]["ts"], f.events[2]["ts"]
    assert spans[1] == (parse_ts(first), parse_ts(first))
    assert spans[2] == (1_000_000_000.0, 2_000_000_000.0)  # the rows reach wider than its events
    f.attempt_times = {}
    assert f.attempt_spans()[2] == (parse_ts(f.events[1]["ts"]), parse_ts(third))
    assert set(f.attempt_spans()) == {1, 2}


T0 = 1_780_000_000.0


def _restarted_run() -> RunFacts:
    """30 steps at 0.5 s each; killed after step 15, restarted from step 10 after 10 s of downtime."""
    rows = [{"step": s, "time": T0 + 0.5 * s, "attempt": 1, "loss": 1.0} for s in range(1, 16)]
    rows += [{"step": s, "time": T0 + 20 + 0.5 * s, "attempt": 2, "loss": 1.0} for s in range(11, 31)]
    events = [{**_e("run_started", 0, 0, 1, total_steps=30), "ts": ts_at(T0)},
              {**_e("restart", 10, 1, 2, cause="signal", downtime_s=10.0, seconds_lost=2.5, steps_lost=5),
               "ts": ts_at(T0 + 19)},
              {**_e("run_started", 10, 2, 2, total_steps=30), "ts": ts_at(T0 + 19.5)},
              {**_e("checkpoint_saved", 20, 3, 2), "ts": ts_at(T0 + 30)}]
    f = RunFacts(run="r1", events=events)
    read_metric_rows(f, rows)
    f.last_step, f.world_size = 30, 2
    return f


def test_goodput_up_to_a_step_reads_only_what_was_recorded_before_the_run_first_went_past_it():
    f = _restarted_run()
    whole, early = f.goodput_report(), f.goodput_report(12)
    assert (whole.attempts, early.attempts) == (2, 1)  # the restart came after step 12 was first passed
    assert early.wall_s < whole.wall_s and early.goodput > whole.goodput
    assert f.goodput_report(12) is early  # computed once
    at_end, mid = f.goodput(), f.goodput(12)
    assert (at_end.value, at_end.step) == (whole.goodput, 30)
    assert at_end.rule == "productive time over wall time, from the event log and metrics"
    assert (mid.value, mid.step) == (early.goodput, 12)
    assert mid.rule == "productive time over wall time up to step 12, from the event log and metrics"
    assert f.goodput(30).rule == at_end.rule and f.goodput(30).step == 30
    assert f.wall_seconds(12) == early.wall_s and f.wall_seconds() == whole.wall_s


def test_goodput_with_no_wall_time_is_missing_and_says_why():
    got = _facts(events=[_e("run_started", 0, 0)]).goodput()
    assert got.value is None and got.missing == "no wall time recorded to compute goodput from"


def test_device_hours_count_every_process():
    f = _restarted_run()
    assert f.device_hours(5400.0) == 3.0 and f.device_hours(None) is None


def test_incidents_are_the_kinds_the_registry_marks_in_log_order():
    f = _restarted_run()
    assert [e["kind"] for e in f.incidents()] == ["restart"]


def test_goodput_up_to_a_step_takes_records_strictly_before_the_first_pass_and_those_without_a_time():
    from logbook.runs.goodput import goodput_report

    f = _restarted_run()
    cutoff = f.time_past(12)
    assert cutoff == T0 + 6.5  # step 13's row
    f.events.insert(1, {**_e("checkpoint_saved", 13, 9, 1), "ts": ts_at(cutoff)})  # at the first pass: not before it
    f.rows.insert(0, {"step": 5, "attempt": 1, "val_loss": 2.0})  # a row without a time is kept
    before = [e for e in f.run_events() if parse_ts(e["ts"]) < cutoff]
    rows = [r for r in f.rows if "time" not in r or r["time"] < cutoff]
    assert f.goodput_report(12) == goodput_report(before, rows)
    assert goodput_report(before, rows) != goodput_report(before, rows + [r for r in f.rows if r.get("time") == cutoff])
    assert goodput_report(before, rows) != goodput_report(f.events[:2], rows)


def test_a_run_with_no_attempt_has_no_wall_time_and_a_timeless_event_does_not_end_the_spans():
    assert _facts(events=[_e("note", 0, 0)]).wall_seconds() is None
    f = _facts(events=[{**_e("note", 1, 0), "ts": None}, _e("run_started", 0, 1, 1)])
    assert set(f.attempt_spans()) == {1}


def test_a_count_up_to_a_step_takes_the_events_strictly_before_the_first_pass_and_those_without_a_time():
    """Restarts counted at step 10: the run first went past it at T0 + 5; an event at that very time is after."""
    def at(kind, seq, t):
        return {"kind": kind, "seq": seq, "step": 1, "run": "r1", "data": {"cause": "unknown"}, "ts": t}

    events = [at("note", 0, ts_at(T0)), at("restart", 1, ts_at(T0 + 1)), at("restart", 2, ts_at(T0 + 5)),
              at("restart", 3, None), at("restart", 4, ts_at(T0 + 9))]
    f = RunFacts(run="r1", events=events, first_past=[(11, T0 + 5)])
    assert f.time_past(10) == T0 + 5
    assert (f.count("restarts", 10), f.count("restarts")) == (2, 4)


def test_the_deviations_are_each_live_change_once_in_full_and_each_off_plan_incident_with_its_actions():
    off = {"rule": None, "follows": False}
    said = {"rule": 1, "follows": False, "differences": ["skipped 13 batches, the rule said 10"]}
    change = dict(key="lr_scale", old=1.0, new=0.8, who="Ada Tester", source="live", reason="too noisy",
                  request_id="r-1", plan=off)
    events = [_e("run_started", 0, 0), _e("hparam_change", 5, 1, **change),
              _e("hparam_change", 6, 2, key="grad_clip", old=1.0, new=0.5, source="advice", request_id="r-2", plan=off),
              _e("hparam_change", 7, 3, key="data.weights.web", old=1.0, new=0.5, source="schedule",
                 plan={"rule": None, "follows": True}),
              _e("divergence_detected", 8, 4, action="skip", plan=off),
              _e("checkpoint_saved", 8, 5),  # between a divergence and its actions: the incident goes on
              _e("step_skipped", 8, 6, plan=off),
              _e("straggler", 9, 7, rank=1),  # anything else ends it
              _e("step_skipped", 10, 8, plan=off),
              _e("rollback", 11, 9, plan=said),
              {**_e("note", 11, 10), "data": None},
              _e("restart", 5, 11, 2), _e("run_started", 5, 12, 2),
              _e("hparam_change", 5, 13, 2, **{**change, "reapplied": True}),
              _e("restart", 7, 14, 3), _e("run_started", 7, 15, 3),
              _e("hparam_change", 7, 16, 3, **{**change, "reapplied": True}),
              _e("hparam_change", 9, 17, 3, key="grad_clip", old=0.5, new=0.25, source="live", who="Ada Tester",
                 request_id="r-3", plan=off)]
    assert _facts(events=events).event_deviations() == [
        {"kind": "live_change", "entry": "r1:1", "step": 5,
         "text": "live change at step 5 by Ada Tester: lr_scale 1.0 → 0.8 (too noisy); "
                 "re-applied after a restart at steps 5 and 7 (the same change)"},
        {"kind": "live_change", "entry": "r1:2", "step": 6, "text": "advice change at step 6 by unknown: grad_clip 1.0 → 0.5"},
        {"kind": "off_plan", "entry": "r1:4", "step": 8, "entries": ["r1:4", "r1:6"],
         "text": "divergence detected (action: skip) at step 8 was not in the preregistered contingency plan; "
                 "carried out as: step skipped"},
        {"kind": "off_plan", "entry": "r1:8", "step": 10, "entries": ["r1:8"],
         "text": "step skipped at step 10 was not in the preregistered contingency plan"},
        {"kind": "off_plan", "entry": "r1:9", "step": 11, "entries": ["r1:9"],
         "text": "rollback at step 11 carried out contingency rule 1 with a difference: skipped 13 batches, the rule "
                 "said 10"},
        {"kind": "live_change", "entry": "r1:17", "step": 9,
         "text": "live change at step 9 by Ada Tester: grad_clip 0.5 → 0.25"}]  # after the re-applied ones
    first = _facts(events=[_e("step_skipped", 3, 0, plan=off), _e("divergence_detected", 4, 1, plan=off),
                           _e("divergence_detected", 5, 2, action="rollback", plan=off)]).event_deviations()
    assert [(d["entry"], d["text"].split(" was ")[0]) for d in first] == [
        ("r1:0", "step skipped at step 3"), ("r1:1", "divergence detected at step 4"),
        ("r1:2", "divergence detected (action: rollback) at step 5")]  # a second divergence is its own incident


def test_the_metric_rows_are_read_as_the_branch_that_counts_with_each_attempts_span_and_when_each_step_was_first_passed():
    rows = [{"step": 0, "attempt": 1, "time": 100.0, "loss": 5.0},
            {"step": True, "loss": 1.0}, {"step": "3", "loss": 1.0},  # not steps: passed over
            {"step": 1, "attempt": 1, "time": 101.0, "loss": 4.0, "val_loss": 3.9},
            {"step": 1, "attempt": 1, "time": "late", "tokens": 2},  # a time that is not one: the row counts, untimed
            {"step": 2, "attempt": 1, "time": 102.0, "loss": 9.0, "lr": 0.1, "skipped": True},  # the guard refused it
            {"step": 3, "attempt": 1, "time": 103.0, "loss": 3.8, "val_loss": 3.7},
            {"step": 2, "attempt": 2, "time": 110.0, "loss": 3.5},  # resumed from step 2: a new branch
            {"step": 3, "attempt": 2, "time": 111.0, "loss": 3.4},
            {"step": 4, "attempt": 2, "time": 112.0, "loss": 3.3}, {"step": 4, "attempt": 2, "time": 112.5, "mfu": 0.4}]
    f = _facts()
    read_metric_rows(f, rows)
    assert f.series == {"loss": {0: 5.0, 1: 4.0, 2: 3.5, 3: 3.4, 4: 3.3}, "val_loss": {1: 3.9}, "tokens": {1: 2.0},
                        "lr": {}, "mfu": {4: 0.4}}  # the refused step's learning rate went with its branch
    assert f.refused == set() and f.rows is rows
    assert f.attempt_times == {1: (100.0, 103.0), 2: (110.0, 112.5)}
    assert f.first_past == [(0, 100.0), (1, 101.0), (2, 102.0), (3, 103.0), (4, 112.0)]

    kept = _facts()
    read_metric_rows(kept, rows[:6])  # before the new branch: the refused step and its other figures stand
    assert kept.refused == {2} and kept.series["lr"] == {2: 0.1} and 2 not in kept.series["loss"]


def test_a_runs_state_is_its_logs_last_word_or_failing_that_the_records_ending():
    started, finished = _e("run_started", 0, 0), _e("run_finished", 9, 1)
    for events, status, want in (([], None, "running"), ([], "running", "running"), ([], "stopped", "running"),
                                 ([], "failed", "failed"), ([], "aborted", "aborted"), ([], "finished", "finished"),
                                 ([started], "failed", "failed"), ([started, finished], "failed", "finished"),
                                 ([started, finished], None, "finished")):
        assert _state(events, status) == want, (events, status)


def test_the_steps_a_change_was_re_applied_at_read_as_a_list_in_words():
    from logbook.runs.facts import _steps_text

    assert [_steps_text(s) for s in ([], [5], [5, 7], [5, 7, 9])] == [
        "", "step 5", "steps 5 and 7", "steps 5, 7 and 9"]


def test_learning_rate_changes_count_only_the_changes_that_touch_it_wherever_they_come_in_the_log():
    events = [_e("hparam_change", 3, 0, key="grad_clip", old=1.0, new=0.5, source="live", request_id="a"),
              _e("hparam_change", 4, 1, key="lr_scale", old=1.0, new=0.8, source="live", request_id="b"),
              _e("hparam_change", 5, 2, key="data.weights.web", old=1.0, new=0.5, source="schedule"),
              _e("lr_scaled", 6, 3, old=0.8, new=0.4, factor=0.5)]
    assert _facts(events=events).count("lr_changes") == 2
