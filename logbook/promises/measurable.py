"""Can a run measure what a prediction names? Its points against the config's cadence.

A training config says when the run logs what: validation loss at every
`train.eval_every`-th step and at the last one (`eval_every: 0`, only at the
last), the training row (loss, throughput, grad norm, learning rate, MFU,
tokens) at every `train.log_every`-th step and at the last one. Counts, steps,
goodput and wall time come from the event log and exist at any step.

A prediction whose point no such step reaches would be scored against nothing
(or, as scoring once did, against a stale value from another step), so
`check_measurable` names each one with the nearest measurable steps:
`logbook prereg` refuses it when the preregistration names its config, and
`logbook run` warns about it at launch. A point may ask for the nearest value
within a window (`val_loss@~15±5`), which is measurable when a logged step lies
inside it. A step past the run's end can never be measured.

The trainer's defaults are repeated here (the logbook never imports the
trainer); a test compares them with `trainer.config`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from logbook.core.errors import UsageError
from logbook.core.yamlsafe import load_yaml_text
from logbook.promises.predictions import Prediction, milestone_step

DEFAULT_STEPS = 300
DEFAULT_EVAL_EVERY = 100
DEFAULT_LOG_EVERY = 1

EVAL_METRICS = frozenset({"val_loss", "val_ppl"})
"""Measured only when the run evaluates."""
ROW_METRICS = frozenset({"loss", "grad_norm", "lr", "tokens_per_s", "mfu", "tokens"})
"""Measured on the training row, every `log_every` steps."""


@dataclass(frozen=True)
class Cadence:
    """When a run measures what, as its config says."""

    total_steps: int
    """`train.steps`: the run's last step."""
    eval_every: int
    """`train.eval_every`: steps between evaluations (0: only at the last step)."""
    log_every: int
    """`train.log_every`: steps between training rows."""

    def every(self, metric: str) -> int | None:
        """The metric's period in steps (0: only at the last step), or None when any step has it."""
        if metric in EVAL_METRICS:
            return self.eval_every
        if metric in ROW_METRICS:
            return self.log_every
        return None

    def measured_at(self, metric: str, step: int) -> bool:
        if not 1 <= step <= self.total_steps:
            return False
        n = self.every(metric)
        return n is None or step == self.total_steps or (n > 0 and step % n == 0)

    def nearest(self, metric: str, step: int) -> list[int]:
        """The measured steps nearest `step`: the one before and the one after (either may not exist)."""
        n = self.every(metric) or 0
        cands = {self.total_steps}
        if n > 0:
            below = (min(step, self.total_steps) // n) * n
            cands |= {below - n if below == step else below, below + n}
        before = [s for s in cands if 1 <= s < step]
        after = [s for s in cands if step < s <= self.total_steps]
        return ([max(before)] if before else []) + ([min(after)] if after else [])

    def describe(self, metric: str) -> str:
        n = self.every(metric)
        last = f"the last step ({self.total_steps:,})"
        if n is None:
            return f"{metric} is known at every step"
        what = "the run evaluates" if metric in EVAL_METRICS else f"{metric} is logged"
        return f"{what} every {n:,} steps and at {last}" if n else f"{what} only at {last}"


def cadence_of(config: dict[str, Any]) -> Cadence:
    """The cadence a training config (as loaded from YAML) sets."""
    train = config.get("train") if isinstance(config.get("train"), dict) else {}

    def num(key: str, default: int) -> int:
        v = train.get(key, default)
        return v if isinstance(v, int) and not isinstance(v, bool) else default

    return Cadence(num("steps", DEFAULT_STEPS), num("eval_every", DEFAULT_EVAL_EVERY), num("log_every", DEFAULT_LOG_EVERY))


def cadence_of_file(path: Path, overrides: list[str] | None = None) -> Cadence | None:
    """The cadence of a config file with `train.KEY=VALUE` overrides; None when it cannot be read."""
    try:
        cfg = load_yaml_text(Path(path).read_text("utf-8"), str(path))
    except (OSError, UnicodeDecodeError, UsageError):
        return None
    if not isinstance(cfg, dict):
        return None
    train = dict(cfg.get("train") or {}) if isinstance(cfg.get("train"), dict) else {}
    for o in overrides or []:
        key, sep, value = str(o).partition("=")
        if sep and key.strip().startswith("train.") and value.strip().isdigit():
            train[key.strip()[len("train."):]] = int(value.strip())
    return cadence_of({**cfg, "train": train})


def point_step(p: Prediction, total_steps: int) -> int:
    """The step a prediction's point names in a run of `total_steps`."""
    if p.at.kind == "step":
        return int(p.at.value)
    if p.at.kind == "fraction":
        return milestone_step(float(p.at.value), total_steps)
    return total_steps


def problem(p: Prediction, cad: Cadence) -> str | None:
    """Why the run this cadence describes cannot measure `p` at its point; None when it can."""
    step = point_step(p, cad.total_steps)
    shown = p.to_text()
    if step > cad.total_steps:
        return (f"{shown}: step {step:,} is past the run's end: the config trains {cad.total_steps:,} steps, "
                f"so it can never be measured")
    w = p.at.window
    if w is not None:
        lo, hi = max(1, step - w), min(cad.total_steps, step + w)
        if any(cad.measured_at(p.metric, s) for s in _candidates(cad, p.metric, lo, hi)):
            return None
        near = cad.nearest(p.metric, step)
        return (f"{shown}: no {p.metric} is measured within {w:,} steps of step {step:,} ({cad.describe(p.metric)}); "
                f"nearest measured: {_steps_text(near)}")
    if cad.measured_at(p.metric, step):
        return None
    near = cad.nearest(p.metric, step)
    window = min(abs(s - step) for s in near) if near else 0
    point = p.at.to_text().removeprefix("step:")
    return (f"{shown}: step {step:,} is never measured ({cad.describe(p.metric)}); nearest measured: "
            f"{_steps_text(near)}. Name a measured step, or take the nearest value within a window you state: "
            f"`{p.metric}@~{point}±{window}`")


def _candidates(cad: Cadence, metric: str, lo: int, hi: int) -> list[int]:
    """Steps in [lo, hi] worth testing: every one of a short window, else the period's multiples and the ends."""
    n = cad.every(metric)
    if hi - lo <= 10_000 or not n:
        return list(range(lo, hi + 1))
    return [s for s in range(-(-lo // n) * n, hi + 1, n)] + [cad.total_steps]


def _steps_text(steps: list[int]) -> str:
    return " and ".join(f"step {s:,}" for s in steps) or "none"


def check_measurable(predictions: list[Prediction], cad: Cadence) -> list[str]:
    """One line per prediction the run cannot measure at its point (empty: every one can)."""
    return [why for p in predictions if (why := problem(p, cad)) is not None]


def launch_warnings(prereg: Any, config: Path, overrides: list[str], amendments: list[str] | None) -> list[str]:
    """What `logbook run` says before a preregistered run starts: each point it will never measure.

    The preregistration may not have named its config, or the run may train a
    different one (another file, overrides): the launch is the last moment to
    say so before the run is scored against points it never reaches.
    """
    cad = cadence_of_file(config, overrides)
    if cad is None:
        return []
    preds = [p for p, _ in prereg.all_predictions(amendments)]
    return [f"prediction {why}" for why in check_measurable(preds, cad)]
