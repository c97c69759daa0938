"""The hash-chained log detects deleted, edited and reordered lines and survives torn tails."""

from __future__ import annotations

import json

from logbook.eventlog.chain import ChainedLog, read_log, verify_log


def _log(tmp_path, n=5):
    log = ChainedLog(tmp_path / "events.jsonl")
    for i in range(n):
        log.append({"kind": "note", "run": "r1", "data": {"i": i}})
    return log


def test_intact_log_verifies(tmp_path):
    log = _log(tmp_path)
    assert verify_log(log.path) == []
    recs = read_log(log.path).records
    assert [r["seq"] for r in recs] == [0, 1, 2, 3, 4]
    assert recs[1]["prev"] == recs[0]["hash"]


def test_deleted_line_is_detected(tmp_path):
    log = _log(tmp_path)
    lines = log.path.read_text().splitlines(keepends=True)
    log.path.write_text("".join(lines[:2] + lines[3:]))
    problems = verify_log(log.path)
    assert problems and problems[0].line == 3 and problems[0].kind == "seq_gap"


def test_edited_line_is_detected(tmp_path):
    log = _log(tmp_path)
    lines = log.path.read_text().splitlines(keepends=True)
    rec = json.loads(lines[2])
    rec["data"]["i"] = 99
    lines[2] = json.dumps(rec) + "\n"
    log.path.write_text("".join(lines))
    problems = verify_log(log.path)
    assert [p.kind for p in problems] == ["edited"]
    assert problems[0].line == 3


def test_reordered_lines_are_detected(tmp_path):
    log = _log(tmp_path)
    lines = log.path.read_text().splitlines(keepends=True)
    lines[1], lines[2] = lines[2], lines[1]
    log.path.write_text("".join(lines))
    assert {p.kind for p in verify_log(log.path)} >= {"seq_gap"}


def test_torn_tail_is_reported_and_never_breaks_a_reader(tmp_path):
    log = _log(tmp_path, 3)
    with open(log.path, "ab") as f:
        f.write(b'{"kind":"restart","run":"r1","da')
    contents = read_log(log.path)
    assert len(contents.records) == 3
    assert [p.kind for p in contents.problems] == ["torn_tail"]
    assert list(log)[-1]["data"] == {"i": 2}


def test_append_after_torn_tail_moves_it_aside_and_chains_on(tmp_path):
    log = _log(tmp_path, 3)
    with open(log.path, "ab") as f:
        f.write(b'{"kind":"restart","run":"r1","da')
    log.append({"kind": "note", "run": "r1", "data": {"i": 3}})
    recs = read_log(log.path).records
    assert [r["kind"] for r in recs] == ["note", "note", "note", "log_repaired", "note"]
    assert verify_log(log.path) == []
    torn = (tmp_path / "events.jsonl.torn").read_bytes()
    assert torn.startswith(b'{"kind":"restart"')
