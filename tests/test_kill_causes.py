"""A kill that left no record is said to have an unknown cause, unless the kernel's own count says otherwise."""

from __future__ import annotations

from chronicle_helpers import clock, project_of, sink  # noqa: F401  (clock is a fixture)

from logbook.chronicle.build import day_path, render_chronicle
from logbook.eventlog.kinds import Event, signal_evidence, summary
from logbook.runs.oom import oom_kill_count, oom_kills_between


def _cgroup(tmp_path, proc: str, files: dict[str, str]):
    (tmp_path / "proc").write_text(proc)
    for rel, text in files.items():
        p = tmp_path / "cg" / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return tmp_path / "proc", tmp_path / "cg"


def test_the_oom_kill_count_is_read_from_the_processs_memory_cgroup_v2_and_v1(tmp_path):
    proc, root = _cgroup(tmp_path, "0::/job/42\n", {"job/42/memory.events": "low 0\nhigh 0\nmax 3\noom 2\noom_kill 2\n"})
    assert oom_kill_count(proc, root) == 2
    v1 = tmp_path / "v1"
    v1.mkdir()
    proc, root = _cgroup(v1, "4:memory:/slurm/job_7\n3:cpu:/\n0::/\n",
                         {"memory/slurm/job_7/memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 5\n"})
    assert oom_kill_count(proc, root) == 5
    none = tmp_path / "none"
    none.mkdir()
    proc, root = _cgroup(none, "0::/\n", {})
    assert oom_kill_count(proc, root) is None  # no count kept: nothing is claimed either way
    assert (oom_kills_between(2, 3), oom_kills_between(None, 3), oom_kills_between(5, 1)) == (1, None, None)


def test_a_sigkill_without_evidence_is_cause_unknown_and_with_the_kernels_count_it_is_named(logbook_repo, clock):
    project = project_of(logbook_repo)
    clock.set("2026-12-02T00:00:00")
    sink(project, "r", 1).emit("run_started", step=0, tokens=0, total_steps=100, world_size=1, oom_kills=4)
    clock.set("2026-12-02T01:00:00")
    by_hand = sink(project, "r", 2).emit("restart", step=10, cause="signal", signal=-9, prev_attempt=1,
                                         resumed_from_step=10, oom_kills=0)
    clock.set("2026-12-02T02:00:00")
    oom = sink(project, "r", 3).emit("restart", step=10, cause="signal", signal=-9, prev_attempt=2,
                                     resumed_from_step=10, oom_kills=1)
    render_chronicle(project)
    text = day_path(project, "2026-12-02").read_text()
    assert "Attempt 1 was killed by signal 9 (SIGKILL) with no error record " \
           "(cause unknown: the OOM killer, a scheduler or a person)." in text
    assert "Attempt 2 was killed by signal 9 (SIGKILL) with no error record " \
           "(the kernel's OOM killer: 1 OOM kill in the run's memory cgroup while the attempt ran)." in text
    assert "likely" not in text
    # The review queue's and the report's one line say the same.
    assert summary(by_hand).startswith("attempt 1 → 2: killed by signal 9 (SIGKILL) (cause unknown: the OOM killer")
    assert "(the kernel's OOM killer: 1 OOM kill" in summary(oom)
    # An exception or a SIGTERM is not such a kill.
    assert signal_evidence({"cause": "signal", "signal": 15}) == ""
    assert signal_evidence({"cause": "exception", "exception_type": "OSError"}) == ""
    assert Event.of(by_hand).data["oom_kills"] == 0


def test_a_restart_records_the_oom_kills_since_the_ended_attempt_began_only_where_it_has_a_count():
    from logbook.runs.attempt_ends import RunHistory, classify_restart

    now = oom_kill_count()

    def started(**data):
        return [{"kind": "run_started", "attempt": 1, "step": 0, "ts": "2026-11-30T00:00:00.000000Z", "data": data}]

    without = classify_restart(RunHistory(events=started()), 1, 0, 1.8e9, {})
    assert without["cause"] == "signal" and "oom_kills" not in without  # no count at the start: nothing claimed
    if now is not None:  # on a machine with a memory cgroup: none since the start is a count of 0, and it says so
        counted = classify_restart(RunHistory(events=started(oom_kills=now)), 1, 0, 1.8e9, {})
        assert counted["oom_kills"] == 0 and signal_evidence(counted).startswith("cause unknown")

