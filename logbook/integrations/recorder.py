"""What a framework adapter records, with no framework in sight: the adapters hand it plain numbers.

One `Recorder` per training run, driven by an adapter's hooks:

- `begin` at train start opens the run through `run_from_env`. Outside
  `logbook run` (`Run.launched` False) it records what the launcher would
  have: a `restart` owed by an earlier attempt that left no end (killed), then
  `run_started`; what that attempt cost is read as the bundled trainer reads
  it (`logbook.runs.attempt_ends`). Under `logbook run -- CMD` the launcher records attempts,
  restarts and the end, so `begin`, `end` and `fail` say nothing of those.
- `step` writes a metrics row (which rewrites the heartbeat: the last step reached,
  which a kill cannot take back: metrics rows wait in memory for their flush), runs the loss-spike check
  (`SpikeDetector`) and writes the milestones that are due; `evaluation` (the validation loss and
  every other figure an evaluation logs), `checkpoint` likewise.
- `judge` runs a spike check before the optimizer step, for an adapter that
  can skip the update (`on_divergence="skip"`): `divergence_detected` with
  `action: skip`, then `step_skipped`, as the bundled trainer records a skip.
- `end` writes `run_finished` (or `run_aborted` when the spike check stopped
  training, `on_divergence="stop"`); `fail` writes `run_failed` (`attempt_failed` under the launcher).

Values reach the log as plain floats (`as_float` turns tensors into numbers).
"""

from __future__ import annotations

import math
import time
import traceback
from collections import deque
from typing import Any

from logbook.api import Run, UsageError, run_from_env
from logbook.eventlog.kinds import ending, is_kind
from logbook.runs.attempt_ends import RunHistory
from logbook.runs.milestones import ProgressNotes
from logbook.runs.run_record import check_run_id
from logbook.eventlog.kinds import RESTART_CAUSES
from logbook.promises.metric_names import canonical, is_bundled
from logbook.runs.attempt_ends import restart_cost
from logbook.runs.spikes import METRICS as SPIKE_METRICS, Thresholds, spike_signal

NO_RECORD = ("the process was killed (SIGKILL, the OOM killer, a lost node) or exited without closing the run, "
             "and left no record of how it ended")
"""A restart's detail when the previous attempt left a `run_started` and nothing that ends it."""
ON_DIVERGENCE = ("record", "skip", "stop")
"""What a callback does on a spike: record it only, skip the step's optimizer update, or stop training."""


def as_float(value: Any) -> float | None:
    """A loss, a learning rate or a norm as a Python float: tensors and numpy scalars included; None if not a number."""
    if value is None or isinstance(value, bool):
        return None
    if hasattr(value, "item"):  # a one-element tensor or a numpy scalar
        try:
            value = (value.detach() if hasattr(value, "detach") else value).item()
        except (RuntimeError, ValueError):
            return None  # more than one number
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


class SpikeDetector:
    """Is this loss (or gradient norm) a spike? The divergence guard's own rule (`logbook/runs/spikes.py`).

    This keeps one metric's rolling history as the guard's ladder does:
    finite values enter it, spikes too (a real change of level is absorbed
    rather than flagged forever), non-finite ones never; `spike_signal` judges.
    """

    def __init__(self, sigma: float = 6.0, window: int = 128, warmup: int = 32, min_rel_sigma: float = 0.005,
                 metric: str = "loss") -> None:
        for name, v in (("spike_sigma", sigma), ("window", window), ("warmup", warmup)):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
                raise UsageError(f"LogbookCallback: {name} must be a positive number, got {v!r}")
        if metric not in SPIKE_METRICS:
            raise ValueError(f"SpikeDetector: metric must be loss or grad_norm, got {metric!r}")
        self.rule = Thresholds(spike_sigma=float(sigma), grad_norm_sigma=float(sigma), warmup=int(warmup),
                               min_rel_sigma=float(min_rel_sigma))
        self.metric = metric
        self.history: deque[float] = deque(maxlen=int(window))

    def check(self, value: float) -> dict[str, Any] | None:
        """The `divergence_detected` fields when `value` is a spike, else None; a finite `value` joins the history."""
        signal = spike_signal(self.rule, self.metric, value, list(self.history))
        if math.isfinite(value):
            self.history.append(value)
        if signal is None:
            return None
        threshold = self.rule.spike_sigma
        if signal.nonfinite:
            return {"metric": self.metric, "value": value, "baseline": signal.baseline, "nonfinite": True,
                    "threshold": threshold}
        return {"metric": self.metric, "value": value, "baseline": signal.baseline, "scale": signal.scale,
                "threshold": threshold, "z": round(signal.z, 3), "nonfinite": False}


