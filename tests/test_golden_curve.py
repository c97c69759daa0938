"""A golden loss curve: the trainer's per-step losses on a short CPU run, kept in tests/assets/golden_losses.json.

Any change to what the trainer computes (model, loss, optimizer, schedule,
data order, initialisation, seeding) moves these numbers, so an unintended
one fails here; an intended one regenerates the file in the same commit:

    PYTHONPATH=$PWD python3 tests/test_golden_curve.py

The run is configs/micro-test.yaml for `STEPS` steps, one thread,
deterministic, through the whole trainer (`build_trainer(...).fit()`), with
its checkpoints, guard and callbacks as a user's run has them.

The tolerance is not zero because the file travels between machines: the
matrix products come from the CPU's BLAS (oneDNN/MKL or OpenBLAS), which
picks its kernels by instruction set (AVX2, AVX-512, NEON) and so sums in
another order, and PyTorch's own vectorised loops do the same; a float32
step then differs in its last bits, and training carries the difference
on. Measured on one machine by forcing other instruction sets
(`ATEN_CPU_CAPABILITY=default` or `avx2` against avx512,
`MKL_ENABLE_INSTRUCTIONS=AVX2`, `ONEDNN_MAX_CPU_ISA=AVX2`), the curve moved
by at most 4.8e-7, one float32 ulp at these losses; `TOLERANCE` is ten
ulps. Changes to the numerics move it further: the z-loss coefficient
doubled moves it by 1.3e-5, a learning rate 1% higher by 4e-3. On the
machine that made the file the curve matches bit for bit.
"""

from __future__ import annotations

import json
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "assets" / "golden_losses.json"
CONFIG = "configs/micro-test.yaml"
STEPS = 20
OVERRIDES = [f"train.steps={STEPS}", "train.threads=1", "train.deterministic=true", "train.seed=1337"]
TOLERANCE = 5e-6
"""Largest absolute difference allowed at any step (the losses fall from about 5.5 to 4.9: an ulp is 4.8e-7)."""


def golden_losses(project: Path) -> list[float]:
    """Each step's training loss of the golden run, trained in `project` (a git repository with `logbook init` done)."""
    from logbook.eventlog.sink import read_metrics
    from trainer.config import load_train_config
    from trainer.startup import build_trainer

    cfg = load_train_config(ROOT / CONFIG, OVERRIDES)
    build_trainer(cfg, project_root=project, run_id="golden", interactive=False, env={}).fit()
    rows = read_metrics(project / "entries" / "runs" / "golden")
    return [r["loss"] for r in sorted(rows, key=lambda r: r["step"]) if "loss" in r]


def test_a_fresh_run_follows_the_golden_loss_curve(logbook_repo):
    golden = json.loads(GOLDEN.read_text())
    assert golden["config"] == CONFIG and golden["overrides"] == OVERRIDES, "regenerate the file: the run changed"
    got = golden_losses(logbook_repo)
    want = golden["losses"]
    assert len(got) == len(want) == STEPS
    worst = max(abs(a - b) for a, b in zip(got, want))
    assert worst <= TOLERANCE, (f"the loss curve moved by up to {worst:.3g} (tolerance {TOLERANCE}); if the change "
                                f"to the numerics is intended, regenerate {GOLDEN.relative_to(ROOT)}:\n"
                                f"  got  {got}\n  want {want}")


def _regenerate() -> None:
    import torch

    from logbook.records.init import init_logbook

    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp)
        for args in (["init", "-q", "-b", "main"], ["-c", "user.name=golden", "-c", "user.email=golden@example.org",
                                                    "commit", "-q", "--allow-empty", "-m", "start"]):
            subprocess.run(["git", *args], cwd=repo, check=True)
        init_logbook(start=repo)
        losses = golden_losses(repo)
    record = {"config": CONFIG, "overrides": OVERRIDES, "torch": torch.__version__,
              "python": platform.python_version(), "machine": platform.machine(),
              "regenerate": "PYTHONPATH=$PWD python3 tests/test_golden_curve.py", "losses": losses}
    GOLDEN.parent.mkdir(parents=True, exist_ok=True)
    GOLDEN.write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {len(losses)} losses to {GOLDEN.relative_to(ROOT)}", file=sys.stderr)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    _regenerate()
