"""Calibration across runs: reliability bins, the Murphy decomposition, coverage, errors, late forecasts, plot."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest
from conftest import git
from scoring_helpers import make_prereg, project_of, story_clock, story_run  # noqa: F401

from logbook.scoring.calibration import bin_index, calibration, murphy, reliability_bins, wilson
from logbook.proof.scorecard import record_outcome

# Four forecasts at 80% (three held) and three at 30% (one held): N = 7, base rate 4/7.
PAIRS = [(0.8, 1), (0.8, 1), (0.8, 0), (0.8, 1), (0.3, 0), (0.3, 1), (0.3, 0)]


def test_confidences_fall_into_ten_equal_bins_closed_below():
    assert [bin_index(p) for p in (0.01, 0.1, 0.3, 0.7, 0.799999, 0.8, 0.95, 0.99)] == [0, 1, 3, 7, 7, 8, 9, 9]


def test_reliability_bins_hold_the_mean_confidence_and_the_observed_frequency():
    b3, b8 = reliability_bins(PAIRS)
    assert (b3.lo, b3.hi, b3.n, b3.mean_forecast, b3.observed) == (0.3, 0.4, 3, pytest.approx(0.3), pytest.approx(1 / 3))
    assert (b8.lo, b8.hi, b8.n, b8.mean_forecast, b8.observed) == (0.8, 0.9, 4, pytest.approx(0.8), 0.75)
    assert b3.few and b8.few  # fewer than 5 in each: drawn hollow, marked "(few)"
    assert reliability_bins([(0.81, 1), (0.89, 0)])[0].mean_forecast == pytest.approx(0.85)


def test_the_murphy_decomposition_matches_hand_computed_values():
    m = murphy(PAIRS)
    # Brier: (3 x 0.04 + 0.64 + 2 x 0.09 + 0.49) / 7 = 1.43 / 7
    assert m.brier == pytest.approx(1.43 / 7)
    # Reliability: (4 x 0.05^2 + 3 x (0.3 - 1/3)^2) / 7 = 1/525
    assert m.reliability == pytest.approx(1 / 525)
    # Resolution: (4 x (3/4 - 4/7)^2 + 3 x (1/3 - 4/7)^2) / 7 = 25/588
    assert m.resolution == pytest.approx(25 / 588)
    # Uncertainty: 4/7 x 3/7 = 12/49
    assert m.uncertainty == pytest.approx(12 / 49) and m.base_rate == pytest.approx(4 / 7)
    # Forecasts within each bin are equal, so the binned decomposition is exact.
    assert m.residual == pytest.approx(0, abs=1e-12)
    assert m.reliability - m.resolution + m.uncertainty == pytest.approx(m.brier)
    # Skill against always stating the base rate 4/7: 1 - (1.43/7) / (12/49) = 1 - 10.01/12
    assert m.skill == pytest.approx(1 - 10.01 / 12)


def test_the_binned_decomposition_reports_its_residual_when_a_bin_mixes_forecasts():
    m = murphy([(0.81, 1), (0.89, 0)])
    # Brier (0.19^2 + 0.89^2) / 2 = 0.4141; one bin: mean 0.85, observed 0.5: reliability 0.35^2 = 0.1225,
    # resolution 0, uncertainty 0.25; residual 0.4141 - 0.3725 = 0.0416.
    assert (m.brier, m.reliability, m.resolution, m.uncertainty) == (
        pytest.approx(0.4141), pytest.approx(0.1225), pytest.approx(0), pytest.approx(0.25))
    assert m.residual == pytest.approx(0.0416)
    assert murphy([]) is None
    assert murphy([(0.8, 1), (0.9, 1)]).skill is None  # every prediction held: no uncertainty to beat


def test_wilson_intervals_match_the_textbook_values():
    lo, hi = wilson(3, 4)  # 3 of 4: 95% Wilson interval 0.3006 to 0.9544
    assert (lo, hi) == (pytest.approx(0.3006, abs=1e-4), pytest.approx(0.9544, abs=1e-4))
    assert wilson(0, 0) is None and wilson(5, 5)[1] == 1.0


BEFORE = datetime(2026, 10, 5, 7, 0, tzinfo=timezone.utc)


def _forecasting_lab(repo, clock):
    """Ada (October) and Bo (November) forecast; Bo adds a late forecast after his run started."""
    from logbook.proof.amend import amend_prereg

    project = project_of(repo)
    ada = make_prereg(project, ["loss@final < 4 (80%)", "val_loss@final < 0.5 (30%)",
                                "val_loss@final ≈ 2.6 [2.4, 2.8] 80%", "spikes@final == 0"],
                      title="ada run", now=BEFORE)
    git(repo, "config", "user.name", "Bo Reviewer")
    git(repo, "config", "user.email", "bo@example.org")
    bo = make_prereg(project, ["loss@final < 3.5 (80%)", "loss ≈ {25%: 4.4 [4.3, 4.6], final: 3.2 [3.1, 3.3]} 50%"],
                     title="bo run", now=datetime(2026, 11, 2, 7, 0, tzinfo=timezone.utc))
    story_run(project, clock, "ada-1", ada)
    story_run(project, clock, "bo-1", bo)
    amend_prereg(project, bo, reason="after seeing the curve", seen="results",
                 predictions=["val_loss@final < 2.6 (90%)", "val_loss@final ≈ 2.5 [2.45, 2.55] 80%"])
    record_outcome(project, "ada-1")
    record_outcome(project, "bo-1")
    return project


def test_calibration_scores_forecasts_per_group_and_keeps_late_ones_apart(logbook_repo, story_clock):
    cal = calibration(_forecasting_lab(logbook_repo, story_clock))
    # On time: Ada 80% held, 30% failed; Bo 80% held.  Brier (0.04 + 0.09 + 0.04) / 3
    assert sorted(cal.forecasts.probability) == [(0.3, 0), (0.8, 1), (0.8, 1)]
    assert cal.forecasts.to_dict()["murphy"]["brier"] == pytest.approx(0.17 / 3)
    # Intervals: Ada's 80% held (2.5 in [2.4, 2.8]); Bo's 50% at 25% held (4.5), at final missed (3.0).
    assert cal.forecasts.coverage() == [
        {"level": 0.5, "n": 2, "covered": 1, "rate": 0.5, "ci": pytest.approx(list(wilson(1, 2))), "few": True},
        {"level": 0.8, "n": 1, "covered": 1, "rate": 1.0, "ci": pytest.approx(list(wilson(1, 1))), "few": True}]
    # Relative errors: Ada -0.1/2.5; Bo +0.1/4.5 and -0.2/3.0.
    e = cal.forecasts.errors()
    assert e["n"] == 3 and e["mean_rel_error"] == pytest.approx((-0.04 + 0.1 / 4.5 - 0.2 / 3) / 3)
    assert e["mean_abs_rel_error"] == pytest.approx((0.04 + 0.1 / 4.5 + 0.2 / 3) / 3)
    by_author = cal.forecasts_by["author"]
    assert sorted(by_author) == ["Ada Tester", "Bo Reviewer"] and by_author["Bo Reviewer"].probability == [(0.8, 1)]
    assert list(cal.forecasts_by["period"]) == ["2026-10", "2026-11"]
    assert sorted(cal.forecasts_by["metric"]) == ["loss", "val_loss"]
    # Late: both of Bo's amended forecasts, in neither the groups nor the held tally.
    assert cal.late_count == 2 and cal.late.probability == [(0.9, 1)] and cal.late.intervals == [(0.8, True)]
    assert cal.overall.total == 7
    assert any("only 3 forecasts with a stated confidence" in w for w in cal.warnings)
    assert any("only 2 intervals at 50%" in w for w in cal.warnings)
    assert any("2 late predictions" in w for w in cal.warnings)


def test_the_calibration_command_prints_scores_warns_and_draws_the_plot(logbook_repo, story_clock, cli, tmp_path):
    _forecasting_lab(logbook_repo, story_clock)
    png = tmp_path / "cal.png"
    res = cli("calibration", "--plot", str(png))
    assert res.exit_code == 0, res.output
    out = " ".join(res.stdout.split())
    assert "Stated confidences: 3 forecasts, Brier 0.057 = reliability" in out
    assert "reliability diagram" in out and "interval coverage" in out and "forecasts by author" in out
    assert "Ada Tester * 2 0.065 1 1/1 4.0%" in out  # Brier (0.04 + 0.09) / 2; |rel| 0.1 / 2.5
    assert "forecasts by month month confidences" in out
    assert "* too few forecasts in this group to say anything about its calibration" in out
    assert "Late forecasts: 2 late predictions, made after their run started, scored apart" in out
    assert "warning: only 3 forecasts with a stated confidence" in " ".join(res.stderr.split())
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    data = json.loads(cli("calibration", "--json").stdout)
    assert data["late"]["count"] == 2 and data["forecasts"]["probability"] == 3
    assert [b["n"] for b in data["forecasts"]["reliability"]] == [1, 2]
    assert cli("calibration", "--plot", str(tmp_path)).exit_code == 2


def test_the_report_scores_the_run_s_forecasts_and_shows_calibration_with_its_plot(logbook_repo, story_clock, cli):
    project = _forecasting_lab(logbook_repo, story_clock)
    assert cli("report", "bo-1").exit_code == 0
    md = (project.entries / "reports" / "bo-1.md").read_text()

    assert "### Forecasts" in md and "## Calibration across runs" in md
    assert "| `loss@final < 3.5 (80%)` | 80% | held | 0.040 | -0.223 |" in md
    assert "| `loss@25% ≈ 4.4 [4.3, 4.6] 50%` (trajectory) | 25 | 4.4 | [4.3, 4.6] 50% | 4.5 | +0.1 | +2.2% | held | 0.3 |" in md
    assert "| `loss@final ≈ 3.2 [3.1, 3.3] 50%` (trajectory) | 100 | 3.2 | [3.1, 3.3] 50% | 3 | -0.2 | -6.7% | **missed** | 0.6 |" in md
    assert "`val_loss@final < 2.6 (90%)` (late, amend-1)" in md and "Late forecasts were made after the run started" in md
    assert "Stated confidences:** 3 forecasts, Brier 0.057" in md and "50% intervals:** 1 of 2 held" in md
    assert "(assets/bo-1/report-calibration.png)" in md.replace("../", "")
    assert (project.assets_dir / "bo-1" / "report-calibration.png").read_bytes()[:4] == b"\x89PNG"
    assert "Warning: only 3 forecasts with a stated confidence" in md


def test_a_forecast_an_older_scorecard_holds_twice_is_counted_once(logbook_repo, story_clock):
    """Before a point forecast that a trajectory also states was merged, its scorecard scored it twice."""
    from scoring_helpers import make_prereg, project_of, story_run

    from logbook.eventlog.files import write_record
    from logbook.scoring.outcome import outcome_records, outcomes_dir
    from logbook.proof.scorecard import record_outcome

    project = project_of(logbook_repo)
    pid = make_prereg(project, ["val_loss ≈ {50%: 4.0 [3.9, 4.1], final: 2.5 [2.4, 2.6]} 80%"])
    story_run(project, story_clock, "story", pid)
    record_outcome(project, "story")
    assert calibration(project).forecasts.intervals == [(0.8, True), (0.8, True)]
    old = outcome_records(project, "story")[-1]
    card = dict(old["scorecard"])
    card["predictions"] = [*card["predictions"], {**card["predictions"][-1], "forecast": dict(card["predictions"][-1]["forecast"])}]
    write_record(outcomes_dir(project, "story"), {"kind": "outcome", "run": "story", "step": old["step"],
                                                   "data": old["data"], "scorecard": card})
    assert len(outcome_records(project, "story")[-1]["scorecard"]["predictions"]) == 3
    assert calibration(project).forecasts.intervals == [(0.8, True), (0.8, True)]


def test_the_mean_log_score_is_the_mean_log_of_what_each_forecast_gave_to_what_happened():
    import math

    from logbook.scoring.calibration import Forecasts

    f = Forecasts(probability=[(0.8, 1), (0.7, 0), (0.6, 1)])
    assert f.to_dict()["mean_log"] == pytest.approx((math.log(0.8) + math.log(0.3) + math.log(0.6)) / 3)
    assert Forecasts().to_dict()["mean_log"] is None


def test_a_wilson_interval_never_leaves_zero_to_one_even_by_a_rounding():
    assert wilson(16, 16)[1] == 1.0 and wilson(0, 27)[0] == 0.0  # where the float formula lands a hair outside


def test_a_bin_or_a_level_is_too_few_to_read_only_below_its_minimum():
    from logbook.scoring.calibration import MIN_BIN, MIN_COVERAGE, Forecasts

    assert [b.few for b in reliability_bins([(0.85, 1)] * MIN_BIN)] == [False]
    assert [b.few for b in reliability_bins([(0.85, 1)] * (MIN_BIN - 1))] == [True]
    assert [r["few"] for r in Forecasts(intervals=[(0.8, True)] * MIN_COVERAGE).coverage()] == [False]
    assert [r["few"] for r in Forecasts(intervals=[(0.8, True)] * (MIN_COVERAGE - 1)).coverage()] == [True]
    assert bin_index(1.0) == 9  # a certainty (never from the grammar) still falls in the top bin
