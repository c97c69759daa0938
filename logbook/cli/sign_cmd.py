"""`logbook sign`: sign records already written, with git's SSH signing key."""

from __future__ import annotations

from pathlib import Path

import typer

from logbook.cli._app import JSON_OPTION, app, err, print_json


@app.command("sign")
def sign_cmd(
    records: list[Path] = typer.Argument(..., help="Record files to sign (preregistrations, amendments, run.json, "
                                                   "reviews, scorecards)."),
    as_json: bool = JSON_OPTION,
) -> None:
    """Sign records written before your key was set up; new records are signed as they are written.

    The key is git's own (`gpg.format ssh`, `user.signingkey`), as for signed
    commits. Each signature is a record, entries/signatures/<sha256>/<key>.sig,
    committed by `logbook commit`; `logbook verify` checks it against the
    allowed-signers file that logbook.yaml's `signing:` names, as committed.
    A record that names another person whose address a key holds is signed
    by them first; yours beside theirs is a co-signature.

    Example: logbook sign entries/prereg/2026-11-30-qknorm-removes-spikes-3f9a.md && logbook commit
    """
    from logbook.core.project import open_project
    from logbook.trust.signed_records import sign_existing

    project = open_project()
    rels = [(p if p.is_absolute() else Path.cwd() / p).resolve() for p in records]
    paths = [p.relative_to(project.root).as_posix() if p.is_relative_to(project.root) else str(p) for p in rels]
    done = sign_existing(project, paths)
    if as_json:
        print_json([d.__dict__ for d in done])
        return
    for d in done:
        typer.echo(d.signature)
        err(f"signed {d.record} with {d.fingerprint}; `logbook commit` commits the signature")
