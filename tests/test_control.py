"""Live changes, trainer side: each request applied exactly once, bad ones rejected, all recorded."""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from logbook.launch.change_requests import (PendingWatch, list_pending, new_request, pending_dir, processed_dir,
                                            read_answer, write_request)
from logbook.promises.contingency import parse_rule
from logbook.eventlog.runlog import iter_events
from logbook.eventlog.sink import EventSink
from trainer.config import TrainConfig
from logbook.launch.live_channel import ControlChannel
from logbook.guard.config import GuardConfig
from logbook.guard.ladder import Guard


@dataclass
class Config(TrainConfig):
    """The trainer's config with its guard section."""

    guard: GuardConfig = field(default_factory=GuardConfig)


class Live:
    """Where the multiplier lives, as the trainer keeps it: one method sets it and writes its event."""

    def __init__(self, emit) -> None:
        self.lr_scale = 1.0
        self.emit = emit

    def set_lr_scale(self, new, kind, payload, *, drill=False, step=None, tokens=None):
        self.lr_scale = float(new)
        self.emit(kind, step=step, tokens=tokens, drill=drill, **payload)


@pytest.fixture
def run(tmp_path):
    """(control dir, event sink, events reader) for run r1."""
    sink = EventSink(tmp_path / "runs" / "r1", "r1", attempt=1)

    def events(kind: str | None = None):
        return [e for e in iter_events(sink.log.path) if kind is None or e["kind"] == kind]

    return tmp_path / "control" / "r1", sink, events


def _channel(control_dir, sink, cfg=None, **kw) -> ControlChannel:
    kw.setdefault("grace_s", 0.0)
    kw.setdefault("rules", [])  # a preregistered run whose plan foresaw nothing
    return ControlChannel(control_dir, "r1", cfg or Config(), emit=sink.emit, **kw)


def _ask(control_dir, changes, reason="grad norm creeping up", who="Ada <ada@example.org>", run_id="r1") -> Path:
    return write_request(control_dir, new_request(run_id, changes, reason, who))


def test_valid_request_is_applied_recorded_and_answered(run):
    control, sink, events = run
    cfg = Config()
    ch = _channel(control, sink, cfg)
    path = _ask(control, {"lr": 3e-4, "grad_clip": 0.5})
    applied = ch.poll(7)
    assert cfg.optim.lr == 3e-4 and cfg.optim.grad_clip == 0.5
    assert [(c["key"], c["old"], c["new"]) for c in applied] == [("grad_clip", 1.0, 0.5), ("lr", 1e-3, 3e-4)]
    changes = events("hparam_change")
    assert [e["data"]["key"] for e in changes] == ["grad_clip", "lr"] and all(e["step"] == 7 for e in changes)
    first = changes[1]["data"]
    assert first["old"] == 1e-3 and first["new"] == 3e-4 and first["source"] == "live"
    assert first["who"] == "Ada <ada@example.org>" and first["reason"] == "grad norm creeping up"
    assert first["request_id"] == json.loads((processed_dir(control) / path.name).read_text())["request_id"]
    assert '-      "lr": 0.001,' in first["config_diff"] and '+      "lr": 0.0003,' in first["config_diff"]
    assert first["plan"] == {"rule": None, "follows": False}
    answer = read_answer(control, path.name)
    assert answer["outcome"]["status"] == "applied" and answer["outcome"]["step"] == 7
    assert list_pending(control) == []
    assert ch.poll(8) == [] and len(events("hparam_change")) == 2


def test_requests_are_applied_in_the_order_they_were_made(run):
    control, sink, _ = run
    cfg = Config()
    for lr in (1e-4, 2e-4, 3e-4):
        _ask(control, {"lr": lr})
    _channel(control, sink, cfg).poll(1)
    assert cfg.optim.lr == 3e-4


