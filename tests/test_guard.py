"""The divergence guard: detection on robust rolling statistics, the response ladder, its state.

What the guard decided is asserted on what reaches the run's event log (real
short runs with spike drills); the ladder's logic itself on the `Guard` alone.
"""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest
from conftest import ROOT
from hypothesis import given, settings
from hypothesis import strategies as st

from logbook.core.errors import RunFailedError, UsageError
from logbook.promises.contingency import ACTION_KINDS, parse_rule
from logbook.eventlog.runlog import iter_events
from trainer.config import load_train_config
from trainer.guard.callback import GuardCallback, checkpoints_to_keep, metrics_to_floats
from logbook.guard.config import GuardConfig
from logbook.guard.decision import Verdict
from logbook.runs.spikes import MAD_TO_SIGMA, judged_form, robust_stats, spike_signal
from logbook.guard.ladder import Guard
from trainer.guard.callback import agree
from trainer.live_control import _broadcast
from logbook.guard.replay import replay_check

MICRO = ROOT / "configs" / "micro-test.yaml"
GUARD_KINDS = ("divergence_detected", "step_skipped", "rollback", "lr_scaled", "run_aborted")
SPIKES_AT_12_AND_18 = ["guard.warmup=8", "guard.cooldown=3", "guard.skip_batches=4", "guard.rollback_steps=2",
                       "checkpoint.background=false", "faults=[{kind: spike, step: 12}, {kind: spike, step: 18}]"]
RULE = "loss spike > 4 sigma twice within 500 steps -> rollback 2 steps, skip 7 batches, lr x 0.9"


def _series(n: int, seed: int = 0, level: float = 2.5, noise: float = 0.02) -> list[tuple[float, float]]:
    rng = random.Random(seed)
    return [(level + rng.gauss(0, noise), 1.0 + rng.gauss(0, 0.05)) for _ in range(n)]


def _feed(guard: Guard, series, start: int = 1, spikes: dict[int, tuple[float, float]] | None = None):
    """Feed (loss, grad_norm) per step; batch id = step. Returns {step: decision} for non-OK steps."""
    out = {}
    for i, (loss, norm) in enumerate(series):
        step = start + i
        if spikes and step in spikes:
            loss, norm = spikes[step]
        d = guard.observe(step, loss, norm, batch_id=step)
        if not d.ok:
            out[step] = d
    return out


@pytest.mark.parametrize("loss, norm, metric", [
    (math.nan, 1.0, "loss"), (math.inf, 1.0, "loss"), (2.5, math.nan, "grad_norm"), (2.5, -math.inf, "grad_norm"),
])
def test_nonfinite_loss_or_grad_norm_is_caught_even_during_warmup(loss, norm, metric):
    g = Guard(GuardConfig(warmup=50))
    _feed(g, _series(3))
    d = g.observe(4, loss, norm, batch_id=4)
    assert d.verdict == Verdict.SKIP
    assert d.signals[0].metric == metric and d.signals[0].nonfinite
    assert d.actions() == ("skip_update",) and d.batch_id == 4


def test_spike_in_loss_is_detected_on_the_step_it_is_injected():
    g = Guard(GuardConfig(warmup=20))
    flagged = _feed(g, _series(100), spikes={60: (3.5, 1.0)})
    assert list(flagged) == [60]
    d = flagged[60]
    assert d.signals[0].metric == "loss" and d.signals[0].z > 6
    assert d.signals[0].baseline == pytest.approx(2.5, abs=0.02)


def test_spike_in_grad_norm_alone_is_detected():
    g = Guard(GuardConfig(warmup=20))
    flagged = _feed(g, _series(80), spikes={50: (2.5, 9.0)})
    assert list(flagged) == [50] and flagged[50].signals[0].metric == "grad_norm"


def test_grad_norm_is_ignored_when_its_check_is_off():
    g = Guard(GuardConfig(warmup=20, check_grad_norm=False))
    assert _feed(g, _series(80), spikes={50: (2.5, 9.0)}) == {}


