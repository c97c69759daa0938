"""What a metric is called: the bundled set, the frameworks' names for it, and the metrics a preregistration declares.

Three kinds of name may appear in a prediction:

- **the bundled metrics** (`BUNDLED`): what the bundled trainer logs and the
  event log counts, each with its unit and range (`val_loss`, `spikes`, ...);
- **the frameworks' names** for them (`FRAMEWORK_NAMES`): Hugging Face's
  `eval_loss` and `learning_rate`, TensorBoard's `train/loss`, Lightning's
  `val/loss`, ... A prediction, the HF and Lightning callbacks and the
  TensorBoard reader all map a name through `canonical`, so `eval_loss@final`
  is `val_loss@final` wherever it is written. Any other `eval_*` name (what HF
  logs for each value `compute_metrics` returns: `eval_accuracy`, `eval_bleu`)
  is a metric of its own, under that name, with no unit or range known;
- **declared metrics**: a preregistration may name more
  (`--metric "bleu:higher:corpus BLEU on the dev set"`, or a `metrics:` list in
  its YAML), each with a direction (`higher` / `lower` is better) or a unit.
  The declarations are part of the hashed record, so they cannot change unseen.
  A unit of `fraction` bounds the metric to [0, 1], `percent` to [0, 100] and
  `count` makes it a whole number of at least 0; any other unit, or a
  direction, leaves its range unbounded: the logbook does not guess one.

Any other name is refused, with the closest known one as a hint.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from logbook.core.errors import UsageError


@dataclass(frozen=True)
class Metric:
    """A run metric a prediction may name."""

    name: str
    """Identifier used in predictions and in the metrics stream."""
    unit: str
    """Unit for people (`nats`, `count`, `fraction`, ...); empty when unknown."""
    lo: float
    """Smallest value the metric can take (inclusive; `-inf` when unbounded)."""
    hi: float
    """Largest value the metric can take (inclusive; `inf` when unbounded)."""
    integer: bool
    """True for counts: only whole numbers occur."""
    description: str
    """A noun phrase for people. Counts are cumulative up to the point checked."""
    direction: str | None = None
    """`higher` or `lower` (which way is better) where a declaration says so, else None."""


INF = math.inf
BUNDLED: dict[str, Metric] = {m.name: m for m in (
    Metric("val_loss", "nats", 0, INF, False, "validation loss (cross-entropy)"),
    Metric("loss", "nats", 0, INF, False, "training loss (cross-entropy)"),
    Metric("val_ppl", "perplexity", 1, INF, False, "validation perplexity, exp(val_loss)"),
    Metric("spikes", "count", 0, INF, True, "loss or gradient-norm spikes detected"),
    Metric("restarts", "count", 0, INF, True, "restarts after failures"),
    Metric("rollbacks", "count", 0, INF, True, "rollbacks to an earlier checkpoint"),
    Metric("lr_changes", "count", 0, INF, True, "learning-rate changes (by the guard or by hand)"),
    Metric("skipped_steps", "count", 0, INF, True, "optimizer updates skipped by the guard"),
    Metric("tokens_per_s", "tokens/s", 0, INF, False, "training throughput"),
    Metric("mfu", "fraction", 0, 1, False, "model FLOPs utilisation"),
    Metric("goodput", "fraction", 0, 1, False, "productive training time over wall time"),
    Metric("grad_norm", "L2 norm", 0, INF, False, "global gradient norm"),
    Metric("steps", "count", 0, INF, True, "optimizer steps completed"),
    Metric("tokens", "count", 0, INF, True, "training tokens consumed"),
    Metric("lr", "learning rate", 0, INF, False, "current learning rate"),
    Metric("wall_hours", "hours", 0, INF, False, "wall-clock time since the run started"),
)}
"""What the bundled trainer logs and the event log counts."""

FRAMEWORK_NAMES: dict[str, str] = {
    "eval_loss": "val_loss", "eval/loss": "val_loss", "val/loss": "val_loss",
    "learning_rate": "lr", "train/learning_rate": "lr", "train/lr": "lr",
    "train/loss": "loss", "train_loss": "loss", "train/loss_step": "loss",
    "train/grad_norm": "grad_norm",
}
"""What Hugging Face, Lightning and TensorBoard call a bundled metric (documented in docs/integrations.md)."""

EVAL_PREFIX = "eval_"
"""Hugging Face's prefix of every value an evaluation logs: each such name is a metric of its own."""

