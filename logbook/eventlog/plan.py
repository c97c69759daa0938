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

The rules are `logbook.promises.contingency.ContingencyRule`s (or their `to_dict()`);
only structured rules can be followed. The judgement:

- A scheduled change is part of the config the run was launched with: it
  follows the plan (rule None).
- A guard action follows rule n when n's trigger has fired (same metric, z at
  or above its sigma, its count of spikes within its window) and the action
  did exactly what n says (rollback distance, batches skipped, LR factor,
  skip the update, abort). A fired rule that was not carried out as written
  is a deviation from that rule, and the judgement names each difference in
  the rule's own terms (`differences`: "skipped 13 batches, the rule said 10"),
  so no reader has to guess which part differed (`plan_words`).
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


def judge_against_plan(action: Mapping[str, Any], rules: Iterable[Any] | None) -> dict[str, Any] | None:
    """{"rule": n | None, "follows": bool} for one action against the preregistered rules.

    None when there is no plan to judge against (`rules` None: an exploratory
    run); an empty list is a plan that foresaw nothing.
    """
    if rules is None:
        return None
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
        if not rule_differences(acts, action):
            return {"rule": n, "follows": True}
    if fired:
        n, acts = fired[0]
        return {"rule": n, "follows": False, "differences": rule_differences(acts, action)}
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


_ACT_WORDS = {"skip": "skipped the update", "rollback": "rolled back", "abort": "aborted the run"}
_RULE_WORDS = {"skip_update": "skip the update", "rollback": "roll back", "abort": "abort",
               "skip_batches": "skip batches", "lr_scale": "scale the learning rate"}


def rule_differences(acts: list[dict[str, Any]], action: Mapping[str, Any]) -> list[str]:
    """How an action differs from what a rule says, in the rule's own terms ([] when it did exactly that)."""
    want = {a.get("kind"): a for a in acts}
    kind = action.get("kind")
    said = ", ".join(_RULE_WORDS.get(str(k), str(k)) for k in want)
    if kind == "skip":
        return [] if set(want) == {"skip_update"} else [f"skipped the update, the rule said: {said}"]
    if kind == "abort":
        return [] if "abort" in want else [f"aborted the run, the rule said: {said}"]
    if "rollback" not in want:
        return [f"{_ACT_WORDS.get(str(kind), str(kind))}, the rule said: {said}"]
    out = []
    steps, rule_steps = int(action.get("rollback_steps") or 0), int(want["rollback"].get("steps") or 0)
    if steps != rule_steps:
        out.append(f"rolled back {steps} steps, the rule said {rule_steps}")
    skipped, rule_skip = int(action.get("skip_batches") or 0), int(want.get("skip_batches", {}).get("batches") or 0)
    if skipped != rule_skip:
        out.append(f"skipped {skipped} batches, the rule said {rule_skip}")
    factor, rule_factor = float(action.get("lr_factor") or 1.0), want.get("lr_scale", {}).get("factor", 1.0)
    if not _close(rule_factor, factor):
        out.append(f"scaled the learning rate by {factor:g}, the rule said {float(rule_factor):g}")
    return out


def plan_words(plan: Any) -> str:
    """What a `plan` judgement says, for a person: "", "as planned", "plan rule 1", or the rule and its differences.

    Only an action no rule foresaw is "not in the plan"; an action that carries
    out a rule with a difference says which rule and names the difference.
    """
    if not isinstance(plan, Mapping) or plan.get("follows") is None:
        return ""
    rule = plan.get("rule") if isinstance(plan.get("rule"), int) and not isinstance(plan.get("rule"), bool) else None
    if plan.get("follows") is True:
        return f"plan rule {rule}" if rule is not None else "as planned"
    if rule is None:
        return "not in the plan"
    diffs = [str(d) for d in plan.get("differences") or [] if d]
    return f"plan rule {rule}, with a difference: {'; '.join(diffs)}" if diffs else f"not as plan rule {rule} says"


def _close(a: Any, b: Any) -> bool:
    try:
        return math.isclose(float(a), float(b), rel_tol=_REL_TOL)
    except (TypeError, ValueError):
        return False
