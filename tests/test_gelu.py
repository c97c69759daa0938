"""The C GELU agrees with the exact one at least as well as PyTorch's, is reproducible to the bit, and steps aside where it does not serve."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from model_helpers import adamw_losses, c_kernels_one_thread  # noqa: F401 (a fixture)
from trainer.activation import _NativeGELU, fc_gelu, gelu, gelu_kernel, native_gelu
from trainer.config import ModelConfig

pytestmark = pytest.mark.usefixtures("c_kernels_one_thread")


def _exact(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """gelu(x) and gelu'(x) in float64."""
    x = x.double()
    cdf = 0.5 * torch.special.erfc(-x / math.sqrt(2))  # erfc: no cancellation on the negative side
    pdf = torch.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)
    return x * cdf, cdf + x * pdf


def _err(got: torch.Tensor, want: torch.Tensor) -> torch.Tensor:
    """Absolute below 1, relative above (where float32's own spacing grows)."""
    return (got.double() - want).abs() / want.abs().clamp(min=1.0)


def test_the_c_gelu_is_as_accurate_as_pytorchs_in_float32():
    # Every float32 step near 0, the pre-activations a model has, and the far lanes out to where Phi rounds to 0 or 1.
    x = torch.cat([torch.linspace(-12, 12, 1_000_003), torch.randn(100_000) * 0.3, torch.linspace(-1.5, 1.5, 300_001)])
    x = x.requires_grad_()
    y = _NativeGELU.apply(x)
    (dx,) = torch.autograd.grad(y, x, torch.ones_like(y))
    want_y, want_dx = _exact(x.detach())
    for got, theirs, want in ((y, F.gelu(x), want_y), (dx, torch.ops.aten.gelu_backward(torch.ones_like(x), x), want_dx)):
        err, their_err = _err(got, want), _err(theirs, want)
        assert err.max() <= max(their_err.max().item(), 3e-7), (err.max(), their_err.max())
        assert err.mean() <= their_err.mean()


def test_every_size_is_served_including_a_last_partial_vector():
    for n in (1, 15, 16, 17, 33, 1000):
        x = (torch.randn(n, generator=torch.Generator().manual_seed(n)) * 2).requires_grad_()
        y = gelu(x)
        assert y.shape == x.shape
        (dx,) = torch.autograd.grad(y, x, torch.ones_like(y))
        want_y, want_dx = _exact(x.detach())
        assert _err(y, want_y).max() <= 3e-7 and _err(dx, want_dx).max() <= 3e-7


def test_a_non_contiguous_input_and_gradient_are_served():
    base = torch.randn(8, 64, generator=torch.Generator().manual_seed(1))
    x = base.t().requires_grad_()  # a transposed view
    y = gelu(x)
    g = torch.randn(8, 64, generator=torch.Generator().manual_seed(2)).t()
    (dx,) = torch.autograd.grad(y, x, g)
    want_y, want_dx = _exact(x.detach())
    assert _err(y, want_y).max() <= 3e-7 and _err(dx, want_dx * g.double()).max() <= 1e-6


def test_the_c_gelu_gives_the_same_bits_every_time():
    x = (torch.randn(4096, generator=torch.Generator().manual_seed(0)) * 1.5).requires_grad_()
    g = torch.randn(4096, generator=torch.Generator().manual_seed(1))
    runs = [(y := gelu(x), *torch.autograd.grad(y, x, g)) for _ in range(2)]
    assert all(torch.equal(a, b) for a, b in zip(*runs))


def test_a_lane_does_not_depend_on_its_neighbours():
    """A far pre-activation beside near ones takes the full way for itself only: the near ones keep their bits."""
    near = torch.randn(16, generator=torch.Generator().manual_seed(3)) * 0.3
    mixed = near.clone()
    mixed[5] = 3.0
    a, b = gelu(near), gelu(mixed)
    keep = torch.arange(16) != 5
    assert torch.equal(a[keep], b[keep])


