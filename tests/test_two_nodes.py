"""Two nodes on one machine: two `logbook run --nnodes 2` launchers, one c10d rendezvous on 127.0.0.1, gloo DDP.

Every run here trains the same small config; a one-node, two-process run of
it is the reference that the two-node runs must match bit for bit, whatever
was killed on the way.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch
from lab import Lab, run_config
from nodes import free_port, kill_node, node_command, start_node, start_nodes, worker_pids

from trainer.job.rendezvous import StartupTimeout, join_group

pytestmark = pytest.mark.slow

STEPS, EVERY = 24, 4
FAST = ["--join-timeout", "60", "--startup-timeout", "60", "--max-restarts", "2"]


def _config(lab: Lab, faults: list | None = None, **train) -> Path:
    cfg = run_config(steps=STEPS, every=EVERY)
    cfg["checkpoint"]["background"] = False  # the checkpoint of a step is whole before a drill after it
    cfg["train"].update(train)
    cfg["faults"] = faults or []
    return lab.write_config("two.yaml", cfg)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """Losses and final weights of the config on one node with two processes."""
    lab = Lab.create(tmp_path_factory.mktemp("ref"))
    cfg = _config(lab)
    res = lab.logbook("run", str(cfg), "--exploratory", "--run-id", "ref", "--nproc", "2", timeout=600)
    assert res.returncode == 0, res.stderr
    return lab.losses("ref"), lab.final_weights("ref", STEPS)


def _start_pair(lab: Lab, cfg: Path, *extra: str, run: str = "two") -> tuple:
    endpoint = f"127.0.0.1:{free_port()}"
    n0, n1 = start_nodes(lab, node_command(0, 2, endpoint, run, cfg, *FAST, *extra),
                         node_command(1, 2, endpoint, run, cfg, *FAST, *extra), endpoint, lab.root.parent)
    return endpoint, n0, n1


def _wait(proc, timeout: float = 600) -> int:
    try:
        return proc.wait(timeout=timeout)
    except BaseException:
        kill_node(proc)
        raise


def _of(evs: list[dict], kind: str) -> list[dict]:
    return [e for e in evs if e["kind"] == kind]


def _status(lab) -> str:
    """How the run stands, from its event log (run.json is written once, at launch)."""
    from logbook.core.project import open_project
    from logbook.runs.run_record import run_status

    return run_status(open_project(lab.root), "two")


def _render(lab: Lab) -> str:
    res = lab.logbook("render")
    assert res.returncode == 0, res.stderr
    return "\n".join(p.read_text() for p in sorted((lab.root / "entries").glob("20*/*/*.md")))


def _same_weights(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def _assert_recorded_once(lab: Lab, run: str) -> list[dict]:
    """Only rank 0 of node 0 wrote; every step's metrics once per attempt; one run_finished."""
    evs = lab.events(run)
    assert {e["rank"] for e in evs} == {0}
    assert len(_of(evs, "run_finished")) == 1 and not _of(evs, "run_failed")
    for started in _of(evs, "run_started"):
        members = started["data"]["members"]
        assert [(m["rank"], m["node"]) for m in members] == [(0, 0), (1, 1)]
    assert sorted(lab.losses(run)) == list(range(1, STEPS + 1))
    return evs


def test_two_nodes_train_like_one_node_with_two_processes_and_a_slow_node_is_named(tmp_path, reference):
    lab = Lab.create(tmp_path)
    cfg = _config(lab)
    slow = ["straggler.every=2", "straggler.patience=2", "straggler.drill_rank=1", "straggler.drill_sleep_s=0.1"]
    endpoint = f"127.0.0.1:{free_port()}"
    n0, n1 = start_nodes(lab, node_command(0, 2, endpoint, "two", cfg, *FAST) + slow,
                         node_command(1, 2, endpoint, "two", cfg, *FAST) + slow, endpoint, tmp_path)
    assert (_wait(n0), _wait(n1)) == (0, 0), (tmp_path / "node0.log").read_text()[-3000:]

    evs = _assert_recorded_once(lab, "two")
    (started,) = _of(evs, "run_started")
    assert started["data"]["world_size"] == 2 and len(started["data"]["group_id"]) == 16
    ref_losses, ref_weights = reference
    assert lab.losses("two") == ref_losses
    assert _same_weights(lab.final_weights("two", STEPS), ref_weights)
    slow_events = _of(evs, "straggler")
    assert slow_events and all(s["data"]["rank_slow"] == 1 and s["data"]["node_slow"] == 1 for s in slow_events)
    assert _status(lab) == "finished" and len(_of(evs, "run_finished")) == 1  # one writer: nothing doubled
    assert "straggler" in _render(lab)


