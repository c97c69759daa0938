"""The `logbook` command line. One module per command group registers on `app`."""

from __future__ import annotations

from ._app import app
from . import init_cmd  # noqa: F401  (registers commands)
from . import run_cmd  # noqa: F401
from . import demo_cmd  # noqa: F401
from . import prereg_cmd  # noqa: F401
from . import set_cmd  # noqa: F401
from . import chronicle_cmd  # noqa: F401
from . import review_cmd  # noqa: F401
from . import outcome_cmd  # noqa: F401
from . import ckpt_cmd  # noqa: F401
from . import slurm_cmd  # noqa: F401

__all__ = ["app", "main"]


def main() -> None:
    try:
        app()
    except BrokenPipeError:
        # Output piped into `head` and the like: the reader left, which is fine.
        import os
        import sys

        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        sys.exit(0)
