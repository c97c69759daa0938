"""A guard abort is final: torchrun does not restart it, no traceback, one step number everywhere."""

from __future__ import annotations

import re

import pytest
from lab import Lab

from logbook.runs.lineage import run_lineage


@pytest.mark.slow
def test_a_guard_abort_is_not_restarted_and_every_view_names_the_same_step(tmp_path):
    lab = Lab.create(tmp_path)
    config = lab.write_config("abort.yaml", {
        "model": {"n_layer": 1, "n_head": 2, "n_embd": 32, "block_size": 32},
        "data": {"sources": [{"name": "stdlib", "kind": "stdlib", "max_mb": 0.5}]},
        "train": {"steps": 30, "batch_size": 4, "eval_every": 10, "eval_batches": 2, "threads": 1},
        "checkpoint": {"every": 5, "keep": 2, "background": False},
        "guard": {"warmup": 8, "cooldown": 3, "skip_batches": 4, "rollback_steps": 2, "max_rollbacks": 0},
        "faults": [{"kind": "spike", "step": 12}, {"kind": "spike", "step": 18}]})
    res = lab.logbook("run", str(config), "--exploratory", "--run-id", "abort", "--max-restarts", "3")
    err = res.stderr
    assert res.returncode == 5, err[-3000:]
    assert "Traceback" not in err and "ChildFailedError" not in err, err[-3000:]
    events = lab.events("abort")
    assert {e["attempt"] for e in events} == {1}, "an aborted run was restarted"
    assert "was aborted at step" not in err  # no later attempt found the abort and failed again
    assert "failed (exitcode" not in err  # torch's report of the worker's exit repeats what the worker said
    (aborted,) = [e for e in events if e["kind"] == "run_aborted"]
    (failed,) = [e for e in events if e["kind"] == "run_failed"]
    step = aborted["step"]
    assert failed["step"] == step and failed["data"]["status"] == "aborted"
    assert len(re.findall(r"^error: run aborted at step", err, re.M)) == 1 and "RunFailedError" not in err
    said = {int(n) for n in re.findall(r"aborted at step (\d+)", err)}
    assert said == {step}, err[-3000:]
    assert [a.last_step for a in run_lineage(lab.events_path("abort"))] == [step]
