"""Progress on stderr: a rich bar on a terminal, plain lines otherwise (Slurm, CI, pipes)."""

from __future__ import annotations

import math
import os
import sys
from typing import Any

from .callbacks import Callback


def _interactive() -> bool:
    return sys.stderr.isatty() and not os.environ.get("CI") and not os.environ.get("SLURM_JOB_ID")


def format_line(step: int, total: int, m: dict[str, Any]) -> str:
    """One plain progress line (also the text after the bar)."""
    parts = [f"step {step}/{total}"]
    if "loss" in m:
        parts.append(f"loss {m['loss']:.4f}")
    if "val_loss" in m:
        parts.append(f"val {m['val_loss']:.4f}")
    if "lr" in m:
        parts.append(f"lr {m['lr']:.2e}")
    if "grad_norm" in m:
        parts.append(f"gnorm {m['grad_norm']:.3f}")
    if m.get("tokens_per_s"):
        parts.append(f"{m['tokens_per_s']:,.0f} tok/s")
    return " · ".join(parts)


class ProgressReporter(Callback):
    """Shows the run's progress; rank 0 only."""

    name = "progress"
    priority = 900

    def __init__(self, total_steps: int, log_every: int, attempt: int, interactive: bool | None = None) -> None:
        self.total = total_steps
        self.attempt = attempt
        self.interactive = _interactive() if interactive is None else interactive
        # Plain lines: about a hundred per run at most, on multiples of log_every.
        self.every = log_every * max(1, math.ceil(total_steps / 100 / log_every))
        self._progress = None
        self._task = None

    def pre_train(self) -> None:
        start = self.trainer.step
        if self.interactive:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self._progress = Progress(TextColumn(f"attempt {self.attempt}"), BarColumn(), MofNCompleteColumn(),
                                      TimeRemainingColumn(), TextColumn("{task.description}"),
                                      console=Console(stderr=True), transient=False)
            self._progress.start()
            self._task = self._progress.add_task("", total=self.total, completed=start)
        else:
            self._say(f"attempt {self.attempt}: training steps {start + 1}..{self.total}")

    def post_step(self, step: int, metrics: dict[str, Any]) -> None:
        if self._progress is not None:
            desc = format_line(step, self.total, metrics).split(" · ", 1)[-1] if "loss" in metrics else None
            self._progress.update(self._task, completed=step, **({"description": desc} if desc else {}))
        elif "loss" in metrics and (step % self.every == 0 or step == self.total):
            self._say(format_line(step, self.total, metrics))

    def report_eval(self, step: int, val_loss: float) -> None:
        line = f"step {step}/{self.total} · val_loss {val_loss:.4f}"
        if self._progress is not None:
            self._progress.console.print(line)
        else:
            self._say(line)

    def _say(self, line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
