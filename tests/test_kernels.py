"""The single-pass RMSNorm (in C and in PyTorch's ops) and cross-entropy with z-loss agree with PyTorch's own ops."""

from __future__ import annotations

import os
import resource
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from conftest import ROOT

from trainer import kernels, native
from trainer.config import ModelConfig
from trainer.kernels import _CrossEntropyZ, _RMSNorm, cross_entropy_z, norm_kernels, qk_norm, rms_norm
from trainer.model import GPT

needs_compiler = pytest.mark.skipif(native._compiler() is None, reason="no C compiler on this machine")


@pytest.fixture(params=["native", "pytorch"])
def path(request, monkeypatch):
    """Each test runs on the C kernels and on PyTorch's ops, one thread as a CPU run has it."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    if request.param == "native":
        if native.library() is None:
            pytest.skip(f"no C kernels here: {native.unavailable()}")
    else:
        monkeypatch.setattr(kernels, "_native_path", lambda *tensors: False)
    yield request.param
    torch.set_num_threads(threads)


def _reference_rms_norm(x: torch.Tensor, gain: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * gain


@pytest.mark.parametrize("weight_shape", [(8,), (4, 1, 8)], ids=["per-feature", "per-head"])
def test_rms_norm_gradients_pass_gradcheck_for_both_gain_shapes(weight_shape):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 4, 5, 8, dtype=torch.float64, generator=g, requires_grad=True)
    w = torch.randn(*weight_shape, dtype=torch.float64, generator=g, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b: _RMSNorm.apply(a, b, 1e-6), (x, w))


def test_cross_entropy_with_z_loss_gradients_pass_gradcheck():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(20, 7, dtype=torch.float64, generator=g, requires_grad=True)
    targets = torch.randint(0, 7, (20,), generator=g)
    assert torch.autograd.gradcheck(lambda a: _CrossEntropyZ.apply(a, targets, 0.3), (logits,))


def test_rms_norm_matches_pytorch_forward_and_backward_in_float32(path):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(4, 16, 32, generator=g, requires_grad=True)
    w = (1 + 0.1 * torch.randn(32, generator=g)).requires_grad_()
    ref_x, ref_w = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    up = torch.randn(4, 16, 32, generator=g)
    (rms_norm(x, w) * up).sum().backward()
    (F.rms_norm(ref_x, (32,), ref_w) * up).sum().backward()
    assert torch.allclose(rms_norm(x, w), F.rms_norm(ref_x, (32,), ref_w), atol=1e-6)
    assert torch.allclose(x.grad, ref_x.grad, atol=1e-5) and torch.allclose(w.grad, ref_w.grad, atol=1e-4)


@pytest.mark.parametrize(("n", "V"), [(64, 256), (37, 50), (3, 7)])
def test_cross_entropy_z_matches_cross_entropy_plus_logsumexp_squared(path, n, V):
    g = torch.Generator().manual_seed(2)
    logits = (3 * torch.randn(n, V, generator=g)).requires_grad_()
    ref = logits.detach().clone().requires_grad_()
    targets = torch.randint(0, V, (n,), generator=g)
    ce, z = cross_entropy_z(logits, targets, 1e-2)
    ref_ce = F.cross_entropy(ref, targets)
    ref_z = 1e-2 * torch.logsumexp(ref, dim=-1).pow(2).mean()
    assert torch.allclose(ce, ref_ce, atol=1e-5) and torch.allclose(z, ref_z, rtol=1e-5)
    (ce + 3 * z).backward()
    (ref_ce + 3 * ref_z).backward()
    assert torch.allclose(logits.grad, ref.grad, atol=1e-7)


def test_without_z_loss_the_term_is_zero_and_the_gradient_is_plain_cross_entropy(path):
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(10, 5, generator=g, requires_grad=True)
    targets = torch.randint(0, 5, (10,), generator=g)
    ce, z = cross_entropy_z(logits, targets, 0.0)
    ce.backward()
    ref = logits.detach().clone().requires_grad_()
    F.cross_entropy(ref, targets).backward()
    assert z == 0 and torch.allclose(logits.grad, ref.grad, atol=1e-7)


def test_a_target_outside_the_vocabulary_is_a_clear_error_not_a_read_past_the_row(path):
    logits = torch.randn(4, 16, requires_grad=True)
    for bad in (16, -1):
        targets = torch.tensor([0, 3, bad, 1])
        with pytest.raises((ValueError, RuntimeError), match="outside the vocabulary|out of bounds"):
            cross_entropy_z(logits, targets, 1e-4)


@pytest.fixture
def one_thread():
    """A one-thread CPU run, as the C kernels serve it."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@needs_compiler
