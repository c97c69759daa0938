"""An attempt that dies while starting still leaves the restart of the attempt before it."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import ROOT

from logbook.eventlog.runlog import iter_events

pytestmark = pytest.mark.slow

MICRO = ROOT / "configs" / "micro-test.yaml"


def _launch(repo, *overrides: str) -> int:
    cmd = [sys.executable, "-m", "trainer", "--project", str(repo), "--run", "gap", str(MICRO), "train.steps=12",
           "data.sources=[{name: notes, kind: text, path: corpus.txt}]", *overrides]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=180).returncode


def test_a_start_that_fails_before_announcing_still_records_the_earlier_attempts_end(logbook_repo):
    (logbook_repo / "corpus.txt").write_text("the quick brown fox jumps over the lazy dog. " * 400)
    assert _launch(logbook_repo, "faults=[{kind: sigkill, step: 7}]") != 0  # attempt 1 killed by the drill
    (logbook_repo / "corpus.txt").rename(logbook_repo / "corpus.away")
    assert _launch(logbook_repo) != 0  # attempt 2 fails while building: the data is gone
    (logbook_repo / "corpus.away").rename(logbook_repo / "corpus.txt")
    assert _launch(logbook_repo) == 0  # attempt 3 finishes

    evs = list(iter_events(logbook_repo / "entries" / "runs" / "gap" / "events.jsonl"))
    restarts = [e for e in evs if e["kind"] == "restart"]
    assert [(e["data"]["prev_attempt"], e["data"]["next_attempt"]) for e in restarts] == [(1, 2), (2, 3)]
    assert restarts[0]["data"]["cause"] == "signal" and restarts[0]["drill"] is True
    assert restarts[1]["data"]["cause"] == "exception"
