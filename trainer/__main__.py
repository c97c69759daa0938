"""Train one attempt of a run: `python -m trainer --project ROOT --run RUN_ID CONFIG [key=value ...]`.

`logbook run` starts this under torchrun, which restarts it after a failure;
each start is a new attempt of the same run and resumes from the newest good
checkpoint. Run it directly to train without the launcher (the run record is
then simply absent). `--print-config` prints the resolved config and its hash
as JSON and exits, without importing torch.

Exit codes:

- 0: the run reached its last step
- 1: an exception ended the attempt (recorded as `attempt_failed`); restart it to resume
- 2: usage: a bad config, override or argument
- 3: refused: a checkpoint from a different model, a different corpus, ...
- 5: the run failed or was aborted (e.g. by the divergence guard); final: the agent does not restart it
- 75: EXIT_PREEMPTED: SIGTERM or SIGUSR1; the attempt saved its state and exited; restart it to resume
- 124: EXIT_HANG: the watchdog saw no progress for train.hang_timeout_s; restart it to resume
"""

from __future__ import annotations

import time

STARTED_AT = time.time()  # before the imports: "this attempt started" for the downtime figure

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

from logbook.api import LogbookError, Run  # noqa: E402

from . import EXIT_PREEMPTED  # noqa: E402
from .job.fsio import atomic_write_json  # noqa: E402

from .config import config_hash, config_to_dict, load_train_config  # noqa: E402



def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m trainer",
        description="Train a GPT; every restart, checkpoint and failure lands in the run's event log.",
        epilog="Example: python -m trainer --project . --run tiny-1 configs/tiny-cpu.yaml train.steps=100",
    )
    p.add_argument("--project", default=".", help="the logbook's git repository (default: the current folder)")
    p.add_argument("--run", dest="run_id", help="run id: events go to <entries>/runs/<run>/")
    p.add_argument("--print-config", action="store_true", help="print the resolved config and its hash as JSON, and exit")
    p.add_argument("config", help="training config (YAML)")
    p.add_argument("overrides", nargs="*", help="key.sub=value overrides, e.g. optim.lr=3e-4")
    return p


def _fail(e: LogbookError) -> int:
    print(f"error: {e.message}", file=sys.stderr)
    if e.hint:
        print(f"hint: {e.hint}", file=sys.stderr)
    return e.exit_code


def main(argv: list[str] | None = None, started_at: float | None = None) -> int:
    """Train one attempt; `started_at` is when its process began (a forked worker's fork, not this module's import)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--"]:  # what a launcher puts after its own options
        argv = argv[1:]
    args = _parser().parse_args(argv)
    try:
        cfg = load_train_config(Path(args.config), args.overrides)
        if args.print_config:
            print(json.dumps({"config": config_to_dict(cfg), "config_hash": config_hash(cfg)}, indent=2, sort_keys=True))
            return 0
        if not args.run_id:
            print("error: --run RUN_ID is required to train", file=sys.stderr)
            return 2

        Run.check_id(args.run_id)
    except LogbookError as e:
        return _fail(e)
    if cfg.train.deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # must precede CUDA's start
    return _train(cfg, args, STARTED_AT if started_at is None else started_at)


def _record_for_torchrun(exc: BaseException) -> None:
    """Leave the exception in torchrun's per-worker error file, written atomically.

    torch's own `@record` writes that file in place; when torchrun tears the
    worker group down mid-write (a peer rank died), it then reads an empty
    file and its agent crashes instead of restarting the workers.
    """
    import traceback


    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if not path or os.path.exists(path):
        return
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    atomic_write_json(Path(path), {"message": {"message": f"{type(exc).__name__}: {exc}",
                                               "extraInfo": {"py_callstack": tb, "timestamp": str(int(time.time()))}}})


def _train(cfg, args, started_at: float) -> int:
    # Here, not at the top: `--print-config` and argument errors answer without importing torch.
    from .live_control import StopRequested
    from .loop import Preempted
    from .startup import build_trainer

    def run() -> int:
        try:
            trainer = build_trainer(cfg, project_root=Path(args.project), run_id=args.run_id, config_path=args.config,
                                    started_at=started_at)
            trainer.fit()
        except StopRequested as s:
            print(f"stopped on request: saved at step {s.saved_step}; exiting 0", file=sys.stderr)
            return 0
        except Preempted as p:
            print(f"preempted by {p.signal_name}: saved at step {p.saved_step}; exiting {EXIT_PREEMPTED}", file=sys.stderr)
            return EXIT_PREEMPTED
        except LogbookError as e:
            return _fail(e)
        return 0

    try:
        return run()
    except Exception as e:  # under torchrun, an uncaught exception also lands in its error file
        _record_for_torchrun(e)
        raise


if __name__ == "__main__":
    sys.exit(main())
