"""`logbook ckpt-interval`: how often to checkpoint, from the MTBF and the save cost."""

from __future__ import annotations

from typing import Optional

import typer

from logbook.cli._app import JSON_OPTION, app, err, print_json
from logbook.core.textfmt import plural


@app.command("ckpt-interval")
def ckpt_interval_cmd(
    mtbf: Optional[str] = typer.Option(None, "--mtbf", metavar="DURATION",
                                       help="Mean time between failures, e.g. 3.1h (default with --run: measured)."),
    save_cost: Optional[str] = typer.Option(None, "--save-cost", metavar="DURATION",
                                            help="Seconds a save blocks training, e.g. 5m (default with --run: measured)."),
    run_id: Optional[str] = typer.Option(None, "--run", metavar="RUN",
                                         help="Measure the MTBF and save cost from this run's event log."),
    as_json: bool = JSON_OPTION,
) -> None:
    """Advise a checkpoint interval: Young's sqrt(2dM) and Daly's refinement.

    d is the blocking save cost, M the mean time between failures. Daly's
    interval is sqrt(2dM)(1 + (1/3)sqrt(d/2M) + (1/9)(d/2M)) - d for d < 2M;
    for d >= 2M it falls back to M. The expected overhead printed with each
    interval is the first-order waste d/tau + (tau + d)/(2M): the saves
    themselves plus, per failure, half a save period of work redone.

    Durations take units s, m, h, d and combine: 90s, 5m, 3.1h, 2d, 1h30m.
    With --run, the MTBF is the run's wall time over its failures (drills and
    preemptions excluded), once it has had at least 3 (fewer leave the
    interval uncertain by more than ±30%), and the save cost is the median
    blocking seconds of its saves; --mtbf or --save-cost override either
    measurement.

    Example: logbook ckpt-interval --mtbf 3.1h --save-cost 5m
    """
    from logbook.runs.ckpt_advice import advise, advise_from_run, parse_duration
    from logbook.core.errors import RefusedError, UsageError

    mtbf_s = parse_duration(mtbf, "--mtbf") if mtbf is not None else None
    save_s = parse_duration(save_cost, "--save-cost") if save_cost is not None else None
    if run_id is not None:
        advice = advise_from_run(_run_events(run_id), mtbf_s=mtbf_s, save_s=save_s)
    elif mtbf_s is None or save_s is None:
        missing = " and ".join(n for n, v in (("--mtbf", mtbf_s), ("--save-cost", save_s)) if v is None)
        raise UsageError(f"{missing} is required (or --run RUN to measure from a run)",
                         hint="for example: logbook ckpt-interval --mtbf 3.1h --save-cost 5m")
    else:
        advice = advise(save_s, mtbf_s)
    if not advice.complete:
        raise RefusedError(" ".join(advice.notes), hint="for example: logbook ckpt-interval --run RUN --mtbf 3.1h")
    if as_json:
        print_json(advice.to_dict())
        return
    for line in _lines(advice):
        typer.echo(line)
    for note in advice.notes:
        err(f"note: {note}")


def _run_events(run_id: str) -> list[dict]:
    from logbook.eventlog.chain import iter_records
    from logbook.core.project import open_project
    from logbook.runs.run_record import check_run_id, load_run_record

    project = open_project()
    path = project.run_dir(check_run_id(run_id)) / "events.jsonl"
    if not path.exists():  # a run trained without `logbook run` has events but no run record
        load_run_record(project, run_id)  # refuses an unknown run, listing the known ones
    return list(iter_records(path))


def _lines(advice) -> list[str]:
    from logbook.runs.ckpt_advice import format_duration as fmt

    src = {"run": " (measured)", "given": ""}
    out = [f"MTBF {fmt(advice.mtbf_s)}{src[advice.mtbf_source]}, blocking save {fmt(advice.save_s)}"
           f"{src[advice.save_source]}"]
    if advice.mtbf_source == "run":
        out[0] += f": {plural(advice.failures, 'failure')} in {fmt(advice.wall_s)}"
    out.append(f"Young  {fmt(advice.young_s):>14}  ({_secs(advice.young_s)})  expected overhead {advice.young_overhead:.1%}")
    daly = "  (d >= 2M: falls back to M)" if advice.daly_fallback else ""
    out.append(f"Daly   {fmt(advice.daly_s):>14}  ({_secs(advice.daly_s)})  expected overhead {advice.daly_overhead:.1%}{daly}")
    if advice.current_s:
        out.append(f"Now    {fmt(advice.current_s):>14}  ({_secs(advice.current_s)})  expected overhead "
                   f"{advice.current_overhead:.1%}")
    return out


def _secs(s: float) -> str:
    return f"{s:,.0f} s" if s >= 100 else f"{s:.1f} s"
