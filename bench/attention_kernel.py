"""The C causal attention against PyTorch's CPU kernel, forward and backward, side by side at several shapes.

For each [B, H, T, hd] (queries, keys and values as views of one QKV
projection output, as the model makes them), the two kernels take turns
over --rounds rounds of --reps forward-and-backward passes each, on one
thread. Printed per shape: the median ms of each and their ratio
(PyTorch's time / the C kernel's; above 1 the C kernel is faster), and
whether trainer/attention.py hands that shape to the C kernel. The shapes
it serves should all be above 1; the ones it leaves to PyTorch show why.

Then the QK-norm fused into the kernel against the QK-norm's own kernel
followed by attention (trainer/attention.py's `qk_norm_attention` against
`qk_norm` then `causal_attention`, both on the C kernels), from the QKV
projection's output to its gradient: alone at the shapes the kernel serves,
and in the model + AdamW step at the peer benchmark's shape, eager and
compiled (--step-rounds rounds of --reps steps, the two models taking turns).

    python3 bench/attention_kernel.py [--rounds 5] [--reps 5] [--step-rounds 8]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._result import result  # noqa: E402
from trainer import native  # noqa: E402
from trainer import model as model_module  # noqa: E402
from trainer.attention import (_NativeCausalAttention, causal_attention, fused_qk_norm_attention,  # noqa: E402
                               native_attention, qk_norm_attention)
from trainer.kernels import qk_norm  # noqa: E402

SHAPES = [(16, 4, 128, 32), (8, 4, 128, 64), (2, 4, 512, 32), (2, 8, 512, 64), (1, 8, 1024, 64), (4, 4, 128, 128)]


def _pass(attend, q, k, v, g) -> None:
    attend(q, k, v).backward(g)


def _separate(qkv: torch.Tensor, q_gain: torch.Tensor, k_gain: torch.Tensor) -> torch.Tensor:
    B, T, C3 = qkv.shape
    H, hd = q_gain.shape
    qk, v = qkv.split((2 * C3 // 3, C3 // 3), dim=2)
    q, k = qk_norm(qk, q_gain, k_gain)
    out = causal_attention(q.transpose(1, 2), k.transpose(1, 2), v.view(B, T, H, hd).transpose(1, 2))
    return out.transpose(1, 2).reshape(B, T, C3 // 3)


def fused(rounds: int, reps: int, step_rounds: int) -> None:
    from bench._step_ab import step_table

    kernels = {"separate": _separate, "fused": lambda *a: qk_norm_attention(*a)[0]}
    print(f"\n{'B, H, T, hd':18s} {'separate ms':>11s} {'fused ms':>8s} {'ratio':>6s}  (QK-norm + attention)")
    for B, H, T, hd in SHAPES:
        g = torch.Generator().manual_seed(0)
        qkv = torch.randn(B, T, 3 * H * hd, generator=g).requires_grad_()
        gains = [torch.ones(H, hd, requires_grad=True) for _ in range(2)]
        if not fused_qk_norm_attention(qkv, gains[0], 0.0):
            continue
        grad = torch.randn(B, T, H * hd, generator=g)
        ms: dict[str, list[float]] = {name: [] for name in kernels}
        for _ in range(rounds):
            for name, attend in kernels.items():
                attend(qkv, *gains).backward(grad)
                t0 = time.perf_counter()
                for _ in range(reps):
                    attend(qkv, *gains).backward(grad)
                ms[name].append((time.perf_counter() - t0) / reps * 1000)
        ratio = statistics.median(a / b for a, b in zip(ms["separate"], ms["fused"]))
        print(f"{str((B, H, T, hd)):18s} {statistics.median(ms['separate']):11.2f} "
              f"{statistics.median(ms['fused']):8.2f} {ratio:6.2f}")
        result(f"QK-norm + attention {B}x{H}x{T}x{hd}: fused vs separate", round(ratio, 2), "ratio", "> 1", ratio > 1)

    if not step_rounds:
        return
    ours = model_module.fused_qk_norm_attention

    def switch(on: bool):
        def set_it() -> None:
            model_module.fused_qk_norm_attention = ours if on else (lambda *a: False)

        return set_it

    step_table(("separate", "fused"), switch, "with the QK-norm fused into attention vs apart", step_rounds, reps)
    model_module.fused_qk_norm_attention = ours


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--step-rounds", type=int, default=8, help="rounds of the step comparison (0: leave it out)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    if native.library() is None:
        print(f"skipped: no C kernels here: {native.unavailable()}")
        result("attention: C vs PyTorch", "skipped", "ratio", "> 1 where served", None)
        return 0
    kernels = {"pytorch": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
               "c": _NativeCausalAttention.apply}
    print(f"{'B, H, T, hd':18s} {'pytorch ms':>11s} {'C ms':>8s} {'ratio':>6s}  served by C")
    for B, H, T, hd in SHAPES:
        g = torch.Generator().manual_seed(0)
        qkv = torch.randn(B, T, 3 * H * hd, generator=g)
        q, k, v = (t.view(B, T, H, hd).transpose(1, 2).requires_grad_() for t in qkv.split(H * hd, dim=2))
        grad = torch.randn(B, H, T, hd, generator=g)
        ms: dict[str, list[float]] = {name: [] for name in kernels}
        for _ in range(args.rounds):
            for name, attend in kernels.items():
                _pass(attend, q, k, v, grad)  # warm the caches and the allocator
                t0 = time.perf_counter()
                for _ in range(args.reps):
                    _pass(attend, q, k, v, grad)
                ms[name].append((time.perf_counter() - t0) / args.reps * 1000)
        ratio = statistics.median(a / b for a, b in zip(ms["pytorch"], ms["c"]))
        served = native_attention(q, k, v, 0.0)
        print(f"{str((B, H, T, hd)):18s} {statistics.median(ms['pytorch']):11.2f} {statistics.median(ms['c']):8.2f} "
              f"{ratio:6.2f}  {'yes' if served else 'no'}")
        result(f"attention {B}x{H}x{T}x{hd}: C vs PyTorch", round(ratio, 2), "ratio",
               "> 1" if served else "-", ratio > 1 if served else None)
    fused(args.rounds, args.reps, args.step_rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
