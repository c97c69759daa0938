"""`train.compile`: the compiled trainer, killed for real, resumes bit for bit and does not compile again.

One compiled run is the reference. A second run of the same config is
SIGKILLed by a drill and relaunched, as torchrun would. Both carry what the
compiled step must keep working: QK-clip (its max-logit probe runs inside the
compiled forward), a live change submitted before the start, a loss spike the
guard answers with a rollback. Every step's loss and the final weights must
match bit for bit, the restart must find its kernels in the run's compile
cache under .logbook/ instead of compiling again, and `run_started` must say
what compiling cost.

The first compile of the micro model takes tens of seconds on a CPU: slow.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import ROOT
from lab import Lab

from logbook.core.project import open_project
from logbook.launch.change_requests import new_request, write_request
from logbook.eventlog.sink import read_metrics

pytestmark = pytest.mark.slow

MICRO = ROOT / "configs" / "micro-test.yaml"
STEPS = 16
COMMON = [f"train.steps={STEPS}", "train.eval_every=0", "checkpoint.every=4", "checkpoint.background=false",
          "optim.qk_clip_tau=0.5", "guard.warmup=4", "guard.cooldown=2", "guard.rollback_after=1",
          "guard.skip_batches=2", "train.compile=true"]


class Repo(Lab):
    """The shared scratch logbook (`lab.Lab`), training the micro config with compile on."""

    def __init__(self, root: Path, home: Path) -> None:
        super().__init__(root, home)
        self.env.pop("TORCHINDUCTOR_CACHE_DIR", None)  # the run keeps its own cache under .logbook/

    def train(self, run: str, *overrides: str) -> subprocess.CompletedProcess:  # type: ignore[override]
        return super().train(run, MICRO, *overrides, timeout=600)

    def ask_for_change(self, run: str) -> None:
        """A live change waiting before the run starts, so both runs take it at the same step."""
        request = new_request(run, {"lr": 2e-3, "grad_clip": 0.5}, "test: a change under compile", "Ada Tester")
        write_request(open_project(self.root).control_dir(run), request)

    def losses(self, run: str) -> dict[int, float]:
        return {r["step"]: r["loss"] for r in read_metrics(self.root / "entries" / "runs" / run) if "loss" in r}

    def weights(self, run: str) -> dict[str, torch.Tensor]:
        path = self.root / ".logbook" / "checkpoints" / run / f"step_{STEPS:06d}" / "model.pt"
        return torch.load(path, weights_only=True)

    def cache_files(self) -> set[str]:
        cache = self.root / ".logbook" / "compile-cache"
        return {str(p.relative_to(cache)) for p in cache.rglob("*") if p.is_file()}


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Repo:
    return Repo.create(tmp_path_factory.mktemp("compiled"))


@pytest.fixture(scope="module")
def runs(repo) -> dict:
    """The reference (spike at step 10), and the same run killed after step 6 then relaunched (spike in attempt 2)."""
    repo.ask_for_change("reference")
    ref = repo.train("reference", *COMMON, "faults=[{kind: spike, step: 10, factor: 50}]")
    assert ref.returncode == 0, ref.stderr[-3000:]
    cache_after_reference = repo.cache_files()
    repo.ask_for_change("killed")
    drills = "faults=[{kind: sigkill, step: 6}, {kind: spike, step: 10, factor: 50, attempt: 2}]"
    first = repo.train("killed", *COMMON, drills)
    cache_after_kill = repo.cache_files()
    second = repo.train("killed", *COMMON, drills)
    assert second.returncode == 0, second.stderr[-3000:]
    return {"codes": [first.returncode, second.returncode], "cache_after_reference": cache_after_reference,
            "cache_after_kill": cache_after_kill, "cache_after_resume": repo.cache_files()}


def test_a_killed_compiled_run_resumes_bit_for_bit_through_qk_clip_a_live_change_and_a_rollback(repo, runs):
    assert runs["codes"] == [-signal.SIGKILL, 0]
    expected = repo.losses("reference")
    assert sorted(expected) == list(range(1, STEPS + 1))
    assert repo.losses("killed") == expected
    ref_w, got_w = repo.weights("reference"), repo.weights("killed")
    assert ref_w.keys() == got_w.keys() and all(torch.equal(ref_w[k], got_w[k]) for k in ref_w)
    for run in ("reference", "killed"):
        kinds = [e["kind"] for e in repo.events(run)]
        assert "rollback" in kinds and "hparam_change" in kinds, kinds
    # QK-clip acted: the probe inside the compiled forward reported, and some head gains shrank.
    assert any(r.get("max_logit", 0) > 0.5 for r in read_metrics(repo.root / "entries" / "runs" / "killed"))
    assert any((v < 1).any() for k, v in got_w.items() if k.endswith("q_gain"))


def test_the_restart_finds_its_kernels_in_the_cache_under_dot_logbook(runs):
    cached = runs["cache_after_reference"]
    assert cached, "the compiled run left no cache under .logbook/compile-cache"
    assert any(n.startswith("precompiled/") for n in cached)  # the whole step, saved
    assert any(n.startswith("inductor/") and n.endswith(".so") for n in cached)  # its kernels, built
    # The killed run has the reference's code and shapes: neither of its attempts compiled anything.
    new_code = {n for n in runs["cache_after_resume"] - cached if n.endswith((".so", ".py", ".bin"))}
    assert new_code == set()


def test_the_step_is_compiled_once_and_every_later_attempt_loads_its_saved_graphs(repo, runs):
    graphs = {run: [e["data"]["compile_graphs"] for e in repo.events(run) if e["kind"] == "run_started"]
              for run in ("reference", "killed")}
    # One graph per max-logit tracking state: QK-clip probes on the last micro-batch only.
    assert graphs["reference"] == [{"max_logit_tracking=True": "compiled"}]
    assert graphs["killed"] == [{"max_logit_tracking=True": "loaded"}] * 2
    assert any(n.startswith("precompiled/") for n in runs["cache_after_reference"])


def test_run_started_says_the_run_was_compiled_and_what_compiling_cost(repo, runs):
    for run in ("reference", "killed"):
        started = [e["data"] for e in repo.events(run) if e["kind"] == "run_started"]
        assert started and all(d["compiled"] is True and d["compile_s"] > 0 for d in started)
        assert {d["attention_backend"] for d in started} == {"sdpa"}


def test_the_compiled_step_computes_what_the_eager_step_computes_to_float_rounding(repo, runs):
    # The settings of `runs`, compiled by then, so this run finds its kernels in the cache.
    overrides = [o for o in COMMON if not o.startswith(("train.steps=", "checkpoint.every=", "train.compile="))]
    overrides += ["train.steps=3", "checkpoint.every=3"]
    for run, extra in (("eager3", []), ("compiled3", ["train.compile=true"])):
        res = repo.train(run, *overrides, *extra)
        assert res.returncode == 0, res.stderr[-3000:]
    eager, compiled = repo.losses("eager3"), repo.losses("compiled3")
    assert sorted(eager) == sorted(compiled) == [1, 2, 3]
    assert all(compiled[s] == pytest.approx(eager[s], rel=1e-4) for s in eager)


def test_a_stored_torch_key_is_used_only_while_the_installed_torch_is_unchanged(tmp_path):
    from trainer.compiling import TORCH_KEY_FILE, reuse_torch_key, torch_files_stamp

    key_file = tmp_path / TORCH_KEY_FILE
    # A stale file (another torch): hashed again, and the file now holds this torch's stamp and real key.
    key_file.write_text('{"stamp": "from another torch", "key": "00"}')
    assert reuse_torch_key(tmp_path) is False
    from torch._inductor.codecache import torch_key

    stored = json.loads(key_file.read_text())
    assert stored["stamp"] == torch_files_stamp() and stored["key"] == torch_key().hex()
    # A fresh process with a matching stamp takes the stored key as it is, without hashing.
    stored["key"] = "ab" * 32
    key_file.write_text(json.dumps(stored))
    probe = ("import sys; from pathlib import Path; from trainer.compiling import reuse_torch_key; "
             "from torch._inductor.codecache import torch_key; "
             "print(reuse_torch_key(Path(sys.argv[1])), torch_key().hex())")
    out = subprocess.run([sys.executable, "-c", probe, str(tmp_path)], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["True", "ab" * 32]


# Importing the compiler in this process trips torch's own deprecation of a decorator it still uses.
@pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")
@pytest.mark.parametrize("z_loss", [0.0, 1e-4])
def test_the_compiled_model_gives_the_eager_gradients_with_and_without_a_z_loss(z_loss):
    from trainer.config import load_train_config
    from trainer.nn.model import GPT

    cfg = load_train_config(MICRO, [f"model.z_loss={z_loss}"]).model
    torch.manual_seed(0)
    eager = GPT(cfg)
    compiled_twin = GPT(cfg)
    compiled_twin.load_state_dict(eager.state_dict())
    x, y = (torch.randint(0, cfg.vocab_size, (2, cfg.block_size), generator=torch.Generator().manual_seed(1))
            for _ in range(2))
    eager(x, y).loss.backward()
    out = torch.compile(compiled_twin, dynamic=False)(x, y)
    assert out.loss.requires_grad  # a z-loss of 0 once came back cut off from the graph
    out.loss.backward()
    for (name, p), q in zip(eager.named_parameters(), compiled_twin.parameters()):
        assert torch.allclose(p.grad, q.grad, rtol=1e-4, atol=1e-6), name


_COUNT_PROBES = """
import sys
from pathlib import Path
from torch._inductor import cpu_vec_isa
probes = []
load = cpu_vec_isa.VecISA._probe_load
cpu_vec_isa.VecISA._probe_load = lambda self, path: probes.append(str(self)) or load(self, path)
if sys.argv[2] == "background":
    from trainer.compiling import CompileCache
    cache = CompileCache(Path(sys.argv[1]))
    cache.ready()
    done = cpu_vec_isa.valid_vec_isa_list.cache_info().currsize
    cache.close()