def test_no_spike_is_judged_before_warmup_and_one_is_right_after():
    series = _series(40)
    g = Guard(GuardConfig(warmup=30))
    assert _feed(g, series[:30], spikes={10: (9.0, 1.0)}) == {}  # 10 is inside the warm-up
    d = g.observe(31, 9.0, 1.0, batch_id=31)
    assert d.verdict == Verdict.SKIP


def test_downward_moves_are_not_spikes():
    g = Guard(GuardConfig(warmup=20))
    assert _feed(g, _series(60), spikes={40: (0.5, 0.1)}) == {}


def test_nonfinite_values_never_enter_the_history():
    g = Guard(GuardConfig(warmup=5))
    _feed(g, [(2.0, 1.0), (math.nan, 1.0), (2.1, math.inf), (math.inf, math.nan)])
    assert g.history["loss"] == [2.0, 2.1]
    assert g.history["grad_norm"] == [1.0, 1.0]
    assert all(math.isfinite(v) for vals in g.state_dict()["history"].values() for v in vals)


def test_history_keeps_only_the_window():
    g = Guard(GuardConfig(window=16, warmup=8))
    _feed(g, _series(40))
    assert len(g.history["loss"]) == 16


def test_a_restored_history_of_the_same_length_is_judged_on_its_own_grad_norms():
    # The guard keeps the gradient norms' logarithms beside the window; a restore (on
    # resume, or a guard reused in one process) must replace them, not judge on the old ones.
    quiet = GuardConfig(window=16, warmup=8, cooldown=0)
    calm = [(2.5, 1.0 + 0.01 * (i % 3)) for i in range(20)]
    wild = [(2.5, 10.0 + 0.1 * (i % 3)) for i in range(20)]
    donor = Guard(quiet)
    _feed(donor, wild)
    reused, fresh = Guard(quiet), Guard(quiet)
    _feed(reused, calm)  # a full window of small norms, as long as the donor's
    reused.load_state_dict(donor.state_dict())
    fresh.load_state_dict(donor.state_dict())
    for g in (reused, fresh):  # 10.05 is ordinary against the wild history, a spike against the calm one
        assert _feed(g, [(2.5, 10.05)], start=21) == {}
    assert reused.history == fresh.history
    assert _feed(reused, [(2.5, 1000.0)], start=22).keys() == _feed(fresh, [(2.5, 1000.0)], start=22).keys() == {22}


def test_flat_series_does_not_turn_tiny_wobbles_into_spikes():
    g = Guard(GuardConfig(warmup=10, min_rel_sigma=0.005))
    flagged = _feed(g, [(2.0, 1.0)] * 30 + [(2.02, 1.0), (2.2, 1.0)])
    assert list(flagged) == [32]  # 1% above a flat line is noise, 10% is a spike
    assert robust_stats([2.0] * 9, 0.005) == (2.0, pytest.approx(0.01))


def _stats_by_sorting(values: list[float], min_rel_sigma: float) -> tuple[float, float]:
    """Median and robust sigma as the definition reads: sort, take the middle, and the same for the deviations."""
    def median(v):
        v = sorted(v)
        n = len(v)
        return v[n // 2] if n % 2 else 0.5 * (v[n // 2 - 1] + v[n // 2])
    med = median(values)
    return med, max(MAD_TO_SIGMA * median([abs(x - med) for x in values]), min_rel_sigma * abs(med), 1e-12)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.one_of(st.floats(-1e6, 1e6, allow_nan=False), st.sampled_from([0.0, 1.0, 2.5, -3.0])),
                min_size=1, max_size=160))
def test_robust_stats_without_sorting_the_deviations_match_the_definition_bit_for_bit(values):
    assert robust_stats(values, 0.01) == _stats_by_sorting(values, 0.01)
    assert robust_stats(sorted(values), 0.0, ordered=True) == _stats_by_sorting(values, 0.0)


