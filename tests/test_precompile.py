"""`trainer.nn.precompile`: a saved graph is loaded by a later process, and never once its source has changed.

Each step is a fresh Python process, as each attempt of a run is: it wraps a
small module in `PrecompiledModel`, prepares it on one batch and reports how
the graph was readied and what forward and backward computed. Between them
the module's source is edited, and the saved file torn.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from lab import Lab

pytestmark = pytest.mark.slow

MODULE = '''
import torch
from torch import nn


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.lin = nn.Linear(8, 8)

    def forward(self, idx, targets=None):
        y = torch.tanh(self.lin(idx)) * 2.0
        return y.sum() if targets is None else ((y - targets) ** 2).mean()
'''

STEP = '''
import json, sys
from pathlib import Path
import torch
sys.path.insert(0, sys.argv[1])
from tiny_model import Tiny
from trainer.nn.precompile import PrecompiledModel

model = Tiny()
wrapped = PrecompiledModel(model, Path(sys.argv[2]), {"test": "tiny"})
x, y = torch.ones(4, 8), torch.zeros(4, 8)
how = wrapped.prepare(x, y, key="train")
loss = wrapped(x, y)
loss.backward()
eager = Tiny()
eager_loss = eager(x, y)
eager_loss.backward()
out = {"how": how, "loss": loss.item(), "eager_loss": eager_loss.item(),
       "grad_equal": torch.allclose(model.lin.weight.grad, eager.lin.weight.grad, rtol=1e-5, atol=1e-6)}
if len(sys.argv) > 3:  # a state no prepared graph fits (no grad): torch.compile takes it
    with torch.no_grad():
        out["no_grad"] = [wrapped(x, y).item(), eager(x, y).item()]
print(json.dumps(out))
'''


def _step(lab: Lab, folder, *extra: str) -> dict:
    res = subprocess.run([sys.executable, "-c", STEP, str(lab.root), str(folder), *extra], env=lab.env,
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.splitlines()[-1])


def test_a_saved_graph_is_loaded_by_the_next_process_and_never_after_its_source_changed(tmp_path):
    lab = Lab(tmp_path, tmp_path)
    lab.env["TORCHINDUCTOR_CACHE_DIR"] = str(tmp_path / "inductor")
    source = tmp_path / "tiny_model.py"
    source.write_text(MODULE)
    folder = tmp_path / "precompiled"

    first = _step(lab, folder)
    assert first["how"] == "compiled" and first["loss"] == pytest.approx(first["eager_loss"], rel=1e-6)
    assert first["grad_equal"] and len(list(folder.glob("*.bin"))) == 1
    second = _step(lab, folder, "no-grad")
    assert second["how"] == "loaded" and second["loss"] == first["loss"] and second["grad_equal"]
    assert second["no_grad"][0] == pytest.approx(second["no_grad"][1], rel=1e-6)

    # The same name, shapes and guards; only the code differs. A stale graph would still say 2.0.
    source.write_text(MODULE.replace("* 2.0", "* 3.0"))
    edited = _step(lab, folder)
    assert edited["how"] == "compiled" and edited["loss"] == pytest.approx(edited["eager_loss"], rel=1e-6)
    assert edited["loss"] != pytest.approx(first["loss"], rel=1e-3)
    assert _step(lab, folder)["how"] == "loaded"

    (saved,) = folder.glob("*.bin")
    saved.write_bytes(saved.read_bytes()[: saved.stat().st_size // 2])  # torn, as by a crash mid-copy
    torn = _step(lab, folder)
    assert torn["how"] == "compiled" and torn["loss"] == edited["loss"]
    assert _step(lab, folder)["how"] == "loaded"
