"""The batch script of `logbook slurm-script`: what docs/slurm.md shows, valid bash, each step of the recipe."""

from __future__ import annotations

import re
import shutil
import subprocess

from conftest import ROOT
from scoring_helpers import make_prereg

from logbook.core.project import open_project


def _script(repo, cli, *extra: str) -> str:
    """The script for a real config and preregistration, with the preregistration's id written ID as the docs do."""
    (repo / "configs").mkdir(exist_ok=True)
    shutil.copy(ROOT / "configs" / "tiny-cpu.yaml", repo / "configs" / "1b.yaml")
    pid = make_prereg(open_project(repo), ["val_loss@final < 3"])
    res = cli("slurm-script", "configs/1b.yaml", "--prereg", pid, "--run-id", "qknorm-1", *extra)
    assert res.exit_code == 0, res.output
    return res.stdout.replace(pid, "ID")


def test_the_script_in_the_docs_is_the_one_logbook_writes(logbook_repo, cli):
    script = _script(logbook_repo, cli, "--nodes", "2", "--nproc", "8", "--gpus-per-node", "8", "--time", "24:00:00", "--warn", "120")
    doc = (ROOT / "docs" / "slurm.md").read_text()
    shown = re.search(r"```bash\n(#!/bin/bash\n.*?)```", doc, re.S).group(1)
    assert script.startswith(shown)
    assert "slurm-script configs/1b.yaml --prereg ID --run-id qknorm-1" in doc


def test_the_script_is_valid_bash_and_resumes_passes_signals_on_and_requeues_only_a_saved_running_job(logbook_repo, cli):
    script = _script(logbook_repo, cli, "--nodes", "2")
    path = logbook_repo / "job.sbatch"
    path.write_text(script)
    assert subprocess.run(["bash", "-n", str(path)], capture_output=True).returncode == 0
    assert 'if [ "${SLURM_RESTART_COUNT:-0}" -gt 0 ]; then\n  args=(--resume "$run")' in script
    assert "trap 'kill -USR1 \"$step\" 2>/dev/null' USR1 TERM" in script
    assert 'if [ "$rc" -eq 75 ] && [ "$state" = RUNNING ]; then' in script
    assert '--node-rank "$SLURM_NODEID" --rdzv-endpoint "$0:29500"' in script
    assert f"cd {logbook_repo}" in script


def test_a_script_needs_a_preregistration_or_the_exploratory_label_and_a_valid_time(logbook_repo, cli):
    res = cli("slurm-script", "configs/1b.yaml", "--run-id", "x")
    assert res.exit_code == 2 and "--prereg ID or --exploratory" in res.output
    res = cli("slurm-script", "configs/1b.yaml", "--exploratory", "--run-id", "x", "--time", "soon")
    assert res.exit_code == 2 and "bad --time" in res.output


def test_a_script_is_refused_for_what_would_only_fail_on_the_cluster(logbook_repo, cli):
    """Everything `logbook run` would refuse on the nodes is refused here, before a job waits in the queue for it."""
    (logbook_repo / "configs").mkdir()
    shutil.copy(ROOT / "configs" / "micro-test.yaml", logbook_repo / "configs" / "job.yaml")
    base = ["slurm-script", "configs/job.yaml", "--exploratory", "--run-id", "x", "--time", "10"]
    assert cli(*base).exit_code == 0
    for extra, why in [
        (["--prereg", "2026-01-01-nope-1234"], None),  # with --exploratory: refused as usual
        (["train.steps=abc"], "train.steps"),
        (["bogus"], "bad override"),
        (["--rdzv-port", "70000"], "TCP port"),
        (["--join-timeout", "0.5"], "whole number of seconds"),
        (["--logbook-cmd", " "], "--logbook-cmd is empty"),
        (["--warn", "600"], "not before the end"),
    ]:
        res = cli(*base, *extra)
        assert res.exit_code == 2 and "Traceback" not in res.output, (extra, res.output)
        assert why is None or why in res.output, (extra, res.output)
    res = cli("slurm-script", "configs/nope.yaml", "--exploratory", "--run-id", "x")
    assert res.exit_code == 2 and "config file not found" in res.output
    res = cli("slurm-script", "configs/job.yaml", "--prereg", "2026-01-01-nope-1234", "--run-id", "x")
    assert res.exit_code == 3 and "unknown preregistration" in res.output
