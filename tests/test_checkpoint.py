"""Checkpoints: atomic, verified on load, kept and pruned, written in the background, safe on a full disk."""

from __future__ import annotations

import errno
import os

import pytest
import torch

from logbook.core.errors import RefusedError
from trainer.checkpoints import checkpoint as ck
from trainer.checkpoints.checkpoint import (Checkpointer, check_model_compatible, list_checkpoints, mark_keep,
                                            read_checkpoint)
from trainer.config import ModelConfig
from trainer.nn.model import GPT


@pytest.fixture(autouse=True)
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _state(step: int) -> dict:
    torch.manual_seed(step)
    return {"model": {"w": torch.randn(64, 64), "b": torch.randn(64)},
            "optim": {"state": {0: {"step": torch.tensor(float(step)), "exp_avg": torch.randn(64)}}, "param_groups": []},
            "state": {"trainer": {"step": step}, "rng": [{"torch": torch.get_rng_state()}], "config_json": "{}"}}


class Events:
    def __init__(self) -> None:
        self.items: list[tuple[str, dict]] = []

    def __call__(self, kind: str, **kw) -> None:
        self.items.append((kind, kw))

    def kinds(self) -> list[str]:
        return [k for k, _ in self.items]


def _ckpt(tmp_path, **kw) -> tuple[Checkpointer, Events]:
    ev = Events()
    return Checkpointer(tmp_path / "ckpt", emit=ev, **kw), ev


@pytest.mark.parametrize("background", [True, False])
def test_a_saved_checkpoint_loads_back_exactly(tmp_path, background):
    c, ev = _ckpt(tmp_path, background=background)
    state = _state(3)
    blocking = c.save(3, state, tokens=300)
    c.wait()
    step, path, parts = c.load_latest()
    assert step == 3 and path.name == "step_000003"
    assert torch.equal(parts["model"]["w"], state["model"]["w"])
    assert torch.equal(parts["optim"]["state"][0]["exp_avg"], state["optim"]["state"][0]["exp_avg"])
    assert parts["state"]["trainer"] == {"step": 3}
    assert sorted(p.name for p in path.iterdir()) == ["COMPLETE", "manifest.json", "model.pt", "optim.pt", "state.pt"]
    kind, data = ev.items[0]
    assert kind == "checkpoint_saved" and data["step"] == 3 and data["tokens"] == 300 and data["bytes"] > 0
    assert 0 <= blocking <= data["total_s"] + 1e-6 and data["blocking_s"] == pytest.approx(blocking, abs=1e-5)


def test_the_background_copy_is_taken_before_training_moves_on(tmp_path):
    c, _ = _ckpt(tmp_path, background=True)
    state = _state(1)
    expected = state["model"]["w"].clone()
    c.save(1, state)
    state["model"]["w"].add_(1.0)  # the next update happens while the thread writes
    c.wait()
    assert torch.equal(c.load_latest()[2]["model"]["w"], expected)


def test_a_tensor_shared_by_two_names_is_stored_once(tmp_path):
    m = GPT(ModelConfig(n_layer=1, n_head=2, n_embd=16, block_size=8, tie_embeddings=True))
    c, _ = _ckpt(tmp_path, background=False)
    c.save(1, {"model": m.state_dict(), "optim": {}, "state": {}})
    sd = c.load_latest()[2]["model"]
    assert sd["wte.weight"].data_ptr() == sd["lm_head.weight"].data_ptr()


def _flip(path):
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def _truncate(path):
    path.write_bytes(path.read_bytes()[:-100])


def _drop_manifest(path):
    (path.parent / "manifest.json").unlink()


@pytest.mark.parametrize("damage", [_flip, _truncate, _drop_manifest])
def test_a_damaged_checkpoint_is_rejected_and_the_previous_good_one_used(tmp_path, damage):
    c, ev = _ckpt(tmp_path, background=False)
    c.save(5, _state(5))
    c.save(10, _state(10))
    damage(tmp_path / "ckpt" / "step_000010" / "model.pt")
    step, _, parts = c.load_latest()
    assert step == 5 and torch.equal(parts["model"]["w"], _state(5)["model"]["w"])
    rejected = [d for k, d in ev.items if k == "checkpoint_rejected"]
    assert len(rejected) == 1 and rejected[0]["ckpt_step"] == 10 and rejected[0]["reason"]
    # Set aside: a second resume does not meet it again.
    assert [s for s, _ in list_checkpoints(tmp_path / "ckpt")] == [5]
    assert any(p.name.startswith("rejected-step_000010") for p in (tmp_path / "ckpt").iterdir())


