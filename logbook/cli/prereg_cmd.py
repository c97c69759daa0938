"""`logbook prereg [amend]`, `logbook verify`, `logbook ls`, `logbook show`."""

from __future__ import annotations

import os
import shlex
import subprocess
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any, Optional

import typer

from logbook.cli._app import (JSON_OPTION, WIDE_OPTION, app, command_group, err, is_interactive, is_wide,
                              open_for_writing, print_json, set_wide, stdout_console)
from logbook.core.textfmt import plural

prereg_app = command_group("prereg")

_PREDICT_HELP = ("Machine-checkable prediction `metric@point op threshold [± tol] [(C%)]`, or a forecast "
                 "`metric@point ≈ value [lo, hi] L%` or `metric ≈ {point: value [lo, hi], ...} L%`; repeatable. "
                 "Points: final, step:N (or N), P%. Example: 'val_loss@final < 1.45 ± 0.02 (80%)'.")
_METRIC_HELP = ("Declare a metric beyond the bundled set, `NAME:DIRECTION_OR_UNIT:DESCRIPTION` (direction higher "
                "or lower is better, or a unit; fraction, percent and count bound its range); repeatable; it is "
                "part of the hashed record. Example: 'bleu:higher:corpus BLEU on the dev set'.")
_RULE_HELP = "Contingency rule `IF condition -> THEN actions`; repeatable. Example: 'loss spike > 4 sigma twice in 500 steps -> rollback 100 steps, lr × 0.9'."


@prereg_app.callback()
def prereg_cmd(
    ctx: typer.Context,
    title: Optional[str] = typer.Option(None, "--title", metavar="TITLE", help="Short title; it names the id and the file."),
    hypothesis: Optional[str] = typer.Option(None, "--hypothesis", metavar="TEXT", help="What you expect and why it matters."),
    predict: Optional[list[str]] = typer.Option(None, "--predict", metavar="EXPR", help=_PREDICT_HELP),
    metric: Optional[list[str]] = typer.Option(None, "--metric", metavar="SPEC", help=_METRIC_HELP),
    contingency: Optional[list[str]] = typer.Option(None, "--contingency", metavar="RULE", help=_RULE_HELP),
    config: Optional[str] = typer.Option(None, "--config", metavar="PATH", help="Training config the run will use (its sha256 is stored); a bare name such as tiny-cpu is configs/tiny-cpu.yaml, copied from logbook's examples if missing."),
    budget: Optional[str] = typer.Option(None, "--budget", metavar="AMOUNT", help="Compute budget, e.g. '8 GPU-hours', '2B tokens', '5000 steps'."),
    rationale: Optional[str] = typer.Option(None, "--rationale", metavar="TEXT", help="Why you expect it: reasoning, prior evidence."),
    assume: Optional[list[str]] = typer.Option(None, "--assume", metavar="TEXT", help="An assumption the prediction rests on; repeatable."),
    from_file: Optional[Path] = typer.Option(None, "--from-file", metavar="YAML", help="Read all of the above from a YAML file; a bare name such as qknorm is prereg/qknorm.yaml, copied from logbook's example if missing."),
    as_json: bool = JSON_OPTION,
) -> None:
    """Preregister a run before it starts: hypothesis, predictions, contingency plan, config hash.

    The record is written to entries/prereg/<id>.md and committed alone (your other
    staged and unstaged changes stay as they are). With neither --title nor
    --from-file, an editor opens on a template when run at a terminal.
    `logbook prereg amend ID ...` adds an amendment; records are never edited.

    Example: logbook prereg --title "qk-norm removes spikes" --hypothesis "QK-norm keeps attention logits bounded" --predict "spikes@final == 0" --predict "val_loss@final < 2.31" --config configs/tiny-cpu.yaml --budget "8 GPU-hours"
    """
    if ctx.invoked_subcommand is not None:
        return
    from logbook.promises.prereg import create_prereg

    project = open_for_writing()
    from_file = _example(project.root, from_file, "prereg")
    inp = _gather_input(title=title, hypothesis=hypothesis, predict=predict, metric=metric, contingency=contingency,
                        config=config, budget=budget, rationale=rationale, assume=assume, from_file=from_file)
    if inp.config:
        inp.config = str(_example(project.root, inp.config, "config"))
    written = create_prereg(project, inp)
    _stamp(project, written.id, written.sha256)
    for w in written.warnings:
        err(f"warning: {w}")
    if as_json:
        print_json(written.to_dict())
        return
    typer.echo(f"Preregistered {written.id}  (commit {written.commit[:7]}, sha256 {written.sha256[:8]}…)")
    _echo_plan(written.front)


