"""The event registry, the templates, the code's kind names and docs/events.md agree; strict mode catches bad events."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from logbook.eventlog.kinds import (
    KINDS, STRICT_ENV, Event, EventSchemaError, changes_lr, kinds_where, reference_markdown,
    restart_cause, summary,
)
from logbook.eventlog.sink import EventSink

ROOT = Path(__file__).resolve().parents[1]


def test_docs_events_md_is_generated_from_the_registry():
    on_disk = (ROOT / "docs" / "events.md").read_text(encoding="utf-8")
    assert on_disk == reference_markdown(), "docs/events.md is stale: python3 -m logbook.eventlog.kinds > docs/events.md"
    for name in KINDS:
        assert f"## `{name}`" in on_disk


def test_every_per_kind_template_names_a_registered_kind():
    templates = sorted((ROOT / "templates" / "chronicle" / "kinds").glob("*.md.j2"))
    assert templates
    for path in templates:
        name = path.name.removesuffix(".md.j2")
        assert name == "_generic" or name in KINDS, f"{path.name} describes no registered kind"


def _kind_literals(tree: ast.AST) -> set[str]:
    """String literals the code compares an event's kind with, or emits, or asks `of_kind` or `is_kind` for."""
    def is_kind(node: ast.AST) -> bool:
        if isinstance(node, ast.Name):
            return node.id == "kind"
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
            return bool(node.args) and isinstance(node.args[0], ast.Constant) and node.args[0].value == "kind"
        if isinstance(node, ast.Subscript):
            return isinstance(node.slice, ast.Constant) and node.slice.value == "kind"
        return False

    def strings(node: ast.AST) -> list[str]:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return [node.value]
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return [s for e in node.elts for s in strings(e)]
        return []

    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(is_kind(s) for s in sides):
                found.update(s for side in sides for s in strings(side))
        elif isinstance(node, ast.Call) and node.args:
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
            if name in ("emit", "of_kind", "is_kind"):
                found.update(s for a in node.args for s in strings(a))
    return found


# `kind` also names things that are not events: faults, forecast and deviation kinds.
_NOT_EVENT_KINDS = {"unknown", "point", "probability", "trajectory", "live_change", "off_plan", "config", "amendment",
                    "code", "deviation", "sigkill", "spike", "nan", "kill", "corrupt_checkpoint", "exception", "oom",
                    "hang_rank", "stall", "sigterm", "slow_rank", "disk_full", "crash_on_save", "abort", "skip",
                    "lr_scale", "skip_update", "skip_batches", "lr_mul", "lr_pct", "lr_half", "derived", "record",
                    "log", "nonfinite", "log_torn_tail", "stray", "snapshot_unknown",
                    # verify's findings about third-party stamps (logbook/trust/stamp_proof.py), not events
                    "stamp_orphan", "stamp_invalid", "stamped_after_run", "stamp_missing", "stamps_after_run", "unproven_tail",
                    "stamp_before_event"}


def test_every_kind_the_code_names_is_registered():
    unregistered: dict[str, list[str]] = {}
    for folder in ("logbook", "trainer"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for kind in _kind_literals(ast.parse(path.read_text(encoding="utf-8"))):
                if kind not in KINDS and kind not in _NOT_EVENT_KINDS and kind.isidentifier():
                    unregistered.setdefault(kind, []).append(str(path.relative_to(ROOT)))
    assert not unregistered, f"kinds named in code but not in logbook/eventlog/kinds.py: {unregistered}"


def test_flags_answer_the_readers_questions():
    assert set(kinds_where(terminal=True)) == {"run_finished", "run_failed", "run_aborted", "run_stopped"}
    assert kinds_where(afterwards=True) == ("outcome",)
    assert "restart" in kinds_where(incident=True) and "restart" in kinds_where(reviewable=True)
    assert set(kinds_where(lr_change=True)) == {"lr_scaled", "hparam_change"}
    assert changes_lr({"kind": "lr_scaled", "data": {"old": 1.0, "new": 0.5}})
    assert changes_lr({"kind": "hparam_change", "data": {"key": "lr", "new": 1e-4}})
    assert not changes_lr({"kind": "hparam_change", "data": {"key": "grad_clip", "new": 0.5}})
    with pytest.raises(TypeError, match="no such event flag"):
        kinds_where(incidnet=True)


def test_restart_cause_says_why_in_words():
    assert restart_cause({"cause": "signal", "signal": -9}) == "killed by signal 9 (SIGKILL)"
    assert restart_cause({"cause": "exception", "exception_type": "OSError"}) == "raised OSError"
    assert restart_cause({"cause": "mystery"}) == "ended without a record of why"
    assert restart_cause({"cause": "exception", "exception_type": "OSError"}, code=lambda t: f"`{t}`") == "raised `OSError`"


@pytest.mark.parametrize("kind", kinds_where(reviewable=True) + kinds_where(incident=True))
def test_every_reviewed_or_reported_kind_has_a_summary_of_its_own(kind):
    assert KINDS[kind].summary is not None, f"{kind} has no one-line summary in logbook/eventlog/kinds.py"
    assert summary({"kind": kind, "step": 3, "attempt": 2, "data": {}}).strip()  # an empty payload still reads


def test_summary_falls_back_to_the_description_then_the_name():
    assert summary({"kind": "note", "data": {}}) == KINDS["note"].description
    assert summary({"kind": "from_next_year", "data": {"x": 1}}) == "from next year"



def test_event_view_tolerates_odd_records():
    e = Event.of({"kind": "restart", "ts": "2026-11-30T03:12:00Z", "step": 5, "attempt": 2, "data": None})
    assert (e.kind, e.data, e.step, e.attempt, e.drill) == ("restart", {}, 5, 2, False)
    assert e.seconds == pytest.approx(1796008320.0)
    odd = Event.of({"kind": 3, "ts": "yesterday", "step": True, "data": 7})
    assert (odd.kind, odd.seconds, odd.step, odd.data) == (None, None, None, {"value": 7})


@pytest.mark.parametrize("kind, data, message", [
    ("thermal_throttle", {}, "'thermal_throttle' is not registered"),
    ("rollback", {"to_step": 3}, "rollback event: required field 'from_step' is missing"),
    ("checkpoint_saved", {"path": "ckpt/1", "bytes": "many"}, "checkpoint_saved event: field 'bytes' should be int"),
    ("hang", {"timeout_s": 60, "colour": "red"}, "hang event: unknown field 'colour'"),
])
def test_strict_sink_refuses_an_event_that_does_not_match_its_kind(tmp_path, monkeypatch, kind, data, message):
    monkeypatch.setenv(STRICT_ENV, "1")
    with pytest.raises(EventSchemaError, match=message):
        EventSink(tmp_path, "r1", attempt=1).emit(kind, step=1, **data)
    assert not (tmp_path / "events.jsonl").exists()


def test_without_strict_mode_any_identifier_kind_is_written(tmp_path, monkeypatch):
    monkeypatch.delenv(STRICT_ENV, raising=False)
    rec = EventSink(tmp_path, "r1", attempt=1).emit("thermal_throttle", step=1, gpu=3)
    assert rec is not None and rec["kind"] == "thermal_throttle" and rec["data"] == {"gpu": 3}


def test_strict_sink_accepts_nonfinite_numbers_and_nulls(tmp_path, monkeypatch):
    monkeypatch.setenv(STRICT_ENV, "1")
    rec = EventSink(tmp_path, "r1", attempt=1).emit("divergence_detected", step=1, metric="loss",
                                                    value=float("nan"), baseline=None, nonfinite=True)
    assert rec is not None and rec["data"]["value"] == "nan"
