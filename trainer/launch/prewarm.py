"""What the agent's fork server does once, before it forks any worker (trainer/launch/agent.py).

Importing this module is its whole job: the fork server imports it, and
every worker forked from the server starts with its work done.

- torch, and torch._dynamo (torch's optimizers import it when the first one
  is made), and the trainer's own modules.
- For a compiled run (`LOGBOOK_WARM_COMPILE_CACHE` names the run's state
  folder): inductor, and the start-up checks an attempt's `CompileCache`
  makes (the CPU's SIMD levels, each a test library loaded in a child
  Python; the stored hash of torch's files), whose answers inductor caches
  for the process. Done here, once, they cost a restart nothing.

Nothing here makes a tensor, starts a thread pool or touches a GPU: a forked
worker starts as a fresh process would, only sooner. Last, every object made
here is frozen out of the garbage collector's sight (`gc.freeze`, as Python's
documentation advises before forking): without it, workers forked from a
server holding dynamo's objects trained about 4% slower than fresh ones,
side by side; with it, as fast.
"""

from __future__ import annotations

import gc
import os
from pathlib import Path

import torch  # noqa: F401
import torch._dynamo  # noqa: F401

import trainer.__main__  # noqa: F401
import trainer.startup  # noqa: F401
from trainer import WARM_COMPILE_CACHE


def _warm_compiler(state_dir: Path) -> None:
    import torch._inductor.compile_fx  # noqa: F401

    from trainer.compiling import CompileCache

    cache = CompileCache(state_dir, "cpu")  # as an attempt makes it; on a GPU the CPU checks are the same
    cache.close()  # waits for the checks, then puts the environment and settings back


if os.environ.get(WARM_COMPILE_CACHE):
    _warm_compiler(Path(os.environ[WARM_COMPILE_CACHE]))

# Everything above lives as long as the workers: their collections need not walk it.
gc.collect()
gc.freeze()
