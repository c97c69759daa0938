"""DCP checkpoints: every rank writes its own shards with torch.distributed.checkpoint.

Runs of more than one rank save this way (`checkpoint.format`: auto picks it
there, or dcp asks for it); one process keeps the `torch.save` format of
trainer/checkpoints/checkpoint.py, behind the same `Checkpointer`. The folder is the same
`step_NNNNNN/` with a manifest and a COMPLETE marker written last by rank 0,
so restore, retention, rollback and the drills read both alike:

    step_000008/
      __0_0.distcp, __1_0.distcp  each rank's shards (FSDP2 parameters and optimizer
                                  state; a replicated tensor is written once)
      .metadata                   DCP's index of every tensor's shards
      state.pt                    step, data position, every rank's RNG, callbacks,
                                  config (rank 0, `torch.save`, loaded weights_only)
      manifest.json, COMPLETE     as for the torch format

Every rank writes into `.tmp-step_NNNNNN-dcp`, a name each derives from the
step, so the save path needs no broadcast. A kill of any rank at any moment
before COMPLETE leaves a temp folder that the restart cleans and names as an
unfinished save; the newest COMPLETE checkpoint is the one resumed.

Asynchronous save: `dcp.async_save` copies the state into CPU memory on the
calling thread (the part that blocks training) and writes from a thread, over
a gloo group of its own so its collectives never interleave with training's.
Rank 0's future resolves only after DCP's finish step, which runs once every
rank's write results are gathered, and FileSystemWriter fsyncs each file: the
write is durable on every rank. Only then does rank 0 add `state.pt`, the
manifest and COMPLETE, and emit `checkpoint_saved`.

Loading: each rank builds its state dict in its current layout (sharded or
not, any world size) and `dcp.load` fills it from the layout that saved it,
so 2 ranks' checkpoint loads into 1 rank, and the reverse.
"""

from __future__ import annotations

import contextlib
import errno
import os
import warnings
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import torch
import torch.distributed as tdist

from ..job import dist


def _dcp():
    """torch.distributed.checkpoint, imported when a DCP checkpoint is first touched.

    About a second of imports that a one-process run (the torch format)
    would otherwise pay at every start and restart.
    """
    import torch.distributed.checkpoint as dcp

    return dcp

FORMATS = ("auto", "torch", "dcp")


def resolve_format(asked: str, world_size: int) -> str:
    """The format a run saves in: auto is dcp with more than one rank, torch alone."""
    if asked == "auto":
        return "dcp" if world_size > 1 else "torch"
    return asked


def save_group() -> Any:
    """A gloo group for checkpoint collectives (a collective: every rank calls it); None alone.

    An asynchronous save runs its collectives from a thread while training
    runs its own: on one group their order could differ between ranks.
    """
    if not (tdist.is_available() and tdist.is_initialized()):
        return None
    return tdist.new_group(backend="gloo")


def start_save(state: dict[str, Any], tmp: Path, group: Any, background: bool) -> Future | None:
    """Write `state` (model and optimizer, as each rank holds them) into `tmp`; a future when in the background."""
    tmp.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings(), _shard_errors():  # alone, DCP warns "assuming ... a single process": it is
        warnings.filterwarnings("ignore", message=".*single process", category=UserWarning)
        if background:
            return _dcp().async_save(state, checkpoint_id=str(tmp), process_group=group)
        _dcp().save(state, checkpoint_id=str(tmp), process_group=group)
    return None


def wait_shards(future: Future) -> None:
    """Block until this rank's part of an asynchronous save is written (on rank 0: every rank's, and the index)."""
    with _shard_errors():
        future.result()


class ShardWriteFailed(Exception):
    """Some rank could not write its shards (a full disk, a missing folder); the save failed on every rank."""


@contextlib.contextmanager
def _shard_errors():
    """DCP's CheckpointException, a BaseException that names each failing rank, as a `ShardWriteFailed`."""
    from torch.distributed.checkpoint.api import CheckpointException

    try:
        yield
    except CheckpointException as e:
        lines = str(e).strip().splitlines()
        raise ShardWriteFailed(f"ranks {sorted(e.failures)} failed: {lines[-1] if lines else type(e).__name__}") from None


def check_shards(tmp: Path) -> None:
    """Every shard file DCP's index names is in `tmp` (rank 0, before the seal), or OSError.

    A rank on another node whose checkpoint folder is not this one (no shared
    filesystem) wrote its shards elsewhere: without this check the checkpoint
    would be sealed and fail only on resume.
    """
    index = _dcp().FileSystemReader(str(tmp)).read_metadata().storage_data or {}
    missing = sorted({info.relative_path for info in index.values()} - {p.name for p in tmp.iterdir()})
    if missing:
        raise OSError(errno.ENOENT, f"shard files {', '.join(missing)} are not in {tmp.parent} (every rank must "
                      "write into the same checkpoint folder: put checkpoint.dir on a filesystem all nodes share)")


def load_into(model: torch.nn.Module, optimizer: Any, path: Path, group: Any) -> None:
    """Load a DCP checkpoint's model and optimizer into this rank's tensors, resharding as needed."""
    sd = dist.sharded_state(model, optimizer)
    _load(sd, path, group)
    dist.load_sharded_state(model, optimizer, sd)


def _load(sd: dict[str, Any], path: Path, group: Any) -> None:
    with warnings.catch_warnings():  # alone, DCP warns "assuming the intent is to load in a single process": it is
        warnings.filterwarnings("ignore", message=".*single process", category=UserWarning)
        _dcp().load(sd, checkpoint_id=os.fspath(path), process_group=group)


def _metadata(path: Path) -> dict[str, Any]:
    return _dcp().FileSystemReader(str(path)).read_metadata().state_dict_metadata


def saved_shapes(path: Path) -> dict[str, torch.Tensor]:
    """The saved model's parameters as shape-only (meta) tensors, for `check_model_compatible`."""
    return {k.removeprefix("model."): torch.empty(tuple(m.size), device="meta")
            for k, m in _metadata(path).items() if k.startswith("model.") and hasattr(m, "size")}


def read_model(path: Path) -> dict[str, torch.Tensor]:
    """The whole model state of a checkpoint of either format, in one process: for inspection and tests."""
    path = Path(path)
    if (path / "model.pt").exists():
        return torch.load(path / "model.pt", weights_only=True, map_location="cpu")
    if tdist.is_available() and tdist.is_initialized():
        raise RuntimeError("read_model reads in one process; use load_into inside a process group")
    sd = {k: torch.empty(tuple(m.size), dtype=m.properties.dtype)
          for k, m in _metadata(path).items() if k.startswith("model.") and hasattr(m, "size")}
    _load(sd, path, None)
    return {k.removeprefix("model."): v for k, v in sd.items()}
