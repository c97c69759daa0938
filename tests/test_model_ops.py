"""The model's ops: attention on either backend, the per-head QK-norm, and the loss with its z-loss from one log-sum-exp."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from logbook.core.errors import UsageError
from trainer.config import ModelConfig, load_train_config
from trainer.nn.model import GPT, causal_attention, cross_entropy_z

BACKENDS = ("sdpa", "math")


def _heads(B: int, T: int, H: int, hd: int, seed: int) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(B, H, T, hd, generator=g, requires_grad=True) for _ in range(3))


def _reference_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """softmax(q k^T / sqrt(hd), causal) v in float64, spelled out."""
    q, k, v = (t.double() for t in (q, k, v))
    T = q.shape[-2]
    att = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    att = att.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(att, dim=-1) @ v


def _adamw_losses(cfg: ModelConfig, x: torch.Tensor, steps: int = 5) -> list[float]:
    """The loss at each of `steps` AdamW steps of a GPT seeded 0, learning to predict `x` from itself."""
    torch.manual_seed(0)
    model = GPT(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    out = []
    for _ in range(steps):
        loss = model(x, x).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        out.append(loss.item())
    return out


@pytest.mark.parametrize("backend", BACKENDS)
def test_attention_matches_a_float64_reference_forward_and_backward(backend):
    q, k, v = _heads(2, 37, 3, 16, seed=0)
    g = torch.randn(2, 3, 37, 16, generator=torch.Generator().manual_seed(1))
    out = causal_attention(q, k, v, 0.0, backend)
    ref = _reference_attention(q, k, v)
    torch.testing.assert_close(out, ref.float(), rtol=0, atol=1e-5)
    got = torch.autograd.grad(out, (q, k, v), g)
    want = torch.autograd.grad(ref, (q, k, v), g.double())
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b.float(), rtol=0, atol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_token_attends_to_itself_and_its_past_only(backend):
    q, k, v = (t.detach() for t in _heads(1, 24, 2, 16, seed=3))
    before = causal_attention(q, k, v, 0.0, backend)
    k2, v2 = k.clone(), v.clone()
    k2[:, :, 12:] += 5.0
    v2[:, :, 12:] -= 3.0  # change every key and value from position 12 on
    after = causal_attention(q, k2, v2, 0.0, backend)
    assert torch.equal(before[:, :, :12], after[:, :, :12]) and not torch.equal(before[:, :, 12:], after[:, :, 12:])


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_non_finite_query_reaches_its_output_for_the_guard_to_see(backend):
    q, k, v = (t.detach().clone() for t in _heads(1, 32, 2, 32, seed=6))
    for bad in (float("nan"), float("inf")):
        q2 = q.clone()
        q2[0, 1, 20, 3] = bad  # one query of head 1 at position 20
        out = causal_attention(q2, k, v, 0.0, backend)
        assert torch.isnan(out[0, 1, 20]).all()
        assert torch.isfinite(out[0, 0]).all() and torch.isfinite(out[0, 1, :20]).all()


def test_a_model_on_either_backend_trains_alike():
    cfg = ModelConfig(n_layer=2, n_head=4, n_embd=64, block_size=32, vocab_size=256)
    x = torch.randint(0, 256, (4, 32), generator=torch.Generator().manual_seed(0))
    sdpa = _adamw_losses(cfg, x)
    cfg.attention_backend = "math"
    math_ = _adamw_losses(cfg, x)
    assert sdpa[-1] < sdpa[0] - 0.1  # it learns
    assert sdpa == pytest.approx(math_, abs=1e-5)


def test_an_unknown_attention_backend_is_refused_naming_the_choices():
    with pytest.raises(UsageError) as e:
        load_train_config(None, ["model.attention_backend=flash"])
    assert "model.attention_backend" in str(e.value) and "sdpa, math" in str(e.value)


def test_the_qk_norm_normalises_each_head_with_its_own_gain_before_attention():
    cfg = ModelConfig(n_layer=1, n_head=2, n_embd=16, block_size=8, vocab_size=256)
    torch.manual_seed(0)
    attn = GPT(cfg).blocks[0].attn
    with torch.no_grad():
        attn.q_gain.copy_(1 + 0.3 * torch.randn(2, 8))
        attn.k_gain.copy_(1 + 0.3 * torch.randn(2, 8))
    x = torch.randn(3, 8, 16)
    q, k, v = (t.view(3, 8, 2, 8) for t in attn.qkv(x).split(16, dim=2))
    # One head's queries at a time, each with its own gain: a gain shared by the heads would differ.
    q = torch.stack([F.rms_norm(q[:, :, h], (8,), attn.q_gain[h]) for h in range(2)], dim=2)
    k = torch.stack([F.rms_norm(k[:, :, h], (8,), attn.k_gain[h]) for h in range(2)], dim=2)
    y = _reference_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)).float()
    want = attn.proj(y.transpose(1, 2).reshape(3, 8, 16))
    torch.testing.assert_close(attn(x), want, rtol=0, atol=1e-5)


@pytest.mark.parametrize(("n", "V"), [(64, 256), (37, 50), (3, 7)])
def test_cross_entropy_z_matches_cross_entropy_plus_logsumexp_squared(n, V):
    g = torch.Generator().manual_seed(2)
    logits = (3 * torch.randn(n, V, generator=g)).requires_grad_()
    ref = logits.detach().clone().requires_grad_()
    targets = torch.randint(0, V, (n,), generator=g)
    ce, z = cross_entropy_z(logits, targets, 1e-2)
    ref_ce = F.cross_entropy(ref, targets)
    ref_z = 1e-2 * torch.logsumexp(ref, dim=-1).pow(2).mean()
    torch.testing.assert_close(ce, ref_ce, rtol=0, atol=1e-5)
    torch.testing.assert_close(z, ref_z, rtol=1e-5, atol=0)
    (ce + 3 * z).backward()
    (ref_ce + 3 * ref_z).backward()
    torch.testing.assert_close(logits.grad, ref.grad, rtol=0, atol=1e-7)


def test_cross_entropy_with_z_loss_gradients_pass_gradcheck():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(20, 7, dtype=torch.float64, generator=g, requires_grad=True)
    targets = torch.randint(0, 7, (20,), generator=g)
    assert torch.autograd.gradcheck(lambda a: sum(cross_entropy_z(a, targets, 0.3)), (logits,))


def test_without_z_loss_the_term_is_zero_and_the_gradient_is_plain_cross_entropy():
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(10, 5, generator=g, requires_grad=True)
    targets = torch.randint(0, 5, (10,), generator=g)
    ce, z = cross_entropy_z(logits, targets, 0.0)
    ce.backward()
    ref = logits.detach().clone().requires_grad_()
    F.cross_entropy(ref, targets).backward()
    assert z == 0
    torch.testing.assert_close(logits.grad, ref.grad, rtol=0, atol=1e-7)


def test_a_target_outside_the_vocabulary_is_an_error_not_a_read_past_the_row():
    logits = torch.randn(4, 16, requires_grad=True)
    for bad in (16, -1):
        with pytest.raises(RuntimeError, match="out of bounds"):
            cross_entropy_z(logits, torch.tensor([0, 3, bad, 1]), 1e-4)


def test_the_model_keeps_nn_rmsnorm_parameter_names_so_old_checkpoints_load():
    model = GPT(ModelConfig(n_layer=1, n_head=2, n_embd=16, block_size=8, vocab_size=256))
    names = set(model.state_dict())
    assert {"blocks.0.norm1.weight", "blocks.0.norm2.weight", "norm_f.weight", "blocks.0.attn.q_gain"} <= names
    assert isinstance(model.norm_f, torch.nn.RMSNorm)


def test_under_torch_compile_the_model_computes_what_eager_computes():
    cfg = ModelConfig(n_layer=1, n_head=2, n_embd=32, block_size=16, vocab_size=256)
    torch.manual_seed(0)
    model = GPT(cfg)
    x = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(0))
    eager = model(x, x).loss
    compiled = torch.compile(model, backend="aot_eager", fullgraph=True)(x, x).loss
    torch.testing.assert_close(compiled, eager, rtol=0, atol=1e-6)
