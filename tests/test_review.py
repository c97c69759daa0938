"""`logbook review`: the queue, signed append-only records, approvals, and refusals that change nothing."""

from __future__ import annotations

import json

from conftest import git
from scoring_helpers import make_prereg, project_of, story_clock, story_run  # noqa: F401

from logbook.eventlog.files import damaged_records
from logbook.promises.reviews import reviews_for


def _story(repo, clock, run="story", author="Lin Launcher <lin@example.org>"):
    project = project_of(repo)
    pid = make_prereg(project, ["loss@final < 4", "spikes@final == 0"])
    story_run(project, clock, run, pid, author=author)
    return project


def _reviews_on_disk(project) -> list[tuple[str, bytes]]:
    d = project.reviews_dir
    return sorted((p.name, p.read_bytes()) for p in d.glob("*.json")) if d.is_dir() else []


def _queue(cli, *args):
    res = cli("review", "--json", *args)
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def _id(items, kind):
    return next(i["id"] for i in items if i["kind"] == kind)


def test_the_queue_lists_what_needs_a_reviewer_and_nothing_routine(logbook_repo, story_clock, cli):
    _story(logbook_repo, story_clock)
    items = _queue(cli)
    kinds = [i["kind"] for i in items]
    assert kinds == ["divergence_detected", "milestone", "restart", "hparam_change"]
    change = next(i for i in items if i["kind"] == "hparam_change")
    assert change["summary"].startswith("grad_clip 1.0 → 0.5 by Ada Tester (live)") and "[not in the plan]" in change["summary"]
    restart = next(i for i in items if i["kind"] == "restart")
    assert "attempt 1 → 2: killed by signal 9 (SIGKILL)" in restart["summary"] and "10 steps lost" in restart["summary"]
    assert all(i["approvals"] == [] and i["needed"] == 1 and i["state"] == "needs review" for i in items)
    assert all(i["id"].startswith("story:") and i["ts"].startswith("2026-11-30T") for i in items)


def test_the_queue_table_shows_id_time_run_kind_approvals_and_summary(logbook_repo, story_clock, cli, monkeypatch):
    _story(logbook_repo, story_clock)
    monkeypatch.setenv("COLUMNS", "200")
    res = cli("review")
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert lines[0].strip() == "run story  (entry ids are story:<n>)"
    assert lines[2].split()[:6] == ["2", "2026-11-30", "08:00", "divergence", "detected", "0/1"]
    assert lines[2].rstrip().endswith("action: skip [not in the plan]")  # summaries are text, not rich markup


def test_an_approval_signs_off_an_entry_with_the_git_identity(logbook_repo, story_clock, cli):
    project = _story(logbook_repo, story_clock)
    eid = _id(_queue(cli), "restart")
    res = cli("review", "approve", eid, "--comment", "cost matches the drill")
    assert res.exit_code == 0, res.output
    assert "Ada Tester approved" in res.stderr and "1/1 approvals, approved" in res.stderr
    assert eid not in [i["id"] for i in _queue(cli)]
    assert next(i for i in _queue(cli, "--all") if i["id"] == eid)["approvals"] == ["Ada Tester"]
    rec = reviews_for(project)[eid][0]
    assert (rec["action"], rec["reviewer"], rec["email"], rec["text"]) == ("approve", "Ada Tester", "ada@example.org", "cost matches the drill")
    assert damaged_records(project.reviews_dir, project.root) == []


def test_two_approvals_are_needed_when_the_logbook_says_so(logbook_repo, story_clock, cli):
    project = _story(logbook_repo, story_clock)
    cfg = logbook_repo / "logbook.yaml"
    cfg.write_text(cfg.read_text().replace("review_approvals: 1", "review_approvals: 2"))
    eid = _id(_queue(cli), "milestone")
    assert cli("review", "approve", eid).exit_code == 0
    assert next(i for i in _queue(cli) if i["id"] == eid)["state"] == "needs review"
    git(logbook_repo, "config", "user.name", "Bo Reviewer")
    git(logbook_repo, "config", "user.email", "bo@example.org")
    res = cli("review", "approve", eid)
    assert res.exit_code == 0 and "2/2 approvals, approved" in res.stderr
    assert eid not in [i["id"] for i in _queue(cli)]
    assert [r["reviewer"] for r in reviews_for(project)[eid]] == ["Ada Tester", "Bo Reviewer"]


