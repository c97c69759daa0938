"""What each metric a prediction may name measures at a point, and what the scorecard says it measured.

`value_at` is the one place a metric's name becomes a measurement: counts of
events, steps completed, perplexity from the validation loss, goodput, wall
hours and MFU. Each is pinned here on a small run built by hand, with values
chosen so that a measurement taken at the wrong step, from the wrong series or
with the wrong unit gives a different number.
"""

from __future__ import annotations

import math
from scoring_helpers import ts_at

from logbook.runs.facts import RunFacts, read_metric_rows
from logbook.scoring.outcome import value_at

T0 = 1_780_000_000.0


def _e(kind: str, step: int, seq: int, t: float, attempt: int = 1, **data) -> dict:
    return {"kind": kind, "step": step, "seq": seq, "attempt": attempt, "run": "r1", "data": data, "ts": ts_at(t)}


def _run(extra_rows=(), events=()) -> RunFacts:
    """30 steps, one a second; a restart after step 15 back to step 10; validation every 10 steps."""
    rows = [{"step": s, "time": T0 + s, "attempt": 1, "loss": 5.0 - 0.1 * s} for s in range(1, 16)]
    rows += [{"step": s, "time": T0 + 30 + s, "attempt": 2, "loss": 4.0 - 0.1 * s} for s in range(11, 31)]
    rows += [{"step": s, "attempt": 1 if s < 11 else 2, "val_loss": v, "time": T0 + s + (0 if s < 11 else 30) + 0.5}
             for s, v in ((10, 2.0), (20, 1.5), (30, 1.0))]
    rows += [{**r, "time": T0 + 30.5 + r["step"]} for r in extra_rows]
    log = [_e("run_started", 0, 0, T0, total_steps=30),
           _e("restart", 10, 1, T0 + 38, 2, cause="signal", downtime_s=10.0, seconds_lost=5.0, steps_lost=5),
           _e("run_started", 10, 2, T0 + 39, 2, total_steps=30), *events]
    f = RunFacts(run="r1", events=log)
    read_metric_rows(f, sorted(rows, key=lambda r: r["time"]))
    f.last_step, f.total_steps = 30, 30
    return f


def test_a_count_says_whether_it_covers_the_whole_run_or_stops_at_the_point():
    f = _run()
    whole, at_end, early = value_at("restarts", f, None), value_at("restarts", f, 30), value_at("restarts", f, 12)
    assert (whole.value, whole.step) == (1.0, None) and (at_end.value, at_end.step) == (1.0, 30)
    assert whole.rule == at_end.rule == f"{f.count_rule('restarts')} over the whole run"
    assert (early.value, early.step, early.rule) == (0.0, 12, f"{f.count_rule('restarts')} up to step 12")
    assert value_at("restarts", f, 5).rule.endswith(" up to step 5")


def test_steps_is_the_step_reached_as_a_number_and_zero_before_any():
    got = value_at("steps", _run(), None)
    assert (got.value, got.step, got.rule) == (30.0, 30, "steps completed") and isinstance(got.value, float)
    assert (value_at("steps", _run(), 12).value, value_at("steps", _run(), 12).step) == (12.0, 12)
    none = value_at("steps", RunFacts(run="r1"), None)
    assert (none.value, none.step) == (0.0, 0)


def test_perplexity_is_the_exponential_of_the_validation_loss_at_the_point_or_within_its_stated_window():
    f = _run()
    got = value_at("val_ppl", f, 20)
    assert (got.value, got.step, got.rule) == (math.exp(1.5), 20, "exp(val_loss) at step 20")
    near = value_at("val_ppl", f, 23, window=5)
    assert (near.value, near.step) == (math.exp(1.5), 20) and near.rule.startswith("exp(val_loss) at step 20, the nearest")
    missing = value_at("val_ppl", f, 23)
    assert missing.value is None and "no val_loss was logged at step 23" in missing.missing
    assert value_at("val_ppl", f, None).value == math.exp(1.0)  # the end of the run


def test_goodput_at_a_point_is_the_runs_up_to_that_point_not_the_whole_runs():
    f = _run()
    early, whole = value_at("goodput", f, 12), value_at("goodput", f, None)
    assert early == f.goodput(12) and whole == f.goodput()
    assert early.value != whole.value  # the restart after step 12 cost the whole run, not the first 12 steps


def test_wall_hours_are_the_seconds_since_the_start_up_to_the_point_over_3600():
    f = _run()
    got, early = value_at("wall_hours", f, None), value_at("wall_hours", f, 12)
    assert (got.value, got.step, got.rule, got.missing) == (f.wall_seconds() / 3600.0, 30,
                                                             "wall time since the run started", None)
    assert early.value == f.wall_seconds(12) / 3600.0 and early.step == 12 and early.value < got.value
    timeless = value_at("wall_hours", RunFacts(run="r1", last_step=7), None)
    assert (timeless.value, timeless.step, timeless.missing) == (None, 7, "no timestamps to measure wall time from")


def test_mfu_is_the_logged_value_and_only_failing_that_the_latest_progress_notes():
    logged = _run(extra_rows=[{"step": 20, "attempt": 2, "mfu": 0.41}])
    got = value_at("mfu", logged, 20)
    assert (got.value, got.step, got.rule) == (0.41, 20, "at step 20")
    near = value_at("mfu", logged, 22, window=3)
    assert (near.value, near.step) == (0.41, 20) and "as preregistered" in near.rule

    noted = _run(events=[_e("milestone", 15, 3, T0 + 45, 2, fraction=0.5, mfu=0.38)])
    from_note = value_at("mfu", noted, 20)
    assert (from_note.value, from_note.step, from_note.rule) == (0.38, 15, "from the progress note at step 15")
    neither = value_at("mfu", _run(), 20)
    assert neither.value is None and neither.missing == "not measured: no mfu was logged at any step"
    both = _run(extra_rows=[{"step": 20, "attempt": 2, "mfu": 0.41}],
                events=[_e("milestone", 15, 3, T0 + 45, 2, fraction=0.5, mfu=0.38)])
    assert value_at("mfu", both, 20).value == 0.41  # the logged value wins over the note's


def test_a_step_whose_update_the_guard_refused_is_measured_at_the_last_accepted_one_and_says_so():
    f = RunFacts(run="r1", series={"loss": {19: 3.0, 20: 2.5}}, refused={21})
    got = value_at("loss", f, 21)
    assert (got.value, got.step) == (2.5, 20)
    assert got.rule == "at step 20, the last step whose update the guard accepted (it skipped step 21's)"


def test_a_value_never_logged_names_the_nearest_logged_steps_only_where_there_are_some():
    f = _run()
    assert value_at("val_loss", f, 15).missing == "not measured: no val_loss was logged at step 15 (logged nearest: step 10 and 20)"
    assert value_at("grad_norm", f, 15).missing == "not measured: no grad_norm was logged at any step"


def test_a_scored_prediction_carries_its_own_terms_and_what_was_measured():
    from logbook.promises.predictions import parse_prediction
    from logbook.scoring.outcome import score

    r = score(parse_prediction("val_loss@step:20 < 1.4 ± 0.2"), "amend-1", _run(), late="amendment 1 was late")
    assert (r.text, r.metric, r.source, r.op, r.threshold, r.tolerance) == (
        "val_loss@step:20 < 1.4 ± 0.2", "val_loss", "amend-1", "<", 1.4, 0.2)
    assert (r.status, r.within_tolerance, r.value, r.at_step, r.rule, r.reason, r.late, r.forecast) == (
        "confirmed", True, 1.5, 20, "at step 20", "", "amendment 1 was late", None)
