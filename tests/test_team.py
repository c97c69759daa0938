"""A team shares one logbook through git: three clones, a bare origin, `git pull` by merge and by rebase."""

from __future__ import annotations

import json

import pytest
from chronicle_helpers import clock  # noqa: F401  (a fixture)
from scoring_helpers import story_clock, story_run  # noqa: F401  (story_clock is a fixture)
from team import kind_violations, make_team

from logbook.core.project import open_project


def _entries_conflict_free(*clones) -> None:
    for c in clones:
        assert [p for p in c.conflicts() if p.startswith("entries/")] == [], c.name


def _checks_pass(c) -> None:
    c.ok("verify")
    c.ok("render", "--check")


@pytest.mark.parametrize("mode", ["merge", "rebase"])
def test_same_day_notes_on_two_clones_merge_without_conflict_and_both_keep_their_ids(tmp_path, story_clock, mode):
    team = make_team(tmp_path, ["ada", "bo", "cy"])
    ada, bo, cy = team["ada"], team["bo"], team["cy"]
    a_id = ada.ok("note", "loss looks flat after the warm-up").stdout.strip()
    b_id = bo.ok("note", "node 7 is flaky again").stdout.strip()
    assert a_id != b_id and a_id.startswith("note:") and b_id.startswith("note:")
    ada.commit()
    ada.push()
    bo.commit()
    r = bo.pull(mode)
    assert r.returncode == 0, r.stderr
    _entries_conflict_free(bo)
    _checks_pass(bo)  # the post-merge / post-rewrite hook re-rendered the shared day
    day = next((bo.entries() / "2026" / "11").glob("*.md")).read_text()
    assert "loss looks flat" in day and "node 7 is flaky" in day
    bo.commit()
    bo.push()
    assert cy.pull(mode).returncode == 0
    _checks_pass(cy)
    # An erratum about bo's note, written on another clone, names bo's note and nothing else.
    cy.ok("note", "--about", b_id, "it was the PSU, not the node")
    cy.commit()
    cy.push()
    assert ada.pull(mode).returncode == 0
    _checks_pass(ada)
    text = (ada.entries() / "2026" / "11" / "30.md").read_text()
    anchor_a, anchor_b = a_id.replace(":", "-"), b_id.replace(":", "-")
    a_entry = text.split(f'<a id="{anchor_a}"></a>')[1].split("### ")[0]
    b_entry = text.split(f'<a id="{anchor_b}"></a>')[1].split("### ")[0]
    assert "Erratum" in b_entry and "Erratum" not in a_entry
    assert kind_violations(ada) == []  # no record ever changed, no log did anything but grow


