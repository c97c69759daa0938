"""Judging actions against the preregistered contingency rules."""

from __future__ import annotations

import math

import pytest

from logbook.promises.contingency import parse_rule
from logbook.eventlog.plan import judge_against_plan, structured_rules

RULES = [
    parse_rule("loss spike > 4 sigma twice within 500 steps -> rollback 100 steps, skip 300 batches, lr x 0.9"),
    parse_rule("loss is nan -> abort"),
    parse_rule("grad norm spike > 6 sigma -> skip the update"),
    parse_rule("if the loss looks odd, call someone"),  # free text: cannot be followed
]


def _rollback(**kw):
    return {"kind": "rollback", "metric": "loss", "z": 6.1, "nonfinite": False, "spike_steps": [47315, 47390],
            "rollback_steps": 100, "skip_batches": 300, "lr_factor": 0.9, **kw}


def test_a_rollback_done_as_the_rule_says_follows_it():
    assert judge_against_plan(_rollback(), RULES) == {"rule": 1, "follows": True}


@pytest.mark.parametrize("change", [
    {"skip_batches": 200}, {"rollback_steps": 0}, {"lr_factor": 1.0}, {"lr_factor": 0.5},
])
def test_a_rollback_that_differs_from_the_fired_rule_deviates_from_it(change):
    got = judge_against_plan(_rollback(**change), RULES)
    assert (got["rule"], got["follows"], len(got["differences"])) == (1, False, 1)


def test_a_rollback_that_carries_out_its_rule_names_each_difference_in_the_rules_terms():
    got = judge_against_plan(_rollback(skip_batches=313, lr_factor=0.8), RULES)
    assert got == {"rule": 1, "follows": False, "differences": [
        "skipped 313 batches, the rule said 300", "scaled the learning rate by 0.8, the rule said 0.9"]}
    assert judge_against_plan(_rollback(rollback_steps=50), RULES)["differences"] == \
        ["rolled back 50 steps, the rule said 100"]


def test_the_trigger_must_have_fired():
    too_small = _rollback(z=3.0)
    assert judge_against_plan(too_small, RULES) == {"rule": None, "follows": False}
    too_far_apart = _rollback(spike_steps=[1000, 1700])
    assert judge_against_plan(too_far_apart, RULES) == {"rule": None, "follows": False}
    other_metric = _rollback(metric="grad_norm", z=5.0)  # rule 1 would fire for the loss
    assert judge_against_plan(other_metric, RULES) == {"rule": None, "follows": False}


def test_a_skip_while_a_rule_is_still_counting_follows_it():
    first_spike = {"kind": "skip", "metric": "loss", "z": 5.0, "spike_steps": [47315]}
    assert judge_against_plan(first_spike, RULES) == {"rule": 1, "follows": True}


def test_a_skip_where_a_fired_rule_asks_for_more_deviates():
    second_spike = {"kind": "skip", "metric": "loss", "z": 5.0, "spike_steps": [10, 20]}
    assert judge_against_plan(second_spike, RULES) == {"rule": 1, "follows": False, "differences": [
        "skipped the update, the rule said: roll back, skip batches, scale the learning rate"]}


def test_a_skip_that_a_rule_prescribes_follows_it():
    action = {"kind": "skip", "metric": "grad_norm", "z": 7.5, "spike_steps": [5]}
    assert judge_against_plan(action, RULES) == {"rule": 3, "follows": True}


def test_nan_matches_a_nonfinite_rule_and_lies_beyond_any_sigma():
    nan_abort = {"kind": "abort", "metric": "loss", "z": math.inf, "nonfinite": True, "spike_steps": [9]}
    assert judge_against_plan(nan_abort, RULES) == {"rule": 2, "follows": True}
    nan_skip = {"kind": "skip", "metric": "loss", "z": math.inf, "nonfinite": True, "spike_steps": [9]}
    assert judge_against_plan(nan_skip, RULES) == {"rule": 2, "follows": False,
                                                  "differences": ["skipped the update, the rule said: abort"]}


def test_manual_changes_follow_only_a_rule_that_prescribes_exactly_them():
    rules = RULES + [parse_rule("loss spike > 3 sigma 3 times within 1000 steps -> lr x 0.5")]
    halve = {"kind": "hparam_change", "source": "live", "key": "lr_scale", "old": 1.0, "new": 0.5}
    assert judge_against_plan(halve, rules) == {"rule": 5, "follows": True}
    clip = {"kind": "hparam_change", "source": "live", "key": "grad_clip", "old": 1.0, "new": 0.5}
    assert judge_against_plan(clip, rules) == {"rule": None, "follows": False}


def test_scheduled_changes_are_part_of_the_plan_and_config_edits_are_not():
    assert judge_against_plan({"kind": "hparam_change", "source": "schedule", "key": "lr"}, []) == {"rule": None, "follows": True}
    assert judge_against_plan({"kind": "hparam_change", "source": "config", "key": "lr"}, RULES) == {"rule": None, "follows": False}


def test_without_a_plan_nothing_is_judged_and_a_plan_without_rules_foresaw_nothing():
    assert judge_against_plan(_rollback(), None) is None  # an exploratory run: no plan, no "not in the plan"
    assert judge_against_plan(_rollback(), []) == {"rule": None, "follows": False}


def test_rules_are_numbered_as_written_and_free_text_is_left_out():
    assert [n for n, _, _ in structured_rules(RULES)] == [1, 2, 3]
    as_dicts = [r.to_dict() for r in RULES]
    assert structured_rules(as_dicts) == structured_rules(RULES)
    assert judge_against_plan(_rollback(), as_dicts) == {"rule": 1, "follows": True}
