"""For the C kernels' tests: a CPU run's setting, and a few real optimizer steps to compare two ways of computing the model."""

from __future__ import annotations

import pytest
import torch

from trainer.config import ModelConfig
from trainer.model import GPT


@pytest.fixture
def c_kernels_one_thread():
    """One thread, a CPU run's setting where the C kernels serve; the test skips where they cannot be built."""
    from trainer import native

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    if native.library() is None:
        pytest.skip(f"no C kernels here: {native.unavailable()}")
    yield
    torch.set_num_threads(threads)


def adamw_losses(cfg: ModelConfig, x: torch.Tensor, steps: int = 5) -> list[float]:
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
