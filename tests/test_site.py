"""`logbook site`: the demo's logbook as static pages, loaded in real headless Chromium.

The logbook is a real one (`logbook demo`: a trained run with a drill kill,
two spikes, a rollback and a live change). The browser tests load every page
from file:// and fail on a console error, a failed or non-local request, a
broken link, a plot that was not drawn, or hostile text that ran.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote, urldefrag, urlparse

import pytest
from conftest import git

from logbook.chronicle.site import build_site, index_rows
from logbook.core.errors import EXIT_REFUSED
from logbook.core.project import open_project
from logbook.eventlog.sink import MetricsWriter
from logbook.runs.run_record import list_run_ids

HOSTILE = '<script>alert("owned")</script>'

pytest.importorskip("vl_convert", reason="the site's Vega bundle comes from vl-convert-python (pip install 'logbook[site]')")


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> Path:
    """A real logbook made by `logbook demo` (12 steps), shared by the module's tests; they copy it to change it."""
    from logbook.demo import run_demo

    home = tmp_path_factory.mktemp("home")
    (home / ".gitconfig").write_text("[user]\n\tname = Ada Tester\n\temail = ada@example.org\n")
    where = tmp_path_factory.mktemp("site") / "demo"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HOME", str(home))
        mp.setenv("GIT_CONFIG_NOSYSTEM", "1")
        mp.setenv("GIT_CONFIG_GLOBAL", str(home / ".gitconfig"))
        run_demo(where, steps=12)
    return where


def _chromium() -> str:
    pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install playwright)")
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        pytest.skip("no chromium on PATH to drive headless (Debian: apt-get install chromium)")
    return exe


@pytest.fixture
def browser():
    exe = _chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=exe, args=["--no-sandbox"])
        yield b
        b.close()


class Watched:
    """A page with every console error, page error, failed request, non-local request and dialog kept."""

    def __init__(self, browser, width: int = 1280) -> None:
        self.page = browser.new_page(viewport={"width": width, "height": 900})
        self.problems: list[str] = []
        self.page.on("console", lambda m: self.problems.append(f"console {m.type}: {m.text}")
                     if m.type in ("error", "warning") else None)
        self.page.on("pageerror", lambda e: self.problems.append(f"page error: {e}"))
        self.page.on("requestfailed", lambda r: self.problems.append(f"failed request: {r.url}"))
        self.page.on("request", lambda r: None if r.url.startswith(("file://", "data:"))
                     else self.problems.append(f"network request: {r.url}"))
        self.page.on("dialog", lambda d: (self.problems.append(f"dialog: {d.message}"), d.dismiss()))

    def open(self, path: Path) -> None:
        self.page.goto(path.as_uri())
        self.page.wait_for_load_state("load")
        # site.js draws each plot as it nears the screen and marks its area when done (or failed).
        areas = self.page.locator(".plot-area")
        for i in range(areas.count()):
            areas.nth(i).scroll_into_view_if_needed()
        self.page.wait_for_function(
            "[...document.querySelectorAll('.plot-area')].every(e => e.dataset.drawn)", timeout=15_000)


def _site(demo: Path, out: Path) -> Path:
    build_site(open_project(demo), out)
    return out


def _links(page) -> list[str]:
    return page.eval_on_selector_all("a[href]", "els => els.map(e => e.href)")


def _check_link(url: str, site: Path, ids_of) -> str | None:
    """Why `url` is broken (None: it is not): a local file that exists, and an anchor on it."""
    base, frag = urldefrag(url)
    parsed = urlparse(base)
    if parsed.scheme != "file":
        return f"{url}: not a link inside the site"
    path = Path(unquote(parsed.path))
    if not path.is_file() or not path.resolve().is_relative_to(site.resolve()):
        return f"{url}: no such file in the site"
    if frag and path.suffix == ".html" and frag not in ids_of(path):
        return f"{url}: no element with id {frag!r}"
    return None


@pytest.mark.slow
def test_every_page_loads_with_no_error_no_network_and_no_broken_link(demo, tmp_path, browser):
    site = _site(demo, tmp_path / "site")
    pages = sorted(site.rglob("*.html"))
    assert {p.relative_to(site).parts[0] for p in pages} >= {"index.html", "calibration.html", "runs", "days"}
    w = Watched(browser)
    ids: dict[Path, set[str]] = {}

    def ids_of(path: Path) -> set[str]:
        if path not in ids:
            w.open(path)
            ids[path] = set(w.page.eval_on_selector_all("[id]", "els => els.map(e => e.id)"))
        return ids[path]

    broken = []
    for page in pages:
        w.open(page)
        hrefs = _links(w.page)
        assert hrefs, f"{page.name} links nowhere"
        for url in hrefs:
            why = _check_link(url, site, ids_of)
            if why:
                broken.append(f"{page.relative_to(site)} -> {why}")
    assert broken == []
    assert w.problems == []


