"""`logbook review`: the review queue, comments, approvals and change requests."""

from __future__ import annotations

from typing import Optional

import typer

from logbook.cli._app import (JSON_OPTION, WIDE_OPTION, command_group, err, is_wide, open_for_writing, print_json,
                              set_wide, stdout_console)

review_app = command_group("review")


@review_app.callback()
def review_cmd(
    ctx: typer.Context,
    status: bool = typer.Option(False, "--status", help="One line per run: entries needing review, approved, changes requested, outcome."),
    all_: bool = typer.Option(False, "--all", help="List approved entries too."),
    run: Optional[str] = typer.Option(None, "--run", help="Only this run's entries."),
    wide: bool = WIDE_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """List what needs a reviewer: restarts, divergences, rollbacks, aborts, manual changes, progress notes, outcomes.

    Each line: entry id, UTC time, run, kind, a one-line summary, and
    approvals so far / needed (review_approvals in logbook.yaml). Reviewers
    are git's user.name and user.email; each review is a record of its own
    under entries/reviews/, committed by `logbook commit`. With `signing:` in
    logbook.yaml, reviews are signed with git's SSH signing key and people are
    told apart by key: the launcher's approval, under any address, counts only
    when review_self_approval is committed as true.

    Example: logbook review && logbook review approve qknorm:17 --comment "restart cost matches the drill"
    """
    if ctx.invoked_subcommand is not None:
        return
    set_wide(wide)
    from logbook.chronicle.review import identity_notes, review_queue, review_status
    from logbook.trust.ack import ANY as ACK_ANY

    project = _checked_project(run, entry=ACK_ANY)
    if status:
        rows = review_status(project)
        if as_json:
            print_json([r.to_dict() for r in rows])
            return
        _print_status(rows)
        return
    items = review_queue(project, run=run, include_approved=all_)
    if as_json:
        print_json([i.to_dict() for i in items])
        return
    if not items:
        err("Nothing needs review." if not all_ else "No reviewable entries yet.")
        return
    _print_queue(items)
    for note in identity_notes(project, [i.run for i in items]):
        err(f"note: {note}")


def _checked_project(run: str | None = None, entry: str | None = None):
    """The project, once `verify` passes for what a review reads (exit 4 naming the record otherwise); reviewing
    an acknowledgement (`ack:<id>`) does not wait for the findings it acknowledges."""
    from logbook.proof.intact import require_intact
    from logbook.trust.ack import acknowledged_paths

    project = open_for_writing()  # a review is a record: warn when this clone is not set up for sharing
    require_intact(project, "review", run=run, except_paths=acknowledged_paths(project, entry))
    return project


def _plain(*cells: str):
    """Table cells as plain text: a summary such as `[not in the plan]` is not rich markup."""
    from rich.text import Text

    return [Text(c) for c in cells]


def _print_queue(items) -> None:
    """One table per run (the run is the part of the id before the colon); the summary takes the rest of the width."""
    from rich.table import Table
    from rich.text import Text

    from logbook.cli.console_cmd import wrap_line
    from logbook.cli.prereg_cmd import _wrap_parts

    con = stdout_console()
    runs = list(dict.fromkeys(i.run for i in items))
    for n, run in enumerate(runs):
        # Run names are long and every id in this table starts with one: the column shows the
        # part after the colon, and the title says how to spell a whole id.
        title = f"run {run}  (entry ids are {run}:<n>)"
        table = Table(box=None, pad_edge=False, show_edge=False, title_justify="left", title_style="bold",
                      title=None if is_wide() else title)
        table.add_column("n", no_wrap=True, justify="right")
        table.add_column("time (UTC)", no_wrap=True)
        table.add_column("kind", no_wrap=True)
        table.add_column("approvals", no_wrap=True)
        table.add_column("summary", overflow="fold", min_width=20, ratio=1)
        rows = [_queue_cells(i, run) for i in items if i.run == run]
        for cells in rows:
            table.add_row(*_plain(*cells))
        if n:
            con.print()
        if is_wide():  # the title on one line too, not folded to the table's width
            con.print(Text(title, style="bold"), soft_wrap=True)
        fixed = sum(max(len(c[k]) for c in [QUEUE_COLUMNS, *rows]) + 2 for k in range(4))
        longest = max((len(w) for c in rows for w in c[4].split()), default=0)  # an e-mail address, a path
        if is_wide() or fixed + max(SUMMARY_MIN, longest) <= con.width:
            con.print(table)
            continue
        # Narrower than the ids and kinds: one block per entry, every id and word whole, the summary under it.
        con.print(Text(wrap_line("", title, con.width), style="bold"))
        for cells in rows:
            con.print(Text(_wrap_parts([*cells[:3], f"{cells[3]} approvals"], "", con.width)))
            con.print(Text(wrap_line("    ", cells[4], con.width)))


QUEUE_COLUMNS = ["n", "time (UTC)", "kind", "approvals", "summary"]
SUMMARY_MIN = 20
"""Fewest columns the summary gets in the table; a terminal narrower than that, or than the summaries' longest
word, lists the entries as blocks (a word in a table column would be folded mid-word)."""


def _queue_cells(i, run: str) -> list[str]:
    """An entry's cells: the id after its run's name, time, kind in words, approvals, summary."""
    marks = f"{len(i.approvals)}/{i.needed}" + (" (changes)" if i.changes_requested else "") \
        + (" (launcher's own not counted)" if i.not_counted else "")
    ident = i.id.rpartition(":")[2] if i.id.startswith(f"{run}:") else i.id
    return [ident, i.ts[:16].replace("T", " "), i.kind.replace("_", " "), marks, i.summary]


def _print_status(rows) -> None:
    from rich.table import Table

    if not rows:
        err("No runs with events yet.")
        return
    columns = ("run", "to review", "approved", "changes requested", "outcome", "signed off")
    cells = [[r.run, str(r.needs_review), str(r.approved), str(r.changes_requested),
              "recorded" if r.outcome else "none", "yes" if r.signed_off else "no"] for r in rows]
    con = stdout_console()
    if not is_wide() and sum(max(len(c[k]) for c in [columns, *cells]) + 2 for k in range(len(columns))) > con.width:
        # Narrower than a run's name and the headers: one block per run, the name whole on its own line.
        from logbook.cli.prereg_cmd import _wrap_parts
        from rich.text import Text

        for c in cells:
            con.print(Text(c[0]), soft_wrap=True)
            con.print(Text(_wrap_parts([f"{h} {v}" for h, v in zip(columns[1:], c[1:])], "    ", con.width)))
        return
    table = Table(box=None, pad_edge=False, show_edge=False)
    for col in columns:
        table.add_column(col, no_wrap=True)
    for c in cells:
        table.add_row(*_plain(*c))
    con.print(table)


def _done(res, as_json: bool, verb: str) -> None:
    for w in res.warnings:
        err(f"warning: {w}")
    if as_json:
        print_json(res.to_dict())
        return
    item = res.item
    typer.echo(f"review:{res.record['id']}")
    err(f"{res.record['reviewer']} {verb} {item.id} ({item.kind.replace('_', ' ')}): "
        f"{len(item.approvals)}/{item.needed} approvals, {item.state}.")


@review_app.command("comment")
def comment_cmd(
    entry: str = typer.Argument(..., help="Entry id, e.g. qknorm:17."),
    text: str = typer.Argument(..., help="The comment."),
    as_json: bool = JSON_OPTION,
) -> None:
    """Comment on an entry in the review queue; it does not change its approval state.

    Example: logbook review comment qknorm:17 "was the OOM killer involved?"
    """
    from logbook.chronicle.review import add_review

    _done(add_review(_checked_project(entry=entry), entry, "comment", text), as_json, "commented on")


@review_app.command("approve")
def approve_cmd(
    entry: str = typer.Argument(..., help="Entry id, e.g. qknorm:17."),
    comment: Optional[str] = typer.Option(None, "--comment", help="A remark recorded with the approval."),
    as_json: bool = JSON_OPTION,
) -> None:
    """Approve an entry (once per reviewer; approving replaces your earlier request for changes).

    Example: logbook review approve qknorm:17 --comment "cost matches the drill"
    """
    from logbook.chronicle.review import add_review

    _done(add_review(_checked_project(entry=entry), entry, "approve", comment), as_json, "approved")


@review_app.command("request-changes")
def request_changes_cmd(
    entry: str = typer.Argument(..., help="Entry id, e.g. qknorm:17."),
    text: str = typer.Argument(..., help="What should change, or what is unclear."),
    as_json: bool = JSON_OPTION,
) -> None:
    """Ask for changes on an entry; it stays open until you approve it.

    Example: logbook review request-changes qknorm:23 "the reason for the clip change is missing"
    """
    from logbook.chronicle.review import add_review

    _done(add_review(_checked_project(entry=entry), entry, "request_changes", text), as_json, "asked for changes on")
