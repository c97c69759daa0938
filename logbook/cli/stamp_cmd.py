"""`logbook stamp`: fetch the third-party stamps still missing; and the lines other commands say about stamps."""

from __future__ import annotations

import typer

from logbook.cli._app import JSON_OPTION, app, err, print_json
from logbook.core.textfmt import plural


def say_stamp(outcome) -> None:
    """One stderr line for a stamp a command asked for: nothing when no authority is configured."""
    if outcome is None or outcome.off:
        return
    if outcome.written:
        n = len(outcome.written)
        err(f"Stamped {outcome.what}: third-party time from {n} timestamp {'authority' if n == 1 else 'authorities'}.")
    for why in outcome.pending:
        err(f"warning: stamp pending for {outcome.what}: {why}; `logbook stamp` or `logbook commit` fetches it")


def stamp_quietly(project, stamp, *args, **kw):
    """Run a stamping call after a record was written: a problem with stamping never loses the record."""
    from logbook.core.errors import LogbookError

    try:
        return stamp(project, *args, **kw)
    except LogbookError as e:  # e.g. the configured CA file is missing: the record stands, its stamp waits
        err(f"warning: not stamped: {e.message}" + (f" ({e.hint})" if e.hint else ""))
        return None


@app.command("stamp")
def stamp_cmd(as_json: bool = JSON_OPTION) -> None:
    """Fetch every third-party timestamp still missing: records whose authority could not be reached.

    Preregistrations, amendments, run records, scorecards and each run log's
    current head are stamped by the commands that write them; when an
    authority is down they stay pending, and this command (or `logbook
    commit`, which does the same first) asks again, within one timeout in
    all. Exit 0 when nothing is missing; exit 3 when some stay pending or no
    authority is configured.

    Example: logbook stamp && logbook commit -m "stamps"
    """
    from logbook.core.errors import RefusedError
    from logbook.core.project import open_project
    from logbook.trust.stamp_fetch import stamp_pending

    project = open_project()
    if project.config.timestamping is None:
        raise RefusedError("no timestamp authority is configured, so there is nothing to fetch",
                           hint="name one in logbook.yaml (`timestamping: authorities: [{url: ..., ca: ...}]`, "
                                "see the README)")
    outcomes = stamp_pending(project)
    fetched = [o for o in outcomes if o.written]
    pending = [o for o in outcomes if o.pending and not o.stamped]
    if as_json:
        print_json({"fetched": [{"what": o.what, "digest": o.digest,
                                 "files": [p.relative_to(project.root).as_posix() for p in o.written]} for o in fetched],
                    "pending": [{"what": o.what, "digest": o.digest, "why": o.pending} for o in pending]})
    else:
        for o in fetched:
            typer.echo(f"stamped  {o.what}")
        for o in pending:
            typer.echo(f"PENDING  {o.what}: {o.pending[0]}")
        if not outcomes:
            err("Nothing to stamp: every record has its stamp.")
    if pending:
        raise RefusedError(f"{plural(len(pending), 'stamp')} still pending: the authority could not be reached",
                           hint="check the network or the authority's url, then run `logbook stamp` again")
