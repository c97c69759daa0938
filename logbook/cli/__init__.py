"""The `logbook` command line. One module per command group registers on `app`.

Commands import the library inside their functions, and only what they use:
`logbook --help` and shell completion then load typer and nothing else, and
each command pays only for its own imports.
"""

from __future__ import annotations

from logbook.cli import init_cmd  # noqa: F401  (registers commands)
from logbook.cli import run_cmd  # noqa: F401
from logbook.cli import demo_cmd  # noqa: F401
from logbook.cli import prereg_cmd  # noqa: F401
from logbook.cli import set_cmd  # noqa: F401
from logbook.cli import chronicle_cmd  # noqa: F401
from logbook.cli import review_cmd  # noqa: F401
from logbook.cli import outcome_cmd  # noqa: F401
from logbook.cli import ckpt_cmd  # noqa: F401
from logbook.cli import slurm_cmd  # noqa: F401
from logbook.cli import stamp_cmd  # noqa: F401
from logbook.cli import sign_cmd  # noqa: F401
from logbook.cli import ack_cmd  # noqa: F401
from logbook.cli._app import app
from logbook.core.errors import EXIT_OK

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
