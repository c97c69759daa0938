"""Fault drills: planned failures that prove restarts and resumes work.

A drill fires once, at a given step of a given attempt (default the first, so
it does not refire after the restart it causes). `fault_injected` is written
before the fault fires, and every event the drill causes in this attempt (the
`attempt_failed`, `preempted` or `hang`) carries `drill: true`, as does the
`restart` of the next attempt.

- exception: raises InjectedFault after the step.
- sigkill: SIGKILL to itself after the step, or with `when: save` in the middle
  of writing that step's checkpoint (after its first file, before COMPLETE).
- sigterm: SIGTERM to itself: the preemption path (save, `preempted`, exit 75).
- hang: stops making progress; the watchdog (train.hang_timeout_s) ends it.
- corrupt_checkpoint: flips bytes in the newest complete checkpoint, so the
  next resume must reject it and fall back to the one before.
- nan, spike: the step's loss and gradients turn NaN, or are multiplied by
  `factor`, after the backward pass and before the divergence guard looks, as
  if the batch had blown up (`DivergenceDrill`). Nothing is killed: the guard
  must catch it on that very step, and every event of its response (the
  `divergence_detected`, `step_skipped`, `rollback`, `lr_scaled`) carries
  `drill: true`. A rollback replays steps; the drill still fires only once.
"""

from __future__ import annotations

import math
import os
import signal
import time

import torch

from .checkpoints.checkpoint import list_checkpoints
from .config import FaultConfig
from .observe.callbacks import Callback


class InjectedFault(RuntimeError):
    """The exception a drill raises."""


DIVERGENCE_KINDS = ("nan", "spike")


class FaultInjector(Callback):
    name = "faults"
    priority = 1000  # after every observer has seen the step

    def __init__(self, faults: list[FaultConfig], attempt: int) -> None:
        self.faults = [f for f in faults if f.attempt == attempt and f.kind not in DIVERGENCE_KINDS]

    def pre_train(self) -> None:
        rank = self.trainer.dist.rank
        # Only rank 0 writes events: it announces the drills aimed at other ranks as they fire.
        self.elsewhere = [f for f in self.faults if f.rank not in (None, rank)] if rank == 0 else []
        self.faults = [f for f in self.faults if f.rank is None or f.rank == rank]
        if any(f.when == "save" for f in self.faults):
            self.trainer.checkpointer.watch_progress(self._during_save)

    def post_step(self, step: int, metrics: dict) -> None:
        for f in self.elsewhere:
            if f.step == step and f.when == "step":
                self._announce(f, step, rank=f.rank)
        for f in self.faults:
            if f.step == step and f.when == "step":
                self._fire(f, step)

    def _announce(self, f: FaultConfig, step: int, **extra) -> None:
        self.trainer.mark_drill()
        self.trainer.emit("fault_injected", drill=True, fault=f.kind, at_step=step, **extra)

    def _during_save(self, stage: str, step: int) -> None:
        for f in self.faults:
            if f.when == "save" and f.step == step:
                self._announce(f, step, when="save")
                os.kill(os.getpid(), signal.SIGKILL)

    def _fire(self, f: FaultConfig, step: int) -> None:
        if f.kind == "corrupt_checkpoint":
            if self.trainer.dist.rank != 0:
                return  # one rank flips the bytes; two would flip them back
            self.trainer.checkpointer.wait()
            ckpts = list_checkpoints(self.trainer.checkpointer.directory)
            if not ckpts:
                return
            # The model's bytes: the torch format's model.pt, or rank 0's shards in a DCP checkpoint.
            path = next((p for p in (ckpts[-1][1] / "model.pt", ckpts[-1][1] / "__0_0.distcp") if p.exists()), None)
            if path is None:
                return
            self._announce(f, step, path=str(ckpts[-1][1]))
            _flip_bytes(path)
            return
        self._announce(f, step)
        if f.kind == "exception":
            raise InjectedFault(f"injected exception at step {step}")
        if f.kind == "sigkill":
            os.kill(os.getpid(), signal.SIGKILL)
        elif f.kind == "sigterm":
            os.kill(os.getpid(), signal.SIGTERM)
        elif f.kind == "hang":
            while True:  # the watchdog thread ends the process
                time.sleep(0.05)


class DivergenceDrill(Callback):
    """Blows up the loss of a step before the guard judges it: `nan` and `spike` drills."""

    name = "divergence_drill"
    priority = 15  # after live control (10), before the guard (20) sees the numbers

    def __init__(self, faults: list[FaultConfig], attempt: int) -> None:
        self.faults = [f for f in faults if f.attempt == attempt and f.kind in DIVERGENCE_KINDS]
        self.fired: set[int] = set()
        """Indices into `faults` already fired in this attempt (a rollback replays their step)."""

    def post_backward(self, loss: torch.Tensor, grad_norm: torch.Tensor) -> None:
        t = self.trainer
        step = t.step + 1
        for i, f in enumerate(self.faults):
            if f.step != step or i in self.fired:
                continue
            self.fired.add(i)
            # Every rank knows the step is a drill (rank 0 writes the events), but only the
            # targeted rank blows up: the all-reduced loss carries it to the others.
            t.mark_drill(step)
            factor = math.nan if f.kind == "nan" else float(f.factor)
            extra = {} if f.kind == "nan" else {"factor": factor}
            if f.rank is not None:
                extra["rank"] = f.rank
            t.emit("fault_injected", step=step, drill=True, fault=f.kind, at_step=step,
                   batch_id=t.data.next_batch - 1, **extra)
            if f.rank is None or f.rank == t.dist.rank:
                _blow_up(t.raw_model, loss, grad_norm, factor)
        return None


def _blow_up(model: torch.nn.Module, loss: torch.Tensor, grad_norm: torch.Tensor, factor: float) -> None:
    """What a bad batch does: the loss, every gradient and their norm scaled by `factor` (NaN: poisoned)."""
    tensors = [p.grad for p in model.parameters() if p.grad is not None] + [loss, grad_norm]
    with torch.no_grad():
        for x in tensors:
            if math.isnan(factor):
                x.fill_(math.nan)
            else:
                x.mul_(factor)


def _flip_bytes(path, count: int = 64) -> None:
    """Invert `count` bytes in the middle of a file, in place."""
    size = path.stat().st_size
    with open(path, "r+b") as f:
        f.seek(size // 2)
        data = f.read(count)
        f.seek(size // 2)
        f.write(bytes(b ^ 0xFF for b in data))
        f.flush()
        os.fsync(f.fileno())
