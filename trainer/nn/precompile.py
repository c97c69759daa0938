"""The compiled training step saved whole with the run, so a restart loads it instead of tracing again.

With inductor's caches alone (trainer/compiling.py) a restart still runs
dynamo over the model's Python to find the graph, and inductor over the
graph to find its cache key: most of a second for a small model on a CPU,
far more for a large one, on every attempt. `PrecompiledModel` saves what
that produces (the graph with its guards, the compiled forward and backward)
with torch's ahead-of-time API, and a restart loads it: tens of milliseconds.

Loading never trades correctness for speed:

- Each saved graph is named by everything that shapes it and that guards do
  not check: torch, Python, the machine's CPU or GPU, the installed torch's
  files, and the caller's key (config, batch shape, tracking state).
- Guards check the rest on every call (shapes, dtypes, grad mode, the
  module's attributes), as torch.compile's own would.
- The source of every module dynamo read while tracing is stored with the
  graph; an edited module, however small the edit, makes a fresh compile.
- Anything else that goes wrong (a graph break, an API this torch lacks, a
  torn or foreign file) falls back to plain torch.compile, which still finds
  its kernels in inductor's cache. `how` says which path each graph took.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import platform
import sys
from pathlib import Path
from typing import Any

import torch
from torch import nn

FOLDER = "precompiled"

LOADED, COMPILED, TRACED = "loaded", "compiled", "traced"
"""How a graph came to be: loaded from the run's saved graphs, compiled and saved, or left to torch.compile."""


def machine_fingerprint(device: torch.device) -> dict[str, str]:
    """What the generated kernels were built for: the CPU's model and flags, or the GPU's name and capability."""
    info = {"machine": platform.machine(), "python": sys.version.split()[0], "torch": torch.__version__}
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
        info["capability"] = ".".join(map(str, torch.cuda.get_device_capability(device)))
        return info
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        lines = [platform.processor()]
    wanted = ("model name", "flags", "Features", "CPU part")
    seen = sorted({ln.strip() for ln in lines if ln.split(":")[0].strip() in wanted})
    info["cpu"] = hashlib.sha256("\n".join(seen).encode()).hexdigest()[:16]
    return info


class PrecompiledModel(nn.Module):
    """The model the step calls under `train.compile`: a saved graph when its guards pass, else torch.compile.

    `prepare(idx, targets, key)` readies a graph for the model's current state
    before the first step (loaded, or compiled and saved); a call whose state
    no prepared graph fits goes to torch.compile, made on first need.
    """

    def __init__(self, model: nn.Module, folder: Path | None, identity: dict[str, Any]) -> None:
        super().__init__()
        self.module = model  # a submodule, so DDP and .train()/.eval() see through
        self._folder = folder
        self._identity = identity
        self._graphs: list[Any] = []
        self._jit: Any = None
        self.how: dict[str, str] = {}
        """For each prepared key: LOADED, COMPILED or TRACED."""

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None) -> Any:
        for graph in self._graphs:
            if graph.guard_check(self.module, idx, targets):
                return graph(self.module, idx, targets)
        return self._traced()(idx, targets)

    def _traced(self) -> Any:
        if self._jit is None:
            self._jit = torch.compile(self.module, dynamic=False)
        return self._jit

    def prepare(self, idx: torch.Tensor, targets: torch.Tensor | None, key: str) -> str:
        """Ready a graph for these inputs in the model's current state; returns how (LOADED, COMPILED, TRACED)."""
        if any(g.guard_check(self.module, idx, targets) for g in self._graphs):
            return self.how.setdefault(key, LOADED)
        path = self._path(key)
        graph = _load(path, self.module, idx, targets) if path is not None else None
        how = LOADED
        if graph is None:
            graph, how = _compile_and_save(self.module, idx, targets, path), COMPILED
        if graph is None:
            self.how[key] = TRACED
            return TRACED
        graph.disable_guard_check()  # checked in forward, which picks among the graphs
        self._graphs.append(graph)
        self.how[key] = how
        return how

    def _path(self, key: str) -> Path | None:
        if self._folder is None:
            return None
        name = json.dumps({**self._identity, "key": key}, sort_keys=True, default=str)
        return self._folder / f"{hashlib.sha256(name.encode()).hexdigest()[:32]}.bin"


def _load(path: Path, model: nn.Module, idx: torch.Tensor, targets: torch.Tensor | None) -> Any:
    """The saved graph at `path` if it exists, loads, was traced from today's sources and fits these inputs."""
    if not path.is_file():
        return None
    try:
        with path.open("rb") as f:
            graph = torch.compiler.load_compiled_function(f, f_globals=_globals_of(model))
        if not _sources_unchanged(graph) or not graph.guard_check(model, idx, targets):
            return None
        return graph
    except Exception:  # noqa: BLE001 - torn, from another torch, or refused: compile afresh and save over it
        return None


def _compile_and_save(model: nn.Module, idx: torch.Tensor, targets: torch.Tensor | None, path: Path | None) -> Any:
    """Trace and compile the whole forward (with its backward) ahead of time; save it when there is a folder."""
    try:
        compiled = torch.compile(type(model).forward, fullgraph=True, dynamic=False)
        graph = compiled.aot_compile(((model, idx, targets), {}))
    except Exception:  # noqa: BLE001 - a graph break or an older torch: torch.compile traces it instead
        return None
    if path is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            graph.save_compiled_function(str(path))  # written to a temporary file, then renamed
        except Exception:  # noqa: BLE001 - unsaved, the next attempt compiles again; this one trains on
            pass
    return graph


def _globals_of(model: nn.Module) -> dict[str, Any]:
    return vars(sys.modules[type(model).__module__])


def _sources_unchanged(graph: Any) -> bool:
    """Whether every module the graph was traced from reads today as it read then."""
    sources = graph.source_info().inlined_sources
    for name in {s.module for s in sources}:
        module = sys.modules.get(name)
        recorded = {s.content for s in sources if s.module == name}
        try:
            if module is None or recorded != {inspect.getsource(module)}:
                return False
        except (OSError, TypeError):
            return False
    return True


def precompiled_folder(cache_dir: Path) -> Path:
    """Where a run's saved graphs live: beside inductor's cache, under .logbook/compile-cache/."""
    return Path(cache_dir) / FOLDER


def identity(device: torch.device, torch_stamp: str, extra: dict[str, Any]) -> dict[str, Any]:
    """Everything a saved graph depends on that its guards do not check."""
    return {**machine_fingerprint(device), "torch_files": torch_stamp, **extra,
            "env": {k: os.environ[k] for k in sorted(os.environ) if k.startswith("TORCHINDUCTOR_")
                    and k != "TORCHINDUCTOR_CACHE_DIR"}}
