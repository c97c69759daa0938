"""Tokens per second and MFU of the trainer's model over a few dozen steps on synthetic tokens.

On CUDA: the gpt2-124m shape (configs/gpt2-124m.yaml), bf16 autocast, fused
AdamW, `--compile` for torch.compile. On CPU: configs/tiny-cpu.yaml in float32,
and the output says plainly that it measured the CPU. Tokens are uniform
random ids, so nothing is downloaded and the data path costs nothing: this is
the model and optimizer alone, an upper bound on what the trainer can reach.

MFU = tokens/s x flops-per-token (6N + 12 L T d, trainer.nn.model) / peak, the
peak from trainer/observe/accelerators.py for the device, or `--peak-tflops`. The
CPU has no entry in that table, so its MFU is reported as unknown unless a
peak is given.

    python3 bench/gpu_mfu.py [--steps 30] [--warmup 5] [--compile] [--peak-tflops X] [--config PATH]
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from bench._result import result  # noqa: E402
from trainer.observe.accelerators import mfu, resolve_peak  # noqa: E402
from trainer.config import load_train_config  # noqa: E402
from trainer.nn.model import GPT  # noqa: E402
from trainer.observe.telemetry import device_name  # noqa: E402


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure(config: Path, device: torch.device, steps: int, warmup: int, compile_model: bool,
            batch_size: int | None) -> dict:
    """Train `steps` timed steps (after `warmup` untimed ones) on random tokens; returns the figures."""
    cfg = load_train_config(config)
    mcfg, t = cfg.model, cfg.train
    bs = batch_size or t.batch_size
    torch.manual_seed(0)
    model = GPT(mcfg).to(device)
    fpt = model.flops_per_token()
    cuda = device.type == "cuda"
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.optim.lr, betas=tuple(cfg.optim.betas),
                            weight_decay=cfg.optim.weight_decay, fused=cuda)
    run = torch.compile(model) if compile_model else model
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if cuda else contextlib.nullcontext()
    tokens = torch.randint(0, mcfg.vocab_size, (steps + warmup, bs, mcfg.block_size + 1), device=device)

    def step(i: int) -> None:
        x, y = tokens[i, :, :-1], tokens[i, :, 1:]
        with autocast:
            out = run(x, y)
        out.loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for i in range(warmup):
        step(i)
    _sync(device)
    t0 = time.perf_counter()
    for i in range(warmup, warmup + steps):
        step(i)
    _sync(device)
    elapsed = time.perf_counter() - t0
    tok_s = steps * bs * mcfg.block_size / elapsed
    return {"tokens_per_s": tok_s, "flops_per_token": fpt, "params": model.num_params(),
            "step_ms": elapsed / steps * 1e3, "batch": bs, "context": mcfg.block_size}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=30, help="timed steps")
    ap.add_argument("--warmup", type=int, default=5, help="untimed steps first (compilation, allocator)")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model")
    ap.add_argument("--peak-tflops", type=float, help="the device's dense peak, overriding the table")
    ap.add_argument("--config", type=Path, help="model config (default: gpt2-124m on CUDA, tiny-cpu on CPU)")
    ap.add_argument("--batch-size", type=int, help="sequences a step (default: the config's train.batch_size)")
    args = ap.parse_args()
    cuda = torch.cuda.is_available()
    device = torch.device("cuda", 0) if cuda else torch.device("cpu")
    config = args.config or ROOT / "configs" / ("gpt2-124m.yaml" if cuda else "tiny-cpu.yaml")
    name = device_name(device)
    if not cuda:
        print(f"no CUDA device: measured the CPU ({torch.get_num_threads()} threads), float32, {config.name}")
    fig = measure(config, device, args.steps, args.warmup, args.compile, args.batch_size)
    peak = resolve_peak(name, args.peak_tflops)
    value = mfu(fig["tokens_per_s"], fig["flops_per_token"], peak.tflops)
    print(f"device {name}; {config.name}: {fig['params'] / 1e6:.1f}M parameters, batch {fig['batch']} x "
          f"{fig['context']} tokens, {'bf16 autocast, fused AdamW' if cuda else 'float32, AdamW'}"
          f"{', compiled' if args.compile else ''}")
    print(f"{fig['step_ms']:.1f} ms a step, {fig['tokens_per_s']:,.0f} tokens/s, "
          f"{fig['flops_per_token'] / 1e6:.1f} MFLOP a token -> {fig['tokens_per_s'] * fig['flops_per_token'] / 1e12:.3f} "
          "TFLOP/s achieved")
    if value is None:
        print(peak.problem or "MFU unknown", "(give --peak-tflops to compute it)")
    else:
        print(f"peak {peak.tflops:g} TFLOP/s ({peak.source}) -> MFU {value:.1%}")
    where = "CUDA" if cuda else "CPU"
    result(f"training tokens/s ({where}, {config.stem})", round(fig["tokens_per_s"], 1), "tokens/s", "-", None)
    result(f"MFU ({where}, {config.stem})", round(value, 4) if value is not None else "unknown", "fraction", "-", None)


if __name__ == "__main__":
    main()
