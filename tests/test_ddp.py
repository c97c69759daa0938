"""Scale-out on CPU: two real DDP processes under torchrun (gloo), one of them killed for real."""

from __future__ import annotations

import pytest
import torch
from runhelpers import events, micro_config, of_kind

from logbook.core.project import open_project
from logbook.launch.launcher import launch_run
from logbook.eventlog.sink import read_metrics
from trainer.checkpoints.checkpoint_dcp import read_model

pytestmark = pytest.mark.slow

SLOW = ["straggler.every=2", "straggler.patience=2", "straggler.drill_rank=1", "straggler.drill_sleep_s=0.1"]


def _run(repo, run_id: str, cfg, overrides: list[str]):
    res = launch_run(open_project(), cfg, overrides, exploratory=True, nproc=2, max_restarts=2, run_id=run_id)
    assert res.status == "finished", (res.status, res.reason, res.torchrun_exit)
    losses = {r["step"]: r["loss"] for r in read_metrics(repo / "entries" / "runs" / run_id) if "loss" in r}
    weights = read_model(repo / ".logbook" / "checkpoints" / run_id / "step_000012")  # DCP: two ranks
    return res, losses, weights


def test_two_rank_ddp_run_with_one_rank_sigkilled_restarts_once_and_resumes_exactly(logbook_repo):
    cfg = micro_config(logbook_repo, steps=12, every=4)
    ref, ref_losses, ref_w = _run(logbook_repo, "ref", cfg, SLOW)
    drill = ["faults=[{kind: sigkill, step: 6, rank: 1}]"]
    res, losses, w = _run(logbook_repo, "killed", cfg, drill)

    assert (ref.status, ref.restarts) == ("finished", 0)
    assert (res.status, res.attempts, res.restarts) == ("finished", 2, 1)
    evs = events(logbook_repo, "killed")
    (restart,) = of_kind(evs, "restart")
    assert restart["drill"] is True and restart["data"]["cause"] == "signal" and restart["data"]["peer_lost"] is True
    assert restart["data"]["resumed_from_step"] == 4
    (fault,) = of_kind(evs, "fault_injected")
    assert fault["data"]["rank"] == 1 and fault["step"] == 6  # announced by rank 0, the only writer
    assert {e["rank"] for e in evs + events(logbook_repo, "ref")} == {0}
    assert of_kind(evs, "run_started")[0]["data"]["world_size"] == 2
    # Exact resume: every step's rank-averaged loss and the final weights, bit for bit.
    assert sorted(losses) == list(range(1, 13)) and losses == ref_losses
    assert ref_w.keys() == w.keys() and all(torch.equal(ref_w[k], w[k]) for k in ref_w)
    # The reference run had rank 1 sleeping 100 ms a step: straggler events name it (more than one
    # when a noisy check in between re-arms the monitor: timing on a shared CPU is not exact).
    slow = of_kind(events(logbook_repo, "ref"), "straggler")
    assert slow and all(s["data"]["rank_slow"] == 1 and s["data"]["ratio"] >= 1.5 and s["drill"] is True for s in slow)
    assert not of_kind(evs, "straggler")