def _what(spike: dict[str, Any]) -> str:
    """A spike in words: "a non-finite loss", "a grad_norm 9.3 robust sigmas above its median"."""
    if spike["nonfinite"]:
        return f"a non-finite {spike['metric']}"
    return f"a {spike['metric']} {spike['z']:g} robust sigmas above its median"


class Recorder:
    """One run as an adapter records it (see the module's docstring); rank 0 writes, other ranks are no-ops."""

    def __init__(self, framework: str, *, run_id: str | None = None, project_root: Any = None,
                 on_divergence: str | None = None, stop_on_divergence: bool = False, spike_sigma: float = 6.0,
                 grad_norm_sigma: float = 8.0, milestones: Any = None) -> None:
        if run_id is not None:
            if not isinstance(run_id, str):
                raise UsageError(f"LogbookCallback: run_id must be text, got {run_id!r}")
            check_run_id(run_id)
        if milestones is not None and (isinstance(milestones, (str, bytes)) or not all(
                isinstance(f, (int, float)) and not isinstance(f, bool) and 0 < f <= 1 for f in milestones)):
            raise UsageError(f"LogbookCallback: milestones must be fractions in (0, 1], got {milestones!r}")
        if on_divergence is not None and on_divergence not in ON_DIVERGENCE:
            raise UsageError(f"LogbookCallback: on_divergence must be one of {', '.join(ON_DIVERGENCE)}, "
                             f"got {on_divergence!r}")
        if stop_on_divergence and on_divergence not in (None, "stop"):
            raise UsageError(f"LogbookCallback: stop_on_divergence=True (on_divergence='stop') contradicts "
                             f"on_divergence={on_divergence!r}; pass one of them")
        self.framework = framework
        self.run_id, self.project_root = run_id, project_root
        self.on_divergence = on_divergence or ("stop" if stop_on_divergence else "record")
        self.stop_on_divergence = self.on_divergence == "stop"
        self.detector = SpikeDetector(spike_sigma)
        self.grad_detector = SpikeDetector(grad_norm_sigma, metric="grad_norm")
        self._flagged_step: int | None = None  # the last step `judge` flagged (its loss is not judged again)
        self.fractions = None if milestones is None else [float(f) for f in milestones]
        self.run: Run | None = None
        self.total_steps = 0
        self.stopped: dict[str, Any] | None = None  # the spike that stopped training
        self.last_loss: float | None = None
        self.last_val: tuple[int, float] | None = None
        self.notes: ProgressNotes | None = None
        self._first_started: float | None = None
        self._mark = (time.time(), 0)  # (time, step) this attempt began training
        self._configured = False
        self._held_for: int | None = None  # the step whose progress note waits for its evaluation
        self._outside_lr: float | None = None  # a learning rate set outside the scheduler, once recorded

    # --- start -------------------------------------------------------------------------------

    def begin(self, *, total_steps: int, step: int, world_size: int, resumed_from: str | None = None,
              device: str | None = None) -> Run:
        """Open the run and, outside `logbook run`, record the restart owed and `run_started`."""
        if self.run is not None:
            return self.run  # a second `train()` call on the same callback continues the same attempt
        self.run = run = run_from_env(self.run_id, project_root=self.project_root, total_steps=total_steps or None)
        self.total_steps, self._mark = int(total_steps or 0), (time.time(), step)
        if self.fractions is None:
            self.fractions = list(run.project.config.milestones)
        if not run.writes:
            return run
        history = RunHistory.of_run(run.project, run.run_id)  # what earlier attempts left, as the trainer reads it
        self.notes = ProgressNotes(self.fractions, self.total_steps, run.run_dir)
        self._first_started = history.first_started()
        if not run.launched:
            self._refuse_finished(history.events)
            if (owed := self._owed_restart(history, step)) is not None:
                run.emit("restart", step=step, **owed)
            run.emit("run_started", step=step, total_steps=self.total_steps or None, world_size=world_size,
                     resumed_from_step=step, resumed_from=resumed_from, device=device, exploratory=run.record is None,
                     started_at=round(time.time(), 3))
        else:
            run.resumed(step)  # the launcher writes the restart and the start; only this process knows the step
        self._emit_due(step)  # a resume may land past a milestone the killed attempt never wrote
        return run

    def _refuse_finished(self, events: list[dict[str, Any]]) -> None:
        if any(ending(e) == "finished" for e in events):
            raise UsageError(f"run {self.run.run_id!r} has already finished (its log ends with run_finished); "
                             "pass LogbookCallback(run_id=...) a new id to train again")

    def _owed_restart(self, history: RunHistory, step: int) -> dict[str, Any] | None:
        """The `restart` the previous attempt is owed: it started and nobody recorded a restart after it.

        What it cost (the last step and sign of life, the steps and seconds lost,
        the downtime) is worked out as the bundled trainer's restarts are
        (`logbook.runs.attempt_ends.restart_cost`); why it ended comes from this
        recorder's own records, which hold no torchrun error file nor rank marks.
        """
        prev = self.run.attempt - 1
        mine = history.of_attempt(prev)
        if prev < 1 or not any(is_kind(e, "run_started") for e in mine):
            return None
        if prev not in history.unrecorded_ends(prev + 1):  # a restart after it recorded its end already
            return None
        ends = [(ending(e), e.get("data") or {}) for e in mine if ending(e)]
        how, data = ends[-1] if ends else (None, {})
        out: dict[str, Any] = {"prev_attempt": prev, "next_attempt": prev + 1, "resumed_from_step": step,
                               **restart_cost(history, prev, step, time.time())}
        if how is None:
            out.update(cause="unknown", detail=NO_RECORD)
        elif how == "failed":  # our own run_failed: "<ExceptionType>: <message>", as `fail` wrote it
            kind, _, message = str(data.get("reason") or "").partition(": ")
            out.update(cause="exception", exception_type=kind if kind.isidentifier() else None,
                       exception_message=message if kind.isidentifier() else data.get("reason"))
        else:
            out.update(cause=how if how in RESTART_CAUSES else "unknown", detail=f"attempt {prev} ended: {how}")
        return out

    def config(self, values: dict[str, Any], *, source: str, seed: Any = None) -> None:
        """The hyperparameters the framework trains with (`config_recorded`); once per attempt."""
        if self.run is None or self._configured:
            return
        self._configured = True
        self.run.config(values, source=source, seed=seed if isinstance(seed, int) and not isinstance(seed, bool)
                        else None)

    # --- during training ---------------------------------------------------------------------

    def step(self, step: int, loss: Any = None, lr: Any = None, grad_norm: Any = None, check: bool = True) -> bool:
        """One training step's figures: a metrics row, the spike check, the milestones due; True: stop training.

        `check=False`: the loss was judged before the optimizer step already (`judge`).
        """
        if self.run is None:
            return False
        row = {k: v for k, v in (("loss", as_float(loss)), ("lr", as_float(lr)), ("grad_norm", as_float(grad_norm)))
               if v is not None}
        if not row:
            return False
        self.run.log_metrics(step, {**row, "time": round(time.time(), 3)})
        stop = False
        if "loss" in row:
            self.last_loss = row["loss"]
            if check:
                stop = self._check_spike(step, row["loss"])
        if self._held_for is None or step > self._held_for:
            self._held_for = None
            self._emit_due(step)
        return stop

    def hold_milestones(self, step: int) -> None:
        """An evaluation comes at `step`: a progress note due there waits for it, so it quotes that evaluation."""
        self._held_for = step

    def evaluation(self, step: int, values: Any) -> None:
        """An evaluation's figures as the framework logged them (HF's `eval_*`, Lightning's `callback_metrics`).

        The validation loss (`eval_loss`, `val/loss`, ...) is recorded as `val_loss`; every other
        number that is not a bundled metric (which `step` records) goes into the same row under its own name,
        `/` made `_` (`eval_accuracy`, `val_acc`), so a prediction can name it.
        """
        if self.run is None:
            return
        row: dict[str, float] = {}
        for key, value in values.items():
            name = canonical(str(key))
            v = as_float(value) if name == "val_loss" or not is_bundled(name) else None
            if v is not None and name not in ("step", "attempt", "time") and (name not in row or key == name):
                row[name] = v  # of two spellings of the validation loss, the logbook's own wins
        if not row:
            return
        if "val_loss" in row:
            self.last_val = (step, row["val_loss"])
        self.run.log_metrics(step, {**row, "time": round(time.time(), 3)})
        if self._held_for == step:
            self._held_for = None
            self._emit_due(step)

    def lr_used(self, step: int, used: Any, expected: Any) -> None:
        """The learning rate step `step`'s update used, against what the scheduler set (or, without one, the last).

        A difference is a change nobody scheduled (a callback, the script
        itself): one `hparam_change` when it starts and each time its value
        moves, none while the scheduler is in charge.
        """
        u, e = as_float(used), as_float(expected)
        if self.run is None or u is None:
            return
        if e is None or math.isclose(u, e, rel_tol=1e-9, abs_tol=0.0):
            self._outside_lr = None
            return
        if self._outside_lr is not None and math.isclose(u, self._outside_lr, rel_tol=1e-9, abs_tol=0.0):
            return
        self._outside_lr = u
        self.run.emit("hparam_change", step=step, key="lr", old=e, new=u, source="callback", who=self.framework,
                      reason="the optimizer's learning rate is not the one its scheduler set: a callback or the "
                             "script changed it")

    def _check_spike(self, step: int, loss: float) -> bool:
        spike = self.detector.check(loss)
        if spike is None or step == self._flagged_step:
            return False  # no spike, or one `judge` recorded for this step before its update
        stop = self.stop_on_divergence and self.stopped is None
        reason = f"{_what(spike)} at step {step}: " + (
            f"training stopped ({self.framework}, on_divergence='stop')" if stop else
            f"recorded only ({self.framework} shows the loss after the update; on_divergence={self.on_divergence!r})"
            if self.on_divergence == "skip" else "recorded only (on_divergence='record')")
        self.run.emit("divergence_detected", step=step, action="abort" if stop else "none",
                      actions=["abort"] if stop else [], reason=reason, **spike)
        if stop:
            self.stopped = {"step": step, "reason": reason}
        return stop

    def judge(self, step: int, value: Any, metric: str = "loss") -> bool:
        """Before step `step`'s optimizer update: is `value` (its loss or gradient norm) a spike? True: skip it.

        Only with `on_divergence="skip"`; a flagged step is recorded as the
        bundled trainer records a skip, `divergence_detected` (`action: skip`)
        and then `step_skipped`. The adapter then keeps the update from happening.
        """
        if self.run is None or self.on_divergence != "skip":
            return False
        if step == self._flagged_step:
            return True  # a later micro-batch of a step flagged already
        v = as_float(value)
        if v is None:
            return False
        spike = (self.grad_detector if metric == "grad_norm" else self.detector).check(v)
        if spike is None:
            return False
        self._flagged_step = step
        reason = f"{_what(spike)} at step {step}: optimizer update skipped ({self.framework}, on_divergence='skip')"
        self.run.emit("divergence_detected", step=step, action="skip", actions=["skip_update"], counted=True,
                      reason=reason, **spike)
        self.run.emit("step_skipped", step=step, reason=reason, metric=spike["metric"], counted=True)
        return True

    def milestone_due(self, step: int) -> bool:
        """Whether a milestone falls due at `step` (HF asks, to have this step's loss logged for the note)."""
        return bool(self.run and self.notes is not None and self.notes.due(step))

    def _emit_due(self, step: int) -> None:
        if not (self.run and self.run.writes and self.notes is not None):
            return
        self.notes.write_due(self.run.emit, step, lambda: {
            "elapsed_s": round(time.time() - (self._first_started or self._mark[0]), 3), "eta_s": self._eta(step),
            "loss": self.last_loss, "val_loss": self.last_val[1] if self.last_val else None,
            "val_step": self.last_val[0] if self.last_val else None}, before=self.run.metrics.flush)

    def _eta(self, step: int) -> float | None:
        t0, s0 = self._mark
        return round((self.total_steps - step) * (time.time() - t0) / (step - s0), 3) if step > s0 else None

    def checkpoint(self, step: int, path: str | None, blocking_s: float | None = None) -> None:
        """The framework wrote a checkpoint (complete, as far as it tells); `blocking_s`: what it cost, when known."""
        if self.run is None:
            return
        self.run.metrics.flush()
        self.run.emit("checkpoint_saved", step=step, path=path,
                      blocking_s=round(blocking_s, 6) if blocking_s is not None else None)

    # --- the end -------------------------------------------------------------------------------

    def end(self, step: int) -> None:
        """Training returned: `run_aborted` after a stop on divergence, else (unlaunched) `run_finished`."""
        if self.run is None:
            return
        try:
            self._emit_due(step)
            if self.stopped is not None:
                self.run.emit("run_aborted", step=step, reason=self.stopped["reason"])
            elif not self.run.launched:
                now = time.time()
                self.run.emit("run_finished", step=step, final_loss=self.last_loss,
                              val_loss=self.last_val[1] if self.last_val else None,
                              wall_s=round(now - (self._first_started or self._mark[0]), 3),
                              attempt_wall_s=round(now - self._mark[0], 3))
        finally:
            self.close()

    def fail(self, step: int, exc: BaseException) -> None:
        """Training raised: `run_failed` with the reason (`attempt_failed` under the launcher, which decides)."""
        if self.run is None:
            return
        try:
            words = f"{type(exc).__name__}: {exc}"[:2000]
            if self.run.launched:
                tb = traceback.format_exception(type(exc), exc, exc.__traceback__)
                self.run.emit("attempt_failed", step=step, exception_type=type(exc).__name__,
                              exception_message=str(exc)[:2000], traceback="".join(tb[-3:])[-4000:])
            else:
                self.run.emit("run_failed", step=step, reason=words, attempts=self.run.attempt, status="failed")
        finally:
            self.close()

    def close(self) -> None:
        """Flush the metrics and let go of the run; a later `begin` opens the next attempt."""
        if self.run is not None:
            self.run.close()
            self.run = None
            self._configured = False