@pytest.mark.slow
def test_each_run_page_draws_every_plot_with_its_events_marked_and_a_label(demo, tmp_path, browser):
    site = _site(demo, tmp_path / "site")
    (run,) = list_run_ids(open_project(demo))
    w = Watched(browser)
    w.open(site / "runs" / f"{run}.html")
    areas = w.page.locator(".plot-area")
    assert areas.count() >= 2  # loss and val_loss at least
    for i in range(areas.count()):
        area = areas.nth(i)
        assert area.get_attribute("data-drawn") == "1"
        assert area.locator("svg, canvas").count() == 1
        assert "by step" in (area.get_attribute("aria-label") or "")
        assert area.locator("svg").get_attribute("aria-label") == area.get_attribute("aria-label")
    # The loss plot's spec marks what the record holds: the drill's restart, the spikes, the skip, the rollback,
    # the live change, the milestones and the checkpoints.
    spec = json.loads(w.page.locator("#plot-0-spec").text_content())
    marked = {m["what"] for m in spec["layer"][1]["data"]["values"]}
    assert marked >= {"restart", "spike", "skip", "rollback", "live change", "checkpoint", "milestone"}
    body = w.page.locator("main").inner_text()
    for section in ("Preregistration", "Predictions against what was measured", "Incidents", "Goodput", "Attempts"):
        assert section in body
    assert "logbook verify: intact" in w.page.locator(".provenance").inner_text()
    assert w.problems == []


@pytest.mark.slow
def test_tab_reaches_the_links_and_the_pages_fit_a_phone(demo, tmp_path, browser):
    site = _site(demo, tmp_path / "site")
    (run,) = list_run_ids(open_project(demo))
    w = Watched(browser)
    w.open(site / "index.html")
    reached = []
    for _ in range(20):  # past the skip link, the navigation, the filter and the sort buttons
        w.page.keyboard.press("Tab")
        reached.append(w.page.evaluate("document.activeElement.tagName + ' ' + (document.activeElement.getAttribute('href') || '')"))
    assert f"A runs/{run}.html" in reached, reached
    shots = []
    for width in (1280, 390):
        page = Watched(browser, width)
        for name, path in (("index", site / "index.html"), ("run", site / "runs" / f"{run}.html")):
            page.open(path)
            # Nothing but the tables (which scroll inside themselves) may be wider than the screen.
            assert page.page.evaluate("document.documentElement.scrollWidth") <= width
            shot = tmp_path / f"{name}-{width}.png"
            page.page.screenshot(path=str(shot), full_page=True)
            shots.append(shot)
        assert page.problems == []
    assert all(s.read_bytes()[:4] == b"\x89PNG" for s in shots)
    keep = os.environ.get("LOGBOOK_SITE_SHOTS")  # a folder to look at the pages in, when set
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        for s in (tmp_path / "index-1280.png", tmp_path / "run-390.png"):
            shutil.copyfile(s, Path(keep) / s.name)


def _with_hostile_text(demo: Path, where: Path) -> tuple[Path, str]:
    """A copy of the demo with a note, a metric name and a live change's reason that try to run script."""
    from logbook.chronicle.notes import add_note

    shutil.copytree(demo, where, symlinks=True)
    project = open_project(where)
    (run,) = list_run_ids(project)
    add_note(project, f"{HOSTILE} and [a link](javascript:alert(1)) and <img src=x onerror=alert(2)>", run=run)
    from logbook.promises.prereg import create_prereg
    from logbook.promises.prereg_input import PreregInput

    # A title may hold no markup characters (prereg_input refuses them); a link scheme and quotes it may.
    create_prereg(project, PreregInput(title='javascript:alert(3) "quoted" title', hypothesis="why",
                                       predictions=["val_loss@final < 3.0"]))
    metrics = MetricsWriter(project.run_dir(run))
    for step in (101, 102, 103):  # past the run's last step: an earlier one would start a new branch
        metrics.write({"step": step, "attempt": 2, HOSTILE: 1.0 + step})
    metrics.close()
    return where, run


