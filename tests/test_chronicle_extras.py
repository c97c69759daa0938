"""What an entry shows from other records: its reviews, a restart's failure statistics, the run's label."""

from __future__ import annotations

import pytest
from chronicle_helpers import clock, project_of, qknorm_story, sink  # noqa: F401  (clock is a fixture)

from logbook.chronicle.build import check_chronicle, day_path, render_chronicle
from logbook.runs.goodput import goodput_report
from logbook.runs.lineage import run_lineage
from logbook.runs.run_record import RunRecord, write_run_record


def _run_with_failures(project, clock, run: str = "flaky") -> None:
    """Saves of 2 s every 10 min, then two real failures (one drill between them, not counted)."""
    s = sink(project, run, 1)
    clock.set("2026-12-02T00:00:00")
    s.emit("run_started", step=0, tokens=0, total_steps=1000, world_size=1)
    for k in range(1, 7):
        clock.set(f"2026-12-02T{k // 6:02d}:{(k * 10) % 60:02d}:00")
        s.emit("checkpoint_saved", step=k * 10, path=f"ckpt/{k}", blocking_s=2.0)
    clock.set("2026-12-02T02:00:00")
    sink(project, run, 2).emit("restart", step=60, cause="signal", signal=-9, prev_attempt=1, resumed_from_step=60)
    clock.set("2026-12-02T03:00:00")
    sink(project, run, 3).emit("restart", step=60, drill=True, cause="signal", signal=-9, prev_attempt=2,
                               resumed_from_step=60)
    clock.set("2026-12-02T04:00:00")
    sink(project, run, 4).emit("restart", step=60, cause="exception", exception_type="OSError", prev_attempt=3,
                               resumed_from_step=60)
    clock.set("2026-12-02T06:00:00")
    sink(project, run, 5).emit("restart", step=60, cause="hang", prev_attempt=4, resumed_from_step=60)


def test_a_restart_entry_carries_the_failures_so_far_and_the_advised_interval(logbook_repo, clock):
    project = project_of(logbook_repo)
    _run_with_failures(project, clock)
    render_chronicle(project)
    text = day_path(project, "2026-12-02").read_text()
    # One failure is no MTBF: an interval advised from it (0.38 s once, from a single `kill -9`) is noise.
    assert ("Failures so far: 1; no checkpoint advice yet. An MTBF from this run needs at least 3 failures, and it "
            "has seen 1: the advised interval would be uncertain by about ±50%. To advise anyway, give one: logbook ckpt-interval --mtbf 3.1h.") in text
    assert "Failures so far: 2; no checkpoint advice yet. An MTBF from this run needs at least 3 failures, and it " \
           "has seen 2: the advised interval would be uncertain by about ±35%." in text  # the drill is not a failure
    assert ("Failures so far: 3 in 6 h 00 min (MTBF 2 h 00 min). At the measured 2 s blocking save, "
            "the advised interval is 2 min 50 s (current: 10 min 00 s).") in text
    assert text.count("Failures so far") == 3  # and the drill's own entry states none
    # The same sentences when only that day is rendered: the statistics do not depend on the selection.
    render_chronicle(project, days=["2026-12-02"])
    check_chronicle(project)


def test_a_review_shows_under_its_entry_and_the_day_is_rendered_again(logbook_repo, clock, cli):
    project = project_of(logbook_repo)
    qknorm_story(project, clock)
    render_chronicle(project)
    res = cli("review", "approve", "qknorm:14", "--comment", "cause understood")
    assert res.exit_code == 0, res.output
    text = day_path(project, "2026-12-01").read_text()
    entry = text[text.index('<a id="run-qknorm-14">'):]
    entry = entry[:entry.index("\n### ")]
    assert "**Reviews:**" in entry and "Ada Tester approved" in entry and "cause understood" in entry
    assert "**Reviews:**" not in text[:text.index('<a id="run-qknorm-14">')]
    check_chronicle(project)
    assert render_chronicle(project).written == []  # byte for byte the same on a second render


