"""Contingency rules parse into triggers and actions; what does not parse stays as free text."""

from __future__ import annotations

import pytest

from logbook.core.errors import UsageError
from logbook.promises.contingency import Action, ContingencyRule, Trigger, parse_rule


@pytest.mark.parametrize(
    "text, trigger, actions",
    [
        ("loss spike above 3 sigma twice in 500 steps -> roll back 100 steps and lower LR 10%",
         Trigger("spike", "loss", 3.0, 2, 500), (Action("rollback", steps=100), Action("lr_scale", factor=0.9))),
        ("spike > 4σ twice within 500 steps -> rollback 100 steps, skip 300 batches, lr × 0.9",
         Trigger("spike", "loss", 4.0, 2, 500),
         (Action("rollback", steps=100), Action("skip_batches", batches=300), Action("lr_scale", factor=0.9))),
        ("if grad norm spike > 6 sigma then skip the update",
         Trigger("spike", "grad_norm", 6.0, 1, None), (Action("skip_update"),)),
        ("If loss > 5 sigma 3x within 1,000 steps => rewind 200 steps; halve the LR",
         Trigger("spike", "loss", 5.0, 3, 1000), (Action("rollback", steps=200), Action("lr_scale", factor=0.5))),
        ("val_loss is NaN → abort", Trigger("nonfinite", "val_loss", None, 1, None), (Action("abort"),)),
        ("loss spike > 2.5 sd 4 times in 100 steps -> lr * 0.5", Trigger("spike", "loss", 2.5, 4, 100),
         (Action("lr_scale", factor=0.5),)),
    ],
)
def test_rules_parse_into_trigger_and_actions(text, trigger, actions):
    rule = parse_rule(text)
    assert rule.structured and rule.warning is None
    assert rule.trigger == trigger
    assert rule.actions == actions
    assert rule.text == text


@pytest.mark.parametrize(
    "text, why",
    [
        ("call Bob", "no `->`"),
        ("val_loss rises 3 times in a row -> stop", "no threshold in sigma"),
        ("loss spike above 3 sigma -> pray", "'pray' is not understood"),
        ("loss spike > 3 sigma -> lower lr by 150%", "positive learning rate"),
        ("something > 3 sigma -> abort", "names no metric"),
    ],
)
def test_unparseable_rules_are_kept_as_free_text_with_a_warning(text, why):
    rule = parse_rule(text)
    assert not rule.structured
    assert why in rule.warning
    assert rule.to_dict() == {"text": text, "structured": False, "warning": rule.warning}


def test_rule_dict_round_trips_through_its_text():
    rule = parse_rule("spike > 4σ twice within 500 steps -> rollback 100 steps, skip 300 batches, lr × 0.9")
    d = rule.to_dict()
    assert d["trigger"] == {"kind": "spike", "metric": "loss", "sigma": 4.0, "count": 2, "window_steps": 500}
    assert d["actions"] == [{"kind": "rollback", "steps": 100}, {"kind": "skip_batches", "batches": 300},
                            {"kind": "lr_scale", "factor": 0.9}]
    assert ContingencyRule.from_dict(d) == rule
    assert rule.summary() == "loss spike > 4σ 2 times within 500 steps -> rollback 100 steps, skip 300 batches, lr × 0.9"


def test_multiline_rule_keeps_its_text_and_still_parses():
    rule = parse_rule("loss spike > 4 sigma\n  twice in 500 steps -> abort")
    assert rule.structured and rule.trigger.count == 2
    assert rule.text == "loss spike > 4 sigma\n  twice in 500 steps -> abort"


@pytest.mark.parametrize("text", ["", "   ", "x" * 501])
def test_empty_or_oversized_rules_are_refused(text):
    with pytest.raises(UsageError):
        parse_rule(text)


def test_from_dict_rebuilds_what_was_recorded_not_a_new_parse():
    recorded = {"text": "anything the author wrote -> abort", "structured": True,
                "trigger": {"kind": "spike", "metric": "loss", "sigma": 4.0, "count": 2, "window_steps": 500},
                "actions": [{"kind": "abort"}]}
    rule = ContingencyRule.from_dict(recorded)
    assert rule.structured and rule.trigger.sigma == 4.0 and rule.actions == (Action("abort"),)
    assert rule.to_dict() == recorded
    with pytest.raises(UsageError):
        ContingencyRule.from_dict({**recorded, "actions": [{"kind": "pray"}]})
