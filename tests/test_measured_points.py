"""Predictions and forecasts the run can measure: refused at prereg, named at launch, never scored from another step.

Runs are hand-written event logs and metric streams (`scoring_helpers`); the
cadence a config sets is the trainer's (`trainer/loop.py`: validation every
`eval_every` steps and at the last, a row every `log_every` steps and at the last).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from conftest import ROOT
from scoring_helpers import make_prereg, project_of, story_clock, write_record  # noqa: F401

from logbook.core.errors import UsageError
from logbook.promises.measurable import (
    DEFAULT_EVAL_EVERY, DEFAULT_LOG_EVERY, DEFAULT_STEPS, Cadence, check_measurable, launch_warnings,
)
from logbook.promises.predictions import parse_prediction
from logbook.promises.prereg import load_prereg
from logbook.eventlog.sink import EventSink, MetricsWriter
from logbook.proof.scorecard import evaluate


def _config(repo: Path, steps: int = 60, eval_every: int = 10, name: str = "every10.yaml") -> str:
    path = repo / "configs" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump({"train": {"steps": steps, "eval_every": eval_every}}))
    return f"configs/{name}"


def test_the_cadence_defaults_are_the_trainers():
    from trainer.config import TrainLoopConfig

    t = TrainLoopConfig()
    assert (DEFAULT_STEPS, DEFAULT_EVAL_EVERY, DEFAULT_LOG_EVERY) == (t.steps, t.eval_every, t.log_every)


def test_prereg_refuses_a_forecast_no_evaluation_reaches_naming_the_nearest_measured_steps(logbook_repo):
    project = project_of(logbook_repo)
    cfg = _config(logbook_repo)
    with pytest.raises(UsageError) as e:
        make_prereg(project, ["val_loss@25% ≈ 3.4 [3.2, 3.6] 80%", "spikes@final == 0"], config=cfg)
    msg = e.value.message
    assert "val_loss@25% ≈ 3.4 [3.2, 3.6] 80%: step 15 is never measured" in msg
    assert "the run evaluates every 10 steps and at the last step (60)" in msg
    assert "nearest measured: step 10 and step 20" in msg and "`val_loss@~25%±5`" in msg
    assert "spikes" not in msg  # a count is known at every step
    # The window the message suggests is accepted, and so is a measured step.
    assert make_prereg(project, ["val_loss@~25%±5 ≈ 3.4 [3.2, 3.6] 80%", "val_loss@step:20 < 4"], config=cfg)


def test_prereg_refuses_a_step_past_the_runs_end_when_the_config_is_known(logbook_repo):
    project = project_of(logbook_repo)
    cfg = _config(logbook_repo, steps=30)
    with pytest.raises(UsageError, match=r"step 999,999 is past the run's end: the config trains 30 steps"):
        make_prereg(project, ["val_loss@step:999999 < 3"], config=cfg)
    with pytest.raises(UsageError, match=r"step 40 is past the run's end"):
        make_prereg(project, ["restarts@step:40 <= 1"], config=cfg)
    assert make_prereg(project, ["val_loss@step:999999 < 3"])  # without a config the run's length is unknown


def test_launch_names_each_point_the_run_will_never_measure(logbook_repo):
    from logbook.launch.launcher import _new_plan
    from logbook.launch.launcher import Rendezvous

    project = project_of(logbook_repo)
    pid = make_prereg(project, ["val_loss@25% ≈ 3.4 [3.2, 3.6] 80%", "loss@step:15 < 4"])  # no config named
    cfg = logbook_repo / _config(logbook_repo)
    said: list[str] = []
    _new_plan(project, "r1", cfg, [], load_prereg(project, pid), pid, False, 1, 0, Rendezvous(), said.append)
    warned = [s for s in said if s.startswith("WARNING: prediction")]
    assert len(warned) == 1 and "val_loss@25%" in warned[0] and "nearest measured: step 10 and step 20" in warned[0]
    # An override that makes the run evaluate every 5 steps measures step 15.
    assert launch_warnings(load_prereg(project, pid), cfg, ["train.eval_every=5"], None) == []


def _run(project, clock, run: str, pid: str, *, steps: int = 60, eval_every: int = 10,
         tokens_per_s=lambda s: 1000.0) -> None:
    write_record(project, run, pid)
    d = project.run_dir(run)
    s, m = EventSink(d, run, 1), MetricsWriter(d, flush_every=1000)
    s.emit("run_started", step=0, total_steps=steps, prereg_id=pid)
    for step in range(1, steps + 1):
        m.write({"step": step, "attempt": 1, "time": clock.advance(1.0), "loss": 4.0 - step * 0.01,
                 "tokens_per_s": tokens_per_s(step)})
        if step % eval_every == 0 or step == steps:
            m.write({"step": step, "attempt": 1, "time": clock.t, "val_loss": 4.0 - step * 0.02})
    m.close()
    s.emit("run_finished", step=steps)


def test_a_forecast_at_an_unevaluated_step_is_not_measured_not_refuted_by_a_stale_value(logbook_repo, story_clock):
    project = project_of(logbook_repo)
    pid = make_prereg(project, ["val_loss@25% ≈ 3.4 [3.2, 3.6] 80%", "val_loss@~25%±5 ≈ 3.4 [3.2, 3.6] 80%"])
    _run(project, story_clock, "r", pid)  # val_loss at 10 is 3.8 (outside), at 20 is 3.6 (inside)
    by = {p.text: p for p in evaluate(project, "r").predictions}
    exact = by["val_loss@25% ≈ 3.4 [3.2, 3.6] 80%"]
    assert (exact.status, exact.value) == ("inconclusive", None)
    assert exact.reason == "not measured: no val_loss was logged at step 15 (logged nearest: step 10 and 20)"
    near = by["val_loss@~25%±5 ≈ 3.4 [3.2, 3.6] 80%"]  # 10 and 20 are both 5 away: the earlier one, as stated
    assert (near.status, near.at_step, near.value) == ("refuted", 10, pytest.approx(3.8))


def test_throughput_is_scored_as_the_median_over_a_window_that_the_scorecard_names(logbook_repo, story_clock):
    project = project_of(logbook_repo)
    pid = make_prereg(project, ["tokens_per_s@50% >= 2000", "tokens_per_s@~50%±2 >= 2000"])
    # 3,000 tokens/s everywhere but one slow step at the point itself, and a fast one next to it: the
    # median is robust to both, and a mean (3,000 + 18,076 + 43 ...) would not be.
    speeds = {30: 43.0, 31: 18076.0}
    _run(project, story_clock, "r", pid, steps=60, tokens_per_s=lambda s: speeds.get(s, 3000.0 + s))
    by = {p.text: p for p in evaluate(project, "r").predictions}
    p = by["tokens_per_s@50% >= 2000"]
    assert (p.status, p.value, p.at_step) == ("confirmed", 3029.0, 30)  # 43, 3027..3029, 3032, 3033, 18076
    assert p.rule == "median of 7 logged values over steps 27–33 (step 30 ± 3, 5% of the run either side)"
    q = by["tokens_per_s@~50%±2 >= 2000"]
    assert q.value == pytest.approx(3029.0) and "steps 28–32 (step 30 ± 2, as preregistered)" in q.rule


def test_check_measurable_takes_a_window_when_a_measured_step_is_inside_it():
    cad = Cadence(total_steps=60, eval_every=10, log_every=1)
    ok = [parse_prediction(t) for t in ("val_loss@~15±5 < 3", "val_loss@final < 3", "loss@step:15 < 3",
                                        "goodput@step:15 > 0.5", "val_loss@step:60 < 3")]
    assert check_measurable(ok, cad) == []
    bad = check_measurable([parse_prediction("val_loss@~15±4 < 3")], cad)
    assert bad and "no val_loss is measured within 4 steps of step 15" in bad[0]
    assert Cadence(60, 0, 1).measured_at("val_loss", 60) and not Cadence(60, 0, 1).measured_at("val_loss", 30)


def _readme_prereg() -> dict:
    text = (ROOT / "README.md").read_text("utf-8")
    block = re.search(r"A preregistration file \(`--from-file`\) looks like this:\s*```yaml\n(.*?)```", text, re.S)
    return yaml.safe_load(block.group(1))


def _prereg_from(project, repo: Path, data: dict, name: str) -> tuple[str, list[str]]:
    from logbook.promises.prereg import create_prereg
    from logbook.promises.prereg_input import input_from_mapping

    data = {k: v for k, v in data.items() if k != "config"}  # the README's 1B config is not in a test repo
    w = create_prereg(project, input_from_mapping(data, name))
    return w.id, w.warnings


def _stated(data: dict) -> list[str]:
    """Every forecast the YAML states, one per line or trajectory point, as scorecard texts."""
    out = []
    for line in data["predictions"]:
        if isinstance(line, dict):
            for at, v, lo, hi in line["points"]:
                out.append(f"{line['trajectory']}@{at} ≈ {v} [{lo}, {hi}] {line['level']}")
        else:
            out.append(str(line))
    return out


def test_the_readmes_example_preregistration_scores_exactly_what_it_states_once(logbook_repo, story_clock):
    project = project_of(logbook_repo)
    data = _readme_prereg()
    pid, warnings = _prereg_from(project, logbook_repo, data, "readme.yaml")
    assert warnings == []  # the example states each forecast once (it once stated val_loss@final twice)
    _run(project, story_clock, "readme", pid, steps=100, eval_every=25)
    card = evaluate(project, "readme")
    scored = [p.text for p in card.predictions]
    stated = [parse_prediction(t) for t in _stated(data)]
    assert len(scored) == len(stated) == len(set(scored))
    assert sorted(scored) == sorted(p.to_text() for p in stated)


def test_a_forecast_stated_twice_is_merged_with_a_warning_and_scored_plotted_and_counted_once(logbook_repo, story_clock):
    from logbook.scoring.forecasts import curves, run_summary

    project = project_of(logbook_repo)
    data = {"title": "twice", "hypothesis": "h", "predictions": [
        "val_loss@final ≈ 2.25 [2.20, 2.30] 80%",
        {"trajectory": "val_loss", "level": "80%", "points": [["50%", 2.6, 2.45, 2.75], ["final", 2.25, 2.2, 2.3]]}]}
    pid, warnings = _prereg_from(project, logbook_repo, data, "twice.yaml")
    assert warnings == ["prediction 1 (val_loss@final ≈ 2.25 [2.2, 2.3] 80%) is also a point of the trajectory: "
                        "it is kept once, in the trajectory, and scored once"]
    _run(project, story_clock, "twice", pid, steps=100, eval_every=25)
    card = evaluate(project, "twice")
    assert [p.at_step for p in card.predictions] == [50, 100]
    assert run_summary([p.to_dict() for p in card.predictions]).points == 2
    prereg = load_prereg(project, pid)
    assert [len(c.points) for c in curves(prereg.all_predictions(), 100)] == [2]


def test_two_intervals_of_one_point_at_one_level_that_disagree_are_refused(logbook_repo):
    project = project_of(logbook_repo)
    with pytest.raises(UsageError, match=r"val_loss@final is forecast twice at 80%"):
        make_prereg(project, ["val_loss@final ≈ 2.4 [2.3, 2.5] 80%",
                              "val_loss ≈ {50%: 2.6 [2.45, 2.75], final: 2.25 [2.2, 2.3]} 80%"])
    # At another level it is another forecast (a wider or narrower quantile pair): kept.
    assert make_prereg(project, ["val_loss@final ≈ 2.25 [2.0, 2.5] 95%",
                                 "val_loss ≈ {50%: 2.6 [2.45, 2.75], final: 2.25 [2.2, 2.3]} 80%"])
