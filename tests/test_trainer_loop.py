"""The training loop in-process: decisions from callbacks, saved state, refusals, a full disk."""

from __future__ import annotations

import errno
import json
import os

import pytest
import torch
from conftest import ROOT

from logbook.core.errors import RefusedError, RunFailedError, UsageError
from logbook.eventlog.runlog import iter_events
from logbook.eventlog.sink import EventSink, read_metrics
from trainer.checkpoints import checkpoint as ck
from trainer.observe.callbacks import Callback, LoopAction
from trainer.config import load_train_config
from trainer.loop import Trainer
from trainer.startup import build_trainer

MICRO = ROOT / "configs" / "micro-test.yaml"


def _trainer(repo, run: str, *overrides: str, callbacks=None, env=None) -> Trainer:
    cfg = load_train_config(MICRO, list(overrides))
    return build_trainer(cfg, project_root=repo, run_id=run, callbacks=callbacks, interactive=False, env=env or {})


def _events(repo, run: str, *kinds: str) -> list[dict]:
    evs = list(iter_events(repo / "entries" / "runs" / run / "events.jsonl"))
    return [e for e in evs if not kinds or e["kind"] in kinds]


class Scripted(Callback):
    """Asks for given actions at given steps and records which batch each step trained on."""

    name = "scripted"

    def __init__(self, actions: dict[int, LoopAction] | None = None) -> None:
        self.actions = dict(actions or {})
        self.batches: list[tuple[int, int]] = []
        self.steps_seen = 0

    def post_backward(self, loss, grad_norm):
        return self.actions.pop(self.trainer.step + 1, None)

    def post_step(self, step, metrics):
        self.batches.append((step, self.trainer.data.next_batch - 1))
        self.steps_seen += 1

    def state_dict(self):
        return {"steps_seen": self.steps_seen}

    def load_state_dict(self, state):
        self.steps_seen = state["steps_seen"]


def test_a_full_disk_during_a_save_is_recorded_and_training_goes_on(logbook_repo, monkeypatch):
    real = ck._write_part

    def full_at_10(path, obj):
        if "step_000010" in str(path):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(path, obj)

    monkeypatch.setattr(ck, "_write_part", full_at_10)
    result = _trainer(logbook_repo, "full", "train.steps=20", "checkpoint.keep=5").fit()
    assert result.step == 20
    failed = _events(logbook_repo, "full", "checkpoint_failed")
    assert [e["step"] for e in failed] == [10] and "No space left" in failed[0]["data"]["reason"]
    saved = [e["step"] for e in _events(logbook_repo, "full", "checkpoint_saved")]
    assert saved == [5, 15, 20]
    ckpt_dir = logbook_repo / ".logbook" / "checkpoints" / "full"
    assert sorted(p.name for p in ckpt_dir.iterdir()) == ["step_000005", "step_000015", "step_000020"]
    assert _events(logbook_repo, "full")[-1]["kind"] == "run_finished"


def test_a_skipped_step_consumes_its_batch_but_not_an_optimizer_update(logbook_repo):
    script = Scripted({4: LoopAction("skip", "test skip")})
    t = _trainer(logbook_repo, "skip", "train.steps=10", callbacks=[script])
    t.fit()
    skipped = _events(logbook_repo, "skip", "step_skipped")
    assert [(e["step"], e["data"]["batch_id"], e["data"]["reason"]) for e in skipped] == [(4, 4, "test skip")]
    adam_steps = {float(s["step"]) for s in t.optimizer.optimizers["adamw"].state.values()}
    assert adam_steps == {9.0}
    rows = {r["step"]: r for r in read_metrics(logbook_repo / "entries" / "runs" / "skip") if "loss" in r}
    assert rows[4]["skipped"] is True and "skipped" not in rows[5]