def test_a_request_is_applied_once_even_when_its_answer_was_lost(run):
    """A kill between applying and answering: the restarted run finds the request still pending."""
    control, sink, events = run
    cfg = Config()
    ch = _channel(control, sink, cfg)
    path = _ask(control, {"weight_decay": 0.05})
    body = path.read_bytes()
    ch.poll(10)
    state = ch.state_dict()  # the checkpoint after the change
    # Simulate the lost answer: the request is back in pending/, processed/ has nothing.
    (processed_dir(control) / path.name).unlink()
    path.write_bytes(body)
    cfg2 = Config()  # the next launch reads the config file again
    ch2 = _channel(control, sink, cfg2)
    ch2.load_state_dict(state)
    assert cfg2.optim.weight_decay == 0.05  # the live change is back in force from the checkpoint
    assert ch2.poll(11) == []
    assert len(events("hparam_change")) == 1
    answer = read_answer(control, path.name)
    assert answer["outcome"]["status"] == "applied" and answer["outcome"]["step"] == 10
    assert list_pending(control) == []


def test_a_failed_answer_write_does_not_apply_twice(run, monkeypatch):
    import logbook.launch.live_channel as tc

    control, sink, events = run
    cfg = Config()
    ch = _channel(control, sink, cfg)
    path = _ask(control, {"lr_scale": 0.5}, who="b")
    real = tc.finish_request
    calls = []

    def full_disk_once(*a, **k):
        calls.append(1)
        if len(calls) == 1:
            raise OSError(28, "No space left on device")
        return real(*a, **k)

    monkeypatch.setattr(tc, "finish_request", full_disk_once)
    live = Live(sink.emit)
    ch.live = live
    ch.poll(3)
    assert live.lr_scale == 0.5 and path.exists()
    live.lr_scale = 0.7  # changed since (by the guard, say): the old request must not come back
    ch.poll(4)
    assert live.lr_scale == 0.7 and not path.exists()
    assert len(events("hparam_change")) == 1
    assert read_answer(control, path.name)["outcome"]["status"] == "applied"


def test_a_change_lost_to_a_restart_is_applied_again(run):
    """Applied and answered, then the run died before a checkpoint held it: the resumed run re-applies it."""
    control, sink, events = run
    ch = _channel(control, sink, Config())
    old_state = ch.state_dict()  # the checkpoint the restart will resume from
    path = _ask(control, {"train.eval_every": 25})
    ch.poll(150)
    cfg2 = Config()
    ch2 = _channel(control, sink, cfg2)
    ch2.load_state_dict(old_state)
    assert cfg2.train.eval_every == 100
    applied = ch2.poll(101)
    assert cfg2.train.eval_every == 25 and [c["key"] for c in applied] == ["train.eval_every"]
    again = events("hparam_change")[-1]["data"]
    assert again["reapplied"] is True and again["request_id"] == read_answer(control, path.name)["request_id"]
    assert read_answer(control, path.name)["outcome"]["reapplied"][0]["step"] == 101
    assert ch2.poll(102) == []


def test_a_rejected_request_changes_nothing(run):
    control, sink, events = run
    cfg = Config()
    path = _ask(control, {"guard.spike_sigma": 3.0, "data.weights.web": 2.0})  # no source `web` in this run
    assert _channel(control, sink, cfg).poll(5) == []
    assert cfg.guard.spike_sigma == 6.0
    rejected = events("hparam_change_rejected")[0]["data"]
    assert "no data source 'web'" in rejected["reason"] and rejected["changes"] == {"guard.spike_sigma": 3.0, "data.weights.web": 2.0}
    answer = read_answer(control, path.name)
    assert answer["outcome"]["status"] == "rejected" and "web" in answer["outcome"]["reason"]
    assert events("hparam_change") == []


@pytest.mark.parametrize("content, why", [
    (b'{"request_id": "abc", "run": "r1", "changes": {"lr"', "not complete JSON"),
    (b"\xff\xfe\x00garbage", "not UTF-8"),
    (b"[1, 2, 3]", "JSON list"),
    (b"", "not complete JSON"),
    (b'{"request_id": "x", "run": "r1", "who": "a", "reason": "r", "changes": {"lr": "fast"}}', "needs a number"),
    (b'{"request_id": "x", "run": "r1", "who": "a", "reason": "r", "changes": {"momentum": 0.9}}', "allow-list"),
    (b'{"request_id": "x", "run": "r2", "who": "a", "reason": "r", "changes": {"lr": 0.1}}', "not 'r1'"),
])
def test_garbage_or_half_written_files_are_rejected_and_the_run_goes_on(run, content, why):
    control, sink, events = run
    cfg = Config()
    bad = control / "pending" / "20260101T000000.000000Z-bad.json"
    bad.parent.mkdir(parents=True)
    bad.write_bytes(content)
    good = _ask(control, {"lr": 2e-4})
    ch = _channel(control, sink, cfg)
    ch.poll(9)
    assert cfg.optim.lr == 2e-4  # the good request after it still applies
    rejected = events("hparam_change_rejected")
    assert len(rejected) == 1 and why in rejected[0]["data"]["reason"]
    assert read_answer(control, bad.name)["outcome"]["status"] == "rejected"
    assert read_answer(control, good.name)["outcome"]["status"] == "applied"
    assert list_pending(control) == []