@settings(max_examples=400, deadline=None)
@given(metric=st.sampled_from(["loss", "grad_norm"]), min_rel=st.sampled_from([0.0, 0.001, 0.005, 0.05]),
       sigmas=st.sampled_from([0.5, 3.0, 6.0, 8.0]), spread=st.sampled_from([1e-4, 0.01, 0.3, 2.0]),
       n=st.integers(8, 130), seed=st.integers(0, 2**16), factor=st.floats(0.2, 4.0))
def test_the_spike_test_flags_exactly_the_values_above_the_threshold(metric, min_rel, sigmas, spread, n, seed, factor):
    rng = random.Random(seed)
    hist = [abs(rng.gauss(2.0, spread)) + 1e-6 for _ in range(n)]
    value = rng.choice([factor * 2.0, factor * max(hist), _stats_by_sorting(hist, 0)[0]])
    cfg = GuardConfig(warmup=0, min_rel_sigma=min_rel, spike_sigma=sigmas, grad_norm_sigma=sigmas)
    judged = judged_form(metric, hist)
    med, sigma = _stats_by_sorting(judged, 0.0 if metric == "grad_norm" else min_rel)
    if metric == "grad_norm":
        z = (math.log(value) - med) / max(sigma, min_rel)
    else:
        z = (value - med) / sigma
    signal = spike_signal(cfg, metric, value, hist)
    assert (signal is not None) == (z > sigmas)
    assert signal is None or signal.z == z


def test_the_guards_sorted_windows_follow_its_histories_through_trimming_and_a_smaller_window():
    g = Guard(GuardConfig(warmup=10, window=32))
    _feed(g, _series(100, seed=3), spikes={40: (9.0, 50.0), 41: (float("nan"), 1.0)})
    g.cfg.window = 16  # as a live change of guard.window does
    _feed(g, _series(20, seed=4), start=101)
    assert len(g.history["loss"]) == 16
    assert g._ordered == {m: sorted(judged_form(m, g.history[m])) for m in g.history}


def test_spikes_within_the_cooldown_are_skipped_but_not_counted():
    g = Guard(GuardConfig(warmup=20, cooldown=10, rollback_after=2))
    flagged = _feed(g, _series(60), spikes={30: (9.0, 1.0), 33: (9.0, 1.0), 39: (9.0, 1.0)})
    assert [d.verdict for d in flagged.values()] == [Verdict.SKIP] * 3
    assert [d.counted for d in flagged.values()] == [True, False, False]
    assert "cooldown" in flagged[33].reason
    d = g.observe(61, 9.0, 1.0, batch_id=61)  # the cooldown is over: this one counts and escalates
    assert d.verdict == Verdict.ROLLBACK


def test_rollback_after_repeated_spikes_with_the_right_skip_range():
    cfg = GuardConfig(warmup=20, cooldown=5, rollback_after=2, rollback_window=100, skip_batches=50, lr_factor=0.5)
    g = Guard(cfg)
    flagged = _feed(g, _series(80), spikes={40: (9.0, 1.0), 70: (9.0, 1.0)})
    assert flagged[40].verdict == Verdict.SKIP
    d = flagged[70]
    assert d.verdict == Verdict.ROLLBACK
    assert d.to_step == 39  # the newest checkpoint at or before the step before the first spike
    assert d.skip_range == (40, 89)  # from the first spike's batch, skip_batches of them
    assert d.lr_factor == 0.5 and d.lr_scale == 0.5
    assert g.rollbacks == 1 and g.skip_ranges == [[40, 89]]
    assert d.actions() == ("rollback", "skip_batches", "lr_scale")


def test_skip_range_always_covers_the_latest_spike():
    g = Guard(GuardConfig(warmup=20, cooldown=0, rollback_after=2, skip_batches=5))
    flagged = _feed(g, _series(60), spikes={30: (9.0, 1.0), 50: (9.0, 1.0)})
    assert flagged[50].skip_range == (30, 50)


def test_spikes_outside_the_rollback_window_do_not_add_up():
    g = Guard(GuardConfig(warmup=20, cooldown=0, rollback_after=2, rollback_window=20))
    flagged = _feed(g, _series(80), spikes={30: (9.0, 1.0), 60: (9.0, 1.0)})
    assert [d.verdict for d in flagged.values()] == [Verdict.SKIP, Verdict.SKIP]


