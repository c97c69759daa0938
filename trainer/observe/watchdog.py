"""The hang watchdog: a step that takes far too long ends the attempt so it can restart.

A collective that never returns (a dead peer, a wedged device) blocks the
training thread forever; only another thread can notice. The timeout follows
the run: `train.hang_factor` times the median of the recent step times, never
less than the floor `train.hang_timeout_s` (which also switches it on). A
step (save and evaluation included) that outlasts it writes `hang` and exits
the process with EXIT_HANG so torchrun starts a fresh attempt.
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from collections import deque

from .. import EXIT_HANG
from .callbacks import Callback

_WINDOW = 64  # recent step times the median is taken over


class HangWatchdog(Callback):
    name = "watchdog"
    priority = 0

    def __init__(self, floor_s: float, factor: float = 10.0) -> None:
        self.floor_s = floor_s
        self.factor = factor
        self.timeout_s = floor_s
        """The timeout in force: max(floor, factor x median step time); read by the watchdog thread."""
        self._times: deque[float] = deque(maxlen=_WINDOW)
        self._last: float | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def post_step(self, step: int, metrics: dict) -> None:
        if self.floor_s <= 0:
            return
        now = time.monotonic()
        if self._last is not None:
            self._times.append(now - self._last)
            self.timeout_s = derived_timeout(self.floor_s, self.factor, self._times)
        self._last = now
        if self._thread is None:
            self._thread = threading.Thread(target=self._watch, name="hang-watchdog", daemon=True)
            self._thread.start()

    def _watch(self) -> None:
        while not self._stop.wait(min(1.0, self.floor_s / 4)):
            elapsed = time.monotonic() - self.trainer.last_progress
            timeout = self.timeout_s
            if elapsed > timeout:
                t = self.trainer
                median = statistics.median(self._times) if self._times else None
                t.emit("hang", drill=t.drill_active, timeout_s=round(timeout, 3), elapsed_s=round(elapsed, 3),
                       floor_s=self.floor_s, median_step_s=None if median is None else round(median, 6))
                if t.rank_mark is not None:
                    # Only rank 0 writes events: a hung rank elsewhere says so in its own mark, so the
                    # restart names it instead of the broken collective its peers saw.
                    t.rank_mark.ended("hang")
                os._exit(EXIT_HANG)  # the training thread is stuck: no clean unwinding is possible

    def close(self) -> None:
        self._stop.set()


def derived_timeout(floor_s: float, factor: float, step_times) -> float:
    """max(floor, factor x median of the step times): a slow run is not a hung one, a fast one is caught early."""
    if not step_times:
        return floor_s
    return max(floor_s, factor * statistics.median(step_times))
