"""The launcher: real torchrun, the real trainer, restarts and failures in the event log."""

from __future__ import annotations

import time

import pytest
from runhelpers import events, micro_config, of_kind, run_json

from logbook.core.errors import RefusedError, UsageError
from logbook.core.project import open_project
from logbook.launch.launcher import Rendezvous, _check_overrides, _Plan, launch_run, new_run_id, torchrun_command
from logbook.runs.run_record import RunRecord


@pytest.mark.slow
def test_a_sigkill_restart_is_recorded_once_with_cause_signal_even_when_the_chronicle_fails(logbook_repo):
    # A drill SIGKILLs attempt 1 after step 3; the checkpoint of step 2 is complete.
    cfg = micro_config(logbook_repo, steps=6, faults=[{"kind": "sigkill", "step": 3, "attempt": 1}])
    # A file where this year's chronicle folder belongs: every render fails, the run must not.
    (logbook_repo / "entries" / time.strftime("%Y", time.gmtime())).write_text("in the way\n")
    said: list[str] = []
    res = launch_run(open_project(), cfg, [], exploratory=True, max_restarts=2, run_id="drill", say=said.append)

    assert (res.status, res.exit_code, res.attempts, res.restarts) == ("finished", 0, 2, 1)
    evs = events(logbook_repo, "drill")
    restarts = of_kind(evs, "restart")
    assert len(restarts) == 1
    assert restarts[0]["attempt"] == 2 and restarts[0]["drill"] is True
    assert restarts[0]["data"]["cause"] == "signal" and restarts[0]["data"]["signal"] == "SIGKILL"
    assert restarts[0]["data"]["resumed_from_step"] == 2
    assert len(of_kind(evs, "run_finished")) == 1 and not of_kind(evs, "run_failed")
    assert run_json(logbook_repo, "drill")["status"] == "finished"
    assert sum("restart: attempt 1 -> 2, killed by SIGKILL" in s for s in said) == 1
    assert res.restart_lines == [next(s for s in said if s.startswith("restart:"))]
    warnings = [s for s in said if s.startswith("warning: chronicle not rendered")]
    assert len(warnings) == 1, said  # said once, not at every poll


@pytest.mark.slow
def test_exception_restarts_then_exhausted_restarts_write_run_failed_and_resume_carries_on(logbook_repo):
    cfg = micro_config(logbook_repo, steps=6, faults=[
        {"kind": "exception", "step": 3, "attempt": 1},
        {"kind": "exception", "step": 3, "attempt": 2},
    ])
    project = open_project()
    res = launch_run(project, cfg, [], exploratory=True, max_restarts=1, run_id="doomed")

    assert (res.status, res.exit_code, res.attempts, res.restarts) == ("failed", 5, 2, 1)
    evs = events(logbook_repo, "doomed")
    (restart,) = of_kind(evs, "restart")
    assert restart["attempt"] == 2 and restart["data"]["cause"] == "exception"
    assert restart["data"]["exception_type"] == "InjectedFault"
    failed = of_kind(evs, "run_failed")
    assert len(failed) == 1
    assert failed[0]["attempt"] == 2 and failed[0]["rank"] == 0
    assert "InjectedFault" in failed[0]["data"]["reason"] and "all 1 restart used" in failed[0]["data"]["reason"]
    assert failed[0]["data"]["exit_code"] == res.torchrun_exit != 0
    assert run_json(logbook_repo, "doomed")["status"] == "failed"

    with pytest.raises(RefusedError, match="already exists"):
        launch_run(project, cfg, [], exploratory=True, run_id="doomed")

    # The drills only fire on attempts 1 and 2: the resumed attempt 3 finishes.
    again = launch_run(project, None, [], resume="doomed")
    assert (again.status, again.exit_code, again.attempts) == ("finished", 0, 3)
    assert [e["attempt"] for e in of_kind(events(logbook_repo, "doomed"), "restart")] == [2, 3]
    assert run_json(logbook_repo, "doomed")["status"] == "finished"
    with pytest.raises(RefusedError, match="already finished"):
        launch_run(project, None, [], resume="doomed")


def test_bad_override_syntax_is_a_usage_error():
    _check_overrides(["optim.lr=3e-4", "faults.0.step=3", "train.steps=10"])
    for bad in ("optim.lr", "=3", "-x=1", "a..b=1", "optim lr=1"):
        with pytest.raises(UsageError, match="bad override"):
            _check_overrides([bad])


def test_run_ids_come_from_the_preregistration_slug_or_the_config_name(logbook_repo):
    project = open_project()
    rid = new_run_id(project, "2026-11-30-qknorm-removes-spikes-3f9a1c", logbook_repo / "x.yaml")
    assert rid.startswith("qknorm-removes-spikes-") and len(rid) == len("qknorm-removes-spikes-") + 4
    assert new_run_id(project, None, logbook_repo / "configs" / "tiny-cpu.yaml").startswith("tiny-cpu-")


def test_torchrun_gets_the_rendezvous_and_the_trainer_its_arguments_after_a_separator(logbook_repo, tmp_path):
    project = open_project()
    rec = RunRecord(run_id="r1", created="", config_path="c.yaml", config_hash="0", nproc=2, max_restarts=4)
    plan = _Plan(record=rec, config=logbook_repo / "c.yaml", overrides=["optim.lr=1e-3"], resumed=False)
    rdzv = Rendezvous(nnodes=2, node_rank=1, endpoint="node0:29400", rdzv_id="job7")
    cmd = torchrun_command(project, plan, rdzv, "trainer", tmp_path)
    flags = dict(zip(cmd[3:21:2], cmd[4:21:2]))
    assert cmd[1:3] == ["-m", "trainer.launch.agent"]  # torchrun's options, the trainer's workers forked warm
    assert flags["--nproc-per-node"] == "2" and flags["--max-restarts"] == "4"
    assert flags["--nnodes"] == "2" and flags["--node-rank"] == "1"
    assert flags["--rdzv-endpoint"] == "node0:29400" and flags["--rdzv-id"] == "job7"
    # torchrun's own parser would read `--run` as an abbreviation of its `--run-path`.
    tail = cmd[cmd.index("trainer") + 1:]
    assert tail == ["--", "--project", str(logbook_repo), "--run", "r1", str(logbook_repo / "c.yaml"), "optim.lr=1e-3"]
