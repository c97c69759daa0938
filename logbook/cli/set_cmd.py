"""`logbook set`: ask a running run to change a hyperparameter at its next step."""

from __future__ import annotations

from typing import Optional

import typer

from logbook.cli._app import JSON_OPTION, app, complete_run, err, print_json
from logbook.launch.live_settings import SETTINGS


def _keys_help() -> str:
    rows = [f"{s.key} {s.describe_range()}: {s.doc}." for s in SETTINGS.values()]
    return "Keys that can change live:\n\n" + "\n\n".join(rows)


@app.command("set", help=(
    "Ask a running run to change hyperparameters at its next step boundary.\n\n"
    "The request is checked here (known key, type, range; the run must be running), "
    "then left in the run's control folder. The trainer applies all of it or none, "
    "records an hparam_change event per key (who, why, old and new value, a diff of the "
    "config) or an hparam_change_rejected event, and answers. With --wait this command "
    "waits for the answer: exit 0 applied, 3 rejected or no answer in time.\n\n"
    + _keys_help() + "\n\n"
    "Example: logbook set qknorm-3f9a grad_clip=0.5 --reason 'grad norm creeping up since 47k' --wait"
))
def set_cmd(
    run: str = typer.Argument(..., metavar="RUN", help="Id of the running run.", show_default=False,
                          autocompletion=complete_run),
    assignments: list[str] = typer.Argument(..., metavar="KEY=VALUE...", help="One or more changes, e.g. lr=3e-4.", show_default=False),
    reason: Optional[str] = typer.Option(None, "--reason", "-r", help="Why (required; it goes into the chronicle)."),
    wait: bool = typer.Option(False, "--wait", help="Wait for the run's answer and print it (as JSON with --json)."),
    timeout: float = typer.Option(120.0, "--timeout", help="Seconds --wait waits for the answer."),
    as_json: bool = JSON_OPTION,
) -> None:
    from logbook.launch.change_requests import REPLY_KEY, submit_change, wait_for_answer
    from logbook.launch.live_settings import check_reason, parse_assignment
    from logbook.core.errors import RefusedError, UsageError
    from logbook.core.project import open_project

    changes: dict[str, float | int] = {}
    for text in assignments:
        key, value = parse_assignment(text)
        if key in changes:
            raise UsageError(f"`{key}` is given twice", hint="give each key once per request")
        changes[key] = value
    check_reason(reason)
    project = open_project()
    sub = submit_change(project, run, changes, reason or "")
    what = ", ".join(f"{k}={v}" for k, v in changes.items())
    err(f"Asked run {run} for {what} (request {sub.request['request_id']}); it applies at the run's next step.")
    if not wait:
        if as_json:
            print_json(sub.request)
        else:
            typer.echo(sub.request["request_id"])
        return
    try:
        answer = wait_for_answer(project.control_dir(run), sub.name, timeout)
    except KeyboardInterrupt:
        # Only the waiting stops: the request was made and the run still takes it at its next step.
        err(f"stopped waiting; request {sub.request['request_id']} stays pending and applies at the run's next step")
        raise
    if answer is None:
        if as_json:
            print_json({**sub.request, REPLY_KEY: None})
        raise RefusedError(f"no answer from run {run} within {timeout:g} s; the request stays pending",
                           hint="it applies when the run reaches its next step; check that the run is still training")
    if as_json:
        print_json(answer)
    reply = answer[REPLY_KEY]
    if reply.get("status") != "applied":
        raise RefusedError(f"run {run} rejected the change: {reply.get('reason')}")
    for ch in reply.get("applied") or []:
        line = f"applied at step {reply.get('step')}: {ch['key']} {ch['old']} -> {ch['new']}"
        if as_json:
            err(line)
        else:
            typer.echo(line)
