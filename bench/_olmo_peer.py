"""OLMo-core's transformer trained at a given shape, run by `bench/peers.py` in OLMo-core's own environment.

Not imported by anything in this repository: `peers.py` runs it with the
Python of a virtual environment where `ai2-olmo-core` is installed. The model
is OLMo-core's OLMo 2 block (reordered RMSNorm, QK-norm, SwiGLU with the
hidden size that gives the same parameter count as a 4x MLP) with its own
z-loss in the LM head; AdamW and gradient clipping as the other contenders.
Prints one `STEP_MS <ms>` line per step, timed after the loss is read back.

    python _olmo_peer.py --data train.npy --steps 60 [--compile] --layers 4 --heads 4 --width 128 --block 128 --batch 16
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch


def build(args: argparse.Namespace) -> torch.nn.Module:
    from olmo_core.nn.transformer import TransformerBlockType, TransformerConfig

    cfg = TransformerConfig.llama_like(
        d_model=args.width, vocab_size=256, n_layers=args.layers, n_heads=args.heads, qk_norm=True,
        block_name=TransformerBlockType.reordered_norm, layer_norm_eps=1e-6, hidden_size_multiple_of=1,
    )
    model = cfg.build(init_device="cpu")
    model.init_weights(device=torch.device("cpu"))
    return model


def main() -> None:
    ap = argparse.ArgumentParser()
    for name, default in (("steps", 60), ("layers", 4), ("heads", 4), ("width", 128), ("block", 128), ("batch", 16)):
        ap.add_argument(f"--{name}", type=int, default=default)
    ap.add_argument("--data", required=True)
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--z-loss", type=float, default=1e-4)
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(1337)
    data = np.load(args.data, mmap_mode="r")
    model = build(args)
    if args.compile:
        model.apply_compile()  # OLMo-core's own: torch.compile per block
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.95), weight_decay=0.1)
    rng = np.random.default_rng(1337)
    print(f"PARAMS {sum(p.numel() for p in model.parameters())}", flush=True)
    for _ in range(args.steps):
        t0 = time.perf_counter()
        ix = rng.integers(0, len(data) - args.block - 1, args.batch)
        chunk = np.stack([data[i : i + args.block + 1] for i in ix]).astype(np.int64)
        x, y = torch.from_numpy(chunk[:, :-1]), torch.from_numpy(chunk[:, 1:])
        out = model(x, labels=y, z_loss_multiplier=args.z_loss)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss = out.loss.item()
        print(f"STEP_MS {(time.perf_counter() - t0) * 1000:.3f} loss {loss:.4f}", flush=True)


if __name__ == "__main__":
    main()
