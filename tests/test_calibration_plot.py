"""The calibration figure reads at a glance: one panel per measure on its own labelled axis, the level each
measure should reach drawn, and no count printed over a title."""

from __future__ import annotations

import pytest

from logbook.scoring.calibration import Calibration, Forecasts
from logbook.scoring.calibration_plot import calibration_figure, write_calibration_plot


def _cal() -> Calibration:
    nov = Forecasts(probability=[(0.9, 1), (0.95, 1), (0.99, 1), (0.7, 0)], intervals=[(0.8, True), (0.8, False)])
    dec = Forecasts(probability=[(0.6, 1), (0.97, 1)], intervals=[(0.8, True), (0.8, True), (0.5, False)])
    both = Forecasts(probability=nov.probability + dec.probability, intervals=nov.intervals + dec.intervals)
    return Calibration(period="month", runs=5, forecasts=both, forecasts_by={"period": {"2026-11": nov, "2026-12": dec}})


def _hlines(ax) -> set[float]:
    return {round(float(line.get_ydata()[0]), 6) for line in ax.get_lines()
            if len(set(map(float, line.get_ydata()))) == 1 and list(line.get_xdata()) == [0, 1]}


def test_each_measure_has_its_own_labelled_panel_and_the_level_it_should_reach():
    fig = calibration_figure(_cal())
    axes = fig.get_axes()
    assert len(axes) == 4
    labels = [ax.get_ylabel() for ax in axes]
    assert all(labels) and len(set(labels)) == 4
    brier, cover = axes[2], axes[3]
    assert "Brier" in brier.get_title() and "lower is better" in brier.get_ylabel()
    assert 0.25 in _hlines(brier)                   # what always saying 50% scores
    assert {0.5, 0.8} <= _hlines(cover)             # each nominal level the intervals were stated at
    assert 0.25 not in _hlines(cover) and not ({0.5, 0.8} & _hlines(brier))


def test_no_count_is_drawn_over_a_panels_title(tmp_path):
    fig = calibration_figure(_cal())
    renderer = fig.canvas.get_renderer()
    fig.draw(renderer)
    for ax in fig.get_axes():
        title = ax.title.get_window_extent(renderer)
        for text in ax.texts:
            assert not text.get_window_extent(renderer).overlaps(title), (ax.get_title(), text.get_text())
    out = write_calibration_plot(_cal(), tmp_path / "cal.png")
    from PIL import Image

    assert Image.open(out).size[0] >= 1000  # readable without zooming


def test_a_calibration_with_nothing_scored_says_so_in_the_middle_of_each_panel():
    from matplotlib.colors import to_hex

    fig = calibration_figure(Calibration(period="month", runs=0, forecasts=Forecasts(), forecasts_by={}))
    said = []
    for ax in fig.get_axes():
        [t] = ax.texts
        assert t.get_position() == (0.5, 0.5) and t.get_transform() is ax.transAxes
        assert (t.get_ha(), t.get_va(), t.get_fontsize(), to_hex(t.get_color())) == ("center", "center", 10, "#888888")
        said.append(t.get_text())
    assert said == ["no forecast with a stated\nconfidence scored yet", "no point forecast\nscored yet",
                    "nothing scored yet", "nothing scored yet"]


def test_the_plot_file_is_a_png_that_names_no_software_so_the_same_scores_give_the_same_bytes(tmp_path):
    a = write_calibration_plot(_cal(), tmp_path / "a.png").read_bytes()
    b = write_calibration_plot(_cal(), tmp_path / "b.png").read_bytes()
    assert a.startswith(b"\x89PNG\r\n\x1a\n") and a == b
    assert b"Software" not in a and b"atplotlib" not in a


def test_the_json_names_each_count_and_each_bins_interval():
    d = _cal().to_dict()
    assert set(d["overall"]) == {"confirmed", "refuted", "inconclusive", "within_tolerance", "total", "rate"}
    [first, *_] = d["forecasts"]["reliability"]
    assert set(first) == {"lo", "hi", "n", "mean_forecast", "observed", "ci", "few"} and len(first["ci"]) == 2


def test_the_plot_is_a_png_with_its_own_sizes_whatever_the_readers_matplotlib_settings(tmp_path):
    import matplotlib

    with matplotlib.rc_context({"savefig.format": "pdf", "font.size": 14}):
        data = write_calibration_plot(_cal(), tmp_path / "a.png").read_bytes()
        fig = calibration_figure(Calibration(period="month", runs=0, forecasts=Forecasts(), forecasts_by={}))
    assert data.startswith(b"\x89PNG")
    assert {t.get_fontsize() for ax in fig.get_axes() for t in ax.texts} == {10}


def _marks(ax) -> list[tuple[float, float, tuple[float, float], bool]]:
    """(x, y, its interval, hollow) of each estimate drawn with its error bar, in drawing order."""
    from matplotlib.colors import to_hex

    out = []
    for c in ax.containers:
        line, _, (bars,) = c.lines
        [[(_, lo), (_, hi)]] = bars.get_segments()
        out.append((float(line.get_xdata()[0]), float(line.get_ydata()[0]), (round(float(lo), 9), round(float(hi), 9)),
                    to_hex(line.get_markerfacecolor()) == "#ffffff"))
    return out


def _counts(ax) -> list[tuple[str, tuple[float, float]]]:
    return [(t.get_text(), tuple(map(float, t.xy))) for t in ax.texts]


