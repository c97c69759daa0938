"""The guard is set from the preregistered contingency plan, so what a run promised is what its guard does."""

from __future__ import annotations

import json

from logbook.promises.contingency import parse_rule
from logbook.guard.config import GuardConfig
from logbook.guard.plan import guard_from_plan


def _rules(*texts: str) -> list[dict]:
    return [parse_rule(t).to_dict() for t in texts]


def test_a_rollback_rule_sets_the_threshold_and_the_whole_ladder_and_says_what_changed():
    cfg, said = guard_from_plan(GuardConfig(), _rules(
        "loss spike > 4 sigma twice within 50 steps -> rollback 5 steps, skip 10 batches, lr × 0.8"))
    assert (cfg.spike_sigma, cfg.rollback_after, cfg.rollback_window) == (4.0, 2, 50)
    assert (cfg.rollback_steps, cfg.skip_batches, cfg.lr_factor) == (5, 10, 0.8)
    assert "guard.spike_sigma 6 -> 4 (contingency rule 1)" in said and len(said) == 5  # rollback_after was 2


def test_a_rollback_rule_that_names_no_skip_or_lr_change_gets_none():
    cfg, _ = guard_from_plan(GuardConfig(skip_batches=100, lr_factor=0.9), _rules(
        "loss spike > 5 sigma 3 times in 500 steps -> rollback 100 steps"))
    assert (cfg.rollback_after, cfg.rollback_steps, cfg.skip_batches, cfg.lr_factor) == (3, 100, 0, 1.0)


def test_the_lowest_threshold_per_metric_wins_and_a_grad_norm_rule_turns_its_check_on():
    cfg, said = guard_from_plan(GuardConfig(check_grad_norm=False), _rules(
        "loss spike > 7 sigma -> skip the update",
        "loss spike > 5 sigma twice in 100 steps -> rollback 10 steps",
        "grad norm spike > 9 sigma -> skip the update"))
    assert (cfg.spike_sigma, cfg.grad_norm_sigma, cfg.check_grad_norm) == (5.0, 9.0, True)
    assert "guard.spike_sigma 6 -> 5 (contingency rule 2)" in said


def test_no_plan_an_abort_or_a_nan_rule_or_a_switched_off_guard_change_nothing():
    base = GuardConfig()
    assert guard_from_plan(base, []) == (base, [])
    assert guard_from_plan(base, _rules("loss is NaN -> abort")) == (base, [])
    off = GuardConfig(enabled=False)
    assert guard_from_plan(off, _rules("loss spike > 4 sigma -> skip the update")) == (off, [])


def test_a_preregistered_run_guards_as_its_plan_says_and_records_it(logbook_repo, cli):
    """Through the real trainer: `run_started` says what the plan set, and a spike is judged by the plan's rule."""
    from conftest import ROOT

    from logbook.core.project import open_project
    from logbook.eventlog.runlog import iter_events

    config = logbook_repo / "micro.yaml"
    config.write_text((ROOT / "configs" / "micro-test.yaml").read_text())
    res = cli("prereg", "--title", "plan drives the guard", "--hypothesis", "The guard follows the plan.",
              "--predict", "loss@final < 9", "--config", str(config.relative_to(logbook_repo)),
              "--contingency", "loss spike > 4 sigma twice within 50 steps -> rollback 5 steps, skip 10 batches, lr × 0.9",
              "--json")
    assert res.exit_code == 0, res.output
    pid = json.loads(res.stdout)["id"]
    res = cli("run", "--prereg", pid, str(config), "--run-id", "planned", "guard.warmup=8", "guard.cooldown=3",
              "faults=[{kind: spike, step: 12}, {kind: spike, step: 18}]")
    assert res.exit_code == 0, res.output
    events = list(iter_events(open_project(logbook_repo).run_dir("planned") / "events.jsonl"))
    started = next(e for e in events if e["kind"] == "run_started")["data"]
    assert "guard.spike_sigma 6 -> 4 (contingency rule 1)" in started["guard_from_plan"]
    rollback = next(e for e in events if e["kind"] == "rollback")["data"]
    assert rollback["plan"] == {"rule": 1, "follows": True} and rollback["batches_skipped"] == [12, 21]
    day = next((logbook_repo / "entries").glob("2*/*/*.md")).read_text()
    assert "The divergence guard is set as the contingency plan says" in day
    # The overrides were not preregistered: the launch recorded them, and the run's first entry says so.
    assert started["deviations"] and "**Deviations from the preregistration at launch:**" in day
