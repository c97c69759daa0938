"""`train.compile`: torch.compile with a cache that outlives the attempt, paid before the first step.

A compiled run that is killed would otherwise compile again on every restart
(tens of seconds on a CPU, minutes for a large model on a GPU), in the
middle of the downtime the run is trying to keep short. These keep it to
once per run (and `trainer/launch/prewarm.py` does the imports and start-up checks
once per launch, in the fork server the workers come from):

- `compile_model` wraps the model in a `PrecompiledModel`
  (trainer/nn/precompile.py): the first attempt compiles the whole forward and
  backward ahead of time and saves it; later attempts load it (about a tenth
  of a second here) instead of tracing the model again. FSDP2's per-block
  hooks keep plain torch.compile, whose kernels the caches below still keep.

- `CompileCache` points inductor's on-disk caches (FX graphs, AOT autograd
  graphs, generated kernels; Triton's kernels live under inductor's folder)
  at `.logbook/compile-cache/` for the attempt. A restart of the run, and any
  later run of the same code and shapes, finds its kernels there instead of
  generating them again. Inductor's cache keys hold the graph, the torch
  version, the device and its own config, so a changed model is compiled
  afresh, never run with stale kernels.
- `reuse_torch_key` keeps inductor's fingerprint of torch's own source files
  (a hash of every module in the package, part of every cache key) with the
  cache, so a restart reads it back instead of hashing a few thousand files
  again; a stat of each of those files says whether torch is unchanged.
- On a CPU, inductor checks which SIMD levels it can build for by loading a
  test library per level in a child Python (six of them on an AVX-512
  machine, about a quarter of a second), once per process, before it loads
  the first kernel. `CompileCache` starts those checks on a thread as the
  attempt begins: the children run beside the attempt's own start-up
  (building the model, loading the checkpoint) instead of in front of the
  first step. Their answers are torch's own, kept where torch keeps them.
- `warm_up` runs the compiled forward and backward once before the first step
  and times it, so `run_started` can say what compiling cost (`compile_s`) and
  goodput can count it as its own badput. It leaves no trace: the random
  generators are restored and the gradients dropped, so the run computes
  bit for bit what it would have computed without it.
"""

from __future__ import annotations

import contextvars
import hashlib
import json
import os
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from .job.fsio import atomic_write_json

from .checkpoints.rng import get_rng_state, set_rng_state
from .nn.precompile import PrecompiledModel, identity, precompiled_folder

if TYPE_CHECKING:
    from .loop import Trainer

CACHE_FOLDER = "compile-cache"
TORCH_KEY_FILE = "torch-key.json"


def cache_env(state_dir: Path) -> dict[str, str]:
    """The environment that puts inductor's caches under the project's state folder."""
    return {
        "TORCHINDUCTOR_CACHE_DIR": str(Path(state_dir) / CACHE_FOLDER / "inductor"),
        "TORCHINDUCTOR_FX_GRAPH_CACHE": "1",
        "TORCHINDUCTOR_AUTOGRAD_CACHE": "1",
    }


class CompileCache:
    """Sets `cache_env` for the life of an attempt; `close()` puts the environment back as it was."""

    def __init__(self, state_dir: Path, device_type: str = "cpu") -> None:
        self.env = cache_env(state_dir)
        self._before = {k: os.environ.get(k) for k in self.env}
        Path(self.env["TORCHINDUCTOR_CACHE_DIR"]).mkdir(parents=True, exist_ok=True)
        os.environ.update(self.env)
        # Inductor's settings for the attempt, each put back by `close()`.
        settings = _settings(device_type)
        self._settings_before = [(obj, name, getattr(obj, name)) for obj, name, _ in settings]
        for obj, name, value in settings:
            setattr(obj, name, value)
        self.torch_stamp = torch_files_stamp()
        """Names the saved graphs too (trainer/nn/precompile.py)."""
        reuse_torch_key(self.path.parent, self.torch_stamp)
        self._isa_probe = _probe_cpu_isa_in_background() if device_type == "cpu" else None

    def ready(self) -> None:
        """Wait for the start-up checks begun in the background; call before the first compile."""
        if self._isa_probe is not None:
            self._isa_probe.join()

    @property
    def path(self) -> Path:
        return Path(self.env["TORCHINDUCTOR_CACHE_DIR"])

    def close(self) -> None:
        self.ready()
        for obj, name, value in self._settings_before:
            setattr(obj, name, value)
        for k, v in self._before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _settings(device_type: str) -> list[tuple[Any, str, Any]]:
    """(config module, attribute, value) for each inductor setting an attempt runs with."""
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config

    # The two cache flags are read once, when inductor's config is first imported; a
    # process that imported it before (tests, benchmarks) needs them set here.
    settings = [(inductor_config, "fx_graph_cache", True), (functorch_config, "enable_autograd_cache", True),
                # The generated step checks the size and strides of every input and of every
                # extern or custom operator's output, on every call: about a hundred Python
                # calls a step, 0.7% of a small model's compiled step on a CPU. The guards
                # already check the inputs, and the custom operators' layouts are pinned by
                # their fake functions and tested against eager (tests/test_compile.py).
                (inductor_config, "size_asserts", False), (inductor_config, "alignment_asserts", False)]
    if device_type == "cpu":
        settings += [
            # Otherwise every process start builds a test library per SIMD level and
            # dlopens each in a Python subprocess (several seconds of a restart on a
            # busy machine). The CPU's own flags name the levels it has; the probe only
            # guards against a compiler that cannot target them. Set in every attempt,
            # since inductor's cache keys include it.
            (inductor_config.cpp, "vec_isa_ok", True),
            # A precompiled header only speeds up compiling kernels, yet inductor builds
            # it (a preprocessor run and a hash of its output, about 0.3 s) whenever a
            # process first loads a cached kernel: on every restart, where nothing is
            # compiled. Off, a restart only loads; the first compile of a run's code
            # takes longer instead. The kernels are the same code with the same flags.
            (inductor_config, "cpp_cache_precompile_headers", False),
        ]
    return settings