def _example(root, text, kind: str):
    """A bare name (`qknorm`, `tiny-cpu`) as the repository's file of that name, copying logbook's example if needed."""
    from logbook.core.examples import resolve

    if text is None:
        return None
    found = resolve(root, str(text), kind, say=err)
    return found.path if found else text


def _stamp(project, prereg_id: str, digest: str, key: str = "") -> None:
    """Third-party time for the record just committed (bounded by the timeout; pending if unreachable)."""
    from logbook.cli.stamp_cmd import say_stamp, stamp_quietly
    from logbook.trust.stamp_fetch import stamp_prereg_record

    say_stamp(stamp_quietly(project, stamp_prereg_record, prereg_id, digest, key))


def _echo_plan(front: dict[str, Any]) -> None:
    declared = [m["name"] for m in front.get("metrics") or []]
    if declared:
        typer.echo(f"  declared metrics: {', '.join(declared)}")
    preds = [p["text"] for p in front.get("predictions") or []]
    if preds:
        typer.echo(f"  predictions: {' · '.join(preds)}")
    for i, rule in enumerate(front.get("contingency") or [], start=1):
        tag = "" if rule.get("structured") else "  (free text)"
        typer.echo(f"  contingency {i}: {rule['text']}{tag}")


def _gather_input(*, title, hypothesis, predict, metric, contingency, config, budget, rationale, assume, from_file):
    from logbook.core.errors import UsageError
    from logbook.promises.prereg_input import PreregInput, input_from_mapping

    flags = {"--title": title, "--hypothesis": hypothesis, "--predict": predict, "--metric": metric,
             "--contingency": contingency,
             "--config": config, "--budget": budget, "--rationale": rationale, "--assume": assume}
    given = [name for name, v in flags.items() if v]
    if from_file is not None:
        if given:
            raise UsageError(f"--from-file cannot be combined with {', '.join(given)}",
                             hint="put everything in the YAML file, or use flags only")
        from logbook.core.yamlsafe import load_yaml_file

        return input_from_mapping(load_yaml_file(from_file, "preregistration file"), str(from_file))
    if given:
        return PreregInput(title=title or "", hypothesis=hypothesis or "", predictions=list(predict or []),
                           contingency=list(contingency or []), config=config, budget=budget,
                           rationale=rationale or "", assumptions=list(assume or []), metrics=list(metric or []))
    if is_interactive():
        return _input_from_editor()
    raise UsageError("nothing to preregister",
                     hint="give --title, --hypothesis and --predict (repeatable), or --from-file prereg.yaml; "
                          "see `logbook prereg --help`")


def _template() -> str:
    from logbook.promises.metric_names import known_text as known_metrics_text

    return f"""\
# Preregistration. Fill it in, save and close the editor.
# Lines starting with # are ignored; leave the file unchanged to cancel.
title:
hypothesis: |

# Machine-checkable predictions: metric@point op threshold [± tolerance] [(confidence%)]
#   points: final, step:5000 (or 5000), 50%    comparators: < <= > >= == !=
#   metrics: {known_metrics_text()}, any eval_* name an evaluation logs, or one declared below
# Forecasts: a point with its interval, or a trajectory of points (each interval at the same level)
predictions:
#  - val_loss@final < 1.45 ± 0.02 (80%)
#  - spikes@final == 0
#  - val_loss@final ≈ 2.25 [2.20, 2.30] 80%
#  - trajectory: val_loss
#    level: 80%
#    points: [[25%, 3.1, 2.9, 3.3], [50%, 2.6, 2.45, 2.75], [final, 2.25, 2.2, 2.3]]
# Metrics beyond the bundled set the predictions name: NAME:higher|lower|UNIT:DESCRIPTION
metrics:
#  - bleu:higher:corpus BLEU on the dev set
# If-then rules the run follows, e.g.
#  - loss spike > 4 sigma twice within 500 steps -> rollback 100 steps, skip 300 batches, lr × 0.9
contingency:
# Training config the run will use (path in this repository):
config:
# e.g. 8 GPU-hours, 2B tokens, 5000 steps
budget:
rationale: |

assumptions:
"""