DIRECTIONS = ("higher", "lower")
_UNIT_RANGES = {"fraction": (0.0, 1.0, False), "percent": (0.0, 100.0, False), "count": (0.0, INF, True)}
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_MAX_DECLARED = 50
_MAX_DESCRIPTION = 200


def canonical(name: str) -> str:
    """The logbook's name for what a framework logs as `name`: a bundled metric's, else `name` with `/` made `_`."""
    return FRAMEWORK_NAMES.get(name) or name.replace("/", "_")


def is_bundled(name: str) -> bool:
    """True when `name` (as a framework writes it) is one of the bundled metrics the callbacks record themselves."""
    return canonical(name) in BUNDLED


def framework_metric(name: str) -> Metric:
    """An undeclared `eval_*` metric: nothing is known of it but its name."""
    return Metric(name, "", -INF, INF, False, f"`{name}` as the framework's evaluation logs it")


# --- declarations -------------------------------------------------------------


def declare(name: str, kind: str, description: str) -> Metric:
    """One declared metric: `kind` is a direction (`higher` / `lower`) or a unit; refused when it names a known one."""
    name, kind, description = str(name).strip(), str(kind).strip(), str(description).strip()
    if not _NAME.match(name):
        raise UsageError(f"metric name {name!r} is not a name a prediction can use",
                         hint="letters, digits and `_`, starting with a letter or `_`: e.g. `bleu`, `eval_accuracy`")
    if canonical(name) in BUNDLED or name.lower() in BUNDLED:
        raise UsageError(f"metric `{name}` needs no declaration: it is the bundled `{canonical(name.lower())}`",
                         hint="predict it by name; only metrics beyond the bundled set are declared")
    if not kind:
        raise UsageError(f"metric `{name}`: give its direction (higher or lower is better) or its unit",
                         hint=f'e.g. --metric "{name}:higher:{description or "what it measures"}"')
    if not description or len(description) > _MAX_DESCRIPTION or any(c in description for c in "\n\r\t`"):
        raise UsageError(f"metric `{name}`: describe it in one line of at most {_MAX_DESCRIPTION} characters "
                         "(no backquotes)", hint=f'e.g. --metric "{name}:{kind}:accuracy on the dev set"')
    if kind.lower() in DIRECTIONS:
        return Metric(name, "", -INF, INF, False, description, direction=kind.lower())
    lo, hi, integer = _UNIT_RANGES.get(kind.lower(), (-INF, INF, False))
    return Metric(name, kind, lo, hi, integer, description)


def parse_declaration(text: str) -> Metric:
    """`NAME:DIRECTION_OR_UNIT:DESCRIPTION` (the description may hold more `:`)."""
    name, sep, rest = str(text).partition(":")
    kind, sep2, description = rest.partition(":")
    if not sep or not sep2:
        raise UsageError(f"--metric {text!r}: expected NAME:DIRECTION_OR_UNIT:DESCRIPTION",
                         hint='e.g. --metric "bleu:higher:corpus BLEU on the dev set" or "latency_ms:ms:p50 latency"')
    return declare(name, kind, description)


