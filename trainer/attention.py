"""Causal self-attention: the C kernel on a single-threaded CPU run, `scaled_dot_product_attention` elsewhere.

At a small model's shapes (T = 128, hd = 32, the tiny CPU configs) PyTorch's
CPU FlashAttention kernel was a fifth of the step, at 30-45 GFLOP/s where
the step's matrix products reach 150: its blocks are too small to pay. `trainer/csrc/attention.c` (trainer/native.py)
does each head whole in the cache and recomputes the probabilities in
backward from the saved log-sum-exp, as FlashAttention does, so nothing of
size T x T is kept.

It serves float32 on the CPU with one thread where the kernels are built,
as the C norms do (and under `torch.compile` too, as an operator inductor
leaves alone), at the shapes where it is the faster of the two: heads 16,
32, 48 or 64 floats wide, sequences up to 512 (at 1,024, or with heads 128
wide, PyTorch's blocks win), and no attention dropout. Everything else goes
to PyTorch's kernel. Both are exact softmax attention and agree to float32
rounding; each is bitwise reproducible against itself, and which one runs
is fixed for a run by its config, device and threads.

With QK-norm (the model's default) the kernel takes the norm in as well:
`qk_norm_attention` hands it the QKV projection's output and the per-head
gains, and it normalises each head's queries and keys in its scratch,
reading the projection in memory order. The normalised heads are never
written out, backward computes them again and takes the norm's backward
there, and the projection's gradient comes back as one tensor. That saves
the QK-norm's two passes, backward's concatenation and the normalised
heads' memory: 2-3% of an eager step and 1-4% of a compiled one at the
peer benchmark's shape (`python3 bench/attention_kernel.py`). Each head's
largest logit, which QK-clip watches, falls out of its softmax.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from . import native
from .kernels import _native_path, kernels_ready, last_contiguous

MAX_T = 512
"""The longest sequence the C kernel serves (`python3 bench/attention_kernel.py` measures where it stops paying)."""


class _NativeCausalAttention(torch.autograd.Function):
    """The kernel in eager mode: an autograd function costs a few microseconds less a call than the op below."""

    @staticmethod
    def forward(ctx, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        out, lse = _forward(q, k, v)
        ctx.save_for_backward(q, k, v, out, lse)
        return out

    @staticmethod
    def backward(ctx, g: torch.Tensor):
        return _backward(*ctx.saved_tensors[:4], g, ctx.saved_tensors[4])


def _forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    B, H, T, hd = q.shape
    # Laid out as [B, T, H, hd]: the caller's transpose back to the model's
    # layout is then a view, and the output projection reads it without a copy.
    out = torch.empty(B, T, H, hd, dtype=q.dtype).transpose(1, 2)
    lse, _ = native.attention_forward(*map(last_contiguous, (q, k, v)), 1.0 / math.sqrt(hd), out)
    return out, lse


def _backward(q, k, v, out, g, lse) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    B, H, T, hd = q.shape
    dq, dk, dv = (torch.empty(B, T, H, hd, dtype=q.dtype).transpose(1, 2) for _ in range(3))
    native.attention_backward(*map(last_contiguous, (q, k, v, out, g)), lse, 1.0 / math.sqrt(hd), dq, dk, dv)
    return dq, dk, dv


# Under torch.compile the kernel is an opaque operator: inductor leaves it as it
# is, and a saved graph (trainer/precompile.py) refers to it by name.
@torch.library.custom_op("logbook::causal_attention", mutates_args=())
def _attention_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return _forward(q, k, v)


@_attention_op.register_fake
def _(q, k, v):
    B, H, T, hd = q.shape
    return q.new_empty(B, T, H, hd).transpose(1, 2), q.new_empty(B, H, T)


@torch.library.custom_op("logbook::causal_attention_backward", mutates_args=())
def _attention_backward_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, g: torch.Tensor,
                           lse: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return _backward(q, k, v, out, g, lse)


@_attention_backward_op.register_fake
def _(q, k, v, out, g, lse):
    B, H, T, hd = q.shape
    return tuple(q.new_empty(B, T, H, hd).transpose(1, 2) for _ in range(3))


def _save(ctx, inputs, output) -> None:
    ctx.save_for_backward(*inputs, *output)


def _op_backward(ctx, g: torch.Tensor, _g_lse: torch.Tensor):
    q, k, v, out, lse = ctx.saved_tensors
    return _attention_backward_op(q, k, v, out, g, lse)


_attention_op.register_autograd(_op_backward, setup_context=_save)


def native_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout_p: float) -> bool:
    """Whether the C kernel serves these [B, H, T, hd] queries, keys and values."""
    return (q.shape == k.shape == v.shape and all(t.dtype == torch.float32 for t in (q, k, v))
            and _serves(q.device.type, q.shape[-1], q.shape[-2], dropout_p) and _native_path(q, k, v))


def _serves(device_type: str, head_dim: int, T: int, dropout_p: float) -> bool:
    return device_type == "cpu" and head_dim % 16 == 0 and head_dim <= 64 and T <= MAX_T and not dropout_p


def attention_kernel(device_type: str, dtype: str, head_dim: int, block_size: int, dropout: float) -> str:
    """What computes a run's attention, as `run_started` records it: "native" (the C kernel) or "pytorch"."""
    ready = dtype == "float32" and _serves(device_type, head_dim, block_size, dropout) and kernels_ready()
    return "native" if ready else "pytorch"


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout_p: float = 0.0) -> torch.Tensor:
    """softmax(q k^T / sqrt(hd), causal) v for [B, H, T, hd] tensors, with dropout on the weights if dropout_p."""
    if native_attention(q, k, v, dropout_p):
        if torch.compiler.is_compiling():
            return _attention_op(q, k, v)[0]
        return _NativeCausalAttention.apply(q, k, v)
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=dropout_p)


