"""Fast checks of the pieces under `logbook compare`, `status` and `stop`: diffing, layout, stop requests."""

from __future__ import annotations

import pytest

from logbook.cli import app  # noqa: F401  (every command registered in its own order before a module below adds one)
from logbook.cli.compare_cmd import markdown, text_lines
from logbook.runs.compare import fmt_value
from logbook.cli.console_cmd import wrap_line
from logbook.core.errors import UsageError
from logbook.launch.change_requests import decode_request, is_stop, new_request, new_stop_request
from logbook.runs.compare import NOT_SET, Comparison, Row, Section, diff_configs, flatten


def test_flatten_makes_dotted_keys_and_keeps_lists_and_empty_sections_as_values():
    assert flatten({"optim": {"lr": 1e-3, "betas": [0.9, 0.95]}, "faults": [], "data": {}}) == {
        "optim.lr": 1e-3, "optim.betas": [0.9, 0.95], "faults": [], "data": {}}


def test_diff_shows_only_differences_and_counts_the_rest():
    a = {"optim.lr": 1e-3, "train.steps": 30, "model.n_layer": 1}
    b = {"optim.lr": 2e-3, "train.steps": 30, "model.n_layer": 1}
    rows, same = diff_configs([a, b])
    assert [(r.key, r.values) for r in rows] == [("optim.lr", [1e-3, 2e-3])]
    assert same == 2
    rows, same = diff_configs([a, b], show_all=True)
    assert [r.key for r in rows] == ["model.n_layer", "optim.lr", "train.steps"] and same == 0


def test_a_key_one_run_lacks_differs_even_from_null():
    rows, _ = diff_configs([{"guard.replay": None}, {}])
    assert [(r.key, r.values) for r in rows] == [("guard.replay", [None, NOT_SET])]


def test_equal_values_of_different_spelling_are_the_same_but_int_and_float_compare_by_json():
    rows, same = diff_configs([{"betas": [0.9, 0.95]}, {"betas": [0.9, 0.95]}, {"betas": [0.9, 0.95]}])
    assert rows == [] and same == 1
    rows, _ = diff_configs([{"x": 1}, {"x": 2}, {"x": 1}])
    assert rows[0].differs and rows[0].values == [1, 2, 1]


def _cmp(runs: list[str], rows: list[Row]) -> Comparison:
    return Comparison(runs=runs, states=["finished"] * len(runs), config_source=["resolved"] * len(runs),
                      sections=[Section("config", rows), Section("final", [Row("loss", [2.25, 2.3125])])],
                      only_differences=True, same_config_keys=7)


def test_text_is_a_table_when_it_fits_and_blocks_with_whole_ids_when_not():
    runs = ["qk-norm-removes-loss-spikes-evidence-from-a-long-run-e3f9", "baseline-77c1"]
    cmp = _cmp(runs, [Row("optim.lr", [0.001, 0.002])])
    wide = text_lines(cmp, None)  # a pipe: full width
    assert f"optim.lr  0.001{' ' * (len(runs[0]) - 5)}  0.002" in wide
    narrow = text_lines(cmp, 60)
    assert "optim.lr" in narrow and f"  {runs[0]}:\n    0.001" in narrow and f"  {runs[1]}: 0.002" in narrow
    shown = [row for line in narrow for row in line.split("\n")]
    assert all(len(row) <= 60 or runs[0] in row for row in shown)  # only an id itself may be wider
    assert "config (differences only; 7 keys the same, --all shows them)" in narrow


def test_identical_configs_say_so():
    assert "config: identical (7 keys)" in text_lines(_cmp(["a", "b"], []), 80)


def test_markdown_escapes_pipes_and_keeps_ids_whole():
    md = markdown(_cmp(["run-a", "run-b"], [Row("data.path", ["a|b", None])]))
    assert "| | `run-a` | `run-b` |" in md
    assert "| data.path | a\\|b | - |" in md


@pytest.mark.parametrize("value, shown", [(None, "-"), (True, "true"), (100000, "100,000"), (0.00123456, "0.001235"),
                                          ([0.9, 0.95], "[0.9, 0.95]"), ("two\nlines", "two lines")])
