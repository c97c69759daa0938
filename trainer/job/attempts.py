"""The heartbeat: an attempt's last sign of life, written by the trainer every step.

The attempt number is 1 + the highest attempt the run has left any trace of
(its event log, its heartbeat), so torchrun restarts, Slurm requeues and
manual relaunches all keep counting. Reading what earlier attempts left and
why the last one ended is the logbook's (`logbook.runs.attempt_ends`, through
`logbook.api`: `RunHistory`, `classify_restart`); this module only writes.
"""

from __future__ import annotations

import os
from pathlib import Path

_HEARTBEAT_BYTES = 256


class Heartbeat:
    """A tiny file rewritten in place every step: the last sign of life of an attempt.

    One `pwrite` of a fixed-size record per step (no fsync, no rename): a killed
    process's writes survive in the page cache, and the cost is microseconds.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._fd: int | None = None

    def beat(self, attempt: int, step: int, now: float) -> None:
        if self._fd is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
        # The JSON spelled out by hand: a third of the cost of json.dumps, and this runs every step.
        rec = b'{"attempt": %d, "step": %d, "time": %r, "pid": %d}' % (attempt, step, float(now), os.getpid())
        os.pwrite(self._fd, rec.ljust(_HEARTBEAT_BYTES), 0)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
