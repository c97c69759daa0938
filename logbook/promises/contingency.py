"""Contingency rules: "IF <trigger> -> THEN <actions>", parsed into a structured form.

A rule is written by a person, for example

    loss spike above 3 sigma twice in 500 steps -> roll back 100 steps and lower LR 10%
    spike > 4σ twice within 500 steps -> rollback 100 steps, skip 300 batches, lr × 0.9
    if grad norm spike > 6 sigma then skip the update
    loss is nan -> abort

and parsed into a trigger (metric, sigma threshold or non-finite, count,
window in steps) and a list of actions (rollback N steps, skip N batches,
scale the learning rate by f, skip the update, abort). The original text is
always kept. A rule that does not parse is still accepted as free text but is
marked `structured: false` with a warning: the trainer's guard cannot follow
it, and a reader of the chronicle will see that it could not.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from logbook.core.errors import UsageError

ACTION_KINDS = ("rollback", "skip_batches", "lr_scale", "skip_update", "abort")
TRIGGER_METRICS = ("loss", "val_loss", "grad_norm")
_MAX_LEN = 500


@dataclass(frozen=True)
class Trigger:
    """When a rule fires."""

    kind: str
    """`spike` (a value beyond `sigma` robust standard deviations) or `nonfinite` (NaN/inf)."""
    metric: str
    """loss | val_loss | grad_norm"""
    sigma: float | None = None
    """Threshold in standard deviations above the rolling baseline (spikes only)."""
    count: int = 1
    """How many occurrences fire the rule."""
    window_steps: int | None = None
    """The occurrences must fall within this many steps (None: anywhere in the run)."""

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "metric": self.metric, "sigma": self.sigma,
                "count": self.count, "window_steps": self.window_steps}

    def to_text(self) -> str:
        what = f"{self.metric} non-finite" if self.kind == "nonfinite" else f"{self.metric} spike > {_num(self.sigma)}σ"
        times = "" if self.count == 1 else f" {self.count} times"
        within = f" within {self.window_steps} steps" if self.window_steps else ""
        return what + times + within


@dataclass(frozen=True)
class Action:
    """One thing to do when a rule fires."""

    kind: str
    """rollback | skip_batches | lr_scale | skip_update | abort"""
    steps: int | None = None
    """rollback: how many steps to go back."""
    batches: int | None = None
    """skip_batches: how many batches to skip after the rollback point."""
    factor: float | None = None
    """lr_scale: the learning rate is multiplied by this."""

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"kind": self.kind}
        for key in ("steps", "batches", "factor"):
            if getattr(self, key) is not None:
                d[key] = getattr(self, key)
        return d

    def to_text(self) -> str:
        return {
            "rollback": f"rollback {self.steps} steps",
            "skip_batches": f"skip {self.batches} batches",
            "lr_scale": f"lr × {_num(self.factor)}",
            "skip_update": "skip the update",
            "abort": "abort",
        }[self.kind]


@dataclass(frozen=True)
class ContingencyRule:
    """A rule as written, and what could be understood of it."""

    text: str
    """The rule exactly as written (stripped)."""
    structured: bool
    """True when trigger and every action were understood."""
    trigger: Trigger | None = None
    actions: tuple[Action, ...] = field(default_factory=tuple)
    warning: str | None = None
    """Why the rule is not structured (None when it is)."""

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"text": self.text, "structured": self.structured}
        if self.structured:
            d["trigger"] = self.trigger.to_dict() if self.trigger else None
            d["actions"] = [a.to_dict() for a in self.actions]
        else:
            d["warning"] = self.warning
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ContingencyRule:
        """Rebuild what was recorded (not a re-parse: a later parser must not change an old plan)."""
        try:
            if not d.get("structured"):
                return cls(str(d["text"]), False, warning=d.get("warning"))
            trigger = Trigger(**d["trigger"])
            actions = tuple(Action(**a) for a in d["actions"])
        except (KeyError, TypeError) as e:
            raise UsageError(f"contingency rule {d.get('text')!r} is not a recorded rule ({e})") from None
        if trigger.kind not in ("spike", "nonfinite") or any(a.kind not in ACTION_KINDS for a in actions):
            raise UsageError(f"contingency rule {d.get('text')!r} has an unknown trigger or action kind")
        return cls(str(d["text"]), True, trigger, actions)

    def summary(self) -> str:
        """`trigger -> action, action` in the canonical spelling, or the text."""
        if not self.structured or self.trigger is None:
            return self.text
        return f"{self.trigger.to_text()} -> {', '.join(a.to_text() for a in self.actions)}"


def _num(x: float | None) -> str:
    if x is None:
        return "?"
    return str(int(x)) if float(x).is_integer() else format(x, "g")


# --- parsing -----------------------------------------------------------------

_SEP = re.compile(r"\s*(?:->|→|=>|\bthen\b)\s*", re.IGNORECASE)
_INT = r"(\d[\d_,]*)"
_FLOAT = r"(\d+(?:\.\d+)?|\.\d+)"
_COUNT_WORDS = {"once": 1, "twice": 2, "thrice": 3}
_SIGMA = re.compile(_FLOAT + r"\s*-?\s*(?:σ|sigma|sigmas|sd|std|stds|standard deviations?)\b|" + _FLOAT + r"\s*σ", re.I)
_COUNT = re.compile(r"\b(once|twice|thrice)\b|\b(\d+)\s*(?:times|x|×)(?![\d.])", re.I)
_WINDOW = re.compile(r"\b(?:in|within|over|inside)\s+(?:a\s+|the\s+(?:last\s+)?)?" + _INT + r"[\s-]*steps?\b", re.I)
_NONFINITE = re.compile(r"\b(?:nan|inf|infinite|non-?finite)\b", re.I)
_METRIC = [
    ("val_loss", re.compile(r"\bval(?:idation)?[_ ]loss\b", re.I)),
    ("grad_norm", re.compile(r"\bgrad(?:ient)?[_ ]norm\b", re.I)),
    ("loss", re.compile(r"\bloss\b", re.I)),
]
_ACTION_SPLIT = re.compile(r"\s*(?:,|;|\band then\b|\band\b|\bthen\b|\+)\s*", re.I)
_ACTIONS: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"^(?:roll\s*back|rewind|go back)\s+(?:by\s+)?" + _INT + r"\s*steps?$", re.I), "rollback"),
    (re.compile(r"^skip\s+(?:the\s+)?(?:next\s+)?" + _INT + r"\s*batch(?:es)?$", re.I), "skip_batches"),
    (re.compile(r"^(?:lr|learning rate)\s*(?:×|x|\*)\s*" + _FLOAT + r"$", re.I), "lr_mul"),
    (re.compile(r"^(?:multiply|scale)\s+(?:the\s+)?(?:lr|learning rate)\s+by\s+" + _FLOAT + r"$", re.I), "lr_mul"),
    (re.compile(r"^(?:lower|reduce|decrease|cut|drop)\s+(?:the\s+)?(?:lr|learning rate)\s+(?:by\s+)?" + _FLOAT + r"\s*%$", re.I), "lr_pct"),
    (re.compile(r"^(?:halve)\s+(?:the\s+)?(?:lr|learning rate)$", re.I), "lr_half"),
    (re.compile(r"^skip\s+(?:the\s+)?(?:update|step|optimizer step)$", re.I), "skip_update"),
    (re.compile(r"^(?:abort|stop)(?:\s+the\s+run)?$", re.I), "abort"),
]


def _to_int(raw: str) -> int:
    return int(raw.replace("_", "").replace(",", ""))


def _parse_trigger(cond: str) -> tuple[Trigger | None, str | None]:
    cond = re.sub(r"^\s*if\b\s*", "", cond, flags=re.I)
    metric = next((name for name, rx in _METRIC if rx.search(cond)), None)
    count_m = _COUNT.search(cond)
    count = 1
    if count_m:
        count = _COUNT_WORDS[count_m.group(1).lower()] if count_m.group(1) else int(count_m.group(2))
    window_m = _WINDOW.search(cond)
    window = _to_int(window_m.group(1)) if window_m else None
    if count < 1 or (window is not None and window < 1):
        return None, "the count and the window must be positive"
    if _NONFINITE.search(cond):
        return Trigger("nonfinite", metric or "loss", None, count, window), None
    sigma_m = _SIGMA.search(cond)
    if not sigma_m:
        return None, "the condition names no threshold in sigma (e.g. `loss spike above 4 sigma`) and no NaN/inf"
    sigma = float(sigma_m.group(1) or sigma_m.group(2))
    if sigma <= 0:
        return None, "the sigma threshold must be positive"
    if metric is None and not re.search(r"\bspikes?\b", cond, re.I):
        return None, "the condition names no metric (loss, val_loss or grad_norm)"
    return Trigger("spike", metric or "loss", sigma, count, window), None


def _parse_action(text: str) -> Action | None:
    t = text.strip().rstrip(".")
    for rx, kind in _ACTIONS:
        m = rx.match(t)
        if not m:
            continue
        if kind == "rollback":
            return Action("rollback", steps=_to_int(m.group(1)))
        if kind == "skip_batches":
            return Action("skip_batches", batches=_to_int(m.group(1)))
        if kind == "lr_mul":
            return Action("lr_scale", factor=float(m.group(1)))
        if kind == "lr_pct":
            return Action("lr_scale", factor=round(1 - float(m.group(1)) / 100, 12))
        if kind == "lr_half":
            return Action("lr_scale", factor=0.5)
        return Action(kind)
    return None


def _check_actions(actions: list[Action]) -> str | None:
    for a in actions:
        if a.kind == "lr_scale" and not (a.factor and a.factor > 0):
            return "the learning-rate factor must leave a positive learning rate"
        if a.kind == "rollback" and not a.steps:
            return "a rollback must go back at least one step"
        if a.kind == "skip_batches" and not a.batches:
            return "skip at least one batch"
    return None


def parse_rule(text: str) -> ContingencyRule:
    """Parse one rule. Raises only for empty or oversized text; anything else is kept."""
    if not isinstance(text, str) or not text.strip():
        raise UsageError("empty contingency rule", hint="write e.g. `loss spike > 4 sigma twice in 500 steps -> rollback 100 steps, lr × 0.9`")
    flat = " ".join(text.split())  # parse one line; keep the text as written
    text = text.strip()
    if len(text) > _MAX_LEN:
        raise UsageError(f"contingency rule longer than {_MAX_LEN} characters: {text[:40]!r}...")
    parts = _SEP.split(flat, maxsplit=1)
    if len(parts) != 2 or not parts[1].strip():
        return ContingencyRule(text, False, warning="no `->` between the condition and the action: kept as free text")
    trigger, why = _parse_trigger(parts[0])
    if trigger is None:
        return ContingencyRule(text, False, warning=f"{why}: kept as free text")
    pieces = [p for p in _ACTION_SPLIT.split(parts[1]) if p and p.strip()]
    actions = [_parse_action(p) for p in pieces]
    unknown = [p.strip() for p, a in zip(pieces, actions) if a is None]
    if unknown:
        return ContingencyRule(text, False, warning=(
            f"action {unknown[0]!r} is not understood (known: rollback N steps, skip N batches, "
            "lr × f, lower LR p%, skip the update, abort): kept as free text"))
    why = _check_actions(actions)  # type: ignore[arg-type]
    if why:
        return ContingencyRule(text, False, warning=f"{why}: kept as free text")
    return ContingencyRule(text, True, trigger, tuple(actions))  # type: ignore[arg-type]