def test_approving_twice_is_refused_and_changes_nothing(logbook_repo, story_clock, cli):
    project = _story(logbook_repo, story_clock)
    eid = _id(_queue(cli), "restart")
    assert cli("review", "approve", eid).exit_code == 0
    before = _reviews_on_disk(project)
    res = cli("review", "approve", eid, "--comment", "again")
    assert res.exit_code == 3 and "already approved" in res.stderr and "nothing was recorded" in res.stderr
    assert _reviews_on_disk(project) == before


def test_an_unknown_entry_is_refused_with_close_ids_and_changes_nothing(logbook_repo, story_clock, cli):
    project = _story(logbook_repo, story_clock)
    eid = _id(_queue(cli), "restart")
    cli("review", "comment", eid, "first")
    before = _reviews_on_disk(project)
    typo = "stroy:" + eid.split(":")[1]
    res = cli("review", "approve", typo)
    assert res.exit_code == 3 and f"no entry {typo}" in res.stderr and f"did you mean {eid}" in res.stderr
    assert cli("review", "approve", "not-an-id").exit_code == 3
    assert _reviews_on_disk(project) == before


def test_a_routine_entry_is_not_in_the_queue_and_is_refused(logbook_repo, story_clock, cli):
    project = _story(logbook_repo, story_clock)
    res = cli("review", "approve", "story:0")  # run_started
    assert res.exit_code == 3 and "not in the review queue" in res.stderr and "logbook note --about story:0" in res.stderr
    assert _reviews_on_disk(project) == []


def test_a_reviewer_without_a_git_identity_is_refused_and_changes_nothing(logbook_repo, story_clock, cli, monkeypatch, tmp_path):
    project = _story(logbook_repo, story_clock)
    eid = _id(_queue(cli), "restart")
    cli("review", "comment", eid, "first")
    before = _reviews_on_disk(project)
    empty = tmp_path / "empty.gitconfig"
    empty.write_text("")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(empty))
    res = cli("review", "approve", eid)
    assert res.exit_code == 3 and "no git identity" in res.stderr and "git config user.name" in res.stderr
    assert _reviews_on_disk(project) == before


def test_changes_requested_stay_open_until_the_same_reviewer_approves(logbook_repo, story_clock, cli):
    _story(logbook_repo, story_clock)
    eid = _id(_queue(cli), "hparam_change")
    assert cli("review", "approve", eid).exit_code == 0
    assert cli("review", "request-changes", eid, "the reason should name the data issue").exit_code == 0
    item = next(i for i in _queue(cli) if i["id"] == eid)
    assert item["state"] == "changes requested" and item["approvals"] == []
    assert cli("review", "comment", eid, "see data issue #88").exit_code == 0
    assert next(i for i in _queue(cli) if i["id"] == eid)["comments"] == 1
    assert cli("review", "approve", eid).exit_code == 0
    assert eid not in [i["id"] for i in _queue(cli)]


def test_empty_or_control_character_text_is_a_usage_error(logbook_repo, story_clock, cli):
    project = _story(logbook_repo, story_clock)
    eid = _id(_queue(cli), "restart")
    assert cli("review", "request-changes", eid, "   ").exit_code == 2
    assert cli("review", "comment", eid, "bell \x07").exit_code == 2
    assert _reviews_on_disk(project) == []


def test_an_edited_review_record_is_refused_as_tampered(logbook_repo, story_clock, cli):
    project = _story(logbook_repo, story_clock)
    eid = _id(_queue(cli), "restart")
    cli("review", "approve", eid, "--comment", "fine")
    (path,) = project.reviews_dir.glob("*.json")
    path.write_text(path.read_text().replace('"fine"', '"great"'))
    before = _reviews_on_disk(project)
    res = cli("review", "comment", eid, "more")
    assert res.exit_code == 4 and "which fails its check" in res.stderr and path.name in res.stderr
    assert "git restore --source=HEAD" in res.stderr
    assert _reviews_on_disk(project) == before


