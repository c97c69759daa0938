"""The training config: typed sections, errors that name the key, overrides, the hash."""

from __future__ import annotations

import ast
import dataclasses
import json
import subprocess
import sys

import pytest
from conftest import ROOT

from logbook.core.errors import UsageError
from trainer import config as C
from trainer.config import TrainConfig, config_from_dict, config_hash, config_to_dict, load_train_config


def _write(tmp_path, text: str):
    p = tmp_path / "cfg.yaml"
    p.write_text(text)
    return p


@pytest.mark.parametrize("name", ["tiny-cpu.yaml", "gpt2-124m.yaml", "micro-test.yaml"])
def test_shipped_configs_load_and_validate(name):
    cfg = load_train_config(ROOT / "configs" / name)
    assert isinstance(cfg, TrainConfig)


def test_gpt2_config_has_the_gpt2_small_shape():
    m = load_train_config(ROOT / "configs" / "gpt2-124m.yaml").model
    assert (m.n_layer, m.n_head, m.n_embd, m.block_size) == (12, 12, 768, 1024)


def test_unknown_key_in_a_file_names_its_path_and_suggests_the_closest(tmp_path):
    with pytest.raises(UsageError) as e:
        load_train_config(_write(tmp_path, "optim:\n  lrr: 0.1\n"))
    assert "`optim.lrr`" in e.value.message
    assert "optim.lr" in e.value.hint


def test_unknown_section_suggests_the_closest(tmp_path):
    with pytest.raises(UsageError) as e:
        load_train_config(_write(tmp_path, "optimizer:\n  lr: 0.1\n"))
    assert "`optimizer`" in e.value.message and "optim" in e.value.hint


def test_unknown_key_in_an_override_suggests_the_closest():
    with pytest.raises(UsageError) as e:
        load_train_config(None, ["train.stpes=5"])
    assert "`train.stpes`" in e.value.message and "train.steps" in e.value.hint


def test_unknown_key_inside_a_list_item_names_its_index(tmp_path):
    with pytest.raises(UsageError) as e:
        load_train_config(_write(tmp_path, "faults:\n  - {kind: sigkill, stepp: 3}\n"))
    assert "`faults.0.stepp`" in e.value.message and "faults.0.step" in e.value.hint


@pytest.mark.parametrize("override, key", [
    ("optim.lr=fast", "optim.lr"),
    ("train.steps=1.5", "train.steps"),
    ("model.qk_norm=3", "model.qk_norm"),
    ("train.steps=true", "train.steps"),
    ("data.sources=nope", "data.sources"),
])
def test_a_value_of_the_wrong_type_names_its_key(override, key):
    with pytest.raises(UsageError) as e:
        load_train_config(None, [override])
    assert f"`{key}`" in e.value.message


@pytest.mark.parametrize("override, key", [
    ("model.n_head=3", "model.n_head"),
    ("train.device=tpu", "train.device"),
    ("optim.name=sgd", "optim.name"),
    ("train.steps=0", "train.steps"),
    ("faults=[{kind: hang, step: 3}]", "faults.0.kind"),
    ("faults=[{kind: exception, step: 99999}]", "faults.0.step"),
])
def test_a_value_out_of_range_names_its_key(override, key):
    with pytest.raises(UsageError) as e:
        load_train_config(None, [override])
    assert f"`{key}`" in e.value.message


def test_overrides_are_yaml_scalars_lists_and_indexed_paths():
    cfg = load_train_config(None, ["optim.lr=3e-4", "train.compile=true", "data.sources.0.max_mb=1",
                                   "faults=[{kind: sigkill, step: 3}]", "optim.betas=[0.8, 0.9]"])
    assert cfg.optim.lr == pytest.approx(3e-4) and isinstance(cfg.optim.lr, float)
    assert cfg.train.compile is True
    assert cfg.data.sources[0].max_mb == 1.0
    assert cfg.faults[0].kind == "sigkill" and cfg.faults[0].attempt == 1
    assert cfg.optim.betas == [0.8, 0.9]


def test_an_override_that_is_not_key_value_is_refused():
    with pytest.raises(UsageError) as e:
        load_train_config(None, ["optim.lr"])
    assert "key.sub=value" in e.value.message


def test_file_values_merge_onto_the_defaults(tmp_path):
    cfg = load_train_config(_write(tmp_path, "model:\n  n_layer: 3\nfaults:\n"))
    assert cfg.model.n_layer == 3 and cfg.model.n_embd == TrainConfig().model.n_embd and cfg.faults == []


def test_config_hash_follows_values_not_key_order(tmp_path):
    a = load_train_config(_write(tmp_path, "model: {n_layer: 3, n_embd: 64}\n"))
    b = load_train_config(None, ["model.n_embd=64", "model.n_layer=3"])
    assert config_hash(a) == config_hash(b)
    assert config_hash(a) != config_hash(load_train_config(None, ["model.n_embd=64", "model.n_layer=3", "optim.lr=0.002"]))


def test_config_round_trips_through_a_plain_dict():
    cfg = load_train_config(ROOT / "configs" / "tiny-cpu.yaml", ["faults=[{kind: sigterm, step: 4}]"])
    again = config_from_dict(json.loads(json.dumps(config_to_dict(cfg))))
    assert again == cfg and config_hash(again) == config_hash(cfg)


def test_every_config_field_has_a_docstring():
    tree = ast.parse((ROOT / "trainer" / "config.py").read_text())
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    for cls in (c for c in vars(C).values() if dataclasses.is_dataclass(c) and c.__module__ == C.__name__):
        body = classes[cls.__name__].body
        for i, node in enumerate(body):
            if isinstance(node, ast.AnnAssign):
                nxt = body[i + 1] if i + 1 < len(body) else None
                documented = isinstance(nxt, ast.Expr) and isinstance(getattr(nxt, "value", None), ast.Constant)
                assert documented, f"{cls.__name__}.{node.target.id} has no docstring"


def test_print_config_validates_without_importing_torch():
    code = ("import sys\nfrom trainer.__main__ import main\n"
            f"rc = main(['--print-config', {str(ROOT / 'configs' / 'tiny-cpu.yaml')!r}, 'train.steps=7'])\n"
            "print('TORCH' if 'torch' in sys.modules else 'NO-TORCH', rc)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    resolved = json.loads(out[: out.rindex("}") + 1])
    assert resolved["config"]["train"]["steps"] == 7 and len(resolved["config_hash"]) == 64
    assert out.strip().endswith("NO-TORCH 0")


def test_the_entry_point_turns_a_config_error_into_exit_2_and_a_hint(capsys):
    from trainer.__main__ import main

    rc = main(["--project", ".", "--run", "r1", str(ROOT / "configs" / "micro-test.yaml"), "optim.lrr=1"])
    err = capsys.readouterr().err
    assert rc == 2
    assert "error: config: unknown key `optim.lrr`" in err and "hint: did you mean `optim.lr`?" in err
