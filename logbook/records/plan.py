"""Did an action follow the preregistered contingency plan, or deviate from it?

Every automatic action of the divergence guard and every hyperparameter change
carries `plan: {"rule": n | None, "follows": bool}` in its event, so the outcome
of a run can list its deviations. `n` is the 1-based number of the rule in the
preregistration (as written, in order).

An action is described by a plain dict:

    kind            skip | rollback | abort | lr_scale | hparam_change
    source          guard | live | schedule | config | advice   (default guard)
    metric          loss | grad_norm                 (guard actions)
    z               robust sigmas of the spike (inf for NaN/inf)
    nonfinite       True when the value was NaN or inf
    spike_steps     steps of the counted spikes in the guard's window, current last
    rollback_steps  least distance back the guard was configured to roll
    skip_batches    batches the guard skips after a rollback
    lr_factor       learning-rate factor applied (1.0: none)
    key, old, new   hparam_change / lr_scale: what changed

The rules are `logbook.records.contingency.ContingencyRule`s (or their `to_dict()`);
only structured rules can be followed. The judgement:

- A scheduled change is part of the config the run was launched with: it
  follows the plan (rule None).
- A guard action follows rule n when n's trigger has fired (same metric, z at
  or above its sigma, its count of spikes within its window) and the action
  did exactly what n says (rollback distance, batches skipped, LR factor,
  skip the update, abort). A fired rule that was not carried out as written
  is a deviation from that rule.
- A skipped update while a rule is still counting towards its trigger follows
  that rule: the plan foresaw the spike and acts only when it recurs.
- A manual LR scaling follows a rule whose only action is that same factor.
- Anything else has no rule and is a deviation (`follows: false`); a run
  without a plan gets the same answer, there being nothing to follow.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping
from typing import Any

_REL_TOL = 1e-6


def _as_dict(rule: Any) -> dict[str, Any]:
    if isinstance(rule, Mapping):
        return dict(rule)
    if hasattr(rule, "to_dict"):
        return dict(rule.to_dict())
    if dataclasses.is_dataclass(rule):
        return dataclasses.asdict(rule)
    return {}


def structured_rules(rules: Iterable[Any] | None) -> list[tuple[int, dict[str, Any], list[dict[str, Any]]]]:
    """(number, trigger, actions) of each rule the guard can follow, numbered from 1 as written."""
    out = []
    for n, rule in enumerate(rules or [], start=1):
        d = _as_dict(rule)
        trigger = d.get("trigger")
        if d.get("structured", True) and isinstance(trigger, Mapping) and isinstance(d.get("actions"), (list, tuple)):
            out.append((n, dict(trigger), [_as_dict(a) for a in d["actions"]]))
    return out


def judge_against_plan(action: Mapping[str, Any], rules: Iterable[Any] | None) -> dict[str, Any]:
    """{"rule": n | None, "follows": bool} for one action against the preregistered rules."""
    source = action.get("source", "guard")
    if source == "schedule":
        return {"rule": None, "follows": True}
    table = structured_rules(rules)
    kind = action.get("kind")
    if kind in ("skip", "rollback", "abort"):
        return _judge_guard(action, table)
    if kind == "lr_scale" or (kind == "hparam_change" and action.get("key") == "lr_scale"):
        factor = _lr_factor_of(action)
        for n, _, acts in table:
            if factor is not None and len(acts) == 1 and acts[0].get("kind") == "lr_scale" and _close(acts[0].get("factor"), factor):
                return {"rule": n, "follows": True}
    return {"rule": None, "follows": False}


def _lr_factor_of(action: Mapping[str, Any]) -> float | None:
    if action.get("lr_factor") is not None:
        return float(action["lr_factor"])
    old, new = action.get("old"), action.get("new")
    if isinstance(old, (int, float)) and isinstance(new, (int, float)) and old:
        return float(new) / float(old)
    return None


def _judge_guard(action: Mapping[str, Any], table: list) -> dict[str, Any]:
    fired, waiting = [], []
    for n, trig, acts in table:
        if not _trigger_matches_value(trig, action):
            continue
        if _count_met(trig, action):
            fired.append((n, acts))
        else:
            waiting.append(n)
    for n, acts in fired:
        if _did_what_rule_says(acts, action):
            return {"rule": n, "follows": True}
    if fired:
        return {"rule": fired[0][0], "follows": False}
    if action.get("kind") == "skip" and waiting:
        return {"rule": waiting[0], "follows": True}
    return {"rule": None, "follows": False}


def _trigger_matches_value(trig: Mapping[str, Any], action: Mapping[str, Any]) -> bool:
    if trig.get("metric", "loss") != action.get("metric"):
        return False
    nonfinite = bool(action.get("nonfinite"))
    if trig.get("kind") == "nonfinite":
        return nonfinite
    sigma = trig.get("sigma")
    z = action.get("z")
    if nonfinite:
        return True  # NaN or inf lies beyond any threshold
    return isinstance(z, (int, float)) and sigma is not None and z >= float(sigma)


def _count_met(trig: Mapping[str, Any], action: Mapping[str, Any]) -> bool:
    count = int(trig.get("count") or 1)
    steps = [int(s) for s in action.get("spike_steps") or []]
    if not steps and action.get("step") is not None:
        steps = [int(action["step"])]
    if len(steps) < count:
        return False
    window = trig.get("window_steps")
    last = steps[-count:]
    return window is None or last[-1] - last[0] <= int(window)


def _did_what_rule_says(acts: list[dict[str, Any]], action: Mapping[str, Any]) -> bool:
    want = {a.get("kind"): a for a in acts}
    kind = action.get("kind")
    if kind == "skip":
        return set(want) == {"skip_update"}
    if kind == "abort":
        return "abort" in want
    # rollback: every part of the rule done as written, and nothing the rule did not ask for
    if "rollback" not in want or int(want["rollback"].get("steps") or 0) != int(action.get("rollback_steps") or 0):
        return False
    skipped = int(action.get("skip_batches") or 0)
    if int(want.get("skip_batches", {}).get("batches") or 0) != skipped:
        return False
    factor = float(action.get("lr_factor") or 1.0)
    return _close(want.get("lr_scale", {}).get("factor", 1.0), factor)


def _close(a: Any, b: Any) -> bool:
    try:
        return math.isclose(float(a), float(b), rel_tol=_REL_TOL)
    except (TypeError, ValueError):
        return False