def test_status_gives_every_run_its_review_state_and_outcome(logbook_repo, story_clock, cli):
    project = _story(logbook_repo, story_clock)
    story_run(project, story_clock, "other", None, exploratory=True)
    assert cli("outcome", "story").exit_code == 0
    eid = _id(_queue(cli, "--run", "story"), "restart")
    cli("review", "request-changes", eid, "why SIGKILL?")
    res = cli("review", "--status", "--json")
    assert res.exit_code == 0, res.output
    rows = {r["run"]: r for r in json.loads(res.stdout)}
    assert rows["story"]["outcome"] is True and rows["other"]["outcome"] is False
    assert rows["story"]["changes_requested"] == 1 and rows["story"]["needs_review"] == 4  # 3 + the outcome entry
    assert rows["other"]["needs_review"] == 4 and rows["story"]["signed_off"] is False
    table = cli("review", "--status")
    assert table.exit_code == 0 and "recorded" in table.stdout and "none" in table.stdout


def test_review_records_render_under_their_entry_through_the_chronicle_template(logbook_repo, story_clock, cli):
    from logbook.chronicle.markdown import MarkdownRenderer

    project = _story(logbook_repo, story_clock)
    eid = _id(_queue(cli), "restart")
    cli("review", "approve", eid, "--comment", "*fine* | [x](y)")
    env = MarkdownRenderer(project).env
    tpl = env.from_string('body\n{% include "chronicle/reviews.md.j2" %}\n\nid: x\n')
    assert tpl.render(e={"reviews": []}) == "body\n\nid: x\n"  # nothing changes for an entry without reviews
    text = tpl.render(e={"reviews": reviews_for(project)[eid]})
    assert "**Reviews:**" in text and "- Ada Tester approved (2026-11-30 " in text
    assert "“\\*fine\\* \\| \\[x\\](y)”" in text  # a review's text is shown, never read as Markdown


def test_two_approvals_at_once_by_one_reviewer_record_one(logbook_repo, story_clock, monkeypatch):
    """Two terminals approving the same entry together: the check and the append run one after the other."""
    import threading
    import time

    import logbook.chronicle.review as review
    from logbook.core.errors import RefusedError

    project = _story(logbook_repo, story_clock)
    entry = next(i.id for i in review.review_queue(project) if i.kind == "restart")
    verdicts = review._verdicts

    def slow_verdicts(p, *rest):
        found = verdicts(p, *rest)
        time.sleep(0.3)  # a wide window between reading the verdicts and appending
        return found

    monkeypatch.setattr(review, "_verdicts", slow_verdicts)
    outcomes: list[str] = []

    def approve():
        try:
            review.add_review(project, entry, "approve", render=False)
            outcomes.append("recorded")
        except RefusedError:
            outcomes.append("refused")

    threads = [threading.Thread(target=approve) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["recorded", "refused"]
    assert [r["action"] for r in reviews_for(project)[entry]] == ["approve"]


def test_the_author_of_a_run_cannot_approve_its_entries_unless_the_logbook_allows_it(logbook_repo, story_clock, cli):
    project = _story(logbook_repo, story_clock, author="Ada Tester <ADA@example.org>")
    eid = _id(_queue(cli), "restart")
    res = cli("review", "approve", eid)
    assert res.exit_code == 3 and "Ada Tester launched run story" in res.stderr and "review_self_approval" in res.stderr
    assert _reviews_on_disk(project) == []
    assert cli("review", "comment", eid, "the cause was a drill").exit_code == 0  # remarks stay open to the author
    cfg = logbook_repo / "logbook.yaml"
    cfg.write_text(cfg.read_text().replace("review_self_approval: false", "review_self_approval: true"))
    assert cli("review", "approve", eid).exit_code == 3  # an uncommitted edit of the setting grants nothing
    git(logbook_repo, "commit", "-q", "-m", "launchers may approve their runs", "--", "logbook.yaml")
    assert cli("review", "approve", eid).exit_code == 0
    assert next(i for i in _queue(cli, "--all") if i["id"] == eid)["state"] == "approved"
