"""Stragglers: the slowest rank against the median of the others, checked every few steps.

Each rank times its own work of a step: fetching the batch and the inner
forward pass, where no collective waits; DDP's buffer broadcast before the
forward and its all-reduce in the backward make every rank wait for the
slowest, so they are left out.
Every `every` steps one all_gather of two numbers compares the ranks; a rank
slower than `ratio` x the median of the other ranks for `patience` checks in
a row is written
as one `straggler` event (rank, ratio, steps), and again only after it has
recovered. A drill (`drill_rank`, `drill_sleep_s`) makes one rank sleep in
every step, to prove the detection on any machine.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any

from logbook.api import typedconfig

from .callbacks import Callback


@dataclass
class StragglerConfig:
    """Detection of a rank persistently slower than the others (several ranks only)."""

    every: int = 20
    """Compare the ranks every this many steps (one small all_gather); 0 turns it off."""
    ratio: float = 1.5
    """A rank whose step time exceeds this multiple of the other ranks' median is slow.

    The median leaves the slow rank out: with two ranks a median over all of
    them is their mean, and no rank could ever be 2x slower than that."""
    patience: int = 3
    """Consecutive slow checks before a `straggler` event."""
    drill_rank: int | None = None
    """Drill: this rank sleeps `drill_sleep_s` before every step."""
    drill_sleep_s: float = 0.0
    """Drill: seconds of sleep per step on `drill_rank`."""

    def validate(self, where: str) -> None:
        typedconfig.check_nonnegative(self, where, "every")
        typedconfig.check_config(self.ratio > 1, f"{where}.ratio", f"must be > 1, got {self.ratio}")
        typedconfig.check_config(self.patience >= 1, f"{where}.patience", f"must be >= 1, got {self.patience}")
        typedconfig.check_nonnegative(self, where, "drill_sleep_s")


def slowest_rank(per_rank: list[float]) -> tuple[int, float, float]:
    """The slowest rank, its time over the median of the other ranks, and that median."""
    slowest = max(range(len(per_rank)), key=per_rank.__getitem__)
    others = per_rank[:slowest] + per_rank[slowest + 1:]
    median = statistics.median(others) if others else per_rank[slowest]
    return slowest, (per_rank[slowest] / median if median > 0 else 1.0), median


class StragglerMonitor(Callback):
    name = "straggler"
    priority = 900  # its pre_step runs last: the collectives of other callbacks' pre_step are not this rank's work

    def __init__(self, cfg: StragglerConfig) -> None:
        self.cfg = cfg
        self._busy = 0.0
        self._n = 0
        self._t0 = 0.0
        self._streak: list[tuple[int, int, float]] = []  # (step, slowest rank, ratio) of consecutive slow checks
        self._reported: int | None = None  # the rank of the episode already written
        self._hooks: list[Any] = []

    def pre_train(self) -> None:
        t = self.trainer
        if t.dist.enabled and self.cfg.every:
            # DDP may broadcast buffers before the inner forward (a wait for the slowest rank): leave it out.
            self._hooks = [t.model.register_forward_pre_hook(self._outer_start),
                           t.raw_model.register_forward_pre_hook(self._inner_start),
                           t.raw_model.register_forward_hook(self._forward_done)]

    def _outer_start(self, module: Any, args: Any) -> None:
        self._busy += time.perf_counter() - self._t0

    def _inner_start(self, module: Any, args: Any) -> None:
        self._t0 = time.perf_counter()

    def pre_step(self, step: int) -> None:
        c = self.cfg
        self._t0 = time.perf_counter()
        if c.drill_rank == self.trainer.dist.rank and c.drill_sleep_s > 0:
            time.sleep(c.drill_sleep_s)  # like a slow data loader on one host: it counts as the rank's work

    def _forward_done(self, module: Any, args: Any, out: Any) -> None:
        if self.trainer.device.type == "cuda":
            import torch

            torch.cuda.current_stream().synchronize()  # only when timing: the forward's kernels have run
        self._busy += time.perf_counter() - self._t0
        self._t0 = time.perf_counter()  # the next micro-batch's data counts from here
        self._n += 1

    def post_step(self, step: int, metrics: dict) -> None:
        t = self.trainer
        if not t.dist.enabled or not self.cfg.every or step % self.cfg.every:
            return
        from ..job import dist  # here, not at the top: trainer/config.py imports this module and stays torch-free

        rows = dist.gather_floats([self._busy, float(max(self._n, 1))], t.dist)
        self._busy, self._n = 0.0, 0
        per_rank = [busy / n for busy, n in rows]
        slowest, ratio, median = slowest_rank(per_rank)
        if ratio < self.cfg.ratio:
            self._streak, self._reported = [], None
            return
        if self._streak and self._streak[-1][1] != slowest:
            self._streak = []
        self._streak.append((step, slowest, ratio))
        if len(self._streak) >= self.cfg.patience and self._reported != slowest:
            self._reported = slowest
            t.emit("straggler", drill=self.cfg.drill_rank == slowest and self.cfg.drill_sleep_s > 0,
                   rank_slow=slowest, node_slow=t.dist.node_of(slowest), ratio=round(ratio, 3), steps=[self._streak[0][0] - self.cfg.every + 1, step],
                   checks=len(self._streak), step_s=[round(x, 6) for x in per_rank], median_s=round(median, 6))

    def close(self) -> None:
        for h in self._hooks:
            h.remove()
