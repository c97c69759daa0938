"""Checkpoint-interval advice: Young, Daly, the overhead formula, durations, the command."""

from __future__ import annotations

import json
import math

import pytest

from logbook.core.errors import UsageError
from logbook.runs.ckpt_advice import (
    advise,
    advise_from_run,
    daly_interval,
    format_duration,
    overhead,
    parse_duration,
    young_interval,
)


def _ev(kind, ts, attempt=1, step=None, drill=False, **data):
    return {"kind": kind, "ts": f"2026-11-30T{ts}.000000Z", "attempt": attempt, "step": step, "drill": drill, "data": data}


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("3.1h", 11160.0), ("5m", 300.0), ("90s", 90.0), ("2d", 172800.0), ("1h30m", 5400.0),
     ("1h 30m", 5400.0), (".5h", 1800.0), ("10min", 600.0), ("2H", 7200.0), ("1d2h3m4s", 93784.0)],
)
def test_durations_parse_with_units(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "3.1", "h", "5 minutes", "-5m", "1h-30m", "5m30", "0s", "1e3s", "abc"])
def test_malformed_durations_are_usage_errors_with_an_example(text):
    with pytest.raises(UsageError) as e:
        parse_duration(text, "--mtbf")
    assert e.value.exit_code == 2
    assert "1h30m" in (e.value.hint or "")


def test_young_for_the_seed_example_is_about_43_minutes():
    tau = young_interval(300.0, 3.1 * 3600)
    assert tau == pytest.approx(math.sqrt(2 * 300 * 11160))
    assert tau / 60 == pytest.approx(43.13, abs=0.01)


def test_daly_matches_its_formula_and_is_shorter_than_young_here():
    d, m = 300.0, 11160.0
    r = d / (2 * m)
    expected = math.sqrt(2 * d * m) * (1 + math.sqrt(r) / 3 + r / 9) - d
    assert daly_interval(d, m) == pytest.approx(expected, rel=1e-12)
    assert daly_interval(d, m) == pytest.approx(2391.5275, abs=1e-3)
    assert daly_interval(d, m) < young_interval(d, m)


def test_daly_falls_back_to_the_mtbf_when_saves_cost_twice_the_mtbf():
    assert daly_interval(120.0, 60.0) == 60.0
    adv = advise(120.0, 60.0)
    assert adv.daly_fallback and adv.daly_s == 60.0
    assert any("falls back" in n for n in adv.notes)


def test_overhead_is_saves_plus_half_a_period_of_rework_and_young_minimises_it():
    d, m = 300.0, 11160.0
    assert overhead(3600.0, d, m) == pytest.approx(300 / 3600 + 3900 / 22320)
    best = young_interval(d, m)
    for tau in (best * 0.8, best * 1.25):
        assert overhead(tau, d, m) > overhead(best, d, m)


def test_advice_from_a_run_measures_mtbf_save_cost_and_current_interval():
    events = [
        _ev("run_started", "00:00:00"),
        _ev("checkpoint_saved", "00:30:00", step=100, blocking_s=30.0),
        _ev("checkpoint_saved", "01:00:00", step=200, blocking_s=40.0),
        _ev("restart", "02:00:00", attempt=2, cause="signal"),
        _ev("run_started", "02:00:01", attempt=2),
        _ev("checkpoint_saved", "02:30:01", attempt=2, step=300, blocking_s=50.0),
        _ev("restart", "04:00:00", attempt=3, cause="preempted"),  # no rework: not a failure
        _ev("restart", "05:00:00", attempt=4, cause="exception", drill=True),  # a drill: not counted
        _ev("restart", "06:00:00", attempt=5, cause="hang"),
    ]
    two = advise_from_run(events)  # two failures: not enough to estimate an MTBF from
    assert (two.failures, two.mtbf_s, two.complete) == (2, None, False)
    assert "needs at least 3 failures, and it has seen 2" in two.sentence()
    assert advise_from_run(events, mtbf_s=7200.0).complete  # a given MTBF needs no failures
    adv = advise_from_run([*events, _ev("restart", "06:00:00", attempt=6, cause="unknown")])
    assert adv.failures == 3 and adv.wall_s == pytest.approx(6 * 3600)
    assert adv.mtbf_s == pytest.approx(2 * 3600) and adv.mtbf_source == "run"
    assert adv.save_s == pytest.approx(40.0) and adv.save_source == "run"
    assert adv.current_s == pytest.approx(1800.0)
    assert adv.young_s == pytest.approx(math.sqrt(2 * 40 * 7200))
    assert "Failures so far: 3 in 6 h 00 min (MTBF 2 h 00 min)" in adv.sentence()
    assert "advised interval is 12 min 39 s (current: 30 min 00 s)" in adv.sentence()


