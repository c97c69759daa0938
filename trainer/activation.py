"""The MLP's GELU: the C kernel on a single-threaded CPU run, PyTorch's everywhere else.

PyTorch's GELU (the exact one, through the error function) costs a
division and an exponential an element forward and a second exponential
backward; on one core, inductor's code for it was about a sixteenth of a
small model's step, and its backward took four times as long as an
element-wise op that reads and writes as much. `trainer/csrc/gelu.c`
(trainer/native.py) computes both from a polynomial each where nearly every
pre-activation lies, and agrees with the exact value more closely than
PyTorch does (`python3 bench/gelu_kernel.py` measures both).

It serves float32 on the CPU with one thread where the kernels are built,
as the C norms and attention do. Under `torch.compile` it is the operator
`logbook::gelu`, which inductor leaves alone; its backward writes the
input's gradient over the output's, a buffer the compiled graph made and
no one else reads (inductor copies it first where someone does). In eager
mode the backward writes a fresh tensor: autograd's gradients are not ours
to overwrite. Which path runs is fixed for a run by its device, dtype and threads.
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


class _NativeGELU(torch.autograd.Function):
    """The kernel in eager mode."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        ctx.save_for_backward(x)
        return _forward(x)

    @staticmethod
    def backward(ctx, g: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        g = g.contiguous()
        dx = torch.empty_like(x)
        native.gelu_backward(g, x, dx)
        return dx


@torch.library.custom_op("logbook::gelu", mutates_args=())
def _gelu_op(x: torch.Tensor) -> torch.Tensor:
    return _forward(x.contiguous())


@_gelu_op.register_fake
def _(x):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@torch.library.custom_op("logbook::gelu_backward_", mutates_args=("g",))
def _gelu_backward_op(g: torch.Tensor, x: torch.Tensor) -> None:
    native.gelu_backward(g, x.contiguous(), g)


@_gelu_backward_op.register_fake
def _(g, x):
    return None


def _save(ctx, inputs, output) -> None:
    ctx.save_for_backward(inputs[0])


def _op_backward(ctx, g: torch.Tensor) -> torch.Tensor:
    # A fresh contiguous buffer where g is not one (or outside a compiled graph, where g is autograd's).
    dx = g.contiguous() if torch.compiler.is_compiling() else g.clone(memory_format=torch.contiguous_format)
    _gelu_backward_op(dx, ctx.saved_tensors[0])
    return dx


_gelu_op.register_autograd(_op_backward, setup_context=_save)


def native_gelu(x: torch.Tensor) -> bool:
    """Whether the C kernel serves this tensor."""
    return x.device.type == "cpu" and x.dtype == torch.float32 and _native_path(x)


def gelu_kernel(device_type: str, dtype: str) -> str:
    """What computes a run's GELU, as `run_started` records it: "native" (the C kernel) or "pytorch"."""
    return "native" if device_type == "cpu" and dtype == "float32" and kernels_ready() else "pytorch"


def gelu(x: torch.Tensor) -> torch.Tensor:
    """The exact GELU, x * Phi(x), of any tensor."""
    if native_gelu(x):
        if torch.compiler.is_compiling():
            return _gelu_op(x)
        return _NativeGELU.apply(x)
    return F.gelu(x)