def _input_from_editor():
    from logbook.core.errors import UsageError
    from logbook.promises.prereg_input import input_from_mapping
    from logbook.core.yamlsafe import load_yaml_text, read_text_utf8

    template = _template()
    fd, name = tempfile.mkstemp(prefix="prereg-", suffix=".yaml")
    path = Path(name)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(template)
    editor = os.environ.get("EDITOR") or os.environ.get("VISUAL") or "vi"
    try:
        rc = subprocess.run([*shlex.split(editor), str(path)]).returncode
    except FileNotFoundError:
        path.unlink()
        raise UsageError(f"editor {editor!r} not found", hint="set $EDITOR, or use --from-file / the flags") from None
    keep = f"your text is kept in {path}; fix it and run `logbook prereg --from-file {path}`"
    if rc != 0:
        raise UsageError(f"the editor exited with status {rc}; nothing was preregistered", hint=keep)
    try:
        text = read_text_utf8(path, "edited template")
        data = load_yaml_text(text, str(path))
        if text == template or (isinstance(data, dict) and not any(data.values())):
            path.unlink()
            raise UsageError("the template was left empty; nothing was preregistered")
        inp = input_from_mapping(data, str(path))
    except UsageError as e:
        raise UsageError(e.message, hint=keep if path.exists() else e.hint) from None
    path.unlink()
    return inp


@prereg_app.command("amend")
def amend_cmd(
    prereg_id: str = typer.Argument(..., metavar="ID", help="The preregistration to amend."),
    reason: str = typer.Option(..., "--reason", metavar="TEXT", help="Why the plan changes."),
    seen: str = typer.Option(..., "--seen", metavar="WHAT", help="What you had seen: nothing | run-started | results."),
    predict: Optional[list[str]] = typer.Option(None, "--predict", metavar="EXPR", help="A prediction to add; repeatable."),
    contingency: Optional[list[str]] = typer.Option(None, "--contingency", metavar="RULE", help="A contingency rule to add; repeatable."),
    as_json: bool = JSON_OPTION,
) -> None:
    """Amend a preregistration: a new, linked, committed record; the original is never edited.

    --seen says what had been seen when amending: `nothing` (nothing run yet),
    `run-started` (a run started, no results seen) or `results` (results seen:
    recorded as a deviation, not an amendment).

    Example: logbook prereg amend 2026-11-30-qknorm-removes-spikes-3f9a --seen nothing --reason "budget halved" --predict "restarts@final <= 2"
    """
    from logbook.proof.amend import amend_prereg
    from logbook.promises.prereg import resolve_prereg_id

    project = open_for_writing()
    pid = resolve_prereg_id(project, prereg_id) or prereg_id
    written = amend_prereg(project, pid, reason=reason, seen=seen, predictions=list(predict or []),
                           contingency=list(contingency or []))
    _stamp(project, written.id, written.sha256, written.front["id"])
    for w in written.warnings:
        err(f"warning: {w}")
    key, kind = written.front["id"], written.front["kind"]
    if kind == "deviation":
        err("note: results had been seen, so this is recorded as a deviation from the preregistration")
    if as_json:
        print_json({**written.to_dict(), "amendment": key, "kind": kind})
        return
    typer.echo(f"Amended {written.id}: {kind} {key}  (commit {written.commit[:7]}, sha256 {written.sha256[:8]}…)")
    _echo_plan(written.front)


