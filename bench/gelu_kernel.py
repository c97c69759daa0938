"""The C GELU against PyTorch's: accuracy against the exact value, and time in the compiled and the eager step.

Accuracy: over every pre-activation a float32 model could have that is
not rounded to 0 or x (a dense grid on [-12, 12]), the largest error of
gelu and of its derivative, absolute below 1 and relative above, for each
kernel, against float64's erfc.

Time: the model + AdamW step of the peer benchmark's shape (4 layers, 4
heads, 128 wide, block 128, batch 16), with the MLP's GELU on the C kernel
and on PyTorch's (inductor's code under `torch.compile`), the two models
taking turns over --rounds rounds of --reps steps, one thread. Printed: the
median ms of each and their ratio (PyTorch's time / the C kernel's).

Spread: the training forward (gelu and its derivative) alone on one MLP's
pre-activations drawn wide (sd 20, as a run whose activations have grown
large has some beyond 13) against ordinary ones (sd 1), taking turns: the
figure is wide / ordinary time (goal <= 1.5). Near e^-87 the derivative's
terms were subnormal floats, which the CPU computes many times slower; the
wide ones took 13 times as long.

`--fit` refits the kernel's three polynomials (trainer/csrc/gelu.c) on
Chebyshev points against 40-digit values and prints them as C, with the
errors of their float32 evaluation.

    python3 bench/gelu_kernel.py [--rounds 8] [--reps 5] [--fit]
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._result import result  # noqa: E402
from trainer import activation, native  # noqa: E402


def _exact(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    x = x.double()
    cdf = 0.5 * torch.special.erfc(-x / math.sqrt(2))
    return x * cdf, cdf + x * torch.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)


def _err(got: torch.Tensor, want: torch.Tensor) -> float:
    return ((got.double() - want).abs() / want.abs().clamp(min=1.0)).max().item()


def accuracy() -> None:
    x = torch.linspace(-12, 12, 4_000_001).requires_grad_()
    want_y, want_d = _exact(x.detach())
    ones = torch.ones_like(x)
    y = activation._NativeGELU.apply(x)
    (d,) = torch.autograd.grad(y, x, ones)
    theirs_y, theirs_d = F.gelu(x.detach()), torch.ops.aten.gelu_backward(ones, x.detach())
    print(f"{'max error':10s} {'C':>9s} {'PyTorch':>9s}")
    for name, ours, theirs, want in (("gelu", y, theirs_y, want_y), ("gelu'", d, theirs_d, want_d)):
        e, t = _err(ours, want), _err(theirs, want)
        print(f"{name:10s} {e:9.2e} {t:9.2e}")
        result(f"{name} max error: C vs PyTorch", round(t / e, 2), "ratio", ">= 1", t >= e)


def _switch(native_gelu: bool):
    def switch() -> None:
        activation.native_gelu = _ours if native_gelu else _theirs

    return switch


_ours = activation.native_gelu


def _theirs(x: torch.Tensor) -> bool:
    return False


def timing(rounds: int, reps: int) -> None:
    from bench._step_ab import step_table

    step_table(("PyTorch", "C"), _switch, "with the C GELU vs PyTorch's", rounds, reps)
    activation.native_gelu = _ours


def spread(rounds: int = 30) -> None:
    n = 2048 * 512  # one MLP's pre-activations at the peer benchmark's shape
    g = torch.Generator().manual_seed(0)
    xs = {"ordinary": torch.randn(n, generator=g), "wide": torch.randn(n, generator=g) * 20}
    out, grad = torch.empty(n), torch.empty(n)
    ms: dict[str, list[float]] = {k: [] for k in xs}
    for r in range(rounds):
        for name in (xs if r % 2 else reversed(list(xs))):
            t0 = time.perf_counter()
            native.gelu_forward_grad(xs[name], out, grad)
            ms[name].append((time.perf_counter() - t0) * 1000)
    ratio = statistics.median(w / o for w, o in zip(ms["wide"], ms["ordinary"]))
    print(f"\ngelu and its derivative alone: ordinary {statistics.median(ms['ordinary']):.3f} ms, "
          f"wide {statistics.median(ms['wide']):.3f} ms, wide / ordinary {ratio:.2f}")
    result("gelu and derivative: wide / ordinary pre-activations", round(ratio, 2), "ratio", "<= 1.5", ratio <= 1.5)


def fit() -> None:
    """Least squares on Chebyshev points, in the variables gelu.c evaluates them in; errors of a float32 Horner."""
    import mpmath
    import numpy as np

    mpmath.mp.dps = 40
    f32 = np.float32
    n = 4000
    u = (1 - np.cos(np.linspace(0, np.pi, n))) / 2  # u = z^2 on [0, 1]
    z = np.sqrt(u)

    def t_of(v: float) -> float:  # erf(z) / 2z
        r = mpmath.sqrt(mpmath.mpf(v))
        return float(1 / mpmath.sqrt(mpmath.pi)) if r == 0 else float(mpmath.erf(r) / (2 * r))

    t = np.array([t_of(v) for v in u])
    s = t + np.array([float(mpmath.exp(-mpmath.mpf(v)) / mpmath.sqrt(mpmath.pi)) for v in u])
    c_t = np.polynomial.polynomial.polyfit(u, t, 6, w=np.maximum(z, 1e-3))
    c_s = np.polynomial.polynomial.polyfit(u, s, 7, w=np.maximum(z, 1e-3))
    w = np.cos(np.linspace(0, np.pi, n))  # (|z| - 2.5) / 1.5 on [-1, 1]
    c_e = np.polynomial.polynomial.polyfit(w, [float(mpmath.erfc(2.5 + 1.5 * v)) for v in w], 12)

    def horner(c, x):
        r = np.full_like(x, f32(c[-1]))
        for k in c[-2::-1]:
            r = (r * x + f32(k)).astype(f32)
        return r

    zs = np.linspace(-1, 1, 20001).astype(f32)
    us = (zs * zs).astype(f32)
    xs = (zs * f32(math.sqrt(2))).astype(np.float64)
    want_y = np.array([float(v * mpmath.ncdf(v)) for v in xs])
    want_d = np.array([float(mpmath.ncdf(v) + v * mpmath.npdf(v)) for v in xs])
    got_y = xs.astype(f32) * (f32(0.5) + zs * horner(c_t, us))
    got_d = f32(0.5) + zs * horner(c_s, us)
    zf = np.linspace(1, 4, 20001).astype(f32)
    got_e = horner(c_e, ((zf - f32(2.5)) * f32(1 / 1.5)).astype(f32))
    want_e = np.array([float(mpmath.erfc(float(v))) for v in zf])
    for name, c in (("NEAR_T", c_t), ("NEAR_S", c_s), ("FAR_ERFC", c_e)):
        values = [repr(float(f32(v))) + "f" for v in c]
        rows = [", ".join(values[i:i + 4]) for i in range(0, len(values), 4)]
        print(f"static const float {name}[] = {{\n    " + ",\n    ".join(rows) + "};")
    print(f"near |z| < 1: gelu off by {np.abs(got_y - want_y).max():.2e}, gelu' by {np.abs(got_d - want_d).max():.2e}; "
          f"far: erfc off by {np.abs(got_e - want_e).max():.2e}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--fit", action="store_true", help="refit the kernel's polynomials and print them")
    args = ap.parse_args()
    if args.fit:
        fit()
        return 0
    from trainer.host_memory import keep_freed_memory

    torch.set_num_threads(1)
    keep_freed_memory()  # as the trainer runs
    if native.library() is None:
        print(f"skipped: no C kernels here: {native.unavailable()}")
        result("gelu: C vs PyTorch", "skipped", "ratio", "> 1", None)
        return 0
    accuracy()
    spread()
    timing(args.rounds, args.reps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
