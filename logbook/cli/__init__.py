"""The `logbook` command line. One module per command group registers on `app`.

Commands import the library inside their functions, and only what they use:
`logbook --help` and shell completion then load typer and nothing else, and
each command pays only for its own imports.

This package itself imports nothing at load: the console script's
`from logbook.cli import main` must finish before `main` can catch a Ctrl-C,
so everything else (typer, the commands) is imported inside `main`, where an
interrupt is a sentence and exit 130, never a traceback. `logbook.cli.app`
still works: it is loaded on first use.
"""

from __future__ import annotations

import sys

__all__ = ["app", "main"]

_INTERRUPTED = 130
"""logbook.core.errors.EXIT_INTERRUPTED, spelled here so that no import precedes the handler."""


def _load_app():
    """The typer app with every command registered."""
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
    from logbook.cli import signers_cmd  # noqa: F401
    from logbook.cli import console_cmd  # noqa: F401
    from logbook.cli import compare_cmd  # noqa: F401
    from logbook.cli import pin_cmd  # noqa: F401
    from logbook.cli import site_cmd  # noqa: F401
    from logbook.cli._app import app

    return app


def __getattr__(name: str):
    if name == "app":
        return _load_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _interrupted_before_start() -> None:
    """A Ctrl-C before any command ran (start-up, argument parsing): nothing was changed."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not interrupt the sentence
    sys.stderr.write("interrupted before the command started: nothing was changed\n")
    sys.exit(_INTERRUPTED)


def main() -> None:
    try:
        app = _load_app()
        from logbook.cli import _app

        _app.RUNNING_AS_COMMAND = True
    except KeyboardInterrupt:
        _interrupted_before_start()
    try:
        app()
    except KeyboardInterrupt:  # outside a command's own handling (typer turns most into exit 130 itself)
        _interrupted_before_start()
    except SystemExit as e:
        # Output that click writes itself (help, usage) into a closed pipe
        # makes click exit 1 after wrapping stdout; a reader that left early
        # (`logbook --help | head -1`) is no failure.
        if e.code == 1 and type(sys.stdout).__name__ == "PacifyFlushWrapper":
            sys.exit(0)
        if e.code == _INTERRUPTED and isinstance(e.__context__, Exception) \
                and isinstance(e.__context__.__cause__, KeyboardInterrupt):
            _interrupted_before_start()  # typer's own conversion of a Ctrl-C while parsing, which says nothing
        raise
