"""How long a background checkpoint blocks training, against a synchronous torch.save of the same state.

A GPT big enough that saving takes a noticeable time (default 8 layers x 512
wide, about 26M parameters: model plus AdamW moments, ~0.3 GB) takes one real
optimizer step, then its full training state is saved repeatedly, alternating
three ways so a busy machine slows all alike:

- plain: `torch.save(state, file)`, the synchronous save a bare loop would do;
- sync: `Checkpointer(background=False)`: the same, fsync'd, hashed, atomic;
- background: `Checkpointer(background=True)`: training blocks only for the
  copy into CPU memory; the write (waited for afterwards, untimed) runs in a thread.

Printed: median seconds of each, and the background blocking time as a
fraction of the plain save (goal <= 0.2) and of the sync checkpoint.

    python3 bench/background_save.py [--layers 8] [--width 512] [--repeats 5] [--threads 1]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._result import result  # noqa: E402
from trainer.checkpoints.checkpoint import Checkpointer  # noqa: E402
from trainer.config import ModelConfig, OptimConfig  # noqa: E402
from trainer.nn.model import GPT  # noqa: E402
from trainer.nn.optim import build_optimizer  # noqa: E402
from trainer.checkpoints.rng import get_rng_state  # noqa: E402

GOAL = 0.2


def training_state(layers: int, width: int) -> tuple[dict, int]:
    """A model and AdamW after one real step, as the checkpoint parts the trainer saves."""
    torch.manual_seed(0)
    cfg = ModelConfig(n_layer=layers, n_head=8, n_embd=width, block_size=64, vocab_size=256)
    model = GPT(cfg)
    opt = build_optimizer(model, OptimConfig(), "cpu")
    x = torch.randint(0, 256, (2, 64))
    model(x, x).loss.backward()
    opt.step()
    state = {"model": model.state_dict(), "optim": opt.state_dict(),
             "state": {"trainer": {"step": 1}, "rng": [get_rng_state()], "config_json": "{}"}}
    return state, model.num_params()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--width", type=int, default=512)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    state, n_params = training_state(args.layers, args.width)
    plain_s, sync_s, bg_block_s, bg_total_s = [], [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        sync = Checkpointer(Path(tmp) / "sync", keep=1, background=False)
        background = Checkpointer(Path(tmp) / "bg", keep=1, background=True)
        for i in range(args.repeats):
            t0 = time.perf_counter()
            torch.save(state, Path(tmp) / "plain.pt")
            plain_s.append(time.perf_counter() - t0)
            sync_s.append(sync.save(i, state))
            bg_block_s.append(background.save(i, state))
            background.wait()
            bg_total_s.append(next(r.total_s for r in background.poll()))
        nbytes = (Path(tmp) / "plain.pt").stat().st_size
    plain, synced, block, total = (statistics.median(v) for v in (plain_s, sync_s, bg_block_s, bg_total_s))
    frac = block / plain
    print(f"{n_params / 1e6:.1f}M parameters, {nbytes / 1e6:.0f} MB of state, {args.repeats} repeats (medians)")
    print(f"plain torch.save:           {plain * 1000:8.1f} ms")
    print(f"sync checkpoint (atomic):   {synced * 1000:8.1f} ms")
    print(f"background save, blocking:  {block * 1000:8.1f} ms   (whole save {total * 1000:.1f} ms)")
    print(f"blocking / plain torch.save: {frac:.3f} (goal <= {GOAL}); blocking / sync checkpoint: {block / synced:.3f}")
    result("background save blocking / torch.save", round(frac, 4), "ratio", f"<= {GOAL}", frac <= GOAL)


if __name__ == "__main__":
    main()