@pytest.mark.slow
def test_hostile_notes_and_metric_names_show_as_text_and_never_run(demo, tmp_path, browser):
    where, run = _with_hostile_text(demo, tmp_path / "hostile")
    site = _site(where, tmp_path / "site")
    w = Watched(browser)
    for page in (site / "runs" / f"{run}.html", *sorted((site / "days").glob("*.html"))):
        w.open(page)
        assert w.page.locator("script:not([src]):not([type='application/json'])").count() == 0
        assert w.page.locator("img[onerror], [href^='javascript:' i]").count() == 0
    assert HOSTILE in w.page.locator("main").inner_text()  # the note, as text, on its day
    w.open(site / "index.html")
    assert 'javascript:alert(3) "quoted" title' in w.page.locator("#preregs-table").inner_text()
    assert w.page.locator("script:not([src]), [href^='javascript:' i]").count() == 0
    w.open(site / "runs" / f"{run}.html")
    assert HOSTILE in w.page.locator("figcaption").all_inner_texts()
    assert w.problems == []  # no dialog opened, no script error


@pytest.mark.slow
def test_the_index_filters_and_sorts_its_tables_in_the_browser(demo, tmp_path, browser):
    where, _run = _with_hostile_text(demo, tmp_path / "two")  # a second preregistration, titled 'javascript:…'
    site = _site(where, tmp_path / "site")
    w = Watched(browser)
    w.open(site / "index.html")

    def titles() -> list[str]:
        return w.page.eval_on_selector_all("#preregs-table tbody tr:not([hidden]) td:first-child",
                                           "cells => cells.map(c => c.dataset.v)")

    both = titles()
    assert len(both) == 2
    w.page.fill("#filter-preregs", "JAVASCRIPT quoted")  # every word, in any case
    assert titles() == ['javascript:alert(3) "quoted" title']
    w.page.fill("#filter-preregs", "")
    assert sorted(titles()) == sorted(both)
    title = w.page.locator("#preregs-table thead button[data-col='0']")
    title.click()
    ascending = titles()
    assert ascending == sorted(both, key=str.lower)
    assert w.page.locator("#preregs-table thead th").first.get_attribute("aria-sort") == "ascending"
    title.click()
    assert titles() == ascending[::-1]
    assert w.problems == []


@pytest.mark.slow
def test_runs_that_answer_to_one_preregistration_get_a_side_by_side_page(demo, tmp_path, browser):
    from logbook.runs.compare import compare_runs

    where = tmp_path / "two-runs"
    shutil.copytree(demo, where, symlinks=True)
    (first,) = list_run_ids(open_project(where))
    ran = subprocess.run([sys.executable, "-m", "logbook", "run", "--prereg", "tiny-gpt", "demo", "--run-id", "second",
                          "--nproc", "1"], cwd=where, capture_output=True, text=True, timeout=600)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    site = _site(where, tmp_path / "site")
    project = open_project(where)
    (prereg,) = [p for p in index_rows(project)[1] if len(p["runs"]) == 2]
    w = Watched(browser)
    w.open(site / "index.html")
    w.page.click(f"a[href='compare/{prereg['id']}.html']")
    assert w.page.url == (site / "compare" / f"{prereg['id']}.html").as_uri()
    heads = w.page.eval_on_selector_all("table.compare thead a", "links => links.map(a => a.textContent)")
    assert set(heads) == {first, "second"}
    marked = w.page.eval_on_selector_all("tr.differs th", "cells => cells.map(c => c.firstChild.textContent.trim())")
    cmp = compare_runs(project, prereg["runs"])
    assert marked == [r.key for sec in cmp.sections for r in sec.rows if r.differs] and "goodput" in marked
    assert w.problems == []


def test_a_run_page_names_each_records_stamp_as_verify_checked_it(demo, tmp_path, cli, monkeypatch, local_tsa):
    from logbook.trust.stamp_fetch import run_records
    from logbook.trust.stamp_store import earliest

    where = tmp_path / "stamped"
    shutil.copytree(demo, where, symlinks=True)
    local_tsa.configure(where)
    monkeypatch.chdir(where)
    assert cli("stamp").exit_code == 0  # what was written before the authority was named is stamped now
    git(where, "add", "-A")
    git(where, "commit", "-q", "-m", "stamps")
    project = open_project(where)
    (run,) = list_run_ids(project)
    site = _site(where, tmp_path / "site")
    html = (site / "runs" / f"{run}.html").read_text()
    proof = html[html.index('id="proof-h"'):]
    own = [r for r in run_records(project) if r.run_id == run]
    assert {r.kind for r in own} == {"run_record", "scorecard"}
    for rec in own:
        row = proof[proof.index(rec.path):].split("</tr>")[0]
        stamp = earliest(project, rec.digest)
        assert stamp is not None and stamp.time.strftime("%Y-%m-%d %H:%M:%S UTC") in row
        assert "signing is off" in row


