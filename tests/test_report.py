"""`logbook report`: the retrospective of a run in Markdown and PDF, computed from the logbook alone."""

from __future__ import annotations

from pdftext import pdf_text
from scoring_helpers import STORY_PREDICTIONS, make_prereg, project_of, story_clock, story_run  # noqa: F401

from logbook.chronicle.review import add_review, review_queue
from logbook.promises.prereg import load_prereg
from logbook.trust.stamp_fetch import stamp_prereg_record
from logbook.eventlog.sink import EventSink
from logbook.proof.scorecard import record_outcome


def _reviewed_story(repo, clock):
    project = project_of(repo)
    pid = make_prereg(project, STORY_PREDICTIONS,
                      contingency=["spike > 4σ twice within 50 steps -> rollback 10 steps, skip 10 batches, lr × 0.9"])
    story_run(project, clock, "story", pid)
    record_outcome(project, "story")
    restart = next(i for i in review_queue(project) if i.kind == "restart")
    add_review(project, restart.id, "approve", "the drill cost what it should")
    return project, pid


def _section(text: str, title: str) -> str:
    start = text.index(f"## {title}\n")
    nxt = text.find("\n## ", start + 3)
    return text[start: nxt if nxt >= 0 else None]


def test_the_markdown_report_tells_the_whole_story(logbook_repo, story_clock, cli):
    project, pid = _reviewed_story(logbook_repo, story_clock)
    res = cli("report", "story")
    assert res.exit_code == 0, res.output
    out = project.entries / "reports" / "story.md"
    assert res.stdout.strip() == str(out)
    md = out.read_text()
    prereg = _section(md, "Preregistration")
    assert pid in prereg and "QK-norm keeps attention logits bounded" in prereg and "`restarts@final == 1`" in prereg
    assert "rollback 10 steps, skip 10 batches, lr × 0.9" in prereg
    attempts = _section(md, "Attempts")
    assert "| 1 | 2026-11-30 08:00 |" in attempts and "killed by signal 9 (SIGKILL)" in attempts
    assert "| 50 → 100 | finished the run |" in attempts
    incidents = _section(md, "Incidents")
    assert "restart: attempt 1 → 2" in incidents and "10 steps, 10 s of work, 5 s down; 30 device-seconds" in incidents
    assert "ladder: skip (not in the plan)" in incidents
    card = _section(md, "Scorecard")
    assert "| `spikes@final == 0` | 1 | **refuted** |" in card and "(within tolerance)" in card
    assert "grad\\_clip 1.0 → 0.5" in card  # the live change, as a deviation
    signoffs = _section(md, "Sign-offs")
    assert "1 of 5 entries approved" in signoffs and "Ada Tester approved (2026-11-30)" in signoffs
    assert "“the drill cost what it should”" in signoffs


def test_the_disclosures_price_lost_work_and_list_every_change(logbook_repo, story_clock, cli):
    project, _ = _reviewed_story(logbook_repo, story_clock)
    assert cli("report", "story").exit_code == 0
    md = (project.entries / "reports" / "story.md").read_text()
    disc = md[md.index("## Disclosures"):]
    # 2 devices x (10 s redone + 5 s down + 1 skipped step of 1 s) = 32 device-seconds
    assert "Lost to failures, downtime, rollbacks and skipped updates: 32 device-seconds" in disc
    assert "| work lost to restarts (redone after resuming) | 10 s | 20 device-seconds |" in disc
    failed = next(line for line in disc.splitlines() if line.startswith("| attempts that ended in a failure (1) |"))
    assert failed.endswith("| 0.0333 device-hours |")  # 2 devices x attempt 1's 60 s
    assert "| `story:8` | 70 | `grad_clip` | 1.0 → 0.5 | Ada Tester | live |" in disc
    assert "no: a deviation" in disc
    assert "| 0 | stdlib 100% | preregistered config (equal weights) | config |" in disc
    assert "data.weights.stdlib 0.5 (was 1.0) | stage 2 of the mixture | schedule |" in disc
    assert "| restarts | 0 | 1 |" in disc and "| hyperparameter changes | 1 | 1 |" in disc
    assert "| updates skipped by the guard | 0 | 1 |" in disc
    assert "Goodput " in disc and "of productive training in" in disc


def test_text_from_the_logbook_is_escaped_in_markdown_and_shown_as_text_in_the_pdf(logbook_repo, story_clock, cli, tmp_path):
    project, _ = _reviewed_story(logbook_repo, story_clock)
    assert cli("report", "story").exit_code == 0
    md = (project.entries / "reports" / "story.md").read_text()
    assert '\\$x\\$ \\#read("/etc/passwd")' in md
    out = tmp_path / "story.pdf"
    res = cli("report", "story", "--format", "pdf", "--out", str(out))
    assert res.exit_code == 0, res.output
    assert out.read_bytes().startswith(b"%PDF")
    text = pdf_text(out)
    assert '#read("/etc/passwd")' in text and "root:x:0" not in text
    for heading in ("Preregistration", "Attempts", "Incidents", "Scorecard", "Sign-offs", "Disclosures", "Goodput"):
        assert heading in text
    assert "confirmed" in text and "refuted" in text and "Ada Tester approved" in text


