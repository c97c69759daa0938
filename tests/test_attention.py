"""The C causal attention agrees with PyTorch's, is reproducible to the bit, and steps aside where it does not serve."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from model_helpers import adamw_losses, c_kernels_one_thread  # noqa: F401 (a fixture)
from trainer.attention import MAX_T, _NativeCausalAttention, attention_kernel, causal_attention, native_attention
from trainer.config import ModelConfig


pytestmark = pytest.mark.usefixtures("c_kernels_one_thread")


def _heads(B: int, T: int, H: int, hd: int, seed: int, scale: float = 1.0) -> list[torch.Tensor]:
    """q, k, v as the model makes them: [B, H, T, hd] views of one [B, T, 3C] projection output."""
    g = torch.Generator().manual_seed(seed)
    qkv = torch.randn(B, T, 3 * H * hd, generator=g) * scale
    return [t.view(B, T, H, hd).transpose(1, 2).requires_grad_() for t in qkv.split(H * hd, dim=2)]


def _reference(q, k, v, g):
    """Output and gradients in float64 through PyTorch's attention."""
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    out = F.scaled_dot_product_attention(q64, k64, v64, is_causal=True)
    return out, torch.autograd.grad(out, (q64, k64, v64), g.double())


@pytest.mark.parametrize(("B", "T", "H", "hd"), [(2, 128, 4, 32), (1, 37, 3, 16), (2, 100, 2, 64), (1, 70, 2, 48),
                                                  (1, 33, 1, 16), (3, 1, 2, 32), (1, 257, 2, 32)])
def test_the_c_attention_is_as_accurate_as_pytorchs_in_float32(B, T, H, hd):
    q, k, v = _heads(B, T, H, hd, seed=T + hd, scale=2.0)  # logits of a few units: a peaked softmax
    assert native_attention(q, k, v, 0.0)
    out = _NativeCausalAttention.apply(q, k, v)
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(1))
    grads = torch.autograd.grad(out, (q, k, v), g)
    theirs = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    their_grads = torch.autograd.grad(theirs, (q, k, v), g)
    want, want_grads = _reference(q, k, v, g)
    for got, pytorch, exact in zip((out, *grads), (theirs, *their_grads), (want, *want_grads)):
        err, their_err = ((t.double() - exact).abs().max().item() for t in (got, pytorch))
        assert err <= 2 * their_err + 1e-6, (err, their_err)
        assert err <= 1e-4 * max(1.0, exact.abs().max().item())


def test_the_c_attention_gives_the_same_bits_every_time():
    q, k, v = _heads(2, 128, 4, 32, seed=0)
    g = torch.randn(2, 4, 128, 32, generator=torch.Generator().manual_seed(1))
    runs = [(o := causal_attention(q, k, v), *torch.autograd.grad(o, (q, k, v), g)) for _ in range(2)]
    assert all(torch.equal(a, b) for a, b in zip(*runs))


def test_the_output_is_laid_out_for_the_output_projection():
    q, k, v = _heads(2, 16, 4, 32, seed=0)
    out = causal_attention(q, k, v)
    merged = out.transpose(1, 2)  # [B, T, H, hd], as the model merges the heads
    assert merged.is_contiguous() and merged.view(2, 16, 128).data_ptr() == out.data_ptr()


def test_a_token_attends_to_itself_and_its_past_only():
    q, k, v = (t.detach() for t in _heads(1, 24, 2, 16, seed=3))
    before = causal_attention(q, k, v)
    k2, v2 = k.clone(), v.clone()
    k2[:, :, 12:] += 5.0
    v2[:, :, 12:] -= 3.0  # change every key and value from position 12 on
    after = causal_attention(q, k2, v2)
    assert torch.equal(before[:, :, :12], after[:, :, :12]) and not torch.equal(before[:, :, 12:], after[:, :, 12:])


