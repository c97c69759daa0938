"""What may change while a run trains: the one allow-list of live settings, and checks on a requested value.

`logbook set` checks a request against it before writing the request file,
and the trainer (`trainer/live_control.py`) checks it again before applying
it, so both sides enforce the same keys, types and ranges. This module needs
nothing but the errors, so `logbook set --help` can list the settings
without loading the rest of the library.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from logbook.core.errors import UsageError, did_you_mean

MAX_REASON_CHARS = 2000
WEIGHTS_PREFIX = "data.weights."
_SOURCE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")


@dataclass(frozen=True)
class Setting:
    """One key that may change while a run is training."""

    key: str
    """Public name, as typed after `logbook set RUN`."""
    kind: type
    """`float` or `int`; ints are refused where a float was expected only if not whole."""
    lo: float | None
    """Lowest allowed value (None: unbounded)."""
    hi: float | None
    """Highest allowed value (None: unbounded)."""
    path: str
    """Where the value lives: a dotted path into the training config, or `live.<name>`
    for a runtime multiplier the trainer keeps outside the config."""
    doc: str
    """What changing it does, for help texts and error messages."""
    lo_open: bool = False
    """True when `lo` itself is not allowed (a strictly positive value)."""

    def describe_range(self) -> str:
        lo = "-inf" if self.lo is None else _fmt(self.lo)
        hi = "inf" if self.hi is None else _fmt(self.hi)
        return f"{'(' if self.lo_open else '['}{lo}, {hi}]"


def _fmt(x: float) -> str:
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e15 else repr(float(x))


_SETTINGS_LIST = [
    Setting("lr_scale", float, 0.0, 10.0, "live.lr_scale", "multiplier over the learning-rate schedule", lo_open=True),
    Setting("lr", float, 0.0, 1.0, "optim.lr", "peak learning rate of the schedule (AdamW's parameters)", lo_open=True),
    Setting("muon_lr", float, 0.0, 1.0, "optim.muon_lr", "peak learning rate of Muon's parameters", lo_open=True),
    Setting("weight_decay", float, 0.0, 1.0, "optim.weight_decay", "decoupled weight decay of the parameters that decay"),
    Setting("grad_clip", float, 0.0, 1e4, "optim.grad_clip", "gradient-norm clipping threshold (0 only measures it)"),
    Setting("guard.spike_sigma", float, 1.0, 1000.0, "guard.spike_sigma", "loss spike threshold in robust sigmas"),
    Setting("guard.grad_norm_sigma", float, 1.0, 1000.0, "guard.grad_norm_sigma", "gradient-norm spike threshold in robust sigmas of its log"),
    Setting("guard.window", int, 8, 100_000, "guard.window", "steps in the rolling window of the spike detector"),
    Setting("guard.warmup", int, 0, None, "guard.warmup", "observations before spikes are judged"),
    Setting("guard.cooldown", int, 0, None, "guard.cooldown", "steps after a counted spike in which further spikes are not counted"),
    Setting("guard.rollback_after", int, 1, 1000, "guard.rollback_after", "counted spikes within the rollback window that trigger a rollback"),
    Setting("guard.rollback_window", int, 1, None, "guard.rollback_window", "steps over which spikes are counted"),
    Setting("guard.rollback_steps", int, 0, None, "guard.rollback_steps", "least distance from the first spike back to the checkpoint rolled back to"),
    Setting("guard.skip_batches", int, 0, None, "guard.skip_batches", "batches skipped from the spike's batch after a rollback"),
    Setting("guard.lr_factor", float, 0.0, 1.0, "guard.lr_factor", "learning-rate multiplier applied at each rollback", lo_open=True),
    Setting("guard.max_rollbacks", int, 0, 1000, "guard.max_rollbacks", "rollbacks allowed before the run is aborted"),
    Setting("checkpoint.every", int, 1, None, "checkpoint.every", "steps between checkpoints"),
    Setting("train.eval_every", int, 0, None, "train.eval_every", "steps between evaluations (0: only at the end)"),
    Setting(WEIGHTS_PREFIX + "<source>", float, 0.0, 1e6, "live.data.weights", "sampling weight of one data source in the mixture"),
]
SETTINGS: dict[str, Setting] = {s.key: s for s in _SETTINGS_LIST}
"""The allow-list: every key `logbook set` accepts and the trainer applies."""


def setting_for(key: str) -> Setting:
    """The allow-list entry for `key`; unknown keys name the closest valid one."""
    if key in SETTINGS and not key.endswith("<source>"):
        return SETTINGS[key]
    if key.startswith(WEIGHTS_PREFIX):
        source = key[len(WEIGHTS_PREFIX):]
        if not _SOURCE_RE.match(source):
            raise UsageError(f"invalid data source name {source!r} in `{key}`",
                             hint="write data.weights.<source>=x with the source's name from the run's config")
        return SETTINGS[WEIGHTS_PREFIX + "<source>"]
    hint = did_you_mean(key, list(SETTINGS), "see `logbook set --help` for the keys that can change live", cutoff=0.5)
    raise UsageError(f"`{key}` cannot be changed live (not in the allow-list)", hint=hint)


def config_path(key: str) -> str:
    """The dotted config path a key writes to (`live.<name>` for runtime multipliers)."""
    s = setting_for(key)
    return "live." + key if key.startswith(WEIGHTS_PREFIX) else s.path


def coerce_value(key: str, value: Any) -> int | float:
    """Check a value's type and range for `key`; strings (from the CLI) are parsed first."""
    s = setting_for(key)
    if isinstance(value, str):
        value = _parse_number(key, value.strip(), s.kind)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise UsageError(f"`{key}` needs a number, got {_show(value)}")
    if isinstance(value, float) and not math.isfinite(value):
        raise UsageError(f"`{key}` must be finite, got {value}")
    if s.kind is int:
        if isinstance(value, float) and not value.is_integer():
            raise UsageError(f"`{key}` needs a whole number, got {value}")
        value = int(value)
    else:
        try:
            value = float(value)
        except OverflowError:  # an integer beyond any float
            raise UsageError(f"`{key}` = {_show(value)} is out of range: allowed {s.describe_range()}") from None
    if not _in_range(s, value):
        raise UsageError(f"`{key}` = {value} is out of range: allowed {s.describe_range()}",
                         hint=f"{key}: {s.doc}")
    return value


