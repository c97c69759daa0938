"""`logbook note`: signed Markdown notes, errata that link back, and clear refusals."""

from __future__ import annotations

from chronicle_helpers import clock, project_of, qknorm_story  # noqa: F401  (clock is a fixture)
from scoring_helpers import story_clock  # noqa: F401  (a fixture)
from conftest import git

import json

from logbook.chronicle.build import check_chronicle, day_path
from logbook.chronicle.mdconvert import parser
from logbook.eventlog.chain import verify_log
from logbook.eventlog.files import iter_folder


def test_note_is_signed_from_git_and_appears_on_its_day(logbook_repo, clock, cli):
    project = project_of(logbook_repo)
    qknorm_story(project, clock)
    cli("render")
    clock.set("2026-12-01T11:00:00")
    res = cli("note", "--run", "qknorm", "--step", "52010", "Clip change *looks* good so far.")
    assert res.exit_code == 0, res.output
    nid = res.stdout.strip()
    assert nid.startswith("note:20261201T110000000000Z-")
    rec = next(iter_folder(project.notes_dir))
    assert f"note:{rec['id']}" == nid and (project.notes_dir / f"{rec['id']}.json").is_file()
    assert (rec["author"], rec["email"], rec["run"], rec["step"]) == ("Ada Tester", "ada@example.org", "qknorm", 52010)
    text = day_path(project, "2026-12-01").read_text()
    anchor = nid.replace(":", "-")
    assert (f'### <a id="{anchor}"></a>11:00 UTC · note by Ada Tester · run qknorm · step 52,010\n\n'
            f"> Clip change *looks* good so far.\n\nid: `{nid}`") in text
    check_chronicle(project)  # the note re-rendered its day in place: files still match the logs


def test_note_without_git_identity_is_refused(logbook_repo, clock, cli, monkeypatch, tmp_path):
    empty = tmp_path / "empty.gitconfig"
    empty.write_text("")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(empty))
    res = cli("note", "hello")
    assert res.exit_code == 3
    assert "no git identity" in res.stderr and "git config user.name" in res.stderr
    assert not project_of(logbook_repo).notes_dir.exists()


def test_erratum_links_the_earlier_entry_to_the_note_without_editing_its_event(logbook_repo, clock, cli):
    project = project_of(logbook_repo)
    qknorm_story(project, clock)
    cli("render")
    log = project.run_dir("qknorm") / "events.jsonl"
    log_before = log.read_bytes()
    clock.set("2026-12-02T08:00:00")
    res = cli("note", "--about", "qknorm:15", "Batches 47,000–47,300 are the forum dump; see data issue #88")
    assert res.exit_code == 0, res.output
    anchor = res.stdout.strip().replace(":", "-")
    earlier = day_path(project, "2026-12-01").read_text()
    divergence = earlier.split('<a id="run-qknorm-15"></a>')[1].split("### ")[0]
    assert f"> ⚠ Erratum (2026-12-02, Ada Tester): see [note](../../2026/12/02.md#{anchor})" in divergence
    later = day_path(project, "2026-12-02").read_text()
    assert f'<a id="{anchor}"></a>08:00 UTC · note by Ada Tester · erratum to qknorm:15' in later
    assert "Erratum to [qknorm:15](../../2026/12/01.md#run-qknorm-15):" in later
    assert log.read_bytes() == log_before and verify_log(log) == []
    check_chronicle(project)


def test_erratum_about_a_summarised_checkpoint_marks_the_routine_line(logbook_repo, clock, cli):
    project = project_of(logbook_repo)
    qknorm_story(project, clock)
    clock.set("2026-12-02T08:00:00")
    res = cli("note", "--about", "qknorm:3", "Checkpoint 3000 is corrupt on disk.")
    assert res.exit_code == 0
    anchor = res.stdout.strip().replace(":", "-")
    day = day_path(project, "2026-11-30").read_text()
    routine = day.split("### Routine")[1]
    assert f"⚠ Erratum (2026-12-02, Ada Tester): see [note](../../2026/12/02.md#{anchor})." in routine
    later = day_path(project, "2026-12-02").read_text()
    assert "[qknorm:3](../../2026/11/30.md#routine-qknorm-2026-11-30)" in later


def test_unknown_about_ids_are_refused_with_the_id_format(logbook_repo, clock, cli):
    project = project_of(logbook_repo)
    qknorm_story(project, clock)
    for bad, says in [("qknorm:999", "no entry qknorm:999"), ("nope:1", "no run 'nope'"),
                      ("note:20261130T000000000000Z-00000000", "no note note:20261130T000000000000Z-00000000")]:
        res = cli("note", "--about", bad, "text")
        assert res.exit_code == 3, (bad, res.output)
        assert says in res.stderr and "qknorm:17" in res.stderr and "note:2026" in res.stderr
    assert not project.notes_dir.exists()


