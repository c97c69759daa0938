"""`logbook ls` and `logbook show`: tables for people, JSON for scripts, data on stdout."""

from __future__ import annotations

import json

import pytest

from logbook.cli import app
from logbook.core.project import open_project
from logbook.eventlog.sink import EventSink
from logbook.runs.run_record import RunRecord, write_run_record


def _prereg(cli, title: str, *extra: str) -> str:
    res = cli("prereg", "--title", title, "--hypothesis", "it helps", "--predict", "spikes@final == 0",
              "--predict", "val_loss@final < 2.31", *extra, "--json")
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)["id"]


def _run(run_id: str, prereg_id: str | None) -> None:
    proj = open_project()
    write_run_record(proj, RunRecord(run_id=run_id, created="2026-11-30T01:00:00Z", config_path="configs/tiny.yaml",
                                     config_hash="c" * 64, prereg_id=prereg_id, author="Ada Tester <ada@example.org>"))
    sink = EventSink(proj.run_dir(run_id), run_id, attempt=0)
    sink.emit("run_started", step=0, world_size=1)
    sink.emit("restart", step=120, cause="signal", signal=9, steps_lost=20)
    sink.emit("run_finished", step=500, final_loss=2.1)


def test_ls_on_an_empty_logbook(logbook_repo, cli):
    res = cli("ls")
    assert res.exit_code == 0 and res.stdout == "" and "No preregistrations yet" in res.stderr
    res = cli("ls", "--json")
    assert res.exit_code == 0 and json.loads(res.stdout) == []


def test_ls_json_lists_every_field(logbook_repo, cli):
    a = _prereg(cli, "qk-norm removes spikes")
    b = _prereg(cli, "longer warmup")
    assert cli("prereg", "amend", a, "--reason", "add one", "--seen", "nothing",
               "--predict", "restarts@final <= 2").exit_code == 0
    assert cli("prereg", "amend", a, "--reason", "saw curves", "--seen", "results",
               "--predict", "loss@final < 9").exit_code == 0
    _run("qk-1", a)
    _run("qk-2", a)
    res = cli("ls", "--json")
    assert res.exit_code == 0 and res.stderr == ""
    rows = {r["id"]: r for r in json.loads(res.stdout)}
    assert rows[a] == {"id": a, "created": rows[a]["created"], "author": "Ada Tester <ada@example.org>",
                       "title": "qk-norm removes spikes", "predictions": 4, "amendments": 2, "deviations": 1,
                       "runs": ["qk-1", "qk-2"]}
    assert rows[b]["runs"] == [] and rows[b]["amendments"] == 0


def test_ls_for_people_fits_a_narrow_terminal(logbook_repo, cli):
    a = _prereg(cli, "qk-norm removes spikes")
    _run("qk-1", a)
    res = cli("ls")
    assert res.exit_code == 0
    assert res.stdout.splitlines() == [
        f"{a}  qk-norm removes spikes",
        f"    {a[:10]} · Ada Tester · 2 predictions · 0 amendments · runs: qk-1",
    ]


def test_ls_for_people_is_a_table_on_a_wide_terminal(logbook_repo, cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "160")
    a = _prereg(cli, "qk-norm removes spikes")
    res = cli("ls")
    header, row = res.stdout.splitlines()
    assert header.split() == ["id", "date", "author", "title", "#pred", "amendments", "runs"]
    assert row.split() == [a, a[:10], "Ada", "Tester", "qk-norm", "removes", "spikes", "2", "0", "amendments", "-"]


def test_ls_warns_about_a_damaged_record_and_lists_the_rest(logbook_repo, cli):
    a = _prereg(cli, "good one")
    b = _prereg(cli, "damaged one")
    (logbook_repo / "entries" / "prereg" / f"{b}.md").write_text("no front matter\n")
    res = cli("ls", "--json")
    assert [r["id"] for r in json.loads(res.stdout)] == [a]
    assert "does not start with a `---` front-matter line" in res.stderr


def test_show_prints_the_whole_preregistration(logbook_repo, cli):
    a = _prereg(cli, "qk-norm removes spikes", "--contingency",
                "spike > 4σ twice within 500 steps -> rollback 100 steps, skip 300 batches, lr × 0.9")
    assert cli("prereg", "amend", a, "--reason", "tighter", "--seen", "nothing",
               "--predict", "restarts@final <= 2").exit_code == 0
    res = cli("show", a)
    assert res.exit_code == 0, res.output
    out = res.stdout
    assert out.startswith("# qk-norm removes spikes\n")
    for part in ("## Hypothesis\n\nit helps", "1. `spikes@final == 0`", "## Contingency plan",
                 "understood as: `loss spike > 4σ 2 times within 500 steps -> rollback 100 steps, skip 300 batches, lr × 0.9`",
                 "# Amendment to qk-norm removes spikes", "**Seen when amended:** nothing run yet",
                 "1. `restarts@final <= 2`"):
        assert part in out
    assert out.rstrip().endswith("runs: none · intact")


