"""The typer application, its error handling, and output helpers shared by commands.

Commands live one group per module and register themselves on `app`. They parse
arguments, call the library, and print: data to stdout (`--json` for scripts),
messages to stderr. A `LogbookError` becomes one clear message and its exit code.
Every failure (a library error, bad arguments, a full disk, a bug) is said in
one place, `LogbookGroup`, as `error:`/`hint:` lines; under `--json` it is
also one object `{"error", "hint", "exit_code"}` on stdout, for scripts.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import typer
from typer.core import TyperGroup

from logbook.core.errors import (EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_OK, EXIT_PREEMPTED, EXIT_REFUSED, EXIT_RUN_FAILED,
                      EXIT_TAMPERED, EXIT_USAGE, LogbookError, UsageError)

EXIT_CODES_HELP = (
    f"Exit codes: {EXIT_OK} ok · {EXIT_INTERNAL} internal error · {EXIT_USAGE} usage · {EXIT_REFUSED} refused · "
    f"{EXIT_TAMPERED} tampered · {EXIT_RUN_FAILED} run failed · {EXIT_PREEMPTED} preempted (saved; resume it) · "
    f"{EXIT_INTERRUPTED} interrupted."
)


def err(message: str) -> None:
    """A message for the person at the terminal, on stderr: each line wrapped at spaces to the terminal's
    width (never mid-word; a pipe or a log file gets it whole, one line per line)."""
    from logbook.core.textfmt import wrap_said

    width = stderr_width()
    if width is not None:
        message = "\n".join(wrap_said(line, width) for line in message.split("\n"))
    typer.echo(message, err=True)


def stderr_width() -> int | None:
    """The width of the terminal stderr shows in, or None when stderr is a pipe or a file."""
    return shutil.get_terminal_size().columns if sys.stderr.isatty() else None


_raw_args: list[str] = []
"""The command line after `logbook`, as typed: where a `--` stood, which click's parsing drops."""


def after_separator() -> list[str] | None:
    """What followed the first `--` on the command line (`logbook run -- python train.py`), None without one."""
    return _raw_args[_raw_args.index("--") + 1:] if "--" in _raw_args else None


_json_printed = False
"""Whether this invocation has printed its JSON document: a script reads exactly one."""


def print_json(obj: Any) -> None:
    """Data for scripts, on stdout."""
    global _json_printed
    typer.echo(json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False, default=str))
    _json_printed = True


def color_system() -> str | None:
    """rich's colour system: none at all (no colour, no bold) when NO_COLOR is set and not empty (no-color.org).

    rich's own NO_COLOR handling drops colours but keeps bold and dim; a
    person who asks for no colour wants plain text.
    """
    return None if os.environ.get("NO_COLOR") else "auto"


WIDE_WIDTH = 100_000
"""The console width under `--wide`: no table is ever narrowed, folded or turned into blocks."""

_wide = False


def set_wide(wide: bool) -> None:
    """`--wide` for this invocation: every table at its full width, one row per line."""
    global _wide
    _wide = wide


def is_wide() -> bool:
    return _wide


def stdout_console():
    from rich.console import Console

    class _Console(Console):
        def on_broken_pipe(self) -> None:  # rich would exit 1; a reader that left is no failure
            raise BrokenPipeError

    return _Console(highlight=False, soft_wrap=False, color_system=color_system(), width=WIDE_WIDTH if _wide else None)


def checked_out_path(out: Path | None, option: str = "--out") -> Path | None:
    """An output file whose folder exists: a typo in a path must not create folders anywhere."""
    if out is None:
        return None
    parent = out.expanduser().absolute().parent
    if not parent.is_dir():
        raise UsageError(f"{option} {out}: the folder {parent} does not exist", hint=f"create it first (mkdir -p {parent})")
    if out.is_dir():
        raise UsageError(f"{option} {out} is a folder; give a file name")
    _refuse_inside_entries(out, option)
    return out


def _refuse_inside_entries(out: Path, option: str) -> None:
    """Every file under the logbook folder is a record, a log or rendered from them: an output file there
    would be a stray that `logbook commit` refuses, or be taken for a record."""
    from logbook.core.errors import RefusedError
    from logbook.core.project import open_project
    from logbook.core.recordkinds import where_it_could_go

    try:
        entries = open_project().entries.resolve()
    except LogbookError:
        return  # no logbook here: nothing to keep the file out of
    target = out.expanduser().absolute().resolve()
    if target == entries or entries in target.parents:
        rel = target.relative_to(entries).as_posix()
        raise RefusedError(f"{option} {out} is inside the logbook folder, where only records and what is rendered "
                           "from them belong", hint=f"{where_it_could_go(rel)}; nothing was written")


_SUFFIX_FORMATS = {".md": "md", ".markdown": "md", ".pdf": "pdf"}


