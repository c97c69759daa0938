"""The loss on the C kernel: mean cross-entropy and z-loss of float32 logits, in one pass, eager and compiled.

`trainer/csrc/cross_entropy.c` takes each row's log-partition once for both
terms and writes the softmax as it goes, which the backward scales row by
row (less the target's share): no exponential is computed twice. It serves
float32 CPU logits of a single-threaded run where the kernels are built, as
the C norms, attention and GELU do (trainer/kernels.py picks the path). In
eager mode an autograd function calls it; under `torch.compile` it is the
operator `logbook::cross_entropy_z`, which inductor leaves alone (its own
log-softmax and backward, at the peer benchmark's shape, took three times
as long).
"""

from __future__ import annotations

import torch

from . import native


def _forward(logits: torch.Tensor, targets: torch.Tensor,
             coef: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(mean cross-entropy, coef * mean log-partition squared, softmax, log-partitions)."""
    n = logits.shape[0]
    p = torch.empty_like(logits, memory_format=torch.contiguous_format)
    lse = logits.new_empty(n)
    ce_sum, z_sum = native.cross_entropy_forward(logits.contiguous(), targets.contiguous(), p, lse)
    ce = torch.tensor(ce_sum / n, dtype=logits.dtype)
    z = torch.tensor(coef * z_sum / n, dtype=logits.dtype)
    return ce, z, p, lse


def _backward(p: torch.Tensor, targets: torch.Tensor, lse: torch.Tensor, coef: float, g_ce: torch.Tensor,
              g_z: torch.Tensor) -> torch.Tensor:
    grad = torch.empty_like(p)
    native.cross_entropy_backward(p, targets.contiguous(), lse, float(g_ce), 2.0 * coef * float(g_z), grad)
    return grad


class _NativeCrossEntropyZ(torch.autograd.Function):
    """The kernel in eager mode: (ce, z), the softmax kept for the backward."""

    @staticmethod
    def forward(ctx, logits: torch.Tensor, targets: torch.Tensor, coef: float):
        ce, z, p, lse = _forward(logits, targets, coef)
        ctx.save_for_backward(p, targets, lse)
        ctx.coef = coef
        return ce, z

    @staticmethod
    def backward(ctx, g_ce: torch.Tensor, g_z: torch.Tensor):
        p, targets, lse = ctx.saved_tensors
        return _backward(p, targets, lse, ctx.coef, g_ce, g_z), None, None


@torch.library.custom_op("logbook::cross_entropy_z", mutates_args=())
def _op(logits: torch.Tensor, targets: torch.Tensor,
        coef: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    return _forward(logits, targets, coef)


@_op.register_fake
def _(logits, targets, coef):
    n = logits.shape[0]
    return (logits.new_empty(()), logits.new_empty(()), torch.empty_like(logits, memory_format=torch.contiguous_format),
            logits.new_empty(n))


@torch.library.custom_op("logbook::cross_entropy_z_backward", mutates_args=())
def _backward_op(p: torch.Tensor, targets: torch.Tensor, lse: torch.Tensor, coef: float, g_ce: torch.Tensor,
                 g_z: torch.Tensor) -> torch.Tensor:
    return _backward(p, targets, lse, coef, g_ce, g_z)


@_backward_op.register_fake
def _(p, targets, lse, coef, g_ce, g_z):
    return torch.empty_like(p)


def _save(ctx, inputs, output) -> None:
    _, targets, coef = inputs
    ctx.save_for_backward(output[2], targets, output[3])
    ctx.coef = coef


def _op_backward(ctx, g_ce, g_z, _g_p, _g_lse):
    p, targets, lse = ctx.saved_tensors
    # An output's gradient is None where nothing used it: a zero then (the graph keeps one shape).
    g_ce = g_ce if g_ce is not None else p.new_zeros(())
    g_z = g_z if g_z is not None else p.new_zeros(())
    return _backward_op(p, targets, lse, ctx.coef, g_ce, g_z), None, None


_op.register_autograd(_op_backward, setup_context=_save)


def cross_entropy_z(logits: torch.Tensor, targets: torch.Tensor, coef: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean cross-entropy, coef * mean log-partition squared) of [n, V] float32 CPU logits, on the C kernel."""
    if torch.compiler.is_compiling():
        ce, z, _, _ = _op(logits, targets, coef)
        return ce, z
    return _NativeCrossEntropyZ.apply(logits, targets, coef)
