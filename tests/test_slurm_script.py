"""The batch script of `logbook slurm-script`: what docs/slurm.md shows, valid bash, each step of the recipe."""

from __future__ import annotations

import re
import subprocess

from conftest import ROOT


def _script(cli, *extra: str) -> str:
    res = cli("slurm-script", "configs/1b.yaml", "--prereg", "ID", "--run-id", "qknorm-1", *extra)
    assert res.exit_code == 0, res.output
    return res.stdout


def test_the_script_in_the_docs_is_the_one_logbook_writes(logbook_repo, cli):
    script = _script(cli, "--nodes", "2", "--nproc", "8", "--gpus-per-node", "8", "--time", "24:00:00", "--warn", "120")
    doc = (ROOT / "docs" / "slurm.md").read_text()
    shown = re.search(r"```bash\n(#!/bin/bash\n.*?)```", doc, re.S).group(1)
    assert script.startswith(shown)
    assert "slurm-script configs/1b.yaml --prereg ID --run-id qknorm-1" in doc


def test_the_script_is_valid_bash_and_resumes_passes_signals_on_and_requeues_only_a_saved_running_job(logbook_repo, cli):
    script = _script(cli, "--nodes", "2")
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
