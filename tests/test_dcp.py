"""DCP checkpoints (torch.distributed.checkpoint) of two-rank FSDP2 runs on CPU (gloo).

What the two-rank kill-and-exact-resume and the 2 -> 1 preemption resume
pin is in tests/test_fsdp.py (auto picks DCP there); here: a DCP checkpoint
written by 2 ranks loads into 1 process bit for bit, and an asynchronous save
killed before its seal is never taken as complete.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from runhelpers import events, micro_config, of_kind

from logbook.core.project import open_project
from logbook.launch.launcher import launch_run
from logbook.eventlog.sink import read_metrics
from logbook.core.errors import UsageError
from trainer.checkpoints.checkpoint import (Checkpointer, CorruptCheckpoint, list_checkpoints, read_checkpoint,
                                            seal_dcp, verify_checkpoint)
from trainer.checkpoints.checkpoint_dcp import load_into, read_model, resolve_format, start_save
from trainer.config import config_from_dict, load_train_config
from trainer.job.dist import load_full_state
from trainer.nn.model import GPT
from trainer.nn.optim import build_optimizer

FSDP = ["train.parallel=fsdp"]
ROOT = Path(__file__).resolve().parents[1]


def test_auto_saves_dcp_with_more_than_one_rank_and_an_unknown_format_is_refused():
    assert [resolve_format("auto", n) for n in (1, 2)] == ["torch", "dcp"]
    assert [resolve_format(f, 2) for f in ("torch", "dcp")] == ["torch", "dcp"]
    with pytest.raises(UsageError, match="checkpoint.format"):
        load_train_config(None, ["checkpoint.format=zip"])


def test_a_one_process_start_does_not_import_dcp():
    """About a second of imports every start and restart would pay for a format it does not write."""
    code = "import sys, trainer.startup, trainer.loop, trainer.__main__; print('torch.distributed.checkpoint' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}).stdout
    assert out.strip() == "False"


def test_a_dcp_checkpoint_in_one_process_is_sealed_only_whole_and_checked_like_a_torch_one(tmp_path):
    """One process, no process group: the seal, the manifest check, a stale temp folder, reading it back."""
    saved = []
    ck = Checkpointer(tmp_path, background=True, format="dcp", emit=lambda kind, **kw: saved.append((kind, kw)))
    weights = {"w": torch.arange(6.0).reshape(2, 3)}
    state = {"model": weights, "optim": {"adamw": {"state": {}, "param_groups": []}}, "state": {"step": 3}}
    ck.save(3, state)
    ck.wait()
    assert [k for k, _ in saved] == ["checkpoint_saved"] and [s for s, _ in list_checkpoints(tmp_path)] == [3]
    path = tmp_path / "step_000003"
    assert {".metadata", "state.pt", "__0_0.distcp"} <= set(verify_checkpoint(path)["files"])
    assert _equal(read_model(path), weights) and read_checkpoint(path)["state"] == {"step": 3}
    (tmp_path / ".tmp-step_000006-dcp").mkdir()  # a save whose process died before the seal
    assert ck.clean_stale() == [6] and not (tmp_path / ".tmp-step_000006-dcp").exists()
    # Shards a rank wrote elsewhere (no shared filesystem): the save fails, it is not sealed.
    ck.save(9, state, sync=True)
    assert [s for s, _ in list_checkpoints(tmp_path)] == [3, 9]
    (tmp_path / ".tmp-step_000012-dcp").mkdir()
    start_save({"model": weights}, tmp_path / ".tmp-step_000012-dcp", None, background=False)
    (tmp_path / ".tmp-step_000012-dcp" / "__0_0.distcp").unlink()
    with pytest.raises(OSError, match="__0_0.distcp are not in"):
        seal_dcp(tmp_path, tmp_path / ".tmp-step_000012-dcp", 12, {"step": 12})
    assert [s for s, _ in list_checkpoints(tmp_path)] == [3, 9]
    (path / ".metadata").unlink()
    with pytest.raises(CorruptCheckpoint, match=".metadata is missing"):
        verify_checkpoint(path)
    manifest = json.loads((path / "manifest.json").read_text())
    del manifest["files"][".metadata"]  # shards without DCP's index are no checkpoint either
    (path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CorruptCheckpoint, match="manifest lacks .metadata"):
        verify_checkpoint(path)


def _ckpt_dir(repo, run_id: str):
    return repo / ".logbook" / "checkpoints" / run_id


def _fresh(parts: dict):
    """A plain (unsharded) model and optimizer of the checkpoint's config, as one process builds them."""
    cfg = config_from_dict(json.loads(parts["state"]["config_json"]))
    model = GPT(cfg.model)
    return model, build_optimizer(model, cfg.optim, "cpu")


def _equal(a, b) -> bool:
    """Nested state dicts equal, every tensor bit for bit."""
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    return a == b


@pytest.mark.parametrize("background", [False, True])
def test_a_dcp_write_that_fails_is_reported_and_leaves_no_checkpoint(tmp_path, background):
    events_seen = []
    ck = Checkpointer(tmp_path, background=background, format="dcp", emit=lambda kind, **kw: events_seen.append(kind))
    # A folder where rank 0's shard file must go: its write fails (as a full disk would, even as root).
    (tmp_path / ".tmp-step_000005-dcp" / "__0_0.distcp").mkdir(parents=True)
    ck.save(5, {"model": {"w": torch.ones(3)}, "optim": {}, "state": {"step": 5}})
    ck.wait()
    assert events_seen == ["checkpoint_failed"] and list_checkpoints(tmp_path) == []
    (result,) = ck.poll()
    assert not result.ok and result.step == 5 and "step 5" in result.reason