def test_a_file_still_being_written_gets_a_grace_period(run):
    control, sink, events = run
    half = control / "pending" / "20260101T000000.000000Z-slow.json"
    half.parent.mkdir(parents=True)
    half.write_bytes(b'{"request_id": "ab')
    (control / "pending" / ".tmp-of-an-atomic-write.json").write_bytes(b"{")
    ch = _channel(control, sink, grace_s=60.0)
    ch.poll(1)
    assert half.exists() and events() == []


def test_a_file_finished_in_place_after_its_grace_check_is_read_at_the_next_step(run):
    control, sink, _ = run
    cfg = Config()
    slow = control / "pending" / "20260101T000000.000000Z-slow.json"
    slow.parent.mkdir(parents=True)
    slow.write_bytes(b'{"request_id": "ab')
    ch = _channel(control, sink, cfg, grace_s=60.0)
    ch.poll(1)
    done = new_request("r1", {"lr": 5e-4}, "by hand", "Ada <ada@example.org>")
    slow.write_text(json.dumps(done))  # the folder itself does not change
    ch.poll(2)
    assert cfg.optim.lr == 5e-4 and read_answer(control, slow.name)["outcome"]["status"] == "applied"


def _watched_folder(control: Path, age_s: float) -> tuple[PendingWatch, Path, int]:
    """An empty pending/ last changed `age_s` ago, scanned once: (its watch, the folder, its mtime in ns)."""
    folder = pending_dir(control)
    folder.mkdir(parents=True)
    ns = time.time_ns() - int(age_s * 1e9)
    os.utime(folder, ns=(ns, ns))
    watch = PendingWatch(control, backstop_s=3600)
    assert watch.pending() == []
    return watch, folder, ns


def test_a_quiet_pending_folder_costs_a_stat_not_a_read(run):
    control, _, _ = run
    watch, folder, old = _watched_folder(control, 10)
    hidden = _ask(control, {"lr": 1e-4})
    os.utime(folder, ns=(old, old))  # the stamp put back: only a read could find the file now
    assert watch.pending() == []
    assert PendingWatch(control, backstop_s=0).pending() == [hidden]  # the periodic full scan does


def test_a_request_after_a_quiet_spell_is_seen_at_the_next_step(run):
    control, _, _ = run
    watch, _, _ = _watched_folder(control, 10)
    assert watch.pending() == [] and watch.pending() == []
    req = _ask(control, {"lr": 1e-4})
    assert watch.pending() == [req]


def test_a_request_in_the_same_clock_tick_as_the_last_change_is_not_missed(run):
    control, _, _ = run
    watch, folder, fresh = _watched_folder(control, 0)
    req = _ask(control, {"lr": 1e-4})
    os.utime(folder, ns=(fresh, fresh))  # as if both changes fell in one tick of the file system's clock
    assert watch.pending() == [req]


def test_a_pending_folder_that_appears_later_is_read(run):
    control, _, _ = run
    watch = PendingWatch(control, backstop_s=3600)
    assert watch.pending() == [] and watch.pending() == []
    req = _ask(control, {"lr": 1e-4})
    assert watch.pending() == [req]


def test_concurrent_requests_are_all_answered(run):
    control, sink, _ = run
    cfg = Config()
    ch = _channel(control, sink, cfg)
    names: list[str] = []
    stop = threading.Event()

    def trainer_loop():
        step = 0
        while not stop.is_set():
            step += 1
            ch.poll(step)

    def ask(i: int):
        names.append(_ask(control, {"checkpoint.every": 10 + i}, who=f"user{i}").name)

    loop = threading.Thread(target=trainer_loop)
    loop.start()
    askers = [threading.Thread(target=ask, args=(i,)) for i in range(8)]
    for t in askers:
        t.start()
    for t in askers:
        t.join()
    stop.set()
    loop.join()
    ch.poll(10_000)
    assert len(set(names)) == 8
    answers = [read_answer(control, n) for n in names]
    assert all(a and a["outcome"]["status"] == "applied" for a in answers)
    assert len(ch.applied) == 8


