"""The one typed-config reader (logbook/core/typedconfig.py): typing, layers, overrides and dotted paths."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from logbook.core.errors import UsageError
from logbook.core.typedconfig import get_path, has_path, merge, read_typed, resolve, set_path


@dataclass
class Item:
    name: str = "a"
    weight: float = 1.0


@dataclass
class Section:
    steps: int = 3
    lr: float = 0.1
    flag: bool = False
    note: str | None = None
    items: list[Item] = field(default_factory=lambda: [Item()])
    weights: dict[str, float] = field(default_factory=dict)


@dataclass
class Root:
    section: Section = field(default_factory=Section)


def _error(fn, *args, **kwargs) -> UsageError:
    with pytest.raises(UsageError) as e:
        fn(*args, **kwargs)
    return e.value


def test_nested_sections_lists_optionals_and_dicts_are_typed():
    cfg = read_typed(Root, {"section": {"lr": 1, "note": None, "items": [{"name": "b", "weight": "1e-3"}],
                                        "weights": {"b": 2}}})
    assert cfg.section.lr == 1.0 and isinstance(cfg.section.lr, float)
    assert cfg.section.items == [Item("b", 0.001)] and cfg.section.weights == {"b": 2.0}
    assert cfg.section.steps == 3 and cfg.section.note is None


@pytest.mark.parametrize("raw, message", [
    ({"section": {"steps": True}}, "config: `section.steps` must be int, got True"),
    ({"section": {"flag": 1}}, "config: `section.flag` must be bool, got 1"),
    ({"section": {"lr": "1e400"}}, "config: `section.lr` must be a finite number, got '1e400'"),
    ({"section": {"lr": 10**400}}, "config: `section.lr` must be a finite number, got " + str(10**400)),
    ({"section": {"items": {"name": "x"}}}, "config: `section.items` must be a list, got {'name': 'x'}"),
    ({"section": {"items": [{"weight": "heavy"}]}}, "config: `section.items.0.weight` must be float, got 'heavy'"),
    ({"section": 5}, "config: `section` must be a mapping of keys, got 5"),
    ([1], "config: `the config` must be a mapping of keys, got [1]"),
])
def test_a_value_of_the_wrong_type_names_its_key_path(raw, message):
    assert _error(read_typed, Root, raw).message == message


def test_an_unknown_key_names_its_path_and_the_closest_valid_key():
    e = _error(read_typed, Root, {"section": {"step": 1}})
    assert e.message == "config: unknown key `section.step`" and e.hint == "did you mean `section.steps`?"


def test_layers_merge_mappings_key_by_key_and_replace_lists():
    assert merge({"a": {"x": 1, "y": 2}, "l": [1, 2]}, {"a": {"y": 3}, "l": [9]}) == {"a": {"x": 1, "y": 3}, "l": [9]}
    assert merge({"l": [1]}, {"l": None}) == {"l": [1]}  # an empty section means the default


def test_resolve_applies_layers_then_overrides():
    cfg = resolve(Root, {"section": {"steps": 5, "lr": 0.5}}, overrides=["section.steps=7", "section.items.0.name=z"])
    assert (cfg.section.steps, cfg.section.lr, cfg.section.items[0].name) == (7, 0.5, "z")


@pytest.mark.parametrize("override, message", [
    ("section.items.3.name=z", "config: `section.items.3`: index 3 is out of range (the list has 1 items)"),
    ("section.lr.x=1", "config: `section.lr.x` cannot be set: its parent is not a section"),
    ("section.lr.x.y=1", "config: `section.lr.x` cannot be set: its parent is not a section"),
    ("section.stesp=1", "config: unknown key `section.stesp`"),
    ("section.lr", "override 'section.lr' is not key.sub=value"),
])
def test_a_bad_override_is_one_usage_error_naming_the_key(override, message):
    assert _error(resolve, Root, overrides=[override]).message == message


def test_dotted_paths_reach_into_dataclasses_mappings_and_lists():
    cfg = Root()
    assert get_path(cfg, "section.items.0.name") == "a"
    assert has_path(cfg, "section.lr") and not has_path(cfg, "section.nope") and not has_path(cfg, "section.items.5")
    set_path(cfg, "section.lr", 2)
    assert cfg.section.lr == 2.0 and isinstance(cfg.section.lr, float)  # a float setting stays a float
    set_path(cfg, "section.weights", {"a": 1.0})
    set_path(cfg, "section.weights.a", 3)
    assert cfg.section.weights == {"a": 3.0}
