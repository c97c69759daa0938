"""An attempt's start-up: `build_trainer` makes one complete `Trainer`, in one place.

It sets up torch and the process group (`Runtime`), holds SIGTERM/SIGUSR1
from the start (a preemption during loading is still a preemption), opens the
run's logbook (`open_logbook`: event log, metrics, heartbeat; the attempt is
numbered after every attempt before it), refuses a run that was aborted, and
builds what the attempt trains with (`build_parts`: data stream, model
wrapped for DDP or FSDP2 and compiled if asked, with its compile cache under
.logbook/ (trainer/compiling.py), optimizer, checkpointer and callbacks;
`default_callbacks` is where components register). Then it hands all of it
to the `Trainer`, which owns it from there. A start-up that fails after the
logbook is open is recorded as `attempt_failed`, as a failing attempt is.

This module sits above the loop: the loop imports none of it, and the
compile path reaches the loop only through the `warm_up` handed to it.
"""

from __future__ import annotations

import os
import time
import traceback
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch

from logbook.api import Run, RunFailedError, guard, open_run

from .checkpoints.checkpoint import Checkpointer
from .checkpoints.checkpoint_dcp import resolve_format, save_group
from .compiling import CompileCache, compile_model, warm_up
from .components import Drills, RunLogbook, Runtime, StopSignals, TrainParts
from .config import TrainConfig, config_to_dict
from .faults import DivergenceDrill, FaultInjector, InjectedFault
from .guard.callback import GuardCallback
from .job import dist
from .live_control import ControlCallback
from .loop import Trainer
from .nn.data import DataStream, load_corpus
from .nn.model import GPT
from .nn.optim import build_optimizer
from .observe.advice_cb import AdviceCallback
from .observe.callbacks import Callback, CallbackList
from .observe.milestones_cb import MilestoneNotes
from .observe.progress import ProgressReporter
from .observe.straggler import StragglerMonitor
from .observe.telemetry import Telemetry
from .observe.wandb_sink import WandbSink
from .observe.watchdog import HangWatchdog


def build_trainer(cfg: TrainConfig, *, project_root: Path | str, run_id: str, config_path: str | None = None,
                  callbacks: list[Callback] | None = None, started_at: float | None = None,
                  env: Mapping[str, str] | None = None, interactive: bool | None = None) -> Trainer:
    """One attempt of run `run_id`, complete and ready to `fit()`.

    `callbacks` are added to the default ones (`default_callbacks`); one of the
    same name replaces the default. Raises `RunFailedError` for a run that was
    aborted (nothing is recorded: it is not a new failure).
    """
    started_at = started_at or time.time()
    env = dict(os.environ if env is None else env)
    runtime = Runtime.start(cfg.train)
    stop = StopSignals()
    stop.install()  # from the start: a preemption during loading is still a preemption
    book = parts = None
    drills = Drills()
    try:
        book = open_logbook(cfg, Path(project_root), run_id, runtime.dist)
        stop.rank_mark = book.rank_mark
        if book.aborted is not None:
            raise RunFailedError(f"run {run_id} was aborted at step {book.aborted['step']}: {book.aborted['reason']}",
                                 hint="start a new run (a new run id) to train again")
    except BaseException:
        _close(stop, book, runtime)
        raise
    try:
        parts = build_parts(cfg, book, runtime, run_id, list(callbacks or []), interactive, drills)
        return Trainer(cfg, run_id=run_id, runtime=runtime, book=book, parts=parts, stop=stop, drills=drills,
                       config_path=config_path, started_at=started_at, env=env,
                       warm_up=warm_up if cfg.train.compile else None)
    except BaseException as e:
        _record_failed_start(book, parts, drills, e)
        _close(stop, book, runtime, parts)
        raise


def _record_failed_start(book: RunLogbook, parts: TrainParts | None, drills: Drills, e: BaseException) -> None:
    """The start-up failed after the logbook opened: `attempt_failed`, as a failing attempt records it."""
    book.rank_mark.ended()  # first: torchrun may SIGKILL a failing group before it is torn down
    if parts is not None:
        parts.callbacks.on_error(e)
    tb = traceback.format_exception(type(e), e, e.__traceback__)
    book.sink.emit("attempt_failed", step=0, tokens=0, drill=drills.active or isinstance(e, InjectedFault),
                   exception_type=type(e).__name__, exception_message=str(e)[:2000],
                   traceback="".join(tb[-3:])[-4000:])


def _close(stop: StopSignals, book: RunLogbook | None, runtime: Runtime, parts: TrainParts | None = None) -> None:
    stop.close()
    if parts is not None:
        parts.close()
    if book is not None:
        book.close()
    runtime.close()


def open_logbook(cfg: TrainConfig, project_root: Path, run_id: str, info: dist.DistInfo) -> RunLogbook:
    """Open the run's logbook (`logbook.api.open_run`: event sink, metrics, heartbeat) and number the attempt.

    Rank 0 reads the run's history; every rank acts on what it found (the
    attempt's number, whether the run was aborted or finished).
    """
    history = Run.history(project_root, run_id) if info.rank == 0 else Run.no_history()
    aborted, finished = history.has("run_aborted"), history.has("run_finished")
    facts = dist.broadcast_object({
        "attempt": history.last_attempt() + 1,
        "aborted": None if aborted is None else {"step": aborted.get("step"), "reason": aborted.get("data", {}).get("reason", "")},
        "finished_step": None if finished is None else finished.get("step"),
    }, info)
    run = open_run(project_root, run_id, rank=info.rank, attempt=facts["attempt"], total_steps=cfg.train.steps)
    return RunLogbook(run, history, facts["aborted"], facts["finished_step"])


