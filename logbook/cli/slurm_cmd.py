"""`logbook slurm-script`: a Slurm batch script for a run, resumed on requeue and requeued after a save."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from logbook.cli._app import after_separator, app
from logbook.cli.run_cmd import (HANG_TIMEOUT_OPTION, METRICS_FROM_OPTION, METRICS_REGEX_OPTION, METRICS_TAG_OPTION,
                                 RESUME_ARG_OPTION, STEPS_OPTION)


@app.command("slurm-script")
def slurm_script_cmd(
    config: str = typer.Argument(..., help="Training config (YAML), relative to the project.", show_default=False),
    overrides: Optional[list[str]] = typer.Argument(None, help="Config overrides: key.sub=value ...", show_default=False),
    run_id: str = typer.Option(..., "--run-id", help="The run's id: every requeue of the job resumes this run."),
    prereg: Optional[str] = typer.Option(None, "--prereg", help="Id of the preregistration the run answers to."),
    exploratory: bool = typer.Option(False, "--exploratory", help="Run without a preregistration."),
    nodes: int = typer.Option(1, "--nodes", help="Nodes of the job (one `logbook run` each)."),
    nproc: int = typer.Option(1, "--nproc", help="Worker processes per node."),
    gpus_per_node: int = typer.Option(0, "--gpus-per-node", help="GPUs to ask Slurm for on each node (0: none)."),
    time_limit: str = typer.Option("24:00:00", "--time", help="The job's time limit (Slurm's syntax)."),
    warn: int = typer.Option(120, "--warn", metavar="SECONDS", help="Seconds before the time limit the run is told to save and stop."),
    max_restarts: int = typer.Option(3, "--max-restarts", help="torchrun restarts within one job."),
    rdzv_port: int = typer.Option(29500, "--rdzv-port", help="Rendezvous port on the job's first node (several nodes)."),
    join_timeout: float = typer.Option(600.0, "--join-timeout", metavar="SECONDS", help="How long the rendezvous waits for a lost node."),
    output: Optional[str] = typer.Option(None, "--output", help="The job's output file (appended to across requeues)."),
    logbook_cmd: str = typer.Option("logbook", "--logbook-cmd", help="How the nodes call the logbook CLI."),
    steps: Optional[int] = STEPS_OPTION,
    metrics_regex: Optional[str] = METRICS_REGEX_OPTION,
    metrics_from: Optional[str] = METRICS_FROM_OPTION,
    metrics_tag: Optional[list[str]] = METRICS_TAG_OPTION,
    hang_timeout: Optional[float] = HANG_TIMEOUT_OPTION,
    resume_arg: Optional[list[str]] = RESUME_ARG_OPTION,
) -> None:
    """Print a Slurm batch script for a run: resumed when requeued, saved and requeued on Slurm's signals.

    The script starts `logbook run` on every node with srun (with --resume
    once Slurm has requeued the job), passes the time-limit warning (SIGUSR1,
    sent to the batch shell only) and SIGTERM on to the run, and requeues its
    own job when the run saved and exited 75: Slurm never requeues a job that
    ends by itself. A failed run (exit 5) is not requeued. See docs/slurm.md.

    A training command of your own goes after `--` instead of a config, with
    the options `logbook run -- CMD` takes (one process on one node; the
    command gets a SIGTERM on Slurm's signals).

    Example: logbook slurm-script configs/1b.yaml --prereg 2026-11-30-qknorm-removes-spikes-3f9a --run-id qknorm-1 --nodes 2 --nproc 8 --gpus-per-node 8 > qknorm.sbatch
    """
    from logbook.core.errors import UsageError
    from logbook.core.project import open_project
    from logbook.runs.run_record import check_run_id
    from logbook.launch.launcher import check_elsewhere
    from logbook.launch.slurm import SbatchSpec, sbatch_script

    if bool(prereg) == exploratory:
        raise UsageError("give --prereg ID or --exploratory (one of them)")
    from logbook.launch.wrapped import WrappedOptions, check_command_elsewhere

    command = after_separator()
    opts = WrappedOptions.from_cli(command, max_restarts=max_restarts, steps=steps, metrics_regex=metrics_regex,
                                   metrics_from=metrics_from, metrics_tags=metrics_tag, hang_timeout_s=hang_timeout,
                                   resume_args=resume_arg)
    if command is not None and [config, *(overrides or [])] != command:
        raise UsageError("a config before `--` and a command after it exclude each other")
    project = open_project()
    spec = SbatchSpec(
        run_id=check_run_id(run_id), config=config, project=Path(project.root), overrides=list(overrides or []),
        prereg=prereg, nodes=nodes, nproc=nproc, gpus_per_node=gpus_per_node, time=time_limit, warn_s=warn,
        max_restarts=max_restarts, rdzv_port=rdzv_port, join_timeout_s=join_timeout, output=output,
        logbook_cmd=logbook_cmd, command=command, command_options=opts.cli_args() if opts else [],
    )
    spec.validate()  # the script's own options first: they cost nothing to check
    if opts is not None:
        check_command_elsewhere(project, opts, prereg)
    else:
        check_elsewhere(project, config, spec.overrides, prereg)
    typer.echo(sbatch_script(spec), nl=False)
