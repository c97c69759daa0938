"""The model's two hot spots as single passes: RMSNorm (and the QK-norm), and cross-entropy with z-loss.

On a CPU in eager mode, `F.rms_norm` is a chain of about a dozen element-wise
ops forward and backward (PyTorch has a fused kernel on CUDA only; the CPU's
`_fused_rms_norm` is the same chain, forward only, no faster than ours), and
cross-entropy plus a z-loss read the logits twice (`log_softmax`, then
`logsumexp`) and keep two graphs of them for backward. Seventeen norms a step
(two per block, two QK-norms per attention, one final) made the stabilisers
cost about a fifth of the step.

- `rms_norm` and `qk_norm`: one C loop a row forward and one backward
  (trainer/native.py, built once per machine) on a single-threaded CPU run.
  `qk_norm` normalises a layer's query and key heads where they lie inside
  the QKV projection's output and returns them as two tensors, so no
  activation or gradient is copied or concatenated on the way. With more
  threads, or without a C compiler, an autograd function of PyTorch ops
  does it instead: three passes forward, six backward (one a matrix-vector
  product), with the gain's gradient reduced over whichever dimensions it
  was broadcast along (so the per-head QK-norm gains fit too).
- `cross_entropy_z`: one log-sum-exp serves both terms; backward is one
  softmax scaled row by row, minus the targets. Where the C kernels serve,
  compiled or not, `trainer/csrc/cross_entropy.c` does it (trainer/loss.py),
  keeping the softmax from the forward.

The CPU's third hot spot lies outside any one op: the pages under every
step's activations (trainer/host_memory.py).

The kernels fall back to PyTorch's own ops where those are already fused: on CUDA,
under `torch.compile` (inductor fuses the plain ops with their neighbours
better than it traces a custom backward), and for inputs that are not
float32. The QK-norm is the exception: under `torch.compile` on a CPU it
stays on its C kernel, as the operator `logbook::qk_norm` (inductor's code
for it took twice as long, and nothing beside it could fuse with it).
Where the C attention serves, the model does not call `qk_norm` at all:
the attention kernel normalises the heads itself (trainer/attention.py). The
numbers agree with PyTorch's to float32 rounding; a run is bitwise reproducible against itself
on every path, and the path is fixed for a run (its device, dtype and threads).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from . import loss, native


def _fast_path(x: torch.Tensor) -> bool:
    return x.device.type == "cpu" and x.dtype == torch.float32 and not torch.compiler.is_compiling()


def _native_path(*tensors: torch.Tensor) -> bool:
    """The C kernels serve plain float32 CPU tensors of a single-threaded run, where they have been built.

    With more threads PyTorch's ops share the work out and the one-threaded
    loop would lose; a subclass (a DTensor under FSDP) has no plain memory to hand over.
    """
    return all(type(t) in (torch.Tensor, torch.nn.Parameter) for t in tensors) and kernels_ready()


def norm_kernels(device_type: str, compiled: bool) -> str:
    """What computes a run's float32 norms: "native", "inductor" (the QK-norm native, on a CPU), or "pytorch" (why).

    Builds the C kernels first if this machine has none yet, so that a run
    pays for the build at its start rather than in its first step.
    """
    if compiled:
        return "inductor, QK-norm native" if device_type == "cpu" and kernels_ready() else "inductor"
    if device_type != "cpu":
        return "pytorch"
    if torch.get_num_threads() != 1:
        return "pytorch (more than one thread)"
    if native.library() is None:
        return f"pytorch ({native.unavailable()})"
    return "native"


class _RMSNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        d = x.shape[-1]
        # One reduction pass: ||x|| / sqrt(d) is the root mean square.
        ms = torch.linalg.vector_norm(x, dim=-1, keepdim=True).square_().div_(d)
        rstd = ms.add_(eps).rsqrt_()
        xhat = x * rstd
        ctx.save_for_backward(xhat, rstd, weight)
        return xhat * weight

    @staticmethod
    def backward(ctx, g: torch.Tensor):
        xhat, rstd, weight = ctx.saved_tensors
        gx = g * xhat
        dw = gx.sum_to_size(weight.shape) if ctx.needs_input_grad[1] else None
        # d/dx of x * rstd: rstd * (g w - xhat * mean(g w xhat)); the mean is a
        # matrix-vector product of g * xhat with the gain, one kernel and no temporary.
        dot = _row_dot(gx, weight).div_(xhat.shape[-1])
        # gx is spent: dx takes its buffer (a fresh one would cost page faults on
        # a CPU), unless the gain's gradient is gx itself (a gain as large as x).
        spent = dw is None or dw.shape != gx.shape
        dx = torch.mul(g, weight, out=gx) if spent else g * weight
        dx.addcmul_(xhat, dot, value=-1.0).mul_(rstd)
        return dx, dw, None


def _row_dot(a: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """sum(a * w, -1, keepdim=True) for a gain `w` broadcast along `a`, as a matmul where its shape allows."""
    if w.dim() == 1:
        return torch.matmul(a, w).unsqueeze(-1)
    if w.shape[-2] == 1:  # a gain per head, shared by every position: [..., 1, d]
        return torch.matmul(a, w.transpose(-1, -2))
    return (a * w).sum(-1, keepdim=True)


class _NativeRMSNorm(torch.autograd.Function):
    """RMSNorm over the last dimension with one gain for every row, on the C kernel."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        rows = x.contiguous().view(1, -1, 1, x.shape[-1])
        w = weight.contiguous()
        y = torch.empty(rows.shape, dtype=rows.dtype)
        rstd = native.forward(rows, w, False, eps, y)
        ctx.save_for_backward(rows, w, rstd)
        return y.view(x.shape)

    @staticmethod
    def backward(ctx, g: torch.Tensor):
        rows, w, rstd = ctx.saved_tensors
        dx = torch.empty(rows.shape, dtype=rows.dtype)
        dw = native.backward(g.contiguous().view(rows.shape), rows, w, False, rstd, dx, ctx.needs_input_grad[1])
        return dx.view(g.shape), dw, None


