"""The W&B sink in real training runs: one run across restarts, replayed steps kept, failures harmless."""

from __future__ import annotations

import json
import struct
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT
from logbook.core.errors import UsageError

_BLOCK = 32 * 1024  # the .wandb file is a LevelDB-style log: 32 KiB blocks of (crc, length, type) records


def _wandb_records(path: Path):
    """Every record of an offline run file, parsed with wandb's own protobuf schema."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    assert data[:4] == b":W&B", f"{path} is not a W&B run file"
    pos, parts = 7, b""
    while pos + 7 <= len(data):
        left = _BLOCK - pos % _BLOCK
        if left < 7:
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if length == 0 and kind == 0:  # block padding
            pos += left
            continue
        if pos + 7 + length > len(data):
            return  # the record W&B's service is writing right now: read it next time
        chunk, pos = data[pos + 7 : pos + 7 + length], pos + 7 + length
        if kind in (1, 2):  # full, first
            parts = chunk
        else:  # middle, last
            parts += chunk
        if kind in (1, 4):
            rec = pb.Record()
            rec.ParseFromString(parts)
            yield rec


def _offline_runs(wandb_dir: Path, timeout_s: float = 30.0) -> list[dict]:
    """Per offline run folder, in start order: the run id, its history rows as {key: value}, its alerts.

    W&B's service writes the file in the background, even after `finish()`
    returns, so this waits until every run file holds its `exit` record.
    """
    from google.protobuf.message import DecodeError

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            out = [_offline_run(f) for f in (wandb_dir / "wandb").glob("offline-run-*/run-*.wandb")]
        except DecodeError:  # a record caught half written (its bytes not all flushed yet)
            if time.monotonic() > deadline:
                raise
            out = None
        if out is not None and (all(r["exited"] for r in out) or time.monotonic() > deadline):
            return sorted(out, key=lambda r: r["started"])
        time.sleep(0.2)


def _offline_run(file: Path) -> dict:
    run = {"id": None, "started": 0.0, "rows": [], "alerts": [], "exited": False}
    for rec in _wandb_records(file):
        which = rec.WhichOneof("record_type")
        if which == "run":
            run["id"], run["started"] = rec.run.run_id, rec.run.start_time.ToNanoseconds()
        elif which == "history":
            run["rows"].append({(i.key or "/".join(i.nested_key)): json.loads(i.value_json) for i in rec.history.item})
        elif which == "alert":
            run["alerts"].append(rec.alert.title)
        elif which == "exit":
            run["exited"] = True
    return run


def _cfg(**over):
    from trainer.config import load_train_config

    overrides = ["train.steps=20", "train.log_every=2", "checkpoint.every=10"]
    return load_train_config(ROOT / "configs" / "micro-test.yaml", overrides + [f"{k}={v}" for k, v in over.items()])


def _fit(repo, cfg, sink, run_id="wb"):
    from trainer.startup import build_trainer

    trainer = build_trainer(cfg, project_root=repo, run_id=run_id, callbacks=[sink], interactive=False)
    trainer.fit()
    return trainer


@pytest.mark.slow
def test_offline_run_resumed_across_a_restart_keeps_one_id_and_both_attempts_rows(logbook_repo, tmp_path, monkeypatch):
    from logbook.eventlog.runlog import iter_events
    from trainer.faults import InjectedFault
    from trainer.observe.wandb_sink import WandbConfig, WandbSink

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wb"))
    cfg = _cfg(faults="[{kind: exception, step: 12}]")
    wcfg = WandbConfig(enabled=True, dir=str(tmp_path / "wb"))
    said: list[str] = []
    with pytest.raises(InjectedFault):
        _fit(logbook_repo, cfg, WandbSink(wcfg, say=said.append))
    _fit(logbook_repo, cfg, WandbSink(wcfg, say=said.append))
    assert said == []

    runs = _offline_runs(tmp_path / "wb")
    assert len(runs) == 2 and runs[0]["id"] == runs[1]["id"] == "wb"
    rows = runs[0]["rows"] + runs[1]["rows"]
    # W&B's own step only grows, across both attempts, so nothing is dropped on sync...
    steps = [r["_step"] for r in rows]
    assert steps == sorted(steps) and len(set(steps)) == len(steps)
    # ...while train/step replays 12 after the resume from step 10: both attempts' rows are there.
    loss_rows = [(r["train/attempt"], r["train/step"]) for r in rows if "train/loss" in r]
    assert loss_rows == [(1, s) for s in (2, 4, 6, 8, 10, 12)] + [(2, s) for s in (12, 14, 16, 18, 20)]
    first_12, second_12 = (r for r in rows if "train/loss" in r and r["train/step"] == 12)
    assert first_12["train/loss"] != pytest.approx(0.0) and second_12["train/loss"] == pytest.approx(first_12["train/loss"])
    # Events are mirrored from the logbook, counted across attempts, with an alert for the restart.
    assert any(r.get("events/restart") == 1 for r in runs[1]["rows"])
    assert any(r.get("events/run_started") == 2 for r in runs[1]["rows"])
    assert runs[1]["alerts"] == ["wb: restart at step 10"]
    # The chronicle learns the W&B run once, not once per attempt.
    events = list(iter_events(logbook_repo / "entries" / "runs" / "wb" / "events.jsonl"))
    announced = [e["data"] for e in events if e["kind"] == "wandb_run"]
    assert announced == [{"id": "wb", "path": "logbook/wb", "project": "logbook", "entity": None,
                          "mode": "offline", "dir": str(tmp_path / "wb"), "url": None}]


@pytest.mark.slow
def test_training_goes_on_when_wandb_cannot_be_imported(logbook_repo, monkeypatch):
    from trainer.observe.wandb_sink import WandbConfig, WandbSink

    monkeypatch.setitem(sys.modules, "wandb", None)  # `import wandb` now raises ImportError
    said: list[str] = []
    trainer = _fit(logbook_repo, _cfg(), WandbSink(WandbConfig(enabled=True), say=said.append))
    assert trainer.step == 20
    assert len(said) == 1 and said[0].startswith("wandb: disabled for this attempt (ModuleNotFoundError")
    assert said[0].endswith("training goes on")


@pytest.mark.slow
def test_training_goes_on_when_wandb_init_fails(logbook_repo, monkeypatch, tmp_path):
    from trainer.observe.wandb_sink import WandbConfig, WandbSink

    # Online mode without credentials: wandb.init itself refuses (no network is touched).
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    said: list[str] = []
    sink = WandbSink(WandbConfig(enabled=True, mode="online", dir=str(tmp_path / "wb"), init_timeout_s=20),
                     say=said.append)
    trainer = _fit(logbook_repo, _cfg(), sink)
    assert trainer.step == 20 and sink.run is None
    assert len(said) == 1 and "wandb: disabled for this attempt" in said[0]


def test_disabled_by_default_it_does_nothing(logbook_repo, monkeypatch):
    from trainer.observe.wandb_sink import WandbConfig, WandbSink

    monkeypatch.setitem(sys.modules, "wandb", None)
    sink = WandbSink(WandbConfig(), say=lambda line: pytest.fail(line))

    class Trainer:
        class dist:
            rank = 0

    sink.trainer = Trainer()
    sink.pre_train()
    sink.post_step(1, {"loss": 1.0})
    sink.close()
    assert sink.run is None and sink.disabled_reason is None


@pytest.mark.parametrize(
    ("run_id", "expected"),
    [("qknorm-3f9a", "qknorm-3f9a"), ("a.b_c-1", "a.b_c-1"), ("x" * 64, "x" * 64)],
)
def test_wandb_run_ids_are_the_run_id_when_w_and_b_accepts_it(run_id, expected):
    from logbook.runs.wandb_mirror import wandb_run_id

    assert wandb_run_id(run_id) == expected


def test_long_run_ids_get_a_stable_distinct_w_and_b_id():
    from logbook.runs.wandb_mirror import wandb_run_id

    a, b = wandb_run_id("y" * 100 + "a"), wandb_run_id("y" * 100 + "b")
    assert a != b and len(a) == len(b) == 64 and a == wandb_run_id("y" * 100 + "a")


@pytest.mark.parametrize(("field", "value", "key"), [("mode", "cloud", "wandb.mode"), ("project", "a/b", "wandb.project"),
                                                     ("init_timeout_s", 0, "wandb.init_timeout_s")])
def test_bad_wandb_config_names_the_key(field, value, key):
    from trainer.observe.wandb_sink import WandbConfig

    with pytest.raises(UsageError) as e:
        WandbConfig(**{field: value}).validate("wandb")
    assert f"`{key}`" in e.value.message
    WandbConfig().validate("wandb")
