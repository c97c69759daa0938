"""An attempt's start-up: its logbook, what it trains with, and how it announces itself.

`open_logbook` opens the run's event log, metrics and heartbeat and numbers
the attempt after every attempt before it. `build` makes the data stream, the
model (wrapped for DDP or FSDP2, compiled if asked, with its compile cache
under .logbook/: trainer/compiling.py), the optimizer, the
checkpointer and the callbacks, on the trainer; `default_callbacks` is where
components register. `announce` writes, after the restore, a `restart` for
every earlier attempt whose end is not yet recorded and this attempt's
`run_started`, then starts the heartbeat: only from there does the attempt
count.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from logbook.errors import NotFoundError
from logbook.project import open_project
from logbook.rankmarks import RankMark
from logbook.runs import load_run_record
from logbook.sink import EventSink, KeepRule, MetricsWriter, full_metrics_path

from . import dist
from .advice_cb import AdviceCallback
from .attempts import Heartbeat, RunHistory, classify_restart
from .callbacks import Callback, CallbackList
from .checkpoint import Checkpointer
from .compiling import CompileCache, compile_model
from .config import TrainConfig, config_hash, config_to_dict
from .live_control import ControlCallback
from .data import DataStream, load_corpus
from .faults import DivergenceDrill, FaultInjector
from .guard import GuardCallback
from .milestones_cb import MilestoneNotes
from .model import GPT
from .optim import build_optimizer
from .progress import ProgressReporter
from .slurm import slurm_info
from .straggler import StragglerMonitor
from .telemetry import Telemetry
from .wandb_sink import WandbSink
from .watchdog import HangWatchdog

if TYPE_CHECKING:
    from .loop import Trainer


def open_logbook(t: Trainer) -> dict[str, Any]:
    """Open the run's logbook on `t` (event sink, metrics, heartbeat) and number the attempt.

    Returns what rank 0 found in the run's history, the same on every rank:
    `attempt`, `aborted` (the abort that ended the run, or None) and
    `finished_step` (the step the run finished at, or None).
    """
    t.project = open_project(t.project_root)
    t.run_dir = t.project.run_dir(t.run_id)
    try:
        t.run_record = load_run_record(t.project, t.run_id)
    except NotFoundError:
        t.run_record = None  # launched directly, not through `logbook run`
    t.heartbeat = Heartbeat(t.project.state_dir / "heartbeat" / f"{t.run_id}.json")
    # Rank 0 reads the run's history; every rank acts on what it found.
    ranks_dir = t.project.state_dir / "ranks" / t.run_id
    t.rank_mark = RankMark(ranks_dir, t.dist.rank)
    t.history = RunHistory.read(t.run_dir, t.heartbeat, full_metrics_path(t.project.state_dir, t.run_id), ranks_dir) \
        if t.dist.rank == 0 else RunHistory()
    aborted, finished = t.history.has("run_aborted"), t.history.has("run_finished")
    facts = dist.broadcast_object({
        "attempt": t.history.last_attempt() + 1,
        "aborted": None if aborted is None else {"step": aborted.get("step"), "reason": aborted.get("data", {}).get("reason", "")},
        "finished_step": None if finished is None else finished.get("step"),
    }, t.dist)
    t.attempt = facts["attempt"]
    t.sink = EventSink(t.run_dir, t.run_id, t.attempt, t.dist.rank, root=t.project_root)
    t.metrics = MetricsWriter(t.run_dir, t.dist.rank, full_path=full_metrics_path(t.project.state_dir, t.run_id),
                              keep=_keep_rule(t))
    return facts


def _keep_rule(t: Trainer) -> KeepRule:
    """What the committed metrics keep: ~1,000 rows a run, plus every step a milestone or prediction names.

    Every row also goes to `.logbook/metrics/` (outside git) and, when it is on, to W&B.
    """
    from logbook.milestones import milestone_step

    total = t.cfg.train.steps
    exact = {milestone_step(f, total) for f in t.project.config.milestones}
    rec = t.run_record
    if rec is not None and rec.prereg_id:
        from logbook.errors import LogbookError
        from logbook.prereg import load_prereg

        try:
            preds = load_prereg(t.project, rec.prereg_id).all_predictions(rec.amendments)
        except LogbookError:
            preds = []  # an unreadable preregistration is verify's to report; the stride still plots the run
        for p, _src in preds:
            if p.at.kind == "step":
                exact.add(int(p.at.value))
            elif p.at.kind == "fraction":
                exact.add(milestone_step(float(p.at.value), total))
    return KeepRule.for_run(total, exact)


def build(t: Trainer) -> None:
    """Data, model, optimizer, checkpointer and callbacks of the attempt, set on `t`."""
    cfg, train = t.cfg, t.cfg.train
    corpora = [load_corpus(s, t.project.root, cfg.data) for s in cfg.data.sources]
    t.data = DataStream(corpora, cfg.data, seed=train.seed, block_size=cfg.model.block_size,
                        batch_size=train.batch_size, total_steps=train.steps, rank=t.dist.rank, device=t.device)
    torch.manual_seed(train.seed)  # the same initial weights on every rank and every attempt
    t.raw_model = GPT(cfg.model).to(t.device)
    torch.manual_seed(train.seed + 1 + t.dist.rank)  # per-rank dropout streams
    if train.parallel == "fsdp":
        dist.wrap_model(t.raw_model, t.dist, "fsdp")  # shards in place, before compile and the optimizer
    if train.compile:
        t.compile_cache = CompileCache(t.project.state_dir, t.device.type)  # before anything compiles
        t.model = compile_model(t.raw_model)
    else:
        t.model = t.raw_model
    if train.parallel == "ddp":
        t.model = dist.wrap_model(t.model, t.dist, "ddp")
    t.optimizer = build_optimizer(t.raw_model, cfg.optim, t.device.type)
    ckpt_dir = Path(cfg.checkpoint.dir) if cfg.checkpoint.dir else t.project.checkpoint_dir(t.run_id)
    if not ckpt_dir.is_absolute():
        ckpt_dir = t.project.root / ckpt_dir
    t.checkpointer = Checkpointer(ckpt_dir, keep=cfg.checkpoint.keep, background=cfg.checkpoint.background,
                                  emit=_checkpoint_emitter(t), writer=t.dist.rank == 0)
    # A callback passed in explicitly replaces the default one of the same name.
    extra = {c.name for c in t.extra_callbacks}
    cbs = [c for c in default_callbacks(cfg, t.attempt, t.dist.rank, t.interactive,
                                        _contingency_rules(t)) if c.name not in extra]
    cbs += t.extra_callbacks
    t.callbacks = CallbackList(cbs, t)
    t.progress = next((c for c in t.callbacks if isinstance(c, ProgressReporter)), None)


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


def _contingency_rules(t: Trainer) -> list[Any]:
    """The preregistered contingency rules of this run (none for exploratory runs)."""
    rec = t.run_record
    if rec is None or not rec.prereg_id:
        return []
    from logbook.prereg import load_prereg

    return list(load_prereg(t.project, rec.prereg_id).all_contingency(rec.amendments))


def _checkpoint_emitter(t: Trainer) -> Callable[..., None]:
    """The checkpointer's `emit`: a rejection of a checkpoint that a drill corrupted is part of the drill."""
    drilled = {e.get("data", {}).get("path") for e in t.history.events
               if e.get("kind") == "fault_injected" and e.get("data", {}).get("fault") == "corrupt_checkpoint"}

    def emit(kind: str, **kw: Any) -> None:
        path = kw.get("path")  # as recorded (relative to the repository) or, in older logs, as given
        drill = kind == "checkpoint_rejected" and (t.drill_active or path in drilled or t.sink.recorded(path) in drilled)
        t.sink.emit(kind, drill=drill, **kw)

    return emit


