"""The `logbook` command line. One module per command group registers on `app`."""

from __future__ import annotations

from ._app import app
from . import init_cmd  # noqa: F401  (registers commands)
from . import run_cmd  # noqa: F401
from . import demo_cmd  # noqa: F401
from . import prereg_cmd  # noqa: F401
from . import ckpt_cmd  # noqa: F401

__all__ = ["app", "main"]


def main() -> None:
    app()