def test_the_report_draws_the_loss_curve_and_links_it(logbook_repo, story_clock, cli, tmp_path):
    project, _ = _reviewed_story(logbook_repo, story_clock)
    out = tmp_path / "elsewhere" / "story.md"
    out.parent.mkdir()
    assert cli("report", "story", "--out", str(out)).exit_code == 0
    md = out.read_text()
    link = md.split("![Loss over the whole run](", 1)[1].split(")", 1)[0]
    plot = (out.parent / link).resolve()
    assert plot == (project.assets_dir / "story" / "report-loss.png").resolve()
    assert plot.read_bytes().startswith(b"\x89PNG")


def test_a_run_still_going_is_reported_with_a_provisional_scorecard(logbook_repo, story_clock, cli):
    project = project_of(logbook_repo)
    pid = make_prereg(project, ["loss@final < 4", "spikes@final == 0"])
    story_run(project, story_clock, "going", pid, finish=False)
    assert cli("report", "going").exit_code == 0
    md = (project.entries / "reports" / "going.md").read_text()
    assert "**PROVISIONAL:** the run is running" in md and "(PROVISIONAL)" in md
    assert not (project.run_dir("going") / "outcomes").exists()


def test_an_exploratory_run_is_reported_without_a_scorecard(logbook_repo, story_clock, cli):
    project = project_of(logbook_repo)
    story_run(project, story_clock, "explore", None, exploratory=True)
    assert cli("report", "explore").exit_code == 0
    md = (project.entries / "reports" / "explore.md").read_text()
    assert "This run is exploratory" in md and "an exploratory run has nothing to score" in md


def test_a_failed_run_and_its_abandoned_siblings_are_disclosed(logbook_repo, story_clock, cli):
    project = project_of(logbook_repo)
    pid = make_prereg(project, ["loss@final < 4"])
    story_run(project, story_clock, "first", pid, finish=False, restart=False)
    EventSink(project.run_dir("first"), "first", 1).emit("run_failed", step=60, reason="restarts exhausted")
    story_run(project, story_clock, "second", pid)
    assert cli("report", "first").exit_code == 0
    first = (project.entries / "reports" / "first.md").read_text()
    assert "The run itself failed: all of its" in first and "went to an abandoned run" in first
    assert cli("report", "second").exit_code == 0
    second = (project.entries / "reports" / "second.md").read_text()
    assert "Other runs under the same preregistration:" in second
    assert "`first`: failed at step 60" in second and "(abandoned)" in second


def test_bad_requests_are_refused_with_a_sentence(logbook_repo, story_clock, cli, tmp_path):
    project = project_of(logbook_repo)
    story_run(project, story_clock, "story", make_prereg(project, ["loss@final < 4"]))
    res = cli("report", "nope")
    assert res.exit_code == 3 and "unknown run" in res.stderr and "Traceback" not in res.output
    assert cli("report", "story", "--format", "docx").exit_code == 2
    res = cli("report", "story", "--out", str(tmp_path))
    assert res.exit_code == 2 and "is a folder" in res.stderr
    res = cli("report", "story", "--format", "md", "--out", str(tmp_path / "story.pdf"))
    assert res.exit_code == 2 and "is named as pdf" in res.stderr and not (tmp_path / "story.pdf").exists()


def test_a_report_named_pdf_is_a_pdf(logbook_repo, story_clock, cli, tmp_path):
    project = project_of(logbook_repo)
    story_run(project, story_clock, "story", make_prereg(project, ["loss@final < 4"]))
    res = cli("report", "story", "--out", str(tmp_path / "story.pdf"))
    assert res.exit_code == 0, res.output
    assert (tmp_path / "story.pdf").read_bytes().startswith(b"%PDF")


def test_a_changed_setting_shows_as_set_not_as_binary_noise():
    from logbook.chronicle.report import exact

    assert exact(0.8 * 0.9) == "0.72"  # 0.7200000000000001 in the event
    assert exact(0.0003) == "0.0003" and exact(1.0) == "1.0" and exact("cosine") == "cosine" and exact(None) == "none"


def test_the_report_counts_every_preregistration_on_the_same_question(logbook_repo, story_clock, cli, local_tsa):
    """Ten variants stamped and one shown: every stamp is honest, so the report shows the denominator."""
    project, pid = _reviewed_story(logbook_repo, story_clock)
    moved = make_prereg(project, ["spikes@final == 0", "val_loss@final < 9.5"], title="the same bet, moved")
    other = make_prereg(project, ["spikes@final == 0"], title="the same bet, stamped")
    make_prereg(project, ["spikes@50% == 0"], title="another point of the run")  # another point: not the same question
    local_tsa.configure(logbook_repo)
    project = project_of(logbook_repo)  # with the timestamping settings just committed
    for sibling in (moved, other):  # stamped; the story's own records are not (stamped now, they would prove no order)
        outcome = stamp_prereg_record(project, sibling, load_prereg(project, sibling).sha256, "")
        assert outcome.written and not outcome.pending, outcome
    assert cli("report", "story").exit_code == 0, cli("report", "story").output
    prereg = _section((project.entries / "reports" / "story.md").read_text(), "Preregistration")
    same = prereg[prereg.index("**Other preregistrations on the same question.**"):]
    assert "predict the same metric at the same point under the same config: 2 (2 stamped by a third party)" in same
    assert f"`{moved}`: the same bet, moved" in same and "; stamped; no run; shares spikes@final, val\\_loss@final" in same
    assert f"`{other}`: the same bet, stamped" in same
    assert "No third-party time: no timestamp authority stamped it" in prereg  # the story's own, never stamped
    assert cli("report", "story", "--out", str(logbook_repo / "other.md")).exit_code == 0
    assert "another point of the run" not in same
