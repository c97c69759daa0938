"""A team sharing one logbook through git: a bare origin and clones with their own identities.

Each clone is a real `git clone` of a bare repository, with its own
`user.name`/`user.email`, so commits, pushes, pulls, rebases and merges are the
ones a team makes. The logbook CLI runs in-process in whichever clone is the
working directory: `team.at("alice")` makes it so.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass, field
from pathlib import Path


def git(repo: Path, *args: str, check: bool = True) -> str:
    """Run git in `repo`; stdout (raises with git's stderr on failure when `check`)."""
    r = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True)
    if check and r.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed in {repo}:\n{r.stderr}")
    return r.stdout


def head(repo: Path) -> str:
    return git(repo, "rev-parse", "HEAD").strip()


def commit_all(repo: Path, message: str) -> str:
    """Stage everything and commit it; the new commit's id."""
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return head(repo)


def write_record(repo: Path, rel: str, obj: dict) -> Path:
    """A record file under entries/ as the one-file-per-record layout writes them."""
    path = repo / "entries" / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n")
    return path


@dataclass
class Team:
    """A bare `origin` and the clones made of it, by name."""

    base: Path
    monkeypatch: object
    origin: Path = field(init=False)
    clones: dict[str, Path] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.origin = self.base / "origin.git"
        git(self.base, "init", "-q", "--bare", "-b", "main", str(self.origin))

    def clone(self, name: str) -> Path:
        """A fresh clone for `name` (identity `Name <name@lab.example>`), as the working directory."""
        path = self.base / name
        git(self.base, "clone", "-q", str(self.origin), name)
        git(path, "config", "user.name", name.capitalize())
        git(path, "config", "user.email", f"{name}@lab.example")
        git(path, "config", "pull.rebase", "false")
        self.clones[name] = path
        return self.at(name)

    def at(self, name: str) -> Path:
        """Make `name`'s clone the working directory, so the CLI runs there."""
        self.monkeypatch.chdir(self.clones[name])
        return self.clones[name]

    def found(self, cli, name: str) -> Path:
        """`name` starts the lab's repository: a first commit and `logbook init`, pushed."""
        path = self.clone(name)
        (path / "README.md").write_text("the lab's experiments\n")
        commit_all(path, "the lab's repository")
        res = cli("init")
        assert res.exit_code == 0, res.output
        commit_all(path, "logbook init")
        git(path, "push", "-q", "origin", "main")
        return path
