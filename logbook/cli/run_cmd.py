"""`logbook run`: launch the trainer under torchrun with its preregistration."""

from __future__ import annotations

from typing import Optional

import typer

from logbook.cli._app import JSON_OPTION, after_separator, app, err, open_for_writing, print_json
from logbook.core.textfmt import plural


# A command after `--`: how it is watched. `logbook slurm-script` takes the same options and passes them on.
STEPS_OPTION = typer.Option(None, "--steps", min=1, help="With `-- CMD`: the run's length in steps (milestone notes and progress need it).")
METRICS_REGEX_OPTION = typer.Option(None, "--metrics-regex", metavar="REGEX", help="With `-- CMD`: a regular expression over the command's output lines whose named groups (step, loss, ...) are its metrics.")
METRICS_FROM_OPTION = typer.Option(None, "--metrics-from", metavar="SOURCE", help="With `-- CMD`: tensorboard:DIR, the TensorBoard event files the command writes there are its metrics.")
METRICS_TAG_OPTION = typer.Option(None, "--metrics-tag", metavar="TAG=NAME", help="With --metrics-from: a TensorBoard tag's metric name (repeatable), e.g. train/loss=loss.")
HANG_TIMEOUT_OPTION = typer.Option(None, "--hang-timeout", metavar="SECONDS", help="With `-- CMD`: a command silent for this long is hung: killed, recorded, restarted.")
RESUME_ARG_OPTION = typer.Option(None, "--resume-arg", metavar="ARG", help="With `-- CMD`: an argument added to the command on every restart, for a script that resumes only when told (repeatable), e.g. --resume-arg=--init_from=resume.")


