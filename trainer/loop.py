"""The training loop: one attempt of a run, from restore to the last step.

An attempt opens the run's logbook (event log, metrics, heartbeat), numbers
itself after every attempt before it, builds data, model and optimizer,
restores the newest good checkpoint, says why it is restarting (`restart`)
and that it started (`run_started`), then trains. The steps before training
are in trainer/startup.py; what a checkpoint holds, resume and rollback are in
trainer/restore.py. On CPU a resumed run computes bit for bit what an
uninterrupted one computes.

Decisions that change training come from callbacks (`post_backward` returns
an `Action`); the loop carries them out and writes the event: `step_skipped`,
`rollback`, `run_aborted`, `lr_scaled`. SIGTERM or SIGUSR1 ends the attempt
cleanly after the current step: a synchronous save, `preempted`, exit 75.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import time
import traceback
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from logbook.errors import RunFailedError
from logbook.rankmarks import RankMark
from logbook.sink import MetricsWriter

from . import dist
from .attempts import Heartbeat
from .slurm import slurm_info
from .callbacks import Action, Callback, CallbackList
from .checkpoint import Checkpointer
from .compiling import CompileCache, warm_up
from .config import TrainConfig
from .faults import InjectedFault
from .kernels import keep_freed_memory
from .optim import lr_factor, qk_clip
from .restore import checkpoint_parts, resume, rollback
from .startup import announce, build, open_logbook


class Preempted(Exception):
    """The attempt saved and stopped on SIGTERM/SIGUSR1; the process should exit with EXIT_PREEMPTED."""

    def __init__(self, signal_name: str, saved_step: int) -> None:
        super().__init__(f"preempted by {signal_name}; saved at step {saved_step}")
        self.signal_name = signal_name
        self.saved_step = saved_step


@dataclass
class TrainResult:
    attempt: int
    step: int
    tokens: int
    final_loss: float | None
    val_loss: float | None


class Trainer:
    """One attempt of one run. `fit()` trains to the last step (or raises)."""

    def __init__(self, cfg: TrainConfig, *, project_root: Path | str, run_id: str, config_path: str | None = None,
                 callbacks: list[Callback] | None = None, started_at: float | None = None,
                 env: Mapping[str, str] | None = None, interactive: bool | None = None) -> None:
        self.cfg = cfg
        self.project_root = Path(project_root)
        self.run_id = run_id
        self.config_path = config_path
        self.extra_callbacks = list(callbacks or [])
        self.started_at = started_at or time.time()
        self.env = dict(os.environ if env is None else env)
        self.interactive = interactive
        self.step = 0
        self.tokens = 0
        self.lr_scale = 1.0
        self.drill_active = False
        self.drill_step: int | None = None  # the step a nan/spike drill blew up
        self.synced: tuple[int, float, float | None] | None = None
        """(step, loss, grad norm) as floats, once a callback (the guard) has synced them this step."""
        self.last_progress = time.monotonic()
        self.last_saved_step = -1  # the last step a save was started for (the same on every rank)
        self.last_good_step = 0  # the last step known saved completely (rank 0)
        self.last_loss: float | None = None
        self.last_accepted: tuple[int, float] | None = None
        """(step, loss) of the latest log step whose update the guard let through."""
        self.last_val: tuple[int, float] | None = None
        self.resumed_from: Path | None = None
        """The checkpoint this attempt resumed from (None: it started from scratch)."""
        self.saved_config: dict[str, Any] | None = None
        """The config the resumed checkpoint was trained with, as a dict."""
        self.restore_s = 0.0
        self.compile_s = 0.0
        """Seconds spent compiling the training step before the first step (train.compile)."""
        self.compile_cache: CompileCache | None = None
        self._stop_signal: int | None = None
        self._old_handlers: dict[int, Any] = {}
        self.callbacks: CallbackList | None = None
        self.checkpointer: Checkpointer | None = None
        self.metrics: MetricsWriter | None = None
        self.heartbeat: Heartbeat | None = None
        self.rank_mark: RankMark | None = None
        self.dist: dist.DistInfo | None = None
        self._torch_before: tuple[int, bool, bool] | None = None

    # --- events -----------------------------------------------------------------

    def emit(self, kind: str, *, step: int | None = None, tokens: int | None = None, drill: bool = False, **data: Any):
        """Write an event (rank 0 only), stamped with the current step and tokens unless given."""
        return self.sink.emit(kind, step=self.step if step is None else step,
                              tokens=self.tokens if tokens is None else tokens, drill=drill, **data)

    # --- the attempt -------------------------------------------------------------------

    def fit(self) -> TrainResult:
        try:
            self._setup_runtime()
            self._install_signals()  # from the start: a preemption during loading is still a preemption
            self._facts = open_logbook(self)
            self._refuse_if_ended()  # not a new failure: nothing to record
        except BaseException:
            self._teardown()
            raise
        try:
            build(self)
            resume(self)
            if self._already_finished():
                return TrainResult(self.attempt, self.step, self.tokens, None, None)
            if self.cfg.train.compile:
                self.compile_s = warm_up(self)  # compiled (or loaded from the cache) before the first step, timed
            announce(self)
            self.callbacks.pre_train()
            self._train()
            return self._finish()
        except Preempted:
            raise
        except BaseException as e:
            self._record_failure(e)
            raise
        finally:
            self._teardown()

    def _setup_runtime(self) -> None:
        t = self.cfg.train
        # Restored at the end, so an in-process run (tests, benchmarks) leaves torch as it found it.
        self._torch_before = (torch.get_num_threads(), torch.are_deterministic_algorithms_enabled(),
                              torch.is_deterministic_algorithms_warn_only_enabled())
        if t.threads:
            torch.set_num_threads(t.threads)
        self.dist = dist.init_distributed(t.device)
        self.device = self.dist.device
        if self.device.type == "cpu":
            keep_freed_memory()  # no page faults for the activations of every step (trainer/kernels.py)
        if t.deterministic:
            dist.set_deterministic(True, warn_only=self.device.type == "cuda", compiling=t.compile)
            torch.backends.cudnn.benchmark = False
        elif self.device.type == "cuda":
            torch.backends.cuda.matmul.allow_tf32 = True
            torch.backends.cudnn.allow_tf32 = True
        self.autocast = (torch.autocast(self.device.type, dtype=torch.bfloat16)
                         if t.dtype == "bfloat16" else contextlib.nullcontext())

    def _refuse_if_ended(self) -> None:
        aborted = self._facts["aborted"]
        if aborted is not None:
            raise RunFailedError(f"run {self.run_id} was aborted at step {aborted['step']}: {aborted['reason']}",
                                 hint="start a new run (a new run id) to train again")

    def _already_finished(self) -> bool:
        """A relaunch of a run that already finished: nothing to train, nothing to record."""
        return self.step >= self.cfg.train.steps and self._facts["finished_step"] == self.step

    def _install_signals(self) -> None:
        if _in_main_thread():
            for sig in (signal.SIGTERM, signal.SIGUSR1):
                self._old_handlers[sig] = signal.signal(sig, self._on_signal)

    def _on_signal(self, signum: int, frame: Any) -> None:
        # Acted on between steps, never in the middle of one. The first request is the cause: Slurm's
        # USR1 reaches the trainer directly and again as the SIGTERM its launcher sends torchrun.
        self._stop_signal = self._stop_signal or signum
        if self.rank_mark is not None:
            # torchrun stops the survivors of a lost rank with SIGTERM, then SIGKILL: they did not vanish.
            self.rank_mark.ended(signal.Signals(signum).name)

    # --- training ----------------------------------------------------------------------

    def _train(self) -> None:
        total = self.cfg.train.steps
        self.last_progress = time.monotonic()
        self._log_mark = (time.perf_counter(), self.tokens)
        while self.step < total:
            self._check_stop()
            self._train_step()
            self._after_step()

    def _forward_backward(self, batch_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Accumulate the gradients of one batch; (rank-averaged loss, z-loss, global grad norm after clipping)."""
        cfg, accum = self.cfg, self.cfg.train.grad_accum
        track = cfg.optim.qk_clip_tau > 0
        ce_sum = torch.zeros((), device=self.device)
        z_sum = torch.zeros((), device=self.device)
        for micro in range(accum):
            x, y = self.data.batch(batch_id, micro)
            last = micro == accum - 1
            self.raw_model.set_max_logit_tracking(track and last)
            # Gradients are all-reduced once per step, on the last micro-batch only.
            sync = self.model.no_sync() if self.dist.enabled and not last else contextlib.nullcontext()
            with sync:
                with self.autocast:
                    out = self.model(x, y)
                (out.loss / accum).backward()
            ce_sum += out.ce_loss
            z_sum += out.z_loss
        clip = cfg.optim.grad_clip if cfg.optim.grad_clip > 0 else math.inf
        grad_norm = dist.local_tensor(torch.nn.utils.clip_grad_norm_(self.raw_model.parameters(), clip))
        return dist.all_reduce_mean(ce_sum / accum, self.dist), z_sum / accum, grad_norm

    def _train_step(self) -> None:
        step, cfg = self.step + 1, self.cfg
        self.callbacks.pre_step(step)
        factor = lr_factor(step, cfg.schedule, cfg.train.steps) * self.lr_scale
        self.optimizer.set_lr(factor)
        batch_id = self.data.take()
        loss, z_loss, grad_norm = self._forward_backward(batch_id)
        action = self.callbacks.post_backward(loss, grad_norm)
        if action is None:
            self.optimizer.step()
            qk_clip(self.raw_model, cfg.optim.qk_clip_tau)
        self.optimizer.zero_grad(set_to_none=True)
        if action is not None and action.kind != "skip":
            self._carry_out(action, step)
            return
        self.step = step
        self.tokens += cfg.tokens_per_step * self.dist.world_size
        if action is not None:  # skipped: the batch is spent, the update is not made
            self.emit("step_skipped", reason=action.reason, batch_id=batch_id, **action.event)
        self._report(step, factor, loss, z_loss, grad_norm, skipped=action is not None)

    def _report(self, step: int, factor: float, loss, z_loss, grad_norm, skipped: bool) -> None:
        metrics: dict[str, Any] = {"step": step, "tokens": self.tokens, "lr": self.cfg.optim.lr * factor}
        if step % self.cfg.train.log_every == 0 or step == self.cfg.train.steps:
            now = time.perf_counter()
            t0, tok0 = self._log_mark
            self._log_mark = (now, self.tokens)
            # The guard has already synced loss and grad norm for this step: no second host sync.
            synced = self.synced if self.synced is not None and self.synced[0] == step else None
            self.last_loss, norm = synced[1:] if synced else (float(loss), float(grad_norm))
            if not skipped:
                self.last_accepted = (step, self.last_loss)
            metrics.update(attempt=self.attempt, loss=self.last_loss, z_loss=float(z_loss), lr_scale=self.lr_scale,
                           grad_norm=norm, tokens_per_s=(self.tokens - tok0) / max(now - t0, 1e-9),
                           time=time.time())
            logits = self.raw_model.max_logits()
            if logits:
                metrics["max_logit"] = float(torch.stack([m.max() for m in logits]).max())
            if skipped:
                metrics["skipped"] = True
        # Callbacks first: telemetry adds its figures to this step's row before the row is written.
        self.callbacks.post_step(step, metrics)
        if "loss" in metrics:  # a log step
            self.metrics.write(metrics)

    def _after_step(self) -> None:
        step, c = self.step, self.cfg
        if self.dist.rank == 0:
            self.heartbeat.beat(self.attempt, step, time.time())
        if (c.train.eval_every and step % c.train.eval_every == 0) or step == c.train.steps:
            self.evaluate()
        if step % c.checkpoint.every == 0 or step == c.train.steps:
            self.save(sync=step == c.train.steps)
        self.poll_saves()
        self.callbacks.step_end(step)
        self.last_progress = time.monotonic()

    @torch.no_grad()
    def evaluate(self) -> float:
        """Mean validation cross-entropy over the fixed validation batches; written as a metrics row."""
        self.model.eval()
        total = torch.zeros((), device=self.device)
        for i in range(self.cfg.train.eval_batches):
            x, y = self.data.val_batch(i)
            with self.autocast:
                total += self.raw_model(x, y).ce_loss
        dist.reshard(self.raw_model)
        self.model.train()
        val = float(dist.all_reduce_mean(total / self.cfg.train.eval_batches, self.dist))
        self.last_val = (self.step, val)
        self.metrics.write({"step": self.step, "attempt": self.attempt, "val_loss": val, "tokens": self.tokens,
                            "time": time.time()})
        if self.progress is not None:
            self.progress.report_eval(self.step, val)
        return val

    def save(self, sync: bool = False) -> None:
        """Checkpoint the current step (in the background unless `sync`)."""
        self.metrics.flush(durable=True)  # every step up to a checkpoint is on disk before the checkpoint is
        state = checkpoint_parts(self)
        if self.dist.rank == 0:
            self.checkpointer.save(self.step, state, tokens=self.tokens, sync=sync)
            if sync:
                self.poll_saves()
        self.last_saved_step = self.step
        self.last_progress = time.monotonic()

    def poll_saves(self) -> None:
        """Take the outcomes of finished saves: the last good step, and `post_checkpoint` for each."""
        for result in self.checkpointer.poll():
            if result.ok:
                self.last_good_step = max(self.last_good_step, result.step)
            self.callbacks.post_checkpoint(result)

    # --- decisions -------------------------------------------------------------------

    def set_lr_scale(self, new: float, reason: str, **event: Any) -> None:
        """Change the learning-rate multiplier (from the next step on) and record it."""
        old = self.lr_scale
        self.lr_scale = float(new)
        self.emit("lr_scaled", old=old, new=self.lr_scale, factor=self.lr_scale / old if old else None,
                  reason=reason, **event)

    def _carry_out(self, action: Action, failing_step: int) -> None:
        if action.kind == "abort":
            self.emit("run_aborted", reason=action.reason, **action.event)
            raise RunFailedError(f"run aborted at step {failing_step}: {action.reason}")
        rollback(self, action, failing_step)

    def _check_stop(self) -> None:
        sig = dist.agree_max(self._stop_signal or 0, self.dist)
        if not sig:
            return
        self.checkpointer.wait()
        self.poll_saves()
        if self.last_saved_step != self.step:  # known alike on every rank, unlike the outcome of a save
            self.save(sync=True)
        name = signal.Signals(sig).name
        self.emit("preempted", drill=self.drill_active, signal=name, saved_step=self.last_good_step,
                  slurm=slurm_info(self.env))
        raise Preempted(name, self.last_good_step)

    # --- ending ------------------------------------------------------------------------

    def _finish(self) -> TrainResult:
        if self.last_val is None or self.last_val[0] != self.step:
            self.evaluate()
        if self.last_saved_step != self.step:
            self.save(sync=True)
        self.checkpointer.wait()
        self.poll_saves()
        first = self.history.first_started()
        self.emit("run_finished", final_loss=self.last_loss, val_loss=self.last_val[1],
                  wall_s=round(time.time() - (first or self.started_at), 3),
                  attempt_wall_s=round(time.time() - self.started_at, 3),
                  checkpoint_blocking_s=round(self.checkpointer.blocking_s_total, 6))
        return TrainResult(self.attempt, self.step, self.tokens, self.last_loss, self.last_val[1])

    def _record_failure(self, e: BaseException) -> None:
        if self.rank_mark is not None:
            self.rank_mark.ended()  # first: torchrun may SIGKILL a failing group before it is torn down
        if self.callbacks is not None:
            self.callbacks.on_error(e)
        tb = traceback.format_exception(type(e), e, e.__traceback__)
        self.emit("attempt_failed", drill=self.drill_active or isinstance(e, InjectedFault),
                  exception_type=type(e).__name__, exception_message=str(e)[:2000],
                  traceback="".join(tb[-3:])[-4000:])

    def _teardown(self) -> None:
        if self.rank_mark is not None:
            self.rank_mark.ended()
        for sig, old in self._old_handlers.items():
            signal.signal(sig, old)
        if self.checkpointer is not None:
            try:
                self.checkpointer.wait()  # a save in flight is worth finishing, even when failing
            except Exception:
                traceback.print_exc()
        if self.callbacks is not None:
            self.callbacks.close()
        if self.metrics is not None:
            self.metrics.close()
        if self.heartbeat is not None:
            self.heartbeat.close()
        if self.compile_cache is not None:
            self.compile_cache.close()
        if self.dist is not None:
            dist.shutdown(self.dist)
        if self._torch_before is not None:
            threads, det, warn_only = self._torch_before
            torch.set_num_threads(threads)
            dist.set_deterministic(det, warn_only=warn_only)


def _in_main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()
