"""`logbook status`, `logbook tail` and `logbook stop`: a running run, seen and stopped from any terminal.

Output is plain text, no colour and no control codes, so a pipe gets exactly
what the terminal shows. Ids are printed whole; a long summary wraps at a
space (never inside a word) under its own column at a terminal, and stays one
line in a pipe.
"""

from __future__ import annotations

import re
import shutil
import sys
from datetime import datetime, timezone
from typing import Optional

import typer

from logbook.cli._app import JSON_OPTION, app, complete_run, err, print_json, stderr_width  # noqa: F401
from logbook.core.textfmt import wrap_line, wrap_said  # noqa: F401  (the commands' one wrapping)
from logbook.core.errors import EXIT_INTERRUPTED

RUN_ARG_HELP = "Run id (default: the run launched last)."


def _width() -> int | None:
    """The terminal's width, or None in a pipe (nothing is wrapped there)."""
    return shutil.get_terminal_size().columns if sys.stdout.isatty() else None


def _clock(ts: str | None) -> str:
    """HH:MM:SS of an event's UTC time (the day is in the status header)."""
    if not ts:
        return "--:--:--"
    try:
        return datetime.fromisoformat(ts.replace("Z", "+00:00")).astimezone(timezone.utc).strftime("%H:%M:%S")
    except ValueError:
        return ts[:8]


def event_text(ev, width: int | None) -> str:
    """One event as `HH:MM:SS  att. N  step S  label: summary` (wrapped under the summary)."""
    step = "-" if ev.step is None else f"{ev.step:,}"
    att = "-" if ev.attempt is None else str(ev.attempt)
    head = f"{_clock(ev.ts)}  a{att:<2} step {step:>7}  "
    text = ev.summary if ev.summary.startswith(ev.label) else f"{ev.label}: {ev.summary}"
    drill = " [drill]" if ev.drill and not text.endswith("(drill)") else ""  # said once, not twice
    return wrap_line(head, text + drill, width)


def progress_text(p) -> str:
    from logbook.core.textfmt import fmt_duration, fmt_num

    parts = [f"step {p.step:,}" + (f"/{p.total_steps:,}" if p.total_steps else "")]
    if p.loss is not None:
        parts.append(f"loss {fmt_num(p.loss)}")
    if p.tokens_per_s is not None:
        parts.append(f"{p.tokens_per_s:,.0f} tok/s")
    if p.eta_s is not None:
        parts.append(f"ETA {fmt_duration(p.eta_s)}")
    if p.attempt is not None:
        parts.append(f"attempt {p.attempt}")
    return " · ".join(parts)


def _resolve(project, run: Optional[str]) -> str:
    from logbook.runs.run_record import check_run_id
    from logbook.runs.status import latest_run

    return check_run_id(run) if run else latest_run(project)


@app.command("status")
def status_cmd(
    run: Optional[str] = typer.Argument(None, metavar="[RUN]", help=RUN_ARG_HELP, show_default=False,
                                  autocompletion=complete_run),
    events: int = typer.Option(8, "--events", "-n", min=0, help="How many of the last events to show."),
    as_json: bool = JSON_OPTION,
) -> None:
    """Show where a run stands: health, attempt, step, ETA and its last events.

    Health is alive (a sign of life recently), stalled (running by its log but
    silent for longer than 20 median steps, at least 2 minutes) or ended, with
    how it ended (finished, failed, aborted, stopped, preempted, or a launcher
    gone without a word). Events are one line each, in the words of the event
    registry; routine checkpoint saves are left out.

    Example: logbook status qknorm-3f9a --json
    """
    from logbook.core.project import open_project
    from logbook.runs.status import run_status

    project = open_project()
    st = run_status(project, _resolve(project, run), events=events)
    if as_json:
        print_json(st.to_dict())
        return
    for line in _status_lines(st, _width()):
        typer.echo(line)