def test_a_checkpoint_that_needs_unpickling_is_refused(tmp_path):
    c, ev = _ckpt(tmp_path, background=False)
    c.save(1, _state(1))
    # Rewrite a part with an arbitrary object and a matching manifest: weights_only must still refuse it.
    path = tmp_path / "ckpt" / "step_000001"
    torch.save({"evil": Events()}, path / "state.pt")
    import json

    manifest = json.loads((path / "manifest.json").read_text())
    manifest["files"]["state.pt"] = {"sha256": ck._sha256(path / "state.pt"), "bytes": (path / "state.pt").stat().st_size}
    (path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ck.CorruptCheckpoint, match="does not load"):
        read_checkpoint(path)
    assert c.load_latest() is None and ev.kinds() == ["checkpoint_saved", "checkpoint_rejected"]


def test_a_checkpoint_without_its_complete_marker_is_ignored_and_cleaned(tmp_path):
    c, _ = _ckpt(tmp_path, background=False)
    c.save(5, _state(5))
    c.save(10, _state(10))
    (tmp_path / "ckpt" / "step_000010" / "COMPLETE").unlink()  # killed between rename and marker
    (tmp_path / "ckpt" / ".tmp-step_000015-1-abc").mkdir()  # killed mid-write
    assert c.load_latest()[0] == 5
    c.clean_stale()
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == ["step_000005"]


def test_only_the_newest_k_are_kept_but_never_one_marked_keep(tmp_path):
    c, _ = _ckpt(tmp_path, background=False, keep=2)
    c.save(1, _state(1))
    mark_keep(tmp_path / "ckpt" / "step_000001", "around a spike")
    for s in (2, 3, 4):
        c.save(s, _state(s))
    assert [s for s, _ in list_checkpoints(tmp_path / "ckpt")] == [1, 3, 4]
    assert not any(p.name.startswith(".trash") for p in (tmp_path / "ckpt").iterdir())


def test_saving_a_step_again_replaces_the_old_one(tmp_path):
    c, _ = _ckpt(tmp_path, background=False)
    c.save(5, _state(5))
    c.save(5, _state(6))
    assert torch.equal(c.load_latest()[2]["model"]["w"], _state(6)["model"]["w"])


def test_a_full_disk_reports_checkpoint_failed_cleans_up_and_keeps_the_previous(tmp_path, monkeypatch):
    c, ev = _ckpt(tmp_path, background=True)
    c.save(5, _state(5))
    c.wait()
    real = ck._write_part

    def full(path, obj):
        if "step_000010" in str(path):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(path, obj)

    monkeypatch.setattr(ck, "_write_part", full)
    c.save(10, _state(10))
    c.wait()
    results = c.poll()
    assert [(r.step, r.ok) for r in results] == [(5, True), (10, False)]
    failed = [d for k, d in ev.items if k == "checkpoint_failed"]
    assert len(failed) == 1 and "No space left on device" in failed[0]["reason"] and failed[0]["errno"] == errno.ENOSPC
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == ["step_000005"]
    assert c.load_latest()[0] == 5


def test_at_most_one_save_is_in_flight(tmp_path, monkeypatch):
    c, _ = _ckpt(tmp_path, background=True)
    order = []
    real = ck.write_checkpoint

    def slow(directory, step, snapshot, progress=None):
        order.append(("start", step))
        out = real(directory, step, snapshot, progress)
        order.append(("end", step))
        return out

    monkeypatch.setattr(ck, "write_checkpoint", slow)
    for s in (1, 2, 3):
        c.save(s, _state(s))
    c.wait()
    assert order == [("start", 1), ("end", 1), ("start", 2), ("end", 2), ("start", 3), ("end", 3)]
    # The copy buffers are reused from save to save: each checkpoint still holds its own state.
    for s in (1, 2, 3):
        parts = read_checkpoint(tmp_path / "ckpt" / f"step_{s:06d}")
        assert torch.equal(parts["model"]["w"], _state(s)["model"]["w"])


def test_a_checkpoint_of_another_model_shape_is_refused_naming_the_parameter():
    small = GPT(ModelConfig(n_layer=1, n_head=2, n_embd=16, block_size=8))
    wide = GPT(ModelConfig(n_layer=1, n_head=2, n_embd=32, block_size=8))
    with pytest.raises(RefusedError) as e:
        check_model_compatible(small.state_dict(), wide)
    assert "`wte.weight`" in e.value.message and "(256, 16)" in e.value.message and "(256, 32)" in e.value.message
    deeper = GPT(ModelConfig(n_layer=2, n_head=2, n_embd=16, block_size=8))
    with pytest.raises(RefusedError, match="blocks.1"):
        check_model_compatible(small.state_dict(), deeper)
