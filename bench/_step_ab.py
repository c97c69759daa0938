"""Two variants of the peer benchmark's model + AdamW step taking turns, for the kernels' benchmarks.

Each variant is its own model (compiled or not) with a `switch` that sets
the module attribute choosing a kernel just before the model runs (and so
as its graph is traced): one model, one kernel, however the turns fall.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch


def project_step(compiled: bool, switch: Callable[[], None]) -> Callable[[], None]:
    """One training step of a fresh project model at the peer shape, with `switch()` called before its forward."""
    from bench.peers import SHAPE, project_step_parts

    model, opt, _ = project_step_parts()
    call = torch.compile(model, dynamic=False) if compiled else model
    g = torch.Generator().manual_seed(0)
    x, y = (torch.randint(0, 256, (SHAPE["batch"], SHAPE["block"]), generator=g) for _ in range(2))

    def step() -> None:
        switch()
        call(x, y).loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def alternate(steps: dict[str, Callable[[], None]], rounds: int, reps: int, warmup: int = 3) -> dict[str, list[float]]:
    """ms per call of each step, `reps` calls a turn, the steps taking turns for `rounds` rounds."""
    for step in steps.values():
        for _ in range(warmup):
            step()
    ms: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(rounds):
        for name, step in steps.items():
            t0 = time.perf_counter()
            for _ in range(reps):
                step()
            ms[name].append((time.perf_counter() - t0) / reps * 1000)
    return ms


def paired_ratio(ms: dict[str, list[float]], before: str, after: str) -> float:
    """Median over the rounds of before's time / after's (above 1: `after` is faster)."""
    return statistics.median(a / b for a, b in zip(ms[before], ms[after]))


def step_table(labels: tuple[str, str], switch: Callable[[bool], Callable[[], None]], figure: str, rounds: int,
               reps: int) -> None:
    """Print and record, eager and compiled, the step with `switch(False)` against `switch(True)`.

    `labels` name the two columns; `figure` the result, as "<mode> step <figure>".
    """
    from bench._result import result

    before, after = labels
    print(f"\n{'step':10s} {before + ' ms':>12s} {after + ' ms':>12s} {'ratio':>6s}")
    for compiled in (False, True):
        ms = alternate({before: project_step(compiled, switch(False)), after: project_step(compiled, switch(True))},
                       rounds, reps)
        ratio = paired_ratio(ms, before, after)
        mode = "compiled" if compiled else "eager"
        print(f"{mode:10s} {statistics.median(ms[before]):12.2f} {statistics.median(ms[after]):12.2f} {ratio:6.3f}")
        result(f"{mode} step {figure}", round(ratio, 3), "ratio", "> 1", ratio > 1)
