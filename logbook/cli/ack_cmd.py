"""`logbook acknowledge`."""

from __future__ import annotations

import typer

from logbook.cli._app import JSON_OPTION, app, err, open_for_writing, print_json


@app.command("acknowledge")
def acknowledge_cmd(
    path: str = typer.Argument(..., help="The record or log `logbook verify` names, relative to the repository root."),
    reason: str = typer.Option(..., "--reason", help="What went wrong, and why the record stays as it is."),
    as_json: bool = JSON_OPTION,
) -> None:
    """Acknowledge what `verify` finds wrong with one record: the way forward from a mistake, for a teammate to review.

    Writes a record naming the file by its path and the hash of its bytes now,
    and the findings it covers (under acknowledgements/; commit it with
    `logbook commit`). It enters `logbook review`'s queue as ack:<id>; once
    someone other than its author approves it, `verify` reports those findings
    as acknowledged instead of exiting 4. Nothing is edited or hidden: a later
    change to the same file is a new finding.

    Example: logbook acknowledge entries/runs/qknorm/events.jsonl --reason "a test line appended by hand on 12-01"
    """
    from logbook.proof.verify import verify_project
    from logbook.trust.ack import ENTRY_PREFIX, acknowledge

    project = open_for_writing()
    rel = path.strip().removeprefix("./")
    report = verify_project(project)
    findings = [f for f in report.problems if f.path == rel]
    rec = acknowledge(project, rel, reason, findings)
    if as_json:
        print_json(rec)
        return
    typer.echo(f"{ENTRY_PREFIX}{rec['id']}")
    kinds = ", ".join(sorted({f['kind'] for f in rec['findings']}))
    err(f"Acknowledged {rel} ({kinds}; sha256 {rec['sha256'][:12]}); it takes effect once a teammate approves it: "
        f"`logbook review approve {ENTRY_PREFIX}{rec['id']}`. Commit it with `logbook commit`.")
