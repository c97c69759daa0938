"""`logbook calibration`: how often predictions held, per author, over time and per metric."""

from __future__ import annotations

import json
from datetime import datetime, timezone

from conftest import git
from scoring_helpers import make_prereg, project_of, story_clock, story_run  # noqa: F401

from logbook.scoring.calibration import calibration, period_key
from logbook.proof.scorecard import record_outcome


def _two_authors(repo, clock):
    """Ada in October: 2 held, 1 failed. Bo in November: 1 held, 1 failed, 1 inconclusive."""
    project = project_of(repo)
    ada = make_prereg(project, ["loss@final < 4", "restarts@final == 1", "spikes@final == 0"],
                      title="ada run", now=datetime(2026, 10, 5, 9, 0, tzinfo=timezone.utc))
    git(repo, "config", "user.name", "Bo Reviewer")
    git(repo, "config", "user.email", "bo@example.org")
    bo = make_prereg(project, ["loss@final < 4", "val_loss@final < 0.5", "mfu@final > 0.3"],
                     title="bo run", now=datetime(2026, 11, 30, 9, 0, tzinfo=timezone.utc))
    story_run(project, clock, "ada-1", ada)
    story_run(project, clock, "bo-1", bo)
    record_outcome(project, "ada-1")
    record_outcome(project, "bo-1")
    return project


def test_tallies_per_author_month_and_metric_leave_inconclusive_out_of_the_rate(logbook_repo, story_clock):
    cal = calibration(_two_authors(logbook_repo, story_clock))
    assert cal.runs == 2 and cal.run_ids == ["ada-1", "bo-1"]
    assert (cal.overall.confirmed, cal.overall.refuted, cal.overall.inconclusive) == (3, 2, 1)
    assert cal.overall.rate == 3 / 5
    assert (cal.by_author["Ada Tester"].confirmed, cal.by_author["Ada Tester"].refuted) == (2, 1)
    assert cal.by_author["Bo Reviewer"].rate == 1 / 2 and cal.by_author["Bo Reviewer"].inconclusive == 1
    assert list(cal.by_period) == ["2026-10", "2026-11"]
    assert cal.by_metric["loss"].confirmed == 2 and cal.by_metric["mfu"].rate is None


def test_weeks_are_iso_weeks_of_the_preregistration(logbook_repo, story_clock):
    cal = calibration(_two_authors(logbook_repo, story_clock), period="week")
    assert list(cal.by_period) == ["2026-W41", "2026-W49"]
    assert period_key("2027-01-01", "week") == "2026-W53" and period_key("garbage", "month") == "unknown"


def test_provisional_scorecards_and_exploratory_runs_are_not_counted(logbook_repo, story_clock):
    project = project_of(logbook_repo)
    pid = make_prereg(project, ["loss@final < 4"])
    story_run(project, story_clock, "going", pid, finish=False)
    story_run(project, story_clock, "explore", None, exploratory=True)
    record_outcome(project, "going")
    assert calibration(project).runs == 0


def test_the_cli_prints_tables_and_json(logbook_repo, story_clock, cli):
    _two_authors(logbook_repo, story_clock)
    res = cli("calibration")
    assert res.exit_code == 0, res.output
    assert "2 runs, 6 predictions: 3 held, 2 failed, 1 inconclusive; held rate 60%" in res.stdout
    ada = next(line for line in res.stdout.splitlines() if line.startswith("Ada Tester"))
    assert ada.split()[2:] == ["2", "1", "0", "67%"]
    assert "by month" in res.stdout and "2026-11" in res.stdout and "mfu" in res.stdout
    data = json.loads(cli("calibration", "--json", "--period", "week").stdout)
    assert data["overall"]["rate"] == 0.6 and data["by_author"]["Bo Reviewer"]["inconclusive"] == 1
    assert cli("calibration", "--period", "year").exit_code == 2


def test_no_outcomes_yet_says_how_to_get_one(logbook_repo, cli):
    res = cli("calibration")
    assert res.exit_code == 0 and "logbook outcome RUN" in res.stderr and res.stdout == ""


def test_calibration_counts_each_final_scorecards_predictions_once_and_skips_what_is_not_one(monkeypatch):
    """Over scorecards as stored (read through `load_outcome`): a provisional one, one without a list of
    predictions, an entry that is no mapping, a forecast stated twice under one text and a late one each count
    as they should, and the people are grouped by the name before their address."""
    import pytest

    from logbook.core.errors import UsageError
    from logbook.scoring import calibration as cal_mod

    def p(text, status="confirmed", **more):
        return {"text": text, "source": "original", "metric": text.split("@")[0], "status": status, **more}

    cards = {
        "a": {"final": True, "prereg_author": "Ada Lovelace <ada@example.org> <second>", "prereg_created": "2026-11-02T10:00:00Z",
              "predictions": ["not a mapping", p("loss@final < 3"), p("loss@final < 3"), p("spikes@final == 0", "refuted"),
                              p("val_loss@final < 2", late=True)]},
        "b": {"final": False, "prereg_author": "Bo", "predictions": [p("loss@final < 9")]},
        "c": {"final": True, "predictions": "not a list"},
        "d": {"final": True, "prereg_author": None, "prereg_created": None, "predictions": [p("loss@final < 4", "inconclusive")]},
        "e": None,
    }
    monkeypatch.setattr(cal_mod, "list_event_runs", lambda project: list(cards))
    monkeypatch.setattr(cal_mod, "load_outcome", lambda project, run: cards[run])
    cal = cal_mod.calibration(object())
    assert (cal.runs, cal.run_ids, cal.late_count) == (2, ["a", "d"], 1)
    assert (cal.overall.confirmed, cal.overall.refuted, cal.overall.inconclusive) == (1, 1, 1)
    assert {k: v.total for k, v in cal.by_author.items()} == {"Ada Lovelace": 2, "unknown": 1}
    assert {k: v.total for k, v in cal.by_period.items()} == {"2026-11": 2, period_key("", "month"): 1}
    assert {k: v.total for k, v in cal.by_metric.items()} == {"loss": 2, "spikes": 1}
    with pytest.raises(UsageError) as e:
        cal_mod.calibration(object(), period="day")
    assert e.value.message == "period must be month or week, got 'day'"


def test_a_forecast_counts_only_once_decided_or_measured_and_levels_group_to_six_places():
    from logbook.scoring.calibration import Forecasts

    f = Forecasts()
    for p in ({"forecast": "0.8"}, {"forecast": None}, {},
              {"forecast": {"kind": "probability", "p": 0.8}},  # not decided yet
              {"forecast": {"kind": "point", "level": 0.8, "value": 2.0, "lo": 1.0, "hi": 3.0}},  # nothing measured
              {"forecast": {"kind": "probability", "p": 0.7, "brier": 0.09, "outcome": 1}},
              {"forecast": {"kind": "point", "level": 0.8000004, "covered": True, "rel_error": -0.1}},
              {"forecast": {"kind": "point", "level": 0.5, "covered": False, "rel_error": None}}):
        f.add(p)
    assert (f.probability, f.intervals, f.rel_errors) == ([(0.7, 1)], [(0.8, True), (0.5, False)], [-0.1])