def test_show_json_has_front_matter_amendments_runs_and_verification(logbook_repo, cli):
    a = _prereg(cli, "qk-norm removes spikes")
    assert cli("prereg", "amend", a, "--reason", "r", "--seen", "nothing",
               "--predict", "restarts@final <= 2").exit_code == 0
    _run("qk-1", a)
    res = cli("show", a, "--json")
    d = json.loads(res.stdout)
    assert d["id"] == a and d["title"] == "qk-norm removes spikes" and d["runs"] == ["qk-1"]
    assert [p["text"] for p in d["predictions"]] == ["spikes@final == 0", "val_loss@final < 2.31"]
    assert d["amendments"][0]["n"] == 1 and d["amendments"][0]["kind"] == "amendment"
    assert d["verified"] is True and d["problems"] == [] and len(d["sha256"]) == 64


def test_show_says_when_the_record_changed(logbook_repo, cli):
    a = _prereg(cli, "qk-norm removes spikes")
    path = logbook_repo / "entries" / "prereg" / f"{a}.md"
    path.write_text(path.read_text().replace("it helps", "it helps a lot"))
    res = cli("show", a)
    assert res.exit_code == 0 and "CHANGED: " in res.stdout.splitlines()[-1]
    assert json.loads(cli("show", a, "--json").stdout)["verified"] is False


def test_show_accepts_a_unique_prefix_and_refuses_an_ambiguous_one(logbook_repo, cli):
    a = _prereg(cli, "qk-norm removes spikes")
    _prereg(cli, "qk-norm removes more spikes")
    assert json.loads(cli("show", a[:-2], "--json").stdout)["id"] == a
    res = cli("show", a[:10])
    assert res.exit_code == 2 and "matches 2 preregistrations" in res.stderr


@pytest.mark.parametrize("ident, code", [("2026-01-01-none-abcd", 3), ("../../etc/passwd", 3), ("nope", 3)])
def test_show_unknown(logbook_repo, cli, ident, code):
    res = cli("show", ident)
    assert res.exit_code == code and "no preregistration or run called" in res.stderr


def test_show_run_prints_the_record_and_its_events(logbook_repo, cli):
    a = _prereg(cli, "qk-norm removes spikes")
    _run("qk-1", a)
    res = cli("show", "qk-1")
    assert res.exit_code == 0, res.output
    assert "qk-1" in res.stdout and a in res.stdout
    for kind in ("run_started", "restart", "run_finished"):
        assert kind in res.stdout
    assert "steps_lost=20" in res.stdout
    d = json.loads(cli("show", "qk-1", "--json").stdout)
    assert d["run"]["run_id"] == "qk-1" and d["run"]["prereg_id"] == a
    assert [e["kind"] for e in d["events"]] == ["run_started", "restart", "run_finished"]


def test_damaged_prereg_shows_as_tampered(logbook_repo, cli):
    a = _prereg(cli, "qk-norm removes spikes")
    (logbook_repo / "entries" / "prereg" / f"{a}.md").write_text("---\ntitle: [broken\n---\nbody\n")
    res = cli("show", a)
    assert res.exit_code == 4 and "front matter no longer parses" in res.stderr


@pytest.mark.parametrize("command", [["prereg"], ["prereg", "amend"], ["verify"], ["ls"], ["show"]])
def test_every_command_has_help_ending_with_an_example(cli, command):
    res = cli(*command, "--help")
    assert res.exit_code == 0
    assert "Example: logbook " in res.stdout


def test_commands_are_registered_on_the_app():
    names = {c.name for c in app.registered_commands} | {g.name for g in app.registered_groups}
    assert {"prereg", "verify", "ls", "show"} <= names


@pytest.mark.parametrize("args", [["ls"], ["ls", "--json"], ["--help"]])
def test_output_into_a_closed_pipe_ends_quietly_with_success(logbook_repo, cli, args):
    import os
    import subprocess
    import sys

    from conftest import ROOT

    assert cli("prereg", "--title", "Pipes", "--hypothesis", "h", "--predict", "val_loss@final < 3").exit_code == 0
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader (`head -1`) has already left: the first write fails
    try:
        proc = subprocess.run([sys.executable, "-m", "logbook", *args], stdout=write_end, stderr=subprocess.PIPE,
                              cwd=logbook_repo, env={**os.environ, "PYTHONPATH": str(ROOT)}, text=True, timeout=60)
    finally:
        os.close(write_end)
    assert proc.returncode == 0 and proc.stderr == ""
