"""Replay: is a spike in the data and model state, or a fluke of the machine?

With `guard.replay` on, the guard's callback saves the RNG state at each
step's start; when a step is flagged it re-runs that step from the saved state
and the same batch, on the model as it was, and `replay_check` labels the
spike reproducible or transient. The label joins the `divergence_detected`
event; it never changes the ladder's decision.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .decision import Decision

@dataclass
class ReplayVerdict:
    """The outcome of re-running a flagged step."""

    label: str
    """reproducible (data and model state) | transient (suspect hardware) | failed (the re-run raised)."""
    loss: float | None = None
    grad_norm: float | None = None
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def replay_check(rerun: Callable[[], tuple[float, float | None]], decision: Decision) -> ReplayVerdict:
    """Re-run the flagged step and compare with what the guard saw.

    `rerun` recomputes the step's loss and gradient norm from the RNG state
    saved at the step's start and the same batch, on the model as it was
    (the update has not been applied). The spike reproduces when the re-run's
    top metric is again non-finite, or again beyond its threshold against the
    same baseline; then the cause is in the data and model state. Otherwise it
    is transient, which points at the hardware.
    """
    if not decision.signals:
        return ReplayVerdict("transient", detail="nothing was flagged on this rank")
    try:
        loss, grad_norm = rerun()
    except Exception as e:  # a replay must never take the run down with it
        return ReplayVerdict("failed", detail=f"{type(e).__name__}: {e}")
    top = decision.signals[0]
    again = loss if top.metric == "loss" else grad_norm
    if again is None:
        return ReplayVerdict("failed", loss, grad_norm, f"the re-run returned no {top.metric}")
    if top.nonfinite:
        same = not math.isfinite(again)
    else:
        same = math.isfinite(again) and top.z_of(again) > (top.threshold or 0.0)
    detail = f"{top.metric} {top.value!r} at first, {again!r} on re-run"
    return ReplayVerdict("reproducible" if same else "transient", loss, grad_norm, detail)


def label_replay(decision: Decision, verdict: ReplayVerdict) -> None:
    """Add the replay verdict to the decision's divergence event."""
    payload = decision.payload("divergence_detected")
    if payload is not None:
        payload["replay"] = verdict.to_dict()