def declaration_from_mapping(d: Any, source: str) -> Metric:
    """One entry of a YAML `metrics:` list: the `NAME:...` line, or {name, direction or unit, description}."""
    if isinstance(d, str):
        return parse_declaration(d)
    if not isinstance(d, dict) or set(d) - {"name", "direction", "unit", "description"}:
        raise UsageError(f"{source}: a `metrics` entry is `NAME:DIRECTION_OR_UNIT:DESCRIPTION` or a mapping "
                         "with name, direction or unit, and description")
    if ("direction" in d) == ("unit" in d):
        raise UsageError(f"{source}: metric {d.get('name')!r}: give either its direction or its unit")
    kind = d.get("direction") if "direction" in d else d.get("unit")
    if "direction" in d and str(kind).lower() not in DIRECTIONS:
        raise UsageError(f"{source}: metric {d.get('name')!r}: direction is higher or lower, got {kind!r}")
    return declare(d.get("name", ""), str(kind or ""), str(d.get("description") or ""))


def check_declarations(metrics: Iterable[Metric]) -> list[Metric]:
    """The declarations in order; the same name twice, or too many, is refused."""
    out: list[Metric] = []
    for m in metrics:
        if any(o.name == m.name for o in out):
            raise UsageError(f"metric `{m.name}` is declared twice")
        out.append(m)
    if len(out) > _MAX_DECLARED:
        raise UsageError(f"at most {_MAX_DECLARED} metrics may be declared, got {len(out)}")
    return out


def to_record(m: Metric) -> dict[str, Any]:
    """A declaration as the front matter holds it."""
    kind = {"direction": m.direction} if m.direction else {"unit": m.unit}
    return {"name": m.name, **kind, "description": m.description}


def declared_in(front: Mapping[str, Any]) -> dict[str, Metric]:
    """The metrics a record's front matter declares (none in a record older than declarations)."""
    entries = front.get("metrics") or []
    if not isinstance(entries, list):
        raise UsageError("`metrics` is not a list")
    return {m.name: m for m in (declaration_from_mapping(d, "front matter") for d in entries)}


# --- looking a name up ----------------------------------------------------------


def lookup(name: str, declared: Mapping[str, Metric] | None = None) -> Metric:
    """The metric a prediction's `name` means; an unknown name is refused with the closest known one."""
    declared = declared or {}
    for n in dict.fromkeys((name, name.lower())):
        m = BUNDLED.get(canonical(n)) or declared.get(canonical(n))
        if m is not None:
            return m
    if canonical(name).startswith(EVAL_PREFIX) and len(name) > len(EVAL_PREFIX):
        return framework_metric(canonical(name))
    known = sorted({*BUNDLED, *FRAMEWORK_NAMES, *declared})
    close = difflib.get_close_matches(name.lower(), [k.lower() for k in known], n=1)
    hint = (f"did you mean `{next(k for k in known if k.lower() == close[0])}`? " if close else "")
    hint += (f"known metrics: {', '.join(sorted(BUNDLED))}"
             + (f"; declared here: {', '.join(sorted(declared))}" if declared else "")
             + f"; the frameworks' names {', '.join(sorted(FRAMEWORK_NAMES))}; any `{EVAL_PREFIX}*` name an "
               "evaluation logs; or declare it: --metric NAME:higher|lower|UNIT:DESCRIPTION")
    raise UsageError(f"unknown metric `{name}`", hint=hint)


def near_miss(name: str, declared: Mapping[str, Metric] | None = None) -> str | None:
    """A warning for an undeclared `eval_*` name that is one slip from a known one (`eval_los`), else None."""
    if name in BUNDLED or name in (declared or {}) or not name.startswith(EVAL_PREFIX):
        return None
    known = [k for k in (*FRAMEWORK_NAMES, *(declared or {})) if "/" not in k]
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.85)
    return (f"`{name}` is taken as a metric of its own (any `{EVAL_PREFIX}*` name an evaluation logs is): "
            f"did you mean `{close[0]}`?") if close else None


def known_text() -> str:
    """The bundled names, for a template's comment."""
    return ", ".join(sorted(BUNDLED))
