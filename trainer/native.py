"""The CPU's C kernels: RMSNorm, causal attention and GELU, built once per machine by its C compiler.

PyTorch fuses RMSNorm on CUDA only. On a CPU in eager mode it is a chain
of element-wise ops, each a pass over memory, and the QK-norm's rows are
only a head wide (32 floats at the small shapes), where every pass costs
more than its arithmetic. `trainer/csrc/rms_norm.c` does a row at a time:
the row stays in the cache between its sum of squares and its output, and
it reads strided rows where they lie (the query heads inside the fused
QKV projection, a gradient that comes back transposed from attention).

PyTorch's CPU attention (the FlashAttention kernel of
`scaled_dot_product_attention`) splits a head into blocks that suit long
sequences and large heads; at a small model's heads (T = 128, hd = 32) it
spends most of its time around its matrix products rather than in them.
`trainer/csrc/attention.c` does a head whole while it sits in the cache, a
few query rows at a time against a few column chunks at once: about 1.6x
faster forward and backward at those shapes (trainer/attention.py). It
can take the QK-norm in too, with the norm's row arithmetic that
`trainer/csrc/norm.h` shares with the RMSNorm loops.

`trainer/csrc/gelu.c` computes the MLP's GELU (the error function's) and
its gradient from one polynomial each where nearly every pre-activation
lies, instead of PyTorch's division and exponentials (trainer/activation.py).
`trainer/csrc/cross_entropy.c` computes the loss, cross-entropy and z-loss
from one log-partition a row, and keeps the softmax for the backward
(trainer/loss.py).

`library()` compiles the files with the system's C compiler (`$CC`, else
cc, gcc or clang) for this CPU (`-O3 -march=native`) into a cache folder,
once: the file is named after a hash of the sources (the headers they
include, trainer/csrc/vec.h and norm.h, among them), the compiler's
version, the flags and the CPU's feature flags, so a changed source,
compiler or CPU (a home folder shared by the nodes of a cluster) gets its
own build. It is written under a temporary name and renamed into place, so
ranks that build at once never load half a file. The folder is
`$LOGBOOK_KERNEL_CACHE`, else `$XDG_CACHE_HOME/logbook/kernels`, else
`~/.cache/logbook/kernels`. Without a compiler, or when a build fails,
`library()` is None, `unavailable()` says why, and trainer/kernels.py uses
PyTorch's own ops: slower, not wrong.

Every tensor handed in is float32 on the CPU, four dimensions `[n0, n1,
n2, d]` with its last one contiguous (GELU's: contiguous, of any shape);
the callers in trainer/kernels.py, trainer/attention.py and
trainer/activation.py see to that. A norm's output or gradient may also
be a pair of such tensors, split along the heads (dimension 2): the
queries' and the keys'.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import torch

SOURCES = tuple(Path(__file__).with_name("csrc") / name
                for name in ("rms_norm.c", "attention.c", "gelu.c", "cross_entropy.c"))
HEADERS = tuple(Path(__file__).with_name("csrc") / name for name in ("vec.h", "norm.h"))
"""Included by the sources: part of what names a build, though not compiled on their own."""
FLAGS = ("-O3", "-march=native", "-shared", "-fPIC")


class _Part(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("s0", ctypes.c_int64), ("s1", ctypes.c_int64), ("s2", ctypes.c_int64)]


class _Rows(ctypes.Structure):
    _fields_ = [("part", _Part * 2), ("split", ctypes.c_int64)]


class _Heads(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("s0", ctypes.c_int64), ("s1", ctypes.c_int64), ("s2", ctypes.c_int64)]


class _Shape(ctypes.Structure):
    _fields_ = [("n0", ctypes.c_int64), ("n1", ctypes.c_int64), ("n2", ctypes.c_int64), ("d", ctypes.c_int64)]


_why_not: str | None = None


def unavailable() -> str | None:
    """Why the C kernels are not in use (None: they are, or have not been asked for yet)."""
    return _why_not


def cache_dir() -> Path:
    """Where built kernels are kept (see the module's docstring)."""
    if os.environ.get("LOGBOOK_KERNEL_CACHE"):
        return Path(os.environ["LOGBOOK_KERNEL_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "logbook" / "kernels"


@functools.cache
def library() -> ctypes.CDLL | None:
    """The built kernels, building them first if this machine has none yet; None when they cannot be had."""
    global _why_not
    compiler = _compiler()
    if compiler is None:
        _why_not = "no C compiler (set CC, or install cc, gcc or clang)"
        return None
    try:
        version = subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=30).stdout
        sources = [path.read_bytes() for path in (*SOURCES, *HEADERS)]
    except (OSError, subprocess.SubprocessError) as e:
        _why_not = f"cannot use {compiler}: {e}"
        return None
    key = hashlib.sha256(b"\0".join([*sources, version.encode(), " ".join(FLAGS).encode(), _cpu_flags()])).hexdigest()
    path = cache_dir() / f"kernels-{key[:24]}.so"
    try:
        if not path.exists():
            _build(compiler, path)
        lib = ctypes.CDLL(str(path))
    except (OSError, subprocess.SubprocessError) as e:
        _why_not = f"building the C kernels failed: {str(e)[-500:]}"
        return None
    rows, shape, f32p = ctypes.POINTER(_Rows), ctypes.POINTER(_Shape), ctypes.c_void_p
    lib.lb_rms_norm_forward.argtypes = [rows, f32p, ctypes.c_int64, rows, f32p, shape, ctypes.c_float]
    lib.lb_rms_norm_forward.restype = None
    lib.lb_rms_norm_backward.argtypes = [rows, rows, f32p, ctypes.c_int64, f32p, rows, f32p, shape]
    lib.lb_rms_norm_backward.restype = ctypes.c_int
    heads, sizes = ctypes.POINTER(_Heads), [ctypes.c_int64] * 4
    norm = [f32p, ctypes.c_float, f32p]  # the fused QK-norm's gains and eps, and an output (NULL: none)
    lib.lb_attention_forward.argtypes = [heads, heads, heads, heads, f32p, *sizes, ctypes.c_float, *norm]
    lib.lb_attention_forward.restype = ctypes.c_int
    lib.lb_attention_backward.argtypes = [heads] * 5 + [f32p] + [heads] * 3 + [*sizes, ctypes.c_float, *norm]
    lib.lb_attention_backward.restype = ctypes.c_int
    lib.lb_gelu_forward.argtypes = [f32p, f32p, ctypes.c_int64]
    lib.lb_gelu_forward.restype = None
    lib.lb_gelu_forward_grad.argtypes = [f32p, f32p, f32p, ctypes.c_int64]
    lib.lb_gelu_forward_grad.restype = None
    i64p = ctypes.c_void_p
    lib.lb_cross_entropy_forward.argtypes = [f32p, i64p, ctypes.c_int64, ctypes.c_int64, f32p, f32p, ctypes.c_void_p]
    lib.lb_cross_entropy_forward.restype = ctypes.c_int
    lib.lb_cross_entropy_backward.argtypes = [f32p, i64p, f32p, ctypes.c_int64, ctypes.c_int64, ctypes.c_float,
                                              ctypes.c_float, f32p]
    lib.lb_cross_entropy_backward.restype = None
    _why_not = None
    return lib


def _compiler() -> str | None:
    found = (shutil.which(name) for name in (os.environ.get("CC"), "cc", "gcc", "clang") if name)
    return next((path for path in found if path), None)


def _cpu_flags() -> bytes:
    """The CPU's feature flags (what -march=native compiles for), as the kernel names them."""
    try:
        with open("/proc/cpuinfo", "rb") as f:
            for line in f:
                if line.startswith((b"flags", b"Features")):
                    return line
    except OSError:
        pass
    import platform

    return f"{platform.machine()} {platform.processor()}".encode()


def _build(compiler: str, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".build-", suffix=".so")
    os.close(fd)
    try:
        out = subprocess.run([compiler, *FLAGS, "-o", tmp, *map(str, SOURCES), "-lm"], capture_output=True,
                             text=True, timeout=120)
        if out.returncode != 0:
            raise OSError(out.stderr.strip() or f"{compiler} exited {out.returncode}")
        os.replace(tmp, path)  # whole or not at all, for every process that loads it
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


Rows = torch.Tensor | tuple[torch.Tensor, torch.Tensor]
"""A [n0, n1, n2, d] tensor, or two that split it along dimension 2."""


def _rows(t: Rows) -> _Rows:
    first, second = t if isinstance(t, tuple) else (t, t)
    parts = [_Part(p.data_ptr(), *p.stride()[:3]) for p in (first, second)]
    return _Rows((_Part * 2)(*parts), first.shape[2])


def forward(x: torch.Tensor, w: torch.Tensor, per_head: bool, eps: float, out: Rows) -> torch.Tensor:
    """Write x * rstd * w into `out` and return rstd per row; x: [n0, n1, n2, d], w: [d], or [n2, d] per head."""
    rstd = torch.empty(x.shape[:3], dtype=x.dtype)
    library().lb_rms_norm_forward(_rows(x), w.data_ptr(), x.shape[3] if per_head else 0, _rows(out), rstd.data_ptr(),
                                  _Shape(*x.shape), eps)
    return rstd


def backward(g: Rows, x: torch.Tensor, w: torch.Tensor, per_head: bool, rstd: torch.Tensor, dx: torch.Tensor,
             want_dw: bool) -> torch.Tensor | None:
    """Write the input's gradient into `dx` (any strides, last one 1); return the gain's gradient (shaped as w) if wanted."""
    dw = torch.empty(w.shape, dtype=w.dtype) if want_dw else None
    status = library().lb_rms_norm_backward(_rows(g), _rows(x), w.data_ptr(), x.shape[3] if per_head else 0,
                                            rstd.data_ptr(), _rows(dx), dw.data_ptr() if dw is not None else None,
                                            _Shape(*x.shape))
    if status != 0:
        raise MemoryError("rms_norm backward: no memory for its buffers")
    return dw


def _heads(t: torch.Tensor) -> _Heads:
    return _Heads(t.data_ptr(), *t.stride()[:3])


def attention_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, out: torch.Tensor,
                      gains: torch.Tensor | None = None, eps: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Write causal softmax(q k^T * scale) v into `out`; return the log-sum-exp per row and each head's largest logit.

    All [B, H, T, hd]; the largest logits are [B, H]. With `gains` ([2H, hd],
    contiguous: the queries' heads, then the keys'), q and k are RMS-normalised
    per head with them first (the fused QK-norm).
    """
    B, H, T, hd = q.shape
    lse, head_max = torch.empty(B, H, T, dtype=q.dtype), torch.empty(B, H, dtype=q.dtype)
    if library().lb_attention_forward(_heads(q), _heads(k), _heads(v), _heads(out), lse.data_ptr(), B, H, T, hd, scale,
                                      _ptr(gains), eps, head_max.data_ptr()):
        raise MemoryError("attention forward: no memory for its buffers")
    return lse, head_max


def attention_backward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, g: torch.Tensor,
                       lse: torch.Tensor, scale: float, dq: torch.Tensor, dk: torch.Tensor, dv: torch.Tensor,
                       gains: torch.Tensor | None = None, eps: float = 0.0) -> torch.Tensor | None:
    """Write the gradients of q, k and v into dq, dk and dv, given the output's gradient g.

    With `gains` (the forward's), q and k are the norm's inputs and get their
    gradients through it; the gains' gradient is returned, [2H, hd].
    """
    B, H, T, hd = q.shape
    dgains = torch.empty(gains.shape, dtype=gains.dtype) if gains is not None else None
    status = library().lb_attention_backward(_heads(q), _heads(k), _heads(v), _heads(out), _heads(g), lse.data_ptr(),
                                             _heads(dq), _heads(dk), _heads(dv), B, H, T, hd, scale, _ptr(gains), eps,
                                             _ptr(dgains))
    if status:
        raise MemoryError("attention backward: no memory for its buffers")
    return dgains


def _ptr(t: torch.Tensor | None) -> int | None:
    return t.data_ptr() if t is not None else None


def gelu_forward(x: torch.Tensor, out: torch.Tensor) -> None:
    """Write gelu(x) into `out`; both contiguous float32 of one size."""
    library().lb_gelu_forward(x.data_ptr(), out.data_ptr(), x.numel())


def gelu_forward_grad(x: torch.Tensor, out: torch.Tensor, grad: torch.Tensor) -> None:
    """Write gelu(x) into `out` and gelu'(x) into `grad`; all contiguous float32 of one size."""
    library().lb_gelu_forward_grad(x.data_ptr(), out.data_ptr(), grad.data_ptr(), x.numel())


def cross_entropy_forward(logits: torch.Tensor, targets: torch.Tensor, p: torch.Tensor,
                          lse: torch.Tensor) -> tuple[float, float]:
    """Write the softmax of [n, V] logits into `p` and each row's log-partition into `lse`.

    Returns (sum over rows of lse - logit at the target, sum of lse squared).
    Logits contiguous float32, targets contiguous int64 [n].
    """
    sums = torch.empty(2, dtype=torch.float64)
    n, V = logits.shape
    if library().lb_cross_entropy_forward(logits.data_ptr(), targets.data_ptr(), n, V, p.data_ptr(), lse.data_ptr(),
                                          sums.data_ptr()):
        raise ValueError(f"cross-entropy: a target outside the vocabulary [0, {V})")
    ce, zz = sums.tolist()
    return ce, zz


def cross_entropy_backward(p: torch.Tensor, targets: torch.Tensor, lse: torch.Tensor, g_ce: float, g_zc: float,
                           grad: torch.Tensor) -> None:
    """Write the logits' gradient into `grad`: p * (g_ce + g_zc * lse) / n per row, less g_ce / n at the target."""
    n, V = p.shape
    library().lb_cross_entropy_backward(p.data_ptr(), targets.data_ptr(), lse.data_ptr(), n, V, g_ce, g_zc,
                                        grad.data_ptr())
