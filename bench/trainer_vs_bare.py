"""Tokens per second of the full trainer against a bare PyTorch loop, measured side by side.

The trainer (`trainer.loop.Trainer`: event log, metrics rows every step,
heartbeat, callbacks, progress lines, background checkpoints) trains the
tiny CPU config in a scratch logbook. Every `--block` of its steps, a bench
callback pauses it and runs the same number of steps of a bare loop: the
same model shape and initial weights, the same batches (`DataStream.batch`),
the same optimizer, clipping and schedule, and nothing else (no checkpoints,
no events, no metrics). The two alternate to the end, so a busy machine
slows both alike. A checkpoint still being written when a bare block starts
is waited for, and that wait is charged to the trainer.

Printed: the median tokens/s of each over the blocks, and the figure: the
median over the blocks of trainer/bare, each trainer block against the bare
block run right after it (goal >= 0.98). A ratio of two medians taken apart
lets load that comes and goes between the blocks into the figure; the
pairs see the same machine.

    python3 bench/trainer_vs_bare.py [--steps 800] [--block 10] [--every 100] [--threads 1]
"""

from __future__ import annotations

import argparse
import math
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._result import result  # noqa: E402
from trainer.observe.callbacks import Callback  # noqa: E402
from trainer.config import TrainConfig, load_train_config  # noqa: E402
from trainer.nn.model import GPT  # noqa: E402
from trainer.nn.optim import build_optimizer, lr_factor  # noqa: E402
from trainer.startup import build_trainer  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
GOAL = 0.98


class BareLoop:
    """The training step with nothing around it."""

    def __init__(self, cfg: TrainConfig, data) -> None:
        self.cfg, self.data = cfg, data
        torch.manual_seed(cfg.train.seed)
        self.model = GPT(cfg.model)
        self.opt = build_optimizer(self.model, cfg.optim, "cpu")
        self.step = 0

    def run(self, n: int) -> None:
        c = self.cfg
        clip = c.optim.grad_clip if c.optim.grad_clip > 0 else math.inf
        for _ in range(n):
            self.step += 1
            self.opt.set_lr(lr_factor(self.step, c.schedule, c.train.steps))
            for micro in range(c.train.grad_accum):
                x, y = self.data.batch(self.step, micro)
                (self.model(x, y).loss / c.train.grad_accum).backward()
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), clip)
            self.opt.step()
            self.opt.zero_grad(set_to_none=True)


class Interleave(Callback):
    """Times the trainer between its steps and runs a bare block after every `block` steps."""

    name = "bench_interleave"
    priority = 10_000  # after every other callback: their cost is the trainer's

    def __init__(self, block: int, warmup: int) -> None:
        self.block, self.warmup = block, warmup
        self.trainer_s: list[float] = []
        self.bare_s: list[float] = []
        self.bare: BareLoop | None = None
        self._mark = 0.0

    def pre_train(self) -> None:
        self.bare = BareLoop(self.trainer.cfg, self.trainer.data)
        self.bare.run(self.warmup)
        self._mark = time.perf_counter()

    def post_step(self, step: int, metrics: dict) -> None:
        if step % self.block:
            return
        self.trainer.checkpointer.wait()  # a save still in flight is the trainer's time, not the bare loop's
        now = time.perf_counter()
        if step > self.warmup:
            self.trainer_s.append(now - self._mark)
        t0 = time.perf_counter()
        self.bare.run(self.block)
        if step > self.warmup:
            self.bare_s.append(time.perf_counter() - t0)
        # The rest of this step (eval, checkpoint, heartbeat) counts towards the next trainer block.
        self._mark = time.perf_counter()


def scratch_logbook(where: Path) -> Path:
    root = where / "repo"
    root.mkdir()
    env_git = ["git", "-c", "user.name=bench", "-c", "user.email=bench@example.org"]
    subprocess.run(env_git + ["init", "-q"], cwd=root, check=True)
    subprocess.run(env_git + ["commit", "-q", "--allow-empty", "-m", "init"], cwd=root, check=True)
    from logbook.records.init import init_logbook

    init_logbook(start=root)
    return root


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default=str(ROOT / "configs" / "tiny-cpu.yaml"))
    ap.add_argument("--steps", type=int, default=800)
    ap.add_argument("--block", type=int, default=10, help="steps per block; trainer and bare blocks alternate")
    ap.add_argument("--every", type=int, default=100, help="the trainer's checkpoint interval (background saves)")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    overrides = [f"train.steps={args.steps}", f"checkpoint.every={args.every}", "train.eval_every=0",
                 f"train.threads={args.threads}", "train.device=cpu"]
    cfg = load_train_config(Path(args.config), overrides)
    with tempfile.TemporaryDirectory() as tmp:
        repo = scratch_logbook(Path(tmp))
        bench = Interleave(args.block, warmup=args.block)
        build_trainer(cfg, project_root=repo, run_id="bench", callbacks=[bench], interactive=False).fit()
    tokens = args.block * cfg.tokens_per_step
    trainer_tps = statistics.median(tokens / s for s in bench.trainer_s)
    bare_tps = statistics.median(tokens / s for s in bench.bare_s)
    ratio = statistics.median(bare / trainer for trainer, bare in zip(bench.trainer_s, bench.bare_s))
    print(f"blocks of {args.block} steps, {len(bench.trainer_s)} each, {cfg.tokens_per_step} tokens/step, "
          f"checkpoint every {args.every} steps in the background")
    print(f"trainer: median {trainer_tps:,.0f} tokens/s")
    print(f"bare:    median {bare_tps:,.0f} tokens/s (ratio of the medians {trainer_tps / bare_tps:.3f})")
    print(f"ratio trainer/bare, block by block: median {ratio:.3f} (goal >= {GOAL})")
    result("trainer tokens/s vs bare loop", round(ratio, 4), "ratio", f">= {GOAL}", ratio >= GOAL)


if __name__ == "__main__":
    main()
