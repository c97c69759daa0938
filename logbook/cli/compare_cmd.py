"""`logbook compare RUN RUN...`: runs side by side, as text, Markdown (for a note) or JSON.

Text is plain (no colour, no control codes). Run ids and values are never
cut: when the table is wider than the terminal, each row becomes a block of
one line per run instead. In a pipe, and with --wide, the table is printed at its full width.
"""

from __future__ import annotations

import json
import shutil
import sys
from typing import Any

import typer

from logbook.cli._app import JSON_OPTION, WIDE_OPTION, app, complete_run, print_json
from logbook.cli.console_cmd import wrap_line
from logbook.runs.compare import fmt_value




def text_lines(cmp, width: int | None) -> list[str]:
    """The comparison as plain lines: a table per section, or blocks where a table would not fit `width`."""
    lines = [wrap_line("runs: ", ", ".join(f"{r} ({s})" for r, s in zip(cmp.runs, cmp.states)), width)]
    if any(src != "resolved" for src in cmp.config_source):
        lines.append(wrap_line("config: ", ", ".join(f"{r} {s}" for r, s in zip(cmp.runs, cmp.config_source)), width))
    for sec in cmp.sections:
        if not sec.rows and not (sec.title == "config" and cmp.only_differences):
            continue
        lines += ["", _section_title(sec, cmp)]
        if not sec.rows:
            continue
        head = ["", *cmp.runs]
        body = [[r.key, *(fmt_value(v, r.key) for v in r.values)] for r in sec.rows]
        widths = [max(len(row[i]) for row in [head, *body]) for i in range(len(head))]
        if width is None or sum(widths) + 2 * (len(widths) - 1) <= width:
            for row in [head, *body]:
                lines.append("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
        else:
            for row in body:
                lines.append(row[0])
                lines += [wrap_line(f"  {run}: ", cell, width) for run, cell in zip(cmp.runs, row[1:])]
    return lines


def _section_title(sec, cmp) -> str:
    if sec.title != "config" or not cmp.only_differences:
        return sec.title
    if not sec.rows:
        return f"config: identical ({cmp.same_config_keys} keys)"
    return f"config (differences only; {cmp.same_config_keys} keys the same, --all shows them)"


def markdown(cmp) -> str:
    """GFM tables, one per section, for pasting into a note."""
    from logbook.core.textfmt import md_escape, table_cell

    out = [f"Comparison of {', '.join(f'`{r}` ({s})' for r, s in zip(cmp.runs, cmp.states))}."]
    for sec in cmp.sections:
        if not sec.rows:
            continue
        out += ["", f"### {_section_title(sec, cmp)}", "",
                "| | " + " | ".join(table_cell(f"`{r}`") for r in cmp.runs) + " |",
                "|---|" + "---|" * len(cmp.runs)]
        for r in sec.rows:
            cells = [table_cell(md_escape(r.key)), *(table_cell(md_escape(fmt_value(v, r.key))) for v in r.values)]
            out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


@app.command("compare")
def compare_cmd(
    runs: list[str] = typer.Argument(..., metavar="RUN RUN...", help="Two or more run ids.", show_default=False,
                                    autocompletion=complete_run),
    show_all: bool = typer.Option(False, "--all", help="Show every config key, not only those that differ."),
    as_markdown: bool = typer.Option(False, "--markdown", help="Print Markdown tables (for a note) instead of text."),
    wide: bool = WIDE_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Compare runs side by side: config differences, final and per-milestone metrics, verdicts, incidents, goodput.

    The config is what each run trained with (the file from its code snapshot
    plus its overrides, resolved with the trainer's defaults); changes made
    while it trained are listed apart. Figures come from each run's event log
    and metrics; prediction verdicts from its latest `logbook outcome`.

    Example: logbook compare qknorm-3f9a baseline-77c1 --markdown > note.md
    """
    from logbook.core.errors import UsageError
    from logbook.core.project import open_project
    from logbook.runs.compare import compare_runs

    if as_json and as_markdown:
        raise UsageError("--json and --markdown are two formats; choose one")
    cmp = compare_runs(open_project(), list(runs), show_all=show_all)
    if as_json:
        print_json(cmp.to_dict())
    elif as_markdown:
        typer.echo(markdown(cmp), nl=False)
    else:
        width = shutil.get_terminal_size().columns if sys.stdout.isatty() and not wide else None
        for line in text_lines(cmp, width):
            typer.echo(line)
