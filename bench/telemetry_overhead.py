"""Cost of the telemetry callback per training step, on and off in one real training run.

The real trainer (trainer.loop.Trainer) trains a small GPT on bytes of the
Python standard library. A switch callback turns the telemetry on for even
steps and off for odd ones (its hooks are not called and the data stream is
unwrapped), so a busy machine slows both alike. Log steps fall on even steps,
so the "on" steps also pay for the telemetry's reports. Reported side by side:

- overhead, direct: time spent inside the telemetry's hooks and its data-stream
  wrapper over the total time of the steps it ran on (the cost itself);
- overhead, paired: median over (on, off) pairs of the step-time difference
  over the median off step (what a user would see, with the pair noise).

    python3 bench/telemetry_overhead.py [--steps 240] [--log-every 10] [--threads 1]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._result import result  # noqa: E402
from trainer.observe.callbacks import Callback  # noqa: E402
from trainer.config import load_train_config  # noqa: E402
from trainer.startup import build_trainer  # noqa: E402
from trainer.observe.telemetry import Telemetry, TelemetryConfig  # noqa: E402

GOAL = 0.01
clock = time.perf_counter


class TimedTelemetry(Telemetry):
    """The real telemetry, with the time spent in its own code added up."""

    spent = 0.0

    def _timed_hook(self, fn, *args):
        t0 = clock()
        try:
            return fn(*args)
        finally:
            self.spent += clock() - t0

    def pre_step(self, step):
        return self._timed_hook(super().pre_step, step)

    def post_backward(self, loss, grad_norm):
        return self._timed_hook(super().post_backward, loss, grad_norm)

    def post_step(self, step, metrics):
        return self._timed_hook(super().post_step, step, metrics)

    def _timed(self, fn):
        inner_s = [0.0]

        def inner(*args, **kwargs):
            t0 = clock()
            try:
                return fn(*args, **kwargs)
            finally:
                inner_s[0] = clock() - t0

        wrapped = super()._timed(inner)

        def counted(*args, **kwargs):
            t0 = clock()
            try:
                return wrapped(*args, **kwargs)
            finally:  # the wrapper's own cost, not the data loading it times
                self.spent += max(0.0, clock() - t0 - inner_s[0])

        return counted


class Switch(Callback):
    """Runs the telemetry's hooks on even steps only, and times every step from outside."""

    name = "switch"
    priority = -100  # first in, so its clock brackets everything the other callbacks do

    def __init__(self, tele: TimedTelemetry) -> None:
        self.tele = tele
        self.times: dict[str, list[float]] = {"on": [], "off": []}
        self.on_spent = 0.0
        self._t0 = 0.0
        self._on = False

    def pre_train(self) -> None:
        self.tele.trainer = self.trainer
        self.tele.pre_train()
        data = self.trainer.data
        self._wrapped = {a: getattr(data, a) for a in ("take", "batch")}

    def pre_step(self, step: int) -> None:
        self._on = step % 2 == 0
        data = self.trainer.data
        for attr, fn in self._wrapped.items():
            if self._on:
                setattr(data, attr, fn)
            else:
                data.__dict__.pop(attr, None)
        self._spent0 = self.tele.spent
        self._t0 = clock()
        if self._on:
            self.tele.pre_step(step)

    def post_backward(self, loss, grad_norm):
        if self._on:
            self.tele.post_backward(loss, grad_norm)
        return None

    def post_step(self, step: int, metrics: dict) -> None:
        if self._on:
            self.tele.post_step(step, metrics)
        elapsed = clock() - self._t0
        if step > 20:  # warm-up steps (allocator, caches) are left out of both
            self.times["on" if self._on else "off"].append(elapsed)
            if self._on:
                self.on_spent += self.tele.spent - self._spent0

    def close(self) -> None:
        self.tele.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=240)
    ap.add_argument("--log-every", type=int, default=10, help="even, so reports fall on telemetry-on steps")
    ap.add_argument("--threads", type=int, default=1, help="CPU threads (1 keeps a shared machine from thrashing)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="telemetry-bench-") as tmp:
        repo = Path(tmp)
        subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
        subprocess.run(["git", "-c", "user.name=bench", "-c", "user.email=bench@localhost", "commit", "-q",
                        "--allow-empty", "-m", "init"], cwd=repo, check=True)
        subprocess.run([sys.executable, "-m", "logbook", "init"], cwd=repo, check=True, capture_output=True)
        cfg = load_train_config(ROOT / "configs" / "tiny-cpu.yaml", [
            f"train.steps={args.steps}", f"train.log_every={args.log_every}", f"train.threads={args.threads}",
            "train.eval_every=0", "train.eval_batches=1", f"checkpoint.every={args.steps}", "data.sources.0.max_mb=1"])
        tele = TimedTelemetry(TelemetryConfig(), say=lambda line: None)
        switch = Switch(tele)
        trainer = build_trainer(cfg, project_root=repo, run_id="bench", callbacks=[switch], interactive=False)
        trainer.fit()
    on, off = switch.times["on"], switch.times["off"]
    off_med = statistics.median(off)
    paired = statistics.median(a - b for a, b in zip(on, off)) / off_med
    direct = switch.on_spent / sum(on)
    print(f"device {trainer.device}, GPT {cfg.model.n_layer}x{cfg.model.n_embd}, block {cfg.model.block_size}, "
          f"batch {cfg.train.batch_size}, {len(on)} on / {len(off)} off steps, log every {args.log_every}")
    print(f"median step: off {off_med * 1e3:.2f} ms, on {statistics.median(on) * 1e3:.2f} ms; "
          f"telemetry code {switch.on_spent / len(on) * 1e6:.1f} us per step on average")
    print(f"overhead: direct {direct:.3%}, paired {paired:+.3%} (goal <= {GOAL:.0%})")
    result("telemetry overhead per step (direct)", round(direct, 6), "fraction", f"<= {GOAL}", direct <= GOAL)
    result("telemetry overhead per step (paired on/off)", round(paired, 6), "fraction", f"<= {GOAL}", paired <= GOAL)


if __name__ == "__main__":
    main()
