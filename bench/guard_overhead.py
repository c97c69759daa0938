"""Cost of the divergence guard and live control per training step, and how fast a spike is caught.

A small GPT (trainer.nn.model) trains on bytes of the Python standard library
with the schedule of configs/tiny-cpu.yaml (peak 3e-3, 20 warm-up steps, cosine).
Steps alternate between "off" (forward, backward, clip, update: no host sync
at all) and "on" (the same, plus the guard's single host sync for loss and
gradient norm, `Guard.observe`, and `ControlChannel.poll` on an empty request
folder), so a busy machine slows both alike. Reported side by side:

- overhead, paired: median over pairs of (on - off) / median off-step time;
- overhead, direct: median time of the guard and control code itself / median
  off-step time (what the paired figure estimates, without the pair noise);
- detection latency: steps from an injected spike (loss x 20, a NaN) to the
  guard's first non-OK decision, worst case over all injections (goal: 0).

    python3 bench/guard_overhead.py [--steps 250] [--layers 4] [--width 128] [--block 64] [--batch 8] [--threads 1]
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._result import result  # noqa: E402
from trainer.config import ModelConfig, OptimConfig, ScheduleConfig  # noqa: E402
from logbook.launch.live_channel import ControlChannel  # noqa: E402
from trainer.nn.data import stdlib_files  # noqa: E402
from trainer.guard.callback import metrics_to_floats  # noqa: E402
from logbook.guard.config import GuardConfig  # noqa: E402
from logbook.guard.ladder import Guard  # noqa: E402
from trainer.nn.model import GPT  # noqa: E402
from trainer.nn.optim import build_optimizer, lr_factor  # noqa: E402

GOAL_OVERHEAD = 0.01


def corpus(max_bytes: int = 2_000_000) -> np.ndarray:
    base, files = stdlib_files()
    chunks, total = [], 0
    for rel in files:
        data = (base / rel).read_bytes()
        chunks.append(data)
        total += len(data)
        if total >= max_bytes:
            break
    return np.frombuffer(b"".join(chunks)[:max_bytes], dtype=np.uint8)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=250, help="steps per mode (on and off)")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--width", type=int, default=128)
    ap.add_argument("--block", type=int, default=64)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--threads", type=int, default=1, help="CPU threads (1 keeps a shared machine from thrashing)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    mcfg = ModelConfig(n_layer=args.layers, n_head=4, n_embd=args.width, block_size=args.block)
    model = GPT(mcfg).to(device)
    opt = build_optimizer(model, OptimConfig(lr=3e-3), device.type)
    schedule = ScheduleConfig(warmup_steps=20)  # as configs/tiny-cpu.yaml
    tokens = torch.from_numpy(corpus().astype(np.int64))
    rng = np.random.default_rng(0)

    def batch():
        starts = rng.integers(0, len(tokens) - args.block - 1, size=args.batch)
        buf = torch.stack([tokens[s : s + args.block + 1] for s in starts]).to(device)
        return buf[:, :-1], buf[:, 1:]

    guard = Guard(GuardConfig(rollback_after=10_000))  # every catch stays a skip, so training goes on
    tmp = tempfile.TemporaryDirectory(prefix="guard-bench-")
    control = ControlChannel(Path(tmp.name), "bench", {"optim": OptimConfig()})
    # Injected on guarded ("on") steps only, which are the even ones: an unguarded spike would wreck the model.
    spikes = {s: 20.0 for s in range(120, 2 * args.steps - 20, 98)} | {2 * args.steps - 16: math.nan}

    times = {"on": [], "off": []}
    guard_s: list[float] = []
    caught: list[int] = []
    step = 0
    for i in range(2 * args.steps):
        on = i % 2 == 1
        step += 1
        opt.set_lr(lr_factor(step, schedule, 2 * args.steps))
        x, y = batch()
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss = model(x, y).loss
        if step in spikes:
            loss = loss * spikes[step]  # a real spike: the scaled loss scales the gradients too
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        skip = False
        g0 = time.perf_counter()
        if on:
            control.poll(step)
            lf, nf = metrics_to_floats(loss, norm)
            skip = not guard.observe(step, lf, nf, batch_id=step).ok
        g1 = time.perf_counter()
        if not skip:
            opt.step()
        opt.zero_grad(set_to_none=True)
        if device.type == "cuda":
            torch.cuda.synchronize()
        elapsed = time.perf_counter() - t0
        if skip:
            caught.append(step)
        if step in spikes or skip:
            continue  # injected and skipped steps do different work: keep them out of the timing
        times["on" if on else "off"].append(elapsed)
        if on:
            guard_s.append(g1 - g0)
    tmp.cleanup()

    latency = [min((c - s for c in caught if c >= s), default=math.inf) for s in spikes]
    unprompted = [c for c in caught if c not in spikes]
    pairs = [a - b for a, b in zip(times["on"], times["off"])]
    off_med = statistics.median(times["off"])
    paired = statistics.median(pairs) / off_med
    direct = statistics.median(guard_s) / off_med
    print(f"device {device}, GPT {args.layers}x{args.width}, block {args.block}, batch {args.batch}, "
          f"{len(model.state_dict())} tensors")
    print(f"median step: off {off_med * 1e3:.2f} ms, on {statistics.median(times['on']) * 1e3:.2f} ms; "
          f"guard+control code {statistics.median(guard_s) * 1e6:.0f} us per step")
    print(f"overhead: paired {paired:+.2%}, direct {direct:.2%} (goal <= {GOAL_OVERHEAD:.0%})")
    print(f"spikes injected: {len(spikes)}; steps to detection: {latency}; flagged without an injection: {unprompted}")
    result("guard+control overhead per step (direct)", round(direct, 5), "fraction", f"<= {GOAL_OVERHEAD}", direct <= GOAL_OVERHEAD)
    result("guard+control overhead per step (paired on/off)", round(paired, 5), "fraction", f"<= {GOAL_OVERHEAD}", paired <= GOAL_OVERHEAD)
    worst = max(latency) if latency else math.inf
    result("steps from injected spike to detection (worst)", worst, "steps", "0 (same step)", worst == 0)


if __name__ == "__main__":
    main()
