"""logbook/api.py, the one module a training loop imports: cheap to import, rank 0 writes, every name resolves."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import ROOT

import logbook.api as api
from logbook.eventlog.chain import verify_log
from logbook.eventlog.runlog import iter_events as _iter_events
from logbook.eventlog.sink import read_metrics


def test_importing_the_api_loads_neither_torch_nor_the_library_behind_it():
    code = "import logbook.api, sys; print('\\n'.join(sys.modules))"
    mods = set(subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, capture_output=True,
                              text=True).stdout.split())
    assert "torch" not in mods and "wandb" not in mods and "matplotlib" not in mods
    assert "logbook.eventlog.sink" not in mods and "git" not in mods  # loaded when a name is first used


@pytest.mark.parametrize("name", sorted(api._LAZY))
def test_every_lazy_public_name_resolves_to_its_owner(name):
    module, colon, attr = api._LAZY[name].partition(":")
    owner = __import__(module, fromlist=["_"])
    assert getattr(api, name) is (owner if colon and not attr else getattr(owner, attr or name))
    assert name in api.__all__ and name in dir(api)


def test_the_public_surface_is_at_most_twelve_names_and_each_resolves():
    """The seam is one object and a few names around it (issue 49), not the library behind it."""
    assert len(api.__all__) <= 12 and len(set(api.__all__)) == len(api.__all__)
    for name in api.__all__:
        assert getattr(api, name) is not None
    assert api.Run.EXIT_PREEMPTED == 75 and api.guard.Guard and api.typedconfig.resolve


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'emit_event'"):
        api.emit_event  # noqa: B018


def test_rank_zero_writes_events_and_metrics_and_other_ranks_write_nothing(logbook_repo):
    other = api.open_run(logbook_repo, "r1", rank=1, total_steps=10)
    assert other.emit("note", text="from rank 1") is None and not other.writes
    other.log_metrics(1, {"loss": 9.0})
    other.close()

    run = api.open_run(logbook_repo, "r1", rank=0, total_steps=10)
    assert (run.attempt, run.record, run.writes) == (1, None, True)  # launched without `logbook run`
    rec = run.emit("milestone", step=5, fraction=0.5, total_steps=10, loss=2.5)
    assert rec["kind"] == "milestone" and rec["attempt"] == 1 and rec["data"]["loss"] == 2.5
    run.log_metrics(5, {"loss": 2.5})
    run.close()
    run.close()  # twice is harmless
    assert verify_log(run.run_dir / "events.jsonl") == []  # hash chained, intact
    assert [(r["step"], r["attempt"], r["loss"]) for r in read_metrics(run.run_dir)] == [(5, 1, 2.5)]
    assert api.open_run(logbook_repo, "r1").attempt == 2  # one more than the log's last attempt
    assert run.contingency_rules() is None  # exploratory: no plan at all, not a plan that foresaw nothing


def test_a_run_id_that_is_not_a_plain_name_is_refused(logbook_repo):
    with pytest.raises(api.UsageError):
        api.open_run(logbook_repo, "../elsewhere")


def _loop_run(repo, run_id: str, lr: float) -> None:
    """A plain loop recorded through the API alone: no `logbook run`, so no run.json."""
    run = api.open_run(repo, run_id, total_steps=4)
    run.emit("run_started", step=0, total_steps=4, world_size=1, resumed_from_step=0)
    run.config({"optim": {"lr": lr, "betas": [0.9, 0.95]}, "batch_size": 8}, source="the loop's own dict", seed=7)
    for step in range(1, 5):
        run.log_metrics(step, {"loss": 4.0 / step})
    run.emit("run_finished", step=4)
    run.close()


def test_runs_a_loop_recorded_alone_are_listed_shown_and_compared_by_the_settings_they_reported(logbook_repo, cli):
    _loop_run(logbook_repo, "loop-a", 3e-4)
    _loop_run(logbook_repo, "loop-b", 1e-3)
    assert not (logbook_repo / "entries" / "runs" / "loop-a" / "run.json").exists()
    st = cli("status", "loop-b", "--json")
    assert st.exit_code == 0, st.output
    assert (json.loads(st.output)["state"], json.loads(st.output)["step"]) == ("finished", 4)
    assert json.loads(cli("status", "--json").output)["run"] == "loop-b"  # the latest, by its log's start
    rows = json.loads(cli("ls", "--runs", "--json").output)
    assert [(r["id"], r["state"], r["steps"]) for r in rows] == [("loop-a", "finished", 4), ("loop-b", "finished", 4)]
    res = cli("compare", "loop-a", "loop-b")
    assert res.exit_code == 0, res.output
    assert "as the trainer reported it" in res.output
    lr_line, = [line for line in res.output.splitlines() if line.strip().startswith("optim.lr")]
    assert "0.0003" in lr_line and "0.001" in lr_line
    assert "batch_size" not in res.output  # the same in both: only what differs is shown
    unknown = cli("status", "loop-c")
    assert unknown.exit_code != 0 and "loop-a" in unknown.output  # the known runs, these included


def test_the_plain_loop_in_docs_integrations_runs_as_written_and_its_record_is_whole(logbook_repo, monkeypatch):
    text = (ROOT / "docs" / "integrations.md").read_text("utf-8")
    block = text.split("## The API for any loop", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    monkeypatch.chdir(logbook_repo)
    losses = iter([4.0 - 0.1 * i for i in range(20)])
    env = {"steps": 20, "lr": 1e-3, "batch_size": 8, "seed": 7, "save_every": 5, "load_checkpoint_step": lambda: 0,
           "train_step": lambda: next(losses), "save_checkpoint": lambda step: None}
    exec(compile(block, "docs/integrations.md", "exec"), env)  # noqa: S102 - the project's own documentation
    events = list(_iter_events(logbook_repo / "entries" / "runs" / "sweep-lr-1e-3" / "events.jsonl"))
    kinds = [e["kind"] for e in events]
    assert kinds[:2] == ["config_recorded", "run_started"] and kinds[-1] == "run_finished"
    assert [e["step"] for e in events if e["kind"] == "checkpoint_saved"] == [5, 10, 15, 20]
    assert [e["data"]["fraction"] for e in events if e["kind"] == "milestone"] == [0.1, 0.25, 0.5, 0.75, 1.0]
    assert verify_log(logbook_repo / "entries" / "runs" / "sweep-lr-1e-3" / "events.jsonl") == []
