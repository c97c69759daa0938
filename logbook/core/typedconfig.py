"""Typed config: plain YAML values into a tree of dataclasses, layers merged, `a.b=c` overrides, dotted paths.

One reader for every config the project types: the bundled trainer's
`TrainConfig` (through `logbook.api`) and the checks of `logbook.yaml`. A
dataclass's type hints are the schema: nested dataclasses, `X | None`,
`list[X]`, `dict[str, X]`, and the scalars bool, int, float and str. Errors are
`UsageError`s that name the key path (`optim.lr`, `data.sources.0.kind`) and,
for an unknown key, the closest valid one.

Scalars are strict where YAML is loose: a bool is never an int, a float setting
takes an int or YAML 1.1's dotless `1e-3` (which YAML reads as a string) but
never `.inf`, `.nan` or `1e400`, which no setting means. Imports no torch.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from logbook.core.errors import UsageError, did_you_mean
from logbook.core.yamlsafe import load_training_config  # noqa: F401 - a loop reads its file with it, then `resolve`s it
from logbook.core.yamlsafe import load_yaml_text

T = typing.TypeVar("T")
UnknownKey = Callable[[str, str, list[str]], UsageError]
"""(key, path of its parent, valid names) -> the error for a key no field has."""


# --- reading plain values into dataclasses -------------------------------------


def field_names(cls: Any) -> list[str]:
    """The names of a dataclass's fields, in order."""
    return [f.name for f in dataclasses.fields(cls)]


def unknown_key(key: str, path: str, names: list[str], *, source: str = "config", noun: str = "key",
                known: str = "valid keys here") -> UsageError:
    """The error for a key no field has: "{source}: unknown {noun} `a.b`", with the closest name as its hint.

    The defaults are the training config's words; `logbook.yaml` calls its keys settings.
    """
    full = f"{path}.{key}" if path else str(key)
    hint = did_you_mean(key, names, f"{known}: {', '.join(names)}", prefix=f"{path}." if path else "")
    return UsageError(f"{source}: unknown {noun} `{full}`", hint=hint)


def reject_unknown_keys(raw: Mapping[Any, Any], cls: Any, path: str = "", on_unknown: UnknownKey = unknown_key) -> None:
    """Raise `on_unknown`'s error for the first key of `raw` that is not a field of dataclass `cls`."""
    names = field_names(cls)
    for key in raw:
        if key not in names:
            raise on_unknown(str(key), path, names)


def read_typed(cls: type[T], raw: Any, path: str = "") -> T:
    """`raw` (a mapping, as YAML or JSON gives it) as an instance of dataclass `cls`; missing keys take defaults."""
    if not isinstance(raw, dict):
        raise UsageError(f"config: `{path or 'the config'}` must be a mapping of keys, got {raw!r}")
    reject_unknown_keys(raw, cls, path)
    hints = typing.get_type_hints(cls)
    kwargs = {k: convert(v, hints[k], f"{path}.{k}" if path else k) for k, v in raw.items()}
    return cls(**kwargs)


def convert(value: Any, tp: Any, path: str) -> Any:
    """`value` as type `tp`, or a UsageError naming `path`."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return convert(value, inner[0], path)
    if dataclasses.is_dataclass(tp):
        return read_typed(tp, value, path)
    if origin is list:
        if not isinstance(value, list):
            raise UsageError(f"config: `{path}` must be a list, got {value!r}")
        (item,) = typing.get_args(tp)
        return [convert(v, item, f"{path}.{i}") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise UsageError(f"config: `{path}` must be a mapping, got {value!r}")
        _, vt = typing.get_args(tp)
        return {str(k): convert(v, vt, f"{path}.{k}") for k, v in value.items()}
    return _scalar(value, tp, path)


def is_scalar(value: Any, tp: type) -> bool:
    """Whether `value` is a `tp` as a setting means it: a bool is not an int, an int is a float."""
    if isinstance(value, bool):
        return tp is bool
    if tp is float:
        return isinstance(value, (int, float))
    return isinstance(value, tp)


def _scalar(value: Any, tp: Any, path: str) -> Any:
    if tp is float and not isinstance(value, bool):
        number = _as_float(value)
        if number is not None:
            if not math.isfinite(number):  # `.inf`, `1e400`, `.nan`: no setting means that
                raise UsageError(f"config: `{path}` must be a finite number, got {value!r}")
            return number
    elif tp in (bool, int, str) and is_scalar(value, tp):
        return value
    raise UsageError(f"config: `{path}` must be {_type_name(tp)}, got {value!r}")


def _as_float(value: Any) -> float | None:
    if isinstance(value, (int, float)):
        try:
            return float(value)
        except OverflowError:  # an integer beyond any float
            return math.inf
    if isinstance(value, str):  # YAML 1.1 reads `1e-3` (no dot) as a string
        try:
            return float(value)
        except ValueError:
            return None
    return None


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def to_plain(obj: Any) -> Any:
    """A dataclass as plain dicts and lists (JSON-ready); anything else as it is."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    return obj


# --- layers and overrides ---------------------------------------------------------


def merge(base: Any, over: Any) -> Any:
    """Mappings merge key by key; anything else (lists included) replaces."""
    if over is None and isinstance(base, (dict, list)):
        return base  # `faults:` with nothing under it means "the default"
    if isinstance(base, dict) and isinstance(over, dict):
        out = dict(base)
        for k, v in over.items():
            out[k] = merge(base[k], v) if k in base else v
        return out
    return over


