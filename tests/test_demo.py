"""`logbook demo`: the whole loop once, in a scratch repository, with a real restart."""

from __future__ import annotations

import json
import re

import pytest
from conftest import git
from runhelpers import events, of_kind, run_json

from logbook.core.errors import EXIT_REFUSED
from logbook.core.textfmt import fmt_setting


@pytest.mark.slow
def test_the_demo_trains_through_a_drill_kill_and_records_one_restart(tmp_path, cli):
    where = tmp_path / "demo"
    res = cli("demo", "--dir", str(where), "--steps", "12", "--json")
    assert res.exit_code == 0, res.output

    out = json.loads(res.stdout)
    run_id = out["run"]["run_id"]
    assert out["verify_ok"] is True and out["kept"] is True
    assert (out["run"]["status"], out["run"]["attempts"], out["run"]["restarts"]) == ("finished", 2, 1)
    (restart,) = of_kind(events(where, run_id), "restart")
    assert restart["data"]["cause"] == "signal" and restart["drill"] is True
    # torchrun's agent saw the worker's exit status and named the signal in its rank mark.
    assert restart["data"]["signal"] == "SIGKILL" and "killed by SIGKILL" in restart["data"]["detail"]
    record = run_json(where, run_id)
    assert record["prereg_id"] == out["prereg_id"]

    # Two spike drills after the restart (steps 10 and 12): skipped, then a rollback as the plan says.
    ladder = [(e["step"], e["kind"]) for e in events(where, run_id)
              if e["kind"] in ("divergence_detected", "step_skipped", "rollback", "lr_scaled")]
    assert ladder == [(10, "divergence_detected"), (10, "step_skipped"), (12, "divergence_detected"),
                      (4, "rollback"), (4, "lr_scaled")]
    assert all(e["data"]["plan"]["follows"] for e in of_kind(events(where, run_id), "divergence_detected"))
    assert "the guard rolled back from step 11 to the checkpoint at step 4; batches 10–19 are skipped" in res.stderr
    assert "the guard skipped step 10: its update was never applied" in res.stderr
    assert not re.search(r"^[EWI]\d{4} ", res.stderr, re.M)  # torchrun's own log lines stay in its log file
    # The live change, made through `logbook set`'s library after the first spike: who, why, old, new.
    (change,) = of_kind(events(where, run_id), "hparam_change")
    assert change["data"]["key"] == "lr_scale" and change["data"]["new"] == 0.8
    # Asked for after the first spike: it lands after that skip in the log (at the next step the run
    # takes, which is after the rollback when the second spike came first on a busy machine).
    first_skip = of_kind(events(where, run_id), "step_skipped")[0]
    assert change["seq"] > first_skip["seq"]
    assert change["data"]["reason"] == "demo: gentler after the spike" and change["data"]["who"]
    assert out["live_change"]["outcome"]["status"] == "applied"
    # From 1.0, or from the rollback's 0.9 when the change landed after it.
    assert change["data"]["old"] in (1.0, 0.9)
    assert (f"a live change (`logbook set`) at step {change['step']}: lr_scale {fmt_setting(change['data']['old'])} "
            "→ 0.8, by") in res.stderr
    (rolled,) = of_kind(events(where, run_id), "rollback")
    if change["seq"] < rolled["seq"]:  # the live value is what the rollback scales
        assert "the guard lowered the learning rate at step 4: lr_scale 0.8 → 0.72 (× 0.9)" in res.stderr
    else:  # the run reached the second spike before its next step picked the request up
        assert "the guard lowered the learning rate at step 4: lr_scale 1.0 → 0.9 (× 0.9)" in res.stderr
    assert any("rollback" in line for line in out["spike_entry"]) and any("0.8" in line for line in out["change_entry"])
    assert change["data"]["plan"]["follows"] is False  # the live change was not in the plan: a deviation

    # The summary a newcomer reads, with the chronicle's own entry for the restart.
    assert "restart: attempt 1 -> 2, killed by SIGKILL" in res.stderr
    assert f"run:             {run_id} (finished, 2 attempts, 1 restart)" in res.stderr
    assert "logbook verify:  intact" in res.stderr
    assert out["team"][-1].endswith("# 0 conflicts") and "the team workflow, as it ran:" in res.stderr
    assert git(where, "status", "--porcelain", "--untracked-files=no").strip() == ""  # the hook re-rendered and left it clean
    assert any("restart" in line for line in out["restart_entry"])
    (day,) = out["chronicle"]
    assert f"run {run_id}" in open(day).read()
    # Its forecasts (a stated confidence, a point forecast, a trajectory) are scored, plotted and reported.
    from logbook.scoring.outcome import load_outcome
    from logbook.core.project import open_project

    card = load_outcome(open_project(where), run_id)
    kinds = [p["forecast"]["kind"] for p in card["predictions"] if p.get("forecast")]
    assert kinds.count("point") == 5 and kinds.count("probability") == 1
    assert all("error" in p["forecast"] for p in card["predictions"] if p.get("forecast", {}).get("kind") == "point")
    report = (where / "entries" / "reports" / f"{run_id}.md").read_text()
    assert "### Forecasts" in report and "(trajectory)" in report and "## Calibration across runs" in report
    assert "Forecasts: 1 with a stated confidence: mean Brier" in res.stderr and "5 point forecasts" in res.stderr
    assert (where / "entries" / "assets" / run_id / "report-calibration.png").read_bytes()[:4] == b"\x89PNG"
    # A real repository: the preregistration is committed, the user's tree is clean but for the run.
    assert "Preregister " + out["prereg_id"] in git(where, "log", "--format=%s")
    # The static site, built last into the scratch folder (ignored by its git), and where it is said.
    assert out["site"] == str(where / "site" / "index.html") and f"static site:     {out['site']}" in res.stderr
    assert (where / "site" / "runs" / f"{run_id}.html").is_file()
    assert git(where, "check-ignore", "site/index.html").strip() == "site/index.html"


def test_the_demo_refuses_a_folder_it_did_not_make(tmp_path, cli):
    (tmp_path / "mine.txt").write_text("precious\n")
    res = cli("demo", "--dir", str(tmp_path))
    assert res.exit_code == EXIT_REFUSED
    assert "was not made by `logbook demo`" in res.stderr
    assert (tmp_path / "mine.txt").read_text() == "precious\n"


def test_the_demo_refuses_too_few_steps_for_its_drill(tmp_path, cli):
    res = cli("demo", "--dir", str(tmp_path / "d"), "--steps", "3")
    assert res.exit_code == 2
    assert "--steps must be at least 6" in res.stderr
    assert not (tmp_path / "d").exists()