class _NativeQKNorm(torch.autograd.Function):
    """The query and key heads of a [B, T, 2C] slice of the QKV projection, normalised per head, as (q, k) [B, T, H, hd].

    One pass over both halves, read where they lie (the projection's rows
    hold queries and keys side by side), written as two tensors; the two
    gradients are read back as they arrive: no copy or concatenation of
    activations or their gradients (only of the two gains, a few hundred floats).
    """

    @staticmethod
    def forward(ctx, qk: torch.Tensor, q_gain: torch.Tensor, k_gain: torch.Tensor, eps: float):
        q, k, rstd = _qk_forward(qk, q_gain, k_gain, eps)
        ctx.save_for_backward(qk, q_gain, k_gain, rstd)
        return q, k

    @staticmethod
    def backward(ctx, gq: torch.Tensor, gk: torch.Tensor):
        want = ctx.needs_input_grad[1] or ctx.needs_input_grad[2]
        return (*_qk_backward(gq, gk, *ctx.saved_tensors, want), None)


def _qk_forward(qk: torch.Tensor, q_gain: torch.Tensor, k_gain: torch.Tensor,
                eps: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    B, T, _ = qk.shape
    H, hd = q_gain.shape
    heads = last_contiguous(qk).view(B, T, 2 * H, hd)
    gains = torch.cat((q_gain, k_gain))  # [2H, hd]: a few hundred floats
    q, k = torch.empty(B, T, H, hd, dtype=qk.dtype), torch.empty(B, T, H, hd, dtype=qk.dtype)
    rstd = native.forward(heads, gains, True, eps, (q, k))
    return q, k, rstd


def _qk_backward(gq: torch.Tensor, gk: torch.Tensor, qk: torch.Tensor, q_gain: torch.Tensor, k_gain: torch.Tensor,
                 rstd: torch.Tensor, want_gains: bool) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    B, T, C2 = qk.shape
    H, hd = q_gain.shape
    heads = last_contiguous(qk).view(B, T, 2 * H, hd)
    g = (last_contiguous(gq), last_contiguous(gk))  # transposed is fine, as it is
    dqk = torch.empty(B, T, C2, dtype=qk.dtype)
    dw = native.backward(g, heads, torch.cat((q_gain, k_gain)), True, rstd, dqk.view(heads.shape), want_gains)
    dq_gain, dk_gain = dw.split(H) if dw is not None else (None, None)
    return dqk, dq_gain, dk_gain


def last_contiguous(t: torch.Tensor) -> torch.Tensor:
    """`t`, or a contiguous copy where its last stride is not 1: the C kernels read any other strides."""
    return t if t.stride(-1) == 1 else t.contiguous()


# Under torch.compile the QK-norm stays on the C kernel too, as an operator: inductor's fused code
# for it (a reduction over rows a head wide, then a transpose) took twice as long, and nothing
# beside it could fuse with it (a matrix product before it, attention after it).
@torch.library.custom_op("logbook::qk_norm", mutates_args=())
def _qk_norm_op(qk: torch.Tensor, q_gain: torch.Tensor, k_gain: torch.Tensor,
                eps: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return _qk_forward(qk, q_gain, k_gain, eps)


@_qk_norm_op.register_fake
def _(qk, q_gain, k_gain, eps):
    B, T, _ = qk.shape
    H, hd = q_gain.shape
    return qk.new_empty(B, T, H, hd), qk.new_empty(B, T, H, hd), qk.new_empty(B, T, 2 * H)


@torch.library.custom_op("logbook::qk_norm_backward", mutates_args=())
def _qk_norm_backward_op(gq: torch.Tensor, gk: torch.Tensor, qk: torch.Tensor, q_gain: torch.Tensor,
                         k_gain: torch.Tensor, rstd: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    dqk, dq_gain, dk_gain = _qk_backward(gq, gk, qk, q_gain, k_gain, rstd, True)
    return dqk, dq_gain.clone(), dk_gain.clone()  # an operator's outputs may not share memory


@_qk_norm_backward_op.register_fake
def _(gq, gk, qk, q_gain, k_gain, rstd):
    return qk.new_empty(qk.shape), q_gain.new_empty(q_gain.shape), k_gain.new_empty(k_gain.shape)


def _qk_norm_save(ctx, inputs, output) -> None:
    qk, q_gain, k_gain, _ = inputs
    ctx.save_for_backward(qk, q_gain, k_gain, output[2])


def _qk_norm_op_backward(ctx, gq: torch.Tensor, gk: torch.Tensor, _g_rstd: torch.Tensor):
    return (*_qk_norm_backward_op(gq, gk, *ctx.saved_tensors), None)


_qk_norm_op.register_autograd(_qk_norm_op_backward, setup_context=_qk_norm_save)


@torch.compiler.assume_constant_result
def kernels_ready() -> bool:
    """One thread and the C kernels built: fixed for a run, so a compiled graph takes it as a constant."""
    return torch.get_num_threads() == 1 and native.library() is not None


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float | None = None) -> torch.Tensor:
    """RMSNorm over the last dimension times `weight` (broadcastable to `x`); eps defaults as nn.RMSNorm's."""
    eps = torch.finfo(x.dtype).eps if eps is None else eps
    if not _fast_path(x) or weight.dtype != torch.float32:
        if weight.dim() > 1:  # a gain per head: nn.RMSNorm's weight must match the last dimension only
            return F.rms_norm(x, (x.shape[-1],), eps=eps) * weight
        return F.rms_norm(x, (x.shape[-1],), weight, eps)
    if weight.dim() == 1 and _native_path(x, weight):
        return _NativeRMSNorm.apply(x, weight, eps)
    return _RMSNorm.apply(x, weight, eps)


def qk_norm(qk: torch.Tensor, q_gain: torch.Tensor, k_gain: torch.Tensor,
            eps: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-head RMSNorm of the queries and keys in `qk` ([B, T, 2C]: query heads, then key heads), as (q, k) [B, T, H, hd].

    `q_gain` and `k_gain` are [H, hd]. Off the C kernels, one norm serves
    both halves (one call, not two) in the projection's own layout, before
    the caller's transpose.
    """
    eps = torch.finfo(qk.dtype).eps if eps is None else eps
    B, T, _ = qk.shape
    H, hd = q_gain.shape
    if _fast_path(qk) and q_gain.dtype == torch.float32 and qk.stride(-1) == 1 and _native_path(qk, q_gain, k_gain):
        return _NativeQKNorm.apply(qk, q_gain, k_gain, eps)
    if (torch.compiler.is_compiling() and qk.device.type == "cpu" and qk.dtype == q_gain.dtype == torch.float32
            and kernels_ready()):
        q, k, _ = _qk_norm_op(qk, q_gain, k_gain, eps)
        return q, k
    gains = torch.cat((q_gain, k_gain))
    q, k = rms_norm(qk.view(B, T, 2 * H, hd), gains, eps).split(H, dim=2)
    return q, k


class _CrossEntropyZ(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits: torch.Tensor, targets: torch.Tensor, coef: float):
        lse = torch.logsumexp(logits, dim=-1)
        picked = logits.gather(1, targets.unsqueeze(1)).squeeze(1)
        ce = (lse - picked).mean()
        z = lse.square().mean().mul_(coef)
        ctx.save_for_backward(logits, targets, lse)
        ctx.coef = coef
        return ce, z

    @staticmethod
    def backward(ctx, g_ce: torch.Tensor, g_z: torch.Tensor):
        logits, targets, lse = ctx.saved_tensors
        n = logits.shape[0]
        # d ce / d logit = (softmax - onehot) / n;  d z / d logit = 2 coef lse softmax / n.
        row = (lse * (2.0 * ctx.coef) * g_z + g_ce).div_(n)
        grad = (logits - lse.unsqueeze(1)).exp_().mul_(row.unsqueeze(1))
        grad.scatter_add_(1, targets.unsqueeze(1), (-g_ce / n).expand(n, 1).contiguous())
        return grad, None, None


def cross_entropy_z(logits: torch.Tensor, targets: torch.Tensor, z_coef: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean cross-entropy, z_coef * mean log-partition squared) of 2-D float32 logits against class ids."""
    if (logits.device.type == "cpu" and logits.dtype == torch.float32 and targets.dtype == torch.int64
            and _native_path(logits, targets)):
        return loss.cross_entropy_z(logits, targets, float(z_coef))  # the C kernel, compiled or not
    if not _fast_path(logits):
        ce = F.cross_entropy(logits, targets)
        if not z_coef:
            return ce, torch.zeros((), device=ce.device)
        return ce, z_coef * torch.logsumexp(logits, dim=-1).square().mean()
    return _CrossEntropyZ.apply(logits, targets, float(z_coef))