def _status_lines(st, width: int | None) -> list[str]:
    from logbook.core.textfmt import fmt_duration, fmt_num

    label = "exploratory" if st.exploratory else f"preregistration {st.prereg_id}" if st.prereg_id else "no preregistration"
    lines = [f"run      {st.run}", wrap_line("tests    ", label, width), wrap_line("health   ", f"{st.health}: {st.how}", width)]
    where = []
    if st.attempt is not None:
        where.append(f"attempt {st.attempt}")
    if st.step is not None:
        total = f"/{st.total_steps:,}" if st.total_steps else ""
        frac = f" ({st.fraction:.0%})" if st.fraction is not None else ""
        where.append(f"step {st.step:,}{total}{frac}")
    if st.loss is not None:
        where.append(f"loss {fmt_num(st.loss)}")
    if st.eta_s is not None:
        where.append(f"ETA {fmt_duration(st.eta_s)} at {fmt_duration(st.seconds_per_step)}/step")
    lines.append(wrap_line("progress ", " · ".join(where) or "no step yet", width))
    if st.last_events:
        lines.append("last events (UTC):")
        lines += ["  " + event_text(ev, None if width is None else width - 2).replace("\n", "\n  ")
                  for ev in st.last_events]
    return lines


@app.command("tail")
def tail_cmd(
    run: Optional[str] = typer.Argument(None, metavar="[RUN]", help=RUN_ARG_HELP, show_default=False,
                                  autocompletion=complete_run),
    follow: bool = typer.Option(False, "--follow", "-f", help="Keep printing new events and progress until the run ends."),
    lines: int = typer.Option(10, "--lines", "-n", min=0, help="How many of the last events to print first."),
    interval: float = typer.Option(2.0, "--interval", min=0.1, metavar="SECONDS", help="Seconds between progress lines with --follow."),
) -> None:
    """Print a run's events as one-line summaries; with --follow, also its progress, until it ends.

    Works from any terminal while the run trains elsewhere. With --follow the
    command ends when the run does (finished, failed, aborted, stopped or
    preempted), saying how; exit 0. Ctrl-C stops following (exit 130) and
    leaves the run alone.

    Example: logbook tail qknorm-3f9a --follow
    """
    from logbook.core.project import open_project
    from logbook.launch.follow import Ended, Progress, follow as follow_run

    project = open_project()
    run_id = _resolve(project, run)
    width = _width()
    try:
        for item in follow_run(project, run_id, until_end=follow, last=lines, progress_every_s=interval):
            if isinstance(item, Progress):
                typer.echo(progress_text(item))
            elif isinstance(item, Ended):
                typer.echo(f"run {run_id} {item.how}")
            else:
                typer.echo(event_text(item, width))
            sys.stdout.flush()
    except KeyboardInterrupt:  # only the following stops; the run trains on
        raise typer.Exit(EXIT_INTERRUPTED) from None


@app.command("stop")
def stop_cmd(
    run: str = typer.Argument(..., metavar="RUN", help="Id of the running run.", show_default=False,
                          autocompletion=complete_run),
    reason: Optional[str] = typer.Option(None, "--reason", "-r", help="Why (goes into the run_stopped event and the chronicle)."),
    wait: bool = typer.Option(True, "--wait/--no-wait", help="Wait until the run has saved and stopped."),
    timeout: float = typer.Option(600.0, "--timeout", metavar="SECONDS", help="Seconds --wait waits for the run's answer."),
    as_json: bool = JSON_OPTION,
) -> None:
    """Stop a running run cleanly: it saves a checkpoint at its next step, records run_stopped and ends.

    The request goes through the same channel as `logbook set`; the trainer
    takes it at its next step boundary, so nothing is lost and the launcher does
    not restart it (its `logbook run` exits 0, status stopped). A stopped run
    can be resumed with `logbook run --resume RUN`. Exit 0 stopped, 3 refused
    (unknown or ended run) or no answer within --timeout.

    Example: logbook stop qknorm-3f9a --reason 'loss plateaued; freeing the nodes'
    """
    from logbook.core.errors import RefusedError
    from logbook.core.project import open_project
    from logbook.launch.change_requests import REPLY_KEY, submit_stop, wait_for_answer

    project = open_project()
    sub = submit_stop(project, run, reason)
    err(f"Asked run {run} to save and stop at its next step (request {sub.request['request_id']}).")
    if not wait:
        print_json(sub.request) if as_json else typer.echo(sub.request["request_id"])
        return
    try:
        answer = wait_for_answer(project.control_dir(run), sub.name, timeout)
    except KeyboardInterrupt:
        err(f"stopped waiting; request {sub.request['request_id']} stays pending and the run stops at its next step")
        raise
    if answer is None:
        raise RefusedError(f"no answer from run {run} within {timeout:g} s; the request stays pending",
                           hint="the run stops when it reaches its next step; see `logbook status " + run + "`")
    if as_json:
        print_json(answer)
        return
    reply = answer[REPLY_KEY]
    typer.echo(f"run {run} stopped at step {reply.get('step')}: checkpoint at step {reply.get('saved_step')}")