def output_format(fmt: str | None, out: Path | None) -> str:
    """md or pdf: as --format says, else as --out's extension says, else md; a .pdf file never gets Markdown.

    A format the file name contradicts (`--format md --out week.pdf`) is refused,
    since the file would open as garbage in whatever its name promises.
    """
    if fmt is not None and fmt not in ("md", "pdf"):
        raise UsageError(f"--format must be md or pdf, got {fmt!r}")
    implied = _SUFFIX_FORMATS.get(out.suffix.lower()) if out is not None else None
    if fmt is not None and implied is not None and fmt != implied:
        raise UsageError(f"--format {fmt} but --out {out} is named as {implied}",
                         hint=f"drop --format (the name decides), or name the file .{fmt}")
    return fmt or implied or "md"


def report_error(e: LogbookError) -> None:
    err(f"error: {e.message}")
    if e.hint:
        err(f"hint: {e.hint}")


def _asked_for_json(ctx: Any) -> bool:
    """Whether the command line holds `--json` (before a `--`): its failure is then a JSON object too.

    Read from the arguments the group has not parsed yet, so that one place
    answers for every command, including a failure while parsing its options.
    """
    args = [*getattr(ctx, "protected_args", []), *ctx.args]
    return "--json" in (args[:args.index("--")] if "--" in args else args)


def _fail(message: str, hint: str | None, code: int, as_json: bool) -> typer.Exit:
    """Say why the command failed (as a JSON object on stdout too, under `--json`); the exit to raise."""
    err(f"error: {message}")
    if hint:
        err(f"hint: {hint}")
    if as_json and not _json_printed:  # a report already printed (verify's, with its problems) stays the one document
        try:
            print_json({"error": message, "hint": hint, "exit_code": code})
        except BrokenPipeError:
            _quiet_closed_stdout()
    return typer.Exit(code)


def _is_cli_control_flow(e: BaseException) -> bool:
    """Exit, Abort and usage errors of the CLI framework pass through untouched.

    typer vendors its own copy of click, so these are recognised by origin
    rather than by importing a particular click.
    """
    mod = type(e).__module__ or ""
    return mod.startswith(("typer", "click")) or isinstance(e, typer.Exit)


def _quiet_closed_stdout() -> None:
    """The reader of our output left (`logbook ls | head -1`): that is success, not an error.

    Whatever is still buffered would fail again when Python flushes at exit,
    so stdout is pointed at /dev/null first.
    """
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def _placeholder(text: str) -> str:
    """`run`, `[RUN]`, `RUN RUN...`, `KEY=VALUE...` -> `RUN`, `KEY=VALUE`: the bare name, in capitals."""
    return text.strip("[]{}<> ").split(" ")[0].removesuffix("...").upper()


def _one_spelling(cmd: Any) -> None:
    """Every placeholder in one spelling, whoever wrote the command: a NAME in capitals.

    An option's value is named by what it is (`--events EVENTS`, `--out OUT`)
    unless the command names it better (`--since WHEN`). The usage line then marks what is required (`{RUN}`), optional (`[RUN]`)
    and repeated (`...`) itself, so a metavar never carries brackets or dots.
    """
    for param in getattr(cmd, "params", []):
        if param.param_type_name == "argument":
            param.metavar = _placeholder(param.metavar or param.name)
        elif param.param_type_name == "option" and not (param.is_flag or param.count):
            long = max(param.opts, key=len).lstrip("-").replace("-", "_")
            param.metavar = _placeholder(param.metavar or long)  # not the type (`<int>`): what to give
    for sub in (getattr(cmd, "commands", None) or {}).values():
        _one_spelling(sub)


RUNNING_AS_COMMAND = False

INTERRUPTED_SAYS: dict[str, str] = {}
"""Command name -> what a Ctrl-C that reaches the app from it means, where the command knows better than
"interrupted" (`commit`: any interrupt it did not answer itself came before anything was committed)."""
"""True once `logbook.cli.main` runs: the process is the `logbook` command and ends with it (commit then keeps
Ctrl-C off to the end); in-process callers (tests, tools) keep their own handler."""

_STORAGE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM}
"""A full disk or quota, a read-only file system, no permission: refused with exit 3, never an internal error."""


