"""Generate the CLI reference (docs/cli.md) from the commands' own --help.

The reference is generated, never written by hand, so it cannot drift from
the code; a test fails when docs/cli.md is stale. Regenerate with:

    python3 -m logbook.cli.docgen > docs/cli.md
"""

from __future__ import annotations

import os

import typer.main
from typer.testing import CliRunner

from logbook.cli import app


def _walk(cmd, path: tuple[str, ...] = ()):
    yield path, cmd
    for name in sorted(getattr(cmd, "commands", {}) or {}):
        yield from _walk(cmd.commands[name], path + (name,))


def reference() -> str:
    """The whole reference as Markdown."""
    runner = CliRunner()
    out = ["# Command reference", "", "Generated from `logbook --help`; do not edit by hand.", ""]
    before = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"  # stable wrapping, whatever the terminal; given back after, as a caller had it
    try:
        for path, _ in _walk(typer.main.get_command(app)):
            res = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "100", "TERM": "dumb"})
            title = " ".join(("logbook", *path))
            out += [f"## {title}", "", "```", res.stdout.rstrip().replace("Usage: root", "Usage: logbook"), "```", ""]
    finally:
        if before is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = before
    return "\n".join(out)


if __name__ == "__main__":
    print(reference(), end="")
