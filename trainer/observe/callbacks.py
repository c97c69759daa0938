"""Callbacks: how guards, live control, telemetry and drills plug into the loop.

Every hook is a no-op by default; a callback overrides the ones it needs.
Callbacks run in ascending `priority`, ties in registration order. Each one
has its own `state_dict()` / `load_state_dict()`, saved in every checkpoint
under its `name`, so its state resumes exactly with the run. `on_error` and
`close` are always called (from the loop's `finally`).

Only `post_backward` may change what happens: it returns a `LoopAction` (skip
the update, roll back, abort) or None. Every rank runs the same callbacks on
the same (all-reduced) loss and gradient norm, so every rank reaches the
same decision without a broadcast. The first callback that asks wins.

Callbacks see the trainer through `TrainerView`, the small interface defined
here (the loop's `Trainer` implements it): what they may read, and the few
methods through which they may change it. Nothing here imports the loop.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

if TYPE_CHECKING:
    import torch

    from ..checkpoints.checkpoint import Checkpointer, SaveResult


@dataclass
class LoopAction:
    """A request from `post_backward` that changes what the loop does with the step.

    Loop control, not the guard's vocabulary: the guard's own actions, in the
    words preregistrations use, are `Decision.actions()` (logbook/guard/decision.py).
    """

    kind: Literal["skip", "rollback", "abort"]
    """skip: drop this update | rollback: restore a checkpoint and skip batches | abort: end the run as failed."""
    reason: str = ""
    """One sentence for the event log."""
    to_step: int | None = None
    """rollback: restore the newest good checkpoint at or before this step (None: the newest)."""
    skip_batches: tuple[int, int] | None = None
    """rollback: batch ids (inclusive) never to train on again."""
    lr_scale: float | None = None
    """rollback: the learning-rate multiplier to continue with (None: unchanged)."""
    events: dict[str, dict[str, Any]] = field(default_factory=dict)
    """The payloads to write, by kind (`step_skipped`, `rollback`, `lr_scaled`, `run_aborted`).

    The guard's decision describes them all; a kind left out gets a minimal
    payload (the reason, and what the loop knows)."""
    drill: bool = False
    """A drill caused it: the events it leads to are marked as drills."""


class TrainerView(Protocol):
    """What a callback may see of the trainer, and the methods through which it may act on it.

    Values are read-only to callbacks; `cfg` is mutable only through live
    control (trainer/live_control.py). Types of torch objects are left open
    so that this module, below everything else, imports none of them.
    """

    cfg: Any
    """The resolved `TrainConfig` (trainer/config.py)."""
    run_id: str
    project: Any
    """The logbook project (`logbook.core.project.Project`)."""
    run_dir: Path
    run_record: Any
    """The run's record (`logbook.runs.run_record.RunRecord`), or None when launched directly."""
    history: Any
    """What earlier attempts left (`logbook.runs.attempt_ends.RunHistory`, read by rank 0 through `logbook.api`)."""
    started_at: float
    attempt: int
    step: int
    tokens: int
    lr_scale: float
    last_val: tuple[int, float] | None
    last_progress: float
    drill_active: bool
    drill_step: int | None
    dist: Any
    device: Any
    autocast: Any
    data: Any
    raw_model: Any
    model: Any
    optimizer: Any
    checkpointer: Checkpointer
    metrics: Any
    rank_mark: Any
    callbacks: CallbackList

    def emit(self, kind: str, *, step: int | None = None, tokens: int | None = None, drill: bool = False,
             **data: Any) -> Any:
        """Write an event (rank 0), stamped with the current step and tokens unless given."""

    def set_lr_scale(self, new: float, kind: str, payload: dict[str, Any], *, drill: bool = False) -> None:
        """The one way to change the learning-rate multiplier; writes `kind` with `payload`."""

    def apply_optimizer_config(self) -> None:
        """Push the config's optimizer hyperparameters into the optimizer (after a live change)."""

    def forward_backward(self, batch_id: int) -> tuple[Any, Any, Any]:
        """Accumulate one batch's gradients as the loop does: (loss, z-loss, grad norm before clipping)."""

    def mark_drill(self, step: int | None = None) -> None:
        """A drill is under way (its events are marked); `step` is the step a nan/spike drill blew up."""

    def note_synced(self, step: int, loss: float, grad_norm: float | None) -> None:
        """This step's loss and grad norm as floats, already synced: the loop logs them without another sync."""


