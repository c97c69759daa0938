"""`logbook demo`: see the whole loop once, in a scratch repository."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from logbook.cli._app import JSON_OPTION, app, err, print_json
from logbook.core.errors import EXIT_TAMPERED
from logbook.core.textfmt import plural


@app.command("demo")
def demo_cmd(
    dir: Optional[Path] = typer.Option(None, "--dir", help="Folder for the scratch repository (kept). Default: a temporary folder."),
    keep: bool = typer.Option(False, "--keep", help="Keep the temporary scratch repository at the end."),
    steps: Optional[int] = typer.Option(None, "--steps", help="Training steps of the demo run (default 120; fewer is quicker, the loss ends higher).", show_default=False),
    nproc: int = typer.Option(1, "--nproc", help="Worker processes under torchrun."),
    as_json: bool = JSON_OPTION,
) -> None:
    """Make a scratch logbook, preregister, train a tiny GPT with drills and a live change, verify.

    The run is real: torchrun starts the trainer, a fault drill SIGKILLs it
    early, torchrun restarts it, and the trainer resumes from its last
    checkpoint. Two drilled loss spikes follow: the divergence guard skips
    the first and rolls back after the second, and a live `logbook set
    lr_scale=0.8` arrives after the first. All of it lands in the run's event
    log and the chronicle. Last, a teammate clones the repository, runs
    `logbook init`, and both write a note the same day: `git pull` and
    `git push` meet no conflict. It ends by building the static site
    (`logbook site`) into the scratch folder and says where it is.

    Example: logbook demo --dir ./demo
    """
    from logbook.demo import DEFAULT_STEPS, run_demo

    from logbook.cli.run_console import RunConsole

    # The run shows what `logbook run` shows: events in words and progress, never torchrun's raw log lines.
    res = run_demo(dir, steps=DEFAULT_STEPS if steps is None else steps, nproc=nproc, keep=keep, say=err,
                   console=RunConsole)
    _summary(res)
    if as_json:
        print_json(res.to_dict())
    if res.run.exit_code != 0:
        raise typer.Exit(res.run.exit_code)
    if not res.verify_ok:
        raise typer.Exit(EXIT_TAMPERED)


def _summary(res) -> None:
    run = res.run
    err("")
    from logbook.cli.console_cmd import stderr_width, wrap_line, wrap_said

    width = stderr_width()

    def say(line: str) -> None:  # wrapped at spaces in a terminal, never mid-word
        err(wrap_said(line, width))

    def quote(line: str) -> None:  # a quoted line keeps its bar on every line it wraps onto
        err(wrap_line("  | ", line, width).replace("\n    ", "\n  | "))

    err(f"Demo done in {res.seconds:.0f} s.")
    say(f"  preregistration: {res.prereg_id}")
    say(f"  run:             {run.run_id} ({run.status}, {plural(run.attempts, 'attempt')}, {plural(run.restarts, 'restart')})")
    for line in run.restart_lines or ["no restart recorded"]:
        say(f"  {line}")
    where = "" if res.kept else " (removed)"
    say(f"  event log:       {run.events_path}{where}")
    for p in res.chronicle:
        say(f"  chronicle:       {p}{where}")
    if res.restart_entry:
        say("  the chronicle's entry for it:")
        for line in res.restart_entry:
            quote(line)
    for line in res.guard_lines or ["no divergence recorded"]:
        say(f"  {line}")
    for line in res.change_lines or ["no hyperparameter change recorded"]:
        say(f"  {line}")
    for title, entry in (("rollback", res.spike_entry), ("live change", res.change_entry)):
        if entry:
            say(f"  the chronicle's entry for the {title}:")
            for line in entry:
                quote(line)
    if res.site:
        say(f"  static site:     {res.site} (open it in a browser)")
    elif res.site_note:
        say(f"  static site:     {res.site_note}")
    elif not res.kept:
        say("  static site:     removed with the scratch folder (--keep keeps it)")
    verdict = "intact" if res.verify_ok else "PROBLEMS: " + "; ".join(res.verify_lines[:3])
    say(f"  logbook verify:  {verdict}")
    if res.team_lines:
        say("  the team workflow, as it ran:")
        for line in res.team_lines:
            quote(line)
