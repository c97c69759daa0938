"""Who is at the keyboard: the one place a git identity is looked up.

Notes, reviews, preregistrations, change requests and launches all name a
person; they ask here so that one rule decides who that is everywhere.
"""

from __future__ import annotations

import getpass
import os
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path

from logbook.core.errors import RefusedError

SET_IDENTITY_HINT = 'run `git config user.name "Your Name"` and `git config user.email you@example.org`'


@dataclass(frozen=True)
class Identity:
    """A name and an email, and whether either had to be guessed from the OS."""

    name: str
    email: str
    guessed: bool = False

    def __str__(self) -> str:
        return f"{self.name} <{self.email}>"


def git_identity(root: Path) -> Identity:
    """The identity of whoever works in the repository at `root`, never missing.

    Each of name and email is taken from the first of these that has it:

    1. git config `user.name` / `user.email` as the repository sees it
       (its own config, then the user's, then the system's: git's order);
    2. the environment: `GIT_AUTHOR_NAME` / `GIT_AUTHOR_EMAIL`, then
       `GIT_COMMITTER_NAME` / `GIT_COMMITTER_EMAIL` (a launcher or CI job
       with no git config may still say who it runs for);
    3. the OS: the login name, and `login@host` (then `guessed` is true).

    What signs a record uses `signing_identity`, which refuses a guess.
    """
    name = _git_config(root, "user.name") or _env("GIT_AUTHOR_NAME", "GIT_COMMITTER_NAME")
    email = _git_config(root, "user.email") or _env("GIT_AUTHOR_EMAIL", "GIT_COMMITTER_EMAIL")
    if name and email:
        return Identity(name, email)
    login = _login()
    return Identity(name or login, email or f"{login}@{socket.gethostname()}", guessed=True)


def signing_identity(root: Path, what: str) -> Identity:
    """`git_identity`, or a refusal when part of it would be a guess: a signature names a person.

    `what` completes "no git identity: ... is signed with ...", e.g. "a review".
    """
    ident = git_identity(root)
    if ident.guessed:
        raise RefusedError(f"no git identity: {what} is signed with git's user.name and user.email, "
                           "and they are not set", hint=SET_IDENTITY_HINT)
    return ident


def _git_config(root: Path, key: str) -> str:
    try:
        r = subprocess.run(["git", "config", "--get", key], cwd=root, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return ""  # no git, or a hung one: fall through to the environment
    return r.stdout.strip() if r.returncode == 0 else ""


def _env(*names: str) -> str:
    return next((v for v in (os.environ.get(n, "").strip() for n in names) if v), "")


def _login() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"  # a container user with no passwd entry and no LOGNAME
