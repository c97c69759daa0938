"""Shared fixtures: temporary git repositories and in-process CLI calls."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parents[1]

# `local_tsa`: a real RFC 3161 authority (openssl ts -reply) on 127.0.0.1, for every test that wants one.
pytest_plugins = ["tsa_fixture"]

# Every event any test writes, in this process or in a trainer it launches (subprocesses and
# torchrun's workers inherit the environment), is checked against logbook/eventlog/kinds.py.
os.environ["LOGBOOK_STRICT_EVENTS"] = "1"


def git(repo: Path, *args: str) -> str:
    """Run git in `repo` and return stdout (raises on failure)."""
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout


def _isolated_environment(monkeypatch, home: Path) -> None:
    home.mkdir(parents=True, exist_ok=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(home / ".gitconfig"))
    (home / ".gitconfig").write_text("[user]\n\tname = Ada Tester\n\temail = ada@example.org\n[init]\n\tdefaultBranch = main\n")
    monkeypatch.delenv("LOGBOOK_DEBUG", raising=False)
    # `logbook init` and `verify` pin a repository's trust root on first use, in the user's config folder:
    # each test gets its own, so a pin made in one test never applies in another.
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("CI", "true")


@pytest.fixture(autouse=True)
def _isolated_git_identity(monkeypatch, tmp_path_factory):
    """Every test sees the same git identity, no user-level git config, and its own pins file."""
    _isolated_environment(monkeypatch, tmp_path_factory.mktemp("home"))


def _init_repo(r: Path) -> None:
    r.mkdir()
    git(r, "init", "-q", "-b", "main")
    (r / "README.md").write_text("experiments\n")
    git(r, "add", "README.md")
    git(r, "commit", "-q", "-m", "initial")


@pytest.fixture(scope="session")
def _template_repos(tmp_path_factory) -> dict[str, Path]:
    """The two starting repositories, built once per worker: a test gets a copy, not a fresh `git init`.

    Neither holds a path of its own: `logbook init` writes no pin here (no timestamping, no signing), and
    its hooks name only the logbook executable, so a copy elsewhere is the same repository.
    """
    base = tmp_path_factory.mktemp("templates")
    with pytest.MonkeyPatch.context() as mp:
        _isolated_environment(mp, base / "home")
        plain = base / "plain"
        _init_repo(plain)
        mp.chdir(base)
        shutil.copytree(plain, base / "logbook", symlinks=True)
        mp.chdir(base / "logbook")
        from logbook.cli import app

        res = CliRunner().invoke(app, ["init"], catch_exceptions=False)
        assert res.exit_code == 0, res.output
        git(base / "logbook", "add", "-A")
        git(base / "logbook", "commit", "-q", "-m", "logbook init")
        assert not (base / "home" / ".config" / "logbook").exists(), "init now pins: copy the pin too"
    return {"plain": plain, "logbook": base / "logbook"}


def _copy_repo(template: Path, tmp_path: Path, monkeypatch) -> Path:
    r = tmp_path / "repo"
    shutil.copytree(template, r, symlinks=True)
    monkeypatch.chdir(r)
    return r


@pytest.fixture
def repo(tmp_path, monkeypatch, _template_repos) -> Path:
    """A fresh git repository with one commit, as the working directory."""
    return _copy_repo(_template_repos["plain"], tmp_path, monkeypatch)


@dataclass
class CliResult:
    exit_code: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


@pytest.fixture
def cli():
    """Call the logbook CLI in-process: cli("prereg", "--title", ...) -> CliResult."""
    from logbook.cli import app

    def run(*args: str, input: str | None = None) -> CliResult:
        runner = CliRunner()
        res = runner.invoke(app, list(args), input=input, catch_exceptions=False)
        return CliResult(res.exit_code, res.stdout, res.stderr)

    return run


@pytest.fixture
def logbook_repo(tmp_path, monkeypatch, _template_repos) -> Path:
    """A git repository with `logbook init` done and committed, as the working directory."""
    return _copy_repo(_template_repos["logbook"], tmp_path, monkeypatch)
