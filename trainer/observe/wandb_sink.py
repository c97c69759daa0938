"""Weights & Biases, optional: the callback that drives the logbook's mirror of a run (`logbook.api.WandbMirror`).

The mirror does the work, with no torch and no trainer in sight: one W&B run
per logbook run across attempts, rows that keep replayed steps, the run's
events counted, tabled and alerted, goodput in the summary, and one warning
line instead of a failure when wandb is missing or breaks. This callback
hands it what the loop knows (the step, the attempt, the metrics, the latest
validation loss) and whether the attempt is failing. Only rank 0 mirrors.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from typing import Any

from logbook.api import WandbConfig

from .callbacks import Callback


class WandbSink(Callback):
    """Mirrors metrics and events into one W&B run per logbook run; never stops training."""

    name = "wandb"
    priority = 950  # after telemetry and progress have added their keys, before a drill fires

    def __init__(self, cfg: WandbConfig, *, say: Callable[[str], None] | None = None) -> None:
        self.cfg = cfg
        self.say = say or (lambda line: print(line, file=sys.stderr, flush=True))
        self.mirror: Any = None
        self._last_step = 0
        self._failing = False

    @property
    def run(self) -> Any:
        """The live W&B run, or None (not started, disabled, or finished)."""
        return self.mirror.run if self.mirror is not None else None

    @property
    def disabled_reason(self) -> str | None:
        """Why the mirror turned itself off this attempt, or None."""
        return self.mirror.disabled_reason if self.mirror is not None else None

    def pre_train(self) -> None:
        t = self.trainer
        if self.cfg.enabled and t.dist.rank == 0:
            self.mirror = t.book.run.wandb_mirror(self.cfg, config=dataclasses.asdict(t.cfg), emit=t.emit, say=self.say,
                                                  load_wandb=_import_wandb)
            self.mirror.start()

    def post_step(self, step: int, metrics: dict[str, Any]) -> None:
        self._last_step = step
        if self.mirror is not None and "loss" in metrics:  # log steps only
            self.mirror.log_step(step, self.trainer.attempt, metrics, self.trainer.last_val)

    def on_error(self, exc: BaseException) -> None:
        self._failing = True

    def close(self) -> None:
        if self.mirror is not None:
            self.mirror.finish(self._last_step, self.trainer.last_val, failing=self._failing)


def _import_wandb() -> Any:
    import wandb  # only now, on the rank that mirrors, and only when W&B is enabled

    return wandb
