"""The one rule for who is at the keyboard: repository config, then environment, then the OS."""

from __future__ import annotations

import getpass
import socket

import pytest

from logbook.core.errors import RefusedError
from logbook.core.identity import Identity, git_identity, signing_identity
from conftest import git

_ENV = ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL")


@pytest.fixture
def bare_repo(tmp_path, monkeypatch):
    """A git repository where nobody is configured: no user config, no identity in the environment."""
    empty = tmp_path / "empty.gitconfig"
    empty.write_text("")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(empty))
    for name in _ENV:
        monkeypatch.delenv(name, raising=False)
    r = tmp_path / "repo"
    r.mkdir()
    git(r, "init", "-q")
    return r


def test_the_repository_config_comes_first_even_when_the_environment_names_someone(bare_repo, monkeypatch):
    git(bare_repo, "config", "user.name", "Ada Tester")
    git(bare_repo, "config", "user.email", "ada@example.org")
    monkeypatch.setenv("GIT_AUTHOR_NAME", "Grace Hopper")
    monkeypatch.setenv("GIT_AUTHOR_EMAIL", "grace@example.org")
    assert git_identity(bare_repo) == Identity("Ada Tester", "ada@example.org")


def test_the_environment_stands_in_for_missing_config_author_before_committer(bare_repo, monkeypatch):
    monkeypatch.setenv("GIT_COMMITTER_NAME", "Committer")
    monkeypatch.setenv("GIT_COMMITTER_EMAIL", "committer@example.org")
    monkeypatch.setenv("GIT_AUTHOR_NAME", "Grace Hopper")
    assert git_identity(bare_repo) == Identity("Grace Hopper", "committer@example.org")


def test_each_part_falls_back_on_its_own(bare_repo, monkeypatch):
    git(bare_repo, "config", "user.name", "Ada Tester")
    monkeypatch.setenv("GIT_AUTHOR_EMAIL", "ada@env.example")
    assert git_identity(bare_repo) == Identity("Ada Tester", "ada@env.example")


def test_with_nothing_set_the_os_user_and_host_are_a_guess(bare_repo):
    ident = git_identity(bare_repo)
    login = getpass.getuser()
    assert ident == Identity(login, f"{login}@{socket.gethostname()}", guessed=True)
    assert str(ident) == f"{login} <{login}@{socket.gethostname()}>"


def test_a_signature_refuses_a_guessed_identity(bare_repo):
    git(bare_repo, "config", "user.name", "Ada Tester")  # a name alone leaves the email to a guess
    with pytest.raises(RefusedError, match="no git identity: a review is signed") as e:
        signing_identity(bare_repo, "a review")
    assert "git config user.email" in e.value.hint
    git(bare_repo, "config", "user.email", "ada@example.org")
    assert signing_identity(bare_repo, "a review") == Identity("Ada Tester", "ada@example.org")
