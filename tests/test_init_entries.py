"""`logbook init --entries`: the logbook folder must be one git tracks, or nothing in it could ever be verified."""

from __future__ import annotations

import pytest
from conftest import git


@pytest.mark.parametrize("folder", [".git", ".git/records", "sub/.git", ".GIT", ".", "../elsewhere", "/tmp/x"])
def test_a_logbook_folder_git_cannot_track_is_refused_and_nothing_is_written(repo, cli, folder):
    head = git(repo, "rev-parse", "HEAD")
    res = cli("init", "--entries", folder)
    assert res.exit_code == 2 and "entries_dir must be" in res.stderr and "Traceback" not in res.output
    assert not (repo / "logbook.yaml").exists() and git(repo, "rev-parse", "HEAD") == head


def test_a_logbook_in_a_folder_of_ones_own_choosing_is_set_up(repo, cli):
    res = cli("init", "--entries", "lab/log")
    assert res.exit_code == 0, res.output
    assert (repo / "lab" / "log" / ".gitattributes").is_file() and "entries_dir: lab/log" in (repo / "logbook.yaml").read_text()