def test_entries_of_an_exploratory_run_say_so_in_their_heading(logbook_repo, clock):
    project = project_of(logbook_repo)
    write_run_record(project, RunRecord(run_id="probe", created="2026-12-02T00:00:00Z", config_path="c.yaml",
                                        config_hash="c" * 64, prereg_id=None, exploratory=True))
    _run_with_failures(project, clock, run="probe")
    _run_with_failures(project, clock, run="plain")
    render_chronicle(project)
    text = day_path(project, "2026-12-02").read_text()
    assert "· run probe (exploratory) · attempt 1" in text
    assert "run plain (exploratory)" not in text and "· run plain · attempt 1" in text


@pytest.fixture
def scored_run(logbook_repo, clock):
    project = project_of(logbook_repo)
    s = sink(project, "done", 1)
    clock.set("2026-12-02T00:00:00")
    s.emit("run_started", step=0, tokens=0, total_steps=10, world_size=1, started_at=None)
    clock.set("2026-12-02T01:00:00")
    s.emit("run_finished", step=10, final_loss=3.0, val_loss=3.1, wall_s=3600.0)
    clock.set("2026-12-09T00:00:00")  # scored a week later
    s.emit("outcome", step=10, run_state="finished")
    return project


def test_an_outcome_recorded_later_changes_neither_the_lineage_nor_the_goodput(scored_run):
    from logbook.eventlog.chain import iter_records

    path = scored_run.run_dir("done") / "events.jsonl"
    attempts = run_lineage(path)
    assert len(attempts) == 1 and attempts[0].ended.startswith("2026-12-02T01:00")
    events = list(iter_records(path))
    assert goodput_report(events).wall_s == goodput_report(events[:-1]).wall_s


def test_the_lineage_marks_an_ending_as_a_drill_only_when_a_drill_caused_it(logbook_repo, clock):
    """A drill kill ends attempt 1 (drill); attempt 2 survives spike drills and finishes: no drill label."""
    project = project_of(logbook_repo)
    s1 = sink(project, "drilled", 1)
    clock.set("2026-12-03T00:00:00")
    s1.emit("run_started", step=0, tokens=0, total_steps=100)
    s1.emit("fault_injected", step=30, drill=True, fault="sigkill", at_step=30)
    s2 = sink(project, "drilled", 2)
    clock.set("2026-12-03T00:01:00")
    s2.emit("restart", step=20, drill=True, cause="signal", prev_attempt=1, resumed_from_step=20, failed_at_step=30)
    s2.emit("fault_injected", step=60, drill=True, fault="spike", at_step=60)
    s2.emit("run_finished", step=100, final_loss=2.5)
    a1, a2 = run_lineage(project.run_dir("drilled") / "events.jsonl")
    assert a1.how.endswith("(drill)")
    assert a2.how == "finished the run"


def test_values_and_durations_read_as_a_person_would_write_them(logbook_repo, clock):
    project = project_of(logbook_repo)
    s = sink(project, "tidy", 1)
    clock.set("2026-11-30T20:00:00")
    s.emit("run_started", step=0, tokens=0, config_path="configs/tiny.yaml", world_size=1)
    s.emit("lr_scaled", step=40, old=0.8, new=0.8 * 0.9, factor=0.9, reason="spike")
    s.emit("hparam_change", step=41, key="optim.lr", old=3e-4, new=0.1 + 0.2, who="Ada Tester", reason="test",
           source="live")
    s.emit("milestone", step=60, tokens=960, fraction=1.0, total_steps=60, elapsed_s=12.0, eta_s=0.0002, loss=2.5)
    render_chronicle(project)
    text = day_path(project, "2026-11-30").read_text()
    assert "0.8 → 0.72 (× 0.9)" in text and "0.7200000000000001" not in text
    assert "0.0003 → 0.3" in text and "0.30000000000000004" not in text
    assert "to go" not in text and "<1 ms" not in text
