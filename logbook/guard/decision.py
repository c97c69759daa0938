"""The divergence guard's ruling on one step, and the events that record it.

A `Decision` carries the `Verdict` (what the loop must do with the step), the
signals behind it and, for a rollback, where to go back to. `describe` fills
in its reason (one sentence) and the payloads of the events that record it
(`divergence_detected`, `step_skipped`, `rollback`, `lr_scaled`,
`run_aborted`; documented in logbook/eventlog/runlog.py), each judged against the
preregistration's contingency rules. This module is the only producer of
those payloads: the loop and trainer/restore.py write them as described here,
and the restore adds only what it alone knows (`complete_rollback`: the
checkpoint it loaded, the step it landed on, what it retired). Only a step
that is not OK is described, so the common step pays for none of this.

The guard speaks the contingency vocabulary of preregistrations
(`logbook.promises.contingency.ACTION_KINDS`): `Decision.actions()` names what it does
in those words, which is what a rule is compared with. The event field
`action` keeps its older one-word summary (skip | rollback | abort), which
readers of existing logs rely on.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from logbook.eventlog.plan import judge_against_plan
from logbook.promises.contingency import ACTION_KINDS
from logbook.runs.spikes import Signal

from .config import GuardConfig


class Verdict(enum.IntEnum):
    """What the loop must do with this step; a larger code is a stronger response."""

    OK = 0
    SKIP = 1
    ROLLBACK = 2
    ABORT = 3


@dataclass
class Decision:
    """The guard's ruling on one step, with the event payloads that record it."""

    verdict: Verdict
    step: int
    batch_id: int | None = None
    reason: str = ""
    signals: list[Signal] = field(default_factory=list)
    counted: bool = False
    """The spike counts towards a rollback (it is outside the cooldown)."""
    spike_steps: list[int] = field(default_factory=list)
    """Steps of the counted spikes in the rollback window, this one last if it counts."""
    to_step: int | None = None
    """ROLLBACK: restore the newest checkpoint at or before this step."""
    skip_range: tuple[int, int] | None = None
    """ROLLBACK: batch ids (inclusive) never trained on again."""
    lr_factor: float = 1.0
    """ROLLBACK: the factor applied to the learning-rate multiplier."""
    lr_scale_before: float = 1.0
    """The learning-rate multiplier in force when the step was judged."""
    lr_scale: float | None = None
    """ROLLBACK: the learning-rate multiplier to continue with."""
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    """(kind, payload) in the order to emit them."""

    @property
    def ok(self) -> bool:
        return self.verdict == Verdict.OK

    def payload(self, kind: str) -> dict[str, Any] | None:
        """The payload of the event `kind`, to complete before emitting (e.g. a rollback's path)."""
        return next((data for k, data in self.events if k == kind), None)

    def actions(self) -> tuple[str, ...]:
        """What the loop does for this decision, in the contingency vocabulary of preregistrations."""
        if self.verdict == Verdict.SKIP:
            acts: tuple[str, ...] = ("skip_update",)
        elif self.verdict == Verdict.ROLLBACK:
            acts = ("rollback",) + (("skip_batches",) if self.skip_range else ()) + \
                   (("lr_scale",) if self.lr_factor != 1.0 else ())
        elif self.verdict == Verdict.ABORT:
            acts = ("abort",)
        else:
            acts = ()
        assert set(acts) <= set(ACTION_KINDS)
        return acts

    def keep(self, kept: Sequence[str]) -> None:
        """Name the checkpoints set aside for study in the rollback event."""
        rb = self.payload("rollback")
        if rb is not None:
            rb["kept"] = list(kept)


