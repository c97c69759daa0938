"""`logbook note`, `logbook render`, `logbook commit`: the chronicle commands."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from logbook.cli._app import INTERRUPTED_SAYS, JSON_OPTION, app, checked_out_path, err, output_format, open_for_writing, print_json
from logbook.core.errors import EXIT_INTERRUPTED, EXIT_REFUSED, UsageError
from logbook.core.textfmt import plural


def _rel(root: Path, p: Path) -> str:
    try:
        return Path(p).resolve().relative_to(root).as_posix()
    except ValueError:
        return str(p)


@app.command("note")
def note_cmd(
    text: str = typer.Argument(..., help="The note, in Markdown; `-` reads it from standard input."),
    run: Optional[str] = typer.Option(None, "--run", help="The run the note is about."),
    step: Optional[int] = typer.Option(None, "--step", help="The step the note refers to."),
    about: Optional[str] = typer.Option(None, "--about", help="Entry id this note corrects (a run's event, e.g. qknorm:17, or a note's id as `logbook note` printed it): an erratum."),
    as_json: bool = JSON_OPTION,
) -> None:
    """Add a signed note to the chronicle (author from git); --about attaches it to an earlier entry as an erratum.

    Notes are Markdown, at most 64 KiB of UTF-8. The earlier entry is never
    edited: its day file gains a warning that links to the note.

    If the note is written but its day file cannot be (a full disk), it says so and exits 3; the
    same note again (same author, words, run, step and target, the same UTC day, not yet shown
    in its day file) is that retry: it finds the note and redoes only the day files.

    Example: logbook note --about qknorm:17 "Batches 47,000-47,300 are a forum dump; see data issue #88"
    """
    from logbook.chronicle.notes import add_note

    project = open_for_writing()
    body: str | bytes = sys.stdin.buffer.read() if text == "-" else text
    res = add_note(project, body, run=run, step=step, about=about)
    if as_json:
        print_json({"id": res.id, "record": res.record, "written": [_rel(project.root, p) for p in res.rendered.written],
                    "retried": res.retried, "render_error": res.render_error})
    else:
        typer.echo(res.id)
    day = res.record["ts"][:10]
    if res.render_error:  # the record is kept: say so, and how the rest gets done (never "nothing was written")
        err(f"error: {res.id} is written and kept, but the day files that show it could not be written: {res.render_error}")
        first = f"{res.render_fix}; then run" if res.render_fix else "free some space, then run"
        err(f"hint: {first} `logbook render` to redo the day files "
            f"(running this same note again finds {res.id} and redoes only them)")
        raise typer.Exit(EXIT_REFUSED)
    if as_json:
        return
    if res.retried:
        err(f"{res.id} was already written on {day} (an earlier try whose day file failed); re-rendered the day files that show it.")
        return
    err(f"Noted {res.id} on {day}" + (f" as an erratum to {about}" if about else "")
        + f"; re-rendered {plural(len(res.rendered.written) + len(res.rendered.unchanged), 'day file')}.")


@app.command("render")
def render_cmd(
    run: Optional[str] = typer.Option(None, "--run", help="Only this run (dated files: the days it has events on)."),
    since: Optional[str] = typer.Option(None, "--since", help="First day, YYYY-MM-DD (UTC)."),
    until: Optional[str] = typer.Option(None, "--until", help="Last day, YYYY-MM-DD (UTC)."),
    fmt: Optional[str] = typer.Option(None, "--format", help="md (dated day files, or one file with --out) or pdf; default: as --out's extension says, else md."),
    out: Optional[Path] = typer.Option(None, "--out", help="Write one file here (default for pdf: chronicle.pdf)."),
    check: bool = typer.Option(False, "--check", help="Render in memory and compare with the day files on disk; exit 3 if any differ."),
    reports_since: Optional[str] = typer.Option(None, "--reports-since", metavar="REV", help="Also write again the Markdown reports that changed since REV."),
    pulled: Optional[str] = typer.Option(None, "--pulled", metavar="REV", help="Only what the commits since REV changed: the days their records show on and the reports they touch (what the clone's hooks run after a pull: ORIG_HEAD). Everything when that cannot be told."),
    as_json: bool = JSON_OPTION,
) -> None:
    """Render the chronicle from the event logs and notes: dated Markdown files, one Markdown file, or a PDF.

    Day files (entries/YYYY/MM/DD.md) always hold every run of that day; --run
    selects days. With --out or --format pdf, --run keeps one run's entries.

    Example: logbook render --format pdf --since 2026-11-30 --out week.pdf
    """
    from logbook.chronicle.build import check_chronicle, render_chronicle, render_markdown_file
    from logbook.core.project import open_project
    from logbook.proof.intact import require_intact

    fmt = output_format(fmt, out)
    out = checked_out_path(out)
    if pulled is not None and (out is not None or fmt != "md" or check or run or since or until):
        raise UsageError("--pulled chooses the days itself: it takes no --out, --format pdf, --check, --run, --since "
                         "or --until")
    project = open_project()
    root = project.root.resolve()
    require_intact(project, "render")
    if check:
        if fmt != "md" or out is not None:
            raise UsageError("--check compares the dated Markdown files; it takes neither --out nor --format pdf")
        res = check_chronicle(project, run=run, since=since, until=until)
        if as_json:
            print_json({"matching": [_rel(root, p) for p in res.matching]})
        err(f"{plural(len(res.matching), 'day file')} {'matches' if len(res.matching) == 1 else 'match'} the logs.")
        return
    if fmt == "pdf":
        from logbook.chronicle.pdf import render_pdf

        pres = render_pdf(project, out or Path("chronicle.pdf"), run=run, since=since, until=until)
        for w in pres.warnings:
            err(f"warning: {w}")
        if as_json:
            print_json({"path": str(pres.path), "days": pres.days, "events": pres.events, "notes": pres.notes})
        else:
            typer.echo(str(pres.path))
        err(f"Rendered {plural(len(pres.days), 'day')}, {plural(pres.events, 'event')}, {plural(pres.notes, 'note')} to {pres.path}.")
        return
    days = None
    if pulled is not None:
        from logbook.chronicle.pulled import pulled_days

        days = pulled_days(project, pulled)
        reports_since = reports_since or pulled
    if out is not None:
        res = render_markdown_file(project, out, run=run, since=since, until=until)
    else:
        res = render_chronicle(project, run=run, since=since, until=until, days=days)
    for w in res.warnings:
        err(f"warning: {w}")
    if reports_since and out is None:
        from logbook.chronicle.report import refresh_reports

        res.written += refresh_reports(project, reports_since)
    if as_json:
        print_json({"written": [_rel(root, p) for p in res.written], "unchanged": [_rel(root, p) for p in res.unchanged],
                    "removed": [_rel(root, p) for p in res.removed], "days": res.days, "events": res.events, "notes": res.notes})
        return
    for p in res.written:
        typer.echo(_rel(root, p))
    err(f"Wrote {plural(len(res.written), 'file')}, {len(res.unchanged)} unchanged"
        + (f", removed {len(res.removed)}" if res.removed else "")
        + f": {plural(len(res.days), 'day')}, {plural(res.events, 'event')}, {plural(res.notes, 'note')}.")


# A Ctrl-C in the moment between the app starting the command and `_commit_or_say_interrupted` taking over.
INTERRUPTED_SAYS["commit"] = "interrupted: nothing was committed"


@app.command("commit")
def commit_cmd(
    message: Optional[str] = typer.Option(None, "-m", "--message", help="Subject line (the generated summary goes in the body)."),
    as_json: bool = JSON_OPTION,
) -> None:
    """Commit everything that changed under the logbook folder, in one commit, leaving your staged and unstaged work alone.

    The commit is built beside your index, so git hooks (pre-commit, commit-msg) do not run: they would
    check your staged work, not the logbook's. Records are verified by `logbook verify` instead.
    Third-party stamps still pending (an authority was unreachable) are fetched first, within one
    timeout, and committed too.

    Ctrl-C before the commit is made exits 130 saying that nothing was committed; once it is made,
    the command finishes (prints it, exit 0) whatever the keyboard does.

    Example: logbook commit -m "qknorm: first night"
    """
    import signal

    handler = signal.getsignal(signal.SIGINT)
    try:
        project, res = _commit_or_say_interrupted(message)
        _print_commit(project, res, as_json)
    finally:
        if not _in_console_script():  # an in-process caller (a test, a tool) gets its Ctrl-C back
            signal.signal(signal.SIGINT, handler)


def _in_console_script() -> bool:
    import logbook.cli._app as app_module  # read now: main() sets it after this module was imported

    return app_module.RUNNING_AS_COMMAND


def _print_commit(project, res, as_json: bool) -> None:
    if not res.commit:
        if as_json:
            print_json({"commit": None, "branch": res.branch, "message": res.message, "paths": []})
        else:
            err(res.message[0].upper() + res.message[1:] + ".")
        return
    if as_json:
        print_json({"commit": res.commit, "branch": res.branch, "message": res.message, "paths": res.paths,
                    "runs": res.runs, "events": res.events, "notes": res.notes, "reviews": res.reviews})
        return
    typer.echo(res.commit)
    err(f"[{res.branch.removeprefix('refs/heads/')} {res.commit[:10]}] {res.message.splitlines()[0]} ({plural(len(res.paths), 'file')})")


def _git_out(root: Path, *args: str) -> str:
    import subprocess

    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True).stdout.strip()


def _head(root: Path) -> str:
    """The commit HEAD names now ('' on an unborn branch)."""
    return _git_out(root, "rev-parse", "-q", "--verify", "HEAD")


def _commit_or_say_interrupted(message: Optional[str]):
    """Commit; a Ctrl-C is answered by what git holds, so the exit code says whether the commit happened.

    Once the commit is made (or there was nothing to make), Ctrl-C is ignored for
    the rest of the command: only printing is left, and a late interrupt must not
    turn a made commit into exit 130. An interrupt that lands before that is
    checked against HEAD: if the branch moved, the commit was made after all.
    """
    import signal

    before = project = None
    try:
        from logbook.core.project import open_project
        from logbook.records.commit import CommitResult, commit_logbook

        project = open_project()
        before = _head(project.root)
        _fetch_pending_stamps(project)
        res = commit_logbook(project, message)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        return project, res
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        after = _head(project.root) if before is not None else None
        if before is None or after == before:
            err("interrupted: nothing was committed")
            raise typer.Exit(EXIT_INTERRUPTED) from None
        err(f"interrupted after the commit was made: {after[:10]} is on the branch")
        root = project.root
        return project, CommitResult(commit=after, branch=_git_out(root, "symbolic-ref", "-q", "HEAD"),
                            message=_git_out(root, "log", "-1", "--format=%B", after),
                            paths=_git_out(root, "diff-tree", "-r", "--no-commit-id", "--name-only", after).splitlines())


def _fetch_pending_stamps(project) -> None:
    """Stamps an unreachable authority left pending go into this commit (within one timeout in all)."""
    from logbook.cli.stamp_cmd import say_stamp, stamp_quietly
    from logbook.trust.stamp_fetch import stamp_pending

    for outcome in stamp_quietly(project, stamp_pending) or []:
        say_stamp(outcome)


@app.command("migrate")
def migrate_cmd(
    as_json: bool = JSON_OPTION,
) -> None:
    """Copy a logbook's shared logs (notes.jsonl, reviews.jsonl, outcome.json) into one file per record.

    Nothing is deleted or edited: the old files stay as committed and are no
    longer read. Running it again copies nothing twice. Afterwards, run
    `logbook render` and `logbook commit`.

    Example: logbook migrate && logbook render && logbook commit -m "one file per record"
    """
    from logbook.records.migrate import migrate

    project = open_for_writing()
    res = migrate(project)
    if as_json:
        print_json({"notes": res.notes, "reviews": res.reviews, "outcomes": res.outcomes, "skipped": res.skipped,
                    "remapped": res.remapped})
        return
    err(f"Migrated {plural(res.notes, 'note')}, {plural(res.reviews, 'review')} and {plural(res.outcomes, 'scorecard')}"
        + (f"; {res.skipped} already migrated" if res.skipped else "")
        + ". Now run `logbook render` and `logbook commit`.")
