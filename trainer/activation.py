"""The MLP's GELU: the C kernel on a single-threaded CPU run, PyTorch's everywhere else.

PyTorch's GELU (the exact one, through the error function) costs a
division and an exponential an element forward and a second exponential
backward; on one core, inductor's code for it was about a sixteenth of a
small model's step, and its backward took four times as long as an
element-wise op that reads and writes as much. `trainer/csrc/gelu.c`
(trainer/native.py) computes both from a polynomial each where most
pre-activation lies, and agrees with the exact value more closely than
PyTorch does (`python3 bench/gelu_kernel.py` measures both).

Where a gradient will be wanted, the forward writes gelu'(x) beside
gelu(x), and the backward is one multiply by it. The far lanes' Phi (a
polynomial of 13 terms, and an exponential for the density) is then
computed once a step rather than once forward and again backward, and
what the backward keeps is the derivative in place of the pre-activation.
Once a model has trained a few hundred steps nearly every vector of 16
pre-activations has a lane in the far range, and the backward had become
twice the forward. Without a gradient (evaluation) only gelu(x) is computed.

It serves float32 on the CPU with one thread where the kernels are built,
as the C norms and attention do. Under `torch.compile` it is the operator
`logbook::gelu_and_grad` (`logbook::gelu` without a gradient), which
inductor leaves alone, and the backward's multiply is inductor's. Which
path runs is fixed for a run by its device, dtype and threads.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from . import native
from .kernels import _native_path, kernels_ready


def _forward(x: torch.Tensor) -> torch.Tensor:
    y = torch.empty_like(x)
    native.gelu_forward(x, y)
    return y


def _forward_grad(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    y, d = torch.empty_like(x), torch.empty_like(x)
    native.gelu_forward_grad(x, y, d)
    return y, d


class _NativeGELU(torch.autograd.Function):
    """The kernel in eager mode: the forward keeps gelu'(x) for the backward's one multiply.

    The same work as `logbook::gelu_and_grad` below, which serves compiled graphs; in eager
    mode the operator's own autograd took a tenth longer a call at the peer benchmark's shape
    (its dispatch, and a zero gradient made for the derivative it also returns).
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        y, d = _forward_grad(x.contiguous())
        ctx.save_for_backward(d)
        return y

    @staticmethod
    def backward(ctx, g: torch.Tensor) -> torch.Tensor:
        (d,) = ctx.saved_tensors
        return g * d


@torch.library.custom_op("logbook::gelu", mutates_args=())
def _gelu_op(x: torch.Tensor) -> torch.Tensor:
    return _forward(x.contiguous())


@_gelu_op.register_fake
def _(x):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@torch.library.custom_op("logbook::gelu_and_grad", mutates_args=())
def _gelu_and_grad_op(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return _forward_grad(x.contiguous())


@_gelu_and_grad_op.register_fake
def _(x):
    return (torch.empty_like(x, memory_format=torch.contiguous_format),
            torch.empty_like(x, memory_format=torch.contiguous_format))


def _save(ctx, inputs, output) -> None:
    ctx.save_for_backward(output[1])


def _op_backward(ctx, g: torch.Tensor, _g_of_grad: torch.Tensor | None) -> torch.Tensor:
    # Under compile the multiply is inductor's, which writes where it can (g's buffer, once dead).
    (d,) = ctx.saved_tensors
    return g * d


_gelu_and_grad_op.register_autograd(_op_backward, setup_context=_save)


def native_gelu(x: torch.Tensor) -> bool:
    """Whether the C kernel serves this tensor."""
    return x.device.type == "cpu" and x.dtype == torch.float32 and _native_path(x)


def gelu_kernel(device_type: str, dtype: str) -> str:
    """What computes a run's GELU, as `run_started` records it: "native" (the C kernel) or "pytorch"."""
    return "native" if device_type == "cpu" and dtype == "float32" and kernels_ready() else "pytorch"


def gelu(x: torch.Tensor) -> torch.Tensor:
    """The exact GELU, x * Phi(x), of any tensor."""
    if native_gelu(x):
        if not (x.requires_grad and torch.is_grad_enabled()):
            return _gelu_op(x) if torch.compiler.is_compiling() else _forward(x.contiguous())
        if torch.compiler.is_compiling():
            return _gelu_and_grad_op(x)[0]
        return _NativeGELU.apply(x)
    return F.gelu(x)


# --- the MLP's first projection and its GELU, the GELU written over the product ---------------------
#
# gelu(x @ W^T) as one operator, so that the GELU writes its output into the buffer the matrix product
# has just filled (and left in the cache) rather than into a fresh one: at the peer benchmark's shape
# the MLP's forward took 4% less time. The backward is what autograd does for the two apart:
# dh = g * gelu'(h), then dh @ W and dh^T @ x, in PyTorch's ops (inductor's, compiled).


def _fc_forward(x: torch.Tensor, weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(gelu(x @ weight^T) shaped [..., out], gelu' of the product as [rows, out]); x contiguous."""
    y = x.new_empty(*x.shape[:-1], weight.shape[0])
    h = y.view(-1, weight.shape[0])
    torch.mm(x.view(-1, x.shape[-1]), weight.t(), out=h)
    d = torch.empty_like(h)
    native.gelu_forward_grad(h, h, d)  # in place: each vector is read before it is written
    return y, d


def _fc_backward(x: torch.Tensor, weight: torch.Tensor, d: torch.Tensor, g: torch.Tensor,
                 needs: tuple[bool, ...]) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    dh = g.reshape(d.shape) * d
    dx = torch.mm(dh, weight).view(x.shape) if needs[0] else None
    dw = torch.mm(dh.t(), x.reshape(-1, x.shape[-1])) if needs[1] else None
    return dx, dw


class _NativeFcGELU(torch.autograd.Function):
    """`fc_gelu` in eager mode: the derivative kept for the backward, as `_NativeGELU` keeps it."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y, d = _fc_forward(x, weight)
        ctx.save_for_backward(x, weight, d)
        return y

    @staticmethod
    def backward(ctx, g: torch.Tensor):
        x, weight, d = ctx.saved_tensors
        return _fc_backward(x, weight, d, g, ctx.needs_input_grad)


@torch.library.custom_op("logbook::fc_gelu", mutates_args=())
def _fc_gelu_op(x: torch.Tensor, weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return _fc_forward(x.contiguous(), weight)


@_fc_gelu_op.register_fake
def _(x, weight):
    rows = x.numel() // x.shape[-1]
    return x.new_empty(*x.shape[:-1], weight.shape[0]), x.new_empty(rows, weight.shape[0])


def _fc_save(ctx, inputs, output) -> None:
    x, weight = inputs
    ctx.save_for_backward(x, weight, output[1])


def _fc_op_backward(ctx, g: torch.Tensor, _g_of_grad: torch.Tensor | None):
    x, weight, d = ctx.saved_tensors
    return _fc_backward(x, weight, d, g, ctx.needs_input_grad)


_fc_gelu_op.register_autograd(_fc_op_backward, setup_context=_fc_save)


def fc_gelu(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """gelu(x @ weight^T), the MLP's first projection (no bias) and its activation, for training.

    On the C kernel's path (see `gelu`) with a gradient wanted, one operator whose
    GELU reuses the product's buffer; otherwise `gelu(F.linear(x, weight))`.
    """
    if (native_gelu(x) and weight.dtype == x.dtype and _native_path(weight)
            and torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad)):
        if torch.compiler.is_compiling():
            return _fc_gelu_op(x, weight)[0]
        return _NativeFcGELU.apply(x, weight)
    return gelu(F.linear(x, weight))
