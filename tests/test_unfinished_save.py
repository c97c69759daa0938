"""A worker killed while a background save was being written: the restart says which checkpoint was unfinished."""

from __future__ import annotations

import pytest
from lab import Lab

from logbook.chronicle.build import render_chronicle
from logbook.core.project import open_project


@pytest.mark.slow
def test_a_kill_during_a_background_save_is_named_in_the_restart_entry(tmp_path):
    lab = Lab.create(tmp_path)
    config = lab.write_config("unfinished.yaml", {
        "model": {"n_layer": 1, "n_head": 2, "n_embd": 32, "block_size": 32},
        "data": {"sources": [{"name": "stdlib", "kind": "stdlib", "max_mb": 0.5}]},
        "train": {"steps": 8, "batch_size": 4, "eval_every": 10, "eval_batches": 2, "threads": 1},
        "checkpoint": {"every": 5, "keep": 2, "background": True},
        "faults": [{"kind": "sigkill", "step": 5, "when": "save", "attempt": 1}]})
    res = lab.logbook("run", str(config), "--exploratory", "--run-id", "unfinished", "--max-restarts", "1")
    assert res.returncode == 0, res.stderr[-3000:]
    (restart,) = [e for e in lab.events("unfinished") if e["kind"] == "restart"]
    d = restart["data"]
    assert d["resumed_from_step"] == 0 and d["unfinished_checkpoint_step"] == 5
    said = "the checkpoint of step 5 was still being written when the worker died; resumed from step 0"
    assert said in res.stderr  # the console's restart line
    rendered = render_chronicle(open_project(lab.root))
    text = "\n".join(p.read_text() for p in [*rendered.written, *rendered.unchanged])
    assert "The checkpoint of step 5 was still being written when the worker died; resumed from step 0" in text
