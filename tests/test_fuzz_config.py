"""Fuzzing config loading: any YAML document or override gives a config or one UsageError, never a traceback.

Three sources of input: random text (mostly not YAML at all), random YAML
documents (nested mappings, lists and scalars of every type), and documents
built on the real sections and keys with random values, which get past the
unknown-key check into typing and validation. The same goes for
`logbook.yaml` and for `key.sub=value` overrides.
"""

from __future__ import annotations

import dataclasses

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from logbook.core.errors import UsageError
from logbook.core.settings import LogbookConfig, load_config
from trainer.config import TrainConfig, load_train_config

FUZZ = settings(max_examples=150, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

_scalar = st.one_of(
    st.none(), st.booleans(), st.integers(-10**400, 10**400), st.integers(-5, 1000),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
    st.sampled_from(["1e-3", "3e400", "-0", "cpu", "cuda", "auto", "stdlib", "adamw", "muon", "cosine", "wsd",
                     "bfloat16", "nan", ".inf", "~", "yes", "0x1F", "1_000", "2026-11-30"]),
)
_value = st.recursive(_scalar, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                        st.dictionaries(st.text(max_size=8), inner, max_size=3)),
                      max_leaves=8)


def _sections(cls) -> dict[str, list[str]]:
    return {f.name: [g.name for g in dataclasses.fields(f.type if isinstance(f.type, type) else _resolve(cls, f.name))]
            if dataclasses.is_dataclass(_resolve(cls, f.name)) else [] for f in dataclasses.fields(cls)}


def _resolve(cls, name: str):
    import typing

    return typing.get_type_hints(cls)[name]


SECTIONS = _sections(TrainConfig)
_known_doc = st.dictionaries(
    st.sampled_from(sorted(SECTIONS)),
    st.one_of(_value, st.deferred(lambda: st.just(None)),
              st.sampled_from(sorted(SECTIONS)).flatmap(
                  lambda sec: st.dictionaries(st.sampled_from(SECTIONS[sec] or ["x"]), _value, max_size=4))),
    max_size=4,
)


def _dump(doc) -> str:
    return yaml.safe_dump(doc, allow_unicode=True, sort_keys=False)


def _load_train(tmp_path, text: str) -> None:
    path = tmp_path / "fuzz.yaml"
    path.write_text(text, encoding="utf-8")
    try:
        cfg = load_train_config(path)
    except UsageError as e:
        assert e.message
        return
    assert isinstance(cfg, TrainConfig)


@FUZZ
@given(st.text(max_size=300))
def test_random_text_as_a_training_config_loads_or_is_one_usage_error(tmp_path, text):
    _load_train(tmp_path, text)


@FUZZ
@given(_value)
def test_random_yaml_documents_as_a_training_config_load_or_are_one_usage_error(tmp_path, doc):
    _load_train(tmp_path, _dump(doc))


@FUZZ
@given(_known_doc)
def test_real_keys_with_random_values_load_or_are_one_usage_error(tmp_path, doc):
    _load_train(tmp_path, _dump(doc))


@FUZZ
@given(st.lists(st.one_of(
    st.text(max_size=40),
    st.tuples(st.sampled_from([f"{s}.{k}" for s, keys in SECTIONS.items() for k in keys] + ["faults.0.kind", "x.y"]),
              st.sampled_from(["=", "=="]), _scalar.map(lambda v: yaml.safe_dump(v).strip().removesuffix("..."))
              ).map(lambda t: "".join(t).strip()),
), max_size=4))
def test_random_overrides_apply_or_are_one_usage_error(overrides):
    try:
        cfg = load_train_config(None, overrides)
    except UsageError as e:
        assert e.message
        return
    assert isinstance(cfg, TrainConfig)


_logbook_doc = st.one_of(
    _value,
    st.dictionaries(st.sampled_from([f.name for f in dataclasses.fields(LogbookConfig)] + ["milestone"]), _value,
                    max_size=4),
)


@FUZZ
@given(st.one_of(st.text(max_size=200), _logbook_doc.map(_dump)))
def test_random_logbook_yaml_loads_or_is_one_usage_error(tmp_path, text):
    path = tmp_path / "logbook.yaml"
    path.write_text(text, encoding="utf-8")
    try:
        cfg = load_config(path)
    except UsageError as e:
        assert e.message
        return
    assert isinstance(cfg, LogbookConfig)
    cfg.validate()


def _float_keys() -> list[str]:
    import typing

    out = []
    for section, keys in SECTIONS.items():
        hints = typing.get_type_hints(_resolve(TrainConfig, section)) if keys else {}
        out += [f"{section}.{k}" for k in keys if hints.get(k) is float]
    return out


@FUZZ
@given(st.sampled_from(_float_keys()), st.sampled_from([".inf", "-.inf", ".nan", "1e400", "-1e999", "9" * 400]))
def test_a_non_finite_number_is_refused_for_every_float_setting(key, value):
    try:
        load_train_config(None, [f"{key}={value}"])
    except UsageError as e:
        assert key in e.message
        return
    raise AssertionError(f"{key}={value} was accepted")