@pytest.mark.parametrize("sd", [1.0, 3.0], ids=["few far lanes, gathered", "many, a vector at a time"])
def test_a_large_tensor_gives_each_lane_the_bits_it_gets_alone(sd):
    """Every lane the near or the far way as it would alone, whether the kernel gathers the far lanes or not."""
    x = torch.randn(5000, generator=torch.Generator().manual_seed(4)) * sd  # past a block, and a partial vector
    x[::997] = 9.5  # beyond u = 40: the far way without the exponential
    whole = x.clone().requires_grad_()
    y = gelu(whole)
    (dx,) = torch.autograd.grad(y, whole, torch.ones_like(y))
    alone_y, alone_dx = [], []
    for part in x.split(15):  # fewer than a vector's worth: the kernel's one-vector path
        p = part.clone().requires_grad_()
        py = gelu(p)
        alone_y.append(py.detach())
        alone_dx.append(torch.autograd.grad(py, p, torch.ones_like(py))[0])
    assert torch.equal(y.detach(), torch.cat(alone_y)) and torch.equal(dx, torch.cat(alone_dx))
    want_y, want_dx = _exact(x)
    assert _err(y, want_y).max() <= 3e-7 and _err(dx, want_dx).max() <= 3e-7


def test_non_finite_inputs_stay_non_finite_or_take_their_limits():
    x = torch.tensor([float("nan"), float("inf"), -float("inf"), 3e38, -3e38, 0.0, -0.0]).requires_grad_()
    y = gelu(x)
    (dx,) = torch.autograd.grad(y, x, torch.ones_like(y))
    assert torch.isnan(y[0]) and torch.isnan(dx[0])  # a NaN reaches the loss, for the guard to see
    assert y[1] == float("inf") and torch.isnan(y[2])  # as PyTorch's: -inf * 0
    assert y[3].item() == pytest.approx(3e38) and y[4].item() == 0.0
    assert dx[1:5].tolist() == [1.0, 0.0, 1.0, 0.0]  # the derivative's limits, where PyTorch's gives NaN at +-inf
    assert y[5].item() == 0.0 and dx[5].item() == 0.5


def test_what_the_kernel_does_not_serve_goes_to_pytorch():
    x = torch.randn(64, generator=torch.Generator().manual_seed(0))
    assert native_gelu(x)
    assert not native_gelu(x.double()) and not native_gelu(x.bfloat16())
    torch.set_num_threads(2)
    assert not native_gelu(x)
    assert torch.equal(gelu(x), F.gelu(x))
    torch.set_num_threads(1)
    assert gelu(x.double()).dtype == torch.float64


def test_run_started_is_told_which_kernel_computes_the_gelu():
    assert gelu_kernel("cpu", "float32") == "native"
    assert gelu_kernel("cpu", "bfloat16") == "pytorch"
    assert gelu_kernel("cuda", "float32") == "pytorch"
    torch.set_num_threads(2)
    assert gelu_kernel("cpu", "float32") == "pytorch"


def _ops_seen_compiling(fn, x: torch.Tensor) -> tuple[torch.Tensor, list[str]]:
    seen = []

    def record(gm, example_inputs):  # a backend that only looks: the graph runs as traced
        seen.extend(str(n.target) for n in gm.graph.nodes if n.op == "call_function")
        return gm.forward

    return torch.compile(fn, backend=record, fullgraph=True)(x), seen


def test_under_torch_compile_the_kernel_is_one_operator_and_agrees_with_eager():
    x = (torch.randn(4, 100, generator=torch.Generator().manual_seed(5)) * 2).requires_grad_()
    out, seen = _ops_seen_compiling(gelu, x)
    assert "logbook.gelu_and_grad.default" in seen
    assert not any("gelu.default" == t.split(".", 1)[-1] for t in seen if "aten" in t)
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(2))
    eager = gelu(x)
    assert torch.equal(out, eager)
    assert torch.equal(torch.autograd.grad(out, x, g)[0], torch.autograd.grad(eager, x, g)[0])


def test_without_a_gradient_only_gelu_is_computed_with_the_same_bits():
    x = torch.randn(4, 100, generator=torch.Generator().manual_seed(8)) * 2
    with torch.no_grad():
        out, seen = _ops_seen_compiling(gelu, x)
        plain = gelu(x)
    assert "logbook.gelu.default" in seen and "logbook.gelu_and_grad.default" not in seen
    assert plain.grad_fn is None
    training = gelu(x.clone().requires_grad_())
    assert torch.equal(out, plain) and torch.equal(plain, training.detach())


