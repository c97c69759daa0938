"""Fuzzing the event-log reader: damaged logs never crash a reader, and no change goes unnoticed.

A real hash-chained log (events of every shape a run writes, through
`EventSink`) is damaged at random: bytes flipped, inserted or deleted, lines
dropped, duplicated or swapped, the file cut short. Then:

- `read_log`, `iter_records`, `verify_log` and the chronicle's reader never raise;
- when `read_log` reports no problem, it returned the records written, or the
  first of them when whole lines were cut from the end (which `verify` finds
  against the committed copy): a change that alters what the log says is
  always reported;
- a log cut short reads back as a prefix of the records written, with at most
  a torn tail reported;
- the next append repairs a torn tail and chains on, so the log verifies again;
- the readers that interpret a run's history (goodput, the lineage of
  attempts, the restart accounting) take any sequence of events without a crash.
"""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from logbook.eventlog.chain import ChainedLog, iter_records, read_log, verify_log
from logbook.eventlog.sink import EventSink

FUZZ = settings(max_examples=200, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def _write_log(root) -> tuple[bytes, list[dict]]:
    sink = EventSink(root, "fuzz", attempt=1)
    sink.emit("run_started", step=0, tokens=0, config_hash="ab" * 32, world_size=1, config_path="naïve ✓ \"quoted\".yaml")
    sink.emit("checkpoint_saved", step=5, tokens=640, path="/x/step_000005", blocking_s=0.0125, bytes=123456)
    sink.emit("divergence_detected", step=7, metric="loss", value=float("nan"), baseline=2.5, z=1e-300)
    sink.emit("hparam_change", step=8, key="lr", old=1e-3, new=3e-4, reason="#read(\"/etc/passwd\") {{ x }}", source="live")
    sink.emit("restart", step=9, cause="signal", prev_attempt=1, resumed_from_step=5, steps_lost=4)
    sink.emit("run_finished", step=10, final_loss=2.25, val_loss=None, wall_s=12.5)
    return sink.log.path.read_bytes(), read_log(sink.log.path).records


_damage = st.one_of(
    st.tuples(st.just("flip"), st.integers(0, 10**6), st.integers(1, 255)),
    st.tuples(st.just("insert"), st.integers(0, 10**6), st.binary(min_size=1, max_size=8)),
    st.tuples(st.just("delete"), st.integers(0, 10**6), st.integers(1, 40)),
    st.tuples(st.just("drop_line"), st.integers(0, 50), st.just(0)),
    st.tuples(st.just("dup_line"), st.integers(0, 50), st.just(0)),
    st.tuples(st.just("swap_lines"), st.integers(0, 50), st.integers(0, 50)),
    st.tuples(st.just("truncate"), st.integers(0, 10**6), st.just(0)),
)


def _apply(data: bytes, damage: tuple) -> bytes:
    kind, a, b = damage
    if not data:
        return data
    if kind in ("flip", "insert", "delete", "truncate"):
        i = a % (len(data) + 1)
        if kind == "flip":
            i = a % len(data)
            return data[:i] + bytes([data[i] ^ b]) + data[i + 1:]
        if kind == "insert":
            return data[:i] + b + data[i:]
        if kind == "delete":
            return data[:i] + data[i + b:]
        return data[:i]
    lines = data.splitlines(keepends=True)
    i = a % len(lines)
    if kind == "drop_line":
        del lines[i]
    elif kind == "dup_line":
        lines.insert(i, lines[i])
    else:
        j = b % len(lines)
        lines[i], lines[j] = lines[j], lines[i]
    return b"".join(lines)


@FUZZ
@given(st.lists(_damage, min_size=1, max_size=3))
def test_a_damaged_log_never_crashes_a_reader_and_every_change_is_reported(tmp_path_factory, damages):
    root = tmp_path_factory.mktemp("log")
    original, records = _write_log(root)
    data = original
    for d in damages:
        data = _apply(data, d)
    path = root / "events.jsonl"
    path.write_bytes(data)

    contents = read_log(path)
    streamed = list(iter_records(path))
    problems = verify_log(path)
    assert [(p.line, p.kind) for p in problems] == [(p.line, p.kind) for p in contents.problems]
    assert all(isinstance(r, dict) for r in contents.records + streamed)
    if not contents.problems:
        # Only whole lines cut from the end leave the chain intact; `verify` catches those
        # against the committed copy (tests/test_verify.py). Anything else is reported.
        assert contents.records == records[:len(contents.records)], "the log changed and its reader did not notice"
    if data == original:
        assert not contents.problems

    from logbook.eventlog.timeline import torn_tail

    torn_tail("fuzz", path)  # the chronicle's own look at the end of the log


@FUZZ
@given(st.integers(0, 10**6))
def test_a_log_cut_short_reads_as_a_prefix_and_the_next_append_repairs_it(tmp_path_factory, cut):
    root = tmp_path_factory.mktemp("log")
    original, records = _write_log(root)
    path = root / "events.jsonl"
    n = cut % (len(original) + 1)
    path.write_bytes(original[:n])
    contents = read_log(path)
    assert contents.records == records[:len(contents.records)]
    assert len(contents.records) == original[:n].count(b"\n")
    assert [p.kind for p in contents.problems] in ([], ["torn_tail"])

    ChainedLog(path).append({"run": "fuzz", "attempt": 2, "kind": "restart", "data": {"cause": "signal"}})
    after = read_log(path)
    assert after.intact, [p.message for p in after.problems]
    kinds = [r["kind"] for r in after.records]
    assert kinds[:len(contents.records)] == [r["kind"] for r in contents.records]
    assert kinds[-1] == "restart" and kinds.count("log_repaired") == (1 if contents.problems else 0)
    if contents.problems:
        torn = path.with_name(path.name + ".torn").read_bytes()
        assert torn == original[len(b"".join(original.splitlines(keepends=True)[:len(contents.records)])):n] + b"\n"
    json.dumps(after.records)  # still plain JSON throughout


# --- the readers that interpret a run's history -----------------------------------------------

_KINDS = ["run_started", "restart", "checkpoint_saved", "checkpoint_rejected", "checkpoint_failed", "preempted",
          "attempt_failed", "hang", "step_skipped", "rollback", "lr_scaled", "hparam_change", "milestone",
          "fault_injected", "run_finished", "run_failed", "divergence_detected", "log_repaired", "thermal"]
_value = st.one_of(st.none(), st.booleans(), st.integers(-5, 10**6), st.floats(allow_nan=False), st.text(max_size=8))
_event = st.fixed_dictionaries({
    "kind": st.sampled_from(_KINDS),
    "attempt": st.one_of(st.integers(1, 4), st.none(), st.text(max_size=2)),
    "step": st.one_of(st.integers(0, 200), st.none()),
    "seconds": st.floats(0, 10_000, allow_nan=False),
    "data": st.dictionaries(st.sampled_from(["resumed_from_step", "prev_attempt", "cause", "saved_step", "blocking_s",
                                             "from_step", "to_step", "fraction", "wall_s", "downtime_s", "steps_lost"]),
                            _value, max_size=4),
})


def _history(raw: list[dict]) -> list[dict]:
    """Events in log order, timestamped as the sink would, from the drawn fields."""
    from datetime import datetime, timedelta, timezone

    t0 = datetime(2026, 11, 30, tzinfo=timezone.utc)
    out = []
    for i, e in enumerate(sorted(raw, key=lambda e: e["seconds"])):
        ts = (t0 + timedelta(seconds=e["seconds"])).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        out.append({"v": 1, "seq": i, "ts": ts, "run": "fuzz", "rank": 0, "drill": False, "tokens": None,
                    **{k: e[k] for k in ("kind", "attempt", "step", "data")}})
    return out


@FUZZ
@given(st.lists(_event, max_size=25),
       st.lists(st.fixed_dictionaries({"step": st.integers(0, 200), "attempt": st.integers(1, 4),
                                       "loss": st.floats(0, 10), "time": st.floats(1.7e9, 1.8e9)}), max_size=10))
def test_any_run_history_is_read_by_goodput_lineage_and_restart_accounting_without_a_crash(tmp_path_factory, raw, rows):
    from logbook.runs.goodput import goodput_report
    from logbook.runs.lineage import run_lineage
    from logbook.runs.attempt_ends import RunHistory, classify_restart

    events = _history(raw)
    rep = goodput_report(events, rows)
    assert rep.attempts >= 0
    path = tmp_path_factory.mktemp("hist") / "events.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    run_lineage(path)
    history = RunHistory(events, None, rows)
    last = history.last_attempt()
    if last >= 1:
        payload = classify_restart(history, last, 0, 1.8e9, {})
        assert payload["cause"] in ("exception", "preempted", "hang", "signal")