def describe(d: Decision, cfg: GuardConfig, rules: Sequence[Any], rollbacks: int) -> None:
    """Fill `d.reason` and `d.events` of a decision that is not OK (payloads as in logbook/eventlog/runlog.py).

    `rollbacks` is the ladder's count of rollbacks, this decision's included.
    """
    action = {Verdict.SKIP: "skip", Verdict.ROLLBACK: "rollback", Verdict.ABORT: "abort"}[d.verdict]
    top = d.signals[0] if d.signals else None
    plan = judge_against_plan({
        "kind": action, "source": "guard", "metric": top.metric if top else None,
        "z": top.z if top else None, "nonfinite": top.nonfinite if top else False,
        "spike_steps": d.spike_steps, "step": d.step, "rollback_steps": cfg.rollback_steps,
        "skip_batches": (d.skip_range[1] - d.skip_range[0] + 1) if d.skip_range else 0,
        "lr_factor": d.lr_factor,
    }, rules)
    d.reason = _reason(d, top, action, cfg, rollbacks)
    detected = {
        "metric": top.metric if top else None, "value": top.value if top else None,
        "baseline": top.baseline if top else None, "scale": top.scale if top else None,
        "threshold": top.threshold if top else None, "z": top.z if top else None,
        "nonfinite": top.nonfinite if top else False, "batch_ids": [d.batch_id] if d.batch_id is not None else [],
        "action": action, "actions": list(d.actions()), "plan": plan, "counted": d.counted,
        "spikes_in_window": len(d.spike_steps), "signals": [s.to_dict() for s in d.signals], "reason": d.reason,
    }
    d.events.append(("divergence_detected", detected))
    if d.verdict == Verdict.SKIP:
        d.events.append(("step_skipped", {"reason": d.reason, "metric": detected["metric"], "batch_id": d.batch_id,
                                          "counted": d.counted, "plan": plan}))
    elif d.verdict == Verdict.ROLLBACK:
        # `from_step` is the last step trained (the flagged one never was); `to_step`,
        # `steps_lost` and `checkpoint` are the restore's to fill in (`complete_rollback`).
        d.events.append(("rollback", {
            "from_step": d.step - 1, "to_step": d.to_step, "steps_lost": None, "checkpoint": None, "kept": [],
            "batches_skipped": list(d.skip_range) if d.skip_range else None, "rollbacks": rollbacks,
            "max_rollbacks": cfg.max_rollbacks, "reason": d.reason, "plan": plan,
        }))
        if d.lr_factor != 1.0 and d.lr_scale is not None:
            d.events.append(("lr_scaled", {"old": d.lr_scale_before, "new": d.lr_scale, "factor": d.lr_factor,
                                           "reason": d.reason, "plan": plan}))
    else:
        d.events.append(("run_aborted", {"reason": d.reason, "rollbacks": rollbacks, "plan": plan}))


def complete_rollback(payload: dict[str, Any], *, to_step: int, checkpoint: str, abandoned: Sequence[str],
                      restore_s: float, wanted_step: int | None = None) -> dict[str, Any]:
    """The rollback event once the restore is done: where it landed, what it loaded and retired.

    `wanted_step` is the target when no checkpoint was left that far back and
    the restore went to the newest one before the spike instead.
    """
    done = {**payload, "to_step": to_step, "checkpoint": checkpoint, "abandoned": list(abandoned),
            "restore_s": round(restore_s, 6)}
    if isinstance(payload.get("from_step"), int):
        done["steps_lost"] = payload["from_step"] - to_step
    if wanted_step is not None:
        done["wanted_step"] = wanted_step
        done["note"] = "no checkpoint left that far back; rolled back to the newest before the spike"
    return done


def _reason(d: Decision, top: Signal | None, action: str, cfg: GuardConfig, rollbacks: int) -> str:
    if top is None:
        what = "another rank flagged this step"
    elif top.nonfinite:
        what = f"{top.metric} is {top.value}"
    else:
        what = f"{top.metric} {top.value:.4g} is {top.z:.1f} robust sigma above its rolling median {top.baseline:.4g}"
    if d.verdict == Verdict.SKIP:
        return f"{what}: update skipped" + ("" if d.counted else " (within the cooldown, not counted again)")
    if d.verdict == Verdict.ROLLBACK:
        rng = f", batches {d.skip_range[0]}-{d.skip_range[1]} skipped" if d.skip_range else ""
        lr = f", learning rate x {d.lr_factor:g}" if d.lr_factor != 1.0 else ""
        at = ", ".join(str(x) for x in d.spike_steps)
        return (f"{what}; {len(d.spike_steps)} spikes within {cfg.rollback_window} steps (at steps {at}): "
                f"rolled back to step {d.to_step} or earlier{rng}{lr}")
    return (f"{what}; the run needs rollback {rollbacks + 1} but at most {cfg.max_rollbacks} "
            f"are allowed: aborted by the divergence guard")