def _parse_number(key: str, text: str, kind: type) -> int | float:
    try:
        value = float(text)
    except ValueError:
        raise UsageError(f"`{key}` needs {'a whole number' if kind is int else 'a number'}, got {text!r}") from None
    if kind is int and math.isfinite(value):
        if not value.is_integer():
            raise UsageError(f"`{key}` needs a whole number, got {text!r}")
        return int(value)
    return value


def _in_range(s: Setting, v: float) -> bool:
    if s.lo is not None and (v < s.lo or (s.lo_open and v == s.lo)):
        return False
    return s.hi is None or v <= s.hi


def _show(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def parse_assignment(text: str) -> tuple[str, int | float]:
    """`key=value` from the command line, checked against the allow-list."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise UsageError(f"expected key=value, got {text!r}", hint="for example: logbook set RUN lr=3e-4 --reason '...'")
    return key, coerce_value(key, raw)


def validate_changes(changes: Any) -> dict[str, int | float]:
    """A request's changes, each checked; raises UsageError naming the first bad one."""
    if not isinstance(changes, Mapping) or not changes:
        raise UsageError("a change request needs at least one key=value")
    out: dict[str, int | float] = {}
    for key, value in changes.items():
        if not isinstance(key, str):
            raise UsageError(f"change keys must be strings, got {_show(key)}")
        out[key] = coerce_value(key, value)
    return out


def check_reason(reason: Any) -> str:
    if not isinstance(reason, str) or not reason.strip():
        raise UsageError("a change needs a reason", hint="add --reason 'why this change' (it goes into the chronicle)")
    if len(reason) > MAX_REASON_CHARS:
        raise UsageError(f"the reason is longer than {MAX_REASON_CHARS} characters")
    return reason.strip()
