"""Joining the worker group of an attempt: one store per attempt, agreed ranks, a bounded wait.

torchrun's c10d rendezvous decides which workers form an attempt, but three of
its defaults break a run on several nodes:

- Its agent store lives as long as the job, and workers used to tell attempts
  apart by `TORCHELASTIC_RESTART_COUNT`. Agents do not agree on that count: the
  agent of the node whose worker died counts a restart, the others restart for
  the membership change without counting one, so the two halves of one attempt
  waited under different prefixes for peers that never came. `logbook run`
  therefore sets `TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1`: each rendezvous round
  then names a fresh address (chosen by the round's first agent, the same for
  every node), where this attempt's first worker hosts a store that no earlier
  attempt has written to. The round is the attempt's identity.
- c10d ignores `--node-rank` and orders nodes by host name and agent pid, so the
  node keeping the run's record could be any of them. Ranks are assigned here
  instead, by (node rank given to `logbook run`, local rank): node 0's first
  worker is rank 0, the only writer of the logbook.
- A worker waiting for peers waited for up to ten minutes without a word. Here
  it waits `LOGBOOK_STARTUP_TIMEOUT_S` seconds and then raises
  `StartupTimeout` naming the workers that never arrived.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from datetime import timedelta

import torch.distributed as dist
from logbook.api import UsageError


STARTUP_TIMEOUT_ENV = "LOGBOOK_STARTUP_TIMEOUT_S"
DEFAULT_STARTUP_TIMEOUT_S = 300.0
NODE_RANK_ENV = "LOGBOOK_NODE_RANK"
_POLL_S = 0.05


class StartupTimeout(RuntimeError):
    """Workers of the attempt did not all arrive within the start-up timeout."""


@dataclass(frozen=True)
class Member:
    """One worker of an attempt, as it announced itself to the others."""

    node: int
    """The node rank its `logbook run` was given (torchrun's group rank when started otherwise)."""
    local_rank: int
    """Its index among the workers of its node."""
    host: str
    """The host name it runs on."""
    pid: int
    """Its process id on that host."""
    torch_rank: int
    """The rank torchrun gave it (c10d's order, not the one the run uses)."""


@dataclass(frozen=True)
class Group:
    """The agreed membership of an attempt: the same on every worker."""

    store: dist.Store
    """Where the process group meets (prefixed, fresh for this attempt)."""
    rank: int
    """This worker's rank in the run: members ordered by (node, local rank)."""
    members: list[Member]
    """Every worker, in run-rank order."""
    group_id: str
    """A digest of the membership: equal on every worker of one attempt, new for each attempt."""


def startup_timeout_s(env: Mapping[str, str]) -> float:
    """Seconds a worker waits at start-up for the others (LOGBOOK_STARTUP_TIMEOUT_S, default 300)."""
    raw = env.get(STARTUP_TIMEOUT_ENV, "")
    try:
        value = float(raw) if raw else DEFAULT_STARTUP_TIMEOUT_S
    except ValueError:
        value = -1.0
    if value <= 0:
        raise UsageError(f"{STARTUP_TIMEOUT_ENV} must be a positive number of seconds, got {raw!r}")
    return value


def join_group(world: int, env: Mapping[str, str] = os.environ) -> Group:
    """Meet the other workers of this attempt and agree on ranks; raise StartupTimeout after the timeout."""
    timeout = startup_timeout_s(env)
    torch_rank = int(env.get("RANK", "0"))
    store = _attempt_store(torch_rank, world, timeout, env)
    me = Member(node=int(env.get(NODE_RANK_ENV) or env.get("GROUP_RANK") or 0), local_rank=int(env.get("LOCAL_RANK", "0")),
                host=socket.gethostname(), pid=os.getpid(), torch_rank=torch_rank)
    store.set(f"member/{torch_rank}", json.dumps(asdict(me)))
    members = _wait_for_members(store, world, timeout)
    members.sort(key=lambda m: (m.node, m.local_rank, m.torch_rank))
    _refuse_duplicate_nodes(members)
    digest = hashlib.sha256(json.dumps([asdict(m) for m in members]).encode()).hexdigest()[:16]
    return Group(store=dist.PrefixStore("pg/", store), rank=members.index(me), members=members, group_id=digest)


def _attempt_store(torch_rank: int, world: int, timeout: float, env: Mapping[str, str]) -> dist.Store:
    """The store this attempt's workers meet in, empty of earlier attempts' keys."""
    host, port = env.get("MASTER_ADDR", "127.0.0.1"), int(env.get("MASTER_PORT", "29500"))
    shared = env.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    if shared and int(env.get("GROUP_WORLD_SIZE", "1") or 1) > 1:
        raise UsageError("on several nodes, torchrun's shared store cannot tell one attempt from the next",
                         hint="set TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 for torchrun (`logbook run` does)")
    try:
        store = dist.TCPStore(host, port, world, is_master=not shared and torch_rank == 0,
                              timeout=timedelta(seconds=timeout), wait_for_workers=False)
    except RuntimeError as e:  # DistNetworkError and its kin: nobody hosts the store
        raise StartupTimeout(f"could not reach the attempt's store at {host}:{port} within {timeout:g} s: {e}") from e
    # One node: its only agent counts every restart, so the count names the attempt.
    prefix = f"logbook/restart{env.get('TORCHELASTIC_RESTART_COUNT', '0')}/" if shared else "logbook/"
    return dist.PrefixStore(prefix, store)


def _wait_for_members(store: dist.Store, world: int, timeout: float) -> list[Member]:
    keys = [f"member/{r}" for r in range(world)]
    deadline = time.monotonic() + timeout
    while not store.check(keys):
        if time.monotonic() > deadline:
            missing = [r for r, k in enumerate(keys) if not store.check([k])]
            present = [Member(**json.loads(store.get(k))) for r, k in enumerate(keys) if r not in missing]
            seen = ", ".join(f"node {m.node} ({m.host})" for m in present) or "none"
            raise StartupTimeout(
                f"waited {timeout:g} s at start-up for {len(missing)} of {world} worker(s) (torchrun rank(s) "
                f"{', '.join(map(str, missing))}) that never arrived; present: {seen}")
        time.sleep(_POLL_S)
    return [Member(**json.loads(store.get(k))) for k in keys]


def _refuse_duplicate_nodes(members: list[Member]) -> None:
    seen: dict[tuple[int, int], Member] = {}
    for m in members:
        other = seen.setdefault((m.node, m.local_rank), m)
        if other is not m:
            raise UsageError(f"two nodes were started with --node-rank {m.node} ({other.host} and {m.host})",
                             hint="give every node its own --node-rank, 0 to nnodes-1")
