"""Chronicle a Hugging Face `transformers.Trainer` run: `callbacks=[LogbookCallback()]`.

    from logbook.integrations.hf import LogbookCallback
    trainer = Trainer(model, args, train_dataset=ds, callbacks=[LogbookCallback()])

What each hook records (the recording itself is `recorder.Recorder`'s):

- `on_train_begin`: opens the run with `run_from_env(total_steps=state.max_steps)`;
  outside `logbook run`, a `restart` owed by a killed attempt and `run_started`
  (world size, and the step `resume_from_checkpoint` restored; under the
  launcher that step is handed to it); `config_recorded` with
  `{**model.config.to_dict(), **args.to_dict()}` and `args.seed`.
- `on_step_end`: when a milestone falls due, asks the Trainer to log this step,
  so the note carries this step's loss.
- `on_pre_optimizer_step` (with `on_divergence="skip"`): the Trainer shows
  no loss before the update, so the check there is on the gradients: their
  global L2 norm, a non-finite one or one more than `grad_norm_sigma` robust
  sigmas above the median of the last 128 (on its logarithm), is recorded
  (`divergence_detected` with `metric: grad_norm`, `action: skip`, then
  `step_skipped`) and every gradient set to None, so the optimizer leaves the
  parameters and its moments as they were. With clipping on
  (`max_grad_norm`, 1.0 by default) the Trainer has clipped them already: a
  spike above the clip no longer shows, a non-finite norm still does. Under
  DDP every rank sees the same reduced gradients and decides alike; under
  FSDP or DeepSpeed each rank holds a shard, and the check is not made for
  them.
- `on_log`: the metrics row (`loss`, `learning_rate` as `lr`, `grad_norm`),
  the loss-spike check and the milestones due; with `on_divergence="stop"` a
  spike sets `control.should_training_stop`. An evaluation's row: `eval_loss`
  as `val_loss`, and every other number it logs (`eval_accuracy` and whatever
  `compute_metrics` returns) under its own name, so a prediction can name it.
- `on_save`: `checkpoint_saved` with the `checkpoint-<step>` folder and the
  seconds since the step's last hook (the save's cost: the Trainer saves last).
- `on_train_end`: `run_finished`, or `run_aborted` after a stop on divergence.

The Trainer has no hook for an exception: a run that raises leaves no end, and
its next start records a `restart` whose cause is unknown.
"""

from __future__ import annotations

import os
import time
from typing import Any

from transformers import TrainerCallback
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from logbook.integrations.recorder import Recorder
from logbook.promises.metric_names import EVAL_PREFIX


class LogbookCallback(TrainerCallback):
    """Records the Trainer's run in the logbook: events, per-step metrics, milestones, checkpoints, spikes.

    `run_id`: the run to record (default: the script's name and the time; under
    `logbook run -- CMD`, the launcher's run). Pass the same id to every
    relaunch of a run that resumes outside `logbook run`. `project_root`: the
    logbook's repository (default: the current directory).
    `on_divergence`: what a spike does: "record" (the default) records a
    non-finite logged loss or one more than `spike_sigma` robust sigmas above
    its rolling median; "stop" also stops training; "skip" also skips the
    optimizer update of a step whose gradient norm is non-finite or more than
    `grad_norm_sigma` robust sigmas above its rolling median (the loss is
    known only after the update). `stop_on_divergence=True` is the older
    spelling of "stop". `milestones`: the fractions of the run to write
    progress notes at (default: logbook.yaml's).
    """

    def __init__(self, run_id: str | None = None, *, project_root: Any = None, on_divergence: str | None = None,
                 stop_on_divergence: bool = False, spike_sigma: float = 6.0, grad_norm_sigma: float = 8.0,
                 milestones: Any = None) -> None:
        self.recorder = Recorder("transformers.Trainer", run_id=run_id, project_root=project_root,
                                 on_divergence=on_divergence, stop_on_divergence=stop_on_divergence,
                                 spike_sigma=spike_sigma, grad_norm_sigma=grad_norm_sigma, milestones=milestones)
        self._last_hook: float | None = None  # when the Trainer last called us: a save follows the step's last hook

    def on_train_begin(self, args, state, control, **kwargs):
        step = int(state.global_step)
        folder = os.path.join(args.output_dir, f"{PREFIX_CHECKPOINT_DIR}-{step}")
        self.recorder.begin(total_steps=int(state.max_steps or 0), step=step, world_size=int(args.world_size),
                            resumed_from=folder if step > 0 and os.path.isdir(folder) else None,
                            device=str(args.device))
        model = kwargs.get("model")
        cfg = getattr(model, "config", None)
        # What the W&B and MLflow callbacks of transformers log: the model's config, then the arguments over it.
        values = {**(cfg.to_dict() if hasattr(cfg, "to_dict") else {}), **args.to_dict()}
        self.recorder.config(values, source="TrainingArguments and model.config", seed=args.seed)

    def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
        if self.recorder.on_divergence != "skip" or model is None or args.deepspeed or args.fsdp:
            return  # under FSDP or DeepSpeed a rank holds a shard of the gradients: the ranks would not agree
        params = [p for p in model.parameters() if p.grad is not None]
        if not params:
            return
        device = params[0].grad.device  # one sum on one device, read once: no host sync per parameter
        norm = float(sum(p.grad.detach().float().pow(2).sum().to(device) for p in params)) ** 0.5
        if self.recorder.judge(int(state.global_step) + 1, norm, metric="grad_norm"):
            for p in params:  # an optimizer passes over a parameter whose grad is None: no update, no moment change
                p.grad = None

    def on_optimizer_step(self, args, state, control, optimizer=None, lr_scheduler=None, **kwargs):
        # After the update, before the scheduler's step: the group's rate is the one this update used.
        if optimizer is None or not optimizer.param_groups:
            return
        used = optimizer.param_groups[0].get("lr")
        scheduled = lr_scheduler.get_last_lr()[0] if lr_scheduler is not None else None
        self.recorder.lr_used(int(state.global_step) + 1, used, scheduled)

    def on_step_end(self, args, state, control, **kwargs):
        self._last_hook = time.perf_counter()
        if self.recorder.milestone_due(int(state.global_step)):
            control.should_log = True  # the note reports this step's loss, not the last logged one
            if control.should_evaluate:  # the Trainer's own flow decided it (DefaultFlowCallback runs first)
                self.recorder.hold_milestones(int(state.global_step))  # and quotes this step's evaluation

    def on_log(self, args, state, control, logs=None, **kwargs):
        self._last_hook = time.perf_counter()
        logs = logs or {}
        step = int(state.global_step)
        evaluated = {k: v for k, v in logs.items() if k.startswith(EVAL_PREFIX)}
        if evaluated:
            self.recorder.evaluation(step, evaluated)
        if "loss" in logs and self.recorder.step(step, logs["loss"], lr=logs.get("learning_rate"),
                                                 grad_norm=logs.get("grad_norm")):
            control.should_training_stop = True

    def on_evaluate(self, args, state, control, **kwargs):
        self._last_hook = time.perf_counter()

    def on_save(self, args, state, control, **kwargs):
        # The Trainer saves right after the step's last hook (on_step_end, on_log, on_evaluate): the rest is the save.
        step = int(state.global_step)
        blocking = time.perf_counter() - self._last_hook if self._last_hook is not None else None
        self.recorder.checkpoint(step, os.path.join(args.output_dir, f"{PREFIX_CHECKPOINT_DIR}-{step}"), blocking)

    def on_train_end(self, args, state, control, **kwargs):
        self.recorder.end(int(state.global_step))
