"""Every check of the hash-chained log, pinned as a forger would defeat it.

A forger who can write the file can also run the project's own chain code, so
the interesting edits are not the clumsy ones: a line edited with its own hash
recomputed (only the next line's `prev` notices), a log re-chained from the
edit onwards that still skips a `seq`, a field the hash might forget (the
timestamp), a record with no `hash` at all. Each test names the line and the
kind of problem a reader relies on; none compares whole sentences.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import time
from datetime import datetime, timezone

import pytest

from logbook.eventlog.chain import (GENESIS, ChainedLog, LogContents, Problem, canonical, iter_records, read_log,
                                   record_hash, utc_now, verify_log)


def _log(tmp_path, n=5, **fields):
    log = ChainedLog(tmp_path / "events.jsonl")
    for i in range(n):
        log.append({"kind": "note", "run": "r1", **fields, "data": {"i": i}})
    return log


def _lines(log) -> list[dict]:
    return [json.loads(x) for x in log.path.read_text("utf-8").splitlines()]


def _write(log, recs: list[dict]) -> None:
    log.path.write_text("".join(canonical(r) + "\n" for r in recs), "utf-8")


def _rechain(recs: list[dict], start: int = 0, *, renumber: bool = False) -> list[dict]:
    """What a forger with the project's code does: recompute `prev` and `hash` from `start` on."""
    out = [dict(r) for r in recs]
    for i in range(start, len(out)):
        if renumber:
            out[i]["seq"] = i
        out[i]["prev"] = out[i - 1]["hash"] if i else GENESIS
        out[i]["hash"] = record_hash(out[i])
    return out


def _kinds(log) -> list[tuple[int, str]]:
    return [(p.line, p.kind) for p in verify_log(log.path)]


# --- the hash: what it covers and how it is spelled ---------------------------------------------

def test_the_hash_is_sha256_of_the_canonical_json_without_the_hash_field():
    rec = {"b": 1, "a": "é", "hash": "whatever"}
    assert canonical(rec) == '{"a":"é","b":1,"hash":"whatever"}'  # sorted, compact, UTF-8 as is
    assert record_hash(rec) == hashlib.sha256('{"a":"é","b":1}'.encode("utf-8")).hexdigest()


def test_canonical_json_refuses_nan_so_no_two_spellings_hash_alike():
    with pytest.raises(ValueError):
        canonical({"x": float("nan")})


@pytest.mark.parametrize("field, value", [
    ("ts", "2020-01-01T00:00:00.000000Z"),  # a backdated line
    ("v", 2),
    ("kind", "run_finished"),
    ("run", "r2"),
    ("data", {"i": 99}),
    ("seq", 7),
    ("prev", "f" * 64),
])
def test_every_field_is_under_the_hash_an_edit_of_any_is_named_with_its_line_seq_and_kind(tmp_path, field, value):
    log = _log(tmp_path)
    recs = _lines(log)
    recs[2][field] = value
    _write(log, recs)
    problems = verify_log(log.path)
    edited = [p for p in problems if p.kind == "edited"]
    assert [p.line for p in edited] == [3]
    assert "line 3 " in edited[0].message and "edited" in edited[0].message
    assert f"seq {recs[2]['seq']}" in edited[0].message and recs[2]["kind"] in edited[0].message


def test_a_line_written_to_disk_is_its_canonical_json_and_one_newline(tmp_path):
    log = ChainedLog(tmp_path / "events.jsonl")
    full = log.append({"kind": "note", "data": {"text": "naïve ✓", "z": 1, "a": 2}})
    assert log.path.read_bytes() == (canonical(full) + "\n").encode("utf-8")
    assert "naïve ✓" in log.path.read_text("utf-8")


