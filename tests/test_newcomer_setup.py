"""A newcomer's first commands: `init` in a fresh `git init`, examples by name, LOGBOOK_MAX_STEPS."""

from __future__ import annotations

import subprocess
from pathlib import Path

from conftest import git

from logbook.core.examples import is_bare_name, shipped


def test_init_in_a_repository_without_commits_makes_an_empty_first_one(tmp_path, monkeypatch, cli):
    lab = tmp_path / "lab"
    git(tmp_path, "init", "-q", "lab")
    (lab / "mine.txt").write_text("staged, not committed\n")
    git(lab, "add", "mine.txt")
    monkeypatch.chdir(lab)
    res = cli("init")
    assert res.exit_code == 0, res.output
    assert "had no commits: made an empty first one" in res.stderr
    assert git(lab, "log", "-1", "--format=%s").strip() == "Start a logbook"
    assert git(lab, "diff-tree", "--no-commit-id", "--name-only", "-r", "HEAD").split() == ["logbook.yaml"]
    assert git(lab, "log", "-1", "--format=%s", "HEAD~1").strip() == "Start the repository"
    assert git(lab, "ls-tree", "-r", "--name-only", "HEAD~1").strip() == ""  # empty: the user's staged file is not in it
    assert "A  mine.txt" in git(lab, "status", "--short")  # and still staged
    assert cli("init").exit_code == 0  # again: nothing to do


def test_a_bare_name_copies_the_shipped_example_once_and_then_uses_the_repositorys_file(logbook_repo, cli):
    assert {"tiny-cpu", "micro-test"} <= set(shipped("config")) and "qknorm" in shipped("prereg")
    assert "qknorm" not in shipped("config")  # the example preregistration is not a training config
    res = cli("prereg", "--from-file", "qknorm")
    assert res.exit_code == 0, res.output
    assert "prereg/qknorm.yaml: copied from logbook's example 'qknorm'" in res.stderr
    assert "configs/tiny-cpu.yaml: copied from logbook's example 'tiny-cpu'" in res.stderr
    assert (logbook_repo / "configs" / "tiny-cpu.yaml").read_bytes() == shipped("config")["tiny-cpu"].read_bytes()
    # An edited copy wins over the example: the repository's file is the one a run is reproduced from.
    mine = logbook_repo / "prereg" / "qknorm.yaml"
    mine.write_text(mine.read_text().replace("QK-norm removes loss spikes", "My own edited title"))
    res = cli("prereg", "--from-file", "qknorm")
    assert res.exit_code == 0, res.output
    assert "copied" not in res.stderr and "my-own-edited-title" in res.stdout


def test_an_unknown_name_is_a_usage_error_naming_the_examples(logbook_repo, cli):
    res = cli("prereg", "--from-file", "no-such-example")
    assert res.exit_code == 2
    assert "no prereg named 'no-such-example'" in res.stderr and "qknorm" in res.stderr
    assert not (logbook_repo / "prereg").exists()


def test_paths_are_not_names():
    assert is_bare_name("tiny-cpu")
    assert not any(is_bare_name(t) for t in ("configs/tiny-cpu.yaml", "tiny-cpu.yaml", "./tiny", "..", ""))


def test_a_preregistration_is_found_by_its_title_part(logbook_repo, cli):
    assert cli("prereg", "--from-file", "qknorm").exit_code == 0
    from logbook.core.project import open_project
    from logbook.promises.prereg import resolve_prereg_id

    pid = resolve_prereg_id(open_project(logbook_repo), "qk-norm")
    assert pid and pid[11:].startswith("qk-norm-removes-loss-spikes")


def test_a_bad_max_steps_is_refused_before_anything_starts(logbook_repo, cli, monkeypatch):
    monkeypatch.setenv("LOGBOOK_MAX_STEPS", "ten")
    res = cli("run", "--exploratory", "tiny-cpu")
    assert res.exit_code == 2 and "LOGBOOK_MAX_STEPS='ten' is not a positive whole number" in res.stderr
    assert not (logbook_repo / "entries" / "runs").exists()