@pytest.mark.slow
def test_a_checkpoint_two_ranks_wrote_as_shards_loads_into_one_process_bit_for_bit(logbook_repo):
    cfg = micro_config(logbook_repo, steps=4, every=4)
    project = open_project()
    whole = launch_run(project, cfg, [*FSDP, "checkpoint.format=torch"], exploratory=True, nproc=2, max_restarts=0,
                       run_id="whole")
    sharded = launch_run(project, cfg, [*FSDP, "checkpoint.format=dcp"], exploratory=True, nproc=2, max_restarts=0,
                         run_id="sharded")
    assert (whole.status, sharded.status) == ("finished", "finished")

    torch_parts = read_checkpoint(_ckpt_dir(logbook_repo, "whole") / "step_000004")
    dcp_path = _ckpt_dir(logbook_repo, "sharded") / "step_000004"
    manifest = verify_checkpoint(dcp_path)
    assert manifest["checkpoint_format"] == "dcp"
    assert {"__0_0.distcp", "__1_0.distcp", ".metadata", "state.pt"} <= set(manifest["files"])
    dcp_parts = read_checkpoint(dcp_path)

    # Resharded from 2 FSDP ranks onto 1 plain process: the same parameters and the same
    # optimizer state (Adam's moments and step counters) as the whole tensors rank 0 gathered.
    m1, o1 = _fresh(torch_parts)
    load_full_state(m1, o1, torch_parts["model"], torch_parts["optim"])
    m2, o2 = _fresh(dcp_parts)
    load_into(m2, o2, dcp_parts["dcp"], None)
    assert _equal(m1.state_dict(), m2.state_dict())
    assert _equal(o1.state_dict(), o2.state_dict())
    assert any(s for s in o2.state_dict()["adamw"]["state"].values())  # the optimizer state did load
    # Every rank's torch RNG, in rank order (numpy's is not seeded by the run, so it differs between runs).
    rngs = [[r["torch"] for r in p["state"]["rng"]] for p in (torch_parts, dcp_parts)]
    assert len(rngs[1]) == 2 and _equal(*rngs)


@pytest.mark.slow
def test_an_async_dcp_save_killed_before_its_seal_is_not_resumed_and_the_run_stays_exact(logbook_repo):
    cfg = micro_config(logbook_repo, steps=12, every=4)
    project = open_project()
    bg = [*FSDP, "checkpoint.background=true"]
    ref = launch_run(project, cfg, bg, exploratory=True, nproc=2, max_restarts=0, run_id="ref")
    # Rank 0 dies once every rank's shards of step 8 are written and before COMPLETE: the shards
    # on disk must not count, and the restart resumes step 4's checkpoint.
    res = launch_run(project, cfg, [*bg, "faults=[{kind: sigkill, step: 8, when: save, rank: 0}]"],
                     exploratory=True, nproc=2, max_restarts=1, run_id="killed")

    assert (ref.status, ref.restarts) == ("finished", 0)
    assert (res.status, res.restarts) == ("finished", 1)
    evs = events(logbook_repo, "killed")
    assert [f["data"].get("when") for f in of_kind(evs, "fault_injected")] == ["save"]
    (restart,) = of_kind(evs, "restart")
    assert restart["data"]["resumed_from_step"] == 4
    # The background save of step 8 is killed at its seal; on a loaded machine training has gone on to step 12
    # by then and begun its save too, and the restart names the newest save left unfinished.
    assert restart["data"]["unfinished_checkpoint_step"] in (8, 12)
    saved = [e["step"] for e in of_kind(evs, "checkpoint_saved")]
    assert saved == [4, 8, 12]  # step 8's first save never reported; the second attempt's did
    assert all(s["data"]["checkpoint_format"] == "dcp" for s in of_kind(evs, "run_started"))

    def losses(run_id):
        return {r["step"]: r["loss"] for r in read_metrics(logbook_repo / "entries" / "runs" / run_id) if "loss" in r}

    assert losses("killed") == losses("ref") and len(losses("ref")) == 12
    assert [s for s, _ in list_checkpoints(_ckpt_dir(logbook_repo, "killed"))] == [8, 12]
    assert not [p for p in _ckpt_dir(logbook_repo, "killed").iterdir() if p.name.startswith(".tmp-")]


@pytest.mark.slow
def test_a_dcp_checkpoint_one_process_wrote_resumes_on_two_fsdp_ranks(logbook_repo):
    cfg = micro_config(logbook_repo, steps=8, every=4)
    project = open_project()
    first = launch_run(project, cfg, [*FSDP, "checkpoint.format=dcp", "faults=[{kind: sigterm, step: 4}]"],
                       exploratory=True, nproc=1, max_restarts=0, run_id="grow")
    assert first.status == "preempted"
    again = launch_run(project, None, [], resume="grow", nproc=2)

    assert (again.status, again.attempts) == ("finished", 2)
    evs = events(logbook_repo, "grow")
    started = of_kind(evs, "run_started")
    assert [(s["data"]["world_size"], s["data"]["checkpoint_format"]) for s in started] == [(1, "dcp"), (2, "dcp")]
    assert started[1]["data"]["resumed_from_step"] == 4
    # One process wrote one shard file; two ranks resharded it and wrote two.
    ckpts = dict(list_checkpoints(_ckpt_dir(logbook_repo, "grow")))
    assert sorted(p.name for p in ckpts[8].glob("*.distcp")) == ["__0_0.distcp", "__1_0.distcp"]
    assert sorted(r["step"] for r in read_metrics(logbook_repo / "entries" / "runs" / "grow") if "loss" in r) == \
        list(range(1, 9))