def test_a_rollback_restores_a_checkpoint_skips_batches_and_rescales_the_lr(logbook_repo):
    rollback = LoopAction("rollback", "test rollback", to_step=12, skip_batches=(11, 16), lr_scale=0.5)
    script = Scripted({17: rollback})
    t = _trainer(logbook_repo, "rb", "train.steps=20", callbacks=[script])
    t.fit()
    rb = _events(logbook_repo, "rb", "rollback")
    assert len(rb) == 1 and rb[0]["step"] == 10
    assert {k: rb[0]["data"][k] for k in ("from_step", "to_step", "steps_lost", "batches_skipped")} == {
        "from_step": 16, "to_step": 10, "steps_lost": 6, "batches_skipped": [11, 16]}
    scaled = _events(logbook_repo, "rb", "lr_scaled")
    assert [(e["data"]["old"], e["data"]["new"]) for e in scaled] == [(1.0, 0.5)]
    # Steps 11.. are retrained on the batches after the skipped range.
    after = [b for b in script.batches if b[0] > 10][-10:]
    assert after == [(s, s + 6) for s in range(11, 21)]
    assert t.data.skip == [[11, 16]] and t.lr_scale == 0.5 and t.step == 20


def test_an_abort_fails_the_run_and_a_relaunch_is_refused(logbook_repo):
    script = Scripted({6: LoopAction("abort", "too many rollbacks",
                                  events={"run_aborted": {"reason": "too many rollbacks", "rollbacks": 3}})})
    with pytest.raises(RunFailedError, match="too many rollbacks"):
        _trainer(logbook_repo, "ab", "train.steps=10", callbacks=[script]).fit()
    aborted = _events(logbook_repo, "ab", "run_aborted")
    assert len(aborted) == 1 and aborted[0]["data"] == {"reason": "too many rollbacks", "rollbacks": 3}
    before = _events(logbook_repo, "ab")
    with pytest.raises(RunFailedError, match="was aborted"):
        _trainer(logbook_repo, "ab", "train.steps=10").fit()
    assert _events(logbook_repo, "ab") == before


def test_lr_scale_and_callback_state_resume_with_the_run(logbook_repo):
    class Halve(Scripted):
        def pre_step(self, step):
            if step == 3:
                self.trainer.set_lr_scale(0.5, "lr_scaled", {"old": 1.0, "new": 0.5, "factor": 0.5, "reason": "test"})

    _trainer(logbook_repo, "sc", "train.steps=10", callbacks=[Halve()]).fit()
    again = Scripted()
    t = _trainer(logbook_repo, "sc", "train.steps=20", callbacks=[again])
    t.fit()
    assert t.lr_scale == 0.5 and again.steps_seen == 20
    started = _events(logbook_repo, "sc", "run_started")[-1]["data"]
    assert started["resumed_from_step"] == 10 and started["config_changed"] == ["train.steps"]
    rows = {r["step"]: r for r in read_metrics(logbook_repo / "entries" / "runs" / "sc") if "loss" in r and r["step"] > 10}
    assert all(r["lr_scale"] == 0.5 for r in rows.values())


def test_resuming_with_another_model_shape_is_refused_naming_the_parameter(logbook_repo):
    _trainer(logbook_repo, "shape", "train.steps=5").fit()
    with pytest.raises(RefusedError) as e:
        _trainer(logbook_repo, "shape", "train.steps=10", "model.n_embd=64").fit()
    assert "`wte.weight`" in e.value.message and "(256, 32)" in e.value.message
    failed = _events(logbook_repo, "shape", "attempt_failed")
    assert failed and failed[-1]["data"]["exception_type"] == "RefusedError"


def test_a_deterministic_resume_that_would_change_the_attention_backend_is_refused_with_the_reason(logbook_repo):
    _trainer(logbook_repo, "backend", "train.steps=5").fit()
    with pytest.raises(RefusedError) as e:
        _trainer(logbook_repo, "backend", "train.steps=10", "model.attention_backend=math").fit()
    assert "model.attention_backend=sdpa" in e.value.message and "deterministic" in e.value.message
    assert "model.attention_backend=sdpa" in e.value.hint
    # Not deterministic: the change is accepted, and each attempt's run_started says which backend it used.
    _trainer(logbook_repo, "backend", "train.steps=10", "model.attention_backend=math", "train.deterministic=false").fit()
    started = [e["data"] for e in _events(logbook_repo, "backend", "run_started")]
    assert [d["attention_backend"] for d in started] == ["sdpa", "math"]
    assert "model.attention_backend" in started[-1]["config_changed"]


def test_a_missing_data_path_is_a_usage_error(logbook_repo):
    with pytest.raises(UsageError, match="does not exist"):
        _trainer(logbook_repo, "nodata", "data.sources=[{name: mine, kind: text, path: corpus/missing.txt}]").fit()