def test_a_record_that_cannot_be_hashed_is_reported_as_edited_not_raised(tmp_path):
    log = _log(tmp_path, 3)
    lines = log.path.read_text().splitlines(keepends=True)
    rec = json.loads(lines[1])
    rec["data"] = {"loss": float("nan")}  # json reads NaN; canonical JSON cannot spell it
    lines[1] = json.dumps(rec) + "\n"
    log.path.write_text("".join(lines))
    assert _kinds(log) == [(2, "edited")]


def test_lines_appended_by_hand_with_a_seq_but_no_prev_or_hash_are_each_edited_and_off_the_chain(tmp_path):
    log = _log(tmp_path, 2)
    with open(log.path, "a") as f:
        f.write('{"kind":"run_finished","seq":2}\n{"kind":"outcome","seq":3}\n')
    assert _kinds(log) == [(3, "edited"), (3, "broken_chain"), (4, "edited"), (4, "broken_chain")]


def test_a_forged_last_line_with_no_hash_and_a_nan_is_reported(tmp_path):
    log = _log(tmp_path, 3)
    last = _lines(log)[-1]
    forged = {"v": 1, "ts": utc_now(), "kind": "run_finished", "run": "r1", "data": {"loss": float("nan")},
              "seq": last["seq"] + 1, "prev": last["hash"]}
    with open(log.path, "a") as f:
        f.write(json.dumps(forged) + "\n")
    assert (4, "edited") in _kinds(log)


def test_a_forged_line_with_a_nan_and_an_empty_hash_is_edited(tmp_path):
    """No hash can be computed over a NaN, so not even an empty stored hash may stand for it."""
    log = _log(tmp_path, 3)
    last = _lines(log)[-1]
    forged = {"v": 1, "ts": utc_now(), "kind": "run_finished", "run": "r1", "data": {"loss": float("nan")},
              "seq": last["seq"] + 1, "prev": last["hash"], "hash": ""}
    with open(log.path, "a") as f:
        f.write(json.dumps(forged) + "\n")
    assert _kinds(log) == [(4, "edited")]


# --- the chain: seq and prev -------------------------------------------------------------------

def test_an_appended_log_starts_at_genesis_and_each_line_names_the_one_before(tmp_path):
    log = _log(tmp_path, 3)
    recs = _lines(log)
    assert recs[0]["prev"] == "0" * 64 and recs[0]["seq"] == 0 and recs[0]["v"] == 1
    assert [r["seq"] for r in recs] == [0, 1, 2]
    assert [r["prev"] for r in recs[1:]] == [r["hash"] for r in recs[:-1]]
    assert all(r["hash"] == record_hash(r) for r in recs)
    contents = read_log(log.path)
    assert contents.intact and contents.problems == [] and contents.records == recs


def test_a_line_edited_with_its_own_hash_recomputed_breaks_the_chain_at_the_next_line(tmp_path):
    log = _log(tmp_path)
    recs = _lines(log)
    recs[2]["data"] = {"i": 99}
    recs[2]["hash"] = record_hash(recs[2])
    _write(log, recs)
    problems = verify_log(log.path)
    assert [(p.line, p.kind) for p in problems] == [(4, "broken_chain")]
    assert "line 4 " in problems[0].message and "seq 3" in problems[0].message
    assert not read_log(log.path).intact


def test_a_first_line_that_does_not_start_at_genesis_breaks_the_chain(tmp_path):
    log = _log(tmp_path, 2)
    recs = _lines(log)
    recs[0]["prev"] = "1" * 64
    recs[0]["hash"] = record_hash(recs[0])
    _write(log, _rechain(recs, 1))
    assert _kinds(log) == [(1, "broken_chain")]


def test_a_line_dropped_and_the_rest_rechained_is_one_seq_gap_at_the_line_after_it(tmp_path):
    log = _log(tmp_path, 6)
    recs = _lines(log)
    forged = _rechain(recs[:2] + recs[3:], 2)
    _write(log, forged)
    problems = verify_log(log.path)
    assert [(p.line, p.kind) for p in problems] == [(3, "seq_gap")]  # counting resumes from the seq found
    assert "line 3" in problems[0].message and "expected seq 2, found 3" in problems[0].message


