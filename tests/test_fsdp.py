"""FSDP2 (`fully_shard`) on two CPU processes (gloo): a kill and an exact resume, and a resume from 2 ranks onto 1."""

from __future__ import annotations

import pytest
import torch
from runhelpers import events, micro_config, of_kind

from logbook.core.project import open_project
from logbook.launch.launcher import launch_run
from logbook.eventlog.sink import read_metrics
from trainer.checkpoints.checkpoint_dcp import read_model

pytestmark = pytest.mark.slow

FSDP = ["train.parallel=fsdp"]


def _losses(repo, run_id: str) -> dict[int, float]:
    return {r["step"]: r["loss"] for r in read_metrics(repo / "entries" / "runs" / run_id) if "loss" in r}


def _ckpt(repo, run_id: str, step: int):
    return repo / ".logbook" / "checkpoints" / run_id / f"step_{step:06d}"


def _weights(repo, run_id: str, step: int) -> dict:
    """The whole model of a checkpoint, read in this one process whatever its format."""
    return read_model(_ckpt(repo, run_id, step))


def test_fsdp2_trains_on_two_cpu_processes_and_checkpoints_whole_tensors(logbook_repo):
    cfg = micro_config(logbook_repo, steps=8, every=4)
    # The torch format, asked for: rank 0 gathers whole tensors into model.pt (DCP is tests/test_dcp.py).
    res = launch_run(open_project(), cfg, [*FSDP, "checkpoint.format=torch"], exploratory=True, nproc=2,
                     max_restarts=0, run_id="sharded")

    assert (res.status, res.restarts) == ("finished", 0)
    evs = events(logbook_repo, "sharded")
    assert of_kind(evs, "run_started")[0]["data"]["world_size"] == 2
    losses = _losses(logbook_repo, "sharded")
    assert sorted(losses) == list(range(1, 9)) and losses[8] < losses[1]
    assert of_kind(evs, "run_started")[0]["data"]["checkpoint_format"] == "torch"
    w = torch.load(_ckpt(logbook_repo, "sharded", 8) / "model.pt", weights_only=True)
    assert w and all(type(v) is torch.Tensor for v in w.values())  # gathered from the shards: loads anywhere


def test_fsdp2_on_two_cpu_processes_resumes_exactly_after_a_rank_is_killed(logbook_repo):
    cfg = micro_config(logbook_repo, steps=12, every=4)
    project = open_project()
    ref = launch_run(project, cfg, FSDP, exploratory=True, nproc=2, max_restarts=2, run_id="ref")
    res = launch_run(project, cfg, [*FSDP, "faults=[{kind: sigkill, step: 6, rank: 1}]"], exploratory=True, nproc=2,
                     max_restarts=2, run_id="killed")

    assert (ref.status, ref.restarts) == ("finished", 0)
    assert (res.status, res.attempts, res.restarts) == ("finished", 2, 1)
    evs = events(logbook_repo, "killed")
    (restart,) = of_kind(evs, "restart")
    assert restart["data"]["cause"] == "signal" and restart["data"]["resumed_from_step"] == 4
    assert [r["rank"] for r in restart["data"]["lost_ranks"]] == [1]
    assert all(s["data"]["world_size"] == 2 for s in of_kind(evs, "run_started"))
    assert _losses(logbook_repo, "killed") == _losses(logbook_repo, "ref") and len(_losses(logbook_repo, "ref")) == 12
    assert all(s["data"]["checkpoint_format"] == "dcp" for s in of_kind(evs, "run_started"))
    # Two ranks, two shard files: each rank wrote its own (DCP), nothing was gathered onto rank 0.
    shards = sorted(p.name for p in _ckpt(logbook_repo, "killed", 12).glob("*.distcp"))
    assert shards == ["__0_0.distcp", "__1_0.distcp"] and not (_ckpt(logbook_repo, "killed", 12) / "model.pt").exists()
    a, b = _weights(logbook_repo, "ref", 12), _weights(logbook_repo, "killed", 12)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_an_fsdp2_run_preempted_on_two_processes_resumes_on_one(logbook_repo):
    cfg = micro_config(logbook_repo, steps=10, every=4)
    project = open_project()
    first = launch_run(project, cfg, [*FSDP, "faults=[{kind: sigterm, step: 6}]"], exploratory=True, nproc=2,
                       max_restarts=0, run_id="shrink")
    assert (first.status, first.exit_code) == ("preempted", 75)
    again = launch_run(project, None, [], resume="shrink", nproc=1)

    assert (again.status, again.attempts) == ("finished", 2)
    evs = events(logbook_repo, "shrink")
    (preempted,) = of_kind(evs, "preempted")
    assert preempted["data"]["saved_step"] == 6
    started = of_kind(evs, "run_started")
    assert [s["data"]["world_size"] for s in started] == [2, 1]
    assert started[1]["data"]["resumed_from_step"] == 6
    (restart,) = of_kind(evs, "restart")
    assert restart["data"]["cause"] == "preempted"
    assert sorted(_losses(logbook_repo, "shrink")) == list(range(1, 11))
