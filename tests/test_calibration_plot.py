"""The calibration figure reads at a glance: one panel per measure on its own labelled axis, the level each
measure should reach drawn, and no count printed over a title."""

from __future__ import annotations

import warnings

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


def test_every_panel_has_the_same_look_whatever_it_draws():
    """The figure's house style, read back: sizes, colours, markers, grids, legends and tick labels. A panel that
    loses its style no longer matches the others (and the PDF's other figures)."""
    from matplotlib.colors import to_hex

    cal = _cal()
    cal.forecasts_by["period"] = {"2026-10": Forecasts(intervals=[(0.8, True)]), **cal.forecasts_by["period"]}
    fig = calibration_figure(cal)
    assert tuple(fig.get_size_inches()) == (10, 8) and fig.dpi == 110
    rel, cov, brier, cover = axes = fig.get_axes()
    for ax in axes:
        assert (ax.title.get_fontsize(), ax.xaxis.label.get_fontsize(), ax.yaxis.label.get_fontsize()) == (11, 10, 10)
        assert {t.get_fontsize() for t in ax.get_yticklabels()} == {9}
        assert all(g.get_visible() and g.get_alpha() == 0.3 for g in ax.get_xgridlines() + ax.get_ygridlines())
        assert {t.get_fontsize() for t in ax.texts} == {8}  # the counts
    for ax, colour, marker in ((rel, "#1f4e79", "o"), (cov, "#7f3f98", "s")):
        [diagonal] = [ln for ln in ax.get_lines() if list(ln.get_xdata()) == [0, 1]]
        assert (diagonal.get_linestyle(), diagonal.get_linewidth(), to_hex(diagonal.get_color())) == ("--", 0.8, "#888888")
        for c in ax.containers:
            line, caps, (bars,) = c.lines
            assert (line.get_marker(), to_hex(line.get_color()), line.get_markersize()) == (marker, colour, 5)
            assert to_hex(line.get_markerfacecolor()) in ("#ffffff", colour) and len(caps) == 2
            assert caps[0].get_markersize() == 4 and bars.get_linewidth()[0] == 0.8  # capsize 2 draws caps of 4 points
    for ax, colour, marker, loc in ((brier, "#1f4e79", "o", 1), (cover, "#7f3f98", "s", 4)):
        assert ax.get_legend()._loc == loc and {t.get_fontsize() for t in ax.get_legend().get_texts()} == {8}
        assert {(t.get_rotation(), t.get_ha(), t.get_fontsize()) for t in ax.get_xticklabels()} == {(30, "right", 9)}
        [trend] = [ln for ln in ax.get_lines() if ln.get_label() in ("mean Brier", "observed coverage")]
        assert (trend.get_marker(), trend.get_linestyle(), to_hex(trend.get_color())) == (marker, "-", colour)
        assert (trend.get_markersize(), trend.get_linewidth()) == (5, 1.2)
    [chance] = [ln for ln in brier.get_lines() if ln.get_label().startswith("always")]
    assert (chance.get_linestyle(), chance.get_linewidth(), to_hex(chance.get_color())) == ("--", 0.9, "#888888")
    nominal = [ln for ln in cover.get_lines() if ln.get_label().startswith("nominal")]
    assert [(ln.get_linestyle(), ln.get_linewidth(), ln.get_alpha(), to_hex(ln.get_color())) for ln in nominal] == [
        ("--", 1.0, 0.7, "#7f3f98"), (":", 1.0, 0.7, "#7f3f98")]


def test_a_period_without_a_kind_of_forecast_is_left_out_of_that_panels_line_and_a_panel_with_none_says_so():
    only_intervals = Forecasts(intervals=[(0.8, True), (0.5, False)])
    only_confidence = Forecasts(probability=[(0.7, 1)])
    cal = Calibration(period="week", runs=2, forecasts=Forecasts(intervals=only_intervals.intervals,
                                                                 probability=only_confidence.probability),
                      forecasts_by={"period": {"2026-W48": only_intervals, "2026-W49": only_confidence}})
    _, _, brier, cover = calibration_figure(cal).get_axes()
    [trend] = [ln for ln in brier.get_lines() if ln.get_label() == "mean Brier"]
    assert list(trend.get_xdata()) == [1] and list(trend.get_ydata()) == [pytest.approx(0.09)]
    [shares] = [ln for ln in cover.get_lines() if ln.get_label() == "observed coverage"]
    assert list(shares.get_xdata()) == [0] and list(shares.get_ydata()) == [0.5]
    none = Calibration(period="week", runs=1, forecasts=Forecasts(intervals=[(0.8, True)]),
                       forecasts_by={"period": {"2026-W48": Forecasts(intervals=[(0.8, True)])}})
    _, _, brier, _ = calibration_figure(none).get_axes()
    assert [(t.get_text(), t.get_position()) for t in brier.texts] == [
        ("no forecast with a stated\nconfidence scored yet", (0.5, 0.5))]
    no_points = Calibration(period="week", runs=1, forecasts=Forecasts(probability=[(0.7, 1)]),
                            forecasts_by={"period": {"2026-W48": Forecasts(probability=[(0.7, 1)])}})
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing for the reader's terminal: no legend of nothing
        _, _, _, cover = calibration_figure(no_points).get_axes()
    assert [t.get_text() for t in cover.texts] == ["no point forecast\nscored yet"] and cover.get_legend() is None
