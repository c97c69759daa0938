"""Attention with the QK-norm fused in computes what the two kernels compute apart, to float32 rounding and to the bit."""

from __future__ import annotations

import math

import pytest
import torch

from model_helpers import adamw_losses, c_kernels_one_thread  # noqa: F401 (a fixture)
from trainer.attention import MAX_T, causal_attention, fused_qk_norm_attention, qk_norm_attention
from trainer.config import ModelConfig
from trainer.kernels import qk_norm
from trainer.model import GPT, _max_logit_per_head

pytestmark = pytest.mark.usefixtures("c_kernels_one_thread")


def _inputs(B: int, T: int, H: int, hd: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A QKV projection's output [B, T, 3C] and per-head gains near 1, all wanting gradients."""
    g = torch.Generator().manual_seed(seed)
    qkv = (torch.randn(B, T, 3 * H * hd, generator=g) * 2.0).requires_grad_()
    q_gain, k_gain = ((1 + 0.2 * torch.randn(H, hd, generator=g)).requires_grad_() for _ in range(2))
    return qkv, q_gain, k_gain


def _separate(qkv, q_gain, k_gain, dtype=torch.float32):
    """The QK-norm then attention as the model computes them without the fused kernel (PyTorch's ops in float64)."""
    B, T, C3 = qkv.shape
    H, hd = q_gain.shape
    C = C3 // 3
    qk, v = qkv.split((2 * C, C), dim=2)
    if dtype == torch.float64:
        eps = torch.finfo(torch.float32).eps
        heads = qk.reshape(B, T, 2 * H, hd)
        normed = heads * torch.rsqrt(heads.square().mean(-1, keepdim=True) + eps) * torch.cat((q_gain, k_gain))
        q, k = normed.split(H, dim=2)
    else:
        q, k = qk_norm(qk, q_gain, k_gain)
    q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.reshape(B, T, H, hd).transpose(1, 2)
    if dtype == torch.float64:
        logits = (q @ k.transpose(-1, -2) / math.sqrt(hd)).masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1),
                                                                       -math.inf)
        out = logits.softmax(-1) @ v
    else:
        out = causal_attention(q, k, v)
    return out.transpose(1, 2).reshape(B, T, C), q, k


def _grads(y, inputs, g):
    return torch.autograd.grad(y, inputs, g)


@pytest.mark.parametrize(("B", "T", "H", "hd"), [(2, 128, 4, 32), (3, 37, 2, 16), (2, 70, 2, 64), (1, 200, 3, 48),
                                                  (2, 1, 2, 32), (1, 257, 1, 32)])
def test_the_fused_kernel_is_as_accurate_as_the_separate_kernels(B, T, H, hd):
    qkv, q_gain, k_gain = inputs = _inputs(B, T, H, hd, seed=T + hd)
    assert fused_qk_norm_attention(qkv, q_gain, 0.0)
    y, head_max = qk_norm_attention(qkv, q_gain, k_gain)
    g = torch.randn(y.shape, generator=torch.Generator().manual_seed(1))
    theirs, _, _ = _separate(*inputs)
    exact64 = [t.detach().double().requires_grad_() for t in inputs]
    want, q64, k64 = _separate(*exact64, dtype=torch.float64)
    for got, separate, exact in zip((y, *_grads(y, inputs, g)), (theirs, *_grads(theirs, inputs, g)),
                                    (want, *_grads(want, exact64, g.double()))):
        err, their_err = ((t.double() - exact).abs().max().item() for t in (got, separate))
        assert err <= 2 * their_err + 1e-6, (err, their_err)
        assert err <= 1e-4 * max(1.0, exact.abs().max().item())
    # Each head's largest logit, what QK-clip watches, comes out of the same pass.
    torch.testing.assert_close(head_max.amax(0).double(), _max_logit_per_head(q64.detach(), k64.detach()).double(),
                               rtol=0, atol=1e-5)


def test_the_fused_kernel_gives_the_same_bits_every_time():
    inputs = _inputs(2, 128, 4, 32, seed=0)
    g = torch.randn(2, 128, 128, generator=torch.Generator().manual_seed(1))
    runs = []
    for _ in range(2):
        y, head_max = qk_norm_attention(*inputs)
        runs.append((y, head_max, *_grads(y, inputs, g)))
    assert all(torch.equal(a, b) for a, b in zip(*runs))