def test_the_same_commit_builds_the_same_bytes(demo, tmp_path):
    project = open_project(demo)
    first, second = build_site(project, tmp_path / "a"), build_site(project, tmp_path / "b")
    files = sorted(p.relative_to(first.out) for p in first.out.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(second.out) for p in second.out.rglob("*") if p.is_file())
    assert [f for f in files if (first.out / f).read_bytes() != (second.out / f).read_bytes()] == []
    # A rebuild into the same folder replaces the site and leaves the same bytes.
    again = build_site(project, tmp_path / "a")
    assert again.bytes == first.bytes and (tmp_path / "a" / "index.html").read_bytes() == (tmp_path / "b" / "index.html").read_bytes()
    head = git(demo, "rev-parse", "HEAD").strip()
    assert head[:12] in (tmp_path / "a" / "index.html").read_text()


def test_the_site_needs_no_network_and_no_inline_script(demo, tmp_path):
    site = _site(demo, tmp_path / "site")
    for page in site.rglob("*.html"):
        html = page.read_text()
        assert "script-src 'self'" in html and "http://" not in html.replace("http://www.w3.org", "")
        assert "<script>" not in html and " on" + "load=" not in html
        assert "https://" not in html.replace("https://vega.github.io/schema/", "")
    assert (site / "assets" / "vega-bundle.js").stat().st_size > 500_000


def test_site_refuses_a_folder_it_did_not_build(demo, tmp_path, cli, monkeypatch):
    (tmp_path / "mine.txt").write_text("precious\n")
    monkeypatch.chdir(demo)
    res = cli("site", "--out", str(tmp_path))
    assert res.exit_code == EXIT_REFUSED and "holds no site built by `logbook site`" in res.stderr
    assert (tmp_path / "mine.txt").read_text() == "precious\n"
    res = cli("site", "--out", str(tmp_path / "public"), "--json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["verify_ok"] is True and "logbook verify: intact" in res.stderr


def test_the_shipped_publishing_workflow_builds_the_folder_it_uploads():
    import yaml

    from logbook.core.bundled import bundled_dir

    flow = yaml.safe_load((bundled_dir("templates") / "site" / "publish-site.yml").read_text())
    steps = flow["jobs"]["site"]["steps"]
    runs = [s["run"] for s in steps if "run" in s]
    assert "logbook site --out public" in runs and any("logbook[site]" in r for r in runs)
    assert any("refs/logbook/*" in r for r in runs)  # the snapshots verify compares, never fetched by default
    (upload,) = [s for s in steps if str(s.get("uses", "")).startswith("actions/upload-pages-artifact")]
    assert upload["with"]["path"] == "public"
    assert "templates/site/publish-site.yml" in (Path(__file__).resolve().parents[1] / "docs" / "sharing.md").read_text()


def test_a_day_page_shows_each_entry_with_its_review_state_and_reviewers(demo, tmp_path, cli, monkeypatch):
    from logbook.chronicle.review import add_review, review_queue

    where = tmp_path / "reviewed"
    shutil.copytree(demo, where, symlinks=True)
    project = open_project(where)
    change = next(i for i in review_queue(project) if i.kind == "hparam_change")
    git(where, "config", "user.name", "Bo Reviewer")  # a teammate: the launcher's own approval would not count
    git(where, "config", "user.email", "bo@example.org")
    monkeypatch.chdir(where)
    add_review(project, change.id, "approve", "the reason is in the entry")
    site = _site(where, tmp_path / "site")
    html = (site / "days" / f"{change.ts[:10]}.html").read_text()
    entry = html[html.index(f'id="run-{change.run}-{change.seq}"'):]
    entry = entry[:entry.index("</article>")]
    assert '<p class="review review-approved">Review: <strong>approved</strong> (1 of 1 approval: Bo Reviewer)' in entry
    assert "Bo Reviewer approved" in entry and "the reason is in the entry" in entry  # the review record itself
    # Another entry that still waits says so.
    assert 'class="review review-needs-review">Review: <strong>needs review</strong> (0 of 1 approval)' in html