def test_under_torch_compile_the_loss_is_one_operator_with_the_eager_bits(one_thread):
    g = torch.Generator().manual_seed(4)
    logits = (3 * torch.randn(48, 40, generator=g)).requires_grad_()
    targets = torch.randint(0, 40, (48,), generator=g)
    seen = []

    def record(gm, example_inputs):  # a backend that only looks: the graph runs as traced
        seen.extend(str(n.target) for n in gm.graph.nodes if n.op == "call_function")
        return gm.forward

    def loss(a):
        ce, z = cross_entropy_z(a, targets, 1e-2)
        return ce + 2 * z

    compiled = torch.compile(loss, backend=record, fullgraph=True)(logits)
    assert "logbook.cross_entropy_z.default" in seen
    eager = loss(logits)
    assert torch.equal(compiled, eager)
    assert torch.equal(torch.autograd.grad(compiled, logits)[0], torch.autograd.grad(eager, logits)[0])


def test_the_model_keeps_nn_rmsnorm_parameter_names_so_old_checkpoints_load():
    model = GPT(ModelConfig(n_layer=1, n_head=2, n_embd=16, block_size=8, vocab_size=256))
    names = set(model.state_dict())
    assert {"blocks.0.norm1.weight", "blocks.0.norm2.weight", "norm_f.weight", "blocks.0.attn.q_gain"} <= names
    assert isinstance(model.norm_f, torch.nn.RMSNorm)


def test_the_qk_norm_of_queries_and_keys_together_matches_one_norm_per_head(path):
    g = torch.Generator().manual_seed(4)
    x = torch.randn(2, 5, 3 * 8, generator=g)
    q_gain, k_gain = (1 + 0.1 * torch.randn(2, 4, generator=g) for _ in range(2))
    qk = x.split((16, 8), dim=2)[0]  # 2 query heads then 2 key heads, as the model lays them out
    q, k = qk_norm(qk, q_gain, k_gain)
    ref = [F.rms_norm(t.view(2, 5, 2, 4), (4,)) * gain for t, gain in zip(x.split(8, dim=2), (q_gain, k_gain))]
    assert torch.allclose(q, ref[0], atol=1e-6) and torch.allclose(k, ref[1], atol=1e-6)


@pytest.mark.parametrize("width", [32, 128, 40], ids=["a head wide", "a model wide", "an odd width"])
def test_rms_norm_matches_a_float64_reference_forward_and_backward(path, width):
    g = torch.Generator().manual_seed(5)
    x = torch.randn(3, 7, width, dtype=torch.float64, generator=g)
    gain = 1 + 0.1 * torch.randn(width, dtype=torch.float64, generator=g)
    up = torch.randn(3, 7, width, dtype=torch.float64, generator=g)
    ref_x, ref_w = x.clone().requires_grad_(), gain.clone().requires_grad_()
    ref = _reference_rms_norm(ref_x, ref_w, 1e-6)
    ref.backward(up)
    x32, w32 = x.float().requires_grad_(), gain.float().requires_grad_()
    y = rms_norm(x32, w32, 1e-6)
    y.backward(up.float())
    assert torch.allclose(y.double(), ref, atol=2e-6)
    assert torch.allclose(x32.grad.double(), ref_x.grad, atol=2e-5)
    assert torch.allclose(w32.grad.double(), ref_w.grad, rtol=1e-5, atol=1e-4)


def test_qk_norm_matches_a_float64_reference_and_reads_a_transposed_gradient_as_it_arrives(path):
    B, T, H, hd = 2, 6, 3, 32
    g = torch.Generator().manual_seed(6)
    qkv = torch.randn(B, T, 3 * H * hd, generator=g)
    gains = [1 + 0.1 * torch.randn(H, hd, generator=g) for _ in range(2)]
    # Attention hands back the gradients in its own layout, [B, H, T, hd], seen transposed.
    ups = [torch.randn(B, H, T, hd, generator=g).transpose(1, 2) for _ in range(2)]

    def grads(dtype, ups):
        leaf = qkv.detach().to(dtype, copy=True).requires_grad_()
        w = [x.detach().to(dtype, copy=True).requires_grad_() for x in gains]
        qk = leaf.split((2 * H * hd, H * hd), dim=2)[0]
        if dtype == torch.float64:
            outs = [_reference_rms_norm(t.reshape(B, T, H, hd), gw, 1e-6) for t, gw in zip(qk.split(H * hd, 2), w)]
        else:
            outs = qk_norm(qk, *w, eps=1e-6)
        torch.autograd.backward(outs, [u.to(dtype) for u in ups])
        return [o.detach().double() for o in outs] + [leaf.grad.double(), w[0].grad.double(), w[1].grad.double()]

    got, ref = grads(torch.float32, ups), grads(torch.float64, ups)
    for a, b, tol in zip(got, ref, (2e-6, 2e-6, 2e-5, 1e-4, 1e-4)):
        assert torch.allclose(a, b, atol=tol)
    # The same numbers, bit for bit, whether a gradient arrives transposed or was copied first.
    again = grads(torch.float32, [u.contiguous() for u in ups])
    assert all(torch.equal(a, b) for a, b in zip(got, again))


