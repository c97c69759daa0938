"""The divergence guard's config: what counts as a spike, and what to do about it.

Defined apart from the guard's code so that trainer/config.py, the detector
and the ladder can all use it without importing each other. The ranges of the
fields that may change live come from the live-change allow-list
(logbook/launch/change_requests.py), so a live change and the config file agree.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from logbook.core.errors import UsageError
from logbook.core.typedconfig import check_config
from logbook.launch.live_settings import SETTINGS, coerce_value

@dataclass
class GuardConfig:
    """The divergence guard: what counts as a spike, and what to do about it."""

    enabled: bool = True
    """Watch every step; false turns detection and the ladder off entirely."""
    window: int = 128
    """Finite values per metric in the rolling window (median and MAD)."""
    warmup: int = 32
    """Finite values of a metric needed before its spikes are judged; NaN/inf is always caught."""
    spike_sigma: float = 6.0
    """A loss more than this many robust sigmas above its rolling median is a spike."""
    grad_norm_sigma: float = 8.0
    """The same for the gradient norm, judged on its logarithm: its noise is multiplicative and heavy-tailed."""
    min_rel_sigma: float = 0.005
    """Floor on sigma as a relative change (of |median| for the loss), so a flat series does not flag noise."""
    check_grad_norm: bool = True
    """Judge the gradient norm as well as the loss."""
    cooldown: int = 10
    """Steps after a counted spike in which further spikes are skipped but not counted again."""
    rollback_after: int = 2
    """Counted spikes within `rollback_window` steps that trigger a rollback (1: the first one does)."""
    rollback_window: int = 500
    """Steps over which spikes are counted towards a rollback."""
    rollback_steps: int = 0
    """Roll back to a checkpoint at least this many steps before the first spike (0: the newest before it)."""
    skip_batches: int = 100
    """Batches never trained on after a rollback, from the first spike's batch on."""
    lr_factor: float = 0.9
    """Multiplier applied to the learning-rate scale at each rollback (1.0 leaves it alone)."""
    max_rollbacks: int = 3
    """Rollbacks allowed; the next rollback-worthy incident aborts the run."""
    agree_across_ranks: bool = True
    """All-reduce each decision across ranks (one tiny collective per step when distributed)."""
    replay: bool = False
    """Re-run a flagged step from its saved RNG state and batch to label it reproducible or transient."""

    def validate(self, where: str = "guard") -> None:
        """Ranges come from the live-change allow-list, so a live change and the file agree."""
        for f in dataclasses.fields(self):
            key = f"guard.{f.name}"
            if key in SETTINGS:
                try:
                    coerce_value(key, getattr(self, f.name))
                except UsageError as e:
                    raise UsageError("config: " + e.message.replace(f"`{key}`", f"`{where}.{f.name}`"), hint=e.hint) from None
        check_config(not isinstance(self.min_rel_sigma, bool) and 0 <= self.min_rel_sigma < 1, f"{where}.min_rel_sigma",
                     f"must be in [0, 1), got {self.min_rel_sigma}")