def test_rollback_steps_set_how_far_back_the_target_lies():
    g = Guard(GuardConfig(warmup=20, rollback_after=1, rollback_steps=100))
    flagged = _feed(g, _series(30), start=200, spikes={220: (9.0, 1.0)})
    assert flagged[220].to_step == 120


def test_abort_after_max_rollbacks():
    g = Guard(GuardConfig(warmup=10, cooldown=0, rollback_after=1, max_rollbacks=2))
    verdicts = []
    for episode in range(3):
        flagged = _feed(g, _series(20, seed=episode), start=100 * episode + 1, spikes={100 * episode + 15: (9.0, 1.0)})
        verdicts += [d.verdict for d in flagged.values()]
    assert verdicts == [Verdict.ROLLBACK, Verdict.ROLLBACK, Verdict.ABORT]
    assert g.aborted and g.rollbacks == 2
    last = flagged[215]
    assert "at most 2" in last.reason and "aborted" in last.reason


def test_max_rollbacks_zero_aborts_at_the_first_rollback_worthy_incident():
    g = Guard(GuardConfig(warmup=10, rollback_after=1, max_rollbacks=0))
    flagged = _feed(g, _series(20), spikes={15: (math.nan, 1.0)})
    assert flagged[15].verdict == Verdict.ABORT


def test_state_round_trips_and_a_resumed_guard_decides_like_an_uninterrupted_one():
    cfg = GuardConfig(warmup=20, cooldown=3, rollback_after=3, rollback_window=200)
    series = _series(150, seed=3)
    spikes = {40: (9.0, 1.0), 90: (8.0, 1.0), 120: (math.nan, 1.0), 140: (9.0, 7.0)}
    whole = Guard(cfg)
    expected = {s: (d.verdict, d.counted, d.to_step, d.skip_range) for s, d in _feed(whole, series, spikes=spikes).items()}

    first = Guard(cfg)
    got = {s: (d.verdict, d.counted, d.to_step, d.skip_range) for s, d in _feed(first, series[:100], spikes=spikes).items()}
    state = first.state_dict()
    resumed = Guard(cfg)
    resumed.load_state_dict(state)
    assert resumed.state_dict() == state
    got |= {s: (d.verdict, d.counted, d.to_step, d.skip_range)
            for s, d in _feed(resumed, series[100:], start=101, spikes=spikes).items()}
    assert got == expected
    assert Verdict.ROLLBACK in [v[0] for v in expected.values()]
    assert resumed.state_dict() == whole.state_dict()


def test_a_rollback_resets_the_detector_but_not_the_ladder():
    g = Guard(GuardConfig(warmup=10, cooldown=0, rollback_after=1, skip_batches=10))
    before_rollback = None
    for step, (loss, norm) in enumerate(_series(30), start=1):
        if step == 20:
            before_rollback = g.state_dict()  # what the checkpoint the loop restores would hold
            loss = 9.0
        d = g.observe(step, loss, norm, batch_id=step)
        if step == 20:
            assert d.verdict == Verdict.ROLLBACK
            break
    assert g.history == {"loss": [], "grad_norm": []}
    # A loop that restores every component also hands the guard its older state: the ladder stays.
    g.load_state_dict(before_rollback)
    assert g.rollbacks == 1 and g.skip_ranges == [[20, 29]] and g.history["loss"] == []
    # ...and warm-up starts over for the restored model.
    assert _feed(g, _series(9), start=19, spikes={25: (9.0, 1.0)}) == {}


def test_a_restart_restores_the_ladder_from_the_checkpoint():
    g = Guard(GuardConfig(warmup=10, rollback_after=1))
    _feed(g, _series(20), spikes={15: (9.0, 1.0)})
    state = g.state_dict()
    fresh = Guard(GuardConfig(warmup=10, rollback_after=1))
    fresh.load_state_dict(state)
    assert fresh.rollbacks == 1 and fresh.skip_ranges == g.skip_ranges and fresh.tick == g.tick


