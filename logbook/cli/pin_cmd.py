"""`logbook pin`: record this repository's trust root in the user's pins file, outside any repository."""

from __future__ import annotations

import typer

from logbook.cli._app import JSON_OPTION, app, err, print_json


@app.command("pin")
def pin_cmd(
    update: bool = typer.Option(False, "--update", help="Replace a pin that differs (a change the lab agreed to)."),
    require_stamps: bool = typer.Option(False, "--require-stamps",
                                        help="Pin `require: true` whatever logbook.yaml says."),
    as_json: bool = JSON_OPTION,
) -> None:
    """Pin this repository's trust root on this machine: every later `verify` here compares the repository with it.

    The trust root is the SHA-256 of each timestamp authority's CA file, the
    `require` setting, (with signing) the allowed-signers file as HEAD commits
    it and signing.require, and the review rules (review_self_approval,
    review_approvals). It is written to $XDG_CONFIG_HOME/logbook/pins.yaml
    (default ~/.config/logbook/pins.yaml), under the repository's origin url,
    so every clone of it on this machine is checked against it. Trust on first
    use: the first `logbook init` or `verify` in a clone pins it already, and
    `logbook pin` does it on demand; a history rewritten afterwards that drops
    `timestamping:`, flips a `require`, swaps a CA file, changes who may sign or
    lowers a review rule is exit 4. A change the
    lab agreed to is recorded with --update, which names each change and the
    commits that made it (author, and the trusted key that signed each).

    Exit 0 when pinned (or already pinned alike); exit 3 when there is nothing
    to pin, the trust root has uncommitted changes, or a different pin exists
    and --update was not given; exit 2 when the pins file does not parse.

    Example: logbook pin && logbook verify
    """
    from logbook.core.project import open_project
    from logbook.trust.pins import find_pin, load_pins, write_pin
    from logbook.trust.tofu import updated_steps

    project = open_project()
    before = find_pin(project, load_pins())
    done = write_pin(project, update=update, require=require_stamps)
    # Who made each change, as HEAD's history says (author, and the trusted key that signed it, if any).
    made = updated_steps(project, before[1]) if before is not None and done.state == "updated" else []
    if as_json:
        print_json({"key": done.key, "file": str(done.path), "state": done.state, "changes": done.changes,
                    "made_in": made, **done.pin.to_dict()})
        return
    pin = done.pin
    verb = {"pinned": "Pinned", "updated": "Updated the pin of", "unchanged": "Already pinned:"}[done.state]
    typer.echo(f"{verb} {done.key} in {done.path}")
    for ca in pin.ca_sha256:
        typer.echo(f"  CA sha256 {ca}")
    typer.echo(f"  require: {str(pin.require).lower()}")
    if pin.allowed_signers_sha256:
        typer.echo(f"  allowed signers sha256 {pin.allowed_signers_sha256}")
    for change in done.changes:
        err(f"changed: {change}")
    for step in made:
        err(f"  made in: {step}")
