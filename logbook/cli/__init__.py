"""The `logbook` command line. One module per command group registers on `app`."""

from __future__ import annotations

from ..errors import EXIT_OK
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
    import sys

    try:
        app()
    except SystemExit as e:
        # Output that click writes itself (help, usage) into a closed pipe
        # makes click exit 1 after wrapping stdout; a reader that left early
        # (`logbook --help | head -1`) is no failure.
        if e.code == 1 and type(sys.stdout).__name__ == "PacifyFlushWrapper":
            sys.exit(EXIT_OK)
        raise