def announce(t: Trainer) -> None:
    """Record the restarts owed by earlier attempts and this attempt's `run_started`; start the heartbeat."""
    if t.dist.rank == 0:
        for prev in t.history.unrecorded_ends(t.attempt):
            latest = prev == t.attempt - 1
            # An older end is owed by an attempt that died starting: it is timed to that start.
            start = t.started_at if latest else (t.history.first_event_time(prev + 1) or t.started_at)
            payload = classify_restart(t.history, prev, t.step, start, t.env if latest else {})
            prev_events = t.history.of_attempt(prev)
            drill = any(e.get("kind") == "fault_injected" or e.get("drill") for e in prev_events)
            t.emit("restart", drill=drill, next_attempt=prev + 1, slurm=slurm_info(t.env), **payload)
    rec = t.run_record
    snapshot = rec.snapshot if rec else {}
    t.emit(
        "run_started",
        config_hash=config_hash(t.cfg), config_path=t.config_path, world_size=t.dist.world_size,
        prereg_id=rec.prereg_id if rec else None, exploratory=rec.exploratory if rec else None,
        snapshot_commit=snapshot.get("commit"), total_steps=t.cfg.train.steps, slurm=slurm_info(t.env),
        tokens_per_step=t.cfg.tokens_per_step * t.dist.world_size, device=str(t.device),
        resumed_from_step=t.step, resumed_from=str(t.resumed_from) if t.resumed_from else None,
        torchelastic_restart_count=int(t.env.get("TORCHELASTIC_RESTART_COUNT", "0") or 0),
        threads=torch.get_num_threads(), dtype=t.cfg.train.dtype, n_params=t.raw_model.num_params(),
        flops_per_token=t.raw_model.flops_per_token(), data_fingerprints=t.data.fingerprints(),
        started_at=t.started_at, restore_s=round(t.restore_s, 6), compiled=t.cfg.train.compile,
        compile_s=round(t.compile_s, 6),
        config_changed=_changed_keys(t.saved_config, config_to_dict(t.cfg)) if t.saved_config else [],
        members=t.dist.members, group_id=t.dist.group_id or None,
    )
    member = t.dist.members[t.dist.rank] if t.dist.members else \
        {"rank": 0, "node": 0, "local_rank": 0, "host": socket.gethostname(), "pid": os.getpid()}
    t.rank_mark.started(t.attempt, member)
    if t.dist.rank == 0:
        # The attempt counts from here: one that dies while building or restoring leaves
        # no trace, so the next start takes its number and its restart names the attempt
        # before it (the failed start is downtime). Numbering it earlier lost its restart.
        t.heartbeat.beat(t.attempt, t.step, time.time())


def _changed_keys(old: dict[str, Any], new: dict[str, Any], prefix: str = "") -> list[str]:
    """Dotted keys whose values differ between two config dicts."""
    out = []
    for k in sorted(set(old) | set(new)):
        a, b = old.get(k), new.get(k)
        key = f"{prefix}{k}"
        if isinstance(a, dict) and isinstance(b, dict):
            out += _changed_keys(a, b, key + ".")
        elif a != b:
            out.append(key)
    return out
