"""torchrun with warm workers: `python -m trainer.launch.agent [torchrun options] -m trainer -- [trainer arguments]`.

torchrun starts each attempt's workers as new Python processes, and each
pays for its imports before it can resume: torch and dynamo (which torch's
optimizers import), a second and a half on a small CPU, and for a compiled
run inductor and its start-up checks as well. That is time from a crash to
the first resumed step, paid again on every restart.

This agent is torchrun, with the same options, parser, rendezvous and restart
logic (`torch.distributed.run`), except that the trainer's workers are forked
from a fork server that did all of that once, when the run was launched
(trainer/launch/prewarm.py). A restart then costs a fork and the attempt's own
start-up: SIGKILL to the first resumed step went from 2.0 to 0.7 s here.

Everything a worker reads from its environment (rank, restart count,
rendezvous) it reads after the fork. Any other entry point (a script,
`--no-python`, a static or standalone rendezvous) runs as torchrun runs it.

Each worker is one call of `train_worker`: the trainer's exit code becomes
the process's (75 preempted, 124 hang, ...), so the launcher reads a worker's
ending as it did a torchrun worker's. Workers are named `trainer-r<local
rank>` (`ps -o comm`); their command line is the fork server's.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import select
import signal
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

TRAINER_MODULE = "trainer"
PREWARM_MODULE = "trainer.launch.prewarm"
"""What the fork server imports before it forks a worker (see there)."""
AGENT_PID = "LOGBOOK_AGENT_PID"
"""The agent's pid, in each worker's environment: a worker left without its agent saves and stops."""
FINAL_EXIT = 5
"""A worker's exit code that no restart can change (logbook.core.errors.EXIT_RUN_FAILED): the guard
aborted the run, or a rollback found nothing to go back to. The agent stops rather than restarting."""


def train_worker(*argv: str) -> None:
    """One worker of one attempt: the trainer's `main`, its exit code the process's own."""
    started_at = time.time()
    # A session of its own, as torchrun gives each worker: a signal to the agent's process
    # group (Slurm cancelling a step, a terminal's ^C) reaches the agent, which stops the
    # workers in its own order, rather than interrupting a worker mid-save.
    os.setsid()
    # torch.multiprocessing asks for a SIGINT when the worker's parent dies; that parent is the
    # fork server, which Slurm signals with the rest of a step: the SIGINT would cut into the
    # save that the step's SIGTERM began. The worker watches its agent instead.
    _prctl(1, 0)  # PR_SET_PDEATHSIG: none
    _name_process(f"trainer-r{os.environ.get('LOCAL_RANK', '0')}")
    _term_when_orphaned()
    from trainer.__main__ import main

    try:
        code = main(list(argv), started_at=started_at)
    except Exception:  # noqa: BLE001 - as a Python process would: the traceback on stderr, exit 1
        # main() has left the exception in torchrun's error file (atomically); torch's own
        # wrapper around this function would write it again, in place.
        traceback.print_exc()
        raise SystemExit(1) from None
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    if code:
        raise SystemExit(code)


def _prctl(option: int, arg: int | bytes) -> None:
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(option, arg, 0, 0, 0)


def _name_process(name: str) -> None:
    """Name the worker for `ps -o comm` and `top` (its command line is the fork server's)."""
    _prctl(15, name.encode()[:15])  # PR_SET_NAME


def _term_when_orphaned() -> None:
    """SIGTERM (save and stop) when the agent is gone: nobody would restart the worker or read its ending.

    The fork server, the worker's parent, outlives the agent while any worker
    holds its end of the server's pipe, so the worker watches the agent itself.
    """
    pid = os.environ.get(AGENT_PID, "")
    if not pid.isdigit() or not hasattr(os, "pidfd_open"):  # no agent named, or no pidfd on this system
        return
    try:
        agent = os.pidfd_open(int(pid))
    except ProcessLookupError:  # gone already
        os.kill(os.getpid(), signal.SIGTERM)
        return
    except OSError:
        return

    def watch() -> None:
        select.select([agent], [], [])
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="agent-watch", daemon=True).start()


class _WorkerDeathInOneLine(logging.Filter):
    """torchrun reports a dead worker in one line; for a forked one, torch adds the traceback of its own join.

    That traceback says nothing about the worker (its exit code or signal is in
    the line), so the record keeps the line and drops the traceback. A worker
    killed by a signal left no record of its own: the line is the only place
    that names the signal, so it goes into the worker's rank mark (`ranks_dir`),
    where the next attempt's `restart` finds it.
    """

    def __init__(self, ranks_dir: Path | None = None) -> None:
        super().__init__()
        self.ranks_dir = ranks_dir

    def filter(self, record: logging.LogRecord) -> bool:
        if str(record.msg).startswith("failed (exitcode"):
            if record.exc_info:
                record.exc_info, record.exc_text = None, None
            args = record.args if isinstance(record.args, tuple) else ()
            if args and args[0] == FINAL_EXIT:
                return False  # an abort: the worker has said why in its own line, and the run ends there
            if self.ranks_dir is not None and len(args) >= 3:
                _mark_killed(self.ranks_dir, args[0], args[2])
        return True