def test_relaunching_a_finished_run_writes_nothing(logbook_repo):
    _trainer(logbook_repo, "done", "train.steps=5").fit()
    before = _events(logbook_repo, "done")
    result = _trainer(logbook_repo, "done", "train.steps=5").fit()
    assert result.step == 5 and _events(logbook_repo, "done") == before


def test_attempts_count_on_from_the_highest_one_in_the_log(logbook_repo):
    run_dir = logbook_repo / "entries" / "runs" / "late"
    EventSink(run_dir, "late", attempt=7).emit("run_started", step=0, tokens=0)
    t = _trainer(logbook_repo, "late", "train.steps=3", env={"TORCHELASTIC_RESTART_COUNT": "0"})
    t.fit()
    assert t.attempt == 8
    restart = _events(logbook_repo, "late", "restart")[0]
    assert restart["attempt"] == 8 and restart["data"]["prev_attempt"] == 7 and restart["data"]["cause"] == "signal"
    started = _events(logbook_repo, "late", "run_started")[-1]
    assert started["data"]["torchelastic_restart_count"] == 0 and started["attempt"] == 8


def test_a_failure_only_torchrun_recorded_is_classified_as_an_exception(logbook_repo, tmp_path):
    run_dir = logbook_repo / "entries" / "runs" / "elastic"
    EventSink(run_dir, "elastic", attempt=1).emit("run_started", step=0, tokens=0)
    logs = tmp_path / "torchrun" / "run1"
    (logs / "attempt_0" / "0").mkdir(parents=True)
    (logs / "attempt_1" / "0").mkdir(parents=True)
    (logs / "attempt_0" / "0" / "error.json").write_text(json.dumps(
        {"message": {"message": "ImportError: no module named foo", "extraInfo": {"timestamp": "1"}}}))
    env = {"TORCHELASTIC_ERROR_FILE": str(logs / "attempt_1" / "0" / "error.json"), "TORCHELASTIC_RESTART_COUNT": "1"}
    _trainer(logbook_repo, "elastic", "train.steps=2", env=env).fit()
    restart = _events(logbook_repo, "elastic", "restart")[0]["data"]
    assert restart["cause"] == "exception" and restart["exception_message"] == "ImportError: no module named foo"


def test_progress_is_plain_lines_on_stderr_without_a_terminal(logbook_repo, capsys):
    _trainer(logbook_repo, "plain", "train.steps=4").fit()
    err = capsys.readouterr().err
    assert "attempt 1: training steps 1..4" in err
    assert "step 4/4 · loss " in err and "val_loss" in err


def test_an_in_process_run_leaves_torch_settings_as_it_found_them(logbook_repo):
    threads, det = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    _trainer(logbook_repo, "settings", "train.steps=2", "train.threads=1").fit()
    assert (torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()) == (threads, det)


def test_a_checkpoint_carries_the_resolved_config_and_every_rng(logbook_repo):
    _trainer(logbook_repo, "self", "train.steps=5").fit()
    state = torch.load(logbook_repo / ".logbook" / "checkpoints" / "self" / "step_000005" / "state.pt", weights_only=True)
    assert json.loads(state["config_json"])["train"]["steps"] == 5 and len(state["config_hash"]) == 64
    assert set(state["rng"][0]) >= {"python", "numpy", "torch"}
    assert state["trainer"]["step"] == 5 and state["data"]["next_batch"] == 6


def test_callbacks_are_called_for_the_hooks_they_have_in_priority_order():
    from trainer.observe.callbacks import CallbackList

    calls = []

    class Late(Callback):
        name, priority = "late", 50

        def post_step(self, step, metrics):
            calls.append(("late", "post_step", step))

    class Early(Callback):
        name, priority = "early", 5

        def pre_step(self, step):
            calls.append(("early", "pre_step", step))

        def post_step(self, step, metrics):
            calls.append(("early", "post_step", step))

    quiet = Callback()
    quiet.name = "quiet"
    quiet.step_end = lambda step: calls.append(("quiet", "step_end", step))  # a hook set on the instance counts too
    cbs = CallbackList([Late(), quiet, Early()])
    cbs.pre_step(1)
    assert cbs.post_backward(None, None) is None
    cbs.post_step(1, {})
    cbs.step_end(1)
    assert calls == [("early", "pre_step", 1), ("early", "post_step", 1), ("late", "post_step", 1),
                     ("quiet", "step_end", 1)]
