"""`logbook signers`: which keys may sign for which addresses, and `accept` for a key added by someone else."""

from __future__ import annotations

from typing import Optional

import typer

from logbook.cli._app import JSON_OPTION, command_group, err, open_for_writing, print_json

signers_app = command_group("signers")


@signers_app.callback()
def signers_cmd(ctx: typer.Context, as_json: bool = JSON_OPTION) -> None:
    """List each address and key of the allowed-signers file as HEAD commits it, and whether the key may sign for it.

    A key counts for an address when it is the address's first key, when the
    commit that added it is signed (`git commit -S`) by a key the address
    already had, or when such a key accepted it (`logbook signers accept`).
    Any other key, added by someone else for an address that already had
    one, counts for no one: `verify` warns (exit 4 under signing.require).

    Example: logbook signers && logbook signers accept SHA256:4n0b9X... && logbook commit
    """
    if ctx.invoked_subcommand is not None:
        return
    from logbook.core.project import open_project
    from logbook.trust.signatures import SignatureBook
    from logbook.trust.signers import key_standing, standing_dicts

    project = open_project()
    with SignatureBook(project) as book:
        standing = key_standing(project, book)
    if as_json:
        print_json(standing_dicts(standing))
        return
    if not standing.keys:
        err("no allowed signers: logbook.yaml has no `signing:` block, or its file is not committed")
    for k in standing.keys:
        typer.echo(f"{'VALID  ' if k.valid else 'PENDING'}  {k.principal}  {k.fingerprint}  {k.sentence()}")


@signers_app.command("accept")
def accept_cmd(
    key: str = typer.Argument(..., help="The key's fingerprint (SHA256:...), as `logbook signers` and `verify` name it."),
    address: Optional[str] = typer.Option(None, "--for", help="Only this address (default: every address the key "
                                                              "is pending for that your key holds)."),
    as_json: bool = JSON_OPTION,
) -> None:
    """Accept a key someone else added for your address, signing with a key already valid for it.

    Writes a signed record under key_acceptances/ (commit it with `logbook
    commit`); from then on the key signs for the address on every clone, and
    the acceptance survives a rebase or a squash-merge. Refused when your
    signing key (git's user.signingkey) is not valid for the address.

    Example: logbook signers accept SHA256:4n0b9XqkQ3x2f6l7tq0v0x4Jc8Yd0m2Qe1F5sWw9aZk && logbook commit
    """
    from logbook.trust.signers import accept_key

    project = open_for_writing()
    done = accept_key(project, key, address)
    if as_json:
        print_json(done)
        return
    for rec in done["accepted"]:
        typer.echo(rec["path"])
        err(f"accepted {rec['fingerprint']} for {rec['principal']}; `logbook commit` commits the acceptance")
