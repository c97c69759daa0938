"""Committed metrics grow with the run's events, not its steps; full resolution stays outside git."""

from __future__ import annotations

import json

from logbook.eventlog.sink import KeepRule, MetricsWriter, full_metrics_path, read_metrics
from logbook.runs.goodput import _data_seconds


def _row(step: int, attempt: int) -> dict:
    return {"step": step, "attempt": attempt, "loss": 5.0 - step * 1e-4, "time": 1000.0 + step, "window_steps": 1,
            "step_s": 1.0, "data_s": 0.25, "fwd_bwd_s": 0.5}


def _write(tmp_path, steps: int, rule: KeepRule, restart_at: int | None = None):
    run_dir = tmp_path / "entries" / "runs" / "r"
    full = full_metrics_path(tmp_path / ".logbook", "r")
    m = MetricsWriter(run_dir, full_path=full, keep=rule, flush_every=500)
    for step in range(1, steps + 1):
        attempt = 2 if restart_at and step > restart_at else 1
        m.write(_row(step, attempt))
        if step % 1000 == 0:
            m.write({"step": step, "attempt": attempt, "val_loss": 4.0, "time": 1000.0 + step})
    m.close()
    return run_dir, full


def test_the_committed_stream_keeps_about_a_thousand_rows_whatever_the_length(tmp_path):
    sizes = {}
    for steps in (10_000, 100_000):
        run_dir, full = _write(tmp_path / str(steps), steps, KeepRule.for_run(steps, {steps // 2 + 7}))
        committed = read_metrics(run_dir)
        sizes[steps] = (run_dir / "metrics.jsonl").stat().st_size
        assert len([r for r in committed if "loss" in r]) <= 1_002
        assert sum(1 for line in full.read_text().splitlines() if '"loss"' in line) == steps
    assert sizes[100_000] < 1.5 * sizes[10_000]  # ten times the steps, nearly the same bytes in git


def test_exact_steps_evaluations_each_attempts_first_row_and_the_last_step_are_kept(tmp_path):
    run_dir, _ = _write(tmp_path, 5_000, KeepRule.for_run(5_000, {1_234}), restart_at=2_501)
    rows = read_metrics(run_dir)
    steps = {r["step"] for r in rows if "loss" in r}
    assert {1, 1_234, 2_502, 5_000} <= steps  # exact, first of each attempt, the final step
    assert [r["step"] for r in rows if "val_loss" in r] == [1_000, 2_000, 3_000, 4_000, 5_000]
    assert all(s % 5 == 0 or s in (1, 1_234, 2_502) for s in steps)


def test_telemetry_seconds_of_dropped_rows_are_folded_into_the_next_kept_row(tmp_path):
    run_dir, full = _write(tmp_path, 3_000, KeepRule.for_run(3_000))
    full_rows = [json.loads(line) for line in full.read_text().splitlines()]
    assert _data_seconds([], read_metrics(run_dir)) == _data_seconds([], full_rows) == 0.25 * 3_000


def test_without_a_rule_every_row_is_committed(tmp_path):
    m = MetricsWriter(tmp_path)
    for step in range(1, 11):
        m.write(_row(step, 1))
    m.close()
    assert [r["step"] for r in read_metrics(tmp_path)] == list(range(1, 11))


def test_rows_of_any_value_are_written_as_the_event_log_would_spell_them(tmp_path):
    import numpy as np

    from logbook.eventlog.chain import canonical
    from logbook.eventlog.sink import _plain

    row = {"step": 3, "attempt": 1, "loss": float("nan"), "grad_norm": float("inf"), "lr": np.float32(0.5),
           "skipped": True, 7: "seven", "nested": {"a": [1.0, float("-inf")]}, "time": 12.5}
    run_dir = tmp_path / "runs" / "r"
    m = MetricsWriter(run_dir, full_path=tmp_path / "full.jsonl")
    m.write(row)
    row["loss"] = 1.0  # the caller's dict is its own again once written
    m.close()
    want = canonical(_plain(dict(row, loss=float("nan"))))
    assert (run_dir / "metrics.jsonl").read_text() == (tmp_path / "full.jsonl").read_text() == want + "\n"
    assert json.loads(want)["loss"] == "nan" and json.loads(want)["lr"] == 0.5 and json.loads(want)["7"] == "seven"
