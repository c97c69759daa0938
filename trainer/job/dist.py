"""Process-group plumbing: ranks from torchrun's environment, and agreement helpers.

With one process every helper is the identity, so the loop reads the same
whether it runs alone or under `torchrun --nproc-per-node N`.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from logbook.api import UsageError



@dataclass
class DistInfo:
    """This worker's place in the attempt."""

    rank: int = 0
    """Rank in the run: ordered by (node, local rank), so node 0's first worker is rank 0."""
    local_rank: int = 0
    """Index among this node's workers (and its CUDA device)."""
    world_size: int = 1
    """Workers in the attempt, all nodes together."""
    device: torch.device = torch.device("cpu")
    """Where this worker computes."""
    members: list[dict] = field(default_factory=list)
    """Every worker as {rank, node, local_rank, host, pid}, in rank order (empty alone)."""
    group_id: str = ""
    """The attempt's agreed identity: the same on every worker of one attempt, new for each attempt."""

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    def node_of(self, rank: int) -> int | None:
        """The node rank of `rank`, when known."""
        return int(self.members[rank]["node"]) if 0 <= rank < len(self.members) else None


def pick_device(pref: str, local_rank: int = 0) -> torch.device:
    if pref == "cpu" or (pref == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise UsageError("train.device is cuda but no CUDA device is available", hint="use train.device=cpu or auto")
    return torch.device("cuda", local_rank)


def set_deterministic(mode: bool, warn_only: bool = False, compiling: bool = False) -> None:
    """torch.use_deterministic_algorithms without its import of torch._inductor unless it matters.

    The public call imports torch._inductor.config (and sympy with it) to set one
    flag for compiled code: about 3 s added to every process start, paid again on
    each restart. Eager runs need only the C++ switch; compiled runs, or a process
    that has already loaded inductor, get the full call. Nothing happens when the
    state is already as asked.
    """
    # Deterministic mode also fills every new tensor with NaN, a trap for kernels that read
    # memory they never wrote: on a CPU, a pass over each allocation (a few percent of a
    # step). Every op this trainer runs writes its whole output, so runs stay bit for bit
    # reproducible without it; off while deterministic, back to PyTorch's default after.
    torch._C._set_deterministic_fill_uninitialized_memory(not mode)
    if (torch.are_deterministic_algorithms_enabled() == mode
            and torch.is_deterministic_algorithms_warn_only_enabled() == warn_only
            and not compiling):
        return
    if compiling or "torch._inductor.config" in sys.modules:
        torch.use_deterministic_algorithms(mode, warn_only=warn_only)
    else:
        torch._C._set_deterministic_algorithms(mode, warn_only=warn_only)


def init_distributed(device_pref: str) -> DistInfo:
    """Read LOCAL_RANK/WORLD_SIZE; with more than one worker, join the attempt's group (see `rendezvous`)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    device = pick_device(device_pref, local)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if world == 1 or dist.is_initialized():
        rank = dist.get_rank() if dist.is_initialized() else 0
        return DistInfo(rank=rank, local_rank=local, world_size=world, device=device)
    from .rendezvous import join_group  # only multi-worker runs need it: a single process starts without it

    group = join_group(world)
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(backend=backend, store=group.store, rank=group.rank, world_size=world)
    members = [{"rank": r, "node": m.node, "local_rank": m.local_rank, "host": m.host, "pid": m.pid}
               for r, m in enumerate(group.members)]
    return DistInfo(rank=group.rank, local_rank=local, world_size=world, device=device, members=members,
                    group_id=group.group_id)


def all_reduce_mean(t: torch.Tensor, info: DistInfo) -> torch.Tensor:
    if not info.enabled:
        return t
    t = t.detach().clone()
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t / info.world_size


def agree_max(value: int, info: DistInfo) -> int:
    """The largest of every rank's value (e.g. "a stop was requested somewhere")."""
    if not info.enabled:
        return value
    t = torch.tensor([value], device=info.device, dtype=torch.int64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return int(t.item())


def broadcast_object(obj, info: DistInfo):
    """Rank 0's value on every rank."""
    if not info.enabled:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def gather_objects(obj, info: DistInfo) -> list:
    """Every rank's value, in rank order, on every rank."""
    if not info.enabled:
        return [obj]
    out = [None] * info.world_size
    dist.all_gather_object(out, obj)
    return out


def barrier(info: DistInfo) -> None:
    if info.enabled:
        dist.barrier()


def shutdown(info: DistInfo) -> None:
    if info.enabled and dist.is_initialized():
        dist.destroy_process_group()


def gather_floats(values: list[float], info: DistInfo) -> list[list[float]]:
    """Every rank's few numbers, in rank order, on every rank: one small all_gather."""
    if not info.enabled:
        return [list(values)]
    t = torch.tensor(values, dtype=torch.float64, device=info.device)
    out = [torch.empty_like(t) for _ in range(info.world_size)]
    dist.all_gather(out, t)
    return [o.tolist() for o in out]


def wrap_model(model: torch.nn.Module, info: DistInfo, parallel: str) -> torch.nn.Module:
    """The module the loop calls: itself alone, DDP replicas, or FSDP2 shards (each block, then the root)."""
    if not info.enabled:
        return model
    if parallel == "fsdp":
        # FSDP2 runs on CPU too (gloo's all_gather and reduce_scatter), which is how the tests run it.
        from torch.distributed.fsdp import fully_shard

        for block in getattr(model, "blocks", []):
            fully_shard(block)
        return fully_shard(model)
    from torch.nn.parallel import DistributedDataParallel as DDP

    return DDP(model, device_ids=[info.device.index] if info.device.type == "cuda" else None)


def local_tensor(t: torch.Tensor) -> torch.Tensor:
    """A plain tensor: FSDP2's grad norm is a replicated DTensor, which `.tolist()` and `float()` refuse."""
    full = getattr(t, "full_tensor", None)
    return full() if callable(full) else t


def reshard(model: torch.nn.Module) -> None:
    """After forwards with no backward (evaluation), put an FSDP2 model's parameters back into their shards.

    FSDP2 leaves the root's parameters unsharded after a forward, for the backward
    to use; with no backward, the module keeps the unsharded tensors as its
    parameters instead of those the optimizer steps, and the next checkpoint
    fails (`get_optimizer_state_dict`: KeyError) as a save right after a final
    evaluation did.
    """
    if is_sharded(model):
        model.reshard()


def is_sharded(model: torch.nn.Module) -> bool:
    from torch.distributed.fsdp import FSDPModule

    return isinstance(model, FSDPModule)


def _optimizer_parts(optimizer) -> list[tuple[str | None, torch.optim.Optimizer]]:
    """The torch optimizers inside: the trainer's CombinedOptimizer holds one per parameter role."""
    inner = getattr(optimizer, "optimizers", None)
    return list(inner.items()) if isinstance(inner, dict) else [(None, optimizer)]


def full_state(model: torch.nn.Module, optimizer) -> tuple[dict, dict]:
    """(model, optimizer) state dicts, whole and on the CPU even when sharded: the checkpoint format stays one.

    Sharded, the optimizer's state is keyed by parameter name (torch.distributed.checkpoint's
    full state dict), so it loads into any number of ranks, one included.
    A collective under FSDP: every rank must call it.
    """
    if not is_sharded(model):
        return model.state_dict(), optimizer.state_dict()
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict, get_optimizer_state_dict

    opts = StateDictOptions(full_state_dict=True, cpu_offload=True)
    optim = {name: get_optimizer_state_dict(model, opt, options=opts) for name, opt in _optimizer_parts(optimizer)}
    return get_model_state_dict(model, options=opts), optim.get(None, optim)


def load_full_state(model: torch.nn.Module, optimizer, model_sd: dict, optim_sd: dict) -> None:
    """Load whole state dicts (as `full_state` makes them) into a plain or sharded model and its optimizer."""
    parts = _optimizer_parts(optimizer)
    named = {name: optim_sd if name is None else optim_sd.get(name, {}) for name, _ in parts}
    by_name = any(isinstance(k, str) for sd in named.values() for k in (sd.get("state") or {}))
    if not is_sharded(model) and not by_name:
        model.load_state_dict(model_sd)
        optimizer.load_state_dict(optim_sd)
        return
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict, set_optimizer_state_dict

    opts = StateDictOptions(full_state_dict=True)
    if is_sharded(model):
        set_model_state_dict(model, model_sd, options=opts)
    else:
        model.load_state_dict(model_sd)  # a sharded run's checkpoint, resumed without FSDP (one rank)
    for name, opt in parts:
        set_optimizer_state_dict(model, opt, named[name], options=opts)



def sharded_state(model: torch.nn.Module, optimizer) -> dict:
    """Model and optimizer state as each rank holds it (FSDP2's DTensor shards stay shards), keyed by name.

    What torch.distributed.checkpoint saves and loads into: no gather to one
    rank, and the names (not parameter ids) let a checkpoint load onto another
    world size. The optimizer parts are keyed by role ("adamw", "muon"). A
    collective under FSDP: every rank must call it.
    """
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict

    optim = {name or "optim": get_optimizer_state_dict(model, opt) for name, opt in _optimizer_parts(optimizer)}
    return {"model": get_model_state_dict(model), "optim": optim}


def load_sharded_state(model: torch.nn.Module, optimizer, sd: dict) -> None:
    """Put `sd` (as `sharded_state` made it, filled in by a DCP load) back into the model and its optimizer."""
    from torch.distributed.checkpoint.state_dict import set_model_state_dict, set_optimizer_state_dict

    set_model_state_dict(model, sd["model"])
    for name, opt in _optimizer_parts(optimizer):
        set_optimizer_state_dict(model, opt, sd["optim"][name or "optim"])