@app.command("verify")
def verify_cmd(
    prereg_id: Optional[str] = typer.Argument(None, metavar="[ID]", help="Check only this preregistration."),
    full: bool = typer.Option(False, "--full", help="Read every commit again, ignoring (and not updating) the cache."),
    replay: Optional[int] = typer.Option(None, "--replay", metavar="N", min=1,
                                         help="Also retrain the first N steps of each run that answers to a "
                                              "preregistration, from its code snapshot and seed, and compare the losses "
                                              "bit for bit (CPU)."),
    run: Optional[str] = typer.Option(None, "--run", metavar="RUN", help="With --replay: replay only this run."),
    require_stamps: bool = typer.Option(False, "--require-stamps",
                                        help="A missing, invalid or late stamp is exit 4, whatever logbook.yaml says."),
    ca_sha256: Optional[list[str]] = typer.Option(None, "--ca-sha256", metavar="HEX",
                                                  help="Trust only authorities whose CA file has this SHA-256 "
                                                       "(repeatable); a stamp under any other CA is exit 4."),
    no_pin: bool = typer.Option(False, "--no-pin", help="Apply this machine's pin, but write none and move none "
                                "forward (inspecting a repository you do not trust, or a throw-away CI machine)."),
    as_json: bool = JSON_OPTION,
) -> None:
    """Check that every record and log is as first committed, over the whole history of HEAD.

    Every commit is checked against each of its parents: a committed record
    that a later commit edits, deletes or drops in a merge, or a log that loses
    lines, is named with the commit that had it and the commit that lost it.
    Then the working tree against HEAD, the remote-tracking branches' copies,
    each preregistration (committed before the runs that answer to it, its
    amendment chain) and every hash-chained log line by line. Rebases,
    cherry-picks and squash-merges that keep the bytes verify. Commits already
    verified are remembered under .logbook/, so a second run is quick
    (--full reads them all again). Where logbook.yaml names a timestamp
    authority, every stamp is checked offline against its CA, and a run
    answers to its preregistration only when the preregistration's stamp is
    earlier than the run's; verify says per preregistration what third-party
    time it has ("no third-party time" without an authority).

    With `signing:` in logbook.yaml, every record signature is checked against
    the allowed-signers file as HEAD commits it, and each record is listed as
    signed by a principal or unsigned; every commit that changed the allowed
    signers, `signing:` or review_self_approval is listed (SETTING lines).

    Each run that answers to a preregistration must have trained with the seed
    its preregistration's earliest timestamp token gives. --replay N retrains
    the first N steps of those runs from their own code snapshot, with that
    seed, on the CPU (where the trainer is deterministic) in a temporary
    folder, and compares each logged loss bit for bit: a run trained before
    its preregistration existed cannot match.

    The trust root (which authority's CA, whether stamps are required, who may
    sign, the review rules) is the repository's, which a rewritten history can
    change: a reader pins it from outside. The first verify (or init) in a
    clone pins it in this user's pins file on first use and says so; every
    later verify here compares the repository with it (exit 4 naming the pin
    and what differs), unless the change only asks more of the repository or
    was committed with a signature by a key the pin trusts (the pin then moves
    forward, and verify says so); `logbook pin --update` records any other
    change the lab agreed to. --ca-sha256 and --require-stamps give a trust
    root on the command line (the CA's hash from the lab, out of band). A run's log after its last
    stamp that came in time has no third-party time: a warning, exit 4 when
    stamps are required.

    Exit 0 when everything is as written; exit 4 naming what changed (a
    signature that does not match its record, an unsigned record where
    signing.require is true, or the first step whose loss differs from the
    replay); exit 3 when git ignores
    records (they can never be committed, so never verified), or when a run
    asked to be replayed cannot be (trained on a GPU, snapshot missing...).

    Example: logbook verify --replay 3
    """
    from logbook.core.errors import RefusedError, UsageError
    from logbook.promises.prereg import resolve_prereg_id
    from logbook.core.project import open_project
    from logbook.proof.verify import verify_project

    project = open_project()
    if run is not None and replay is None:
        raise UsageError("--run goes with --replay N", hint=f"logbook verify --replay 3 --run {run}")
    pid = None if prereg_id is None else (resolve_prereg_id(project, prereg_id) or prereg_id)
    from logbook.trust.pins import reader_pin
    from logbook.trust.tofu import settle

    settled = settle(project) if not no_pin else None
    said = settled.line() if settled is not None else None

    report = verify_project(project, pid, full=full, pin=reader_pin(project, ca_sha256=ca_sha256,
                                                                     require=require_stamps))
    verdicts = _replay(project, replay, pid, run, report) if replay is not None else []
    if as_json:
        out = {**report.to_dict(), "pin_settled": settled.to_dict() if settled is not None else None}
        print_json({**out, "replay": [asdict(v) for v in verdicts]} if replay else out)
    else:
        if said:
            err(f"note: {said}")
        if report.in_progress:
            err(f"note: {report.in_progress}; verified HEAD as it stands")
        for w in report.warnings:
            err(f"warning: {w.message}")
        for p in report.problems:
            typer.echo(f"CHANGED  {p.message}")
        for u in report.unverifiable:
            typer.echo(f"IGNORED  {u.message}")
        for a in report.acknowledged:
            typer.echo(f"ACKNOWLEDGED  {a.message}")
        for line in report.identity.lines() if report.identity is not None else []:
            typer.echo(line)  # who signed each record, and every commit that changed who may sign
        for v in verdicts:
            if v.state != "differs":  # a difference is one of the problems above
                typer.echo(f"{'REPLAYED' if v.state == 'equal' else 'NOT REPLAYED'}  {v.message}")
        if report.ok:
            typer.echo(f"Intact: {_count(len(report.preregs), 'preregistration')}, "
                       f"{_count(report.amendments, 'amendment')}, {_count(len(report.logs), 'log')}.")
        _echo_time(report.timestamps, report.ok)
    report.raise_if_tampered()
    undone = [v.run_id for v in verdicts if v.state == "not_replayed"]
    if undone:
        raise RefusedError(f"{_count(len(undone), 'run')} could not be replayed: {', '.join(undone[:5])}",
                           hint="the NOT REPLAYED lines say why; a run trained on a GPU or on several workers "
                                "cannot be compared bit for bit with a CPU replay")