@app.command("run")
def run_cmd(
    config: Optional[str] = typer.Argument(None, help="Training config (YAML), e.g. configs/tiny-cpu.yaml; a bare name such as tiny-cpu is configs/tiny-cpu.yaml, copied from logbook's examples if missing.", show_default=False),
    overrides: Optional[list[str]] = typer.Argument(None, help="Config overrides: key.sub=value ...", show_default=False),
    prereg: Optional[str] = typer.Option(None, "--prereg", help="Id of the preregistration this run answers to."),
    nproc: Optional[int] = typer.Option(None, "--nproc", help="Worker processes per node (default 1; on --resume, as before)."),
    max_restarts: Optional[int] = typer.Option(None, "--max-restarts", help="Automatic restarts before the run fails (default 3)."),
    exploratory: bool = typer.Option(False, "--exploratory", help="Run without a preregistration; labelled exploratory everywhere."),
    run_id: Optional[str] = typer.Option(None, "--run-id", help="Run id (default: the preregistration's slug plus 4 hex digits)."),
    resume: Optional[str] = typer.Option(None, "--resume", metavar="RUN", help="Relaunch an existing, unfinished run (after preemption or failure)."),
    nnodes: int = typer.Option(1, "--nnodes", help="Nodes in the run (multi-node: start `logbook run` on each)."),
    node_rank: int = typer.Option(0, "--node-rank", help="This node's rank; node 0 keeps the run's record."),
    rdzv_endpoint: Optional[str] = typer.Option(None, "--rdzv-endpoint", metavar="HOST:PORT", help="Rendezvous address (required with --nnodes > 1)."),
    rdzv_id: Optional[str] = typer.Option(None, "--rdzv-id", help="Rendezvous id (default: the run id)."),
    join_timeout: float = typer.Option(600.0, "--join-timeout", metavar="SECONDS", help="How long the rendezvous waits for every node (at the start, and for a lost node to rejoin) before the run fails."),
    startup_timeout: float = typer.Option(300.0, "--startup-timeout", metavar="SECONDS", help="How long a worker waits for the other workers of its attempt before it fails, naming those missing."),
    steps: Optional[int] = STEPS_OPTION,
    metrics_regex: Optional[str] = METRICS_REGEX_OPTION,
    metrics_from: Optional[str] = METRICS_FROM_OPTION,
    metrics_tag: Optional[list[str]] = METRICS_TAG_OPTION,
    hang_timeout: Optional[float] = HANG_TIMEOUT_OPTION,
    resume_arg: Optional[list[str]] = RESUME_ARG_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Run training under torchrun: check, snapshot the code, record, restart on failure.

    Before the first step: the config is checked by the trainer, the
    preregistration must exist and verify, the code is snapshotted and the
    config hashed into run.json (a config that differs from the preregistered
    one is recorded as a deviation). Each restart lands in the run's event log.

    At a terminal: a spinner through start-up, then one progress line with
    each event that matters printed above it; in a pipe, CI or Slurm, plain
    lines. torchrun's own output goes to .logbook/torchrun/RUN/TIME/torchrun.log.

    LOGBOOK_MAX_STEPS=N cuts a new run to N steps, recorded as the override
    train.steps=N (so a deviation from its preregistration).

    Exit codes: 0 finished · 5 failed or aborted · 75 preempted (resume with
    --resume) · 2 usage · 3 refused · 4 preregistration tampered.

    Any other training command runs after `--`, unchanged: the same record,
    preregistration check and code snapshot; each attempt, exit code or
    signal, restart and the end written from outside; metrics from the
    command's own use of logbook.api or from --metrics-regex over its output
    (docs/integrations.md).

    Example: logbook run --prereg 2026-11-30-qknorm-removes-spikes-3f9a1c configs/tiny-cpu.yaml --nproc 2 --max-restarts 3
    """
    from logbook.launch.wrapped import WrappedOptions

    command = after_separator()
    if command is None and resume is not None and _is_command_run(resume):
        command = []  # the command comes from the run's record
    opts = WrappedOptions.from_cli(command, max_restarts=max_restarts, steps=steps, metrics_regex=metrics_regex,
                                   metrics_from=metrics_from, metrics_tags=metrics_tag, hang_timeout_s=hang_timeout,
                                   resume_args=resume_arg)
    if opts is not None:
        _run_command(opts, [c for c in (config, *(overrides or [])) if c is not None], prereg, exploratory, run_id,
                     nproc, resume, nnodes, as_json)
        return
    from logbook.cli.run_console import RunConsole

    console = RunConsole()  # the spinner first: the checks below take seconds
    try:
        result, project = _launch(console, config, overrides, prereg, nproc, max_restarts, exploratory, run_id, resume,
                         nnodes, node_rank, rdzv_endpoint, rdzv_id, join_timeout, startup_timeout)
    finally:
        console.close()
    _summary(result, project.root)
    if as_json:
        print_json(result.to_dict())
    raise typer.Exit(result.exit_code)


def _is_command_run(run_id: str) -> bool:
    """Whether RUN's record is of a command run after `--` (its resume is the supervisor's, not torchrun's)."""
    from logbook.core.errors import LogbookError
    from logbook.core.project import open_project
    from logbook.runs.run_record import load_run_record

    try:
        return bool(load_run_record(open_project(), run_id).command)
    except LogbookError:
        return False  # the launcher's own checks say what is wrong with it


def _run_command(opts, positional, prereg, exploratory, run_id, nproc, resume, nnodes, as_json) -> None:
    """`logbook run [OPTIONS] -- CMD ...`: the command supervised and recorded from outside."""
    from logbook.core.errors import UsageError
    from logbook.launch.wrapped import launch_command, resume_command

    if positional != opts.command:
        raise UsageError("a config before `--` and a command after it exclude each other",
                         hint="the command after `--` is the whole run: logbook run --exploratory -- python train.py")
    if nproc is not None or nnodes != 1:
        raise UsageError("--nproc and --nnodes are for the bundled trainer, not a command after `--`",
                         hint="a command that starts its own workers (torchrun ...) goes after `--` whole")
    project = open_for_writing()
    if resume is not None:
        if prereg is not None or exploratory or run_id is not None:
            raise UsageError("--resume continues a run as it was recorded: no --prereg, --exploratory or --run-id")
        result = resume_command(project, resume, opts, say=err)
    else:
        result = launch_command(project, opts, prereg_id=prereg, exploratory=exploratory, run_id=run_id, say=err)
    _summary(result, project.root)
    if as_json:
        print_json(result.to_dict())
    raise typer.Exit(result.exit_code)


MAX_STEPS_ENV = "LOGBOOK_MAX_STEPS"
"""Cut a new run to this many steps (a quick try of a config): passed as the override train.steps=N."""


def _max_steps_override(say) -> list[str]:
    """`train.steps=N` when LOGBOOK_MAX_STEPS is set; recorded like any override (a deviation from the preregistration)."""
    import os

    from logbook.core.errors import UsageError

    text = os.environ.get(MAX_STEPS_ENV, "").strip()
    if not text:
        return []
    if not text.isdigit() or int(text) < 1:
        raise UsageError(f"{MAX_STEPS_ENV}={text!r} is not a positive whole number", hint=f"unset it, or e.g. {MAX_STEPS_ENV}=40")
    say(f"{MAX_STEPS_ENV}={text}: the run is cut to {int(text)} steps (recorded as the override train.steps={int(text)})")
    return [f"train.steps={int(text)}"]


def _launch(console, config, overrides, prereg, nproc, max_restarts, exploratory, run_id, resume,
            nnodes, node_rank, rdzv_endpoint, rdzv_id, join_timeout, startup_timeout):
    """Check, record and supervise the run, telling `console` each phase; (result, project)."""
    console.phase("checking the repository and the preregistration")
    project = open_for_writing()
    if config is not None and resume is None:
        from logbook.core.examples import resolve

        found = resolve(project.root, config, "config", say=console.say)
        config = str(found.path) if found else config
    if resume is None:
        overrides = [*(overrides or []), *_max_steps_override(console.say)]
    from logbook.launch.launcher import Rendezvous, launch_run

    console.phase("checking the config with the trainer, snapshotting the code")
    rdzv = Rendezvous(nnodes=nnodes, node_rank=node_rank, endpoint=rdzv_endpoint, rdzv_id=rdzv_id,
                      join_timeout_s=join_timeout, startup_timeout_s=startup_timeout)

    def say(line: str) -> None:
        console.say(line)
        if line.startswith("  torchrun:"):  # the last line before torchrun starts
            console.phase("starting torchrun and the workers")

    result = launch_run(
        project, config, list(overrides or []), prereg_id=prereg, exploratory=exploratory, nproc=nproc,
        max_restarts=max_restarts, run_id=run_id, resume=resume, rendezvous=rdzv, say=say, console=console,
    )
    return result, project


def _summary(result, root) -> None:
    from logbook.cli.console_cmd import stderr_width, wrap_said

    def say(line: str) -> None:  # wrapped at spaces in a terminal: a word is never cut at its edge
        err(wrap_said(line, stderr_width()))

    label = " (exploratory)" if result.exploratory else ""
    restarts = f"{result.restarts} restart" + ("" if result.restarts == 1 else "s")
    say(f"Run {result.run_id}{label} {result.status}: {plural(result.attempts, 'attempt')}, {restarts}.")
    for line in result.restart_lines:
        say(f"  {line}")
    if result.reason:
        say(f"  {result.reason}")
    for d in result.deviations:
        say(f"  deviation: {d}")
    try:
        events = result.events_path.relative_to(root)
    except ValueError:
        events = result.events_path
    say(f"  events: {events}")