def test_disabled_guard_lets_everything_through():
    g = Guard(GuardConfig(enabled=False))
    assert _feed(g, [(math.nan, math.inf)] * 5) == {}


def test_a_live_threshold_change_takes_effect_at_the_next_step():
    cfg = GuardConfig(warmup=20)
    g = Guard(cfg)
    _feed(g, _series(40))
    assert g.observe(41, 2.56, 1.0, batch_id=41).ok  # about 3 sigma: below the default 6
    cfg.spike_sigma = 2.0
    assert g.observe(42, 2.56, 1.0, batch_id=42).verdict == Verdict.SKIP


def test_agree_is_the_identity_without_a_process_group():
    g = Guard(GuardConfig(warmup=5))
    d = g.observe(1, math.nan, 1.0, batch_id=1)
    assert agree(d) is d


def test_metrics_to_floats_returns_both_values():
    import torch

    assert metrics_to_floats(torch.tensor(2.5), torch.tensor(0.25, dtype=torch.float64)) == (2.5, 0.25)
    assert metrics_to_floats(torch.tensor(1.0), None) == (1.0, None)


def test_replay_labels_a_spike_reproducible_or_transient():
    g = Guard(GuardConfig(warmup=20))
    d = _feed(g, _series(40), spikes={30: (9.0, 1.0)})[30]
    assert replay_check(lambda: (8.9, 1.0), d).label == "reproducible"
    assert replay_check(lambda: (2.51, 1.0), d).label == "transient"

    def broken():
        raise RuntimeError("device lost")

    failed = replay_check(broken, d)
    assert failed.label == "failed" and "device lost" in failed.detail


def test_replay_of_a_real_step_from_its_saved_rng_reproduces():
    """A dropout model: the same RNG state and batch give the same spike again."""
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Dropout(0.5), torch.nn.Linear(8, 1))
    x = torch.randn(16, 8)

    def step(scale: float) -> tuple[float, float]:
        model.zero_grad()
        loss = model(x).pow(2).mean() * scale
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), math.inf)
        return metrics_to_floats(loss, norm)

    g = Guard(GuardConfig(warmup=20))
    for s in range(1, 31):
        assert g.observe(s, *step(1.0), batch_id=s).ok
    saved = torch.get_rng_state()
    d = g.observe(31, *step(1000.0), batch_id=31)  # a step whose data blows the loss up
    assert d.verdict == Verdict.SKIP

    def rerun():
        torch.set_rng_state(saved)
        return step(1000.0)

    assert replay_check(rerun, d).label == "reproducible"


def test_checkpoints_kept_are_those_on_either_side_of_the_spike():
    assert checkpoints_to_keep([50, 100, 150, 200, 250], to_step=139, first_spike_step=140) == [100, 150]
    assert checkpoints_to_keep([50, 100, 150, 200], to_step=40, first_spike_step=140) == [100, 150]
    assert checkpoints_to_keep([100], to_step=139, first_spike_step=140) == [100]


@pytest.mark.parametrize("field, value", [("window", 4), ("spike_sigma", 0.5), ("lr_factor", 1.5),
                                          ("rollback_after", 0), ("min_rel_sigma", 2.0)])
def test_config_values_out_of_range_are_refused_with_the_key(field, value):
    with pytest.raises(UsageError) as e:
        GuardConfig(**{field: value}).validate("guard")
    assert f"guard.{field}" in e.value.message


def test_default_config_is_valid():
    GuardConfig().validate("guard")


def _guarded_run(root: Path, run_id: str, overrides: list[str], rules: list[str]) -> list[dict]:
    """A micro run with the guard judging against `rules`; the guard's events from its log."""
    from trainer.startup import build_trainer

    cfg = load_train_config(MICRO, overrides)
    guard = GuardCallback(cfg.guard, [parse_rule(r) for r in rules])
    try:
        build_trainer(cfg, project_root=root, run_id=run_id, callbacks=[guard], interactive=False).fit()
    except RunFailedError:
        pass  # an abort: its events are what the test reads
    return [e for e in iter_events(root / "entries" / "runs" / run_id / "events.jsonl") if e["kind"] in GUARD_KINDS]


