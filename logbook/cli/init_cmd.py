"""`logbook init`."""

from __future__ import annotations

import typer

from logbook.cli._app import app, err


@app.command("init")
def init_cmd(
    entries_dir: str = typer.Option("entries", "--entries", help="Folder for the logbook, relative to the repository root."),
) -> None:
    """Set up a logbook in this git repository (commits logbook.yaml alone, creates entries/), and this clone for sharing it.

    Run it once in every fresh clone: it installs the git hooks that re-render
    the chronicle after `git pull` and says what it did. Running it again
    changes nothing.

    Example: git clone git@host:lab/experiments.git && cd experiments && logbook init
    """
    from logbook.records.init import init_logbook

    res = init_logbook(entries_dir=entries_dir)
    if res.first_commit:
        err("The repository had no commits: made an empty first one (preregistrations are bound to commits)")
    verb = "Created" if res.created else "Found existing"
    done = f" (committed as {res.committed[:10]})" if res.committed else ""
    err(f"{verb} {res.config_path.relative_to(res.root)}{done}; logbook folder: {res.entries.relative_to(res.root)}/")
    for line in res.setup.done:
        err(f"  {line}")
    if res.setup.already and not res.setup.done:
        err("  this clone was already set up: nothing changed")
    for line in res.setup.todo:
        err(f"  to do: {line}")
    _pin_on_first_use()


def _pin_on_first_use() -> None:
    """The first init in a clone pins the repository's trust root, as the first verify would (a broken pins
    file is verify's to report: init still sets the clone up)."""
    from logbook.core.errors import LogbookError
    from logbook.core.project import open_project
    from logbook.trust.tofu import settle

    try:
        said = settle(open_project()).line()
    except LogbookError as e:
        err(f"warning: the trust root was not pinned: {e.message}")
        return
    if said:
        err(f"  {said}")
