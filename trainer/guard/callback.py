"""The divergence guard in the loop: catch bad steps before the update and climb a response ladder.

After the backward pass and before `optimizer.step()`, `GuardCallback` hands
each step's loss and gradient norm to the guard (`Guard` in
logbook/guard/ladder.py), which judges them with robust rolling statistics
(logbook/runs/spikes.py) and answers with a `Decision`
(logbook/guard/decision.py): carry on, skip the update, roll back to a
checkpoint, or abort. The callback writes `divergence_detected`, sets the
checkpoints around a rolled-back spike aside for study, optionally replays the
flagged step (logbook/guard/replay.py), and hands the rest to the loop as a
`LoopAction` carrying the decision's event payloads, which the loop writes as
they are. The guard's config is `GuardConfig` (logbook/guard/config.py).

Syncs. `observe` takes Python floats. `metrics_to_floats` turns the loss and
gradient-norm tensors into floats with one host sync for both; when the loop
has already synced them for logging, pass those floats and the guard adds
none. The callback syncs once and hands the floats to `trainer.note_synced`,
so the loop logs them without a second sync.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ..checkpoints.checkpoint import list_checkpoints, mark_keep
from ..checkpoints.rng import get_rng_state, set_rng_state
from ..observe.callbacks import Callback, LoopAction

from logbook.api import guard

if TYPE_CHECKING:
    import torch


def metrics_to_floats(loss: torch.Tensor, grad_norm: torch.Tensor | None) -> tuple[float, float | None]:
    """Loss and gradient norm as Python floats, with a single host sync for both."""
    import torch

    if grad_norm is None:
        return loss.item(), None
    if loss.device.type == "cpu" and grad_norm.device.type == "cpu":  # no sync to save: two reads, no kernels
        return loss.item(), grad_norm.item()
    pair = torch.stack([loss.detach().float().reshape(()), grad_norm.detach().float().reshape(()).to(loss.device)])
    a, b = pair.tolist()
    return a, b


def checkpoints_to_keep(steps: Iterable[int], to_step: int, first_spike_step: int) -> list[int]:
    """Checkpoints to keep for study: the one rolled back to, the newest before the spike, the first after it."""
    steps = sorted(set(int(s) for s in steps))
    loaded = [s for s in steps if s <= to_step][-1:]
    before = [s for s in steps if s < first_spike_step][-1:]
    after = [s for s in steps if s >= first_spike_step][:1]
    return sorted(set(loaded + before + after))


class GuardCallback(Callback):
    """Plugs the guard into the loop's `post_backward`; its state rides in every checkpoint.

    It writes `divergence_detected` itself and hands the rest to the loop as a
    `LoopAction` whose `events` are the decision's payloads (for a rollback,
    naming the checkpoints kept for study).
    """

    name = "guard"
    priority = 20  # after live control (10), so a changed threshold counts from this step

    def __init__(self, cfg: guard.GuardConfig, rules: Iterable[Any] | None = None) -> None:
        self.guard = guard.Guard(cfg, rules, agree=agree)
        self._rng: dict[str, Any] | None = None

    def pre_step(self, step: int) -> None:
        if self.guard.cfg.replay:
            self._rng = get_rng_state()  # what the step's forward pass will draw from

    def post_backward(self, loss: torch.Tensor, grad_norm: torch.Tensor) -> LoopAction | None:
        t = self.trainer
        step, batch_id = t.step + 1, t.data.next_batch - 1  # `take()` has just handed out this batch
        loss_f, norm_f = metrics_to_floats(loss, grad_norm)
        t.note_synced(step, loss_f, norm_f)  # the loop logs these instead of syncing again
        d = self.guard.observe(step, loss_f, norm_f, batch_id, lr_scale=t.lr_scale)
        if d.ok:
            return None
        if self.guard.cfg.replay and self._rng is not None:
            guard.label_replay(d, guard.replay_check(lambda: self._rerun(batch_id), d))
        drill = t.drill_step == step  # a nan/spike drill caused it
        t.emit("divergence_detected", step=step, drill=drill, **(d.payload("divergence_detected") or {}))
        if d.verdict == guard.Verdict.ROLLBACK:
            d.keep(self._keep_checkpoints(d))
        return to_loop_action(d, drill=drill)

    def _keep_checkpoints(self, d: guard.Decision) -> list[str]:
        """Set the checkpoints on either side of the spike aside under `spikes/`; returns their paths.

        There a save of the same step on the new branch cannot replace them,
        retention skips them (they are marked KEEP as well) and a resume cannot
        pick them up. Newer checkpoints belong to the abandoned branch and are
        moved; the one the loop is about to load is hard-linked, so it stays
        in place for the load.
        """
        t = self.trainer
        t.checkpointer.wait()  # a save in flight may be the one just after the spike
        found = dict(list_checkpoints(t.checkpointer.directory))
        first = d.spike_steps[0] if d.spike_steps else d.step
        to = d.to_step or 0
        if not any(s <= to for s in found):
            # Retention removed the target already: the loop falls back to the newest before the spike.
            to = max((s for s in found if s < d.step), default=to)
        loaded = max((s for s in found if s <= to), default=None)
        why = f"kept for study: around the spike at step {first} (rollback {self.guard.rollbacks} at step {d.step})"
        kept = []
        for s in checkpoints_to_keep(found, to, first):
            dest = found[s].parent / "spikes" / f"{found[s].name}-rollback{self.guard.rollbacks}"
            if t.dist.rank == 0:
                _set_aside(found[s], dest, move=s != loaded)
                mark_keep(dest, why)
            kept.append(str(dest))
        return kept

    def _rerun(self, batch_id: int) -> tuple[float, float | None]:
        """The flagged step again, from its RNG state and batch, on the unchanged model.

        Through the loop's own forward/backward, so the replay computes what the
        step computed (the norm it returns is the one before clipping, as judged).
        """
        t = self.trainer
        after = get_rng_state()
        set_rng_state(self._rng)
        try:
            t.optimizer.zero_grad(set_to_none=True)
            loss, _, norm = t.forward_backward(batch_id)
            return metrics_to_floats(loss, norm)
        finally:
            set_rng_state(after)

    def state_dict(self) -> dict[str, Any]:
        return self.guard.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.guard.load_state_dict(state)


def to_loop_action(d: guard.Decision, *, drill: bool = False) -> LoopAction | None:
    """What the loop must do for a decision, with the decision's event payloads to write as they are."""
    events = {k: data for k, data in d.events if k != "divergence_detected"}  # the callback wrote that one
    if d.verdict == guard.Verdict.SKIP:
        return LoopAction("skip", d.reason, events=events, drill=drill)
    if d.verdict == guard.Verdict.ROLLBACK:
        return LoopAction("rollback", d.reason, to_step=d.to_step, skip_batches=d.skip_range, lr_scale=d.lr_scale,
                          events=events, drill=drill)
    if d.verdict == guard.Verdict.ABORT:
        return LoopAction("abort", d.reason, events=events, drill=drill)
    return None


def _set_aside(src: os.PathLike, dest: os.PathLike, *, move: bool) -> None:
    """Move a checkpoint folder, or copy it by hard links (a plain copy where links are refused)."""
    import shutil

    src, dest = os.fspath(src), os.fspath(dest)
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    if move:
        os.rename(src, dest)
        return
    shutil.copytree(src, dest, copy_function=_link_or_copy)


def _link_or_copy(src: str, dest: str) -> None:
    import shutil

    try:
        os.link(src, dest)
    except OSError:
        shutil.copy2(src, dest)


def agree(decision: guard.Decision, group: Any = None) -> guard.Decision:
    """Every rank's strongest decision, on every rank; the identity without a process group.

    One all-reduce (MAX) of the five integers of `guard.agreement_code`.
    """
    import torch
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return decision
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend(group) == "nccl" else torch.device("cpu")
    t = torch.tensor(guard.agreement_code(decision), dtype=torch.int64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    return guard.agreed(decision, t.tolist())
