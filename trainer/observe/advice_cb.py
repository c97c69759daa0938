"""Checkpoint-interval advice, adopted by the trainer itself (`checkpoint.adopt_advice`).

At every checkpoint boundary rank 0 asks the logbook for Young's interval
(`logbook.api.checkpoint_advice`: the median blocking save cost and the MTBF,
this run's failures or the configured `checkpoint.mtbf_s`, read from the
run's own event log) and turns it into steps with the median step time
measured in this attempt. Adopting it is a decision that changes training,
so it stays in the loop, at a step boundary: every rank receives rank 0's
figure and changes `checkpoint.every` through live control's path for
scheduled changes, so the change is an `hparam_change` with source `advice`,
applied alike on every rank. Small moves (under a fifth) are not
worth an event and are ignored, and so is a move of a single step.
"""

from __future__ import annotations

import statistics
import time
from collections import deque
from typing import Any

from logbook.api import Run

from ..job import dist
from .callbacks import Callback

_MIN_STEPS_MEASURED = 5
_HYSTERESIS = 0.2


class AdviceCallback(Callback):
    name = "ckpt_advice"
    priority = 60

    def __init__(self) -> None:
        self._times: deque[float] = deque(maxlen=64)
        self._last: float | None = None
        self._after_boundary = False
        self.adopted: int | None = None
        """The interval (steps) this callback set, restored with the checkpoint."""

    def state_dict(self) -> dict[str, Any]:
        return {"adopted": self.adopted}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        adopted = state.get("adopted")
        if isinstance(adopted, int) and adopted > 0:
            self.adopted = adopted
            self.trainer.cfg.checkpoint.every = adopted  # recorded when it was adopted; restored, not changed

    def post_step(self, step: int, metrics: dict[str, Any]) -> None:
        now = time.monotonic()
        if self._last is not None:
            self._times.append(now - self._last)
        self._last = now
        t = self.trainer
        # Decided the step after a boundary, not at it: the loop saves after the callbacks, so a
        # change made at the boundary could skip the save due there, and the next step's advice
        # already prices that save.
        boundary, self._after_boundary = self._after_boundary, step % t.cfg.checkpoint.every == 0
        if not boundary or len(self._times) < _MIN_STEPS_MEASURED:
            return
        proposal = dist.broadcast_object(self._propose(step) if t.dist.rank == 0 else None, t.dist)
        if proposal is None:
            return
        control = next(c for c in t.callbacks if c.name == "control")
        control.channel.apply_scheduled(step, {"checkpoint.every": proposal["every"]}, proposal["reason"],
                                        tokens=t.tokens, source="advice")
        self.adopted = proposal["every"]

    def _propose(self, step: int) -> dict[str, Any] | None:
        """Rank 0: the new interval in steps and its reason, or None to keep the current one."""
        t = self.trainer
        adv = t.book.run.checkpoint_advice(mtbf_s=t.cfg.checkpoint.mtbf_s or None)
        if not adv.complete:
            return None
        step_s = statistics.median(self._times)
        every = advised_steps(adv.young_s, step_s, t.cfg.train.steps)
        current = t.cfg.checkpoint.every
        if abs(every - current) <= max(1, _HYSTERESIS * current):  # one step is within the noise
            return None
        reason = (f"checkpoint advice: {adv.sentence()} At {Run.format_duration(step_s)} a step, "
                  f"that is every {every} steps")
        return {"every": every, "reason": reason}


def advised_steps(interval_s: float, step_s: float, total_steps: int) -> int:
    """An interval in seconds as a whole number of steps, at least 1 and at most the run's length."""
    return max(1, min(total_steps, round(interval_s / max(step_s, 1e-9))))
