"""The single-pass RMSNorm and cross-entropy with z-loss agree with PyTorch's own ops."""

from __future__ import annotations

import resource
import sys

import pytest
import torch
import torch.nn.functional as F

from trainer.config import ModelConfig
from trainer.kernels import _CrossEntropyZ, _RMSNorm, cross_entropy_z, keep_freed_memory, rms_norm
from trainer.model import GPT


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


def test_rms_norm_matches_pytorch_forward_and_backward_in_float32():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(4, 16, 32, generator=g, requires_grad=True)
    w = (1 + 0.1 * torch.randn(32, generator=g)).requires_grad_()
    ref_x, ref_w = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    up = torch.randn(4, 16, 32, generator=g)
    (rms_norm(x, w) * up).sum().backward()
    (F.rms_norm(ref_x, (32,), ref_w) * up).sum().backward()
    assert torch.allclose(rms_norm(x, w), F.rms_norm(ref_x, (32,), ref_w), atol=1e-6)
    assert torch.allclose(x.grad, ref_x.grad, atol=1e-5) and torch.allclose(w.grad, ref_w.grad, atol=1e-4)


def test_cross_entropy_z_matches_cross_entropy_plus_logsumexp_squared():
    g = torch.Generator().manual_seed(2)
    logits = (3 * torch.randn(64, 256, generator=g)).requires_grad_()
    ref = logits.detach().clone().requires_grad_()
    targets = torch.randint(0, 256, (64,), generator=g)
    ce, z = cross_entropy_z(logits, targets, 1e-2)
    ref_ce = F.cross_entropy(ref, targets)
    ref_z = 1e-2 * torch.logsumexp(ref, dim=-1).pow(2).mean()
    assert torch.allclose(ce, ref_ce, atol=1e-5) and torch.allclose(z, ref_z, rtol=1e-5)
    (ce + 3 * z).backward()
    (ref_ce + 3 * ref_z).backward()
    assert torch.allclose(logits.grad, ref.grad, atol=1e-7)


def test_without_z_loss_the_term_is_zero_and_the_gradient_is_plain_cross_entropy():
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(10, 5, generator=g, requires_grad=True)
    targets = torch.randint(0, 5, (10,), generator=g)
    ce, z = cross_entropy_z(logits, targets, 0.0)
    ce.backward()
    ref = logits.detach().clone().requires_grad_()
    F.cross_entropy(ref, targets).backward()
    assert z == 0 and torch.allclose(logits.grad, ref.grad, atol=1e-7)


def test_the_model_keeps_nn_rmsnorm_parameter_names_so_old_checkpoints_load():
    model = GPT(ModelConfig(n_layer=1, n_head=2, n_embd=16, block_size=8, vocab_size=256))
    names = set(model.state_dict())
    assert {"blocks.0.norm1.weight", "blocks.0.norm2.weight", "norm_f.weight", "blocks.0.attn.q_gain"} <= names
    assert isinstance(model.norm_f, torch.nn.RMSNorm)


def test_the_qk_norm_of_queries_and_keys_together_matches_one_norm_per_head():
    g = torch.Generator().manual_seed(4)
    x = torch.randn(2, 5, 3 * 8, generator=g)
    q_gain, k_gain = (1 + 0.1 * torch.randn(2, 4, generator=g) for _ in range(2))
    qk = x.split((16, 8), dim=2)[0].view(2, 5, 4, 4)  # 2 query heads then 2 key heads, as the model lays them out
    q, k = rms_norm(qk, torch.cat((q_gain, k_gain))).split(2, dim=2)
    ref = [F.rms_norm(t.view(2, 5, 2, 4), (4,)) * gain for t, gain in zip(x.split(8, dim=2), (q_gain, k_gain))]
    assert torch.allclose(q, ref[0], atol=1e-6) and torch.allclose(k, ref[1], atol=1e-6)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_with_freed_memory_kept_a_training_step_no_longer_faults_its_activations_in():
    assert keep_freed_memory()
    torch.manual_seed(0)
    model = GPT(ModelConfig(n_layer=1, n_head=4, n_embd=128, block_size=128, vocab_size=256))
    opt = torch.optim.AdamW(model.parameters(), fused=True)
    x = torch.randint(0, 256, (16, 128))

    def faults_of_a_step() -> int:
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        model(x, x).loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

    for _ in range(3):  # the first steps map the heap
        faults_of_a_step()
    # Without it, glibc hands the 1-4 MB activations back and faults them in again:
    # hundreds to thousands of pages a step.
    assert min(faults_of_a_step() for _ in range(4)) < 50
