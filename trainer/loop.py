"""The training loop: one attempt of a run, from restore to the last step.

`trainer.startup.build_trainer` opens the run's logbook (event log,
metrics, heartbeat), numbers the attempt after every attempt before it,
builds data, model and optimizer, and hands them to a `Trainer`. Its `fit()`
restores the newest good checkpoint, says why the run is restarting
(`restart`) and that the attempt started (`run_started`), then trains. What a
checkpoint holds, resume and rollback are in trainer/restore.py. On CPU a
resumed run computes bit for bit what an uninterrupted one computes.

Decisions that change training come from callbacks (`post_backward` returns
a `LoopAction`); the loop carries them out and writes the events the action
carries as they are (the guard's decision describes them: `step_skipped`,
`rollback`, `run_aborted`, `lr_scaled`). Every change of the learning-rate
multiplier, the guard's and live control's alike, goes through
`Trainer.set_lr_scale`. SIGTERM or SIGUSR1 ends the attempt
cleanly after the current step: a synchronous save, `preempted`, exit 75.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import socket
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from logbook.api import Run, RunFailedError

from .components import Drills, RunLogbook, Runtime, StopSignals, TrainParts
from .config import TrainConfig, config_hash, config_to_dict
from .faults import InjectedFault
from .job import dist
from .nn.optim import apply_hyperparams, lr_factor, qk_clip
from .observe.callbacks import LoopAction
from .restore import checkpoint_parts, resume, rollback


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
    """One attempt of one run, complete when constructed; `fit()` trains to the last step (or raises).

    Built by `trainer.startup.build_trainer`, which makes its components; from
    then on the trainer owns them and closes them when the attempt ends. It is
    the `TrainerView` its callbacks see (trainer/observe/callbacks.py): they read its
    fields and act through its methods (`set_lr_scale`, `apply_optimizer_config`,
    `forward_backward`, `mark_drill`, `note_synced`, `emit`).
    """

    def __init__(self, cfg: TrainConfig, *, run_id: str, runtime: Runtime, book: RunLogbook, parts: TrainParts,
                 stop: StopSignals, drills: Drills, config_path: str | None = None, started_at: float | None = None,
                 env: Mapping[str, str] | None = None, warm_up: Callable[[Trainer], float] | None = None) -> None:
        self.cfg = cfg
        self.run_id = run_id
        self.config_path = config_path
        self.started_at = started_at or time.time()
        self.env = dict(os.environ if env is None else env)
        # Components, owned from here on (closed in `_teardown`).
        self._runtime, self._book, self._parts, self._stop, self._drills = runtime, book, parts, stop, drills
        self._warm_up = warm_up
        """Compiles the step before the first one (trainer/compiling.py); handed in, so the loop imports no compiler."""
        self.dist: dist.DistInfo = runtime.dist
        self.device: torch.device = runtime.device
        self.autocast = runtime.autocast
        self.project, self.run_dir, self.run_record = book.project, book.run_dir, book.run_record
        self.history, self.attempt = book.history, book.attempt
        self.sink, self.metrics, self.rank_mark = book.sink, book.metrics, book.rank_mark
        self.data, self.raw_model, self.model = parts.data, parts.raw_model, parts.model
        self.optimizer, self.checkpointer, self.callbacks = parts.optimizer, parts.checkpointer, parts.callbacks
        self.progress = parts.progress
        self.compile_cache = parts.compile_cache
        # Where training stands; a resume puts back what the checkpoint holds (trainer/restore.py).
        self.step = 0
        self.tokens = 0
        self.lr_scale = 1.0
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
        self.unfinished_saves: list[int] = []  # checkpoints a killed save left half-written (rank 0; see resume)
        """The checkpoint this attempt resumed from (None: it started from scratch)."""
        self.saved_config: dict[str, Any] | None = None
        """The config the resumed checkpoint was trained with, as a dict."""
        self.restore_s = 0.0
        self.compile_s = 0.0
        """Seconds spent compiling the training step before the first step (train.compile)."""
        self.compile_graphs: dict[str, str] = {}
        """How the warm-up readied each graph of the step: loaded, compiled or traced (trainer/nn/precompile.py)."""
        self._log_mark = (time.perf_counter(), 0)
        self.callbacks.attach(self)

    @property
    def drill_active(self) -> bool:
        """A drill is under way in this attempt: the events it leads to are marked."""
        return self._drills.active

    @property
    def drill_step(self) -> int | None:
        """The step a nan/spike drill blew up, if one did."""
        return self._drills.step

    @property
    def book(self) -> RunLogbook:
        """The run's logbook as this attempt writes it: `book.run` is the `logbook.api.Run`."""
        return self._book

    # --- events -----------------------------------------------------------------

    def emit(self, kind: str, *, step: int | None = None, tokens: int | None = None, drill: bool = False, **data: Any):
        """Write an event (rank 0 only), stamped with the current step and tokens unless given."""
        return self.sink.emit(kind, step=self.step if step is None else step,
                              tokens=self.tokens if tokens is None else tokens, drill=drill, **data)

    # --- the attempt -------------------------------------------------------------------

    def fit(self) -> TrainResult:
        try:
            resume(self)
            if self._already_finished():
                return TrainResult(self.attempt, self.step, self.tokens, None, None)
            if self._warm_up is not None:
                self.compile_s = self._warm_up(self)  # compiled (or loaded from the cache) before the first step, timed
            self._announce()
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

    def _already_finished(self) -> bool:
        """A relaunch of a run that already finished: nothing to train, nothing to record."""
        return self.step >= self.cfg.train.steps and self._book.finished_step == self.step

    def _announce(self) -> None:
        """Record the restarts owed by earlier attempts and this attempt's `run_started`; start the heartbeat."""
        if self.dist.rank == 0:
            for prev in self.history.unrecorded_ends(self.attempt):
                latest = prev == self.attempt - 1
                # An older end is owed by an attempt that died starting: it is timed to that start.
                start = self.started_at if latest else (self.history.first_event_time(prev + 1) or self.started_at)
                payload = Run.restart_facts(self.history, prev, self.step, start, self.env if latest else {})
                newer = [s for s in self.unfinished_saves if s > self.step]
                if latest and newer:  # why the resume went back further than the checkpoint cadence says
                    payload["unfinished_checkpoint_step"] = newer[-1]
                prev_events = self.history.of_attempt(prev)
                drill = any(Run.is_kind(e, "fault_injected") or e.get("drill") for e in prev_events)
                self.emit("restart", drill=drill, next_attempt=prev + 1, slurm=Run.job_facts(self.env), **payload)
        rec = self.run_record
        snapshot = rec.snapshot if rec else {}
        self.emit(
            "run_started",
            config_hash=config_hash(self.cfg), config_path=self.config_path, world_size=self.dist.world_size,
            prereg_id=rec.prereg_id if rec else None, exploratory=rec.exploratory if rec else None,
            snapshot_commit=snapshot.get("commit"), total_steps=self.cfg.train.steps, slurm=Run.job_facts(self.env),
            tokens_per_step=self.cfg.tokens_per_step * self.dist.world_size, device=str(self.device),
            resumed_from_step=self.step, resumed_from=str(self.resumed_from) if self.resumed_from else None,
            torchelastic_restart_count=int(self.env.get("TORCHELASTIC_RESTART_COUNT", "0") or 0),
            threads=torch.get_num_threads(), dtype=self.cfg.train.dtype, n_params=self.raw_model.num_params(),
            flops_per_token=self.raw_model.flops_per_token(), data_fingerprints=self.data.fingerprints(),
            started_at=self.started_at, restore_s=round(self.restore_s, 6), compiled=self.cfg.train.compile,
            compile_s=round(self.compile_s, 6), compile_graphs=self.compile_graphs or None,
            attention_backend=self.cfg.model.attention_backend, checkpoint_format=self.checkpointer.format, guard_from_plan=self._parts.guard_from_plan or None,
            deviations=list(rec.deviations) if rec and rec.deviations else None,
            config_changed=_changed_keys(self.saved_config, config_to_dict(self.cfg)) if self.saved_config else [],
            members=self.dist.members, group_id=self.dist.group_id or None, oom_kills=Run.oom_kills(),
            seed=self.cfg.train.seed, seed_source=rec.seed_source if rec else None,
        )
        member = self.dist.members[self.dist.rank] if self.dist.members else \
            {"rank": 0, "node": 0, "local_rank": 0, "host": socket.gethostname(), "pid": os.getpid()}
        self.rank_mark.started(self.attempt, member)
        if self.dist.rank == 0:
            # The attempt counts from here: one that dies while building or restoring leaves
            # no trace, so the next start takes its number and its restart names the attempt
            # before it (the failed start is downtime). Numbering it earlier lost its restart.
            self._book.run.reached(self.step)

    # --- training ----------------------------------------------------------------------

    def _train(self) -> None:
        total = self.cfg.train.steps
        self.last_progress = time.monotonic()
        self._log_mark = (time.perf_counter(), self.tokens)
        while self.step < total:
            self._check_stop()
            if self._train_step():
                self._after_step()

    def forward_backward(self, batch_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Accumulate the gradients of one batch and clip them; (rank-averaged loss, z-loss, global grad norm).

        The norm is the one before clipping (what `clip_grad_norm_` returns). The
        guard's replay of a flagged step calls this too, so it recomputes the same thing.
        """
        cfg, accum = self.cfg, self.cfg.train.grad_accum
        track = cfg.optim.qk_clip_tau > 0
        ce_sum = z_sum = None
        for micro in range(accum):
            x, y = self.data.batch(batch_id, micro)
            last = micro == accum - 1
            self.raw_model.set_max_logit_tracking(track and last)
            # Gradients are all-reduced once per step, on the last micro-batch only.
            sync = self.model.no_sync() if self.dist.enabled and not last else contextlib.nullcontext()
            with sync:
                with self.autocast:
                    out = self.model(x, y)
                (out.loss / accum if accum > 1 else out.loss).backward()
            # Sums of the detached terms: a single micro-batch (the usual case) takes no op at all.
            ce, z = out.ce_loss.detach().float(), out.z_loss.detach().float()
            ce_sum, z_sum = (ce, z) if ce_sum is None else (ce_sum + ce, z_sum + z)
        clip = cfg.optim.grad_clip if cfg.optim.grad_clip > 0 else math.inf
        grad_norm = dist.local_tensor(torch.nn.utils.clip_grad_norm_(self.raw_model.parameters(), clip))
        if accum > 1:
            ce_sum, z_sum = ce_sum / accum, z_sum / accum
        return dist.all_reduce_mean(ce_sum, self.dist), z_sum, grad_norm

    def _train_step(self) -> bool:
        """Train one step; False when the guard rolled back instead. The rollback saved the restored step
        at once, and its eval (if due) ran when it was first reached, on the same weights: the periodic
        save and eval after it would only write them twice."""
        step, cfg = self.step + 1, self.cfg
        self.callbacks.pre_step(step)
        factor = lr_factor(step, cfg.schedule, cfg.train.steps) * self.lr_scale
        self.optimizer.set_lr(factor)
        batch_id = self.data.take()
        loss, z_loss, grad_norm = self.forward_backward(batch_id)
        action = self.callbacks.post_backward(loss, grad_norm)
        if action is None:
            self.optimizer.step()
            qk_clip(self.raw_model, cfg.optim.qk_clip_tau)
        self.optimizer.zero_grad(set_to_none=True)
        if action is not None and action.kind != "skip":
            self._carry_out(action, step)
            return False
        self.step = step
        self.tokens += cfg.tokens_per_step * self.dist.world_size
        if action is not None:  # skipped: the batch is spent, the update is not made
            payload = action.events.get("step_skipped") or {"reason": action.reason, "batch_id": batch_id}
            self.emit("step_skipped", drill=action.drill, **payload)
        self._report(step, factor, loss, z_loss, grad_norm, skipped=action is not None)
        return True

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
            self._book.run.reached(step)
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
        if self.dist.rank == 0 or self.checkpointer.format == "dcp":  # DCP: every rank writes its shards
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

    def set_lr_scale(self, new: float, kind: str, payload: dict[str, Any], *, drill: bool = False,
                     step: int | None = None, tokens: int | None = None) -> None:
        """The one way the learning-rate multiplier changes (from the next step on), recorded as `kind`.

        Whoever asks, live control or the guard, comes through here; each keeps
        the event kind its logs have always had (`hparam_change` for a live
        change, `lr_scaled` for the guard) and describes the change in `payload`.
        """
        self.lr_scale = float(new)
        self.emit(kind, step=step, tokens=tokens, drill=drill, **payload)

    def apply_optimizer_config(self) -> None:
        """Push the config's optimizer hyperparameters into the optimizer's groups (after a live change).

        The same rule a resume applies. It also sets betas, eps and Muon's momentum,
        which no live change can touch: from an unchanged config that is a no-op.
        """
        apply_hyperparams(self.optimizer, self.cfg.optim)

    def mark_drill(self, step: int | None = None) -> None:
        """A drill is under way: the events it leads to are marked. `step`: where a nan/spike drill struck."""
        self._drills.mark(step)

    def note_synced(self, step: int, loss: float, grad_norm: float | None) -> None:
        """Floats a callback (the guard) already synced for `step`: the log row uses them, no second sync."""
        self.synced = (step, loss, grad_norm)

    def _carry_out(self, action: LoopAction, failing_step: int) -> None:
        if action.kind == "abort":
            self.emit("run_aborted", drill=action.drill, **(action.events.get("run_aborted") or {"reason": action.reason}))
            # The run ends at its last completed step, the one run_aborted is written at and every view
            # names; the step that diverged was never applied.
            raise RunFailedError(f"run aborted at step {self.step}: at step {failing_step}, {action.reason}")
        rollback(self, action, failing_step)

    def _check_stop(self) -> None:
        sig = dist.agree_max(self._stop.signum or 0, self.dist)
        if not sig:
            return
        self.checkpointer.wait()
        self.poll_saves()
        if self.last_saved_step != self.step:  # known alike on every rank, unlike the outcome of a save
            self.save(sync=True)
        name = signal.Signals(sig).name
        self.emit("preempted", drill=self.drill_active, signal=name, saved_step=self.last_good_step,
                  slurm=Run.job_facts(self.env))
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
        self.rank_mark.ended()  # first: torchrun may SIGKILL a failing group before it is torn down
        self.callbacks.on_error(e)
        tb = traceback.format_exception(type(e), e, e.__traceback__)
        self.emit("attempt_failed", drill=self.drill_active or isinstance(e, InjectedFault),
                  exception_type=type(e).__name__, exception_message=str(e)[:2000],
                  traceback="".join(tb[-3:])[-4000:])

    def _teardown(self) -> None:
        self.rank_mark.ended()
        self._stop.close()
        self._parts.close()  # waits for a save in flight, closes the callbacks and the compile cache
        self._book.close()
        self._runtime.close()


def _changed_keys(old: dict[str, Any], new: dict[str, Any], prefix: str = "") -> list[str]:
    """Dotted keys whose values differ between two config dicts."""
    out = []
    for k in sorted(set(old) | set(new)):
        a, b = old.get(k), new.get(k)
        key = f"{prefix}{k}"
        if isinstance(a, dict) and isinstance(b, dict):
            out += _changed_keys(a, b, key + ".")
        elif a != b:
            out.append(key)
    return out
