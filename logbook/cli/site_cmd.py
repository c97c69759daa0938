"""`logbook site --out DIR`: the logbook as a static site."""

from __future__ import annotations

from pathlib import Path

import typer

from logbook.cli._app import JSON_OPTION, app, err, print_json


@app.command("site")
def site_cmd(
    out: Path = typer.Option(..., "--out", help="Folder to write the site into: new, empty, or an earlier site (replaced)."),
    as_json: bool = JSON_OPTION,
) -> None:
    """Write the logbook as a static site: runs, preregistrations, day pages, calibration.

    Every page works from file:// or any static host: no server, no network
    at view time (Vega is written into the site's assets), no inline script.
    Each run's page shows its preregistration, predictions against what was
    measured, its metrics plotted with restarts, spikes, skips, rollbacks,
    live changes, milestones and checkpoints marked, incidents with their
    cost, and goodput. Every page says what `logbook verify` found at build
    time and the commit it was built from; the same commit builds the same
    bytes. Needs the `site` extra (pip install 'logbook[site]').

    Example: logbook site --out public && python3 -m http.server -d public
    """
    from logbook.chronicle.site import build_site
    from logbook.core.project import open_project

    res = build_site(open_project(), out)
    verdict = "intact" if res.verify_ok else "PROBLEMS (shown on every page)"
    err(f"Site: {len(res.pages)} pages, {res.bytes / 1e6:.1f} MB in {res.out}; open {res.out / 'index.html'}")
    err(f"  built from commit {(res.commit or 'none')[:12]}; logbook verify: {verdict}")
    if as_json:
        print_json(res.to_dict())
