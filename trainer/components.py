"""What one attempt is made of, as built by trainer/startup.py and owned by the loop's `Trainer`.

`Runtime` is the process's torch and distributed set-up, `RunLogbook` the
run's logbook as this attempt sees it (event sink, metrics, heartbeat, what
earlier attempts left), `TrainParts` what it trains with (data, model,
optimizer, checkpointer, callbacks). `Drills` says whether a drill is under
way, for every component that marks its events, and `StopSignals` holds a
SIGTERM/SIGUSR1 until the loop acts on it between steps. Each one that holds
resources closes them itself; the trainer closes them in its teardown.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import threading
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from logbook.api import Run

from .checkpoints.checkpoint import Checkpointer
from .job import dist
from .observe.callbacks import CallbackList


@dataclass
class Runtime:
    """Torch's settings and the process group of this process, restored and shut down by `close`."""

    dist: dist.DistInfo
    device: torch.device
    autocast: Any
    """bfloat16 autocast on the device, or a null context."""
    torch_before: tuple[int, bool, bool]
    """Threads and determinism as torch had them: an in-process run (tests, benchmarks) leaves torch as it found it."""

    @classmethod
    def start(cls, train: Any) -> Runtime:
        """Threads, determinism and the process group as `train` (the config's `train` section) asks."""
        before = (torch.get_num_threads(), torch.are_deterministic_algorithms_enabled(),
                  torch.is_deterministic_algorithms_warn_only_enabled())
        if train.threads:
            torch.set_num_threads(train.threads)
        info = dist.init_distributed(train.device)
        device = info.device
        if train.deterministic:
            dist.set_deterministic(True, warn_only=device.type == "cuda", compiling=train.compile)
            torch.backends.cudnn.benchmark = False
        elif device.type == "cuda":
            torch.backends.cuda.matmul.allow_tf32 = True
            torch.backends.cudnn.allow_tf32 = True
        autocast = torch.autocast(device.type, dtype=torch.bfloat16) if train.dtype == "bfloat16" \
            else contextlib.nullcontext()
        return cls(info, device, autocast, before)

    def close(self) -> None:
        dist.shutdown(self.dist)
        threads, det, warn_only = self.torch_before
        torch.set_num_threads(threads)
        dist.set_deterministic(det, warn_only=warn_only)


@dataclass
class RunLogbook:
    """The run's logbook as this attempt writes it (`logbook.api.Run`), and what earlier attempts left in it."""

    run: Run
    """The API's handle: event sink, metrics, the run record, this rank's mark."""
    history: Any
    """Read by rank 0; empty on the other ranks."""
    aborted: dict[str, Any] | None
    """The abort that ended the run ({step, reason}), or None; the same on every rank."""
    finished_step: int | None
    """The step the run finished at, or None; the same on every rank."""

    @property
    def project(self) -> Any:
        return self.run.project

    @property
    def run_dir(self) -> Path:
        return self.run.run_dir

    @property
    def run_record(self) -> Any:
        """None when the trainer was launched directly, not through `logbook run`."""
        return self.run.record

    @property
    def attempt(self) -> int:
        return self.run.attempt

    @property
    def sink(self) -> Any:
        return self.run.sink

    @property
    def metrics(self) -> Any:
        return self.run.metrics

    @property
    def rank_mark(self) -> Any:
        return self.run.rank_mark

    def close(self) -> None:
        self.run.close()


@dataclass
class TrainParts:
    """What the attempt trains with."""

    data: Any
    """The `DataStream` (trainer/nn/data.py)."""
    raw_model: Any
    """The `GPT` itself (trainer/nn/model.py), for state dicts, QK-clip and evaluation."""
    model: Any
    """What the step calls: `raw_model`, compiled and/or wrapped for DDP."""
    optimizer: Any
    """The `CombinedOptimizer` (trainer/nn/optim.py)."""
    checkpointer: Checkpointer
    callbacks: CallbackList
    compile_cache: Any = None
    """The `CompileCache` (trainer/compiling.py) when compiling, closed with the attempt."""
    progress: Any = None
    """The `ProgressReporter` among the callbacks, told of evaluations (None off rank 0)."""
    guard_from_plan: list[str] = field(default_factory=list)
    """Guard settings the contingency plan set (logbook/guard/plan.py), as `run_started` records them."""

    def close(self) -> None:
        try:
            self.checkpointer.wait()  # a save in flight is worth finishing, even when failing
        except Exception:
            traceback.print_exc()
        self.callbacks.close()
        if self.compile_cache is not None:
            self.compile_cache.close()


@dataclass
class Drills:
    """Whether a drill is under way in this attempt: the events it leads to are marked `drill`."""

    active: bool = False
    step: int | None = None
    """The step a nan/spike drill blew up."""

    def mark(self, step: int | None = None) -> None:
        self.active = True
        if step is not None:
            self.step = step


@dataclass
class StopSignals:
    """SIGTERM and SIGUSR1, held until the loop acts on them between steps (never in the middle of one)."""

    signum: int | None = None
    """The first request: it is the cause. Slurm's USR1 reaches the trainer directly and again
    as the SIGTERM its launcher sends torchrun."""
    rank_mark: Any = None
    """Told at once: torchrun stops the survivors of a lost rank with SIGTERM, then SIGKILL."""
    _old: dict[int, Any] = field(default_factory=dict)
    _wake: tuple[socket.socket, socket.socket] | None = None
    _old_wakeup_fd: int = -1

    def install(self) -> None:
        if threading.current_thread() is threading.main_thread():
            for sig in _STOPS:
                self._old[sig] = signal.signal(sig, self._on_signal)
            self._watch_at_c_level()

    def _on_signal(self, signum: int, frame: Any) -> None:
        self.signum = self.signum or signum
        self._mark_ended(signum)

    def _mark_ended(self, signum: int) -> None:
        if self.rank_mark is not None:
            self.rank_mark.ended(signal.Signals(signum).name)  # the survivors did not vanish

    def _watch_at_c_level(self) -> None:
        """Mark the rank from a thread the moment a stop arrives, even while the main thread is inside an op.

        Python runs a handler only once the main thread is back in Python. A
        survivor blocked in a collective with a rank that vanished does not get
        back before torchrun's SIGKILL (30 s after its SIGTERM), so its mark
        would stay open and the restart would count it as lost too. Python's
        own C-level handler writes each signal's number to the wakeup file
        descriptor at once; the thread waiting on it writes the mark (an op
        such as a collective waits without holding the interpreter lock).
        """
        r, w = socket.socketpair()
        w.setblocking(False)
        try:
            self._old_wakeup_fd = signal.set_wakeup_fd(w.fileno(), warn_on_full_buffer=False)
        except (ValueError, OSError):  # not the main thread of the main interpreter
            r.close()
            w.close()
            return
        self._wake = (r, w)
        threading.Thread(target=self._wait_for_stops, args=(r,), name="stop-signals", daemon=True).start()

    def _wait_for_stops(self, r: socket.socket) -> None:
        while True:
            try:
                got = r.recv(64)
            except OSError:
                return
            if not got:  # closed
                return
            for signum in got:
                if signum in _STOPS:
                    self._mark_ended(signum)

    def close(self) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)
        self._old.clear()
        if self._wake is not None:
            signal.set_wakeup_fd(self._old_wakeup_fd)
            r, w = self._wake
            self._wake = None
            w.close()  # the thread's recv returns b"" and it ends
            r.close()


_STOPS = (signal.SIGTERM, signal.SIGUSR1)