def test_values_as_cells(value, shown):
    assert fmt_value(value) == shown


def test_prose_wraps_at_spaces_under_its_column_never_inside_a_word():
    text = "rolled back from step 47,390 to 47,000, batches 47,000–47,300 skipped [contingency rule 1]"
    out = wrap_line("05:47:12  a4  step  47,390  ", text, 60)
    lines = out.split("\n")
    assert len(lines) > 1 and all(len(ln) <= 60 for ln in lines)
    assert " ".join(ln.strip() for ln in lines).endswith(text.split("  ")[-1])
    assert all(ln.startswith(" " * 28) for ln in lines[1:])
    words = set(text.split())
    assert all(w in words for ln in lines[1:] for w in ln.split())  # every piece is a whole word
    assert wrap_line("head ", text, None) == "head " + text  # a pipe: one line
    under = wrap_line("x" * 50 + ": ", text, 60).split("\n")  # no room beside the head: the text goes under it
    assert under[0] == "x" * 50 + ":" and all(len(r) <= 60 and r.startswith("    ") for r in under[1:])


def test_a_stop_request_has_no_changes_and_decodes_as_a_stop():
    import json

    req = new_stop_request("r1", None, "Ada <ada@example.org>")
    back = decode_request(json.dumps(req).encode(), "r1")
    assert is_stop(back) and back["changes"] == {} and back["reason"] == "no reason given"
    change = decode_request(json.dumps(new_request("r1", {"lr": 1e-4}, "why", "Ada")).encode(), "r1")
    assert not is_stop(change)


def test_a_request_of_an_unknown_type_is_refused():
    import json

    req = {**new_stop_request("r1", "done", "Ada"), "type": "reboot"}
    with pytest.raises(UsageError, match="unknown `type` 'reboot'"):
        decode_request(json.dumps(req).encode(), "r1")


def test_compare_reads_verdicts_milestones_and_live_changes_from_the_facts(logbook_repo):
    """Two runs written through the event sink; each figure comes from its facts, keyed for the rows."""
    from logbook.core.project import open_project
    from logbook.eventlog.sink import EventSink
    from logbook.runs.compare import compare_runs
    from logbook.runs.run_record import RunRecord, write_run_record

    project = open_project()
    for run, loss, status in (("ra", 2.5, "confirmed"), ("rb", 2.75, "refuted")):
        write_run_record(project, RunRecord(run_id=run, created="2026-11-30T00:00:00Z", config_path="gone.yaml",
                                            config_hash="0" * 64, exploratory=True, overrides=[f"optim.lr={loss / 1000}"]))
        sink = EventSink(project.run_dir(run), run, attempt=1)
        sink.emit("run_started", step=0, total_steps=100)
        sink.emit("milestone", step=50, fraction=0.5, loss=loss, val_loss=loss + 0.25)
        if run == "rb":
            sink.emit("hparam_change", step=60, key="grad_clip", old=1.0, new=0.5, source="live", who="Ada",
                      reason="creeping", request_id="q1")
        sink.emit("run_finished", step=100, final_loss=loss)
        sink.emit("outcome", step=None, predictions=[{"text": "val_loss@final < 2.8", "status": status, "value": loss}])
    cmp = compare_runs(project, ["ra", "rb"])
    rows = {s.title: {r.key: r.values for r in s.rows} for s in cmp.sections}
    assert cmp.config_source == ["as written", "as written"]  # the config file is gone: the overrides alone
    assert rows["config"] == {"override optim.lr": ["0.0025", "0.00275"]}
    assert rows["progress notes"] == {"loss at 50%": [2.5, 2.75], "val_loss at 50%": [2.75, 3.0]}
    assert rows["predictions"] == {"val_loss@final < 2.8": ["confirmed (2.5)", "refuted (2.75)"]}
    assert rows["changes during the run"] == {"grad_clip": [None, "1.0 → 0.5 at step 60"]}
    assert rows["incidents"]["live changes"] == [0, 1]
    assert rows["final"]["state"] == ["finished", "finished"]
    with pytest.raises(UsageError, match="at least two runs"):
        compare_runs(project, ["ra"])
    with pytest.raises(UsageError, match="named twice"):
        compare_runs(project, ["ra", "ra"])