def test_a_single_kill_advises_no_interval_and_says_how_many_failures_it_needs():
    """A `kill -9` by hand 12 s into a run once advised a 0.38 s checkpoint interval."""
    events = [_ev("run_started", "00:00:00"), _ev("checkpoint_saved", "00:00:05", step=5, blocking_s=0.006),
              _ev("restart", "00:00:12", attempt=2, cause="signal", signal=9)]
    adv = advise_from_run(events)
    assert (adv.complete, adv.young_s, adv.failures) == (False, None, 1)
    assert adv.notes == ["An MTBF from this run needs at least 3 failures, and it has seen 1: the advised interval "
                         "would be uncertain by about ±50%. To advise anyway, give one: logbook ckpt-interval --mtbf 3.1h."]


def test_advice_from_a_run_without_failures_needs_a_given_mtbf():
    events = [_ev("run_started", "00:00:00"), _ev("checkpoint_saved", "00:10:00", step=10, blocking_s=2.0)]
    adv = advise_from_run(events)
    assert not adv.complete and adv.young_s is None
    assert any("give one" in n for n in adv.notes)
    given = advise_from_run(events, mtbf_s=7200.0)
    assert given.complete and given.mtbf_source == "given" and given.save_source == "run"
    assert given.young_s == pytest.approx(math.sqrt(2 * 2.0 * 7200.0))


@pytest.mark.parametrize(("seconds", "text"), [(2587.66, "43 min 08 s"), (38.0, "38 s"), (1.5, "1.5 s"),
                                               (7500.0, "2 h 05 min"), (273600.0, "3 d 04 h")])
def test_durations_format_for_people(seconds, text):
    assert format_duration(seconds) == text


def test_command_prints_young_about_43_minutes_with_overheads(cli):
    res = cli("ckpt-interval", "--mtbf", "3.1h", "--save-cost", "5m")
    assert res.exit_code == 0, res.output
    young = next(line for line in res.stdout.splitlines() if line.startswith("Young"))
    assert "43 min 08 s" in young and "expected overhead 24.5%" in young
    assert "Daly" in res.stdout and "39 min 52 s" in res.stdout


def test_command_json_carries_the_figures(cli):
    res = cli("ckpt-interval", "--mtbf", "3.1h", "--save-cost", "5m", "--json")
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["young_s"] == pytest.approx(2587.663, abs=1e-3)
    assert data["daly_fallback"] is False and data["mtbf_s"] == 11160.0


def test_command_says_when_daly_falls_back(cli):
    res = cli("ckpt-interval", "--mtbf", "1m", "--save-cost", "5m")
    assert res.exit_code == 0
    assert "falls back to M" in res.stdout and "falls back" in res.stderr


@pytest.mark.parametrize("args", [("--mtbf", "3.1", "--save-cost", "5m"), ("--mtbf", "soon", "--save-cost", "5m"),
                                  ("--mtbf", "3.1h")])
def test_command_refuses_bad_or_missing_durations_with_exit_2_and_an_example(cli, args):
    res = cli("ckpt-interval", *args)
    assert res.exit_code == 2
    assert "Traceback" not in res.output
    assert "hint:" in res.stderr and ("5m" in res.stderr or "1h30m" in res.stderr)


def _logged_run(repo, run_id, events):
    from logbook.eventlog.runlog import RunLog

    log = RunLog(repo / "entries" / "runs" / run_id / "events.jsonl")
    for kind, step, data in events:
        log.append({"run": run_id, "attempt": 1, "rank": 0, "step": step, "tokens": None, "kind": kind,
                    "drill": False, "data": data})


def test_command_measures_the_save_cost_from_a_run_and_takes_the_given_mtbf(logbook_repo, cli):
    _logged_run(logbook_repo, "r1", [("run_started", 0, {}), ("checkpoint_saved", 10, {"blocking_s": 2.0}),
                                     ("checkpoint_saved", 20, {"blocking_s": 4.0})])
    res = cli("ckpt-interval", "--run", "r1", "--mtbf", "2h", "--json")
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["save_s"] == 3.0 and data["save_source"] == "run" and data["mtbf_source"] == "given"
    assert data["young_s"] == pytest.approx(math.sqrt(2 * 3.0 * 7200))


def test_command_refuses_a_run_without_failures_when_no_mtbf_is_given(logbook_repo, cli):
    _logged_run(logbook_repo, "r2", [("run_started", 0, {}), ("checkpoint_saved", 10, {"blocking_s": 2.0})])
    res = cli("ckpt-interval", "--run", "r2")
    assert res.exit_code == 3
    assert "No failures yet" in res.stderr and "--mtbf" in res.stderr


def test_command_refuses_an_unknown_run(logbook_repo, cli):
    res = cli("ckpt-interval", "--run", "nosuch", "--mtbf", "1h")
    assert res.exit_code == 3 and "unknown run" in res.stderr
