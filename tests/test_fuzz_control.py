"""Fuzzing live-change requests: random keys, values and request files are applied or cleanly refused.

The CLI side (`validate_changes`, `parse_assignment`) and the file side
(`decode_request`) raise nothing but UsageError. On the trainer side a random
request file in `pending/` is answered and recorded: either applied, or
rejected with an `hparam_change_rejected` event and the config untouched.
"""

from __future__ import annotations

import copy
import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from logbook.core.errors import UsageError
from logbook.launch.change_requests import decode_request, list_pending, read_answer
from logbook.launch.live_settings import SETTINGS, WEIGHTS_PREFIX, parse_assignment
from logbook.eventlog.runlog import iter_events
from logbook.eventlog.sink import EventSink
from trainer.config import TrainConfig, config_to_dict
from logbook.launch.live_channel import ControlChannel

FUZZ = settings(max_examples=150, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

_keys = st.one_of(st.sampled_from([k for k in SETTINGS if not k.endswith("<source>")]),
                  st.sampled_from([WEIGHTS_PREFIX + s for s in ("stdlib", "web", "../x", "", "a b", "é")]),
                  st.text(max_size=20))
_values = st.one_of(st.none(), st.booleans(), st.integers(-10**400, 10**400), st.integers(-3, 10**6),
                    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=20),
                    st.sampled_from(["1e-3", "nan", "inf", "-inf", "0x10", "1_0", " 3 ", "1e999", "", "7.0"]),
                    st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))
_changes = st.one_of(st.dictionaries(_keys, _values, max_size=4), _values)
_request = st.fixed_dictionaries(
    {},
    optional={"v": _values, "request_id": st.one_of(st.text(max_size=10), _values), "run": st.sampled_from(["r1", "r2", ""]),
              "who": st.one_of(st.just("Ada <ada@example.org>"), _values), "reason": st.one_of(st.just("why not"), _values),
              "changes": _changes, "extra": _values},
)
_raw = st.one_of(
    st.binary(max_size=300),
    _request.map(lambda r: json.dumps(r, default=str).encode()),
    _request.map(lambda r: json.dumps(r, default=str).encode()).flatmap(
        lambda b: st.integers(0, len(b)).map(lambda n: b[:n])),  # half-written
)


@FUZZ
@given(_changes)
def test_random_changes_validate_or_are_one_usage_error(changes):
    from logbook.launch.live_settings import validate_changes

    try:
        out = validate_changes(changes)
    except UsageError as e:
        assert e.message
        return
    assert out and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in out.values())


@FUZZ
@given(st.text(max_size=60))
def test_random_command_line_assignments_parse_or_are_one_usage_error(text):
    try:
        key, value = parse_assignment(text)
    except UsageError:
        return
    assert isinstance(value, (int, float)) and key in text


@FUZZ
@given(_raw)
def test_random_request_bytes_decode_or_are_one_usage_error(raw):
    try:
        req = decode_request(raw, "r1")
    except UsageError as e:
        assert e.message
        return
    assert req["run"] == "r1" and req["changes"]


@FUZZ
@given(_raw)
def test_a_random_request_file_is_applied_or_rejected_and_always_answered(tmp_path_factory, raw):
    root = tmp_path_factory.mktemp("ctl")
    control = root / "control" / "r1"
    sink = EventSink(root / "runs" / "r1", "r1", attempt=1)
    cfg = TrainConfig()
    before = copy.deepcopy(config_to_dict(cfg))
    name = "20260101T000000.000000Z-fuzz.json"
    (control / "pending").mkdir(parents=True)
    (control / "pending" / name).write_bytes(raw)
    applied = ControlChannel(control, "r1", cfg, emit=sink.emit, grace_s=0.0).poll(5)
    events = list(iter_events(sink.log.path))
    answer = read_answer(control, name)
    assert list_pending(control) == [] and answer is not None
    if answer["outcome"]["status"] == "rejected":
        assert not applied and config_to_dict(cfg) == before
        assert [e["kind"] for e in events] == ["hparam_change_rejected"]
        assert events[0]["data"]["reason"] == answer["outcome"]["reason"]
    else:
        assert answer["outcome"]["status"] == "applied" and applied
        assert {e["kind"] for e in events} <= {"hparam_change", "lr_scaled"}