def test_the_backward_multiplies_by_the_derivative_the_forward_kept():
    """The training forward writes gelu'(x) beside gelu(x); the backward is the gradient times it, nothing else."""
    x = (torch.randn(1000, generator=torch.Generator().manual_seed(6)) * 3).requires_grad_()
    y, d = torch.ops.logbook.gelu_and_grad(x)
    g = torch.randn(1000, generator=torch.Generator().manual_seed(7))
    before = g.clone()
    (dx,) = torch.autograd.grad(y, x, g)
    assert torch.equal(g, before)  # the caller's gradient is left alone
    assert torch.equal(dx, g * d)
    want_y, want_d = _exact(x.detach())
    assert _err(y, want_y).max() <= 3e-7 and _err(d, want_d).max() <= 3e-7
    (eager,) = torch.autograd.grad(_NativeGELU.apply(x), x, g)
    assert torch.equal(dx, eager)


def test_a_model_on_the_c_gelu_trains_like_one_on_pytorchs(monkeypatch):
    cfg = ModelConfig(n_layer=2, n_head=4, n_embd=64, block_size=32, vocab_size=256)
    x = torch.randint(0, 256, (4, 32), generator=torch.Generator().manual_seed(0))

    ours = adamw_losses(cfg, x)
    monkeypatch.setattr("trainer.activation.native_gelu", lambda x: False)
    theirs = adamw_losses(cfg, x)
    assert ours[-1] < ours[0] - 0.1  # it learns
    assert ours == pytest.approx(theirs, abs=2e-4)


def test_far_negative_pre_activations_make_no_subnormal_gradients():
    # x phi(x) near e^-87 is subnormal, and so is an ordinary gradient times it: floats the CPU computes
    # many times slower. Beyond |x| = 8.9 the derivative is below 2e-17 and taken as nought.
    x = torch.cat([torch.linspace(-14, -8, 60_001), torch.linspace(8, 14, 60_001)]).requires_grad_()
    y = _NativeGELU.apply(x)
    (dx,) = torch.autograd.grad(y, x, torch.full_like(x, 1e-5))
    tiny = torch.finfo(torch.float32).tiny
    assert not ((dx != 0) & (dx.abs() < tiny)).any()
    assert (dx[x.detach() < -8.95] == 0).all()
    assert (dx[x.detach() > 8] == 1e-5).all()


def _fc_inputs(seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(3, 10, 32, generator=g).requires_grad_()
    w = (0.4 * torch.randn(72, 32, generator=g)).requires_grad_()  # 72: a last partial vector a row
    return x, w, torch.randn(3, 10, 72, generator=g)


def test_the_fused_projection_and_gelu_give_the_bits_of_the_two_apart():
    x, w, up = _fc_inputs(11)
    fused = fc_gelu(x, w)
    apart = gelu(F.linear(x, w))
    assert torch.equal(fused, apart)
    assert all(torch.equal(a, b) for a, b in zip(torch.autograd.grad(fused, (x, w), up),
                                                  torch.autograd.grad(apart, (x, w), up)))


def test_under_torch_compile_the_projection_and_gelu_are_one_operator_with_the_eager_bits():
    x, w, up = _fc_inputs(12)
    seen = []

    def record(gm, example_inputs):  # a backend that only looks: the graph runs as traced
        seen.extend(str(n.target) for n in gm.graph.nodes if n.op == "call_function")
        return gm.forward

    compiled = torch.compile(fc_gelu, backend=record, fullgraph=True)(x, w)
    assert "logbook.fc_gelu.default" in seen
    eager = fc_gelu(x, w)
    assert torch.equal(compiled, eager)
    assert all(torch.equal(a, b) for a, b in zip(torch.autograd.grad(compiled, (x, w), up),
                                                  torch.autograd.grad(eager, (x, w), up)))


def test_without_a_gradient_the_projection_and_gelu_take_the_plain_path():
    x, w, _ = _fc_inputs(13)
    with torch.no_grad():
        out = fc_gelu(x, w)
    assert out.grad_fn is None and torch.equal(out, gelu(F.linear(x.detach(), w.detach())))

