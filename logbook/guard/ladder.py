"""The divergence guard's ladder: from a spike to skip, rollback or abort, agreed by every rank.

After the backward pass and before `optimizer.step()`, every step hands its
loss and gradient norm to `Guard.observe`. A NaN or inf in either is caught at
once (the update must not happen); finite values are judged by the detector
(logbook/runs/spikes.py). The ladder, per run (`GuardConfig`):

1. skip: the update is dropped. The loop does not call `optimizer.step()`, so
   Adam's step counters (and bias correction) count real updates only; the
   loop's own step counter, the schedule position (a function of that counter)
   and the data position still advance, so a skipped batch is not retried and
   the learning-rate curve keeps its shape.
2. rollback: after `rollback_after` counted spikes within `rollback_window`
   steps, restore the newest checkpoint at or before `to_step`, never train
   on batches `skip_range` again (the first spike's batch onwards, at least
   `skip_batches` of them, always including the latest spike's batch), and
   multiply the learning rate by `lr_factor` (a multiplier over the schedule,
   which the schedule cannot overwrite).
3. abort: the rollback that would exceed `max_rollbacks` aborts the run.

A counted spike starts a `cooldown`: further spikes within it are skipped but
not counted again, so one burst is one incident and escalation needs the
problem to recur.

State. `state_dict()` holds the detector's histories and the ladder (counted
spikes, rollbacks, skip ranges). A rollback resets the detector (the restored
model is judged afresh) but never the ladder: the guard marks itself as
rolling back, and the checkpoint load that performs the rollback keeps the
live ladder instead of the older one in the checkpoint. Otherwise the count
of rollbacks would rewind with the model and `max_rollbacks` never trip.

Ranks. Every rank must take the same decision: feed the rank-averaged loss and
the global gradient norm, and give the guard an `agree` (the bundled trainer's
all-reduces `agreement_code` when a process group is initialised; this module
runs no collective and imports no torch) so that one rank's alarm is every
rank's.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from logbook.runs.spikes import METRICS, judged_form, judged_value, spike_signal

from .config import GuardConfig
from .decision import Decision, Verdict, describe

STATE_VERSION = 1


class Guard:
    """A pure decision engine: feed it each step's numbers, act on its `Decision`."""

    def __init__(self, cfg: GuardConfig, rules: Iterable[Any] | None = None,
                 agree: Callable[[Decision, Any], Decision] | None = None) -> None:
        self.cfg = cfg
        self.agree = agree
        """Makes every rank's decision the strongest one (the loop's collective); None: one process."""
        self.rules = None if rules is None else list(rules)
        """The preregistration's contingency rules, to judge each action against."""
        self.history: dict[str, list[float]] = {m: [] for m in METRICS}
        self._ordered: dict[str, list[float]] | None = None
        """Each history as its spike test reads it (the gradient norm as logarithms), sorted and kept
        beside it, so a step sorts and logs nothing (None: to be worked out again, after the history
        was reset or restored)."""
        self.tick = 0
        """Steps observed, ever (it does not rewind with a rollback)."""
        self.spikes: list[dict[str, int | None]] = []
        """Counted spikes still inside the rollback window: {tick, step, batch}."""
        self.last_counted_tick: int | None = None
        self.rollbacks = 0
        self.skip_ranges: list[list[int]] = []
        self.aborted = False
        self.rolling_back = False

    # --- the decision -----------------------------------------------------------

    def observe(self, step: int, loss: float, grad_norm: float | None, batch_id: int | None = None,
                *, lr_scale: float = 1.0, group: Any = None) -> Decision:
        """Judge step `step` (its update not yet applied) and commit the decision to the ladder."""
        self.rolling_back = False  # a rollback, if any, is done by the time the next step is judged
        if not self.cfg.enabled:
            return Decision(Verdict.OK, step, batch_id)
        proposal = self._judge(step, float(loss), None if grad_norm is None else float(grad_norm), batch_id, lr_scale)
        decision = self.agree(proposal, group) if self.cfg.agree_across_ranks and self.agree else proposal
        self._commit(decision)
        if decision.verdict != Verdict.OK:  # the common step builds no reason and no events
            describe(decision, self.cfg, self.rules, self.rollbacks)
        self.tick += 1
        return decision

    def _judge(self, step: int, loss: float, grad_norm: float | None, batch_id: int | None, lr_scale: float) -> Decision:
        cfg, ordered, signals = self.cfg, self._sorted_histories(), []
        for m, v in (("loss", loss), ("grad_norm", grad_norm if cfg.check_grad_norm else None)):
            if v is None:
                continue
            signal = spike_signal(cfg, m, v, self.history[m], ordered[m])  # judged before v joins its window
            if signal is not None:
                signals.append(signal)
            if math.isfinite(v):
                self._push(m, v, ordered[m])
        if not signals:
            return Decision(Verdict.OK, step, batch_id, lr_scale_before=lr_scale)
        signals.sort(key=lambda s: (not s.nonfinite, -s.z))
        counted = self.last_counted_tick is None or self.tick - self.last_counted_tick >= self.cfg.cooldown
        window = [s for s in self.spikes if self.tick - int(s["tick"]) < self.cfg.rollback_window]
        if counted:
            window.append({"tick": self.tick, "step": step, "batch": batch_id})
        d = Decision(Verdict.SKIP, step, batch_id, signals=signals, counted=counted,
                     spike_steps=[int(s["step"]) for s in window], lr_scale_before=lr_scale)
        if counted and len(window) >= self.cfg.rollback_after:
            if self.rollbacks >= self.cfg.max_rollbacks:
                d.verdict = Verdict.ABORT
            else:
                d.verdict = Verdict.ROLLBACK
                first = window[0]
                d.to_step = max(0, int(first["step"]) - max(1, self.cfg.rollback_steps))
                d.skip_range = self._skip_range(first["batch"], batch_id)
        return d

    def _sorted_histories(self) -> dict[str, list[float]]:
        o, h = self._ordered, self.history
        if o is None or len(o["loss"]) != len(h["loss"]) or len(o["grad_norm"]) != len(h["grad_norm"]):
            self._ordered = o = {m: sorted(judged_form(m, h[m])) for m in METRICS}
        return o

    def _push(self, metric: str, value: float, ordered: list[float]) -> None:
        """Append a finite value to the metric's window, dropping the oldest beyond `window`."""
        hist = self.history[metric]
        hist.append(value)
        bisect.insort(ordered, judged_value(metric, value))
        while len(hist) > self.cfg.window:
            del ordered[bisect.bisect_left(ordered, judged_value(metric, hist.pop(0)))]

    def _skip_range(self, first_batch: int | None, last_batch: int | None) -> tuple[int, int] | None:
        if first_batch is None or self.cfg.skip_batches <= 0:
            return None
        hi = first_batch + self.cfg.skip_batches - 1
        return int(first_batch), int(max(hi, last_batch if last_batch is not None else hi))

    def _commit(self, d: Decision) -> None:
        if d.verdict == Verdict.OK:
            return
        if d.counted:
            self.spikes.append({"tick": self.tick, "step": d.step, "batch": d.batch_id})
            self.last_counted_tick = self.tick
        self.spikes = [s for s in self.spikes if self.tick - int(s["tick"]) < self.cfg.rollback_window]
        if d.verdict == Verdict.ROLLBACK:
            d.lr_factor = self.cfg.lr_factor
            d.lr_scale = d.lr_scale_before * d.lr_factor
            self.rollbacks += 1
            if d.skip_range:
                self.skip_ranges.append(list(d.skip_range))
            self.spikes.clear()
            self.reset_detector()
            self.rolling_back = True
        elif d.verdict == Verdict.ABORT:
            self.aborted = True

    def reset_detector(self) -> None:
        """Forget the rolling histories (after a rollback the restored model is judged afresh)."""
        self.history = {m: [] for m in METRICS}
        self._ordered = None

    # --- state --------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        return {
            "version": STATE_VERSION,
            "history": {m: list(v) for m, v in self.history.items()},
            "tick": self.tick,
            "spikes": [dict(s) for s in self.spikes],
            "last_counted_tick": self.last_counted_tick,
            "rollbacks": self.rollbacks,
            "skip_ranges": [list(r) for r in self.skip_ranges],
            "aborted": self.aborted,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore on resume; during a rollback keep the live ladder (see the module docstring)."""
        if self.rolling_back:
            self.rolling_back = False
            self.reset_detector()
            return
        self.history = {m: [float(x) for x in state.get("history", {}).get(m, [])] for m in METRICS}
        self._ordered = None
        self.tick = int(state.get("tick", 0))
        self.spikes = [dict(s) for s in state.get("spikes", [])]
        lct = state.get("last_counted_tick")
        self.last_counted_tick = None if lct is None else int(lct)
        self.rollbacks = int(state.get("rollbacks", 0))
        self.skip_ranges = [[int(a), int(b)] for a, b in state.get("skip_ranges", [])]
        self.aborted = bool(state.get("aborted", False))


# --- multi-rank agreement -------------------------------------------------------------


def agreement_code(decision: Decision) -> list[int]:
    """Five integers whose element-wise maximum over ranks is every rank's strongest decision.

    The verdict code, whether the spike counts, and the rollback target and skip
    range (equal on every rank that rolls back, since their ladders are equal),
    each shifted by one so that "none" (-1) is the smallest.
    """
    lo, hi = decision.skip_range or (-1, -1)
    to = -1 if decision.to_step is None else decision.to_step
    return [int(decision.verdict), int(decision.counted), to + 1, lo + 1, hi + 1]


def agreed(decision: Decision, code: Sequence[int]) -> Decision:
    """`decision` as the ranks' reduced `agreement_code` says it: unchanged when this rank's was the strongest."""
    verdict, counted, to1, lo1, hi1 = (int(c) for c in code)
    if verdict == decision.verdict and bool(counted) == decision.counted:
        return decision
    return dataclasses.replace(
        decision, verdict=Verdict(verdict), counted=bool(counted),
        to_step=to1 - 1 if to1 else None, skip_range=(lo1 - 1, hi1 - 1) if hi1 else None,
        events=[],
    )