def _replay(project: Any, steps: int, pid: str | None, run: str | None, report: Any) -> list[Any]:
    """`verify --replay`: each run's verdict; a run whose losses differ joins the report's problems."""
    from logbook.proof.verify import Finding
    from logbook.trust.replay import replay_runs

    verdicts = replay_runs(project, steps, prereg_id=pid, run_id=run)
    if not verdicts:
        err("note: no run answers to " + (f"preregistration {pid}" if pid else "a preregistration") + ": nothing to replay")
    report.problems += [Finding(f.path, f.kind, f.message) for f in (v.finding(project) for v in verdicts)
                        if f.kind == "replay_differs"]
    return verdicts


def _echo_time(facts: dict[str, Any], ok: bool) -> None:
    """What third-party stamps prove: per preregistration its earliest stamp, and per run whether it came after."""
    if not facts or facts.get("state") == "off":
        if ok:  # beside a problem, the problem is what matters
                err("note: no third-party time: no timestamp authority is configured, so nothing proves when records "
                "were written (see `timestamping:` in the README)")
        return
    pending = facts.get("pending") or []
    if facts.get("pin"):
        typer.echo(f"Trust root pinned by {facts['pin']}.")
    elif ok:
        err("note: this repository's trust root is not pinned on this machine: `logbook pin` records it, so that "
            "a history rewritten to drop or swap the authority is exit 4 here"
            + (f"; {facts['pin_nearest']}" if facts.get("pin_nearest") else ""))
    typer.echo(f"Third-party time: {plural(facts.get('stamps', 0), 'valid stamp')} from {', '.join(facts['authorities'])}"
               + (f"; {plural(len(pending), 'record')} not stamped yet (`logbook stamp`)" if pending else "") + ".")
    for url, ca in sorted((facts.get("ca_sha256") or {}).items()):  # what a reader pins from outside the repository
        typer.echo(f"  trusted as {url} by its CA file, sha256 {ca or 'missing'}")
    for pid, p in sorted((facts.get("preregs") or {}).items()):
        when = f"stamped {p['stamped']}" if p.get("stamped") else "no third-party time"
        runs = "; ".join(f"run {r}: {v.get('order')}" for r, v in sorted(p.get("runs", {}).items()))
        typer.echo(f"  {pid}: {when}" + (f"; {runs}" if runs else ""))