def build_parts(cfg: TrainConfig, book: RunLogbook, runtime: Runtime, run_id: str, extra: list[Callback],
                interactive: bool | None, drills: Drills) -> TrainParts:
    """Data, model, optimizer, checkpointer and callbacks of the attempt."""
    train, info, device = cfg.train, runtime.dist, runtime.device
    corpora = [load_corpus(s, book.project.root, cfg.data) for s in cfg.data.sources]
    data = DataStream(corpora, cfg.data, seed=train.seed, block_size=cfg.model.block_size,
                      batch_size=train.batch_size, total_steps=train.steps, rank=info.rank, device=device)
    torch.manual_seed(train.seed)  # the same initial weights on every rank and every attempt
    raw_model = GPT(cfg.model).to(device)
    torch.manual_seed(train.seed + 1 + info.rank)  # per-rank dropout streams
    if train.parallel == "fsdp":
        dist.wrap_model(raw_model, info, "fsdp")  # shards in place, before compile and the optimizer
    cache = None
    if train.compile:
        cache = CompileCache(book.project.state_dir, device.type)  # before anything compiles
        model = compile_model(raw_model, cache, device, _graph_key(cfg), whole=train.parallel != "fsdp")
    else:
        model = raw_model
    if train.parallel == "ddp":
        model = dist.wrap_model(model, info, "ddp")
    optimizer = build_optimizer(raw_model, cfg.optim, device.type)
    ckpt_dir = Path(cfg.checkpoint.dir) if cfg.checkpoint.dir else book.project.checkpoint_dir(run_id)
    if not ckpt_dir.is_absolute():
        ckpt_dir = book.project.root / ckpt_dir
    fmt = resolve_format(cfg.checkpoint.format, info.world_size)
    checkpointer = Checkpointer(ckpt_dir, keep=cfg.checkpoint.keep, background=cfg.checkpoint.background,
                                emit=_checkpoint_emitter(book, drills), writer=info.rank == 0, format=fmt,
                                group=save_group() if fmt == "dcp" else None)
    rules = _contingency_rules(book)
    # The guard does what the plan promised (logbook/guard/plan.py); the same on every attempt, so the
    # config a checkpoint saved and this one agree.
    cfg.guard, planned = guard.guard_from_plan(cfg.guard, rules)
    cfg.guard.validate("guard (as the contingency plan sets it)")
    # A callback passed in explicitly replaces the default one of the same name.
    names = {c.name for c in extra}
    cbs = [c for c in default_callbacks(cfg, book.attempt, info.rank, interactive, rules) if c.name not in names]
    callbacks = CallbackList(cbs + extra)
    progress = next((c for c in callbacks if isinstance(c, ProgressReporter)), None)
    return TrainParts(data, raw_model, model, optimizer, checkpointer, callbacks, cache, progress, planned)


def _graph_key(cfg: TrainConfig) -> dict[str, Any]:
    """What of the config shapes the compiled step's graph, beyond what its guards check."""
    t = cfg.train
    return {"model": config_to_dict(cfg)["model"], "batch": [t.batch_size, cfg.model.block_size], "dtype": t.dtype,
            "device": t.device, "deterministic": t.deterministic, "parallel": t.parallel}


def default_callbacks(cfg: TrainConfig, attempt: int, rank: int, interactive: bool | None,
                      rules: list[Any] | None = None) -> list[Callback]:
    """The callbacks every run gets; new components register here.

    `rules` are the preregistration's contingency rules: the guard and live
    control judge every action they take against them.
    """
    cbs: list[Callback] = [FaultInjector(cfg.faults, attempt), DivergenceDrill(cfg.faults, attempt),
                           HangWatchdog(cfg.train.hang_timeout_s, cfg.train.hang_factor), StragglerMonitor(cfg.straggler)]
    cbs.append(ControlCallback(rules))
    if cfg.checkpoint.adopt_advice:
        cbs.append(AdviceCallback())
    cbs.append(GuardCallback(cfg.guard, rules))
    if cfg.telemetry.mode != "off":
        cbs.append(Telemetry(cfg.telemetry))
    if rank == 0 and cfg.wandb.enabled:
        cbs.append(WandbSink(cfg.wandb))
    if rank == 0:
        cbs.append(MilestoneNotes())
        cbs.append(ProgressReporter(cfg.train.steps, cfg.train.log_every, attempt, interactive))
    return cbs


def _contingency_rules(book: RunLogbook) -> list[Any] | None:
    """The preregistered contingency rules of this run (None for exploratory runs: no plan to judge against)."""
    return book.run.contingency_rules()


def _checkpoint_emitter(book: RunLogbook, drills: Drills) -> Callable[..., None]:
    """The checkpointer's `emit`: a rejection of a checkpoint that a drill corrupted is part of the drill."""
    drilled = {e.get("data", {}).get("path") for e in book.history.events
               if Run.is_kind(e, "fault_injected") and e.get("data", {}).get("fault") == "corrupt_checkpoint"}

    def emit(kind: str, **kw: Any) -> None:
        path = kw.get("path")  # as recorded (relative to the repository) or, in older logs, as given
        drill = Run.is_kind(kind, "checkpoint_rejected") and (drills.active or path in drilled or book.sink.recorded(path) in drilled)
        book.sink.emit(kind, drill=drill, **kw)

    return emit
