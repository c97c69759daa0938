"""What a wrapped `torchrun` says of itself: its world size from its arguments, its failure from its summary.

`logbook run -- torchrun --nproc-per-node 2 train.py` sees torchrun's one
process from outside. Its exit code is 1 whatever killed a rank; the rank and
the signal are in the summary torchrun prints when a worker fails (the
"Root Cause (first observed failure)" block of its ChildFailedError), and the
number of workers is in its own arguments. Both are read here, as data: a
line that does not parse says nothing.
"""

from __future__ import annotations

import os
import re
from typing import Any, Iterable

_RANK = re.compile(r"^\s*rank\s*:\s*(\d+)(?:\s*\(local_rank:\s*(\d+)\))?")
_EXIT = re.compile(r"^\s*exitcode\s*:\s*(-?\d+)")
_ROOT = "Root Cause (first observed failure)"
_FLAGS = {"--standalone", "--no-python", "--no_python", "--run-path", "--run_path", "-m", "--module"}
"""torchrun's options that take no value."""


def is_torchrun(command: list[str]) -> bool:
    """Whether `command` starts torchrun (`torchrun ...` or `python -m torch.distributed.run ...`)."""
    if not command:
        return False
    if os.path.basename(command[0]) == "torchrun":
        return True
    return "-m" in command[:3] and any(a in ("torch.distributed.run", "torch.distributed.launch") for a in command[1:4])


def _option(args: list[str], names: tuple[str, ...]) -> str | None:
    for i, a in enumerate(args):
        for n in names:
            if a == n and i + 1 < len(args):
                return args[i + 1]
            if a.startswith(n + "="):
                return a.split("=", 1)[1]
    return None


def torchrun_world_size(command: list[str]) -> int | None:
    """nnodes x nproc-per-node from torchrun's arguments, when both are fixed numbers; else None (unknown).

    Only the arguments before the script are torchrun's; an elastic range
    (`--nnodes 1:4`) or a device count (`--nproc-per-node gpu`) is not a number.
    """
    if not is_torchrun(command):
        return None
    start = 1 if os.path.basename(command[0]) == "torchrun" else command.index("-m") + 2
    own: list[str] = []
    rest = command[start:]
    i = 0
    while i < len(rest) and rest[i].startswith("-"):  # the first word that is not an option is the script
        takes_value = "=" not in rest[i] and rest[i] not in _FLAGS
        own.extend(rest[i:i + 2] if takes_value else rest[i:i + 1])
        i += 2 if takes_value else 1
    nproc = _option(own, ("--nproc-per-node", "--nproc_per_node")) or "1"
    nnodes = _option(own, ("--nnodes",)) or "1"
    if ":" in nnodes:
        lo, _, hi = nnodes.partition(":")
        nnodes = lo if lo == hi else ""
    if not (nproc.isdigit() and nnodes.isdigit()):
        return None
    return int(nproc) * int(nnodes)


def root_cause(lines: Iterable[str]) -> dict[str, Any] | None:
    """{failed_rank, local_rank, exit_code | signal} of the first failure torchrun summarised, or None."""
    found: dict[str, Any] | None = None
    for line in lines:
        if _ROOT in line:
            found = {}
            continue
        if found is None:
            continue
        if (m := _RANK.match(line)) and "failed_rank" not in found:
            found["failed_rank"] = int(m.group(1))
            if m.group(2) is not None:
                found["local_rank"] = int(m.group(2))
        elif (m := _EXIT.match(line)) and "code" not in found:
            found["code"] = int(m.group(1))
        if "failed_rank" in found and "code" in found:
            code = found.pop("code")
            return {**found, **({"signal": -code} if code < 0 else {"exit_code": code})}
    return None
