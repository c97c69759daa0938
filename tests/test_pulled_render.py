"""After a pull, the clone's hooks render only the days the pulled commits changed, and leave every day file as
a full render would: tested over pulls that append to a run on a later day, start a run, correct an old entry,
review one, add a run's record, grow its metrics, and change a template."""

from __future__ import annotations

import json

from chronicle_helpers import clock, project_of, sink  # noqa: F401  (clock is a fixture)
from team import make_team

from logbook.chronicle.build import render_chronicle
from logbook.eventlog.sink import MetricsWriter


def _share_records_only(c, message: str) -> str:
    """Commit what the writer recorded without its rendered day files, push, and forget them: the reader's
    day files then hold a day only if its own render wrote it."""
    c.git("add", *(f"entries/{d}" for d in ("runs", "notes", "reviews") if (c.entries() / d).is_dir()))
    c.git("commit", "-q", "-m", message)
    c.push()
    c.git("checkout", "-q", "--", "entries")
    c.git("clean", "-fdq", "--", "entries")
    return c.git("rev-parse", "HEAD").stdout.strip()


def _pull_and_compare(reader) -> dict:
    """Pull (the hook renders the pulled days); the day files must equal a full render's."""
    before = reader.git("rev-parse", "HEAD").stdout.strip()
    r = reader.pull("merge")
    assert r.returncode == 0, r.stderr
    out = json.loads(reader.cli("render", "--pulled", before, "--json").stdout)
    assert "days" in out, out
    days = out["days"]
    hooked = _day_files(reader)
    render_chronicle(project_of(reader.path))
    assert _day_files(reader) == hooked, "a day the pull changed was not rendered again"
    return {"days": days}


def _day_files(c) -> dict[str, bytes]:
    return {p.relative_to(c.entries()).as_posix(): p.read_bytes() for p in sorted(c.entries().glob("20*/*/*.md"))}


def _run(project, clock, run: str, day: str, steps: range, attempt: int = 1) -> None:
    s = sink(project, run, attempt)
    for k in steps:
        clock.set(f"{day}T{10 + k % 12:02d}:{k % 60:02d}:00")
        if k == steps.start and attempt == 1:
            s.emit("run_started", step=0, total_steps=1000, world_size=2, resumed_from_step=0)
        else:
            s.emit("checkpoint_saved", step=k * 10, path=f"ckpt/{k}", blocking_s=0.5, total_s=1.0, bytes=10)


def _two_clones(tmp_path):
    """ada writes records, bo pulls them; with ada's project."""
    team = make_team(tmp_path, ["ada", "bo"])
    return team["ada"], team["bo"], project_of(team["ada"].path)


def test_a_pull_renders_only_the_days_its_commits_changed_and_leaves_what_a_full_render_leaves(tmp_path, clock):
    ada, bo, pa = _two_clones(tmp_path)

    _run(pa, clock, "long", "2026-11-02", range(0, 3))
    _run(pa, clock, "short", "2026-11-03", range(0, 2))
    _share_records_only(ada, "two runs")
    first = _pull_and_compare(bo)
    assert first["days"] == ["2026-11-02", "2026-11-03"]

    _run(pa, clock, "long", "2026-11-09", range(3, 5))  # the long run goes on a week later
    clock.set("2026-11-09T23:00:00")
    sink(pa, "long", 2).emit("restart", step=40, cause="signal", signal=-9, prev_attempt=1, resumed_from_step=40,
                             failed_at_step=45, steps_lost=5, downtime_s=30.0)
    _share_records_only(ada, "the long run goes on")
    assert _pull_and_compare(bo)["days"] == ["2026-11-09"]

    clock.set("2026-11-10T09:00:00")
    ada.ok("note", "--about", "short:1", "that checkpoint was on the flaky disk")
    _share_records_only(ada, "an erratum to an old entry")
    assert _pull_and_compare(bo)["days"] == ["2026-11-03", "2026-11-10"]  # its day, and the day it corrects

    clock.set("2026-11-11T09:00:00")
    ada.ok("review", "comment", "long:5", "was it the disk again?")
    _share_records_only(ada, "a review of an old entry")
    assert _pull_and_compare(bo)["days"] == ["2026-11-02", "2026-11-09"]  # every day of the run it judges

    (pa.run_dir("late") / "events.jsonl").parent.mkdir(parents=True)
    _run(pa, clock, "late", "2026-11-12", range(0, 2))
    _run(pa, clock, "late", "2026-11-14", range(2, 3))
    _share_records_only(ada, "a run recorded by its callback alone")
    assert _pull_and_compare(bo)["days"] == ["2026-11-12", "2026-11-14"]
    record = {"run_id": "late", "created": "2026-11-15T00:00:00.000000Z", "prereg_id": None, "exploratory": True,
              "config_path": "train.py", "config_hash": "0" * 64, "status": "finished", "deviations": []}
    (pa.run_dir("late") / "run.json").write_text(json.dumps(record, indent=2) + "\n")
    _share_records_only(ada, "its run record")
    assert _pull_and_compare(bo)["days"] == ["2026-11-12", "2026-11-14"]  # labelled exploratory on every day


def test_metrics_rows_pulled_render_the_run_from_the_day_of_the_first_new_row(tmp_path, clock):
    ada, bo, pa = _two_clones(tmp_path)
    _run(pa, clock, "r", "2026-11-02", range(0, 3))
    _run(pa, clock, "r", "2026-11-05", range(3, 4))
    _run(pa, clock, "r", "2026-11-08", range(4, 5))
    _share_records_only(ada, "a run")
    _pull_and_compare(bo)
    w = MetricsWriter(pa.run_dir("r"))
    w.write({"step": 35, "loss": 2.5, "attempt": 1, "time": 1793_000_000.0})  # 2026-10-27: before its first day
    w.close()
    _share_records_only(ada, "rows written at their time")
    assert _pull_and_compare(bo)["days"] == ["2026-11-02", "2026-11-05", "2026-11-08"]
    w = MetricsWriter(pa.run_dir("r"))
    w.write({"step": 45, "loss": 2.4, "attempt": 1, "time": 1794_400_000.0})  # 2026-11-12, after its last day
    w.close()
    _share_records_only(ada, "one more row")
    assert _pull_and_compare(bo)["days"] == []
    w = MetricsWriter(pa.run_dir("r"))
    w.write({"step": 46, "loss": 2.4, "attempt": 1})  # placed by its step alone: any note may read it
    w.close()
    _share_records_only(ada, "a row without a time")
    assert _pull_and_compare(bo)["days"] == ["2026-11-02", "2026-11-05", "2026-11-08"]


def test_a_change_that_can_reach_every_day_renders_them_all(tmp_path, clock):
    ada, bo, pa = _two_clones(tmp_path)
    _run(pa, clock, "r", "2026-11-02", range(0, 2))
    _run(pa, clock, "s", "2026-11-04", range(0, 2))
    _share_records_only(ada, "two runs")
    _pull_and_compare(bo)
    (ada.path / "templates" / "chronicle").mkdir(parents=True)
    (ada.path / "templates" / "chronicle" / "README").write_text("our own templates go here\n")
    ada.git("add", "templates")
    _share_records_only(ada, "a templates folder")
    assert _pull_and_compare(bo)["days"] == ["2026-11-02", "2026-11-04"]


def test_pulled_takes_no_day_selection_of_its_own(tmp_path, clock):
    team = make_team(tmp_path, ["ada"])
    res = team["ada"].cli("render", "--pulled", "HEAD", "--since", "2026-11-01")
    assert res.exit_code == 2 and "--pulled chooses the days itself" in res.stderr