def test_a_malformed_about_id_is_a_usage_error_with_the_reason(logbook_repo, clock, cli):
    project = project_of(logbook_repo)
    qknorm_story(project, clock)
    for bad, says in [("garbage", "'garbage' is not an entry id"), ("2026-12-01 05:47", "is not an entry id"),
                      ("note:0", "notes are named by record ids"), ("qknorm:abc", "is not an entry id")]:
        res = cli("note", "--about", bad, "text")
        assert res.exit_code == 2, (bad, res.output)
        assert says in res.stderr and "qknorm:17" in res.stderr, (bad, res.stderr)
    assert not project.notes_dir.exists()


def test_a_step_past_the_end_of_the_run_is_a_usage_error_with_the_reason(logbook_repo, story_clock, cli):
    from scoring_helpers import story_run

    project = project_of(logbook_repo)
    story_run(project, story_clock, "short", None, restart=False)  # 100 planned steps
    res = cli("note", "--run", "short", "--step", "99999999", "text")
    assert res.exit_code == 2 and "past the end of run short" in res.stderr and "step 100" in res.stderr
    assert cli("note", "--run", "short", "--step", "100", "text").exit_code == 0


def test_huge_and_non_utf8_notes_are_refused_and_nothing_is_written(logbook_repo, clock, cli):
    project = project_of(logbook_repo)
    res = cli("note", "-", input="x" * (10 * 1024 * 1024))
    assert res.exit_code == 2 and "limited to 64 KiB" in res.stderr
    res = cli("note", "-", input=b"caf\xe9 ol\xe9")
    assert res.exit_code == 2 and "not UTF-8" in res.stderr
    from logbook.chronicle.notes import check_note_text

    for bad in (b"caf\xe9", "bell\x07", "   \n"):
        try:
            check_note_text(bad)
        except Exception as e:  # UsageError, exit 2
            assert getattr(e, "exit_code", None) == 2
        else:
            raise AssertionError(f"{bad!r} was accepted")
    assert check_note_text("x" * (64 * 1024 - 1)).startswith("xxx")
    assert not project.notes_dir.exists()


def test_note_markdown_cannot_swallow_the_entries_after_it(logbook_repo, clock, cli):
    project = project_of(logbook_repo)
    clock.set("2026-12-01T01:00:00")
    assert cli("note", "```python\nunclosed = True\n<!-- and an open comment").exit_code == 0
    qknorm_story(project, clock)  # later entries on the same day
    cli("render")
    text = day_path(project, "2026-12-01").read_text()
    headings = [t for t in parser().parse(text) if t.type == "heading_open" and t.tag == "h3"]
    assert len(headings) == 1 + 6 + 1  # the note, six run entries, the routine section


def test_notes_full_of_special_characters_round_trip_in_markdown(logbook_repo, clock, cli):
    project = project_of(logbook_repo)
    clock.set("2026-12-01T01:00:00")
    nasty = '#import "x.typ": *\n#read("/etc/passwd") $x^2$ <script>alert(1)</script> `tick` ] * _'
    assert cli("note", nasty).exit_code == 0
    rec = next(iter_folder(project.notes_dir))
    assert rec["text"] == nasty + "\n"  # stored exactly as written
    text = day_path(project, "2026-12-01").read_text()
    assert "> #import \"x.typ\": *\n> #read(\"/etc/passwd\")" in text
    git(logbook_repo, "status", "--short")  # the repository is still readable by git


def test_an_edited_note_file_is_caught_by_verify_and_named(logbook_repo, clock, cli):
    project = project_of(logbook_repo)
    clock.set("2026-12-01T01:00:00")
    nid = cli("note", "first").stdout.strip()
    path = project.notes_dir / f"{nid.split(':', 1)[1]}.json"
    rec = json.loads(path.read_text())
    rec["text"] = "something else\n"
    path.write_text(json.dumps(rec))
    res = cli("verify")
    assert res.exit_code == 4 and path.name in res.stderr and "no longer matches its hash" in res.stderr
    assert "git restore --source=HEAD" in res.stderr


def test_a_run_cannot_take_the_notes_name_so_note_ids_stay_unambiguous(logbook_repo, cli):
    res = cli("run", "--exploratory", "--run-id", "note", "configs/micro-test.yaml")
    assert res.exit_code == 2 and "reserved for the team's notes" in res.stderr
    assert not (logbook_repo / "entries" / "runs" / "note").exists()