def test_a_line_dropped_without_rechaining_is_one_seq_gap_not_a_chain_break_too(tmp_path):
    log = _log(tmp_path, 5)
    recs = _lines(log)
    _write(log, recs[:1] + recs[2:])
    assert _kinds(log) == [(2, "seq_gap")]


def test_a_duplicated_line_is_a_seq_gap(tmp_path):
    log = _log(tmp_path, 3)
    recs = _lines(log)
    _write(log, recs[:2] + recs[1:])
    assert _kinds(log) == [(3, "seq_gap")]


def test_a_seq_that_is_not_a_number_is_a_gap_and_counting_goes_on_from_the_line_before(tmp_path):
    log = _log(tmp_path, 5)
    recs = _lines(log)
    recs[2]["seq"] = "2"
    _write(log, _rechain(recs, 2))
    assert _kinds(log) == [(3, "seq_gap")]


def test_a_rechained_and_renumbered_log_is_beyond_what_the_chain_alone_can_see(tmp_path):
    """The limit the history check exists for: a whole log recomputed is a consistent log."""
    log = _log(tmp_path, 5)
    recs = _lines(log)
    _write(log, _rechain(recs[:2] + recs[3:], renumber=True))
    assert verify_log(log.path) == []


# --- damaged lines and torn tails -----------------------------------------------------------------

@pytest.mark.parametrize("junk", [b"not json\n", b"[1, 2]\n", b"5\n", b"\xff\xfe\n"])
def test_a_line_that_is_not_a_record_is_named_and_the_lines_after_it_are_still_read(tmp_path, junk):
    log = _log(tmp_path, 4)
    lines = log.path.read_bytes().splitlines(keepends=True)
    log.path.write_bytes(b"".join(lines[:2] + [junk] + lines[2:]))
    contents = read_log(log.path)
    assert [(p.line, p.kind) for p in contents.problems] == [(3, "bad_line")]
    assert "line 3 " in contents.problems[0].message
    assert [r["data"]["i"] for r in contents.records] == [0, 1, 2, 3]
    assert [r["data"]["i"] for r in iter_records(log.path)] == [0, 1, 2, 3]


def test_a_torn_tail_is_named_with_its_line_and_size_and_kept(tmp_path):
    log = _log(tmp_path, 3)
    torn = b'{"kind":"restart","run":"r1","da'
    with open(log.path, "ab") as f:
        f.write(torn)
    contents = read_log(log.path)
    assert contents.torn_tail == torn
    assert [(p.line, p.kind) for p in contents.problems] == [(4, "torn_tail")]
    assert "line 4 " in contents.problems[0].message and f"({len(torn)} bytes)" in contents.problems[0].message
    assert [r["data"]["i"] for r in iter_records(log.path)] == [0, 1, 2]


def test_an_edit_in_the_middle_is_not_mistaken_for_a_torn_tail(tmp_path):
    log = _log(tmp_path, 4)
    data = log.path.read_bytes()
    cut = data.index(b"\n") + 1
    log.path.write_bytes(data[:cut] + data[cut + 5:])  # five bytes gone from line 2
    contents = read_log(log.path)
    assert contents.torn_tail == b""
    assert [(p.line, p.kind) for p in contents.problems] == [(2, "bad_line"), (3, "seq_gap")]


