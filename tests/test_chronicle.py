"""The dated chronicle: what the day files say, and that they are a pure function of the logs."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from chronicle_helpers import clock, project_of, qknorm_story, sink  # noqa: F401  (clock is a fixture)
from conftest import git

from logbook.chronicle.build import check_chronicle, day_path, render_chronicle, render_markdown_file
from logbook.core.errors import RefusedError


def _all_day_files(entries: Path) -> dict[str, bytes]:
    return {p.relative_to(entries).as_posix(): p.read_bytes() for p in sorted(entries.glob("2*/*/*.md"))}


def test_day_files_regenerate_byte_for_byte_and_check_catches_an_edit(logbook_repo, clock, cli):
    project = project_of(logbook_repo)
    qknorm_story(project, clock)
    res = cli("render")
    assert res.exit_code == 0, res.output
    first = _all_day_files(project.entries)
    assert sorted(first) == ["2026/11/30.md", "2026/12/01.md"]
    for name in first:
        (project.entries / name).unlink()
    shutil.rmtree(project.entries / "2026")
    assert cli("render").exit_code == 0
    assert _all_day_files(project.entries) == first
    assert cli("render", "--check").exit_code == 0

    day = project.entries / "2026/12/01.md"
    day.write_text(day.read_text().replace("2 min 05 s down", "1 min down"))
    res = cli("render", "--check")
    assert res.exit_code == 3
    assert "entries/2026/12/01.md" in res.stderr and "30.md" not in res.stderr
    assert "logbook render" in res.stderr  # the hint says how to fix it


def test_check_reports_missing_and_stale_day_files(logbook_repo, clock):
    project = project_of(logbook_repo)
    qknorm_story(project, clock)
    render_chronicle(project)
    day_path(project, "2026-11-30").unlink()
    stale = day_path(project, "2026-10-01")
    stale.parent.mkdir(parents=True)
    shutil.copyfile(day_path(project, "2026-12-01"), stale)
    try:
        check_chronicle(project)
    except RefusedError as e:
        assert "entries/2026/11/30.md (missing)" in e.message
        assert "entries/2026/10/01.md (has no records in the logs)" in e.message
    else:
        raise AssertionError("check passed with a missing and a stale file")
    res = render_chronicle(project)
    assert stale in res.removed and not stale.exists()
    check_chronicle(project)


def test_restart_entry_gives_cause_loss_and_downtime(logbook_repo, clock):
    project = project_of(logbook_repo)
    qknorm_story(project, clock)
    render_chronicle(project)
    text = day_path(project, "2026-12-01").read_text()
    assert "03:12 UTC · run qknorm · attempt 3 → 4 · step 41,200 (10.8B tokens) · restart" in text
    assert ("Attempt 3 was killed by signal 9 (SIGKILL) with no error record "
            "(cause unknown: the OOM killer, a scheduler or a person).\n"
            "Resumed from the checkpoint at step 41,000: 200 steps (6 min 40 s of work) lost, 2 min 05 s down.") in text
    assert "id: `qknorm:14`" in text  # seq 0 started, 1-12 checkpoints, 13 the milestone


def test_divergence_change_and_drill_entries_say_what_the_plan_said(logbook_repo, clock):
    project = project_of(logbook_repo)
    qknorm_story(project, clock)
    render_chronicle(project)
    text = day_path(project, "2026-12-01").read_text()
    assert "Loss 2.91 against a rolling median of 2.44 (6.1 robust σ, σ = 0.077; threshold 6 σ)." in text
    assert "Ladder: update skipped." in text
    assert text.count("Follows the preregistered contingency rule 1.") == 3  # divergence, rollback, lr
    assert "Rolled back from step 47,390 to the checkpoint at step 47,000 (`ckpt/step-47000`): 390 steps to redo." in text
    assert "Batches 47,000–47,300 will be skipped." in text
    # The whole wording of these entries is test_wording_chronicle's snapshot; here, the facts in them.
    assert "`grad_clip` 1.0 → 0.5, by j.doe" in text and "`r-12`" in text
    assert "grad norm creeping up since 47k" in text and "recorded as a deviation" in text
    assert "-grad_clip: 1.0\n+grad_clip: 0.5\n" in text
    assert "· fault drill\n" in text and "fault `kill` injected at step 52,100" in text


def test_routine_checkpoints_are_one_line_per_run_per_day(logbook_repo, clock):
    project = project_of(logbook_repo)
    qknorm_story(project, clock)
    render_chronicle(project)
    text = day_path(project, "2026-11-30").read_text()
    assert "checkpoint saved" not in text.lower().replace("checkpoints saved", "")
    assert ('- <a id="routine-qknorm-2026-11-30"></a>run qknorm: 12 checkpoints saved, '
            "last at step 12,000, median blocking 0.4 s.") in text
    day2 = day_path(project, "2026-12-01").read_text()
    assert "run qknorm: 1 update skipped by the guard (step 47,315)." in day2


def test_entries_from_several_runs_are_in_time_order(logbook_repo, clock):
    project = project_of(logbook_repo)
    a, b = sink(project, "alpha", 1), sink(project, "beta", 1)
    payloads = {"hang": {"timeout_s": 60, "elapsed_s": 75}, "run_failed": {"reason": "restarts exhausted"}}
    for i, (s, kind) in enumerate([(a, "run_started"), (b, "run_started"), (a, "hang"), (b, "run_finished"), (a, "run_failed")]):
        clock.set(f"2026-12-02T0{i}:30:00")
        s.emit(kind, step=i * 10, **payloads.get(kind, {}))
    render_chronicle(project)
    text = day_path(project, "2026-12-02").read_text()
    heads = [line for line in text.splitlines() if line.startswith("### ")]
    assert [h.split("</a>")[1][:5] for h in heads] == ["00:30", "01:30", "02:30", "03:30", "04:30"]
    assert ["run alpha" in heads[0], "run beta" in heads[1], "run alpha" in heads[2]] == [True, True, True]
    assert "A step ran past its 1 min timeout (1 min 15 s elapsed)" in text


def test_rendering_one_day_matches_the_full_render(logbook_repo, clock):
    project = project_of(logbook_repo)
    qknorm_story(project, clock)
    s = sink(project, "qknorm", 4)
    for d in range(2, 28):  # many days of events before and after the one we re-render
        for h in range(0, 24, 6):
            clock.set(f"2026-12-{d:02d}T{h:02d}:00:00")
            s.emit("hang", step=d * 1000 + h, timeout_s=60, elapsed_s=61)
    render_chronicle(project)
    full = day_path(project, "2026-12-15").read_bytes()
    day_path(project, "2026-12-15").unlink()
    res = render_chronicle(project, days=["2026-12-15"])
    assert res.days == ["2026-12-15"] and res.written == [day_path(project, "2026-12-15")]
    assert day_path(project, "2026-12-15").read_bytes() == full
    res = render_chronicle(project, since="2026-12-20", until="2026-12-21")
    assert res.days == ["2026-12-20", "2026-12-21"] and not res.written  # unchanged files are not rewritten


def test_unknown_kind_and_malformed_payload_render_generically(logbook_repo, clock, monkeypatch):
    monkeypatch.delenv("LOGBOOK_STRICT_EVENTS")  # this log is malformed on purpose
    project = project_of(logbook_repo)
    s = sink(project, "qknorm", 1)
    clock.set("2026-12-03T08:00:00")
    s.emit("thermal_throttle", step=5, gpu=3, temp_c=91.5, note="<b>hot</b> *very*", trace="line 1\nline 2")
    s.emit("restart", step=6, cause="signal", signal=[9], prev_attempt="x", resumed_from_step={"bad": True})
    render_chronicle(project)
    text = day_path(project, "2026-12-03").read_text()
    assert "An event of kind `thermal_throttle`, which these templates do not describe" in text
    assert "- `gpu`: 3" in text and "- `temp_c`: 91.5" in text
    assert r"- `note`: \<b\>hot\</b\> \*very\*" in text
    assert "  ```text\n  line 1\n  line 2\n  ```" in text
    restart = text.split("· restart")[1]
    assert "signal" in restart and "`resumed_from_step`" not in restart or "Started again" in restart


def test_torn_event_log_renders_what_is_there_and_says_so(logbook_repo, clock):
    project = project_of(logbook_repo)
    qknorm_story(project, clock)
    log = project.run_dir("qknorm") / "events.jsonl"
    before = log.read_bytes()
    with open(log, "ab") as f:
        f.write(b'{"attempt":4,"data":{"fault":"ki')
    render_chronicle(project)
    text = day_path(project, "2026-12-01").read_text()
    assert "**Drill:** fault `kill` injected" in text  # the last complete record is still there
    assert "`entries/runs/qknorm/events.jsonl` ends in a torn line (32 bytes)" in text
    assert log.read_bytes() == before + b'{"attempt":4,"data":{"fault":"ki'  # nothing lost, nothing repaired by a reader


def test_project_templates_override_the_bundled_ones(logbook_repo, clock):
    project = project_of(logbook_repo)
    qknorm_story(project, clock)
    local = logbook_repo / "templates" / "chronicle" / "kinds"
    local.mkdir(parents=True)
    (local / "restart.md.j2").write_text("Restarted after {{ e.data.downtime_s|dur }} down.\n")
    render_chronicle(project)
    text = day_path(project, "2026-12-01").read_text()
    assert "Restarted after 2 min 05 s down." in text
    assert "Ladder: update skipped." in text  # the other kinds still use the bundled templates


def test_render_writes_only_the_working_tree(logbook_repo, clock):
    project = project_of(logbook_repo)
    (logbook_repo / "README.md").write_text("staged change\n")
    git(logbook_repo, "add", "README.md")
    staged, head = git(logbook_repo, "diff", "--cached"), git(logbook_repo, "rev-parse", "HEAD")
    qknorm_story(project, clock)
    render_chronicle(project)
    assert git(logbook_repo, "diff", "--cached") == staged
    assert git(logbook_repo, "rev-parse", "HEAD") == head


def test_combined_markdown_file_links_inside_itself(logbook_repo, clock, tmp_path):
    project = project_of(logbook_repo)
    qknorm_story(project, clock)
    out = tmp_path / "week.md"
    res = render_markdown_file(project, out, run="qknorm")
    text = out.read_text()
    assert res.days == ["2026-11-30", "2026-12-01"]
    assert text.startswith("# Chronicle of repo: run qknorm\n")
    assert "\n## 2026-11-30 · Monday\n" in text and "\n## 2026-12-01 · Tuesday\n" in text
    assert "![Loss curve to step 10,000](" in text and "entries/assets/qknorm/progress-010.png)" in text


def test_render_refuses_bad_dates_and_unknown_runs(logbook_repo, clock, cli):
    project = project_of(logbook_repo)
    qknorm_story(project, clock)
    res = cli("render", "--since", "yesterday")
    assert res.exit_code == 2 and "--since must look like 2026-12-01" in res.stderr
    res = cli("render", "--run", "nope")
    assert res.exit_code == 3 and "runs with events: qknorm" in res.stderr
    res = cli("render", "--check", "--format", "pdf")
    assert res.exit_code == 2


def test_unreadable_lines_are_reported_and_do_not_mislead_the_day_search(logbook_repo, clock):
    project = project_of(logbook_repo)
    s = sink(project, "qknorm", 1)
    for d in range(1, 21):
        clock.set(f"2026-12-{d:02d}T12:00:00")
        s.emit("hang", step=d, timeout_s=60, elapsed_s=61)
    log = project.run_dir("qknorm") / "events.jsonl"
    lines = log.read_bytes().splitlines(keepends=True)
    lines.insert(10, b"\xff\xfe not json at all\n")  # between the 10th and 11th day
    log.write_bytes(b"".join(lines))
    render_chronicle(project)
    full = {d: day_path(project, f"2026-12-{d:02d}").read_bytes() for d in range(1, 21)}
    assert b"1 line of `entries/runs/qknorm/events.jsonl` could not be read" in full[10]
    for d in (5, 10, 11, 20):
        day_path(project, f"2026-12-{d:02d}").unlink()
        render_chronicle(project, days=[f"2026-12-{d:02d}"])
        assert day_path(project, f"2026-12-{d:02d}").read_bytes() == full[d]
    check_chronicle(project)


def test_a_run_name_cannot_point_outside_the_logbook(logbook_repo, clock, cli):
    res = cli("render", "--run", "../../../etc")
    assert res.exit_code == 2 and "invalid run id" in res.stderr


@pytest.mark.parametrize("args, message", [
    (["--out", "no/such/folder/week.md"], "does not exist"),
    (["--format", "pdf", "--out", "missing/c.pdf"], "does not exist"),
    (["--since", "2026-12-02", "--until", "2026-12-01"], "--since 2026-12-02 is after --until 2026-12-01"),
])
def test_bad_render_arguments_are_usage_errors_that_write_nothing(logbook_repo, cli, args, message):
    res = cli("render", *args)
    assert res.exit_code == 2, res.output
    assert message in res.stderr and "Traceback" not in res.output
    assert not (logbook_repo / "no").exists() and not (logbook_repo / "missing").exists()


def test_a_report_into_a_folder_that_does_not_exist_is_a_usage_error(logbook_repo, cli):
    res = cli("report", "anything", "--out", "nowhere/r.md")
    assert res.exit_code == 2 and "does not exist" in res.stderr
    assert not (logbook_repo / "nowhere").exists()
