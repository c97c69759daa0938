"""Goodput arithmetic on hand-built runs with known answers."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from scoring_helpers import story_clock  # noqa: F401  (a fixture)

from logbook.runs.goodput import goodput_of_run, goodput_report

T0 = datetime(2026, 11, 30, tzinfo=timezone.utc)


def _at(sec: float) -> str:
    return (T0 + timedelta(seconds=sec)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _ev(kind, sec, attempt, step=None, **data):
    return {"v": 1, "kind": kind, "ts": _at(sec), "attempt": attempt, "step": step, "drill": False, "data": data}


def _row(attempt, step, t, **extra):
    return {"attempt": attempt, "step": step, "time": T0.timestamp() + t, **extra}


def _two_attempt_run(*, started_at: bool = True):
    """Attempt 1 starts at 0 s, trains steps 1-15 at 1 s a step, saves at 10, dies at 28 s.

    Attempt 2 starts at 30 s, restores for 3 s, resumes at 10, rolls back 4 steps
    once, saves at 20 and 30, finishes at 62 s.
    """
    s1 = {"started_at": T0.timestamp()} if started_at else {}
    s2 = {"started_at": T0.timestamp() + 30} if started_at else {}
    events = [
        _ev("run_started", 10, 1, 0, resumed_from_step=0, **s1),
        _ev("checkpoint_saved", 22.5, 1, 10, blocking_s=0.5),
        _ev("restart", 40, 2, 10, prev_attempt=1, cause="signal", resumed_from_step=10, failed_at_step=15,
            steps_lost=5, seconds_lost=5.5, downtime_s=2.0),
        _ev("run_started", 40, 2, 10, resumed_from_step=10, restore_s=3.0, **s2),
        _ev("checkpoint_saved", 51.5, 2, 20, blocking_s=0.5),
        _ev("rollback", 55, 2, 24, from_step=24, to_step=20, steps_lost=4),
        _ev("checkpoint_saved", 62, 2, 30, blocking_s=1.0),
        _ev("run_finished", 62, 2, 30, wall_s=62.0),
    ]
    metrics = [_row(1, k, 12 + k if k <= 10 else 12.5 + k, loss=2.0) for k in range(1, 16)]
    metrics += [_row(1, 10, 22.4, data_s=0.1, window_steps=10), _row(1, 15, 27.5, data_s=0.1, window_steps=5)]
    metrics += [_row(2, k, 41 + (k - 10), loss=1.5) for k in range(11, 31)]
    metrics += [_row(2, 20, 51.0, data_s=0.05, window_steps=10), _row(2, 30, 61.0, data_s=0.05, window_steps=10)]
    return events, metrics


def test_goodput_of_a_known_two_attempt_run_is_exact():
    events, metrics = _two_attempt_run()
    rep = goodput_report(events, metrics)
    assert rep.median_step_s == pytest.approx(1.0)
    assert rep.wall_s == pytest.approx(62.0)
    assert rep.startup_s == pytest.approx(12.0 + 8.0)  # 0 -> 12 s; 30 -> 41 s less 3 s of restore
    assert rep.restore_s == pytest.approx(3.0)
    assert rep.checkpoint_save_s == pytest.approx(2.0)
    assert rep.lost_restart_s == pytest.approx(5.5)
    assert rep.lost_rollback_s == pytest.approx(4.0)
    assert rep.downtime_s == pytest.approx(2.0)  # the heartbeat's last sign at 28 s, not the last row at 27.5 s
    assert rep.data_s == pytest.approx(1.0 + 0.5 + 0.5)  # attempt 1's steps 11-15 were lost: not counted twice
    assert rep.productive_s == pytest.approx(62.0 - 38.5)
    assert rep.goodput == pytest.approx(23.5 / 62.0)
    assert (rep.attempts, rep.restarts, rep.rollbacks) == (2, 1, 1)
    assert rep.notes == []


def test_fractions_partition_wall_time():
    rep = goodput_report(*_two_attempt_run())
    fr = rep.fractions()
    assert sum(fr.values()) == pytest.approx(1.0)
    assert fr["productive_s"] == pytest.approx(rep.goodput)
    assert fr["lost_s"] == pytest.approx(9.5 / 62.0)


def test_without_process_starts_the_next_attempt_starts_after_the_downtime():
    events, metrics = _two_attempt_run(started_at=False)
    rep = goodput_report(events, metrics)
    # Attempt 1 counted from its run_started (10 s); attempt 2 from 27.5 s + 2 s.
    assert rep.wall_s == pytest.approx(62.0 - 10.0)
    assert rep.startup_s == pytest.approx(2.0 + (41.0 - 29.5 - 3.0))
    assert rep.downtime_s == pytest.approx(2.0)
    assert any("attempt 1" in n for n in rep.notes)


def test_without_metrics_step_times_come_from_the_saves():
    events = [
        _ev("run_started", 0, 1, 0, resumed_from_step=0, started_at=T0.timestamp()),
        _ev("checkpoint_saved", 12, 1, 10, blocking_s=1.0),
        _ev("checkpoint_saved", 24, 1, 20, blocking_s=1.0),
        _ev("rollback", 25, 1, 20, from_step=20, to_step=10, steps_lost=10),
        _ev("run_finished", 40, 1, 20),
    ]
    rep = goodput_report(events)
    assert rep.median_step_s == pytest.approx(1.2)
    assert rep.startup_s == pytest.approx(0.0)
    assert rep.lost_rollback_s == pytest.approx(12.0)
    assert rep.checkpoint_save_s == pytest.approx(2.0)
    assert rep.goodput == pytest.approx((40.0 - 14.0) / 40.0)


def test_an_empty_log_has_no_goodput_yet():
    rep = goodput_report([])
    assert rep.goodput is None and rep.fractions() == {}
    assert rep.sentence() == "Goodput not known yet."


def test_sentence_names_the_largest_losses_first():
    text = goodput_report(*_two_attempt_run()).sentence()
    assert text.startswith("Goodput 37.9% (badput: start-up 32.3%; progress lost to disruptions 15.3%")


def test_goodput_of_run_reads_the_stored_logs(tmp_path):
    import json

    from logbook.eventlog.runlog import RunLog

    events, metrics = _two_attempt_run()
    log = RunLog(tmp_path / "events.jsonl")
    for e in events:
        rec = {k: e[k] for k in ("kind", "attempt", "step", "drill", "data")}
        log.append({"run": "r1", "rank": 0, "tokens": None, **rec})
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in metrics))
    rep = goodput_of_run(tmp_path)
    # The log stamps its own (current) times, so only what does not depend on them is exact.
    assert rep.attempts == 2 and rep.restarts == 1 and rep.rollbacks == 1
    assert rep.checkpoint_save_s == pytest.approx(2.0) and rep.median_step_s == pytest.approx(1.0)


def test_compile_time_reported_by_run_started_is_its_own_badput():
    events, metrics = _two_attempt_run()
    events[0]["data"]["compile_s"] = 7.0  # attempt 1 compiled from scratch: 0 -> 12 s of start-up
    events[3]["data"]["compile_s"] = 2.0  # attempt 2 loaded the cached kernels
    rep = goodput_report(events, metrics)
    assert rep.compile_s == pytest.approx(9.0)
    assert rep.startup_s == pytest.approx(12.0 + 8.0 - 9.0)
    assert rep.restore_s == pytest.approx(3.0)
    assert rep.productive_s == pytest.approx(62.0 - 38.5)  # carved out of start-up, not added to badput
    assert sum(rep.fractions().values()) == pytest.approx(1.0)
    assert "compiling" in rep.sentence()


def test_compile_time_never_exceeds_the_attempts_start_up():
    events, metrics = _two_attempt_run()
    events[0]["data"]["compile_s"] = 500.0  # a clock gone wrong must not eat productive time
    rep = goodput_report(events, metrics)
    assert rep.compile_s == pytest.approx(12.0) and rep.startup_s == pytest.approx(8.0)
    assert rep.productive_s == pytest.approx(62.0 - 38.5)


def test_goodput_and_what_was_lost_are_one_report_whose_shown_parts_add_up(logbook_repo, story_clock):
    """The report said goodput 75.5 % next to "lost 19.6 %": two sources (a progress note's goodput,
    skipped updates priced only in the report) and the rest unexplained. Now one report, three parts, 100 %."""
    import re

    from scoring_helpers import make_prereg, project_of, story_run

    from logbook.chronicle.report import render_markdown, report_data
    from logbook.runs.facts import load_facts

    project = project_of(logbook_repo)
    story_run(project, story_clock, "story", make_prereg(project, ["spikes@final == 0"]))
    facts = load_facts(project, "story")
    rep = facts.goodput_report()
    # Every category is in the report, the skipped update (one step at 1 s) included, and they add up.
    assert rep.skipped_s == pytest.approx(1.0)
    assert rep.productive_s + rep.lost_total_s + rep.overhead_s == pytest.approx(rep.wall_s)
    # The progress note at step 50 recorded 0.9; the run's goodput is the report's, not the note's.
    assert facts.goodput(None).value == pytest.approx(rep.goodput) != 0.9
    data = report_data(project, "story")
    g, c = data["goodput"], data["compute"]
    assert round((g["value"] + g["lost_share"] + g["overhead_share"]) * 1000) == 1000
    assert c["lost_share"] == g["lost_share"] and c["parts"]["skipped"]["seconds"] == pytest.approx(rep.skipped_s)
    md = render_markdown(project, data, plot_link=None)
    shown = re.search(r"Goodput ([\d.]+)%.*?The rest: ([\d.]+)% lost.*?and ([\d.]+)% of overhead", md, re.S)
    assert shown, md
    assert sum(float(x) for x in shown.groups()) == pytest.approx(100.0)
    assert f"({shown.group(2)}%)" in md.split("**Compute:**", 1)[1].splitlines()[0]  # the summary's "lost" is the same


def test_shown_shares_round_to_tenths_that_sum_to_exactly_100():
    from logbook.runs.goodput import GoodputReport

    rep = GoodputReport(wall_s=100.0, productive_s=75.55, lost_restart_s=19.65, startup_s=4.8)
    assert rep.shares_shown() == {"productive": 0.756, "lost": 0.196, "overhead": 0.048}  # 100.1 rounded one by one
    assert round(sum(v * 1000 for v in rep.shares_shown().values())) == 1000


def test_goodput_parts_still_add_up_when_estimated_losses_exceed_the_wall_time():
    t0 = T0

    def ev(kind, sec, step=None, **data):
        ts = (t0 + timedelta(seconds=sec)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        return {"kind": kind, "ts": ts, "attempt": 1, "step": step, "data": data}

    # Rows one second apart price a skipped step at 1 s; twenty skips in a 5 s run cannot all have cost that.
    events = [ev("run_started", 0, 0, started_at=t0.timestamp()), *[ev("step_skipped", 1, 1) for _ in range(20)]]
    rows = [{"attempt": 1, "step": k, "time": t0.timestamp() + k, "loss": 1.0} for k in range(1, 6)]
    rep = goodput_report(events, rows)
    assert rep.skipped_s < 20 and rep.productive_s >= 0
    assert rep.productive_s + rep.lost_total_s + rep.overhead_s == pytest.approx(rep.wall_s)
    assert any("scaled to fit" in n for n in rep.notes)
