"""`logbook outcome`, `logbook calibration`, `logbook report`: scoring runs and telling their story."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ..errors import UsageError
from ._app import JSON_OPTION, app, err, open_for_writing, print_json, stdout_console

_JSON = JSON_OPTION
_STATUS_STYLE = {"confirmed": "green", "refuted": "red", "inconclusive": "yellow"}


@app.command("outcome")
def outcome_cmd(
    run: str = typer.Argument(..., help="The run to score."),
    as_json: bool = _JSON,
) -> None:
    """Score a run's preregistered predictions: confirmed, refuted or inconclusive, with the measured values.

    Lists every deviation from the plan: live changes, contingency actions
    that differed from it, a config other than the preregistered one, code
    changed since the preregistration. A finished (or failed) run's outcome is
    written as a new record, runs/<run>/outcomes/<id>.json (the newest one
    supersedes the earlier ones; the run's event log is never touched); a run
    still going gets a PROVISIONAL scorecard that is not written.

    Example: logbook outcome qknorm-3f9a
    """
    from ..outcome import record_outcome

    project = open_for_writing()
    card = record_outcome(project, run)
    for w in card.warnings:
        err(f"warning: {w}")
    if as_json:
        print_json(card.to_dict())
        return
    print_scorecard(card, project.root)


def _value(p) -> str:
    from ..textfmt import fmt_num

    if p.value is None:
        return "–"
    return fmt_num(int(p.value) if float(p.value).is_integer() else p.value)


def print_scorecard(card, root: Path) -> None:
    from rich.table import Table
    from rich.text import Text

    from ..predictions import _shortest

    con = stdout_console()
    if not card.verify_ok:  # said before anything else: the promise itself is in doubt
        con.print(Text(f"WARNING: preregistration {card.prereg_id} fails `logbook verify`; scored anyway:",
                       style="bold red"))
        for msg in card.verify_problems[:5]:
            con.print(Text(f"  - {msg}"))
    con.print(Text(f"{card.label} outcome of run {card.run}", style="bold"))
    con.print(Text(f"preregistration {card.prereg_id}: {card.prereg_title}"))
    if not card.final:
        con.print(Text(f"PROVISIONAL: the run is {card.run_state} at step {card.last_step or 0:,}; "
                       "this scorecard is not recorded.", style="yellow"))
    table = Table(box=None, pad_edge=False, show_edge=False)
    for col in ("#", "prediction", "measured", "threshold", "status", "how"):
        table.add_column(col, overflow="fold", no_wrap=col in ("#", "status"))
    for i, p in enumerate(card.predictions, start=1):
        thr = f"{p.op} {_shortest(p.threshold)}" + (f" ± {_shortest(p.tolerance)}" if p.tolerance else "")
        status = p.status + (" (within tolerance)" if p.within_tolerance else "")
        how = p.reason or p.rule
        if p.source != "original":
            how = f"[{p.source}] {how}"
        table.add_row(Text(str(i)), Text(p.text), Text(_value(p)), Text(thr),
                      Text(status, style=_STATUS_STYLE.get(p.status, "")), Text(how))
    con.print(table)
    c = card.counts
    con.print(f"{c['confirmed']} confirmed · {c['refuted']} refuted · {c['inconclusive']} inconclusive")
    if card.deviations:
        con.print(f"Deviations ({len(card.deviations)}):")
        for d in card.deviations:
            con.print(Text(f"  - {d['text']}" + (f"  [{d['entry']}]" if d.get("entry") else "")))
        if card.code_diff:
            con.print(Text("\n".join("    " + line for line in card.code_diff.splitlines())))
    else:
        con.print("No deviations from the preregistered plan.")
    if card.final:
        rel = f"{card.event}" + (" (already recorded; nothing written)" if card.already_recorded else "")
        err(f"Recorded as {rel}" + (f", superseding {card.supersedes}" if card.supersedes and not card.already_recorded else "")
            + f"; runs/{card.run}/outcomes/{str(card.event).split(':', 1)[-1]}.json.")


@app.command("calibration")
def calibration_cmd(
    period: str = typer.Option("month", "--period", help="Group time by month or week (of the preregistration)."),
    as_json: bool = _JSON,
) -> None:
    """How often predictions held, over every run with a recorded outcome: per author, over time, per metric.

    A prediction held when it was confirmed (within tolerance counts);
    inconclusive ones are counted apart and left out of the rate.

    Example: logbook calibration --period week
    """
    from ..calibration import calibration
    from ..project import open_project

    if period not in ("month", "week"):
        raise UsageError(f"--period must be month or week, got {period!r}")
    cal = calibration(open_project(), period=period)
    if as_json:
        print_json(cal.to_dict())
        return
    if not cal.overall.total:
        err("No recorded outcomes yet: score a finished run with `logbook outcome RUN`.")
        return
    _print_calibration(cal)


def _print_calibration(cal) -> None:
    from rich.table import Table
    from rich.text import Text

    con = stdout_console()
    g = cal.overall
    con.print(f"{cal.runs} run(s), {g.total} prediction(s): {g.confirmed} held, {g.refuted} failed, "
              f"{g.inconclusive} inconclusive; held rate {_rate(g.rate)}")
    for title, groups in (("author", cal.by_author), (cal.period, cal.by_period), ("metric", cal.by_metric)):
        table = Table(box=None, pad_edge=False, show_edge=False, title=f"by {title}", title_justify="left")
        for col in (title, "held", "failed", "inconclusive", "held rate"):
            table.add_column(col, no_wrap=True)
        for key, grp in groups.items():
            table.add_row(*(Text(x) for x in (key, str(grp.confirmed), str(grp.refuted), str(grp.inconclusive),
                                              _rate(grp.rate))))
        con.print(table)


def _rate(r: float | None) -> str:
    return "–" if r is None else f"{r * 100:.0f}%"


@app.command("report")
def report_cmd(
    run: str = typer.Argument(..., help="The run to report on."),
    fmt: str = typer.Option("md", "--format", help="md or pdf."),
    out: Optional[Path] = typer.Option(None, "--out", help="Where to write (default: entries/reports/<run>.md or .pdf)."),
    as_json: bool = _JSON,
) -> None:
    """Write the retrospective of a run: preregistration, attempts, incidents and their cost, scorecard, sign-offs, disclosures.

    The disclosures are what public reports usually leave out, computed from
    the logbook: device-hours spent on failed attempts and lost work, every
    hyperparameter change with who and why, the data mixture over time,
    manual against automatic interventions, goodput.

    Example: logbook report qknorm-3f9a --format pdf --out qknorm.pdf
    """
    from ..project import open_project
    from ..report import write_report

    if fmt not in ("md", "pdf"):
        raise UsageError(f"--format must be md or pdf, got {fmt!r}")
    project = open_project()
    res = write_report(project, run, fmt=fmt, out=out)
    if as_json:
        print_json(res.to_dict())
        return
    typer.echo(str(res.path))
    for w in res.warnings:
        err(f"warning: {w}")
