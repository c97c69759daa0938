"""The hang watchdog: a step that takes far too long ends the attempt so it can restart.

A collective that never returns (a dead peer, a wedged device) blocks the
training thread forever; only another thread can notice. After the first
step, if `train.hang_timeout_s` passes without progress, it writes `hang` and
exits the process with EXIT_HANG so torchrun starts a fresh attempt.
"""

from __future__ import annotations

import os
import threading
import time

from . import EXIT_HANG
from .callbacks import Callback


class HangWatchdog(Callback):
    name = "watchdog"
    priority = 0

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def post_step(self, step: int, metrics: dict) -> None:
        if self._thread is None and self.timeout_s > 0:
            self._thread = threading.Thread(target=self._watch, name="hang-watchdog", daemon=True)
            self._thread.start()

    def _watch(self) -> None:
        period = min(1.0, self.timeout_s / 4)
        while not self._stop.wait(period):
            elapsed = time.monotonic() - self.trainer.last_progress
            if elapsed > self.timeout_s:
                t = self.trainer
                t.emit("hang", drill=t.drill_active, timeout_s=self.timeout_s, elapsed_s=round(elapsed, 3))
                os._exit(EXIT_HANG)  # the training thread is stuck: no clean unwinding is possible

    def close(self) -> None:
        self._stop.set()