else:  # on this thread, with the setting CompileCache makes
    import torch._inductor.config as config
    config.cpp.vec_isa_ok = True
    done = len(cpu_vec_isa.valid_vec_isa_list()) >= 0
print(int(done), len(probes))
"""


def test_the_cpu_checks_of_inductor_run_in_the_background_as_a_compile_would_run_them(tmp_path):
    def probes(how: str) -> list[str]:
        out = subprocess.run([sys.executable, "-c", _COUNT_PROBES, str(tmp_path), how], cwd=ROOT,
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-2000:]
        return out.stdout.split()

    # Answered by the time the cache is ready, with no compile asking; and with the cache's
    # settings, which are per thread in inductor: the same checks, not the ones they skip.
    assert probes("background") == probes("here") and probes("background")[0] == "1"


def test_the_generated_step_skips_its_size_checks_while_the_cache_is_open_and_puts_them_back(tmp_path):
    import torch._inductor.config as inductor_config

    from trainer.compiling import CompileCache

    before = (inductor_config.size_asserts, inductor_config.alignment_asserts)
    cache = CompileCache(tmp_path / ".logbook")
    try:
        assert (inductor_config.size_asserts, inductor_config.alignment_asserts) == (False, False)
    finally:
        cache.close()
    assert (inductor_config.size_asserts, inductor_config.alignment_asserts) == before