def test_a_worker_sigkilled_on_node_1_restarts_both_nodes_once_and_resumes_exactly(tmp_path, reference):
    lab = Lab.create(tmp_path)
    cfg = _config(lab, faults=[{"kind": "sigkill", "step": 6, "rank": 1}])
    _, n0, n1 = _start_pair(lab, cfg)
    assert (_wait(n0), _wait(n1)) == (0, 0), (tmp_path / "node0.log").read_text()[-3000:]

    evs = _assert_recorded_once(lab, "two")
    (restart,) = _of(evs, "restart")
    d = restart["data"]
    assert (restart["attempt"], d["cause"], d["resumed_from_step"], restart["drill"]) == (2, "signal", 4, True)
    assert [(r["rank"], r["node"]) for r in d["lost_ranks"]] == [(1, 1)]
    assert "rank 1 on node 1" in d["detail"]
    first, second = _of(evs, "run_started")
    assert first["data"]["group_id"] != second["data"]["group_id"]  # each attempt its own, agreed identity
    ref_losses, ref_weights = reference
    assert lab.losses("two") == ref_losses
    assert _same_weights(lab.final_weights("two", STEPS), ref_weights)
    chronicle = _render(lab)
    assert "Lost: rank 1 on node 1" in chronicle and "attempt 1 → 2" in chronicle


def _kill_node_1_after_a_checkpoint(lab: Lab, n0, n1) -> float:
    def saved() -> bool:
        return lab.events_path("two").exists() and any(
            e["kind"] == "checkpoint_saved" and e["step"] >= 8 for e in lab.events("two"))

    deadline = time.monotonic() + 300
    while not saved():
        assert n0.poll() is None and time.monotonic() < deadline, "node 0 ended before the first checkpoints"
        time.sleep(0.05)
    assert worker_pids(n1), "node 1 has no worker to lose"
    kill_node(n1)
    return time.time()


def test_a_lost_node_that_rejoins_within_the_join_timeout_resumes_the_run_exactly(tmp_path, reference):
    lab = Lab.create(tmp_path)
    cfg = _config(lab)
    endpoint, n0, n1 = _start_pair(lab, cfg)
    _kill_node_1_after_a_checkpoint(lab, n0, n1)
    time.sleep(2)  # the node reboots; node 0 waits in the rendezvous meanwhile
    n1 = start_node(lab, node_command(1, 2, endpoint, "two", cfg, *FAST), tmp_path / "node1-again.log")
    assert (_wait(n0), _wait(n1)) == (0, 0), (tmp_path / "node0.log").read_text()[-3000:]

    evs = _assert_recorded_once(lab, "two")
    (restart,) = _of(evs, "restart")
    assert restart["data"]["cause"] == "signal" and restart["drill"] is False
    assert [(r["rank"], r["node"]) for r in restart["data"]["lost_ranks"]] == [(1, 1)]
    assert restart["data"]["resumed_from_step"] >= 8
    ref_losses, ref_weights = reference
    assert lab.losses("two") == ref_losses
    assert _same_weights(lab.final_weights("two", STEPS), ref_weights)
    assert "Lost: rank 1 on node 1" in _render(lab)


def test_a_lost_node_that_never_returns_fails_the_run_after_the_join_timeout_with_the_reason(tmp_path):
    lab = Lab.create(tmp_path)
    cfg = _config(lab)
    endpoint = f"127.0.0.1:{free_port()}"
    short = ["--join-timeout", "8", "--startup-timeout", "60", "--max-restarts", "2"]
    n0, n1 = start_nodes(lab, node_command(0, 2, endpoint, "two", cfg, *short),
                         node_command(1, 2, endpoint, "two", cfg, *short), endpoint, tmp_path)
    killed = _kill_node_1_after_a_checkpoint(lab, n0, n1)
    assert _wait(n0) == 5
    waited = time.time() - killed

    evs = lab.events("two")
    (failed,) = _of(evs, "run_failed")
    reason = failed["data"]["reason"]
    assert reason.startswith("node lost: attempt 1 ended: rank 1 on node 1") and "waited 8 s for all 2 nodes" in reason
    assert waited < 120  # bounded: the join timeout and torchrun's shutdown, not ten minutes
    assert not _of(evs, "run_finished") and {e["rank"] for e in evs} == {0}
    assert _status(lab) == "failed"
    assert "node lost: attempt 1 ended" in _render(lab)


def test_a_hung_collective_on_one_node_ends_in_a_hang_restart_not_a_stall(tmp_path, reference):
    lab = Lab.create(tmp_path)
    cfg = _config(lab, faults=[{"kind": "hang", "step": 6, "rank": 1}], hang_timeout_s=4.0)
    _, n0, n1 = _start_pair(lab, cfg)
    assert (_wait(n0), _wait(n1)) == (0, 0), (tmp_path / "node0.log").read_text()[-3000:]

    evs = _assert_recorded_once(lab, "two")
    (restart,) = _of(evs, "restart")
    assert restart["data"]["cause"] == "hang" and restart["data"]["resumed_from_step"] == 4
    # Whichever watchdog fired first, the rank that hung is named, on its node.
    assert (1, 1) in [(r["rank"], r["node"]) for r in restart["data"]["hung_ranks"]]
    ref_losses, _ = reference
    assert lab.losses("two") == ref_losses
    assert "Hung: " in _render(lab) and "rank 1 on node 1" in _render(lab)


def test_a_worker_whose_peers_never_arrive_gives_up_after_the_startup_timeout_naming_them(monkeypatch):
    env = {"WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": str(free_port()), "LOGBOOK_STARTUP_TIMEOUT_S": "1", "LOGBOOK_NODE_RANK": "0"}
    t0 = time.monotonic()
    with pytest.raises(StartupTimeout, match=r"waited 1 s at start-up for 1 of 2 worker\(s\) \(torchrun rank\(s\) 1\)"):
        join_group(2, env)
    assert time.monotonic() - t0 < 30