def _probe_cpu_isa_in_background() -> threading.Thread:
    """Start inductor's check of the CPU's SIMD levels on a thread; its answer is cached for the process.

    Each level's check compiles a test library (once, into the cache) and loads
    it in a child Python: the thread spends its time waiting on children, so it
    takes little from the attempt's own start-up. Every module it needs is
    imported here, on the caller's thread, so the thread itself imports nothing.
    """
    from torch._inductor import codecache, cpp_builder, cpu_vec_isa  # noqa: F401
    from torch.utils import _filelock  # noqa: F401

    def probe() -> None:
        try:
            cpu_vec_isa.valid_vec_isa_list()
        except Exception:  # noqa: BLE001 - the compile itself asks again, and reports what fails
            pass

    # In the caller's context: inductor's settings (vec_isa_ok among them) are per thread,
    # and a thread of its own would run the very checks that setting skips.
    thread = threading.Thread(target=contextvars.copy_context().run, args=(probe,), name="inductor-isa-probe",
                              daemon=True)
    thread.start()
    return thread


# What inductor's own hash reads: modules (Python and compiled) and two runtime files.
_SOURCE_SUFFIXES = (".py", ".so", ".pyd", ".cpp", ".ld")


def torch_files_stamp() -> str:
    """A hash of the path, size and modification time of every source file in the installed torch package.

    Reading the metadata of each file costs a small part of hashing their
    contents, and any edit, reinstall or upgrade changes it.
    """
    root = Path(torch.__file__).parent
    h = hashlib.sha256(f"{torch.__version__}\0{root}".encode())
    for folder, dirs, files in os.walk(root):
        # Bytecode caches appear as modules are first imported; they say nothing new about the source.
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(f for f in files if f.endswith(_SOURCE_SUFFIXES)):
            path = os.path.join(folder, name)
            try:
                st = os.stat(path)
            except OSError:
                continue
            h.update(f"{path}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def reuse_torch_key(folder: Path, stamp: str | None = None) -> bool:
    """Give inductor the stored hash of torch's source files, or store it; True when it was reused.

    Inductor puts a hash of torch's source (`torch_key`, up to a second of
    reading files on every process start) into each cache key. It is cached
    per process and can be set ahead, which inductor's own compile workers do.
    Without that hook, or with a key already in place, nothing changes.
    """
    from torch._inductor import codecache

    key_fn = codecache.torch_key
    if not callable(getattr(key_fn, "set", None)):
        return False
    stamp = stamp or torch_files_stamp()
    file = Path(folder) / TORCH_KEY_FILE
    try:
        saved = json.loads(file.read_text())
        if saved.get("stamp") == stamp:
            key_fn.set(bytes.fromhex(saved["key"]))
            return True
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RuntimeError):
        pass  # absent, torn by a crash, from another torch, or already set: hash as inductor would
    try:
        atomic_write_json(file, {"torch": torch.__version__, "stamp": stamp, "key": key_fn().hex()})
    except OSError:
        pass  # a read-only cache still compiles; the next attempt hashes again
    return False


def compile_model(model: torch.nn.Module, cache: CompileCache, device: torch.device,
                  key: dict[str, Any], whole: bool = True) -> torch.nn.Module:
    """The model under torch.compile (inductor, static shapes: every training batch has one shape).

    `whole`: as one saved graph a restart loads (trainer/nn/precompile.py), named
    by `key` (what of the config shapes the graph); otherwise (FSDP2's hooks
    around each block) plain torch.compile, whose kernels the cache still keeps.
    """
    if not whole:
        return torch.compile(model, dynamic=False)
    return PrecompiledModel(model, precompiled_folder(cache.path.parent), identity(device, cache.torch_stamp, key))


def _precompiled(model: torch.nn.Module) -> PrecompiledModel | None:
    """The `PrecompiledModel` inside what the loop calls (DDP wraps it as `.module`), if any."""
    while model is not None and not isinstance(model, PrecompiledModel):
        model = getattr(model, "module", None)
    return model


def warm_up(t: Trainer) -> float:
    """Compile the training step ahead of the first step (or load it); returns the seconds it took.

    Readies one graph for each max-logit tracking state the loop will use
    (`PrecompiledModel.prepare`), runs forward and backward on the batch the
    run trains on next through each, then drops the gradients and restores
    every random generator.
    """
    cfg = t.cfg
    if t.compile_cache is not None:
        t.compile_cache.ready()
    track = cfg.optim.qk_clip_tau > 0
    states = sorted({track and micro == cfg.train.grad_accum - 1 for micro in range(cfg.train.grad_accum)})
    whole = _precompiled(t.model)
    rng = get_rng_state()
    start = time.perf_counter()
    try:
        for tracking in states:
            x, y = t.data.batch(t.data.next_batch, 0)
            t.raw_model.set_max_logit_tracking(tracking)
            with t.autocast:
                if whole is not None:
                    whole.prepare(x, y, key=f"max_logit_tracking={tracking}")
                out = t.model(x, y)
            out.loss.backward()
            t.optimizer.zero_grad(set_to_none=True)
        if t.device.type == "cuda":
            torch.cuda.synchronize(t.device)
    finally:
        t.raw_model.set_max_logit_tracking(False)
        set_rng_state(rng)
    if whole is not None:
        t.compile_graphs = dict(whole.how)
    return time.perf_counter() - start
