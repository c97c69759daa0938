"""A worker asked to stop says so in its rank mark at once, even from inside a long op, so a restart never counts it as lost."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from conftest import ROOT

# A rank whose mark is open, then one matrix product of several seconds: the main thread
# stays inside torch, as a survivor does inside a collective with a rank that vanished.
_WORKER = """
import sys, time
from pathlib import Path
import torch
from logbook.runs.rankmarks import RankMark
from trainer.components import StopSignals

folder = Path(sys.argv[1])
mark = RankMark(folder, 0)
mark.started(1, {"rank": 0, "node": 0, "local_rank": 0, "host": "here", "pid": 0})
StopSignals(rank_mark=mark).install()
torch.set_num_threads(1)
a = torch.randn(8192, 8192)
print("inside", flush=True)
a @ a
(folder / "op-returned").write_text("")
"""


def test_a_sigterm_that_arrives_inside_a_long_op_marks_the_rank_as_asked_to_stop_before_the_op_returns(tmp_path):
    worker = subprocess.Popen([sys.executable, "-c", _WORKER, str(tmp_path)], cwd=ROOT, stdout=subprocess.PIPE,
                              text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert worker.stdout.readline().strip() == "inside"
        time.sleep(0.3)  # well into the product
        worker.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 3
        mark = json.loads((tmp_path / "rank0.json").read_text())
        while not mark["ended"] and time.monotonic() < deadline:
            time.sleep(0.02)
            mark = json.loads((tmp_path / "rank0.json").read_text())
        returned = (tmp_path / "op-returned").exists()
    finally:
        worker.kill()  # as torchrun's SIGKILL would: the mark must already be there
        worker.wait()
    assert mark["ended"] == "SIGTERM" and mark["attempt"] == 1
    assert not returned, "the product ended first: nothing was shown"
