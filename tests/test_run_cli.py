"""`logbook run` at the command line: refusals, usage errors, a live run id, deviations."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import ROOT, git
from runhelpers import events, micro_config, of_kind

from logbook.core.errors import EXIT_REFUSED, EXIT_USAGE


def _nothing_started(repo) -> bool:
    return not (repo / "entries" / "runs").exists() and not (repo / ".logbook" / "torchrun").exists()


def test_a_run_without_a_preregistration_is_refused_unless_exploratory(logbook_repo, cli):
    cfg = micro_config(logbook_repo)
    res = cli("run", str(cfg))
    assert res.exit_code == EXIT_REFUSED
    assert "a run needs a preregistration" in res.stderr and "--exploratory" in res.stderr
    assert "Traceback" not in res.output
    assert _nothing_started(logbook_repo)


def test_exploratory_runs_are_refused_when_the_logbook_forbids_them(logbook_repo, cli):
    cfg_file = logbook_repo / "logbook.yaml"
    cfg_file.write_text(cfg_file.read_text().replace("allow_unregistered_runs: true", "allow_unregistered_runs: false"))
    res = cli("run", "--exploratory", str(micro_config(logbook_repo)))
    assert res.exit_code == EXIT_REFUSED
    assert "allow_unregistered_runs" in res.stderr
    assert _nothing_started(logbook_repo)


def test_an_unknown_config_path_is_a_usage_error_and_starts_nothing(logbook_repo, cli):
    res = cli("run", "--exploratory", "configs/nope.yaml")
    assert res.exit_code == EXIT_USAGE
    assert "config file not found: configs/nope.yaml" in res.stderr
    assert _nothing_started(logbook_repo)


@pytest.mark.parametrize("option, value, message", [
    ("--join-timeout", "0.5", "whole number of seconds"),  # torchrun's rendezvous takes whole seconds only
    ("--join-timeout", "nan", "whole number of seconds"),
    ("--startup-timeout", "nan", "positive number of seconds"),
    ("--startup-timeout", "inf", "positive number of seconds"),
])
def test_a_timeout_torchrun_or_the_workers_could_not_use_is_a_usage_error_and_starts_nothing(logbook_repo, cli, option,
                                                                                            value, message):
    res = cli("run", "--exploratory", str(micro_config(logbook_repo)), option, value)
    assert res.exit_code == EXIT_USAGE and message in res.stderr and "Traceback" not in res.output, res.output
    assert _nothing_started(logbook_repo)


@pytest.mark.parametrize("override, message", [
    ("train.stepz=3", "train.stepz"),  # the trainer's own check names the key
    ("train.steps=many", "train.steps"),
    ("steps", "bad override 'steps': expected key=value"),
])
def test_a_bad_override_is_a_usage_error_and_starts_nothing(logbook_repo, cli, override, message):
    res = cli("run", "--exploratory", str(micro_config(logbook_repo)), override)
    assert res.exit_code == EXIT_USAGE, res.output
    assert message in res.stderr
    assert "Traceback" not in res.output
    assert _nothing_started(logbook_repo)


@pytest.mark.slow
def test_a_live_run_refuses_a_second_launch_keeps_its_deviation_and_sigterm_preempts_it(logbook_repo, cli):
    cfg = micro_config(logbook_repo, steps=5000, every=5)
    git(logbook_repo, "add", "configs")
    git(logbook_repo, "commit", "-q", "-m", "config")
    made = cli("prereg", "--title", "Micro GPT learns bytes", "--hypothesis", "The loss falls.",
               "--predict", "val_loss@final < 6.0", "--config", str(cfg), "--json")
    assert made.exit_code == 0, made.output
    prereg_id = json.loads(made.stdout)["id"]
    with open(cfg, "a") as f:
        f.write("# tuned after preregistering\n")  # the run will not train what was preregistered

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    first = subprocess.Popen([sys.executable, "-m", "logbook", "run", "--prereg", prereg_id, "--run-id", "live", str(cfg)],
                             cwd=logbook_repo, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(lambda: of_kind(_events_or_none(logbook_repo, "live"), "checkpoint_saved"), first)
        second = cli("run", "--prereg", prereg_id, "--run-id", "live", str(cfg))
        assert second.exit_code == EXIT_REFUSED
        assert f"run live is already live (pid {first.pid}" in second.stderr
        first.send_signal(signal.SIGTERM)
        _, stderr = first.communicate(timeout=120)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == 75, stderr
    assert "Traceback" not in stderr and "SignalException" not in stderr, stderr
    assert "WARNING: deviation from preregistration" in stderr
    assert "Run live preempted" in stderr and "logbook run --resume live" in stderr

    shown = cli("show", "live", "--json")
    assert shown.exit_code == 0, shown.output
    data = json.loads(shown.stdout)
    record = data["run"]
    assert record["status"] == "preempted" and record["prereg_id"] == prereg_id and record["exploratory"] is False
    assert record["config_hash"] != record["prereg_config_hash"]
    assert len(record["deviations"]) == 1 and "the preregistration recorded" in record["deviations"][0]
    assert record["snapshot"]["commit"] and record["author"] == "Ada Tester <ada@example.org>"
    evs = data["events"]
    assert of_kind(evs, "run_started")[0]["data"]["prereg_id"] == prereg_id
    assert of_kind(evs, "run_started")[0]["data"]["config_path"] == "configs/micro.yaml"  # not this machine's path
    assert len(of_kind(evs, "preempted")) == 1 and not of_kind(evs, "run_failed")


@pytest.mark.slow
def test_ctrl_c_on_a_run_prints_one_line_about_it_and_no_torchrun_traceback(logbook_repo):
    cfg = micro_config(logbook_repo, steps=5000, every=5)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "logbook", "run", "--exploratory", "--run-id", "ctrlc", str(cfg)],
                            cwd=logbook_repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(lambda: of_kind(_events_or_none(logbook_repo, "ctrlc"), "checkpoint_saved"), proc)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    text = out + err
    assert "Traceback" not in text and "SignalException" not in text, text
    assert text.count("SIGINT: asking the trainer to save and stop") == 1
    logs = list((logbook_repo / ".logbook" / "torchrun" / "ctrlc").glob("*/torchrun.log"))
    assert len(logs) == 1  # what torchrun said is kept, out of the way


def _events_or_none(repo, run_id):
    try:
        return events(repo, run_id)
    except FileNotFoundError:
        return []


@pytest.mark.parametrize("text", ["", "null\n", "{}\n", "# only a comment\n"])
def test_an_empty_training_config_is_a_usage_error_naming_the_examples(logbook_repo, cli, text):
    (logbook_repo / "empty.yaml").write_text(text)
    res = cli("run", "--exploratory", "empty.yaml")
    assert res.exit_code == 2, res.output
    assert "is empty" in res.stderr and "configs/tiny-cpu.yaml" in res.stderr and "Traceback" not in res.output
    assert _nothing_started(logbook_repo)


def test_a_key_written_twice_in_a_training_config_is_a_usage_error_naming_both_lines(logbook_repo, cli):
    (logbook_repo / "twice.yaml").write_text("train:\n  steps: 5\n  lr: 0.1\n  steps: 50\n")
    res = cli("run", "--exploratory", "twice.yaml")
    assert res.exit_code == 2
    assert "duplicate key 'steps' on lines 2 and 4" in res.stderr and "Traceback" not in res.output
    assert _nothing_started(logbook_repo)


def _wait_for(condition, proc, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert proc.poll() is None, f"the run ended early: {proc.stderr.read()}"
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


def test_a_config_or_settings_file_that_is_not_a_mapping_is_one_clear_usage_error(logbook_repo, cli):
    (logbook_repo / "list.yaml").write_text("- lr: 0.1\n")
    res = cli("run", "--exploratory", "list.yaml")
    assert res.exit_code == 2 and "training config" in res.stderr
    assert "expected a mapping of sections, got list" in res.stderr and "Traceback" not in res.output
    (logbook_repo / "logbook.yaml").write_text("- entries\n")
    res = cli("ls")
    assert res.exit_code == 2 and "logbook settings" in res.stderr and "expected a mapping of settings" in res.stderr