def _mark_killed(ranks_dir: Path, exitcode: object, pid: object) -> None:
    """Add `killed_by` (the signal's name) to the open mark of the worker `pid`, when a signal ended it."""
    import json

    from ..job.fsio import atomic_write_json

    if not isinstance(exitcode, int) or exitcode >= 0:
        return  # it exited by itself, with a code and a record of its own
    try:
        name = signal.Signals(-exitcode).name
    except ValueError:
        name = f"signal {-exitcode}"
    for path in sorted(ranks_dir.glob("rank*.json")):
        try:
            mark = json.loads(path.read_text("utf-8"))
            if isinstance(mark, dict) and mark.get("pid") == pid and not mark.get("ended"):
                atomic_write_json(path, {**mark, "killed_by": name})
        except (OSError, ValueError):
            continue  # a mark it cannot read or write only costs the restart its signal's name


def _trainer_run(trainer_args: list[str]) -> tuple[Any, Path] | None:
    """The trainer's parsed arguments and the run's state folder, read without importing torch (None when they
    are bad: the worker reports that itself)."""
    from logbook.api import Run
    from trainer.__main__ import _parser

    try:
        parsed, _ = _parser().parse_known_args([a for a in trainer_args if a != "--"])
        return parsed, Run.state_dir(Path(parsed.project))
    except (Exception, SystemExit):  # noqa: BLE001
        return None


def _ranks_dir(run: tuple[Any, Path] | None) -> Path | None:
    """Where the run's workers keep their rank marks (trainer/startup.py)."""
    if run is None or not run[0].run_id:
        return None
    return run[1] / "ranks" / run[0].run_id


def _compile_state_dir(run: tuple[Any, Path] | None) -> Path | None:
    """The state folder of the run when its config turns on `train.compile`."""
    from trainer.config import load_train_config

    if run is None:
        return None
    try:
        return run[1] if load_train_config(Path(run[0].config), run[0].overrides).train.compile else None
    except (Exception, SystemExit):  # noqa: BLE001 - the worker reports a bad config itself
        return None


def _start_fork_server(compile_state_dir: Path | None) -> None:
    """Start the fork server now: it does its imports and checks while this process goes on with its own."""
    from multiprocessing import forkserver

    # From the package, not trainer.launch.prewarm: importing that module is the server's own start-up.
    from trainer import WARM_COMPILE_CACHE
    if compile_state_dir is not None:
        os.environ[WARM_COMPILE_CACHE] = str(compile_state_dir)  # read by the server as it starts
    multiprocessing.get_context("forkserver").set_forkserver_preload([PREWARM_MODULE])
    forkserver.ensure_running()
    os.environ.pop(WARM_COMPILE_CACHE, None)


def main(argv: list[str] | None = None) -> None:
    from torch.distributed import run as torchrun
    from torch.distributed.launcher.api import elastic_launch

    args = torchrun.parse_args(list(sys.argv[1:] if argv is None else argv))
    warm = (args.module and args.training_script == TRAINER_MODULE and not args.no_python
            and args.rdzv_backend == "c10d" and not args.standalone)
    if not warm:
        torchrun.run(args)
        return
    trainer_args = list(args.training_script_args)
    # Parsed as torchrun parses it, then the entry point swapped for a function of a warm process.
    config, _cmd, _cmd_args = torchrun.config_from_args(args)
    config.start_method = "forkserver"
    os.environ[AGENT_PID] = str(os.getpid())  # the workers' environment is a copy of this one
    run = _trainer_run(trainer_args)
    _start_fork_server(_compile_state_dir(run))
    # torch's log formatter imports dynamo the first time it prints a traceback, which it
    # does when a worker dies: most of a second between the failure and the restart.
    # Imported here, beside the fork server's own imports, it costs nothing then.
    import torch._dynamo  # noqa: F401

    logging.getLogger("torch.distributed.elastic.multiprocessing.api").addFilter(
        _WorkerDeathInOneLine(_ranks_dir(run)))
    _stop_on_final_exit()
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    try:
        elastic_launch(config=config, entrypoint=train_worker)(*trainer_args)
    except ChildFailedError as e:
        if any(f.exitcode == FINAL_EXIT for f in e.failures.values()):
            # The worker has said why in its own words; torch's report of it would be a traceback.
            raise SystemExit(FINAL_EXIT) from None
        raise


def _stop_on_final_exit() -> None:
    """Make torch's agent treat a worker's FINAL_EXIT as final: no restart, the group stopped, the run ended.

    torchrun restarts a failed group whatever the exit code; restarting an aborted
    run only starts attempts that find the abort in the log and exit again, each
    with its own report. torch builds its agent inside `launch_agent`, so the
    subclass is put where that function looks the class up.
    """
    from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent
    from torch.distributed.launcher import api

    class FinalExitAgent(LocalElasticAgent):
        def _monitor_workers(self, worker_group):  # noqa: ANN001, ANN202 - torch's signature
            result = super()._monitor_workers(worker_group)
            if result.is_failed() and any(f.exitcode == FINAL_EXIT for f in result.failures.values()):
                self._remaining_restarts = 0
            return result

    api.LocalElasticAgent = FinalExitAgent


if __name__ == "__main__":
    from torch.distributed.elastic.multiprocessing.errors import record

    record(main)()
