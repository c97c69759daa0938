"""The calibration figure reads at a glance: one panel per measure on its own labelled axis, the level each
measure should reach drawn, and no count printed over a title."""

from __future__ import annotations

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