def test_the_guard_ladder_reaches_the_event_log_with_the_documented_fields_and_the_plan(logbook_repo):
    """Spike drills at 12 and 18: skipped, then rolled back to 10 with batches 12-18 skipped and lr x 0.9."""
    evs = _guarded_run(logbook_repo, "ladder", [*SPIKES_AT_12_AND_18, "guard.replay=true"], [RULE])
    assert [(e["step"], e["kind"], e["drill"]) for e in evs] == [
        (12, "divergence_detected", True), (12, "step_skipped", True),
        (18, "divergence_detected", True), (10, "rollback", True), (10, "lr_scaled", True)]
    first, skipped, second, rollback, scaled = (e["data"] for e in evs)
    for detected in (first, second):
        for key in ("metric", "value", "baseline", "scale", "threshold", "z", "nonfinite", "batch_ids", "action", "plan"):
            assert key in detected
        assert set(detected["actions"]) <= set(ACTION_KINDS)  # the vocabulary preregistrations are written in
    assert (first["action"], first["actions"], first["batch_ids"]) == ("skip", ["skip_update"], [12])
    assert (second["action"], second["actions"]) == ("rollback", ["rollback", "skip_batches", "lr_scale"])
    # The drill blew the loss up after the forward pass: the replay, through the loop's own
    # forward/backward, computes the step again without it.
    assert first["replay"]["label"] == "transient"
    # The first spike: the rule is still counting, so skipping follows it.
    assert skipped == {"reason": first["reason"], "metric": "loss", "batch_id": 12, "counted": True,
                       "plan": {"rule": 1, "follows": True}}
    # The second: the rule fired and the guard did exactly what it says, in every event of the incident.
    assert {k: rollback[k] for k in ("from_step", "to_step", "steps_lost", "batches_skipped", "rollbacks", "plan")} == {
        "from_step": 17, "to_step": 10, "steps_lost": 7, "batches_skipped": [12, 18], "rollbacks": 1,
        "plan": {"rule": 1, "follows": True}}
    assert rollback["checkpoint"].endswith("step_000010") and len(rollback["kept"]) == 2
    assert rollback["reason"] == second["reason"] and second["plan"] == rollback["plan"]
    assert {k: scaled[k] for k in ("old", "new", "factor", "reason", "plan")} == {
        "old": 1.0, "new": pytest.approx(0.9), "factor": pytest.approx(0.9), "reason": second["reason"],
        "plan": {"rule": 1, "follows": True}}


def test_an_abort_that_the_rule_does_not_ask_for_is_written_as_a_deviation(logbook_repo):
    evs = _guarded_run(logbook_repo, "abort", [*SPIKES_AT_12_AND_18, "guard.max_rollbacks=0"], [RULE])
    assert [(e["step"], e["kind"]) for e in evs] == [
        (12, "divergence_detected"), (12, "step_skipped"), (18, "divergence_detected"), (17, "run_aborted")]
    detected, aborted = evs[2]["data"], evs[3]["data"]
    assert detected["actions"] == ["abort"] and evs[3]["drill"] is True
    assert aborted == {"reason": detected["reason"], "rollbacks": 0, "plan": {"rule": 1, "follows": False, "differences": [
        "aborted the run, the rule said: roll back, skip batches, scale the learning rate"]}}
    assert "at most 0" in aborted["reason"]


