"""The full wording of a restart, pinned once for every cause: the terminal's line and the registry's summary.

The console (`restart_line`) and every other view (`summary`: lineage, review
queue, chronicle) read the same payload; other tests check the facts in it.
The sentences live in __snapshots__/test_wording_restarts.ambr (`pytest
--snapshot-update` after a deliberate change).
"""

from __future__ import annotations

from logbook.eventlog.kinds import summary
from logbook.launch.watch import restart_line

BASE = {"prev_attempt": 1, "resumed_from_step": 40, "steps_lost": 7, "failed_at_step": 47, "downtime_s": 3.2}
PAYLOADS = {
    "sigkill, no evidence": {"cause": "signal", "signal": 9},
    "sigkill, the kernel counted oom kills": {"cause": "signal", "signal": "SIGKILL", "oom_kills": 2},
    "sigsegv": {"cause": "signal", "signal": 11},
    "an exception": {"cause": "exception", "exception_type": "RuntimeError", "detail": "CUDA error: an illegal memory access"},
    "a peer lost": {"cause": "signal", "signal": 9, "peer_lost": True,
                    "detail": "rank 0 failed in a collective: connection reset by peer"},
    "preempted": {"cause": "preempted"},
    "stopped": {"cause": "stopped"},
    "hang": {"cause": "hang"},
    "an exit code": {"cause": "exit", "exit_code": 3},
    "unknown": {"cause": "unknown"},
    "a cause this registry does not know": {"cause": "cosmic ray"},
    "an unfinished save": {"cause": "signal", "signal": 9, "unfinished_checkpoint_step": 45},
    "from scratch, steps lost unknown": {"cause": "signal", "signal": 9, "resumed_from_step": 0, "steps_lost": None},
    "resume step unknown": {"cause": "exit", "exit_code": 1, "resumed_from_step": None, "steps_lost": None},
}


def _event(payload: dict, *, drill: bool = False) -> dict:
    return {"kind": "restart", "run": "r1", "attempt": 2, "step": payload.get("resumed_from_step", 40),
            "ts": "2026-12-07T10:00:00Z", "drill": drill, "data": {**BASE, **payload}}


def test_every_cause_of_a_restart_reads_in_full_at_the_terminal_and_in_every_other_view(snapshot):
    seen = {name: {"terminal": restart_line(_event(p)), "summary": summary(_event(p))} for name, p in PAYLOADS.items()}
    seen["a drill"] = {"terminal": restart_line(_event({"cause": "signal", "signal": 9}, drill=True)),
                       "summary": summary(_event({"cause": "signal", "signal": 9}, drill=True))}
    assert seen == snapshot