def test_live_change_wins_over_an_edited_config_file_and_the_edit_is_recorded(run):
    control, sink, events = run
    ch = _channel(control, sink, Config())
    _ask(control, {"lr": 3e-4})
    ch.poll(10)
    state = ch.state_dict()
    edited = Config()
    edited.optim.lr = 2e-3  # the config file was edited between launches
    ch2 = _channel(control, sink, edited)
    ch2.load_state_dict(state)
    assert edited.optim.lr == 3e-4
    ch2.poll(11)
    note = events("hparam_change_rejected")[-1]["data"]
    assert note["source"] == "config" and "0.002" in note["reason"] and "live change wins" in note["reason"]


def test_config_edit_of_a_key_never_changed_live_wins_and_is_recorded(run):
    control, sink, events = run
    ch = _channel(control, sink, Config())
    state = ch.state_dict()
    edited = Config()
    edited.optim.grad_clip = 0.5
    ch2 = _channel(control, sink, edited)
    ch2.load_state_dict(state)
    ch2.poll(51)
    assert edited.optim.grad_clip == 0.5
    change = events("hparam_change")[-1]["data"]
    assert (change["key"], change["old"], change["new"], change["source"]) == ("grad_clip", 1.0, 0.5, "config")
    # A second resume of the same launch does not record it again.
    ch2.load_state_dict(ch2.state_dict())
    ch2.poll(52)
    assert len(events("hparam_change")) == 1


def test_scheduled_changes_are_recorded_with_source_schedule_and_follow_the_plan(run):
    control, sink, events = run
    cfg = Config()
    ch = _channel(control, sink, cfg)
    _ask(control, {"lr": 3e-4})
    ch.poll(1)
    ch.apply_scheduled(100, {"lr": 1e-4}, "phase 2 of the config")
    ch.note_scheduled(150, "data.weights.code", 0.1, 0.3, "the data mixture entered its next phase")
    assert cfg.optim.lr == 1e-4 and "optim.lr" not in ch.overrides
    sched = [e["data"] for e in events("hparam_change") if e["data"]["source"] == "schedule"]
    assert [(d["key"], d["new"]) for d in sched] == [("lr", 1e-4), ("data.weights.code", 0.3)]
    assert all(d["plan"] == {"rule": None, "follows": True} for d in sched)


def test_lr_scale_sets_the_live_multiplier_and_is_judged_against_the_plan(run):
    control, sink, events = run
    live = Live(sink.emit)
    ch = _channel(control, sink, live=live, rules=[parse_rule("loss spike > 4 sigma -> lr x 0.5")])
    _ask(control, {"lr_scale": 0.5})
    ch.poll(3)
    assert live.lr_scale == 0.5
    assert events("hparam_change")[0]["data"]["plan"] == {"rule": 1, "follows": True}


def test_a_guard_threshold_change_reaches_the_running_guard(run):
    control, sink, _ = run
    cfg = Config()
    guard = Guard(cfg.guard)
    _ask(control, {"guard.spike_sigma": 3.5, "guard.cooldown": 0})
    _channel(control, sink, cfg).poll(2)
    assert guard.cfg.spike_sigma == 3.5 and guard.cfg.cooldown == 0


def test_mixture_weights_change_through_the_data_hook(run):
    control, sink, events = run
    seen = []
    ch = _channel(control, sink, data_weights_hook=seen.append)
    _ask(control, {"data.weights.stdlib": 2.0})
    ch.poll(4)
    assert seen == [{"stdlib": 2.0}] and ch.state_dict()["data_weights"] == {"stdlib": 2.0}
    no_hook = _channel(control, sink)
    _ask(control, {"data.weights.stdlib": 3.0})
    no_hook.poll(5)
    assert "cannot change mixture weights" in events("hparam_change_rejected")[0]["data"]["reason"]