def _count(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


@app.command("ls")
def ls_cmd(
    runs: bool = typer.Option(False, "--runs", help="List runs instead: id, state, prereg, steps, final loss, "
                              "restarts, goodput, created."),
    state: Optional[str] = typer.Option(None, "--state", metavar="STATE", help="Only runs in this state: running, "
                                        "finished, stopped, failed, aborted or preempted (implies --runs)."),
    prereg: Optional[str] = typer.Option(None, "--prereg", metavar="PREREG", help="Only runs of this "
                                         "preregistration (id or unique prefix; `none`: exploratory runs; implies --runs)."),
    since: Optional[str] = typer.Option(None, "--since", metavar="WHEN", help="Only what was created since WHEN: a "
                                        "UTC date or time (2026-12-01, 2026-12-01T09:00) or an age (12h, 3d, 2w)."),
    wide: bool = WIDE_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """List preregistrations (id, date, author, title, predictions, amendments, runs), or runs with --runs.

    Ids are printed whole. A table that does not fit the terminal becomes one block per row; a pipe gets one
    line per row, and so does --wide in a terminal.

    Example: logbook ls --runs --state finished --since 7d
    """
    from logbook.core.project import open_project
    from logbook.runs.runlist import parse_since

    set_wide(wide)
    cutoff = parse_since(since) if since is not None else None
    project = open_project()
    if runs or state is not None or prereg is not None:
        _ls_runs(project, state, prereg, cutoff, as_json)
        return
    _ls_preregs(project, cutoff, as_json)


def _ls_preregs(project, cutoff, as_json: bool) -> None:
    from logbook.promises.prereg import runs_referencing, scan_preregs
    from logbook.runs.runlist import created_since

    preregs, damaged = scan_preregs(project)
    runs = runs_referencing(project)
    rows = [{"id": p.id, "created": p.created, "author": p.author, "title": p.title,
             "predictions": len(p.all_predictions()), "amendments": len(p.amendments),
             "deviations": sum(1 for a in p.amendments if a.kind == "deviation"),
             "runs": runs.get(p.id, [])} for p in preregs if created_since(p.created, cutoff)]
    for d in damaged:
        err(f"warning: {d} (run `logbook verify`)")
    if as_json:
        print_json(rows)
        return
    if not rows:
        err("No preregistrations yet. Create one with `logbook prereg --help`.")
        return
    con = stdout_console()
    if con.width < 110:  # a table this wide would be cut: one block per preregistration instead
        from logbook.cli.console_cmd import wrap_line

        width = con.width if con.is_terminal else None  # a pipe: each line whole, for grep
        for r in rows:
            con.print(wrap_line(f"{r['id']}  ", r["title"], width), soft_wrap=True, markup=False)
            parts = [r["created"][:10], r["author"].split(" <")[0], _count(r["predictions"], "prediction"),
                     _amend_text(r), f"runs: {', '.join(r['runs']) or '-'}"]
            con.print(_wrap_parts(parts, "    ", width) if width else "    " + " · ".join(parts), soft_wrap=True,
                      markup=False)
        return
    from rich.table import Table

    table = Table(show_edge=False, pad_edge=False, box=None, header_style="bold")
    for col, kw in (("id", {"no_wrap": True}), ("date", {"no_wrap": True}),
                    ("author", {"no_wrap": True} if is_wide() else {"max_width": 20, "overflow": "ellipsis", "no_wrap": True}),
                    ("title", {"min_width": 16, "ratio": 1}), ("#pred", {"justify": "right", "no_wrap": True}),
                    ("amendments", {"no_wrap": True}), ("runs", {"min_width": 6})):
        table.add_column(col, **kw)
    for r in rows:
        table.add_row(r["id"], r["created"][:10], r["author"].split(" <")[0], r["title"],
                      str(r["predictions"]), _amend_text(r), ", ".join(r["runs"]) or "-")
    con.print(table)


RUN_COLUMNS = ("id", "state", "prereg", "steps", "final loss", "restarts", "goodput", "created")


def _ls_runs(project, state: Optional[str], prereg: Optional[str], cutoff, as_json: bool) -> None:
    from logbook.runs.runlist import list_runs

    rows = list_runs(project, state=state, prereg=prereg, since=cutoff)
    if as_json:
        print_json([r.to_dict() for r in rows])
        return
    if not rows:
        err("No runs match." if state or prereg or cutoff else "No runs yet. Start one with `logbook run --help`.")
        return
    cells = [_run_cells(r) for r in rows]
    con = stdout_console()
    width = sum(max(len(c[i]) for c in [list(RUN_COLUMNS), *cells]) for i in range(len(RUN_COLUMNS)))
    width += 2 * (len(RUN_COLUMNS) - 1)
    if not con.is_terminal:
        con.width = max(con.width, width)  # a pipe gets every row on one line, whatever its length
    if width > con.width:  # the table would be cut: one block per run, every value whole
        for r, c in zip(rows, cells):
            con.print(c[0], soft_wrap=True)
            parts = [c[1], f"prereg {c[2]}", f"step {c[3]}", f"loss {c[4]}", _count(r.restarts, "restart"),
                     f"goodput {c[6]}", f"created {c[7]}"]
            con.print(_wrap_parts(parts, "    ", con.width), soft_wrap=True)
        return
    from rich.table import Table

    table = Table(show_edge=False, pad_edge=False, box=None, header_style="bold")
    for col in RUN_COLUMNS:
        table.add_column(col, no_wrap=True, justify="right" if col in ("steps", "final loss", "restarts", "goodput")
                         else "left")
    for c in cells:
        table.add_row(*c)
    con.print(table)


SHOWN_DETAILS = 16
"""Details of one event `show` prints before it points to `--json` for the rest."""


def _record_fields(record: dict[str, Any]) -> list[tuple[str, str]]:
    """A run record as (key, text) rows: nested values as `snapshot.commit`, booleans as yes/no, lists joined."""
    out: list[tuple[str, str]] = []
    for key, value in record.items():
        if value in (None, "", [], {}):
            continue
        if isinstance(value, dict):
            out += _record_fields({f"{key}.{k}": v for k, v in value.items()})
        else:
            out.append((key, _plain_value(value)))
    return out


def _plain_value(value: Any) -> str:
    from logbook.core.textfmt import fmt_setting

    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(v, (str, int, float)) for v in value):
        return ", ".join(v if isinstance(v, str) else fmt_setting(v) for v in value)
    return fmt_setting(value)


def _field_line(head: str, value: str, width: int | None) -> str:
    """`key  value`, wrapped at spaces; a value of one long word (a hash, a path) goes whole under its key."""
    from logbook.cli.console_cmd import wrap_line

    if width and " " not in value and len(head) + len(value) > width:
        return head.rstrip() + "\n" + " " * max(0, min(4, width - len(value))) + value
    return wrap_line(head, value, width)


def _detail_parts(data: dict[str, Any], seq: Any) -> list[str]:
    """An event's data as `key=value` parts, values as JSON; past SHOWN_DETAILS, a pointer to `--json`."""
    from logbook.core.textfmt import fmt_setting

    parts = [f"{k}={v if isinstance(v, str) else fmt_setting(v)}" for k, v in data.items()]
    if len(parts) > SHOWN_DETAILS:
        parts = parts[:SHOWN_DETAILS] + [f"{plural(len(parts) - SHOWN_DETAILS, 'more detail')} in --json"]
    return parts


def _wrap_parts(parts: list[str], indent: str, width: int) -> str:
    """`parts` joined by ` · `, a new line (indented) before a part that would pass `width`: no value is split
    but one wider than a line by itself, and that one only at its spaces."""
    from logbook.cli.console_cmd import wrap_line

    lines = [indent + parts[0]]
    for part in parts[1:]:
        if len(lines[-1]) + 3 + len(part) > width:
            lines.append(indent + part)
        else:
            lines[-1] += " · " + part
    return "\n".join(ln if len(ln) <= width else wrap_line(indent, ln[len(indent):], width, indent + "  ")
                     for ln in lines)


def _run_cells(r) -> list[str]:
    from logbook.core.textfmt import fmt_num, fmt_pct

    steps = "-" if r.steps is None else f"{r.steps:,}" + (f"/{r.total_steps:,}" if r.total_steps else "")
    return [r.id, r.state, r.prereg or "exploratory", steps, "-" if r.final_loss is None else fmt_num(r.final_loss),
            str(r.restarts), "-" if r.goodput is None else fmt_pct(r.goodput),
            (r.created or "-")[:16].replace("T", " ")]


def _amend_text(row: dict[str, Any]) -> str:
    text = _count(row["amendments"], "amendment")
    return text + (f" ({row['deviations']} deviation{'s' if row['deviations'] > 1 else ''})" if row["deviations"] else "")


@app.command("show")
def show_cmd(
    ident: str = typer.Argument(..., metavar="ID", help="A preregistration id (or unique prefix) or a run id."),
    as_json: bool = JSON_OPTION,
) -> None:
    """Show one preregistration in full (with amendments), or a run record with its events.

    Example: logbook show 2026-11-30-qknorm-removes-spikes-3f9a
    """
    from logbook.core.errors import NotFoundError
    from logbook.promises.prereg import load_prereg, resolve_prereg_id, runs_referencing
    from logbook.core.project import open_project
    from logbook.eventlog.timeline import RUN_ID_RE
    from logbook.proof.verify import verify_project

    project = open_project()
    if RUN_ID_RE.match(ident) and ".." not in ident and (project.run_dir(ident) / "run.json").exists():
        _show_run(project, ident, as_json)
        return
    pid = resolve_prereg_id(project, ident)
    if pid is None:
        raise NotFoundError(f"no preregistration or run called {ident!r}", hint="see `logbook ls`")
    prereg = load_prereg(project, pid)
    runs = runs_referencing(project).get(pid, [])
    report = verify_project(project, pid)
    if as_json:
        print_json({**prereg.to_dict(), "runs": runs, "verified": report.ok,
                    "problems": [p.message for p in report.problems]})
        return
    _print_markdown(prereg.body)
    for a in prereg.amendments:
        _print_markdown(a.body)
    state = "intact" if report.ok else f"CHANGED: {report.problems[0].message}"
    parts = [f"file {prereg.path.relative_to(project.root)}", f"sha256 {prereg.sha256[:12]}…",
             f"runs: {', '.join(runs) or 'none'}", state]
    # At a terminal wrapped between parts (ids whole); piped, one line, as scripts read it.
    typer.echo(_wrap_parts(parts, "", stdout_console().width) if is_interactive() else " · ".join(parts))


def _print_markdown(text: str) -> None:
    """Rendered at a terminal; the Markdown itself when piped (so `> file.md` works)."""
    if is_interactive():
        from rich.markdown import Markdown

        stdout_console().print(Markdown(text))
    else:
        typer.echo(text)


def _show_run(project, run_id: str, as_json: bool) -> None:
    from logbook.eventlog.runlog import read_events
    from logbook.eventlog.kinds import kind_of
    from logbook.runs.run_record import load_run_record, run_status

    record = load_run_record(project, run_id)
    record.status = run_status(project, run_id, record)  # run.json says how it started; the log, how it stands
    log = read_events(project.run_dir(run_id) / "events.jsonl")
    if as_json:
        print_json({"run": record.to_dict(), "events": log.records})
        return
    from logbook.cli.console_cmd import wrap_line

    con = stdout_console()
    width = None if is_wide() else con.width
    fields = _record_fields(record.to_dict())
    key_w = max(len(k) for k, _ in fields)
    for key, value in fields:
        con.print(_field_line(f"{key:<{key_w}}  ", value, width), soft_wrap=True, markup=False)
    con.print()
    for e in log.records:  # one block per event: its kind, then every detail whole (JSON values, never reprs)
        step = "" if e.get("step") is None else f" · step {e['step']:,}" if isinstance(e["step"], int) \
            else f" · step {e['step']}"
        att = f" · attempt {e['attempt']}" if e.get("attempt") is not None else ""
        when = str(e.get("ts", ""))[:19].replace("T", " ")
        con.print(wrap_line("", f"{e.get('seq')}  {kind_of(e)} · {when}{att}{step}", width), soft_wrap=True,
                  markup=False)
        details = _detail_parts(e.get("data") or {}, e.get("seq"))
        if details:
            con.print(_wrap_parts(details, "    ", width) if width else "    " + " · ".join(details),
                      soft_wrap=True, markup=False)
    for p in log.problems:
        err(f"warning: {p.message} (run `logbook verify`)")
