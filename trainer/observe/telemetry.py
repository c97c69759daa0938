"""Telemetry: throughput, where a step's time goes, MFU and peak memory, at every log step.

A callback that only reads clocks. Between two log steps it accumulates, per
step executed:

- data: waiting for `data.take()` and `data.batch()` (wrapped on the data
  stream of this attempt; the loop is not touched);
- fwd_bwd: from the start of the step to the gradients being ready, less data;
- optim: from the gradients to the end of the step (update, zero_grad, report);
- ckpt: the checkpointer's blocking seconds (its own counter, so a background
  write costs only its in-memory copy);
- other: the rest of the window's wall time (evaluation, live control, a rollback's restore).

At a log step it writes them as seconds per step, with `tokens_per_s`,
`tflops` (achieved model TFLOP/s per device), `mfu` and `peak_mem_mb`, into
the step's metrics dict (so later callbacks see them), which the loop writes
as the step's metrics row after the callbacks (`window_steps` says how many
steps the figures cover).

Nothing here synchronises the device by default: on CUDA the wall clock
measures host time per phase, and only the window's total is exact (the
loop's log step reads the loss, which waits for the device). With
`telemetry.mode: detailed`, CUDA events bracket the phases and are read once
per log step, so the split is device time with no per-step host sync.

MFU = tokens/s per device x the model's FLOPs per token / the device's peak
(trainer/observe/accelerators.py, or `telemetry.peak_tflops`). A missing or absurd
peak prints one warning line and leaves MFU out of the rows; training goes on.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import Any

from logbook.api import typedconfig
from .accelerators import mfu as mfu_of
from .accelerators import resolve_peak

from .callbacks import Callback

MODES = ("off", "basic", "detailed")
_FOLD_EVENTS = 512  # detailed mode: read CUDA events at least this often, so the list stays short


@dataclass
class TelemetryConfig:
    """What the telemetry callback measures and against which peak."""

    mode: str = "basic"
    """off | basic (wall clock around phases, never a device sync) | detailed (on CUDA, CUDA events read once per log step)."""
    peak_tflops: float | None = None
    """Dense bf16 peak TFLOP/s per device for MFU; None looks the device up in trainer/observe/accelerators.py. A missing or absurd figure (<= 0, > 10,000, not a number) leaves MFU unknown with a warning, never stops training."""

    def validate(self, where: str) -> None:
        typedconfig.check_choice(self, where, "mode", MODES)


def peak_memory_mb(device: Any) -> float | None:
    """Peak memory of this process in MiB: allocated on a CUDA device, max RSS on the host otherwise."""
    if getattr(device, "type", "cpu") == "cuda":
        import torch

        return torch.cuda.max_memory_allocated(device) / 2**20
    try:
        import resource
    except ImportError:  # not on every platform
        return None
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / 2**20 if sys.platform == "darwin" else rss / 2**10  # bytes on macOS, KiB on Linux


def device_name(device: Any) -> str:
    """The name the runtime reports for `device` (what the accelerator table matches)."""
    if getattr(device, "type", "cpu") == "cuda":
        import torch

        return torch.cuda.get_device_name(device)
    return str(getattr(device, "type", device))


class _Window:
    """Sums over the steps since the last log step."""

    def __init__(self, start: float, ckpt_mark: float) -> None:
        self.start = start
        self.ckpt_mark = ckpt_mark
        self.steps = 0
        self.data = 0.0
        self.fwd_bwd = 0.0
        self.optim = 0.0


class Telemetry(Callback):
    """Measures throughput, the step-time split, MFU and peak memory; writes them at log steps."""

    name = "telemetry"
    priority = 5  # first after the watchdog: its clock starts before, and stops before, everyone else's work

    def __init__(self, cfg: TelemetryConfig | None = None, *, own_row: bool = False, say=None) -> None:
        self.cfg = cfg or TelemetryConfig()
        self.own_row = own_row
        """Also write a metrics row of its own: only for a loop that writes its row before `post_step`
        (this trainer writes the step's row after the callbacks, so the figures join that row)."""
        self.say = say or (lambda line: print(line, file=sys.stderr, flush=True))
        self.enabled = self.cfg.mode != "off"
        self.peak_tflops: float | None = None
        self.peak_source = "unknown"
        self.mfu_problem: str | None = None
        self.last: dict[str, float] = {}
        self._win: _Window | None = None
        self._t_pre: float | None = None
        self._t_bwd: float | None = None
        self._data_step = 0.0
        self._open = False
        self._events: list[tuple[Any, Any, Any]] = []
        self._pending: tuple[Any, Any] | None = None
        self._device_split = (0.0, 0.0)
        self._wrapped: list[str] = []
        self._cuda_events = False

    # --- set-up -----------------------------------------------------------------

    def pre_train(self) -> None:
        if not self.enabled:
            return
        t = self.trainer
        self._cuda_events = self.cfg.mode == "detailed" and t.device.type == "cuda"
        res = resolve_peak(device_name(t.device), self.cfg.peak_tflops)
        self.peak_tflops, self.peak_source, self.mfu_problem = res.tflops, res.source, res.problem
        if res.problem and t.dist.rank == 0:
            self.say(f"telemetry: {res.problem}")
        try:
            self.flops_per_token = float(t.raw_model.flops_per_token())
        except Exception:  # a model without the helper: throughput still counts, MFU does not
            self.flops_per_token = None
        self.tokens_per_step = t.cfg.tokens_per_step * t.dist.world_size
        self.world_size = t.dist.world_size
        self._wrap_data()

    def _wrap_data(self) -> None:
        data = self.trainer.data
        for attr in ("take", "batch"):
            fn = getattr(data, attr, None)
            if fn is not None:
                setattr(data, attr, self._timed(fn))
                self._wrapped.append(attr)

    def _timed(self, fn):
        clock = time.perf_counter

        def timed(*args, **kwargs):
            t0 = clock()
            try:
                return fn(*args, **kwargs)
            finally:
                self._data_step += clock() - t0

        return timed

    # --- per step ---------------------------------------------------------------

    def pre_step(self, step: int) -> None:
        if not self.enabled:
            return
        now = time.perf_counter()
        if self._open:  # the previous step never reached post_step (a rollback): count what it did
            self._close_step(now, finished=False)
        if self._win is None:
            self._win = _Window(now, self._ckpt_total())
        self._t_pre, self._t_bwd, self._data_step, self._open = now, None, 0.0, True
        if self._cuda_events:
            self._pending = (self._cuda_event(), None)

    def post_backward(self, loss, grad_norm):
        if self.enabled and self._open:
            self._t_bwd = time.perf_counter()
            if self._cuda_events and self._pending is not None:
                self._pending = (self._pending[0], self._cuda_event())
        return None

    def post_step(self, step: int, metrics: dict[str, Any]) -> None:
        if not self.enabled or not self._open:
            return
        now = time.perf_counter()
        self._close_step(now, finished=True)
        if "loss" in metrics:  # a log step: the loop reported this step's scalars
            row = self._report(now)
            metrics.update(row)
            if self.own_row:
                t = self.trainer
                t.metrics.write({"step": step, "attempt": t.attempt, "time": time.time(), **row})

    def _close_step(self, now: float, finished: bool) -> None:
        w = self._win
        bwd = self._t_bwd if self._t_bwd is not None else now
        w.steps += 1
        w.data += self._data_step
        w.fwd_bwd += max(0.0, bwd - self._t_pre - self._data_step)
        if finished:
            w.optim += max(0.0, now - bwd)
        if self._cuda_events and self._pending is not None:
            start, grads = self._pending
            self._events.append((start, grads, self._cuda_event() if finished else None))
            self._pending = None
            if len(self._events) >= _FOLD_EVENTS:
                self._fold_events()
        self._open = False

    # --- a log step -------------------------------------------------------------

    def _report(self, now: float) -> dict[str, float]:
        w = self._win
        wall = max(now - w.start, 1e-9)
        ckpt = max(0.0, self._ckpt_total() - w.ckpt_mark)
        fwd_bwd, optim = w.fwd_bwd, w.optim
        if self._cuda_events:
            self._fold_events()
            fwd_bwd, optim = self._device_split
            self._device_split = (0.0, 0.0)
        n = max(w.steps, 1)
        other = max(0.0, wall - w.data - fwd_bwd - optim - ckpt)
        tokens_per_s = w.steps * self.tokens_per_step / wall
        row: dict[str, float] = {
            "window_steps": w.steps, "step_s": wall / n, "data_s": w.data / n, "fwd_bwd_s": fwd_bwd / n,
            "optim_s": optim / n, "ckpt_s": ckpt / n, "other_s": other / n, "tokens_per_s": tokens_per_s,
        }
        if self.flops_per_token:
            per_device = tokens_per_s / self.world_size
            row["tflops"] = per_device * self.flops_per_token / 1e12
            mfu = mfu_of(per_device, self.flops_per_token, self.peak_tflops)
            if mfu is not None:
                row["mfu"] = mfu
        mem = peak_memory_mb(self.trainer.device)
        if mem is not None:
            row["peak_mem_mb"] = mem
        self.last = row
        self._win = _Window(now, self._ckpt_total())
        return row

    def _ckpt_total(self) -> float:
        ck = getattr(self.trainer, "checkpointer", None)
        return float(getattr(ck, "blocking_s_total", 0.0) or 0.0)

    # --- CUDA events (detailed mode only) ----------------------------------------

    def _cuda_event(self):
        import torch

        ev = torch.cuda.Event(enable_timing=True)
        ev.record()
        return ev

    def _fold_events(self) -> None:
        """Turn recorded events into seconds; waits once for the newest one."""
        if not self._events:
            return
        last = next((e for trio in reversed(self._events) for e in reversed(trio) if e is not None), None)
        if last is not None:
            last.synchronize()
        fb, opt = self._device_split
        for start, grads, end in self._events:
            if grads is not None:
                fb += start.elapsed_time(grads) / 1e3
                if end is not None:
                    opt += grads.elapsed_time(end) / 1e3
        self._device_split = (fb, opt)
        self._events.clear()

    # --- ending -------------------------------------------------------------------

    def close(self) -> None:
        data = getattr(getattr(self, "trainer", None), "data", None)
        for attr in self._wrapped:
            try:
                delattr(data, attr)  # the instance attribute goes; the class's method shows through again
            except AttributeError:
                pass
        self._wrapped.clear()