def test_without_autograd_the_fused_kernel_still_serves_evaluation():
    inputs = _inputs(2, 40, 2, 32, seed=4)
    with torch.no_grad():
        y, head_max = qk_norm_attention(*inputs)
    assert y.grad_fn is None
    with_grad, grad_max = qk_norm_attention(*inputs)
    assert torch.equal(y, with_grad.detach()) and torch.equal(head_max, grad_max)


def test_a_token_attends_to_itself_and_its_past_only():
    qkv, q_gain, k_gain = (t.detach() for t in _inputs(1, 24, 2, 16, seed=3))
    before, _ = qk_norm_attention(qkv, q_gain, k_gain)
    later = qkv.clone()
    later[:, 12:] += torch.randn(later[:, 12:].shape, generator=torch.Generator().manual_seed(4))
    after, _ = qk_norm_attention(later, q_gain, k_gain)
    assert torch.equal(before[:, :12], after[:, :12]) and not torch.equal(before[:, 12:], after[:, 12:])


def test_a_non_finite_query_reaches_its_heads_output_for_the_guard_to_see():
    qkv, q_gain, k_gain = (t.detach().clone() for t in _inputs(1, 32, 2, 32, seed=6))
    qkv[0, 20, 32 + 3] = float("nan")  # head 1's query at position 20
    y, _ = qk_norm_attention(qkv, q_gain, k_gain)
    assert torch.isnan(y[0, 20, 32:64]).all()
    assert torch.isfinite(y[0, :, :32]).all() and torch.isfinite(y[0, :20]).all()


def test_what_the_fused_kernel_does_not_serve_goes_to_the_separate_kernels():
    qkv, q_gain, _ = _inputs(1, 16, 2, 32, seed=0)
    assert fused_qk_norm_attention(qkv, q_gain, 0.0)
    assert not fused_qk_norm_attention(qkv, q_gain, 0.1)  # dropout on the weights
    assert not fused_qk_norm_attention(*_inputs(1, 16, 2, 24, seed=0)[:2], 0.0)  # heads not a multiple of 16 floats
    assert not fused_qk_norm_attention(*_inputs(1, MAX_T + 1, 1, 32, seed=0)[:2], 0.0)
    assert not fused_qk_norm_attention(qkv.double(), q_gain.double(), 0.0)
    torch.set_num_threads(2)
    assert not fused_qk_norm_attention(qkv, q_gain, 0.0)


def test_a_model_on_the_fused_kernel_trains_like_one_on_the_separate_kernels(monkeypatch):
    cfg = ModelConfig(n_layer=2, n_head=4, n_embd=128, block_size=64, vocab_size=256, qk_norm=True)
    x = torch.randint(0, 256, (4, 64), generator=torch.Generator().manual_seed(0))
    ours = adamw_losses(cfg, x)
    monkeypatch.setattr("trainer.model.fused_qk_norm_attention", lambda *a: False)
    theirs = adamw_losses(cfg, x)
    assert ours[-1] < ours[0] - 0.1  # it learns
    assert ours == pytest.approx(theirs, abs=2e-4)


def test_the_model_reports_the_same_largest_logits_from_the_fused_kernel(monkeypatch):
    cfg = ModelConfig(n_layer=2, n_head=4, n_embd=128, block_size=32, vocab_size=256, qk_norm=True)
    x = torch.randint(0, 256, (3, 32), generator=torch.Generator().manual_seed(0))
    seen = []
    for fused in (True, False):
        if not fused:
            monkeypatch.setattr("trainer.model.fused_qk_norm_attention", lambda *a: False)
        torch.manual_seed(0)
        model = GPT(cfg)
        model.set_max_logit_tracking(True)
        model(x, x)
        seen.append(model.max_logits())
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(*seen))


def test_under_torch_compile_the_fused_kernel_is_one_operator_in_the_graph():
    seen = []

    def record(gm, example_inputs):  # a backend that only looks: the graph runs as traced
        seen.extend(str(n.target) for n in gm.graph.nodes if n.op == "call_function")
        return gm.forward

    inputs = _inputs(2, 32, 2, 32, seed=5)
    y, head_max = torch.compile(qk_norm_attention, backend=record, fullgraph=True)(*inputs)
    assert "logbook.qk_norm_attention.default" in seen
    assert not any("causal_attention" in t or "qk_norm.default" in t for t in seen)
    eager, eager_max = qk_norm_attention(*inputs)
    assert torch.equal(y, eager) and torch.equal(head_max, eager_max)
    g = torch.randn(y.shape, generator=torch.Generator().manual_seed(2))
    assert all(torch.equal(a, b) for a, b in zip(_grads(y, inputs, g), _grads(eager, inputs, g)))
