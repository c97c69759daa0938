"""`logbook migrate`: a logbook in the shared-log layout becomes one file per record, losing nothing."""

from __future__ import annotations

import json

from conftest import git
from scoring_helpers import make_prereg, project_of, story_clock, story_run  # noqa: F401  (story_clock is a fixture)

from logbook.core.fsutil import atomic_write_json
from logbook.eventlog.chain import ChainedLog
from logbook.eventlog.files import iter_folder
from logbook.eventlog.sink import EventSink


def _old_layout(repo, clock):
    """What the shared-log layout wrote: notes.jsonl, reviews.jsonl, an outcome event and outcome.json."""
    project = project_of(repo)
    pid = make_prereg(project, ["loss@final < 4"])
    run_dir = story_run(project, clock, "story", pid)
    notes = ChainedLog(project.notes_log)
    notes.append({"kind": "note", "author": "Ada Tester", "email": "ada@example.org", "text": "first\n",
                  "run": None, "step": None})
    notes.append({"kind": "note", "author": "Bo", "email": "bo@example.org", "text": "about the first\n",
                  "run": None, "step": None, "about": "note:0", "about_ts": "2026-11-30T08:00:00Z", "about_kind": "note"})
    notes.append({"kind": "note", "author": "Bo", "email": "bo@example.org", "text": "about the spike\n",
                  "run": "story", "step": 30, "about": "story:2", "about_ts": "2026-11-30T08:00:31Z",
                  "about_kind": "divergence_detected"})
    ChainedLog(project.reviews_log).append({"kind": "review", "entry": "story:6", "action": "approve", "text": "",
                                            "reviewer": "Bo", "email": "bo@example.org", "run": "story",
                                            "entry_kind": "restart", "entry_ts": "2026-11-30T08:01:05Z"})
    ev = EventSink(run_dir, "story", 2).emit("outcome", step=100, counts={"confirmed": 1}, prereg_id=pid)
    atomic_write_json(run_dir / "outcome.json", {"run": "story", "prereg_id": pid, "final": True, "last_step": 100,
                                                 "computed_at": ev["ts"], "event": f"story:{ev['seq']}",
                                                 "predictions": [], "counts": {"confirmed": 1}})
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "a logbook in the old layout")
    return project


def test_migrate_copies_every_record_keeps_the_old_files_and_verify_passes(logbook_repo, story_clock, cli):
    project = _old_layout(logbook_repo, story_clock)
    old = {p: p.read_bytes() for p in (project.notes_log, project.reviews_log,
                                       project.run_dir("story") / "outcome.json")}
    res = cli("migrate", "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert (out["notes"], out["reviews"], out["outcomes"]) == (3, 1, 1)
    assert all(p.read_bytes() == b for p, b in old.items())  # nothing deleted or edited
    notes = list(iter_folder(project.notes_dir))
    assert [n["legacy"] for n in notes] == ["note:0", "note:1", "note:2"]
    assert [n["text"] for n in notes] == ["first\n", "about the first\n", "about the spike\n"]
    assert notes[1]["about"] == f"note:{notes[0]['id']}" and notes[2]["about"] == "story:2"
    (review,) = iter_folder(project.reviews_dir)
    assert (review["entry"], review["reviewer"], review["legacy"]) == ("story:6", "Bo", "review:0")
    (card,) = iter_folder(project.run_dir("story") / "outcomes")
    assert card["scorecard"]["prereg_id"] and card["migrated_from"] == card["legacy"]
    assert cli("render").exit_code == 0
    assert cli("commit").exit_code == 0
    assert cli("verify").exit_code == 0 and cli("render", "--check").exit_code == 0
    text = (project.entries / "2026" / "11" / "30.md").read_text()
    assert text.count("scored against") == 1  # the old outcome event shows once, not twice
    again = json.loads(cli("migrate", "--json").stdout)
    assert (again["notes"], again["reviews"], again["outcomes"], again["skipped"]) == (0, 0, 0, 5)


def test_a_logbook_in_the_old_layout_says_to_migrate_until_it_is(logbook_repo, story_clock, cli):
    _old_layout(logbook_repo, story_clock)
    before = cli("note", "a new note")
    assert before.exit_code == 0 and "run `logbook migrate` once" in before.stderr
    assert cli("migrate").exit_code == 0
    assert "logbook migrate" not in cli("note", "another").stderr