@pytest.mark.parametrize("button", ["merge", "squash"])
def test_a_merge_in_a_clone_without_logbook_set_up_has_no_conflict_under_entries(tmp_path, story_clock, button):
    """A hosting service's merge button runs no hook and no custom driver: only what is committed counts."""
    team = make_team(tmp_path, ["ada", "bo"])
    ada, bo = team["ada"], team["bo"]
    ada.git("switch", "-q", "-c", "ada-notes")
    ada.ok("note", "from ada's branch")
    ada.commit()
    ada.git("push", "-q", "origin", "ada-notes")
    bo.ok("note", "from main")
    bo.commit()
    bo.push()
    host = team.join("host", setup=False)  # stands in for the service: no `logbook init`, no hooks
    host.git("fetch", "-q", "origin")
    r = host.git("merge", *(["--squash"] if button == "squash" else ["--no-edit"]), "origin/ada-notes", check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    _entries_conflict_free(host)
    if button == "squash":
        host.git("commit", "-q", "-m", "Squashed: ada's notes")
    day = (host.entries() / "2026" / "11" / "30.md").read_text()
    assert "from ada's branch" in day and "from main" in day  # still readable where the repository is browsed
    host.ok("verify")
    res = host.cli("render", "--check")  # stale until rendered, and the clone says what to run
    assert res.exit_code == 3 and "logbook render" in res.stderr
    host.git("push", "-q", "origin", "HEAD:main")  # the service updates main with the merge as it is
    ada.git("switch", "-q", "main")
    for mode, c in (("merge", ada), ("rebase", bo)):  # set-up clones that only fast-forward re-render too
        r = c.pull(mode)
        assert r.returncode == 0, r.stderr
        _checks_pass(c)


def test_init_in_a_fresh_clone_sets_it_up_once_and_says_what_it_did(tmp_path, story_clock):
    team = make_team(tmp_path, ["ada"])
    bo = team.join("bo", setup=False)
    warned = bo.cli("note", "before set-up")
    assert warned.exit_code == 0 and "not set up" in warned.stderr and "logbook init" in warned.stderr
    first = bo.ok("init")
    assert "post-merge hook" in first.stderr and "post-rewrite hook" in first.stderr
    again = bo.ok("init")
    assert "already set up" in again.stderr and "installed" not in again.stderr
    assert "not set up" not in bo.cli("note", "after set-up").stderr


def test_a_hook_of_ones_own_is_left_alone_and_init_says_what_to_add(tmp_path, story_clock):
    team = make_team(tmp_path, ["ada"])
    bo = team.join("bo", setup=False)
    hook = bo.path / ".git" / "hooks" / "post-merge"
    hook.write_text("#!/bin/sh\necho mine\n")
    res = bo.ok("init")
    assert hook.read_text() == "#!/bin/sh\necho mine\n"
    assert "to do:" in res.stderr and "post-merge" in res.stderr and "render --pulled ORIG_HEAD" in res.stderr


def _record_files(c, folder: str) -> list[str]:
    return sorted(p.name for p in (c.entries() / folder).glob("*.json"))


def test_reviews_from_two_clones_both_count_once_and_the_author_cannot_approve(tmp_path, story_clock):
    team = make_team(tmp_path, ["ada", "bo", "cy"])
    ada, bo, cy = team["ada"], team["bo"], team["cy"]
    project = open_project(ada.path)
    story_run(project, story_clock, "qknorm", None, author="Ada <ada@lab.example>")
    (ada.path / "logbook.yaml").write_text((ada.path / "logbook.yaml").read_text().replace(
        "review_approvals: 1", "review_approvals: 2"))
    ada.git("commit", "-q", "-am", "two approvals per entry")
    ada.commit()
    ada.push()
    for c in (bo, cy):
        assert c.pull("rebase").returncode == 0
    entry = "qknorm:2"  # the spike at step 30
    own = ada.cli("review", "approve", entry)
    assert own.exit_code == 3 and "launched run qknorm" in own.stderr and "teammate" in own.stderr
    assert _record_files(ada, "reviews") == []
    bo.ok("review", "approve", entry)
    cy.ok("review", "approve", entry)
    for c, mode in ((bo, "merge"), (cy, "rebase")):
        c.commit()
        assert c.pull(mode).returncode == 0
        _entries_conflict_free(c)
        c.push()
    assert ada.pull("merge").returncode == 0
    _checks_pass(ada)
    assert len(_record_files(ada, "reviews")) == 2
    item = json.loads(ada.ok("review", "--all", "--json").stdout)
    spike = next(i for i in item if i["id"] == entry)
    assert spike["state"] == "approved" and sorted(spike["approvals"]) == ["Bo", "Cy"]
    assert kind_violations(ada) == []


def _shared_run(team, clock, run="qknorm", predictions=("loss@final < 4", "spikes@final == 0")):
    """ada preregisters and runs; everyone pulls the run."""
    from scoring_helpers import make_prereg

    ada = team["ada"]
    project = open_project(ada.path)
    pid = make_prereg(project, list(predictions))
    story_run(project, clock, run, pid, author="Ada <ada@lab.example>")
    ada.commit()
    ada.push()
    for c in team.clones.values():
        if c is not ada:
            assert c.pull("rebase").returncode == 0
    return pid


@pytest.mark.parametrize("mode", ["merge", "rebase"])
def test_outcomes_scored_on_two_clones_both_survive_and_the_log_is_untouched(tmp_path, story_clock, mode):
    team = make_team(tmp_path, ["ada", "bo", "cy"])
    ada, bo, cy = team["ada"], team["bo"], team["cy"]
    _shared_run(team, story_clock)
    log = "entries/runs/qknorm/events.jsonl"
    before = (bo.path / log).read_bytes()
    bo.ok("outcome", "qknorm")
    cy.ok("outcome", "qknorm")
    assert (bo.path / log).read_bytes() == before
    bo.commit()
    bo.push()
    cy.commit()
    assert cy.pull(mode).returncode == 0
    _entries_conflict_free(cy)
    _checks_pass(cy)
    scored = _record_files(cy, "runs/qknorm/outcomes")
    assert len(scored) == 2  # neither side's record was dropped
    text = (cy.entries() / "2026" / "11" / "30.md").read_text()
    assert all(f'<a id="outcome-{name[:-5]}"></a>' in text for name in scored)
    status = json.loads(cy.ok("review", "--status", "--json").stdout)
    assert status[0]["outcome"] is True
    cy.push()
    assert kind_violations(cy) == []


def test_one_reviewer_approving_on_two_clones_counts_once(tmp_path, story_clock):
    team = make_team(tmp_path, ["ada", "bo", "laptop"])
    _shared_run(team, story_clock)
    bo, laptop = team["bo"], team["laptop"]
    laptop.git("config", "user.name", "Bo")
    laptop.git("config", "user.email", bo.email)  # the same person on a second machine
    cfg = bo.path / "logbook.yaml"
    cfg.write_text(cfg.read_text().replace("review_approvals: 1", "review_approvals: 2"))
    bo.ok("review", "approve", "qknorm:2")
    laptop.ok("review", "approve", "qknorm:2")
    laptop.commit()
    laptop.push()
    bo.commit()
    assert bo.pull("merge").returncode == 0
    assert len(_record_files(bo, "reviews")) == 2
    items = json.loads(bo.ok("review", "--json").stdout)
    spike = next(i for i in items if i["id"] == "qknorm:2")
    assert spike["approvals"] == ["Bo"] and spike["state"] == "needs review"  # one person, one approval


@pytest.mark.parametrize("mode", ["merge", "rebase"])
def test_competing_amendments_both_survive_in_one_order_and_a_run_is_scored_against_those_it_saw(
        tmp_path, story_clock, mode):
    from scoring_helpers import make_prereg

    from logbook.promises.prereg import load_prereg

    team = make_team(tmp_path, ["ada", "bo", "cy"])
    ada, bo, cy = team["ada"], team["bo"], team["cy"]
    pid = make_prereg(open_project(ada.path), ["loss@final < 4"])  # committed by logbook itself
    ada.push()
    for c in (bo, cy):
        assert c.pull(mode).returncode == 0
    ada.ok("prereg", "amend", pid, "--seen", "nothing", "--reason", "add a restart budget",
           "--predict", "restarts@final <= 3")
    bo.ok("prereg", "amend", pid, "--seen", "nothing", "--reason", "add a spike budget",
          "--predict", "spikes@final == 0")
    ada.push()
    r = bo.pull(mode)
    assert r.returncode == 0, r.stderr
    _entries_conflict_free(bo)
    bo.push()
    assert ada.pull(mode).returncode == 0
    orders = [[(a.key, a.reason) for a in load_prereg(open_project(c.path), pid).amendments] for c in (ada, bo)]
    assert orders[0] == orders[1] and len(orders[0]) == 2  # both kept, one order on every clone
    if mode == "merge":  # a rebased amendment's commit proof is #12 part B (proofs over content and order)
        for c in (ada, bo):
            c.ok("verify")
    # cy launches a run having pulled only the original; both amendments arrive later.
    project = open_project(cy.path)
    story_run(project, story_clock, "qknorm", pid, author="Cy <cy@lab.example>")
    assert json.loads((cy.entries() / "runs" / "qknorm" / "run.json").read_text())["amendments"] == []
    cy.commit()
    assert cy.pull(mode).returncode == 0
    card = json.loads(cy.ok("outcome", "qknorm", "--json").stdout)
    # Scored against what it saw; the later amendments' forecasts are scored apart, labelled late.
    assert [p["text"] for p in card["predictions"] if not p.get("late")] == ["loss@final < 4"]
    late = [p["late"] for p in card["predictions"] if p.get("late")]
    assert len(late) >= 2 and all("after this run started" in w or "not in force" in w for w in late), late
    later = [d["text"] for d in card["deviations"] if d["kind"] == "amendment"]
    assert len(later) == 2 and all("after the run started" in t for t in later)
    cy.commit()
    assert kind_violations(cy) == []


def test_a_clock_a_day_ahead_misfiles_only_its_own_notes_and_the_skew_is_recorded_and_shown(tmp_path, clock):
    team = make_team(tmp_path, ["ada", "bo"])
    ada, bo = team["ada"], team["bo"]
    clock.set("2026-12-02T12:00:00")  # ada's laptop runs 26 h ahead
    fast = ada.ok("note", "written on a fast clock").stdout.strip()
    ada.commit()
    ada.push()
    assert bo.pull("merge").returncode == 0
    clock.set("2026-12-01T10:00:00")
    mine = bo.ok("note", "written at the right time").stdout.strip()
    today = (bo.entries() / "2026" / "12" / "01.md").read_text()
    tomorrow = (bo.entries() / "2026" / "12" / "02.md").read_text()
    assert "written at the right time" in today and "written at the right time" not in tomorrow
    assert "written on a fast clock" in tomorrow
    entry = today.split(f'<a id="{mine.replace(":", "-")}"></a>')[1]
    assert f"⏱ Clock: {fast} by Ada is dated 26.0 h after this writer's clock" in entry
    bo.commit()
    bo.push()
    assert ada.pull("rebase").returncode == 0
    _checks_pass(ada)


def test_a_writers_clock_that_went_back_is_recorded_on_the_later_note(tmp_path, clock):
    team = make_team(tmp_path, ["ada"])
    ada = team["ada"]
    clock.set("2026-12-01T10:00:00")
    first = ada.ok("note", "first").stdout.strip()
    clock.set("2026-12-01T09:00:00")  # NTP stepped the clock back an hour
    second = ada.ok("note", "second").stdout.strip()
    rec = json.loads((ada.entries() / "notes" / f"{second.split(':', 1)[1]}.json").read_text())
    assert rec["clock_warnings"] == [f"written at 2026-12-01T09:00:00Z, 1.0 h before this writer's previous record "
                                     f"{first}: this writer's clock went back"]
    assert "this writer's clock went back" in (ada.entries() / "2026" / "12" / "01.md").read_text()
    _checks_pass(ada)


def _clash_outside_entries(team):
    """ada and bo each change README.md and write a note: the pull stops on README.md alone."""
    ada, bo = team["ada"], team["bo"]
    for c in (ada, bo):
        (c.path / "README.md").write_text(f"{c.name}'s readme\n")
        c.git("commit", "-q", "-am", f"{c.name} edits the readme")
        c.ok("note", f"a note from {c.name}")
        c.commit()
    ada.push()


def test_a_merge_stopped_by_a_conflict_elsewhere_gets_recovery_steps_that_work(tmp_path, story_clock):
    team = make_team(tmp_path, ["ada", "bo"])
    bo = team["bo"]
    _clash_outside_entries(team)
    assert bo.pull("merge").returncode != 0
    assert bo.conflicts() == ["README.md"]  # nothing under entries/
    bo.ok("verify")  # every record merged cleanly
    refused = bo.cli("commit")
    assert refused.exit_code == 3 and "a merge is in progress" in refused.stderr
    assert "git merge --abort" in refused.stderr and "then run `logbook commit`" in refused.stderr
    stale = bo.cli("render", "--check")
    assert stale.exit_code == 3 and "a merge is in progress" in stale.stderr
    # Follow the steps: resolve, add, commit; then the logbook's own commands work again.
    (bo.path / "README.md").write_text("both readmes\n")
    bo.git("add", "README.md")
    bo.git("commit", "-q", "--no-edit")
    bo.ok("render")
    bo.commit()
    _checks_pass(bo)
    bo.push()


def test_a_rebase_stopped_by_a_conflict_elsewhere_gets_recovery_steps_that_work(tmp_path, story_clock):
    team = make_team(tmp_path, ["ada", "bo"])
    bo = team["bo"]
    _clash_outside_entries(team)
    assert bo.pull("rebase").returncode != 0
    assert bo.conflicts() == ["README.md"]
    refused = bo.cli("commit")
    assert refused.exit_code == 3 and "a rebase is in progress" in refused.stderr
    assert "git rebase --continue" in refused.stderr
    (bo.path / "README.md").write_text("both readmes\n")
    bo.git("add", "README.md")
    r = bo.git("-c", "core.editor=true", "rebase", "--continue", check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    _entries_conflict_free(bo)
    _checks_pass(bo)  # the post-rewrite hook re-rendered after the rebase finished
    bo.push()


def test_a_damaged_record_during_a_merge_gets_a_restore_step_that_works_mid_merge(tmp_path, story_clock):
    team = make_team(tmp_path, ["ada", "bo"])
    bo = team["bo"]
    _clash_outside_entries(team)
    assert bo.pull("merge").returncode != 0
    (note,) = [p for p in (bo.entries() / "notes").glob("*.json")
               if "a note from ada" in p.read_text()]  # came with the merge
    note.write_text(note.read_text().replace("from ada", "from nobody"))
    res = bo.cli("verify")
    assert res.exit_code == 4 and "a merge is in progress" in res.stderr
    step = res.stderr.split("(for a record that came with the merge, `")[1].split("`")[0]
    assert step == "--source=MERGE_HEAD"
    rel = note.relative_to(bo.path).as_posix()
    bo.git("restore", "--source=MERGE_HEAD", "--staged", "--worktree", "--", rel)
    bo.ok("verify")


def test_code_snapshots_travel_with_plain_git_push_and_pull_once_init_has_run(tmp_path, story_clock):
    team = make_team(tmp_path, ["ada", "bo"])
    ada, bo = team["ada"], team["bo"]
    ada.git("update-ref", "refs/logbook/snapshots/qknorm", "HEAD")  # what `logbook run` records
    ada.ok("note", "launched qknorm")
    ada.commit()
    ada.git("push", "-q")  # plain: the current branch and the snapshots
    assert ada.git("ls-remote", "origin").stdout.count("refs/heads/main") == 1
    assert bo.pull("merge").returncode == 0
    assert bo.git("rev-parse", "refs/logbook/snapshots/qknorm").stdout.strip() == ada.git("rev-parse", "HEAD~1").stdout.strip()
    assert "launched qknorm" in next((bo.entries() / "2026" / "11").glob("*.md")).read_text()


@pytest.mark.parametrize("mode", ["merge", "rebase"])
def test_reports_written_on_two_clones_merge_into_one_current_report_and_their_pdfs_stay_out_of_git(
        tmp_path, story_clock, mode):
    team = make_team(tmp_path, ["ada", "bo", "cy"])
    ada, bo, cy = team["ada"], team["bo"], team["cy"]
    _shared_run(team, story_clock)
    for c in (bo, cy):
        c.ok("report", "qknorm", "--format", "pdf")
        assert (c.entries() / "reports" / "qknorm.pdf").is_file()
    first, second = (i["id"] for i in json.loads(bo.ok("review", "--json").stdout)[:2])
    bo.ok("review", "approve", first)
    bo.ok("report", "qknorm")
    bo.commit()
    bo.push()
    cy.ok("review", "request-changes", second, "why this step?")
    cy.ok("report", "qknorm")
    cy.commit()
    r = cy.pull(mode)
    assert r.returncode == 0, r.stdout + r.stderr
    _entries_conflict_free(cy)
    report = (cy.entries() / "reports" / "qknorm.md").read_text()
    assert report.count("entries approved") == 1  # one report, not both sides' lines
    cy.ok("report", "qknorm")  # the hook already wrote it from the merged records: nothing changes
    assert (cy.entries() / "reports" / "qknorm.md").read_text() == report
    assert "entries/reports/qknorm.pdf" not in cy.git("ls-files", "entries").stdout
    cy.commit()
    cy.push()
    assert ada.pull(mode).returncode == 0
    _checks_pass(ada)
