"""`logbook outcome`, `logbook calibration`, `logbook report`: scoring runs and telling their story."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from logbook.cli._app import (JSON_OPTION, WIDE_OPTION, app, checked_out_path, complete_run, err, open_for_writing,
                              output_format, print_json, set_wide, stdout_console)
from logbook.core.errors import UsageError
from logbook.core.textfmt import plural

_STATUS_STYLE = {"confirmed": "green", "refuted": "red", "inconclusive": "yellow"}


@app.command("outcome")
def outcome_cmd(
    run: str = typer.Argument(..., help="The run to score.", autocompletion=complete_run),
    wide: bool = WIDE_OPTION,
    as_json: bool = JSON_OPTION,
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
    from logbook.chronicle.build import rerender_days
    from logbook.proof.scorecard import record_outcome
    from logbook.proof.intact import require_intact

    set_wide(wide)
    project = open_for_writing()
    require_intact(project, "outcome", run=run)
    card = record_outcome(project, run)
    if card.final and not card.already_recorded:
        _stamp_scorecard(project, run, card.event)
        card.warnings += rerender_days(project, [card.computed_at[:10]])
    for w in card.warnings:
        err(f"warning: {w}")
    if as_json:
        print_json(card.to_dict())
        return
    print_scorecard(card, project.root)


def _stamp_scorecard(project, run: str, event: str | None) -> None:
    """Third-party time for the scorecard just written: a stamp of its own hash."""
    from logbook.cli.stamp_cmd import say_stamp, stamp_quietly
    from logbook.scoring.outcome import outcomes_dir
    from logbook.trust.stamp_fetch import run_records, stamp_record

    name = f"{str(event).split(':', 1)[-1]}.json"
    path = (outcomes_dir(project, run) / name).relative_to(project.root).as_posix()
    for item in run_records(project):
        if item.path == path:
            say_stamp(stamp_quietly(project, stamp_record, item))


def _value(p) -> str:
    from logbook.core.textfmt import fmt_num

    if p.value is None:
        return "–"
    return fmt_num(int(p.value) if float(p.value).is_integer() else p.value)


def print_scorecard(card, root: Path) -> None:
    from rich.table import Table
    from rich.text import Text

    from logbook.promises.predictions import _shortest

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
    from logbook.scoring.forecasts import describe_scores, run_summary, summary_text

    for i, p in enumerate(card.predictions, start=1):
        f = p.forecast or {}
        if f.get("kind") == "point":
            thr = f"≈ {_shortest(p.threshold)} [{_shortest(f['lo'])}, {_shortest(f['hi'])}] {f['level'] * 100:g}%"
        else:
            thr = f"{p.op} {_shortest(p.threshold)}" + (f" ± {_shortest(p.tolerance)}" if p.tolerance else "")
        status = p.status + (" (within tolerance)" if p.within_tolerance else "")
        how = "; ".join(x for x in (p.reason or p.rule, describe_scores(p.to_dict())) if x)
        if p.late:
            how = f"[{p.source}, LATE forecast: {p.late}] {how}"
        elif p.source != "original":
            how = f"[{p.source}] {how}"
        table.add_row(Text(str(i)), Text(p.text), Text(_value(p)), Text(thr),
                      Text(status, style=_STATUS_STYLE.get(p.status, "")), Text(how))
    con.print(table)
    c = card.counts
    con.print(f"{c['confirmed']} confirmed · {c['refuted']} refuted · {c['inconclusive']} inconclusive")
    forecasts = summary_text(run_summary([p.to_dict() for p in card.predictions]))
    if forecasts:
        con.print(Text(forecasts))
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
    plot: Optional[Path] = typer.Option(None, "--plot", metavar="PNG",
                                        help="Also draw the reliability diagram, interval coverage and scores over time."),
    as_json: bool = JSON_OPTION,
) -> None:
    """How well predictions and forecasts did, over every run with a recorded outcome: per author, over time, per metric.

    A prediction held when it was confirmed (within tolerance counts);
    inconclusive ones are counted apart and left out of the rate. Forecasts
    are scored properly: the Brier score of stated confidences with its
    reliability and resolution (binned Murphy decomposition) and a
    reliability diagram, interval coverage against the nominal level, and the
    mean relative error of point forecasts. Late forecasts (made after their
    run started) are counted apart. Small samples are called out.

    Example: logbook calibration --period week --plot calibration.png
    """
    from logbook.scoring.calibration import calibration
    from logbook.core.project import open_project
    from logbook.proof.intact import require_intact

    if period not in ("month", "week"):
        raise UsageError(f"--period must be month or week, got {period!r}")
    project = open_project()
    require_intact(project, "calibration")
    cal = calibration(project, period=period)
    if plot is not None:
        from logbook.scoring.calibration_plot import write_calibration_plot

        write_calibration_plot(cal, checked_out_path(plot, "--plot"))
    if as_json:
        print_json(cal.to_dict())
        return
    if not cal.overall.total and not cal.late_count:
        err("No recorded outcomes yet: score a finished run with `logbook outcome RUN`.")
        return
    _print_calibration(cal)
    _print_forecasts(cal)
    for w in cal.warnings:
        err(f"warning: {w}")
    if plot is not None:
        err(f"Plot written to {plot}.")


def _print_calibration(cal) -> None:
    from rich.table import Table
    from rich.text import Text

    con = stdout_console()
    g = cal.overall
    con.print(f"{plural(cal.runs, 'run')}, {plural(g.total, 'prediction')}: {g.confirmed} held, {g.refuted} failed, "
              f"{g.inconclusive} inconclusive; held rate {_rate(g.rate)}")
    for title, groups in (("author", cal.by_author), (cal.period, cal.by_period), ("metric", cal.by_metric)):
        table = Table(box=None, pad_edge=False, show_edge=False, title=f"by {title}", title_justify="left")
        table.add_column(title, min_width=len(title), overflow="fold")  # an author's name wraps at its spaces
        for col in ("held", "failed", "inconclusive", "held rate"):
            table.add_column(col, no_wrap=True, min_width=len(col))
        for key, grp in groups.items():
            table.add_row(*(Text(x) for x in (key, str(grp.confirmed), str(grp.refuted), str(grp.inconclusive),
                                              _rate(grp.rate))))
        con.print(table)


def _print_forecasts(cal) -> None:
    from rich.table import Table
    from rich.text import Text

    from logbook.scoring.calibration import reliability_bins

    con = stdout_console()
    f = cal.forecasts.to_dict()
    m = f["murphy"]
    if m:
        con.print(Text(f"Stated confidences: {plural(m['n'], 'forecast')}, Brier {m['brier']:.3f} = reliability "
                       f"{m['reliability']:.3f} - resolution {m['resolution']:.3f} + uncertainty "
                       f"{m['uncertainty']:.3f}" + (f" + {m['residual']:.3f} within bins" if abs(m['residual']) > 5e-4
                                                    else "") + f"; mean log score {f['mean_log']:.3f}"
                       + (f"; skill {m['skill']:+.2f} against always stating the base rate {m['base_rate'] * 100:.0f}%"
                          if m["skill"] is not None else "")))
        table = Table(box=None, pad_edge=False, show_edge=False, title="reliability diagram", title_justify="left")
        for col in ("stated", "n", "mean stated", "held", "95% interval"):
            table.add_column(col, no_wrap=True)
        for b in reliability_bins(cal.forecasts.probability):
            table.add_row(*(Text(x) for x in (f"{b.lo * 100:.0f}–{b.hi * 100:.0f}%", str(b.n), _rate(b.mean_forecast),
                                              _rate(b.observed) + (" (few)" if b.few else ""),
                                              f"{b.ci[0] * 100:.0f}–{b.ci[1] * 100:.0f}%")))
        con.print(table)
    if f["coverage"]:
        table = Table(box=None, pad_edge=False, show_edge=False, title="interval coverage", title_justify="left")
        for col in ("nominal", "intervals", "held", "coverage", "95% interval"):
            table.add_column(col, no_wrap=True)
        for c in f["coverage"]:
            table.add_row(*(Text(x) for x in (_rate(c["level"]), str(c["n"]), str(c["covered"]), _rate(c["rate"]),
                                              f"{c['ci'][0] * 100:.0f}–{c['ci'][1] * 100:.0f}%")))
        con.print(table)
    e = f["errors"]
    if e["n"]:
        con.print(Text(f"Point forecasts: {e['n']}, mean relative error {e['mean_rel_error'] * 100:+.1f}% "
                       f"(mean |relative error| {e['mean_abs_rel_error'] * 100:.1f}%)"))
    for name, groups in cal.forecasts_by.items():
        if not groups:
            continue
        label = cal.period if name == "period" else name
        table = Table(box=None, pad_edge=False, show_edge=False, title=f"forecasts by {label}", title_justify="left")
        # The group's name (an author's) wraps at its spaces; the numbers' columns and headers stay whole.
        table.add_column(label, min_width=len(label), overflow="fold")
        for col in ("confidences", "Brier", "intervals", "coverage", "mean |rel. error|"):
            table.add_column(col, no_wrap=True, min_width=len(col))
        few = False
        for key, fc in groups.items():
            d = fc.to_dict()
            cov = sum(c for _, c in fc.intervals)
            small = bool(fc.warnings())
            few = few or small
            table.add_row(*(Text(x) for x in (
                key + (" *" if small else ""), str(d["probability"]),
                f"{d['murphy']['brier']:.3f}" if d["murphy"] else "–",
                str(len(fc.intervals)), f"{cov}/{len(fc.intervals)}" if fc.intervals else "–",
                f"{d['errors']['mean_abs_rel_error'] * 100:.1f}%" if d["errors"]["n"] else "–")))
        con.print(table)
        if few:
            con.print(Text("  * too few forecasts in this group to say anything about its calibration"))
    if cal.late_count:
        late = cal.late.to_dict()
        parts = [f"{plural(cal.late_count, 'late prediction')}, made after their run started, scored apart"]
        if late["murphy"]:
            parts.append(f"Brier {late['murphy']['brier']:.3f} over {late['probability']}")
        if late["coverage"]:
            parts.append(f"{sum(c['covered'] for c in late['coverage'])} of {sum(c['n'] for c in late['coverage'])} "
                         "intervals held")
        con.print(Text("Late forecasts: " + "; ".join(parts) + "."))


def _rate(r: float | None) -> str:
    return "–" if r is None else f"{r * 100:.0f}%"


@app.command("report")
def report_cmd(
    run: str = typer.Argument(..., help="The run to report on.", autocompletion=complete_run),
    fmt: Optional[str] = typer.Option(None, "--format", help="md or pdf; default: as --out's extension says, else md."),
    out: Optional[Path] = typer.Option(None, "--out", help="Where to write (default: entries/reports/<run>.md or .pdf)."),
    as_json: bool = JSON_OPTION,
) -> None:
    """Write the retrospective of a run: preregistration, attempts, incidents and their cost, scorecard, sign-offs, disclosures.

    The disclosures are what public reports usually leave out, computed from
    the logbook: device-hours spent on failed attempts and lost work, every
    hyperparameter change with who and why, the data mixture over time,
    manual against automatic interventions, goodput.

    Example: logbook report qknorm-3f9a --format pdf --out qknorm.pdf
    """
    from logbook.core.project import open_project
    from logbook.chronicle.report import write_report
    from logbook.proof.intact import require_intact

    fmt = output_format(fmt, out)
    project = open_project()
    out = checked_out_path(out)
    require_intact(project, "report", run=run)
    res = write_report(project, run, fmt=fmt, out=out)
    if as_json:
        print_json(res.to_dict())
        return
    typer.echo(str(res.path))
    for w in res.warnings:
        err(f"warning: {w}")