def test_without_autograd_the_kernel_still_serves_inference():
    q, k, v = _heads(1, 40, 2, 32, seed=4)
    with torch.no_grad():
        out = causal_attention(q, k, v)
    assert out.grad_fn is None
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=True).detach(), rtol=0, atol=1e-6)


def test_what_the_kernel_does_not_serve_goes_to_pytorch():
    q, k, v = _heads(1, 16, 2, 32, seed=0)
    assert not native_attention(q, k, v, 0.1)  # dropout on the weights
    odd = _heads(1, 16, 2, 24, seed=0)
    assert not native_attention(*odd, 0.0)  # heads not a multiple of 16 floats
    assert not native_attention(*_heads(1, 16, 1, 128, seed=0), 0.0)  # wide heads: PyTorch's kernel is faster
    assert not native_attention(*_heads(1, MAX_T + 1, 1, 32, seed=0), 0.0)  # and on long sequences
    assert not native_attention(*(t.double() for t in (q, k, v)), 0.0)
    torch.set_num_threads(2)
    assert not native_attention(q, k, v, 0.0)
    torch.set_num_threads(1)
    assert native_attention(q, k, v, 0.0)
    torch.testing.assert_close(causal_attention(*odd), F.scaled_dot_product_attention(*odd, is_causal=True))


def test_a_model_on_the_c_attention_trains_like_one_on_pytorchs(monkeypatch):
    cfg = ModelConfig(n_layer=2, n_head=4, n_embd=128, block_size=64, vocab_size=256)
    x = torch.randint(0, 256, (4, 64), generator=torch.Generator().manual_seed(0))

    ours = adamw_losses(cfg, x)
    monkeypatch.setattr("trainer.attention.native_attention", lambda *a: False)
    theirs = adamw_losses(cfg, x)
    assert ours[-1] < ours[0] - 0.1  # it learns
    assert ours == pytest.approx(theirs, abs=2e-4)


def test_under_torch_compile_the_kernel_is_one_operator_in_the_graph():
    seen = []

    def record(gm, example_inputs):  # a backend that only looks: the graph runs as traced
        seen.extend(str(n.target) for n in gm.graph.nodes if n.op == "call_function")
        return gm.forward

    q, k, v = _heads(2, 32, 2, 32, seed=5)
    out = torch.compile(causal_attention, backend=record, fullgraph=True)(q, k, v)
    assert "logbook.causal_attention.default" in seen and not any("scaled_dot_product" in t for t in seen)
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(2))
    eager = causal_attention(q, k, v)
    assert torch.equal(out, eager)
    assert all(torch.equal(a, b) for a, b in zip(torch.autograd.grad(out, (q, k, v), g),
                                                 torch.autograd.grad(eager, (q, k, v), g)))


def test_run_started_is_told_which_kernel_a_run_attends_with():
    assert attention_kernel("cpu", "float32", 32, 128, 0.0) == "native"
    assert attention_kernel("cpu", "bfloat16", 32, 128, 0.0) == "pytorch"  # autocast hands it bfloat16
    assert attention_kernel("cuda", "float32", 32, 128, 0.0) == "pytorch"
    assert attention_kernel("cpu", "float32", 32, 128, 0.1) == "pytorch"
    assert attention_kernel("cpu", "float32", 128, 128, 0.0) == "pytorch"
    torch.set_num_threads(2)
    assert attention_kernel("cpu", "float32", 32, 128, 0.0) == "pytorch"


def test_a_non_finite_query_reaches_the_output_for_the_guard_to_see():
    q, k, v = (t.detach().clone() for t in _heads(1, 32, 2, 32, seed=6))
    for bad in (float("nan"), float("inf")):
        q2 = q.clone()
        q2[0, 1, 20, 3] = bad  # one query of head 1 at position 20
        out = causal_attention(q2, k, v)
        assert torch.isnan(out[0, 1, 20]).all()
        assert torch.isfinite(out[0, 0]).all() and torch.isfinite(out[0, 1, :20]).all()
