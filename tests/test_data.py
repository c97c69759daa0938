"""Corpora, the staged mixture and the resumable batch stream."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from logbook.core.errors import RefusedError, UsageError
from trainer.config import DataConfig, PhaseConfig, SourceConfig
from trainer.nn.data import Corpus, DataStream, load_corpus, stdlib_files


def _corpus(name: str, fill: int, n: int = 4000) -> Corpus:
    arr = np.full(n, fill, dtype=np.uint8)
    return Corpus(name, arr, arr[: n // 4].copy(), fingerprint=f"fp-{name}")


def _stream(corpora=None, cfg=None, **kw) -> DataStream:
    args = dict(seed=7, block_size=16, batch_size=4, total_steps=100, rank=0)
    args.update(kw)
    return DataStream(corpora or [_corpus("a", 1)], cfg or DataConfig(), **args)


def test_stdlib_corpus_is_deterministic_capped_and_cached(tmp_path):
    cfg = DataConfig(cache_dir=str(tmp_path / "cache"))
    src = SourceConfig(name="stdlib", kind="stdlib", max_mb=0.3)
    a = load_corpus(src, tmp_path, cfg)
    assert len(a.train) + len(a.val) == 300_000
    assert len(list((tmp_path / "cache").glob("corpus-*/train.bin"))) == 1
    b = load_corpus(src, tmp_path, cfg)  # from the cache this time
    assert a.fingerprint == b.fingerprint and np.array_equal(a.train, b.train) and np.array_equal(a.val, b.val)
    assert len(a.val) > 0 and a.train.dtype == np.uint8


def test_stdlib_files_are_sorted_and_leave_site_packages_out():
    _, files = stdlib_files()
    assert files == sorted(files) and len(files) > 100
    assert not any("site-packages" in f for f in files)
    assert "os.py" in files


def test_a_folder_of_text_splits_train_and_val_by_file(tmp_path):
    folder = tmp_path / "texts"
    folder.mkdir()
    for i in range(200):
        (folder / f"doc{i:03d}.txt").write_text(f"<{i:03d}>" * 20)
    c = load_corpus(SourceConfig(name="t", kind="text", path="texts", max_mb=0), tmp_path,
                    DataConfig(val_fraction=0.1, cache_dir=str(tmp_path / "cache")))
    train_docs = set(bytes(c.train).decode().split("\n")) - {""}
    val_docs = set(bytes(c.val).decode().split("\n")) - {""}
    assert val_docs and train_docs and not train_docs & val_docs
    assert len(train_docs) + len(val_docs) == 200


def test_bin_token_files_are_memory_mapped(tmp_path):
    folder = tmp_path / "owt"
    folder.mkdir()
    np.arange(5000, dtype=np.uint16).tofile(folder / "train.bin")
    np.arange(500, dtype=np.uint16).tofile(folder / "val.bin")
    c = load_corpus(SourceConfig(name="owt", kind="bin", path=str(folder)), tmp_path, DataConfig())
    assert isinstance(c.train, np.memmap) and c.train.dtype == np.uint16 and len(c.train) == 5000
    x, y = _stream([c], block_size=8).batch(1)
    assert torch.equal(x[:, 1:], y[:, :-1]) and torch.all(y - x == 1)


@pytest.mark.parametrize("kind", ["text", "bin"])
def test_a_missing_data_path_is_a_usage_error(tmp_path, kind):
    with pytest.raises(UsageError) as e:
        load_corpus(SourceConfig(name="x", kind=kind, path="no/such/place"), tmp_path, DataConfig())
    assert "no/such/place does not exist" in e.value.message and "project root" in e.value.hint


def test_batches_are_a_pure_function_of_seed_batch_rank_and_micro():
    s = _stream([_corpus("a", 1, 5000)])
    s.corpora[0].train[:] = np.arange(5000) % 251
    x1, y1 = s.batch(5, 0)
    assert torch.equal(x1, s.batch(5, 0)[0]) and torch.equal(x1, _stream(s.corpora).batch(5, 0)[0])
    assert not torch.equal(x1, s.batch(6, 0)[0])
    assert not torch.equal(x1, s.batch(5, 1)[0])
    assert not torch.equal(x1, _stream(s.corpora, rank=1).batch(5, 0)[0])
    assert not torch.equal(x1, _stream(s.corpora, seed=8).batch(5, 0)[0])
    assert x1.shape == (4, 16) and torch.equal(x1[:, 1:], y1[:, :-1])


def test_the_skip_list_passes_over_batches_and_survives_a_state_round_trip():
    s = _stream()
    assert [s.take() for _ in range(3)] == [1, 2, 3]
    s.add_skip(5, 7)
    assert [s.take() for _ in range(3)] == [4, 8, 9]
    again = _stream()
    again.load_state_dict(s.state_dict())
    assert again.skip == [[5, 7]] and again.take() == 10


def test_phases_switch_the_mixture_at_their_step_fraction():
    cfg = DataConfig(sources=[SourceConfig(name="a"), SourceConfig(name="b")],
                     phases=[PhaseConfig(until=0.5, weights={"a": 1.0}), PhaseConfig(until=1.0, weights={"b": 1.0})])
    s = _stream([_corpus("a", 1), _corpus("b", 2)], cfg)
    assert torch.all(s.batch(50)[0] == 1)
    assert torch.all(s.batch(51)[0] == 2)
    assert torch.all(s.val_batch(0)[0] == 2)  # validation uses the final mixture


def test_equal_weights_mix_every_source_without_phases():
    s = _stream([_corpus("a", 1), _corpus("b", 2)], DataConfig(sources=[SourceConfig(name="a"), SourceConfig(name="b")]),
                batch_size=64)
    rows = s.batch(3)[0][:, 0]
    assert set(rows.tolist()) == {1, 2}


def test_resuming_on_a_different_corpus_is_refused():
    saved = _stream().state_dict()
    other = _stream([Corpus("a", np.ones(4000, np.uint8), np.ones(500, np.uint8), fingerprint="another")])
    with pytest.raises(RefusedError) as e:
        other.load_state_dict(saved)
    assert "differs from the one the checkpoint was trained on" in e.value.message


def test_a_split_shorter_than_a_block_is_a_usage_error():
    tiny = Corpus("t", np.ones(10, np.uint8), np.ones(10, np.uint8), "fp")
    with pytest.raises(UsageError, match="block_size"):
        _stream([tiny])


def test_phase_weights_must_name_known_sources():
    from trainer.config import load_train_config

    with pytest.raises(UsageError) as e:
        load_train_config(None, ["data.phases=[{until: 1.0, weights: {stdlb: 1.0}}]"])
    assert "data.phases.0.weights.stdlb" in e.value.message and "stdlib" in e.value.message


def test_live_weight_overrides_replace_the_phase_weights_and_are_saved():
    cfg = DataConfig(sources=[SourceConfig(name="a"), SourceConfig(name="b")])
    s = _stream([_corpus("a", 1), _corpus("b", 2)], cfg)
    s.set_weight_overrides({"a": 0.0})
    assert torch.all(s.batch(3)[0] == 2) and list(s.weights_at(3)) == [0.0, 1.0]
    again = _stream([_corpus("a", 1), _corpus("b", 2)], cfg)
    again.load_state_dict(s.state_dict())
    assert torch.equal(again.batch(3)[0], s.batch(3)[0])
    with pytest.raises(ValueError, match="no data source 'c'"):
        s.set_weight_overrides({"c": 1.0})
    s.set_weight_overrides({})
    assert set(s.batch(3)[0][:, 0].tolist()) <= {1, 2} and list(s.weights_at(3)) == [0.5, 0.5]