def test_applying_the_optimizer_config_pushes_live_values_into_the_parameter_groups():
    from trainer.config import ModelConfig
    from trainer.nn.model import GPT
    from trainer.nn.optim import apply_hyperparams, build_optimizer

    cfg = Config()
    cfg.model = ModelConfig(n_layer=1, n_head=2, n_embd=16, block_size=8)
    opt = build_optimizer(GPT(cfg.model), cfg.optim, "cpu")
    cfg.optim.lr, cfg.optim.weight_decay = 5e-4, 0.02
    apply_hyperparams(opt, cfg.optim)  # what the trainer does after a live change of optim.*
    groups = {g["name"]: g for g in opt.param_groups}
    assert groups["decay"]["base_lr"] == 5e-4 and groups["decay"]["weight_decay"] == 0.02
    assert groups["no_decay"]["base_lr"] == 5e-4 and groups["no_decay"]["weight_decay"] == 0.0


def test_only_rank_zero_reads_files_and_writes_events(run):
    control, sink, events = run
    cfg = Config()
    path = _ask(control, {"lr": 2e-4})
    other = ControlChannel(control, "r1", cfg, emit=sink.emit, rank=1, world_size=1, grace_s=0)
    assert other.poll(1) == [] and path.exists() and events() == []


@pytest.mark.slow
def test_live_changes_in_a_real_run_survive_a_crash_and_restart(logbook_repo):
    """Real loop: a change applied after the last checkpoint is lost with attempt 1 and applied again in attempt 2."""
    from conftest import ROOT
    from trainer.observe.callbacks import Callback
    from trainer.config import load_train_config
    from trainer.live_control import ControlCallback
    from trainer.startup import build_trainer

    class AskAt(Callback):
        name, priority = "ask", 5  # before the control callback polls this step

        def pre_step(self, step):
            if step == 3 and self.trainer.attempt == 1:
                _ask(self.trainer.project.control_dir("live"), {"lr_scale": 0.5}, run_id="live")
            if step == 13 and self.trainer.attempt == 1:
                _ask(self.trainer.project.control_dir("live"), {"grad_clip": 0.25, "train.eval_every": 7}, run_id="live")

    overrides = ["train.steps=20", "checkpoint.every=10", "checkpoint.background=false", "faults=[{kind: exception, step: 15}]"]

    def attempt():
        cfg = load_train_config(ROOT / "configs" / "micro-test.yaml", overrides)
        t = build_trainer(cfg, project_root=logbook_repo, run_id="live", callbacks=[ControlCallback(grace_s=0), AskAt()],
                    interactive=False)
        return t, cfg

    first, cfg1 = attempt()
    with pytest.raises(Exception, match="injected"):
        first.fit()
    assert cfg1.optim.grad_clip == 0.25 and first.lr_scale == 0.5
    second, cfg2 = attempt()
    second.fit()
    assert cfg2.optim.grad_clip == 0.25 and cfg2.train.eval_every == 7 and second.lr_scale == 0.5
    log = logbook_repo / "entries" / "runs" / "live" / "events.jsonl"
    changes = [(e["attempt"], e["step"], e["data"]["key"], e["data"].get("reapplied", False))
               for e in iter_events(log) if e["kind"] == "hparam_change"]
    assert changes == [
        (1, 3, "lr_scale", False),
        (1, 13, "grad_clip", False), (1, 13, "train.eval_every", False),
        (2, 11, "grad_clip", True), (2, 11, "train.eval_every", True),  # resumed from step 10: applied again
    ]
    # Applied again is still one change each: the facts every view reads, and the review queue, say three.
    from logbook.chronicle.review import review_queue
    from logbook.core.project import open_project
    from logbook.runs.facts import load_facts

    project = open_project(logbook_repo)
    once = [(c["event"]["step"], c["event"]["data"]["key"], c["reapplied_at"]) for c in load_facts(project, "live").live_changes()]
    assert once == [(3, "lr_scale", []), (13, "grad_clip", [11]), (13, "train.eval_every", [11])]
    assert len([i for i in review_queue(project, run="live") if i.kind == "hparam_change"]) == 3


def test_a_run_without_a_preregistration_has_no_plan_to_be_judged_against(run):
    control, sink, events = run
    ch = _channel(control, sink, Config(), rules=None)
    _ask(control, {"lr": 2e-4})
    ch.poll(3)
    (change,) = events("hparam_change")
    assert "plan" not in change["data"] or change["data"]["plan"] is None  # not "not in the plan": there is none