class LogbookGroup(TyperGroup):
    """Turns library errors into messages and exit codes, never tracebacks."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _one_spelling(self)

    def make_context(self, info_name: Any, args: Any, parent: Any = None, **extra: Any) -> Any:
        """The root's own options (`logbook --bogus`) fail as every other usage error does."""
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except Exception as e:
            if _is_click_usage_error(e):
                raise _fail(e.format_message(), _usage_hint(e), EXIT_USAGE, "--json" in args) from None
            raise

    def invoke(self, ctx: Any) -> Any:
        global _json_printed, _wide, _raw_args
        _json_printed = _wide = False  # in-process callers (tests, scripts) invoke the app more than once
        _raw_args = [*getattr(ctx, "protected_args", []), *ctx.args]
        as_json = _asked_for_json(ctx)
        try:
            return super().invoke(ctx)
        except LogbookError as e:
            raise _fail(e.message, e.hint, e.exit_code, as_json) from None
        except KeyboardInterrupt:
            if as_json:
                raise _fail("interrupted", None, EXIT_INTERRUPTED, as_json) from None
            err(INTERRUPTED_SAYS.get(ctx.invoked_subcommand or "", "interrupted"))  # a person's own Ctrl-C
            raise typer.Exit(EXIT_INTERRUPTED) from None
        except BrokenPipeError:
            _quiet_closed_stdout()
            raise typer.Exit(EXIT_OK) from None
        except Exception as e:  # a bug: say so plainly, show the trace only on request
            if _is_cli_control_flow(e):
                if _is_click_usage_error(e):  # bad arguments: in the one voice of every other failure
                    raise _fail(e.format_message(), _usage_hint(e), EXIT_USAGE, as_json) from None
                raise
            if os.environ.get("LOGBOOK_DEBUG"):
                raise
            if isinstance(e, OSError) and e.errno in _STORAGE_ERRNOS:
                # The machine's doing, not a bug: every write is atomic, so nothing was left half-written.
                where = f": {e.filename}" if e.filename else ""
                raise _fail(f"{e.strerror or e}{where}", "nothing was half-written; free some space or make the "
                            "folder writable, then run it again", EXIT_REFUSED, as_json) from None
            if as_json:
                raise _fail(f"internal error: {type(e).__name__}: {e}", "rerun with LOGBOOK_DEBUG=1 for the "
                            "traceback, and please report it", EXIT_INTERNAL, as_json) from None
            err(f"internal error: {type(e).__name__}: {e}")
            err("hint: rerun with LOGBOOK_DEBUG=1 for the traceback, and please report it")
            raise typer.Exit(EXIT_INTERNAL) from None


def _is_click_usage_error(e: BaseException) -> bool:
    """Bad arguments, as the CLI framework reports them (by class name: typer vendors its own click)."""
    return any(c.__name__ == "UsageError" for c in type(e).__mro__) and hasattr(e, "format_message")


def _usage_hint(e: Any) -> str:
    """Where the command's usage is written, as click's own message says."""
    ctx = getattr(e, "ctx", None)
    return f"see `{ctx.command_path} --help`" if ctx is not None else "see `logbook --help`"


app = typer.Typer(
    cls=LogbookGroup,
    name="logbook",
    help=(
        "Preregister training runs, record everything that happens to them, and "
        "score the outcome against the promise.\n\n" + EXIT_CODES_HELP + "\n\n"
        "Example: logbook init && logbook prereg --from-file prereg.yaml"
    ),
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def complete_run(incomplete: str) -> list[str]:
    """Shell completion of a run id: the runs of the logbook here whose id starts with what was typed."""
    try:
        from logbook.core.project import open_project
        from logbook.runs.run_record import all_run_ids

        return [r for r in all_run_ids(open_project()) if r.startswith(incomplete)]
    except (LogbookError, OSError):  # no logbook here: nothing to offer, and a completion never prints an error
        return []


JSON_OPTION = typer.Option(False, "--json", help="Print machine-readable JSON on stdout; a failure too, as "
                           "{error, hint, exit_code}.")
"""The `--json` flag every command that prints data shares."""

WIDE_OPTION = typer.Option(False, "--wide", help="Print tables at their full width, one row per line, whatever the "
                           "terminal's width (for `less -S` or a wide window).")
"""The `--wide` flag every command that prints a table shares."""


def command_group(name: str) -> typer.Typer:
    """A sub-command group (`logbook NAME ...`) that also runs on its own, registered on `app`."""
    group = typer.Typer(
        invoke_without_command=True,
        no_args_is_help=False,
        add_completion=False,
        rich_markup_mode=None,
        context_settings={"help_option_names": ["-h", "--help"]},
    )
    app.add_typer(group, name=name)
    return group


def _version(value: bool) -> None:
    if value:
        from logbook import __version__

        typer.echo(f"logbook {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version and exit."),
) -> None:
    """Preregister training runs, record what happens to them, score the outcome."""


def open_for_writing():
    """The project, for a command that writes records: warns on stderr when this clone is not set up for sharing."""
    from logbook.records.clonesetup import setup_warning
    from logbook.core.project import open_project

    project = open_project()
    warning = setup_warning(project)
    if warning:
        err(f"warning: {warning}")
    return project


def is_interactive() -> bool:
    return sys.stdin.isatty() and sys.stdout.isatty() and not os.environ.get("CI")