def test_the_figure_draws_the_numbers_the_calibration_states_and_no_others():
    """Each panel is read back from the figure and compared with `Calibration`'s own figures (what --json prints):
    estimates, intervals, hollow marks for samples too small, counts, titles, axes and the periods' lines."""
    cal = _cal()
    only_intervals = Forecasts(intervals=[(0.8, False)])
    cal.forecasts_by["period"]["2027-01"] = only_intervals
    cal.forecasts.intervals.append((0.8, False))
    cal.forecasts.probability += [(0.92, 1)] * 5  # enough in one bin, and at one level, to be drawn filled
    cal.forecasts.intervals += [(0.8, True)] * 10
    d = cal.to_dict()["forecasts"]
    rel, cov, brier, cover = calibration_figure(cal).get_axes()

    assert rel.get_title() == "reliability (11 forecasts)" and cov.get_title() == "interval coverage (16 intervals)"
    assert {hollow for *_, hollow in _marks(rel)} == {hollow for *_, hollow in _marks(cov)} == {True, False}
    assert (rel.get_xlabel(), rel.get_ylabel()) == ("stated confidence", "observed frequency")
    assert (cov.get_xlabel(), cov.get_ylabel()) == ("nominal level", "observed coverage")
    assert _marks(rel) == [(b["mean_forecast"], b["observed"], tuple(round(c, 9) for c in b["ci"]), b["few"])
                           for b in d["reliability"]]
    assert [t for t, _ in _counts(rel)] == [f"n={b['n']}" for b in d["reliability"]]
    assert [xy for _, xy in _counts(rel)] == [(b["mean_forecast"], b["observed"]) for b in d["reliability"]]
    assert _marks(cov) == [(r["level"], r["rate"], tuple(round(c, 9) for c in r["ci"]), r["few"])
                           for r in d["coverage"]]
    assert _counts(cov) == [(f"{r['covered']}/{r['n']}", (r["level"], r["rate"])) for r in d["coverage"]]
    for ax in (rel, cov):
        assert ax.get_xlim() == (0, 1) and ax.get_ylim() == (-0.02, 1.12)
        [diagonal] = [ln for ln in ax.get_lines() if list(ln.get_xdata()) == [0, 1]]
        assert list(diagonal.get_ydata()) == [0, 1]

    periods = cal.forecasts_by["period"]
    assert [t.get_text() for t in brier.get_xticklabels()] == list(periods) == ["2026-11", "2026-12", "2027-01"]
    assert list(brier.get_xticks()) == [0, 1, 2] and brier.get_xlim() == (-0.5, 2.5)
    assert (brier.get_title(), brier.get_xlabel()) == ("Brier score by month", "month")
    assert (cover.get_title(), cover.get_ylabel()) == ("interval coverage by month",
                                                        "share of values inside their interval")
    [trend] = [ln for ln in brier.get_lines() if ln.get_label() == "mean Brier"]
    by = cal.to_dict()["forecasts_by"]["period"]
    assert list(trend.get_xdata()) == [0, 1]  # the last period stated no confidence: no point, not a zero
    assert list(trend.get_ydata()) == [by[k]["murphy"]["brier"] for k in ("2026-11", "2026-12")]
    assert _counts(brier) == [("n=4", (0, by["2026-11"]["murphy"]["brier"])), ("n=2", (1, by["2026-12"]["murphy"]["brier"]))]
    [shares] = [ln for ln in cover.get_lines() if ln.get_label() == "observed coverage"]
    assert list(shares.get_xdata()) == [0, 1, 2]
    assert list(shares.get_ydata()) == [by[k]["covered_share"] for k in periods] == [0.5, 2 / 3, 0.0]
    assert [t for t, _ in _counts(cover)] == ["n=2", "n=3", "n=1"]
    # Each count sits beside its mark, inside the panel: left of a mark near the right edge, below one near the top.
    assert [t.xyann for t in rel.texts] == [(-26 if b["mean_forecast"] > 0.9 else 5, -12 if b["observed"] > 0.9 else 4)
                                            for b in d["reliability"]]
    assert {t.xyann for t in rel.texts} >= {(5, 4), (-26, -12)}
    assert {t.xyann for ax in (cov, cover) for t in ax.texts} == {(5, -12)} and {t.xyann for t in brier.texts} == {(5, 4)}
    legends = {ax.get_title(): [t.get_text() for t in ax.get_legend().get_texts()] for ax in (brier, cover)}
    assert legends == {"Brier score by month": ["always 50% (0.25)", "mean Brier"],
                       "interval coverage by month": ["nominal 50%", "nominal 80%", "observed coverage"]}
    assert {ax.get_ylim() for ax in (brier, cover)} == {(-0.02, 1.12)}


def test_a_forecasts_brier_score_and_share_covered_are_its_own_means():
    f = Forecasts(probability=[(0.9, 1), (0.6, 0)], intervals=[(0.8, True), (0.5, False), (0.8, True)])
    assert f.brier == pytest.approx(((0.9 - 1) ** 2 + 0.6 ** 2) / 2) and f.covered_share == pytest.approx(2 / 3)
    assert Forecasts().brier is None and Forecasts().covered_share is None
    assert f.to_dict()["covered_share"] == f.covered_share and Forecasts().to_dict()["covered_share"] is None
