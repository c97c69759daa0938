"""Progress notes written by the real trainer: one per configured fraction, across a SIGKILL, rendered with a plot.

The trainer emits what the loop knows; goodput, what happened since the last
note, the predictions' standing and the plot are the logbook's, worked out
outside the training process (logbook/scoring/progress.py, the chronicle).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

from logbook.chronicle.build import render_chronicle
from logbook.core.project import open_project
from logbook.promises.predictions import parse_prediction
from logbook.eventlog.sink import read_metrics
from logbook.runs.facts import RunFacts, load_facts
from logbook.scoring.progress import SCORE_KEYS, note_scores, since_last, standing
from runhelpers import events, micro_config, of_kind

MICRO = ROOT / "configs" / "micro-test.yaml"
FRACTIONS = [0.1, 0.25, 0.5, 0.75, 1.0]


def _train(repo: Path, run: str, *overrides: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CI": "true"}
    env.pop("TORCHELASTIC_ERROR_FILE", None)
    return subprocess.run([sys.executable, "-m", "trainer", "--project", str(repo), "--run", run, str(MICRO),
                           "train.eval_every=0", *overrides],
                          cwd=repo, env=env, capture_output=True, text=True, timeout=300)


def _notes(repo: Path, run: str) -> list[dict]:
    return of_kind(events(repo, run), "milestone")


@pytest.mark.slow
def test_a_real_run_writes_one_progress_note_per_configured_fraction(logbook_repo):
    res = _train(logbook_repo, "plain")
    assert res.returncode == 0, res.stderr
    notes = _notes(logbook_repo, "plain")
    assert [n["data"]["fraction"] for n in notes] == FRACTIONS
    assert [n["step"] for n in notes] == [3, 8, 15, 23, 30]
    facts = load_facts(open_project(logbook_repo), "plain")
    for n in notes:
        d = n["data"]
        assert d["total_steps"] == 30 and d["loss"] > 0 and d["tokens_per_s"] > 0 and d["elapsed_s"] > 0
        assert not set(SCORE_KEYS) & set(d) and "plot" not in d  # scoring and plots are not the trainer's
        scores = note_scores(facts, n)
        assert 0 < scores["goodput"] <= 1
        assert scores["since_last"] == {"restarts": 0, "rollbacks": 0, "changes": 0, "skips": 0}
    assert notes[-1]["data"]["eta_s"] == 0
    written = render_chronicle(open_project(logbook_repo)).written  # what `logbook run`'s watcher does
    text = "\n".join(p.read_text() for p in written)
    assert text.count("Goodput so far ") == 5 and "no restarts, rollbacks, changes or skipped updates" in text
    for name in ("010", "025", "050", "075", "100"):
        plot = logbook_repo / "entries" / "assets" / "plain" / f"progress-{name}.png"
        assert plot.read_bytes().startswith(b"\x89PNG")
    started = of_kind(events(logbook_repo, "plain"), "run_started")[0]["data"]
    assert started["restore_s"] >= 0 and started["started_at"] > 0  # goodput's start-up and restore split
    rows = read_metrics(logbook_repo / "entries" / "runs" / "plain")
    logged = [r for r in rows if "loss" in r]
    assert logged and all("window_steps" in r and "step_s" in r for r in logged)  # telemetry joins the loop's row
    assert not [r for r in rows if "window_steps" in r and "loss" not in r]  # and writes no row of its own


@pytest.mark.slow
def test_a_sigkill_between_notes_neither_loses_nor_repeats_one_and_the_chronicle_shows_them(logbook_repo):
    first = _train(logbook_repo, "killed", "faults=[{kind: sigkill, step: 17}]")
    assert first.returncode == -9, first.stderr
    assert [n["data"]["fraction"] for n in _notes(logbook_repo, "killed")] == [0.1, 0.25, 0.5]
    second = _train(logbook_repo, "killed", "faults=[{kind: sigkill, step: 17}]")
    assert second.returncode == 0, second.stderr
    notes = _notes(logbook_repo, "killed")
    assert [n["data"]["fraction"] for n in notes] == FRACTIONS
    assert [n["attempt"] for n in notes] == [1, 1, 1, 2, 2]
    project = open_project(logbook_repo)
    facts = load_facts(project, "killed")
    assert [note_scores(facts, n)["since_last"]["restarts"] for n in notes] == [0, 0, 0, 1, 0]  # one between 50% and 75%
    text = "\n".join(p.read_text() for p in render_chronicle(project).written)
    for pct, name in (("10%", "010"), ("75%", "075"), ("100%", "100")):
        assert f"milestone {pct}" in text
        assert f"assets/killed/progress-{name}.png)" in text


@pytest.mark.slow
def test_logbook_run_returns_with_every_note_scored_and_plotted_by_its_watcher(logbook_repo):
    from logbook.launch.launcher import launch_run

    cfg = micro_config(logbook_repo, steps=10)
    res = launch_run(open_project(logbook_repo), cfg, [], exploratory=True, max_restarts=0, run_id="watched")
    assert res.status == "finished", res.reason
    assert [n["data"]["fraction"] for n in _notes(logbook_repo, "watched")] == FRACTIONS
    for name in ("010", "025", "050", "075", "100"):  # drawn by the launcher's render, not by the trainer
        assert (logbook_repo / "entries" / "assets" / "watched" / f"progress-{name}.png").read_bytes()[:4] == b"\x89PNG"
    days = sorted((logbook_repo / "entries").glob("[0-9][0-9][0-9][0-9]/[0-9][0-9]/[0-9][0-9].md"))
    text = "\n".join(p.read_text() for p in days)
    assert text.count("Goodput so far ") == 5 and text.count("![Loss curve to step") == 5


def _facts(last_step: int, loss: float, restarts: int = 0) -> RunFacts:
    evs = [{"kind": "restart", "ts": "2026-01-01T00:00:00Z"} for _ in range(restarts)]
    return RunFacts(run="r", events=evs, series={"loss": {25: loss, last_step: loss}}, last_step=last_step, total_steps=100)


@pytest.mark.parametrize(("expr", "facts", "status"), [
    ("loss@final < 4.0", _facts(50, 3.5), "on track"),
    ("loss@final < 4.0", _facts(50, 4.5), "at risk"),
    ("loss@final < 4.0 ± 0.2", _facts(50, 4.1), "at risk"),  # only the tolerance accepts it
    ("restarts@final <= 1", _facts(50, 3.0, restarts=2), "already failed"),  # counts only grow
    ("restarts@final <= 1", _facts(50, 3.0, restarts=1), "on track"),
    ("loss@25% < 4.0", _facts(50, 3.5), "met"),
    ("loss@25% < 3.0", _facts(50, 3.5), "already failed"),
    ("val_loss@final < 4.0", _facts(50, 3.5), "unknown"),
    ("loss@step:10 < 4.0", _facts(50, 3.5), "unknown"),  # passed with nothing logged by then: not today's value
])
def test_each_prediction_is_on_track_at_risk_met_or_already_failed(expr, facts, status):
    got = standing(parse_prediction(expr), facts)
    assert got["status"] == status
    assert got["expr"] == parse_prediction(expr).to_text()


def test_since_last_counts_only_what_came_after_the_previous_note():
    evs = [{"kind": "restart"}, {"kind": "milestone"}, {"kind": "rollback"}, {"kind": "lr_scaled"},
           {"kind": "hparam_change"}, {"kind": "step_skipped"}, {"kind": "checkpoint_saved"}]
    assert since_last(evs) == {"restarts": 0, "rollbacks": 1, "changes": 2, "skips": 1}
