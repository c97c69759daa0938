"""The guard set from the preregistered contingency plan: what a run promised is what its guard does.

A preregistration says, for example, `loss spike > 4σ twice within 50 steps
-> rollback 5 steps, skip 10 batches, lr × 0.9`. Left on the config's own
guard settings (a 6σ threshold, say), a 5σ spike would pass unanswered while
the plan said it would be answered, and every action would be judged against
a rule it was never set up to follow. So, before the first step, each
structured rule (`logbook.eventlog.plan.structured_rules`) sets the guard:

- a spike trigger on `loss` sets `spike_sigma`, one on `grad_norm` sets
  `grad_norm_sigma` (and turns its check on); with several rules on one metric
  the lowest threshold wins, since the guard skips every spike it sees and a
  rule still counting towards its trigger is followed by a skip (plan.py);
- the first rule that rolls back sets the rest of the ladder: `rollback_after`
  (the trigger's count), `rollback_window` (its window), `rollback_steps`,
  `skip_batches` and `lr_factor` (0 batches and no LR change where the rule
  names none: the plan judges a rollback by doing exactly what it says).

Rules the guard has no setting for (an abort, a NaN trigger, which the guard
always answers) change nothing. What changed is returned in words, for the
`run_started` event and the person watching the run.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from logbook.eventlog.plan import structured_rules

from .config import GuardConfig


def guard_from_plan(cfg: GuardConfig, rules: Iterable[Any] | None) -> tuple[GuardConfig, list[str]]:
    """`cfg` with the settings the contingency rules prescribe, and one line per setting changed."""
    if not cfg.enabled:
        return cfg, []
    want: dict[str, tuple[Any, int]] = {}  # setting -> (value, rule number)
    for n, trig, acts in structured_rules(rules):
        if trig.get("kind") != "spike" or trig.get("sigma") is None:
            continue
        key = "grad_norm_sigma" if trig.get("metric") == "grad_norm" else "spike_sigma"
        sigma = float(trig["sigma"])
        if key not in want or sigma < want[key][0]:
            want[key] = (sigma, n)
        if key == "grad_norm_sigma":
            want["check_grad_norm"] = (True, n)
        by_kind = {a.get("kind"): a for a in acts}
        if "rollback" in by_kind and "rollback_steps" not in want:
            ladder = {"rollback_after": int(trig.get("count") or 1),
                      "rollback_steps": int(by_kind["rollback"].get("steps") or 0),
                      "skip_batches": int(by_kind.get("skip_batches", {}).get("batches") or 0),
                      "lr_factor": float(by_kind.get("lr_scale", {}).get("factor", 1.0))}
            if trig.get("window_steps") is not None:
                ladder["rollback_window"] = int(trig["window_steps"])
            want.update({k: (v, n) for k, v in ladder.items()})
    changes = {k: v for k, (v, _) in want.items() if getattr(cfg, k) != v}
    said = [f"guard.{k} {_show(getattr(cfg, k))} -> {_show(v)} (contingency rule {want[k][1]})"
            for k, v in changes.items()]
    return (dataclasses.replace(cfg, **changes) if changes else cfg), said


def _show(v: Any) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v).lower() if isinstance(v, bool) else str(v)
