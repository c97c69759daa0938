"""`logbook init`."""

from __future__ import annotations

import typer

from ._app import app, err


@app.command("init")
def init_cmd(
    entries_dir: str = typer.Option("entries", "--entries", help="Folder for the logbook, relative to the repository root."),
) -> None:
    """Set up a logbook in this git repository: commits logbook.yaml (alone) and creates entries/.

    Example: logbook init
    """
    from ..init import init_logbook

    res = init_logbook(entries_dir=entries_dir)
    verb = "Created" if res.created else "Found existing"
    done = f" (committed as {res.committed[:10]})" if res.committed else ""
    err(f"{verb} {res.config_path.relative_to(res.root)}{done}; logbook folder: {res.entries.relative_to(res.root)}/")