def test_the_next_append_moves_a_torn_tail_aside_and_chains_a_repair_record_in_its_place(tmp_path):
    log = ChainedLog(tmp_path / "events.jsonl")
    for i in range(2):
        log.append({"kind": "note", "run": "r1", "attempt": 2, "rank": 1, "data": {"i": i}})
    torn = b'{"kind":"restart","run":"r1","da'
    with open(log.path, "ab") as f:
        f.write(torn)
    new = log.append({"kind": "note", "run": "r1", "attempt": 2, "rank": 1, "other": "x", "data": {"i": 2}})
    recs = _lines(log)
    repair = recs[2]
    assert repair["kind"] == "log_repaired"
    assert repair["data"] == {"torn_bytes": len(torn), "saved_to": "events.jsonl.torn"}
    assert (repair["run"], repair["attempt"], repair["rank"]) == ("r1", 2, 1) and "other" not in repair
    assert (repair["seq"], repair["prev"]) == (2, recs[1]["hash"])
    assert new == recs[3] and (new["seq"], new["prev"]) == (3, repair["hash"])
    assert (tmp_path / "events.jsonl.torn").read_bytes() == torn + b"\n"
    assert verify_log(log.path) == []
    # A second tear is added to the same file, not written over the first.
    with open(log.path, "ab") as f:
        f.write(b'{"second')
    log.append({"kind": "note", "data": {"i": 4}})
    assert (tmp_path / "events.jsonl.torn").read_bytes() == torn + b"\n" + b'{"second\n'
    assert verify_log(log.path) == []


def test_a_log_that_is_only_a_torn_line_is_repaired_from_genesis(tmp_path):
    log = ChainedLog(tmp_path / "events.jsonl")
    log.path.write_bytes(b'{"kind":"no')
    log.append({"kind": "note"})
    recs = _lines(log)
    assert [(r["kind"], r["seq"]) for r in recs] == [("log_repaired", 0), ("note", 1)]
    assert recs[0]["prev"] == GENESIS and "run" not in recs[0]
    assert verify_log(log.path) == []


# --- appending: what a caller is given back, where and how it is written ---------------------------

def test_append_returns_the_completed_record_as_written(tmp_path):
    log = ChainedLog(tmp_path / "a" / "b" / "events.jsonl")  # folders made as needed
    first = log.append({"kind": "note", "data": {}})
    second = log.append({"kind": "note", "data": {}, "hash": "forged", "seq": 40, "prev": "x"})
    assert _lines(log) == [first, second]
    assert (second["seq"], second["prev"]) == (1, first["hash"])  # the log decides these, not the caller
    assert second["hash"] == record_hash(second) and list(second)[-1] == "hash"
    assert set(first) == {"v", "ts", "kind", "data", "seq", "prev", "hash"}


def test_the_log_file_is_made_with_the_mode_the_umask_allows(tmp_path):
    old = os.umask(0o022)
    try:
        log = ChainedLog(tmp_path / "events.jsonl")
        log.append({"kind": "note"})
    finally:
        os.umask(old)
    assert stat.S_IMODE(log.path.stat().st_mode) == 0o644


def test_timestamps_are_utc_with_microseconds_whatever_the_local_zone(monkeypatch):
    monkeypatch.setenv("TZ", "Asia/Kolkata")  # +05:30: a local time would be hours off
    time.tzset()
    try:
        ts = utc_now()
    finally:
        monkeypatch.undo()
        time.tzset()
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", ts), ts
    when = datetime.strptime(ts, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc)
    assert abs((datetime.now(timezone.utc) - when).total_seconds()) < 60


def test_a_missing_log_reads_as_empty_and_intact(tmp_path):
    path = tmp_path / "none.jsonl"
    contents = read_log(path)
    assert contents.records == [] and contents.problems == [] and contents.intact and contents.torn_tail == b""
    assert list(iter_records(path)) == [] and verify_log(path) == []
    assert list(ChainedLog(path)) == [] and ChainedLog(path).read().records == []


def test_a_log_object_reads_and_iterates_what_it_wrote(tmp_path):
    log = _log(tmp_path, 3)
    assert [r["data"]["i"] for r in log] == [0, 1, 2]
    assert log.read().records == _lines(log)
    assert isinstance(log.read(), LogContents) and LogContents(problems=[Problem(1, "edited", "x")]).intact is False
