"""Chronicle a PyTorch Lightning run: `Trainer(callbacks=[LogbookCallback()])`.

    from logbook.integrations.lightning import LogbookCallback
    trainer = L.Trainer(max_steps=1000, callbacks=[LogbookCallback()])

What each hook records (the recording itself is `recorder.Recorder`'s):

- `on_train_start` (after Lightning restored `ckpt_path`): opens the run with
  `run_from_env(total_steps=max_steps or estimated_stepping_batches)`; outside
  `logbook run`, a `restart` owed by a killed attempt and `run_started`
  (world size, the step resumed from and the checkpoint file; under the
  launcher that step is handed to it); `config_recorded` with the module's and
  datamodule's `hparams_initial` and the seed `seed_everything` set.
- `on_before_backward` (with `on_divergence="skip"`): the loss-spike check on
  the loss about to be backpropagated (its mean over the ranks, so that they
  all decide alike); a spike or a non-finite loss is recorded
  (`divergence_detected`, `action: skip`, then `step_skipped`).
- `on_before_optimizer_step`: the gradients' global L2 norm (after AMP's
  unscale); on a step flagged for a skip, then every gradient of the
  optimizer's parameters set to None, so the optimizer leaves them, and its
  moments, as they were: the update does not happen.
- `on_train_batch_end`, once per optimizer step: the metrics row (the loss
  `training_step` returned, the first optimizer's `lr`, `grad_norm`), the
  loss-spike check (unless it ran before the backward pass) and the
  milestones due; with `on_divergence="stop"` a spike sets `trainer.should_stop`.
- `on_validation_end`: the logged `val_loss` (or `val/loss`, `eval_loss`), and
  every other number in `trainer.callback_metrics` that is not a bundled
  metric (`val_acc`, `val/f1` as `val_f1`) under its own name, in one row.
- `on_save_checkpoint`: Lightning calls it before it writes the file, so
  `checkpoint_saved` is recorded at the next hook, when the file is complete,
  with the newest file the `ModelCheckpoint` callbacks name.
- `on_train_end`: `run_finished`, or `run_aborted` after a stop on divergence;
  `on_exception`: `run_failed` with the exception as its reason.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Mapping
from typing import Any

from lightning.pytorch import Callback

from logbook.integrations.recorder import Recorder


class LogbookCallback(Callback):
    """Records the Lightning run in the logbook: events, per-step metrics, milestones, checkpoints, spikes.

    `run_id`: the run to record (default: the script's name and the time; under
    `logbook run -- CMD`, the launcher's run). Pass the same id to every
    relaunch of a run that resumes outside `logbook run`. `project_root`: the
    logbook's repository (default: the current directory).
    `on_divergence`: what a non-finite loss or one more than `spike_sigma`
    robust sigmas above its rolling median does: "record" (the default)
    records it, "skip" also skips that step's optimizer update (judged on the
    loss before the backward pass), "stop" stops training.
    `stop_on_divergence=True` is the older spelling of "stop". `milestones`:
    the fractions of the run to write progress notes at (default: logbook.yaml's).
    """

    def __init__(self, run_id: str | None = None, *, project_root: Any = None, on_divergence: str | None = None,
                 stop_on_divergence: bool = False, spike_sigma: float = 6.0, milestones: Any = None) -> None:
        self.recorder = Recorder("lightning", run_id=run_id, project_root=project_root, on_divergence=on_divergence,
                                 stop_on_divergence=stop_on_divergence, spike_sigma=spike_sigma, milestones=milestones)
        self._skip = False  # the step being trained was flagged: its update is to be skipped
        self._last_lr: float | None = None  # the rate the last update used: what an unscheduled run expects
        self._step = -1  # the last optimizer step recorded (gradient accumulation calls batch hooks more often)
        self._grad_norm: Any = None
        self._save: tuple[int, float] | None = None  # (step, time) of a save Lightning has begun

    def on_train_start(self, trainer, pl_module):
        step = int(trainer.global_step)
        total = trainer.max_steps if trainer.max_steps and trainer.max_steps > 0 else trainer.estimated_stepping_batches
        self._step = step
        self.recorder.begin(total_steps=int(total) if math.isfinite(total) else 0, step=step,
                            world_size=int(trainer.world_size), device=str(pl_module.device),
                            resumed_from=str(trainer.ckpt_path) if step > 0 and trainer.ckpt_path else None)
        # What Lightning's own `Logger.log_hyperparams` receives: the module's and the datamodule's initial hparams.
        dm = getattr(trainer, "datamodule", None)
        values = {**dict(getattr(dm, "hparams_initial", None) or {}), **dict(pl_module.hparams_initial or {})}
        seed = os.environ.get("PL_GLOBAL_SEED", "")  # what `seed_everything` set
        self.recorder.config(values, source="the LightningModule's and LightningDataModule's hparams_initial",
                             seed=int(seed) if seed.lstrip("-").isdigit() else None)

    def on_before_backward(self, trainer, pl_module, loss):
        if self.recorder.on_divergence != "skip":
            return
        if trainer.world_size > 1:  # every rank judges the same mean loss, so all of them skip or none does
            loss = trainer.strategy.reduce(loss.detach(), reduce_op="mean")
        if self.recorder.judge(int(trainer.global_step) + 1, loss):
            self._skip = True

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        self._check_lr(trainer, optimizer)
        grads = [p.grad.detach() for p in pl_module.parameters() if p.grad is not None]
        self._grad_norm = sum(g.float().norm() ** 2 for g in grads) ** 0.5 if grads else None
        if self._skip:  # an optimizer passes over a parameter whose grad is None: no update, no moment change
            for group in optimizer.param_groups:
                for p in group["params"]:
                    p.grad = None

    def _check_lr(self, trainer, optimizer) -> None:
        """The rate this update uses, against its scheduler's (without one: the rate the last update used)."""
        if not optimizer.param_groups:
            return
        used = optimizer.param_groups[0].get("lr")
        configs = getattr(trainer, "lr_scheduler_configs", None) or []
        expected = configs[0].scheduler.get_last_lr()[0] if configs else self._last_lr
        self.recorder.lr_used(int(trainer.global_step) + 1, used, expected)
        self._last_lr = used

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self._record_save(trainer)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        step = int(trainer.global_step)
        if step == self._step:
            return  # no optimizer step yet (accumulating gradients)
        self._step = step
        if self.recorder.milestone_due(step) and _validates_after(trainer, batch_idx):
            self.recorder.hold_milestones(step)  # the note waits for this step's validation, and quotes it
        loss = outputs.get("loss") if isinstance(outputs, Mapping) else outputs
        lr = trainer.optimizers[0].param_groups[0].get("lr") if trainer.optimizers else None
        if self.recorder.step(step, loss, lr=lr, grad_norm=self._grad_norm,
                              check=self.recorder.on_divergence != "skip"):
            trainer.should_stop = True
        self._grad_norm, self._skip = None, False

    def on_validation_end(self, trainer, pl_module):
        if trainer.sanity_checking:
            return
        # One read of each logged value per validation, not per step: the cost stays off the training loop.
        self.recorder.evaluation(int(trainer.global_step), trainer.callback_metrics)

    def on_save_checkpoint(self, trainer, pl_module, checkpoint):
        if self._save is None or self._save[0] != trainer.global_step:  # `save_last` writes a second file
            self._record_save(trainer)
            self._save = (int(trainer.global_step), time.time())

    def on_train_end(self, trainer, pl_module):
        self._record_save(trainer)
        self.recorder.end(int(trainer.global_step))

    def on_exception(self, trainer, pl_module, exception):
        self.recorder.fail(int(trainer.global_step), exception)

    def _record_save(self, trainer) -> None:
        """`checkpoint_saved` for the save begun earlier, now that Lightning has written it."""
        if self._save is None or self._save[0] < 0:
            return
        step, began = self._save
        self._save = (-1, began)  # recorded once
        self.recorder.checkpoint(step, _newest_checkpoint(trainer, since=began - 1.0))


def _validates_after(trainer, batch_idx: int) -> bool:
    """Whether Lightning validates right after this batch: its own rule for an `int` or fractional
    `val_check_interval`, read from the trainer's public settings.

    A validation at the epoch's end only (no interval) says False: a note due
    then is written at its step and quotes the last validation before it, as
    it says (`val_step`). Guessing True costs at most one step's delay.
    """
    try:
        if not trainer.enable_validation:
            return False
        every = trainer.check_val_every_n_epoch
        if every is not None and (trainer.current_epoch + 1) % every:
            return False
        interval = trainer.val_check_batch
        if interval == float("inf"):
            return False
        index = trainer.fit_loop.epoch_loop.total_batch_idx if every is None else batch_idx
        return (int(index) + 1) % int(interval) == 0
    except (AttributeError, TypeError, ValueError, ZeroDivisionError):
        return False  # another Lightning: the note keeps its step and names the validation it quotes


def _newest_checkpoint(trainer, since: float) -> str | None:
    """The file the `ModelCheckpoint` callbacks wrote last (one named by step before `last.ckpt`), or None."""
    named = []
    for cb in trainer.checkpoint_callbacks:
        named += [getattr(cb, "best_model_path", ""), *getattr(cb, "best_k_models", {}),
                  getattr(cb, "last_model_path", "")]
    fresh = []
    for p in dict.fromkeys(p for p in named if p):
        try:
            if os.path.getmtime(p) >= since:
                fresh.append(p)
        except OSError:
            continue
    return next((p for p in fresh if not os.path.basename(p).startswith("last")), fresh[0] if fresh else None)