class Callback:
    """Base class with no-op hooks. `self.trainer` is set when the callback is attached."""

    name: str = "callback"
    priority: int = 100
    trainer: TrainerView

    def pre_train(self) -> None:
        """After the state is restored, before the first step of this attempt."""

    def pre_step(self, step: int) -> None:
        """Before optimizer step `step` (1-based) computes its forward pass."""

    def post_backward(self, loss: torch.Tensor, grad_norm: torch.Tensor) -> LoopAction | None:
        """After the gradients of step `self.trainer.step + 1` are complete and clipped, before the update.

        `loss` and `grad_norm` are 0-dim tensors on the training device (averaged
        over ranks); `float()` them if the value is needed (a host sync on GPU).
        """
        return None

    def post_step(self, step: int, metrics: dict[str, Any]) -> None:
        """After the update of `step`; `metrics` holds this step's scalars as plain floats."""

    def step_end(self, step: int) -> None:
        """After everything `step` does: its metrics row, evaluation and checkpoint."""

    def post_checkpoint(self, result: SaveResult) -> None:
        """A save finished (result.ok) or failed; called from the training thread."""

    def on_error(self, exc: BaseException) -> None:
        """The attempt is failing with `exc` (called before the failure is recorded)."""

    def close(self) -> None:
        """The attempt ends, however it ends."""

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what `state_dict` returned."""


class CallbackList:
    """The attached callbacks, in priority order, with fan-out helpers."""

    def __init__(self, callbacks: list[Callback]) -> None:
        names = [c.name for c in callbacks]
        dupes = {n for n in names if names.count(n) > 1}
        if dupes:
            raise ValueError(f"callback names must be unique (they key the checkpoint): {sorted(dupes)}")
        self.items = sorted(callbacks, key=lambda c: c.priority)
        self._bind()

    def _bind(self) -> None:
        """Per step hook, the bound hooks of the callbacks that have one: most leave most hooks as no-ops,
        and a call that does nothing still costs a cold cache a microsecond, four hooks a step."""
        def bound(hook: str) -> list[Callable[..., Any]]:
            return [getattr(c, hook) for c in self.items
                    if hook in vars(c) or getattr(type(c), hook) is not getattr(Callback, hook)]
        self._pre_step, self._post_backward = bound("pre_step"), bound("post_backward")
        self._post_step, self._step_end = bound("post_step"), bound("step_end")

    def attach(self, trainer: TrainerView) -> None:
        """Give every callback its trainer (the trainer does, once it is complete)."""
        for c in self.items:
            c.trainer = trainer
        self._bind()

    def __iter__(self):
        return iter(self.items)

    def pre_train(self) -> None:
        for c in self.items:
            c.pre_train()
        self._bind()  # a callback may have set up its hooks only now

    def pre_step(self, step: int) -> None:
        for hook in self._pre_step:
            hook(step)

    def post_backward(self, loss: torch.Tensor, grad_norm: torch.Tensor) -> LoopAction | None:
        for hook in self._post_backward:
            action = hook(loss, grad_norm)
            if action is not None:
                return action
        return None

    def post_step(self, step: int, metrics: dict[str, Any]) -> None:
        for hook in self._post_step:
            hook(step, metrics)

    def step_end(self, step: int) -> None:
        for hook in self._step_end:
            hook(step)

    def post_checkpoint(self, result: SaveResult) -> None:
        for c in self.items:
            c.post_checkpoint(result)

    def on_error(self, exc: BaseException) -> None:
        for c in self.items:
            try:
                c.on_error(exc)
            except Exception:  # one failing observer must not hide the original error
                pass

    def close(self) -> None:
        for c in self.items:
            try:
                c.close()
            except Exception:
                pass

    def state_dict(self) -> dict[str, Any]:
        return {c.name: c.state_dict() for c in self.items}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for c in self.items:
            if c.name in state:
                c.load_state_dict(state[c.name])
