"""A framework's configuration as plain JSON: what an event may hold, whatever the framework handed over."""

from __future__ import annotations

import math
from typing import Any

MAX_DEPTH = 6
"""Nesting kept; deeper values are kept as their text."""
MAX_TEXT = 2000
"""Characters kept of a value written as text (a long repr, a path list)."""
MAX_ITEMS = 2000
"""Keys or list items kept at one level; the rest are counted, not kept."""


def plain_mapping(values: dict[Any, Any]) -> dict[str, Any]:
    """`values` with string keys and plain values (numbers, text, booleans, None, lists, dicts), sorted by key.

    Enums become their value, non-finite floats their text ("nan"), anything
    else its `str()`: a record must be JSON and must not depend on the
    framework's classes to be read.
    """
    return _plain(values, 0)  # type: ignore[return-value]


def _plain(value: Any, depth: int) -> Any:
    if value is None or isinstance(value, (bool, int, str)):
        return value if not isinstance(value, str) else value[:MAX_TEXT]
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if hasattr(value, "value") and type(value).__module__ != "builtins" and hasattr(type(value), "__members__"):
        return _plain(value.value, depth)  # an Enum (IntervalStrategy.STEPS -> "steps")
    if depth >= MAX_DEPTH:
        return str(value)[:MAX_TEXT]
    if isinstance(value, dict):
        items = sorted(((str(k), v) for k, v in value.items()), key=lambda kv: kv[0])
        out = {k: _plain(v, depth + 1) for k, v in items[:MAX_ITEMS]}
        if len(items) > MAX_ITEMS:
            out["…"] = f"{len(items) - MAX_ITEMS} more keys not kept"
        return out
    if isinstance(value, (list, tuple, set, frozenset)):
        seq = list(value) if not isinstance(value, (set, frozenset)) else sorted(value, key=str)
        return [_plain(v, depth + 1) for v in seq[:MAX_ITEMS]]
    return str(value)[:MAX_TEXT]
