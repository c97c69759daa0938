"""`logbook set` and `logbook stop` in the bundled trainer's loop: the callback around the logbook's live channel.

The channel (`logbook.api.Run.changes`, logbook/launch/live_channel.py) reads
the request files, applies what is allowed to the config and records it; this
callback polls it at every step boundary, hands it the trainer's collective,
carries the channel's state in every checkpoint, and turns a stop request into
a clean end of the attempt.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .loop import Preempted
from .observe.callbacks import Callback


class StopRequested(Preempted):
    """The attempt saved and ended because a person asked (`logbook stop`); the process exits 0.

    A kind of `Preempted`, so the loop ends the attempt the same way (no `attempt_failed`)."""

    def __init__(self, saved_step: int) -> None:
        super().__init__("logbook stop", saved_step)


class ControlCallback(Callback):
    """Plugs the channel into the training loop: polls before every step, saves with every checkpoint."""

    name = "control"
    priority = 10  # before the guard and observers, so a change counts from this step on

    def __init__(self, rules: Iterable[Any] | None = None, grace_s: float = 1.0) -> None:
        self.rules = None if rules is None else list(rules)
        self.grace_s = grace_s
        self.channel: Any = None
        """The run's live channel (`Run.changes`), built at `pre_train`."""
        self._stashed: Mapping[str, Any] | None = None
        self._last_weights: dict[str, float] | None = None
        self._last_mixture: tuple[Any, ...] | None = None
        """`DataStream.mixture_key` of the last step: the weights are worked out again only when it changes."""

    def _build(self) -> Any:
        t = self.trainer
        hook = getattr(t.data, "set_weight_overrides", None)
        return t.book.run.changes(t.cfg, emit=t.emit, rules=self.rules, world_size=t.dist.world_size, live=t,
                                  data_weights_hook=hook, grace_s=self.grace_s, broadcast=_broadcast)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.channel is None:
            self._stashed = state  # the loop restores before pre_train builds the channel
        else:
            self.channel.load_state_dict(state)

    def state_dict(self) -> dict[str, Any]:
        return self.channel.state_dict() if self.channel else dict(self._stashed or {})

    def pre_train(self) -> None:
        self.channel = self._build()
        if self._stashed is not None:
            self.channel.load_state_dict(self._stashed)
        self.trainer.apply_optimizer_config()  # the re-applied live changes count from the first step

    def pre_step(self, step: int) -> None:
        changes = self.channel.poll(step, tokens=self.trainer.tokens)
        if any(c["path"].startswith("optim.") for c in changes):
            self.trainer.apply_optimizer_config()
        if self.channel.stop_request is not None:
            self._stop_cleanly(self.channel.stop_request[1])

    def _stop_cleanly(self, req: Mapping[str, Any]) -> None:
        """`logbook stop`: save the last completed step, record `run_stopped`, answer, and end the attempt.

        The same save the preemption path makes; the exit is 0, so torchrun does
        not restart the workers and the launcher reads `run_stopped` as the end.
        """
        t = self.trainer
        t.checkpointer.wait()
        t.poll_saves()
        if t.last_saved_step != t.step:
            t.save(sync=True)
        t.emit("run_stopped", who=req.get("who"), reason=req.get("reason"), request_id=req.get("request_id"),
               saved_step=t.last_good_step)
        self.channel.answer_stop(t.last_good_step, t.step)
        raise StopRequested(t.last_good_step)

    def post_step(self, step: int, metrics: dict[str, Any]) -> None:
        self._note_mixture_stage(step)

    def _note_mixture_stage(self, step: int) -> None:
        data = self.trainer.data
        if not hasattr(data, "weights_at"):
            return
        key = data.mixture_key(data.next_batch - 1)
        if key == self._last_mixture:
            return
        self._last_mixture = key
        names = [c.name for c in data.corpora]
        weights = {n: round(float(w), 6) for n, w in zip(names, data.weights_at(data.next_batch - 1))}
        if self._last_weights is not None and weights != self._last_weights:
            for n in names:
                if weights[n] != self._last_weights.get(n):
                    self.channel.note_scheduled(step, f"data.weights.{n}", self._last_weights.get(n), weights[n],
                                                "the data mixture entered its next phase", tokens=self.trainer.tokens)
        self._last_weights = weights


def _broadcast(items: list[dict[str, Any]] | None, world_size: int) -> list[dict[str, Any]]:
    """Rank 0's decoded requests to every rank, so that all apply the same changes at the same step."""
    if world_size <= 1:
        return items or []
    import torch.distributed as dist

    if not dist.is_initialized():
        return items or []
    box = [items]
    dist.broadcast_object_list(box, src=0)
    return box[0] or []