def parse_override(text: str) -> tuple[list[str], Any]:
    """`optim.lr=3e-4` -> (["optim", "lr"], 0.0003); the value is a YAML scalar (or flow list/map)."""
    key, sep, value = text.partition("=")
    key = key.strip()
    if not sep or not key or any(not part for part in key.split(".")):
        raise UsageError(f"override {text!r} is not key.sub=value", hint="for example: optim.lr=3e-4 train.steps=100")
    return key.split("."), load_yaml_text(value, f"override {key}")


def resolve(cls: type[T], *layers: Mapping[str, Any] | None, overrides: Iterable[str] = ()) -> T:
    """`cls`'s defaults, each layer merged on top, then each `key.sub=value` override set; typed.

    A layer's unknown top-level keys are refused before it is merged, so a
    misspelt section in a file is named before any override is looked at. An
    override of an unknown key is refused, with a suggestion, when the result is
    typed.
    """
    raw: Any = dataclasses.asdict(cls())
    for layer in layers:
        if isinstance(layer, Mapping):
            reject_unknown_keys(layer, cls)
        raw = merge(raw, layer)
    for text in overrides:
        parts, value = parse_override(text)
        set_path(raw, parts, value, create=True)
    return read_typed(cls, raw)


# --- dotted paths --------------------------------------------------------------------


def get_path(obj: Any, path: str | list[str]) -> Any:
    """The value at `path` (`optim.lr`, `data.sources.0.name`) in dataclasses, mappings and lists.

    A missing key is a KeyError or AttributeError, an index past a list's end a UsageError.
    """
    parts = path.split(".") if isinstance(path, str) else path
    for i, part in enumerate(parts):
        obj = _child(obj, part, ".".join(parts[: i + 1]))
    return obj


def has_path(obj: Any, path: str | list[str]) -> bool:
    """Whether `get_path` finds a value at `path`."""
    try:
        get_path(obj, path)
    except (AttributeError, KeyError, TypeError, UsageError):
        return False
    return True


def set_path(obj: Any, path: str | list[str], value: Any, *, create: bool = False) -> None:
    """Set the value at `path`; a float stays a float when set to an int (config hashes and diffs stay stable).

    `create`: `obj` holds raw values, not yet typed (an override): missing
    mappings on the way are made, since unknown keys are reported when typed,
    and a scalar on the way is a UsageError.
    """
    parts = path.split(".") if isinstance(path, str) else path
    for i, part in enumerate(parts[:-1]):
        obj = _child(obj, part, ".".join(parts[: i + 1]), create=create)
    last, full = parts[-1], ".".join(parts)
    if create and not isinstance(obj, (list, Mapping)) and not dataclasses.is_dataclass(obj):
        raise UsageError(f"config: `{full}` cannot be set: its parent is not a section")
    if isinstance(obj, list):
        key: Any = _index(obj, last, full)
        current = obj[key]
    elif isinstance(obj, Mapping):
        key, current = last, obj.get(last)
    else:
        key, current = last, getattr(obj, last)
    if not create and isinstance(current, float) and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)  # a typed tree; raw values are typed (and an int too large refused) by `read_typed`
    if isinstance(obj, (list, dict)):
        obj[key] = value
    else:
        setattr(obj, key, value)


def _child(node: Any, part: str, path: str, *, create: bool = False) -> Any:
    if isinstance(node, list):
        return node[_index(node, part, path)]
    if isinstance(node, Mapping):
        if create and part not in node:
            node[part] = {}  # type: ignore[index]
        return node[part]
    if create and not dataclasses.is_dataclass(node):
        raise UsageError(f"config: `{path}` cannot be set: its parent is not a section")
    return getattr(node, part)


def _index(node: list, part: str, path: str) -> int:
    if not part.isdigit() or int(part) >= len(node):
        raise UsageError(f"config: `{path}`: index {part} is out of range (the list has {len(node)} items)")
    return int(part)


# --- checks of values, after typing ------------------------------------------------------


def validate_sections(cfg: Any) -> None:
    """Call `validate(key)` on each section of `cfg` that has one, and on each item of a list of sections.

    A section checks its own ranges and names its keys from `key` (`optim`,
    `faults.0`); what spans sections is for `cfg`'s own `validate` to check.
    """
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        items = enumerate(value) if isinstance(value, list) else [(None, value)]
        for i, item in items:
            if hasattr(item, "validate"):
                item.validate(f.name if i is None else f"{f.name}.{i}")


def check_config(ok: bool, key: str, message: str) -> None:
    """A config check: when not `ok`, a UsageError "config: `key` message"."""
    if not ok:
        raise UsageError(f"config: `{key}` {message}")


def check_positive(obj: Any, where: str, *names: str) -> None:
    """Each named field of `obj` is > 0."""
    for n in names:
        v = getattr(obj, n)
        check_config(v > 0, f"{where}.{n}", f"must be > 0, got {v}")


def check_nonnegative(obj: Any, where: str, *names: str) -> None:
    """Each named field of `obj` is >= 0."""
    for n in names:
        v = getattr(obj, n)
        check_config(v >= 0, f"{where}.{n}", f"must be >= 0, got {v}")


def check_choice(obj: Any, where: str, name: str, choices: Iterable[str]) -> None:
    """Field `name` of `obj` is one of `choices`."""
    choices = tuple(choices)
    v = getattr(obj, name)
    check_config(v in choices, f"{where}.{name}", f"must be one of {', '.join(choices)}; got {v!r}")


def suggest_name(name: str, names: list[str], what: str) -> str:
    """`what`, then the closest of `names` to `name` (or all of them): the tail of an unknown-name message."""
    return f"{what}; " + did_you_mean(name, names, f"known: {', '.join(names)}")