@needs_compiler
def test_where_a_c_compiler_is_found_a_single_threaded_cpu_run_uses_the_c_kernels():
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        assert native.library() is not None, native.unavailable()
        assert norm_kernels("cpu", compiled=False) == "native"
        torch.set_num_threads(2)
        assert norm_kernels("cpu", compiled=False) == "pytorch (more than one thread)"
        assert norm_kernels("cpu", compiled=True) == "inductor"
        torch.set_num_threads(1)
        assert norm_kernels("cpu", compiled=True) == "inductor, QK-norm native"
    finally:
        torch.set_num_threads(threads)
    assert norm_kernels("cuda", compiled=True) == "inductor" and norm_kernels("cuda", compiled=False) == "pytorch"


_PROBE = """
import torch
torch.set_num_threads(1)
from trainer import native
from trainer.kernels import norm_kernels, rms_norm
x = torch.randn(4, 64, generator=torch.Generator().manual_seed(0))
print(norm_kernels("cpu", compiled=False))
print(repr(rms_norm(x, torch.ones(64)).sum().item()))
"""


def _probe(tmp_path, **env) -> list[str]:
    out = subprocess.run([sys.executable, "-c", _PROBE], cwd=ROOT, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(ROOT), "LOGBOOK_KERNEL_CACHE": str(tmp_path), **env})
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.splitlines()


def test_without_a_c_compiler_the_norms_run_on_pytorch_ops_and_say_why(tmp_path):
    said, total = _probe(tmp_path, CC="", PATH=str(tmp_path / "empty"))
    assert said == "pytorch (no C compiler (set CC, or install cc, gcc or clang))"
    x = torch.randn(4, 64, generator=torch.Generator().manual_seed(0))
    assert float(total) == pytest.approx(float(F.rms_norm(x, (64,), torch.ones(64)).sum()), abs=1e-4)
    assert list(tmp_path.iterdir()) == []


@needs_compiler
def test_a_failing_build_falls_back_and_leaves_no_half_written_library(tmp_path):
    said, _ = _probe(tmp_path, CC="false")
    assert said.startswith("pytorch (building the C kernels failed")
    assert list(tmp_path.iterdir()) == []  # neither a library nor a temporary file


@needs_compiler
def test_the_kernels_are_built_once_per_machine_and_found_by_the_next_process(tmp_path):
    assert _probe(tmp_path)[0] == "native"
    (built,) = tmp_path.glob("kernels-*.so")
    stamp = built.stat().st_mtime_ns
    assert _probe(tmp_path)[0] == "native"
    assert [p.name for p in tmp_path.iterdir()] == [built.name] and built.stat().st_mtime_ns == stamp


@needs_compiler
def test_under_torch_compile_the_qk_norm_is_the_c_kernel_as_one_operator():
    from trainer.kernels import _qk_norm_op

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        g = torch.Generator().manual_seed(0)
        qkv = torch.randn(2, 16, 3 * 64, generator=g)
        qk = qkv[..., :128].requires_grad_()  # the queries and keys where the projection leaves them
        q_gain, k_gain = (torch.rand(2, 32, generator=g).add_(0.5).requires_grad_() for _ in range(2))
        torch.library.opcheck(_qk_norm_op, (qk, q_gain, k_gain, 1e-6))
        seen = []

        def record(gm, example_inputs):  # a backend that only looks
            seen.extend(str(n.target) for n in gm.graph.nodes if n.op == "call_function")
            return gm.forward

        compiled = torch.compile(qk_norm, backend=record, fullgraph=True)(qk, q_gain, k_gain, 1e-6)
        eager = qk_norm(qk, q_gain, k_gain, 1e-6)
        assert "logbook.qk_norm.default" in seen
        ups = [torch.randn(t.shape, generator=g) for t in eager]
        grads = [torch.autograd.grad(out, (qk, q_gain, k_gain), ups) for out in (compiled, eager)]
        assert all(torch.equal(a, b) for a, b in zip(compiled, eager))
        assert all(torch.equal(a, b) for a, b in zip(*grads))
    finally:
        torch.set_num_threads(threads)
