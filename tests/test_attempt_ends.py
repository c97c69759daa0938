"""How an earlier attempt ended and what it cost, read from what it left (`logbook.runs.attempt_ends`)."""

from __future__ import annotations

import json

from logbook.core.project import open_project
from logbook.runs.attempt_ends import (Heartbeat, RunHistory, classify_restart, heartbeat_path, last_signs,
                                       metrics_tail, peer_lost, read_heartbeat, restart_cost)

TS = "2026-11-30T00:00:0{}.000000Z"


def test_a_collective_broken_by_a_dead_peer_is_told_apart_from_a_real_exception():
    assert peer_lost({"exception_type": "RuntimeError", "exception_message": "Read error: Connection reset by peer."})
    assert not peer_lost({"exception_type": "RuntimeError", "exception_message": "shape mismatch"})
    assert not peer_lost({"exception_type": "InjectedFault", "exception_message": "Connection reset by peer"})


def test_a_hang_that_broke_rank_0s_collective_is_a_hang_not_a_lost_peer():
    """Rank 0's watchdog fired, then its collective broke as the rank that hung exited: the hang is the cause."""
    events = [{"kind": "run_started", "attempt": 1, "step": 0, "ts": TS.format(0), "data": {}},
              {"kind": "hang", "attempt": 1, "step": 6, "ts": TS.format(5), "data": {"elapsed_s": 4.8}},
              {"kind": "attempt_failed", "attempt": 1, "step": 6, "ts": TS.format(6),
               "data": {"exception_type": "RuntimeError",
                        "exception_message": "Connection closed by peer [127.0.0.1]:55486"}}]
    out = classify_restart(RunHistory(events=events), 1, 4, 1.8e9, {})
    assert out["cause"] == "hang" and "made no progress for 4.8 s" in out["detail"]


def test_the_cost_of_an_end_reads_metrics_heartbeat_and_events_and_the_restart_carries_it():
    started = {"kind": "run_started", "attempt": 1, "step": 0, "ts": TS.format(0), "data": {}}
    saved = {"kind": "checkpoint_saved", "attempt": 1, "step": 4, "ts": TS.format(2), "data": {}}
    t0 = 1_795_996_800.0  # TS.format(0)
    rows = [{"attempt": 1, "step": s, "time": t0 + s * 0.5} for s in range(1, 7)]
    history = RunHistory([started, saved], {"attempt": 1, "step": 9, "time": t0 + 5.0}, rows)
    assert last_signs(history, 1) == (9, t0 + 5.0)  # the heartbeat outlived the last flushed row
    cost = restart_cost(history, 1, 4, t0 + 8.0)
    assert cost == {"failed_at_step": 9, "steps_lost": 5, "downtime_s": 3.0, "seconds_lost": 3.0}
    payload = classify_restart(history, 1, 4, t0 + 8.0, {})
    assert {k: payload[k] for k in cost} == cost and payload["cause"] == "signal"


def test_the_history_of_a_run_is_read_from_where_the_trainer_and_the_workers_left_it(logbook_repo):
    project = open_project(logbook_repo)
    beat = Heartbeat(heartbeat_path(project.state_dir, "r1"))
    beat.beat(2, 17, 1.8e9)
    beat.close()
    assert read_heartbeat(heartbeat_path(project.state_dir, "r1"))["step"] == 17
    history = RunHistory.of_run(project, "r1")
    assert history.last_attempt() == 2 and history.unrecorded_ends(3) == [2]
    assert read_heartbeat(heartbeat_path(project.state_dir, "nothing")) is None


def test_the_metrics_tail_skips_the_cut_first_line_and_a_torn_last_one(tmp_path):
    path = tmp_path / "metrics.jsonl"
    rows = [{"step": s, "attempt": 1} for s in range(100)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"step": 100, "att')
    assert metrics_tail(path) == rows
    tail = metrics_tail(path, max_bytes=200)
    assert tail and tail[-1] == rows[-1] and all(r in rows for r in tail)
    assert metrics_tail(tmp_path / "missing.jsonl") == []