# --- attention with the QK-norm fused in ---------------------------------------------


class _NativeQKNormAttention(torch.autograd.Function):
    """The fused kernel in eager mode: (y [B, T, C], each head's largest logit [B, H]) from the QKV projection."""

    @staticmethod
    def forward(ctx, qkv: torch.Tensor, q_gain: torch.Tensor, k_gain: torch.Tensor, eps: float):
        y, lse, head_max = _fused_forward(qkv, q_gain, k_gain, eps)
        ctx.save_for_backward(qkv, q_gain, k_gain, y, lse)
        ctx.eps = eps
        ctx.mark_non_differentiable(head_max)
        return y, head_max

    @staticmethod
    def backward(ctx, g: torch.Tensor, _g_max: torch.Tensor):
        return (*_fused_backward(*ctx.saved_tensors, g, ctx.eps), None)


def _qkv_heads(qkv: torch.Tensor, H: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The query, key and value heads of a [B, T, 3C] projection, as [B, H, T, hd] views where they lie."""
    B, T, C3 = qkv.shape
    return tuple(t.transpose(1, 2) for t in qkv.view(B, T, 3, H, C3 // (3 * H)).unbind(2))


def _fused_forward(qkv: torch.Tensor, q_gain: torch.Tensor, k_gain: torch.Tensor,
                   eps: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    B, T, C3 = qkv.shape
    H, hd = q_gain.shape
    y = torch.empty(B, T, C3 // 3, dtype=qkv.dtype)
    q, k, v = _qkv_heads(qkv.contiguous(), H)
    lse, head_max = native.attention_forward(q, k, v, 1.0 / math.sqrt(hd), y.view(B, T, H, hd).transpose(1, 2),
                                             torch.cat((q_gain, k_gain)), eps)
    return y, lse, head_max


def _fused_backward(qkv: torch.Tensor, q_gain: torch.Tensor, k_gain: torch.Tensor, y: torch.Tensor, lse: torch.Tensor,
                    g: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    B, T, C3 = qkv.shape
    H, hd = q_gain.shape
    dqkv = torch.empty(B, T, C3, dtype=qkv.dtype)
    out, grad = (t.contiguous().view(B, T, H, hd).transpose(1, 2) for t in (y, g))
    dgains = native.attention_backward(*_qkv_heads(qkv.contiguous(), H), out, grad, lse, 1.0 / math.sqrt(hd),
                                       *_qkv_heads(dqkv, H), torch.cat((q_gain, k_gain)), eps)
    dq_gain, dk_gain = dgains.split(H)
    return dqkv, dq_gain, dk_gain


@torch.library.custom_op("logbook::qk_norm_attention", mutates_args=())
def _fused_op(qkv: torch.Tensor, q_gain: torch.Tensor, k_gain: torch.Tensor,
              eps: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return _fused_forward(qkv, q_gain, k_gain, eps)


@_fused_op.register_fake
def _(qkv, q_gain, k_gain, eps):
    B, T, C3 = qkv.shape
    H = q_gain.shape[0]
    return qkv.new_empty(B, T, C3 // 3), qkv.new_empty(B, H, T), qkv.new_empty(B, H)


@torch.library.custom_op("logbook::qk_norm_attention_backward", mutates_args=())
def _fused_backward_op(qkv: torch.Tensor, q_gain: torch.Tensor, k_gain: torch.Tensor, y: torch.Tensor,
                       lse: torch.Tensor, g: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    dqkv, dq_gain, dk_gain = _fused_backward(qkv, q_gain, k_gain, y, lse, g, eps)
    return dqkv, dq_gain.clone(), dk_gain.clone()  # an operator's outputs may not share memory


@_fused_backward_op.register_fake
def _(qkv, q_gain, k_gain, y, lse, g, eps):
    return qkv.new_empty(qkv.shape), q_gain.new_empty(q_gain.shape), k_gain.new_empty(k_gain.shape)


def _fused_save(ctx, inputs, output) -> None:
    qkv, q_gain, k_gain, eps = inputs
    ctx.save_for_backward(qkv, q_gain, k_gain, output[0], output[1])
    ctx.eps = eps


def _fused_op_backward(ctx, g: torch.Tensor, _g_lse: torch.Tensor, _g_max: torch.Tensor):
    return (*_fused_backward_op(*ctx.saved_tensors, g, ctx.eps), None)


_fused_op.register_autograd(_fused_op_backward, setup_context=_fused_save)


def fused_qk_norm_attention(qkv: torch.Tensor, q_gain: torch.Tensor, dropout_p: float) -> bool:
    """Whether the C kernel serves this [B, T, 3C] projection with its QK-norm fused in (gains [H, hd])."""
    return (qkv.dtype == q_gain.dtype == torch.float32 and qkv.stride(-1) == 1
            and _serves(qkv.device.type, q_gain.shape[-1], qkv.shape[1], dropout_p) and _native_path(qkv, q_gain))


def qk_norm_attention(qkv: torch.Tensor, q_gain: torch.Tensor, k_gain: torch.Tensor,
                      eps: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Causal attention of a [B, T, 3C] QKV projection with per-head QK-norm: (y [B, T, C], largest logit per head [B, H]).

    What `qk_norm` then `causal_attention` compute, in one kernel, where
    `fused_qk_norm_attention` says it serves: the normalised queries and keys
    are never written out, and the projection's gradient comes back whole,
    with no concatenation. The largest logits (of q k^T / sqrt(hd), causal)
    come at no cost, for QK-clip.
    """
    eps = torch.finfo(qkv.dtype).eps if eps is None else eps
    if torch.compiler.is_compiling():
        y, _, head_max = _fused_op(qkv, q_gain, k_gain, eps)
        return y, head_max
    return _NativeQKNormAttention.apply(qkv, q_gain, k_gain, eps)
