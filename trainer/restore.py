"""What a checkpoint holds of an attempt, and putting it back: on resume and on rollback.

Everything that must survive a kill is saved together (`checkpoint_parts`):
model, optimizer (with its step counters), step, tokens, lr_scale, data
position and skip list, every RNG, and each callback's state. `resume` loads
the newest good checkpoint when an attempt starts; `rollback` goes back to an
older one when the guard asks, keeping what the deciders remember and the
live learning-rate multiplier, and saves the new branch at once. The events a
rollback writes are the ones the action carries (the guard's decision
describes them, logbook/guard/decision.py); the restore only completes the
rollback event with what it alone knows (`complete_rollback`).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Protocol

from logbook.api import RefusedError, RunFailedError, guard

from .checkpoints import checkpoint_dcp
from .checkpoints.checkpoint import check_model_compatible
from .checkpoints.rng import get_rng_state, set_rng_state
from .config import config_hash, config_to_dict
from .job import dist
from .nn.optim import apply_hyperparams
from .observe.callbacks import LoopAction, TrainerView

STATE_FORMAT = 1


class Trainer(TrainerView, Protocol):
    """The trainer as a restore sees it: what callbacks see, and the counters a checkpoint puts back.

    Putting an attempt back is this module's whole job, so it writes the
    trainer's step, tokens, multiplier and save marks itself (the loop's
    `Trainer` calls it on itself, at the start and on a rollback).
    """

    resumed_from: Path | None
    saved_config: dict[str, Any] | None
    restore_s: float
    last_saved_step: int
    last_good_step: int

    def save(self, sync: bool = False) -> None: ...

    def poll_saves(self) -> None: ...


def checkpoint_parts(t: Trainer) -> dict[str, Any]:
    """Everything a resume needs, by checkpoint part (every rank must call it: RNGs are gathered).

    For a DCP checkpoint the model and optimizer stay as each rank holds them
    (shards); for the torch format they are gathered whole onto rank 0.
    """
    rng = dist.gather_objects(get_rng_state(), t.dist)
    if t.checkpointer.format == "dcp":
        shards = dist.sharded_state(t.raw_model, t.optimizer)
        model_sd, optim_sd = shards["model"], shards["optim"]
    else:
        model_sd, optim_sd = dist.full_state(t.raw_model, t.optimizer)  # whole, even when sharded
    return {
        "model": model_sd,
        "optim": optim_sd,
        "state": {
            "format": STATE_FORMAT,
            "trainer": {"step": t.step, "tokens": t.tokens, "lr_scale": t.lr_scale,
                        "attempt": t.attempt, "world_size": t.dist.world_size},
            "data": t.data.state_dict(),
            "rng": rng,
            "callbacks": t.callbacks.state_dict(),
            "config_json": json.dumps(config_to_dict(t.cfg), sort_keys=True),
            "config_hash": config_hash(t.cfg),
        },
    }


def resume(t: Trainer) -> None:
    """Load the newest good checkpoint, if any, and note where the attempt resumed from."""
    if t.dist.rank == 0:
        t.unfinished_saves = t.checkpointer.clean_stale()
    t0 = time.perf_counter()
    found = t.checkpointer.load_latest()
    if found is not None:
        step, path, parts = found
        saved_config = json.loads(parts["state"].get("config_json", "{}"))
        check_same_numerics(saved_config, t.cfg, step)
        _load_parts(t, parts, callbacks=True)
        t.resumed_from = path
        t.saved_config = saved_config
    t.restore_s = time.perf_counter() - t0  # goodput counts it as restore, not start-up


NUMERICS_KEYS = (("model", "attention_backend"),)
"""Config values that choose how the same model is computed: a change alters the numbers, not the model."""


def check_same_numerics(saved: dict[str, Any], cfg: Any, step: int) -> None:
    """Refuse a deterministic run's resume that would compute the model another way than the checkpoint's run did.

    A deterministic run promises what an uninterrupted run would have
    computed; another attention backend agrees only to float rounding. A
    checkpoint that predates a key was computed with its default.
    """
    if not cfg.train.deterministic:
        return
    now = config_to_dict(cfg)
    default = config_to_dict(type(cfg)())
    for section, key in NUMERICS_KEYS:
        was = saved.get(section, {}).get(key, default[section][key])
        if was != now[section][key]:
            raise RefusedError(
                f"the checkpoint of step {step} was computed with {section}.{key}={was}, this run asks for "
                f"{now[section][key]}: a deterministic run resumes only as the uninterrupted run would have computed",
                hint=f"resume with {section}.{key}={was}, or set train.deterministic=false to accept the change")


def rollback(t: Trainer, action: LoopAction, failing_step: int) -> None:
    """Restore the newest good checkpoint at or before `action.to_step`; skip batches; maybe rescale the LR."""
    t.checkpointer.wait()
    t.poll_saves()
    dist.barrier(t.dist)  # every rank sees rank 0's last save complete before choosing one
    from_step, lr_scale = t.step, t.lr_scale
    t0 = time.perf_counter()
    target = action.to_step if action.to_step is not None else t.step
    found = t.checkpointer.load_latest(max_step=target)
    short = found is None
    if short:
        # Retention already removed everything that far back: the newest checkpoint before
        # the spike is a shorter rollback, which beats ending the attempt.
        found = t.checkpointer.load_latest(max_step=failing_step - 1)
    if found is None:
        raise RunFailedError(f"rollback at step {failing_step} found no checkpoint to go back to")
    _, path, parts = found
    _load_parts(t, parts, callbacks=False)  # the deciders keep their memory of what happened
    t.lr_scale = lr_scale  # a decision (a live change, an earlier rollback), not model state: not rewound
    restore_s = time.perf_counter() - t0
    if action.skip_batches:
        t.data.add_skip(*action.skip_batches)
    # Newer checkpoints hold the abandoned branch: left in place, a crash would resume it.
    abandoned = t.checkpointer.retire_after(t.step, f"rollback-from-{from_step}")
    asked = action.events.get("rollback") or {
        "from_step": from_step, "reason": action.reason,
        "batches_skipped": list(action.skip_batches) if action.skip_batches else None}
    t.emit("rollback", drill=action.drill, **guard.complete_rollback(
        asked, to_step=t.step, checkpoint=str(path), abandoned=[str(p) for p in abandoned], restore_s=restore_s,
        wanted_step=target if short else None))
    if action.lr_scale is not None and action.lr_scale != t.lr_scale:
        old = t.lr_scale
        told = action.events.get("lr_scaled") or {
            "old": old, "new": action.lr_scale, "factor": action.lr_scale / old if old else None, "reason": action.reason}
        t.set_lr_scale(action.lr_scale, "lr_scaled", told, drill=action.drill)
    # The new branch (skip list, learning rate, the guard's ladder) is saved at once, so a crash
    # from here on resumes it rather than the checkpoint the rollback restored.
    t.save(sync=True)


def _load_parts(t: Trainer, parts: dict[str, Any], *, callbacks: bool) -> None:
    """Put a checkpoint's parts into `t`; the callbacks' own state only if `callbacks`."""
    check_model_compatible(checkpoint_dcp.saved_shapes(parts["dcp"]) if "dcp" in parts else parts["model"], t.raw_model)
    try:
        if "dcp" in parts:  # whatever this run saves in: the checkpoint's own format decides
            checkpoint_dcp.load_into(t.raw_model, t.optimizer, parts["dcp"], t.checkpointer.group)
        else:
            dist.load_full_state(t.raw_model, t.optimizer, parts["model"], parts["optim"])
    except (ValueError, KeyError) as e:
        raise RefusedError(f"the checkpoint's optimizer state does not fit this run's optimizer: {e}",
                           hint="resume with the optim.name it was trained with, or start a new run") from None
    apply_hyperparams(t.optimizer, t.cfg.optim)  # the config wins over the saved groups
    st = parts["state"]
    tr = st["trainer"]
    t.step, t.tokens, t.lr_scale = int(tr["step"]), int(tr["tokens"]), float(tr["lr_scale"])
    t.data.load_state_dict(st["data"])
    rngs = st["rng"]
    set_rng_state(rngs[t.dist.rank] if t.dist.rank < len(rngs) else rngs[0])
    if callbacks:
        t.callbacks.load_state_dict(st.get("callbacks", {}))
    t.last_saved_step = t.last_good_step = t.step