@pytest.mark.slow
def test_guard_in_a_real_training_run_skips_rolls_back_and_aborts(logbook_repo):
    """The real loop: injected spikes are caught on their step; skip, rollback (checkpoints kept), abort."""
    from trainer.observe.callbacks import Callback
    from trainer.config import load_train_config
    from trainer.guard.callback import GuardCallback
    from trainer.startup import build_trainer

    class InjectSpikes(Callback):
        name, priority = "inject", 5  # before the guard sees the numbers

        def post_backward(self, loss, grad_norm):
            if self.trainer.step + 1 in (25, 35, 45):
                loss.mul_(30.0)
                grad_norm.mul_(30.0)

    cfg = load_train_config(ROOT / "configs" / "micro-test.yaml", ["train.steps=60", "checkpoint.every=10"])
    guard_cfg = GuardConfig(warmup=10, cooldown=3, skip_batches=5, max_rollbacks=1)
    trainer = build_trainer(cfg, project_root=logbook_repo, run_id="spiky", callbacks=[GuardCallback(guard_cfg), InjectSpikes()],
                      interactive=False)
    with pytest.raises(RunFailedError):
        trainer.fit()
    events = [e for e in iter_events(logbook_repo / "entries" / "runs" / "spiky" / "events.jsonl")
              if e["kind"] in ("divergence_detected", "step_skipped", "rollback", "lr_scaled", "run_aborted")]
    assert [(e["step"], e["kind"]) for e in events] == [
        (25, "divergence_detected"), (25, "step_skipped"),
        (35, "divergence_detected"), (20, "rollback"), (20, "lr_scaled"),
        (35, "divergence_detected"), (35, "step_skipped"),
        (45, "divergence_detected"), (44, "run_aborted"),
    ]
    rollback = events[3]["data"]
    assert rollback["from_step"] == 34 and rollback["to_step"] == 20 and rollback["batches_skipped"] == [25, 35]
    assert [Path(p).name for p in rollback["kept"]] == ["step_000020-rollback1", "step_000030-rollback1"]
    assert all((Path(p) / "KEEP").exists() and (Path(p) / "COMPLETE").exists() for p in rollback["kept"])
    assert events[4]["data"]["new"] == pytest.approx(0.9)
    assert trainer.data.skip == [[25, 35]] and trainer.lr_scale == pytest.approx(0.9)
    assert "at most 1" in events[-1]["data"]["reason"]


def _two_rank_worker(rank: int, world: int, init_file: str, control_dir: str, out: str) -> None:
    import json as _json

    import torch.distributed as dist

    from logbook.launch.live_channel import ControlChannel

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        cfg = GuardConfig(warmup=10, cooldown=0, rollback_after=2, skip_batches=4)
        g = Guard(cfg, agree=agree)  # the bundled trainer's collective, as its callback passes it
        verdicts = []
        for step, (loss, norm) in enumerate(_series(30, seed=rank), start=1):
            if rank == 1 and step in (20, 25):
                loss = 9.0  # only rank 1 sees the spikes
            verdicts.append(int(g.observe(step, loss, norm, batch_id=step).verdict))
        live_cfg = GuardConfig()
        ch = ControlChannel(Path(control_dir), "r1", {"guard": live_cfg}, rank=rank, world_size=world, grace_s=0,
                            broadcast=_broadcast)
        applied = ch.poll(31)
        Path(out, f"rank{rank}.json").write_text(_json.dumps({
            "verdicts": verdicts, "rollbacks": g.rollbacks, "skip_ranges": g.skip_ranges,
            "spike_sigma": live_cfg.spike_sigma, "applied": [c["key"] for c in applied]}))
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_two_ranks_take_the_same_decisions_and_apply_the_same_live_changes(tmp_path):
    import json as _json

    import torch.multiprocessing as mp

    from logbook.launch.change_requests import new_request, write_request

    control = tmp_path / "control"
    write_request(control, new_request("r1", {"guard.spike_sigma": 4.0}, "tighter", "ada"))
    mp.spawn(_two_rank_worker, args=(2, str(tmp_path / "init"), str(control), str(tmp_path)), nprocs=2, join=True)
    r0, r1 = (_json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    assert r0["verdicts"] == r1["verdicts"]
    assert r0["verdicts"][19] == Verdict.SKIP and r0["verdicts"][24] == Verdict.ROLLBACK
    assert r0["rollbacks"] == r1["rollbacks"] == 1 and r0["skip_ranges"] == r1["skip_ranges"] == [[20, 25]]
    assert r0["spike_sigma"] == r1["spike_sigma"] == 4.0 and r0["applied"] == r1["applied"] == ["guard.spike_sigma"]
